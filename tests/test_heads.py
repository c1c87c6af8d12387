"""Unit tests of models/problems/heads.py: the nonlinear-head model f(X) = ψ(Xᵀ softmax(XWp)) of
spec maxmargin §2.6 (its regularization paths are tested in tests/test_regpath.py)."""

import numpy as np
import pytest
import torch

from models.problems.heads import NonlinearHeadProblem, concave_bump, small_mlp, squared_norm

F64 = torch.float64


def random_problem(seed: int, psi, loss="logistic", n=3, T=4, d=3):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(n, T, d, generator=gen, dtype=F64)
    y = torch.where(torch.rand(n, generator=gen, dtype=F64) < 0.5, -1.0, 1.0).to(F64)
    W = torch.eye(d, dtype=F64) + 0.3 * torch.randn(d, d, generator=gen, dtype=F64)
    return NonlinearHeadProblem(X, y, W, psi=psi, loss=loss)


PSIS = {"convex": squared_norm, "concave": concave_bump, "mlp": small_mlp(3, seed=1)}


def test_psi_optimal_tokens_follow_y_times_psi():
    """argmax_t Y_i ψ(x_it): the longest token for ψ = ‖u‖² and Y = +1, the shortest for Y = −1."""
    X = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [0.5, 0.5]]] * 2, dtype=F64)
    problem = NonlinearHeadProblem(X, torch.tensor([1.0, -1.0]), psi=squared_norm)
    assert problem.psi_optimal_tokens().tolist() == [1, 2]
    np.testing.assert_allclose(problem.token_scores(), [[1.0, 4.0, 0.5], [-1.0, -4.0, -0.5]])
    concave = NonlinearHeadProblem(X, torch.tensor([1.0, 1.0]), psi=concave_bump)
    assert concave.psi_optimal_tokens().tolist() == [2, 2]


@pytest.mark.parametrize("psi", PSIS)
def test_autograd_gradient_matches_finite_differences(psi):
    """The regularization paths descend L through autograd (loss_path): its gradient is the
    loss's, by central differences."""
    problem = random_problem(2, PSIS[psi])
    p = torch.tensor([0.3, -0.7, 0.5], dtype=F64)
    h = 1e-6
    fd = torch.stack(
        [
            (problem.loss_value(p + h * e) - problem.loss_value(p - h * e)) / (2 * h)
            for e in torch.eye(3, dtype=F64)
        ]
    )
    q = p.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(problem.loss_value(q), q)
    np.testing.assert_allclose(auto, fd, rtol=1e-6, atol=1e-10)


def test_loss_path_is_the_batched_loss_value():
    problem = random_problem(3, PSIS["mlp"])
    P = torch.randn(7, 3, generator=torch.Generator().manual_seed(4), dtype=F64)
    np.testing.assert_allclose(
        problem.loss_path(P), torch.stack([problem.loss_value(p) for p in P]), rtol=1e-14
    )


def test_keys_are_xw():
    problem = random_problem(5, squared_norm)
    np.testing.assert_allclose(problem.keys, problem.X @ problem.W)
    assert problem.dim == 3 and problem.n == 3 and problem.T == 4


def test_bad_input_names_the_field():
    X = torch.zeros(2, 3, 2, dtype=F64)
    with pytest.raises(ValueError, match="y:"):
        NonlinearHeadProblem(X, torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="W:"):
        NonlinearHeadProblem(X, torch.ones(2), W=torch.eye(3))
    bad = NonlinearHeadProblem(X, torch.ones(2), psi=lambda u: u)
    with pytest.raises(ValueError, match="psi:"):
        bad.psi_optimal_tokens()
