"""models.flows.limits: the certified Limit that the claims and `check` read, its messages and the
slack it records, against quantities computed here independently (the selection from the
softmax, the loss gap from the engine's log-space formula)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from models.flows.limits import (
    DERIVATIONS,
    DIRECTION_TOL,
    LOSS_GAP_TOL,
    SELECT_TOL,
    Limit,
    bounded_message,
    follow,
    limit_name,
)
from models.problems.attention import PromptProblem, one_minus_cos
from tests.mutmut_aware import per_mutant_scope
from tests.test_dynamics import _tug_of_war, figure2

DTYPE = torch.float64


@dataclasses.dataclass
class Recording(Limit):
    """A Limit that keeps the slack it is told (the claims' subclass records it as evidence)."""

    heard: list[tuple] = dataclasses.field(default_factory=list)

    def slack(self, name, observed, bound, derivation):
        self.heard.append((name, observed, bound, derivation))


@pytest.fixture(scope=per_mutant_scope)
def converged():
    problem = figure2()
    lim = follow(problem, torch.tensor([0.5, 0.0], dtype=DTYPE), cls=Recording)
    assert lim.kind == "converged" and lim.diverges
    return problem, lim


def test_a_converged_limit_is_the_selection_its_end_point_attends_to(converged):
    problem, lim = converged
    out = lim.outcome
    # reported at the confirming point: its 1 − cos is that of the returned p
    assert out.one_minus_cos == one_minus_cos(out.p, out.svm.x)
    probs = problem.softmax(out.p)
    np.testing.assert_array_equal(out.selected, probs.argmax(-1).numpy())
    assert out.selected.tolist() == [0, 0, 0]
    assert lim.describe() == "converged to p^mm([0, 0, 0])"
    assert limit_name(out, "W^mm") == "W^mm([0, 0, 0])"


def test_converged_to_its_selection_records_both_margins_as_slack(converged):
    _, lim = converged
    lim.heard.clear()
    assert lim.converged_to([0, 0, 0])
    (direction, mass) = lim.heard
    assert direction[0] == "1 − cos(p, p^mm(α))" and direction[2] == DIRECTION_TOL
    assert direction[1] == lim.outcome.one_minus_cos <= DIRECTION_TOL
    assert direction[3] == DERIVATIONS["DIRECTION_TOL"]
    assert mass[0] == "max softmax mass off α" and mass[2] == SELECT_TOL
    assert mass[1] == lim.outcome.max_other_prob <= SELECT_TOL
    assert mass[3] == DERIVATIONS["SELECT_TOL"]


def test_another_selection_is_not_reached_and_the_message_says_where_it_went(converged):
    _, lim = converged
    lim.heard.clear()
    assert not lim.converged_to([1, 0, 0])
    assert lim.heard == []  # slack is recorded only against the reached selection
    why = lim.why_not([1, 0, 0])
    assert why.startswith("converged to p^mm([0, 0, 0]) (1 − cos = ")
    assert "not to p^mm([1, 0, 0]); the reached selection is locally optimal" in why


def test_the_loss_gap_at_the_limit_is_below_its_tolerance_and_recorded(converged):
    problem, lim = converged
    lim.heard.clear()
    gap = lim.loss_gap([0, 0, 0])
    expected = math.exp(problem.log_loss_gap(lim.outcome.p, np.array([0, 0, 0])))
    assert gap == expected and 0 <= gap <= LOSS_GAP_TOL
    assert lim.heard == [("L(p) − loss floor", gap, LOSS_GAP_TOL, DERIVATIONS["LOSS_GAP_TOL"])]
    # Token 1 scores 0.5 < 1: no floor of that selection is the top-score one.
    assert lim.loss_gap([1, 0, 0]) is None


def test_a_bounded_limit_says_where_the_flow_stops():
    lim = follow(_tug_of_war(), [2.0, 1.0])
    assert lim.kind == "bounded" and not lim.diverges
    message = bounded_message(lim)
    norm = float(torch.linalg.vector_norm(lim.outcome.p))
    assert message.startswith(f"the flow stops at ‖p‖ = {norm:.4g}, ")
    assert "from a strict local minimiser of L" in message
    assert message.endswith("‖p(t)‖ stays bounded")
    assert lim.describe() == message == lim.why_not([0])
    assert not lim.converged_to(lim.outcome.selected)


def _far_stall():
    """The size ladder's small clustered k = 50 instance (strategies.ladder): n = 3, T = 2,
    d = 1. As p → −∞ inputs 0 and 2 select their worse token and input 1 its better one; the
    pulls e^{−1.334|p|} and e^{−1.337|p|} balance near p = −204.55, where L is within e^{−270}
    of its floor: the tracer stalls there and float64 second derivatives carry no digit."""
    from strategies.ladder import clustered_problem

    return clustered_problem(3, 2, 1, 50)


def test_a_stall_far_out_on_a_line_is_bounded_by_a_certified_trap():
    problem = _far_stall()
    lim = follow(problem, None)
    assert lim.kind == "bounded" and lim.minimiser is None and lim.trap is not None
    trap = lim.trap
    assert trap.lo < trap.end < trap.hi and -205 < trap.lo and trap.hi < -204
    b = torch.from_numpy(problem.difference_span[:, 0])
    assert float(b @ lim.outcome.p) == pytest.approx(trap.end, abs=0.0)
    # the slopes' signs at the ends, independently: the float64 log-space field points inward
    for z, inward in ((trap.lo, 1.0), (trap.hi, -1.0)):
        u, _ = problem.flow_field_np((z * b).numpy())
        assert float(u @ b.numpy()) == pytest.approx(inward)
    message = bounded_message(lim)
    assert "dL/dz < 0 at the lower end and > 0 at the upper" in message
    assert message.endswith("‖p(t)‖ stays bounded") and lim.describe() == message


def test_a_trap_encloses_the_zero_of_the_slope_and_none_exists_without_one():
    """From 30 before the stall the widening intervals reach one that encloses the zero of
    dL/dz near −204.55 (and the start): a flow through −174.55 is trapped too. One input
    with keys 1, 0 and scores 1, 0 (or 0, 1): L falls for ever one way, no interval has
    inward ends.
    A two-dimensional key span: no trap is looked for."""
    from models.flows.limits import certified_slope, line_trap

    problem = _far_stall()
    b = problem.difference_span[:, 0]
    start = -174.55 * b  # b = ±1 in d = 1
    # L rises toward 0 there: the flow moves out, toward the stall
    assert certified_slope(problem, start, b)[0] == float(b[0])
    trap = line_trap(problem, start)
    assert trap is not None and trap.lo < -204.6 and -204.5 < trap.hi
    falling = PromptProblem(
        torch.tensor([[[1.0], [0.0]]], dtype=DTYPE),
        torch.tensor([[1.0, 0.0]], dtype=DTYPE),
        "logistic",
    )
    assert line_trap(falling, np.array([5.0])) is None
    assert certified_slope(falling, np.array([5.0]), np.array([1.0]))[0] == -1
    rising = PromptProblem(falling.keys, falling.scores.flip(-1), "logistic")  # L falls as z → −∞
    assert line_trap(rising, np.array([-5.0])) is None
    assert certified_slope(rising, np.array([-5.0]), np.array([1.0]))[0] == 1
    assert line_trap(figure2(), np.array([1.0, 1.0])) is None


def test_the_high_precision_slope_is_the_field_where_float64_resolves_it():
    """highprec.slope against −e^{lgn}·(u·b) of the log-space field at moderate points."""
    from models.numerics.highprec import slope

    problem = figure2()
    rng = np.random.default_rng(0)
    for _ in range(3):
        p, b = rng.normal(size=2), rng.normal(size=2)
        b /= np.linalg.norm(b)
        u, lgn = problem.flow_field_np(p)
        expected = -math.exp(lgn) * float(u @ b)  # dL/dt = ∇L·b = −‖∇L‖ (u·b)
        sign, log_abs = slope(problem, p, b, 40)
        assert sign == (1 if expected > 0 else -1)
        assert log_abs == pytest.approx(math.log(abs(expected)), rel=1e-12, abs=1e-12)


def test_an_ill_conditioned_minimiser_is_certified_with_the_log_space_gradient():
    """The size ladder's small paper k = 86 instance (n = 2, T = 4, d = 2): the flow stops
    at ‖p‖ ≈ 30 where ‖∇L‖ ≈ 2e-12 and the Hessian's eigenvalues are 2.3e-9 and 1.4e-7.
    Newton on autograd's gradient (absolute noise ~1e-16) stalls at steps of ~1e-8, above
    its 3e-11 tolerance; on the engine's log-space gradient it converges."""
    from models.flows.dynamics import finite_minimiser
    from strategies.ladder import paper_problem

    problem = paper_problem(2, 4, 2, 86)
    lim = follow(problem, None)
    assert lim.kind == "bounded" and lim.minimiser is not None
    m = lim.minimiser
    assert 0 < m.min_eig < 1e-8 and m.max_eig > 1e-8 and m.distance < 1e-3
    assert m.grad_norm < 1e-15  # far below ‖∇L‖ ≈ 2e-12 where the run stopped
    again = finite_minimiser(problem, lim.outcome.p)
    assert again is not None and torch.allclose(again.p, m.p, rtol=0, atol=1e-9)


def test_an_undecided_limit_names_its_reason():
    lim = follow(_tug_of_war(), [2.0, 1.0])
    undecided = Limit("undecided", lim.outcome, lim.transient)
    assert undecided.describe() == f"undecided ({lim.outcome.reason})"
    assert undecided.why_not([0]) == f"undecided ({lim.outcome.reason})"
    assert undecided.reason == lim.outcome.reason


# ------------------------------------------------- theorems.limits: the large rung's budget


def test_a_flow_past_its_budget_is_inconclusive_not_a_verdict(monkeypatch):
    """``flow(..., budget_s=)`` (a wall-clock budget; no claim uses it now) stops an engine run
    that has not decided in time and discards the example as inconclusive, naming the budget;
    the alarm is disarmed and the old SIGALRM handler restored afterwards."""
    import signal
    import time

    from theorems import limits as claim_limits
    from theorems.framework.evidence import InconclusiveExample

    def slow(problem, p0):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 5.0:
            try:
                time.sleep(0.01)
            except Exception:  # noqa: BLE001 - a swallowing except does not stop a Deadline
                pass
        raise AssertionError("not stopped")

    monkeypatch.setattr(claim_limits, "follow", slow)
    before = signal.getsignal(signal.SIGALRM)
    t0 = time.perf_counter()
    with pytest.raises(InconclusiveExample, match="budget: the engine did not decide within 0.2 s"):
        claim_limits.flow(figure2(), None, budget_s=0.2)
    assert time.perf_counter() - t0 < 2.0
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) is before


def test_without_a_budget_flow_is_follow():
    from theorems import limits as claim_limits

    with claim_limits.deadline(None):
        lim = claim_limits.follow(figure2(), torch.tensor([0.5, 0.0], dtype=DTYPE))
    assert lim.kind == "converged"


# ------------------------------------- models.flows.dynamics: the field-evaluation budget


def test_an_evaluation_budget_stops_the_tracer_and_changes_nothing_within_it():
    """The tracer charges every field and Jacobian evaluation to the budget and raises once it
    is spent; a run the budget covers exactly is the run without one, point for point."""
    from models.flows import dynamics

    problem, start = figure2(), torch.tensor([0.5, 0.0], dtype=DTYPE)
    free = dynamics.trace_flow(problem, start, max_norm=1e3)
    with dynamics.evaluation_budget(10**9):
        dynamics.trace_flow(problem, start, max_norm=1e3)
        assert 10**9 - dynamics._BUDGET[0] == free.evals
    with dynamics.evaluation_budget(free.evals):
        exact = dynamics.trace_flow(problem, start, max_norm=1e3)
    assert torch.equal(exact.ps, free.ps) and exact.stop == free.stop
    with pytest.raises(dynamics.EvaluationBudgetExhausted):
        with dynamics.evaluation_budget(free.evals - 1):
            dynamics.trace_flow(problem, start, max_norm=1e3)
    assert dynamics._BUDGET[0] is None  # restored after the raise


def test_the_spent_counter_charges_every_run_budget_or_not():
    """``evaluations_spent`` counts what every trace charged, inside a budget or not: one trace
    adds its evaluations, two traces twice that, and a budget block the same as none."""
    from models.flows import dynamics

    problem, start = figure2(), torch.tensor([0.5, 0.0], dtype=DTYPE)
    before = dynamics.evaluations_spent()
    run = dynamics.trace_flow(problem, start, max_norm=1e3)
    assert dynamics.evaluations_spent() - before == run.evals
    with dynamics.evaluation_budget(10**9):
        dynamics.trace_flow(problem, start, max_norm=1e3)
    assert dynamics.evaluations_spent() - before == 2 * run.evals


def test_nested_evaluation_budgets_charge_the_enclosing_one():
    from models.flows import dynamics

    problem, start = figure2(), torch.tensor([0.5, 0.0], dtype=DTYPE)
    with dynamics.evaluation_budget(100_000):
        with dynamics.evaluation_budget(10**9):  # capped by what the outer block has left
            assert dynamics._BUDGET[0] == 100_000
            run = dynamics.trace_flow(problem, start, max_norm=1e3)
        assert dynamics._BUDGET[0] == 100_000 - run.evals
        with dynamics.evaluation_budget(None):  # no new limit, and not a reset
            assert dynamics._BUDGET[0] == 100_000 - run.evals
    assert dynamics._BUDGET[0] is None


def test_a_flow_past_its_evaluation_budget_is_inconclusive_not_a_verdict():
    """``flow(..., budget_evals=)`` (the medium and large rungs' flow claims): the example is
    discarded as inconclusive, naming the budget; with enough evaluations the same flow is
    decided."""
    from theorems import limits as claim_limits
    from theorems.framework.evidence import InconclusiveExample

    start = torch.tensor([0.5, 0.0], dtype=DTYPE)
    with pytest.raises(InconclusiveExample, match="within 10 field evaluations"):
        claim_limits.flow(figure2(), start, budget_evals=10)
    lim = claim_limits.follow(figure2(), start)
    assert lim.kind == "converged"
