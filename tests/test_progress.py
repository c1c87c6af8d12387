"""What a claims run prints as it goes (theorems.framework.progress): the plan at the start, a
progress line while a claim runs long, each claim's evidence as it finishes."""

import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import repo_copy

from theorems.framework import evidence, progress

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parent.parent

# --------------------------------------------------------------------------- the pieces


def test_plan_counts_claims_items_and_budgets():
    found = progress.plan([("A", 20), ("B", 300), ("B", 300), ("C", 1), ("D", 20)])
    assert found == {"claims": 4, "items": 5, "budgets": [1, 20, 20, 600]}
    assert progress.plan_text(found) == (
        "4 claims (5 items), 641 examples in all; budgets 1–600, median 20"
    )
    many = progress.plan([(f"X{i}", 100) for i in range(143)])
    assert progress.plan_text(many) == "143 claims, 14 300 examples in all; budget 100"
    assert progress.plan_text(progress.plan([("A", 2), ("B", 5)])).endswith("median 3.5")


def test_worst_slack_is_the_largest_ratio_and_nan_counts_as_worst():
    assert progress.worst_slack({}) is None
    slacks = {"descent": {"ratio": 0.031}, "margin": {"ratio": 0.5}}
    assert progress.worst_slack(slacks) == "0.5 (margin)"
    slacks["broken"] = {"ratio": math.nan}
    assert progress.worst_slack(slacks) == "nan (broken)"


def test_evidence_of_a_claim_item_and_its_closing_text():
    collector = evidence.Collector(targets=False)
    with evidence.collecting(collector):
        for value in (0.031, 0.02):
            with evidence.example():
                evidence.slack("descent", value, 1.0)
        with pytest.raises(evidence.RejectedExample), evidence.example():
            evidence.reject("no")
    collector.seconds = 61.2
    props = dict(progress.evidence_props(collector))
    assert props == {"examples": 2, "tried": 3, "seconds": 61.2, "worst_slack": "0.031 (descent)"}
    shown = progress.evidence_text(props)
    assert shown == "2 examples of 3 tried, worst slack 0.031 (descent), 61 s"
    one = {"examples": 1, "tried": 1, "seconds": 0.043}
    assert progress.evidence_text(one) == "1 example, 0.04 s"
    assert progress.evidence_text({"claim": "T-SETUP"}) == ""  # a setup error ran nothing


def test_the_ticker_speaks_at_example_boundaries_once_per_interval():
    now = [100.0]
    lines: list[str] = []
    ticker = progress.Ticker("T-SLOW", 20, lines.append, 10.0, clock=lambda: now[0])
    collector = progress.TimedCollector(ticker, targets=False)
    with evidence.collecting(collector):
        for step in (4.0, 4.0, 4.0, 25.0, 1.0):  # 4, 8, 12 (a line), 37 (a line), 38
            now[0] += step
            with evidence.example():
                pass
    assert lines == [
        "attention-theorems: … T-SLOW: 3 examples (budget 20), 12 s",
        "attention-theorems: … T-SLOW: 4 examples (budget 20), 37 s",
    ]
    assert collector.examples == collector.tried == 5


def test_a_broken_ticker_leaves_the_evidence_alone():
    def broken(_collector):
        raise OSError("the terminal is gone")

    collector = progress.TimedCollector(broken, targets=False)
    with evidence.collecting(collector), evidence.example():
        evidence.slack("s", 1.0, 2.0)
    assert collector.examples == 1 and collector.worst_slack["s"]["ratio"] == 0.5


def test_switches(monkeypatch):
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    monkeypatch.delenv(progress.SECONDS_ENV, raising=False)
    assert progress.enabled(0) and progress.enabled(-1) and not progress.enabled(-2)
    assert progress.interval() == progress.DEFAULT_SECONDS
    for off in ("0", "false", "OFF", "no"):
        monkeypatch.setenv(progress.PROGRESS_ENV, off)
        assert not progress.enabled(1)
    monkeypatch.setenv(progress.PROGRESS_ENV, "1")
    assert progress.enabled(0)
    monkeypatch.setenv(progress.SECONDS_ENV, "0.5")
    assert progress.interval() == 0.5
    for bad in ("soon", "-1", "0", "nan"):
        monkeypatch.setenv(progress.SECONDS_ENV, bad)
        assert progress.interval() == progress.DEFAULT_SECONDS


def test_profile_and_gate_texts(monkeypatch):
    monkeypatch.setattr(progress, "current_profile", lambda: "ci")
    assert progress.profile_text() == "profile ci (derandomized)"
    random = SimpleNamespace(default=SimpleNamespace(derandomize=False))
    monkeypatch.setattr(progress, "settings", random)
    monkeypatch.setattr(progress, "current_profile", lambda: "ci-random")
    monkeypatch.setenv(progress.SEED_ENV, "1234")
    assert progress.profile_text() == "profile ci-random, seed 1234 (ATTN_HYPOTHESIS_SEED)"
    monkeypatch.delenv(progress.SEED_ENV)
    assert progress.profile_text().endswith("random draws (no ATTN_HYPOTHESIS_SEED)")

    lock = SimpleNamespace(entries={"A": 1, "B": 2}, profile="ci")
    path = "theorems/verdicts.lock"
    assert progress.gate_text(True, "", path, lock, None) == (
        "gate on, lock theorems/verdicts.lock (2 claims pinned, made under profile ci)"
    )
    assert progress.gate_text(False, "--no-gate", path, lock, None) == (
        "gate off (--no-gate); the lock theorems/verdicts.lock is not checked"
    )
    assert progress.gate_text(True, "", path, None, None).endswith("no lock at " + path)
    assert "malformed" in progress.gate_text(True, "", path, None, "line 3: bad")
    ci = progress.gate_text(True, "ATTN_NO_GATE is ignored under CI", path, lock, None)
    assert ci.startswith("gate on, lock") and ci.endswith("(ATTN_NO_GATE is ignored under CI)")


# --------------------------------------------------------------------------- end to end

# Each example of T-SLOW sleeps 0.25 s: with ATTN_PROGRESS_SECONDS=0.5, 6 examples make at
# least two progress lines (more on a loaded machine, never fewer). T-QUICK makes none.
CLAIMS = (
    repo_copy.CLAIM_HELPER
    + """
import time
from hypothesis import given, strategies as st
from theorems import evidence


@C("T-SLOW", examples=6)
@given(x=st.integers(0, 100))
def test_slow(x):
    time.sleep(0.25)
    evidence.slack("x/200", x, 200)


@C("T-QUICK", kind="experiment")
def test_quick():
    pass
"""
)
PLAN = (
    "attention-theorems: profile ci (derandomized); 2 claims, 7 examples in all; "
    "budgets 1–6, median 3.5"
)
GATE = "attention-theorems: gate on, but there is no lock at theorems/verdicts.lock"
TICK = "attention-theorems: … T-SLOW: * examples (budget 6), * s"


@pytest.fixture
def run(pytester, monkeypatch):
    """Run the two claims in a pytest subprocess with `args` and the environment `env`."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    for var in ("ATTN_CLAIMS_REPORT", "ATTN_HYPOTHESIS_PROFILE", "PYTEST_XDIST_WORKER", "CI"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.delenv(progress.PROGRESS_ENV, raising=False)
    monkeypatch.setenv(progress.SECONDS_ENV, "0.5")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_claims=CLAIMS)

    def go(*args, **env):
        for name, value in env.items():
            monkeypatch.setenv(name, value)
        result = pytester.runpytest_subprocess(
            "-p", "theorems.framework.plugin", "-p", "no:cacheprovider", "-p", "no:randomly",
            "--rootdir", str(pytester.path), "-W", "ignore::DeprecationWarning", *args,
        )  # fmt: skip
        assert result.ret == 0, result.stdout.str()
        return result

    return go


def test_a_serial_run_prints_its_plan_progress_and_each_claims_evidence(run):
    result = run("-v")
    result.stdout.fnmatch_lines(
        [
            "collecting ... collected 2 items",
            PLAN,
            GATE,
            TICK,
            TICK,
            "*::test_slow PASSED*",
            "    claim T-SLOW: holds (expected holds, as expected) — 6 examples, "
            "worst slack * (x/200), * s",
            "*::test_quick PASSED*",
            "    claim T-QUICK: holds (expected holds, as expected) — 1 example, * s",
        ]
    )
    ticks = [line for line in result.outlines if "… T-" in line]
    assert ticks and all("T-SLOW" in line for line in ticks)  # T-QUICK is quick


def test_an_xdist_run_prints_the_plan_once_and_the_workers_progress(run):
    # The workers' output is captured: their progress lines reach the controller's stderr.
    result = run("-n", "2")
    result.stdout.fnmatch_lines([PLAN, GATE])
    assert result.stdout.str().count(PLAN) == 1  # once, in the controller
    result.stderr.fnmatch_lines([f"[[]gw?[]] {TICK}", f"[[]gw?[]] {TICK}"])
    result.stdout.fnmatch_lines(["*claim T-SLOW: holds (expected holds, *) — 6 examples, *"])


def test_attn_progress_0_turns_the_progress_lines_off(run):
    result = run("-n", "2", ATTN_PROGRESS="0")
    assert "… T-SLOW" not in result.stdout.str() + result.stderr.str()
    result.stdout.fnmatch_lines([PLAN, "*claim T-SLOW: holds*— 6 examples*"])


def test_minus_qq_prints_no_plan_and_no_progress(run):
    result = run("-qq")
    assert "attention-theorems: profile" not in result.stdout.str()
    assert "… T-SLOW" not in result.stdout.str() + result.stderr.str()
