"""How long `check` will take on a large instance, estimated before it starts (issue 23).

For the models whose answer is decided by the flow engine (prompt: p; cross: W through its
vectorised prompt problem), the time is the engine's: field evaluations × the cost of one.
The cost of one is measured here, on the instance itself (the median of a few compiled
calls at a point of norm 1 in key space). The count is not known before the flow is traced;
it is taken from the benchmarks: a certified decision (``models.flows.limits.follow``: converge to
1 − cos ≤ 1e-6, then a confirmation over two decades of ‖p‖) made BASE_EVALS field
evaluations plus JACOBIANS Jacobians of r + 1 evaluations' worth each (r: the dimension the
tracer integrates in, taken as min(d, n(T − 1)); the closed-form Jacobian,
``kernels.field_jacobian``, costs O(n·T·r²), about that much at r ≳ 50 and less below), and
the confirmation repeats about as much again.
So the estimate is a typical time, not a bound: a flow with many selection changes or a long
transient takes several times more (the warning says so), and `--timeout` bounds the wait.

Measured against it (`python -m theorems check` on Gaussian prompt instances, this 2-core
machine, 2026-12-04): n = 200, T = 50, d = 50 (10 MB): estimated 7.1 s, took 7.3 s;
n = T = 64, d = 128: estimated 11 s, took 6.1 s. With the linear-space field and the
closed-form Jacobian (third session of that day): estimated 4.4 s, took 5.6 s; estimated 8 s,
took 8.0 s.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
import time

import numpy as np

#: Field evaluations of a certified decision besides its Jacobians (benchmarks/
#: test_cost_curve.py: converge to 1e-9 used 300–2700 at n ≤ 200, T ≤ 64, d ≤ 256).
BASE_EVALS = 3000
#: Jacobians LSODA asks for in such a run (40–80 in the same runs; ~70 at n = 200).
JACOBIANS = 70
#: follow = converge + a confirmation over two decades of ‖p‖: about twice converge.
CONFIRMATION = 2.0
#: Seconds spent timing the field (at least 3 calls).
TIMING_S = 0.05


@dataclasses.dataclass(frozen=True)
class Estimate:
    seconds: float
    eval_seconds: float
    evals: int

    def text(self) -> str:
        per = self.eval_seconds
        unit = f"{per * 1e3:.2g} ms" if per >= 1e-4 else f"{per * 1e6:.2g} µs"
        return (
            f"estimated {_duration(self.seconds)} (one gradient evaluation takes {unit} here, "
            f"a typical certified decision ~{self.evals:,} of them; a long transient can take "
            "several times that)"
        )


def _duration(seconds: float) -> str:
    if seconds < 60:
        return f"~{max(seconds, 0.1):.2g} s"
    if seconds < 3600:
        return f"~{seconds / 60:.2g} min"
    return f"~{seconds / 3600:.2g} h"


def _flow_problem(model: str, fields: dict):
    """The prompt problem the engine will trace for this instance, or None."""
    from models.problems.attention import PromptProblem

    if model == "prompt":
        return PromptProblem.from_data(
            fields["X"], fields["y"], fields["v"], fields.get("W"), fields.get("loss") or "logistic"
        )
    if model == "cross":
        from models.problems.cross import CrossProblem

        problem = CrossProblem(
            fields["X"], fields["Z"], fields["y"], fields["v"], fields.get("loss") or "logistic"
        )
        return problem.prompt
    return None


def check_time(model: str, fields: dict) -> Estimate | None:
    """The estimate for a prompt or cross instance; None for the other models or where the
    fields do not make a problem (then the CLI's own validation speaks)."""
    try:
        problem = _flow_problem(model, fields)
    except (KeyError, TypeError, ValueError, RuntimeError):
        return None
    if problem is None:
        return None
    # the tracer's dimension r: at most the key dimension and the number of key differences
    # (the span itself is an SVD of n·T rows: not worth computing twice for an estimate)
    rank = min(problem.dim, problem.n * (problem.T - 1))
    rng = np.random.default_rng(0)
    p = rng.normal(size=problem.dim)
    p /= max(float(np.linalg.norm(p)), 1e-300)
    problem.flow_field_np(p)  # the first call loads or compiles the kernels
    calls, start = [], time.perf_counter()
    while len(calls) < 3 or time.perf_counter() - start < TIMING_S:
        t0 = time.perf_counter()
        problem.flow_field_np(p)
        calls.append(time.perf_counter() - t0)
    per = statistics.median(calls)
    evals = int(math.ceil(CONFIRMATION * (BASE_EVALS + JACOBIANS * (rank + 1))))
    return Estimate(per * evals, per, evals)
