"""The linear NTP decoder of 2402.18551 (spec ntp.md §1.3, §2.11–2.14).

m distinct contexts with embeddings h̄_j (the columns of H, d×m), weights π̂_j and next-token
distributions p̂_j (the rows of P, m×V), supports S_j = {z : p̂_jz > 0} (exact zeros decide);
decoder W ∈ R^{V×d}, logits W h̄_j. Matrices are vectorised row-major: the row of a
constraint (e_z − e_v)ᵀ W h̄_j is vec((e_z − e_v) h̄_jᵀ).

- CE(W) = −Σ_j π̂_j Σ_{z∈S_j} p̂_jz log softmax(W h̄_j)_z = H + KL ≥ H (the entropy floor).
- Compatible (Def. 1): the log-odds equations (e_z − e_a)ᵀ W h̄_j = log(p̂_jz/p̂_ja), a the
  anchor (smallest token) of S_j, have a solution; W* is the minimum-norm one, which spans F.
- F = span{(e_z − e_z') h̄_jᵀ : z, z' ∈ S_j}, spanned by the anchored rows.
- Separable (Def. 2) and the NTP-SVM W^mm (Def. 3): min ‖W‖ s.t. equality on the anchored
  rows and (e_a − e_v)ᵀ W h̄_j ≥ 1 for v ∉ S_j (given the equalities, one in-support token per
  context suffices: mV − Σ|S_j| margin rows). Solved and certified by `models.ntp.qp`; its
  "optimal" certifies separability, its Farkas pair non-separability.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from scipy.special import logsumexp

from models.ntp.attention import softplus
from models.ntp.qp import KKT_TOL, EqualityQPSolution, orthonormal_rows, project, solve_equality_qp
from models.oracles.svm import as_float_array

#: Compatibility: the log-odds least-squares residual (max abs) below which a solution exists
#: (spec §2.11 / §6.2: "lstsq residual ≤ 1e-9 means compatible").
COMPATIBLE_TOL = 1e-9
#: Each row of P must sum to 1 within this.
PROBABILITY_TOL = 1e-9
NEG_INF = -math.inf


@dataclass(frozen=True, eq=False)
class LinearNTP:
    """A validated instance: H (d×m, columns = contexts), P (m×V), pi (m,)."""

    H: np.ndarray
    P: np.ndarray
    pi: np.ndarray

    @property
    def dim(self) -> int:
        return self.H.shape[0]

    @property
    def m(self) -> int:
        return self.H.shape[1]

    @property
    def vocab(self) -> int:
        return self.P.shape[1]

    @cached_property
    def support(self) -> np.ndarray:
        """(m, V) boolean mask of S_j."""
        return self.P > 0

    # ---------------------------------------------------------------- loss and gradient

    def entropy(self) -> float:
        """H = −Σ_j π̂_j Σ_{z∈S_j} p̂_jz log p̂_jz: the infimum of CE (spec §1.3)."""
        P = self.P
        logP = np.log(np.where(self.support, P, 1.0))
        return float(-(self.pi * (P * logP).sum(axis=1)).sum())

    def _check_W(self, W) -> np.ndarray:
        W = as_float_array(W, "W", 2)
        if W.shape != (self.vocab, self.dim):
            raise ValueError(f"W: expected shape {(self.vocab, self.dim)}, got {W.shape}")
        return W

    def _parts(self, W) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(logits (m, V), LSE over S_j, LSE off S_j (−inf if S_j = V), LSE over all)."""
        logits = (self._check_W(W) @ self.H).T
        on = logsumexp(np.where(self.support, logits, NEG_INF), axis=1)
        off = logsumexp(np.where(self.support, NEG_INF, logits), axis=1)
        return logits, on, off, np.logaddexp(on, off)

    def loss(self, W) -> float:
        """CE(W), each context's term as Σ_S p̂_z (LSE_all − L_z) (never p̂·log of a 0)."""
        logits, _, _, total = self._parts(W)
        per = np.where(self.support, self.P * (total[:, None] - logits), 0.0).sum(axis=1)
        return float(self.pi @ per)

    def excess_loss(self, W) -> float:
        """CE(W) − H = Σ_j π̂_j [KL(p̂_j ‖ q^S_j) + softplus(LSE_off − LSE_S)] (spec §6.4):
        accurate when it is far below the rounding of CE and H themselves."""
        logits, on, off, _ = self._parts(W)
        logP = np.log(np.where(self.support, self.P, 1.0))
        kl = np.where(self.support, self.P * (logP - (logits - on[:, None])), 0.0).sum(axis=1)
        return float(self.pi @ (kl + softplus(off - on)))

    def gradient(self, W) -> np.ndarray:
        """∇CE = Σ_j π̂_j (q_j − p̂_j) h̄_jᵀ, with q_z − p̂_z = (q^S_z − p̂_z) − q^S_z ε_j on S_j
        and q_z off it (q^S the support-restricted softmax, ε_j the off-support mass), so the
        small off-support terms are never the difference of two numbers near 1 (spec §6.4)."""
        logits, on, off, total = self._parts(W)
        qS = np.exp(logits - on[:, None])
        eps = np.exp(off - total)
        coef = np.where(
            self.support, (qS - self.P) - qS * eps[:, None], np.exp(logits - total[:, None])
        )
        return (coef * self.pi[:, None]).T @ self.H.T

    # --------------------------------------------------------------- rows and subspaces

    @cached_property
    def _equalities(self) -> tuple[np.ndarray, np.ndarray]:
        """Anchored rows vec((e_z − e_a) h̄_jᵀ), z ∈ S_j \\ {a}, and targets log(p̂_jz/p̂_ja)."""
        rows, targets = [], []
        for j in range(self.m):
            members = np.flatnonzero(self.support[j])
            a = members[0]
            for z in members[1:]:
                rows.append(self._row(j, z, a))
                targets.append(math.log(self.P[j, z] / self.P[j, a]))
        return np.array(rows).reshape(len(rows), self.vocab * self.dim), np.array(targets)

    @cached_property
    def _margins(self) -> np.ndarray:
        """Rows vec((e_a − e_v) h̄_jᵀ) for v ∉ S_j, a the anchor of S_j."""
        rows = [
            self._row(j, np.flatnonzero(self.support[j])[0], v)
            for j in range(self.m)
            for v in np.flatnonzero(~self.support[j])
        ]
        return np.array(rows).reshape(len(rows), self.vocab * self.dim)

    def _row(self, j: int, z: int, v: int) -> np.ndarray:
        M = np.zeros((self.vocab, self.dim))
        M[z] += self.H[:, j]
        M[v] -= self.H[:, j]
        return M.ravel()

    @cached_property
    def F_basis(self) -> np.ndarray:
        """Orthonormal basis of F (rows, vec of V×d matrices)."""
        return orthonormal_rows(self._equalities[0])

    @property
    def dim_F(self) -> int:
        return self.F_basis.shape[0]

    def project_F(self, W) -> np.ndarray:
        """P_F(W)."""
        return project(self.F_basis, self._check_W(W))

    # ------------------------------------------------------------------------- oracles

    def compatibility(self) -> Compatibility:
        """Def. 1 and W*: the minimum-norm least-squares solution of the log-odds equations
        (it lies in F, the equations' row space); compatible iff it solves them."""
        A, r = self._equalities
        shape = (self.vocab, self.dim)
        if len(r) == 0:
            return Compatibility(True, np.zeros(shape), 0.0)
        w = np.linalg.lstsq(A, r, rcond=None)[0]
        residual = float(np.abs(A @ w - r).max())
        ok = residual <= COMPATIBLE_TOL
        return Compatibility(ok, w.reshape(shape) if ok else None, residual)

    def ntp_svm(self, *, tol: float = KKT_TOL) -> NTPSVM:
        """W^mm (Def. 3), KKT-certified; "infeasible" (with a Farkas pair) = not separable."""
        sol = solve_equality_qp(self._margins, self._equalities[0], tol=tol)
        W = None if sol.w is None else sol.w.reshape(self.vocab, self.dim)
        return NTPSVM(sol.status, W, sol, len(self._margins) == 0)

    def floor_bound(self, R: float, W_star: np.ndarray) -> float:
        """The proof's constant in CE(W* + R·W^mm) ≤ H + C e^{−R} (spec §2.11):
        C = V e^{‖W*‖ M}, M = √2 max_j ‖h̄_j‖; returns C e^{−R} in log space then exp."""
        M = math.sqrt(2) * float(np.linalg.norm(self.H, axis=0).max())
        return math.exp(math.log(self.vocab) + float(np.linalg.norm(W_star)) * M - R)


@dataclass(frozen=True, eq=False)
class Compatibility:
    """``compatible``: the log-odds residual (max abs) is ≤ COMPATIBLE_TOL; then W* is set."""

    compatible: bool
    W_star: np.ndarray | None
    residual: float


@dataclass(frozen=True, eq=False)
class NTPSVM:
    """W^mm's outcome; ``vacuous``: every support is the whole vocabulary (no margin row)."""

    status: str
    W: np.ndarray | None
    solution: EqualityQPSolution
    vacuous: bool

    @property
    def ok(self) -> bool:
        return self.status == "optimal"

    @property
    def separable(self) -> bool | None:
        """Def. 2, decided with a certificate either way; None when the oracle failed."""
        return {"optimal": True, "infeasible": False}.get(self.status)


def linear_ntp(H, P, pi) -> LinearNTP:
    """Validate (H: d×m, P: m×V rows on the simplex, pi: m positive weights) and freeze."""
    H = as_float_array(H, "H", 2)
    P = as_float_array(P, "P", 2)
    pi = as_float_array(pi, "pi", 1)
    d, m = H.shape
    if m == 0 or d == 0:
        raise ValueError(f"H: expected a non-empty d×m matrix, got shape {H.shape}")
    if P.shape[0] != m:
        raise ValueError(f"P: expected {m} rows (one per context, H's columns), got {P.shape[0]}")
    if P.shape[1] < 2:
        raise ValueError(f"P: expected a vocabulary of at least 2 tokens, got {P.shape[1]}")
    if (P < 0).any():
        raise ValueError("P: probabilities must be ≥ 0")
    bad = np.flatnonzero(np.abs(P.sum(axis=1) - 1) > PROBABILITY_TOL)
    if bad.size:
        raise ValueError(f"P: row {bad[0]} sums to {P[bad[0]].sum():.12g}, not 1")
    if pi.shape != (m,):
        raise ValueError(f"pi: expected {m} weights, got shape {pi.shape}")
    if not (pi > 0).all():
        raise ValueError("pi: context weights must be > 0")
    return LinearNTP(H, P, pi)
