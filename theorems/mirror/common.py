"""What the mirror-descent claims of 2410.14581 share (claims_md, claims_controls, plots).

- The official local-convergence protocol (synthetic-data/local_convergence.py and
  bash_scripts/run-local-*.sh of aaronk2002/AttentionMD): n = 6, T = 8, d = 10, W(0) ~ N(0, 1)
  entrywise, normalised ℓp-MD with lr 0.1 for 1500 / 2000 / 20000 steps at p = 1.75 / 2 / 3,
  the selection α̂ read from the final attention, the ℓp-AttSVM solved at α̂. Runs go through
  ``models.problems.cross.md`` (log-space directions, no ``+ eps``), each cached per (instance,
  W(0), p), and so are the certified SVMs per (instance, α, norm): several claims ask different
  questions of the same run.
- The fixed-seed experiment (``experiment_runs``): the official data generator, bit for bit
  (``strategies.mirror.official_md_data``). The official W(0) comes from torch's global
  generator, which the script never seeds, so it is not reproducible: the experiment draws
  W(0) ~ N(0, 1) from a seed of its own.
- The directional Bregman divergence along a run, the burn-in after which the selection has
  settled, and the joint (W, v) runs: their SVMs, whether the v-SVM is tight, and the direction
  errors at half the budget and at its end.
"""

from __future__ import annotations

import dataclasses
import hashlib
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch

from models.flows.mirror_joint import (
    JOINT_LR,
    JOINT_STEPS,
    CrossJointProblem,
    JointMDRun,
    LpVSVM,
    joint_md,
    lp_v_svm,
    naive_joint_md,
    official_joint_data,
)
from models.oracles.normsvm import NormSVM, norm_svm
from models.problems.cross import CrossRun, bregman_divergence, correlation, md
from strategies.combinators import seeded
from strategies.instances import CrossInstance
from strategies.mirror import OFFICIAL_SHAPE, official_md_data
from theorems import evidence

DTYPE = torch.float64

# ---- the official protocol (bash_scripts/run-local-*.sh) ---------------------------------------

#: The exponents of the paper's synthetic experiments and their step budgets at lr 0.1.
PS = (1.75, 2.0, 3.0)
LR = 0.1
MD_STEPS = {1.5: 1500, 1.75: 1500, 2.0: 2000, 3.0: 20000}
#: Spec §7 tolerance table (MD row): the directional Bregman divergence to the own-p SVM at α̂
#: after the official budgets. The calibration (spec §2.10 [N]) had max 4.4e-3 / 2.6e-2 / 1.0e-2
#: over 12 seeds; ours over 24 seeds of the exact official data: max 4.4e-3 / 7.0e-3 / 1.3e-2.
BREGMAN_BOUND = {1.75: 1e-2, 2.0: 3e-2, 3.0: 2e-2}
#: Runs are recorded every this many steps (the Bregman curves, the burn-in).
RECORD_EVERY = 10
#: MD-EXP-LOCAL: the seeds of the official script are 1–100; the experiment runs the first 12.
EXP_SEEDS = tuple(range(1, 13))
#: MD-EXP-LOCAL: W(0) is drawn from seed INIT_SEED_BASE + seed (the official W(0) comes from an
#: unseeded global generator and cannot be reproduced).
INIT_SEED_BASE = 1000


def normal_init(d: int, seed: int) -> torch.Tensor:
    """W(0) with i.i.d. N(0, 1) entries (the official ``--std 1``), from a seeded generator."""
    return torch.randn(d, d, generator=seeded(seed), dtype=DTYPE)


# ---- cached runs and SVMs ------------------------------------------------------------------------


def _digest(*arrays) -> str:
    h = hashlib.sha1()
    for a in arrays:
        a = np.ascontiguousarray(np.asarray(a, dtype=np.float64))
        h.update(str(a.shape).encode())
        h.update(a.tobytes())
    return h.hexdigest()


def instance_key(inst: CrossInstance) -> str:
    return _digest(inst.X, inst.Z, inst.y, inst.v)


@dataclass
class MDResult:
    """One normalised ℓp-MD run (recorded every RECORD_EVERY steps) and its final selection."""

    inst: CrossInstance
    p: float
    run: CrossRun

    @property
    def W(self) -> np.ndarray:
        return self.run.W

    @cached_property
    def alpha(self) -> np.ndarray:
        """α̂: the top-attention token of each input at the end of the run."""
        return self.inst.problem.selected(self.W)

    @cached_property
    def selections(self) -> np.ndarray:
        """The top-attention tokens at every record (k, n)."""
        logits = np.einsum("ita,kab,ib->kit", self.inst.X.numpy(), self.run.Ws, self.inst.Z.numpy())
        return np.argmax(logits, axis=-1)

    @cached_property
    def settled(self) -> int:
        """The burn-in: the first record index from which the selection is α̂ at every record."""
        same = np.all(self.selections == self.alpha[None, :], axis=1)
        changed = np.flatnonzero(~same)
        return int(changed[-1]) + 1 if changed.size else 0

    def min_selected_mass(self) -> float:
        """min_i s_{iα̂_i} at the end of the run."""
        s = self.inst.problem.softmax(torch.as_tensor(self.W)).numpy()
        return float(s[np.arange(self.inst.n), self.alpha].min())

    def bregman(self, W_svm: np.ndarray, stride: int = 1) -> np.ndarray:
        """D_ψ(Ŵ_svm, Ŵ_k) of the run's own potential ψ = ‖·‖_p^p/p at every ``stride``-th record
        (the official correlation_calculation.py: the run's p, whatever SVM it is compared
        with); the last record is always included."""
        Ws = self.run.Ws
        idx = np.unique(np.r_[np.arange(0, len(Ws), stride), len(Ws) - 1])
        return np.array([bregman_divergence(W_svm, Ws[k], self.p) for k in idx])

    def record_steps(self, stride: int = 1) -> np.ndarray:
        """The steps of ``bregman(…, stride)``."""
        steps = self.run.steps
        return steps[np.unique(np.r_[np.arange(0, len(steps), stride), len(steps) - 1])]


_RUNS: dict[tuple, MDResult] = {}
_SVMS: dict[tuple, NormSVM] = {}


def run_md(inst: CrossInstance, p: float, steps: int | None = None) -> MDResult:
    """Normalised ℓp-MD from inst.W0 with the official lr and budget (``models.problems.cross.md``),
    cached."""
    steps = MD_STEPS[p] if steps is None else steps
    W0 = np.zeros((inst.d, inst.d)) if inst.W0 is None else inst.W0.numpy()
    key = (instance_key(inst), _digest(W0), float(p), int(steps))
    if key not in _RUNS:
        run = md(inst.problem, W0, p=p, lr=LR, steps=steps, record_every=RECORD_EVERY)
        _RUNS[key] = MDResult(inst, float(p), run)
    return _RUNS[key]


def svm(inst: CrossInstance, alpha, norm: str, q: float | None = None) -> NormSVM:
    """The certified attention SVM (``models.oracles.normsvm``) at α, cached per (instance, α, norm,
    q); the caller passes it through ``evidence.solved``."""
    alpha = tuple(int(a) for a in alpha)
    key = (instance_key(inst), alpha, norm, None if q is None else float(q))
    if key not in _SVMS:
        _SVMS[key] = norm_svm(inst.X, inst.Z, np.array(alpha), norm, p=q)
    return _SVMS[key]


def lp_svm(inst: CrossInstance, alpha, q: float, what: str = "ℓp-AttSVM") -> NormSVM:
    """The certified ℓq-AttSVM at α (rejected if infeasible, inconclusive if not certified)."""
    return evidence.solved(svm(inst, alpha, "lp", q), f"{what} (q = {q:g})")


def cosines(result: MDResult, qs) -> dict[float, float]:
    """corr(W_MD, W^mm_α̂(ℓq)) for each q (the paper's cross-comparison, Frobenius cosine)."""
    return {q: correlation(lp_svm(result.inst, result.alpha, q).W, result.W) for q in qs}


# ---- §4.5: the local-convergence experiment -------------------------------------------------


def experiment_runs() -> dict[tuple[int, float], MDResult]:
    """The paper's local-convergence experiment: normalised ℓp-MD for each p ∈ PS on the official
    data of each seed in EXP_SEEDS (W(0) ~ N(0, 1) from seed INIT_SEED_BASE + seed), keyed by
    (seed, p) in that order; cached, so the claim and its figure share the runs."""
    runs = {}
    for seed in EXP_SEEDS:
        inst = dataclasses.replace(
            official_md_data(seed), W0=normal_init(OFFICIAL_SHAPE[2], INIT_SEED_BASE + seed)
        )
        for p in PS:
            runs[seed, p] = run_md(inst, p)
    return runs


# ---- the joint (W, v) runs on the official instance --------------------------------------------

_JOINT: dict[tuple, JointMDRun] = {}


def joint_problem(inst: CrossInstance) -> CrossJointProblem:
    """The joint (W, v) problem of a cross instance's data (its head v is not used)."""
    return CrossJointProblem(inst.X, inst.Z, inst.y, inst.loss)


def joint_instance(noise: float = 0.0, seed: int = 0) -> CrossJointProblem:
    """The official joint instance (``models.flows.mirror_joint.official_joint_data``); with
    ``noise`` > 0 every token gets N(0, noise²) added (the queries stay the first tokens)."""
    X, y, _ = official_joint_data()
    if noise > 0:
        X = X + noise * torch.randn(X.shape, generator=seeded(seed), dtype=DTYPE)
    return CrossJointProblem(X, X[:, 0].clone(), y)


def joint_run(problem: CrossJointProblem, p: float, *, naive: bool = False) -> JointMDRun:
    """Joint (W, v) MD from W(0) = 0, v(0) = 0 with the official lr and budget for p, in log
    space (``joint_md``) or as the official code computes it (``naive_joint_md``); cached."""
    key = (_digest(problem.X, problem.Z, problem.y), float(p), naive)
    if key not in _JOINT:
        steps = JOINT_STEPS[float(p)]
        if naive:
            run = naive_joint_md(problem, p=p, lr=JOINT_LR, steps=steps, record_every=RECORD_EVERY)
        else:
            run = joint_md(problem, p=p, lr=JOINT_LR, steps=steps, record_every=RECORD_EVERY)
        _JOINT[key] = run
    return _JOINT[key]


#: A selected token x_{iα̂_i} is a support vector of the ℓp v-SVM when its certified dual is
#: above this fraction of the largest one. Measured on 90 runs (30 calibration draws of
#: ``joint_instances``' generator, seeds 10000–10029, p = 1.75, 2, 3): the duals of the
#: non-support inputs are ≤ 6e-8 of the largest, those of the support ones ≥ 6e-3.
SUPPORT_REL = 1e-4


@dataclass
class JointLimit:
    """A joint run's selection α̂ and its two certified SVMs; ``support[i]``: whether input i's
    selected token is a support vector of the v-SVM."""

    alpha: np.ndarray
    W_svm: NormSVM
    v_svm: LpVSVM

    @property
    def support(self) -> np.ndarray:
        lam = np.asarray(self.v_svm.svm.duals, dtype=float)
        return lam > SUPPORT_REL * lam.max()

    @property
    def tight(self) -> bool:
        """Every selected token is a support vector of the v-SVM: then the relaxed attention SVM
        of the joint theorem (spec tfsvm §2.7, ``models.flows.joint.relaxed_svm_for``) is the full
        one, W^mm_α̂(ℓp)."""
        return bool(self.support.all())


def joint_svms(problem: CrossJointProblem, run: JointMDRun, p: float) -> JointLimit:
    """The ℓp-AttSVM and the ℓp v-SVM at the run's final selection (solved and certified)."""
    alpha = problem.selected(run.W)
    W_svm = evidence.solved(
        norm_svm(problem.X, problem.Z, alpha, "lp", p=p), f"ℓp-AttSVM (p = {p:g})"
    )
    v_svm = lp_v_svm(problem.X, problem.y, alpha, p)
    evidence.solved(v_svm.svm, f"ℓp v-SVM (p = {p:g})")
    return JointLimit(alpha, W_svm, v_svm)


@dataclass
class JointErrors:
    """1 − corr of a joint run's W and v with their SVMs at half the budget and at its end
    (``W``, ``v``: (at half, at the end)), the steps of the two, and whether the selection at
    half the budget is already α̂."""

    W: tuple[float, float]
    v: tuple[float, float]
    steps: tuple[int, int]
    settled_halfway: bool


def joint_errors(problem: CrossJointProblem, run: JointMDRun, limit: JointLimit) -> JointErrors:
    """The direction errors 1 − corr(W_k, W^mm_α̂(ℓp)) and 1 − corr(v_k, v^mm_p) at k = half the
    budget and at its end (a record of the run: the budgets are multiples of 2·RECORD_EVERY)."""
    end = len(run.steps) - 1
    half = int(np.flatnonzero(run.steps == run.steps[end] // 2)[0])

    def err(svm, series):
        return tuple(1.0 - correlation(svm, series[k]) for k in (half, end))

    return JointErrors(
        W=err(limit.W_svm.W, run.Ws),
        v=err(limit.v_svm.v, run.vs),
        steps=(int(run.steps[half]), int(run.steps[end])),
        settled_halfway=bool(np.array_equal(problem.selected(run.Ws[half]), limit.alpha)),
    )


# ---- rotations (spec §2.13.2) ---------------------------------------------------------------


def random_orthogonal(gen: torch.Generator, d: int) -> np.ndarray:
    """A Haar orthogonal matrix (QR of a Gaussian, signs fixed)."""
    Q, R = np.linalg.qr(torch.randn(d, d, generator=gen, dtype=DTYPE).numpy())
    return Q * np.sign(np.diag(R))[None, :]
