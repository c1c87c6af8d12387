"""Machinery failures: how the mathematics says "I could not decide this", in one place.

An oracle that could not certify its answer, a tracer that stopped undecided, a non-finite
number, an exception from a numerical library: none of these is a fact about the claim being
checked, so none may ever count as a counterexample. The code that notices such a failure
calls ``report(source, reason)``; whoever runs an example (the claims framework) opens
``watch()`` around it and, if anything was reported, discards the example as inconclusive,
whatever the example's body did next. Outside a ``watch()`` a report goes nowhere, so the
mathematics runs the same in a unit test, the CLI or a notebook.

This module knows nothing of pytest or Hypothesis (models/ never imports them).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

__all__ = [
    "Failure",
    "Watch",
    "from_exception",
    "report",
    "tolerate",
    "watch",
]

#: The sources of failures, as reported (a claim may tolerate some of them by name).
SVM_ORACLE = "SVM oracle"
GRADIENT_FLOW = "gradient flow"
REG_PATH = "regularization path"
NUMERICS = "numerics"
SOLVER_EXCEPTION = "solver exception"
MEMORY = "memory"
SOURCES: tuple[str, ...] = (SVM_ORACLE, GRADIENT_FLOW, REG_PATH, NUMERICS, SOLVER_EXCEPTION, MEMORY)

#: How torch says that an allocation failed (CPU allocator; CUDA's is torch.OutOfMemoryError,
#: a RuntimeError whose text starts "CUDA out of memory").
_TORCH_OUT_OF_MEMORY = ("can't allocate memory", "out of memory")

# Numerical libraries whose exceptions are failures of the machinery, not of a claim.
_LIBRARIES = ("cvxpy", "scipy", "clarabel", "scs", "osqp", "ecos", "highspy")


@dataclass(frozen=True)
class Failure:
    """``what`` is short and stable (it names a class of failures in reports); ``detail``
    carries the numbers of this one."""

    source: str
    what: str
    detail: str = ""

    @property
    def key(self) -> str:
        return f"{self.source}: {self.what}"

    def __str__(self) -> str:
        return f"{self.key} ({self.detail})" if self.detail else self.key


@dataclass(eq=False)  # identity: nested watches must never be mistaken for one another
class Watch:
    """What was reported while one ``watch()`` was open."""

    failures: list[Failure] = field(default_factory=list)
    tolerated: list[Failure] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.failures)

    @property
    def first(self) -> Failure | None:
        return self.failures[0] if self.failures else None


_watches: list[Watch] = []
_tolerated: list[frozenset[str]] = []


def report(source: str, what: str, detail: str = "") -> None:
    """Record a failure of the machinery with every open ``watch()`` (none: a no-op).

    ``source`` is one of SOURCES and ``what`` a non-empty string, checked on every call, watched
    or not: a report is how an example becomes inconclusive, and a malformed one would name
    no reason (or a source no claim can tolerate) only where a claim happens to watch it."""
    if source not in SOURCES:
        raise ValueError(f"source: expected one of {SOURCES}, got {source!r}")
    if not isinstance(what, str) or not what.strip():
        raise ValueError(f"what: a failure needs its reason, got {what!r}")
    if not _watches:
        return
    failure = Failure(str(source), str(what), " ".join(str(detail).split()))
    tolerated = any(failure.source in sources for sources in _tolerated)
    for w in _watches:
        (w.tolerated if tolerated else w.failures).append(failure)


@contextlib.contextmanager
def watch() -> Iterator[Watch]:
    """Collect the failures reported while the block runs (nested watches all see them)."""
    w = Watch()
    _watches.append(w)
    try:
        yield w
    finally:
        _watches.remove(w)


@contextlib.contextmanager
def tolerate(*sources: str) -> Iterator[None]:
    """Inside the block, failures from these sources are part of what is being checked (a
    claim whose statement is "the engine converges or says it cannot decide"): they are kept
    as tolerated, not as failures. Failures from any other source still count."""
    unknown = set(sources) - {
        SVM_ORACLE, GRADIENT_FLOW, REG_PATH, NUMERICS, SOLVER_EXCEPTION, MEMORY
    }  # fmt: skip
    if unknown:
        raise ValueError(f"tolerate: unknown failure sources {sorted(unknown)}")
    _tolerated.append(frozenset(sources))
    try:
        yield
    finally:
        _tolerated.pop()


def _library_of(path: str) -> str | None:
    parts = Path(path).parts
    for i, part in enumerate(parts[:-1]):
        if part in ("site-packages", "dist-packages") and parts[i + 1].split(".")[0] in _LIBRARIES:
            return parts[i + 1].split(".")[0]
    return None


def from_exception(exc: BaseException) -> Failure | None:
    """A Failure if ``exc`` came from a numerical library (its class is defined there, or it
    was raised from inside one, e.g. scipy's RuntimeError on an iteration limit), or is a
    linear-algebra error; None for anything else (an AssertionError of a claim, a bug)."""
    if isinstance(exc, AssertionError):
        return None
    cls = type(exc)
    module = (cls.__module__ or "").split(".")[0]
    text = str(exc).strip()
    detail = text.splitlines()[0] if text else ""
    # An allocation the memory cap refused (theorems.framework.plugin, ATTN_MEMORY_LIMIT):
    # numpy and Python raise MemoryError, torch's CPU allocator a RuntimeError saying so.
    if isinstance(exc, MemoryError) or (
        isinstance(exc, RuntimeError) and any(m in text for m in _TORCH_OUT_OF_MEMORY)
    ):
        return Failure(MEMORY, "out of memory", detail[:200])
    if module in _LIBRARIES or cls.__name__ == "LinAlgError":
        return Failure(SOLVER_EXCEPTION, cls.__name__, detail)
    tb = exc.__traceback__
    last = None
    while tb is not None:
        last = tb
        tb = tb.tb_next
    library = _library_of(last.tb_frame.f_code.co_filename) if last is not None else None
    if library is not None:
        return Failure(SOLVER_EXCEPTION, f"{cls.__name__} in {library}", detail)
    return None
