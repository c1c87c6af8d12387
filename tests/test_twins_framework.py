"""Metamorphic twins in the framework (theorems.framework.twins): an example decided again on
its instance restated; a conclusion that flips is an error naming the twin."""

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import PromptInstance
from strategies.prompt import global_opt_instances
from theorems.framework import evidence, registry, twins, verdicts
from theorems.framework.registry import claim


def _fixed():
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], [[0.2, 0.1], [0.3, -1.0], [1.0, 1.0]]])
    return PromptInstance(X, [1.0, 1.0], [1.0, 0.5], torch.eye(2), alpha=[0, 2], seed=7)


def _run(monkeypatch, k, body, instances=None):
    monkeypatch.setenv(twins.TWINS_ENV, str(k))
    with registry.isolated():

        @claim(id="T-TWIN", paper="p", kind="lemma", statement="s", provenance="[D]", examples=5)
        @given(inst=global_opt_instances(n=2, T=3) if instances is None else instances)
        def test_x(inst):
            body(inst)

        collector = evidence.Collector()
        exc = None
        with evidence.collecting(collector):
            try:
                test_x()
            except AssertionError as e:
                exc = e
        return collector, verdicts.judge(exc, collector, registry.REGISTRY["T-TWIN"])


def test_a_conclusion_that_hangs_on_a_convention_is_an_error_naming_the_twin(monkeypatch):
    """'Every label is +1' holds on the instance and not on its sign-flipped twin (y ↦ −y,
    X ↦ −X, the same problem): no statement about the problem concludes it. The control: an
    invariant conclusion on the same instance holds."""
    fixed = st.just(_fixed())
    _, (verdict, _, reason) = _run(monkeypatch, 1, lambda inst: None, fixed)
    assert verdict == "holds", reason

    def labels_positive(inst):
        assert bool((inst.y > 0).all()), "every label is +1"

    collector, (verdict, text, reason) = _run(monkeypatch, 1, labels_positive, fixed)
    assert verdict == "error", reason
    assert reason.startswith("metamorphic twin 'flip-labels-and-tokens' of inst disagrees")
    assert "holds on the instance and is refuted on its twin" in reason
    assert collector.twins_checked == 1


def test_an_invariant_conclusion_agrees_on_every_twin(monkeypatch):
    def invariant(inst):
        scores = np.sort(inst.scores.numpy(), axis=None)
        assert scores[-1] >= scores[0]
        assert inst.n == 2 and inst.T == 3

    collector, (verdict, _, reason) = _run(monkeypatch, 2, invariant)
    assert verdict == "holds", reason
    assert collector.twins_checked == 2 and not collector.twin_disagreements
    outcomes = {key.split(": ")[1] for key in collector.twins_run}
    assert outcomes == {"holds"} and len(collector.twins_run) >= 4


def test_off_by_default_and_a_bad_setting_is_a_clear_error(monkeypatch):
    monkeypatch.delenv(twins.TWINS_ENV, raising=False)
    assert twins.budget() == 0
    collector, (verdict, _, _) = _run(monkeypatch, 0, lambda inst: None)
    assert verdict == "holds" and collector.twins_checked == 0 and not collector.twins_run
    monkeypatch.setenv(twins.TWINS_ENV, "many")
    with pytest.raises(ValueError, match="ATTN_TWINS"):
        twins.budget()


def test_the_report_says_what_the_twins_ran(monkeypatch):
    """claims.json carries the twin runs and disagreements of a claim (merged over items)."""
    from theorems.framework.records import merge_records

    collector, _ = _run(monkeypatch, 1, lambda inst: None)
    base = {"item": "a", "id": "T", "paper": "p", "kind": "lemma", "statement": "s",
            "provenance": "[D]", "expected": "holds", "verdict": "holds", "reason": "",
            "budget": 5, "error": None, "figures": [], "note": "", "nodeid": "n",
            "module": "m", "line": 1, "replay": {}, "falsifying_example": None}  # fmt: skip
    (claim,) = merge_records([{**base, **collector.snapshot()}])
    assert claim["twins"]["examples"] == 1 and claim["twins"]["disagreements"] == []
    assert sum(claim["twins"]["runs"].values()) >= 4
