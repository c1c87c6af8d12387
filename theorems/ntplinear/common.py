"""What the claims of 2402.18551 share: the fixed pool of GD instances, one batched log-space GD
run over all of them (``models.ntp.gd.batched_linear_gd``, cached: every LIN-GD claim and the GD
controls read the same iterates),
the oracles of an instance (cached per instance), and a few independent re-derivations
(the subspace F from all pairs, the one-hot SVM, the absolute-log-probability solution).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import numpy as np

from models.ntp.gd import BatchRun, batched_linear_gd
from models.ntp.linear import LinearNTP
from strategies.instances import NOT_NTP_SEPARABLE, NTP_COMPATIBLE, NTP_SEPARABLE
from strategies.ntp_instances import LinearNTPInstance
from strategies.ntp_linear import classify, fig1_instance, linear_data, screened
from theorems import evidence

#: Spec §2.14 / §4.4: the paper's GD step.
ETA = 0.5
#: Spec §6.2 LIN-GD row: the budget the tolerances are calibrated at.
GD_STEPS = 100_000
#: Iterates kept (log-spaced; k/2 of the last is kept for the increment metric).
CHECKPOINTS = (1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000)

#: The GD pool (spec §2.14 [N] rows): generator (d) with m = 8, V = 6, |S_j| = 3, d = 10 (Lemma 1
#: regime), and the Fig.-1 supports in d = 2 screened separable; both from zero and LeCun init.
#: Plus the Fig.-1 supports in d = 2 screened compatible but not separable (control C11).
GD_M8_SEEDS = (0, 1, 2)
GD_FIG1_SEEDS = (0, 100)
GD_NONSEP_SEEDS = (0, 50)
INITS = ("zero", "lecun")
NEG_INF = -math.inf


@dataclass(frozen=True)
class Case:
    """One GD run of the pool: the instance, its init name, its index in the batch."""

    inst: LinearNTPInstance
    init: str
    index: int

    @property
    def label(self) -> str:
        return f"{self.inst.meta.get('family')} seed {self.inst.seed}, {self.init} init"


@cache
def gd_instances() -> tuple[tuple[LinearNTPInstance, ...], tuple[LinearNTPInstance, ...]]:
    """(separable and compatible instances, compatible non-separable instances) of the pool. A
    screen that finds no instance of its class leaves it out (the claims then see fewer)."""
    want = {NTP_SEPARABLE, NTP_COMPATIBLE}
    m8 = [
        classify(*linear_data(s, 8, 6, 10, 3), seed=s, meta={"family": "m8"}) for s in GD_M8_SEEDS
    ]
    good = [i for i in m8 if want <= i.assumptions]
    good += [screened(fig1_instance, s, want) for s in GD_FIG1_SEEDS]
    bad = [screened(fig1_instance, s, {NOT_NTP_SEPARABLE, NTP_COMPATIBLE}) for s in GD_NONSEP_SEEDS]
    return tuple(i for i in good if i is not None), tuple(i for i in bad if i is not None)


def _cases_of(instances, what: str) -> list[Case]:
    """The pool's runs on ``instances`` (inconclusive if there are none)."""
    keep = {id(i) for i in instances}
    cases = [c for c in gd_cases() if id(c.inst) in keep]
    if not cases:
        evidence.inconclusive(f"the GD pool has no {what} instance")
    return cases


def separable_cases() -> list[Case]:
    """The pool's runs on separable and compatible instances (inconclusive if there are none)."""
    return _cases_of(gd_instances()[0], "separable and compatible")


def nonseparable_cases() -> list[Case]:
    """The pool's runs on compatible, non-separable instances (inconclusive if there are none)."""
    return _cases_of(gd_instances()[1], "compatible non-separable")


def lecun_init(inst: LinearNTPInstance) -> np.ndarray:
    """W(0) with i.i.d. N(0, 1/d) entries ("random LeCun" of App. A.2), from the instance seed."""
    rng = np.random.default_rng([inst.seed, 7])
    return rng.standard_normal((inst.vocab, inst.dim)) / math.sqrt(inst.dim)


@cache
def gd_cases() -> tuple[Case, ...]:
    good, bad = gd_instances()
    cases = [(inst, init) for inst in good for init in INITS] + [(inst, "zero") for inst in bad]
    return tuple(Case(inst, init, k) for k, (inst, init) in enumerate(cases))


@cache
def gd_batch() -> BatchRun:
    """The pool's GD run (ETA, GD_STEPS), iterates at CHECKPOINTS and their halves."""
    cases = gd_cases()
    W0s = [
        np.zeros((c.inst.vocab, c.inst.dim)) if c.init == "zero" else lecun_init(c.inst)
        for c in cases
    ]
    record = set(CHECKPOINTS) | {k // 2 for k in CHECKPOINTS}
    return batched_linear_gd(
        [c.inst.problem for c in cases], W0s, eta=ETA, steps=GD_STEPS, record=record
    )


#: Spec §2.15 / §4.4: NGD with lr 0.01 for 1e4 steps ("matched 1e5 GD steps").
NGD_LR = 0.01
NGD_STEPS = 10_000


@cache
def ngd_batch() -> BatchRun:
    """The pool's NGD run (NGD_LR, NGD_STEPS) from the same inits, iterates at its last step."""
    cases = gd_cases()
    W0s = [
        np.zeros((c.inst.vocab, c.inst.dim)) if c.init == "zero" else lecun_init(c.inst)
        for c in cases
    ]
    problems = [c.inst.problem for c in cases]
    return batched_linear_gd(
        problems, W0s, eta=NGD_LR, steps=NGD_STEPS, record={NGD_STEPS}, normalized=True
    )


def iterate(case: Case, k: int, *, ngd: bool = False) -> np.ndarray:
    run = ngd_batch() if ngd else gd_batch()
    if not run.finite:
        evidence.inconclusive(f"batched {'N' if ngd else ''}GD produced a non-finite iterate")
    return run.iterates[k][case.index]


# ---- oracles -------------------------------------------------------------------------------------


def w_star(problem: LinearNTP) -> np.ndarray:
    """W* (Def. 1 inside F); an incompatible instance is outside the claim's premise."""
    comp = problem.compatibility()
    if not comp.compatible:
        evidence.reject("not NTP-compatible")
    return comp.W_star


def w_mm(problem: LinearNTP) -> np.ndarray:
    """W^mm (Def. 3), certified; infeasible ⇒ rejected (the premise fails), anything else is
    the machinery's failure (inconclusive)."""
    svm = problem.ntp_svm()
    if svm.status == "infeasible":
        evidence.reject("not NTP-separable")
    if not svm.ok:
        evidence.inconclusive(f"NTP-SVM oracle: {svm.status} ({svm.solution.reason})")
    if svm.vacuous:
        evidence.reject("every support is the whole vocabulary (no margin constraint)")
    return svm.W


def correlation(A, B) -> float:
    """corr(A, B) = ⟨A, B⟩/(‖A‖‖B‖) (spec §1.3 metrics)."""
    return float(np.sum(A * B) / (np.linalg.norm(A) * np.linalg.norm(B)))


def one_minus_corr(A, B) -> float:
    """1 − corr(A, B), from the distance of the unit matrices (no cancellation): ‖Â − B̂‖²/2."""
    a = A / np.linalg.norm(A)
    b = B / np.linalg.norm(B)
    return float(np.sum((a - b) ** 2) / 2)


# ---- independent re-derivations ------------------------------------------------------------------


def all_pair_rows(problem: LinearNTP) -> np.ndarray:
    """vec((e_z − e_z') h̄_jᵀ) for every ordered pair z ≠ z' of every S_j (not just anchored):
    the spanning set of F as the paper writes it."""
    rows = []
    V, d = problem.vocab, problem.dim
    for j in range(problem.m):
        S = np.flatnonzero(problem.support[j])
        for z in S:
            for zz in S:
                if z != zz:
                    M = np.zeros((V, d))
                    M[z] += problem.H[:, j]
                    M[zz] -= problem.H[:, j]
                    rows.append(M.ravel())
    return np.array(rows).reshape(len(rows), V * d)


def project_rows(rows: np.ndarray, W: np.ndarray) -> np.ndarray:
    """Orthogonal projection of W onto span(rows), by least squares (not the model's basis)."""
    if rows.shape[0] == 0:
        return np.zeros_like(W)
    coef = np.linalg.lstsq(rows.T, W.ravel(), rcond=None)[0]
    return (rows.T @ coef).reshape(W.shape)


def log_odds_residual(problem: LinearNTP, W: np.ndarray) -> float:
    """max over j and z, z' ∈ S_j of |(e_z − e_z')ᵀ W h̄_j − log(p̂_jz/p̂_jz')| (Def. 1, all pairs)."""
    worst = 0.0
    logits = (W @ problem.H).T
    for j in range(problem.m):
        S = np.flatnonzero(problem.support[j])
        lp = np.log(problem.P[j, S])
        diff = (logits[j, S][:, None] - logits[j, S][None, :]) - (lp[:, None] - lp[None, :])
        worst = max(worst, float(np.abs(diff).max()))
    return worst


def multiclass_rows(problem: LinearNTP, y) -> np.ndarray:
    """The rows of the multiclass max-margin problem with one label y_j per context:
    vec((e_{y_j} − e_v) h̄_jᵀ) for every other token v (margin ≥ 1 on each), an independent
    re-derivation that does not go through the NTP-SVM's own rows."""
    rows = []
    for j in range(problem.m):
        for v in range(problem.vocab):
            if v != y[j]:
                M = np.zeros((problem.vocab, problem.dim))
                M[y[j]] += problem.H[:, j]
                M[v] -= problem.H[:, j]
                rows.append(M.ravel())
    return np.array(rows)
