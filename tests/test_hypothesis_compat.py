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


def test_is_final_example_marks_the_reported_examples_only():
    """The shrunk failing example's last run and an explicit @example are final; the search's
    and the shrinker's runs are not. Outside a test nothing is final."""
    from hypothesis import example
    from hypothesis.control import current_build_context

    calls = []

    @given(x=st.integers(0, 10))
    def failing(x):
        # The flag the adapter reads exists: a Hypothesis without it fails here, by name.
        assert hasattr(current_build_context(), "is_final")
        calls.append((x, compat.is_final_example()))
        assert x < 5

    with pytest.raises(AssertionError):
        compat.with_budget(failing, 50)()
    assert calls[-1] == (5, True)  # the shrunk counterexample, replayed last
    assert [x for x, final in calls if final] == [5]
    assert any(x >= 5 for x, final in calls[:-1])  # failing runs before it were not final
    assert not compat.is_final_example()

    calls.clear()

    @example(x=7)  # a saved counterexample, replayed as an explicit example
    @given(x=st.integers(0, 10))
    def saved(x):
        calls.append((x, compat.is_final_example()))
        assert x < 5

    with pytest.raises(AssertionError):
        compat.with_budget(saved, 50)()
    assert calls == [(7, True)]


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


def test_draws_ignore_the_literals_of_local_modules(tmp_path, monkeypatch):
    """ignore_local_constants (applied when the adapter is imported) keeps the literals of
    local modules out of the draws: a float range holding one literal of a freshly imported
    local module never draws it in 200 examples, while Hypothesis' own provider does (it
    offers a pooled constant at 5 % of draws). The control fails if this Hypothesis harvests
    by another route, or stops harvesting: then the adapter and this test are to be updated."""
    import importlib.util
    import sys

    from hypothesis import Phase
    from hypothesis.internal.conjecture import providers

    if not compat.HARVESTS_LOCAL_LITERALS:
        pytest.skip("this Hypothesis harvests no literals from local modules")
    mark = 1.2345678901  # no other literal of the suite, nor of Hypothesis, is this close
    module = tmp_path / "attn_literal_probe.py"
    module.write_text(f"MARK = {mark!r}\n", encoding="utf-8")
    spec = importlib.util.spec_from_file_location("attn_literal_probe", module)
    probe = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(probe)
    monkeypatch.setitem(sys.modules, "attn_literal_probe", probe)

    def hits() -> int:
        seen = []

        @settings(max_examples=200, database=None, derandomize=True, phases=[Phase.generate])
        @given(st.floats(1.2345678, 1.2345679))
        def prop(x):
            seen.append(x)

        prop()
        assert len(seen) > 100
        return seen.count(mark)

    assert compat.ignore_local_constants()  # idempotent; installed at import
    assert hits() == 0
    try:
        with monkeypatch.context() as m:
            m.setattr(providers.HypothesisProvider, "_local_constants", compat._HARVESTING)
            m.setattr(providers, "_sys_modules_len", None)  # look at sys.modules again
            providers.CONSTANTS_CACHE.cache.clear()
            assert hits() > 0
    finally:
        compat.ignore_local_constants()  # and forget the constants cached meanwhile
    assert hits() == 0


def test_the_standard_engine_is_untouched_without_local_literals():
    """Only the pool changes: every profile stays on backend "hypothesis" (any other name turns
    off the engine's tree-guided generation), and an explicit example, a derandomized search
    that repeats itself and a shrunk counterexample work as before."""
    from hypothesis import example

    from theorems.framework import profiles

    profiles.register_profiles()
    assert {settings.get_profile(name).backend for name in profiles.PROFILES} == {"hypothesis"}

    calls = []

    @settings(derandomize=True, database=None, max_examples=50)
    @example(x=7.5)
    @given(st.floats(0, 10))
    def prop(x):
        calls.append(x)
        assert x < 9

    with pytest.raises(AssertionError):
        prop()
    first = list(calls)
    assert first[0] == 7.5 and first[-1] == 9.0  # the explicit example; the shrunk one
    calls.clear()
    with pytest.raises(AssertionError):
        prop()
    assert calls == first


def test_ignore_local_constants_names_itself_when_hypothesis_changes(monkeypatch):
    """A Hypothesis without the cached property the adapter replaces gets a warning naming the
    adapter (and this test fails on it by name), not local literals in the draws unnoticed."""
    from hypothesis.internal.conjecture import providers

    if not compat.HARVESTS_LOCAL_LITERALS:
        pytest.skip("this Hypothesis harvests no literals from local modules")
    monkeypatch.setattr(compat, "_HARVESTING", None)
    monkeypatch.delattr(providers.HypothesisProvider, "_local_constants")
    with pytest.warns(compat.LocalLiteralsWarning, match="ignore_local_constants"):
        assert compat.ignore_local_constants() is False
