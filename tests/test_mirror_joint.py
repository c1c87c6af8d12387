"""Unit tests of models/flows/mirror_joint.py: joint (W, v) ℓp mirror descent on cross-attention
(spec tfsvm §1.6, §2.10 MD-JOINT, §4.6), the ℓp v-SVM and the trusted fixed-head adapter."""

import math

import cvxpy as cp
import mpmath
import numpy as np
import pytest
import torch

from models.flows.joint import JointProblem, joint_ngd
from models.flows.mirror_joint import (
    JOINT_PRINTED_ALPHA,
    JOINT_STEPS,
    JOINT_TOKENS,
    MACHINE_EPS,
    CrossJointProblem,
    joint_md,
    lp_v_svm,
    naive_joint_md,
    official_joint_data,
)
from models.problems.cross import CrossProblem, dual_map, primal_map

F64 = torch.float64


def random_problem(seed: int, n=3, T=4, d=3) -> CrossJointProblem:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, T, d, generator=g, dtype=F64)
    Z = torch.randn(n, d, generator=g, dtype=F64)
    y = torch.where(torch.rand(n, generator=g, dtype=F64) < 0.5, -1.0, 1.0).to(F64)
    return CrossJointProblem(X, Z, y)


def naive_loss(problem: CrossJointProblem, W: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The model as the official code writes it (no vectorisation), logistic loss."""
    logits = torch.einsum("itd,de,ie->it", problem.X, W, problem.Z)
    out = (torch.softmax(logits, dim=-1)[:, :, None] * problem.X).sum(1) @ v
    return torch.nn.functional.softplus(-problem.y * out).mean()


# ---------------------------------------------------------------------------- the instance


def test_official_joint_data_is_the_float32_script_data():
    X, y, Z = official_joint_data()
    want = torch.tensor(JOINT_TOKENS, dtype=torch.float32).double()
    assert X.dtype == F64 and torch.equal(X, want)
    assert float(X[0, 0, 0]) != -2.7  # float32 rounding kept, as in the script
    assert torch.equal(Z, X[:, 0]) and y.tolist() == [1.0, -1.0]


def test_problem_rejects_bad_shapes_and_losses():
    X, y, Z = official_joint_data()
    with pytest.raises(ValueError, match="Z"):
        CrossJointProblem(X, Z[:1], y)
    with pytest.raises(ValueError, match="loss"):
        CrossJointProblem(X, Z, y, loss="square")


# ---------------------------------------------------------------------------- gradients


@pytest.mark.parametrize("seed", range(4))
def test_keys_and_margins_are_the_cross_model(seed):
    problem = random_problem(seed)
    g = torch.Generator().manual_seed(100 + seed)
    W = torch.randn(3, 3, generator=g, dtype=F64)
    v = torch.randn(3, generator=g, dtype=F64)
    cross = CrossProblem(problem.X, problem.Z, problem.y, v)
    assert torch.equal(problem.keys, cross.prompt.keys)
    m = problem.joint_margins(W, v)
    assert torch.allclose(m, problem.y * cross.naive_output(W), rtol=0, atol=1e-13)


@pytest.mark.parametrize("seed", range(6))
def test_fast_gradients_equal_the_joint_problem_routines(seed):
    problem = random_problem(seed)
    g = torch.Generator().manual_seed(200 + seed)
    scale = 10.0 ** (seed - 1)
    W = torch.randn(3, 3, generator=g, dtype=F64) * scale
    v = torch.randn(3, generator=g, dtype=F64) * scale
    (mW, gW), (mv, gv) = problem._gradients_np(W.numpy().reshape(-1).copy(), v.numpy())
    rW = JointProblem.gradient_p_log(problem, v, W.reshape(-1))
    rv = JointProblem.gradient_v_log(problem, v, W.reshape(-1))
    # the scores y_i x_itᵀv come from numpy here and from torch there: rounding apart
    assert math.isclose(mW, rW[0], rel_tol=1e-13, abs_tol=1e-12)
    assert np.allclose(gW, rW[1], rtol=0, atol=1e-13)
    assert math.isclose(mv, rv[0], rel_tol=1e-13, abs_tol=1e-12)
    assert np.allclose(gv, rv[1], rtol=0, atol=1e-13)


@pytest.mark.parametrize("seed", range(4))
def test_gradients_equal_autograd_of_the_naive_loss(seed):
    problem = random_problem(seed)
    g = torch.Generator().manual_seed(300 + seed)
    W = torch.randn(3, 3, generator=g, dtype=F64).requires_grad_()
    v = torch.randn(3, generator=g, dtype=F64).requires_grad_()
    gW_ref, gv_ref = torch.autograd.grad(naive_loss(problem, W, v), (W, v))
    mW, GW = problem.gradient_W_log(W.detach(), v.detach())
    mv, Gv = problem.gradient_v_log_at(W.detach(), v.detach())
    assert np.allclose(math.exp(mW) * GW, gW_ref.numpy(), rtol=1e-10, atol=1e-15)
    assert np.allclose(math.exp(mv) * Gv, gv_ref.numpy(), rtol=1e-10, atol=1e-15)


def _mp_gradients(problem, W, v, dps=60):
    """∇_W L and ∇_v L in mpmath (the model written out, logistic loss)."""
    mpmath.mp.dps = dps
    X, Z, y = problem.X.numpy(), problem.Z.numpy(), problem.y.numpy()
    n, T, d = X.shape
    gW = [[mpmath.mpf(0)] * d for _ in range(d)]
    gv = [mpmath.mpf(0)] * d
    for i in range(n):
        a = [
            sum(
                mpmath.mpf(X[i, t, j]) * W[j][k] * mpmath.mpf(Z[i, k])
                for j in range(d)
                for k in range(d)
            )
            for t in range(T)
        ]
        top = max(a)
        e = [mpmath.exp(x - top) for x in a]
        s = [x / sum(e) for x in e]
        xv = [sum(mpmath.mpf(X[i, t, j]) * v[j] for j in range(d)) for t in range(T)]
        f = sum(s[t] * xv[t] for t in range(T))
        lp = -1 / (1 + mpmath.exp(mpmath.mpf(y[i]) * f)) * mpmath.mpf(y[i]) / n
        for j in range(d):
            gv[j] += lp * sum(s[t] * mpmath.mpf(X[i, t, j]) for t in range(T))
        for t in range(T):
            c = lp * s[t] * (xv[t] - f)
            for j in range(d):
                for k in range(d):
                    gW[j][k] += c * mpmath.mpf(X[i, t, j]) * mpmath.mpf(Z[i, k])
    return gW, gv


def test_log_space_directions_match_mpmath_where_float64_underflows():
    problem = random_problem(7, n=2, T=3, d=2)
    W = np.array([[300.0, -120.0], [80.0, 250.0]])
    v = np.array([-800.0, 1100.0])
    mp_W = [[mpmath.mpf(x) for x in row] for row in W]
    gW, gv = _mp_gradients(problem, mp_W, [mpmath.mpf(x) for x in v])
    (mW, GW), (mv, Gv) = problem._gradients_np(W.reshape(-1).copy(), v)
    cases = ((sum(gW, []), (mW, GW.ravel())), (gv, (mv, Gv)))
    for exact, (m, G) in cases:
        norm = mpmath.sqrt(sum(x * x for x in exact))
        unit = np.array([float(x / norm) for x in exact])
        assert np.allclose(G / np.linalg.norm(G), unit, atol=1e-10)
        assert math.isclose(m + math.log(np.linalg.norm(G)), float(mpmath.log(norm)), rel_tol=1e-9)


# ---------------------------------------------------------------------------- the runs


def test_joint_md_with_p_2_is_joint_ngd():
    problem = random_problem(11)
    g = torch.Generator().manual_seed(11)
    W0 = torch.randn(3, 3, generator=g, dtype=F64)
    v0 = torch.randn(3, generator=g, dtype=F64)
    a = joint_md(problem, W0, v0, p=2.0, steps=300)
    b = joint_ngd(problem, v0, W0.reshape(-1), lr=0.1, steps=300)
    assert np.allclose(a.Ws.reshape(len(a.steps), -1), b.ps.numpy(), rtol=0, atol=1e-11)
    assert np.allclose(a.vs, b.vs.numpy(), rtol=0, atol=1e-11)


@pytest.mark.parametrize("p", [1.5, 1.75, 3.0])
def test_joint_md_steps_equal_the_mirror_formula(p):
    problem = random_problem(12)
    g = torch.Generator().manual_seed(12)
    W0 = torch.randn(3, 3, generator=g, dtype=F64)
    v0 = torch.randn(3, generator=g, dtype=F64)
    run = joint_md(problem, W0, v0, p=p, steps=1)
    Wr, vr = W0.clone().requires_grad_(), v0.clone().requires_grad_()
    gW, gv = torch.autograd.grad(naive_loss(problem, Wr, vr), (Wr, vr))
    q = p / (p - 1)
    for P0, G, got in ((W0.numpy(), gW.numpy(), run.W), (v0.numpy(), gv.numpy(), run.v)):
        theta = dual_map(P0, p) - 0.1 * G / np.sum(np.abs(G) ** q) ** (1 / q)
        assert np.allclose(got, primal_map(theta, p), rtol=1e-10, atol=1e-13)


@pytest.mark.parametrize("p", [1.75, 2.0, 3.0])
def test_from_zero_only_v_moves_at_the_first_step(p):
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    for run in (joint_md(problem, p=p, steps=3), naive_joint_md(problem, p=p, steps=3)):
        assert run.moved[0] == (False, True) and run.moved[1] == (True, True)
        assert not run.Ws[1].any() and run.vs[1].any() and run.Ws[2].any()


def test_naive_run_follows_the_log_space_run_before_saturation():
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    a = joint_md(problem, p=1.75, steps=20)
    b = naive_joint_md(problem, p=1.75, steps=20)
    assert np.allclose(a.Ws, b.Ws, rtol=1e-9, atol=1e-12)
    assert np.allclose(a.vs, b.vs, rtol=1e-9, atol=1e-12)


def test_naive_loss_reads_zero_and_freezes_while_log_space_goes_on():
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    naive = naive_joint_md(problem, p=2.0, steps=600, record_every=100)
    exact = joint_md(problem, p=2.0, steps=600, record_every=100)
    assert naive.losses[-1] == 0.0 and naive.margins[-1].min() > 36
    frozen = np.linalg.norm(naive.Ws[-1] - naive.Ws[-2])
    moving = np.linalg.norm(exact.Ws[-1] - exact.Ws[-2])
    assert frozen < 1e-3 * moving


def test_selection_of_the_p_2_run_matches_the_notebook():
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    run = joint_md(problem, p=2.0, steps=JOINT_STEPS[2.0], record_every=JOINT_STEPS[2.0])
    assert tuple(problem.selected(run.W).tolist()) == JOINT_PRINTED_ALPHA[2.0]


def test_joint_md_rejects_a_bad_exponent():
    X, y, Z = official_joint_data()
    with pytest.raises(ValueError, match="p"):
        joint_md(CrossJointProblem(X, Z, y), p=1.0, steps=1)


def test_machine_eps_is_float64_eps():
    assert MACHINE_EPS == np.finfo(np.float64).eps


# ---------------------------------------------------------------------------- the v-SVM


def _direct_lp_v_svm(X, y, alpha, p):
    """min ‖v‖_p s.t. y_i x_{iα_i}ᵀ v ≥ 1, posed directly in cvxpy (independent reference)."""
    rows = y[:, None] * X[np.arange(len(alpha)), alpha]
    v = cp.Variable(X.shape[2])
    cp.Problem(cp.Minimize(cp.pnorm(v, p)), [rows @ v >= 1]).solve(solver=cp.CLARABEL)
    return v.value


@pytest.mark.parametrize("p", [1.5, 1.75, 2.0, 3.0])
def test_lp_v_svm_equals_the_direct_program(p):
    X, y, _ = official_joint_data()
    alpha = np.array([1, 0])
    sol = lp_v_svm(X, y, alpha, p)
    assert sol.ok, sol.reason
    want = _direct_lp_v_svm(X.numpy(), y.numpy(), alpha, p)
    assert np.allclose(sol.v, want, rtol=1e-5, atol=1e-6)
    assert np.abs(sol.svm.W[:, 1:]).max() <= 1e-6 * np.abs(sol.v).max()
    margins = y.numpy() * (X.numpy()[np.arange(2), alpha] @ sol.v)
    assert margins.min() >= 1 - 1e-6


def test_lp_v_svm_reports_infeasible_data():
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]], dtype=F64)
    y = torch.tensor([1.0, -1.0], dtype=F64)
    sol = lp_v_svm(X, y, [0, 0], 2.0)
    assert sol.status == "infeasible" and sol.v is None


def test_lp_v_svm_rejects_a_bad_selection():
    X, y, _ = official_joint_data()
    with pytest.raises(ValueError, match="alpha"):
        lp_v_svm(X, y, [3, 0], 2.0)
