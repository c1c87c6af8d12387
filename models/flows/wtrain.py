"""Training the key-query matrix W with p fixed: "GD on p, or equivalently W" (spec §2.8).

The logits are x_itᵀ W p = x_itᵀ q with q := W p, so L(W) = L_prompt(Wp) for the prompt problem
with keys x_it (W = I) and scores y_i vᵀx_it. Hence ∂L/∂W = g(Wp) pᵀ, rank one, with g the
prompt problem's p-gradient; W(t) = W(0) + u(t) pᵀ; and under Frobenius-normalised GD,
q(t) = W(t)p follows normalised GD on the prompt problem with step lr·‖p‖. The W-SVM has the
closed form W^mm = q^mm pᵀ/‖p‖² (q^mm = ATT-SVM on keys x_it), so W(t)/‖W(t)‖_F tends to a rank-one
matrix (F13: "W converges to a full-rank matrix" is false).

Everything here reuses ``PromptProblem``: the loss, and the log-space gradient whose direction is
exact at any ‖W‖ (the normalised step never underflows).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from models.flows.regpath import one_thread
from models.oracles.selection import global_opt
from models.oracles.svm import SVMSolution, w_svm
from models.problems.attention import DTYPE, PromptProblem, as_float_tensor
from models.problems.cross import (
    correlation,  # ⟨W, W_ref⟩/(‖W‖_F‖W_ref‖_F), the companion code's metric
)

Tensor = torch.Tensor


class WProblem:
    """Data X (n, T, d), labels y, head v and prompt p fixed; W (d, d) is trained."""

    def __init__(self, X, y, v, p, loss="logistic"):
        self.X = as_float_tensor(X, "X", 3)
        self.p = as_float_tensor(p, "p", 1)
        if self.p.shape[0] != self.X.shape[2]:
            raise ValueError(f"p: expected dimension {self.X.shape[2]}, got {self.p.shape[0]}")
        if float(torch.linalg.vector_norm(self.p)) == 0.0:
            raise ValueError("p: must be nonzero (every W-gradient is g pᵀ)")
        self.prompt = PromptProblem.from_data(self.X, y, v, loss=loss)
        self._p_np = self.p.numpy()

    @property
    def d(self) -> int:
        return self.X.shape[2]

    def loss_value(self, W: Tensor) -> Tensor:
        """L(W) = L_prompt(W p); differentiable in W by autograd."""
        return self.prompt.loss_value(as_float_tensor(W, "W", 2) @ self.p)

    def gradient_log(self, W) -> tuple[float, np.ndarray]:
        """∂L/∂W = e^{log_scale}·M with M = g pᵀ (rank one), g the prompt gradient at q = Wp."""
        q = as_float_tensor(W, "W", 2).detach().numpy() @ self._p_np
        log_scale, g = self.prompt.gradient_log_np(q)
        return log_scale, np.outer(g, self._p_np)

    def gradient(self, W) -> Tensor:
        """∂L/∂W as a plain tensor (underflows to 0 once the softmax saturates)."""
        log_scale, M = self.gradient_log(W)
        return torch.as_tensor(M * (0.0 if log_scale == -math.inf else math.exp(log_scale)))

    def opt_tokens(self) -> np.ndarray:
        """The top-score token of each input (γ_it = y_i vᵀx_it)."""
        return global_opt(self.prompt.scores)

    def w_mm(self, alpha=None) -> SVMSolution:
        """The W-SVM of α (default: the top-score tokens), solved as a QP in vec(W)."""
        return w_svm(self.X, self.p, self.opt_tokens() if alpha is None else alpha)


def singular_ratio(W) -> float:
    """σ₂/σ₁ of W: 0 for a rank-one matrix."""
    s = torch.linalg.svdvals(torch.as_tensor(W, dtype=DTYPE))
    return float(s[1] / s[0]) if s.numel() > 1 and s[0] > 0 else 0.0


@dataclass
class WTrajectory:
    """Recorded iterates of W-NGD, with the metrics of spec §2.8 against ``W_mm``."""

    steps: np.ndarray
    Ws: Tensor
    losses: np.ndarray
    correlation: np.ndarray
    sigma_ratio: np.ndarray
    W_mm: SVMSolution
    stop: str
    seconds: float

    @property
    def W(self) -> Tensor:
        return self.Ws[-1]


@one_thread
def w_ngd(
    problem: WProblem,
    W0,
    *,
    lr: float = 0.1,
    steps: int = 1000,
    record_every: int = 1,
    alpha=None,
) -> WTrajectory:
    """W ← W − lr·G/‖G‖_F with G = ∂L/∂W, its direction g pᵀ/(‖g‖‖p‖) taken in log space.

    Metrics are against W^mm = W-SVM(α), α the top-score tokens unless given.
    """
    t0 = time.perf_counter()
    W = as_float_tensor(W0, "W0", 2).detach().numpy().copy()
    if W.shape != (problem.d, problem.d):
        raise ValueError(f"W0: expected shape {(problem.d, problem.d)}, got {W.shape}")
    ks, Ws, stop = [0], [W.copy()], "step budget"
    for k in range(1, steps + 1):
        log_scale, M = problem.gradient_log(W)
        if log_scale == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            break
        W = W - lr * M / np.linalg.norm(M)
        if k % record_every == 0 or k == steps:
            ks.append(k)
            Ws.append(W.copy())
    W_stack = torch.as_tensor(np.stack(Ws), dtype=DTYPE)
    W_mm = problem.w_mm(alpha)
    with torch.no_grad():
        losses = problem.prompt.loss_path(W_stack @ problem.p).numpy()
    ref = W_mm.x if W_mm.x is not None else np.full((problem.d, problem.d), np.nan)
    return WTrajectory(
        steps=np.asarray(ks),
        Ws=W_stack,
        losses=losses,
        correlation=np.array([correlation(W_k, ref) for W_k in W_stack]),
        sigma_ratio=np.array([singular_ratio(W_k) for W_k in W_stack]),
        W_mm=W_mm,
        stop=stop,
        seconds=time.perf_counter() - t0,
    )


def w_gd(problem: WProblem, W0, *, eta: float, steps: int) -> Tensor:
    """Plain GD on W with p fixed, W ← W − η·∂L/∂W, for ``steps`` steps: the iterates
    (steps + 1, d, d).

    The gradient is torch autograd of L(W) = L_prompt(W p), not the closed form g pᵀ of
    ``gradient_log``, so this run is independent of the rank-one formula it is compared with
    (spec §2.8: q(t) = W(t)p is plain GD on the prompt problem with step η‖p‖²). Plain float64:
    meant for finite horizons, before the softmax saturates.
    """
    W = as_float_tensor(W0, "W0", 2).detach().clone()
    if W.shape != (problem.d, problem.d):
        raise ValueError(f"W0: expected shape {(problem.d, problem.d)}, got {tuple(W.shape)}")
    Ws = [W.clone()]
    for _ in range(steps):
        Wg = W.clone().requires_grad_(True)
        (G,) = torch.autograd.grad(problem.loss_value(Wg), Wg)
        W = W - eta * G
        Ws.append(W.clone())
    return torch.stack(Ws)
