"""The prompt-attention model of 2306.13596, f(X) = ⟨Xv, softmax(XWp)⟩, reduced to keys and scores.

With W and v fixed, training p only sees
- the keys  k_it = Wᵀ x_it  (the logit of token t is k_itᵀ p), and
- the scores γ_it = Y_i · vᵀ x_it  (spec maxmargin §1.3),
because Y_i f(X_i) = Σ_t s_it γ_it with s_i = softmax(K_i p). ``PromptProblem`` holds exactly
these, so the same object also serves the `<cls>` flow of 2505.17282 (keys = frozen
embeddings of the sequence's tokens, scores = y_i⟨E_s, v⟩).

Two gradients are provided, and tests check that they agree where both are valid:
- ``gradient``: the closed form of spec §1.8 in ordinary floating point;
- ``gradient_scaled``: the same vector in log space (a ScaledVector), exact in direction at
  any ‖p‖. Per input, with s = softmax(Kp) and m = Σ s_t γ_t,
      ∇L = Σ_i ω_i ℓ'(m_i) Σ_t c_it (k_it − k_ir),   c_it = s_it · Σ_u s_iu (γ_it − γ_iu),
  where r is the input's top-logit token. Subtracting k_ir is free because Σ_t c_it = 0
  exactly, and it removes the one term (t = r) whose coefficient cancels catastrophically.

L = Σ_i ω_i ℓ(m_i) with ω_i = 1/n (the papers' mean) unless the problem carries input
weights: the linear NTP decoder of 2402.18551 is the prompt problem whose inputs are the
pairs (context j, next token z), weighted by π̂_j·p̂_jz (models/ntp/flow.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from models.flows import kernels
from models.numerics.logspace import ScaledVector
from models.problems.losses import Loss, get_loss

Tensor = torch.Tensor
DTYPE = torch.float64


def as_float_tensor(x, name: str, ndim: int | None = None) -> Tensor:
    """float64 tensor from array-like, with a clear error naming ``name``."""
    t = torch.as_tensor(x, dtype=DTYPE) if not isinstance(x, Tensor) else x.to(DTYPE)
    if ndim is not None and t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name}: contains NaN or infinity")
    return t


class TokenSizes:
    """``n``, ``T`` and ``d`` (inputs, tokens per input, token dimension) read off the
    ``X`` of shape (n, T, d) of the class it is mixed into: one definition for every class
    that keeps its tokens as ``X`` (instances, the cross-attention and nonlinear-head
    problems)."""

    X: Tensor

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def T(self) -> int:
        return self.X.shape[1]

    @property
    def d(self) -> int:
        return self.X.shape[2]


def softmax_margins(keys: Tensor, scores: Tensor, p: Tensor) -> Tensor:
    """Σ_t softmax(K_i p)_t γ_it per input (leading dimensions of keys (…, T, k) and scores
    (…, T)); differentiable, and without input checks (callers check once, not per step)."""
    return (torch.softmax(keys @ p, dim=-1) * scores).sum(-1)


@dataclass(frozen=True)
class PromptProblem:
    """Keys (n, T, k), scores (n, T) and a loss: everything that training p depends on.

    ``weights`` (n,), optional: input i's weight ω_i in L = Σ_i ω_i ℓ(m_i), each > 0; None
    (the default) is the mean, ω_i = 1/n."""

    keys: Tensor
    scores: Tensor
    loss: Loss
    weights: Tensor | None = None

    def __post_init__(self):
        keys = as_float_tensor(self.keys, "keys", 3)
        scores = as_float_tensor(self.scores, "scores", 2)
        if scores.shape != keys.shape[:2]:
            raise ValueError(
                f"scores: shape {tuple(scores.shape)} does not match keys {tuple(keys.shape)}"
            )
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "scores", scores)
        object.__setattr__(self, "loss", get_loss(self.loss))
        if self.weights is not None:
            weights = as_float_tensor(self.weights, "weights", 1)
            if weights.shape[0] != keys.shape[0]:
                raise ValueError(f"weights: expected {keys.shape[0]}, got {weights.shape[0]}")
            if not bool((weights > 0).all()):
                raise ValueError("weights: every input weight must be > 0")
            object.__setattr__(self, "weights", weights)

    @property
    def input_weights(self) -> Tensor:
        """ω (n,): the weights, or 1/n each."""
        if self.weights is None:
            return torch.full((self.n,), 1.0 / self.n, dtype=DTYPE)
        return self.weights

    def weighted_mean(self, values: Tensor) -> Tensor:
        """Σ_i ω_i values_i over the last dimension (``mean`` itself when ω is uniform, so the
        papers' problems keep their arithmetic)."""
        if self.weights is None:
            return values.mean(-1)
        return values @ self.weights.to(values.device)

    @cached_property
    def log_weights_np(self) -> np.ndarray:
        """log ω (n,) on the host, as the kernels take it."""
        if self.weights is None:
            return kernels.mean_log_weights(self.keys)
        return np.ascontiguousarray(np.log(self.weights.detach().cpu().numpy()))

    @cached_property
    def _np(self) -> tuple[np.ndarray, ...]:
        """Host (numpy) copies of the keys and scores, which the hot path reads (gradient_log_np).

        Made on first use, not at construction: a problem that lives on a GPU and is only used
        through its torch methods (the one-step gradient of models.problems.embedding) never copies
        its (n, T, k) keys to the host.
        """
        keys = np.ascontiguousarray(self.keys.detach().cpu().numpy())
        gam = np.ascontiguousarray(self.scores.detach().cpu().numpy())
        return keys, gam

    @cached_property
    def keys_by_coordinate(self) -> np.ndarray:
        """The host keys laid out (d, n·T), which the tracer's kernels read their logits
        from in one SIMD pass (``kernels.keys_by_coordinate``)."""
        return kernels.keys_by_coordinate(self._np[0])

    @cached_property
    def difference_span(self) -> np.ndarray:
        """An orthonormal basis (d, r) of the span of the key differences k_it − k_i0.

        L depends on p only through this span (each input's logits move together along its
        complement, which the softmax ignores), and ∇L lies in it (spec §1.8)."""
        keys = self.keys.detach().cpu().numpy()
        diffs = (keys - keys[:, :1, :]).reshape(-1, keys.shape[2])
        if diffs.size:
            # Repeated rows add nothing to the span, and the `<cls>` problems repeat a handful
            # of token differences thousands of times: the SVD of n·T × d rows took 0.5 s there.
            diffs = np.unique(diffs, axis=0)
        if diffs.size == 0:
            return np.zeros((keys.shape[2], 0))
        _, sv, vt = np.linalg.svd(diffs, full_matrices=False)
        rank = int(np.sum(sv > 1e-12 * max(1.0, float(sv[0]))))
        return np.ascontiguousarray(vt[:rank].T)

    @classmethod
    def trusted(cls, keys: Tensor, scores: Tensor, loss, weights=None) -> PromptProblem:
        """A problem from float64 tensors the caller has already checked (finite, matching
        shapes), without checking them again: for callers that build one per training step
        from a checked problem (joint (v, p) training), where the checks cost a third of the
        step. Anything else uses the constructor."""
        problem = object.__new__(cls)
        object.__setattr__(problem, "keys", keys)
        object.__setattr__(problem, "scores", scores)
        object.__setattr__(problem, "loss", get_loss(loss))
        object.__setattr__(problem, "weights", weights)
        return problem

    @classmethod
    def from_data(cls, X, y, v, W=None, loss="logistic") -> PromptProblem:
        """From the paper's data: X (n, T, d), labels y (n,) in ±1, head v (d,), W (d, d)."""
        X = as_float_tensor(X, "X", 3)
        y = as_float_tensor(y, "y", 1)
        v = as_float_tensor(v, "v", 1)
        n, _, d = X.shape
        if y.shape[0] != n:
            raise ValueError(f"y: expected {n} labels, got {y.shape[0]}")
        if not torch.all((y == 1) | (y == -1)):
            raise ValueError("y: labels must be ±1")
        if v.shape[0] != d:
            raise ValueError(f"v: expected dimension {d}, got {v.shape[0]}")
        W = torch.eye(d, dtype=DTYPE) if W is None else as_float_tensor(W, "W", 2)
        if W.shape[0] != d:
            raise ValueError(f"W: expected {d} rows, got shape {tuple(W.shape)}")
        return cls(keys=X @ W, scores=y[:, None] * (X @ v), loss=loss)

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.keys.shape[0]

    @property
    def T(self) -> int:
        return self.keys.shape[1]

    @property
    def dim(self) -> int:
        return self.keys.shape[2]

    # ---- the model -------------------------------------------------------------------------
    def logits(self, p: Tensor) -> Tensor:
        return self.keys @ p

    def log_softmax(self, p: Tensor) -> Tensor:
        return torch.log_softmax(self.logits(p), dim=-1)

    def softmax(self, p: Tensor) -> Tensor:
        return torch.softmax(self.logits(p), dim=-1)

    def margins(self, p: Tensor) -> Tensor:
        """Y_i f(X_i) = Σ_t s_it γ_it, per input."""
        return softmax_margins(self.keys, self.scores, p)

    def loss_value(self, p: Tensor) -> Tensor:
        """L(p) = Σ_i ω_i ℓ(Y_i f(X_i)) (ω_i = 1/n: the mean); differentiable by autograd."""
        return self.weighted_mean(self.loss.value(self.margins(p)))

    def loss_path(self, ps: Tensor) -> Tensor:
        """L at each row of ps (k, d) in one vectorised call (used to record trajectories)."""
        logits = torch.einsum("itd,kd->kit", self.keys, ps)
        margins = (torch.softmax(logits, dim=-1) * self.scores).sum(-1)
        return self.weighted_mean(self.loss.value(margins))

    def selected(self, p: Tensor) -> Tensor:
        """The top-attention token of each input (ties: the lowest index)."""
        return torch.argmax(self.logits(p), dim=-1)

    def loss_floor(self, alpha) -> float:
        """Σ_i ω_i ℓ(γ_{iα_i}): the limit of L when every input attends only to α_i."""
        alpha = torch.as_tensor(alpha, dtype=torch.long)
        chosen = self.scores[torch.arange(self.n), alpha]
        return float(self.weighted_mean(self.loss.value(chosen)))

    def log_loss_gap(self, p: Tensor, alpha) -> float:
        """log(L(p) − L_floor(α)) where α_i is a top-score token of each input.

        L − L* = Σ_i ω_i [ℓ(γ_iα − δ_i) − ℓ(γ_iα)] with δ_i = Σ_u s_iu (γ_iα − γ_iu) ≥ 0; δ_i
        is a log-sum-exp of non-negative terms, so the gap keeps full relative accuracy when it
        is 1e-3000.
        """
        alpha = torch.as_tensor(alpha, dtype=torch.long)
        top = self.scores[torch.arange(self.n), alpha]
        diff = top[:, None] - self.scores
        if bool((diff < 0).any()):
            raise ValueError("log_loss_gap: alpha must select a top-score token of every input")
        with torch.no_grad():
            log_delta = torch.logsumexp(self.log_softmax(p) + torch.log(diff), dim=-1)
            delta = torch.exp(log_delta)
            inc = self.loss.increment(top, delta)
            # For tiny δ the increment is −ℓ'(γ)·δ to first order; use that form in log space.
            log_inc = torch.where(
                log_delta < -600.0,  # first order is exact to e^-600 there; below, inc is exact
                self.loss.log_neg_deriv(top) + log_delta,
                torch.log(inc.clamp_min(0)),
            )
        log_wt = torch.from_numpy(self.log_weights_np).to(log_inc.device)
        return float(torch.logsumexp(log_inc + log_wt, dim=0))

    # ---- gradients -------------------------------------------------------------------------
    def gradient(self, p: Tensor) -> Tensor:
        """∇L(p) by the closed form of spec §1.8 in plain float64 (underflows once saturated)."""
        s = self.softmax(p)
        m = (s * self.scores).sum(-1)
        c = s * (self.scores - m[:, None])
        lp = self.loss.deriv(m)
        if self.weights is None:
            return torch.einsum("i,it,itk->k", lp, c, self.keys) / self.n
        return torch.einsum("i,it,itk->k", lp * self.weights, c, self.keys)

    def gradient_scaled(self, p: Tensor) -> ScaledVector:
        """∇L(p) as a ScaledVector: exact direction and log-norm at any ‖p‖ (see module doc)."""
        p_np = as_float_tensor(p, "p", 1).detach().cpu().numpy()
        log_scale, vec = self.gradient_log_np(p_np)
        return ScaledVector(log_scale, torch.from_numpy(vec))

    def log_coefficients_np(self, p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The gradient's per-token coefficients in log space: (log|w|, sign w, r), each (n, T)
        but r (n,), with w_it = ω_i·ℓ'(m_i)·s_it·(γ_it − m_i) and ∇L = Σ_it w_it (k_it − k_ir).

        γ_it − m_i is formed relative to r, each input's top-logit token, in O(T) per input:
        γ_ir − m_i = −D_i with D_i = Σ_{u≠r} s_iu (γ_iu − γ_ir) kept in log space, and
        (γ_it − γ_ir) − D_i for t ≠ r. So every w_it keeps its sign and relative accuracy
        however small it is (models/flows/kernels.py, ``token_terms``, says to what bound).
        The arithmetic is compiled (models/flows/kernels.py).
        """
        keys, gam = self._np
        n, T = gam.shape
        log_w, sign_w = np.empty((n, T)), np.empty((n, T))
        r = np.empty(n, dtype=np.int64)
        p = np.ascontiguousarray(p, dtype=np.float64)
        code = self.loss.kernel_code
        if code is not None:
            param = self.loss.kernel_param
            kernels.coefficients(keys, gam, self.log_weights_np, p, code, param, log_w, sign_w, r)
            return log_w, sign_w, r
        # A loss the kernels do not know: the same token terms, ℓ' from the loss itself.
        m = np.empty(n)
        kernels.token_terms(keys, gam, p, log_w, sign_w, m, r)
        lp = self.loss.deriv(torch.from_numpy(m)).numpy()
        with np.errstate(divide="ignore"):
            log_lp, sign_lp = np.log(np.abs(lp)) + self.log_weights_np, np.sign(lp)
        return log_lp[:, None] + log_w, sign_lp[:, None] * sign_w, r

    def flow_field_np(self, p: np.ndarray) -> tuple[np.ndarray, float]:
        """The unit flow direction −∇L/‖∇L‖ at p and log‖∇L‖ (zeros and −inf at a stationary
        point): the tracer's one evaluation per call, compiled in one kernel when it can be."""
        return self.flow_field_fn(np.ascontiguousarray(p, dtype=np.float64))

    @cached_property
    def flow_field_fn(self):
        """``flow_field_np`` for a contiguous float64 p, as a function with the kernel's
        arguments bound once: the tracer calls it ~3 times per step, and looking them up on
        every call cost ~0.8 µs of its ~12 (n = 200, T = 4, d = 8). A problem whose flow is
        another field overrides this (``models.flows.shared._Pinned``), not flow_field_np."""
        return self.plain_field_fn

    @cached_property
    def plain_field_fn(self):
        """The unit field of this problem's own loss, −∇L/‖∇L‖, as ``flow_field_fn``."""
        code = self.loss.kernel_code
        if code is None:
            return self._flow_field_uncompiled
        keys, gam = self._np
        keys_t, log_wt, param = self.keys_by_coordinate, self.log_weights_np, self.loss.kernel_param
        d, field = keys.shape[2], kernels.field

        def flow_field(p: np.ndarray) -> tuple[np.ndarray, float]:
            u = np.empty(d)
            return u, field(keys, keys_t, gam, log_wt, p, code, param, u)

        return flow_field

    def __getstate__(self) -> dict:
        # the bound field functions are closures (not picklable) and cheap to rebuild
        return {k: v for k, v in self.__dict__.items() if not k.endswith("field_fn")}

    def _flow_field_uncompiled(self, p: np.ndarray) -> tuple[np.ndarray, float]:
        """The flow field from ``gradient_log_np``, for a loss without a kernel code."""
        log_scale, vec = self.gradient_log_np(p)
        if log_scale == -math.inf:
            return np.zeros_like(vec), log_scale
        norm = float(np.linalg.norm(vec))
        return -vec / norm, log_scale + math.log(norm)

    def flow_jacobian_np(self, p: np.ndarray) -> np.ndarray | None:
        """The Jacobian (d, d) of ``flow_field_np`` at p for the stiff integrator's Newton
        iterations: in closed form (``kernels.field_jacobian``), or by forward differences in
        one compiled call where that cannot be formed (a stationary point, a factor out of
        range); None for a loss the kernels do not know (the integrator then differences
        the field itself)."""
        keys, gam = self._np
        code = self.loss.kernel_code
        if code is None:
            return None
        jac = np.empty((keys.shape[2], keys.shape[2]))
        p = np.ascontiguousarray(p, dtype=np.float64)
        param = self.loss.kernel_param
        log_wt = self.log_weights_np
        keys_t = self.keys_by_coordinate
        if not kernels.field_jacobian(keys, keys_t, gam, log_wt, p, code, param, jac):
            kernels.field_jacobian_differences(keys, keys_t, gam, log_wt, p, code, param, jac)
        return jac

    def gradient_log_np(self, p: np.ndarray) -> tuple[float, np.ndarray]:
        """The log-space gradient on numpy arrays: (log_scale, vec) with ∇L = e^{log_scale}·vec.

        This is the engine's hot path (hundreds of calls per trajectory on tiny arrays): the
        coefficients and their sum are compiled kernels (models/flows/kernels.py), O(n·T·d) per
        call; the torch model
        (``loss_value``) is the independent reference it is tested against.
        """
        keys = self._np[0]
        log_w, sign_w, r = self.log_coefficients_np(p)
        vec = np.empty(keys.shape[2])
        log_scale = kernels.combine(keys, log_w, sign_w, r, vec)
        return log_scale, vec

    def smoothness_bound(self) -> float:
        """A rigorous Lipschitz constant of ∇L (spec §1.9, in keys/scores form).

        Per input, with R_i = range of γ_i: ‖∇²_p ℓ(m_i)‖ ≤ ‖K_i‖₂² (M1·R_i²/4 + 3·M0·R_i),
        where M0, M1 bound |ℓ'|, |ℓ''| on [min γ, max γ] (m_i is a convex combination of the
        scores). Derivation: ∇_z m = s⊙(γ−m) has norm ≤ std ≤ R/2; ‖∇²_z m‖ ≤ 3R.
        """
        lo, hi = float(self.scores.min()), float(self.scores.max())
        m0, m1 = deriv_bounds(self.loss, lo, hi)
        k2 = torch.linalg.matrix_norm(self.keys, ord=2) ** 2  # (n,)
        rng = self.scores.max(-1).values - self.scores.min(-1).values
        return float(self.weighted_mean(k2 * (m1 * rng**2 / 4 + 3 * m0 * rng)))


def deriv_bounds(loss: Loss, lo: float, hi: float) -> tuple[float, float]:
    """Bounds (M0, M1) on |ℓ'| and |ℓ''| over [lo, hi] for the losses of models.problems.losses."""
    name = loss.name
    if name == "logistic":
        return 1.0, 0.25
    if name == "exponential":
        return math.exp(-lo), math.exp(-lo)
    if name == "correlation":
        return 1.0, 0.0
    if name == "square":
        target = loss.target  # type: ignore[attr-defined]
        return 2.0 * max(abs(target - lo), abs(target - hi)), 2.0
    raise ValueError(f"no derivative bounds for loss {name!r}")


def _unit(x) -> Tensor | None:
    """x/‖x‖ flattened, or None for the zero vector.

    Rescaled by max|x| before the norm: torch's vector_norm squares the entries, so it returns
    0 for ‖x‖ ≲ 1e-160 (an underflowing gradient) and inf for ‖x‖ ≳ 1e154.
    """
    x = torch.as_tensor(x, dtype=DTYPE).reshape(-1)
    peak = x.abs().max() if x.numel() else torch.zeros((), dtype=DTYPE)
    if peak == 0:
        return None
    x = x / peak
    return x / torch.linalg.vector_norm(x)


def cosine(a, b) -> float:
    """cos(a, b); 0 when either is zero."""
    ua, ub = _unit(a), _unit(b)
    if ua is None or ub is None:
        return 0.0
    return float(ua @ ub)


def one_minus_cos(a, b) -> float:
    """1 − cos(a, b), computed as ‖â − b̂‖²/2 so values near 1e-12 keep their digits."""
    ua, ub = _unit(a), _unit(b)
    if ua is None or ub is None:
        return 1.0
    return float(torch.sum((ua - ub) ** 2) / 2)
