"""Unit tests of the margin losses (models/problems/losses.py): values against mpmath, derivatives
against autograd and finite differences, the log-space pieces (log(−ℓ'), the increment
ℓ(x − δ) − ℓ(x)) where float64 underflows, and name lookup."""

import mpmath as mp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.problems.losses import (
    CORRELATION,
    EXPONENTIAL,
    LOGISTIC,
    LOSSES,
    Loss,
    get_loss,
    square,
)

DTYPE = torch.float64
MONOTONE = [LOGISTIC, EXPONENTIAL, CORRELATION]
ALL = [*MONOTONE, square(1.0), square(0.25)]
IDS = [f"{loss.name}{getattr(loss, 'target', '')}" for loss in ALL]


def mp_value(loss: Loss, x):
    """ℓ(x) in mpmath (call inside a workdps block)."""
    x = mp.mpf(x)
    if loss.name == "logistic":
        return mp.log1p(mp.exp(-x))
    if loss.name == "exponential":
        return mp.exp(-x)
    if loss.name == "correlation":
        return -x
    return (mp.mpf(loss.target) - x) ** 2


def mp_neg_deriv(loss: Loss, x):
    """−ℓ'(x) in mpmath."""
    x = mp.mpf(x)
    if loss.name == "logistic":
        return 1 / (1 + mp.exp(x))
    if loss.name == "exponential":
        return mp.exp(-x)
    if loss.name == "correlation":
        return mp.mpf(1)
    return 2 * (mp.mpf(loss.target) - x)


def t(values) -> torch.Tensor:
    return torch.tensor(values, dtype=DTYPE)


# A grid that crosses every branch point of the implementations (softplus switches to the
# identity at its threshold; exp(−x) overflows below −709).
GRID = [-60.0, -37.5, -25.0, -20.5, -19.9, -3.0, -1e-3, 0.0, 1e-3, 0.7, 5.0, 20.5, 35.0, 80.0]


@pytest.mark.parametrize("loss", ALL, ids=IDS)
def test_value_matches_mpmath(loss):
    got = loss.value(t(GRID))
    with mp.workdps(50):
        for x, v in zip(GRID, got.tolist(), strict=True):
            ref = mp_value(loss, x)
            assert abs(v - ref) <= 4e-16 * abs(ref) + 1e-300, (loss.name, x, v, float(ref))


@pytest.mark.parametrize("loss", ALL, ids=IDS)
def test_deriv_matches_mpmath(loss):
    got = loss.deriv(t(GRID))
    with mp.workdps(50):
        for x, d in zip(GRID, got.tolist(), strict=True):
            ref = -mp_neg_deriv(loss, x)
            assert abs(d - ref) <= 4e-16 * abs(ref) + 1e-300, (loss.name, x, d, float(ref))


@pytest.mark.parametrize("loss", ALL, ids=IDS)
def test_deriv_matches_autograd(loss):
    gen = torch.Generator().manual_seed(1)
    x = torch.cat([t(GRID), 30 * (2 * torch.rand(64, generator=gen, dtype=DTYPE) - 1)])
    xr = x.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(loss.value(xr).sum(), xr)
    torch.testing.assert_close(loss.deriv(x), auto, rtol=1e-14, atol=1e-300)


@settings(max_examples=60, deadline=None)
@given(
    loss=st.sampled_from(ALL),
    x=st.floats(-30, 30, allow_nan=False, allow_infinity=False),
)
def test_deriv_matches_central_differences(loss, x):
    h = 1e-5 * (1 + abs(x))
    fd = (loss.value(t(x + h)) - loss.value(t(x - h))) / (2 * h)
    d = loss.deriv(t(x))
    scale = 1.0 + float(loss.value(t(x)).abs()) + float(d.abs())
    assert abs(float(fd - d)) <= 1e-7 * scale


# ------------------------------------------------------------------------------ log(−ℓ')


@settings(max_examples=60, deadline=None)
@given(
    loss=st.sampled_from(MONOTONE),
    x=st.floats(-30, 30, allow_nan=False, allow_infinity=False),
)
def test_log_neg_deriv_equals_log_of_neg_deriv_where_finite(loss, x):
    direct = torch.log(-loss.deriv(t(x)))
    got = loss.log_neg_deriv(t(x))
    assert torch.isfinite(direct)
    assert abs(float(got - direct)) <= 1e-14 * (1 + abs(float(direct)))


@pytest.mark.parametrize("loss", [LOGISTIC, EXPONENTIAL], ids=lambda x: x.name)
@pytest.mark.parametrize("x", [40.0, 100.0, 745.5, 800.0, 1e4])
def test_log_neg_deriv_finite_where_deriv_underflows(loss, x):
    """At x = 800 the logistic/exponential ℓ'(x) is 0 in float64, but log(−ℓ') is −800."""
    got = loss.log_neg_deriv(t([x]))
    assert torch.isfinite(got).all()
    if x >= 745.5:
        assert float(loss.deriv(t(x))) == 0.0  # the naive route really does fail here
    with mp.workdps(50):
        ref = mp.log(mp_neg_deriv(loss, x))
    assert abs(float(got) - ref) <= 4e-16 * abs(ref)


@pytest.mark.parametrize("loss", MONOTONE, ids=lambda x: x.name)
def test_log_neg_deriv_np_equals_the_torch_version(loss):
    """The numpy twin used by the hot path (gradient_log_np) agrees with the torch one, and
    stays finite where ℓ' underflows."""
    x = t([*GRID, 100.0, 745.5, 800.0, 1e4])
    got = loss.log_neg_deriv_np(x.numpy())
    assert isinstance(got, np.ndarray) and np.isfinite(got).all()
    np.testing.assert_allclose(got, loss.log_neg_deriv(x).numpy(), rtol=2e-16, atol=1e-300)


def test_log_neg_deriv_np_base_class_fallback():
    """A loss without a numpy twin (here the square loss where ℓ' < 0) goes through torch."""
    loss = square(2.0)
    x = np.array([-3.0, 0.0, 1.5])
    np.testing.assert_allclose(loss.log_neg_deriv_np(x), np.log(2 * (2.0 - x)), rtol=1e-15)


def test_log_neg_deriv_of_correlation_is_zero():
    assert torch.equal(CORRELATION.log_neg_deriv(t([-5.0, 0.0, 800.0])), torch.zeros(3))


# ------------------------------------------------------------------------------ increments


@pytest.mark.parametrize("loss", ALL, ids=IDS)
@pytest.mark.parametrize("delta", [1.5, 0.25, 1e-3])
def test_increment_equals_direct_difference_for_moderate_delta(loss, delta):
    xs = [-4.0, -0.5, 0.0, 0.3, 1.0, 6.0]
    x = t(xs)
    got = loss.increment(x, t(delta))
    direct = loss.value(x - delta) - loss.value(x)
    # The direct difference cancels: its own error is a few ulps of ℓ(x), plus the rounding
    # of x − δ (an ulp of x) times ℓ'.
    slack = 8e-16 * (loss.value(x).abs() + loss.value(x - delta).abs())
    slack += 2.3e-16 * (x.abs() + delta) * loss.deriv(x - delta).abs()
    assert torch.all((got - direct).abs() <= slack + 1e-15 * direct.abs())
    with mp.workdps(50):
        for xi, g in zip(xs, got.tolist(), strict=True):
            ref = mp_value(loss, mp.mpf(xi) - mp.mpf(delta)) - mp_value(loss, xi)
            assert abs(g - ref) <= 1e-14 * abs(ref), (loss.name, xi, delta, g, float(ref))


@pytest.mark.parametrize("loss", ALL, ids=IDS)
def test_increment_is_first_order_where_direct_difference_vanishes(loss):
    """δ = 1e-300: ℓ(x − δ) − ℓ(x) is 0 in float64, but the increment is −ℓ'(x)·δ.

    (x stays where −ℓ'(x)·1e-300 is a normal float, and away from 0, where x − δ ≠ x.)"""
    x = t([-3.0, -0.5, 0.4, 2.0, 5.0])
    delta = t(1e-300)
    direct = loss.value(x - delta) - loss.value(x)
    assert torch.all(direct == 0)
    got = loss.increment(x, delta)
    first_order = -loss.deriv(x) * delta
    assert torch.all(got > 0) or loss.name == "square"
    torch.testing.assert_close(got, first_order, rtol=1e-14, atol=0.0)


def test_increment_broadcasts_per_input_deltas():
    x = t([0.0, 1.0, 2.0])
    delta = t([1e-300, 0.5, 1e-20])
    for loss in ALL:
        got = loss.increment(x, delta)
        assert got.shape == x.shape and torch.isfinite(got).all()
        assert got[1] == pytest.approx(float(loss.value(t(0.5)) - loss.value(t(1.0))), rel=1e-13)


# ------------------------------------------------------------------------------ lookup


def test_get_loss_by_name_and_object():
    for name, loss in LOSSES.items():
        assert get_loss(name) is loss
        assert get_loss(loss) is loss
        assert loss.strictly_decreasing
    sq = get_loss("square")
    assert sq.name == "square" and sq.target == 1.0 and not sq.strictly_decreasing
    custom = square(0.5)
    assert get_loss(custom) is custom
    assert float(custom.value(t(0.5))) == 0.0


@pytest.mark.parametrize("bad", ["hinge", "Logistic", "", 3])
def test_get_loss_unknown_name_is_a_clear_error(bad):
    with pytest.raises(ValueError, match=r"unknown loss .*known: logistic, exponential"):
        get_loss(bad)
