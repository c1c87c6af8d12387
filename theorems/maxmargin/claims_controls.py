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

import dataclasses
import math

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models import failures
from models.attention import PromptProblem, cosine, one_minus_cos
from models.dynamics import gd, trace_flow
from models.losses import square
from models.selection import local_optimality
from models.svm import att_svm
from models.wtrain import singular_ratio
from strategies import (
    cone_inits,
    decoupled_instances,
    equal_nonopt_instances,
    global_opt_instances,
    infeasible_instances,
    local_opt_instances,
    loss_comparison_instance,
)
from strategies.combinators import SEEDS, random_points, seeded, with_init
from strategies.instances import PromptInstance
from theorems import claim, evidence
from theorems.maxmargin.common import (
    CONE_SCAN,
    DIRECTION_TOL,
    check_limit,
    descent_signs,
    record_outcome,
    settle,
    train_w,
    undecided,
)

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
#: F4: cone radii below Theorem L's R0 (the Fig. 1(b) escape was at R0 = 2).
F4_R0 = (0.1, 0.25, 0.5, 1.0, 2.0)


def _record(inst: PromptInstance) -> None:
    evidence.instance(inst.to_json())


def _with_scores(inst: PromptInstance, g: torch.Tensor, meta: dict) -> PromptInstance:
    """The decoupled instance with new scores g (x_it = [k_it; y_i g_it])."""
    X = inst.X.clone()
    X[..., -1] = inst.y[:, None] * g
    assumptions = inst.assumptions - {"locally_optimal_alpha", "equal_nonopt_scores"}
    return dataclasses.replace(
        inst, X=X, assumptions=assumptions, meta={**inst.meta, "g": g, **meta}
    )


# ---- F2 ----------------------------------------------------------------------------------------


@claim("MM-F2-GLOBAL-ALWAYS")
@given(inst=with_init(global_opt_instances()))
def test_f2_gd_always_global(inst):
    """(Wrong) For general scores, gradient descent from any p(0) always selects the globally
    optimal tokens and converges in direction to p^mm(opt)."""
    _record(inst)
    out, transient = settle(inst.problem, inst.p0)
    record_outcome(out, transient)
    undecided(out)
    check_limit(inst.problem, out, inst.alpha, "the global")


# ---- F3, F4, F5: Theorem L without its hypotheses ------------------------------------------------


@st.composite
def tied_local_instances(draw):
    """A non-global locally-optimal α (``local_opt_instances``) whose support tokens, in one
    input where α_i ≠ opt_i, are all given α_i's own score: no support token scores higher,
    but strictness (Def. 2) fails by ties. α stays non-global; opt stays unique."""
    inst = draw(local_opt_instances(n=st.integers(1, 3)))
    opt = inst.meta["opt"]
    i = draw(st.sampled_from([j for j in range(inst.n) if opt[j] != inst.alpha[j]]))
    g = inst.meta["g"].clone()
    for t in inst.meta["support"][i]:
        g[i, t] = g[i, int(inst.alpha[i])]
    return _with_scores(inst, g, {"tied_input": i})


@claim("MM-F3-TIE-ATTRACTS")
@given(cone=tied_local_instances().flatmap(lambda i: cone_inits(i, *F3_CONE)))
def test_f3_tie_still_attracts(cone):
    """(Wrong: Theorem L without strictness) If no support token of α_i scores higher than α_i
    (ties allowed), GD from the cone C_{ε,R0}(p^mm(α)) with (R0, ε) = (1000, 1e-06) converges in
    direction to p^mm(α)."""
    _record(cone)
    out, transient = settle(cone.problem, cone.p0)
    record_outcome(out, transient)
    undecided(out)
    check_limit(cone.problem, out, cone.alpha, "the tied")


@claim("MM-F4-ANY-R0")
@given(cone=local_opt_instances().flatmap(lambda i: cone_inits(i, st.sampled_from(F4_R0), 1e-2)))
def test_f4_local_convergence_any_r0(cone):
    """(Wrong: Theorem L for any R0) If α is locally optimal, GD from any point of the cone
    C_{ε,R0}(p^mm(α)) converges to p^mm(α), whatever R0 > 0 (here R0 ∈ [0.1, 2], ε = 1e-2)."""
    evidence.metric("R0", cone.meta["cone"]["R0"])
    _record(cone)
    out, transient = settle(cone.problem, cone.p0)
    record_outcome(out, transient)
    undecided(out)
    check_limit(cone.problem, out, cone.alpha, "the locally-optimal")


@st.composite
def beaten_support_instances(draw):
    """A non-global locally-optimal instance in which one support token of one input is
    raised strictly above α_i (by a gap in [0.05, 0.5]): α is no longer locally optimal, and
    there are no ties."""
    inst = draw(local_opt_instances(n=st.integers(1, 3)))
    i = draw(st.integers(0, inst.n - 1))
    t = draw(st.sampled_from(inst.meta["support"][i]))
    g = inst.meta["g"].clone()
    g[i, t] = g[i, int(inst.alpha[i])] + draw(st.floats(0.05, 0.5))
    return _with_scores(inst, g, {"raised": (i, t)})


@claim("MM-F5-NONLOCAL-ATTRACTS")
@given(cone=beaten_support_instances().flatmap(lambda i: cone_inits(i, 10.0, 1e-3)))
def test_f5_nonlocal_attracts(cone):
    """(Wrong) GD can converge to the direction of a selection α that is not locally optimal: if a
    support token of α_i scores strictly higher than α_i (no ties), GD from the cone
    C_{1e-3,10}(p^mm(α)) still converges in direction to p^mm(α)."""
    _record(cone)
    verdict = local_optimality(cone.keys, cone.scores, cone.alpha)
    evidence.metric("alpha locally optimal", float(verdict.locally_optimal))
    out, transient = settle(cone.problem, cone.p0)
    record_outcome(out, transient)
    undecided(out)
    check_limit(cone.problem, out, cone.alpha, "the non-locally-optimal")


# ---- descent lemma without equal scores ----------------------------------------------------------


@claim("MM-C-DESCENT-GENERAL")
@given(inst=global_opt_instances(), seed=SEEDS)
def test_descent_general_scores(inst, seed):
    """(Wrong: the descent lemma without equal non-optimal scores) For general scores with
    ATT-SVM(opt) feasible, ⟨∇L(p), p^mm(opt)⟩ < 0 for every p."""
    _record(inst)
    points = random_points(seeded(seed), inst.keys.shape[2], 20, -1.0, 1.0).numpy()
    for sign, rel, cos, agrees in descent_signs(inst, points):
        if sign >= 0 and rel < math.log(1e-12):  # cancellation: the sign is not decided
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


def _high_score_instances(loss: str):
    """Theorem G's hypotheses (n = 1, equal non-optimal scores, arbitrary p0) with the optimal
    score γ+ in F8_TOP (shrinking toward the top: the smallest floor) and γ− = γ+ − gap."""
    lo, hi = F8_TOP
    levels = st.tuples(st.floats(0.0, hi - lo), st.floats(0.05, 1.0)).map(
        lambda xg: (hi - xg[0], hi - xg[0] - xg[1])
    )
    return levels.flatmap(lambda lv: with_init(equal_nonopt_instances(n=1, loss=loss, levels=lv)))


@claim("MM-F7-CORRELATION-NO-MAXMARGIN")
@given(inst=with_init(equal_nonopt_instances(n=1, T=st.integers(3, 6), loss="correlation")))
def test_f7_correlation_loss_no_max_margin(inst):
    """(Wrong: the max-margin bias needs an exponentially-tailed loss) With the correlation loss
    ℓ(x) = −x, gradient descent does NOT converge in direction to p^mm(opt) (single input, equal
    non-optimal scores, ATT-SVM(opt) feasible, T ≥ 3 tokens whose key differences k_opt − k_t
    span ≥ 2 dimensions, so that p^mm is a direction, not a sign)."""
    _record(inst)
    rank = difference_rank(inst.keys, inst.alpha)
    if not evidence.premise(rank >= 2, "key differences span ≥ 2-D"):
        evidence.reject(f"key differences span {rank} dimension(s)")
    out, transient = settle(inst.problem, inst.p0)
    record_outcome(out, transient)
    undecided(out)
    reached = np.array_equal(out.selected, inst.alpha) and out.one_minus_cos <= DIRECTION_TOL
    assert not reached, f"converged to p^mm(opt): 1 − cos = {out.one_minus_cos:.2e}"


@claim("MM-F8-LOSS-TO-ZERO")
@given(inst=st.sampled_from(["logistic", "exponential"]).flatmap(_high_score_instances))
def test_f8_loss_to_zero(inst):
    """(Wrong) Under the hypotheses of Theorem G (single input, equal non-optimal scores, logistic
    or exponential loss, whose infimum over R is 0), the training loss tends to 0: at
    directional convergence L(p) ≤ 0.5·ℓ(γ_opt), a fixed fraction of any positive number
    (optimal scores γ_opt in [2, 30], so ℓ(γ_opt) runs from 0.13 down to ~1e-13)."""
    _record(inst)
    out, transient = settle(inst.problem, inst.p0)
    record_outcome(out, transient)
    undecided(out)
    loss = float(inst.problem.loss_value(out.p))
    floor = inst.problem.loss_floor(inst.alpha)
    evidence.metric("L at convergence", loss)
    evidence.metric("loss floor ℓ(γ_opt)", floor)
    evidence.metric("L / ℓ(γ_opt)", loss / floor)
    assert loss <= F8_FLOOR_FRACTION * floor, (
        f"L = {loss:.4g} > {F8_FLOOR_FRACTION:g}·ℓ(γ_opt) = {F8_FLOOR_FRACTION * floor:.4g} at "
        f"‖p‖ = {float(out.p.norm()):.3g}"
    )


def _straddling_scores(n: int, T: int):
    """One score in (1, 2], the others in [−1, 1): the square loss's target 1 lies strictly
    inside the score range."""

    def build(seed: int, where: int):
        gen = seeded(seed)
        g = -1.0 + 1.95 * torch.rand(n, T, generator=gen, dtype=DTYPE)  # [−1, 0.95)
        g[:, where] = 1.05 + 0.95 * torch.rand(n, generator=gen, dtype=DTYPE)  # [1.05, 2)
        return g

    return st.builds(build, SEEDS, st.integers(0, T - 1))


@claim("MM-F9-SQUARE-DIVERGES")
@given(
    inst=st.integers(2, 3).flatmap(
        lambda T: decoupled_instances(
            n=1, T=T, dk=st.integers(T - 1, 3), scores=_straddling_scores(1, T), loss="square"
        )
    ),
    seed=SEEDS,
)
def test_f9_square_loss_diverges(inst, seed):
    """(Wrong: dropping strict monotonicity of ℓ) With the square loss ℓ(x) = (1 − x)² and the
    target 1 strictly inside the range of the scores (one input, keys in general position),
    gradient flow still has ‖p(t)‖ → ∞."""
    _record(inst)
    problem = PromptProblem(inst.keys, inst.scores, square(1.0))
    p0 = random_points(seeded(seed), inst.keys.shape[2], 1, -1.0, 1.0)[0]
    traj = trace_flow(problem, p0, max_norm=F9_MAX_NORM)
    p = traj.final
    loss = float(problem.loss_value(p))
    evidence.metric("‖p‖ where the flow stopped", float(torch.linalg.vector_norm(p)))
    evidence.metric("L where the flow stopped", loss)
    if traj.stop == "reached max_norm":
        return  # diverged on this instance: consistent with the (wrong) claim
    if loss > F9_MINIMISER_LOSS:
        evidence.inconclusive(f"flow stopped ({traj.stop}) at L = {loss:.3g}, not a minimiser")
    raise AssertionError(
        f"the flow stops at a finite minimiser: ‖p‖ = {float(p.norm()):.4g}, L = {loss:.2e} "
        f"({traj.stop})"
    )


# ---- F13, F14 ------------------------------------------------------------------------------------


@claim("MM-F13-W-FULL-RANK")
@given(inst=equal_nonopt_instances(n=st.integers(1, 2), T=st.integers(3, 5)), seed=SEEDS)
def test_f13_w_full_rank(inst, seed):
    """(Wrong) Training W with p fixed (normalized GD, 1000 steps of lr 0.1 from a small full-rank
    W(0)), W(t) converges in direction to a full-rank matrix: σ₂/σ₁ of W(T) stays above a tenth
    of σ₂/σ₁ of W(0) (n ∈ {1, 2} inputs of T ≥ 3 tokens whose differences x_iopt − x_it span ≥ 2
    dimensions, so that the limit's left factor q^mm is a direction)."""
    _record(inst)
    rank = difference_rank(inst.X, inst.alpha)
    if not evidence.premise(rank >= 2, "token differences span ≥ 2-D"):
        evidence.reject(f"token differences span {rank} dimension(s)")
    traj, W0 = train_w(inst, seeded(seed))
    start, end = singular_ratio(W0), float(traj.sigma_ratio[-1])
    evidence.metric("σ₂/σ₁ of W(T)", end)
    assert end >= F13_RANK_FRACTION * start, f"σ₂/σ₁ fell from {start:.3g} to {end:.3g}"


@claim("MM-F14-RATE")
@given(inst=with_init(equal_nonopt_instances(n=1)))
def test_f14_rate(inst):
    """(Wrong: a rate) Plain GD with η = 1/L_p on a single input with equal non-optimal scores has
    1 − cos(p(t), p^mm) ≤ C/t with C = 10, at t = 100, 500, 1000, 2000."""
    _record(inst)
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
    """When ATT-SVM(opt) is infeasible (some k_i,opt lies in the convex hull of its input's other
    keys), the oracle certifies infeasibility (LP + Farkas vector) and the engine never reports
    convergence to p^mm(opt): a run either converges to the certified SVM of another selection,
    or is classified infeasible/inconclusive."""
    _record(inst)
    sol = att_svm(inst.keys, inst.alpha)
    assert sol.status == "infeasible", f"oracle says {sol.status}: {sol.reason}"
    p0 = random_points(seeded(seed), inst.keys.shape[2], 1, -1.0, 1.0)[0]
    with failures.tolerate(failures.GRADIENT_FLOW):  # "inconclusive" is a classification here
        out, transient = settle(inst.problem, p0)
    evidence.metric(f"outcome {out.status}", 1.0)
    if np.array_equal(out.selected, inst.alpha):
        assert out.status != "converged", "reported convergence to an infeasible ATT-SVM"
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


@st.composite
def numerically_hard_instances(draw):
    """Where float64 recipes stall: the loss comparison with a large score C (the first input
    saturates long before the direction turns), or a single input with widely spread keys
    (softmax saturation at margins of ~37 after a few steps)."""
    if draw(st.booleans()):
        C = draw(st.floats(1.0, 1000.0))
        return loss_comparison_instance(C, draw(st.sampled_from(["logistic", "correlation"])))
    return draw(
        with_init(equal_nonopt_instances(n=1, key_scale=st.sampled_from([10.0, 30.0, 100.0])))
    )


@claim("MM-F15-NUMERICS")
@given(inst=numerically_hard_instances())
@example(inst=loss_comparison_instance(100.0, "logistic"))
def test_f15_numerical_artefacts(inst):
    """On numerically hard instances (the loss comparison with C up to 1000, where the authors' '+
    eps' normalized GD stalls at C = 100; single inputs whose softmax saturates after a few
    steps) the engine either converges to the correct limit p^mm(opt) (opt is the only
    locally-optimal selection there) or reports inconclusive: never a false counterexample."""
    _record(inst)
    p0 = torch.zeros(inst.d, dtype=DTYPE) if inst.p0 is None else inst.p0
    with failures.tolerate(failures.GRADIENT_FLOW):  # "inconclusive" is a classification here
        out, transient = settle(inst.problem, p0)
    record_outcome(out, transient)
    evidence.metric("engine inconclusive", float(out.status == "inconclusive"))
    sol = att_svm(inst.keys, inst.alpha)
    if inst.meta.get("C") == 100.0 and inst.loss == "logistic":
        stalled = authors_ngd(inst.problem, p0)
        evidence.metric("authors' recipe: cos(p, p^mm) after 1000 steps", cosine(stalled, sol.x))
    if out.status == "inconclusive":
        return  # an honest "cannot decide" is a correct classification
    assert out.converged, f"engine: {out.status} ({out.reason})"
    check_limit(inst.problem, out, inst.alpha, "the correct")
