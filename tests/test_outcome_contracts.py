"""The contracts of the machinery's outcomes: a failure report names a known source and a
reason, and every oracle's status is one of its documented words, checked where the outcome
is made. A misspelt status or a reason-less report would otherwise read as an ordinary
failure (``ok`` is False) or as an inconclusive example with no reason, silently."""

import numpy as np
import pytest

from models.flows.kqpath import DiagSVM
from models.ntp.qp import EqualityQPSolution
from models.numerics import failures
from models.oracles.normsvm import FACE_STATUSES, FaceFit, NormSVM
from models.oracles.svm import ORACLE_STATUSES, SVMSolution, checked_outcome, checked_status
from models.problems.nonlinear_head import SVMEq


def test_report_accepts_every_known_source_and_records_it():
    with failures.watch() as w:
        for source in failures.SOURCES:
            failures.report(source, "some reason", "detail")
    assert [f.source for f in w.failures] == list(failures.SOURCES)
    assert {f.what for f in w.failures} == {"some reason"}


@pytest.mark.parametrize("watched", [True, False])
@pytest.mark.parametrize(
    ("source", "what", "message"),
    [
        ("SVM  oracle", "x", "source"),
        (None, "x", "source"),
        (failures.SVM_ORACLE, None, "what"),
        (failures.SVM_ORACLE, "", "what"),
        (failures.NUMERICS, "   ", "what"),
    ],
)
def test_report_rejects_a_malformed_failure_watched_or_not(source, what, message, watched):
    if watched:
        with failures.watch() as w, pytest.raises(ValueError, match=f"^{message}:"):
            failures.report(source, what)
        assert not w.failures
    else:
        with pytest.raises(ValueError, match=f"^{message}:"):
            failures.report(source, what)


def test_checked_status_names_the_allowed_words():
    for status in ORACLE_STATUSES:
        assert checked_status(status) == status
    for bad in ("INFEASIBLE", "XXoptimalXX", "", None, "bracketed"):
        with pytest.raises(ValueError, match=r"^status: expected one of .*optimal"):
            checked_status(bad)
    assert checked_status("bracketed", FACE_STATUSES) == "bracketed"


def _outcomes(status, why="why"):
    """One of each oracle outcome with this status and reason (the other fields do not matter
    here)."""
    nan = float("nan")
    return [
        lambda: SVMSolution(status, None, None, None, "none", why),
        lambda: SVMEq(status, np.zeros(1), None, nan, None, None, nan, None, why),
        lambda: DiagSVM("l1", status, None, nan, None, {}, why),
        lambda: EqualityQPSolution(status, None, None, None, None, "none", why),
        lambda: NormSVM("fro", None, status, None, nan, None, {}, why, "none", 0.0),
        lambda: FaceFit(status, nan, 0.0, 1.0, nan, nan, None, why, "none", 0.0),
    ]


@pytest.mark.parametrize("status", ["optimal", "infeasible", "solver_error"])
def test_every_outcome_takes_its_documented_statuses(status):
    for make in _outcomes(status):
        assert make().status == status
    assert _outcomes(status)[0]().ok == (status == "optimal")


@pytest.mark.parametrize("status", ["INFEASIBLE", "XXinconclusiveXX", "inconclusive", None])
def test_every_outcome_refuses_a_status_outside_its_words(status):
    for make in _outcomes(status):
        with pytest.raises(ValueError, match="^status:"):
            make()


def test_only_a_face_fit_may_be_bracketed():
    outcomes = _outcomes("bracketed")
    assert outcomes[-1]().status == "bracketed"
    for make in outcomes[:-1]:
        with pytest.raises(ValueError, match="^status:"):
            make()


@pytest.mark.parametrize("why", [None, 3, b"bytes"])
def test_every_outcome_refuses_a_reason_that_is_not_text(why):
    with pytest.raises(ValueError, match="^reason: expected a string"):
        checked_outcome("optimal", why)
    for make in _outcomes("infeasible", why):
        with pytest.raises(ValueError, match="^reason: expected a string"):
            make()
    for make in _outcomes("infeasible", ""):
        assert make().reason == ""
