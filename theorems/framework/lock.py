"""The verdict lock: `theorems/verdicts.lock` pins the verdict of every gating claim.

A run of the claims suite whose verdict for some claim differs from the lock fails (the
pytest plugin applies `gate` at session end, on the merged report). The lock is a small text
file, one claim per line, so that a change of verdict is a one-line diff in review:

    # profile: ci
    MM-DESCENT-DIRECTION        holds         2306.13596
    MM-CTRL-GENERAL-SCORES      refuted       2306.13596

Columns: claim id, pinned verdict (holds, refuted, inconclusive, vacuous, error), paper (the rest of
the line, informational). `#` starts a comment. Conjectures (expected="unknown") are
reported but never pinned. Rewrite the lock after a deliberate change with
`python -m theorems lock --update` (from reports/claims.json; `--lock FILE` and `--from
REPORT` for another lock or report: `update_command` writes the command every hint shows).

A claim that declares what it needs (``runs_only_with``, e.g. EMB-REAL and its IMDB/Yelp
data) and was not run where the lock was rewritten keeps its previous pin; with none, its
line says `not-run` instead of a verdict:

    EMB-REAL                    not-run       2505.17282

`not-run` pins nothing. A run where the claim skips again leaves the line unchecked (a note);
a run that gives it a verdict fails the gate until that verdict is pinned, so a claim never
run where the lock was made never passes as `holds` or anything else unseen.

The lock pins the *observed* verdict; a claim's `expected` stays the paper-level
expectation. Where they differ (a theorem pinned as inconclusive while its numerics are
fixed), the lock decides whether the run passes.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from theorems.framework import REPO_ROOT
from theorems.framework.verdicts import ID_PATTERN, VERDICTS

DEFAULT_LOCK = Path("theorems") / "verdicts.lock"
DEFAULT_REPORT = Path("reports") / "claims.json"  # the report `lock` reads by default
UPDATE_COMMAND = "python -m theorems lock --update"  # with the default lock and report
#: The lock word of a claim not run where the lock was made (no verdict pinned; see above).
NOT_RUN = "not-run"
SHOWN_CHARS = 1500  # of a counterexample printed in a gate diff
SHOWN_LINES = 30  # of a falsifying example printed in a gate diff

HEADER = """\
# The verdict lock of attention-theorems: the pinned verdict of every gating claim.
# `python -m pytest theorems/` fails when a claim's verdict differs from its line here.
# After a deliberate change, rewrite it with: python -m theorems lock --update
# Conjectures (expected="unknown") are reported but never pinned.
# Columns: claim id, verdict (holds | refuted | inconclusive | vacuous | error), paper.
# not-run: a claim that needs what the machine lacked (runs_only_with) and had no pin: nothing
# is pinned; a run that gives it a verdict fails until the verdict is pinned.
"""
#: The header of a lock that is not this checkout's (`--lock FILE`, `--verdict-lock FILE`).
OTHER_HEADER = """\
# A verdict lock for attention-theorems: the pinned verdict of every gating claim.
# `python -m pytest --verdict-lock <this file>` fails when a verdict differs from its line.
# After a deliberate change, rewrite it with: python -m theorems lock --update --lock <this file>
""" + HEADER.split("\n", 3)[3]
_PROFILE = re.compile(r"^#\s*profile:\s*(\S+)\s*$")


class LockError(ValueError):
    """A malformed (or unreadable) lock file; `problems` holds one message per bad line."""

    def __init__(self, path: Path | str, problems: list[str], *, what: str = "malformed"):
        self.path, self.problems = Path(path), problems
        lines = "\n".join(f"  {p}" for p in problems)
        super().__init__(f"{what} verdict lock {path}:\n{lines}")


@dataclass(frozen=True)
class Entry:
    id: str
    verdict: str
    paper: str
    line: int


@dataclass
class Lock:
    path: Path
    entries: dict[str, Entry] = field(default_factory=dict)
    profile: str | None = None

    def verdict(self, claim_id: str) -> str | None:
        """The pinned verdict; None when the claim has no line or its line says `not-run`."""
        entry = self.entries.get(claim_id)
        return entry.verdict if entry and entry.verdict != NOT_RUN else None


def _is(path: Path, other: Path) -> bool:
    try:
        return path.resolve() == other.resolve()
    except OSError:  # e.g. a symlink loop: then it is not the default
        return False


def _shown_path(path: Path, cwd: Path | None) -> str:
    """`path` as a command typed in `cwd` takes it: a relative path as given, one under `cwd`
    relative to it, any other absolute."""
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.relative_to(cwd or Path.cwd()))
    except ValueError:
        return str(path)


def update_command(
    lock: Path | str | None = None,
    report: Path | str | None = None,
    *,
    cwd: Path | None = None,
    root: Path = REPO_ROOT,
) -> str:
    """The command that rewrites `lock` from `report`: `python -m theorems lock --update`,
    with `--lock FILE` and `--from REPORT` whenever they are not what that command reads by
    default (`root`'s theorems/verdicts.lock and reports/claims.json), as paths typed in `cwd`
    (default: the working directory). Every hint to rewrite a lock is this command, so that
    following it rewrites the lock in use, not the checkout's."""
    parts = [UPDATE_COMMAND]
    for option, path, default in (
        ("--lock", lock, DEFAULT_LOCK),
        ("--from", report, DEFAULT_REPORT),
    ):
        if path is None or _is(Path(path), root / default):
            continue
        parts.append(f"{option} {shlex.quote(_shown_path(Path(path), cwd))}")
    return " ".join(parts)


def parse(text: str, path: Path | str = DEFAULT_LOCK) -> Lock:
    """Parse lock text; LockError lists every malformed line (bad syntax, unknown verdict
    word, an id that is not a claim id, an id pinned twice)."""
    lock, problems = Lock(Path(path)), []
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        profile = _PROFILE.match(line)
        if profile:
            lock.profile = profile.group(1)
            continue
        line = line.split(" #", 1)[0].split("\t#", 1)[0].strip()
        if not line or line.startswith("#"):
            continue
        fields = line.split(None, 2)
        if len(fields) < 2:
            problems.append(f"line {number}: expected 'CLAIM-ID VERDICT [PAPER]', got {raw!r}")
            continue
        claim_id, verdict = fields[0], fields[1]
        paper = fields[2].strip() if len(fields) > 2 else ""
        if not ID_PATTERN.match(claim_id):
            problems.append(f"line {number}: {claim_id!r} is not a claim id (e.g. MM-SVM-MARGIN)")
            continue
        if verdict not in VERDICTS and verdict != NOT_RUN:
            problems.append(
                f"line {number}: unknown verdict {verdict!r} for {claim_id} "
                f"(choose one of {', '.join(VERDICTS)}; or {NOT_RUN}, nothing pinned)"
            )
            continue
        if claim_id in lock.entries:
            first = lock.entries[claim_id].line
            problems.append(
                f"line {number}: {claim_id} is pinned twice (lines {first} and {number})"
            )
            continue
        lock.entries[claim_id] = Entry(claim_id, verdict, paper, number)
    if problems:
        raise LockError(path, problems)
    return lock


def read(path: Path | str) -> Lock | None:
    """The lock at `path`, or None if there is no such file; LockError if it is malformed."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except IsADirectoryError:
        raise LockError(path, ["it is a directory, not a file"], what="unreadable") from None
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise LockError(path, [f"cannot read it: {why}"], what="unreadable") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        problem = f"line {line}: not UTF-8 text (byte {data[exc.start]:#04x}: {exc.reason})"
        raise LockError(path, [problem], what="unreadable") from None
    return parse(text, path)


def render(
    entries: Iterable[Entry | tuple[str, str, str]], profile: str | None, *, header: str = HEADER
) -> str:
    """Lock text: the header (OTHER_HEADER for a lock that is not the checkout's), the
    profile, then one aligned line per claim (in the given order, which is the report's: by
    paper, then by where the claim is defined)."""
    rows = [(e.id, e.verdict, e.paper) if isinstance(e, Entry) else tuple(e) for e in entries]
    width = max((len(r[0]) for r in rows), default=0) + 2
    lines = [header.rstrip("\n")]
    if profile:
        lines.append(f"# profile: {profile}")
    lines += [f"{i.ljust(width)}{v.ljust(14)}{p}".rstrip() for i, v, p in rows]
    return "\n".join(lines) + "\n"


# --------------------------------------------------------------------------- the gate


@dataclass
class GateResult:
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    checked: int = 0  # claims whose verdict matched their lock line
    conjectures: int = 0  # claims in the run that do not gate
    not_run: int = 0  # lock lines of claims this (partial) run did not run

    @property
    def ok(self) -> bool:
        return not self.problems


def _shown(value, limit: int = SHOWN_CHARS) -> str:
    text = json.dumps(value, separators=(",", ":"), allow_nan=False)
    return text if len(text) <= limit else text[: limit - 14] + " ... [trimmed]"


def _diff(claim: Mapping, pinned: str, saved: Mapping[str, str]) -> str:
    lines = [f"claim {claim['id']}: lock says {pinned}, this run says {claim['verdict']}"]
    if claim.get("statement"):
        lines.append(f"    statement: {claim['statement']}")
    if claim.get("reason"):
        lines.append(f"    reason: {claim['reason']}")
    if claim.get("counterexample") is not None:
        where = f" (saved to {saved[claim['id']]})" if claim["id"] in saved else ""
        lines.append(f"    counterexample{where}: {_shown(claim['counterexample'])}")
    if claim.get("falsifying_example"):
        falsifying = claim["falsifying_example"].splitlines()
        lines += [f"    {line}" for line in falsifying[:SHOWN_LINES]]
        if len(falsifying) > SHOWN_LINES:
            lines.append(f"    ... ({len(falsifying) - SHOWN_LINES} more lines in the report)")
    if claim.get("error"):
        lines += [f"    {line}" for line in claim["error"].splitlines()[:6]]
    return "\n".join(lines)


def gate(
    lock: Lock,
    claims: Iterable[Mapping],
    *,
    known: Mapping[str, str] | None = None,
    collected: Iterable[str] = (),
    partial: bool = False,
    saved: Mapping[str, str] | None = None,
    optional: Mapping[str, str] | None = None,
    unfinished: Mapping[str, str] | None = None,
    collection_errors: Mapping[str, str] | None = None,
    profile: str | None = None,
    where: str | None = None,
    command: str | None = None,
) -> GateResult:
    """Compare the claims of a run (report entries) with the lock.

    `known`: id -> expected of every claim that exists (None: not known, then a lock line
    not in the run names no claim only if the run is full). `collected`: ids the run
    collected (a collected claim with no verdict, e.g. skipped, is a problem too).
    `partial`: the run did not collect every claim; lock lines it did not run are skipped.
    `saved`: id -> path of a saved counterexample, named in the diff. `optional`: id -> skip
    reason of the claims that skipped for want of what they declare they need
    (``runs_only_with``): their lock lines are noted as not checked, not failed.
    `unfinished`: id -> why, of claims the run collected but did not finish (interrupted,
    stopped early), and `collection_errors`: module -> error, of modules whose claims are
    unknown: either fails the gate (a partial run is never passed as a complete one). `where`:
    the lock's path as shown in messages; `command`: the command that rewrites it, as the
    hints show it (default: `update_command(lock.path)`).

    A `not-run` lock line pins nothing: a claim that skips again is noted (if it declares
    what it needs) and one that gives a verdict fails, to be pinned on purpose.
    """
    result, saved, collected = GateResult(), saved or {}, set(collected)
    optional, unfinished = optional or {}, unfinished or {}
    for why in sorted(set(unfinished.values())):
        ids = [i for i, w in unfinished.items() if w == why]
        one = len(ids) == 1
        result.problems.append(
            f"run did not finish: {why}: {'1 claim has' if one else f'{len(ids)} claims have'} "
            f"no verdict: {', '.join(ids)}; "
            f"{'its lock line is' if one else 'their lock lines are'} not checked"
        )
    for module, error in sorted((collection_errors or {}).items()):
        result.problems.append(
            f"module not collected: {module} ({error}): any claims it defines have no verdict "
            "and their lock lines are not checked"
        )
    where, ran = where or str(lock.path), {}
    command = command or update_command(lock.path)
    for claim in claims:
        ran[claim["id"]] = claim
        claim_id, verdict = claim["id"], claim["verdict"]
        entry = lock.entries.get(claim_id)
        if claim.get("expected") == "unknown":
            result.conjectures += 1
            if entry is not None:
                result.problems.append(
                    f"lock line {entry.line} pins {claim_id}, a conjecture (expected='unknown'), "
                    f"which never gates: remove the line ({command})"
                )
            continue
        if entry is None:
            result.problems.append(
                f"claim {claim_id}: not in the lock {where} (this run says {verdict}); pin it "
                f"with `{command}` once the verdict is the one you mean"
            )
        elif entry.verdict == NOT_RUN:
            result.problems.append(
                f"claim {claim_id}: lock line {entry.line} of {where} records it as not run, "
                f"nothing pinned (this run says {verdict}); pin it with `{command}` once the "
                "verdict is the one you mean"
            )
        elif entry.verdict != verdict:
            result.problems.append(_diff(claim, entry.verdict, saved))
        else:
            result.checked += 1
    for claim_id in sorted(collected - set(ran)):  # e.g. a skipped claim
        entry = lock.entries.get(claim_id)
        if claim_id in unfinished:
            continue  # named above
        if entry is not None and claim_id in optional:
            result.notes.append(
                f"claim {claim_id} not run ({optional[claim_id]}): lock line {entry.line} "
                f"({entry.verdict}) not checked"
            )
        elif entry is not None:
            result.problems.append(
                f"claim {claim_id}: collected but gave no verdict (skipped?); "
                f"lock line {entry.line} says {entry.verdict}"
            )
    for entry in lock.entries.values():
        if entry.id in ran or entry.id in collected:
            continue
        exists = known is not None and entry.id in known
        if known is not None and known.get(entry.id) == "unknown":
            result.problems.append(
                f"lock line {entry.line} pins {entry.id}, a conjecture (expected='unknown'), "
                f"which never gates: remove the line ({command})"
            )
        elif exists or (known is None and partial):
            result.not_run += 1
        else:
            result.problems.append(
                f"lock line {entry.line}: {entry.id} names no claim (renamed or deleted?); "
                f"remove the line or run `{command}`"
            )
    if partial and result.not_run:
        result.notes.append(
            f"partial run: {result.not_run} locked claims were not run and not checked "
            "(run `python -m pytest theorems/` for the full gate)"
        )
    if profile and lock.profile and profile != lock.profile:
        result.notes.append(
            f"the lock was made under the {lock.profile!r} profile and this run used "
            f"{profile!r}: verdicts may legitimately differ"
        )
    for claim in ran.values():
        entry = lock.entries.get(claim["id"])
        expected = claim.get("expected")
        pinned = entry.verdict if entry is not None else NOT_RUN
        if pinned != NOT_RUN and expected not in (None, "unknown") and pinned != expected:
            result.notes.append(
                f"{claim['id']}: the lock pins {pinned} while the claim expects "
                f"{expected} (the lock decides the gate)"
            )
    return result


@dataclass
class Updated:
    """What `update` makes of a report: the new lock rows, and one line each for what changed
    (`+` pinned, `~` moved, `-` removed), for a claim the report did not run whose line stays
    (`=`: a pin kept, or `not-run` again), and for a claim left unpinned or a skip the gate
    will fail on (`!`: the command exits 1)."""

    rows: list[tuple[str, str, str]] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def update(
    lock: Lock | None,
    claims: Iterable[Mapping],
    *,
    known: Mapping[str, str] | None,
    order: list[str] | None = None,
    skipped: Iterable[Mapping] = (),
    unfinished: Iterable[str] = (),
) -> Updated:
    """New lock rows from a report's claims, keeping the lines of claims the report lacks
    (a partial report), dropping conjectures and lines that name no claim (when `known`).

    `skipped`: the report's "skipped" entries (claims that ran no example, with the reason).
    One that declares what it needs (``runs_only_with``) keeps its pin, or gets a `not-run`
    line when it had none; one that skipped without declaring why is a problem (a pin it had
    is kept, and the gate fails on it), as is a claim of `known` left with no line at all.
    `unfinished`: ids of claims that did not finish in the report: treated as not in it."""
    old = dict(lock.entries) if lock else {}
    out, rows = Updated(), {}
    reported = set()
    for claim in claims:
        reported.add(claim["id"])
        if claim.get("expected") == "unknown":
            if claim["id"] in old:
                out.changes.append(
                    f"- {claim['id']}: a conjecture now (expected='unknown'), unpinned"
                )
            continue
        rows[claim["id"]] = (claim["id"], claim["verdict"], claim.get("paper", ""))
        before = old.get(claim["id"])
        if before is None:
            out.changes.append(f"+ {claim['id']}: {claim['verdict']}")
        elif before.verdict != claim["verdict"]:
            out.changes.append(f"~ {claim['id']}: {before.verdict} -> {claim['verdict']}")
    unfinished = set(unfinished)
    for skip in skipped:
        claim_id = skip["id"]
        if claim_id in reported or claim_id in unfinished:
            continue  # a verdict from another of its items; or did not finish: not in the report
        reported.add(claim_id)
        before, why = old.get(claim_id), skip.get("reason") or "no reason given"
        if skip.get("expected") == "unknown":
            if before is not None:
                out.changes.append(f"- {claim_id}: a conjecture now (expected='unknown'), unpinned")
            continue
        if before is not None:
            rows[claim_id] = (claim_id, before.verdict, before.paper)
        if not skip.get("runs_only_with"):
            kept = (
                f": pin kept ({before.verdict}), and the gate fails on it while it gives no verdict"
                if before
                else ", so not pinned"
            )
            out.problems.append(
                f"! {claim_id}: skipped ({why}) without declaring what it needs "
                f"(runs_only_with){kept}"
            )
        elif before is None:
            rows[claim_id] = (claim_id, NOT_RUN, skip.get("paper", ""))
            out.changes.append(f"+ {claim_id}: {NOT_RUN} (not run here: {why})")
        elif before.verdict == NOT_RUN:
            out.kept.append(f"= {claim_id}: not run here ({why}), still {NOT_RUN}")
        else:
            out.kept.append(f"= {claim_id}: not run here ({why}), pin kept ({before.verdict})")
    for claim_id, entry in old.items():
        if claim_id in reported:
            continue
        if known is not None and claim_id not in known:
            out.changes.append(f"- {claim_id}: names no claim, removed")
        elif known is not None and known[claim_id] == "unknown":
            out.changes.append(f"- {claim_id}: a conjecture now (expected='unknown'), unpinned")
        else:
            rows[claim_id] = (claim_id, entry.verdict, entry.paper)  # not in this report: kept
    for claim_id in order or list(known or {}):
        if (known or {}).get(claim_id, "unknown") == "unknown" or claim_id in rows:
            continue
        if claim_id in reported:
            continue  # a skip without declaring why: named above
        where = "did not finish in the report" if claim_id in unfinished else "not in the report"
        out.problems.append(f"! {claim_id}: {where}, so not pinned (run the full suite first)")
    if order:
        rank = {claim_id: i for i, claim_id in enumerate(order)}
        out.rows = sorted(rows.values(), key=lambda r: (rank.get(r[0], len(rank)), r[0]))
    else:
        out.rows = list(rows.values())
    return out
