"""pytest plugin: turn each claim's outcome into a verdict, and write reports/claims.json.

Loaded by the root conftest (`pytest_plugins`), or with `-p theorems.framework.plugin`.

Flow per claim item (in the process that runs it, an xdist worker or the only process):
`pytest_runtest_call` activates an `evidence.Collector`; `pytest_runtest_makereport` judges
the outcome (holds / refuted / inconclusive / error), sets the pytest outcome to "passed iff
the verdict is the expected one", and appends a record to this process's evidence file
`<report dir>/.evidence/<run id>/<worker>.json` (rewritten atomically after every claim, so a
crash keeps what was recorded). At session end the controller (or the only process) merges
every file of the run, one entry per claim id, and writes the report atomically.

Then, on the merged report (never losing it): each refuted claim's minimal counterexample is
saved to `theorems/counterexamples/<ID>.json` (theorems.framework.replay; replayed first next run),
and the verdict gate (theorems.framework.lock) compares every claim's verdict with
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

import contextlib
import functools
import json
import os
import shutil
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from _pytest._code.code import TerminalRepr
from hypothesis import settings

from theorems.framework import evidence, hypothesis_compat, memory, progress, replay
from theorems.framework import lock as locks
from theorems.framework.profiles import (
    current_profile,
    database_notes,
    load_profile,
    note_profile,
    register_profiles,
)
from theorems.framework.records import (
    build_report,
    carry_over,
    claim_fields,
    empty_collection,
    identity,
    item_record,
    merge_records,
    read_previous,
    read_run,
    skipped_claims,
    write_json,
)
from theorems.framework.registry import (
    NIGHTLY_ONLY,
    REGISTRY,
    ClaimInfo,
    claim_of,
    import_claim_modules,
)
from theorems.framework.session import (
    RunState,
    account_for_items,
    run_gate,
    save_counterexamples,
    summary_lines,
    truthy,
    under_ci,
)
from theorems.framework.verdicts import (
    as_expected,
    falsifying_text,
    judge,
    trim,
)

# Registered at import, so that --hypothesis-profile can name them even without the root
# conftest (Hypothesis loads that profile in its own pytest_configure).
register_profiles()

REPORT_ENV = "ATTN_CLAIMS_REPORT"
DEFAULT_REPORT = Path("reports") / "claims.json"
LOCK_ENV = "ATTN_VERDICT_LOCK"
NO_GATE_ENV = "ATTN_NO_GATE"

_COLLECTOR = pytest.StashKey[evidence.Collector]()
_HEADER_SHOWN = pytest.StashKey[bool]()
_AFTER_REPORT: list[Callable[[Path], Any]] = []
_AFTER_CLAIM: list[Callable[[ClaimInfo], Any]] = []


def after_report(callback: Callable[[Path], Any]) -> Callable[[Path], Any]:
    """Register `callback(path_of_claims_json)`, called after the report is written (e.g.
    to render HTML/Markdown). Usable as a decorator; registering twice is a no-op."""
    if callback not in _AFTER_REPORT:
        _AFTER_REPORT.append(callback)
    return callback


def after_claim(callback: Callable[[ClaimInfo], Any]) -> Callable[[ClaimInfo], Any]:
    """Register `callback(claim_info)`, called in the process that ran a claim, right after its
    test call and outside its evidence and its seconds (e.g. to draw its figure while the
    runs it computed are still in that process's caches). A callback that raises is a warning,
    never a verdict. Registering twice is a no-op."""
    if callback not in _AFTER_CLAIM:
        _AFTER_CLAIM.append(callback)
    return callback


# --------------------------------------------------------------------------- state


_STATE = pytest.StashKey[RunState]()


def _option_path(config: pytest.Config, option: str, env: str, default: Path) -> Path:
    given = config.getoption(option, default=None) or os.environ.get(env)
    if given:
        path = Path(given).expanduser()
        return path if path.is_absolute() else Path(config.invocation_params.dir) / path
    return Path(config.rootpath) / default


def _report_path(config: pytest.Config) -> Path:
    return _option_path(config, "claims_report", REPORT_ENV, DEFAULT_REPORT)


def _gate_switch(config: pytest.Config) -> tuple[bool, str]:
    """(gate on, why it is off). --no-gate always wins; ATTN_NO_GATE only outside CI."""
    if config.getoption("no_gate", default=False):
        return False, "--no-gate"
    if truthy(os.environ.get(NO_GATE_ENV)):
        if under_ci():
            return True, f"{NO_GATE_ENV} is ignored under CI"
        return False, f"{NO_GATE_ENV}={os.environ[NO_GATE_ENV]}"
    return True, ""


def _load_lock(state: RunState) -> None:
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
        "--fresh-report",
        dest="fresh_report",
        action="store_true",
        default=False,
        help="write the claims report of this run alone; by default the claims of the report "
        "it replaces that this run did not judge are kept (same profile), each naming its run",
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
    try:
        memory.cap(memory.limit_from_env())
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
    state = RunState(report_path, run_id, run_dir, worker, is_worker)
    state.gate_on, state.gate_off = gate_on, gate_off
    state.lock_path, state.store = lock_path, store
    state.bases = (Path(config.invocation_params.dir), Path(config.rootpath))
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
            state.collection = state.collection or empty_collection()
            state.collection["deselected"] = sorted({*state.collection["deselected"], info.id})


def known_claims(root: Path) -> tuple[dict[str, str] | None, str | None]:
    """Every claim defined under <root>/theorems (id -> expected), importing the claim
    modules that this run did not; (None, why) when that cannot be known."""
    folder = (root / "theorems").resolve()
    if not folder.is_dir() or Path(__file__).resolve().parents[1] != folder:
        return None, None
    from theorems.framework.registry import ClaimRegistrationError

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


@pytest.hookimpl(tryfirst=True)  # under xdist, before the worker sends its collection
def pytest_collection_finish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    collected = sorted({info.id for item in session.items if (info := _claim(item))})
    if not collected:
        return
    collection = state.collection or empty_collection()
    collection["collected"] = collected
    collection["known"], collection["known_note"] = known_claims(Path(session.config.rootpath))
    state.collection = collection
    state.flush()
    # What each collected claim item is, once: the controller names from it the items that
    # never reported (a worker that died, an interrupted run).
    items = {
        item.nodeid: {**identity(item, info), **claim_fields(info)}
        for item in session.items
        if (info := _claim(item))
    }
    # "plan": what the xdist controller, which collects nothing, prints at the start.
    plan = _plan(session.items)
    write_json(state.run_dir / f"{state.worker}.items.json", {"items": items, "plan": plan})


def _plan(items: list[pytest.Item]) -> dict[str, Any]:
    """The claims collected and their example budgets (progress.plan); a claim that is not a
    Hypothesis test is one example."""
    return progress.plan(
        (info.id, info.budget if getattr(item.obj, "is_hypothesis_test", False) else 1)
        for item in items
        if (info := _claim(item))
    )


def _header_lines(config: pytest.Config, plan: dict[str, Any]) -> list[str]:
    """What a claims run prints at its start: the profile and the claims' example budgets,
    the verdict gate and its lock. Nothing under -qq, nor when no claim was collected."""
    state = config.stash.get(_STATE, None)
    if state is None or not plan.get("claims") or config.getoption("verbose") < -1:
        return []
    gate = progress.gate_text(
        state.gate_on, state.gate_off, state.relative(state.lock_path), state.lock,
        state.lock_error,
    )  # fmt: skip
    return [
        f"{progress.PREFIX} {progress.profile_text()}; {progress.plan_text(plan)}",
        f"{progress.PREFIX} {gate}",
    ]


def pytest_report_collectionfinish(config: pytest.Config, items: list[pytest.Item]) -> list[str]:
    """The start of a run without xdist: after pytest's "collected N items"."""
    state = config.stash.get(_STATE, None)
    if state is None or state.is_worker:
        return []
    return _header_lines(config, _plan(items))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node, ids) -> None:
    """The start of an xdist run, once: from the plan the first worker wrote when it
    collected (pytest_collection_finish runs there before the worker reports its
    collection)."""
    config = node.config
    state = config.stash.get(_STATE, None)
    if state is None or config.stash.get(_HEADER_SHOWN, False):
        return
    path = state.run_dir / f"{node.workerinput['workerid']}.items.json"
    try:
        plan = json.loads(path.read_text(encoding="utf-8")).get("plan") or {}
    except (OSError, ValueError):
        return  # no claim collected there (or unreadable): maybe the next worker's
    config.stash[_HEADER_SHOWN] = True
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    lines = _header_lines(config, plan)
    if reporter is None or not lines:
        return
    reporter.ensure_newline()
    reporter.write("\n")  # xdist's status line was rewritten in place, without a newline
    for line in lines:
        reporter.write_line(line)


# --------------------------------------------------------------------------- running a claim


def _claim(item: pytest.Item) -> ClaimInfo | None:
    return claim_of(getattr(item, "obj", None)) if isinstance(item, pytest.Function) else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    # The replay profile decides saved counterexamples and pinned examples only (the numerics
    # matrix, .ci/numerics_matrix.py): a claim that is not a Hypothesis test has none.
    info = _claim(item)
    if current_profile() == "replay" and info is not None:
        if not getattr(item.obj, "is_hypothesis_test", False):
            pytest.skip("the replay profile runs saved counterexamples and @examples only")
    # Skipped here, before Hypothesis draws (a large-rung draw solves its SVM): reported as
    # not run, its lock line unchecked (runs_only_with).
    if info is not None and info.runs_only_with == NIGHTLY_ONLY and current_profile() != "nightly":
        pytest.skip(f"runs only under {NIGHTLY_ONLY}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    info = _claim(item)
    if info is None:
        return (yield)
    # A Hypothesis test counts its examples through the registry's inner_test wrapper; any
    # other claim is one example, bracketed here.
    is_hypothesis = getattr(item.obj, "is_hypothesis_test", False)
    if is_hypothesis and progress.enabled(item.config.getoption("verbose")):
        # A line every ATTN_PROGRESS_SECONDS while the claim runs (at example boundaries).
        emit = functools.partial(_progress_line, item.config)
        ticker = progress.Ticker(info.id, info.budget, emit, progress.interval())
        collector = item.stash[_COLLECTOR] = progress.TimedCollector(ticker)
    else:
        collector = item.stash[_COLLECTOR] = evidence.Collector()
    collector.is_hypothesis = bool(is_hypothesis)
    if is_hypothesis and not settings.default.derandomize:
        # The examples HypoFuzz saved for this claim are under its node id (docs/scale-out.md).
        hypothesis_compat.key_by_node(item.obj, item.nodeid)
    start = time.perf_counter()
    try:
        with evidence.collecting(collector):
            if is_hypothesis:
                return (yield)
            with evidence.example():
                return (yield)
    finally:
        collector.seconds = time.perf_counter() - start
        for callback in list(_AFTER_CLAIM):
            try:
                callback(info)
            except Exception as exc:  # noqa: BLE001 - a figure never decides a verdict
                warnings.warn(
                    f"attention-theorems: after_claim {callback!r}: {exc!r}", stacklevel=1
                )


def _progress_line(config: pytest.Config, text: str) -> None:
    """Print a progress line now, from inside a claim's test call: pytest's capture is
    suspended for it (as for live logging). Without xdist it goes to the terminal reporter;
    in an xdist worker, whose terminal output nobody reads, to the worker's real stderr,
    which is the controller's: it reaches the terminal while the claim runs."""
    state = config.stash.get(_STATE, None)
    capman = config.pluginmanager.get_plugin("capturemanager")
    suspended = capman.global_and_fixture_disabled() if capman else contextlib.nullcontext()
    reporter = config.pluginmanager.get_plugin("terminalreporter")
    with suspended:
        if (state is not None and state.is_worker) or reporter is None:
            # Under xdist in pytest's dots mode, the line may follow a dot, as a claim's
            # closing line does.
            worker = f"[{state.worker}] " if state is not None and state.is_worker else ""
            os.write(2, f"{worker}{text}\n".encode())
        else:
            reporter.ensure_newline()
            reporter.write_line(text)


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
        **identity(item, info),
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
        error, falsifying = trim(f"setup failed: {report.longrepr}"), None
    elif report.when == "call":
        collector = item.stash.get(_COLLECTOR, None) or evidence.Collector()
        exc = call.excinfo.value if call.excinfo is not None else None
        verdict, error, reason = judge(exc, collector, info)
        # A fragile counterexample (verdicts._refutation) is shown too: it is what to study.
        fragile = bool(collector.robustness and collector.robustness["holds_on"])
        falsifying = falsifying_text(info, collector) if verdict == "refuted" or fragile else None
    else:
        return
    state = item.config.stash[_STATE]
    if error:  # paths relative to the rootdir: the report reads the same on any checkout
        error = error.replace(f"{item.config.rootpath}{os.sep}", "")
    record = item_record(item, info, collector, verdict, error, falsifying, reason)
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
    if report.when == "call":  # examples, worst slack, seconds: the claim's closing line
        props += progress.evidence_props(collector)
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
    """A line per claim as it finishes (unless -q): its verdict, then its examples, worst
    slack and seconds; registered on the controller only, because pytest_runtest_logreport
    receives the report but not the config."""

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
        done = progress.evidence_text(props)
        line = f"    claim {props['claim']}: {props['verdict']} ({shown})"
        reporter.write_line(f"{line} — {done}" if done else line)


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

    def __init__(self, state: RunState):
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


def pytest_sessionfinish(session: pytest.Session) -> None:
    state = session.config.stash.get(_STATE, None)
    if state is None:
        return
    state.flush()
    if state.is_worker:
        return
    config = session.config
    records, skips, collection, items = read_run(state.run_dir)
    unfinished: list[dict] = []
    if items and not (
        config.getoption("collectonly", False) or config.getoption("setupplan", False)
    ):
        stopped = session.shouldfail or session.shouldstop
        records, unfinished, state.incomplete = account_for_items(
            state, str(stopped) if stopped else None, records, skips, items
        )
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
        # The lock this run is judged against (--verdict-lock, ATTN_VERDICT_LOCK or the
        # checkout's): the report's "verdict changes" compare with the same one.
        report["lock"] = str(state.lock_path)
        state.summary = dict(  # this run's claims; the report adds up the earlier runs'
            report["summary"],
            refuted_as_expected=sum(
                c["verdict"] == "refuted" and c["as_expected"] for c in report["claims"]
            ),
        )
        if not config.getoption("fresh_report", False):
            known = (state.collection or {}).get("known")
            report = carry_over(report, read_previous(state.report_path), known)
        write_json(state.report_path, report)  # first: nothing below may lose the report
        save_counterexamples(state, claims, replays)
        try:
            run_gate(state, claims, skipped, collection)
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
    # A shared example database left out or lost (theorems.framework.profiles): said at start
    # too, but pytest captures what the conftest prints.
    for note in database_notes():
        terminalreporter.write_line(note, yellow=True)
    state = config.stash.get(_STATE, None)
    if state is None or state.summary is None:
        return
    for kind, text, red in summary_lines(state, verbose=config.getoption("verbose") > 0):
        if kind == "sep":
            terminalreporter.write_sep("=", text, red=red)
        else:
            terminalreporter.write_line(text, red=red)
