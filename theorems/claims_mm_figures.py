"""The experiments of arXiv 2306.13596 (spec maxmargin §4): Figures 1(a), 1(b), 2 and the loss
comparison, as pinned instances with qualitative claims, each drawn as the paper does.

Limits are decided by the engine (``settle``: log-space gradient flow, confirmed over two
decades of ‖p‖), which does not stall where the notebooks' float32/``+ eps`` recipe does. The
pictures follow the notebooks: normalized GD with lr 0.1, the first 200 iterations from each
initialization, a marker every 10 steps, ATT-SVM directions dashed (global red, local blue).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import example, given
from hypothesis import strategies as st

from models.attention import one_minus_cos
from models.dynamics import gd, ngd
from models.selection import local_optimality
from models.svm import att_svm
from strategies import figure1_instance, figure2_instance, loss_comparison_instance
from strategies.prompt import LOSS_COMPARISON_C
from theorems import claim, evidence
from theorems.claims_mm_gd import DIRECTION_TOL, check_limit, record_outcome, settle
from theorems.framework import figures

PAPER = "2306.13596"
DTYPE = torch.float64

#: The notebooks' protocol (spec §4): normalized GD, lr 0.1; plots show 200 iterations with an
#: arrow every 10 steps.
LR = 0.1
PLOT_STEPS = 200
MARK_EVERY = 10
#: Figure 2 thresholds. Spec §4 [N]: NGD's averaged softmax on the optimal tokens reaches 1.0 by
#: step 100 (0.99998 in our float64 runs over noise seeds 0–7), GD with η = 1 is at 0.922 /
#: 0.969 at steps 50 / 100 (0.93–0.96 here).
FIG2_NGD_PROB_AT_100 = 0.999
FIG2_GD_PROB_AT_100 = 0.99
#: ‖p‖ grows linearly under NGD (‖p_t‖ ≤ ‖p_0‖ + lr·t, and ≥ 0.9·lr·t here: measured 0.99) and
#: logarithmically under GD: the growth from step 100 to 200 is at most 1.2× that from 50 to
#: 100 (≈ 1 for a + b·log t, 2 for linear growth; measured 0.80–0.90).
FIG2_NGD_LINEAR = 0.9
FIG2_GD_DOUBLING_RATIO = 1.2


def _palette(x: np.ndarray):
    """Viridis colours at x ∈ [0, 1] (paths: red and blue are the SVM directions')."""
    import matplotlib

    return matplotlib.colormaps["viridis"](x)


def _inits(inst) -> list[torch.Tensor]:
    return [torch.tensor(p, dtype=DTYPE) for p in inst.meta["inits"]]


def _draw_paths(ax, inst, inits) -> float:
    """NGD paths (lr 0.1, 200 iterations) in the key plane, an arrow every 10 steps, the
    tokens' keys annotated with their scores; returns the largest ‖p‖ drawn. Paths use a
    green-to-purple palette so that red and blue stay reserved for the SVM directions."""
    keys, scores = inst.keys.numpy(), inst.scores.numpy()
    colors = _palette(np.linspace(0.0, 0.85, len(inits)))
    reach = 0.0
    for j, p0 in enumerate(inits):
        path = ngd(inst.problem, p0, lr=LR, steps=PLOT_STEPS).ps.numpy()
        reach = max(reach, float(np.linalg.norm(path[:, :2], axis=1).max()))
        line = ax.plot(path[:, 0], path[:, 1], lw=1.0, color=colors[j], label=_init_label(p0))[0]
        marks = path[::MARK_EVERY]
        ax.quiver(
            marks[:-1, 0],
            marks[:-1, 1],
            np.diff(marks[:, 0]),
            np.diff(marks[:, 1]),
            angles="xy",
            scale_units="xy",
            scale=1,
            width=0.004,
            color=line.get_color(),
        )
        ax.plot(path[0, 0], path[0, 1], "o", ms=4, color=line.get_color())
    for i in range(keys.shape[0]):
        ax.scatter(keys[i, :, 0], keys[i, :, 1], s=18, color="0.3", zorder=3)
        if keys.shape[0] == 1:
            for t in range(keys.shape[1]):
                ax.annotate(f"γ={scores[i, t]:g}", keys[i, t, :2], fontsize=7, color="0.3")
    ax.set_xlabel("p₁")
    ax.set_ylabel("p₂")
    ax.set_aspect("equal", adjustable="datalim")
    return reach


def _init_label(p0) -> str:
    return f"p(0) = ({float(p0[0]):g}, {float(p0[1]):g})"


def _figure1(panel: str) -> tuple[list, list]:
    """Settle every initialization of Figure 1(panel); return outcomes and SVM directions."""
    inst = figure1_instance(panel)
    outcomes = []
    for j, p0 in enumerate(_inits(inst)):
        out, transient = settle(inst.problem, p0)
        record_outcome(out, transient)
        outcomes.append((j, p0, out))
    return inst, outcomes


def _plot_figure1(inst, panel: str, name: str) -> None:
    fig, axes = figures.new(1, 1, width=5.0, height=4.6)
    ax = axes[0, 0]
    reach = _draw_paths(ax, inst, _inits(inst))
    figures.direction_line(
        ax, inst.meta["p_mm"][0], color=figures.GLOBAL_COLOR, label="global p^mm", length=reach
    )
    if panel == "b":
        figures.direction_line(
            ax, inst.meta["p_mm"][1], color=figures.LOCAL_COLOR, label="local p^mm", length=reach
        )
    ax.set_title(f"Figure 1({panel}): NGD paths, lr 0.1, 200 iterations", fontsize=9)
    ax.legend(fontsize=6, loc="upper right")
    figures.save(fig, name)


@claim(
    id="MM-FIG1A",
    paper=PAPER,
    kind="experiment",
    provenance="[V] data, [N] results",
    statement="Figure 1(a): one input with keys (−0.1, 1), (1, 0), (0, 0) and scores 1, 0.9, 0.9 "
    "(equal non-optimal scores): from all six initializations (0, 1), (0, 0.5), (0, 0), "
    "(0, −0.5), (0, −1), (0, −1.5), gradient descent converges in direction to the global "
    "ATT-SVM solution p^mm(opt).",
    figures=("mm_fig1a.png",),
)
def test_figure1a():
    """Fig. 1(a): every initialization goes to the global max-margin direction (spec §4)."""
    inst, outcomes = _figure1("a")
    evidence.instance(inst.to_json())
    for _, p0, out in outcomes:
        evidence.instance({**inst.to_json(), "p0": p0.tolist()})
        check_limit(inst.problem, out, [0], f"init {p0[:2].tolist()} → the global")
    _plot_figure1(inst, "a", "mm_fig1a.png")


@claim(
    id="MM-FIG1B",
    paper=PAPER,
    kind="experiment",
    provenance="[V] data, [N] results",
    statement="Figure 1(b): as 1(a) but the token (0, 0) scores 0: the token (1, 0) becomes "
    "locally optimal (its only support token now scores lower); gradient descent from "
    "(0, −1) and (0, −1.5) converges to its direction p^mm = (1, 0) (local), and from the "
    "other four initializations to the global direction.",
    figures=("mm_fig1b.png",),
)
def test_figure1b():
    """Fig. 1(b): two initializations go to the local direction, four to the global one."""
    inst, outcomes = _figure1("b")
    evidence.instance(inst.to_json())
    assert local_optimality(inst.keys, inst.scores, [1]).locally_optimal
    for j, p0, out in outcomes:
        evidence.instance({**inst.to_json(), "p0": p0.tolist()})
        target = [1] if j in inst.meta["local_inits"] else [0]
        which = "the local" if target == [1] else "the global"
        check_limit(inst.problem, out, target, f"init {p0[:2].tolist()} → {which}")
    _plot_figure1(inst, "b", "mm_fig1b.png")


def _mean_opt_prob(inst, ps: torch.Tensor) -> np.ndarray:
    """The averaged softmax probability of the optimal tokens along a path (k, d)."""
    logits = torch.einsum("itd,kd->kit", inst.keys, ps)
    probs = torch.softmax(logits, dim=-1)
    opt = torch.as_tensor(inst.alpha)
    return probs[:, torch.arange(inst.n), opt].mean(-1).numpy()


def _plot_figure2(inst, ngd_run, gd_run) -> None:
    fig, axes = figures.new(3, 1, width=4.2, height=3.8)
    ax = axes[0, 0]
    reach = _draw_paths(ax, inst, _inits(inst))
    sol = att_svm(inst.keys, inst.alpha)
    figures.direction_line(ax, sol.x, color=figures.GLOBAL_COLOR, label="p^mm", length=reach)
    # the max-margin separating hyperplane: through the midpoint of the closest pair
    keys = inst.keys.numpy()
    u = sol.direction[:2]
    opt_proj = min(float(keys[i, 0, :2] @ u) for i in range(inst.n))
    other_proj = max(float(keys[i, t, :2] @ u) for i in range(inst.n) for t in range(1, inst.T))
    mid = 0.5 * (opt_proj + other_proj)
    perp = np.array([-u[1], u[0]])
    line = np.array([mid * u + s * perp for s in (-3.0, 3.0)])
    ax.plot(line[:, 0], line[:, 1], ":", color="0.5", label="max-margin hyperplane")
    ax.legend(fontsize=6, loc="upper left")
    ax.set_title("Figure 2: NGD paths (lr 0.1, 200 iterations)", fontsize=9)
    steps = np.arange(PLOT_STEPS + 1)
    axes[0, 1].plot(steps, _mean_opt_prob(inst, ngd_run.ps), label="NGD (lr 0.1)")
    axes[0, 1].plot(steps, _mean_opt_prob(inst, gd_run.ps), label="GD (η = 1)")
    axes[0, 1].set_xlabel("iteration")
    axes[0, 1].set_ylabel("softmax probability of optimal tokens")
    axes[0, 1].legend(fontsize=7)
    axes[0, 2].plot(steps, ngd_run.norms, label="NGD (lr 0.1)")
    axes[0, 2].plot(steps, gd_run.norms, label="GD (η = 1)")
    axes[0, 2].set_xlabel("iteration")
    axes[0, 2].set_ylabel("‖p‖")
    axes[0, 2].legend(fontsize=7)
    figures.save(fig, "mm_fig2.png")


@claim(
    id="MM-FIG2",
    paper=PAPER,
    kind="experiment",
    provenance="[V] data, [N] results",
    statement="Figure 2 (three inputs, seven tokens: optimal token at (1, 0), three at (−1, 1), "
    "three at (−0.5, −0.5), plus N(0, 0.2²) noise; scores 1 vs 0.5): gradient descent from "
    "p(0) = 0 converges to the global direction p^mm(opt); normalized GD (lr 0.1) puts "
    "averaged softmax ≥ 0.999 on the optimal tokens by step 100 while GD with η = 1 is still "
    "below 0.99 there; ‖p‖ grows linearly under NGD and logarithmically under GD.",
    examples=20,
    figures=("mm_fig2.png",),
)
@given(seed=st.integers(0, 10_000))
@example(seed=0)
def test_figure2(seed):
    """Fig. 2: global convergence; NGD saturates the softmax by step 100, GD does not; ‖p‖ is
    linear under NGD and logarithmic under GD (spec §4)."""
    inst = figure2_instance(seed)
    evidence.instance(inst.to_json())
    p0 = torch.zeros(inst.d, dtype=DTYPE)
    out, transient = settle(inst.problem, p0)
    record_outcome(out, transient)
    check_limit(inst.problem, out, inst.alpha, "the global")
    ngd_run = ngd(inst.problem, p0, lr=LR, steps=PLOT_STEPS)
    gd_run = gd(inst.problem, p0, eta=1.0, steps=PLOT_STEPS)
    s_ngd, s_gd = _mean_opt_prob(inst, ngd_run.ps), _mean_opt_prob(inst, gd_run.ps)
    evidence.metric("NGD: averaged s_opt at step 100", s_ngd[100])
    evidence.metric("GD: averaged s_opt at step 100", s_gd[100])
    evidence.slack("1 − s_opt(NGD, 100) vs 1 − 0.999", 1 - s_ngd[100], 1 - FIG2_NGD_PROB_AT_100)
    assert s_ngd[100] >= FIG2_NGD_PROB_AT_100
    assert s_gd[100] < FIG2_GD_PROB_AT_100
    n_ngd, n_gd = ngd_run.norms, gd_run.norms
    evidence.metric("NGD ‖p_200‖ / (lr·200)", n_ngd[200] / (LR * 200))
    assert n_ngd[200] >= FIG2_NGD_LINEAR * LR * 200
    ratio = (n_gd[200] - n_gd[100]) / (n_gd[100] - n_gd[50])
    evidence.metric("GD ‖p‖ growth, steps 100→200 over 50→100", ratio)
    assert 0 < ratio <= FIG2_GD_DOUBLING_RATIO
    if seed == 0:
        for p in _inits(inst):
            out, transient = settle(inst.problem, p)
            check_limit(inst.problem, out, inst.alpha, f"init {p[:2].tolist()} → the global")
        _plot_figure2(inst, ngd_run, gd_run)


@claim(
    id="MM-FIG-LOSS-COMPARISON",
    paper=PAPER,
    kind="experiment",
    provenance="[V] data, [?] message, [N]",
    statement="Loss comparison (two inputs [(0, 0; 0), (1, 1; C)] and [(0, 0; 0), (1, −1; 1)], "
    "p(0) = 0): for every C ∈ {1, …, 10, 100} and both the correlation loss ℓ(x) = −x and the "
    "logistic loss, gradient descent converges in direction to p^mm = (1, 0); the loss and C "
    "bend only the transient path.",
    figures=("mm_loss_comparison.png",),
)
def test_loss_comparison():
    """The limit direction is p^mm = (1, 0) for every C and both losses (spec §4)."""
    fig, axes = figures.new(2, 1, width=4.6, height=4.2)
    colors = _palette(np.linspace(0.0, 0.9, len(LOSS_COMPARISON_C)))
    for ax, loss in zip(axes[0], ("correlation", "logistic"), strict=True):
        for C, color in zip(LOSS_COMPARISON_C, colors, strict=True):
            inst = loss_comparison_instance(C, loss)
            evidence.instance(inst.to_json())
            out, transient = settle(inst.problem, inst.p0)
            record_outcome(out, transient)
            check_limit(inst.problem, out, inst.alpha, f"C={C}, {loss}: the")
            assert one_minus_cos(out.p, inst.meta["p_mm"]) <= DIRECTION_TOL
            path = ngd(inst.problem, inst.p0, lr=LR, steps=PLOT_STEPS).ps.numpy()
            ax.plot(path[:, 0], path[:, 1], color=color, lw=1.0, label=f"C={C:g}")
            ax.plot(path[::MARK_EVERY, 0], path[::MARK_EVERY, 1], ".", ms=3, color=color)
        figures.direction_line(
            ax, inst.meta["p_mm"], color=figures.GLOBAL_COLOR, label="p^mm", length=20.0
        )
        ax.set_title(f"{loss} loss: NGD lr 0.1, 200 iterations", fontsize=9)
        ax.set_xlabel("p₁")
        ax.set_ylabel("p₂")
        ax.legend(fontsize=6, ncol=2)
    figures.save(fig, "mm_loss_comparison.png")
