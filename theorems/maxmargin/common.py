"""What the claims of 2306.13596 share: the certified limit of a flow (`settle`), how a
limit is checked and recorded, GD on W, the regularization-path problem in key space, and the
runs of the paper's figures (which the claims check and plots.py draws)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

from models.flows.dynamics import Outcome, Trajectory, gd, ngd
from models.flows.joint import JointProblem, joint_ngd, relaxed_svm_for
from models.flows.regpath import local_reg_path_point, reg_path_point
from models.flows.wtrain import WProblem, w_ngd
from models.numerics.logspace import signed_logsumexp_np
from models.oracles.selection import global_opt, support_sets
from models.oracles.svm import SVMSolution, att_svm
from models.problems.attention import PromptProblem
from strategies.combinators import random_points
from strategies.instances import PromptInstance
from theorems import evidence

# The convergence machinery is shared by every paper: theorems.limits (re-exported here for the
# claims that still import it from this module).
from theorems.limits import (  # noqa: F401
    CONFIRM_FACTOR,
    DIRECTION_TOL,
    LOSS_GAP_TOL,
    SELECT_TOL,
    Limit,
    bounded_message,
    check_limit,
    conclude,
    follow,
    limit_name,
    record_outcome,
    settle,
    tie_sharing_message,
)

DTYPE = torch.float64


#: Theorem L cone scan (spec §2.3 Check): (R0, ε) from small to large; the theorem asserts
#: convergence for *some* ε and R0 depending on the data, so the cone narrows as R0 grows.
#: The spec's scan stops at R0 = 50; the search found data that needs more (a higher-scoring
#: non-support token at margin 1.17 next to a support margin of 1 pulls GD away from R0 = 50
#: and not from R0 = 100), so the scan goes on to 1000.
CONE_SCAN = (
    (2.0, 1e-2),
    (5.0, 3e-3),
    (10.0, 1e-3),
    (20.0, 3e-4),
    (50.0, 1e-4),
    (200.0, 1e-5),
    (1000.0, 1e-6),
)

#: Theorem L's existential form (MM-THM-L-CONE): the declared grid of cones, R0 from 2 to 1000
#: with ε narrowing as R0 grows (so each cone lies inside the one before it, and a cone that
#: works makes every later one work). The claim reports the smallest R0 from which every
#: drawn start, at that level and every later one, converges.
CONE_GRID = (
    (2.0, 1e-2),
    (5.0, 3e-3),
    (10.0, 1e-3),
    (20.0, 3e-4),
    (50.0, 1e-4),
    (100.0, 3e-5),
    (200.0, 1e-5),
    (500.0, 3e-6),
    (1000.0, 1e-6),
)


#: 1 − cos(p_R, p^mm) ≤ RP_K/c² at c = R/‖p^mm‖ (RP_K_DERIVATION).
RP_K_DERIVATION = (
    "asymptotically p_R = R·p̂^mm + ρ + o(1), so 1 − cos(p_R, p^mm) ≈ |ρ⊥|²/(2R²) "
    "(models/flows/regpath tests); |ρ⊥| is the log of score-gap and token-count ratios in units of "
    "‖p^mm‖, ≤ log(2/0.05 · 4) ≈ 5 on these strategies: c²(1 − cos) ≲ 5²/2 = 12.5, and K = 25 "
    "is 2× that for the o(1) at finite c. Calibration before the claims were written (these "
    "strategies, float64): worst c²(1 − cos) = 5.2 over 240 draws in dimension 2 (three losses, "
    "c ∈ {20, 50, 200}), 3.2 over 60 in dimension 3, 7.1 over 245 convex-head draws at c = 20. "
    "A path to another direction keeps 1 − cos at the angle between two SVMs, not ∝ 1/c²."
)
RP_K = evidence.tolerance(25.0, RP_K_DERIVATION)

#: Normalized GD on W (spec §2.8, §6): 1000 steps of lr 0.1 as in the official notebooks; the
#: calibration reached correlation 0.99999 and σ₂/σ₁ 5.5e-4. The thresholds are spec §6's
#: NGD row (cos ≥ 0.999) and 1e-2 for σ₂/σ₁ (20× the calibrated value).
W_STEPS = 1000


def descent_signs(inst: PromptInstance, points, center=None):
    """For each point: (sign of ⟨∇L(p), p^mm(opt)⟩ term by term, its cosine from the engine's
    log-space gradient, whether the engine's ScaledVector agrees on the sign)."""
    sol = att_svm(inst.keys, inst.alpha)
    if not sol.ok:
        evidence.reject(f"ATT-SVM(opt) {sol.status}")
    q = sol.x
    out = []
    for p in points:
        log_value, sign, log_top = directional_derivative(inst.problem, p, q, center)
        scaled = inst.problem.gradient_scaled(p)
        vec = scaled.vec.numpy()
        cos = (
            float(vec @ q) / (np.linalg.norm(vec) * np.linalg.norm(q)) if not scaled.is_zero else 0
        )
        decisive = abs(cos) > 1e-10
        out.append((sign, log_value - log_top, cos, (not decisive) or np.sign(cos) == sign))
    return out


def train_w(inst: PromptInstance, gen: torch.Generator):
    """W-NGD (lr 0.1, W_STEPS steps) from a small full-rank W(0) = 0.1·N(0, 1)."""
    traj, W0, _ = train_w_problem(inst, gen)
    return traj, W0


def train_w_problem(inst: PromptInstance, gen: torch.Generator):
    """``train_w``, also returning the W-training problem (its fixed p is ``problem.p``)."""
    problem, _ = w_problem(inst, gen)
    W0 = 0.1 * torch.randn(inst.d, inst.d, generator=gen, dtype=DTYPE)
    traj = w_ngd(problem, W0, lr=0.1, steps=W_STEPS, record_every=W_STEPS // 10)
    return traj, W0, problem


def undecided(out: Outcome) -> None:
    """Stop the example unless the engine reached a verdict on the direction."""
    if out.status == "inconclusive":
        evidence.inconclusive(out.reason)
    if out.status == "infeasible":  # the selection's SVM is infeasible: no direction to test
        evidence.inconclusive(out.reason)


def key_problem(inst: PromptInstance, loss: str | None = None) -> PromptProblem:
    """The instance's prompt problem restricted to the key coordinates that are not identically
    zero (W = diag(I, 0) of the decoupled form zeroes the score coordinate)."""
    keys = inst.keys
    used = keys.abs().amax(dim=(0, 1)) > 0
    return PromptProblem(keys[..., used], inst.scores, loss or inst.loss)


def rp_tol(c: float) -> float:
    """The tolerance on 1 − cos(p_R, p^mm) at R = c·‖p^mm‖ (see RP_K)."""
    return RP_K / c**2


def safe_cap(problem: PromptProblem, alpha, target) -> float:
    """A cap width ε for which the local path provably sees only α's own max-margin problem [D].

    For large R the sign of L − L_α at R·u is that of the smallest-margin token: negative if a
    token scoring above α_i has the smallest margin d_itᵀu (d_it = k_iα − k_it), positive if a
    lower-scoring one has. Support tokens score below α_i (Def. 2) and have margin 1/‖p^mm‖ at
    p̂ = p^mm/‖p^mm‖; a higher-scoring token t has d_tᵀp̂ > 1/‖p^mm‖ (it is not a support token).
    With δ = min_t d_tᵀp̂ − 1/‖p^mm‖ and Λ = max_t ‖d_t‖ + max_s ‖d_s‖ (t higher, s support),
    every u with ‖u − p̂‖ ≤ θ = δ/Λ keeps each higher token's margin above each support token's,
    so L > L_α on the whole cap and the max-margin direction over the lower-scoring tokens (p̂,
    by the KKT conditions) wins. Returns ε = 1 − cos(min(θ, 0.999·π/2)).
    """
    keys = problem.keys.numpy()
    g = problem.scores.numpy()
    n, T, _ = keys.shape
    rows = np.arange(n)
    d = keys[rows, alpha][:, None, :] - keys
    margins = d @ target.direction
    higher = g > g[rows, alpha][:, None]
    support = np.zeros((n, T), dtype=bool)
    for i, tokens in enumerate(support_sets(problem.keys, alpha, target)):
        support[i, tokens] = True
    widest = 0.999 * math.pi / 2  # local_reg_path_point needs ε < 1
    if not higher.any() or not support.any():
        return 1.0 - math.cos(widest)
    delta = float(margins[higher].min() - 1.0 / target.norm)
    lam = float(
        np.linalg.norm(d, axis=-1)[higher].max() + np.linalg.norm(d, axis=-1)[support].max()
    )
    if delta <= 0:
        evidence.reject("a higher-scoring token is a support token (α not locally optimal)")
    return 1.0 - math.cos(min(delta / lam, widest))


def directional_derivative(problem: PromptProblem, p, q, center=None) -> tuple[float, float, float]:
    """⟨∇L(p), q⟩ summed term by term in log space: (log|value|, sign, log of largest term).

    ⟨∇L, q⟩ = (1/n) Σ_i ℓ'(m_i) Σ_t c_it (k_it − k_ic)ᵀq with c_it = s_it Σ_u s_iu(γ_it − γ_iu)
    (spec §1.8). Any reference token c_i may be subtracted (Σ_t c_it = 0); ``center`` picks it
    (default: the top-logit token, as the engine does). Each term is formed as (log|·|, sign)
    and the sum is one signed log-sum-exp, so a projection of size 1e-3000 keeps its sign
    (a rescaled gradient vector, by contrast, drops components 1e-16 below its largest).
    """
    keys, gam = problem.keys.numpy(), problem.scores.numpy()
    p = np.asarray(p, dtype=np.float64)
    q = np.asarray(q, dtype=np.float64)
    n = keys.shape[0]
    logits = keys @ p
    top = logits.max(axis=-1, keepdims=True)
    log_s = logits - top - np.log(np.exp(logits - top).sum(-1, keepdims=True))
    ref = logits.argmax(-1) if center is None else np.asarray(center)
    pair = gam[:, :, None] - gam[:, None, :]
    with np.errstate(divide="ignore"):
        log_d, sign_d = signed_logsumexp_np(log_s[:, None, :] + np.log(np.abs(pair)), np.sign(pair))
        m = torch.from_numpy((np.exp(log_s) * gam).sum(-1))
        if problem.loss.strictly_decreasing:
            log_lp, sign_lp = problem.loss.log_neg_deriv(m).numpy(), -1.0
        else:
            lp = problem.loss.deriv(m).numpy()
            log_lp, sign_lp = np.log(np.abs(lp)), np.sign(lp)[:, None]
        proj = (keys - keys[np.arange(n), ref][:, None, :]) @ q
        log_terms = log_lp[:, None] + log_s + log_d + np.log(np.abs(proj))
    signs = sign_lp * sign_d * np.sign(proj)
    log_terms = np.where(signs != 0, log_terms, -np.inf)
    value, sign = signed_logsumexp_np(log_terms.ravel(), signs.ravel())
    return float(value) - math.log(n), float(sign), float(log_terms.max()) - math.log(n)


#: float64's unit roundoff, 2⁻⁵³.
UNIT_ROUNDOFF = 2.0**-53

#: How a float64 gradient of L errs, to first order in u, in terms of `GradientTerms`.
GRADIENT_ROUNDING_DERIVATION = (
    "first-order rounding analysis of ∇L = (1/n) Σ_it ℓ′(m_i)·s_it·(γ_it − m_i)·k_it, per "
    "coordinate, u = 2⁻⁵³, Γ = max|γ|: m_i = Σ_t s_it γ_it errs by ≤ T·u·Σ_t s_it|γ_it|; ℓ′(m_i) "
    "by ≤ (T·Γ + 4)·u relative (|ℓ″| ≤ |ℓ′| for the logistic and exponential losses, ℓ″ = 0 for "
    "the correlation); γ_it − m_i by ≤ (T + 1)·u·B_it, B_it = |γ_it| + Σ_u s_iu|γ_iu|; three "
    "products and a sum of n·T terms: error ≤ c_plain·u·S_plain with c_plain = n·T + T·(1 + Γ) + "
    "10 and S_plain = ‖(1/n) Σ_it |ℓ′(m_i)|·s_it·B_it·|k_it|‖ (coordinatewise absolute terms), "
    "given the rounded s. The engine's log-space form (models.problems.attention.gradient_log_np) "
    "sums w_it·(k_it − k_ir), w_it = ℓ′(m_i)·s_it·Σ_u s_iu(γ_it − γ_iu), r the top logit, its "
    "terms bounded by S_log = ‖(1/n) Σ_it |ℓ′(m_i)|·s_it·A_it·|k_it − k_ir|‖, A_it = Σ_u "
    "s_iu|γ_it − γ_iu|; it also rounds the logits (z = k·p errs by ≤ d·u·Z, Z = max_it Σ_j "
    "|k_itj p_j|) and forms s in log space, which errs by ε ≤ ((3d + 6)·Z + T + 5)·u relative "
    "(z − top − lse and the exp of logs of size ≤ 2Z + log T), entering w_it twice (s_it and the "
    "s_iu of A_it) and m_i once: error ≤ c_log·u·S_log, c_log = n·T + T·(1 + Γ) + 10 + (2 + Γ)·"
    "((3d + 6)·Z + T + 5). The cancellation κ = S/‖∇L‖ is computed per example from these "
    "magnitudes, not assumed."
)


@dataclasses.dataclass(frozen=True)
class GradientTerms:
    """The magnitudes a float64 gradient of L at one point is formed from
    (GRADIENT_ROUNDING_DERIVATION): the absolute terms' sums of the plain formula (``plain``,
    S_plain) and of the engine's log-space one (``logspace``, S_log), the logits' absolute terms
    (Z), the largest |score| (Γ) and the sizes."""

    plain: float
    logspace: float
    logits: float
    scores: float
    n: int
    T: int
    d: int

    def plain_error(self) -> float:
        """c_plain·u·S_plain: what one float64 pass of the plain formula may err by, given the
        rounded softmax (absolute, in the 2-norm)."""
        c = self.n * self.T + self.T * (1 + self.scores) + 10
        return c * UNIT_ROUNDOFF * self.plain

    def logspace_error(self) -> float:
        """c_log·u·S_log: what the engine's log-space gradient may err by from the exact ∇L at
        the float64 inputs (absolute, in the 2-norm)."""
        eps = (3 * self.d + 6) * self.logits + self.T + 5
        c = self.n * self.T + self.T * (1 + self.scores) + 10 + (2 + self.scores) * eps
        return c * UNIT_ROUNDOFF * self.logspace


def gradient_terms(problem: PromptProblem, p) -> GradientTerms:
    """`GradientTerms` of ``problem``'s gradient at ``p`` (float64; the terms are non-negative, so
    their sums are accurate to n·T·u relative). Meant for moderate logits (the softmax is formed
    directly: a gap beyond ~700 underflows its smallest terms to 0, which only drops terms)."""
    keys = problem.keys.detach().cpu().numpy()
    gam = problem.scores.detach().cpu().numpy()
    p = np.asarray(torch.as_tensor(p, dtype=DTYPE).detach().cpu().numpy(), dtype=np.float64)
    n, T, d = keys.shape
    z = keys @ p
    zmax = z.max(-1, keepdims=True)
    e = np.exp(z - zmax)
    s = e / e.sum(-1, keepdims=True)
    m = (s * gam).sum(-1)
    lp = np.abs(problem.loss.deriv(torch.from_numpy(m)).numpy())
    weight = lp[:, None] * s  # |ℓ′(m_i)|·s_it
    B = np.abs(gam) + (s * np.abs(gam)).sum(-1, keepdims=True)
    A = (s[:, None, :] * np.abs(gam[:, :, None] - gam[:, None, :])).sum(-1)
    r = z.argmax(-1)
    diffs = np.abs(keys - keys[np.arange(n), r][:, None, :])
    plain = np.einsum("it,itk->k", weight * B, np.abs(keys)) / n
    logspace = np.einsum("it,itk->k", weight * A, diffs) / n
    return GradientTerms(
        plain=float(np.linalg.norm(plain)),
        logspace=float(np.linalg.norm(logspace)),
        logits=float(np.abs(keys * p).sum(-1).max()),
        scores=float(np.abs(gam).max()),
        n=n,
        T=T,
        d=d,
    )


def w_problem(inst: PromptInstance, gen: torch.Generator) -> tuple[WProblem, torch.Tensor]:
    """A W-training problem on the instance's data: p fixed and random (unit norm)."""
    p = random_points(gen, inst.d, 1, 0.0, 0.0)[0]
    return WProblem(inst.X, inst.y, inst.v, p, loss=inst.loss), p


#: The notebooks' protocol (spec §4): normalized GD, lr 0.1; plots show 200 iterations with an
#: arrow every 10 steps.
LR = 0.1


MARK_EVERY = 10


PLOT_STEPS = 200


def inits(inst) -> list[torch.Tensor]:
    return [torch.tensor(p, dtype=DTYPE) for p in inst.meta["inits"]]


def mean_opt_prob(inst, ps: torch.Tensor) -> np.ndarray:
    """The averaged softmax probability of the optimal tokens along a path (k, d)."""
    logits = torch.einsum("itd,kd->kit", inst.keys, ps)
    probs = torch.softmax(logits, dim=-1)
    opt = torch.as_tensor(inst.alpha)
    return probs[:, torch.arange(inst.n), opt].mean(-1).numpy()


def figure_starts(inst: PromptInstance) -> list[PromptInstance]:
    """The instance once from each initialization its figure draws (``meta["inits"]``)."""
    return [dataclasses.replace(inst, p0=p0) for p0 in inits(inst)]


# ---- Figure 2 ------------------------------------------------------------------------------------


@dataclasses.dataclass
class Figure2Runs:
    """Figure 2's two runs from p(0) = 0: normalized GD (lr LR) and GD (η = 1), PLOT_STEPS
    steps each, with the averaged softmax on the optimal tokens along each."""

    ngd: Trajectory
    gd: Trajectory
    s_ngd: np.ndarray
    s_gd: np.ndarray


def figure2_runs(inst: PromptInstance) -> Figure2Runs:
    p0 = torch.zeros(inst.d, dtype=DTYPE)
    ngd_run = ngd(inst.problem, p0, lr=LR, steps=PLOT_STEPS)
    gd_run = gd(inst.problem, p0, eta=1.0, steps=PLOT_STEPS)
    return Figure2Runs(
        ngd_run, gd_run, mean_opt_prob(inst, ngd_run.ps), mean_opt_prob(inst, gd_run.ps)
    )


# ---- Figure 3 ------------------------------------------------------------------------------------

#: Figure 3's protocol (spec §4, ``joint_training.ipynb``): joint NGD, lr 0.1 on each separately
#: normalized gradient, 1000 iterations (the pictures show the first 200).
FIG3_STEPS = 1000


def figure3_run(inst: PromptInstance):
    """Figure 3's joint problem, its certified SVMs (v^mm, p^relax, p^full) and the joint NGD run
    from the instance's (v, p0)."""
    problem = JointProblem(inst.X, inst.y, inst.W)
    svms = relaxed_svm_for(problem, inst.alpha)
    for name, sol in (("v^mm", svms.v_mm), ("p^relax", svms.p_relax), ("p^full", svms.p_full)):
        evidence.solved(sol, name)
    run = joint_ngd(problem, inst.v, inst.p0, lr=LR, steps=FIG3_STEPS, alpha=inst.alpha)
    return svms, run


# ---- the regularization path on Figure 1(b) ------------------------------------------------------

#: Regularization-path picture: radii on the keys of Fig. 1(b) (‖p^mm‖ = 0.995); the
#: cap-restricted path of α is traced from R = 10 on.
RP_RADII = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


@dataclasses.dataclass
class RegPaths:
    """On one instance: the global regularization path p_R (R in RP_RADII), the local path of α
    restricted to a safe cap (R ≥ 10), and the global and local ATT-SVM solutions."""

    path: list
    caps: list
    glob: SVMSolution
    local: SVMSolution


def reg_paths(inst: PromptInstance) -> RegPaths:
    """The global path and α's cap path on ``inst``'s key problem; inconclusive unless every
    point is certified."""
    problem = key_problem(inst)
    glob = evidence.solved(att_svm(problem.keys, global_opt(problem.scores)), "ATT-SVM(opt)")
    local = evidence.solved(att_svm(problem.keys, inst.alpha), "ATT-SVM(α)")
    path = [reg_path_point(problem, R) for R in RP_RADII]
    eps = safe_cap(problem, inst.alpha, local)
    r0 = float(local.norm)
    caps = [local_reg_path_point(problem, inst.alpha, R, eps, r0=r0) for R in RP_RADII[3:]]
    for pt in path + caps:
        if not pt.certified:
            evidence.inconclusive("regularization-path point not certified")
    return RegPaths(path, caps, glob, local)
