"""Unit tests of models/flows/kqpath.py: the regularization-path search over the Frobenius and
nuclear balls in d = 2, the nuclear-norm helpers (normalized margin, factor identity, optimal-face
probe) and the diagonal (K, Q) model with its ℓ1/ℓ2 SVMs (spec tfsvm §2.7, §2.8, §2.12, F8).

The references are independent of the code under test: the Frobenius path against
``models.flows.regpath.reg_path_point`` (Riemannian Newton restarts on the 3-sphere, a different
search), the nuclear path against random points of its sphere, the diagonal SVMs against cvxpy
problems written on w, the diagonal gradients against autograd of the official loss on
W = diag(k ⊙ q).
"""

from __future__ import annotations

import math

import cvxpy as cp
import numpy as np
import pytest
import torch

from models.flows.kqpath import (
    balanced_factors,
    ball_path_point,
    diag_certificate,
    diag_constraints,
    diag_kq_ngd,
    diag_svm,
    diagonal_problem,
    factor_energy,
    frobenius_sphere,
    lp_sphere,
    normalized_margin,
    nuclear_sphere,
)
from models.flows.regpath import objective_for, reg_path_point
from models.oracles.normsvm import norm_svm
from models.problems.cross import CrossProblem, correlation

DTYPE = torch.float64


def _unit(x):
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def official(seed: int, n: int, T: int, d: int, loss: str = "logistic") -> CrossProblem:
    gen = torch.Generator().manual_seed(seed)
    X = _unit(torch.randn(n, T, d, generator=gen, dtype=DTYPE))
    Z = _unit(torch.randn(n, d, generator=gen, dtype=DTYPE))
    v = _unit(torch.randn(d, generator=gen, dtype=DTYPE))
    y = torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0)
    return CrossProblem(X, Z, y, v, loss)


def planar(seed: int) -> CrossProblem:
    """The visualization-1 generator (float64 draws): n = 2, T = 3, d = 2, Y = +1."""
    gen = torch.Generator().manual_seed(seed)
    v = _unit(torch.randn(2, generator=gen, dtype=DTYPE))
    X = 0.3 * torch.randn(2, 3, 2, generator=gen, dtype=DTYPE)
    X[0, :, 0] -= 1.0
    X[1, :, 0] += 1.0
    Z = _unit(torch.randn(2, 2, generator=gen, dtype=DTYPE))
    return CrossProblem(X, Z, torch.ones(2, dtype=DTYPE), v)


# --------------------------------------------------------------------------------------------
# spheres and regularization paths
# --------------------------------------------------------------------------------------------


def test_sphere_charts_have_the_right_norm():
    gen = torch.Generator().manual_seed(0)
    P = torch.rand(500, 3, generator=gen, dtype=DTYPE) * torch.tensor([6.3, 6.3, 1.0])
    for sign in (1.0, -1.0):
        W = nuclear_sphere(7.0, P, sign).numpy().reshape(-1, 2, 2)
        nuc = np.linalg.svd(W, compute_uv=False).sum(-1)
        assert np.allclose(nuc, 7.0, rtol=1e-12)
    W = frobenius_sphere(7.0, P).numpy()
    assert np.allclose(np.linalg.norm(W, axis=1), 7.0, rtol=1e-12)


def test_nuclear_chart_covers_the_sphere():
    """Every W with ‖W‖_⋆ = 1 is reached: from its SVD, θ, φ are the angles of u₁, v₁,
    c = σ₁/(σ₁ + σ₂), and the sign is that of ⟨u₂, u₁⊥⟩⟨v₂, v₁⊥⟩."""
    rng = np.random.default_rng(1)
    for _ in range(50):
        W = rng.standard_normal((2, 2))
        W /= np.linalg.svd(W, compute_uv=False).sum()
        U, s, Vt = np.linalg.svd(W)
        u, v = U[:, 0], Vt[0]
        th, ph = np.arctan2(u[1], u[0]), np.arctan2(v[1], v[0])
        up, vp = np.array([-u[1], u[0]]), np.array([-v[1], v[0]])
        sign = np.sign((U[:, 1] @ up) * (Vt[1] @ vp))
        P = torch.tensor([[th, ph, s[0] / s.sum()]], dtype=DTYPE)
        got = nuclear_sphere(1.0, P, float(sign)).numpy().reshape(2, 2)
        assert np.allclose(got, W, atol=1e-12)


@pytest.mark.parametrize("seed", [0, 1])
def test_frobenius_ball_point_matches_regpath(seed):
    """An independent search (regpath's Newton restarts on the 3-sphere, here without SVM
    directions among its starts) finds the same W̄_R."""
    problem = planar(seed)
    for R in (20.0, 80.0):
        ours = ball_path_point(problem.prompt, R, "fro")
        theirs = reg_path_point(
            problem.prompt, R, method="restarts", starts=torch.zeros(0, 4, dtype=DTYPE)
        )
        assert ours.certified
        assert 1 - correlation(ours.W, theirs.p.numpy().reshape(2, 2)) <= 1e-9
        assert abs(ours.objective - theirs.objective) <= 1e-7 * max(1.0, abs(ours.objective))


@pytest.mark.parametrize("norm", ["fro", "nuc"])
def test_ball_point_beats_random_sphere_points(norm):
    """No one of 20,000 random points of the sphere has a lower log excess loss."""
    problem = planar(2)
    R = 80.0
    point = ball_path_point(problem.prompt, R, norm)
    gen = torch.Generator().manual_seed(5)
    W = torch.randn(20_000, 2, 2, generator=gen, dtype=DTYPE)
    scale = (
        torch.linalg.matrix_norm(W, "nuc") if norm == "nuc" else torch.linalg.matrix_norm(W, "fro")
    )
    P = (R * W / scale[:, None, None]).reshape(-1, 4)
    obj = objective_for(problem.prompt)
    assert float(obj.grid(P).min()) >= point.objective - 1e-9
    assert abs(obj.at(point.W.ravel()) - point.objective) <= 1e-9 * max(1, abs(point.objective))


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_lp_chart_has_the_right_norm_and_covers_the_sphere(p):
    """W = R·u/‖u‖_p has ‖W‖_p = R, and every direction is reached (its own Frobenius angles)."""
    gen = torch.Generator().manual_seed(3)
    P = torch.rand(500, 3, generator=gen, dtype=DTYPE) * torch.tensor([3.1, 3.1, 6.3])
    W = lp_sphere(7.0, P, p).numpy()
    assert np.allclose(np.sum(np.abs(W) ** p, axis=1) ** (1 / p), 7.0, rtol=1e-12)
    u = frobenius_sphere(1.0, P).numpy()
    assert np.allclose(W / np.linalg.norm(W, axis=1, keepdims=True), u, atol=1e-12)


def test_lp_ball_point_at_p2_is_the_frobenius_point():
    problem = planar(0)
    lp = ball_path_point(problem.prompt, 40.0, "lp", p=2.0)
    fro = ball_path_point(problem.prompt, 40.0, "fro")
    assert lp.certified and fro.certified
    assert 1 - correlation(lp.W, fro.W) <= 1e-9
    assert abs(lp.objective - fro.objective) <= 1e-7 * max(1.0, abs(fro.objective))


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_lp_ball_point_beats_random_sphere_points(p):
    """No one of 20,000 random points of the ℓp sphere has a lower log excess loss."""
    problem = planar(2)
    R = 80.0
    point = ball_path_point(problem.prompt, R, "lp", p=p)
    gen = torch.Generator().manual_seed(6)
    W = torch.randn(20_000, 4, generator=gen, dtype=DTYPE)
    P = R * W / torch.linalg.vector_norm(W, ord=p, dim=1, keepdim=True)
    obj = objective_for(problem.prompt)
    assert point.certified and point.p == p
    assert abs(np.sum(np.abs(point.W) ** p) ** (1 / p) - R) <= 1e-9 * R
    assert float(obj.grid(P).min()) >= point.objective - 1e-9


def test_ball_point_rejects_bad_arguments():
    problem = planar(0)
    with pytest.raises(ValueError, match="norm"):
        ball_path_point(problem.prompt, 10.0, "lp")
    with pytest.raises(ValueError, match="norm"):
        ball_path_point(problem.prompt, 10.0, "lp", p=1.0)
    with pytest.raises(ValueError, match="p"):
        ball_path_point(problem.prompt, 10.0, "fro", p=2.0)
    with pytest.raises(ValueError, match="R"):
        ball_path_point(problem.prompt, -1.0, "fro")
    with pytest.raises(ValueError, match="dim"):
        ball_path_point(official(0, 2, 3, 3).prompt, 10.0, "fro")


# --------------------------------------------------------------------------------------------
# nuclear-norm helpers
# --------------------------------------------------------------------------------------------


def test_factor_identity():
    """min_{KQᵀ=W} ½(‖K‖² + ‖Q‖²) = ‖W‖_⋆ (spec §2.7): the SVD factors attain it, random
    factorizations KQᵀ = W (K = W M⁻ᵀ, Q = M) never go below."""
    rng = np.random.default_rng(2)
    for _ in range(20):
        W = rng.standard_normal((4, 4))
        nuc = np.linalg.svd(W, compute_uv=False).sum()
        K, Q = balanced_factors(W)
        assert np.allclose(K @ Q.T, W, atol=1e-12)
        assert abs(factor_energy(K, Q) - nuc) <= 1e-12 * nuc
        M = rng.standard_normal((4, 4))
        assert factor_energy(W @ np.linalg.inv(M).T, M) >= nuc * (1 - 1e-12)


def test_normalized_margin_at_the_svms():
    problem = official(3, 4, 5, 6)
    alpha = problem.opt_tokens()
    for norm in ("fro", "nuc"):
        sol = norm_svm(problem.X, problem.Z, alpha, norm)
        got = normalized_margin(problem.X, problem.Z, alpha, sol.W, norm)
        assert abs(got * sol.value - 1) <= 1e-6
        other = sol.W + 0.1 * np.random.default_rng(0).standard_normal(sol.W.shape)
        assert normalized_margin(problem.X, problem.Z, alpha, other, norm) < got


def aligned_queries(seed: int, n: int = 3):
    """Spec F8: orthonormal queries, T = 2, x_i0 − x_i1 = c_i z_i, Y_i = sign(vᵀz_i)."""
    gen = torch.Generator().manual_seed(seed)
    U, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=DTYPE))
    Z = U.T.contiguous()
    v = _unit(torch.randn(n, generator=gen, dtype=DTYPE))
    c = 0.5 + torch.rand(n, generator=gen, dtype=DTYPE)
    base = torch.randn(n, n, generator=gen, dtype=DTYPE)
    X = torch.stack([base + c[:, None] * Z, base], 1)
    return CrossProblem(X, Z, torch.sign(Z @ v), v), c


# --------------------------------------------------------------------------------------------
# the diagonal model
# --------------------------------------------------------------------------------------------


def test_diagonal_problem_is_the_model_at_diagonal_w():
    problem = official(6, 4, 3, 8, "exponential")
    diag = diagonal_problem(problem)
    w = torch.randn(8, generator=torch.Generator().manual_seed(0), dtype=DTYPE)
    assert torch.allclose(diag.logits(w), problem.logits(torch.diag(w)), atol=1e-13)
    assert abs(float(diag.loss_value(w)) - float(problem.naive_loss(torch.diag(w)))) <= 1e-13


@pytest.mark.parametrize("seed", range(4))
def test_diag_svms_match_cvxpy(seed):
    problem = official(seed, 4, 3, 8)
    alpha = problem.opt_tokens()
    A = diag_constraints(problem.X, problem.Z, alpha)
    for norm, p in (("l1", 1), ("l2", 2)):
        sol = diag_svm(problem.X, problem.Z, alpha, norm)
        assert sol.ok, sol.reason
        w = cp.Variable(8)
        ref = cp.Problem(cp.Minimize(cp.norm(w, p)), [A @ w >= 1])
        ref.solve(solver=cp.CLARABEL)
        assert abs(sol.value - ref.value) <= 1e-6 * ref.value
        assert np.linalg.norm(sol.w - w.value) <= 1e-4 * np.linalg.norm(w.value)


def test_diag_certificate_rejects_a_wrong_answer():
    problem = official(1, 4, 3, 8)
    alpha = problem.opt_tokens()
    A = diag_constraints(problem.X, problem.Z, alpha)
    sol = diag_svm(problem.X, problem.Z, alpha, "l1")
    assert max(diag_certificate(A, sol.w, sol.duals, "l1").values()) <= 1e-7
    assert diag_certificate(A, 0.99 * sol.w, sol.duals, "l1")["primal"] > 1e-3
    assert diag_certificate(A, 1.01 * sol.w, sol.duals, "l1")["gap"] > 1e-3
    assert diag_certificate(A, sol.w, 1.05 * sol.duals, "l1")["dual_norm"] > 1e-3


def test_diag_svm_infeasible():
    problem = official(0, 2, 3, 2)
    X = problem.X.clone()
    X[0, 1] = X[0, 0]  # a duplicate of the selected token: 0 ≥ 1
    assert diag_svm(X, problem.Z, [0, 0], "l1").status == "infeasible"


def test_diag_step_matches_autograd():
    """One per-factor NGD step: g_k = ∇_w ⊙ q and g_q = ∇_w ⊙ k, each normalised, against
    autograd of the official loss at W = diag(k ⊙ q)."""
    problem = official(2, 4, 3, 8, "exponential")
    gen = torch.Generator().manual_seed(1)
    k0 = torch.randn(8, generator=gen, dtype=DTYPE) * 0.3
    q0 = torch.randn(8, generator=gen, dtype=DTYPE) * 0.3
    k, q = k0.clone().requires_grad_(True), q0.clone().requires_grad_(True)
    gk, gq = torch.autograd.grad(problem.naive_loss(torch.diag(k * q)), (k, q))
    run = diag_kq_ngd(diagonal_problem(problem), k0.numpy(), q0.numpy(), lr=0.1, steps=1)
    assert np.allclose(run.ks[-1], (k0 - 0.1 * gk / gk.norm()).numpy(), atol=1e-13)
    assert np.allclose(run.qs[-1], (q0 - 0.1 * gq / gq.norm()).numpy(), atol=1e-13)


def test_diag_equal_init_locks_the_sign_and_q0_zero_moves_only_q():
    problem = diagonal_problem(official(3, 4, 3, 8, "exponential"))
    start = np.full(8, 0.1)
    run = diag_kq_ngd(problem, start, start, steps=300, record_every=100)
    assert np.array_equal(run.ks, run.qs)  # k = q for ever: w = k² ≥ 0
    k0 = np.random.default_rng(0).standard_normal(8) * 0.1
    first = diag_kq_ngd(problem, k0, np.zeros(8), steps=1)
    assert np.array_equal(first.ks[-1], k0)
    assert abs(np.linalg.norm(first.qs[-1]) - 0.1) <= 1e-15
    assert list(run.steps) == [0, 100, 200, 300]


def test_a_failed_l1_lp_is_a_reported_solver_error(monkeypatch):
    """HiGHS giving up (a status other than 0 or 2) is a failure of the machinery: status
    "solver_error", reported, never a point."""
    from types import SimpleNamespace

    from models.flows import kqpath
    from models.numerics import failures

    X = np.array([[[1.0, 0.0], [0.0, 1.0]], [[0.0, 1.0], [1.0, 1.0]]])
    Z = np.array([[1.0, 0.5], [0.5, 1.0]])
    gave_up = SimpleNamespace(status=4, message="numerical difficulties", x=None)
    monkeypatch.setattr(kqpath, "linprog", lambda *a, **k: gave_up)
    with failures.watch() as seen:
        sol = kqpath.diag_svm(X, Z, np.array([0, 0]), "l1")
    assert sol.status == "solver_error" and sol.w is None and not sol.ok
    assert sol.reason == "numerical difficulties" and math.isnan(sol.value)
    assert [f.key for f in seen.failures] == ["SVM oracle: solver_error"]
    assert seen.failures[0].detail == "diagonal ℓ1 LP: numerical difficulties"
