"""Unit tests of models/check/predict.py, the computation behind `python -m theorems check`: the
reported numbers against independent recomputations on small hand instances."""

import numpy as np
import pytest
import torch

from models.check.predict import predict_embedding, predict_prompt
from models.oracles.selection import local_optimality
from models.problems.attention import PromptProblem
from models.problems.embedding import EmbeddingProblem, one_step

F64 = torch.float64


def test_embedding_max_error_is_the_paper_form_error():
    """``max_error`` is max_s |⟨E¹_s, v⟩ − (η0/2)α_s|, the error the paper bound is stated for
    (Lemma 4.1 predicts ⟨E¹_s, v⟩ ≈ (η0/2)α_s, the one-step shift being η0·β_s with β ≈ α/2).
    Token 0 occurs only in the positive sequence and token 2 only in the negative one, so
    α = (1/3, 0, −1/3) ≠ 0 and the (η0/2)α and η0·α forms differ (the example instance of
    test_cli has α = 0, where the factor cannot matter)."""
    sequences = torch.tensor([[0, 0, 1], [2, 2, 1]])
    y = torch.tensor([1.0, -1.0], dtype=F64)
    E0 = torch.tensor([[0.1, 0.0], [0.0, 0.1], [0.1, 0.1]], dtype=F64)
    v = torch.tensor([1.0, 0.0], dtype=F64)
    eta0 = 0.5
    out = predict_embedding(sequences, y, E0, v, eta0)
    step = one_step(EmbeddingProblem(sequences=sequences, y=y, E=E0, v=v), eta0)
    assert torch.allclose(step.alpha, torch.tensor([1 / 3, 0.0, -1 / 3], dtype=F64), atol=1e-15)
    u1 = step.E1 @ v
    expected = float((u1 - eta0 / 2 * step.alpha).abs().max())
    assert abs(float((u1 - eta0 * step.alpha).abs().max()) - expected) > 0.05  # discriminates
    assert out["max_error"] == pytest.approx(expected, rel=1e-13)
    assert abs(out["max_error"] - float(step.r3_error.max())) <= 1e-15  # ‖v‖ = 1: R3's error


def test_prompt_local_optimality_is_that_of_the_selection_not_the_global_optimum():
    """``locally_optimal`` answers Def. 2 for the α that gradient flow selected. Hand instance
    (spec F11): one input, keys k0 = (0, 1), k1 = (−1, 0), k2 = (1, 2), k3 = (0, 4) and scores
    1, 0, 0, 0.5 (x_t = (k_t, γ_t), W projects onto the keys, v reads γ). The global optimum
    opt = 0 has k0 = (k1 + k2)/2, so no p separates it: ATT-SVM(opt) is infeasible and opt is
    not locally optimal. Flow from 0 selects token 3, whose ATT-SVM solution (−0.2, 0.4)
    has the single support token 2 (margins 1.4, 1, 1.2 to tokens 1, 2, 0), and γ_2 = 0 < 0.5:
    the selection is locally optimal, so the report must say True with the selection's reason,
    where the global optimum's verdict would be False ("infeasible")."""
    keys = [[0.0, 1.0], [-1.0, 0.0], [1.0, 2.0], [0.0, 4.0]]
    gammas = [1.0, 0.0, 0.0, 0.5]
    X = torch.tensor([[[*k, g] for k, g in zip(keys, gammas, strict=True)]], dtype=F64)
    y = torch.tensor([1.0], dtype=F64)
    W = torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=F64))
    v = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    out = predict_prompt(X, y, v, W, "logistic", torch.zeros(3, dtype=F64))

    assert out["opt"] == [0] and out["svm_global"]["status"] == "infeasible"
    assert out["selected"] == [3], out
    assert out["status"] == "converged", out["reason"]
    np.testing.assert_allclose(out["svm_selected"]["p"], [-0.2, 0.4, 0.0], atol=1e-9)

    problem = PromptProblem.from_data(X, y, v, W, "logistic")
    of_selection = local_optimality(problem.keys, problem.scores, [3])
    of_global = local_optimality(problem.keys, problem.scores, [0])
    assert of_selection.locally_optimal and not of_global.locally_optimal
    assert out["locally_optimal"] is True
    assert out["locally_optimal_reason"] == of_selection.reason
    assert out["locally_optimal_reason"] == "every support token scores strictly below α_i"


def test_prompt_svm_global_names_its_support_tokens_per_input():
    """When ATT-SVM(opt) is solved, the answer lists each input's support tokens (those at
    margin 1), the ones Def. 2 reads; here computed again from the solution itself."""
    from models.oracles.selection import support_sets
    from models.oracles.svm import att_svm

    keys = [[[1.0, 0.0], [0.0, 1.0], [-1.0, 0.2]], [[1.0, 1.0], [0.0, -1.0], [-1.0, 0.5]]]
    gammas = [[1.0, 0.0, 0.2], [0.9, 0.0, 0.1]]
    X = torch.tensor(
        [
            [[*k, g] for k, g in zip(ks, gs, strict=True)]
            for ks, gs in zip(keys, gammas, strict=True)
        ],
        dtype=F64,
    )
    y = torch.ones(2, dtype=F64)
    W = torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=F64))
    v = torch.tensor([0.0, 0.0, 1.0], dtype=F64)
    out = predict_prompt(X, y, v, W, "logistic", torch.zeros(3, dtype=F64))
    assert out["opt"] == [0, 0] and out["svm_global"]["status"] == "optimal"
    problem = PromptProblem.from_data(X, y, v, W, "logistic")
    sol = att_svm(problem.keys, [0, 0])
    expected = [s.tolist() for s in support_sets(problem.keys, [0, 0], sol)]
    assert out["svm_global"]["support"] == expected
    assert all(len(s) >= 1 for s in expected)
