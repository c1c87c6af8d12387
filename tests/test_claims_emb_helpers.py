"""Unit tests of the helpers that the 2505.17282 claims build on (theorems/embeddings/common.py)."""

from models.numerics import failures
from theorems.embeddings import common


def test_a_cached_flow_reports_its_failures_to_every_caller(monkeypatch):
    """run_flow is cached per instance; the failures its computation reported (a flow left
    undecided) must reach every claim that uses the run, not only the first one: otherwise a
    verdict would depend on which claim traced the instance first (xdist order)."""
    traced = []

    def fake_trace(inst, target, select_tol):
        traced.append(inst)
        failures.report(failures.GRADIENT_FLOW, "undecided", "budget used up")
        return "the run"

    monkeypatch.setattr(common, "_trace", fake_trace)
    monkeypatch.setattr(common, "_digest", lambda inst: f"digest of {inst}")
    monkeypatch.setattr(common, "_FLOWS", type(common._FLOWS)())
    seen = []
    for _ in range(3):
        with failures.watch() as w:
            assert common.run_flow("instance") == "the run"
        seen.append([str(f) for f in w.failures])
    assert len(traced) == 1  # computed once
    assert seen == [["gradient flow: undecided (budget used up)"]] * 3
    with failures.watch() as w, failures.tolerate(failures.GRADIENT_FLOW):
        common.run_flow("instance")
    assert not w.failures and [f.what for f in w.tolerated] == ["undecided"]
