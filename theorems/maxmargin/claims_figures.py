"""The experiments of arXiv 2306.13596 (spec maxmargin §4): Figures 1(a), 1(b), 2 and the loss
comparison, as pinned instances with qualitative claims, each drawn as the paper does.

Limits are decided by the engine (``settle``: log-space gradient flow, confirmed over two
decades of ‖p‖), which does not stall where the notebooks' float32/``+ eps`` recipe does. The
pictures follow the notebooks: normalized GD with lr 0.1, the first 200 iterations from each
initialization, a marker every 10 steps, ATT-SVM directions dashed (global red, local blue).
"""

from __future__ import annotations

import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models.attention import one_minus_cos
from models.dynamics import gd, ngd
from models.selection import local_optimality
from strategies import figure1_instance, figure2_instance, loss_comparison_instance
from strategies.prompt import LOSS_COMPARISON_C
from theorems import claim, evidence
from theorems.maxmargin import plots
from theorems.maxmargin.common import (
    DIRECTION_TOL,
    LR,
    PLOT_STEPS,
    check_limit,
    inits,
    mean_opt_prob,
    record_outcome,
    settle,
)

DTYPE = torch.float64

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


def _figure1(panel: str) -> tuple[list, list]:
    """Settle every initialization of Figure 1(panel); return outcomes and SVM directions."""
    inst = figure1_instance(panel)
    outcomes = []
    for j, p0 in enumerate(inits(inst)):
        out, transient = settle(inst.problem, p0)
        record_outcome(out, transient)
        outcomes.append((j, p0, out))
    return inst, outcomes


@claim("MM-FIG1A")
def test_figure1a():
    """Figure 1(a): one input with keys (−0.1, 1), (1, 0), (0, 0) and scores 1, 0.9, 0.9 (equal
    non-optimal scores): from all six initializations (0, 1), (0, 0.5), (0, 0), (0, −0.5), (0,
    −1), (0, −1.5), gradient descent converges in direction to the global ATT-SVM solution
    p^mm(opt)."""
    inst, outcomes = _figure1("a")
    evidence.instance(inst.to_json())
    for _, p0, out in outcomes:
        evidence.instance({**inst.to_json(), "p0": p0.tolist()})
        check_limit(inst.problem, out, [0], f"init {p0[:2].tolist()} → the global")
    plots.figure1(inst, "a", "mm_fig1a.png")


@claim("MM-FIG1B")
def test_figure1b():
    """Figure 1(b): as 1(a) but the token (0, 0) scores 0: the token (1, 0) becomes locally optimal
    (its only support token now scores lower); gradient descent from (0, −1) and (0, −1.5)
    converges to its direction p^mm = (1, 0) (local), and from the other four initializations to
    the global direction."""
    inst, outcomes = _figure1("b")
    evidence.instance(inst.to_json())
    assert local_optimality(inst.keys, inst.scores, [1]).locally_optimal
    for j, p0, out in outcomes:
        evidence.instance({**inst.to_json(), "p0": p0.tolist()})
        target = [1] if j in inst.meta["local_inits"] else [0]
        which = "the local" if target == [1] else "the global"
        check_limit(inst.problem, out, target, f"init {p0[:2].tolist()} → {which}")
    plots.figure1(inst, "b", "mm_fig1b.png")


def _figure2(seed: int, ngd_min: float) -> None:
    """The checks of Fig. 2 on noise draw `seed`, with NGD's averaged s_opt at step 100 required
    to reach `ngd_min`."""
    inst = figure2_instance(seed)
    evidence.instance(inst.to_json())
    p0 = torch.zeros(inst.d, dtype=DTYPE)
    out, transient = settle(inst.problem, p0)
    record_outcome(out, transient)
    check_limit(inst.problem, out, inst.alpha, "the global")
    ngd_run = ngd(inst.problem, p0, lr=LR, steps=PLOT_STEPS)
    gd_run = gd(inst.problem, p0, eta=1.0, steps=PLOT_STEPS)
    s_ngd, s_gd = mean_opt_prob(inst, ngd_run.ps), mean_opt_prob(inst, gd_run.ps)
    evidence.metric("NGD: averaged s_opt at step 100", s_ngd[100])
    evidence.metric("GD: averaged s_opt at step 100", s_gd[100])
    evidence.slack("1 − s_opt(NGD, 100) vs 1 − min", 1 - s_ngd[100], 1 - ngd_min)
    assert s_ngd[100] >= ngd_min
    assert s_gd[100] < FIG2_GD_PROB_AT_100
    n_ngd, n_gd = ngd_run.norms, gd_run.norms
    evidence.metric("NGD ‖p_200‖ / (lr·200)", n_ngd[200] / (LR * 200))
    assert n_ngd[200] >= FIG2_NGD_LINEAR * LR * 200
    ratio = (n_gd[200] - n_gd[100]) / (n_gd[100] - n_gd[50])
    evidence.metric("GD ‖p‖ growth, steps 100→200 over 50→100", ratio)
    assert 0 < ratio <= FIG2_GD_DOUBLING_RATIO
    if seed == 0:
        for p in inits(inst):
            out, transient = settle(inst.problem, p)
            check_limit(inst.problem, out, inst.alpha, f"init {p[:2].tolist()} → the global")
        plots.figure2(inst, ngd_run, gd_run)


@claim("MM-FIG2")
@given(seed=st.integers(0, 10_000))
@example(seed=0)
@example(seed=174)
def test_figure2(seed):
    """Figure 2 (three inputs, seven tokens: optimal token at (1, 0), three at (−1, 1), three at
    (−0.5, −0.5), plus N(0, 0.2²) noise; scores 1 vs 0.5): gradient descent from p(0) = 0
    converges to the global direction p^mm(opt); normalized GD (lr 0.1) puts averaged softmax ≥
    0.999 on the optimal tokens by step 100 while GD with η = 1 is still below 0.99 there; ‖p‖
    grows linearly under NGD and logarithmically under GD."""
    _figure2(seed, FIG2_NGD_PROB_AT_100)


#: Spec §4 [N] for Figure 2, GD with η = 1 from p = 0: averaged s_opt and ‖p‖ at these steps.
FIG2_SPEC_STEPS = (50, 100, 200, 1000)
FIG2_SPEC_GD_PROB = (0.922, 0.969, 0.986, 0.997)
FIG2_SPEC_GD_NORM = (2.3, 2.8, 3.3, 4.3)
#: Agreement asked: the spec prints 3 decimals of s_opt and 1 of ‖p‖, from its own noise draws
#: (numpy seeds 0–4); 0.01 and 0.2 allow that rounding and a draw-to-draw spread of the size
#: measured at step 1000 (0.9935–0.9969 over torch noise seeds 0–9).
FIG2_PROB_TOL, FIG2_NORM_TOL = 0.01, 0.2


@claim("MM-FIG2-NUMBERS")
@given(seed=st.integers(0, 10_000))
@example(seed=0)
def test_figure2_spec_numbers(seed):
    """Figure 2 as the spec records it: GD with η = 1 from p(0) = 0 has averaged softmax s_opt =
    0.922 / 0.969 / 0.986 / 0.997 on the optimal tokens (each within 0.01) and ‖p‖ = 2.3 / 2.8 /
    3.3 / 4.3 (each within 0.2) at steps 50 / 100 / 200 / 1000, on every noise draw."""
    inst = figure2_instance(seed)
    evidence.instance(inst.to_json())
    run = gd(inst.problem, torch.zeros(inst.d, dtype=DTYPE), eta=1.0, steps=FIG2_SPEC_STEPS[-1])
    probs = mean_opt_prob(inst, run.ps)
    failures = []
    for step, want_s, want_n in zip(
        FIG2_SPEC_STEPS, FIG2_SPEC_GD_PROB, FIG2_SPEC_GD_NORM, strict=True
    ):
        got_s, got_n = float(probs[step]), float(run.norms[step])
        evidence.slack(f"|s_opt − spec| at step {step}", abs(got_s - want_s), FIG2_PROB_TOL)
        evidence.slack(f"|‖p‖ − spec| at step {step}", abs(got_n - want_n), FIG2_NORM_TOL)
        if abs(got_s - want_s) > FIG2_PROB_TOL:
            failures.append(f"s_opt = {got_s:.4f} at step {step} (spec {want_s})")
        if abs(got_n - want_n) > FIG2_NORM_TOL:
            failures.append(f"‖p‖ = {got_n:.3f} at step {step} (spec {want_n})")
    assert not failures, "; ".join(failures) + f" (noise seed {seed})"


@claim("MM-FIG2-SEPARATION")
@given(seed=st.integers(0, 10_000))
@example(seed=174)
def test_figure2_separation(seed):
    """Figure 2 on every noise draw, with the softmax threshold the draws support: gradient descent
    from p(0) = 0 converges to p^mm(opt); at step 100 normalized GD (lr 0.1) puts averaged
    softmax ≥ 0.99 on the optimal tokens while GD with η = 1 is below 0.99; ‖p‖ grows linearly
    under NGD and logarithmically under GD."""
    _figure2(seed, FIG2_SEPARATION)


@claim("MM-FIG-LOSS-COMPARISON")
def test_loss_comparison():
    """Loss comparison (two inputs [(0, 0; 0), (1, 1; C)] and [(0, 0; 0), (1, −1; 1)], p(0) = 0):
    for every C ∈ {1, …, 10, 100} and both the correlation loss ℓ(x) = −x and the logistic loss,
    gradient descent converges in direction to p^mm = (1, 0); the loss and C bend only the
    transient path."""
    for loss in ("correlation", "logistic"):
        for C in LOSS_COMPARISON_C:
            inst = loss_comparison_instance(C, loss)
            evidence.instance(inst.to_json())
            out, transient = settle(inst.problem, inst.p0)
            record_outcome(out, transient)
            check_limit(inst.problem, out, inst.alpha, f"C={C}, {loss}: the")
            assert one_minus_cos(out.p, inst.meta["p_mm"]) <= DIRECTION_TOL
    plots.loss_comparison(("correlation", "logistic"), LOSS_COMPARISON_C, "mm_loss_comparison.png")
