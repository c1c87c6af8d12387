"""The numerics matrix (.ci/numerics_matrix.py) and the profiles it runs under."""

import importlib.util
import json

from hypothesis import Phase, settings

from theorems.framework import REPO_ROOT, profiles

_spec = importlib.util.spec_from_file_location(
    "numerics_matrix", REPO_ROOT / ".ci" / "numerics_matrix.py"
)
matrix = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(matrix)


def test_the_environments_change_what_decides_float64_results(tmp_path):
    envs = matrix.environments(tmp_path)
    assert envs["default"] == {}
    assert envs["one-thread-no-jit"]["NUMBA_DISABLE_JIT"] == "1"
    assert envs["baseline-simd"]["ATEN_CPU_CAPABILITY"] == "default"
    assert len([name for name, extra in envs.items() if extra]) >= 2


def test_a_verdict_that_differs_is_named_and_an_equal_one_is_not():
    results = {
        "default": {"A": "refuted (x)", "B": "holds (y)"},
        "baseline-simd": {"A": "holds (held)", "B": "holds (z)"},
    }
    (line,) = matrix.compare(results)
    assert line.startswith("A:") and "baseline-simd: holds" in line
    assert matrix.compare(results, only={"B"}) == []
    assert "not run (missing)" in matrix.compare({"x": {"C": "holds"}, "y": {}})[0]


def test_the_baseline_column_is_a_reports_verdicts(tmp_path):
    report = tmp_path / "claims.json"
    report.write_text(json.dumps({"claims": [{"id": "A", "verdict": "refuted"}]}))
    assert matrix.verdicts_of(report) == {"A": "refuted (claims.json)"}
    assert "TF-GEQ-GLOBAL" in matrix.saved_counterexamples()


def test_the_matrix_profiles_decide_the_explicit_examples_first():
    profiles.register_profiles()
    replay = settings.get_profile("replay")
    assert tuple(replay.phases) == (Phase.explicit,) and replay.derandomize
    numerics = settings.get_profile("numerics")
    assert Phase.explicit in numerics.phases and Phase.shrink not in numerics.phases
    assert numerics.max_examples == profiles.NUMERICS_EXAMPLES
    assert profiles.scaled_examples(50, "numerics") == profiles.NUMERICS_EXAMPLES
