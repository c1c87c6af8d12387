"""`python -m theorems explain ID`: one claim, everything a person asks of it, on one page.

What the claim says (statement, paper, kind, provenance, what is expected), what the last run
said (verdict, reason, examples, worst slack against each bound, the counterexample), what the
lock pins, and how to replay it: the pytest node to run, and for a saved counterexample the
instance file that `python -m theorems check` reads and the `@example` line that keeps it in
the claim. Nothing is rerun: the registry gives the statement (through the claim index
while it is fresh: theorems.framework.claim_index), `reports/claims.json` (or `--from`) the
verdict, `theorems/verdicts.lock` the pin.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path

from theorems.framework import REPO_ROOT, rows
from theorems.framework.lock import DEFAULT_LOCK, NOT_RUN, LockError
from theorems.framework.lock import read as read_lock
from theorems.framework.replay import DEFAULT_STORE


class UnknownClaim(LookupError):
    """No claim has this id; ``suggestions`` are the closest ids."""

    def __init__(self, claim_id: str, suggestions: list[str]):
        self.claim_id, self.suggestions = claim_id, suggestions
        hint = f" (did you mean {', '.join(suggestions)}?)" if suggestions else ""
        super().__init__(f"no claim {claim_id!r}{hint}")


def _registered() -> dict:
    """Every claim by id: from the claim index while it is fresh, else by importing them."""
    from theorems.framework import claim_index, profiles, registry

    if profiles.current_profile() not in profiles.PROFILES:
        profiles.load_profile()
    indexed = claim_index.fresh(REPO_ROOT)
    if indexed is not None:
        return indexed
    registry.import_claim_modules()
    return dict(registry.REGISTRY)


def _report_entry(report: Path, claim_id: str) -> tuple[dict | None, str]:
    """The claim's entry in the report, or None with the reason it is missing."""
    if not report.exists():
        return None, f"no report at {report} (run `python -m pytest theorems/` first)"
    try:
        doc = json.loads(report.read_text(encoding="utf-8"))
    except ValueError as exc:
        return None, f"{report} is not valid JSON ({exc})"
    for entry in doc.get("claims", []):
        if entry.get("id") == claim_id:
            return (
                entry,
                f"{report} ({doc.get('profile', '?')} profile, {doc.get('generated', '?')})",
            )
    return None, f"{report} has no verdict for it (not run in that report)"


def _pinned(lock_path: Path, claim_id: str) -> str:
    try:
        lock = read_lock(lock_path)
    except LockError as exc:
        return f"unreadable lock ({exc})"
    if lock is None:
        return f"no lock at {lock_path}"
    entry = lock.entries.get(claim_id)
    if entry is not None and entry.verdict == NOT_RUN:
        return f"nothing ({NOT_RUN}: not run where the lock was made)"
    return lock.verdict(claim_id) or "not pinned"


def _slack_lines(entry: dict) -> list[str]:
    lines = []
    for name, s in sorted(entry.get("worst_slack", {}).items()):
        lines.append(
            f"  {name}: {s['observed']:.3g} against {s['bound']:.3g} (ratio {s['ratio']:.3g})"
        )
    return lines


def explain(
    claim_id: str,
    *,
    report: Path | None = None,
    lock: Path | None = None,
    store: Path | None = None,
) -> str:
    """The page for ``claim_id``; UnknownClaim (with the nearest ids) when there is none."""
    claims = _registered()
    info = claims.get(claim_id)
    if info is None:
        raise UnknownClaim(claim_id, difflib.get_close_matches(claim_id, list(claims), n=3))
    report = Path(report or REPO_ROOT / "reports" / "claims.json")
    lock = Path(lock or REPO_ROOT / DEFAULT_LOCK)
    store = Path(store or REPO_ROOT / DEFAULT_STORE)
    entry, source = _report_entry(report, claim_id)
    try:
        where = Path(info.file).resolve().relative_to(REPO_ROOT.resolve())
    except ValueError:
        where = Path(info.file)
    out = [
        f"{info.id}  ({info.paper}, {info.kind}, provenance {info.provenance})",
        "",
        info.statement,
        "",
        f"expected: {info.expected}    pinned in the lock: {_pinned(lock, claim_id)}",
        "tests: "
        + (
            "a number or reading of our own spec (a calibration), not the paper's statement"
            if info.tests == "calibration"
            else "the paper's statement, as read"
        ),
        f"defined in: {where}:{info.line}  (ci budget {info.budget} examples)",
        "",
    ]
    if info.note:
        label = "note"
        if info.findings:
            label = f"findings ({rows.relative_anchor(info.findings, REPO_ROOT)})"
        out += [f"{label}:", *(f"  {line}" for line in info.note.splitlines()), ""]
    for variant in info.variants:  # a reading refuted as read: what holds instead
        other = claims.get(variant)
        statement = other.statement if other else "(no such claim)"
        out += [f"holds instead: {variant}: {statement}", ""]
    if entry is None:
        out.append(f"last run: none ({source})")
    else:
        out += [
            f"last run: {entry['verdict']} — {entry.get('reason', '')}",
            f"  from {source}",
            f"  examples {entry.get('examples')} of a budget of {entry.get('budget')}, "
            f"{entry.get('seconds', 0.0):.1f} s",
        ]
        for label in ("rejections", "inconclusive"):
            if entry.get(label):
                out.append(f"  {label}: {entry[label]}")
        slack = _slack_lines(entry)
        if slack:
            out += ["worst slack (observed against the bound):", *slack]
        falsifying = entry.get("falsifying_example")
        if falsifying:  # Hypothesis' text, kept as the report stores it (a string or lines)
            lines = falsifying.splitlines() if isinstance(falsifying, str) else falsifying
            out += ["counterexample:", *(f"  {line}" for line in lines)]
    saved = store / f"{claim_id}.json"
    node = entry.get("nodeid") if entry else None
    out += ["", "replay:"]
    out.append(f"  python -m pytest {node or where} -p no:xdist")
    if saved.exists():
        rel = saved.resolve().relative_to(REPO_ROOT.resolve()) if saved.is_absolute() else saved
        out += [
            f"  saved counterexample: {rel} (replayed first on every run)",
            f"  python -m theorems check {rel}",
            f'  keep it in the claim: @example(**saved_arguments("{claim_id}"))',
        ]
    return "\n".join(out)
