"""The verdict gate: theorems/verdicts.lock pins each claim's verdict; a run that differs fails.

Inner pytest sessions on small throwaway claims (fast), and the proof on a real model: with
the sign of the softmax-gradient term flipped, the gate fails naming the claim.
"""

import json
import types
from pathlib import Path

import pytest
import repo_copy

from theorems.framework import evidence, registry, replay
from theorems.framework import lock as locks

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parent.parent

CLAIMS = (
    repo_copy.CLAIM_HELPER
    + """
import os
from hypothesis import given, strategies as st
from theorems import claim, evidence


@C("T-HOLDS", examples=20)
@given(x=st.integers(-100, 100))
def test_holds(x):
    assert x * x >= 0

@C("T-FLIP", examples=20)
@given(x=st.integers(0, 1000))
def test_flip(x):
    evidence.instance({"x": x})
    assert x < (10 if os.environ.get("FLIP") else 10_000)

@C("T-CONTROL", kind="control", expected="refuted")
@given(x=st.integers(0, 1000))
def test_control(x):
    assert x < 10

@C("T-CONJ", kind="conjecture", expected="unknown")
@given(x=st.integers(0, 1000))
def test_conj(x):
    assert x < 500
"""
)

LOCK = """\
# profile: ci
T-HOLDS      holds     2306.13596
T-FLIP       holds     2306.13596
T-CONTROL    refuted   2306.13596
"""


@pytest.fixture
def inner(pytester, monkeypatch):
    """Run CLAIMS (plus `extra`) in a subprocess with the given lock text; return
    (result, report or None, folder)."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    for var in (
        "CI",
        "FLIP",
        "ATTN_NO_GATE",
        "ATTN_VERDICT_LOCK",
        "ATTN_CLAIMS_REPORT",
        "ATTN_HYPOTHESIS_PROFILE",
        "ATTN_COUNTEREXAMPLES",
        "PYTEST_XDIST_WORKER",
    ):
        monkeypatch.delenv(var, raising=False)  # fmt: skip
    pytester.makeini("[pytest]\n")

    def run(lock=LOCK, *args, extra=""):
        pytester.makepyfile(test_claims=CLAIMS + extra)
        if lock is not None:
            (pytester.path / "theorems").mkdir(exist_ok=True)
            (pytester.path / "theorems" / "verdicts.lock").write_text(lock)
        result = pytester.runpytest_subprocess(
            "-p", "theorems.framework.plugin", "--rootdir", str(pytester.path),
            "-W", "ignore::DeprecationWarning", *args,
        )  # fmt: skip
        path = pytester.path / "reports" / "claims.json"
        return result, (json.loads(path.read_text()) if path.exists() else None), pytester.path

    return run


def verdicts(report):
    return {c["id"]: c["verdict"] for c in report["claims"]}


def test_a_matching_lock_passes(inner):
    result, report, _ = inner()
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["attention-theorems: verdict gate passed: 3 claims match theorems/verdicts.lock; "
         "1 conjectures not gated"]
    )  # fmt: skip
    assert verdicts(report)["T-CONJ"] == "refuted"  # reported, never gated


def test_b_a_changed_verdict_fails_with_a_diff(inner, monkeypatch):
    monkeypatch.setenv("FLIP", "1")
    result, report, path = inner()
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*= verdict gate FAILED: 1 problems (theorems/verdicts.lock) =*",
            "claim T-FLIP: lock says holds, this run says refuted",
            "    statement: a statement of T-FLIP",
            '    counterexample (saved to theorems/counterexamples/T-FLIP.json): {"x":10}',
            "    Falsifying example: test_flip(",
            "        x=10,",
            "to accept these verdicts on purpose: python -m theorems lock --update*",
        ]
    )
    # The report and every other verdict were recorded before the gate failed.
    assert verdicts(report) == {
        "T-HOLDS": "holds", "T-FLIP": "refuted", "T-CONTROL": "refuted", "T-CONJ": "refuted",
    }  # fmt: skip
    saved = json.loads((path / "theorems" / "counterexamples" / "T-FLIP.json").read_text())
    assert saved["counterexample"]["recorded"] == {"x": 10}  # not an instance of a model
    assert saved["counterexample"]["example"] == "@example(x=10)"
    assert saved["replay"] == {"x": {"value": 10}}


def test_the_lock_decides_where_it_differs_from_expected(inner):
    # T-FLIP is expected to hold and holds; pinned as refuted, the run fails.
    result, _, _ = inner(LOCK.replace("T-FLIP       holds", "T-FLIP       refuted"))
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["claim T-FLIP: verdict holds, lock says refuted (the paper expects holds; *)",
         "claim T-FLIP: lock says refuted, this run says holds"]
    )  # fmt: skip


def test_the_lock_wins_for_a_pinned_refutation(inner, monkeypatch):
    monkeypatch.setenv("FLIP", "1")
    result, _, _ = inner(LOCK.replace("T-FLIP       holds", "T-FLIP       refuted"))
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        ["*note: T-FLIP: the lock pins refuted while the claim expects holds (the lock decides*"]
    )


@pytest.mark.parametrize(
    "lock, message",
    [
        (LOCK.replace("T-FLIP       holds     2306.13596\n", ""),
         "claim T-FLIP: not in the lock theorems/verdicts.lock (this run says holds); pin it "
         "with `python -m theorems lock --update`*"),
        (LOCK + "T-GONE holds\n",
         "lock line 5: T-GONE names no claim (renamed or deleted?); remove the line or run*"),
        (LOCK + "T-CONJ refuted\n",
         "lock line 5 pins T-CONJ, a conjecture (expected='unknown'), which never gates*"),
    ],
    ids=["missing", "no-claim", "conjecture"],
)  # fmt: skip
def test_c_lock_problems_fail_with_one_clear_message(inner, lock, message):
    result, report, _ = inner(lock)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*verdict gate FAILED: 1 problems*", message])
    assert len(report["claims"]) == 4  # the report is written regardless


def test_c_a_malformed_lock_names_every_bad_line(inner):
    bad = "T-HOLDS holds\nT-NEW passes\nT-LONELY\nt-lower holds\n"
    result, report, _ = inner(LOCK + bad)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*verdict gate FAILED: 1 problems*",
            "malformed verdict lock */theorems/verdicts.lock:",
            "  line 5: T-HOLDS is pinned twice (lines 2 and 5)",
            "  line 6: unknown verdict 'passes' for T-NEW (choose one of holds, refuted, "
            "inconclusive, vacuous, error)",
            "  line 7: expected 'CLAIM-ID VERDICT [PAPER]', got 'T-LONELY'",
            "  line 8: 't-lower' is not a claim id (e.g. MM-SVM-MARGIN)",
        ]
    )
    assert len(report["claims"]) == 4
    # With no usable lock, the items are judged by their `expected`: all as expected here.
    result.assert_outcomes(passed=4)


def test_a_partial_run_checks_only_what_ran(inner):
    result, _, _ = inner(LOCK, "-k", "T-HOLDS or T-CONJ")
    assert result.ret == 0
    result.stdout.fnmatch_lines(
        [
            "attention-theorems: verdict gate passed: 1 claims match theorems/verdicts.lock; "
            "1 conjectures not gated",
            "attention-theorems: note: partial run: 2 locked claims were not run and not "
            "checked (run `python -m pytest theorems/` for the full gate)",
        ]
    )


def test_the_gate_can_be_turned_off_but_not_under_ci(inner, monkeypatch):
    pinned_wrong = LOCK.replace("T-HOLDS      holds", "T-HOLDS      refuted")
    result, _, _ = inner(pinned_wrong, "--no-gate")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict gate off (--no-gate): theorems/verdicts.lock not*"])
    monkeypatch.setenv("ATTN_NO_GATE", "1")
    assert inner(pinned_wrong)[0].ret == 0
    monkeypatch.setenv("CI", "true")
    result, _, _ = inner(pinned_wrong)
    assert result.ret == 1
    result.stdout.fnmatch_lines(["*note: ATTN_NO_GATE is ignored under CI"])


def test_the_gate_runs_on_the_merged_xdist_report(inner, monkeypatch):
    monkeypatch.setenv("FLIP", "1")
    result, report, _ = inner(LOCK, "-n", "2")
    assert result.ret == 1
    result.stdout.fnmatch_lines(["claim T-FLIP: lock says holds, this run says refuted"])
    assert len(report["claims"]) == 4


SKIPPING = """
import pytest

@C("T-DATA", kind="experiment", runs_only_with="data on disk: $T_DATA")
def test_data():
    if not os.environ.get("T_DATA"):
        pytest.skip("no data: set T_DATA")
    assert os.environ["T_DATA"] == "good"

@C("T-VANISHES", kind="experiment")
def test_vanishes():
    pytest.skip("skipped by mistake")

@C("T-XFAIL", kind="experiment")
@pytest.mark.xfail(reason="ran, and failed as marked")
def test_xfail():
    assert False
"""


def test_a_claim_that_needs_data_is_reported_not_run_and_its_lock_line_unchecked(
    inner, monkeypatch
):
    pinned = LOCK + "T-DATA holds\n"
    # Under xdist: the skip reaches the controller through the workers' evidence files.
    result, report, _ = inner(pinned, "-k", "not T-VANISHES", "-n", "2", extra=SKIPPING)
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "attention-theorems: 4 claims: * 1 not run — reports/claims.json",
            "attention-theorems: T-DATA not run: no data: set T_DATA",
            "*verdict gate passed: 3 claims match*",
            "attention-theorems: note: claim T-DATA not run (no data: set T_DATA): lock line 5 "
            "(holds) not checked",
        ]
    )
    assert "T-DATA" not in verdicts(report) and report["summary"]["skipped"] == 1
    (skip,) = report["skipped"]  # an xfail ran: it is no claim "not run"
    assert skip["id"] == "T-DATA" and skip["reason"] == "no data: set T_DATA"
    assert skip["runs_only_with"] == "data on disk: $T_DATA"
    # With its data the claim runs, and the lock line is checked like any other.
    monkeypatch.setenv("T_DATA", "bad")
    result, report, _ = inner(pinned, "-k", "not T-VANISHES", extra=SKIPPING)
    assert result.ret == 1 and report["skipped"] == []
    result.stdout.fnmatch_lines(["claim T-DATA: lock says holds, this run says refuted"])
    monkeypatch.setenv("T_DATA", "good")
    assert inner(pinned, "-k", "not T-VANISHES", extra=SKIPPING)[0].ret == 0


def test_a_pinned_claim_that_skips_without_saying_why_fails_the_gate(inner):
    result, report, _ = inner(LOCK + "T-VANISHES holds\n", "-k", "T-VANISHES", extra=SKIPPING)
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        ["claim T-VANISHES: collected but gave no verdict (skipped?); lock line 5 says holds"]
    )
    assert [s["id"] for s in report["skipped"]] == ["T-VANISHES"]  # still in the report


def test_no_lock_is_a_note_outside_ci(inner):
    result, _, _ = inner(None)
    assert result.ret == 0
    result.stdout.fnmatch_lines(["*verdict gate not applied: no lock at theorems/verdicts.lock*"])


# --------------------------------------------------------------------------- lock file, CLI


def test_parse_collects_every_problem_with_its_line():
    text = "# c\nMM-A holds 2306.13596 # trailing\nMM-A refuted\nMM-B maybe\nbad\n"
    with pytest.raises(locks.LockError) as err:
        locks.parse(text, "x.lock")
    assert err.value.problems == [
        "line 3: MM-A is pinned twice (lines 2 and 3)",
        "line 4: unknown verdict 'maybe' for MM-B (choose one of holds, refuted, inconclusive, "
        "vacuous, error)",
        "line 5: expected 'CLAIM-ID VERDICT [PAPER]', got 'bad'",
    ]
    lock = locks.parse("# profile: dev\nMM-A holds two words\n")
    assert lock.profile == "dev" and lock.entries["MM-A"].paper == "two words"


def test_render_and_update_round_trip():
    claims = [
        {"id": "MM-A", "verdict": "holds", "paper": "p", "expected": "holds"},
        {"id": "MM-C", "verdict": "refuted", "paper": "p", "expected": "refuted"},
        {"id": "MM-CONJ", "verdict": "refuted", "paper": "p", "expected": "unknown"},
    ]
    old = locks.parse("MM-A refuted p\nMM-B holds p\nMM-GONE holds p\n")
    known = {"MM-A": "holds", "MM-B": "holds", "MM-C": "refuted", "MM-CONJ": "unknown"}
    rows, changes = locks.update(old, claims, known=known, order=["MM-A", "MM-B", "MM-C"])
    assert rows == [("MM-A", "holds", "p"), ("MM-B", "holds", "p"), ("MM-C", "refuted", "p")]
    assert changes == [
        "~ MM-A: refuted -> holds", "+ MM-C: refuted", "- MM-GONE: names no claim, removed",
    ]  # fmt: skip
    lock = locks.parse(locks.render(rows, "ci"))
    assert lock.profile == "ci" and [e.id for e in lock.entries.values()] == [
        "MM-A",
        "MM-B",
        "MM-C",
    ]
    assert locks.gate(lock, claims, known=known).ok


def test_lock_command_checks_and_updates(tmp_path, capsys):
    from theorems.framework import cli

    report = tmp_path / "claims.json"
    claims = [{"id": "T-A", "verdict": "holds", "paper": "p", "expected": "holds"}]
    report.write_text(json.dumps({"profile": "ci", "claims": claims}))
    lock = tmp_path / "verdicts.lock"
    args = ["lock", "--from", str(report), "--lock", str(lock)]
    assert cli.main(args) == 2 and "no verdict lock" in capsys.readouterr().err
    assert cli.main([*args, "--update"]) == 0
    assert "+ T-A: holds" in capsys.readouterr().out
    assert locks.read(lock).verdict("T-A") == "holds"
    assert cli.main(args) == 0
    claims[0]["verdict"] = "refuted"
    report.write_text(json.dumps({"profile": "ci", "claims": claims}))
    assert cli.main(args) == 1
    assert "claim T-A: lock says holds, this run says refuted" in capsys.readouterr().out
    lock.write_text("T-A holds\nT-A holds\n")
    assert cli.main(args) == 2
    assert "T-A is pinned twice" in capsys.readouterr().err


# --------------------------------------------------------------------------- the proof

# A test-only pytest plugin: the model with the sign of the softmax-gradient term flipped.
BROKEN = """
def pytest_configure(config):
    from models.attention import PromptProblem

    right = PromptProblem.gradient_log_np

    def flipped(self, p):
        log_scale, vec = right(self, p)
        return log_scale, -vec

    PromptProblem.gradient_log_np = flipped
"""


def test_the_descent_probe_holds_on_the_real_model(tmp_path, monkeypatch):
    monkeypatch.setattr(replay, "_store", tmp_path)  # no saved counterexample to replay
    module = types.ModuleType("gate_descent_probe")
    with registry.isolated():
        exec(compile(repo_copy.DESCENT, "gate_descent_probe.py", "exec"), module.__dict__)
        collector = evidence.Collector()
        with evidence.collecting(collector):
            module.test_descent()
    assert collector.examples == 10


def test_d_a_broken_model_makes_the_gate_fail(tmp_path):
    root = repo_copy.make(tmp_path / "repo", {"claims_gate_probe.py": repo_copy.DESCENT})
    (root / "broken_gradient.py").write_text(BROKEN)
    (root / "theorems" / "verdicts.lock").write_text("GATE-DESCENT  holds  2306.13596\n")
    done = repo_copy.run(root, "-m", "pytest", "theorems/", "-q", "-p", "broken_gradient")
    assert done.returncode == 1, done.stdout
    out = done.stdout
    assert "claim GATE-DESCENT: lock says holds, this run says refuted" in out
    assert "counterexample (saved to theorems/counterexamples/GATE-DESCENT.json): " in out
    assert '{"model":"prompt","X":[[[' in out  # the instance, in the check CLI's schema
    saved = json.loads((root / "theorems/counterexamples/GATE-DESCENT.json").read_text())
    assert saved["model"] == "prompt" and set(saved["replay"]) == {"inst", "r"}
