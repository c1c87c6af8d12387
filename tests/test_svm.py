"""Unit tests of the certified SVM oracle (models/svm.py): closed forms, certificates, typed
outcomes, invariances (spec maxmargin §1.4, §2.7–2.9) and the solver fallback path."""

import cvxpy as cp
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from models import svm
from models.svm import (
    CertificateError,
    att_constraints,
    att_svm,
    certify,
    cls_svm,
    solve_margin_qp,
    v_svm,
    w_svm,
    w_svm_closed_form,
)

KKT_TOL = 1e-9
FIG1_KEYS = np.array([[[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]]])


def feasible_instance(seed: int, n: int = 2, T: int = 3):
    """Gaussian keys with dk = n(T−1): the difference rows are independent, so ATT-SVM(α) is
    feasible almost surely (spec §3, item 3)."""
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=(n, T, n * (T - 1)))
    return keys, rng.integers(0, T, size=n)


def assert_farkas(sol, A, b):
    """An infeasible answer carries y ≥ 0 with Aᵀy = 0 and bᵀy > 0."""
    y = sol.duals
    assert y is not None and (y >= 0).all()
    assert np.linalg.norm(A.T @ y) <= 1e-12 * max(1.0, b @ y)
    assert b @ y > 0


# ------------------------------------------------------------------------------- closed forms


@pytest.mark.parametrize("seed", range(5))
def test_two_tokens_closed_form(seed):
    """n=1, T=2: the only row is u = k_α − k_t, so p^mm = u/‖u‖²."""
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=(1, 2, 2))
    alpha = int(rng.integers(0, 2))
    u = keys[0, alpha] - keys[0, 1 - alpha]
    sol = att_svm(keys, [alpha])
    assert sol.ok
    np.testing.assert_allclose(sol.x, u / (u @ u), rtol=0, atol=1e-12)
    assert sol.margin == pytest.approx(np.linalg.norm(u), rel=1e-12)


def test_three_tokens_hand_instance():
    """Rows (1, 0) and (2, −1): p = (1, 0) meets the first with equality, the second with 2."""
    keys = np.array([[[0.0, 0.0], [-1.0, 0.0], [-2.0, 1.0]]])
    sol = att_svm(keys, [0])
    assert sol.ok
    np.testing.assert_allclose(sol.x, [1.0, 0.0], atol=1e-12)
    assert sol.active.tolist() == [True, False]
    assert sol.rows == ((0, 1), (0, 2))
    np.testing.assert_allclose(sol.duals, [1.0, 0.0], atol=1e-12)


def test_figure1_svm_solutions():
    """Spec §4, Fig. 1: the third token's SVM is (−1, −1.1); for tokens 0 and 1 only the token
    (0, 0) is a support token."""
    third = att_svm(FIG1_KEYS, [2])
    np.testing.assert_allclose(third.x, [-1.0, -1.1], atol=1e-12)
    assert third.active.all()
    for alpha in (0, 1):
        sol = att_svm(FIG1_KEYS, [alpha])
        assert [row for row, on in zip(sol.rows, sol.active, strict=True) if on] == [(0, 2)]
    np.testing.assert_allclose(att_svm(FIG1_KEYS, [1]).x, [1.0, 0.0], atol=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_w_svm_equals_rank_one_closed_form(seed):
    """W^mm = q^mm pᵀ/‖p‖² (spec §2.8): the QP in vec(W) and the formula agree."""
    X, alpha = feasible_instance(seed)
    p = np.random.default_rng(100 + seed).normal(size=X.shape[2])
    direct, closed = w_svm(X, p, alpha), w_svm_closed_form(X, p, alpha)
    assert direct.ok and closed.ok
    assert direct.x.shape == closed.x.shape == (X.shape[2], X.shape[2])
    np.testing.assert_allclose(direct.x, closed.x, rtol=0, atol=1e-9)
    assert direct.norm == pytest.approx(closed.norm, rel=1e-10)
    sigma = np.linalg.svd(direct.x, compute_uv=False)
    assert sigma[1] <= 1e-9 * sigma[0]
    assert closed.certificate.worst <= KKT_TOL


def test_w_svm_with_zero_p_is_infeasible():
    X, alpha = feasible_instance(0)
    for solve in (w_svm, w_svm_closed_form):
        assert solve(X, np.zeros(X.shape[2]), alpha).status == "infeasible"


def test_v_svm_hand_instance():
    """y z rows (2, 0), (0, 1), (3, 3): v = (0.5, 1); the third sample is no support vector."""
    Z = np.array([[2.0, 0.0], [0.0, -1.0], [3.0, 3.0]])
    sol = v_svm(Z, [1, -1, 1])
    assert sol.ok
    np.testing.assert_allclose(sol.x, [0.5, 1.0], atol=1e-12)
    assert sol.active.tolist() == [True, True, False]


@pytest.mark.parametrize("seed", range(5))
def test_v_svm_matches_slsqp(seed):
    """A second, unrelated method (SLSQP on the primal) finds the same hard-margin v."""
    rng = np.random.default_rng(seed)
    Z, v_true = rng.normal(size=(8, 3)), rng.normal(size=3)
    y = np.sign(Z @ v_true)
    A = y[:, None] * Z
    start = v_true / (A @ v_true).min()
    ref = minimize(
        lambda v: 0.5 * v @ v,
        start,
        jac=lambda v: v,
        constraints=[{"type": "ineq", "fun": lambda v: A @ v - 1, "jac": lambda v: A}],
        method="SLSQP",
        options={"ftol": 1e-14, "maxiter": 500},
    )
    assert ref.success
    sol = v_svm(Z, y)
    assert sol.ok
    np.testing.assert_allclose(sol.x, ref.x, rtol=0, atol=1e-6)


# ----------------------------------------------------------------- margin and certificates


@pytest.mark.parametrize("seed", range(3))
def test_margin_identity(seed):
    """1/‖p^mm‖ = max_{‖u‖=1} min_rows rowᵀu, attained at the SVM direction (spec §1.4)."""
    keys, alpha = feasible_instance(seed)
    A, _, _ = att_constraints(keys, alpha)
    sol = att_svm(keys, alpha)
    assert (A @ sol.direction).min() == pytest.approx(sol.margin, rel=1e-12)
    rng = np.random.default_rng(seed)
    nearby = sol.direction + 1e-2 * rng.normal(size=(500, A.shape[1]))
    anywhere = rng.normal(size=(500, A.shape[1]))
    for u in (nearby, anywhere):
        u = u / np.linalg.norm(u, axis=1, keepdims=True)
        assert (u @ A.T).min(axis=1).max() <= sol.margin + 1e-12


def test_kkt_certificate_on_random_instances():
    """Random shapes, including under-determined keys that are sometimes infeasible: every
    optimal answer certifies to 1e-9 and every infeasible one carries a Farkas vector."""
    rng = np.random.default_rng(2024)
    outcomes = []
    for _ in range(30):
        n, T, dk = rng.integers(1, 4), rng.integers(2, 5), rng.integers(2, 7)
        keys = rng.uniform(-3, 3, size=(n, T, dk))
        alpha = rng.integers(0, T, size=n)
        A, b, _ = att_constraints(keys, alpha)
        sol = att_svm(keys, alpha)
        outcomes.append(sol.status)
        if sol.status == "infeasible":
            assert_farkas(sol, A, b)
            continue
        assert sol.ok, sol.reason
        assert sol.certificate.worst <= KKT_TOL, sol.certificate.summary()
        assert sol.x.dtype == sol.duals.dtype == np.float64
    assert {"optimal", "infeasible"} <= set(outcomes)


def test_certificate_rejects_a_wrong_point():
    keys, alpha = feasible_instance(0)
    A, b, _ = att_constraints(keys, alpha)
    sol = att_svm(keys, alpha)
    sol.certificate.check()
    with pytest.raises(CertificateError, match="primal_residual"):
        certify(A, b, 0.5 * sol.x, sol.duals).check()
    with pytest.raises(CertificateError, match="stationarity"):
        certify(A, b, 1.5 * sol.x, sol.duals).check()
    with pytest.raises(CertificateError, match="dual_residual"):
        certify(A, b, sol.x, sol.duals - 1.0).check()


def test_certificate_ok_rejects_residuals_between_tol_and_far_above():
    """``Certificate.ok`` must apply the same tolerance as ``check()``: worst residual ≤ tol.
    min ½x² s.t. x ≥ 1 has the exact KKT pair x = λ = 1; moving x to 1 − 1e-5 leaves primal
    residual, stationarity and complementarity all ≈ 1e-5, a hundred times tol = 1e-7 but
    well inside a tolerance loosened to 1e-3, so only an exact ``worst <= tol`` rejects it."""
    A, b = np.array([[1.0]]), np.array([1.0])
    assert certify(A, b, [1.0], [1.0]).ok
    near = certify(A, b, [1.0 - 1e-5], [1.0])
    assert 1e-6 < near.worst < 1e-4
    assert not near.ok
    keys, alpha = feasible_instance(0)
    A, b, _ = att_constraints(keys, alpha)
    sol = att_svm(keys, alpha)
    assert sol.certificate.ok
    for x, duals in ((0.5 * sol.x, sol.duals), (1.5 * sol.x, sol.duals), (sol.x, sol.duals - 1.0)):
        assert not certify(A, b, x, duals).ok


# ------------------------------------------------------------------------- typed outcomes


def test_midpoint_key_is_infeasible():
    """Spec F11: k_α is the midpoint of the other two keys, so no p separates it."""
    keys = np.array([[[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]])
    sol = att_svm(keys, [0])
    assert sol.status == "infeasible" and sol.x is None and not sol.ok
    assert_farkas(sol, *att_constraints(keys, [0])[:2])
    with pytest.raises(ValueError, match="infeasible"):
        _ = sol.norm


def test_zero_row_with_unit_margin_is_infeasible():
    A, b = np.array([[0.0, 0.0], [1.0, 0.0]]), np.array([1.0, 1.0])
    sol = solve_margin_qp(A, b)
    assert sol.status == "infeasible"
    assert_farkas(sol, A, b)


def test_token_equal_to_selected_is_infeasible():
    keys = np.array([[[1.0, 2.0], [0.0, 0.0], [1.0, 2.0]]])
    assert att_svm(keys, [0]).status == "infeasible"


def test_no_constraints_gives_zero():
    sol = att_svm(np.ones((2, 1, 3)), [0, 0])
    assert sol.ok and sol.norm == 0 and sol.margin == np.inf


@pytest.mark.parametrize("seed", range(4))
def test_relaxed_rows_never_increase_the_norm(seed):
    """Lowering right-hand sides to 0 enlarges the feasible set (spec §2.7)."""
    keys, alpha = feasible_instance(seed, n=3)
    relaxed = np.random.default_rng(seed).random(3) < 0.5
    full, loose = att_svm(keys, alpha), att_svm(keys, alpha, relaxed_inputs=relaxed)
    assert full.ok and loose.ok
    assert loose.norm <= full.norm + 1e-12
    assert loose.certificate.worst <= KKT_TOL


def test_fully_relaxed_problem_is_solved_exactly():
    """All right-hand sides 0: the optimum 0 is degenerate (every row active with zero
    multiplier), where interior-point slacks stay ~1e-4; the certified answer is exact."""
    keys, alpha = feasible_instance(1)
    sol = att_svm(keys, alpha, relaxed_inputs=np.ones(2, dtype=bool))
    assert sol.ok and sol.norm <= 1e-12


# ----------------------------------------------------------------------------- invariances


@pytest.mark.parametrize("seed", range(3))
def test_per_input_key_shift_invariance(seed):
    keys, alpha = feasible_instance(seed)
    shift = np.random.default_rng(seed).normal(size=(keys.shape[0], 1, keys.shape[2]))
    np.testing.assert_allclose(
        att_svm(keys + shift, alpha).x, att_svm(keys, alpha).x, rtol=0, atol=1e-10
    )


@pytest.mark.parametrize("seed", range(3))
def test_orthogonal_equivariance(seed):
    keys, alpha = feasible_instance(seed)
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(keys.shape[2],) * 2))
    rotated = att_svm(keys @ Q.T, alpha)
    np.testing.assert_allclose(rotated.x, Q @ att_svm(keys, alpha).x, rtol=0, atol=1e-10)


def test_duplicated_tokens_change_nothing():
    """A copy of a non-selected token repeats a row; deduplication keeps one."""
    keys, alpha = feasible_instance(3)
    n, T, _ = keys.shape
    copies = keys[np.arange(n), (alpha + 1) % T][:, None, :]
    base, dup = att_svm(keys, alpha), att_svm(np.concatenate([keys, copies], axis=1), alpha)
    np.testing.assert_allclose(dup.x, base.x, rtol=0, atol=1e-12)
    assert dup.rows == base.rows


def test_cls_svm_equals_att_svm():
    """The `<cls>` SVM is ATT-SVM with keys E[sequence] and α = the position of s*_i."""
    rng = np.random.default_rng(7)
    E = rng.normal(size=(6, 10))
    s_star = np.array([0, 3, 5])
    sequences = np.array([[1, 0, 2, 2], [3, 4, 1, 4], [2, 1, 0, 5]])
    alpha = np.argmax(sequences == s_star[:, None], axis=1)
    cls, att = cls_svm(E, sequences, s_star), att_svm(E[sequences], alpha)
    assert cls.ok and att.ok
    np.testing.assert_allclose(cls.x, att.x, rtol=0, atol=1e-10)
    assert (0, 2) in cls.rows and (0, 0) not in cls.rows


def test_cls_svm_ignores_repeated_selected_token():
    """A second occurrence of s* ties with it for every p, so it imposes no constraint (whereas
    ATT-SVM over positions would be infeasible)."""
    E = np.eye(3)
    once, twice = cls_svm(E, [[0, 1, 2]], [0]), cls_svm(E, [[0, 1, 0, 2]], [0])
    np.testing.assert_allclose(twice.x, once.x, atol=1e-12)
    assert att_svm(E[[[0, 1, 0, 2]]], [0]).status == "infeasible"
    with pytest.raises(ValueError, match="s_star"):
        cls_svm(E, [[1, 2]], [0])


# ---------------------------------------------------------------------- solvers and inputs


def patch_solve(monkeypatch, failing: set[str]):
    """Make cvxpy raise SolverError for the named solvers, as Clarabel does on
    InsufficientProgress (prior-art §C.2)."""
    real_solve = cp.Problem.solve

    def solve(self, *args, solver=None, **kwargs):
        if solver in failing:
            raise cp.error.SolverError(f"{solver} patched to fail")
        return real_solve(self, *args, solver=solver, **kwargs)

    monkeypatch.setattr(cp.Problem, "solve", solve)


def test_fallback_solver_answers_when_clarabel_raises(monkeypatch):
    keys, alpha = feasible_instance(5)
    expected = att_svm(keys, alpha).x
    patch_solve(monkeypatch, {cp.CLARABEL})
    sol = att_svm(keys, alpha)
    assert sol.ok and sol.solver == cp.SCS
    assert "CLARABEL: SolverError" in sol.reason
    np.testing.assert_allclose(sol.x, expected, rtol=0, atol=1e-10)


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")
def test_fallback_when_clarabel_stops_without_optimum(monkeypatch):
    """A non-optimal status (here the iteration cap) also moves on to the next solver."""
    real_solve = cp.Problem.solve

    def capped(self, *args, solver=None, **kwargs):
        kwargs = {"max_iter": 1} if solver == cp.CLARABEL else kwargs
        return real_solve(self, *args, solver=solver, **kwargs)

    monkeypatch.setattr(cp.Problem, "solve", capped)
    sol = att_svm(*feasible_instance(5))
    assert sol.ok and sol.solver == cp.SCS
    assert "CLARABEL: status user_limit" in sol.reason


def test_all_solvers_failing_is_a_typed_outcome(monkeypatch):
    patch_solve(monkeypatch, {name for name, _ in svm.SOLVER_PATH})
    sol = att_svm(*feasible_instance(5))
    assert sol.status == "solver_error" and sol.x is None
    assert all(name in sol.reason for name, _ in svm.SOLVER_PATH)


@pytest.mark.filterwarnings("ignore:Solution may be inaccurate")
def test_uncertifiable_point_is_reported_inaccurate(monkeypatch):
    """With polishing disabled and a solver stopped early, the certificate must say no."""
    real_solve = cp.Problem.solve

    def sloppy(self, *args, solver=None, **kwargs):
        return real_solve(self, solver=cp.SCS, eps_abs=1e-2, eps_rel=1e-2, max_iters=10)

    monkeypatch.setattr(cp.Problem, "solve", sloppy)
    monkeypatch.setattr(svm, "_polish", lambda *args: None)
    monkeypatch.setattr(svm, "_least_distance", lambda *args: None)
    sol = att_svm(*feasible_instance(5))
    assert sol.status == "inaccurate" and not sol.ok
    assert not sol.certificate.ok and "no point passed" in sol.reason


def test_torch_inputs_match_numpy():
    keys, alpha = feasible_instance(2)
    from_torch = att_svm(torch.tensor(keys, requires_grad=True), torch.tensor(alpha))
    np.testing.assert_array_equal(from_torch.x, att_svm(keys, alpha).x)
    assert from_torch.x.dtype == np.float64


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda: att_svm(np.zeros((2, 3)), [0]), "keys"),
        (lambda: att_svm(np.zeros((1, 3, 2)), [3]), "alpha"),
        (lambda: att_svm(np.zeros((1, 3, 2)), [0.0]), "alpha"),
        (lambda: solve_margin_qp([[np.nan, 1.0]], [1.0]), "A"),
        (lambda: solve_margin_qp([[1.0, 1.0]], [-1.0]), "b"),
        (lambda: solve_margin_qp([[1.0, 1.0]], [1.0, 1.0]), "b"),
        (lambda: v_svm(np.ones((2, 2)), [1, 0]), "y"),
        (lambda: att_svm(np.ones((2, 3, 2)), [0, 0], relaxed_inputs=[1, 0]), "relaxed_inputs"),
    ],
)
def test_invalid_inputs_name_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()


@pytest.mark.parametrize("seed", range(4))
def test_the_qp_solvers_own_point_solves_the_margin_qp(seed):
    """The QP handed to the solvers is the margin QP itself (A x ≥ b), checked on the solver's
    own point, before the active-set polish and the NNLS fallback can repair it. Those two
    compute the optimum from A and b alone, so a wrong model for the solvers (A x ≤ b: the
    solvers return x = 0) would otherwise go unnoticed (mutant M07): the certificate only
    sees the repaired point."""
    from models.svm import _solve_qp  # the solver stage alone: what the certificate hides

    keys, alpha = feasible_instance(seed)
    A, b, _ = att_constraints(keys, alpha)
    answer = _solve_qp(A, b)
    assert not isinstance(answer, str), answer
    _, x, _, _ = answer
    exact = att_svm(keys, alpha)
    assert exact.status == "optimal"
    assert (A @ x >= b - 1e-6).all(), "the solver's point violates A x >= b"
    assert np.linalg.norm(x - np.ravel(exact.x)) <= 1e-4 * np.linalg.norm(np.ravel(exact.x))
