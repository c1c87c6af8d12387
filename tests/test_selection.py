"""Unit tests of support sets and Def. 2 local optimality (models/oracles/selection.py; spec §1.5,
§4)."""

import numpy as np
import pytest

from models.oracles import selection
from models.oracles.selection import (
    UndecidedError,
    enumerate_locally_optimal,
    global_opt,
    has_unique_opt,
    local_optimality,
    support_sets,
)
from models.oracles.svm import SVMSolution, att_svm

# Spec §4, Fig. 1: keys (−0.1, 1), (1, 0), (0, 0); panel (a) ties the two non-optimal scores.
FIG1_KEYS = np.array([[[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]]])
FIG1_SCORES = {"a": np.array([[1.0, 0.9, 0.9]]), "b": np.array([[1.0, 0.9, 0.0]])}


def random_instance(seed: int, n: int = 2, T: int = 3):
    """Feasible keys (dk = n(T−1)) and continuous scores with a unique optimum."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, T, n * (T - 1))), rng.normal(size=(n, T))


# --------------------------------------------------------------------------------- Figure 1


def test_figure1_b_local_token_is_locally_optimal():
    verdict = local_optimality(FIG1_KEYS, FIG1_SCORES["b"], [1])
    assert verdict.feasible and verdict.locally_optimal
    assert [s.tolist() for s in verdict.support] == [[2]]
    assert verdict.violations == [] and verdict.vacuous_inputs == ()


def test_figure1_a_tie_with_support_token_is_not_locally_optimal():
    """Token (1, 0) and its support token (0, 0) both score 0.9: strictness fails."""
    verdict = local_optimality(FIG1_KEYS, FIG1_SCORES["a"], [1])
    assert verdict.feasible and not verdict.locally_optimal
    assert verdict.violations == [(0, 2, 0.0)]


@pytest.mark.parametrize("panel", ["a", "b"])
def test_figure1_third_token_never_and_global_always(panel):
    scores = FIG1_SCORES[panel]
    third = local_optimality(FIG1_KEYS, scores, [2])
    assert third.feasible and not third.locally_optimal
    assert [s.tolist() for s in third.support] == [[0, 1]]
    assert local_optimality(FIG1_KEYS, scores, global_opt(scores)).locally_optimal


@pytest.mark.parametrize(("panel", "expected"), [("a", [(0,)]), ("b", [(0,), (1,)])])
def test_figure1_enumeration(panel, expected):
    assert enumerate_locally_optimal(FIG1_KEYS, FIG1_SCORES[panel]) == expected


# --------------------------------------------------------------------------- Def. 2 checks


@pytest.mark.parametrize("seed", range(4))
def test_global_optimum_is_locally_optimal(seed):
    """opt beats every other token, so in particular every support token (spec §1.5)."""
    keys, scores = random_instance(seed)
    assert has_unique_opt(scores)
    assert local_optimality(keys, scores, global_opt(scores)).locally_optimal


@pytest.mark.parametrize("seed", range(3))
def test_enumeration_is_invariant_under_positive_score_scaling(seed):
    """Scaling v by c > 0 scales the scores and leaves Def. 2 unchanged (spec §2.9)."""
    keys, scores = random_instance(seed)
    found = enumerate_locally_optimal(keys, scores)
    assert tuple(global_opt(scores)) in found
    assert enumerate_locally_optimal(keys, 3.0 * scores) == found


def test_vacuous_input_places_no_score_condition():
    """Input 1's only margin is 10·p₁ ≥ 10 > 1, so it has no support token and its α may be
    its lowest-scoring token (spec §1.5, vacuous case)."""
    keys = np.array([[[0.0, 0.0], [-1.0, 0.0]], [[10.0, 0.0], [0.0, 0.0]]])
    scores = np.array([[1.0, 0.0], [-5.0, 5.0]])
    verdict = local_optimality(keys, scores, [0, 0])
    assert verdict.locally_optimal
    assert verdict.vacuous_inputs == (1,)
    assert [s.tolist() for s in verdict.support] == [[1], []]


def test_near_tie_counts_as_tie():
    scores = np.array([[1.0, 0.9, 0.9 - 1e-14]])
    assert not local_optimality(FIG1_KEYS, scores, [1]).locally_optimal
    scores = np.array([[1.0, 0.9, 0.9 - 1e-9]])
    assert local_optimality(FIG1_KEYS, scores, [1]).locally_optimal


def test_infeasible_selection_is_not_locally_optimal():
    keys = np.array([[[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]])  # midpoint: spec F11
    verdict = local_optimality(keys, np.array([[5.0, 0.0, 0.0]]), [0])
    assert not verdict.feasible and not verdict.locally_optimal
    assert verdict.svm.status == "infeasible" and "infeasible" in verdict.reason


def test_undecided_svm_is_never_locally_optimal(monkeypatch):
    undecided = SVMSolution("inaccurate", None, None, None, "test", "residuals too large")
    monkeypatch.setattr(selection, "att_svm", lambda *args, **kwargs: undecided)
    verdict = local_optimality(FIG1_KEYS, FIG1_SCORES["b"], [0])
    assert not verdict.locally_optimal and "undecided" in verdict.reason
    with pytest.raises(UndecidedError, match="residuals too large"):
        enumerate_locally_optimal(FIG1_KEYS, FIG1_SCORES["b"])


# --------------------------------------------------------------------------- support sets


def test_support_sets_report_duplicated_tokens():
    """Both copies of a support token are tight, though the SVM keeps one row for them."""
    keys = np.concatenate([FIG1_KEYS, FIG1_KEYS[:, [2]]], axis=1)
    assert [s.tolist() for s in support_sets(keys, [1])] == [[2, 3]]


def test_support_sets_match_the_active_rows():
    keys, _ = random_instance(5, n=3)
    alpha = np.array([0, 1, 2])
    sol = att_svm(keys, alpha)
    active = {row for row, on in zip(sol.rows, sol.active, strict=True) if on}
    support = {(i, int(t)) for i, ts in enumerate(support_sets(keys, alpha, sol)) for t in ts}
    assert support == active


def test_support_sets_require_a_certified_solution():
    keys = np.array([[[1.0, 1.0], [0.0, 0.0], [2.0, 2.0]]])
    with pytest.raises(ValueError, match="infeasible"):
        support_sets(keys, [0])


# ----------------------------------------------------------------------- optima and limits


def test_global_opt_and_uniqueness():
    scores = np.array([[0.1, 0.7, 0.3], [2.0, -1.0, 1.0]])
    assert global_opt(scores).tolist() == [1, 0]
    assert has_unique_opt(scores)
    assert not has_unique_opt(np.array([[1.0, 1.0, 0.0]]))
    assert not has_unique_opt(np.array([[1.0, 1.0 - 1e-13, 0.0]]))
    assert has_unique_opt(np.array([[3.0]]))


def test_enumeration_refuses_large_grids():
    keys, scores = random_instance(0, n=3, T=4)
    with pytest.raises(ValueError, match="limit"):
        enumerate_locally_optimal(keys, scores, limit=63)


def test_scores_shape_is_checked():
    with pytest.raises(ValueError, match="scores"):
        local_optimality(FIG1_KEYS, np.zeros((1, 2)), [0])


def test_norm_local_optimality_matches_def2_for_the_frobenius_svm():
    """With the Frobenius norm_svm the verdict and the support are Def. 2's (local_optimality on
    the keys vec(x_it z_iᵀ)), on every selection of small official draws."""
    import itertools

    import torch

    from models.oracles.normsvm import norm_svm
    from models.oracles.selection import norm_local_optimality

    gen = torch.Generator().manual_seed(4)
    n, T, d = 2, 3, 3
    X = torch.nn.functional.normalize(
        torch.randn(n, T, d, generator=gen, dtype=torch.float64), dim=-1
    )
    Z = torch.nn.functional.normalize(torch.randn(n, d, generator=gen, dtype=torch.float64), dim=-1)
    scores = torch.randn(n, T, generator=gen, dtype=torch.float64).numpy()
    keys = torch.einsum("ita,ib->itab", X, Z).reshape(n, T, d * d).numpy()
    seen = set()
    for alpha in itertools.product(range(T), repeat=n):
        alpha = np.array(alpha)
        ours = norm_local_optimality(X, Z, scores, alpha, norm_svm(X, Z, alpha, "fro"))
        ref = local_optimality(keys, scores, alpha)
        assert ours.locally_optimal == ref.locally_optimal
        assert [s.tolist() for s in ours.support] == [s.tolist() for s in ref.support]
        seen.add(ours.locally_optimal)
    assert seen == {True, False}


def test_norm_local_optimality_flags_a_higher_scoring_nuclear_support_token():
    """Reversing the scores makes α = opt's support tokens outscore it: not locally optimal."""
    import torch

    from models.oracles.normsvm import norm_svm
    from models.oracles.selection import norm_local_optimality

    gen = torch.Generator().manual_seed(7)
    X = torch.nn.functional.normalize(
        torch.randn(3, 4, 4, generator=gen, dtype=torch.float64), dim=-1
    )
    Z = torch.nn.functional.normalize(torch.randn(3, 4, generator=gen, dtype=torch.float64), dim=-1)
    scores = torch.randn(3, 4, generator=gen, dtype=torch.float64).numpy()
    alpha = scores.argmax(1)
    sol = norm_svm(X, Z, alpha, "nuc")
    good = norm_local_optimality(X, Z, scores, alpha, sol)
    bad = norm_local_optimality(X, Z, -scores, alpha, sol)
    assert good.locally_optimal and good.feasible
    assert not bad.locally_optimal and bad.violations
    assert all(t in good.support[i] for i, t, _ in bad.violations)
