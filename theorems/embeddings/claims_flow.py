"""Gradient flow on the `<cls>` embedding p with frozen trained embeddings (arXiv 2505.17282).

Spec ``spec/embeddings.md`` §3.2 (Lemma A.2), §3.3 (the gradient-flow theorem) and §3.4 (the
sufficient condition for selecting only important tokens). Protocol (§1): one GD step of size η0
on E from p⁰ = 0 gives E¹; E¹ is frozen and p follows gradient flow ṗ = −∇_p L(E¹, p) from
p(0) = 0. With E frozen this is the prompt problem of ``models.problems.attention`` with keys
E¹[X_i] and scores y_i⟨E¹_s, v⟩ (``EmbeddingProblem.prompt_problem``), traced by
``models.flows.dynamics``: ``converge`` follows the gradient-flow path (LSODA in arc length,
log-space direction) until its direction matches the SVM of what it selects to 1 − cos ≤ 1e-6, and
the path is then continued to ‖p‖ = 10³ (``run_flow``). The one discrete dynamics here is plain GD
at the spec's step sizes (EMB-FLOW-MONOTONE), checked as itself, not as a surrogate of the flow.

One flow per instance serves every claim: ``run_flow`` caches by instance content, and under the
``ci`` profile the theorem's claims share one seeded stream of G1 instances (``shared_stream``),
so each instance's flow is traced once. The helpers are public: the negative controls
(``claims_controls``) run the same protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import example, given, seed, target
from hypothesis import strategies as st

from models.flows.dynamics import gd
from models.numerics import failures
from models.problems.attention import PromptProblem, one_minus_cos
from models.problems.embedding import (
    average_signed_frequency,
    cls_loss_floor,
    completely_negative,
    completely_positive,
    derivative_along,
    descent_slope,
    exact_descent_direction,
    max_margin_feasible_point,
    relevant_token_positions,
    selected_tokens,
)
from strategies import (
    EmbeddingInstance,
    general_frequency_instances,
    single_relevant_token_instances,
    two_relevant_instances,
)
from theorems.embeddings.common import (
    PRACTICAL_TARGET,
    R_FAR,
    SELECT_TOL,
    THEOREM_DATA,
    U64,
    FlowRun,
    Prepared,
    cls_svm_of,
    prepare,
    run_flow,
    theorem_instance,
)
from theorems.framework import evidence
from theorems.framework.profiles import current_profile
from theorems.framework.registry import claim
from theorems.framework.replay import saved

F64 = torch.float64

# ---- tolerances and protocol constants --------------------------------------------------------

# The `<cls>` SVM is solved independently of the one converge() compares with (which is built on
# token positions); both are certified to 1e-7, so the direction claim allows 10× the target.
DIRECTION_TOL = evidence.tolerance(
    1e-5,
    "converge() certifies 1 − cos(p, p^mm) ≤ DIRECTION_TARGET = 1e-6 against its own SVM (built "
    "on token positions), an angle ≤ √(2·1e-6) = 1.41e-3; the `<cls>` SVM here is the same "
    "strictly convex QP solved independently, and two certified solutions of it are within "
    "their KKT distances to the optimum, δ ≤ ‖r‖ + √(‖r‖² + 2(λᵀs + ε‖x‖²)) each "
    "(theorems.maxmargin.common_svm.KKT_DISTANCE_DERIVATION). 1 − cos(p, p̂) ≤ (1.41e-3 + "
    "θ)²/2 ≤ 1e-5 for an angle θ ≤ 3e-3 between the two SVMs, i.e. λᵀs + ε‖x‖² ≤ 1e-6·‖x‖²: "
    "the certificate's ceiling (1e-7 per residual) meets that for ≤ 10 support rows at ‖p̂‖ = 1, "
    "and polished solutions (residuals ~1e-15: MM-SVM-UNIQUE certifies ≤ 4e-7) far inside. A "
    "flow to another selection's SVM stays at the 1 − cos between two SVM directions, O(1e-2).",
)
# (E_{s*} − E_s)ᵀp grows like ‖p‖/‖p̂‖ along the limit direction; at the end of the path it
# must be at least half of that (1 − cos ≤ 1e-6 leaves it within 0.3% of it).
GAP_GROWTH_FRACTION = 0.5
# L(p) − L* at ‖p‖ = 10³ is e^(−‖p‖/‖p̂‖)-small; 1e-8·L* is the spec's 1e-4 (after 500 NGD
# steps, ‖p‖ ≈ 50) tightened for the longer path.
LOSS_GAP_TOL = evidence.tolerance(
    1e-8,
    "the spec's 1e-4 (after 500 NGD steps, ‖p‖ ≈ 50) tightened for the path to ‖p‖ ≥ R_FAR = "
    "1e3: L − L* = (1/n)Σ_i [ℓ(f_i) − ℓ(f_i*)] ≤ 2·max|u|·(mass off s*) (|ℓ′| ≤ 1) and the mass "
    "off s* is ≤ T·e^{−min gap} with min gap ≥ ‖p‖/(2‖p̂‖) ≥ 175 (‖p̂‖ ≤ 2.85 on ci, the gap "
    "asserted by EMB-FLOW-SELECT): L − L* ≤ 16·max|u|·e^{−175}, far below 1e-8·L* (L* ≥ 2.4e-4 "
    "on ci). The gap is formed in log space and read as 0 below e^{−700}: the observed 0 is "
    "that cut (log10 gap ≤ −747 on ci). A flow that stalls or shares mass keeps L − L* at "
    "O(mass), above the spec's 1e-4·L*.",
)
# L(p) ≥ L* up to float64 rounding of L (relative 1e-15).
LOSS_FLOOR_ROUNDING = 1e-15
# L* from cls_loss_floor (token ids) and from PromptProblem.loss_floor (positions) agree to this.
FLOOR_AGREEMENT = 1e-12
# Monotone loss of plain GD (spec §3.3: lr ∈ {0.1, 1}, 1000 steps, tolerance 1e-12; float64
# rounding of L is ~1e-16·L): L(p_{k+1}) ≤ L(p_k) + 1e-12·max(1, L(p_k)).
MONO_TOL = 1e-12
GD_RATES = (0.1, 1.0)
GD_STEPS = 1000
# EMB-DEF-SLOPE: the engine's slope against the definition's, relative: the cap of slope_bound.
SLOPE_AGREEMENT = evidence.tolerance(
    1e-6,
    "the cap of EMB-DEF-SLOPE's per-point bound (slope_bound, SLOPE_DERIVATION), reached "
    "where Z·κ ≳ 2e7 (far path points). A wrong gradient (a missing softmax Jacobian term, "
    "the wrong E) changes the slope by O(1) or its sign.",
)
SLOPE_DERIVATION = (
    "first-order rounding count per point, Z and κ computed there (slope_bound): the engine "
    "(descent_slope: Σ_{i, t ∈ s*} ℓ'_i σ_it Σ_k σ_ik(γ_it − γ_ik)) and the definition "
    "(derivative_along: Σ_i ℓ'_i y_i Σ_{t<k} σσ(Δc)(Δu), Δc exact) sum the same N ≤ n·T² terms "
    "in log space. A term's log errs by ≤ ε = u·[(6d + 60)·Z·(1 + U) + (3T + d + 20)(1 + U) + "
    "7L + 6·log den + 10K·log 2] on each side: logits z = E¹_k·p of d products err by ≤ "
    "(d + 2)·u·Z, Z = max over positions of |E¹_k|·|p|, entering log σ twice per factor and ℓ' "
    "through f = Σσu (U = max_s |E¹_s|·|v|); the log-space additions and exp arguments err by "
    "≤ 7·(4Z + L)·u, L = 2K·log 2 + U + log n + 2·log T + 10 bounding |log ℓ'|, log n, "
    "|log|Δu|| and |log|Δc||; the definition's exact Δc = num/den and Δu = num/2^(2K) are "
    "logs of big integers minus log den (den of q: log den ≈ 2.5e3 at 960 digits) and "
    "2K·log 2 (K ≤ 53 − the least binary exponent of E¹ and v), and math.log of a big integer "
    "(log of its mantissa + e·log 2) errs by ≤ 3u·|result|. Pairs of two tokens other than "
    "s* have |Δc| ≤ 2e-960 and add nothing measurable. The sums add N·u; the engine's float "
    "scores add "
    "≤ 2(d + 1)·u·U per |Δγ|, i.e. 2(d + 1)·u·U·W/|V|, W = (1/n)Σ_i|ℓ'_i|σ_i(s*)σ_i(not s*); the "
    "final logs u·(|log V_e| + |log V_d| + 2). So |V_e/V_d − 1| ≤ 1.01·[2(ε + N·u)·κ + "
    "2(d + 1)·u·U·W/|V| + u·(|log V_e| + |log V_d| + 2)], κ = Σ|terms|/|Σ terms| from "
    "derivative_along's own log_total, 1.01 for the second-order terms; u = 2⁻⁵³; capped at "
    "1e-6. Where Z·κ is large (path points, Z up to ~1e4) the logit term rules, a worst case of "
    "d aligned roundings per logit. At p = 0 (Z = 0, κ = 1) the big-integer logs rule: the "
    "bound is ~4e-12 against ≤ 1.4e-14 observed (~350×): the relevant |Δc| share den's "
    "exponent and leading bits, so their logs round alike and cancel, which no worst-case "
    "count may assume."
)
#: EMB-DEF-SLOPE's points: one Gaussian p at each of these norms, and SLOPE_PATH_POINTS points
#: of the traced path; q for the first relevant token, solved to A2_MAX_DIGITS.
SLOPE_NORMS = (0.0, 1.0, 10.0, 100.0)
SLOPE_PATH_POINTS = 10
# ‖p‖ ≈ ‖p̂‖ log t: checked per decade of t from ‖p‖ = 10‖p̂‖ on, to a relative deviation of
# LOGT_TOL·‖p̂‖/‖p‖ (calibration: ≤ 0.34 at 10‖p̂‖, ≤ 0.1 at 100‖p̂‖ on 14 instances; 1 leaves 3×).
LOGT_FROM = 10.0
LOGT_TOL = 1.0
# A path that stops short of R_FAR with ‖∇L‖ at most this (and L above its floor) stopped at a
# finite stationary point; an integrator stall at a larger gradient is the machinery's.
STALL_GRAD_TOL = 1e-8
# Lemma A.2 (spec §3.2): q in exact rationals, solved to 60 digits (E¹q = e_{s*} to 1e-50 or
# better; vᵀq = 0 exactly by construction); random p at these norms.
A2_DIGITS = 60
A2_RESIDUAL_LOG10 = -50.0
A2_RESIDUAL_DERIVATION = (
    "q is exact rationals from an integer system refined against exact integer residuals "
    "(models.problems.embedding._solve_exact, bits = 3.33·digits + 64 = 263 at 60 digits): the "
    "refinement stops once the integer residual is within 2^(m+4) of a target 2^(bits+m), so a "
    "converged solve has ‖E¹q − e_s‖∞ ≤ 2^(4−bits) ≈ 1.1e-78 (observed 7.8e-80). It falls "
    "short only if its 12 rounds (each cutting the residual by ~κ·u, κ = cond(E¹PE¹ᵀ)) do not "
    "converge; 1e-50 is reached for κ·u ≤ 10^(−50/12), κ ≤ 6e11. A q that is not a solution "
    "(a wrong system, a dropped projection P) leaves an O(1) residual: 1e-50 separates the two "
    "with 28 digits to spare below any float64 quantity it meets."
)
# Where E¹q − e_{s*} ≠ 0 could hide the sign (random p of norm 1e3: terms e^(−200) and below),
# q is solved again to 4×, 16× the digits, up to 960 (~0.3 s per solve).
A2_MAX_DIGITS = 960
A2_NORMS = (0.0, 0.1, 1.0, 10.0, 100.0, 1000.0)
A2_DIRECTIONS = 2  # Gaussian directions per norm
A2_PATH_POINTS = 40  # points of the traced path at which the slope is also checked
# §3.4, practical form: the flow concentrates ≥ 0.99 of the attention (spec P-3.4).
PRACTICAL_MASS = 0.99
# §3.4, paper constant: gap > 4·(11 η0 d^(−1/4))/η0 = 44 d^(−1/4).
PAPER_GAP_CONSTANT = 44.0
#: EMB-SVM-FEASIBLE: ‖p̂‖ ≤ ‖p_ls‖ up to this (the SVM is certified to 1e-7).
SVM_NORM_SLACK = 1e-6

# Spec §3.4: general data with one planted strongly predictive token per sequence plus weaker
# relevant ones (two_relevant_instances), and G2.
GENERAL_DATA = st.one_of(two_relevant_instances(), general_frequency_instances())
# P-3.4 "whichever token it is": two-relevant data as drawn (the maximiser of y⟨E¹_s, v⟩ is
# almost always the strong token) and with the weak tokens given an initial lead along v of
# 0.5–2 times the strong token's expected one-step lead (the maximiser is then the weak token
# in about half the draws; measured 18/30).
PRACTICAL_DATA = st.one_of(
    two_relevant_instances(), two_relevant_instances(weak_boost=st.floats(0.5, 2.0))
)
# A path ending on a selection with an infeasible SVM decides P-3.4 only when settled: mass
# ≤ 1e-3 (converge()'s own selection tolerance for this check) or ≥ PRACTICAL_MASS on the argmax.
SETTLED_OFF = 1e-3

FLOW_STREAM_SEED = 2505_17282


def shared_stream(test):
    """Under ci, give the flow claims one seeded example stream, so that they draw the same G1
    instances and ``run_flow``'s cache traces each flow once. Other profiles keep their own
    (derandomized or random) streams; the claims do not depend on the sharing."""
    return seed(FLOW_STREAM_SEED)(test) if current_profile() == "ci" else test


# ---------------------------------------------------------------------------------------------
# The protocol: one step, frozen E¹, gradient flow on p
# ---------------------------------------------------------------------------------------------


def star_positions(inst: EmbeddingInstance) -> torch.Tensor:
    """(n, T) mask of the positions holding s*(i)."""
    return relevant_token_positions(inst.sequences, inst.s_star)


def s_star_floor(prep: Prepared) -> float:
    """L* of §3.3: the loss floor when every sequence attends only to s*(i)."""
    inst = prep.inst
    return cls_loss_floor(prep.step.E1, inst.sequences, inst.y, inst.v, inst.s_star)


def attention_mass(prompt: PromptProblem, p, mask: torch.Tensor) -> torch.Tensor:
    """Softmax mass on the positions in ``mask``, per sequence, in log space (exact near 1)."""
    log_s = prompt.log_softmax(torch.as_tensor(p, dtype=F64))
    return torch.logsumexp(torch.where(mask, log_s, -math.inf), dim=-1).exp()


def other_mass(prompt: PromptProblem, p, mask: torch.Tensor) -> torch.Tensor:
    """Softmax mass off the positions in ``mask``, per sequence (no 1 − x cancellation)."""
    log_s = prompt.log_softmax(torch.as_tensor(p, dtype=F64))
    return torch.logsumexp(torch.where(mask, -math.inf, log_s), dim=-1).exp()


def probe_points(inst, path, norms, directions: int, path_points: int, stream: int) -> list:
    """Where a slope is probed: ``directions`` Gaussian p at each of ``norms`` (from the
    instance's seed + ``stream``), then ``path_points`` points spread along the traced path."""
    gen = torch.Generator().manual_seed(inst.seed + stream)
    points = []
    for norm in norms:
        for _ in range(directions):
            p = torch.randn(inst.d, generator=gen, dtype=F64)
            points.append(p * (norm / float(p.norm())))
    picks = np.unique(np.linspace(0, len(path.ps) - 1, path_points).round().astype(int))
    return points + [torch.from_numpy(path.ps[k]) for k in picks]


# ---------------------------------------------------------------------------------------------
# Lemma A.2: a direction of strict descent at every finite p
# ---------------------------------------------------------------------------------------------


def a2_points(inst: EmbeddingInstance) -> list:
    """Lemma A.2's points: A2_DIRECTIONS Gaussian p at each norm of A2_NORMS and A2_PATH_POINTS
    points of the traced gradient-flow path."""
    path = traced_flow(inst).path
    evidence.metric("path_max_norm", float(path.norms.max()))
    return probe_points(inst, path, A2_NORMS, A2_DIRECTIONS, A2_PATH_POINTS, stream=1)


def slopes_along(prep: Prepared, s: int, q, points: list) -> list:
    """d/dε L(E¹, p + εq) at each point, for Lemma A.2's q of token s (derivative_along). Where
    E¹q − e_s hides the sign, q is solved again to 4×, 16× the digits, up to A2_MAX_DIGITS (each
    solve kept for the next points); a slope may stay unresolved."""
    E1, inst = prep.step.E1, prep.inst
    solved = {A2_DIGITS: q}
    slopes = []
    for p in points:
        digits = A2_DIGITS
        slope = derivative_along(E1, inst.sequences, inst.y, inst.v, p, q)
        while not slope.resolved and digits < A2_MAX_DIGITS:
            digits *= 4  # E¹q − e_s hides the sign: solve for q to more digits
            if digits not in solved:
                solved[digits] = exact_descent_direction(E1, inst.v, s, digits)
            slope = derivative_along(E1, inst.sequences, inst.y, inst.v, p, solved[digits])
        slopes.append(slope)
    return slopes


def record_slopes(prep: Prepared, points: list, slopes: dict) -> None:
    """Metrics: the points where no slope's sign was resolved, and the largest log-disagreement
    of a resolved slope with models.problems.embedding.descent_slope (the gradient's own
    coefficients)."""
    unresolved, disagreement = 0, 0.0
    for s, along in slopes.items():
        for p, slope in zip(points, along, strict=True):
            if not slope.resolved:
                unresolved += 1
                continue
            ref, _ = descent_slope(prep.prompt, p, prep.inst.sequences == s)
            disagreement = max(disagreement, abs(ref - slope.log_abs))
    evidence.metric("unresolved_points", unresolved)
    evidence.metric("descent_slope_log_disagreement", disagreement)


def uphill(s: int, points: list, along: list) -> str:
    """The failure message at the first point where the slope of token s is not negative."""
    k = next(k for k, slope in enumerate(along) if slope.resolved and not slope.sign < 0)
    return (
        f"d/dε L(p + εq) = +e^{along[k].log_abs:.4g} ≥ 0 for token {s} at point {k} "
        f"(‖p‖ = {float(points[k].norm()):.3g})"
    )


@claim("EMB-A2-DESCENT")
@shared_stream
@given(inst=THEOREM_DATA)
def test_descent_direction_at_every_p(inst):
    """Lemma A.2: under Assumption 1 with |S| ≤ d − 1, after one step from p⁰ = 0, for every
    completely positive or negative token s there is q ⟂ v with E¹q = e_s, and
    ⟨∇_p L(E¹, p), q⟩ < 0 at every finite p."""
    prep, points, slopes = theorem_instance(inst), a2_points(inst), {}
    for s in sorted(inst.relevant or ()):
        q = exact_descent_direction(prep.step.E1, inst.v, s, digits=A2_DIGITS)
        assert q.v_dot_q_num == 0, f"vᵀq ≠ 0 for token {s}"
        evidence.slack(
            "residual_E1q",
            10.0**q.log10_residual,
            10.0**A2_RESIDUAL_LOG10,
            derivation=A2_RESIDUAL_DERIVATION,
        )
        assert q.log10_residual <= A2_RESIDUAL_LOG10, (
            f"E¹q ≠ e_{s}: ‖E¹q − e_s‖_∞ = 1e{q.log10_residual:.1f} > 1e{A2_RESIDUAL_LOG10:g}"
        )
        slopes[s] = slopes_along(prep, s, q, points)
        assert all(sl.sign < 0 for sl in slopes[s] if sl.resolved), uphill(s, points, slopes[s])
    record_slopes(prep, points, slopes)


def slope_error(prep: Prepared, s: int, q, p) -> tuple[float, float] | None:
    """Relative disagreement of the engine's ⟨∇_p L(E¹, p), q⟩ (descent_slope) with d/dε
    L(E¹, p + εq) from the model's definition (derivative_along), with its bound at p
    (slope_bound); the error is inf when the signs differ. None when the definition's sign is
    not resolved."""
    inst = prep.inst
    slope = derivative_along(prep.step.E1, inst.sequences, inst.y, inst.v, p, q)
    if not slope.resolved:
        return None
    log_ref, sign_ref = descent_slope(prep.prompt, p, inst.sequences == s)
    error = abs(math.expm1(log_ref - slope.log_abs)) if sign_ref == slope.sign else math.inf
    return error, slope_bound(prep, s, p, slope, log_ref, q.den)


def slope_bound(prep: Prepared, s: int, p, slope, log_engine: float, den: int) -> float:
    """The bound of SLOPE_DERIVATION on the relative disagreement at p, capped at
    SLOPE_AGREEMENT: Z = max over positions of |E¹_k|·|p| and κ = Σ|terms|/|Σ terms| of the
    definition's sum (slope.log_total − slope.log_abs) are read at p; ``den`` is q's
    denominator (ExactDirection.den)."""
    inst, E1, prompt = prep.inst, prep.step.E1, prep.prompt
    p = torch.as_tensor(p, dtype=F64)
    n, T = inst.sequences.shape
    d = inst.d
    Z = float((E1.abs() @ p.abs())[inst.sequences].max())
    U = float((E1.abs() @ inst.v.abs()).max())
    kappa = math.exp(slope.log_total - slope.log_abs)
    mask = inst.sequences == s
    log_s = prompt.log_softmax(p)
    log_in = torch.logsumexp(torch.where(mask, log_s, -math.inf), dim=-1)
    log_out = torch.logsumexp(torch.where(mask, -math.inf, log_s), dim=-1)
    log_h = -torch.logaddexp(torch.zeros(()), prompt.margins(p))  # log|ℓ'(y f)|
    log_W = float(torch.logsumexp(log_h + log_in + log_out, dim=0)) - math.log(n)
    both = torch.cat([E1.reshape(-1), inst.v])
    K = 53 - int(torch.frexp(both[both != 0]).exponent.min())
    L = 2 * K * math.log(2) + U + math.log(n) + 2 * math.log(T) + 10
    exact_logs = 6 * math.log(den) + 10 * K * math.log(2)
    eps = U64 * ((6 * d + 60) * Z * (1 + U) + (3 * T + d + 20) * (1 + U) + 7 * L + exact_logs)
    rel = (
        2 * (eps + n * T * T * U64) * kappa
        + 2 * (d + 1) * U64 * U * math.exp(log_W - slope.log_abs)
        + U64 * (abs(log_engine) + abs(slope.log_abs) + 2)
    )
    return min(1.01 * rel, float(SLOPE_AGREEMENT))


def mismatch(s: int, points: list, checks: list) -> str:
    """The failure message at the first point where engine and definition disagree."""
    k = next(k for k, c in enumerate(checks) if c is not None and not c[0] <= c[1])
    return (
        f"engine slope and the definition's differ by {checks[k][0]:.3g} (relative) > "
        f"{checks[k][1]:.3g} at point {k} (‖p‖ = {float(points[k].norm()):.3g}), token {s}"
    )


@claim("EMB-DEF-SLOPE")
@shared_stream
@given(inst=THEOREM_DATA)
def test_engine_slope_is_the_definitions(inst):
    """The `<cls>` gradient every flow here follows is the gradient of the model's loss: along
    Lemma A.2's q, the engine's ⟨∇_p L(E¹, p), q⟩ equals d/dε L(E¹, p + εq) from its definition."""
    prep = theorem_instance(inst)
    path = traced_flow(inst).path
    points = probe_points(inst, path, SLOPE_NORMS, 1, SLOPE_PATH_POINTS, stream=2)
    s = min(inst.relevant)
    q = exact_descent_direction(prep.step.E1, inst.v, s, digits=A2_MAX_DIGITS)
    checks = [slope_error(prep, s, q, p) for p in points]  # None: sign not resolved
    for error, bound in filter(None, checks):
        evidence.slack("relative_disagreement", error, bound, derivation=SLOPE_DERIVATION)
    assert all(c is None or c[0] <= c[1] for c in checks), mismatch(s, points, checks)


# ---------------------------------------------------------------------------------------------
# The gradient-flow theorem (§3.3)
# ---------------------------------------------------------------------------------------------


def traced_flow(inst: EmbeddingInstance, **kwargs) -> FlowRun:
    """run_flow with converge()'s own "undecided" report tolerated: the claims below assert
    ‖p‖ → ∞, so a path that stopped short is theirs to decide (finite_stop), not a failure of
    the machinery that discards the example. SVM-oracle failures still count."""
    with failures.tolerate(failures.GRADIENT_FLOW):
        return run_flow(inst, **kwargs)


@dataclass(frozen=True)
class TheoremFlow:
    """A §3.3 instance, its traced flow, L* and whether the path stopped at a finite point."""

    prep: Prepared
    run: FlowRun
    floor: float  # L* = s_star_floor
    stall: str | None  # finite_stop's message: None when the path reached ‖p‖ = R_FAR

    @property
    def p_far(self) -> np.ndarray:
        return self.run.path.final

    @property
    def far_norm(self) -> float:
        return float(np.linalg.norm(self.p_far))


def theorem_flow(inst: EmbeddingInstance) -> TheoremFlow:
    """The §3.3 instance (rejected when its hypotheses fail) and its traced flow: the shared
    first step of the claims that assert ‖p(t)‖ → ∞."""
    prep = theorem_instance(inst)
    run = traced_flow(inst)
    floor = s_star_floor(prep)
    return TheoremFlow(prep, run, floor, finite_stop(run, floor))


def finite_stop(run: FlowRun, floor: float) -> str | None:
    """Why the traced path is evidence against ‖p‖ → ∞, or None when it reached ‖p‖ = R_FAR.

    A stop at a stationary point, or an integrator stall where ‖∇L‖ ≤ STALL_GRAD_TOL while
    L − floor > LOSS_GAP_TOL·floor (the loss is not at its infimum, so the flow is not merely
    slow far out), is a finite stationary point: returned as the failure message. Any other
    short stop (a stall while the gradient is not small, the step budget, a non-finite iterate)
    is the machinery's: the example is inconclusive.
    """
    path = run.path
    norm = float(path.norms[-1])
    if norm >= R_FAR:
        return None
    stop = path.stops[-1]
    lgn = float(path.log_grad_norms[-1])
    grad = math.exp(lgn) if lgn > -700 else 0.0
    loss = float(run.prep.prompt.loss_value(torch.from_numpy(path.final)))
    if ("stationary" in stop or "stalled" in stop) and grad <= STALL_GRAD_TOL:
        if loss - floor > LOSS_GAP_TOL * floor:
            return (
                f"the flow stops at finite ‖p‖ = {norm:.4g}: ‖∇L‖ = {grad:.2e} ≤ "
                f"{STALL_GRAD_TOL:g} with L − L* = {loss - floor:.3e} > 0 ({stop})"
            )
    evidence.inconclusive(
        f"the path stopped at ‖p‖ = {norm:.3g} < {R_FAR:g} while ‖∇L‖ = {grad:.2e}: {stop}"
    )


def norms_per_decade(path) -> np.ndarray:
    """‖p(t)‖ at t = 10, 10², … up to the path's end (interpolated in log t)."""
    log_t, norms = path.log_time, path.norms
    finite = np.isfinite(log_t)
    decades = np.arange(1, int(log_t[-1] / math.log(10)) + 1)
    return np.interp(decades * math.log(10), log_t[finite], norms[finite])


def record_decade_growth(inst: EmbeddingInstance, at: np.ndarray) -> None:
    """Metric: the last decade's growth of ‖p‖ over ‖p̂‖·ln 10 (≈ 1 where ‖p‖ ≈ ‖p̂‖ log t).

    Reads the instance through run_flow itself (cached), which reports the run's failures again
    without traced_flow's tolerance, as this claim always has."""
    if len(at) >= 2:
        p_hat = cls_svm_of(run_flow(inst).prep)
        if p_hat.ok:
            growth = (at[-1] - at[-2]) / (float(p_hat.norm) * math.log(10))
            evidence.metric("decade_growth_over_svm_norm", growth)


@claim("EMB-FLOW-DIVERGE")
@shared_stream
@given(inst=THEOREM_DATA)
def test_norm_diverges(inst):
    """Gradient-flow theorem (§3.3), part 1: under Assumption 1 with |S| ≤ d − 1, after one GD
    step of size η0 on E from p⁰ = 0, gradient flow on p from p(0) = 0 with E = E¹ frozen has
    ‖p(t)‖ → ∞."""
    flow = theorem_flow(inst)
    assert flow.stall is None, flow.stall
    norms = flow.run.path.norms
    assert norms[-1] >= R_FAR, (
        f"the flow reached only ‖p‖ = {norms[-1]:.4g} ({flow.run.path.stops})"
    )
    at = norms_per_decade(flow.run.path)
    evidence.metric("decades_covered", len(at))
    record_decade_growth(inst, at)
    drops = np.flatnonzero(np.diff(at) <= 0)
    assert not len(drops), f"‖p(t)‖ does not grow from t = 1e{drops[0] + 1} to the next decade"


def attended_tokens(prep: Prepared, p) -> torch.Tensor:
    """The token each sequence attends to most at p."""
    seqs = prep.inst.sequences
    return seqs.gather(1, prep.prompt.selected(torch.as_tensor(p))[:, None])[:, 0]


def min_star_gap(prep: Prepared, p: np.ndarray) -> float:
    """min over i and s ∈ X_i, s ≠ s*(i), of (E_{s*(i)} − E_s)ᵀp."""
    mask = star_positions(prep.inst).numpy()
    logits = prep.prompt.keys.numpy() @ p
    star = np.where(mask, logits, -np.inf).max(-1)
    others = np.where(mask, -np.inf, logits)  # s* positions drop out of the min
    return float((star[:, None] - others).min())


@claim("EMB-FLOW-SELECT")
@shared_stream
@given(inst=THEOREM_DATA)
def test_softmax_selects_relevant_token(inst):
    """Gradient-flow theorem (§3.3), part 2: under its hypotheses, (E_{s*(i)} − E_s)ᵀp(t) → +∞
    for every i and s ∈ X_i, s ≠ s*(i): the softmax selects the completely positive/negative
    token of each sequence."""
    flow = theorem_flow(inst)
    assert flow.stall is None, flow.stall
    chosen = attended_tokens(flow.prep, flow.p_far)
    wrong = torch.nonzero(chosen != inst.s_star).flatten().tolist()
    assert not wrong, (
        f"at ‖p‖ = {R_FAR:g} the flow attends to {chosen[wrong].tolist()} not s* in {wrong}"
    )
    off = mass_off_star(flow)
    assert off <= SELECT_TOL, f"mass {off:.3e} stays off s* at ‖p‖ = {flow.far_norm:.3g}"
    gap, linear = star_gap_growth(flow)
    assert gap >= GAP_GROWTH_FRACTION * linear, f"min gap {gap:.4g} < ‖p‖/(2‖p̂‖) = {linear / 2:.4g}"


def mass_off_star(flow: TheoremFlow) -> float:
    """The largest softmax mass off s*(i) over the sequences at the path's end."""
    off = float(other_mass(flow.prep.prompt, flow.p_far, star_positions(flow.prep.inst)).max())
    evidence.slack("mass_off_s_star", off, SELECT_TOL)
    return off


def star_gap_growth(flow: TheoremFlow) -> tuple[float, float]:
    """(min_i,s (E_{s*(i)} − E_s)ᵀp, ‖p‖/‖p̂‖) at the path's end; the example is inconclusive
    when the `<cls>` SVM oracle fails."""
    gap, svm = min_star_gap(flow.prep, flow.p_far), cls_svm_of(flow.prep)
    if not svm.ok:
        evidence.inconclusive(f"`<cls>` SVM oracle: {svm.status}")
    linear = flow.far_norm / float(svm.norm)  # ‖p‖/‖p̂‖
    evidence.metric("min_gap_over_norm_margin", gap / linear)
    return gap, linear


@dataclass(frozen=True)
class DecadeGrowth:
    """The growth of ‖p‖ over each decade of t that starts beyond ‖p‖ = LOGT_FROM·‖p̂‖."""

    start: np.ndarray  # ‖p‖ at the decade's start
    ratio: np.ndarray  # the growth over ‖p̂‖·ln 10
    scaled: np.ndarray  # |ratio − 1|·‖p‖/‖p̂‖: the deviation in units of ‖p̂‖/‖p‖
    final_offset: float  # ‖p‖ − ‖p̂‖ log t at the path's end

    @property
    def worst(self) -> int:
        return int(np.argmax(self.scaled))


def decade_growth(path, p_hat: float) -> DecadeGrowth:
    """DecadeGrowth of the traced path, ‖p̂‖ = ``p_hat``."""
    at = norms_per_decade(path)
    k = np.flatnonzero(at[:-1] >= LOGT_FROM * p_hat)
    ratio = (at[k + 1] - at[k]) / (p_hat * math.log(10))
    finite = np.isfinite(path.log_time)
    offset = float(path.norms[finite][-1] - p_hat * path.log_time[finite][-1])
    return DecadeGrowth(at[k], ratio, np.abs(ratio - 1) * at[k] / p_hat, offset)


@claim("EMB-FLOW-LOGT")
@shared_stream
@given(inst=THEOREM_DATA)
def test_norm_grows_like_log_t(inst):
    """Growth rate of the norm: under the hypotheses of the gradient-flow theorem,
    ‖p(t)‖ = ‖p̂‖·log t + O(1), p̂ the `<cls>` SVM solution."""
    flow = theorem_flow(inst)
    assert flow.stall is None, flow.stall
    svm = cls_svm_of(flow.prep)
    if not svm.ok:
        evidence.inconclusive(f"`<cls>` SVM oracle: {svm.status} ({svm.reason})")
    p_hat, growth = float(svm.norm), decade_growth(flow.run.path, float(svm.norm))
    beyond = f"the path covers a decade of t beyond ‖p‖ = {LOGT_FROM}‖p̂‖"
    if not evidence.premise(len(growth.scaled) > 0, beyond):
        return
    k = growth.worst
    evidence.slack("growth_deviation_times_norm", float(growth.scaled[k]), LOGT_TOL)
    evidence.metric("final_offset", growth.final_offset)
    assert growth.scaled[k] <= LOGT_TOL, (
        f"‖p‖ grows by {growth.ratio[k]:.6f}·‖p̂‖ ln 10 over the decade from ‖p‖ = "
        f"{growth.start[k]:.4g} (‖p̂‖ = {p_hat:.4g}): off by {abs(growth.ratio[k] - 1):.2e} > "
        f"{LOGT_TOL}·‖p̂‖/‖p‖"
    )


@claim("EMB-FLOW-LOSS")
@shared_stream
@given(inst=THEOREM_DATA)
def test_loss_decreases_to_floor(inst):
    """Gradient-flow theorem (§3.3), part 3: under its hypotheses, L(p(t)) ↓ L* = (1/n) Σ_i
    log(1 + exp(−y_i⟨E¹_{s*(i)}, v⟩)) > 0, the infimum of L over p with E and v frozen."""
    flow = theorem_flow(inst)
    assert flow.stall is None, flow.stall
    prompt, floor = flow.prep.prompt, flow.floor
    positions = star_positions(inst).to(torch.int64).argmax(-1)
    assert math.isclose(floor, prompt.loss_floor(positions), rel_tol=FLOOR_AGREEMENT)
    start = float(prompt.loss_value(torch.zeros(inst.d, dtype=F64)))
    p_far = torch.from_numpy(flow.p_far)
    gap = loss_gap(prompt, p_far, positions, floor)
    assert floor > 0, f"L* = {floor} is not positive"
    assert start > floor, f"L(0) = {start} does not exceed L* = {floor}"
    assert float(prompt.loss_value(p_far)) >= floor * (1 - LOSS_FLOOR_ROUNDING), (
        "L(p) fell below L*"
    )
    assert gap <= LOSS_GAP_TOL * floor, f"L − L* = {gap:.3e} > 1e-8·L* at ‖p‖ = {R_FAR:g}"


def loss_gap(prompt: PromptProblem, p, positions, floor: float) -> float:
    """L(p) − L*, computed in log space (PromptProblem.log_loss_gap at the positions of s*)."""
    log_gap = prompt.log_loss_gap(p, positions)
    gap = math.exp(log_gap) if log_gap > -700 else 0.0
    evidence.metric("loss_floor", floor)
    evidence.metric("log10_gap_at_far_point", log_gap / math.log(10))
    evidence.slack("loss_gap_over_floor", gap / floor, LOSS_GAP_TOL)
    return gap


@claim("EMB-FLOW-DIRECTION")
@shared_stream
@given(inst=THEOREM_DATA)
def test_direction_converges_to_cls_svm(inst):
    """Gradient-flow theorem (§3.3), part 4: under its hypotheses, p(t)/‖p(t)‖ → p̂/‖p̂‖, where
    p̂ = argmin ‖p‖ s.t. (E¹_{s*(i)} − E¹_s)ᵀp ≥ 1 for every i and s ∈ X_i, s ≠ s*(i) (the
    `<cls>` SVM)."""
    flow = theorem_flow(inst)
    svm, outcome = cls_svm_of(flow.prep), flow.run.outcome
    if not svm.ok:
        evidence.inconclusive(f"`<cls>` SVM oracle: {svm.status} ({svm.reason})")
    assert flow.stall is None, flow.stall
    if outcome.status == "inconclusive":  # the oracle, or ‖p‖ = 1e8 reached undecided
        evidence.inconclusive(outcome.reason)
    assert outcome.status == "converged", f"converge(): {outcome.status}"
    omc = direction_error(outcome, svm)
    assert omc <= DIRECTION_TOL, f"1 − cos(p, p̂) = {omc:.3e} > {DIRECTION_TOL:g}"


def direction_error(outcome, svm) -> float:
    """1 − cos(p, p̂) between converge()'s certified direction and the `<cls>` SVM solution."""
    omc = one_minus_cos(outcome.p, svm.x)
    evidence.slack("one_minus_cos", omc, DIRECTION_TOL)
    evidence.metric("svm_norm", float(svm.norm))
    evidence.metric("norm_at_convergence", float(outcome.p.norm()))
    return omc


@dataclass(frozen=True)
class LossRise:
    """The largest rise of the loss over the GD_STEPS steps of plain GD at step size ``eta``,
    relative to max(1, L): ``value`` at step ``step``; ``smooth`` the smoothness bound L_p."""

    eta: float
    value: float
    step: int
    smooth: float

    def __str__(self) -> str:
        return (
            f"GD with η = {self.eta:g} (η·L_p = {self.eta * self.smooth:.3g}): the loss rises by "
            f"{self.value:.3e} at step {self.step}"
        )


def largest_loss_rise(prompt: PromptProblem, eta: float) -> LossRise:
    """Plain GD p_{k+1} = p_k − η∇L(p_k) from p_0 = 0 for GD_STEPS steps: its LossRise."""
    smooth = prompt.smoothness_bound()
    losses = gd(prompt, eta=eta, steps=GD_STEPS).losses
    rise = (losses[1:] - losses[:-1]) / np.maximum(1.0, losses[:-1])
    worst = int(np.argmax(rise))
    evidence.slack("loss_rise", float(rise[worst]), MONO_TOL)
    evidence.metric("eta_times_smoothness", eta * smooth)
    return LossRise(eta, float(rise[worst]), worst + 1, smooth)


@claim("EMB-FLOW-MONOTONE")
@shared_stream
@example(inst=saved("EMB-FLOW-MONOTONE"))
@given(inst=THEOREM_DATA)
def test_gd_loss_monotone(inst):
    """Monotone loss (§3.3) for plain GD at the spec's step sizes: under the hypotheses of the
    gradient-flow theorem, GD on p from p_0 = 0 with η ∈ {0.1, 1} never raises the loss."""
    prep = theorem_instance(inst)
    for eta in GD_RATES:
        rise = largest_loss_rise(prep.prompt, eta)
        assert rise.value <= MONO_TOL, str(rise)


@claim("EMB-FLOW-MONOTONE-CAPPED")
@shared_stream
@example(inst=saved("EMB-FLOW-MONOTONE"))
@given(inst=THEOREM_DATA)
def test_gd_loss_monotone_capped(inst):
    """Monotone loss under the descent lemma's step: under the hypotheses of the gradient-flow
    theorem, GD on p from p_0 = 0 with η = min(η_spec, 1/L_p), η_spec ∈ {0.1, 1}, never raises L."""
    prep = theorem_instance(inst)
    cap = 1.0 / prep.prompt.smoothness_bound()
    for eta in GD_RATES:
        rise = largest_loss_rise(prep.prompt, min(eta, cap))
        assert rise.value <= MONO_TOL, str(rise)


@claim("EMB-SVM-FEASIBLE")
@given(inst=THEOREM_DATA)
def test_cls_svm_feasible(inst):
    """Feasibility of the `<cls>` SVM (§3.3): under Assumption 1 with |S| ≤ d − 1 the `<cls>`
    SVM of E¹ is feasible, because p_ls = E¹⁺1_rel meets every constraint with equality; hence
    ‖p̂‖ ≤ ‖p_ls‖."""
    prep = prepare(inst)
    p_ls, svm = least_squares_point(prep), cls_svm_of(prep)
    assert svm.status != "infeasible", f"the `<cls>` SVM is infeasible: {svm.reason}"
    bound = float(p_ls.norm()) + SVM_NORM_SLACK
    evidence.slack("svm_norm_over_p_ls", float(svm.norm), bound)
    assert float(svm.norm) <= bound, f"‖p̂‖ = {float(svm.norm):.6g} > ‖p_ls‖ = {bound:.6g}"


def least_squares_point(prep: Prepared) -> torch.Tensor:
    """p_ls = E¹⁺1_rel, 1_rel the indicator of the completely positive or negative tokens."""
    inst = prep.inst
    relevant = completely_positive(inst.sequences, inst.y, inst.vocab_size)
    relevant |= completely_negative(inst.sequences, inst.y, inst.vocab_size)
    return max_margin_feasible_point(prep.step.E1, relevant)


# ---------------------------------------------------------------------------------------------
# §3.4: the sufficient condition for selecting only important tokens
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlphaLeader:
    """Per sequence: the token maximising y_i α_s over the distinct tokens of X_i, its lead over
    the next distinct token (0 on ties), and the smallest lead over all sequences."""

    tokens: torch.Tensor
    gaps: torch.Tensor

    @property
    def min_gap(self) -> float:
        return float(self.gaps.min())


def alpha_leader(inst: EmbeddingInstance) -> AlphaLeader:
    """argmax_{s ∈ X_i} y_i α_s, via selected_tokens with the α-line playing the role of E¹v."""
    alpha = average_signed_frequency(inst.sequences, inst.y, inst.vocab_size)
    # selected_tokens reads y_i·⟨E_s, v⟩; with E = diag(α)-like rows and v = 1 that is y_i·α_s.
    E = torch.diag(alpha)
    sel = selected_tokens(E, inst.sequences, inst.y, torch.ones(inst.vocab_size, dtype=F64))
    return AlphaLeader(sel.tokens, torch.where(sel.unique, sel.gap, torch.zeros_like(sel.gap)))


@claim("EMB-SUFF-PAPER")
@given(inst=GENERAL_DATA)
def test_paper_gap_condition(inst):
    """§3.4, paper-constant form: for general data, with Lemma 4.1's error ε = 11 η0 d^(−1/4), if
    for every i the lead of s*(i) = argmax_{s∈X_i} y_i α_s over every other token of X_i exceeds
    4ε/η0 = 44 d^(−1/4), then gradient flow selects s*(i) in every sequence."""
    leader = alpha_leader(inst)
    needed = PAPER_GAP_CONSTANT * inst.d**-0.25
    met = evidence.premise(leader.min_gap > needed, "gap condition")
    evidence.metric("gap_condition_met" if met else "gap_condition_not_met", leader.min_gap)
    evidence.metric(
        "d_needed", (PAPER_GAP_CONSTANT / leader.min_gap) ** 4 if leader.min_gap > 0 else math.inf
    )
    if met:
        chosen = run_flow_general(inst).selected_tokens()
        assert bool((chosen == leader.tokens).all()), "the flow does not select argmax y α"


# The empirical constant: two-relevant, G2 and G1 data over the regime of Lemma 4.1 (d from 64
# to 4096, η0 from 0.1 to 100; G2 draws η0 ∈ {0.1, 1, 10, 100}).
EMPIRICAL_DATA = st.one_of(
    GENERAL_DATA,
    two_relevant_instances(d=st.sampled_from([1024, 4096])),
    general_frequency_instances(eta0=st.sampled_from([0.1, 0.3, 1.0])),
    single_relevant_token_instances(d=st.sampled_from([64, 128])),
)
#: The bound on the empirical constant. Calibration: 2.09 under ci (200 draws), 5.58 under
#: nightly (4000 draws, target() hunting it). 8 is 1.4× the hunted worst and 5.5× below the
#: paper's 44. The lead is at most 2 (|α| ≤ 1), so c ≤ 2·d^(1/4) holds for free: the bound can
#: fail only at d ≥ 1024 (2·1024^(1/4) = 11.3, 16 at d = 4096), which the data draws often.
C_EMPIRICAL = 8.0


def constant_needed(prep: Prepared, leader: AlphaLeader) -> float:
    """max over the sequences where the α-leader is not the unique maximiser of y⟨E¹_s, v⟩ of
    lead·d^(1/4): a lower bound on any c that suffices (0 where it always is)."""
    sel = prep.selection
    missed = ((~sel.unique) | (sel.tokens != leader.tokens)) & (leader.gaps > 0)
    return float(leader.gaps[missed].max()) * prep.inst.d**0.25 if bool(missed.any()) else 0.0


@claim("EMB-SUFF-EMPIRICAL")
@given(inst=EMPIRICAL_DATA)
def test_empirical_separation_constant(inst):
    """§3.4 with the constant measured: a lead of s*(i) = argmax_{s∈X_i} y_i α_s over every other
    token of X_i larger than c·d^(−1/4) with c = 8 makes s*(i) the unique maximiser of
    y_i⟨E¹_s, v⟩ (the token the flow then selects, §3.3)."""
    c = constant_needed(prepare(inst), alpha_leader(inst))
    target(c, label="lead·d^(1/4) where the α-leader is not selected")
    evidence.metric("c_emp", c)
    evidence.slack("c_emp_over_bound", c, C_EMPIRICAL)
    assert c <= C_EMPIRICAL, (
        f"the α-leader leads by {c:.3g}·d^(−1/4) (d = {inst.d}, η0 = {inst.eta0:g}) and is not "
        f"the unique maximiser of y⟨E¹_s, v⟩: c = {C_EMPIRICAL:g} does not suffice"
    )


def run_flow_general(inst: EmbeddingInstance, target: float = PRACTICAL_TARGET) -> FlowRun:
    """The flow of §3.4 (general data): converge() with a decided selection (mass ≤ 1e-3 off
    it) confirmed by the direction of its own SVM to 1 − cos ≤ 1e-3; traced_flow, so that a
    short stop is the claim's to decide."""
    return traced_flow(inst, target=target, select_tol=1e-3)


@claim("EMB-SUFF-PRACTICAL")
@given(inst=two_relevant_instances())
def test_practical_argmax_is_alpha_argmax(inst):
    """(Wrong) On data with one strongly predictive token per sequence plus a weaker relevant one,
    the one-step noise never reorders them: whenever the maximiser of y_i⟨E¹_s, v⟩ over X_i is
    unique for every i, that token is argmax_{s∈X_i} y_i α_s (N8 at one step)."""
    prep = prepare(inst)
    if not prep.selection.all_unique:
        evidence.reject("precondition: argmax y⟨E¹_s, v⟩ is not unique in some sequence")
    leader = alpha_leader(inst)
    wrong = torch.nonzero(prep.selection.tokens != leader.tokens).flatten().tolist()
    assert not wrong, (
        f"argmax y⟨E¹_s, v⟩ = {prep.selection.tokens[wrong].unique().tolist()} but argmax y α = "
        f"{leader.tokens[wrong].unique().tolist()} in sequences {wrong[:5]}"
    )


def settled_mass(prep: Prepared, run: FlowRun, mask: torch.Tensor) -> float:
    """The smallest attention mass on ``mask`` where converge() certified the flow's selection
    (at the end of the path when that selection's SVM is infeasible); the example is
    inconclusive when the selection was never certified, or is infeasible and not settled."""
    status = run.outcome.status
    if status == "inconclusive":  # the oracle failed, or the selection was never certified
        evidence.inconclusive(run.outcome.reason)
    p_end = run.outcome.p if status == "converged" else torch.from_numpy(run.path.final)
    mass = float(attention_mass(prep.prompt, p_end, mask).min())
    if status == "infeasible" and SETTLED_OFF < mass < PRACTICAL_MASS:
        evidence.inconclusive(f"{run.outcome.reason}; mass {mass:.3g} on the argmax at the end")
    return mass


@claim("EMB-SUFF-PRACTICAL-FLOW")
@example(inst=saved("EMB-SUFF-PRACTICAL-FLOW"))
@given(inst=PRACTICAL_DATA)
def test_practical_flow_concentrates_on_argmax(inst):
    """§3.4, practical form (spec P-3.4): on data with one strongly predictive token per sequence
    plus a weaker relevant one, with |S| ≤ d − 1, whenever the maximiser of y_i⟨E¹_s, v⟩ over X_i
    is unique for every i, gradient flow on p from 0 puts ≥ 0.99 of X_i's attention on it."""
    prep = prepare(inst)
    if not prep.selection.all_unique:
        evidence.reject("precondition: argmax y⟨E¹_s, v⟩ is not unique in some sequence")
    planted = bool((prep.selection.tokens == inst.s_star).all())
    evidence.metric("argmax_is_planted" if planted else "argmax_not_planted", 1.0)
    run = run_flow_general(inst)
    mask = inst.sequences == prep.selection.tokens[:, None]
    stall = finite_stop(run, prep.prompt.loss_floor(mask.to(torch.int64).argmax(-1)))
    assert stall is None, stall
    mass = settled_mass(prep, run, mask)
    evidence.slack("mass_off_argmax", 1 - mass, 1 - PRACTICAL_MASS)
    assert mass >= PRACTICAL_MASS, f"attention on argmax y⟨E¹_s, v⟩ is only {mass:.4f}"


#: EMB-SUFF-R3: G1, two-relevant and G2 data, at the default d and at d ∈ {1024, 4096} (where the
#: R3 condition is met more often).
R3_DATA = st.one_of(
    single_relevant_token_instances(),
    single_relevant_token_instances(d=st.sampled_from([1024, 4096])),
    two_relevant_instances(d=st.sampled_from([1024, 4096])),
    general_frequency_instances(),
)


@claim("EMB-SUFF-R3")
@given(inst=R3_DATA)
def test_r3_gap_condition_identifies_alpha_argmax(inst):
    """§3.4 with R3 in place of the paper's constant: with ‖v‖ = 1 and m = max_s |⟨E⁰_s, v⟩|, if
    for every i the lead of s*(i) = argmax_{s∈X_i} y_i α_s over every other token of X_i exceeds
    4m(1/η0 + 1/4), then s*(i) is the unique maximiser of y_i⟨E¹_s, v⟩ over X_i for every i."""
    prep = prepare(inst)
    leader = alpha_leader(inst)
    needed = 4 * prep.step.m * (1 / inst.eta0 + 0.25)
    met = leader.min_gap > needed
    evidence.metric("condition_met" if met else "condition_not_met", leader.min_gap / needed)
    if met:
        sel = prep.selection
        assert sel.all_unique, "argmax y⟨E¹_s, v⟩ is not unique although the R3 gap holds"
        assert bool((sel.tokens == leader.tokens).all()), "argmax y⟨E¹_s, v⟩ ≠ argmax y α"
