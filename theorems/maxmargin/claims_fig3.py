"""Figure 3 of arXiv 2306.13596 (joint training of v and p) and a regularization-path picture.

Figure 3 (spec §4, caption [V]): (a), (b) joint convergence of the attention weights p and the
classifier head v to their max-margin directions, on a tight and a non-tight instance; (c) the
averaged softmax probability of the optimal tokens and the logistic probability of the output
along the run of (a). The data and protocol are the official notebook's (``figure3_instance``:
n = 3, T = 2, W = I, init v = (−1, 0), p = (0, −1), SGD lr 0.1 on each separately normalized
gradient, 1000 iterations); the pictures show the first 200 iterations with an arrow every 10
steps, as the notebook draws them, and the SVM directions dashed (p^relax red, p^full grey).

The regularization-path picture illustrates Theorem RP (§2.4) and control F6 on the keys of
Figure 1(b): p_R/R on the unit circle for growing R goes to the global ATT-SVM direction (red),
never to the local one (blue), which only the cap-restricted path reaches.
"""

from __future__ import annotations

import numpy as np
import torch

from models.attention import one_minus_cos
from models.joint import JointProblem, joint_ngd, relaxed_svm_for
from models.regpath import local_reg_path_point, reg_path_point
from models.selection import global_opt
from models.svm import att_svm
from strategies import figure1_instance, figure3_instance
from theorems import claim, evidence
from theorems.maxmargin import plots
from theorems.maxmargin.common import key_problem, rp_tol, safe_cap

DTYPE = torch.float64

# ---- protocol and tolerances (spec §4 Figure 3, §2.7 check, §6) ----------------------------------
LR = 0.1
STEPS = 1000
PLOT_STEPS = 200
MARK_EVERY = 10
#: The spec's §2.7 thresholds at 1000 steps, cos(v, v^mm) ≥ 0.9999 and cos(p, p^relax) ≥ 0.999
#: ([N]: tight 1.0/1.0, non-tight cos(v) = 1.0 and cos(p^relax) = 0.9992 at 1000 steps).
V_TOL = 1e-4
P_TOL = 1e-3
#: Panel (c): both probabilities reach 1.0 in the spec's replication; 1 − prob ≤ 1e-6 at the
#: end of the run (the selection row of spec §6), and they never fall by more than float64
#: rounding after step 100 (the picture's plateau).
PROB_TOL = 1e-6
#: Regularization-path picture: radii on the keys of Fig. 1(b) (‖p^mm‖ = 0.995).
RP_RADII = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)


# ---- Figure 3 ------------------------------------------------------------------------------------


def _run(tight: bool):
    inst = figure3_instance(tight)
    evidence.instance(inst.to_json())
    problem = JointProblem(inst.X, inst.y, inst.W)
    svms = relaxed_svm_for(problem, inst.alpha)
    for name, sol in (("v^mm", svms.v_mm), ("p^relax", svms.p_relax), ("p^full", svms.p_full)):
        evidence.solved(sol, name)
    run = joint_ngd(problem, inst.v, inst.p0, lr=LR, steps=STEPS, alpha=inst.alpha)
    return inst, problem, svms, run


def _check_probabilities(run) -> str | None:
    """Panel (c): both probabilities end within PROB_TOL of 1 and do not fall after step 100."""
    failures = []
    for name, series in (("softmax mass", run.attention_mass), ("output prob.", run.output_prob)):
        gap = 1.0 - float(series[-1])
        evidence.slack(f"1 − {name} at step {STEPS}", gap, PROB_TOL)
        if gap > PROB_TOL:
            failures.append(f"1 − {name} = {gap:.3g} at step {STEPS}")
        drop = float(np.max(np.maximum.accumulate(series[100:]) - series[100:]))
        evidence.metric(f"largest fall of the {name} after step 100", drop)
        if drop > 1e-12:
            failures.append(f"the {name} falls by {drop:.3g} after step 100")
    return "; ".join(failures) or None


@claim("MM-FIG3-TIGHT")
def test_figure3_tight():
    """Figure 3(a) and (c): inputs [(0,0),(1,1)], [(0,0),(1,−1)], [(0,0),(0.5,1)], Y = (+1, −1,
    +1), W = I, selected token 1 (every input a support vector of the v-SVM, so p^relax = p^mm).
    Joint NGD (lr 0.1 on each normalized gradient, 1000 iterations) from v = (−1, 0), p = (0,
    −1) converges jointly: cos(v, v^mm) ≥ 0.9999 and cos(p, p^mm) ≥ 0.999 at the end; the
    averaged softmax probability of the optimal tokens and the logistic probability of the
    output end within 1e-6 of 1 and do not fall after iteration 100."""
    inst, _, svms, run = _run(tight=True)
    assert svms.tight, f"v-SVM support {svms.support.tolist()}: not tight"
    gv, gp = one_minus_cos(run.v, svms.v_mm.x), one_minus_cos(run.p, svms.p_full.x)
    evidence.slack("1 − cos(v, v^mm)", gv, V_TOL)
    evidence.slack("1 − cos(p, p^mm)", gp, P_TOL)
    plots.joint_paths(inst, svms, run, "mm_fig3a_joint_tight.png", "Figure 3(a): tight, joint NGD")
    plots.joint_probabilities(run, "mm_fig3c_probabilities.png")
    failures = [f for f in (_check_probabilities(run),) if f]
    if gv > V_TOL:
        failures.append(f"1 − cos(v, v^mm) = {gv:.3g}")
    if gp > P_TOL:
        failures.append(f"1 − cos(p, p^mm) = {gp:.3g}")
    assert not failures, "; ".join(failures)


@claim("MM-FIG3-NONTIGHT")
def test_figure3_nontight():
    """Figure 3(b): as 3(a) with the third input [(0,0),(0.5,1.5)], which is not a support vector
    of the v-SVM (p^relax ≠ p^full, cosine 0.98). Joint NGD (same protocol) ends with cos(v,
    v^mm) ≥ 0.9999, cos(p, p^relax) ≥ 0.999 and cos(p, p^relax) > cos(p, p^full); the softmax
    and logistic probabilities end within 1e-6 of 1."""
    inst, _, svms, run = _run(tight=False)
    assert not svms.tight, "the v-SVM support set is every input: not the non-tight panel"
    gv = one_minus_cos(run.v, svms.v_mm.x)
    gp = one_minus_cos(run.p, svms.p_relax.x)
    full = one_minus_cos(run.p, svms.p_full.x)
    evidence.slack("1 − cos(v, v^mm)", gv, V_TOL)
    evidence.slack("1 − cos(p, p^relax)", gp, P_TOL)
    evidence.metric("1 − cos(p, p^full)", full)
    plots.joint_paths(
        inst, svms, run, "mm_fig3b_joint_nontight.png", "Figure 3(b): non-tight, joint NGD"
    )
    failures = []
    for name, series in (("softmax mass", run.attention_mass), ("output prob.", run.output_prob)):
        gap = 1.0 - float(series[-1])
        evidence.slack(f"1 − {name} at step {STEPS}", gap, PROB_TOL)
        if gap > PROB_TOL:
            failures.append(f"1 − {name} = {gap:.3g} at step {STEPS}")
    if gv > V_TOL:
        failures.append(f"1 − cos(v, v^mm) = {gv:.3g}")
    if gp > P_TOL:
        failures.append(f"1 − cos(p, p^relax) = {gp:.3g}")
    if not gp < full:
        failures.append(f"p is not closer to p^relax ({gp:.3g}) than to p^full ({full:.3g})")
    assert not failures, "; ".join(failures)


#: The numbers spec §4 records for Figure 3(b) "at 1000 steps", and the agreement asked of them:
#: the spec prints 4 decimals; 5e-4 allows its rounding and a float32-vs-float64 difference.
FIG3B_SPEC_COS_RELAX, FIG3B_SPEC_COS_FULL = 0.9992, 0.9875
FIG3B_NUMBER_TOL = 5e-4


def _fig3b_cosines(step: int) -> tuple[float, float]:
    """cos(p_step, p^relax) and cos(p_step, p^full) on Figure 3(b)'s protocol."""
    inst, _, svms, run = _run(tight=False)
    p = run.ps[step]
    return 1 - one_minus_cos(p, svms.p_relax.x), 1 - one_minus_cos(p, svms.p_full.x)


def _agree_with_spec(cos_relax: float, cos_full: float, step: int) -> None:
    evidence.metric(f"cos(p, p^relax) at step {step}", cos_relax)
    evidence.metric(f"cos(p, p^full) at step {step}", cos_full)
    for name, got, want in (
        ("cos(p, p^relax)", cos_relax, FIG3B_SPEC_COS_RELAX),
        ("cos(p, p^full)", cos_full, FIG3B_SPEC_COS_FULL),
    ):
        evidence.slack(f"|{name} − spec| at step {step}", abs(got - want), FIG3B_NUMBER_TOL)
    assert (
        abs(cos_relax - FIG3B_SPEC_COS_RELAX) <= FIG3B_NUMBER_TOL
        and abs(cos_full - FIG3B_SPEC_COS_FULL) <= FIG3B_NUMBER_TOL
    ), (
        f"at step {step}: cos(p, p^relax) = {cos_relax:.5f} (spec {FIG3B_SPEC_COS_RELAX}), "
        f"cos(p, p^full) = {cos_full:.5f} (spec {FIG3B_SPEC_COS_FULL}), tolerance "
        f"{FIG3B_NUMBER_TOL:g}"
    )


@claim("MM-FIG3-NUMBERS")
def test_figure3_spec_numbers():
    """Figure 3(b) as the spec records it: on the non-tight instance, joint NGD (lr 0.1 on each
    normalized gradient) has cos(p, p^relax) = 0.9992 and cos(p, p^full) = 0.9875 at 1000 steps
    (each within 5e-4)."""
    _agree_with_spec(*_fig3b_cosines(STEPS), STEPS)


@claim("MM-FIG3-NUMBERS-STEP100")
def test_figure3_spec_numbers_at_step_100():
    """Figure 3(b)'s recorded pair, read at step 100: joint NGD on the non-tight instance has
    cos(p, p^relax) = 0.9992 and cos(p, p^full) = 0.9875 at step 100 (each within 5e-4)."""
    _agree_with_spec(*_fig3b_cosines(100), 100)


# ---- a picture of Theorem RP ---------------------------------------------------------------------


@claim("MM-RP-PICTURE")
def test_reg_path_picture():
    """On the keys and scores of Figure 1(b) (token (1, 0) locally optimal, not global), the global
    regularization path p_R/R, R ∈ {1, 2, 5, 10, 20, 50, 100}, approaches the global ATT-SVM
    direction: 1 − cos(p_R, p^mm(opt)) is non-increasing from R = 5 on and ≤ 25/c² at R = 100 (c
    = R/‖p^mm‖), while it stays away from the local direction p^mm(α); the local path of α,
    argmin of L over the cone ∩ ball {‖p^mm(α)‖ ≤ ‖p‖ ≤ R, cos(p, p^mm(α)) ≥ 1 − ε} (safe cap
    ε), lies on ‖p‖ = R and approaches p^mm(α) (1 − cos ≤ 25/c² at R = 100)."""
    inst = figure1_instance("b", alpha=1)
    evidence.instance(inst.to_json())
    problem = key_problem(inst)
    glob = att_svm(problem.keys, global_opt(problem.scores))
    local = att_svm(problem.keys, inst.alpha)
    evidence.solved(glob, "ATT-SVM(opt)")
    evidence.solved(local, "ATT-SVM(α)")
    path = [reg_path_point(problem, R) for R in RP_RADII]
    eps = safe_cap(problem, inst.alpha, local)
    caps = [
        local_reg_path_point(problem, inst.alpha, R, eps, r0=float(local.norm))
        for R in RP_RADII[3:]
    ]
    for pt in path + caps:
        if not pt.certified:
            evidence.inconclusive("regularization-path point not certified")
    gaps = [one_minus_cos(pt.p, glob.x) for pt in path]
    to_local = [one_minus_cos(pt.p, local.x) for pt in path]
    cap_gaps = [one_minus_cos(pt.p, local.x) for pt in caps]
    c = RP_RADII[-1] / float(glob.norm)
    plots.reg_path(path, caps, glob, local)
    evidence.slack("1 − cos(p_R, p^mm(opt)) at R = 100", gaps[-1], rp_tol(c))
    evidence.metric("min over R of 1 − cos(p_R, p^mm(α))", min(to_local))
    evidence.metric("1 − cos(cap path, p^mm(α)) at R = 100", cap_gaps[-1])
    start = RP_RADII.index(5.0)
    failures = []
    if any(b > a + 1e-12 for a, b in zip(gaps[start:], gaps[start + 1 :], strict=False)):
        failures.append(f"1 − cos to the global direction is not non-increasing: {gaps}")
    if gaps[-1] > rp_tol(c):
        failures.append(f"1 − cos(p_100, p^mm(opt)) = {gaps[-1]:.3g} > {rp_tol(c):.3g}")
    if min(to_local) < 0.5:
        failures.append(f"the global path comes near the local direction: {to_local}")
    if not all(pt.on_boundary for pt in caps):
        failures.append(f"the local path leaves the sphere: ‖p_R‖ = {[pt.norm for pt in caps]}")
    if cap_gaps[-1] > rp_tol(RP_RADII[-1] / float(local.norm)):
        failures.append(f"the cap path misses p^mm(α): {cap_gaps}")
    assert not failures, "; ".join(failures)
