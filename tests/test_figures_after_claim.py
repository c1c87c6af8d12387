"""Figures drawn in the process that ran their claim (theorems.framework.figures.draw_after_claim,
reports.hook.draw_claim), where the runs they read are cached; the report draws only what was
not drawn during the run (reports.hook.draw_figures with ``since``)."""

from __future__ import annotations

import json
import time
import types

import pytest

from reports import hook
from theorems.framework import figures


@pytest.fixture
def drawer(tmp_path, monkeypatch):
    """A drawer for the claim T-FIG that writes t_fig.png and counts its calls."""
    monkeypatch.setenv(figures.FIGURES_ENV, str(tmp_path / "figures"))
    calls = []

    def draw_t_fig():
        calls.append(1)
        fig, axes = figures.new()
        axes[0][0].plot([0, 1], [0, 1])
        figures.save(fig, "t_fig.png")

    monkeypatch.setitem(figures.DRAWERS, "T-FIG", draw_t_fig)
    monkeypatch.setitem(figures.DRAWERS, "T-FIG-TOO", draw_t_fig)  # two claims, one drawer
    monkeypatch.setattr(figures, "_DRAWN", set())
    monkeypatch.setattr(figures, "import_drawers", lambda *a, **k: [])
    return calls, tmp_path / "figures" / "t_fig.png"


def claims_json(tmp_path, *ids):
    doc = {
        "generated": "now",
        "claims": [{"id": i, "figures": ["t_fig.png"], "run": "now"} for i in ids],
    }
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_drawer_runs_once_per_process_after_its_claims(drawer):
    calls, png = drawer
    for claim_id in ("T-FIG", "T-FIG-TOO", "T-FIG", "T-NO-DRAWER"):
        hook.draw_claim(types.SimpleNamespace(id=claim_id, figures=("t_fig.png",)))
    assert len(calls) == 1 and png.read_bytes().startswith(b"\x89PNG")
    assert not list(png.parent.glob(".t_fig.png.*"))  # written whole, then renamed
    hook.draw_claim(types.SimpleNamespace(id="T-FIG", figures=()))  # a row without figures
    assert len(calls) == 1


def test_the_report_draws_only_what_the_run_did_not(drawer, tmp_path):
    calls, png = drawer
    started = time.time()
    hook.draw_claim(types.SimpleNamespace(id="T-FIG", figures=("t_fig.png",)))
    assert figures.fresh(["t_fig.png"], started)
    assert hook.draw_figures(claims_json(tmp_path, "T-FIG"), since=started) == {}
    assert len(calls) == 1  # drawn during the run: not again
    assert hook.draw_figures(claims_json(tmp_path, "T-FIG"), since=time.time() + 60) == {}
    assert len(calls) == 2  # older than the run: drawn again
    assert hook.draw_figures(claims_json(tmp_path, "T-FIG")) == {}
    assert len(calls) == 3  # no start known: everything is drawn
    assert not figures.fresh(["t_fig.png", "missing.png"], started)


def test_a_drawer_that_fails_after_its_claim_is_drawn_again_and_reported(drawer, tmp_path):
    calls, png = drawer

    def broken():
        raise RuntimeError("no data")

    figures.DRAWERS["T-FIG"] = broken
    started = time.time()
    assert figures.draw_after_claim("T-FIG") == "RuntimeError: no data"
    assert not png.exists()
    failed = hook.draw_figures(claims_json(tmp_path, "T-FIG"), since=started)
    assert failed == {"T-FIG": "RuntimeError: no data"}
