"""Unit tests of plain (K, Q) gradient descent (``models.problems.cross.kq_gd``, spec tfsvm §1.6),
against a loop written here on torch autograd of the official model's loss L(KQᵀ) (``naive_loss``),
and the exact one-step identity of its balancedness drift."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from models.problems.cross import kq_gd
from tests.test_cross import gaussian_problem, random_matrix

DTYPE = torch.float64
#: Two float64 routes to the same few GD steps (autograd of the einsum model vs the log-space
#: engine): a few hundred ulps of the O(1) factors.
ROUNDING = 1e-12


def autograd_kq_gd(problem, K0, Q0, eta, steps):
    """K, Q ← K − η∂_K L(KQᵀ), Q − η∂_Q L(KQᵀ), both from the same point, by autograd."""
    K, Q = torch.as_tensor(K0, dtype=DTYPE), torch.as_tensor(Q0, dtype=DTYPE)
    out = [(K.numpy().copy(), Q.numpy().copy())]
    for _ in range(steps):
        Kr, Qr = K.clone().requires_grad_(True), Q.clone().requires_grad_(True)
        gK, gQ = torch.autograd.grad(problem.naive_loss(Kr @ Qr.T), (Kr, Qr))
        K, Q = K - eta * gK, Q - eta * gQ
        out.append((K.numpy().copy(), Q.numpy().copy()))
    return out


@pytest.mark.parametrize("seed, n, T, d, m", [(1, 3, 4, 5, 5), (2, 2, 3, 4, 2), (3, 1, 2, 3, 4)])
def test_kq_gd_matches_autograd(seed, n, T, d, m):
    problem = gaussian_problem(seed, n, T, d)
    K0, Q0 = random_matrix(seed + 10, d, 0.5, m), random_matrix(seed + 20, d, 0.5, m)
    run = kq_gd(problem, K0, Q0, eta=0.1, steps=20)
    ref = autograd_kq_gd(problem, K0, Q0, 0.1, 20)
    assert run.Ks.shape == (21, d, m) and run.Qs.shape == (21, d, m)
    for k, (K, Q) in enumerate(ref):
        np.testing.assert_allclose(run.Ks[k], K, rtol=0, atol=ROUNDING)
        np.testing.assert_allclose(run.Qs[k], Q, rtol=0, atol=ROUNDING)
        np.testing.assert_allclose(run.Ws[k], K @ Q.T, rtol=0, atol=ROUNDING)
    assert np.array_equal(run.K, run.Ks[-1]) and np.array_equal(run.Q, run.Qs[-1])


def test_kq_gd_records_every_and_last():
    problem = gaussian_problem(4, 2, 3, 4)
    run = kq_gd(
        problem,
        random_matrix(5, 4, 0.3),
        random_matrix(6, 4, 0.3),
        eta=0.05,
        steps=25,
        record_every=10,
    )
    assert run.steps.tolist() == [0, 10, 20, 25]
    assert len(run.Ks) == len(run.Qs) == len(run.Ws) == 4


def test_kq_gd_balancedness_drift_is_the_second_order_term():
    """One step changes KᵀK − QᵀQ by exactly η²((GQ)ᵀGQ − (GᵀK)ᵀGᵀK) (expand the squares)."""
    problem = gaussian_problem(7, 3, 4, 5)
    K0, Q0 = random_matrix(8, 5, 0.5), random_matrix(9, 5, 0.5)
    eta = 0.3
    run = kq_gd(problem, K0, Q0, eta=eta, steps=1)
    G = problem.gradient(K0 @ Q0.T)
    gK, gQ = G @ Q0, G.T @ K0
    drift = (run.K.T @ run.K - run.Q.T @ run.Q) - (K0.T @ K0 - Q0.T @ Q0)
    np.testing.assert_allclose(drift, eta**2 * (gK.T @ gK - gQ.T @ gQ), rtol=0, atol=ROUNDING)


def test_kq_gd_rejects_mismatched_factors():
    problem = gaussian_problem(1, 2, 3, 4)
    with pytest.raises(ValueError, match="Q0"):
        kq_gd(problem, np.zeros((4, 3)), np.zeros((4, 2)), eta=0.1, steps=1)
