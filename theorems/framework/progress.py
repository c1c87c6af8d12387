"""What a claims run says while it runs: the plan at its start, a progress line for a claim
that runs long, and the evidence of each claim as it finishes.

The plugin (`theorems.framework.plugin`) decides where the lines go; this module says what
they are. Switches (docs/api.md, "What a run prints"):

- ATTN_PROGRESS=0 turns the progress lines off (they are on by default, and off under -qq);
- ATTN_PROGRESS_SECONDS (default 10) is how long a claim runs before its first progress line,
  and the time between two of them.
"""

from __future__ import annotations

import math
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

from hypothesis import settings

from theorems.framework import evidence
from theorems.framework.profiles import SEED_ENV, current_profile
from theorems.framework.session import truthy

PROGRESS_ENV = "ATTN_PROGRESS"
SECONDS_ENV = "ATTN_PROGRESS_SECONDS"
DEFAULT_SECONDS = 10.0
PREFIX = "attention-theorems:"


# --------------------------------------------------------------------------- switches


def enabled(verbose: int) -> bool:
    """Whether progress lines are printed: not with ATTN_PROGRESS=0 (or false/no/off), not
    under -qq (pytest verbosity -2 or less)."""
    value = os.environ.get(PROGRESS_ENV, "").strip()
    return (not value or truthy(value)) and verbose > -2  # unset: on


def interval() -> float:
    """Seconds between progress lines (ATTN_PROGRESS_SECONDS; a bad value: the default)."""
    try:
        seconds = float(os.environ.get(SECONDS_ENV, "") or DEFAULT_SECONDS)
    except ValueError:
        return DEFAULT_SECONDS
    return seconds if math.isfinite(seconds) and seconds > 0 else DEFAULT_SECONDS


# --------------------------------------------------------------------------- the plan


def _count(n: int) -> str:
    """An integer with a space between thousands (14 300), as the issue writes it."""
    return f"{n:,}".replace(",", " ")


def profile_text() -> str:
    """The Hypothesis profile in use, and how its draws are seeded."""
    profile = current_profile()
    if settings.default.derandomize:
        return f"profile {profile} (derandomized)"
    seed = os.environ.get(SEED_ENV, "").strip()
    if seed:
        return f"profile {profile}, seed {seed} ({SEED_ENV})"
    return f"profile {profile}, random draws (no {SEED_ENV})"


def plan(items: Iterable[tuple[str, int]]) -> dict[str, Any]:
    """From (claim id, examples) per collected claim item: the claims, the items, the
    examples in all, and each claim's budget (its items' examples summed)."""
    per_claim: dict[str, int] = {}
    count = 0
    for claim_id, examples in items:
        per_claim[claim_id] = per_claim.get(claim_id, 0) + examples
        count += 1
    return {"claims": len(per_claim), "items": count, "budgets": sorted(per_claim.values())}


def plan_text(found: dict[str, Any]) -> str:
    """e.g. "208 claims, 14 300 examples in all; budgets 1–300, median 20"."""
    budgets = found["budgets"]
    claims, items = found["claims"], found["items"]
    text = f"{claims} claim{'' if claims == 1 else 's'}"
    if items != claims:
        text += f" ({items} items)"
    if not budgets:
        return text
    low, high, median = budgets[0], budgets[-1], statistics.median(budgets)
    median_text = f"{median:g}"
    spread = f"budget {low}" if low == high else f"budgets {low}–{high}, median {median_text}"
    return f"{text}, {_count(sum(budgets))} examples in all; {spread}"


def gate_text(on: bool, off_why: str, lock_path: str, lock: Any, lock_error: str | None) -> str:
    """Whether the verdict gate is on, and which lock it checks."""
    if not on:
        return f"gate off ({off_why}); the lock {lock_path} is not checked"
    if off_why:  # asked off where it cannot be (under CI)
        return gate_text(True, "", lock_path, lock, lock_error) + f" ({off_why})"
    if lock_error:
        return f"gate on, lock {lock_path}: malformed (the end of the run says how)"
    if lock is None:
        return f"gate on, but there is no lock at {lock_path}"
    pinned = len(getattr(lock, "entries", {}))
    made = f", made under profile {lock.profile}" if getattr(lock, "profile", None) else ""
    return f"gate on, lock {lock_path} ({pinned} claims pinned{made})"


# --------------------------------------------------------------------------- one claim


def seconds_text(seconds: float) -> str:
    """0.04 s, 2.5 s, 61 s."""
    if seconds < 1:
        return f"{seconds:.2f} s"
    return f"{seconds:.1f} s" if seconds < 10 else f"{seconds:.0f} s"


def worst_slack(slacks: dict[str, dict[str, float]]) -> str | None:
    """The worst (largest) observed/bound ratio over a claim's slacks, with its name, e.g.
    "0.031 (descent)"; NaN counts as the worst, as in evidence.slack. None without slacks."""
    worst: tuple[str, float] | None = None
    for name, entry in sorted(slacks.items()):
        ratio = float(entry["ratio"])
        if worst is None or (math.isnan(ratio) and not math.isnan(worst[1])) or ratio > worst[1]:
            worst = (name, ratio)
    if worst is None:
        return None
    return f"{worst[1]:.3g} ({worst[0]})"


def examples_text(examples: int, tried: int) -> str:
    """Example bodies that completed, and every one that ran when some did not complete
    (rejected, inconclusive, raised)."""
    text = f"{examples} example{'' if examples == 1 else 's'}"
    return text if tried == examples else f"{text} of {tried} tried"


def evidence_props(collector: evidence.Collector) -> list[tuple[str, Any]]:
    """What the closing line of a claim item shows, as pytest user properties (they travel
    from an xdist worker to the controller with the report, and into JUnit XML)."""
    props: list[tuple[str, Any]] = [
        ("examples", collector.examples),
        ("tried", collector.tried),
        ("seconds", round(collector.seconds, 3)),
    ]
    slack = worst_slack(collector.worst_slack)
    if slack is not None:
        props.append(("worst_slack", slack))
    return props


def evidence_text(props: dict[str, Any]) -> str:
    """e.g. "20 examples, worst slack 0.031 (descent), 61 s"; "" without the evidence."""
    if "examples" not in props:
        return ""  # the item did not run its body (a setup error)
    parts = [examples_text(props["examples"], props.get("tried", props["examples"]))]
    if props.get("worst_slack"):
        parts.append(f"worst slack {props['worst_slack']}")
    parts.append(seconds_text(float(props.get("seconds", 0.0))))
    return ", ".join(parts)


class Ticker:
    """Says every `every` seconds that a claim is still running, at example boundaries.

    No thread: the clock is read when an example ends (TimedCollector.end), so a line comes
    at the first boundary at least `every` seconds after the claim started or after the last
    line. A single example longer than that is reported only when it ends (and the drawing
    of an example, or Hypothesis' own work between examples, only at the next boundary)."""

    def __init__(
        self,
        claim_id: str,
        budget: int,
        emit: Callable[[str], Any],
        every: float,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.claim_id, self.budget, self.emit = claim_id, budget, emit
        self.every, self.clock = every, clock
        self.start = self.last = clock()
        self.lines = 0

    def __call__(self, collector: evidence.Collector) -> None:
        now = self.clock()
        if now - self.last < self.every:
            return
        self.last = now
        self.lines += 1
        done = examples_text(collector.examples, collector.tried)
        self.emit(
            f"{PREFIX} … {self.claim_id}: {done} (budget {self.budget}), "
            f"{seconds_text(now - self.start)}"
        )


class TimedCollector(evidence.Collector):
    """An evidence.Collector that calls `ticker(self)` after each example it counts (the
    registry's per-example wrapper ends every example body through `end`). The ticker must
    not raise: a progress line never changes a claim's evidence."""

    def __init__(self, ticker: Callable[[evidence.Collector], Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.ticker = ticker

    def end(self, exc_type: type[BaseException] | None, exc: BaseException | None = None) -> None:
        super().end(exc_type, exc)
        try:
            self.ticker(self)
        except Exception:  # a broken terminal must not touch the evidence
            pass


# --------------------------------------------------------------------------- `check`

#: `check` warns before an instance whose SVM has this many (constraints × dimensions) or
#: more: a prompt instance of n = 200, T = 50, d = 50 (490 000) took minutes on 2 cores.
LONG_CHECK_WORK = 100_000


def check_work(model: str, fields: dict) -> tuple[str, int]:
    """The sizes of a `check` instance as text, and its work measure: SVM constraints ×
    dimensions (prompt: n(T − 1)·d; cross: n(T − 1)·d², the entries of W; embedding:
    n·T·d)."""
    import numpy as np

    if model == "ntp":
        K, d = np.shape(fields["embeddings"])
        n = len(fields["sequences"])
        return f"K = {K}, n = {n}, d = {d}", sum(len(s) for s in fields["sequences"]) * d * d
    if model == "ntp-linear":
        d, m = np.shape(fields["H"])
        V = np.shape(fields["P"])[1]
        return f"d = {d}, m = {m}, V = {V}", m * V * V * d
    if model == "embedding":
        n, T = np.shape(fields["sequences"])[:2]
        d = np.shape(fields["E0"])[1]
        return f"n = {n}, T = {T}, d = {d}", n * T * d
    n, T, d = np.shape(fields["X"])[:3]
    dims = d * d if model == "cross" else d
    return f"n = {n}, T = {T}, d = {d}", n * max(T - 1, 1) * dims


class Heartbeat:
    """What a long computation is doing, said on ``stream`` while it runs: every
    ``interval()`` seconds the current stage and the time so far. Short runs stay silent:
    stages are printed only once the first beat has fired, or from the start when ``loud``
    (an instance large enough that `check` warned about it)."""

    def __init__(self, label: str, *, loud: bool = False, stream=None, every: float | None = None):
        self.label, self.loud = label, loud
        self.stream = stream if stream is not None else sys.stderr
        self.every = every if every is not None else interval()
        self.current = "starting"
        self._t0 = time.perf_counter()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._spoke = False

    def _say(self, text: str) -> None:
        print(f"{self.label}: {text}", file=self.stream, flush=True)
        self._spoke = True

    def stage(self, text: str) -> None:
        self.current = text
        if self.loud or self._spoke:
            self._say(f"{text} ({seconds_text(time.perf_counter() - self._t0)} so far)")

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self._say(f"still {self.current}: {seconds_text(time.perf_counter() - self._t0)}")

    def __enter__(self) -> Heartbeat:
        self._thread = threading.Thread(target=self._run, name="check-heartbeat", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self._spoke:
            self._say(f"done in {seconds_text(time.perf_counter() - self._t0)}")
