"""Negative controls for the W-dynamics of 2308.16898 (spec tfsvm §5 F5, F6, F7, F11, F14,
F19, and the G-EQ lemma without equal scores, §2.4).

Each control states a plausible WRONG variant as a property with ``expected="refuted"``: it
passes only when the Hypothesis search finds an instance that violates it, and the failing
assertion is the wrong statement's own. Nothing is hard-coded to fail: every control searches
a strategy, and a machinery failure (solver, undecided flow) is inconclusive, never a
counterexample.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from models.problems.cross import correlation, w_gd
from strategies.combinators import SEEDS, seeded
from strategies.cross import (
    cross_cone_inits,
    local_opt_cross_instances,
    official_cross_instances,
    prescribed_score_instances,
    with_random_init,
)
from strategies.cross_dynamics import nonlocal_alpha_instances
from theorems import claim, evidence
from theorems.tfsvm.common_wgd import (
    decisive,
    descent_value,
    frobenius_svm,
    naive_gradient,
    official_init_std,
    random_matrices,
    top_two_gap,
    w_flow,
)

DTYPE = torch.float64

# ---- what each wrong statement asserts -----------------------------------------------------------
#: F6: the cones of TF-LLOC-CONE's scan up to R0 = 20 (spec F6: "R0 ≤ 20").
F6_CONES = ((2.0, 1e-2), (5.0, 3e-3), (20.0, 3e-4))
#: F7: "R0 = 2 suffices" (spec F7), with TF-LLOC-CONE's widest cone at that radius.
F7_CONE = (2.0, 1e-2)
#: F11: the naive gradient "has the right direction": cos with the exact one ≥ this. Drawn on
#: the SVM ray at a smallest top-two logit gap in [5, 60] (spec §6: cos 1.0 up to gap 22,
#: 0.91 at 32, −0.17 at 49; underflow to exact zero only near 745).
F11_COS = 0.99
F11_GAPS = (5.0, 60.0)
#: F14: "L → 0" means L eventually below any ε; ε = 1e-3 (the official instances' floors
#: (1/n)Σℓ(γ_iα) are ≥ ℓ(1) = 0.31, unit tokens and head).
F14_EPS = 1e-3
#: F19: "1 − corr(W(k), W^mm) ≤ C/k" for plain GD, η = 1 (spec F19), with a generous C.
F19_C = 10.0
F19_CHECKPOINTS = (100, 500, 1000, 2000)
F19_ETA = 1.0
#: The G-EQ lemma's sample: random W of Frobenius norm 0.1–10 (spec §2.4), 20 per example.
W_NORMS = (0.1, 10.0)
POINTS_PER_EXAMPLE = 20


# ---- F5 ------------------------------------------------------------------------------------------


@claim("TF-C-GLOBAL-ALWAYS")
@given(inst=with_random_init(official_cross_instances(n=6, T=8, d=10), scale=official_init_std(10)))
def test_f5_global_always(inst):
    """(Wrong) GD from a random W(0) always selects the globally optimal tokens and converges
    in direction to W^mm(opt)."""
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")


# ---- F6, F7: L-LOC without its hypotheses --------------------------------------------------------


@claim("TF-C-ANY-ALPHA")
@given(
    inst=nonlocal_alpha_instances().flatmap(
        lambda i: st.sampled_from(F6_CONES).flatmap(lambda c: cross_cone_inits(i, *c))
    )
)
def test_f6_any_alpha_attracts(inst):
    """(Wrong: L-LOC without local optimality) Any selection α with a feasible Att-SVM
    attracts GD: from the cone {‖W‖ = R0, 1 − cos(W, W^mm_α) ≤ ε} with R0 ≤ 20, gradient
    flow converges in direction to W^mm_α."""
    evidence.metric("R0", inst.meta["cone"]["R0"])
    evidence.metric("score excess of the beating support token", inst.meta["beaten_by"])
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the non-locally-optimal")


@claim("TF-C-SMALL-R0")
@given(inst=local_opt_cross_instances().flatmap(lambda i: cross_cone_inits(i, *F7_CONE)))
def test_f7_small_r0(inst):
    """(Wrong: L-LOC with a fixed small R0) For every Frobenius-locally-optimal α, gradient flow
    from the cone {‖W‖ = 2, 1 − cos(W, W^mm_α) ≤ 1e-2} converges in direction to W^mm_α."""
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the locally-optimal")


# ---- F11 -----------------------------------------------------------------------------------------


def naive_and_exact(inst, gap: float, seed: int) -> tuple[float, float]:
    """(cos(naive ∇L, exact ∇L), the smallest top-two logit gap) at a point of the SVM ray
    W ∝ W^mm/‖W^mm‖ + 1e-3·E (E a seeded unit matrix) scaled to smallest top-two gap ``gap``."""
    problem = inst.problem
    W_mm = frobenius_svm(inst, inst.alpha, "Att-SVM(opt)")
    E = torch.randn(inst.d, inst.d, generator=seeded(seed), dtype=DTYPE).numpy()
    direction = W_mm / np.linalg.norm(W_mm) + 1e-3 * E / np.linalg.norm(E)
    W = direction * gap / top_two_gap(problem, direction)
    naive = naive_gradient(problem, W)
    _, exact = problem.gradient_log(W)
    cos = correlation(naive, exact)
    evidence.metric("smallest top-two logit gap", top_two_gap(problem, W))
    evidence.finite("cos(naive ∇L, exact ∇L)", cos)
    evidence.metric("cos(naive ∇L, exact ∇L)", cos)
    return cos, top_two_gap(problem, W)


@claim("TF-C-NAIVE")
@given(inst=official_cross_instances(n=6, T=8, d=10), gap=st.floats(*F11_GAPS), seed=SEEDS)
def test_f11_naive_direction(inst, gap, seed):
    """(Wrong) Naive float64 training follows the true gradient direction at any length: along the
    SVM ray, cos(naive ∇L, exact ∇L) ≥ 0.99."""
    cos, reached = naive_and_exact(inst, gap, seed)
    assert cos >= F11_COS, (
        f"cos(naive ∇L, exact ∇L) = {cos:.4f} < {F11_COS} at smallest top-two logit gap "
        f"{reached:.2f} (seed {inst.seed})"
    )


# ---- F14 -----------------------------------------------------------------------------------------


@claim("TF-C-LOSS-ZERO")
@given(inst=with_random_init(official_cross_instances()))
def test_f14_loss_tends_to_zero(inst):
    """(Wrong) With the head v fixed, the loss tends to 0 under W-training: L(W(t)) → 0 once
    gradient flow on W has converged in direction."""
    lim = w_flow(inst.problem, inst.W0)
    if not lim.diverges:
        evidence.inconclusive(f"flow {lim.kind}: {lim.reason}")
    loss = float(inst.problem.prompt.loss_value(lim.outcome.p))
    floor = inst.problem.loss_floor(lim.outcome.selected)
    evidence.metric("loss floor (1/n)Σℓ(γ_iα̂)", floor)
    assert loss <= F14_EPS, (
        f"L(W) = {loss:.4g} > {F14_EPS:g} at ‖W‖ = {float(lim.outcome.p.norm()):.3g} "
        f"(directional limit reached); the floor of the selection is {floor:.4g}"
    )


# ---- F19 -----------------------------------------------------------------------------------------


@claim("TF-C-GD-RATE")
@given(inst=official_cross_instances(n=6, T=8, d=10))
def test_f19_gd_rate(inst):
    """(Wrong) Plain GD converges in direction at rate 1/k: from W(0) = 0 with η = 1,
    1 − corr(W(k), W^mm_α̂) ≤ C/k, α̂ the selection GD reaches."""
    problem = inst.problem
    run = w_gd(problem, None, eta=F19_ETA, steps=max(F19_CHECKPOINTS), record_every=100)
    W_mm = frobenius_svm(problem, problem.selected(run.W), "Att-SVM(α̂)")
    for k in F19_CHECKPOINTS:
        gap = 1.0 - correlation(run.Ws[list(run.steps).index(k)], W_mm)
        evidence.slack(f"k·(1 − corr) / C at k = {k}", k * gap, F19_C)
        assert gap <= F19_C / k, f"1 − corr(W(k), W^mm_α̂) = {gap:.4g} > {F19_C:g}/k at k = {k}"


# ---- the G-EQ lemma without equal scores ---------------------------------------------------------


def decided_descent_signs(problem, W_mm, seed: int):
    """At each random W of Frobenius norm 0.1–10 (computed one at a time): (‖W‖, the sign of
    ⟨∇L(W), W^mm⟩, its size relative to its largest term), where the log-space sum kept its
    sign (``decisive``); the points whose sum cancelled are counted and recorded at the end."""
    undecided = 0
    for W in random_matrices(seeded(seed), problem.d, POINTS_PER_EXAMPLE, *W_NORMS):
        log_value, sign, log_top = descent_value(problem, W, W_mm, None)
        if not decisive(log_value, log_top):
            undecided += 1
            continue
        yield float(np.linalg.norm(W)), sign, math.exp(log_value - log_top)
    evidence.metric("points whose sign cancelled below 1e-10", undecided)


@claim("TF-C-GEQ-LEMMA-RANDOM")
@given(inst=prescribed_score_instances(), seed=SEEDS)
def test_geq_lemma_random_scores(inst, seed):
    """(Wrong: the G-EQ lemma without equal non-optimal scores) For any scores, with
    Att-SVM(opt) feasible, ⟨∇L(W), W^mm⟩ < 0 for every W."""
    W_mm = frobenius_svm(inst, inst.alpha, "Att-SVM(opt)")
    for norm, sign, size in decided_descent_signs(inst.problem, W_mm, seed):
        assert sign < 0, (
            f"⟨∇L(W), W^mm⟩ > 0 (relative size {size:.2g}) at ‖W‖ = {norm:.3g} (seed {inst.seed})"
        )
