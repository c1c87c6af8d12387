"""The report document: what one claim item records, how the records of a run (any order,
any xdist worker, written to per-process evidence files) merge into one entry per claim, and
the claims.json document built from them.

Imports `evidence` (the collector's snapshot) and `verdicts` (merging, ordering) only.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import math
import os
import platform
import sys
import tempfile
import warnings
from collections import Counter
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from theorems.framework import REPO_ROOT, evidence, rows
from theorems.framework.verdicts import (
    VERDICTS,
    as_expected,
    assertion_text,
    merge_verdicts,
    order_key,
)

if TYPE_CHECKING:
    import pytest

    from theorems.framework.registry import ClaimInfo

_UMASK = os.umask(0)
os.umask(_UMASK)


def write_json(path: Path, doc: Any) -> None:
    """Write strict JSON atomically: a temporary file in the same folder, then os.replace."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(evidence.to_jsonable(doc), indent=2, allow_nan=False) + "\n"
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.chmod(tmp, 0o666 & ~_UMASK)  # mkstemp creates 0600; make it like any other file
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def empty_collection() -> dict:
    return {"collected": [], "deselected": [], "known": None, "known_note": None}


def identity(item: pytest.Item, info: ClaimInfo) -> dict:
    """What every per-item entry (a record or a skip) says of its claim and item."""
    return {
        "id": info.id,
        "paper": info.paper,
        "kind": info.kind,
        "statement": info.statement,
        "provenance": info.provenance,
        "expected": info.expected,
        "nodeid": _base_nodeid(item),
        "item": item.nodeid,
        "module": info.module,
        "line": info.line,
    }


def findings_link(info: ClaimInfo) -> str | None:
    """Where the claim's findings are: its paper's findings.md and the section's anchor,
    relative to the checkout where it lies inside it (else as registered), or None."""
    return rows.relative_anchor(info.findings, REPO_ROOT) if info.findings else None


def claim_fields(info: ClaimInfo) -> dict:
    return {
        "budget": info.budget,
        "figures": list(info.figures),
        "note": info.note,
        "findings": findings_link(info),
        "tests": info.tests,
        "runs_only_with": info.runs_only_with,
        "variants": list(info.variants),
    }


def item_record(item, info, collector, verdict, error, falsifying, reason="") -> dict:
    fields = claim_fields(info)
    return {
        **identity(item, info),
        "verdict": verdict,
        "reason": reason,
        "budget": fields["budget"],
        **collector.snapshot(),
        "falsifying_example": falsifying,
        # what the failing assertion said, for a refutation (fragile ones too)
        "assertion": assertion_text(collector.last_body_exception) if falsifying else None,
        "error": error,
        "figures": fields["figures"],
        "note": fields["note"],
        "findings": fields["findings"],
        "tests": fields["tests"],
        "variants": fields["variants"],
        "replayed": getattr(getattr(item, "obj", None), "__attn_replay__", None) is not None,
        "counterexample_replayed": collector.counterexample_is_replay and verdict == "refuted",
    }


CRASHED = (
    "the process running it died before it reported (killed by a signal, out of memory, or "
    "a crash in native code)"
)


def crash_record(entry: dict, message: str) -> dict:
    """The record of a claim item whose xdist worker died while running it: verdict error,
    so that the report and the gate say so (never a claim silently missing)."""
    return {
        **{k: entry[k] for k in ("id", "paper", "kind", "statement", "provenance")},
        **{k: entry[k] for k in ("expected", "nodeid", "item", "module", "line")},
        "verdict": "error",
        "reason": CRASHED,
        "budget": entry["budget"],
        **evidence.Collector().snapshot(),
        "falsifying_example": None,
        "error": message,
        "figures": entry["figures"],
        "note": entry["note"],
        "findings": entry.get("findings"),
        "tests": entry.get("tests", "paper"),
        "variants": entry.get("variants", []),
        "replayed": False,
        "counterexample_replayed": False,
    }


def _merge_slack(into: dict, name: str, entry: dict) -> None:
    old = into.get(name)
    ratio = entry["ratio"]
    ratio = float(ratio) if isinstance(ratio, str) else ratio  # "inf"/"nan" from JSON
    if old is None or evidence._worse(ratio, float(old["ratio"])):
        into[name] = dict(entry)


def _merge_metric(into: dict, name: str, entry: dict) -> None:
    old = into.get(name)
    if old is None:
        into[name] = dict(entry)
        return
    lo, hi = float(entry["min"]), float(entry["max"])
    old["min"] = lo if math.isnan(float(old["min"])) else min(float(old["min"]), lo)
    old["max"] = hi if math.isnan(float(old["max"])) else max(float(old["max"]), hi)
    old["count"] += entry["count"]


def merge_records(records: Iterable[dict], *, keep_replay: bool = False) -> list[dict]:
    """One report entry per claim id from per-item records (any order, any worker);
    `keep_replay` keeps the counterexample's arguments under "_replay" (not reported)."""
    groups: dict[str, list[dict]] = {}
    for record in sorted(records, key=lambda r: r["item"]):
        groups.setdefault(record["id"], []).append(record)
    claims = []
    for claim_id, group in groups.items():
        first = group[0]
        verdict = merge_verdicts(r["verdict"] for r in group)
        worst, metrics = {}, {}
        for r in group:
            for name, entry in r["worst_slack"].items():
                _merge_slack(worst, name, entry)
            for name, entry in r["metrics"].items():
                _merge_metric(metrics, name, entry)
        # The counterexample of the merged verdict: from the first item that has it.
        witness = next((r for r in group if r["verdict"] == verdict), first)
        reason = witness.get("reason", "")
        if len(group) > 1 and verdict == "holds":
            reason = f"held on {sum(r['examples'] for r in group)} examples ({len(group)} items)"
        errors = [r["error"] for r in group if r["error"]]
        if len(group) > 1:
            errors = [f"{r['item']}: {r['error']}" for r in group if r["error"]]
        claims.append(
            {
                "id": claim_id,
                "paper": first["paper"],
                "kind": first["kind"],
                "statement": first["statement"],
                "provenance": first["provenance"],
                "expected": first["expected"],
                "verdict": verdict,
                "reason": reason,
                "as_expected": as_expected(verdict, first["expected"]),
                "examples": sum(r["examples"] for r in group),
                "budget": sum(r["budget"] for r in group),
                "rejections": _sum_counts(r["rejections"] for r in group),
                "inconclusive": _sum_counts(r["inconclusive"] for r in group),
                "failures": _sum_counts(r.get("failures", {}) for r in group),
                "tolerated_failures": _sum_counts(r.get("tolerated_failures", {}) for r in group),
                "premise": _sum_premise(r.get("premise") for r in group),
                "worst_slack": dict(sorted(worst.items())),
                "metrics": dict(sorted(metrics.items())),
                "seconds": round(sum(r["seconds"] for r in group), 6),
                "counterexample": witness["counterexample"],
                "falsifying_example": witness["falsifying_example"],
                "robustness": witness.get("robustness"),
                "reduced": witness.get("reduced"),
                "assertion": witness.get("assertion"),
                "error": "\n".join(errors) or None,
                "figures": first["figures"],
                "note": first["note"],
                "findings": first.get("findings"),
                "tests": first.get("tests", "paper"),
                "variants": first.get("variants", []),
                "nodeid": first["nodeid"],
                "_replay": witness.get("replay") or {},
                "_replayed": any(r.get("replayed") for r in group),
                "_counterexample_replayed": bool(witness.get("counterexample_replayed")),
                "_order": order_key(
                    first["paper"], first["kind"], first["module"], first["line"], claim_id
                ),
            }
        )
    for claim, group in zip(claims, groups.values(), strict=True):
        twins = [r["twins"] for r in group if r.get("twins", {}).get("examples")]
        if twins:  # theorems.framework.twins ran (ATTN_TWINS): what, and what disagreed
            claim["twins"] = {
                "examples": sum(t["examples"] for t in twins),
                "runs": _sum_counts(t["runs"] for t in twins),
                "disagreements": [d for t in twins for d in t["disagreements"]],
            }
    claims.sort(key=lambda c: c.pop("_order"))
    for claim in claims if not keep_replay else ():
        claim.pop("_replay")
        claim.pop("_replayed")
        claim.pop("_counterexample_replayed")
    return claims


def _sum_counts(parts: Iterable[dict]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for part in parts:
        total.update(part)
    return dict(sorted(total.items()))


def _sum_premise(parts: Iterable[dict | None]) -> dict:
    parts = [p for p in parts if p]
    return {
        "met": sum(p["met"] for p in parts),
        "of": sum(p["of"] for p in parts),
        "declared": any(p["declared"] for p in parts),
    }


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "numpy", "cvxpy", "hypothesis"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def _describe_device() -> str:
    # A run that never imported torch (claims over plain values) did no torch work, and the
    # default device is CPU: importing torch (~1.5 s) only to say so is spared. (The name is
    # models.numerics.device.DEVICE_ENV, which cannot be imported without torch.)
    asked = os.environ.get("ATTN_DEVICE", "").strip().lower()
    if "torch" not in sys.modules and asked in ("", "cpu"):
        return "cpu"
    from models.numerics.device import describe  # imports torch: only where a report is written

    return describe()


def build_report(
    claims: list[dict], profile: str, skipped: list[dict] = (), incomplete: dict | None = None
) -> dict:
    """The claims.json document. ``skipped``: claims that ran no example (``skipped_claims``);
    they have no verdict and are not counted among the claims. ``incomplete`` (only when the
    run did not finish: {"reason", "not_finished": claim ids, "collection_errors": {module:
    message}}) is kept under that key, so nothing reads a partial report as a full one."""
    extra = {"incomplete": incomplete} if incomplete else {}
    return {
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "profile": profile,
        "versions": _versions(),
        "device": _describe_device(),
        "summary": summary(claims, skipped),
        "claims": claims,
        "skipped": list(skipped),
        **extra,
    }


def summary(claims: list[dict], skipped: list[dict] = ()) -> dict[str, int]:
    """The report's counts: claims, each verdict, as expected or not, skipped."""
    verdicts = Counter(c["verdict"] for c in claims)
    expected_ok = sum(c["as_expected"] for c in claims)
    return {
        "claims": len(claims),
        **{v: verdicts[v] for v in VERDICTS},
        "as_expected": expected_ok,
        "unexpected": len(claims) - expected_ok,
        "skipped": len(skipped),
    }


def carry_over(report: dict, previous: dict | None, known: dict[str, str] | None) -> dict:
    """``report`` with the claims of ``previous`` (the report this run replaces) that this run
    did not judge, so that runs of a few claims add up instead of erasing each other.

    Every claim says which run judged it (``run``: that report's ``generated`` time) and the
    report lists its runs (``runs``: time -> profile and claim count). Carried over: the
    claims of a previous report of the same profile (a dev run never mixes with the ci
    verdicts the lock is made from) that still exist (``known``: the suite's claims; None
    when unknown, e.g. a run outside the repository: every previous claim is kept), and
    that this run neither judged nor skipped. The summary counts the merged claims."""
    stamp = report["generated"]
    for claim in report["claims"]:
        claim["run"] = stamp
    runs = {stamp: {"profile": report["profile"], "claims": len(report["claims"])}}
    usable = (
        isinstance(previous, dict)
        and previous.get("profile") == report["profile"]
        and isinstance(previous.get("claims"), list)
    )
    if usable:
        here = {c["id"] for c in report["claims"]} | {s["id"] for s in report["skipped"]}
        kept = [
            {**c, "run": c.get("run") or previous.get("generated")}
            for c in previous["claims"]
            if c.get("id") not in here and (known is None or c.get("id") in known)
        ]
        for claim in kept:
            old = runs.setdefault(claim["run"], {"profile": report["profile"], "claims": 0})
            old["claims"] += 1
        if kept:
            claims = sorted(
                [*report["claims"], *kept],
                # reading order (records keep no line: the test's node id stands in)
                key=lambda c: order_key(c["paper"], c["kind"], c["nodeid"], 0, c["id"]),
            )
            report = {**report, "summary": summary(claims, report["skipped"]), "claims": claims}
    return {**report, "runs": dict(sorted(runs.items()))}


def read_previous(path: Path) -> dict | None:
    """The report at ``path`` before this run replaces it; None if there is none or it
    cannot be read (a report this run cannot read is replaced, not merged)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def skipped_claims(skips: Iterable[dict], claims: Iterable[dict]) -> list[dict]:
    """One entry per claim that was skipped and gave no verdict (in reading order); a claim
    with a verdict from some of its items is reported by that verdict alone."""
    judged = {c["id"] for c in claims}
    out: dict[str, dict] = {}
    for skip in sorted(skips, key=lambda s: s["item"]):
        if skip["id"] not in judged and skip["id"] not in out:
            out[skip["id"]] = skip
    fields = (
        "id", "paper", "kind", "statement", "provenance", "expected", "reason",
        "runs_only_with", "nodeid",
    )  # fmt: skip
    ordered = sorted(
        out.values(),
        key=lambda s: order_key(s["paper"], s["kind"], s["module"], s["line"], s["id"]),
    )
    return [{k: s[k] for k in fields} for s in ordered]


def read_run(run_dir: Path) -> tuple[list[dict], list[dict], dict | None, dict[str, dict]]:
    """Every record and skipped item of the run, what the processes collected (merged), and
    every collected claim item (nodeid -> what it is)."""
    records: dict[str, dict] = {}
    skips: dict[str, dict] = {}
    collection: dict | None = None
    items: dict[str, dict] = {}
    for path in sorted(run_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            warnings.warn(f"attention-theorems: unreadable evidence {path}: {exc}", stacklevel=1)
            continue
        for record in doc.get("records", []):
            records[record["item"]] = record
        for skip in doc.get("skips", []):
            skips[skip["item"]] = skip
        items.update(doc.get("items") or {})
        part = doc.get("collection")
        if part:
            if collection is None:
                collection = {**empty_collection(), "known": part.get("known")}
            collection["collected"] = sorted({*collection["collected"], *part["collected"]})
            collection["deselected"] = sorted({*collection["deselected"], *part["deselected"]})
            collection["known_note"] = collection["known_note"] or part.get("known_note")
            if part.get("known") is None:
                collection["known"] = None
    return list(records.values()), list(skips.values()), collection, items


def _base_nodeid(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    suffix = f"[{callspec.id}]" if callspec is not None else ""
    nodeid = item.nodeid
    return nodeid[: -len(suffix)] if suffix and nodeid.endswith(suffix) else nodeid
