"""Negative controls for 2402.18551 (spec ntp §3, C11–C16): plausible wrong statements, each
registered ``expected = "refuted"``; each passes only when its own assertion fails on an example,
for the reason the spec gives.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from models.oracles.svm import solve_margin_qp
from strategies.instances import NTP_SEPARABLE
from strategies.ntp_linear import (
    SEEDS,
    fig1_instances,
    incompatible_instances,
    overparameterized_instances,
    resampled,
)
from theorems import claim, evidence
from theorems.ntplinear.claims_dynamics import CE_TOL, DIR_TOL, PF_TOL
from theorems.ntplinear.common import (
    GD_STEPS,
    iterate,
    multiclass_rows,
    nonseparable_cases,
    one_minus_corr,
    separable_cases,
    w_mm,
    w_star,
)

#: C15: "depends on p̂" read as "moves by more than the invariance tolerance when p̂ is
#: resampled on the same supports"; "depends only on the supports" as "moves by at most it"
#: (spec §6.2 invariances: 1e-8).
INVARIANCE_TOL = 1e-8


@claim("LIN-C11-COMPATIBLE-ENOUGH")
def test_compatible_enough():
    """(Wrong) Compatibility alone suffices: whenever the data are NTP_H-compatible, GD drives
    CE(W_k) → H."""
    for case in evidence.each(nonseparable_cases()):
        p = case.inst.problem
        ex = p.excess_loss(iterate(case, GD_STEPS))
        evidence.metric("CE − H at 1e5 (compatible, not separable)", ex)
        evidence.metric("‖W‖ at 1e5", float(np.linalg.norm(iterate(case, GD_STEPS))))
        assert ex <= CE_TOL, (
            f"compatible data: CE − H = {ex:.4f} > {CE_TOL} after {GD_STEPS} GD steps "
            f"(separable {p.ntp_svm().separable}; {case.label})"
        )


@claim("LIN-C12-SEPARABLE-COMPATIBLE")
@given(inst=incompatible_instances())
def test_separable_implies_compatible(inst):
    """(Wrong) NTP-separable data are also NTP_H-compatible."""
    comp = inst.problem.compatibility()
    svm = inst.problem.ntp_svm()
    if svm.separable is None:
        evidence.inconclusive(f"NTP-SVM oracle: {svm.status}")
    evidence.premise(bool(svm.separable), "NTP-separable")
    evidence.metric("log-odds residual", comp.residual)
    assert comp.compatible, (
        f"separable but the log-odds equations have residual {comp.residual:.3f} "
        f"(contexts {inst.meta['repeat']} share h̄ and support, not p̂)"
    )


def _one_hot_svm(problem) -> np.ndarray | None:
    """The multiclass max-margin W of the argmax labels y_j = argmax p̂_j (margin ≥ 1 against
    every other token), or None if infeasible or undecided."""
    rows = multiclass_rows(problem, problem.P.argmax(axis=1))
    sol = solve_margin_qp(rows, np.ones(len(rows)))
    return sol.x.reshape(problem.vocab, problem.dim) if sol.status == "optimal" else None


@claim("LIN-C13-ONE-HOT-SVM")
def test_gd_one_hot_svm():
    """(Wrong) GD converges in direction to the one-hot SVM of the argmax tokens (the multiclass
    max-margin classifier of y_j = argmax p̂_j), not to the NTP-SVM."""
    for case in evidence.each(separable_cases()):
        p = case.inst.problem
        onehot = _one_hot_svm(p)
        if onehot is None:
            evidence.reject("the argmax labels are not multiclass separable")
        Wk = iterate(case, GD_STEPS) - w_star(p)
        gap = one_minus_corr(Wk, onehot)
        evidence.metric("1 − corr(W_k − W*, W^mm) (the right SVM)", one_minus_corr(Wk, w_mm(p)))
        assert gap <= DIR_TOL, (
            f"1 − corr(W_k − W*, one-hot SVM) = {gap:.3f} > {DIR_TOL} at k = {GD_STEPS} "
            f"({case.label})"
        )


def _absolute_log_probs(problem) -> np.ndarray:
    """W_abs: the minimum-norm W with e_zᵀ W h̄_j = log p̂_jz for every z ∈ S_j (absolute
    log-probabilities, the wrong target of C14). Its log-odds are W*'s, so P_F W_abs = W*: the
    wrong statement is that the finite part is W_abs itself, normaliser included."""
    rows, b = [], []
    for j in range(problem.m):
        for z in np.flatnonzero(problem.support[j]):
            M = np.zeros((problem.vocab, problem.dim))
            M[z] = problem.H[:, j]
            rows.append(M.ravel())
            b.append(np.log(problem.P[j, z]))
    w = np.linalg.lstsq(np.array(rows), np.array(b), rcond=None)[0]
    return w.reshape(problem.vocab, problem.dim)


@claim("LIN-C14-ABSOLUTE-LOGPROBS")
def test_gd_absolute_log_probs():
    """(Wrong) GD's finite part fits the absolute log-probabilities: P_F(W_k) converges to the
    minimum-norm solution of e_zᵀ W h̄_j = log p̂_jz, z ∈ S_j, rather than to the log-odds W*."""
    for case in evidence.each(separable_cases()):
        p = case.inst.problem
        PW = p.project_F(iterate(case, GD_STEPS))
        dist = float(np.linalg.norm(PW - _absolute_log_probs(p)))
        evidence.metric("‖P_F W_k − W*‖ (the right target)", float(np.linalg.norm(PW - w_star(p))))
        assert dist <= PF_TOL, (
            f"‖P_F W_k − W_abs‖ = {dist:.3f} > {PF_TOL} at k = {GD_STEPS} ({case.label})"
        )


@claim("LIN-C15-WMM-DEPENDS-ON-P")
@given(inst=overparameterized_instances(extra=st.integers(0, 2)), seed=SEEDS)
def test_wmm_depends_on_p(inst, seed):
    """(Wrong) The NTP-SVM W^mm depends on the next-token probabilities p̂, not only on the
    supports: resampling p̂ on the same supports moves it."""
    Wm = w_mm(inst.problem)
    Wm2 = w_mm(resampled(inst, seed).problem)
    delta = float(np.linalg.norm(Wm2 - Wm) / np.linalg.norm(Wm))
    assert delta > INVARIANCE_TOL, f"resampling p̂ moved W^mm by only {delta:.1e} (relative)"


@claim("LIN-C15-WSTAR-SUPPORTS-ONLY")
@given(inst=overparameterized_instances(extra=st.integers(0, 2)), seed=SEEDS)
def test_wstar_supports_only(inst, seed):
    """(Wrong) W* depends on the data only through the supports, as W^mm does: resampling p̂ on
    the same supports leaves it unchanged."""
    Ws = w_star(inst.problem)
    Ws2 = w_star(resampled(inst, seed).problem)
    delta = float(np.linalg.norm(Ws2 - Ws) / max(1.0, np.linalg.norm(Ws)))
    evidence.metric("‖ΔW*‖/max(1, ‖W*‖)", delta)
    assert delta <= INVARIANCE_TOL, f"resampling p̂ moved W* by {delta:.3f} (relative)"


@claim("LIN-C16-SEPARABILITY-NEEDS-D-GT-M")
@given(inst=fig1_instances(d=2))
def test_separability_needs_overparameterization(inst):
    """(Wrong) NTP-separability needs over-parameterization: data with d ≤ m are never
    NTP-separable."""
    svm = inst.problem.ntp_svm()
    if svm.separable is None:
        evidence.inconclusive(f"NTP-SVM oracle: {svm.status}")
    assert not svm.separable, (
        f"d = {inst.dim} ≤ m = {inst.m} and NTP-separable (certified: ‖W^mm‖ = "
        f"{np.linalg.norm(svm.W):.3f}; {sorted(inst.assumptions)})"
    )
    assert NTP_SEPARABLE not in inst.assumptions
