"""The counterexample store: typed encoding of a test's arguments, saving (only on change),
the check CLI reading a saved file, the @example line, and replay through @claim."""

import json

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from strategies import PromptInstance
from theorems.framework import cli, evidence, instances, registry, replay, verdicts
from theorems.framework.registry import claim


@pytest.fixture
def store(tmp_path):
    replay.set_store(tmp_path)
    try:
        yield tmp_path
    finally:
        replay.set_store(None)


def instance():
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]], dtype=torch.float64)
    return PromptInstance(
        X, [1.0], [1.0, 0.5], torch.eye(2), alpha=[1], seed=7, meta={"g": torch.ones(3)}
    )


def test_encode_decode_round_trip():
    values = {
        "n": 3, "s": "logistic", "flag": True, "none": None, "x": 0.25,
        "t": torch.arange(3, dtype=torch.float64), "a": np.arange(4).reshape(2, 2),
        "f": np.float64(1.5), "tup": (1, 2.0), "lst": [1, "a"], "d": {"k": [1.0]},
        "keys": {1: "a", (2, 3): None}, "fs": frozenset({3, 1}), "set": {"b"},
    }  # fmt: skip
    encoded = json.loads(json.dumps({k: instances.encode(v) for k, v in values.items()}))
    back = {k: instances.decode(v) for k, v in encoded.items()}
    assert torch.equal(back.pop("t"), values.pop("t"))
    assert np.array_equal(back.pop("a"), values.pop("a"))
    assert back == values and isinstance(back["tup"], tuple)
    inst = instances.decode(json.loads(json.dumps(instances.encode(instance()))))
    assert isinstance(inst, PromptInstance) and inst.seed == 7 and inst.alpha.tolist() == [1]
    assert torch.equal(inst.X, instance().X) and torch.equal(inst.meta["g"], torch.ones(3))
    with pytest.raises(instances.Unrepresentable):
        instances.encode(lambda: None)
    assert "unrepresentable" in instances.encode_arguments({"f": print})


def test_saved_file_is_an_instance_file_and_rewritten_only_on_change(store, capsys):
    inst = instance()
    claim_doc = {
        "id": "T-SAVE", "paper": "p", "statement": "s", "verdict": "refuted",
        "expected": "holds", "counterexample": {**inst.to_json(), "alpha": [1]},
        "falsifying_example": "Falsifying example: test_x(\n    inst=...,\n)",
    }  # fmt: skip
    args = instances.encode_arguments({"inst": inst})
    first = replay.save(claim_doc, args, profile="ci", store=store)
    assert first["changed"] and first["replayable"]
    assert first["example"] == '@example(inst=saved("T-SAVE"))'
    doc = json.loads(first["path"].read_text())
    assert doc["counterexample"]["extra"] == {"alpha": [1]}  # not in the check CLI schema
    assert doc["replay"]["inst"]["json"]["$instance"]  # the arrays are stored once
    assert doc["counterexample"]["falsifying_example"][0] == "Falsifying example: test_x("
    model, fields = instances.load_instance(first["path"])
    assert model == "prompt" and torch.equal(fields["X"], inst.X)
    assert cli.main(["check", str(first["path"]), "--out", str(store / "out.json")]) == 0
    assert json.loads((store / "out.json").read_text())["model"] == "prompt"
    claim_doc["falsifying_example"] = "Falsifying explicit example: test_x(...)"
    assert not replay.save(claim_doc, args, profile="ci", store=store)["changed"]
    assert replay.saved("T-SAVE").seed == 7
    assert replay.saved_arguments("T-SAVE")["inst"].n == 1


def test_example_lines():
    assert replay.example_line("T", {"x": {"value": 10}, "y": {"float": 0.5}}) == (
        "@example(x=10, y=0.5)"
    )
    inst = {"instance": "PromptInstance", "json": {}}
    assert replay.example_line("T", {"inst": inst}) == '@example(inst=saved("T"))'
    assert replay.example_line("T", {"inst": inst, "x": {"value": 1}}) == (
        '@example(**saved_arguments("T"))'
    )


def _probe(calls):
    @claim(id="T-REPLAY", paper="p", kind="lemma", statement="s", provenance="[D]", examples=5)
    @given(x=st.integers(0, 1000))
    def test_x(x):
        calls.append(x)
        assert x != 417

    return test_x


def test_a_pinned_counterexample_loads_when_the_run_saves_elsewhere(store, tmp_path, monkeypatch):
    """`@example(inst=saved("ID"))` is part of a claim's source: its file is the checkout's
    (theorems/counterexamples/), and a run with another store (a test's, the fault-injection
    run's) must still import the claim."""
    checkout = tmp_path / "checkout"
    pinned = checkout / replay.DEFAULT_STORE
    pinned.mkdir(parents=True)
    claim_doc = {
        "id": "T-PINNED", "paper": "p", "statement": "s", "verdict": "refuted",
        "expected": "holds", "counterexample": instance().to_json(), "falsifying_example": None,
    }  # fmt: skip
    replay.save(claim_doc, instances.encode_arguments({"inst": instance()}), profile="ci",
                store=pinned)  # fmt: skip
    monkeypatch.setattr(replay, "REPO_ROOT", checkout)
    assert not (store / "T-PINNED.json").exists()
    assert replay.saved("T-PINNED").seed == 7
    with pytest.raises(replay.ReplayError, match="no saved counterexample for T-ABSENT"):
        replay.saved("T-ABSENT")


def test_claim_replays_a_saved_counterexample_first(store):
    (store / "T-REPLAY.json").write_text(json.dumps({"replay": {"x": {"value": 417}}}))
    calls = []
    with registry.isolated():
        test_x = _probe(calls)
        collector = evidence.Collector()
        with evidence.collecting(collector), pytest.raises(AssertionError):
            test_x()
    assert calls[0] == 417  # before any generated example
    assert collector.replay() == {"args": {"x": {"value": 417}}}


@pytest.mark.parametrize(
    "text, reason",
    [
        ("{oops", "invalid JSON"),
        (json.dumps({"replay": {"x": {"mystery": 1}}}), "unknown encoded value"),
    ],
)
def test_a_broken_saved_file_errors_the_claim_with_its_reason(store, text, reason):
    (store / "T-REPLAY.json").write_text(text)
    with registry.isolated():
        test_x = _probe([])
        with pytest.raises(replay.ReplayError, match=reason):
            test_x()


def test_a_saved_file_for_other_arguments_is_not_replayed(store):
    (store / "T-REPLAY.json").write_text(json.dumps({"replay": {"y": {"value": 417}}}))
    calls = []
    with registry.isolated():
        _probe(calls)()
    assert 417 not in calls and len(calls) == 5


@pytest.mark.parametrize("undecide", [evidence.inconclusive, evidence.reject, None])
def test_a_saved_counterexample_undecided_here_makes_the_claim_inconclusive(store, undecide):
    """A lost counterexample is not a hold: when this machine cannot decide the replayed
    counterexample (inconclusive numerics, or its premise no longer met), the drawn examples
    that hold do not make the claim hold (issue 21). The control (None): the same replay,
    decided and passing, leaves the verdict to the examples."""
    (store / "T-REPLAY.json").write_text(json.dumps({"replay": {"x": {"value": 417}}}))
    with registry.isolated():

        @claim(id="T-REPLAY", paper="p", kind="lemma", statement="s", provenance="[D]")
        @given(x=st.integers(0, 1000))
        def test_x(x):
            if x == 417 and undecide is not None:
                undecide("the flow reached max_norm undecided")

        collector = evidence.Collector()
        with evidence.collecting(collector):
            test_x()
        verdict, _, reason = verdicts.judge(None, collector, registry.REGISTRY["T-REPLAY"])
    if undecide is None:
        assert verdict == "holds", reason
        return
    assert verdict == "inconclusive", reason
    assert "the saved counterexample is undecided here" in reason
    assert "the flow reached max_norm undecided" in reason
