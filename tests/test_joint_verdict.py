"""`check`'s verdict on a joint (W, v) mirror-descent run (models.check.joint_predict._verdict),
branch by branch on inputs made here: the status, the reason a user reads, and whether more steps
may change it. (The answers of tests/test_cli_joint.py reach only the branches their
instances take; in a seeded mutmut sample the others' words and flags survived.)"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from models.check.joint_predict import CORR_FLOOR, SUPPORT_REL, _verdict, rate

ALPHA = np.array([0, 1])
GOOD = SimpleNamespace(ok=True, status="optimal", reason="certified", duals=np.array([1.0, 0.5]))
FAST = {"W": 10.0, "v": 10.0}
ERRORS = {"W": 1e-3, "v": 1e-3}


def verdict(alpha_half=ALPHA, W_svm=GOOD, v_svm=GOOD, shrink=FAST, errors=ERRORS, p=2.0):
    return _verdict(alpha_half, ALPHA, W_svm, v_svm, shrink, errors, p)


def test_a_selection_that_moved_over_the_second_half_asks_for_more_steps():
    assert verdict(alpha_half=np.array([1, 1])) == (
        "inconclusive",
        "the selection at half the budget is not the final one",
        True,
    )


@pytest.mark.parametrize(("which", "what"), [("W_svm", "the ℓp-AttSVM"), ("v_svm", "the ℓp v-SVM")])
def test_an_svm_that_failed_or_is_infeasible_decides_without_more_steps(which, what):
    failed = SimpleNamespace(ok=False, status="solver_error", reason="no point", duals=None)
    assert verdict(**{which: failed}) == (
        "inconclusive",
        f"{what} at the selection: solver_error: no point",
        False,
    )
    infeasible = SimpleNamespace(ok=False, status="infeasible", reason="Farkas", duals=None)
    assert verdict(**{which: infeasible}) == (
        "infeasible",
        f"{what} at the selection: infeasible: Farkas",
        False,
    )
    # `check`'s budget answer is a (status, reason) pair, never ok.
    assert verdict(**{which: ("inconclusive", "budget")})[:2] == (
        "inconclusive",
        f"{what} at the selection: inconclusive: budget",
    )


def test_a_selected_token_off_the_v_svms_support_is_the_relaxed_limit():
    loose = SimpleNamespace(**{**vars(GOOD), "duals": np.array([1.0, 0.5 * SUPPORT_REL])})
    status, reason, more = verdict(v_svm=loose)
    assert (status, more) == ("inconclusive", False)
    assert reason == (
        "input(s) [1]: the selected token is not a support vector of the ℓp v-SVM, so the joint "
        "theorem's limit of W is a relaxed SVM, not W^mm_α̂(ℓp) (theorems/mirror/findings.md, "
        "MD-JOINT)"
    )
    at_threshold = SimpleNamespace(**{**vars(GOOD), "duals": np.array([1.0, SUPPORT_REL])})
    assert verdict(v_svm=at_threshold)[0] == "inconclusive"  # λ ≤ 1e-4·max counts as loose


@pytest.mark.parametrize("p", [1.5, 2.0, 3.0])
def test_a_slow_shrink_asks_for_more_steps_and_a_fast_one_certifies(p):
    slow = {"W": 0.99 * rate(p), "v": 10.0}
    status, reason, more = verdict(shrink=slow, p=p)
    assert (status, more) == ("inconclusive", True)
    assert reason == (
        f"1 − corr(W) shrank {slow['W']:.2f}-fold < {rate(p):.2f}"
        " over the second half of the budget"
    )
    status, reason, more = verdict(shrink={"W": rate(p), "v": rate(p)}, p=p)
    assert (status, more) == ("certified", False)
    assert reason.startswith("selection settled over the second half, both SVMs certified")
    assert f"≤ {CORR_FLOOR:.0e} or shrank ≥ {rate(p):.2f}-fold" in reason


def test_an_error_at_the_certificates_resolution_needs_no_shrink():
    tiny = {"W": CORR_FLOOR, "v": CORR_FLOOR}
    assert verdict(shrink={"W": 1.0, "v": 1.0}, errors=tiny)[0] == "certified"
    assert verdict(shrink={"W": 1.0, "v": 1.0}, errors={"W": 2 * CORR_FLOOR, "v": 0.0})[0] == (
        "inconclusive"
    )


def test_rate_is_the_geometric_middle_of_the_two_limits():
    for p in (1.5, 2.0, 3.0):
        assert rate(p) == pytest.approx((1.0 * 2.0 ** (2 / (p - 1))) ** 0.5)
