"""The offset of gradient flow from its limiting ray, relaxed exactly (issue 23; spec maxmargin
§1.8, the flow's asymptotics).

Far along the ray of p^mm = ATT-SVM(α), with û = p^mm/‖p^mm‖ and μ = 1/‖p^mm‖, write
p = λû + ρ with ρ ⊥ û. Each non-selected token keeps softmax mass s_it ≈ e^{−δ_itᵀp},
δ_it = k_iα_i − k_it, so to first order in those masses

    −∇L(p) ≈ Σ_it w_it e^{−δ_itᵀp} δ_it,    w_it = −ℓ'(γ_iα_i)(γ_iα_i − γ_it)/n,

the gradient of −F, F(p) = Σ w_it e^{−δ_itᵀp}. A support token has δ_itᵀû = μ, every other
token δ_itᵀû > μ, so F = e^{−λμ}·[G(ρ) + O(e^{−λ·gap})] with G(ρ) = Σ_support w_it e^{−δ_itᵀρ}.
The flow moves ρ along −∇_ρG (times e^{−λμ}): ρ relaxes to the minimiser ρ* of G on û⊥, the
quasi-equilibrium of the offset, and there −∇L is parallel to û up to the neglected terms.

Why it matters: the tracer's heading test (1 − cos(−∇L(p), p^mm) ≤ target) needs ρ to about
target-relative accuracy, while an ODE solver controls the error of p to rtol·‖p‖; beyond
‖p‖ ≈ 1e6 the heading is never resolved (docs/performance.md, "Limits found"). Here ρ* comes
from a convex problem instead of the integration: damped Newton on h(ρ) = log G(ρ) (a
log-sum-exp of linear forms, so the weights' dynamic range costs nothing) in an orthonormal
basis of S = span{P_⊥δ_it : support}, the only directions G depends on. G is coercive on S when
every support token carries a positive weight and p^mm = Σ λ_it δ_it with λ_it > 0 on the
support (strict complementarity): then for ρ ∈ S, Σ λ_it δ_itᵀρ = p^mmᵀρ = 0 forces some
δ_itᵀρ < 0 unless all vanish. The answer is certified like ``dynamics.finite_minimiser``:
Newton converged (step ≤ 1e-12), gradient of h ≤ 1e-10, Hessian of h positive definite on S.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from models.problems.attention import PromptProblem

#: A token is a support vector of p^mm when its margin δ_itᵀp^mm is within this of 1 (the
#: oracle's KKT certificate is at 1e-7; a non-support margin that close to 1 is a degenerate
#: SVM, where the split below is not meaningful either way).
SUPPORT_TOL = 1e-6
#: Newton on h stops when its step is below this (in S's orthonormal coordinates, relative to
#: max(1, ‖ρ‖)) and certifies when ‖∇h‖ is below GRAD_TOL.
STEP_TOL, GRAD_TOL, MAX_STEPS = 1e-12, 1e-10, 100
#: The Hessian of h on S must have smallest/largest eigenvalue above this.
EIG_REL = 1e-12


@dataclass(frozen=True)
class Equilibrium:
    """The offset's quasi-equilibrium ρ* (d,) ⊥ û, or why there is none (``rho`` None).

    support: (n, T) mask of the support tokens; weights: their w_it; basis: an orthonormal
    basis (d, r) of S, the directions G depends on (ρ* lies in S; an offset's component
    outside S feels only the non-support tokens' pull, O(e^{−λ·gap}), and is left as it is);
    steps: Newton steps; grad_norm: ‖∇h(ρ*)‖; min_eig / max_eig: the extreme eigenvalues of
    ∇²h on S."""

    rho: np.ndarray | None
    reason: str
    support: np.ndarray
    weights: np.ndarray
    basis: np.ndarray | None = None
    steps: int = 0
    grad_norm: float = math.nan
    min_eig: float = math.nan
    max_eig: float = math.nan

    @property
    def ok(self) -> bool:
        return self.rho is not None


def _loss_slopes(problem: PromptProblem, alpha: np.ndarray) -> np.ndarray:
    """ℓ'(γ_iα_i) for each input (the output's limit when input i attends only to α_i)."""
    gam = problem.scores.detach().cpu().numpy()
    top = torch.from_numpy(gam[np.arange(len(alpha)), alpha])
    return problem.loss.deriv(top).numpy()


def equilibrium(problem: PromptProblem, alpha, p_mm, lam: float = 0.0) -> Equilibrium:
    """ρ* for the ray of ``p_mm`` = ATT-SVM(α) (the oracle's solution) at λ = ``lam`` along
    it, or an Equilibrium whose ``rho`` is None and whose ``reason`` says why not.

    Each support token's weight carries its own e^{−λ(δ_itᵀû − μ)}: the oracle's p^mm meets
    the support margins to ~1e-12, not exactly, and at λμ ≈ 1e6 that residual would tilt the
    balance by e^{±1e-6·…}; with the factor, ρ* balances the forces the flow feels at that λ
    (and a token whose margin exceeds 1 by more than ~1/(λμ) fades out, as it should)."""
    keys = problem.keys.detach().cpu().numpy()
    gam = problem.scores.detach().cpu().numpy()
    n, T, d = keys.shape
    alpha = np.asarray(alpha, dtype=np.int64)
    x = np.asarray(p_mm, dtype=np.float64).reshape(d)
    norm = float(np.linalg.norm(x))
    rows = np.arange(n)
    delta = keys[rows, alpha][:, None, :] - keys  # (n, T, d)
    margins = delta @ x
    support = np.abs(margins - 1.0) <= SUPPORT_TOL
    support[rows, alpha] = False
    omega = problem.input_weights.detach().cpu().numpy()[:, None]  # 1/n: the mean
    weights = -_loss_slopes(problem, alpha)[:, None] * (gam[rows, alpha][:, None] - gam) * omega
    none = {"support": support, "weights": np.where(support, weights, 0.0)}
    if not norm > 0 or not np.isfinite(norm):
        return Equilibrium(None, "p^mm is 0 or not finite", **none)
    if (margins[~support & (np.arange(T) != alpha[:, None])] < 1.0 - SUPPORT_TOL).any():
        return Equilibrium(None, "p^mm violates a margin: not the SVM of α", **none)
    if not support.any():
        return Equilibrium(None, "no support token: nothing pulls the offset", **none)
    if (weights[support] <= 0).any():
        i, t = np.argwhere(support & (weights <= 0))[0]
        return Equilibrium(
            None,
            f"support token {t} of input {i} pushes the offset away (w = {weights[i, t]:.3g} ≤ 0:"
            " its score is not below the selected one's, so α is not locally optimal there)",
            **none,
        )
    u = x / norm
    D = delta[support]  # (m, d)
    P = D - np.outer(D @ u, u)  # P_⊥δ
    U, sing, _ = np.linalg.svd(P.T, full_matrices=False)
    rank = int((sing > 1e-12 * max(1.0, float(sing.max(initial=0.0)))).sum())
    logw = np.log(weights[support]) - lam * (D @ u - 1.0 / norm)
    B = U[:, :rank]  # orthonormal basis of S
    if rank == 0:  # every support δ is along û: the offset feels no force, ρ* = 0
        return Equilibrium(
            np.zeros(d), "every support difference is along p^mm", **none, basis=B, grad_norm=0.0
        )
    A = -(P @ B)  # h(z) = logsumexp(logw + A z)

    def parts(z):
        a = logw + A @ z
        top = a.max()
        e = np.exp(a - top)
        h = top + math.log(e.sum())
        pi = e / e.sum()
        g = A.T @ pi
        H = (A * pi[:, None]).T @ A - np.outer(g, g)
        return h, g, H

    z = np.zeros(rank)
    h, g, H = parts(z)
    steps, converged = 0, False
    while steps < MAX_STEPS:
        steps += 1
        try:
            step = np.linalg.solve(H, g)
        except np.linalg.LinAlgError:
            return Equilibrium(None, "singular Hessian on S: G is not strictly convex", **none)
        t = 1.0
        while True:  # backtracking: h is convex, a Newton direction descends
            h_new, g_new, H_new = parts(z - t * step)
            if h_new <= h - 1e-4 * t * float(g @ step) or t < 1e-12:
                break
            t *= 0.5
        z, h, g, H = z - t * step, h_new, g_new, H_new
        if t * float(np.linalg.norm(step)) <= STEP_TOL * max(1.0, float(np.linalg.norm(z))):
            converged = True
            break
    eigs = np.linalg.eigvalsh(H)
    grad_norm = float(np.linalg.norm(g))
    facts = {"steps": steps, "grad_norm": grad_norm, "min_eig": eigs[0], "max_eig": eigs[-1]}
    if not converged:
        return Equilibrium(
            None,
            f"Newton did not converge in {MAX_STEPS} steps "
            "(G not coercive on S: the offset drifts)",
            **none,
            **facts,
        )
    if grad_norm > GRAD_TOL or not eigs[-1] > 0 or eigs[0] <= EIG_REL * eigs[-1]:
        return Equilibrium(
            None,
            f"not certified: ‖∇h‖ = {grad_norm:.2e}, Hessian eigenvalues "
            f"[{eigs[0]:.2e}, {eigs[-1]:.2e}] on S",
            **none,
            **facts,
        )
    return Equilibrium(B @ z, "certified minimiser of G on S", **none, basis=B, **facts)


def relaxed_heading(problem: PromptProblem, eq: Equilibrium, p_mm, p) -> tuple:
    """(p', 1 − cos(−∇L(p'), p^mm)): the flow's heading at p once its offset has relaxed,
    p' = p with its component in S replaced by ρ* (its position along û and outside S kept),
    from the exact (log-space) gradient, at any ‖p‖ the engine reaches."""
    x = np.asarray(p_mm, dtype=np.float64).reshape(-1)
    u = x / np.linalg.norm(x)
    p = np.asarray(p, dtype=np.float64).reshape(-1)
    q = p - eq.basis @ (eq.basis.T @ p) + eq.rho
    field, log_norm = problem.flow_field_np(q)
    if log_norm == -math.inf:
        return q, 1.0
    return q, 0.5 * float(np.sum((field - u) ** 2))
