"""The verdict rules: the words a claim may be given, and how one claim item's outcome
becomes a verdict (`judge`), how a parametrized claim's items merge (`merge_verdicts`), and
whether a verdict is the expected one (`as_expected`).

Imports only `evidence` of the framework (whose Collector `judge` reads) and Hypothesis'
public exception classes.
"""

from __future__ import annotations

import builtins
import re
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from hypothesis.errors import FailedHealthCheck, Flaky, HypothesisException, Unsatisfiable

from theorems.framework import evidence

if TYPE_CHECKING:  # the registry imports this module
    from theorems.framework.registry import ClaimInfo

TEXT_LIMIT = 4000  # characters kept of an error or a falsifying-example text

# BaseExceptionGroup is a builtin from Python 3.11; Hypothesis uses the backport before.
_GROUP = getattr(builtins, "BaseExceptionGroup", None)
if _GROUP is None:  # pragma: no cover - Python 3.10
    from exceptiongroup import BaseExceptionGroup as _GROUP


KINDS = frozenset(
    {
        "definition",
        "lemma",
        "theorem",
        "corollary",
        "experiment",
        "control",
        "metamorphic",
        "conjecture",
    }
)


EXPECTED = frozenset({"holds", "refuted", "unknown"})


#: The provenance tags of the specs (their tables in ../shared/spec/*.md): [V] verified in
#: text read, [V-frag] read in a fragment, [R+] recalled with confidence, [R] reconstructed,
#: [R?] recalled with low confidence, [D] derived, [N] numerically observed, [U] unverified,
#: [?] unknown. A claim's provenance names at least one; free text may surround them
#: ("[R?] hypotheses, [D] n = 1"), and one bracket may hold several ("[D, N]").
PROVENANCE_TAGS = frozenset({"V", "V-frag", "R+", "R", "R?", "D", "N", "U", "?"})


#: holds: no counterexample, and the premise was met; refuted: a counterexample; inconclusive:
#: the machinery could not decide; vacuous: the premise or assumptions were met in too few
#: examples for "holds" to mean anything; error: the claim or its strategy is broken.
VERDICTS = ("holds", "refuted", "inconclusive", "vacuous", "error")


# An upper-case prefix (MM, EMB, or a user's own), then dash-separated letters and digits.
ID_PATTERN = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Za-z0-9]+)+$")


def merge_verdicts(verdicts: Iterable[str]) -> str:
    """One verdict for the items of a parametrized claim.

    Any refuted -> refuted (a counterexample is the strongest finding); else any error ->
    error; else any inconclusive -> inconclusive; else any vacuous -> vacuous (a part of the
    claim was never exercised); else holds.
    """
    seen = set(verdicts)
    unknown = seen - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}")
    for verdict in ("refuted", "error", "inconclusive", "vacuous"):
        if verdict in seen:
            return verdict
    if not seen:
        raise ValueError("no verdicts to merge")
    return "holds"


def as_expected(verdict: str, expected: str) -> bool:
    """Whether a verdict meets the expectation; "unknown" accepts anything but error."""
    if expected == "unknown":
        return verdict != "error"
    return verdict == expected


# Reading order within a paper: definitions and their consequences first, then the lemmas,
# theorems and corollaries, the experiments, and the negative controls last.
KIND_ORDER = (
    "definition",
    "metamorphic",
    "lemma",
    "theorem",
    "corollary",
    "experiment",
    "control",
    "conjecture",
)


def order_key(paper: str, kind: str, module: str, line: int, claim_id: str) -> tuple:
    """Sort key of a claim in reports and listings: paper, kind (reading order), definition."""
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (paper, rank, module, line, claim_id)


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, _GROUP):
        return [leaf for sub in exc.exceptions for leaf in _leaves(sub)]
    return [exc]


def trim(text: str, limit: int = TEXT_LIMIT) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 15] + "\n... [trimmed]"


def _describe(exc: BaseException) -> str:
    return trim("".join(traceback.format_exception_only(type(exc), exc)))


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
    # What the failing assertion said (the value a conjecture's message carries, say): the
    # evidence of the refutation, kept with the example wherever it goes.
    said = assertion_text(collector.last_body_exception)
    said_lines = [f"AssertionError: {said}"] if said else []
    # Object reprs carry memory addresses, which differ between runs.
    text = "\n".join([f"Falsifying example{where}: {name}(", *lines, ")", *said_lines])
    return trim(_ADDRESS.sub("", text))


def assertion_text(exc: BaseException | None) -> str | None:
    """What the failing assertion said: the message of `assert x, msg` (without the
    explanation pytest's rewriting appends, which names objects by address), or pytest's
    `assert ...` line where there is no message; None when there is no assertion."""
    leaves = [leaf for leaf in _leaves(exc) if isinstance(leaf, AssertionError)] if exc else []
    text = str(leaves[0]).strip() if leaves else ""
    if "\nassert " in text:  # "msg\nassert <expr>\n +  where ...": the message alone
        text = text.split("\nassert ", 1)[0].strip()
    elif text.startswith("assert "):  # no message: pytest's first line, "assert 10 < 10"
        text = text.splitlines()[0]
    return trim(_ADDRESS.sub("", text), 1000) if text else None


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
    if collector.twin_disagreements:
        # A conclusion that flips on the same instance restated is no verdict (issue 21).
        text = "\n".join(collector.twin_disagreements)
        return "error", trim(text), collector.twin_disagreements[0]
    snap = collector.snapshot()
    rejected, undecided = sum(snap["rejections"].values()), sum(snap["inconclusive"].values())
    premise = snap["premise"]
    drawing = collector.drawing_failures
    if exc is None and collector.replay_undecided is not None:
        # A counterexample that this machine cannot decide is lost evidence, not support: the
        # drawn examples that hold say nothing about it (issue 21).
        return (
            "inconclusive",
            None,
            f"the saved counterexample is undecided here ({collector.replay_undecided}); "
            f"the {collector.examples} drawn examples that held do not replace it",
        )
    if exc is None:
        seen = collector.examples + undecided
        if collector.examples == 0 and undecided:
            return "inconclusive", None, f"no example completed ({snap['inconclusive']})"
        if (premise["met"] < info.min_premise or collector.examples == 0) and drawing:
            # Too few instances, and the strategy's solves failed: the failures decided which
            # instances there were, so the claim's premise was not shown to be rare.
            return "inconclusive", None, f"the strategy's solver failed while drawing: {drawing}"
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
        return _refutation(collector.robustness)
    if isinstance(exc, evidence.InconclusiveExample):
        return "inconclusive", None, f"the numerics could not decide: {exc.reason}"
    if isinstance(exc, evidence.RejectedExample):
        return "vacuous", None, f"the instance does not meet the claim's assumptions: {exc.reason}"
    # Hypothesis gave up on drawing examples that pass the assumptions: by our own counts,
    # not by its message (Unsatisfiable, or the filter_too_much health check).
    gave_up = isinstance(exc, Unsatisfiable) or (
        isinstance(exc, FailedHealthCheck) and (rejected or undecided)
    )
    if isinstance(exc, (Unsatisfiable, FailedHealthCheck)) and drawing:
        return "inconclusive", None, f"the strategy's solver failed while drawing: {drawing}"
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
        return "error", trim(message), message.splitlines()[0]
    drawn = collector.is_hypothesis and not isinstance(exc, HypothesisException)
    if drawn and not _from_the_body(exc, collector):
        text = _describe(exc)
        message = f"the strategy failed to build an instance: {text.splitlines()[0]}"
        return "error", trim(f"{message}\n{text}"), message
    return "error", _describe(exc), f"{type(exc).__name__} raised"


def _refutation(robustness: dict | None) -> tuple[str, str | None, str]:
    """A counterexample is a refutation only if it is robust: on every twin of its instance
    (the same instance restated, so another rounding; twins.robustness) that decides, it is
    refuted too. One that holds on a twin is fragile: rounding decides it (issue 21)."""
    if not robustness or not robustness["twins"]:
        return "refuted", None, "a counterexample was found; it has no twins to replay it on"
    outcomes = list(robustness["twins"].values())
    if robustness["holds_on"]:
        return (
            "inconclusive",
            None,
            "fragile counterexample: refuted on the instance but it holds on its twin(s) "
            f"{', '.join(robustness['holds_on'])}: the same instance restated, so rounding "
            "decides it, and it refutes nothing",
        )
    decided = outcomes.count("refuted")
    other = robustness.get("undeclared_holds") or []
    undecided = len(outcomes) - decided - len(other)
    return (
        "refuted",
        None,
        f"a counterexample was found; refuted on {decided} of its {len(outcomes)} twins too"
        + (f" ({undecided} undecided)" if undecided else "")
        + (
            f"; it holds on {', '.join(other)}, which the claim does not declare it is "
            "invariant under (twins=...)"
            if other
            else ""
        ),
    )


def _vacuous_reason(info: ClaimInfo, premise: dict, snap: dict) -> str:
    what = "its premise" if premise["declared"] else "its assumptions"
    rejections = f"; rejected: {snap['rejections']}" if snap["rejections"] else ""
    return (
        f"{what} held in {premise['met']} of {premise['of']} examples "
        f"(at least {info.min_premise} needed){rejections}: no evidence either way"
    )
