"""Claims of arXiv 2410.14581 at the medium rung of the size ladder (issue 23).

The mirror-descent claims draw the official local-convergence shape (n, T, d) = (6, 8, 10)
(``strategies.mirror.OFFICIAL_MD``). These claims restate the most important of them on
``strategies.ladder``'s medium box (n, T ≤ 32, d ≤ 128, a slice of it under ci), where
n(T − 1) > d² (more ℓp-SVM constraints than coordinates of W) is the common case. Each example
runs the official protocol (normalised ℓp-MD, lr 0.1, 1500 / 2000 / 20000 steps at p = 1.75 /
2 / 3, W(0) ~ N(0, 1) entrywise) and solves ℓq-AttSVMs, power-cone programs in d² variables
with n(T − 1) constraints. At n = T = 32 the ℓ3 run takes 1.9 s at d = 10 and 2.5 s at d = 12
(~5 s at d = 16), and each ℓq-SVM 0.5 s at d = 10, 0.8 s at d = 12 and 1.5–1.9 s at d = 16
(5 s at d = 24). The three claims must decide their ci examples (16 in all, each one to
three runs and one to three SVMs) in 20 CPU-seconds, so d is held at d ≤ 12, just above the
official d = 10; n and T cover the box. Measured under ci: 4.2 s with the two saved
counterexamples replayed (the first search, which shrinks them, took 62 s once).

The lower ends of n, T and d are the small claims' own (``strategies.mirror.SMALL``). The
statements and their readings (BREGMAN_BOUND, the official budgets) are the paper's and the
small claims', unchanged; α̂'s ℓp-SVM is feasible whenever the run separates α̂ strictly (W/min
margin is feasible), so no draw is rejected for the premise. Each claim records its sizes.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from strategies.cross import official_cross_instances, with_random_init
from strategies.instances import CrossInstance
from strategies.ladder import RUNGS
from theorems import claim, evidence
from theorems.mirror.claims_md import (
    _far,
    _own_bregman,
    closest_svm,
    local_bregman_rise,
)
from theorems.mirror.common import BREGMAN_BOUND, PS, run_md

BOX = RUNGS["medium"]
#: The largest d (module docstring: one ℓ3 run and three ℓq-SVMs per example at n = T = 32).
MD_D = 12
N, T = st.integers(1, BOX.n_max), st.integers(2, BOX.T_max)
#: The official local-convergence instances on the medium box: the official generator at drawn
#: (n, T, d), W(0) ~ N(0, 1) entrywise (the official ``--std 1``), as ``OFFICIAL_MD``.
MEDIUM_MD = with_random_init(official_cross_instances(n=N, T=T, d=st.integers(2, MD_D)), scale=1.0)


def record_sizes(inst: CrossInstance) -> None:
    """n, T, d and the regime the official shape never reaches, as metrics of the example."""
    evidence.metric("n", inst.n)
    evidence.metric("T", inst.T)
    evidence.metric("d", inst.d)
    evidence.metric("n(T − 1) > d²", float(inst.n * (inst.T - 1) > inst.d**2))


# ---- §2.10 MD-DIR, MD-OWN-P: the official local-convergence protocol --------------------------


@claim("MD-DIR-MEDIUM")
@given(inst=MEDIUM_MD)
def test_md_directional_convergence_medium(inst):
    """Directional convergence at the medium rung (n, T ≤ 32, d ≤ 12), as read with the official
    step budgets: normalised ℓp mirror descent (p = 1.75, 2, 3) from W(0) ~ N(0, 1) converges in
    direction to the ℓp-AttSVM W^mm_α̂(ℓp) of the selection α̂ it reaches."""
    record_sizes(inst)
    own = {p: _own_bregman(inst, p) for p in PS}
    far = [_far(D, result) for p, (D, result) in own.items() if not D <= BREGMAN_BOUND[p]]
    assert not far, "; ".join(far) + f" (n={inst.n}, T={inst.T}, d={inst.d})"


@claim("MD-OWN-P-MEDIUM")
@given(inst=MEDIUM_MD, p=st.sampled_from(PS))
def test_md_own_p_closest_medium(inst, p):
    """ℓp mirror descent ends closest to its own SVM at the medium rung (n, T ≤ 32, d ≤ 12): among
    the ℓq-AttSVMs W^mm_α̂(ℓq) at its selection α̂, q ∈ {1.75, 2, 3}, the one W_MD-p correlates
    best with is q = p."""
    record_sizes(inst)
    result = run_md(inst, p)
    best, text = closest_svm(result, p)
    assert best == p, (
        f"MD-{p:g} is closest to the ℓ{best:g}-SVM: corr = {text} (n={inst.n}, T={inst.T}, "
        f"d={inst.d})"
    )


@claim("MD-BREGMAN-MONOTONE-LOCAL-MEDIUM")
@given(inst=MEDIUM_MD, p=st.sampled_from(PS))
def test_bregman_eventually_monotone_local_medium(inst, p):
    """At the medium rung (n, T ≤ 32, d ≤ 12): once normalised ℓp mirror descent has settled on
    its final selection α̂, and α̂ is ℓp-locally optimal with a margin gap, D_ψ(Ŵ^mm_α̂(ℓp), Ŵ(k))
    is non-increasing in k."""
    record_sizes(inst)
    met, rise = local_bregman_rise(inst, p)
    if not met:
        return
    assert rise is None, rise
