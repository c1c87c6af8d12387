"""The figures of the static SVM claims of 2308.16898 (reports/figures/), drawn by the report
for the claims that ran (``figures.draws``): TF-EXP-SVM-RANK's ranks and spectra."""

from __future__ import annotations

import numpy as np

from models.oracles.normsvm import RANK_REL
from theorems.framework import figures
from theorems.framework.figures import draws
from theorems.tfsvm.common_svm import SVM_RANK_DIMS, SVM_RANK_NT, svm_rank_cell

#: How many instances' spectra the right panel shows (the first feasible draws at the largest d).
SPECTRA_SHOWN = 3


def spectra(cells: list[dict], n: int, name: str) -> None:
    """Left: mean relative ranks of W^mm and W^mm_⋆ against d, with min(n, d) and the official
    recipe's Frobenius mean (infeasible draws as rank 1, absolute 1e-7 rank). Right: the
    singular values σ_k/σ_1 of W^mm (solid) and W^mm_⋆ (dashed) on a few draws at the largest d,
    with the relative rank threshold."""
    import matplotlib

    fig, axes = figures.new(2, 1, width=4.6, height=3.8)
    ax = axes[0, 0]
    ds = np.array([c["d"] for c in cells])
    mean = {k: [np.mean(c[k]) if c[k] else np.nan for c in cells] for k in ("fro", "nuc")}
    ax.plot(ds, np.minimum(n, ds), ":", color="0.5", label="min(n, d)")
    ax.plot(ds, mean["fro"], "o-", color=figures.GLOBAL_COLOR, label="Frobenius W^mm")
    ax.plot(ds, mean["nuc"], "s--", color=figures.LOCAL_COLOR, label="nuclear W^mm_⋆")
    official = [c["official_fro_mean"] for c in cells]
    ax.plot(ds, official, "x", color="0.3", label="official recipe (infeasible → 1)")
    ax.set_xlabel("d")
    ax.set_ylabel("mean rank (σ_k > 1e-6 σ_1)")
    ax.set_title(f"svm_rank, n = {n}, T = 5: feasible draws only", fontsize=9)
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    last = cells[-1]
    colors = matplotlib.colormaps["viridis"](np.linspace(0.0, 0.8, SPECTRA_SHOWN))
    for (fro, nuc), color in zip(last["spectra"][:SPECTRA_SHOWN], colors, strict=False):
        k = np.arange(1, len(fro) + 1)
        floor = np.finfo(float).tiny
        ax.semilogy(k, np.maximum(fro / fro[0], floor), "o-", color=color, ms=3)
        ax.semilogy(k, np.maximum(nuc / nuc[0], floor), "s--", color=color, ms=3)
    ax.axhline(RANK_REL, color="0.5", lw=0.8, ls=":", label="rank threshold 1e-6")
    ax.plot([], [], "o-", color="0.3", label="W^mm (Frobenius)")
    ax.plot([], [], "s--", color="0.3", label="W^mm_⋆ (nuclear)")
    ax.set_ylim(1e-18, 2.0)
    ax.set_xlabel("k")
    ax.set_ylabel("σ_k / σ_1")
    ax.set_title(f"singular values at d = {last['d']} ({SPECTRA_SHOWN} draws)", fontsize=9)
    ax.legend(fontsize=7, loc="lower left")
    figures.save(fig, name)


@draws("TF-EXP-SVM-RANK")
def draw_svm_rank() -> None:
    """The svm_rank grid's ranks and spectra (the cells the claim checked, cached)."""
    spectra([svm_rank_cell(d) for d in SVM_RANK_DIMS], SVM_RANK_NT[0], "tf_svm_spectra.png")
