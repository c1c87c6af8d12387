"""`python -m theorems`: list the registered claims, or check one concrete instance.

    python -m theorems list [--paper P] [--json]
    python -m theorems check INSTANCE.json [--out FILE] [--timeout SECONDS]
    python -m theorems lock [--update] [--from REPORT] [--lock PATH]
    python -m theorems explain ID [--from REPORT]
    python -m theorems report [--from REPORT] [--out DIR] [--against OLD.json]
    python -m theorems index [--check]

Instance files (all arrays as nested lists):
    prompt:    {"model": "prompt", "X": n×T×d, "y": n (±1), "v": d,
                "W": d×d (default identity), "loss": "logistic" | "exponential" |
                "correlation" (default logistic), "p0": d (default zeros)}
    embedding: {"model": "embedding", "sequences": n×T token ids (ints >= 0, < |S|),
                "y": n (±1), "E0": |S|×d, "v": d, "eta0": float > 0}
    cross:     {"model": "cross", "X": n×T×d, "Z": n×d (the queries), "y": n (±1), "v": d,
                "param": "W" | "KQ" (default W), "loss": as for prompt (default logistic),
                "p": ℓp exponent > 1 for mirror descent (optional)}
    ntp:       {"model": "ntp", "embeddings": K×d, "sequences": lists of token ids (the
                query is the last one), "labels": one token id per sequence, in it}
    ntp-linear: {"model": "ntp-linear", "H": d×m (columns are contexts), "P": m×V
                (next-token probabilities), "pi": m (context weights > 0)}

A saved counterexample (theorems/counterexamples/ID.json) is an instance file too: its
"counterexample" header and "replay" arguments are ignored by `check`.

Every problem with an instance is one line on stderr naming the field, and exit code 2.
`--timeout SECONDS` computes the answer in a worker process stopped after that long; the
answer is then the model's fields, null, with status "inconclusive" and a reason that starts
"budget:" and names the stage it was in (exit 0).

`lock` compares a report (default reports/claims.json) with the verdict lock (default
theorems/verdicts.lock) and prints the differences (exit 1 if any); `lock --update` rewrites
the lock from the report after a deliberate change (a claim the report did not run for want
of what it declares it needs, e.g. EMB-REAL without its data, keeps its pin, or gets a
`not-run` line; exit 1 only for a claim left unpinned).

`explain` prints one claim's statement, provenance, verdict in the last report, lock pin,
counterexample and how to replay it (exit 2 for an unknown id, with the nearest ids).
`report` rebuilds reports/index.html and reports/claims.md from the report without
rerunning anything, and prints how its verdicts differ from the verdict lock and, with
`--against OLD.json`, from an earlier report (the pages list the same at their top); without
a report it says how to make one (exit 2).

`list` and `explain` read the claim index theorems/claims.index.json instead of importing
the claim modules while it matches the claim sources on disk (theorems/framework/
claim_index.py); otherwise they import them, with a note on stderr. `index` rebuilds it
(`lock --update` does too); `index --check` exits 1 when it differs from a fresh build.
`ATTN_NO_INDEX=1` ignores it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

from theorems.framework import REPO_ROOT
from theorems.framework.instances import InstanceError, load_instance
from theorems.framework.registry import import_claim_modules

#: Where each model's prediction is computed (the mathematics lives in models/; the CLI
#: validates, calls and prints), and the instance fields it takes, in order.
PREDICTORS = {
    "prompt": ("models.check.predict", "predict_prompt", ("X", "y", "v", "W", "loss", "p0")),
    "embedding": (
        "models.check.predict",
        "predict_embedding",
        ("sequences", "y", "E0", "v", "eta0"),
    ),
    "cross": (
        "models.check.cross_predict",
        "predict_cross",
        ("X", "Z", "y", "v", "param", "loss", "p"),
    ),
    "cross-joint": ("models.check.joint_predict", "predict_joint", ("X", "Z", "y", "loss", "p")),
    "ntp": ("models.ntp.predict", "predict_ntp", ("embeddings", "sequences", "labels")),
    "ntp-linear": ("models.ntp.predict", "predict_ntp_linear", ("H", "P", "pi")),
}
#: Each predictor's module also has ``inconclusive_answer(model, fields, reason, seconds)``: the
#: answer with every computed field null, given when `check --timeout` runs out.
INCONCLUSIVE_ANSWER = "inconclusive_answer"


# --------------------------------------------------------------------------- commands


def _positive_seconds(text: str) -> float:
    import math

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text}")
    return value


def _error(message: str, code: int) -> int:
    print(f"error: {message}", file=sys.stderr)
    return code


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def cmd_list(args: argparse.Namespace) -> int:
    from theorems.framework import claim_index, profiles, registry

    try:
        if profiles.current_profile() not in profiles.PROFILES:  # keep a loaded one
            profiles.load_profile()
        indexed = claim_index.fresh(REPO_ROOT)  # None: stale (said on stderr) or turned off
        failed = import_claim_modules() if indexed is None else []
    except registry.ClaimRegistrationError as exc:
        return _error(str(exc), 2)
    except ValueError as exc:  # a bad ATTN_HYPOTHESIS_PROFILE
        return _error(str(exc), 2)
    found = registry.REGISTRY if indexed is None else indexed
    claims = registry.ordered(found.values())
    if args.paper:
        claims = [c for c in claims if c.paper == args.paper]
    if args.json:
        rows = [dict(registry.as_dict(c), budget=c.budget) for c in claims]
        print(json.dumps(rows, indent=2))
    else:
        header = ("id", "paper", "kind", "expected", "provenance", "statement")
        rows = [
            (c.id, c.paper, c.kind, c.expected, c.provenance, _cut(c.statement, 60)) for c in claims
        ]
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
        for row in [header, *rows]:
            cells = zip(row[:-1], widths, strict=True)
            print("  ".join(cell.ljust(w) for cell, w in cells) + "  " + row[-1])
        print(f"{len(claims)} claims")
    for name, reason in failed:
        print(f"error: could not import {name}: {reason}", file=sys.stderr)
    return 1 if failed else 0


def _out_problem(out: str) -> str | None:
    """Why `--out FILE` could not be written, or None: checked before anything is computed."""
    path = Path(out)
    if path.is_dir():
        return f"--out {out}: is a directory, not a file"
    folder = path.parent
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        return f"--out {out}: the folder {folder} {what}"
    if not os.access(path if path.exists() else folder, os.W_OK):
        return f"--out {out}: not writable"
    return None


def _predict_talking(predict, model: str, fields: dict, keys, on_stage=None) -> dict:
    """``predict`` on the instance, saying on stderr what it does while it runs: a warning
    first if the instance is large, then a heartbeat (theorems.framework.progress.Heartbeat)
    unless ATTN_PROGRESS=0. ``on_stage(text)`` also hears each stage as it begins."""
    from theorems.framework import progress

    sizes, work = progress.check_work(model, fields)
    large = work >= progress.LONG_CHECK_WORK
    tell = on_stage or (lambda text: None)
    if not progress.enabled(0):
        return predict(*(fields[k] for k in keys), stage=tell)
    if large:
        from models.check.estimate import check_time

        guess = check_time(model, fields)
        howlong = guess.text() if guess is not None else "this may take minutes"
        print(
            f"check: warning: a large {model} instance ({sizes}; {work:,} constraint × "
            f"dimension entries): {howlong}; progress follows on stderr every "
            f"{progress.seconds_text(progress.interval())} (ATTN_PROGRESS=0 silences it; "
            "--timeout SECONDS bounds the wait)",
            file=sys.stderr,
        )
    with progress.Heartbeat("check", loud=large) as beat:

        def stage(text: str) -> None:
            beat.stage(text)
            tell(text)

        return predict(*(fields[k] for k in keys), stage=stage)


def _predict_in_child(model: str, fields: dict, conn) -> None:
    """The worker process of `check --timeout`: computes the answer and sends it to the
    parent as ("answer", JSON-able dict), after ("stage", text) for each stage it begins."""
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    from theorems.framework.evidence import to_jsonable

    module, name, keys = PREDICTORS[model]
    predict = getattr(importlib.import_module(module), name)
    result = _predict_talking(
        predict, model, fields, keys, on_stage=lambda text: conn.send(("stage", text))
    )
    conn.send(("answer", to_jsonable(result)))


def _predict_within(model: str, fields: dict, seconds: float) -> dict | None:
    """The answer computed in a worker process that is stopped after ``seconds``: then the
    model's inconclusive answer, whose reason says the budget ran out and at which stage.
    None if the worker died without an answer (its traceback is on stderr). A process, not a
    thread, because a computation inside torch or a solver cannot be interrupted otherwise;
    "spawn", because forking a process that has started BLAS or OpenMP threads may hang."""
    import multiprocessing
    import time

    ctx = multiprocessing.get_context("spawn")
    here, there = ctx.Pipe(duplex=False)
    worker = ctx.Process(target=_predict_in_child, args=(model, fields, there), daemon=True)
    t0 = time.perf_counter()
    worker.start()
    there.close()  # the parent's copy: without it, recv would not see the worker's end
    doing = "starting (importing the models)"
    try:
        while (left := t0 + seconds - time.perf_counter()) > 0 and here.poll(left):
            try:
                kind, value = here.recv()
            except EOFError:
                return None
            if kind == "answer":
                return value
            doing = value
    finally:
        if worker.is_alive():
            worker.kill()
        worker.join()
    module = importlib.import_module(PREDICTORS[model][0])
    reason = f"budget: no answer within --timeout {seconds:g} s (it was {doing})"
    return getattr(module, INCONCLUSIVE_ANSWER)(model, fields, reason, time.perf_counter() - t0)


def cmd_check(args: argparse.Namespace) -> int:
    if args.out is not None and (problem := _out_problem(args.out)):
        return _error(problem, 2)
    try:
        model, fields = load_instance(args.instance)
    except InstanceError as exc:
        return _error(str(exc), 2)
    module, name, keys = PREDICTORS[model]
    if str(REPO_ROOT) not in sys.path:
        sys.path.insert(0, str(REPO_ROOT))
    try:
        predict = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        return _error(f"{module}.{name} is not available: {exc}", 1)
    if args.timeout is None:
        result = _predict_talking(predict, model, fields, keys)
    else:
        result = _predict_within(model, fields, args.timeout)
        if result is None:
            return _error("the check's worker process ended without an answer (see above)", 1)

    from theorems.framework.evidence import to_jsonable

    text = json.dumps(to_jsonable(result), indent=2, allow_nan=False, ensure_ascii=False)
    if args.out is not None:
        try:
            Path(args.out).write_text(text + "\n", encoding="utf-8")
        except OSError as exc:
            return _error(f"--out {args.out}: cannot write: {exc.strerror or exc}", 2)
    else:
        print(text)
    return 0


def _known_claims() -> tuple[dict[str, str] | None, list[str], str | None]:
    """(id -> expected of every claim, ids in definition order, why unknown)."""
    from theorems.framework import profiles, registry

    try:
        if profiles.current_profile() not in profiles.PROFILES:
            profiles.load_profile()
        failed = import_claim_modules()
    except (registry.ClaimRegistrationError, ValueError) as exc:
        return None, [], str(exc)
    if failed:
        return None, [], "; ".join(f"could not import {name}: {why}" for name, why in failed)
    claims = registry.ordered(registry.REGISTRY.values())
    folder = (REPO_ROOT / "theorems").resolve()
    mine = []
    for c in claims:
        try:
            Path(c.file).resolve().relative_to(folder)
        except (ValueError, OSError):
            continue
        mine.append(c)
    return {c.id: c.expected for c in mine}, [c.id for c in mine], None


def _profile_only_claims(profile: str) -> set[str]:
    """Ids of the claims that run under ``profile`` alone (after ``_known_claims`` imported
    them): the nightly-only ones for "nightly", none for any other profile."""
    from theorems.framework import registry

    if profile != "nightly":
        return set()
    return {c.id for c in registry.REGISTRY.values() if c.runs_only_with == registry.NIGHTLY_ONLY}


def cmd_lock(args: argparse.Namespace) -> int:
    from theorems.framework import lock as locks

    report_path = Path(args.report)
    lock_path = Path(args.lock)
    try:
        report = json.loads(report_path.read_text(encoding="utf-8"))
        claims = report["claims"]
        if not isinstance(claims, list) or not all("id" in c and "verdict" in c for c in claims):
            raise KeyError("claims")
        skipped = report.get("skipped") or []  # claims that ran no example, with the reason
        if not isinstance(skipped, list) or not all("id" in s for s in skipped):
            raise KeyError("skipped")
    except FileNotFoundError:
        return _error(f"{report_path}: no report; run `python -m pytest theorems/` first", 2)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return _error(f"{report_path}: not a claims report ({exc!r})", 2)
    try:
        lock = locks.read(lock_path)
    except locks.LockError as exc:
        if not args.update:
            return _error(str(exc), 2)
        print(f"replacing the malformed lock {lock_path}:\n{exc}", file=sys.stderr)
        lock = None
    if lock_path.resolve().parent == (REPO_ROOT / "theorems").resolve():
        known, order, why = _known_claims()
    else:  # a lock of another checkout: this one's claims say nothing about it
        known, order, why = None, [c["id"] for c in [*claims, *skipped]], None
    if why:
        print(f"note: {why}; lock lines of claims not in the report are kept", file=sys.stderr)
    incomplete = report.get("incomplete") or {}
    if not isinstance(incomplete, dict):
        return _error(f"{report_path}: not a claims report ('incomplete' is not an object)", 2)
    if incomplete:
        print(
            f"note: {report_path} is the report of a run that did not finish "
            f"({incomplete.get('reason')}); lock lines of claims not in it are kept",
            file=sys.stderr,
        )
    command = locks.update_command(lock_path, report_path)  # what every hint says to run
    profile = report.get("profile")
    if args.update and lock is not None and lock.profile and profile and profile != lock.profile:
        # A lock is made under one profile: a report of another may only pin the claims that
        # run under that profile alone (the nightly-only large-rung claims), and the lock
        # keeps its own profile (before, the header became the report's).
        if known is None:
            return _error(
                f"{report_path} was made under the {profile!r} profile and {lock_path} under "
                f"{lock.profile!r}: which claims run only under {profile!r} is not known here",
                2,
            )
        only = _profile_only_claims(profile)
        kept_out = [c["id"] for c in claims if c["id"] not in only]
        claims = [c for c in claims if c["id"] in only]
        skipped = [s for s in skipped if s["id"] in only]
        print(
            f"note: {report_path} was made under the {profile!r} profile, {lock_path} under "
            f"{lock.profile!r}: only the {len(claims)} claims that run under {profile!r} alone "
            f"are updated; {len(kept_out)} others keep their pins",
            file=sys.stderr,
        )
        profile = lock.profile
    if args.update:
        done = locks.update(
            lock,
            claims,
            known=known,
            order=order,
            skipped=skipped,
            unfinished=incomplete.get("not_finished", []),
        )
        mine = lock_path.resolve() == (REPO_ROOT / locks.DEFAULT_LOCK).resolve()
        text = locks.render(done.rows, profile, header=locks.HEADER if mine else locks.OTHER_HEADER)
        try:
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            lock_path.write_text(text, encoding="utf-8")
        except OSError as exc:
            return _error(f"{lock_path}: cannot write the lock: {exc.strerror or exc}", 2)
        if mine and why is None:  # the claims were imported: rebuild the claim index too
            _write_index()
        for line in [*done.changes, *done.kept, *done.problems]:
            print(line)
        not_run = sum(r[1] == locks.NOT_RUN for r in done.rows)
        recorded = f", {not_run} recorded as not run" if not_run else ""
        print(
            f"{lock_path}: {len(done.rows) - not_run} claims pinned{recorded}, "
            f"{len(done.changes)} changed"
        )
        return 1 if done.problems else 0
    if lock is None:
        return _error(f"{lock_path}: no verdict lock; create it with `{command}`", 2)
    reported = {c["id"] for c in claims}
    unfinished = set(incomplete.get("not_finished", []))
    skips = {s["id"]: s for s in skipped if s["id"] not in reported | unfinished}
    not_run = set(known or {}) - reported - set(skips)
    result = locks.gate(
        lock,
        claims,
        known=known,
        collected=reported | set(skips),  # a skipped claim was collected, and gave no verdict
        partial=bool(not_run) or bool(incomplete),
        optional={i: s.get("reason", "") for i, s in skips.items() if s.get("runs_only_with")},
        # A report of a run that did not finish never matches the lock as a full one.
        unfinished={i: incomplete.get("reason", "") for i in incomplete.get("not_finished", [])},
        collection_errors=incomplete.get("collection_errors"),
        profile=report.get("profile"),
        command=command,
    )
    for problem in result.problems:
        print(problem)
    for note in result.notes:
        print(f"note: {note}")
    status = "matches" if result.ok else f"differs ({len(result.problems)} problems)"
    print(f"{report_path} {status} {lock_path}: {result.checked} claims checked")
    return 0 if result.ok else 1


def cmd_explain(args: argparse.Namespace) -> int:
    from theorems.framework import registry
    from theorems.framework.explain import UnknownClaim, explain

    try:
        print(explain(args.id, report=Path(args.report)))
    except UnknownClaim as exc:
        return _error(str(exc), 2)
    except (registry.ClaimRegistrationError, ValueError) as exc:
        return _error(str(exc), 2)
    return 0


def _write_index() -> None:
    """Rewrite the claim index from the claims imported in this process (`lock --update`)."""
    from theorems.framework import claim_index, registry

    try:
        if claim_index.write(registry.REGISTRY.values(), REPO_ROOT):
            print(f"note: rewrote the claim index {claim_index.INDEX_PATH}", file=sys.stderr)
    except OSError as exc:
        print(
            f"note: could not write the claim index: {exc}; run `{claim_index.REBUILD}`",
            file=sys.stderr,
        )


def cmd_index(args: argparse.Namespace) -> int:
    from theorems.framework import claim_index, registry

    try:
        claims, failed = claim_index.collect(REPO_ROOT)
    except (registry.ClaimRegistrationError, ValueError) as exc:
        return _error(str(exc), 2)
    if failed:
        for name, reason in failed:
            print(f"error: could not import {name}: {reason}", file=sys.stderr)
        return _error(f"{claim_index.INDEX_PATH} not written: a claim module failed to import", 1)
    shown = claim_index.INDEX_PATH.as_posix()
    if args.check:
        problem = claim_index.check(claims, REPO_ROOT)
        if problem:
            return _error(problem, 1)
        print(f"{shown} is up to date")
        return 0
    try:
        changed = claim_index.write(claims, REPO_ROOT)
    except OSError as exc:
        return _error(f"{shown}: cannot write: {exc.strerror or exc}", 2)
    count = len(claim_index.own(claims, REPO_ROOT))
    print(f"{shown}: {count} claims, {'rewritten' if changed else 'unchanged'}")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    from reports.build import changes_lines, prepare, write

    report = Path(args.report)
    if not report.exists():
        return _error(
            f"no report at {report}: make one by running the claims "
            "(`python -m pytest theorems/ -n auto`, the README's command 1), or name one with "
            "--from REPORT",
            2,
        )
    against = Path(args.against) if args.against else None
    try:
        doc, top = prepare(report, against=against)
        paths = write(doc, top, report, Path(args.out) if args.out else report.parent)
    except (OSError, ValueError) as exc:
        return _error(str(exc), 2)
    print(*paths, *changes_lines(top), sep="\n")
    return 0


def cmd_tolerances(args: argparse.Namespace) -> int:
    from theorems.framework import tolerances

    report = Path(args.report)
    try:
        doc = json.loads(report.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return _error(
            f"no report at {report}: run the claims first (`python -m pytest theorems/ -n auto`, "
            "the README's command 1), or name one with --from REPORT",
            2,
        )
    except (OSError, ValueError) as exc:
        return _error(f"{report}: {exc}", 2)
    every = tolerances.slacks(doc)
    loose = [s for s in every if s.loose]
    underived = [s for s in loose if s.derivation is None]
    calibrated = [s for s in loose if s.basis == "calibrated"]
    print(*tolerances.table(every if args.all else loose), sep="\n")
    print(
        f"{len(every)} slacks of claims that hold; {len(loose)} with a bound more than "
        f"{1 / tolerances.LOOSE_RATIO:g}× above their worst observation: "
        f"{len(loose) - len(underived) - len(calibrated)} derived, {len(calibrated)} calibrated "
        f"on separate draws, {len(underived)} without a derivation"
    )
    if args.check and underived:
        return _error(
            f"{len(underived)} loose tolerances carry no derivation: derive each "
            "(evidence.tolerance(value, why)) or tighten it",
            1,
        )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m theorems", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p_list = sub.add_parser("list", help="print the registered claims")
    p_list.add_argument("--paper", help="only claims of this paper (arXiv id)")
    p_list.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p_list.set_defaults(run=cmd_list)
    p_check = sub.add_parser("check", help="validate an instance and print the predictions")
    p_check.add_argument("instance", help="instance JSON file")
    p_check.add_argument("--out", help="write the JSON result to this file instead of stdout")
    p_check.add_argument(
        "--timeout",
        type=_positive_seconds,
        metavar="SECONDS",
        help="stop after this long and answer status inconclusive, reason budget",
    )
    p_check.set_defaults(run=cmd_check)
    default_report = str(REPO_ROOT / "reports" / "claims.json")
    p_explain = sub.add_parser(
        "explain", help="one claim: statement, provenance, verdict, counterexample, replay"
    )
    p_explain.add_argument("id", help="the claim id, e.g. MM-THM-G")
    p_explain.add_argument(
        "--from", dest="report", default=default_report, help="the claims report to read"
    )
    p_explain.set_defaults(run=cmd_explain)
    p_report = sub.add_parser(
        "report", help="rebuild reports/index.html and claims.md from the report, no rerun"
    )
    p_report.add_argument(
        "--from", dest="report", default=default_report, help="the claims report to render"
    )
    p_report.add_argument("--out", help="output folder (default: the report's folder)")
    p_report.add_argument(
        "--against", metavar="OLD.json", help="an earlier claims.json: show what changed since"
    )
    p_report.set_defaults(run=cmd_report)
    p_index = sub.add_parser(
        "index", help="rebuild theorems/claims.index.json, what list and explain read"
    )
    p_index.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 when the index differs from a fresh build",
    )
    p_index.set_defaults(run=cmd_index)
    from theorems.framework.lock import DEFAULT_LOCK

    p_lock = sub.add_parser(
        "lock", help="compare a report with the verdict lock, or rewrite the lock (--update)"
    )
    p_lock.add_argument(
        "--update",
        action="store_true",
        help="rewrite the lock from the report's verdicts (a claim not run there keeps its pin, "
        "or is recorded as not-run)",
    )
    p_lock.add_argument(
        "--from",
        dest="report",
        default=str(REPO_ROOT / "reports" / "claims.json"),
        help="the claims report (default reports/claims.json)",
    )
    p_lock.add_argument(
        "--lock",
        default=str(REPO_ROOT / DEFAULT_LOCK),
        help=f"the lock file (default {DEFAULT_LOCK})",
    )
    p_lock.set_defaults(run=cmd_lock)
    p_tol = sub.add_parser(
        "tolerances",
        help="the claims' tolerances far above what they observe, and whether each is derived",
    )
    p_tol.add_argument(
        "--from", dest="report", default=default_report, help="the claims report to read"
    )
    p_tol.add_argument("--all", action="store_true", help="list every slack, not only loose ones")
    p_tol.add_argument(
        "--check",
        action="store_true",
        help="exit 1 when a loose tolerance carries no derivation",
    )
    p_tol.set_defaults(run=cmd_tolerances)
    args = parser.parse_args(argv)
    return args.run(args)
