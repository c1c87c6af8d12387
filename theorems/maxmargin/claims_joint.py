"""Joint training of the head v and the prompt p with logistic loss (spec maxmargin §2.7; F12).

Theorem J (recalled, [R?] hypotheses) says that along the joint regularization path
(v_r, p_R) ∈ argmin_{‖v‖≤r, ‖p‖≤R} L(v, p), v_r/r → v^mm/‖v^mm‖ (the v-SVM on the selected
tokens) and p_R/R → p^relax/‖p^relax‖, the ATT-SVM whose constraints are relaxed to ≥ 0 for the
inputs that are not support vectors of the v-SVM; in the "tight" case (every input a support
vector) p^relax = p^full = p^mm. How r and R go to infinity together is [?] in the spec; the
paper's Figure 3 trains both by normalized GD with equal step sizes, i.e. ‖v‖ ≈ ‖p‖.

Instances. Besides the two paper instances (pinned), ``joint_instances``
(strategies/maxmargin_dynamics.py) draws the paper's geometry at random: inputs [(0, 0), x_i]
in R² with W = I, the selected token α_i = 1, and a v-SVM whose support set is prescribed (see
its docstring), so tight and non-tight instances are built directly and certified afterwards by
the oracle (``relaxed_svm_for``).

The relaxation slack [D]. For this family the logistic loss at ‖v‖ = r, ‖p‖ = R is, to leading
order, Σ_i exp(−r·a_i − R·x_iᵀp̂)·r·a_i plus p-independent terms, with a_i = y_i x_iᵀv̂ the
v-margin of input i. Minimising it over p̂ maximises min_i [x_iᵀp̂ + (r/R)·a_i]: for r = R the
non-support inputs enter with the bonus a_i − m̂ (m̂ the support margin) instead of being
dropped. p^relax is the limit exactly when that bonus keeps them off the active set, i.e. when
the *relaxation slack* min_{i∉S} [x_iᵀp̂^relax + (a_i − m̂)] − 1/‖p^relax‖ is ≥ 0. Figure 3(b)
sits exactly at slack 0; random non-tight instances often have negative slack, and then the
r = R path tends to a direction between p^relax and p^full.

Radii. R = c/μ with μ = 1/‖p^relax‖ (so c is the p-margin of the support inputs at R·p̂^relax),
r = R. ``joint_reg_path_point`` minimises log L, in which the p-direction enters through
terms ~e^{−c} relative to 1: beyond c ≈ 30 the p-direction is below float64 resolution, so the
path is checked at c = 25.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import example, given
from hypothesis import strategies as st

from models.flows.joint import JointProblem, joint_ngd, joint_reg_path_point, relaxed_svm_for
from models.problems.attention import one_minus_cos
from strategies import figure3_instance
from strategies.instances import PromptInstance
from strategies.maxmargin_dynamics import joint_instances
from theorems import claim, evidence

# ---- tolerances (spec §2.7, §6, §7 and calibration) ----------------------------------------------
#: Joint regularization path: one point, R = c·‖p^relax‖ with c = J_C, and r = R (r = R/4 for
#: F12). The path is not monotone in R (1 − cos grew from c = 10 to c = 25 in ~5% of the
#: calibration draws, by up to 1e-5), and Theorem J states a limit only, so one far point is
#: checked.
J_C = 25.0
#: 1 − cos(v_r, v^mm) and 1 − cos(p_R, p^relax) ≤ J_K/c² at c = J_C. Calibration before
#: writing the claims (this file's strategy, float64): worst c²(1 − cos) = 1.94 for p (0.49 for
#: v) over 140 tight draws and 2.55 (0.29) over 140 draws with slack ≥ 0.05; Fig. 3(b), slack
#: exactly 0, gives 0.19 (spec §7: cos(p^relax) = 0.99968 at r = R = 20). J_K = 8 (tolerance
#: 0.0128) leaves 3× room and stays below the distance between p^relax and p^full on Fig. 3(b)
#: (1 − cos = 0.019). The spec's cos(v, v^mm) ≥ 0.9999 was set on Fig. 3 alone: random draws
#: reach 7.9e-4 for v at c = 25.
J_K = 8.0
#: Joint NGD, the Fig. 3 protocol (lr 0.1 on each normalized gradient, 1000 steps, from unit
#: (v0, p0)). The spec's §2.7 thresholds (1 − cos ≤ 1e-4 for v, 1e-3 for p) come from Fig. 3
#: alone; on this file's strategy (60 draws, slack ≥ 0.05 or tight, scoring init) the worst
#: after 1000 steps was 7.4e-5 for v and 4.2e-4 for p. Tolerances 5e-4 and 3e-3 leave ≥ 6× room.
NGD_V_TOL = 5e-4
NGD_P_TOL = 3e-3
NGD_STEPS = 1000
NGD_LR = 0.1
#: Relaxation slack drawn for the variant claims (strictly inside the [D] condition).
SLACK_MIN = 0.05
#: F12 (rates): R ≫ r, as in the spec's R = 40, r = 10.
RATE_RATIO = 4.0
#: p^relax and p^full count as distinct directions (so that "closer to p^relax than to p^full"
#: is asked) when 1 − cos between them exceeds this multiple of the path's tolerance.
DISTINCT = 2.0


def j_tol(c: float) -> float:
    return J_K / c**2


# ---- helpers -------------------------------------------------------------------------------------


def joint_setup(inst: PromptInstance):
    """The joint problem and its certified SVMs (the instance's prompt schema: X, y, v = the
    initial head, W, p0)."""
    problem = JointProblem(inst.X, inst.y, inst.W)
    svms = relaxed_svm_for(problem, inst.alpha)
    for name, sol in (("p^relax", svms.p_relax), ("p^full", svms.p_full)):
        if sol.status == "infeasible":
            evidence.reject(f"ATT-SVM ({name}) infeasible")
        if not sol.ok:
            evidence.inconclusive(f"ATT-SVM ({name}) {sol.status}")
    evidence.metric("1 − cos(p^relax, p^full)", one_minus_cos(svms.p_relax.x, svms.p_full.x))
    return problem, svms


def relaxation_slack(problem: JointProblem, svms) -> float:
    """min over non-support inputs of x_iᵀp̂^relax + (a_i − m̂) − 1/‖p^relax‖ (module
    docstring [D]), recorded as a metric; +inf when every input is a support vector. With more
    than one non-selected token the p-margin of input i is the smallest over them."""
    X, y = problem.X.numpy(), problem.y.numpy()
    keys = problem.keys.numpy()
    rows = np.arange(problem.n)
    alpha = svms.alpha
    v_hat = svms.v_mm.direction
    a = y * (X[rows, alpha] @ v_hat)
    m_hat = float(a[svms.support].min())
    diffs = keys[rows, alpha][:, None, :] - keys
    others = np.arange(keys.shape[1])[None, :] != alpha[:, None]
    p_margin = np.where(others, diffs @ svms.p_relax.direction, np.inf).min(axis=1)
    free = ~svms.support
    slack = math.inf
    if free.any():
        slack = float((p_margin[free] + a[free] - m_hat).min() - svms.p_relax.margin)
    evidence.metric("relaxation slack", slack)
    return slack


def path_point(problem, svms, c: float = J_C, ratio: float = 1.0):
    """(v_r, p_R) at R = c·‖p^relax‖, r = R/ratio; inconclusive unless certified and radially
    consistent with a boundary minimiser."""
    R = c * float(svms.p_relax.norm)
    pt = joint_reg_path_point(problem, R / ratio, R)
    if not (pt.certified and pt.radial_descent):
        evidence.inconclusive("joint path point not certified")
    return pt


def gaps_at(v, p, svms) -> tuple[float, float, float]:
    """1 − cos of (v, p) to v^mm, p^relax and p^full."""
    return (
        one_minus_cos(v, svms.v_mm.x),
        one_minus_cos(p, svms.p_relax.x),
        one_minus_cos(p, svms.p_full.x),
    )


def path_gaps(problem, svms) -> tuple[float, float, float]:
    """Theorem J's quantities at r = R = J_C·‖p^relax‖: 1 − cos(v_r, v^mm), 1 − cos(p_R,
    p^relax) (recorded as slack against j_tol(J_C)) and 1 − cos(p_R, p^full)."""
    pt = path_point(problem, svms)
    gv, gp, full = gaps_at(pt.v, pt.p, svms)
    evidence.slack("1 − cos(v_r, v^mm)", gv, j_tol(J_C))
    evidence.slack("1 − cos(p_R, p^relax)", gp, j_tol(J_C))
    evidence.metric("1 − cos(p_R, p^full)", full)
    return gv, gp, full


def distinct(svms) -> bool:
    """p^relax and p^full are apart by more than DISTINCT path tolerances."""
    return one_minus_cos(svms.p_relax.x, svms.p_full.x) > DISTINCT * j_tol(J_C)


def ngd_gaps(problem, svms, inst: PromptInstance) -> tuple[float, float]:
    """After NGD_STEPS joint NGD steps from the instance's (v0, p0): 1 − cos(v, v^mm) and 1 −
    cos(p, p^relax), recorded as slack. The softmax mass on α and the output probability are
    recorded, not asserted: a non-support input's relaxed p-margin may be small, so its
    attention saturates slowly (the paper instances' panel (c) is checked in claims_fig3)."""
    run = joint_ngd(problem, inst.v, inst.p0, lr=NGD_LR, steps=NGD_STEPS, record_every=NGD_STEPS)
    gv, gp, _ = gaps_at(run.v, run.p, svms)
    evidence.slack("1 − cos(v, v^mm)", gv, NGD_V_TOL)
    evidence.slack("1 − cos(p, p^relax)", gp, NGD_P_TOL)
    evidence.metric("1 − softmax mass on α", 1.0 - run.attention_mass[-1])
    evidence.metric("1 − logistic probability", 1.0 - run.output_prob[-1])
    return gv, gp


FIG3B = figure3_instance(tight=False)
FIG3A = figure3_instance(tight=True)


# ---- Theorem J on the regularization path ------------------------------------------------------


@claim("MM-J-RP")
@given(inst=joint_instances())
def test_joint_reg_path(inst):
    """Theorem J as read: for joint training of (v, p) with logistic loss, along the joint
    regularization path with r = R, v_r/r → v^mm/‖v^mm‖ and p_R/R → p^relax/‖p^relax‖; in the
    non-tight case p_R ends closer to p^relax than to p^full."""
    problem, svms = joint_setup(inst)
    relaxation_slack(problem, svms)
    gv, gp, full = path_gaps(problem, svms)
    tol = j_tol(J_C)
    assert gv <= tol, f"1 − cos(v_r, v^mm) = {gv:.3g} > {tol:.3g}"
    assert gp <= tol, f"1 − cos(p_R, p^relax) = {gp:.3g} > {tol:.3g} (p^full: {full:.3g})"
    assert gp < full or not distinct(svms), (
        f"p_R is not closer to p^relax ({gp:.3g}) than to p^full ({full:.3g})"
    )


@claim("MM-J-RP-TIGHT")
@example(inst=FIG3A)
@given(inst=joint_instances(tight=True))
def test_joint_reg_path_tight(inst):
    """Theorem J, tight case (every input a v-SVM support vector, so p^relax = p^full): along the
    joint path with r = R, v_r/r → v^mm/‖v^mm‖ and p_R/R → p^mm/‖p^mm‖."""
    problem, svms = joint_setup(inst)
    if not svms.tight:
        evidence.reject("an input is not a v-SVM support vector")
    gap = one_minus_cos(svms.p_relax.x, svms.p_full.x)
    assert gap <= 1e-12, f"tight, yet p^relax ≠ p^full (1 − cos = {gap:.3g})"
    gv, gp, full = path_gaps(problem, svms)
    tol = j_tol(J_C)
    assert gv <= tol, f"1 − cos(v_r, v^mm) = {gv:.3g} > {tol:.3g}"
    assert gp <= tol, f"1 − cos(p_R, p^mm) = {gp:.3g} > {tol:.3g}"


@claim("MM-J-RP-SLACK")
@example(inst=FIG3B)
@given(inst=joint_instances(tight=False, slack=SLACK_MIN))
def test_joint_reg_path_slack(inst):
    """Theorem J with relaxation slack ≥ 0 (some input off the v-SVM's support): along the joint
    path with r = R, v_r/r → v^mm/‖v^mm‖, p_R/R → p^relax/‖p^relax‖, and p_R ends closer to p^relax
    than to p^full whenever they differ."""
    problem, svms = joint_setup(inst)
    slack = relaxation_slack(problem, svms)
    if svms.tight or slack < -1e-9:
        evidence.reject("not a non-tight instance with relaxation slack ≥ 0")
    gv, gp, full = path_gaps(problem, svms)
    tol = j_tol(J_C)
    assert gv <= tol, f"1 − cos(v_r, v^mm) = {gv:.3g} > {tol:.3g}"
    assert gp <= tol, f"1 − cos(p_R, p^relax) = {gp:.3g} > {tol:.3g} (p^full: {full:.3g})"
    assert gp < full or not distinct(svms), (
        f"p_R is not closer to p^relax ({gp:.3g}) than to p^full ({full:.3g})"
    )


# ---- Theorem J with joint NGD (the Fig. 3 protocol) ----------------------------------------------


@claim("MM-J-NGD")
@given(inst=joint_instances())
def test_joint_ngd(inst):
    """Theorem J for joint normalized GD as read: under MM-J-RP's hypotheses, joint NGD (the
    Fig. 3 protocol) from any unit-norm (v0, p0) converges in direction to (v^mm, p^relax)."""
    problem, svms = joint_setup(inst)
    relaxation_slack(problem, svms)
    gv, gp = ngd_gaps(problem, svms, inst)
    assert gv <= NGD_V_TOL, f"1 − cos(v, v^mm) = {gv:.3g} > {NGD_V_TOL:g}"
    assert gp <= NGD_P_TOL, f"1 − cos(p, p^relax) = {gp:.3g} > {NGD_P_TOL:g}"


@claim("MM-J-NGD-SLACK")
@given(
    inst=st.one_of(
        joint_instances(tight=True, score_init=True),
        joint_instances(tight=False, slack=SLACK_MIN, score_init=True),
    )
)
def test_joint_ngd_slack(inst):
    """Theorem J for joint normalized GD with relaxation slack ≥ 0 and an initial head that scores
    every selected token above the zero token (y_i v0ᵀx_i > 0): joint NGD from p0 of unit norm
    converges in direction to (v^mm, p^relax)."""
    problem, svms = joint_setup(inst)
    if relaxation_slack(problem, svms) < -1e-9:
        evidence.reject("relaxation slack < 0")
    gv, gp = ngd_gaps(problem, svms, inst)
    assert gv <= NGD_V_TOL, f"1 − cos(v, v^mm) = {gv:.3g} > {NGD_V_TOL:g}"
    assert gp <= NGD_P_TOL, f"1 − cos(p, p^relax) = {gp:.3g} > {NGD_P_TOL:g}"


# ---- F12 controls ------------------------------------------------------------------------------


@claim("MM-F12-FULL")
@given(inst=joint_instances(tight=False, slack=SLACK_MIN))
def test_f12_full_svm_regardless(inst):
    """(Wrong) In joint training the attention converges to the full ATT-SVM regardless of the
    support geometry of v: along the joint path with r = R, p_R/R → p^full/‖p^full‖."""
    problem, svms = joint_setup(inst)
    pt = path_point(problem, svms)
    gap = one_minus_cos(pt.p, svms.p_full.x)
    evidence.metric("1 − cos(p_R, p^relax)", one_minus_cos(pt.p, svms.p_relax.x))
    evidence.slack("1 − cos(p_R, p^full)", gap, j_tol(J_C))
    assert gap <= j_tol(J_C), f"1 − cos(p_R, p^full) = {gap:.3g} > {j_tol(J_C):.3g}"


@claim("MM-F12-RATE")
@given(inst=joint_instances(tight=False, slack=SLACK_MIN))
def test_f12_relaxed_svm_any_rate(inst):
    """(Wrong) In joint training the attention converges to p^relax regardless of how r and R
    grow: with R = 4r, p_R/R → p^relax/‖p^relax‖."""
    problem, svms = joint_setup(inst)
    pt = path_point(problem, svms, ratio=RATE_RATIO)
    gv, gap, full = gaps_at(pt.v, pt.p, svms)
    evidence.metric("1 − cos(p_R, p^full)", full)
    evidence.metric("1 − cos(v_r, v^mm)", gv)
    evidence.slack("1 − cos(p_R, p^relax), R = 4r", gap, j_tol(J_C))
    assert gap <= j_tol(J_C), f"1 − cos(p_R, p^relax) = {gap:.3g} > {j_tol(J_C):.3g} (R = 4r)"
