"""The certified margin QP with equality constraints that both NTP SVMs are (spec ntp.md §1.2
graph-SVM, §1.3 NTP-SVM):

    minimize ½‖w‖²   subject to   A_in w ≥ 1,   A_eq w = 0.

Why a projection: with P the orthogonal projector onto null(A_eq), the problem has the same
optimum as the plain margin QP min ½‖w‖² s.t. (A_in P) w ≥ 1 of `models.oracles.svm.solve_margin_qp`
(Lawson–Hanson NNLS first, the LP + Clarabel pipeline as its certified fallback): that
optimum is (A_in P)ᵀλ ∈ null(A_eq), where A_in P w = A_in w, and any feasible w of ours is
feasible there with the same norm. P = I − VᵀV from a thin SVD of the few equality rows (a
full null-space basis costs a d²×d² SVD). The answer is mapped back and certified again here,
in the original coordinates, by `certify_equality`: the KKT conditions w = A_inᵀλ + A_eqᵀν,
λ ≥ 0, A_in w ≥ 1, A_eq w = 0, λ_j(A_in w − 1)_j = 0. They are those of `models.oracles.svm.certify`
for the rows [A_in; A_eq; −A_eq] ≥ [1; 0; 0] with multipliers [λ; ν⁺; ν⁻], which is how they
are computed (one implementation of the residuals).

Infeasibility is certified by a Farkas pair: y ≥ 0 and μ with A_inᵀy + A_eqᵀμ = 0 and 1ᵀy > 0,
since then any feasible w would give 0 = yᵀA_in w + μᵀA_eq w ≥ 1ᵀy > 0.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.numerics import failures
from models.oracles.svm import Certificate, certify, checked_outcome, solve_margin_qp

#: KKT tolerance the issue asks of the NTP oracles (issue 25: "certified KKT residuals ≤ 1e-8").
KKT_TOL = 1e-8


@dataclass(frozen=True, eq=False)
class EqualityQPSolution:
    """Outcome of min ½‖w‖² s.t. A_in w ≥ 1, A_eq w = 0.

    ``status``: "optimal" (w certified with multipliers ``ineq_duals`` λ ≥ 0 and
    ``eq_duals`` ν), "infeasible" (``ineq_duals`` holds the Farkas y ≥ 0 and ``eq_duals`` its
    μ), or a failure ("inaccurate", "solver_error") whose ``reason`` says why; a failure never
    carries a point to be used as an answer.
    """

    status: str
    w: np.ndarray | None
    ineq_duals: np.ndarray | None
    eq_duals: np.ndarray | None
    certificate: Certificate | None
    solver: str
    reason: str

    def __post_init__(self):
        checked_outcome(self.status, self.reason)

    @property
    def ok(self) -> bool:
        return self.status == "optimal"


def project_out(rows: np.ndarray, A: np.ndarray) -> np.ndarray:
    """A with the row space of ``rows`` projected out of each of its rows: A (I − VᵀV)."""
    basis = orthonormal_rows(rows)
    return A - (A @ basis.T) @ basis


def certify_equality(A_in, A_eq, w, lam, nu, *, tol: float = KKT_TOL) -> Certificate:
    """KKT residuals of (w, λ, ν); primal_residual covers both the margins and |A_eq w|."""
    A = np.vstack([A_in, A_eq, -A_eq])
    b = np.concatenate([np.ones(len(A_in)), np.zeros(2 * len(A_eq))])
    duals = np.concatenate([lam, np.maximum(nu, 0.0), np.maximum(-nu, 0.0)])
    return certify(A, b, w, duals, tol=tol)


def _check_rows(A_in, A_eq) -> tuple[np.ndarray, np.ndarray]:
    A_in = np.asarray(A_in, dtype=np.float64)
    A_eq = np.asarray(A_eq, dtype=np.float64)
    if A_in.ndim != 2 or A_eq.ndim != 2 or A_in.shape[1] != A_eq.shape[1]:
        raise ValueError(
            f"A_in/A_eq: expected 2-D with equal widths, got {A_in.shape}/{A_eq.shape}"
        )
    if A_in.shape[1] == 0:
        raise ValueError("A_in: needs at least one column (variable)")
    if not (np.isfinite(A_in).all() and np.isfinite(A_eq).all()):
        raise ValueError("A_in/A_eq: contain NaN or infinity")
    return A_in, A_eq


def solve_equality_qp(A_in, A_eq, *, tol: float = KKT_TOL) -> EqualityQPSolution:
    """min ½‖w‖² s.t. A_in w ≥ 1, A_eq w = 0: certified optimum, certified infeasibility, or a
    failure with its reason. Never raises for infeasibility or solver trouble."""
    A_in, A_eq = _check_rows(A_in, A_eq)
    inner = solve_margin_qp(project_out(A_eq, A_in), np.ones(len(A_in)), tol=tol)
    if inner.status == "infeasible":
        return _farkas(A_in, A_eq, inner.duals, inner.solver, inner.reason, tol)
    if inner.x is None or not inner.ok:
        why = f"projected QP ({A_in.shape[0]} rows): {inner.reason}"
        # models.oracles.svm has reported this failure already
        return EqualityQPSolution(inner.status, None, None, None, None, inner.solver, why)
    w = inner.x
    lam = np.asarray(inner.duals, dtype=np.float64)
    # ν from stationarity: the part of w that A_inᵀλ leaves lies in the row space of A_eq.
    nu = _eq_multipliers(A_eq, w - A_in.T @ lam)
    cert = certify_equality(A_in, A_eq, w, lam, nu, tol=tol)
    if not cert.ok:
        reason = f"projected QP certified, the full KKT not: {cert.summary()}"
        return _failed("inaccurate", cert, inner.solver, reason)
    reason = f"{len(A_eq)} equality rows projected out; {inner.reason}"
    return EqualityQPSolution("optimal", w, lam, nu, cert, inner.solver, reason)


def _failed(status, cert, solver, reason) -> EqualityQPSolution:
    """A failure of the machinery, reported to models.numerics.failures (the example that met it is
    inconclusive) and carrying no point: a failure is a reason, never an answer."""
    failures.report(failures.SVM_ORACLE, status, reason)
    return EqualityQPSolution(status, None, None, None, cert, solver, reason)


def _eq_multipliers(A_eq: np.ndarray, r: np.ndarray) -> np.ndarray:
    if A_eq.shape[0] == 0:
        return np.zeros(0)
    return np.linalg.lstsq(A_eq.T, r, rcond=None)[0]


def _farkas(A_in, A_eq, y, solver, reason, tol) -> EqualityQPSolution:
    """Lift the projected problem's Farkas vector y ((A_in P)ᵀy = 0) to (y, μ) with
    A_inᵀy + A_eqᵀμ = 0, and accept it only if that residual is ≤ tol·1ᵀy (the projected
    problem's own test does not see A_eq)."""
    y = np.asarray(y, dtype=np.float64)
    mu = _eq_multipliers(A_eq, -(A_in.T @ y))
    residual = float(np.linalg.norm(A_in.T @ y + A_eq.T @ mu))
    value = float(y.sum())
    if y.min() >= 0 and value > 0 and residual <= tol * value:
        why = f"{reason}; Farkas (y ≥ 0, μ): 1ᵀy = {value:.3g}, ‖A_inᵀy + A_eqᵀμ‖ = {residual:.2e}"
        return EqualityQPSolution("infeasible", None, y, mu, None, solver, why)
    why = f"{reason}; the lifted Farkas pair fails (1ᵀy = {value:.3g}, residual {residual:.2e})"
    return _failed("inaccurate", None, solver, why)


def farkas_residual(A_in, A_eq, y, mu) -> tuple[float, float]:
    """(1ᵀy, ‖A_inᵀy + A_eqᵀμ‖) of a claimed infeasibility certificate, for independent checks."""
    A_in, A_eq = _check_rows(A_in, A_eq)
    y = np.asarray(y, dtype=np.float64)
    if y.min(initial=0.0) < 0:
        return -np.inf, np.inf
    return float(y.sum()), float(np.linalg.norm(A_in.T @ y + A_eq.T @ np.asarray(mu)))


def orthonormal_rows(A: np.ndarray) -> np.ndarray:
    """Orthonormal basis of A's row space as rows (rank by numpy's matrix_rank threshold)."""
    if A.shape[0] == 0:
        return np.zeros((0, A.shape[1]))
    _, sigma, Vt = np.linalg.svd(A, full_matrices=False)
    threshold = sigma.max(initial=0.0) * max(A.shape) * np.finfo(float).eps
    return Vt[: int(np.count_nonzero(sigma > threshold))]


def project(basis: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Orthogonal projection of the matrix W onto the span of ``basis`` (orthonormal rows)."""
    W = np.asarray(W, dtype=np.float64)
    return (basis.T @ (basis @ W.ravel())).reshape(W.shape)
