"""Cross-attention with a trained key-query matrix: the model of *Transformers as Support Vector
Machines* (arXiv 2308.16898, spec tfsvm §1) and of ℓp mirror descent (arXiv 2410.14581).

Input i has tokens X_i (T, d), a query z_i, a label Y_i and a fixed head v; its output is
f_i(W) = vᵀ X_iᵀ S(X_i W z_i). The logit a_it = x_itᵀ W z_i = ⟨x_it z_iᵀ, W⟩ is linear in W,
so with the row-major vectorisation w = vec(W) and the keys k_it := vec(x_it z_iᵀ) ∈ R^{d²} the
model IS the prompt model of 2306.13596 with p = w (spec tfsvm §1.4 "Vectorisation"). Hence:

- ``CrossProblem.prompt`` is a ``PromptProblem``: its compiled log-space gradient, its flow
  tracer (``models.flows.dynamics.converge``), NGD and GD are the W-dynamics, with no second copy of
  the mathematics; ∇L(W) = mat(∇_p L(vec W)).
- ATT-SVM on those keys is the Frobenius attention SVM W^mm (``models.oracles.normsvm``).

What is new here is what does not reduce to a vector p: the (K, Q) factorisation W = KQᵀ with
each factor's step normalised separately (and the official λ(‖K‖² + ‖Q‖²) penalty), ℓp mirror
descent on the dual variable sign(W)|W|^{p−1}, the Polyak step, and ``naive_output``: the model
written the way the official code writes it (no vectorisation), the independent reference the
vectorised model is tested against.

Every direction is taken from the log-space gradient (∇L = e^M·G̃ with G̃ of order one), so no
normalisation divides by ``‖∇L‖ + ε`` and no step freezes once the softmax saturates (spec §6).
"""

from __future__ import annotations

import math
import numbers
import time
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from models.oracles.selection import global_opt
from models.problems.attention import DTYPE, PromptProblem, TokenSizes, as_float_tensor

Tensor = torch.Tensor

#: float64 machine epsilon: the λ of the official (K, Q) penalty λ(‖K‖²_F + ‖Q‖²_F) (spec §4).
MACHINE_EPS = float(np.finfo(np.float64).eps)


def _array(x, name: str, ndim: int) -> np.ndarray:
    return as_float_tensor(x, name, ndim).detach().cpu().numpy().astype(np.float64, copy=True)


class CrossProblem(TokenSizes):
    """Tokens X (n, T, d), queries Z (n, d), labels y (n,) in ±1, fixed head v (d,), a loss."""

    def __init__(self, X, Z, y, v, loss="logistic"):
        X = as_float_tensor(X, "X", 3)
        Z = as_float_tensor(Z, "Z", 2)
        n, T, d = X.shape
        if Z.shape != (n, d):
            raise ValueError(f"Z: expected shape {(n, d)} (one per input), got {tuple(Z.shape)}")
        # from_data checks y and v; the keys are then replaced by the vectorised outer products.
        base = PromptProblem.from_data(X, y, v, loss=loss)
        keys = (X[:, :, :, None] * Z[:, None, None, :]).reshape(n, T, d * d)
        self.X, self.Z = X, Z
        self.y = as_float_tensor(y, "y", 1)
        self.v = as_float_tensor(v, "v", 1)
        self.prompt = PromptProblem(keys=keys, scores=base.scores, loss=base.loss)

    # ---- the data's own facts (the sizes n, T, d: TokenSizes) --------------------------------
    @property
    def loss(self):
        return self.prompt.loss

    @property
    def scores(self) -> Tensor:
        """γ_it = Y_i vᵀx_it."""
        return self.prompt.scores

    def opt_tokens(self) -> np.ndarray:
        """The top-score token of each input."""
        return global_opt(self.scores)

    def loss_floor(self, alpha) -> float:
        """(1/n) Σ ℓ(γ_{iα_i}): the limit of L when every input attends only to α_i (> 0 for
        every strictly decreasing loss: with v fixed the loss never tends to 0, spec §1.3)."""
        return self.prompt.loss_floor(alpha)

    # ---- the model -----------------------------------------------------------------------------
    def _matrix(self, W) -> Tensor:
        """W as a float64 (d, d) tensor (autograd kept); ValueError naming W otherwise."""
        W = as_float_tensor(W, "W", 2)
        if tuple(W.shape) != (self.d, self.d):
            raise ValueError(f"W: expected shape {(self.d, self.d)}, got {tuple(W.shape)}")
        return W

    def logits(self, W) -> Tensor:
        """a_it = x_itᵀ W z_i, (n, T)."""
        W = self._matrix(W)
        return torch.einsum("itd,de,ie->it", self.X, W, self.Z)

    def softmax(self, W) -> Tensor:
        return torch.softmax(self.logits(W), dim=-1)

    def selected(self, W) -> np.ndarray:
        """The top-attention token of each input."""
        return torch.argmax(self.logits(W), dim=-1).numpy()

    def loss_value(self, W) -> Tensor:
        """L(W) through the vectorised prompt model; differentiable in W by autograd."""
        return self.prompt.loss_value(self._matrix(W).reshape(-1))

    def naive_output(self, W) -> Tensor:
        """f_i(W) = vᵀ X_iᵀ S(X_i W z_i) computed as the official model does (no vectorisation):
        the independent reference for ``loss_value`` and the gradients (tests)."""
        W = self._matrix(W)
        logits = (self.X @ W @ self.Z[:, :, None]).squeeze(-1)
        attended = (torch.softmax(logits, dim=-1)[:, :, None] * self.X).sum(1)
        return attended @ self.v

    def naive_loss(self, W) -> Tensor:
        return self.loss.value(self.y * self.naive_output(W)).mean()

    # ---- gradients -------------------------------------------------------------------------------
    def gradient_log(self, W) -> tuple[float, np.ndarray]:
        """(M, G̃) with ∇L(W) = e^M·G̃, G̃ (d, d) of order one: exact direction at any ‖W‖.

        ∇L(W) = (1/n) Σ_i ℓ'_i (Σ_t c_it x_it) z_iᵀ: rank ≤ n, row space in span{z_i}."""
        return self.gradient_log_np(self._matrix(W).detach().cpu().numpy())

    def gradient_log_np(self, W: np.ndarray) -> tuple[float, np.ndarray]:
        """``gradient_log`` on a float64 (d, d) array the caller has already checked: the hot
        path of the training loops below, which pass their own iterates (the checks of
        ``gradient_log`` cost a third of a step)."""
        log_scale, vec = self.prompt.gradient_log_np(np.ascontiguousarray(W.reshape(-1)))
        return log_scale, vec.reshape(self.d, self.d)

    def gradient(self, W) -> np.ndarray:
        """∇L(W) as a plain array (underflows to 0 once the softmax saturates)."""
        log_scale, G = self.gradient_log(W)
        return G * (0.0 if log_scale == -math.inf else math.exp(min(log_scale, 700.0)))

    @cached_property
    def query_projector(self) -> np.ndarray:
        """P_Z, the orthogonal projector onto span{z_i} (d, d)."""
        Z = self.Z.numpy()
        u, s, _ = np.linalg.svd(Z.T, full_matrices=False)
        r = int(np.sum(s > 1e-12 * max(1.0, float(s[0]) if s.size else 0.0)))
        return u[:, :r] @ u[:, :r].T


# ---- metrics (spec §1.8) ---------------------------------------------------------------------


def _rescaled(W) -> np.ndarray:
    """W divided by its largest |entry| (norms of huge or tiny iterates neither overflow nor
    underflow; every metric below is scale-free)."""
    W = np.asarray(W, dtype=np.float64)
    m = float(np.max(np.abs(W))) if W.size else 0.0
    return W / m if m > 0 else W


def correlation(W1, W2) -> float:
    """corr(W1, W2) = ⟨W1, W2⟩ / (‖W1‖_F ‖W2‖_F), the metric of the official code; nan if
    either is zero."""
    A, B = _rescaled(W1), _rescaled(W2)
    na, nb = np.linalg.norm(A), np.linalg.norm(B)
    if na == 0 or nb == 0:
        return math.nan
    return float(np.sum(A * B) / (na * nb))


def lp_normalize(W, p: float) -> np.ndarray:
    """W / ‖vec W‖_p."""
    A = _rescaled(W)
    return A / float(np.sum(np.abs(A) ** p) ** (1.0 / p))


def bregman_divergence(W_svm, W, p: float) -> float:
    """The directional Bregman divergence D_ψ(Ŵ_svm, Ŵ) of ψ = ‖·‖_p^p/p between the
    ℓp-normalised matrices (2410.14581, Fig. 4): 1 − ⟨sign(Ŵ)|Ŵ|^{p−1}, Ŵ_svm⟩ (spec §1.8).
    ≥ 0 by Hölder, 0 iff the directions agree."""
    A, B = lp_normalize(W_svm, p), lp_normalize(W, p)
    return float(1.0 - np.sum(np.sign(B) * np.abs(B) ** (p - 1.0) * A))


# ---- dynamics -------------------------------------------------------------------------------


@dataclass
class CrossRun:
    """Recorded iterates of a W-valued method: ``steps`` (k,), ``Ws`` (k, d, d), and for
    (K, Q) runs the last factors. ``stop`` says why the run ended."""

    steps: np.ndarray
    Ws: np.ndarray
    stop: str
    seconds: float
    K: np.ndarray | None = None
    Q: np.ndarray | None = None
    Ks: np.ndarray | None = None
    Qs: np.ndarray | None = None

    @property
    def W(self) -> np.ndarray:
        return self.Ws[-1]


class _Record:
    def __init__(self, every: int, steps: int):
        self.every, self.steps = max(1, int(every)), steps
        self.ks: list[int] = []
        self.Ws: list[np.ndarray] = []

    def add(self, k: int, W: np.ndarray, force: bool = False) -> None:
        if force or k % self.every == 0 or k == self.steps:
            self.ks.append(k)
            self.Ws.append(W.copy())

    def build(self, stop: str, t0: float, **extra) -> CrossRun:
        return CrossRun(
            np.asarray(self.ks), np.stack(self.Ws), stop, time.perf_counter() - t0, **extra
        )


def _square(problem: CrossProblem, M, name: str) -> np.ndarray:
    """A (d, d) iterate such as W0; ValueError naming ``name`` otherwise."""
    M = _array(M, name, 2)
    if M.shape != (problem.d, problem.d):
        raise ValueError(f"{name}: expected shape {(problem.d, problem.d)}, got {M.shape}")
    return M


def _factor(problem: CrossProblem, M, name: str) -> np.ndarray:
    """A (d, m) factor such as K0 or Q0 (any width m); ValueError naming ``name`` otherwise."""
    M = _array(M, name, 2)
    if M.shape[0] != problem.d:
        raise ValueError(f"{name}: expected {problem.d} rows, got shape {M.shape}")
    return M


def w_ngd(problem: CrossProblem, W0=None, *, lr: float = 0.1, steps: int = 2000, record_every=1):
    """W ← W − lr·∇L/‖∇L‖_F (the official W recipe without its ``+ ε``): NGD on vec(W)."""
    from models.flows.dynamics import ngd

    d = problem.d
    W0 = np.zeros((d, d)) if W0 is None else _square(problem, W0, "W0")
    traj = ngd(problem.prompt, W0.reshape(-1), lr=lr, steps=steps, record_every=record_every)
    ks = np.rint(np.asarray(traj.s) / lr).astype(int)  # NGD's s is arc length lr·k
    return CrossRun(ks, traj.ps.numpy().reshape(-1, d, d), traj.stop, float(traj.seconds))


def _factor_step(log_scale: float, raw: np.ndarray, F: np.ndarray, lam: float) -> np.ndarray | None:
    """The unit direction of e^{log_scale}·raw + 2λF (a factor's gradient with the penalty),
    formed in log space; None when it is exactly zero (that factor does not move)."""
    parts = []
    nr = float(np.linalg.norm(raw))
    if log_scale > -math.inf and nr > 0:
        parts.append((log_scale + math.log(nr), raw / nr))
    nf = float(np.linalg.norm(F))
    if lam > 0 and nf > 0:
        parts.append((math.log(2.0 * lam) + math.log(nf), F / nf))
    if not parts:
        return None
    top = max(a for a, _ in parts)
    g = sum(math.exp(a - top) * u for a, u in parts)
    ng = float(np.linalg.norm(g))
    return g / ng if ng > 0 else None


def kq_ngd(
    problem: CrossProblem,
    K0,
    Q0,
    *,
    lr: float = 0.1,
    steps: int = 2000,
    penalty: float = 0.0,
    record_every: int = 1,
) -> CrossRun:
    """(K, Q)-NGD on L(KQᵀ) + λ(‖K‖²_F + ‖Q‖²_F), each factor's gradient normalised separately:
    ∇_K = GQ + 2λK, ∇_Q = GᵀK + 2λQ with G = ∇L(KQᵀ) (spec §1.6, §6).

    ``penalty=MACHINE_EPS`` is the official recipe; 0 is the unpenalised flow's discretisation.
    A factor whose gradient is exactly zero does not move (with penalty 0, Q(0) = 0 makes
    ∇_K = 0 at step 1; with λ > 0, ∇_K = 2λK there, so K steps by −lr·K/‖K‖: no ``+ ε``
    damps the normalisation)."""
    t0 = time.perf_counter()
    K = _factor(problem, K0, "K0")
    Q = _factor(problem, Q0, "Q0")
    if K.shape != Q.shape:
        raise ValueError(f"Q0: expected the shape of K0 {K.shape}, got {Q.shape}")
    rec = _Record(record_every, steps)
    rec.add(0, K @ Q.T, force=True)
    stop = "step budget"
    for k in range(1, steps + 1):
        M, G = problem.gradient_log_np(K @ Q.T)
        uK = _factor_step(M, G @ Q, K, penalty)
        uQ = _factor_step(M, G.T @ K, Q, penalty)
        if uK is None and uQ is None:
            stop = "stationary point (both factor gradients exactly zero)"
            rec.add(k - 1, K @ Q.T, force=True)
            break
        if uK is not None:
            K = K - lr * uK
        if uQ is not None:
            Q = Q - lr * uQ
        rec.add(k, K @ Q.T)
    return rec.build(stop, t0, K=K, Q=Q)


def kq_gd(
    problem: CrossProblem, K0, Q0, *, eta: float, steps: int, record_every: int = 1
) -> CrossRun:
    """Plain (K, Q) gradient descent on L(KQᵀ) with a fixed step: K ← K − η·GQ, Q ← Q − η·GᵀK,
    G = ∇L(KQᵀ) at the current iterate (both factors stepped from the same point; spec §1.6).
    The run records KQᵀ and the factors themselves (``Ks``, ``Qs``) at the recorded steps; the
    update is the gradient's true size (e^M·G̃), so it underflows when ∇L does, as real GD does."""
    t0 = time.perf_counter()
    K = _factor(problem, K0, "K0")
    Q = _factor(problem, Q0, "Q0")
    if K.shape != Q.shape:
        raise ValueError(f"Q0: expected the shape of K0 {K.shape}, got {Q.shape}")
    rec, Ks, Qs = _Record(record_every, steps), [], []

    def add(k: int, force: bool = False) -> None:
        before = len(rec.ks)
        rec.add(k, K @ Q.T, force=force)
        if len(rec.ks) > before:
            Ks.append(K.copy())
            Qs.append(Q.copy())

    add(0, force=True)
    stop = "step budget"
    for k in range(1, steps + 1):
        M, G = problem.gradient_log_np(K @ Q.T)
        if M == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            add(k - 1, force=True)
            break
        G = math.exp(min(M, 700.0)) * G
        K, Q = K - eta * (G @ Q), Q - eta * (G.T @ K)
        add(k)
    return rec.build(stop, t0, K=K, Q=Q, Ks=np.stack(Ks), Qs=np.stack(Qs))


def dual_map(W: np.ndarray, p: float) -> np.ndarray:
    """∇ψ(W) = sign(W)|W|^{p−1} for ψ = ‖·‖_p^p / p."""
    return np.sign(W) * np.abs(W) ** (p - 1.0)


def primal_map(theta: np.ndarray, p: float) -> np.ndarray:
    """The inverse of ``dual_map``: sign(θ)|θ|^{1/(p−1)}."""
    return np.sign(theta) * np.abs(theta) ** (1.0 / (p - 1.0))


def md(
    problem: CrossProblem,
    W0=None,
    *,
    p: float,
    lr: float = 0.1,
    steps: int = 2000,
    record_every: int = 1,
) -> CrossRun:
    """Normalised ℓp mirror descent (2410.14581): sign(W⁺)|W⁺|^{p−1} = sign(W)|W|^{p−1} −
    lr·G/‖G‖_{p*}, p* = p/(p−1), with G's direction from log space (spec §1.6). p = 2 is NGD."""
    if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 1.0 < p < math.inf:
        raise ValueError(f"p: mirror descent needs 1 < p < ∞, got {p!r}")
    p = float(p)
    t0 = time.perf_counter()
    d = problem.d
    W = np.zeros((d, d)) if W0 is None else _square(problem, W0, "W0")
    q = p / (p - 1.0)
    theta = dual_map(W, p)
    rec = _Record(record_every, steps)
    rec.add(0, W, force=True)
    stop = "step budget"
    for k in range(1, steps + 1):
        M, G = problem.gradient_log_np(W)
        if M == -math.inf:
            stop = "stationary point (gradient exactly zero)"
            rec.add(k - 1, W, force=True)
            break
        Gs = _rescaled(G)
        theta = theta - lr * Gs / float(np.sum(np.abs(Gs) ** q) ** (1.0 / q))
        W = primal_map(theta, p)
        rec.add(k, W)
    return rec.build(stop, t0)


def w_gd(problem: CrossProblem, W0=None, *, eta: float, steps: int, record_every=1) -> CrossRun:
    """Plain GD W ← W − η∇L(W) with a fixed step (η ≤ 1/L_W for the theorems)."""
    from models.flows.dynamics import gd

    d = problem.d
    W0 = np.zeros((d, d)) if W0 is None else _square(problem, W0, "W0")
    traj = gd(problem.prompt, W0.reshape(-1), eta=eta, steps=steps, record_every=record_every)
    ks = np.asarray(traj.s).astype(int)  # GD's s is the step index
    return CrossRun(ks, traj.ps.numpy().reshape(-1, d, d), traj.stop, float(traj.seconds))


def polyak(
    problem: CrossProblem, W0=None, *, steps: int = 2000, alpha=None, record_every=1
) -> CrossRun:
    """Polyak steps W ← W − (L(W) − L*)/‖∇L‖² · ∇L with L* = (1/n) Σ ℓ(γ_{iα_i}), α the
    top-score tokens unless given (2402.05738): step length (L − L*)/‖∇L‖, both in log space."""
    t0 = time.perf_counter()
    d = problem.d
    alpha = problem.opt_tokens() if alpha is None else np.asarray(alpha)
    W = np.zeros((d, d)) if W0 is None else _square(problem, W0, "W0")
    rec = _Record(record_every, steps)
    rec.add(0, W, force=True)
    stop = "step budget"
    for k in range(1, steps + 1):
        M, G = problem.gradient_log_np(W)
        nG = float(np.linalg.norm(G))
        if M == -math.inf or nG == 0:
            stop = "stationary point (gradient exactly zero)"
            rec.add(k - 1, W, force=True)
            break
        log_gap = problem.prompt.log_loss_gap(torch.from_numpy(W.reshape(-1)), alpha)
        if log_gap == -math.inf:
            stop = "loss reached L* exactly"
            rec.add(k - 1, W, force=True)
            break
        length = math.exp(min(log_gap - (M + math.log(nG)), 700.0))
        W = W - length * G / nG
        rec.add(k, W)
    return rec.build(stop, t0)


def random_factors(d: int, m: int | None = None, *, scale: float, seed: int):
    """K, Q with i.i.d. N(0, scale²) entries from a seeded generator (d × m, m = d default)."""
    g = torch.Generator().manual_seed(int(seed))
    m = d if m is None else m
    K = torch.randn(d, m, generator=g, dtype=DTYPE) * scale
    Q = torch.randn(d, m, generator=g, dtype=DTYPE) * scale
    return K.numpy(), Q.numpy()
