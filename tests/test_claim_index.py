"""The claim index (theorems/claims.index.json, theorems/framework/claim_index.py): `list` and
`explain` read it without importing the claim modules, give exactly what the import gives,
fall back to the import (with a note) once a claim source changed, and the committed index is
the one the tree builds."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests import repo_copy
from tests.test_cli_explain import _report
from theorems.framework import claim_index

REPO_ROOT = Path(__file__).resolve().parent.parent
REBUILD = "`python -m theorems index`"


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in repo_copy._CLEAR}
    env.update(PYTHONHASHSEED="0", **extra)
    return env


def _python(root: Path, *args: str, **extra: str) -> subprocess.CompletedProcess:
    """`python *args` in `root`, stdout and stderr apart."""
    env = _env(**extra)
    if root != REPO_ROOT:
        env["PYTHONPATH"] = str(root)
    return subprocess.run(
        [sys.executable, *args], cwd=root, env=env, capture_output=True, text=True, timeout=300
    )


def test_the_committed_index_is_up_to_date():
    """CI fails here when a claim (or a claim source) changed without the index rebuilt."""
    done = _python(REPO_ROOT, "-m", "theorems", "index", "--check")
    assert done.returncode == 0, (
        f"{done.stdout}{done.stderr}\nRebuild the claim index with {REBUILD} and commit "
        f"{claim_index.INDEX_PATH}."
    )
    assert done.stdout.strip() == f"{claim_index.INDEX_PATH.as_posix()} is up to date"


#: Runs the CLI several times in one process and prints, as JSON, each run's exit status,
#: stdout and stderr, and whether torch, cvxpy or a claim module was imported by the end.
_RUN_ALL = textwrap.dedent(
    """
    import contextlib, io, json, sys
    from theorems.framework import cli
    runs = []
    for argv in json.loads(sys.argv[1]):
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = cli.main(argv)
        runs.append([code, out.getvalue(), err.getvalue()])
    heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "cvxpy", "strategies")
                   or m.startswith(("theorems.maxmargin", "theorems.embeddings",
                                    "theorems.tfsvm", "theorems.mirror", "theorems.conjectures")))
    print(json.dumps({"runs": runs, "heavy": heavy}))
    """
)


def test_list_and_explain_from_the_index_equal_the_import(tmp_path):
    indexed = json.loads((REPO_ROOT / claim_index.INDEX_PATH).read_text(encoding="utf-8"))
    ids = [c["id"] for c in indexed["claims"]]
    papers = sorted({c["paper"] for c in indexed["claims"]})
    # One claim per paper, the first and the last, a reading with its variant, an unknown id.
    picks = {ids[0], ids[-1], "MM-THM-G", *(next(c["id"] for c in indexed["claims"]
                                                 if c["paper"] == p) for p in papers)}  # fmt: skip
    report = str(_report(tmp_path))
    argvs = [
        ["list"],
        ["list", "--json"],
        ["list", "--paper", papers[-1]],
        *(["explain", i, "--from", report] for i in sorted(picks)),
        ["explain", "MM-THM-Q", "--from", report],
    ]
    runs = {}
    for mode, extra in (("index", {}), ("import", {"ATTN_NO_INDEX": "1"})):
        done = _python(REPO_ROOT, "-c", _RUN_ALL, json.dumps(argvs), **extra)
        assert done.returncode == 0, done.stderr
        runs[mode] = json.loads(done.stdout)
    assert runs["index"]["heavy"] == [], "the index path imported the claims"
    assert runs["import"]["heavy"] != []  # the comparison is with the real import
    for argv, by_index, by_import in zip(
        argvs, runs["index"]["runs"], runs["import"]["runs"], strict=True
    ):
        assert by_index == by_import, argv
    assert [code for code, _, _ in runs["index"]["runs"]] == [0] * (len(argvs) - 1) + [2]
    assert all(err == "" for _, _, err in runs["index"]["runs"][:-1])  # no stale note
    assert runs["index"]["runs"][0][1].splitlines()[-1] == f"{len(ids)} claims"


def test_list_and_explain_on_a_fresh_index_import_no_torch():
    for command in (["list"], ["explain", "MM-THM-G"]):
        done = _python(REPO_ROOT, "-X", "importtime", "-m", "theorems", *command)
        assert done.returncode == 0, done.stderr
        imported = {
            line.rsplit("|", 1)[1].strip()
            for line in done.stderr.splitlines()
            if line.startswith("import time:") and "|" in line
        }
        assert imported, done.stderr[-2000:]
        notes = [line for line in done.stderr.splitlines() if not line.startswith("import time")]
        assert notes == [], command  # the index was used: no note that it is stale
        heavy = {m for m in imported if m.split(".")[0] in ("torch", "cvxpy", "strategies")}
        heavy |= {m for m in imported if m.startswith("theorems.maxmargin")}
        assert heavy == set(), command


CLAIMS = repo_copy.CLAIM_HELPER + textwrap.dedent(
    """

    @C("T-IDX-A", statement="the first statement")
    def test_a():
        pass
    """
)


def test_an_edited_claim_module_makes_the_index_stale_and_list_imports(tmp_path):
    root = repo_copy.make(tmp_path / "repo", {"claims_idx.py": CLAIMS})
    module = root / "theorems" / "claims_idx.py"

    def cli(*args: str) -> subprocess.CompletedProcess:
        return _python(root, "-m", "theorems", *args)

    # No index in the copy: the import, with the note.
    listed = cli("list")
    assert listed.returncode == 0 and "the first statement" in listed.stdout
    assert listed.stderr.startswith("note: no claim index at theorems/claims.index.json")
    built = cli("index")
    assert built.returncode == 0, built.stderr
    assert built.stdout == "theorems/claims.index.json: 1 claims, rewritten\n"
    assert cli("index", "--check").returncode == 0
    fresh = cli("list")
    assert (fresh.returncode, fresh.stdout, fresh.stderr) == (0, listed.stdout, "")

    # An edited claim: the index is stale, list imports the module and says so once.
    module.write_text(CLAIMS.replace("the first statement", "an edited statement"))
    stale = cli("list")
    assert stale.returncode == 0
    assert "an edited statement" in stale.stdout and "the first statement" not in stale.stdout
    (note,) = stale.stderr.splitlines()
    assert note.startswith(
        "note: the claim index theorems/claims.index.json is stale "
        "(theorems/claims_idx.py changed); importing the claim modules instead"
    )
    assert note.endswith(f"rebuild it with {REBUILD}")
    explained = cli("explain", "T-IDX-A")
    assert "an edited statement" in explained.stdout
    assert explained.stderr.splitlines()[0] == note
    check = cli("index", "--check")
    assert check.returncode == 1
    assert check.stderr == (
        "error: theorems/claims.index.json is out of date (theorems/claims_idx.py changed): "
        f"rebuild it with {REBUILD} and commit it\n"
    )

    assert cli("index").stdout == "theorems/claims.index.json: 1 claims, rewritten\n"
    assert "an edited statement" in cli("list").stdout

    # A new claim module is noticed too; `lock --update` rebuilds the index with the lock.
    (root / "theorems" / "claims_idx2.py").write_text(
        CLAIMS.replace("T-IDX-A", "T-IDX-B").replace("test_a", "test_b")
    )
    assert "(theorems/claims_idx2.py is new); importing" in cli("list").stderr
    report = tmp_path / "claims.json"
    claims = [
        {"id": i, "verdict": "holds", "paper": "2306.13596", "expected": "holds"}
        for i in ("T-IDX-A", "T-IDX-B")
    ]
    report.write_text(json.dumps({"profile": "ci", "claims": claims}))
    locked = cli("lock", "--update", "--from", str(report))
    assert locked.returncode == 0, locked.stdout + locked.stderr
    assert "note: rewrote the claim index theorems/claims.index.json" in locked.stderr
    after = cli("list")
    assert after.stderr == "" and after.stdout.splitlines()[-1] == "2 claims"
    assert "an edited statement" in after.stdout
    assert cli("index").stdout == "theorems/claims.index.json: 2 claims, unchanged\n"


def test_a_module_that_fails_to_import_writes_no_index(tmp_path):
    root = repo_copy.make(tmp_path / "repo", {"claims_bad.py": CLAIMS + "\nraise RuntimeError"})
    done = _python(root, "-m", "theorems", "index")
    assert done.returncode == 1
    assert "error: could not import theorems.claims_bad: RuntimeError" in done.stderr
    assert not (root / claim_index.INDEX_PATH).exists()


def test_the_index_holds_no_path_of_this_machine():
    """Paths in the index are relative to the checkout, so a clone anywhere reads it as fresh
    (a findings link once carried the absolute path of the checkout that built it)."""
    doc = json.loads((REPO_ROOT / claim_index.INDEX_PATH).read_text(encoding="utf-8"))
    for entry in doc["claims"]:
        for field in ("file", "findings"):
            value = entry.get(field) or ""
            assert not value.startswith("/") and str(REPO_ROOT) not in value, (entry["id"], field)
