"""The experiments of arXiv 2306.13596 (spec maxmargin §4): Figures 1(a), 1(b), 2 and the loss
comparison, as pinned instances with qualitative claims; plots.py draws each figure as the paper
does for the report.

Limits are decided by the engine (``theorems.limits.flow``: log-space gradient flow, confirmed
over two decades of ‖p‖), which does not stall where the notebooks' float32/``+ eps`` recipe
does. The runs the figures show follow the notebooks: normalized GD with lr 0.1 and GD with
η = 1, the first 200 iterations from p(0) = 0 (``common.figure2_runs``).
"""

from __future__ import annotations

from hypothesis import example, given

from models.flows.dynamics import gd
from models.oracles.selection import local_optimality
from models.problems.attention import one_minus_cos
from strategies import figure1_instance, figure2_instance, loss_comparison_instance
from strategies.maxmargin_dynamics import figure2_draws
from strategies.prompt import LOSS_COMPARISON_C
from theorems import claim, evidence
from theorems.limits import flow
from theorems.maxmargin.common import (
    DIRECTION_TOL,
    LOSS_GAP_TOL,
    LR,
    figure2_runs,
    figure_starts,
    mean_opt_prob,
)

# ---- Figure 1 ------------------------------------------------------------------------------------


@claim("MM-FIG1A")
def test_figure1a():
    """Figure 1(a): one input with keys (−0.1, 1), (1, 0), (0, 0) and scores 1, 0.9, 0.9: from all
    six initializations, GD converges in direction to the global ATT-SVM p^mm(opt)."""
    for start in evidence.each(figure_starts(figure1_instance("a"))):
        lim = flow(start.problem, start.p0)
        init = f"init {start.p0[:2].tolist()}"
        assert lim.converged_to([0]), lim.why_not([0], f"{init} → the global")
        gap = lim.loss_gap([0])
        assert gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g} from {init}"


@claim("MM-FIG1B")
def test_figure1b():
    """Figure 1(b): as 1(a) with the token (0, 0) scoring 0, so (1, 0) is locally optimal: GD from
    (0, −1), (0, −1.5) converges to p^mm = (1, 0), from the other four to the global direction."""
    inst = figure1_instance("b")
    assert local_optimality(inst.keys, inst.scores, [1]).locally_optimal
    for j, start in enumerate(evidence.each(figure_starts(inst))):
        lim = flow(start.problem, start.p0)
        target, which = ([1], "the local") if j in inst.meta["local_inits"] else ([0], "the global")
        init = f"init {start.p0[:2].tolist()}"
        assert lim.converged_to(target), lim.why_not(target, f"{init} → {which}")
        gap = lim.loss_gap(target)  # None for the local target: not the top-score selection
        assert gap is None or gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g} from {init}"


# ---- Figure 2 ------------------------------------------------------------------------------------

#: Figure 2 thresholds. Spec §4 [N]: NGD's averaged softmax on the optimal tokens reaches 1.0 by
#: step 100 (0.99998 in our float64 runs over noise seeds 0–7), GD with η = 1 is at 0.922 /
#: 0.969 at steps 50 / 100 (0.93–0.96 here).
FIG2_NGD_PROB_AT_100 = 0.999
FIG2_GD_PROB_AT_100 = 0.99
#: The threshold that separates NGD from GD at step 100 on every noise draw measured (MM-FIG2
#: with 0.999 is refuted at noise seed 174: 0.99696).
FIG2_SEPARATION = 0.99
#: ‖p‖ grows linearly under NGD (‖p_t‖ ≤ ‖p_0‖ + lr·t, and ≥ 0.9·lr·t here: measured 0.99) and
#: logarithmically under GD: the growth from step 100 to 200 is at most 1.2× that from 50 to
#: 100 (≈ 1 for a + b·log t, 2 for linear growth; measured 0.80–0.90).
FIG2_NGD_LINEAR = 0.9
FIG2_GD_DOUBLING_RATIO = 1.2


def figure2_starts(inst):
    """Where Figure 2's limit is checked: p(0) = 0 on every noise draw, and on the paper's own
    draw (noise seed 0) each of the figure's six initializations."""
    return figure_starts(inst) if inst.seed == 0 else [inst]


def norm_growth(runs) -> tuple[float, float]:
    """‖p_200‖/(lr·200) under NGD (1 for linear growth) and, under GD, the growth of ‖p‖ from
    step 100 to 200 over that from 50 to 100 (≈ 1 for logarithmic growth, 2 for linear)."""
    n_ngd, n_gd = runs.ngd.norms, runs.gd.norms
    linear = n_ngd[200] / (LR * 200)
    ratio = (n_gd[200] - n_gd[100]) / (n_gd[100] - n_gd[50])
    evidence.metric("NGD ‖p_200‖ / (lr·200)", linear)
    evidence.metric("GD ‖p‖ growth, steps 100→200 over 50→100", ratio)
    return linear, ratio


@claim("MM-FIG2")
@given(inst=figure2_draws())
@example(inst=figure2_instance(0))
@example(inst=figure2_instance(174))
def test_figure2(inst):
    """Figure 2: gradient descent converges to the global direction p^mm(opt); normalized GD puts
    averaged softmax ≥ 0.999 on the optimal tokens by step 100 while GD is still below 0.99 there;
    ‖p‖ grows linearly under NGD and logarithmically under GD."""
    for start in figure2_starts(inst):
        lim = flow(start.problem, start.p0)
        what = f"init {start.p0[:2].tolist()} → the global"
        assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, what)
        assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL
    runs = figure2_runs(inst)
    s_ngd, s_gd = runs.s_ngd[100], runs.s_gd[100]
    evidence.slack("1 − s_opt(NGD, 100) vs 1 − min", 1 - s_ngd, 1 - FIG2_NGD_PROB_AT_100)
    assert s_ngd >= FIG2_NGD_PROB_AT_100, f"NGD: s_opt = {s_ngd:.5f} at step 100, seed {inst.seed}"
    assert s_gd < FIG2_GD_PROB_AT_100, f"GD: s_opt = {s_gd:.5f} at step 100, seed {inst.seed}"
    linear, ratio = norm_growth(runs)
    assert linear >= FIG2_NGD_LINEAR, f"NGD: ‖p_200‖ = {linear:.3g}·lr·200, not linear"
    assert 0 < ratio <= FIG2_GD_DOUBLING_RATIO, f"GD: ‖p‖ growth ratio {ratio:.3g}, not logarithmic"


@claim("MM-FIG2-SEPARATION")
@given(inst=figure2_draws())
@example(inst=figure2_instance(174))
def test_figure2_separation(inst):
    """Figure 2 on every noise draw: gradient descent converges to p^mm(opt); at step 100 NGD puts
    averaged softmax ≥ 0.99 on the optimal tokens while GD is below 0.99; ‖p‖ grows linearly under
    NGD and logarithmically under GD."""
    for start in figure2_starts(inst):
        lim = flow(start.problem, start.p0)
        what = f"init {start.p0[:2].tolist()} → the global"
        assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, what)
        assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL
    runs = figure2_runs(inst)
    s_ngd, s_gd = runs.s_ngd[100], runs.s_gd[100]
    evidence.slack("1 − s_opt(NGD, 100) vs 1 − min", 1 - s_ngd, 1 - FIG2_SEPARATION)
    assert s_ngd >= FIG2_SEPARATION, f"NGD: s_opt = {s_ngd:.5f} at step 100, seed {inst.seed}"
    assert s_gd < FIG2_GD_PROB_AT_100, f"GD: s_opt = {s_gd:.5f} at step 100, seed {inst.seed}"
    linear, ratio = norm_growth(runs)
    assert linear >= FIG2_NGD_LINEAR, f"NGD: ‖p_200‖ = {linear:.3g}·lr·200, not linear"
    assert 0 < ratio <= FIG2_GD_DOUBLING_RATIO, f"GD: ‖p‖ growth ratio {ratio:.3g}, not logarithmic"


#: Spec §4 [N] for Figure 2, GD with η = 1 from p = 0: averaged s_opt and ‖p‖ at these steps.
FIG2_SPEC_STEPS = (50, 100, 200, 1000)
FIG2_SPEC_GD_PROB = (0.922, 0.969, 0.986, 0.997)
FIG2_SPEC_GD_NORM = (2.3, 2.8, 3.3, 4.3)
#: Agreement asked: the spec prints 3 decimals of s_opt and 1 of ‖p‖, from its own noise draws
#: (numpy seeds 0–4); 0.01 and 0.2 allow that rounding and a draw-to-draw spread of the size
#: measured at step 1000 (0.9935–0.9969 over torch noise seeds 0–9).
FIG2_PROB_TOL, FIG2_NORM_TOL = 0.01, 0.2


def spec_misses(inst) -> list[str]:
    """GD with η = 1 from p(0) = 0 against the spec's s_opt and ‖p‖ at FIG2_SPEC_STEPS (each
    difference recorded as slack): the values outside the agreement asked."""
    run = gd(inst.problem, inst.p0, eta=1.0, steps=FIG2_SPEC_STEPS[-1])
    probs = mean_opt_prob(inst, run.ps)
    misses = []
    for step, want_s, want_n in zip(
        FIG2_SPEC_STEPS, FIG2_SPEC_GD_PROB, FIG2_SPEC_GD_NORM, strict=True
    ):
        got_s, got_n = float(probs[step]), float(run.norms[step])
        evidence.slack(f"|s_opt − spec| at step {step}", abs(got_s - want_s), FIG2_PROB_TOL)
        evidence.slack(f"|‖p‖ − spec| at step {step}", abs(got_n - want_n), FIG2_NORM_TOL)
        if abs(got_s - want_s) > FIG2_PROB_TOL:
            misses.append(f"s_opt = {got_s:.4f} at step {step} (spec {want_s})")
        if abs(got_n - want_n) > FIG2_NORM_TOL:
            misses.append(f"‖p‖ = {got_n:.3f} at step {step} (spec {want_n})")
    return misses


@claim("MM-FIG2-NUMBERS")
@given(inst=figure2_draws())
@example(inst=figure2_instance(0))
def test_figure2_spec_numbers(inst):
    """Figure 2 as the spec records it: GD with η = 1 from p(0) = 0 has averaged softmax s_opt
    = 0.922 / 0.969 / 0.986 / 0.997 on the optimal tokens and ‖p‖ = 2.3 / 2.8 / 3.3 / 4.3 at
    steps 50 / 100 / 200 / 1000, on every noise draw."""
    misses = spec_misses(inst)
    assert not misses, "; ".join(misses) + f" (noise seed {inst.seed})"


# ---- the loss comparison -------------------------------------------------------------------------

#: The notebook's family (``diff_loss_function.ipynb``): both losses, every score C.
LOSS_COMPARISON = tuple(
    loss_comparison_instance(C, loss)
    for loss in ("correlation", "logistic")
    for C in LOSS_COMPARISON_C
)


@claim("MM-FIG-LOSS-COMPARISON")
def test_loss_comparison():
    """Loss comparison: for every C ∈ {1, …, 10, 100} and both the correlation loss ℓ(x) = −x and
    the logistic loss, gradient descent converges in direction to p^mm = (1, 0); the loss and C bend
    only the transient path."""
    for inst in evidence.each(LOSS_COMPARISON):
        lim = flow(inst.problem, inst.p0)
        what = f"C={inst.meta['C']:g}, {inst.loss}: the"
        assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, what)
        assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL, f"{what} loss above its floor"
        assert one_minus_cos(lim.outcome.p, inst.meta["p_mm"]) <= DIRECTION_TOL
