"""`check --timeout SECONDS`: an answer within the budget is the answer; past it, the model's
fields, null, with status "inconclusive" and a "budget:" reason naming the stage; never a hang.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent

SMALL = {
    "model": "prompt",
    "X": [[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]], [[-1.0, 0.0], [0.0, -1.0], [0.2, 0.1]]],
    "y": [1, -1],
    "v": [1.0, 0.5],
}


def _check(tmp_path: Path, instance: dict, *extra: str) -> tuple[int, dict | None, str, float]:
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(instance), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ATTN_")}
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "theorems", "check", str(path), *extra],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    seconds = time.perf_counter() - t0
    answer = json.loads(proc.stdout) if proc.returncode == 0 else None
    return proc.returncode, answer, proc.stderr, seconds


def test_an_answer_within_the_budget_is_the_answer(tmp_path):
    rc, plain, _, _ = _check(tmp_path, SMALL)
    rc_budget, within, _, _ = _check(tmp_path, SMALL, "--timeout", "300")
    assert rc == rc_budget == 0
    plain.pop("seconds"), within.pop("seconds")
    assert within == plain
    assert not str(within["reason"]).startswith("budget")


def test_past_the_budget_the_answer_is_inconclusive_with_the_stage(tmp_path):
    # n = 200, T = 50, d = 50 took minutes on 2 cores (docs/performance.md): far past 8 s.
    rng = np.random.default_rng(0)
    big = {
        "model": "prompt",
        "X": rng.standard_normal((200, 50, 50)).round(6).tolist(),
        "y": [1, -1] * 100,
        "v": rng.standard_normal(50).round(6).tolist(),
    }
    rc, answer, err, seconds = _check(tmp_path, big, "--timeout", "8")
    assert rc == 0, err
    assert answer["status"] == "inconclusive"
    assert answer["reason"].startswith("budget: no answer within --timeout 8 s (it was ")
    assert answer["selected"] is None and answer["svm_global"]["p"] is None
    assert seconds < 8 + 60  # stopped, not run to the end (minutes)
    assert "check: warning: a large prompt instance" in err


def test_the_worker_tells_each_stage_then_sends_the_answer():
    from multiprocessing import Pipe

    from theorems.framework import cli
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
    rc, answer, err, _ = _check(tmp_path, cross, "--timeout", "0.01")
    assert rc == 0, err
    assert answer["status"] == "inconclusive" and answer["reason"].startswith("budget:")
    assert answer["model"] == "cross" and answer["param"] == "W"
    assert answer["training_lp"]["status"] == "inconclusive" and answer["corr_lp"] is None


def test_a_timeout_that_is_not_a_positive_number_is_refused(tmp_path):
    for bad in ("0", "-3", "soon", "nan"):
        rc, _, err, _ = _check(tmp_path, SMALL, "--timeout", bad)
        assert rc == 2 and "--timeout" in err, (bad, err)
