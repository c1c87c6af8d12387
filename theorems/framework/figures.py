"""Where and how the report draws its pictures: one place for the folder, backend and style.

Figures belong to the report, not to claim bodies. A paper's ``plots*.py`` module registers
a function per claim with ``@draws("MM-FIG2")``; the function draws the paper's figure and
writes it with ``save(fig, name)`` into ``reports/figures/`` (or ``$ATTN_FIGURES_DIR``). The
claim's row lists ``name`` under ``figures``, and after every run the report calls `draw` for
the claims that ran, so the picture sits beside the claim.
"""

from __future__ import annotations

import importlib
import os
import traceback
from collections.abc import Callable, Iterable
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # headless: CI and workers have no display

import matplotlib.pyplot as plt  # noqa: E402

from theorems.framework import REPO_ROOT  # noqa: E402

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


# --------------------------------------------------------------------------- drawers

#: claim id -> the function that draws its figures (registered by ``draws``).
DRAWERS: dict[str, Callable[[], object]] = {}


def draws(claim_id: str) -> Callable[[Callable[[], object]], Callable[[], object]]:
    """Register the decorated function (no arguments) as the one that draws the figures of
    ``claim_id``; it writes each with ``save``."""

    def register(fn: Callable[[], object]) -> Callable[[], object]:
        DRAWERS[claim_id] = fn
        return fn

    return register


def import_drawers(root: Path = REPO_ROOT) -> list[tuple[str, str]]:
    """Import every plots*.py of the papers' packages under theorems/ (they register their
    drawers); return the modules that failed to import as (module, one-line reason)."""
    failed = []
    folder = root / "theorems"
    for path in sorted(folder.glob("*/plots*.py")):
        name = ".".join(("theorems", *path.relative_to(folder).with_suffix("").parts))
        try:
            importlib.import_module(name)
        except Exception as exc:
            failed.append((name, traceback.format_exception_only(type(exc), exc)[-1].strip()))
    return failed


def draw(claim_ids: Iterable[str]) -> dict[str, str]:
    """Draw the figures of ``claim_ids`` (those with a drawer); return {id: why not} for the
    drawers that failed, and for the modules of drawers that could not be imported."""
    failed = {module: reason for module, reason in import_drawers()}
    for claim_id in claim_ids:
        drawer = DRAWERS.get(claim_id)
        if drawer is None:
            continue
        try:
            drawer()
        except Exception as exc:
            failed[claim_id] = traceback.format_exception_only(type(exc), exc)[-1].strip()
        finally:
            plt.close("all")
    return failed
