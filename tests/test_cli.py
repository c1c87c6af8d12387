"""`python -m theorems`: instance validation (one line naming the field, exit 2) and `list`."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from theorems.framework import cli, instances, profiles, registry
from theorems.framework.registry import claim

REPO_ROOT = Path(__file__).resolve().parent.parent

PROMPT = {
    "model": "prompt",
    "X": [[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], [[-1.0, 0.0], [0.0, -1.0], [0.2, 0.1]]],
    "y": [1, -1],
    "v": [1.0, 0.5],
}
EMBEDDING = {
    "model": "embedding",
    "sequences": [[0, 1, 2], [2, 1, 0]],
    "y": [1, -1],
    "E0": [[0.1, 0.0], [0.0, 0.1], [0.1, 0.1]],
    "v": [1.0, -1.0],
    "eta0": 0.5,
}


def changed(base, **fields):
    doc = json.loads(json.dumps(base))
    for key, value in fields.items():
        if value is ...:
            doc.pop(key)
        else:
            doc[key] = value
    return doc


BAD = [
    # (instance, field named in the message, a fragment of the message)
    (changed(PROMPT, y=[1, 0]), "y", "labels must be ±1, got 0 at index 1"),
    (changed(PROMPT, y=[1]), "y", "expected 2 labels"),
    (changed(PROMPT, y=[True, -1]), "y", "non-numeric"),
    (changed(PROMPT, y=...), "y", "missing"),
    (changed(PROMPT, X=...), "X", "missing"),
    (changed(PROMPT, X=[[[1.0, 0.0], [0.0]], [[1.0, 0.0], [0.0, 1.0]]]), "X", "ragged"),
    (changed(PROMPT, X=[[1.0, 2.0]]), "X", "3-dimensional"),
    (changed(PROMPT, X=[[["a", 0.0]]]), "X", "non-numeric value a string at X[0][0][0]"),
    (changed(PROMPT, X=[[[float("nan"), 0.0]]], y=[1]), "X", "non-finite value nan at X[0][0][0]"),
    (changed(PROMPT, X=[]), "X", "empty"),
    (changed(PROMPT, v=[1.0, 2.0, 3.0]), "v", "expected shape [2]"),
    (changed(PROMPT, v=[1.0, float("inf")]), "v", "non-finite"),
    (changed(PROMPT, W=[[1.0, 0.0]]), "W", "expected shape [2, 2]"),
    (changed(PROMPT, p0=[0.0]), "p0", "expected shape [2]"),
    (changed(PROMPT, loss="hinge"), "loss", "unknown loss 'hinge'"),
    (changed(PROMPT, model="mlp"), "model", "unknown model 'mlp'"),
    (changed(PROMPT, model=...), "model", "missing"),
    (changed(PROMPT, Xs=[]), "Xs", "unknown field"),
    (changed(EMBEDDING, sequences=[[0, 1, 7], [2, 1, 0]]), "sequences", "token id 7"),
    (changed(EMBEDDING, sequences=[[0, 1, -1], [2, 1, 0]]), "sequences", "out of range"),
    (changed(EMBEDDING, sequences=[[0, 1.5, 2], [2, 1, 0]]), "sequences", "integers"),
    (changed(EMBEDDING, eta0=0), "eta0", "> 0"),
    (changed(EMBEDDING, eta0="big"), "eta0", "must be a number"),
    (changed(EMBEDDING, eta0=...), "eta0", "missing"),
    (changed(EMBEDDING, E0=[[0.1, 0.0], [0.0]]), "E0", "ragged"),
    (changed(EMBEDDING, v=[1.0]), "v", "expected shape [2]"),
    (changed(EMBEDDING, y=[1, 2]), "y", "labels must be ±1, got 2 at index 1"),
]


def check(tmp_path, capsys, text):
    path = tmp_path / "instance.json"
    path.write_text(text)
    code = cli.main(["check", str(path)])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("doc, field, fragment", BAD)
def test_each_bad_instance_is_one_line_naming_the_field(tmp_path, capsys, doc, field, fragment):
    code, out, err = check(tmp_path, capsys, json.dumps(doc))
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f'error: field "{field}": '), err
    assert fragment in err


@pytest.mark.parametrize(
    "text, fragment",
    [
        ("{not json", "invalid JSON at line 1 column 2"),
        ("[1, 2]", "must be a JSON object, got a list"),
        ("", "invalid JSON"),
    ],
)
def test_bad_files(tmp_path, capsys, text, fragment):
    code, _, err = check(tmp_path, capsys, text)
    assert code == 2 and err.count("\n") == 1 and fragment in err


def test_missing_file(capsys, tmp_path):
    assert cli.main(["check", str(tmp_path / "nope.json")]) == 2
    assert capsys.readouterr().err == f"error: {tmp_path / 'nope.json'}: file not found\n"


def test_the_real_entry_point_prints_no_traceback(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(changed(PROMPT, y=[1, 0])))
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    done = subprocess.run(
        [sys.executable, "-m", "theorems", "check", str(path)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr == 'error: field "y": labels must be ±1, got 0 at index 1\n'


def test_load_instance_returns_tensors_with_defaults():
    torch = pytest.importorskip("torch")
    model, fields = instances.load_instance(PROMPT)
    assert model == "prompt" and fields["loss"] == "logistic"
    assert fields["X"].shape == (2, 3, 2) and fields["X"].dtype == torch.float64
    assert torch.equal(fields["W"], torch.eye(2, dtype=torch.float64))
    assert torch.equal(fields["p0"], torch.zeros(2, dtype=torch.float64))
    model, fields = instances.load_instance(EMBEDDING)
    assert model == "embedding" and fields["sequences"].dtype == torch.int64
    assert fields["eta0"] == 0.5 and fields["E0"].shape == (3, 2)


def _predict_has(name):
    try:
        import models.check.predict as predict
    except ImportError:
        return False
    return callable(getattr(predict, name, None))


@pytest.mark.parametrize("doc", [PROMPT, EMBEDDING], ids=["prompt", "embedding"])
def test_check_prints_the_prediction(tmp_path, capsys, doc):
    if not _predict_has(f"predict_{doc['model']}"):
        pytest.skip(f"models.check.predict.predict_{doc['model']} is not written yet")
    path, out_file = tmp_path / "instance.json", tmp_path / "result.json"
    path.write_text(json.dumps(doc))
    assert cli.main(["check", str(path)]) == 0
    assert isinstance(json.loads(capsys.readouterr().out), dict)
    if doc is EMBEDDING:  # the cheap one: also write to a file
        assert cli.main(["check", str(path), "--out", str(out_file)]) == 0
        assert capsys.readouterr().out == ""
        assert isinstance(json.loads(out_file.read_text()), dict)


@pytest.fixture
def throwaway_claims(monkeypatch):
    """Two registered claims, and no import of the real claim modules (nor their index)."""
    monkeypatch.setenv("ATTN_NO_INDEX", "1")
    monkeypatch.setattr(cli, "import_claim_modules", lambda root=None: [])
    with registry.isolated():
        registry.REGISTRY.clear()
        for i, paper in enumerate(("2306.13596", "2505.17282")):

            def test_fn():
                pass

            claim(
                id=f"TEST-CLI-{i}",
                paper=paper,
                kind="lemma",
                statement="a long statement " * 10,
                provenance="[R+]",
                examples=20,
            )(test_fn)
        yield


def test_list_prints_the_registered_claims(throwaway_claims, capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["id", "paper", "kind", "expected", "provenance", "statement"]
    assert out[1].split()[:5] == ["TEST-CLI-0", "2306.13596", "lemma", "holds", "[R+]"]
    assert out[2].startswith("TEST-CLI-1") and out[2].endswith("…")
    assert out[-1] == "2 claims"


def test_list_json_and_paper_filter(throwaway_claims, capsys):
    assert cli.main(["list", "--json", "--paper", "2505.17282"]) == 0
    (row,) = json.loads(capsys.readouterr().out)
    assert row["id"] == "TEST-CLI-1" and row["budget"] == profiles.scaled_examples(20)
    assert {"statement", "provenance", "expected", "module", "qualname"} <= set(row)


def test_list_reports_modules_that_fail_to_import(throwaway_claims, monkeypatch, capsys):
    failed = [("theorems.claims_x", "ImportError: no module named y")]
    monkeypatch.setattr(cli, "import_claim_modules", lambda root=None: failed)
    assert cli.main(["list"]) == 1
    assert "error: could not import theorems.claims_x" in capsys.readouterr().err
