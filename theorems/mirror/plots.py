"""The figures of the mirror-descent claims (reports/figures/): the report calls each claim's
drawer (``figures.draws``) after a run; the drawer computes what it needs (the claim's own runs,
cached in ``common``) and calls the plot function here."""

from __future__ import annotations

import numpy as np

from theorems.framework import figures
from theorems.framework.figures import draws
from theorems.mirror.common import PS, experiment_runs, svm

#: One colour per SVM exponent q, the same in every panel.
Q_COLORS = {1.5: "tab:purple", 1.75: "tab:red", 2.0: "tab:green", 3.0: "tab:blue"}
#: MD-EXP-LOCAL: points per curve of md_bregman.png (the runs are recorded every 10 steps).
FIGURE_POINTS = 200


def bregman_figure(steps: dict, curves: dict, name: str) -> None:
    """Fig. 4 of 2410.14581 with its cross-comparison: one panel per MD exponent p, the mean
    directional Bregman divergence D_ψp(Ŵ^mm(ℓq), Ŵ_k) against the iteration k for each SVM
    exponent q (the own-p curve solid, the others dashed), log scale."""
    ps = sorted({p for p, _ in curves})
    fig, axes = figures.new(len(ps), 1, width=4.2, height=3.6)
    for ax, p in zip(axes[0], ps, strict=True):
        for q in sorted({q for _, q in curves}):
            curve = np.maximum(np.asarray(curves[p, q]), 1e-12)
            style = "-" if q == p else "--"
            ax.plot(
                steps[p], curve, style, color=Q_COLORS.get(q, "0.4"), lw=1.4, label=f"ℓ{q:g}-SVM"
            )
        ax.set_yscale("log")
        ax.set_xlabel("iteration")
        ax.set_ylabel("mean directional Bregman divergence")
        ax.set_title(f"ℓ{p:g}-MD (ψ = ‖·‖^p/p, p = {p:g}) vs each ℓq-SVM", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    figures.save(fig, name)


@draws("MD-EXP-LOCAL")
def draw_md_bregman() -> None:
    """md_bregman.png: Fig. 4 with the 3×3 cross-comparison, the mean over the experiment's seeds
    of D_ψp(Ŵ^mm_α̂(ℓq), Ŵ_k) for every MD exponent p and SVM exponent q."""
    curves = {(p, q): [] for p in PS for q in PS}
    steps = {}
    for (_, p), result in experiment_runs().items():
        stride = max(1, len(result.run.steps) // FIGURE_POINTS)
        for q in PS:
            curves[p, q].append(result.bregman(svm(result.inst, result.alpha, "lp", q).W, stride))
        steps[p] = result.record_steps(stride)
    bregman_figure(steps, {k: np.mean(v, axis=0) for k, v in curves.items()}, "md_bregman.png")
