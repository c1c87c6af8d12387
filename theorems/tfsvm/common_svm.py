"""What the static SVM claims of 2308.16898 share (claims_svm, claims_svm_controls): certified
solves, the relative rank with its ambiguity guard, the seeded random matrices of the
metamorphic relations, and the two fixed-seed experiments (the count of locally-optimal
selections of spec §2.5 and the svm_rank grid of spec §4.2), which the claims check and the
figures draw (plots_svm). Their strategies live in ``strategies.cross_svm``.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import torch

from models import failures
from models.normsvm import FAILED, RANK_REL, NormSVM, norm_svm, rank_rel
from models.selection import local_optimality
from models.svm import att_svm
from strategies.cross import official_cross_data
from strategies.instances import CrossInstance
from theorems import evidence

DTYPE = torch.float64

#: A singular value whose ratio σ_k/σ_1 lies in this band is too close to the rank threshold
#: RANK_REL = 1e-6 to count (the example is inconclusive, not decided): over 40 Clarabel nuclear
#: solves ((5,5,8), (3,4,6), (6,8,10), (4,4,4)) the spurious ratios were ≤ 3.6e-9 and the real
#: ones ≥ 1e-2; the band leaves a factor 8 below and 30 above the threshold.
RANK_AMBIGUOUS = (RANK_REL / 30, RANK_REL * 30)
#: Two certified nuclear VALUES of one problem agree to this, relative to max(1, value): each
#: passes models.normsvm's certificate at CONIC_TOL = 1e-6 (margins ≥ 1 − 1e-6, λ ≥ −1e-6,
#: ‖mat(Aᵀλ)‖₂ ≤ 1 + 1e-6, |‖W‖_⋆ − Σλ| ≤ 1e-6·max(1, ‖W‖_⋆)), so by weak duality each value is
#: within (m + 3)·CONIC_TOL of the optimum for m ≤ 30 constraints (≤ 3.3e-5): two of them 6.6e-5.
NUC_VALUE_TOL = 1e-4


def solve(inst: CrossInstance, norm: str, what: str, alpha=None, **options) -> NormSVM:
    """The certified attention SVM of ``inst`` at ``alpha`` (default inst.alpha); an infeasible
    one rejects the example, an undecided one makes it inconclusive (evidence.solved)."""
    alpha = inst.alpha if alpha is None else alpha
    return evidence.solved(norm_svm(inst.X, inst.Z, alpha, norm, **options), what)


def ratios(W) -> np.ndarray:
    """σ_k/σ_1, k = 1..d (all zero for W = 0)."""
    s = np.linalg.svd(np.asarray(W, dtype=np.float64), compute_uv=False)
    return s / s[0] if s[0] > 0 else np.zeros_like(s)


def decided_rank(W, what: str) -> int:
    """#{σ_k > RANK_REL·σ_1} (spec §1.8); inconclusive when a ratio sits in RANK_AMBIGUOUS."""
    r = ratios(W)
    lo, hi = RANK_AMBIGUOUS
    if ((r > lo) & (r < hi)).any():
        evidence.inconclusive(f"{what}: a singular value ratio within 30x of the rank threshold")
    return rank_rel(W)  # the one reading of a rank (models.normsvm)


def random_orthogonal(gen: torch.Generator, d: int) -> np.ndarray:
    """A Haar-random orthogonal matrix (QR of a Gaussian, signs fixed)."""
    Q, R = torch.linalg.qr(torch.randn(d, d, generator=gen, dtype=DTYPE))
    return (Q * torch.sign(torch.diagonal(R))[None, :]).numpy()


def random_matrix(gen: torch.Generator, d: int, norm: float) -> np.ndarray:
    """A Gaussian d×d matrix rescaled to Frobenius norm ``norm``."""
    W = torch.randn(d, d, generator=gen, dtype=DTYPE).numpy()
    return W * (norm / np.linalg.norm(W))


def decoupled_frobenius(inst: CrossInstance) -> np.ndarray:
    """Σ_i q_i z_iᵀ with q_i the single-input prompt SVM on the keys x_it (n = 1, spec maxmargin
    §1.4; rejects the example if one of them is infeasible)."""
    W = np.zeros((inst.d, inst.d))
    for i in range(inst.n):
        q = evidence.solved(att_svm(inst.X[i : i + 1], [int(inst.alpha[i])]), f"prompt SVM {i}")
        W += np.outer(q.x, inst.Z[i].numpy())
    return W


# ---- §2.5: counting locally-optimal selections ---------------------------------------------------

#: TF-OPGLOB: the cell of spec §2.5 [N] (n = 3, T = 4, all 64 α) and its seeds.
OPGLOB_NT = (3, 4)
OPGLOB_DIMS = (2, 16)
OPGLOB_SEEDS = tuple(range(12))


@functools.cache
def locally_optimal_count(d: int, seed: int) -> tuple[int, int]:
    """(certainly locally-optimal α, undecided α) among all T^n selections of the official
    instance (n, T) = OPGLOB_NT at dimension d and seed: Frobenius local optimality (spec §1.5)
    on the vectorised keys. An α whose SVM could not be certified either way is counted as
    undecided (its failure is tolerated here: the claims bracket the count with it)."""
    inst = official_cross_data(*OPGLOB_NT, d, seed)
    keys, scores = inst.problem.prompt.keys, inst.scores
    found = undecided = 0
    with failures.tolerate(failures.SVM_ORACLE):
        for alpha in itertools.product(range(inst.T), repeat=inst.n):
            verdict = local_optimality(keys, scores, np.array(alpha))
            undecided += verdict.svm.status in FAILED
            found += verdict.locally_optimal
    return found, undecided


def locally_optimal_counts(d: int) -> tuple[np.ndarray, np.ndarray]:
    """(certain, undecided) counts of locally-optimal α at dimension d, one per OPGLOB_SEEDS."""
    found, undecided = zip(*(locally_optimal_count(d, s) for s in OPGLOB_SEEDS), strict=True)
    return np.array(found), np.array(undecided)


def mean_count_bracket(low_d: int, high_d: int) -> tuple[float, float]:
    """(lower bound of the mean count at low_d, upper bound at high_d), recorded as metrics.

    Undecided solves bracket the counts; when they are so many that the bracket could hide the
    order either way, the claim is inconclusive, never refuted on the strength of failed solves."""
    found_lo, undecided_lo = locally_optimal_counts(low_d)
    found_hi, undecided_hi = locally_optimal_counts(high_d)
    low, high = float(found_lo.mean()), float((found_hi + undecided_hi).mean())
    if low < high and (found_lo + undecided_lo).mean() >= found_hi.mean():
        evidence.inconclusive(f"SVM solver undecided at d={low_d} or {high_d}, deciding the order")
    evidence.metric(f"mean locally-optimal α at d={low_d} (certain)", low)
    evidence.metric(f"mean locally-optimal α at d={high_d} (certain + undecided)", high)
    return low, high


# ---- §4.2: the svm_rank experiment -----------------------------------------------------------

#: TF-EXP-SVM-RANK: the reduced grid of the svm_rank notebook (spec §4.2): n = 5, T = 5, d ∈ {2,
#: 3, 5, 10}, 12 draws per cell (seeds 0–11); d = 2 shows the infeasible draws being skipped.
SVM_RANK_NT = (5, 5)
SVM_RANK_DIMS = (2, 3, 5, 10)
SVM_RANK_SEEDS = tuple(range(12))
#: The official notebook's rank: numpy's matrix_rank with an absolute tolerance (spec §4.2).
OFFICIAL_ABS_TOL = 1e-7


@functools.cache
def svm_rank_cell(d: int) -> dict:
    """One cell of the reduced svm_rank grid: per seed the relative ranks of W^mm and W^mm_⋆
    (infeasible draws skipped, undecided solves skipped and counted), the singular values, and
    the official recipe's mean (infeasible draws as rank 1, absolute 1e-7 rank). Cached: the
    claim and its figure read the same cells."""
    n, T = SVM_RANK_NT
    cell = {"d": d, "fro": [], "nuc": [], "spectra": [], "infeasible": 0, "undecided": 0}
    official = []
    with failures.tolerate(failures.SVM_ORACLE):
        for seed in SVM_RANK_SEEDS:
            inst = official_cross_data(n, T, d, seed)
            fro = norm_svm(inst.X, inst.Z, inst.alpha, "fro")
            if fro.status == "infeasible":
                cell["infeasible"] += 1
                official.append(1)
                continue
            nuc = norm_svm(inst.X, inst.Z, inst.alpha, "nuc")
            if not (fro.ok and nuc.ok):
                cell["undecided"] += 1
                continue
            cell["fro"].append(rank_rel(fro.W))
            cell["nuc"].append(rank_rel(nuc.W))
            official.append(int(np.linalg.matrix_rank(fro.W, tol=OFFICIAL_ABS_TOL)))
            cell["spectra"].append(
                (np.linalg.svd(fro.W, compute_uv=False), np.linalg.svd(nuc.W, compute_uv=False))
            )
    cell["official_fro_mean"] = float(np.mean(official)) if official else math.nan
    return cell


def svm_rank_means() -> dict[int, tuple[float, float]]:
    """{d: (mean Frobenius rank, mean nuclear rank)} over the feasible draws of each cell of the
    grid (cells without one left out), with the cells' counts recorded as metrics; too many
    undecided solves in a cell make the claim inconclusive."""
    means = {}
    for d in SVM_RANK_DIMS:
        cell = svm_rank_cell(d)
        evidence.metric(f"d={d}: feasible draws", len(cell["fro"]))
        evidence.metric(f"d={d}: official-recipe Frobenius mean", cell["official_fro_mean"])
        if cell["undecided"] > len(SVM_RANK_SEEDS) // 4:
            evidence.inconclusive(f"d={d}: {cell['undecided']} undecided SVM solver answers")
        if cell["fro"]:
            means[d] = (float(np.mean(cell["fro"])), float(np.mean(cell["nuc"])))
            evidence.metric(f"d={d}: mean Frobenius rank", means[d][0])
            evidence.metric(f"d={d}: mean nuclear rank", means[d][1])
    return means
