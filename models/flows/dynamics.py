"""Training dynamics on p: plain GD, normalized GD, and a gradient-flow path tracer.

Gradient flow ṗ = −∇L(p), plain GD with small η and normalized GD all follow one curve; they
differ only in how fast they move along it. The tracer follows that curve in arc length s,
    dp/ds = −∇L(p)/‖∇L(p)‖,
with scipy's LSODA (the flow is stiff: see ``trace_flow``). The direction comes from the
log-space gradient, so it stays exact at ‖p‖ = 1e8, where ∇L itself is 1e-(millions). Far out
the path becomes a straight ray p ≈ λ·p̂ + ρ*, the implicit steps grow with ‖p‖, and reaching
‖p‖ = 1e6 costs a few hundred field evaluations. Normalized GD with step η is this curve's
explicit Euler scheme with h = η.

Every run returns a ``Trajectory`` and, for ``converge``, an ``Outcome``: converged (with the
achieved 1 − cos to the SVM of the tokens it selects), inconclusive (with the reason) or
infeasible. Runs never return NaN and never stop silently: each stop has a named reason.
"""

from __future__ import annotations

import contextlib
import functools
import math
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction

import numpy as np
import torch
from scipy.integrate import LSODA

from models.flows import kernels
from models.flows.offset import equilibrium, relaxed_heading
from models.numerics import failures
from models.problems.attention import PromptProblem, as_float_tensor, one_minus_cos

Tensor = torch.Tensor


@dataclass
class Trajectory:
    """Recorded points of a run. ``s`` is arc length (flow, NGD) or the step index (GD)."""

    ps: Tensor  # (k, d)
    s: np.ndarray  # (k,)
    log_grad_norms: np.ndarray  # (k,) log‖∇L‖ at each recorded point
    stop: str  # why the run ended
    evals: int  # gradient evaluations
    seconds: float  # time of the dynamics alone
    extra: dict = field(default_factory=dict)
    problem: PromptProblem | None = field(default=None, repr=False)

    @functools.cached_property
    def losses(self) -> np.ndarray:
        """L at every recorded point, computed on first use (not part of the timed run)."""
        return self.problem.loss_path(self.ps).numpy()

    @property
    def final(self) -> Tensor:
        return self.ps[-1]

    @property
    def norms(self) -> np.ndarray:
        return torch.linalg.vector_norm(self.ps, dim=-1).numpy()

    @property
    def softmax(self) -> Tensor:
        """The attention of every input at every recorded point, shape (k, n, T)."""
        logits = torch.einsum("itd,kd->kit", self.problem.keys, self.ps)
        return torch.softmax(logits, dim=-1)


class _Recorder:
    def __init__(self, problem: PromptProblem, every: int):
        self.problem, self.every = problem, max(1, int(every))
        self.ps, self.s, self.lgn = [], [], []

    def add(self, p: np.ndarray, s: float, log_grad_norm: float, force=False, k: int = 0):
        if force or k % self.every == 0:
            self.ps.append(p.copy())
            self.s.append(s)
            self.lgn.append(log_grad_norm)

    def finish(self, p: np.ndarray, s: float, log_grad_norm: float) -> None:
        """Record the last point of a run that stopped early, unless it is already recorded."""
        if not self.ps or not np.array_equal(self.ps[-1], p):
            self.add(p, s, log_grad_norm, force=True)

    def build(self, stop: str, evals: int, t0: float, **extra) -> Trajectory:
        seconds = time.perf_counter() - t0
        return Trajectory(
            ps=torch.from_numpy(np.stack(self.ps)),
            s=np.asarray(self.s),
            log_grad_norms=np.asarray(self.lgn),
            stop=stop,
            evals=evals,
            seconds=seconds,
            extra=extra,
            problem=self.problem,
        )


def _start(problem: PromptProblem, p0) -> np.ndarray:
    """The initial point as a fresh float64 numpy vector (the engine works in numpy)."""
    if p0 is None:
        return np.zeros(problem.dim)
    p = as_float_tensor(p0, "p0", 1).detach().numpy().copy()
    if p.shape[0] != problem.dim:
        raise ValueError(f"p0: expected dimension {problem.dim}, got {p.shape[0]}")
    return p


def gd(problem: PromptProblem, p0=None, *, eta: float, steps: int, record_every: int = 1):
    """Plain gradient descent p ← p − η∇L(p) with a fixed step (η ≤ 1/L_p for the theorems).

    ∇L = −‖∇L‖·u from the tracer's field (``flow_field_np``: u and log‖∇L‖ in one compiled
    call, linear-space where that is exact to rounding): the same gradient as the log-space
    ``gradient_log_np`` to a few ε (tests/test_dynamics.py), 1.5–2× cheaper per step.
    """
    t0 = time.perf_counter()
    p = _start(problem, p0)
    rec = _Recorder(problem, record_every)
    u, lgn = problem.flow_field_np(p)
    rec.add(p, 0, lgn, force=True)
    stop, evals = "step budget", 1
    for k in range(1, steps + 1):
        if lgn == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            rec.finish(p, k - 1, lgn)
            break
        # The update is the gradient's true size: it underflows when ∇L does, as real GD does.
        p = p + eta * math.exp(min(lgn, 700.0)) * u
        u, lgn = problem.flow_field_np(p)
        evals += 1
        rec.add(p, k, lgn, force=(k == steps), k=k)
    return rec.build(stop, evals, t0)


def ngd(problem: PromptProblem, p0=None, *, lr: float = 0.1, steps: int = 1000, record_every=1):
    """Normalized GD p ← p − lr·∇L/‖∇L‖, the protocol of the official notebooks, but with the
    direction from log space and no ``+ eps`` (which freezes the iterate once ‖∇L‖ ≪ eps)."""
    t0 = time.perf_counter()
    p = _start(problem, p0)
    rec = _Recorder(problem, record_every)
    u, lgn = problem.flow_field_np(p)
    rec.add(p, 0.0, lgn, force=True)
    stop, evals = "step budget", 1
    for k in range(1, steps + 1):
        if lgn == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            rec.finish(p, lr * (k - 1), lgn)
            break
        p = p + lr * u
        u, lgn = problem.flow_field_np(p)
        evals += 1
        rec.add(p, lr * k, lgn, force=(k == steps), k=k)
    return rec.build(stop, evals, t0)


class EvaluationBudgetExhausted(Exception):
    """Raised by ``trace_flow`` once the field evaluations of an ``evaluation_budget`` block
    are spent: the caller's decision is then "inconclusive (budget)", never a verdict."""


#: The evaluations left to the innermost ``evaluation_budget`` block (None: no budget).
_BUDGET: list[int | None] = [None]


@contextlib.contextmanager
def evaluation_budget(evaluations: int | None) -> Iterator[None]:
    """Let the tracer spend at most ``evaluations`` field (and Jacobian) evaluations in the
    block, over every ``trace_flow`` run in it; None: no limit.

    Why in evaluations and not seconds: the same draw then ends the same way on every machine,
    with or without the JIT, under any load (a wall-clock budget made a slow machine's verdict
    "inconclusive" where a fast one's held). The tracer checks after each accepted step, so a
    run overshoots by at most one step's evaluations."""
    saved = _BUDGET[0]
    if evaluations is None:
        yield
        return
    _BUDGET[0] = start = evaluations if saved is None else min(evaluations, saved)
    try:
        yield
    finally:  # an enclosing budget is charged with what this block spent
        _BUDGET[0] = None if saved is None else saved - (start - _BUDGET[0])


#: Every evaluation charged so far in this process, budget or not (``evaluations_spent``).
_SPENT: list[int] = [0]


def evaluations_spent() -> int:
    """The field and Jacobian evaluations every ``trace_flow`` of this process has charged so
    far, with or without a budget: a counter, so a caller reads it before and after a block
    and takes the difference (``theorems.limits.flow`` records it as the example's cost in
    machine-independent units, what an ``evaluation_budget`` would have to cover)."""
    return _SPENT[0]


def _spend(evaluations: int) -> None:
    """Charge ``evaluations`` to the current budget; raise once it is spent."""
    _SPENT[0] += evaluations
    left = _BUDGET[0]
    if left is None:
        return
    _BUDGET[0] = left - evaluations
    if _BUDGET[0] < 0:
        raise EvaluationBudgetExhausted("the field-evaluation budget is spent")


# A run whose accepted steps stay this short (relative to max(1, ‖p‖)) this many times in a row
# has stalled: LSODA creeps around a finite minimiser with steps of ~1e-8 instead of failing.
STALL_RATIO = 1e-6
STALL_STEPS = 200
#: Outcome.tie_sharing: a tied token below margin 1 − this in the tie-sharing SVM makes the
#: limit differ from ATT-SVM(selected). The oracle certifies its rows to 1e-7 (models.oracles.svm),
#: so a freed row at 1 − 1e-6 is below 1 by ten times more than any certified row can be.
TIE_MARGIN_TOL = 1e-6


def _log_step_time(h: float, lgn0: float, lgn1: float) -> float:
    """log ∫ ds/‖∇L‖ over a step of arc length h, with log‖∇L‖ linear from lgn0 to lgn1.

    = log h − lgn0 + log((1 − e^{−δ})/δ), δ = lgn1 − lgn0: the log-mean rule, exact on the
    asymptotic ray where log‖∇L‖ falls linearly in s. A midpoint rule is off by about e^{|δ|/2}
    when ‖∇L‖ changes by orders of magnitude in one step, which is common far out.
    """
    d = lgn1 - lgn0
    if d == 0.0:
        factor = 0.0
    elif d > 0:
        factor = math.log(-math.expm1(-d)) - math.log(d)
    else:
        factor = -d + math.log(-math.expm1(d)) - math.log(-d)
    return math.log(h) - lgn0 + factor


def _logaddexp(a: float, b: float) -> float:
    """log(e^a + e^b) on floats (np.logaddexp costs a µs of dispatch per call)."""
    if a < b:
        a, b = b, a
    return a if b == -math.inf else a + math.log1p(math.exp(b - a))


class _Coordinates:
    """Where the tracer integrates: p itself, or z with p = p⊥ + B z when the key
    differences span only r ≤ d/2 dimensions (B: their orthonormal basis, p⊥: the start's
    component outside it, which the flow never changes since ∇L ∈ span B).

    Why: the `<cls>` flows of 2505.17282 have d = 64–256 but a handful of distinct tokens,
    so r ≈ 10. The stiff integrator's Jacobian costs r + 1 field evaluations and its linear
    algebra O(r³) instead of d + 1 and O(d³), and every field evaluation O(n·T·r) instead of
    O(n·T·d) (the reduced keys Bᵀk_it give the same logit differences: the softmax of each
    input is unchanged by the per-input constant k_i0ᵀp⊥). Otherwise nothing changes.
    """

    def __init__(self, problem: PromptProblem, p: np.ndarray):
        basis = problem.difference_span
        # Only where the span is at most half of ℝ^d: LSODA controls the error per coordinate,
        # and in the rotated basis that costs more steps (measured: a benchmark instance with
        # r = 12, d = 15 took 307 steps instead of 188), which a small r repays and a large
        # one does not.
        self.basis = basis if 0 < basis.shape[1] <= problem.dim // 2 else None
        if self.basis is None:
            self.field_problem, self.offset, self.y0 = problem, None, p
        else:
            reduced_keys = torch.from_numpy(problem.keys.detach().numpy() @ self.basis)
            self.field_problem = PromptProblem(
                reduced_keys, problem.scores, problem.loss, problem.weights
            )
            self.y0 = self.basis.T @ p
            self.offset = p - self.basis @ self.y0

    def to_p(self, y: np.ndarray) -> np.ndarray:
        return y.copy() if self.basis is None else self.offset + self.basis @ y

    def field(self, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
        """(field in y, field in p, log‖∇L‖) at y (a contiguous float64 vector, as the
        integrator's)."""
        u, lgn = self.field_problem.flow_field_fn(y)
        return u, (u if self.basis is None else self.basis @ u), lgn


def trace_flow(
    problem: PromptProblem,
    p0=None,
    *,
    max_norm: float = 1e6,
    max_arc: float = 1e12,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    max_steps: int = 20_000,
    record_every: int = 1,
    stop_when=None,
) -> Trajectory:
    """Follow gradient flow in arc length from p0 until ‖p‖ ≥ max_norm (or s ≥ max_arc).

    The arc-length flow is stiff: off the asymptotic ray p ≈ λp̂ + ρ*, the offset ρ relaxes at a
    rate ~‖k_it − k_iα‖² that does not fade as ‖p‖ grows, so an explicit scheme is held to
    steps of ~0.3 forever (measured: ‖p‖ = 1e3 took 3,000 Runge–Kutta steps in 14-D). LSODA
    switches to a BDF method once it detects stiffness, and its steps then grow with ‖p‖:
    ‖p‖ = 1e4 costs a few hundred field evaluations. Error control is atol + rtol·|p_j| per
    coordinate: the direction needs relative accuracy only, so the allowed error grows with p.

    ``stop_when`` is an optional callable (p, u, log‖∇L‖) → reason | None checked after every
    accepted step, with u = −∇L/‖∇L‖ at p (already computed: the check costs no evaluation).
    Stops are named: "reached max_norm", "reached max_arc", "stationary point …",
    "integrator stalled …" (at a finite minimiser the arc-length field flips and the steps
    collapse: STALL_STEPS steps in a row shorter than STALL_RATIO·max(1, ‖p‖) end the run),
    "step budget", or the reason returned by ``stop_when``. Gradient-flow time is tracked in
    log space (dt = ds/‖∇L‖) and returned in ``extra["log_time"]``.
    """
    t0 = time.perf_counter()
    p = _start(problem, p0)
    rec = _Recorder(problem, record_every)
    # evals: every field evaluation, the tracer's own reading after each step included;
    # integrated: the integrator's alone (right-hand sides and Jacobians), what a loop around
    # the same steps could not do without (benchmarks/test_equal_accuracy.py's floor)
    evals, integrated, jacobians = [1], [0], [0]
    coords = _Coordinates(problem, p)
    field_problem = coords.field_problem
    flow_field = field_problem.flow_field_fn

    def rhs(_s, y):  # LSODA hands over its y as a contiguous float64 vector
        evals[0] += 1
        integrated[0] += 1
        return flow_field(y)[0]

    def jac(_s, y):
        # in closed form: one field evaluation and O(n·T·d²) (kernels.field_jacobian); the
        # differences it falls back on where that cannot be formed are not counted apart
        evals[0] += 1
        integrated[0] += 1
        jacobians[0] += 1
        return field_problem.flow_jacobian_np(y)

    if field_problem.loss.kernel_code is None:  # no compiled Jacobian for this loss
        jac = None  # noqa: F811 (LSODA differences rhs itself)

    _, _, lgn = coords.field(coords.y0)
    rec.add(p, 0.0, lgn, force=True)
    stop, s, log_time, steps, short = "step budget", 0.0, -math.inf, 0, 0
    notes: list[str] = []
    if lgn == -math.inf:
        stop = "stationary point (gradient exactly zero)"
    else:
        solver = LSODA(rhs, 0.0, coords.y0, max_arc, rtol=rtol, atol=atol, jac=jac)
        # LSODA warns (e.g. "repeated convergence failures") near ridges and finite
        # minimisers: keep what it said with the run instead of printing it. One recording
        # context for the whole loop (entering one costs ~4 µs, a tenth of a step); what is
        # recorded while the solver steps is its own, anything else is passed on afterwards.
        own: list = []
        charged = 0  # evaluations charged to an ``evaluation_budget`` so far
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            while steps < max_steps:
                before = len(caught)
                message = solver.step()
                own.extend(caught[before:])
                steps += 1
                if solver.status == "failed":
                    stop = f"integrator stalled ({message}): a finite stationary point?"
                    break
                y_new, s_new = solver.y, float(solver.t)
                p_new = coords.to_p(y_new)
                norm = math.sqrt(float(p_new @ p_new))
                # a finite norm has finite entries (one test, not a ufunc and a reduction)
                if not math.isfinite(norm) and not np.isfinite(y_new).all():
                    stop = "non-finite iterate"  # never expected; reported rather than returned
                    failures.report(failures.NUMERICS, "non-finite iterate", f"after {steps} steps")
                    break
                _, u_new, lgn_new = coords.field(y_new)
                evals[0] += 1
                _spend(evals[0] - charged)
                charged = evals[0]
                if lgn_new > -math.inf:
                    log_time = _logaddexp(log_time, _log_step_time(s_new - s, lgn, lgn_new))
                short = short + 1 if s_new - s < STALL_RATIO * max(1.0, norm) else 0
                p, s, lgn = p_new, s_new, lgn_new
                rec.add(p, s, lgn, k=steps)
                if lgn == -math.inf:
                    stop = "stationary point (gradient exactly zero)"
                elif short >= STALL_STEPS:
                    stop = (
                        f"integrator stalled ({STALL_STEPS} steps shorter than "
                        f"{STALL_RATIO:g}·‖p‖ at ‖p‖={norm:.3g}): a finite stationary point?"
                    )
                elif norm >= max_norm:
                    stop = "reached max_norm"
                elif solver.status == "finished":
                    stop = "reached max_arc"
                elif stop_when is not None:
                    stop = stop_when(p, u_new, lgn) or stop
                if stop != "step budget":
                    break
        own_ids = {id(w) for w in own}
        for w in caught:
            if id(w) in own_ids:
                if str(w.message) not in notes:
                    notes.append(str(w.message))
            else:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    rec.add(p, s, lgn, force=True)
    return rec.build(
        stop,
        evals[0],
        t0,
        log_time=float(log_time),
        steps=steps,
        jacobians=jacobians[0],
        integrator_evals=integrated[0],
        integrator_warnings=notes,
    )


@dataclass
class Outcome:
    """What a directional-convergence run established.

    status: "converged" (1 − cos to the SVM of the selected tokens ≤ target), "inconclusive"
    (``reason`` says why), or "infeasible" (the selected tokens' ATT-SVM has no solution).
    """

    status: str
    reason: str
    p: Tensor
    selected: np.ndarray
    one_minus_cos: float
    svm: object  # models.oracles.svm.SVMSolution
    trajectory: Trajectory
    max_other_prob: float  # largest softmax mass on a non-selected token
    #: wall time of the whole decision: tracing, every SVM solve, the final certificate
    #: (``trajectory.seconds`` is the tracing alone)
    seconds: float = 0.0
    #: (n, T) mask of the tokens that share the selected one's mass for ever: tied exactly in
    #: score with it (``models.oracles.svm.tied_tokens``) or its twins (the very same key);
    #: ``svm`` is then the sharing SVM, which has no row for them. None when there are none.
    tied: np.ndarray | None = None
    #: 1 − cos(−∇L, p^mm) once the offset from the ray has relaxed to its certified
    #: equilibrium (``models.flows.offset``), where the heading at p itself did not pass; None when
    #: that was not needed or not possible.
    relaxed_heading: float | None = None

    @property
    def converged(self) -> bool:
        return self.status == "converged"

    def tied_margins(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(inputs, tokens, margins): each tied token's margin (k_iα_i − k_it)ᵀx in the SVM
        solution x (empty when nothing ties or the SVM has no solution)."""
        if self.tied is None or not self.svm.ok:
            return np.zeros(0, int), np.zeros(0, int), np.zeros(0)
        keys = self.trajectory.problem._np[0]
        i, t = np.nonzero(self.tied)
        return i, t, (keys[i, self.selected[i]] - keys[i, t]) @ self.svm.x

    @property
    def tie_sharing(self) -> bool:
        """Whether the limit is the tie-sharing SVM and not ATT-SVM(selected): some tied token
        is at margin < 1 from the selected one in ``svm.x`` (the tie-sharing SVM has no row for
        it), so ATT-SVM(selected), which has one, has another solution."""
        margins = self.tied_margins()[2]
        return bool(margins.size and margins.min() < 1.0 - TIE_MARGIN_TOL)


def twin_tokens(keys: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """(n, T) mask of the twins of the selection: the tokens t ≠ sel_i whose key equals
    k_{i,sel_i} exactly (−0.0 = 0.0). A twin has the selected token's logit for every p, so it
    holds exactly the selected token's softmax mass for ever and no direction separates the
    two: the flow's limit treats them as one token (``converge``)."""
    sel = np.asarray(sel)
    rows = np.arange(len(sel))
    same = (keys == keys[rows, sel][:, None]).all(-1)
    same[rows, sel] = False
    return same


def sharing_tokens(keys: np.ndarray, scores: np.ndarray, sel: np.ndarray) -> np.ndarray:
    """(n, T) mask of the tokens that share the selected token's mass for ever: its twins
    (``twin_tokens``) and the tokens whose score equals, exactly, the mean score of the
    selected token's twin group (itself and its twins). The group has one logit for every p
    and splits its mass equally, so against any other token t it acts as one token of the
    group's mean score: the flow's force between t and the group is ∝ γ_t − mean, and only an
    exact tie with the mean leaves the split to the finite part (without twins, the mean is
    γ_iα_i itself and this is ``models.oracles.svm.tied_tokens``). Means are compared in exact
    rationals: a float mean of three scores is rounded, and a tie is a tie or it is not."""
    from models.oracles.svm import tied_tokens  # the oracle's module, only needed here

    sel = np.asarray(sel)
    twins = twin_tokens(keys, sel)
    tied = tied_tokens(scores, sel)
    for i in np.nonzero(twins.any(-1))[0]:
        group = twins[i].copy()
        group[sel[i]] = True
        mean = sum(map(Fraction, scores[i, group].tolist())) / int(group.sum())
        tied[i] = [Fraction(g) == mean for g in scores[i].tolist()]
        tied[i, sel[i]] = False
    return tied | twins


def converge(
    problem: PromptProblem,
    p0=None,
    *,
    target: float = 1e-6,
    max_norm: float = 1e8,
    select_tol: float = 1e-6,
    rtol: float = 1e-5,
    persist: float = 10.0,
    relax: bool = True,
    **trace_kwargs,
) -> Outcome:
    """Trace gradient flow from p0 until its direction matches the ATT-SVM of what it selects.

    After each accepted step, once every input's top logit leads the others by log(T/select_tol)
    (each non-selected token then has softmax mass ≤ select_tol), the selection α̂ is read,
    ATT-SVM(α̂) is solved (once per distinct α̂, cached) and the trace stops as soon as
    1 − cos(p, p^mm(α̂)) ≤ target and the flow itself heads along p^mm(α̂) (1 − cos of −∇L(p)
    with p^mm(α̂) ≤ target; on the asymptotic ray the flow direction tends to p̂^mm faster than
    p does). The second test keeps a path that merely passes through an aligned point, or a
    stationary point that happens to lie on the ray, from counting as converged. Both must then
    hold, for the same selection, at every step while ‖p‖ grows by the factor ``persist``: a
    path can pass within 1e-6 of an unstable ray (the SVM direction of a selection that is not
    locally optimal) and leave it later. Otherwise the trace goes on to max_norm; the outcome
    says what was reached.

    Far out (‖p‖ ≳ 1e6) the tracer cannot resolve the offset of p from the ray, and the
    heading at p fails though the flow converges; there the heading is also accepted at p with
    its offset relaxed to its certified equilibrium (``models.flows.offset``), in the stopping rule
    and in the final decision. ``relax=False`` turns that off (the engine as it was: a
    baseline for benchmarks/test_offset_relaxed.py).
    """
    from models.oracles.svm import att_svm  # the oracle is only needed here

    t0 = time.perf_counter()
    keys = problem._np[0]  # the contiguous float64 copy the kernels read
    keys_t = problem.keys_by_coordinate
    top = np.empty(problem.n, dtype=np.int64)  # the selection, written by kernels.selection
    cache: dict[bytes, tuple] = {}  # selection → (SVMSolution, unit direction or None)
    lead = math.log(problem.T / select_tol)

    scores = problem.scores.numpy()

    def svm_for(sel: np.ndarray):
        """The SVM the flow heads for when it selects ``sel``: ATT-SVM(sel), or the sharing
        SVM without the rows of the tokens that share the selected token's mass for ever:
        those tied with it exactly in score (the flow's force between them vanishes with
        their score gap) and its twins (the very same key: the same logit for every p, so no
        direction separates them, whatever their scores; together they act as one token)."""
        key = sel.tobytes()
        if key not in cache:
            tied = sharing_tokens(keys, scores, sel)
            tied = tied if tied.any() else None
            sol = att_svm(problem.keys, sel, free=tied)
            unit = sol.x / np.linalg.norm(sol.x) if sol.ok and sol.norm > 0 else None
            cache[key] = (sol, unit, tied)
        return cache[key]

    def heading(u: np.ndarray, lgn: float, unit: np.ndarray) -> float:
        """1 − cos(−∇L(p), p^mm) from the flow direction u at p; 1 at a stationary point."""
        return 1.0 if lgn == -math.inf else 0.5 * float(np.sum((u - unit) ** 2))

    first_aligned: dict = {}  # selection → ‖p‖ where the alignment run began
    #: selection → (‖p‖ of the last relaxed-heading test, whether it passed)
    relaxed_tries: dict[bytes, tuple[float, bool]] = {}

    def relaxed_passes(p: np.ndarray, norm: float) -> bool:
        """The heading at p's relaxed offset (``_relaxed``) passes: tested again each time ‖p‖
        has doubled since the last test of this selection (a Newton solve costs ~1 ms; the
        tenfold persistence then spans at least three tests)."""
        key = top.tobytes()
        last = relaxed_tries.get(key)
        if last is None or norm >= 2.0 * last[0]:
            sol, _, tied = svm_for(top)
            passed = False
            if tied is None:
                relaxed = _relaxed(problem, top.copy(), sol, p)
                passed = relaxed is not None and relaxed[0] <= target
            last = relaxed_tries[key] = (norm, passed)
        return last[1]

    def reached(p: np.ndarray, u: np.ndarray, lgn: float):
        """Called after every accepted step: compiled arithmetic only (this runs at every step
        of every trace), the SVM solved once per selection, and the relaxed offset's Newton
        solve once per doubling of ‖p‖ where the heading at p fails."""
        sel, norm = None, None
        # p and the flow must both point along the SVM direction of what p selects: the flow
        # at p itself, or, far out where the tracer cannot resolve the offset from the ray,
        # at p with its offset relaxed to its certified equilibrium (models.flows.offset).
        if kernels.selection(keys, keys_t, p, top, lead) >= lead:  # +inf when T = 1
            _, unit, _ = svm_for(top)
            if unit is not None and lgn > -math.inf:
                norm, off_p, off_u = kernels.alignment(p, u, unit)
                if off_p <= target and (off_u <= target or (relax and relaxed_passes(p, norm))):
                    sel = top.tobytes()
        if sel is None:
            first_aligned.clear()
            return None
        start = first_aligned.setdefault(sel, norm)
        if len(first_aligned) > 1:  # the selection changed during the run: start again
            first_aligned.clear()
            first_aligned[sel] = start = norm
        if norm >= persist * start:
            return "direction reached the SVM of the selection and stayed"
        return None

    traj = trace_flow(problem, p0, max_norm=max_norm, stop_when=reached, rtol=rtol, **trace_kwargs)
    p = traj.final
    sel = problem.selected(p).numpy()
    svm, unit, tied = svm_for(sel)
    omc = one_minus_cos(p, torch.as_tensor(svm.x)) if svm.ok else 1.0
    flow_omc = heading(*problem.flow_field_np(p.numpy()), unit) if unit is not None else 1.0
    # In numpy: torch's softmax kernel wakes its intra-op thread pool even on these tiny
    # tensors, which cost milliseconds per call on a busy 2-core machine (measured: 5 ms).
    logits = keys @ p.numpy()
    z = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    probs[np.arange(problem.n), sel] = 0.0
    probs[twin_tokens(keys, sel)] = 0.0  # a twin holds exactly the selected token's mass, for ever
    max_other = float(probs.max()) if problem.T > 1 else 0.0
    relaxed = None  # (1 − cos at the relaxed offset, why), where that test was needed
    ended = f"{traj.stop} at ‖p‖={float(torch.linalg.vector_norm(p)):.3g}, 1−cos={omc:.2e}"
    if svm.status == "infeasible":
        status, reason = "infeasible", f"ATT-SVM of the selected tokens is infeasible ({traj.stop})"
    elif not svm.ok:
        status, reason = "inconclusive", f"SVM oracle: {svm.status} ({svm.reason})"
    elif max_other > select_tol:
        status = "inconclusive"
        reason = f"ambiguous selection: a non-selected token keeps softmax mass {max_other:.2e}"
    elif omc <= target and flow_omc <= target:
        status, reason = "converged", traj.stop
    elif relax and omc <= target and tied is None and (relaxed := _relaxed(problem, sel, svm, p)):
        relaxed_omc, why = relaxed
        if relaxed_omc <= target:
            status = "converged"
            reason = (
                f"{ended}; flow heading 1−cos={flow_omc:.2e} at p, {relaxed_omc:.2e} once the "
                f"offset from the ray relaxes to its equilibrium ({why})"
            )
        else:
            status = "inconclusive"
            reason = (
                f"{ended}, flow heading 1−cos={flow_omc:.2e}, {relaxed_omc:.2e} at the relaxed "
                "offset"
            )
    else:
        status = "inconclusive"
        reason = f"{ended}, flow heading 1−cos={flow_omc:.2e}"
    if status == "inconclusive":  # a flow left undecided is never evidence either way
        failures.report(failures.GRADIENT_FLOW, "undecided", reason)
    seconds = time.perf_counter() - t0
    relaxed_omc = relaxed[0] if relaxed is not None else None
    return Outcome(status, reason, p, sel, omc, svm, traj, max_other, seconds, tied, relaxed_omc)


def _relaxed(problem: PromptProblem, sel: np.ndarray, svm, p) -> tuple | None:
    """(1 − cos of the flow at p with its offset relaxed, what certified the offset), or None
    where the offset has no certified equilibrium (``models.flows.offset``: an unstable ray, a
    support token without pull, Newton not converged).

    Why: far out (‖p‖ ≳ 1e6) the heading test needs the offset ρ of p from the ray to ~1e-5
    while the ODE solver controls p to rtol·‖p‖; the offset's equilibrium is a strictly convex
    problem instead (docs/performance.md, "Limits found")."""
    if not svm.ok or not svm.norm > 0:
        return None
    x = np.asarray(svm.x, dtype=np.float64)
    q = p.detach().cpu().numpy() if isinstance(p, Tensor) else np.asarray(p, dtype=np.float64)
    eq = equilibrium(problem, sel, x, float(q @ x) / float(np.linalg.norm(x)))
    if not eq.ok:
        return None
    _, omc = relaxed_heading(problem, eq, x, q)
    return omc, f"{eq.reason}, {eq.steps} Newton steps, ‖∇‖ {eq.grad_norm:.1e}"


@dataclass
class FiniteMinimiser:
    """A strict local minimiser of L near the point where a run ended (``finite_minimiser``).

    p: the minimiser, refined by Newton's method; distance: ‖p_end − p‖; grad_norm: ‖∇L(p)‖
    (the engine's log-space gradient on the key span); min_eig / max_eig: the extreme
    eigenvalues of ∇²L(p) on the span of the key differences (the only directions L depends
    on); loss: L(p).
    """

    p: Tensor
    distance: float
    grad_norm: float
    min_eig: float
    max_eig: float
    loss: float


#: finite_minimiser: ‖p‖ beyond which plain float64 second derivatives are not trusted (the
#: softmax saturates: a tiny Hessian there is underflow, not flatness).
MINIMISER_MAX_NORM = 1e3


def finite_minimiser(
    problem: PromptProblem,
    p,
    *,
    newton_steps: int = 50,
    step_tol: float = 1e-12,
    max_distance: float = 1e-2,
    eig_rel: float = 1e-9,
) -> FiniteMinimiser | None:
    """A certified strict local minimiser of L next to p, or None.

    Used where a run stopped at a finite point (the tracer's "integrator stalled" or
    "stationary point" stops): is that a genuine finite minimiser, which the flow never
    leaves (so ‖p(t)‖ stays bounded), or a failure of the integrator? L depends on p only
    through the span of the key differences (∇L lies in it, spec §1.8), so Newton's method
    runs there, with the engine's log-space gradient and the Hessian by autograd of the plain
    loss (only the Newton direction and the definiteness test read it): from p it iterates
    until the Newton step is below ``step_tol``·max(1, ‖p‖). The point is certified when Newton
    converged, the minimiser lies within ``max_distance``·max(1, ‖p‖) of p, and the Hessian
    on the span is positive definite (smallest eigenvalue > ``eig_rel``·largest): Newton's
    quadratic convergence to a point with a positive-definite Hessian is a strict local
    minimum. A saddle, a degenerate point, a point beyond MINIMISER_MAX_NORM (saturated
    softmax), or Newton failing to converge: None.
    """
    p0 = torch.as_tensor(_start(problem, p))
    scale = max(1.0, float(torch.linalg.vector_norm(p0)))
    if scale > MINIMISER_MAX_NORM:
        return None
    basis = torch.from_numpy(problem.difference_span)
    if basis.shape[1] == 0:
        return None

    def loss_at(z: Tensor) -> Tensor:
        return problem.loss_value(p0 + basis @ z)

    def grad_at(z: Tensor) -> Tensor:
        # the engine's log-space gradient, accurate relative to itself: autograd of the plain
        # loss sums O(1) terms into a gradient of 1e-12 and keeps an absolute noise of ~1e-16,
        # which over a smallest Hessian eigenvalue of 1e-9 holds Newton's steps at ~1e-7,
        # above ``step_tol`` (the ladder's small paper k = 86 minimiser at ‖p‖ = 30)
        u, lgn = problem.flow_field_np((p0 + basis @ z).numpy())
        if lgn == -math.inf:
            return torch.zeros_like(z)
        return basis.T @ torch.from_numpy(-math.exp(lgn) * u)

    z = torch.zeros(basis.shape[1], dtype=p0.dtype)
    converged = False
    for _ in range(newton_steps):
        grad = grad_at(z)
        hess = torch.autograd.functional.hessian(loss_at, z)
        try:
            step = torch.linalg.solve(hess, grad)
        except RuntimeError:  # singular Hessian: no isolated minimiser to certify
            return None
        if not bool(torch.isfinite(step).all()):
            return None
        z = z - step
        if float(torch.linalg.vector_norm(step)) <= step_tol * scale:
            converged = True
            break
    if not converged:
        return None
    loss = loss_at(z)
    grad = grad_at(z)
    eigs = torch.linalg.eigvalsh(torch.autograd.functional.hessian(loss_at, z))
    lo, hi = float(eigs[0]), float(eigs[-1])
    distance = float(torch.linalg.vector_norm(basis @ z))
    if distance > max_distance * scale or not hi > 0 or lo <= eig_rel * hi:
        return None
    return FiniteMinimiser(
        p=(p0 + basis @ z).detach(),
        distance=distance,
        grad_norm=float(torch.linalg.vector_norm(grad)),
        min_eig=lo,
        max_eig=hi,
        loss=float(loss.detach()),
    )
