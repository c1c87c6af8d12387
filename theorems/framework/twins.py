"""Metamorphic twins in the framework: an example decided again on the twins of its instance.

A twin (``strategies.twins``) is the same mathematical instance in other coordinates or
another order: a permutation of the inputs or of the tokens, a sign flip of labels and
tokens, a rotation of the embedding space that fixes v. Where the theory decides a claim,
the claim's body must reach the same conclusion on every twin; a conclusion that flips
hinged on rounding or on an index convention, and is no verdict.

``ATTN_TWINS=K`` (default 0, off): the first K examples of every claim that end decided (the
saved counterexample first, since Hypothesis replays it first) are run again, body and all,
on each twin of their one instance argument, with the evidence of the twin runs kept apart.
An example that holds on one side and is refuted on the other is a disagreement: the
claim's verdict is ``error``, naming the twin (``verdicts.judge``). An example left
undecided on either side (inconclusive, rejected) is no evidence either way, and so is a
twin the body cannot use (an exception other than an assertion: a meta entry the twin had
to drop, say); both are counted.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from theorems.framework import evidence

TWINS_ENV = "ATTN_TWINS"


def budget() -> int:
    """How many examples of each claim are decided again on their twins (ATTN_TWINS)."""
    text = os.environ.get(TWINS_ENV, "").strip() or "0"
    try:
        k = int(text)
    except ValueError:
        raise ValueError(f"{TWINS_ENV}={text!r} is not a number of examples") from None
    if k < 0:
        raise ValueError(f"{TWINS_ENV}={text!r}: expected 0 or more examples")
    return k


def outcome(exc: BaseException | None) -> str:
    """holds, refuted (an assertion failed), undecided (inconclusive or rejected) or error."""
    if exc is None:
        return "holds"
    if isinstance(exc, AssertionError):
        return "refuted"
    if isinstance(exc, evidence.REJECTIONS):
        return "undecided"
    return "error"


def validate(names) -> tuple[str, ...] | None:
    """A claim's ``twins=``: None (every twin of its instance family), or the names of the
    twins under which its statement is invariant (``strategies.twins``: REORDERINGS, SIGNED,
    ALL_TWINS); ValueError naming an unknown one."""
    if names is None:
        return None
    from strategies.twins import ALL_TWINS

    names = (names,) if isinstance(names, str) else tuple(names)
    unknown = sorted(set(names) - set(ALL_TWINS))
    if unknown:
        raise ValueError(f"twins: unknown twin(s) {unknown}; known: {', '.join(ALL_TWINS)}")
    return names


def strategy_arguments(kwargs: dict, given: tuple[str, ...]) -> list[str]:
    """The @given arguments whose value is (a subclass of) a class of the package
    ``strategies``: only those can have twins or reductions. Looking at the classes' modules
    first spares a claim over plain values (a researcher's integers, the framework's own test
    claims) the import of ``strategies`` (torch, cvxpy: about 3 s per process)."""
    return [
        name
        for name in given
        if any(c.__module__.startswith("strategies.") for c in type(kwargs.get(name)).__mro__)
    ]


def _instance_argument(kwargs: dict, given: tuple[str, ...]) -> tuple[str, list] | None:
    """The one @given argument that has twins, with them; None if there is not exactly one."""
    candidates = strategy_arguments(kwargs, given)
    if not candidates:
        return None
    from strategies.twins import TWINS, twins_of

    found = [
        name
        for name in candidates
        if any(isinstance(kwargs.get(name), cls) for cls in TWINS)  # the known families
    ]
    if len(found) != 1:
        return None
    return found[0], twins_of(kwargs[found[0]])


def recheck(
    inner: Callable,
    args: tuple,
    kwargs: dict,
    given: tuple[str, ...],
    exc: BaseException | None,
    allowed: tuple[str, ...] | None = None,
) -> None:
    """Decide the example again on each twin of its instance that the claim allows (None:
    all; see the module docstring) and record what was run and any disagreement in the
    claim's collector."""
    collector = evidence.current()
    if collector is None or collector.twins_checked >= budget() or allowed == ():
        return
    original = outcome(exc)
    if original not in ("holds", "refuted"):
        return
    try:
        found = _instance_argument(kwargs, given)
    except Exception as err:  # noqa: BLE001 - a twin that cannot be built is no evidence
        collector.twins_run[f"not built: {type(err).__name__}: {err}"[:120]] += 1
        return
    if found is None:
        return
    collector.twins_checked += 1
    name, twins = found
    for twin, got in _outcomes(collector, inner, args, kwargs, name, twins, allowed):
        collector.twins_run[f"{twin.name}: {got}"] += 1
        if got in ("holds", "refuted") and got != original:
            collector.twin_disagreements.append(
                f"metamorphic twin {twin.name!r} of {name} disagrees: the claim {original} on "
                f"the instance and is {got} on its twin" + (f" ({twin.note})" if twin.note else "")
            )


def robustness(
    inner: Callable,
    args: tuple,
    kwargs: dict,
    given: tuple[str, ...],
    allowed: tuple[str, ...] | None = None,
) -> None:
    """Decide the counterexample Hypothesis reports again on every twin the claim allows, and
    record the outcomes in the claim's collector (``robustness``; the last reported example's
    record stands).

    A twin is the same instance in other coordinates or another order, so each twin replays
    the counterexample under another rounding of every quantity (a rotation perturbs every
    coordinate at the level of float64's epsilon) while keeping every premise exactly. A
    counterexample that holds on a twin refutes only under some rounding: it is *fragile*,
    and `verdicts.judge` makes the claim inconclusive, never refuted, whatever ATTN_TWINS.

    That reading needs the statement to be invariant under the twin. A claim that declares
    its twins (``twins=``) says so; one that does not (a researcher's conjecture about "the
    first token", say) is taken to be invariant only under a change of the embedding's
    coordinates (``COORDINATE_CHANGES``): holding on another twin is then recorded apart
    (``undeclared_holds``), not called fragile, since it may be the statement that moved."""
    collector = evidence.current()
    if collector is None or allowed == ():
        return
    record: dict[str, Any] = {"twins": {}, "holds_on": [], "undeclared_holds": []}
    try:
        found = _instance_argument(kwargs, given)
    except Exception as err:  # noqa: BLE001 - a twin that cannot be built is no evidence
        record["twins"][f"not built: {type(err).__name__}: {err}"[:120]] = "undecided"
        found = None
    if found is not None:
        name, twins = found
        for twin, got in _outcomes(collector, inner, args, kwargs, name, twins, allowed):
            record["twins"][twin.name] = got
            if got == "holds":
                from strategies.twins import COORDINATE_CHANGES

                named = twin.name + (f" ({twin.note})" if twin.note else "")
                declared = allowed is not None or twin.name in COORDINATE_CHANGES
                record["holds_on" if declared else "undeclared_holds"].append(named)
    collector.robustness = record


def _outcomes(collector, inner, args, kwargs, name, twins, allowed):
    """(twin, outcome) for each twin the claim allows (None: all), the body run on it in
    place of the argument ``name``."""
    for twin in twins:
        if allowed is not None and twin.name not in allowed:
            continue
        got, _ = decide(inner, args, {**kwargs, name: twin.instance})
        # The twin's machinery failures reached the claim's watch of the whole call too: they
        # are not failures of the next example's drawing.
        collector.unseen_failures()
        yield twin, got


def decide(inner: Callable, args: tuple, kwargs: dict[str, Any]) -> tuple[str, Exception | None]:
    """Run the body on other arguments (a twin, a smaller instance: theorems.framework.shrink)
    under a collector of its own, so that its evidence, slacks and Hypothesis targets stay out
    of the claim's: (outcome, the exception it raised)."""
    scratch = evidence.Collector(targets=False)
    with evidence.collecting(scratch):
        try:
            with evidence.example():
                inner(*args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - any failure of the body is classified
            return outcome(exc), exc  # rejections (Hypothesis' and ours) are Exceptions too
    return "holds", None
