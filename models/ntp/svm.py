"""The certified graph-SVM of 2403.08081 (spec ntp.md §1.2, §2.2, §2.3):

    W_svm = argmin ‖W‖_F  s.t. for each sample i (query k, label y) and other token j in it:
            (x_y − x_j)ᵀ W x_k = 0   if y, j lie in the same SCC of G^(k),
            (x_y − x_j)ᵀ W x_k ≥ 1   otherwise,

as the official ``W_svm_solver_cvxpy`` states it, but with the squared norm, one row per
distinct (k, y, j) triple (the graph and the rows depend only on the triples, §2.1), solved by
the certified equality QP of `models.ntp.qp` and certified by KKT residuals (≤ 1e-8) in vec(W),
row-major: the row of (k, y, j) is vec((x_y − x_j) x_kᵀ), so row · W.ravel() is the logit gap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.ntp.data import NTPData, ntp_data
from models.ntp.graph import PriorityGraph, priority_graphs, priority_triples
from models.ntp.qp import KKT_TOL, EqualityQPSolution, orthonormal_rows, solve_equality_qp
from models.oracles.svm import Certificate

Triple = tuple[int, int, int]


@dataclass(frozen=True, eq=False)
class GraphSVMRows:
    """The constraint rows: margin rows (≥ 1) and equality rows (= 0), each labelled (k, y, j)."""

    A_in: np.ndarray
    A_eq: np.ndarray
    margin_triples: tuple[Triple, ...]
    equality_triples: tuple[Triple, ...]


def _row(E: np.ndarray, k: int, y: int, j: int) -> np.ndarray:
    return np.outer(E[y] - E[j], E[k]).ravel()


def graph_svm_rows(data: NTPData, graphs: dict[int, PriorityGraph] | None = None) -> GraphSVMRows:
    """One row per distinct (query, label, other token) triple of the realizable samples.

    ``graphs`` replaces the priority graphs (controls C1/C2 of the spec pass a wrong grouping);
    by default they are `priority_graphs` of the data.
    """
    if graphs is None:
        graphs = priority_graphs(data.sequences, data.labels, data.num_tokens)
    missing = sorted(set(data.queries) - set(graphs))
    if missing:
        raise ValueError(f"graphs: no priority graph for query token {missing[0]}")
    E, d = data.embeddings, data.dim
    margin, equal = [], []
    for triple in sorted(priority_triples(data.sequences, data.labels, data.num_tokens)):
        k, y, j = triple
        (equal if graphs[k].same_component(y, j) else margin).append(triple)
    A_in = np.array([_row(E, *t) for t in margin]).reshape(len(margin), d * d)
    A_eq = np.array([_row(E, *t) for t in equal]).reshape(len(equal), d * d)
    return GraphSVMRows(A_in, A_eq, tuple(margin), tuple(equal))


@dataclass(frozen=True, eq=False)
class GraphSVM:
    """The graph-SVM's outcome: W (d×d) when ``status == "optimal"``, else the reason.

    ``vacuous``: no margin row exists (every edge stays inside an SCC), so W_svm = 0 and the
    direction is undefined (spec §6.5).
    """

    status: str
    W: np.ndarray | None
    rows: GraphSVMRows
    solution: EqualityQPSolution

    @property
    def ok(self) -> bool:
        return self.status == "optimal"

    @property
    def certificate(self) -> Certificate | None:
        return self.solution.certificate

    @property
    def reason(self) -> str:
        return self.solution.reason

    @property
    def vacuous(self) -> bool:
        return len(self.rows.margin_triples) == 0

    @property
    def direction(self) -> np.ndarray:
        if self.W is None:
            raise ValueError(f"no W_svm (status {self.status}): {self.reason}")
        norm = np.linalg.norm(self.W)
        if norm == 0:
            raise ValueError("W_svm = 0 (no edge leaves an SCC): its direction is undefined")
        return self.W / norm


def graph_svm(
    data: NTPData, *, graphs: dict[int, PriorityGraph] | None = None, tol: float = KKT_TOL
) -> GraphSVM:
    """W_svm of a realizable instance, KKT-certified to ``tol``; never raises for infeasibility
    (status "infeasible", with the Farkas pair in ``solution``) or solver failure."""
    for i, ok in enumerate(data.realizable):
        if not ok:
            raise ValueError(
                f"labels[{i}]: token {data.labels[i]} does not occur in sequence {i}; "
                "the graph-SVM needs realizable labels"
            )
    rows = graph_svm_rows(data, graphs)
    sol = solve_equality_qp(rows.A_in, rows.A_eq, tol=tol)
    W = None if sol.w is None else sol.w.reshape(data.dim, data.dim)
    return GraphSVM(sol.status, W, rows, sol)


def graph_svm_of(embeddings, sequences, labels, *, tol: float = KKT_TOL) -> GraphSVM:
    """Validate the inputs (``models.ntp.data.ntp_data``) and solve."""
    return graph_svm(ntp_data(embeddings, sequences, labels), tol=tol)


def cyclic_subspace(data: NTPData) -> np.ndarray:
    """Orthonormal basis (p × d²) of S_cyc = span{(x_a − x_b) x_kᵀ : a, b in one SCC of G^(k)}
    over the queries k of the data (spec §1.2), row-major vec; p = 0 when every graph is
    acyclic. Spanned by consecutive members' differences of each SCC (the official code
    centres and runs Gram–Schmidt: the same span)."""
    graphs = priority_graphs(data.sequences, data.labels, data.num_tokens)
    E, d = data.embeddings, data.dim
    rows = [
        _row(E, k, a, b)
        for k, g in graphs.items()
        for comp in g.cyclic_components
        for a, b in zip(sorted(comp), sorted(comp)[1:], strict=False)
    ]
    return orthonormal_rows(np.array(rows).reshape(len(rows), d * d))
