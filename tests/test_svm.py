"""Unit tests of the certified SVM oracle (models/oracles/svm.py): closed forms, certificates, typed
outcomes, invariances (spec maxmargin §1.4, §2.7–2.9) and the solver fallback path."""

import cvxpy as cp
import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from models.oracles import svm
from models.oracles.svm import (
    CertificateError,
    att_constraints,
    att_svm,
    certify,
    cls_svm,
    solve_margin_qp,
    tied_tokens,
    v_svm,
    w_svm,
    w_svm_closed_form,
)

KKT_TOL = 1e-9
#: The tests of the cvxpy fallback chain run the reference pipeline: the certified fast path
#: answers these instances before cvxpy is called, so patching cvxpy would change nothing.
REFERENCE = "reference"
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
    sol = att_svm(keys, alpha, method=REFERENCE)
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
    sol = att_svm(*feasible_instance(5), method=REFERENCE)
    assert sol.ok and sol.solver == cp.SCS
    assert "CLARABEL: status user_limit" in sol.reason


def test_all_solvers_failing_is_a_typed_outcome(monkeypatch):
    patch_solve(monkeypatch, {name for name, _ in svm.SOLVER_PATH})
    sol = att_svm(*feasible_instance(5), method=REFERENCE)
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
    from models.oracles.svm import _solve_qp  # the solver stage alone: what the certificate hides

    keys, alpha = feasible_instance(seed)
    A, b, _ = att_constraints(keys, alpha)
    answer = _solve_qp(A, b)
    assert not isinstance(answer, str), answer
    _, x, _, _ = answer
    exact = att_svm(keys, alpha)
    assert exact.status == "optimal"
    assert (A @ x >= b - 1e-6).all(), "the solver's point violates A x >= b"
    assert np.linalg.norm(x - np.ravel(exact.x)) <= 1e-4 * np.linalg.norm(np.ravel(exact.x))


# ------------------------------------------------------------- fast path against the reference

#: Fast and reference optima must agree to this, relative to max(1, ‖x‖).
AGREE_TOL = 1e-8
#: The Farkas acceptance test of the oracle (bᵀy > 0, ‖Aᵀy‖ ≤ tol·bᵀy), at its default tol.
FARKAS_TOL = 1e-7
#: Share of each family the fast path must answer itself: a fast path that always fell through
#: would agree with the reference vacuously.
MIN_FAST_SHARE = 0.9
#: Instances per family; the first ones have the extreme sizes n·T = 100 and d = 32.
INSTANCES_PER_FAMILY = 40
#: (n, T, d) of the first instances of each family: n·T = 100 or d = 32, and d = 1.
EXTREME_SIZES = ((10, 10, 32), (1, 100, 32), (50, 2, 32), (4, 25, 32), (20, 5, 1))
#: ATT-SVM instance families (see att_instance) and their seeds.
FAMILY_SEEDS = {"separable": 11, "random": 12, "integer": 13, "duplicates": 14, "relaxed": 15}


def att_instance(family: str, k: int, rng: np.random.Generator):
    """One ATT-SVM instance (keys, alpha, relaxed_inputs) of a family, n·T ≤ 100, d ≤ 32.

    separable: α = argmax of the scores of a random p (feasible); random: random α (feasible or
    not); integer: keys in {−1, 0, 1} (ties, repeated rows, degenerate optima, infeasible);
    duplicates: copies of non-selected tokens appended; relaxed: a random relaxed mask, all
    inputs relaxed in every fifth instance (the degenerate optimum 0)."""
    if k < len(EXTREME_SIZES):
        n, T, d = EXTREME_SIZES[k]
    else:
        n = int(rng.integers(1, 21))
        T = int(rng.integers(2, 100 // n + 1))
        d = int(rng.integers(1, 33))
    keys = rng.normal(size=(n, T, d))
    relaxed = None
    if family == "integer":
        keys = rng.integers(-1, 2, size=(n, T, d)).astype(np.float64)
    alpha = (keys @ rng.normal(size=d)).argmax(-1)
    if family in ("random", "integer"):
        alpha = rng.integers(0, T, size=n)
    if family == "duplicates" and T > 2:
        copies = rng.integers(0, T, size=(n, max(1, min(T, 100 // n - T))))
        copies = np.where(copies == alpha[:, None], (copies + 1) % T, copies)
        extra = keys[np.arange(n)[:, None], copies]
        keys = np.concatenate([keys, extra], axis=1)[:, : max(T, 100 // n)]
    if family == "relaxed":
        relaxed = np.ones(n, dtype=bool) if k % 5 == 0 else rng.random(n) < 0.5
    return keys, alpha, relaxed


def degenerate_problem(rng: np.random.Generator):
    """min ½‖x‖² s.t. A x ≥ b with a known optimum x* (‖x*‖ = 1) and, besides its support
    rows, rows active at x* with zero multiplier (b = 1 and b = 0), inactive rows and repeated
    rows: the degenerate cases where interior-point slacks hide the active set."""
    d = int(rng.integers(1, 33))
    x = rng.normal(size=d)
    x /= np.linalg.norm(x)

    def orthogonal(count):
        w = rng.normal(size=(count, d))
        return w - np.outer(w @ x, x)

    k = int(rng.integers(1, d + 3))
    lam = rng.uniform(0.2, 1.0, size=k)
    lam /= lam.sum()  # Σλ_j a_j = x for a_j = x + w_j with Σλ_j w_j = 0
    w = orthogonal(k)
    w[-1] = -(lam[:-1] @ w[:-1]) / lam[-1]
    support = x + w
    zero_multiplier = x + orthogonal(int(rng.integers(1, 20)))  # aᵀx* = 1 = b
    relaxed_active = orthogonal(int(rng.integers(0, 10)))  # aᵀx* = 0 = b
    inactive = rng.uniform(1.5, 3.0, size=(int(rng.integers(0, 30)), 1)) * x + orthogonal(1)
    A = np.vstack([support, zero_multiplier, relaxed_active, inactive])
    b = np.concatenate([np.ones(k + len(zero_multiplier)), np.zeros(len(relaxed_active))])
    b = np.concatenate([b, np.ones(len(inactive))])
    repeat = rng.integers(0, len(A), size=int(rng.integers(0, 100 - len(A) + 1)) // 4)
    return np.vstack([A, A[repeat]]), np.concatenate([b, b[repeat]]), x


def assert_independent_farkas(y, A, b):
    """y ≥ 0, bᵀy > 0 and ‖Aᵀy‖ ≤ tol·bᵀy, recomputed here (no ‖x‖ < 1/tol is feasible)."""
    assert y is not None and (y >= 0).all(), "Farkas vector: missing or negative"
    value, residual = float(b @ y), float(np.linalg.norm(A.T @ y))
    assert value > 0, f"Farkas bᵀy={value:.3e}, must be > 0"
    assert residual <= FARKAS_TOL * value, (
        f"Farkas ‖Aᵀy‖={residual:.3e} exceeds tol·bᵀy={FARKAS_TOL * value:.3e}"
    )


def assert_fast_agrees_with_reference(A, b, fast, ref, label: str):
    """Same status; the same x to AGREE_TOL·max(1, ‖x‖), both certified (their certificates
    and `certify` rerun on the returned pair); both Farkas vectors accepted."""
    assert fast.status == ref.status, f"{label}: fast {fast.status} ({fast.reason}) vs {ref}"
    if ref.status == "optimal":
        fx, rx = np.ravel(fast.x), np.ravel(ref.x)
        bound = AGREE_TOL * max(1.0, float(np.linalg.norm(rx)))
        gap = float(np.linalg.norm(fx - rx))
        assert gap <= bound, f"{label}: ‖x_fast − x_ref‖={gap:.3e} exceeds {bound:.1e}"
        for name, sol in (("fast", fast), ("reference", ref)):
            assert sol.certificate.ok, f"{label}: {name}: {sol.certificate.summary()}"
            again = certify(A, b, sol.x, sol.duals)
            assert again.ok, f"{label}: {name} recertified: {again.summary()}"
    elif ref.status == "infeasible":
        assert_independent_farkas(fast.duals, A, b)
        assert_independent_farkas(ref.duals, A, b)
    else:
        pytest.fail(f"{label}: reference answered {ref.status}: {ref.reason}")


def assert_mostly_fast(solutions, label: str):
    fell_through = [sol.reason for sol in solutions if sol.solver != svm.FAST_SOLVER]
    fast = len(solutions) - len(fell_through)
    assert fast >= MIN_FAST_SHARE * len(solutions), (
        f"{label}: the fast path answered {fast} of {len(solutions)}, below "
        f"{MIN_FAST_SHARE:.0%}; first reasons: {fell_through[:3]}"
    )


@pytest.mark.parametrize("family", list(FAMILY_SEEDS))
def test_fast_path_agrees_with_reference_on_att_svm(family):
    rng = np.random.default_rng(FAMILY_SEEDS[family])
    answers, statuses = [], set()
    for k in range(INSTANCES_PER_FAMILY):
        keys, alpha, relaxed = att_instance(family, k, rng)
        n, T, d = keys.shape
        assert n * T <= 100 and d <= 32
        A, b, _ = att_constraints(keys, alpha, relaxed)
        fast = att_svm(keys, alpha, relaxed_inputs=relaxed)
        ref = att_svm(keys, alpha, relaxed_inputs=relaxed, method=REFERENCE)
        assert fast.rows == ref.rows
        assert_fast_agrees_with_reference(A, b, fast, ref, f"{family} #{k} (n, T, d)={keys.shape}")
        answers.append(fast)
        statuses.add(fast.status)
    assert_mostly_fast(answers, family)
    if family in ("random", "integer"):
        assert statuses == {"optimal", "infeasible"}, f"{family}: only {statuses} drawn"


def test_fast_path_agrees_with_reference_on_degenerate_problems():
    """Known optimum x*, with active rows of zero multiplier (b = 1 and b = 0) and repeated
    rows: both paths find x* and certify it."""
    rng = np.random.default_rng(16)
    answers = []
    for k in range(INSTANCES_PER_FAMILY):
        A, b, x_star = degenerate_problem(rng)
        assert A.shape[0] <= 100 and A.shape[1] <= 32
        fast, ref = solve_margin_qp(A, b), solve_margin_qp(A, b, method=REFERENCE)
        assert_fast_agrees_with_reference(A, b, fast, ref, f"degenerate #{k} A{A.shape}")
        gap = float(np.linalg.norm(fast.x - x_star))
        assert gap <= AGREE_TOL, f"degenerate #{k}: ‖x_fast − x*‖={gap:.3e} > {AGREE_TOL:.0e}"
        answers.append(fast)
    assert_mostly_fast(answers, "degenerate")


def test_fast_path_calls_neither_cvxpy_nor_the_lp(monkeypatch):
    """What the fast path answers, it answers alone (that is where its speed comes from)."""

    def forbidden(*args, **kwargs):
        raise AssertionError("the fast path called cvxpy or the LP")

    monkeypatch.setattr(cp.Problem, "solve", forbidden)
    monkeypatch.setattr(svm, "linprog", forbidden)
    optimal = att_svm(*feasible_instance(5))
    infeasible = att_svm(np.array([[[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]]), [0])
    assert optimal.ok and optimal.solver == svm.FAST_SOLVER
    assert infeasible.status == "infeasible" and infeasible.solver == svm.FAST_SOLVER
    assert "Farkas vector from Lawson–Hanson NNLS" in infeasible.reason
    assert_farkas(infeasible, *att_constraints([[[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]], [0])[:2])


CVXPY_SOLVERS = {name for name, _ in svm.SOLVER_PATH}


def test_fast_path_point_failing_its_certificate_falls_through(monkeypatch):
    """A wrong least-distance point (doubled) fails the KKT certificate, and u is no Farkas
    vector of a feasible problem: the reference pipeline answers, correctly."""
    keys, alpha = feasible_instance(5)
    expected = att_svm(keys, alpha, method=REFERENCE)
    real = svm._least_distance

    def doubled(A, b, u=None):
        point = real(A, b, u)
        return None if point is None else (2.0 * point[0], point[1])

    monkeypatch.setattr(svm, "_least_distance", doubled)
    sol = att_svm(keys, alpha)
    assert sol.ok and sol.solver in CVXPY_SOLVERS, sol.reason
    assert "fast path fell through (NNLS point failed the KKT certificate" in sol.reason
    np.testing.assert_allclose(sol.x, expected.x, rtol=0, atol=1e-10)


def test_fast_path_at_its_iteration_limit_falls_through(monkeypatch):
    keys, alpha = feasible_instance(6)
    expected = att_svm(keys, alpha, method=REFERENCE)
    monkeypatch.setattr(svm, "_least_distance_multipliers", lambda A, b: None)
    sol = att_svm(keys, alpha)
    assert sol.ok and sol.solver in CVXPY_SOLVERS, sol.reason
    assert "iteration limit" in sol.reason
    np.testing.assert_allclose(sol.x, expected.x, rtol=0, atol=1e-10)


def test_fast_path_farkas_candidate_failing_the_test_falls_through(monkeypatch):
    """An NNLS vector that is no Farkas certificate leaves an infeasible problem to the LP and
    its own Farkas vector. Rows (1, 1), (−1, −1): u = (1, 0) gives no point (1 − bᵀu = 0) and
    ‖Aᵀu‖ = √2, where the true NNLS vector is (½, ½)."""
    keys = np.array([[[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]])
    A, b, _ = att_constraints(keys, [0])
    monkeypatch.setattr(svm, "_least_distance_multipliers", lambda A, b: np.eye(len(b))[0])
    sol = att_svm(keys, [0])
    assert sol.status == "infeasible" and sol.solver == "HiGHS (LP)", sol.reason
    assert "its u fails the Farkas test" in sol.reason
    assert_farkas(sol, A, b)


def test_method_must_be_known():
    with pytest.raises(ValueError, match="method"):
        solve_margin_qp([[1.0]], [1.0], method="fast")
    with pytest.raises(ValueError, match="method"):
        att_svm(FIG1_KEYS, [0], method="cvxpy")


def test_every_builder_offers_the_reference_pipeline():
    """method="reference" reaches the solver from every builder (and "auto" the fast path)."""
    keys, alpha = feasible_instance(2)
    p = np.random.default_rng(2).normal(size=keys.shape[2])
    E, seqs = np.random.default_rng(3).normal(size=(5, 4)), np.array([[0, 1, 2], [3, 4, 0]])
    calls = {
        "att_svm": lambda m: att_svm(keys, alpha, method=m),
        "w_svm": lambda m: w_svm(keys, p, alpha, method=m),
        "w_svm_closed_form": lambda m: w_svm_closed_form(keys, p, alpha, method=m),
        "v_svm": lambda m: v_svm(keys[:, 0], [1, -1], method=m),
        "cls_svm": lambda m: cls_svm(E, seqs, [0, 3], method=m),
    }
    for name, call in calls.items():
        fast, ref = call("auto"), call(REFERENCE)
        assert fast.ok and ref.ok, name
        assert svm.FAST_SOLVER in fast.solver and svm.FAST_SOLVER not in ref.solver, name
        np.testing.assert_allclose(fast.x, ref.x, rtol=0, atol=1e-9, err_msg=name)


# ------------------------------------------------------------- builders: unchanged behaviour


def att_constraints_before(keys, alpha, relaxed_inputs=None):
    """att_constraints as it was before the fast path (loop over labels, np.unique dedupe)."""
    keys = np.asarray(keys, dtype=np.float64)
    n, T, _ = keys.shape
    alpha = np.asarray(alpha, dtype=np.int64)
    relaxed = np.zeros(n, dtype=bool) if relaxed_inputs is None else relaxed_inputs
    i_idx, t_idx = np.nonzero(np.arange(T)[None, :] != alpha[:, None])
    A = (keys[i_idx, alpha[i_idx]] - keys[i_idx, t_idx]).reshape(len(i_idx), keys.shape[2])
    b = np.where(relaxed[i_idx], 0.0, 1.0)
    labels = [(int(i), int(t)) for i, t in zip(i_idx, t_idx, strict=True)]
    if not labels:
        return A, b, ()
    _, first = np.unique(np.column_stack([A, b]), axis=0, return_index=True)
    keep = np.sort(first)
    return A[keep], b[keep], tuple(labels[k] for k in keep)


def test_att_constraints_unchanged_by_the_faster_dedupe():
    """Same rows, right-hand sides and (i, t) labels as np.unique's dedupe, on keys with
    repeated tokens, ties in the first coordinate and signed zeros (0.0 = −0.0 as floats)."""
    rng = np.random.default_rng(17)
    for k in range(200):
        n, T, d = int(rng.integers(1, 6)), int(rng.integers(1, 8)), int(rng.integers(1, 5))
        keys = rng.integers(-1, 2, size=(n, T, d)) * (1.0 if k % 2 else -0.0)
        if k % 3 == 0:
            keys = keys + rng.normal(size=(n, T, d)) * (rng.random((n, T, 1)) < 0.5)
        alpha = rng.integers(0, T, size=n)
        relaxed = rng.random(n) < 0.3
        A, b, rows = att_constraints(keys, alpha, relaxed)
        A0, b0, rows0 = att_constraints_before(keys, alpha, relaxed)
        assert rows == rows0, f"instance {k}: labels {rows} vs {rows0}"
        assert all(type(i) is int and type(t) is int for i, t in rows)
        np.testing.assert_array_equal(A, A0)
        np.testing.assert_array_equal(b, b0)
    labels = list(range(6))
    A = np.array([[0.0, 1.0], [-0.0, 1.0], [1.0, 2.0], [0.0, 3.0], [1.0, 2.0], [0.0, 1.0]])
    assert svm._dedupe(A, np.ones(6), labels)[2] == (0, 2, 3)
    assert svm._dedupe(A, np.array([1.0, 0, 1, 1, 0, 1]), labels)[2] == (0, 1, 2, 3, 4)


def test_tied_tokens_are_exact_ties_of_the_selected_score():
    scores = np.array([[1.0, 0.5, 0.5, 0.5 + 2**-52], [0.25, 0.25, -1.0, 0.25]])
    tied = tied_tokens(scores, [1, 3])
    assert tied.tolist() == [[False, False, True, False], [True, True, False, False]]
    assert not tied_tokens(scores, [0, 2]).any()


def test_free_tokens_drop_exactly_their_rows():
    """The tie-sharing SVM is ATT-SVM on the keys without the freed tokens."""
    rng = np.random.default_rng(3)
    keys = rng.standard_normal((2, 4, 5))
    free = np.zeros((2, 4), dtype=bool)
    free[0, 2] = free[1, 0] = True
    dropped = att_svm(keys, [1, 3], free=free)
    kept = [[0, 1, 3], [1, 2, 3]]
    reduced = att_svm(np.stack([keys[i, kept[i]] for i in range(2)]), [1, 2])
    assert dropped.ok and reduced.ok
    np.testing.assert_allclose(dropped.x, reduced.x, atol=1e-9)
    assert {(0, 2), (1, 0)}.isdisjoint(dropped.rows)
    with pytest.raises(ValueError, match="free"):
        att_svm(keys, [1, 3], free=np.zeros((2, 3), dtype=bool))


def test_v_svm_rows_name_the_inputs():
    Z = np.array([[1.0, 0.0], [0.0, -1.0], [0.5, 0.5]])
    sol = svm.v_svm(Z, np.array([1.0, -1.0, 1.0]))
    assert sol.ok and sol.rows == (0, 1, 2)


def test_polish_certifies_an_active_row_far_shorter_than_the_others():
    """Rows of norms 3e-4 and 0.46 both active (the ladder's medium ties draw k = 47, reduced
    to its two active rows and one inactive one): ‖p^mm‖ ≈ 7.7e3 and the short row's
    multiplier ≈ 6e7, so its slack must be ~1e-16, not the ~1e-13 a normwise-stable solve
    leaves in it (complementarity 1e-5: "inaccurate" before the polish scaled its rows). The
    answer is the exact solution of the two active equations (50 digits)."""
    import mpmath

    A = np.array(
        [
            [0.00021437719603989436, -0.0002410967753444515],
            [-0.4201934366297111, 0.19396193691913777],
            [0.06864841855192017, -0.16560608771360535],
        ]
    )
    sol = solve_margin_qp(A, np.ones(3))
    assert sol.status == "optimal", sol.reason
    with mpmath.workdps(50):
        exact = mpmath.lu_solve(mpmath.matrix(A[:2].tolist()), mpmath.matrix([1, 1]))
        exact = np.array([float(v) for v in exact])
    np.testing.assert_allclose(sol.x, exact, rtol=1e-12)
    assert sol.certificate.complementarity <= 1e-7 and (A @ sol.x)[2] > 1
