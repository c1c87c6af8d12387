"""Bad input and failure: each gives a clear error or an inconclusive verdict with its reason,
never a pass, and never loses the verdicts already recorded in the run."""

import json
from pathlib import Path

import numpy as np
import pytest
import repo_copy
from hypothesis import given
from hypothesis import strategies as st

from theorems.framework import evidence, registry
from theorems.framework.registry import claim

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parent.parent

HEADER = (
    repo_copy.CLAIM_HELPER
    + """
import math
import numpy as np
from hypothesis import given, strategies as st
from theorems import claim, evidence


@C("F-HOLDS", examples=10)
@given(x=st.integers(0, 10))
def test_holds(x):
    assert x >= 0
"""
)

FAILURES = """
from models.oracles.svm import SVMSolution
from strategies import PromptInstance

@st.composite
def bad_instances(draw):
    n = draw(st.integers(1, 3))
    return PromptInstance(X=np.ones((n, 2, 2)), y=[2.0] * n, v=[1.0, 0.0], W=np.eye(2))

@C("F-STRATEGY", examples=10)
@given(inst=bad_instances())
def test_strategy(inst):
    assert inst.n >= 1

def failed_solve(status):
    return SVMSolution(status, None, None, None, "none", "every solver failed: boom")

@C("F-SOLVER", examples=10)
@given(status=st.sampled_from(["solver_error", "inaccurate"]))
def test_solver(status):
    sol = evidence.solved(failed_solve(status), "ATT-SVM(opt)")
    assert sol.x is not None

@C("F-NAN-TRAJECTORY", examples=10)
@given(steps=st.integers(2, 20))
def test_nan_trajectory(steps):
    norms = np.linspace(1.0, 10.0, steps)
    norms[-1] = math.nan  # the integrator broke down
    evidence.finite("trajectory ‖p(t)‖", norms)
    assert norms[-1] > norms[0]

@C("F-NAN-ASSERT", examples=10)
@given(x=st.integers(0, 10))
def test_nan_assert(x):
    cos = math.nan if x > 3 else 1.0
    evidence.metric("cos", cos)
    assert cos > 0.99  # NaN fails this comparison: no counterexample for all that

@C("F-PLAIN-NAN", kind="experiment")
def test_plain_nan():
    evidence.finite("loss", float("inf"))

@C("F-REPLAY")
@given(x=st.integers(0, 10))
def test_replay(x):
    assert x >= 0

@C("F-FAIL-THEN-ASSERT", examples=10)
@given(x=st.integers(0, 10))
def test_fail_then_assert(x):
    from models.numerics import failures
    failures.report("SVM oracle", "solver_error", "every solver failed")
    assert False, "the body asserts on the failed solve's garbage"

@C("F-FAIL-THEN-PASS", kind="experiment")
def test_fail_then_pass():
    from models.numerics import failures
    failures.report("gradient flow", "undecided", "step budget")

@C("F-CONTROL-ONLY-FAILURES", kind="control", expected="refuted", examples=10)
@given(x=st.integers(0, 10))
def test_control_only_failures(x):
    import cvxpy
    raise cvxpy.error.SolverError("Clarabel failed")

@C("F-FAIL-THEN-REJECT", examples=10)
@given(x=st.integers(0, 10))
def test_fail_then_reject(x):
    from models.numerics import failures
    failures.report("SVM oracle", "inaccurate", "residual 1e-3")
    evidence.reject("the SVM is not optimal")  # caused by the failure: not an assumption

@C("F-TOLERATED", examples=10)
@given(x=st.integers(0, 10))
def test_tolerated(x):
    from models.numerics import failures
    with failures.tolerate(failures.GRADIENT_FLOW):
        failures.report(failures.GRADIENT_FLOW, "undecided", "the statement allows it")
    assert x >= 0

@C("F-VACUOUS-PREMISE", examples=10)
@given(x=st.integers(0, 10))
def test_vacuous_premise(x):
    if evidence.premise(x > 100, "x > 100"):
        assert False

@C("F-VACUOUS-ASSUMPTIONS", examples=10)
@given(x=st.integers(0, 10))
def test_vacuous_assumptions(x):
    evidence.reject("never meets the assumptions")

@st.composite
def solved_in_the_strategy(draw):
    # A strategy that solves an SVM to build its instance, and uses the failed answer.
    from models.numerics import failures
    failures.report("SVM oracle", "solver_error", "every solver failed")
    return draw(st.integers(0, 10))

@C("F-DRAWN-FROM-A-FAILURE", examples=10)
@given(x=solved_in_the_strategy())
def test_drawn_from_a_failure(x):
    assert False, "the instance rests on a failed solve"

@st.composite
def rejected_after_a_failure(draw):
    from hypothesis import assume
    from models.numerics import failures
    failures.report("SVM oracle", "solver_error", "every solver failed")
    assume(False)  # "keep only feasible instances", decided by the failed solve

@C("F-NOTHING-DRAWN-AFTER-FAILURES", examples=10)
@given(x=rejected_after_a_failure())
def test_nothing_drawn_after_failures(x):
    pass
"""


@pytest.fixture
def inner(pytester, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    for var in ("CI", "ATTN_CLAIMS_REPORT", "ATTN_HYPOTHESIS_PROFILE", "ATTN_COUNTEREXAMPLES"):
        monkeypatch.delenv(var, raising=False)
    pytester.makeini("[pytest]\n")

    def run(files, *args):
        pytester.makepyfile(**files)
        result = pytester.runpytest_subprocess(
            "-p", "theorems.framework.plugin", "--rootdir", str(pytester.path),
            "-W", "ignore::DeprecationWarning", *args,
        )  # fmt: skip
        path = pytester.path / "reports" / "claims.json"
        report = json.loads(path.read_text()) if path.exists() else None
        return result, report and {c["id"]: c for c in report["claims"]}

    return run


def test_each_failure_is_an_error_or_inconclusive_with_its_reason(inner, pytester):
    store = pytester.path / "theorems" / "counterexamples"
    store.mkdir(parents=True)
    (store / "F-REPLAY.json").write_text('{"replay": {"x": {"value": ')  # cut off
    result, claims = inner({"test_failures": HEADER + FAILURES}, "-v")

    def verdict(claim_id):
        return claims[claim_id]["verdict"], claims[claim_id]["reason"]

    assert verdict("F-HOLDS") == ("holds", "held on 10 examples")  # never lost
    strategy, reason = verdict("F-STRATEGY")
    assert strategy == "error"
    assert reason == (
        "the strategy failed to build an instance: ValueError: y: labels must be ±1, got values "
        "[2.0]"
    )
    solver, reason = verdict("F-SOLVER")
    assert solver == "inconclusive" and reason.startswith("too many inconclusive examples")
    assert set(claims["F-SOLVER"]["inconclusive"]) == {
        "ATT-SVM(opt): solver solver_error",
        "ATT-SVM(opt): solver inaccurate",
    }
    nan, reason = verdict("F-NAN-TRAJECTORY")
    assert nan == "inconclusive" and "non-finite trajectory ‖p(t)‖" in reason
    nan, reason = verdict("F-NAN-ASSERT")  # a NaN failing an assertion is no counterexample
    assert nan == "inconclusive"
    assert claims["F-NAN-ASSERT"]["inconclusive"] == {"numerics: non-finite evidence": 7}
    # The failure guard: a machinery failure makes the example inconclusive, whatever the
    # body does next (asserts, passes, or a control "refuted" by nothing but failed solves).
    failed, reason = verdict("F-FAIL-THEN-ASSERT")
    assert failed == "inconclusive"
    assert claims["F-FAIL-THEN-ASSERT"]["failures"] == {"SVM oracle: solver_error": 11}
    assert verdict("F-FAIL-THEN-PASS") == (
        "inconclusive",
        "the numerics could not decide: gradient flow: undecided (step budget)",
    )
    control, reason = verdict("F-CONTROL-ONLY-FAILURES")
    assert control == "inconclusive"
    assert claims["F-CONTROL-ONLY-FAILURES"]["failures"] == {"solver exception: SolverError": 11}
    rejected, reason = verdict("F-FAIL-THEN-REJECT")
    assert rejected == "inconclusive", reason  # not vacuous: the assumptions may well hold
    assert claims["F-FAIL-THEN-REJECT"]["rejections"] == {}
    assert claims["F-FAIL-THEN-REJECT"]["failures"] == {"SVM oracle: inaccurate": 11}
    assert verdict("F-TOLERATED") == ("holds", "held on 10 examples")
    assert claims["F-TOLERATED"]["tolerated_failures"] == {"gradient flow: undecided": 10}
    vacuous, reason = verdict("F-VACUOUS-PREMISE")
    assert vacuous == "vacuous" and reason.startswith("its premise held in 0 of 10 examples")
    assert claims["F-VACUOUS-PREMISE"]["premise"] == {"met": 0, "of": 10, "declared": True}
    vacuous, reason = verdict("F-VACUOUS-ASSUMPTIONS")
    assert vacuous == "vacuous" and reason.startswith("its assumptions held in 0 of")
    assert verdict("F-PLAIN-NAN") == (
        "inconclusive",
        "the numerics could not decide: non-finite loss",
    )
    # Failures while an example is drawn (a strategy that solves): the example, or the
    # whole claim when no draw survived, is inconclusive, never refuted nor vacuous.
    drawn, reason = verdict("F-DRAWN-FROM-A-FAILURE")
    assert drawn == "inconclusive", reason
    assert claims["F-DRAWN-FROM-A-FAILURE"]["inconclusive"] == {
        "SVM oracle: while drawing the instance: solver_error": 11
    }
    nothing, reason = verdict("F-NOTHING-DRAWN-AFTER-FAILURES")
    assert nothing == "inconclusive", reason
    assert reason.startswith("the strategy's solver failed while drawing")
    replayed, reason = verdict("F-REPLAY")
    assert replayed == "error" and reason == "ReplayError raised"
    assert "F-REPLAY.json: invalid JSON at line 1" in claims["F-REPLAY"]["error"]
    # None of them passes; each failing item names its claim, verdict and reason.
    result.assert_outcomes(passed=2, failed=14)
    result.stdout.fnmatch_lines(["claim F-STRATEGY: verdict error, expected holds (the strategy*"])
    assert not any(c["verdict"] == "refuted" for c in claims.values())
    assert [p.name for p in store.glob("*.json")] == ["F-REPLAY.json"]  # nothing refuted


def test_a_claim_id_used_twice_is_a_clear_collection_error(inner):
    files = {
        "test_first": HEADER,
        "test_second": HEADER.replace("test_holds", "test_other"),
    }
    result, _ = inner(files)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*ClaimRegistrationError: claim id 'F-HOLDS' is registered twice: by "
         "test_first.test_holds (*test_first.py:*) and by test_second.test_other (*)"]
    )  # fmt: skip
    # pytest stops at a collection error; asked to go on, the other verdicts are recorded.
    result, claims = inner(
        {"test_third": HEADER.replace("F-HOLDS", "F-THIRD")}, "--continue-on-collection-errors"
    )
    assert result.ret == 1 and claims["F-THIRD"]["verdict"] == "holds"


# --------------------------------------------------------------------------- in-process units


def test_solved_passes_optimal_rejects_infeasible_and_is_inconclusive_otherwise():
    from models.oracles.svm import SVMSolution

    optimal = SVMSolution("optimal", np.ones(2), None, None, "CLARABEL", "")
    assert evidence.solved(optimal) is optimal
    with pytest.raises(evidence.RejectedExample, match="ATT-SVM: infeasible"):
        evidence.solved(SVMSolution("infeasible", None, None, None, "LP", ""), "ATT-SVM")
    with pytest.raises(evidence.InconclusiveExample, match="SVM: solver inaccurate"):
        evidence.solved(SVMSolution("inaccurate", None, None, None, "SCS", "residual 1e-3"))
    with pytest.raises(evidence.InconclusiveExample, match="SVM: solver None"):
        evidence.solved(None)


def test_converged_and_finite():
    class Outcome:
        def __init__(self, status, one_minus_cos=1e-9, reason=""):
            self.status, self.one_minus_cos, self.reason = status, one_minus_cos, reason

    done = Outcome("converged")
    assert evidence.converged(done) is done
    with pytest.raises(evidence.InconclusiveExample, match="non-finite gradient flow"):
        evidence.converged(Outcome("converged", one_minus_cos=float("nan")))
    with pytest.raises(evidence.InconclusiveExample, match="gradient flow: inconclusive"):
        evidence.converged(Outcome("inconclusive", reason="reached max_norm"))
    with pytest.raises(evidence.RejectedExample, match="SVM is infeasible"):
        evidence.converged(Outcome("infeasible"))
    torch = pytest.importorskip("torch")
    evidence.finite("ok", 1.0, [1.0, 2.0], torch.ones(3))
    for bad in (float("-inf"), [1.0, float("nan")], torch.tensor([0.0, float("inf")]), "x"):
        with pytest.raises(evidence.InconclusiveExample, match="non-finite what"):
            evidence.finite("what", bad)


def test_an_inconclusive_example_inside_hypothesis_is_discarded_not_counted():
    with registry.isolated():

        @claim(id="F-UNIT", paper="p", kind="lemma", statement="s", provenance="[D]", examples=20)
        @given(x=st.integers(0, 99))
        def test_x(x):
            evidence.finite("x", float("nan") if x % 4 == 0 else 1.0)

        collector = evidence.Collector()
        with evidence.collecting(collector):
            test_x()
    snap = collector.snapshot()
    assert snap["examples"] == 20 and snap["inconclusive"]["non-finite x"] > 0
