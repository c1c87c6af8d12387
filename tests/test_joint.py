"""Unit tests of models/flows/joint.py: joint (v, p) training (spec maxmargin §2.7, Fig. 3 of §4,
F12)."""

import math

import mpmath
import numpy as np
import pytest
import torch

from models.flows.joint import (
    JointProblem,
    joint_ngd,
    joint_objective,
    joint_reg_path_point,
    relaxed_svm_for,
)
from models.problems.attention import cosine
from tests.mutmut_aware import per_mutant_scope

F64 = torch.float64
Y = torch.tensor([1.0, -1.0, 1.0], dtype=F64)
SELECTED = [1, 1, 1]


def fig3(third=(0.5, 1.0)) -> JointProblem:
    """Spec §4 Fig. 3: n=3, T=2, d=2, W=I; (0.5, 1) is tight (panel a), (0.5, 1.5) not (b)."""
    X = torch.tensor([[[0, 0], [1, 1]], [[0, 0], [1, -1]], [[0, 0], list(third)]], dtype=F64)
    return JointProblem(X, Y)


TIGHT, NONTIGHT = (0.5, 1.0), (0.5, 1.5)


@pytest.fixture(scope=per_mutant_scope)
def nontight_run():
    problem = fig3(NONTIGHT)
    return problem, joint_ngd(problem, [-1.0, 0.0], [0.0, -1.0], lr=0.1, steps=1000)


# ---------------------------------------------------------------------------- gradients


def random_problem(seed: int, loss="logistic"):
    gen = torch.Generator().manual_seed(seed)
    X = torch.randn(4, 3, 3, generator=gen, dtype=F64)
    W = torch.eye(3, dtype=F64) + 0.2 * torch.randn(3, 3, generator=gen, dtype=F64)
    return JointProblem(X, torch.tensor([1.0, -1.0, -1.0, 1.0]), W, loss), gen


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation", "square"])
def test_gradients_match_autograd(loss):
    problem, gen = random_problem(0, loss)
    for _ in range(5):
        v = 2 * torch.randn(3, generator=gen, dtype=F64)
        p = 2 * torch.randn(3, generator=gen, dtype=F64)
        vv, pp = v.clone().requires_grad_(True), p.clone().requires_grad_(True)
        auto_v, auto_p = torch.autograd.grad(problem.loss_value(vv, pp), (vv, pp))
        gv, gp = problem.gradients(v, p)
        np.testing.assert_allclose(gv, auto_v, rtol=1e-10, atol=1e-15)
        np.testing.assert_allclose(gp, auto_p, rtol=1e-10, atol=1e-15)


def test_gradients_match_finite_differences():
    problem, _ = random_problem(1)
    v = torch.tensor([0.4, -0.2, 0.9], dtype=F64)
    p = torch.tensor([-0.3, 0.8, 0.1], dtype=F64)
    gv, gp = problem.gradients(v, p)
    h = 1e-6
    for e in torch.eye(3, dtype=F64):
        fd_v = (problem.loss_value(v + h * e, p) - problem.loss_value(v - h * e, p)) / (2 * h)
        fd_p = (problem.loss_value(v, p + h * e) - problem.loss_value(v, p - h * e)) / (2 * h)
        assert float(gv @ e) == pytest.approx(float(fd_v), rel=1e-6, abs=1e-11)
        assert float(gp @ e) == pytest.approx(float(fd_p), rel=1e-6, abs=1e-11)


def mp_gradient_v(problem: JointProblem, v, p) -> np.ndarray:
    """∇_v L of the logistic loss in 60-digit arithmetic (reference for huge margins)."""
    mpmath.mp.dps = 60
    X, y, keys = problem.X.tolist(), problem.y.tolist(), problem.keys.tolist()
    grad = [mpmath.mpf(0)] * problem.dim_v
    for i in range(problem.n):
        z = [sum(mpmath.mpf(k) * q for k, q in zip(key, p, strict=True)) for key in keys[i]]
        w = [mpmath.exp(zt) for zt in z]
        s = [wt / sum(w) for wt in w]
        u = [sum(s[t] * X[i][t][j] for t in range(len(s))) for j in range(problem.dim_v)]
        m = y[i] * sum(uj * vj for uj, vj in zip(u, v, strict=True))
        lp = -1 / (1 + mpmath.exp(m))
        grad = [g + lp * y[i] * uj / problem.n for g, uj in zip(grad, u, strict=True)]
    return np.array([float(g / mpmath.norm(grad)) for g in grad])


def test_v_gradient_direction_survives_underflow():
    """At margins ~1000 the logistic ℓ' is e^{-1000} (0 in float64): autograd returns 0, the
    log-space gradient keeps the exact direction (checked against 60-digit arithmetic)."""
    problem = fig3(NONTIGHT)
    v, p = [30.0, 1000.0], [3.0, 1.0]
    vv = torch.tensor(v, dtype=F64, requires_grad=True)
    (auto,) = torch.autograd.grad(problem.loss_value(vv, torch.tensor(p, dtype=F64)), vv)
    assert float(auto.abs().max()) == 0.0
    log_scale, vec = problem.gradient_v_log(v, p)
    assert log_scale < -700
    np.testing.assert_allclose(vec / np.linalg.norm(vec), mp_gradient_v(problem, v, p), atol=1e-12)


def test_joint_objective_is_log_loss_without_underflow():
    """log L from the grid objective equals log(loss_value) where L is representable, and stays
    finite (≈ −margin) at margins of ~1000, where L itself underflows to 0."""
    problem = fig3(NONTIGHT)
    obj = joint_objective(problem)
    V = torch.tensor([[0.3, 1.0], [0.0, 3.0], [0.0, 1000.0]], dtype=F64)
    P = torch.tensor([[1.0, 0.2], [5.0, 0.0], [30.0, 0.0]], dtype=F64)
    logs = obj.pairs(V, P)
    for k in range(2):
        assert float(logs[k]) == pytest.approx(math.log(problem.loss_value(V[k], P[k])), rel=1e-12)
    assert float(problem.loss_value(V[2], P[2])) == 0.0
    expected = torch.logsumexp(-problem.margins(V[2], P[2]), 0) - math.log(3)  # ℓ(m) ≈ e^{-m}
    assert float(logs[2]) == pytest.approx(float(expected), rel=1e-12)


# ------------------------------------------------------------------------- Figure 3 (§4)


def test_relaxed_svm_tight_and_nontight():
    tight = relaxed_svm_for(fig3(TIGHT), SELECTED)
    assert tight.tight and tight.support.tolist() == [True, True, True]
    np.testing.assert_allclose(tight.p_relax.x, tight.p_full.x, atol=1e-9)
    loose = relaxed_svm_for(fig3(NONTIGHT), SELECTED)
    assert not loose.tight and loose.support.tolist() == [True, True, False]
    np.testing.assert_allclose(loose.v_mm.x, [0.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(loose.p_relax.x, [1.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(loose.p_full.x, [1.25, 0.25], atol=1e-9)
    assert cosine(loose.p_relax.x, loose.p_full.x) == pytest.approx(0.98058, abs=1e-5)


def test_fig3_tight_joint_ngd_converges_to_both_svms():
    """Fig. 3(a) protocol (lr 0.1, 1000 steps, init p=(0,−1), v=(−1,0), each gradient normalised):
    cos(v, v^mm) ≥ 0.9999 and cos(p, p^mm) ≥ 0.999; softmax and logistic probabilities → 1."""
    problem = fig3(TIGHT)
    svms = relaxed_svm_for(problem, SELECTED)
    run = joint_ngd(problem, [-1.0, 0.0], [0.0, -1.0], lr=0.1, steps=1000)
    assert cosine(run.v, svms.v_mm.x) >= 0.9999
    assert cosine(run.p, svms.p_full.x) >= 0.999
    assert run.attention_mass[-1] > 1 - 1e-9 and run.output_prob[-1] > 1 - 1e-9
    assert run.steps[-1] == 1000 and run.vs.shape == (1001, 2)
    assert float(torch.linalg.vector_norm(run.p)) == pytest.approx(100, rel=0.05)


def test_fig3_nontight_joint_ngd_prefers_the_relaxed_svm(nontight_run):
    """Fig. 3(b): input 3 is not a v-SVM support vector; p goes to p^relax, not p^full (F12)."""
    problem, run = nontight_run
    svms = relaxed_svm_for(problem, SELECTED)
    assert cosine(run.v, svms.v_mm.x) >= 0.9999
    relax, full = cosine(run.p, svms.p_relax.x), cosine(run.p, svms.p_full.x)
    assert relax >= 0.999 and relax > full and full < 0.99


def test_joint_ngd_records_every_k(nontight_run):
    problem, full = nontight_run
    sparse = joint_ngd(problem, [-1.0, 0.0], [0.0, -1.0], steps=50, record_every=20)
    assert sparse.steps.tolist() == [0, 20, 40, 50]
    np.testing.assert_allclose(sparse.ps, full.ps[[0, 20, 40, 50]], atol=1e-12)
    assert np.all(np.diff(sparse.losses) < 0)


# ------------------------------------------------------------ joint regularization path


def test_joint_reg_path_equal_rates_goes_to_relaxed_svm():
    """Spec §2.7 table, r = R = 20: cos(p_R, p^relax) = 0.99968 vs cos(p_R, p^full) = 0.9852."""
    problem = fig3(NONTIGHT)
    svms = relaxed_svm_for(problem, SELECTED)
    pt = joint_reg_path_point(problem, 20.0, 20.0)
    assert cosine(pt.v, svms.v_mm.x) >= 0.9999
    assert cosine(pt.p, svms.p_relax.x) == pytest.approx(0.99968, abs=3e-4)
    assert cosine(pt.p, svms.p_full.x) == pytest.approx(0.9852, abs=2e-3)
    assert pt.certified and pt.radial_descent and pt.objective_kind == "log_loss"
    assert math.isclose(float(torch.linalg.vector_norm(pt.p)), 20.0, rel_tol=1e-12)


def test_joint_reg_path_rates_decide_the_limit():
    """F12: R ≫ r gives p^full (spec: cos 0.99901 at R=40, r=10); r ≫ R gives p^relax."""
    problem = fig3(NONTIGHT)
    svms = relaxed_svm_for(problem, SELECTED)
    p_wins = joint_reg_path_point(problem, 10.0, 40.0)
    assert cosine(p_wins.p, svms.p_full.x) >= 0.998
    assert cosine(p_wins.p, svms.p_full.x) > cosine(p_wins.p, svms.p_relax.x)
    v_wins = joint_reg_path_point(problem, 40.0, 10.0)
    assert cosine(v_wins.p, svms.p_relax.x) >= 0.99999


def test_bad_input_names_the_field():
    X = torch.zeros(3, 2, 2, dtype=F64)
    with pytest.raises(ValueError, match="y:"):
        JointProblem(X, torch.tensor([1.0, 2.0, 1.0]))
    with pytest.raises(ValueError, match="W:"):
        JointProblem(X, Y, W=torch.eye(3))
    three_d = JointProblem(torch.zeros(3, 2, 3, dtype=F64), Y)
    with pytest.raises(ValueError, match="dim_v = dim_p = 2"):
        joint_reg_path_point(three_d, 1.0, 1.0)
