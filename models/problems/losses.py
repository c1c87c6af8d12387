"""Losses ℓ(x) of the margin x = y·f(X), in float64, with the pieces the engine needs in log space.

Assumption A of 2306.13596 asks ℓ to be strictly decreasing with a bounded, Lipschitz ℓ'. The
logistic, exponential and correlation losses meet it; the square loss does not (it is the
negative control F9 of spec maxmargin §5).

Besides ℓ and ℓ', each loss gives:
- ``log_neg_deriv(x)``: log(−ℓ'(x)), finite even where −ℓ'(x) underflows (joint (v, p) training
  drives margins to hundreds, where the logistic ℓ' is below 1e-300);
- ``increment(x, delta)``: ℓ(x − δ) − ℓ(x) without cancellation, which is what a loss *gap*
  L(p) − L* is made of once the softmax saturates (δ ≈ e^{−1000} is common).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from models.flows import kernels

Tensor = torch.Tensor


@dataclass(frozen=True)
class Loss:
    """A margin loss. ``name`` is what instance files and reports use."""

    name: str
    strictly_decreasing: bool

    #: The loss's code in the compiled hot path (models/flows/kernels.py); None: not compiled, the
    #: engine then takes ℓ' from ``deriv`` (slower, same result).
    kernel_code: ClassVar[int | None] = None

    @property
    def kernel_param(self) -> float:
        """The compiled path's one parameter (the square loss's target; 0 otherwise)."""
        return 0.0

    def value(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def deriv(self, x: Tensor) -> Tensor:
        raise NotImplementedError

    def log_neg_deriv(self, x: Tensor) -> Tensor:
        """log(−ℓ'(x)); only defined where ℓ' < 0."""
        return torch.log(-self.deriv(x))

    def log_neg_deriv_np(self, x: np.ndarray) -> np.ndarray:
        """The same on numpy arrays, for the engine's hot path (no torch round trip)."""
        return self.log_neg_deriv(torch.from_numpy(np.asarray(x, dtype=np.float64))).numpy()

    def increment(self, x: Tensor, delta: Tensor) -> Tensor:
        """ℓ(x − δ) − ℓ(x), accurate for tiny δ."""
        return self.value(x - delta) - self.value(x)


# softplus(z) = log(1 + e^z) returns z itself above its threshold; at torch's default (20)
# that drops e^{-z} ≈ 2e-9 (relative error up to 1e-10). Above 40, e^{-z}/z < 1e-19: exact.
_SOFTPLUS_EXACT = 40.0


class _Logistic(Loss):
    kernel_code = kernels.LOGISTIC

    def value(self, x):
        return F.softplus(-x, threshold=_SOFTPLUS_EXACT)

    def deriv(self, x):
        return -torch.sigmoid(-x)

    def log_neg_deriv(self, x):
        # log σ(−x) = −softplus(x). Not F.logsigmoid: its CPU kernel parallelises with grain
        # size 1, so on the engine's tiny tensors every call wakes the intra-op thread pool.
        return -F.softplus(x, threshold=_SOFTPLUS_EXACT)

    def log_neg_deriv_np(self, x):
        return _compiled_log_neg_deriv(self, x)  # −softplus(x), exact for every x

    def increment(self, x, delta):
        # log((1 + e^{δ−x}) / (1 + e^{−x})) = log1p(σ(−x)·expm1(δ))
        return torch.log1p(torch.sigmoid(-x) * torch.expm1(delta))


class _Exponential(Loss):
    kernel_code = kernels.EXPONENTIAL

    def value(self, x):
        return torch.exp(-x)

    def deriv(self, x):
        return -torch.exp(-x)

    def log_neg_deriv(self, x):
        return -x

    def log_neg_deriv_np(self, x):
        return _compiled_log_neg_deriv(self, x)

    def increment(self, x, delta):
        return torch.exp(-x) * torch.expm1(delta)


class _Correlation(Loss):
    kernel_code = kernels.CORRELATION

    def value(self, x):
        return -x

    def deriv(self, x):
        return -torch.ones_like(x)

    def log_neg_deriv(self, x):
        return torch.zeros_like(x)

    def log_neg_deriv_np(self, x):
        return _compiled_log_neg_deriv(self, x)

    def increment(self, x, delta):
        return delta.expand_as(x) if delta.dim() < x.dim() else delta + 0 * x


@dataclass(frozen=True)
class _Square(Loss):
    """(target − x)²: not monotone, so its minimizer can be finite (control F9)."""

    target: float = 1.0
    kernel_code = kernels.SQUARE

    @property
    def kernel_param(self) -> float:
        return self.target

    def value(self, x):
        return (self.target - x) ** 2

    def deriv(self, x):
        return -2.0 * (self.target - x)

    def increment(self, x, delta):
        return delta * (2.0 * (self.target - x) + delta)


class _NegLog(Loss):
    """−log x for x > 0: the NTP loss of 2403.08081, −log p̂_y with p̂_y = Σ_t s_t·1[tok_t = y],
    as a margin loss of the prompt problem whose scores are the label indicators
    (``models.ntp.flow``). Not offered by name: the margin must stay positive, which only
    scores in [0, 1] with a label in every input guarantee."""

    kernel_code = kernels.NEG_LOG

    def value(self, x):
        return -torch.log(x)

    def deriv(self, x):
        return -1.0 / x

    def log_neg_deriv(self, x):
        return -torch.log(x)

    def log_neg_deriv_np(self, x):
        return _compiled_log_neg_deriv(self, x)

    def increment(self, x, delta):
        return -torch.log1p(-delta / x)


def _compiled_log_neg_deriv(loss: Loss, x) -> np.ndarray:
    """log(−ℓ'(x)) by the compiled kernel the engine uses (one implementation for numpy and
    the hot path; the torch ``log_neg_deriv`` is the independent reference)."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    out = np.empty_like(x)
    kernels.loss_log_neg_deriv(loss.kernel_code, x.reshape(-1), out.reshape(-1))
    return out


LOGISTIC = _Logistic("logistic", True)
EXPONENTIAL = _Exponential("exponential", True)
CORRELATION = _Correlation("correlation", True)
NEG_LOG = _NegLog("neg-log", True)

LOSSES = {loss.name: loss for loss in (LOGISTIC, EXPONENTIAL, CORRELATION)}


def square(target: float = 1.0) -> Loss:
    """The square loss (target − x)², a control: it violates Assumption A."""
    return _Square("square", False, float(target))


def get_loss(loss: str | Loss) -> Loss:
    """A loss by name (logistic, exponential, correlation, square) or the object itself."""
    if isinstance(loss, Loss):
        return loss
    if loss == "square":
        return square()
    try:
        return LOSSES[loss]
    except KeyError:
        known = ", ".join([*LOSSES, "square"])
        raise ValueError(f"unknown loss {loss!r}; known: {known}") from None
