"""SVM equivalence for nonlinear heads (spec tfsvm §2.9 SVMEQ, §4.3 the official
``multi_token_converge`` notebook) and the controls F15 (single-token limit) and F13 (no
stationary points for every loss).

The experiment is the notebook's, run for run: n = 3, T = 4, the ReLU head
f_i(W) = Σ_j ReLU(u_iᵀV)_j on u_i = X_iᵀ S(X_i W z_i) with ‖V‖_F = 1, official seeds 1, 2, …
(a seed with no negative label is skipped, as the notebook skips it), W(0) of nn.Linear's
default law, 2001 NGD steps of length 0.1, and the official rejection rules on the final
softmax (``models.problems.nonlinear_head``). The NGD direction is the exact one (``gradient_log``):
the notebook's autograd direction is wrong once the masked probabilities fall below ~1e-16,
as they do in about half the accepted runs (26 of 59 at d = 4, 19 of 35 at d = 6; down to
1e-75 and 1e-81), and it moves every median (see TF-SVMEQ-ACTIVE's note).

Two facts the claims below rest on, both of the official definitions [D]:
- W_fin is the least-norm solution of linear equalities that the probe iterate itself
  satisfies, so it is the orthogonal projection of that iterate onto the span of the
  selected-pair keys; W_dir meets "equal logits among selected tokens", so it is orthogonal to
  that span; and R is a least-squares fit. Hence 1 − corr(W, W^SVMeq) ≤ 1 − corr(W, W_dir)
  holds nearly by construction (exactly, were the probe the final iterate): the first
  inequality of the chain carries no evidence; the bound on 1 − corr(W, W^SVMeq) and the
  comparison of W_dir with the single-token SVM do.
- An input whose head is inactive (u_iᵀV ≤ 0 entrywise: f_i ≡ 0 near W) has an exactly zero
  gradient: nothing drives its attention, and the theory's diverging direction W_dir, which
  asks margin ≥ 1 of its masked tokens too, has no reason to be followed. With label −1 this
  is where the input's loss is smallest (f ≥ 0 always), so such inputs are common: 38 of the
  59 accepted runs at d = 4 (seeds 1–273) have one.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from models.numerics import failures
from models.problems.cross import correlation
from models.problems.nonlinear_head import (
    NonlinearHeadProblem,
    inactive_inputs,
    ngd_runs,
    official_init,
    official_rejection,
    official_relu_problem,
    single_token_svm,
    svmeq,
)
from strategies.combinators import SEEDS, seeded
from strategies.cross_dynamics import lattice_cross_instances
from theorems import claim, evidence
from theorems.tfsvm.common_wgd import random_matrices

DTYPE = torch.float64

# ---- the official recipe (spec §4.3 [V code]) and the thresholds (spec §2.9 Check) ---------------
#: n = 3, T = 4, NGD lr 0.1 for 2001 iterations (the notebook's ITN), relu head.
N, T, STEPS, LR = 3, 4, 2001, 0.1
#: The first this many usable official seeds per d (seeds 1–273 at d = 4, 1–268 at d = 6): 59
#: and 35 runs pass the official rejection rules (spec §2.9 [N]: 13 of 42 and 13 of 50).
SEEDS_PER_D = 240
#: W(0) seeds: the data seed shifted by this (the notebook draws W(0) from torch's unseeded
#: global stream; any fixed shift gives the same law; the data and W(0) must not share a stream).
INIT_SEED_SHIFT = 1_000_003
#: spec §2.9 Check: median 1 − corr(W, W^SVMeq) ≤ 2e-2 over the accepted runs.
SVMEQ_MEDIAN_BOUND = 2e-2
#: The chain's comparisons allow this relative slack: where every 𝒪_i is a singleton, W_dir
#: IS the single-token SVM and W^SVMeq = R·W_dir (W_fin = 0), so equal medians are the same
#: number up to the oracle's rounding (its KKT certificate is at 1e-7; measured ≤ 1e-12).
CHAIN_RTOL = 1e-6
#: The smallest sample a median is read from (accepted runs kept by the claim).
MIN_ACCEPTED = 12
#: TF-SVMEQ-ACTIVE's premise (every input's head active) was chosen on TF-SVMEQ's runs, the
#: first SEEDS_PER_D usable seeds at d = 4 (seeds 1–273: 21 of the 59 accepted runs have every
#: head active, medians 1.2e-3 / 1.5e-3 / 2.2e-2; the 38 others drive the median to 4.1e-2). It
#: is tested on the next SEEDS_PER_D usable seeds, after this one (274–543). Held-out check
#: (2026-12-03): 16 of 54 accepted runs have every head active, medians 1.1e-3 / 4.1e-3 /
#: 3.9e-2: holds.
ACTIVE_HELDOUT_AFTER = 273
#: Runs a machinery failure removes (a stationary point where NGD has no direction, an SVM
#: solve that is neither certified optimal nor certified infeasible): above this fraction of
#: the runs the medians are not evidence (measured: 7 of 240 at d = 4, 1 of 240 at d = 6).
MAX_EXCLUDED = 0.2
#: F15 (the wrong statement): the GD limit is the single-token SVM at the argmax, read as
#: corr(W, W^mm_single) ≥ 0.99 after the official 2001 steps (the threshold of spec §4.1).
F15_CORR = 0.99
#: F13: gradients at W = 0 and at random W of Frobenius norm 0.1–10 (spec §2.3 Check).
F13_POINTS, F13_NORMS = 20, (0.1, 10.0)

EXCLUDED_STATIONARY = "excluded: stationary point (∇L = 0 exactly: NGD has no direction)"
REJECTED_SVM = "rejected: SVM failure (infeasible)"


# ---- the official runs ---------------------------------------------------------------------------


@dataclass(frozen=True, repr=False)
class Run:
    """One official run: its seed, data and W(0); ``outcome`` "accepted", "rejected" or
    "excluded" with ``reason``; for accepted runs the three 1 − corr at the final iterate, the
    selected-set sizes |𝒪_i|, the inputs whose head is inactive, R and the largest masked
    probability."""

    seed: int
    problem: NonlinearHeadProblem
    W0: np.ndarray
    outcome: str
    category: str = "accepted"
    reason: str = ""
    gap_svmeq: float = math.nan
    gap_dir: float = math.nan
    gap_single: float = math.nan
    sizes: tuple[int, ...] = ()
    inactive: tuple[int, ...] = ()
    R: float = math.nan
    max_masked: float = math.nan

    def __repr__(self) -> str:
        return f"Run(official seed {self.seed}, d = {self.problem.d}, {self.outcome})"

    def to_json(self) -> dict:
        p = self.problem
        return {
            "official_seed": self.seed,
            "head": p.head,
            "X": p.X,
            "Z": p.Z,
            "y": p.y,
            "V": p.V,
            "W0": self.W0,
            "selected_sizes": list(self.sizes),
            "inactive_inputs": list(self.inactive),
        }


def _judge(problem: NonlinearHeadProblem, W0, W_probe, W, broken: str) -> Run:
    """Apply the notebook's rules to one finished run and, if it is accepted, compare W with
    W^SVMeq, W_dir and the single-token SVM at the argmax (all normalised, as the notebook)."""
    base = {"seed": problem.seed, "problem": problem, "W0": W0}
    if broken:
        return Run(**base, outcome="excluded", category=EXCLUDED_STATIONARY, reason=broken)
    probs = problem.softmax(W_probe).numpy()
    reason = official_rejection(probs)
    if reason is not None:
        category = f"rejected: {reason.split(':')[0]}"
        return Run(**base, outcome="rejected", category=category, reason=reason)
    with failures.tolerate(failures.SVM_ORACLE):
        eq = svmeq(problem, W_probe, W)
        single = single_token_svm(problem, probs.argmax(1))
    for what, status in (("W_dir / W_fin", eq.status), ("single-token SVM", single.status)):
        if status == "infeasible":
            return Run(**base, outcome="rejected", category=REJECTED_SVM, reason=what)
        if status != "optimal":
            category = f"excluded: SVM solver {status}"
            return Run(**base, outcome="excluded", category=category, reason=what)
    d = problem.d
    return Run(
        **base,
        outcome="accepted",
        gap_svmeq=1.0 - correlation(W, eq.W),
        gap_dir=1.0 - correlation(W, eq.W_dir),
        gap_single=1.0 - correlation(W, single.x.reshape(d, d)),
        sizes=tuple(int(k) for k in eq.selected.sum(1)),
        inactive=tuple(int(i) for i in np.nonzero(inactive_inputs(problem, W))[0]),
        R=eq.R,
        max_masked=float(probs[~eq.selected].max()),
    )


@functools.cache
def official_runs(d: int, after: int = 0) -> tuple[Run, ...]:
    """The notebook's loop at one d: the first SEEDS_PER_D usable seeds after ``after`` (1, 2, …
    by default), all trained at once (``ngd_runs``, exact direction), then judged one by one.
    The selected sets and log-ratios are read at step 2000 and compared at step 2001, as the
    notebook does (its last forward pass precedes its last step)."""
    problems, seed = [], after
    while len(problems) < SEEDS_PER_D:
        seed += 1
        problem = official_relu_problem(N, T, d, seed)
        if problem is not None:
            problems.append(problem)
    W0s = np.stack([official_init(d, p.seed + INIT_SEED_SHIFT) for p in problems])
    runs = ngd_runs(problems, W0s, lr=LR, steps=STEPS, record=(STEPS - 1,))
    return tuple(
        _judge(p, W0s[b], runs.Ws[STEPS - 1][b], runs.Ws[STEPS][b], runs.why[b])
        for b, p in enumerate(problems)
    )


def accepted_runs(d: int) -> tuple[Run, ...]:
    """The runs of ``official_runs(d)`` that the official rules accept, in order."""
    return tuple(run for run in official_runs(d) if run.outcome == "accepted")


@dataclass(frozen=True)
class Medians:
    """The three medians of 1 − corr over the kept runs, where they come from and the kept run
    farthest from W^SVMeq (for the messages)."""

    eq: float
    dir: float
    single: float
    where: str
    worst: Run

    def chain(self) -> str:
        return (
            f"medians of 1 − corr not ordered SVMeq ≤ W_dir ≤ single-token: {self.eq:.3g}, "
            f"{self.dir:.3g}, {self.single:.3g} {self.where}"
        )

    def over_bound(self) -> str:
        w = self.worst
        return (
            f"median 1 − corr(W, W^SVMeq) = {self.eq:.3g} > {SVMEQ_MEDIAN_BOUND:g} {self.where}; "
            f"largest {w.gap_svmeq:.3g} at official seed {w.seed} (|𝒪_i| = {list(w.sizes)}, "
            f"inactive inputs {list(w.inactive)})"
        )


def svmeq_medians(
    d: int, keep=lambda run: True, what: str = "accepted runs", after: int = 0
) -> Medians:
    """The medians of 1 − corr(W, ·) for W^SVMeq, W_dir and the single-token SVM over the
    official runs at ``d`` (seeds after ``after``) that the official rules accept and ``keep``
    keeps. Too many runs excluded by machinery failures, or fewer than MIN_ACCEPTED kept, is
    inconclusive."""
    runs = official_runs(d, after)
    counts: dict[str, int] = {}
    for run in runs:
        counts[run.category] = counts.get(run.category, 0) + 1
    for category, count in sorted(counts.items()):
        evidence.metric(f"d = {d}, runs {category}", count)
    excluded = sum(run.outcome == "excluded" for run in runs)
    if excluded > MAX_EXCLUDED * len(runs):
        evidence.inconclusive(f"{excluded} of {len(runs)} runs excluded by machinery failures")
    kept = [run for run in runs if run.outcome == "accepted" and keep(run)]
    evidence.metric(f"d = {d}, {what}", len(kept))
    if len(kept) < MIN_ACCEPTED:
        evidence.inconclusive(f"only {len(kept)} {what} (< {MIN_ACCEPTED}) at d = {d}")
    gaps = np.array([[r.gap_svmeq, r.gap_dir, r.gap_single] for r in kept])
    evidence.finite("1 − corr", gaps)
    m_eq, m_dir, m_single = np.median(gaps, axis=0)
    evidence.metric("median 1 − corr(W, W^SVMeq)", m_eq)
    evidence.metric("median 1 − corr(W, W_dir)", m_dir)
    evidence.metric("median 1 − corr(W, W^mm_single)", m_single)
    evidence.metric("runs with a multi-token 𝒪_i", sum(max(r.sizes) > 1 for r in kept))
    evidence.metric("runs with an inactive input", sum(bool(r.inactive) for r in kept))
    evidence.slack("median 1 − corr(W, W^SVMeq) / 2e-2", m_eq, SVMEQ_MEDIAN_BOUND)
    seeds = f"{runs[0].seed}–{runs[-1].seed}"
    where = f"(d = {d}, {len(kept)} {what} of {len(runs)} official seeds, {seeds})"
    worst = kept[int(np.argmax(gaps[:, 0]))]
    return Medians(float(m_eq), float(m_dir), float(m_single), where, worst)


def _all_active(run: Run) -> bool:
    return not run.inactive


@claim("TF-SVMEQ")
def test_svmeq_official_d4():
    """With a nonlinear (ReLU) head, GD converges in direction to W^SVMeq = W_fin + R·W_dir, not to
    the single-token SVM, on the official multi_token_converge runs at d = 4."""
    m = svmeq_medians(4)
    assert m.eq <= m.dir * (1 + CHAIN_RTOL) and m.dir <= m.single * (1 + CHAIN_RTOL), m.chain()
    assert m.eq <= SVMEQ_MEDIAN_BOUND, m.over_bound()


@claim("TF-SVMEQ-ACTIVE")
def test_svmeq_official_d4_active_heads():
    """TF-SVMEQ over the runs in which every input's head is active at the end (u_iᵀV has a positive
    entry, so the input's loss term is not locally constant)."""
    m = svmeq_medians(4, _all_active, "accepted runs with every head active", ACTIVE_HELDOUT_AFTER)
    assert m.eq <= m.dir * (1 + CHAIN_RTOL) and m.dir <= m.single * (1 + CHAIN_RTOL), m.chain()
    assert m.eq <= SVMEQ_MEDIAN_BOUND, m.over_bound()


@claim("TF-SVMEQ-D6")
def test_svmeq_official_d6():
    """With a nonlinear (ReLU) head, GD converges in direction to W^SVMeq = W_fin + R·W_dir, not to
    the single-token SVM, on the official multi_token_converge runs at d = 6."""
    m = svmeq_medians(6)
    assert m.eq <= m.dir * (1 + CHAIN_RTOL) and m.dir <= m.single * (1 + CHAIN_RTOL), m.chain()
    assert m.eq <= SVMEQ_MEDIAN_BOUND, m.over_bound()


# ---- F15: the single-token SVM -------------------------------------------------------------------


@claim("TF-C-SINGLE-TOKEN")
@given(run=st.deferred(lambda: st.sampled_from(accepted_runs(4))))
def test_f15_single_token_limit(run):
    """(Wrong) With a nonlinear (ReLU) head, the GD limit is the single-token SVM at the
    argmax: corr(W, W^mm_single) → 1, W^mm_single the Frobenius Att-SVM at α_i = argmax_t
    s_it, whenever every input's head is active."""
    if run.inactive:
        evidence.reject("an input's head is inactive (its gradient is identically zero)")
    corr = 1.0 - run.gap_single
    evidence.metric("corr(W, W^SVMeq)", 1.0 - run.gap_svmeq)
    evidence.metric("largest |𝒪_i|", max(run.sizes))
    assert corr >= F15_CORR, (
        f"corr(W, W^mm_single) = {corr:.4f} < {F15_CORR} at official seed {run.seed} "
        f"(|𝒪_i| = {list(run.sizes)}; corr(W, W^SVMeq) = {1.0 - run.gap_svmeq:.5f})"
    )


# ---- F13: no stationary points for every loss ----------------------------------------------------


def f13_points(d: int, seed: int) -> list[np.ndarray]:
    """W = 0 and F13_POINTS random W of Frobenius norms 0.1–10."""
    return [np.zeros((d, d))] + list(random_matrices(seeded(seed), d, F13_POINTS, *F13_NORMS))


@claim("TF-C-NO-STATIONARY")
@given(inst=lattice_cross_instances(), seed=SEEDS)
def test_f13_no_stationary_points(inst, seed):
    """(Wrong: NOSTAT without its hypotheses) Every cross-attention loss L(W) with a fixed head v
    and the logistic loss has no stationary point: ∇L(W) ≠ 0 at every W."""
    g = inst.problem.scores.numpy()
    tied = [i for i in range(inst.n) if np.all(g[i] == g[i, 0])]
    evidence.metric("inputs with all scores equal", len(tied))
    for W in f13_points(inst.d, seed):
        M, G = inst.problem.gradient_log(W)
        assert M > -math.inf and np.any(G != 0), (
            f"∇L(W) = 0 exactly (log-space gradient: M = {M}) at ‖W‖ = "
            f"{np.linalg.norm(W):.3g}; n = {inst.n}, T = {inst.T}, d = {inst.d}, inputs with "
            f"all scores equal: {tied} of {inst.n}"
        )
