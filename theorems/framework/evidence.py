"""Evidence recorded from inside claim bodies.

A claim body calls these functions; the plugin (`theorems.framework.plugin`) activates one
`Collector` around each claim's test call, and the registry's example counter brackets every
Hypothesis example. Outside a claim `instance`, `slack` and `metric` do nothing, so helpers
that call them can be unit-tested; `reject` and `inconclusive` always stop the example.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any, NoReturn

import hypothesis
from hypothesis.control import currently_in_test_context
from hypothesis.errors import UnsatisfiedAssumption

from models.numerics import failures
from theorems.framework.instances import encode_arguments
from theorems.framework.profiles import current_profile

__all__ = [
    "Collector",
    "InconclusiveExample",
    "RejectedExample",
    "converged",
    "finite",
    "inconclusive",
    "instance",
    "metric",
    "premise",
    "reject",
    "slack",
    "solved",
    "to_jsonable",
    "Tolerance",
    "calibrated",
    "tolerance",
]


class RejectedExample(Exception):
    """reject() outside a Hypothesis test: the instance does not meet the assumptions."""

    def __init__(self, reason: str):
        super().__init__(
            f"{type(self).__name__}: {reason} (called outside a Hypothesis test, so there is "
            "no other example to try)"
        )
        self.reason = reason


class InconclusiveExample(RejectedExample):
    """inconclusive() outside a Hypothesis test: the numerics could not decide."""


#: What ends an example undecided: a rejection (Hypothesis' or ours) or an inconclusive one.
REJECTIONS = (UnsatisfiedAssumption, RejectedExample)
#: The prefix of a failure reported while an example was drawn, before its body ran.
DRAWING = "while drawing the instance:"
_FAILED_KIND = {True: "rejected", False: "raised"}


def _outcome(exc_type: type[BaseException] | None) -> str:
    # One line on purpose: see Collector.end.
    return "passed" if exc_type is None else _FAILED_KIND[issubclass(exc_type, REJECTIONS)]


def _worse(ratio: float, than: float) -> bool:
    # NaN means the numerics broke: it counts as the worst slack so that it is seen.
    return (math.isnan(ratio) and not math.isnan(than)) or ratio > than


class Collector:
    """The evidence of one claim item (one pytest test call)."""

    def __init__(self, *, targets: bool = True) -> None:
        #: whether slacks become Hypothesis targets (off for a twin's run: theorems.twins)
        self.targets = targets
        #: metamorphic twins (theorems.framework.twins): examples decided again on their
        #: twins, "twin: outcome" counts, and the disagreements found
        self.twins_checked = 0
        self.twins_run: Counter[str] = Counter()
        self.twin_disagreements: list[str] = []
        #: the reported counterexample decided again on its twins (twins.robustness): the
        #: outcome per twin, and the twins on which it holds (a fragile counterexample)
        self.robustness: dict[str, Any] | None = None
        #: the counterexample's sizes before and after the framework reduced it
        #: (theorems.framework.shrink), or None when it tried no reduction
        self.reduced: dict[str, Any] | None = None
        self.rejections: Counter[str] = Counter()
        self.inconclusive: Counter[str] = Counter()
        self.worst_slack: dict[str, dict[str, float]] = {}
        self.metrics: dict[str, dict[str, float]] = {}
        self.seconds = 0.0
        self._outcomes: Counter[str] = Counter()
        self._last_instance: dict[str, Any] = {}
        self._current: Any = None
        # the instances built during the current example's body (`built`): the last one,
        # how many, and whether `each` named it
        self._built: Any = None
        self._built_count = 0
        self._built_named = False
        # (counter, reason) when reject()/inconclusive() already counted this example
        self._stopped: tuple[str, str] | None = None
        self._targets: dict[str, float] = {}
        # The @given arguments and the non-finite evidence names of the current example, and
        # of the last example per outcome; the last exception an example body raised.
        self._arguments: dict[str, Any] | None = None
        self._last_arguments: dict[str, dict[str, Any] | None] = {}
        self._nonfinite: set[str] = set()
        self._last_nonfinite: dict[str, set[str]] = {}
        self.last_body_exception: BaseException | None = None
        self.is_hypothesis = False  # set by the plugin: the claim is a Hypothesis test
        # The premise (premise()): per example, whether the body declared it and it held;
        # over the claim, in how many examples it held. Claims that never call premise() are
        # counted by their assumptions: every example that was not rejected met them.
        self._premise: bool | None = None
        self.premise_declared = False
        self.premise_met = 0
        # Machinery failures (models.numerics.failures) that discarded an example, and failures a
        # claim tolerates by its statement (failures.tolerate), by key.
        self.failures: Counter[str] = Counter()
        self.tolerated: Counter[str] = Counter()
        self._explicit = False
        self._last_explicit: dict[str, bool] = {}
        #: Why the saved counterexample, replayed, decided nothing here (inconclusive or
        #: rejected: "what: reason"); None if it was decided or not replayed.
        self.replay_undecided: str | None = None
        # Every failure reported during the claim's test call, drawing included (Hypothesis
        # draws an example's arguments before the body, so a strategy that solves an SVM is
        # outside every example's own watch), and how many of them an example has accounted.
        self._all: failures.Watch | None = None
        self._seen = 0

    def unseen_failures(self) -> list[failures.Failure]:
        """Failures reported since the last call: between two example bodies, those of the
        drawing of the next example (and of draws the strategy rejected)."""
        if self._all is None:
            return []
        new = self._all.failures[self._seen :]
        self._seen = len(self._all.failures)
        return new

    def note_drawing_failures(self, found: list[failures.Failure]) -> None:
        for failure in found:
            self.failures[_while_drawing(failure).key] += 1

    @property
    def drawing_failures(self) -> dict[str, int]:
        """Failures reported while examples were drawn, by key (those of examples that then
        ran are in `inconclusive` too)."""
        return {key: n for key, n in self.failures.items() if DRAWING in key and n}

    @property
    def examples(self) -> int:
        """Example bodies that completed: not rejected, not inconclusive, not failed."""
        return self._outcomes["passed"]

    @property
    def counterexample(self) -> Any:
        """The instance of the last example that raised: Hypothesis replays the shrunk
        failing example last, so this is the minimal counterexample."""
        return self._last_instance.get("raised")

    @property
    def counterexample_nonfinite(self) -> list[str]:
        """Names of metrics/slacks that were NaN or infinite in the counterexample."""
        return sorted(self._last_nonfinite.get("raised", ()))

    @property
    def counterexample_arguments(self) -> dict[str, Any] | None:
        """The @given arguments of the last example that raised (the minimal one)."""
        return self._last_arguments.get("raised")

    @property
    def counterexample_is_replay(self) -> bool:
        """Whether the counterexample is the claim's saved one, replayed as an @example."""
        return self._last_explicit.get("raised", False)

    @property
    def tried(self) -> int:
        """Every example body that ran, whatever its outcome."""
        return sum(self._outcomes.values())

    def premise(self) -> dict[str, Any]:
        """In how many examples the claim's premise held ("met"), out of how many were
        tried ("of"); "declared": whether the claim states its premise with premise()."""
        if self.premise_declared:
            met = self.premise_met
        else:  # the assumptions: every example that was not rejected met them
            met = self.tried - self._outcomes["rejected"] + sum(self.inconclusive.values())
        return {"met": met, "of": self.tried, "declared": self.premise_declared}

    def replay(self) -> dict[str, Any]:
        """The counterexample's @given arguments in the typed JSON encoding of
        theorems.framework.replay ({"args": ...} or {"unrepresentable": ...}; {} if none)."""
        return encode_arguments(self._last_arguments.get("raised"))

    def adopt_counterexample(self, arguments: dict[str, Any], exc: BaseException | None) -> tuple:
        """Make ``arguments`` the claim's counterexample in place of the last example that
        raised (a smaller one found by theorems.framework.shrink, refuted by ``exc``);
        returns what it replaced, for ``restore_counterexample``."""
        saved = (
            self._last_arguments.get("raised"),
            self._last_instance.get("raised"),
            self._last_nonfinite.get("raised", set()),
            self._last_explicit.get("raised", False),
            self.last_body_exception,
        )
        self._last_arguments["raised"] = arguments
        self._last_instance["raised"] = _instance_of(arguments)
        self._last_nonfinite["raised"] = set()
        self._last_explicit["raised"] = False
        self.last_body_exception = exc
        return saved

    def restore_counterexample(self, saved: tuple) -> None:
        """Undo ``adopt_counterexample``."""
        arguments, instance, nonfinite, explicit, exc = saved
        self._last_arguments["raised"] = arguments
        self._last_instance["raised"] = instance
        self._last_nonfinite["raised"] = nonfinite
        self._last_explicit["raised"] = explicit
        self.last_body_exception = exc

    def begin(self, arguments: dict[str, Any] | None = None, explicit: bool = False) -> None:
        self._current = None
        self._built, self._built_count, self._built_named = None, 0, False
        self._stopped = None
        self._targets = {}
        self._arguments = arguments
        self._nonfinite = set()
        self._premise = None
        self._explicit = explicit

    def end(self, exc_type: type[BaseException] | None, exc: BaseException | None = None) -> None:
        outcome = _outcome(exc_type)
        self._outcomes[outcome] += 1
        if outcome == "raised" and self._current is None:
            # the body recorded none itself: the instance among its arguments, else the one
            # it built (a paper's instance) or was on (`each`); none where it built several
            # and named none (an experiment over seeds: which one failed is its message's)
            self._current = _instance_of(self._arguments)
            if self._current is None and (self._built_named or self._built_count == 1):
                self._current = _instance_of({"built": self._built})
        self._last_instance[outcome] = self._current
        self._last_arguments[outcome] = self._arguments
        self._last_nonfinite[outcome] = self._nonfinite
        self._last_explicit[outcome] = self._explicit
        if self._explicit and outcome == "rejected":
            what, reason = self._stopped or ("rejections", "assume()")
            kind = "inconclusive" if what == "inconclusive" else "rejected"
            self.replay_undecided = f"{kind}: {reason}"
        self.last_body_exception = exc
        self.premise_declared = self.premise_declared or self._premise is not None
        self.premise_met += int(outcome != "rejected" and bool(self._premise))
        # An assume() in the body, not routed through reject(), is a rejection too.
        self.rejections["assume()"] += int(outcome == "rejected" and self._stopped is None)
        for label, ratio in self._targets.items() if self.targets else ():
            hypothesis.target(ratio, label=label)

    def snapshot(self) -> dict[str, Any]:
        return {
            "examples": self.examples,
            "rejections": {k: v for k, v in sorted(self.rejections.items()) if v},
            "inconclusive": {k: v for k, v in sorted(self.inconclusive.items()) if v},
            "failures": {k: v for k, v in sorted(self.failures.items()) if v},
            "tolerated_failures": {k: v for k, v in sorted(self.tolerated.items()) if v},
            "premise": self.premise(),
            "worst_slack": {k: dict(v) for k, v in sorted(self.worst_slack.items())},
            "metrics": {k: dict(v) for k, v in sorted(self.metrics.items())},
            "seconds": self.seconds,
            "counterexample": self.counterexample,
            "counterexample_nonfinite": self.counterexample_nonfinite,
            "replay": self.replay(),
            "twins": {
                "examples": self.twins_checked,
                "runs": dict(sorted(self.twins_run.items())),
                "disagreements": list(self.twin_disagreements),
            },
            "robustness": self.robustness,
            "reduced": (
                None
                if self.reduced is None
                else {k: v for k, v in self.reduced.items() if k != "_replaced"}
            ),
        }


def _instance_of(arguments: dict[str, Any] | None) -> Any:
    """The instance among an example's @given arguments (the one with ``to_json()``, the
    schema of `python -m theorems check`), looked for in the arguments and in the tuples,
    lists and dicts they hold (a strategy that draws an instance with its starts, say); None
    if there is no such object, or more than one. Recorded for every claim: bodies do not
    record their instance by hand."""
    found: dict[int, Any] = {}

    def look(value: Any, depth: int) -> None:
        if callable(getattr(value, "to_json", None)):
            found[id(value)] = value
        elif depth < 3 and isinstance(value, (tuple, list)):
            for item in value:
                look(item, depth + 1)
        elif depth < 3 and isinstance(value, dict):
            for item in value.values():
                look(item, depth + 1)

    for value in (arguments or {}).values():
        look(value, 0)
    if len(found) != 1:
        return None
    try:
        return to_jsonable(next(iter(found.values())).to_json())
    except Exception:  # a broken to_json must not lose the verdict
        return None


_active: Collector | None = None


@contextlib.contextmanager
def collecting(collector: Collector) -> Iterator[Collector]:
    """Route evidence calls to `collector` for the duration of a claim's test call, and watch
    the failures of the whole call (the drawing of examples included)."""
    global _active
    previous, _active = _active, collector
    try:
        with failures.watch() as everything:
            collector._all, collector._seen = everything, 0
            try:
                yield collector
            finally:  # failures of draws after the last example (e.g. all of them rejected)
                collector.note_drawing_failures(collector.unseen_failures())
    finally:
        _active = previous


class example:
    """Bracket one example body (a Hypothesis example, or a whole non-Hypothesis claim);
    `arguments` are the example's @given arguments (kept for the counterexample store),
    `explicit` says they are the claim's saved counterexample, replayed.

    The failure guard: a failure of the machinery during the body (anything reported to
    ``models.numerics.failures``, an exception from a numerical library, a non-finite number in the
    evidence) makes the example inconclusive with its reason, whatever the body did next:
    an assertion that fails after an oracle failed is no counterexample, and a body that
    passes after one is no support."""

    def __init__(self, arguments: dict[str, Any] | None = None, explicit: bool = False):
        self.arguments = arguments
        self.explicit = explicit
        self._watching: contextlib.AbstractContextManager | None = None
        self._watch: failures.Watch | None = None

    def __enter__(self) -> None:
        collector = _active
        # Failures since the last example ended were reported while this one was drawn.
        self._drawn = collector.unseen_failures() if collector is not None else []
        self._watching = failures.watch()
        self._watch = self._watching.__enter__()
        if collector is not None:
            collector.begin(self.arguments, self.explicit)

    def __exit__(self, exc_type, exc, tb) -> bool:
        self._watching.__exit__(None, None, None)
        collector = _active
        if collector is not None:
            collector.tolerated.update(f.key for f in self._watch.tolerated)
            collector.unseen_failures()  # the body's own: this example's watch has them
        failure = _drawing_failure(self._drawn, exc) or _failure_of(self._watch, exc, collector)
        stopped = collector._stopped if collector is not None else None
        if failure is not None and stopped is not None and stopped[0] == "inconclusive":
            collector.failures[failure.key] += 1  # the body already said it cannot decide
            failure = None
        if failure is None:
            if collector is not None:
                collector.end(exc_type, exc)
            return False
        # Discard the example as inconclusive, with the failure as its reason. A rejection the
        # body made after the failure (e.g. "reject unless the SVM is optimal") was caused by
        # it: the instance may well meet the assumptions, so it is undecided, not rejected.
        if collector is not None and stopped is not None:
            collector.rejections[stopped[1]] -= 1
            collector.rejections += Counter()  # drop the count if it fell to zero
        if collector is not None:
            collector.failures[failure.key] += 1
            collector.inconclusive[failure.key] += 1
            collector._stopped = ("inconclusive", failure.key)
            collector.end(InconclusiveExample, None)
        if currently_in_test_context():
            hypothesis.note(f"inconclusive: {failure}")
            hypothesis.event(f"inconclusive: {failure.key}")
            hypothesis.reject()
        raise InconclusiveExample(str(failure)) from exc


def _drawing_failure(drawn: list[failures.Failure], exc) -> failures.Failure | None:
    """A failure while the example's arguments were drawn (a strategy that solves an SVM):
    the instance itself rests on a failed solve, so the example decides nothing."""
    if not drawn or (exc is not None and not isinstance(exc, Exception)):
        return None
    return _while_drawing(drawn[0])


def _while_drawing(failure: failures.Failure) -> failures.Failure:
    return failures.Failure(failure.source, f"{DRAWING} {failure.what}", failure.detail)


def _failure_of(watch, exc, collector) -> failures.Failure | None:
    """The machinery failure that decides an example, or None: a failure reported during it
    comes first, even before a rejection the body made after it (see example.__exit__)."""
    if exc is not None and not isinstance(exc, Exception):
        return None  # Ctrl-C and Hypothesis' own control flow pass through
    if watch.failures:
        return watch.failures[0]
    if exc is not None and isinstance(exc, REJECTIONS):
        return None  # a rejection with no failure before it stays a rejection
    if exc is not None:
        found = failures.from_exception(exc)
        if found is not None:
            return found
    # A failing example with a NaN or infinity in its evidence: the numerics broke, not the
    # claim. (A passing one may record an infinite value on purpose, e.g. "d needed = ∞".)
    broken = sorted(collector._nonfinite) if collector is not None and exc is not None else []
    if broken:
        return failures.Failure(failures.NUMERICS, "non-finite evidence", ", ".join(broken))
    return None


def current() -> Collector | None:
    return _active


# --------------------------------------------------------------------------- public calls


def instance(data: dict) -> None:
    """Record the current example's instance (JSON instance schema of `python -m theorems
    check`); the one recorded in the last failing example becomes the counterexample."""
    collector = _active
    if collector is None:
        return
    if not isinstance(data, dict):
        raise TypeError(f"evidence.instance() takes a dict, got {type(data).__name__}")
    collector._current = to_jsonable(data)


#: The fields that hold an instance's tokens, by kind of instance: X (prompt and cross
#: attention), an embedding's or an NTP instance's sequences (a tensor, or a tuple of token
#: tuples of different lengths) with the NTP embeddings, the linear NTP's contexts H.
_DATA_FIELDS = ("X", "sequences", "embeddings", "H")


def _same_data(a: Any, b: Any) -> bool:
    """Whether two instances of one kind hold the same tokens (every field of _DATA_FIELDS
    they have is equal, and they have at least one)."""
    if a is None or type(a) is not type(b):
        return False
    import torch

    compared = False
    for field in _DATA_FIELDS:
        x, y = getattr(a, field, None), getattr(b, field, None)
        if x is None or y is None:
            continue
        compared = True
        if isinstance(x, tuple | list) or isinstance(y, tuple | list):
            if x != y:
                return False
            continue
        try:
            if not (x.shape == y.shape and torch.equal(torch.as_tensor(x), torch.as_tensor(y))):
                return False
        except (TypeError, RuntimeError, AttributeError):
            return False
    return compared


def built(inst: Any) -> None:
    """An instance was built (strategies.instances announces each one): the current
    example's, if the example fails, its arguments hold no instance and its body built no
    other."""
    collector = _active
    if collector is not None:
        # the same data built again (a builder that refines its instance: alpha, p0, meta) is
        # the same instance; other data is another one
        same = _same_data(collector._built, inst)
        collector._built, collector._built_named = inst, False
        collector._built_count += 0 if same else 1


def each(instances: Iterable[Any]) -> Iterator[Any]:
    """The instances a claim body decides one after another (a paper's figure from each of
    its starts, an experiment over its settings): each is the example's instance while the
    body works on it, so a failure records the one that failed.

        for start in evidence.each(figure_starts(inst)):
            lim = flow(start.problem, start.p0)
            assert lim.converged_to(target), lim.why_not(target)
    """
    for inst in instances:
        collector = _active
        if collector is not None:
            collector._built, collector._built_named = inst, True
        yield inst


#: Why a tolerance is what it is: "derived" from the numerics, or "calibrated" on draws apart
#: from those the claim tests (the record says which, and what they showed).
BASES = ("derived", "calibrated")


class Tolerance(float):
    """A tolerance that carries the argument for its size (``tolerance(value, derivation)``, or
    ``calibrated(value, record)``).

    It is a float everywhere; ``slack`` reads its derivation, so the report can tell a bound
    derived from the numerics, or calibrated on separate draws, from one picked after seeing
    the data (``theorems tolerances``). Arithmetic on it gives a plain float: a bound computed
    from one passes ``derivation=``."""

    derivation: str = ""
    basis: str = "derived"

    def __new__(cls, value: float, derivation: str = "", basis: str = "derived"):
        obj = super().__new__(cls, value)
        obj.derivation, obj.basis = derivation, basis
        return obj

    def __reduce__(self):
        return (Tolerance, (float(self), self.derivation, self.basis))


def _tolerance(value: float, why: str, basis: str) -> Tolerance:
    value = float(value)
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"tolerance: expected a finite value ≥ 0, got {value!r}")
    if not isinstance(why, str) or not why.strip():
        raise ValueError("tolerance: the derivation must say why the value is what it is")
    return Tolerance(value, why.strip(), basis)


def tolerance(value: float, derivation: str) -> Tolerance:
    """A tolerance with its derivation: why the numerics guarantee that an error of a correct
    computation stays below ``value`` (rounding bounds, a certificate's accuracy, a rate)."""
    return _tolerance(value, derivation, "derived")


def calibrated(value: float, record: str) -> Tolerance:
    """A tolerance that no derivation reaches, calibrated instead on draws apart from those the
    claim tests: ``record`` names those draws, what they showed and the margin taken."""
    return _tolerance(value, record, "calibrated")


def slack(
    name: str,
    observed: float,
    bound: float,
    *,
    derivation: str | None = None,
    basis: str = "derived",
) -> None:
    """Record observed/bound; the worst (largest) ratio per name is kept. Under the nightly
    profile the ratio is also a Hypothesis target, so the search climbs toward violations.

    ``derivation`` (or a ``Tolerance`` bound's own) says why the bound is what it is, and
    ``basis`` whether it is derived or calibrated (BASES); a bound far above what it observes
    needs one (``python -m theorems tolerances``)."""
    collector = _active
    if collector is None:
        return
    if basis not in BASES:
        raise ValueError(f"slack: basis must be one of {BASES}, got {basis!r}")
    if derivation is None and getattr(bound, "derivation", None):
        derivation, basis = bound.derivation, bound.basis
    derivation = derivation or None
    observed, bound = float(observed), float(bound)
    if bound == 0.0:
        ratio = 1.0 if observed == 0.0 else math.copysign(math.inf, observed)
    else:
        ratio = observed / bound
    collector._nonfinite.update([name] * (not math.isfinite(ratio)))  # no failure-only branch
    worst = collector.worst_slack.get(name)
    if worst is None or _worse(ratio, worst["ratio"]):
        collector.worst_slack[name] = {
            "observed": observed,
            "bound": bound,
            "ratio": ratio,
            "derivation": derivation,
            "basis": basis if derivation else None,
        }

    if current_profile() == "nightly" and math.isfinite(ratio) and currently_in_test_context():
        # target() may be called once per label per example: keep the example's worst and
        # report it when the example ends.
        collector._targets[name] = max(ratio, collector._targets.get(name, -math.inf))


def metric(name: str, value: float) -> None:
    """Record a value; its min and max (and how many were seen) are kept per name."""
    collector = _active
    if collector is None:
        return
    value = float(value)
    collector._nonfinite.update([name] * (not math.isfinite(value)))  # no failure-only branch
    entry = collector.metrics.setdefault(name, {"min": value, "max": value, "count": 0})
    entry["count"] += 1
    if not math.isnan(value):
        entry["min"] = value if math.isnan(entry["min"]) else min(entry["min"], value)
        entry["max"] = value if math.isnan(entry["max"]) else max(entry["max"], value)


def premise(met: bool, what: str = "premise") -> bool:
    """Declare whether this example meets the claim's premise (the "if" of an implication
    checked only where it holds); returns ``met``. A claim whose premise held in fewer
    examples than its ``min_premise`` gets the verdict vacuous, never holds."""
    met = bool(met)
    collector = _active
    if collector is not None:
        collector._premise = met if collector._premise is None else (collector._premise and met)
    if currently_in_test_context():
        hypothesis.event(f"{what}: {'met' if met else 'not met'}")
    return met


def _stop(counter_name: str, prefix: str, reason: str, exc: type[RejectedExample]) -> NoReturn:
    collector = _active
    if collector is not None:
        getattr(collector, counter_name)[reason] += 1
        collector._stopped = (counter_name, reason)
    if currently_in_test_context():
        hypothesis.event(f"{prefix}: {reason}")
        hypothesis.reject()
    raise exc(reason)


def reject(reason: str) -> NoReturn:
    """The instance does not meet the claim's assumptions: reject it (counted by reason)."""
    _stop("rejections", "reject", reason, RejectedExample)


def inconclusive(reason: str) -> NoReturn:
    """The numerics could not decide this example: discard it (counted by reason). It never
    counts as support; too many of them make the claim's verdict inconclusive."""
    _stop("inconclusive", "inconclusive", reason, InconclusiveExample)


# --------------------------------------------------------------------------- numerics guards


def _first_line(text: Any) -> str:
    return str(text).strip().splitlines()[0] if str(text).strip() else ""


def solved(solution: Any, what: str = "SVM") -> Any:
    """Return a certified SVM solution (models.oracles.svm.SVMSolution with status "optimal").

    "infeasible" means the instance does not meet the claim's assumption (feasibility):
    reject it. "inaccurate" or "solver_error" means the numerics could not decide: the
    example is inconclusive (reason "<what>: solver <status>"; the solver's own message
    goes to a Hypothesis note). Never counts a failed solve as support.
    """
    status = getattr(solution, "status", None)
    if status == "optimal":
        return solution
    detail = _first_line(getattr(solution, "reason", ""))
    if currently_in_test_context() and detail:
        hypothesis.note(f"{what} {status}: {detail}")
    if status == "infeasible":
        reject(f"{what}: infeasible")
    inconclusive(f"{what}: solver {status}")


def converged(outcome: Any, what: str = "gradient flow") -> Any:
    """Return a models.flows.dynamics.Outcome that converged; an "infeasible" one is rejected
    (the selection's SVM has no solution), anything else is inconclusive with its status."""
    status = getattr(outcome, "status", None)
    if status == "converged":
        finite(what, getattr(outcome, "one_minus_cos", 0.0))
        return outcome
    detail = _first_line(getattr(outcome, "reason", ""))
    if currently_in_test_context() and detail:
        hypothesis.note(f"{what} {status}: {detail}")
    if status == "infeasible":
        reject(f"{what}: the selection's SVM is infeasible")
    inconclusive(f"{what}: {status}")


def finite(what: str, *values: Any) -> None:
    """Make the example inconclusive ("non-finite <what>") if any value (a number, an
    array, a tensor, a trajectory of them) holds a NaN or an infinity."""
    for value in values:
        if callable(getattr(value, "detach", None)):
            value = value.detach().cpu().numpy()
        try:
            import numpy as np

            ok = bool(np.all(np.isfinite(np.asarray(value, dtype=float))))
        except (TypeError, ValueError):
            ok = False  # not even a number
        if not ok:
            inconclusive(f"non-finite {what}")


def to_jsonable(obj: Any) -> Any:
    """Nested lists/dicts of JSON scalars; tensors and arrays via tolist(); non-finite floats
    as the strings "nan", "inf", "-inf" (strict JSON has no such numbers)."""
    if obj is None or isinstance(obj, (bool, str, int)):
        return obj
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else repr(obj)
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    if callable(getattr(obj, "detach", None)):  # torch tensor
        obj = obj.detach().cpu()
    if callable(getattr(obj, "tolist", None)):  # numpy array or scalar, torch tensor
        return to_jsonable(obj.tolist())
    return repr(obj)
