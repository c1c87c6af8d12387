"""The figures of the mirror-descent claims (reports/figures/): each claim that draws one
computes its evidence and calls the function here."""

from __future__ import annotations

import numpy as np

from theorems.framework import figures

#: One colour per SVM exponent q, the same in every panel.
Q_COLORS = {1.5: "tab:purple", 1.75: "tab:red", 2.0: "tab:green", 3.0: "tab:blue"}


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
