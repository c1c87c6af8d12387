"""Generic combinators over instance strategies: add a drawn selection α, an arbitrary p(0)
or per-input key scales to the instances of another strategy; seeded randomness.

All continuous randomness comes from one drawn 32-bit seed (``SEEDS``), so a failing example
shrinks in a few steps and replays from a saved counterexample.
"""

import dataclasses

import numpy as np
import torch
from hypothesis import strategies as st

from strategies.instances import ARBITRARY_P0, PromptInstance
from strategies.prompt import decoupled_data, decoupled_instances

DTYPE = torch.float64


@st.composite
def with_alpha(draw, instance):
    """``instance`` (or a strategy) with a drawn selection α ∈ [T]^n."""
    inst = draw(instance) if isinstance(instance, st.SearchStrategy) else instance
    alpha = draw(st.lists(st.integers(0, inst.T - 1), min_size=inst.n, max_size=inst.n))
    return dataclasses.replace(inst, alpha=np.array(alpha, dtype=np.int64))


@st.composite
def generic_instances(draw, n=st.integers(1, 4), T=st.integers(2, 6), extra=st.integers(0, 2)):
    """Decoupled instances with key dimension dk = n(T−1) + extra (generic position), and a
    drawn α: the n(T−1) Gaussian differences k_iα − k_it are then linearly independent almost
    surely, so every ATT-SVM(α) is feasible (spec §1.4 "Feasibility")."""
    n, T = draw(n), draw(T)
    inst = draw(decoupled_instances(n=n, T=T, dk=n * (T - 1) + draw(extra)))
    return draw(with_alpha(inst))


@st.composite
def with_init(draw, instances, lo: float = -1.0, hi: float = 1.0):
    """``instances`` with an arbitrary p(0) (``random_init``, norm in [10^lo, 10^hi]).

    All continuous randomness comes from one drawn seed, so a failing example shrinks in a
    few steps (float draws would cost the shrinker hundreds of dynamics runs)."""
    inst = draw(instances)
    p0 = random_init(inst, draw(SEEDS), lo, hi)
    return dataclasses.replace(inst, p0=p0, assumptions=inst.assumptions | {ARBITRARY_P0})


@st.composite
def heterogeneous(draw, instances, max_log_scale: float = 1.5, lo: float = -2.0, hi: float = 2.0):
    """``instances`` (decoupled) with each input's keys scaled by its own factor
    10^U[0, max_log_scale], and an arbitrary p(0) of norm in [10^lo, 10^hi].

    Scaling one input's keys by c > 0 keeps its scores, the optimal tokens, equal non-optimal
    scores and the feasibility of ATT-SVM(opt) (its rows scale by c). It widens the data
    distribution (inputs with well-separated keys next to tight ones) and the initializations
    (Theorem G allows any p(0)). The factors come from one drawn seed (fast shrinking).
    """
    inst = draw(instances)
    gen = seeded(draw(SEEDS))
    c = 10.0 ** (max_log_scale * torch.rand(inst.n, generator=gen, dtype=DTYPE))
    k = inst.meta["k"] * c[:, None, None]
    X, v, W = decoupled_data(k, inst.meta["g"], inst.y)
    meta = {**inst.meta, "k": k, "input_scales": c}
    meta.pop("p_mm", None)
    scaled = dataclasses.replace(inst, X=X, v=v, W=W, meta=meta)
    return draw(with_init(st.just(scaled), lo, hi))


def random_init(inst: PromptInstance, seed: int, lo: float = -1.0, hi: float = 1.0):
    """A random p(0): a uniform direction in the coordinates the keys use (a coordinate where
    every key is 0, like the decoupled score coordinate, never moves under GD and would only
    dilute cosines) and a norm log-uniform in [10^lo, 10^hi]."""
    gen = seeded(seed)
    used = (inst.keys.abs().amax(dim=(0, 1)) > 0).to(DTYPE)
    u = torch.randn(inst.d, generator=gen, dtype=DTYPE) * used
    r = 10.0 ** (lo + (hi - lo) * float(torch.rand((), generator=gen, dtype=DTYPE)))
    return r * u / torch.linalg.vector_norm(u)


#: An RNG seed as a test argument (an int is replayable from a saved counterexample, where a
#: ``st.data()`` draw is not).
SEEDS = st.integers(0, 2**32 - 1)


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(int(seed))


def random_points(gen: torch.Generator, dim: int, count: int, lo=-1.0, hi=4.0) -> torch.Tensor:
    """``count`` points in R^dim with random directions and norms log-uniform in [10^lo, 10^hi]."""
    u = torch.randn(count, dim, generator=gen, dtype=DTYPE)
    u = u / torch.linalg.vector_norm(u, dim=1, keepdim=True)
    r = 10.0 ** (lo + (hi - lo) * torch.rand(count, generator=gen, dtype=DTYPE))
    return u * r[:, None]
