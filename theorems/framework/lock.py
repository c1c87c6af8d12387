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
`python -m theorems lock --update` (from reports/claims.json).

The lock pins the *observed* verdict; a claim's `expected` stays the paper-level
expectation. Where they differ (a theorem pinned as inconclusive while its numerics are
fixed), the lock decides whether the run passes.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from theorems.framework.verdicts import ID_PATTERN, VERDICTS

DEFAULT_LOCK = Path("theorems") / "verdicts.lock"
UPDATE_COMMAND = "python -m theorems lock --update"
SHOWN_CHARS = 1500  # of a counterexample printed in a gate diff
SHOWN_LINES = 30  # of a falsifying example printed in a gate diff

HEADER = """\
# The verdict lock of attention-theorems: the pinned verdict of every gating claim.
# `python -m pytest theorems/` fails when a claim's verdict differs from its line here.
# After a deliberate change, rewrite it with: python -m theorems lock --update
# Conjectures (expected="unknown") are reported but never pinned.
# Columns: claim id, verdict (holds | refuted | inconclusive | vacuous | error), paper.
"""
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
        entry = self.entries.get(claim_id)
        return entry.verdict if entry else None


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
        if verdict not in VERDICTS:
            problems.append(
                f"line {number}: unknown verdict {verdict!r} for {claim_id} "
                f"(choose one of {', '.join(VERDICTS)})"
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


def render(entries: Iterable[Entry | tuple[str, str, str]], profile: str | None) -> str:
    """Lock text: the header, the profile, then one aligned line per claim (in the given
    order, which is the report's: by paper, then by where the claim is defined)."""
    rows = [(e.id, e.verdict, e.paper) if isinstance(e, Entry) else tuple(e) for e in entries]
    width = max((len(r[0]) for r in rows), default=0) + 2
    lines = [HEADER.rstrip("\n")]
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
    the lock's path as shown in messages.
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
    for claim in claims:
        ran[claim["id"]] = claim
        claim_id, verdict = claim["id"], claim["verdict"]
        entry = lock.entries.get(claim_id)
        if claim.get("expected") == "unknown":
            result.conjectures += 1
            if entry is not None:
                result.problems.append(
                    f"lock line {entry.line} pins {claim_id}, a conjecture (expected='unknown'), "
                    f"which never gates: remove the line ({UPDATE_COMMAND})"
                )
            continue
        if entry is None:
            result.problems.append(
                f"claim {claim_id}: not in the lock {where} (this run says {verdict}); pin it "
                f"with `{UPDATE_COMMAND}` once the verdict is the one you mean"
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
                f"which never gates: remove the line ({UPDATE_COMMAND})"
            )
        elif exists or (known is None and partial):
            result.not_run += 1
        else:
            result.problems.append(
                f"lock line {entry.line}: {entry.id} names no claim (renamed or deleted?); "
                f"remove the line or run `{UPDATE_COMMAND}`"
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
        if entry is not None and expected not in (None, "unknown") and entry.verdict != expected:
            result.notes.append(
                f"{claim['id']}: the lock pins {entry.verdict} while the claim expects "
                f"{expected} (the lock decides the gate)"
            )
    return result


def update(
    lock: Lock | None,
    claims: Iterable[Mapping],
    *,
    known: Mapping[str, str] | None,
    order: list[str] | None = None,
) -> tuple[list[tuple[str, str, str]], list[str]]:
    """New lock rows from a report's claims, keeping the lines of claims the report lacks
    (a partial report), dropping conjectures and lines that name no claim (when `known`).
    Returns (rows, one line per change)."""
    old = dict(lock.entries) if lock else {}
    rows: dict[str, tuple[str, str, str]] = {}
    changes: list[str] = []
    reported = set()
    for claim in claims:
        reported.add(claim["id"])
        if claim.get("expected") == "unknown":
            if claim["id"] in old:
                changes.append(f"- {claim['id']}: a conjecture now (expected='unknown'), unpinned")
            continue
        rows[claim["id"]] = (claim["id"], claim["verdict"], claim.get("paper", ""))
        before = old.get(claim["id"])
        if before is None:
            changes.append(f"+ {claim['id']}: {claim['verdict']}")
        elif before.verdict != claim["verdict"]:
            changes.append(f"~ {claim['id']}: {before.verdict} -> {claim['verdict']}")
    for claim_id, entry in old.items():
        if claim_id in reported:
            continue
        if known is not None and claim_id not in known:
            changes.append(f"- {claim_id}: names no claim, removed")
        elif known is not None and known[claim_id] == "unknown":
            changes.append(f"- {claim_id}: a conjecture now (expected='unknown'), unpinned")
        else:
            rows[claim_id] = (claim_id, entry.verdict, entry.paper)  # not in this report: kept
    if order:
        rank = {claim_id: i for i, claim_id in enumerate(order)}
        ordered = sorted(rows.values(), key=lambda r: (rank.get(r[0], len(rank)), r[0]))
    else:
        ordered = list(rows.values())
    return ordered, changes
