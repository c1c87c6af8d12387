"""The figures of the W-dynamics claims of 2308.16898 (reports/figures/): a drawer per claim
(``figures.draws``), which the report calls after a run, computes what its figure shows and
calls the plotting function here."""

from __future__ import annotations

import numpy as np

from theorems.framework import figures
from theorems.framework.figures import draws
from theorems.tfsvm.common_wgd import OPGLOB_DS, opglob_fractions


def overparameterization(ds, fractions, decided, name: str) -> None:
    """Spec §2.5: the fraction of gradient flows from W(0) = 0 that select the globally
    optimal token on every input, against d (log axis), with a binomial standard error; each
    point is labelled global selections / decided flows."""
    fig, axes = figures.new(1, 1, width=5.0, height=3.6)
    ax = axes[0, 0]
    ds = np.asarray(ds, dtype=float)
    f = np.asarray(fractions, dtype=float)
    m = np.maximum(np.asarray(decided, dtype=float), 1.0)
    err = np.sqrt(np.clip(f * (1 - f), 0.0, None) / m)
    ax.errorbar(ds, f, yerr=err, marker="o", color=figures.GLOBAL_COLOR, capsize=3)
    for x, y, k in zip(ds, f, decided, strict=True):
        label = f"{round(y * k)}/{k}" if np.isfinite(y) else f"0/{k}"
        ax.annotate(label, (x, y), textcoords="offset points", xytext=(4, -12), fontsize=7)
    ax.set_xscale("log", base=2)
    ax.set_xticks(ds)
    ax.set_xticklabels([f"{int(d)}" for d in ds])
    ax.set_ylim(-0.05, 1.05)
    ax.set_xlabel("d (token dimension)")
    ax.set_ylabel("fraction selecting opt on every input")
    ax.set_title("Over-parameterization (n = 6, T = 8): gradient flow from W(0) = 0", fontsize=9)
    ax.grid(alpha=0.3)
    figures.save(fig, name)


@draws("TF-OPGLOB-FREQ")
def draw_overparameterization() -> None:
    """TF-OPGLOB-FREQ's curve: the fractions the claim compares, at every d."""
    fractions, decided = opglob_fractions()
    overparameterization(OPGLOB_DS, fractions, decided, "tf_overparam.png")
