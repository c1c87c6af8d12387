"""Render the human report after every claims run (see `register`)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from reports.build import build
from theorems.framework import figures, plugin

#: When this process registered the hooks (pytest_configure: before any claim ran). A figure
#: written since was drawn by this run, in the process that ran its claim (``draw_claim``).
_STARTED: float | None = None


def draw_figures(claims_json: Path, since: float | None = None) -> dict[str, str]:
    """Draw the figures of the claims this run judged (those whose row lists figures and whose
    paper registers a drawer, theorems.framework.figures) that were not drawn since ``since``
    (all of them when None); return {id or module: why not}."""
    doc = json.loads(Path(claims_json).read_text(encoding="utf-8"))
    ran = [
        c["id"]
        for c in doc.get("claims", [])
        if c.get("figures")
        and c.get("run") == doc.get("generated")
        and not (since is not None and figures.fresh(c["figures"], since))
    ]
    return figures.draw(ran) if ran else {}


def draw_claim(info) -> None:
    """After a claim with figures ran, draw them in its process (see figures.draw_after_claim);
    one that fails is drawn again, and its failure reported, by `render`."""
    if info.figures:
        figures.draw_after_claim(info.id)


def render(claims_json: Path) -> None:
    """Draw this run's figures, then write index.html and claims.md beside the claims.json the
    plugin just wrote. A figure that cannot be drawn is said on stderr and shows as missing in
    the report; it changes no verdict."""
    for what, why in draw_figures(claims_json, since=_STARTED).items():
        print(f"attention-theorems: figure of {what} not drawn: {why}", file=sys.stderr)
    build(claims_json, claims_json.parent)


def register() -> None:
    """Have the claims plugin call `draw_claim` after each claim and `render` after it writes
    claims.json. Named functions, not lambdas, so that registering again (a second configure
    in one process) is a no-op."""
    global _STARTED
    if _STARTED is None:
        _STARTED = time.time()
    plugin.after_claim(draw_claim)
    plugin.after_report(render)
