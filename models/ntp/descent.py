"""Plain gradient descent for the NTP models, kept small: the engine's tracer (models/dynamics)
is where long runs belong; this serves unit tests and quick looks (spec ntp.md §2.5, §2.14)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

import numpy as np


def gradient_descent(
    gradient: Callable[[np.ndarray], np.ndarray],
    W0,
    eta: float,
    checkpoints: Iterable[int],
) -> dict[int, np.ndarray]:
    """W_{k+1} = W_k − η ∇L(W_k) from W0; the iterates at the given step counts (0 allowed)."""
    if not eta > 0:
        raise ValueError(f"eta: expected a positive step size, got {eta}")
    stops = sorted({int(k) for k in checkpoints})
    if not stops or stops[0] < 0:
        raise ValueError(f"checkpoints: expected non-negative step counts, got {stops}")
    W = np.array(W0, dtype=np.float64)
    out, k = {}, 0
    for stop in stops:
        while k < stop:
            W = W - eta * gradient(W)
            k += 1
        out[stop] = W.copy()
    return out
