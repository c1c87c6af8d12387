"""The size ladder (issue 23): the rungs of (n, T, d) and prompt-model families drawn on them.

Every theorem of the lineage quantifies over all n, T and d, while the claims' strategies
draw n ≤ 6, T ≤ 8, d ≤ 10. The rungs say where else the engine must decide:

- *small*: the claims' own sizes (n ≤ 4, T ≤ 6, d ≤ 6);
- *medium*: n, T ≤ 32, d ≤ 128;
- *large*: n ≤ 256, T ≤ 256, d ≤ 1024 and n·T ≤ 16 384.

Sizes are drawn log-uniformly in each rung's box (rejecting n·T above the cap), so a rung
mixes the regime d ≥ n(T − 1), where any selection can be separated, with n(T − 1) ≫ d,
where the top-score SVM is often infeasible and flows stall at finite points or share mass.

The families are held out from the engine's tuning (which used Gaussian keys with scores
uniform on [−1, 1], benchmarks/test_cost_curve.py):

- ``paper``: the model of 2306.13596 with W = I: tokens X_it ~ N(0, I_d), labels y_i = ±1, a
  unit head v; keys are the tokens and the scores y_i·X_itᵀv (scores correlated with keys);
- ``ties``: keys uniform on the unit sphere, integer scores in {−2, …, 2} (exact ties in
  score, the tie-sharing SVM and shared-mass limits);
- ``clustered``: each token is one of a few types (a type's key plus noise of 0.05, its score
  the type's), as in Fig. 2 of 2306.13596 (near-duplicate keys, flows that share mass);
- ``conflict``: pairs of tokens that differ only in a subspace D along which the inputs pull
  in random directions, above the rest: shared-mass limits by construction (the engine's
  general limit, ``models.flows.shared``).

Each family is a plain function of (n, T, d, seed), deterministic (numpy's generator seeded
by the family, the sizes and the seed), and a Hypothesis strategy ``ladder_problems``.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np
import torch
from hypothesis import strategies as st

from models.problems.attention import PromptProblem
from strategies.instances import PromptInstance


@dataclasses.dataclass(frozen=True)
class Rung:
    """A box of sizes: 1 ≤ n ≤ n_max, 2 ≤ T ≤ T_max, 1 ≤ d ≤ d_max, n·T ≤ nT_max."""

    name: str
    n_max: int
    T_max: int
    d_max: int
    nT_max: int

    def contains(self, n: int, T: int, d: int) -> bool:
        return (
            1 <= n <= self.n_max
            and 2 <= T <= self.T_max
            and 1 <= d <= self.d_max
            and n * T <= self.nT_max
        )


RUNGS = {
    "small": Rung("small", 4, 6, 6, 24),
    "medium": Rung("medium", 32, 32, 128, 32 * 32),
    "large": Rung("large", 256, 256, 1024, 16_384),
}


def _log_uniform(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, math.floor(math.exp(rng.uniform(math.log(lo), math.log(hi + 1)))))))


def draw_sizes(rung: Rung, rng: np.random.Generator) -> tuple[int, int, int]:
    """(n, T, d) log-uniform in the rung's box, n·T ≤ its cap (redrawn until it is)."""
    while True:
        n = _log_uniform(rng, 1, rung.n_max)
        T = _log_uniform(rng, 2, rung.T_max)
        d = _log_uniform(rng, 1, rung.d_max)
        if n * T <= rung.nT_max:
            return n, T, d


def _problem(keys: np.ndarray, scores: np.ndarray) -> PromptProblem:
    return PromptProblem(torch.from_numpy(keys), torch.from_numpy(scores), "logistic")


def paper_problem(n: int, T: int, d: int, seed: int) -> PromptProblem:
    """2306.13596 with W = I: keys X_it ~ N(0, I_d), scores y_i·X_itᵀv, ‖v‖ = 1."""
    rng = np.random.default_rng([1, n, T, d, seed])
    X = rng.normal(size=(n, T, d))
    y = rng.choice([-1.0, 1.0], size=n)
    v = rng.normal(size=d)
    v /= np.linalg.norm(v)
    return _problem(X, y[:, None] * (X @ v))


def tied_problem(n: int, T: int, d: int, seed: int) -> PromptProblem:
    """Keys uniform on the unit sphere, integer scores in {−2, …, 2}."""
    rng = np.random.default_rng([2, n, T, d, seed])
    keys = rng.normal(size=(n, T, d))
    keys /= np.linalg.norm(keys, axis=-1, keepdims=True)
    return _problem(keys, rng.integers(-2, 3, size=(n, T)).astype(np.float64))


def clustered_problem(n: int, T: int, d: int, seed: int) -> PromptProblem:
    """Tokens of 3 types: a type's key N(0, I_d) plus N(0, 0.05² I_d), its score in [−1, 1]."""
    rng = np.random.default_rng([3, n, T, d, seed])
    centres = rng.normal(size=(3, d))
    levels = rng.uniform(-1, 1, size=3)
    types = rng.integers(0, 3, size=(n, T))
    keys = centres[types] + 0.05 * rng.normal(size=(n, T, d))
    return _problem(keys, levels[types])


def conflict_problem(n: int, T: int, d: int, seed: int) -> PromptProblem:
    """Shared-mass limits by construction: D = the first max(1, d // 2) coordinates, the rest
    D⊥. In each input two tokens (all T when T = 2) share a D⊥ part one unit above the others'
    along the last coordinate, with D parts drawn N(0, I) and scores uniform on [−3, 3]; the
    others score below them (by 0.5–1.5) with D parts N(0, I) too. Along D the inputs' best
    tokens pull in random directions, so once n exceeds dim D no direction in D serves them
    all and the pair keeps sharing the mass (models.flows.shared) while the flow grows along D⊥."""
    rng = np.random.default_rng([4, n, T, d, seed])
    m = max(1, d // 2)
    keys = np.zeros((n, T, d))
    scores = np.zeros((n, T))
    pair = min(T, 2)
    for i in range(n):
        base = 0.3 * rng.standard_normal(d)
        keys[i] = base
        keys[i, :, :m] += rng.standard_normal((T, m))
        if d > m:
            keys[i, pair:, m:] += 0.1 * rng.standard_normal((T - pair, d - m))
            keys[i, pair:, -1] -= 1.0
        scores[i, :pair] = rng.uniform(-3.0, 3.0, pair)
        scores[i, pair:] = scores[i, :pair].min() - rng.uniform(0.5, 1.5, T - pair)
    return _problem(keys, scores)


FAMILIES = {
    "paper": paper_problem,
    "ties": tied_problem,
    "clustered": clustered_problem,
    "conflict": conflict_problem,
}


@st.composite
def ladder_problems(draw, rung: str = "small", family: str = "paper"):
    """A problem of ``family`` with sizes in ``rung``'s box (Hypothesis's integers, which
    shrink toward the smallest sizes and seed 0; ``draw_sizes`` is the log-uniform draw of
    the benchmark): returns (problem, (n, T, d), seed)."""
    box = RUNGS[rung]
    n = draw(st.integers(1, box.n_max))
    T = draw(st.integers(2, min(box.T_max, box.nT_max // n)))
    d = draw(st.integers(1, box.d_max))
    seed = draw(st.integers(0, 2**32 - 1))
    return FAMILIES[family](n, T, d, seed), (n, T, d), seed


def rung_sizes(rung: str) -> dict:
    """Hypothesis strategies for the sizes n, T and the key dimension dk of the prompt
    strategies (``strategies.prompt``) inside ``rung``'s box. The decoupled instances add
    one coordinate for the scores (d = dk + 1), so dk ≤ d_max − 1. Where the box caps n·T
    below n_max·T_max (the large rung), T is a rule of n: a function n → strategy of T in
    [2, min(T_max, nT_max // n)], which the prompt strategies draw after n."""
    box = RUNGS[rung]
    if box.n_max * box.T_max > box.nT_max:
        T = functools.partial(_capped_T, box)
    else:
        T = st.integers(2, box.T_max)
    return {"n": st.integers(1, box.n_max), "T": T, "dk": st.integers(1, box.d_max - 1)}


def _capped_T(box: Rung, n: int):
    return st.integers(2, min(box.T_max, box.nT_max // n))


def as_prompt_instance(problem, seed: int, family: str) -> PromptInstance:
    """Keys and scores as the paper's data, so that a counterexample reads as any other:
    X = [keys | scores], y = 1, v = the last axis, W = I with its last entry 0 (logits
    ignore the score column)."""
    keys, scores = problem._np
    n, T, d = keys.shape
    X = np.concatenate([keys, scores[..., None]], axis=-1)
    W = np.eye(d + 1)
    W[d, d] = 0.0
    v = np.zeros(d + 1)
    v[d] = 1.0
    return PromptInstance(X=X, y=np.ones(n), v=v, W=W, seed=seed, meta={"family": family})


@st.composite
def conflict_instances(draw):
    """The conflict family with n > dim D likely: n in [3, 14], T in [2, 5], d in [2, 8]."""
    n, T, d = draw(st.integers(3, 14)), draw(st.integers(2, 5)), draw(st.integers(2, 8))
    seed = draw(st.integers(0, 2**32 - 1))
    return as_prompt_instance(conflict_problem(n, T, d, seed), seed, "conflict")


@st.composite
def medium_conflict_instances(draw):
    """The conflict family in the medium rung's box (n, T ≤ 32, d ≤ 128) where it shares: n in
    [8, 32] and d ≤ n (so that n > dim D = d // 2), T in [2, 32]."""
    n = draw(st.integers(8, 32))
    T, d = draw(st.integers(2, 32)), draw(st.integers(2, n))
    seed = draw(st.integers(0, 2**32 - 1))
    return as_prompt_instance(conflict_problem(n, T, d, seed), seed, "conflict")
