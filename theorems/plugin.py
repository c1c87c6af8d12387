"""pytest plugin: turn each claim's outcome into a verdict, and write reports/claims.json.

Loaded by the root conftest (`pytest_plugins`), or with `-p theorems.plugin`.

Flow per claim item (in the process that runs it, an xdist worker or the only process):
`pytest_runtest_call` activates an `evidence.Collector`; `pytest_runtest_makereport` judges
the outcome (holds / refuted / inconclusive / error), sets the pytest outcome to "passed iff
the verdict is the expected one", and appends a record to this process's evidence file
`<report dir>/.evidence/<run id>/<worker>.json` (rewritten atomically after every claim, so a
crash keeps what was recorded). At session end the controller (or the only process) merges
every file of the run, one entry per claim id, and writes the report atomically.
"""

from __future__ import annotations

import builtins
import contextlib
import datetime as _dt
import json
import math
import os
import platform
import re
import shutil
import tempfile
import time
import traceback
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest
from _pytest._code.code import TerminalRepr
from hypothesis.errors import FailedHealthCheck, Flaky, Unsatisfiable

from theorems import evidence
from theorems.registry import (
    ClaimInfo,
    as_expected,
    claim_of,
    current_profile,
    load_profile,
    merge_verdicts,
    register_profiles,
)

# Registered at import, so that --hypothesis-profile can name them even without the root
# conftest (Hypothesis loads that profile in its own pytest_configure).
register_profiles()

REPORT_ENV = "ATTN_CLAIMS_REPORT"
DEFAULT_REPORT = Path("reports") / "claims.json"
TEXT_LIMIT = 4000  # characters kept of an error or a falsifying-example text

# BaseExceptionGroup is a builtin from Python 3.11; Hypothesis uses the backport before.
_GROUP = getattr(builtins, "BaseExceptionGroup", None)
if _GROUP is None:  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup as _GROUP

_UMASK = os.umask(0)
os.umask(_UMASK)
_COLLECTOR = pytest.StashKey[evidence.Collector]()
_AFTER_REPORT: list[Callable[[Path], Any]] = []


def after_report(callback: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """Register `callback(path_of_claims_json)`, called after the report is written (e.g.
    to render HTML/Markdown). Usable as a decorator; registering twice is a no-op."""
    if callback not in _AFTER_REPORT:
        _AFTER_REPORT.append(callback)
    return callback


# --------------------------------------------------------------------------- state


@dataclass
class _State:
    report_path: Path
    run_id: str
    run_dir: Path
    worker: str  # "main" without xdist, else the xdist worker id
    is_worker: bool
    records: dict[str, dict] = field(default_factory=dict)  # item nodeid -> record
    summary: dict | None = None

    def flush(self) -> None:
        if not self.records:
            return
        doc = {"run_id": self.run_id, "worker": self.worker, "records": list(self.records.values())}
        _write_json(self.run_dir / f"{self.worker}.json", doc)


_STATE = pytest.StashKey[_State]()


def _write_json(path: Path, doc: Any) -> None:
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


def _report_path(config: pytest.Config) -> Path:
    given = config.getoption("claims_report", default=None) or os.environ.get(REPORT_ENV)
    if given:
        path = Path(given).expanduser()
        return path if path.is_absolute() else Path(config.invocation_params.dir) / path
    return Path(config.rootpath) / DEFAULT_REPORT


# --------------------------------------------------------------------------- configuration


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attention-theorems")
    group.addoption(
        "--claims-report",
        dest="claims_report",
        metavar="PATH",
        default=None,
        help=f"where to write the claims report (env {REPORT_ENV}; "
        f"default {DEFAULT_REPORT} under the rootdir)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claim(id): a registered claim of one of the papers")
    # --hypothesis-profile (Hypothesis' own option) wins over ATTN_HYPOTHESIS_PROFILE.
    if not config.getoption("hypothesis_profile", default=None):
        try:
            load_profile()
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    workerinput = getattr(config, "workerinput", None)
    if workerinput is not None:
        run_id = workerinput.get("attn_run_id") or workerinput["testrunuid"]
        report_path = Path(workerinput.get("attn_report") or _report_path(config))
        worker, is_worker = workerinput["workerid"], True
    else:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        run_id = f"{stamp}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        report_path, worker, is_worker = _report_path(config), "main", False
    run_dir = report_path.parent / ".evidence" / run_id
    config.stash[_STATE] = _State(report_path, run_id, run_dir, worker, is_worker)
    if not is_worker:
        config.pluginmanager.register(_Terminal(config), "attention-theorems-terminal")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: hand the run id and report path to each worker."""
    state = node.config.stash[_STATE]
    node.workerinput["attn_run_id"] = state.run_id
    node.workerinput["attn_report"] = str(state.report_path)


# --------------------------------------------------------------------------- running a claim


def _claim(item: pytest.Item) -> ClaimInfo | None:
    return claim_of(getattr(item, "obj", None)) if isinstance(item, pytest.Function) else None


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    info = _claim(item)
    if info is None:
        return (yield)
    collector = item.stash[_COLLECTOR] = evidence.Collector()
    # A Hypothesis test counts its examples through the registry's inner_test wrapper; any
    # other claim is one example, bracketed here.
    is_hypothesis = getattr(item.obj, "is_hypothesis_test", False)
    start = time.perf_counter()
    try:
        with evidence.collecting(collector):
            if is_hypothesis:
                return (yield)
            with evidence.example():
                return (yield)
    finally:
        collector.seconds = time.perf_counter() - start


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, _GROUP):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def _trim(text: str, limit: int = TEXT_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 15] + "\n... [trimmed]"


def _describe(exc: BaseException) -> str:
    return _trim("".join(traceback.format_exception_only(type(exc), exc)))


_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")


def falsifying_text(exc: BaseException | None) -> str | None:
    """Hypothesis' "Falsifying example: ..." notes (and the @reproduce_failure hint)."""
    if exc is None:
        return None
    keep = ("Falsifying", "You can reproduce this example", "@reproduce_failure")
    parts = [
        str(note).strip()
        for leaf in _leaves(exc)
        for note in getattr(leaf, "__notes__", ())
        if str(note).lstrip().startswith(keep)
    ]
    # Object reprs of fixtures carry memory addresses, which differ between runs.
    return _trim(_ADDRESS.sub("", "\n".join(parts))) if parts else None


def judge(
    exc: BaseException | None, collector: evidence.Collector, info: ClaimInfo
) -> tuple[str, str | None, str]:
    """(verdict, error text or None, one-line reason) for one claim item."""
    snap = collector.snapshot()
    rejected, undecided = sum(snap["rejections"].values()), sum(snap["inconclusive"].values())
    if exc is None:
        seen = collector.examples + undecided
        if collector.examples == 0:
            return "inconclusive", None, f"no example completed ({undecided} inconclusive)"
        if undecided / seen > info.max_inconclusive:
            return (
                "inconclusive",
                None,
                f"{undecided} of {seen} examples inconclusive "
                f"(more than {info.max_inconclusive:.0%}): {snap['inconclusive']}",
            )
        return "holds", None, f"held on {collector.examples} examples"
    if isinstance(exc, Flaky):  # before the group test: FlakyFailure is an ExceptionGroup
        return "error", _describe(exc), "Hypothesis reports a flaky (non-deterministic) test"
    if all(isinstance(leaf, AssertionError) for leaf in _leaves(exc)):
        return "refuted", None, "a counterexample was found"
    if isinstance(exc, evidence.InconclusiveExample):
        return "inconclusive", None, f"the numerics could not decide: {exc.reason}"
    if isinstance(exc, evidence.RejectedExample):
        message = f"the instance does not meet the claim's assumptions: {exc.reason}"
        return "error", message, message
    too_many_rejections = isinstance(exc, Unsatisfiable) or (
        isinstance(exc, FailedHealthCheck) and "filter_too_much" in str(exc)
    )
    if too_many_rejections:
        if undecided and undecided >= rejected:
            return (
                "inconclusive",
                None,
                f"too many inconclusive examples: {snap['inconclusive']}",
            )
        message = (
            "the strategy does not meet the claim's assumptions (too many rejections: "
            f"{snap['rejections'] or 'in the strategy itself'})\n{_describe(exc)}"
        )
        return "error", _trim(message), message.splitlines()[0]
    return "error", _describe(exc), f"{type(exc).__name__} raised"


def _base_nodeid(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    suffix = f"[{callspec.id}]" if callspec is not None else ""
    nodeid = item.nodeid
    return nodeid[: -len(suffix)] if suffix and nodeid.endswith(suffix) else nodeid


def _record(item, info, collector, verdict, error, falsifying) -> dict:
    return {
        "id": info.id,
        "paper": info.paper,
        "kind": info.kind,
        "statement": info.statement,
        "provenance": info.provenance,
        "expected": info.expected,
        "verdict": verdict,
        "budget": info.budget,
        **collector.snapshot(),
        "falsifying_example": falsifying,
        "error": error,
        "figures": list(info.figures),
        "note": info.note,
        "nodeid": _base_nodeid(item),
        "item": item.nodeid,
        "module": info.module,
        "line": info.line,
    }


class _ClaimRepr(TerminalRepr):
    """The original failure, under a one-line header naming the claim and its verdict."""

    def __init__(self, header: str, inner: Any):
        self.header, self.inner = header, inner
        if hasattr(inner, "reprcrash"):
            self.reprcrash = inner.reprcrash  # keeps the short test summary informative

    def toterminal(self, tw) -> None:
        tw.line(self.header, red=True, bold=True)
        if hasattr(self.inner, "toterminal"):
            self.inner.toterminal(tw)
        elif self.inner is not None:
            tw.line(str(self.inner))


def _judge_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    info = _claim(item)
    if info is None or report.skipped:
        return
    if report.when == "setup" and report.failed:
        collector, verdict, reason = evidence.Collector(), "error", "setup failed"
        error, falsifying = _trim(f"setup failed: {report.longrepr}"), None
    elif report.when == "call":
        collector = item.stash.get(_COLLECTOR, None) or evidence.Collector()
        exc = call.excinfo.value if call.excinfo is not None else None
        verdict, error, reason = judge(exc, collector, info)
        falsifying = falsifying_text(exc)
    else:
        return
    state = item.config.stash[_STATE]
    if error:  # paths relative to the rootdir: the report reads the same on any checkout
        error = error.replace(f"{item.config.rootpath}{os.sep}", "")
    state.records[item.nodeid] = _record(item, info, collector, verdict, error, falsifying)
    state.flush()

    ok = as_expected(verdict, info.expected)
    # On the item, so that later reports (teardown, which junitxml reads) carry them too.
    props = [
        ("claim", info.id),
        ("verdict", verdict),
        ("expected", info.expected),
        ("as_expected", ok),
    ]
    item.user_properties.extend(props)
    if report.user_properties is not item.user_properties:
        report.user_properties = [*report.user_properties, *props]
    if report.when != "call":
        return
    if ok and report.failed:
        # A control refuted as expected: the run passes, the evidence keeps the example.
        report.outcome = "passed"
        report.longrepr = None
        if falsifying:
            report.sections.append((f"claim {info.id}: refuted as expected", falsifying))
    elif not ok:
        header = f"claim {info.id}: verdict {verdict}, expected {info.expected} ({reason})"
        report.outcome = "failed"
        report.longrepr = _ClaimRepr(header, report.longrepr)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    try:
        _judge_report(item, call, report)
    except Exception as exc:  # never let the bookkeeping of one claim lose the others
        warnings.warn(f"attention-theorems: could not record {item.nodeid}: {exc!r}", stacklevel=1)
    return report


class _Terminal:
    """A line per claim as it finishes (verbose mode); registered on the controller only,
    because pytest_runtest_logreport receives the report but not the config."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(trylast=True)  # after pytest's own PASSED/FAILED word
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if "claim" not in props or report.when not in ("setup", "call"):
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or self.config.getoption("verbose") <= 0:
            return
        mark = "as expected" if props["as_expected"] else "UNEXPECTED"
        reporter.write_line(
            f"    claim {props['claim']}: {props['verdict']} (expected {props['expected']}, {mark})"
        )


# --------------------------------------------------------------------------- merging, report


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


def merge_records(records: Iterable[dict]) -> list[dict]:
    """One report entry per claim id from per-item records (any order, any worker)."""
    groups: dict[str, list[dict]] = {}
    for record in sorted(records, key=lambda r: r["item"]):
        groups.setdefault(record["id"], []).append(record)
    claims = []
    for claim_id, group in groups.items():
        first = group[0]
        verdict = merge_verdicts(r["verdict"] for r in group)
        rejections, undecided = Counter(), Counter()
        worst, metrics = {}, {}
        for r in group:
            rejections.update(r["rejections"])
            undecided.update(r["inconclusive"])
            for name, entry in r["worst_slack"].items():
                _merge_slack(worst, name, entry)
            for name, entry in r["metrics"].items():
                _merge_metric(metrics, name, entry)
        # The counterexample of the merged verdict: from the first item that has it.
        witness = next((r for r in group if r["verdict"] == verdict), first)
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
                "as_expected": as_expected(verdict, first["expected"]),
                "examples": sum(r["examples"] for r in group),
                "budget": sum(r["budget"] for r in group),
                "rejections": dict(sorted(rejections.items())),
                "inconclusive": dict(sorted(undecided.items())),
                "worst_slack": dict(sorted(worst.items())),
                "metrics": dict(sorted(metrics.items())),
                "seconds": round(sum(r["seconds"] for r in group), 6),
                "counterexample": witness["counterexample"],
                "falsifying_example": witness["falsifying_example"],
                "error": "\n".join(errors) or None,
                "figures": first["figures"],
                "note": first["note"],
                "nodeid": first["nodeid"],
                "_order": (first["paper"], first["module"], first["line"], claim_id),
            }
        )
    claims.sort(key=lambda c: c.pop("_order"))
    return claims


def _versions() -> dict[str, str | None]:
    found: dict[str, str | None] = {"python": platform.python_version()}
    for name in ("torch", "numpy", "cvxpy", "hypothesis"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = None
    return found


def build_report(claims: list[dict], profile: str) -> dict:
    verdicts = Counter(c["verdict"] for c in claims)
    expected_ok = sum(c["as_expected"] for c in claims)
    return {
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "profile": profile,
        "versions": _versions(),
        "summary": {
            "claims": len(claims),
            **{v: verdicts[v] for v in ("holds", "refuted", "inconclusive", "error")},
            "as_expected": expected_ok,
            "unexpected": len(claims) - expected_ok,
        },
        "claims": claims,
    }


def _read_run(run_dir: Path) -> list[dict]:
    records: dict[str, dict] = {}
    for path in sorted(run_dir.glob("*.json")):
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            warnings.warn(f"attention-theorems: unreadable evidence {path}: {exc}", stacklevel=1)
            continue
        for record in doc.get("records", []):
            records[record["item"]] = record
    return list(records.values())


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    state.flush()
    if state.is_worker:
        return
    records = _read_run(state.run_dir)
    if not records:
        return
    report = build_report(merge_records(records), current_profile())
    _write_json(state.report_path, report)
    state.summary = dict(
        report["summary"],
        refuted_as_expected=sum(
            c["verdict"] == "refuted" and c["as_expected"] for c in report["claims"]
        ),
    )
    shutil.rmtree(state.run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        state.run_dir.parent.rmdir()  # only if no other run left evidence there
    for callback in list(_AFTER_REPORT):
        try:
            callback(state.report_path)
        except Exception as exc:
            warnings.warn(f"attention-theorems: after_report {callback!r}: {exc!r}", stacklevel=1)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    state = config.stash.get(_STATE, None)
    if state is None or state.summary is None:
        return
    s = state.summary
    try:
        shown = state.report_path.relative_to(config.invocation_params.dir)
    except ValueError:
        shown = state.report_path
    terminalreporter.write_line(
        f"attention-theorems: {s['claims']} claims: {s['holds']} held, "
        f"{s['refuted_as_expected']} refuted as expected, {s['unexpected']} unexpected, "
        f"{s['inconclusive']} inconclusive, {s['error']} error — {shown}"
    )
