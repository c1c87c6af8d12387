"""Unit tests of the cross-attention model (models/problems/cross.py, spec tfsvm §1, §4, §6).

Every reference below is written independently of the vectorised prompt engine:
- the model and its gradient against ``naive_output``/``naive_loss`` (the official way of
  writing f_i(W) = vᵀX_iᵀS(X_i W z_i)), torch autograd of it, central differences, a hand
  instance and, where float64 saturates (‖W‖ ≥ 1e3), a 60-digit mpmath evaluation of ∇L(W)
  written on X, Z, W directly;
- the dynamics (W-NGD, (K, Q)-NGD with and without the official λ = ε penalty, ℓp mirror
  descent, Polyak) against loops written here on autograd of ``naive_loss``, and against the
  structural facts of spec §1.6 (row space in span{z_i}, columns outside the queries' support);
- the metrics against their definitions (spec §1.8), the SVM of the Polyak test against a
  cvxpy problem written on W.
"""

from __future__ import annotations

import math

import cvxpy as cp
import mpmath as mp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.problems.cross import (
    MACHINE_EPS,
    CrossProblem,
    _factor_step,
    bregman_divergence,
    correlation,
    dual_map,
    kq_ngd,
    lp_normalize,
    md,
    polyak,
    primal_map,
    w_gd,
    w_ngd,
)

DTYPE = torch.float64
LOSSES = ["logistic", "exponential", "correlation", "square"]
FAST = settings(max_examples=40, deadline=None)

#: Agreement of two float64 evaluations of the same smooth quantity by different routes
#: (einsum vs batched matmul, compiled log-space kernel vs autograd): a few hundred ulps of the
#: size of the terms summed.
ROUNDING = 1e-12
#: 1 − cos between the log-space direction and the 60-digit reference, as in
#: tests/test_attention.py: the float64 logits at ‖W‖ = 1e5 carry relative errors ~1e-16·1e5.
MP_COS_TOL = 1e-12


# --------------------------------------------------------------------------------------------
# instances
# --------------------------------------------------------------------------------------------


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.linalg.vector_norm(x, dim=-1, keepdim=True)


def _labels(gen, n):
    return torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)


def gaussian_problem(seed, n, T, d, loss="logistic", Z=None) -> CrossProblem:
    """Gaussian tokens, queries and head from a seeded generator (Z may be given)."""
    gen = torch.Generator().manual_seed(int(seed))
    X = torch.randn(n, T, d, generator=gen, dtype=DTYPE)
    Zg = torch.randn(n, d, generator=gen, dtype=DTYPE)
    v = torch.randn(d, generator=gen, dtype=DTYPE)
    return CrossProblem(X, Zg if Z is None else Z, _labels(gen, n), v, loss)


def official_problem(seed, n=6, T=8, d=10) -> CrossProblem:
    """The official generator (spec §3.1): tokens, queries, head on the unit sphere."""
    gen = torch.Generator().manual_seed(int(seed))
    X = _unit(torch.randn(n, T, d, generator=gen, dtype=DTYPE))
    Z = _unit(torch.randn(n, d, generator=gen, dtype=DTYPE))
    v = _unit(torch.randn(d, generator=gen, dtype=DTYPE))
    return CrossProblem(X, Z, _labels(gen, n), v)


def equal_nonopt_problem(seed, n=3, T=4, d=6) -> CrossProblem:
    """Spec §3.3 written out here: x_it = k_it + Y_i g_it v, k_it ⟂ v unit, g_opt = 1 at token 0,
    every other g = 0.5."""
    gen = torch.Generator().manual_seed(int(seed))
    v = _unit(torch.randn(d, generator=gen, dtype=DTYPE))
    k = torch.randn(n, T, d, generator=gen, dtype=DTYPE)
    k = _unit(k - (k @ v)[..., None] * v)
    Z = _unit(torch.randn(n, d, generator=gen, dtype=DTYPE))
    y = _labels(gen, n)
    g = torch.full((n, T), 0.5, dtype=DTYPE)
    g[:, 0] = 1.0
    return CrossProblem(k + (y[:, None] * g)[..., None] * v, Z, y, v)


def random_matrix(seed, d, scale=1.0, m=None) -> np.ndarray:
    gen = torch.Generator().manual_seed(int(seed))
    return (torch.randn(d, d if m is None else m, generator=gen, dtype=DTYPE) * scale).numpy()


@st.composite
def moderate_cases(draw, min_d=1):
    """(problem, W): n ≤ 4, T ≤ 5, d ≤ 5, every loss, ‖W‖_F ≲ 2·d."""
    seed = draw(st.integers(0, 2**31 - 1))
    n, T = draw(st.integers(1, 4)), draw(st.integers(2, 5))
    d = draw(st.integers(min_d, 5))
    problem = gaussian_problem(seed, n, T, d, draw(st.sampled_from(LOSSES)))
    W = random_matrix(seed + 1, d, draw(st.floats(0.0, 2.0)))
    return problem, W


def autograd_gradient(problem: CrossProblem, W) -> np.ndarray:
    Wt = torch.as_tensor(np.array(W), dtype=DTYPE).requires_grad_(True)
    (g,) = torch.autograd.grad(problem.naive_loss(Wt), Wt)
    return g.numpy()


def term_scale(problem: CrossProblem, W) -> float:
    """The size of the terms a float64 ∇L adds up: max|ℓ'|·max|γ|·max‖x‖·max‖z‖ (its rounding
    is ~1e-16 of this; the gradient itself may be 0 exactly, e.g. with flat scores)."""
    out = problem.y * problem.naive_output(torch.as_tensor(W))
    lp = float(problem.loss.deriv(out).abs().max())
    x = float(torch.linalg.vector_norm(problem.X, dim=-1).max())
    z = float(torch.linalg.vector_norm(problem.Z, dim=-1).max())
    return lp * float(problem.scores.abs().max()) * x * z


def span_projector(Z: np.ndarray) -> np.ndarray:
    """The orthogonal projector onto span{z_i}, by QR (not the model's SVD)."""
    q, r = np.linalg.qr(Z.T)
    keep = np.abs(np.diag(r)) > 1e-10 * max(1.0, float(np.abs(r).max()))
    q = q[:, keep]
    return q @ q.T


def fro_svm(problem: CrossProblem, alpha) -> np.ndarray:
    """W^mm(α) = argmin ‖W‖_F s.t. (x_iα − x_it)ᵀ W z_i ≥ 1, written on W with cvxpy."""
    X, Z = problem.X.numpy(), problem.Z.numpy()
    W = cp.Variable((problem.d, problem.d))
    cons = [
        (X[i, alpha[i]] - X[i, t]) @ W @ Z[i] >= 1
        for i in range(problem.n)
        for t in range(problem.T)
        if t != alpha[i]
    ]
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), cons)
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == "optimal", prob.status
    return W.value


# --------------------------------------------------------------------------------------------
# the model and its gradient
# --------------------------------------------------------------------------------------------


@FAST
@given(case=moderate_cases())
def test_logits_and_loss_equal_the_official_way_of_writing_the_model(case):
    problem, W = case
    Wt = torch.as_tensor(W)
    # logits: the model's einsum against x_itᵀ W z_i one input at a time
    naive = torch.stack([problem.X[i] @ Wt @ problem.Z[i] for i in range(problem.n)])
    torch.testing.assert_close(problem.logits(W), naive, rtol=ROUNDING, atol=1e-14)
    # L(W) through the vectorised prompt model against the official way of writing it
    value, ref = float(problem.loss_value(W)), float(problem.naive_loss(W))
    assert abs(value - ref) <= ROUNDING * max(1.0, abs(ref))
    # and naive_output against its own definition vᵀ X_iᵀ softmax(logits)
    out = torch.stack(
        [problem.v @ problem.X[i].T @ torch.softmax(naive[i], 0) for i in range(problem.n)]
    )
    torch.testing.assert_close(problem.naive_output(W), out, rtol=ROUNDING, atol=1e-14)


@FAST
@given(case=moderate_cases())
def test_gradient_matches_autograd_of_the_naive_loss(case):
    problem, W = case
    auto = autograd_gradient(problem, W)
    tol = ROUNDING * float(np.linalg.norm(auto)) + 1e-14 * term_scale(problem, W)
    grad = problem.gradient(W)
    assert grad.shape == (problem.d, problem.d)
    assert float(np.linalg.norm(grad - auto)) <= tol
    M, G = problem.gradient_log(W)
    if M == -math.inf:
        assert float(np.linalg.norm(auto)) <= tol
    else:
        assert float(np.linalg.norm(math.exp(M) * G - auto)) <= tol


@pytest.mark.parametrize("seed,loss", [(0, "logistic"), (1, "exponential"), (2, "square")])
def test_gradient_matches_central_differences(seed, loss):
    problem = gaussian_problem(seed, 3, 4, 4, loss)
    W = random_matrix(seed + 10, 4, 0.5)
    grad = problem.gradient(W)
    h = 1e-5
    for j in range(4):
        E = random_matrix(100 + 7 * seed + j, 4)
        Lp = float(problem.naive_loss(torch.as_tensor(W + h * E)))
        Lm = float(problem.naive_loss(torch.as_tensor(W - h * E)))
        fd = (Lp - Lm) / (2 * h)
        # truncation ~h²·L''' and rounding ~1e-16/h, both below 1e-8 here
        assert abs(fd - float(np.sum(grad * E))) <= 1e-8 * max(1.0, abs(fd))


def test_gradient_log_reads_a_transposed_view_in_its_logical_order():
    problem = gaussian_problem(3, 2, 3, 4)
    W = random_matrix(4, 4)
    view = W.T  # a non-contiguous array
    M1, G1 = problem.gradient_log(view)
    M2, G2 = problem.gradient_log(np.ascontiguousarray(view))
    assert M1 == M2 and np.array_equal(G1, G2)


def test_the_loops_unchecked_gradient_is_the_checked_one_bit_for_bit():
    """md, kq_ngd and polyak call gradient_log_np on their own float64 iterates: the same
    arithmetic as the checked gradient_log (so their iterates are those of the checked path)."""
    problem = gaussian_problem(21, 3, 4, 4)
    for W in (random_matrix(21, 4), random_matrix(22, 4).T, random_matrix(23, 4, 1e3)):
        M1, G1 = problem.gradient_log(torch.as_tensor(W))
        M2, G2 = problem.gradient_log_np(W)
        assert M1 == M2 and np.array_equal(G1, G2)


# ---- the vectorisation and its orientation ---------------------------------------------------


def test_vectorisation_orientation_on_a_hand_instance():
    """W with its single nonzero entry W[j, k] = 1 gives the logit x_j·z_k (x zᵀ ordering): the
    row index of W meets the token, the column index the query (spec §1.1 orientation caution)."""
    X = torch.tensor([[[2.0, 3.0, 5.0], [7.0, 11.0, 13.0]]], dtype=DTYPE)
    z = torch.tensor([[17.0, 19.0, 23.0]], dtype=DTYPE)
    problem = CrossProblem(X, z, [1.0], [1.0, -1.0, 0.5])
    for j in range(3):
        for k in range(3):
            W = torch.zeros(3, 3, dtype=DTYPE)
            W[j, k] = 1.0
            expected = X[0, :, j] * z[0, k]
            assert torch.equal(problem.logits(W)[0], expected)
            # the vectorised prompt model sees the same logits (its keys are vec(x zᵀ))
            assert torch.equal(problem.prompt.logits(W.reshape(-1))[0], expected)
    # an asymmetric W: the loss is not that of Wᵀ
    W = torch.tensor([[0.0, 0.01, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dtype=DTYPE)
    assert float(problem.loss_value(W)) == pytest.approx(float(problem.naive_loss(W)), abs=1e-15)
    assert float(problem.loss_value(W)) != pytest.approx(float(problem.naive_loss(W.T)), abs=1e-6)


def test_gradient_at_zero_is_the_two_token_hand_formula():
    """n = 1, T = 2, W = 0: s = (½, ½), m = (γ1 + γ2)/2 and
    ∇L(0) = ℓ'(m)·¼(γ1 − γ2)(x1 − x2) zᵀ (spec §1.6 with c_1 = −c_2 = ¼(γ1 − γ2))."""
    x1, x2 = np.array([1.0, -2.0, 0.5]), np.array([0.25, 1.0, -1.5])
    z, v, yy = np.array([0.5, 2.0, -1.0]), np.array([1.0, 0.5, -2.0]), -1.0
    problem = CrossProblem(np.stack([x1, x2])[None], z[None], [yy], v)
    g1, g2 = yy * x1 @ v, yy * x2 @ v
    m = (g1 + g2) / 2
    lp = -1.0 / (1.0 + math.exp(m))  # logistic ℓ'
    expected = lp * 0.25 * (g1 - g2) * np.outer(x1 - x2, z)
    np.testing.assert_allclose(problem.gradient(np.zeros((3, 3))), expected, rtol=1e-14)


# ---- rank and row space ----------------------------------------------------------------------


@FAST
@given(case=moderate_cases(min_d=3))
def test_gradient_has_rank_at_most_n_and_rows_in_the_query_span(case):
    """∇L(W) = (1/n) Σ_i ℓ'_i (Σ_t c_it x_it) z_iᵀ: rank ≤ n, row space ⊂ span{z_i} (§1.6)."""
    problem, W = case
    M, G = problem.gradient_log(W)
    if M == -math.inf:
        return
    P = span_projector(problem.Z.numpy())
    np.testing.assert_allclose(problem.query_projector, P, atol=1e-12)
    scale = float(np.linalg.norm(G))
    assert float(np.linalg.norm(G - G @ P)) <= 1e-13 * scale
    s = np.linalg.svd(G, compute_uv=False)
    if problem.n < problem.d:
        assert s[problem.n] <= 1e-13 * s[0]


# ---- saturation: the log-space direction against 60 digits ----------------------------------


def mp_gradient(problem: CrossProblem, W, dps: int = 60):
    """∇L(W) = (1/n) Σ_i ℓ'(m_i) Σ_t s_it (γ_it − m_i) x_it z_iᵀ in mpmath, on X, Z, y, v, W
    directly (no vectorisation, no float64 scores): (unit direction (d, d) as float64,
    log‖∇L‖_F as mpf). γ_it − m_i is evaluated as Σ_u s_iu (γ_it − γ_iu), the same number,
    without the cancellation that would need as many digits as the logit spread."""
    with mp.workdps(dps):
        X = [[[mp.mpf(a) for a in row] for row in inp] for inp in problem.X.tolist()]
        Z = [[mp.mpf(a) for a in row] for row in problem.Z.tolist()]
        y = [mp.mpf(a) for a in problem.y.tolist()]
        v = [mp.mpf(a) for a in problem.v.tolist()]
        Wm = [[mp.mpf(a) for a in row] for row in np.asarray(W).tolist()]
        n, d = len(X), len(v)
        G = [[mp.mpf(0)] * d for _ in range(d)]
        for i in range(n):
            Wz = [mp.fsum(Wm[j][k] * Z[i][k] for k in range(d)) for j in range(d)]
            a = [mp.fsum(x[j] * Wz[j] for j in range(d)) for x in X[i]]
            gam = [y[i] * mp.fsum(x[j] * v[j] for j in range(d)) for x in X[i]]
            top = max(a)
            e = [mp.exp(at - top) for at in a]
            s = [et / mp.fsum(e) for et in e]
            m = mp.fsum(st_ * gt for st_, gt in zip(s, gam, strict=True))
            lp = -1 / (1 + mp.exp(m)) if problem.loss.name == "logistic" else -mp.exp(-m)
            T = len(s)
            q = [mp.mpf(0)] * d
            for t in range(T):
                dev = mp.fsum(s[u] * (gam[t] - gam[u]) for u in range(T) if u != t)
                c = lp * s[t] * dev
                for j in range(d):
                    q[j] += c * X[i][t][j]
            for j in range(d):
                for k in range(d):
                    G[j][k] += q[j] * Z[i][k] / n
        norm = mp.sqrt(mp.fsum(G[j][k] ** 2 for j in range(d) for k in range(d)))
        direction = np.array([[float(G[j][k] / norm) for k in range(d)] for j in range(d)])
        return direction, mp.log(norm)


SATURATION = [
    # (seed, loss, direction, ‖W‖): along W^mm(opt) every logit gap is ≥ ‖W‖/‖W^mm‖
    (0, "logistic", "svm", 1e3),
    (1, "logistic", "svm", 1e4),
    (2, "exponential", "svm", 1e5),
    (3, "logistic", "random", 1e3),
    (4, "exponential", "random", 1e4),
]


@pytest.mark.parametrize("seed,loss,direction,radius", SATURATION)
def test_log_space_direction_matches_mpmath_where_float64_saturates(seed, loss, direction, radius):
    problem = official_problem(seed, n=3, T=4, d=4)
    problem = CrossProblem(problem.X, problem.Z, problem.y, problem.v, loss)
    if direction == "svm":
        D = fro_svm(problem, problem.opt_tokens())
    else:
        D = random_matrix(seed + 50, 4)
    W = radius * D / np.linalg.norm(D)
    ref_dir, ref_log_norm = mp_gradient(problem, W)
    M, G = problem.gradient_log(W)
    assert M > -math.inf
    got = G / np.linalg.norm(G)
    one_minus_cos = 0.5 * float(np.sum((got - ref_dir) ** 2))
    assert one_minus_cos <= MP_COS_TOL, f"1 − cos = {one_minus_cos:.3e} at ‖W‖ = {radius:g}"
    log_norm = M + math.log(float(np.linalg.norm(G)))
    assert abs(log_norm - float(ref_log_norm)) <= 1e-9 * abs(float(ref_log_norm))
    if direction == "svm" and radius >= 1e4:
        # the premise: float64 has nothing left here (every softmax is one-hot)
        assert not np.any(autograd_gradient(problem, W))
        assert not np.any(problem.gradient(W))


# --------------------------------------------------------------------------------------------
# W dynamics
# --------------------------------------------------------------------------------------------


def autograd_ngd(problem, W0, lr, steps):
    """W ← W − lr·g/‖g‖_F with g = autograd of naive_loss (the official recipe, no + ε)."""
    W = torch.as_tensor(np.array(W0), dtype=DTYPE)
    out = [W.clone()]
    for _ in range(steps):
        Wr = W.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(problem.naive_loss(Wr), Wr)
        W = W - lr * g / torch.linalg.matrix_norm(g)
        out.append(W.clone())
    return torch.stack(out).numpy()


@pytest.mark.parametrize("seed", [0, 1])
def test_w_ngd_equals_autograd_ngd_of_the_naive_loss(seed):
    problem = gaussian_problem(seed, 3, 4, 5)
    W0 = random_matrix(seed + 20, 5, 0.1)
    run = w_ngd(problem, W0, lr=0.1, steps=50)
    ref = autograd_ngd(problem, W0, 0.1, 50)
    assert run.steps.tolist() == list(range(51)) and run.Ws.shape == (51, 5, 5)
    np.testing.assert_allclose(run.Ws, ref, rtol=0, atol=1e-11)


def test_w_gd_equals_autograd_gd_of_the_naive_loss():
    problem = gaussian_problem(5, 2, 3, 4)
    W0 = random_matrix(6, 4, 0.3)
    run = w_gd(problem, W0, eta=0.5, steps=30)
    W = torch.as_tensor(W0)
    for k in range(31):
        np.testing.assert_allclose(run.Ws[k], W.numpy(), rtol=0, atol=1e-12)
        Wr = W.clone().requires_grad_(True)
        (g,) = torch.autograd.grad(problem.naive_loss(Wr), Wr)
        W = W - 0.5 * g


def test_w_ngd_from_zero_keeps_its_rows_in_the_query_span():
    """Spec §1.6 [D]: from W(0) = 0 every NGD iterate has row space in span{z_i} (n < d)."""
    problem = gaussian_problem(7, 3, 4, 6)
    run = w_ngd(problem, None, lr=0.1, steps=300, record_every=10)
    P = span_projector(problem.Z.numpy())
    for W in run.Ws[1:]:
        assert float(np.linalg.norm(W - W @ P)) <= 1e-12 * float(np.linalg.norm(W))
    assert float(np.linalg.norm(run.W)) > 20.0  # it did move


# ---- (K, Q) ------------------------------------------------------------------------------------


def test_kq_ngd_from_q_zero_moves_only_q_at_the_first_step():
    """Q(0) = 0 makes ∇_K = G·Q = 0 at step 1 (spec §1.6): K stays, Q ← −lr·GᵀK/‖GᵀK‖."""
    problem = gaussian_problem(8, 3, 4, 5)
    K0 = random_matrix(9, 5, 0.1)
    run = kq_ngd(problem, K0, np.zeros((5, 5)), lr=0.1, steps=1)
    assert np.array_equal(run.K, K0)
    gQ = autograd_gradient(problem, np.zeros((5, 5))).T @ K0
    np.testing.assert_allclose(run.Q, -0.1 * gQ / np.linalg.norm(gQ), rtol=0, atol=1e-14)
    np.testing.assert_allclose(run.W, K0 @ run.Q.T, rtol=0, atol=1e-15)


def test_kq_ngd_from_q_zero_with_the_penalty_shrinks_k_by_lr():
    """With λ = ε, ∇_K = GQ + 2εK = 2εK at Q(0) = 0: not zero, so the normalised step moves K
    by −lr·K/‖K‖ (its norm drops by lr, whatever ε is); Q moves as without the penalty."""
    problem = gaussian_problem(8, 3, 4, 5)
    K0 = random_matrix(9, 5, 0.1)
    run = kq_ngd(problem, K0, np.zeros((5, 5)), lr=0.1, steps=1, penalty=MACHINE_EPS)
    np.testing.assert_allclose(run.K, K0 - 0.1 * K0 / np.linalg.norm(K0), rtol=0, atol=1e-15)
    free = kq_ngd(problem, K0, np.zeros((5, 5)), lr=0.1, steps=1, penalty=0.0)
    np.testing.assert_allclose(run.Q, free.Q, rtol=0, atol=1e-15)


def autograd_kq_ngd(problem, K0, Q0, lr, steps, lam):
    """Both factors stepped by their own normalised gradient of naive_loss(KQᵀ) + λ(‖K‖² + ‖Q‖²)
    (the official recipe without its + ε)."""
    K, Q = torch.as_tensor(K0, dtype=DTYPE), torch.as_tensor(Q0, dtype=DTYPE)
    out = [(K @ Q.T).numpy()]
    for _ in range(steps):
        Kr, Qr = K.clone().requires_grad_(True), Q.clone().requires_grad_(True)
        obj = problem.naive_loss(Kr @ Qr.T) + lam * (Kr.square().sum() + Qr.square().sum())
        gK, gQ = torch.autograd.grad(obj, (Kr, Qr))
        K = K - lr * gK / torch.linalg.matrix_norm(gK)
        Q = Q - lr * gQ / torch.linalg.matrix_norm(gQ)
        out.append((K @ Q.T).numpy())
    return np.stack(out), K.numpy(), Q.numpy()


@pytest.mark.parametrize("lam", [0.0, MACHINE_EPS])
@pytest.mark.parametrize("m", [5, 3])
def test_kq_ngd_factor_steps_equal_autograd(lam, m):
    """At small norms each factor moves along −∇_K/‖∇_K‖, −∇_Q/‖∇_Q‖ of L(KQᵀ) + λ(‖K‖² + ‖Q‖²),
    ∇_K = GQ and ∇_Q = GᵀK (the penalty is invisible here: the loss gradient ≫ 2ε‖K‖)."""
    problem = gaussian_problem(11, 3, 4, 5)
    K0, Q0 = random_matrix(12, 5, 0.3, m), random_matrix(13, 5, 0.3, m)
    run = kq_ngd(problem, K0, Q0, lr=0.05, steps=30, penalty=lam)
    ref, K, Q = autograd_kq_ngd(problem, K0, Q0, 0.05, 30, lam)
    np.testing.assert_allclose(run.Ws, ref, rtol=0, atol=1e-11)
    np.testing.assert_allclose(run.K, K, rtol=0, atol=1e-11)
    np.testing.assert_allclose(run.Q, Q, rtol=0, atol=1e-11)


def test_factor_step_penalty_takes_over_below_two_eps_norm():
    """The unit direction of e^M·raw + 2λF (spec §6): the official λ = ε term matters only once
    the loss gradient e^M‖raw‖ falls below ~2ε‖F‖; it is None when both parts vanish."""
    gen = np.random.default_rng(0)
    raw, F = gen.normal(size=(4, 4)), gen.normal(size=(4, 4))
    lam = MACHINE_EPS
    pen = math.log(2 * lam * np.linalg.norm(F))  # log of the penalty gradient's norm
    lraw = math.log(np.linalg.norm(raw))
    unit = lambda A: A / np.linalg.norm(A)  # noqa: E731
    # far above 2ε‖F‖: the loss direction; far below: +F/‖F‖ (the step −lr·F/‖F‖ shrinks F)
    np.testing.assert_allclose(_factor_step(pen - lraw + 40, raw, F, lam), unit(raw), atol=1e-15)
    np.testing.assert_allclose(_factor_step(pen - lraw - 40, raw, F, lam), unit(F), atol=1e-15)
    np.testing.assert_allclose(_factor_step(-1000.0, raw, F, lam), unit(F), atol=1e-15)
    np.testing.assert_allclose(_factor_step(-math.inf, raw, F, lam), unit(F), atol=1e-15)
    # in between: the plain formula (representable here, e^M = 2ε)
    M = math.log(2 * lam)
    expected = unit(math.exp(M) * raw + 2 * lam * F)
    np.testing.assert_allclose(_factor_step(M, raw, F, lam), expected, atol=1e-14)
    # without the penalty the scale is irrelevant and a zero gradient means no step
    np.testing.assert_allclose(_factor_step(-5000.0, raw, F, 0.0), unit(raw), atol=1e-15)
    assert _factor_step(0.0, np.zeros((4, 4)), F, 0.0) is None
    assert _factor_step(-math.inf, raw, F, 0.0) is None
    assert _factor_step(0.0, np.zeros((4, 4)), np.zeros((4, 4)), lam) is None


def test_kq_ngd_official_penalty_pins_the_norm():
    """Spec §5 F18 / §6 [N]: on (6, 8, 10) official data from the default linear-layer init,
    ‖KQᵀ‖_F plateaus at ~1e2 with λ = ε (98–139 at 2000 steps) while λ = 0 grows on (~1e4)."""
    problem = official_problem(0)
    gen = torch.Generator().manual_seed(100)
    b = 1 / math.sqrt(10)  # nn.Linear's default: U(−1/√fan_in, 1/√fan_in)
    K0 = ((2 * torch.rand(10, 10, generator=gen, dtype=DTYPE) - 1) * b).numpy()
    Q0 = ((2 * torch.rand(10, 10, generator=gen, dtype=DTYPE) - 1) * b).numpy()
    pen = kq_ngd(problem, K0, Q0, lr=0.1, steps=1000, penalty=MACHINE_EPS, record_every=500)
    free = kq_ngd(problem, K0, Q0, lr=0.1, steps=1000, penalty=0.0, record_every=500)
    n_pen = [float(np.linalg.norm(W)) for W in pen.Ws]
    n_free = [float(np.linalg.norm(W)) for W in free.Ws]
    assert n_pen[-1] < 300 and abs(n_pen[-1] - n_pen[-2]) <= 0.1 * n_pen[-2], n_pen
    assert n_free[-1] > 1000 and n_free[-1] > 1.5 * n_free[-2], n_free


# ---- mirror descent ---------------------------------------------------------------------------


def test_md_with_p_2_is_w_ngd():
    problem = gaussian_problem(14, 3, 4, 5)
    W0 = random_matrix(15, 5, 0.2)
    a = md(problem, W0, p=2.0, lr=0.1, steps=200)
    b = w_ngd(problem, W0, lr=0.1, steps=200)
    assert a.steps.tolist() == b.steps.tolist()
    np.testing.assert_allclose(a.Ws, b.Ws, rtol=0, atol=1e-12)


@pytest.mark.parametrize("p", [1.25, 1.5, 3.0, 4.5])
def test_dual_and_primal_maps_are_inverse(p):
    W = random_matrix(16, 5, 2.0)
    W[0, 0] = 0.0
    theta = dual_map(W, p)
    # ∇ψ for ψ = Σ|W|^p/p, written here: sign·|·|^{p−1}
    np.testing.assert_allclose(theta, np.sign(W) * np.power(np.abs(W), p - 1), rtol=1e-15)
    np.testing.assert_allclose(primal_map(theta, p), W, rtol=1e-13, atol=0)
    np.testing.assert_allclose(dual_map(primal_map(W, p), p), W, rtol=1e-13, atol=0)
    assert primal_map(theta, p)[0, 0] == 0.0


@pytest.mark.parametrize("p", [3.0, 1.5])
def test_md_steps_equal_the_mirror_formula(p):
    """θ⁺ = θ − lr·G/‖G‖_{p*}, θ = sign(W)|W|^{p−1}, p* = p/(p−1), W⁺ = sign(θ⁺)|θ⁺|^{1/(p−1)},
    with G from autograd of naive_loss (spec §1.6; 2410.14581)."""
    problem = gaussian_problem(17, 3, 4, 4)
    W0 = random_matrix(18, 4, 0.5)
    run = md(problem, W0, p=p, lr=0.1, steps=5)
    q = p / (p - 1)
    W = W0.copy()
    for k in range(6):
        np.testing.assert_allclose(run.Ws[k], W, rtol=1e-12, atol=1e-14)
        G = autograd_gradient(problem, W)
        theta = np.sign(W) * np.abs(W) ** (p - 1) - 0.1 * G / np.sum(np.abs(G) ** q) ** (1 / q)
        W = np.sign(theta) * np.abs(theta) ** (1 / (p - 1))


@pytest.mark.parametrize("p", [1.5, 3.0])
def test_md_from_zero_keeps_columns_outside_the_queries_support_zero(p):
    """Spec §1.6 [D]: for p ≠ 2 the dual variable θ (not W) keeps its rows in span{z_i}; what
    W keeps is that columns k with z_ik = 0 for every i stay exactly 0."""
    gen = torch.Generator().manual_seed(19)
    Z = torch.randn(2, 6, generator=gen, dtype=DTYPE)
    Z[:, [1, 4]] = 0.0
    problem = gaussian_problem(20, 2, 4, 6, Z=Z)
    run = md(problem, None, p=p, lr=0.1, steps=200, record_every=20)
    P = span_projector(Z.numpy())
    for W in run.Ws:
        assert not np.any(W[:, [1, 4]])
        theta = dual_map(W, p)
        assert float(np.linalg.norm(theta - theta @ P)) <= 1e-10 * max(
            1e-300, float(np.linalg.norm(theta))
        )
    assert np.all(np.abs(run.W[:, [0, 2, 3, 5]]).sum(0) > 0.1)  # the others did move


@pytest.mark.parametrize("p", [1, 1.0, 0.5, -2.0, math.inf, math.nan, "3", None, True])
def test_md_rejects_a_bad_exponent(p):
    problem = gaussian_problem(21, 1, 2, 2)
    with pytest.raises(ValueError, match=r"^p:"):
        md(problem, p=p, steps=1)


def test_md_accepts_numpy_exponents():
    problem = gaussian_problem(21, 1, 2, 2)
    a = md(problem, p=np.int64(3), steps=3)
    b = md(problem, p=3.0, steps=3)
    assert np.array_equal(a.Ws, b.Ws)


# ---- Polyak --------------------------------------------------------------------------------------


def mp_excess_loss(problem: CrossProblem, W, alpha, dps: int = 40):
    """L(W) − L* for the logistic loss, L* = (1/n) Σ ℓ(γ_iα), in mpmath on X, Z, y, v:
    ℓ(γ − δ) − ℓ(γ) = log1p(σ(−γ)·expm1(δ)) with δ_i = Σ_u s_iu (γ_iα − γ_iu) ≥ 0."""
    with mp.workdps(dps):
        Wm = mp.matrix(np.asarray(W).tolist())
        total = mp.mpf(0)
        for i in range(problem.n):
            z = mp.matrix(problem.Z[i].tolist())
            xs = [mp.matrix(x) for x in problem.X[i].tolist()]
            v = mp.matrix(problem.v.tolist())
            gam = [problem.y[i].item() * (x.T * v)[0] for x in xs]
            a = [(x.T * Wm * z)[0] for x in xs]
            top = max(a)
            e = [mp.exp(at - top) for at in a]
            s = [et / mp.fsum(e) for et in e]
            g = gam[alpha[i]]
            delta = mp.fsum(s[u] * (g - gam[u]) for u in range(len(s)))
            total += mp.log1p(mp.expm1(delta) / (1 + mp.exp(g)))
        return total / problem.n


def test_polyak_excess_loss_decreases_and_it_aligns_before_ngd():
    """2402.05738 (spec §2.11 [N]): on equal non-optimal scores Polyak steps with the true L*
    drive L − L* down and reach corr(W, W^mm(opt)) ≥ 0.999 by step 100, NGD (lr 0.1) not."""
    problem = equal_nonopt_problem(0)
    opt = problem.opt_tokens()
    assert opt.tolist() == [0, 0, 0]
    W_mm = fro_svm(problem, opt)
    run = polyak(problem, None, steps=100, record_every=10)
    gaps = [mp_excess_loss(problem, W, opt) for W in run.Ws]
    assert all(b < a for a, b in zip(gaps, gaps[1:], strict=False)), [float(g) for g in gaps]
    assert gaps[-1] < mp.mpf(10) ** -20
    assert correlation(run.W, W_mm) >= 0.999
    ngd = w_ngd(problem, None, lr=0.1, steps=100, record_every=100)
    assert correlation(ngd.W, W_mm) < 0.999


def test_polyak_needs_a_top_score_alpha():
    problem = equal_nonopt_problem(1)
    with pytest.raises(ValueError, match="alpha"):
        polyak(problem, steps=2, alpha=[1, 1, 1])


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------


def test_correlation_is_the_cosine_and_scale_free():
    A, B = random_matrix(22, 4), random_matrix(23, 4)
    ref = float(np.sum(A * B) / (np.linalg.norm(A) * np.linalg.norm(B)))
    assert correlation(A, B) == pytest.approx(ref, abs=1e-15)
    for c1, c2 in [(1e300, 1.0), (1e-300, 1.0), (1e300, 1e-300), (1e-300, 1e-300), (3.0, 7.0)]:
        assert correlation(c1 * A, c2 * B) == pytest.approx(ref, abs=1e-14)
    assert correlation(1e300 * A, 1e300 * A) == pytest.approx(1.0, abs=1e-15)
    assert correlation(A, -5e-300 * A) == pytest.approx(-1.0, abs=1e-15)
    assert math.isnan(correlation(A, np.zeros((4, 4))))


@pytest.mark.parametrize("p", [1.25, 1.5, 2.0, 3.0])
def test_bregman_divergence_is_its_definition_on_unit_lp_matrices(p):
    """D_ψ(A, B) = ψ(A) − ψ(B) − ⟨∇ψ(B), A − B⟩, ψ = ‖·‖_p^p/p, on the ℓp-normalised matrices
    (spec §1.8): ≥ 0, 0 on equal directions, invariant to scale."""
    psi = lambda A: np.sum(np.abs(A) ** p) / p  # noqa: E731
    for seed in range(5):
        A, B = random_matrix(30 + seed, 4), random_matrix(40 + seed, 4)
        a, b = lp_normalize(A, p), lp_normalize(B, p)
        assert np.sum(np.abs(a) ** p) == pytest.approx(1.0, abs=1e-14)
        definition = psi(a) - psi(b) - np.sum(np.sign(b) * np.abs(b) ** (p - 1) * (a - b))
        got = bregman_divergence(A, B, p)
        assert got == pytest.approx(definition, abs=1e-14)
        assert got > 1e-3
        assert bregman_divergence(1e300 * A, 1e-300 * B, p) == pytest.approx(got, abs=1e-14)
        assert abs(bregman_divergence(A, 7.0 * A, p)) <= 1e-15
        assert abs(bregman_divergence(1e-300 * A, 1e300 * A, p)) <= 1e-15
    if p == 2.0:  # D = 1 − cos for p = 2
        assert bregman_divergence(A, B, p) == pytest.approx(1 - correlation(A, B), abs=1e-14)


# --------------------------------------------------------------------------------------------
# bad input
# --------------------------------------------------------------------------------------------


def test_bad_shapes_raise_naming_the_field():
    problem = gaussian_problem(24, 2, 3, 4)
    X, Z, y, v = problem.X, problem.Z, problem.y, problem.v
    cases = [
        ("Z", lambda: CrossProblem(X, Z[:, :3], y, v)),
        ("Z", lambda: CrossProblem(X, Z[:1], y, v)),
        ("Z", lambda: CrossProblem(X, Z[0], y, v)),
        ("X", lambda: CrossProblem(X[0], Z, y, v)),
        ("y", lambda: CrossProblem(X, Z, y[:1], v)),
        ("y", lambda: CrossProblem(X, Z, torch.tensor([1.0, 0.5]), v)),
        ("v", lambda: CrossProblem(X, Z, y, v[:3])),
        ("W", lambda: problem.logits(np.zeros((4, 5)))),
        ("W", lambda: problem.loss_value(np.zeros((3, 4)))),
        ("W", lambda: problem.naive_loss(np.zeros((5, 5)))),
        ("W", lambda: problem.gradient_log(np.zeros((4, 3)))),
        ("W", lambda: problem.gradient(np.zeros(16))),
        ("W0", lambda: w_ngd(problem, np.zeros((4, 5)), steps=1)),
        ("W0", lambda: w_gd(problem, np.zeros((5, 4)), eta=0.1, steps=1)),
        ("W0", lambda: md(problem, np.zeros((4, 5)), p=3.0, steps=1)),
        ("W0", lambda: polyak(problem, np.zeros((3, 3)), steps=1)),
        ("W0", lambda: w_ngd(problem, np.full((4, 4), np.nan), steps=1)),
        ("K0", lambda: kq_ngd(problem, np.zeros((5, 4)), np.zeros((5, 4)), steps=1)),
        ("Q0", lambda: kq_ngd(problem, np.zeros((4, 4)), np.zeros((4, 3)), steps=1)),
        ("Q0", lambda: kq_ngd(problem, np.zeros((4, 4)), np.zeros(4), steps=1)),
    ]
    for field, call in cases:
        with pytest.raises(ValueError, match=rf"^{field}:"):
            call()


@pytest.mark.parametrize("method", ["md", "polyak"])
def test_a_run_that_starts_stationary_stops_at_once_and_records_where_it_stopped(method):
    """Every input's tokens equal: attention changes nothing, the gradient is exactly zero at
    W = 0, and the run stops before its first step. Its record ends at step 0 with W = 0 (a
    sampled mutant recorded the stop as step 2, another dropped W: both survived)."""
    X = np.array([[[1.0, -0.5], [1.0, -0.5]], [[0.3, 0.8], [0.3, 0.8]]])
    problem = CrossProblem(X, [[1.0, 0.0], [0.0, 1.0]], [1.0, -1.0], [1.0, 2.0])
    run = md(problem, p=2.0, steps=50) if method == "md" else polyak(problem, steps=50)
    assert run.stop == "stationary point (gradient exactly zero)"
    assert run.steps.max() == 0 and run.steps[-1] == 0
    assert np.array_equal(run.Ws[-1], np.zeros((2, 2)))


def test_random_factors_have_the_asked_shape_law_and_seed():
    from models.problems.cross import random_factors

    K, Q = random_factors(5, 3, scale=0.5, seed=7)
    assert K.shape == Q.shape == (5, 3) and K.dtype == Q.dtype == np.float64
    K2, Q2 = random_factors(5, 3, scale=0.5, seed=7)
    np.testing.assert_array_equal(K, K2)
    np.testing.assert_array_equal(Q, Q2)
    assert not np.array_equal(K, Q)
    assert random_factors(4, scale=1.0, seed=0)[0].shape == (4, 4)  # m = d by default
    big, _ = random_factors(200, 200, scale=0.5, seed=1)
    assert abs(float(big.std()) - 0.5) < 0.01 and abs(float(big.mean())) < 0.01
