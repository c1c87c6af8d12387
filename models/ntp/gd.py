"""Plain gradient descent on an NTP loss (spec ntp.md §2.5, §2.14): W ← W − η ∇L(W), for any
model with ``gradient(W)`` (``models.ntp.attention.NTPAttention``,
``models.ntp.linear.LinearNTP``).

The theory's step is constant (η ≤ 1/L for the attention model, η = 0.5 in the experiments of
2402.18551), so there is no line search and no normalisation: normalised GD cannot settle the
finite part (spec §2.10, control C10). Along the run ‖W‖ grows like log k, so a step is never
close to saturating float64 within the 1e5 steps the spec runs (log off-mass stays above −20,
§6.4); the gradient itself comes from the model's log-space form.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GDRun:
    """``iterates[k]``: W after k steps, for every k in the run's ``record`` and its last step;
    ``stopped``: why it ended early ("" when it ran every step)."""

    iterates: dict[int, np.ndarray]
    steps: int
    lr: float
    stopped: str
    seconds: float

    @property
    def last(self) -> np.ndarray:
        return self.iterates[self.steps]


def gd(model, W0, *, lr: float, steps: int, record: Iterable[int] = ()) -> GDRun:
    """``steps`` GD steps of size ``lr`` from W0; a non-finite gradient ends the run early
    (recorded in ``stopped``; the iterates kept are the finite ones)."""
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: expected a finite step > 0, got {lr!r}")
    if steps < 0:
        raise ValueError(f"steps: expected ≥ 0, got {steps}")
    t0 = time.perf_counter()
    W = np.array(W0, dtype=np.float64, copy=True)
    want = {int(k) for k in record if 0 <= int(k) <= steps}
    iterates = {0: W.copy()} if 0 in want else {}
    stopped = ""
    k = 0
    for k in range(1, steps + 1):
        G = model.gradient(W)
        if not np.isfinite(G).all():
            stopped, k = f"non-finite gradient at step {k}", k - 1
            break
        W = W - lr * G
        if k in want:
            iterates[k] = W.copy()
    iterates[k] = W.copy()
    return GDRun(iterates, k, float(lr), stopped, time.perf_counter() - t0)
