"""Regularization paths p_R ∈ argmin_{‖p‖≤R} L(p) (spec maxmargin §2.4–2.6).

Theorem RP (§2.4) says p_R/R → p^mm/‖p^mm‖ for the *global* ATT-SVM, so the minimiser must be
global over the ball, not a local descent result (F6 of §5 is exactly "the path goes local").
For small key dimensions we therefore search the whole sphere ‖p‖ = R:

- dim 2: a dense, vectorised angle grid, then a vectorised zoom on the best few grid minima;
  "certified" by a grid-spacing argument (``rival_minima``);
- dim ≥ 3: many restarts (Fibonacci-sphere points plus the ATT-SVM directions of candidate
  selections) of Riemannian (saddle-free Newton) descent with backtracking, batched over the
  restarts, on a torch-autograd objective; "certified" when the best point, a strict local
  minimum, is reached by ≥ ``agree`` restarts.

An unconstrained descent from 0 (and a few small random points) covers the interior: a loss
with a finite minimiser (the square-loss control F9, the concave head F10) keeps it inside the
ball, and then ``on_boundary`` is False.

Float64 flatness (§3 "Numerical pitfalls"): at R = 50 the loss differs from its floor by
~1e-22, far below its last bit, so a grid on L(p) is constant. When the problem has keys and
scores and a strictly decreasing loss we minimise log(L(p) − L_α), a strictly increasing
function of L, computed entirely in log space (``log_gap_batch``): it keeps relative accuracy at
L − L* = 1e-3000. The reported value is the engine's own ``PromptProblem.log_loss_gap``.
A quadratic nonlinear head (``models.problems.heads.quadratic_form``) gets the same treatment
relative to its ψ-optimal tokens (``head_log_gap_batch``); other heads fall back to the plain loss.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.signal import find_peaks

from models.flows import kernels
from models.numerics import failures
from models.oracles.selection import global_opt
from models.oracles.svm import att_svm
from models.problems.attention import one_minus_cos

Tensor = torch.Tensor
DTYPE = torch.float64

#: Offset that ranks every negative gap L − L_α below every positive one (local paths only).
#: Valid while |log|L − L_α|| < BIG/2, i.e. R·(key range)·(score range) ≲ 5e5.
BIG = 1e6
#: Grid chunk size (rows of P per vectorised call), to bound memory.
CHUNK = 8192
#: Relative size of float64 rounding noise in an objective: grid minima shallower than this
#: (relative to the largest |value|) are not counted.
NOISE = 1e-13
#: Two restarts found the same minimum when 1 − cos of their end points is below this.
SAME_POINT = 1e-9
#: Losses whose log-gap derivatives come in closed form (``kernels.log_gap_derivatives``); any
#: other strictly decreasing loss is differentiated by autograd.
CLOSED_FORM_LOSSES = (kernels.LOGISTIC, kernels.EXPONENTIAL, kernels.CORRELATION)


# ------------------------------------------------------------------------------ threads


@contextmanager
def single_thread() -> Iterator[None]:
    """Run torch on one intra-op thread, restoring the previous count afterwards.

    The searches here make thousands of calls on tensors of a few hundred numbers. Intra-op
    threads cannot speed those up, but waking them costs ~1 ms a call on a loaded machine
    (measured: 1.4 ms vs 17 µs for a 4-element log_softmax on 2 busy cores), which made one
    regularization-path point take seconds instead of tens of milliseconds.
    """
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def one_thread(fn):
    """Decorator form of ``single_thread`` for the public entry points."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        with single_thread():
            return fn(*args, **kwargs)

    return wrapper


# ------------------------------------------------------------------------------ objectives


@dataclass(frozen=True)
class Objective:
    """A batched, differentiable objective P (k, d) → (k,), strictly increasing in L(p).

    ``kind``: "log_gap" (log(L − L_α) signed-ranked, α in ``alpha``) or "loss" (plain L).
    """

    fn: Callable[[Tensor], Tensor]
    kind: str
    alpha: np.ndarray | None = None
    #: The same values without autograd, faster on large grids (``grid``); None: ``fn``.
    fast: Callable[[Tensor], Tensor] | None = None
    #: f, ∇f and ∇²f per row in closed form, ``closed(P, order)`` (order 0: values only, ∇f and
    #: ∇²f zero), used by the descents in place of autograd of ``fn``; None: autograd.
    closed: Callable[[Tensor, int], tuple[Tensor, Tensor, Tensor]] | None = None

    def __call__(self, P: Tensor) -> Tensor:
        return self.fn(P)

    def values(self, P: Tensor) -> Tensor:
        """The descents' values: from ``closed`` where there is one, so that a line search
        compares trial values with the value at its start computed by the same code."""
        if self.closed is not None:
            return self.closed(P, 0)[0]
        with torch.no_grad():
            return self.fn(P)

    def at(self, p) -> float:
        """The objective at one point, as a float."""
        with torch.no_grad():
            return float(self.fn(torch.as_tensor(p, dtype=DTYPE).reshape(1, -1))[0])

    def grid(self, P: Tensor) -> Tensor:
        """Values on many points without autograd, in chunks; NaN is reported as +inf."""
        fn = self.fn if self.fast is None else self.fast
        with torch.no_grad():
            vals = torch.cat([fn(P[k : k + CHUNK]) for k in range(0, P.shape[0], CHUNK)])
        # NaN → +inf, and ±inf kept (nan_to_num's default would turn them into ±1.8e308)
        return torch.nan_to_num(vals, nan=math.inf, posinf=math.inf, neginf=-math.inf)


def _masked_lse(x: Tensor, mask: Tensor) -> Tensor:
    """logsumexp of x over its last axis, restricted to ``mask``; −inf for an empty mask.

    Written so that autograd never sees a logsumexp of only −inf (whose gradient is NaN).
    """
    mask = mask.expand_as(x)
    valid = mask.any(-1)
    masked = torch.where(mask, x, -math.inf)
    masked = torch.where(valid[..., None], masked, 0.0)
    return torch.where(valid, torch.logsumexp(masked, dim=-1), -math.inf)


def _signed_difference(log_pos: Tensor, log_neg: Tensor) -> tuple[Tensor, Tensor]:
    """log|e^{log_pos} − e^{log_neg}| and its sign (0 for an exact tie)."""
    hi = torch.maximum(log_pos, log_neg)
    lo = torch.minimum(log_pos, log_neg)
    hi_safe = torch.where(torch.isfinite(hi), hi, 0.0)
    sign = torch.sign(log_pos - log_neg).nan_to_num(0.0)
    return hi + torch.log1p(-torch.exp(lo - hi_safe)), sign


def _signed_lse(log_abs: Tensor, sign: Tensor) -> tuple[Tensor, Tensor]:
    """log|Σ sign·e^{log_abs}| over the last axis, and the sum's sign."""
    return _signed_difference(_masked_lse(log_abs, sign > 0), _masked_lse(log_abs, sign < 0))


def log_gap_batch(problem, P: Tensor, alpha) -> tuple[Tensor, Tensor]:
    """(log|L(p) − L_α|, sign) for every row p of P (k, d); differentiable by autograd.

    L_α = (1/n)Σ ℓ(γ_iα_i) is the loss floor of selection α. This is the batched twin of
    ``PromptProblem.log_loss_gap`` (tests check they agree), extended to any α: with
    δ_i = Σ_u s_iu (γ_iα − γ_iu), a signed log-sum-exp, the gap is (1/n)Σ[ℓ(γ_iα − δ_i) − ℓ(γ_iα)],
    each term −ℓ'(γ_iα)·δ_i to first order once that product is below e^{-600}. (The engine
    switches at |δ| < 1e-8, where the two forms differ by ~1e-8 relative: a step in log G that
    makes spurious grid minima; at e^{-600} they agree to ~1e-200 and ``increment`` is still
    representable.) The sign is +1 for the global opt; it can be −1 for a local α whose input
    has higher-scoring tokens.
    """
    keys, loss = problem.keys, problem.loss
    n = keys.shape[0]
    top, diff = _selected_scores(problem, alpha)
    log_s = torch.log_softmax(torch.einsum("itd,kd->kit", keys, P), dim=-1)
    terms = log_s + torch.log(diff.abs())
    log_delta, sign_delta = _signed_difference(
        _masked_lse(terms, diff > 0), _masked_lse(terms, diff < 0)
    )
    return _gap_from_margin_drop(loss, top, log_delta, sign_delta, n)


def _closed_log_gap(problem, alpha) -> Callable[[Tensor, int], tuple[Tensor, Tensor, Tensor]]:
    """``closed`` for the log-gap objective: the ranked log|L − L_α| (``_rank``) with its
    gradient and Hessian from the compiled ``kernels.log_gap_derivatives``, the one code behind
    the grids' values, the line searches' trials and the descents' derivatives. Autograd of
    ``log_gap_batch`` cost 2.8 ms per descent iteration on tensors of a few dozen entries
    (0.15 ms in closed form; benchmarks/test_regpath_derivatives.py), and lost the leak-sized
    gradients of points saturated on a wrong token (tests/test_regpath.py). For a negative gap
    the rank is −BIG − log|G|, so its derivatives are those of log|G| negated; for G = 0 it is
    the constant −BIG."""
    top, diff = _selected_scores(problem, alpha)
    arrays = [np.ascontiguousarray(a.detach().numpy()) for a in (problem.keys, diff, top)]
    return _closed_from(kernels.log_gap_derivatives, arrays, problem.loss.kernel_code)


def _closed_from(kernel, arrays, code) -> Callable[[Tensor, int], tuple[Tensor, Tensor, Tensor]]:
    """``closed(P, order)`` → (the ranked f, ∇f, ∇²f) from a compiled log-gap kernel
    ``kernel(*arrays, code, P, order, log_gap, sign, grad, hess)``."""

    def closed(P: Tensor, order: int) -> tuple[Tensor, Tensor, Tensor]:
        Pn = np.ascontiguousarray(P.detach().numpy())
        k, d = Pn.shape
        log_gap, sign = np.empty(k), np.empty(k)
        grad, hess = np.zeros((k, d)), np.zeros((k, d, d))
        kernel(*arrays, code, Pn, order, log_gap, sign, grad, hess)
        sign_t = torch.from_numpy(sign)
        f = _rank(torch.from_numpy(log_gap), sign_t)
        return (
            f,
            sign_t[:, None] * torch.from_numpy(grad),
            sign_t[:, None, None] * torch.from_numpy(hess),
        )

    return closed


def _selected_scores(problem, alpha) -> tuple[Tensor, Tensor]:
    """(γ_iα_i per input, γ_iα_i − γ_it per input and token)."""
    scores = problem.scores
    top = scores[torch.arange(scores.shape[0]), torch.as_tensor(alpha, dtype=torch.long)]
    return top, top[:, None] - scores


def _gap_from_margin_drop(loss, top: Tensor, log_delta: Tensor, sign_delta: Tensor, n: int):
    """(log|L − L_α|, sign) from each input's margin drop δ_i = γ_iα − margin_i (given as log|δ_i|
    and its sign): L − L_α = (1/n)Σ[ℓ(γ_iα − δ_i) − ℓ(γ_iα)], each term −ℓ'(γ_iα)·δ_i to first
    order once that is below e^{-600} (see ``log_gap_batch``)."""
    first_order = loss.log_neg_deriv(top) + log_delta
    small = first_order < -600.0
    delta_safe = torch.where(small, torch.ones_like(log_delta), sign_delta * torch.exp(log_delta))
    log_inc = torch.where(
        small,
        first_order,
        torch.log(torch.where(small, 1.0, loss.increment(top, delta_safe).abs())),
    )
    log_gap, sign = _signed_lse(log_inc, sign_delta)
    return log_gap - math.log(n), sign


def head_log_gap_batch(problem, P: Tensor, alpha) -> tuple[Tensor, Tensor]:
    """(log|L(p) − L_α|, sign) for a quadratic nonlinear head
    (``models.problems.heads.quadratic_form``), L_α = (1/n)Σ ℓ(Y_i ψ(x_iα)), for every row p of P
    (k, d); differentiable by autograd.

    With s the softmax of K_i p and δ_i = Σ_t s_it (x_it − x_iα), the margin drop is
    −Y_i(2 x_iαᵀQδ_i + δ_iᵀQδ_i): each coordinate of δ_i is a signed log-sum-exp of
    log s_it + log|x_itk − x_iαk|, so nothing cancels against ψ(x_iα) and the gap keeps its
    relative accuracy while the leak s_it is far below float64's epsilon.
    """
    x_top, diff = _head_differences(problem, alpha)
    log_s = torch.log_softmax(torch.einsum("itd,kd->kit", problem.keys, P), dim=-1)  # (k, n, T)
    terms = log_s[:, :, None, :] + torch.log(diff.abs())[None]  # (k, n, d, T)
    log_dk, sign_dk = _signed_difference(
        _masked_lse(terms, (diff > 0)[None]), _masked_lse(terms, (diff < 0)[None])
    )  # δ_ik: (k, n, d)
    return _head_gap_from_drops(problem, x_top, log_dk, sign_dk)


def _closed_head_log_gap(problem, alpha):
    """``closed`` for a quadratic head's log-gap objective (``_closed_log_gap``'s twin): the
    ranked log|L − L_α| of ``head_log_gap_batch`` with its gradient and Hessian from the
    compiled ``kernels.head_log_gap_derivatives``, for the grids, the line searches' trials
    and the descents alike."""
    x_top, diff = _head_differences(problem, alpha)
    q = problem.quadratic_form()
    arrays = [
        problem.keys,
        diff,
        2 * q * x_top,
        q,
        problem.y.to(DTYPE),
        problem.y * problem.psi_of(x_top),
    ]
    arrays = [np.ascontiguousarray(a.detach().numpy()) for a in arrays]
    return _closed_from(kernels.head_log_gap_derivatives, arrays, problem.loss.kernel_code)


def _head_differences(problem, alpha) -> tuple[Tensor, Tensor]:
    """(x_iα_i (n, d), x_it − x_iα_i as (n, d, T))."""
    X = problem.X
    x_top = X[torch.arange(problem.n), torch.as_tensor(alpha, dtype=torch.long)]
    return x_top, (X - x_top[:, None, :]).transpose(1, 2).contiguous()


def _head_gap_from_drops(problem, x_top: Tensor, log_dk: Tensor, sign_dk: Tensor):
    """(log|L − L_α|, sign) from the drops δ_ik (k, n, d) of ``head_log_gap_batch``."""
    q = problem.quadratic_form()
    y, n = problem.y, problem.n
    lin = 2 * q * x_top  # the linear coefficients 2(Qx_α)_k: (n, d)
    log_terms = torch.cat([log_dk + torch.log(lin.abs()), 2 * log_dk + torch.log(q.abs())], -1)
    signs = torch.cat([sign_dk * torch.sign(lin), torch.sign(q).expand_as(sign_dk)], -1)
    signs = torch.where(torch.isfinite(log_terms), signs, 0.0)
    log_change, sign_change = _signed_lse(log_terms, signs)  # ψ(u_i) − ψ(x_iα)
    top = y * problem.psi_of(x_top)
    return _gap_from_margin_drop(problem.loss, top, log_change, -y * sign_change, n)


def _rank(log_abs: Tensor, sign: Tensor) -> Tensor:
    """A strictly increasing image of the signed gap: log G for G > 0, −BIG − log|G| for G < 0."""
    return torch.where(sign > 0, log_abs, torch.where(sign < 0, -BIG - log_abs, -BIG))


def _has_log_gap(problem) -> bool:
    loss = getattr(problem, "loss", None)
    return (
        hasattr(problem, "keys")
        and hasattr(problem, "scores")
        and bool(getattr(loss, "strictly_decreasing", False))
    )


def _has_head_log_gap(problem) -> bool:
    quadratic = getattr(problem, "quadratic_form", None)
    loss = getattr(problem, "loss", None)
    return (
        callable(quadratic)
        and quadratic() is not None
        and bool(getattr(loss, "strictly_decreasing", False))
    )


def _plain_loss(problem) -> Callable[[Tensor], Tensor]:
    """Batched L: ``loss_path`` when the problem has one, else a loop over ``loss_value``."""
    if hasattr(problem, "loss_path"):
        return problem.loss_path
    return lambda P: torch.stack([problem.loss_value(p) for p in P])


def objective_for(problem, alpha=None) -> Objective:
    """The search objective for ``problem`` (duck-typed: needs ``loss_value`` and ``dim``).

    With keys, scores and a strictly decreasing loss: log(L − L_α), α = the top-score tokens
    unless given. It is strictly increasing in L for any α (ties in the top score included), so
    the minimiser is unchanged and only float64 resolution is gained; for the logistic,
    exponential and correlation losses its values and derivatives come in closed form
    (``Objective.closed``). Otherwise: the plain loss, which is flat in float64 once
    L − L* < 1e-16·L* (spec §2.6); results then come back uncertified rather than wrong.
    """
    if getattr(problem, "weights", None) is not None:
        # the log gaps below normalise by n (L the mean of the input losses)
        raise ValueError("reg_path: input-weighted problems are not supported")
    compiled = getattr(getattr(problem, "loss", None), "kernel_code", None) in CLOSED_FORM_LOSSES
    if _has_head_log_gap(problem):
        alpha = problem.psi_optimal_tokens() if alpha is None else np.asarray(alpha, np.int64)
        closed = _closed_head_log_gap(problem, alpha) if compiled else None
        return _log_gap_objective(
            lambda P: _rank(*head_log_gap_batch(problem, P, alpha)), alpha, closed
        )
    if not _has_log_gap(problem):
        return Objective(_plain_loss(problem), "loss")
    alpha = global_opt(problem.scores) if alpha is None else np.asarray(alpha, dtype=np.int64)
    closed = _closed_log_gap(problem, alpha) if compiled else None
    return _log_gap_objective(lambda P: _rank(*log_gap_batch(problem, P, alpha)), alpha, closed)


def _log_gap_objective(fn, alpha, closed) -> Objective:
    """A log-gap objective: ``fn`` the differentiable ranked gap, ``closed`` its compiled form
    (derivatives, trials and grid values) or None (autograd of ``fn``, and ``fn`` on grids)."""
    fast = None if closed is None else (lambda P: closed(P, 0)[0])
    return Objective(fn, "log_gap", alpha, fast=fast, closed=closed)


# ---------------------------------------------------------------------------- descent engine


def _derivatives(obj: Objective, P: Tensor, hessian: bool = True):
    """f (k,), ∇f (k, d) and, if asked, ∇²f (k, d, d) per row, by autograd (rows independent).

    The Hessian in one plain double backward over d copies of the rows: copy j's gradient
    coordinate j, summed over rows, has as its gradient with respect to copy j the Hessian's
    row j at every point (the rows are independent, so no copy reaches another). The values
    of d backward passes or of one vmapped over the unit vectors (``is_grads_batched``) to
    rounding (the forward pass runs on d·k rows, whose rounding may depend on the batch), and
    1.5x faster than the latter at d = 3 (2.2 against 3.4 ms for 16 rows: these tensors are
    tiny and every autograd node costs its overhead, which vmap's batched backward pays d
    times; tests/test_regpath.py checks the rows against ``torch.autograd.functional.hessian``
    of each row alone).

    An objective with a closed form (``Objective.closed``) takes its derivatives from there.
    NaN values become +inf (never accepted by a line search); NaN derivatives become 0.
    """
    clean = {"nan": 0.0, "posinf": 0.0, "neginf": 0.0}
    if obj.closed is not None:
        f, g, H = obj.closed(P, 2 if hessian else 1)
        return f.nan_to_num(nan=math.inf), g.nan_to_num(**clean), H.nan_to_num(**clean)
    k, d = P.shape
    copies = d if hessian else 1
    Pc = P.detach().repeat(copies, 1).requires_grad_(True)  # copy j: rows j·k … (j + 1)·k − 1
    fc = obj(Pc)
    (gc,) = torch.autograd.grad(fc.sum(), Pc, create_graph=hessian)
    f, g = fc[:k], gc[:k]
    H = torch.zeros(P.shape + P.shape[-1:], dtype=DTYPE)
    if hessian and gc.requires_grad:
        own = gc.view(d, k, d).diagonal(dim1=0, dim2=2)  # (k, d): copy j's coordinate j
        (rows,) = torch.autograd.grad(own.sum(), Pc, allow_unused=True)
        if rows is not None:
            H = rows.view(d, k, d).transpose(0, 1)  # H[r, j, :] = ∂(∂f/∂p_j)/∂p at row r
    return (
        f.detach().nan_to_num(nan=math.inf),
        g.detach().nan_to_num(**clean),
        H.detach().nan_to_num(**clean),
    )


def _tangent(g: Tensor, P: Tensor) -> Tensor:
    """Riemannian gradient on the sphere through P: g minus its radial part."""
    u = P / torch.linalg.vector_norm(P, dim=-1, keepdim=True)
    return g - (g * u).sum(-1, keepdim=True) * u


def sphere_projection(R: float) -> Callable[[Tensor], Tensor]:
    """Retraction onto the sphere ‖p‖ = R."""
    return lambda P: R * P / torch.linalg.vector_norm(P, dim=-1, keepdim=True)


def cap_projection(R: float, center, eps: float) -> Callable[[Tensor], Tensor]:
    """Projection onto the cap {‖p‖ = R, cos(p, center) ≥ 1 − eps} (spec §1.6, §2.5)."""
    c = torch.as_tensor(center, dtype=DTYPE)
    c = c / torch.linalg.vector_norm(c)
    cos_max, sin_max = 1.0 - eps, math.sqrt(max(0.0, 1.0 - (1.0 - eps) ** 2))

    def project(P: Tensor) -> Tensor:
        u = P / torch.linalg.vector_norm(P, dim=-1, keepdim=True)
        cos = u @ c
        ortho = u - cos[:, None] * c
        on_edge = cos_max * c + sin_max * ortho / torch.linalg.vector_norm(
            ortho, dim=-1, keepdim=True
        ).clamp_min(1e-300)
        return R * torch.where((cos < cos_max)[:, None], on_edge, u)

    return project


@dataclass
class _Descent:
    P: Tensor
    values: Tensor
    minimum: Tensor  # rows that stopped at a point with positive-definite (tangent) Hessian
    exited: Tensor  # rows that left the ball (unconstrained runs only)


def _tangent_hessian(g: Tensor, H: Tensor, P: Tensor) -> Tensor:
    """Riemannian Hessian on the sphere ‖p‖ = R, P_T(∇²f − (∇f·p̂/R) I)P_T, plus p̂p̂ᵀ so that
    the radial direction (never excited by a tangent gradient) has eigenvalue 1."""
    norm = torch.linalg.vector_norm(P, dim=-1, keepdim=True)
    u = P / norm
    eye = torch.eye(P.shape[-1], dtype=DTYPE)
    proj = eye - u[:, :, None] * u[:, None, :]
    radial = ((g * u).sum(-1, keepdim=True) / norm)[:, :, None]
    return proj @ (H - radial * eye) @ proj + u[:, :, None] * u[:, None, :]


def _newton_direction(g: Tensor, H: Tensor) -> Tensor:
    """Saddle-free Newton direction −|H|⁻¹g: eigenvalues replaced by their absolute values,
    floored at 1e-10 of the largest, so it is a descent direction everywhere."""
    lam, V = torch.linalg.eigh(0.5 * (H + H.transpose(-1, -2)))
    floor = 1e-10 * lam.abs().amax(-1, keepdim=True) + 1e-300
    coef = (V.transpose(-1, -2) @ g[:, :, None])[..., 0] / lam.abs().clamp_min(floor)
    return -(V @ coef[:, :, None])[..., 0]


def _is_minimum(f: Tensor, H: Tensor, P: Tensor, on_sphere: bool) -> Tensor:
    """Positive curvature in every (tangent) direction, above 1e-10·max(1, |f|). A point that
    stopped on a float64-flat plateau has curvature ~0 there and is not a minimum."""
    lam = torch.linalg.eigvalsh(0.5 * (H + H.transpose(-1, -2)))
    if on_sphere:  # drop the radial eigenvalue 1 added by _tangent_hessian
        u = P / torch.linalg.vector_norm(P, dim=-1, keepdim=True)
        lam = torch.linalg.eigvalsh(H - 2.0 * u[:, :, None] * u[:, None, :])[:, 1:]
    return lam.amin(-1) > 1e-10 * f.abs().clamp_min(1.0)


def _trial(obj, P, t, direction, project, rows):
    """Trial points P + t·direction (projected) and their values; only ``rows`` are evaluated."""
    trial = P + t[:, None] * direction
    trial = project(trial) if project is not None else trial
    ft = torch.full_like(t, math.inf)
    ft[rows] = obj.values(trial[rows]).nan_to_num(nan=math.inf)
    return trial, ft


def _line_search(obj, P, f, g, direction, rows, project, radius, max_step, rounds=24):
    """Armijo backtracking (factor 1/4) from step 1 for ``rows``, then doubling while the value
    keeps falling.

    The step is capped at ``max_step``. The Armijo test uses the actual (projected)
    displacement and asks for a strict decrease, so that a row on a float64-flat plateau stops
    instead of wandering on it. The doubling matters on the exponential flanks of the log-gap,
    where a Newton step is only ~1/R long. Returns the new points and values, the rows that
    moved, and the rows whose new point left the ball.
    """
    # ‖direction‖ scaled by its largest entry: a Newton step across a zero curvature is ~‖g‖/1e-300
    # long, and the plain norm would square it into inf (then t = 0 and the step is lost).
    big = direction.abs().amax(-1, keepdim=True).clamp_min(1e-300)
    length = (big[:, 0] * torch.linalg.vector_norm(direction / big, dim=-1)).clamp_min(1e-300)
    t = (max_step / length).clamp(max=1.0)
    pending = rows.clone()
    P_new, f_new = P.clone(), f.clone()
    accepted = torch.zeros_like(pending)
    first = pending.clone()
    for k in range(rounds):
        if not bool(pending.any()):
            break
        trial, ft = _trial(obj, P, t, direction, project, pending)
        ok = pending & (ft < f) & (ft <= f + 1e-4 * (g * (trial - P)).sum(-1))
        P_new = torch.where(ok[:, None], trial, P_new)
        f_new = torch.where(ok, ft, f_new)
        accepted |= ok
        first &= ok if k == 0 else first
        pending &= ~ok
        t = torch.where(ok, t, 0.25 * t)
    grow = first & (2 * t * length <= max_step)
    while bool(grow.any()):
        t = torch.where(grow, 2 * t, t)
        trial, ft = _trial(obj, P, t, direction, project, grow)
        grow &= ft < f_new
        P_new = torch.where(grow[:, None], trial, P_new)
        f_new = torch.where(grow, ft, f_new)
        grow &= 2 * t * length <= max_step
    exited = accepted & (torch.linalg.vector_norm(P_new, dim=-1) >= radius)
    return P_new, f_new, accepted, exited


def descend(
    obj: Objective,
    P0: Tensor,
    project: Callable[[Tensor], Tensor] | None = None,
    *,
    radius: float = math.inf,
    iters: int = 100,
) -> _Descent:
    """Batched saddle-free Newton descent (Riemannian on the sphere when ``project`` is given).

    Why Newton: near p^mm the log-gap is a smoothed −R·(min margin); its curvature across the
    active constraints is ~R times that along them, so gradient descent needs ~R iterations
    (thousands at R = 200) where Newton needs a handful. A row stops when its predicted
    decrease −∇f·d falls below float64 resolution of f (converged, or on a plateau), when a
    Newton and then a gradient step both fail, or (unconstrained) when it leaves the ball of
    ``radius`` (``exited``). Steps are capped at 0.25 rad on the sphere and at max(1, ‖p‖)
    off it, so that a divergent descent from 0 leaves a ball of radius R in ~log₂R steps.
    """
    on_sphere = project is not None
    P = project(P0) if on_sphere else P0.clone()
    f, g, H = _derivatives(obj, P)
    active = torch.isfinite(f)
    use_grad = torch.zeros_like(active)
    exited = torch.zeros_like(active)
    for _ in range(iters):
        g_dir = _tangent(g, P) if on_sphere else g
        H_dir = _tangent_hessian(g, H, P) if on_sphere else H
        scale = torch.linalg.vector_norm(P, dim=-1).clamp_min(1.0)
        gnorm = torch.linalg.vector_norm(g_dir, dim=-1, keepdim=True).clamp_min(1e-300)
        steepest = -0.1 * scale[:, None] * g_dir / gnorm
        direction = torch.where(use_grad[:, None], steepest, _newton_direction(g_dir, H_dir))
        decrease = -(g_dir * direction).sum(-1)
        active &= decrease > 1e-15 * f.abs().clamp_min(1.0)
        if not bool(active.any()):
            break
        max_step = (0.25 if on_sphere else 1.0) * float(scale.max())
        P, f, ok, out = _line_search(obj, P, f, g, direction, active, project, radius, max_step)
        exited |= out
        stalled = ~ok & use_grad
        use_grad = active & ~ok
        active &= ~out & ~stalled
        f, g, H = _derivatives(obj, P)
    H_final = _tangent_hessian(g, H, P) if on_sphere else H
    minimum = ~exited & _is_minimum(f, H_final, P, on_sphere)
    return _Descent(P.detach(), f, minimum, exited)


# ----------------------------------------------------------------------------- the result


@dataclass
class RegPoint:
    """One point of a regularization path, with the evidence that it is the global minimiser.

    ``objective`` is the value of ``objective_kind`` at p (for "log_gap" on the global opt, the
    engine's ``PromptProblem.log_loss_gap``); ``loss`` is the plain float64 L(p). ``gap`` is the
    objective of the second-best distinct local minimum minus the best (inf if only one was
    found). ``certified``: grid, no other grid minimum could hide a lower value
    (``rival_minima``); restarts, the best point is a strict minimum reached by ≥ ``agree``
    restarts; interior winner (``on_boundary`` False), ≥ min(agree, starts) interior descents
    stop at it. ``details`` holds the evidence (rival minima, agreeing and flat restarts, and
    for an interior winner the sphere's best objective).
    """

    p: Tensor
    R: float
    objective: float
    objective_kind: str
    loss: float
    n_local_minima: int
    gap: float
    certified: bool
    on_boundary: bool
    method: str
    seconds: float
    details: dict = field(default_factory=dict)

    @property
    def norm(self) -> float:
        return float(torch.linalg.vector_norm(self.p))


@dataclass
class _Found:
    p: Tensor
    value: float
    n_minima: int
    gap: float
    certified: bool
    details: dict


# ----------------------------------------------------------------------- dim 2: angle grid


def _circle(R: float, thetas: np.ndarray) -> Tensor:
    th = torch.as_tensor(thetas, dtype=DTYPE)
    return R * torch.stack([torch.cos(th), torch.sin(th)], dim=-1)


def grid_minima(vals: np.ndarray, periodic: bool, prominence: float) -> np.ndarray:
    """Indices of grid local minima that stand out of rounding noise by ``prominence``.

    A periodic grid is rotated to start at its maximum, so that no minimum straddles the seam;
    an arc is padded with +max at both ends, so that its endpoints can be minima.
    """
    finite = np.isfinite(vals)
    top = float(vals[finite].max()) + 1.0 if finite.any() else 0.0
    v = np.where(finite, vals, top)
    if periodic:
        shift = int(np.argmax(v))
        idx, _ = find_peaks(-np.append(np.roll(v, -shift), v[shift]), prominence=prominence)
        return np.unique((idx + shift) % v.size)
    idx, _ = find_peaks(-np.concatenate([[top], v, [top]]), prominence=prominence)
    return idx - 1


def _steps(vals: np.ndarray, periodic: bool) -> np.ndarray:
    """|f_j+1 − f_j| for each grid interval (the last one is 0 on an arc); inf where undefined."""
    nxt = np.roll(vals, -1) if periodic else np.append(vals[1:], vals[-1])
    steps = np.abs(nxt - vals)
    return np.where(np.isfinite(steps), steps, np.inf)


def rival_minima(vals: np.ndarray, f_best: float, winner: int, periodic: bool) -> int:
    """How many grid local minima, other than the winner's, could hide a value below f_best.

    The grid-spacing argument: a point below f_best lies in the basin of some grid local
    minimum m, within h of it, where f ≥ f_m − L·h/2 with L·h estimated locally by the largest
    value change over the four intervals around m. That is a smoothness assumption at grid
    scale (no minimum hides inside a monotone run of grid values), and a local one, so that the
    exponentially small slopes near a max-margin direction are not swamped by steep flanks
    elsewhere. Minima within two grid steps of the winner belong to its basin.
    """
    v = np.where(np.isfinite(vals), vals, np.inf)
    left = np.roll(v, 1) if periodic else np.concatenate([[np.inf], v[:-1]])
    right = np.roll(v, -1) if periodic else np.append(v[1:], np.inf)
    steps = _steps(v, periodic)
    window = [np.roll(steps, k) for k in (-1, 0, 1, 2)]
    slack = np.max(window, axis=0)
    candidates = np.flatnonzero((v <= left) & (v <= right) & (v - 0.5 * slack <= f_best))
    dist = np.abs(candidates - winner)
    if periodic:
        dist = np.minimum(dist, v.size - dist)
    return int((dist > 2).sum())


def _refine_angles(obj: Objective, R: float, thetas: np.ndarray, h: float, bounds, zooms=4):
    """Vectorised zoom on [θ − h, θ + h] ∩ bounds for all candidates at once: each round
    evaluates 201 points and shrinks the window 100-fold around the best (h·1e-8 after 4)."""
    lo, hi = bounds
    centre = np.asarray(thetas, dtype=np.float64)
    offsets = np.linspace(-1.0, 1.0, 201)
    best = np.full(centre.size, np.inf)
    width = h
    for _ in range(zooms):
        pts = np.clip(centre[:, None] + width * offsets[None, :], lo, hi)
        vals = obj.grid(_circle(R, pts.ravel())).numpy().reshape(pts.shape)
        k = np.argmin(vals, axis=1)
        rows = np.arange(centre.size)
        better = vals[rows, k] <= best
        centre = np.where(better, pts[rows, k], centre)
        best = np.minimum(best, vals[rows, k])
        width /= 100.0
    return centre, best


def circle_search(
    obj: Objective,
    R: float,
    *,
    grid: int = 20_000,
    refine: int = 5,
    arc: tuple[float, float] | None = None,
) -> _Found:
    """Global minimum of obj on the circle of radius R (or on an arc of it).

    Certified by the grid-spacing argument of ``rival_minima``: no other grid minimum can hide a
    value below the best refined one. A float64-flat objective has many equal grid minima and
    fails the test instead of returning a guess. (A second minimum inside the winner's own grid
    basin is not excluded.)
    """
    periodic = arc is None
    lo, hi = (0.0, 2 * math.pi) if periodic else arc
    thetas = lo + (hi - lo) * (np.arange(grid) / grid if periodic else np.linspace(0, 1, grid))
    h = float(thetas[1] - thetas[0])
    vals = obj.grid(_circle(R, thetas)).numpy()
    finite = vals[np.isfinite(vals)]
    noise = NOISE * max(1.0, float(np.abs(finite).max())) if finite.size else 0.0
    minima = grid_minima(vals, periodic, noise)
    if minima.size == 0:  # constant in float64, or nowhere finite: no grid minimum stands out
        best = int(np.argmin(vals))
        p = _circle(R, thetas[best : best + 1])[0]
        details = {"grid": grid, "h": h, "rival_minima": grid}  # any grid point could hide one
        return _Found(p, float(vals[best]), 0, 0.0, False, details)
    minima = minima[np.argsort(vals[minima], kind="stable")]
    bounds = (-math.inf, math.inf) if periodic else (lo, hi)
    angles, values = _refine_angles(obj, R, thetas[minima[:refine]], h, bounds)
    best = int(np.argmin(values))
    f_best, theta_best = float(values[best]), float(angles[best])
    rivals = rival_minima(vals, f_best, int(minima[best]), periodic)
    certified = bool(math.isfinite(f_best) and rivals == 0)
    others = np.delete(np.concatenate([values, vals[minima[refine:]]]), best)
    gap = float(others.min() - f_best) if others.size else math.inf
    details = {"grid": grid, "h": h, "rival_minima": rivals}
    p = _circle(R, np.array([theta_best]))[0]
    return _Found(p, f_best, int(minima.size), gap, certified, details)


def sector_search(
    obj: Objective, r0: float, R: float, arc: tuple[float, float], *, radii=400, angles=801
) -> _Found | None:
    """The lowest point of the annular sector {r0 ≤ ‖p‖ < R, θ ∈ arc} (dim 2) on a grid of
    log-spaced radii (and p = 0 when r0 = 0) and uniform angles, or None if it has no finite
    value. A grid point is a witness, not a certificate: when it lies below the outer arc's
    minimum, the minimiser over the sector is not on the sphere ‖p‖ = R; when none does, that is
    established only at grid resolution."""
    lo = max(r0, 1e-9 * R)
    rs = np.geomspace(lo, R, radii + 1)[:-1]
    ths = np.linspace(arc[0], arc[1], angles)
    rr, tt = np.meshgrid(rs, ths, indexing="ij")
    P = torch.as_tensor(np.stack([rr * np.cos(tt), rr * np.sin(tt)], -1).reshape(-1, 2))
    if r0 == 0:
        P = torch.cat([torch.zeros(1, 2, dtype=DTYPE), P])
    vals = obj.grid(P).numpy()
    if not np.isfinite(vals).any():
        return None
    best = int(np.argmin(vals))
    details = {"sector_grid": (radii, angles), "r0": r0, "radius_over_R": float(P[best].norm()) / R}
    return _Found(P[best], float(vals[best]), 1, math.inf, True, details)


# -------------------------------------------------------------------- dim ≥ 3: restarts


def fibonacci_directions(k: int, d: int, seed: int = 0) -> Tensor:
    """k well-spread unit vectors in R^d: equal angles (d=2), the Fibonacci sphere (d=3), or
    seeded Gaussian directions (d ≥ 4)."""
    if d == 2:
        return _circle(1.0, 2 * math.pi * (np.arange(k) + 0.5) / k)
    if d == 3:
        i = np.arange(k) + 0.5
        z = 1 - 2 * i / k
        phi = math.pi * (3 - math.sqrt(5)) * i
        r = np.sqrt(1 - z**2)
        return torch.as_tensor(np.stack([r * np.cos(phi), r * np.sin(phi), z], -1), dtype=DTYPE)
    gen = torch.Generator().manual_seed(seed)
    U = torch.randn(k, d, generator=gen, dtype=DTYPE)
    return U / torch.linalg.vector_norm(U, dim=-1, keepdim=True)


def _candidate_selections(problem, limit: int) -> list[np.ndarray]:
    """The selections whose ATT-SVM directions seed restarts: the problem's optimal tokens, and
    every α ∈ [T]^n when T**n ≤ limit."""
    n, T = problem.keys.shape[:2]
    if hasattr(problem, "scores"):
        first = [global_opt(problem.scores)]
    elif hasattr(problem, "psi_optimal_tokens"):
        first = [np.asarray(problem.psi_optimal_tokens())]
    else:
        first = []
    if T**n <= limit:
        grid = np.stack(np.meshgrid(*[np.arange(T)] * n, indexing="ij"), -1).reshape(-1, n)
        first += list(grid)
    return first


def svm_directions(problem, limit: int = 16) -> Tensor:
    """Unit ATT-SVM directions of the candidate selections that are feasible (restart seeds)."""
    if not hasattr(problem, "keys"):
        return torch.zeros(0, problem.dim, dtype=DTYPE)
    dirs = []
    for alpha in _candidate_selections(problem, limit):
        sol = att_svm(problem.keys, alpha)
        if sol.ok and float(np.linalg.norm(sol.x)) > 0:
            dirs.append(torch.as_tensor(sol.direction, dtype=DTYPE))
    return torch.stack(dirs) if dirs else torch.zeros(0, problem.dim, dtype=DTYPE)


def _clusters(P: Tensor, values: Tensor) -> list[list[int]]:
    """Group end points by direction (1 − cos ≤ SAME_POINT), best value first."""
    order = torch.argsort(values).tolist()
    groups: list[list[int]] = []
    for i in order:
        for grp in groups:
            if one_minus_cos(P[i], P[grp[0]]) <= SAME_POINT:
                grp.append(i)
                break
        else:
            groups.append([i])
    return groups


def restart_search(
    obj: Objective,
    starts: Tensor,
    project: Callable[[Tensor], Tensor],
    *,
    agree: int = 3,
    iters: int = 100,
) -> _Found:
    """Riemannian descent from every start (batched); the best end point and its support.

    Certified when ≥ ``agree`` restarts stop at the best point, it is a minimum (positive
    tangent curvature), and they agree within SAME_POINT in direction and 1e-9·max(1, |f|) in
    objective. Rows stranded on float64-flat plateaus are counted in ``flat_rows``, not as
    minima.
    """
    run = descend(obj, starts, project, iters=iters)
    return _summarise(run, agree, {"restarts": int(starts.shape[0])})


def _summarise(run: _Descent, agree: int, details: dict) -> _Found:
    """Best end point; distinct minima are clusters of rows that stopped at a minimum."""
    best = int(torch.argmin(run.values))
    f_best = float(run.values[best])
    groups = _clusters(run.P[run.minimum], run.values[run.minimum])
    index = torch.nonzero(run.minimum).flatten()
    groups = [[int(index[i]) for i in grp] for grp in groups]
    tol = 1e-9 * max(1.0, abs(f_best)) if math.isfinite(f_best) else 0.0
    home = next((grp for grp in groups if best in grp), [])
    agreeing = sum(float(run.values[i]) - f_best <= tol for i in home)
    rivals = [float(run.values[grp[0]]) for grp in groups if best not in grp]
    gap = min(rivals) - f_best if rivals else math.inf
    details |= {"agreeing": int(agreeing), "flat_rows": int((~run.minimum & ~run.exited).sum())}
    return _Found(run.P[best], f_best, len(groups), gap, agreeing >= agree, details)


# ----------------------------------------------------------------------------- interior


def interior_search(
    obj: Objective, dim: int, R: float, *, seed: int = 0, starts: int = 4, agree: int = 3
) -> _Found | None:
    """Unconstrained descent from 0 and small random points: the best minimum strictly inside
    the ball, or None. Finite minimisers (F9, F10) are found here; divergent losses exit the
    ball. Certified when ≥ min(agree, starts) descents stop at it."""
    gen = torch.Generator().manual_seed(seed)
    P0 = torch.randn(starts, dim, generator=gen, dtype=DTYPE) * 0.25 * min(R, 1.0)
    P0[0] = 0.0
    run = descend(obj, P0, None, radius=R * (1 - 1e-9))
    keep = run.minimum & ~run.exited
    if not bool(keep.any()):
        return None
    inside = _Descent(run.P[keep], run.values[keep], run.minimum[keep], run.exited[keep])
    return _summarise(inside, min(agree, starts), {"interior_starts": starts})


# ------------------------------------------------------------------------------ public API


def _check_radius(R: float) -> float:
    R = float(R)
    if not (R > 0 and math.isfinite(R)):
        raise ValueError(f"R: must be a positive finite radius, got {R}")
    return R


def _reported(problem, obj: Objective, p: Tensor, value: float) -> float:
    """The engine's log_loss_gap for the global path (spec brief), else the search value."""
    if obj.kind == "log_gap" and hasattr(problem, "log_loss_gap"):
        top = problem.scores[torch.arange(problem.n), torch.as_tensor(obj.alpha)]
        if bool((top == problem.scores.max(-1).values).all()):
            return problem.log_loss_gap(p, obj.alpha)
    return value


def _result(problem, obj, found: _Found, R, method, t0, interior=None) -> RegPoint:
    """Package the winner; an interior minimum wins only if strictly below the sphere's."""
    on_boundary = interior is None or not interior.value < found.value
    if not on_boundary:
        interior.details |= {"sphere_objective": found.value, "sphere": found.details}
        found = interior
    p = found.p
    with torch.no_grad():
        loss = float(problem.loss_value(p))
    if not found.certified:  # the global minimiser is not established: no evidence
        failures.report(failures.REG_PATH, "point not certified", f"R={R:g}, {method}")
    return RegPoint(
        p=p.detach().clone(),
        R=R,
        objective=_reported(problem, obj, p, found.value),
        objective_kind=obj.kind,
        loss=loss,
        n_local_minima=found.n_minima,
        gap=found.gap,
        certified=found.certified,
        on_boundary=on_boundary,
        method=method,
        seconds=time.perf_counter() - t0,
        details=found.details,
    )


def _sphere_starts(problem, restarts: int, seed: int, extra: Tensor | None) -> Tensor:
    starts = [fibonacci_directions(restarts, problem.dim, seed)]
    starts.append(svm_directions(problem) if extra is None else extra)
    return torch.cat(starts)


@one_thread
def reg_path_point(
    problem,
    R: float,
    *,
    method: str = "auto",
    grid: int = 20_000,
    refine: int = 5,
    restarts: int = 64,
    agree: int = 3,
    seed: int = 0,
    starts: Tensor | None = None,
    interior: bool = True,
) -> RegPoint:
    """p_R ∈ argmin_{‖p‖≤R} L(p), global over the ball (Theorem RP, spec §2.4; §2.6 for heads).

    ``method``: "grid" (dim 2 only), "restarts", or "auto" (grid for dim 2). ``starts``: extra
    restart directions (default: the ATT-SVM directions of candidate selections). ``interior``:
    also look for a finite minimiser inside the ball.
    """
    t0 = time.perf_counter()
    R = _check_radius(R)
    obj = objective_for(problem)
    method = ("grid" if problem.dim == 2 else "restarts") if method == "auto" else method
    if method == "grid":
        if problem.dim != 2:
            raise ValueError(f"method: 'grid' needs dim 2, got dim {problem.dim}")
        found = circle_search(obj, R, grid=grid, refine=refine)
    elif method == "restarts":
        P0 = R * _sphere_starts(problem, restarts, seed, starts)
        found = restart_search(obj, P0, sphere_projection(R), agree=agree)
    else:
        raise ValueError(f"method: expected 'auto', 'grid' or 'restarts', got {method!r}")
    inner = interior_search(obj, problem.dim, R, seed=seed) if interior else None
    return _result(problem, obj, found, R, method, t0, inner)


@one_thread
def reg_path(problem, radii: Sequence[float], **kwargs) -> list[RegPoint]:
    """reg_path_point at each radius; the restart seeds (ATT-SVM directions) are solved once."""
    if problem.dim != 2 and "starts" not in kwargs:
        kwargs["starts"] = svm_directions(problem)
    return [reg_path_point(problem, R, **kwargs) for R in radii]


@one_thread
def local_reg_path_point(
    problem,
    alpha,
    R: float,
    eps: float,
    *,
    center=None,
    grid: int = 20_000,
    refine: int = 5,
    restarts: int = 64,
    agree: int = 3,
    seed: int = 0,
    r0: float | None = None,
) -> RegPoint:
    """argmin of L over the cap {‖p‖ = R, cos(p, p^mm(α)) ≥ 1 − eps} (Thm RP-loc, spec §2.5),
    or, with ``r0``, over the cone ∩ ball {r0 ≤ ‖p‖ ≤ R, cos(p, p^mm(α)) ≥ 1 − eps} that the
    theorem states (C_{ε,R0} of spec §1.6; dim 2 only).

    The objective is log|L − L_α| ranked by sign (``log_gap_batch``): inside the cap L can fall
    below the floor of a local α when a higher-scoring non-support token gains attention, so
    the gap is signed. ``center`` defaults to the certified ATT-SVM(α) solution. The cap must be
    narrow enough that α's support tokens dominate the higher-scoring ones (Fig. 1(b): eps ≲
    5e-3); a wide cap's minimiser sits on its edge, which ``details["on_edge"]`` reports.
    """
    t0 = time.perf_counter()
    R = _check_radius(R)
    if not 0 < eps < 1:
        raise ValueError(f"eps: must lie in (0, 1), got {eps}")
    if r0 is not None and (problem.dim != 2 or not 0 <= r0 < R):
        raise ValueError(f"r0: needs dim 2 and 0 ≤ r0 < R, got dim {problem.dim}, r0 = {r0}")
    if center is None:
        sol = att_svm(problem.keys, alpha)
        if not sol.ok:
            raise ValueError(f"alpha: ATT-SVM(α) is {sol.status} ({sol.reason})")
        center = sol.x
    c = torch.as_tensor(center, dtype=DTYPE)
    obj = objective_for(problem, alpha)
    if problem.dim == 2:
        th, half = math.atan2(float(c[1]), float(c[0])), math.acos(1.0 - eps)
        found = circle_search(obj, R, grid=grid, refine=refine, arc=(th - half, th + half))
        method = "grid"
    else:
        starts = _cap_starts(c, eps, restarts, seed)
        found = restart_search(obj, R * starts, cap_projection(R, c, eps), agree=agree)
        method = "restarts"
    inner = None
    if r0 is not None:
        # The sector below the sphere: an inner point wins only strictly below the sphere's best
        # (``_result``), by more than rounding. Where L − L_α < 0 near the cone's apex (a
        # higher-scoring token out-attends α's support tokens at small ‖p‖) it does.
        inner = sector_search(obj, float(r0), R, (th - half, th + half))
        if inner is not None and not inner.value < found.value - NOISE * max(1.0, abs(found.value)):
            inner = None
    for winner in (found, inner):
        if winner is not None:
            norms = max(float(torch.norm(winner.p)) * float(torch.norm(c)), 1e-300)
            cos = (winner.p @ c).item() / norms
            winner.details |= {"on_edge": 1 - cos > eps * (1 - 1e-6), "center": c}
    return _result(problem, obj, found, R, method, t0, inner)


def _cap_starts(center: Tensor, eps: float, k: int, seed: int) -> Tensor:
    """The cap's centre plus k seeded random directions inside the cap."""
    c = center / torch.linalg.vector_norm(center)
    gen = torch.Generator().manual_seed(seed)
    noise = torch.randn(k, c.shape[0], generator=gen, dtype=DTYPE)
    noise -= (noise @ c)[:, None] * c
    noise /= torch.linalg.vector_norm(noise, dim=-1, keepdim=True)
    angle = math.acos(1 - eps) * torch.rand(k, 1, generator=gen, dtype=DTYPE)
    pts = torch.cos(angle) * c + torch.sin(angle) * noise
    return torch.cat([c[None], pts])
