"""The nonlinear-head model f(X) = ψ(Xᵀ softmax(XWp)) of spec maxmargin §2.6 (Theorem NL).

With a nonlinear ψ: R^d → R the margin Y_i ψ(u_i) of the attended mixture u_i = X_iᵀ s_i is no
longer an average of per-token scores, so there is no PromptProblem (keys, scores) reduction.
The recalled conclusion: when selecting one token strictly beats every attention mixture (e.g.
Y_i ψ strictly convex along the simplex, with a unique best token), p_R/R converges to the
ATT-SVM direction of the *ψ-optimal* tokens argmax_t Y_i ψ(x_it). A concave ψ (control F10) has a
mixture better than every vertex, and p_R stays bounded.

Float64 flatness (spec §2.6): the loss gap to the floor, ℓ(Y ψ(u)) − ℓ(Y ψ(x_opt)), cannot be
formed in log space for a general ψ (ψ(x_opt + small) − ψ(x_opt) cancels), so
``models.flows.regpath`` minimises the plain loss for a general head. Once the attention leak
e^{−R·margin} falls below ~1e-16 of the margin, the loss is constant in float64 and grid
searches come back uncertified: keep R ≲ 20 at margin ~1. For the quadratic heads of this module
(``quadratic_form``) the gap is exact in log space: with u = x_opt + δ, ψ(u) − ψ(x_opt) =
2 x_optᵀQδ + δᵀQδ, and δ = Σ_t s_t (x_t − x_opt) is a signed sum of softmax weights.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from models.problems.attention import DTYPE, TokenSizes, as_float_tensor
from models.problems.losses import Loss, get_loss

Tensor = torch.Tensor


def squared_norm(u: Tensor) -> Tensor:
    """ψ(u) = ‖u‖²: strictly convex, so a single token beats every mixture (Jensen)."""
    return (u**2).sum(-1)


def saddle_square(u: Tensor) -> Tensor:
    """ψ(u) = u₁² − u₂²: convex along the first axis, concave along the second, so Y ψ is
    strictly convex along a simplex whose tokens differ only in u₁ (Y = +1) or only in u₂
    (Y = −1): a head under which labels of both signs meet Theorem NL's vertex condition."""
    return u[..., 0] ** 2 - u[..., 1] ** 2


def concave_bump(u: Tensor) -> Tensor:
    """ψ(u) = 2 − ‖u‖²: the concave control F10, maximised by a mixture near 0."""
    return 2.0 - (u**2).sum(-1)


def small_mlp(d: int, hidden: int = 8, seed: int = 0) -> Callable[[Tensor], Tensor]:
    """A fixed, seeded tanh MLP R^d → R in float64 (frozen: its parameters need no grad)."""
    gen = torch.Generator().manual_seed(seed)
    W1 = torch.randn(hidden, d, generator=gen, dtype=DTYPE)
    b1 = torch.randn(hidden, generator=gen, dtype=DTYPE)
    w2 = torch.randn(hidden, generator=gen, dtype=DTYPE) / hidden**0.5
    return lambda u: torch.tanh(u @ W1.T + b1) @ w2


def quadratic_form(psi, d: int) -> Tensor | None:
    """The diagonal of Q when ψ(u) = uᵀ diag(Q) u + const is one of this module's quadratic heads
    (else None). For these the loss gap to a selection's floor has a cancellation-free form
    (``models.flows.regpath.head_log_gap_batch``), so the regularization path is resolved far beyond
    the plain loss's float64 flatness."""
    if psi is squared_norm:
        return torch.ones(d, dtype=DTYPE)
    if psi is concave_bump:
        return -torch.ones(d, dtype=DTYPE)
    if psi is saddle_square and d >= 2:
        return torch.cat([torch.tensor([1.0, -1.0], dtype=DTYPE), torch.zeros(d - 2, dtype=DTYPE)])
    return None


class NonlinearHeadProblem(TokenSizes):
    """f(X) = ψ(Xᵀ softmax(XWp)) with ψ, X, y, W fixed and p trained.

    ``psi`` maps (..., d) → (...) (a trailing axis of size 1 is squeezed), is differentiable by
    torch autograd, and must accept batches: the regularization-path grids evaluate thousands
    of p at once. ``keys`` = XW, so the logit of token t is k_tᵀp, as for the linear head.
    """

    def __init__(
        self, X, y, W=None, psi: Callable[[Tensor], Tensor] = squared_norm, loss="logistic"
    ):
        self.X = as_float_tensor(X, "X", 3)
        self.y = as_float_tensor(y, "y", 1)
        n, _, d = self.X.shape
        if self.y.shape[0] != n or not torch.all((self.y == 1) | (self.y == -1)):
            raise ValueError(f"y: expected {n} labels in {{-1, +1}}")
        W = torch.eye(d, dtype=DTYPE) if W is None else as_float_tensor(W, "W", 2)
        if W.shape[0] != d:
            raise ValueError(f"W: expected {d} rows, got shape {tuple(W.shape)}")
        self.W = W
        self.keys = self.X @ W
        self.psi = psi
        self.loss: Loss = get_loss(loss)

    # ---- sizes (n, T, d: TokenSizes) ------------------------------------------------------
    @property
    def dim(self) -> int:
        return self.keys.shape[2]

    # ---- the model -------------------------------------------------------------------------
    def psi_of(self, U: Tensor) -> Tensor:
        """ψ on the last axis of U, with a trailing singleton output axis squeezed."""
        out = self.psi(U)
        if out.dim() == U.dim() and out.shape[-1] == 1:
            out = out[..., 0]
        if out.shape != U.shape[:-1]:
            raise ValueError(f"psi: expected output shape {tuple(U.shape[:-1])}, got {out.shape}")
        return out

    def token_scores(self) -> Tensor:
        """Y_i ψ(x_it) (n, T): what a one-hot attention on token t would achieve."""
        return self.y[:, None] * self.psi_of(self.X)

    def quadratic_form(self) -> Tensor | None:
        """diag(Q) for a quadratic head ψ(u) = uᵀQu + const, else None (``quadratic_form``)."""
        return quadratic_form(self.psi, self.X.shape[2])

    def psi_optimal_tokens(self) -> np.ndarray:
        """argmax_t Y_i ψ(x_it) per input: the selection Theorem NL points to (spec §2.6)."""
        with torch.no_grad():
            return torch.argmax(self.token_scores(), dim=-1).numpy()

    def softmax_path(self, P: Tensor) -> Tensor:
        """softmax(K_i p) for each row p of P (k, dim): shape (k, n, T)."""
        return torch.softmax(torch.einsum("itd,kd->kit", self.keys, P), dim=-1)

    def margins_path(self, P: Tensor) -> Tensor:
        """Y_i ψ(X_iᵀ s_i) for each row of P: shape (k, n)."""
        mixtures = torch.einsum("kit,itd->kid", self.softmax_path(P), self.X)
        return self.y * self.psi_of(mixtures)

    def loss_path(self, P: Tensor) -> Tensor:
        """L at each row of P (k, dim), vectorised and differentiable (the grids use this)."""
        return self.loss.value(self.margins_path(P)).mean(-1)

    def loss_value(self, p: Tensor) -> Tensor:
        """L(p) = (1/n) Σ_i ℓ(Y_i ψ(X_iᵀ softmax(K_i p))); differentiable by autograd."""
        return self.loss_path(as_float_tensor(p, "p", 1)[None])[0]
