"""No silent pass (issue 21): a claim in a folder outside the checkout gets a verdict, run from
the checkout or from its own folder, and a claim that pytest runs without the claims plugin
fails, saying how to run it, where it used to pass or fail as a plain test with no verdict.

Each case runs pytest in a child process, as a researcher would, with the suite installed
editable (`pip install -e .`: its `pytest11` entry point `attention_theorems`). Verdicts are
read from the claims report, outcomes from a JUnit XML file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import repo_copy

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Variables of the outer run that would change the inner runs: those repo_copy clears, the
#: checkout on PYTHONPATH (the inner runs must find it by themselves) and plugin settings.
_CLEAR = {*repo_copy._CLEAR, "PYTHONPATH", "PYTEST_PLUGINS", "PYTEST_DISABLE_PLUGIN_AUTOLOAD"}

#: Two false claims and a true one, in a researcher's file (the checkout's import path).
CLAIMS = """
from hypothesis import strategies as st

from {module} import claim, given


@claim(id="OUT-CONJ", paper="p", kind="conjecture", provenance="[U]",
       statement="every integer drawn is below 5")
@given(x=st.integers(0, 100))
def test_conjecture(x):
    assert x < 5


@claim(id="OUT-THM", paper="p", kind="theorem", provenance="[D]",
       statement="every integer drawn is below 5, expected to hold")
@given(x=st.integers(0, 100))
def test_theorem(x):
    assert x < 5


@claim(id="OUT-PLAIN", paper="p", kind="definition", provenance="[D]",
       statement="one is one")
def test_plain():
    assert 1 == 1
"""

#: A false conjecture over a public strategy, imported from `attention_theorems` alone.
STRATEGY_CONJECTURE = """
from hypothesis import strategies as st

from attention_theorems import claim, given, global_opt_instances


@claim(id="OUT-FIRST-TOKEN", paper="2306.13596", kind="conjecture", provenance="[U]",
       statement="The optimal token of a one-input prompt is its first token.", examples=10)
@given(inst=global_opt_instances(n=st.just(1), T=st.just(2)))
def test_first_token_is_optimal(inst):
    assert int(inst.alpha[0]) == 0
"""


#: A claim in the checkout's theorems/ (a copy's).
INSIDE = (
    repo_copy.CLAIM_HELPER
    + """
from hypothesis import strategies as st

from theorems import given


@C("IN-HOLDS")
@given(x=st.integers(0, 100))
def test_inside(x):
    assert x <= 100
"""
)


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAR}
    env.update(
        COLUMNS="100",
        PYTHONHASHSEED="0",
        ATTN_HYPOTHESIS_PROFILE="dev",
        ATTN_HYPOTHESIS_DB=str(tmp_path / "hypothesis-db"),  # not the checkout's .hypothesis
    )
    env.update(extra)
    return env


def _pytest(cwd: Path, tmp_path: Path, *args: str, python=(), **extra: str):
    return subprocess.run(
        [sys.executable, *python, "-m", "pytest", *args, "-p", "no:cacheprovider"],
        cwd=cwd,
        env=_env(tmp_path, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=300,
    )


def _outcomes(junit: Path) -> dict[str, tuple[str, str]]:
    """{test name: (passed | failure | error | skipped, message)}."""
    found = {}
    for case in ET.parse(junit).iter("testcase"):
        bad = [child for child in case if child.tag in ("failure", "error", "skipped")]
        if bad:
            found[case.get("name")] = (bad[0].tag, f"{bad[0].get('message')}\n{bad[0].text}")
        else:
            found[case.get("name")] = ("passed", "")
    return found


def _verdicts(report: Path) -> dict[str, dict]:
    return {c["id"]: c for c in json.loads(report.read_text())["claims"]}


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> None:
    """The suite installed editable from this checkout, as README's command does; a wheel
    (CI's run on the newest dependency versions) cannot find the checkout: skipped there."""
    probe = subprocess.run(
        [sys.executable, "-c", "import attention_theorems._suite as s; print(s.CHECKOUT)"],
        cwd=tmp_path_factory.mktemp("probe"),
        env=_env(tmp_path_factory.getbasetemp()),
        capture_output=True,
        text=True,
    )
    assert probe.returncode == 0, (
        f"attention-theorems is not installed (pip install -e .):\n{probe.stderr}"
    )
    if Path(probe.stdout.strip()) != REPO_ROOT:
        pytest.skip(f"attention-theorems is installed from {probe.stdout.strip()}, not editable")


@pytest.fixture
def outside(tmp_path, installed) -> Path:
    """A researcher's folder outside the checkout, with one claims file."""
    folder = tmp_path / "research"
    folder.mkdir()
    (folder / "claims_outside.py").write_text(CLAIMS.format(module="theorems"))
    return folder


def test_a_file_outside_run_from_the_checkout_gets_verdicts(outside, tmp_path):
    """`python -m pytest ../elsewhere/claims_x.py` from the checkout: the checkout's root
    conftest is not loaded for a file outside its rootdir, so the entry point activates the
    plugin. Each claim gets its verdict, and its item passes iff the verdict is the expected
    one (a refuted conjecture passes, a refuted theorem fails)."""
    report, junit = tmp_path / "claims.json", tmp_path / "junit.xml"
    done = _pytest(
        REPO_ROOT,
        tmp_path,
        *(str(outside / "claims_outside.py"), "--claims-report", str(report)),
        *("--counterexamples", str(tmp_path / "cx"), "--junitxml", str(junit)),
    )
    assert report.exists(), done.stdout
    claims = _verdicts(report)
    assert {k: c["verdict"] for k, c in claims.items()} == {
        "OUT-CONJ": "refuted",
        "OUT-THM": "refuted",
        "OUT-PLAIN": "holds",
    }, done.stdout
    assert "x=5" in claims["OUT-CONJ"]["falsifying_example"]
    outcomes = {name: kind for name, (kind, _) in _outcomes(junit).items()}
    assert outcomes == {
        "test_conjecture": "passed",  # expected unknown: refuted is a finding
        "test_theorem": "failure",  # expected holds
        "test_plain": "passed",
    }, done.stdout
    assert done.returncode == 1, done.stdout
    assert (tmp_path / "cx" / "OUT-CONJ.json").exists()
    assert not (REPO_ROOT / "theorems" / "counterexamples" / "OUT-CONJ.json").exists()


def test_a_conjecture_in_its_own_folder_imports_attention_theorems(tmp_path, installed):
    """From the researcher's folder (cwd, no checkout on the path): `attention_theorems` gives
    the public API, the checkout is appended to sys.path, and the report lands in the folder."""
    folder = tmp_path / "research"
    folder.mkdir()
    (folder / "claims_first_token.py").write_text(STRATEGY_CONJECTURE)
    junit = tmp_path / "junit.xml"
    done = _pytest(
        folder,
        tmp_path,
        *("claims_first_token.py", "--junitxml", str(junit)),
        ATTN_HYPOTHESIS_PROFILE="ci",  # derandomized: the same draws every run
    )
    claims = _verdicts(folder / "reports" / "claims.json")
    found = claims["OUT-FIRST-TOKEN"]
    assert found["verdict"] == "refuted", done.stdout
    assert found["counterexample"]["model"] == "prompt"  # the drawn instance, recorded
    assert _outcomes(junit) == {"test_first_token_is_optimal": ("passed", "")}
    assert done.returncode == 0, done.stdout
    assert (folder / "theorems" / "counterexamples" / "OUT-FIRST-TOKEN.json").exists()


def test_the_twelve_line_conjecture_runs_in_a_folder_of_its_own_and_its_evidence_travels(
    tmp_path, installed
):
    """docs/examples/claims_gd_conjecture.py (12 lines, tests/test_api.py counts them) copied
    into a researcher's folder: refuted, and what its assertion said (the 1 − cos values)
    reaches the terminal, claims.json, the counterexample file and the report's conjectures."""
    folder = tmp_path / "research"
    folder.mkdir()
    example = REPO_ROOT / "docs" / "examples" / "claims_gd_conjecture.py"
    (folder / "claims_gd_conjecture.py").write_text(example.read_text(encoding="utf-8"))
    done = _pytest(folder, tmp_path, "claims_gd_conjecture.py", ATTN_HYPOTHESIS_PROFILE="ci")
    assert done.returncode == 0, done.stdout
    found = _verdicts(folder / "reports" / "claims.json")["CONJ-GD-ALIGNS"]
    assert found["verdict"] == "refuted", done.stdout
    said = found["assertion"]
    assert said and said.startswith("[") and "AssertionError: " + said in done.stdout
    saved = json.loads(
        (folder / "theorems" / "counterexamples" / "CONJ-GD-ALIGNS.json").read_text()
    )
    assert saved["counterexample"]["falsifying_example"][-1] == f"AssertionError: {said}"

    from reports import build

    _, md_path = build.build(folder / "reports" / "claims.json", tmp_path / "report")
    text = md_path.read_text(encoding="utf-8")
    conjectures = text[text.index("## Conjectures (1)") : text.index("## Unexpected")]
    assert "CONJ-GD-ALIGNS" in conjectures and said[:40] in conjectures


def test_a_package_of_yours_named_like_the_suites_is_one_clear_error(outside, tmp_path):
    """A `models` package of the researcher's, first on sys.path (`python -m pytest` puts the
    current folder there), would stand in for the suite's: a usage error naming both."""
    (outside / "models").mkdir()
    (outside / "models" / "__init__.py").write_text("")
    done = _pytest(outside, tmp_path, "claims_outside.py")
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout
    assert f"`import models` would load {outside / 'models' / '__init__.py'}" in done.stdout
    assert f"not the suite's {REPO_ROOT / 'models'}" in done.stdout
    assert not (outside / "reports").exists()


def test_a_package_of_yours_put_on_the_path_later_is_one_clear_error(outside, tmp_path):
    """As `pytest FILE` runs it (`python -P`: the current folder not on sys.path), the suite's
    `models` is imported before pytest inserts the file's folder, where the researcher's
    `models` is: stopped after collection, naming both. The documented way out, the claims in
    a folder of their own, gets its verdicts."""
    (outside / "claims_outside.py").write_text(CLAIMS.format(module="attention_theorems"))
    (outside / "models").mkdir()
    (outside / "models" / "__init__.py").write_text("")
    done = _pytest(outside, tmp_path, "claims_outside.py", python=("-P",))
    assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout
    assert f"your module 'models' ({outside / 'models' / '__init__.py'})" in done.stdout
    assert f"is shadowed by the suite's 'models' ({REPO_ROOT / 'models'})" in done.stdout

    (outside / "conjectures").mkdir()
    (outside / "claims_outside.py").rename(outside / "conjectures" / "claims_outside.py")
    report = tmp_path / "claims.json"
    done = _pytest(
        outside,
        tmp_path,
        *("conjectures/claims_outside.py", "--claims-report", str(report)),
        python=("-P",),
    )
    assert _verdicts(report)["OUT-CONJ"]["verdict"] == "refuted", done.stdout


def test_a_claim_run_without_the_plugin_fails_saying_how_to_run_it(outside, tmp_path):
    """With the entry point turned off, the claims run as plain tests: each fails with
    ClaimNotJudged and its how-to, the true ones included (they used to pass silently)."""
    # Without the entry point nothing appends the checkout to sys.path: the public import path
    # finds the suite by itself.
    (outside / "claims_outside.py").write_text(CLAIMS.format(module="attention_theorems"))
    junit = tmp_path / "junit.xml"
    done = _pytest(
        outside,
        tmp_path,
        "claims_outside.py",
        "-p",
        "no:attention_theorems",
        "--junitxml",
        str(junit),
    )
    outcomes = _outcomes(junit)
    assert set(outcomes) == {"test_conjecture", "test_theorem", "test_plain"}, done.stdout
    for name, (kind, message) in outcomes.items():
        assert kind == "failure", (name, done.stdout)
        assert "ClaimNotJudged" in message and "has no verdict" in message, message
        assert "-p attention_theorems" in message and "pip install -e" in message, message
    assert "Falsifying example" not in done.stdout  # no shrinking, no fake counterexample
    assert done.returncode == 1, done.stdout
    assert not (outside / "reports").exists()


def test_in_a_checkout_the_root_conftest_and_the_entry_point_load_the_plugin_once(
    outside, tmp_path
):
    """In a copy of the checkout the root conftest registers the plugin and the entry point
    leaves it be (pytest refuses a plugin registered twice); a file outside the copy, in the
    same run, is judged by the same plugin. With the plugin disabled there, a claim fails
    with ClaimNotJudged."""
    root = repo_copy.make(tmp_path / "repo", {"claims_inside.py": INSIDE})
    report = tmp_path / "both.json"
    done = _pytest(
        root,
        tmp_path,
        *("theorems/claims_inside.py", str(outside / "claims_outside.py"), "--no-gate"),
        *("--claims-report", str(report), "--counterexamples", str(tmp_path / "cx")),
        PYTHONPATH=str(root),
    )
    claims = _verdicts(report)
    assert {k: c["verdict"] for k, c in claims.items()} == {
        "IN-HOLDS": "holds",
        "OUT-CONJ": "refuted",
        "OUT-THM": "refuted",
        "OUT-PLAIN": "holds",
    }, done.stdout
    assert done.returncode == 1, done.stdout  # OUT-THM: refuted, expected to hold

    junit = tmp_path / "junit.xml"
    done = _pytest(
        root,
        tmp_path,
        *("theorems/claims_inside.py", "-p", "no:theorems.framework.plugin"),
        *("--junitxml", str(junit)),
        PYTHONPATH=str(root),
    )
    ((kind, message),) = _outcomes(junit).values()
    assert kind == "failure" and "claim IN-HOLDS ran without" in message, done.stdout


def test_a_run_without_claims_leaves_the_suite_unloaded(tmp_path, installed):
    """The entry point is loaded in every run of the environment: in a folder without claims
    it imports nothing of the suite (no `models` of ours in the way of the researcher's)."""
    folder = tmp_path / "other-project"
    folder.mkdir()
    (folder / "test_other.py").write_text(
        "import sys\n\n\n"
        "def test_nothing_of_the_suite_is_imported():\n"
        "    suite = {'theorems', 'models', 'strategies', 'reports', 'torch'}\n"
        "    assert not suite & set(sys.modules), sorted(suite & set(sys.modules))\n"
    )
    done = _pytest(folder, tmp_path, "-q")
    assert done.returncode == 0, done.stdout
    assert not (folder / "reports").exists()


def test_attention_theorems_gives_the_suites_public_api():
    import attention_theorems
    import theorems

    assert attention_theorems.__all__ == theorems.__all__
    for name in theorems.__all__:
        assert getattr(attention_theorems, name) is getattr(theorems, name), name
    with pytest.raises(AttributeError, match="docs/api.md"):
        attention_theorems.no_such_name  # noqa: B018
