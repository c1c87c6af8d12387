"""Instance families of particular claims of arXiv 2306.13596 (theorems/maxmargin): selections
whose Def. 2 fails by a tie or by a higher score, instances where every non-optimal token is a
support token, score ranges for the loss controls, numerically hard instances, and token sets
for the nonlinear heads of Theorem NL.

``tied_support_instances`` finds its support tokens the way the claims judge Def. 2, with
``theorems.maxmargin.common_svm.def2_independent``.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch
from hypothesis import strategies as st

from strategies.combinators import SEEDS, seeded, with_init
from strategies.instances import SVM_FEASIBLE, UNIQUE_OPT, PromptInstance
from strategies.prompt import (
    decoupled_data,
    decoupled_instances,
    equal_nonopt_instances,
    global_opt_instances,
    local_opt_instances,
    loss_comparison_instance,
)
from theorems import evidence
from theorems.maxmargin.common_svm import def2_independent

DTYPE = torch.float64


def with_scores(inst: PromptInstance, g: torch.Tensor, meta: dict) -> PromptInstance:
    """The decoupled instance with new scores g (x_it = [k_it; y_i g_it])."""
    X = inst.X.clone()
    X[..., -1] = inst.y[:, None] * g
    assumptions = inst.assumptions - {"locally_optimal_alpha", "equal_nonopt_scores"}
    return dataclasses.replace(
        inst, X=X, assumptions=assumptions, meta={**inst.meta, "g": g, **meta}
    )


# ---- Def. 2 broken on purpose (MM-DEF-TIES-NOT-LOCAL, MM-F3, MM-F5) -----------------------------


@st.composite
def tied_support_instances(draw):
    """A feasible (α, data) where one support token of some input (found by the independent
    Def. 2 judge) is given α_i's own score."""
    inst = draw(
        st.one_of(
            global_opt_instances(dk=st.integers(1, 6)),
            local_opt_instances(),
        )
    )
    support = def2_independent(inst).support
    candidates = [(i, t) for i, ts in enumerate(support) for t in sorted(ts)]
    if not candidates:  # cannot happen: a feasible ATT-SVM has an active constraint
        evidence.reject("no support token")
    i, t = draw(st.sampled_from(candidates))
    g = inst.meta["g"].clone()
    g[i, t] = g[i, int(inst.alpha[i])]
    return with_scores(inst, g, {"tie": (i, t)})


@st.composite
def tied_local_instances(draw):
    """A non-global locally-optimal α (``local_opt_instances``) whose support tokens, in one
    input where α_i ≠ opt_i, are all given α_i's own score: no support token scores higher,
    but strictness (Def. 2) fails by ties. α stays non-global; opt stays unique."""
    inst = draw(local_opt_instances(n=st.integers(1, 3)))
    opt = inst.meta["opt"]
    i = draw(st.sampled_from([j for j in range(inst.n) if opt[j] != inst.alpha[j]]))
    g = inst.meta["g"].clone()
    for t in inst.meta["support"][i]:
        g[i, t] = g[i, int(inst.alpha[i])]
    return with_scores(inst, g, {"tied_input": i})


@st.composite
def beaten_support_instances(draw):
    """A non-global locally-optimal instance in which one support token of one input is
    raised strictly above α_i (by a gap in [0.05, 0.5]): α is no longer locally optimal, and
    there are no ties."""
    inst = draw(local_opt_instances(n=st.integers(1, 3)))
    i = draw(st.integers(0, inst.n - 1))
    t = draw(st.sampled_from(inst.meta["support"][i]))
    g = inst.meta["g"].clone()
    g[i, t] = g[i, int(inst.alpha[i])] + draw(st.floats(0.05, 0.5))
    return with_scores(inst, g, {"raised": (i, t)})


# ---- the descent lemma's alternative hypothesis (MM-LEMMA-DESCENT-ALL-SUPPORT) ------------------


@st.composite
def all_support_instances(draw, loss: str):
    """Decoupled instances with general scores (unique opt, the others uniform on [−1, 1], no
    equal-score assumption) whose ATT-SVM(opt) has every non-optimal token as a support token.

    Either built so (scores and labels of ``global_opt_instances``, keys replaced: k_iopt −
    k_it = m q + r_it with r_it ⟂ q centred with positive weights w, so p = q/m meets the KKT
    conditions with multipliers ∝ w and every margin is 1), or generic Gaussian keys with
    dk = n(T−1) (the premise then holds in some draws and is judged by the oracle).
    """
    if draw(st.booleans()):
        n, T = draw(st.integers(1, 2)), draw(st.integers(2, 3))
        return draw(global_opt_instances(n=n, T=T, dk=n * (T - 1), loss=loss))
    inst = draw(global_opt_instances(n=st.integers(1, 3), T=st.integers(2, 5), loss=loss))
    gen = seeded(draw(SEEDS))
    n, T, dk = inst.n, inst.T, int(draw(st.integers(2, 5)))
    q = torch.randn(dk, generator=gen, dtype=DTYPE)
    q = q / torch.linalg.vector_norm(q)
    m = 0.5 + float(torch.rand((), generator=gen, dtype=DTYPE))
    r = torch.randn(n, T, dk, generator=gen, dtype=DTYPE)
    r = r - (r @ q)[..., None] * q
    w = 0.5 + torch.rand(n, T, generator=gen, dtype=DTYPE)
    opt = torch.as_tensor(inst.alpha)
    w[torch.arange(n), opt] = 0.0  # the opt "difference" is 0 and carries no multiplier
    r = r - (w[..., None] * r).sum((0, 1)) / w.sum()
    diffs = m * q + r
    diffs[torch.arange(n), opt] = 0.0
    k = torch.randn(n, 1, dk, generator=gen, dtype=DTYPE) - diffs
    X, v, W = decoupled_data(k, inst.meta["g"], inst.y)
    return dataclasses.replace(inst, X=X, v=v, W=W, meta={**inst.meta, "k": k})


# ---- the loss controls (MM-F8, MM-F9) and numerics (MM-F15) -------------------------------------


def high_score_instances(loss: str, top: tuple[float, float] = (2.0, 30.0)):
    """Theorem G's hypotheses (n = 1, equal non-optimal scores, arbitrary p0) with the optimal
    score γ+ in ``top`` (shrinking toward the top: the smallest floor) and γ− = γ+ − gap."""
    lo, hi = top
    levels = st.tuples(st.floats(0.0, hi - lo), st.floats(0.05, 1.0)).map(
        lambda xg: (hi - xg[0], hi - xg[0] - xg[1])
    )
    return levels.flatmap(lambda lv: with_init(equal_nonopt_instances(n=1, loss=loss, levels=lv)))


def straddling_scores(n: int, T: int):
    """One score in (1, 2], the others in [−1, 1): the square loss's target 1 lies strictly
    inside the score range."""

    def build(seed: int, where: int):
        gen = seeded(seed)
        g = -1.0 + 1.95 * torch.rand(n, T, generator=gen, dtype=DTYPE)  # [−1, 0.95)
        g[:, where] = 1.05 + 0.95 * torch.rand(n, generator=gen, dtype=DTYPE)  # [1.05, 2)
        return g

    return st.builds(build, SEEDS, st.integers(0, T - 1))


def square_loss_instances():
    """One input of T ∈ {2, 3} tokens, keys in general position (dk ∈ [T − 1, 3]), scores
    straddling the square loss's target 1 (``straddling_scores``), square loss."""
    return st.integers(2, 3).flatmap(
        lambda T: decoupled_instances(
            n=1, T=T, dk=st.integers(T - 1, 3), scores=straddling_scores(1, T), loss="square"
        )
    )


@st.composite
def numerically_hard_instances(draw):
    """Where float64 recipes stall: the loss comparison with a large score C (the first input
    saturates long before the direction turns), or a single input with widely spread keys
    (softmax saturation at margins of ~37 after a few steps)."""
    if draw(st.booleans()):
        C = draw(st.floats(1.0, 1000.0))
        return loss_comparison_instance(C, draw(st.sampled_from(["logistic", "correlation"])))
    return draw(
        with_init(equal_nonopt_instances(n=1, key_scale=st.sampled_from([10.0, 30.0, 100.0])))
    )


# ---- nonlinear heads (Theorem NL, control F10) ---------------------------------------------------


@st.composite
def convex_head_instances(draw, n=st.integers(1, 3), T=st.integers(2, 4)):
    """Tokens in R² (W = I, all Y_i = +1) for the head ψ(u) = ‖u‖², built so that the
    ψ-optimal token of every input is unique and ATT-SVM(ψ-opt) is feasible.

    Feasibility means some unit q has qᵀ(x_iopt − x_it) > 0 for all i, t. Draw q, the other
    tokens i.i.d. N(0, I), and put x_iopt = a_i q + z_i q⊥ with z_i ~ N(0, 0.5²) and a_i at
    least g above every other token's q-projection and large enough that ‖x_iopt‖ ≥ g + the
    largest other norm (g ∈ [0.05, 0.5]). Every feasible configuration arises this way (take
    its q), up to the gap g. Y_i ψ = ‖·‖² is strictly convex along each edge of the simplex, so
    the maximum of Y_i ψ(X_iᵀs) over s ∈ Δ_T is attained only at e_opt (the safe sufficient
    condition of spec §2.6). The head v is unused (ψ replaces it) and stored as 0.
    """
    n, T = draw(n), draw(T)
    opt = np.array(draw(st.lists(st.integers(0, T - 1), min_size=n, max_size=n)), dtype=np.int64)
    seed = draw(st.integers(0, 2**32 - 1))
    gen = torch.Generator().manual_seed(seed)
    theta = 2 * math.pi * float(torch.rand((), generator=gen, dtype=DTYPE))
    q = torch.tensor([math.cos(theta), math.sin(theta)], dtype=DTYPE)
    q_perp = torch.tensor([-q[1], q[0]], dtype=DTYPE)
    X = torch.randn(n, T, 2, generator=gen, dtype=DTYPE)
    for i in range(n):
        others = torch.cat([X[i, : opt[i]], X[i, opt[i] + 1 :]])
        gap = 0.05 + 0.45 * float(torch.rand((), generator=gen, dtype=DTYPE))
        z = 0.5 * float(torch.randn((), generator=gen, dtype=DTYPE))
        reach = float(torch.linalg.vector_norm(others, dim=-1).max()) + gap
        a = max(float((others @ q).max()) + gap, math.sqrt(max(0.0, reach**2 - z**2)))
        a += 0.5 * float(torch.rand((), generator=gen, dtype=DTYPE))
        X[i, opt[i]] = a * q + z * q_perp
    return PromptInstance(
        X,
        torch.ones(n, dtype=DTYPE),
        torch.zeros(2, dtype=DTYPE),
        torch.eye(2, dtype=DTYPE),
        alpha=opt,
        assumptions={UNIQUE_OPT, SVM_FEASIBLE},
        seed=seed,
        meta={"psi": "squared_norm", "q": q},
    )


@st.composite
def mixed_label_head_instances(draw, n=st.integers(2, 4), T=st.integers(2, 4)):
    """Tokens in R² (W = I) with labels of both signs, for the head ψ(u) = u₁² − u₂²
    (``saddle_square``), built so that Theorem NL's vertex condition holds for every input
    and ATT-SVM(ψ-opt) is feasible.

    An input with Y = +1 has tokens (a_t, c): along its simplex Y ψ = (Σ s_t a_t)² − c², whose
    maximum is attained only at the token of largest |a_t| when that is unique. An input with
    Y = −1 has tokens (c, b_t), and Y ψ = (Σ s_t b_t)² − c² likewise. The ψ-optimal token is
    put at σ₁·(max |a_others| + gap + U) (resp. σ₂ on b), with signs σ₁, σ₂ drawn once, so that
    p = (σ₁, σ₂)·big separates it: ATT-SVM(ψ-opt) is feasible. The label decides which token
    is ψ-optimal: for Y = −1 the token of smallest ψ. At least one input of each label.
    """
    n, T = draw(n), draw(T)
    labels = draw(st.lists(st.sampled_from([1.0, -1.0]), min_size=n, max_size=n))
    labels[0], labels[-1] = 1.0, -1.0
    opt = np.array(draw(st.lists(st.integers(0, T - 1), min_size=n, max_size=n)), dtype=np.int64)
    seed = draw(st.integers(0, 2**32 - 1))
    gen = torch.Generator().manual_seed(seed)
    signs = torch.where(torch.rand(2, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0)
    X = torch.empty(n, T, 2, dtype=DTYPE)
    for i in range(n):
        axis = 0 if labels[i] > 0 else 1  # the coordinate in which this input's tokens differ
        free = torch.randn(T, generator=gen, dtype=DTYPE)
        others = torch.cat([free[: opt[i]], free[opt[i] + 1 :]])
        gap = 0.05 + 0.45 * float(torch.rand((), generator=gen, dtype=DTYPE))
        free[opt[i]] = signs[axis] * (
            float(others.abs().max())
            + gap
            + 0.5 * float(torch.rand((), generator=gen, dtype=DTYPE))
        )
        X[i, :, axis] = free
        X[i, :, 1 - axis] = torch.randn((), generator=gen, dtype=DTYPE)
    return PromptInstance(
        X,
        torch.tensor(labels, dtype=DTYPE),
        torch.zeros(2, dtype=DTYPE),
        torch.eye(2, dtype=DTYPE),
        alpha=opt,
        assumptions={UNIQUE_OPT, SVM_FEASIBLE},
        seed=seed,
        meta={"psi": "saddle_square"},
    )


@st.composite
def gaussian_head_instances(draw, n=st.integers(1, 3), T=st.integers(2, 4)):
    """Tokens i.i.d. N(0, I) in R² (W = I, all Y_i = +1), no condition on the head."""
    n, T = draw(n), draw(T)
    seed = draw(st.integers(0, 2**32 - 1))
    X = torch.randn(n, T, 2, generator=torch.Generator().manual_seed(seed), dtype=DTYPE)
    return PromptInstance(
        X,
        torch.ones(n, dtype=DTYPE),
        torch.zeros(2, dtype=DTYPE),
        torch.eye(2, dtype=DTYPE),
        seed=seed,
        meta={"psi": "concave_bump"},
    )
