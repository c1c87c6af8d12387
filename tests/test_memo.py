"""theorems.framework.memo.shared: one cache entry per run, whatever the shape of the call."""

from __future__ import annotations

import functools

from theorems.framework.memo import shared


def counted(decorator):
    calls = []

    @decorator
    def run(kind: str, seed: int, spec_sizes: bool = False) -> tuple:
        calls.append((kind, seed, spec_sizes))
        return (kind, seed, spec_sizes)

    return run, calls


def test_every_call_that_means_the_same_run_computes_it_once():
    run, calls = counted(shared)
    same = [run("two", 0), run("two", 0, False), run("two", seed=0), run(kind="two", seed=0,
            spec_sizes=False)]  # fmt: skip
    assert same == [("two", 0, False)] * 4
    assert calls == [("two", 0, False)]
    assert run("two", 0, True) == ("two", 0, True)  # another run is another entry
    assert run("two", 1) == ("two", 1, False)
    assert len(calls) == 3 and run.cache_info().currsize == 3
    run.cache_clear()
    run("two", 0)
    assert len(calls) == 4
    assert run.__name__ == "run"


def test_functools_cache_computes_it_again():
    """Why `shared` exists: functools.cache keys on the call as written."""
    run, calls = counted(functools.cache)
    run("two", 0)
    run("two", 0, False)
    run("two", seed=0)
    assert len(calls) == 3


def test_clear_all_empties_every_shared_cache():
    from theorems.framework import memo

    calls = []

    @memo.shared
    def one(x):
        calls.append(("one", x))
        return x

    @memo.shared
    def two(x, y=1):
        calls.append(("two", x))
        return x + y

    one(1), two(2), one(1), two(2, 1)
    assert calls == [("one", 1), ("two", 2)]
    memo.clear_all()
    assert one.cache_info().currsize == two.cache_info().currsize == 0
    one(1), two(2)
    assert calls == [("one", 1), ("two", 2), ("one", 1), ("two", 2)]
