"""Render the human report after every claims run (see `register`)."""

from __future__ import annotations

from pathlib import Path

from reports.build import build
from theorems.framework import plugin


def render(claims_json: Path) -> None:
    """Write index.html and claims.md beside the claims.json the plugin just wrote."""
    build(claims_json, claims_json.parent)


def register() -> None:
    """Have the claims plugin call `render` after it writes claims.json. A named function, not a
    lambda, so that registering again (a second configure in one process) is a no-op."""
    plugin.after_report(render)
