"""models.numerics.failures: the channel from the mathematics to the failure guard, and the places
in models/ that report to it (an uncertified SVM answer, an undecided flow)."""

import numpy as np
import pytest

from models.numerics import failures
from models.oracles.svm import solve_margin_qp


def test_reports_reach_every_open_watch_and_nothing_else():
    failures.report(failures.NUMERICS, "nobody listens")  # outside a watch: a no-op
    with failures.watch() as outer:
        with failures.watch() as inner:
            failures.report(failures.SVM_ORACLE, "inaccurate", "residual 1e-3")
        failures.report(failures.GRADIENT_FLOW, "undecided")
    assert [f.key for f in inner.failures] == ["SVM oracle: inaccurate"]
    assert [f.key for f in outer.failures] == ["SVM oracle: inaccurate", "gradient flow: undecided"]
    assert str(inner.first) == "SVM oracle: inaccurate (residual 1e-3)"


def test_tolerated_sources_are_kept_apart_and_others_still_count():
    with failures.watch() as w:
        with failures.tolerate(failures.GRADIENT_FLOW):
            failures.report(failures.GRADIENT_FLOW, "undecided")
            failures.report(failures.SVM_ORACLE, "solver_error")
    assert [f.key for f in w.tolerated] == ["gradient flow: undecided"]
    assert [f.key for f in w.failures] == ["SVM oracle: solver_error"]
    with pytest.raises(ValueError, match="unknown failure sources"):
        with failures.tolerate("the weather"):
            pass


def test_exceptions_from_numerical_libraries_are_failures_and_others_are_not():
    import cvxpy
    from scipy.optimize import nnls

    found = failures.from_exception(cvxpy.error.SolverError("Clarabel failed"))
    assert found is not None and found.key == "solver exception: SolverError"
    assert failures.from_exception(np.linalg.LinAlgError("singular")).what == "LinAlgError"
    try:  # a builtin exception raised inside scipy counts by where it was raised
        nnls(np.eye(2), np.ones(3))
    except ValueError as exc:
        raised_in_scipy = exc
    assert failures.from_exception(raised_in_scipy).what == "ValueError in scipy"
    assert failures.from_exception(AssertionError("the claim")) is None
    assert failures.from_exception(ZeroDivisionError("a bug of ours")) is None


def test_an_uncertified_svm_answer_is_reported_and_a_certified_one_is_not(monkeypatch):
    A, b = np.array([[1.0, 0.0], [0.0, 1.0]]), np.ones(2)
    with failures.watch() as w:
        assert solve_margin_qp(A, b).status == "optimal"
        infeasible = solve_margin_qp(np.array([[1.0], [-1.0]]), np.ones(2))
    assert infeasible.status == "infeasible" and not w.failures  # an answer, not a failure

    import cvxpy

    def fail(self, *args, **kwargs):
        raise cvxpy.error.SolverError("injected")

    monkeypatch.setattr(cvxpy.Problem, "solve", fail)
    with failures.watch() as w:
        # the reference pipeline: the default's fast path answers this without cvxpy
        assert solve_margin_qp(A, b, method="reference").status == "solver_error"
    assert [f.key for f in w.failures] == ["SVM oracle: solver_error"]


def test_a_library_exception_without_a_message_has_an_empty_detail():
    failure = failures.from_exception(np.linalg.LinAlgError())
    assert failure == failures.Failure(failures.SOLVER_EXCEPTION, "LinAlgError", "")
    assert str(failure) == "solver exception: LinAlgError"
