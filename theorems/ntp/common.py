"""Shared machinery of the 2403.08081 claims: the paper's fixed instances (I1, I2, C6), the
wrong groupings the controls use (pooled graph, weak components, one token per component),
an independent SCC partition, and the dynamics: GD / NGD on the NTP loss, batched over
instances, in token coordinates.

Why token coordinates. Every logit is a_{iv} = x_vᵀ W x_{k_i}, so it is an entry of the K×K
matrix M = E W Eᵀ, and the gradient is ∇L = Eᵀ C E with C[v, k] = Σ_{i: query k} g_{iv}
(g the logit coefficients of spec §1.1). A GD step is then M ← M − η G C G (G = E Eᵀ) and
W(k) = W(0) − Eᵀ (Σ_steps η C) E: K×K work per step for every draw at once, ~30 µs a step
for eight draws, so 1e5 steps fit the suite's budget (spec §6.4: vectorised, log space). The
label's coefficient is −(mass off the label) summed from the off-label terms, never s_y − 1.
NTP-DEF-MODEL checks one step against models.ntp.attention's W-space gradient.

models.ntp.gd.gd is the per-instance reference loop (~100× slower per draw); nothing here
edits models/.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np
from numba import njit

from models.ntp.attention import sample_table, smoothness_bound
from models.ntp.data import ntp_data
from models.ntp.finite import finite_component
from models.ntp.graph import PriorityGraph, priority_graphs, priority_triples
from models.ntp.qp import project
from models.ntp.svm import cyclic_subspace, graph_svm, graph_svm_rows
from strategies.instances import (
    ACYCLIC_GRAPHS,
    CYCLIC_GRAPH,
    DISTINCT_TOKENS,
    INDEPENDENT_EMBEDDINGS,
    LOG_ODDS_CASE,
    OFFICIAL_NTP,
    ORTHONORMAL_VOCAB,
    REALIZABLE_LABELS,
)
from strategies.ntp_attention import official_ntp_data
from strategies.ntp_instances import NTPInstance

EPS = float(np.finfo(np.float64).eps)


# ---- the paper's fixed instances (spec §2.3, §2.4, C6) ------------------------------------------


def i1() -> NTPInstance:
    """Chain I1 (spec §2.3): E = I₄, ([1,2,3,0],1), ([2,3,0],2), ([3,0],3)."""
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, ORTHONORMAL_VOCAB, ACYCLIC_GRAPHS}
    names.add(INDEPENDENT_EMBEDDINGS)
    return NTPInstance(
        np.eye(4),
        [[1, 2, 3, 0], [2, 3, 0], [3, 0]],
        [1, 2, 3],
        assumptions=names,
        meta={"id": "I1"},
    )


def i2_embeddings() -> np.ndarray:
    E = np.random.default_rng(0).standard_normal((5, 6))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


I2_SEQUENCES = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
I2_LABELS = [1, 1, 2, 3, 3, 2, 2]
#: I2's L* (spec §2.4): (2 log(3/2) + log 3)/7.
I2_LOSS_FLOOR = (2 * math.log(1.5) + math.log(3)) / 7


def i2() -> NTPInstance:
    """Instance I2 (spec §2.4): K=5, d=6, query 0 with the {1, 2} cycle (counts 2:1)."""
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, CYCLIC_GRAPH, INDEPENDENT_EMBEDDINGS}
    names.add(LOG_ODDS_CASE)
    return NTPInstance(
        i2_embeddings(), I2_SEQUENCES, I2_LABELS, assumptions=names, meta={"id": "I2"}
    )


def c6_instance() -> NTPInstance:
    """Control C6's instance: E = I₄, query 0, ([1,2,0],1)×2, ([2,3,0],2), ([3,1,0],3)."""
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, CYCLIC_GRAPH, ORTHONORMAL_VOCAB}
    names.add(INDEPENDENT_EMBEDDINGS)
    seqs = [[1, 2, 0], [1, 2, 0], [2, 3, 0], [3, 1, 0]]
    return NTPInstance(np.eye(4), seqs, [1, 1, 2, 3], assumptions=names, meta={"id": "C6"})


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


# ---- batched dynamics in token coordinates ------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Batch:
    """Instances padded to one shape: B draws, up to K tokens, N samples, m slots."""

    datas: tuple
    G: np.ndarray  # (B, K, K) Gram matrices E Eᵀ (zero-padded)
    idx: np.ndarray  # (B, N*m) flat index v*K + k of each slot's logit in M
    logc: np.ndarray  # (B, N, m) log multiplicities, −inf on padding
    lab: np.ndarray  # (B, N, m) the label slot (bool)
    off: np.ndarray  # (B, N, m) valid non-label slots (bool)
    w: np.ndarray  # (B, N) 1/n, 0 on padded samples
    scatter: np.ndarray  # (B, N*m, K*K) one-hot of idx (weighted sums of g into C)
    flat: np.ndarray  # (B, N, m) index of each slot's logit in M.ravel()
    labf: np.ndarray  # lab as float
    offf: np.ndarray  # off as float


def batch(datas) -> Batch:
    datas = tuple(datas)
    tables = [sample_table(d.sequences, d.labels) for d in datas]
    B = len(datas)
    K = max(d.num_tokens for d in datas)
    N = max(t.n for t in tables)
    m = max(t.tokens.shape[1] for t in tables)
    G = np.zeros((B, K, K))
    idx = np.zeros((B, N, m), dtype=np.int64)
    logc = np.full((B, N, m), -np.inf)
    lab = np.zeros((B, N, m), dtype=bool)
    w = np.zeros((B, N))
    for b, (d, t) in enumerate(zip(datas, tables, strict=True)):
        E = d.embeddings
        G[b, : d.num_tokens, : d.num_tokens] = E @ E.T
        n, mm = t.tokens.shape
        idx[b, :n, :mm] = t.tokens * K + t.query[:, None]
        logc[b, :n, :mm] = t.log_count
        lab[b, np.arange(n), t.label_slot] = True
        lab[b, n:, 0] = True  # padded samples: a lone label (g = 0)
        logc[b, n:, 0] = 0.0
        w[b, :n] = 1.0 / n
    off = ~lab & np.isfinite(logc)
    idx = idx.reshape(B, N * m)
    scatter = np.zeros((B, N * m, K * K))
    np.put_along_axis(scatter, idx[:, :, None], 1.0, axis=2)
    scatter *= np.isfinite(logc).reshape(B, N * m, 1)
    flat = (np.arange(B)[:, None] * K * K + idx).reshape(B, N, m)
    return Batch(datas, G, idx, logc, lab, off, w, scatter, flat, lab * 1.0, off * 1.0)


@dataclass(frozen=True, eq=False)
class Run:
    """``W[k]``: list of the B iterates after k steps (k in the run's record); ``losses``:
    (len(loss_steps), B) the loss every ``loss_every`` steps (log space, before the step)."""

    W: dict[int, list[np.ndarray]]
    loss_steps: np.ndarray
    losses: np.ndarray


@njit(cache=True)
def _kernel(M, S, G, idx, logc, lab, off, w, eta, steps, method, lr, rec, out_S, every, out_L):
    """The step loop (numba): method 0 GD (step eta[b]), 1 NGD (lr/‖∇‖), 2 the official
    recipe (autograd arithmetic of −log(s_y + eps), lr/(‖∇‖ + eps)). M, S updated in place;
    S at the steps ``rec`` (ascending) into out_S, the loss every ``every`` steps into out_L."""
    B, K = M.shape[0], M.shape[1]
    N, m = logc.shape[1], logc.shape[2]
    C = np.zeros((K, K))
    T = np.zeros((K, K))
    D = np.zeros((K, K))
    e = np.zeros(m)
    r = 0
    li = 0
    for k in range(steps + 1):
        if r < rec.size and rec[r] == k:
            out_S[r] = S
            r += 1
        if k == steps:
            break
        want = k % every == 0
        for b in range(B):
            C[:] = 0.0
            loss = 0.0
            for i in range(N):
                if w[b, i] == 0.0:
                    continue
                mx = -np.inf
                for j in range(m):
                    if logc[b, i, j] == -np.inf:
                        continue
                    t = idx[b, i, j]
                    e[j] = M[b, t // K, t % K] + logc[b, i, j]
                    mx = max(mx, e[j])
                Z = 0.0
                e_lab = 0.0
                e_off = 0.0
                for j in range(m):
                    if logc[b, i, j] == -np.inf:
                        e[j] = 0.0
                        continue
                    e[j] = np.exp(e[j] - mx)
                    Z += e[j]
                    if lab[b, i, j]:
                        e_lab += e[j]
                    elif off[b, i, j]:
                        e_off += e[j]
                s_y = e_lab / Z
                c = -1.0 / (s_y + EPS)
                for j in range(m):
                    if logc[b, i, j] == -np.inf:
                        continue
                    s = e[j] / Z
                    if method == 2:
                        g = s * ((c if lab[b, i, j] else 0.0) - c * s_y)
                    elif lab[b, i, j]:
                        g = -(e_off / Z)
                    else:
                        g = s
                    t = idx[b, i, j]
                    C[t // K, t % K] += w[b, i] * g
                if want:
                    if method == 2:
                        loss += w[b, i] * -np.log(s_y + EPS)
                    else:
                        loss += w[b, i] * np.log1p(e_off / e_lab)
            for p in range(K):
                for q in range(K):
                    acc = 0.0
                    for u in range(K):
                        acc += G[b, p, u] * C[u, q]
                    T[p, q] = acc
            gsq = 0.0
            for p in range(K):
                for q in range(K):
                    acc = 0.0
                    for u in range(K):
                        acc += T[p, u] * G[b, u, q]
                    D[p, q] = acc
                    gsq += C[p, q] * acc
            if method == 0:
                step = eta[b]
            else:
                gn = np.sqrt(max(gsq, 0.0))
                step = 0.0
                if gn > 0.0:
                    step = lr / (gn + (EPS if method == 2 else 0.0))
            for p in range(K):
                for q in range(K):
                    M[b, p, q] -= step * D[p, q]
                    S[b, p, q] += step * C[p, q]
            if want:
                out_L[li, b] = loss
        if want:
            li += 1


METHODS = {"gd": 0, "ngd": 1, "official": 2}


def run_dynamics(
    datas,
    *,
    steps: int,
    record,
    method: str = "gd",
    lr=None,
    W0=None,
    loss_every: int = 100,
) -> Run:
    """GD (η = 1/L_bound per draw unless ``lr``), NGD (``method="ngd"``: W −= lr·∇/‖∇‖, no
    eps) or the official recipe (``"official"``: autograd arithmetic of −log(p̂_y + eps) and
    ∇/(‖∇‖ + eps)), batched, from W0 (default 0)."""
    bt = batch(datas)
    B, K = bt.G.shape[:2]
    Es = [d.embeddings for d in bt.datas]
    if W0 is None:
        W0 = [np.zeros((d.dim, d.dim)) for d in bt.datas]
    M = np.zeros((B, K, K))
    for b, (E, W) in enumerate(zip(Es, W0, strict=True)):
        M[b, : E.shape[0], : E.shape[0]] = E @ W @ E.T
    if method == "gd":
        eta = np.array([1.0 / smoothness_bound(d) for d in bt.datas]) if lr is None else lr
        eta = np.ascontiguousarray(np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,)))
        lr = 0.0
    elif lr is None:
        raise ValueError("lr: NGD needs a step")
    else:
        eta = np.zeros(B)
    rec = np.array(sorted({int(k) for k in record if 0 <= int(k) <= steps}), dtype=np.int64)
    out_S = np.zeros((rec.size, B, K, K))
    n_loss = (steps + loss_every - 1) // loss_every
    out_L = np.zeros((n_loss, B))
    S = np.zeros((B, K, K))
    idx = bt.idx.reshape(bt.logc.shape)
    _kernel(
        M,
        S,
        bt.G,
        idx,
        bt.logc,
        bt.lab,
        bt.off,
        bt.w,
        eta,
        int(steps),
        METHODS[method],
        float(lr),
        rec,
        out_S,
        int(loss_every),
        out_L,
    )
    W = {
        int(k): [
            W0[b] - E.T @ out_S[r, b, : E.shape[0], : E.shape[0]] @ E for b, E in enumerate(Es)
        ]
        for r, k in enumerate(rec)
    }
    return Run(W, np.arange(n_loss) * loss_every, out_L)


# ---- the dynamics pool: official-style draws plus I2 and I1, shared by the claims ------------

#: Seeds of generator (a) (cyclic, n=6, T=4, K=6, d=8) in the GD pool; I2 and I1 join them.
POOL_SEEDS = (0, 1, 2, 3, 4, 5)
POOL = tuple(f"official-{s}" for s in POOL_SEEDS) + ("I2", "I1")
#: GD steps of the pool (spec §2.5–2.7 thresholds are set at 1e3 / 1e4 / 1e5 steps).
GD_STEPS = 100_000
GD_RECORD = (1_000, 2_000, 5_000, 10_000, 50_000, 100_000)


def _pool_fields(name: str):
    if name == "I1":
        return np.eye(4), [[1, 2, 3, 0], [2, 3, 0], [3, 0]], [1, 2, 3]
    if name == "I2":
        return i2_embeddings(), I2_SEQUENCES, I2_LABELS
    E, seqs, labels, _ = official_ntp_data(int(name.split("-")[1]))
    return E, seqs, labels


@cache
def pool_data(name: str):
    """The validated data of a pool instance (no NTPInstance: building several instances in
    one example trips theorems.framework.evidence._same_data on tuple sequences)."""
    return ntp_data(*_pool_fields(name))


@cache
def pool_instance(name: str) -> NTPInstance:
    if name == "I1":
        return i1()
    if name == "I2":
        return i2()
    E, seqs, labels = _pool_fields(name)
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, OFFICIAL_NTP, CYCLIC_GRAPH}
    if np.linalg.matrix_rank(E) == E.shape[0]:
        names.add(INDEPENDENT_EMBEDDINGS)
    seed = int(name.split("-")[1])
    return NTPInstance(E, seqs, labels, assumptions=names, seed=seed, meta={"id": name})


@cache
def pool_gd() -> Run:
    """The GD run of every pool instance (η = 1/L_bound, from 0, GD_STEPS steps)."""
    return run_dynamics(
        [pool_data(p) for p in POOL], steps=GD_STEPS, record=GD_RECORD, loss_every=100
    )


def pool_iterate(name: str, k: int) -> np.ndarray:
    return pool_gd().W[k][POOL.index(name)]


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


@cache
def pool_limits(name: str) -> Limits:
    data = pool_data(name)
    return Limits(solve_svm(data), finite_component(data), cyclic_subspace(data))


def limits(data) -> Limits:
    return Limits(solve_svm(data), finite_component(data), cyclic_subspace(data))
