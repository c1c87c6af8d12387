"""pytest plugin: turn each claim's outcome into a verdict, and write reports/claims.json.

Loaded by the root conftest (`pytest_plugins`), or with `-p theorems.plugin`.

Flow per claim item (in the process that runs it, an xdist worker or the only process):
`pytest_runtest_call` activates an `evidence.Collector`; `pytest_runtest_makereport` judges
the outcome (holds / refuted / inconclusive / error), sets the pytest outcome to "passed iff
the verdict is the expected one", and appends a record to this process's evidence file
`<report dir>/.evidence/<run id>/<worker>.json` (rewritten atomically after every claim, so a
crash keeps what was recorded). At session end the controller (or the only process) merges
every file of the run, one entry per claim id, and writes the report atomically.

Then, on the merged report (never losing it): each refuted claim's minimal counterexample is
saved to `theorems/counterexamples/<ID>.json` (theorems.replay; replayed first next run),
and the verdict gate (theorems.lock) compares every claim's verdict with
`theorems/verdicts.lock`; a difference, a claim missing from the lock, a lock line naming no
claim or a malformed lock makes the run fail (exit status 1) with a diff naming the claim,
both verdicts and the counterexample. `--no-gate` (or ATTN_NO_GATE=1, ignored under CI)
turns the gate off for local exploration.

Infrastructure faults never lose a claim: each process lists the claim items it collected
(`<worker>.items.json`), and the controller accounts for every one. An item whose xdist worker
died under it gets verdict error (the process died before it reported); items that never
reported (Ctrl-C, `-x`, pytest stopping at a collection error) are "not run" with the reason,
and the report gets an "incomplete" key ({reason, not_finished, collection_errors}); a run
that did not finish, or a module that failed to collect, fails the run and the gate.
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
from hypothesis.errors import FailedHealthCheck, Flaky, HypothesisException, Unsatisfiable

from theorems import evidence, replay
from theorems import lock as locks
from theorems.registry import (
    REGISTRY,
    VERDICTS,
    ClaimInfo,
    as_expected,
    claim_of,
    current_profile,
    load_profile,
    merge_verdicts,
    note_profile,
    order_key,
    register_profiles,
)

# Registered at import, so that --hypothesis-profile can name them even without the root
# conftest (Hypothesis loads that profile in its own pytest_configure).
register_profiles()

REPORT_ENV = "ATTN_CLAIMS_REPORT"
DEFAULT_REPORT = Path("reports") / "claims.json"
LOCK_ENV = "ATTN_VERDICT_LOCK"
NO_GATE_ENV = "ATTN_NO_GATE"
TEXT_LIMIT = 4000  # characters kept of an error or a falsifying-example text
SHOWN_LINES = 30  # lines of a falsifying example printed with a saved counterexample
# Gate problems shown in red: their first words.
_RED = ("claim ", "lock ", "malformed", "unreadable", "no verdict", "run did not", "module not")
SHOWN_IDS = 20  # claim ids named in the line on the claims a run did not finish

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
        _write_json(self.run_dir / f"{self.worker}.json", doc)

    def target(self, info: ClaimInfo) -> str:
        """The verdict a claim item must reach to pass: its lock line when the gate is on
        and the lock pins it (conjectures never), else the claim's `expected`."""
        if not self.gate_on or self.lock is None or info.expected == "unknown":
            return info.expected
        return self.lock.verdict(info.id) or info.expected


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


def _option_path(config: pytest.Config, option: str, env: str, default: Path) -> Path:
    given = config.getoption(option, default=None) or os.environ.get(env)
    if given:
        path = Path(given).expanduser()
        return path if path.is_absolute() else Path(config.invocation_params.dir) / path
    return Path(config.rootpath) / default


def _report_path(config: pytest.Config) -> Path:
    return _option_path(config, "claims_report", REPORT_ENV, DEFAULT_REPORT)


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() not in ("", "0", "false", "no", "off")


def _under_ci() -> bool:
    return _truthy(os.environ.get("CI"))


def _gate_switch(config: pytest.Config) -> tuple[bool, str]:
    """(gate on, why it is off). --no-gate always wins; ATTN_NO_GATE only outside CI."""
    if config.getoption("no_gate", default=False):
        return False, "--no-gate"
    if _truthy(os.environ.get(NO_GATE_ENV)):
        if _under_ci():
            return True, f"{NO_GATE_ENV} is ignored under CI"
        return False, f"{NO_GATE_ENV}={os.environ[NO_GATE_ENV]}"
    return True, ""


def _load_lock(state: _State) -> None:
    try:
        state.lock = locks.read(state.lock_path)
    except locks.LockError as exc:
        state.lock, state.lock_error = None, str(exc)


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
    group.addoption(
        "--verdict-lock",
        dest="verdict_lock",
        metavar="PATH",
        default=None,
        help=f"the verdict lock the gate checks (env {LOCK_ENV}; "
        f"default {locks.DEFAULT_LOCK} under the rootdir)",
    )
    group.addoption(
        "--no-gate",
        dest="no_gate",
        action="store_true",
        default=False,
        help=f"do not fail the run on verdicts that differ from the lock (env {NO_GATE_ENV}=1, "
        "which CI ignores); for local exploration",
    )
    group.addoption(
        "--counterexamples",
        dest="counterexamples",
        metavar="DIR",
        default=None,
        help=f"where refuted claims' counterexamples are saved and replayed from "
        f"(env {replay.STORE_ENV}; default {replay.DEFAULT_STORE} under the rootdir)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "claim(id): a registered claim of one of the papers")
    # --hypothesis-profile (Hypothesis' own option) wins over ATTN_HYPOTHESIS_PROFILE.
    given_profile = config.getoption("hypothesis_profile", default=None)
    if given_profile:
        note_profile(given_profile)  # Hypothesis' own plugin loads it
    else:
        try:
            load_profile()
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
    workerinput = getattr(config, "workerinput", None)
    gate_on, gate_off = _gate_switch(config)
    lock_path = _option_path(config, "verdict_lock", LOCK_ENV, locks.DEFAULT_LOCK)
    store = _option_path(config, "counterexamples", replay.STORE_ENV, replay.DEFAULT_STORE)
    if workerinput is not None:
        run_id = workerinput.get("attn_run_id") or workerinput["testrunuid"]
        report_path = Path(workerinput.get("attn_report") or _report_path(config))
        worker, is_worker = workerinput["workerid"], True
        gate_on = workerinput.get("attn_gate_on", gate_on)
        lock_path = Path(workerinput.get("attn_lock") or lock_path)
        store = Path(workerinput.get("attn_store") or store)
    else:
        stamp = time.strftime("%Y%m%dT%H%M%S")
        run_id = f"{stamp}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        report_path, worker, is_worker = _report_path(config), "main", False
    run_dir = report_path.parent / ".evidence" / run_id
    state = _State(report_path, run_id, run_dir, worker, is_worker)
    state.gate_on, state.gate_off = gate_on, gate_off
    state.lock_path, state.store = lock_path, store
    _load_lock(state)
    replay.set_store(store)  # before collection: @claim looks up saved counterexamples there
    config.stash[_STATE] = state
    if not is_worker:
        config.pluginmanager.register(_Terminal(config), "attention-theorems-terminal")
        config.pluginmanager.register(_Faults(state), "attention-theorems-faults")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """xdist controller: hand the run id, report path, lock and store to each worker."""
    state = node.config.stash[_STATE]
    node.workerinput["attn_run_id"] = state.run_id
    node.workerinput["attn_report"] = str(state.report_path)
    node.workerinput["attn_gate_on"] = state.gate_on
    node.workerinput["attn_lock"] = str(state.lock_path)
    node.workerinput["attn_store"] = str(state.store)


# --------------------------------------------------------------------------- collection


def pytest_itemcollected(item: pytest.Item) -> None:
    """`-k CLAIM-ID` selects a claim by its id (keywords match substrings)."""
    info = _claim(item)
    if info is not None:
        item.extra_keyword_matches.add(info.id)


def pytest_deselected(items) -> None:
    for item in items:
        info = _claim(item)
        if info is None:
            continue
        state = item.config.stash.get(_STATE, None)
        if state is not None:
            state.collection = state.collection or _empty_collection()
            state.collection["deselected"] = sorted({*state.collection["deselected"], info.id})


def _empty_collection() -> dict:
    return {"collected": [], "deselected": [], "known": None, "known_note": None}


def known_claims(root: Path) -> tuple[dict[str, str] | None, str | None]:
    """Every claim defined under <root>/theorems (id -> expected), importing the claim
    modules that this run did not; (None, why) when that cannot be known."""
    import theorems

    folder = (root / "theorems").resolve()
    if not folder.is_dir() or Path(theorems.__file__).resolve().parent != folder:
        return None, None
    from theorems.cli import import_claim_modules
    from theorems.registry import ClaimRegistrationError

    try:
        failed = import_claim_modules(root)
    except ClaimRegistrationError as exc:
        return None, f"cannot list every claim: {exc}"
    if failed:
        names = ", ".join(f"{name} ({why})" for name, why in failed)
        return None, f"cannot list every claim: could not import {names}"
    known = {}
    for info in REGISTRY.values():
        with contextlib.suppress(ValueError, OSError):
            Path(info.file).resolve().relative_to(folder)
            known[info.id] = info.expected
    return known, None


def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    collected = sorted({info.id for item in session.items if (info := _claim(item))})
    if not collected:
        return
    collection = state.collection or _empty_collection()
    collection["collected"] = collected
    collection["known"], collection["known_note"] = known_claims(Path(session.config.rootpath))
    state.collection = collection
    state.flush()
    # What each collected claim item is, once: the controller names from it the items that
    # never reported (a worker that died, an interrupted run).
    items = {
        item.nodeid: {**_identity(item, info), **_claim_fields(info)}
        for item in session.items
        if (info := _claim(item))
    }
    _write_json(state.run_dir / f"{state.worker}.items.json", {"items": items})


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
    collector.is_hypothesis = bool(is_hypothesis)
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


def falsifying_text(info: ClaimInfo, collector: evidence.Collector) -> str | None:
    """The minimal counterexample as a call of the claim's test, built from the arguments
    the framework recorded for the last failing example (Hypothesis replays the shrunk one
    last); None when no example of a Hypothesis claim failed."""
    arguments = collector.counterexample_arguments
    if not collector.is_hypothesis or arguments is None:
        return None
    name = info.qualname.rsplit(".", 1)[-1]
    lines = [f"    {key}={_repr(value)}," for key, value in arguments.items()]
    where = " (the saved counterexample, replayed)" if collector.counterexample_is_replay else ""
    # Object reprs carry memory addresses, which differ between runs.
    text = "\n".join([f"Falsifying example{where}: {name}(", *lines, ")"])
    return _trim(_ADDRESS.sub("", text))


def _repr(value: Any) -> str:
    try:
        text = repr(value)
    except Exception as exc:  # a broken __repr__ must not lose the verdict
        text = f"<{type(value).__name__}: repr failed: {exc!r}>"
    return text.replace("\n", "\n    ")


def _from_the_body(exc: BaseException, collector: evidence.Collector) -> bool:
    """Whether `exc` (or a leaf of it) was raised inside the example body; an exception
    raised while Hypothesis drew the arguments never passed through it."""
    return any(leaf is collector.last_body_exception for leaf in _leaves(exc))


def judge(
    exc: BaseException | None, collector: evidence.Collector, info: ClaimInfo
) -> tuple[str, str | None, str]:
    """(verdict, error text or None, one-line reason) for one claim item.

    A machinery failure never reaches here as a counterexample: evidence.example turned any
    example it touched into an inconclusive one. What is left to decide: a counterexample
    (refuted), too few examples meeting the premise (vacuous), too many undecided ones
    (inconclusive), a broken claim or strategy (error), or support (holds)."""
    snap = collector.snapshot()
    rejected, undecided = sum(snap["rejections"].values()), sum(snap["inconclusive"].values())
    premise = snap["premise"]
    if exc is None:
        seen = collector.examples + undecided
        if collector.examples == 0 and undecided:
            return "inconclusive", None, f"no example completed ({snap['inconclusive']})"
        if premise["met"] < info.min_premise or collector.examples == 0:
            return "vacuous", None, _vacuous_reason(info, premise, snap)
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
        return "vacuous", None, f"the instance does not meet the claim's assumptions: {exc.reason}"
    # Hypothesis gave up on drawing examples that pass the assumptions: by our own counts,
    # not by its message (Unsatisfiable, or the filter_too_much health check).
    gave_up = isinstance(exc, Unsatisfiable) or (
        isinstance(exc, FailedHealthCheck) and (rejected or undecided)
    )
    if gave_up:
        if undecided and (undecided >= rejected or premise["met"] >= info.min_premise):
            return (
                "inconclusive",
                None,
                f"too many inconclusive examples: {snap['inconclusive']}",
            )
        if rejected:
            return "vacuous", None, _vacuous_reason(info, premise, snap)
        message = f"the strategy draws no valid instance\n{_describe(exc)}"
        return "error", _trim(message), message.splitlines()[0]
    drawn = collector.is_hypothesis and not isinstance(exc, HypothesisException)
    if drawn and not _from_the_body(exc, collector):
        text = _describe(exc)
        message = f"the strategy failed to build an instance: {text.splitlines()[0]}"
        return "error", _trim(f"{message}\n{text}"), message
    return "error", _describe(exc), f"{type(exc).__name__} raised"


def _vacuous_reason(info: ClaimInfo, premise: dict, snap: dict) -> str:
    what = "its premise" if premise["declared"] else "its assumptions"
    rejections = f"; rejected: {snap['rejections']}" if snap["rejections"] else ""
    return (
        f"{what} held in {premise['met']} of {premise['of']} examples "
        f"(at least {info.min_premise} needed){rejections}: no evidence either way"
    )


def _base_nodeid(item: pytest.Item) -> str:
    callspec = getattr(item, "callspec", None)
    suffix = f"[{callspec.id}]" if callspec is not None else ""
    nodeid = item.nodeid
    return nodeid[: -len(suffix)] if suffix and nodeid.endswith(suffix) else nodeid


def _identity(item: pytest.Item, info: ClaimInfo) -> dict:
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


def _claim_fields(info: ClaimInfo) -> dict:
    return {
        "budget": info.budget,
        "figures": list(info.figures),
        "note": info.note,
        "runs_only_with": info.runs_only_with,
    }


def _record(item, info, collector, verdict, error, falsifying, reason="") -> dict:
    fields = _claim_fields(info)
    return {
        **_identity(item, info),
        "verdict": verdict,
        "reason": reason,
        "budget": fields["budget"],
        **collector.snapshot(),
        "falsifying_example": falsifying,
        "error": error,
        "figures": fields["figures"],
        "note": fields["note"],
        "replayed": getattr(getattr(item, "obj", None), "__attn_replay__", None) is not None,
        "counterexample_replayed": collector.counterexample_is_replay and verdict == "refuted",
    }


CRASHED = (
    "the process running it died before it reported (killed by a signal, out of memory, or "
    "a crash in native code)"
)


def _crash_record(entry: dict, message: str) -> dict:
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
        "replayed": False,
        "counterexample_replayed": False,
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


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ").strip()


def _record_skip(item: pytest.Item, info: ClaimInfo, report: pytest.TestReport) -> None:
    """A claim item that ran no example: kept, so the report can say it was not run and why."""
    state = item.config.stash[_STATE]
    state.skips[item.nodeid] = {
        **_identity(item, info),
        "reason": _skip_reason(report),
        "runs_only_with": info.runs_only_with,
    }
    state.flush()


def _judge_report(item: pytest.Item, call: pytest.CallInfo, report: pytest.TestReport) -> None:
    info = _claim(item)
    if info is None:
        return
    if report.skipped:
        # An xfail outcome also reads as skipped, but the claim ran: not a claim "not run".
        if report.when in ("setup", "call") and not hasattr(report, "wasxfail"):
            _record_skip(item, info, report)
        return
    if report.when == "setup" and report.failed:
        collector, verdict, reason = evidence.Collector(), "error", "setup failed"
        error, falsifying = _trim(f"setup failed: {report.longrepr}"), None
    elif report.when == "call":
        collector = item.stash.get(_COLLECTOR, None) or evidence.Collector()
        exc = call.excinfo.value if call.excinfo is not None else None
        verdict, error, reason = judge(exc, collector, info)
        falsifying = falsifying_text(info, collector) if verdict == "refuted" else None
    else:
        return
    state = item.config.stash[_STATE]
    if error:  # paths relative to the rootdir: the report reads the same on any checkout
        error = error.replace(f"{item.config.rootpath}{os.sep}", "")
    record = _record(item, info, collector, verdict, error, falsifying, reason)
    state.records[item.nodeid] = record
    state.flush()

    target = state.target(info)  # the lock's verdict when it pins the claim
    ok = as_expected(verdict, target)
    # On the item, so that later reports (teardown, which junitxml reads) carry them too.
    props = [
        ("claim", info.id),
        ("verdict", verdict),
        ("expected", info.expected),
        ("as_expected", as_expected(verdict, info.expected)),
    ]
    if target != info.expected:  # the lock pins another verdict, and decides
        props += [("pinned", target), ("as_pinned", ok)]
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
        if target == info.expected:
            header = f"claim {info.id}: verdict {verdict}, expected {info.expected} ({reason})"
        else:
            header = (
                f"claim {info.id}: verdict {verdict}, lock says {target} "
                f"(the paper expects {info.expected}; {reason})"
            )
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
    """A line per claim as it finishes (unless -q); registered on the controller only,
    because pytest_runtest_logreport receives the report but not the config."""

    def __init__(self, config: pytest.Config):
        self.config = config

    @pytest.hookimpl(trylast=True)  # after pytest's own PASSED/FAILED word
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        props = dict(report.user_properties)
        if "claim" not in props or report.when not in ("setup", "call"):
            return
        reporter = self.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or self.config.getoption("verbose") < 0:
            return  # -q asks for the dots only
        if self.config.getoption("verbose") == 0:
            reporter.ensure_newline()  # progress per claim on long runs, not glued to the dots
        if "pinned" in props:
            mark = "as pinned" if props["as_pinned"] else "UNEXPECTED"
            shown = f"expected {props['expected']}, lock says {props['pinned']}, {mark}"
        else:
            mark = "as expected" if props["as_expected"] else "UNEXPECTED"
            shown = f"expected {props['expected']}, {mark}"
        reporter.write_line(f"    claim {props['claim']}: {props['verdict']} ({shown})")


def _collect_error(report: pytest.CollectReport) -> str:
    """One line naming the exception of a failed collection (e.g. a claim module that raised
    at import)."""
    crash = getattr(report.longrepr, "reprcrash", None)
    message = getattr(crash, "message", None)
    if not message:
        lines = [line for line in report.longreprtext.splitlines() if line.strip()]
        raised = [line[1:].strip() for line in lines if line.startswith("E ")]
        message = (raised or lines or ["collection failed"])[-1]
    return message.strip().splitlines()[0]


class _Faults:
    """What the controller (or the only process) sees of infrastructure faults: which claim
    items finished, which xdist worker died under which item, why the run stopped early, and
    which modules failed to collect. Read at session end to report what did not finish."""

    def __init__(self, state: _State):
        self.state = state

    def pytest_runtest_logfinish(self, nodeid: str) -> None:
        self.state.finished.add(nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport) -> None:
        output = getattr(getattr(report, "node", None), "workeroutput", None) or {}
        if output.get("exitstatus") == pytest.ExitCode.INTERRUPTED:
            return  # the worker was interrupted (Ctrl-C), not killed: reported as not finished
        self.state.crashed[crashitem] = str(report.longrepr)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.state.collection_errors[report.nodeid or str(report.fspath)] = _collect_error(
                report
            )

    def pytest_keyboard_interrupt(self, excinfo: pytest.ExceptionInfo) -> None:
        value = excinfo.value
        if type(value) is KeyboardInterrupt:
            self.state.interrupted = "the run was interrupted (KeyboardInterrupt)"
        else:  # pytest.exit(), or pytest stopping: collection errors, -x, --maxfail, xdist
            why = getattr(value, "msg", None) or str(value) or type(value).__name__
            self.state.interrupted = f"the run stopped early ({why})"


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
                "error": "\n".join(errors) or None,
                "figures": first["figures"],
                "note": first["note"],
                "nodeid": first["nodeid"],
                "_replay": witness.get("replay") or {},
                "_replayed": any(r.get("replayed") for r in group),
                "_counterexample_replayed": bool(witness.get("counterexample_replayed")),
                "_order": order_key(
                    first["paper"], first["kind"], first["module"], first["line"], claim_id
                ),
            }
        )
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
    from models.device import describe  # imports torch: only where a report is written

    return describe()


def build_report(
    claims: list[dict], profile: str, skipped: list[dict] = (), incomplete: dict | None = None
) -> dict:
    """The claims.json document. ``skipped``: claims that ran no example (``skipped_claims``);
    they have no verdict and are not counted among the claims. ``incomplete`` (only when the
    run did not finish: {"reason", "not_finished": claim ids, "collection_errors": {module:
    message}}) is kept under that key, so nothing reads a partial report as a full one."""
    verdicts = Counter(c["verdict"] for c in claims)
    expected_ok = sum(c["as_expected"] for c in claims)
    extra = {"incomplete": incomplete} if incomplete else {}
    return {
        "generated": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "profile": profile,
        "versions": _versions(),
        "device": _describe_device(),
        "summary": {
            "claims": len(claims),
            **{v: verdicts[v] for v in VERDICTS},
            "as_expected": expected_ok,
            "unexpected": len(claims) - expected_ok,
            "skipped": len(skipped),
        },
        "claims": claims,
        "skipped": list(skipped),
        **extra,
    }


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


def _read_run(run_dir: Path) -> tuple[list[dict], list[dict], dict | None, dict[str, dict]]:
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
                collection = {**_empty_collection(), "known": part.get("known")}
            collection["collected"] = sorted({*collection["collected"], *part["collected"]})
            collection["deselected"] = sorted({*collection["deselected"], *part["deselected"]})
            collection["known_note"] = collection["known_note"] or part.get("known_note")
            if part.get("known") is None:
                collection["known"] = None
    return list(records.values()), list(skips.values()), collection, items


def _unfinished(
    state: _State, session: pytest.Session, records: list[dict], skips: list[dict], items: dict
) -> tuple[list[dict], list[dict], dict | None]:
    """Account for every collected claim item: one whose xdist worker died gets an error
    record; one that never reported (an interrupted run, a stopped worker) is a "not run"
    entry with the reason. Returns (records, not-run entries, the report's "incomplete")."""
    done = {r["item"] for r in records} | {s["item"] for s in skips} | state.finished
    records = list(records)
    for nodeid, message in state.crashed.items():
        if nodeid in items and nodeid not in done:
            records.append(_crash_record(items[nodeid], message))
            state.crash_lines.append((items[nodeid]["id"], f"{message}: {CRASHED}"))
            done.add(nodeid)
    why = state.interrupted or next(
        (f"the run stopped early ({s})" for s in (session.shouldfail, session.shouldstop) if s),
        "the run ended before they reported (a worker that stopped early?)",
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


def _relative(path: Path, config: pytest.Config) -> str:
    for base in (Path(config.invocation_params.dir), Path(config.rootpath)):
        with contextlib.suppress(ValueError):
            return str(path.relative_to(base))
    return str(path)


def _save_counterexamples(state: _State, claims: list[dict], replays: dict, config) -> None:
    for claim in claims:
        if claim["verdict"] != "refuted":
            continue
        try:
            saved = replay.save(
                claim, replays.get(claim["id"]), profile=current_profile(), store=state.store
            )
        except Exception as exc:  # the report keeps it; say so, and save the others
            where = _relative(replay.path_for(claim["id"], state.store), config)
            state.gate_lines.append(
                f"could not save the counterexample of {claim['id']} to {where} "
                f"(it is in the report): {exc!r}"
            )
            continue
        if saved is not None:
            saved["id"], saved["shown"] = claim["id"], _relative(saved["path"], config)
            text = claim.get("falsifying_example") or ""
            lines = [line for line in text.splitlines() if "@reproduce_failure" not in line]
            if len(lines) > SHOWN_LINES:
                more = len(lines) - SHOWN_LINES
                lines = [*lines[:SHOWN_LINES], f"... ({more} more lines in {saved['shown']})"]
            saved["falsifying"] = lines
            state.saved.append(saved)


def _run_gate(
    state: _State, claims: list[dict], skipped: list[dict], collection: dict | None, config
) -> None:
    """Compare the merged verdicts with the lock; fill state.gate and state.gate_lines."""
    where = _relative(state.lock_path, config)
    if not state.gate_on:
        state.gate_lines = [f"verdict gate off ({state.gate_off}): {where} not checked"]
        return
    if state.gate_off:  # e.g. ATTN_NO_GATE ignored under CI
        state.gate_lines.append(f"note: {state.gate_off}")
    collection = collection or _empty_collection()
    known = collection.get("known")
    if state.lock_error is not None:
        state.gate = locks.GateResult(problems=[state.lock_error])
        return
    if state.lock is None:
        create = f"create it with `{locks.UPDATE_COMMAND}` after a full run"
        if _under_ci() and known:
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
    )


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    state.flush()
    if state.is_worker:
        return
    config = session.config
    records, skips, collection, items = _read_run(state.run_dir)
    unfinished: list[dict] = []
    if items and not (
        config.getoption("collectonly", False) or config.getoption("setupplan", False)
    ):
        records, unfinished, state.incomplete = _unfinished(state, session, records, skips, items)
    if records or skips or state.incomplete:
        claims = merge_records(records, keep_replay=True)
        replays = {c["id"]: c.pop("_replay", {}) for c in claims}
        still = {c["id"]: c.pop("_counterexample_replayed", False) for c in claims}
        state.replayed = {
            c["id"]: {**c, "_counterexample_replayed": still[c["id"]]}
            for c in claims
            if c.pop("_replayed", False)
        }
        skipped = skipped_claims([*skips, *unfinished], claims)
        state.skipped = skipped
        report = build_report(claims, current_profile(), skipped, state.incomplete)
        _write_json(state.report_path, report)  # first: nothing below may lose the report
        state.summary = dict(
            report["summary"],
            refuted_as_expected=sum(
                c["verdict"] == "refuted" and c["as_expected"] for c in report["claims"]
            ),
        )
        _save_counterexamples(state, claims, replays, config)
        try:
            _run_gate(state, claims, skipped, collection, config)
        except Exception as exc:  # a bug in the gate must fail the run, not pass it
            state.gate = locks.GateResult(problems=[f"the verdict gate itself failed: {exc!r}"])
        failed = (state.gate is not None and not state.gate.ok) or state.incomplete
        if failed and session.exitstatus == 0:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
    shutil.rmtree(state.run_dir, ignore_errors=True)
    with contextlib.suppress(OSError):
        state.run_dir.parent.rmdir()  # only if no other run left evidence there
    if not records and not skips and not state.incomplete:
        return
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
    write = terminalreporter.write_line
    write(
        f"attention-theorems: {s['claims']} claims: {s['holds']} held, "
        f"{s['refuted_as_expected']} refuted as expected, {s['unexpected']} unexpected, "
        f"{s['inconclusive']} inconclusive, {s['vacuous']} vacuous, {s['error']} error"
        f"{f', {len(state.skipped)} not run' if state.skipped else ''} — "
        f"{_relative(state.report_path, config)}"
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
    verbose = config.getoption("verbose") > 0
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
        shown = _relative(replay.path_for(claim_id, state.store), config)
        write(f"attention-theorems: {claim_id}: the saved counterexample ({shown}) {outcome}")
    for line in state.gate_lines:
        write(f"attention-theorems: {line}")
    gate = state.gate
    if gate is None:
        return
    where = _relative(state.lock_path, config)
    if gate.ok:
        conj = f"; {gate.conjectures} conjectures not gated" if gate.conjectures else ""
        write(f"attention-theorems: verdict gate passed: {gate.checked} claims match {where}{conj}")
    else:
        terminalreporter.write_sep(
            "=", f"verdict gate FAILED: {len(gate.problems)} problems ({where})", red=True
        )
        for problem in gate.problems:
            for line in problem.splitlines():
                write(line, red=line.startswith(_RED))
        write(f"to accept these verdicts on purpose: {locks.UPDATE_COMMAND}, and commit {where}")
    for note in gate.notes:
        write(f"attention-theorems: note: {note}")
