"""Caches and fixtures of the unit tests that stay honest under mutmut.

mutmut (``[tool.mutmut]`` in pyproject.toml) runs each mutant only against the tests it saw
call the mutated function in its stats run, and forks each mutant's run from a process where
the test modules are already imported. So a test that reads what another test computed (a
module-level cache, a module-scoped fixture) calls nothing of models/ and is never run against
a mutant of it, and a cache filled by the clean run hands every test the unmutated results.
mutmut sets MUTANT_UNDER_TEST to a name in its stats and mutant runs and to "" in its clean
run; under it these helpers compute everything in every test.
"""

from __future__ import annotations

import json
import os


def under_mutmut() -> bool:
    return bool(os.environ.get("MUTANT_UNDER_TEST"))


def cache_key(*parts) -> str | None:
    """A cache key of these parts, or None under mutmut: no cache there.

    mutmut runs each mutant only against the tests it saw call the mutated function in its
    stats run, and forks each mutant's run after the clean one. A test that read an answer
    another test had cached called nothing, so it was never run against a mutant of the
    answer builders (in a seeded sample, a status "ok" → "OK" of models/ntp/predict.py survived
    test_check_fields); and a cache filled by the clean run gave every test the unmutated
    answers (17 of 17 sampled mutants of models/check/joint_predict.py survived). mutmut sets
    MUTANT_UNDER_TEST to a name in its stats and mutant runs, to "" in the clean one."""
    if under_mutmut():
        return None
    return json.dumps(list(parts), sort_keys=True)


def cached(key: str | None, compute, cache: dict):
    """``cache[key]``, computed by ``compute()`` the first time, and every time when ``key`` is
    None."""
    if key is None:
        return compute()
    if key not in cache:
        cache[key] = compute()
    return cache[key]


def per_mutant_scope(fixture_name: str, config) -> str:
    """A fixture's scope: "module" (computed once per test module), "function" under mutmut."""
    return "function" if under_mutmut() else "module"


def mutmut_trampoline_file() -> str | None:
    """The file of mutmut's trampoline, whose frame sits between a test and every function of
    mutmut's copy of models/ (None where mutmut is not installed)."""
    try:
        from mutmut.mutation import trampoline
    except ImportError:
        return None
    return trampoline.__file__
