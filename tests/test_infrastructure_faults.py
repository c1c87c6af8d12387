"""Infrastructure faults (issue 9, item 7): a killed xdist worker, an interrupted run, a
corrupted counterexample file, an unreadable lock, a claim module that fails to import.

Each gives a message naming what went wrong, a report (reports/claims.json) of what did
finish, a failing run and verdict gate, and no claim silently missing: every claim of the run
is in the report, with a verdict or as "not run" with the reason. Inner pytest sessions on
a few trivial claims, as in tests/test_gate.py.
"""

import json
from pathlib import Path

import pytest
import repo_copy

from theorems.framework import cli

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parent.parent

HEADER = (
    repo_copy.CLAIM_HELPER
    + """
import os
import signal
from hypothesis import given, strategies as st
from theorems import claim

EXAMPLES = 5
"""
)

HOLDS = """
@C("{id}")
@given(x=st.integers(0, 10))
def test_{name}(x):
    assert x >= 0
"""


def _holding(*ids: str) -> str:
    """Source of a trivially holding claim per id, in this order."""
    return "".join(HOLDS.format(id=i, name=i.lower().replace("-", "_")) for i in ids)


def _lock(**pinned: str) -> str:
    return "".join(
        f"{claim_id.replace('_', '-')}  {v}  2306.13596\n" for claim_id, v in pinned.items()
    )


@pytest.fixture
def inner(pytester, monkeypatch):
    """run(files, lock text or None, *args, ini=...) -> (result, report or None, folder)."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    for var in (
        "CI", "ATTN_NO_GATE", "ATTN_VERDICT_LOCK", "ATTN_CLAIMS_REPORT",
        "ATTN_HYPOTHESIS_PROFILE", "ATTN_COUNTEREXAMPLES", "PYTEST_XDIST_WORKER",
        "PYTEST_ADDOPTS",
    ):  # fmt: skip
        monkeypatch.delenv(var, raising=False)

    def run(files, lock, *args, ini="[pytest]\n"):
        pytester.makeini(ini)
        pytester.makepyfile(**files)
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


def verdicts(report) -> dict[str, str]:
    return {c["id"]: c["verdict"] for c in report["claims"]}


def accounted(report) -> set[str]:
    """Every claim the report speaks of: with a verdict, or not run (with a reason)."""
    return {c["id"] for c in report["claims"]} | {s["id"] for s in report["skipped"]}


def gate_from_the_report(folder: Path, capsys) -> tuple[int, str]:
    """`python -m theorems lock` on the inner run's report and lock: (exit status, output)."""
    lock = folder / "theorems" / "verdicts.lock"
    status = cli.main(["lock", "--from", str(folder / "reports/claims.json"), "--lock", str(lock)])
    out = capsys.readouterr()
    return status, out.out + out.err


# --------------------------------------------------------------------------- 1. killed worker

KILLED = """
@C("I-KILLED")
@given(x=st.integers(0, 10))
def test_killed(x):
    os.kill(os.getpid(), signal.SIGKILL)  # the worker dies: no report, no evidence, no goodbye
"""


def test_a_killed_xdist_worker_is_an_error_and_the_others_are_reported(inner, capsys):
    claims = HEADER + _holding("I-A", "I-B") + KILLED + _holding("I-C")
    lock = _lock(I_A="holds", I_B="holds", I_KILLED="holds", I_C="holds")
    result, report, folder = inner({"test_claims": claims}, lock, "-n", "2")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    # Every claim is accounted for: the others finished, the killed one is an error.
    assert verdicts(report) == {
        "I-A": "holds", "I-B": "holds", "I-KILLED": "error", "I-C": "holds",
    }  # fmt: skip
    (killed,) = [c for c in report["claims"] if c["id"] == "I-KILLED"]
    assert killed["reason"].startswith("the process running it died before it reported")
    assert "crashed while running 'test_claims.py::test_killed'" in killed["error"]
    assert report["skipped"] == [] and "incomplete" not in report
    result.stdout.fnmatch_lines(
        [
            "attention-theorems: 4 claims: 3 held, * 1 error — reports/claims.json",
            "attention-theorems: claim I-KILLED: verdict error: worker 'gw*' crashed while "
            "running 'test_claims.py::test_killed': the process running it died before it "
            "reported (killed by a signal, out of memory, or a crash in native code)",
            "*= verdict gate FAILED: 1 problems (theorems/verdicts.lock) =*",
            "claim I-KILLED: lock says holds, this run says error",
        ]
    )
    assert gate_from_the_report(folder, capsys)[0] == 1  # the report alone fails the gate too


# --------------------------------------------------------------------------- 2. interrupted run

INTERRUPTED = """
@C("I-INTERRUPTED")
@given(x=st.integers(0, 10))
def test_interrupted(x):
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C, mid-run
"""


def test_an_interrupted_run_reports_what_finished_and_names_what_did_not(inner, capsys):
    claims = HEADER + _holding("I-A") + INTERRUPTED + _holding("I-B")
    lock = _lock(I_A="holds", I_INTERRUPTED="holds", I_B="holds")
    result, report, folder = inner({"test_claims": claims}, lock)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    assert verdicts(report) == {"I-A": "holds"}
    why = "the run was interrupted (KeyboardInterrupt)"
    assert report["incomplete"] == {
        "reason": why, "not_finished": ["I-INTERRUPTED", "I-B"], "collection_errors": {},
    }  # fmt: skip
    assert [(s["id"], s["reason"]) for s in report["skipped"]] == [
        ("I-INTERRUPTED", f"did not finish: {why}"),
        ("I-B", f"did not finish: {why}"),
    ]
    assert accounted(report) == {"I-A", "I-INTERRUPTED", "I-B"}
    result.stdout.fnmatch_lines(
        [
            "attention-theorems: 1 claims: 1 held, * 2 not run — reports/claims.json",
            f"attention-theorems: {why}: 2 claims did not finish and have no verdict: "
            "I-INTERRUPTED, I-B",
            "*= verdict gate FAILED: 1 problems (theorems/verdicts.lock) =*",
            f"run did not finish: {why}: 2 claims have no verdict: I-INTERRUPTED, I-B; their "
            "lock lines are not checked",
        ]
    )
    assert "verdict gate passed" not in result.stdout.str()
    # Nor does the lock command pass the partial report as a complete one.
    status, out = gate_from_the_report(folder, capsys)
    assert status == 1 and f"run did not finish: {why}" in out


# --------------------------------------------------------------------------- 3. counterexamples

SHAPES = {
    "I-LIST": ("[1, 2]", "expected a JSON object, got a list"),
    "I-REPLAY-LIST": (
        '{"replay": [1, 2]}',
        "'replay' must be an object (argument name -> saved value), got a list",
    ),
    "I-ARG-NUMBER": (
        '{"replay": {"x": 5}}',
        "replay argument 'x' must be an encoded value (an object such as {\"value\": 3}), got "
        "the number 5",
    ),
}

CONTROL = """
@C("I-CONTROL", kind="control", expected="refuted")
@given(x=st.integers(0, 10))
def test_control(x):
    assert x > 100
"""


def test_a_counterexample_file_of_the_wrong_shape_is_named_and_the_others_are_reported(
    inner, pytester, capsys
):
    store = pytester.path / "theorems" / "counterexamples"
    store.mkdir(parents=True)
    for claim_id, (text, _) in SHAPES.items():
        (store / f"{claim_id}.json").write_text(text + "\n")
    # Valid JSON, an object, but no saved counterexample: a refuted control overwrites it
    # (this once crashed the session end, after the report but before the gate).
    (store / "I-CONTROL.json").write_text('{"notes": "written by hand"}\n')
    claims = HEADER + _holding("I-A", *SHAPES) + CONTROL
    lock = _lock(I_A="holds", **{i.replace("-", "_"): "holds" for i in SHAPES})
    lock += "I-CONTROL  refuted  2306.13596\n"
    result, report, folder = inner({"test_claims": claims}, lock)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert verdicts(report) == {
        "I-A": "holds", "I-LIST": "error", "I-REPLAY-LIST": "error", "I-ARG-NUMBER": "error",
        "I-CONTROL": "refuted",
    }  # fmt: skip
    by_id = {c["id"]: c for c in report["claims"]}
    for claim_id, (_, message) in SHAPES.items():
        error = by_id[claim_id]["error"]
        assert f"theorems/counterexamples/{claim_id}.json: {message}" in error, error
    saved = json.loads((store / "I-CONTROL.json").read_text())
    assert saved["counterexample"]["claim"] == "I-CONTROL" and saved["replay"] == {
        "x": {"value": 0}
    }
    result.stdout.fnmatch_lines(
        [
            "*= verdict gate FAILED: 3 problems (theorems/verdicts.lock) =*",
            "claim I-LIST: lock says holds, this run says error",
        ]
    )
    assert gate_from_the_report(folder, capsys)[0] == 1


# --------------------------------------------------------------------------- 4. unreadable lock


@pytest.mark.parametrize(
    "make, problem",
    [
        (lambda path: path.mkdir(), "it is a directory, not a file"),
        (
            lambda path: path.write_bytes(b"I-A  holds\n\xff\xfeI-B  holds\n"),
            "line 2: not UTF-8 text (byte 0xff: invalid start byte)",
        ),
    ],
    ids=["directory", "not-utf8"],
)
def test_an_unreadable_lock_names_its_path_and_fails_the_gate(
    inner, pytester, capsys, make, problem
):
    (pytester.path / "theorems").mkdir()
    make(pytester.path / "theorems" / "verdicts.lock")
    result, report, folder = inner({"test_claims": HEADER + _holding("I-A", "I-B")}, None)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    assert verdicts(report) == {"I-A": "holds", "I-B": "holds"}  # the report is written
    result.stdout.fnmatch_lines(
        [
            "*= verdict gate FAILED: 1 problems (theorems/verdicts.lock) =*",
            f"unreadable verdict lock {folder}/theorems/verdicts.lock:",
            f"  {problem}",
        ]
    )
    status, out = gate_from_the_report(folder, capsys)
    assert status == 2 and f"unreadable verdict lock {folder}/theorems/verdicts.lock" in out


def test_rewriting_a_lock_that_is_a_directory_is_a_clear_error(tmp_path, capsys):
    report = tmp_path / "claims.json"
    claims = [{"id": "I-A", "verdict": "holds", "paper": "p", "expected": "holds"}]
    report.write_text(json.dumps({"profile": "ci", "claims": claims}))
    (tmp_path / "verdicts.lock").mkdir()
    args = ["lock", "--update", "--from", str(report), "--lock", str(tmp_path / "verdicts.lock")]
    assert cli.main(args) == 2
    assert f"error: {tmp_path}/verdicts.lock: cannot write the lock: Is a directory" in (
        capsys.readouterr().err
    )


# --------------------------------------------------------------------------- 5. import failure

BROKEN = """
@C("I-BROKEN")
@given(x=st.integers(0, 10))
def test_broken(x):
    assert x >= 0

raise RuntimeError("the module is broken")
"""


def test_a_claim_module_that_fails_to_import_fails_the_run_and_the_gate(inner):
    files = {"claims_good": HEADER + _holding("I-GOOD"), "claims_broken": HEADER + BROKEN}
    ini = "[pytest]\npython_files = claims_*.py\n"
    error = "claims_broken.py (RuntimeError: the module is broken)"
    lock = _lock(I_GOOD="holds", I_BROKEN="holds")
    # pytest stops at a collection error: nothing ran, and the report says so.
    result, report, _ = inner(files, lock, ini=ini)
    assert result.ret == pytest.ExitCode.INTERRUPTED
    why = "the run stopped early (1 error during collection)"
    assert report["claims"] == [] and report["incomplete"] == {
        "reason": why,
        "not_finished": ["I-GOOD"],
        "collection_errors": {"claims_broken.py": "RuntimeError: the module is broken"},
    }
    assert [(s["id"], s["reason"]) for s in report["skipped"]] == [
        ("I-GOOD", f"did not finish: {why}")
    ]
    result.stdout.fnmatch_lines(
        [
            f"attention-theorems: could not collect {error}: any claims it defines have no verdict",
            "*= verdict gate FAILED: 2 problems (theorems/verdicts.lock) =*",
            f"run did not finish: {why}: 1 claim has no verdict: I-GOOD; *",
            f"module not collected: {error}: any claims it defines have no verdict and their "
            "lock lines are not checked",
        ]
    )
    # Asked to go on, the good claims run and are reported; the gate still fails, and the
    # broken module's lock line is not called a line that "names no claim".
    for lock in (_lock(I_GOOD="holds", I_BROKEN="holds"), _lock(I_GOOD="holds")):
        result, report, _ = inner(files, lock, "--continue-on-collection-errors", ini=ini)
        assert result.ret == pytest.ExitCode.TESTS_FAILED
        assert verdicts(report) == {"I-GOOD": "holds"}
        assert report["incomplete"]["collection_errors"] == {
            "claims_broken.py": "RuntimeError: the module is broken"
        }
        result.stdout.fnmatch_lines(
            ["*= verdict gate FAILED: 1 problems (theorems/verdicts.lock) =*",
             f"module not collected: {error}: *"]
        )  # fmt: skip
        out = result.stdout.str()
        assert "verdict gate passed" not in out and "names no claim" not in out
