"""The prompt model's core, function by function: Def. 2's verdicts (models.oracles.selection), the
certified SVM oracle (models.oracles.svm), the float64 precision guards (models.check.precision),
the failure channel (models.numerics.failures), the nonlinear heads (models.problems.heads),
W-training (models.flows.wtrain), the high-precision gradient (models.numerics.highprec), device
selection (models.numerics.device), the answers of `check` for prompt and embedding instances
(models.check.predict) and the tracer's helpers (models.flows.dynamics).

Every expected value is worked out by hand on an instance of two or three tokens, or comes by
another route: a closed-form optimum, a KKT point written down, an analytic derivative, a
documented message format with the numbers filled in by hand, the fields of a canned flow
outcome. Every documented constant (TIE_TOL, the precision thresholds, the stall rule,
MINIMISER_MAX_NORM) is checked at its boundary, and every reason string in full. The flows are
stubbed (``models.check.predict.follow``) or cut short (``max_steps``, ``max_norm``), so the file
runs in seconds."""

from __future__ import annotations

import math
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from models.check import precision, predict
from models.flows import dynamics, wtrain
from models.flows.dynamics import FiniteMinimiser, Outcome
from models.flows.limits import Limit
from models.numerics import device as dev
from models.numerics import failures, highprec
from models.oracles import selection, svm
from models.oracles.svm import SVMSolution
from models.problems import heads
from models.problems.attention import PromptProblem
from models.problems.losses import get_loss
from tests.mutmut_aware import mutmut_trampoline_file

F64 = torch.float64
EPS = 2.0**-52


def _sol(status: str, reason: str = "why", x=None) -> SVMSolution:
    return SVMSolution(status, x, None, None, "fake", reason)


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z))


# =============================================================================================
# models.oracles.selection
# =============================================================================================

# One input, α = 0: rows k0 − k1 = (1, 0) and k0 − k2 = (1 + 5e-7, −1), so p = (1, 0) and token 2
# sits at margin 1 + 5e-7: a support token at tol 1e-6, not at tol 1e-7.
NEAR_KEYS = np.array([[[1.0, 0.0], [0.0, 0.0], [-5e-7, 1.0]]])


def test_a_tie_or_a_higher_support_score_is_a_violation_with_its_gap_listed():
    verdict = selection.local_optimality(NEAR_KEYS, [[1.0, 1.0, 3.0]], [0])
    assert verdict.feasible is True and verdict.locally_optimal is False
    np.testing.assert_allclose(verdict.svm.x, [1.0, 0.0], atol=1e-12)
    assert [s.tolist() for s in verdict.support] == [[1, 2]]
    assert verdict.violations == [(0, 1, 0.0), (0, 2, -2.0)]
    assert verdict.vacuous_inputs == ()
    assert verdict.reason == (
        "support tokens score at least as high as α_i: (i=0, t=1, gap=0), (i=0, t=2, gap=-2)"
    )


def test_the_support_tolerance_reaches_the_support_sets():
    verdict = selection.local_optimality(NEAR_KEYS, [[1.0, 0.5, 3.0]], [0], tol=1e-7)
    assert [s.tolist() for s in verdict.support] == [[1]]
    assert verdict.locally_optimal is True and verdict.violations == []
    assert verdict.reason == "every support token scores strictly below α_i"
    wide = selection.local_optimality(NEAR_KEYS, [[1.0, 0.5, 3.0]], [0])
    assert [s.tolist() for s in wide.support] == [[1, 2]] and not wide.locally_optimal


def test_an_input_whose_constraints_are_all_slack_is_vacuous():
    """Input 0's row (1, 1) fixes p = (½, ½); input 1's row (3, 0) then has margin 1.5."""
    keys = np.array([[[1.0, 1.0], [0.0, 0.0]], [[2.0, 0.0], [-1.0, 0.0]]])
    verdict = selection.local_optimality(keys, [[1.0, 0.0], [0.0, 5.0]], [0, 0])
    np.testing.assert_allclose(verdict.svm.x, [0.5, 0.5], atol=1e-12)
    assert verdict.vacuous_inputs == (1,)
    assert [s.tolist() for s in verdict.support] == [[1], []]
    assert verdict.locally_optimal is True


def test_an_infeasible_svm_is_named_and_carries_no_support():
    keys = np.array([[[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]])  # k0 is the midpoint of k1, k2
    verdict = selection.local_optimality(keys, [[5.0, 0.0, 0.0]], [0])
    assert verdict.feasible is False and verdict.locally_optimal is False
    assert verdict.svm.status == "infeasible"
    assert verdict.reason == f"ATT-SVM(α) is infeasible: status infeasible ({verdict.svm.reason})"
    assert verdict.support == [] and verdict.violations == [] and verdict.vacuous_inputs == ()


@pytest.mark.parametrize("status", ["inaccurate", "solver_error"])
def test_an_undecided_svm_is_named_undecided(monkeypatch, status):
    fake = _sol(status, "residuals 1e-3")
    monkeypatch.setattr(selection, "att_svm", lambda keys, alpha: fake)
    verdict = selection.local_optimality(NEAR_KEYS, [[1.0, 0.0, 0.0]], [0])
    assert verdict.svm is fake and verdict.feasible is False and verdict.locally_optimal is False
    assert verdict.reason == f"undecided: status {status} (residuals 1e-3)"


def test_violations_use_the_tie_tolerance_scaled_by_the_largest_score():
    """Input 0 (|γ| ≤ 1: tie at 1e-12): a gap of 1.5e-12 is resolved, 0.5e-12 is a tie.
    Input 1 (|γ| = 1e4: tie at 1e-8): a gap of 5e-9 is a tie, 2e-8 is resolved."""
    scores = np.array([[0.5, 0.5 - 1.5e-12, 0.5 - 0.5e-12], [1e4, 1e4 - 5e-9, 1e4 - 2e-8]])
    support = [np.array([1, 2]), np.array([1, 2])]
    found = selection._violations(scores, np.array([0, 0]), support)
    assert [(i, t) for i, t, _ in found] == [(0, 2), (1, 1)]
    for i, t, gap in found:
        assert type(t) is int and gap == float(scores[i, 0] - scores[i, t]) and gap > 0


def test_an_exact_tie_is_a_violation_even_with_no_tolerance(monkeypatch):
    monkeypatch.setattr(selection, "TIE_TOL", 0.0)
    scores = np.array([[2.0, 2.0, 1.0]])
    assert selection._violations(scores, np.array([0]), [np.array([1, 2])]) == [(0, 1, 0.0)]
    assert selection.TIE_TOL == 0.0


def test_tie_tol_is_documented_as_1e_minus_12():
    assert selection.TIE_TOL == 1e-12


@pytest.mark.parametrize(
    ("scores", "kwargs", "unique"),
    [
        ([[1.0]], {}, True),  # one token: nothing to tie with
        ([[1.0, 1.0]], {}, False),
        ([[3.0, 1.0, 2.0]], {}, True),
        ([[3.0, 3.0, 1.0]], {}, False),
        ([[-3.0, -5.0]], {}, True),
        ([[1.0, 1.0 - 1.5e-12]], {}, True),  # scale max(1, |γ|) = 1
        ([[1e6, 1e6 - 1e-7]], {}, False),  # scale 1e6: the gap must beat 1e-6
        ([[1e6, 0.0], [1.0, 1.0 - 5e-12]], {}, True),  # the scale is per input
        ([[1.0, 0.5]], {"tol": 0.5}, False),  # a gap equal to tol·scale is no gap
        ([[1.0, 0.4]], {"tol": 0.5}, True),
    ],
)
def test_has_unique_opt_compares_the_top_two_per_input(scores, kwargs, unique):
    assert selection.has_unique_opt(scores, **kwargs) is unique


def test_global_opt_takes_the_first_maximiser():
    assert selection.global_opt([[1.0, 3.0, 3.0], [0.0, -1.0, -2.0]]).tolist() == [1, 0]
    with pytest.raises(ValueError, match=r"scores: expected 2 dimensions"):
        selection.global_opt([1.0, 2.0])


def test_token_margins_are_logit_gaps_to_the_selected_token():
    keys = np.array([[[1.0, 2.0], [0.0, 1.0], [3.0, -1.0]]])
    np.testing.assert_array_equal(selection.token_margins(keys, [0], [1.0, 1.0]), [[0, 2, 1]])
    with pytest.raises(ValueError, match=r"^p: length 3 does not match the key dimension 2$"):
        selection.token_margins(keys, [0], [1.0, 1.0, 1.0])


def test_support_sets_take_tight_tokens_up_to_tol_and_need_a_certified_svm():
    """NEAR_KEYS with a copy of token 1 as token 3: both copies are tight at margin 1."""
    keys = np.concatenate([NEAR_KEYS, NEAR_KEYS[:, [1]]], axis=1)
    assert [s.tolist() for s in selection.support_sets(keys, [0])] == [[1, 2, 3]]
    assert [s.tolist() for s in selection.support_sets(keys, [0], tol=4e-7)] == [[1, 3]]
    assert [s.tolist() for s in selection.support_sets(keys, [0], tol=6e-7)] == [[1, 2, 3]]
    infeasible = np.array([[[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]])
    with pytest.raises(ValueError, match=r"^sol: support sets need a certified ATT-SVM\(α\), got "):
        selection.support_sets(infeasible, [0])
    given = svm.att_svm(keys, [0])
    assert [s.tolist() for s in selection.support_sets(keys, [0], given)] == [[1, 2, 3]]


def test_scores_must_match_the_keys_shape():
    msg = r"^scores: shape \(1, 2\) does not match keys' \(n, T\) = \(1, 3\)$"
    with pytest.raises(ValueError, match=msg):
        selection.local_optimality(NEAR_KEYS, [[1.0, 0.0]], [0])


def test_enumeration_lists_every_locally_optimal_selection_and_passes_tol():
    """α = 2 (p = (0, 1), both other tokens support) tops them; α = 1 is beaten by its support
    token 0; α = 0 is locally optimal only when token 2 (margin 1 + 5e-7, score 3) is not
    support."""
    scores = [[1.0, 0.5, 3.0]]
    assert selection.enumerate_locally_optimal(NEAR_KEYS, scores) == [(2,)]
    assert selection.enumerate_locally_optimal(NEAR_KEYS, scores, tol=1e-7) == [(0,), (2,)]


def test_enumeration_limit_is_inclusive_and_named():
    keys = np.array([[[1.0], [0.0]]])
    assert selection.enumerate_locally_optimal(keys, [[1.0, 0.0]], limit=2) == [(0,)]
    with pytest.raises(ValueError, match=r"^limit: T\*\*n = 2 candidates exceed limit=1$"):
        selection.enumerate_locally_optimal(keys, [[1.0, 0.0]], limit=1)


@pytest.mark.parametrize("status", ["inaccurate", "solver_error"])
def test_enumeration_stops_at_an_undecided_svm(monkeypatch, status):
    monkeypatch.setattr(selection, "att_svm", lambda keys, alpha: _sol(status, "r"))
    with pytest.raises(selection.UndecidedError, match=rf"^α=\(0,\): undecided: status {status}"):
        selection.enumerate_locally_optimal(np.array([[[1.0], [0.0]]]), [[1.0, 0.0]])


def test_enumeration_skips_infeasible_selections_without_raising(monkeypatch):
    monkeypatch.setattr(selection, "att_svm", lambda keys, alpha: _sol("infeasible", "r"))
    assert selection.enumerate_locally_optimal(np.array([[[1.0], [0.0]]]), [[1.0, 0.0]]) == []


class _NormSol:
    """A stand-in for a models.oracles.normsvm answer: ``support`` records what it was asked."""

    def __init__(self, ok: bool, support=None):
        self.ok, self.norm, self.status, self.reason = ok, "nuclear", "infeasible", "r"
        self._support, self.asked = support, None

    def support(self, X, Z, alpha, tol):
        self.asked = (X.shape, Z, alpha.tolist(), tol)
        return self._support


def test_norm_local_optimality_names_the_norm_in_every_reason():
    X = np.zeros((1, 3, 2))
    failed = selection.norm_local_optimality(X, "Z", [[1.0, 0.0, 0.0]], [0], _NormSol(False))
    assert (failed.feasible, failed.locally_optimal) == (False, False)
    assert failed.reason == "the nuclear SVM of α is infeasible (r)"
    sol = _NormSol(True, [np.array([1, 2])])
    bad = selection.norm_local_optimality(X, "Z", [[1.0, 2.0, 0.0]], [0], sol, tol=1e-3)
    assert sol.asked == ((1, 3, 2), "Z", [0], 1e-3)
    assert bad.violations == [(0, 1, -1.0)] and bad.feasible and not bad.locally_optimal
    assert bad.reason == "nuclear support tokens score at least as high as α_i: (i=0, t=1, gap=-1)"
    good = selection.norm_local_optimality(X, "Z", [[1.0, 0.0, 0.0]], [0], sol)
    assert good.reason == "every nuclear support token scores strictly below α_i"
    assert good.locally_optimal and sol.asked[3] == 1e-6


# =============================================================================================
# models.oracles.svm
# =============================================================================================

I2, ONES2 = np.eye(2), np.ones(2)


def test_certify_computes_each_kkt_residual_by_hand():
    """x = (0.5, 2), λ = (0, 3) on rows I ≥ 1: slack (−0.5, 1), so primal residual 0.5,
    stationarity ‖(0.5, −1)‖/‖x‖ (‖x‖ > 1), complementarity 3·1 and row 0 active."""
    cert = svm.certify(I2, ONES2, [0.5, 2.0], [0.0, 3.0])
    assert cert.primal_residual == 0.5 and cert.dual_residual == 0.0
    assert cert.stationarity == pytest.approx(math.sqrt(1.25 / 4.25), rel=1e-15)
    assert cert.complementarity == 3.0 and cert.tol == 1e-7
    assert cert.active.tolist() == [True, False]
    assert list(cert.residuals) == [
        "primal_residual", "dual_residual", "stationarity", "complementarity"
    ]  # fmt: skip
    assert cert.worst == 3.0 and not cert.ok
    assert cert.summary() == (
        f"primal_residual=5.00e-01, dual_residual=0.00e+00, "
        f"stationarity={math.sqrt(1.25 / 4.25):.2e}, complementarity=3.00e+00"
    )
    with pytest.raises(svm.CertificateError) as err:
        cert.check()
    assert str(err.value) == (
        f"primal_residual=5.000e-01, stationarity={math.sqrt(1.25 / 4.25):.3e}, "
        "complementarity=3.000e+00 exceed tol=1.0e-07"
    )


def test_certify_reads_negative_multipliers_small_x_and_the_active_tolerance():
    cert = svm.certify(I2, ONES2, [0.6, 0.5], [-0.25, 0.0])
    assert cert.dual_residual == 0.25 and cert.primal_residual == 0.5
    # ‖x‖ < 1: stationarity is absolute, ‖(0.85, 0.5)‖
    assert cert.stationarity == pytest.approx(math.hypot(0.85, 0.5), rel=1e-15)
    assert cert.active.tolist() == [True, True]
    loose = svm.certify(I2, ONES2, [1.0, 1.5], [1.0, 0.0], active_tol=0.6, tol=1e-3)
    assert loose.active.tolist() == [True, True] and loose.tol == 1e-3
    strict = svm.certify(I2, ONES2, [1.0, 1.5], [1.0, 0.0], active_tol=0.2)
    assert strict.active.tolist() == [True, False]


def test_a_certificate_at_its_tolerance_passes_and_nan_never_does():
    at_tol = svm.Certificate(1e-7, 0.0, 0.0, 0.0, np.zeros(0, bool), 1e-7)
    assert at_tol.ok
    at_tol.check()
    nan = svm.Certificate(math.nan, 0.0, 0.0, 0.0, np.zeros(0, bool), 1e-7)
    assert nan.worst == math.inf and not nan.ok
    with pytest.raises(svm.CertificateError, match=r"^primal_residual=nan exceed tol=1.0e-07$"):
        nan.check()


def test_certify_names_the_argument_that_does_not_fit():
    with pytest.raises(ValueError, match=r"^x/duals: sizes 3/2 do not match A \(2, 2\)$"):
        svm.certify(I2, ONES2, [1.0, 1.0, 1.0], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"^x/duals: sizes 2/1 do not match A \(2, 2\)$"):
        svm.certify(I2, ONES2, [1.0, 1.0], [1.0])
    with pytest.raises(ValueError, match=r"^x: contains NaN or infinity$"):
        svm.certify(I2, ONES2, [1.0, math.nan], [1.0, 1.0])
    with pytest.raises(ValueError, match=r"^duals: expected 1 dimensions, got shape \(1, 2\)$"):
        svm.certify(I2, ONES2, [1.0, 1.0], [[1.0, 1.0]])
    # a matrix x is raveled (the W-SVM's vec(W))
    assert svm.certify(np.eye(4), np.ones(4), np.ones((2, 2)), np.ones(4)).ok


@pytest.mark.parametrize(
    ("A", "b", "message"),
    [
        (np.zeros((2, 0)), np.ones(2), r"^A: needs at least one column \(variable\)$"),
        (I2, np.ones(3), r"^b: length 3 does not match A's 2 rows$"),
        (I2, np.array([1.0, -1.0]), r"^b: right-hand sides must be ≥ 0 \(margins are 0 or 1\)$"),
        (np.ones(2), ONES2, r"^A: expected 2 dimensions, got shape \(2,\)$"),
        (I2, np.ones((2, 1)), r"^b: expected 1 dimensions, got shape \(2, 1\)$"),
    ],
)
def test_a_malformed_problem_is_refused_with_its_reason(A, b, message):
    with pytest.raises(ValueError, match=message):
        svm.solve_margin_qp(A, b)


def test_solve_margin_qp_checks_tol_and_method():
    with pytest.raises(ValueError, match=r"^tol: must be positive, got 0.0$"):
        svm.solve_margin_qp(I2, ONES2, tol=0.0)
    with pytest.raises(ValueError, match=r"^tol: must be positive, got nan$"):
        svm.solve_margin_qp(I2, ONES2, tol=math.nan)
    with pytest.raises(ValueError, match=r"^method: expected one of \('auto', 'reference'\), got"):
        svm.solve_margin_qp(I2, ONES2, method="fast")


def test_as_float_array_copies_and_names_its_argument():
    source = np.array([1.0, 2.0])
    arr = svm.as_float_array(source, "q")
    arr[0] = 9.0
    assert source[0] == 1.0 and arr.dtype == np.float64
    grad = torch.ones(2, dtype=F64, requires_grad=True)
    assert svm.as_float_array(grad, "q", 1).tolist() == [1.0, 1.0]
    assert svm.as_float_array([1, 2], "q").dtype == np.float64
    with pytest.raises(ValueError, match=r"^q: expected 2 dimensions, got shape \(2,\)$"):
        svm.as_float_array(source, "q", 2)
    with pytest.raises(ValueError, match=r"^q: contains NaN or infinity$"):
        svm.as_float_array([1.0, math.inf], "q")


def test_as_index_array_checks_shape_kind_and_range():
    out = svm.as_index_array(torch.tensor([0, 2]), "a", (2,), 3)
    assert out.dtype == np.int64 and out.tolist() == [0, 2]
    assert svm.as_index_array([[1, 0, 1]], "a", (None, None), 2).shape == (1, 3)
    assert svm.as_index_array(np.zeros(0), "a", (None,), 3).dtype == np.int64  # empty: any dtype
    with pytest.raises(ValueError, match=r"^a: expected shape \(2,\), got \(3,\)$"):
        svm.as_index_array([0, 1, 2], "a", (2,), 3)
    with pytest.raises(ValueError, match=r"^a: expected shape \(None, 2\), got \(2,\)$"):
        svm.as_index_array([0, 1], "a", (None, 2), 3)
    with pytest.raises(ValueError, match=r"^a: expected integers, got dtype float64$"):
        svm.as_index_array([0.0, 1.0], "a", (2,), 3)
    with pytest.raises(ValueError, match=r"^a: entries must lie in \[0, 3\)$"):
        svm.as_index_array([0, 3], "a", (2,), 3)
    with pytest.raises(ValueError, match=r"^a: entries must lie in \[0, 3\)$"):
        svm.as_index_array([-1, 0], "a", (2,), 3)


def test_an_unconstrained_problem_is_solved_by_zero():
    sol = svm.solve_margin_qp(np.zeros((0, 3)), np.zeros(0), tol=1e-5)
    assert sol.status == "optimal" and sol.solver == "trivial" and sol.reason == "no constraints"
    assert sol.x.tolist() == [0.0, 0.0, 0.0] and sol.duals.shape == (0,)
    assert sol.certificate.ok and sol.certificate.tol == 1e-5 and sol.certificate.worst == 0.0
    assert sol.margin == math.inf
    with pytest.raises(ValueError, match=r"^the solution is 0 and has no direction$"):
        _ = sol.direction


def test_the_fast_path_answers_a_hand_qp_with_its_certificate():
    sol = svm.solve_margin_qp(I2, ONES2)
    assert sol.status == "optimal" and sol.solver == svm.FAST_SOLVER == "Lawson–Hanson NNLS"
    np.testing.assert_allclose(sol.x, [1.0, 1.0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(sol.duals, [1.0, 1.0], rtol=0, atol=1e-12)
    assert (
        sol.reason == f"fast path: least-distance NNLS, KKT certified ({sol.certificate.summary()})"
    )
    assert sol.certificate.tol == 1e-7 and sol.active.tolist() == [True, True]
    assert sol.norm == pytest.approx(math.sqrt(2), rel=1e-12)
    assert sol.margin == pytest.approx(1 / math.sqrt(2), rel=1e-12)
    np.testing.assert_allclose(sol.direction, [2**-0.5, 2**-0.5], rtol=1e-12)


def test_the_fast_path_scales_its_farkas_vector_to_a_unit_maximum():
    """Rows x ≥ 1 and −x ≥ 1: NNLS gives u = (½, ½) with 1 − bᵀu = 0, and y = u/max u = (1, 1)."""
    sol = svm.solve_margin_qp(np.array([[1.0], [-1.0]]), ONES2)
    assert sol.status == "infeasible" and sol.solver == svm.FAST_SOLVER
    assert sol.x is None and sol.certificate is None and sol.active is None
    assert sol.duals.max() == 1.0
    np.testing.assert_allclose(sol.duals, [1.0, 1.0], rtol=0, atol=1e-12)
    assert sol.reason.startswith(
        "fast path: Farkas vector from Lawson–Hanson NNLS (NNLS found no point: 1 − bᵀu ≈ 0): "
        "bᵀy=2, ‖Aᵀy‖="
    )
    with pytest.raises(ValueError, match=r"^no solution \(status infeasible\): fast path"):
        _ = sol.norm


def test_the_reference_pipeline_confirms_infeasibility_with_the_lps_farkas_vector():
    sol = svm.solve_margin_qp(np.array([[1.0], [-1.0]]), ONES2, method="reference")
    assert sol.status == "infeasible" and sol.solver == "HiGHS (LP)" and sol.x is None
    assert sol.duals.tolist() == [1.0, 1.0]
    assert sol.reason.startswith("feasibility LP: ")
    assert sol.reason.endswith("; Farkas certificate bᵀy=2, ‖Aᵀy‖=0.00e+00 rules out any x")


def test_an_lp_infeasibility_the_farkas_lp_does_not_confirm_is_inaccurate():
    """On a feasible problem the Farkas LP finds y = 0 (bᵀy = 0): no certificate."""
    sol = svm._infeasible(I2, ONES2, 1e-7, "msg", "note; ")
    assert sol.status == "inaccurate" and sol.solver == "HiGHS (LP)" and sol.x is None
    assert sol.duals.tolist() == [0.0, 0.0]
    assert sol.reason == (
        "note; feasibility LP says infeasible (msg) but the Farkas LP does not confirm it "
        "(status 0, bᵀy=0, ‖Aᵀy‖=0.00e+00)"
    )


def test_the_farkas_test_accepts_a_bound_of_exactly_one_over_tol():
    A1, b1 = np.array([[0.5]]), np.array([1.0])
    assert svm._farkas_test(A1, b1, np.array([1.0]), 0.5) == (True, 1.0, 0.5)
    assert svm._farkas_test(A1, b1, np.array([1.0]), 0.4) == (False, 1.0, 0.5)
    assert svm._farkas_test(np.array([[0.0]]), b1, np.array([0.0]), 1.0) == (False, 0.0, 0.0)
    assert svm._farkas_test(A1, b1, None, 1.0) == (False, 0.0, math.inf)
    assert svm._excluded(2.0, 0.0) == "any x"
    assert svm._excluded(3.0, 1.5) == "‖x‖ < 2"


def test_the_fast_path_says_why_it_falls_through(monkeypatch):
    monkeypatch.setattr(svm, "_least_distance_multipliers", lambda A, b: None)
    assert svm._fast_path(I2, ONES2, 1e-7) == "NNLS reached its iteration limit"
    sol = svm.solve_margin_qp(I2, ONES2)
    assert sol.ok and sol.reason.startswith(
        "fast path fell through (NNLS reached its iteration limit); answered by CLARABEL; "
        "certified active-set polish"
    )


def test_a_wrong_nnls_point_falls_through_with_its_residuals(monkeypatch):
    monkeypatch.setattr(svm, "_least_distance", lambda A, b, u=None: (2 * A.T @ u, u))
    # u = (⅓, ⅓): x = (⅔, ⅔) misses the rows by ⅓, x − λ = (⅓, ⅓), λ·slack = −1/9
    assert svm._fast_path(I2, ONES2, 1e-7) == (
        "NNLS point failed the KKT certificate (primal_residual=3.33e-01, dual_residual=0.00e+00, "
        "stationarity=4.71e-01, complementarity=1.11e-01); its u fails the Farkas test (bᵀy=2, "
        "‖Aᵀy‖=1.41e+00)"
    )


def test_least_distance_solves_the_qp_from_one_nnls():
    """Rows (1, 0) ≥ 1 and (1, 1) ≥ 1: the optimum is (1, 0) with λ = (1, 0)."""
    A = np.array([[1.0, 0.0], [1.0, 1.0]])
    x, lam = svm._least_distance(A, ONES2)
    np.testing.assert_allclose(x, [1.0, 0.0], atol=1e-12)
    np.testing.assert_allclose(lam, [1.0, 0.0], atol=1e-12)
    assert svm._least_distance(np.array([[1.0], [-1.0]]), ONES2) is None  # 1 − bᵀu = 0
    u = svm._least_distance_multipliers(A, ONES2)  # λ(1 − bᵀu) = u with bᵀu = ½
    np.testing.assert_allclose(u, [0.5, 0.0], atol=1e-12)


def test_polish_solves_on_the_active_rows_or_gives_up():
    A = np.array([[1.0, 0.0], [1.0, 1.0]])
    x, lam = svm._polish(A, ONES2, np.array([1.0 + 1e-8, 1e-9]), np.array([1.0, 0.0]))
    np.testing.assert_allclose(x, [1.0, 0.0], atol=1e-15)
    np.testing.assert_allclose(lam, [1.0, 0.0], atol=1e-15)
    # no row within ACTIVE_TOL and no multiplier above its slack: nothing to polish on
    assert svm._polish(A, ONES2, np.array([5.0, 5.0]), np.zeros(2)) is None
    # the wrong active set (row 1 alone: x = (½, ½)) leaves row 0 violated: refused
    assert svm._polish(A, ONES2, np.array([2.0, -1.0]), np.zeros(2)) is None
    assert svm.ACTIVE_TOL == 1e-6 and svm.POLISH_FEASIBILITY_TOL == 1e-10


def test_certified_tries_polish_then_nnls_then_the_solver_point(monkeypatch):
    sol = svm._certified(I2, ONES2, np.ones(2), np.ones(2), 1e-7, "S", "log")
    assert (sol.status, sol.solver, sol.reason) == (
        "optimal",
        "S",
        "log; certified active-set polish",
    )
    assert sol.certificate.tol == 1e-7
    far = svm._certified(I2, ONES2, np.full(2, 5.0), np.zeros(2), 1e-6, "S", "log")
    assert far.reason == "log; certified least-distance NNLS" and far.certificate.tol == 1e-6
    np.testing.assert_allclose(far.x, [1.0, 1.0], atol=1e-12)
    monkeypatch.setattr(svm, "_polish", lambda *args: None)
    monkeypatch.setattr(svm, "_least_distance", lambda *args: None)
    own = svm._certified(I2, ONES2, np.ones(2), np.ones(2), 1e-7, "S", "log")
    assert own.reason == "log; certified solver point" and own.x.tolist() == [1.0, 1.0]
    bad = svm._certified(I2, ONES2, np.full(2, 5.0), np.zeros(2), 1e-7, "S", "log")
    assert bad.status == "inaccurate" and bad.x.tolist() == [5.0, 5.0]
    assert bad.reason == (
        f"log; no point passed the KKT certificate (best: solver point: "
        f"{bad.certificate.summary()})"
    )


def test_certified_reports_the_best_of_the_failing_candidates(monkeypatch):
    monkeypatch.setattr(svm, "_polish", lambda *args: (np.array([1.0, 0.9]), np.ones(2)))
    monkeypatch.setattr(svm, "_least_distance", lambda *args: (np.array([1.0, 0.5]), np.ones(2)))
    bad = svm._certified(I2, ONES2, np.full(2, 5.0), np.zeros(2), 1e-7, "S", "log")
    assert bad.x.tolist() == [1.0, 0.9] and "(best: active-set polish: " in bad.reason
    assert bad.certificate.primal_residual == pytest.approx(0.1, abs=1e-15)


def test_solve_qp_logs_each_solver_that_failed(monkeypatch):
    import cvxpy as cp

    solver, x, duals, log = svm._solve_qp(I2, ONES2)
    assert (solver, log) == (cp.CLARABEL, "answered by CLARABEL")
    np.testing.assert_allclose(x, [1.0, 1.0], atol=1e-6)
    np.testing.assert_allclose(duals, [1.0, 1.0], atol=1e-6)
    assert x.dtype == np.float64 and duals.dtype == np.float64
    real = cp.Problem.solve

    def failing(names):
        def solve(self, *args, solver=None, **kwargs):
            if solver in names:
                raise cp.error.SolverError("boom")
            return real(self, *args, solver=solver, **kwargs)

        return solve

    monkeypatch.setattr(cp.Problem, "solve", failing({cp.CLARABEL}))
    assert svm._solve_qp(I2, ONES2)[3] == "CLARABEL: SolverError: boom; answered by SCS"
    monkeypatch.setattr(cp.Problem, "solve", failing({cp.CLARABEL, cp.SCS, cp.OSQP}))
    assert svm._solve_qp(I2, ONES2) == (
        "CLARABEL: SolverError: boom; SCS: SolverError: boom; OSQP: SolverError: boom"
    )
    sol = svm.solve_margin_qp(I2, ONES2, method="reference")
    assert sol.status == "solver_error" and sol.solver == "none" and sol.x is None
    assert (
        sol.reason == "CLARABEL: SolverError: boom; SCS: SolverError: boom; OSQP: SolverError: boom"
    )


def test_an_inaccurate_point_is_kept_only_when_no_solver_is_optimal(monkeypatch):
    import cvxpy as cp

    def inaccurate(self, *args, solver=None, **kwargs):
        for var in self.variables():
            var.value = np.ones(var.shape)
        self.constraints[0].dual_variables[0].value = None  # a solver without duals
        self._status = "optimal_inaccurate"

    monkeypatch.setattr(cp.Problem, "solve", inaccurate)
    solver, x, duals, log = svm._solve_qp(I2, ONES2)
    assert solver == cp.CLARABEL and x.tolist() == [1.0, 1.0]
    assert np.isnan(duals).all() and duals.shape == (2,)
    assert log == (
        "CLARABEL: status optimal_inaccurate; SCS: status optimal_inaccurate; "
        "OSQP: status optimal_inaccurate; answered by CLARABEL (optimal_inaccurate)"
    )


def test_att_constraints_build_rows_rhs_and_labels():
    keys = np.array([[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], [[2.0, 2.0], [1.0, 2.0], [0.0, 0.0]]])
    A, b, rows = svm.att_constraints(keys, [0, 1], relaxed_inputs=np.array([False, True]))
    assert rows == ((0, 1), (0, 2), (1, 0), (1, 2))
    np.testing.assert_array_equal(A, [[1, 0], [1, -1], [-1, 0], [1, 2]])
    assert b.tolist() == [1.0, 1.0, 0.0, 0.0]
    free = np.zeros((2, 3), bool)
    free[0, 2] = True
    assert svm.att_constraints(keys, [0, 1], free=free)[2] == ((0, 1), (1, 0), (1, 2))
    A0, b0, rows0 = svm.att_constraints(keys[:1], [0], free=np.ones((1, 3), bool))
    assert A0.shape == (0, 2) and b0.shape == (0,) and rows0 == ()
    with pytest.raises(ValueError, match=r"^relaxed_inputs: expected a boolean mask of shape"):
        svm.att_constraints(keys, [0, 1], relaxed_inputs=np.array([0, 1]))
    with pytest.raises(ValueError, match=r"^free: expected a boolean mask of shape \(2, 3\)$"):
        svm.att_constraints(keys, [0, 1], free=np.zeros((2, 2), bool))


def test_first_occurrences_keep_each_distinct_row_rhs_pair_once():
    A = np.array([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [-0.0, 1.0]])
    b = np.array([1.0, 1.0, 1.0, 0.0, 1.0])
    assert svm._first_occurrences(A, b).tolist() == [0, 2, 3]
    assert svm._first_occurrences(np.array([[3.0], [1.0], [2.0]]), np.ones(3)).tolist() == [0, 1, 2]
    A2, b2, labels = svm._dedupe(A, b, ["a", "b", "c", "d", "e"])
    assert labels == ("a", "c", "d") and A2.shape == (3, 2) and b2.tolist() == [1.0, 1.0, 0.0]
    assert svm._dedupe(np.zeros((0, 2)), np.zeros(0), [])[2] == ()


def test_tied_tokens_are_exact_ties_other_than_alpha():
    tied = svm.tied_tokens([[1.0, 1.0, 0.5], [2.0, 2.0 - 1e-15, 2.0]], [0, 2])
    assert tied.tolist() == [[False, True, False], [True, False, False]]


def test_att_svm_reports_its_rows_and_tol():
    keys = np.array([[[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]])
    sol = svm.att_svm(keys, [0], tol=1e-6)
    assert sol.rows == ((0, 1), (0, 2)) and sol.certificate.tol == 1e-6
    np.testing.assert_allclose(sol.x, [1.0, -0.0], atol=1e-12)  # row (1, −2): margin 1 at p1 = 1
    assert svm.att_svm(keys, [0]).certificate.tol == 1e-7


def test_the_w_svm_closed_form_divides_by_the_squared_norm_of_p():
    """x0 = (1, 0), x1 = 0, α = 0: q = (1, 0) with μ = 1; p = (0, 2): W = q pᵀ/4, duals 1/4."""
    X = np.array([[[1.0, 0.0], [0.0, 0.0]]])
    p = np.array([0.0, 2.0])
    sol = svm.w_svm_closed_form(X, p, [0])
    assert sol.status == "optimal" and sol.solver == "closed form via Lawson–Hanson NNLS"
    np.testing.assert_allclose(sol.x, [[0.0, 0.5], [0.0, 0.0]], atol=1e-12)
    np.testing.assert_allclose(sol.duals, [0.25], atol=1e-12)
    assert sol.rows == ((0, 1),) and sol.certificate.tol == 1e-7
    q = svm.att_svm(X, [0])
    assert sol.reason == (
        f"ATT-SVM: optimal ({q.reason}); W certificate: {sol.certificate.summary()}"
    )
    generic = svm.w_svm(X, p, [0], method="reference")
    np.testing.assert_allclose(sol.x, generic.x, atol=1e-9)
    ref = svm.w_svm_closed_form(X, p, [0], tol=1e-5, method="reference")
    assert ref.solver == "closed form via CLARABEL" and ref.certificate.tol == 1e-5


def test_the_w_svm_closed_form_hands_over_infeasible_and_zero_p_cases():
    X = np.array([[[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]])
    infeasible = svm.w_svm_closed_form(X, np.array([0.0, 2.0]), [0])
    assert infeasible.status == "infeasible" and infeasible.x is None
    assert infeasible.solver == "closed form via Lawson–Hanson NNLS"
    assert infeasible.rows == ((0, 1), (0, 2))
    X1 = np.array([[[1.0, 0.0], [0.0, 0.0]]])
    zero_p = svm.w_svm_closed_form(X1, np.zeros(2), [0], tol=1e-5, method="reference")
    assert zero_p.status == "infeasible" and zero_p.solver == "HiGHS (LP)"


def test_the_w_svm_reshapes_its_solution_to_d_by_len_p():
    X = np.array([[[1.0, 0.0], [0.0, 0.0]]])
    sol = svm.w_svm(X, [0.0, 0.0, 2.0], [0])
    assert sol.x.shape == (2, 3) and sol.rows == ((0, 1),) and sol.certificate.tol == 1e-7
    np.testing.assert_allclose(sol.x, [[0.0, 0.0, 0.5], [0.0, 0.0, 0.0]], atol=1e-12)


def test_the_cls_svm_rows_are_distinct_tokens_other_than_the_selected_one():
    """E0 = (1, 0), E1 = 0, E2 = (0, 1). Sequence 0 (0, 1, 0) selects 0: row E0 − E1;
    sequence 1 (2, 0, 1) selects 2: rows E2 − E0, E2 − E1. Optimum p = (1, 2)."""
    E = np.array([[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]])
    sol = svm.cls_svm(E, [[0, 1, 0], [2, 0, 1]], [0, 2])
    assert sol.rows == ((0, 1), (1, 0), (1, 1)) and sol.certificate.tol == 1e-7
    np.testing.assert_allclose(sol.x, [1.0, 2.0], atol=1e-12)
    dup = svm.cls_svm(E, [[0, 1, 1], [1, 0, 1]], [0, 0], tol=1e-5)
    assert dup.rows == ((0, 1),) and dup.certificate.tol == 1e-5
    with pytest.raises(ValueError, match=r"^s_star: token 2 does not occur in sequence 0$"):
        svm.cls_svm(E, [[0, 1]], [2])
    with pytest.raises(ValueError, match=r"^E: expected 2 dimensions"):
        svm.cls_svm(E[None], [[0, 1]], [0])


def test_the_v_svm_labels_rows_by_sample_and_checks_labels():
    sol = svm.v_svm([[1.0, 0.0], [0.0, 1.0]], [1.0, -1.0])
    np.testing.assert_allclose(sol.x, [1.0, -1.0], atol=1e-12)
    assert sol.rows == (0, 1) and sol.certificate.tol == 1e-7
    with pytest.raises(ValueError, match=r"^y: expected 2 labels in \{-1, \+1\}$"):
        svm.v_svm([[1.0, 0.0], [0.0, 1.0]], [1.0, 0.0])
    with pytest.raises(ValueError, match=r"^y: expected 2 labels in \{-1, \+1\}$"):
        svm.v_svm([[1.0, 0.0], [0.0, 1.0]], [1.0])


def test_statuses_and_reasons_are_checked_on_construction():
    assert svm.checked_status("optimal") == "optimal"
    with pytest.raises(ValueError, match=r"^status: expected one of \('a',\), got 'b'$"):
        svm.checked_status("b", ("a",))
    with pytest.raises(ValueError, match=r"^reason: expected a string, got 3$"):
        SVMSolution("optimal", None, None, None, "s", 3)
    svm.checked_outcome("a", "", ("a",))


# =============================================================================================
# models.check.precision
# =============================================================================================

NEAR_ONE = 1.0 + 2.0**-50  # differs from 1 by 2^-50 ≈ 8.9e-16, below 1000·2^-52 ≈ 2.2e-13


def test_the_documented_thresholds():
    assert precision.EPS == 2.0**-52 and precision.RESOLUTION == 1e3
    assert precision.LARGEST == 1e150 and precision.SMALLEST == 1e-150
    assert precision._UNIT == "1000·2^-52"


def test_a_key_difference_below_the_resolution_is_named_with_its_sizes():
    X = np.array([[[1.0, 0.0], [NEAR_ONE, 0.0]]])
    assert precision.prompt(X, np.array([0.0, 1.0])) == (
        "precision: the keys x·W of tokens 0 and 1 of input 0 differ by 8.9e-16, below "
        "float64's resolution 2.2e-13 (1000·2^-52 of their magnitude 1.0e+00)"
    )


def test_the_magnitude_is_that_of_the_larger_token_and_its_largest_key():
    """Keys (1, 3) and (1 + 2^-50, 3): the magnitude is the largest |x|·|W| entry, 3."""
    X = np.array([[[1.0, 1.0], [1.0, NEAR_ONE]]])
    W = np.array([[0.0, 3.0], [1.0, 0.0]])  # keys (1, 3) and (1 + 2^-50, 3)
    assert precision.prompt(X, np.zeros(2), W) == (
        "precision: the keys x·W of tokens 0 and 1 of input 0 differ by 8.9e-16, below "
        "float64's resolution 6.7e-13 (1000·2^-52 of their magnitude 3.0e+00)"
    )


def test_an_exact_tie_of_different_tokens_is_no_precision_problem():
    X = np.array([[[1.0, 0.0], [1.0, 5.0]]])
    W = np.array([[1.0], [0.0]])  # both keys are 1 exactly
    assert precision.prompt(X, np.array([0.0, 1.0]), W) is None
    assert precision._exact_zero(X[0, 0], X[0, 1], W)
    assert not precision._exact_zero(X[0, 0], X[0, 1], np.array([[1.0], [1e-300]]))


def test_scores_are_checked_after_the_keys_and_in_the_second_input():
    X = np.array([[[1.0, 0.0], [2.0, 0.0]], [[0.0, 1.0], [0.0, NEAR_ONE]]])
    assert precision.prompt(X, np.array([0.0, 1.0]), np.array([[1.0], [0.0]])) == (
        "precision: the scores x·v of tokens 0 and 1 of input 1 differ by 8.9e-16, below "
        "float64's resolution 2.2e-13 (1000·2^-52 of their magnitude 1.0e+00)"
    )


def test_keys_that_overflow_or_underflow_are_named():
    big = np.array([[[1e200, 0.0], [0.0, 1.0]]])
    assert precision.prompt(big, np.zeros(2), np.eye(2) * 1e200) == (
        "precision: the keys x·W of input 0 overflow float64"
    )
    tiny = np.array([[[1e-200, 0.0], [2e-200, 0.0]]])
    assert precision.prompt(tiny, np.zeros(2), np.eye(2) * 1e-200) == (
        "precision: the keys x·W of tokens 0 and 1 of input 0 underflow float64 (their exact "
        "difference is not 0)"
    )


def test_keys_beyond_largest_or_differences_below_smallest_are_refused_only_for_keys():
    far = np.array([[[2e150, 0.0], [0.0, 0.0]]])
    assert precision.prompt(far, np.zeros(2)) == (
        "precision: the keys x·W of input 0 reach 2.0e+150, beyond 1e+150: the SVMs' squares "
        "of them overflow float64"
    )
    assert precision.prompt(np.array([[[1e150, 0.0], [0.0, 0.0]]]), np.zeros(2)) is None
    close = np.array([[[0.0, 0.0], [1e-160, 0.0]]])
    assert precision.prompt(close, np.zeros(2)) == (
        "precision: the keys x·W of tokens 0 and 1 of input 0 differ by only 1.0e-160 (< 1e-150): "
        "the squared norm of an SVM solution separating them overflows float64"
    )
    # the same sizes in the scores (not squared by any SVM) are fine
    X = np.array([[[0.0, 0.0], [1.0, 0.0]]])
    assert precision.prompt(X, np.array([1e-160, 0.0])) is None
    assert precision.prompt(X, np.array([2e150, 0.0])) is None


def test_the_initial_point_is_checked_last():
    X = np.array([[[1.0, 0.0], [0.0, 1.0]]])
    v = np.zeros(2)
    assert (
        precision.prompt(X, v, p0=[2e150, 0.0]) == "precision: p0 reaches 2.0e+150, beyond 1e+150"
    )
    assert precision.prompt(X, v, p0=[1e150, 0.0]) is None
    assert precision.prompt(X, v, p0=[math.nan, 0.0]) == (
        "precision: the initial logits x·W·p0 overflow float64"
    )
    assert precision.prompt(X, v, p0=torch.zeros(2, dtype=F64)) is None


def test_cross_keys_are_checked_per_input_with_the_query():
    z = np.array([[3.0], [1.0]])
    X = np.array([[[1.0], [NEAR_ONE]], [[0.0], [1.0]]])
    assert precision.cross(X, z, np.zeros(1)) == (
        "precision: the keys x·zᵀ of tokens 0 and 1 of input 0 differ by 2.7e-15, below "
        "float64's resolution 6.7e-13 (1000·2^-52 of their magnitude 3.0e+00)"
    )
    assert precision.cross(X, np.array([[0.0], [1.0]]), np.zeros(1)) is None  # z = 0: exact ties
    assert precision.cross(X[::-1], z[::-1], np.zeros(1)) == (
        "precision: the keys x·zᵀ of tokens 0 and 1 of input 1 differ by 2.7e-15, below "
        "float64's resolution 6.7e-13 (1000·2^-52 of their magnitude 3.0e+00)"
    )
    scores = np.array([[[1.0, 0.0], [NEAR_ONE, 5.0]]])  # keys 5 apart, scores 2^-50 apart
    assert precision.cross(scores, np.array([[1.0]]), np.array([1.0, 0.0])) == (
        "precision: the scores x·v of tokens 0 and 1 of input 0 differ by 8.9e-16, below "
        "float64's resolution 2.2e-13 (1000·2^-52 of their magnitude 1.0e+00)"
    )


def test_outer_keys_refuse_overflow_size_and_tiny_differences():
    assert precision._outer_keys(np.array([[1e300], [0.0]]), np.array([1e10]), "here") == (
        "precision: the keys x·zᵀ of here overflow float64"
    )
    assert precision._outer_keys(np.array([[1e150], [0.0]]), np.array([2.0]), "here") == (
        "precision: the keys x·zᵀ of here reach 2.0e+150, beyond 1e+150: the SVMs' squares of "
        "them overflow float64"
    )
    assert precision._outer_keys(np.array([[1e150], [0.0]]), np.array([1.0]), "here") is None
    assert precision._outer_keys(np.array([[0.0], [1e-100]]), np.array([1e-60]), "here") == (
        "precision: the keys x·zᵀ of tokens 0 and 1 of here differ by only 1.0e-160 (< 1e-150): "
        "the squared norm of an SVM solution separating them overflows float64"
    )
    assert precision._outer_keys(np.array([[0.0], [1e-100]]), np.array([1e-50]), "here") is None


def test_pairs_enumerate_every_pair_in_blocks(monkeypatch):
    pairs = [(r.tolist(), c.tolist()) for r, c in precision._pairs(3, 1)]
    assert pairs == [([0, 0, 1], [1, 2, 2])]
    monkeypatch.setattr(precision, "_BLOCK", 4)
    blocks = [(r.tolist(), c.tolist()) for r, c in precision._pairs(4, 2)]
    assert blocks == [([0, 0], [1, 2]), ([0, 1], [3, 2]), ([1, 2], [3, 3])]
    assert [r.tolist() for r, _ in precision._pairs(3, 10)] == [[0], [0], [1]]
    assert list(precision._pairs(1, 1)) == []


def test_ntp_checks_each_sequence_against_its_last_token():
    E = np.array([[5.0, 0.0], [1.0, 0.0], [NEAR_ONE, 0.0], [0.0, 1.0], [0.0, 0.0]])
    assert precision.ntp(E, [[0, 3], [1, 2, 3]]).startswith(
        "precision: the keys x·zᵀ of tokens 1 and 2 of sequence 1 differ by 8.9e-16"
    )
    assert precision.ntp(E, [[1, 2, 4]]) is None  # the query x_4 = 0: every key is 0
    assert precision.ntp(E, [[0, 3], [3, 0]]) is None


def test_ntp_names_the_offending_tokens_by_id():
    """Sequence (3, 2, 5, 1) with query x_1: tokens 1 and 2 (positions 3 and 1) have keys
    2^-50 apart. (The reason once said "tokens 0 and 1", their ranks among {1, 2, 3, 5}.)"""
    E = np.array([[9.0, 9.0], [1.0, 0.0], [NEAR_ONE, 0.0], [0.0, 1.0], [7.0, 7.0], [5.0, 0.0]])
    reason = precision.ntp(E, [[3, 2, 5, 1]])
    assert reason.startswith("precision: the keys x·zᵀ of tokens ")
    assert "of tokens 1 and 2 of sequence 0 differ by" in reason, reason


def test_ntp_linear_checks_each_context_column():
    assert precision.ntp_linear(np.array([[1.0, 2e150]])) == (
        "precision: context 1 reaches 2.0e+150, beyond 1e+150: the SVM's squares of it "
        "overflow float64"
    )
    assert precision.ntp_linear(np.array([[1.0, 1e-160], [0.0, 0.0]])) == (
        "precision: context 1 is only 1.0e-160 (< 1e-150): an SVM solution separating on it has "
        "a squared norm beyond float64"
    )
    assert precision.ntp_linear(np.array([[1.0, math.inf]])) == (
        "precision: a context embedding h̄_j is not finite"
    )
    assert precision.ntp_linear(np.array([[1e150, 0.0, 1e-150]])) is None


def test_embedding_scores_must_be_finite():
    E0 = np.array([[1.0, 0.0], [1e200, 0.0]])
    assert precision.embedding_scores(E0, np.array([1e200, 0.0])) == (
        "precision: the score ⟨E⁰_s, v⟩ of token 1 overflows float64"
    )
    assert precision.embedding_scores(E0, np.array([1.0, 0.0])) is None
    assert precision.embedding_scores(torch.ones(2, 2, dtype=F64), torch.ones(2, dtype=F64)) is None


def test_the_embedding_step_must_keep_e0_differences():
    """η0 = 1e300 on unit rows: token 0's step has magnitude 1e300, so its E⁰ difference of 1
    to token 1 is below the resolution 2.2e287 of E¹."""
    E0 = np.array([[1.0, 0.0], [0.0, 1.0]])
    grad = np.array([[1.0, 0.0], [0.0, 0.0]])
    E1 = E0 - 1e300 * grad
    assert precision.embedding([[0, 1]], E0, 1e300, grad, E1) == (
        "precision: the E⁰ rows of tokens 0 and 1 (sequence 0) differ by 1.0e+00, below "
        "float64's resolution 2.2e+287 of E¹ = E⁰ − η0·∇E (1000·2^-52 of its magnitude "
        "1.0e+300): E¹ loses their difference"
    )
    assert precision.embedding([[0, 1]], E0, 1.0, grad, E0 - grad) is None


def test_the_embedding_step_must_resolve_e1_differences_unless_exactly_tied():
    E0 = np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]])
    E1 = np.array([[1.0, 1.0], [1.0, NEAR_ONE], [0.0, 0.0]])
    assert precision.embedding([[2, 2], [0, 1]], E0, 1.0, np.zeros((3, 2)), E1) == (
        "precision: the E¹ rows of tokens 0 and 1 (sequence 1) differ by 8.9e-16, below "
        "float64's resolution 2.2e-13 (1000·2^-52 of their magnitude 1.0e+00)"
    )
    tied = np.array([[1.0, 0.0], [1.0, 0.0]])
    assert precision.embedding([[0, 1]], tied, 1.0, np.ones((2, 2)), tied - 1.0) is None
    # equal E⁰ rows but different gradients: the E¹ rows must differ
    assert precision.embedding([[0, 1]], tied, 1.0, np.eye(2), tied).startswith(
        "precision: the E¹ rows of tokens 0 and 1 (sequence 0) differ by 0.0e+00"
    )


def test_the_embedding_step_must_stay_inside_float64s_squares():
    E0 = np.array([[0.0, 0.0], [1e-160, 0.0]])
    assert precision.embedding([[0, 1]], E0, 1.0, np.zeros((2, 2)), E0) == (
        "precision: the E¹ rows of tokens 0 and 1 (sequence 0) differ by only 1.0e-160 "
        "(< 1e-150): the squared norm of an SVM solution separating them overflows float64"
    )
    E1 = np.array([[2e150, 0.0], [0.0, 0.0], [1e300, 0.0]])
    assert precision.embedding([[0, 1]], E1, 1.0, np.zeros((3, 2)), E1) == (
        "precision: E¹ = E⁰ − η0·∇E reaches 2.0e+150, beyond 1e+150: the SVM's squares of it "
        "overflow float64"
    )
    E1[0, 0] = 1e150
    assert precision.embedding([[0, 1]], E1, 1.0, np.zeros((3, 2)), E1) is None  # token 2 unused
    E1[1, 1] = math.inf
    assert precision.embedding([[0, 1]], E1, 1.0, np.zeros((3, 2)), E1) == (
        "precision: E¹ = E⁰ − η0·∇E overflows float64 (token 1)"
    )


# =============================================================================================
# models.numerics.failures
# =============================================================================================


def test_a_failure_prints_its_key_and_detail():
    failure = failures.Failure(failures.NUMERICS, "nan", "at step 3")
    assert failure.key == "numerics: nan" and str(failure) == "numerics: nan (at step 3)"
    assert str(failures.Failure(failures.MEMORY, "out of memory")) == "memory: out of memory"
    assert failures.SOURCES == (
        "SVM oracle", "gradient flow", "regularization path", "numerics", "solver exception",
        "memory",
    )  # fmt: skip


def test_a_watch_is_true_once_something_was_reported():
    with failures.watch() as w:
        assert not w and w.first is None
        failures.report(failures.NUMERICS, "nan", "a  b\n   c")
        failures.report(failures.REG_PATH, "stalled", 3)
        assert w
    assert w.failures == [
        failures.Failure("numerics", "nan", "a b c"),
        failures.Failure("regularization path", "stalled", "3"),
    ]
    assert w.first == w.failures[0] and w.tolerated == []


def test_tolerated_failures_are_kept_apart_only_inside_the_block():
    with failures.watch() as w:
        with failures.tolerate(failures.NUMERICS, failures.MEMORY):
            failures.report(failures.MEMORY, "out of memory")
            failures.report(failures.SVM_ORACLE, "inaccurate")
        failures.report(failures.MEMORY, "again")
    assert [f.key for f in w.tolerated] == ["memory: out of memory"]
    assert [f.key for f in w.failures] == ["SVM oracle: inaccurate", "memory: again"]
    assert not w.tolerated[0].detail
    with pytest.raises(ValueError, match=r"^tolerate: unknown failure sources \['rain', 'snow'\]$"):
        with failures.tolerate(failures.NUMERICS, "snow", "rain"):
            pass


def test_a_malformed_report_is_refused():
    with pytest.raises(ValueError, match=r"^source: expected one of .*, got 'x'$"):
        failures.report("x", "what")
    with pytest.raises(ValueError, match=r"^what: a failure needs its reason, got '  '$"):
        failures.report(failures.NUMERICS, "  ")
    with pytest.raises(ValueError, match=r"^what: a failure needs its reason, got None$"):
        failures.report(failures.NUMERICS, None)


@pytest.mark.parametrize(
    ("path", "library"),
    [
        ("/usr/lib/python3/site-packages/scipy/optimize/_nnls.py", "scipy"),
        ("/usr/lib/python3/dist-packages/osqp/interface.py", "osqp"),
        ("/venv/site-packages/cvxpy.libs/loader.py", "cvxpy"),
        ("/venv/site-packages/scipy.py", "scipy"),
        ("/venv/site-packages/numpy/linalg.py", None),
        ("/venv/scipy/site-packages", None),
        ("/src/scipy/optimize.py", None),
    ],
)
def test_the_library_of_a_file_is_the_package_below_site_packages(path, library):
    assert failures._library_of(path) == library


def _raised_in(filename: str, exc: BaseException) -> BaseException:
    code = compile("def boom(exc):\n    raise exc\n", filename, "exec")
    space: dict = {}
    exec(code, space)
    try:
        space["boom"](exc)
    except BaseException as caught:  # noqa: BLE001
        return caught
    raise AssertionError("not raised")


def test_an_exception_raised_inside_a_library_is_a_solver_exception():
    exc = _raised_in("/venv/site-packages/highspy/run.py", KeyError("first\nsecond"))
    assert failures.from_exception(exc) == failures.Failure(
        "solver exception", "KeyError in highspy", "'first\\nsecond'"
    )
    exc = _raised_in("/venv/site-packages/scs/run.py", ValueError("  one line \n two "))
    assert failures.from_exception(exc).detail == "one line "  # the first line, as written
    assert failures.from_exception(_raised_in("/src/mine.py", ValueError("x"))) is None
    assert failures.from_exception(ValueError("never raised")) is None


def test_an_exception_class_of_a_library_is_a_solver_exception():
    cls = type("SolverTrouble", (Exception,), {"__module__": "clarabel.core"})
    assert failures.from_exception(cls("bad\nworse")) == failures.Failure(
        "solver exception", "SolverTrouble", "bad"
    )
    assert failures.from_exception(cls()) == failures.Failure(
        "solver exception", "SolverTrouble", ""
    )
    mine = type("LinAlgError", (Exception,), {"__module__": "mine"})
    assert failures.from_exception(mine("singular")).key == "solver exception: LinAlgError"
    other = type("Trouble", (Exception,), {"__module__": "mine"})
    assert failures.from_exception(other("x")) is None


def test_an_allocation_failure_is_a_memory_failure_with_a_short_detail():
    assert failures.from_exception(MemoryError("no room\nat all")) == failures.Failure(
        "memory", "out of memory", "no room"
    )
    assert failures.from_exception(MemoryError()) == failures.Failure("memory", "out of memory")
    cpu = RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried " + "9" * 300)
    found = failures.from_exception(cpu)
    assert found.source == "memory" and len(found.detail) == 200
    assert found.detail == str(cpu)[:200]
    assert failures.from_exception(RuntimeError("CUDA out of memory.")).what == "out of memory"
    assert failures.from_exception(RuntimeError("shape mismatch")) is None
    assert failures.from_exception(ValueError("out of memory")) is None
    assert failures.from_exception(AssertionError("out of memory")) is None


# =============================================================================================
# models.problems.heads
# =============================================================================================


def test_the_quadratic_forms_of_the_quadratic_heads_are_float64_whatever_the_default():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        forms = {
            "square": heads.quadratic_form(heads.squared_norm, 3),
            "bump": heads.quadratic_form(heads.concave_bump, 3),
            "saddle": heads.quadratic_form(heads.saddle_square, 3),
            "saddle2": heads.quadratic_form(heads.saddle_square, 2),
        }
    finally:
        torch.set_default_dtype(before)
    expected = {
        "square": [1.0, 1.0, 1.0],
        "bump": [-1.0, -1.0, -1.0],
        "saddle": [1.0, -1.0, 0.0],
        "saddle2": [1.0, -1.0],
    }
    for name, form in forms.items():
        assert form.dtype == F64 and form.tolist() == expected[name], name
    assert heads.quadratic_form(heads.saddle_square, 1) is None
    assert heads.quadratic_form(heads.small_mlp(3), 3) is None


def test_the_quadratic_forms_are_the_heads_hessians_over_two():
    u = torch.tensor([0.3, -1.2, 2.0], dtype=F64)
    for psi in (heads.squared_norm, heads.concave_bump, heads.saddle_square):
        hessian = torch.autograd.functional.hessian(psi, u)
        torch.testing.assert_close(hessian, torch.diag(2 * heads.quadratic_form(psi, 3)))
    assert float(heads.concave_bump(torch.zeros(3, dtype=F64))) == 2.0
    assert float(heads.saddle_square(u)) == pytest.approx(0.09 - 1.44, abs=1e-15)


def test_small_mlp_is_seeded_float64_and_independent_of_the_default_dtype():
    u = torch.tensor([[0.5, -1.0], [2.0, 0.25]], dtype=F64)
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        made_in_float32 = heads.small_mlp(2, hidden=5, seed=3)
    finally:
        torch.set_default_dtype(before)
    mlp = heads.small_mlp(2, hidden=5, seed=3)
    assert mlp(u).dtype == F64 and mlp(u).shape == (2,)
    assert torch.equal(made_in_float32(u), mlp(u))
    assert torch.equal(heads.small_mlp(2, hidden=5, seed=3)(u), mlp(u))
    assert not torch.equal(heads.small_mlp(2, hidden=5, seed=4)(u), mlp(u))
    assert not torch.equal(heads.small_mlp(2, hidden=6, seed=3)(u), mlp(u))
    assert torch.equal(heads.small_mlp(2)(u), heads.small_mlp(2, 8, 0)(u))


def test_small_mlp_output_weights_have_variance_one_over_hidden():
    """Saturated (u = 1e6), f = Σ_j ±w2_j with w2_j ~ N(0, 1/hidden): f ~ N(0, 1)."""
    u = torch.tensor([1e6], dtype=F64)
    values = torch.stack([heads.small_mlp(1, hidden=2048, seed=s)(u) for s in range(24)])
    assert 0.3 < float((values**2).mean()) < 3.0


def _head_problem(psi=heads.squared_norm, loss="logistic", y=(1.0, -1.0), W=None):
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[2.0, 0.0], [0.0, 0.0]]], dtype=F64)
    return heads.NonlinearHeadProblem(X, torch.tensor(y, dtype=F64), W, psi=psi, loss=loss)


def test_the_margins_are_y_times_psi_of_the_attended_mixture():
    """p = (log 3, 0): input 0 attends (¾, ¼), mixture (¾, ¼), ψ = 10/16; input 1 (logits
    2·log 3 and 0) attends (9/10, 1/10) to (2, 0) and 0, mixture (1.8, 0), ψ = 3.24, Y = −1."""
    problem = _head_problem()
    P = torch.tensor([[math.log(3.0), 0.0], [0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(
        problem.softmax_path(P),
        torch.tensor([[[0.75, 0.25], [0.9, 0.1]], [[0.5, 0.5], [0.5, 0.5]]], dtype=F64),
    )
    margins = problem.margins_path(P)
    torch.testing.assert_close(
        margins, torch.tensor([[10 / 16, -3.24], [0.5, -1.0]], dtype=F64), rtol=0, atol=1e-14
    )
    expected = 0.5 * (math.log1p(math.exp(-10 / 16)) + math.log1p(math.exp(3.24)))
    assert float(problem.loss_value(P[0])) == pytest.approx(expected, rel=1e-14)
    assert problem.loss_path(P)[0] == problem.loss_value(P[0])
    exp_problem = _head_problem(loss="exponential")
    expected = 0.5 * (math.exp(-10 / 16) + math.exp(3.24))
    assert float(exp_problem.loss_value(P[0])) == pytest.approx(expected, rel=1e-14)
    assert exp_problem.loss.name == "exponential"


def test_token_scores_and_the_psi_optimal_tokens():
    problem = _head_problem(y=(1.0, -1.0))
    assert problem.token_scores().tolist() == [[1.0, 1.0], [-4.0, 0.0]]
    assert problem.psi_optimal_tokens().tolist() == [0, 1]
    assert problem.quadratic_form().tolist() == [1.0, 1.0]
    assert _head_problem(psi=heads.small_mlp(2)).quadratic_form() is None


def test_psi_of_squeezes_a_trailing_singleton_and_checks_the_shape():
    problem = _head_problem(psi=lambda u: (u**2).sum(-1, keepdim=True))
    assert problem.token_scores().tolist() == [[1.0, 1.0], [-4.0, 0.0]]
    bad = _head_problem(psi=lambda u: u)
    with pytest.raises(ValueError, match=r"^psi: expected output shape \(2, 2\), got torch.Size"):
        bad.token_scores()


def test_the_default_key_matrix_is_the_float64_identity_whatever_the_default_dtype():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        problem = _head_problem()
    finally:
        torch.set_default_dtype(before)
    assert problem.W.dtype == F64 and torch.equal(problem.W, torch.eye(2, dtype=F64))
    assert torch.equal(problem.keys, problem.X)
    wide = _head_problem(W=torch.tensor([[1.0, 0.0, 2.0], [0.0, 1.0, 0.0]], dtype=F64))
    assert wide.dim == 3 and wide.keys[1, 0].tolist() == [2.0, 0.0, 4.0]


def test_the_head_problem_names_a_bad_argument():
    X = torch.zeros(2, 2, 2, dtype=F64)
    with pytest.raises(ValueError, match=r"^y: expected 2 labels in \{-1, \+1\}$"):
        heads.NonlinearHeadProblem(X, torch.tensor([1.0, 0.5], dtype=F64))
    with pytest.raises(ValueError, match=r"^y: expected 2 labels in \{-1, \+1\}$"):
        heads.NonlinearHeadProblem(X, torch.ones(3, dtype=F64))
    with pytest.raises(ValueError, match=r"^W: expected 2 rows, got shape \(3, 3\)$"):
        heads.NonlinearHeadProblem(X, torch.ones(2, dtype=F64), torch.eye(3, dtype=F64))
    with pytest.raises(ValueError, match=r"^X: expected 3 dimensions"):
        heads.NonlinearHeadProblem(X[0], torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match=r"^W: expected 2 dimensions"):
        heads.NonlinearHeadProblem(X, torch.ones(2, dtype=F64), torch.ones(2, dtype=F64))
    with pytest.raises(ValueError, match=r"^p: expected 1 dimensions"):
        _head_problem().loss_value(torch.zeros(1, 2, dtype=F64))


# =============================================================================================
# models.flows.wtrain
# =============================================================================================

# One input, x0 = (1, 0), x1 = 0, y = 1, v = (1, 0): scores (1, 0); p = (1, 2).
W_X = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]], dtype=F64)


def _w_problem(loss="logistic", p=(1.0, 2.0)):
    return wtrain.WProblem(W_X, [1.0], [1.0, 0.0], list(p), loss=loss)


def test_the_w_loss_is_the_prompt_loss_at_q_equal_w_p():
    """W = diag(a, 0): q = Wp = (a, 0), attention σ(a) on the score-1 token."""
    a = 0.7
    W = torch.tensor([[a, 0.0], [0.0, 0.0]], dtype=F64)
    s = _sigmoid(a)
    assert float(_w_problem().loss_value(W)) == pytest.approx(math.log1p(math.exp(-s)), rel=1e-14)
    expo = _w_problem("exponential")
    assert expo.prompt.loss.name == "exponential"
    assert float(expo.loss_value(W)) == pytest.approx(math.exp(-s), rel=1e-14)
    assert _w_problem().d == 2


def test_the_w_gradient_is_g_times_p_transposed():
    """∂L/∂W = g pᵀ with g = (ℓ'(σ(a))·σ'(a), 0) and ℓ = e^{−m}."""
    a = 0.7
    W = torch.tensor([[a, 0.0], [0.0, 0.0]], dtype=F64)
    s = _sigmoid(a)
    g = -math.exp(-s) * s * (1 - s)
    expected = torch.tensor([[g, 2 * g], [0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(_w_problem("exponential").gradient(W), expected, rtol=1e-13, atol=0)
    log_scale, M = _w_problem("exponential").gradient_log(W)
    np.testing.assert_allclose(math.exp(log_scale) * M, expected.numpy(), rtol=1e-13)


def test_the_w_problem_checks_p_and_reads_its_svm():
    with pytest.raises(ValueError, match=r"^p: expected dimension 2, got 3$"):
        wtrain.WProblem(W_X, [1.0], [1.0, 0.0], [1.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"^p: must be nonzero \(every W-gradient is g pᵀ\)$"):
        wtrain.WProblem(W_X, [1.0], [1.0, 0.0], [0.0, 0.0])
    problem = _w_problem()
    assert problem.opt_tokens().tolist() == [0]
    W_mm = problem.w_mm()  # q = (1, 0), ‖p‖² = 5: W = q pᵀ/5
    np.testing.assert_allclose(W_mm.x, [[0.2, 0.4], [0.0, 0.0]], atol=1e-12)
    assert problem.w_mm([1]).status == "optimal"
    np.testing.assert_allclose(problem.w_mm([1]).x, [[-0.2, -0.4], [0.0, 0.0]], atol=1e-12)


@pytest.mark.parametrize(
    ("W", "ratio"),
    [
        ([[3.0, 0.0], [0.0, 1.0]], 1 / 3),
        ([[0.0, 2.0], [-6.0, 0.0]], 1 / 3),
        ([[1.0, 2.0], [2.0, 4.0]], 0.0),
        ([[0.0, 0.0], [0.0, 0.0]], 0.0),
        ([[5.0]], 0.0),
        ([[2.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.5]], 0.5),
    ],
)
def test_singular_ratio_is_sigma2_over_sigma1(W, ratio):
    assert wtrain.singular_ratio(np.array(W)) == pytest.approx(ratio, abs=1e-15)


def test_one_w_gd_step_is_minus_eta_times_g_p_transposed():
    """From W = diag(a, 0): W₁ = W − η·g pᵀ with g = (ℓ'(σ(a))σ'(a), 0), ℓ = e^{−m}."""
    a, eta = 0.7, 0.5
    W0 = torch.tensor([[a, 0.0], [0.0, 0.0]], dtype=F64)
    s = _sigmoid(a)
    g = -math.exp(-s) * s * (1 - s)
    Ws = wtrain.w_gd(_w_problem("exponential"), W0, eta=eta, steps=2)
    assert Ws.shape == (3, 2, 2) and torch.equal(Ws[0], W0)
    expected = W0 - eta * torch.tensor([[g, 2 * g], [0.0, 0.0]], dtype=F64)
    torch.testing.assert_close(Ws[1], expected, rtol=1e-13, atol=0)
    assert wtrain.w_gd(_w_problem(), W0, eta=eta, steps=0).shape == (1, 2, 2)
    with pytest.raises(ValueError, match=r"^W0: expected shape \(2, 2\), got \(3, 3\)$"):
        wtrain.w_gd(_w_problem(), torch.eye(3, dtype=F64), eta=eta, steps=1)


def test_w_ngd_moves_lr_along_the_unit_gradient_direction():
    """g < 0 on the first row: each step adds lr·[[1, 2], [0, 0]]/√5 (the unit −G/‖G‖_F)."""
    run = wtrain.w_ngd(_w_problem(), torch.zeros(2, 2, dtype=F64), lr=0.5, steps=3,
                       record_every=2)  # fmt: skip
    assert run.steps.tolist() == [0, 2, 3] and run.stop == "step budget"
    unit = torch.tensor([[1.0, 2.0], [0.0, 0.0]], dtype=F64) / math.sqrt(5)
    torch.testing.assert_close(run.Ws[1], 2 * 0.5 * unit, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(run.W, 3 * 0.5 * unit, rtol=1e-13, atol=1e-15)
    # W ∝ the closed form W^mm = q pᵀ/‖p‖² = [[1, 2], [0, 0]]/5: correlation 1, rank one
    np.testing.assert_allclose(run.correlation[1:], 1.0, rtol=0, atol=1e-12)
    assert run.sigma_ratio.tolist() == [0.0, 0.0, 0.0]
    np.testing.assert_allclose(run.W_mm.x, [[0.2, 0.4], [0.0, 0.0]], atol=1e-12)
    expected = _w_problem().loss_value(run.W)
    assert run.losses[-1] == pytest.approx(float(expected), rel=1e-14)
    assert run.seconds >= 0
    flat = wtrain.WProblem(W_X, [1.0], [0.0, 0.0], [1.0, 2.0])
    still = wtrain.w_ngd(flat, torch.zeros(2, 2, dtype=F64), steps=5)
    assert still.stop == "stationary point (gradient exactly zero)" and still.steps.tolist() == [0]


# =============================================================================================
# models.numerics.highprec
# =============================================================================================

# Input 0: keys (1, 0), 0 and scores (2, −1): margin 3σ(p1) − 1. Input 1: keys (0, 1), 0 and
# scores (1, 0): margin σ(p2). L = ½(ℓ(m0) + ℓ(m1)), so ∇L = ½(ℓ'(m0)·3σ'(p1), ℓ'(m1)·σ'(p2)).
HP_KEYS = torch.tensor([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]], dtype=F64)
HP_SCORES = torch.tensor([[2.0, -1.0], [1.0, 0.0]], dtype=F64)
HP_P = (0.3, 0.7)


def _analytic_gradient(dloss):
    s0, s1 = _sigmoid(HP_P[0]), _sigmoid(HP_P[1])
    m0, m1 = 3 * s0 - 1, s1
    return [0.5 * dloss(m0) * 3 * s0 * (1 - s0), 0.5 * dloss(m1) * s1 * (1 - s1)]


@pytest.mark.parametrize(
    ("loss", "dloss"),
    [
        (get_loss("logistic"), lambda m: -1 / (1 + math.exp(m))),
        (get_loss("exponential"), lambda m: -math.exp(-m)),
        (get_loss("correlation"), lambda m: -1.0),
        (get_loss("square"), lambda m: -2 * (1 - m)),
        (__import__("models.problems.losses").problems.losses.square(3.0), lambda m: -2 * (3 - m)),
    ],
)
def test_the_high_precision_gradient_matches_the_analytic_one(loss, dloss):
    problem = PromptProblem(HP_KEYS, HP_SCORES, loss)
    grad = highprec.loss_gradient(problem, torch.tensor(HP_P, dtype=F64))
    assert grad.dtype == F64
    np.testing.assert_allclose(grad.numpy(), _analytic_gradient(dloss), rtol=1e-13, atol=1e-16)


def test_a_square_loss_without_a_target_has_no_high_precision_form():
    loss = SimpleNamespace(name="square", target=None)
    with pytest.raises(ValueError, match=r"^no high-precision form of the loss 'square'$"):
        highprec._loss(loss)
    assert highprec._loss(SimpleNamespace(name="square", target=2.0))(0.5) == 2.25
    assert highprec._loss(SimpleNamespace(name="exponential"))(0) == 1


def test_gradient_error_consults_high_precision_only_beyond_rel_tol(monkeypatch):
    problem = PromptProblem(HP_KEYS, HP_SCORES, "logistic")
    calls = []

    def sentinel(problem, p, digits=50):
        calls.append(p)
        return torch.tensor([3.0, 4.0], dtype=F64)

    monkeypatch.setattr(highprec, "loss_gradient", sentinel)
    engine, autograd = torch.tensor([1.0, 1.0]), torch.tensor([2.0, 2.0], dtype=torch.float32)
    # ‖engine − autograd‖ = √2 = ½‖autograd‖: rel_tol ½ is met exactly
    error, scale = highprec.gradient_error(problem, HP_P, engine, autograd, 0.5)
    assert (error, scale) == (math.sqrt(2), 2 * math.sqrt(2)) and calls == []
    error, scale = highprec.gradient_error(problem, HP_P, engine, autograd, 0.49)
    assert (error, scale) == (math.sqrt(13), 5.0)
    assert calls[0].dtype == F64 and calls[0].tolist() == list(HP_P)
    highprec.gradient_error(problem, [[0.3], [0.7]], engine[:, None], autograd[None], 0.49)
    assert calls[1].shape == (2,)


def test_gradient_error_reads_p_in_float64_whatever_the_default():
    problem = PromptProblem(HP_KEYS, HP_SCORES, "logistic")
    exact = highprec.loss_gradient(problem, torch.tensor(HP_P, dtype=F64))
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        error, scale = highprec.gradient_error(problem, list(HP_P), exact, -exact, 1.0)
    finally:
        torch.set_default_dtype(before)
    assert error == 0.0 and scale == float(exact.norm())


# =============================================================================================
# models.numerics.device
# =============================================================================================


def test_cpu_names_are_the_cpu(monkeypatch):
    monkeypatch.setenv(dev.DEVICE_ENV, "")
    assert dev.device() is dev.CPU
    assert dev.device(" Cpu ") is dev.CPU
    assert dev.device("cpu:0") == torch.device("cpu:0")
    assert dev.DEVICE_ENV == "ATTN_DEVICE"
    monkeypatch.delenv(dev.DEVICE_ENV)
    assert dev.device() is dev.CPU
    monkeypatch.setenv(dev.DEVICE_ENV, "cuda")
    assert dev.device("cpu") is dev.CPU  # the argument wins over the environment


def test_a_fallback_warns_at_the_callers_line(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert dev.device("CUDA") is dev.CPU
    (warning,) = caught
    # (in mutmut's copy its trampoline's frame sits between the test and models.numerics.device, in
    # every phase of its run, the clean one included)
    assert warning.category is dev.DeviceWarning
    assert warning.filename in (__file__, mutmut_trampoline_file())
    assert str(warning.message) == "ATTN_DEVICE='cuda': torch sees no CUDA device; running on cpu"


def test_a_missing_mps_and_an_unsupported_type_fall_back(monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    with pytest.warns(dev.DeviceWarning) as record:
        assert dev.device("mps") is dev.CPU
        assert dev.device("meta") is dev.CPU
    assert [str(w.message) for w in record] == [
        "ATTN_DEVICE='mps': torch sees no MPS device; running on cpu",
        "ATTN_DEVICE='meta': device type 'meta' is not supported by the suite; running on cpu",
    ]
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    assert dev.device("mps") == torch.device("mps")
    monkeypatch.setattr(torch.backends, "mps", None)  # a torch without the backend
    with pytest.warns(dev.DeviceWarning, match="torch sees no MPS device"):
        assert dev.device("mps") is dev.CPU


def test_an_available_gpu_is_used_and_described(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: f"Fake GPU {d}")
    assert dev.device("cuda") == torch.device("cuda")
    assert dev.device("cuda:1") == torch.device("cuda:1")
    assert dev.device("auto") == torch.device("cuda")
    with pytest.warns(dev.DeviceWarning) as record:
        assert dev.device("cuda:2") is dev.CPU
    assert str(record[0].message) == (
        "ATTN_DEVICE='cuda:2': only 2 CUDA device(s) here; running on cpu"
    )
    assert dev.describe(torch.device("cuda:1")) == "cuda:1 (Fake GPU cuda:1)"
    monkeypatch.setenv(dev.DEVICE_ENV, "cpu")
    assert dev.describe() == "cpu"


def test_a_name_that_is_no_device_is_refused_with_the_choices():
    with pytest.raises(ValueError) as err:
        dev.device(" GPU ")
    assert str(err.value) == (
        "ATTN_DEVICE='gpu' is not a torch device; use cpu, cuda, cuda:N or auto"
    )
    assert err.value.__cause__ is None and err.value.__suppress_context__


# =============================================================================================
# models.check.predict (the flow is stubbed: ``follow`` returns a canned Limit)
# =============================================================================================


# One input, W reads the first two coordinates, v the third: keys (1, 0), 0, (0, 1) and scores
# 1, 0, −1. ATT-SVM(0): rows (1, 0), (1, −1), p = (1, 0), both other tokens at margin 1.
PX = torch.tensor([[[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, -1.0]]], dtype=F64)
PY = torch.tensor([1.0], dtype=F64)
PV = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
PW = torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=F64))


def _canned(monkeypatch, kind, *, selected=(0,), p=(5.0, 0.0, 0.0), status="converged", omc=0.25,
            svm_sol=None, minimiser=None, pause=0.0):  # fmt: skip
    """Make predict.follow return Limit(kind, Outcome(...)) for the problem it is handed."""
    seen = {}

    def follow(problem, p0):
        seen["problem"], seen["p0"] = problem, p0
        time.sleep(pause)
        sel = np.array(selected)
        sol = svm.att_svm(problem.keys, sel) if svm_sol is None else svm_sol
        traj = SimpleNamespace(problem=problem, stop="reached max_norm")
        out = Outcome(status, "the run's reason", torch.tensor(p, dtype=F64), sel, omc, sol,
                      traj, 0.0)  # fmt: skip
        return Limit(kind, out, 0, minimiser)

    monkeypatch.setattr(predict, "follow", follow)
    return seen


def test_a_converged_prompt_answer_reports_every_field(monkeypatch):
    seen = _canned(monkeypatch, "converged", p=(3.0, 4.0, 0.0), pause=0.05)
    stages: list[str] = []
    t0 = time.perf_counter()
    out = predict.predict_prompt(PX, PY, PV, PW, "logistic", [0.0, 0.0, 0.0], stage=stages.append)
    elapsed = time.perf_counter() - t0
    assert tuple(out) == predict.PROMPT_FIELDS
    assert stages == [
        "solving ATT-SVM of the global optimum (2 constraints)",
        "tracing gradient flow on p",
    ]
    assert seen["p0"] == [0.0, 0.0, 0.0]
    assert out["model"] == "prompt" and out["opt"] == [0] and out["opt_unique"] is True
    assert out["svm_global"]["status"] == "optimal" and out["svm_global"]["support"] == [[1, 2]]
    assert set(out["svm_global"]) == {"p", "status", "support"}
    np.testing.assert_allclose(out["svm_global"]["p"], [1.0, 0.0, 0.0], atol=1e-12)
    assert out["selected"] == [0] and out["locally_optimal"] is True
    assert out["locally_optimal_reason"] == "every support token scores strictly below α_i"
    assert set(out["svm_selected"]) == {"p", "status"} and out["tie_sharing"] is False
    assert (out["status"], out["reason"], out["minimiser"]) == (
        "converged", "the run's reason", None
    )  # fmt: skip
    assert out["one_minus_cos"] == 0.25 and out["cos_to_global"] == pytest.approx(0.6, abs=1e-15)
    assert out["p_norm"] == 5.0
    logits = np.array([3.0, 0.0, 4.0])
    attn = np.exp(logits) / np.exp(logits).sum()
    assert out["loss"] == pytest.approx(math.log1p(math.exp(-(attn[0] - attn[2]))))
    assert out["loss_floor"] == pytest.approx(math.log1p(math.exp(-1.0)), rel=1e-15)
    assert 0.05 <= out["seconds"] <= elapsed


def test_a_bounded_prompt_answer_reports_its_minimiser(monkeypatch):
    m = FiniteMinimiser(torch.tensor([0.5, 0.25, 0.0], dtype=F64), 1e-3, 2e-9, 0.1, 0.4, 0.7)
    _canned(monkeypatch, "bounded", p=(0.5, 0.25, 0.0), status="inconclusive", minimiser=m,
            omc=math.inf)  # fmt: skip
    out = predict.predict_prompt(PX, PY, PV, PW)
    assert out["status"] == "bounded"
    assert out["minimiser"] == {
        "p": [0.5, 0.25, 0.0], "distance": 1e-3, "grad_norm": 2e-9,
        "hessian_eigenvalues": [0.1, 0.4], "loss": 0.7,
    }  # fmt: skip
    assert out["reason"].startswith("the flow stops at ‖p‖ = 0.559, 1.0e-03 from a strict local")
    assert out["one_minus_cos"] is None  # 1 − cos = inf is no number


@pytest.mark.parametrize("status", ["inconclusive", "infeasible"])
def test_an_undecided_prompt_answer_keeps_the_outcomes_status(monkeypatch, status):
    bad = SVMSolution("infeasible", None, np.ones(2), None, "HiGHS (LP)", "no p")
    _canned(monkeypatch, "undecided", status=status, svm_sol=bad, selected=(2,), p=(0.0, 1.0, 0.0))
    out = predict.predict_prompt(PX, PY, PV, PW)
    assert (out["status"], out["reason"]) == (status, "the run's reason")
    assert out["svm_selected"] == {"p": None, "status": "infeasible", "reason": "no p"}
    assert out["selected"] == [2] and out["locally_optimal"] is False
    assert out["loss_floor"] == pytest.approx(math.log1p(math.exp(1.0)), rel=1e-15)


def test_an_infeasible_global_svm_has_no_support_and_no_cosine(monkeypatch):
    """Token 0's key (0, 0) is the midpoint of (1, 0) and (−1, 0): ATT-SVM(opt) is infeasible."""
    X = torch.tensor([[[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]]], dtype=F64)
    _canned(monkeypatch, "undecided", status="inconclusive", selected=(1,), p=(1.0, 0.0, 0.0))
    out = predict.predict_prompt(X, PY, PV, PW)
    assert set(out["svm_global"]) == {"p", "status", "reason"}
    assert out["svm_global"]["p"] is None and out["svm_global"]["status"] == "infeasible"
    assert out["cos_to_global"] is None


def test_an_imprecise_prompt_instance_gets_nulls_and_the_reason(monkeypatch):
    monkeypatch.setattr(predict, "follow", None)  # nothing may be traced
    X = torch.tensor([[[1.0, 0.0], [NEAR_ONE, 0.0]]], dtype=F64)
    out = predict.predict_prompt(X, PY, torch.tensor([0.0, 1.0], dtype=F64))
    reason = precision.prompt(X, torch.tensor([0.0, 1.0], dtype=F64))
    assert reason.startswith("precision: the keys x·W of tokens 0 and 1 of input 0")
    assert tuple(out) == predict.PROMPT_FIELDS
    block = {"p": None, "status": "inconclusive", "reason": reason}
    expected = dict.fromkeys(predict.PROMPT_FIELDS)
    expected |= {"model": "prompt", "svm_global": block, "svm_selected": block}
    expected |= {"status": "inconclusive", "reason": reason, "seconds": out["seconds"]}
    assert out == expected and 0 <= out["seconds"] < 5


def test_the_svm_block_has_a_reason_only_when_not_optimal():
    assert predict._svm_json(_sol("optimal", "fine", np.array([1.0, 2.0]))) == {
        "p": [1.0, 2.0], "status": "optimal"
    }  # fmt: skip
    assert predict._svm_json(_sol("infeasible", "")) == {"p": None, "status": "infeasible"}
    assert predict._svm_json(_sol("inaccurate", "r"), [np.array([1]), np.array([], int)]) == {
        "p": None, "status": "inaccurate", "reason": "r", "support": [[1], []]
    }  # fmt: skip
    assert predict._finite(2.5) == 2.5 and predict._finite(math.nan) is None


@pytest.mark.parametrize(
    ("model", "fields", "svms"),
    [
        ("prompt", predict.PROMPT_FIELDS, ("svm_global", "svm_selected")),
        ("embedding", predict.EMBEDDING_FIELDS, ("svm",)),
    ],
)
def test_an_answer_that_ran_out_of_time_is_inconclusive(model, fields, svms):
    out = predict.inconclusive_answer(model, {"X": 1}, "budget: no answer", 7.5)
    assert tuple(out) == fields and out["model"] == model
    for name in svms:
        assert out[name] == {"p": None, "status": "inconclusive", "reason": "budget: no answer"}
    assert (out["status"], out["reason"]) == ("inconclusive", "budget: no answer")
    assert 7.5 <= out["seconds"] < 8.5
    rest = set(fields) - {"model", "status", "reason", "seconds", *svms}
    assert all(out[name] is None for name in rest)


def test_the_documented_answer_fields():
    assert predict.PROMPT_FIELDS == (
        "model", "opt", "opt_unique", "svm_global", "selected", "locally_optimal",
        "locally_optimal_reason", "svm_selected", "tie_sharing", "status", "reason", "minimiser",
        "shared", "one_minus_cos", "cos_to_global", "p_norm", "loss", "loss_floor", "seconds",
    )  # fmt: skip
    assert predict.EMBEDDING_FIELDS == (
        "model", "alpha", "shift", "bound", "max_error", "selected", "svm", "status", "reason",
        "minimiser", "shared", "one_minus_cos", "p_norm", "seconds",
    )  # fmt: skip


# sequences (0, 2) labelled +1 and (1, 3) labelled −1 (tests/test_cli_bad_input.py SEPARATE)
E_SEQ = torch.tensor([[0, 2], [1, 3]])
E_Y = torch.tensor([1.0, -1.0], dtype=F64)
E_E0 = torch.tensor([[0.3, 0.0], [0.0, 0.1], [0.0, 0.2], [0.0, -0.3]], dtype=F64)
E_V = torch.tensor([1.0, 1.0], dtype=F64)


def test_an_embedding_answer_reports_the_step_the_selection_and_its_svm(monkeypatch):
    from models.problems.embedding import EmbeddingProblem, one_step

    seen = _canned(monkeypatch, "converged", selected=(1, 0), p=(2.0, 1.0), omc=0.5, pause=0.05,
                   svm_sol=_sol("optimal", "", np.zeros(2)))  # fmt: skip
    stages: list[str] = []
    t0 = time.perf_counter()
    out = predict.predict_embedding(E_SEQ, E_Y, E_E0, E_V, 0.5, stage=stages.append)
    elapsed = time.perf_counter() - t0
    assert tuple(out) == predict.EMBEDDING_FIELDS and out["model"] == "embedding"
    assert stages == ["tracing gradient flow on <cls>", "solving the <cls> SVM of the selection"]
    assert seen["p0"] is None
    # α_s = (1/n) Σ_i y_i n_s(X_i)/T with n = T = 2
    assert out["alpha"] == [0.25, -0.25, 0.25, -0.25]
    assert out["bound"] == 11 * 0.5 * 2**-0.25
    step = one_step(EmbeddingProblem(sequences=E_SEQ, y=E_Y, E=E_E0, v=E_V), 0.5)
    assert out["shift"] == ((step.E1 - E_E0) @ E_V).tolist()
    assert out["max_error"] == float(step.paper_error.max())
    torch.testing.assert_close(seen["problem"].keys[:, :, :2].reshape(4, 2),
                               step.E1[E_SEQ.reshape(-1)], rtol=0, atol=0)  # fmt: skip
    assert out["selected"] == [2, 1]  # positions (1, 0) of the two sequences
    expected_svm = svm.cls_svm(step.E1, E_SEQ, [2, 1])
    assert out["svm"]["status"] == expected_svm.status == "optimal"
    np.testing.assert_allclose(out["svm"]["p"], expected_svm.x, rtol=0, atol=1e-12)
    cos = float(expected_svm.x @ np.array([2.0, 1.0])) / (math.sqrt(5) * expected_svm.norm)
    assert out["one_minus_cos"] == pytest.approx(1 - cos, abs=1e-12)
    assert (out["status"], out["reason"], out["minimiser"]) == (
        "converged", "the run's reason", None
    )  # fmt: skip
    assert out["p_norm"] == pytest.approx(math.sqrt(5), rel=1e-15)
    assert 0.05 <= out["seconds"] <= elapsed


def test_a_bounded_embedding_answer_reports_its_minimiser(monkeypatch):
    m = FiniteMinimiser(torch.tensor([0.5, 0.25], dtype=F64), 1e-3, 2e-9, 0.1, 0.4, 0.7)
    _canned(monkeypatch, "bounded", selected=(0, 0), p=(0.5, 0.25), status="inconclusive",
            minimiser=m, svm_sol=_sol("optimal", "", np.zeros(2)))  # fmt: skip
    out = predict.predict_embedding(E_SEQ, E_Y, E_E0, E_V, 0.5)
    assert out["status"] == "bounded" and out["minimiser"]["hessian_eigenvalues"] == [0.1, 0.4]
    assert out["reason"].startswith("the flow stops at ‖p‖ = 0.559, 1.0e-03 from a strict local")
    assert out["selected"] == [0, 1]


def test_an_undecided_embedding_answer_without_an_svm_has_no_cosine(monkeypatch):
    _canned(monkeypatch, "undecided", selected=(0, 0), status="inconclusive", p=(1.0, 0.0),
            svm_sol=_sol("optimal", "", np.zeros(2)))  # fmt: skip
    monkeypatch.setattr(predict, "cls_svm", lambda *args: _sol("inaccurate", "why"))
    out = predict.predict_embedding(E_SEQ, E_Y, E_E0, E_V, 0.5)
    assert (out["status"], out["reason"]) == ("inconclusive", "the run's reason")
    assert out["svm"] == {"p": None, "status": "inaccurate", "reason": "why"}
    assert out["one_minus_cos"] is None


def test_an_imprecise_embedding_instance_keeps_alpha_and_bound(monkeypatch):
    monkeypatch.setattr(predict, "follow", None)
    out = predict.predict_embedding(E_SEQ, E_Y, E_E0, E_V, 1e300)
    reason = out["reason"]
    assert reason.startswith("precision: the E⁰ rows of tokens 0 and 2 (sequence 0) differ by")
    expected = dict.fromkeys(predict.EMBEDDING_FIELDS) | {
        "model": "embedding", "alpha": [0.25, -0.25, 0.25, -0.25], "bound": 11e300 * 2**-0.25,
        "svm": {"p": None, "status": "inconclusive", "reason": reason},
        "status": "inconclusive", "reason": reason, "seconds": out["seconds"],
    }  # fmt: skip
    assert out == expected and tuple(out) == predict.EMBEDDING_FIELDS
    huge = predict.predict_embedding(E_SEQ, E_Y, E_E0 * 1e200, E_V * 1e200, 0.5)
    assert huge["reason"] == "precision: the score ⟨E⁰_s, v⟩ of token 0 overflows float64"


# =============================================================================================
# models.flows.dynamics
# =============================================================================================


def _prompt(keys, scores, loss="logistic") -> PromptProblem:
    return PromptProblem(torch.as_tensor(keys, dtype=F64), torch.as_tensor(scores, dtype=F64), loss)


# One input, keys (1, 0) and (0, 1), scores (1, 0): the flow from 0 runs straight along (1, −1),
# the direction of ATT-SVM(0) = (½, −½).
LINE = _prompt([[[1.0, 0.0], [0.0, 1.0]]], [[1.0, 0.0]])
# Two inputs pulling p1 in opposite directions: L(p) = ½(ℓ(σ(p1)) + ℓ(1 − σ(p1))), a strict
# minimum at p1 = 0 along the only key difference e1, with L'' = ℓ''(½)·σ'(0)² = σ(½)σ(−½)/16.
WELL = _prompt([[[1.0, 0.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 0.0]]], [[1.0, 0.0], [0.0, 1.0]])
# Two inputs whose flow bends: a path, not a line.
BEND = _prompt([[[1.0, 0.0], [0.0, 0.5]], [[0.0, 1.0], [0.5, 0.0]]], [[1.0, 0.0], [1.0, 0.2]])


def test_the_recorder_keeps_every_kth_point_and_the_forced_ones():
    rec = dynamics._Recorder(LINE, 2.7)  # every int(2.7) = 2 steps
    assert rec.every == 2 and dynamics._Recorder(LINE, 0).every == 1
    for k in range(5):
        rec.add(np.array([float(k), 0.0]), 0.5 * k, -float(k), k=k)
    rec.add(np.array([9.0, 9.0]), 9.0, -9.0, force=True, k=1)
    assert [p.tolist() for p in rec.ps] == [[0, 0], [2, 0], [4, 0], [9, 9]]
    assert rec.s == [0.0, 1.0, 2.0, 9.0] and rec.lgn == [-0.0, -2.0, -4.0, -9.0]
    rec.finish(np.array([9.0, 9.0]), 10.0, -10.0)  # already the last point: not repeated
    assert len(rec.ps) == 4
    rec.finish(np.array([9.0, 8.0]), 10.0, -10.0)
    assert rec.ps[-1].tolist() == [9.0, 8.0] and rec.s[-1] == 10.0 and rec.lgn[-1] == -10.0
    t0 = time.perf_counter()
    traj = rec.build("why", 7, t0, note=1)
    assert traj.ps.shape == (5, 2) and traj.ps.dtype == F64 and traj.s.tolist()[-1] == 10.0
    assert traj.log_grad_norms.tolist() == [-0.0, -2.0, -4.0, -9.0, -10.0]
    assert (traj.stop, traj.evals, traj.extra) == ("why", 7, {"note": 1})
    assert traj.problem is LINE and 0 <= traj.seconds < 1
    assert traj.final.tolist() == [9.0, 8.0] and traj.norms[1] == 2.0


def test_a_recorder_finishes_an_empty_record():
    rec = dynamics._Recorder(LINE, 1)
    rec.finish(np.array([1.0, 2.0]), 0.5, -1.0)
    assert [p.tolist() for p in rec.ps] == [[1.0, 2.0]] and rec.s == [0.5] and rec.lgn == [-1.0]


def test_the_start_is_a_fresh_float64_vector():
    assert dynamics._start(LINE, None).tolist() == [0.0, 0.0]
    p0 = torch.tensor([1.0, 2.0], dtype=F64, requires_grad=True)
    start = dynamics._start(LINE, p0)
    start[0] = 5.0
    assert p0.tolist() == [1.0, 2.0] and start.dtype == np.float64
    with pytest.raises(ValueError, match=r"^p0: expected dimension 2, got 3$"):
        dynamics._start(LINE, [1.0, 2.0, 3.0])


def test_logaddexp():
    assert dynamics._logaddexp(-math.inf, -math.inf) == -math.inf
    assert dynamics._logaddexp(1.5, -math.inf) == 1.5 == dynamics._logaddexp(-math.inf, 1.5)
    assert dynamics._logaddexp(0.0, 0.0) == math.log(2.0)
    assert dynamics._logaddexp(1.0, 3.0) == dynamics._logaddexp(3.0, 1.0)
    assert dynamics._logaddexp(1.0, 3.0) == pytest.approx(math.log(math.e + math.e**3), rel=1e-15)


def test_one_gd_step_is_minus_eta_times_the_closed_form_gradient():
    """LINE at p = 0: attention (½, ½), margin ½, ∂m/∂p = ½((1, 0) − (½, ½)) = (¼, −¼), so
    ∇L = −σ(−½)(¼, −¼) for the logistic loss."""
    grad = -_sigmoid(-0.5) * np.array([0.25, -0.25])
    run = dynamics.gd(LINE, None, eta=2.0, steps=3, record_every=2)
    assert run.s.tolist() == [0, 2, 3] and run.stop == "step budget" and run.evals == 4
    assert run.ps[0].tolist() == [0.0, 0.0]
    assert run.log_grad_norms[0] == pytest.approx(math.log(np.linalg.norm(grad)), rel=1e-14)
    one = dynamics.gd(LINE, [0.0, 0.0], eta=2.0, steps=1)
    np.testing.assert_allclose(one.ps[1].numpy(), -2.0 * grad, rtol=1e-14)
    assert one.s.tolist() == [0, 1] and one.evals == 2
    still = dynamics.gd(WELL, [0.0, 1.0], eta=1.0, steps=5)
    assert still.stop == "stationary point (gradient exactly zero)" and still.evals == 1
    assert still.ps.tolist() == [[0.0, 1.0]] and still.s.tolist() == [0]


def test_ngd_steps_lr_along_the_unit_flow_direction():
    """On LINE the flow direction is (1, −1)/√2 everywhere: p_k = k·lr·(1, −1)/√2."""
    run = dynamics.ngd(LINE, None, lr=0.5, steps=4, record_every=3)
    assert run.s.tolist() == [0.0, 1.5, 2.0] and run.evals == 5 and run.stop == "step budget"
    np.testing.assert_allclose(run.final.numpy(), 2.0 * np.array([1.0, -1.0]) / math.sqrt(2),
                               rtol=1e-14)  # fmt: skip
    lgn = LINE.flow_field_np(run.final.numpy())[1]
    assert run.log_grad_norms[-1] == lgn
    still = dynamics.ngd(WELL, [0.0, 1.0], lr=0.5, steps=5)
    assert still.stop == "stationary point (gradient exactly zero)" and still.evals == 1
    assert still.ps.tolist() == [[0.0, 1.0]] and still.s.tolist() == [0.0]


@pytest.mark.parametrize(("a", "b"), [(0.0, 0.0), (-1.0, 1.0), (2.0, -3.0)])
def test_the_step_time_is_the_integral_of_exp_minus_a_linear_log_gradient(a, b):
    """∫_0^h e^{−(a + (b − a)s/h)} ds = h e^{−a} (1 − e^{−d})/d with d = b − a (h e^{−a} at 0)."""
    h, d = 0.5, b - a
    exact = h * math.exp(-a) * (1.0 if d == 0 else -math.expm1(-d) / d)
    assert dynamics._log_step_time(h, a, b) == pytest.approx(math.log(exact), rel=1e-14, abs=1e-15)


def test_the_tracer_integrates_in_the_span_of_the_key_differences_when_it_is_small():
    keys = [[[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0], [2.0, 0.0, 0.0, 0.0]]]
    problem = _prompt(keys, [[1.0, 0.0, 0.5]])
    p = np.array([0.5, 1.0, -2.0, 3.0])
    coords = dynamics._Coordinates(problem, p)
    assert coords.basis.shape == (4, 1) and abs(coords.basis[0, 0]) == 1.0
    assert coords.y0.tolist() == [0.5 * coords.basis[0, 0]]
    assert coords.offset.tolist() == [0.0, 1.0, -2.0, 3.0]
    np.testing.assert_array_equal(coords.to_p(coords.y0), p)
    u_y, u_p, lgn = coords.field(coords.y0)
    u_full, lgn_full = problem.flow_field_np(p)
    np.testing.assert_allclose(u_p, u_full, atol=1e-15)
    assert lgn == pytest.approx(lgn_full, rel=1e-14) and u_y.shape == (1,)
    assert coords.field_problem.loss is problem.loss and coords.field_problem.dim == 1
    torch.testing.assert_close(coords.field_problem.scores, problem.scores)


def test_the_span_is_used_up_to_half_the_dimension():
    two = [[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]
    coords = dynamics._Coordinates(_prompt(two, [[1.0, 0.0, 0.5]]), np.ones(4))
    assert coords.basis.shape == (4, 2)
    three = [[[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0], [0.0] * 4]]
    full = dynamics._Coordinates(_prompt(three, [[1.0, 0.0, 0.5, 0.2]]), np.ones(4))
    assert full.basis is None and full.field_problem is not None and full.offset is None
    y = np.array([1.0, 2.0, 3.0, 4.0])
    copy = full.to_p(y)
    copy[0] = 9.0
    assert y[0] == 1.0
    flat = _prompt([[[1.0], [1.0]]], [[1.0, 0.0]])  # no key difference at all
    assert dynamics._Coordinates(flat, np.ones(1)).basis is None


def test_a_stationary_start_is_a_named_stop_at_one_evaluation():
    traj = dynamics.trace_flow(WELL, [0.0, 1.0])
    assert traj.stop == "stationary point (gradient exactly zero)"
    assert traj.evals == 1 and traj.extra["steps"] == 0
    assert traj.extra["log_time"] == -math.inf and traj.extra["integrator_warnings"] == []
    assert traj.ps.tolist() == [[0.0, 1.0], [0.0, 1.0]] and traj.s.tolist() == [0.0, 0.0]


def _counting(monkeypatch):
    """Count the field and Jacobian evaluations of every PromptProblem."""
    calls = {"field": 0, "jacobian": 0}
    # the tracer evaluates the field through flow_field_fn (flow_field_np calls it too)
    jacobian = PromptProblem.flow_jacobian_np

    def counted_field_fn(self):
        fn = self.plain_field_fn

        def counted(p):
            calls["field"] += 1
            return fn(p)

        return counted

    def counted_jacobian(self, p):
        calls["jacobian"] += 1
        return jacobian(self, p)

    monkeypatch.setattr(PromptProblem, "flow_field_fn", property(counted_field_fn))
    monkeypatch.setattr(PromptProblem, "flow_jacobian_np", counted_jacobian)
    return calls


def test_the_step_budget_counts_steps_records_and_evaluations(monkeypatch):
    """BEND's key differences span ℝ², so the tracer works on the problem itself."""
    problem = BEND
    calls = _counting(monkeypatch)
    traj = dynamics.trace_flow(problem, [0.1, -0.2], max_steps=4, record_every=2)
    assert traj.stop == "step budget" and traj.extra["steps"] == 4
    # recorded: the start, steps 2 and 4, and the end again
    assert len(traj.s) == 4 and traj.s[0] == 0.0 and traj.ps[0].tolist() == [0.1, -0.2]
    assert traj.ps[-1].tolist() == traj.ps[-2].tolist() and traj.s[-1] == traj.s[-2] > 0
    assert traj.evals == calls["field"] + calls["jacobian"]
    assert traj.extra["jacobians"] == calls["jacobian"]
    assert calls["field"] >= 5
    every = dynamics.trace_flow(problem, [0.1, -0.2], max_steps=3)
    assert len(every.s) == 5 and np.all(np.diff(every.s[:-1]) > 0)


def test_the_integrators_evaluations_are_counted_apart_from_the_tracers_readings(monkeypatch):
    """``extra["integrator_evals"]``: LSODA's right-hand sides and Jacobians, without the
    tracer's first reading and its one after each step (benchmarks/test_equal_accuracy.py's
    floor counts these alone). Run far enough for LSODA's stiff mode: Jacobians are called."""
    calls = _counting(monkeypatch)
    traj = dynamics.trace_flow(BEND, [0.1, -0.2], max_norm=1e4)
    steps = traj.extra["steps"]
    assert traj.stop == "reached max_norm" and calls["jacobian"] > 0
    assert traj.extra["integrator_evals"] == calls["field"] - (steps + 1) + calls["jacobian"]


def test_log_time_sums_the_step_times_of_the_recorded_steps():
    traj = dynamics.trace_flow(BEND, [0.1, -0.2], max_steps=6)
    s, lgn = traj.s[:-1], traj.log_grad_norms[:-1]
    steps = [dynamics._log_step_time(s[k] - s[k - 1], lgn[k - 1], lgn[k]) for k in range(1, 7)]
    assert traj.extra["log_time"] == pytest.approx(float(np.logaddexp.reduce(steps)), rel=1e-13)
    for k in range(len(s)):
        lgn_k = BEND.flow_field_np(traj.ps[k].numpy())[1]
        assert lgn[k] == pytest.approx(lgn_k, rel=1e-12)


def test_the_tracer_stops_at_max_norm_max_arc_or_its_caller():
    traj = dynamics.trace_flow(BEND, None, max_norm=3.0)
    assert traj.stop == "reached max_norm" and traj.norms[-1] >= 3.0 > traj.norms[-3]
    arc = dynamics.trace_flow(BEND, None, max_arc=0.5)
    assert arc.stop == "reached max_arc" and arc.s[-1] == 0.5
    seen = []

    def stop_when(p, u, lgn):
        seen.append((p.copy(), u.copy(), lgn))
        return "far enough" if float(np.linalg.norm(p)) > 1.0 else None

    mine = dynamics.trace_flow(BEND, None, stop_when=stop_when)
    assert mine.stop == "far enough" and len(seen) == mine.extra["steps"]
    p, u, lgn = seen[-1]
    np.testing.assert_array_equal(p, mine.final.numpy())
    u_ref, lgn_ref = BEND.flow_field_np(p)
    np.testing.assert_allclose(u, u_ref, atol=1e-15)
    assert lgn == pytest.approx(lgn_ref, rel=1e-14)


def test_the_tolerances_reach_the_integrator():
    default = dynamics.trace_flow(BEND, [0.1, -0.2], max_steps=8)
    for loose in ({"rtol": 1e-3}, {"atol": 1e-3}):
        run = dynamics.trace_flow(BEND, [0.1, -0.2], max_steps=8, **loose)
        assert not np.array_equal(run.s, default.s), loose


def test_a_run_of_short_steps_is_a_stall(monkeypatch):
    monkeypatch.setattr(dynamics, "STALL_RATIO", 1e3)  # every step is "short"
    monkeypatch.setattr(dynamics, "STALL_STEPS", 3)
    traj = dynamics.trace_flow(BEND, None)
    norm = float(traj.norms[-1])
    assert traj.extra["steps"] == 3
    assert traj.stop == (
        f"integrator stalled (3 steps shorter than 1000·‖p‖ at ‖p‖={norm:.3g}): a finite "
        "stationary point?"
    )
    assert (dynamics.STALL_STEPS, dynamics.TIE_MARGIN_TOL) == (3, 1e-6)


def test_the_documented_stall_rule():
    assert dynamics.STALL_RATIO == 1e-6 and dynamics.STALL_STEPS == 200
    assert dynamics.MINIMISER_MAX_NORM == 1e3


def test_a_straight_flow_converges_to_the_svm_direction():
    out = dynamics.converge(LINE)
    assert out.status == "converged" and out.converged
    assert out.reason == "direction reached the SVM of the selection and stayed"
    assert out.selected.tolist() == [0] and out.tied is None and not out.tie_sharing
    np.testing.assert_allclose(out.svm.x, [0.5, -0.5], atol=1e-12)
    assert out.one_minus_cos <= 1e-12 and out.max_other_prob <= 1e-6
    logits = LINE.keys[0] @ out.p
    assert out.max_other_prob == pytest.approx(float(torch.softmax(logits, 0)[1]), rel=1e-12)
    assert 60 > out.seconds >= out.trajectory.seconds > 0
    # the alignment run starts where the lead of token 0 first reaches log(T/select_tol) and
    # stops once ‖p‖ has grown tenfold (persist) from there: p ∥ (1, −1), the lead is p1 − p2
    ps, norms = out.trajectory.ps, out.trajectory.norms
    lead = (ps[:, 0] - ps[:, 1]).numpy()
    start = norms[np.argmax(lead >= math.log(2 / 1e-6))]
    assert norms[-3] < 10 * start <= norms[-1] == float(torch.linalg.vector_norm(out.p))
    exact = dynamics.converge(LINE, target=0.0, max_norm=50.0, select_tol=0.5)
    assert exact.one_minus_cos == 0.0 and exact.status == "converged"


def test_converge_names_an_ambiguous_selection():
    with failures.watch() as w:
        out = dynamics.converge(BEND, max_norm=2.0)
    logits = torch.einsum("itd,d->it", BEND.keys, out.p)
    probs = torch.softmax(logits, -1)
    probs[torch.arange(2), torch.as_tensor(out.selected)] = 0.0
    assert out.max_other_prob == pytest.approx(float(probs.max()), rel=1e-12)
    assert out.status == "inconclusive" and not out.converged
    assert out.reason == (
        f"ambiguous selection: a non-selected token keeps softmax mass {out.max_other_prob:.2e}"
    )
    assert [f.key for f in w.failures] == ["gradient flow: undecided"]
    assert w.failures[0].detail == out.reason


def test_converge_says_how_far_an_unaligned_run_got():
    out = dynamics.converge(BEND, max_norm=2.0, select_tol=0.9, target=-1.0)
    norm = float(torch.linalg.vector_norm(out.p))
    flow = dynamics.one_minus_cos(-BEND.gradient(out.p), torch.as_tensor(out.svm.x))
    assert out.status == "inconclusive"
    assert out.reason.startswith(
        f"reached max_norm at ‖p‖={norm:.3g}, 1−cos={out.one_minus_cos:.2e}"
    )
    assert out.reason.endswith(f", flow heading 1−cos={flow:.2e}")


def test_converge_reports_an_infeasible_or_undecided_svm(monkeypatch):
    monkeypatch.setattr(svm, "att_svm", lambda *a, **k: _sol("infeasible", "none"))
    with failures.watch() as w:
        out = dynamics.converge(LINE, max_norm=3.0)
    assert (out.status, out.reason) == (
        "infeasible", "ATT-SVM of the selected tokens is infeasible (reached max_norm)"
    )  # fmt: skip
    assert out.one_minus_cos == 1.0 and not w.failures
    monkeypatch.setattr(svm, "att_svm", lambda *a, **k: _sol("inaccurate", "bad residuals"))
    with failures.watch() as w:
        out = dynamics.converge(LINE, max_norm=3.0)
    assert (out.status, out.reason) == ("inconclusive", "SVM oracle: inaccurate (bad residuals)")
    assert [f.detail for f in w.failures] == ["SVM oracle: inaccurate (bad residuals)"]


def test_tied_margins_read_the_svm_solution():
    sol = _sol("optimal", "", np.array([0.5, -0.5]))
    tied = np.array([[False, True]])
    traj = SimpleNamespace(problem=LINE)
    out = Outcome("converged", "", torch.zeros(2), np.array([0]), 0.0, sol, traj, 0.0, 0.0, tied)
    i, t, margins = out.tied_margins()
    assert i.tolist() == [0] and t.tolist() == [1] and margins.tolist() == [1.0]
    assert not out.tie_sharing  # at margin exactly 1
    half = _sol("optimal", "", np.array([0.5, -0.5 + 0.5e-6]))
    assert not Outcome("c", "", None, np.array([0]), 0, half, traj, 0, 0, tied).tie_sharing
    below = _sol("optimal", "", np.array([0.5, -0.5 + 2e-6]))
    assert Outcome("c", "", None, np.array([0]), 0, below, traj, 0, 0, tied).tie_sharing
    none = Outcome("c", "", None, np.array([0]), 0, _sol("infeasible"), traj, 0, 0, tied)
    assert [a.size for a in none.tied_margins()] == [0, 0, 0] and not none.tie_sharing


def test_finite_minimiser_certifies_the_well_with_its_curvature():
    curvature = _sigmoid(0.5) * _sigmoid(-0.5) / 16
    m = dynamics.finite_minimiser(WELL, [0.01, 2.0])
    np.testing.assert_allclose(m.p.numpy(), [0.0, 2.0], atol=1e-12)
    assert m.distance == pytest.approx(0.01, abs=1e-12)
    assert m.min_eig == pytest.approx(curvature, rel=1e-10) == m.max_eig
    assert m.loss == pytest.approx(math.log1p(math.exp(-0.5)), rel=1e-14)
    assert m.grad_norm <= 1e-15
    # the start must lie within max_distance·max(1, ‖p‖) of the minimiser
    assert dynamics.finite_minimiser(WELL, [0.01, 2.0], max_distance=0.004) is None
    assert dynamics.finite_minimiser(WELL, [0.015, 2.0]) is not None  # 0.015 ≤ 1e-2·‖p‖
    assert dynamics.finite_minimiser(WELL, [0.015, 0.0]) is None  # 0.015 > 1e-2·1
    assert dynamics.finite_minimiser(WELL, [0.01, 0.0], max_distance=0.011) is not None
    assert dynamics.finite_minimiser(WELL, [0.01, 0.0], max_distance=0.009) is None
    assert dynamics.finite_minimiser(WELL, [0.01, 2.0], newton_steps=1) is None
    assert dynamics.finite_minimiser(WELL, [0.01, 2.0], eig_rel=1.0) is None


def test_finite_minimiser_trusts_plain_float64_up_to_max_norm(monkeypatch):
    monkeypatch.setattr(dynamics, "MINIMISER_MAX_NORM", 2.0)
    assert dynamics.finite_minimiser(WELL, [0.0, 2.0]).distance == 0.0
    assert dynamics.finite_minimiser(WELL, [0.0, 2.0 + 1e-9]) is None


def test_finite_minimiser_finds_nothing_on_a_flat_loss_or_without_key_differences():
    flat = _prompt(WELL.keys, WELL.scores, "correlation")  # L = −½ everywhere
    assert dynamics.finite_minimiser(flat, [0.0, 1.0]) is None
    assert dynamics.finite_minimiser(_prompt([[[1.0], [1.0]]], [[1.0, 0.0]]), [0.0]) is None
