"""models.limits.settle, branch by branch: a "converged" outcome of the engine is confirmed only
if the flow, traced on to CONFIRM_FACTOR·max(‖p‖, 1), still reaches max_norm with the same
selection and 1 − cos ≤ DIRECTION_TOL; otherwise the engine restarts from where the flow went,
at most ``tries`` times, and an outcome never confirmed is inconclusive.

The engine (``converge``, ``trace_flow``) is replaced by a script, so that each condition is
exercised alone; the real engine is tested in tests/test_dynamics.py and, through ``settle``,
on a transient pass in tests/test_claims_mm_helpers.py."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from models import limits
from models.attention import PromptProblem, one_minus_cos
from models.dynamics import converge

DTYPE = torch.float64

# One input, three tokens: token 0 has the top score and is selected along +x; the ATT-SVM
# direction separating it from tokens 1 and 2 is unique.
KEYS = [[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.5]]]
SCORES = [[1.0, 0.0, -0.5]]


@pytest.fixture(scope="module")
def real():
    """A problem and one real converged outcome of the engine on it (the template the script
    varies)."""
    problem = PromptProblem(
        torch.tensor(KEYS, dtype=DTYPE), torch.tensor(SCORES, dtype=DTYPE), "logistic"
    )
    out = converge(problem, torch.tensor([1.0, 0.0], dtype=DTYPE))
    assert out.converged and out.selected.tolist() == [0]
    return problem, out


class Engine:
    """A scripted converge/trace_flow pair that records how settle calls them."""

    def __init__(self, outcomes, finals, stop="reached max_norm"):
        self.outcomes, self.finals, self.stop = list(outcomes), list(finals), stop
        self.converge_calls, self.trace_calls = [], []

    def converge(self, problem, p0, **kwargs):
        self.converge_calls.append((p0, kwargs))
        return self.outcomes.pop(0)

    def trace_flow(self, problem, p0, **kwargs):
        self.trace_calls.append((p0, kwargs))
        return SimpleNamespace(stop=self.stop, final=self.finals.pop(0))


def _install(monkeypatch, engine):
    monkeypatch.setattr(limits, "converge", engine.converge)
    monkeypatch.setattr(limits, "trace_flow", engine.trace_flow)


def _along_svm(out, norm, turn=0.0):
    """A point of norm ``norm`` at angle ``turn`` (radians) from the outcome's SVM direction."""
    x = torch.as_tensor(out.svm.x, dtype=DTYPE)
    x = x / torch.linalg.vector_norm(x)
    perp = torch.stack([-x[1], x[0]])
    c, s = np.cos(turn), np.sin(turn)
    return norm * (c * x + s * perp)


@pytest.mark.parametrize("first_norm, confirm_at", [(3.0, 300.0), (0.5, 100.0)])
def test_a_confirmed_outcome_is_reported_at_the_confirming_point(
    real, monkeypatch, first_norm, confirm_at
):
    problem, out = real
    first = dataclasses.replace(out, p=_along_svm(out, first_norm))
    final = _along_svm(out, 20.0, turn=1e-4)  # 1 − cos = 5e-9; token 1 keeps softmax mass
    engine = Engine([first], [final])
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, torch.tensor([1.0, 0.0], dtype=DTYPE))
    assert transient == 0 and got.converged
    assert engine.converge_calls[0][1] == {
        "target": limits.DIRECTION_TOL,
        "select_tol": limits.SELECT_TOL,
    }
    ((p0, kwargs),) = engine.trace_calls
    assert torch.equal(p0, first.p)
    assert kwargs["max_norm"] == pytest.approx(confirm_at)  # CONFIRM_FACTOR = 100
    assert torch.equal(got.p, final)
    assert got.one_minus_cos == one_minus_cos(final, out.svm.x)
    probs = torch.softmax(problem.keys[0] @ final, dim=-1)
    assert got.max_other_prob == float(probs[1:].max()) > 0.0


@pytest.mark.parametrize(
    "stop, turn, selects, confirmed",
    [
        ("reached max_norm", 1e-4, True, True),
        ("reached max_arc", 1e-4, True, False),  # the run did not reach the larger ‖p‖
        ("reached max_norm", 0.1, True, False),  # 1 − cos = 5e-3 > DIRECTION_TOL
        ("reached max_norm", 1e-4, False, False),  # another selection at the larger ‖p‖
    ],
)
def test_each_condition_of_the_confirmation_is_required(
    real, monkeypatch, stop, turn, selects, confirmed
):
    problem, out = real
    final = _along_svm(out, 20.0, turn)
    if not selects:
        final = torch.tensor([0.0, 20.0], dtype=DTYPE)  # token 1 on top
        monkeypatch.setattr(limits, "one_minus_cos", lambda p, x: 0.0)
    again = dataclasses.replace(out, status="inconclusive", reason="scripted stop")
    engine = Engine([out, again], [final], stop=stop)
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, out.p)
    assert got.converged is confirmed
    assert transient == (0 if confirmed else 1)
    assert len(engine.converge_calls) == (1 if confirmed else 2)


def test_one_minus_cos_equal_to_the_tolerance_confirms(real, monkeypatch):
    problem, out = real
    monkeypatch.setattr(limits, "one_minus_cos", lambda p, x: limits.DIRECTION_TOL)
    engine = Engine([out], [_along_svm(out, 20.0)])
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, out.p)
    assert got.converged and transient == 0
    assert got.one_minus_cos == limits.DIRECTION_TOL


def test_after_a_drift_the_engine_restarts_from_where_the_flow_went(real, monkeypatch):
    problem, out = real
    drifted = [_along_svm(out, 20.0 * (k + 1), turn=0.1) for k in range(3)]
    engine = Engine([out] * 4, drifted)
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, out.p)
    assert transient == 3
    assert got.status == "inconclusive"
    assert got.reason == "convergence did not persist over 3 confirmations"
    assert len(engine.converge_calls) == 4 and len(engine.trace_calls) == 3
    for (p0, kwargs), where in zip(engine.converge_calls[1:], drifted, strict=True):
        assert torch.equal(p0, where)
        assert kwargs == {"target": limits.DIRECTION_TOL, "select_tol": limits.SELECT_TOL}


def test_tries_bounds_the_confirmations(real, monkeypatch):
    problem, out = real
    engine = Engine([out] * 3, [_along_svm(out, 20.0, turn=0.1)] * 2)
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, out.p, tries=2)
    assert transient == 2 and got.status == "inconclusive"
    assert got.reason == "convergence did not persist over 2 confirmations"


def test_an_outcome_that_is_not_converged_is_returned_as_it_is(real, monkeypatch):
    problem, out = real
    stopped = dataclasses.replace(out, status="inconclusive", reason="scripted stop")
    engine = Engine([stopped], [])
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, out.p)
    assert got is stopped and transient == 0 and engine.trace_calls == []


def test_a_restart_that_stops_short_is_returned_with_the_passes_counted(real, monkeypatch):
    problem, out = real
    infeasible = dataclasses.replace(out, status="infeasible", reason="scripted infeasible")
    engine = Engine([out, infeasible], [_along_svm(out, 20.0, turn=0.1)])
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, out.p)
    assert got is infeasible and transient == 1
