"""Run the semantic-mutant catalogue against the claims gate and the unit tests.

    python tests/mutants/run.py [--only ID ...] [--gate-only | --tests-only] [--json OUT]
    python tests/mutants/run.py --report OUT.json [MORE.json ...]   # merge results, print table

For each mutant of ``tests/mutants/catalogue.py``: a throwaway copy of the *committed* tree
(``git archive HEAD``, so nobody's uncommitted edits leak in) gets the one replacement (an
error if ``old`` does not occur exactly once), then

- the claims gate, ``python -m pytest theorems/ -x -q -p no:cacheprovider``, in the copy, with
  CI, PYTEST_* and ATTN_* variables removed from the environment except
  ``ATTN_HYPOTHESIS_PROFILE=ci``. Exit 1 = caught; the claims that caught it are read from the
  copy's ``reports/claims.json`` (each claim's verdict against the copy's
  ``theorems/verdicts.lock``), never from printed output;
- the unit tests, ``python -m pytest tests/ -x -q -p no:cacheprovider`` (tests/mutants
  ignored) in the copy, with the mutated module's own test file listed first and the slow
  end-to-end framework tests last, so that a mutant the fast tests catch stops early (the
  set of tests is the same; ``--plain-order`` turns this off). Exit 1 = caught; the first
  failing test id comes from ``--junitxml``.

Any other exit status (2 collection error, 3 internal error, 4 usage, 5 nothing collected) is
a broken mutant; a run past ``--timeout`` seconds is caught by timeout. Results are written
as JSON after every run (so an interrupted session keeps what it measured) and printed as a
Markdown table with the totals.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PYTHON = sys.executable


def load_catalogue():
    """The catalogue module, imported by path (tests/ is not a package)."""
    spec = importlib.util.spec_from_file_location("mutant_catalogue", HERE / "catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------------------ the copy


def head_commit() -> str:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def make_copy(dest: Path, commit: str) -> None:
    """Extract the committed tree at ``commit`` into ``dest``."""
    archive = subprocess.Popen(["git", "-C", str(ROOT), "archive", commit], stdout=subprocess.PIPE)
    subprocess.run(["tar", "-x", "-C", str(dest)], stdin=archive.stdout, check=True)
    archive.stdout.close()
    if archive.wait() != 0:
        raise RuntimeError(f"git archive {commit} failed")


def apply(root: Path, mutant: dict) -> None:
    """Replace the mutant's ``old`` snippet by ``new``; ValueError unless it occurs once."""
    path = root / mutant["file"]
    source = path.read_text(encoding="utf-8")
    count = source.count(mutant["old"])
    if count != 1:
        raise ValueError(f"{mutant['id']}: `old` occurs {count} times in {mutant['file']}")
    path.write_text(source.replace(mutant["old"], mutant["new"]), encoding="utf-8")


def environment(root: Path) -> dict[str, str]:
    """The outer environment without CI, PYTEST_* and ATTN_* settings; profile ci."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not (k == "CI" or k.startswith("ATTN_") or k.startswith("PYTEST_"))
    }
    # Tests that shell out to `python` (the README and conjecture walkthroughs) must get this
    # interpreter, the one with the suite's dependencies, not whatever PATH finds first.
    bindir = str(Path(PYTHON).parent)
    env["PATH"] = os.pathsep.join([bindir, env.get("PATH", "")])
    env.update(ATTN_HYPOTHESIS_PROFILE="ci", PYTHONPATH=str(root), PYTHONHASHSEED="0")
    return env


def run_pytest(root: Path, args: list[str], timeout: float, log: Path) -> tuple[int | None, float]:
    """(exit status or None on timeout, seconds); output goes to ``log``. A timed-out run is
    killed with its whole process group."""
    t0 = time.perf_counter()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [PYTHON, "-m", "pytest", *args],
            cwd=root,
            env=environment(root),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            rc = None
    return rc, round(time.perf_counter() - t0, 1)


# ------------------------------------------------------------------------------ reading runs


def read_lock(path: Path) -> dict[str, str]:
    """claim id → pinned verdict, from lines `ID  verdict  paper` (`#` comments)."""
    pinned = {}
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.split("#", 1)[0].strip()
        if line:
            fields = line.split()
            pinned[fields[0]] = fields[1]
    return pinned


def differing_claims(root: Path) -> list[dict] | None:
    """Claims whose verdict in the copy's reports/claims.json differs from its lock line, in
    report order; None when the run wrote no report."""
    report = root / "reports" / "claims.json"
    if not report.exists():
        return None
    pinned = read_lock(root / "theorems" / "verdicts.lock")
    claims = json.loads(report.read_text(encoding="utf-8"))["claims"]
    return [
        {"id": c["id"], "lock": pinned[c["id"]], "verdict": c["verdict"]}
        for c in claims
        if c["id"] in pinned and c["verdict"] != pinned[c["id"]]
    ]


def first_failure(junit: Path) -> str | None:
    """The first test case with a failure or error in a JUnit XML file, as a test id."""
    if not junit.exists():
        return None
    for case in ET.parse(junit).getroot().iter("testcase"):
        if case.find("failure") is not None or case.find("error") is not None:
            classname, name = case.get("classname", ""), case.get("name", "")
            return f"{classname.replace('.', '/')}.py::{name}" if classname else name
    return None


def outcome(rc: int | None) -> str:
    if rc is None:
        return "timeout"
    return {0: "survived", 1: "caught"}.get(rc, "broken")


# ------------------------------------------------------------------------------ one mutant


#: The subpackages of models/ that group modules by role: their modules' tests keep the module's
#: own name (tests/test_svm.py for models/oracles/svm.py).
ROLE_PACKAGES = frozenset({"problems", "oracles", "flows", "check", "numerics"})


def module_test_file(root: Path, mutant: dict) -> str | None:
    """tests/test_<module>.py (for models/<role>/<module>.py too), or
    tests/test_<package>_<module>.py for models/<package>/ (models/ntp/)."""
    parts = Path(mutant["file"]).relative_to("models").with_suffix("").parts
    if parts[0] in ROLE_PACKAGES:
        parts = parts[1:]
    name = f"tests/test_{'_'.join(parts)}.py"
    return name if (root / name).exists() else None


#: Test files that run the claims framework end to end in repo copies (about 9 of the unit
#: suite's 11 minutes on a loaded 2-core machine): listed last, so that a mutant the fast
#: tests catch stops early. The set of tests run is the same in any order.
SLOW_FILES = frozenset(
    {
        "test_gate.py",
        "test_scale.py",
        "test_plugin.py",
        "test_failures.py",
        "test_conjectures.py",
        "test_cli.py",
        "test_device.py",
    }
)


def test_files(root: Path, first: str | None) -> list[str]:
    """Every test file of tests/ (pytest's python_files patterns, tests/mutants left out) with
    ``first`` moved to the front and SLOW_FILES to the back: pytest collects explicit files
    in argument order."""
    found = sorted(
        p.relative_to(root).as_posix()
        for pattern in ("test_*.py", "claims_*.py")
        for p in (root / "tests").rglob(pattern)
        if "mutants" not in p.relative_to(root / "tests").parts
    )
    rest = sorted((f for f in found if f != first), key=lambda f: Path(f).name in SLOW_FILES)
    return ([first] if first else []) + rest


def gate_files(root: Path, claims: tuple[str, ...] | list[str]) -> list[str]:
    """The claims gate's files, those holding the given claims first (``theorems/`` when none
    is given). The set of claims run is the same either way; only the order changes, so that
    under -x a mutant a claim caught before stops the run at that claim, not minutes later.
    pytest collects explicitly listed files in the order given (a folder would re-sort them)."""
    if not claims:
        return ["theorems/"]
    index = json.loads((root / "theorems" / "claims.index.json").read_text(encoding="utf-8"))
    where = {c["id"]: c["file"] for c in index["claims"]}
    every = sorted(str(p.relative_to(root)) for p in (root / "theorems").rglob("claims*.py"))
    first = [where[c] for c in claims if c in where]
    return list(dict.fromkeys([*first, *every]))


def hints(files: list[Path]) -> dict[str, list[str]]:
    """Mutant id → the claims that caught it in earlier result files (``--hint``)."""
    out: dict[str, list[str]] = {}
    for f in files:  # every file's catches, not the latest row's: a hint only orders files
        for result in json.loads(f.read_text(encoding="utf-8"))["results"]:
            gate = result.get("gate") or {}
            claims = out.setdefault(result["id"], [])
            claims += [c["id"] for c in gate.get("claims") or [] if c["id"] not in claims]
    return out


def run_mutant(mutant: dict, commit: str, args, logs: Path) -> dict:
    result = {
        "id": mutant["id"],
        "module": Path(mutant["file"]).name,
        "category": mutant["category"],
        "fault": mutant["fault"],
        "commit": commit,
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
    }
    tmp = Path(tempfile.mkdtemp(prefix=f"mutant-{mutant['id'][:3]}-"))
    try:
        if mutant.get("baseline"):
            make_copy(tmp, commit)
        else:
            make_copy(tmp, commit)
            apply(tmp, mutant)
        if not args.tests_only:
            (tmp / "reports" / "claims.json").unlink(missing_ok=True)
            junit = tmp / "gate-junit.xml"
            gate_args = [
                *gate_files(tmp, args.hints.get(mutant["id"], ())),
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                f"--junitxml={junit}",
            ]
            if args.workers > 1:  # xdist: -x still stops the run at the first differing claim
                gate_args += ["-n", str(args.workers)]
            log = logs / f"{mutant['id']}.gate.log"
            rc, seconds = run_pytest(tmp, gate_args, args.timeout, log)
            diff = differing_claims(tmp) if rc is not None else None
            gate_outcome = outcome(rc)
            if rc == 2 and diff and args.workers > 1:
                # xdist ends a run that -x stopped with exit 2 ("Interrupted"), not 1: the
                # report's differing claims say whether the gate failed.
                gate_outcome = "caught"
            result["gate"] = {
                "outcome": gate_outcome,
                "rc": rc,
                "seconds": seconds,
                "claims": diff,
                "first_claim": diff[0]["id"] if diff else None,
                "first_failure": first_failure(junit) if rc not in (0, None) else None,
                "log": str(log),
            }
        if not args.gate_only:
            junit = tmp / "tests-junit.xml"
            first = module_test_file(tmp, mutant)
            files = ["tests/"] if args.plain_order else test_files(tmp, first)
            test_args = [
                *files,
                "-x",
                "-q",
                "-p",
                "no:cacheprovider",
                "--ignore=tests/mutants",
                f"--junitxml={junit}",
                *[f"--deselect={test}" for test in args.deselect],
            ]
            log = logs / f"{mutant['id']}.tests.log"
            rc, seconds = run_pytest(tmp, test_args, args.timeout, log)
            result["tests"] = {
                "outcome": outcome(rc),
                "rc": rc,
                "seconds": seconds,
                "first_test": first_failure(junit) if rc == 1 else None,
                "first_file": None if args.plain_order else first,
                "log": str(log),
            }
    finally:
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            result["copy"] = str(tmp)
    return result


# ------------------------------------------------------------------------------ the table


def _cell(side: dict | None, key: str) -> str:
    if side is None:
        return "not run"
    o = side["outcome"]
    if o == "caught":
        what = side.get(key) or (side.get("first_failure") if key == "first_claim" else None)
        return f"**yes** ({what})" if what else "**yes**"
    if o == "timeout":
        return "yes (timeout)"
    if o == "broken":
        return f"broken (exit {side['rc']})"
    return "no"


def table(results: list[dict]) -> str:
    lines = [
        "| mutant | module | category | caught by gate (first claim) | "
        "caught by tests (first test) | time (gate + tests) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in results:
        g, t = r.get("gate"), r.get("tests")
        secs = " + ".join(f"{side['seconds']:.0f} s" if side else "–" for side in (g, t))
        lines.append(
            f"| {r['id']} | {r['module']} | {r['category']} | {_cell(g, 'first_claim')} | "
            f"{_cell(t, 'first_test')} | {secs} |"
        )
    return "\n".join(lines)


def figures(results: list[dict]) -> str:
    """Caught by the gate / the tests / either / neither, over mutants with both sides run."""

    def caught(side):
        return side is not None and side["outcome"] in ("caught", "timeout")

    both = [r for r in results if r.get("gate") and r.get("tests")]
    broken = [
        r["id"]
        for r in results
        if any(r.get(s) and r[s]["outcome"] == "broken" for s in ("gate", "tests"))
    ]
    lines = []
    for label, rows in (
        ("gate run", [r for r in results if r.get("gate")]),
        ("tests run", [r for r in results if r.get("tests")]),
    ):
        lines.append(f"- mutants with the {label}: {len(rows)}")
    n = len(both)

    def pct(k):
        return f"{k}/{n} ({100 * k / n:.0f} %)" if n else f"{k}/0"

    g = sum(caught(r["gate"]) for r in both)
    t = sum(caught(r["tests"]) for r in both)
    e = sum(caught(r["gate"]) or caught(r["tests"]) for r in both)
    timeouts = [
        f"{r['id']} ({s})"
        for r in results
        for s in ("gate", "tests")
        if r.get(s) and r[s]["outcome"] == "timeout"
    ]
    gate_all = [r for r in results if r.get("gate")]
    tests_all = [r for r in results if r.get("tests")]
    lines += [
        f"- over the {n} mutants with both sides run: caught by the gate {pct(g)}, "
        f"by the tests {pct(t)}, by either {pct(e)}, by neither {pct(n - e)}",
        f"- gate alone, all mutants it ran on: "
        f"{sum(caught(r['gate']) for r in gate_all)}/{len(gate_all)} caught",
        f"- tests alone, all mutants they ran on: "
        f"{sum(caught(r['tests']) for r in tests_all)}/{len(tests_all)} caught",
        f"- timeouts: {timeouts}",
        f"- broken mutants: {broken}",
    ]
    return "\n".join(lines)


def merge(files: list[Path]) -> list[dict]:
    """Results of several JSON files, one row per mutant (later files fill missing sides)."""
    rows: dict[str, dict] = {}
    for f in files:
        for r in json.loads(f.read_text(encoding="utf-8"))["results"]:
            row = rows.setdefault(r["id"], dict(r))
            for side in ("gate", "tests"):
                if r.get(side):
                    row[side] = r[side]
    order = {m["id"]: k for k, m in enumerate(load_catalogue().MUTANTS)}
    return sorted(rows.values(), key=lambda r: order.get(r["id"], -1))


# ------------------------------------------------------------------------------ main


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", nargs="+", metavar="ID", help="run these mutants only")
    side = ap.add_mutually_exclusive_group()
    side.add_argument("--gate-only", action="store_true", help="run the claims gate only")
    side.add_argument("--tests-only", action="store_true", help="run the unit tests only")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds per run (900)")
    ap.add_argument("--plain-order", action="store_true", help="tests/ in collection order")
    ap.add_argument(
        "--workers", type=int, default=1, help="xdist workers for the gate run (default 1)"
    )
    ap.add_argument("--baseline", action="store_true", help="also run the unmutated tree first")
    ap.add_argument("--keep", action="store_true", help="keep the copies (paths in the JSON)")
    ap.add_argument("--logs", type=Path, help="folder for the pytest logs (default: a tmpdir)")
    ap.add_argument("--report", nargs="+", type=Path, help="merge result files, print table")
    ap.add_argument(
        "--deselect",
        nargs="+",
        default=[],
        metavar="TEST",
        help="unit tests left out (e.g. ones that already fail on the unmutated tree)",
    )
    ap.add_argument("--commit", help="the commit to copy (default: HEAD when the run starts)")
    ap.add_argument(
        "--hint",
        nargs="+",
        type=Path,
        default=[],
        metavar="RESULTS.json",
        help="run first the claim files that caught each mutant in these results (same claims)",
    )
    args = ap.parse_args(argv)
    args.hints = hints(args.hint)

    if args.report:
        results = merge(args.report)
        print(table(results))
        print()
        print(figures(results))
        return 0

    catalogue = load_catalogue()
    mutants = list(catalogue.MUTANTS)
    if args.only:
        known = {m["id"]: m for m in mutants}
        unknown = [i for i in args.only if i not in known]
        if unknown:
            ap.error(f"unknown mutant ids: {unknown}")
        mutants = [known[i] for i in args.only]
    if args.baseline:
        mutants.insert(
            0,
            {
                "id": "M00-baseline",
                "file": "models/__init__.py",
                "baseline": True,
                "category": "none",
                "fault": "the unmutated committed tree",
            },
        )
    commit = args.commit or head_commit()
    logs = args.logs or Path(tempfile.mkdtemp(prefix="mutant-logs-"))
    logs.mkdir(parents=True, exist_ok=True)
    doc = {
        "commit": commit,
        "started": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join(
            [Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]
        ),
        "timeout": args.timeout,
        "results": [],
    }
    t0 = time.perf_counter()
    for mutant in mutants:
        result = run_mutant(mutant, commit, args, logs)
        doc["results"].append(result)
        doc["seconds"] = round(time.perf_counter() - t0, 1)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
        g, t = result.get("gate"), result.get("tests")
        print(
            f"{result['id']}: gate {g['outcome'] + ' ' + str(g['first_claim']) if g else '-'}"
            f" ({g['seconds'] if g else 0} s); tests "
            f"{t['outcome'] + ' ' + str(t['first_test']) if t else '-'}"
            f" ({t['seconds'] if t else 0} s)",
            flush=True,
        )
    print()
    print(table(doc["results"]))
    print()
    print(figures(doc["results"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
