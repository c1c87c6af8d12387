"""Negative controls and classification checks for arXiv 2306.13596 (spec maxmargin §5).

A control states a plausible WRONG variant of a result as a property, with
``expected="refuted"``: it passes only when the Hypothesis search finds a counterexample, and
the report keeps the minimal one. Each searches a strategy (no hard-coded failure).

Two items of §5 are not controls but classification duties of the engine, stated as
``kind="definition"`` claims that must hold: F11 (an infeasible ATT-SVM is reported as such,
never as convergence to it) and F15 (numerical artefacts of the authors' recipe, such as the
C = 100 stall, are either resolved correctly by the log-space engine or reported
inconclusive, never turned into a false counterexample).
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models.flows.dynamics import gd, trace_flow
from models.flows.wtrain import singular_ratio
from models.numerics import failures
from models.oracles.selection import local_optimality
from models.oracles.svm import att_svm
from models.problems.attention import PromptProblem, cosine, one_minus_cos
from models.problems.losses import square
from strategies import (
    cone_inits,
    equal_nonopt_instances,
    global_opt_instances,
    infeasible_instances,
    local_opt_instances,
    loss_comparison_instance,
)
from strategies.combinators import SEEDS, random_points, seeded, with_init
from strategies.instances import PromptInstance
from strategies.maxmargin_families import (
    beaten_support_instances,
    high_score_instances,
    numerically_hard_instances,
    square_loss_instances,
    tied_local_instances,
)
from theorems import claim, evidence
from theorems.limits import DIRECTION_TOL, LOSS_GAP_TOL, Limit, record_outcome, settle
from theorems.maxmargin.common import CONE_SCAN, descent_signs, train_w
from theorems.maxmargin.common_svm import settled

DTYPE = torch.float64

# ---- thresholds of the wrong statements (each is what the wrong variant asserts) ---------------
#: F8: "the loss tends to 0" means L eventually drops below any ε > 0; the control takes
#: ε = this fraction of the true floor ℓ(γ_opt), so that only a positive floor can refute it,
#: however small the floor is (it runs from 0.13 down to ~1e-13: F8_TOP).
F8_FLOOR_FRACTION = 0.5
#: F8: the optimal score γ+ = F8_TOP[1] − x with x ∈ [0, F8_TOP[1] − F8_TOP[0]] (shrinks toward
#: the largest score, i.e. the smallest floor: ℓ(30) ≈ 9e-14 for the logistic loss).
F8_TOP = (2.0, 30.0)
#: F9: "‖p‖ → ∞": the flow reaches this norm. A finite minimiser counts as a counterexample
#: only when it is a true minimiser: L there ≤ this (the square loss attains 0).
F9_MAX_NORM = 1e4
F9_MINIMISER_LOSS = 1e-10
#: F13: "W converges to a full-rank matrix": σ₂/σ₁ of W(T) stays above this fraction of W(0)'s.
F13_RANK_FRACTION = 0.1
#: F14: "plain GD has 1 − cos(p(t), p^mm) ≤ C/t", with a generous C (1 − cos ≤ 2 always).
F14_C = 10.0
F14_CHECKPOINTS = (100, 500, 1000, 2000)
#: F3: the narrowest cone of Theorem L's scan (common.CONE_SCAN: largest R0, smallest ε), so
#: that an escape from it is not for want of R0 (control F4) but due to the tie.
F3_CONE = CONE_SCAN[-1]
#: F4: cone radii below Theorem L's R0 (the Fig. 1(b) escape was at R0 = 2), at cone width ε.
F4_R0 = (0.1, 0.25, 0.5, 1.0, 2.0)
F4_EPS = 1e-2
#: F5: the cone (R0, ε) = (10, 1e-3) of the start, one of Theorem L's scan (common.CONE_SCAN).
F5_CONE = (10.0, 1e-3)
#: MM-C-DESCENT-GENERAL: a non-negative ⟨∇L, p^mm⟩ whose log-space sum is this small relative
#: to its largest term is lost to cancellation (inconclusive), not a counterexample.
CANCELLATION_REL = 1e-12


# ---- F2 ----------------------------------------------------------------------------------------


@claim("MM-F2-GLOBAL-ALWAYS")
@given(inst=with_init(global_opt_instances()))
def test_f2_gd_always_global(inst):
    """(Wrong) For general scores, gradient descent from any p(0) always selects the globally
    optimal tokens and converges in direction to p^mm(opt)."""
    lim = settled(inst.problem, inst.p0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")
    gap = lim.loss_gap(inst.alpha)
    assert gap is None or gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g}"


# ---- F3, F4, F5: Theorem L without its hypotheses ------------------------------------------------


@claim("MM-F3-TIE-ATTRACTS")
@given(cone=tied_local_instances().flatmap(lambda i: cone_inits(i, *F3_CONE)))
def test_f3_tie_still_attracts(cone):
    """(Wrong: Theorem L without strictness) If no support token of α_i scores higher than α_i
    (ties allowed), GD from the cone C_{ε,R0}(p^mm(α)) converges in direction to p^mm(α)."""
    lim = settled(cone.problem, cone.p0)
    # α is non-global, so L has no floor to reach along p^mm(α): the direction is the claim.
    assert lim.converged_to(cone.alpha), lim.why_not(cone.alpha, "the tied")


@claim("MM-F4-ANY-R0")
@given(cone=local_opt_instances().flatmap(lambda i: cone_inits(i, st.sampled_from(F4_R0), F4_EPS)))
def test_f4_local_convergence_any_r0(cone):
    """(Wrong: Theorem L for any R0) If α is locally optimal, GD from any point of the cone
    C_{ε,R0}(p^mm(α)) converges to p^mm(α), whatever R0 > 0."""
    evidence.metric("R0", cone.meta["cone"]["R0"])
    lim = settled(cone.problem, cone.p0)
    assert lim.converged_to(cone.alpha), lim.why_not(cone.alpha, "the locally-optimal")


@claim("MM-F5-NONLOCAL-ATTRACTS")
@given(cone=beaten_support_instances().flatmap(lambda i: cone_inits(i, *F5_CONE)))
def test_f5_nonlocal_attracts(cone):
    """(Wrong) If a support token of α_i scores strictly higher than α_i (no ties), GD from the cone
    C_{ε,R0}(p^mm(α)) still converges in direction to p^mm(α)."""
    verdict = local_optimality(cone.keys, cone.scores, cone.alpha)
    evidence.metric("alpha locally optimal", float(verdict.locally_optimal))
    lim = settled(cone.problem, cone.p0)
    assert lim.converged_to(cone.alpha), lim.why_not(cone.alpha, "the non-locally-optimal")


# ---- descent lemma without equal scores ----------------------------------------------------------


@claim("MM-C-DESCENT-GENERAL")
@given(inst=global_opt_instances(), seed=SEEDS)
def test_descent_general_scores(inst, seed):
    """(Wrong: the descent lemma without equal non-optimal scores) For general scores with
    ATT-SVM(opt) feasible, ⟨∇L(p), p^mm(opt)⟩ < 0 for every p."""
    points = random_points(seeded(seed), inst.keys.shape[2], 20, -1.0, 1.0).numpy()
    for sign, rel, cos, agrees in descent_signs(inst, points):
        if sign >= 0 and rel < math.log(CANCELLATION_REL):  # the sign is not decided
            evidence.inconclusive("⟨∇L, p^mm⟩ lost to cancellation")
        evidence.metric("engine sign agrees", float(agrees))
        assert sign < 0, f"⟨∇L(p), p^mm⟩ > 0 (cos {cos:.3g})"


# ---- F7, F8, F9: the loss ------------------------------------------------------------------------


def difference_rank(keys, alpha) -> int:
    """Dimension of span{k_iα_i − k_it}: the directions in which p^mm(α) can point."""
    keys = keys.numpy() if isinstance(keys, torch.Tensor) else np.asarray(keys)
    rows = np.arange(keys.shape[0])
    diffs = (keys[rows, np.asarray(alpha)][:, None, :] - keys).reshape(-1, keys.shape[-1])
    return int(np.linalg.matrix_rank(diffs, tol=1e-9 * max(1.0, float(np.abs(diffs).max()))))


def spans_two_dimensions(keys, alpha, what: str) -> None:
    """The premise of F7 and F13: the differences span ≥ 2 dimensions (else reject)."""
    rank = difference_rank(keys, alpha)
    if not evidence.premise(rank >= 2, f"{what} differences span ≥ 2-D"):
        evidence.reject(f"{what} differences span {rank} dimension(s)")


@claim("MM-F7-CORRELATION-NO-MAXMARGIN")
@given(inst=with_init(equal_nonopt_instances(n=1, T=st.integers(3, 6), loss="correlation")))
def test_f7_correlation_loss_no_max_margin(inst):
    """(Wrong) With the correlation loss ℓ(x) = −x, gradient descent does NOT converge in direction
    to p^mm(opt) (single input, equal non-optimal scores, ATT-SVM(opt) feasible)."""
    spans_two_dimensions(inst.keys, inst.alpha, "key")
    out = settled(inst.problem, inst.p0).outcome
    reached = np.array_equal(out.selected, inst.alpha) and out.one_minus_cos <= DIRECTION_TOL
    assert not reached, f"converged to p^mm(opt): 1 − cos = {out.one_minus_cos:.2e}"


@claim("MM-F8-LOSS-TO-ZERO")
@given(
    inst=st.sampled_from(["logistic", "exponential"]).flatmap(
        lambda loss: high_score_instances(loss, F8_TOP)
    )
)
def test_f8_loss_to_zero(inst):
    """(Wrong) Under the hypotheses of Theorem G (single input, equal non-optimal scores, logistic
    or exponential loss, whose infimum over R is 0), the training loss tends to 0."""
    out = settled(inst.problem, inst.p0).outcome
    loss = float(inst.problem.loss_value(out.p))
    floor = inst.problem.loss_floor(inst.alpha)
    evidence.metric("L at convergence", loss)
    evidence.metric("loss floor ℓ(γ_opt)", floor)
    evidence.metric("L / ℓ(γ_opt)", loss / floor)
    assert loss <= F8_FLOOR_FRACTION * floor, (
        f"L = {loss:.4g} > {F8_FLOOR_FRACTION:g}·ℓ(γ_opt) = {F8_FLOOR_FRACTION * floor:.4g} at "
        f"‖p‖ = {float(out.p.norm()):.3g}"
    )


@claim("MM-F9-SQUARE-DIVERGES")
@given(inst=square_loss_instances(), seed=SEEDS)
def test_f9_square_loss_diverges(inst, seed):
    """(Wrong: dropping strict monotonicity of ℓ) With the square loss ℓ(x) = (1 − x)² and the
    target 1 strictly inside the range of the scores, gradient flow still has ‖p(t)‖ → ∞."""
    problem = PromptProblem(inst.keys, inst.scores, square(1.0))
    p0 = random_points(seeded(seed), inst.keys.shape[2], 1, -1.0, 1.0)[0]
    traj = trace_flow(problem, p0, max_norm=F9_MAX_NORM)
    p, diverged = traj.final, traj.stop == "reached max_norm"
    loss = float(problem.loss_value(p))
    evidence.metric("‖p‖ where the flow stopped", float(torch.linalg.vector_norm(p)))
    evidence.metric("L where the flow stopped", loss)
    if not diverged and loss > F9_MINIMISER_LOSS:
        evidence.inconclusive(f"flow stopped ({traj.stop}) at L = {loss:.3g}, not a minimiser")
    assert diverged, (
        f"the flow stops at a finite minimiser: ‖p‖ = {float(p.norm()):.4g}, L = {loss:.2e} "
        f"({traj.stop})"
    )


# ---- F13, F14 ------------------------------------------------------------------------------------


@claim("MM-F13-W-FULL-RANK")
@given(inst=equal_nonopt_instances(n=st.integers(1, 2), T=st.integers(3, 5)), seed=SEEDS)
def test_f13_w_full_rank(inst, seed):
    """(Wrong) Training W with p fixed, W(t) converges in direction to a full-rank matrix."""
    spans_two_dimensions(inst.X, inst.alpha, "token")
    traj, W0 = train_w(inst, seeded(seed))
    start, end = singular_ratio(W0), float(traj.sigma_ratio[-1])
    evidence.metric("σ₂/σ₁ of W(T)", end)
    assert end >= F13_RANK_FRACTION * start, f"σ₂/σ₁ fell from {start:.3g} to {end:.3g}"


@claim("MM-F14-RATE")
@given(inst=with_init(equal_nonopt_instances(n=1)))
def test_f14_rate(inst):
    """(Wrong: a rate) Plain GD with η = 1/L_p on a single input with equal non-optimal scores has
    1 − cos(p(t), p^mm) ≤ C/t."""
    sol = evidence.solved(att_svm(inst.keys, inst.alpha), "ATT-SVM(α)")
    eta = 1.0 / inst.problem.smoothness_bound()
    traj = gd(inst.problem, inst.p0, eta=eta, steps=max(F14_CHECKPOINTS))
    for t in F14_CHECKPOINTS:
        omc = one_minus_cos(traj.ps[t], sol.x)
        evidence.metric(f"1 − cos at t = {t}", omc)
        assert omc <= F14_C / t, f"1 − cos = {omc:.3g} > C/t = {F14_C / t:.3g} at t = {t}"


# ---- F11, F15: classification duties of the engine -----------------------------------------------


@claim("MM-F11-INFEASIBLE")
@given(inst=infeasible_instances(n=st.integers(1, 3)), seed=SEEDS)
def test_f11_infeasible_is_classified(inst, seed):
    """When ATT-SVM(opt) is infeasible, the oracle certifies it and the engine never reports
    convergence to p^mm(opt): a run converges to the certified SVM of another selection, or is
    classified infeasible/inconclusive."""
    sol = att_svm(inst.keys, inst.alpha)
    assert sol.status == "infeasible", f"oracle says {sol.status}: {sol.reason}"
    p0 = random_points(seeded(seed), inst.keys.shape[2], 1, -1.0, 1.0)[0]
    with failures.tolerate(failures.GRADIENT_FLOW):  # "inconclusive" is a classification here
        out, _ = settle(inst.problem, p0)
    evidence.metric(f"outcome {out.status}", 1.0)
    if np.array_equal(out.selected, inst.alpha):
        # converged to p^mm(opt) would be converged without sharing (a twin of opt's key, the
        # "duplicate" variant, makes the flow share opt's mass for ever: a limit of its own)
        assert not (out.converged and not out.tie_sharing), (
            "reported convergence to an infeasible ATT-SVM"
        )
    if out.converged:
        assert out.svm.status == "optimal", f"converged without a certified SVM: {out.svm.status}"
        assert out.one_minus_cos <= DIRECTION_TOL


def authors_ngd(problem: PromptProblem, p0, *, lr=0.1, steps=1000, eps=1e-9) -> torch.Tensor:
    """The official notebooks' recipe: autograd gradient, p ← p − lr·g/(‖g‖ + eps), float64.
    Its ``+ eps`` freezes p once ‖g‖ ≪ eps (spec §3 pitfalls)."""
    p = torch.as_tensor(p0, dtype=DTYPE).clone().requires_grad_(True)
    for _ in range(steps):
        loss = problem.loss_value(p)
        (g,) = torch.autograd.grad(loss, p)
        with torch.no_grad():
            p -= lr * g / (torch.linalg.vector_norm(g) + eps)
    return p.detach()


def engine_verdict(inst: PromptInstance, p0) -> Limit:
    """The engine's settled outcome from ``p0`` (a gradient-flow failure is a classification
    here, not a discarded example), recorded; on the C = 100 logistic instance the authors'
    recipe is run beside it, for the record of its stall."""
    with failures.tolerate(failures.GRADIENT_FLOW):  # "inconclusive" is a classification here
        out, transient = settle(inst.problem, p0)
    record_outcome(out, transient)
    evidence.metric("engine inconclusive", float(out.status == "inconclusive"))
    sol = att_svm(inst.keys, inst.alpha)
    if inst.meta.get("C") == 100.0 and inst.loss == "logistic":
        stalled = authors_ngd(inst.problem, p0)
        evidence.metric("authors' recipe: cos(p, p^mm) after 1000 steps", cosine(stalled, sol.x))
    return Limit("converged", out, transient)


@claim("MM-F15-NUMERICS")
@given(inst=numerically_hard_instances())
@example(inst=loss_comparison_instance(100.0, "logistic"))
def test_f15_numerical_artefacts(inst):
    """On numerically hard instances the engine either converges to the correct limit p^mm(opt) or
    reports inconclusive: never a false counterexample."""
    lim = engine_verdict(inst, torch.zeros(inst.d, dtype=DTYPE) if inst.p0 is None else inst.p0)
    if lim.outcome.status == "inconclusive":
        return  # an honest "cannot decide" is a correct classification
    assert lim.outcome.converged, f"engine: {lim.outcome.status} ({lim.reason})"
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the correct")
    gap = lim.loss_gap(inst.alpha)
    assert gap is None or gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g}"
