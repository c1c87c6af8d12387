"""W-parameterised dynamics of *Transformers as SVMs* (arXiv 2308.16898) and the rate
comparison of 2402.05738: spec tfsvm §2.3 NOSTAT, §2.4 G-EQ, §2.5 OP-GLOB, §2.6 L-LOC, §2.11
RATE and §4.1 (the W half of the official local-convergence experiment).

Gradient flow on W (the η → 0 limit of GD with η ≤ 1/L_W; NGD follows the same path) is
traced and certified by the prompt engine on the vectorised keys vec(x_it z_iᵀ) (see
``common_wgd``). The fixed-step methods (``w_ngd``, ``w_gd``, ``polyak``) appear only where
the claim is about a finite-step protocol: the official recipe, the step-size condition, the
rates. The wrong variants of these results are in ``claims_wgd_controls``.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models.flows.dynamics import converge
from models.numerics import failures
from models.oracles.selection import local_optimality
from models.problems.cross import correlation, polyak, w_gd, w_ngd
from strategies.combinators import SEEDS, seeded
from strategies.cross import (
    cross_cone_inits,
    equal_nonopt_cross_instances,
    local_opt_cross_instances,
    nostat_instances,
    official_cross_instances,
    random_W,
    with_random_init,
)
from strategies.cross_dynamics import cone_scan
from theorems import claim, evidence
from theorems.tfsvm.common_wgd import (
    OPGLOB_DS,
    OPGLOB_SEEDS,
    correlations,
    descent_value,
    first_reaching,
    flow_limit,
    frobenius_svm,
    growth,
    log_geq_bound,
    log_gradient_norm,
    log_nostat_bound,
    official_init_std,
    official_seeds,
    opglob_fractions,
    pinned,
    pinned_ray_scan,
    random_matrices,
    w_flow,
)

DTYPE = torch.float64

# ---- tolerances and protocols -------------------------------------------------------------------
#: Random W of Frobenius norm log-uniform in [0.1, 10] (spec §2.3, §2.4 "norms 0.1–10").
W_NORMS = (0.1, 10.0)
POINTS_PER_EXAMPLE = 20
#: NOSTAT along a path: the iterates of official NGD (lr 0.1) from the first random W, every
#: 100 steps up to 500 (‖W‖ up to ~50: softmax saturated, ‖∇L‖ down to e^-800 measured).
PATH_STEPS, PATH_EVERY = 500, 100
#: log‖∇L‖ ≥ log B − this (and the same for the G-EQ bound D): both sides are float64
#: log-space sums of a few hundred terms (relative rounding ~1e-14). The bounds can be tight:
#: D is exact when every non-optimal token is a support token (measured ratio 1 + 1.8e-15),
#: B when n = 1 and Σ_t c_t x_t is parallel to v.
LOG_BOUND_TOL = 1e-9
BOUND_RATIO = math.exp(LOG_BOUND_TOL)
#: GD with η = 1/L_W (the prompt problem's rigorous smoothness bound on vec W, spec §1.7): the
#: loss may rise by float64 rounding of L ~ 1 only.
DESCENT_STEPS = 2000
LOSS_RISE_TOL = 1e-13
#: ‖W(t)‖ → ∞, checked as: the flow reaches this norm (no finite stop) with ‖W‖ increasing
#: along the last half of the traced arc length.
GROWTH_NORM = 1e4
#: L-LOC cone scan (spec §2.6 Check): R0 ∈ {2, 5, 20, 100}, ε narrowing as R0 grows (nested
#: cones, as theorems.maxmargin.common.CONE_GRID).
LLOC_GRID = ((2.0, 1e-2), (5.0, 3e-3), (20.0, 3e-4), (100.0, 3e-5))
#: The narrowest variant that holds (see TF-LLOC-CONE's note): the cone at R0 = 1000.
#: Calibrated on TF-LLOC-CONE's data: its pinned draw (official seed 3) and a 60-draw search
#: (3 α lost the flow at R0 = 100 and kept it from 200; official seed 36016, α = (0, 3, 0),
#: needs 500): 1000 is twice the largest R0 needed. Tested on TF-LLOC-CONE-R1000's own draws
#: (a seed from its id: none of the recorded calibration draws). Held-out check (2026-12-03,
#: ATTN_HYPOTHESIS_PROFILE=ci-random, ATTN_HYPOTHESIS_SEED=20261201/2/3): 30 of 30 converge
#: under each seed (15–18 distinct instances each); nightly seed 20261204: 600 of 600: holds.
LLOC_WIDE_CONE = (1000.0, 1e-6)
#: §4.1 thresholds (spec §7 tolerance table, "W → Frobenius SVM" row): NGD lr 0.1, 2000
#: steps: mean corr ≥ 0.99, every run ≥ 0.95; selection: s_α̂ ≥ 1 − 1e-6 on every input. The
#: runs are read at 2000 steps (TF-EXP-LOCAL-W) and 4000 steps (TF-EXP-LOCAL-W-4000).
EXP_SEEDS, EXP_STEPS, EXP_LR = 12, (2000, 4000), 0.1
EXP_MEAN_CORR, EXP_MIN_CORR, EXP_PROB_GAP = 0.99, 0.95, 1e-6
#: TF-EXP-LOCAL-W-4000's budget of 4000 steps was calibrated on TF-EXP-LOCAL-W's runs, official
#: seeds 0–11 (the smallest doubling at which they all pass: seed 2 is at corr 0.9446 after 2000
#: steps, 0.9936 after 4000; mean 0.99924, min 0.99356 at 4000); it is tested on the next 12
#: seeds with a unique opt, from EXP_HELDOUT_START on (12–14, 16–20, 22–25). Held-out check
#: (2026-12-03): mean corr 0.99965, min 0.99932 (seed 19), 1 − max prob 0: holds (these seeds
#: would pass at 2000 steps too, min 0.99687: they have no run as slow as seed 2).
EXP_HELDOUT_START = 12
#: Why the selection threshold is EXP_PROB_GAP, whatever it observes.
PROB_READING = (
    "the statement's own threshold (spec §4.1 and §7: s_α̂ ≥ 1 − 1e-6 on every input), not a "
    "numerical tolerance: it is what 'selects a token' means in the experiment. Along NGD the "
    "mass off α̂ is Σ_{t≠α̂} s_t ≤ (T − 1)·e^{−gap_i}, gap_i the smallest score gap at W; once "
    "gap_i > 37 (‖W‖ ≈ 400 after 4000 steps of 0.1) it is below 2⁻⁵³ and 1 − max s is exactly "
    "0 in float64 (the observed 0); an input that has not selected keeps it Θ(1)."
)
#: W(0) seeds of the §4.1 runs: the instance's seed shifted by this (the data generator and
#: W(0) must not share a torch stream, or W(0) would repeat the first raw token draws).
INIT_SEED_SHIFT = 1_000_003
#: §2.11: steps to corr ≥ 0.99 with W^mm (spec "Check"), and to the best corr GD reaches where it
#: does not reach 0.99, from W(0) = 0, over 2000 steps.
RATE_LEVEL, RATE_STEPS, NGD_LR, GD_ETA = 0.99, 2000, 0.1, 1.0


# ---- §2.3 NOSTAT ---------------------------------------------------------------------------------


def nostat_points(problem, seed) -> list[np.ndarray]:
    """Random W of Frobenius norms 0.1–10, then the NGD path (lr 0.1) from the first."""
    points = list(random_matrices(seeded(seed), problem.d, POINTS_PER_EXAMPLE, *W_NORMS))
    path = w_ngd(problem, points[0], lr=0.1, steps=PATH_STEPS, record_every=PATH_EVERY)
    return points + list(path.Ws[1:])


def nostat_logs(problem, W) -> tuple[float, float]:
    """(log‖∇L(W)‖_F, log B(W)), the bound's slack recorded."""
    log_norm, log_bound = log_gradient_norm(problem, W), log_nostat_bound(problem, W)
    if math.isfinite(log_norm) and math.isfinite(log_bound):
        evidence.metric("log‖∇L(W)‖", log_norm)
        evidence.slack("B(W) / ‖∇L(W)‖", math.exp(log_bound - log_norm), BOUND_RATIO)
    return log_norm, log_bound


@claim("TF-NOSTAT")
@given(inst=nostat_instances(), seed=SEEDS)
def test_no_stationary_points(inst, seed):
    """If the queries z_i are linearly independent, each input's tokens are linearly independent
    (T ≤ d) and every input has two distinct scores, then ∇L(W) ≠ 0 for every W; quantitatively [D],
    ‖∇L(W)‖_F ≥ B(W) > 0."""
    for W in nostat_points(inst.problem, seed):
        log_norm, log_bound = nostat_logs(inst.problem, W)
        assert math.isfinite(log_bound), f"B(W) = 0 at ‖W‖ = {np.linalg.norm(W):.3g}"
        assert log_norm >= log_bound - LOG_BOUND_TOL, (
            f"log‖∇L(W)‖ = {log_norm:.6g} < log B(W) = {log_bound:.6g} at ‖W‖ = "
            f"{np.linalg.norm(W):.3g} (seed {inst.seed})"
        )


@claim("TF-NOSTAT-ANY-T")
@given(
    inst=official_cross_instances(n=st.integers(1, 4), T=st.integers(5, 8), d=st.integers(4, 4)),
    seed=SEEDS,
)
def test_no_stationary_points_any_t(inst, seed):
    """If the queries z_i are linearly independent and every input has two distinct scores, then for
    any T (even T > d) ∇L(W) ≠ 0 for every W, with ‖∇L(W)‖_F ≥ B(W) > 0."""
    for W in nostat_points(inst.problem, seed):
        log_norm, log_bound = nostat_logs(inst.problem, W)
        assert math.isfinite(log_bound), f"B(W) = 0 at ‖W‖ = {np.linalg.norm(W):.3g}"
        assert log_norm >= log_bound - LOG_BOUND_TOL, (
            f"log‖∇L(W)‖ = {log_norm:.6g} < log B(W) = {log_bound:.6g} at ‖W‖ = "
            f"{np.linalg.norm(W):.3g} (seed {inst.seed})"
        )


def descent_losses(problem, W0) -> tuple[float, np.ndarray]:
    """(L_W, the losses of DESCENT_STEPS GD steps with η = 1/L_W from W0), the losses
    recomputed by the torch model from the iterates."""
    L_W = problem.prompt.smoothness_bound()
    evidence.metric("L_W", L_W)
    run = w_gd(problem, W0, eta=1.0 / L_W, steps=DESCENT_STEPS)
    return L_W, problem.prompt.loss_path(torch.from_numpy(run.Ws.reshape(len(run.Ws), -1))).numpy()


@claim("TF-NOSTAT-DESCENT")
@given(inst=with_random_init(nostat_instances()))
def test_gd_loss_non_increasing(inst):
    """Under the NOSTAT hypotheses, GD W ← W − η∇L(W) with η = 1/L_W, L_W a rigorous
    Lipschitz constant of ∇L in Frobenius geometry, has L(W(k)) non-increasing."""
    L_W, losses = descent_losses(inst.problem, inst.W0)
    rise = np.diff(losses)
    k = int(np.argmax(rise))
    evidence.slack("max_k L(W(k+1)) − L(W(k))", float(rise[k]), LOSS_RISE_TOL)
    assert rise[k] <= LOSS_RISE_TOL, (
        f"L(W(k+1)) − L(W(k)) = {rise[k]:.3g} > {LOSS_RISE_TOL:g} at k = {k} (η = 1/L_W, "
        f"L_W = {L_W:.4g}, seed {inst.seed})"
    )


@claim("TF-NOSTAT-GROWTH")
@given(inst=with_random_init(nostat_instances()))
def test_norm_grows(inst):
    """Under the NOSTAT hypotheses, ‖W(t)‖ → ∞ under gradient flow from any W(0): the flow has no
    finite limit point, and ‖W(t)‖ is eventually increasing."""
    norms, s, bounded = growth(inst.problem, inst.W0, GROWTH_NORM)
    assert not bounded, bounded
    tail = norms[s >= s[-1] / 2]
    drop = float(np.max(-np.diff(tail), initial=0.0))
    evidence.metric("‖W(0)‖", float(norms[0]))
    evidence.metric("min ‖W(t)‖", float(norms.min()))
    assert drop <= 0.0, (
        f"‖W‖ decreases by {drop:.3g} along the last half of the path (arc length "
        f"{s[-1] / 2:.4g}–{s[-1]:.4g}, seed {inst.seed})"
    )


# ---- §2.4 G-EQ ----------------------------------------------------------------------------------


def geq_logs(problem, W, W_mm, alpha) -> tuple[float, float, float]:
    """(log|⟨∇L(W), W^mm⟩|, its sign, log D(W)), the bound's slack recorded."""
    log_value, sign, _ = descent_value(problem, W, W_mm, alpha)
    log_bound = log_geq_bound(problem, W, alpha)
    if sign < 0:
        evidence.slack("D(W) / −⟨∇L(W), W^mm⟩", math.exp(log_bound - log_value), BOUND_RATIO)
    return log_value, sign, log_bound


@claim("TF-GEQ-LEMMA")
@given(inst=equal_nonopt_cross_instances(), seed=SEEDS)
def test_geq_descent_lemma(inst, seed):
    """If every input's non-optimal tokens share one score γ_i⁻ < γ_i⁺ and Att-SVM(opt) is
    feasible, then ⟨∇L(W), W^mm⟩ < 0 for every W; quantitatively −⟨∇L(W), W^mm⟩ ≥ (1/n) Σ_i
    |ℓ'_i| (γ_i⁺ − γ_i⁻) s_i,opt (1 − s_i,opt) > 0."""
    W_mm = frobenius_svm(inst, inst.alpha, "Att-SVM(opt)")
    for W in random_matrices(seeded(seed), inst.d, POINTS_PER_EXAMPLE, *W_NORMS):
        log_value, sign, log_bound = geq_logs(inst.problem, W, W_mm, inst.alpha)
        where = f"at ‖W‖ = {np.linalg.norm(W):.3g} (seed {inst.seed})"
        assert sign < 0, f"⟨∇L(W), W^mm⟩ has sign {sign:+g} {where}"
        assert log_value >= log_bound - LOG_BOUND_TOL, (
            f"−⟨∇L(W), W^mm⟩ = e^{log_value:.6g} < D(W) = e^{log_bound:.6g} {where}"
        )


@claim("TF-GEQ-GLOBAL")
@example(inst=pinned("TF-GEQ-GLOBAL"))
@given(inst=with_random_init(equal_nonopt_cross_instances()))
def test_geq_global_convergence(inst):
    """Under Assumption A and η ≤ 1/L_W, if every input's non-optimal tokens share one score
    and Att-SVM(opt) is feasible, then GD from any W(0) has ‖W(t)‖ → ∞ and W(t)/‖W(t)‖ →
    W^mm/‖W^mm‖ (any n ≥ 1)."""
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")


@claim("TF-GEQ-GLOBAL-N1")
@given(inst=with_random_init(equal_nonopt_cross_instances(n=1)))
def test_geq_global_single_input(inst):
    """G-EQ for a single input (n = 1): equal non-optimal scores and Att-SVM(opt) feasible ⇒
    gradient flow from any W(0) converges in direction to W^mm(opt), with s_opt → 1."""
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")


# ---- §2.6 L-LOC ----------------------------------------------------------------------------------


@claim("TF-LLOC-CONE")
@example(scan=pinned_ray_scan("TF-LLOC-CONE", LLOC_GRID))
@given(scan=cone_scan(local_opt_cross_instances(), LLOC_GRID))
def test_local_convergence_cone(scan):
    """For a Frobenius-locally-optimal α (margin gap δ ≥ 0.1), GD started in the cone
    {‖W‖ = R0, 1 − cos(W, W^mm_α) ≤ ε} converges in direction to W^mm_α with s_iα_i → 1, for
    R0 = 100 and ε = 3e-5."""
    inst, W0s = scan
    lims = [flow_limit(inst.problem, W0) for W0 in W0s[:-1]] + [w_flow(inst.problem, W0s[-1])]
    worked = [
        R0 for (R0, _), lim in zip(LLOC_GRID, lims, strict=True) if lim.converged_to(inst.alpha)
    ]
    if worked:
        evidence.metric("smallest R0 of the scan that converged", min(worked))
    what = f"the locally-optimal (R0 = {LLOC_GRID[-1][0]:g})"
    assert lims[-1].converged_to(inst.alpha), lims[-1].why_not(inst.alpha, what)


@claim("TF-LLOC-CONE-R1000")
@given(inst=local_opt_cross_instances().flatmap(lambda i: cross_cone_inits(i, *LLOC_WIDE_CONE)))
def test_local_convergence_wide_cone(inst):
    """For a Frobenius-locally-optimal α (margin gap δ ≥ 0.1), gradient flow started in the
    cone {‖W‖ = 1000, 1 − cos(W, W^mm_α) ≤ 1e-6} converges in direction to W^mm_α."""
    lim = w_flow(inst.problem, inst.W0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the locally-optimal")


@claim("TF-LLOC-RANDOM")
@given(inst=with_random_init(official_cross_instances(n=6, T=8, d=10), scale=official_init_std(10)))
def test_local_convergence_random_init(inst):
    """From a random W(0), the selection α̂ that gradient flow reaches is Frobenius-locally
    optimal, and W(t)/‖W(t)‖ → W^mm_α̂/‖W^mm_α̂‖."""
    lim = w_flow(inst.problem, inst.W0)
    alpha_hat = lim.outcome.selected
    assert lim.diverges, lim.why_not(alpha_hat, "its own")
    evidence.metric("α̂ = opt", float(np.array_equal(alpha_hat, inst.alpha)))
    verdict = local_optimality(inst.problem.prompt.keys, inst.problem.scores, alpha_hat)
    assert verdict.locally_optimal, (
        f"the flow selects α̂ = {alpha_hat.tolist()}, which is not locally optimal: {verdict.reason}"
    )
    assert lim.converged_to(alpha_hat), lim.why_not(alpha_hat, "its own")


# ---- §4.1 the official local-convergence experiment, W half ------------------------------------


@functools.cache
def official_ngd_runs(start: int = 0) -> tuple:
    """The §4.1 runs of the two claims below: official seeds start, start + 1, … (the first
    EXP_SEEDS with a unique opt), W(0) of the default linear-layer scale from seed + shift,
    log-space NGD (lr 0.1) recorded at 2000 and 4000 steps; and the certified flow from each
    W(0). Returns (instances, {steps: (W per run)}, flow outcomes)."""
    insts = official_seeds(6, 8, 10, EXP_SEEDS, start)
    at = {k: [] for k in EXP_STEPS}
    flows = []
    for inst in insts:
        W0 = random_W(inst.d, inst.seed + INIT_SEED_SHIFT, official_init_std(inst.d)).numpy()
        run = w_ngd(inst.problem, W0, lr=EXP_LR, steps=max(EXP_STEPS), record_every=min(EXP_STEPS))
        for k in EXP_STEPS:
            at[k].append(run.Ws[list(run.steps).index(k)])
        with failures.tolerate(failures.GRADIENT_FLOW):
            flows.append(converge(inst.problem.prompt, W0.reshape(-1)))
    return insts, at, flows


class OfficialCorrs(NamedTuple):
    """The §4.1 runs after some steps: mean and min corr(W, W^mm_α̂) and the largest
    1 − max softmax probability, with the official seeds of the worst runs."""

    mean: float
    min: float
    min_seed: int
    max_gap: float
    gap_seed: int


def official_corrs(steps: int, start: int = 0) -> OfficialCorrs:
    """corr(W, W^mm_α̂) and 1 − max softmax probability of every §4.1 run from official seed
    ``start`` on after ``steps`` NGD steps, α̂ the argmax of the final softmax; the certified
    flows' outcomes recorded beside."""
    insts, at, flows = official_ngd_runs(start)
    corrs, gaps = [], []
    for inst, W, out in zip(insts, at[steps], flows, strict=True):
        problem = inst.problem
        alpha = problem.selected(W)
        corrs.append(correlation(W, frobenius_svm(problem, alpha, "Att-SVM(α̂)")))
        gaps.append(1.0 - float(problem.softmax(torch.from_numpy(W)).max(1).values.min()))
        evidence.metric("α̂ = opt", float(np.array_equal(alpha, inst.alpha)))
        if out.converged:
            evidence.metric("certified flow: 1 − corr(W, W^mm_α̂)", out.one_minus_cos)
            evidence.metric("certified flow selects α̂", float(np.array_equal(out.selected, alpha)))
    mean, worst, top = float(np.mean(corrs)), int(np.argmin(corrs)), int(np.argmax(gaps))
    evidence.metric("mean corr(W, W^mm_α̂)", mean)
    evidence.metric("min corr(W, W^mm_α̂)", corrs[worst])
    evidence.slack("(1 − mean corr) / (1 − 0.99)", 1 - mean, 1 - EXP_MEAN_CORR)
    evidence.slack("(1 − min corr) / (1 − 0.95)", 1 - corrs[worst], 1 - EXP_MIN_CORR)
    evidence.slack("1 − max softmax probability", gaps[top], EXP_PROB_GAP, derivation=PROB_READING)
    return OfficialCorrs(mean, corrs[worst], insts[worst].seed, gaps[top], insts[top].seed)


@claim("TF-EXP-LOCAL-W")
def test_official_local_convergence_w():
    """In the official experiment, NGD W ← W − 0.1·∇L/‖∇L‖_F has after 2000 steps
    corr(W, W^mm_α̂) ≥ 0.99 on average and ≥ 0.95 in every run, and max_t s_it ≥ 1 − 1e-6 on every
    input of every run."""
    r = official_corrs(2000)
    assert r.mean >= EXP_MEAN_CORR, f"mean corr(W, W^mm_α̂) = {r.mean:.5f} < {EXP_MEAN_CORR}"
    assert r.min >= EXP_MIN_CORR, (
        f"corr(W, W^mm_α̂) = {r.min:.5f} < {EXP_MIN_CORR} after 2000 steps "
        f"(official seed {r.min_seed})"
    )
    assert r.max_gap <= EXP_PROB_GAP, (
        f"1 − max softmax probability = {r.max_gap:.3g} > {EXP_PROB_GAP:g} "
        f"(official seed {r.gap_seed})"
    )


@claim("TF-EXP-LOCAL-W-4000")
def test_official_local_convergence_w_4000():
    """In the official experiment, NGD W ← W − 0.1·∇L/‖∇L‖_F has after 4000 steps
    corr(W, W^mm_α̂) ≥ 0.99 on average and ≥ 0.95 in every run, and max_t s_it ≥ 1 − 1e-6 on every
    input of every run."""
    r = official_corrs(4000, EXP_HELDOUT_START)
    assert r.mean >= EXP_MEAN_CORR, f"mean corr(W, W^mm_α̂) = {r.mean:.5f} < {EXP_MEAN_CORR}"
    assert r.min >= EXP_MIN_CORR, (
        f"corr(W, W^mm_α̂) = {r.min:.5f} < {EXP_MIN_CORR} after 4000 steps "
        f"(official seed {r.min_seed})"
    )
    assert r.max_gap <= EXP_PROB_GAP, (
        f"1 − max softmax probability = {r.max_gap:.3g} > {EXP_PROB_GAP:g} "
        f"(official seed {r.gap_seed})"
    )


# ---- §2.5 OP-GLOB --------------------------------------------------------------------------------


@claim("TF-OPGLOB-FREQ")
def test_overparameterization_frequency():
    """Over-parameterization catalyses global convergence (empirical): gradient
    flow from W(0) = 0 selects opt on every input at least as often at d = 64 as at d = 4."""
    fractions, decided = opglob_fractions()
    for d, fraction in zip(OPGLOB_DS, fractions, strict=True):
        evidence.metric(f"fraction selecting opt, d = {d}", fraction)
    if min(decided[0], decided[-1]) < OPGLOB_SEEDS // 2:
        evidence.inconclusive(f"decided flows per end cell: {decided[0]}, {decided[-1]}")
    assert fractions[-1] >= fractions[0], (
        f"fraction selecting opt at d = {OPGLOB_DS[-1]}: {fractions[-1]:.3f} < at d = "
        f"{OPGLOB_DS[0]}: {fractions[0]:.3f} ({decided[-1]} and {decided[0]} decided flows)"
    )


# ---- §2.11 RATE (2402.05738) --------------------------------------------------------------------


def steps_to_corr(problem, opt) -> dict[float, tuple[float, float, float]] | None:
    """Steps to levels of corr(W, W^mm(opt)) from W(0) = 0 for Polyak, NGD (lr 0.1) and GD
    (η = 1): {level: (Polyak, NGD, GD)}; None where a method does not select opt (the premise).

    The levels are RATE_LEVEL and, where GD does not reach it within RATE_STEPS, the best
    correlation GD reaches (GD at a fixed step has ‖W‖ ~ log t: 0.99 takes it far beyond any
    budget). So NGD against GD is compared where both are measured, never decided by the
    budget alone. NGD not reaching RATE_LEVEL is inconclusive; Polyak runs up to NGD's count."""
    W_mm = frobenius_svm(problem, opt, "Att-SVM(opt)")
    ngd = w_ngd(problem, None, lr=NGD_LR, steps=RATE_STEPS)
    gd = w_gd(problem, None, eta=GD_ETA, steps=RATE_STEPS)
    selects = [np.array_equal(problem.selected(r.W), opt) for r in (ngd, gd)]
    if not evidence.premise(all(selects), "NGD and GD select opt"):
        return None
    corr = {"NGD": correlations(ngd.Ws, W_mm), "GD": correlations(gd.Ws, W_mm)}
    k_ngd = first_reaching(corr["NGD"], ngd.steps, RATE_LEVEL)
    if not math.isfinite(k_ngd):
        evidence.inconclusive(f"NGD did not reach corr {RATE_LEVEL} in {RATE_STEPS} steps")
    pol = polyak(problem, None, steps=int(k_ngd), alpha=opt)
    if not evidence.premise(np.array_equal(problem.selected(pol.W), opt), "Polyak selects opt"):
        return None
    corr["Polyak"] = correlations(pol.Ws, W_mm)
    runs = {"Polyak": pol, "NGD": ngd, "GD": gd}
    common = min(RATE_LEVEL, float(np.nanmax(corr["GD"])))  # corr is NaN at W(0) = 0 only
    evidence.metric("common level of corr(W, W^mm) (the best GD reaches)", common)
    steps = {}
    for level in sorted({common, RATE_LEVEL}):
        steps[level] = tuple(
            first_reaching(corr[name], runs[name].steps, level) for name in ("Polyak", "NGD", "GD")
        )
    k_pol, k_ngd, k_gd = steps[common]
    evidence.metric("GD steps / NGD steps to the common level", k_gd / k_ngd)
    evidence.metric(f"NGD steps / Polyak steps to corr {RATE_LEVEL}", k_ngd / steps[RATE_LEVEL][0])
    return steps


@claim("TF-RATE-ORDER")
@given(inst=official_cross_instances(n=6, T=8, d=10))
def test_rate_order(inst):
    """Adaptive steps accelerate directional convergence: where Polyak, NGD and GD all select opt,
    the number of steps to reach a level of corr(W, W^mm) satisfies Polyak ≤ NGD < GD."""
    steps = steps_to_corr(inst.problem, inst.alpha)
    if steps is None:
        return
    for level, (k_pol, k_ngd, k_gd) in steps.items():
        assert k_pol <= k_ngd < k_gd, (
            f"steps to corr ≥ {level:.4f}: Polyak {k_pol:g}, NGD {k_ngd:g}, GD {k_gd:g} "
            f"(seed {inst.seed}; GD inf: not reached in {RATE_STEPS} steps)"
        )
