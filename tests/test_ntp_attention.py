"""Unit tests of the NTP self-attention model (models/ntp/attention.py; spec ntp.md §1.1):
a closed form, torch autograd, central differences, mpmath at ‖W‖ ~ 1e6, convexity with a
repeated label token, the smoothness bound, and bad input."""

import math

import mpmath
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ntp.attention import (
    log_softplus,
    ntp_attention,
    ntp_model,
    smoothness_bound,
    softplus,
)
from models.ntp.data import ntp_data
from models.ntp.finite import finite_component
from models.ntp.gd import batched_attention_gd, gd
from models.ntp.qp import project
from models.ntp.svm import graph_svm


def unit_rows(rng, K, d):
    E = rng.standard_normal((K, d))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


@st.composite
def instances(draw, max_tokens=5, max_dim=4):
    """Random unit embeddings, sequences with repeats allowed, realizable labels, and a W."""
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    K = draw(st.integers(2, max_tokens))
    d = draw(st.integers(1, max_dim))
    n = draw(st.integers(1, 5))
    seqs = [rng.integers(0, K, size=int(rng.integers(1, 6))).tolist() for _ in range(n)]
    labels = [int(rng.choice(s)) for s in seqs]
    W = rng.standard_normal((d, d)) * draw(st.sampled_from([0.1, 1.0, 5.0]))
    return ntp_data(unit_rows(rng, K, d), seqs, labels), W


def torch_loss(data, W):
    """The model as spec §1.1 writes it, position by position, with plain softmax."""
    E = torch.tensor(data.embeddings)
    total = 0
    for seq, y in zip(data.sequences, data.labels, strict=True):
        s = torch.softmax(E[list(seq)] @ W @ E[seq[-1]], 0)
        total = total - torch.log(s[torch.tensor(seq) == y].sum())
    return total / data.n


def autograd(data, W):
    Wt = torch.tensor(W, requires_grad=True)
    loss = torch_loss(data, Wt)
    (grad,) = torch.autograd.grad(loss, Wt)
    return float(loss.detach()), grad.numpy()


# ------------------------------------------------------------------------------ closed form


def test_two_tokens_closed_form():
    """One sample ([1, 0], 1): L = softplus(a_0 − a_1), ∇L = −σ(a_0 − a_1)(x_1 − x_0) x_0ᵀ."""
    rng = np.random.default_rng(0)
    E = unit_rows(rng, 2, 3)
    W = rng.standard_normal((3, 3))
    model = ntp_model(E, [[1, 0]], [1])
    gap = (E[0] - E[1]) @ W @ E[0]
    assert model.loss(W) == pytest.approx(math.log1p(math.exp(gap)), rel=1e-14)
    expected = -np.outer(E[1] - E[0], E[0]) / (1 + math.exp(-gap))
    np.testing.assert_allclose(model.gradient(W), expected, rtol=1e-13, atol=1e-15)


def test_label_alone_has_zero_loss_and_gradient():
    model = ntp_model(np.eye(2), [[1, 1]], [1])
    assert model.loss(np.ones((2, 2))) == 0.0
    assert not model.gradient(np.ones((2, 2))).any()


# ------------------------------------------------------------------------ float64 references


@settings(max_examples=30, deadline=None)
@given(instances())
def test_loss_and_gradient_match_autograd(instance):
    data, W = instance
    model = ntp_attention(data)
    loss, grad = autograd(data, W)
    assert model.loss(W) == pytest.approx(loss, rel=1e-12, abs=1e-15)
    scale = max(np.abs(grad).max(), 1e-300)
    assert np.abs(model.gradient(W) - grad).max() <= 1e-11 * scale + 1e-16


@settings(max_examples=15, deadline=None)
@given(instances())
def test_gradient_matches_central_differences(instance):
    data, W = instance
    model = ntp_attention(data)
    h = 1e-6
    fd = np.zeros_like(W)
    for idx in np.ndindex(W.shape):
        E = np.zeros_like(W)
        E[idx] = h
        fd[idx] = (model.loss(W + E) - model.loss(W - E)) / (2 * h)
    np.testing.assert_allclose(model.gradient(W), fd, rtol=0, atol=1e-7)


@settings(max_examples=30, deadline=None)
@given(instances(), st.integers(0, 2**32 - 1))
def test_convex_even_with_a_repeated_label(instance, seed):
    """Positions of one token share their logit, so −log p̂_y = LSE_v(a_v + log c_v) −
    (a_y + log c_y) is convex in W (spec §1.1 says a repeated label breaks convexity; it does
    not, since the label's positions carry the same token)."""
    data, W1 = instance
    W2 = np.random.default_rng(seed).standard_normal(W1.shape) * 3
    model = ntp_attention(data)
    mid = model.loss((W1 + W2) / 2)
    assert mid <= (model.loss(W1) + model.loss(W2)) / 2 + 1e-12


@settings(max_examples=30, deadline=None)
@given(instances(), st.integers(0, 2**32 - 1))
def test_gradient_is_lipschitz_with_the_smoothness_bound(instance, seed):
    """‖∇L(W1) − ∇L(W2)‖_F ≤ L_bound ‖W1 − W2‖_F with L_bound of spec §1.1."""
    data, W1 = instance
    W2 = W1 + np.random.default_rng(seed).standard_normal(W1.shape)
    model = ntp_attention(data)
    change = np.linalg.norm(model.gradient(W1) - model.gradient(W2))
    assert change <= smoothness_bound(data) * np.linalg.norm(W1 - W2) * (1 + 1e-12)


# ----------------------------------------------------------------------- ‖W‖ ~ 1e6, mpmath


def mp_loss(data, W, digits=60):
    """L(W) in ``digits`` digits from the float64 inputs, as a log1p of the off-label mass."""
    with mpmath.workdps(digits):
        E = [[mpmath.mpf(float(v)) for v in row] for row in data.embeddings]
        Wm = [[v if isinstance(v, mpmath.mpf) else mpmath.mpf(float(v)) for v in row] for row in W]

        def logit(v, k):
            Wz = [mpmath.fsum(Wm[a][b] * E[k][b] for b in range(len(Wm))) for a in range(len(Wm))]
            return mpmath.fsum(E[v][a] * Wz[a] for a in range(len(Wm)))

        total = mpmath.mpf(0)
        for seq, y in zip(data.sequences, data.labels, strict=True):
            a = [logit(v, seq[-1]) for v in seq]
            top = max(a)
            on = mpmath.fsum(mpmath.exp(x - top) for x, v in zip(a, seq, strict=True) if v == y)
            off = mpmath.fsum(mpmath.exp(x - top) for x, v in zip(a, seq, strict=True) if v != y)
            total += mpmath.log1p(off / on)
        return total / data.n


def mp_log_gradient(data, W, digits=80, h="1e-20"):
    """log|∂L/∂W_ab| and signs by central differences of `mp_loss` in ``digits`` digits
    (independent of our formula): L changes by ~1e-20 relative over the step, far above the
    80-digit rounding, and the O(h²) error is ~1e-40."""
    logs, signs = np.empty(W.shape), np.empty(W.shape)
    with mpmath.workdps(digits):
        step = mpmath.mpf(h)
        for idx in np.ndindex(W.shape):
            plus, minus = W.astype(object), W.astype(object)
            plus[idx] = mpmath.mpf(float(W[idx])) + step
            minus[idx] = mpmath.mpf(float(W[idx])) - step
            g = (mp_loss(data, plus, digits) - mp_loss(data, minus, digits)) / (2 * step)
            logs[idx] = float(mpmath.log(abs(g))) if g != 0 else -np.inf
            signs[idx] = float(mpmath.sign(g))
    return logs, signs


def test_log_space_gradient_at_norm_1e6_matches_mpmath():
    """I1-like chain, W = 1e6·W_svm/‖W_svm‖ + an O(1) offset: the gradient (~e^{-1e5})
    underflows in float64; its log-space form keeps the direction (to ~1e-9: the logits'
    rounding at 1e6 is ~1e-10 absolute), and the loss (~e^{-1e5}) keeps its logarithm."""
    rng = np.random.default_rng(4)
    data = ntp_data(unit_rows(rng, 4, 3), [[1, 2, 3, 0], [2, 3, 0]], [1, 2])
    svm = graph_svm(data)
    W = 1e6 * svm.direction + rng.standard_normal((3, 3))
    model = ntp_attention(data)
    log_scale, G = model.gradient_log(W)
    assert -1e7 < log_scale < -1e4
    assert not model.gradient(W).any()  # the plain float64 gradient underflows to 0 here
    logs, signs = mp_log_gradient(data, W)
    np.testing.assert_allclose(G, signs * np.exp(logs - log_scale), rtol=0, atol=1e-7)
    log_loss = float(mpmath.log(mp_loss(data, W)))
    assert model.loss(W) == 0.0  # e^{-1e5} underflows too; its logarithm does not:
    assert model.log_loss(W) == pytest.approx(log_loss, rel=1e-12)


@pytest.mark.parametrize("u", [5.0, 0.0, -20.0, -29.9, -30.1, -45.0, -800.0, -1e6])
def test_softplus_and_its_log_match_mpmath(u):
    with mpmath.workdps(50):
        exact = mpmath.log1p(mpmath.exp(u))
        log_exact = float(mpmath.log(exact))
    if float(exact) > 0:
        assert softplus(np.array(u)) == pytest.approx(float(exact), rel=1e-15)
    assert log_softplus(np.array(u)) == pytest.approx(log_exact, rel=1e-15, abs=1e-15)


def test_gd_heads_where_the_oracles_point():
    """Coherence of model, graph-SVM and W_fin on I2 (GD from 0, η = 1/L_bound): 1 − corr to
    W_svm, ‖P_cyc W − W_fin‖ and L − L* all decrease; at 2000 steps they are 3.1e-2, 1.1e-2,
    1.4e-2 (spec C9: 4.6e-2 at 1e3). A sign error in any of the three would show."""
    rng = np.random.default_rng(0)
    seqs = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
    data = ntp_data(unit_rows(rng, 5, 6), seqs, [1, 1, 2, 3, 3, 2, 2])
    model, svm, fin = ntp_attention(data), graph_svm(data), finite_component(data)
    eta = 1 / smoothness_bound(data)
    run = gd(model, np.zeros((6, 6)), lr=eta, steps=2000, record=[250, 1000])
    gaps, fins, excess = [], [], []
    for _, W in sorted(run.iterates.items()):
        gaps.append(1 - (W * svm.W).sum() / (np.linalg.norm(W) * np.linalg.norm(svm.W)))
        fins.append(np.linalg.norm(project(fin.basis, W) - fin.W))
        excess.append(model.loss(W) - fin.loss)
    assert gaps == sorted(gaps, reverse=True) and gaps[-1] <= 0.05
    assert fins == sorted(fins, reverse=True) and fins[-1] <= 0.02
    assert excess == sorted(excess, reverse=True) and 0 < excess[-1] <= 0.02


# ------------------------------------------------------------------------------ bad input


def test_bad_inputs():
    with pytest.raises(ValueError, match=r"labels\[0\]: token 2 does not occur"):
        ntp_model(np.eye(3), [[0, 1]], [2])
    model = ntp_model(np.eye(3), [[0, 1]], [0])
    with pytest.raises(ValueError, match=r"W: expected shape \(3, 3\)"):
        model.loss(np.eye(2))
    with pytest.raises(ValueError, match="embeddings: contains NaN"):
        ntp_model([[0.0, np.nan]], [[0]], [0])


def test_batched_token_coordinate_steps_are_the_models_gradient_steps():
    # Draws of different sizes in one padded batch, at W = 0 and away from it: two steps of
    # GD (η = 1/L_bound), NGD and the official recipe against NTPAttention.gradient.
    from models.ntp.attention import smoothness_bound

    rng = np.random.default_rng(3)
    datas, W0s = [], []
    for K, d, n in ((5, 6, 4), (4, 3, 3), (6, 8, 5)):
        E = rng.standard_normal((K, d))
        E /= np.linalg.norm(E, axis=1, keepdims=True)
        seqs = [
            list(rng.choice(K, size=int(rng.integers(2, K + 1)), replace=False)) for _ in range(n)
        ]
        labels = [int(rng.choice(s)) for s in seqs]
        datas.append(ntp_data(E, seqs, labels))
        W0s.append(0.5 * rng.standard_normal((d, d)))
    eps = float(np.finfo(np.float64).eps)
    for method, lr in (("gd", None), ("ngd", 0.1), ("official", 0.1)):
        for start in (None, W0s):
            run = batched_attention_gd(
                datas, steps=2, record=(1, 2), method=method, lr=lr, W0=start
            )
            for b, data in enumerate(datas):
                model = ntp_attention(data)
                W = np.zeros((data.dim, data.dim)) if start is None else start[b]
                for k in (1, 2):
                    G = model.gradient(W)
                    if method == "gd":
                        W = W - G / smoothness_bound(data)
                    else:  # the official recipe normalises by ‖∇‖ + ε (its +ε in the log
                        # moves the gradient by ~1e-16 relative, below this test's 1e-10)
                        W = W - lr * G / (np.linalg.norm(G) + (eps if method == "official" else 0))
                    err = np.abs(run.W[k][b] - W).max()
                    assert err <= 1e-10 * max(1.0, np.abs(W).max()), (method, b, k, err)
