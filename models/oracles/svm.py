"""Certified hard-margin SVM oracle: every answer carries a KKT certificate or a typed outcome.

Every problem here is the least-norm point of a polyhedron,

    minimize ½‖x‖²   subject to   A x ≥ b        (b ≥ 0),

whose KKT conditions are x = Aᵀλ, λ ≥ 0, A x ≥ b and λ_j (A_j x − b_j) = 0. The max-margin
problems of both papers (ATT-SVM, the W-SVM, the v-SVM and the `<cls>` SVM) are this QP with
different rows.

Why the pipeline has so many steps (prior-art §C.2, §D.6): a solver's "optimal" is not
evidence. Interior-point and first-order solvers report success on points that violate the
constraints at 1e-3, raise on benign problems, and call infeasible problems failures. So:
0. a fast path is tried first (``method="auto"``, the default): one Lawson–Hanson NNLS gives
   the exact optimum of these tiny QPs (least-distance programming), or, when it finds no
   point, a Farkas candidate. Its point must pass the same KKT certificate as step 4, and its
   Farkas vector the same acceptance test as step 1's; anything else (NNLS iteration limit,
   a failed certificate or test) falls through to steps 1–4 unchanged, so a fast answer is
   always certified independently and a doubtful case costs only the old time. Steps 1–4
   alone (``method="reference"``) stay the reference the tests compare the fast path with,
   and the fallback for what it cannot certify. It exists for speed: cvxpy's
   canonicalization costs 2–18 ms per call, the fast path well under 1 ms (issue 11);
1. an LP decides feasibility first, and an infeasible answer comes with a Farkas certificate
   (infeasibility means a paper's hypothesis failed, which is not a solver failure);
2. the QP is solved by Clarabel, with SCS and OSQP as named fallbacks;
3. the answer is polished on its active set to ~1e-12 (the optimum is the least-norm solution
   of its active equalities), and
4. the KKT residuals are recomputed here, independently of any solver. Only a point that
   passes them is returned as "optimal"; otherwise the status says what went wrong.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Literal

import cvxpy as cp
import numpy as np
from scipy.optimize import linprog, nnls

from models.numerics import failures

Status = Literal["optimal", "infeasible", "inaccurate", "solver_error"]
#: Every oracle's outcome is one of these (``checked_status``).
ORACLE_STATUSES: tuple[str, ...] = ("optimal", "infeasible", "inaccurate", "solver_error")
Method = Literal["auto", "reference"]
#: "auto" tries the certified Lawson–Hanson fast path first; "reference" runs the LP + cvxpy
#: pipeline alone (the tests and benchmarks/test_oracle.py compare the two).
METHODS: tuple[str, ...] = ("auto", "reference")
#: The ``solver`` of an answer the fast path certified.
FAST_SOLVER = "Lawson–Hanson NNLS"
#: Statuses that are failures of the oracle (reported to models.numerics.failures), not answers.
FAILED: frozenset[str] = frozenset({"inaccurate", "solver_error"})

#: A row is active when its slack is at most this times max(1, ‖x‖).
ACTIVE_TOL = 1e-6
#: The polished point must satisfy every row to this relative accuracy to replace the solver's.
POLISH_FEASIBILITY_TOL = 1e-10

#: Interior point first (accurate); then first-order solvers pushed to tight tolerances.
#: cvxpy turns OSQP's solution polishing on by default.
SOLVER_PATH: tuple[tuple[str, dict], ...] = (
    (cp.CLARABEL, {}),
    (cp.SCS, {"eps_abs": 1e-10, "eps_rel": 1e-10, "max_iters": 100_000}),
    (cp.OSQP, {"eps_abs": 1e-10, "eps_rel": 1e-10, "max_iter": 200_000}),
)


class CertificateError(RuntimeError):
    """A KKT residual exceeds its tolerance, so the point is not a certified optimum."""


def checked_status(status: str, allowed: tuple[str, ...] = ORACLE_STATUSES) -> str:
    """``status`` if it is one of ``allowed``, else a ValueError: an outcome's status is read by
    name (``ok``, reports, `check`), so a misspelt one would silently read as a failure."""
    if status not in allowed:
        raise ValueError(f"status: expected one of {allowed}, got {status!r}")
    return status


def checked_outcome(status: str, reason: str, allowed: tuple[str, ...] = ORACLE_STATUSES) -> None:
    """An outcome's status (``checked_status``) and its reason, a string (an answer's
    "reason" field; `check` prints it): the contract every oracle outcome meets."""
    checked_status(status, allowed)
    if not isinstance(reason, str):
        raise ValueError(f"reason: expected a string, got {reason!r}")


# --------------------------------------------------------------------------------------------
# Input conversion
# --------------------------------------------------------------------------------------------


def as_float_array(x, name: str, ndim: int | None = None) -> np.ndarray:
    """float64 numpy copy of an array-like or torch tensor; a ValueError names ``name``."""
    if hasattr(x, "detach"):  # torch tensors that require grad or live off the CPU
        x = x.detach().cpu().numpy()
    arr = np.array(x, dtype=np.float64)
    if ndim is not None and arr.ndim != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name}: contains NaN or infinity")
    return arr


def as_index_array(x, name: str, shape: tuple[int | None, ...], upper: int) -> np.ndarray:
    """int64 array with entries in [0, upper); ``None`` in ``shape`` matches any length."""
    if hasattr(x, "detach"):
        x = x.detach().cpu().numpy()
    arr = np.asarray(x)
    if arr.ndim != len(shape) or any(
        s not in (None, a) for s, a in zip(shape, arr.shape, strict=False)
    ):
        raise ValueError(f"{name}: expected shape {shape}, got {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"{name}: expected integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64)
    if arr.size and (arr.min() < 0 or arr.max() >= upper):
        raise ValueError(f"{name}: entries must lie in [0, {upper})")
    return arr


def _as_problem(A, b) -> tuple[np.ndarray, np.ndarray]:
    A = as_float_array(A, "A", 2)
    b = as_float_array(b, "b", 1)
    if A.shape[1] == 0:
        raise ValueError("A: needs at least one column (variable)")
    if b.shape[0] != A.shape[0]:
        raise ValueError(f"b: length {b.shape[0]} does not match A's {A.shape[0]} rows")
    if (b < 0).any():
        raise ValueError("b: right-hand sides must be ≥ 0 (margins are 0 or 1)")
    return A, b


# --------------------------------------------------------------------------------------------
# Certificates and solutions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Certificate:
    """KKT residuals of a candidate (x, λ), computed here and not taken from any solver."""

    primal_residual: float
    dual_residual: float
    stationarity: float
    complementarity: float
    active: np.ndarray
    tol: float

    @property
    def residuals(self) -> dict[str, float]:
        return {
            "primal_residual": self.primal_residual,
            "dual_residual": self.dual_residual,
            "stationarity": self.stationarity,
            "complementarity": self.complementarity,
        }

    @property
    def worst(self) -> float:
        """Largest residual; NaN counts as infinitely bad."""
        # Plain floats: a numpy round trip here cost as much as the residuals themselves.
        return max(math.inf if math.isnan(v) else v for v in self.residuals.values())

    @property
    def ok(self) -> bool:
        return self.worst <= self.tol

    def check(self) -> None:
        """Raise CertificateError naming every residual above ``tol``."""
        failing = [f"{k}={v:.3e}" for k, v in self.residuals.items() if not v <= self.tol]
        if failing:
            raise CertificateError(f"{', '.join(failing)} exceed tol={self.tol:.1e}")

    def summary(self) -> str:
        return ", ".join(f"{k}={v:.2e}" for k, v in self.residuals.items())


def certify(A, b, x, duals, *, tol: float = 1e-7, active_tol: float = ACTIVE_TOL) -> Certificate:
    """KKT residuals of (x, duals) for min ½‖x‖² s.t. A x ≥ b (x may be a matrix: it is raveled).

    Primal residual and complementarity are absolute (b is O(1)); stationarity is relative to
    max(1, ‖x‖) so that large-norm optima are judged by their direction's accuracy.
    """
    A, b = _as_problem(A, b)
    x = as_float_array(x, "x").ravel()
    lam = as_float_array(duals, "duals", 1)
    if x.size != A.shape[1] or lam.size != A.shape[0]:
        raise ValueError(f"x/duals: sizes {x.size}/{lam.size} do not match A {A.shape}")
    return _kkt_certificate(A, b, x, lam, tol, active_tol)


def _kkt_certificate(
    A: np.ndarray, b: np.ndarray, x: np.ndarray, lam: np.ndarray, tol: float, active_tol: float
) -> Certificate:
    """The residuals of `certify` (which ends here) without its input checks, for float64
    arrays of matching shapes, such as the fast path's own: on these small problems the
    checks and copies cost as much as the arithmetic. A non-finite x or λ gives NaN
    residuals, which `Certificate.ok` rejects.
    """
    slack = A @ x - b
    scale = max(1.0, float(np.linalg.norm(x)))
    return Certificate(
        primal_residual=float(max(0.0, -slack.min(initial=0.0))),
        dual_residual=float(max(0.0, -lam.min(initial=0.0))),
        stationarity=float(np.linalg.norm(x - A.T @ lam) / scale),
        complementarity=float(np.abs(lam * slack).max(initial=0.0)),
        active=slack <= active_tol * scale,
        tol=tol,
    )


@dataclass(frozen=True, eq=False)
class SVMSolution:
    """Outcome of one max-margin problem.

    ``status``: "optimal" (certified), "infeasible" (LP + Farkas certificate, kept in
    ``duals``: y ≥ 0 with Aᵀy ≈ 0 and bᵀy > 0), "inaccurate" (no point passed the
    certificate; ``reason`` has the residuals) or "solver_error" (every solver failed).
    ``rows`` maps constraint rows back to their origin (e.g. (i, t)) where a builder knows it.
    """

    status: Status
    x: np.ndarray | None
    duals: np.ndarray | None
    certificate: Certificate | None
    solver: str
    reason: str
    rows: tuple | None = None

    def __post_init__(self):
        checked_outcome(self.status, self.reason)

    @property
    def ok(self) -> bool:
        return self.status == "optimal"

    def _require_x(self) -> np.ndarray:
        if self.x is None:
            raise ValueError(f"no solution (status {self.status}): {self.reason}")
        return self.x

    @property
    def norm(self) -> np.float64:
        """‖x‖ (Frobenius for the W-SVM)."""
        return np.float64(np.linalg.norm(self._require_x()))

    @property
    def margin(self) -> np.float64:
        """1/‖x‖: the geometric margin of the hard-margin problem (b = 1)."""
        norm = self.norm
        return np.float64(np.inf) if norm == 0 else 1.0 / norm

    @property
    def direction(self) -> np.ndarray:
        norm = self.norm
        if norm == 0:
            raise ValueError("the solution is 0 and has no direction")
        return self._require_x() / norm

    @property
    def active(self) -> np.ndarray | None:
        """Mask of active rows (the support vectors of the v-SVM)."""
        return None if self.certificate is None else self.certificate.active


# --------------------------------------------------------------------------------------------
# The core QP
# --------------------------------------------------------------------------------------------


def solve_margin_qp(A, b, *, tol: float = 1e-7, method: Method = "auto") -> SVMSolution:
    """min ½‖x‖² s.t. A x ≥ b, certified; never raises for infeasibility or solver failures.

    ``method="auto"`` tries the Lawson–Hanson fast path first and falls back to the reference
    pipeline (LP, cvxpy, polish) when it cannot certify its answer; ``"reference"`` runs the
    reference pipeline alone. An answer that is neither certified optimal nor certified
    infeasible is also reported to ``models.numerics.failures`` (an example that met it is
    inconclusive, whatever its caller does)."""
    A, b = _as_problem(A, b)
    if not tol > 0:
        raise ValueError(f"tol: must be positive, got {tol}")
    if method not in METHODS:
        raise ValueError(f"method: expected one of {METHODS}, got {method!r}")
    return _reported(_solve_margin_qp(A, b, tol, method))


def _reported(sol: SVMSolution) -> SVMSolution:
    if sol.status in FAILED:
        failures.report(failures.SVM_ORACLE, sol.status, sol.reason)
    return sol


def _solve_margin_qp(
    A: np.ndarray, b: np.ndarray, tol: float, method: Method = "auto"
) -> SVMSolution:
    if A.shape[0] == 0:
        return _unconstrained(A.shape[1], tol)
    note = ""
    if method == "auto":
        fast = _fast_path(A, b, tol)
        if isinstance(fast, SVMSolution):
            return fast
        note = f"fast path fell through ({fast}); "
    lp = linprog(np.zeros(A.shape[1]), A_ub=-A, b_ub=-b, bounds=(None, None), method="highs")
    if lp.status == 2:
        return _infeasible(A, b, tol, lp.message, note)
    if lp.status != 0:
        note += f"feasibility LP inconclusive ({lp.message}); "
    answer = _solve_qp(A, b)
    if isinstance(answer, str):
        return SVMSolution("solver_error", None, None, None, "none", note + answer)
    solver, x, duals, log = answer
    return _certified(A, b, x, duals, tol, solver, note + log)


def _unconstrained(d: int, tol: float) -> SVMSolution:
    """No rows: the least-norm point is 0, with an empty multiplier vector."""
    x, duals = np.zeros(d), np.zeros(0)
    cert = certify(np.zeros((0, d)), np.zeros(0), x, duals, tol=tol)
    return SVMSolution("optimal", x, duals, cert, "trivial", "no constraints")


def _farkas_test(
    A: np.ndarray, b: np.ndarray, y: np.ndarray | None, tol: float
) -> tuple[bool, float, float]:
    """(accepted, bᵀy, ‖Aᵀy‖) for a candidate Farkas vector y ≥ 0 (None: no candidate).

    For any x, yᵀb ≤ yᵀAx ≤ ‖Aᵀy‖‖x‖, so no feasible x has ‖x‖ < bᵀy/‖Aᵀy‖. We accept the
    certificate when that bound is at least 1/tol. The LP's vector and the fast path's NNLS
    vector pass this one test.
    """
    value = float(b @ y) if y is not None else 0.0
    residual = float(np.linalg.norm(A.T @ y)) if y is not None else np.inf
    return value > 0 and residual <= tol * value, value, residual


def _excluded(value: float, residual: float) -> str:
    return "any x" if residual == 0 else f"‖x‖ < {value / residual:.3g}"


def _infeasible(
    A: np.ndarray, b: np.ndarray, tol: float, lp_message: str, note: str = ""
) -> SVMSolution:
    """Confirm the LP's verdict with a Farkas vector: y ≥ 0, Aᵀy ≈ 0, bᵀy > 0 (`_farkas_test`);
    otherwise the two LPs disagree. ``note`` (why the fast path fell through) leads the reason.
    """
    farkas = linprog(-b, A_eq=A.T, b_eq=np.zeros(A.shape[1]), bounds=(0, 1), method="highs")
    # the nonnegative part: HiGHS keeps its bounds only to its tolerance (−1e-14 seen)
    y = np.clip(farkas.x, 0.0, None) if farkas.status == 0 else None
    accepted, value, residual = _farkas_test(A, b, y, tol)
    if accepted:
        reason = (
            f"{note}feasibility LP: {lp_message}; Farkas certificate bᵀy={value:.3g}, "
            f"‖Aᵀy‖={residual:.2e} rules out {_excluded(value, residual)}"
        )
        return SVMSolution("infeasible", None, y, None, "HiGHS (LP)", reason)
    reason = (
        f"{note}feasibility LP says infeasible ({lp_message}) but the Farkas LP does not "
        f"confirm it (status {farkas.status}, bᵀy={value:.3g}, ‖Aᵀy‖={residual:.2e})"
    )
    return SVMSolution("inaccurate", None, y, None, "HiGHS (LP)", reason)


def _fast_path(A: np.ndarray, b: np.ndarray, tol: float) -> SVMSolution | str:
    """One Lawson–Hanson NNLS, certified; the reason it cannot answer otherwise.

    The least-distance point must pass the KKT certificate of `certify` (same tol); when there
    is none (1 − bᵀu ≈ 0) or it fails, the NNLS vector u ≥ 0 itself is the Farkas candidate
    (at an infeasible problem NNLS drives Aᵀu → 0 and bᵀu → 1), scaled to max u = 1 like the
    LP's vector in [0, 1], and must pass `_farkas_test`, the test the LP's vector passes.
    """
    u = _least_distance_multipliers(A, b)
    if u is None:
        return "NNLS reached its iteration limit"
    point = _least_distance(A, b, u)
    if point is None:
        why = "NNLS found no point: 1 − bᵀu ≈ 0"
    else:
        x, lam = point
        cert = _kkt_certificate(A, b, x, lam, tol, ACTIVE_TOL)
        if cert.ok:
            reason = f"fast path: least-distance NNLS, KKT certified ({cert.summary()})"
            return SVMSolution("optimal", x, lam, cert, FAST_SOLVER, reason)
        why = f"NNLS point failed the KKT certificate ({cert.summary()})"
    top = float(u.max())
    if not top > 0 or u.min() < 0:  # y ≥ 0 is what makes yᵀb ≤ yᵀAx hold for feasible x
        return why
    y = u / top
    accepted, value, residual = _farkas_test(A, b, y, tol)
    if not accepted:
        return f"{why}; its u fails the Farkas test (bᵀy={value:.3g}, ‖Aᵀy‖={residual:.2e})"
    reason = (
        f"fast path: Farkas vector from Lawson–Hanson NNLS ({why}): bᵀy={value:.3g}, "
        f"‖Aᵀy‖={residual:.2e} rules out {_excluded(value, residual)}"
    )
    return SVMSolution("infeasible", None, y, None, FAST_SOLVER, reason)


def _solve_qp(A: np.ndarray, b: np.ndarray) -> tuple[str, np.ndarray, np.ndarray, str] | str:
    """Run SOLVER_PATH; return (solver, x, λ, log) from the first "optimal" answer.

    An "optimal_inaccurate" point is kept as a last resort, since polishing and the
    certificate decide its fate anyway. With no usable point, return the failure log.
    """
    x = cp.Variable(A.shape[1])
    constraint = A @ x >= b
    problem = cp.Problem(cp.Minimize(0.5 * cp.sum_squares(x)), [constraint])
    failures: list[str] = []
    fallback = None
    for solver, options in SOLVER_PATH:
        try:
            problem.solve(solver=solver, **options)
        except (cp.error.SolverError, ValueError, ArithmeticError) as exc:
            failures.append(f"{solver}: {type(exc).__name__}: {exc}")
            continue
        if problem.status in ("optimal", "optimal_inaccurate") and x.value is not None:
            duals = constraint.dual_value
            duals = np.full(A.shape[0], np.nan) if duals is None else np.ravel(duals)
            answer = (solver, np.asarray(x.value, dtype=np.float64), duals.astype(np.float64))
            if problem.status == "optimal":
                return (*answer, _log(failures, solver))
            fallback = fallback or answer
        failures.append(f"{solver}: status {problem.status}")
    if fallback is None:
        return "; ".join(failures)
    return (*fallback, _log(failures, f"{fallback[0]} (optimal_inaccurate)"))


def _log(failures: list[str], answered_by: str) -> str:
    return "; ".join([*failures, f"answered by {answered_by}"])


def _certified(
    A: np.ndarray, b: np.ndarray, x: np.ndarray, duals: np.ndarray, tol: float, solver, log: str
) -> SVMSolution:
    """Return the first candidate that passes the KKT certificate, most accurate first.

    The active-set polish is exact when the solver found the active set. Degenerate optima
    (active rows with zero multipliers, e.g. the relaxed ATT-SVM) leave interior-point slacks
    of order √gap ≈ 1e-4 that hide the active set; the Lawson–Hanson solution is exact there.
    The solver's own point comes last. If none passes, the best one is reported "inaccurate".
    """
    candidates = (
        ("active-set polish", lambda: _polish(A, b, x, duals)),
        ("least-distance NNLS", lambda: _least_distance(A, b)),
        ("solver point", lambda: (x, duals)),
    )
    tried = []
    for label, compute in candidates:
        point = compute()
        if point is None:
            continue
        cert = certify(A, b, *point, tol=tol)
        if cert.ok:
            return SVMSolution("optimal", *point, cert, solver, f"{log}; certified {label}")
        tried.append((label, point, cert))
    label, point, cert = min(tried, key=lambda c: c[2].worst)
    reason = f"{log}; no point passed the KKT certificate (best: {label}: {cert.summary()})"
    return SVMSolution("inaccurate", *point, cert, solver, reason)


def _nnls(M: np.ndarray, v: np.ndarray) -> np.ndarray | None:
    """argmin_{u ≥ 0} ‖M u − v‖, or None when NNLS hits its iteration limit."""
    try:
        return nnls(M, v)[0]
    except RuntimeError:
        return None


def _least_distance_multipliers(A: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """u = argmin_{u ≥ 0} ‖Aᵀu‖² + (bᵀu − 1)²: one NNLS on the (d+1)×m matrix [Aᵀ; bᵀ]."""
    E = np.empty((A.shape[1] + 1, A.shape[0]))
    E[:-1] = A.T
    E[-1] = b
    f = np.zeros(A.shape[1] + 1)
    f[-1] = 1.0
    return _nnls(E, f)


def _least_distance(
    A: np.ndarray, b: np.ndarray, u: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """Lawson–Hanson least-distance programming: the exact QP optimum from one NNLS.

    With u = argmin_{u ≥ 0} ‖Aᵀu‖² + (bᵀu − 1)² (Solving Least Squares Problems, ch. 23),
    x = Aᵀu/(1 − bᵀu) and λ = u/(1 − bᵀu); 1 − bᵀu = 0 signals infeasibility. ``u`` is that
    NNLS solution when the caller has it already (the fast path); otherwise it is computed.
    """
    if u is None:
        u = _least_distance_multipliers(A, b)
    if u is None:
        return None
    denominator = 1.0 - float(b @ u)
    if denominator <= np.finfo(float).eps:
        return None
    return A.T @ u / denominator, u / denominator


def _polish(
    A: np.ndarray, b: np.ndarray, x: np.ndarray, duals: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Exact optimum on the solver's active rows S, or None if S is visibly wrong.

    S holds the rows with slack ≤ ACTIVE_TOL·max(1, ‖x‖), plus those whose multiplier exceeds
    their slack (an interior-point method leaves slack ~ gap/λ on rows with small λ). If S is
    the true active set, the optimum is the least-norm solution of A_S x = b_S (it lies in the
    row space of A_S, as x = A_Sᵀλ). λ_S ≥ 0 comes from NNLS on A_Sᵀλ = x, which also finds a
    valid λ when the active rows are linearly dependent.
    """
    slack = A @ x - b
    active = slack <= np.fmax(ACTIVE_TOL * max(1.0, float(np.linalg.norm(x))), duals)
    if not active.any():
        return None
    # Each active row scaled to unit norm first: the solution set of A_S x = b_S is the same,
    # but lstsq's backward error is normwise (ε·‖A_S‖·‖x‖ in every row's residual), and a
    # row 2000× shorter than the others then kept a slack of ~1e-13 that its multiplier
    # (∝ ‖x‖/‖a_j‖, 6e7 on the ladder's medium ties draw k = 47) turned into a complementarity
    # of 1e-5: no point passed the certificate. Scaled, each residual is ε·‖x‖ of its own row.
    rows_S = A[active]
    norms = np.linalg.norm(rows_S, axis=1)
    norms[norms == 0.0] = 1.0
    x_pol = np.linalg.lstsq(rows_S / norms[:, None], b[active] / norms, rcond=None)[0]
    row_scale = float(np.linalg.norm(A, axis=1).max()) * float(np.linalg.norm(x_pol))
    if (b - A @ x_pol).max() > POLISH_FEASIBILITY_TOL * max(1.0, row_scale):
        return None
    lam = _nnls(A[active].T, x_pol)
    if lam is None:
        return None
    duals = np.zeros(A.shape[0])
    duals[active] = lam
    return x_pol, duals


# --------------------------------------------------------------------------------------------
# Problem builders
# --------------------------------------------------------------------------------------------


def att_constraints(
    keys, alpha, relaxed_inputs=None, free=None
) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Rows k_{iα_i} − k_it (t ≠ α_i), right-hand sides 1 (0 for relaxed inputs), and (i, t).

    ``free`` (boolean, shape (n, T)) marks tokens that get no row at all: the tokens tied in
    score with α_i (`tied_tokens`), on which the flow exerts no force in the limit.
    Identical (row, rhs) pairs are kept once, with the first (i, t) that produced them as label;
    per-token questions (e.g. support sets) should evaluate every token from the keys.
    """
    keys = as_float_array(keys, "keys", 3)
    n, T, _ = keys.shape
    alpha = as_index_array(alpha, "alpha", (n,), T)
    relaxed = np.zeros(n, dtype=bool)
    if relaxed_inputs is not None:
        relaxed = np.asarray(relaxed_inputs)
        if relaxed.shape != (n,) or relaxed.dtype != bool:
            raise ValueError(f"relaxed_inputs: expected a boolean mask of shape {(n,)}")
    constrained = np.arange(T)[None, :] != alpha[:, None]
    if free is not None:
        free = np.asarray(free)
        if free.shape != (n, T) or free.dtype != bool:
            raise ValueError(f"free: expected a boolean mask of shape {(n, T)}")
        constrained &= ~free
    i_idx, t_idx = np.nonzero(constrained)
    A = keys[i_idx, alpha[i_idx]] - keys[i_idx, t_idx]
    b = np.where(relaxed[i_idx], 0.0, 1.0)
    if len(i_idx) == 0:
        return A, b, ()
    keep = _first_occurrences(A, b)
    # Labels only for the rows kept, from tolist (Python ints), not a loop over every row.
    labels = tuple(zip(i_idx[keep].tolist(), t_idx[keep].tolist(), strict=True))
    return A[keep], b[keep], labels


def _first_occurrences(A: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Indices of the first occurrence of each distinct (row, rhs) pair, in increasing order.

    Rows compare as floats (0.0 equals −0.0), as ``np.unique(axis=0)`` compares them. Its
    structured sort costs ~300 µs on 100 rows of 33 numbers, more than the fast path's NNLS.
    Rows whose first entries all differ are all distinct, which one sort of that column shows
    (the common case: continuous keys); otherwise a stable lexicographic sort, which puts each
    group's first occurrence first.
    """
    C = np.column_stack([A, b])
    first_column = np.sort(C[:, 0])
    if (first_column[1:] != first_column[:-1]).all():
        return np.arange(len(C))
    order = np.lexsort(C.T)
    ordered = C[order]
    first = np.empty(len(order), dtype=bool)
    first[0] = True
    np.any(ordered[1:] != ordered[:-1], axis=1, out=first[1:])
    return np.sort(order[first])


def _dedupe(A: np.ndarray, b: np.ndarray, labels: list) -> tuple[np.ndarray, np.ndarray, tuple]:
    """Drop repeated (row, rhs) pairs, keeping first occurrences in their original order.

    Repeated rows add nothing to the feasible set but make the multipliers non-unique.
    """
    if len(labels) == 0:
        return A, b, ()
    keep = _first_occurrences(A, b)
    return A[keep], b[keep], tuple(labels[k] for k in keep)


def att_svm(
    keys,
    alpha,
    *,
    relaxed_inputs=None,
    free=None,
    tol: float = 1e-7,
    method: Method = "auto",
) -> SVMSolution:
    """ATT-SVM(α): min ‖p‖ s.t. (k_{iα_i} − k_it)ᵀp ≥ 1 for all i, t ≠ α_i (spec §1.4).

    ``relaxed_inputs`` (boolean, shape (n,)) lowers those inputs' right-hand sides to 0: the
    relaxed ATT-SVM of the joint (v, p) theorem (spec §2.7). ``free`` (boolean, (n, T)) drops
    the rows of those tokens: with ``tied_tokens(scores, α)`` it is the tie-sharing SVM, the
    limit of a flow whose selected token ties in score with others. ``rows`` holds (i, t) per
    row. ``method`` as in `solve_margin_qp`.
    """
    A, b, rows = att_constraints(keys, alpha, relaxed_inputs, free)
    return replace(solve_margin_qp(A, b, tol=tol, method=method), rows=rows)


def tied_tokens(scores, alpha) -> np.ndarray:
    """(n, T) mask of the tokens t ≠ α_i whose score equals γ_{iα_i} exactly.

    Exactly, not within a tolerance: the flow's force between two tokens is ∝ their score gap,
    so a gap of 1e-16 still decides the limit (at a norm no run reaches), while an exact tie
    leaves the two tokens' split to the finite part for ever. Instances that promise a tie build
    it exactly (strategies.cross, strategies.prompt); a near-tie is a different instance.
    """
    scores = as_float_array(scores, "scores", 2)
    n, T = scores.shape
    alpha = as_index_array(alpha, "alpha", (n,), T)
    tied = scores == scores[np.arange(n), alpha][:, None]
    tied[np.arange(n), alpha] = False
    return tied


def _w_constraints(X, p, alpha) -> tuple[np.ndarray, np.ndarray, tuple, np.ndarray]:
    """Vectorized W-SVM rows: (x_α − x_t)ᵀ W p = ⟨W, (x_α − x_t) pᵀ⟩_F ≥ 1 (row-major vec)."""
    p = as_float_array(p, "p", 1)
    diffs, b, rows = att_constraints(X, alpha)
    A = np.einsum("ja,c->jac", diffs, p).reshape(len(rows), -1)
    return A, b, rows, p


def w_svm(X, p, alpha, *, tol: float = 1e-7, method: Method = "auto") -> SVMSolution:
    """W-SVM: min ‖W‖_F s.t. (x_{iα_i} − x_it)ᵀ W p ≥ 1 (spec §2.8), solved as a QP in vec(W).

    ``x`` is the (d, len(p)) matrix; the certificate and duals refer to the vectorized rows.
    """
    X = as_float_array(X, "X", 3)
    A, b, rows, p = _w_constraints(X, p, alpha)
    sol = solve_margin_qp(A, b, tol=tol, method=method)
    W = None if sol.x is None else sol.x.reshape(X.shape[2], p.size)
    return replace(sol, x=W, rows=rows)


def w_svm_closed_form(X, p, alpha, *, tol: float = 1e-7, method: Method = "auto") -> SVMSolution:
    """W^mm = q^mm pᵀ/‖p‖² with q^mm = ATT-SVM(α) on keys X (spec §2.8), certified on the W-SVM.

    With ATT-SVM multipliers μ (q = Σ μ_j u_j), W = Σ (μ_j/‖p‖²) u_j pᵀ, so the W-SVM duals are
    μ/‖p‖² and the KKT certificate is recomputed for the W problem, not inherited.
    """
    X = as_float_array(X, "X", 3)
    A, b, rows, p = _w_constraints(X, p, alpha)
    pp = float(p @ p)
    if pp == 0:  # every row reads 0 ≥ 1: the formula is undefined, the generic oracle decides
        return w_svm(X, p, alpha, tol=tol, method=method)
    q = att_svm(X, alpha, tol=tol, method=method)
    solver = f"closed form via {q.solver}"
    if q.x is None:  # a Farkas vector for ATT-SVM is one for the W-SVM too, as p ≠ 0
        return replace(q, solver=solver)
    W, duals = np.outer(q.x, p) / pp, q.duals / pp
    cert = certify(A, b, W, duals, tol=tol)
    status = "optimal" if q.ok and cert.ok else "inaccurate"
    reason = f"ATT-SVM: {q.status} ({q.reason}); W certificate: {cert.summary()}"
    return _reported(SVMSolution(status, W, duals, cert, solver, reason, rows))


def v_svm(Z, y, *, tol: float = 1e-7, method: Method = "auto") -> SVMSolution:
    """Hard-margin linear SVM without bias: min ‖v‖ s.t. y_i vᵀz_i ≥ 1 (spec §2.7).

    The support vectors are ``solution.active``; ``rows`` holds the sample index per row.
    """
    Z = as_float_array(Z, "Z", 2)
    y = as_float_array(y, "y", 1)
    if y.shape[0] != Z.shape[0] or not np.isin(y, (-1.0, 1.0)).all():
        raise ValueError(f"y: expected {Z.shape[0]} labels in {{-1, +1}}")
    sol = solve_margin_qp(y[:, None] * Z, np.ones(Z.shape[0]), tol=tol, method=method)
    return replace(sol, rows=tuple(range(Z.shape[0])))


def cls_svm(E, sequences, s_star, *, tol: float = 1e-7, method: Method = "auto") -> SVMSolution:
    """`<cls>` SVM of 2505.17282: min ‖p‖ s.t. (E_{s*_i} − E_s)ᵀp ≥ 1, s ∈ X_i distinct, s ≠ s*_i.

    Other occurrences of s*_i in sequence i impose nothing (they tie with it for every p).
    ``rows`` holds (i, s) with s a token id, not a position.
    """
    E = as_float_array(E, "E", 2)
    vocab = E.shape[0]
    seqs = as_index_array(sequences, "sequences", (None, None), vocab)
    s_star = as_index_array(s_star, "s_star", (seqs.shape[0],), vocab)
    rows, labels = [], []
    for i, (seq, star) in enumerate(zip(seqs, s_star, strict=True)):
        if star not in seq:
            raise ValueError(f"s_star: token {star} does not occur in sequence {i}")
        others = np.unique(seq[seq != star])
        rows.append(E[star] - E[others])
        labels += [(i, int(s)) for s in others]
    A = np.concatenate([np.zeros((0, E.shape[1])), *rows])
    A, b, labels = _dedupe(A, np.ones(len(labels)), labels)
    return replace(solve_margin_qp(A, b, tol=tol, method=method), rows=labels)
