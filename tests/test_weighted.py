"""Input-weighted prompt problems (``PromptProblem.weights``: L = Σ_i ω_i ℓ(m_i)) and the
linear NTP decoder of 2402.18551 seen as one (``models.ntp.flow.linear_view``).

Each piece against something that does not share its code:
- a weighted problem with weights (2, 1, 1)/4 against the unweighted problem with input 0
  written twice: loss, floor, log gap, smoothness bound, the log-space gradient, the unit flow
  field and its closed-form Jacobian (the compiled kernels) must be the same numbers;
- explicit weights 1/n against none;
- the closed-form Jacobian of a weighted field against central differences;
- ``linear_view``'s loss and gradient (plain, log space, 50-digit mpmath) against
  ``models.ntp.linear``'s CE and ∇CE, written per context with the support's log-sum-exps;
- ``linear_flow_limit`` on a hand instance whose W* and W^mm are known in closed form, and on
  generator draws against the oracles;
- the engine parts that normalise by n themselves refuse weighted problems.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.flows.batched import BatchedProblems
from models.flows.regpath import objective_for
from models.ntp.flow import linear_flow_limit, linear_view
from models.ntp.linear import linear_ntp
from models.numerics.highprec import loss_gradient
from models.problems.attention import PromptProblem
from strategies.ntp_linear import linear_data

LOSSES = ["logistic", "exponential", "correlation"]


def _pair(loss: str, seed: int):
    """(weighted problem with ω = (2, 1, 1)/4, the same with input 0 repeated, unweighted)."""
    rng = np.random.default_rng(seed)
    keys = rng.normal(size=(3, 4, 3))
    scores = rng.uniform(-1, 1, size=(3, 4))
    weighted = PromptProblem(keys, scores, loss, np.array([0.5, 0.25, 0.25]))
    repeated = PromptProblem(
        np.concatenate([keys[:1], keys]), np.concatenate([scores[:1], scores]), loss
    )
    return weighted, repeated


@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("radius", [0.5, 5.0, 80.0])
def test_weights_equal_a_repeated_input(loss, radius):
    for seed in range(4):
        weighted, repeated = _pair(loss, seed)
        p = np.random.default_rng(seed + 100).normal(size=3)
        p *= radius / np.linalg.norm(p)
        pt = torch.from_numpy(p)
        close = {"rel": 1e-13, "abs": 1e-300}
        assert float(weighted.loss_value(pt)) == pytest.approx(
            float(repeated.loss_value(pt)), **close
        )
        assert weighted.loss_floor([0, 1, 2]) == pytest.approx(
            repeated.loss_floor([0, 0, 1, 2]), **close
        )
        assert weighted.smoothness_bound() == pytest.approx(repeated.smoothness_bound(), **close)
        s_w, v_w = weighted.gradient_log_np(p)
        s_r, v_r = repeated.gradient_log_np(p)
        assert s_w == pytest.approx(s_r, rel=1e-13, abs=1e-12)
        np.testing.assert_allclose(v_w, v_r, rtol=1e-12, atol=1e-13)
        u_w, l_w = weighted.flow_field_np(p)
        u_r, l_r = repeated.flow_field_np(p)
        np.testing.assert_allclose(u_w, u_r, rtol=1e-12, atol=1e-13)
        assert l_w == pytest.approx(l_r, rel=1e-13, abs=1e-12)
        if loss != "correlation":  # the correlation loss has no loss floor gap of its kind
            top = np.argmax(weighted.scores.numpy(), axis=1)
            gap_w = weighted.log_loss_gap(pt, top)
            gap_r = repeated.log_loss_gap(pt, np.concatenate([top[:1], top]))
            assert gap_w == pytest.approx(gap_r, rel=1e-12, abs=1e-12)
        J_w, J_r = weighted.flow_jacobian_np(p), repeated.flow_jacobian_np(p)
        np.testing.assert_allclose(J_w, J_r, rtol=1e-10, atol=1e-12 * np.abs(J_r).max())
        g_w = weighted.gradient(pt).numpy()
        np.testing.assert_allclose(g_w, repeated.gradient(pt).numpy(), rtol=1e-12, atol=1e-300)


def test_explicit_mean_weights_equal_none():
    rng = np.random.default_rng(7)
    keys, scores = rng.normal(size=(5, 3, 4)), rng.uniform(-1, 1, size=(5, 3))
    plain = PromptProblem(keys, scores, "logistic")
    explicit = PromptProblem(keys, scores, "logistic", np.full(5, 0.2))
    p = rng.normal(size=4) * 3
    np.testing.assert_allclose(explicit.flow_field_np(p)[0], plain.flow_field_np(p)[0], rtol=1e-13)
    assert explicit.log_weights_np == pytest.approx(plain.log_weights_np, rel=1e-15)
    torch.testing.assert_close(explicit.input_weights, plain.input_weights)


@pytest.mark.parametrize("loss", LOSSES)
def test_weighted_jacobian_matches_central_differences(loss):
    rng = np.random.default_rng(3)
    problem = PromptProblem(
        rng.normal(size=(4, 3, 3)), rng.uniform(-1, 1, (4, 3)), loss, rng.uniform(0.01, 3, 4)
    )
    for _ in range(5):
        p = rng.normal(size=3) * rng.uniform(0.5, 20)
        jac = problem.flow_jacobian_np(p)
        ref = np.empty_like(jac)
        for j in range(3):
            h = 1e-5 * max(1.0, abs(p[j]))
            up, down = p.copy(), p.copy()
            up[j] += h
            down[j] -= h
            ref[:, j] = (problem.flow_field_np(up)[0] - problem.flow_field_np(down)[0]) / (2 * h)
        assert np.abs(jac - ref).max() <= 1e-5 * np.abs(ref).max() + 1e-9


def test_weights_are_checked():
    keys, scores = np.zeros((2, 2, 1)), np.zeros((2, 2))
    with pytest.raises(ValueError, match="weights: expected 2"):
        PromptProblem(keys, scores, "logistic", np.ones(3))
    with pytest.raises(ValueError, match="must be > 0"):
        PromptProblem(keys, scores, "logistic", np.array([1.0, 0.0]))


def test_parts_that_assume_the_mean_refuse_weights():
    problem = PromptProblem(np.zeros((2, 2, 1)), np.zeros((2, 2)), "logistic", np.ones(2))
    with pytest.raises(ValueError, match="weighted"):
        BatchedProblems.of([problem])
    with pytest.raises(ValueError, match="weighted"):
        objective_for(problem)


# ---------------------------------------------------------------- the linear NTP decoder


def _ce_reference(problem, W):
    """CE(W) and ∇CE per context from the support's log-sum-exps (no shared code)."""
    loss, grad = 0.0, np.zeros_like(W)
    for j in range(problem.m):
        z = W @ problem.H[:, j]
        lse = np.logaddexp.reduce(z)
        q = np.exp(z - lse)
        for v in np.flatnonzero(problem.P[j] > 0):
            loss += problem.pi[j] * problem.P[j, v] * (lse - z[v])
        grad += problem.pi[j] * np.outer(q - problem.P[j], problem.H[:, j])
    return loss, grad


@pytest.mark.parametrize("seed", range(6))
def test_linear_view_is_the_decoders_cross_entropy(seed):
    m, V, d = 2 + seed % 3, 3 + seed % 3, 2 + seed % 4
    problem = linear_ntp(*linear_data(seed, m, V, d, 1 + seed % (V - 1)))
    view = linear_view(problem)
    assert view.dim == V * d and view.n == int(problem.support.sum())
    assert float(view.input_weights.sum()) == pytest.approx(float(problem.pi.sum()), rel=1e-14)
    rng = np.random.default_rng(seed)
    for norm in (0.3, 3.0, 30.0):
        W = rng.normal(size=(V, d))
        W *= norm / np.linalg.norm(W)
        ref_loss, ref_grad = _ce_reference(problem, W)
        assert float(view.loss_value(torch.from_numpy(W.ravel()))) == pytest.approx(
            ref_loss, rel=1e-12
        )
        assert problem.loss(W) == pytest.approx(ref_loss, rel=1e-12)
        scale, vec = view.gradient_log_np(W.ravel())
        np.testing.assert_allclose(math.exp(scale) * vec, ref_grad.ravel(), rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(
            view.gradient(torch.from_numpy(W.ravel())).numpy(),
            ref_grad.ravel(),
            rtol=1e-10,
            atol=1e-14,
        )
    W = rng.normal(size=(V, d))
    hp = loss_gradient(view, torch.from_numpy(W.ravel()), digits=50).numpy()
    np.testing.assert_allclose(hp, _ce_reference(problem, W)[1].ravel(), rtol=1e-12, atol=1e-15)


def test_linear_flow_limit_hand_instance():
    """m = 1, d = 1, h = 1, p̂ = (2/3, 1/3, 0): W ∈ ℝ³. F = span(e0 − e1); the log-odds
    w1 − w0 = log ½ give W* = (log 2, −log 2, 0)/2; the NTP-SVM (w0 = w1, w0 − w2 ≥ 1, least
    norm) is W^mm = (1, 1, −2)/3."""
    problem = linear_ntp(np.ones((1, 1)), np.array([[2 / 3, 1 / 3, 0.0]]), np.ones(1))
    lim = linear_flow_limit(problem)
    assert lim.kind == "shared", lim.describe()
    sh = lim.shared
    unit = np.array([1.0, 1.0, -2.0]) / math.sqrt(6)
    end = sh.p / np.linalg.norm(sh.p)
    assert 1 - float(end @ unit) <= 1e-6
    w_star = np.array([math.log(2), -math.log(2), 0.0]) / 2
    np.testing.assert_allclose(sh.q_full, w_star, atol=1e-9)
    np.testing.assert_allclose(sh.finite.q, w_star, atol=1e-9)
    assert sorted(sh.shares[0]) == [0, 1]
    assert [sh.shares[0][0], sh.shares[0][1]] == pytest.approx([2 / 3, 1 / 3], rel=1e-9)


@pytest.mark.parametrize("seed", [1, 2, 5, 7, 10])
def test_linear_flow_limit_matches_the_oracles(seed):
    m, V, d = 2 + seed % 5, 3 + seed % 4, 2 + seed % 9
    problem = linear_ntp(*linear_data(seed, m, V, d, (seed % (V - 1)) + 1))
    svm, comp = problem.ntp_svm(), problem.compatibility()
    assert svm.ok and comp.compatible and problem.dim_F > 0
    lim = linear_flow_limit(problem)
    assert lim.kind == "shared", lim.describe()
    unit = svm.W.ravel() / np.linalg.norm(svm.W)
    assert 1 - float(lim.shared.p @ unit) / np.linalg.norm(lim.shared.p) <= 1e-6
    np.testing.assert_allclose(lim.shared.q_full, comp.W_star.ravel(), atol=1e-8)
