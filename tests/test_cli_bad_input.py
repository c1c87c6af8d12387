"""`python -m theorems check` on input it cannot answer as asked (DESIGN.md, "Bad input"):
an `--out` it could not write, numbers float64 cannot hold, a file nested too deep (each one
line on stderr and exit 2, nothing computed), and instances float64 no longer represents
(an answer "inconclusive" for precision, never a certificate)."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from models.check import precision
from tests.test_cli import EMBEDDING, PROMPT, REPO_ROOT, changed
from theorems.framework import cli

#: Two sequences, each its own two tokens; v = (1, 1) mixes the coordinates, so the one step
#: η0·∇E (along v) mixes into every entry of E¹. At η0 = 0.5 the flow converges to a
#: certified SVM. At η0 = 1e300 the step (~1e299) absorbs E⁰ in float64: tokens 0 and 2 (and
#: 1 and 3) take the same step, so their E¹ rows come out equal and the SVM "infeasible" with
#: a Farkas certificate, although the exact rows differ by E⁰_0 − E⁰_2 = (0.3, −0.2) (the
#: step is along v, so it never cancels a difference across v) and the exact SVM is feasible.
SEPARATE = {
    "model": "embedding",
    "sequences": [[0, 2], [1, 3]],
    "y": [1, -1],
    "E0": [[0.3, 0.0], [0.0, 0.1], [0.0, 0.2], [0.0, -0.3]],
    "v": [1.0, 1.0],
    "eta0": 0.5,
}
CROSS = {
    "model": "cross",
    "X": [[[1.0, 0.0], [0.0, 1.0]], [[0.5, -1.0], [-1.0, 0.2]]],
    "Z": [[1.0, 0.5], [-0.3, 1.0]],
    "y": [1, -1],
    "v": [1.0, -0.5],
}


def run(tmp_path, capsys, doc_or_text, *extra):
    path = tmp_path / "instance.json"
    path.write_text(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    code = cli.main(["check", str(path), *extra])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code, out, err, start):
    assert code == 2 and out == "", (code, out, err)
    assert err.startswith(f"error: {start}") and err.count("\n") == 1, err


# --------------------------------------------------------------------------- --out


@pytest.fixture
def nothing_computed(monkeypatch):
    """Fails the test if a prediction starts: a bad --out is refused before any computing."""
    import models.check.predict

    def refuse(*args, **kwargs):
        raise AssertionError("the prediction ran before --out was checked")

    monkeypatch.setattr(models.check.predict, "predict_embedding", refuse)


def test_out_into_a_missing_folder_is_one_line_before_computing(tmp_path, capsys, nothing_computed):
    target = tmp_path / "no" / "such" / "folder" / "answer.json"
    code, out, err = run(tmp_path, capsys, EMBEDDING, "--out", str(target))
    one_line_error(code, out, err, f"--out {target}: the folder")
    assert "does not exist" in err and not target.parent.exists()


def test_out_that_is_a_folder_is_one_line(tmp_path, capsys, nothing_computed):
    code, out, err = run(tmp_path, capsys, EMBEDDING, "--out", str(tmp_path))
    one_line_error(code, out, err, f"--out {tmp_path}: is a directory")


def test_out_under_a_file_is_one_line(tmp_path, capsys, nothing_computed):
    (tmp_path / "plain").write_text("")
    target = tmp_path / "plain" / "answer.json"
    code, out, err = run(tmp_path, capsys, EMBEDDING, "--out", str(target))
    one_line_error(code, out, err, f"--out {target}: the folder")
    assert "is not a folder" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_out_into_a_read_only_folder_is_one_line(tmp_path, capsys, nothing_computed):
    folder = tmp_path / "ro"
    folder.mkdir(mode=0o500)
    code, out, err = run(tmp_path, capsys, EMBEDDING, "--out", str(folder / "answer.json"))
    one_line_error(code, out, err, "--out ")
    assert "not writable" in err


# --------------------------------------------------------------------------- the file


HUGE = "1" + "0" * 400  # 10**400: an integer literal beyond float64 (max ≈ 1.8e308)
HUGER = "1" + "0" * 5000  # beyond Python's int-string limit (4300 digits) too


def _with(doc, field, literal):
    """The JSON text of doc with field's value, or its first number, replaced by literal."""
    marker = 123.25
    doc = json.loads(json.dumps(doc))
    if isinstance(doc[field], list):
        node = doc[field]
        while isinstance(node[0], list):
            node = node[0]
        node[0] = marker
    else:
        doc[field] = marker
    text = json.dumps(doc)
    assert text.count(str(marker)) == 1
    return text.replace(str(marker), literal)


@pytest.mark.parametrize(
    "doc, field, literal, where",
    [
        (EMBEDDING, "eta0", HUGE, ""),
        (EMBEDDING, "eta0", HUGER, ""),
        (EMBEDDING, "E0", HUGE, " at E0[0][0]"),
        (EMBEDDING, "E0", HUGER, " at E0[0][0]"),
        (EMBEDDING, "sequences", HUGE, " at sequences[0][0]"),
        (PROMPT, "X", HUGE, " at X[0][0][0]"),
        (PROMPT, "X", "-" + HUGER, " at X[0][0][0]"),
        (PROMPT, "y", HUGE, " at y[0]"),
        (PROMPT, "X", "1e400", " at X[0][0][0]"),
        (CROSS, "Z", HUGE, " at Z[0][0]"),
        (changed(CROSS, p=2.0), "p", HUGE, ""),
    ],
    ids=[
        "eta0-401-digits",
        "eta0-5001-digits",
        "E0-401-digits",
        "E0-5001-digits",
        "token-id-401-digits",
        "X-401-digits",
        "X-minus-5001-digits",
        "y-401-digits",
        "X-1e400",
        "Z-401-digits",
        "p-401-digits",
    ],
)
def test_a_number_float64_cannot_hold_is_one_line_naming_the_field(
    tmp_path, capsys, doc, field, literal, where
):
    code, out, err = run(tmp_path, capsys, _with(doc, field, literal))
    one_line_error(code, out, err, f'field "{field}": a number too large for float64 (')
    assert err.rstrip("\n").endswith(")" + where), err
    assert len(err) < 200, err  # the number is abbreviated, not printed whole


def test_a_huge_python_int_in_a_dict_instance_names_the_field():
    from theorems.framework.instances import InstanceError, load_instance

    for huge in (10**400, -(10**5000)):  # str() of the second one raises ValueError
        with pytest.raises(InstanceError, match="a number too large for float64") as info:
            load_instance(changed(EMBEDDING, eta0=huge))
        assert info.value.field == "eta0"
        with pytest.raises(InstanceError, match="too large for float64 .* at E0") as info:
            load_instance(changed(EMBEDDING, E0=[[0.1, huge], [0.0, 0.1], [0.1, 0.1]]))
        assert info.value.field == "E0"


@pytest.mark.parametrize("field", ["v", "X"])
def test_a_file_nested_100000_deep_is_one_line(tmp_path, capsys, field):
    deep = "[" * 100_000 + "]" * 100_000
    text = json.dumps(changed(PROMPT, **{field: "DEEP"})).replace('"DEEP"', deep)
    code, out, err = run(tmp_path, capsys, text)
    one_line_error(code, out, err, f"{tmp_path / 'instance.json'}: malformed instance file")
    assert "nested too deep" in err


def test_the_real_entry_point_answers_each_bad_input_in_one_line(tmp_path):
    """The three former tracebacks, through `python -m theorems` itself (one process each)."""
    good = tmp_path / "good.json"
    good.write_text(json.dumps(EMBEDDING))
    huge = tmp_path / "huge.json"
    huge.write_text(_with(EMBEDDING, "E0", HUGER))
    deep = tmp_path / "deep.json"
    deep.write_text('{"model": "prompt", "X": ' + "[" * 100_000 + "]" * 100_000 + "}")
    env = dict(os.environ, PYTHONPATH=str(REPO_ROOT))
    cases = [
        ([str(good), "--out", str(tmp_path / "missing" / "a.json")], "error: --out "),
        ([str(huge)], 'error: field "E0": a number too large for float64'),
        ([str(deep)], f"error: {deep}: malformed instance file"),
    ]
    for argv, start in cases:
        done = subprocess.run(
            [sys.executable, "-m", "theorems", "check", *argv],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env=env,
            timeout=300,
        )
        assert done.returncode == 2 and done.stdout == "", done.stderr
        assert done.stderr.startswith(start) and done.stderr.count("\n") == 1, done.stderr


# --------------------------------------------------------------------------- precision


def _answer(tmp_path, capsys, doc) -> dict:
    code, out, err = run(tmp_path, capsys, doc)
    assert code == 0 and err == "", err
    return json.loads(out)


def assert_inconclusive_for_precision(answer, *svms, naming=""):
    assert answer["status"] == "inconclusive", answer
    assert answer["reason"].startswith("precision: ") and "\n" not in answer["reason"]
    assert naming in answer["reason"], answer["reason"]
    for name in svms:  # no certificate: no point, no Farkas vector, the same reason
        svm = answer[name]
        assert svm["status"] == "inconclusive" and svm["reason"] == answer["reason"], svm
        assert svm.get("p") is None and svm.get("W") is None


def test_embedding_with_eta0_1e300_is_inconclusive_for_precision_not_infeasible(tmp_path, capsys):
    answer = _answer(tmp_path, capsys, changed(SEPARATE, eta0=1e300))
    assert answer["status"] != "infeasible" and answer["svm"]["status"] != "infeasible"
    assert_inconclusive_for_precision(answer, "svm", naming="E⁰ rows of tokens 0 and 2")
    assert answer["selected"] is None and answer["one_minus_cos"] is None
    assert answer["alpha"] == [0.25, -0.25, 0.25, -0.25]  # a fact of the data, still given


def test_the_same_embedding_at_eta0_half_keeps_its_certified_answer(tmp_path, capsys):
    """The control: the guard leaves a representable instance its certificate."""
    answer = _answer(tmp_path, capsys, SEPARATE)
    assert answer["status"] == "converged", answer["reason"]
    assert answer["svm"]["status"] == "optimal" and answer["svm"]["p"] is not None
    assert not answer["reason"].startswith("precision")
    imprecise = _answer(tmp_path, capsys, changed(SEPARATE, eta0=1e300))
    assert list(imprecise) == list(answer)  # the same fields, in the same order


def test_embedding_whose_step_is_absorbed_by_e0_is_inconclusive(tmp_path, capsys):
    """η0 = 1e-300 on equal E⁰ rows: only the step tells tokens 0 and 2 apart (token 2 also
    occurs in the negative sequence), and float64 loses it next to E⁰."""
    doc = changed(SEPARATE, sequences=[[0, 2], [1, 2]], E0=[[0.3, 0.0], [0.0, 0.1], [0.3, 0.0]])
    answer = _answer(tmp_path, capsys, changed(doc, eta0=1e-300))
    assert_inconclusive_for_precision(answer, "svm", naming="E¹ rows of tokens 0 and 2")


def test_embedding_with_an_overflowing_step_is_inconclusive(tmp_path, capsys):
    answer = _answer(tmp_path, capsys, changed(SEPARATE, E0=[[3e200, 0.0]] * 4, v=[1e200, 1.0]))
    assert_inconclusive_for_precision(answer, "svm", naming="overflows float64")


def test_prompt_at_1e_minus_200_is_inconclusive_not_a_farkas_certificate(tmp_path, capsys):
    """The keys of PROMPT scaled by 1e-200: the same SVMs up to scale, but their squares
    underflow (float64 answered a feasible SVM "infeasible", ‖Aᵀy‖ = 0)."""
    X = [[[x * 1e-200 for x in token] for token in row] for row in PROMPT["X"]]
    answer = _answer(tmp_path, capsys, changed(PROMPT, X=X))
    assert_inconclusive_for_precision(answer, "svm_global", "svm_selected", naming="keys")


def test_prompt_tokens_closer_than_float64_resolves_are_inconclusive(tmp_path, capsys):
    X = [[[1.0, 0.0], [1.0 + 2**-45, 0.0], [0.0, 1.0]]]
    answer = _answer(tmp_path, capsys, changed(PROMPT, X=X, y=[1]))
    assert_inconclusive_for_precision(
        answer, "svm_global", "svm_selected", naming="tokens 0 and 1 of input 0"
    )


def test_cross_with_overflowing_keys_is_inconclusive(tmp_path, capsys):
    """x·zᵀ of 1e200 × 1e200 overflows (the CLI used to print a traceback from the keys)."""
    doc = changed(CROSS, Z=[[1e200, 0.5], [-0.3, 1.0]], X=[[[1e200, 0.0], [0.0, 1.0]]] * 2)
    answer = _answer(tmp_path, capsys, doc)
    assert_inconclusive_for_precision(answer, "svm_fro", "svm_nuc", naming="keys x·zᵀ")
    assert answer["training"]["status"] == "inconclusive" and answer["training"]["W"] is None


def test_exact_ties_are_not_precision_problems():
    """Equal tokens, keys equal through a singular W, equal scores, a zero query: exact in
    float64 too, so the guard stays silent (the SVMs then answer "infeasible" for real)."""
    X = [[[1.0, 0.5], [1.0, 0.5], [1.0, 0.25], [0.5, 1.0]]]
    assert precision.prompt(X, [1.0, 0.0], [[1.0, 0.0], [0.0, 0.0]], [0.0, 0.0]) is None
    assert precision.prompt(X, [0.0, 1.0], None, None) is None
    assert precision.cross(X, [[0.0, 0.0]], [1.0, 1.0]) is None
    assert precision.cross(X, [[1.0, 2.0]], [1.0, 0.0]) is None


def test_ordinary_instances_are_not_precision_problems():
    import torch

    g = torch.Generator().manual_seed(0)
    for scale in (1e-6, 1.0, 1e6):
        X = torch.randn(4, 5, 3, generator=g, dtype=torch.float64) * scale
        v, Z = torch.randn(3, generator=g, dtype=torch.float64), torch.randn(4, 3, generator=g)
        W = torch.randn(3, 3, generator=g, dtype=torch.float64)
        assert precision.prompt(X, v, W, torch.zeros(3)) is None
        assert precision.cross(X, Z.double(), v) is None


def test_the_ntp_guard_reads_the_keys_against_each_sequences_query_its_last_token():
    """2403.08081's keys are x_t x_kᵀ with x_k the LAST token: a query of norm 1e100 makes keys
    of 1e200 (their squares overflow), a query of norm 1 keys of 1e100 (fine). (A mutant that
    read the second token as the query survived every other test.)"""
    E = np.eye(3)
    E[2] *= 1e100
    assert "sequence 0" in precision.ntp(E, [[0, 1, 2]])  # query x_2: keys reach 1e200
    assert precision.ntp(E, [[0, 2, 1]]) is None  # query x_1: keys reach 1e100
    assert precision.ntp(E, [[2, 1, 0, 1]]) is None
    assert "sequence 1" in precision.ntp(E, [[2, 1, 0, 1], [1, 0, 1, 2]])


def test_an_exact_tie_does_not_hide_a_later_unresolved_difference():
    """Tokens 0 and 1 score exactly alike under v = (1, 1e-20) (a tie in float64 too, skipped);
    tokens 2 and 3 score 1e-20 apart at magnitude 1, below float64's resolution. The guard
    must go on past the tie and name the second pair."""
    X = [[[0.0, 1.0], [1e-20, 0.0], [1.0, 0.0], [1.0, 1.0]]]
    reason = precision.prompt(X, [1.0, 1e-20], None, None)
    assert reason is not None
    assert reason.startswith("precision: the scores x·v of tokens 2 and 3 of input 0 differ by")
