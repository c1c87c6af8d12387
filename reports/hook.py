"""Render the human report after every claims run (see `register`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from reports.build import build
from theorems.framework import figures, plugin


def draw_figures(claims_json: Path) -> dict[str, str]:
    """Draw the figures of the claims this run judged (those whose row lists figures and whose
    paper registers a drawer, theorems.framework.figures); return {id or module: why not}."""
    doc = json.loads(Path(claims_json).read_text(encoding="utf-8"))
    ran = [
        c["id"]
        for c in doc.get("claims", [])
        if c.get("figures") and c.get("run") == doc.get("generated")
    ]
    return figures.draw(ran) if ran else {}


def render(claims_json: Path) -> None:
    """Draw this run's figures, then write index.html and claims.md beside the claims.json the
    plugin just wrote. A figure that cannot be drawn is said on stderr and shows as missing in
    the report; it changes no verdict."""
    for what, why in draw_figures(claims_json).items():
        print(f"attention-theorems: figure of {what} not drawn: {why}", file=sys.stderr)
    build(claims_json, claims_json.parent)


def register() -> None:
    """Have the claims plugin call `render` after it writes claims.json. A named function, not a
    lambda, so that registering again (a second configure in one process) is a no-op."""
    plugin.after_report(render)
