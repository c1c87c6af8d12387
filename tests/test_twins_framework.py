"""Metamorphic twins in the framework (theorems.framework.twins): an example decided again on
its instance restated; a conclusion that flips is an error naming the twin."""

from pathlib import Path

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


def _run(monkeypatch, k, body, instances=None, declared=None):
    monkeypatch.setenv(twins.TWINS_ENV, str(k))
    with registry.isolated():

        @claim(id="T-TWIN", paper="p", kind="lemma", statement="s", provenance="[D]", examples=5,
               twins=declared)  # fmt: skip
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


def test_a_counterexample_that_holds_on_a_twin_is_fragile_not_a_refutation(monkeypatch):
    """'Some label is −1' fails on the instance (every label +1) and holds on its sign-flipped
    twin, the same problem restated: the counterexample refutes only in one representation,
    so the claim is inconclusive, naming the twin, with ATTN_TWINS off (issue 21)."""
    fixed = st.just(_fixed())

    def some_label_negative(inst):
        assert not bool((inst.y > 0).all()), "some label is -1"

    declared = ("permute-inputs", "flip-labels-and-tokens")  # the statement's invariances
    collector, (verdict, _, reason) = _run(monkeypatch, 0, some_label_negative, fixed, declared)
    assert verdict == "inconclusive", reason
    assert reason.startswith("fragile counterexample: refuted on the instance")
    assert "flip-labels-and-tokens" in reason
    assert collector.robustness["twins"] == {
        "permute-inputs": "refuted",
        "flip-labels-and-tokens": "holds",
    }
    assert collector.snapshot()["robustness"] == collector.robustness


def test_holding_on_a_twin_the_claim_does_not_declare_is_no_fragility(monkeypatch):
    """Without twins=..., a statement is taken to be invariant only under changes of the
    embedding's coordinates: a conjecture about labels (or "the first token") that holds on
    the sign-flipped twin stays refuted, and the reason names that twin."""
    fixed = st.just(_fixed())

    def some_label_negative(inst):
        assert not bool((inst.y > 0).all()), "some label is -1"

    collector, (verdict, _, reason) = _run(monkeypatch, 0, some_label_negative, fixed)
    assert verdict == "refuted", reason
    assert collector.robustness["holds_on"] == []
    assert collector.robustness["undeclared_holds"] == ["flip-labels-and-tokens"]
    assert "it holds on flip-labels-and-tokens, which the claim does not declare" in reason
    assert collector.robustness["twins"]["rotate-embedding"] == "refuted"


def test_a_robust_counterexample_refutes_on_every_twin_and_only_it_is_replayed(monkeypatch):
    """A counterexample that every twin refutes is a refutation; only the example Hypothesis
    reports (the shrunk one, replayed last) is decided on its twins, not the shrinker's."""
    built = []
    original = twins._instance_argument

    def counting(kwargs, given):
        built.append(kwargs)
        return original(kwargs, given)

    monkeypatch.setattr(twins, "_instance_argument", counting)
    calls = []

    def wrong(inst):
        calls.append(inst)
        assert inst.n != 2, "no instance has two inputs"

    collector, (verdict, _, reason) = _run(monkeypatch, 0, wrong)
    assert verdict == "refuted", reason
    outcomes = collector.robustness["twins"]
    assert len(outcomes) >= 4 and set(outcomes.values()) == {"refuted"}
    assert collector.robustness["holds_on"] == []
    assert f"refuted on {len(outcomes)} of its {len(outcomes)} twins too" in reason
    assert len(built) == 1 and len(calls) > 1 + len(outcomes)  # the shrinker ran too


def test_a_claim_without_twins_refutes_as_before_and_says_so(monkeypatch):
    monkeypatch.setenv(twins.TWINS_ENV, "0")
    with registry.isolated():

        @claim(id="T-NOTWIN", paper="p", kind="lemma", statement="s", provenance="[D]",
               examples=5, twins=())  # fmt: skip
        @given(inst=st.just(_fixed()))
        def test_x(inst):
            assert inst.n != 2

        collector = evidence.Collector()
        with evidence.collecting(collector), pytest.raises(AssertionError) as caught:
            test_x()
        verdict, _, reason = verdicts.judge(caught.value, collector, registry.REGISTRY["T-NOTWIN"])
    assert verdict == "refuted" and collector.robustness is None
    assert reason == "a counterexample was found; it has no twins to replay it on"


PLAIN_VALUES = """
import sys
from theorems.framework import evidence, shrink, twins

def body(x):
    assert x < 10

with evidence.collecting(evidence.Collector()):
    twins.robustness(body, (), {"x": 11}, ("x",))
    twins.recheck(body, (), {"x": 11}, ("x",), AssertionError())
    shrink.reduce(body, (), {"x": 11}, ("x",))
print(sorted(m for m in ("strategies", "torch", "cvxpy") if m in sys.modules))
"""


def test_a_claim_over_plain_values_never_imports_the_strategies():
    """Twins and reductions exist only for the strategies' instances: a refuted claim over
    plain values (a researcher's integers) must not pay ~3 s for importing strategies."""
    import subprocess
    import sys

    root = Path(twins.__file__).resolve().parents[2]
    env = {"ATTN_TWINS": "5", "PATH": ""}
    done = subprocess.run(
        [sys.executable, "-c", PLAIN_VALUES], capture_output=True, text=True, env=env, cwd=root
    )
    assert done.stdout.strip() == "[]", done.stderr
    inst = PromptInstance.__new__(PromptInstance)
    assert twins.strategy_arguments({"inst": inst, "x": 1}, ("inst", "x")) == ["inst"]
