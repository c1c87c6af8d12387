"""models.flows.limits.settle, branch by branch: a "converged" outcome of the engine is confirmed
only if the flow, traced on to CONFIRM_FACTOR·max(‖p‖, 1), still reaches max_norm with the same
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

from models.flows import limits
from models.flows.dynamics import converge
from models.problems.attention import PromptProblem, one_minus_cos

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


# ------------------------------------------------------------- Limit's decision, branch by branch


@pytest.mark.parametrize(
    ("changes", "reached"),
    [
        ({}, True),
        ({"one_minus_cos": limits.DIRECTION_TOL}, True),  # the thresholds are inclusive
        ({"max_other_prob": limits.SELECT_TOL}, True),
        ({"one_minus_cos": 2 * limits.DIRECTION_TOL}, False),
        ({"max_other_prob": 2 * limits.SELECT_TOL}, False),
    ],
)
def test_converged_to_needs_the_direction_and_the_selection_within_their_tolerances(
    real, changes, reached
):
    _, out = real
    out = dataclasses.replace(out, one_minus_cos=0.0, max_other_prob=0.0) if changes else out
    lim = limits.Limit("converged", dataclasses.replace(out, **changes), 0)
    assert lim.converged_to([0]) is reached
    assert not lim.converged_to([1])
    assert not limits.Limit("bounded", out, 0).converged_to([0])


def test_a_tie_sharing_limit_is_not_the_svm_of_its_selection(real, monkeypatch):
    _, out = real
    monkeypatch.setattr(
        type(out),
        "tied_margins",
        lambda self: (np.array([0]), np.array([2]), np.array([0.25])),
    )
    lim = limits.Limit("converged", out, 0)
    assert out.tie_sharing and not lim.converged_to([0])
    why = lim.why_not([0], "the top-score")
    assert why == (
        f"gradient flow converged to the tie-sharing SVM of [0] (1 − cos = "
        f"{out.one_minus_cos:.1e}): token 2 of input 0, tied in score with the selected token, "
        "stays at margin 0.25 < 1 (tokens that share the mass exert no force on each other), "
        "so not to the top-score p^mm([0])"
    )
    assert limits.limit_name(out, "p^mm") == "the tie-sharing SVM of [0]"


def test_a_reached_selection_too_far_in_direction_or_mass_says_both_numbers(real):
    _, out = real
    far = dataclasses.replace(out, one_minus_cos=3e-5, max_other_prob=2e-7)
    lim = limits.Limit("converged", far, 0, symbol="W^mm")
    assert lim.why_not([0]) == (
        "selection [0] reached, but 1 − cos = 3e-05 (≤ 1e-06 asked) and softmax mass off α = "
        "2e-07 (≤ 1e-06 asked)"
    )
    assert lim.describe() == "converged to W^mm([0])" and lim._var == "W"


def test_a_selection_that_is_not_locally_optimal_is_named_so(real):
    problem, out = real
    elsewhere = dataclasses.replace(out, selected=np.array([1]))  # token 0 scores higher
    why = limits.Limit("converged", elsewhere, 0).why_not([0], "the")
    assert why.startswith("converged to p^mm([1]) (1 − cos = ")
    assert "not to the p^mm([0]); the reached selection is NOT locally optimal (" in why
    assert why.endswith("; inputs with no support token: [])")


def _scripted_follow(monkeypatch, out, minimiser):
    calls = []
    monkeypatch.setattr(limits, "settle", lambda problem, p0: (out, 2))

    def finite(problem, p):
        calls.append(p)
        return minimiser

    monkeypatch.setattr(limits, "finite_minimiser", finite)
    return calls


def test_follow_names_what_the_engine_established(real, monkeypatch):
    problem, out = real
    calls = _scripted_follow(monkeypatch, out, "a minimiser")
    lim = limits.follow(problem, out.p)
    assert (lim.kind, lim.transient, lim.minimiser) == ("converged", 2, None) and calls == []

    stalled = dataclasses.replace(
        out,
        status="inconclusive",
        trajectory=dataclasses.replace(out.trajectory, stop="stalled"),
    )
    calls = _scripted_follow(monkeypatch, stalled, "a minimiser")
    lim = limits.follow(problem, out.p)
    assert (lim.kind, lim.minimiser) == ("bounded", "a minimiser") and calls == [stalled.p]

    calls = _scripted_follow(monkeypatch, stalled, None)
    assert limits.follow(problem, out.p).kind == "undecided" and len(calls) == 1

    away = dataclasses.replace(  # ran to max_norm, undecided
        stalled, trajectory=dataclasses.replace(out.trajectory, stop="reached max_norm")
    )
    calls = _scripted_follow(monkeypatch, away, "a minimiser")
    assert limits.follow(problem, out.p).kind == "undecided" and calls == []


def test_follow_tolerates_the_flows_own_failures_and_no_other(real, monkeypatch):
    from models.numerics import failures

    problem, out = real

    def settle(problem, p0, source):
        failures.report(source, "scripted failure")
        return out, 0

    for source, counted in ((failures.GRADIENT_FLOW, 0), (failures.SVM_ORACLE, 1)):
        monkeypatch.setattr(limits, "settle", lambda p, p0, s=source: settle(p, p0, s))
        with failures.watch() as w:
            limits.follow(problem, out.p, cls=limits.Limit)
        assert len(w.failures) == counted


# --- a constant loss: the flow rests at p(0) (issue 23, the ladder's degenerate draws) ---


def _problem(keys, scores):
    return PromptProblem(torch.tensor(keys, dtype=torch.float64), torch.tensor(scores), "logistic")


@pytest.mark.parametrize(
    "keys,scores",
    [
        ([[[1.0], [-1.0], [1.0]]], [[1.0, 1.0, 1.0]]),  # equal scores
        ([[[1.0], [1.0]], [[-1.0], [1.0]]], [[0.0, -2.0], [0.5, 0.5]]),  # one key; equal scores
        ([[[1.0], [1.0], [-1.0]]], [[0.0, 2.0, 1.0]]),  # groups {0, 2} and {1}: means 1 and 1
        ([[[0.0, 1.0], [-0.0, 1.0]]], [[0.0, 3.0]]),  # −0.0 and 0.0: one key
    ],
)
def test_constant_loss_is_recognised_exactly(keys, scores):
    problem = _problem(keys, scores)
    assert limits.constant_loss(problem) is not None
    rng = np.random.default_rng(0)
    values = [
        float(problem.loss_value(torch.from_numpy(rng.normal(size=len(keys[0][0])) * 5)))
        for _ in range(5)
    ]
    assert max(values) - min(values) <= 1e-15  # what it certifies, seen at random points


@pytest.mark.parametrize(
    "keys,scores",
    [
        ([[[1.0], [1.0], [-1.0]]], [[0.0, 2.0, 1.0 + 2**-52]]),  # means 1 and 1 + ε
        ([[[1.0], [-1.0]], [[-1.0], [1.0]]], [[1.0, 0.0], [1.0, 0.0]]),  # ∇L(0) = 0, L not constant
    ],
)
def test_a_loss_that_varies_is_not_called_constant(keys, scores):
    assert limits.constant_loss(_problem(keys, scores)) is None


def test_follow_decides_a_constant_loss_as_bounded_at_rest():
    """All scores equal: ∇L ≡ 0. The tracer stops at a stationary point at p(0); no strict
    minimiser exists (the Hessian is 0), so before this the run was left undecided."""
    problem = _problem([[[1.0], [-1.0], [1.0]], [[0.5], [2.0], [-1.0]]], [[1.0] * 3, [-1.0] * 3])
    lim = limits.follow(problem, None)
    assert lim.kind == "bounded" and lim.minimiser is None and lim.at_rest
    assert lim.outcome.trajectory.stop.startswith("stationary point")
    assert "rests at p(0)" in limits.bounded_message(lim)
    assert not lim.diverges


def test_follow_does_not_call_a_symmetric_stationary_point_at_rest():
    """∇L(0) = 0 by the symmetry of two mirrored inputs, but L varies: not "at rest"."""
    problem = _problem([[[1.0], [-1.0]], [[-1.0], [1.0]]], [[1.0, 0.0], [1.0, 0.0]])
    lim = limits.follow(problem, None)
    assert lim.at_rest is None


def test_twins_of_the_selected_token_make_a_sharing_limit():
    """Input 0's tokens 0 and 1 have the same key (different scores): they keep the same
    logit for every p, so the flow cannot select one of them alone. The limit is the sharing
    SVM without token 1's row: converged, the twin's mass not counted as a leak, not the
    SVM of the selection (which is infeasible), and the message says why."""
    problem = _problem(
        [[[1.0, 0.0], [1.0, 0.0], [-1.0, 0.5]], [[0.0, 1.0], [1.0, -1.0], [0.5, 0.5]]],
        [[1.0, 0.5, -1.0], [1.0, 0.0, -0.5]],
    )
    lim = limits.follow(problem, None)
    out = lim.outcome
    assert lim.kind == "converged" and out.tie_sharing
    assert out.selected.tolist()[0] == 0 and out.tied[0, 1] and out.max_other_prob <= 1e-6
    from models.flows.dynamics import twin_tokens
    from models.oracles.svm import att_svm

    assert twin_tokens(problem._np[0], out.selected)[0].tolist() == [False, True, False]
    assert att_svm(problem.keys, out.selected).status == "infeasible"
    assert "has the selected token's very key" in lim.why_not(out.selected)


STALL = "integrator stalled (200 steps shorter than 1e-06·‖p‖)"


@pytest.mark.parametrize(
    "stop, first_norm, grown, selects, confirmed",
    [
        (STALL, 2e7, 10.5, True, True),
        ("integrator stalled (repeated convergence failures)", 2e7, 50.0, True, True),
        (STALL, 2e7, 9.5, True, False),  # less than a decade followed
        (STALL, 2.0, 50.0, True, False),  # at ‖p‖ = 100 the tracer resolves the flow
        (STALL, 2e7, 50.0, False, False),  # another selection at the stall
        ("stationary point (gradient exactly zero)", 2e7, 50.0, True, False),
        ("step budget", 2e7, 50.0, True, False),
    ],
)
def test_a_stall_beyond_the_tracers_resolution_confirms_over_the_decade_it_followed(
    real, monkeypatch, stop, first_norm, grown, selects, confirmed
):
    """A confirming trace that stalls where its error allowance CONFIRM_RTOL·‖p‖ is ≥ 1
    confirms once ‖p‖ grew MIN_CONFIRM_FACTOR-fold with the selection and direction kept; a
    stall the tracer resolves, a shorter one, or any other early stop does not."""
    problem, out = real
    first = dataclasses.replace(out, p=_along_svm(out, first_norm))
    final = _along_svm(out, first_norm * grown, turn=1e-4)
    if not selects:
        final = torch.tensor([0.0, first_norm * grown], dtype=DTYPE)  # token 1 on top
        monkeypatch.setattr(limits, "one_minus_cos", lambda p, x: 0.0)
    again = dataclasses.replace(out, status="inconclusive", reason="scripted stop")
    engine = Engine([first, again], [final], stop=stop)
    _install(monkeypatch, engine)
    got, transient = limits.settle(problem, out.p)
    assert engine.trace_calls[0][1]["rtol"] == limits.CONFIRM_RTOL
    assert got.converged is confirmed
    assert transient == (0 if confirmed else 1)
    if confirmed:
        assert torch.equal(got.p, final)
        assert got.reason.startswith(f"{out.reason}; confirmed while ‖p‖ grew {grown:.3g}-fold")
        assert "beyond the tracer's resolution" in got.reason


def test_a_tie_sharing_limit_whose_confirmation_stalls_far_out_is_decided():
    """The size ladder's medium clustered draw k = 84 (n = 11, T = 5, d = 4): converge decides
    a tie-sharing limit at ‖p‖ ≈ 2e6, and it must stay decided whichever way the confirming
    trace ends. With libm's exponentials that trace stalled near 2e8 (the tied set's O(1)
    forces against an outward one below rounding), and the instance was undecided before a
    stall confirmed over the range followed (docs/performance.md); with the field's own
    exponential (``kernels.exp_array``, within 1 ulp of libm's) it reaches its tenfold
    persistence at 3e8 before stalling. Which of the two ends it is rounding; the verdict is
    not. (The stall branch itself: the scripted test above.)"""
    from strategies.ladder import FAMILIES, RUNGS, draw_sizes

    rng = np.random.default_rng(
        [list(RUNGS).index("medium"), list(FAMILIES).index("clustered"), 84]
    )
    problem = FAMILIES["clustered"](*draw_sizes(RUNGS["medium"], rng), 84)
    lim = limits.follow(problem, None)
    assert lim.kind == "converged", lim.outcome.reason
    reason = lim.outcome.reason
    stalled = "integrator stalled" in reason and "beyond the tracer's resolution" in reason
    assert stalled or reason == "direction reached the SVM of the selection and stayed"
    assert lim.outcome.tie_sharing or lim.outcome.tied is not None
    assert lim.outcome.one_minus_cos <= limits.DIRECTION_TOL
