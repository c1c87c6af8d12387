"""The finite component W_fin of 2403.08081 and its log-odds bridge (spec ntp.md §1.2, §2.4).

The reduced sample of sample i (query k, label y) keeps the positions whose token lies in y's
SCC of G^(k), with the query unchanged; W_fin minimises the reduced loss (normalised by the
full n, as the official ``train_Wfin``) over S_cyc. It is unique and attained: every member a
of an SCC C has an edge a → j' inside C, so the reduced logit differences probe all of S_cyc
and the loss is strictly convex there. We run damped Newton on an orthonormal basis of S_cyc
from 0 to gradient norm ≤ 1e-12 (the official NGD stalls near lr/2, spec §2.10).

The log-odds bridge (§2.4): where every sample with query k and label in C holds the same
multiset of C's tokens, the optimum makes the in-C attention split equal the label
frequencies, so (x_a − x_b)ᵀ W_fin x_k = log(n_a/n_b) − log(c_a/c_b) (c the multiplicities;
0 for distinct tokens), and W_fin is the unique solution of that linear system inside S_cyc.
`log_odds_check` solves it independently of Newton and reports the distance.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from models.ntp.attention import NTPAttention, sample_table
from models.ntp.data import NTPData
from models.ntp.graph import priority_graphs
from models.ntp.svm import cyclic_subspace
from models.numerics import failures

#: Newton stops at this gradient norm (spec §2.4 / §6.2: "gradient ≤ 1e-12").
GRADIENT_TOL = 1e-12
#: Log-odds system residual below which the bridge applies (spec §6.2: lstsq residual ≤ 1e-9).
LOG_ODDS_TOL = 1e-9
MAX_NEWTON_STEPS = 100


def reduced_samples(data: NTPData) -> tuple[list[tuple[int, ...]], list[int], list[int]]:
    """(sequences, labels, queries) of the reduced samples, one per realizable sample."""
    graphs = priority_graphs(data.sequences, data.labels, data.num_tokens)
    seqs, labels, queries = [], [], []
    for seq, y in zip(data.sequences, data.labels, strict=True):
        if y not in seq:
            raise ValueError(f"labels: token {y} not in {list(seq)}; W_fin needs realizable labels")
        g = graphs[seq[-1]]
        seqs.append(tuple(t for t in seq if g.same_component(t, y)))
        labels.append(y)
        queries.append(seq[-1])
    return seqs, labels, queries


def reduced_model(data: NTPData) -> NTPAttention:
    """The reduced loss of spec §1.2 as an `NTPAttention` (normaliser: the full n)."""
    seqs, labels, queries = reduced_samples(data)
    return NTPAttention(data.embeddings, sample_table(seqs, labels, queries), float(data.n))


@dataclass(frozen=True, eq=False)
class FiniteComponent:
    """W_fin with its evidence: the reduced loss L* there, the gradient norm on S_cyc, and
    ``converged`` (gradient norm ≤ GRADIENT_TOL); ``reason`` says how Newton ended."""

    W: np.ndarray
    basis: np.ndarray
    loss: float
    gradient_norm: float
    converged: bool
    steps: int
    reason: str


def _design(model: NTPAttention, basis: np.ndarray) -> np.ndarray:
    """D (n, m, p): the logit of sample i's token v is D_iv · θ for W = Σ θ_j basis_j."""
    E, t = model.embeddings, model.table
    outer = np.einsum("imd,ie->imde", E[t.tokens], E[t.query]).reshape(t.n, t.tokens.shape[1], -1)
    return outer @ basis.T


def _value_grad_hess(D, table, normalizer, theta):
    """Reduced loss, gradient and Hessian in θ (log-space softmax; padding has −inf counts)."""
    scores = D @ theta + table.log_count
    lse = logsumexp(scores, axis=1)
    rows = np.arange(table.n)
    value = float((lse - scores[rows, table.label_slot]).sum() / normalizer)
    s = np.exp(scores - lse[:, None])
    g = s.copy()
    g[rows, table.label_slot] -= 1.0
    grad = np.einsum("im,imp->p", g, D) / normalizer
    Ds = np.einsum("im,imp->ip", s, D)
    hess = (np.einsum("im,imp,imq->pq", s, D, D) - Ds.T @ Ds) / normalizer
    return value, grad, hess


def finite_component(data: NTPData, *, tol: float = GRADIENT_TOL) -> FiniteComponent:
    """W_fin = argmin over S_cyc of the reduced loss, by damped Newton from 0."""
    basis = cyclic_subspace(data)
    model = reduced_model(data)
    d = data.dim
    if basis.shape[0] == 0:  # acyclic: S_cyc = {0}, every reduced sample is its label alone
        loss = model.loss(np.zeros((d, d)))
        return FiniteComponent(np.zeros((d, d)), basis, loss, 0.0, True, 0, "S_cyc = {0}")
    D = _design(model, basis)
    theta = np.zeros(basis.shape[0])
    value, grad, hess = _value_grad_hess(D, model.table, model.normalizer, theta)
    reason = f"no convergence in {MAX_NEWTON_STEPS} Newton steps"
    steps = 0
    for steps in range(1, MAX_NEWTON_STEPS + 1):
        if np.linalg.norm(grad) <= tol:
            reason = "gradient norm reached"
            steps -= 1
            break
        step = np.linalg.lstsq(hess, -grad, rcond=None)[0]
        theta, value, grad, hess, accepted = _backtrack(D, model, theta, value, grad, step)
        if not accepted:
            reason = "line search stalled (rounding floor)"
            break
    norm = float(np.linalg.norm(grad))
    W = (basis.T @ theta).reshape(d, d)
    if norm > tol:  # a machinery failure: the example that met it is inconclusive
        failures.report(failures.NUMERICS, "W_fin Newton not converged", f"{reason}, {norm:.2e}")
    return FiniteComponent(W, basis, model.loss(W), norm, norm <= tol, steps, reason)


def _backtrack(D, model, theta, value, grad, step):
    """Armijo backtracking; a step that does not decrease the loss but shrinks the gradient is
    taken too (near the optimum the loss changes below its rounding)."""
    slope = float(grad @ step)
    t = 1.0
    for _ in range(60):
        cand = theta + t * step
        v, g, h = _value_grad_hess(D, model.table, model.normalizer, cand)
        if v <= value + 1e-4 * t * slope or np.linalg.norm(g) < np.linalg.norm(grad):
            return cand, v, g, h, True
        t /= 2
    return theta, value, grad, None, False


def limiting_shares(data: NTPData, fin: FiniteComponent | None = None) -> list[dict[int, float]]:
    """Per sample, the attention split inside its label's SCC at W_fin (token → share, summing
    to 1): the limit of the split along GD (NTP-COMP, spec §2.7), since the diverging part
    W_svm gives the members of one SCC equal logits."""
    fin = finite_component(data) if fin is None else fin
    model = reduced_model(data)
    mass = model.attention_mass(fin.W)
    live = np.isfinite(model.table.log_count)
    return [
        dict(zip(tokens[keep].tolist(), shares[keep].tolist(), strict=True))
        for tokens, shares, keep in zip(model.table.tokens, mass, live, strict=True)
    ]


@dataclass(frozen=True, eq=False)
class LogOddsCheck:
    """The log-odds system of §2.4 and its solution in S_cyc, when the bridge applies.

    ``applies``: every (query, cyclic SCC) group has one multiset of its tokens per sample and
    the system is consistent (residual ≤ LOG_ODDS_TOL); ``reason`` says which failed.
    """

    applies: bool
    W: np.ndarray | None
    residual: float
    reason: str


def log_odds_system(data: NTPData) -> tuple[np.ndarray, np.ndarray] | str:
    """(rows, targets) with rows vec((x_a − x_b) x_kᵀ) and targets log(n_a/n_b) − log(c_a/c_b)
    over each cyclic SCC C of each G^(k) (b C's smallest token); or why it does not apply."""
    graphs = priority_graphs(data.sequences, data.labels, data.num_tokens)
    E = data.embeddings
    groups: dict[tuple[int, frozenset], list] = defaultdict(list)
    for seq, y in zip(data.sequences, data.labels, strict=True):
        k = seq[-1]
        comp = graphs[k].components[graphs[k].component_of[y]]
        if len(comp) > 1:
            groups[(k, comp)].append((y, Counter(t for t in seq if t in comp)))
    rows, targets = [], []
    for (k, comp), samples in sorted(groups.items(), key=lambda kv: (kv[0][0], min(kv[0][1]))):
        counts = samples[0][1]
        if set(counts) != comp or any(c != counts for _, c in samples):
            return f"query {k}, SCC {sorted(comp)}: not every sample holds the same tokens of it"
        labels = Counter(y for y, _ in samples)
        b = min(comp)
        for a in sorted(comp - {b}):
            rows.append(np.outer(E[a] - E[b], E[k]).ravel())
            targets.append(np.log(labels[a] / labels[b]) - np.log(counts[a] / counts[b]))
    d2 = data.dim**2
    return np.array(rows).reshape(len(rows), d2), np.array(targets)


def log_odds_check(data: NTPData) -> LogOddsCheck:
    """Solve the log-odds system inside S_cyc (min-norm least squares) and report whether the
    bridge applies; compare its W with `finite_component`'s to certify W_fin a second way."""
    system = log_odds_system(data)
    if isinstance(system, str):
        return LogOddsCheck(False, None, np.nan, system)
    A, r = system
    d = data.dim
    if len(r) == 0:
        return LogOddsCheck(True, np.zeros((d, d)), 0.0, "acyclic: no equations, W_fin = 0")
    basis = cyclic_subspace(data)
    theta = np.linalg.lstsq(A @ basis.T, r, rcond=None)[0]
    W = (basis.T @ theta).reshape(d, d)
    residual = float(np.abs(A @ W.ravel() - r).max())
    if residual > LOG_ODDS_TOL:
        reason = f"log-odds system inconsistent on S_cyc (residual {residual:.2e})"
        return LogOddsCheck(False, None, residual, reason)
    return LogOddsCheck(True, W, residual, f"log-odds system solved (residual {residual:.2e})")
