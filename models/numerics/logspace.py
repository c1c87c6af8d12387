"""Log-space arithmetic for gradients whose size underflows float64 long before their direction.

Once ‖p‖ is large the attention gradient is a sum of terms e^{−(margin)·‖p‖}·(key difference):
its magnitude can be 1e-5000 while its direction is perfectly well defined. We keep every
coefficient as (log|w|, sign w), combine with a signed log-sum-exp, and rescale by the largest
term before anything is exponentiated. Norms are taken after rescaling (never sqrt(Σg²) of
underflowing entries), and no ``+ eps`` ever enters a normalisation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

Tensor = torch.Tensor
NEG_INF = float("-inf")


@dataclass(frozen=True)
class ScaledVector:
    """The vector exp(log_scale)·vec with max|vec| = 1 (or vec = 0 and log_scale = −inf)."""

    log_scale: float
    vec: Tensor

    @property
    def is_zero(self) -> bool:
        return self.log_scale == NEG_INF

    def value(self) -> Tensor:
        """The vector itself; may underflow to zero, which is exactly what log space avoids."""
        if self.is_zero:
            return torch.zeros_like(self.vec)
        return self.vec * math.exp(self.log_scale) if self.log_scale < 709 else self.vec * math.inf

    def log_norm(self) -> float:
        if self.is_zero:
            return NEG_INF
        return self.log_scale + math.log(float(torch.linalg.vector_norm(self.vec)))

    def direction(self) -> Tensor:
        """The unit vector along it (zeros for the zero vector)."""
        if self.is_zero:
            return torch.zeros_like(self.vec)
        return self.vec / torch.linalg.vector_norm(self.vec)


def signed_logsumexp_np(log_abs: np.ndarray, sign: np.ndarray, axis: int = -1):
    """log|Σ sign·e^{log_abs}| and its sign along ``axis``; (−inf, 0) where the sum is zero."""
    m = np.max(log_abs, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0.0)
    total = np.sum(sign * np.exp(log_abs - m), axis=axis, keepdims=True)
    with np.errstate(divide="ignore"):
        out = np.log(np.abs(total)) + m
    return np.squeeze(out, axis), np.squeeze(np.sign(total), axis)


def combine_np(
    log_abs: np.ndarray, sign: np.ndarray, vectors: np.ndarray
) -> tuple[float, np.ndarray]:
    """Σ_j sign_j·e^{log_abs_j}·vectors_j as (log_scale, vec) with max|vec| = 1.

    ``log_abs`` and ``sign`` have shape (m,), ``vectors`` (m, d). Terms are rescaled by the
    largest coefficient first, so the sum is exact up to rounding however small it is. The
    zero vector is (−inf, zeros).
    """
    d = vectors.shape[-1]
    live = sign != 0
    if not live.any():
        return NEG_INF, np.zeros(d)
    top = float(np.max(log_abs[live]))
    if top == NEG_INF:
        return NEG_INF, np.zeros(d)
    weights = np.where(live, sign * np.exp(np.where(live, log_abs, top) - top), 0.0)
    vec = weights @ vectors
    peak = float(np.max(np.abs(vec)))
    if peak == 0.0:
        return NEG_INF, np.zeros(d)
    return top + math.log(peak), vec / peak
