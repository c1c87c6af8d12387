"""The figures of the (K, Q) claims of 2308.16898 (claims_kq), drawn as the official notebooks
draw them: ``local_converge.ipynb``'s mean correlation curves and ``visualization{1,2}.ipynb``'s
paths of W(k)z_i against the SVM rays (reports/figures/); the report draws them for the claims
that ran (``figures.draws``), from the runs the claims checked (cached in common_kq)."""

from __future__ import annotations

import numpy as np

from theorems.framework import figures
from theorems.framework.figures import draws
from theorems.tfsvm.common_kq import local_converge_runs, visualization_runs

#: Colour and line style per curve: blue for W runs, red for (K, Q) runs (the notebook's);
#: solid against the Frobenius SVM, dashed against the nuclear SVM.
_STYLE = {
    "W→Fro": ("tab:blue", "-", "W vs W^mm"),
    "W→Nuc": ("tab:blue", "--", "W vs W^mm_⋆"),
    "KQ→Fro": ("tab:red", "-", "KQᵀ vs W^mm"),
    "KQ→Nuc": ("tab:red", "--", "KQᵀ vs W^mm_⋆"),
}
#: The input colours of the visualization notebooks (paths and SVM rays of input i).
_INPUT_COLORS = ("tab:red", "tab:blue")
_TOKEN_COLORS = ("c", "y")


def local_converge(mean_curves: dict[str, np.ndarray], name: str) -> None:
    """Mean corr of every iterate with W^mm(α̂) and W^mm_⋆(α̂), for W-NGD and (K, Q)-NGD: the
    four curves of the notebook's correlation panels in one plot."""
    fig, axes = figures.new(1, 1, width=6.0, height=4.2)
    ax = axes[0, 0]
    for key, curve in mean_curves.items():
        color, style, label = _STYLE[key]
        ax.plot(np.arange(len(curve)), curve, style, color=color, lw=2, label=label)
    ax.set_xlabel("iteration")
    ax.set_ylabel("mean correlation coefficient")
    ax.set_ylim(0.0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    ax.set_title("Local convergence (n=6, T=8, d=10; 12 seeds; λ = ε for (K, Q))", fontsize=9)
    figures.save(fig, name)


def visualization(panels: list[dict], name: str) -> None:
    """One panel per instance: the tokens (stars: the optimal ones), the rays W^mm z_i (solid)
    and W^mm_⋆ z_i (dashed), and the paths W(k) z_i of W-NGD (solid) and (K, Q)-NGD (dashed)."""
    fig, axes = figures.new(len(panels), 1, width=4.8, height=4.6)
    for ax, panel in zip(axes[0], panels, strict=True):
        inst = panel["inst"]
        X, Z = inst.X.numpy(), inst.Z.numpy()
        reach = 0.0
        for i in range(inst.n):
            color = _INPUT_COLORS[i % 2]
            for key, style in (("W", "-"), ("KQ", "--")):
                path = panel[key] @ Z[i]
                reach = max(reach, float(np.abs(path).max()))
                ax.plot(path[:, 0], path[:, 1], style, color=color, lw=1.5, alpha=0.8)
        for i in range(inst.n):
            color = _INPUT_COLORS[i % 2]
            for key, style in (("fro", "-"), ("nuc", "--")):
                ray = panel[key].W @ Z[i]
                ray = ray / np.linalg.norm(ray) * reach
                ax.plot([0, ray[0]], [0, ray[1]], style, color=color, lw=0.8, alpha=0.5)
            for t in range(inst.T):
                star = t == int(inst.alpha[i])
                ax.scatter(
                    X[i, t, 0],
                    X[i, t, 1],
                    marker="*" if star else "o",
                    s=120 if star else 40,
                    color=_TOKEN_COLORS[i % 2],
                    edgecolors="black",
                    zorder=3,
                )
        ax.plot([], [], "-", color="0.3", label="W-NGD path / W^mm z_i")
        ax.plot([], [], "--", color="0.3", label="(K, Q) path / W^mm_⋆ z_i")
        ax.set_title(f"{inst.meta['notebook']}: W(k) z_i, 2000 iterations", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="upper left")
    figures.save(fig, name)


@draws("TF-EXP-LOCAL-KQ")
def draw_local_converge() -> None:
    """The mean correlation curves of the local-convergence runs."""
    local_converge(local_converge_runs().curves, "tf_local_converge.png")


@draws("TF-EXP-VIS2")
def draw_visualization() -> None:
    """Both visualization notebooks' paths against the SVM rays."""
    visualization([visualization_runs(1), visualization_runs(2)], "tf_visualization.png")
