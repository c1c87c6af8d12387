"""Unit tests of the token-priority graph and its SCCs (models/ntp/graph.py; spec ntp.md §1.2,
§2.1): hand-solved instances, an independent transitive-closure partition, the invariances of
§2.1, and bad input."""

import itertools

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ntp.graph import priority_graphs, priority_triples, scc_partition

#: Instance I2 of spec §2.4 (tokens only): queries 0 and 4.
I2_SEQUENCES = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
I2_LABELS = [1, 1, 2, 3, 3, 2, 2]


def parts(*groups):
    return frozenset(frozenset(g) for g in groups)


# ------------------------------------------------------------------------------ hand-solved


def test_i2_partition_and_order():
    """Query 0: 1 → 2 and 2 → 1 make the cycle {1, 2}; 1, 2 → 3 → 0; 4 is unused. Query 4 is
    acyclic: 2 → 3 → 1, 2 → 1, all → 4."""
    graphs = priority_graphs(I2_SEQUENCES, I2_LABELS, 5)
    assert set(graphs) == {0, 4}
    assert graphs[0].components == (frozenset({1, 2}), frozenset({3}), frozenset({0}), {4})
    assert graphs[0].cyclic_components == (frozenset({1, 2}),)
    assert graphs[4].components == ({0}, {2}, {3}, {1}, {4})
    assert graphs[4].is_acyclic and not graphs[0].is_acyclic


def test_chain_i1_is_acyclic_in_priority_order():
    """I1 (spec §2.3): samples ([1,2,3,0],1), ([2,3,0],2), ([3,0],3): 1 ⇒ 2 ⇒ 3 ⇒ 0."""
    g = priority_graphs([[1, 2, 3, 0], [2, 3, 0], [3, 0]], [1, 2, 3], 4)[0]
    assert g.components == ({1}, {2}, {3}, {0})
    assert g.has_priority(1, 0) and g.has_priority(2, 3) and not g.has_priority(3, 1)
    assert g.top_component([3, 2, 0]) == {2}


def test_two_tokens_one_cycle():
    """([1, 0], 1) and ([1, 0], 0): 1 → 0 and 0 → 1, one SCC with both tokens."""
    g = priority_graphs([[1, 0], [1, 0]], [1, 0], 2)[0]
    assert g.components == (frozenset({0, 1}),)
    assert g.has_priority(0, 1) and g.has_priority(1, 0)


def test_three_cycle_c6():
    """Control C6's data: 1 → 2, 2 → 3, 3 → 1 (each sample sees two members) close one SCC."""
    g = priority_graphs([[1, 2, 0], [1, 2, 0], [2, 3, 0], [3, 1, 0]], [1, 1, 2, 3], 4)[0]
    assert g.components == (frozenset({1, 2, 3}), frozenset({0}))


def test_priority_is_transitive():
    """1 → 2 and 2 → 3 with no sample holding 1 and 3 together: still 1 ⇒ 3."""
    g = priority_graphs([[1, 2, 0], [2, 3, 0]], [1, 2], 4)[0]
    assert (1, 3) not in g.edges
    assert g.has_priority(1, 3) and not g.has_priority(3, 1)
    assert g.top_component([1, 3]) == {1}


def test_query_is_a_candidate_and_self_loops_are_dropped():
    """The query token gets an edge from the label (j = k ≠ y); a repeated label adds none."""
    triples = priority_triples([[2, 1, 2, 0]], [2], 3)
    assert triples == {(0, 2, 1), (0, 2, 0)}


def test_unrealizable_samples_add_nothing():
    """The official Tarjan.initialize skips a sample whose label is absent."""
    assert priority_triples([[1, 2, 0], [1, 0]], [1, 2], 3) == {(0, 1, 2), (0, 1, 0)}


def test_top_components_of_incomparable_tokens():
    """Query 0: 1 ⇒ 2 and 3 ⇒ 4, nothing between the pairs: two tops, no unique top."""
    g = priority_graphs([[1, 2, 0], [3, 4, 0]], [1, 3], 5)[0]
    assert g.top_components([1, 2, 3, 4]) == (g.component_of[1], g.component_of[3])
    assert g.top_component([1, 2, 3, 4]) is None
    assert g.top_component([1, 2]) == {1}
    assert g.top_component(t for t in (2, 1, 0)) == {1}  # any iterable, read once


# ---------------------------------------------------------------------------- properties


@st.composite
def datasets(draw, realizable=True):
    K = draw(st.integers(2, 6))
    n = draw(st.integers(1, 7))
    seqs, labels = [], []
    for _ in range(n):
        seq = draw(st.lists(st.integers(0, K - 1), min_size=1, max_size=5))
        seqs.append(seq)
        labels.append(draw(st.sampled_from(seq)) if realizable else draw(st.integers(0, K - 1)))
    return K, seqs, labels


def closure_partition(K, triples, k):
    """SCCs from a boolean transitive closure (Warshall): independent of networkx and Tarjan."""
    reach = [[i == j for j in range(K)] for i in range(K)]
    for q, y, j in triples:
        if q == k:
            reach[y][j] = True
    for m, i, j in itertools.product(range(K), repeat=3):
        reach[i][j] = reach[i][j] or (reach[i][m] and reach[m][j])
    return frozenset(
        frozenset(j for j in range(K) if reach[i][j] and reach[j][i]) for i in range(K)
    ), reach


@settings(max_examples=30, deadline=None)
@given(datasets(realizable=False))
def test_partition_matches_transitive_closure(instance):
    K, seqs, labels = instance
    triples = priority_triples(seqs, labels, K)
    for k, g in priority_graphs(seqs, labels, K).items():
        expected, reach = closure_partition(K, triples, k)
        assert frozenset(g.components) == expected
        for a, b in itertools.product(range(K), repeat=2):
            assert g.has_priority(a, b) == (a != b and reach[a][b])
        for seq in seqs:  # the top SCC of each sequence's tokens, read off the closure
            tops = {
                g.component_of[t]
                for t in seq
                if not any(reach[o][t] and not reach[t][o] for o in seq)
            }
            top = g.top_component(seq)
            assert (top is None) == (len(tops) != 1)
            if top is not None:
                assert all(reach[min(top)][t] for t in seq)


@settings(max_examples=30, deadline=None)
@given(datasets())
def test_components_are_in_topological_order(instance):
    """Every edge goes from an SCC to itself or to a later one; networkx agrees on the SCCs."""
    K, seqs, labels = instance
    for g in priority_graphs(seqs, labels, K).values():
        for y, j in g.edges:
            assert g.component_of[y] <= g.component_of[j]
        digraph = nx.DiGraph(list(g.edges))
        digraph.add_nodes_from(range(K))
        assert frozenset(g.components) == frozenset(
            frozenset(c) for c in nx.strongly_connected_components(digraph)
        )


@settings(max_examples=30, deadline=None)
@given(datasets(), st.randoms(use_true_random=False))
def test_partition_invariances(instance, rnd):
    """§2.1: permuting samples, permuting non-final positions, duplicating samples and adding
    transitive-closure samples leave the partition unchanged."""
    K, seqs, labels = instance
    base = scc_partition(seqs, labels, K)
    order = list(range(len(seqs)))
    rnd.shuffle(order)
    shuffled = []
    for i in order:
        head = seqs[i][:-1]
        rnd.shuffle(head)
        shuffled.append(head + seqs[i][-1:])
    assert scc_partition(shuffled, [labels[i] for i in order], K) == base
    assert scc_partition(seqs + seqs[:1], labels + labels[:1], K) == base
    graphs = priority_graphs(seqs, labels, K)
    extra = [
        ([y, j, k], y)
        for k, g in graphs.items()
        for y, j in itertools.permutations(range(K), 2)
        if g.has_priority(y, j) and (y == k or g.has_priority(y, k))
    ]
    more_seqs = seqs + [s for s, _ in extra]
    assert scc_partition(more_seqs, labels + [y for _, y in extra], K) == base


# ------------------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    ("seqs", "labels", "match"),
    [
        ([[0, 5]], [0], r"sequences\[0\]: token id 5 is outside \[0, 3\)"),
        ([[0, 1]], [-1], r"labels\[0\]: token id -1"),
        ([[]], [0], r"sequences\[0\]: is empty"),
        ([[0, 1]], [0, 1], "2 labels for 1 sequences"),
        ([[0, 1.0]], [0], "expected an integer token id"),
        ([[0, True]], [0], "boolean"),
        (["01"], [0], "expected a list of token ids"),
    ],
)
def test_bad_input_names_the_field(seqs, labels, match):
    with pytest.raises(ValueError, match=match):
        priority_graphs(seqs, labels, 3)
