"""The (K, Q) side of *Transformers as SVMs* (arXiv 2308.16898) that does not reduce to the
prompt engine: regularization paths over the Frobenius and nuclear balls in d = 2, the
diagonal (K, Q) model of 2403.08699 with its ℓ1/ℓ2 SVMs, and the nuclear-norm facts the
(K, Q) claims need (normalized margins, the factor identity, a probe of the optimal face).

Regularization paths (spec tfsvm §2.7). W̄_R ∈ argmin_{‖W‖_⋄ ≤ R} L(W) is searched on the sphere
‖W‖_⋄ = R of a 2 × 2 W, a 3-dimensional set, by one procedure for both norms: a dense grid of
a parametrisation of the sphere, then bounded L-BFGS refinement of the best grid points. The
objective is the log excess loss log(L(W) − L*) of ``models.flows.regpath.log_gap_batch`` on the
vectorised keys (spec §6): in float64, L − L* at R = 320 is ~e^{-300}, far below L*'s last bit.

- Frobenius sphere of R⁴: hyperspherical angles (a, b, c) ∈ [0, π]² × [0, 2π].
- Entrywise ℓp sphere (1 < p < ∞; the MD-RP path of 2410.14581, spec §2.10): the Frobenius
  chart's unit direction u rescaled to W = R·u/‖u‖_p, a smooth bijection of the two spheres.
- Nuclear sphere: W = R[c·u vᵀ + ε(1 − c)·u⊥ v⊥ᵀ], u = (cos θ, sin θ), v = (cos φ, sin φ),
  c ∈ [0, 1], ε = ±1 (every 2 × 2 SVD, signs absorbed; ‖W‖_⋆ = R exactly). Rank-1 points
  (c ∈ {0, 1}) are on the boundary of the box, where L-BFGS-B can stop: the nuclear ball's
  minimisers are often exactly low rank, as an ℓ1 ball's are sparse.

The search knows nothing of the SVMs it is compared with: no start is placed at an SVM
direction. The ball's minimiser is taken on its sphere (the loss has no finite minimiser
and decreases along the SVM ray; spec §2.7 searches the boundary).

The diagonal model (spec §2.12). With K = diag(k), Q = diag(q), W = diag(w), w = k ⊙ q, the
logit x_itᵀ W z_i = (x_it ⊙ z_i)ᵀ w: the prompt model with keys x_it ⊙ z_i. So the exact
log-space gradient of w is the prompt engine's, ∇_k = ∇_w ⊙ q and ∇_q = ∇_w ⊙ k, and
‖W‖_⋆ = ‖w‖₁, ‖W‖_F = ‖w‖₂: the nuclear SVM restricted to diagonal W is an ℓ1-SVM (an LP),
the Frobenius one an ℓ2-SVM (``models.oracles.svm.att_svm`` on those keys).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import linprog, minimize, nnls

from models.flows.regpath import objective_for, one_thread
from models.numerics import failures
from models.oracles.normsvm import cross_constraints, matrix_norm
from models.oracles.svm import as_float_array, as_index_array, att_svm, checked_outcome
from models.problems.attention import PromptProblem

Tensor = torch.Tensor
DTYPE = torch.float64

#: Certificate tolerance of the diagonal ℓ1-SVM (HiGHS' dual simplex is exact to ~1e-12 on
#: these LPs; the same 1e-7 as models.oracles.svm's default certificate).
DIAG_TOL = 1e-7
#: Two refinements reached the same minimum of the log excess loss when their objectives agree
#: to this (absolute: the log-gap is O(R) and L-BFGS-B stops at relative 1e-13 of it).
SAME_VALUE = 1e-7
#: ... and their directions agree to 1 − corr ≤ this.
SAME_DIRECTION = 1e-7

NORMS = ("fro", "nuc", "lp")


# =============================================================================================
# Norm facts
# =============================================================================================


def normalized_margin(X, Z, alpha, W, norm: str) -> float:
    """min_{i,t≠α_i} (x_iα − x_it)ᵀ W z_i / ‖W‖_⋄ (spec §1.4 "Margin form"): at most
    1/‖W^mm_⋄(α)‖_⋄, with equality exactly on the SVM's optimal set (unique or not)."""
    A, _ = cross_constraints(X, Z, alpha)
    W = as_float_array(W, "W", 2)
    scale = float(np.max(np.abs(W)))
    if scale == 0:
        return math.nan
    W = W / scale
    return float((A @ W.ravel()).min(initial=math.inf)) / matrix_norm(W, norm)


def balanced_factors(W) -> tuple[np.ndarray, np.ndarray]:
    """K = UΣ^{1/2}, Q = VΣ^{1/2} from the SVD W = UΣVᵀ: KQᵀ = W and ½(‖K‖² + ‖Q‖²) = ‖W‖_⋆,
    the least factor energy (spec §2.7 "Key identity")."""
    U, s, Vt = np.linalg.svd(as_float_array(W, "W", 2))
    r = np.sqrt(s)
    return U * r, Vt.T * r


def factor_energy(K, Q) -> float:
    """½(‖K‖²_F + ‖Q‖²_F) ≥ ‖KQᵀ‖_⋆ (AM–GM on the singular values)."""
    return 0.5 * float(np.sum(np.square(K)) + np.sum(np.square(Q)))


# =============================================================================================
# Regularization paths in d = 2
# =============================================================================================


def frobenius_sphere(R: float, params: Tensor) -> Tensor:
    """vec W on ‖W‖_F = R from hyperspherical angles (a, b, c), rows of ``params`` (k, 3)."""
    a, b, c = params.unbind(-1)
    sa, sb = torch.sin(a), torch.sin(b)
    return R * torch.stack(
        [torch.cos(a), sa * torch.cos(b), sa * sb * torch.cos(c), sa * sb * torch.sin(c)], -1
    )


def nuclear_sphere(R: float, params: Tensor, sign: float) -> Tensor:
    """vec W on ‖W‖_⋆ = R: W = R[c·u vᵀ + sign·(1 − c)·u⊥ v⊥ᵀ] from (θ, φ, c) rows (k, 3)."""
    th, ph, c = params.unbind(-1)
    u = torch.stack([torch.cos(th), torch.sin(th)], -1)
    v = torch.stack([torch.cos(ph), torch.sin(ph)], -1)
    up = torch.stack([-torch.sin(th), torch.cos(th)], -1)
    vp = torch.stack([-torch.sin(ph), torch.cos(ph)], -1)
    W = c[:, None, None] * u[:, :, None] * v[:, None, :]
    W = W + sign * (1 - c)[:, None, None] * up[:, :, None] * vp[:, None, :]
    return R * W.reshape(-1, 4)


def lp_sphere(R: float, params: Tensor, p: float) -> Tensor:
    """vec W on the entrywise ‖W‖_p = R: the Frobenius chart's direction u (``frobenius_sphere``
    at radius 1) rescaled to R·u/‖u‖_p, from (a, b, c) rows (k, 3)."""
    u = frobenius_sphere(1.0, params)
    return R * u / torch.linalg.vector_norm(u, ord=p, dim=-1, keepdim=True)


@dataclass(frozen=True)
class _Sheet:
    """One chart of a sphere: a map params → vec W, the params' box, and its grid axes."""

    to_w: object  # callable (k, 3) → (k, 4)
    bounds: tuple[tuple[float, float], ...]
    axes: tuple[np.ndarray, ...]


def _sheets(norm: str, R: float, grid: int, p: float | None = None) -> list[_Sheet]:
    """Charts covering the sphere of ``norm`` (exponent ``p`` for "lp") with about ``grid`` grid
    points in all."""
    if norm in ("fro", "lp"):
        m = max(4, round((grid / 2) ** (1 / 3)))  # a, b: m points each; c: 2m
        a = np.linspace(0, math.pi, m)
        c = np.linspace(0, 2 * math.pi, 2 * m, endpoint=False)
        box = ((0.0, math.pi), (0.0, math.pi), (-math.inf, math.inf))
        if norm == "lp":
            return [_Sheet(lambda P: lp_sphere(R, P, p), box, (a, a, c))]
        return [_Sheet(lambda P: frobenius_sphere(R, P), box, (a, a, c))]
    if norm == "nuc":
        m = max(4, round((grid / 4) ** (1 / 3)))  # per sheet: θ 2m, φ m, c m
        th = np.linspace(0, 2 * math.pi, 2 * m, endpoint=False)
        ph = np.linspace(0, math.pi, m, endpoint=False)
        c = np.linspace(0, 1, m)
        box = ((-math.inf, math.inf), (-math.inf, math.inf), (0.0, 1.0))
        return [
            _Sheet(lambda P, s=s: nuclear_sphere(R, P, s), box, (th, ph, c)) for s in (1.0, -1.0)
        ]
    raise ValueError(f"norm: expected one of {NORMS}, got {norm!r}")


@dataclass
class BallPoint:
    """W̄_R on the sphere ‖W‖_⋄ = R: ``W`` (2 × 2), the log excess loss there (``objective``),
    how many of the ``refined`` best grid points ended at it (``agree``), the grid size."""

    W: np.ndarray
    R: float
    norm: str
    objective: float
    agree: int
    refined: int
    grid: int
    seconds: float
    minima: list[float] = field(default_factory=list)
    p: float | None = None

    @property
    def certified(self) -> bool:
        """At least two refinements from distinct grid points reached the best point: the local
        refinement converged. That the point is the global minimiser rests on the grid's density
        (tests/test_kqpath.py compares it with independent searches)."""
        return self.agree >= 2


def _refine(obj, sheet: _Sheet, starts: np.ndarray, iters: int) -> tuple[np.ndarray, np.ndarray]:
    """Bounded L-BFGS from every row of ``starts`` (k, 3) on one chart, all at once: the sum of
    the k objectives is separable, so its minimiser is every row's own local minimiser (one
    scipy call and one batched backward pass per iteration instead of k). The objective and
    its W-gradient come from its closed form where it has one (``Objective.closed``; autograd
    of the log gap loses the leak-sized gradients of saturated points), chained through the
    chart by autograd. Returns the end points as vec W (k, 4) and their objectives (k,)."""
    k = len(starts)
    closed = getattr(obj, "closed", None)  # tests pass plain callables

    def fun(x):
        P = torch.as_tensor(x, dtype=DTYPE).reshape(k, 3).requires_grad_(True)
        W = sheet.to_w(P)
        if closed is not None:  # f and ∇_W f in closed form, chained through the chart
            f, g_w, _ = closed(W.detach(), 1)
            (g,) = torch.autograd.grad(W, P, grad_outputs=g_w.nan_to_num(0.0))
        else:
            f = obj(W)
            (g,) = torch.autograd.grad(f.sum(), P)
        return float(f.detach().sum()), g.nan_to_num(0.0).numpy().ravel()

    res = minimize(
        fun,
        np.asarray(starts, dtype=np.float64).ravel(),
        jac=True,
        method="L-BFGS-B",
        bounds=list(sheet.bounds) * k,
        options={"maxiter": iters, "ftol": 1e-15, "gtol": 1e-11, "maxcor": 30},
    )
    with torch.no_grad():
        P = torch.as_tensor(res.x, dtype=DTYPE).reshape(k, 3)
        W = sheet.to_w(P)
        return W.numpy(), (obj(W) if closed is None else closed(W, 0)[0]).numpy()


@one_thread
def _ball_point(problem: PromptProblem, R, norm, grid, refine, iters, p=None) -> BallPoint:
    t0 = time.perf_counter()
    if problem.dim != 4:
        raise ValueError(f"problem: ball paths are for 2 × 2 W (dim 4), got dim {problem.dim}")
    if not (R > 0 and math.isfinite(R)):
        raise ValueError(f"R: must be a positive finite radius, got {R}")
    obj = objective_for(problem)
    candidates = []  # (value, sheet index, params)
    sheets = _sheets(norm, R, grid, p)
    total = 0
    for j, sheet in enumerate(sheets):
        mesh = np.stack(np.meshgrid(*sheet.axes, indexing="ij"), -1).reshape(-1, 3)
        total += len(mesh)
        vals = obj.grid(sheet.to_w(torch.as_tensor(mesh, dtype=DTYPE))).numpy()
        best = np.argsort(vals, kind="stable")[:refine]
        candidates += [(float(vals[k]), j, mesh[k]) for k in best]
    candidates.sort(key=lambda c: c[0])
    chosen = candidates[:refine]
    ends_w, ends_f = [], []
    for j, sheet in enumerate(sheets):
        starts = np.array([start for _, jj, start in chosen if jj == j])
        if len(starts):
            w, f = _refine(obj, sheet, starts, iters)
            ends_w.append(w)
            ends_f.append(f)
    ends_w, values = np.concatenate(ends_w), np.concatenate(ends_f)
    k = int(np.argmin(values))
    w_best, f_best = ends_w[k], float(values[k])
    agree = sum(
        abs(f - f_best) <= SAME_VALUE and _one_minus_corr(w, w_best) <= SAME_DIRECTION
        for w, f in zip(ends_w, values, strict=True)
    )
    point = BallPoint(
        W=w_best.reshape(2, 2),
        R=float(R),
        norm=norm,
        objective=f_best,
        agree=int(agree),
        refined=len(values),
        grid=total,
        seconds=time.perf_counter() - t0,
        minima=sorted(set(np.round(values, 9).tolist())),
        p=p,
    )
    if not point.certified:
        failures.report(failures.REG_PATH, "ball point not confirmed", f"{norm}, R={R:g}")
    return point


def ball_path_point(
    problem: PromptProblem,
    R: float,
    norm: str,
    *,
    grid: int = 60_000,
    refine: int = 8,
    iters: int = 400,
    p: float | None = None,
) -> BallPoint:
    """W̄_R ∈ argmin_{‖W‖_⋄ = R} log(L(W) − L*) for a 2 × 2 W (``problem``: the vectorised
    prompt problem of a d = 2 ``CrossProblem``), ⋄ = "fro" or "nuc" (spec §2.7), or "lp", the
    entrywise ℓp norm with exponent ``p`` (1 < p < ∞; spec §2.10 MD-RP).

    A grid of about ``grid`` points on the sphere's charts, then bounded L-BFGS from the
    ``refine`` best; the winner is confirmed (``certified``) when at least two refinements reach
    it, and an unconfirmed point is reported to models.numerics.failures (a search that could not
    decide is no evidence). L* is the loss floor of the top-score tokens. Cost: ~0.3 s (one thread).

    Accuracy: on the visualization instances this agrees with ``models.flows.regpath``'s Riemannian
    Newton restarts (Frobenius ball) to 1 − corr ≤ 1e-9, and no one of 20,000 random sphere
    points beats it (all three balls; tests/test_kqpath.py)."""
    if norm not in NORMS:
        raise ValueError(f"norm: expected one of {NORMS}, got {norm!r}")
    if norm == "lp":
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 1 < p < math.inf:
            raise ValueError(f"norm: 'lp' needs an exponent 1 < p < ∞, got p={p!r}")
        p = float(p)
    elif p is not None:
        raise ValueError(f"p: only the 'lp' norm takes an exponent, got p={p!r} for {norm!r}")
    return _ball_point(problem, float(R), norm, int(grid), int(refine), int(iters), p)


def _one_minus_corr(a: np.ndarray, b: np.ndarray) -> float:
    return float(1.0 - a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


# =============================================================================================
# The diagonal model (2403.08699)
# =============================================================================================


def diagonal_keys(X, Z) -> Tensor:
    """The keys x_it ⊙ z_i (n, T, d) on which diagonal W = diag(w) is the prompt model."""
    X = torch.as_tensor(as_float_array(X, "X", 3))
    Z = torch.as_tensor(as_float_array(Z, "Z", 2))
    if Z.shape != (X.shape[0], X.shape[2]):
        raise ValueError(f"Z: expected shape {(X.shape[0], X.shape[2])}, got {tuple(Z.shape)}")
    return X * Z[:, None, :]


def diagonal_problem(problem) -> PromptProblem:
    """The prompt problem of W = diag(w) for a ``models.problems.cross.CrossProblem`` (same loss and
    scores, keys x_it ⊙ z_i)."""
    keys = diagonal_keys(problem.X, problem.Z)
    return PromptProblem(keys=keys, scores=problem.scores, loss=problem.loss)


@dataclass(frozen=True)
class DiagSVM:
    """The diagonal SVM min ‖w‖_p s.t. ((x_iα − x_it) ⊙ z_i)ᵀw ≥ 1, p ∈ {1, 2}.

    ``status`` "optimal" (certified by duality), "infeasible", "inaccurate" or "solver_error";
    ``w`` the solution, ``value`` ‖w‖_p, ``duals`` λ ≥ 0, ``residuals`` the certificate's."""

    norm: str
    status: str
    w: np.ndarray | None
    value: float
    duals: np.ndarray | None
    residuals: dict
    reason: str

    def __post_init__(self):
        checked_outcome(self.status, self.reason)

    @property
    def ok(self) -> bool:
        return self.status == "optimal"


def diag_constraints(X, Z, alpha) -> np.ndarray:
    """Rows (x_iα − x_it) ⊙ z_i for t ≠ α_i, (m, d)."""
    X = as_float_array(X, "X", 3)
    n, T, d = X.shape
    Z = as_float_array(Z, "Z", 2)
    alpha = as_index_array(alpha, "alpha", (n,), T)
    i_idx, t_idx = np.nonzero(np.arange(T)[None, :] != alpha[:, None])
    return (X[i_idx, alpha[i_idx]] - X[i_idx, t_idx]) * Z[i_idx]


def diag_certificate(A: np.ndarray, w: np.ndarray, lam: np.ndarray, norm: str) -> dict:
    """Residuals of min ‖w‖_p s.t. Aw ≥ 1 against its dual max Σλ s.t. λ ≥ 0, ‖Aᵀλ‖_{p*} ≤ 1
    (p* = ∞ for ℓ1, 2 for ℓ2): feasible w, dual-feasible λ and ‖w‖_p = Σλ prove optimality."""
    dual_p = math.inf if norm == "l1" else 2.0
    primal_p = 1.0 if norm == "l1" else 2.0
    value = float(np.linalg.norm(w, primal_p))
    scale = max(1.0, value)
    return {
        "primal": float(max(0.0, 1.0 - (A @ w).min(initial=math.inf))),
        "dual_sign": float(max(0.0, -lam.min(initial=0.0))),
        "dual_norm": float(max(0.0, np.linalg.norm(A.T @ lam, dual_p) - 1.0)),
        "gap": abs(value - float(lam.sum())) / scale,
    }


def diag_svm(X, Z, alpha, norm: str = "l1", *, tol: float = DIAG_TOL) -> DiagSVM:
    """The diagonal attention SVM (spec §2.12): ``norm`` "l1" (= the nuclear SVM over diagonal
    W; an LP, HiGHS) or "l2" (= the Frobenius one; the certified oracle ``att_svm`` on the keys
    x_it ⊙ z_i). Both answers pass the same duality certificate, computed here."""
    if norm not in ("l1", "l2"):
        raise ValueError(f"norm: expected 'l1' or 'l2', got {norm!r}")
    A = diag_constraints(X, Z, alpha)
    m, d = A.shape
    if norm == "l2":
        sol = att_svm(diagonal_keys(X, Z), alpha, tol=tol)
        if not sol.ok:
            return DiagSVM(norm, sol.status, sol.x, math.nan, None, {}, sol.reason)
        w = sol.x
        active = A @ w <= 1.0 + 1e-6 * max(1.0, float(np.linalg.norm(w)))
        lam = np.zeros(m)
        if active.any():  # scipy's nnls aborts the interpreter on a matrix with no column
            lam[active] = nnls(A[active].T, w)[0] / float(np.linalg.norm(w))
        why = f"oracle ({sol.solver})"
    else:
        # w = w⁺ − w⁻ ≥ 0 parts: min 1ᵀ(w⁺ + w⁻) s.t. A(w⁺ − w⁻) ≥ 1.
        res = linprog(
            np.ones(2 * d),
            A_ub=-np.hstack([A, -A]),
            b_ub=-np.ones(m),
            bounds=(0, None),
            method="highs",
        )
        if res.status == 2:
            return DiagSVM(norm, "infeasible", None, math.nan, None, {}, res.message)
        if res.status != 0:
            failures.report(failures.SVM_ORACLE, "solver_error", f"diagonal ℓ1 LP: {res.message}")
            return DiagSVM(norm, "solver_error", None, math.nan, None, {}, res.message)
        w = res.x[:d] - res.x[d:]
        lam = -np.asarray(res.ineqlin.marginals, dtype=np.float64)
        why = "HiGHS LP"
    residuals = diag_certificate(A, w, lam, norm)
    bad = [k for k, v in residuals.items() if not v <= tol]
    if bad:
        reason = f"{why}; certificate fails: " + ", ".join(f"{k}={residuals[k]:.1e}" for k in bad)
        failures.report(failures.SVM_ORACLE, "inaccurate", f"diagonal {norm}: {reason}")
        return DiagSVM(norm, "inaccurate", w, math.nan, lam, residuals, reason)
    value = float(np.linalg.norm(w, 1.0 if norm == "l1" else 2.0))
    return DiagSVM(norm, "optimal", w, value, lam, residuals, f"{why}; certified")


@dataclass
class DiagRun:
    """Recorded iterates of diagonal (k, q): ``steps`` (r,), ``ks``, ``qs`` (r, d)."""

    steps: np.ndarray
    ks: np.ndarray
    qs: np.ndarray
    stop: str
    seconds: float

    @property
    def w(self) -> np.ndarray:
        """The last W's diagonal k ⊙ q."""
        return self.ks[-1] * self.qs[-1]


def diag_kq_ngd(
    problem: PromptProblem, k0, q0, *, lr: float = 0.1, steps: int = 8000, record_every=0
) -> DiagRun:
    """Per-factor NGD on diagonal (K, Q) (spec §2.12): k ← k − lr·g_k/‖g_k‖, q ← q − lr·g_q/‖g_q‖
    with g_k = ∇_w L ⊙ q, g_q = ∇_w L ⊙ k at w = k ⊙ q, the direction of ∇_w L from the
    prompt engine's log space (``problem`` = ``diagonal_problem(cross)``). A factor whose
    gradient is exactly zero does not move. ``record_every`` 0 keeps the first and last."""
    t0 = time.perf_counter()
    k = np.array(as_float_array(k0, "k0", 1))
    q = np.array(as_float_array(q0, "q0", 1))
    if k.shape != (problem.dim,) or q.shape != k.shape:
        raise ValueError(f"k0, q0: expected shape ({problem.dim},), got {k.shape}, {q.shape}")
    ks, qs, at = [k.copy()], [q.copy()], [0]
    stop, done = "step budget", 0
    for step in range(1, steps + 1):
        log_scale, g = problem.gradient_log_np(np.ascontiguousarray(k * q))
        gk, gq = g * q, g * k
        nk, nq = float(np.linalg.norm(gk)), float(np.linalg.norm(gq))
        if log_scale == -math.inf or (nk == 0 and nq == 0):
            stop = "stationary point (both factor gradients exactly zero)"
            break
        if nk > 0:
            k = k - lr * gk / nk
        if nq > 0:
            q = q - lr * gq / nq
        done = step
        if record_every and step % record_every == 0:
            ks.append(k.copy())
            qs.append(q.copy())
            at.append(step)
    if at[-1] != done:
        ks.append(k.copy())
        qs.append(q.copy())
        at.append(done)
    return DiagRun(np.asarray(at), np.stack(ks), np.stack(qs), stop, time.perf_counter() - t0)
