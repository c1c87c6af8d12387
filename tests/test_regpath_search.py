"""The regularization path's global searches (models.flows.regpath), each on objectives whose minima
are known: the angle grid (its local minima, the grid-spacing certificate ``rival_minima``, the
zoom), the restart summary (clusters, agreement, gap, flat rows), the interior and sector
searches, the cap's starts, the restart seeds, and how a winner is packaged (``_result``).

tests/test_regpath.py checks the same code end to end on attention losses; tests/test_descent.py
checks the descent engine underneath."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.flows.regpath import (
    SAME_POINT,
    Objective,
    _candidate_selections,
    _cap_starts,
    _check_radius,
    _clusters,
    _Descent,
    _Found,
    _refine_angles,
    _result,
    _steps,
    circle_search,
    grid_minima,
    interior_search,
    restart_search,
    rival_minima,
    sector_search,
    sphere_projection,
    svm_directions,
)
from models.numerics import failures

DTYPE = torch.float64
INF = math.inf


def _objective(fn) -> Objective:
    return Objective(fn, "loss")


def _unit(theta: float) -> torch.Tensor:
    return torch.tensor([math.cos(theta), math.sin(theta)], dtype=DTYPE)


def _distance_to(*targets_and_offsets) -> Objective:
    """min_k ‖p − q_k‖ + c_k: V-shaped minima at the q_k (resolved to float64 in angle)."""

    def fn(P):
        parts = [torch.linalg.vector_norm(P - q, dim=-1) + c for q, c in targets_and_offsets]
        return torch.stack(parts).amin(0)

    return _objective(fn)


# ------------------------------------------------------------------------- grid local minima


@pytest.mark.parametrize(
    ("vals", "periodic", "prominence", "expected"),
    [
        ([3.0, 1.0, 2.0, 0.0, 2.0, 5.0], True, 0.5, [1, 3]),
        ([3.0, 1.0, 2.0, 0.0, 2.0, 5.0], True, 1.5, [3]),  # the minimum at 1 stands out by 1
        ([0.0, 1.0, 2.0, 1.0, 3.0], False, 0.5, [0, 3]),  # an arc's endpoint can be a minimum
        ([0.0, 1.0, 2.0, 1.0, 3.0], True, 0.5, [0, 3]),
        ([INF, 1.0, INF, 0.5, 2.0], False, 0.1, [1, 3]),  # +inf counts as above the maximum
        ([2.0, 1.0, 1.0, 1.0, 2.0, 3.0], True, 0.5, [2]),  # a flat bottom: its middle
        ([INF, INF, INF], False, 0.1, []),
    ],
)
def test_grid_minima_stand_out_by_their_prominence(vals, periodic, prominence, expected):
    got = grid_minima(np.array(vals), periodic, prominence)
    assert got.tolist() == expected


def test_a_periodic_minimum_on_the_seam_is_found_once():
    got = grid_minima(np.array([0.0, 2.0, 3.0, 2.0, 1.0]), True, 0.5)
    assert got.tolist() == [0]


@pytest.mark.parametrize(
    ("vals", "periodic", "expected"),
    [
        ([1.0, 3.0, 2.0], True, [2.0, 1.0, 1.0]),
        ([1.0, 3.0, 2.0], False, [2.0, 1.0, 0.0]),
        ([1.0, INF, 2.0], False, [INF, INF, 0.0]),
        ([1.0, np.nan, 2.0], True, [INF, INF, 1.0]),
    ],
)
def test_steps_are_the_value_changes_over_each_interval(vals, periodic, expected):
    assert _steps(np.array(vals), periodic).tolist() == expected


# --------------------------------------------------------------- the grid-spacing certificate


def test_a_far_minimum_within_half_its_local_slack_of_the_best_is_a_rival():
    # The minimum at 4 (value 1.2) sits three steps from the winner; the largest value change
    # over its four intervals is 3.8, so a point below 1.2 − 1.9 could hide next to it.
    v = np.array([5.0, 1.0, 5.0, 5.0, 1.2, 5.0, 5.0, 5.0])
    assert rival_minima(v, 1.0, 1, True) == 1
    v[4] = 4.9  # its slack is now 0.1: nothing below 4.85 can hide there
    assert rival_minima(v, 1.0, 1, True) == 0


def test_minima_within_two_grid_steps_belong_to_the_winners_basin():
    v = np.array([5.0, 1.0, 5.0, 1.2, 5.0, 5.0, 5.0, 5.0])
    assert rival_minima(v, 1.0, 1, True) == 0


def test_grid_distance_wraps_on_a_circle_and_not_on_an_arc():
    v = np.array([1.0, 5.0, 5.0, 5.0, 5.0, 5.0, 1.2, 5.0])
    assert rival_minima(v, 1.0, 0, True) == 0  # 6 steps one way, 2 the other
    assert rival_minima(v, 1.0, 0, False) == 1


def test_a_minimum_whose_value_is_only_below_the_best_counts():
    v = np.array([5.0, 1.0, 5.0, 5.0, 5.0, 0.5, 5.0, 5.0])
    assert rival_minima(v, 1.0, 1, True) == 1


# ---------------------------------------------------------------------------------- the zoom


@pytest.mark.parametrize("zooms, resolution", [(1, 1e-4), (2, 1e-6), (3, 1e-8), (4, 1e-10)])
def test_each_zoom_round_divides_the_resolution_by_a_hundred(zooms, resolution):
    """Window ±h over 201 points (spacing h/100), shrunk 100-fold each round: the best point
    after k rounds is within half a spacing, h·10^(−2k)/2, of the true minimiser."""
    theta0, h, R = 0.3 + math.pi * 1e-5, 0.01, 2.0  # off every grid of spacing 10^-k
    obj = _distance_to((R * _unit(theta0), 0.0))
    centre, best = _refine_angles(obj, R, np.array([0.3 + 0.4 * h]), h, (-INF, INF), zooms)
    err = abs(centre[0] - theta0)
    assert err <= 0.5 * resolution * (1 + 1e-6)
    assert best[0] == obj.at(R * _unit(centre[0]))
    if zooms < 4:
        assert err > 1e-2 * resolution  # not better than its round allows


def test_the_zoom_stays_inside_its_bounds_and_keeps_each_candidate():
    R = 1.0
    obj = _distance_to((R * _unit(0.2), 0.0))
    centre, best = _refine_angles(obj, R, np.array([0.55, 0.9]), 0.1, (0.5, 1.0))
    # The target 0.2 lies below the bound. From 0.55 the first window reaches the edge 0.5; from
    # 0.9 it reaches 0.8, and each later window, 100 times narrower, only creeps down from there.
    assert centre[0] == 0.5 and centre[1] == pytest.approx(0.7989899, abs=1e-12)
    assert best[0] == obj.at(R * _unit(0.5)) and best[1] == obj.at(R * _unit(centre[1]))


def test_a_zoom_round_that_finds_nothing_better_keeps_the_previous_centre():
    R = 1.0
    calls = []

    def fn(P):
        calls.append(P.shape[0])
        theta = torch.atan2(P[:, 1], P[:, 0])
        return torch.where(torch.tensor(len(calls) == 1), (theta - 0.3).abs(), 10.0 + 0 * theta)

    centre, best = _refine_angles(_objective(fn), R, np.array([0.3]), 0.01, (-INF, INF))
    assert calls == [201, 201, 201, 201]
    assert centre[0] == pytest.approx(0.3, abs=1e-16) and best[0] < 1e-15


# ------------------------------------------------------------------------------- circle search


def test_a_single_minimum_on_the_circle_is_found_and_certified():
    R, theta0 = 2.0, 1.1
    found = circle_search(_distance_to((R * _unit(theta0), 0.0)), R, grid=2000)
    torch.testing.assert_close(found.p, R * _unit(theta0), atol=1e-9, rtol=0)
    assert found.value <= 1e-9 and found.certified and found.n_minima == 1
    assert found.gap == INF
    assert found.details == {"grid": 2000, "h": 2 * math.pi / 2000, "rival_minima": 0}


def test_two_minima_are_compared_and_the_gap_is_the_second_ones_excess():
    R = 2.0
    obj = _distance_to((R * _unit(1.0), 0.0), (R * _unit(4.0), 0.5))
    found = circle_search(obj, R, grid=2000)
    torch.testing.assert_close(found.p, R * _unit(1.0), atol=1e-9, rtol=0)
    assert found.n_minima == 2 and found.certified
    assert found.gap == pytest.approx(0.5, abs=1e-9)


def test_a_second_minimum_closer_than_the_grid_can_tell_is_not_certified():
    R = 2.0
    obj = _distance_to((R * _unit(1.0), 0.0), (R * _unit(4.0), 1e-4))
    found = circle_search(obj, R, grid=2000, refine=1)  # only the grid's best is refined
    assert not found.certified and found.details["rival_minima"] == 1
    assert found.gap == pytest.approx(1e-4, abs=2 * 2 * math.pi / 2000 * R)


def test_refine_bounds_how_many_grid_minima_are_zoomed():
    R = 2.0
    obj = _distance_to((R * _unit(1.0), 0.0), (R * _unit(4.0), 0.5))
    refined = circle_search(obj, R, grid=2000, refine=2)
    grid_only = circle_search(obj, R, grid=2000, refine=1)
    assert refined.gap == pytest.approx(0.5, abs=1e-9)
    assert grid_only.gap != refined.gap  # the second minimum kept its grid value


def test_an_arc_search_ends_at_the_arcs_edge_when_the_minimiser_is_outside():
    R = 1.5
    found = circle_search(_distance_to((R * _unit(0.2), 0.0)), R, grid=500, arc=(0.5, 1.0))
    torch.testing.assert_close(found.p, R * _unit(0.5), atol=1e-12, rtol=0)
    assert found.certified and found.details["h"] == pytest.approx(0.5 / 499, rel=1e-12)


def test_a_constant_objective_is_not_certified_and_does_not_raise():
    found = circle_search(_objective(lambda P: 0.0 * P[:, 0] + 1.0), 2.0, grid=200)
    assert not found.certified and found.n_minima == 0 and found.value == 1.0
    assert found.details["rival_minima"] == 200


# --------------------------------------------------------------------------- restart summary


def test_clusters_group_end_points_by_direction_best_first():
    P = torch.tensor([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0], [1.0, 1e-6]], dtype=DTYPE)
    values = torch.tensor([3.0, 1.0, 2.0, 0.0], dtype=DTYPE)
    assert _clusters(P, values) == [[3, 1, 0], [2]]
    far = torch.tensor([[1.0, 0.0], [1.0, 2e-4]], dtype=DTYPE)  # 1 − cos = 2e-8 > SAME_POINT
    assert SAME_POINT == 1e-9 and _clusters(far, torch.zeros(2, dtype=DTYPE)) == [[0], [1]]


def _descent(rows):
    """rows: (direction angle, radius, value, minimum, exited)."""
    P = torch.stack([r * _unit(a) for a, r, *_ in rows])
    values = torch.tensor([v for *_, v, _, _ in rows], dtype=DTYPE)
    minimum = torch.tensor([m for *_, m, _ in rows])
    exited = torch.tensor([e for *_, e in rows])
    return _Descent(P, values, minimum, exited)


SUMMARY_ROWS = [
    (0.0, 1.0, 1.0, True, False),
    (0.0, 2.0, 1.0 + 1e-10, True, False),  # agrees: within 1e-9·max(1, |f|)
    (0.0, 1.0, 1.0 + 5e-9, True, False),  # same point, too far in value to agree
    (2.0, 1.0, 1.5, True, False),  # another minimum
    (1.0, 1.0, 2.0, False, False),  # stranded on a plateau
    (3.0, 1.0, 3.0, False, True),  # left the ball
]


@pytest.mark.parametrize(("agree", "certified"), [(2, True), (3, False)])
def test_restart_summary_counts_agreement_rivals_and_flat_rows(agree, certified):
    from models.flows.regpath import _summarise

    found = _summarise(_descent(SUMMARY_ROWS), agree, {"restarts": 6})
    torch.testing.assert_close(found.p, _unit(0.0))
    assert found.value == 1.0 and found.n_minima == 2
    assert found.gap == pytest.approx(0.5, abs=1e-15)
    assert found.certified is certified
    assert found.details == {"restarts": 6, "agreeing": 2, "flat_rows": 1}


def test_a_best_point_that_is_no_minimum_is_not_certified():
    from models.flows.regpath import _summarise

    rows = [(0.0, 1.0, 1.0, True, False)] * 3 + [(1.0, 1.0, 0.5, False, False)]
    found = _summarise(_descent(rows), 3, {})
    assert found.value == 0.5 and not found.certified and found.details["agreeing"] == 0


def test_the_agreement_tolerance_scales_with_large_values():
    from models.flows.regpath import _summarise

    rows = [(0.0, 1.0, 1e6, True, False), (0.0, 1.0, 1e6 + 5e-4, True, False)]
    assert _summarise(_descent(rows), 2, {}).certified  # 5e-4 ≤ 1e-9·1e6
    rows[1] = (0.0, 1.0, 1e6 + 2e-3, True, False)
    assert not _summarise(_descent(rows), 2, {}).certified


def test_restarts_on_the_sphere_agree_on_a_linear_objectives_minimiser():
    a = torch.tensor([0.0, 0.6, 0.8], dtype=DTYPE)
    starts = 3.0 * torch.eye(3, dtype=DTYPE)
    found = restart_search(_objective(lambda P: -(P @ a)), starts, sphere_projection(3.0))
    torch.testing.assert_close(found.p, 3.0 * a, atol=1e-9, rtol=0)
    assert found.certified and found.n_minima == 1
    assert found.details == {"restarts": 3, "agreeing": 3, "flat_rows": 0}
    assert not restart_search(
        _objective(lambda P: -(P @ a)), starts, sphere_projection(3.0), agree=4
    ).certified


# ---------------------------------------------------------------------- interior and sector


def test_an_interior_minimum_is_found_from_the_origin_and_small_starts():
    c = torch.tensor([0.3, -0.2], dtype=DTYPE)
    obj = _objective(lambda P: ((P - c) ** 2).sum(-1))
    found = interior_search(obj, 2, 5.0)
    torch.testing.assert_close(found.p, c, atol=1e-9, rtol=0)
    assert found.certified and found.details["interior_starts"] == 4
    assert found.details["agreeing"] == 4


def test_a_minimum_outside_the_ball_or_none_at_all_gives_no_interior_point():
    outside = torch.tensor([10.0, 0.0], dtype=DTYPE)
    assert interior_search(_objective(lambda P: ((P - outside) ** 2).sum(-1)), 2, 5.0) is None
    assert interior_search(_objective(lambda P: -P[:, 0]), 2, 5.0) is None


def test_interior_agreement_is_capped_by_the_number_of_starts():
    c = torch.tensor([0.3, -0.2], dtype=DTYPE)
    obj = _objective(lambda P: ((P - c) ** 2).sum(-1))
    assert interior_search(obj, 2, 5.0, starts=2, agree=3).certified
    assert interior_search(obj, 2, 5.0, starts=4, agree=5).certified


def test_the_sector_grid_returns_its_lowest_point_and_the_origin_when_r0_is_zero():
    target = 3.0 * _unit(0.4)
    obj = _distance_to((target, 0.0))
    found = sector_search(obj, 1.0, 10.0, (0.2, 0.6), radii=400, angles=801)
    assert float(torch.linalg.vector_norm(found.p - target)) < 0.03
    assert found.certified and found.n_minima == 1 and found.gap == INF
    assert found.details["sector_grid"] == (400, 801) and found.details["r0"] == 1.0
    assert found.details["radius_over_R"] == pytest.approx(0.3, abs=3e-3)
    at_zero = sector_search(_distance_to((torch.zeros(2, dtype=DTYPE), 0.0)), 0.0, 2.0, (0, 1))
    assert torch.equal(at_zero.p, torch.zeros(2, dtype=DTYPE)) and at_zero.value == 0.0
    nowhere = _objective(lambda P: INF + 0 * P[:, 0])
    assert sector_search(nowhere, 1.0, 2.0, (0.0, 1.0)) is None


def test_the_sector_grid_does_not_reach_the_outer_sphere():
    obj = _objective(lambda P: -torch.linalg.vector_norm(P, dim=-1))  # lowest at ‖p‖ = R
    found = sector_search(obj, 1.0, 4.0, (0.0, 0.5), radii=10, angles=5)
    assert found.details["radius_over_R"] == pytest.approx((1.0 / 4.0) ** (1 / 10), rel=1e-12)


# ------------------------------------------------------------------------------ small pieces


@pytest.mark.parametrize("bad", [0.0, -1.0, INF, math.nan])
def test_a_radius_must_be_positive_and_finite(bad):
    with pytest.raises(ValueError, match="R: must be a positive finite radius"):
        _check_radius(bad)


def test_a_valid_radius_comes_back_as_a_float():
    assert _check_radius(3) == 3.0 and isinstance(_check_radius(3), float)


def test_cap_starts_are_the_centre_and_seeded_points_inside_the_cap():
    c = torch.tensor([0.0, 3.0, 4.0], dtype=DTYPE)
    eps = 1e-2
    S = _cap_starts(c, eps, 16, seed=5)
    assert tuple(S.shape) == (17, 3)
    torch.testing.assert_close(S[0], c / 5.0)
    torch.testing.assert_close(torch.linalg.vector_norm(S, dim=-1), torch.ones(17, dtype=DTYPE))
    cos = S @ (c / 5.0)
    assert (cos >= 1 - eps - 1e-12).all() and (cos[1:] < 1 - 1e-6).all()
    assert (cos[1:] < 1 - eps / 4).any()  # spread across the cap, not at its centre
    torch.testing.assert_close(S, _cap_starts(c, eps, 16, seed=5))
    assert not torch.equal(S, _cap_starts(c, eps, 16, seed=6))


class _Prompt:
    """Keys and scores only: what the restart seeds read."""

    def __init__(self, keys, scores):
        self.keys = torch.tensor(keys, dtype=DTYPE)
        self.scores = torch.tensor(scores, dtype=DTYPE)
        self.dim = self.keys.shape[-1]


def test_candidate_selections_are_the_optimum_then_every_selection_when_few():
    problem = _Prompt([[[1.0, 0.0], [0.0, 1.0]]] * 2, [[0.0, 1.0], [2.0, 1.0]])
    few = _candidate_selections(problem, limit=4)
    assert [a.tolist() for a in few] == [[1, 0], [0, 0], [0, 1], [1, 0], [1, 1]]
    assert [a.tolist() for a in _candidate_selections(problem, limit=3)] == [[1, 0]]


def test_svm_directions_are_the_unit_directions_of_the_feasible_selections():
    keys = [[[1.0, 0.0], [0.0, 1.0], [0.5, 0.5]]]  # token 2 is inside the hull: infeasible
    problem = _Prompt(keys, [[1.0, 0.0, 0.5]])
    dirs = svm_directions(problem)
    s = math.sqrt(0.5)
    torch.testing.assert_close(dirs, torch.tensor([[s, -s], [s, -s], [-s, s]], dtype=DTYPE))

    class NoKeys:
        dim = 3

    assert tuple(svm_directions(NoKeys()).shape) == (0, 3)


# ------------------------------------------------------------------------------ the winner


class _Loss:
    n, scores = 1, None

    def loss_value(self, p):
        return (p**2).sum()


def _found(value, certified=True, theta=0.0):
    return _Found(_unit(theta), value, 1, INF, certified, {"from": value})


def test_an_interior_point_wins_only_strictly_below_the_spheres_best():
    obj = _objective(lambda P: P[:, 0])
    point = _result(_Loss(), obj, _found(1.0), 2.0, "grid", 0.0, _found(0.5, theta=1.0))
    assert not point.on_boundary and point.objective == 0.5
    torch.testing.assert_close(point.p, _unit(1.0))
    assert point.details == {"from": 0.5, "sphere_objective": 1.0, "sphere": {"from": 1.0}}
    tie = _result(_Loss(), obj, _found(1.0), 2.0, "grid", 0.0, _found(1.0, theta=1.0))
    assert tie.on_boundary and tie.details == {"from": 1.0}
    alone = _result(_Loss(), obj, _found(1.0), 2.0, "restarts", 0.0)
    assert alone.on_boundary and alone.method == "restarts" and alone.R == 2.0
    assert alone.loss == pytest.approx(1.0, abs=1e-15) and alone.objective_kind == "loss"
    assert alone.n_local_minima == 1 and alone.gap == INF and alone.certified


def test_an_uncertified_winner_is_reported_as_a_failure_of_the_search():
    obj = _objective(lambda P: P[:, 0])
    with failures.watch() as w:
        point = _result(_Loss(), obj, _found(1.0, certified=False), 3.0, "grid", 0.0)
        _result(_Loss(), obj, _found(1.0), 3.0, "grid", 0.0)
    assert not point.certified
    (only,) = w.failures
    assert only.source == failures.REG_PATH and only.what == "point not certified"
    assert only.detail == "R=3, grid"


# ----------------------------------------------------------------------------------- threads


def test_the_searches_run_on_one_thread_and_restore_the_count_after():
    from models.flows.regpath import one_thread, single_thread

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(RuntimeError, match="inside"):
            with single_thread():
                assert torch.get_num_threads() == 1
                raise RuntimeError("inside")
        assert torch.get_num_threads() == 2

        @one_thread
        def threads(a, *, b):
            """Its own doc."""
            return torch.get_num_threads(), a, b

        assert threads(3, b=4) == (1, 3, 4) and torch.get_num_threads() == 2
        assert threads.__name__ == "threads" and threads.__doc__ == "Its own doc."
    finally:
        torch.set_num_threads(before)


def test_objective_grid_reports_nan_as_plus_inf_and_keeps_infinities():
    """`Objective.grid`: a NaN value (an objective undefined there) is +inf, never a minimum;
    ±inf stay infinite (torch.nan_to_num's defaults would make NaN 0 and ±inf ±1.8e308)."""
    values = torch.tensor([math.nan, INF, -INF, 1.0], dtype=DTYPE)
    obj = _objective(lambda P: values[: P.shape[0]])
    got = obj.grid(torch.zeros(4, 2, dtype=DTYPE)).tolist()
    assert got == [INF, INF, -INF, 1.0]
