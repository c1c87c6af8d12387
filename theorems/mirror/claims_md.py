"""ℓp mirror descent on attention (arXiv 2410.14581): spec tfsvm §1.6 (MD), §1.8 (the Bregman
divergence), §2.10 MD-*, §4.5 and §4.6.

MD with potential ψ(W) = ‖vec W‖_p^p/p steps the dual variable sign(W)|W|^{p−1} by the
gradient normalised in the dual norm ‖·‖_{p*}; p = 2 is normalised GD. Every run here takes
its directions from log space (``models.cross.md``, ``models.mirror_joint.joint_md``), so no
step freezes when the softmax saturates. The official protocols are in ``common``; the wrong
variants of these results are in ``claims_controls``.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import assume, event, example, given
from hypothesis import strategies as st

from models.cross import bregman_divergence, correlation, md, w_ngd
from models.mirror_joint import (
    JOINT_PRINTED_ALPHA,
    CrossJointProblem,
    joint_md,
    naive_joint_md,
    official_joint_data,
)
from models.normsvm import CONIC_TOL
from strategies.combinators import SEEDS, seeded
from strategies.cross import official_cross_instances, with_random_init
from strategies.instances import CrossInstance
from theorems import claim, evidence, saved_arguments
from theorems.mirror import plots
from theorems.mirror.common import (
    BREGMAN_BOUND,
    MD_STEPS,
    OFFICIAL_SHAPE,
    PS,
    RECORD_EVERY,
    SMALL,
    cosines,
    joint_instance,
    joint_run,
    joint_svms,
    lp_local_gap,
    lp_svm,
    normal_init,
    official_md_data,
    random_orthogonal,
    record,
    rotated,
    run_md,
)

DTYPE = torch.float64

# ---- strategies and tolerances ------------------------------------------------------------------

#: The official local-convergence instances (spec §4.5): (n, T, d) = (6, 8, 10), unit tokens,
#: queries and head, random labels, W(0) ~ N(0, 1) entrywise (``--std 1``).
OFFICIAL = with_random_init(official_cross_instances(*OFFICIAL_SHAPE), scale=1.0)

#: MD-DEF-P2: one step of md(p = 2) and of w_ngd from the same W agree to this, relative to
#: max(1, ‖W⁺‖). Both add lr·(unit direction); they differ only in rounding (md rescales by
#: max|G̃| and takes the ℓ2 norm after, ngd normalises the engine's field), ~1e-16 per step.
#: 1e-11 is rounding, not a different method (a wrong exponent in the dual map is off by O(1)
#: at the first step). P2_STEPS: the iterates of md's run the steps start from.
P2_TOL = 1e-11
P2_STEPS = 200
#: MD-DEF-BREGMAN: the divergence from its definition agrees to this (both are O(1) sums of
#: ≤ 36 terms of unit-ℓp matrices in float64: rounding ~1e-15); ≥ −this counts as ≥ 0, and
#: ≤ this as zero for positive multiples.
BREGMAN_DEF_TOL = 1e-12
#: MD-DEF-BREGMAN: a direction perturbed by a relative ε = 1e-3 has D of order ε² (measured
#: ≥ 3.4e-8 over 102 draws), ≫ the rounding tolerance above: "0 iff the same direction" is
#: tested at this separation.
BREGMAN_PERTURB = 1e-3
#: MD-ZERO-COLS: steps of MD from W(0) = 0 (the property is exact at every step).
ZERO_COLS_STEPS = 300
#: MD-BREGMAN-MONOTONE: D_k may exceed D_{k−1} by this much and still count as non-increasing
#: (D is 1 − an O(1) sum: its rounding is ~1e-15; the increases seen in the counterexamples are
#: 3e-5 per 10 steps).
MONOTONE_TOL = 1e-12
#: MD-BREGMAN-MONOTONE-LOCAL: spec §3.5's margin gap (every token scoring at least α_i's score
#: has margin ≥ 1 + δ at the ℓp SVM): below it a locally optimal α is near-vacuous.
LOCAL_GAP = 0.1
#: MD-EXP-LOCAL: the seeds of the official script are 1–100; the experiment runs the first 12.
EXP_SEEDS = tuple(range(1, 13))
#: MD-EXP-LOCAL: W(0) is drawn from seed INIT_SEED_BASE + seed (the official W(0) comes from an
#: unseeded global generator and cannot be reproduced).
INIT_SEED_BASE = 1000
#: MD-EXP-LOCAL: points per curve of md_bregman.png (the runs are recorded every 10 steps).
FIGURE_POINTS = 200
#: MD-JOINT: spec §2.10 "Joint: assert corr(W) ≥ 0.999 and cos(v, v^mm_p) ≥ 0.999".
JOINT_CORR = 0.999
#: MD-META-ROT2: two certified values of the same optimum agree to 2·CONIC_TOL·max(1, value)
#: (each certificate bounds |‖W‖ − Σλ| ≤ CONIC_TOL·max(1, ‖W‖), and Σλ ≤ OPT ≤ ‖W‖).
ROT_VALUE_TOL = 2 * CONIC_TOL
#: MD-META-ROT2: directions of the unique optimum agree to this, relative to max(1, ‖W^mm‖): for
#: the min-norm point W* of a convex set and any feasible W, ‖W − W*‖² ≤ ‖W‖² − ‖W*‖², and a
#: certified ‖W‖ ≤ (1 + CONIC_TOL)·OPT, so each solve is within √(2·CONIC_TOL)·OPT of W*: the two
#: within twice that (2.8e-3). Measured: ≤ 1.7e-5 over 30 draws (Clarabel's power-cone path).
ROT_DIR_TOL = 2 * math.sqrt(2 * CONIC_TOL)


def _rel(A, B) -> float:
    return float(np.linalg.norm(A - B) / max(1.0, np.linalg.norm(B)))


# ---- §1.6, §1.8: definitions ---------------------------------------------------------------------


#: MD-DEF-P2: ci-random seed 1's draw (issue 21), where two whole 200-step runs of md(p = 2)
#: and NGD drift apart by 4e-4 in one token order and agree to 1e-11 in another (fragile).
P2_FRAGILE_RUNS = CrossInstance.from_json(
    json.loads((Path(__file__).parent / "pinned" / "MD-DEF-P2.json").read_text())
)


@claim("MD-DEF-P2")
@example(inst=P2_FRAGILE_RUNS)
@given(inst=with_random_init(SMALL, scale=1.0))
def test_md_p2_is_ngd(inst):
    """ℓp mirror descent with p = 2 is normalised GD: the dual map sign(W)|W|^{p−1} is the identity
    and ‖·‖_{p*} = ‖·‖_F, so a step of md(p = 2) and a step of W-NGD (lr 0.1) from the same W
    give the same W⁺, at every iterate of md's run."""
    record(inst)
    # Step for step, from the same iterate: two whole 200-step runs would also compare how the
    # flow amplifies a 1e-16 difference (4e-4 on a ci-random draw, issue 21: fragile).
    run = md(inst.problem, inst.W0, p=2.0, lr=0.1, steps=P2_STEPS)
    errs = []
    for k, W in zip(run.steps[:-1], run.Ws[:-1], strict=True):
        a = md(inst.problem, W, p=2.0, lr=0.1, steps=1)
        b = w_ngd(inst.problem, W, lr=0.1, steps=1)
        if a.stop != b.stop or len(a.Ws) != len(b.Ws):
            raise AssertionError(f"from step {k}: md(p=2) stops ({a.stop}), NGD ({b.stop})")
        errs.append(_rel(a.Ws[-1], b.Ws[-1]))
    k = int(np.argmax(errs))
    evidence.slack("‖W_md − W_ngd‖/max(1, ‖W_ngd‖) (max over steps)", errs[k], P2_TOL)
    assert errs[k] <= P2_TOL, (
        f"md(p=2) and NGD differ by {errs[k]:.2e} (relative) > {P2_TOL:g} from step {run.steps[k]}"
    )


def _psi(W: np.ndarray, p: float) -> float:
    return float(np.sum(np.abs(W) ** p) / p)


def _definition(A: np.ndarray, B: np.ndarray, p: float) -> float:
    """D_ψ(Â, B̂) = ψ(Â) − ψ(B̂) − ⟨∇ψ(B̂), Â − B̂⟩, ψ = ‖·‖_p^p/p, on the unit-ℓp matrices."""
    A = A / np.linalg.norm(A.ravel(), p)
    B = B / np.linalg.norm(B.ravel(), p)
    grad = np.sign(B) * np.abs(B) ** (p - 1)
    return _psi(A, p) - _psi(B, p) - float(np.sum(grad * (A - B)))


@claim("MD-DEF-BREGMAN")
@given(
    seed=SEEDS,
    d=st.integers(2, 6),
    p=st.floats(1.1, 4.0),
    scale=st.floats(1e-3, 1e3),
)
@example(seed=0, d=10, p=1.75, scale=1.0)
@example(seed=0, d=10, p=3.0, scale=1.0)
def test_bregman_divergence_definition(seed, d, p, scale):
    """The directional Bregman divergence (2410.14581, Fig. 4) is the Bregman divergence D_ψ(Â, B̂)
    = ψ(Â) − ψ(B̂) − ⟨∇ψ(B̂), Â − B̂⟩ of ψ = ‖·‖_p^p/p between the unit-ℓp matrices Â = A/‖A‖_p
    and B̂ = B/‖B‖_p: it equals that definition, is ≥ 0, is 0 when B is a positive multiple of A
    and > 0 when B's direction differs."""
    gen = seeded(seed)
    A, B, E = (torch.randn(d, d, generator=gen, dtype=DTYPE).numpy() for _ in range(3))
    E = E / np.linalg.norm(E) * np.linalg.norm(A)
    cases = {
        "B": (B, "differs"),
        "A + εE": (A + BREGMAN_PERTURB * E, "differs"),
        "c·A": (scale * A, "same"),
    }
    for name, (M, direction) in cases.items():
        got, want = bregman_divergence(A, M, p), _definition(A, M, p)
        evidence.slack("|D − definition|", abs(got - want), BREGMAN_DEF_TOL)
        assert abs(got - want) <= BREGMAN_DEF_TOL, (
            f"D_ψ(A, {name}) = {got!r}, definition {want!r} (p = {p}, d = {d})"
        )
        assert got >= -BREGMAN_DEF_TOL, f"D_ψ(A, {name}) = {got!r} < 0 (p = {p}, d = {d})"
        zero = abs(got) <= BREGMAN_DEF_TOL
        if direction == "same":
            assert zero, f"D_ψ(A, {scale:g}·A) = {got!r} ≠ 0 (p = {p}, d = {d})"
        else:
            evidence.metric(f"D_ψ(A, {name})", got)
            assert not zero, f"D_ψ(A, {name}) = {got!r} = 0 for another direction (p = {p})"


# ---- §1.6: the structure of the iterates -------------------------------------------------------


@st.composite
def zero_coordinate_queries(draw):
    """A small official instance whose queries all vanish on a drawn nonempty set of coordinates
    (then renormalised): the columns of W outside the joint support of the z_i."""
    inst = draw(
        official_cross_instances(n=st.integers(1, 4), T=st.integers(2, 6), d=st.integers(2, 7))
    )
    d = inst.d
    off = draw(st.lists(st.integers(0, d - 1), min_size=1, max_size=d - 1, unique=True))
    Z = inst.Z.clone()
    Z[:, off] = 0.0
    norms = torch.linalg.vector_norm(Z, dim=1, keepdim=True)
    kept = bool((norms > 1e-3).all())
    if not kept:
        event("reject: a query vanishes on the kept coordinates")
    assume(kept)
    inst = dataclasses.replace(inst, Z=Z / norms, meta={**inst.meta, "zero_coordinates": off})
    return inst, sorted(off)


@claim("MD-ZERO-COLS")
@given(data=zero_coordinate_queries(), p=st.floats(1.2, 4.0))
def test_md_zero_columns(data, p):
    """From W(0) = 0, normalised ℓp mirror descent (any 1 < p < ∞) keeps the columns of W outside
    the joint support of the queries exactly zero: if z_ik = 0 for every input i, then W(k)[:,
    k] = 0 at every step (∇L = (1/n)Σ_i ℓ'_i (Σ_t c_it x_it) z_iᵀ has those columns zero, and
    the dual and primal maps act entrywise)."""
    inst, off = data
    record(inst)
    run = md(inst.problem, None, p=p, lr=0.1, steps=ZERO_COLS_STEPS, record_every=1)
    leak = float(np.abs(run.Ws[:, :, off]).max())
    moved = float(np.abs(run.W).max())
    evidence.metric("max |W_jk| on the queries' support at the end", moved)
    if not evidence.premise(moved > 0, "W moved"):
        return
    evidence.metric("max |W(k)[:, off-support columns]|", leak)
    assert leak == 0.0, (
        f"max |W(k)_jc| = {leak:.3e} ≠ 0 on the columns c ∈ {off} where every z_ic = 0 (p = {p})"
    )


# ---- §2.10 MD-DIR, MD-OWN-P, MD-RATE: the official local-convergence protocol ----------------


def _own_bregman(inst, p: float):
    """(D_ψ to the own-p SVM at α̂ after the official budget, the run) for MD-p from inst.W0."""
    result = run_md(inst, p)
    D = bregman_divergence(lp_svm(inst, result.alpha, p).W, result.W, p)
    evidence.metric(f"Bregman divergence, p = {p:g}", D)
    evidence.metric(f"burn-in / budget, p = {p:g}", result.run.steps[result.settled] / MD_STEPS[p])
    evidence.slack(f"D_ψ(W^mm(ℓp), W) at p = {p:g}", D, BREGMAN_BOUND[p])
    return D, result


def _bregman_failure(D: float, result) -> str | None:
    if D <= BREGMAN_BOUND[result.p]:
        return None
    return (
        f"p = {result.p:g}: D_ψ = {D:.3e} > {BREGMAN_BOUND[result.p]:g} after "
        f"{MD_STEPS[result.p]} steps (α̂ = {result.alpha.tolist()}, selection settled at step "
        f"{result.run.steps[result.settled]})"
    )


DIR_STATEMENT = (
    "Normalised ℓp mirror descent (lr 0.1) from W(0) ~ N(0, 1) on the official (n, T, d) = "
    "(6, 8, 10) instances converges in direction to the ℓp-AttSVM W^mm_α̂(ℓp) of the selection "
    "α̂ it reaches: the directional Bregman divergence D_ψ(Ŵ^mm, Ŵ) is ≤ 1e-2 / 3e-2 / 2e-2 "
    "after 1500 / 2000 / 20000 steps for p = 1.75 / 2 / 3"
)


@claim("MD-DIR")
@example(**saved_arguments("MD-DIR"))
@given(inst=OFFICIAL)
def test_md_directional_convergence(inst):
    """Normalised ℓp mirror descent (lr 0.1) from W(0) ~ N(0, 1) on the official (n, T, d) = (6, 8,
    10) instances converges in direction to the ℓp-AttSVM W^mm_α̂(ℓp) of the selection α̂ it
    reaches: the directional Bregman divergence D_ψ(Ŵ^mm, Ŵ) is ≤ 1e-2 / 3e-2 / 2e-2 after 1500
    / 2000 / 20000 steps for p = 1.75 / 2 / 3."""
    record(inst)
    failures = [_bregman_failure(*_own_bregman(inst, p)) for p in PS]
    failures = [f for f in failures if f]
    assert not failures, "; ".join(failures)


@claim("MD-DIR-SETTLED")
@given(inst=OFFICIAL)
def test_md_directional_convergence_settled(inst):
    """Normalised ℓp mirror descent (lr 0.1) from W(0) ~ N(0, 1) on the official (n, T, d) = (6, 8,
    10) instances converges in direction to the ℓp-AttSVM W^mm_α̂(ℓp) of the selection α̂ it
    reaches: the directional Bregman divergence D_ψ(Ŵ^mm, Ŵ) is ≤ 1e-2 / 3e-2 / 2e-2 after 1500
    / 2000 / 20000 steps for p = 1.75 / 2 / 3, for every p whose run has settled its selection
    within the first half of its budget (the selection is α̂ at every record from step 750 /
    1000 / 10000 on)."""
    record(inst)
    failures, settled = [], []
    for p in PS:
        D, result = _own_bregman(inst, p)
        if result.run.steps[result.settled] <= MD_STEPS[p] // 2:
            settled.append(p)
            failures.append(_bregman_failure(D, result))
    if not evidence.premise(bool(settled), "some p settled within half its budget"):
        return
    failures = [f for f in failures if f]
    assert not failures, "; ".join(failures)


@claim("MD-OWN-P")
@given(inst=OFFICIAL, p=st.sampled_from(PS))
def test_md_own_p_closest(inst, p):
    """MD-p ends closest to its own SVM: for normalised ℓp-MD on the official (6, 8, 10) instances
    with the official budgets, argmax over q ∈ {1.75, 2, 3} of corr(W_MD-p, W^mm_α̂(ℓq)) is q =
    p."""
    record(inst)
    result = run_md(inst, p)
    cos = cosines(result, PS)
    best = max(cos, key=cos.get)
    other = max(c for q, c in cos.items() if q != p)
    evidence.metric(f"cos own − best other, p = {p:g}", cos[p] - other)
    assert best == p, (
        f"MD-{p:g} is closest to the ℓ{best:g}-SVM: corr = "
        + ", ".join(f"{c:.5f} (q = {q:g})" for q, c in cos.items())
        + f" at α̂ = {result.alpha.tolist()}"
    )


def _first_increase(D: np.ndarray, start: int) -> int | None:
    rises = np.flatnonzero(np.diff(D[start:]) > MONOTONE_TOL)
    return None if rises.size == 0 else start + int(rises[0])


def _monotone(result, D: np.ndarray) -> None:
    """Assert that D is non-increasing from the burn-in on (the message names the rise)."""
    start = result.settled
    evidence.metric("burn-in (steps until the selection settles)", result.run.steps[start])
    j = _first_increase(D, start)
    if j is None:
        return
    rises = np.flatnonzero(np.diff(D[start:]) > MONOTONE_TOL)
    steps = result.run.steps
    raise AssertionError(
        f"D_ψ rises from {D[j]:.6e} at step {steps[j]} to {D[j + 1]:.6e} at step {steps[j + 1]} "
        f"after the selection settled at step {steps[start]} (p = {result.p:g}, α̂ = "
        f"{result.alpha.tolist()}; {rises.size} rises on the grid of {RECORD_EVERY} steps, the "
        f"last at step {steps[start + rises[-1] + 1]}; final D_ψ = {D[-1]:.3e})"
    )


MONOTONE_STATEMENT = (
    "Normalised ℓp-MD (lr 0.1, official budgets 1500 / 2000 / 20000 steps at p = 1.75 / 2 / 3) "
    "from W(0) ~ N(0, 1) on the official (6, 8, 10) instances: let α̂ be the final selection and "
    "D_k = D_ψ(Ŵ^mm_α̂(ℓp), Ŵ(k)) on the grid k = 0, 10, 20, …; after the burn-in B (the first "
    "grid step from which the selection is α̂ at every later grid step), D_k is non-increasing "
    "(D_{k+10} ≤ D_k up to 1e-12)"
)


@claim("MD-BREGMAN-MONOTONE")
@example(**saved_arguments("MD-BREGMAN-MONOTONE"))
@given(inst=OFFICIAL, p=st.sampled_from(PS))
def test_bregman_eventually_monotone(inst, p):
    """Normalised ℓp-MD (lr 0.1, official budgets 1500 / 2000 / 20000 steps at p = 1.75 / 2 / 3)
    from W(0) ~ N(0, 1) on the official (6, 8, 10) instances: let α̂ be the final selection and
    D_k = D_ψ(Ŵ^mm_α̂(ℓp), Ŵ(k)) on the grid k = 0, 10, 20, …; after the burn-in B (the first
    grid step from which the selection is α̂ at every later grid step), D_k is non-increasing
    (D_{k+10} ≤ D_k up to 1e-12)."""
    record(inst)
    result = run_md(inst, p)
    D = result.bregman(lp_svm(inst, result.alpha, p).W)
    evidence.metric(f"final D_ψ, p = {p:g}", D[-1])
    _monotone(result, D)


@claim("MD-BREGMAN-MONOTONE-LOCAL")
@given(inst=OFFICIAL, p=st.sampled_from(PS))
def test_bregman_eventually_monotone_local(inst, p):
    """Normalised ℓp-MD (lr 0.1, official budgets 1500 / 2000 / 20000 steps at p = 1.75 / 2 / 3)
    from W(0) ~ N(0, 1) on the official (6, 8, 10) instances: let α̂ be the final selection and
    D_k = D_ψ(Ŵ^mm_α̂(ℓp), Ŵ(k)) on the grid k = 0, 10, 20, …; after the burn-in B (the first
    grid step from which the selection is α̂ at every later grid step), D_k is non-increasing
    (D_{k+10} ≤ D_k up to 1e-12), whenever α̂ is ℓp-locally optimal with the margin gap of spec
    §3.5 (every token scoring at least α̂_i's score has margin ≥ 1.1 at W^mm_α̂(ℓp))."""
    record(inst)
    result = run_md(inst, p)
    W_svm = lp_svm(inst, result.alpha, p).W
    gap = lp_local_gap(inst, result.alpha, W_svm)
    evidence.metric("margin gap δ of α̂ (ℓp)", min(gap, 10.0))
    if not evidence.premise(gap >= LOCAL_GAP, "α̂ ℓp-locally optimal with gap ≥ 0.1"):
        return
    _monotone(result, result.bregman(W_svm))


# ---- §4.5: the local-convergence experiment ------------------------------------------------------


@claim("MD-EXP-LOCAL")
def test_md_local_experiment():
    """The paper's local-convergence experiment (Fig. 4) on the official data of seeds 1–12 (n, T,
    d = 6, 8, 10; W(0) ~ N(0, 1); normalised MD, lr 0.1; 1500 / 2000 / 20000 steps for p = 1.75
    / 2 / 3): in every run the directional Bregman divergence to the own-p SVM at α̂ is ≤ 1e-2 /
    3e-2 / 2e-2, and the own-p SVM has the largest correlation among the ℓ1.75, ℓ2 and ℓ3 SVMs."""
    curves = {(p, q): [] for p in PS for q in PS}
    steps, failures = {}, []
    for seed in EXP_SEEDS:
        inst = dataclasses.replace(
            official_md_data(seed), W0=normal_init(OFFICIAL_SHAPE[2], INIT_SEED_BASE + seed)
        )
        for p in PS:
            result = run_md(inst, p)
            svms = {q: lp_svm(inst, result.alpha, q).W for q in PS}
            stride = max(1, len(result.run.steps) // FIGURE_POINTS)
            for q in PS:
                curves[p, q].append(result.bregman(svms[q], stride))
            steps[p] = result.record_steps(stride)
            D = curves[p, p][-1][-1]
            evidence.metric(f"Bregman divergence, p = {p:g}", D)
            evidence.slack(f"D_ψ(W^mm(ℓp), W) at p = {p:g}", D, BREGMAN_BOUND[p])
            cos = {q: correlation(svms[q], result.W) for q in PS}
            best = max(cos, key=cos.get)
            where = f"seed {seed}, p = {p:g}, α̂ = {result.alpha.tolist()}"
            if not D <= BREGMAN_BOUND[p]:
                failures.append(f"D_ψ = {D:.3e} > {BREGMAN_BOUND[p]:g} ({where})")
            if best != p:
                failures.append(f"closest SVM is ℓ{best:g} (corr {cos}) ({where})")
    for p in PS:
        finals = np.array([c[-1] for c in curves[p, p]])
        evidence.metric(f"mean Bregman divergence, p = {p:g}", float(finals.mean()))
    plots.bregman_figure(
        steps, {k: np.mean(v, axis=0) for k, v in curves.items()}, "md_bregman.png"
    )
    assert not failures, "; ".join(failures)


# ---- §4.6: joint (W, v) training -------------------------------------------------------------


@claim("MD-JOINT")
@pytest.mark.parametrize("p", PS)
def test_joint_md_converges(p):
    """Joint (W, v) normalised ℓp mirror descent (each parameter's gradient normalised by its own
    dual norm; lr 0.1; 1500 / 2000 / 20000 steps for p = 1.75 / 2 / 3) from W(0) = 0, v(0) = 0
    on the official hand-built instance (n = 2, T = 3, d = 2, z_i = x_i1) converges to the pair
    of ℓp SVMs at the selection α̂ it reaches: corr(W, W^mm_α̂(ℓp)) ≥ 0.999 and cos(v, v^mm_p) ≥
    0.999, with v^mm_p = argmin ‖v‖_p s.t. Y_i x_{iα̂_i}ᵀv ≥ 1."""
    problem = joint_instance()
    run = joint_run(problem, p)
    limit = joint_svms(problem, run, p)
    cW = correlation(limit.W_svm.W, run.W)
    cv = correlation(limit.v_svm.v, run.v)
    evidence.metric("1 − corr(W, W^mm(ℓp))", 1 - cW)
    evidence.metric("1 − cos(v, v^mm_p)", 1 - cv)
    evidence.metric("min margin Y_i f_i at the end", float(run.margins[-1].min()))
    evidence.slack("1 − corr(W, W^mm(ℓp)) vs 1 − 0.999", 1 - cW, 1 - JOINT_CORR)
    evidence.slack("1 − cos(v, v^mm_p) vs 1 − 0.999", 1 - cv, 1 - JOINT_CORR)
    where = f"p = {p:g}, α̂ = {limit.alpha.tolist()}"
    assert cW >= JOINT_CORR and cv >= JOINT_CORR, (
        f"corr(W, W^mm(ℓp)) = {cW:.6f}, cos(v, v^mm_p) = {cv:.6f}; both must be ≥ {JOINT_CORR} "
        f"({where})"
    )


def _joint_official_instance() -> CrossInstance:
    X, y, Z = official_joint_data()
    return CrossInstance(X=X, Z=Z, y=y, v=torch.ones(2, dtype=DTYPE), meta={"official": True})


@claim("MD-JOINT-FIRST-STEP")
@given(inst=SMALL, p=st.floats(1.2, 4.0))
@example(inst=_joint_official_instance(), p=1.75)
def test_joint_first_step(inst, p):
    """In joint (W, v) training from v(0) = 0 the first W-gradient is exactly zero (f_i =
    vᵀX_iᵀS(X_i W z_i) vanishes identically in W at v = 0), so at step 1 of joint normalised
    ℓp-MD from W(0) = 0 only v moves: W(1) = 0 and v(1) ≠ 0."""
    record(inst)
    problem = CrossJointProblem(inst.X, inst.Z, inst.y)
    for name, run in (
        ("log-space", joint_md(problem, p=p, steps=1)),
        ("autograd (official)", naive_joint_md(problem, p=p, steps=1)),
    ):
        W1, v1 = run.Ws[-1], run.vs[-1]
        evidence.metric(f"max |W(1)| ({name})", float(np.abs(W1).max()))
        assert not W1.any(), f"{name}: W moved at step 1: max |W(1)| = {np.abs(W1).max():.3e}"
        assert v1.any(), f"{name}: v did not move at step 1 (v(1) = 0)"


@claim("MD-JOINT-SELECTION")
@pytest.mark.parametrize("p", PS)
def test_joint_selection_matches_notebook(p):
    """On the official joint instance, joint normalised ℓp-MD from W(0) = 0, v(0) = 0 (lr 0.1, 1500
    / 2000 / 20000 steps) selects the tokens the official notebook printed: α̂ = (1, 0) for p =
    1.75, (1, 0) for p = 2 and (0, 0) for p = 3 (0-based), so the selection depends on p."""
    problem = joint_instance()
    alpha = problem.selected(joint_run(problem, p).W)
    assert tuple(alpha.tolist()) == JOINT_PRINTED_ALPHA[p], (
        f"p = {p:g}: selected {tuple(alpha.tolist())}, the notebook printed "
        f"{JOINT_PRINTED_ALPHA[p]}"
    )


# ---- §2.13.2: the ℓp SVM under rotations -------------------------------------------------------


@claim("MD-META-ROT2")
@given(inst=SMALL, seed=SEEDS)
def test_lp2_svm_rotates(inst, seed):
    """For p = 2 the ℓp-AttSVM is rotation-equivariant: replacing every token by Ux and every query
    by Vz (U, V orthogonal) maps W^mm(ℓ2) to U W^mm(ℓ2) Vᵀ with the same optimal value (solved
    on the ℓp power-cone path with p = 2)."""
    record(inst)
    gen = seeded(seed)
    U, V = random_orthogonal(gen, inst.d), random_orthogonal(gen, inst.d)
    a = lp_svm(inst, inst.alpha, 2.0)
    b = lp_svm(rotated(inst, U, V), inst.alpha, 2.0, "ℓp-AttSVM of the rotated data")
    gap = abs(b.value - a.value) / max(1.0, a.value)
    err = _rel(b.W, U @ a.W @ V.T)
    evidence.slack("|value(rotated) − value| / max(1, value)", gap, ROT_VALUE_TOL)
    evidence.slack("‖W^mm(UX, VZ) − U W^mm Vᵀ‖ / max(1, ‖W^mm‖)", err, ROT_DIR_TOL)
    assert gap <= ROT_VALUE_TOL, f"ℓ2 values {a.value!r} vs {b.value!r} after rotation"
    assert err <= ROT_DIR_TOL, f"‖W^mm(UX, VZ) − U W^mm Vᵀ‖ (relative) = {err:.2e}"
