"""Claims of arXiv 2308.16898 at the medium rung of the size ladder (issue 23).

The W-dynamics and W-SVM claims draw n ≤ 6, T ≤ 8 and d ≤ 10 (``strategies.cross``). These
claims restate the most important of them on ``strategies.ladder``'s medium box (n, T ≤ 32,
d ≤ 128, a slice of it under ci), where n > d (dependent queries) and n(T − 1) > d² (more
SVM constraints than coordinates of W) are common. W has d² coordinates and the Frobenius
oracle's cost grows with n(T − 1)·d⁴, so d is held below the box where the engine or a solver
must do more than one thing per example:

- the flows (G-EQ, L-LOC): d ≤ 16 (256 coordinates; one flow at n = T = 32 takes 2–25 s);
- the rank (both SVMs, the nuclear one an SDP of side 2d): d ≤ 24 (n = T = 32: 2 s at d = 16,
  28 s at d = 32);
- feasibility (Frobenius solves and LP certificates only): d ≤ 48 (n = T = 32, d = 64: 7 s).

The lower ends of n, T and d are the small claims' own. The statements are the paper's,
unchanged; each premise (equal non-optimal scores and a feasible Att-SVM(opt), independent
queries, a hull selection) is drawn by the same strategy as at the small rung, which rejects a
draw whose oracle does not certify it. Each claim records its sizes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from models.oracles.normsvm import norm_svm
from models.oracles.selection import local_optimality
from strategies.cross import (
    equal_nonopt_cross_instances,
    official_cross_instances,
    with_random_init,
)
from strategies.cross_svm import independent_query_instances, infeasible_cross_instances
from strategies.instances import CrossInstance
from strategies.ladder import RUNGS
from theorems import claim, evidence
from theorems.tfsvm.claims_svm import FARKAS_TOL, farkas_reading, feasibility_solve
from theorems.tfsvm.common_svm import decided_rank, solve
from theorems.tfsvm.common_wgd import official_init_std, w_flow

BOX = RUNGS["medium"]
#: The largest d per kind of claim (module docstring): flows, the nuclear SDP, Frobenius only.
FLOW_D, RANK_D, FEAS_D = 16, 24, 48
N, T = st.integers(1, BOX.n_max), st.integers(2, BOX.T_max)
#: G-EQ's box (d ≥ 5, the small strategy's floor).
MEDIUM_GEQ = {"n": N, "T": T, "d": st.integers(5, FLOW_D)}
#: The official generator for L-LOC's random start, W(0) of the official scale 1/√(3d).
MEDIUM_OFFICIAL = official_cross_instances(n=N, T=T, d=st.integers(2, FLOW_D))


def record_sizes(inst: CrossInstance) -> None:
    """n, T, d and the two regimes the small rung rarely reaches, as metrics of the example."""
    evidence.metric("n", inst.n)
    evidence.metric("T", inst.T)
    evidence.metric("d", inst.d)
    evidence.metric("n > d", float(inst.n > inst.d))
    evidence.metric("n(T − 1) > d²", float(inst.n * (inst.T - 1) > inst.d**2))


# ---- §2.4 G-EQ ----------------------------------------------------------------------------------


@claim("TF-GEQ-GLOBAL-MEDIUM")
@given(inst=with_random_init(equal_nonopt_cross_instances(**MEDIUM_GEQ)))
def test_geq_global_convergence_medium(inst):
    """G-EQ at the medium rung (n, T ≤ 32, d ≤ 16): under Assumption A and η ≤ 1/L_W, if every
    input's non-optimal tokens share one score and Att-SVM(opt) is feasible, then GD from any
    W(0) has ‖W(t)‖ → ∞ and W(t)/‖W(t)‖ → W^mm/‖W^mm‖ (any n ≥ 1)."""
    record_sizes(inst)
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")


@claim("TF-GEQ-GLOBAL-N1-MEDIUM")
@given(inst=with_random_init(equal_nonopt_cross_instances(**{**MEDIUM_GEQ, "n": 1})))
def test_geq_global_single_input_medium(inst):
    """G-EQ for a single input (n = 1) at the medium rung (T ≤ 32, d ≤ 16): equal non-optimal
    scores and Att-SVM(opt) feasible ⇒ gradient flow from any W(0) converges in direction to
    W^mm(opt), with s_opt → 1."""
    record_sizes(inst)
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")


# ---- §2.6 L-LOC ----------------------------------------------------------------------------------


@claim("TF-LLOC-RANDOM-MEDIUM")
@given(inst=MEDIUM_OFFICIAL.flatmap(lambda i: with_random_init(st.just(i), official_init_std(i.d))))
def test_local_convergence_random_init_medium(inst):
    """At the medium rung (n, T ≤ 32, d ≤ 16): from a random W(0), the selection α̂ that gradient
    flow reaches is Frobenius-locally optimal, and W(t)/‖W(t)‖ → W^mm_α̂/‖W^mm_α̂‖."""
    record_sizes(inst)
    lim = w_flow(inst.problem, inst.W0)
    alpha_hat = lim.outcome.selected
    assert lim.diverges, lim.why_not(alpha_hat, "its own")
    evidence.metric("α̂ = opt", float(np.array_equal(alpha_hat, inst.alpha)))
    verdict = local_optimality(inst.problem.prompt.keys, inst.problem.scores, alpha_hat)
    assert verdict.locally_optimal, (
        f"the flow selects α̂ = {alpha_hat.tolist()}, which is not locally optimal: {verdict.reason}"
    )
    assert lim.converged_to(alpha_hat), lim.why_not(alpha_hat, "its own")


# ---- §2.1 RANK, §2.2 FEAS -----------------------------------------------------------------------


@claim("TF-RANK-MEDIUM")
@given(inst=official_cross_instances(n=N, T=T, d=st.integers(2, RANK_D)))
def test_svm_rank_at_most_n_medium(inst):
    """At the medium rung (n, T ≤ 32, d ≤ 24): the Frobenius and the nuclear attention SVMs
    (α = opt) have rank at most the number of inputs: rank W^mm ≤ min(n, d) and
    rank W^mm_⋆ ≤ min(n, d)."""
    record_sizes(inst)
    bound = min(inst.n, inst.d)
    for norm, name in (("fro", "W^mm"), ("nuc", "W^mm_⋆")):
        W = solve(inst, norm, f"Att-SVM ({norm})").W
        rank = decided_rank(W, name)
        evidence.metric(f"rank {name} − min(n, d)", rank - bound)
        assert rank <= bound, f"rank {name} = {rank} > min(n, d) = {bound} (n={inst.n}, d={inst.d})"


@claim("TF-FEAS-SUFF-MEDIUM")
@given(inst=independent_query_instances(n=N, T=T, extra=st.integers(0, FEAS_D - BOX.n_max)))
def test_feasible_for_every_alpha_medium(inst):
    """At the medium rung (n, T ≤ 32, n ≤ d ≤ 48): if the queries z_1, …, z_n are linearly
    independent and every token is a vertex of its input's hull, then Att-SVM(α) is feasible for
    every selection α ∈ [T]^n."""
    record_sizes(inst)
    sol = feasibility_solve(inst)
    assert sol.status != "infeasible", (
        f"Att-SVM(α = {inst.alpha.tolist()}) is infeasible with independent queries "
        f"(n={inst.n}, d={inst.d}): {sol.reason}"
    )


@claim("TF-FEAS-NEC-MEDIUM")
@given(inst=infeasible_cross_instances(n=N, T=T, d=st.integers(1, FEAS_D)))
def test_hull_selection_is_infeasible_medium(inst):
    """At the medium rung (n, T ≤ 32, d ≤ 48): if in some input the selected token x_iα_i equals
    another token of that input, or lies in the convex hull of its other tokens, then Att-SVM(α)
    is infeasible, whatever the queries."""
    record_sizes(inst)
    sol = norm_svm(inst.X, inst.Z, inst.alpha, "fro")
    assert sol.status == "infeasible", (
        f"Att-SVM(α) is {sol.status} although x_iα_i is a {inst.meta['kind']} in input "
        f"{inst.meta['input']}: {sol.reason}"
    )
    y_min, total, residual, ratio = farkas_reading(sol)
    assert y_min >= 0 and total > 0 and ratio <= FARKAS_TOL, (
        f"Farkas vector fails: min y = {y_min:.2e}, Σy = {total:.3g}, ‖Aᵀy‖ = {residual:.2e}"
    )
