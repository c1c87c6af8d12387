"""Shared machinery of the 2403.08081 claims: I2's loss floor, the wrong groupings the
controls use (pooled graph, weak components, one token per component), an independent SCC
partition, and the pool of draws whose GD runs every dynamics claim reads (the instances
themselves: strategies.ntp_attention).

The dynamics are ``models.ntp.gd.batched_attention_gd`` (GD, NGD and the official recipe,
batched over the pool's draws, in token coordinates).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from models.ntp.attention import smoothness_bound  # noqa: F401 (re-exported)
from models.ntp.data import ntp_data
from models.ntp.finite import finite_component
from models.ntp.gd import Run, batched_attention_gd
from models.ntp.graph import PriorityGraph, priority_graphs, priority_triples
from models.ntp.qp import project
from models.ntp.svm import cyclic_subspace, graph_svm, graph_svm_rows
from strategies.ntp_attention import named_ntp_fields, named_ntp_instance
from strategies.ntp_instances import NTPInstance
from theorems.framework.memo import shared

#: I2's L* (spec §2.4): (2 log(3/2) + log 3)/7.
I2_LOSS_FLOOR = (2 * math.log(1.5) + math.log(3)) / 7


# ---- groupings: the right one, an independent one, and the controls' wrong ones --------------


def reach_partition(data, k: int) -> frozenset[frozenset[int]]:
    """The SCCs of G^(k) computed independently of models.ntp.graph: the edges from the
    sequences by hand, the transitive closure by Warshall, and a ~ b iff each reaches the
    other."""
    K = data.num_tokens
    R = np.eye(K, dtype=bool)
    for seq, y in zip(data.sequences, data.labels, strict=True):
        if seq[-1] == k and y in seq:
            for j in seq:
                if j != y:
                    R[y, j] = True
    for m in range(K):
        R = R | (R[:, [m]] & R[[m], :])
    mutual = R & R.T
    return frozenset(frozenset(np.flatnonzero(mutual[a]).tolist()) for a in range(K))


def pooled_graphs(data) -> dict[int, PriorityGraph]:
    """Control C1: one graph of all queries' edges, used for every query."""
    edges = frozenset(
        (y, j) for _, y, j in priority_triples(data.sequences, data.labels, data.num_tokens)
    )
    ks = {seq[-1] for seq in data.sequences}
    return {k: PriorityGraph(k, data.num_tokens, edges) for k in ks}


def weak_graphs(data) -> dict[int, PriorityGraph]:
    """Control C2: the weakly connected components of each G^(k) taken as its components
    (each graph symmetrised, so its SCCs are the weak components)."""
    out = {}
    for k, g in priority_graphs(data.sequences, data.labels, data.num_tokens).items():
        sym = g.edges | frozenset((b, a) for a, b in g.edges)
        out[k] = PriorityGraph(k, data.num_tokens, sym)
    return out


def singleton_graphs(data) -> dict[int, PriorityGraph]:
    """Control C3: every token its own component (margin ≥ 1 on every edge)."""
    ks = {seq[-1] for seq in data.sequences}
    return {k: PriorityGraph(k, data.num_tokens, frozenset()) for k in ks}


# ---- the graph-SVM, with one gap of models.ntp closed ----------------------------------------


@dataclass(frozen=True, eq=False)
class TrivialInfeasible:
    """The equality rows leave only W = 0 while margin rows exist: infeasible, certified by
    the rank of the equality rows (0 = (x_y − x_j)ᵀ·0·x_k ≥ 1 fails)."""

    status: str
    reason: str
    W: None = None


def solve_svm(data, graphs=None):
    """models.ntp.svm.graph_svm; where it raises because the equality rows span all of R^{d²}
    (models.ntp at 861fde8: "A: needs at least one column"), the answer is "infeasible",
    after checking that rank here."""
    try:
        return graph_svm(data, graphs=graphs)
    except ValueError as exc:
        if "at least one column" not in str(exc):
            raise
        rows = graph_svm_rows(data, graphs)
        d2 = data.dim**2
        if len(rows.A_in) and np.linalg.matrix_rank(rows.A_eq) == d2:
            return TrivialInfeasible("infeasible", f"equality rows have rank d² = {d2}: W = 0")
        raise


# ---- metrics --------------------------------------------------------------------------------


def corr(A, B) -> float:
    """⟨A, B⟩ / (‖A‖‖B‖), the official metric."""
    return float(np.sum(A * B) / (np.linalg.norm(A) * np.linalg.norm(B)))


def one_minus_corr(A, B) -> float:
    """1 − corr without cancellation: ‖Â − B̂‖²/2."""
    a, b = A / np.linalg.norm(A), B / np.linalg.norm(B)
    return float(np.sum((a - b) ** 2) / 2)


# ---- the dynamics pool: official-style draws plus I2 and I1, shared by the claims ------------

#: Seeds of generator (a) (cyclic, n=6, T=4, K=6, d=8) in the GD pool; I2 and I1 join them.
POOL_SEEDS = (0, 1, 2, 3, 4, 5)
POOL = tuple(f"official-{s}" for s in POOL_SEEDS) + ("I2", "I1")
#: GD steps of the pool (spec §2.5–2.7 thresholds are set at 1e3 / 1e4 / 1e5 steps).
GD_STEPS = 100_000
GD_RECORD = (1_000, 2_000, 5_000, 10_000, 50_000, 100_000)


@shared
def pool_data(name: str):
    """The validated data of a pool instance (no NTPInstance: building several instances in
    one example trips theorems.framework.evidence._same_data on tuple sequences)."""
    return ntp_data(*named_ntp_fields(name))


#: The pool's starts: W(0) = 0, and a seeded Gaussian W(0) with entries N(0, 1/d) (LeCun's
#: scale, as spec §4.4's "random LeCun" init), seed INIT_SEED + the instance's pool index.
INITS = ("zero", "random")
INIT_SEED = 1000


def pool_init(name: str) -> np.ndarray:
    """The random start of pool instance ``name``: entries N(0, 1/d), seeded."""
    d = pool_data(name).dim
    gen = np.random.default_rng(INIT_SEED + POOL.index(name))
    return gen.normal(size=(d, d)) / math.sqrt(d)


@shared
def pool_gd(init: str = "zero") -> Run:
    """The GD run of every pool instance (η = 1/L_bound, GD_STEPS steps) from W(0) = 0 or from
    its random start (``init``: one of INITS)."""
    if init not in INITS:
        raise ValueError(f"init: expected one of {INITS}, got {init!r}")
    W0 = None if init == "zero" else [pool_init(p) for p in POOL]
    return batched_attention_gd(
        [pool_data(p) for p in POOL], steps=GD_STEPS, record=GD_RECORD, W0=W0, loss_every=100
    )


def pool_iterate(name: str, k: int, init: str = "zero") -> np.ndarray:
    return pool_gd(init).W[k][POOL.index(name)]


def pool_losses(name: str) -> tuple[np.ndarray, np.ndarray]:
    run = pool_gd()
    return run.loss_steps, run.losses[:, POOL.index(name)]


@dataclass(frozen=True, eq=False)
class Limits:
    """What the theory predicts for one instance: W_svm (certified), W_fin (Newton), S_cyc."""

    svm: object
    fin: object
    basis: np.ndarray

    def p_cyc(self, W) -> np.ndarray:
        if self.basis.shape[0] == 0:
            return np.zeros_like(W)
        return project(self.basis, W)


@shared
def pool_limits(name: str) -> Limits:
    data = pool_data(name)
    return Limits(solve_svm(data), finite_component(data), cyclic_subspace(data))


def pool_case(name: str) -> tuple[NTPInstance, Limits]:
    """Pool case ``name``: its instance, built anew (in a claim body, the framework records the
    instance of a failing example), and its limits (shared by every claim)."""
    return named_ntp_instance(name), pool_limits(name)


def limits(data) -> Limits:
    return Limits(solve_svm(data), finite_component(data), cyclic_subspace(data))
