"""What the run's controller (or its only process) knows and does with it: the run state
that the plugin's hooks fill, the accounting of claim items that did not finish, the saving
of counterexamples, the verdict gate over the merged report, and the summary lines printed
at the end. No pytest here: the hooks in `plugin` pass in what they read from pytest.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

from theorems.framework import lock as locks
from theorems.framework import replay, shrink
from theorems.framework.profiles import current_profile
from theorems.framework.records import CRASHED, crash_record, empty_collection, write_json
from theorems.framework.registry import ClaimInfo
from theorems.framework.verdicts import order_key

SHOWN_LINES = 30  # lines of a falsifying example printed with a saved counterexample
SHOWN_IDS = 20  # claim ids named in the line on the claims a run did not finish
# Gate problems shown in red: their first words.
RED = ("claim ", "lock ", "malformed", "unreadable", "no verdict", "run did not", "module not")


@dataclass
class RunState:
    """One process's view of the run: what it recorded (flushed to its evidence file after
    every claim), and on the controller what the merged run came to."""

    report_path: Path
    run_id: str
    run_dir: Path
    worker: str  # "main" without xdist, else the xdist worker id
    is_worker: bool
    records: dict[str, dict] = field(default_factory=dict)  # item nodeid -> record
    skips: dict[str, dict] = field(default_factory=dict)  # item nodeid -> skipped claim item
    summary: dict | None = None
    # The verdict gate: on/off (and why off), the lock (None: no file) or why it is malformed.
    gate_on: bool = True
    gate_off: str = ""
    lock_path: Path | None = None
    lock: locks.Lock | None = None
    lock_error: str | None = None
    store: Path | None = None  # where counterexamples are saved
    # What this process collected: claim ids, deselected claim ids, and every claim that
    # exists under <rootdir>/theorems (id -> expected; None when unknown).
    collection: dict | None = None
    gate: locks.GateResult | None = None
    gate_lines: list[str] = field(default_factory=list)
    saved: list[dict] = field(default_factory=list)
    replayed: dict[str, dict] = field(default_factory=dict)  # claims that replayed a saved one
    skipped: list[dict] = field(default_factory=list)  # claims that ran no example
    # Infrastructure faults, seen by the controller (or the only process): items whose run
    # protocol finished, items whose xdist worker died (nodeid -> message), why the run
    # stopped early, modules that failed to collect (nodeid -> message), and what of the run
    # did not finish (the report's "incomplete").
    finished: set[str] = field(default_factory=set)
    crashed: dict[str, str] = field(default_factory=dict)
    interrupted: str | None = None
    collection_errors: dict[str, str] = field(default_factory=dict)
    incomplete: dict | None = None
    crash_lines: list[tuple[str, str]] = field(default_factory=list)  # (claim id, message)
    # Where paths are shown relative to: the invocation directory, then the rootdir.
    bases: tuple[Path, ...] = ()

    def relative(self, path: Path) -> str:
        for base in self.bases:
            with contextlib.suppress(ValueError):
                return str(path.relative_to(base))
        return str(path)

    def flush(self) -> None:
        if not self.records and not self.skips and not self.collection:
            return
        doc = {
            "run_id": self.run_id,
            "worker": self.worker,
            "records": list(self.records.values()),
            "skips": list(self.skips.values()),
            "collection": self.collection,
        }
        write_json(self.run_dir / f"{self.worker}.json", doc)

    def target(self, info: ClaimInfo) -> str:
        """The verdict a claim item must reach to pass: its lock line when the gate is on
        and the lock pins it (conjectures never), else the claim's `expected`."""
        if not self.gate_on or self.lock is None or info.expected == "unknown":
            return info.expected
        return self.lock.verdict(info.id) or info.expected


def truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def under_ci() -> bool:
    return truthy(os.environ.get("CI"))


def account_for_items(
    state: RunState, stopped: str | None, records: list[dict], skips: list[dict], items: dict
) -> tuple[list[dict], list[dict], dict | None]:
    """Account for every collected claim item: one whose xdist worker died gets an error
    record; one that never reported (an interrupted run, a stopped worker) is a "not run"
    entry with the reason (`stopped`: why pytest stopped early, if it did). Returns (records,
    not-run entries, the report's "incomplete")."""
    done = {r["item"] for r in records} | {s["item"] for s in skips} | state.finished
    records = list(records)
    for nodeid, message in state.crashed.items():
        if nodeid in items and nodeid not in done:
            records.append(crash_record(items[nodeid], message))
            state.crash_lines.append((items[nodeid]["id"], f"{message}: {CRASHED}"))
            done.add(nodeid)
    why = state.interrupted or (
        f"the run stopped early ({stopped})"
        if stopped
        else "the run ended before they reported (a worker that stopped early?)"
    )
    missing = [entry for nodeid, entry in items.items() if nodeid not in done]
    missing.sort(key=lambda e: order_key(e["paper"], e["kind"], e["module"], e["line"], e["id"]))
    entries = [
        {**entry, "reason": f"did not finish: {why}", "runs_only_with": None} for entry in missing
    ]
    if not missing and not state.collection_errors:
        return records, entries, None
    if not missing:
        n = len(state.collection_errors)
        why = f"{n} module{'s' * (n != 1)} could not be collected"
    incomplete = {
        "reason": why,
        "not_finished": list(dict.fromkeys(entry["id"] for entry in missing)),
        "collection_errors": dict(sorted(state.collection_errors.items())),
    }
    return records, entries, incomplete


def save_counterexamples(state: RunState, claims: list[dict], replays: dict) -> None:
    for claim in claims:
        if claim["verdict"] != "refuted":
            continue
        try:
            saved = replay.save(
                claim, replays.get(claim["id"]), profile=current_profile(), store=state.store
            )
        except Exception as exc:  # the report keeps it; say so, and save the others
            where = state.relative(replay.path_for(claim["id"], state.store))
            state.gate_lines.append(
                f"could not save the counterexample of {claim['id']} to {where} "
                f"(it is in the report): {exc!r}"
            )
            continue
        if saved is not None:
            saved["id"], saved["shown"] = claim["id"], state.relative(saved["path"])
            text = claim.get("falsifying_example") or ""
            lines = [line for line in text.splitlines() if "@reproduce_failure" not in line]
            if len(lines) > SHOWN_LINES:
                more = len(lines) - SHOWN_LINES
                lines = [*lines[:SHOWN_LINES], f"... ({more} more lines in {saved['shown']})"]
            reduced = shrink.reduced_text(claim.get("reduced"))
            if reduced:  # Hypothesis printed its own example; the one saved is smaller
                lines = [f"{reduced}; the example below is the reduced one:", *lines]
            saved["falsifying"] = lines
            state.saved.append(saved)


def update_command(state: RunState) -> str:
    """The command that rewrites the lock this run is judged against from the report it wrote
    (`--lock`/`--from` when they are not the checkout's), as typed where pytest was run."""
    cwd = state.bases[0] if state.bases else None
    return locks.update_command(state.lock_path, state.report_path, cwd=cwd)


def run_gate(
    state: RunState, claims: list[dict], skipped: list[dict], collection: dict | None
) -> None:
    """Compare the merged verdicts with the lock; fill state.gate and state.gate_lines."""
    where = state.relative(state.lock_path)
    if not state.gate_on:
        state.gate_lines = [f"verdict gate off ({state.gate_off}): {where} not checked"]
        return
    if state.gate_off:  # e.g. ATTN_NO_GATE ignored under CI
        state.gate_lines.append(f"note: {state.gate_off}")
    collection = collection or empty_collection()
    known = collection.get("known")
    if state.lock_error is not None:
        state.gate = locks.GateResult(problems=[state.lock_error])
        return
    if state.lock is None:
        create = f"create it with `{update_command(state)}` after a full run"
        if under_ci() and known:
            state.gate = locks.GateResult(problems=[f"no verdict lock at {where}: {create}"])
        else:
            state.gate_lines.append(f"verdict gate not applied: no lock at {where} ({create})")
        return
    collected = set(collection["collected"]) or {c["id"] for c in claims}
    not_run = ({*(known or {}), *collection["deselected"]}) - collected
    if collection.get("known_note"):
        state.gate_lines.append(f"note: {collection['known_note']}")
    incomplete = state.incomplete or {}
    state.gate = locks.gate(
        state.lock,
        claims,
        known=known,
        collected=collected,
        # Claims that exist but could not be listed: their lock lines are not checked.
        partial=bool(not_run) or bool(collection.get("known_note")) or bool(incomplete),
        unfinished={i: incomplete["reason"] for i in incomplete.get("not_finished", ())},
        collection_errors=incomplete.get("collection_errors"),
        saved={s["id"]: s["shown"] for s in state.saved},
        optional={s["id"]: s["reason"] for s in skipped if s["runs_only_with"]},
        profile=current_profile(),
        where=where,
        command=update_command(state),
    )


def summary_lines(state: RunState, verbose: bool) -> list[tuple[str, str, bool]]:
    """What the run prints at its end, as (kind, text, red): kind "line", or "sep" for a
    separator line around `text`."""
    out: list[tuple[str, str, bool]] = []

    def write(text: str, red: bool = False) -> None:
        out.append(("line", text, red))

    s = state.summary
    write(
        f"attention-theorems: {s['claims']} claims: {s['holds']} held, "
        f"{s['refuted_as_expected']} refuted as expected, {s['unexpected']} unexpected, "
        f"{s['inconclusive']} inconclusive, {s['vacuous']} vacuous, {s['error']} error"
        f"{f', {len(state.skipped)} not run' if state.skipped else ''} — "
        f"{state.relative(state.report_path)}"
    )
    incomplete = state.incomplete or {}
    unfinished = incomplete.get("not_finished", [])
    for skip in state.skipped:
        if skip["id"] not in unfinished:  # those are named together below
            write(f"attention-theorems: {skip['id']} not run: {skip['reason']}")
    for claim_id, message in state.crash_lines:
        write(f"attention-theorems: claim {claim_id}: verdict error: {message}", red=True)
    if unfinished:
        shown = ", ".join(unfinished[:SHOWN_IDS])
        more = f" and {len(unfinished) - SHOWN_IDS} more" if len(unfinished) > SHOWN_IDS else ""
        write(
            f"attention-theorems: {incomplete['reason']}: "
            f"{'1 claim' if len(unfinished) == 1 else f'{len(unfinished)} claims'} did not "
            f"finish and {'has' if len(unfinished) == 1 else 'have'} no verdict: {shown}{more}",
            red=True,
        )
    for module, message in incomplete.get("collection_errors", {}).items():
        write(
            f"attention-theorems: could not collect {module} ({message}): any claims it "
            "defines have no verdict",
            red=True,
        )
    for saved in state.saved:
        if not saved["changed"]:
            continue
        write(f"attention-theorems: counterexample of {saved['id']} saved to {saved['shown']}")
        for line in saved["falsifying"]:
            write(f"    {line}")
        if saved["replayable"]:
            write("    replayed first on the next run; to keep it in the claim for good, paste:")
            helper = next((h for h in ("saved_arguments", "saved") if h in saved["example"]), None)
            write(f"        from theorems import example{', ' + helper if helper else ''}")
            write(f"        {saved['example']}")
        elif saved["note"]:
            write(f"    not replayed automatically: {saved['note']}")
    for claim_id, claim in state.replayed.items():
        if not verbose and claim["expected"] == "refuted":
            continue  # controls replay theirs every run: say so only when asked (-v)
        if claim["verdict"] == "refuted" and claim["_counterexample_replayed"]:
            outcome = "still refutes it"
        elif claim["verdict"] == "refuted":
            outcome = "passed, and the search found another counterexample"
        elif claim["verdict"] == "error":
            outcome = "could not be replayed (verdict error: see the claim's failure)"
        else:
            outcome = f"no longer refutes it (verdict {claim['verdict']})"
        shown = state.relative(replay.path_for(claim_id, state.store))
        write(f"attention-theorems: {claim_id}: the saved counterexample ({shown}) {outcome}")
    for line in state.gate_lines:
        write(f"attention-theorems: {line}")
    gate = state.gate
    if gate is None:
        return out
    where = state.relative(state.lock_path)
    if gate.ok:
        conj = f"; {gate.conjectures} conjectures not gated" if gate.conjectures else ""
        write(f"attention-theorems: verdict gate passed: {gate.checked} claims match {where}{conj}")
    else:
        out.append(("sep", f"verdict gate FAILED: {len(gate.problems)} problems ({where})", True))
        for problem in gate.problems:
            for line in problem.splitlines():
                write(line, red=line.startswith(RED))
        write(f"to accept these verdicts on purpose: {update_command(state)}, and commit {where}")
    for note in gate.notes:
        write(f"attention-theorems: note: {note}")
    return out
