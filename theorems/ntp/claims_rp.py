"""The regularization path of 2403.08081 (spec ntp.md §2.8 NTP-RP): W_B = argmin L(W) over
‖W‖_F ≤ B lies on the boundary, W_B/B → W_svm/‖W_svm‖ and P_cyc W_B → W_fin. The problem is
convex (log-sum-exps of linear logits), solved exactly with cvxpy's exponential cones
(Clarabel) at B = 10, 20, 40 on the cyclic draws of the dynamics pool and I2."""

from __future__ import annotations

from functools import cache

import cvxpy as cp
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from theorems import claim, evidence
from theorems.ntp.common import POOL, one_minus_corr, pool_case, pool_data

RADII = (10.0, 20.0, 40.0)
#: Spec §2.8 acceptance: a solve counts only if |‖W_B‖ − B| ≤ 1e-3·B and its excess loss is
#: ≥ 1e-7 (below, the solver's tolerance corrupts the direction).
BOUNDARY_TOL, MIN_EXCESS = 1e-3, 1e-7
#: Spec §6.2: 1 − corr ≤ 2e-2 at B = 40 and decreasing in B; ‖P_cyc W_40 − W_fin‖ ≤ 5e-3.
DIR_40, FIN_40 = 2e-2, 5e-3

#: Clarabel's default gaps (1e-8) stopped short of the boundary at B = 40 (‖W_B‖ = 39.28 and
#: 39.94 on 2 of 7 cases), where the loss is within ~1e-6 of its floor; gaps of 1e-10 reach it
#: (1e-12 ends "optimal_inaccurate"). Solver accuracy, not a bound of the claim.
CLARABEL_OPTS = {"tol_gap_abs": 1e-10, "tol_gap_rel": 1e-10, "max_iter": 500}

RP_CASES = tuple(p for p in POOL if p != "I1")


@cache
def path(name: str):
    """[(status, W_B or None)] for B in RADII."""
    data = pool_data(name)
    E, d = data.embeddings, data.dim
    W = cp.Variable((d, d))
    B = cp.Parameter(nonneg=True)
    terms = []
    for seq, y in zip(data.sequences, data.labels, strict=True):
        toks = sorted(set(seq))
        logits = cp.hstack([E[v] @ W @ E[seq[-1]] for v in toks])
        terms.append(cp.log_sum_exp(logits) - E[y] @ W @ E[seq[-1]])
    prob = cp.Problem(cp.Minimize(sum(terms) / data.n), [cp.norm(W, "fro") <= B])
    out = []
    for radius in RADII:
        B.value = radius
        try:
            prob.solve(solver=cp.CLARABEL, **CLARABEL_OPTS)
        except cp.error.SolverError as exc:
            out.append((f"solver_error: {exc}", None))
            continue
        out.append((prob.status, None if W.value is None else np.array(W.value)))
    return out


@claim("NTP-RP")
@given(name=st.sampled_from(RP_CASES))
def test_regularization_path(name):
    """The regularization path W_B = argmin_{‖W‖ ≤ B} L(W) lies on the boundary, converges in
    direction to W_svm, and its cyclic part converges to W_fin."""
    inst, lim = pool_case(name)
    W_svm = evidence.solved(lim.svm, "graph-SVM").W
    model = inst.model
    gaps = []
    for radius, (status, W) in zip(RADII, path(name), strict=True):
        if status != "optimal" or W is None:
            evidence.inconclusive(f"RP at B = {radius:g}: {status}")
        norm = float(np.linalg.norm(W))
        if abs(norm - radius) > BOUNDARY_TOL * radius:
            evidence.inconclusive(f"RP at B = {radius:g}: ‖W_B‖ = {norm:.4f} off the boundary")
        if model.loss(W) - lim.fin.loss < MIN_EXCESS:
            evidence.inconclusive(f"RP at B = {radius:g}: excess loss below the solver tolerance")
        gaps.append(one_minus_corr(W, W_svm))
    fin = float(np.linalg.norm(lim.p_cyc(path(name)[-1][1]) - lim.fin.W))
    evidence.slack("1 − corr(W_40, W_svm)", gaps[-1], DIR_40)
    evidence.slack("‖P_cyc W_40 − W_fin‖", fin, FIN_40)
    assert gaps[0] > gaps[1] > gaps[2], f"1 − corr not decreasing in B: {gaps}"
    assert gaps[-1] <= DIR_40, f"1 − corr(W_40, W_svm) = {gaps[-1]:.3e} > {DIR_40:g}"
    assert fin <= FIN_40, f"‖P_cyc W_40 − W_fin‖ = {fin:.3e} > {FIN_40:g}"
