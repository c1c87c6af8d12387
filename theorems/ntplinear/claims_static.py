"""The static claims of 2402.18551 (spec ntp §1.3, §2.11, §2.12, §2.16): the entropy floor, the
conditions (Prop. 1's exact bound, Lemma 1 and its refinement d = m, Remark 1), the structure
of W* and W^mm, and the autoregressive pooling. No dynamics: a few certified solves per example.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from models.oracles.svm import solve_margin_qp
from strategies.instances import FULL_RANK_CONTEXTS
from strategies.ntp_linear import (
    SEEDS,
    linear_instances,
    one_hot_instances,
    overparameterized_instances,
    pooled_prefix_instance,
    resampled,
    separable_fig1_instances,
    twin_token_instances,
)
from theorems import claim, evidence
from theorems.ntplinear.common import (
    all_pair_rows,
    log_odds_residual,
    multiclass_rows,
    project_rows,
    w_mm,
    w_star,
)

# ---- tolerances ----------------------------------------------------------------------------------

#: LIN-ENT: CE and H are O(1) sums of ≤ 8·6 float64 terms: their difference agrees with the
#: log-space excess to 1e-12 (absolute), four decades above rounding.
IDENTITY_TOL = 1e-12
#: The norms of the random W at which CE is compared (moderate: the KL part stays ≫ 1e-12).
W_NORMS = (0.1, 1.0, 10.0)
#: LIN-COND-PROP1: the scales R of W* + R·W^mm.
PROP1_R = (1.0, 3.0, 10.0, 30.0)
#: Spec §6.2 SVM certificates / invariances: W^mm and subspace relations to 1e-8 (relative to
#: max(1, ‖W‖)); the oracle's KKT residuals are ≤ 1e-8 (models.ntp.qp.KKT_TOL).
SVM_TOL = 1e-8
#: LIN-SUB-TWINS and LIN-FIG2: twin rows of W^mm agree to the spec's 1e-8. Symmetry makes the
#: optimum's twin rows equal, but the oracle's point is only certified to ~1e-7 of it (√ of its
#: KKT residual), so no derivation reaches 1e-8; calibrated on draws apart from the tested ones.
TWIN_TOL = evidence.calibrated(
    SVM_TOL,
    "LIN-SUB-TWINS' strategy under ci-random seeds 11–14 (4 × 40 draws, 2026-12-03): worst "
    "2.2e-14; kept at the spec's 1e-8 (§6.2), not at 100× that: equal twin rows below the "
    "certificate's 1e-7 rest on the solver treating the two tokens alike, which another BLAS "
    "need not",
)
#: W* solves the log-odds equations to this (spec §6.2: lstsq residual ≤ 1e-9 means compatible).
COMPAT_TOL = 1e-9
#: LIN-AR: the pooled CE and the sequence average are the same sum in another order (≤ 200
#: O(1) terms): 1e-12 relative.
POOL_TOL = 1e-12


def _rel(A, B) -> float:
    return float(np.linalg.norm(A - B) / max(1.0, np.linalg.norm(B)))


def _random_W(inst, seed: int, norm: float) -> np.ndarray:
    W = np.random.default_rng(seed).standard_normal((inst.vocab, inst.dim))
    return W * norm / np.linalg.norm(W)


# ---- §2.11 LIN-ENT, LIN-COND ---------------------------------------------------------------------

#: How LIN-ENT's bound is derived (`_entropy_rounding`).
ENTROPY_ROUNDING = (
    "CE, H and the log-space excess are each Σ_j π̂_j Σ_{z∈S_j} p̂_jz·t_jz with weights summing to "
    "1, terms t built from the logits W h̄_j (d-term sums), log-sum-exps over V entries, log p̂ "
    "and a softplus: each term errs by ≤ (V + d + 6)·u·S and the weighted sums add (m + V)·u·S, "
    "S = the largest |logit| + |LSE| + |log p̂| of the instance at W; the three together: "
    "≤ 3(m + 2V + d + 6)·u·S (absolute), never above the former 1e-12. A wrong identity (the "
    "off-support term dropped) is off by Σ_j π̂_j softplus(LSE_off − LSE_S), not by rounding."
)


def _entropy_rounding(problem, W) -> float:
    """ENTROPY_ROUNDING's bound on |CE − H − excess| at W."""
    logits = W @ problem.H
    lse = float(np.abs(np.logaddexp.reduce(logits, axis=0)).max())
    logP = np.log(np.where(problem.support, problem.P, 1.0))
    S = float(np.abs(logits).max()) + lse + float(np.abs(logP).max())
    V, m, d = problem.vocab, problem.m, problem.dim
    return 3 * (m + 2 * V + d + 6) * 2.0**-53 * S


@claim("LIN-ENT")
@given(inst=linear_instances(), seed=SEEDS)
def test_entropy_floor(inst, seed):
    """CE(W) > H for every finite W once some support S_j is smaller than the vocabulary: the
    entropy is the loss's floor, and CE = H + Σ_j π̂_j KL(p̂_j ‖ softmax(W h̄_j))."""
    problem = inst.problem
    evidence.premise(bool((problem.support.sum(axis=1) < problem.vocab).any()), "some S_j < V")
    H = problem.entropy()
    for norm in W_NORMS:
        W = _random_W(inst, seed, norm)
        ce, excess = problem.loss(W), problem.excess_loss(W)
        tol = min(IDENTITY_TOL, _entropy_rounding(problem, W))
        gap = abs(ce - H - excess)
        evidence.slack("|CE − H − excess| (absolute)", gap, tol, derivation=ENTROPY_ROUNDING)
        assert excess > 0 and ce > H, f"CE − H = {ce - H:.3e}, excess {excess:.3e} at ‖W‖ = {norm}"
        assert gap <= tol, (
            f"CE − H = {ce - H:.15e} but Σπ̂ KL + off-mass term = {excess:.15e} at ‖W‖ = {norm}"
        )


@claim("LIN-COND-PROP1")
@given(inst=overparameterized_instances(extra=st.integers(0, 2)))
def test_prop1_bound(inst):
    """Prop. 1: if the data are NTP_H-compatible and NTP-separable, CE(W* + R·W^mm) → H; the
    proof's bound CE(W* + R·W^mm) ≤ H + V e^{‖W*‖M} e^{−R}, M = √2 max_j ‖h̄_j‖."""
    problem = inst.problem
    Ws, Wm = w_star(problem), w_mm(problem)
    M = math.sqrt(2) * float(np.linalg.norm(problem.H, axis=0).max())
    logC = math.log(problem.vocab) + float(np.linalg.norm(Ws)) * M
    for R in PROP1_R:
        excess = problem.excess_loss(Ws + R * Wm)
        bound = math.exp(logC - R)
        evidence.slack("(CE − H) / (C e^{−R})", excess, bound)
        assert excess <= bound, f"CE − H = {excess:.3e} > C e^(−R) = {bound:.3e} at R = {R}"


@claim("LIN-COND-LEMMA1")
@given(inst=overparameterized_instances(extra=st.integers(1, 3)))
def test_lemma1(inst):
    """Lemma 1: if d > m and the context embeddings H̄ have full rank, the data are both
    NTP_H-compatible and NTP-separable."""
    problem = inst.problem
    assert problem.dim > problem.m and FULL_RANK_CONTEXTS in inst.assumptions
    comp, svm = problem.compatibility(), problem.ntp_svm()
    if svm.separable is None:
        evidence.inconclusive(f"NTP-SVM oracle: {svm.status}")
    evidence.metric("log-odds residual", comp.residual)
    assert comp.compatible and svm.separable, (
        f"d = {problem.dim} > m = {problem.m}, rank m: compatible {comp.compatible} (residual "
        f"{comp.residual:.2e}), separable {svm.separable}"
    )


@claim("LIN-COND-LEMMA1-DM")
@given(inst=overparameterized_instances(extra=0))
def test_lemma1_d_equals_m(inst):
    """(Refinement [D]) Lemma 1 holds at d = m: full-rank H̄ (rank m) suffices for both
    NTP_H-compatibility and NTP-separability."""
    problem = inst.problem
    comp, svm = problem.compatibility(), problem.ntp_svm()
    if svm.separable is None:
        evidence.inconclusive(f"NTP-SVM oracle: {svm.status}")
    assert comp.compatible and svm.separable, (
        f"d = m = {problem.m}, rank m: compatible {comp.compatible} (residual "
        f"{comp.residual:.2e}), separable {svm.separable}"
    )


@claim("LIN-COND-REMARK1")
@given(inst=one_hot_instances())
def test_remark1_one_hot(inst):
    """Remark 1: if every support is one token, F = {0} and NTP-separability is plain multiclass
    separability; W^mm is the multiclass max-margin classifier of the labels S_j = {y_j}."""
    problem = inst.problem
    assert problem.dim_F == 0, f"dim F = {problem.dim_F} with one-token supports"
    rows = multiclass_rows(problem, problem.support.argmax(axis=1))
    multi = solve_margin_qp(rows, np.ones(len(rows)), tol=SVM_TOL)
    svm = problem.ntp_svm()
    if multi.status not in ("optimal", "infeasible") or svm.separable is None:
        evidence.inconclusive(f"oracles: multiclass {multi.status}, NTP-SVM {svm.status}")
    assert svm.separable == (multi.status == "optimal"), (
        f"NTP-separable {svm.separable}, multiclass separable {multi.status == 'optimal'}"
    )
    if svm.separable:
        err = _rel(svm.W, multi.x.reshape(svm.W.shape))
        evidence.slack("‖W^mm − W_multiclass‖/max(1, ‖·‖)", err, SVM_TOL, derivation=SAME_QP)
        assert err <= SVM_TOL, f"‖W^mm − W_multiclass‖ = {err:.2e} > {SVM_TOL:g}"


# ---- §2.12 LIN-SUB -------------------------------------------------------------------------------


#: How LIN-SUB-F's residual bound is derived (`_subspace_bounds`).
LSTSQ_RESIDUAL = (
    "W* is numpy's least-squares solution of the anchored log-odds equations A w = r (full row "
    "rank here, so consistent): a backward-stable solve makes ŵ the exact solution of "
    "(A + δA)ŵ = r + δr with ‖δA‖ ≤ 10(M + N)·u·‖A‖₂, ‖δr‖ ≤ 10(M + N)·u·‖r‖, so each anchored "
    "equation is missed by ≤ 10(M + N)·u·(‖A‖₂‖ŵ‖ + ‖r‖); every pair's equation is the "
    "difference of two anchored ones, plus the rounding of its own evaluation (d-term logits, "
    "two logs). Never above the spec's 1e-9 (§6.2). A W that is not W* misses some equation by "
    "O(1)."
)
#: How LIN-SUB-F's F⊥ bound is derived.
F_PERP = (
    "F is the row space of the NTP-SVM's equality rows (the anchored (e_z − e_a)h̄_jᵀ span every "
    "pair's), and the certified W^mm has A_eq w ≈ 0: ‖P_F w‖ ≤ ‖A_eq w‖/σ_min⁺(A_eq) (‖A_eq w‖ "
    "recomputed with its rounding), plus the error of the claim's least-squares projection onto "
    "the span of all pairs' rows, 10(k + n)·u·σ_1/σ_r of ‖w‖ (Wedin, a backward-stable SVD "
    "solve); relative to ‖W^mm‖, never above SVM_TOL = 1e-8. A W^mm with a part in F (a "
    "solver that ignored the equalities) has ‖P_F W‖ of the order of ‖W‖."
)


def _subspace_bounds(problem, Ws, Wm, rows) -> tuple[float, float]:
    """(LSTSQ_RESIDUAL's bound on the all-pairs log-odds residual of W*, F_PERP's bound on
    ‖P_F W^mm‖/‖W^mm‖)."""
    u = 2.0**-53
    A, r = problem._equalities
    M, N = A.shape
    if M == 0:  # one-token supports: F = {0}, no equation, P_F = 0 exactly
        return min(COMPAT_TOL, 4 * u), min(SVM_TOL, 4 * u)
    w = Ws.ravel()
    anchored = 10 * (M + N) * u * (float(np.linalg.norm(A, 2)) * float(np.linalg.norm(w)))
    anchored += 10 * (M + N) * u * float(np.linalg.norm(r))
    logits = np.abs(Ws @ problem.H)
    logP = np.abs(np.log(np.where(problem.support, problem.P, 1.0)))
    evaluation = 2 * (problem.dim + 4) * u * (float(logits.max()) + float(logP.max()))
    res_tol = min(COMPAT_TOL, 2 * anchored + evaluation)
    wm = Wm.ravel()
    s = np.linalg.svd(A, compute_uv=False)
    s_min = float(s[s > s.max() * max(A.shape) * np.finfo(float).eps].min())
    eq = float(np.linalg.norm(A @ wm)) + N * u * float(np.linalg.norm(np.abs(A) @ np.abs(wm)))
    t = np.linalg.svd(rows, compute_uv=False)
    kept = t[t > t.max() * max(rows.shape) * np.finfo(float).eps]
    span = 10 * sum(rows.shape) * u * float(kept[0] / kept[-1]) + 4 * rows.shape[1] * u
    in_tol = min(SVM_TOL, eq / s_min / float(np.linalg.norm(wm)) + span)
    return res_tol, in_tol


@claim("LIN-SUB-F")
@given(inst=overparameterized_instances(extra=st.integers(0, 2)))
def test_subspaces(inst):
    """W* is the unique solution of the log-odds equations inside F = span{(e_z − e_z')h̄_jᵀ :
    z ≠ z' ∈ S_j}, and W^mm lies in F⊥."""
    problem = inst.problem
    Ws, Wm = w_star(problem), w_mm(problem)
    rows = all_pair_rows(problem)  # F from every pair, projected by lstsq (not the model's basis)
    res = log_odds_residual(problem, Ws)
    off_F = _rel(Ws, project_rows(rows, Ws))
    in_F = float(np.linalg.norm(project_rows(rows, Wm)) / np.linalg.norm(Wm))
    res_tol, in_tol = _subspace_bounds(problem, Ws, Wm, rows)
    evidence.slack("log-odds residual of W* (all pairs)", res, res_tol, derivation=LSTSQ_RESIDUAL)
    evidence.slack("‖P_F W^mm‖/‖W^mm‖", in_F, in_tol, derivation=F_PERP)
    assert res <= res_tol, f"W* misses a log-odds equation by {res:.2e} > {res_tol:.2e}"
    assert off_F <= SVM_TOL, f"‖W* − P_F W*‖ = {off_F:.2e}: W* is not in F"
    assert in_F <= in_tol, f"‖P_F W^mm‖/‖W^mm‖ = {in_F:.2e} > {in_tol:.2e}: W^mm is not in F⊥"


#: Why LIN-COND-REMARK1 and LIN-SUB-SUPPORTS observe exactly 0 against SVM_TOL.
SAME_QP = (
    "observed exactly 0 by construction of the computation: the two solves compared receive the "
    "same margin rows in the same order (the NTP-SVM's rows vec((e_a − e_v)h̄_jᵀ) depend on the "
    "supports and the embeddings only, not on p̂; with one-token supports F = {0} and they are "
    "the multiclass rows), so the certified oracle performs the same float64 operations and "
    "returns the same bits. SVM_TOL = 1e-8 is the spec's agreement threshold (§6.2), the "
    "oracle's KKT tolerance (models.ntp.qp.KKT_TOL): it only matters if the rows ever differ "
    "in order, and a W^mm that read p̂ or a wrong class set moves by O(‖W^mm‖)."
)
#: How LIN-SUB-ONES's bound on W^mm is derived (`_ones_bound`).
ONES_DERIVATION = (
    "from the solve's own KKT point: W^mm = Σλ_k R_k + Σν_l E_l + r with every margin row R_k "
    "and equality row E_l of the form (e_z − e_z')h̄ᵀ, so 1ᵀR_k = 1ᵀE_l = 0 exactly and "
    "‖1ᵀW^mm‖ = ‖1ᵀr‖ ≤ √V‖r‖; r is the stationarity residual recomputed here, plus the float64 "
    "error of that recomputation ((m + 1)·u of ‖W‖ + ‖|A|ᵀ|λ, ν|‖) and of the column sums "
    "(V·u of Σ|W|). A W^mm with a 1uᵀ part is off by ‖u‖√V, of the order of ‖W^mm‖."
)


def _ones_bound(problem, Wm) -> float:
    """ONES_DERIVATION's bound on ‖1ᵀW^mm‖/‖W^mm‖ for the certified NTP-SVM of ``problem``."""
    sol = problem.ntp_svm().solution
    A = np.vstack([problem._margins, problem._equalities[0]])
    duals = np.concatenate([sol.ineq_duals, sol.eq_duals])
    w = np.asarray(sol.w, dtype=np.float64)
    u = 2.0**-53
    r = float(np.linalg.norm(w - A.T @ duals))
    r += (
        (len(A) + 1)
        * u
        * (float(np.linalg.norm(w)) + float(np.linalg.norm(np.abs(A).T @ np.abs(duals))))
    )
    V = Wm.shape[0]
    sums = V * u * float(np.linalg.norm(np.abs(Wm).sum(axis=0)))
    return (math.sqrt(V) * r + sums) / float(np.linalg.norm(Wm))


@claim("LIN-SUB-ONES")
@given(inst=overparameterized_instances(extra=st.integers(0, 2)))
def test_sum_of_rows(inst):
    """([D]) The minimum-norm W* and W^mm have rows summing to zero: 1ᵀW* = 1ᵀW^mm = 0 (the
    constraints only see logit differences, so a 1uᵀ part would only add norm)."""
    problem = inst.problem
    Ws, Wm = w_star(problem), w_mm(problem)
    a = float(np.linalg.norm(Ws.sum(axis=0)) / max(1.0, np.linalg.norm(Ws)))
    b = float(np.linalg.norm(Wm.sum(axis=0)) / np.linalg.norm(Wm))
    tol = min(SVM_TOL, _ones_bound(problem, Wm))
    evidence.slack("‖1ᵀW^mm‖/‖W^mm‖", b, tol, derivation=ONES_DERIVATION)
    assert a <= SVM_TOL and b <= tol, (
        f"‖1ᵀW*‖ (rel) = {a:.2e}, ‖1ᵀW^mm‖ (rel) = {b:.2e} (bound {tol:.2e})"
    )


@claim("LIN-SUB-SUPPORTS")
@given(inst=overparameterized_instances(extra=st.integers(0, 2)), seed=SEEDS)
def test_wmm_supports_only(inst, seed):
    """W^mm depends on the data only through the supports S_j: new probabilities on the same
    supports leave it unchanged (Fig. 2)."""
    Wm = w_mm(inst.problem)
    other = resampled(inst, seed)
    Wm2 = w_mm(other.problem)
    delta = _rel(Wm2, Wm)
    evidence.slack("‖ΔW^mm‖/max(1, ‖W^mm‖)", delta, SVM_TOL, derivation=SAME_QP)
    evidence.metric("‖ΔP‖ of the resample", float(np.linalg.norm(other.P - inst.P)))
    assert delta <= SVM_TOL, f"resampling p̂ moved W^mm by {delta:.2e} (relative)"


@claim("LIN-SUB-TWINS")
@given(inst=twin_token_instances())
def test_twin_rows(inst):
    """Words with identical support patterns (in the support of the same contexts) have equal
    rows of W^mm, as w1 = w5 in Fig. 2."""
    a, b = inst.meta["twins"]
    Wm = w_mm(inst.problem)
    gap = float(np.linalg.norm(Wm[a] - Wm[b]) / np.linalg.norm(Wm))
    evidence.slack("‖w^mm_a − w^mm_b‖/‖W^mm‖", gap, TWIN_TOL)
    comp = inst.problem.compatibility()
    if comp.compatible:
        evidence.metric(
            "‖w*_a − w*_b‖ (W* rows differ)", float(np.linalg.norm(comp.W_star[a] - comp.W_star[b]))
        )
    assert gap <= TWIN_TOL, f"rows {a}, {b} of W^mm differ by {gap:.2e} (relative)"


# ---- §2.16 LIN-AR --------------------------------------------------------------------------------


#: How LIN-AR's loss bound is derived.
POOLING = (
    "both losses are weighted means (weights summing to 1) of the same per-position terms "
    "LSE(W h) − (W h)_y: each term errs by ≤ (V + d + 4)·u·S (the d-term logits, the V-term "
    "log-sum-exp), S = max over contexts of |LSE| + max|logit|, and the means by N·u·S over the "
    "N next-token positions (the pooled one adds the count normalisation): the two differ by "
    "≤ 2(N + V + d + 8)·u·S, relative to max(1, CE); never above the former 1e-12. Pooling "
    "that dropped or double-counted a prefix changes CE by a term's weight, ~1/N."
)


@claim("LIN-AR")
@given(
    V=st.integers(2, 5),
    n=st.integers(2, 12),
    T=st.integers(2, 5),
    d=st.integers(2, 6),
    seed=SEEDS,
)
def test_autoregressive_pooling(V, n, T, d, seed):
    """App. C: the autoregressive NTP loss over sequences of all lengths equals the CE of the
    single instance that pools every distinct prefix as a context, so every result applies."""
    rng = np.random.default_rng(seed)
    seqs = [tuple(rng.integers(0, V, size=int(rng.integers(2, T + 1)))) for _ in range(n)]
    table: dict[tuple, np.ndarray] = {}

    def embed(c):
        return table.setdefault(c, rng.standard_normal(d))

    inst = pooled_prefix_instance(seqs, V, embed)
    problem = inst.problem
    W = rng.standard_normal((V, d))
    terms = []  # the loss as a language model computes it: one term per next-token position
    grad = np.zeros((V, d))
    for seq in seqs:
        for t in range(1, len(seq)):
            h = embed(tuple(seq[:t]))
            logits = W @ h
            lse = np.logaddexp.reduce(logits)
            terms.append(lse - logits[seq[t]])
            q = np.exp(logits - lse)
            q[seq[t]] -= 1
            grad += np.outer(q, h)
    seq_loss, seq_grad = float(np.mean(terms)), grad / len(terms)
    err = abs(problem.loss(W) - seq_loss) / max(1.0, seq_loss)
    gerr = _rel(problem.gradient(W), seq_grad)
    logits = W @ problem.H
    S = float((np.abs(np.logaddexp.reduce(logits, axis=0)) + np.abs(logits).max(axis=0)).max())
    tol = min(POOL_TOL, 2 * (len(terms) + V + d + 8) * 2.0**-53 * S / max(1.0, seq_loss))
    evidence.slack("|CE_pooled − CE_sequences| (relative)", err, tol, derivation=POOLING)
    evidence.metric("contexts pooled", problem.m)
    assert err <= tol and gerr <= POOL_TOL, (
        f"pooled CE {problem.loss(W):.15f} vs sequence loss {seq_loss:.15f} (gradient gap "
        f"{gerr:.2e}) over {problem.m} contexts"
    )


# ---- §4.3 Fig. 1 / Fig. 2 ------------------------------------------------------------------------

#: LIN-FIG2: "the W* rows of words 1 and 5 differ" read as ‖w*_1 − w*_5‖ ≥ this·‖W*‖ (Dirichlet
#: draws make them differ by O(1); an exact tie needs p̂ on a measure-zero set).
ROWS_DIFFER = 1e-3


@claim("LIN-FIG2")
@given(inst=separable_fig1_instances())
def test_fig2_geometry(inst):
    """Fig. 2: on the supports {1,2,5}, {1,4,5}, {2,3,4}, words 1 and 5 (which follow the same
    contexts) get the same row of W^mm, but different rows of W*."""
    Ws, Wm = w_star(inst.problem), w_mm(inst.problem)
    same = float(np.linalg.norm(Wm[0] - Wm[4]) / np.linalg.norm(Wm))
    differ = float(np.linalg.norm(Ws[0] - Ws[4]) / np.linalg.norm(Ws))
    evidence.slack("‖w^mm_1 − w^mm_5‖/‖W^mm‖", same, TWIN_TOL)
    evidence.metric("‖w*_1 − w*_5‖/‖W*‖", differ)
    assert same <= TWIN_TOL, f"W^mm rows of words 1, 5 differ by {same:.2e} (relative)"
    assert differ >= ROWS_DIFFER, f"W* rows of words 1, 5 agree to {differ:.2e} (relative)"
