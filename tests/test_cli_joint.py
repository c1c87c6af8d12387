"""`python -m theorems check` on joint (W, v) cross-attention instances (docs/instances.md,
"Joint (W, v) training": {"model": "cross", "train": "joint", "p": …}).

What the answers are checked against is computed here from the printed vectors, not taken from
the code that printed them: the selections the official notebook printed, the SVMs' constraints
at the printed selection, and the correlations recomputed from the printed W, v and SVMs.
"""

import math
from pathlib import Path

import numpy as np
import pytest

from models.flows.mirror_joint import JOINT_PRINTED_ALPHA, official_joint_data
from strategies.mirror import joint_data
from tests.mutmut_aware import cache_key, cached
from tests.test_cli_cross import run_check
from theorems.framework import cli, instances

REPO_ROOT = Path(__file__).resolve().parent.parent
#: Slack of a certified SVM's constraints (spec tfsvm §7: certified margin ≥ 1 − 1e-6).
MARGIN_TOL = 1e-6


def official(p: float) -> dict:
    """The official joint instance (synthetic-data/joint_training.py): n = 2, T = 3, d = 2."""
    X, y, Z = official_joint_data()
    return {
        "model": "cross",
        "X": X.tolist(),
        "Z": Z.tolist(),
        "y": y.tolist(),
        "train": "joint",
    } | {"p": p}


_CACHE: dict[str, dict] = {}


@pytest.fixture
def answer(tmp_path, capsys):
    def get(doc):
        def compute():
            code, out, err = run_check(tmp_path, capsys, doc)
            assert code == 0, err
            return out

        return cached(cache_key(doc), compute, _CACHE)

    return get


def _corr(A, B) -> float:
    A, B = np.asarray(A, dtype=float).ravel(), np.asarray(B, dtype=float).ravel()
    return float(A @ B / (np.linalg.norm(A) * np.linalg.norm(B)))


@pytest.mark.parametrize("p", [1.75, 2.0, 3.0])
def test_the_official_instance_selects_what_the_notebook_printed(answer, p):
    """α̂ = (1, 0) at p = 1.75 and 2, (0, 0) at p = 3 (0-based; plotter.ipynb), certified."""
    out = answer(official(p))
    assert out["model"] == "cross" and out["train"] == "joint" and out["p"] == p
    assert tuple(out["selected"]) == JOINT_PRINTED_ALPHA[p]
    assert out["status"] == "certified", out["reason"]
    assert out["svm_lp"]["alpha"] == out["selected"] == out["v_svm"]["alpha"]
    assert out["v_svm"]["support"] == [True, True]
    assert out["training"]["init"] == "W = 0, v = 0"


@pytest.mark.parametrize("p", [1.75, 2.0, 3.0])
def test_the_printed_svms_and_correlations_check_out(answer, p):
    """The printed SVMs meet their constraints at the printed selection, and the printed
    correlations are those of the printed W, v with them; both shrank at least at the rate."""
    out = answer(official(p))
    X, y, Z = (np.asarray(t) for t in official_joint_data())
    alpha = np.asarray(out["selected"])
    n = len(alpha)
    W_mm, v_mm = np.asarray(out["svm_lp"]["W"]), np.asarray(out["v_svm"]["v"])
    chosen = X[np.arange(n), alpha]
    for i in range(n):
        for t in range(X.shape[1]):
            if t != alpha[i]:
                assert (chosen[i] - X[i, t]) @ W_mm @ Z[i] >= 1 - MARGIN_TOL
    assert (y * (chosen @ v_mm)).min() >= 1 - MARGIN_TOL
    assert math.isclose(out["corr_W"], _corr(out["training"]["W"], W_mm), abs_tol=1e-12)
    assert math.isclose(out["corr_v"], _corr(out["training"]["v"], v_mm), abs_tol=1e-12)
    assert out["shrink_W"] >= out["rate"] or 1 - out["corr_W"] <= 1e-6
    assert out["shrink_v"] >= out["rate"] or 1 - out["corr_v"] <= 1e-6
    assert out["rate"] == pytest.approx(2 ** (1 / (p - 1)))


def test_a_loose_v_svm_is_inconclusive_and_says_which_input(answer):
    """The shrunk counterexample of MD-JOINT (n = 2, T = 2, d = 2, seed 2): input 0's selected
    token is not a support vector of the v-SVM, so W's limit is not W^mm_α̂(ℓp)."""
    inst = joint_data(2, 2, 2, seed=2)
    doc = {"model": "cross", "X": inst.X.tolist(), "Z": inst.Z.tolist(), "y": inst.y.tolist()}
    out = answer(doc | {"train": "joint", "p": 2})
    assert out["status"] == "inconclusive"
    assert "not a support vector of the ℓp v-SVM" in out["reason"]
    assert out["v_svm"]["support"].count(False) == 1
    assert f"input(s) {[out['v_svm']['support'].index(False)]}" in out["reason"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"v": [1.0, 1.0]}, 'error: field "v": joint training learns v from v(0) = 0: omit "v"'),
        ({"p": None}, 'error: field "p": missing: joint training is ℓp mirror descent'),
        ({"param": "KQ"}, 'error: field "param": joint training trains W itself ("W")'),
        ({"train": "both"}, "error: field \"train\": unknown training 'both'; choose"),
        ({"p": 1}, 'error: field "p": the ℓp exponent must be a finite number > 1, got 1'),
        ({"loss": "correlation"}, 'error: field "loss": joint training needs a strictly'),
    ],
)
def test_bad_joint_input_is_one_line_and_exit_2(tmp_path, capsys, change, message):
    doc = {k: v for k, v in (official(2.0) | change).items() if v is not None}
    code, _, err = run_check(tmp_path, capsys, doc)
    assert code == 2
    assert err.startswith(message) and err.count("\n") == 1, err


def test_load_instance_routes_joint_to_its_predictor():
    model, fields = instances.load_instance(official(3))
    assert model == "cross-joint" and set(fields) == {"X", "Z", "y", "loss", "p"}
    assert fields["p"] == 3.0 and fields["loss"] == "logistic"
    assert cli.PREDICTORS[model][0] == "models.check.joint_predict"
    fixed = {k: v for k, v in official(3).items() if k != "train"} | {"v": [1.0, 1.0]}
    assert instances.load_instance(fixed)[0] == "cross"


def test_the_docs_describe_the_joint_fields_and_answer():
    text = (REPO_ROOT / "docs" / "instances.md").read_text(encoding="utf-8")
    section = text.split("### Joint (W, v) training")[1].split("\n## ")[0]
    for name in ("train", "p", "selected", "training", "svm_lp", "v_svm", "support", "corr_W"):
        assert f"`{name}`" in section, name
    for name in ("corr_v", "shrink_W", "shrink_v", "rate", "status", "reason", "history"):
        assert f"`{name}`" in section, name
