"""Counterexamples minimal in their sizes: n and T shrunk before values.

Hypothesis reports the counterexample its shrinker reached; the shrinker lowers values well
but sizes badly (lowering T moves every later draw). When a claim is refuted by an example
Hypothesis found (not by its saved counterexample, replayed), `reduce` decides the claim
again on the reductions of the example's one instance argument (strategies.reductions: an
input left out, a token left out of every input, each keeping the instance's premises) and,
greedily, keeps any that still refutes, until none does or MAX_TRIES bodies have run. The smaller
instance becomes the claim's counterexample: the one saved, replayed and shown, with
``reduced`` saying from which sizes it came. Each try runs the body under a collector of its
own, so its evidence stays out of the claim's.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

#: Set to 0 to keep Hypothesis' counterexample as it is.
SHRINK_ENV = "ATTN_SHRINK_SIZES"
#: At most this many bodies run per reduced counterexample. A count, not a time: a time
#: budget would make the saved counterexample depend on the machine's speed.
MAX_TRIES = 40


def enabled() -> bool:
    return os.environ.get(SHRINK_ENV, "").strip().lower() not in ("0", "false", "no", "off")


def _evidence():
    # imported on use: reports/build imports this module for `reduced_text` alone
    from theorems.framework import evidence

    return evidence


def _instance_argument(kwargs: dict, given: tuple[str, ...]) -> str | None:
    from theorems.framework.twins import strategy_arguments

    candidates = strategy_arguments(kwargs, given)
    if not candidates:
        return None
    from strategies.reductions import reducible

    found = [name for name in candidates if reducible(kwargs.get(name))]
    return found[0] if len(found) == 1 else None


def reduce(inner: Callable, args: tuple, kwargs: dict, given: tuple[str, ...]) -> dict | None:
    """The smallest refuting reduction of the example (see the module docstring), recorded in
    the claim's collector as its counterexample; returns the reduced arguments, or None when
    the example was kept as it is."""
    collector = _evidence().current()
    if collector is None or not enabled() or collector.counterexample_is_replay:
        return None
    name = _instance_argument(kwargs, given)
    if name is None:
        return None
    from strategies.reductions import reductions_of, sizes
    from theorems.framework.twins import decide

    start, current, steps = sizes(kwargs[name]), dict(kwargs), []
    tries, last_exc = 0, None
    progress = True
    while progress:
        progress = False
        for reduction in reductions_of(current[name]):
            if tries >= MAX_TRIES:
                break
            tries += 1
            trial = {**current, name: reduction.instance}
            got, exc = decide(inner, args, trial)
            collector.unseen_failures()  # the try's failures are not the next draw's
            if got == "refuted":
                current, last_exc, progress = trial, exc, True
                steps.append(reduction.what)
                break
    if not steps:
        collector.reduced = {"from": start, "to": start, "steps": [], "tries": tries}
        return None
    arguments = {k: current[k] for k in collector.counterexample_arguments or {} if k in current}
    replaced = collector.adopt_counterexample(arguments, last_exc)
    collector.reduced = {
        "from": start,
        "to": sizes(current[name]),
        "steps": steps,
        "tries": tries,
        "_replaced": replaced,
    }
    return current


def revert() -> None:
    """Give the claim back the counterexample ``reduce`` replaced (the reduced one turned
    out fragile on its twins, the original did not necessarily)."""
    collector = _evidence().current()
    record = collector.reduced if collector is not None else None
    if record and "_replaced" in record:
        collector.restore_counterexample(record["_replaced"])
        collector.reduced = {**record, "to": record["from"], "steps": [], "reverted": True}
        collector.reduced.pop("_replaced", None)


def reduced_text(record: dict[str, Any] | None) -> str | None:
    """e.g. "reduced from n = 3, T = 6 to n = 2, T = 3 (2 steps, 9 tries)"; None when the
    counterexample was not reduced."""
    if not record or not record.get("steps"):
        return None
    before, after = record["from"], record["to"]
    changed = [k for k in ("n", "T", "d") if before.get(k) != after.get(k)]

    def text(s: dict) -> str:
        return ", ".join(f"{k} = {s[k]}" for k in changed)

    steps, tries = len(record["steps"]), record["tries"]
    return (
        f"reduced from {text(before)} to {text(after)} "
        f"({steps} step{'s' * (steps != 1)}, {tries} tr{'ies' if tries != 1 else 'y'})"
    )
