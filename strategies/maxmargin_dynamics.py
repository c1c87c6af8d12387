"""Instances of the dynamics claims of arXiv 2306.13596 (theorems/maxmargin: claims_gd,
claims_figures, claims_joint): Theorem G's hand-reduced counterexample, Theorem L's grid of
nested cones, the noise draws of Figure 2, and the joint-training geometry of Theorem J.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import strategies as st

from models.oracles.svm import att_svm
from strategies.instances import NONTIGHT_V_SVM, SVM_FEASIBLE, TIGHT_V_SVM, PromptInstance
from strategies.prompt import cone_inits, decoupled_data, figure2_instance
from theorems import evidence

DTYPE = torch.float64


# ---- Theorem G -----------------------------------------------------------------------------------


def theorem_g_counterexample() -> PromptInstance:
    """A hand-reduced version of the counterexample the search finds for Theorem G as read.

    n = 2, T = 2, 2-D keys, equal non-optimal scores (opt scores 1, the other token 0.5).
    Input 0: keys (0, 0) [opt] and (−1, 0): constraint p₁ ≥ 1. Input 1: keys (0, 0) [opt] and
    (10, −10). ATT-SVM(opt) is feasible, p^mm(opt) = (1, 1.1). But α = (opt, non-opt) has
    p^mm(α) = (1, 0), where input 1's only constraint has margin 10: its support set is empty,
    so α is locally optimal (Def. 2 is vacuous on input 1), and GD from p(0) = (1, 0) stays.
    """
    k = torch.tensor([[[0.0, 0.0], [-1.0, 0.0]], [[0.0, 0.0], [10.0, -10.0]]], dtype=DTYPE)
    g = torch.tensor([[1.0, 0.5], [1.0, 0.5]], dtype=DTYPE)
    y = torch.ones(2, dtype=DTYPE)
    X, v, W = decoupled_data(k, g, y)
    return PromptInstance(
        X,
        y,
        v,
        W,
        p0=torch.tensor([1.0, 0.0, 0.0], dtype=DTYPE),
        alpha=np.array([0, 0]),
        assumptions={"decoupled", "unique_opt", "svm_feasible", "equal_nonopt_scores"},
        meta={"g": g, "k": k, "opt": np.array([0, 0])},
    )


# ---- Theorem L -----------------------------------------------------------------------------------


@st.composite
def cone_grid(draw, instances, grid, starts: int):
    """One instance and ``starts`` cone initializations (``cone_inits``) at every (R0, ε) of
    ``grid``: a tuple, per level of the grid, of instances that differ only in p0."""
    inst = draw(instances)
    levels = tuple(
        tuple(draw(cone_inits(inst, R0=R0, eps=eps)) for _ in range(starts)) for R0, eps in grid
    )
    return inst, levels


# ---- Figure 2 ------------------------------------------------------------------------------------


def figure2_draws() -> st.SearchStrategy[PromptInstance]:
    """Figure 2's instance (``figure2_instance``) on a noise draw: the noise seed in
    [0, 10 000] (seed 0 is the paper's own draw)."""
    return st.integers(0, 10_000).map(figure2_instance)


# ---- Theorem J -----------------------------------------------------------------------------------


def _rotation(theta: float) -> torch.Tensor:
    c, s = math.cos(theta), math.sin(theta)
    return torch.tensor([[c, -s], [s, c]], dtype=DTYPE)


@st.composite
def joint_instances(draw, tight=st.booleans(), slack: float | None = None, score_init=False):
    """Inputs [(0, 0), x_i] in R² (W = I, α_i = 1) with a prescribed v-SVM support set S.

    In a frame (e1, e2), rotated at random at the end: margin m ∈ [0.5, 1.5], y_i x_i =
    (y_i ρ_i, m) for i ∈ S and (y_i ρ_i, c_i) with c_i ∈ m·[1.05, 2.5] otherwise, ρ_i ∈ [0.2, 2].
    S holds both labels (so Σ_S λ_i y_i ρ_i = 0 has a positive solution: v^mm = e2/m, support
    exactly S), and every x_i = (ρ_i, y_i c_i) has a positive e1 component, so every ATT-SVM is
    feasible. Tight: S = all inputs (n ∈ [2, 4]); non-tight: 2 ≤ |S| < n (n ∈ [3, 5]).

    ``slack`` (non-tight only): raise the non-support ρ_i until the relaxation slack
    (theorems/maxmargin/claims_joint.py) is ≥ slack and their relaxed constraints are
    inactive: with p_S the ATT-SVM of the support inputs alone, ρ_i·p̂_S1 ≥ max(m + μ_S +
    slack − c_i(1 + y_i p̂_S2), slack − y_i c_i p̂_S2); then p^relax = p_S. ``score_init``: the
    initial head v0 scores every selected token above the zero token (y_i v0ᵀx_i > 0);
    otherwise v0 is a random unit vector. p0 is a random unit vector (Fig. 3 starts from unit
    vectors too).
    """
    tight = draw(tight) if isinstance(tight, st.SearchStrategy) else tight
    n = draw(st.integers(2, 4) if tight else st.integers(3, 5))
    n_support = n if tight else draw(st.integers(2, n - 1))
    seed = draw(st.integers(0, 2**32 - 1))
    gen = torch.Generator().manual_seed(seed)

    def uniform(lo, hi, size=()):
        return lo + (hi - lo) * torch.rand(size, generator=gen, dtype=DTYPE)

    y = torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    y[0], y[1] = 1.0, -1.0  # S = the first n_support inputs: both labels present
    support = torch.arange(n) < n_support
    m = float(uniform(0.5, 1.5))
    rho = uniform(0.2, 2.0, n)
    c = torch.where(support, torch.full((n,), m, dtype=DTYPE), m * uniform(1.05, 2.5, n))
    if slack is not None and not tight:
        sup_x = torch.stack([rho[support], y[support] * c[support]], -1)
        keys = torch.stack([torch.zeros_like(sup_x), sup_x], 1)
        p_s = att_svm(keys, np.ones(n_support, dtype=np.int64))
        if not p_s.ok:  # cannot happen for this geometry; the claims re-check with the oracle
            evidence.reject(f"ATT-SVM of the support inputs {p_s.status}")
        mu, (u1, u2) = float(p_s.margin), p_s.direction
        need = torch.maximum(m + mu + slack - c * (1 + y * u2), slack - y * c * u2) / u1
        rho = torch.where(support, rho, torch.maximum(rho, need + 0.01))
    x = torch.stack([rho, y * c], -1)
    Q = _rotation(float(uniform(0.0, 2 * math.pi)))
    order = torch.randperm(n, generator=gen)
    x, y, support = (x @ Q.T)[order], y[order], support[order]
    X = torch.zeros(n, 2, 2, dtype=DTYPE)
    X[:, 1] = x
    v_hat = Q @ torch.tensor([0.0, 1.0], dtype=DTYPE)
    if score_init:  # a random direction inside the arc of heads that score every x_i > 0
        z = y[:, None] * x
        perp = torch.stack([-v_hat[1], v_hat[0]])
        psi = torch.atan2(z @ perp, z @ v_hat)
        lo, hi = float(psi.max()) - math.pi / 2, float(psi.min()) + math.pi / 2
        phi = lo + (hi - lo) * float(uniform(0.05, 0.95))
        v0 = math.cos(phi) * v_hat + math.sin(phi) * perp
    else:
        a = float(uniform(0.0, 2 * math.pi))
        v0 = torch.tensor([math.cos(a), math.sin(a)], dtype=DTYPE)
    b = float(uniform(0.0, 2 * math.pi))
    p0 = torch.tensor([math.cos(b), math.sin(b)], dtype=DTYPE)
    return PromptInstance(
        X,
        y,
        v0,
        torch.eye(2, dtype=DTYPE),
        p0=p0,
        alpha=np.ones(n, dtype=np.int64),
        assumptions={SVM_FEASIBLE, TIGHT_V_SVM if tight else NONTIGHT_V_SVM},
        seed=seed,
        meta={"support": support.tolist(), "v_margin": m, "v_mm_direction": v_hat},
    )
