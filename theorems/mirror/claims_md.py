"""ℓp mirror descent on attention (arXiv 2410.14581): spec tfsvm §1.6 (MD), §1.8 (the Bregman
divergence), §2.10 MD-*, §4.5 and §4.6.

MD with potential ψ(W) = ‖vec W‖_p^p/p steps the dual variable sign(W)|W|^{p−1} by the
gradient normalised in the dual norm ‖·‖_{p*}; p = 2 is normalised GD. Every run here takes
its directions from log space (``models.problems.cross.md``,
``models.flows.mirror_joint.joint_md``), so no step freezes when the softmax saturates. The official
protocols are in ``common``; the wrong variants of these results are in ``claims_controls``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models.flows.mirror_joint import (
    JOINT_PRINTED_ALPHA,
    CrossJointProblem,
    joint_md,
    naive_joint_md,
)
from models.oracles.normsvm import CONIC_TOL
from models.problems.cross import bregman_divergence, correlation, md, w_ngd
from strategies.combinators import SEEDS, seeded
from strategies.cross import local_gap, with_random_init
from strategies.instances import CrossInstance
from strategies.mirror import (
    OFFICIAL_MD,
    SMALL,
    joint_instances,
    joint_official_instance,
    rotated,
    zero_coordinate_queries,
)
from theorems import claim, evidence, saved_arguments
from theorems.mirror.common import (
    BREGMAN_BOUND,
    MD_STEPS,
    PS,
    RECORD_EVERY,
    cosines,
    experiment_runs,
    joint_errors,
    joint_instance,
    joint_problem,
    joint_run,
    joint_svms,
    lp_svm,
    random_orthogonal,
    run_md,
)

DTYPE = torch.float64

# ---- tolerances ---------------------------------------------------------------------------------

#: MD-DEF-P2: one step of md(p = 2) and of w_ngd from the same W agree to this, relative to
#: max(1, ‖W⁺‖). Both add lr·(unit direction); they differ only in rounding (md rescales by
#: max|G̃| and takes the ℓ2 norm after, ngd normalises the engine's field), ~1e-16 per step.
#: 1e-11 is rounding, not a different method (a wrong exponent in the dual map is off by O(1)
#: at the first step). P2_STEPS: the iterates of md's run the steps start from.
P2_TOL = 1e-11
#: How MD-DEF-P2's per-step bound is derived (`_p2_bound`, never above P2_TOL).
P2_DERIVATION = (
    "md(p = 2) and NGD each add lr·(a unit direction) to the same W; the directions come from "
    "two float64 evaluations of ∇L (md's log-space gradient, NGD's compiled field), each off "
    "the true ∇L by ≤ 4 stages × (nT + d² + 10)·u of the terms' size 2L(1 + ‖W‖) (unit tokens "
    "and queries; L = max(|ℓ'|, |ℓ''|) ≤ 1 logistic, e exponential), so each unit direction by "
    "≤ 2·that/‖∇L‖ plus its normalisation's (d² + 4)u; the sums W + lr·u round at u‖W⁺‖ "
    "each. Relative to max(1, ‖W⁺‖), at the step where the ratio is worst; never above the "
    "former 1e-11. A wrong exponent in the dual map is off by O(1) at the first step."
)
P2_STEPS = 200
#: MD-DEF-BREGMAN: the divergence from its definition agrees to this; ≥ −this counts as ≥ 0,
#: and ≤ this as zero for positive multiples.
BREGMAN_DEF_TOL = evidence.tolerance(
    2e-13,
    "unit-ℓp matrices of N = d² ≤ 36 entries, p ≤ 4, u = 2⁻⁵³: each normalisation errs by ≤ "
    "(N + 4)u = 40u per entry; ψ = Σ|a|^p/p then by ≤ (40p + N + 1)u/p ≤ 197u/1.1, so ψ(A) − "
    "ψ(B) by ≤ 358u; ⟨∇ψ(B), A − B⟩ = Σ sign(b)|b|^{p−1}(a − b) has Σ|b|^{p−1}(|a| + |b|) ≤ 2 "
    "(Hölder), its terms err by ≤ (121 + 40)u relatively and the sum by γ_N: ≤ 402u; the "
    "engine's 1 − ⟨sign(B)|B|^{p−1}, A⟩ (terms ≤ 1 in sum) by ≤ 200u. Both: ≤ 960u = 1.1e-13.",
)
#: MD-DEF-BREGMAN: a direction perturbed by a relative ε = 1e-3 has D of order ε² (measured
#: ≥ 3.4e-8 over 102 draws), ≫ the rounding tolerance above: "0 iff the same direction" is
#: tested at this separation.
BREGMAN_PERTURB = 1e-3
#: MD-ZERO-COLS: steps of MD from W(0) = 0 (the property is exact at every step).
ZERO_COLS_STEPS = 300
#: MD-BREGMAN-MONOTONE: D_k may exceed D_{k−1} by this much and still count as non-increasing
#: (D is 1 − an O(1) sum: its rounding is ~1e-15; the increases seen in the counterexamples are
#: 3e-5 per 10 steps).
MONOTONE_TOL = 1e-12
#: MD-BREGMAN-MONOTONE-LOCAL: spec §3.5's margin gap δ. The gap of α is min margin − 1 at
#: W^mm_α(ℓp) over the tokens scoring at least α_i's score (``strategies.cross.local_gap``; +inf
#: if there are none). α is ℓp-locally optimal (spec §1.5, with the ℓp SVM's support set) iff no
#: such token is a support token, i.e. gap > 0; below δ a locally optimal α is near-vacuous.
#: The premise (α̂ ℓp-locally optimal with this gap) was chosen on MD-BREGMAN-MONOTONE's two
#: counterexamples (official seeds 15 and 19: gap 0.016, and not locally optimal); δ itself is
#: the spec's. Tested on MD-BREGMAN-MONOTONE-LOCAL's own draws (a seed from its id; no (data,
#: W(0)) pair in common with the parent's). Held-out check (2026-12-03): ci-random seeds
#: 20261201/2/3, 6 of 6 examples meet the premise and hold under each; nightly seed 20261204,
#: 120 examples, 112 meet it, all hold (the 8 others have gaps below 0.1, down to 0).
LOCAL_GAP = 0.1
#: MD-DIR-SETTLED's premise: α̂ has settled by this fraction of the official budget. Chosen on
#: MD-DIR's saved counterexample and an 80-instance scan (each violation settled after half the
#: budget). Tested on MD-DIR-SETTLED's own draws. Held-out check (2026-12-03): ci-random seeds
#: 20261201/2/3, 4 of 4 hold under each; nightly seed 20261204 (80 examples) REFUTES it: official
#: seed 1009355156, p = 1.75, α̂ settled at step 30, D_ψ = 1.0013e-2 > 1e-2 at step 1500, and α̂
#: is not the limit (input 2 leaves it at step 1660; D_ψ = 8.3e-4 at 6000 steps to the new α's
#: SVM). Pinned as the claim's saved counterexample.
SETTLED_BY = 0.5
#: MD-JOINT: the exponents drawn, the cheapest run first (Hypothesis shrinks toward it): the
#: official budgets are 2000 / 1500 / 20000 steps (0.4 / 0.3 / 3 s); cvxpy certifies these p.
JOINT_PS = (2.0, 1.75, 3.0)
#: MD-JOINT: a direction error 1 − corr at most this is at the resolution of the certified SVMs,
#: where a shrink rate is noise (seen: 5.9e-8 → 7.9e-7 on a converging run).
JOINT_FLOOR = evidence.tolerance(
    CONIC_TOL,
    "a certificate within CONIC_TOL puts the solved SVM within √(2·CONIC_TOL) of the optimum "
    "(relative; Clarkson), so 1 − corr(W^mm_solved, W^mm) ≈ ½‖Ŵ − Ŵ*‖² ≤ CONIC_TOL: a run's "
    "1 − corr with the solved SVM is not resolved below that",
)


def joint_rate(p: float) -> float:
    """MD-JOINT: the least shrink of 1 − corr from half the budget to its end that counts as
    converging. Derivation: the dual variable grows linearly in k, so a run converging in
    direction is W_k = R_k·Ŵ + W_fin + o(1) with R_k ∝ k^{1/(p−1)}, and 1 − corr ≈ c/R_k² ∝
    k^{−2/(p−1)} shrinks 2^{2/(p−1)}-fold when k doubles (6.35 / 4 / 2 at p = 1.75 / 2 / 3); a
    run tending to another limit shrinks ~1-fold. The bound is the geometric middle,
    2^{1/(p−1)} (2.52 / 2 / 1.41). Calibrated on 30 draws of ``joint_data`` (seeds
    10000–10029, not the tested ones; /tmp calibration script, 90 runs at the official
    budgets): where every selected token is a support vector of the v-SVM (24 runs, all n = 2)
    the shrinks above JOINT_FLOOR were W 3.3–25 / 4.0–4.1 / 1.6–2.7 and v 4.0–4.5 / 4.0 / 2.0
    at p = 1.75 / 2 / 3 (none below the bound; the official instance: W 3.7 / 4.0 / 1.9, v 6.4 /
    4.0 / 1.7); where one is not (66 runs), 48 fell below it (W 0.61–1.3 typically: W tends to
    neither W^mm_α̂(ℓp) nor the relaxed SVM, see findings.md)."""
    return 2.0 ** (1.0 / (p - 1.0))


#: MD-META-ROT2: two certified values of the same optimum agree to this, relative to
#: max(1, value).
ROT_VALUE_TOL = evidence.tolerance(
    2 * CONIC_TOL,
    "each certificate (models.oracles.normsvm, CONIC_TOL = 1e-6) bounds |‖W‖ − Σλ| ≤ "
    "CONIC_TOL·max(1, ‖W‖), and Σλ ≤ OPT ≤ ‖W‖ (weak duality, feasibility), so each value is "
    "within CONIC_TOL·max(1, value) of OPT: two within 2·CONIC_TOL. A value that moves under a "
    "rotation (the ℓp norm for p ≠ 2, MD-C-ROTATION) is off by O(1).",
)
#: MD-META-ROT2: directions of the unique optimum agree to this, relative to max(1, ‖W^mm‖).
#: Measured: ≤ 1.7e-5 over 30 draws (Clarabel's power-cone path).
ROT_DIR_TOL = evidence.tolerance(
    2 * math.sqrt(2 * CONIC_TOL),
    "for the min-norm point W* of a convex set and any feasible W, ‖W − W*‖² ≤ ‖W‖² − ‖W*‖², "
    "and a certified ‖W‖ ≤ (1 + CONIC_TOL)·OPT, so each solve is within √(2·CONIC_TOL)·OPT of "
    "W*; rotations map W* to U W* Vᵀ isometrically, so the two solves are within twice that "
    "(2.8e-3). A rotation that did not commute with the ℓ2 SVM moves it by O(‖W^mm‖).",
)


def _rel(A, B) -> float:
    return float(np.linalg.norm(A - B) / max(1.0, np.linalg.norm(B)))


# ---- §1.6, §1.8: definitions ---------------------------------------------------------------------


#: MD-DEF-P2: ci-random seed 1's draw (issue 21), where two whole 200-step runs of md(p = 2)
#: and NGD drift apart by 4e-4 in one token order and agree to 1e-11 in another (fragile).
P2_FRAGILE_RUNS = CrossInstance.from_json(
    json.loads((Path(__file__).parent / "pinned" / "MD-DEF-P2.json").read_text())
)


def _md_vs_ngd(inst) -> tuple[float, float, int, str | None]:
    """One step of md(p = 2) and one of W-NGD (lr 0.1) from each iterate of md's P2_STEPS-step
    run from inst.W0, step for step (two whole runs would also compare how the flow amplifies a
    1e-16 difference: 4e-4 on a ci-random draw, issue 21): (the relative gap
    ‖W_md − W_ngd‖/max(1, ‖W_ngd‖) and its bound `_p2_bound` at the step where their ratio is
    largest, the step it starts from, why the two stopped differently or None)."""
    run = md(inst.problem, inst.W0, p=2.0, lr=0.1, steps=P2_STEPS)
    errs, bounds = [], []
    for k, W in zip(run.steps[:-1], run.Ws[:-1], strict=True):
        a = md(inst.problem, W, p=2.0, lr=0.1, steps=1)
        b = w_ngd(inst.problem, W, lr=0.1, steps=1)
        if a.stop != b.stop or len(a.Ws) != len(b.Ws):
            return (
                math.nan,
                P2_TOL,
                int(k),
                f"from step {k}: md(p=2) stops ({a.stop}), NGD ({b.stop})",
            )
        errs.append(_rel(a.Ws[-1], b.Ws[-1]))
        bounds.append(_p2_bound(inst, W, b.Ws[-1]))
    k = int(np.argmax(np.array(errs) / np.array(bounds)))
    return errs[k], bounds[k], int(run.steps[k]), None


def _p2_bound(inst, W: np.ndarray, W_next: np.ndarray) -> float:
    """P2_DERIVATION's bound on ‖W_md − W_ngd‖/max(1, ‖W_ngd‖) for one step from W."""
    u = 2.0**-53
    M, G = inst.problem.gradient_log(W)
    if M == -math.inf:
        return P2_TOL
    L = {"logistic": 1.0, "correlation": 1.0}.get(inst.loss, math.e)
    log_err = math.log(8 * (inst.n * inst.T + inst.d**2 + 10) * u * 2 * L)
    log_err += math.log1p(float(np.linalg.norm(W)))
    direction = 2 * math.exp(min(0.0, log_err - M - math.log(float(np.linalg.norm(G)))))
    step = 0.1 * 2 * (direction + (inst.d**2 + 4) * u) + 2 * u * float(np.linalg.norm(W_next))
    return min(P2_TOL, step / max(1.0, float(np.linalg.norm(W_next))))


@claim("MD-DEF-P2")
@example(inst=P2_FRAGILE_RUNS)
@given(inst=with_random_init(SMALL, scale=1.0))
def test_md_p2_is_ngd(inst):
    """ℓp mirror descent with p = 2 is normalised GD: from the same W a step of MD (p = 2) and a
    step of W-NGD give the same W⁺."""
    gap, tol, step, stopped = _md_vs_ngd(inst)
    assert stopped is None, stopped
    evidence.slack(
        "‖W_md − W_ngd‖/max(1, ‖W_ngd‖) (max over steps)", gap, tol, derivation=P2_DERIVATION
    )
    assert gap <= tol, (
        f"md(p=2) and NGD differ by {gap:.2e} (relative) > {tol:.2e} from step {step}"
    )


def _psi(W: np.ndarray, p: float) -> float:
    return float(np.sum(np.abs(W) ** p) / p)


def _definition(A: np.ndarray, B: np.ndarray, p: float) -> float:
    """D_ψ(Â, B̂) = ψ(Â) − ψ(B̂) − ⟨∇ψ(B̂), Â − B̂⟩, ψ = ‖·‖_p^p/p, on the unit-ℓp matrices."""
    A = A / np.linalg.norm(A.ravel(), p)
    B = B / np.linalg.norm(B.ravel(), p)
    grad = np.sign(B) * np.abs(B) ** (p - 1)
    return _psi(A, p) - _psi(B, p) - float(np.sum(grad * (A - B)))


def _bregman_values(seed: int, d: int, p: float, scale: float) -> dict[str, tuple]:
    """{name: (D_ψ(A, B), the definition's value, whether B has A's direction)} for a Gaussian
    A (d × d) and B = another Gaussian, A perturbed by a relative BREGMAN_PERTURB, and c·A; D_ψ
    recorded for the other directions."""
    gen = seeded(seed)
    A, B, E = (torch.randn(d, d, generator=gen, dtype=DTYPE).numpy() for _ in range(3))
    E = E / np.linalg.norm(E) * np.linalg.norm(A)
    cases = {"B": (B, False), "A + εE": (A + BREGMAN_PERTURB * E, False), "c·A": (scale * A, True)}
    values = {}
    for name, (M, same) in cases.items():
        values[name] = bregman_divergence(A, M, p), _definition(A, M, p), same
        if not same:
            evidence.metric(f"D_ψ(A, {name})", values[name][0])
    return values


@claim("MD-DEF-BREGMAN")
@given(seed=SEEDS, d=st.integers(2, 6), p=st.floats(1.1, 4.0), scale=st.floats(1e-3, 1e3))
@example(seed=0, d=10, p=1.75, scale=1.0)
@example(seed=0, d=10, p=3.0, scale=1.0)
def test_bregman_divergence_definition(seed, d, p, scale):
    """The directional Bregman divergence (Fig. 4) is D_ψ(Â, B̂) = ψ(Â) − ψ(B̂) − ⟨∇ψ(B̂), Â − B̂⟩,
    ψ = ‖·‖_p^p/p, Â = A/‖A‖_p, B̂ = B/‖B‖_p: it is ≥ 0, 0 when B is a positive multiple of A
    and > 0 when B's direction differs."""
    for name, (got, want, same) in _bregman_values(seed, d, p, scale).items():
        evidence.slack("|D − definition|", abs(got - want), BREGMAN_DEF_TOL)
        where = f"D_ψ(A, {name}) = {got!r} (c = {scale:g}, p = {p}, d = {d})"
        assert abs(got - want) <= BREGMAN_DEF_TOL, f"{where}, definition {want!r}"
        assert got >= -BREGMAN_DEF_TOL, f"{where} < 0"
        zero = abs(got) <= BREGMAN_DEF_TOL
        assert zero == same, f"{where} " + ("≠ 0 for c·A" if same else "= 0, another direction")


# ---- §1.6: the structure of the iterates -------------------------------------------------------


def _off_support(inst, off, p: float) -> tuple[float, float]:
    """(max |W(k)_jc| over every step k and the columns c ∈ off, max |W_jk| at the end) for
    ZERO_COLS_STEPS steps of normalised ℓp-MD from W(0) = 0, recorded at every step."""
    run = md(inst.problem, None, p=p, lr=0.1, steps=ZERO_COLS_STEPS, record_every=1)
    return float(np.abs(run.Ws[:, :, off]).max()), float(np.abs(run.W).max())


@claim("MD-ZERO-COLS")
@given(data=zero_coordinate_queries(), p=st.floats(1.2, 4.0))
def test_md_zero_columns(data, p):
    """From W(0) = 0, normalised ℓp mirror descent (any 1 < p < ∞) keeps the columns of W outside
    the joint support of the queries exactly zero: if z_ic = 0 for every input i, then W(k)[:,
    c] = 0 at every step."""
    inst, off = data
    leak, moved = _off_support(inst, off, p)
    evidence.metric("max |W_jk| on the queries' support at the end", moved)
    if not evidence.premise(moved > 0, "W moved"):
        return
    evidence.metric("max |W(k)[:, off-support columns]|", leak)
    assert leak == 0.0, (
        f"max |W(k)_jc| = {leak:.3e} ≠ 0 on the columns c ∈ {off} where every z_ic = 0 (p = {p})"
    )


# ---- §2.10 MD-DIR, MD-OWN-P, MD-RATE: the official local-convergence protocol ----------------


def _own_bregman(inst, p: float):
    """(D_ψ to the own-p SVM at α̂ after the official budget, the run) for MD-p from inst.W0."""
    result = run_md(inst, p)
    D = bregman_divergence(lp_svm(inst, result.alpha, p).W, result.W, p)
    evidence.metric(f"Bregman divergence, p = {p:g}", D)
    evidence.metric(f"burn-in / budget, p = {p:g}", result.run.steps[result.settled] / MD_STEPS[p])
    evidence.slack(f"D_ψ(W^mm(ℓp), W) at p = {p:g}", D, BREGMAN_BOUND[p])
    return D, result


def _far(D: float, result) -> str:
    """The message for a run that ends farther than BREGMAN_BOUND from its own SVM."""
    return (
        f"p = {result.p:g}: D_ψ = {D:.3e} > {BREGMAN_BOUND[result.p]:g} after "
        f"{MD_STEPS[result.p]} steps (α̂ = {result.alpha.tolist()}, selection settled at step "
        f"{result.run.steps[result.settled]})"
    )


def _settled_early(result) -> bool:
    """Whether the run's selection is α̂ at every record from half its budget on."""
    return bool(result.run.steps[result.settled] <= SETTLED_BY * MD_STEPS[result.p])


@claim("MD-DIR")
@example(**saved_arguments("MD-DIR"))
@given(inst=OFFICIAL_MD)
def test_md_directional_convergence(inst):
    """Directional convergence, as read with the official step budgets: normalised ℓp mirror descent
    (p = 1.75, 2, 3) from W(0) ~ N(0, 1) converges in direction to the ℓp-AttSVM W^mm_α̂(ℓp) of the
    selection α̂ it reaches."""
    own = {p: _own_bregman(inst, p) for p in PS}
    far = [_far(D, result) for p, (D, result) in own.items() if not D <= BREGMAN_BOUND[p]]
    assert not far, "; ".join(far)


@claim("MD-DIR-SETTLED")
@example(**saved_arguments("MD-DIR-SETTLED"))
@given(inst=OFFICIAL_MD)
def test_md_directional_convergence_settled(inst):
    """Normalised ℓp mirror descent from W(0) ~ N(0, 1) converges in direction to the ℓp-AttSVM
    W^mm_α̂(ℓp) of the selection α̂ it reaches within the official budget whenever α̂ has settled
    within the first half of it."""
    own = {p: _own_bregman(inst, p) for p in PS}
    settled = [p for p, (_, result) in own.items() if _settled_early(result)]
    if not evidence.premise(bool(settled), "some p settled within half its budget"):
        return
    far = [_far(*own[p]) for p in settled if not own[p][0] <= BREGMAN_BOUND[p]]
    assert not far, "; ".join(far)


def closest_svm(result, p: float) -> tuple[float, str]:
    """(the q whose ℓq-AttSVM at α̂ the MD-p run correlates best with, the correlations and α̂
    as text); the lead of its own q over the best other is recorded as a metric."""
    cos = cosines(result, PS)
    other = max(c for q, c in cos.items() if q != p)
    evidence.metric(f"cos own − best other, p = {p:g}", cos[p] - other)
    text = ", ".join(f"{c:.5f} (q = {q:g})" for q, c in cos.items())
    return max(cos, key=cos.get), f"{text} at α̂ = {result.alpha.tolist()}"


@claim("MD-OWN-P")
@given(inst=OFFICIAL_MD, p=st.sampled_from(PS))
def test_md_own_p_closest(inst, p):
    """ℓp mirror descent ends closest to its own SVM: among the ℓq-AttSVMs W^mm_α̂(ℓq) at its
    selection α̂, q ∈ {1.75, 2, 3}, the one W_MD-p correlates best with is q = p."""
    result = run_md(inst, p)
    best, text = closest_svm(result, p)
    assert best == p, f"MD-{p:g} is closest to the ℓ{best:g}-SVM: corr = {text}"


def _rise_after_burn_in(result, D: np.ndarray) -> str | None:
    """Where D (on the run's record grid) rises by more than MONOTONE_TOL after the burn-in (the
    first record from which the selection is α̂ at every later record), or None if it never
    does."""
    start = result.settled
    evidence.metric("burn-in (steps until the selection settles)", result.run.steps[start])
    rises = np.flatnonzero(np.diff(D[start:]) > MONOTONE_TOL)
    if rises.size == 0:
        return None
    j, steps = start + int(rises[0]), result.run.steps
    return (
        f"D_ψ rises from {D[j]:.6e} at step {steps[j]} to {D[j + 1]:.6e} at step {steps[j + 1]} "
        f"after the selection settled at step {steps[start]} (p = {result.p:g}, α̂ = "
        f"{result.alpha.tolist()}; {rises.size} rises on the grid of {RECORD_EVERY} steps, the "
        f"last at step {steps[start + rises[-1] + 1]}; final D_ψ = {D[-1]:.3e})"
    )


@claim("MD-BREGMAN-MONOTONE")
@example(**saved_arguments("MD-BREGMAN-MONOTONE"))
@given(inst=OFFICIAL_MD, p=st.sampled_from(PS))
def test_bregman_eventually_monotone(inst, p):
    """MD-RATE as read: once normalised ℓp mirror descent has settled on its final selection α̂,
    D_ψ(Ŵ^mm_α̂(ℓp), Ŵ(k)) is non-increasing in k."""
    result = run_md(inst, p)
    D = result.bregman(lp_svm(inst, result.alpha, p).W)
    evidence.metric(f"final D_ψ, p = {p:g}", D[-1])
    rise = _rise_after_burn_in(result, D)
    assert rise is None, rise


def local_bregman_rise(inst, p: float) -> tuple[bool, str | None]:
    """(premise met, the first rise of D_ψ(Ŵ^mm_α̂(ℓp), Ŵ(k)) after the burn-in or None) of one
    MD-p run: the premise is α̂ ℓp-locally optimal with margin gap ≥ LOCAL_GAP (recorded)."""
    result = run_md(inst, p)
    W_svm = lp_svm(inst, result.alpha, p).W
    gap = local_gap(inst, np.asarray(result.alpha), W_svm)
    evidence.metric("margin gap δ of α̂ (ℓp)", min(gap, 10.0))
    if not evidence.premise(gap >= LOCAL_GAP, "α̂ ℓp-locally optimal with gap ≥ 0.1"):
        return False, None
    return True, _rise_after_burn_in(result, result.bregman(W_svm))


@claim("MD-BREGMAN-MONOTONE-LOCAL")
@given(inst=OFFICIAL_MD, p=st.sampled_from(PS))
def test_bregman_eventually_monotone_local(inst, p):
    """Once normalised ℓp mirror descent has settled on its final selection α̂, and α̂ is ℓp-locally
    optimal with a margin gap, D_ψ(Ŵ^mm_α̂(ℓp), Ŵ(k)) is non-increasing in k."""
    met, rise = local_bregman_rise(inst, p)
    if not met:
        return
    assert rise is None, rise


# ---- §4.5: the local-convergence experiment ------------------------------------------------------


def _cross_comparison(result) -> tuple[float, dict[float, float]]:
    """(D_ψ to the own-p SVM at α̂, {q: corr(W_MD-p, W^mm_α̂(ℓq))}) of one run, D recorded."""
    p = result.p
    svms = {q: lp_svm(result.inst, result.alpha, q).W for q in PS}
    D = bregman_divergence(svms[p], result.W, p)
    evidence.metric(f"Bregman divergence, p = {p:g}", D)
    evidence.slack(f"D_ψ(W^mm(ℓp), W) at p = {p:g}", D, BREGMAN_BOUND[p])
    return D, {q: correlation(svms[q], result.W) for q in PS}


def _experiment() -> dict[tuple[int, float], tuple[float, float, str]]:
    """{(seed, p): (D_ψ to the own-p SVM, the q of the ℓq-SVM that correlates best, where)} over
    the experiment's runs; the mean D_ψ per p recorded."""
    out = {}
    for (seed, p), result in experiment_runs().items():
        D, cos = _cross_comparison(result)
        where = f"seed {seed}, p = {p:g}, α̂ = {result.alpha.tolist()}, corr {cos}"
        out[seed, p] = D, max(cos, key=cos.get), where
    for p in PS:
        D = [D for (_, q), (D, _, _) in out.items() if q == p]
        evidence.metric(f"mean Bregman divergence, p = {p:g}", float(np.mean(D)))
    return out


@claim("MD-EXP-LOCAL")
def test_md_local_experiment():
    """Fig. 4 (local convergence): on the paper's synthetic data every normalised ℓp mirror descent
    run (p = 1.75, 2, 3) ends near the ℓp-AttSVM at its selection α̂, and of the ℓ1.75, ℓ2 and ℓ3
    SVMs its own correlates best with it."""
    runs = _experiment()
    far = [
        f"D_ψ = {D:.3e} > {BREGMAN_BOUND[p]:g} ({at})"
        for (_, p), (D, _, at) in runs.items()
        if not D <= BREGMAN_BOUND[p]
    ]
    other = [f"closest SVM is ℓ{q:g} ({at})" for (_, p), (_, q, at) in runs.items() if q != p]
    assert not far and not other, "; ".join(far + other)


# ---- §4.6: joint (W, v) training -------------------------------------------------------------


def _not_shrinking(errors, p: float) -> list[str]:
    """Which of W and v is not converging in direction to its SVM at the run's rate: 1 − corr is
    above JOINT_FLOOR at the end and shrank less than joint_rate(p)-fold over the second half of
    the budget."""
    slow = []
    for name, (half, end) in (("W", errors.W), ("v", errors.v)):
        shrink = half / end if end > 0 else math.inf
        evidence.metric(f"1 − corr({name}, SVM) at the end", end)
        if end <= JOINT_FLOOR:
            continue
        evidence.slack(
            f"joint_rate(p) / shrink of 1 − corr({name}, SVM)",
            joint_rate(p) / shrink,
            1.0,
            derivation="a converging run shrinks 2^{2/(p−1)}-fold, one tending elsewhere 1-fold "
            "(joint_rate)",
        )
        if shrink < joint_rate(p):
            slow.append(
                f"1 − corr({name}, its ℓp SVM) went {half:.3e} → {end:.3e} from step "
                f"{errors.steps[0]} to {errors.steps[1]}: shrank {shrink:.2f}-fold < "
                f"{joint_rate(p):.2f} (a direction converging to it shrinks "
                f"{2 ** (2 / (p - 1)):.2f}-fold)"
            )
    return slow


def _joint_limit(inst, p: float):
    """The official-budget joint run from W(0) = 0, v(0) = 0, its SVMs at α̂ and its direction
    errors at half the budget and at the end; inconclusive if α̂ changed in the second half."""
    problem = joint_problem(inst)
    run = joint_run(problem, p)
    limit = joint_svms(problem, run, p)
    errors = joint_errors(problem, run, limit)
    evidence.metric("min margin Y_i f_i at the end", float(run.margins[-1].min()))
    if not errors.settled_halfway:
        evidence.inconclusive("the selection at half the budget is not the final one")
    return limit, errors


@claim("MD-JOINT")
@example(**saved_arguments("MD-JOINT"))
@example(inst=joint_official_instance(), p=1.75)
@given(inst=joint_instances(), p=st.sampled_from(JOINT_PS))
def test_joint_md_converges(inst, p):
    """Training W and v jointly by normalised ℓp mirror descent (each gradient normalised in its
    own dual norm) from W(0) = 0, v(0) = 0 converges in direction to the pair of ℓp SVMs at the
    selection α̂ it reaches: W to W^mm_α̂(ℓp), v to v^mm_p = argmin ‖v‖_p s.t. Y_i x_{iα̂_i}ᵀv ≥ 1."""
    limit, errors = _joint_limit(inst, p)
    slow = _not_shrinking(errors, p)
    assert not slow, "; ".join(slow) + f" (p = {p:g}, α̂ = {limit.alpha.tolist()})"


@claim("MD-JOINT-TIGHT")
@example(inst=joint_official_instance(), p=1.75)
@example(inst=joint_official_instance(), p=2.0)
@example(inst=joint_official_instance(), p=3.0)
@given(inst=joint_instances(), p=st.sampled_from(JOINT_PS))
def test_joint_md_converges_tight(inst, p):
    """When every selected token x_{iα̂_i} is a support vector of the ℓp v-SVM (so that the
    relaxed attention SVM of the joint theorem is W^mm_α̂(ℓp) itself), joint normalised ℓp mirror
    descent from W(0) = 0, v(0) = 0 converges in direction to (W^mm_α̂(ℓp), v^mm_p)."""
    limit, errors = _joint_limit(inst, p)
    if not evidence.premise(limit.tight, "every selected token a support vector of the v-SVM"):
        return
    slow = _not_shrinking(errors, p)
    assert not slow, "; ".join(slow) + f" (p = {p:g}, α̂ = {limit.alpha.tolist()})"


@claim("MD-JOINT-FIRST-STEP")
@given(inst=SMALL, p=st.floats(1.2, 4.0))
@example(inst=joint_official_instance(), p=1.75)
def test_joint_first_step(inst, p):
    """In joint (W, v) training from v(0) = 0 the first W-gradient is exactly zero, so at step 1 of
    joint normalised ℓp-MD from W(0) = 0 only v moves: W(1) = 0 and v(1) ≠ 0."""
    problem = CrossJointProblem(inst.X, inst.Z, inst.y)
    for name, run in (
        ("log-space", joint_md(problem, p=p, steps=1)),
        ("autograd (official)", naive_joint_md(problem, p=p, steps=1)),
    ):
        W1, v1 = run.Ws[-1], run.vs[-1]
        evidence.metric(f"max |W(1)| ({name})", float(np.abs(W1).max()))
        assert not W1.any(), f"{name}: W moved at step 1: max |W(1)| = {np.abs(W1).max():.3e}"
        assert v1.any(), f"{name}: v did not move at step 1 (v(1) = 0)"


@claim("MD-JOINT-SELECTION")
@pytest.mark.parametrize("p", PS)
def test_joint_selection_matches_notebook(p):
    """On the official joint instance, joint normalised ℓp mirror descent from W(0) = 0, v(0) = 0
    selects the tokens the official notebook printed: α̂ = (1, 0) for p = 1.75, (1, 0) for p = 2
    and (0, 0) for p = 3 (0-based), so the selection depends on p."""
    problem = joint_instance()
    alpha = problem.selected(joint_run(problem, p).W)
    assert tuple(alpha.tolist()) == JOINT_PRINTED_ALPHA[p], (
        f"p = {p:g}: selected {tuple(alpha.tolist())}, the notebook printed "
        f"{JOINT_PRINTED_ALPHA[p]}"
    )


# ---- §2.13.2: the ℓp SVM under rotations -------------------------------------------------------


@claim("MD-META-ROT2")
@given(inst=SMALL, seed=SEEDS)
def test_lp2_svm_rotates(inst, seed):
    """For p = 2 the ℓp-AttSVM is rotation-equivariant: replacing every token by Ux and every query
    by Vz (U, V orthogonal) maps W^mm(ℓ2) to U W^mm(ℓ2) Vᵀ with the same optimal value."""
    gen = seeded(seed)
    U, V = random_orthogonal(gen, inst.d), random_orthogonal(gen, inst.d)
    a = lp_svm(inst, inst.alpha, 2.0)
    b = lp_svm(rotated(inst, U, V), inst.alpha, 2.0, "ℓp-AttSVM of the rotated data")
    gap = abs(b.value - a.value) / max(1.0, a.value)
    err = _rel(b.W, U @ a.W @ V.T)
    evidence.slack("|value(rotated) − value| / max(1, value)", gap, ROT_VALUE_TOL)
    evidence.slack("‖W^mm(UX, VZ) − U W^mm Vᵀ‖ / max(1, ‖W^mm‖)", err, ROT_DIR_TOL)
    assert gap <= ROT_VALUE_TOL, f"ℓ2 values {a.value!r} vs {b.value!r} after rotation"
    assert err <= ROT_DIR_TOL, f"‖W^mm(UX, VZ) − U W^mm Vᵀ‖ (relative) = {err:.2e}"
