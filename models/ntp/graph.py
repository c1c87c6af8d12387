"""The token-priority graph of 2403.08081 and its strongly connected components (spec ntp.md
§1.2, §2.1). Exact graph logic on token ids; no floats.

For each query token k, G^(k) has all K tokens as nodes; every realizable sample with last token
k and label y adds the edge y → j for each other token j of its sequence (the query included
when j = k ≠ y). This is the official ``Tarjan.initialize``: no self-loops, no transitive
edges, and samples whose label is absent from the sequence add nothing. "y ⇒ j" (y has priority
over j) when a path y → … → j exists. The SCCs of G^(k) are ordered topologically, sources
(highest priority) first; ties between incomparable components are broken by their smallest
token, so the order is a function of the graph alone.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

import networkx as nx

from models.ntp.data import token_sequences

Triple = tuple[int, int, int]


def priority_triples(sequences, labels, num_tokens: int) -> frozenset[Triple]:
    """The set of (query, label, other token) triples: all the graph depends on (§2.1)."""
    seqs, ys = token_sequences(sequences, labels, num_tokens)
    triples = set()
    for seq, y in zip(seqs, ys, strict=True):
        if y not in seq:  # non-realizable: the official graph skips the sample
            continue
        triples.update((seq[-1], y, j) for j in set(seq) if j != y)
    return frozenset(triples)


@dataclass(frozen=True, eq=False)
class PriorityGraph:
    """G^(k) for one query token: its edges, SCCs in topological order and reachability."""

    query: int
    num_tokens: int
    edges: frozenset[tuple[int, int]]

    @cached_property
    def _digraph(self) -> nx.DiGraph:
        graph = nx.DiGraph()
        graph.add_nodes_from(range(self.num_tokens))
        graph.add_edges_from(self.edges)
        return graph

    @cached_property
    def _condensation(self) -> tuple[nx.DiGraph, tuple[frozenset[int], ...]]:
        """The condensation DAG relabelled so that node c is the c-th SCC in our order."""
        cond = nx.condensation(self._digraph)
        order = list(
            nx.lexicographical_topological_sort(cond, key=lambda c: min(cond.nodes[c]["members"]))
        )
        rank = {c: r for r, c in enumerate(order)}
        dag = nx.relabel_nodes(cond, rank)
        comps = tuple(frozenset(cond.nodes[c]["members"]) for c in order)
        return dag, comps

    @property
    def components(self) -> tuple[frozenset[int], ...]:
        """The SCCs in topological order: every edge goes from a component to a later one."""
        return self._condensation[1]

    @cached_property
    def component_of(self) -> tuple[int, ...]:
        """Index (into `components`) of each token's SCC."""
        index = [0] * self.num_tokens
        for c, members in enumerate(self.components):
            for token in members:
                index[token] = c
        return tuple(index)

    def same_component(self, a: int, b: int) -> bool:
        return self.component_of[a] == self.component_of[b]

    @cached_property
    def _reach(self) -> tuple[frozenset[int], ...]:
        """Components reachable from each component (itself included)."""
        dag = self._condensation[0]
        return tuple(frozenset(nx.descendants(dag, c)) | {c} for c in range(len(dag)))

    def has_priority(self, a: int, b: int) -> bool:
        """a ⇒ b: a path a → … → b exists (a ≠ b; within an SCC both directions hold)."""
        if a == b:
            return False
        return self.component_of[b] in self._reach[self.component_of[a]]

    @property
    def is_acyclic(self) -> bool:
        """Every SCC is a single token (then the graph-SVM is TF-as-SVM's, spec §2.3 item 5)."""
        return all(len(c) == 1 for c in self.components)

    @property
    def cyclic_components(self) -> tuple[frozenset[int], ...]:
        """The SCCs with at least two tokens, in topological order."""
        return tuple(c for c in self.components if len(c) > 1)

    def top_components(self, tokens: Iterable[int]) -> tuple[int, ...]:
        """Indices of the maximal SCCs among those of ``tokens``: no other present SCC has
        priority over them. One index when the present SCCs have a top (NTP-RET)."""
        present = {self.component_of[t] for t in tokens}
        return tuple(
            sorted(c for c in present if not any(o != c and c in self._reach[o] for o in present))
        )

    def top_component(self, tokens: Iterable[int]) -> frozenset[int] | None:
        """The SCC that has priority over every other SCC present, or None if there is none."""
        tops = self.top_components(tokens)
        if len(tops) != 1:
            return None
        c = tops[0]
        present = {self.component_of[t] for t in tokens}
        return self.components[c] if present <= self._reach[c] else None


def priority_graphs(sequences, labels, num_tokens: int) -> dict[int, PriorityGraph]:
    """G^(k) for every query token k that ends some sequence, keyed by k."""
    seqs, ys = token_sequences(sequences, labels, num_tokens)
    edges: dict[int, set[tuple[int, int]]] = {seq[-1]: set() for seq in seqs}
    for k, y, j in priority_triples(seqs, ys, num_tokens):
        edges[k].add((y, j))
    return {k: PriorityGraph(k, num_tokens, frozenset(e)) for k, e in sorted(edges.items())}


def scc_partition(sequences, labels, num_tokens: int) -> dict[int, frozenset[frozenset[int]]]:
    """The SCC partition of each G^(k) as a set of token sets (order-free, for comparisons)."""
    graphs = priority_graphs(sequences, labels, num_tokens)
    return {k: frozenset(g.components) for k, g in graphs.items()}
