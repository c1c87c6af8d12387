"""The figures of the 2306.13596 claims (reports/figures/): the report calls the drawer each
claim registers here (``@draws("ID")``, at the end of the module) after a run; a drawer
recomputes the paper's own instance and its runs and calls the function that draws them."""

from __future__ import annotations

import numpy as np
import torch

from models.flows.dynamics import ngd
from models.oracles.svm import att_svm
from strategies import (
    figure1_instance,
    figure2_instance,
    figure3_instance,
    loss_comparison_instance,
)
from strategies.prompt import LOSS_COMPARISON_C
from theorems.framework import figures
from theorems.framework.figures import draws
from theorems.maxmargin.common import (
    LR,
    MARK_EVERY,
    PLOT_STEPS,
    figure2_runs,
    figure3_run,
    inits,
    mean_opt_prob,
    reg_paths,
)

DTYPE = torch.float64


def _palette(x: np.ndarray):
    """Viridis colours at x ∈ [0, 1] (paths: red and blue are the SVM directions')."""
    import matplotlib

    return matplotlib.colormaps["viridis"](x)


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
        _arrows(ax, path, colors[j], _init_label(p0))
    for i in range(keys.shape[0]):
        ax.scatter(keys[i, :, 0], keys[i, :, 1], s=18, color="0.3", zorder=3)
        if keys.shape[0] == 1:
            for t in range(keys.shape[1]):
                ax.annotate(f"γ={scores[i, t]:g}", keys[i, t, :2], fontsize=7, color="0.3")
    ax.set_xlabel("p₁")
    ax.set_ylabel("p₂")
    ax.set_aspect("equal", adjustable="datalim")
    return reach


def figure1(inst, panel: str, name: str) -> None:
    fig, axes = figures.new(1, 1, width=5.0, height=4.6)
    ax = axes[0, 0]
    reach = _draw_paths(ax, inst, inits(inst))
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


def figure2(inst, ngd_run, gd_run) -> None:
    fig, axes = figures.new(3, 1, width=4.2, height=3.8)
    ax = axes[0, 0]
    reach = _draw_paths(ax, inst, inits(inst))
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
    axes[0, 1].plot(steps, mean_opt_prob(inst, ngd_run.ps), label="NGD (lr 0.1)")
    axes[0, 1].plot(steps, mean_opt_prob(inst, gd_run.ps), label="GD (η = 1)")
    axes[0, 1].set_xlabel("iteration")
    axes[0, 1].set_ylabel("softmax probability of optimal tokens")
    axes[0, 1].legend(fontsize=7)
    axes[0, 2].plot(steps, ngd_run.norms, label="NGD (lr 0.1)")
    axes[0, 2].plot(steps, gd_run.norms, label="GD (η = 1)")
    axes[0, 2].set_xlabel("iteration")
    axes[0, 2].set_ylabel("‖p‖")
    axes[0, 2].legend(fontsize=7)
    figures.save(fig, "mm_fig2.png")


def _arrows(ax, path: np.ndarray, color, label: str) -> None:
    """A path with an arrow every MARK_EVERY steps and its start marked."""
    ax.plot(path[:, 0], path[:, 1], lw=1.0, color=color, label=label)
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
        color=color,
    )
    ax.plot(path[0, 0], path[0, 1], "o", ms=4, color=color)


def joint_paths(inst, svms, run, name: str, title: str) -> None:
    import matplotlib

    colors = matplotlib.colormaps["viridis"]([0.05, 0.55])
    fig, axes = figures.new(1, 1, width=5.0, height=4.6)
    ax = axes[0, 0]
    vs, ps = run.vs[: PLOT_STEPS + 1].numpy(), run.ps[: PLOT_STEPS + 1].numpy()
    _arrows(ax, vs, colors[0], "v (head)")
    _arrows(ax, ps, colors[1], "p (attention)")
    reach = float(max(np.linalg.norm(vs, axis=1).max(), np.linalg.norm(ps, axis=1).max()))
    figures.direction_line(ax, svms.v_mm.x, color="k", label="v^mm", length=reach)
    if svms.tight:
        figures.direction_line(
            ax, svms.p_full.x, color=figures.GLOBAL_COLOR, label="p^mm", length=reach
        )
    else:
        figures.direction_line(
            ax, svms.p_relax.x, color=figures.GLOBAL_COLOR, label="p^relax", length=reach
        )
        figures.direction_line(ax, svms.p_full.x, color="0.55", label="p^full", length=reach)
    x = inst.X[:, 1].numpy()
    ax.scatter(x[:, 0], x[:, 1], s=18, color="0.3", zorder=3)
    for i, (xi, yi) in enumerate(zip(x, inst.y.tolist(), strict=True)):
        ax.annotate(
            f"x{i + 1} (y={yi:+g})",
            xi,
            xytext=(4, 6 - 9 * i),
            textcoords="offset points",
            fontsize=7,
            color="0.3",
        )
    ax.set_xlabel("coordinate 1")
    ax.set_ylabel("coordinate 2")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=6, loc="best")
    figures.save(fig, name)


def joint_probabilities(run, name: str) -> None:
    fig, axes = figures.new(1, 1, width=5.0, height=3.4)
    ax = axes[0, 0]
    steps = run.steps[: PLOT_STEPS + 1]
    ax.plot(steps, run.attention_mass[: PLOT_STEPS + 1], label="softmax prob. of optimal tokens")
    ax.plot(steps, run.output_prob[: PLOT_STEPS + 1], "--", label="logistic prob. of the output")
    ax.set_xlabel("iteration")
    ax.set_ylabel("averaged probability")
    ax.set_ylim(0.0, 1.05)
    ax.set_title("Figure 3(c): run of panel (a)", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    figures.save(fig, name)


def reg_path(path, caps, glob, local) -> None:
    import matplotlib

    fig, axes = figures.new(1, 1, width=4.8, height=4.6)
    ax = axes[0, 0]
    theta = np.linspace(0, 2 * np.pi, 400)
    ax.plot(np.cos(theta), np.sin(theta), color="0.8", lw=0.8)
    colors = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.9, len(path)))
    for pt, color in zip(path, colors, strict=True):
        u = pt.p.numpy() / pt.R
        ax.plot(u[0], u[1], "o", ms=5, color=color, label=f"p_R/R, R = {pt.R:g}")
    for pt in caps:
        u = pt.p.numpy() / pt.R
        ax.plot(u[0], u[1], "x", ms=5, color=figures.LOCAL_COLOR)
    ax.plot([], [], "x", color=figures.LOCAL_COLOR, label="cap path (α = token (1, 0)), R ≥ 10")
    figures.direction_line(ax, glob.x, color=figures.GLOBAL_COLOR, label="global p^mm", length=1.15)
    figures.direction_line(ax, local.x, color=figures.LOCAL_COLOR, label="local p^mm", length=1.15)
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_xlabel("p₁ / R")
    ax.set_ylabel("p₂ / R")
    ax.set_title("Theorem RP: regularization path on Fig. 1(b) keys", fontsize=9)
    ax.legend(fontsize=6, loc="lower left")
    figures.save(fig, "mm_regpath_fig1b.png")


def _init_label(p0) -> str:
    return f"p(0) = ({float(p0[0]):g}, {float(p0[1]):g})"


def loss_comparison(losses, Cs, name: str) -> None:
    """NGD paths (lr 0.1, 200 iterations) of the loss-comparison instance for each C, one
    panel per loss, with p^mm dashed."""
    fig, axes = figures.new(len(losses), 1, width=4.6, height=4.2)
    colors = _palette(np.linspace(0.0, 0.9, len(Cs)))
    for ax, loss in zip(axes[0], losses, strict=True):
        for C, color in zip(Cs, colors, strict=True):
            inst = loss_comparison_instance(C, loss)
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
    figures.save(fig, name)


# ---- the drawers ---------------------------------------------------------------------------------


@draws("MM-FIG1A")
def draw_figure1a() -> None:
    figure1(figure1_instance("a"), "a", "mm_fig1a.png")


@draws("MM-FIG1B")
def draw_figure1b() -> None:
    figure1(figure1_instance("b"), "b", "mm_fig1b.png")


@draws("MM-FIG2")
def draw_figure2() -> None:
    """The paper's own noise draw (seed 0)."""
    inst = figure2_instance(0)
    runs = figure2_runs(inst)
    figure2(inst, runs.ngd, runs.gd)


@draws("MM-FIG-LOSS-COMPARISON")
def draw_loss_comparison() -> None:
    loss_comparison(("correlation", "logistic"), LOSS_COMPARISON_C, "mm_loss_comparison.png")


@draws("MM-FIG3-TIGHT")
def draw_figure3_tight() -> None:
    inst = figure3_instance(tight=True)
    svms, run = figure3_run(inst)
    joint_paths(inst, svms, run, "mm_fig3a_joint_tight.png", "Figure 3(a): tight, joint NGD")
    joint_probabilities(run, "mm_fig3c_probabilities.png")


@draws("MM-FIG3-NONTIGHT")
def draw_figure3_nontight() -> None:
    inst = figure3_instance(tight=False)
    svms, run = figure3_run(inst)
    title = "Figure 3(b): non-tight, joint NGD"
    joint_paths(inst, svms, run, "mm_fig3b_joint_nontight.png", title)


@draws("MM-RP-PICTURE")
def draw_reg_path() -> None:
    rp = reg_paths(figure1_instance("b", alpha=1))
    reg_path(rp.path, rp.caps, rp.glob, rp.local)
