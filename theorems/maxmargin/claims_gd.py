"""Gradient-descent claims of arXiv 2306.13596 (spec maxmargin §1.9, §2.1–§2.3, §2.8).

The dynamics are run by the engine: ``models.flows.dynamics.converge`` traces gradient flow (the
η → 0 limit of GD with η ≤ 1/L_p; GD, small-step GD and normalized GD follow one path) in log
space until the direction matches the ATT-SVM of the tokens it selects; ``gd`` is plain GD
for the step-size statements; ``models.flows.wtrain.w_ngd`` trains W with p fixed.

A claim about a limit asks ``theorems.limits.flow`` where the flow goes: every "converged"
limit is confirmed by tracing two more decades of ‖p‖ (a run that passes *through* the
direction of a selection's SVM and leaves again is not a limit), and a run that ends at a
finite point is decided instead of excused (a certified strict local minimiser is a
counterexample to ‖p(t)‖ → ∞); only what the engine cannot decide is inconclusive. The claim
body asserts the paper's conclusion on that certified limit.

The helpers these claims share with the controls and the figures are in ``common``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models.flows.dynamics import gd, trace_flow
from models.flows.limits import DERIVATIONS
from models.flows.regpath import log_gap_batch
from models.flows.wtrain import WProblem, correlation, singular_ratio, w_gd
from models.numerics.highprec import gradient_error
from models.oracles.selection import local_optimality
from models.oracles.svm import att_constraints, att_svm, w_svm, w_svm_closed_form
from models.problems.attention import one_minus_cos
from strategies import (
    cone_inits,
    decoupled_instances,
    equal_nonopt_instances,
    global_opt_instances,
    local_opt_instances,
)
from strategies.combinators import (
    SEEDS,
    generic_instances,
    heterogeneous,
    random_points,
    seeded,
    with_init,
)
from strategies.instances import PromptInstance
from strategies.maxmargin_dynamics import cone_grid, theorem_g_counterexample
from theorems import claim, evidence, saved_arguments
from theorems.limits import Limit, flow, follow
from theorems.maxmargin.common import (
    CONE_GRID,
    DIRECTION_TOL,
    GRADIENT_ROUNDING_DERIVATION,
    LOSS_GAP_TOL,
    UNIT_ROUNDOFF,
    W_STEPS,
    descent_signs,
    gradient_terms,
    train_w,
    train_w_problem,
    w_problem,
)
from theorems.maxmargin.common_svm import KKT_DISTANCE_DERIVATION, kkt_distance

DTYPE = torch.float64
LOSSES = ("logistic", "exponential", "correlation")  # Assumption A (spec §1.7)

# ---- tolerances (spec §6) -----------------------------------------------------------------------
#: W-NGD after W_STEPS steps (common.W_STEPS): spec §6's NGD row asks cos ≥ 0.999; σ₂/σ₁ ≤ 1e-2
#: is 20× the calibrated 5.5e-4 (and, at the limit, MM-W-CONVERGE-SELECTED, see its derivation).
W_CORRELATION_MIN = 0.999
W_SIGMA_RATIO_MAX = evidence.tolerance(
    1e-2,
    "after W_STEPS of W-NGD: 20× the calibrated 5.5e-4 (a calibration, of MM-W-CONVERGE). At the "
    "limit (MM-W-CONVERGE-SELECTED) it is a threshold between rank one and rank ≥ 2: there W = "
    "A + q pᵀ/‖p‖² with A = W(T) − q(T)pᵀ/‖p‖² fixed and ‖q‖ → ∞ along the certified flow, so "
    "σ₂(W) ≤ ‖A‖ (Weyl: a rank-one term moves σ₂ by at most σ₁ of the rest) and σ₁(W) ≥ "
    "‖q‖/‖p‖ − ‖A‖: σ₂/σ₁ ≤ ‖A‖‖p‖/(‖q‖ − ‖A‖‖p‖) → 0, below 1e-2 once ‖q‖ ≥ 101·‖A‖‖p‖, far "
    "inside the flow's confirmed ‖q‖ (≥ 1e2·‖q^mm‖ past settling); a normalised limit of rank ≥ 2 "
    "keeps σ₂/σ₁ at its own ratio, Θ(1) for any W(0)-dependent second direction.",
)
#: Plain GD with η = 1/L_p (spec §1.9): the loss may rise by float64 rounding only. Losses
#: are compared in log space (log(L − L*)), accurate to ~1e-15 relative.
MONOTONE_SLACK = 1e-12
GD_STEPS = 2000


# ---- §2.1 descent lemma --------------------------------------------------------------------------


@claim("MM-LEMMA-DESCENT")
@given(
    inst=st.one_of(
        st.sampled_from(LOSSES).flatmap(lambda loss: equal_nonopt_instances(loss=loss)),
        equal_nonopt_instances(n=st.integers(1, 3), T=st.integers(2, 4), dk=st.integers(1, 3)),
    ),
    seed=SEEDS,
)
def test_descent_direction(inst, seed):
    """Under Assumption A, if every input's non-optimal tokens share one score and ATT-SVM(opt) is
    feasible, then ⟨∇L(p), p^mm⟩ < 0 for every p ∈ R^d: p^mm is a global descent direction."""
    points = random_points(seeded(seed), inst.keys.shape[2], 20, -1.0, 4.0).numpy()
    # Centred at opt, every term of the sum has the same sign (the lemma's proof): the
    # computed sign is then exact however small the value is.
    for sign, _, cos, agrees in descent_signs(inst, points, center=inst.alpha):
        evidence.metric("cos(∇L, p^mm)", cos)
        evidence.metric("engine sign agrees", float(agrees))
        evidence.slack("1 + cos(∇L, p^mm)  (< 1 ⇔ descent)", 1 + cos, 1.0)
        assert sign < 0, f"⟨∇L(p), p^mm⟩ ≥ 0 (sign {sign}, cos {cos:.3g})"


# ---- §2.2 Theorem G ------------------------------------------------------------------------------


@claim("MM-THM-G")
@given(inst=heterogeneous(equal_nonopt_instances()))
@example(inst=theorem_g_counterexample())
def test_theorem_g_as_read(inst):
    """Theorem G: under Assumption A, η ≤ 1/L_p, ATT-SVM(opt) feasible and equal non-optimal
    scores, GD from any p(0) has ‖p(t)‖ → ∞, p(t)/‖p(t)‖ → p^mm(opt)/‖p^mm(opt)‖, s_opt → 1
    and L(p(t)) → (1/n)Σℓ(γ_i,opt_i)."""
    lim = flow(inst.problem, inst.p0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")
    assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL


@claim("MM-THM-G-N1")
@given(
    inst=st.sampled_from(LOSSES).flatmap(
        lambda loss: heterogeneous(equal_nonopt_instances(n=1, dk=st.integers(1, 6), loss=loss))
    )
)
def test_theorem_g_single_input(inst):
    """Theorem G for a single input (n = 1): GD from any p(0) converges in direction to
    p^mm(opt), with s_opt → 1 and L → ℓ(γ_opt)."""
    lim = flow(inst.problem, inst.p0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")
    assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL


# ---- §2.3 Theorem L ------------------------------------------------------------------------------


#: MM-THM-L-CONE: starts drawn in each cone of CONE_GRID (σ uniform up to the cone's edge).
CONE_STARTS = 3
#: The smallest working R0 must lie at least two grid levels below the top (R0 ≤ 200 on a grid
#: that goes to 1000), so that the assertion rests on a settled tail of the grid (every start
#: at 200, 500 and 1000 converges), not on its last point alone. Calibration (20 ci draws,
#: before this claim was rewritten): the smallest converging R0 of the old scan was 2 to 50.
CONE_R0_MAX = 200.0


def smallest_converging_r0(alpha, grid) -> tuple[float | None, tuple]:
    """Walk the nested cones of ``grid`` from the narrowest (largest R0) down while every start
    converges to p^mm(α). Returns R0*, the last level passed (None if the top level fails), and
    (R0, limit) of a start that did not converge at the level below (one the engine decided, if
    any; (None, None) if every level passed)."""
    tail = None
    for starts in reversed(grid):
        R0 = starts[0].meta["cone"]["R0"]
        lims = [follow(s.problem, s.p0) for s in starts]
        missed = [lim for lim in lims if not lim.converged_to(alpha)]
        if missed:
            decided = [lim for lim in missed if lim.kind != "undecided"]
            return tail, (R0, (decided or missed)[0])
        tail = R0
    return tail, (None, None)


def cone_reading(inst: PromptInstance, grid):
    """``smallest_converging_r0`` with MM-THM-L-CONE's bookkeeping: R0* as a metric and slack,
    and an undecided start below the bound as an inconclusive example."""
    r0, (R0, lim) = smallest_converging_r0(inst.alpha, grid)
    evidence.metric("R0*: smallest grid R0 from which every start converges", r0 or math.inf)
    if r0 is not None and r0 <= CONE_R0_MAX:
        evidence.slack("R0* / 200", r0, CONE_R0_MAX)
    elif lim.kind == "undecided":
        evidence.inconclusive(f"a start at R0 = {R0:g}: {lim.reason}")
    return r0, (R0, lim)


@claim("MM-THM-L-CONE")
@given(cones=cone_grid(local_opt_instances(), CONE_GRID, CONE_STARTS))
def test_theorem_l_cone(cones):
    """Theorem L: under Assumption A and η ≤ 1/L_p, if α is locally optimal (Def. 2) there are
    ε ∈ (0, 1) and R0 > 0 such that GD from any p(0) in the cone C_{ε,R0}(p^mm(α)) has
    ‖p(t)‖ → ∞ and p(t)/‖p(t)‖ → p^mm(α)/‖p^mm(α)‖."""
    inst, grid = cones
    r0, (R0, lim) = cone_reading(inst, grid)
    assert r0 is not None and r0 <= CONE_R0_MAX, (
        f"the smallest grid R0 from which every start converges to p^mm({inst.alpha.tolist()}) "
        f"is {r0} > {CONE_R0_MAX:g}: a start in the cone at R0 = {R0:g} {lim.describe()}"
    )


#: MM-THM-L-FLOOR: the cone GD starts in, and the larger cone its iterates must stay in. The
#: statement's shape (spec §2.3 [R?]: iterates from a smaller cone stay in a larger one) is
#: met with widths 100× apart; calibration (25 draws, start cone (200, 1e-5)): the iterates
#: reached 1 − cos = 8.1·1e-5 at worst, 8 % of the 1e-3 allowed.
FLOOR_CONE = (200.0, 1e-5)
OUTER_EPS = 1e-3


def signed_loss_gap(problem, p, alpha) -> float:
    """L(p) − (1/n)Σℓ(γ_iα_i) with its sign (L may approach a local floor from below), in log
    space."""
    log_gap, sign = log_gap_batch(problem, p[None], alpha)
    return float(sign[0]) * math.exp(float(log_gap[0]))


def cone_excursion(problem, p0, p_mm) -> tuple[float, float]:
    """Along the flow from p0 (traced to ‖p‖ = 1e6): the largest 1 − cos(p(t), p^mm) (recorded
    as slack against OUTER_EPS) and the smallest ‖p(t)‖."""
    path = trace_flow(problem, p0, max_norm=1e6).ps
    p_hat = torch.as_tensor(p_mm, dtype=DTYPE)
    norms = torch.linalg.vector_norm(path, dim=-1)
    worst = float((1 - path @ (p_hat / p_hat.norm()) / norms).max())
    evidence.slack("max_t 1 − cos(p(t), p^mm(α))", worst, OUTER_EPS)
    return worst, float(norms.min())


@claim("MM-THM-L-FLOOR")
@given(inst=cone_inits(local_opt_instances(), R0=FLOOR_CONE[0], eps=FLOOR_CONE[1]))
def test_theorem_l_loss_floor(inst):
    """Theorem L for a locally-optimal α that is not the global optimum: GD from the cone
    C_{ε,R0}(p^mm(α)) has L(p(t)) → (1/n)Σℓ(γ_iα_i), a floor strictly above the global infimum
    (1/n)Σℓ(γ_i,opt_i), and its iterates stay in a larger cone around p^mm(α)."""
    lim = floor_flow(inst)
    # Converging to p^mm(α) with the softmax mass off α → 0 is L(p(t)) → L_α (LOSS_GAP_TOL's
    # derivation): the loss clause is this assertion, not a second one that restates it.
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the locally-optimal")
    worst, lowest = floor_excursion(inst, lim)
    assert worst <= OUTER_EPS, f"an iterate left the cone: 1 − cos = {worst:.3g} > {OUTER_EPS}"
    assert lowest >= FLOOR_CONE[0] * (1 - 1e-12), f"an iterate reached ‖p‖ = {lowest:.6g} < R0"


def floor_flow(inst: PromptInstance):
    """MM-THM-L-FLOOR's premise (L_α above inf L by more than the tolerance) and the certified
    limit of the flow from its cone start (shared with its medium-rung twin)."""
    problem, alpha = inst.problem, inst.alpha
    floor, infimum = problem.loss_floor(alpha), problem.loss_floor(inst.meta["opt"])
    evidence.metric("L_α − inf L", floor - infimum)
    evidence.premise(floor - infimum > 2 * LOSS_GAP_TOL, "L_α above inf L by more than the tol")
    return flow(problem, inst.p0)


def floor_excursion(inst: PromptInstance, lim) -> tuple[float, float]:
    """The loss gap at the limit (a metric) and ``cone_excursion`` of the flow from p(0)."""
    problem = inst.problem
    evidence.metric("L(p) − L_α at the limit", signed_loss_gap(problem, lim.outcome.p, inst.alpha))
    return cone_excursion(problem, inst.p0, inst.meta["cone"]["p_mm"])


@claim("MM-THM-L-RANDOM")
@given(inst=with_init(global_opt_instances()))
def test_theorem_l_random_init(inst):
    """Authors' protocol for Theorem L: with continuous random scores and a random p(0), the
    selection α̂ that GD reaches is locally optimal and p(t)/‖p(t)‖ → p^mm(α̂)/‖p^mm(α̂)‖."""
    lim = flow(inst.problem, inst.p0)
    assert lim.diverges, lim.describe()
    selected, verdict, gap = reached_selection(inst, lim)
    assert verdict.locally_optimal, f"GD selected {selected.tolist()}: {verdict.reason}"
    assert lim.converged_to(selected), lim.why_not(selected, "its own")
    assert gap is None or gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g} > {LOSS_GAP_TOL:g}"


def reached_selection(inst: PromptInstance, lim):
    """(the selection the flow reached, its local-optimality verdict, the loss gap at the
    limit where α̂ is the top-score selection, else None): what MM-THM-L-RANDOM and its
    twins at the larger rungs (claims_ladder) read."""
    selected = lim.outcome.selected
    verdict = local_optimality(inst.keys, inst.scores, selected)
    evidence.metric("selected the global optimum", float(np.array_equal(selected, inst.alpha)))
    return selected, verdict, lim.loss_gap(selected)


#: MM-GD-SCALE-V: the two certified limits must be one direction.
SCALE_V_TOL = evidence.tolerance(
    4e-6,
    "each certified limit is within DIRECTION_TOL = 1e-6 of p^mm(α) in 1 − cos, i.e. an angle "
    "θ ≤ √(2·1e-6) = 1.414e-3 (1 − cos θ ≥ θ²/2 − θ⁴/24); the two limits of the same selection "
    "are ≤ 2θ = 2.83e-3 apart, 1 − cos ≤ (2.83e-3)²/2 = 4e-6. Limits of two different "
    "selections are at the 1 − cos between two SVM directions, O(1e-2) or more.",
)
#: MM-GD-SCALE-V: the head's scale c is log-uniform in [0.1, 10] (log_c ∈ [−1, 1]).
LOG_C = st.floats(-1.0, 1.0)


def scaled_head(inst: PromptInstance, c: float) -> PromptInstance:
    """The instance with head c·v (the same data, p(0) and selection)."""
    evidence.metric("c", c)
    return dataclasses.replace(inst, v=c * inst.v)


def limits_apart(base: Limit, other: Limit) -> float:
    """1 − cos between two certified limits, recorded as slack against SCALE_V_TOL."""
    gap = one_minus_cos(base.outcome.p, other.outcome.p)
    evidence.slack("1 − cos(limit with v, limit with c·v)", gap, SCALE_V_TOL)
    return gap


@claim("MM-GD-SCALE-V")
@example(**saved_arguments("MM-GD-SCALE-V"))
@given(inst=with_init(global_opt_instances(), -1.0, 2.0), log_c=LOG_C)
def test_gd_limit_ignores_the_scale_of_v(inst, log_c):
    """Scaling the value head v by c > 0 does not change where GD goes: for any data with a
    unique optimum and a feasible ATT-SVM(opt) and any p(0), gradient flow with head v and with
    head c·v converge in direction to the same p^mm(α)."""
    base = flow(inst.problem, inst.p0)
    assert base.diverges, base.describe()
    scaled = flow(scaled_head(inst, 10.0**log_c).problem, inst.p0)
    assert scaled.diverges, scaled.describe()
    gap = limits_apart(base, scaled)
    same = np.array_equal(base.outcome.selected, scaled.outcome.selected)
    assert same and gap <= SCALE_V_TOL, (
        f"with v GD selects {base.outcome.selected.tolist()}, with {10.0**log_c:.3g}·v it "
        f"selects {scaled.outcome.selected.tolist()}: 1 − cos between the limits = {gap:.3g}"
    )


@claim("MM-GD-SCALE-V-N1")
@given(
    inst=st.sampled_from(LOSSES).flatmap(
        lambda loss: with_init(global_opt_instances(n=1, loss=loss), -1.0, 2.0)
    ),
    log_c=LOG_C,
)
def test_gd_limit_ignores_the_scale_of_v_single_input(inst, log_c):
    """For a single input, scaling v by c > 0 does not change where GD goes: gradient flows from any
    p(0) with heads v and c·v reach the same direction p^mm(α)."""
    base = flow(inst.problem, inst.p0)
    assert base.diverges, base.describe()
    scaled = flow(scaled_head(inst, 10.0**log_c).problem, inst.p0)
    assert scaled.diverges, scaled.describe()
    gap = limits_apart(base, scaled)
    same = np.array_equal(base.outcome.selected, scaled.outcome.selected)
    assert same and gap <= SCALE_V_TOL, (
        f"with v GD selects {base.outcome.selected.tolist()}, with {10.0**log_c:.3g}·v it "
        f"selects {scaled.outcome.selected.tolist()}: 1 − cos between the limits = {gap:.3g}"
    )


# ---- §1.9 smoothness and monotone GD -------------------------------------------------------------


@claim("MM-LEMMA-SMOOTH")
@given(
    inst=st.sampled_from(LOSSES).flatmap(lambda loss: decoupled_instances(loss=loss)),
    seed=SEEDS,
)
def test_gradient_lipschitz(inst, seed):
    """∇L is L_p-Lipschitz with L_p = (1/n)Σ_i ‖K_i‖₂²(M1·R_i²/4 + 3·M0·R_i), R_i the score range of
    input i and M0, M1 bounds of |ℓ'|, |ℓ''| on it."""
    gen = seeded(seed)
    bound = inst.problem.smoothness_bound()
    d = inst.keys.shape[2]
    for a in random_points(gen, d, 10, -1.0, 1.0):
        for step in (1e-3, 1e-1, 1.0):
            b = a + step * random_points(gen, d, 1, 0.0, 0.0)[0]
            lhs = float(
                torch.linalg.vector_norm(inst.problem.gradient(a) - inst.problem.gradient(b))
            )
            rhs = bound * float(torch.linalg.vector_norm(a - b))
            evidence.slack("‖∇L(a) − ∇L(b)‖ / (L_p‖a − b‖)", lhs, rhs)
            assert lhs <= rhs * (1 + 1e-12) + 1e-15


@claim("MM-GD-MONOTONE")
@given(
    inst=st.sampled_from(LOSSES).flatmap(lambda loss: with_init(global_opt_instances(loss=loss)))
)
def test_gd_monotone(inst):
    """Under Assumption A, plain GD with step η = 1/L_p never increases the loss: L(p(t+1)) ≤
    L(p(t)) for every t, for any data and any p(0)."""
    eta = 1.0 / inst.problem.smoothness_bound()
    traj = gd(inst.problem, inst.p0, eta=eta, steps=GD_STEPS)
    with torch.no_grad():
        log_gaps, signs = log_gap_batch(inst.problem, traj.ps, inst.alpha)
    assert bool((signs > 0).all()), "L fell below its infimum"
    log_gaps = log_gaps.numpy()
    rise = float(np.max(np.diff(log_gaps)))
    evidence.metric("largest one-step change of log(L − L*)", rise)
    evidence.metric("total change of log(L − L*)", float(log_gaps[-1] - log_gaps[0]))
    assert rise <= MONOTONE_SLACK, f"log(L − L*) rose by {rise:.3g} in one step"


@claim("MM-GD-CORRELATION-INCREASING")
@given(inst=with_init(equal_nonopt_instances()))
def test_gd_correlation_increasing(inst):
    """Under the hypotheses of the descent lemma (equal non-optimal scores, ATT-SVM(opt) feasible),
    plain GD with η = 1/L_p increases ⟨p(t), p^mm⟩ at every step."""
    sol = evidence.solved(att_svm(inst.keys, inst.alpha), "ATT-SVM(α)")
    eta = 1.0 / inst.problem.smoothness_bound()
    traj = gd(inst.problem, inst.p0, eta=eta, steps=GD_STEPS)
    proj = traj.ps.numpy() @ sol.direction
    steps = np.diff(proj)
    # each increment is −η⟨∇L, p̂⟩ > 0; in float64 it is lost below the rounding of proj
    rounding = 4 * np.finfo(float).eps * np.abs(proj[1:]).max()
    evidence.metric("⟨p, p̂^mm⟩ gained", float(proj[-1] - proj[0]))
    evidence.metric("‖p(T)‖ − ‖p(0)‖", float(traj.norms[-1] - traj.norms[0]))
    assert float(steps.min()) >= -rounding, f"⟨p, p̂^mm⟩ fell by {-steps.min():.3g}"
    assert proj[-1] > proj[0]


# ---- §2.8 training W with p fixed ----------------------------------------------------------------


#: MM-W-RANKONE: autograd's ∂L/∂W against the engine's g(Wp)pᵀ, relative: at most this, and
#: at most the example's own rounding bound (RANKONE_GRAD_DERIVATION).
RANKONE_GRAD_TOL = 1e-10
RANKONE_GRAD_DERIVATION = (
    "per example, min(1e-10, 2·c_plain·u·S_plain·‖p‖/‖∂L/∂W‖ + 2u): autograd backpropagates "
    "W @ p as ĝpᵀ (one rounding per entry), ĝ its prompt gradient at q = Wp, and the engine's g "
    "(PromptProblem.gradient) is the plain closed form at the same q; both start from the same "
    "rounded logits and softmax (one torch op each on one q), so they differ by two backward "
    "passes, each within c_plain·u·S_plain of the exact gradient at those s: "
    + GRADIENT_ROUNDING_DERIVATION
    + " Here κ = S_plain/‖ĝ‖ is computed at the drawn q; 1e-10 (the cap) is the old constant. "
    "A wrong formula (g at p instead of Wp, p gᵀ, a missing 1/n) errs by O(1)."
)
#: MM-W-RANKONE: σ₂/σ₁ of autograd's ∂L/∂W, rank one up to rounding.
RANKONE_SIGMA_TOL = evidence.tolerance(
    1e-13,
    "autograd's ∂L/∂W of L(W @ p) is ĝpᵀ with one rounding per entry: G = ĝpᵀ∘(1 + δ), |δ| ≤ u, "
    "so σ₂(G) ≤ ‖G − ĝpᵀ‖_F ≤ u·σ₁(G)(1 + u); the SVD (LAPACK, backward stable) reads σ₂ to "
    "≤ 4d·u·σ₁: σ₂/σ₁ ≤ (1 + 4d)·u ≤ 3.2e-15 at d ≤ 7 (dk ≤ 6 plus the score coordinate). "
    "1e-13 (was 1e-12) is 30× that for the SVD's unstated constant. A gradient of rank 2 (a "
    "W-dependent second direction) has σ₂/σ₁ = O(1).",
)


def w_gradient_against_rank_one(
    inst: PromptInstance, gen: torch.Generator
) -> tuple[float, float, float, float]:
    """At a random p (unit norm) and W = 0.5·N(0, 1): the autograd gradient G = ∂L/∂W against
    g(Wp)pᵀ, as ‖G − g pᵀ‖/‖G‖; σ₂/σ₁ of G; the example's rounding bound on the first
    (RANKONE_GRAD_DERIVATION, capped at RANKONE_GRAD_TOL) and its cancellation κ = S/‖ĝ‖."""
    problem, p = w_problem(inst, gen)
    W = (0.5 * torch.randn(inst.d, inst.d, generator=gen, dtype=DTYPE)).requires_grad_(True)
    problem.loss_value(W).backward()
    G = W.grad.detach()
    q = W.detach() @ p
    g = problem.prompt.gradient(q)
    norm = torch.linalg.matrix_norm
    G_norm = float(norm(G))
    terms = gradient_terms(problem.prompt, q)
    p_norm = float(torch.linalg.vector_norm(p))
    rel = 2 * terms.plain_error() * p_norm / G_norm + 2 * UNIT_ROUNDOFF
    kappa = terms.plain * p_norm / G_norm
    err = float(norm(G - torch.outer(g, p))) / G_norm
    return err, singular_ratio(G), min(RANKONE_GRAD_TOL, rel), kappa


@claim("MM-W-RANKONE")
@given(inst=decoupled_instances(), seed=SEEDS)
def test_w_gradient_rank_one(inst, seed):
    """Training W with p fixed: ∂L/∂W = g(Wp)pᵀ, g the p-gradient of the prompt problem with keys
    x_it, at q = Wp; in particular the gradient has rank one."""
    err, ratio, tol, kappa = w_gradient_against_rank_one(inst, seeded(seed))
    evidence.metric("κ = S_plain/‖∂L/∂q‖ (cancellation)", kappa)
    name = "‖∂L/∂W − g pᵀ‖ / ‖∂L/∂W‖"
    evidence.slack(name, err, tol, derivation=RANKONE_GRAD_DERIVATION)
    assert err <= tol, f"{name} = {err:.3g} > {tol:.3g} (κ = {kappa:.3g})"
    evidence.slack("σ₂/σ₁ of ∂L/∂W", ratio, RANKONE_SIGMA_TOL)
    assert ratio <= RANKONE_SIGMA_TOL, f"σ₂/σ₁ of ∂L/∂W = {ratio:.3g} > {RANKONE_SIGMA_TOL:g}"


#: MM-W-SVM-CLOSED-FORM: the QP's W^mm and the closed form agree to this (relative to
#: max(1, ‖W^mm‖_F)), and to their certified distance where that is smaller.
W_SVM_AGREE_TOL = 1e-6
W_SVM_AGREE_DERIVATION = (
    "min(1e-6, (δ_QP + δ_closed)/max(1, ‖W^mm‖_F)), both judged on the W-SVM's own rows "
    "(x_iα − x_it)pᵀ built in the claim: " + KKT_DISTANCE_DERIVATION
)


@claim("MM-W-SVM-CLOSED-FORM")
@given(inst=generic_instances(n=st.integers(1, 3), T=st.integers(2, 4)), seed=SEEDS)
def test_w_svm_closed_form(inst, seed):
    """The W-SVM min ‖W‖_F s.t. (x_iα_i − x_it)ᵀWp ≥ 1 has the solution W^mm = q^mm pᵀ/‖p‖², where
    q^mm is ATT-SVM(α) with keys x_it; W^mm is rank one."""
    p = random_points(seeded(seed), inst.d, 1, -1.0, 1.0)[0]
    qp = evidence.solved(w_svm(inst.X, p, inst.alpha), "W-SVM (QP)")
    closed = evidence.solved(w_svm_closed_form(inst.X, p, inst.alpha), "W-SVM (closed form)")
    scale = max(1.0, float(qp.norm))
    err = float(np.linalg.norm(qp.x - closed.x)) / scale
    # The W-SVM's rows, built here: (x_iα − x_it)ᵀWp = ⟨(x_iα − x_it)pᵀ, W⟩.
    U = att_constraints(inst.X, inst.alpha)[0]
    rows = np.einsum("ja,b->jab", U, p.numpy()).reshape(len(U), -1)
    dist = sum(kkt_distance(rows, sol.x.ravel(), sol.duals) for sol in (qp, closed))
    tol = min(W_SVM_AGREE_TOL, dist / scale)
    name = "‖W_QP − q^mm pᵀ/‖p‖²‖_F / max(1, ‖W^mm‖)"
    evidence.slack(name, err, tol, derivation=W_SVM_AGREE_DERIVATION)
    assert err <= tol, f"{name} = {err:.3g} > {tol:.3g}"
    assert singular_ratio(qp.x) <= 1e-6


@claim("MM-W-CONVERGE")
@given(inst=equal_nonopt_instances(n=1), seed=SEEDS)
def test_w_converges_to_rank_one_svm(inst, seed):
    """GD on W with p fixed is GD on q = Wp (keys x_it): for a single input with equal non-optimal
    scores and a feasible ATT-SVM, normalized GD on W from a small full-rank W(0) gives
    W(t)/‖W(t)‖_F → W^mm/‖W^mm‖_F = q^mm pᵀ/(‖q^mm‖‖p‖), a rank-one matrix: σ₂(W)/σ₁(W) → 0."""
    traj, W0 = train_w(inst, seeded(seed))
    evidence.solved(traj.W_mm, "W-SVM")
    corr, ratio = float(traj.correlation[-1]), float(traj.sigma_ratio[-1])
    evidence.metric("σ₂/σ₁ of W(0)", singular_ratio(W0))
    evidence.slack("1 − corr(W, W^mm)", 1 - corr, 1 - W_CORRELATION_MIN)
    evidence.slack("σ₂/σ₁ of W(T)", ratio, W_SIGMA_RATIO_MAX)
    assert corr >= W_CORRELATION_MIN, f"corr(W, W^mm) = {corr:.6f} after {W_STEPS} steps"
    assert ratio <= W_SIGMA_RATIO_MAX
    assert traj.sigma_ratio[-1] < traj.sigma_ratio[1]  # still falling


@claim("MM-W-CONVERGE-MULTI")
@example(**saved_arguments("MM-W-CONVERGE-MULTI"))
@given(inst=equal_nonopt_instances(n=st.integers(2, 4)), seed=SEEDS)
def test_w_converges_multi_input(inst, seed):
    """MM-W-CONVERGE for n ≥ 2 inputs with equal non-optimal scores and a feasible ATT-SVM: GD on W
    (p fixed) from a small full-rank W(0) gives W(t)/‖W(t)‖_F → W^mm(opt)/‖W^mm(opt)‖_F."""
    traj, _, problem = train_w_problem(inst, seeded(seed))
    evidence.solved(traj.W_mm, "W-SVM")
    evidence.metric("corr(W, W^mm(opt)) after W-NGD", float(traj.correlation[-1]))
    lim = flow(problem.prompt, traj.W @ problem.p)  # q = Wp: W's limit is q's (findings)
    opt = problem.opt_tokens()
    assert lim.converged_to(opt), lim.why_not(opt, "the global")
    gap = lim.loss_gap(opt)
    assert gap is None or gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g} > {LOSS_GAP_TOL:g}"


def w_at_limit(W: torch.Tensor, p: torch.Tensor, q_from, q_to) -> torch.Tensor:
    """W moved along the flow of q = Wp from q_from to q_to: every W-gradient is g(Wp)pᵀ, so
    W(t) = W(T) + (q(t) − q(T))pᵀ/‖p‖² (MM-W-EQUIV-PROMPT)."""
    return W + torch.outer(q_to - q_from, p) / float(p @ p)


@claim("MM-W-CONVERGE-SELECTED")
@given(inst=global_opt_instances(n=st.integers(1, 4)), seed=SEEDS)
def test_w_converges_to_its_selection(inst, seed):
    """For any n, with continuous random scores and ATT-SVM(opt) feasible, GD on W (p fixed) from a
    small full-rank W(0) selects a locally-optimal α̂ and W(t)/‖W(t)‖_F → W^mm(α̂)/‖W^mm(α̂)‖_F, a
    rank-one matrix."""
    traj, _, problem = train_w_problem(inst, seeded(seed))
    q_T = traj.W @ problem.p
    lim = flow(problem.prompt, q_T)
    assert lim.diverges, lim.describe()
    selected = lim.outcome.selected
    verdict = local_optimality(problem.prompt.keys, problem.prompt.scores, selected)
    assert verdict.locally_optimal, f"q = Wp selects {selected.tolist()}: {verdict.reason}"
    W_mm = evidence.solved(problem.w_mm(selected), "W-SVM(α̂)").x
    W_lim = w_at_limit(traj.W, problem.p, q_T, lim.outcome.p)
    corr, ratio = correlation(W_lim, W_mm), singular_ratio(W_lim)
    record_w_selection(traj, W_mm, selected, inst.alpha, corr, ratio)
    assert 1 - corr <= DIRECTION_TOL, f"1 − corr(W, W^mm(α̂)) = {1 - corr:.3g} at the limit"
    assert ratio <= W_SIGMA_RATIO_MAX, f"σ₂/σ₁ = {ratio:.3g} at the limit"


#: Why 1 − corr(W, W^mm(α̂)) at the limit is held to DIRECTION_TOL.
W_CORR_DERIVATION = (
    "W = A + q pᵀ/‖p‖² at the limit (A fixed) and W^mm = q^mm pᵀ/‖p‖², so the angle θ(W, W^mm) ≤ "
    "θ(q, q^mm) + ‖A‖_F‖p‖/‖q‖: the flow certifies 1 − cos(q, q^mm(α̂)) ≤ DIRECTION_TOL = 1e-6 "
    "(" + DERIVATIONS["DIRECTION_TOL"] + ") and the confirmed ‖q‖ makes the A-term vanish like "
    "1/‖q‖. A W whose rank-one part pointed elsewhere stays at the 1 − cos between two SVMs."
)


def record_w_selection(traj, W_mm, selected, opt, corr: float, ratio: float) -> None:
    """MM-W-CONVERGE-SELECTED's evidence: the correlation after the notebooks' W-NGD, whether
    α̂ is opt, and the limit's correlation and σ₂/σ₁ against their tolerances."""
    evidence.metric("corr(W, W^mm(α̂)) after W-NGD", correlation(traj.W, W_mm))
    evidence.metric("selected the global optimum", float(np.array_equal(selected, opt)))
    evidence.slack(
        "1 − corr(W, W^mm(α̂)) at the limit", 1 - corr, DIRECTION_TOL, derivation=W_CORR_DERIVATION
    )
    evidence.slack("σ₂/σ₁ of W at the limit", ratio, W_SIGMA_RATIO_MAX)


#: MM-W-EQUIV-PROMPT: W(t)p against q(t), relative to max(1, ‖q(t)‖). The two runs share no
#: code path (autograd of L(W) against the engine's closed-form prompt gradient).
EQUIV_TOL = evidence.calibrated(
    1e-9,
    "calibrated 2026-12-03 on ci-random seeds 11–16 (600 draws of the claim's own strategy, "
    "apart from the ci draws): worst 1.15e-14 (seed 13), so 1e-9 is 8.7e4× the worst. What is "
    "derived: in exact arithmetic W(t)p = q(t); in float64 each step adds the two gradients' "
    "disagreement, ≤ η‖p‖²·(d + 2T + 10)·u·S (S the sum of the gradient's absolute terms, ≤ "
    "L_p·max(1, ‖q‖) at η = 1/(L_p‖p‖²)), plus the rounding of W p, ≤ (d + 1)·u·‖W‖‖p‖: ≤ "
    "~1e-14 relative per step, 2e-12 over EQUIV_STEPS = 200 if the GD map does not amplify it. "
    "What is not: that amplification. The GD map is 1-Lipschitz up to 1 + η′·max(0, "
    "−λ_min(∇²L)) per step (η′ = 1/L_p), ≤ 2, so a derivation needs λ_min of the Hessian along "
    "each path (a certified lower bound at each of the 200 iterates, carried as Σ_t r_t·Π_{s>t} "
    "a_s), which costs more than the claim; 1e-9 (the old constant) allows an average expansion "
    "of 1.032 per step. Not tightened to 100× the worst: correct arithmetic may reach 2e-12 "
    "with no amplification at all, and the faults the claim is about (a step η instead of "
    "η‖p‖², gᵀp) move q by O(η‖∇L‖) ≥ 1e-3 in one step.",
)
EQUIV_STEPS = 200


def w_gd_against_prompt_gd(inst: PromptInstance, gen: torch.Generator) -> float:
    """GD on W (step η, EQUIV_STEPS steps from W(0) = N(0, 1)) and GD on q (step η‖p‖² from
    W(0)p) at a random p, η = 1/(L_p‖p‖²): max_t ‖W(t)p − q(t)‖ / max(1, ‖q(t)‖)."""
    p = random_points(gen, inst.d, 1, -1.0, 1.0)[0]
    W0 = torch.randn(inst.d, inst.d, generator=gen, dtype=DTYPE)
    problem = WProblem(inst.X, inst.y, inst.v, p, loss=inst.loss)
    p2 = float(p @ p)
    eta = 1.0 / (problem.prompt.smoothness_bound() * p2)
    Ws = w_gd(problem, W0, eta=eta, steps=EQUIV_STEPS)
    qs = gd(problem.prompt, W0 @ p, eta=eta * p2, steps=EQUIV_STEPS).ps
    scale = torch.clamp(torch.linalg.vector_norm(qs, dim=-1), min=1.0)
    evidence.metric("‖p‖²", p2)
    evidence.metric("‖q(T) − q(0)‖", float(torch.linalg.vector_norm(qs[-1] - qs[0])))
    return float((torch.linalg.vector_norm(Ws @ p - qs, dim=-1) / scale).max())


@claim("MM-W-EQUIV-PROMPT")
@given(inst=decoupled_instances(), seed=SEEDS)
def test_w_gd_is_prompt_gd(inst, seed):
    """GD on W with p fixed is GD on the prompt: for any data, p ≠ 0 and W(0), GD on W with step η
    and GD on q (keys x_it) with step η‖p‖² from q(0) = W(0)p give q(t) = W(t)p at every step."""
    error = w_gd_against_prompt_gd(inst, seeded(seed))
    evidence.slack("max_t ‖W(t)p − q(t)‖ / max(1, ‖q(t)‖)", error, EQUIV_TOL)
    assert error <= EQUIV_TOL, f"W(t)p and q(t) differ by {error:.3g} (relative) > {EQUIV_TOL}"


#: The engine's log-space gradient against torch autograd of the plain loss (or, where they
#: disagree, the 50-digit gradient), on random decoupled instances (n ≤ 4, T ≤ 6, keys in
#: dimension ≤ 6) at 0.1 ≤ ‖p‖ ≤ 10, relative: at most this, and at most the example's own
#: rounding bound (GRADIENT_DERIVATION).
GRADIENT_REL_TOL = 1e-9
GRADIENT_DERIVATION = (
    "per example, min(1e-9·‖∇L‖, c_log·u·S_log + u·‖∇L‖): the engine's error from the exact "
    "gradient at the float64 inputs is ≤ c_log·u·S_log, "
    + GRADIENT_ROUNDING_DERIVATION
    + " The reference is autograd where the two agree to that bound (then the check cannot fail) "
    "and otherwise the 50-digit gradient (models.numerics.highprec: L in 50 digits, differentiated "
    "by mpmath.diff, rounded to float64: + u·‖∇L‖), which decides (AUTOGRAD_CANCELS: a gradient "
    "~1e-9 from O(1) terms, where autograd errs 2.2e-9 and the engine 5.5e-16). 1e-9 (the cap) "
    "is the old constant. A wrong gradient (a sign, a missing softmax-Jacobian term, 1/n) errs "
    "by O(1)."
)


#: Found by MM-DEF-GRADIENT under ci-random seed 7 (issue 21): at p (seed 376, ‖p‖ = 9.2) the
#: gradient is ~1e-9 and autograd of the plain loss is off by 2.2e-9 relative, the engine by
#: 5.5e-16 (both against the 50-digit gradient).
AUTOGRAD_CANCELS = PromptInstance(
    torch.tensor(
        [
            [
                [
                    1.5409961082440433,
                    -0.2934289057609464,
                    -2.1787893820745574,
                    0.5684312772806678,
                    -0.4235282157276996,
                ],
                [
                    -1.084522342424021,
                    -1.3985953953708767,
                    0.4033468476292993,
                    0.8380263329976598,
                    -0.09426230223777154,
                ],
            ]
        ],
        dtype=torch.float64,
    ),
    torch.tensor([1.0], dtype=torch.float64),
    torch.tensor([0.0, 0.0, 0.0, 0.0, 1.0], dtype=torch.float64),
    torch.diag(torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0], dtype=torch.float64)),
    assumptions=frozenset({"decoupled"}),
)


@claim("MM-DEF-GRADIENT")
@example(inst=AUTOGRAD_CANCELS, loss="logistic", seed=376)
@given(inst=decoupled_instances(), loss=st.sampled_from(LOSSES), seed=SEEDS)
def test_engine_gradient_is_the_loss_gradient(inst, loss, seed):
    """The dynamics follow the gradient of the paper's loss: the engine's log-space ∇L(p) is the
    gradient of L(p) = (1/n) Σ ℓ(y_i vᵀX_iᵀ softmax(X_i W p))."""
    problem = dataclasses.replace(inst, loss=loss).problem
    p = random_points(seeded(seed), problem.dim, 1, lo=-1.0, hi=1.0)[0]
    q = p.clone().requires_grad_(True)
    (autograd,) = torch.autograd.grad(problem.loss_value(q), q)
    engine = problem.gradient_scaled(p).value()
    error, scale, bound, kappa = engine_gradient_error(problem, p, engine, autograd)
    evidence.metric("κ = S_log/‖∇L‖ (cancellation)", kappa)
    evidence.slack(
        "‖engine − reference‖ / ‖reference‖", error, bound, derivation=GRADIENT_DERIVATION
    )
    assert error <= bound, (
        f"relative error {error / scale:.3g} > {bound / scale:.3g} (κ {kappa:.3g})"
    )


def engine_gradient_error(problem, p, engine, autograd) -> tuple[float, float, float, float]:
    """(‖engine − ∇L‖, ‖∇L‖, the example's bound on the first (GRADIENT_DERIVATION), κ) at p:
    ∇L is autograd's where the two agree to that bound and the 50-digit gradient where they
    do not (AUTOGRAD_CANCELS)."""
    terms = gradient_terms(problem, p)
    norm = float(torch.linalg.vector_norm(autograd))
    rel = GRADIENT_REL_TOL
    if norm > 0:
        rel = min(rel, terms.logspace_error() / norm + UNIT_ROUNDOFF)
    error, scale = gradient_error(problem, p, engine, autograd, rel)
    bound = min(GRADIENT_REL_TOL * scale, terms.logspace_error() + UNIT_ROUNDOFF * scale)
    return error, scale, bound, terms.logspace / scale if scale > 0 else math.inf
