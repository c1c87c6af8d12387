"""Hypothesis strategies for the prompt-attention model of 2306.13596, and the paper's instances.

Every strategy is an ``@st.composite`` whose size arguments (``n``, ``T``, ``dk``, ...) accept an
int or a strategy. Structural choices (sizes, positions, which inputs are special) are drawn
from Hypothesis so that they shrink; continuous values come from a drawn 32-bit seed feeding
``torch.Generator().manual_seed(seed)`` (Hypothesis does not manage torch's RNG), so every
example replays from its seed. Every float is bounded; none is NaN, infinite or subnormal.

Instances are built to meet their assumptions directly. ``assume()`` is used only for rare
degeneracies, each announced by ``event("reject: <reason>")``.

All generators except the paper's Figure 3 use the decoupled form (spec maxmargin §3.1):
x_it = [k_it ; Y_i g_it] ∈ R^{dk+1}, v = e_{dk+1}, W = diag(I_dk, 0). Then the scores are
γ_it = Y_i·(Y_i g_it) = g_it exactly and the keys are [k_it ; 0] exactly (products with 0 and 1
are exact in floating point), so keys and scores are independent knobs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import torch
from hypothesis import assume, event
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.strategies import SearchStrategy

from models.oracles.selection import (
    UndecidedError,
    enumerate_locally_optimal,
    local_optimality,
    token_margins,
)
from models.oracles.svm import att_svm
from models.problems.attention import cosine
from strategies.instances import (
    ARBITRARY_P0,
    CONE_INIT,
    DECOUPLED,
    EQUAL_NONOPT_SCORES,
    LOCALLY_OPTIMAL_ALPHA,
    NON_GLOBAL_ALPHA,
    NONTIGHT_V_SVM,
    PAPER_INSTANCE,
    SVM_FEASIBLE,
    SVM_INFEASIBLE,
    TIGHT_V_SVM,
    UNIQUE_OPT,
    PromptInstance,
)

Tensor = torch.Tensor
DTYPE = torch.float64
SEEDS = st.integers(0, 2**32 - 1)

__all__ = [
    "decoupled_instances",
    "global_opt_instances",
    "equal_nonopt_instances",
    "local_opt_instances",
    "cone_inits",
    "infeasible_instances",
    "figure1_instance",
    "figure2_instance",
    "figure3_instance",
    "loss_comparison_instance",
    "decoupled_data",
]


# ---- small helpers ---------------------------------------------------------------------------


def _draw(draw, x):
    """Draw ``x`` if it is a strategy, else return it unchanged."""
    return draw(x) if isinstance(x, SearchStrategy) else x


def _int_arg(draw, x, name: str, lo: int, hi: int | None = None) -> int:
    value = _draw(draw, x)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise InvalidArgument(f"{name}: expected an int or a strategy of ints, got {value!r}")
    if value < lo or (hi is not None and value > hi):
        bound = f"[{lo}, {hi}]" if hi is not None else f"≥ {lo}"
        raise InvalidArgument(f"{name}: must be {bound}, got {value}")
    return int(value)


def _size_rule(x, n: int):
    """T given as a rule of n (a function n → int or strategy, ``strategies.ladder.rung_sizes``
    for a box whose n·T is capped), applied; anything else as it is."""
    return x(n) if callable(x) and not isinstance(x, SearchStrategy) else x


def _float_arg(draw, x, name: str, lo: float, hi: float = math.inf, *, open_lo=False) -> float:
    value = _draw(draw, x)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise InvalidArgument(f"{name}: expected a number or a strategy, got {value!r}") from None
    if not math.isfinite(value) or value < lo or value > hi or (open_lo and value == lo):
        raise InvalidArgument(f"{name}: must be a finite number in [{lo}, {hi}], got {value}")
    return value


def _generator(draw) -> tuple[int, torch.Generator]:
    seed = draw(SEEDS)
    return seed, torch.Generator().manual_seed(seed)


def _uniform(gen: torch.Generator, shape, lo: float, hi: float) -> Tensor:
    return lo + (hi - lo) * torch.rand(shape, generator=gen, dtype=DTYPE)


def _randn(gen: torch.Generator, shape) -> Tensor:
    return torch.randn(shape, generator=gen, dtype=DTYPE)


def _labels(gen: torch.Generator, n: int) -> Tensor:
    return torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)


def _perm(gen: torch.Generator, m: int) -> list[int]:
    return torch.randperm(m, generator=gen).tolist()


def decoupled_data(k: Tensor, g: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """(X, v, W) of the decoupled form: x_it = [k_it ; y_i g_it], v = e_{dk+1}, W = diag(I, 0).

    ``k`` (n, T, dk) keys, ``g`` (n, T) scores, ``y`` (n,) labels; then the instance's keys are
    [k ; 0] and its scores are g, both exactly.
    """
    n, T, dk = k.shape
    X = torch.cat([k, (y[:, None] * g)[..., None]], dim=-1).to(DTYPE)
    v = torch.zeros(dk + 1, dtype=DTYPE)
    v[-1] = 1.0
    W = torch.diag(torch.cat([torch.ones(dk, dtype=DTYPE), torch.zeros(1, dtype=DTYPE)]))
    return X, v, W


def _draw_scores(draw, scores, n: int, T: int, gen: torch.Generator) -> Tensor:
    """An (n, T) score matrix: uniform on [-1, 1] by default, else from ``scores``."""
    if scores is None:
        return _uniform(gen, (n, T), -1.0, 1.0)
    value = scores(n, T) if callable(scores) and not isinstance(scores, SearchStrategy) else scores
    value = _draw(draw, value)
    try:
        g = torch.as_tensor(np.asarray(value, dtype=np.float64), dtype=DTYPE)
    except (TypeError, ValueError) as exc:
        raise InvalidArgument(f"scores: cannot be read as an (n, T) float array ({exc})") from None
    if tuple(g.shape) != (n, T):
        raise InvalidArgument(f"scores: expected shape {(n, T)}, got {tuple(g.shape)}")
    if not bool(torch.isfinite(g).all()):
        raise InvalidArgument("scores: contains NaN or infinity")
    return g


def _p0_in_key_space(draw, gen: torch.Generator, dk: int) -> tuple[Tensor, float]:
    """p0 = r·u with r drawn in [0, 10] and u a random unit vector of the key coordinates."""
    r = draw(st.floats(0.0, 10.0, allow_nan=False, allow_infinity=False, allow_subnormal=False))
    u = _randn(gen, dk)
    u = u / torch.linalg.vector_norm(u)
    return torch.cat([r * u, torch.zeros(1, dtype=DTYPE)]), r


def _check_svm(keys: Tensor, alpha, what: str):
    """Solve ATT-SVM(alpha); reject (with an event) unless it is certified optimal."""
    sol = att_svm(keys, alpha)
    if sol.status != "optimal":
        event(f"reject: ATT-SVM({what}) {sol.status}")
    assume(sol.status == "optimal")
    return sol


# ---- 1. decoupled instances ------------------------------------------------------------------


@st.composite
def decoupled_instances(
    draw,
    n=st.integers(1, 4),
    T=st.integers(2, 6),
    dk=st.integers(1, 6),
    scores: SearchStrategy | Callable | None = None,
    key_scale=1.0,
    loss: str = "logistic",
):
    """Decoupled instances (spec maxmargin §3.1): scores and keys are independent knobs.

    Guarantees DECOUPLED: x_it = [k_it ; Y_i g_it], v = e_{dk+1}, W = diag(I_dk, 0), hence the
    instance's scores are exactly g and its keys exactly [k ; 0] (``meta["g"]``, ``meta["k"]``).
    Keys are i.i.d. N(0, key_scale²); labels are random ±1 (they cancel in the scores).

    ``scores``: None (uniform on [-1, 1]), a strategy of (n, T) arrays, or a callable
    ``scores(n, T)`` returning such a strategy or an array. No other assumption is promised;
    ``alpha`` is None.
    """
    n = _int_arg(draw, n, "n", 1)
    T = _int_arg(draw, T, "T", 1)
    dk = _int_arg(draw, dk, "dk", 1)
    scale = _float_arg(draw, key_scale, "key_scale", 0.0, 1e6, open_lo=True)
    seed, gen = _generator(draw)
    k = scale * _randn(gen, (n, T, dk))
    y = _labels(gen, n)
    g = _draw_scores(draw, scores, n, T, gen)
    X, v, W = decoupled_data(k, g, y)
    return PromptInstance(
        X, y, v, W, loss=loss, assumptions={DECOUPLED}, seed=seed, meta={"g": g, "k": k}
    )


# ---- 2./3. instances with a unique, feasible global optimum ----------------------------------


def _opt_instance(draw, n, T, dk, min_gap, key_scale, loss, with_p0, equal, levels):
    n = _int_arg(draw, n, "n", 1)
    T = _int_arg(draw, _size_rule(T, n), "T", 2)
    min_gap = _float_arg(draw, min_gap, "min_gap", 0.0, 1.0, open_lo=True)
    dk = n * (T - 1) + draw(st.integers(0, 2)) if dk is None else _int_arg(draw, dk, "dk", 1)
    scale = _float_arg(draw, key_scale, "key_scale", 0.0, 1e6, open_lo=True)
    opt = np.array(draw(st.lists(st.integers(0, T - 1), min_size=n, max_size=n)), dtype=np.int64)
    seed, gen = _generator(draw)
    rows = torch.arange(n)
    gap = _uniform(gen, n, min_gap, 1.0)  # opt beats the runner-up by this much
    if equal:
        if levels is None:
            minus = _uniform(gen, n, -1.0, 1.0)
            plus = minus + gap
        else:
            plus_v, minus_v = (float(x) for x in levels)
            if not (math.isfinite(plus_v) and math.isfinite(minus_v) and plus_v > minus_v):
                raise InvalidArgument(f"levels: expected finite (γ+, γ−) with γ+ > γ−: {levels}")
            plus = torch.full((n,), plus_v, dtype=DTYPE)
            minus = torch.full((n,), minus_v, dtype=DTYPE)
        g = minus[:, None].expand(n, T).clone()
        g[rows, opt] = plus
    else:
        g = _uniform(gen, (n, T), -1.0, 1.0)
        g[rows, opt] = -math.inf
        g[rows, opt] = g.max(dim=1).values + gap
    k = scale * _randn(gen, (n, T, dk))
    y = _labels(gen, n)
    X, v, W = decoupled_data(k, g, y)
    assumptions = {DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE}
    if equal:
        assumptions.add(EQUAL_NONOPT_SCORES)
    meta = {"g": g, "k": k, "opt": opt.copy(), "min_gap": min_gap}
    if dk < n * (T - 1):  # not feasible almost surely: ask the oracle
        keys = torch.cat([k, torch.zeros(n, T, 1, dtype=DTYPE)], dim=-1)
        meta["p_mm"] = torch.as_tensor(_check_svm(keys, opt, "opt").x, dtype=DTYPE)
    p0 = None
    if with_p0:
        p0, r = _p0_in_key_space(draw, gen, dk)
        assumptions.add(ARBITRARY_P0)
        meta["p0_norm"] = r
    return PromptInstance(
        X, y, v, W, loss=loss, p0=p0, alpha=opt, assumptions=assumptions, seed=seed, meta=meta
    )


@st.composite
def global_opt_instances(
    draw,
    n=st.integers(1, 4),
    T=st.integers(2, 6),
    dk=None,
    min_gap=0.05,
    key_scale=1.0,
    loss: str = "logistic",
    with_p0: bool = False,
):
    """Decoupled instances with a unique global optimum whose ATT-SVM is feasible.

    Guarantees DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE, with ``alpha = opt`` (``meta["opt"]``):
    - opt_i sits at a drawn position; its score is the maximum of the others plus a gap drawn
      in [min_gap, 1], the others uniform on [-1, 1];
    - feasibility: by default dk = n(T−1) + {0, 1, 2}, so the n(T−1) Gaussian difference
      vectors k_iopt − k_it are linearly independent almost surely and some p meets every
      constraint with equality. A given ``dk`` below n(T−1) is checked by the certified oracle
      and the draw rejected (event) when not optimal; ``meta["p_mm"]`` then holds the solution.
    ``with_p0=True`` adds an arbitrary p0 (norm in [0, 10], ARBITRARY_P0).
    """
    return _opt_instance(draw, n, T, dk, min_gap, key_scale, loss, with_p0, False, None)


@st.composite
def equal_nonopt_instances(
    draw,
    n=st.integers(1, 4),
    T=st.integers(2, 6),
    dk=None,
    min_gap=0.05,
    key_scale=1.0,
    loss: str = "logistic",
    with_p0: bool = False,
    levels: tuple[float, float] | None = None,
):
    """As ``global_opt_instances``, with all non-optimal scores of an input equal.

    Guarantees DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE, EQUAL_NONOPT_SCORES (spec maxmargin §2.1,
    §2.2): γ_it = γ_i^- for every t ≠ opt_i (one float, so equality is exact), and
    γ_i^+ = γ_i^- + gap with gap in [min_gap, 1]. ``levels=(γ+, γ−)`` fixes the two scores for
    every input (the spec's safe regime is (1.0, 0.5)). ``with_p0=True`` adds an arbitrary p0
    of norm in [0, 10] (ARBITRARY_P0), as Theorem G allows any initialization.
    """
    return _opt_instance(draw, n, T, dk, min_gap, key_scale, loss, with_p0, True, levels)


# ---- 4. non-global locally-optimal selections ------------------------------------------------


def _unit_perp(gen: torch.Generator, q: Tensor, count: int) -> Tensor:
    """``count`` Gaussian vectors projected onto q^⊥ (q a unit vector)."""
    r = _randn(gen, (count, q.shape[0]))
    return r - (r @ q)[:, None] * q[None, :]


def _construct_local(draw, n, T, dk, min_gap, margin_gap, key_scale, allow_vacuous):
    """Keys and scores with a prescribed ATT-SVM(α) solution p^mm = q/m and support sets.

    Every difference d_it = k_iα − k_it is c_it q + r_it with r_it ⟂ q: c_it = m on support
    tokens, c_it ≥ m(1 + margin_gap) elsewhere. The support r's are centred with positive
    weights w (Σ w r = 0), so p = q/m meets the KKT conditions with multipliers ∝ w > 0:
    support margins are exactly 1, all others ≥ 1 + margin_gap.
    """
    if T < 3:
        raise InvalidArgument(f"T: local_opt_instances needs T ≥ 3, got {T}")
    alpha = np.array(draw(st.lists(st.integers(0, T - 1), min_size=n, max_size=n)), np.int64)
    flags = draw(st.lists(st.booleans(), min_size=n, max_size=n))
    if not any(flags):
        flags[draw(st.integers(0, n - 1))] = True
    vacuous = [False] * n
    if allow_vacuous and n >= 2:
        vacuous = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        if all(vacuous):
            vacuous[draw(st.integers(0, n - 1))] = False
    seed, gen = _generator(draw)
    opt = alpha.copy()
    support: list[list[int]] = []
    for i in range(n):
        others = [t for t in range(T) if t != alpha[i]]
        order = [others[j] for j in _perm(gen, len(others))]
        if flags[i] or vacuous[i]:
            opt[i] = order.pop(0)  # a non-support token that will beat α_i
        if vacuous[i]:
            support.append([])
        else:
            size = draw(st.integers(1, len(order)))
            support.append(sorted(order[:size]))
    nonglobal = opt != alpha
    # geometry
    q = _randn(gen, dk)
    q = q / torch.linalg.vector_norm(q)
    m = key_scale * float(_uniform(gen, (), 0.5, 1.5))
    diffs = torch.zeros(n, T, dk, dtype=DTYPE)
    sup_idx = [(i, t) for i in range(n) for t in support[i]]
    r_sup = key_scale * _unit_perp(gen, q, len(sup_idx))
    w = _uniform(gen, len(sup_idx), 0.5, 1.5)
    r_sup = r_sup - (w[:, None] * r_sup).sum(0) / w.sum()
    for (i, t), r in zip(sup_idx, r_sup, strict=True):
        diffs[i, t] = m * q + r
    for i in range(n):
        for t in range(T):
            if t != alpha[i] and t not in support[i]:
                c = m * (1.0 + margin_gap + float(_uniform(gen, (), 0.0, 1.5)))
                diffs[i, t] = c * q + key_scale * _unit_perp(gen, q, 1)[0]
    base = key_scale * _randn(gen, (n, 1, dk))
    k = base - diffs  # k_iα = base_i since diffs[i, α_i] = 0
    # scores: support tokens below α_i by ≥ min_gap; opt above everything by ≥ min_gap
    g = torch.zeros(n, T, dtype=DTYPE)
    for i in range(n):
        a = float(_uniform(gen, (), -1.0, 1.0))
        top = a + float(_uniform(gen, (), min_gap, 1.0)) if nonglobal[i] else a
        for t in range(T):
            if t == alpha[i]:
                g[i, t] = a
            elif t == opt[i]:
                g[i, t] = top
            elif t in support[i]:
                g[i, t] = a - float(_uniform(gen, (), min_gap, 1.0))
            else:  # non-support: may beat α_i, never within min_gap of the top
                g[i, t] = float(_uniform(gen, (), top - 1.5, top - min_gap))
        if vacuous[i]:  # no score condition at all: α_i may be any token but the top one
            g[i, alpha[i]] = float(_uniform(gen, (), top - 1.5, top - min_gap))
    p_mm = torch.cat([q / m, torch.zeros(1, dtype=DTYPE)])
    meta = {
        "method": "construct",
        "opt": opt,
        "support": support,
        "p_mm": p_mm,
        "margin": m,
        "vacuous_inputs": tuple(i for i in range(n) if vacuous[i]),
    }
    return seed, gen, k, g, alpha, meta


def _enumerate_local(draw, n, T, dk, min_gap, margin_gap, key_scale):
    """Generic keys and well-separated random scores; α picked among the locally optimal."""
    seed, gen = _generator(draw)
    # scores: a random order of T values spaced ≥ min_gap apart (no ties, no near-ties)
    steps = _uniform(gen, (n, T), min_gap, min_gap + 0.5)
    g = torch.cumsum(steps, dim=1) - 1.0
    g = torch.stack([row[torch.randperm(T, generator=gen)] for row in g])
    k = key_scale * _randn(gen, (n, T, dk))
    keys = torch.cat([k, torch.zeros(n, T, 1, dtype=DTYPE)], dim=-1)
    opt = torch.argmax(g, dim=1).numpy()
    try:
        found = enumerate_locally_optimal(keys, g)
    except UndecidedError:  # some ATT-SVM could not be certified either way
        found = None
    if found is None:
        event("reject: enumeration undecided")
    assume(found is not None)
    candidates = [a for a in found if tuple(a) != tuple(opt)]
    if not candidates:
        event("reject: no non-global locally-optimal alpha")
    assume(candidates)
    alpha = np.array(draw(st.sampled_from(candidates)), dtype=np.int64)
    verdict = local_optimality(keys, g, alpha)
    margins = token_margins(keys, alpha, verdict.svm.x)
    others = np.arange(T)[None, :] != alpha[:, None]
    support_mask = np.zeros((n, T), dtype=bool)
    for i, tokens in enumerate(verdict.support):
        support_mask[i, tokens] = True
    near = others & ~support_mask & (margins < 1.0 + margin_gap)
    if near.any():
        event("reject: near-active non-support token")
    assume(not near.any())
    meta = {
        "method": "enumerate",
        "opt": opt,
        "support": [t.tolist() for t in verdict.support],
        "p_mm": torch.as_tensor(verdict.svm.x, dtype=DTYPE),
        "vacuous_inputs": verdict.vacuous_inputs,
        "locally_optimal": found,
    }
    return seed, gen, k, g, alpha, meta


@st.composite
def local_opt_instances(
    draw,
    n=None,
    T=None,
    dk=None,
    min_gap=0.05,
    margin_gap=0.1,
    key_scale=1.0,
    loss: str = "logistic",
    with_p0: bool = False,
    method: str = "construct",
    allow_vacuous: bool = False,
):
    """Decoupled instances built around a NON-global, locally-optimal selection α.

    Guarantees DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE (for α), LOCALLY_OPTIMAL_ALPHA and
    NON_GLOBAL_ALPHA, with ``alpha`` the local selection and ``meta["opt"]`` the global one;
    ``meta["support"]`` and ``meta["p_mm"]`` are ATT-SVM(α)'s support sets and solution.

    ``method="construct"`` (default; defaults n ∈ [1, 4], T ∈ [3, 6], dk ∈ [2, 6]) generalizes
    Fig. 1(b): every key difference k_iα − k_it is c_it q + r_it with r_it ⟂ q, c_it = m for the
    drawn support tokens and ≥ m(1 + margin_gap) for the rest, the support r's centred with
    positive weights. Then p^mm(α) = q/m exactly (KKT with positive multipliers), support
    margins are exactly 1 and the others ≥ 1 + margin_gap, so the support sets are unambiguous.
    Scores put every support token ≥ min_gap below α_i (strict Def. 2 with room to spare)
    and, in at least one input, a non-support token ≥ min_gap above everything (α ≠ opt). No
    draw is rejected. ``allow_vacuous=True`` (n ≥ 2) lets some inputs have no support token,
    so Def. 2 puts no condition on them and α_i may even score low there.

    ``method="enumerate"`` (defaults n ∈ [1, 2], T ∈ [3, 4], dk ∈ [2, 3]): Gaussian keys and
    scores spaced ≥ min_gap apart; α is drawn among the non-global outputs of
    ``enumerate_locally_optimal`` (T^n certified SVM solves). Draws with none, or with a
    non-support margin below 1 + margin_gap, are rejected with an event.
    """
    if method not in ("construct", "enumerate"):
        raise InvalidArgument(f"method: expected 'construct' or 'enumerate', got {method!r}")
    small = method == "enumerate"
    n = _int_arg(draw, st.integers(1, 2 if small else 4) if n is None else n, "n", 1)
    T = _int_arg(draw, st.integers(3, 4 if small else 6) if T is None else T, "T", 2)
    dk = _int_arg(draw, st.integers(2, 3 if small else 6) if dk is None else dk, "dk", 1)
    min_gap = _float_arg(draw, min_gap, "min_gap", 0.0, 1.0, open_lo=True)
    margin_gap = _float_arg(draw, margin_gap, "margin_gap", 0.0, 10.0, open_lo=True)
    scale = _float_arg(draw, key_scale, "key_scale", 0.0, 1e6, open_lo=True)
    if small:
        seed, gen, k, g, alpha, meta = _enumerate_local(draw, n, T, dk, min_gap, margin_gap, scale)
    else:
        seed, gen, k, g, alpha, meta = _construct_local(
            draw, n, T, dk, min_gap, margin_gap, scale, allow_vacuous
        )
    y = _labels(gen, n)
    X, v, W = decoupled_data(k, g, y)
    assumptions = {DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE, LOCALLY_OPTIMAL_ALPHA, NON_GLOBAL_ALPHA}
    meta.update({"g": g, "k": k, "min_gap": min_gap})
    p0 = None
    if with_p0:
        p0, r = _p0_in_key_space(draw, gen, dk)
        assumptions.add(ARBITRARY_P0)
        meta["p0_norm"] = r
    return PromptInstance(
        X, y, v, W, loss=loss, p0=p0, alpha=alpha, assumptions=assumptions, seed=seed, meta=meta
    )


# ---- 5. cone initializations -----------------------------------------------------------------


def _difference_basis(keys: Tensor, alpha: np.ndarray) -> Tensor:
    """Orthonormal basis (columns) of span{k_iα_i − k_it}: the only directions logits see."""
    n, T, d = keys.shape
    rows = keys[torch.arange(n), torch.as_tensor(alpha)][:, None, :] - keys
    rows = rows.reshape(-1, d)
    if rows.abs().max() == 0:
        return torch.zeros(d, 0, dtype=DTYPE)
    _, s, vh = torch.linalg.svd(rows, full_matrices=False)
    rank = int((s > s[0] * 1e-10).sum())
    return vh[:rank].T


@st.composite
def cone_inits(draw, instance, R0=10.0, eps=0.01):
    """A copy of ``instance`` with p0 inside the cone C_{eps,R0}(p^mm(alpha)) (spec §3.5).

    ``instance``: a PromptInstance with ``alpha`` set, or a strategy of them; ``R0`` > 0 and
    ``eps`` in (0, 1): numbers or strategies. Guarantees CONE_INIT (and drops ARBITRARY_P0):
    p0 = R0·p̂ + σξ with p̂ = p^mm(α)/‖p^mm(α)‖ from the certified oracle, ξ a random unit
    vector orthogonal to p̂ inside the span of the key differences (other directions never
    move under GD and would only dilute the cosine), and σ = u·σ_max with u drawn in
    [0, 0.999] and σ_max = R0·√(1/(1−eps)² − 1). Hence ‖p0‖ = √(R0² + σ²) ≥ R0 and
    cos(p0, p̂) = R0/‖p0‖ ≥ 1 − eps. ``meta["cone"]`` records R0, eps, σ, the realized cosine
    and p^mm. Draws whose ATT-SVM(α) is not certified optimal are rejected with an event.
    """
    inst = _draw(draw, instance)
    if not isinstance(inst, PromptInstance):
        raise InvalidArgument(f"instance: expected a PromptInstance, got {type(inst).__name__}")
    if inst.alpha is None:
        raise InvalidArgument("instance: needs alpha (the selection whose cone to start in)")
    R0 = _float_arg(draw, R0, "R0", 0.0, 1e6, open_lo=True)
    eps = _float_arg(draw, eps, "eps", 0.0, 1.0, open_lo=True)
    if eps >= 1.0:
        raise InvalidArgument(f"eps: must be < 1, got {eps}")
    sol = _check_svm(inst.keys, inst.alpha, "alpha")
    p_mm = torch.as_tensor(sol.x, dtype=DTYPE)
    norm = torch.linalg.vector_norm(p_mm)
    if norm == 0:
        event("reject: p^mm(alpha) = 0")
        assume(False)
    p_hat = p_mm / norm
    seed, gen = _generator(draw)
    basis = _difference_basis(inst.keys, inst.alpha)
    xi = basis @ _randn(gen, basis.shape[1]) if basis.shape[1] else torch.zeros_like(p_hat)
    xi = xi - (xi @ p_hat) * p_hat
    xi_norm = torch.linalg.vector_norm(xi)
    u = draw(st.floats(0.0, 0.999, allow_nan=False, allow_subnormal=False))
    sigma_max = R0 * math.sqrt(1.0 / (1.0 - eps) ** 2 - 1.0)
    if xi_norm <= 1e-12:  # the difference span is the line of p̂: no orthogonal room
        xi, sigma = torch.zeros_like(p_hat), 0.0
    else:
        xi, sigma = xi / xi_norm, u * sigma_max
    p0 = R0 * p_hat + sigma * xi
    cone = {
        "R0": R0,
        "eps": eps,
        "sigma": sigma,
        "cos": cosine(p0, p_mm),
        "p0_norm": float(torch.linalg.vector_norm(p0)),
        "p_mm": p_mm,
        "seed": seed,
    }
    return dataclasses.replace(
        inst,
        p0=p0,
        assumptions=(inst.assumptions - {ARBITRARY_P0}) | {CONE_INIT},
        meta={**inst.meta, "cone": cone},
    )


# ---- 6. infeasible ATT-SVM -------------------------------------------------------------------

INFEASIBLE_VARIANTS = ("hull", "midpoint", "duplicate")


@st.composite
def infeasible_instances(
    draw,
    n=1,
    T=st.integers(3, 6),
    dk=st.integers(1, 4),
    variant=st.sampled_from(INFEASIBLE_VARIANTS),
    min_gap=0.05,
    loss: str = "logistic",
):
    """Decoupled instances whose ATT-SVM(opt) is infeasible (spec maxmargin §5 F11).

    Guarantees DECOUPLED, UNIQUE_OPT, SVM_INFEASIBLE with ``alpha = opt``. In one input
    (``meta["bad_input"]``) k_opt is a convex combination of other keys with integer weights:
    ``hull`` (2 to T−1 vertices), ``midpoint`` (two keys) or ``duplicate`` (k_opt repeated;
    the only variant possible at T = 2). All keys lie on the grid Z/8 and k_opt's offsets to
    the vertices sum to zero with integer weights, so the float data lies exactly in the hull
    and no rounding can make the problem barely feasible: every p has
    Σ_j w_j (k_opt − k_j)ᵀp = 0 < Σ_j w_j, contradicting all constraints ≥ 1.
    """
    n = _int_arg(draw, n, "n", 1)
    T = _int_arg(draw, T, "T", 2)
    dk = _int_arg(draw, dk, "dk", 1)
    min_gap = _float_arg(draw, min_gap, "min_gap", 0.0, 1.0, open_lo=True)
    kind = _draw(draw, variant)
    if kind not in INFEASIBLE_VARIANTS:
        raise InvalidArgument(f"variant: expected one of {INFEASIBLE_VARIANTS}, got {kind!r}")
    if T == 2 and kind != "duplicate":
        kind = "duplicate"  # a hull of one other key is that key
    bad = draw(st.integers(0, n - 1))
    opt = np.array(draw(st.lists(st.integers(0, T - 1), min_size=n, max_size=n)), np.int64)
    seed, gen = _generator(draw)
    k = torch.randint(-16, 17, (n, T, dk), generator=gen).to(DTYPE) / 8
    others = [t for t in range(T) if t != opt[bad]]
    others = [others[j] for j in _perm(gen, len(others))]
    m = {"duplicate": 1, "midpoint": 2}.get(kind) or draw(st.integers(2, T - 1))
    vertices = others[:m]
    weights = [1] * m if kind != "hull" else [*torch.randint(1, 4, (m - 1,), generator=gen), 1]
    weights = [int(w) for w in weights]
    offsets = torch.randint(-16, 17, (m, dk), generator=gen).to(DTYPE) / 8
    offsets[-1] = -sum(w * o for w, o in zip(weights[:-1], offsets[:-1], strict=True))
    if kind == "duplicate":
        offsets[0] = 0.0
    for t, off in zip(vertices, offsets, strict=True):
        k[bad, t] = k[bad, opt[bad]] + off
    g = _uniform(gen, (n, T), -1.0, 1.0)
    rows = torch.arange(n)
    g[rows, opt] = -math.inf
    g[rows, opt] = g.max(dim=1).values + _uniform(gen, n, min_gap, 1.0)
    y = _labels(gen, n)
    X, v, W = decoupled_data(k, g, y)
    meta = {
        "g": g,
        "k": k,
        "opt": opt.copy(),
        "variant": kind,
        "bad_input": bad,
        "hull_tokens": vertices,
        "hull_weights": weights,
    }
    return PromptInstance(
        X,
        y,
        v,
        W,
        loss=loss,
        alpha=opt,
        assumptions={DECOUPLED, UNIQUE_OPT, SVM_INFEASIBLE},
        seed=seed,
        meta=meta,
    )


# ---- 7. the paper's instances (spec maxmargin §4) --------------------------------------------


def _w_2d() -> Tensor:
    return torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=DTYPE))


def _e3() -> Tensor:
    return torch.tensor([0.0, 0.0, 1.0], dtype=DTYPE)


def figure1_instance(panel: str, alpha: int = 0) -> PromptInstance:
    """Figure 1 (n = 1, T = 3, d = 3): global (panel "a") vs local (panel "b") convergence.

    Tokens (key; score): (−0.1, 1; 1) the optimum, (1, 0; 0.9), and (0, 0; 0.9) in panel a or
    (0, 0; 0) in panel b; v = e_3, Y = +1, W = diag(1, 1, 0) (the official notebook's data).
    ``alpha`` picks the selection: 0 (global, default), 1 (the token (1, 0): locally optimal
    in panel b only, since in panel a its support token (0, 0) ties with it), or 2 (never
    locally optimal; p^mm = (−1, −1.1)). meta: the six initializations ``inits`` (3-vectors),
    known SVM solutions ``p_mm`` per alpha, and the notebook's cvxopt objectives ½‖p‖².
    """
    if panel not in ("a", "b"):
        raise ValueError(f"panel: expected 'a' or 'b', got {panel!r}")
    if alpha not in (0, 1, 2):
        raise ValueError(f"alpha: expected 0, 1 or 2, got {alpha!r}")
    third = 0.9 if panel == "a" else 0.0
    X = torch.tensor([[[-0.1, 1.0, 1.0], [1.0, 0.0, 0.9], [0.0, 0.0, third]]], dtype=DTYPE)
    assumptions = {PAPER_INSTANCE, DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE}
    if panel == "a":
        assumptions.add(EQUAL_NONOPT_SCORES)
    if alpha != 0:
        assumptions.add(NON_GLOBAL_ALPHA)
    if alpha == 0 or (panel == "b" and alpha == 1):  # the global opt is locally optimal too
        assumptions.add(LOCALLY_OPTIMAL_ALPHA)
    inits = [[0.0, b, 0.0] for b in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)]
    meta = {
        "figure": "1" + panel,
        "inits": inits,
        "opt": np.array([0]),
        "p_mm": {
            0: [-0.1 / 1.01, 1.0 / 1.01, 0.0],
            1: [1.0, 0.0, 0.0],
            2: [-1.0, -1.1, 0.0],
        },
        "support": {0: [[2]], 1: [[2]], 2: [[0, 1]]},
        "notebook_objective": {0: 0.49505, 1: 0.5},
        "local_inits": [4, 5] if panel == "b" else [],
    }
    return PromptInstance(
        X,
        torch.ones(1, dtype=DTYPE),
        _e3(),
        _w_2d(),
        p0=torch.tensor(inits[0], dtype=DTYPE),
        alpha=np.array([alpha]),
        assumptions=assumptions,
        seed=0,
        meta=meta,
    )


FIG2_SHIFTS = ((1.0, 0.0, 0.0), (-1.0, 1.0, 0.0), (-0.5, -0.5, 0.0))


def figure2_instance(seed: int = 0) -> PromptInstance:
    """Figure 2 (n = 3, T = 7, d = 3): several inputs, global convergence, NGD vs GD.

    Reproduces ``multi_input_converge.ipynb``: noise N(0, 0.2²) from
    ``torch.Generator().manual_seed(seed)`` drawn as the notebook does (float32 ``randn`` of
    shape (n, T, d), scaled by 0.2 and shifted in float32, then stored in float64), plus the
    shifts (1, 0) for token 0 (the optimum), (−1, 1) for tokens 1–3 and (−0.5, −0.5) for
    tokens 4–6; scores (last coordinate) 1.0 for token 0 and 0.5 otherwise; Y = +1, v = e_3,
    W = diag(1, 1, 0). alpha = opt = 0. meta: the six initializations ``inits`` = (a, 0, 0),
    the float64 ``noise`` and ``shifts``.

    The noise values depend on torch's CPU ``randn`` stream, which is not the notebook's
    (torch 2.x): its printed cvxopt objective ½‖p^mm‖² = 0.31319 is not reproduced (0.3713
    here). The recipe, shifts and scores are exact; the noise is an equally valid draw.
    """
    n, T, d = 3, 7, 3
    gen = torch.Generator().manual_seed(int(seed))
    noise32 = torch.randn((n, T, d), generator=gen, dtype=torch.float32) * 0.2
    X32 = noise32.clone()
    shift = torch.tensor(FIG2_SHIFTS, dtype=torch.float32)
    X32[:, 0] += shift[0]
    X32[:, 1 : (T + 1) // 2] += shift[1]
    X32[:, -(T - 1) // 2 :] += shift[2]
    X32[:, 0, -1] = 1.0
    X32[:, 1:, -1] = 0.5
    inits = [[a, 0.0, 0.0] for a in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)]
    meta = {
        "figure": "2",
        "inits": inits,
        "noise": noise32.to(DTYPE),
        "shifts": [list(s) for s in FIG2_SHIFTS],
        "token_shift": [0, 1, 1, 1, 2, 2, 2],
        "opt": np.zeros(n, dtype=np.int64),
    }
    return PromptInstance(
        X32.to(DTYPE),
        torch.ones(n, dtype=DTYPE),
        _e3(),
        _w_2d(),
        p0=torch.tensor(inits[2], dtype=DTYPE),
        alpha=np.zeros(n, dtype=np.int64),
        assumptions={PAPER_INSTANCE, DECOUPLED, UNIQUE_OPT, EQUAL_NONOPT_SCORES, SVM_FEASIBLE},
        seed=int(seed),
        meta=meta,
    )


def figure3_instance(tight: bool) -> PromptInstance:
    """Figure 3 (n = 3, T = 2, d = 2, W = I): joint training of (v, p) with logistic loss.

    Inputs [(0,0),(1,1)], [(0,0),(1,−1)] and [(0,0),(0.5,1)] (tight, panel a) or
    [(0,0),(0.5,1.5)] (non-tight, panel b); Y = (+1, −1, +1); the selected token is index 1
    in every input (alpha). ``v`` is the initial head (−1, 0) and ``p0`` = (0, −1), as in
    ``joint_training.ipynb``; both are trained. Guarantees SVM_FEASIBLE (ATT-SVM(alpha)) and
    TIGHT_V_SVM or NONTIGHT_V_SVM: the v-SVM on the selected tokens is v^mm = (0, 1) with
    support {0, 1, 2} (tight) or {0, 1} (non-tight). No score assumption is made, since the
    scores depend on the trained v.
    """
    last = (0.5, 1.0) if tight else (0.5, 1.5)
    X = torch.tensor(
        [[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], list(last)]],
        dtype=DTYPE,
    )
    meta = {
        "figure": "3" + ("a" if tight else "b"),
        "tight": bool(tight),
        "v_mm": [0.0, 1.0],
        "v_svm_support": [0, 1, 2] if tight else [0, 1],
    }
    return PromptInstance(
        X,
        torch.tensor([1.0, -1.0, 1.0], dtype=DTYPE),
        torch.tensor([-1.0, 0.0], dtype=DTYPE),
        torch.eye(2, dtype=DTYPE),
        p0=torch.tensor([0.0, -1.0], dtype=DTYPE),
        alpha=np.ones(3, dtype=np.int64),
        assumptions={PAPER_INSTANCE, SVM_FEASIBLE, TIGHT_V_SVM if tight else NONTIGHT_V_SVM},
        seed=0,
        meta=meta,
    )


LOSS_COMPARISON_C = (1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 100)


def loss_comparison_instance(C: float, loss: str = "logistic") -> PromptInstance:
    """The loss-comparison example (``diff_loss_function.ipynb``): n = 2, T = 2, d = 3.

    Inputs [(0,0; 0), (1,1; C)] and [(0,0; 0), (1,−1; 1)] (key; score), Y = (+1, +1),
    v = e_3, W = diag(1, 1, 0), p0 = 0, alpha = opt = (1, 1). p^mm = (1, 0, 0) for every C > 0
    (both constraints active). The notebook compares ℓ(x) = −x ("correlation") with logistic
    for C in 1..10 and 100 (``meta["C_values"]``); with logistic and C = 100 float64 NGD
    stalls within 1000 steps (spec §4), which is numerics, not a counterexample.
    """
    C = float(C)
    if not (math.isfinite(C) and C > 0):
        raise ValueError(f"C: expected a finite positive score, got {C}")
    X = torch.tensor(
        [[[0.0, 0.0, 0.0], [1.0, 1.0, C]], [[0.0, 0.0, 0.0], [1.0, -1.0, 1.0]]], dtype=DTYPE
    )
    meta = {
        "figure": "loss-comparison",
        "C": C,
        "C_values": list(LOSS_COMPARISON_C),
        "losses": ["correlation", "logistic"],
        "opt": np.ones(2, dtype=np.int64),
        "p_mm": [1.0, 0.0, 0.0],
    }
    return PromptInstance(
        X,
        torch.ones(2, dtype=DTYPE),
        _e3(),
        _w_2d(),
        loss=loss,
        p0=torch.zeros(3, dtype=DTYPE),
        alpha=np.ones(2, dtype=np.int64),
        assumptions={PAPER_INSTANCE, DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE},
        seed=0,
        meta=meta,
    )
