"""The one adapter between the framework and Hypothesis (theorems.framework.hypothesis_compat): each
interface it relies on, checked against the installed Hypothesis, so that an upstream change
fails here, by name, rather than as a wrong verdict."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from theorems.framework import hypothesis_compat as compat


def test_is_hypothesis_test_tells_properties_from_plain_functions():
    @given(x=st.integers())
    def prop(x):
        pass

    def plain():
        pass

    assert compat.is_hypothesis_test(prop)
    assert not compat.is_hypothesis_test(plain)
    assert not compat.is_hypothesis_test(len)


def test_the_wrapped_inner_test_is_called_once_per_example_with_its_arguments():
    seen, wrapped = [], []

    @settings(max_examples=7, database=None)
    @given(x=st.integers(0, 10**6))
    def prop(x):
        seen.append(x)

    inner = compat.inner_test(prop)

    def wrapper(*args, **kwargs):
        wrapped.append(kwargs["x"])
        return inner(*args, **kwargs)

    compat.set_inner_test(prop, wrapper)
    prop()
    assert len(wrapped) == 7 and wrapped == seen


def test_with_budget_sets_the_example_count_and_calls_the_shrunk_example_last():
    calls = []

    @given(x=st.integers(0, 10**6))
    def prop(x):
        calls.append(x)

    budgeted = compat.with_budget(prop, 13)
    budgeted()
    assert len(calls) == 13
    calls.clear()

    @given(x=st.integers(0, 10))
    def failing(x):
        calls.append(x)
        assert x < 5

    with pytest.raises(AssertionError):
        compat.with_budget(failing, 50)()
    # The last call is the shrunk (minimal) counterexample, replayed: the framework records
    # the counterexample from the arguments of the last failing call.
    assert calls[-1] == 5


def test_with_budget_refuses_a_test_that_has_its_own_settings():
    @settings(max_examples=3)
    @given(x=st.integers())
    def prop(x):
        pass

    with pytest.raises(compat.SettingsConflict, match="remove @settings"):
        compat.with_budget(prop, 5)


def test_key_by_node_keys_the_saved_examples_by_the_node_id(tmp_path):
    """A failure saved under node "a" is replayed (no generation) under "a", not under "b":
    the node id is part of the database key, as HypoFuzz writes it."""
    import unittest

    from hypothesis import Phase
    from hypothesis.database import DirectoryBasedExampleDatabase

    db = DirectoryBasedExampleDatabase(tmp_path)

    def make(phases):
        @settings(database=db, phases=phases, derandomize=False, max_examples=200)
        @given(st.integers(0, 1000))
        def test_small(x):
            assert x < 500

        return test_small

    search = make((Phase.generate, Phase.shrink))
    compat.key_by_node(search, "claims_x.py::test_small[a]")
    with pytest.raises(AssertionError):
        search()

    def replayed(node: str) -> str:
        replay = make((Phase.reuse,))
        compat.key_by_node(replay, node)
        try:
            replay()
        except AssertionError:
            return "the saved failure"
        except unittest.SkipTest:  # Hypothesis ran no example: nothing saved under the key
            return "nothing"
        return "passed"

    assert replayed("claims_x.py::test_small[b]") == "nothing"
    assert replayed("claims_x.py::test_small[a]") == "the saved failure"
