"""Where gradient flow goes, certified: the convergence machinery the claims and `check` share.

``follow(problem, p0)`` asks the engine (models.flows.dynamics) where the flow from p(0) goes and
returns a certified `Limit`: "converged" (directional convergence to the SVM of a selection,
confirmed while ‖p‖ grows a hundredfold: ``settle``), "shared" (the general limit of
``models.flows.shared``: sets of tokens keep the mass for ever, p(t) = R·p_dir + q* + o(1), the
direction the equality SVM of the sets, q* a certified minimiser of the reduced loss),
"bounded" (the run ends at a certified strict local minimiser, or inside a certified
trapping interval on a one-dimensional key span, so ‖p(t)‖ stays bounded) or "undecided"
(what the engine could not decide, with its reason). The claims read it through
``theorems.limits.flow``, which turns "undecided" into an inconclusive example and records
the tests' slack; `check` (models.check.predict, models.check.cross_predict) reports it as it is.

The prompt model of 2306.13596 and the cross-attention W of 2308.16898 (through its vectorised
prompt problem) are followed by the same code.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from models.flows.dynamics import (
    FiniteMinimiser,
    Outcome,
    converge,
    finite_minimiser,
    trace_flow,
    twin_tokens,
)
from models.flows.shared import SharedLimit, shared_limit
from models.numerics import failures
from models.oracles.selection import local_optimality
from models.problems.attention import PromptProblem, one_minus_cos

#: 1 − cos(p, p^mm(α)) at which ``converge`` declares directional convergence (its default
#: target). Spec §6 asks cos ≥ 0.999 after 2000–3000 NGD steps; the tracer goes on to ‖p‖ of
#: 1e2–1e6, where 1 − cos ~ 1/‖p‖² is far smaller, so the tolerance is tighter than the spec's.
DIRECTION_TOL = 1e-6


#: A converged outcome must persist while ‖p‖ grows by this factor (``settle``).
CONFIRM_FACTOR = 100.0
#: ... or, where the tracer stalls on the way beyond its resolution (below), while ‖p‖ grows by
#: at least this factor before the stall. ``converge``'s own decision already needed a decade
#: of persistence (its ``persist``), so a confirmed outcome has held over two decades either way.
MIN_CONFIRM_FACTOR = 10.0
#: The confirming trace's tolerance (``trace_flow``'s default). It controls p to CONFIRM_RTOL·‖p‖
#: per coordinate: once that allowance reaches UNRESOLVED_ALLOWANCE, the O(1) offset of p from
#: the ray, which sets the flow's heading, is no longer followed, the field the integrator sees
#: turns with it, and its steps collapse. A stall there is the tracer's limit, not the flow's
#: (docs/performance.md, "Limits found"); a stall below it is evidence of a finite stationary
#: point (tests/test_limits.py: the ladder's draw that stalls at ‖p‖ = 204.55 is one).
CONFIRM_RTOL = 1e-7
UNRESOLVED_ALLOWANCE = 1.0

#: Loss floor: L − (1/n)Σℓ(γ_iα) = (1/n)Σ[ℓ(γ_iα − δ_i) − ℓ(γ_iα)] with δ_i ≤ (T−1)·SELECT_TOL·
#: range(γ_i) ≤ 5·1e-6·2 (T ≤ 6, scores in [−1, 2]) and |ℓ'| ≤ 1 near the floor (logistic,
#: correlation; exponential at γ ≥ 0): at most 1e-5 once the selection is reached.
LOSS_GAP_TOL = 1e-5

#: Selection (spec §6): every non-selected token keeps softmax mass ≤ this at the end.
SELECT_TOL = 1e-6

#: Why each of the engine's tolerances is what it is, for the slack a claim records against it
#: (``Limit.slack``; the report's audit of loose tolerances reads them).
DERIVATIONS = {
    "DIRECTION_TOL": (
        "a certificate threshold, not an observation: converge declares directional convergence "
        "once 1 − cos(p, p^mm(α)) ≤ 1e-6 with the selection settled, and settle confirms it while "
        "‖p‖ grows 100-fold (CONFIRM_FACTOR); on a converging flow 1 − cos ~ c/‖p‖², so the "
        "confirmed value sits ~1e-4 below the threshold. A flow to another limit stays at the "
        "1 − cos between two distinct SVM directions, orders of magnitude above 1e-6."
    ),
    "SELECT_TOL": (
        "a certificate threshold: the softmax mass off α decays like exp(−gap·‖p‖) along a "
        "converging flow, so at the confirmed ‖p‖ it is exponentially below 1e-6 (exactly 0 in "
        "float64 once gap·‖p‖ > 745); a flow that shares the mass (a tie, another limit) keeps "
        "it Θ(1)."
    ),
    "LOSS_GAP_TOL": (
        "L − (1/n)Σℓ(γ_iα) = (1/n)Σ[ℓ(γ_iα − δ_i) − ℓ(γ_iα)] with δ_i ≤ (T − 1)·SELECT_TOL·"
        "range(γ_i) ≤ 5·1e-6·2 and |ℓ'| ≤ 1 near the floor: at most 1e-5 once the selection is "
        "reached, and exponentially smaller at the confirmed ‖p‖ (0 in float64)."
    ),
}


def limit_name(out: Outcome, svm: str) -> str:
    """The limit a converged outcome reached: ``svm`` of its selection, or the tie-sharing SVM
    of it (models.flows.dynamics.Outcome.tie_sharing)."""
    selected = out.selected.tolist()
    return f"the tie-sharing SVM of {selected}" if out.tie_sharing else f"{svm}({selected})"


def tie_sharing_message(out: Outcome, target: str) -> str:
    """Why a flow certified to the tie-sharing SVM did not converge to ``target``: the tied
    token with the smallest margin in the limit direction."""
    i, t, margins = out.tied_margins()
    j = int(np.argmin(margins))
    ij, tj = int(i[j]), int(t[j])
    if twin_tokens(out.trajectory.problem._np[0], out.selected)[ij, tj]:
        why = (
            "has the selected token's very key: the same logit for every p, so it keeps the "
            "selected token's mass for ever and"
        )
    else:
        why = "tied in score with the selected token,"
    return (
        f"gradient flow converged to the tie-sharing SVM of {out.selected.tolist()} "
        f"(1 − cos = {out.one_minus_cos:.1e}): token {tj} of input {ij}, {why} stays at margin "
        f"{margins[j]:.4g} < 1 (tokens that share the mass exert no force on each other), so "
        f"not to {target}"
    )


def settle(problem: PromptProblem, p0, *, tries: int = 3) -> tuple[Outcome, int]:
    """``converge``, with each "converged" outcome confirmed over two decades of ‖p‖.

    ``converge`` stops the first time the direction is within DIRECTION_TOL of the SVM of the
    current selection. A trajectory can pass that close to p^mm(α) of a selection that is not
    locally optimal and leave again (observed: 1 − cos 1e-6 to a non-locally-optimal α at
    ‖p‖ ≈ 46, then escape to another α by ‖p‖ ≈ 35). So the flow is traced on to
    CONFIRM_FACTOR·‖p‖; if the selection changes or the direction drifts away, ``converge``
    restarts from there (at most ``tries`` times). A confirmed outcome is reported at the
    confirming point (its 1 − cos and softmax leak are those at the larger ‖p‖). Returns the
    outcome and how many transient passes were discarded; an outcome never confirmed is
    returned as "inconclusive".

    A confirming trace that stalls beyond the tracer's resolution (CONFIRM_RTOL·‖p‖ ≥
    UNRESOLVED_ALLOWANCE; observed on a tie-sharing limit at ‖p‖ ≈ 2e8, where the offset that
    sets the heading is O(1) and the allowance 20) confirms over the range it did follow, if
    ‖p‖ grew at least MIN_CONFIRM_FACTOR-fold first, the selection and direction unchanged at
    the stall; the outcome's reason says so. Any other stall restarts ``converge`` as any
    failed confirmation (and ``follow`` then looks for the finite stationary point).
    """
    out = converge(problem, p0, target=DIRECTION_TOL, select_tol=SELECT_TOL)
    transient = 0
    for _ in range(tries):
        if not out.converged:
            return out, transient
        norm = float(torch.linalg.vector_norm(out.p))
        ext = trace_flow(
            problem, out.p, max_norm=CONFIRM_FACTOR * max(norm, 1.0), rtol=CONFIRM_RTOL
        )
        p = ext.final
        selected = problem.selected(p).numpy()
        omc = one_minus_cos(p, out.svm.x)
        end = float(torch.linalg.vector_norm(p))
        grown = end / max(norm, 1.0)
        unresolved = CONFIRM_RTOL * end >= UNRESOLVED_ALLOWANCE
        stalled = ext.stop.startswith("integrator stalled") and unresolved
        stalled = stalled and grown >= MIN_CONFIRM_FACTOR
        if (
            (ext.stop == "reached max_norm" or stalled)
            and np.array_equal(selected, out.selected)
            and omc <= DIRECTION_TOL
        ):
            probs = problem.softmax(p)
            probs[torch.arange(problem.n), torch.as_tensor(selected)] = 0.0
            # a twin (the selected token's very key) holds its mass by identity, not by leak
            probs[torch.as_tensor(twin_tokens(problem._np[0], selected))] = 0.0
            leak = float(probs.max()) if problem.T > 1 else 0.0
            reason = out.reason
            if stalled:
                reason = (
                    f"{reason}; confirmed while ‖p‖ grew {grown:.3g}-fold, then {ext.stop}: "
                    f"beyond the tracer's resolution (error allowance {CONFIRM_RTOL * end:.3g})"
                )
            confirmed = dataclasses.replace(
                out, p=p, one_minus_cos=omc, max_other_prob=leak, reason=reason
            )
            return confirmed, transient
        transient += 1
        out = converge(problem, p, target=DIRECTION_TOL, select_tol=SELECT_TOL)
    if out.converged:
        reason = f"convergence did not persist over {tries} confirmations"
        out = dataclasses.replace(out, status="inconclusive", reason=reason)
    return out, transient


#: ``line_trap``: instances up to this many tokens (n·T) get the high-precision slopes (each
#: costs a few hundred evaluations of L in mpmath).
TRAP_MAX_TOKENS = 512
#: ``line_trap``: half-widths tried around the end point, 1e-6·max(1, |z|)·4^k for k below this.
TRAP_WIDENINGS = 12


@dataclasses.dataclass(frozen=True)
class LineTrap:
    """A certificate that a flow on a one-dimensional key span is trapped (``line_trap``).

    The keys' differences span one line, b, so L(p) depends on z = bᵀp alone and the flow
    moves along b. At z = lo the slope dL/dz is negative and at z = hi positive (signs in
    ``digits`` decimal digits, confirmed at 20 more): −dL/dz points inward at both ends, so
    a flow inside [lo, hi] never leaves it (it would have to cross an end against the field)
    and ‖p(t)‖ stays bounded. log_slopes: log|dL/dz| at lo and hi.
    """

    lo: float
    hi: float
    end: float
    log_slopes: tuple[float, float]
    digits: int


def certified_slope(problem: PromptProblem, p: np.ndarray, b: np.ndarray) -> tuple | None:
    """(sign dL/dz, log‖∇L‖, digits) at p along the unit vector b, or None where two
    precisions disagree (or p is stationary in float64).

    The precision is set by the slope's own size: the float64 log-space field says it is
    about e^{lgn}, and L itself is O(1), so the difference quotient needs −lgn/ln 10 digits
    beyond the 40 kept; it is evaluated again with 20 more and must agree (sign, and
    |log|slope|| to 1e-6) to count."""
    from models.numerics.highprec import slope

    _, lgn = problem.flow_field_np(p)
    if lgn == -math.inf:
        return None
    digits = 40 + math.ceil(max(0.0, -lgn) / math.log(10))
    sign, log_abs = slope(problem, p, b, digits)
    again, log_again = slope(problem, p, b, digits + 20)
    if sign == 0 or sign != again or not abs(log_abs - log_again) <= 1e-6 * max(1.0, abs(log_abs)):
        return None
    return sign, lgn, digits


def line_trap(problem: PromptProblem, p_end) -> LineTrap | None:
    """A trapping interval around the point where a run stalled, on a one-dimensional key
    span; None where the span has more dimensions, the instance is larger than
    TRAP_MAX_TOKENS, or no interval of the TRAP_WIDENINGS tried has certified inward slopes.

    Why: far out on a line the loss is within e^{−270} of its floor and its float64 value,
    autograd and Hessian carry no digit of the variation (``finite_minimiser`` declines
    beyond ‖p‖ = 1e3), while the slopes' signs on either side of the stall decide it."""
    basis = problem.difference_span
    if basis.shape[1] != 1 or problem.n * problem.T > TRAP_MAX_TOKENS:
        return None
    b = np.ascontiguousarray(basis[:, 0])
    p = np.asarray(p_end.detach().cpu().numpy() if torch.is_tensor(p_end) else p_end, float)
    z = float(b @ p)
    for k in range(TRAP_WIDENINGS):
        delta = 1e-6 * max(1.0, abs(z)) * 4.0**k
        below = certified_slope(problem, p - delta * b, b)
        if below is None or below[0] != -1:
            continue
        above = certified_slope(problem, p + delta * b, b)
        if above is not None and above[0] == 1:
            digits = min(below[2], above[2])
            return LineTrap(z - delta, z + delta, z, (below[1], above[1]), digits)
    return None


@dataclasses.dataclass
class Limit:
    """Where gradient flow from p(0) goes, as far as the engine can tell (``follow``).

    kind: "converged" (``settle`` certified directional convergence to the SVM of
    ``outcome.selected``), "shared" (certified convergence to a shared-mass limit,
    ``shared``: sets of tokens keep their mass, p → R·p_dir + q*), "bounded" (the run ended
    at a certified strict local minimiser of L, ``minimiser``: the flow never leaves its
    basin, so ‖p(t)‖ stays bounded), or
    "undecided" (a machinery failure: the budget ran out while p was still moving, an
    integrator stall that is no minimiser, a solver failure; ``reason`` says which).
    ``symbol``: how messages name the SVM solution ("p^mm", or "W^mm" for a flow on W).
    """

    kind: str
    outcome: Outcome
    transient: int
    minimiser: FiniteMinimiser | None = None
    symbol: str = "p^mm"
    #: "bounded" without a minimiser: why L is constant (``constant_loss``), so that the flow
    #: rests at p(0)
    at_rest: str | None = None
    #: "bounded" by a trapping interval on a one-dimensional key span (``line_trap``)
    trap: LineTrap | None = None
    #: "shared": the certified general limit (``models.flows.shared``): sets of tokens share the
    #: mass for ever, p(t) = R·p_dir + q* + o(1)
    shared: SharedLimit | None = None

    @property
    def reason(self) -> str:
        return self.outcome.reason

    def slack(self, name: str, observed: float, bound: float, derivation: str) -> None:
        """Hears each observed/bound pair a test below reads, with why the bound is what it is
        (the claims record them as their slack, ``theorems.limits.Limit``); nothing here."""

    @property
    def diverges(self) -> bool:
        """‖p(t)‖ → ∞ (certified: the flow converged in direction, to one token per input or
        to a shared-mass limit)."""
        return self.kind in ("converged", "shared")

    def converged_to(self, alpha) -> bool:
        """Directional convergence to p^mm(α): the selection is α, 1 − cos ≤ DIRECTION_TOL,
        every other token's softmax mass ≤ SELECT_TOL, and not the tie-sharing limit. The
        two margins are recorded as the claim's slack when the selection is α."""
        out, alpha = self.outcome, np.asarray(alpha)
        if self.kind != "converged" or not np.array_equal(out.selected, alpha):
            return False
        self.slack(
            f"1 − cos({self._var}, {self.symbol}(α))",
            out.one_minus_cos,
            DIRECTION_TOL,
            DERIVATIONS["DIRECTION_TOL"],
        )
        self.slack(
            "max softmax mass off α", out.max_other_prob, SELECT_TOL, DERIVATIONS["SELECT_TOL"]
        )
        return (
            not out.tie_sharing
            and out.one_minus_cos <= DIRECTION_TOL
            and out.max_other_prob <= SELECT_TOL
        )

    @property
    def _var(self) -> str:
        return self.symbol.split("^", 1)[0]

    def why_not(self, alpha, what: str = "") -> str:
        """Why the flow did not converge to p^mm(α) (the assertion's message)."""
        out, alpha = self.outcome, np.asarray(alpha)
        target = f"{what} {self.symbol}({alpha.tolist()})".strip()
        if self.kind == "bounded":
            return bounded_message(self)
        if self.kind == "shared":
            return f"{shared_message(self.shared, self.symbol)}, not to {target}"
        if self.kind != "converged":
            return f"undecided ({out.reason})"
        if not np.array_equal(out.selected, alpha):
            problem = out.trajectory.problem
            verdict = local_optimality(problem.keys, problem.scores, out.selected)
            return (
                f"converged to {limit_name(out, self.symbol)} (1 − cos = "
                f"{out.one_minus_cos:.1e} at ‖{self._var}‖ = {float(out.p.norm()):.3g}), not to "
                f"{target}; the reached selection is "
                f"{'locally optimal' if verdict.locally_optimal else 'NOT locally optimal'} "
                f"({verdict.reason}; inputs with no support token: "
                f"{list(verdict.vacuous_inputs)})"
            )
        if out.tie_sharing:
            return tie_sharing_message(out, target)
        return (
            f"selection {alpha.tolist()} reached, but 1 − cos = {out.one_minus_cos:.3g} "
            f"(≤ {DIRECTION_TOL:g} asked) and softmax mass off α = {out.max_other_prob:.3g} "
            f"(≤ {SELECT_TOL:g} asked)"
        )

    def loss_gap(self, alpha) -> float | None:
        """L(p) − (1/n)Σℓ(γ_iα_i) at the limit point, where α is the top-score selection
        (the floor the loss tends to), recorded as slack against LOSS_GAP_TOL; None where some
        α_i does not score highest."""
        problem, alpha = self.outcome.trajectory.problem, np.asarray(alpha)
        scores = problem.scores
        if not all(float(scores[i, a]) >= float(scores[i].max()) for i, a in enumerate(alpha)):
            return None
        gap = math.exp(problem.log_loss_gap(self.outcome.p, alpha))
        self.slack("L(p) − loss floor", gap, LOSS_GAP_TOL, DERIVATIONS["LOSS_GAP_TOL"])
        return gap

    def describe(self) -> str:
        out = self.outcome
        if self.kind == "converged":
            return f"converged to {self.symbol}({out.selected.tolist()})"
        if self.kind == "bounded":
            return bounded_message(self)
        if self.kind == "shared":
            return shared_message(self.shared, self.symbol)
        return f"undecided ({out.reason})"


def shared_message(shared: SharedLimit, symbol: str = "p^mm") -> str:
    """What a certified shared-mass limit is, in a sentence (``Limit.why_not``, ``check``)."""
    var = symbol.split("^", 1)[0]
    sets = [np.nonzero(row)[0].tolist() for row in shared.sets]
    return (
        f"converged to a shared-mass limit: the inputs' token sets {sets} keep their mass, "
        f"{var} → R·{var}_dir + {var}_fin with {var}_dir the equality SVM of the sets "
        f"(1 − cos = {shared.one_minus_cos:.1e}) and ‖{var}_fin‖ = "
        f"{float(np.linalg.norm(shared.finite.q)):.4g} ({shared.reason})"
    )


def follow(problem: PromptProblem, p0, *, cls: type[Limit] = Limit) -> Limit:
    """``settle``, with a run that ends at a finite point decided instead of excused, and a
    run that keeps several tokens' mass handed to the general limit.

    A run that ends with some input's mass on a set of tokens with different keys (the
    single-token engine's "ambiguous selection", or its stall where the within-set terms of
    ∇L cancel to rounding) goes to ``models.flows.shared.shared_limit`` first: a certified
    shared-mass limit makes the run "shared" (‖p(t)‖ → ∞ along the sets' equality SVM, the
    split at the reduced loss's minimiser).

    A stall of the flow (gradient ≈ 0 with the loss above every floor) is evidence against
    ‖p(t)‖ → ∞, not a failure of the machinery: the end point is handed to
    ``finite_minimiser``, and a certified strict local minimiser makes the run "bounded".
    Only what the engine truly could not decide stays "undecided". ``converge`` reports every
    run it leaves undecided as a gradient-flow failure; here that report is tolerated (the
    decision is made below), and the claim turns an "undecided" Limit into an inconclusive
    example itself (``flow``). Failures of any other source (the SVM oracle, non-finite
    numbers) still discard the example.
    """
    with failures.tolerate(failures.GRADIENT_FLOW):
        out, transient = settle(problem, p0)
    if out.converged:
        return cls("converged", out, transient)
    # sets of tokens that share the mass (an "ambiguous selection", or the integrator's stall
    # where the within-set terms of ∇L cancel to rounding): the general limit
    shared = shared_limit(
        problem, out.p, target=DIRECTION_TOL, select_tol=SELECT_TOL, persist=CONFIRM_FACTOR
    )
    if shared is not None and shared.converged:
        return cls("shared", out, transient, shared=shared)
    if shared is not None:  # say why the general limit was not certified either
        out = dataclasses.replace(out, reason=f"{out.reason}; general limit: {shared.reason}")
    if out.trajectory.stop.startswith("stationary point"):
        why = constant_loss(problem)
        if why is not None:
            return cls("bounded", out, transient, at_rest=why)
    if out.trajectory.stop != "reached max_norm":
        found = finite_minimiser(problem, out.p)
        if found is not None:
            return cls("bounded", out, transient, found)
        trap = line_trap(problem, out.p)
        if trap is not None:
            return cls("bounded", out, transient, trap=trap)
    return cls("undecided", out, transient)


def constant_loss(problem: PromptProblem) -> str | None:
    """Why L(p) is the same for every p, decided exactly; None where it is not.

    Tokens with one key share their logit for every p, so each input's softmax weighs the
    groups of equal keys, and m_i(p) = Σ_groups (softmax mass of the group)·(the group's mean
    score). Distinct keys are separated by some p, so m_i is constant iff all of input i's
    groups have the same mean score; L is constant iff that holds in every input. The means
    are compared as exact rationals of the float64 scores (no rounding)."""
    from fractions import Fraction

    keys, scores = problem._np
    for i in range(keys.shape[0]):
        groups: dict[tuple, list[Fraction]] = {}
        for t in range(keys.shape[1]):
            # a tuple of floats: −0.0 and 0.0 are one key, as they are one logit
            groups.setdefault(tuple(keys[i, t].tolist()), []).append(Fraction(scores[i, t]))
        means = {sum(g) / len(g) for g in groups.values()}
        if len(means) > 1:
            return None
    return (
        "in every input, the groups of tokens with equal keys have equal mean scores: each "
        "margin m_i is that mean for every p"
    )


def bounded_message(lim: Limit) -> str:
    if lim.trap is not None:
        t = lim.trap
        return (
            f"the flow stops at z = {t.end:.6g} on the one line the keys span, inside "
            f"[{t.lo:.6g}, {t.hi:.6g}], where dL/dz < 0 at the lower end and > 0 at the upper "
            f"one (|dL/dz| = e^{t.log_slopes[0]:.1f}, e^{t.log_slopes[1]:.1f}; signs in "
            f"{t.digits} digits, confirmed at {t.digits + 20}): the flow cannot leave the "
            "interval, ‖p(t)‖ stays bounded"
        )
    if lim.minimiser is None:
        return (
            f"L is constant ({lim.at_rest}), so ∇L ≡ 0 and the flow rests at p(0): ‖p(t)‖ "
            "stays bounded"
        )
    m, problem = lim.minimiser, lim.outcome.trajectory.problem
    return (
        f"the flow stops at ‖p‖ = {float(torch.linalg.vector_norm(lim.outcome.p)):.4g}, "
        f"{m.distance:.1e} from a strict local minimiser of L (‖∇L‖ = {m.grad_norm:.1e}, "
        f"Hessian eigenvalues in [{m.min_eig:.3g}, {m.max_eig:.3g}] on the key span, "
        f"L = {m.loss:.6g}; floor of the reached selection "
        f"{problem.loss_floor(problem.selected(m.p).numpy()):.6g}): ‖p(t)‖ stays bounded"
    )
