"""Figure 3 of arXiv 2306.13596 (joint training of v and p) and a regularization-path picture.

Figure 3 (spec §4, caption [V]): (a), (b) joint convergence of the attention weights p and the
classifier head v to their max-margin directions, on a tight and a non-tight instance; (c) the
averaged softmax probability of the optimal tokens and the logistic probability of the output
along the run of (a). The data and protocol are the official notebook's (``figure3_instance``:
n = 3, T = 2, W = I, init v = (−1, 0), p = (0, −1), SGD lr 0.1 on each separately normalized
gradient, 1000 iterations: ``common.figure3_run``); plots.py draws the first 200 iterations
with an arrow every 10 steps, as the notebook does, and the SVM directions dashed (p^relax
red, p^full grey).

The regularization-path picture illustrates Theorem RP (§2.4) and control F6 on the keys of
Figure 1(b): p_R/R on the unit circle for growing R goes to the global ATT-SVM direction (red),
never to the local one (blue), which only the cap-restricted path reaches.
"""

from __future__ import annotations

import numpy as np

from models.problems.attention import one_minus_cos
from strategies import figure1_instance, figure3_instance
from theorems import claim, evidence
from theorems.maxmargin.common import FIG3_STEPS as STEPS
from theorems.maxmargin.common import RP_K_DERIVATION, RP_RADII, figure3_run, reg_paths, rp_tol

# ---- tolerances (spec §4 Figure 3, §2.7 check, §6) -----------------------------------------------
#: The spec's §2.7 thresholds at 1000 steps, cos(v, v^mm) ≥ 0.9999 and cos(p, p^relax) ≥ 0.999
#: ([N]: tight 1.0/1.0, non-tight cos(v) = 1.0 and cos(p^relax) = 0.9992 at 1000 steps).
V_TOL = evidence.tolerance(
    1e-4,
    "the spec's §2.7 threshold cos(v, v^mm) ≥ 0.9999, not a rounding bound. On both panels "
    "v^mm = e₂. On the non-tight panel v₁ stays at rounding level (6e-15 after 1000 steps, "
    "‖v‖ ≈ 100): the v-gradients' e₁-components cancel over the inputs, so 1 − cos = "
    "v₁²/(2‖v‖²) ~ 1e-32 is that cancellation, not a convergence rate; on the tight panel "
    "v₁ = 0.22 gives 2.5e-6. Along NGD (‖v‖ grows by ≤ 0.1 a step) a finite offset v₁ gives "
    "1 − cos ≈ v₁²/(2‖v‖²): 1e-4 at ‖v‖ ≈ 100 admits |v₁| ≤ 1.4. A v that converged to "
    "another direction sits at an O(1) angle.",
)
P_TOL = evidence.tolerance(
    1e-3,
    "the spec's §2.7 threshold cos(p, p^relax) ≥ 0.999, not a rounding bound; what it must "
    "tell apart is the other candidate limit: on the non-tight panel 1 − cos(p^full, p^relax) "
    "= 0.0194 (angle 0.197 rad), so a run within 1e-3 of p^relax (angle ≤ 0.045) is ≥ 0.152 "
    "rad (1 − cos ≥ 0.0115) from p^full, and one converging to p^full fails it by 19×. Along a "
    "converging run p = ‖p‖p̂ + ρ + o(1), 1 − cos ≈ |ρ⊥|²/(2‖p‖²): at step 1000 (‖p‖ ≈ 98) "
    "1e-3 admits a finite part |ρ⊥| ≤ 4.4 (observed 0.30 and 0.33).",
)
#: Panel (c): both probabilities reach 1.0 in the spec's replication; 1 − prob ≤ 1e-6 at the
#: end of the run (the selection row of spec §6), and they never fall by more than float64
#: rounding (1e-12) after step 100 (the picture's plateau).
PROB_TOL = evidence.tolerance(
    1e-6,
    "the selection threshold of spec §6 (the engine's SELECT_TOL: "
    "models.flows.limits.DERIVATIONS). 1 − mass is read as 1.0 − mass, exactly 0 in float64 once "
    "the mass off the optimal tokens is below u = 2⁻⁵³: at step 1000 ‖p‖ ≈ 98 ≈ 70‖p^mm‖, the off "
    "mass is ~e^{−70} and the logistic tail (‖v‖ ≈ 100) ~e^{−100}, so 0 is exact, not a "
    "coincidence. The threshold can fail: a run stopped at step 200 leaves 1 − mass = 2.5e-5 "
    "(non-tight panel), and a run that shared mass between tokens keeps it Θ(1).",
)
PLATEAU_FROM, PLATEAU_DROP = 100, 1e-12


# ---- Figure 3 ------------------------------------------------------------------------------------


def probability_misses(run, plateau: bool) -> list[str]:
    """Panel (c)'s two probabilities (softmax mass on the optimal tokens, logistic probability
    of the output): those that end more than PROB_TOL below 1 and, with ``plateau``, those that
    fall after step 100. The end gaps are recorded as slack, the falls as metrics."""
    misses = []
    for name, series in (("softmax mass", run.attention_mass), ("output prob.", run.output_prob)):
        gap = 1.0 - float(series[-1])
        evidence.slack(f"1 − {name} at step {STEPS}", gap, PROB_TOL)
        if gap > PROB_TOL:
            misses.append(f"1 − {name} = {gap:.3g} at step {STEPS}")
        if plateau:
            tail = series[PLATEAU_FROM:]
            drop = float(np.max(np.maximum.accumulate(tail) - tail))
            evidence.metric(f"largest fall of the {name} after step 100", drop)
            if drop > PLATEAU_DROP:
                misses.append(f"the {name} falls by {drop:.3g} after step 100")
    return misses


@claim("MM-FIG3-TIGHT")
def test_figure3_tight():
    """Figure 3(a) and (c), every input a support vector of the v-SVM: joint NGD converges, v to
    v^mm and p to p^mm; the averaged softmax probability of the optimal tokens and the logistic
    probability of the output go to 1 and do not fall after the first iterations."""
    inst = figure3_instance(tight=True)
    svms, run = figure3_run(inst)
    assert svms.tight, f"v-SVM support {svms.support.tolist()}: not tight"
    gv, gp = one_minus_cos(run.v, svms.v_mm.x), one_minus_cos(run.p, svms.p_full.x)
    evidence.slack("1 − cos(v, v^mm)", gv, V_TOL)
    evidence.slack("1 − cos(p, p^mm)", gp, P_TOL)
    misses = probability_misses(run, plateau=True)
    assert gv <= V_TOL and gp <= P_TOL, f"1 − cos(v, v^mm) = {gv:.3g}, 1 − cos(p, p^mm) = {gp:.3g}"
    assert not misses, "; ".join(misses)


@claim("MM-FIG3-NONTIGHT")
def test_figure3_nontight():
    """Figure 3(b), a third input off the v-SVM's support: joint NGD converges with v to v^mm and p
    to p^relax, closer to p^relax than to p^full; the softmax and logistic probabilities go to 1."""
    inst = figure3_instance(tight=False)
    svms, run = figure3_run(inst)
    assert not svms.tight, "the v-SVM support set is every input: not the non-tight panel"
    gv, gp = one_minus_cos(run.v, svms.v_mm.x), one_minus_cos(run.p, svms.p_relax.x)
    full = one_minus_cos(run.p, svms.p_full.x)
    evidence.slack("1 − cos(v, v^mm)", gv, V_TOL)
    evidence.slack("1 − cos(p, p^relax)", gp, P_TOL)
    evidence.metric("1 − cos(p, p^full)", full)
    misses = probability_misses(run, plateau=False)
    assert gv <= V_TOL and gp <= P_TOL, (
        f"1 − cos(v, v^mm) = {gv:.3g}, 1 − cos(p, p^relax) = {gp:.3g}"
    )
    assert gp < full, f"p is not closer to p^relax ({gp:.3g}) than to p^full ({full:.3g})"
    assert not misses, "; ".join(misses)


#: The numbers spec §4 records for Figure 3(b) "at 1000 steps", and the agreement asked of them:
#: the spec prints 4 decimals; 5e-4 allows its rounding and a float32-vs-float64 difference.
FIG3B_SPEC_COS_RELAX, FIG3B_SPEC_COS_FULL = 0.9992, 0.9875
FIG3B_NUMBER_TOL = 5e-4


def fig3b_cosines(inst, step: int) -> tuple[float, float]:
    """cos(p_step, p^relax) and cos(p_step, p^full) on Figure 3(b)'s run, recorded as metrics,
    and their distances to the spec's pair as slack."""
    svms, run = figure3_run(inst)
    p = run.ps[step]
    cos_relax = 1 - one_minus_cos(p, svms.p_relax.x)
    cos_full = 1 - one_minus_cos(p, svms.p_full.x)
    for name, got, want in (
        ("cos(p, p^relax)", cos_relax, FIG3B_SPEC_COS_RELAX),
        ("cos(p, p^full)", cos_full, FIG3B_SPEC_COS_FULL),
    ):
        evidence.metric(f"{name} at step {step}", got)
        evidence.slack(f"|{name} − spec| at step {step}", abs(got - want), FIG3B_NUMBER_TOL)
    return cos_relax, cos_full


def agree_with_spec(cos_relax: float, cos_full: float) -> bool:
    return (
        abs(cos_relax - FIG3B_SPEC_COS_RELAX) <= FIG3B_NUMBER_TOL
        and abs(cos_full - FIG3B_SPEC_COS_FULL) <= FIG3B_NUMBER_TOL
    )


def spec_message(cos_relax: float, cos_full: float, step: int) -> str:
    return (
        f"at step {step}: cos(p, p^relax) = {cos_relax:.5f} (spec {FIG3B_SPEC_COS_RELAX}), "
        f"cos(p, p^full) = {cos_full:.5f} (spec {FIG3B_SPEC_COS_FULL}), tolerance "
        f"{FIG3B_NUMBER_TOL:g}"
    )


@claim("MM-FIG3-NUMBERS")
def test_figure3_spec_numbers():
    """Figure 3(b) as the spec records it: on the non-tight instance, joint NGD has cos(p,
    p^relax) = 0.9992 and cos(p, p^full) = 0.9875 at 1000 steps."""
    inst = figure3_instance(tight=False)
    cos_relax, cos_full = fig3b_cosines(inst, STEPS)
    assert agree_with_spec(cos_relax, cos_full), spec_message(cos_relax, cos_full, STEPS)


@claim("MM-FIG3-NUMBERS-STEP100")
def test_figure3_spec_numbers_at_step_100():
    """Figure 3(b)'s recorded pair, read at step 100: joint NGD on the non-tight instance has
    cos(p, p^relax) = 0.9992 and cos(p, p^full) = 0.9875 at step 100."""
    inst = figure3_instance(tight=False)
    cos_relax, cos_full = fig3b_cosines(inst, 100)
    assert agree_with_spec(cos_relax, cos_full), spec_message(cos_relax, cos_full, 100)


# ---- a picture of Theorem RP ---------------------------------------------------------------------

#: MM-RP-PICTURE: the global path is taken as non-increasing in 1 − cos to p^mm(opt) from R = 5
#: on (up to 1e-12), and as staying away from the local direction while 1 − cos to it is ≥ 0.5.
RP_MONOTONE_FROM, RP_MONOTONE_SLACK, RP_AWAY = 5.0, 1e-12, 0.5


def path_cosines(rp) -> tuple[list[float], list[float], list[float]]:
    """1 − cos of the global path to p^mm(opt) and to p^mm(α), and of the cap path to p^mm(α),
    for each R; the values at R = 100 recorded against rp_tol."""
    gaps = [one_minus_cos(pt.p, rp.glob.x) for pt in rp.path]
    to_local = [one_minus_cos(pt.p, rp.local.x) for pt in rp.path]
    cap_gaps = [one_minus_cos(pt.p, rp.local.x) for pt in rp.caps]
    evidence.slack(
        "1 − cos(p_R, p^mm(opt)) at R = 100",
        gaps[-1],
        path_tol(rp.glob),
        derivation=RP_K_DERIVATION,
    )
    evidence.metric("min over R of 1 − cos(p_R, p^mm(α))", min(to_local))
    evidence.metric("1 − cos(cap path, p^mm(α)) at R = 100", cap_gaps[-1])
    return gaps, to_local, cap_gaps


def path_tol(svm) -> float:
    """rp_tol at the largest radius, c = R/‖p^mm‖ for the given SVM solution."""
    return rp_tol(RP_RADII[-1] / float(svm.norm))


@claim("MM-RP-PICTURE")
def test_reg_path_picture():
    """On Figure 1(b) (token (1, 0) locally optimal, not global), the global regularization path
    p_R/R approaches the global ATT-SVM direction and stays away from p^mm(α); the local path of α
    lies on ‖p‖ = R and approaches p^mm(α)."""
    inst = figure1_instance("b", alpha=1)
    rp = reg_paths(inst)
    gaps, to_local, cap_gaps = path_cosines(rp)
    tail = gaps[RP_RADII.index(RP_MONOTONE_FROM) :]
    assert all(b <= a + RP_MONOTONE_SLACK for a, b in zip(tail, tail[1:], strict=False)), (
        f"1 − cos to the global direction is not non-increasing: {gaps}"
    )
    tol = path_tol(rp.glob)
    assert gaps[-1] <= tol, f"1 − cos(p_100, p^mm(opt)) = {gaps[-1]:.3g} > {tol:.3g}"
    assert min(to_local) >= RP_AWAY, f"the global path comes near the local direction: {to_local}"
    norms = [pt.norm for pt in rp.caps]
    assert all(pt.on_boundary for pt in rp.caps), f"the local path leaves the sphere: {norms}"
    assert cap_gaps[-1] <= path_tol(rp.local), f"the cap path misses p^mm(α): {cap_gaps}"
