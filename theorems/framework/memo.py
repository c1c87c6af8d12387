"""``shared``: a run cached once per process, whatever the shape of the call.

Several claims (and the report's figures) read the same expensive run: a training, a GD
batch. ``functools.cache`` keys on the call as written, so ``g3_run("two", 0)`` and
``g3_run("two", 0, False)`` (the default passed, or an argument given by keyword) are two
entries and the run is computed twice; measured: the two-layer G3 runs were trained once for
the claims and again for their figure (24 s). ``shared`` binds the arguments to the
signature and applies the defaults first, so every call that means the same run is one entry.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])

#: Every ``shared`` function, for ``clear_all``.
_SHARED: list[Callable[..., Any]] = []


def clear_all() -> None:
    """Empty every ``shared`` cache (the unit tests do, before each test, under mutmut:
    tests/conftest.py)."""
    for fn in _SHARED:
        fn.cache_clear()  # type: ignore[attr-defined]


def shared(fn: F) -> F:
    """``functools.cache`` keyed on the bound arguments with their defaults applied (every
    argument must be hashable); ``cache_clear`` empties it."""
    signature = inspect.signature(fn)

    @functools.cache
    def keyed(*args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        return keyed(*bound.args, **bound.kwargs)

    wrapper.cache_clear = keyed.cache_clear  # type: ignore[attr-defined]
    wrapper.cache_info = keyed.cache_info  # type: ignore[attr-defined]
    _SHARED.append(wrapper)
    return wrapper  # type: ignore[return-value]
