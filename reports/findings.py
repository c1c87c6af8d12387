"""What the top of the report says, as data: the readings the suite refutes (each with the
variants of it that hold), the claims that need a reader's attention, and the verdict changes
against the verdict lock and against an earlier claims.json.

reports/build.py renders these; nothing here formats text for a page.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# Verdicts that are never evidence either way: a reader must look at them even when expected.
UNDECIDED = ("inconclusive", "vacuous", "error")


@dataclass(frozen=True)
class Finding:
    """A reading of a paper refuted as read: the claim, and each variant that holds (its id
    and its record in the same report, None when this run did not include it)."""

    claim: dict
    variants: tuple[tuple[str, dict | None], ...]


@dataclass(frozen=True)
class Change:
    """One claim whose verdict differs between two sources. `before`/`after` are verdicts, or
    None where the claim is absent on that side (new in this run, or gone from it)."""

    id: str
    before: str | None
    after: str | None

    @property
    def what(self) -> str:
        if self.before is None:
            return "new"
        if self.after is None:
            return "not in this run"
        return "changed"


@dataclass(frozen=True)
class Diff:
    """The verdict changes of this report against a baseline (`source`: what it was, e.g. the
    lock's path), and how many claims the two share."""

    source: str
    changes: tuple[Change, ...]
    compared: int
    missing: int  # baseline claims this run did not include (a partial run: `-k`, a file)

    @property
    def changed(self) -> tuple[Change, ...]:
        return tuple(c for c in self.changes if c.what == "changed")


def is_reading(claim: dict) -> bool:
    """A statement of a paper (or of its spec) that the suite expects to be false as read:
    expected refuted, and not a negative control (which is a deliberately wrong statement)."""
    return claim["expected"] == "refuted" and claim["kind"] != "control"


def refuted_readings(claims: list[dict], tests: str = "paper") -> list[Finding]:
    """The readings refuted as read in this run, in report order: of the papers' statements
    (``tests="paper"``), or of numbers of our own spec (``"calibration"``: a threshold, a
    recorded value), which say nothing against the paper. A reading that is expected refuted
    but was not refuted is not a finding here: it is listed under attention."""
    by_id = {c["id"]: c for c in claims}
    return [
        Finding(c, tuple((v, by_id.get(v)) for v in c.get("variants") or ()))
        for c in claims
        if is_reading(c) and c["verdict"] == "refuted" and c.get("tests", "paper") == tests
    ]


def conjectures(claims: list[dict]) -> list[dict]:
    """Every conjecture of the run (kind "conjecture": a user's question, no expectation),
    refuted ones first: a counterexample to a conjecture is a finding of its own."""
    found = [c for c in claims if c["kind"] == "conjecture"]
    return sorted(found, key=lambda c: c["verdict"] != "refuted")


def needs_attention(claims: list[dict]) -> list[dict]:
    """Claims whose verdict is not the expected one, or decided nothing (inconclusive,
    vacuous, error), whatever was expected."""
    return [c for c in claims if not c["as_expected"] or c["verdict"] in UNDECIDED]


def diff_verdicts(
    claims: list[dict],
    baseline: dict[str, str],
    source: str,
    *,
    ignore: frozenset = frozenset(),
    list_missing: bool = True,
) -> Diff:
    """This report's verdicts against `baseline` (id -> verdict). Claims in `ignore` (e.g.
    conjectures, which the lock never pins) are left out of the "new" list; baseline claims
    absent here are listed (`list_missing`) or only counted."""
    now = {c["id"]: c["verdict"] for c in claims}
    changes = [Change(i, baseline[i], v) for i, v in now.items() if i in baseline]
    changes = [c for c in changes if c.before != c.after]
    changes += [Change(i, None, v) for i, v in now.items() if i not in baseline and i not in ignore]
    if list_missing:
        changes += [Change(i, v, None) for i, v in baseline.items() if i not in now]
    missing = sum(i not in now for i in baseline)
    compared = sum(i in baseline for i in now)
    return Diff(source, tuple(changes), compared, missing)


def diff_lock(claims: list[dict], lock_path: Path) -> Diff | None:
    """Against the verdict lock; None if there is no lock file (LockError, a ValueError, if
    it is malformed). Conjectures (expected unknown) are never pinned, so they are not "new";
    a claim not in this run is counted, not listed (a partial run is normal)."""
    from theorems.framework.lock import read

    lock = read(lock_path)
    if lock is None:
        return None
    pinned = {i: e.verdict for i, e in lock.entries.items()}
    conjectures = frozenset(c["id"] for c in claims if c["expected"] == "unknown")
    return diff_verdicts(claims, pinned, str(lock_path), ignore=conjectures, list_missing=False)


def diff_report(claims: list[dict], old: dict, source: str) -> Diff:
    """Against an earlier claims.json (its document, already loaded and checked)."""
    return diff_verdicts(claims, {c["id"]: c["verdict"] for c in old["claims"]}, source)
