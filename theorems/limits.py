"""Where gradient flow goes, for the claims: `models.flows.limits` (the certified engine `check`
uses too) with the claims' bookkeeping. A claim about the limit of gradient flow asserts the paper's
conclusion about it:

    lim = flow(inst.problem, inst.p0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha)

``flow`` returns a certified `Limit` ("converged" or "bounded"); what the engine cannot decide
never reaches the claim: the example ends inconclusive with the engine's reason. The tests a
`Limit` makes are recorded as the claim's slack.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator

import torch

from models.flows import limits as _limits
from models.flows.dynamics import (
    EvaluationBudgetExhausted,
    Outcome,
    evaluation_budget,
    evaluations_spent,
)
from models.flows.limits import (  # noqa: F401 (re-exported: the claims' vocabulary)
    CONFIRM_FACTOR,
    DIRECTION_TOL,
    LOSS_GAP_TOL,
    SELECT_TOL,
    bounded_message,
    limit_name,
    settle,
    tie_sharing_message,
)
from models.problems.attention import PromptProblem
from theorems.framework import evidence


class Limit(_limits.Limit):
    """`models.flows.limits.Limit`, recording each test's observed/bound pair as the claim's
    slack."""

    def slack(self, name: str, observed: float, bound: float, derivation: str) -> None:
        evidence.slack(name, observed, bound, derivation=derivation)


def record_outcome(out: Outcome, transient: int) -> None:
    evidence.metric("transient passes discarded", transient)
    evidence.metric("‖p‖ at convergence", float(torch.linalg.vector_norm(out.p)))
    evidence.metric("gradient evaluations", out.trajectory.evals)


def follow(problem: PromptProblem, p0) -> Limit:
    """`models.flows.limits.follow`, as this module's `Limit`."""
    return _limits.follow(problem, p0, cls=Limit)


class Deadline(BaseException):
    """Raised when a ``deadline`` runs out. A BaseException, so that no ``except Exception``
    on the way (the integrator's callback, the oracle's fallbacks) turns it into an ordinary
    failure."""


def _expired(signum, frame):
    raise Deadline


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """Raise ``Deadline`` in the block once ``seconds`` of wall time have passed (None: no
    limit). By SIGALRM, so on the main thread only (pytest's, and each xdist worker's); the
    alarm fires again every second, so a raise that something swallowed comes back."""
    if seconds is None:
        yield
        return
    old = signal.signal(signal.SIGALRM, _expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def flow(
    problem: PromptProblem,
    p0=None,
    *,
    budget_s: float | None = None,
    budget_evals: int | None = None,
) -> Limit:
    """Where gradient flow from ``p0`` goes: a certified `Limit` ("converged", "shared" or
    "bounded").
    A flow the engine cannot decide ends the example as inconclusive, with its reason; so
    does one it has not decided within ``budget_evals`` field evaluations (NTP-FLOW-LIMIT-
    MEDIUM and the large rung's nightly flow claims: a draw there can take the engine many
    minutes, and a run must end), or within ``budget_s`` seconds (no claim uses it: a
    wall-clock budget ends the same draw differently on a slower or busier machine, which
    made MM-THM-L-RANDOM-LARGE's verdict depend on the load). Records what the decision cost
    in evaluations (every run: transient passes, restarts, the confirming trace), the unit
    such a budget is set in."""
    start = evaluations_spent()
    try:
        with deadline(budget_s), evaluation_budget(budget_evals):
            lim = follow(problem, p0)
    except Deadline:
        evidence.inconclusive(f"budget: the engine did not decide within {budget_s:g} s")
    except EvaluationBudgetExhausted:
        evidence.inconclusive(
            f"budget: the engine did not decide within {budget_evals} field evaluations"
        )
    record_outcome(lim.outcome, lim.transient)
    evidence.metric("field evaluations, every run", evaluations_spent() - start)
    if lim.kind == "undecided":
        evidence.inconclusive(lim.reason)
    return lim


def conclude(problem: PromptProblem, p0, alpha=None, what: str = "") -> Outcome:
    """``flow``, asserting ‖p(t)‖ → ∞ and, when ``alpha`` is given, p(t)/‖p(t)‖ → p^mm(α)
    with the loss at its floor where α is the top-score selection (``check_limit``)."""
    lim = flow(problem, p0)
    if lim.kind == "bounded":
        raise AssertionError(bounded_message(lim))
    if alpha is not None and lim.kind == "shared":  # ‖p‖ → ∞, but not to one token per input
        raise AssertionError(lim.why_not(alpha, what))
    if alpha is not None:
        check_limit(problem, lim.outcome, alpha, what)
    return lim.outcome


def check_limit(problem: PromptProblem, out: Outcome, alpha, what: str) -> None:
    """Assert that a settled outcome is directional convergence to p^mm(alpha), with the
    softmax on alpha → 1 and the loss at its floor (1/n)Σℓ(γ_iα_i) where α is the top-score
    selection."""
    lim = Limit("converged", out, 0)
    assert lim.converged_to(alpha), lim.why_not(alpha, what)
    gap = lim.loss_gap(alpha)
    if gap is not None:
        assert gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g} > {LOSS_GAP_TOL:g}"
