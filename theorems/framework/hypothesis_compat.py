"""Everything the framework asks of Hypothesis beyond writing a property, in one place.

Public, documented interfaces, with one exception: a @given test's ``.hypothesis.inner_test``
(the function Hypothesis calls once per example, documented as reassignable for wrappers), the
``settings`` decorator, and (the exception, `key_by_node`) the private attribute
``_hypothesis_internal_add_digest`` that Hypothesis' own pytest plugin and HypoFuzz set to key a
test's saved examples by its pytest node id. Nothing here reads Hypothesis' printed text;
``tests/test_hypothesis_compat.py`` checks each function against the installed Hypothesis, so
an upstream change fails a named test rather than a verdict.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import Phase, settings
from hypothesis import seed as hypothesis_seed
from hypothesis.errors import InvalidArgument

__all__ = [
    "SettingsConflict",
    "inner_test",
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
