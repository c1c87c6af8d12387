"""`check` talks while it works: a warning before a large instance, a heartbeat with the
current stage while it runs, silence for a short run and under ATTN_PROGRESS=0."""

from __future__ import annotations

import io
import time

import numpy as np

from theorems.framework import cli, progress


def _fields(n, T, d):
    return {"X": np.zeros((n, T, d)), "sequences": np.zeros((n, T), dtype=int)}


def test_work_is_constraints_times_dimensions():
    assert progress.check_work("prompt", _fields(200, 50, 50)) == (
        "n = 200, T = 50, d = 50",
        200 * 49 * 50,
    )
    assert progress.check_work("cross", _fields(6, 8, 10))[1] == 6 * 7 * 100
    emb = {"sequences": np.zeros((4, 5), dtype=int), "E0": np.zeros((9, 3))}
    assert progress.check_work("embedding", emb)[1] == 4 * 5 * 3


def test_a_short_run_says_nothing():
    out = io.StringIO()
    with progress.Heartbeat("check", stream=out, every=10.0) as beat:
        beat.stage("solving")
    assert out.getvalue() == ""


def test_a_long_run_says_its_stage_and_time_until_done():
    out = io.StringIO()
    with progress.Heartbeat("check", stream=out, every=0.05) as beat:
        beat.stage("tracing gradient flow on p")
        time.sleep(0.2)
        beat.stage("solving the SVM")
    text = out.getvalue()
    assert "check: still tracing gradient flow on p:" in text
    assert "check: solving the SVM (" in text  # a later stage is said as it begins
    assert text.rstrip().splitlines()[-1].startswith("check: done in ")


def _slow(*args, stage):
    stage("solving")
    time.sleep(0.15)
    return {"args": len(args)}


def test_a_large_instance_is_warned_about_before_it_starts(monkeypatch, capsys):
    monkeypatch.setenv("ATTN_PROGRESS_SECONDS", "0.05")
    monkeypatch.delenv("ATTN_PROGRESS", raising=False)
    fields = {"X": np.zeros((200, 50, 50)), "y": None}
    assert cli._predict_talking(_slow, "prompt", fields, ("X", "y")) == {"args": 2}
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("check: warning: a large prompt instance (n = 200, T = 50, d = 50")
    assert err[1].startswith("check: solving (")  # loud from the start
    assert any(line.startswith("check: still solving:") for line in err)


def test_progress_off_is_silent(monkeypatch, capsys):
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    fields = {"X": np.zeros((200, 50, 50)), "y": None}

    def plain(*args, stage):
        stage("solving")  # nobody listens
        return {"args": len(args)}

    assert cli._predict_talking(plain, "prompt", fields, ("X", "y")) == {"args": 2}
    assert capsys.readouterr().err == ""
