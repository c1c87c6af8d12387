"""Unit tests of models/flows/wtrain.py: training W with p fixed (spec maxmargin §2.8, F13)."""

import numpy as np
import pytest
import torch

from models.flows.dynamics import ngd
from models.flows.wtrain import WProblem, correlation, singular_ratio, w_ngd
from models.oracles.svm import w_svm_closed_form
from tests.mutmut_aware import per_mutant_scope

F64 = torch.float64


def decoupled(seed: int, n: int = 3, T: int = 3, dk: int = 5):
    """x_it = [k_it; y_i g_it], v = e_d (spec §3.1), opt score 1 and equal non-opt scores 0.5
    (the global-convergence hypotheses of §2.1–2.2); d = dk + 1 ≥ n(T − 1), so the ATT-SVM on
    keys x_it is feasible almost surely. p is a fixed random vector, W(0) small."""
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=(n, T, dk))
    y = rng.choice([-1.0, 1.0], size=n)
    g = np.full((n, T), 0.5)
    g[:, 0] = 1.0
    X = np.concatenate([keys, (y[:, None] * g)[..., None]], -1)
    v = np.zeros(dk + 1)
    v[-1] = 1.0
    p = rng.normal(size=dk + 1)
    return WProblem(X, y, v, p), 0.01 * rng.normal(size=(dk + 1, dk + 1))


@pytest.fixture(scope=per_mutant_scope)
def run():
    problem, W0 = decoupled(0)
    return problem, W0, w_ngd(problem, W0, lr=0.1, steps=1000)


def test_gradient_matches_autograd_and_is_rank_one():
    problem, _ = decoupled(1)
    gen = torch.Generator().manual_seed(0)
    for _ in range(4):
        W = torch.randn(6, 6, generator=gen, dtype=F64)
        Wg = W.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(problem.loss_value(Wg), Wg)
        grad = problem.gradient(W)
        np.testing.assert_allclose(grad, auto, rtol=1e-10, atol=1e-15)
        s = torch.linalg.svdvals(grad)
        assert float(s[1]) <= 1e-14 * float(s[0])
        # ∂L/∂W = g pᵀ: every row is a multiple of p
        p = problem.p
        np.testing.assert_allclose(grad, torch.outer(grad @ p, p) / (p @ p), atol=1e-15)


def test_w_ngd_aligns_with_rank_one_w_svm(run):
    """Spec §2.8 [N]: correlation 0.99903 / 0.99996 / 0.99999 after 100 / 500 / 1000 NGD steps,
    σ₂/σ₁ = 5.5e-3 / 1.1e-3 / 5.5e-4 (their instance; ours is decoupled(0))."""
    problem, _, traj = run
    corr = traj.correlation[[100, 500, 1000]]
    assert corr[2] >= 0.999 and corr[0] < corr[1] < corr[2]
    ratio = traj.sigma_ratio[[100, 500, 1000]]
    assert ratio[2] <= 1e-3 and ratio[0] > ratio[1] > ratio[2]
    assert singular_ratio(traj.W_mm.x) < 1e-12  # F13: the limit is rank one
    assert problem.prompt.selected(traj.W @ problem.p).tolist() == problem.opt_tokens().tolist()


def test_q_follows_prompt_ngd_with_scaled_step(run):
    """q(t) = W(t)p is normalised GD on the prompt problem (keys x_it) with step lr·‖p‖."""
    problem, W0, traj = run
    p = problem.p
    prompt = ngd(problem.prompt, torch.as_tensor(W0) @ p, lr=0.1 * float(p.norm()), steps=1000)
    np.testing.assert_allclose(traj.Ws @ p, prompt.ps, rtol=1e-9, atol=1e-9)


def test_w_svm_equals_closed_form(run):
    problem, _, traj = run
    closed = w_svm_closed_form(problem.X, problem.p, problem.opt_tokens())
    assert traj.W_mm.ok and closed.ok
    np.testing.assert_allclose(traj.W_mm.x, closed.x, atol=1e-8)


def test_metrics():
    W = np.outer([1.0, 2.0], [3.0, -1.0])
    assert singular_ratio(W) < 1e-15 and singular_ratio(np.eye(2)) == 1.0
    assert correlation(W, 2 * W) == pytest.approx(1.0)
    assert correlation(W, -W) == pytest.approx(-1.0)


def test_singular_ratio_reads_the_second_singular_value_not_the_last():
    """The rank-one test is σ₂/σ₁. In d = 2 that equals σ_min/σ₁, so only d ≥ 3 tells them
    apart: diag(1, 0.5, 0) has rank two, σ₂/σ₁ = 0.5, while σ_min/σ₁ = 0 would pass it as rank
    one; diag(2, 1, 0.5) gives 0.5 against σ_min/σ₁ = 0.25."""
    assert singular_ratio(np.diag([1.0, 0.5, 0.0])) == pytest.approx(0.5, rel=1e-15)
    assert singular_ratio(torch.diag(torch.tensor([2.0, 1.0, 0.5], dtype=F64))) == pytest.approx(
        0.5, rel=1e-15
    )


def test_bad_input_names_the_field():
    X = np.zeros((2, 2, 3))
    with pytest.raises(ValueError, match="p:"):
        WProblem(X, [1.0, -1.0], np.ones(3), np.zeros(3))
    with pytest.raises(ValueError, match="p:"):
        WProblem(X, [1.0, -1.0], np.ones(3), np.ones(2))
    problem = WProblem(X, [1.0, -1.0], np.ones(3), np.ones(3))
    with pytest.raises(ValueError, match="W0:"):
        w_ngd(problem, np.zeros((2, 2)), steps=1)


def test_w_gd_is_prompt_gd_with_step_eta_times_norm_p_squared():
    """Spec §2.8: plain GD on W with step η (autograd gradient) moves q = Wp exactly as plain
    GD on the prompt problem with step η‖p‖², for a p that is not a unit vector; with step η‖p‖
    (the normalised-GD scaling) it does not."""
    from models.flows.dynamics import gd
    from models.flows.wtrain import w_gd

    base, W0 = decoupled(2)
    # the same data with all labels +1 (the decoupled scores become ±g) and ‖p‖ tripled
    problem = WProblem(base.X, torch.ones(3, dtype=F64), torch.eye(6, dtype=F64)[-1], 3 * base.p)
    p = problem.p
    p2 = float(p @ p)
    eta = 0.5 / (problem.prompt.smoothness_bound() * p2)
    Ws = w_gd(problem, W0, eta=eta, steps=100)
    q = gd(problem.prompt, torch.as_tensor(W0) @ p, eta=eta * p2, steps=100).ps
    np.testing.assert_allclose(Ws @ p, q, rtol=1e-11, atol=1e-12)
    wrong = gd(problem.prompt, torch.as_tensor(W0) @ p, eta=eta * p2**0.5, steps=100).ps
    assert float(torch.linalg.vector_norm(Ws[-1] @ p - wrong[-1])) > 1e-3
    # W(t) − W(0) = u(t)pᵀ: every update is rank one along p
    assert singular_ratio(Ws[-1] - torch.as_tensor(W0)) <= 1e-12


def test_w_gd_rejects_a_bad_shape():
    from models.flows.wtrain import w_gd

    problem, _ = decoupled(0)
    with pytest.raises(ValueError, match="W0:"):
        w_gd(problem, np.zeros((2, 2)), eta=0.1, steps=1)
