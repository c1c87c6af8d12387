"""Meta-tests: each NTP strategy of strategies/ntp_attention.py (spec ntp §6.3) meets the
assumptions it promises, checked here independently of the strategy's code (graphs by a
hand-written Warshall closure, ranks with numpy), and the pure official generator replays
from its seed."""

from __future__ import annotations

from collections import Counter

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

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
from strategies.ladder import RUNGS
from strategies.ntp_attention import (
    MEDIUM_NTP,
    MEDIUM_ORTHONORMAL_NTP,
    chain_ntp_instances,
    log_odds_instances,
    medium_ntp_instances,
    official_ntp_data,
    official_ntp_instances,
    orthonormal_ntp_instances,
    partial_cycle_instances,
    with_repeated_tokens,
)

FAST = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def _closure(inst, k):
    K = inst.num_tokens
    R = np.eye(K, dtype=bool)
    for seq, y in zip(inst.sequences, inst.labels, strict=True):
        if seq[-1] == k:
            for j in seq:
                if j != y:
                    R[y, j] = True
    for m in range(K):
        R |= R[:, [m]] & R[[m], :]
    return R


def _cyclic(inst) -> bool:
    for k in {s[-1] for s in inst.sequences}:
        R = _closure(inst, k)
        if ((R & R.T) & ~np.eye(inst.num_tokens, dtype=bool)).any():
            return True
    return False


def _common(inst):
    assert REALIZABLE_LABELS in inst.assumptions and DISTINCT_TOKENS in inst.assumptions
    for seq, y in zip(inst.sequences, inst.labels, strict=True):
        assert y in seq
        assert len(set(seq)) == len(seq)
    assert (CYCLIC_GRAPH in inst.assumptions) == _cyclic(inst)
    assert (ACYCLIC_GRAPHS in inst.assumptions) == (not _cyclic(inst))
    K, d = inst.embeddings.shape
    indep = K <= d and np.linalg.matrix_rank(inst.embeddings) == K
    assert (INDEPENDENT_EMBEDDINGS in inst.assumptions) == indep


@FAST
@given(inst=official_ntp_instances(n=st.integers(2, 8), T=st.integers(2, 5), d=st.integers(2, 9)))
def test_official_cyclic(inst):
    _common(inst)
    assert OFFICIAL_NTP in inst.assumptions and CYCLIC_GRAPH in inst.assumptions
    assert np.allclose(np.linalg.norm(inst.embeddings, axis=1), 1.0)
    assert len({len(s) for s in inst.sequences}) == 1


@FAST
@given(inst=official_ntp_instances(graphs="acyclic"))
def test_official_acyclic(inst):
    _common(inst)
    assert ACYCLIC_GRAPHS in inst.assumptions


@FAST
@given(inst=orthonormal_ntp_instances())
def test_orthonormal(inst):
    _common(inst)
    assert ORTHONORMAL_VOCAB in inst.assumptions
    assert np.array_equal(inst.embeddings, np.eye(inst.num_tokens))


@FAST
@given(inst=chain_ntp_instances())
def test_chains_total_orders(inst):
    _common(inst)
    assert ACYCLIC_GRAPHS in inst.assumptions
    for k, chain in inst.meta["chains"].items():
        R = _closure(inst, int(k))
        for i, a in enumerate(chain):
            for b in chain[i + 1 :]:
                assert R[a, b] and not R[b, a]


@FAST
@given(inst=log_odds_instances())
def test_log_odds_case(inst):
    _common(inst)
    assert LOG_ODDS_CASE in inst.assumptions and CYCLIC_GRAPH in inst.assumptions
    for k in {s[-1] for s in inst.sequences}:
        R = _closure(inst, k)
        mutual = R & R.T
        for seq, y in zip(inst.sequences, inst.labels, strict=True):
            if seq[-1] != k:
                continue
            scc = set(np.flatnonzero(mutual[y]).tolist())
            assert scc <= set(seq), f"sample {seq}→{y} misses part of its SCC {scc}"


@FAST
@given(inst=partial_cycle_instances())
def test_partial_cycle(inst):
    _common(inst)
    a, b, c = inst.meta["cycle"]
    R = _closure(inst, inst.meta["query"])
    assert all(R[x, y] for x in (a, b, c) for y in (a, b, c))
    assert all(len(set(s) & {a, b, c}) == 2 for s in inst.sequences)
    assert Counter(inst.labels) == {int(t): n for t, n in inst.meta["counts"].items()}


@FAST
@given(inst=with_repeated_tokens(official_ntp_instances(n=st.integers(2, 8), T=st.integers(3, 5))))
def test_repeated_tokens_claim_distinct_tokens_only_where_they_are(inst):
    distinct = all(len(set(s)) == len(s) for s in inst.sequences)
    assert (DISTINCT_TOKENS in inst.assumptions) == distinct
    assert (OFFICIAL_NTP in inst.assumptions) == distinct
    assert ("repeats" in inst.meta) == (not distinct)
    assert inst.meta["generator"] == "official"
    for seq, y in zip(inst.sequences, inst.labels, strict=True):
        assert y in seq and len(set(seq[1:])) == len(seq) - 1


def test_the_medium_sizes_lie_in_the_medium_rung():
    box = RUNGS["medium"]
    for sizes in (MEDIUM_NTP, MEDIUM_ORTHONORMAL_NTP):
        assert sizes["n"][1] <= box.n_max and sizes["T"][1] <= box.T_max
        assert sizes.get("d", sizes["K"])[1] <= box.d_max
        assert sizes["T"][0] <= sizes["K"][1]  # a sequence holds T distinct tokens of K


@settings(FAST, max_examples=6)
@given(inst=medium_ntp_instances())
def test_medium_instances_stay_in_their_sizes(inst):
    sizes = MEDIUM_ORTHONORMAL_NTP if ORTHONORMAL_VOCAB in inst.assumptions else MEDIUM_NTP
    T = len(inst.sequences[0])
    assert {len(s) for s in inst.sequences} == {T}  # the engine's prompt view needs one T
    assert sizes["n"][0] <= inst.n <= sizes["n"][1] and sizes["T"][0] <= T <= sizes["T"][1]
    assert max(T, sizes["K"][0]) <= inst.num_tokens <= sizes["K"][1]
    lo, hi = sizes.get("d", sizes["K"])
    assert lo <= inst.dim <= hi
    assert RUNGS["medium"].contains(inst.n, T, inst.dim)
    if "repeats" not in inst.meta:
        _common(inst)


def test_official_generator_replays():
    one, two = official_ntp_data(7), official_ntp_data(7)
    assert np.array_equal(one[0], two[0]) and one[1:] == two[1:]
