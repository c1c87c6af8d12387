"""Smaller instances inside an instance: the size-first shrinking of a counterexample.

Hypothesis shrinks the choices it made, and a counterexample drawn with n = 3 inputs of
T = 6 tokens often stays that size: lowering T moves every later draw, so the shrinker
rarely finds the smaller instance a reader would build by hand. A *reduction* is that
smaller instance: the same data with one input left out, or one token left out of every
input. ``reductions_of(inst)`` lists the reductions of an instance whose premises they
provably keep; the framework (theorems.framework.shrink) decides the claim again on them and
keeps the smallest counterexample.

A DECOUPLED prompt instance (keys and scores apart) also loses a key coordinate: d shrinks
too, and its scores stay the same bit for bit.

What a reduction keeps. Tokens α_i and opt_i (the selection and each input's top-score
token) are never left out, and every input keeps at least two tokens. Each assumption the
instance carries (strategies.instances.ASSUMPTIONS) either survives any such deletion
(``KEPT``: a structure per token, or a property of a subset: fewer constraints keep an SVM
feasible, a subset of independent vectors is independent, the runner-up gap can only grow),
or is decided again on the reduced instance (``CHECKED``: local optimality, infeasibility,
a non-global α, distinct scores). An instance with any other assumption (a paper's exact
instance, a cone start around p^mm(α), which moves with the data) has no reductions; nor has
one whose ``meta`` holds an entry with no known meaning under deletion (``META``), since the
claim's body may read it; entries derived from the data (``DERIVED``: an SVM solution, its
support) are left out instead. Embedding instances have none: their assumptions are statements
about the whole corpus.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from models.oracles.selection import local_optimality
from models.oracles.svm import att_svm
from strategies.instances import (
    ARBITRARY_P0,
    DECOUPLED,
    DISTINCT_SCORES,
    EQUAL_NONOPT_SCORES,
    INDEPENDENT_QUERIES,
    INDEPENDENT_TOKENS,
    LOCALLY_OPTIMAL_ALPHA,
    NON_GLOBAL_ALPHA,
    OFFICIAL_CROSS,
    PRESCRIBED_SCORES,
    SVM_FEASIBLE,
    SVM_INFEASIBLE,
    UNIQUE_OPT,
    CrossInstance,
    PromptInstance,
)

Instance = PromptInstance | CrossInstance

#: Assumptions every reduction keeps.
KEPT = frozenset(
    {
        DECOUPLED,
        UNIQUE_OPT,
        EQUAL_NONOPT_SCORES,
        SVM_FEASIBLE,
        ARBITRARY_P0,
        OFFICIAL_CROSS,
        PRESCRIBED_SCORES,
        INDEPENDENT_QUERIES,
        INDEPENDENT_TOKENS,
    }
)


def _feasible(inst: Instance) -> bool:
    return bool(att_svm(_keys(inst), np.asarray(inst.alpha)).ok)


def _scores(inst: Instance) -> np.ndarray:
    return inst.scores.numpy() if isinstance(inst.scores, torch.Tensor) else np.asarray(inst.scores)


def _keys(inst: Instance):
    return inst.keys if isinstance(inst, PromptInstance) else inst.problem.prompt.keys


def _top(inst: Instance) -> np.ndarray:
    return np.argmax(_scores(inst), axis=1)


def _locally_optimal(inst: Instance) -> bool:
    return bool(local_optimality(_keys(inst), _scores(inst), inst.alpha).locally_optimal)


def _infeasible(inst: Instance) -> bool:
    sol = att_svm(_keys(inst), np.asarray(inst.alpha))
    return sol.status == "infeasible"


def _non_global(inst: Instance) -> bool:
    return bool(np.any(np.asarray(inst.alpha) != _top(inst)))


def _distinct(inst: Instance) -> bool:
    s = _scores(inst)
    return bool(np.all(s.max(axis=1) > s.min(axis=1)))


#: Assumptions decided again on the reduced instance (SVM_FEASIBLE only where a key coordinate
#: is left out: fewer dimensions can make the SVM infeasible, fewer constraints cannot).
CHECKED: dict[str, Callable[[Instance], bool]] = {
    SVM_FEASIBLE: _feasible,
    LOCALLY_OPTIMAL_ALPHA: _locally_optimal,
    SVM_INFEASIBLE: _infeasible,
    NON_GLOBAL_ALPHA: _non_global,
    DISTINCT_SCORES: _distinct,
}


@dataclass(frozen=True)
class _Keep:
    """The reduced instance's input j, token t is the original's input rows[j], token
    cols[j, t]."""

    rows: np.ndarray  # (n',)
    cols: np.ndarray  # (n', T')

    def tokens(self, a):
        arr = a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        out = arr[self.rows[:, None], self.cols]
        return torch.from_numpy(np.ascontiguousarray(out)) if isinstance(a, torch.Tensor) else out

    def inputs(self, a):
        arr = a.numpy() if isinstance(a, torch.Tensor) else np.asarray(a)
        out = arr[self.rows]
        return torch.from_numpy(np.ascontiguousarray(out)) if isinstance(a, torch.Tensor) else out

    def selection(self, sel):
        s = np.asarray(sel, dtype=np.int64)[self.rows]
        out = np.array([int(np.flatnonzero(self.cols[j] == s[j])[0]) for j in range(s.size)])
        return out


#: Meta entries with a known meaning under deletion: rule (keep, value) -> new value. Any
#: other entry makes the instance irreducible (the body may read it).
META: dict[str, Callable[[_Keep, Any], Any]] = {
    "g": lambda k, v: k.tokens(v),
    "k": lambda k, v: k.tokens(v),
    "noise": lambda k, v: k.tokens(v),
    "opt": lambda k, v: k.selection(v),
    "min_gap": lambda k, v: v,
    "p0_norm": lambda k, v: v,
    "method": lambda k, v: v,
    "variant": lambda k, v: v,
    "sigma": lambda k, v: v,
}


#: Meta entries derived from the data (an SVM solution, its support, its margins): left out of a
#: reduced instance, whose data they no longer describe. A body that reads one then fails with
#: an error on the reduction, which is therefore not taken.
DERIVED = frozenset({"p_mm", "support", "margin", "margin_gap", "vacuous_inputs"})


@dataclass(frozen=True)
class Reduction:
    """A smaller instance inside ``parent``: ``what`` was left out."""

    what: str
    instance: Instance


def sizes(inst: Any) -> dict[str, int]:
    """The sizes a reduction lowers (n, T) and d, for reports; {} for another object."""
    if not isinstance(inst, PromptInstance | CrossInstance):
        return {}
    return {"n": int(inst.n), "T": int(inst.T), "d": int(inst.d)}


def reducible(inst: Any) -> bool:
    """Whether ``inst`` is of a family with reductions and every assumption and meta entry it
    carries has a known meaning under deletion."""
    return (
        isinstance(inst, PromptInstance | CrossInstance)
        and inst.alpha is not None
        and inst.assumptions <= KEPT | set(CHECKED)
        and set(inst.meta) <= set(META) | DERIVED
    )


def _checked(inst: Instance, reduced: Instance, kept: frozenset[str]) -> bool:
    return all(CHECKED[a](reduced) for a in inst.assumptions - kept if a in CHECKED)


def _build(inst: Instance, keep: _Keep) -> Instance | None:
    meta = {key: rule(keep, inst.meta[key]) for key, rule in META.items() if key in inst.meta}
    fields: dict[str, Any] = {
        "X": keep.tokens(inst.X),
        "y": keep.inputs(inst.y),
        "alpha": keep.selection(inst.alpha),
        "meta": meta,
    }
    if isinstance(inst, CrossInstance):
        fields["Z"] = keep.inputs(inst.Z)
    try:
        reduced = dataclasses.replace(inst, **fields)
    except (ValueError, TypeError):
        return None
    return reduced if _checked(inst, reduced, KEPT) else None


#: What leaving out a key coordinate of a DECOUPLED instance keeps: the scores, bit for bit.
KEPT_BY_COORDINATES = frozenset({DECOUPLED, UNIQUE_OPT, EQUAL_NONOPT_SCORES, ARBITRARY_P0})


def _without_coordinate(inst: PromptInstance, j: int) -> PromptInstance | None:
    """A DECOUPLED prompt instance (x = [k; Y g], v = e_d, W = diag(I, 0)) with key coordinate
    j left out of the tokens, v, W, p0 and meta["k"]; the scores do not change."""
    keep = [c for c in range(inst.d) if c != j]
    meta = {key: value for key, value in inst.meta.items() if key not in DERIVED}
    if "k" in meta:
        k = meta["k"]
        meta["k"] = k[..., [c for c in range(k.shape[-1]) if c != j]]
    try:
        reduced = dataclasses.replace(
            inst,
            X=inst.X[..., keep],
            v=inst.v[keep],
            W=inst.W[keep][:, keep],
            p0=None if inst.p0 is None else inst.p0[keep],
            meta=meta,
        )
    except (ValueError, TypeError):
        return None
    return reduced if _checked(inst, reduced, KEPT_BY_COORDINATES) else None


def reductions_of(inst: Any) -> list[Reduction]:
    """The reductions of ``inst`` that keep its premises: each input left out (n ≥ 2), then,
    for each rank r, the r-th droppable token (neither α_i nor opt_i) left out of every input
    (T ≥ 3), then, for a DECOUPLED prompt instance, each key coordinate left out (while one
    remains). [] where ``reducible`` is False."""
    if not reducible(inst):
        return []
    n, T = int(inst.n), int(inst.T)
    alpha, top = np.asarray(inst.alpha, dtype=np.int64), _top(inst)
    every = np.broadcast_to(np.arange(T), (n, T))
    out = []
    for i in range(n) if n >= 2 else ():
        rows = np.array([j for j in range(n) if j != i])
        reduced = _build(inst, _Keep(rows, every[rows].copy()))
        if reduced is not None:
            out.append(Reduction(f"input {i} left out", reduced))
    droppable = [[t for t in range(T) if t not in (alpha[i], top[i])] for i in range(n)]
    ranks = min(len(d) for d in droppable) if T >= 3 else 0
    for r in range(ranks):
        cols = np.array([[t for t in range(T) if t != droppable[i][r]] for i in range(n)])
        reduced = _build(inst, _Keep(np.arange(n), cols))
        if reduced is not None:
            out.append(Reduction(f"token rank {r} left out of every input", reduced))
    coordinates = KEPT_BY_COORDINATES | set(CHECKED)
    if isinstance(inst, PromptInstance) and DECOUPLED in inst.assumptions <= coordinates:
        for j in range(inst.d - 1) if inst.d >= 3 else ():
            reduced = _without_coordinate(inst, j)
            if reduced is not None:
                out.append(Reduction(f"key coordinate {j} left out", reduced))
    return out
