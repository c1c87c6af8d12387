"""Certified attention SVMs of *Transformers as SVMs* with Frobenius, nuclear and ℓp objectives.

For tokens X (n, T, d), queries Z (n, d) and a selection α (n,), the attention SVM is (spec
tfsvm.md §1.4)

    W^mm_⋄(α) = argmin_W ‖W‖_⋄   s.t.   (x_{iα_i} − x_it)ᵀ W z_i ≥ 1   for all i, t ≠ α_i,

with ⋄ the Frobenius norm ("fro"), the nuclear norm ("nuc") or the entrywise ℓp norm ("lp",
1 < p < ∞). Vectorisation is row-major throughout: the row of (i, t) is
``np.outer(X[i, α_i] − X[i, t], Z[i]).ravel()``, so that row · W.ravel() is the logit gap.

Why a certificate: a conic solver's "optimal" is not evidence (spec §6 "Solver policy", F12:
SCS at its default accuracy violates the constraints by ~1e-5 and invents singular values).
Every answer here is checked against the duality of

    min ‖W‖_⋄ s.t. A vec(W) ≥ 1      and      max Σλ s.t. λ ≥ 0, ‖mat(Aᵀλ)‖_dual ≤ 1,

computed here from W and λ alone (`certify`). Weak duality gives Σλ ≤ ⟨mat(Aᵀλ), W⟩ ≤ ‖W‖_⋄
for every feasible W, so a feasible W whose norm equals Σλ for a dual-feasible λ is optimal.
The certificate certifies the optimal VALUE; where the optimum is not unique (the nuclear SVM,
spec F8), it says nothing about which optimal direction a solver returned. Compare values or
normalized margins there, never directions.

Pipeline: input checks → a zero row (duplicate tokens, a zero query: 0 ≥ 1) is infeasible
without any solver → a HiGHS feasibility LP, whose "infeasible" is confirmed by a Farkas
vector → the solve ("fro": the certified oracle `models.oracles.svm.att_svm`; "nuc"/"lp": cvxpy with
a named solver, Clarabel by default) → the certificate. Only public cvxpy API is read:
``Problem.status``, ``Variable.value`` and ``Constraint.dual_value``.
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field

import cvxpy as cp
import numpy as np
from scipy.optimize import linprog, nnls

from models.numerics import failures
from models.oracles.svm import ACTIVE_TOL, as_float_array, as_index_array, att_svm, checked_outcome

NORMS: tuple[str, ...] = ("fro", "nuc", "lp")
#: Statuses that are failures of the machinery (reported to models.numerics.failures), not answers.
FAILED: frozenset[str] = frozenset({"inaccurate", "solver_error"})
#: A face fit's outcomes (``FaceFit``): "bracketed" is an answer, certified but wide.
FACE_STATUSES: tuple[str, ...] = ("optimal", "bracketed", "solver_error", "infeasible")
#: Solver used when ``solver=None``: "fro" goes to the certified QP oracle of models/oracles/svm.py;
#: the nuclear SDP and the ℓp power-cone program to Clarabel (spec §6 "Solver policy").
DEFAULT_SOLVER = cp.CLARABEL
FRO_ORACLE = "models.oracles.svm.att_svm"

#: Certificate threshold floor for cvxpy solves. Clarabel stops at relative gap and
#: feasibility 1e-8 on its own equilibrated problem; measured in our unscaled residuals the
#: dual-norm and gap residuals were 3e-9–3e-8 (6,8,10 and 5,5,20 instances), so 1e-6 leaves a
#: factor ≥ 30 and matches the spec's "min margin ≥ 1 − 1e-6" (§7 tolerance table). SCS at its
#: default accuracy leaves 1e-7–1e-5 and was rejected in 6 of 8 draws at (6,8,10); when it
#: passes, its value is certified but an absolute-threshold rank still is not (F12). SCS at
#: eps 1e-9 passes with ~1e-10.
CONIC_TOL = 1e-6
#: Default certificate tolerance (the "fro" oracle polishes to ~1e-12, so 1e-7 is loose there).
DEFAULT_TOL = 1e-7
#: Relative singular-value threshold for ranks (spec §1.8: σ_k > 1e-6 σ_1; never absolute).
RANK_REL = 1e-6
#: Active-set tolerance for support tokens (spec §1.5: constraint value ≤ 1 + 1e-6).
SUPPORT_TOL = 1e-6
#: Slack of the nuclear SVM's optimal face {A vec M ≥ 1, ‖M‖_⋆ ≤ (1 + FACE_SLACK)·opt}: the
#: certified optimum is itself accurate to CONIC_TOL = 1e-6, so the face is read at that slack.
FACE_SLACK = 1e-6
#: Largest width of the certified bracket [corr of a checked member, dual bound] on the best
#: correlation over the face that counts as "optimal", and the membership tolerance of a
#: member's nuclear norm. One Clarabel solve at its defaults, no second solver: on the 18
#: distinct face fits of the (K, Q) claims' ci run (d = 10 and 2, 0.01–0.15 s each) 9 brackets
#: were 3e-13–5e-7 wide and 9 were 1.6e-6–2.5e-3 ("bracketed": where Clarabel's point leaves
#: the face by 2e-6–6e-6 the lower end is the nuclear SVM's own point), and every one decided
#: its claim's thresholds (`FaceFit.decides`). SCS at eps 1e-11 narrows such brackets in
#: 1–12 s each (8c969d2, reverted for time in 848572f); it is not tried.
FACE_TOL = 1e-6
#: The face fit's one fallback, where Clarabel returns no usable dual: SCS at a moderate accuracy
#: (its answer is certified by the same checks; eps 1e-11 took tens of seconds, issue 24).
FACE_RETRY_SCS = {"eps_abs": 1e-7, "eps_rel": 1e-7, "max_iters": 20_000}

# cvxpy raises these for numerical trouble inside a solve; they make a "solver_error".
_SOLVER_EXCEPTIONS = (cp.error.SolverError, ValueError, ArithmeticError)


# --------------------------------------------------------------------------------------------
# Norms
# --------------------------------------------------------------------------------------------


def entrywise_norm(W, p: float) -> float:
    """‖vec W‖_p for 1 ≤ p ≤ ∞, dividing by the max-abs entry first (no under/overflow)."""
    a = np.abs(np.asarray(W, dtype=np.float64)).ravel()
    if not (_as_real(p) or 0) >= 1:
        raise ValueError(f"p: expected p ≥ 1, got {p!r}")
    top = float(a.max(initial=0.0))
    if top == 0 or math.isinf(p):
        return top
    return top * float(np.sum((a / top) ** p) ** (1.0 / p))


def conjugate_exponent(p: float) -> float:
    """p* = p/(p − 1), with 1* = ∞ and ∞* = 1."""
    if p == 1:
        return math.inf
    return 1.0 if math.isinf(p) else p / (p - 1.0)


def matrix_norm(W, norm: str, p: float | None = None) -> float:
    """‖W‖_⋄: Frobenius ("fro"), nuclear ("nuc") or entrywise ℓp ("lp")."""
    W = np.asarray(W, dtype=np.float64)
    if norm == "fro":
        return entrywise_norm(W, 2.0)
    if norm == "nuc":
        return float(np.linalg.svd(W, compute_uv=False).sum())
    if norm == "lp":
        return entrywise_norm(W, _lp_exponent(p))
    raise ValueError(f"norm: expected one of {NORMS}, got {norm!r}")


def dual_norm(M, norm: str, p: float | None = None) -> float:
    """Dual of ‖·‖_⋄: spectral for "nuc", Frobenius for "fro", entrywise ℓ_{p*} for "lp"."""
    M = np.asarray(M, dtype=np.float64)
    if norm == "fro":
        return entrywise_norm(M, 2.0)
    if norm == "nuc":
        return float(np.linalg.norm(M, 2)) if M.size else 0.0
    if norm == "lp":
        return entrywise_norm(M, conjugate_exponent(_lp_exponent(p)))
    raise ValueError(f"norm: expected one of {NORMS}, got {norm!r}")


def rank_rel(W, rel: float = RANK_REL) -> int:
    """#{σ_k > rel·σ_1}: the rank read with a relative threshold (spec F12); 0 for W = 0."""
    sigma = np.linalg.svd(np.asarray(W, dtype=np.float64), compute_uv=False)
    if sigma.size == 0 or sigma[0] == 0:
        return 0
    return int(np.count_nonzero(sigma > rel * sigma[0]))


def _lp_exponent(p) -> float:
    value = _as_real(p)
    if value is None or not 1 < value < math.inf:
        raise ValueError(f"p: the ℓp SVM needs a finite exponent 1 < p < ∞, got {p!r}")
    return value


def _as_real(x) -> float | None:
    """float(x) for a real number (not a bool), else None."""
    if x is None or isinstance(x, bool):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return None


# --------------------------------------------------------------------------------------------
# Constraints and feasibility
# --------------------------------------------------------------------------------------------


def _as_instance(X, Z, alpha) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    X = as_float_array(X, "X", 3)
    n, T, d = X.shape
    Z = as_float_array(Z, "Z", 2)
    if Z.shape != (n, d):
        raise ValueError(f"Z: expected shape {(n, d)} (one query per input), got {Z.shape}")
    alpha = as_index_array(alpha, "alpha", (n,), T)
    return X, Z, alpha


def cross_constraints(X, Z, alpha) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """Rows outer(x_{iα_i} − x_it, z_i).ravel() for t ≠ α_i (row-major vec), and their (i, t).

    Every (i, t) keeps its row, repeated or not, so that the duals index constraints 1:1.
    """
    return _rows(*_as_instance(X, Z, alpha))


def _rows(X: np.ndarray, Z: np.ndarray, alpha: np.ndarray) -> tuple[np.ndarray, list]:
    """`cross_constraints` on checked arrays."""
    n, T, d = X.shape
    i_idx, t_idx = np.nonzero(np.arange(T)[None, :] != alpha[:, None])
    diffs = X[i_idx, alpha[i_idx]] - X[i_idx, t_idx]
    A = np.einsum("ka,kb->kab", diffs, Z[i_idx]).reshape(len(i_idx), d * d)
    return A, list(zip(i_idx.tolist(), t_idx.tolist(), strict=True))


def _feasibility_lp(A: np.ndarray):
    """HiGHS LP: find w with A w ≥ 1 (status 0 feasible, 2 infeasible)."""
    return linprog(
        np.zeros(A.shape[1]), A_ub=-A, b_ub=-np.ones(len(A)), bounds=(None, None), method="highs"
    )


def is_feasible(X, Z, alpha) -> bool | None:
    """Whether the attention SVM's constraints can be met (HiGHS LP); None if undecided."""
    A, _ = cross_constraints(X, Z, alpha)
    if len(A) == 0:
        return True
    if _zero_rows(A).any():
        return False
    status = _feasibility_lp(A).status
    return True if status == 0 else False if status == 2 else None


def _zero_rows(A: np.ndarray) -> np.ndarray:
    """Rows that read 0 ≥ 1 (a token equal to the selected one, or a zero query)."""
    return ~A.any(axis=1)


def _farkas(A: np.ndarray, tol: float) -> tuple[np.ndarray | None, str]:
    """A Farkas vector y ≥ 0 with Aᵀy ≈ 0 and Σy > 0, or None; and what it rules out.

    For feasible w, Σy ≤ yᵀA w ≤ ‖Aᵀy‖‖w‖; and ‖w‖ ≥ 1/max_k ‖A_k‖ for any feasible w. The
    vector is accepted when it excludes every w up to 1/tol times that least conceivable norm.
    """
    m, dd = A.shape
    lp = linprog(-np.ones(m), A_eq=A.T, b_eq=np.zeros(dd), bounds=(0, 1), method="highs")
    if lp.status != 0:
        return None, f"Farkas LP status {lp.status}"
    # HiGHS honours the bounds to its feasibility tolerance (an entry of −1.1e-14 seen at
    # n = 21, T = 4): the vector tested and returned is the nonnegative part, so y ≥ 0 holds
    # exactly and the test below is on the very vector a caller receives
    y = np.clip(lp.x, 0.0, None)
    total, residual = float(y.sum()), float(np.linalg.norm(A.T @ y))
    row_scale = float(np.linalg.norm(A, axis=1).max())
    if not (total > 0 and residual <= tol * total * row_scale):
        return None, f"Farkas LP vector fails: Σy={total:.3g}, ‖Aᵀy‖={residual:.2e}"
    return y, f"Farkas certificate Σy={total:.3g}, ‖Aᵀy‖={residual:.2e}"


# --------------------------------------------------------------------------------------------
# Certificate
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Certificate:
    """Duality residuals of (W, λ, claimed value), computed here, not taken from a solver.

    ``residuals``: primal = max(0, 1 − min A·w); dual_sign = max(0, −min λ); dual_norm =
    max(0, ‖mat(Aᵀλ)‖_dual − 1); gap = |‖W‖_⋄ − Σλ| / max(1, ‖W‖_⋄); value = |value − ‖W‖_⋄|
    / max(1, ‖W‖_⋄) (the claimed value is W's norm). All are relative to O(1) quantities (the
    right-hand sides are 1, the dual-norm bound is 1). NaN counts as failing.
    """

    residuals: dict[str, float]
    tol: float

    @property
    def failing(self) -> list[str]:
        return [k for k, v in self.residuals.items() if not v <= self.tol]

    @property
    def ok(self) -> bool:
        return not self.failing

    def summary(self) -> str:
        return ", ".join(f"{k}={v:.2e}" for k, v in self.residuals.items())


def certify(A, W, duals, value: float, norm: str, p: float | None = None, tol: float = CONIC_TOL):
    """Check min ‖W‖_⋄ s.t. A vec(W) ≥ 1 against its dual max Σλ s.t. λ ≥ 0, ‖mat(Aᵀλ)‖_dual ≤ 1.

    Returns a `Certificate` (``.residuals``, ``.ok``, ``.failing``). Passing certifies that W is
    feasible, that λ is dual feasible, and that ‖W‖_⋄ = Σλ = ``value``: hence ``value`` is the
    optimal value and W an optimum. It does not certify that W is *the* optimum when the optimum
    is not unique (nuclear norm, spec F8): any optimal W passes with the same λ.
    """
    A = as_float_array(A, "A", 2)
    W = as_float_array(W, "W", 2)
    lam = np.asarray(duals, dtype=np.float64).ravel()
    d = W.shape[0]
    if W.shape != (d, d) or A.shape[1] != d * d or lam.size != A.shape[0]:
        raise ValueError(f"W/duals: shapes {W.shape}/{lam.shape} do not match A {A.shape}")
    norm_w = matrix_norm(W, norm, p)
    scale = max(1.0, norm_w)
    residuals = {
        "primal": float(max(0.0, 1.0 - (A @ W.ravel()).min(initial=math.inf))),
        "dual_sign": float(max(0.0, -lam.min(initial=0.0))),
        "dual_norm": float(max(0.0, dual_norm((A.T @ lam).reshape(d, d), norm, p) - 1.0)),
        "gap": abs(norm_w - float(lam.sum())) / scale,
        "value": abs(float(value) - norm_w) / scale,
    }
    return Certificate(residuals, tol)


# --------------------------------------------------------------------------------------------
# The answer
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class NormSVM:
    """Outcome of one attention SVM.

    ``status``: "optimal" (certificate passed), "infeasible" (zero row or LP + Farkas; the
    Farkas vector y ≥ 0 with Aᵀy ≈ 0 is kept in ``duals``), "inaccurate" (a point exists but
    failed the certificate, or the LPs disagree; ``reason`` names the residual) or
    "solver_error" (the solver raised or returned no point). ``value`` = ‖W‖_⋄ is NaN unless
    optimal. ``A`` and ``labels`` are the constraint rows and their (i, t).
    """

    norm: str
    p: float | None
    status: str
    W: np.ndarray | None
    value: float
    duals: np.ndarray | None
    residuals: dict[str, float]
    reason: str
    solver: str
    seconds: float
    A: np.ndarray = field(repr=False, default_factory=lambda: np.zeros((0, 0)))
    labels: tuple[tuple[int, int], ...] = field(repr=False, default=())

    def __post_init__(self):
        checked_outcome(self.status, self.reason)

    @property
    def ok(self) -> bool:
        return self.status == "optimal"

    def _require_W(self) -> np.ndarray:
        if self.W is None:
            raise ValueError(f"no solution (status {self.status}): {self.reason}")
        return self.W

    @property
    def margin(self) -> float:
        """min_k A_k·vec(W) (∞ without constraints); ≥ 1 − tol for a certified answer."""
        return float((self.A @ self._require_W().ravel()).min(initial=math.inf))

    @property
    def normalized_margin(self) -> float:
        """margin/‖W‖_⋄ = 1/‖W^mm_⋄‖_⋄ at the optimum (spec §1.4); NaN unless optimal."""
        margin = self.margin
        return math.inf if self.value == 0 and margin == math.inf else margin / self.value

    def rank(self, rel: float = RANK_REL) -> int:
        return rank_rel(self._require_W(), rel)

    def support(self, X, Z, alpha, tol: float = SUPPORT_TOL) -> list[np.ndarray]:
        """Per input i, the tokens t ≠ α_i with (x_{iα_i} − x_it)ᵀ W z_i ≤ 1 + tol (spec §1.5)."""
        X, Z, alpha = _as_instance(X, Z, alpha)
        W = self._require_W()
        logits = np.einsum("ita,ab,ib->it", X, W, Z)
        n, T, _ = X.shape
        gaps = logits[np.arange(n), alpha][:, None] - logits
        active = (gaps <= 1.0 + tol) & (np.arange(T)[None, :] != alpha[:, None])
        return [np.flatnonzero(row) for row in active]


def _answer(norm, p, status, W, duals, cert, reason, solver, start, A, labels) -> NormSVM:
    value = matrix_norm(W, norm, p) if status == "optimal" else math.nan
    residuals = {} if cert is None else cert.residuals
    seconds = time.perf_counter() - start
    return NormSVM(norm, p, status, W, value, duals, residuals, reason, solver, seconds, A, labels)


# --------------------------------------------------------------------------------------------
# Solvers
# --------------------------------------------------------------------------------------------


def _solve_fro_oracle(X, Z, alpha, A, tol):
    """Frobenius SVM by the certified QP oracle; λ for min ‖W‖_F by NNLS on the active rows.

    The oracle solves min ½‖w‖² (x = Aᵀμ), and dedupes repeated rows, so its μ is not indexed
    like A. Here μ ≥ 0 is recomputed on A's active rows (A_Sᵀμ = w), and λ = μ/‖w‖ is the dual
    of min ‖w‖: ‖mat(Aᵀλ)‖_F = 1 and Σλ = wᵀAᵀμ/‖w‖ = ‖w‖.
    """
    n, T, d = X.shape
    keys = np.einsum("ita,ib->itab", X, Z).reshape(n, T, d * d)
    sol = att_svm(keys, alpha, tol=tol)
    if sol.x is None or not sol.ok:
        W = None if sol.x is None else sol.x.reshape(d, d)
        return sol.status, W, None, f"oracle: {sol.reason}", f"{FRO_ORACLE} ({sol.solver})"
    w = sol.x
    norm_w = float(np.linalg.norm(w))
    active = A @ w <= 1.0 + ACTIVE_TOL * max(1.0, norm_w)
    mu = np.zeros(len(A))
    try:
        mu[active] = nnls(A[active].T, w)[0]
    except RuntimeError:  # NNLS iteration limit: no multipliers, so the certificate fails
        mu[:] = np.nan
    why = f"oracle certified its QP ({sol.solver})"
    return "optimal", w.reshape(d, d), mu / norm_w, why, f"{FRO_ORACLE} ({sol.solver})"


def _objective(W: cp.Variable, norm: str, p: float | None):
    if norm == "nuc":
        return cp.normNuc(W)
    if norm == "lp":
        return cp.pnorm(cp.vec(W, order="C"), p)
    return cp.norm(cp.vec(W, order="C"), 2)


def _solve_conic(A, d, norm, p, solver, solver_opts):
    """min ‖W‖_⋄ s.t. A vec_C(W) ≥ 1 with cvxpy; (status, W, λ, note) with status None if a
    point came back (the certificate decides), else "solver_error"."""
    W = cp.Variable((d, d))
    constraint = A @ cp.vec(W, order="C") >= 1
    problem = cp.Problem(cp.Minimize(_objective(W, norm, p)), [constraint])
    try:
        with warnings.catch_warnings():  # the status says it, and the certificate decides
            warnings.filterwarnings("ignore", message="Solution may be inaccurate")
            problem.solve(solver=solver, **solver_opts)
    except TypeError as exc:  # cvxpy's answer to an unknown solver setting: a caller error
        raise ValueError(f"solver_opts: {exc}") from exc
    except _SOLVER_EXCEPTIONS as exc:
        return "solver_error", None, None, f"{solver} raised {type(exc).__name__}: {exc}"
    note = f"{solver} status {problem.status}"
    if W.value is None or not np.isfinite(W.value).all():
        return "solver_error", None, None, f"{note}, no finite point"
    lam = constraint.dual_value
    lam = np.full(len(A), np.nan) if lam is None else np.ravel(lam).astype(np.float64)
    return None, np.asarray(W.value, dtype=np.float64), lam, note


def _check_options(norm, p, solver, tol, solver_opts) -> tuple[float | None, str | None, dict]:
    if norm not in NORMS:
        raise ValueError(f"norm: expected one of {NORMS}, got {norm!r}")
    if norm == "lp":
        p = _lp_exponent(p)
    elif p is not None:
        raise ValueError(f"p: only the 'lp' norm takes an exponent, got p={p!r} for {norm!r}")
    if not (_as_real(tol) or 0) > 0:
        raise ValueError(f"tol: must be positive, got {tol!r}")
    if solver is not None and solver not in cp.installed_solvers():
        raise ValueError(f"solver: {solver!r} is not installed ({cp.installed_solvers()})")
    if norm != "fro" and solver is None:
        solver = DEFAULT_SOLVER
    return p, solver, dict(solver_opts or {})


def norm_svm(
    X,
    Z,
    alpha,
    norm: str = "fro",
    *,
    p: float | None = None,
    solver: str | None = None,
    tol: float = DEFAULT_TOL,
    solver_opts: dict | None = None,
) -> NormSVM:
    """The certified attention SVM min ‖W‖_⋄ s.t. (x_{iα_i} − x_it)ᵀ W z_i ≥ 1 (spec §1.4).

    ``norm``: "fro" (``solver=None``: the certified QP oracle `models.oracles.svm.att_svm`; a named
    solver solves the SOCP with cvxpy instead), "nuc" (SDP) or "lp" with exponent ``p``
    (1 < p < ∞); the cvxpy solver is always named, Clarabel by default, ``solver_opts`` passed
    through. The certificate tolerance is ``tol`` for the oracle and max(tol, CONIC_TOL) for
    cvxpy solves. Bad inputs raise ValueError naming the field; numerical failures never raise
    but come back as "inaccurate" or "solver_error" (and are reported to models.numerics.failures).
    For the nuclear norm the optimum may be non-unique (spec F8): "optimal" certifies the value
    and the normalized margin, not W's direction.
    """
    start = time.perf_counter()
    X, Z, alpha = _as_instance(X, Z, alpha)
    p, solver, opts = _check_options(norm, p, solver, tol, solver_opts)
    A, labels = _rows(X, Z, alpha)
    labels = tuple(labels)
    d = X.shape[2]

    def answer(status, W, duals, cert, reason, used, reported=False):
        result = _answer(norm, p, status, W, duals, cert, reason, used, start, A, labels)
        if status in FAILED and not reported:
            failures.report(failures.SVM_ORACLE, status, reason)
        return result

    if len(A) == 0:
        W, lam = np.zeros((d, d)), np.zeros(0)
        cert = certify(A, W, lam, 0.0, norm, p, tol)
        return answer("optimal", W, lam, cert, "no constraints: W = 0", "none")
    zero = _zero_rows(A)
    if zero.any():
        k = int(np.flatnonzero(zero)[0])
        reason = f"row {labels[k]} reads 0 ≥ 1 (a token equal to the selected one, or z_i = 0)"
        return answer("infeasible", None, zero.astype(np.float64), None, reason, "none")
    lp = _feasibility_lp(A)
    note = ""
    if lp.status == 2:
        y, why = _farkas(A, tol)
        status = "infeasible" if y is not None else "inaccurate"
        return answer(status, None, y, None, f"feasibility LP: {lp.message}; {why}", "HiGHS (LP)")
    if lp.status != 0:
        note = f"feasibility LP inconclusive ({lp.message}); "

    if norm == "fro" and solver is None:
        status, W, lam, why, used = _solve_fro_oracle(X, Z, alpha, A, tol)
        cert_tol = tol
        if status != "optimal":  # the oracle reported its own failure
            return answer(status, W, lam, None, note + why, used, reported=True)
    else:
        status, W, lam, why = _solve_conic(A, d, norm, p, solver, opts)
        used, cert_tol = solver, max(tol, CONIC_TOL)
        if status is not None:
            return answer(status, W, lam, None, note + why, used)
    cert = certify(A, W, lam, matrix_norm(W, norm, p), norm, p, cert_tol)
    if not cert.ok:
        failing = ", ".join(f"{k}={cert.residuals[k]:.2e}" for k in cert.failing)
        reason = f"{note}{why}; certificate fails: {failing} > tol {cert_tol:.0e}"
        return answer("inaccurate", W, lam, cert, reason, used)
    reason = f"{note}{why}; certified ({cert.summary()})"
    return answer("optimal", W, lam, cert, reason, used)


# --------------------------------------------------------------------------------------------
# The nuclear SVM's optimal face
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class FaceFit:
    """How near W lies to the optimal face of the nuclear SVM (`nuclear_face_fit`).

    ``corr_lower`` ≤ best ≤ ``corr_upper``, best = max(0, max_{M ∈ face} ⟨W, M⟩/(‖W‖_F‖M‖_F)):
    the lower bound is the correlation of ``member`` (a checked member of the face, scaled to
    min margin 1; None when no member was checked), the upper a dual bound. Both are certified
    whatever the status. ``corr``: the best, = ``corr_lower``, when the bracket is at most
    ``tol`` wide (status "optimal"), else NaN. ``distance``: the Frobenius distance from
    W/‖W‖_F to the cone over the face, √(1 − corr²), computed as ‖Ŵ − corr·M/‖M‖_F‖_F (NaN
    unless optimal). ``margin_ratio``: min margin of W/‖W‖_⋆ over the optimum's 1/opt, = 1
    exactly when W's direction is nuclear-optimal (no solver). ``status``: "optimal",
    "bracketed" (certified but wider than ``tol``: an answer, not a failure; it decides every
    threshold outside the bracket), "solver_error" (no usable point: the bracket is the known
    member's, or [0, 1]) or "infeasible" (a row reads 0 ≥ 1).
    """

    status: str
    corr: float
    corr_lower: float
    corr_upper: float
    distance: float
    margin_ratio: float
    member: np.ndarray | None
    reason: str
    solver: str
    seconds: float

    def __post_init__(self):
        checked_outcome(self.status, self.reason, FACE_STATUSES)

    @property
    def ok(self) -> bool:
        return self.status == "optimal"

    def decides(self, threshold: float) -> bool | None:
        """Whether best ≥ ``threshold``, read from the certified bracket alone: True when the
        lower bound reaches it, False when the upper bound is below it, None in between (the
        bracket cannot say; an "optimal" one is then at most ``tol`` from the threshold)."""
        if self.corr_lower >= threshold:
            return True
        if self.corr_upper < threshold:
            return False
        return None


#: Rounding allowed between a checked member's correlation and the dual bound above it.
_CROSSED = 1e-9


def _face_dual_bound(A: np.ndarray, W_hat: np.ndarray, lam: np.ndarray, c: float) -> float:
    """min(1, √Σ_k (σ_k(Ŵ + mat(Aᵀλ)) − Σλ/c)₊²): for any λ ≥ 0, an upper bound on ⟨Ŵ, M⟩ over
    {‖M‖_F ≤ 1, A vec M ≥ t, ‖M‖_⋆ ≤ c·t, t ≥ 0} (`nuclear_face_fit`); 1 = ‖Ŵ‖_F is λ = 0."""
    d = W_hat.shape[0]
    lam = np.where(np.isfinite(lam), np.maximum(lam, 0.0), 0.0)
    sigma = np.linalg.svd(W_hat + (A.T @ lam).reshape(d, d), compute_uv=False)
    bound = float(np.sqrt(np.sum(np.maximum(sigma - lam.sum() / c, 0.0) ** 2)))
    return min(1.0, bound)


def nuclear_face_fit(
    X,
    Z,
    alpha,
    value: float,
    W,
    *,
    known=None,
    slack: float = FACE_SLACK,
    solver: str | None = None,
    tol: float = FACE_TOL,
    solver_opts: dict | None = None,
) -> FaceFit:
    """The best correlation of W with a member of the nuclear SVM's optimal face, certified.

    The face is F = {M : A vec M ≥ 1, ‖M‖_⋆ ≤ c}, c = (1 + slack)·``value`` (``value``: the
    certified optimum ‖W^mm_⋆(α)‖_⋆, which the caller has already solved; it is not solved
    again). F is convex and excludes 0, and a correlation does not see scale, so the best
    correlation over F is the best over its cone K = {tM : M ∈ F, t ≥ 0} = {M : A vec M ≥ t,
    ‖M‖_⋆ ≤ c·t, t ≥ 0}, a closed convex cone. With Ŵ = W/‖W‖_F,

        (P)   v = max ⟨Ŵ, M⟩   s.t.   ‖M‖_F ≤ 1,  M ∈ K

    is convex (an SDP of size 2d), and v = max(0, best correlation) = ‖Π_K(Ŵ)‖_F: if the best is
    positive its maximiser has ‖M‖_F = 1; M = 0 gives 0. Its maximiser is the direction of the
    projection Π_K(Ŵ), the member nearest to W, and the distance from Ŵ to K is √(1 − v²).
    A linear functional maximised over F itself (not its cone) returns an extreme point of F,
    not the member nearest to W: that reading scores a W inside a non-unique face below 1.

    Certificate, computed here: a lower bound is the correlation of a checked member (the
    solver's M, and ``known`` when given, e.g. the nuclear SVM's own solution; each over its
    min margin, its nuclear norm ≤ c·(1 + tol) by SVD; the better one counts). An upper bound
    holds for every λ ≥ 0: for M ∈ K and ‖Y‖_2 ≤ μ = Σλ/c, ⟨mat(Aᵀλ), M⟩ ≥ tΣλ ≥ μ‖M‖_⋆ ≥
    ⟨Y, M⟩, so ⟨Ŵ, M⟩ ≤ ⟨Ŵ + mat(Aᵀλ) − Y, M⟩ ≤ ‖Ŵ + mat(Aᵀλ) − Y‖_F, and the best Y (singular
    values clipped at μ) leaves √Σ(σ_k(Ŵ + mat(Aᵀλ)) − μ)₊². λ is the solver's dual of
    A vec M ≥ t. Both bounds are taken on the face at c·(1 + e), e ≤ ``tol`` the member's norm
    excess (rounding; 0 when it lies inside); "optimal" means the bracket is ≤ ``tol`` wide.
    The distance, from the member, is within ≈ √(2·tol) of the true one. A value below the
    true optimum empties the face: v = 0.

    One solve (``solver=None``: Clarabel at its defaults), no retry: where the face is thin (a
    unique SVM: F is a sliver of relative width ``slack`` around it) the best correlation moves
    like √slack, and a member's norm excess of 1e-7 already moves it by ~1e-4, so Clarabel's
    bracket can be wider than ``tol``: the answer is then "bracketed", certified bounds that
    decide every threshold outside them (`FaceFit.decides`).

    Bad inputs raise ValueError naming the field; a solver that returns no usable point gives
    "solver_error" (reported to models.numerics.failures); "bracketed" is an answer and is not
    reported.
    """
    start = time.perf_counter()
    X, Z, alpha = _as_instance(X, Z, alpha)
    d = X.shape[2]
    W = as_float_array(W, "W", 2)
    if W.shape != (d, d):
        raise ValueError(f"W: expected shape {(d, d)}, got {W.shape}")
    if not W.any():
        raise ValueError("W: the zero matrix has no direction")
    if known is not None:
        known = as_float_array(known, "known", 2)
        if known.shape != (d, d):
            raise ValueError(f"known: expected shape {(d, d)}, got {known.shape}")
    opt = _as_real(value)
    if opt is None or not 0 < opt < math.inf:
        raise ValueError(f"value: expected the positive nuclear optimum, got {value!r}")
    if not (_as_real(slack) is not None and 0 <= slack < math.inf):
        raise ValueError(f"slack: expected slack ≥ 0, got {slack!r}")
    chosen = solver is not None  # a caller's own solver is not second-guessed
    _, solver, opts = _check_options("nuc", None, solver, tol, solver_opts)
    A, labels = _rows(X, Z, alpha)
    if len(A) == 0:
        raise ValueError("alpha: no constraints (T = 1): the nuclear SVM is 0 and has no face")
    W_scaled = W / np.abs(W).max()
    ratio = float((A @ W_scaled.ravel()).min()) / matrix_norm(W_scaled, "nuc") * opt
    W_hat = W_scaled / np.linalg.norm(W_scaled)
    c = (1.0 + slack) * opt

    def answer(status, lower, upper, member, reason, used):
        ok = status == "optimal"
        corr, distance = math.nan, math.nan
        if ok:
            corr = lower
            distance = 1.0 if member is None else _ray_distance(W_hat, member, lower)
        if status in FAILED:
            failures.report(failures.SVM_ORACLE, f"nuclear face fit {status}", reason)
        seconds = time.perf_counter() - start
        return FaceFit(status, corr, lower, upper, distance, ratio, member, reason, used, seconds)

    zero = _zero_rows(A)
    if zero.any():
        k = int(np.flatnonzero(zero)[0])
        why = f"row {labels[k]} reads 0 ≥ 1"
        return answer("infeasible", math.nan, math.nan, None, why, "none")
    given = None
    if known is not None:
        given = _face_member(A, known, W_hat, c, tol)
    result = _face_solve(A, W_hat, c, solver, opts, tol, given)
    if result[0] == "solver_error" and not chosen:
        # Clarabel gave no usable dual (seen under baseline SIMD kernels, where the same
        # instance solves cleanly with AVX2: the numerics matrix of issue 21): one retry with
        # SCS at a moderate accuracy. Its dual bounds the face as rigorously as Clarabel's
        # (the bound is checked here, whatever the solver), only perhaps more loosely: a wide
        # bracket comes back "bracketed", never a failure made to look decided.
        retry = _face_solve(A, W_hat, c, cp.SCS, FACE_RETRY_SCS, tol, given)
        if retry[0] != "solver_error":
            status, lower, upper, member, note, used = retry
            result = (status, lower, upper, member, f"{result[4]}; retried: {note}", used)
    return answer(*result)


def _face_solve(A, W_hat, c, solver, opts, tol, given) -> tuple:
    """One solve of (P) (`nuclear_face_fit`) and its bracket: (status, lower, upper, member,
    note, solver). Quantities are O(1): s = c·t, so ‖M‖_⋆ ≤ s and (c·A) vec M ≥ s. ``given``:
    `_face_member` of a known member, or None."""
    d = W_hat.shape[0]
    M = cp.Variable((d, d))
    s = cp.Variable(nonneg=True)
    margins = (c * A) @ cp.vec(M, order="C") >= s
    problem = cp.Problem(
        cp.Maximize(cp.sum(cp.multiply(W_hat, M))),
        [margins, cp.normNuc(M) <= s, cp.norm(cp.vec(M, order="C"), 2) <= 1],
    )
    lam, note = None, f"{solver}"
    try:
        with warnings.catch_warnings():  # the status says it, and the certificate decides
            warnings.filterwarnings("ignore", message="Solution may be inaccurate")
            problem.solve(solver=solver, **opts)
        note = f"{solver} status {problem.status}"
        if M.value is not None and np.isfinite(M.value).all():
            solved = _face_member(A, M.value, W_hat, c, tol)
        else:
            solved = (0.0, None, 0.0, "no finite point")
        if margins.dual_value is not None:
            lam = c * np.ravel(margins.dual_value).astype(np.float64)  # dual of A vec M ≥ t
    except TypeError as exc:
        raise ValueError(f"solver_opts: {exc}") from exc
    except _SOLVER_EXCEPTIONS as exc:
        note = f"{solver} raised {type(exc).__name__}: {exc}"
        solved = (0.0, None, 0.0, "no point")
    lower, member, excess, why = solved
    if given is not None and given[1] is not None and given[0] > lower:
        lower, member, excess, why = given[0], given[1], given[2], f"{why}; known {given[3]}"
    upper = 1.0
    if lam is not None:  # the bound on the face that holds the member
        upper = _face_dual_bound(A, W_hat, lam, c * (1.0 + excess))
    if upper < lower - _CROSSED:  # a certified lower bound above a certified upper one
        why = f"{why}; the bounds cross ({lower:.9f} > {upper:.9f})"
        return "solver_error", lower, upper, member, f"{note}; {why}", solver
    upper = max(upper, lower)  # rounding
    width = upper - lower
    if lam is None:  # no bound but the trivial one
        return "solver_error", lower, upper, member, f"{note}; {why}; no dual", solver
    status = "optimal" if width <= tol else "bracketed"
    return status, lower, upper, member, f"{note}; {why}; bracket {width:.1e}", solver


def _face_member(A, M, W_hat, c, tol) -> tuple[float, np.ndarray | None, float, str]:
    """(max(0, corr(Ŵ, member)), member or None, its norm excess ‖member‖_⋆/c − 1 clipped at 0,
    note) for M scaled to min margin 1."""
    M = np.asarray(M, dtype=np.float64)
    low = float((A @ M.ravel()).min())
    if not low > 0:
        return 0.0, None, 0.0, f"no member (the point has min margin {low:.1e})"
    member = M / low
    excess = matrix_norm(member, "nuc") / c - 1.0
    if not excess <= tol:
        return 0.0, None, 0.0, f"no member (the point exceeds the face by {excess:.1e})"
    corr = float(np.sum(W_hat * member) / np.linalg.norm(member))
    if not corr > 0:
        return 0.0, None, 0.0, f"the best member has corr {corr:.2e} ≤ 0"
    return corr, member, max(excess, 0.0), f"member checked (norm excess {excess:.1e})"


def _ray_distance(W_hat: np.ndarray, member: np.ndarray, corr: float) -> float:
    """‖Ŵ − corr·M/‖M‖_F‖_F: the distance from Ŵ to the ray of M (√(1 − corr²), without the
    cancellation of 1 − corr² near 1)."""
    return float(np.linalg.norm(W_hat - corr * member / np.linalg.norm(member)))
