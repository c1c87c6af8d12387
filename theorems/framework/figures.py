"""Where and how the report draws its pictures: one place for the folder, backend and style.

Figures belong to the report, not to claim bodies. A paper's ``plots*.py`` module registers
a function per claim with ``@draws("MM-FIG2")``; the function draws the paper's figure and
writes it with ``save(fig, name)`` into ``reports/figures/`` (or ``$ATTN_FIGURES_DIR``). The
claim's row lists ``name`` under ``figures``, and after every run the report calls `draw` for
the claims that ran, so the picture sits beside the claim.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import tempfile
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
    # Written whole, then renamed: two xdist workers may draw the same figure (two claims of
    # one drawer), and the report must never read a half-written PNG.
    handle, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".png", dir=path.parent)
    try:
        with os.fdopen(handle, "wb") as out:
            fig.savefig(out, dpi=120, format="png")
        os.replace(tmp, path)
    finally:
        plt.close(fig)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
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


def _draw(claim_id: str) -> str | None:
    """Run the drawer of ``claim_id`` (if it has one): None, or why it failed."""
    drawer = DRAWERS.get(claim_id)
    if drawer is None:
        return None
    try:
        drawer()
    except Exception as exc:
        return traceback.format_exception_only(type(exc), exc)[-1].strip()
    finally:
        plt.close("all")
    return None


def draw(claim_ids: Iterable[str]) -> dict[str, str]:
    """Draw the figures of ``claim_ids`` (those with a drawer); return {id: why not} for the
    drawers that failed, and for the modules of drawers that could not be imported."""
    failed = {module: reason for module, reason in import_drawers()}
    for claim_id in claim_ids:
        if (why := _draw(claim_id)) is not None:
            failed[claim_id] = why
    return failed


#: Drawers already run in this process (``draw_after_claim``): several claims share one.
_DRAWN: set[Callable[[], object]] = set()


def draw_after_claim(claim_id: str) -> str | None:
    """Draw the figures of ``claim_id`` in the process that just ran it (an xdist worker, or a
    serial run), where the runs its drawer reads are still cached (theorems.framework.memo):
    at the end of the run the report's process has none of them, and drew the same figures
    in 43 s of its own, after the claims. Each drawer runs once per process. Returns why it
    failed, or None; the report then draws again whatever is not fresh (``fresh``)."""
    if not DRAWERS:
        import_drawers()
    drawer = DRAWERS.get(claim_id)
    if drawer is None or drawer in _DRAWN:
        return None
    _DRAWN.add(drawer)
    return _draw(claim_id)


def fresh(names: Iterable[str], since: float) -> bool:
    """Whether every figure in ``names`` was written at or after ``since`` (a time.time())."""
    folder = figures_dir()
    try:
        return all((folder / name).stat().st_mtime >= since for name in names)
    except FileNotFoundError:
        return False
