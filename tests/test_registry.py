"""The claim registry: validation, duplicate ids, profile budgets, example counting, merging."""

import importlib
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from theorems.framework import evidence, profiles, registry, verdicts
from theorems.framework.registry import ClaimRegistrationError, claim

GOOD = dict(
    id="TEST-REG-GOOD",
    paper="2306.13596",
    kind="lemma",
    statement="a statement",
    provenance="[D]",
    examples=12,
)


@pytest.fixture(autouse=True)
def isolated_registry():
    """Throwaway claims must not leak into the real registry (or the CLI's listing)."""
    with registry.isolated():
        # Start empty: another test may have imported the real claim modules in this process.
        registry.REGISTRY.clear()
        registry._DEFINED_BY.clear()
        yield


@pytest.fixture
def restore_profile():
    before = profiles.current_profile()
    yield
    profiles.load_profile(before)


def test_registers_and_marks_a_plain_test():
    @claim(**GOOD)
    def test_x():
        pass

    info = registry.REGISTRY["TEST-REG-GOOD"]
    assert test_x.__claim__ is info
    assert (info.paper, info.kind, info.expected, info.examples) == (
        "2306.13596",
        "lemma",
        "holds",
        12,
    )
    assert info.qualname.endswith("test_x") and info.module == __name__
    assert info.line > 0 and info.file.endswith("test_registry.py")
    assert [m.args for m in test_x.pytestmark if m.name == "claim"] == [("TEST-REG-GOOD",)]


def test_duplicate_id_names_both_definitions():
    @claim(**GOOD)
    def test_first():
        pass

    with pytest.raises(ClaimRegistrationError) as err:

        @claim(**GOOD)
        def test_second():
            pass

    message = str(err.value)
    assert "TEST-REG-GOOD" in message
    assert "test_first" in message and "test_second" in message


def test_reimporting_the_same_definition_is_not_a_duplicate(tmp_path, monkeypatch):
    (tmp_path / "claims_reimport_probe.py").write_text(
        "from theorems import claim\n\n"
        "@claim(id='TEST-REIMPORT', paper='p', kind='lemma', statement='s', provenance='[D]')\n"
        "def test_probe():\n    pass\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importlib.import_module("claims_reimport_probe")
    try:
        importlib.reload(module)  # what pytest re-collection or a notebook re-run does
        assert registry.REGISTRY["TEST-REIMPORT"].qualname == "test_probe"
    finally:
        sys.modules.pop("claims_reimport_probe", None)


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(id="mm-lower"), "id"),
        (dict(id="NODASH"), "id"),
        (dict(id="MM-"), "id"),
        (dict(id="MM-has space"), "id"),
        (dict(paper=""), "paper"),
        (dict(statement="  "), "statement"),
        (dict(provenance=""), "provenance"),
        (dict(provenance="recalled from memory"), "provenance"),  # no tag at all
        (dict(provenance="[V] data, [X] message"), "provenance"),  # a tag not in the specs
        (dict(provenance="[D, Q]"), "provenance"),
        (dict(min_premise=0), "min_premise"),
        (dict(kind="guess"), "kind"),
        (dict(expected="maybe"), "expected"),
        (dict(examples=0), "examples"),
        (dict(examples=2.5), "examples"),
        (dict(examples=True), "examples"),
        (dict(max_inconclusive=1.5), "max_inconclusive"),
        (dict(figures=("",)), "figures"),
        (dict(note=3), "note"),
        (dict(tests="maybe"), "tests"),
        (dict(variant="MM-OTHER"), "variant"),  # GOOD is expected to hold: not a reading
        (dict(expected="refuted", kind="control", variant="MM-OTHER"), "variant"),
        (dict(expected="refuted", variant="not an id"), "variant"),
        (dict(expected="refuted", variant=GOOD["id"]), "variant"),  # itself
    ],
)
def test_bad_fields_are_rejected_with_the_field_name(change, field):
    with pytest.raises(ClaimRegistrationError, match=f"claim field '{field}'"):
        claim(**{**GOOD, **change})


@pytest.mark.parametrize("good_id", ["MM-SVM-MARGIN", "EMB-THM1", "CONJ-my-guess-2", "X1-A"])
def test_id_pattern_accepts_user_prefixes(good_id):
    def test_fn():
        pass

    claim(**{**GOOD, "id": good_id})(test_fn)
    assert good_id in registry.REGISTRY


def test_a_claim_must_decorate_a_test_function():
    """A claim on a non-test function (e.g. a strategy) would never run: refuse it."""

    def draw_instances():
        pass

    with pytest.raises(ClaimRegistrationError, match="must decorate a pytest test function"):
        claim(**GOOD)(draw_instances)


@pytest.mark.parametrize(
    "profile, examples, budget",
    [
        ("ci", 50, 50),
        ("dev", 50, 10),
        ("dev", 20, 5),
        ("dev", 3, 3),  # never more than the ci budget
        ("nightly", 50, 1000),
        ("debug", 50, 1),
        ("some-user-profile", 50, 50),
    ],
)
def test_profile_budget_scaling(profile, examples, budget):
    assert profiles.scaled_examples(examples, profile) == budget


@pytest.mark.parametrize("profile, budget", [("ci", 40), ("dev", 8), ("nightly", 800)])
def test_given_claim_gets_the_scaled_budget(profile, budget, restore_profile):
    profiles.load_profile(profile)
    assert profiles.current_profile() == profile
    calls = []

    @claim(**{**GOOD, "examples": 40})
    @given(x=st.integers())
    def test_x(x):
        calls.append(x)

    test_x()
    assert len(calls) == budget  # every example of the budget ran, no more


def test_a_claim_with_its_own_settings_is_refused_with_the_reason(restore_profile):
    profiles.load_profile("ci")
    with pytest.raises(ClaimRegistrationError, match=r"TEST-REG-GOOD.*remove @settings"):

        @claim(**GOOD)
        @settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
        @given(x=st.integers())
        def test_x(x):
            pass


def test_profiles_have_the_documented_settings(restore_profile):
    profiles.register_profiles()
    ci = settings.get_profile("ci")
    assert ci.derandomize and ci.database is None and ci.deadline is None and ci.print_blob
    assert HealthCheck.too_slow in ci.suppress_health_check
    debug = settings.get_profile("debug")
    assert debug.max_examples == 1 and "shrink" not in {p.name for p in debug.phases}
    nightly = settings.get_profile("nightly")
    assert not nightly.derandomize and "target" in {p.name for p in nightly.phases}


def test_unknown_profile_in_env_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(profiles.PROFILE_ENV, "fast")
    with pytest.raises(ValueError, match="ATTN_HYPOTHESIS_PROFILE='fast' is not a profile"):
        profiles.profile_from_env()


def test_examples_rejections_and_inconclusive_are_counted():
    @claim(**{**GOOD, "examples": 30})
    @given(x=st.integers(0, 99))
    def test_x(x):
        evidence.instance({"x": x})
        evidence.metric("x", x)
        evidence.slack("x/100", x, 100)
        if x % 10 == 1:
            evidence.reject("ends in 1")
        if x % 10 == 2:
            evidence.inconclusive("ends in 2")

    collector = evidence.Collector()
    with evidence.collecting(collector):
        test_x()  # Hypothesis runs the inner test; the registry's wrapper counts
    snap = collector.snapshot()
    assert snap["examples"] == profiles.scaled_examples(30)
    assert set(snap["rejections"]) == {"ends in 1"}
    assert set(snap["inconclusive"]) == {"ends in 2"}
    assert 0 <= snap["metrics"]["x"]["min"] <= snap["metrics"]["x"]["max"] <= 99
    worst = snap["worst_slack"]["x/100"]
    assert worst["ratio"] == worst["observed"] / 100 == snap["metrics"]["x"]["max"] / 100


def test_the_last_failing_example_is_the_counterexample():
    @claim(**GOOD)
    @given(x=st.integers(0, 1000))
    def test_x(x):
        evidence.instance({"x": x})
        assert x < 10

    collector = evidence.Collector()
    with evidence.collecting(collector), pytest.raises(AssertionError):
        test_x()
    assert collector.counterexample == {"x": 10}  # Hypothesis replays the shrunk one last


def test_fixtures_pass_through_a_given_claim(pytestconfig):
    seen = []

    @claim(**{**GOOD, "examples": 5})
    @given(x=st.integers())
    def test_x(config, x):
        seen.append(config)

    collector = evidence.Collector()
    with evidence.collecting(collector):
        test_x(pytestconfig)
    assert collector.examples == 5 and set(map(id, seen)) == {id(pytestconfig)}


def test_evidence_outside_a_claim_is_a_no_op_except_reject():
    evidence.instance({"x": 1})
    evidence.slack("s", 1.0, 2.0)
    evidence.metric("m", 1.0)
    with pytest.raises(evidence.RejectedExample, match="outside a Hypothesis test"):
        evidence.reject("no")
    with pytest.raises(evidence.InconclusiveExample, match="ill-conditioned"):
        evidence.inconclusive("ill-conditioned")


def test_to_jsonable_handles_arrays_tensors_and_non_finite_floats():
    torch = pytest.importorskip("torch")
    data = {"t": torch.tensor([1.0, float("inf")]), "n": (1, float("nan")), 2: None}
    assert evidence.to_jsonable(data) == {"t": [1.0, "inf"], "n": [1, "nan"], "2": None}


@pytest.mark.parametrize(
    "items, merged",
    [
        (["holds", "holds"], "holds"),
        (["holds", "inconclusive"], "inconclusive"),
        (["inconclusive", "error"], "error"),
        (["holds", "refuted"], "refuted"),
        (["error", "refuted", "inconclusive"], "refuted"),
    ],
)
def test_parametrized_verdicts_merge(items, merged):
    assert verdicts.merge_verdicts(items) == merged


def test_merge_rejects_unknown_verdicts():
    with pytest.raises(ValueError):
        verdicts.merge_verdicts(["holds", "passed"])


@pytest.mark.parametrize(
    "verdict, expected, ok",
    [
        ("holds", "holds", True),
        ("refuted", "refuted", True),
        ("holds", "refuted", False),
        ("inconclusive", "holds", False),
        ("inconclusive", "unknown", True),
        ("refuted", "unknown", True),
        ("error", "unknown", False),
    ],
)
def test_as_expected(verdict, expected, ok):
    assert verdicts.as_expected(verdict, expected) is ok


def test_nightly_slack_becomes_a_hypothesis_target(restore_profile, monkeypatch):
    profiles.load_profile("nightly")
    targeted = []
    monkeypatch.setattr(evidence.hypothesis, "target", lambda v, label: targeted.append(label))

    @claim(**{**GOOD, "examples": 1})  # 20 examples under nightly
    @given(x=st.integers(0, 10**6))
    def test_x(x):
        evidence.slack("x", x, 10**6)
        evidence.slack("x", x + 1, 10**6)  # twice per example: one target per label

    collector = evidence.Collector()
    with evidence.collecting(collector):
        test_x()
    assert collector.examples == 20 and targeted == ["x"] * 20


def test_ci_random_draws_a_seed_shares_it_and_replays_it(restore_profile, monkeypatch):
    # Set, then removed: monkeypatch then restores the variable's state before the test at
    # teardown, so the seed run_seed() writes into os.environ does not leak into later tests
    # (a leaked seed turns the example database off in their child runs).
    monkeypatch.setenv(profiles.SEED_ENV, "0")
    monkeypatch.delenv(profiles.SEED_ENV)
    profiles.load_profile("ci-random")
    assert not settings.default.derandomize and settings.default.database is None
    assert profiles.scaled_examples(50) == 50  # the ci budgets
    drawn = profiles.run_seed()
    assert isinstance(drawn, int) and profiles.run_seed() == drawn  # put in the environment

    def draws(seed):
        monkeypatch.setenv(profiles.SEED_ENV, str(seed))
        seen = []
        with registry.isolated():

            @claim(**{**GOOD, "examples": 10})
            @given(x=st.integers(0, 10**9))
            def test_x(x):
                seen.append(x)

            test_x()
        return seen

    assert draws(1234) == draws(1234)  # a seed given back replays the same examples
    assert draws(1234) != draws(4321)
    monkeypatch.setenv(profiles.SEED_ENV, "not-a-number")
    with pytest.raises(ValueError, match="ATTN_HYPOTHESIS_SEED"):
        profiles.run_seed()


def test_derandomized_profiles_use_no_seed(restore_profile, monkeypatch):
    monkeypatch.delenv(profiles.SEED_ENV, raising=False)
    profiles.load_profile("ci")
    assert profiles.run_seed() is None


@pytest.mark.parametrize(
    "provenance", ["[D]", "[R?] hypotheses, [D] n = 1", "[D, N]", "[R]/[U]", "[V] data, [?] x"]
)
def test_provenance_names_tags_of_the_specs(provenance):
    @claim(**{**GOOD, "provenance": provenance})
    def test_x():
        pass

    assert registry.REGISTRY["TEST-REG-GOOD"].provenance == provenance


def test_a_conjecture_is_expected_unknown_unless_the_suite_has_settled_it():
    @claim(**{**GOOD, "kind": "conjecture"})
    def test_x():
        pass

    assert registry.REGISTRY["TEST-REG-GOOD"].expected == "unknown"

    @claim(**{**GOOD, "id": "TEST-REG-SETTLED", "kind": "conjecture", "expected": "refuted"})
    def test_y():
        pass

    assert registry.REGISTRY["TEST-REG-SETTLED"].expected == "refuted"

    @claim(**{**GOOD, "id": "TEST-REG-LEMMA"})
    def test_z():
        pass

    assert registry.REGISTRY["TEST-REG-LEMMA"].expected == "holds"


def test_a_refuted_reading_names_its_variants():
    def test_fn():
        pass

    claim(**{**GOOD, "id": "TEST-REG-READ", "expected": "refuted", "variant": "MM-A"})(test_fn)
    assert registry.REGISTRY["TEST-REG-READ"].variants == ("MM-A",)
    claim(**{**GOOD, "id": "TEST-REG-READ2", "expected": "refuted", "variant": ["MM-A", "MM-B"]})(
        test_fn
    )
    assert registry.REGISTRY["TEST-REG-READ2"].variants == ("MM-A", "MM-B")


def test_every_variant_the_suite_names_is_a_claim_expected_to_hold():
    """The report shows each refuted reading beside the variant that holds: a typo in an id,
    or a "variant" that is itself refuted, would mislead it. (In a child process: importing
    every claim module here would fill this process's registry.)"""
    import json
    import subprocess

    from theorems.framework import REPO_ROOT

    listed = subprocess.run(
        [sys.executable, "-m", "theorems", "list", "--json"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    claims = {c["id"]: c for c in json.loads(listed.stdout)}
    named = {(c["id"], v) for c in claims.values() for v in c["variants"]}
    assert len(named) >= 20
    wrong = [(c, v) for c, v in named if claims.get(v, {}).get("expected") != "holds"]
    assert wrong == []


def test_a_findings_file_with_no_section_serves_no_findings(tmp_path):
    # A new paper's findings.md starts with a title and no `## ID` section yet: its claims
    # have no findings, and reading it must not fail (it once raised at collection).
    from theorems.framework import rows

    empty, full = tmp_path / "empty", tmp_path / "full"
    empty.mkdir(), full.mkdir()
    (empty / "findings.md").write_text("# Findings: 0000.00000\nNothing yet.\n")
    assert rows.findings(empty / "claims_x.py", "X-ONE") == ""
    (full / "findings.md").write_text("# F\n\n## X-ONE\n\nfirst\n\n## X-TWO\nsecond\n")
    assert rows.findings(full / "claims_x.py", "X-ONE") == "first"
    assert rows.findings(full / "claims_x.py", "X-TWO") == "second"


def test_an_instance_rebuilt_from_the_same_tokens_is_the_same_data():
    # A body that builds an NTP instance twice from the same data (a tuple of token tuples,
    # not a tensor) records one instance; it once raised AttributeError on `.shape`.
    import numpy as np

    from strategies.ntp_instances import LinearNTPInstance, NTPInstance
    from theorems.framework.evidence import _same_data

    E, seqs = np.eye(4), [[1, 2, 3, 0], [2, 3, 0]]
    a, b = NTPInstance(E, seqs, [1, 2]), NTPInstance(E, seqs, [2, 3])
    assert _same_data(a, b)
    assert not _same_data(a, NTPInstance(E, [[1, 2, 3, 0], [3, 2, 0]], [1, 2]))
    assert not _same_data(a, NTPInstance(2 * E, seqs, [1, 2]))
    H, P = np.ones((2, 2)), [[0.5, 0.5], [1.0, 0.0]]
    assert _same_data(LinearNTPInstance(H, P, [1, 1]), LinearNTPInstance(H, P, [2, 1]))
    assert not _same_data(a, LinearNTPInstance(H, P, [1, 1]))
