"""What the ATT-SVM claims and the controls of 2306.13596 share (claims_svm, claims_controls,
and the strategies of ``strategies.maxmargin_families``): Def. 2 judged from first principles
(``def2_independent``, on Lawson–Hanson least-distance NNLS), and the settled limit of a flow
as the controls read it (``settled``)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.optimize import nnls

from strategies.instances import PromptInstance
from theorems import evidence
from theorems.limits import Limit, record_outcome, settle

#: Def. 2's support tokens: margin (k_iα − k_it)ᵀp^mm ≤ 1 + SUPPORT_TOL (spec §6 "SVM" row).
SUPPORT_TOL = 1e-6
#: Margins in (1 + SUPPORT_TOL/10, 1 + 10·SUPPORT_TOL] are too close to the cut to compare two
#: solvers' support sets (their p^mm agree to ~1e-9, MM-SVM-UNIQUE): such an example is
#: inconclusive rather than a disagreement.
AMBIGUOUS_BAND = (1.0 + SUPPORT_TOL / 10, 1.0 + 10 * SUPPORT_TOL)


def least_distance_nnls(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """min ½‖x‖² s.t. Ax ≥ b by Lawson–Hanson least-distance programming (one NNLS):
    u = argmin_{u≥0} ‖Aᵀu‖² + (bᵀu − 1)², x = Aᵀu/(1 − bᵀu). An independent algorithm."""
    return least_distance_with_duals(A, b)[0]


def least_distance_with_duals(A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``least_distance_nnls``'s x with its multipliers λ = u/(1 − bᵀu) (x = Aᵀλ)."""
    E = np.vstack([A.T, b[None, :]])
    f = np.zeros(A.shape[1] + 1)
    f[-1] = 1.0
    u = nnls(E, f, maxiter=50 * E.shape[1])[0]
    lam = u / (1.0 - float(b @ u))
    return A.T @ lam, lam


#: The bound of ``kkt_distance``, said once for every slack that uses it.
KKT_DISTANCE_DERIVATION = (
    "two certified solutions of min ½‖x‖² s.t. Ax ≥ 1 are each near the unique optimum x*: for a "
    "point x with multipliers λ, r = x − Aᵀλ, s = Ax − 1, ε = max(0, −min s), strong convexity "
    "gives ‖x*‖² ≥ ‖x‖² + 2xᵀ(x* − x) + δ² (δ = ‖x − x*‖), xᵀ(x* − x) = λᵀ(Ax* − 1) − λᵀs + "
    "rᵀ(x* − x) ≥ −λᵀs − Σ_{λ_j<0}|λ_j|(‖A_j‖N + 1) − ‖r‖δ, and x/(1 − ε) is feasible, so ‖x*‖ ≤ "
    "N = ‖x‖/(1 − ε) and ‖x*‖² − ‖x‖² ≤ 2εN²: δ ≤ ‖r‖ + √(‖r‖² + 2(λᵀs + neg + εN²)); "
    "evaluated per example on both points' own residuals (each on the same rows), formed in "
    "extended precision, plus their rounding, (d + m + 2)·u'·(‖x‖ + Σ|λ_j|‖A_j‖) on r and on "
    "each s_j (u' = 2⁻⁶⁴; 2⁻⁵³ where numpy's longdouble is float64, and then the bound is ~5× "
    "wider); "
    "the two solutions are at most the sum apart. Its √ is the honest modulus of a certificate "
    "(a residual of 1e-16 allows ~1e-8), far above the 1e-15 two polished solves agree to, "
    "and far below the O(1) relative distance of another selection's or another problem's SVM."
)


def kkt_distance(A: np.ndarray, x: np.ndarray, lam: np.ndarray) -> float:
    """A rigorous bound on ‖x − x*‖, x* the optimum of min ½‖x‖² s.t. Ax ≥ 1, from the KKT
    residuals of (x, λ) (KKT_DISTANCE_DERIVATION); inf when the point is too infeasible."""
    # The residuals of the float64 data are formed in extended precision (x87 80-bit where
    # numpy has it), so their own rounding stays far below the residuals they measure.
    A, x, lam = (np.asarray(a, dtype=np.longdouble) for a in (A, x, lam))
    m, d = A.shape
    u = float(np.finfo(np.longdouble).eps) / 2
    row_norms = np.sqrt((A * A).sum(axis=1))
    weight = float(np.sqrt(x @ x)) + float(np.abs(lam) @ row_norms)
    rounding = (d + m + 2) * u * (weight + 1.0)
    s = A @ x - 1
    eps = max(0.0, -float(s.min(initial=0.0))) + rounding
    if eps >= 0.5:
        return math.inf
    N = float(np.sqrt(x @ x)) / (1.0 - eps)
    res = x - A.T @ lam
    r = float(np.sqrt(res @ res)) + rounding
    comp = float(lam @ s) + rounding * float(np.abs(lam).sum())
    neg = float(np.abs(np.minimum(lam, 0)) @ (row_norms * N + 1))
    return r + math.sqrt(r * r + 2.0 * max(0.0, comp + neg + eps * N * N))


@dataclasses.dataclass(frozen=True)
class Def2:
    """Def. 2 judged from first principles (no models.oracles.selection, no models.oracles.svm)."""

    locally_optimal: bool
    support: list[set[int]]
    violations: set[tuple[int, int]]
    ambiguous: bool


def def2_independent(inst: PromptInstance) -> Def2:
    """Def. 2 for inst.alpha: p^mm(α) by Lawson–Hanson least-distance NNLS on rows built here
    from the keys, support tokens = margin ≤ 1 + SUPPORT_TOL, strictness by exact comparison
    γ_iα_i > γ_it. Rejects the example if ATT-SVM(α) is infeasible (the NNLS point misses
    a constraint)."""
    keys, g, alpha = inst.keys.numpy(), inst.scores.numpy(), np.asarray(inst.alpha)
    n, T, _ = keys.shape
    pairs = [(i, t) for i in range(n) for t in range(T) if t != alpha[i]]
    A = np.array([keys[i, alpha[i]] - keys[i, t] for i, t in pairs])
    p = least_distance_nnls(A, np.ones(len(pairs)))
    margins = A @ p
    if not np.isfinite(margins).all() or margins.min() < 1 - 1e-9:
        evidence.reject("ATT-SVM(α) infeasible (NNLS point misses a constraint)")
    support: list[set[int]] = [set() for _ in range(n)]
    for (i, t), m in zip(pairs, margins, strict=True):
        if m <= 1 + SUPPORT_TOL:
            support[i].add(t)
    violations = {(i, t) for i in range(n) for t in support[i] if not g[i, alpha[i]] > g[i, t]}
    lo, hi = AMBIGUOUS_BAND
    ambiguous = bool(((margins > lo) & (margins <= hi)).any())
    return Def2(not violations, support, violations, ambiguous)


def settled(problem, p0) -> Limit:
    """Where gradient flow from ``p0`` goes, as the controls read it: ``settle`` (converge,
    confirmed over two decades of ‖p‖), recorded; a run the engine leaves inconclusive, or
    that reaches a selection with an infeasible ATT-SVM, ends the example as inconclusive.
    What is left is returned as a `Limit` whose ``converged_to`` / ``why_not`` /
    ``loss_gap`` the claim asserts."""
    out, transient = settle(problem, p0)
    record_outcome(out, transient)
    if out.status in ("inconclusive", "infeasible"):  # no direction to test
        evidence.inconclusive(out.reason)
    return Limit("converged", out, transient)
