"""The token-priority graph of 2403.08081 and when its graph-SVM exists (spec ntp.md §1.2,
§2.1 NTP-GRAPH, §2.2 NTP-FEAS). Exact graph logic; the SVM is the certified equality QP."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from models.ntp.data import ntp_data
from models.ntp.graph import PriorityGraph, priority_graphs, scc_partition
from strategies.combinators import SEEDS
from strategies.instances import INDEPENDENT_EMBEDDINGS
from strategies.ntp_attention import (
    log_odds_instances,
    official_ntp_instances,
    orthonormal_ntp_instances,
)
from theorems import claim, evidence
from theorems.ntp.common import reach_partition, solve_svm

ANY_NTP = st.one_of(
    official_ntp_instances(graphs="any"),
    official_ntp_instances(n=st.integers(2, 10), T=st.integers(2, 5), K=6, d=st.integers(2, 8)),
    orthonormal_ntp_instances(),
    log_odds_instances(),
)


def _rearranged(inst, seed: int):
    """The samples permuted, each sequence's non-final positions permuted, and a random
    subset of samples duplicated: the same (query, label, other-token) triples."""
    rng = np.random.default_rng(seed)
    seqs, labels = [], []
    for i in rng.permutation(inst.n):
        seq = list(inst.sequences[i])
        body = [int(t) for t in rng.permutation(seq[:-1])]
        copies = 1 + int(rng.integers(0, 3))
        for _ in range(copies):
            seqs.append(body + [seq[-1]])
            labels.append(inst.labels[i])
    return ntp_data(inst.embeddings, seqs, labels)


@claim("NTP-GRAPH-INVARIANT")
@given(inst=ANY_NTP, seed=SEEDS)
def test_partition_depends_on_triples(inst, seed):
    """The priority graph, and so its SCC partition, depends only on the set of
    (query, label, other-token) triples."""
    base = scc_partition(inst.sequences, inst.labels, inst.num_tokens)
    other = _rearranged(inst, seed)
    moved = scc_partition(other.sequences, other.labels, other.num_tokens)
    assert moved == base, f"partition changed under permutation/duplication: {base} → {moved}"
    for k, g in priority_graphs(inst.sequences, inst.labels, inst.num_tokens).items():
        closed = g.edges | {
            (a, b) for a in range(g.num_tokens) for b in range(g.num_tokens) if g.has_priority(a, b)
        }
        h = PriorityGraph(k, g.num_tokens, frozenset(closed))
        assert set(h.components) == set(g.components), (
            f"query {k}: adding the transitive edges changed the SCCs {g.components} → "
            f"{h.components}"
        )


@claim("NTP-GRAPH-SCC")
@given(inst=ANY_NTP)
def test_scc_partition_is_mutual_reachability(inst):
    """The SCCs of G^(k) are the classes of mutual reachability along y → j edges."""
    ours = scc_partition(inst.sequences, inst.labels, inst.num_tokens)
    for k, part in ours.items():
        ref = reach_partition(inst.data, k)
        evidence.metric("largest SCC", max(len(c) for c in part))
        assert part == ref, (
            f"query {k}: SCCs {sorted(map(sorted, part))} ≠ {sorted(map(sorted, ref))}"
        )


@claim("NTP-FEAS")
@given(
    inst=st.one_of(
        official_ntp_instances(graphs="any", d=st.integers(2, 10)),
        official_ntp_instances(n=st.integers(2, 12), T=st.integers(2, 6), K=6, d=st.integers(2, 8)),
        log_odds_instances(d=st.integers(2, 10)),
    )
)
def test_independent_embeddings_feasible(inst):
    """If the embeddings are linearly independent (K ≤ d), the graph-SVM is feasible for
    every dataset."""
    sol = solve_svm(inst.data)
    evidence.metric("K/d", inst.num_tokens / inst.dim)
    if not evidence.premise(INDEPENDENT_EMBEDDINGS in inst.assumptions, "K ≤ d, independent"):
        evidence.metric(f"feasible with K > d ({sol.status})", float(sol.status == "optimal"))
        return
    if sol.status not in ("optimal", "infeasible"):
        evidence.inconclusive(f"graph-SVM: solver {sol.status}")
    assert sol.status == "optimal", (
        f"graph-SVM {sol.status} with K = {inst.num_tokens} ≤ d = {inst.dim} independent "
        f"embeddings: {sol.reason}"
    )
