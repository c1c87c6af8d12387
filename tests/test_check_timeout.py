"""`check --timeout SECONDS`: an answer within the budget is the answer; past it, the model's
fields, null, with status "inconclusive" and a "budget:" reason naming the stage; never a hang.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np

from theorems.framework import cli

REPO_ROOT = Path(__file__).resolve().parent.parent

SMALL = {  # token 0 scores highest and is separable: the flow converges to it at once
    "model": "prompt",
    "X": [[[1.0, 0.0], [0.0, 1.0]], [[0.8, -0.2], [-1.0, 0.3]]],
    "y": [1, 1],
    "v": [1.0, 0.0],
}


def _check(tmp_path: Path, instance: dict, *extra: str) -> tuple[int, dict | None, float]:
    """`check` in this process (its --timeout worker is a spawned process all the same)."""
    path, out = tmp_path / "instance.json", tmp_path / "answer.json"
    path.write_text(json.dumps(instance), encoding="utf-8")
    out.unlink(missing_ok=True)
    t0 = time.perf_counter()
    try:
        rc = cli.main(["check", str(path), "--out", str(out), *extra])
    except SystemExit as exc:  # argparse refuses a bad option value with exit 2
        rc = exc.code
    seconds = time.perf_counter() - t0
    answer = json.loads(out.read_text(encoding="utf-8")) if rc == 0 else None
    return rc, answer, seconds


def test_an_answer_within_the_budget_is_the_answer(tmp_path):
    rc, plain, _ = _check(tmp_path, SMALL)
    rc_budget, within, _ = _check(tmp_path, SMALL, "--timeout", "300")
    assert rc == rc_budget == 0
    plain.pop("seconds"), within.pop("seconds")
    assert within == plain
    assert within["status"] == "converged" and within["selected"] == [0, 0]


def test_past_the_budget_the_answer_is_inconclusive_with_the_stage(tmp_path, capsys):
    # Traced to its certified limit, this n = 32, T = 32, d = 128 instance took 454 s on 2
    # cores (2026-12-02): far past the 5 s given here.
    rng = np.random.default_rng(1)
    n, T, d = 32, 32, 128
    big = {
        "model": "prompt",
        "X": (rng.standard_normal((n, T, d)) / np.sqrt(d)).round(8).tolist(),
        "y": rng.choice([-1, 1], n).tolist(),
        "v": rng.standard_normal(d).round(8).tolist(),
    }
    rc, answer, seconds = _check(tmp_path, big, "--timeout", "5")
    assert rc == 0
    assert answer["status"] == "inconclusive"
    assert answer["reason"].startswith("budget: no answer within --timeout 5 s (it was ")
    assert answer["selected"] is None and answer["svm_global"]["p"] is None
    assert seconds < 5 + 30  # stopped, not run to the end (minutes)


def test_the_worker_tells_each_stage_then_sends_the_answer():
    from multiprocessing import Pipe

    from theorems.framework.instances import load_instance

    here, there = Pipe(duplex=False)
    path = REPO_ROOT / "theorems" / "counterexamples" / "MM-THM-G.json"
    model, fields = load_instance(str(path))
    cli._predict_in_child(model, fields, there)
    messages = []
    while here.poll(0):
        messages.append(here.recv())
    kinds = [kind for kind, _ in messages]
    assert kinds[-1] == "answer" and set(kinds[:-1]) == {"stage"}
    assert ("stage", "tracing gradient flow on p") in messages
    assert messages[-1][1]["model"] == "prompt" and messages[-1][1]["selected"] is not None


def test_a_cross_instance_past_the_budget_keeps_its_fields(tmp_path):
    rng = np.random.default_rng(1)
    cross = {
        "model": "cross",
        "X": rng.standard_normal((4, 5, 3)).tolist(),
        "Z": rng.standard_normal((4, 3)).tolist(),
        "y": [1, -1, 1, -1],
        "v": [1.0, 0.0, 0.0],
        "p": 1.5,
    }
    rc, answer, _ = _check(tmp_path, cross, "--timeout", "0.01")
    assert rc == 0
    assert answer["status"] == "inconclusive" and answer["reason"].startswith("budget:")
    assert answer["model"] == "cross" and answer["param"] == "W"
    assert answer["training_lp"]["status"] == "inconclusive" and answer["corr_lp"] is None


def test_a_timeout_that_is_not_a_positive_number_is_refused(tmp_path, capsys):
    for bad in ("0", "-3", "soon", "nan"):
        rc, _, _ = _check(tmp_path, SMALL, "--timeout", bad)
        err = capsys.readouterr().err
        assert rc == 2 and "--timeout" in err, (bad, err)
