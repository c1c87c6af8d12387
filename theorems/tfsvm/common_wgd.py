"""What the W-dynamics claims of 2308.16898 share (spec tfsvm §2.3–§2.6, §2.11, §4.1, §5).

The cross-attention logits are linear in W, so W-training IS the prompt model of 2306.13596
on the keys vec(x_it z_iᵀ) (``models.problems.cross``): gradient flow on W is traced, certified and
decided by the same engine (``theorems.limits.follow``: converged to the SVM of what
it selects, bounded at a certified finite minimiser, or undecided). This module adds what the
W claims need on top of it: the certified limit named in W's words (``w_flow``), the two
derived lower bounds (no stationary point, the G-EQ descent lemma), random matrices of given
norms, the official naive gradient and an exact reduction of a flow from W(0) = 0 to the query
and token spans. The strategies live in ``strategies.cross_dynamics``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
from pathlib import Path

import numpy as np
import torch

from models.flows.dynamics import converge, finite_minimiser, trace_flow
from models.numerics import failures
from models.oracles.svm import att_svm
from models.problems.attention import PromptProblem
from models.problems.cross import CrossProblem, correlation
from strategies.cross import official_cross_data
from strategies.instances import UNIQUE_OPT, CrossInstance
from theorems import evidence
from theorems.limits import Limit, follow, record_outcome
from theorems.maxmargin.common import directional_derivative

DTYPE = torch.float64


#: The official recipe (spec §4.1 [V code]): W = the transpose of a bias-free nn.Linear(d, d)
#: weight, whose default init is U(−1/√d, 1/√d) entrywise, i.e. standard deviation 1/√(3d).
#: ``with_random_init`` draws Gaussian entries of this standard deviation.
def official_init_std(d: int) -> float:
    return 1.0 / math.sqrt(3.0 * d)


def vec(W) -> np.ndarray:
    """Row-major vec(W), the prompt engine's p (models.problems.cross)."""
    return np.ascontiguousarray(np.asarray(W, dtype=np.float64).reshape(-1))


def frobenius_svm(inst_or_problem, alpha, what: str = "Att-SVM"):
    """The certified Frobenius attention SVM W^mm(α) as a d×d matrix (ATT-SVM on the
    vectorised keys; a failed solve is inconclusive, an infeasible one rejects)."""
    problem = getattr(inst_or_problem, "problem", inst_or_problem)
    sol = evidence.solved(att_svm(problem.prompt.keys, np.asarray(alpha)), what)
    return sol.x.reshape(problem.d, problem.d)


# ---- gradient flow on W, decided ------------------------------------------------------------


def flow_limit(problem: CrossProblem, W0=None) -> Limit:
    """Where gradient flow on W from W(0) goes (``follow`` on the vectorised problem)."""
    lim = follow(problem.prompt, None if W0 is None else vec(W0))
    return dataclasses.replace(lim, symbol="W^mm")


def w_flow(problem: CrossProblem, W0=None) -> Limit:
    """Where gradient flow on W from W(0) goes, certified (``theorems.limits.flow`` for W):
    "converged" to W^mm of what it selects, or "bounded" at a certified strict local
    minimiser. A flow the engine cannot decide ends the example as inconclusive."""
    lim = flow_limit(problem, W0)
    record_outcome(lim.outcome, lim.transient)
    if lim.kind == "undecided":
        evidence.inconclusive(lim.reason)
    return lim


def growth(problem: CrossProblem, W0, max_norm: float):
    """Trace gradient flow on W from W0 until ‖W‖ = max_norm. Returns the trajectory's norms,
    its arc lengths and why ‖W(t)‖ stays bounded ("" if it reached max_norm): the run stopped
    at an exact stationary point (∇L = 0 in log space, where it is exact) or at a certified
    strict local minimiser. Any other early stop is inconclusive."""
    traj = trace_flow(problem.prompt, vec(W0), max_norm=max_norm)
    bounded = ""
    if traj.stop.startswith("stationary point"):  # ∇L = 0 exactly in log space: W(t) stays
        bounded = (
            f"∇L(W) = 0 exactly at ‖W‖ = {float(traj.final.norm()):.4g}: gradient flow stays "
            "there, ‖W(t)‖ stays bounded"
        )
    elif traj.stop != "reached max_norm":
        found = finite_minimiser(problem.prompt, traj.final)
        if found is None:
            evidence.inconclusive(f"flow undecided: {traj.stop}")
        bounded = (
            f"gradient flow stops at ‖W‖ = {float(traj.final.norm()):.4g}, "
            f"{found.distance:.1e} from a strict local minimiser of L (‖∇L‖ = "
            f"{found.grad_norm:.1e}): ‖W(t)‖ stays bounded"
        )
    return traj.norms, traj.s, bounded


# ---- random matrices --------------------------------------------------------------------------


def random_matrices(gen: torch.Generator, d: int, count: int, lo=0.1, hi=10.0) -> np.ndarray:
    """``count`` d×d matrices with Gaussian directions and Frobenius norms log-uniform in
    [lo, hi] (spec §2.3, §2.4: "random W, norms 0.1–10")."""
    u = torch.randn(count, d * d, generator=gen, dtype=DTYPE)
    u = u / torch.linalg.vector_norm(u, dim=1, keepdim=True)
    r = lo * (hi / lo) ** torch.rand(count, generator=gen, dtype=DTYPE)
    return (u * r[:, None]).reshape(count, d, d).numpy()


# ---- NOSTAT: the lower bound on ‖∇L(W)‖ [D] ----------------------------------------------------


def _log_softmax(problem: CrossProblem, W) -> np.ndarray:
    a = problem.logits(torch.as_tensor(W, dtype=DTYPE)).numpy()
    top = a.max(1, keepdims=True)
    return a - top - np.log(np.exp(a - top).sum(1, keepdims=True))


def log_score_variance(problem: CrossProblem, W) -> np.ndarray:
    """log Var_{s_i}(γ_i) per input, Var = Σ_{t<u} s_it s_iu (γ_it − γ_iu)²: a sum of
    non-negative terms, so its log keeps full relative accuracy at any ‖W‖ (−inf iff the
    input's scores are all equal)."""
    log_s = _log_softmax(problem, W)
    g = problem.scores.numpy()
    T = g.shape[1]
    t, u = np.triu_indices(T, k=1)
    with np.errstate(divide="ignore"):
        terms = log_s[:, t] + log_s[:, u] + 2.0 * np.log(np.abs(g[:, t] - g[:, u]))
    top = terms.max(1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    return (safe + np.log(np.exp(terms - safe).sum(1, keepdims=True)))[:, 0]


def log_nostat_bound(problem: CrossProblem, W) -> float:
    """log B(W), B(W) = σ_n(Z)·(Σ_i ℓ'(Y_i f_i)² Var_{s_i}(γ_i)²)^{1/2} / (n‖v‖) [D].

    Derivation: vᵀx_it = Y_i γ_it, so vᵀ Σ_t c_it x_it = Y_i Σ_t c_it γ_it = Y_i Var_{s_i}(γ_i)
    with c_it = s_it(γ_it − Σ_u s_iu γ_iu); hence vᵀ∇L(W) = (1/n) Σ_i ℓ'_i Y_i Var_i z_iᵀ and
    ‖∇L‖_F ≥ ‖vᵀ∇L‖/‖v‖ ≥ σ_n(Z)‖(ℓ'_i Var_i)_i‖/(n‖v‖): positive as soon as the queries are
    independent (σ_n(Z) > 0) and one input has two distinct scores."""
    n = problem.n
    Z = problem.Z.numpy()
    sigma_n = np.linalg.svd(Z, compute_uv=False)[n - 1] if n <= problem.d else 0.0
    log_var = log_score_variance(problem, W)
    margins = (np.exp(_log_softmax(problem, W)) * problem.scores.numpy()).sum(1)
    log_lp = problem.loss.log_neg_deriv(torch.from_numpy(margins)).numpy()
    terms = 2.0 * (log_lp + log_var)
    top = float(terms.max())
    if not math.isfinite(top) or sigma_n <= 0:
        return -math.inf
    half_log = 0.5 * (top + math.log(float(np.exp(terms - top).sum())))
    return math.log(sigma_n) + half_log - math.log(n) - math.log(float(problem.v.norm()))


def log_gradient_norm(problem: CrossProblem, W) -> float:
    """log‖∇L(W)‖_F from the engine's log-space gradient (∇L = e^M·G̃)."""
    M, G = problem.gradient_log(W)
    nG = float(np.linalg.norm(G))
    return -math.inf if M == -math.inf or nG == 0 else M + math.log(nG)


# ---- G-EQ: the descent lemma's bound [D] -------------------------------------------------------


def log_geq_bound(problem: CrossProblem, W, opt) -> float:
    """log D(W), D(W) = (1/n) Σ_i |ℓ'_i| (γ_i⁺ − γ_i⁻) s_i,opt (1 − s_i,opt) [D, spec §2.4].

    With one non-optimal score γ_i⁻ per input, Σ_t c_it a_it = Cov_{s_i}(γ_i, a_i) =
    (γ⁺ − γ⁻) s_opt (1 − s_opt)(a_opt − ā_{−opt}) for a_it = x_itᵀ W^mm z_i, and every
    a_opt − a_t ≥ 1 at W^mm: so −⟨∇L(W), W^mm⟩ ≥ D(W) > 0."""
    log_s = _log_softmax(problem, W)
    g = problem.scores.numpy()
    n, T = g.shape
    rows = np.arange(n)
    others = np.ones((n, T), dtype=bool)
    others[rows, opt] = False
    log_rest = np.array(
        [np.logaddexp.reduce(log_s[i, others[i]]) if T > 1 else -np.inf for i in range(n)]
    )
    gap = g[rows, opt] - np.where(others, g, -np.inf).max(1)
    margins = (np.exp(log_s) * g).sum(1)
    log_lp = problem.loss.log_neg_deriv(torch.from_numpy(margins)).numpy()
    terms = log_lp + np.log(gap) + log_s[rows, opt] + log_rest
    return float(np.logaddexp.reduce(terms)) - math.log(n)


def descent_value(problem: CrossProblem, W, W_mm, center) -> tuple[float, float, float]:
    """⟨∇L(W), W^mm⟩ summed term by term in log space: (log|value|, sign, log|largest term|)
    (``directional_derivative`` on the vectorised problem)."""
    return directional_derivative(problem.prompt, vec(W), vec(W_mm), center)


# ---- the official naive gradient (spec §5 F11) --------------------------------------------------


def naive_gradient(problem: CrossProblem, W) -> np.ndarray:
    """∇L(W) as the official code computes it: torch autograd of the plain float64 model
    (``naive_output``: softmax of X W z, no log space)."""
    Wt = torch.tensor(np.asarray(W, dtype=np.float64), requires_grad=True)
    problem.naive_loss(Wt).backward()
    return Wt.grad.detach().numpy()


def top_two_gap(problem: CrossProblem, W) -> float:
    """min_i of the gap between each input's two largest logits."""
    a = np.sort(problem.logits(torch.as_tensor(W, dtype=DTYPE)).numpy(), axis=1)
    return float((a[:, -1] - a[:, -2]).min())


# ---- an exact reduction for flows from W(0) = 0 [D] ---------------------------------------------


def _range(M: np.ndarray) -> np.ndarray:
    u, s, _ = np.linalg.svd(M, full_matrices=False)
    r = int(np.sum(s > 1e-12 * max(1.0, float(s[0])))) if s.size else 0
    return u[:, :r]


def span_problem(problem: CrossProblem) -> tuple[PromptProblem, np.ndarray, np.ndarray]:
    """(P, U, V): the W-problem restricted to W = U M Vᵀ, U an orthonormal basis of the
    token differences {x_it − x_i0}, V of the queries {z_i} [D].

    x_itᵀ (U M Vᵀ) z_i = (Uᵀx_it)ᵀ M (Vᵀz_i) − (the same for t = 0 cancels in the softmax), so
    L(U M Vᵀ) = L_P(vec M) with keys vec((Uᵀx_it)(Vᵀz_i)ᵀ); every gradient ∇L(W) =
    (1/n) Σ_i (Σ_t c_it x_it) z_iᵀ has Σ_t c_it = 0, so it lies in U·Vᵀ, and so does every
    W^mm(α) (KKT: a non-negative combination of (x_iα − x_it) z_iᵀ). Hence gradient flow
    from W(0) = 0 stays in U·Vᵀ, selects the same tokens, and its direction is W^mm's iff
    M's is the reduced SVM's (‖U M Vᵀ‖_F = ‖M‖_F). At n = 6, T = 8, d = 64 the keys have
    r₁·r₂ ≤ 42·6 = 252 coordinates instead of d² = 4096."""
    X, Z = problem.X.numpy(), problem.Z.numpy()
    n, T, d = X.shape
    U = _range((X - X[:, :1, :]).reshape(-1, d).T)
    V = _range(Z.T)
    Xr, Zr = X @ U, Z @ V
    keys = (Xr[:, :, :, None] * Zr[:, None, None, :]).reshape(n, T, -1)
    return PromptProblem(torch.from_numpy(keys), problem.scores, problem.loss), U, V


# ---- metrics -----------------------------------------------------------------------------------


def first_reaching(series: np.ndarray, steps: np.ndarray, level: float) -> float:
    """The first step at which ``series`` ≥ level (+inf if never)."""
    hit = np.nonzero(series >= level)[0]
    return float(steps[hit[0]]) if hit.size else math.inf


def correlations(Ws: np.ndarray, W_ref: np.ndarray) -> np.ndarray:
    return np.array([correlation(W, W_ref) for W in Ws])


def decisive(log_value: float, log_top: float, rel: float = 1e-10) -> bool:
    """Whether a signed log-sum-exp kept its sign: |value| ≥ rel·|largest term|."""
    return log_value - log_top >= math.log(rel)


# ---- fixed-seed official data (the experiments' seeds 0, 1, 2, …) ------------------------------


def official_instance(n: int, T: int, d: int, seed: int) -> CrossInstance | None:
    """The official generator of spec §3.1 at one seed (``strategies.cross.official_cross_data``,
    the draws ``official_cross_instances`` makes for that seed), or None where the top scores
    tie (the strategy's rejection): the fixed-seed experiments (spec §4.1 uses seeds 0–99)
    need no search."""
    inst = official_cross_data(n, T, d, seed)
    return inst if UNIQUE_OPT in inst.assumptions else None


def official_seeds(n: int, T: int, d: int, count: int, start: int = 0) -> list[CrossInstance]:
    """The first ``count`` seeds start, start + 1, … whose official draw has a unique opt."""
    out, seed = [], start
    while len(out) < count:
        inst = official_instance(n, T, d, seed)
        if inst is not None:
            out.append(inst)
        seed += 1
    return out


# ---- §2.5 OP-GLOB: global selection against d -------------------------------------------------

#: §2.5: n = 6, T = 8; ≥ 12 seeds per cell (spec); flows from W(0) = 0.
OPGLOB_N, OPGLOB_T, OPGLOB_SEEDS = 6, 8, 12
OPGLOB_DS = (4, 6, 10, 16, 32, 64)


@functools.cache
def opglob_fractions() -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Per d of OPGLOB_DS: the fraction of decided gradient flows from W(0) = 0 that select
    opt on every input (official seeds 0, 1, …, the first OPGLOB_SEEDS with a unique opt),
    and how many flows were decided. Each flow runs in the exact span reduction
    (``span_problem``); a flow the engine leaves undecided counts in no fraction."""
    fractions, decided = [], []
    for d in OPGLOB_DS:
        hits = runs = 0
        for inst in official_seeds(OPGLOB_N, OPGLOB_T, d, OPGLOB_SEEDS):
            reduced, _, _ = span_problem(inst.problem)
            with failures.tolerate(failures.GRADIENT_FLOW):
                out = converge(reduced, None)
            if out.converged:
                runs += 1
                hits += int(np.array_equal(out.selected, inst.alpha))
        fractions.append(hits / runs if runs else math.nan)
        decided.append(runs)
    return tuple(fractions), tuple(decided)


# ---- pinned counterexamples (found by searches larger than the ci budget) ----------------------

PINNED = Path(__file__).parent / "pinned"


def pinned(claim_id: str) -> CrossInstance:
    """The instance a wider search found against ``claim_id`` (theorems/tfsvm/pinned/), for
    ``@example``: the ci draws rarely reach it (TF-GEQ-GLOBAL: about 0.2 % of draws)."""
    return CrossInstance.from_json(json.loads((PINNED / f"{claim_id}.json").read_text()))


def pinned_ray_scan(claim_id: str, grid) -> tuple[CrossInstance, tuple[torch.Tensor, ...]]:
    """A pinned instance with one start W(0) per (R0, ε) of ``grid`` on the exact ray
    R0·Ŵ^mm_α (inside every cone of the grid: cos = 1), as ``cone_scan`` draws them. The unit
    direction Ŵ^mm_α is stored in the pinned file ("ray", certified when the file was made),
    so that importing the claims never runs a solver."""
    data = json.loads((PINNED / f"{claim_id}.json").read_text())
    inst = CrossInstance.from_json(data)
    ray = np.asarray(data["ray"], dtype=np.float64)
    return inst, tuple(torch.as_tensor(R0 * ray) for R0, _ in grid)
