"""strategies.ladder: each rung's box, the size draws, and what each family promises."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import NoSuchExample

from strategies.cross_svm import independent_query_instances
from strategies.instances import INDEPENDENT_QUERIES
from strategies.ladder import (
    FAMILIES,
    RUNGS,
    clustered_problem,
    conflict_problem,
    draw_sizes,
    ladder_problems,
    paper_problem,
    rung_sizes,
    tied_problem,
)
from strategies.prompt import _size_rule, global_opt_instances


def test_the_rungs_are_the_issues_boxes():
    assert (RUNGS["small"].n_max, RUNGS["small"].T_max, RUNGS["small"].d_max) == (4, 6, 6)
    medium, large = RUNGS["medium"], RUNGS["large"]
    assert (medium.n_max, medium.T_max, medium.d_max) == (32, 32, 128)
    assert (large.n_max, large.T_max, large.d_max, large.nT_max) == (256, 256, 1024, 16_384)
    assert large.contains(64, 256, 1024) and not large.contains(65, 256, 8)
    assert not medium.contains(4, 1, 8)  # T ≥ 2


@pytest.mark.parametrize("rung", list(RUNGS))
def test_draw_sizes_stay_in_the_box_and_reach_both_regimes(rung):
    box = RUNGS[rung]
    rng = np.random.default_rng(0)
    sizes = [draw_sizes(box, rng) for _ in range(300)]
    assert all(box.contains(*s) for s in sizes)
    over = [n * (T - 1) > d for n, T, d in sizes]
    assert 0.2 < np.mean(over) < 0.95  # both d ≥ n(T − 1) and n(T − 1) > d are drawn
    ns, Ts, ds = zip(*sizes, strict=True)
    # log-uniform: the small sizes are not starved, and the top of each range is reached
    assert min(ns) == 1 and max(ns) >= box.n_max // 2
    assert min(Ts) == 2 and max(Ts) >= box.T_max // 2
    assert min(ds) == 1 and max(ds) >= box.d_max // 2


@pytest.mark.parametrize("family", list(FAMILIES))
def test_families_are_deterministic_and_sized(family):
    a, b = FAMILIES[family](3, 5, 4, 7), FAMILIES[family](3, 5, 4, 7)
    assert a.keys.shape == (3, 5, 4) and a.scores.shape == (3, 5)
    assert np.array_equal(a.keys.numpy(), b.keys.numpy())
    assert np.array_equal(a.scores.numpy(), b.scores.numpy())
    c = FAMILIES[family](3, 5, 4, 8)
    assert not np.array_equal(a.keys.numpy(), c.keys.numpy())


def test_paper_scores_are_the_label_times_the_head_on_each_token():
    problem = paper_problem(4, 6, 5, 0)
    keys, scores = problem.keys.numpy(), problem.scores.numpy()
    # γ_it = y_i·X_itᵀv with ‖v‖ = 1 and y_i = ±1: each input's scores are ±(the keys' shared
    # projection), so one v and one sign per input reproduce them
    v, *_ = np.linalg.lstsq(keys[0], scores[0], rcond=None)
    assert np.isclose(np.linalg.norm(v), 1.0)
    for i in range(4):
        sign = np.sign(scores[i] @ (keys[i] @ v))
        np.testing.assert_allclose(scores[i], sign * keys[i] @ v, atol=1e-12)


def test_ties_have_unit_keys_and_integer_scores():
    problem = tied_problem(5, 6, 3, 1)
    keys, scores = problem.keys.numpy(), problem.scores.numpy()
    np.testing.assert_allclose(np.linalg.norm(keys, axis=-1), 1.0, atol=1e-15)
    assert set(np.unique(scores)) <= {-2.0, -1.0, 0.0, 1.0, 2.0}
    assert any(len(set(row)) < len(row) for row in scores.tolist())  # exact ties occur


def test_clustered_tokens_have_three_types():
    problem = clustered_problem(6, 8, 16, 2)
    keys, scores = problem.keys.numpy(), problem.scores.numpy()
    assert len(np.unique(scores)) <= 3
    for level in np.unique(scores):
        members = keys[scores == level]
        # one type: every key within a few noise widths (0.05·√d) of the type's mean
        spread = np.linalg.norm(members - members.mean(0), axis=-1).max()
        assert spread < 6 * 0.05 * np.sqrt(16)


def test_conflict_pairs_share_their_complement_part_and_lead_it():
    """Each input's first two tokens differ only in D (the first d // 2 coordinates), sit one
    unit above the others along the last coordinate, and outscore them."""
    n, T, d = 7, 5, 6
    problem = conflict_problem(n, T, d, 3)
    keys, scores = problem.keys.numpy(), problem.scores.numpy()
    m = d // 2
    np.testing.assert_array_equal(keys[:, 0, m:], keys[:, 1, m:])
    assert not np.array_equal(keys[:, 0, :m], keys[:, 1, :m])
    lead = keys[:, :2, -1].min(axis=1) - keys[:, 2:, -1].max(axis=1)
    assert (lead > 0.4).all()  # 1 less the others' N(0, 0.1²) noise along it
    assert (scores[:, :2].min(axis=1) > scores[:, 2:].max(axis=1)).all()


def test_conflict_family_has_a_shared_limit():
    """The family exists for the engine's general limit: some small draw reaches it."""
    from models.flows.limits import follow
    from models.numerics import failures

    kinds = []
    for seed in range(12):
        with failures.tolerate(failures.GRADIENT_FLOW):
            kinds.append(follow(conflict_problem(6, 3, 2, seed), None).kind)
    assert "shared" in kinds, kinds


@settings(max_examples=30, deadline=None, database=None)
@given(st.sampled_from(list(RUNGS)), st.sampled_from(list(FAMILIES)), st.data())
def test_ladder_problems_draw_inside_the_rung(rung, family, data):
    problem, (n, T, d), seed = data.draw(ladder_problems(rung, family))
    assert RUNGS[rung].contains(n, T, d)
    assert tuple(problem.keys.shape) == (n, T, d)
    np.testing.assert_array_equal(problem.scores.numpy(), FAMILIES[family](n, T, d, seed).scores)


@pytest.mark.parametrize("rung", list(RUNGS))
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_rung_sizes_stay_in_the_box(rung, data):
    """The prompt strategies' sizes of a rung lie in its box, n·T ≤ its cap included (the large
    rung's T is a rule of n)."""
    sizes = rung_sizes(rung)
    n = data.draw(sizes["n"])
    T = data.draw(_size_rule(sizes["T"], n))
    dk = data.draw(sizes["dk"])
    assert RUNGS[rung].contains(n, T, dk + 1), (n, T, dk)


def test_the_large_rung_reaches_its_corners():
    """Its T rule allows T = 256 at n ≤ 64 and n = 256 at T ≤ 64 (the cap, not a smaller box)."""
    rule = rung_sizes("large")["T"]
    assert find(rule(64), lambda T: T == 256) == 256
    assert find(rule(256), lambda T: T == 64) == 64
    with pytest.raises(NoSuchExample):
        find(rule(256), lambda T: T > 64)


@settings(max_examples=5, deadline=None)
@given(inst=global_opt_instances(n=st.just(3), T=lambda n: st.just(n + 1), dk=st.just(9)))
def test_prompt_strategies_draw_T_after_n_by_its_rule(inst):
    assert tuple(inst.keys.shape) == (3, 4, 10)


@settings(max_examples=10, deadline=None)
@given(
    inst=independent_query_instances(
        n=st.integers(1, RUNGS["medium"].n_max),
        T=st.integers(2, RUNGS["medium"].T_max),
        extra=st.integers(0, 16),
    )
)
def test_independent_query_instances_draw_inside_the_medium_box(inst):
    """With the medium rung's n and T (TF-FEAS-SUFF-MEDIUM), the instances stay in the box and
    meet the premise: n ≤ d, linearly independent queries, and a selection α ∈ [T]^n."""
    assert RUNGS["medium"].contains(inst.n, inst.T, inst.d)
    assert inst.n <= inst.d and INDEPENDENT_QUERIES in inst.assumptions
    assert np.linalg.matrix_rank(inst.Z.numpy()) == inst.n
    assert len(inst.alpha) == inst.n and all(0 <= a < inst.T for a in inst.alpha)


def test_independent_query_instances_default_to_the_small_sizes():
    """Without size arguments the strategy draws the small claims' sizes (n ≤ 5, T ≤ 8,
    n ≤ d ≤ n + 3)."""
    inst = find(independent_query_instances(), lambda i: i.n >= 3 and i.T >= 5)
    assert inst.n <= 5 and inst.T <= 8 and inst.n <= inst.d <= inst.n + 3


def test_as_prompt_instance_keeps_the_keys_and_scores():
    """The paper's-data form of a (keys, scores) problem (X = [keys | scores], y = 1, v and W
    reading the score column and the keys): the same problem."""
    from strategies.ladder import as_prompt_instance

    problem = conflict_problem(5, 4, 3, 11)
    inst = as_prompt_instance(problem, 11, "conflict")
    keys, scores = problem._np
    np.testing.assert_array_equal(inst.problem.scores.numpy(), scores)
    np.testing.assert_array_equal(inst.problem.keys.numpy()[..., :3], keys)
    assert not inst.problem.keys.numpy()[..., 3].any()  # the score column adds no logit
