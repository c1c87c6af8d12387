"""Everything the framework asks of Hypothesis beyond writing a property, in one place.

Public, documented interfaces, with two exceptions: a @given test's ``.hypothesis.inner_test``
(the function Hypothesis calls once per example, documented as reassignable for wrappers), the
``settings`` decorator, and (the exceptions) the private attribute
``_hypothesis_internal_add_digest`` that Hypothesis' own pytest plugin and HypoFuzz set to key a
test's saved examples by its pytest node id (`key_by_node`), and the standard provider's
``_local_constants``, the pool of literals Hypothesis harvests from the suite's own modules
(`ignore_local_constants`, applied when this module is imported), and the build context's
``is_final`` (`is_final_example`: the example Hypothesis reports). Nothing here reads
Hypothesis' printed text; ``tests/test_hypothesis_compat.py`` checks each function against the
installed Hypothesis, so an upstream change fails a named test rather than a verdict.
"""

from __future__ import annotations

import importlib.util
import warnings
from collections.abc import Callable
from functools import cached_property

from hypothesis import Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import InvalidArgument

__all__ = [
    "HARVESTS_LOCAL_LITERALS",
    "LocalLiteralsWarning",
    "SettingsConflict",
    "ignore_local_constants",
    "inner_test",
    "is_final_example",
    "is_hypothesis_test",
    "key_by_node",
    "set_inner_test",
    "with_budget",
]


class SettingsConflict(ValueError):
    """The test already carries its own @settings, so the framework cannot set its budget."""


def is_hypothesis_test(fn: Callable) -> bool:
    """Whether ``fn`` is a Hypothesis property (decorated with @given)."""
    return callable(getattr(getattr(fn, "hypothesis", None), "inner_test", None))


def inner_test(fn: Callable) -> Callable:
    """The function Hypothesis calls once per example (the user's body, with its arguments)."""
    return fn.hypothesis.inner_test


def set_inner_test(fn: Callable, new: Callable) -> None:
    """Wrap the per-example call (Hypothesis documents ``inner_test`` as reassignable)."""
    fn.hypothesis.inner_test = new


def is_final_example() -> bool:
    """Whether the example running now is one Hypothesis reports: an explicit @example (the
    saved counterexample, replayed) or the shrunk failing example, run once more at the end.

    The third internal: ``current_build_context().is_final``, the flag by which Hypothesis'
    own ``note()`` decides what to print. Where it is missing (a future Hypothesis), every
    example counts as final: the framework then checks more examples, never fewer."""
    from hypothesis.control import current_build_context

    try:
        context = current_build_context()
    except InvalidArgument:  # not inside a Hypothesis test
        return False
    return bool(getattr(context, "is_final", True))


def with_budget(fn: Callable, max_examples: int, seed: int | None = None) -> Callable:
    """``fn`` under the active profile's settings with ``max_examples`` examples and without
    Hypothesis' explain phase: it re-runs the dynamics of a failing example for most of a
    minute to annotate source lines, and the framework builds its counterexample from the
    arguments it recorded, not from Hypothesis' text.

    ``seed``: start the (non-derandomized) search from this seed (Hypothesis' @seed).

    SettingsConflict if ``fn`` already has @settings (Hypothesis allows one per test)."""
    phases = tuple(p for p in settings.default.phases if p is not Phase.explain)
    try:
        fn = settings(max_examples=max_examples, phases=phases)(fn)
    except InvalidArgument as exc:
        raise SettingsConflict(
            "the claim has its own @settings; the framework sets each claim's example budget "
            "from the profile (ATTN_HYPOTHESIS_PROFILE): remove @settings from the claim "
            f"({exc})"
        ) from None
    return fn if seed is None else hypothesis_seed(seed)(fn)


# The one private attribute (see the module docstring). Hypothesis' pytest plugin sets it on
# parametrized tests only; HypoFuzz (hypofuzz.collection) sets it on every test it fuzzes.
_ADD_DIGEST = "_hypothesis_internal_add_digest"


def key_by_node(fn: Callable, nodeid: str) -> None:
    """Key ``fn``'s examples in the example database by its pytest node id, as HypoFuzz keys
    every test it fuzzes. Without it, what HypoFuzz saves for a test that is not parametrized
    sits under a key that pytest never reads. The key also seeds a derandomized search, so
    the framework calls this only where the profile is not derandomized (the ci verdicts and
    the lock are not moved)."""
    setattr(inner_test(fn), _ADD_DIGEST, nodeid.encode())


# The second private attribute. Hypothesis' standard provider (HypothesisProvider, the one
# behind backend="hypothesis", and the one its engine and its data tree call directly to pick
# novel prefixes, replay, shrink and explain) offers, at 5 % of the numbers and strings it
# draws, a constant from a pool: Hypothesis' own (0.5, 1/3, 1e308, ...: kept) and the literals
# of every *local* module in sys.modules (the suite's models/, strategies/, theorems/). The
# provider reads the second through the cached property `_local_constants`; an empty one
# leaves the draws a function of the test's source and seed alone, so that a literal added
# anywhere in the suite moves no claim's draws. Hypothesis before the harvest (the floor,
# 6.119.4, has no hypothesis.internal.constants_ast) needs nothing.
_LOCAL_CONSTANTS = "_local_constants"
#: Whether this Hypothesis harvests literals from local modules at all.
HARVESTS_LOCAL_LITERALS = importlib.util.find_spec("hypothesis.internal.constants_ast") is not None


class LocalLiteralsWarning(UserWarning):
    """This Hypothesis harvests local literals in a way the adapter cannot switch off."""


def _no_local_constants(self):
    return _NO_CONSTANTS


def _installed(descriptor: object) -> bool:
    """Whether `descriptor` is ours (from this import of the module or an earlier one)."""
    return hasattr(getattr(descriptor, "fget", None), "harvesting")


_providers = None
_CURRENT = None
if HARVESTS_LOCAL_LITERALS:
    from hypothesis.internal.constants_ast import Constants

    _NO_CONSTANTS = Constants()
    try:
        from hypothesis.internal.conjecture import providers as _providers
    except ImportError:  # moved: ignore_local_constants warns
        pass
    else:
        _CURRENT = _providers.HypothesisProvider.__dict__.get(_LOCAL_CONSTANTS)
#: Hypothesis' own descriptor, which harvests the literals (what the tests compare with).
_HARVESTING = _CURRENT.fget.harvesting if _installed(_CURRENT) else _CURRENT
_no_local_constants.harvesting = _HARVESTING  # type: ignore[attr-defined]
_IGNORING = property(_no_local_constants)


def ignore_local_constants() -> bool:
    """Make Hypothesis draw without the literals of the suite's own modules (process-wide:
    every profile, every phase); idempotent. True if they are now off (or this Hypothesis
    never harvests them); False, after a LocalLiteralsWarning that names this adapter, if
    this Hypothesis harvests them in a way it does not know (update it, see above)."""
    if not HARVESTS_LOCAL_LITERALS:
        return True
    provider = getattr(_providers, "HypothesisProvider", None)
    if not _installed(getattr(provider, "__dict__", {}).get(_LOCAL_CONSTANTS)):
        cache = getattr(_providers, "CONSTANTS_CACHE", None)
        if not isinstance(_HARVESTING, cached_property) or cache is None:
            warnings.warn(
                "attention-theorems: this Hypothesis has no HypothesisProvider."
                f"{_LOCAL_CONSTANTS} cached property, so the literals of the suite's modules "
                "still steer its draws (a new literal anywhere moves every claim's draws); "
                "update ignore_local_constants in theorems/framework/hypothesis_compat.py",
                LocalLiteralsWarning,
                stacklevel=2,
            )
            return False
        setattr(provider, _LOCAL_CONSTANTS, _IGNORING)
    # The permitted constants are cached per (choice type, constraints), for every provider at
    # once: forget any entry computed with local literals before this call.
    _providers.CONSTANTS_CACHE.cache.clear()
    return True


# At import: the claims plugin and the registry import this module before any test runs, so
# every Hypothesis test of a run (claims and unit tests, every profile) draws without them.
ignore_local_constants()
