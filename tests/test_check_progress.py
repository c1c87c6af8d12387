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


# --- the estimate in the warning (models.check.estimate) ---


def _prompt_fields(n, T, d, seed=0):
    rng = np.random.default_rng(seed)
    v = rng.normal(size=d)
    return {
        "X": rng.normal(size=(n, T, d)),
        "y": rng.choice([-1.0, 1.0], size=n),
        "v": v / np.linalg.norm(v),
        "W": None,
        "loss": "logistic",
    }


def test_the_estimate_is_one_measured_evaluation_times_a_typical_count():
    from models.check import estimate

    guess = estimate.check_time("prompt", _prompt_fields(20, 6, 8))
    # r = min(d, n(T − 1)) = 8: 2·(3000 + 70·9) evaluations
    assert guess.evals == 2 * (estimate.BASE_EVALS + estimate.JACOBIANS * 9) == 7260
    assert guess.seconds == guess.eval_seconds * guess.evals
    assert 1e-7 < guess.eval_seconds < 0.1
    wide = estimate.check_time("prompt", _prompt_fields(2, 3, 50))  # r = n(T − 1) = 4
    assert wide.evals == 2 * (estimate.BASE_EVALS + estimate.JACOBIANS * 5)
    cross = _prompt_fields(3, 4, 3) | {"Z": np.eye(3)}  # one query per input
    assert estimate.check_time("cross", cross).evals == 2 * (3000 + 70 * (9 + 1))  # d² = 9


def test_no_estimate_where_the_engine_does_not_decide_or_the_fields_are_incomplete():
    from models.check import estimate

    assert estimate.check_time("embedding", _prompt_fields(2, 3, 4)) is None
    assert estimate.check_time("ntp", {"embeddings": np.eye(3)}) is None
    assert estimate.check_time("prompt", {"X": np.zeros((2, 3, 4)), "y": None}) is None


def test_the_estimate_reads_in_the_right_unit():
    from models.check.estimate import Estimate

    assert (
        Estimate(7.1, 5.4e-4, 13_140)
        .text()
        .startswith(
            "estimated ~7.1 s (one gradient evaluation takes 0.54 ms here, a typical certified "
            "decision ~13,140 of them"
        )
    )
    assert "~2.5 min" in Estimate(150.0, 2e-5, 7_500_000).text()
    assert "takes 20 µs" in Estimate(150.0, 2e-5, 7_500_000).text()
    assert "~1.5 h" in Estimate(5400.0, 1e-3, 5_400_000).text()


def test_a_large_instance_is_warned_about_with_its_estimate(monkeypatch, capsys):
    monkeypatch.delenv("ATTN_PROGRESS", raising=False)
    fields = _prompt_fields(60, 40, 50)  # 60·39·50 = 117,000 entries: large
    assert cli._predict_talking(_slow, "prompt", fields, ("X", "y")) == {"args": 2}
    first = capsys.readouterr().err.splitlines()[0]
    assert "): estimated ~" in first and "gradient evaluation takes" in first
