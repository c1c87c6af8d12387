"""Joint training of the head v and the prompt p with logistic loss (spec maxmargin §2.7; F12).

Theorem J (recalled, [R?] hypotheses) says that along the joint regularization path
(v_r, p_R) ∈ argmin_{‖v‖≤r, ‖p‖≤R} L(v, p), v_r/r → v^mm/‖v^mm‖ (the v-SVM on the selected
tokens) and p_R/R → p^relax/‖p^relax‖, the ATT-SVM whose constraints are relaxed to ≥ 0 for the
inputs that are not support vectors of the v-SVM; in the "tight" case (every input a support
vector) p^relax = p^full = p^mm. How r and R go to infinity together is [?] in the spec; the
paper's Figure 3 trains both by normalized GD with equal step sizes, i.e. ‖v‖ ≈ ‖p‖.

Instances. Besides the two paper instances (pinned), ``joint_instances`` draws the paper's
geometry at random: inputs [(0, 0), x_i] in R² with W = I, the selected token α_i = 1, and a
v-SVM whose support set is prescribed (see its docstring), so tight and non-tight instances are
built directly and certified afterwards by the oracle (``relaxed_svm_for``).

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
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models.attention import one_minus_cos
from models.joint import JointProblem, joint_ngd, joint_reg_path_point, relaxed_svm_for
from models.svm import att_svm
from strategies import figure3_instance
from strategies.instances import NONTIGHT_V_SVM, SVM_FEASIBLE, TIGHT_V_SVM, PromptInstance
from theorems import claim, evidence

DTYPE = torch.float64

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
#: Joint NGD, the Fig. 3 protocol (lr 0.1 on each normalized gradient, 1000 steps). The spec's
#: §2.7 thresholds (1 − cos ≤ 1e-4 for v, 1e-3 for p) come from Fig. 3 alone; on this file's
#: strategy (60 draws, slack ≥ 0.05 or tight, scoring init) the worst after 1000 steps was
#: 7.4e-5 for v and 4.2e-4 for p. Tolerances 5e-4 and 3e-3 leave ≥ 6× room.
NGD_V_TOL = 5e-4
NGD_P_TOL = 3e-3
NGD_STEPS = 1000
NGD_LR = 0.1
#: Relaxation slack drawn for the variant claims (strictly inside the [D] condition).
SLACK_MIN = 0.05
#: F12 (rates): R ≫ r, as in the spec's R = 40, r = 10.
RATE_RATIO = 4.0


def j_tol(c: float) -> float:
    return J_K / c**2


# ---- instances -----------------------------------------------------------------------------------


def _rotation(theta: float) -> torch.Tensor:
    c, s = math.cos(theta), math.sin(theta)
    return torch.tensor([[c, -s], [s, c]], dtype=DTYPE)


@st.composite
def joint_instances(draw, tight=st.booleans(), slack: float | None = None, score_init=False):
    """Inputs [(0, 0), x_i] in R² (W = I, α_i = 1) with a prescribed v-SVM support set S.

    In a frame (e1, e2), rotated at random at the end: margin m ∈ [0.5, 1.5], y_i x_i =
    (y_i ρ_i, m) for i ∈ S and (y_i ρ_i, c_i) with c_i ∈ m·[1.05, 2.5] otherwise, ρ_i ∈ [0.2, 2].
    S holds both labels (so Σ_S λ_i y_i ρ_i = 0 has a positive solution: v^mm = e2/m, support
    exactly S), and every x_i = (ρ_i, y_i c_i) has a positive e1 component, so every ATT-SVM is
    feasible. Tight: S = all inputs (n ∈ [2, 4]); non-tight: 2 ≤ |S| < n (n ∈ [3, 5]).

    ``slack`` (non-tight only): raise the non-support ρ_i until the relaxation slack (module
    docstring) is ≥ slack and their relaxed constraints are inactive: with p_S the ATT-SVM of
    the support inputs alone, ρ_i·p̂_S1 ≥ max(m + μ_S + slack − c_i(1 + y_i p̂_S2), slack −
    y_i c_i p̂_S2); then p^relax = p_S. ``score_init``: the initial head v0 scores every
    selected token above the zero token (y_i v0ᵀx_i > 0); otherwise v0 is a random unit
    vector. p0 is a random unit vector (Fig. 3 starts from unit vectors too).
    """
    tight = draw(tight) if isinstance(tight, st.SearchStrategy) else tight
    n = draw(st.integers(2, 4) if tight else st.integers(3, 5))
    n_support = n if tight else draw(st.integers(2, n - 1))
    seed = draw(st.integers(0, 2**32 - 1))
    gen = torch.Generator().manual_seed(seed)

    def uniform(lo, hi, size=()):
        return lo + (hi - lo) * torch.rand(size, generator=gen, dtype=DTYPE)

    y = torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    y[0], y[1] = 1.0, -1.0  # S = the first n_support inputs: both labels present
    support = torch.arange(n) < n_support
    m = float(uniform(0.5, 1.5))
    rho = uniform(0.2, 2.0, n)
    c = torch.where(support, torch.full((n,), m, dtype=DTYPE), m * uniform(1.05, 2.5, n))
    if slack is not None and not tight:
        sup_x = torch.stack([rho[support], y[support] * c[support]], -1)
        keys = torch.stack([torch.zeros_like(sup_x), sup_x], 1)
        p_s = att_svm(keys, np.ones(n_support, dtype=np.int64))
        if not p_s.ok:  # cannot happen for this geometry; the claims re-check with the oracle
            evidence.reject(f"ATT-SVM of the support inputs {p_s.status}")
        mu, (u1, u2) = float(p_s.margin), p_s.direction
        need = torch.maximum(m + mu + slack - c * (1 + y * u2), slack - y * c * u2) / u1
        rho = torch.where(support, rho, torch.maximum(rho, need + 0.01))
    x = torch.stack([rho, y * c], -1)
    Q = _rotation(float(uniform(0.0, 2 * math.pi)))
    order = torch.randperm(n, generator=gen)
    x, y, support = (x @ Q.T)[order], y[order], support[order]
    X = torch.zeros(n, 2, 2, dtype=DTYPE)
    X[:, 1] = x
    v_hat = Q @ torch.tensor([0.0, 1.0], dtype=DTYPE)
    if score_init:  # a random direction inside the arc of heads that score every x_i > 0
        z = y[:, None] * x
        perp = torch.stack([-v_hat[1], v_hat[0]])
        psi = torch.atan2(z @ perp, z @ v_hat)
        lo, hi = float(psi.max()) - math.pi / 2, float(psi.min()) + math.pi / 2
        phi = lo + (hi - lo) * float(uniform(0.05, 0.95))
        v0 = math.cos(phi) * v_hat + math.sin(phi) * perp
    else:
        a = float(uniform(0.0, 2 * math.pi))
        v0 = torch.tensor([math.cos(a), math.sin(a)], dtype=DTYPE)
    b = float(uniform(0.0, 2 * math.pi))
    p0 = torch.tensor([math.cos(b), math.sin(b)], dtype=DTYPE)
    return PromptInstance(
        X,
        y,
        v0,
        torch.eye(2, dtype=DTYPE),
        p0=p0,
        alpha=np.ones(n, dtype=np.int64),
        assumptions={SVM_FEASIBLE, TIGHT_V_SVM if tight else NONTIGHT_V_SVM},
        seed=seed,
        meta={"support": support.tolist(), "v_margin": m, "v_mm_direction": v_hat},
    )


# ---- helpers -------------------------------------------------------------------------------------


def joint_setup(inst: PromptInstance):
    """The joint problem and its certified SVMs; records the instance (prompt schema: X, y,
    v = the initial head, W, p0)."""
    evidence.instance(inst.to_json())
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
    docstring [D]); +inf when every input is a support vector. With more than one non-selected
    token the p-margin of input i is the smallest over them."""
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
    if not free.any():
        return math.inf
    return float((p_margin[free] + a[free] - m_hat).min() - svms.p_relax.margin)


def path_point(problem, svms, c: float = J_C, ratio: float = 1.0):
    """(v_r, p_R) at R = c·‖p^relax‖, r = R/ratio; inconclusive unless certified and radially
    consistent with a boundary minimiser."""
    R = c * float(svms.p_relax.norm)
    pt = joint_reg_path_point(problem, R / ratio, R)
    if not (pt.certified and pt.radial_descent):
        evidence.inconclusive("joint path point not certified")
    return pt


def theorem_j_failure(problem, svms, *, compare: bool) -> str | None:
    """Theorem J's conclusion at r = R = J_C·‖p^relax‖, as one message (None if it holds):
    1 − cos(v_r, v^mm) and 1 − cos(p_R, p^relax) ≤ j_tol(J_C); with ``compare`` and
    p^relax ≠ p^full (1 − cos above 2·j_tol), also cos(p_R, p^relax) > cos(p_R, p^full)."""
    pt = path_point(problem, svms)
    tol = j_tol(J_C)
    gv = one_minus_cos(pt.v, svms.v_mm.x)
    gp = one_minus_cos(pt.p, svms.p_relax.x)
    full = one_minus_cos(pt.p, svms.p_full.x)
    evidence.slack("1 − cos(v_r, v^mm)", gv, tol)
    evidence.slack("1 − cos(p_R, p^relax)", gp, tol)
    evidence.metric("1 − cos(p_R, p^full)", full)
    failures = []
    if gv > tol:
        failures.append(f"1 − cos(v_r, v^mm) = {gv:.3g} > {tol:.3g}")
    if gp > tol:
        failures.append(f"1 − cos(p_R, p^relax) = {gp:.3g} > {tol:.3g} (p^full: {full:.3g})")
    if compare and one_minus_cos(svms.p_relax.x, svms.p_full.x) > 2 * tol and not gp < full:
        failures.append(f"p_R is not closer to p^relax ({gp:.3g}) than to p^full ({full:.3g})")
    return "; ".join(failures) or None


def ngd_failure(problem, svms, inst: PromptInstance) -> str | None:
    """The Fig. 3 protocol's directional conclusion after NGD_STEPS joint NGD steps, as one
    message. The softmax mass on α and the output probability are recorded, not asserted:
    a non-support input's relaxed p-margin may be small, so its attention saturates slowly
    (the paper instances' panel (c) is checked in claims_fig3)."""
    run = joint_ngd(problem, inst.v, inst.p0, lr=NGD_LR, steps=NGD_STEPS, record_every=NGD_STEPS)
    gv = one_minus_cos(run.v, svms.v_mm.x)
    gp = one_minus_cos(run.p, svms.p_relax.x)
    evidence.slack("1 − cos(v, v^mm)", gv, NGD_V_TOL)
    evidence.slack("1 − cos(p, p^relax)", gp, NGD_P_TOL)
    evidence.metric("1 − softmax mass on α", 1.0 - run.attention_mass[-1])
    evidence.metric("1 − logistic probability", 1.0 - run.output_prob[-1])
    failures = []
    if gv > NGD_V_TOL:
        failures.append(f"1 − cos(v, v^mm) = {gv:.3g} > {NGD_V_TOL:g}")
    if gp > NGD_P_TOL:
        failures.append(f"1 − cos(p, p^relax) = {gp:.3g} > {NGD_P_TOL:g}")
    return "; ".join(failures) or None


FIG3B = figure3_instance(tight=False)
FIG3A = figure3_instance(tight=True)

J_HYPOTHESES = (
    "Joint training of (v, p) with logistic loss, W = I, inputs [(0, 0), x_i] in R² with the "
    "selected token α_i = 1, the v-SVM on the selected tokens feasible with a support set "
    "holding both labels, and ATT-SVM(α) feasible"
)


# ---- Theorem J on the regularization path ------------------------------------------------------


@claim("MM-J-RP")
@given(inst=joint_instances())
def test_joint_reg_path(inst):
    """Theorem J as read. Joint training of (v, p) with logistic loss, W = I, inputs [(0, 0), x_i]
    in R² with the selected token α_i = 1, the v-SVM on the selected tokens feasible with a
    support set holding both labels, and ATT-SVM(α) feasible. Along the joint regularization
    path with r = R, v_r/r → v^mm/‖v^mm‖ and p_R/R → p^relax/‖p^relax‖ (p^relax = p^full when
    every input is a v-SVM support vector), and in the non-tight case p_R ends closer to p^relax
    than to p^full. Checked at R = r = 25·‖p^relax‖: 1 − cos(v_r, v^mm) and 1 − cos(p_R,
    p^relax) ≤ 8/25² = 0.0128 (random tight and non-tight instances)."""
    problem, svms = joint_setup(inst)
    evidence.metric("relaxation slack", relaxation_slack(problem, svms))
    failure = theorem_j_failure(problem, svms, compare=True)
    assert failure is None, failure


@claim("MM-J-RP-TIGHT")
@example(inst=FIG3A)
@given(inst=joint_instances(tight=True))
def test_joint_reg_path_tight(inst):
    """Theorem J, tight case. Joint training of (v, p) with logistic loss, W = I, inputs [(0, 0),
    x_i] in R² with the selected token α_i = 1, the v-SVM on the selected tokens feasible with a
    support set holding both labels, and ATT-SVM(α) feasible, and every input a support vector
    of the v-SVM. Then p^relax = p^full and, along the joint regularization path with r = R,
    v_r/r → v^mm/‖v^mm‖ and p_R/R → p^mm/‖p^mm‖: at R = r = 25·‖p^mm‖ both 1 − cos ≤ 0.0128
    (random tight instances; Fig. 3(a) pinned)."""
    problem, svms = joint_setup(inst)
    if not svms.tight:
        evidence.reject("an input is not a v-SVM support vector")
    gap = one_minus_cos(svms.p_relax.x, svms.p_full.x)
    assert gap <= 1e-12, f"tight, yet p^relax ≠ p^full (1 − cos = {gap:.3g})"
    failure = theorem_j_failure(problem, svms, compare=False)
    assert failure is None, failure


@claim("MM-J-RP-SLACK")
@example(inst=FIG3B)
@given(inst=joint_instances(tight=False, slack=SLACK_MIN))
def test_joint_reg_path_slack(inst):
    """Theorem J with the relaxation-slack condition. Joint training of (v, p) with logistic loss,
    W = I, inputs [(0, 0), x_i] in R² with the selected token α_i = 1, the v-SVM on the selected
    tokens feasible with a support set holding both labels, and ATT-SVM(α) feasible, and some
    input not a support vector of the v-SVM (non-tight). If the relaxation slack
    min_{i∉S}[x_iᵀp̂^relax + (a_i − m̂)] − 1/‖p^relax‖ is ≥ 0 (a_i = y_i x_iᵀv̂^mm, m̂ =
    1/‖v^mm‖), then along the joint path with r = R, v_r/r → v^mm/‖v^mm‖, p_R/R →
    p^relax/‖p^relax‖, and p_R ends closer to p^relax than to p^full whenever they differ.
    Checked as MM-J-RP (random non-tight instances with slack ≥ 0.05; Fig. 3(b), slack exactly
    0, pinned)."""
    problem, svms = joint_setup(inst)
    slack = relaxation_slack(problem, svms)
    evidence.metric("relaxation slack", slack)
    if svms.tight or slack < -1e-9:
        evidence.reject("not a non-tight instance with relaxation slack ≥ 0")
    failure = theorem_j_failure(problem, svms, compare=True)
    assert failure is None, failure


# ---- Theorem J with joint NGD (the Fig. 3 protocol) ----------------------------------------------


@claim("MM-J-NGD")
@given(inst=joint_instances())
def test_joint_ngd(inst):
    """Theorem J for joint normalized GD as read. Joint training of (v, p) with logistic loss, W =
    I, inputs [(0, 0), x_i] in R² with the selected token α_i = 1, the v-SVM on the selected
    tokens feasible with a support set holding both labels, and ATT-SVM(α) feasible. Joint NGD
    from unit-norm (v0, p0) (lr 0.1 on each separately normalized gradient, 1000 steps, the Fig.
    3 protocol) ends with 1 − cos(v, v^mm) ≤ 5e-4 and 1 − cos(p, p^relax) ≤ 3e-3 (random tight
    and non-tight instances, random unit inits)."""
    problem, svms = joint_setup(inst)
    evidence.metric("relaxation slack", relaxation_slack(problem, svms))
    failure = ngd_failure(problem, svms, inst)
    assert failure is None, failure


@claim("MM-J-NGD-SLACK")
@given(
    inst=st.one_of(
        joint_instances(tight=True, score_init=True),
        joint_instances(tight=False, slack=SLACK_MIN, score_init=True),
    )
)
def test_joint_ngd_slack(inst):
    """Theorem J for joint normalized GD, with the relaxation-slack and init conditions. Joint
    training of (v, p) with logistic loss, W = I, inputs [(0, 0), x_i] in R² with the selected
    token α_i = 1, the v-SVM on the selected tokens feasible with a support set holding both
    labels, and ATT-SVM(α) feasible, relaxation slack ≥ 0 (MM-J-RP-SLACK; tight instances have
    no slack to meet), and an initial head that scores every selected token above the zero token
    (y_i v0ᵀx_i > 0). Joint NGD (Fig. 3 protocol) from p0 of unit norm ends with 1 − cos(v,
    v^mm) ≤ 5e-4 and 1 − cos(p, p^relax) ≤ 3e-3 (random instances, tight or with slack ≥ 0.05)."""
    problem, svms = joint_setup(inst)
    slack = relaxation_slack(problem, svms)
    evidence.metric("relaxation slack", slack)
    if slack < -1e-9:
        evidence.reject("relaxation slack < 0")
    failure = ngd_failure(problem, svms, inst)
    assert failure is None, failure


# ---- F12 controls ------------------------------------------------------------------------------


@claim("MM-F12-FULL")
@given(inst=joint_instances(tight=False, slack=SLACK_MIN))
def test_f12_full_svm_regardless(inst):
    """(Wrong) In joint training the attention converges to the full ATT-SVM regardless of the
    support geometry of v: along the joint path with r = R, 1 − cos(p_R, p^full) ≤ 0.0128 at R =
    r = 25·‖p^relax‖ (random non-tight instances with relaxation slack ≥ 0.05)."""
    problem, svms = joint_setup(inst)
    pt = path_point(problem, svms)
    gap = one_minus_cos(pt.p, svms.p_full.x)
    evidence.metric("1 − cos(p_R, p^relax)", one_minus_cos(pt.p, svms.p_relax.x))
    evidence.slack("1 − cos(p_R, p^full)", gap, j_tol(J_C))
    assert gap <= j_tol(J_C), f"1 − cos(p_R, p^full) = {gap:.3g} > {j_tol(J_C):.3g}"


@claim("MM-F12-RATE")
@given(inst=joint_instances(tight=False, slack=SLACK_MIN))
def test_f12_relaxed_svm_any_rate(inst):
    """(Wrong) In joint training the attention converges to p^relax regardless of how r and R grow:
    with R = 4r, 1 − cos(p_R, p^relax) ≤ 0.0128 at R = 25·‖p^relax‖ (random non-tight instances
    with relaxation slack ≥ 0.05)."""
    problem, svms = joint_setup(inst)
    pt = path_point(problem, svms, ratio=RATE_RATIO)
    gap = one_minus_cos(pt.p, svms.p_relax.x)
    evidence.metric("1 − cos(p_R, p^full)", one_minus_cos(pt.p, svms.p_full.x))
    evidence.metric("1 − cos(v_r, v^mm)", one_minus_cos(pt.v, svms.v_mm.x))
    evidence.slack("1 − cos(p_R, p^relax), R = 4r", gap, j_tol(J_C))
    assert gap <= j_tol(J_C), f"1 − cos(p_R, p^relax) = {gap:.3g} > {j_tol(J_C):.3g} (R = 4r)"
