"""Support tokens and locally-optimal selections (Def. 2 of arXiv 2306.13596, spec §1.5).

α ∈ [T]^n is locally optimal iff ATT-SVM(α) is feasible and every support token t of α_i
(a token whose ATT-SVM constraint is tight) scores strictly below α_i. Strictness matters: a
tie is not locally optimal (Fig. 1(a)), and GD does not converge to it. Every verdict here
rests on a certified SVM answer; an undecided SVM never yields "locally optimal".
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field

import numpy as np

from models.oracles.svm import SVMSolution, as_float_array, as_index_array, att_svm

#: A score gap at most this times max(1, max|γ_i|) is a tie, which is not locally optimal.
TIE_TOL = 1e-12


class UndecidedError(RuntimeError):
    """An enumeration met an α whose ATT-SVM could not be certified either way."""


@dataclass(frozen=True, eq=False)
class LocalOptimality:
    """Def. 2 verdict for one α, with the evidence behind it.

    ``feasible`` is True only for a certified ATT-SVM(α) optimum; ``svm.status`` tells
    "infeasible" apart from an undecided solve. ``violations`` lists (i, t, gap) for support
    tokens with gap = γ_{iα_i} − γ_it at or below the tie tolerance. ``vacuous_inputs`` have no
    support token, so Def. 2 puts no score condition on them (possible when n ≥ 2).
    """

    feasible: bool
    locally_optimal: bool
    svm: SVMSolution
    support: list[np.ndarray] = field(default_factory=list)
    violations: list[tuple[int, int, float]] = field(default_factory=list)
    vacuous_inputs: tuple[int, ...] = ()
    reason: str = ""


def _keys_and_alpha(keys, alpha) -> tuple[np.ndarray, np.ndarray]:
    keys = as_float_array(keys, "keys", 3)
    return keys, as_index_array(alpha, "alpha", (keys.shape[0],), keys.shape[1])


def _scores(scores, shape: tuple[int, int]) -> np.ndarray:
    scores = as_float_array(scores, "scores", 2)
    if scores.shape != shape:
        raise ValueError(f"scores: shape {scores.shape} does not match keys' (n, T) = {shape}")
    return scores


def token_margins(keys, alpha, p) -> np.ndarray:
    """(n, T) array of (k_{iα_i} − k_it)ᵀ p; the α_i entries are 0."""
    keys, alpha = _keys_and_alpha(keys, alpha)
    p = as_float_array(p, "p", 1)
    if p.shape != keys.shape[2:]:
        raise ValueError(f"p: length {p.size} does not match the key dimension {keys.shape[2]}")
    logits = keys @ p
    return logits[np.arange(keys.shape[0]), alpha][:, None] - logits


def support_sets(keys, alpha, sol: SVMSolution | None = None, *, tol: float = 1e-6):
    """Per input, the tokens t ≠ α_i whose ATT-SVM(α) constraint is tight: margin ≤ 1 + tol.

    Margins are evaluated for every token from the keys, so duplicated tokens (deduplicated in
    the SVM's rows) are all reported. ``sol`` must be a certified ATT-SVM(α) solution.
    """
    keys, alpha = _keys_and_alpha(keys, alpha)
    sol = att_svm(keys, alpha) if sol is None else sol
    if not sol.ok:
        raise ValueError(f"sol: support sets need a certified ATT-SVM(α), got {sol.status}")
    margins = token_margins(keys, alpha, sol.x)
    others = np.arange(keys.shape[1])[None, :] != alpha[:, None]
    return [np.flatnonzero(row) for row in (margins <= 1.0 + tol) & others]


def _violations(scores: np.ndarray, alpha: np.ndarray, support) -> list[tuple[int, int, float]]:
    """(i, t, gap) for every support token that ties with or beats α_i."""
    found = []
    for i, tokens in enumerate(support):
        tie = TIE_TOL * max(1.0, float(np.abs(scores[i]).max()))
        for t in tokens:
            gap = float(scores[i, alpha[i]] - scores[i, t])
            if gap <= tie:
                found.append((i, int(t), gap))
    return found


def local_optimality(keys, scores, alpha, *, tol: float = 1e-6) -> LocalOptimality:
    """Def. 2: is α locally optimal for these keys (n, T, dk) and scores (n, T)?"""
    keys, alpha = _keys_and_alpha(keys, alpha)
    scores = _scores(scores, keys.shape[:2])
    sol = att_svm(keys, alpha)
    if not sol.ok:
        verdict = "ATT-SVM(α) is infeasible" if sol.status == "infeasible" else "undecided"
        reason = f"{verdict}: status {sol.status} ({sol.reason})"
        return LocalOptimality(False, False, sol, reason=reason)
    return _judged(sol, support_sets(keys, alpha, sol, tol=tol), scores, alpha, "support")


def _judged(sol, support, scores, alpha, what: str) -> LocalOptimality:
    """Def. 2's verdict from a certified SVM's support sets: locally optimal iff no support
    token scores at least as high as α_i (``what`` names the support in the reason)."""
    violations = _violations(scores, alpha, support)
    vacuous = tuple(i for i, tokens in enumerate(support) if tokens.size == 0)
    if violations:
        listed = ", ".join(f"(i={i}, t={t}, gap={g:.3g})" for i, t, g in violations)
        reason = f"{what} tokens score at least as high as α_i: {listed}"
    else:
        reason = f"every {what} token scores strictly below α_i"
    return LocalOptimality(True, not violations, sol, support, violations, vacuous, reason)


def global_opt(scores) -> np.ndarray:
    """opt_i = argmax_t γ_it (the first maximiser on ties; see has_unique_opt)."""
    return np.argmax(as_float_array(scores, "scores", 2), axis=1)


def has_unique_opt(scores, tol: float = 1e-12) -> bool:
    """True iff every input's top score beats its runner-up by more than tol·max(1, max|γ_i|)."""
    scores = as_float_array(scores, "scores", 2)
    if scores.shape[1] < 2:
        return True
    top_two = np.sort(scores, axis=1)[:, -2:]
    scale = np.maximum(1.0, np.abs(scores).max(axis=1))
    return bool((top_two[:, 1] - top_two[:, 0] > tol * scale).all())


def enumerate_locally_optimal(
    keys, scores, *, limit: int = 4096, tol: float = 1e-6
) -> list[tuple[int, ...]]:
    """All locally-optimal α ∈ [T]^n, in lexicographic order (brute force, small n and T).

    Raises UndecidedError if some α's ATT-SVM could not be certified: the list would then be
    incomplete, and a silent omission could pass for a negative verdict.
    """
    keys = as_float_array(keys, "keys", 3)
    n, T = keys.shape[:2]
    scores = _scores(scores, (n, T))
    if T**n > limit:
        raise ValueError(f"limit: T**n = {T**n} candidates exceed limit={limit}")
    found = []
    for alpha in itertools.product(range(T), repeat=n):
        verdict = local_optimality(keys, scores, np.array(alpha), tol=tol)
        if verdict.svm.status in ("inaccurate", "solver_error"):
            raise UndecidedError(f"α={alpha}: {verdict.reason}")
        if verdict.locally_optimal:
            found.append(alpha)
    return found


def norm_local_optimality(X, Z, scores, alpha, sol, *, tol: float = 1e-6) -> LocalOptimality:
    """Def. 2 with the attention SVM of another norm (spec tfsvm §2.8 "nuclear-locally-optimal"):
    α is locally optimal for ``sol``, a certified ``models.oracles.normsvm.norm_svm(X, Z, α, norm)``
    answer, iff every support token of ``sol`` (constraint value ≤ 1 + tol) scores strictly
    below α_i. Where the optimum is not unique (the nuclear norm, spec F8) the support is that
    of the solver's point: an interior-point solver returns the relative interior of the optimal
    face, whose tight constraints are those tight at every optimum."""
    X = as_float_array(X, "X", 3)
    alpha = as_index_array(alpha, "alpha", (X.shape[0],), X.shape[1])
    scores = _scores(scores, X.shape[:2])
    if not sol.ok:
        reason = f"the {sol.norm} SVM of α is {sol.status} ({sol.reason})"
        return LocalOptimality(False, False, sol, reason=reason)
    return _judged(sol, sol.support(X, Z, alpha, tol), scores, alpha, f"{sol.norm} support")
