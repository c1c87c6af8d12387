"""The regularization path's descent engine (models.flows.regpath: ``descend``, its line search, the
saddle-free Newton direction and the minimum test) on objectives whose minimisers, saddles and
divergence are known in closed form.

The claims reach it only through reg_path_point on attention losses (tests/test_regpath.py); here
each documented rule is checked alone: convergence to the minimiser, escape from a saddle,
steps capped at max(1, ‖p‖) off the sphere (a divergent run leaves the ball of radius R in
~log₂R iterations) and at 0.25 rad on it, Armijo backtracking by 1/4 and doubling up to the cap,
and a stop on a plateau or at a critical point that is not reported as a minimum."""

from __future__ import annotations

import math

import pytest
import torch

from models.flows.regpath import (
    Objective,
    _is_minimum,
    _line_search,
    _newton_direction,
    _tangent_hessian,
    descend,
    sphere_projection,
)

DTYPE = torch.float64


def _objective(fn) -> Objective:
    return Objective(fn, "loss")


def _rows(*points) -> torch.Tensor:
    return torch.tensor(points, dtype=DTYPE)


# --------------------------------------------------------------------------- the whole descent

A, C = torch.tensor([1.0, 100.0], dtype=DTYPE), torch.tensor([3.0, -2.0], dtype=DTYPE)
QUADRATIC = _objective(lambda P: 0.5 * (A * (P - C) ** 2).sum(-1))
# x² + (y² − 1)²: minima (0, ±1), a saddle at the origin (curvature −4 along y).
DOUBLE_WELL = _objective(lambda P: P[:, 0] ** 2 + (P[:, 1] ** 2 - 1.0) ** 2)


def test_an_ill_conditioned_quadratic_is_minimised_from_every_start():
    P0 = _rows([0.0, 0.0], [-50.0, 40.0], [3.0, 5.0])
    run = descend(QUADRATIC, P0)
    torch.testing.assert_close(run.P, C.expand(3, 2), atol=1e-10, rtol=0)
    assert run.minimum.tolist() == [True, True, True] and not run.exited.any()
    assert (run.values <= 1e-20).all()


def test_saddle_free_newton_leaves_a_saddle_for_the_well_on_its_side():
    """Plain Newton from near the saddle jumps to it (the y-curvature is negative there); the
    saddle-free direction descends along y to the well of the start's sign."""
    run = descend(DOUBLE_WELL, _rows([0.5, 1e-3], [0.5, -1e-3]))
    torch.testing.assert_close(run.P, _rows([0.0, 1.0], [0.0, -1.0]), atol=1e-9, rtol=0)
    assert run.minimum.tolist() == [True, True]


def test_a_start_at_a_critical_point_stops_there_and_a_saddle_is_no_minimum():
    run = descend(DOUBLE_WELL, _rows([0.0, 0.0], [0.0, 1.0]))
    assert torch.equal(run.P, _rows([0.0, 0.0], [0.0, 1.0]))
    assert run.minimum.tolist() == [False, True]


def test_a_plateau_is_no_minimum():
    run = descend(_objective(lambda P: 0.0 * P.sum(-1) + 2.0), _rows([1.0, 1.0]))
    assert torch.equal(run.P, _rows([1.0, 1.0])) and run.minimum.tolist() == [False]


def test_a_row_without_a_finite_value_stays_and_is_no_minimum():
    fn = _objective(lambda P: torch.where(P[:, 0] > 0, (P**2).sum(-1), math.inf))
    run = descend(fn, _rows([-1.0, 0.0], [1.0, 1.0]))
    assert torch.equal(run.P[0], _rows([-1.0, 0.0])[0]) and not run.minimum[0]
    assert torch.isfinite(run.values[1]) and run.P[1, 0] > 0  # never steps onto the wall


@pytest.mark.parametrize("radius", [10.0, 1000.0])
def test_a_divergent_descent_leaves_the_ball_in_about_log2_radius_steps(radius):
    """f = −x has no minimum: each step is capped at max(1, ‖p‖), so ‖p‖ at most doubles per
    iteration and reaches R after ⌈log₂R⌉ of them, then the run is 'exited'."""
    linear = _objective(lambda P: -P[:, 0])
    k = math.ceil(math.log2(radius))
    for iters in range(1, k + 2):
        run = descend(linear, _rows([0.0, 0.0]), radius=radius, iters=iters)
        norm = float(torch.linalg.vector_norm(run.P))
        assert norm <= 2.0 ** (iters - 1) * (1 + 1e-12)
        assert bool(run.exited[0]) is (norm >= radius)
        assert not run.minimum.any()
    assert run.exited.tolist() == [True]


def test_a_linear_objective_on_the_sphere_reaches_its_minimiser_in_quarter_radian_steps():
    a = torch.tensor([1.0, 2.0, 2.0], dtype=DTYPE) / 3.0
    R = 5.0
    linear = _objective(lambda P: -(P @ a))
    start = _rows([0.0, 0.0, -5.0], [5.0, 0.0, 0.0])
    one = descend(linear, start, sphere_projection(R), iters=1)
    cos = (one.P * start).sum(-1) / R**2
    turned = torch.arccos(cos.clamp(-1, 1))
    assert (turned <= 0.25 + 1e-12).all() and (turned >= 0.2).all()
    torch.testing.assert_close(torch.linalg.vector_norm(one.P, dim=-1), torch.full((2,), R))
    run = descend(linear, start, sphere_projection(R))
    torch.testing.assert_close(run.P, (R * a).expand(2, 3), atol=1e-9, rtol=0)
    assert run.minimum.tolist() == [True, True] and not run.exited.any()


def test_the_maximiser_on_the_sphere_is_a_critical_point_but_no_minimum():
    a = torch.tensor([0.0, 0.6, 0.8], dtype=DTYPE)
    run = descend(_objective(lambda P: -(P @ a)), (-2.0 * a)[None], sphere_projection(2.0))
    torch.testing.assert_close(run.P, (-2.0 * a)[None])
    assert run.minimum.tolist() == [False]


# ----------------------------------------------------------------------------- the line search


def _search(fn, P, direction, rows=None, radius=math.inf, max_step=100.0, project=None):
    obj = _objective(fn)
    P = torch.as_tensor(P, dtype=DTYPE)
    direction = torch.as_tensor(direction, dtype=DTYPE)
    f = obj(P)
    g = torch.func.vmap(torch.func.grad(lambda p: fn(p[None])[0]))(P)
    rows = torch.ones(P.shape[0], dtype=torch.bool) if rows is None else torch.tensor(rows)
    return _line_search(obj, P, f, g, direction, rows, project, radius, max_step)


def test_an_overshooting_step_is_cut_by_four_until_armijo_holds():
    """(x − 1)² from 0 along +4: step 1 lands at 4 (f = 9 > 1), step 1/4 at 1 (f = 0)."""
    P, f, ok, out = _search(lambda P: (P[:, 0] - 1.0) ** 2, [[0.0, 0.0]], [[4.0, 0.0]])
    assert P.tolist() == [[1.0, 0.0]] and f.tolist() == [0.0]
    assert ok.tolist() == [True] and out.tolist() == [False]


def test_a_short_accepted_step_doubles_while_the_value_falls_up_to_the_cap():
    """f = −x along 1e-3·e₁ with the cap 10: steps 2^k·1e-3 up to 8.192 (the next, 16.384,
    would pass the cap)."""
    P, f, ok, _ = _search(lambda P: -P[:, 0], [[0.0, 0.0]], [[1e-3, 0.0]], max_step=10.0)
    assert P[0, 0] == pytest.approx(8.192, rel=1e-15) and P[0, 1] == 0.0
    assert f[0] == -P[0, 0] and ok.tolist() == [True]


def test_the_doubling_stops_where_the_value_stops_falling():
    """(x − 1)² along 1e-3·e₁: doubling stops at 2^9·1e-3 = 0.512 (1.024 is worse than 0.512:
    0.000576 > 0.238)."""
    P, _, _, _ = _search(lambda P: (P[:, 0] - 1.0) ** 2, [[0.0, 0.0]], [[1e-3, 0.0]])
    assert P[0, 0] == pytest.approx(1.024, rel=1e-15)


def test_a_long_direction_is_cut_to_the_cap_first():
    P, _, ok, _ = _search(lambda P: -P[:, 0], [[0.0, 0.0]], [[50.0, 0.0]], max_step=2.0)
    assert P[0, 0] == pytest.approx(2.0, rel=1e-15) and ok.tolist() == [True]


def test_only_the_rows_asked_for_move_and_an_ascent_direction_is_refused():
    P0 = [[0.0, 0.0], [0.0, 0.0], [0.0, 0.0]]
    direction = [[4.0, 0.0], [4.0, 0.0], [-1.0, 0.0]]  # the last one ascends
    P, f, ok, _ = _search(lambda P: (P[:, 0] - 1.0) ** 2, P0, direction, rows=[False, True, True])
    assert P.tolist() == [[0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]
    assert f.tolist() == [1.0, 0.0, 1.0] and ok.tolist() == [False, True, False]


def test_an_equal_value_is_no_decrease():
    """Armijo with a strict decrease: a plateau row does not wander."""
    P, _, ok, _ = _search(lambda P: 0.0 * P[:, 0] + 1.0, [[0.0, 0.0]], [[1.0, 0.0]])
    assert P.tolist() == [[0.0, 0.0]] and ok.tolist() == [False]


def test_a_point_that_reaches_the_radius_has_exited():
    _, _, ok, out = _search(
        lambda P: -P[:, 0],
        [[0.0, 0.0], [0.0, 0.0]],
        [[0.2, 0.0], [1.0, 0.0]],
        radius=1.0,
        max_step=1.0,
    )  # 0.2 doubles to 0.8 (1.6 would pass the cap); 1.0 reaches the radius
    assert ok.tolist() == [True, True] and out.tolist() == [False, True]


# ------------------------------------------------------------- Newton direction, minimum test


def test_the_newton_direction_uses_absolute_curvatures():
    d = _newton_direction(_rows([1.0, 1.0]), torch.diag(_rows([-2.0, 4.0])[0])[None])
    torch.testing.assert_close(d, _rows([-0.5, -0.25]), rtol=1e-15, atol=0)


def test_a_flat_direction_is_floored_at_1e_minus_10_of_the_largest_curvature():
    d = _newton_direction(_rows([1.0, 1.0]), torch.diag(_rows([0.0, 4.0])[0])[None])
    torch.testing.assert_close(d, _rows([-1.0 / 4e-10, -0.25]), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    ("f", "curvature", "minimum"),
    [
        (1.0, 2e-10, True),
        (1.0, 5e-11, False),
        (0.01, 2e-10, True),
        (100.0, 5e-9, False),
        (100.0, 2e-8, True),
        (-100.0, 5e-9, False),
    ],
)
def test_a_minimum_needs_curvature_above_1e_minus_10_of_max_1_and_f(f, curvature, minimum):
    H = torch.diag(_rows([curvature, 1.0])[0])[None]
    P = _rows([1.0, 0.0])
    assert _is_minimum(torch.tensor([f], dtype=DTYPE), H, P, False).tolist() == [minimum]


def test_on_the_sphere_the_minimum_test_ignores_the_added_radial_eigenvalue():
    """The tangent Hessian carries eigenvalue 1 along p̂; the test reads only the tangent
    ones: −1 in the tangent plane is no minimum even though the radial 1 is positive."""
    P = _rows([2.0, 0.0, 0.0])
    g = torch.zeros(1, 3, dtype=DTYPE)
    H_neg = torch.diag(_rows([5.0, -1.0, 3.0])[0])[None]
    H_pos = torch.diag(_rows([-5.0, 1.0, 3.0])[0])[None]
    assert _is_minimum(
        torch.ones(1, dtype=DTYPE), _tangent_hessian(g, H_neg, P), P, True
    ).tolist() == [False]
    assert _is_minimum(
        torch.ones(1, dtype=DTYPE), _tangent_hessian(g, H_pos, P), P, True
    ).tolist() == [True]
