"""`python -m theorems check` on flows to the general (shared-mass) limit (models.flows.shared):
the prompt answer's `shared` block, and cross-attention's W training, checked against closed
forms computed here, independently of the engine.

The instance is tests/test_shared.py's hand instance as paper data: with W = I the keys are X
and the scores y_i·vᵀx_it, so X = [KEYS | y·SCORES] and v = e4 give exactly SCORES, with one
more key coordinate (the score). In inputs 0 and 1 tokens 0 and 1 differ by e = (1, 0, 0, 6)
and in input 2 by −e: no direction selects one token in every input, the flow keeps {0, 1}
sharing the mass in every input, and
- the finite part lies along e: the within-set logit difference z = eᵀq* solves the balance
  of test_shared.closed_form_z (the reduced loss only sees z), so q* = z·e/‖e‖² and the
  shares are σ(z) (inputs 0, 1) and 1 − σ(z) (input 2);
- p_dir is the min-norm p with eᵀp = 0 and margin 1 against token 2, where both margin rows
  bind (KKT: their multipliers are positive): the least-norm solution of three equations.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.test_shared import KEYS, SCORES, closed_form_z, sigmoid
from theorems.framework import cli

Y = [1, 1, -1]
X_SHARED = np.concatenate([KEYS, (np.array(Y)[:, None] * SCORES)[..., None]], axis=-1).tolist()
PROMPT_SHARED = {"model": "prompt", "X": X_SHARED, "y": Y, "v": [0.0, 0.0, 0.0, 1.0]}
#: The same keys as cross-attention data: z_i = e4 makes vec(x zᵀ) hold x in one column.
CROSS_SHARED = {
    "model": "cross",
    "X": X_SHARED,
    "Z": [[0.0, 0.0, 0.0, 1.0]] * 3,
    "y": Y,
    "v": [0.0, 0.0, 0.0, 1.0],
}
E_DIFF = np.array([1.0, 0.0, 0.0, 6.0])


def _check(tmp_path, doc: dict) -> dict:
    path, out = tmp_path / "instance.json", tmp_path / "answer.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert cli.main(["check", str(path), "--out", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def closed_form_direction() -> np.ndarray:
    """The unit p_dir: least-norm p with eᵀp = 0 and both token-2 margins equal to 1, checked
    to be the optimum (the margin rows' multipliers are positive)."""
    A = np.array([E_DIFF, [1.0, 0.2, 1.0, 7.0], [0.0, 0.6, 1.0, -7.0]])
    mu = np.linalg.solve(A @ A.T, np.array([0.0, 1.0, 1.0]))
    assert (mu[1:] > 0).all()
    p = A.T @ mu
    return p / np.linalg.norm(p)


@pytest.fixture(scope="module")
def prompt_answer(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ATTN_PROGRESS", "0")
        return _check(tmp_path_factory.mktemp("shared"), PROMPT_SHARED)


def test_the_engine_certifies_the_shared_limit_on_the_paper_data():
    from models.flows.limits import follow
    from models.problems.attention import PromptProblem

    problem = PromptProblem.from_data(PROMPT_SHARED["X"], Y, PROMPT_SHARED["v"])
    assert np.array_equal(problem.scores.numpy(), SCORES)
    assert follow(problem, None).kind == "shared"


def test_a_prompt_flow_to_a_shared_limit_answers_shared(prompt_answer):
    a = prompt_answer
    assert a["status"] == "shared", a["reason"]
    assert a["reason"].startswith("converged to a shared-mass limit: the inputs' token sets")
    assert a["minimiser"] is None
    sh = a["shared"]
    assert sh["sets"] == [[0, 1], [0, 1], [0, 1]]
    assert sh["p_dir_status"] == "optimal"
    assert sh["one_minus_cos"] <= 1e-6 and sh["heading"] <= 1e-6
    lo, hi = sh["hessian_eigenvalues"]
    assert 0 < lo <= hi
    # the run's end point lies along p_dir, far out, at the limit's loss
    assert a["p_norm"] >= 1e3
    assert a["loss"] == pytest.approx(sh["reduced_loss"], abs=1e-9)


def test_the_shared_block_has_the_closed_form_limit(prompt_answer):
    sh = prompt_answer["shared"]
    z = closed_form_z()
    s = sigmoid(z)
    assert np.abs(np.array(sh["p_dir"]) - closed_form_direction()).max() <= 1e-9
    assert np.abs(np.array(sh["p_fin"]) - z * E_DIFF / (E_DIFF @ E_DIFF)).max() <= 1e-9
    want = [[[0, s], [1, 1 - s]], [[0, s], [1, 1 - s]], [[0, 1 - s], [1, s]]]
    for got, row in zip(sh["shares"], want, strict=True):
        assert [t for t, _ in got] == [t for t, _ in row]
        assert [x for _, x in got] == pytest.approx([x for _, x in row], abs=1e-10)

    def ell(m):
        return math.log1p(math.exp(-m))

    floor = (2 * ell(6 * s - 3) + ell(3 - 6 * s)) / 3  # inputs 0, 1: m = 6σ − 3; input 2: 3 − 6σ
    assert sh["reduced_loss"] == pytest.approx(floor, abs=1e-12)


def test_a_flow_to_one_token_per_input_has_no_shared_block():
    from models.check.predict import predict_prompt

    # input 0 selects token 0 (score 1 > 0), input 1 token 1 (score 1 > 0): separable
    out = predict_prompt([[[1.0, 0.0], [0.0, 1.0]], [[0.0, -1.0], [-1.0, 0.5]]], [1, -1], [1, 0])
    assert out["status"] == "converged" and out["shared"] is None, out["reason"]
    assert out["one_minus_cos"] <= 1e-6 and out["reason"].startswith("direction reached")


def test_cross_w_training_to_a_shared_limit_says_shared(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    training = _check(tmp_path, CROSS_SHARED)["training"]
    assert training["status"] == "shared", training["reason"]
    assert training["reason"].startswith("converged to a shared-mass limit")
    assert "W → R·W_dir + W_fin" in training["reason"]
    assert training["one_minus_cos"] <= 1e-6 and training["max_other_prob"] <= 1e-6
    W = np.array(training["W"])
    assert training["W_norm"] == pytest.approx(float(np.linalg.norm(W)))
    # W = vec⁻¹(p) with p along the prompt problem's p_dir (its keys are x_it in column 4)
    col = W[:, 3] / np.linalg.norm(W[:, 3])
    assert np.abs(col - closed_form_direction()).max() <= 1e-5
