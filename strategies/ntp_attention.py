"""Strategies for the self-attention NTP model of 2403.08081 (spec ntp.md §1.1–1.2, §6.3).

- ``official_ntp_instances`` (generator (a), §4.1): a unit-sphere vocabulary, T distinct
  tokens per sequence, a label uniform over them; ``graphs`` = "cyclic" redraws (inside the
  seeded stream, as the official ``check_asyc=False`` loop does) until some query graph has a
  cycle, "acyclic" until none has, "any" keeps the first draw.
- ``orthonormal_ntp_instances`` (b): the same sequences over E = I_K (d = K).
- ``with_repeated_tokens``: a draw of another strategy where, by a drawn choice, each
  sequence's first token is replaced by a copy of its second (repeated tokens).
- ``medium_ntp_instances``: (a) and (b), with repeats, at sizes of the size ladder's medium
  rung (``strategies.ladder``), for the engine's flow on W (issue 23).
- ``chain_ntp_instances`` (c): per query a random total order c_0 ⇒ … ⇒ c_m = query, one
  sample per suffix (I1's shape): every graph acyclic, every order total.
- ``log_odds_instances``: per query one or two cycles C, every sample labelled in C holding
  all of C (the log-odds case of §2.4), several SCCs per graph, optional lower tokens.
- ``partial_cycle_instances``: per query a 3-cycle whose samples each hold only two of its
  members (control C6: the log-odds case fails).
- ``i1_instance``, ``i2_instance``, ``c6_instance``: the spec's fixed instances I1 (§2.3), I2
  (§2.4) and control C6's; ``named_ntp_instance``: one of those or an official draw by name
  ("official-<seed>"), for the claims' fixed pools.

Size arguments accept an int or a strategy; every continuous value comes from one drawn seed
into numpy's ``default_rng``. Random properties (acyclicity, independent embeddings) are
classified into the instance's assumptions, not filtered, except where the generator's own
definition redraws (``graphs=``).
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, event
from hypothesis import strategies as st

from models.ntp.graph import priority_graphs
from strategies.combinators import SEEDS
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
from strategies.ntp_instances import NTPInstance

#: The official generator redraws until its graph condition holds; a seed whose stream misses it
#: this many times is rejected (an event), which the default sizes never reach.
MAX_REDRAWS = 500
GRAPH_MODES = ("cyclic", "acyclic", "any")


def _value(draw, v):
    return draw(v) if isinstance(v, st.SearchStrategy) else v


def unit_rows(rng: np.random.Generator, K: int, d: int) -> np.ndarray:
    """K rows uniform on the unit sphere of R^d (Gaussian, normalised)."""
    E = rng.standard_normal((K, d))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


def graph_assumptions(E, sequences, labels) -> set[str]:
    """The assumptions every NTP draw is classified by: acyclic or cyclic graphs, and whether
    the embeddings are linearly independent."""
    graphs = priority_graphs(sequences, labels, E.shape[0])
    out = {REALIZABLE_LABELS, DISTINCT_TOKENS}
    out.add(ACYCLIC_GRAPHS if all(g.is_acyclic for g in graphs.values()) else CYCLIC_GRAPH)
    if E.shape[0] <= E.shape[1] and np.linalg.matrix_rank(E) == E.shape[0]:
        out.add(INDEPENDENT_EMBEDDINGS)
    return out


def official_sequences(rng, n: int, T: int, K: int) -> tuple[list[list[int]], list[int]]:
    """n sequences of T distinct tokens (out of K), each label uniform over its sequence."""
    seqs = [[int(t) for t in rng.choice(K, size=T, replace=False)] for _ in range(n)]
    labels = [int(s[rng.integers(T)]) for s in seqs]
    return seqs, labels


def official_ntp_data(seed: int, n=6, T=4, K=6, d=8, graphs="cyclic", orthonormal=False):
    """(E, sequences, labels, tries) of the official generator from ``seed``, or None when
    MAX_REDRAWS draws miss the graph condition. Pure: the claims' fixed pools call it."""
    if graphs not in GRAPH_MODES:
        raise ValueError(f"graphs: expected one of {GRAPH_MODES}, got {graphs!r}")
    rng = np.random.default_rng(seed)
    E = np.eye(K) if orthonormal else unit_rows(rng, K, d)
    for tries in range(1, MAX_REDRAWS + 1):
        seqs, labels = official_sequences(rng, n, T, K)
        g = priority_graphs(seqs, labels, K)
        acyclic = all(x.is_acyclic for x in g.values())
        if graphs == "any" or (graphs == "acyclic") == acyclic:
            return E, seqs, labels, tries
    return None


def _official(draw, n, T, K, d, graphs, orthonormal):
    n, T, K = _value(draw, n), _value(draw, T), _value(draw, K)
    d = K if orthonormal else _value(draw, d)
    if T > K:
        raise ValueError(f"T = {T} > K = {K}: a sequence holds T distinct tokens")
    seed = draw(SEEDS)
    out = official_ntp_data(seed, n, T, K, d, graphs, orthonormal)
    if out is None:
        event(f"reject: no {graphs} draw in {MAX_REDRAWS}")
    assume(out is not None)
    E, seqs, labels, tries = out
    names = graph_assumptions(E, seqs, labels)
    names.add(ORTHONORMAL_VOCAB if orthonormal else OFFICIAL_NTP)
    meta = {"generator": "orthonormal" if orthonormal else "official", "redraws": tries}
    return NTPInstance(E, seqs, labels, assumptions=names, seed=seed, meta=meta)


@st.composite
def official_ntp_instances(draw, n=6, T=4, K=6, d=8, graphs="cyclic"):
    """Generator (a), spec §4.1: the official data (defaults n=6, T=4, K=6, d=8; cyclic)."""
    return _official(draw, n, T, K, d, graphs, orthonormal=False)


@st.composite
def orthonormal_ntp_instances(draw, n=6, T=4, K=6, graphs="any"):
    """Generator (b): the official sequences over the orthonormal vocabulary E = I_K."""
    return _official(draw, n, T, K, None, graphs, orthonormal=True)


@st.composite
def with_repeated_tokens(draw, base):
    """A draw of ``base`` where, by a drawn choice, each sequence's first token is replaced by a
    copy of its second (unless the first is its label): repeated tokens are twins for the
    engine (one key), and the NTP loss counts them. Where a sequence changed, the instance no
    longer claims distinct tokens (nor the official generator's data); ``meta["repeats"]``."""
    inst = draw(base)
    if not draw(st.booleans()):
        return inst
    seqs = [
        (s[1], *s[1:]) if len(s) > 2 and s[0] != y else tuple(s)
        for s, y in zip(inst.sequences, inst.labels, strict=True)
    ]
    names, meta = set(inst.assumptions), dict(inst.meta)
    if any(len(set(s)) < len(s) for s in seqs):
        names -= {DISTINCT_TOKENS, OFFICIAL_NTP}
        meta["repeats"] = True
    return type(inst)(
        inst.embeddings, tuple(seqs), inst.labels, assumptions=names, seed=inst.seed, meta=meta
    )


#: The NTP sizes drawn at the medium rung of the size ladder (issue 23;
#: ``strategies.ladder.RUNGS["medium"]``: n, T ≤ 32, d ≤ 128), each range starting above the
#: small claims' (n ≤ 10, T ≤ 5, K ≤ 8, d ≤ 8). The engine's flow on W lives in ℝ^{d²}, and
#: its implicit integrator factors d²×d² Jacobians, so d stays ≤ 12 (d² ≤ 144) rather than the
#: rung's 128: a ci budget (measured, one draw at a time on 2 shared cores: 0.2–4 s at d ≤ 12
#: as a rule, one 19 s; 26–85 s at d = 14–16 with n ≥ 20, every one of those decided and
#: holding). T ≤ K (T distinct tokens), and an orthonormal vocabulary has d = K ≤ 12.
MEDIUM_NTP = {"n": (11, 32), "T": (6, 32), "K": (9, 32), "d": (9, 12)}
MEDIUM_ORTHONORMAL_NTP = {"n": (11, 32), "T": (6, 12), "K": (9, 12)}


@st.composite
def _rung_official(draw, sizes, graphs):
    n = draw(st.integers(*sizes["n"]))
    T = draw(st.integers(*sizes["T"]))
    K = draw(st.integers(max(T, sizes["K"][0]), sizes["K"][1]))
    d = draw(st.integers(*sizes["d"]))
    return _official(draw, n, T, K, d, draw(st.sampled_from(graphs)), orthonormal=False)


@st.composite
def _rung_orthonormal(draw, sizes):
    n = draw(st.integers(*sizes["n"]))
    T = draw(st.integers(*sizes["T"]))
    K = draw(st.integers(max(T, sizes["K"][0]), sizes["K"][1]))
    return _official(draw, n, T, K, None, "any", orthonormal=True)


def medium_ntp_instances():
    """The official generator (a), its priority graphs cyclic, acyclic or as first drawn (the
    official redraw loop), and its sequences over the orthonormal vocabulary (b), each with
    repeated tokens by a drawn choice, at the medium rung's sizes (``MEDIUM_NTP``,
    ``MEDIUM_ORTHONORMAL_NTP``): n in [11, 32], T in [6, 32], K in [max(T, 9), 32], d in
    [9, 12] (d ≤ 12: the flow on W has d² coordinates), and for E = I_K, K = d ≤ 12."""
    return st.one_of(
        with_repeated_tokens(_rung_official(MEDIUM_NTP, ("any", "cyclic", "acyclic"))),
        with_repeated_tokens(_rung_orthonormal(MEDIUM_ORTHONORMAL_NTP)),
    )


@st.composite
def chain_ntp_instances(draw, K=st.integers(3, 7), queries=st.integers(1, 3), d=None):
    """Generator (c): for each of ``queries`` query tokens k a random total order
    c_0 ⇒ c_1 ⇒ … ⇒ c_m = k over a random subset of tokens (m ≥ 1), with one sample per
    suffix: sequence (c_i, …, c_{m−1} shuffled, then k), label c_i. Every graph is acyclic and
    every G^(k) totally orders its chain. ``d=None``: E = I_K; else unit rows in R^d.
    ``meta["chains"]`` holds each query's order (top first)."""
    K, nq = _value(draw, K), _value(draw, queries)
    seed = draw(SEEDS)
    rng = np.random.default_rng(seed)
    dim = K if d is None else _value(draw, d)
    E = np.eye(K) if d is None else unit_rows(rng, K, dim)
    qs = rng.choice(K, size=min(nq, K), replace=False)
    seqs, labels, chains = [], [], {}
    for k in qs:
        others = [int(t) for t in rng.permutation([t for t in range(K) if t != k])]
        m = int(rng.integers(1, K))  # chain length above the query: 1..K−1
        chain = others[:m] + [int(k)]
        chains[int(k)] = chain
        for i in range(m):
            body = [int(t) for t in rng.permutation(chain[i:m])]
            seqs.append(body + [int(k)])
            labels.append(chain[i])
    names = graph_assumptions(E, seqs, labels)
    if d is None:
        names.add(ORTHONORMAL_VOCAB)
    meta = {"generator": "chain", "chains": chains}
    return NTPInstance(E, seqs, labels, assumptions=names, seed=seed, meta=meta)


@st.composite
def log_odds_instances(draw, K=st.integers(4, 8), d=st.integers(2, 10), queries=st.integers(1, 2)):
    """The log-odds case of §2.4: per query k, one or two disjoint cycles C (2–3 tokens each,
    the first above the second), each member a the label of n_a ∈ {1, 2, 3} samples, and every
    sample labelled in C holds all of C (plus, for the upper cycle, the lower cycle's tokens
    with probability ½, and a random subset of the lower tokens), then k. Lower tokens get
    samples (l, lower tokens…, k) labelled l. ``meta["cycles"]``: {k: [C, …]}, ``meta["counts"]``:
    {k: {a: n_a}}."""
    K, nq = _value(draw, K), _value(draw, queries)
    seed = draw(SEEDS)
    rng = np.random.default_rng(seed)
    dim = _value(draw, d)
    E = unit_rows(rng, K, dim)
    qs = rng.choice(K, size=min(nq, K), replace=False)
    seqs, labels, cycles, counts = [], [], {}, {}
    for k in qs:
        k = int(k)
        free = [int(t) for t in rng.permutation([t for t in range(K) if t != k])]
        sizes = [int(rng.integers(2, 4))]
        if len(free) - sizes[0] >= 2 and rng.random() < 0.5:
            sizes.append(int(rng.integers(2, min(3, len(free) - sizes[0]) + 1)))
        if sum(sizes) > len(free):
            sizes = [len(free)] if len(free) >= 2 else []
        assume(sizes)  # K ≥ 4 leaves ≥ 3 free tokens: never hit
        cyc, start = [], 0
        for s in sizes:
            cyc.append(free[start : start + s])
            start += s
        lower = free[start:]
        cycles[k], counts[k] = cyc, {}
        for c_index, C in enumerate(cyc):
            below = [t for D in cyc[c_index + 1 :] for t in D] if rng.random() < 0.5 else []
            extra = [t for t in lower if rng.random() < 0.5]
            body = C + below + extra  # the same tokens for every sample labelled in C
            for a in C:
                n_a = int(rng.integers(1, 4))
                counts[k][a] = n_a
                for _ in range(n_a):
                    seqs.append([int(t) for t in rng.permutation(body)] + [k])
                    labels.append(a)
        for j, low in enumerate(lower):
            if rng.random() < 0.5:
                seqs.append([low, *lower[j + 1 :], k])
                labels.append(low)
    names = graph_assumptions(E, seqs, labels) | {LOG_ODDS_CASE}
    meta = {"generator": "log_odds", "cycles": cycles, "counts": counts}
    return NTPInstance(E, seqs, labels, assumptions=names, seed=seed, meta=meta)


@st.composite
def partial_cycle_instances(draw, K=st.integers(4, 6), extra_dims=st.integers(0, 2)):
    """Control C6's shape: query k and a 3-cycle {a, b, c}; samples (a, b, k)→a, (b, c, k)→b,
    (c, a, k)→c with multiplicities n ∈ {1, 2, 3} each, so every sample sees two of the three
    members (not the log-odds case). E: unit rows in R^{K + extra}."""
    K = _value(draw, K)
    seed = draw(SEEDS)
    rng = np.random.default_rng(seed)
    E = unit_rows(rng, K, K + _value(draw, extra_dims))
    k, a, b, c = (int(t) for t in rng.choice(K, size=4, replace=False))
    seqs, labels, mult = [], [], {}
    for y, other in ((a, b), (b, c), (c, a)):
        mult[y] = int(rng.integers(1, 4))
        for _ in range(mult[y]):
            seqs.append([int(t) for t in rng.permutation([y, other])] + [k])
            labels.append(y)
    names = graph_assumptions(E, seqs, labels)
    meta = {"generator": "partial_cycle", "cycle": [a, b, c], "query": k, "counts": mult}
    return NTPInstance(E, seqs, labels, assumptions=names, seed=seed, meta=meta)


# ---- the paper's fixed instances (spec §2.3, §2.4, C6) and the named official draws ----------


I1_SEQUENCES = [[1, 2, 3, 0], [2, 3, 0], [3, 0]]
I1_LABELS = [1, 2, 3]


def i1_instance() -> NTPInstance:
    """Chain I1 (spec §2.3): E = I₄, ([1,2,3,0],1), ([2,3,0],2), ([3,0],3). Promises realizable
    labels, distinct tokens, an orthonormal (hence independent) vocabulary and acyclic graphs."""
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, ORTHONORMAL_VOCAB, ACYCLIC_GRAPHS}
    names.add(INDEPENDENT_EMBEDDINGS)
    return NTPInstance(np.eye(4), I1_SEQUENCES, I1_LABELS, assumptions=names, meta={"id": "I1"})


def i2_embeddings() -> np.ndarray:
    """I2's vocabulary: 5 unit rows in R^6 from numpy's default_rng(0) (independent)."""
    E = np.random.default_rng(0).standard_normal((5, 6))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


I2_SEQUENCES = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
I2_LABELS = [1, 1, 2, 3, 3, 2, 2]


def i2_instance() -> NTPInstance:
    """Instance I2 (spec §2.4): K=5, d=6, query 0 with the {1, 2} cycle (counts 2:1). Promises
    realizable labels, distinct tokens, a cyclic graph, independent embeddings and the log-odds
    case (every sample labelled in the cycle holds all of it)."""
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, CYCLIC_GRAPH, INDEPENDENT_EMBEDDINGS}
    names.add(LOG_ODDS_CASE)
    return NTPInstance(
        i2_embeddings(), I2_SEQUENCES, I2_LABELS, assumptions=names, meta={"id": "I2"}
    )


def c6_instance() -> NTPInstance:
    """Control C6's instance: E = I₄, query 0, ([1,2,0],1)×2, ([2,3,0],2), ([3,1,0],3). Promises
    realizable labels, distinct tokens, a cyclic graph (the 3-cycle {1, 2, 3}, each sample
    holding two of its members: not the log-odds case) and an orthonormal vocabulary."""
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, CYCLIC_GRAPH, ORTHONORMAL_VOCAB}
    names.add(INDEPENDENT_EMBEDDINGS)
    seqs = [[1, 2, 0], [1, 2, 0], [2, 3, 0], [3, 1, 0]]
    return NTPInstance(np.eye(4), seqs, [1, 1, 2, 3], assumptions=names, meta={"id": "C6"})


def named_ntp_fields(name: str):
    """(E, sequences, labels) of a named instance: "I1", "I2", or "official-<seed>" (generator
    (a) with its default sizes, cyclic, from that seed). Pure."""
    if name == "I1":
        return np.eye(4), I1_SEQUENCES, I1_LABELS
    if name == "I2":
        return i2_embeddings(), I2_SEQUENCES, I2_LABELS
    E, seqs, labels, _ = official_ntp_data(int(name.split("-")[1]))
    return E, seqs, labels


def named_ntp_instance(name: str) -> NTPInstance:
    """The instance a name stands for (``named_ntp_fields``), built anew at each call, with
    meta {"id": name}: I1 and I2 as above; an official draw promises realizable labels,
    distinct tokens, the official generator and a cyclic graph (it redraws until one query's
    graph has a cycle), and independent embeddings where E has full row rank."""
    if name == "I1":
        return i1_instance()
    if name == "I2":
        return i2_instance()
    E, seqs, labels = named_ntp_fields(name)
    names = {REALIZABLE_LABELS, DISTINCT_TOKENS, OFFICIAL_NTP, CYCLIC_GRAPH}
    if np.linalg.matrix_rank(E) == E.shape[0]:
        names.add(INDEPENDENT_EMBEDDINGS)
    seed = int(name.split("-")[1])
    return NTPInstance(E, seqs, labels, assumptions=names, seed=seed, meta={"id": name})
