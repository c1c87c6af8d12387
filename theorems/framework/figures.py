"""Where and how claims draw their pictures: one place for the folder, backend and style.

Claims that illustrate a paper figure call ``save(fig, name)``; the file lands in
``reports/figures/`` (or ``$ATTN_FIGURES_DIR``) and the claim lists ``name`` in its
``figures=`` so the report shows the picture beside the claim.
"""

from __future__ import annotations

import os
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: CI and workers have no display

import matplotlib.pyplot as plt  # noqa: E402

from theorems.framework import REPO_ROOT

FIGURES_ENV = "ATTN_FIGURES_DIR"

# Colours of the paper's figures: global SVM red dashed, local SVM blue dashed.
GLOBAL_COLOR = "tab:red"
LOCAL_COLOR = "tab:blue"


def figures_dir() -> Path:
    """The folder figures are written to (created on demand)."""
    folder = Path(os.environ.get(FIGURES_ENV, REPO_ROOT / "reports" / "figures"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def new(ncols: int = 1, nrows: int = 1, *, width: float = 4.2, height: float = 3.6):
    """A figure with a grid of axes, sized per panel."""
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols, height * nrows), squeeze=False)
    return fig, axes


def save(fig, name: str) -> Path:
    """Write ``fig`` as reports/figures/<name> (PNG, 120 dpi) and close it."""
    if not name.endswith(".png"):
        raise ValueError(f"figure name must end in .png: {name!r}")
    path = figures_dir() / name
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def direction_line(ax, direction, *, color: str, label: str, length: float = 10.0) -> None:
    """A dashed ray from the origin along a 2-D direction (the paper's SVM lines)."""
    import numpy as np

    d = np.asarray(direction, dtype=float)[:2]
    d = d / np.linalg.norm(d)
    ax.plot([0, length * d[0]], [0, length * d[1]], "--", color=color, lw=1.5, label=label)
