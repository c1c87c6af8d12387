"""Cross-attention with a nonlinear head and its SVM equivalence (arXiv 2308.16898, spec tfsvm
§2.9 SVMEQ, §4.3 the official ``multi_token_converge`` notebook).

Input i has tokens X_i (T, d), a query z_i and a label Y_i; the attended mixture is
u_i = X_iᵀ S(X_i W z_i) and the output goes through a fixed nonlinear head:

- ``"relu"`` (the official experiment): f_i(W) = Σ_j ReLU(u_iᵀ V)_j, V a fixed d×d matrix
  (the official code: the value layer's weight is Vᵀ, the ReLU follows, the head vector is all
  ones);
- ``"lambda"`` (the official "λ head" variant): f_i(W) = vᵀu_i − λ‖u_i‖², v a fixed vector.

The loss is the mean logistic loss of Y_i f_i(W). With a nonlinear head the margin is no longer
an average of per-token scores, so W's limit need not select one token per input: it may keep a
set 𝒪_i of tokens with finite log-ratios (a finite optimum inside the selected face) and push the
others away. The objects of the official notebook, reproduced here (``svmeq``):

- 𝒪_i = {t : s_it ≥ 1e-3} at the end of training;
- W_fin: the least-norm W with (x_iτ₂ − x_iτ₁)ᵀ W z_i = log(s_iτ₂ / s_iτ₁) for every pair of
  selected tokens (the finite part);
- W_dir: the least-norm W with equal logits among the selected tokens of each input and margin
  ≥ 1 against every non-selected one (the diverging direction);
- W^SVMeq = W_fin + R·W_dir, R fitted to the iterate by least squares.

The single-token comparison is the Frobenius Att-SVM at α_i = argmax_t s_it on the cross keys
vec(x_it z_iᵀ) (``models.problems.cross``), ``single_token_svm``.

Numerics. Plain float64 autograd is NOT adequate here, although the selected probabilities
stay ≥ 1e-3: the masked ones do not. Accepted runs end with largest masked probabilities
from 1e-7 down to 1e-75, half of them below 1e-16 (the official rule only asks for one
≤ 1e-6). Once every input's masked mass is below ~1e-16, the autograd gradient's direction
is rounding noise: autograd forms the top token's coefficient as a difference of O(1)
numbers whose true value is of the order of the masked mass (measured: 1 − cos = 0.098
against 100-digit arithmetic at masked probabilities ≤ 1e-22). NGD then follows the noise,
and the notebook's statistic moves: median 1 − corr(W, W^SVMeq) 0.13 naive vs 0.04 exact at
d = 4 (240 seeds), 0.34 naive at 10,000 steps. So every direction here comes from
``gradient_log``, which never forms that coefficient (as ``models.problems.cross`` does for the
linear head); autograd of the plain model is kept as the reference away from saturation
(``NonlinearHeadProblem.gradient``) and as the notebook's own recipe
(``ngd_runs(exact=False)``). A gradient that is exactly zero (every input's head inactive:
ReLU(u_iᵀV) = 0, so L is locally constant; no direction to normalise, and no ``+ ε`` here)
or non-finite is flagged per run (``NGDRuns.broken``); such a run is excluded, never
evidence.

The NGD direction is ∇L/‖∇L‖_F exactly (the official recipe divides by ‖∇L‖ + ε).
"""

from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from models.oracles.svm import SVMSolution, att_svm, checked_outcome, solve_margin_qp
from models.problems.attention import TokenSizes

Tensor = torch.Tensor
DTYPE = torch.float64

HEADS = ("relu", "lambda")

#: The official selection threshold THRED_H: 𝒪_i = {t : s_it ≥ 1e-3} (spec §2.9 [V code]).
SELECT_THRESHOLD = 1e-3
#: The official lower threshold THRED_L: a run needs some probability ≤ 1e-6 (spec §4.3).
MASK_THRESHOLD = 1e-6
#: W_fin's equalities must hold to this relative accuracy (least squares on a consistent
#: system of ≤ n·T(T−1)/2 rows: rounding is ~1e-14; an inconsistent one misses by O(1)).
FIN_TOL = 1e-9

AMBIGUOUS = "ambiguous: a final probability in (1e-6, 1e-3]"
FINITE = "finite solution: no final probability ≤ 1e-6"


# ---- the model --------------------------------------------------------------------------------


def _tensor(x, name: str, ndim: int) -> Tensor:
    t = torch.as_tensor(x, dtype=DTYPE) if not isinstance(x, Tensor) else x.to(DTYPE)
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name}: contains NaN or infinity")
    return t


def cross_keys(X, Z) -> np.ndarray:
    """The keys vec(x_it z_iᵀ) (n, T, d²), row-major: ⟨k_it, vec W⟩ = x_itᵀ W z_i (the
    vectorisation of ``models.problems.cross.CrossProblem.prompt``)."""
    X = np.asarray(X, dtype=np.float64)
    Z = np.asarray(Z, dtype=np.float64)
    n, T, d = X.shape
    return (X[:, :, :, None] * Z[:, None, None, :]).reshape(n, T, d * d)


def _logits(X: Tensor, Z: Tensor, W: Tensor) -> Tensor:
    """a_it = x_itᵀ W z_i for any leading batch dimensions (…, n, T)."""
    return ((X @ W.unsqueeze(-3)) * Z.unsqueeze(-2)).sum(-1)


def _head(u: Tensor, head: str, V: Tensor, lam: float) -> tuple[Tensor, Tensor]:
    """ψ(u_i) and ∇ψ(u_i), each (…, n) and (…, n, d). For the ReLU head the (sub)gradient at
    a kink takes ReLU'(0) = 0, as torch's autograd does."""
    if head == "relu":
        pre = u @ V  # (…, n, d): u_iᵀV
        active = (pre > 0).to(u.dtype)
        return torch.relu(pre).sum(-1), active @ V.transpose(-1, -2)
    if head == "lambda":
        return (u * V.unsqueeze(-2)).sum(-1) - lam * (u * u).sum(-1), V.unsqueeze(-2) - 2 * lam * u
    raise ValueError(f"head: expected one of {HEADS}, got {head!r}")


def head_outputs(X: Tensor, Z: Tensor, W: Tensor, head: str, V: Tensor, lam: float) -> Tensor:
    """f (…, n) for data with any leading batch dimensions: X (…, n, T, d), Z (…, n, d),
    W (…, d, d), V (…, d, d) for "relu" or (…, d) for "lambda". Differentiable in W (the
    plain model: softmax, mixture, head; the reference the exact gradient is tested against)."""
    u = (torch.softmax(_logits(X, Z, W), dim=-1).unsqueeze(-1) * X).sum(-2)  # (…, n, d)
    return _head(u, head, V, lam)[0]


def gradient_log(
    X: Tensor, Z: Tensor, y: Tensor, W: Tensor, head: str, V: Tensor, lam: float
) -> tuple[Tensor, Tensor]:
    """(M, G̃) with ∇L(W) = e^M·G̃ and G̃ of order one, batched over a leading dimension B:
    X (B, n, T, d), Z (B, n, d), y (B, n), W (B, d, d); M (B,) is −inf where ∇L = 0 exactly.

    Why not autograd: ∇L = (1/n) Σ_i ℓ'(Y_i f_i) Y_i Σ_t c_it x_it z_iᵀ with
    c_it = s_it (g_it − Σ_u s_iu g_iu), g_it = x_itᵀ∇ψ(u_i). Autograd forms the top token's
    c_ir as s_ir·(g_ir − ⟨s_i, g_i⟩), a difference of O(1) numbers whose true value is
    O(1 − s_ir): once the masked probabilities fall below ~1e-16 it is rounding noise larger
    than every masked token's pull, and the NGD direction is wrong (spec §5 F11, here for the
    ReLU head; the module docstring says what it does to the notebook's statistic).

    Since Σ_t c_it = 0 exactly, Σ_t c_it x_it = Σ_{t≠r} c_it (x_it − x_ir) with r the top
    token: the top coefficient is never needed; every other c_it = s_it·(g_it − ⟨s_i, g_i⟩) is
    a small probability (from log_softmax, exact in relative terms) times an O(1) difference;
    and the terms are rescaled by the largest log-magnitude before they are summed, so
    nothing underflows."""
    n = X.shape[-3]
    logits = _logits(X, Z, W)
    log_s = torch.log_softmax(logits, dim=-1)
    s = log_s.exp()
    u = (s.unsqueeze(-1) * X).sum(-2)
    f, grad_psi = _head(u, head, V, lam)
    g = (X * grad_psi.unsqueeze(-2)).sum(-1)  # (B, n, T)
    D = g - (s * g).sum(-1, keepdim=True)
    r = logits.argmax(-1, keepdim=True)  # (B, n, 1)
    top = torch.zeros_like(D, dtype=torch.bool).scatter_(-1, r, True)
    # |ℓ'(m)| = σ(−m) for the logistic loss; the factor 1/n is a constant and dropped.
    log_lp = -torch.nn.functional.softplus(y * f)
    log_c = log_s + torch.log(D.abs()) + log_lp.unsqueeze(-1)
    log_c = torch.where(top, torch.full_like(log_c, -math.inf), log_c)
    M = log_c.flatten(1).max(1).values
    shift = torch.where(torch.isfinite(M), M, torch.zeros_like(M))
    c = torch.exp(log_c - shift[:, None, None]) * torch.sign(D) * (-y).unsqueeze(-1)
    xr = torch.gather(X, -2, r.unsqueeze(-1).expand(*r.shape, X.shape[-1]))  # (B, n, 1, d)
    G = torch.einsum("bit,bitd,bie->bde", c, X - xr, Z)
    return M - math.log(n), G


@dataclass(frozen=True, eq=False)
class NonlinearHeadProblem(TokenSizes):
    """Tokens X (n, T, d), queries Z (n, d), labels y (n,) in ±1 and a fixed head: ``V``
    (d, d) for "relu", the vector v (d,) for "lambda" (with ``lam``). Logistic loss."""

    X: Tensor
    Z: Tensor
    y: Tensor
    V: Tensor
    head: str = "relu"
    lam: float = 0.0
    seed: int | None = None

    def __post_init__(self):
        if self.head not in HEADS:
            raise ValueError(f"head: expected one of {HEADS}, got {self.head!r}")
        X = _tensor(self.X, "X", 3)
        n, T, d = X.shape
        Z = _tensor(self.Z, "Z", 2)
        if tuple(Z.shape) != (n, d):
            raise ValueError(f"Z: expected shape {(n, d)} (one per input), got {tuple(Z.shape)}")
        y = _tensor(self.y, "y", 1)
        if y.shape[0] != n or not bool(((y == 1) | (y == -1)).all()):
            raise ValueError(f"y: expected {n} labels in ±1, got {y.tolist()}")
        V = _tensor(self.V, "V", 2 if self.head == "relu" else 1)
        want = (d, d) if self.head == "relu" else (d,)
        if tuple(V.shape) != want:
            raise ValueError(
                f"V: expected shape {want} for the {self.head} head, got {tuple(V.shape)}"
            )
        if not math.isfinite(float(self.lam)):
            raise ValueError(f"lam: expected a finite number, got {self.lam!r}")
        for name, value in (("X", X), ("Z", Z), ("y", y), ("V", V)):
            object.__setattr__(self, name, value)

    def _W(self, W) -> Tensor:
        W = _tensor(W, "W", 2)
        if tuple(W.shape) != (self.d, self.d):
            raise ValueError(f"W: expected shape {(self.d, self.d)}, got {tuple(W.shape)}")
        return W

    def logits(self, W) -> Tensor:
        """a_it = x_itᵀ W z_i, (n, T)."""
        return torch.einsum("itd,de,ie->it", self.X, self._W(W), self.Z)

    def softmax(self, W) -> Tensor:
        return torch.softmax(self.logits(W), dim=-1)

    def output(self, W) -> Tensor:
        """f_i(W), (n,)."""
        return head_outputs(self.X, self.Z, self._W(W), self.head, self.V, float(self.lam))

    def loss_value(self, W) -> Tensor:
        """(1/n) Σ_i log(1 + exp(−Y_i f_i(W)))."""
        return torch.nn.functional.softplus(-self.y * self.output(W)).mean()

    def gradient(self, W) -> np.ndarray:
        """∇L(W) by autograd of the plain model, (d, d) (the official code's gradient)."""
        Wt = self._W(W).detach().clone().requires_grad_(True)
        self.loss_value(Wt).backward()
        return Wt.grad.numpy()

    def gradient_log(self, W) -> tuple[float, np.ndarray]:
        """(M, G̃) with ∇L(W) = e^M·G̃: the exact direction at any ‖W‖ (``gradient_log``)."""
        M, G = gradient_log(
            self.X[None],
            self.Z[None],
            self.y[None],
            self._W(W)[None],
            self.head,
            self.V[None],
            float(self.lam),
        )
        return float(M[0]), G[0].numpy()

    @property
    def keys(self) -> np.ndarray:
        """vec(x_it z_iᵀ) (n, T, d²): the Frobenius Att-SVMs' keys (``cross_keys``)."""
        return cross_keys(self.X.numpy(), self.Z.numpy())


# ---- the official data and initialisation (notebook multi_token_converge) ----------------------


def official_relu_problem(n: int, T: int, d: int, seed: int) -> NonlinearHeadProblem | None:
    """``data_generator(seed, mode='relu')`` of the official notebook, draw for draw: a
    torch.Generator seeded with ``seed`` draws in float32 (torch's default dtype, as the
    notebook does) V ~ N(0,1)^{d×d} scaled to unit Frobenius norm, tokens N(0, I) scaled to
    unit rows, Y = 2·[N(0,1) > 0] − 1, queries N(0, I) scaled to unit rows; then everything is
    cast to float64. Returns None where every label is +1 (the notebook skips that seed)."""
    gen = torch.Generator().manual_seed(int(seed))
    f32 = torch.float32  # the notebook's default dtype, whatever this process's default is
    V = torch.randn((d, d), generator=gen, dtype=f32)
    V = V / torch.norm(V)
    X = torch.randn((n, T, d), generator=gen, dtype=f32)
    X = X / torch.norm(X, dim=-1, keepdim=True)
    Y = 2 * torch.ones(n, dtype=f32) * (torch.randn(n, generator=gen, dtype=f32) > 0) - 1
    Z = torch.randn((n, d), generator=gen, dtype=f32)
    Z = Z / torch.norm(Z, dim=-1, keepdim=True)
    if not bool((Y == -1).any()):
        return None
    return NonlinearHeadProblem(
        X=X.double(), Z=Z.double(), y=Y.double(), V=V.double(), head="relu", seed=int(seed)
    )


def official_init(d: int, seed: int) -> np.ndarray:
    """W(0) as ``nn.Linear(d, d, bias=False)`` initialises its weight (entries uniform in
    [−1/√d, 1/√d]), from a generator seeded with ``seed`` (the notebook draws it from torch's
    unseeded global stream, so the official W(0) cannot be reproduced; its law can). The law
    is invariant under transposition, so it is also the law of the notebook's W = weightᵀ."""
    gen = torch.Generator().manual_seed(int(seed))
    bound = 1.0 / math.sqrt(d)
    return ((torch.rand((d, d), generator=gen, dtype=DTYPE) * 2.0 - 1.0) * bound).numpy()


# ---- normalised GD, many runs at once -----------------------------------------------------------


@dataclass
class NGDRuns:
    """``Ws[k]`` (B, d, d): the iterates after k steps for each recorded k; ``broken`` (B,)
    True where a run met a NaN or an exactly zero gradient (its iterates are then frozen from
    that step and must not be used), with ``why`` per run."""

    Ws: dict[int, np.ndarray]
    broken: np.ndarray
    why: list[str]
    seconds: float


def ngd_runs(
    problems: list[NonlinearHeadProblem],
    W0s,
    *,
    lr: float = 0.1,
    steps: int = 2001,
    record=(),
    exact: bool = True,
) -> NGDRuns:
    """W ← W − lr·∇L(W)/‖∇L(W)‖_F for every problem at once (same n, T, d and head), each
    run's gradient normalised on its own. ``exact`` takes the direction from
    ``gradient_log`` (right at any ‖W‖); ``exact=False`` from autograd of the plain model,
    as the official notebook does (wrong once masked probabilities fall below ~1e-16).
    Records the iterates after the steps in ``record`` (0 = W(0)) and after the last step."""
    t0 = time.perf_counter()
    if not problems:
        raise ValueError("problems: expected at least one problem")
    if len({(p.head, float(p.lam), tuple(p.X.shape)) for p in problems}) != 1:
        raise ValueError("problems: every problem must have the same head, λ and shape")
    head, lam = problems[0].head, float(problems[0].lam)
    X = torch.stack([p.X for p in problems])
    Z = torch.stack([p.Z for p in problems])
    y = torch.stack([p.y for p in problems])
    V = torch.stack([p.V for p in problems])
    B, d = len(problems), problems[0].d
    W = torch.as_tensor(np.asarray(W0s, dtype=np.float64)).clone()
    if tuple(W.shape) != (B, d, d):
        raise ValueError(f"W0s: expected shape {(B, d, d)}, got {tuple(W.shape)}")
    want = {int(k) for k in record} | {int(steps)}
    out = {0: W.numpy().copy()} if 0 in want else {}
    broken = torch.zeros(B, dtype=torch.bool)
    why = [""] * B
    for k in range(1, steps + 1):
        if exact:
            _, G = gradient_log(X, Z, y, W, head, V, lam)
        else:
            Wg = W.detach().requires_grad_(True)
            loss = torch.nn.functional.softplus(-y * head_outputs(X, Z, Wg, head, V, lam))
            (G,) = torch.autograd.grad(loss.mean(-1).sum(), Wg)
        norms = torch.linalg.matrix_norm(G)
        bad = ~torch.isfinite(norms) | (norms == 0)
        for b in torch.nonzero(bad & ~broken).flatten().tolist():
            why[b] = f"{'zero' if norms[b] == 0 else 'non-finite'} gradient at step {k}"
        broken |= bad
        unit = torch.where(broken[:, None, None], torch.zeros_like(G), G / norms[:, None, None])
        W = W - lr * unit
        if k in want:
            out[k] = W.numpy().copy()
    return NGDRuns(out, broken.numpy(), why, time.perf_counter() - t0)


def inactive_inputs(problem: NonlinearHeadProblem, W) -> np.ndarray:
    """(n,) True where the ReLU head is inactive at W: u_iᵀV ≤ 0 entrywise, so f_i = 0 on a
    neighbourhood (up to ties at 0) and the input's gradient is exactly zero: nothing drives
    its attention. Always False for the λ head."""
    if problem.head != "relu":
        return np.zeros(problem.n, dtype=bool)
    u = (problem.softmax(W)[..., None] * problem.X).sum(-2)
    return ((u @ problem.V) <= 0).all(-1).numpy()


# ---- the official rejection rules and the selected sets ------------------------------------------


def official_rejection(probs) -> str | None:
    """The notebook's rules on the final softmax (n, T): a probability in (1e-6, 1e-3] rejects
    the run as ambiguous; no probability ≤ 1e-6 rejects it as a finite solution; else None."""
    s = np.asarray(probs, dtype=np.float64)
    if np.any((s > MASK_THRESHOLD) & (s <= SELECT_THRESHOLD)):
        return AMBIGUOUS
    if not np.any(s <= MASK_THRESHOLD):
        return FINITE
    return None


def selected_sets(probs, threshold: float = SELECT_THRESHOLD) -> np.ndarray:
    """𝒪 as a boolean mask (n, T): s_it ≥ threshold."""
    return np.asarray(probs, dtype=np.float64) >= threshold


# ---- W_fin, W_dir, W^SVMeq and the single-token SVM ---------------------------------------------


@dataclass(frozen=True, eq=False)
class SVMEq:
    """The SVM-equivalence objects of one run. ``status``: "optimal" when W_fin's equalities
    hold and W_dir is certified optimal; "infeasible" (W_fin's system is inconsistent or
    W_dir's constraints have no solution: the official code's "no feasible svm solutions");
    "inaccurate" / "solver_error" from W_dir's oracle. The matrices are None unless optimal."""

    status: str
    selected: np.ndarray
    W_fin: np.ndarray | None
    fin_residual: float
    W_dir: np.ndarray | None
    dir_solution: SVMSolution | None
    R: float
    W: np.ndarray | None
    reason: str = ""

    def __post_init__(self):
        checked_outcome(self.status, self.reason)

    @property
    def ok(self) -> bool:
        return self.status == "optimal"


def fin_system(keys: np.ndarray, logits: np.ndarray, selected: np.ndarray):
    """Rows k_iτ₂ − k_iτ₁ and right-hand sides a_iτ₂ − a_iτ₁ = log(s_iτ₂/s_iτ₁) for every pair
    τ₁ < τ₂ of selected tokens of each input (the official constraints_fin)."""
    rows, rhs = [], []
    n, T = selected.shape
    for i in range(n):
        for t1, t2 in itertools.combinations(range(T), 2):
            if selected[i, t1] and selected[i, t2]:
                rows.append(keys[i, t2] - keys[i, t1])
                rhs.append(logits[i, t2] - logits[i, t1])
    k = keys.shape[2]
    return np.asarray(rows, dtype=np.float64).reshape(-1, k), np.asarray(rhs, dtype=np.float64)


def dir_system(keys: np.ndarray, selected: np.ndarray):
    """W_dir's constraints as A w ≥ b (b ≥ 0): for selected τ₁ < τ₂ both ±(k_iτ₁ − k_iτ₂)·w ≥ 0
    (equal logits), and for selected τ, non-selected t: (k_iτ − k_it)·w ≥ 1 (the official
    constraints_dir)."""
    rows, rhs = [], []
    n, T = selected.shape
    for i in range(n):
        for t1, t2 in itertools.combinations(range(T), 2):
            diff = keys[i, t1] - keys[i, t2]
            if selected[i, t1] and selected[i, t2]:
                rows += [diff, -diff]
                rhs += [0.0, 0.0]
            elif selected[i, t1]:
                rows.append(diff)
                rhs.append(1.0)
            elif selected[i, t2]:
                rows.append(-diff)
                rhs.append(1.0)
    k = keys.shape[2]
    return np.asarray(rows, dtype=np.float64).reshape(-1, k), np.asarray(rhs, dtype=np.float64)


def least_norm_fin(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, float]:
    """The least-norm solution of A w = b (lstsq: the minimum-norm least-squares point) and
    its relative residual max|Aw − b| / (1 + max|b|); no rows gives w = 0."""
    if A.shape[0] == 0:
        return np.zeros(A.shape[1]), 0.0
    w, *_ = np.linalg.lstsq(A, b, rcond=None)
    res = float(np.max(np.abs(A @ w - b)) / (1.0 + float(np.max(np.abs(b)))))
    return w, res


def svmeq(
    problem: NonlinearHeadProblem, W_probe, W, *, threshold: float = SELECT_THRESHOLD
) -> SVMEq:
    """W_fin, W_dir and W^SVMeq = W_fin + R·W_dir of the official notebook (spec §2.9).

    The selected sets and the log-ratios are read from the softmax at ``W_probe`` (the
    notebook reads the last forward pass, one step before its final iterate); R is fitted to
    ``W`` (the final iterate): R = ⟨W − W_fin, W_dir⟩ / ‖W_dir‖², the least-squares solution
    of min_R ‖W_fin + R·W_dir − W‖_F. The log-ratios log(s_iτ₂/s_iτ₁) are taken as the logit
    differences a_iτ₂ − a_iτ₁ they equal (exact, with no rounding of the probabilities).

    W_fin is the least-norm solution of its equalities, checked (relative residual ≤ FIN_TOL,
    else "infeasible"); W_dir is the least-norm point of its polyhedron, solved and
    KKT-certified by ``models.oracles.svm.solve_margin_qp`` (equalities as two opposite rows)."""
    d = problem.d
    keys = problem.keys
    logits = problem.logits(W_probe).detach().numpy()
    probs = problem.softmax(W_probe).detach().numpy()
    sel = selected_sets(probs, threshold)
    A, b = fin_system(keys, logits, sel)
    w_fin, res = least_norm_fin(A, b)
    if res > FIN_TOL:
        why = "W_fin: inconsistent equalities"
        return SVMEq("infeasible", sel, None, res, None, None, math.nan, None, why)
    A_dir, b_dir = dir_system(keys, sel)
    sol = solve_margin_qp(A_dir, b_dir)
    if not sol.ok:
        return SVMEq(sol.status, sel, None, res, None, sol, math.nan, None, f"W_dir: {sol.reason}")
    W_fin, W_dir = w_fin.reshape(d, d), sol.x.reshape(d, d)
    W = np.asarray(W, dtype=np.float64)
    nd = float(np.sum(W_dir * W_dir))
    if nd == 0.0:
        return SVMEq("infeasible", sel, W_fin, res, W_dir, sol, math.nan, None, "W_dir = 0")
    R = float(np.sum((W - W_fin) * W_dir) / nd)
    return SVMEq("optimal", sel, W_fin, res, W_dir, sol, R, W_fin + R * W_dir)


def single_token_svm(problem: NonlinearHeadProblem, alpha) -> SVMSolution:
    """The Frobenius Att-SVM at α (one token per input) on the cross keys:
    ``models.oracles.svm.att_svm``; its ``x`` is vec(W) row-major (reshape to (d, d))."""
    return att_svm(problem.keys, np.asarray(alpha))
