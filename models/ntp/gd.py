"""Gradient descent on an NTP loss (spec ntp.md §2.5, §2.14): W ← W − η ∇L(W), for any
model with ``gradient(W)`` (``models.ntp.attention.NTPAttention``,
``models.ntp.linear.LinearNTP``).

The theory's step is constant (η ≤ 1/L for the attention model, η = 0.5 in the experiments of
2402.18551), so there is no line search and no normalisation: normalised GD cannot settle the
finite part (spec §2.10, control C10). Along the run ‖W‖ grows like log k, so a step is never
close to saturating float64 within the 1e5 steps the spec runs (log off-mass stays above −20,
§6.4); the gradient itself comes from the model's log-space form.

``batched_linear_gd`` runs many linear problems at once (the claims of 2402.18551 share one
such run of 1e5 steps: 100 µs a step one problem at a time would cost 10 s per problem).
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


@dataclass(frozen=True)
class BatchRun:
    """``iterates[k][b]``: W of case b after k steps (its own V×d shape)."""

    iterates: dict[int, tuple[np.ndarray, ...]]
    finite: bool


def batched_linear_gd(
    problems, W0s, *, eta: float, steps: int, record, normalized: bool = False
) -> BatchRun:
    """GD with step eta on every linear NTP problem (``models.ntp.linear.LinearNTP``) at once,
    iterates recorded at the steps in ``record``; ``normalized``: NGD, each problem's step
    eta·G/‖G‖_F (no + ε).

    Problems of different sizes are zero-padded to one (B, V, d, m) shape: a padded context
    has π̂ = 0 (no term), a padded embedding coordinate is 0 in every h̄_j (its column of W
    never moves from 0), a padded token has logit −∞ (probability 0, its row of W never
    moves). The gradient is `LinearNTP.gradient`'s log-space form, vectorised:
    Σ_j π̂_j (q_j − p̂_j) h̄_jᵀ with q_z − p̂_z = (q^S_z − p̂_z) − q^S_z ε_j on S_j and q_z off
    it (never 1 − a number near 1); tests/test_ntp_linear.py checks one step of it against
    `LinearNTP.gradient`."""
    B = len(problems)
    V = max(p.vocab for p in problems)
    d = max(p.dim for p in problems)
    m = max(p.m for p in problems)
    H = np.zeros((B, d, m))
    P = np.zeros((B, m, V))
    pi = np.zeros((B, m))
    supp = np.zeros((B, m, V), dtype=bool)
    real = np.zeros((B, m, V), dtype=bool)
    W = np.zeros((B, V, d))
    for b, (p, W0) in enumerate(zip(problems, W0s, strict=True)):
        H[b, : p.dim, : p.m] = p.H
        P[b, : p.m, : p.vocab] = p.P
        pi[b, : p.m] = p.pi
        supp[b, : p.m, : p.vocab] = p.support
        supp[b, p.m :, 0] = True  # padded contexts: weight 0, any valid support
        real[b, :, : p.vocab] = True
        W[b, : p.vocab, : p.dim] = W0
    on_f = supp.astype(float)
    off_f = (real & ~supp).astype(float)
    # the shift of each context's logits: its anchor token (the first of S_j), picked by a
    # one-hot product; in-support logit gaps stay O(1) along GD and off-support ones go to −∞
    # slowly (≥ −20 at 1e5 steps, spec §6.4), so e^{ℓ − ℓ_anchor} neither overflows nor loses
    # the support; the off-support terms are exact however small.
    anchor = np.zeros((B, m, V))
    for b in range(B):
        anchor[b, np.arange(m), supp[b].argmax(axis=1)] = 1.0
    ones = np.ones((V, 1))
    Ht = np.ascontiguousarray(np.swapaxes(H, 1, 2))  # (B, m, d)
    piP = pi[:, :, None]
    Wt = np.ascontiguousarray(np.swapaxes(W, 1, 2))  # (B, d, V): the state
    want = set(record)
    iterates = {}
    finite = True
    for k in range(1, steps + 1):
        logits = Ht @ Wt  # (B, m, V)
        e = np.exp(logits - (logits * anchor) @ ones)
        eon = e * on_f
        eoff = e * off_f
        son = eon @ ones
        soff = eoff @ ones
        total = son + soff
        qS = eon / son
        # on S_j: (q^S − p̂) − q^S·ε with ε = off/total; off S_j: q_v = e_v/total
        coef = (qS - P) - qS * (soff / total) + eoff / total
        G = H @ (coef * piP)
        if normalized:
            G /= np.sqrt((G * G).sum(axis=(1, 2), keepdims=True))
        Wt -= eta * G
        if k in want:
            if not np.isfinite(Wt).all():
                finite = False
                break
            iterates[k] = tuple(Wt[b, : p.dim, : p.vocab].T.copy() for b, p in enumerate(problems))
    return BatchRun(iterates, finite)
