"""The token-priority graph of 2403.08081 and its strongly connected components (spec ntp.md
§1.2, §2.1). Exact graph logic on token ids; no floats.

For each query token k, G^(k) has all K tokens as nodes; every realizable sample with last token
k and label y adds the edge y → j for each other token j of its sequence (the query included
when j = k ≠ y). This is the official ``Tarjan.initialize``: no self-loops, no transitive
edges, and samples whose label is absent from the sequence add nothing. "y ⇒ j" (y has priority
over j) when a path y → … → j exists. The SCCs of G^(k) are ordered topologically, sources
(highest priority) first; ties between incomparable components are broken by their smallest
token, so the order is a function of the graph alone. Tarjan's algorithm is written here
(iteratively, as the official code's recursive one); the tests compare it with networkx and
with a transitive closure.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

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
    def _condensation(self) -> tuple[tuple[frozenset[int], ...], tuple[int, ...]]:
        """(SCCs in our topological order, each token's SCC index)."""
        successors: list[list[int]] = [[] for _ in range(self.num_tokens)]
        for y, j in sorted(self.edges):
            successors[y].append(j)
        raw = strongly_connected_components(successors)
        index = [0] * self.num_tokens
        for c, members in enumerate(raw):
            for token in members:
                index[token] = c
        dag = [
            {index[j] for y in members for j in successors[y]} - {c}
            for c, members in enumerate(raw)
        ]
        order = topological_order(dag, key=[min(members) for members in raw])
        rank = {c: r for r, c in enumerate(order)}
        components = tuple(frozenset(raw[c]) for c in order)
        return components, tuple(rank[c] for c in index)

    @property
    def components(self) -> tuple[frozenset[int], ...]:
        """The SCCs in topological order: every edge goes from a component to a later one."""
        return self._condensation[0]

    @property
    def component_of(self) -> tuple[int, ...]:
        """Index (into `components`) of each token's SCC."""
        return self._condensation[1]

    def same_component(self, a: int, b: int) -> bool:
        return self.component_of[a] == self.component_of[b]

    @cached_property
    def _reach(self) -> tuple[frozenset[int], ...]:
        """Components reachable from each component (itself included), as index sets: one pass
        in reverse topological order, since every edge points to a later component."""
        later: list[set[int]] = [set() for _ in self.components]
        for y, j in self.edges:
            later[self.component_of[y]].add(self.component_of[j])
        reach: list[frozenset[int]] = [frozenset()] * len(later)
        for c in reversed(range(len(later))):
            reach[c] = frozenset({c}).union(*(reach[o] for o in later[c]))
        return tuple(reach)

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
        """The SCC that has priority over every other SCC present, or None if there is none.
        A unique maximal SCC is that one: following present predecessors from any present SCC
        ends at a maximal one (the condensation is acyclic), so the top reaches them all."""
        tops = self.top_components(tokens)
        return self.components[tops[0]] if len(tops) == 1 else None


def strongly_connected_components(successors: list[list[int]]) -> list[list[int]]:
    """Tarjan's algorithm, iterative (no recursion limit): the SCCs of the graph whose node v
    has out-neighbours ``successors[v]``, in the order Tarjan completes them."""
    n = len(successors)
    index, low = [-1] * n, [0] * n
    on_stack = [False] * n
    stack: list[int] = []
    components: list[list[int]] = []
    counter = 0
    for root in range(n):
        if index[root] != -1:
            continue
        work = [(root, 0)]  # (node, position in its successor list)
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on_stack[v] = True
            if i < len(successors[v]):
                work.append((v, i + 1))
                w = successors[v][i]
                if index[w] == -1:
                    work.append((w, 0))
                elif on_stack[w]:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                members = []
                while True:
                    w = stack.pop()
                    on_stack[w] = False
                    members.append(w)
                    if w == v:
                        break
                components.append(sorted(members))
            if work:  # v is done: hand its low-link to its DFS parent
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
    return components


def topological_order(dag: list[set[int]], key: list[int]) -> list[int]:
    """Kahn's algorithm taking, among the ready nodes, the one with the smallest ``key``: the
    order is then a function of the DAG and the keys alone."""
    indegree = [0] * len(dag)
    for targets in dag:
        for t in targets:
            indegree[t] += 1
    ready = [(key[c], c) for c in range(len(dag)) if indegree[c] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, c = heapq.heappop(ready)
        order.append(c)
        for t in dag[c]:
            indegree[t] -= 1
            if indegree[t] == 0:
                heapq.heappush(ready, (key[t], t))
    return order


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
