"""The high-precision gradient (models.numerics.highprec): it agrees with autograd where float64 is
accurate, and decides where autograd of the plain loss loses its digits near saturation."""

import pytest
import torch

from models.numerics.highprec import gradient_error, loss_gradient
from models.problems.attention import PromptProblem
from models.problems.losses import get_loss


def _problem(loss="logistic"):
    gen = torch.Generator().manual_seed(3)
    keys = torch.randn(3, 4, 3, generator=gen, dtype=torch.float64)
    scores = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    return PromptProblem(keys, scores, get_loss(loss))


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_agrees_with_autograd_where_float64_is_accurate(loss):
    problem = _problem(loss)
    p = torch.tensor([0.3, -0.7, 0.2], dtype=torch.float64, requires_grad=True)
    (auto,) = torch.autograd.grad(problem.loss_value(p), p)
    high = loss_gradient(problem, p.detach())
    assert torch.allclose(high, auto, rtol=1e-12, atol=0)


def test_decides_for_the_engine_where_autograd_cancels():
    """MM-DEF-GRADIENT's seed-7 instance of ci-random (n = 1, T = 2): the gradient is ~1e-9,
    autograd is off by 2e-9 relative, the engine's log-space gradient by rounding only."""
    keys = torch.tensor([[[1.5409961082440433, -0.2934289057609464, -2.1787893820745574,
                           0.5684312772806678, 0.0],
                          [-1.084522342424021, -1.3985953953708767, 0.4033468476292993,
                           0.8380263329976598, 0.0]]], dtype=torch.float64)  # fmt: skip
    scores = torch.tensor([[-0.4235282157276996, -0.09426230223777154]], dtype=torch.float64)
    problem = PromptProblem(keys, scores, get_loss("logistic"))
    p = torch.tensor([-0.3071, -8.0832, 3.5887, -0.1041, -2.5397], dtype=torch.float64)
    q = p.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(problem.loss_value(q), q)
    high = loss_gradient(problem, p)
    engine = problem.gradient_scaled(p).value()
    rel = lambda a: float((a - high).norm() / high.norm())  # noqa: E731
    assert rel(engine) < 1e-13 < 1e-10 < rel(auto)
    # gradient_error consults the 50-digit gradient only where the two disagree: here it
    # finds the engine right; taken against autograd alone it would not.
    error, scale = gradient_error(problem, p, engine, auto, 1e-10)
    assert error / scale == pytest.approx(rel(engine), rel=1e-6, abs=1e-18)
    error, scale = gradient_error(problem, p, engine, auto, 1e-6)  # they agree to 1e-6
    assert error / scale == pytest.approx(float((engine - auto).norm() / auto.norm()))


def test_an_unknown_loss_is_a_clear_error():
    problem = _problem()
    object.__setattr__(problem, "loss", type("L", (), {"name": "hinge"})())
    with pytest.raises(ValueError, match="no high-precision form of the loss 'hinge'"):
        loss_gradient(problem, torch.zeros(3, dtype=torch.float64))
