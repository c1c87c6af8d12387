"""The claims plugin, end to end: inner pytest sessions on small throwaway claims."""

import builtins
import json
from pathlib import Path

import pytest
import repo_copy
from hypothesis import errors

from theorems.framework import evidence, verdicts
from theorems.framework.registry import ClaimInfo

pytest_plugins = ["pytester"]

REPO_ROOT = Path(__file__).resolve().parent.parent
# The builtin from Python 3.11; the backport (a Hypothesis dependency) before.
Group = (
    getattr(builtins, "ExceptionGroup", None)
    or pytest.importorskip("exceptiongroup").ExceptionGroup
)
INFO = ClaimInfo("T-X", "p", "theorem", "s", "[D]", "holds", 10, max_inconclusive=0.2)

HEADER = (
    repo_copy.CLAIM_HELPER
    + """
import os
import pytest
from hypothesis import given, strategies as st
from theorems import claim, evidence

"""
)

HOLDS = """
@C("T-HOLDS", examples=30)
@given(x=st.integers(-100, 100))
def test_holds(x):
    evidence.instance({"x": x})
    evidence.slack("x^2/10^4", x * x, 10_000)
    evidence.metric("x", x)
    assert x * x >= 0
"""

CONTROL = """
@C("T-CONTROL", kind="control", expected="refuted", note="x < 10 is false")
@given(x=st.integers(0, 1000))
def test_control(x):
    evidence.instance({"x": x})
    assert x < 10
"""

REFUTED = """
@C("T-WRONG")
@given(x=st.integers(0, 1000))
def test_wrong(x):
    evidence.instance({"x": x})
    assert x < 10
"""

INCONCLUSIVE = """
@C("T-UNDECIDED", examples=20)
@given(x=st.integers(0, 100))
def test_undecided(x):
    if x % 2:
        evidence.inconclusive("odd")
"""

ERROR = """
@C("T-BROKEN", examples=10)
@given(x=st.integers(0, 100))
def test_broken(x):
    raise RuntimeError("boom")
"""

PARAMETRIZED = """
@C("T-PARAM", examples=10)
@pytest.mark.parametrize("bound", [1000, 10])
@given(x=st.integers(0, 100))
def test_param(bound, x, pytestconfig):
    evidence.instance({"x": x, "bound": bound})
    assert x < bound
"""

REJECTIONS = """
@C("T-ALL-REJECTED")
@given(x=st.integers())
def test_rejected(x):
    evidence.reject("never valid")

@C("T-ALL-INCONCLUSIVE", expected="unknown")
@given(x=st.integers())
def test_all_inconclusive(x):
    evidence.inconclusive("never decided")
"""

PLAIN = """
@C("T-PLAIN", kind="experiment")
def test_plain(tmp_path):
    evidence.instance({"v": [1.0, float("inf")]})
    evidence.metric("m", 2.5)

@C("T-SETUP", kind="experiment")
def test_setup(no_such_fixture):
    pass
"""

AFTER_REPORT = """
from theorems.framework.plugin import after_report

@after_report
def rendered(path):
    (path.parent / "rendered.txt").write_text(path.name)
"""

# One file with every kind of outcome; most tests read the same (cached) run of it.
MIXED = HOLDS + CONTROL + REFUTED + INCONCLUSIVE + ERROR + PARAMETRIZED + REJECTIONS + PLAIN
# Reading order (verdicts.order_key): by kind (lemmas, experiments, controls), then definition.
MIXED_IDS = [
    "T-HOLDS", "T-WRONG", "T-UNDECIDED", "T-BROKEN", "T-PARAM",
    "T-ALL-REJECTED", "T-ALL-INCONCLUSIVE", "T-PLAIN", "T-SETUP", "T-CONTROL",
]  # fmt: skip
MIXED_ARGS = ("-v", "-rP", "--junitxml", "junit.xml")
_CACHE: dict[str, tuple] = {}


@pytest.fixture
def inner(pytester, monkeypatch):
    """Run an inner session in a subprocess (Hypothesis profiles are process-global) and
    return (result, report dict or None, the inner project's folder)."""
    monkeypatch.setenv("PYTHONPATH", str(REPO_ROOT))
    for var in ("ATTN_CLAIMS_REPORT", "ATTN_HYPOTHESIS_PROFILE", "PYTEST_XDIST_WORKER", "CI"):
        monkeypatch.delenv(var, raising=False)
    pytester.makeini("[pytest]\n")

    def run(source, *args, report="reports/claims.json", conftest=None):
        pytester.makepyfile(test_claims=HEADER + source)
        if conftest:
            pytester.makeconftest(conftest)
        result = pytester.runpytest_subprocess(
            "-p", "theorems.framework.plugin", "-p", "no:cacheprovider",
            "--rootdir", str(pytester.path),
            "-W", "ignore::DeprecationWarning", *args,
        )  # fmt: skip
        path = pytester.path / report
        return result, (json.loads(path.read_text()) if path.exists() else None), pytester.path

    return run


@pytest.fixture
def mixed(inner):
    """The serial run of MIXED, shared by the tests of this module (keeps them fast)."""
    if "mixed" not in _CACHE:
        _CACHE["mixed"] = inner(MIXED, *MIXED_ARGS, conftest=AFTER_REPORT)
    return _CACHE["mixed"]


def by_id(report):
    return {c["id"]: c for c in report["claims"]}


def test_outcomes_and_summary_line(mixed):
    result, report, _ = mixed
    # passed: holds, control, param[1000], all-inconclusive (expected unknown), plain
    result.assert_outcomes(passed=5, failed=5, errors=1)
    result.stdout.fnmatch_lines(
        ["attention-theorems: 10 claims: 2 held, 1 refuted as expected, 6 unexpected, "
         "2 inconclusive, 1 vacuous, 2 error — reports/claims.json"]
    )  # fmt: skip


def test_holding_claim_passes_with_its_evidence(mixed):
    c = by_id(mixed[1])["T-HOLDS"]
    assert (c["verdict"], c["as_expected"], c["examples"]) == ("holds", True, 30)
    assert c["worst_slack"]["x^2/10^4"] == {
        "observed": 10_000.0,
        "bound": 10_000.0,
        "ratio": 1.0,
        "derivation": None,
        "basis": None,
    }
    assert -100 <= c["metrics"]["x"]["min"] < 0 < c["metrics"]["x"]["max"] <= 100
    assert c["metrics"]["x"]["count"] == 30
    assert c["counterexample"] is None and c["error"] is None
    mixed[0].stdout.fnmatch_lines(["*::test_holds PASSED*"])


def test_control_is_refuted_and_passes_with_the_shrunk_counterexample(mixed):
    result, report, _ = mixed
    c = by_id(report)["T-CONTROL"]
    assert (c["verdict"], c["as_expected"], c["expected"]) == ("refuted", True, "refuted")
    assert c["counterexample"] == {"x": 10}
    assert "Falsifying example" in c["falsifying_example"] and "x=10" in c["falsifying_example"]
    # What the failing assertion said travels with the example (a conjecture's value, say).
    assert c["assertion"] == "assert 10 < 10"
    assert c["falsifying_example"].endswith(")\nAssertionError: assert 10 < 10")
    assert c["note"] == "x < 10 is false"
    result.stdout.fnmatch_lines(
        ["*::test_control PASSED*", "*claim T-CONTROL: refuted as expected*"]
    )


def test_claim_expected_to_hold_that_is_false_fails_with_a_header(mixed):
    result, report, _ = mixed
    result.stdout.fnmatch_lines(
        [
            "claim T-WRONG: verdict refuted, expected holds (a counterexample was found; "
            "it has no twins to replay it on)",
            "*assert 10 < 10*",
        ]
    )
    c = by_id(report)["T-WRONG"]
    assert (c["verdict"], c["as_expected"], c["counterexample"]) == ("refuted", False, {"x": 10})
    assert "theorems/framework/registry.py" not in result.stdout.str()  # no noise from our wrapper


def test_mostly_inconclusive_claim_is_inconclusive_and_fails(mixed):
    result, report, _ = mixed
    c = by_id(report)["T-UNDECIDED"]
    assert c["verdict"] == "inconclusive" and not c["as_expected"]
    assert set(c["inconclusive"]) == {"odd"} and c["examples"] == 20
    result.stdout.fnmatch_lines(["claim T-UNDECIDED: verdict inconclusive, expected holds*"])


def test_only_rejections_is_vacuous_only_inconclusive_is_inconclusive(mixed):
    claims = by_id(mixed[1])
    rejected = claims["T-ALL-REJECTED"]
    assert rejected["verdict"] == "vacuous" and not rejected["as_expected"]
    assert rejected["reason"].startswith("its assumptions held in 0 of")
    assert rejected["rejections"]["never valid"] > 0
    assert rejected["premise"]["met"] == 0 and not rejected["premise"]["declared"]
    undecided = claims["T-ALL-INCONCLUSIVE"]
    assert undecided["verdict"] == "inconclusive" and undecided["as_expected"]  # unknown
    assert undecided["inconclusive"]["never decided"] > 0


def test_errors_are_their_own_verdict_and_others_keep_their_evidence(mixed):
    claims = by_id(mixed[1])
    assert claims["T-BROKEN"]["verdict"] == "error" and "boom" in claims["T-BROKEN"]["error"]
    setup = claims["T-SETUP"]
    assert setup["verdict"] == "error" and "no_such_fixture" in setup["error"]
    assert [c["id"] for c in mixed[1]["claims"]] == MIXED_IDS  # nothing lost, in order


def test_parametrized_claim_merges_into_one_entry(mixed):
    c = by_id(mixed[1])["T-PARAM"]
    assert c["verdict"] == "refuted"  # param 1000 holds, param 10 is refuted
    assert c["counterexample"] == {"x": 10, "bound": 10}
    assert c["nodeid"] == "test_claims.py::test_param"
    assert c["budget"] == 20 and c["examples"] >= 10
    assert " at 0x" not in c["falsifying_example"]  # fixture reprs without addresses


def test_non_hypothesis_claim_is_one_example(mixed):
    c = by_id(mixed[1])["T-PLAIN"]
    assert (c["verdict"], c["examples"], c["metrics"]["m"]["max"]) == ("holds", 1, 2.5)


def test_report_schema(mixed):
    report = mixed[1]
    assert set(report) == {
        "generated", "profile", "versions", "device", "summary", "claims", "skipped", "lock",
        "runs",
    }  # fmt: skip
    assert report["runs"] == {report["generated"]: {"profile": "ci", "claims": 10}}
    assert {c["run"] for c in report["claims"]} == {report["generated"]}
    assert report["skipped"] == []
    assert report["profile"] == "ci"
    assert report["device"] == "cpu"  # ATTN_DEVICE unset: the torch work ran on CPU
    assert set(report["versions"]) == {"python", "torch", "numpy", "cvxpy", "hypothesis"}
    assert report["summary"] == {
        "claims": 10,
        "holds": 2,
        "refuted": 3,
        "inconclusive": 2,
        "vacuous": 1,
        "error": 2,
        "as_expected": 4,
        "unexpected": 6,
        "skipped": 0,
    }
    required = {
        "id": str, "paper": str, "kind": str, "statement": str, "provenance": str,
        "expected": str, "verdict": str, "as_expected": bool, "examples": int,
        "rejections": dict, "inconclusive": dict, "worst_slack": dict, "metrics": dict,
        "seconds": float, "counterexample": (dict, type(None)),
        "falsifying_example": (str, type(None)), "error": (str, type(None)),
        "figures": list, "note": str, "nodeid": str, "premise": dict, "failures": dict,
        "tolerated_failures": dict,
    }  # fmt: skip
    for c in report["claims"]:
        for key, kind in required.items():
            assert isinstance(c[key], kind), (c["id"], key)


def test_verbose_lines_user_properties_and_after_report(mixed):
    result, _, path = mixed
    result.stdout.fnmatch_lines(
        [
            # then its examples, worst slack and seconds (theorems.framework.progress)
            "*claim T-CONTROL: refuted (expected refuted, as expected) — * examples*, * s",
            "*claim T-WRONG: refuted (expected holds, UNEXPECTED) — * s",
        ]
    )
    assert (path / "reports" / "rendered.txt").read_text() == "claims.json"
    junit = (path / "junit.xml").read_text()
    assert '<property name="claim" value="T-WRONG" />' in junit
    assert '<property name="verdict" value="refuted" />' in junit
    assert not list((path / "reports").glob(".evidence/*"))  # merged, then cleaned up


def test_xdist_gives_the_same_report_as_a_serial_run(mixed, inner):
    # The workers also get the report path (--claims-report) from the controller.
    result, parallel, path = inner(
        MIXED, "-n", "2", "--claims-report", "out/a.json", report="out/a.json"
    )
    result.assert_outcomes(passed=5, failed=5, errors=1)
    result.stdout.fnmatch_lines(["*— out/a.json"])

    def content(report):
        return [
            {k: v for k, v in c.items() if k not in ("seconds", "run")} for c in report["claims"]
        ]

    assert content(parallel) == content(mixed[1])
    assert parallel["summary"] == mixed[1]["summary"]
    assert not list((path / "out").glob(".evidence/*"))


def test_a_crash_keeps_the_evidence_already_flushed(inner, monkeypatch, pytester):
    monkeypatch.setenv("ATTN_CLAIMS_REPORT", str(pytester.path / "env" / "claims.json"))
    crash = "\ndef test_zz_crash():\n    os._exit(3)\n"
    result, report, path = inner(HOLDS + crash, report="env/claims.json")
    assert result.ret == 3 and report is None
    (worker_file,) = (path / "env" / ".evidence").glob("*/main.json")
    (record,) = json.loads(worker_file.read_text())["records"]
    assert record["id"] == "T-HOLDS" and record["verdict"] == "holds"


def test_runs_add_up_in_the_report_and_each_claim_names_its_run(inner):
    """A run of one claim keeps the other claims of the report it replaces (same profile),
    each with the run that judged it; --fresh-report starts anew."""
    import time

    _, first, _ = inner(HOLDS + CONTROL, "-k", "test_holds")
    assert [c["id"] for c in first["claims"]] == ["T-HOLDS"]
    time.sleep(1.1)  # the runs' stamps are seconds
    _, second, _ = inner(HOLDS + CONTROL, "-k", "test_control")
    runs = {c["id"]: c["run"] for c in second["claims"]}
    assert set(runs) == {"T-HOLDS", "T-CONTROL"}
    assert runs["T-HOLDS"] == first["generated"] and runs["T-CONTROL"] == second["generated"]
    assert second["runs"] == {
        first["generated"]: {"profile": "ci", "claims": 1},
        second["generated"]: {"profile": "ci", "claims": 1},
    }
    assert second["summary"]["claims"] == 2 and second["summary"]["holds"] == 1
    _, fresh, _ = inner(HOLDS + CONTROL, "-k", "test_control", "--fresh-report")
    assert [c["id"] for c in fresh["claims"]] == ["T-CONTROL"]


def test_carry_over_keeps_only_claims_of_the_same_profile_that_still_exist():
    from theorems.framework.records import carry_over

    def claim(cid, verdict="holds"):
        return {"id": cid, "paper": "p", "kind": "lemma", "nodeid": f"t.py::{cid}",
                "verdict": verdict, "as_expected": True}  # fmt: skip

    def report(stamp, profile, *claims):
        return {"generated": stamp, "profile": profile, "claims": list(claims),
                "skipped": [], "summary": {}}  # fmt: skip

    now = report("t2", "ci", claim("A"))
    before = report("t1", "ci", claim("A", "refuted"), claim("B"), claim("GONE"))
    merged = carry_over(now, before, known={"A": "holds", "B": "holds"})
    assert [(c["id"], c["verdict"], c["run"]) for c in merged["claims"]] == [
        ("A", "holds", "t2"), ("B", "holds", "t1")
    ]  # fmt: skip
    assert merged["summary"]["claims"] == 2
    assert merged["runs"] == {"t1": {"profile": "ci", "claims": 1},
                              "t2": {"profile": "ci", "claims": 1}}  # fmt: skip
    dev = carry_over(report("t2", "ci", claim("A")), report("t1", "dev", claim("B")), None)
    assert [c["id"] for c in dev["claims"]] == ["A"] and list(dev["runs"]) == ["t2"]
    assert carry_over(report("t2", "ci", claim("A")), None, None)["runs"] == {
        "t2": {"profile": "ci", "claims": 1}
    }


def test_no_claims_no_report(inner):
    result, report, _ = inner("\ndef test_plain():\n    pass\n")
    result.assert_outcomes(passed=1)
    # The plugin's own lines start "attention-theorems:" (pytest's header names the installed
    # distribution, "plugins: attention-theorems-0.1.0", for its pytest11 entry point).
    assert report is None and "attention-theorems:" not in result.stdout.str()


def test_bad_profile_env_is_a_usage_error(inner, monkeypatch):
    monkeypatch.setenv("ATTN_HYPOTHESIS_PROFILE", "fast")
    result, _, _ = inner(HOLDS)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ATTN_HYPOTHESIS_PROFILE='fast' is not a profile*"])


def test_repo_root_conftest_loads_the_plugin():
    """The root conftest registers the plugin (pytest theorems/ and plain pytest)."""
    text = (REPO_ROOT / "conftest.py").read_text()
    assert 'pytest_plugins = ("theorems.framework.plugin",)' in text


@pytest.mark.parametrize(
    "exc, verdict",
    [
        (None, "holds"),
        (AssertionError("x"), "refuted"),
        (Group("two bugs", [AssertionError("a"), AssertionError("b")]), "refuted"),
        (Group("two bugs", [AssertionError("a"), ValueError("b")]), "error"),
        (errors.FlakyFailure("flaky", [AssertionError("a")]), "error"),
        (errors.Unsatisfiable("no examples"), "error"),  # no inconclusive counted: strategy
        (errors.FailedHealthCheck("HealthCheck.too_slow"), "error"),
        (ZeroDivisionError("oops"), "error"),
        (evidence.InconclusiveExample("ill-conditioned"), "inconclusive"),
        (evidence.RejectedExample("no margin"), "vacuous"),  # a plain claim's one example
    ],
)
def test_judge_classifies_outcomes(exc, verdict):
    collector = evidence.Collector()
    collector._outcomes["passed"] = 10
    assert verdicts.judge(exc, collector, INFO)[0] == verdict


def test_judge_too_many_rejections_depends_on_why():
    collector = evidence.Collector()
    collector.inconclusive["solver"] = 40
    collector.rejections["no margin"] = 10
    unsatisfiable = errors.Unsatisfiable("Unable to satisfy assumptions")
    assert verdicts.judge(unsatisfiable, collector, INFO)[0] == "inconclusive"
    collector.rejections["no margin"] = 50
    collector._outcomes["rejected"] = 90  # 40 inconclusive examples met the assumptions
    assert verdicts.judge(unsatisfiable, collector, INFO)[0] == "inconclusive"
    collector.inconclusive.clear()
    collector._outcomes["rejected"] = 50
    verdict, error, reason = verdicts.judge(unsatisfiable, collector, INFO)
    assert verdict == "vacuous" and error is None
    assert reason.startswith("its assumptions held in 0 of 50 examples")
    # Hypothesis' filter health check is read from our counts, not from its message.
    health = errors.FailedHealthCheck("any text at all")
    assert verdicts.judge(health, collector, INFO)[0] == "vacuous"
    assert verdicts.judge(health, evidence.Collector(), INFO)[0] == "error"


def test_judge_counts_inconclusive_against_the_threshold():
    collector = evidence.Collector()
    collector._outcomes["passed"] = 8
    collector.inconclusive["solver"] = 2  # 20%: at the threshold, still holds
    assert verdicts.judge(None, collector, INFO)[0] == "holds"
    collector.inconclusive["solver"] = 3
    assert verdicts.judge(None, collector, INFO)[0] == "inconclusive"


AFTER_CLAIM = """
import os
from pathlib import Path
from theorems.framework.plugin import after_claim

@after_claim
def noted(info):
    where = os.environ.get("PYTEST_XDIST_WORKER", "controller")
    folder = Path("after_claim")
    folder.mkdir(exist_ok=True)
    (folder / f"{info.id}.{where}").write_text(str(os.getpid()))

@after_claim
def broken(info):
    raise RuntimeError("a figure that cannot be drawn")
"""


def test_after_claim_runs_in_the_worker_that_ran_the_claim_and_never_decides_a_verdict(inner):
    """reports.hook draws a claim's figures there, while the runs it computed are cached."""
    result, report, path = inner(HOLDS + CONTROL, "-n", "2", conftest=AFTER_CLAIM)
    ran = sorted(p.name for p in (path / "after_claim").iterdir())
    assert [name.split(".")[0] for name in ran] == ["T-CONTROL", "T-HOLDS"]
    assert all(name.split(".")[1] in ("gw0", "gw1") for name in ran), ran
    assert {c["id"]: c["verdict"] for c in report["claims"]} == {
        "T-HOLDS": "holds",
        "T-CONTROL": "refuted",
    }
    result.stdout.fnmatch_lines(["*after_claim <function broken*RuntimeError*"])
