"""Training dynamics on p: plain GD, normalized GD, and a gradient-flow path tracer.

Gradient flow ṗ = −∇L(p), plain GD with small η and normalized GD all follow one curve; they
differ only in how fast they move along it. The tracer follows that curve in arc length s,
    dp/ds = −∇L(p)/‖∇L(p)‖,
with an adaptive embedded Runge–Kutta pair (Bogacki–Shampine 3(2)). The direction comes from
the log-space gradient, so it stays exact at ‖p‖ = 1e8, where ∇L itself is 1e-(millions). Far
out the path becomes a straight ray p ≈ λ·p̂ + ρ*: the field stops changing along it, the local
error vanishes, and steps grow geometrically, so reaching ‖p‖ = 1e6 costs a few dozen steps.
Normalized GD with step η is this curve's explicit Euler scheme with h = η.

Every run returns a ``Trajectory`` and, for ``converge``, an ``Outcome``: converged (with the
achieved 1 − cos to the SVM of the tokens it selects), inconclusive (with the reason) or
infeasible. Runs never return NaN and never stop silently: each stop has a named reason.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from models.attention import PromptProblem, as_float_tensor, one_minus_cos

Tensor = torch.Tensor


@dataclass
class Trajectory:
    """Recorded points of a run. ``s`` is arc length (flow, NGD) or the step index (GD)."""

    ps: Tensor  # (k, d)
    s: np.ndarray  # (k,)
    losses: np.ndarray  # (k,)
    log_grad_norms: np.ndarray  # (k,) log‖∇L‖ at each recorded point
    stop: str  # why the run ended
    evals: int  # gradient evaluations
    seconds: float
    extra: dict = field(default_factory=dict)

    @property
    def final(self) -> Tensor:
        return self.ps[-1]

    @property
    def norms(self) -> np.ndarray:
        return torch.linalg.vector_norm(self.ps, dim=-1).numpy()


class _Recorder:
    def __init__(self, problem: PromptProblem, every: int):
        self.problem, self.every = problem, max(1, int(every))
        self.ps, self.s, self.lgn = [], [], []

    def add(self, p: np.ndarray, s: float, log_grad_norm: float, force=False, k: int = 0):
        if force or k % self.every == 0:
            self.ps.append(p.copy())
            self.s.append(s)
            self.lgn.append(log_grad_norm)

    def build(self, stop: str, evals: int, t0: float, **extra) -> Trajectory:
        ps = torch.from_numpy(np.stack(self.ps))
        return Trajectory(
            ps=ps,
            s=np.asarray(self.s),
            losses=self.problem.loss_path(ps).numpy(),
            log_grad_norms=np.asarray(self.lgn),
            stop=stop,
            evals=evals,
            seconds=time.perf_counter() - t0,
            extra=extra,
        )


def _start(problem: PromptProblem, p0) -> np.ndarray:
    """The initial point as a fresh float64 numpy vector (the engine works in numpy)."""
    if p0 is None:
        return np.zeros(problem.dim)
    p = as_float_tensor(p0, "p0", 1).detach().numpy().copy()
    if p.shape[0] != problem.dim:
        raise ValueError(f"p0: expected dimension {problem.dim}, got {p.shape[0]}")
    return p


def _log_norm(log_scale: float, vec: np.ndarray) -> float:
    return log_scale if log_scale == -math.inf else log_scale + math.log(float(np.linalg.norm(vec)))


def gd(problem: PromptProblem, p0=None, *, eta: float, steps: int, record_every: int = 1):
    """Plain gradient descent p ← p − η∇L(p) with a fixed step (η ≤ 1/L_p for the theorems)."""
    t0 = time.perf_counter()
    p = _start(problem, p0)
    rec = _Recorder(problem, record_every)
    ls, vec = problem.gradient_log_np(p)
    rec.add(p, 0, _log_norm(ls, vec), force=True)
    stop = "step budget"
    for k in range(1, steps + 1):
        if ls == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            break
        # The update is the gradient's true size: it underflows when ∇L does, as real GD does.
        p = p - eta * math.exp(min(ls, 700.0)) * vec
        ls, vec = problem.gradient_log_np(p)
        rec.add(p, k, _log_norm(ls, vec), force=(k == steps), k=k)
    return rec.build(stop, steps + 1, t0)


def ngd(problem: PromptProblem, p0=None, *, lr: float = 0.1, steps: int = 1000, record_every=1):
    """Normalized GD p ← p − lr·∇L/‖∇L‖, the protocol of the official notebooks, but with the
    direction from log space and no ``+ eps`` (which freezes the iterate once ‖∇L‖ ≪ eps)."""
    t0 = time.perf_counter()
    p = _start(problem, p0)
    rec = _Recorder(problem, record_every)
    u, lgn = _field(problem, p)
    rec.add(p, 0.0, lgn, force=True)
    stop = "step budget"
    for k in range(1, steps + 1):
        if lgn == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            break
        p = p + lr * u
        u, lgn = _field(problem, p)
        rec.add(p, lr * k, lgn, force=(k == steps), k=k)
    return rec.build(stop, steps + 1, t0)


# Bogacki–Shampine 3(2) tableau (FSAL): third-order solution, second-order error estimate.
_BS_B3 = (2 / 9, 1 / 3, 4 / 9, 0.0)
_BS_B2 = (7 / 24, 1 / 4, 1 / 3, 1 / 8)


def _field(problem: PromptProblem, p: np.ndarray) -> tuple[np.ndarray, float]:
    """Unit flow direction −∇L/‖∇L‖ at p and log‖∇L‖ (−inf at a stationary point)."""
    ls, vec = problem.gradient_log_np(p)
    if ls == -math.inf:
        return np.zeros_like(p), ls
    nv = float(np.linalg.norm(vec))
    return -vec / nv, ls + math.log(nv)


def trace_flow(
    problem: PromptProblem,
    p0=None,
    *,
    max_norm: float = 1e6,
    max_arc: float = math.inf,
    rtol: float = 1e-7,
    atol: float = 1e-9,
    h0: float = 1e-2,
    max_growth: float = 5.0,
    max_steps: int = 20_000,
    record_every: int = 1,
    stop_when=None,
) -> Trajectory:
    """Follow gradient flow in arc length from p0 until ‖p‖ ≥ max_norm (or s ≥ max_arc).

    The local error of a step is kept below atol + rtol·‖p‖: what the direction of p needs is
    relative accuracy, so the allowed error grows with ‖p‖, and so do the steps. ``stop_when``
    is an optional callable (p, chord) → reason | None checked after every accepted step.
    Stops are named: "reached max_norm", "reached max_arc", "stationary point …",
    "step size underflow …" (a finite minimiser, where the arc-length field flips), "step budget",
    or the reason returned by ``stop_when``. Gradient-flow time is tracked in log space
    (dt = ds/‖∇L‖) and returned in ``extra["log_time"]``.
    """
    t0 = time.perf_counter()
    p = _start(problem, p0)
    rec = _Recorder(problem, record_every)
    k1, lgn = _field(problem, p)
    evals = 1
    rec.add(p, 0.0, lgn, force=True)
    s, h, log_time = 0.0, h0, -math.inf
    stop = "step budget"
    prev = p.copy()
    accepted = 0
    for _ in range(max_steps):
        if lgn == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            break
        norm = float(np.linalg.norm(p))
        if norm >= max_norm:
            stop = "reached max_norm"
            break
        if s >= max_arc:
            stop = "reached max_arc"
            break
        h = min(h, max_arc - s) if math.isfinite(max_arc) else h
        k2, _ = _field(problem, p + 0.5 * h * k1)
        k3, _ = _field(problem, p + 0.75 * h * k2)
        p_new = p + h * (_BS_B3[0] * k1 + _BS_B3[1] * k2 + _BS_B3[2] * k3)
        k4, lgn_new = _field(problem, p_new)
        evals += 3
        err_vec = h * (
            (_BS_B3[0] - _BS_B2[0]) * k1
            + (_BS_B3[1] - _BS_B2[1]) * k2
            + (_BS_B3[2] - _BS_B2[2]) * k3
            - _BS_B2[3] * k4
        )
        err = float(np.linalg.norm(err_vec))
        tol = atol + rtol * max(norm, float(np.linalg.norm(p_new)))
        if not np.isfinite(p_new).all():
            stop = "non-finite iterate"  # never expected; reported rather than returned as NaN
            break
        if err <= tol:
            prev = p
            p, k1, s = p_new, k4, s + h
            if lgn_new > -math.inf:
                log_time = np.logaddexp(log_time, math.log(h) - 0.5 * (lgn + lgn_new))
            lgn = lgn_new
            accepted += 1
            rec.add(p, s, lgn, k=accepted)
            if stop_when is not None:
                reason = stop_when(p, p - prev)
                if reason:
                    stop = reason
                    break
        factor = max_growth if err == 0 else min(max_growth, max(0.2, 0.9 * (tol / err) ** (1 / 3)))
        h *= factor
        if h < 1e-12 * max(1.0, norm):
            stop = "step size underflow (the flow stalls: a finite stationary point)"
            break
    rec.add(p, s, lgn, force=True)
    return rec.build(stop, evals, t0, log_time=log_time, accepted=accepted)


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
    svm: object  # models.svm.SVMSolution
    trajectory: Trajectory
    max_other_prob: float  # largest softmax mass on a non-selected token

    @property
    def converged(self) -> bool:
        return self.status == "converged"


def converge(
    problem: PromptProblem,
    p0=None,
    *,
    target: float = 1e-6,
    max_norm: float = 1e8,
    select_tol: float = 1e-6,
    **trace_kwargs,
) -> Outcome:
    """Trace gradient flow from p0 until its direction matches the ATT-SVM of what it selects.

    The stop test is an estimate that needs no SVM: far out p ≈ λp̂ + ρ*, the chord between two
    accepted points is ≈ p̂, and 1 − cos(p, chord) ≈ 1 − cos(p, p̂). Once that estimate is below
    target/10 the selection α̂ (top softmax token per input) is read, ATT-SVM(α̂) is solved and
    the achieved 1 − cos is measured against it; if it still misses the target the trace goes
    on, up to max_norm.
    """
    from models.svm import att_svm  # the oracle is only needed here

    def chord_small(p, chord):
        if float(np.linalg.norm(chord)) == 0.0:
            return None
        return "direction settled" if one_minus_cos(p, chord) <= target / 10 else None

    p_start = _start(problem, p0)
    pieces, p, t_total, evals = [], p_start, 0.0, 0
    svm, sel, omc = None, None, 1.0
    while True:
        traj = trace_flow(problem, p, max_norm=max_norm, stop_when=chord_small, **trace_kwargs)
        pieces.append(traj)
        p, t_total, evals = traj.final, t_total + traj.seconds, evals + traj.evals
        sel = problem.selected(p).numpy()
        svm = att_svm(problem.keys, sel)
        if svm.ok:
            omc = one_minus_cos(p, torch.as_tensor(svm.x))
        if traj.stop != "direction settled" or (svm.ok and omc <= target) or not svm.ok:
            break
    traj = _concat(pieces, t_total, evals)
    probs = problem.softmax(p)
    other = probs.clone()
    other[torch.arange(problem.n), torch.as_tensor(sel)] = 0.0
    max_other = float(other.max()) if problem.T > 1 else 0.0
    if svm.status == "infeasible":
        status, reason = "infeasible", "ATT-SVM of the selected tokens is infeasible"
    elif not svm.ok:
        status, reason = "inconclusive", f"SVM oracle: {svm.status} ({svm.reason})"
    elif max_other > select_tol:
        status = "inconclusive"
        reason = f"ambiguous selection: a non-selected token keeps softmax mass {max_other:.2e}"
    elif omc <= target:
        status, reason = "converged", traj.stop
    else:
        status = "inconclusive"
        reason = f"{traj.stop} at ‖p‖={float(np.linalg.norm(p)):.3g}, 1−cos={omc:.2e}"
    return Outcome(status, reason, p, sel, omc, svm, traj, max_other)


def _concat(pieces: list[Trajectory], seconds: float, evals: int) -> Trajectory:
    if len(pieces) == 1:
        t = pieces[0]
        t.seconds, t.evals = seconds, evals
        return t
    offs, ss = 0.0, []
    for t in pieces:
        ss.append(t.s + offs)
        offs += t.s[-1]
    return Trajectory(
        ps=torch.cat([t.ps for t in pieces]),
        s=np.concatenate(ss),
        losses=np.concatenate([t.losses for t in pieces]),
        log_grad_norms=np.concatenate([t.log_grad_norms for t in pieces]),
        stop=pieces[-1].stop,
        evals=evals,
        seconds=seconds,
        extra={"pieces": len(pieces)},
    )
