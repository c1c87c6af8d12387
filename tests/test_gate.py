"""The verdict gate: theorems/verdicts.lock pins each claim's verdict; a run that differs fails.

Inner pytest sessions on small throwaway claims (fast), and the proof on a real model: with
the sign of the softmax-gradient term flipped, the gate fails naming the claim.
"""

import json
import shlex
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
         "with `python -m theorems lock --update --lock theorems/verdicts.lock "
         "--from reports/claims.json` once the verdict is the one you mean"),
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
            "inconclusive, vacuous, error; or not-run, nothing pinned)",
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


NIGHTLY = """
from theorems.framework.registry import NIGHTLY_ONLY

@C("T-NIGHTLY", kind="experiment", runs_only_with=NIGHTLY_ONLY, examples=7)
@given(x=st.integers(0, 10_000))
def test_nightly(x):
    evidence.instance({"x": x})
    assert x < 100_000
    open(os.environ["T_DRAWN"], "a").write("drawn\\n")
"""


def test_a_nightly_only_claim_is_not_run_elsewhere_and_draws_nothing(inner, monkeypatch, tmp_path):
    """A large-rung claim (NIGHTLY_ONLY) is skipped before Hypothesis draws under ci, reported
    as not run with its lock line unchecked; under nightly it runs and is judged, on its own
    budget (examples=7 is its nightly budget, not a ci budget scaled 20-fold)."""
    drawn = tmp_path / "drawn"
    monkeypatch.setenv("T_DRAWN", str(drawn))
    pinned = LOCK + "T-NIGHTLY holds\n"
    result, report, _ = inner(pinned, "-k", "T-NIGHTLY or T-HOLDS", extra=NIGHTLY)
    assert result.ret == 0, result.stdout.str()
    (skip,) = report["skipped"]
    assert skip["id"] == "T-NIGHTLY" and "nightly" in skip["reason"]
    assert not drawn.exists()  # skipped in setup: not one example drawn
    result.stdout.fnmatch_lines(["*claim T-NIGHTLY not run*lock line * (holds) not checked"])
    monkeypatch.setenv("ATTN_HYPOTHESIS_PROFILE", "nightly")
    result, report, _ = inner(pinned, "-k", "T-NIGHTLY", extra=NIGHTLY)
    assert report["skipped"] == [] and verdicts(report)["T-NIGHTLY"] == "holds"
    (row,) = [c for c in report["claims"] if c["id"] == "T-NIGHTLY"]
    assert row["budget"] == 7 and row["examples"] == 7
    assert drawn.read_text().count("drawn") == 7


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
        "vacuous, error; or not-run, nothing pinned)",
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
    done = locks.update(old, claims, known=known, order=["MM-A", "MM-B", "MM-C"])
    rows, changes = done.rows, done.changes
    assert not done.kept and not done.problems
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


# --------------------------------------------------------------------------- the lock in use

OTHER_LOCK_HINT = (
    "to accept these verdicts on purpose: python -m theorems lock --update --lock mine.lock "
    "--from reports/claims.json, and commit mine.lock"
)


def test_a_gate_failing_under_verdict_lock_names_that_lock_and_its_hint_rewrites_it(
    inner, pytester, monkeypatch, tmp_path, capsys
):
    from theorems.framework import cli

    monkeypatch.setenv("FLIP", "1")
    mine = LOCK.replace("T-HOLDS      holds     2306.13596\n", "")
    (pytester.path / "mine.lock").write_text(mine)
    # theorems/verdicts.lock (LOCK) is there too: not the lock in use, and must stay as it is.
    result, report, path = inner(LOCK, "--verdict-lock", "mine.lock")
    assert result.ret == 1
    result.stdout.fnmatch_lines(
        [
            "*= verdict gate FAILED: 2 problems (mine.lock) =*",
            "claim T-HOLDS: not in the lock mine.lock (this run says holds); pin it with "
            "`python -m theorems lock --update --lock mine.lock --from reports/claims.json` "
            "once the verdict is the one you mean",
            "claim T-FLIP: lock says holds, this run says refuted",
            OTHER_LOCK_HINT,
        ]
    )
    (hint,) = [line for line in result.outlines if line.startswith("to accept these")]
    assert "verdicts.lock" not in hint
    # Following the hint, where pytest ran, rewrites mine.lock and nothing else. (The CLI's
    # defaults are pointed at an empty folder: a hint without --lock/--from fails, and never
    # rewrites this checkout's lock.)
    monkeypatch.setattr(cli, "REPO_ROOT", tmp_path / "no-checkout")
    monkeypatch.chdir(path)
    checkout_lock = (path / "theorems" / "verdicts.lock").read_text()
    argv = shlex.split(hint.removeprefix("to accept these verdicts on purpose: ").split(",")[0])
    assert argv[:3] == ["python", "-m", "theorems"]
    assert cli.main(argv[3:]) == 0
    assert "+ T-HOLDS: holds" in capsys.readouterr().out
    assert locks.read(path / "mine.lock").verdict("T-FLIP") == "refuted"
    assert (path / "theorems" / "verdicts.lock").read_text() == checkout_lock
    assert verdicts(report)["T-FLIP"] == "refuted"


def _state(tmp_path, lock_path, report_path):
    from theorems.framework import session

    state = session.RunState(report_path, "run", tmp_path / "run", "main", False)
    state.lock_path, state.lock, state.bases = lock_path, locks.read(lock_path), (tmp_path,)
    state.summary = dict.fromkeys(
        ("claims", "holds", "refuted_as_expected", "unexpected", "inconclusive", "vacuous"), 0
    )
    state.summary["error"] = 0
    return state


def test_every_gate_hint_names_the_lock_and_the_report_in_use(tmp_path):
    from theorems.framework import session

    lock = tmp_path / "locks" / "mine.lock"
    lock.parent.mkdir()
    lock.write_text("T-A holds p\nT-GONE holds p\n")
    report = tmp_path / "out" / "claims.json"
    claims = [
        {"id": "T-A", "verdict": "refuted", "expected": "holds"},
        {"id": "T-NEW", "verdict": "holds", "expected": "holds"},
    ]
    state = _state(tmp_path, lock, report)
    session.run_gate(state, claims, [], None)
    command = "python -m theorems lock --update --lock locks/mine.lock --from out/claims.json"
    assert session.update_command(state) == command
    text = "\n".join(line for _, line, _ in session.summary_lines(state, verbose=False))
    assert f"pin it with `{command}` once" in text  # T-NEW
    assert f"remove the line or run `{command}`" in text  # T-GONE, once the lock is complete
    assert f"to accept these verdicts on purpose: {command}, and commit locks/mine.lock" in text
    assert "verdicts.lock" not in text
    # No lock at that path: the note says how to create that one.
    lock.unlink()
    state = _state(tmp_path, lock, report)
    session.run_gate(state, claims, [], None)
    assert state.gate_lines == [
        f"verdict gate not applied: no lock at locks/mine.lock (create it with `{command}` "
        "after a full run)"
    ]


def test_update_command_adds_lock_and_from_only_where_they_are_not_the_defaults(tmp_path):
    root = tmp_path / "checkout"
    default = (root / locks.DEFAULT_LOCK, root / "reports" / "claims.json")
    assert locks.update_command(*default, root=root) == "python -m theorems lock --update"
    assert locks.update_command(
        root / locks.DEFAULT_LOCK, tmp_path / "run 2" / "claims.json", cwd=tmp_path, root=root
    ) == "python -m theorems lock --update --from 'run 2/claims.json'"  # fmt: skip
    assert locks.update_command(Path("../caller/c.lock"), None, root=root) == (
        "python -m theorems lock --update --lock ../caller/c.lock"
    )  # fmt: skip
    assert locks.update_command(Path("/elsewhere/c.lock"), cwd=tmp_path, root=root) == (
        "python -m theorems lock --update --lock /elsewhere/c.lock"
    )  # fmt: skip


def test_lock_update_with_lock_rewrites_that_file_only(tmp_path, monkeypatch, capsys):
    from theorems.framework import cli

    checkout = tmp_path / "checkout"  # the CLI's defaults: a lock and a report that must stay
    (checkout / "theorems").mkdir(parents=True)
    (checkout / "reports").mkdir()
    (checkout / "theorems" / "verdicts.lock").write_text("T-A refuted p\n")
    (checkout / "reports" / "claims.json").write_text('{"claims": []}')
    monkeypatch.setattr(cli, "REPO_ROOT", checkout)
    report = tmp_path / "claims.json"
    claims = [{"id": "T-A", "verdict": "holds", "paper": "p", "expected": "holds"}]
    report.write_text(json.dumps({"profile": "ci", "claims": claims}))
    mine = tmp_path / "mine.lock"
    mine.write_text("T-A refuted p\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["lock", "--update", "--lock", "mine.lock", "--from", str(report)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "~ T-A: refuted -> holds", "mine.lock: 1 claims pinned, 1 changed",
    ]  # fmt: skip
    assert locks.read(mine).verdict("T-A") == "holds"
    assert (checkout / "theorems" / "verdicts.lock").read_text() == "T-A refuted p\n"
    # The rewritten lock's own header says how to rewrite it: with --lock, never the
    # checkout's command alone.
    text = mine.read_text()
    assert "rewrite it with: python -m theorems lock --update --lock <this file>" in text
    assert "rewrite it with: python -m theorems lock --update\n" not in text


DATA_SKIP = {
    "id": "T-DATA", "paper": "p", "kind": "experiment", "statement": "s", "provenance": "[V]",
    "expected": "holds", "reason": "no data: set T_DATA", "runs_only_with": "data on disk",
    "nodeid": "test_claims.py::test_data",
}  # fmt: skip


def test_lock_update_records_a_claim_not_run_here_and_it_never_passes_unseen(
    tmp_path, monkeypatch, capsys
):
    """EMB-REAL without its data: `lock --update` on a full report succeeds, writing the claim
    as not-run (or keeping its pin), and a run that gives it a verdict fails the gate."""
    from theorems.framework import cli

    checkout = tmp_path / "checkout"
    lock = checkout / "theorems" / "verdicts.lock"  # the checkout's: the claims are known
    monkeypatch.setattr(cli, "REPO_ROOT", checkout)
    known = {"T-A": "holds", "T-DATA": "holds", "T-CONJ": "unknown"}
    monkeypatch.setattr(cli, "_known_claims", lambda: (known, list(known), None))
    report = tmp_path / "claims.json"

    def write(claims, skipped):
        report.write_text(json.dumps({"profile": "ci", "claims": claims, "skipped": skipped}))

    def lock_cli(*extra):
        status = cli.main(["lock", *extra, "--from", str(report), "--lock", str(lock)])
        return status, capsys.readouterr().out.splitlines()

    a = {"id": "T-A", "verdict": "holds", "paper": "p", "expected": "holds"}
    write([a], [DATA_SKIP])
    status, out = lock_cli("--update")
    assert status == 0, out
    assert out == [
        "+ T-A: holds",
        "+ T-DATA: not-run (not run here: no data: set T_DATA)",
        f"{lock}: 1 claims pinned, 1 recorded as not run, 2 changed",
    ]
    pinned = locks.read(lock)
    assert pinned.entries["T-DATA"].verdict == "not-run" and pinned.verdict("T-DATA") is None
    assert "\nT-DATA  not-run       p\n" in lock.read_text()
    # The same report against the new lock: matches, the line noted as not checked.
    status, out = lock_cli()
    assert status == 0, out
    assert (
        "note: claim T-DATA not run (no data: set T_DATA): lock line 10 (not-run) not checked"
        in out
    )
    # Rewritten again without the data: said so, still not-run.
    assert lock_cli("--update") == (
        0,
        [
            "= T-DATA: not run here (no data: set T_DATA), still not-run",
            f"{lock}: 1 claims pinned, 1 recorded as not run, 0 changed",
        ],
    )
    # With the data, the claim runs: not-run pins nothing, so its verdict fails the gate...
    write([a, {**a, "id": "T-DATA"}], [])
    status, out = lock_cli()
    assert status == 1
    assert (
        f"claim T-DATA: lock line 10 of {lock} records it as not run, nothing pinned (this run "
        f"says holds); pin it with `python -m theorems lock --update --lock {lock} --from "
        f"{report}` once the verdict is the one you mean"
    ) in out
    assert not locks.gate(pinned, [a, {**a, "id": "T-DATA"}], known=known).ok
    # ... until it is pinned on purpose; and a later run without the data keeps that pin.
    assert lock_cli("--update")[1][0] == "~ T-DATA: not-run -> holds"
    write([a], [DATA_SKIP])
    assert lock_cli("--update") == (
        0,
        [
            "= T-DATA: not run here (no data: set T_DATA), pin kept (holds)",
            f"{lock}: 2 claims pinned, 0 changed",
        ],
    )
    assert locks.read(lock).verdict("T-DATA") == "holds"


def test_lock_update_fails_on_a_skip_that_declares_nothing_and_on_a_missing_claim():
    vanished = {**DATA_SKIP, "id": "T-VANISHES", "runs_only_with": None, "reason": "oops"}
    old = locks.parse("T-A holds p\nT-VANISHES holds p\n")
    known = {"T-A": "holds", "T-VANISHES": "holds", "T-DATA": "holds", "T-B": "holds"}
    skipped = [vanished, {**DATA_SKIP, "id": "T-DATA"}]
    done = locks.update(old, [], known=known, order=list(known), skipped=skipped)
    assert done.rows == [
        ("T-A", "holds", "p"),
        ("T-VANISHES", "holds", "p"),
        ("T-DATA", "not-run", "p"),
    ]
    assert done.problems == [
        "! T-VANISHES: skipped (oops) without declaring what it needs (runs_only_with): pin "
        "kept (holds), and the gate fails on it while it gives no verdict",
        "! T-B: not in the report, so not pinned (run the full suite first)",
    ]
    done = locks.update(None, [], known=known, skipped=[vanished], unfinished=["T-DATA"])
    assert done.rows == [] and done.problems == [
        "! T-VANISHES: skipped (oops) without declaring what it needs (runs_only_with), so not "
        "pinned",
        "! T-A: not in the report, so not pinned (run the full suite first)",
        "! T-DATA: did not finish in the report, so not pinned (run the full suite first)",
        "! T-B: not in the report, so not pinned (run the full suite first)",
    ]


# --------------------------------------------------------------------------- the proof

# A test-only pytest plugin: the model with the sign of the softmax-gradient term flipped.
BROKEN = """
def pytest_configure(config):
    from models.problems.attention import PromptProblem

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


def test_lock_update_from_another_profile_pins_only_the_claims_that_run_there_alone(
    tmp_path, monkeypatch, capsys
):
    """A nightly report updates the ci lock's nightly-only pins and nothing else, and the
    lock keeps its profile (before, its header became `# profile: nightly`)."""
    from theorems.framework import cli

    checkout = tmp_path / "checkout"
    (checkout / "theorems").mkdir(parents=True)
    lock = checkout / "theorems" / "verdicts.lock"
    lock.write_text("# profile: ci\nT-A holds p\nT-BIG inconclusive p\n")
    monkeypatch.setattr(cli, "REPO_ROOT", checkout)
    monkeypatch.setattr(
        cli, "_known_claims", lambda: ({"T-A": "holds", "T-BIG": "holds"}, ["T-A", "T-BIG"], None)
    )
    monkeypatch.setattr(cli, "_profile_only_claims", lambda profile: {"T-BIG"})
    monkeypatch.setattr(cli, "_write_index", lambda: None)
    claims = [
        {"id": "T-A", "verdict": "refuted", "paper": "p", "expected": "holds"},
        {"id": "T-BIG", "verdict": "holds", "paper": "p", "expected": "holds"},
    ]
    report = tmp_path / "nightly.json"
    report.write_text(json.dumps({"profile": "nightly", "claims": claims}))
    assert cli.main(["lock", "--update", "--lock", str(lock), "--from", str(report)]) == 0
    captured = capsys.readouterr()
    assert "only the 1 claims that run under 'nightly' alone are updated" in captured.err
    new = locks.read(lock)
    assert new.profile == "ci"
    assert new.verdict("T-BIG") == "holds" and new.verdict("T-A") == "holds"
    # the same report under the lock's own profile updates everything
    report.write_text(json.dumps({"profile": "ci", "claims": claims}))
    assert cli.main(["lock", "--update", "--lock", str(lock), "--from", str(report)]) == 0
    assert locks.read(lock).verdict("T-A") == "refuted"


def test_lock_update_from_another_profile_refuses_a_lock_it_cannot_read_claims_for(
    tmp_path, capsys
):
    from theorems.framework import cli

    lock = tmp_path / "mine.lock"
    lock.write_text("# profile: ci\nT-A holds p\n")
    report = tmp_path / "nightly.json"
    claims = [{"id": "T-A", "verdict": "refuted", "paper": "p", "expected": "holds"}]
    report.write_text(json.dumps({"profile": "nightly", "claims": claims}))
    assert cli.main(["lock", "--update", "--lock", str(lock), "--from", str(report)]) == 2
    assert "is not known here" in capsys.readouterr().err
    assert locks.read(lock).verdict("T-A") == "holds"


def test_profile_only_claims_are_the_nightly_only_ones():
    from theorems.framework import cli

    cli._known_claims()  # imports the claim modules
    only = cli._profile_only_claims("nightly")
    assert "MM-THM-L-RANDOM-LARGE" in only and "MM-THM-L-RANDOM" not in only
    assert cli._profile_only_claims("ci") == set()
