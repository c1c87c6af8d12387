"""Joint training of the head v and the prompt p: f(X) = ⟨Xv, softmax(XWp)⟩ (spec §2.7, Fig. 3).

Theorem J (recalled, [R?] hypotheses): with logistic loss, v_r/r → v^mm/‖v^mm‖ (the v-SVM on the
selected tokens) and p_R/R → p^relax/‖p^relax‖, the ATT-SVM whose constraints are relaxed to
≥ 0 for inputs that are not support vectors of the v-SVM. When every input is a support vector
("tight") p^relax = p^full. The calibration runs (spec §2.7) show that the rate at which r and R
grow matters: R ≫ r gives p^full (F12).

Numerics: the p-gradient at the current v is the prompt problem's, reused from
``PromptProblem.gradient_log_np`` with scores y_i·X_i v. The v-gradient
∇_v L = (1/n) Σ_i ℓ'(m_i) y_i X_iᵀ s_i is combined in log space from log|ℓ'(m_i)| (the loss's
``log_neg_deriv``) and log s_it, so its direction stays exact when margins are in the hundreds
and ℓ' underflows float64 (joint NGD drives margins to ~100 in 1000 steps).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from models.flows import kernels
from models.flows.regpath import NOISE, grid_minima, one_thread, rival_minima
from models.numerics import failures
from models.numerics.logspace import combine_np
from models.oracles.svm import SVMSolution, att_svm, v_svm
from models.problems.attention import DTYPE, PromptProblem, as_float_tensor
from models.problems.losses import Loss, get_loss

Tensor = torch.Tensor


class JointProblem:
    """Data X (n, T, d), labels y (n,) and a fixed W (d, d) (default I); v and p are trained."""

    def __init__(self, X, y, W=None, loss="logistic"):
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
        self.loss: Loss = get_loss(loss)
        self._np = (self.X.numpy(), self.y.numpy())

    @property
    def n(self) -> int:
        return self.X.shape[0]

    @property
    def dim_v(self) -> int:
        return self.X.shape[2]

    @property
    def dim_p(self) -> int:
        return self.keys.shape[2]

    # ---- the model -------------------------------------------------------------------------
    def scores(self, v) -> Tensor:
        """γ_it = y_i vᵀx_it (n, T): the token scores at this head (spec §1.3)."""
        return self.y[:, None] * (self.X @ as_float_tensor(v, "v", 1))

    def prompt_problem(self, v) -> PromptProblem:
        """The p-problem at a fixed head v: keys XW, scores y_i X_i v."""
        return PromptProblem(self.keys, self.scores(v), self.loss)

    def margins(self, v: Tensor, p: Tensor) -> Tensor:
        """y_i f(X_i) = Σ_t s_it γ_it, differentiable in v and p."""
        s = torch.softmax(self.keys @ p, dim=-1)
        return self.y * (s * (self.X @ v)).sum(-1)

    def loss_value(self, v: Tensor, p: Tensor) -> Tensor:
        """L(v, p) = (1/n) Σ_i ℓ(y_i f(X_i)); differentiable by autograd."""
        return self.loss.value(self.margins(v, p)).mean()

    def margins_pairs(self, V: Tensor, P: Tensor) -> Tensor:
        """Margins for row pairs (V_k, P_k): shape (k, n)."""
        s = torch.softmax(torch.einsum("itd,kd->kit", self.keys, P), dim=-1)
        xv = torch.einsum("itd,kd->kit", self.X, V)
        return self.y * (s * xv).sum(-1)

    def margins_grid(self, V: Tensor, P: Tensor) -> Tensor:
        """Margins for every pair of rows (a of V, b of P): shape (a, b, n)."""
        s = torch.softmax(torch.einsum("itd,bd->bit", self.keys, P), dim=-1)
        xv = torch.einsum("itd,ad->ait", self.X, V)
        return self.y * torch.einsum("bit,ait->abi", s, xv)

    # ---- log-space gradients ---------------------------------------------------------------
    def gradient_p_log(self, v, p) -> tuple[float, np.ndarray]:
        """∇_p L as (log_scale, vec) at fixed v: the prompt problem's log-space gradient."""
        v = as_float_tensor(v, "v", 1).detach()
        p = as_float_tensor(p, "p", 1).detach()
        return self._gradient_p_log(v, p.numpy())

    def _gradient_p_log(self, v: Tensor, p: np.ndarray) -> tuple[float, np.ndarray]:
        # PromptProblem.trusted: keys and scores come from this (checked) problem, and joint
        # NGD calls this 1000 times per run, where the checks cost a third of a step.
        prompt = PromptProblem.trusted(self.keys, self.y[:, None] * (self.X @ v), self.loss)
        return prompt.gradient_log_np(np.asarray(p, dtype=np.float64))

    def gradient_v_log(self, v, p) -> tuple[float, np.ndarray]:
        """∇_v L = (1/n) Σ_i ℓ'(m_i) y_i Σ_t s_it x_it as (log_scale, vec), max|vec| = 1.

        Every coefficient is kept as log|ℓ'(m_i)| + log s_it with sign −y_i (ℓ' < 0 for the
        strictly decreasing losses; the square loss takes its sign from ℓ').
        """
        v = as_float_tensor(v, "v", 1).detach()
        p = as_float_tensor(p, "p", 1).detach()
        return self._gradient_v_log(v, p)

    def _gradient_v_log(self, v: Tensor, p: Tensor) -> tuple[float, np.ndarray]:
        X, y = self._np
        log_s = torch.log_softmax(self.keys @ p, dim=-1).numpy()
        m = self.margins(v, p)
        if self.loss.strictly_decreasing:
            log_lp, sign_lp = self.loss.log_neg_deriv(m).numpy(), -np.ones(self.n)
        else:
            lp = self.loss.deriv(m).numpy()
            with np.errstate(divide="ignore"):
                log_lp, sign_lp = np.log(np.abs(lp)), np.sign(lp)
        log_w = (log_lp[:, None] + log_s).reshape(-1)
        sign_w = np.repeat(sign_lp * y, X.shape[1])
        log_scale, vec = combine_np(log_w, sign_w, X.reshape(-1, X.shape[2]))
        return log_scale - math.log(self.n), vec

    def gradients(self, v, p) -> tuple[Tensor, Tensor]:
        """(∇_v L, ∇_p L) as plain tensors (they underflow to 0 once margins are large)."""
        out = []
        for log_scale, vec in (self.gradient_v_log(v, p), self.gradient_p_log(v, p)):
            size = 0.0 if log_scale == -math.inf else math.exp(log_scale)
            out.append(torch.as_tensor(vec * size, dtype=DTYPE))
        return out[0], out[1]

    def selected_mass(self, v, p, alpha=None) -> float:
        """Mean softmax mass on α_i (default: the top-score token of each input at v)."""
        with torch.no_grad():
            s = torch.softmax(self.keys @ as_float_tensor(p, "p", 1), dim=-1)
            a = self.scores(v).argmax(-1) if alpha is None else torch.as_tensor(alpha)
            return float(s[torch.arange(self.n), a].mean())


# -------------------------------------------------------------------------------- NGD


@dataclass
class JointTrajectory:
    """Recorded iterates of joint NGD (spec §4 Fig. 3): panels (a)/(b) use vs, ps; panel (c)
    uses attention_mass (mean softmax on the selected tokens) and output_prob (mean
    σ(y_i f(X_i)), the logistic probability of the correct label)."""

    steps: np.ndarray
    vs: Tensor
    ps: Tensor
    losses: np.ndarray
    attention_mass: np.ndarray
    output_prob: np.ndarray
    stop: str
    seconds: float

    @property
    def v(self) -> Tensor:
        return self.vs[-1]

    @property
    def p(self) -> Tensor:
        return self.ps[-1]


def _unit(log_scale: float, vec: np.ndarray) -> np.ndarray:
    """The unit vector of a log-space gradient; zeros for an exactly zero gradient."""
    if log_scale == -math.inf:
        return np.zeros_like(vec)
    return vec / np.linalg.norm(vec)


@one_thread
def joint_ngd(
    problem: JointProblem,
    v0,
    p0,
    *,
    lr: float = 0.1,
    steps: int = 1000,
    record_every: int = 1,
    alpha=None,
) -> JointTrajectory:
    """Normalised GD on (v, p), each gradient normalised separately (the paper's Fig. 3
    protocol, spec §4), with directions from log space and no ``+ eps``."""
    t0 = time.perf_counter()
    v = as_float_tensor(v0, "v0", 1).detach().numpy().copy()
    p = as_float_tensor(p0, "p0", 1).detach().numpy().copy()
    rec_k, rec_v, rec_p = [0], [v.copy()], [p.copy()]
    stop = "step budget"
    k = 0  # steps = 0: the start is the whole trajectory
    for k in range(1, steps + 1):
        # v and p are the loop's own finite float64 arrays: the unchecked gradients
        v_t, p_t = torch.from_numpy(v), torch.from_numpy(p)
        gv = _unit(*problem._gradient_v_log(v_t, p_t))
        gp = _unit(*problem._gradient_p_log(v_t, p))
        if not gv.any() and not gp.any():
            stop = "stationary point (both gradients exactly zero)"
            break
        v, p = v - lr * gv, p - lr * gp
        if k % record_every == 0 or k == steps:
            rec_k.append(k)
            rec_v.append(v.copy())
            rec_p.append(p.copy())
    if rec_k[-1] != k:
        rec_k.append(k)
        rec_v.append(v.copy())
        rec_p.append(p.copy())
    vs = torch.as_tensor(np.stack(rec_v), dtype=DTYPE)
    ps = torch.as_tensor(np.stack(rec_p), dtype=DTYPE)
    return _trajectory(problem, rec_k, vs, ps, alpha, stop, t0)


def _trajectory(problem, ks, vs, ps, alpha, stop, t0) -> JointTrajectory:
    with torch.no_grad():
        margins = torch.stack([problem.margins(v, p) for v, p in zip(vs, ps, strict=True)])
        losses = problem.loss.value(margins).mean(-1).numpy()
        prob = torch.sigmoid(margins).mean(-1).numpy()
    mass = np.array([problem.selected_mass(v, p, alpha) for v, p in zip(vs, ps, strict=True)])
    return JointTrajectory(
        np.asarray(ks), vs, ps, losses, mass, prob, stop, time.perf_counter() - t0
    )


# ------------------------------------------------------------------------- the SVMs


@dataclass
class JointSVMs:
    """The max-margin objects of Theorem J for a selection α (spec §2.7).

    ``support``: inputs whose selected token is a support vector of the v-SVM; ``tight`` when
    all are, and then p^relax = p^full.
    """

    alpha: np.ndarray
    v_mm: SVMSolution
    support: np.ndarray
    p_relax: SVMSolution
    p_full: SVMSolution

    @property
    def tight(self) -> bool:
        return bool(self.support.all())


def relaxed_svm_for(problem: JointProblem, alpha) -> JointSVMs:
    """v^mm = v-SVM(x_{iα_i}, y); S = its support vectors; p^relax = ATT-SVM(α) with the
    inputs outside S relaxed to ≥ 0; p^full = ATT-SVM(α)."""
    alpha = np.asarray(alpha, dtype=np.int64)
    Z = problem.X[torch.arange(problem.n), torch.as_tensor(alpha)]
    v_mm = v_svm(Z, problem.y)
    if not v_mm.ok:
        raise ValueError(f"alpha: the v-SVM of the selected tokens is {v_mm.status}")
    support = np.asarray(v_mm.active, dtype=bool)
    p_relax = att_svm(problem.keys, alpha, relaxed_inputs=~support)
    p_full = att_svm(problem.keys, alpha)
    return JointSVMs(alpha, v_mm, support, p_relax, p_full)


# ---------------------------------------------------------------- joint regularization path


@dataclass(frozen=True)
class JointObjective:
    """log L (logistic, exponential: L → 0 on the path, so its log keeps relative accuracy;
    compiled, ``kernels.joint_log_losses``) or the plain L (tensor passes), on pairs of rows
    (V_k, P_k) or on the full grid V × P."""

    problem: JointProblem
    kind: str

    def _log_losses(self, V: Tensor, P: Tensor, grid: bool) -> Tensor:
        """log L by the compiled ``kernels.joint_log_losses`` (pairs) or
        ``kernels.joint_log_loss_grid`` (the full grid)."""
        problem = self.problem
        arrays = (problem.keys, problem.X, problem.y, V, P)
        arrays = [np.ascontiguousarray(a.detach().numpy(), dtype=np.float64) for a in arrays]
        if grid:
            out = np.empty((V.shape[0], P.shape[0]))
            kernels.joint_log_loss_grid(*arrays, problem.loss.kernel_code, out)
        else:
            out = np.empty(V.shape[0])
            kernels.joint_log_losses(*arrays, problem.loss.kernel_code, out)
        return torch.from_numpy(out)

    def pairs(self, V: Tensor, P: Tensor) -> Tensor:
        if self.kind == "log_loss":
            return self._log_losses(V, P, False).nan_to_num(nan=math.inf)
        with torch.no_grad():
            margins = self.problem.margins_pairs(V, P)
            return self.problem.loss.value(margins).mean(-1).nan_to_num(nan=math.inf)

    def grid(self, V: Tensor, P: Tensor) -> Tensor:
        if self.kind == "log_loss":
            return self._log_losses(V, P, True).nan_to_num(nan=math.inf)
        with torch.no_grad():
            margins = self.problem.margins_grid(V, P)
            return self.problem.loss.value(margins).mean(-1).nan_to_num(nan=math.inf)


def joint_objective(problem: JointProblem) -> JointObjective:
    """The search objective of the joint path (log L where the loss allows it)."""
    kind = "log_loss" if problem.loss.name in ("logistic", "exponential") else "loss"
    return JointObjective(problem, kind)


@dataclass
class JointRegPoint:
    """(v_r, p_R) ∈ argmin_{‖v‖≤r, ‖p‖≤R} L(v, p) found on the boundary torus ‖v‖ = r, ‖p‖ = R.

    ``radial_descent``: at the winner, growing ‖v‖ and ‖p‖ both lower L (a necessary condition
    for a boundary minimiser); ``certified``: the grid argument of ``models.flows.regpath`` applied
    to the profile g(p-angle) = min over the v-angle.
    """

    v: Tensor
    p: Tensor
    r: float
    R: float
    objective: float
    objective_kind: str
    n_local_minima: int
    gap: float
    certified: bool
    radial_descent: bool
    seconds: float
    details: dict


def _on_circle(radius: float, angles: np.ndarray) -> Tensor:
    a = torch.as_tensor(angles, dtype=DTYPE)
    return radius * torch.stack([torch.cos(a), torch.sin(a)], dim=-1)


def _zoom_pairs(obj: JointObjective, r, R, a, b, h_a, h_b, rounds: int, m: int = 21):
    """Refine many (v-angle, p-angle) pairs at once by shrinking m×m grids (×10 per round);
    h_b = 0 refines the v-angle only. Returns the refined angles and values."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    best = np.full(a.shape, np.inf)
    offsets = np.linspace(-1.0, 1.0, m)
    oa, ob = np.meshgrid(offsets, offsets if h_b > 0 else np.zeros(1), indexing="ij")
    oa, ob = oa.ravel(), ob.ravel()
    for _ in range(rounds):
        A = a[:, None] + h_a * oa[None, :]
        B = b[:, None] + h_b * ob[None, :]
        vals = obj.pairs(_on_circle(r, A.ravel()), _on_circle(R, B.ravel())).numpy()
        vals = vals.reshape(A.shape)
        k = np.argmin(vals, axis=1)
        rows = np.arange(a.size)
        better = vals[rows, k] <= best
        a = np.where(better, A[rows, k], a)
        b = np.where(better, B[rows, k], b)
        best = np.minimum(best, vals[rows, k])
        h_a, h_b = h_a / 10.0, h_b / 10.0
    return a, b, best


def _radial_descent(problem: JointProblem, v: Tensor, p: Tensor) -> bool:
    v = v.clone().requires_grad_(True)
    p = p.clone().requires_grad_(True)
    gv, gp = torch.autograd.grad(problem.loss_value(v, p), (v, p))
    return bool((gv @ v) <= 0 and (gp @ p) <= 0)


@one_thread
def joint_reg_path_point(
    problem: JointProblem,
    r: float,
    R: float,
    *,
    grid: int = 720,
    refine: int = 4,
) -> JointRegPoint:
    """argmin over ‖v‖ ≤ r, ‖p‖ ≤ R (spec §2.7), for dim_v = dim_p = 2, on the boundary torus.

    1. the objective on a grid×grid torus of (v-angle, p-angle), vectorised;
    2. the profile g(b) = min_a f(a, b): each column's best v-angle is zoomed to ~1e-7 of the
       grid step. This matters: when R ≫ r the p-angle moves log L by ~1e-11 while one v-grid
       step moves it by ~1e-3, so a plain 2-D grid cannot see the p-direction at all;
    3. the best ``refine`` minima of g are zoomed jointly; certified by the one-dimensional grid
       argument of ``models.flows.regpath.rival_minima`` on g.
    The interior is not searched: ``radial_descent`` reports whether the winner is consistent
    with a boundary minimiser.
    """
    t0 = time.perf_counter()
    if problem.dim_v != 2 or problem.dim_p != 2:
        raise ValueError("joint_reg_path_point: the torus grid needs dim_v = dim_p = 2")
    obj = joint_objective(problem)
    h = 2 * math.pi / grid
    angles = h * np.arange(grid)
    vals = obj.grid(_on_circle(r, angles), _on_circle(R, angles)).numpy()
    a_col, _, g = _zoom_pairs(obj, r, R, angles[np.argmin(vals, axis=0)], angles, h, 0.0, 6)
    finite = g[np.isfinite(g)]
    noise = NOISE * max(1.0, float(np.abs(finite).max())) if finite.size else 0.0
    minima = grid_minima(g, True, noise)
    minima = minima[np.argsort(g[minima], kind="stable")]
    top = minima[:refine]
    a_ref, b_ref, f_ref = _zoom_pairs(obj, r, R, a_col[top], angles[top], h, h, 7)
    k = int(np.argmin(f_ref))
    f_best = float(f_ref[k])
    others = np.concatenate([np.delete(f_ref, k), g[minima[refine:]]])
    rivals = rival_minima(g, f_best, int(top[k]), True)
    v = _on_circle(r, np.array([a_ref[k]]))[0]
    p = _on_circle(R, np.array([b_ref[k]]))[0]
    certified = bool(math.isfinite(f_best) and rivals == 0)
    if not certified:  # the global minimiser is not established: no evidence
        failures.report(failures.REG_PATH, "joint point not certified", f"(r, R)=({r:g}, {R:g})")
    return JointRegPoint(
        v=v,
        p=p,
        r=float(r),
        R=float(R),
        objective=f_best,
        objective_kind=obj.kind,
        n_local_minima=int(minima.size),
        gap=float(others.min() - f_best) if others.size else math.inf,
        certified=certified,
        radial_descent=_radial_descent(problem, v, p),
        seconds=time.perf_counter() - t0,
        details={"grid": grid, "rival_minima": rivals},
    )
