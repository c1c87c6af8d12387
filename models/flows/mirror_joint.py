"""Joint (W, v) training of cross-attention by normalised ℓp mirror descent (arXiv 2410.14581,
spec tfsvm §1.6, §2.10 MD-JOINT, §4.6) and the ℓp max-margin objects it is compared with.

The model is f_i(W, v) = vᵀX_iᵀ S(X_i W z_i), now with the head v trained too. Its logits are
linear in W, a_it = ⟨vec(x_it z_iᵀ), vec W⟩ (row-major, as in ``models.problems.cross``), so the
pair (W, v) is the pair (p, v) of the joint prompt model of 2306.13596 on the keys vec(x_it z_iᵀ):
``CrossJointProblem`` is ``models.flows.joint.JointProblem`` with those keys, and both gradients
come from its log-space routines (the W-gradient is the prompt engine's, the v-gradient combines
log|ℓ'| + log s in log space). Nothing of the mathematics is written twice.

- ``joint_md``: the official recipe (each parameter's gradient normalised by its own entrywise
  dual norm ‖·‖_{p*}, the dual variable sign(θ)|θ|^{p−1} stepped by lr) with directions from
  log space and no ``+ eps``: the loss tends to 0 here (v grows), ℓ' underflows float64 within
  a few hundred steps, and only log space keeps the directions.
- ``naive_joint_md``: the official code's arithmetic as written (torch autograd on
  log(1 + exp(−Y f)), gradient / (‖gradient‖_{p*} + eps)): the reference of the negative control
  spec F11, whose loss reads exactly 0.0 and whose iterate freezes.
- ``lp_v_svm``: the ℓp head SVM min ‖v‖_p s.t. Y_i x_{iα_i}ᵀv ≥ 1, certified by
  ``models.oracles.normsvm`` (see its docstring for the reduction).
- ``official_joint_data``: the hand-built instance of the official joint script, exactly.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from models.flows.joint import JointProblem
from models.oracles.normsvm import NormSVM, norm_svm
from models.problems.attention import DTYPE, PromptProblem, as_float_tensor
from models.problems.cross import CrossProblem, dual_map, primal_map

Tensor = torch.Tensor

#: float64 machine epsilon, the ``+ eps`` of the official normalisation (tools/optimizers.py).
MACHINE_EPS = float(torch.finfo(torch.float64).eps)

#: The official joint instance (synthetic-data/joint_training.py of aaronk2002/AttentionMD):
#: n = 2 inputs of T = 3 tokens in d = 2, labels (+1, −1), the query of each input its first
#: token, v(0) = 0 and W(0) = 0. The script builds X with ``torch.Tensor`` (float32) and then
#: casts to float64, so the data are these decimals rounded to float32 (``official_joint_data``).
JOINT_TOKENS = (
    ((-2.7, 1.2), (1.4, 2.1), (1.3, -0.1)),
    ((0.4, -2.2), (-1.1, -0.4), (0.9, 0.1)),
)
JOINT_LABELS = (1.0, -1.0)
#: The official joint runs: lr 0.1 and these step counts per p (bash_scripts/run-joint-*.sh).
JOINT_LR = 0.1
JOINT_STEPS = {1.75: 1500, 2.0: 2000, 3.0: 20000}
#: The selections the official notebook printed (plotter.ipynb, ``print(result['alpha'])``).
JOINT_PRINTED_ALPHA = {1.75: (1, 0), 2.0: (1, 0), 3.0: (0, 0)}


def official_joint_data() -> tuple[Tensor, Tensor, Tensor]:
    """(X, y, Z) of the official joint instance, bit for bit: float32 data cast to float64,
    z_i = x_i1 (the first token of input i)."""
    X = torch.tensor(JOINT_TOKENS, dtype=torch.float32).to(DTYPE)
    y = torch.tensor(JOINT_LABELS, dtype=torch.float32).to(DTYPE)
    return X, y, X[:, 0].clone()


# ---- the model -------------------------------------------------------------------------------


class CrossJointProblem(JointProblem):
    """Tokens X (n, T, d), queries Z (n, d), labels y (n,): the joint (W, v) cross-attention
    problem. As a ``JointProblem`` its "p" is vec(W) (row-major) and its keys are vec(x_it z_iᵀ)."""

    def __init__(self, X, Z, y, loss: str = "logistic"):
        super().__init__(X, y, None, loss)
        Z = as_float_tensor(Z, "Z", 2)
        n, T, d = self.X.shape
        if tuple(Z.shape) != (n, d):
            raise ValueError(
                f"Z: expected shape {(n, d)} (one query per input), got {tuple(Z.shape)}"
            )
        if not self.loss.strictly_decreasing:
            raise ValueError(
                f"loss: joint MD needs a strictly decreasing loss, got {self.loss.name!r}"
            )
        self.Z = Z
        self.keys = (self.X[:, :, :, None] * Z[:, None, None, :]).reshape(n, T, d * d)
        self._keys_np = np.ascontiguousarray(self.keys.numpy())

    @property
    def d(self) -> int:
        return self.X.shape[2]

    def cross(self, v) -> CrossProblem:
        """The fixed-head problem at v (``models.problems.cross``), e.g. for its naive reference
        model."""
        return CrossProblem(self.X, self.Z, self.y, as_float_tensor(v, "v", 1), self.loss)

    def logits(self, W) -> Tensor:
        """a_it = x_itᵀ W z_i (n, T)."""
        W = as_float_tensor(W, "W", 2)
        return torch.einsum("itd,de,ie->it", self.X, W, self.Z)

    def selected(self, W) -> np.ndarray:
        """The top-attention token of each input."""
        return torch.argmax(self.logits(W), dim=-1).numpy()

    def joint_margins(self, W, v) -> Tensor:
        """Y_i f_i(W, v) (n,)."""
        W = as_float_tensor(W, "W", 2).reshape(-1)
        return self.margins(as_float_tensor(v, "v", 1), W)

    def gradient_W_log(self, W, v) -> tuple[float, np.ndarray]:
        """∇_W L = e^M·G̃ as (M, G̃ (d, d)); M = −inf when the gradient is exactly zero."""
        v = as_float_tensor(v, "v", 1)
        w = np.ascontiguousarray(as_float_tensor(W, "W", 2).numpy().reshape(-1))
        log_scale, vec = self._gradient_p_log(v, w)
        return log_scale, vec.reshape(self.d, self.d)

    def gradient_v_log_at(self, W, v) -> tuple[float, np.ndarray]:
        """∇_v L = e^M·g̃ as (M, g̃ (d,))."""
        w = as_float_tensor(W, "W", 2).reshape(-1)
        return self._gradient_v_log(as_float_tensor(v, "v", 1), w)

    def _gradients_np(self, w: np.ndarray, v: np.ndarray):
        """((M_W, g̃_W), (M_v, g̃_v)) at the loop's own float64 arrays w = vec W and v: the
        hot path of ``joint_md``. The W part is the prompt engine's compiled log-space gradient
        (as ``JointProblem._gradient_p_log``); the v part is ``JointProblem._gradient_v_log``'s
        formula, ∇_v L = (1/n) Σ_it ℓ'(m_i) y_i s_it x_it with coefficients kept as
        log|ℓ'(m_i)| + log s_it, on numpy arrays (the torch version costs 0.3 ms a step, and
        ℓ3-MD runs 20000 steps). Both are tested equal to the ``JointProblem`` routines."""
        keys, X, y = self._keys_np, self._np[0], self._np[1]
        scores = y[:, None] * (X @ v)
        prompt = PromptProblem.trusted(self.keys, torch.from_numpy(scores), self.loss)
        grad_W = prompt.gradient_log_np(w)
        logits = keys @ w
        top = logits.max(axis=1, keepdims=True)
        log_s = logits - top - np.log(np.exp(logits - top).sum(axis=1, keepdims=True))
        margins = (np.exp(log_s) * scores).sum(axis=1)
        log_w = self.loss.log_neg_deriv_np(margins)[:, None] + log_s
        peak = float(log_w.max())
        weights = (-y)[:, None] * np.exp(log_w - peak)
        vec = np.einsum("it,itd->d", weights, X)
        size = float(np.abs(vec).max())
        if size == 0.0 or peak == -math.inf:
            return grad_W, (-math.inf, np.zeros_like(vec))
        return grad_W, (peak + math.log(size) - math.log(self.n), vec / size)


# ---- joint mirror descent ----------------------------------------------------------------------


@dataclass
class JointMDRun:
    """Recorded iterates of joint MD: ``steps`` (k,), ``Ws`` (k, d, d), ``vs`` (k, d), the
    margins Y_i f_i at each record (k, n) and the loss at each record as the official code
    computes it in float64 (``losses``; 0.0 once every margin exceeds ~37). ``moved[j]`` says
    which parameters moved at step j + 1 for the first few steps (("W", "v") flags)."""

    steps: np.ndarray
    Ws: np.ndarray
    vs: np.ndarray
    margins: np.ndarray
    losses: np.ndarray
    moved: list[tuple[bool, bool]]
    stop: str
    seconds: float

    @property
    def W(self) -> np.ndarray:
        return self.Ws[-1]

    @property
    def v(self) -> np.ndarray:
        return self.vs[-1]


#: How many of the first steps record which parameters moved (``JointMDRun.moved``).
MOVED_STEPS = 5


def _dual_norm(g: np.ndarray, q: float) -> float:
    """‖vec g‖_q of an array with max|g| = 1 (the log-space vectors are so scaled)."""
    return float(np.sum(np.abs(g) ** q) ** (1.0 / q))


def _official_loss(margins: np.ndarray) -> float:
    """mean log(1 + exp(−m)) as the official code writes it (it reads 0.0 once exp(−m) < eps/2)."""
    with np.errstate(over="ignore"):
        return float(np.mean(np.log(1.0 + np.exp(-margins))))


def joint_md(
    problem: CrossJointProblem,
    W0=None,
    v0=None,
    *,
    p: float,
    lr: float = JOINT_LR,
    steps: int = 2000,
    record_every: int = 1,
) -> JointMDRun:
    """Normalised ℓp mirror descent on (W, v), each parameter stepped on its own dual variable:
    sign(P⁺)|P⁺|^{p−1} = sign(P)|P|^{p−1} − lr·G_P/‖G_P‖_{p*} for P ∈ {W, v}, p* = p/(p − 1),
    with G_P's direction from log space. A parameter whose gradient is exactly zero does not
    move (the official 0/(0 + eps) = 0); from v(0) = 0 that is W at step 1."""
    if not (isinstance(p, (int, float)) and 1.0 < p < math.inf):
        raise ValueError(f"p: mirror descent needs 1 < p < ∞, got {p!r}")
    t0 = time.perf_counter()
    d, q = problem.d, p / (p - 1.0)
    W = np.zeros((d, d)) if W0 is None else as_float_tensor(W0, "W0", 2).numpy().copy()
    v = np.zeros(d) if v0 is None else as_float_tensor(v0, "v0", 1).numpy().copy()
    if W.shape != (d, d) or v.shape != (d,):
        raise ValueError(f"W0/v0: expected shapes {(d, d)} and {(d,)}, got {W.shape}, {v.shape}")
    theta_W, theta_v = dual_map(W, p), dual_map(v, p)
    ks, Ws, vs, moved = [0], [W.copy()], [v.copy()], []
    stop, k = "step budget", 0
    for k in range(1, steps + 1):
        # W and v are this loop's own finite float64 arrays: the unchecked gradient routines
        (mW, gW), (mv, gv) = problem._gradients_np(np.ascontiguousarray(W.reshape(-1)), v)
        if mW == -math.inf and mv == -math.inf:
            stop = "stationary point (both gradients exactly zero)"
            k -= 1
            break
        if mW > -math.inf:
            theta_W = theta_W - lr * gW.reshape(d, d) / _dual_norm(gW, q)
            W = primal_map(theta_W, p)
        if mv > -math.inf:
            theta_v = theta_v - lr * gv / _dual_norm(gv, q)
            v = primal_map(theta_v, p)
        if k <= MOVED_STEPS:
            moved.append((mW > -math.inf, mv > -math.inf))
        if k % record_every == 0 or k == steps:
            ks.append(k)
            Ws.append(W.copy())
            vs.append(v.copy())
    if ks[-1] != k:
        ks.append(k)
        Ws.append(W.copy())
        vs.append(v.copy())
    return _joint_run(problem, ks, Ws, vs, moved, stop, t0)


def _joint_run(problem, ks, Ws, vs, moved, stop, t0) -> JointMDRun:
    Ws_a, vs_a = np.stack(Ws), np.stack(vs)
    with torch.no_grad():
        margins = np.stack(
            [problem.joint_margins(W, v).numpy() for W, v in zip(Ws_a, vs_a, strict=True)]
        )
    losses = np.array([_official_loss(m) for m in margins])
    return JointMDRun(
        np.asarray(ks), Ws_a, vs_a, margins, losses, moved, stop, time.perf_counter() - t0
    )


def naive_joint_md(
    problem: CrossJointProblem,
    *,
    p: float,
    lr: float = JOINT_LR,
    steps: int = 2000,
    record_every: int = 1,
) -> JointMDRun:
    """The official joint recipe as its code computes it, from W(0) = 0 and v(0) = 0: torch
    autograd on mean log(1 + exp(−Y_i f_i)) with f_i = vᵀX_iᵀ softmax(X_i W z_i), then for
    P ∈ {W, v}: θ = sign(P)|P|^{p−1} − lr·∇_P/(‖∇_P‖_{p*} + eps), P = sign(θ)|θ|^{1/(p−1)}.

    Float64 throughout, as the official run. Once exp(−Y f) < eps/2 the loss reads exactly 0.0,
    and once ‖∇_P‖_{p*} ≪ eps the step shrinks to lr·‖∇_P‖/eps: the iterate freezes (spec F11)."""
    t0 = time.perf_counter()
    d, q = problem.d, p / (p - 1.0)
    X, Z, y = problem.X, problem.Z, problem.y
    W = torch.zeros(d, d, dtype=DTYPE, requires_grad=True)
    v = torch.zeros(d, dtype=DTYPE, requires_grad=True)
    ks, Ws, vs, moved = [0], [np.zeros((d, d))], [np.zeros(d)], []
    for k in range(1, steps + 1):
        logits = torch.einsum("itd,de,ie->it", X, W, Z)
        out = (torch.softmax(logits, dim=-1)[:, :, None] * X).sum(1) @ v
        loss = torch.log(1 + torch.exp(-y * out)).mean()
        gW, gv = torch.autograd.grad(loss, (W, v))
        with torch.no_grad():
            if k <= MOVED_STEPS:
                moved.append((bool(gW.any()), bool(gv.any())))
            for P, g in ((W, gW), (v, gv)):
                theta = torch.sign(P) * torch.abs(P) ** (p - 1.0) - lr * g / (
                    torch.linalg.vector_norm(g, q) + MACHINE_EPS
                )
                P.copy_(torch.sign(theta) * torch.abs(theta) ** (1.0 / (p - 1.0)))
        if k % record_every == 0 or k == steps:
            ks.append(k)
            Ws.append(W.detach().numpy().copy())
            vs.append(v.detach().numpy().copy())
    return _joint_run(problem, ks, Ws, vs, moved, "step budget", t0)


# ---- the ℓp max-margin objects -----------------------------------------------------------------


@dataclass(frozen=True)
class LpVSVM:
    """The ℓp head SVM min ‖v‖_p s.t. Y_i x_{iα_i}ᵀv ≥ 1: ``v`` (d,) or None, ``status`` and
    ``reason`` of the certified attention SVM it was read from (``svm``)."""

    v: np.ndarray | None
    svm: NormSVM

    @property
    def status(self) -> str:
        return self.svm.status

    @property
    def ok(self) -> bool:
        return self.svm.ok

    @property
    def reason(self) -> str:
        return self.svm.reason

    @property
    def value(self) -> float:
        return self.svm.value


def lp_v_svm(X, y, alpha, p: float, **options) -> LpVSVM:
    """min ‖v‖_p s.t. Y_i x_{iα_i}ᵀ v ≥ 1 (spec §1.4 "v-SVM for joint training"), certified.

    It is the ℓp attention SVM of the two-token instance with tokens (Y_i x_{iα_i}, 0) and the
    query e_1: there the constraints read (Y_i x_{iα_i})ᵀ W e_1 = (Y_i x_{iα_i})ᵀ W[:, 0] ≥ 1, so
    the optimum has W[:, 1:] = 0 (zeroing them keeps feasibility and lowers the norm) and
    W[:, 0] = v^mm_p with ‖W‖_p = ‖v^mm_p‖_p. ``models.oracles.normsvm`` solves and certifies it
    (its duality certificate checks the value; strict convexity of ℓp for 1 < p < ∞ makes the
    optimum unique). ``options`` go to ``norm_svm``."""
    X = as_float_tensor(X, "X", 3).numpy()
    y = as_float_tensor(y, "y", 1).numpy()
    n, T, d = X.shape
    alpha = np.asarray(alpha, dtype=int).reshape(-1)
    if alpha.shape != (n,) or alpha.min() < 0 or alpha.max() >= T:
        raise ValueError(f"alpha: expected {n} token indices in [0, {T})")
    tokens = np.zeros((n, 2, d))
    tokens[:, 0] = y[:, None] * X[np.arange(n), alpha]
    queries = np.zeros((n, d))
    queries[:, 0] = 1.0
    svm = norm_svm(tokens, queries, np.zeros(n, dtype=int), "lp", p=p, **options)
    return LpVSVM(None if svm.W is None or not svm.ok else svm.W[:, 0].copy(), svm)
