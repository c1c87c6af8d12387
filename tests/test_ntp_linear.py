"""Unit tests of the linear NTP decoder (models/ntp/linear.py; spec ntp.md §1.3, §2.11–2.12,
controls C11, C12): hand-solved instances, autograd, the stable excess loss against mpmath,
compatibility, separability with certificates, F, W*, W^mm against an independent solve of
the unreduced Def. 2, and bad input."""

import math

import cvxpy as cp
import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ntp.gd import batched_linear_gd, gd
from models.ntp.linear import linear_ntp
from models.ntp.qp import farkas_residual


@st.composite
def instances(draw, full_rank=False):
    """Gaussian contexts, random supports of a drawn size, Dirichlet(1) probabilities."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    m, V = draw(st.integers(1, 5)), draw(st.integers(2, 6))
    d = draw(st.integers(m, m + 2)) if full_rank else draw(st.integers(1, 6))
    size = draw(st.integers(1, V))
    P = np.zeros((m, V))
    for j in range(m):
        S = rng.choice(V, size=size, replace=False)
        P[j, S] = rng.dirichlet(np.ones(size))
    return linear_ntp(rng.standard_normal((d, m)), P, rng.dirichlet(np.ones(m)))


def torch_ce(model, W):
    logq = torch.log_softmax(W @ torch.tensor(model.H), dim=0).T
    P = torch.tensor(model.P)
    terms = torch.where(P > 0, P * logq, torch.zeros_like(P))
    return -(torch.tensor(model.pi) * terms.sum(1)).sum()


# ------------------------------------------------------------------------------ closed forms


def test_full_support_closed_form():
    """m = 1, h = 1, p = (1/4, 3/4): W* = (−log 3/2, log 3/2), dim F = 1, no margin row."""
    model = linear_ntp([[1.0]], [[0.25, 0.75]], [1.0])
    comp = model.compatibility()
    assert comp.compatible and model.dim_F == 1
    np.testing.assert_allclose(comp.W_star[:, 0], [-math.log(3) / 2, math.log(3) / 2], atol=1e-15)
    assert model.loss(comp.W_star) == pytest.approx(model.entropy(), rel=1e-15)
    svm = model.ntp_svm()
    assert svm.ok and svm.vacuous and not svm.W.any()


def test_ntp_svm_closed_form():
    """V = 3, p = (1/2, 1/2, 0), h = 1: W* = 0; W^mm has w_0 = w_1 = a, w_0 − w_2 ≥ 1:
    min 2a² + (a − 1)² at a = 1/3: w = (1/3, 1/3, −2/3)."""
    model = linear_ntp([[1.0]], [[0.5, 0.5, 0.0]], [1.0])
    assert not model.compatibility().W_star.any()
    svm = model.ntp_svm()
    assert svm.ok and svm.separable and svm.solution.certificate.worst <= 1e-12
    np.testing.assert_allclose(svm.W[:, 0], [1 / 3, 1 / 3, -2 / 3], atol=1e-14)
    assert model.entropy() == pytest.approx(math.log(2), rel=1e-15)


def test_one_hot_supports_have_trivial_f():
    """Remark 1: every |S_j| = 1 ⇒ F = {0}, W* = 0; W^mm is the multiclass SVM."""
    model = linear_ntp(np.eye(2), [[1.0, 0, 0], [0, 0, 1.0]], [0.5, 0.5])
    assert model.dim_F == 0 and not model.compatibility().W_star.any()
    assert model.entropy() == 0.0 and model.ntp_svm().ok


def test_c12_separable_but_not_compatible():
    """C12: two contexts share an embedding and support {0, 1} with p = (1/2, 1/2), (0.8, 0.2);
    a third has support {2, 3}: the log-odds 0 and log(1/4) clash (residual log 2 in max
    norm; the spec's 0.98 is the 2-norm, √2·log 2); separable all the same."""
    P = [[0.5, 0.5, 0, 0], [0.8, 0.2, 0, 0], [0, 0, 0.5, 0.5]]
    model = linear_ntp([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]], P, [1 / 3] * 3)
    comp = model.compatibility()
    assert not comp.compatible and comp.W_star is None
    assert comp.residual == pytest.approx(math.log(2), rel=1e-12)
    assert model.ntp_svm().separable is True


def test_c11_compatible_but_not_separable():
    """d = 1, contexts h = 1 and h = −1 with support {0, 1} and p = (1/2, 1/2, 0): compatible
    (W* = 0), but w_0 − w_2 ≥ 1 and −(w_0 − w_2) ≥ 1 clash; the Farkas pair proves it."""
    model = linear_ntp([[1.0, -1.0]], [[0.5, 0.5, 0], [0.5, 0.5, 0]], [0.5, 0.5])
    assert model.compatibility().compatible
    svm = model.ntp_svm()
    assert svm.separable is False and svm.W is None
    y, mu = svm.solution.ineq_duals, svm.solution.eq_duals
    value, residual = farkas_residual(model._margins, model._equalities[0], y, mu)
    assert value > 0 and residual <= 1e-12 * value


# ------------------------------------------------------------------ loss, gradient, numerics


@settings(max_examples=30, deadline=None)
@given(instances(), st.sampled_from([0.1, 1.0, 10.0]), st.integers(0, 2**32 - 1))
def test_loss_and_gradient_match_autograd(model, scale, seed):
    W = np.random.default_rng(seed).standard_normal((model.vocab, model.dim)) * scale
    Wt = torch.tensor(W, requires_grad=True)
    ce = torch_ce(model, Wt)
    (grad,) = torch.autograd.grad(ce, Wt)
    assert model.loss(W) == pytest.approx(float(ce.detach()), rel=1e-12, abs=1e-14)
    np.testing.assert_allclose(model.gradient(W), grad.numpy(), rtol=0, atol=1e-12 * scale)
    assert model.excess_loss(W) == pytest.approx(model.loss(W) - model.entropy(), abs=1e-12)
    assert model.excess_loss(W) >= 0


def test_excess_loss_below_rounding_matches_mpmath():
    """At W* + 60·W^mm, CE − H ≈ e^{-60} is lost in CE − H (both ~1); the stable form of
    §6.4 matches a 50-digit evaluation."""
    rng = np.random.default_rng(2)
    # dyadic probabilities: each row sums to 1 exactly, as the 50-digit reference assumes
    P = np.array([[0.25, 0.75, 0, 0], [0, 0.25, 0.25, 0.5], [0.5, 0, 0, 0.5]])
    model = linear_ntp(rng.standard_normal((4, 3)), P, [0.5, 0.3, 0.2])
    W = model.compatibility().W_star + 60 * model.ntp_svm().W
    with mpmath.workdps(50):
        logits = [[mpmath.fsum(mpmath.mpf(float(a)) * mpmath.mpf(float(b))
                   for a, b in zip(W[z], model.H[:, j], strict=True))
                   for z in range(4)] for j in range(3)]  # fmt: skip
        excess = mpmath.mpf(0)
        for j in range(3):
            lse = mpmath.log(mpmath.fsum(mpmath.exp(v) for v in logits[j]))
            for z in range(4):
                if P[j, z] > 0:
                    p = mpmath.mpf(float(P[j, z]))
                    weight = mpmath.mpf(float(model.pi[j])) * p
                    excess += weight * (lse - logits[j][z] + mpmath.log(p))
    assert 0 < float(excess) < 1e-20
    assert model.excess_loss(W) == pytest.approx(float(excess), rel=1e-9)
    assert model.loss(W) - model.entropy() == pytest.approx(0, abs=1e-15)


# ------------------------------------------------------------------ conditions and oracles


@settings(max_examples=30, deadline=None)
@given(instances(full_rank=True))
def test_lemma_1_full_rank_is_compatible_and_separable(model):
    """Lemma 1 (with d ≥ m, the [D] refinement): full-rank H̄ ⇒ both conditions."""
    assert model.compatibility().compatible
    assert model.ntp_svm().separable is True


def unreduced_ntp_svm(model):
    """Def. 2/3 as the paper writes them, every pair z ≠ z' ∈ S_j and every (z ∈ S_j, v ∉ S_j),
    solved by cvxpy + Clarabel: an independent formulation and solver."""
    W = cp.Variable((model.vocab, model.dim))
    cons = []
    for j in range(model.m):
        logits = W @ model.H[:, j]
        S, notS = np.flatnonzero(model.support[j]), np.flatnonzero(~model.support[j])
        cons += [logits[z] == logits[y] for z in S for y in S if z < y]
        cons += [logits[z] - logits[v] >= 1 for z in S for v in notS]
    problem = cp.Problem(cp.Minimize(cp.sum_squares(W)), cons)
    problem.solve(solver=cp.CLARABEL)
    return problem.status, W.value


@settings(max_examples=20, deadline=None)
@given(instances())
def test_ntp_svm_matches_the_unreduced_problem(model):
    svm = model.ntp_svm()
    status, W = unreduced_ntp_svm(model)
    assert svm.status in ("optimal", "infeasible"), svm.solution.reason
    assert (svm.status == "optimal") == (status == "optimal"), (svm.status, status)
    if svm.ok:
        assert svm.solution.certificate.worst <= 1e-8
        np.testing.assert_allclose(svm.W, W, rtol=0, atol=1e-6)


@settings(max_examples=30, deadline=None)
@given(instances())
def test_structure_of_w_star_and_w_mm(model):
    """§2.12: W* ∈ F solves the log-odds equations; W^mm ∈ F⊥; both have zero column sums;
    in-support softmax at W* equals p̂_j (independent of the equations' rows)."""
    comp = model.compatibility()
    if comp.compatible:
        W = comp.W_star
        np.testing.assert_allclose(model.project_F(W), W, atol=1e-12)
        assert np.abs(W.sum(axis=0)).max() <= 1e-12
        logits = (W @ model.H).T
        for j in range(model.m):
            S = model.support[j]
            q = np.exp(logits[j, S] - np.logaddexp.reduce(logits[j, S]))
            np.testing.assert_allclose(q, model.P[j, S], rtol=1e-10, atol=0)
    svm = model.ntp_svm()
    if svm.ok:
        assert np.abs(model.project_F(svm.W)).max() <= 1e-10
        assert np.abs(svm.W.sum(axis=0)).max() <= 1e-10


@settings(max_examples=20, deadline=None)
@given(instances(), st.integers(0, 2**32 - 1))
def test_w_mm_depends_only_on_the_supports(model, seed):
    """§2.12 / C15: resampling p̂ on the same supports leaves W^mm unchanged."""
    rng = np.random.default_rng(seed)
    P = np.where(model.support, rng.random(model.P.shape) + 0.1, 0.0)
    other = linear_ntp(model.H, P / P.sum(axis=1, keepdims=True), model.pi)
    a, b = model.ntp_svm(), other.ntp_svm()
    assert a.status == b.status
    if a.ok:
        np.testing.assert_allclose(a.W, b.W, rtol=0, atol=1e-8)


@settings(max_examples=20, deadline=None)
@given(instances(full_rank=True), st.sampled_from([1.0, 5.0, 20.0]))
def test_entropy_floor_bound(model, R):
    """§2.11: CE(W* + R·W^mm) − H ≤ C e^{−R}, C = V e^{‖W*‖M}, M = √2 max‖h̄_j‖."""
    W_star, W_mm = model.compatibility().W_star, model.ntp_svm().W
    excess = model.excess_loss(W_star + R * W_mm)
    assert excess <= model.floor_bound(R, W_star) * (1 + 1e-12)


def test_floor_bound_constant():
    """C = V e^{‖W*‖M}, M = √2 max‖h̄_j‖: h̄ = (3, 4) has norm 5, p = (1/4, 3/4) gives
    ‖W*‖ = log 3/√2 (W* = (−1, 1)ᵀ(log 3/2) h̄ᵀ/25 has norm log 3/(√2·5))."""
    model = linear_ntp([[3.0], [4.0]], [[0.25, 0.75]], [1.0])
    W_star = model.compatibility().W_star
    assert np.linalg.norm(W_star) == pytest.approx(math.log(3) / (math.sqrt(2) * 5), rel=1e-14)
    expected = 2 * math.exp(np.linalg.norm(W_star) * math.sqrt(2) * 5 - 7.0)
    assert model.floor_bound(7.0, W_star) == pytest.approx(expected, rel=1e-14)


def test_gd_heads_where_the_oracles_point():
    """Coherence of CE, W* and W^mm (Thm 2's quantities; GD η = 0.5 from 0, m = 3, V = 5,
    |S_j| = 2): 1 − corr(W − W*, W^mm), ‖P_F W − W*‖ and CE − H all decrease; at 3000 steps
    they are 1.2e-2, 6.3e-3 and 7.1e-3."""
    rng = np.random.default_rng(1)
    H = rng.standard_normal((4, 3))
    P = np.zeros((3, 5))
    for j in range(3):
        support = rng.choice(5, 2, replace=False)
        P[j, support] = rng.dirichlet(np.ones(2))
    model = linear_ntp(H, P, np.ones(3) / 3)
    W_star, W_mm = model.compatibility().W_star, model.ntp_svm().W
    run = gd(model, np.zeros((5, 4)), lr=0.5, steps=3000, record=[300, 1000])
    gaps, fins, excess = [], [], []
    for _, W in sorted(run.iterates.items()):
        V = W - W_star
        gaps.append(1 - (V * W_mm).sum() / (np.linalg.norm(V) * np.linalg.norm(W_mm)))
        fins.append(np.linalg.norm(model.project_F(W) - W_star))
        excess.append(model.excess_loss(W))
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] <= 0.03
    assert fins == sorted(fins, reverse=True) and fins[-1] <= 0.02
    assert excess == sorted(excess, reverse=True) and 0 < excess[-1] <= 0.02


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("H", "P", "pi", "match"),
    [
        ([[1.0, 2.0]], [[0.5, 0.5]], [1.0], r"P: expected 2 rows"),
        ([[1.0]], [[0.5, 0.6]], [1.0], r"P: row 0 sums to 1.1"),
        ([[1.0]], [[-0.5, 1.5]], [1.0], "P: probabilities must be ≥ 0"),
        ([[1.0]], [[1.0]], [1.0], "at least 2 tokens"),
        ([[1.0]], [[0.5, 0.5]], [0.0], "pi: context weights must be > 0"),
        ([[1.0]], [[0.5, 0.5]], [1.0, 1.0], r"pi: expected 1 weights"),
        ([1.0], [[0.5, 0.5]], [1.0], "H: expected 2 dimensions"),
        ([[np.nan]], [[0.5, 0.5]], [1.0], "H: contains NaN"),
    ],
)
def test_bad_input_names_the_field(H, P, pi, match):
    with pytest.raises(ValueError, match=match):
        linear_ntp(H, P, pi)


def test_batched_gd_steps_are_the_models_gradient_steps():
    # Problems of different sizes in one padded batch; partial supports, so the off-support
    # terms matter; W0 far from 0, so ε_j is small but not negligible.
    rng = np.random.default_rng(7)
    problems, W0s = [], []
    for d, m, V in ((3, 2, 4), (5, 4, 3), (2, 3, 5)):
        P = rng.dirichlet(np.ones(V), size=m)
        P[:, 0] = 0.0  # token 0 is off every support
        P /= P.sum(axis=1, keepdims=True)
        problems.append(linear_ntp(rng.standard_normal((d, m)), P, rng.dirichlet(np.ones(m))))
        W0s.append(3.0 * rng.standard_normal((V, d)))
    for normalized in (False, True):
        run = batched_linear_gd(
            problems, W0s, eta=0.5, steps=2, record=(1, 2), normalized=normalized
        )
        assert run.finite
        for b, (problem, W0) in enumerate(zip(problems, W0s, strict=True)):
            W = W0
            for k in (1, 2):
                G = problem.gradient(W)
                step = G / np.linalg.norm(G) if normalized else G
                W = W - 0.5 * step
                assert np.abs(run.iterates[k][b] - W).max() <= 1e-12 * max(1.0, np.abs(W).max())


def test_gd_keeps_exactly_the_iterates_it_was_asked_for_and_the_last():
    model = linear_ntp(np.eye(2), [[0.5, 0.5], [1.0, 0.0]], [0.5, 0.5])
    W0 = np.zeros((2, 2))
    run = gd(model, W0, lr=0.5, steps=5, record=[0, 2, 9])
    assert sorted(run.iterates) == [0, 2, 5] and run.steps == 5 and run.stopped == ""
    np.testing.assert_array_equal(run.iterates[0], W0)
    W = W0.copy()
    for k in range(1, 6):
        W = W - 0.5 * model.gradient(W)
        if k == 2:
            np.testing.assert_allclose(run.iterates[2], W, rtol=0, atol=1e-15)
    np.testing.assert_allclose(run.iterates[5], W, rtol=0, atol=1e-15)
    assert sorted(gd(model, W0, lr=0.5, steps=3).iterates) == [3]
