"""models/flows/kqpath.py function by function, on instances small enough to work by hand: the
sphere charts at angles whose sines and cosines are exact, the grid and box of every chart, the
L-BFGS refinement on objectives with a known minimiser, the argument checks and defaults of
``ball_path_point``, the normalized margin and the factor identity on 2 × 2 matrices (a 2 × 2
nuclear norm is √(‖W‖²_F + 2|det W|)), and the diagonal model: its keys and constraint rows,
the duality certificate on an LP solved by hand, and every branch of ``diag_svm`` (the solvers
replaced by scripts where a branch needs an answer no real solver gives), and per-factor NGD on
a scripted problem with a constant gradient g = (1, 2), chosen so that g ⊙ q and g ⊙ k are
3-4-5 vectors.

The hand-solved diagonal SVM: rows (1, 0), (0, −2), (2, 1) of (x_iα − x_it) ⊙ z_i. Both SVMs
have w = (1, −½) (w₁ ≥ 1, w₂ ≤ −½; the third row has slack ½); ‖w‖₁ = 3/2 with duals (1, ½, 0),
‖w‖₂ = √5/2 with duals (1, ¼, 0)/‖w‖₂. The end-to-end checks (cvxpy, autograd, independent path
searches) are in tests/test_kqpath.py."""

from __future__ import annotations

import math
import time
import warnings
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from models.flows import kqpath
from models.flows.kqpath import (
    BallPoint,
    DiagSVM,
    _one_minus_corr,
    _refine,
    _sheets,
    balanced_factors,
    ball_path_point,
    diag_certificate,
    diag_constraints,
    diag_kq_ngd,
    diag_svm,
    diagonal_keys,
    diagonal_problem,
    factor_energy,
    frobenius_sphere,
    lp_sphere,
    normalized_margin,
    nuclear_sphere,
)
from models.flows.regpath import objective_for
from models.numerics import failures
from models.oracles.normsvm import matrix_norm
from models.oracles.svm import att_svm
from models.problems.cross import CrossProblem

DTYPE = torch.float64
S2, S3, S5 = math.sqrt(2.0), math.sqrt(3.0), math.sqrt(5.0)


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=DTYPE)


# --------------------------------------------------------------------------------------------
# sphere charts
# --------------------------------------------------------------------------------------------

# (a, b, c) → vec W / R: the hyperspherical chart at angles with exact sines and cosines.
FRO_POINTS = [
    ((0.0, 1.0, 2.0), (1.0, 0.0, 0.0, 0.0)),
    ((math.pi / 2, 0.0, 0.7), (0.0, 1.0, 0.0, 0.0)),
    ((math.pi / 2, math.pi / 2, 0.0), (0.0, 0.0, 1.0, 0.0)),
    ((math.pi / 2, math.pi / 2, math.pi / 2), (0.0, 0.0, 0.0, 1.0)),
    ((math.pi / 3, math.pi / 3, math.pi / 4), (0.5, S3 / 4, 3 * S2 / 8, 3 * S2 / 8)),
]


def test_frobenius_chart_at_exact_angles_is_the_hyperspherical_formula():
    params = _t([p for p, _ in FRO_POINTS])
    want = 2.0 * np.array([w for _, w in FRO_POINTS])
    got = frobenius_sphere(2.0, params)
    assert got.shape == (5, 4) and got.dtype == DTYPE
    assert np.allclose(got.numpy(), want, rtol=0, atol=1e-15)


def test_frobenius_and_lp_charts_map_every_row_of_any_batch_shape():
    """The charts act on the last axis alone: a (2, 3, 3) batch gives the (2, 3, 4) rows of the
    flattened (6, 3) batch."""
    gen = torch.Generator().manual_seed(0)
    P = torch.rand(2, 3, 3, generator=gen, dtype=DTYPE) * 3.0
    flat = P.reshape(6, 3)
    assert torch.equal(frobenius_sphere(1.5, P), frobenius_sphere(1.5, flat).reshape(2, 3, 4))
    got = lp_sphere(1.5, P, 3.0)
    assert got.shape == (2, 3, 4)
    assert torch.allclose(got, lp_sphere(1.5, flat, 3.0).reshape(2, 3, 4), rtol=0, atol=1e-15)
    norms = torch.linalg.vector_norm(got, ord=3.0, dim=-1)
    assert torch.allclose(norms, torch.full((2, 3), 1.5, dtype=DTYPE), rtol=0, atol=1e-14)


def test_lp_chart_rescales_the_unit_frobenius_direction_to_lp_norm_r():
    """W = R·u/‖u‖_p: the coordinate axes are fixed points for every p, and at (π/3, π/3, π/4)
    u = (½, √3/4, 3√2/8, 3√2/8), whose ℓ1 norm is ½ + √3/4 + 3√2/4."""
    params = _t([p for p, _ in FRO_POINTS])
    u = np.array([w for _, w in FRO_POINTS])
    got1 = lp_sphere(2.0, params, 1.0).numpy()
    assert np.allclose(got1[:4], 2.0 * u[:4], rtol=0, atol=1e-15)
    assert np.allclose(got1[4], 2.0 * u[4] / (0.5 + S3 / 4 + 3 * S2 / 4), rtol=0, atol=1e-15)
    got4 = lp_sphere(2.0, params, 4.0).numpy()
    l4 = (0.5**4 + (S3 / 4) ** 4 + 2 * (3 * S2 / 8) ** 4) ** 0.25
    assert np.allclose(got4[4], 2.0 * u[4] / l4, rtol=0, atol=1e-15)
    assert np.allclose(np.sum(np.abs(got4) ** 4, axis=1) ** 0.25, 2.0, rtol=0, atol=1e-14)


def test_nuclear_chart_at_exact_angles_is_c_uv_plus_sign_times_the_orthogonal_part():
    """(θ, φ, c, sign) = (0, π/2, ¾, +1): u = e₁, v = e₂, u⊥ = e₂, v⊥ = −e₁, so
    W = ¾ e₁e₂ᵀ − ¼ e₂e₁ᵀ; (π/2, 0, ¼, −1): W = ¼ e₂e₁ᵀ + ¾ e₁e₂ᵀ; (π/4, π/4, 1): all ½."""
    params = _t([[0.0, math.pi / 2, 0.75], [math.pi / 2, 0.0, 0.25], [math.pi / 4] * 2 + [1.0]])
    plus = nuclear_sphere(2.0, params, 1.0).numpy()
    minus = nuclear_sphere(2.0, params, -1.0).numpy()
    assert plus.shape == (3, 4)
    assert np.allclose(plus[0], [0.0, 1.5, -0.5, 0.0], rtol=0, atol=1e-15)
    assert np.allclose(minus[0], [0.0, 1.5, 0.5, 0.0], rtol=0, atol=1e-15)
    assert np.allclose(minus[1], [0.0, 1.5, 0.5, 0.0], rtol=0, atol=1e-15)
    assert np.allclose(plus[1], [0.0, -1.5, 0.5, 0.0], rtol=0, atol=1e-15)
    assert np.allclose(plus[2], [1.0, 1.0, 1.0, 1.0], rtol=0, atol=1e-15)
    assert np.allclose(minus[2], [1.0, 1.0, 1.0, 1.0], rtol=0, atol=1e-15)


# --------------------------------------------------------------------------------------------
# the charts' grids and boxes (_sheets)
# --------------------------------------------------------------------------------------------


def test_frobenius_sheet_has_m_angles_on_each_half_circle_and_2m_on_the_circle():
    """m = max(4, round((grid/2)^{1/3})): grid 2000 gives m = 10, a and b at kπ/9 (k ≤ 9), c at
    kπ/10 (k < 20); a, b boxed to [0, π], c free."""
    (sheet,) = _sheets("fro", 2.0, 2000)
    a, b, c = sheet.axes
    assert np.allclose(a, np.arange(10) * math.pi / 9, rtol=0, atol=1e-15)
    assert np.array_equal(a, b)
    assert np.allclose(c, np.arange(20) * math.pi / 10, rtol=0, atol=1e-15)
    assert sheet.bounds == ((0.0, math.pi), (0.0, math.pi), (-math.inf, math.inf))
    P = _t([p for p, _ in FRO_POINTS])
    assert torch.equal(sheet.to_w(P), frobenius_sphere(2.0, P))
    assert [len(x) for x in _sheets("fro", 1.0, 250)[0].axes] == [5, 5, 10]
    assert [len(x) for x in _sheets("fro", 1.0, 16)[0].axes] == [4, 4, 8]  # at least 4


def test_lp_sheet_is_the_frobenius_grid_mapped_to_the_lp_sphere():
    (sheet,) = _sheets("lp", 2.0, 2000, 3.0)
    (fro,) = _sheets("fro", 2.0, 2000)
    assert all(np.array_equal(x, y) for x, y in zip(sheet.axes, fro.axes, strict=True))
    assert sheet.bounds == fro.bounds
    P = _t([p for p, _ in FRO_POINTS])
    W = sheet.to_w(P)
    assert torch.equal(W, lp_sphere(2.0, P, 3.0))
    assert torch.allclose(torch.linalg.vector_norm(W, ord=3.0, dim=-1), _t([2.0] * 5), atol=1e-14)


def test_nuclear_sheets_are_the_two_signs_with_2m_m_m_grid_points():
    """m = max(4, round((grid/4)^{1/3})): grid 4000 gives m = 10, θ at kπ/10 (k < 20), φ at
    kπ/10 (k < 10), c at k/9 (k ≤ 9) in [0, 1]; the first sheet has sign +1, the second −1."""
    sheets = _sheets("nuc", 2.0, 4000)
    assert len(sheets) == 2
    P = _t([[0.0, math.pi / 2, 0.75]])
    for sheet, sign in zip(sheets, (1.0, -1.0), strict=True):
        th, ph, c = sheet.axes
        assert np.allclose(th, np.arange(20) * math.pi / 10, rtol=0, atol=1e-15)
        assert np.allclose(ph, np.arange(10) * math.pi / 10, rtol=0, atol=1e-15)
        assert np.allclose(c, np.arange(10) / 9, rtol=0, atol=1e-15)
        assert sheet.bounds == ((-math.inf, math.inf), (-math.inf, math.inf), (0.0, 1.0))
        assert np.allclose(sheet.to_w(P).numpy(), [[0.0, 1.5, -0.5 * sign, 0.0]], atol=1e-15)
    assert [len(x) for x in _sheets("nuc", 1.0, 500)[0].axes] == [10, 5, 5]
    assert [len(x) for x in _sheets("nuc", 1.0, 16)[1].axes] == [8, 4, 4]  # at least 4


def test_sheets_reject_an_unknown_norm_by_name():
    with pytest.raises(ValueError) as err:
        _sheets("max", 1.0, 100)
    assert str(err.value) == "norm: expected one of ('fro', 'nuc', 'lp'), got 'max'"


# --------------------------------------------------------------------------------------------
# L-BFGS refinement (_refine)
# --------------------------------------------------------------------------------------------

TARGET = _t([0.5, 0.5, 0.5, 0.5])  # unit: at (a, b, c) = (π/3, arccos(1/√3), π/4), interior


def _fro_sheet():
    return _sheets("fro", 1.0, 16)[0]


def test_refine_reaches_the_minimiser_of_a_linear_objective_to_machine_precision():
    """min −⟨W, t⟩ on the unit sphere is −1 at W = t; the refinement's tolerances (ftol 1e-15,
    gtol 1e-11) bring every start there, while one iteration is still far from it."""
    starts = np.array([[1.0, 1.0, 0.5], [1.2, 0.9, 1.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every solver option is one L-BFGS-B knows
        W, f = _refine(lambda W: -(W @ TARGET), _fro_sheet(), starts, 400)
    assert W.shape == (2, 4) and f.shape == (2,)
    assert np.all(np.abs(f + 1.0) <= 1e-14)
    assert np.abs(W - TARGET.numpy()).max() <= 1e-8
    _, f1 = _refine(lambda W: -(W @ TARGET), _fro_sheet(), starts, 1)
    assert np.all(f1 + 1.0 >= 1e-3)  # iters is the iteration budget


def test_refine_minimises_each_start_in_its_own_basin():
    """−⟨W, t⟩² has two minimisers ±t: starts near each end at each (the summed objective is
    separable, so every row is its own minimisation)."""
    starts = np.array([[1.0, 1.0, 0.5], [2.0, 2.0, 4.0]])
    W, f = _refine(lambda W: -((W @ TARGET) ** 2), _fro_sheet(), starts, 400)
    assert np.abs(W[0] - TARGET.numpy()).max() <= 1e-7
    assert np.abs(W[1] + TARGET.numpy()).max() <= 1e-7
    assert np.all(np.abs(f + 1.0) <= 1e-14)


def test_refine_keeps_every_start_in_its_charts_box():
    """On the nuclear chart c is boxed to [0, 1]: −W₀₀ is unbounded below along c > 1 at
    θ = φ = 0, but on the sphere its minimum is −R at c = 1 (W = R e₁e₁ᵀ), on the box's edge."""
    sheet = _sheets("nuc", 2.0, 16)[0]
    starts = np.array([[0.1, -0.1, 0.5], [0.2, 0.1, 0.9]])
    W, f = _refine(lambda W: -W[:, 0], sheet, starts, 400)
    assert np.all(np.abs(f + 2.0) <= 1e-12)
    assert np.allclose(W, [[2.0, 0.0, 0.0, 0.0]] * 2, rtol=0, atol=1e-6)
    nuc = np.linalg.svd(W.reshape(2, 2, 2), compute_uv=False).sum(-1)
    assert np.allclose(nuc, 2.0, rtol=0, atol=1e-12)


def test_refine_reads_a_nan_gradient_as_zero():
    """0·√(W₀ − W₀) adds nothing to the value but makes ∂f/∂a NaN (a is the only angle W₀
    depends on): a stays where it started, the other angles still descend."""
    starts = np.array([[1.0, 1.0, 0.5], [1.2, 0.9, 1.0]])
    W0 = frobenius_sphere(1.0, torch.as_tensor(starts)).numpy()
    W, f = _refine(
        lambda W: -(W @ TARGET) + 0.0 * torch.sqrt(W[:, 0] - W[:, 0]), _fro_sheet(), starts, 400
    )
    assert np.array_equal(W[:, 0], W0[:, 0])
    assert np.all(f < -(W0 @ TARGET.numpy()) - 1e-3)


# --------------------------------------------------------------------------------------------
# ball_path_point: arguments, defaults, the returned point
# --------------------------------------------------------------------------------------------


def _cross2(loss: str = "logistic") -> CrossProblem:
    """n = 2, T = 3, d = 2 (W is 2 × 2, the vectorised problem has dim 4)."""
    X = _t([[[-1.2, 0.3], [-0.7, -0.4], [-1.0, 0.5]], [[1.1, -0.2], [0.8, 0.6], [1.3, 0.1]]])
    Z = _t([[0.6, 0.8], [-0.8, 0.6]])
    return CrossProblem(X, Z, _t([1.0, 1.0]), _t([0.8, -0.6]), loss)


def test_ball_path_point_hands_its_documented_defaults_to_the_search(monkeypatch):
    calls = []
    monkeypatch.setattr(kqpath, "_ball_point", lambda *args: calls.append(args) or "point")
    problem = object()
    assert ball_path_point(problem, 5, "fro") == "point"
    assert ball_path_point(problem, 7, "nuc", grid=100.9, refine=3.7, iters=20.2) == "point"
    assert ball_path_point(problem, 2.5, "lp", p=3) == "point"
    assert ball_path_point(problem, 2.5, "lp", p=1.0001) == "point"
    assert calls == [
        (problem, 5.0, "fro", 60_000, 8, 400, None),
        (problem, 7.0, "nuc", 100, 3, 20, None),
        (problem, 2.5, "lp", 60_000, 8, 400, 3.0),
        (problem, 2.5, "lp", 60_000, 8, 400, 1.0001),
    ]
    assert [type(x) for x in calls[2][1:]] == [float, str, int, int, int, float]


@pytest.mark.parametrize("p", [None, 1, 1.0, 0.5, -2.0, math.inf, True, "3"])
def test_lp_ball_needs_an_exponent_strictly_between_1_and_infinity(p):
    with pytest.raises(ValueError) as err:
        ball_path_point(object(), 1.0, "lp", p=p)
    assert str(err.value) == f"norm: 'lp' needs an exponent 1 < p < ∞, got p={p!r}"


def test_ball_path_point_rejects_unknown_norms_and_stray_exponents_by_name():
    with pytest.raises(ValueError) as err:
        ball_path_point(object(), 1.0, "max")
    assert str(err.value) == "norm: expected one of ('fro', 'nuc', 'lp'), got 'max'"
    for norm in ("fro", "nuc"):
        with pytest.raises(ValueError) as err:
            ball_path_point(object(), 1.0, norm, p=2)
        assert str(err.value) == f"p: only the 'lp' norm takes an exponent, got p=2 for {norm!r}"


def test_ball_path_point_rejects_a_bad_radius_or_dimension_by_name():
    problem = _cross2().prompt
    for R in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError) as err:
            ball_path_point(problem, R, "fro", grid=16, refine=1)
        assert str(err.value) == f"R: must be a positive finite radius, got {float(R)}"
    X3 = torch.ones(1, 2, 3, dtype=DTYPE)
    X3[0, 1, 0] = 0.0
    wide = CrossProblem(X3, torch.ones(1, 3, dtype=DTYPE), _t([1.0]), _t([1.0, 0.0, 0.0]))
    with pytest.raises(ValueError) as err:
        ball_path_point(wide.prompt, 1.0, "fro", grid=16, refine=1)
    assert str(err.value) == "problem: ball paths are for 2 × 2 W (dim 4), got dim 9"


# (norm, p, grid points: fro/lp (2m·m·m at m = 5), nuc 2 sheets of 2m·m·m at m = 4)
BALLS = [("fro", None, 250), ("nuc", None, 256), ("lp", 3.0, 250)]


@pytest.mark.parametrize(("norm", "p", "points"), BALLS)
def test_ball_point_fields_are_its_sphere_point_objective_and_search_counts(norm, p, points):
    problem = _cross2().prompt
    obj = objective_for(problem)
    with failures.watch() as seen:
        t0 = time.perf_counter()
        point = ball_path_point(problem, 5.0, norm, grid=200, refine=4, iters=100, p=p)
        wall = time.perf_counter() - t0
    assert isinstance(point, BallPoint)
    assert point.W.shape == (2, 2) and point.R == 5.0 and point.norm == norm and point.p == p
    assert abs(matrix_norm(point.W, norm, p) - 5.0) <= 1e-12 * 5.0
    assert point.grid == points and point.refined == 4 and 1 <= point.agree <= 4
    assert abs(obj.at(point.W.ravel()) - point.objective) <= 1e-12 * abs(point.objective)
    assert point.minima[0] == round(point.objective, 9)
    assert point.minima == sorted(set(point.minima)) and len(point.minima) <= 4
    assert 0.0 <= point.seconds <= wall
    assert point.certified == (point.agree >= 2)
    # the refinement only improves on the best grid point (the grid rebuilt here by hand)
    if norm == "nuc":
        th, ph, c = np.arange(8) * math.pi / 4, np.arange(4) * math.pi / 4, np.arange(4) / 3
        mesh = _t(np.stack(np.meshgrid(th, ph, c, indexing="ij"), -1).reshape(-1, 3))
        grid_w = torch.cat([nuclear_sphere(5.0, mesh, s) for s in (1.0, -1.0)])
    else:
        a, c = np.arange(5) * math.pi / 4, np.arange(10) * math.pi / 5
        mesh = _t(np.stack(np.meshgrid(a, a, c, indexing="ij"), -1).reshape(-1, 3))
        grid_w = frobenius_sphere(5.0, mesh) if p is None else lp_sphere(5.0, mesh, p)
    assert float(obj.grid(grid_w).min()) >= point.objective - 1e-12 * abs(point.objective)
    # an unconfirmed point is reported, a confirmed one is not
    keys = [f.key for f in seen.failures]
    if point.certified:
        assert keys == []
    else:
        assert keys == ["regularization path: ball point not confirmed"]
        assert seen.failures[0].detail == f"{norm}, R=5"


def test_a_ball_point_is_certified_from_two_agreeing_refinements():
    def point(agree):
        return BallPoint(np.eye(2), 1.0, "fro", 0.0, agree, 4, 10, 0.0)

    assert [point(k).certified for k in (0, 1, 2, 3)] == [False, False, True, True]
    assert point(2).minima == [] and point(2).p is None


def test_one_minus_corr_is_one_minus_the_cosine():
    assert _one_minus_corr(np.array([3.0, 4.0]), np.array([0.0, 2.0])) == pytest.approx(
        0.2, abs=1e-15
    )
    assert _one_minus_corr(np.array([3.0, 4.0]), np.array([-6.0, -8.0])) == pytest.approx(
        2.0, abs=1e-15
    )
    assert _one_minus_corr(np.array([2.0, 0.0]), np.array([1.0, 1.0])) == pytest.approx(
        1 - 1 / S2, abs=1e-15
    )


# --------------------------------------------------------------------------------------------
# norm facts
# --------------------------------------------------------------------------------------------

# Two inputs of three tokens (input 1's tokens 0 and 2 are equal), z = e₂ for both. The rows
# ⟨W, (x_α − x_t) zᵀ⟩: input 0 (α = 0): W₀₁ and W₀₁ − W₁₁; input 1 (α = 1): W₀₁ + W₁₁ twice.
X_NM = [[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]], [[0.0, 0.0], [1.0, 1.0], [0.0, 0.0]]]
Z_NM = [[0.0, 1.0], [0.0, 1.0]]
W_NM = np.array([[1.0, 3.0], [-2.0, 1.0]])  # margins 3, 2, 4; ‖W‖²_F = 15, det W = 7


def test_normalized_margin_is_the_least_margin_over_the_norm():
    """min(3, 2, 4) = 2 over ‖W‖_F = √15 and ‖W‖_⋆ = √(15 + 2·7) = √29; with α₁ = 0 instead the
    last row is −(W₀₁ + W₁₁) = −4."""
    alpha = np.array([0, 1])
    X, Z = np.array(X_NM), np.array(Z_NM)
    assert normalized_margin(X, Z, alpha, W_NM, "fro") == pytest.approx(2 / math.sqrt(15), 1e-14)
    assert normalized_margin(X, Z, alpha, W_NM, "nuc") == pytest.approx(2 / math.sqrt(29), 1e-14)
    assert normalized_margin(X, Z, [0, 0], W_NM, "fro") == pytest.approx(-4 / math.sqrt(15), 1e-14)


def test_normalized_margin_is_scale_free_down_to_tiny_and_up_to_huge_matrices():
    """The margin is homogeneous of degree 0; W is rescaled by max|W| first, so W/3 (max entry
    exactly 1), 1e-300·W and 5e307·W (whose norms and last row overflow) give the same number."""
    alpha = np.array([0, 1])
    for norm, want in (("fro", 2 / math.sqrt(15)), ("nuc", 2 / math.sqrt(29))):
        for s in (1 / 3, 1e-300, 5e307):
            got = normalized_margin(np.array(X_NM), np.array(Z_NM), alpha, s * W_NM, norm)
            assert got == pytest.approx(want, rel=1e-14), (norm, s)


def test_normalized_margin_of_zero_is_nan_and_without_constraints_is_infinite():
    X, Z = np.array(X_NM), np.array(Z_NM)
    assert math.isnan(normalized_margin(X, Z, [0, 1], np.zeros((2, 2)), "fro"))
    one_token = np.array([[[1.0, 2.0]], [[0.0, 1.0]]])  # T = 1: no constraint at all
    assert normalized_margin(one_token, Z, [0, 0], W_NM, "fro") == math.inf


def test_normalized_margin_and_balanced_factors_name_a_w_of_the_wrong_rank():
    X, Z = np.array(X_NM), np.array(Z_NM)
    with pytest.raises(ValueError) as err:
        normalized_margin(X, Z, [0, 1], np.ones((1, 2, 2)), "fro")
    assert str(err.value) == "W: expected 2 dimensions, got shape (1, 2, 2)"
    with pytest.raises(ValueError) as err:
        balanced_factors(np.ones((2, 2, 2)))
    assert str(err.value) == "W: expected 2 dimensions, got shape (2, 2, 2)"


def test_balanced_factors_split_the_singular_values_evenly():
    """W = [[0, 2], [−8, 0]] has singular values 8, 2: K = UΣ^{1/2}, Q = VΣ^{1/2} give
    KᵀK = QᵀQ = diag(8, 2), KQᵀ = W and factor energy ½(10 + 10) = 10 = ‖W‖_⋆."""
    W = np.array([[0.0, 2.0], [-8.0, 0.0]])
    K, Q = balanced_factors(W)
    assert np.allclose(K.T @ K, np.diag([8.0, 2.0]), rtol=0, atol=1e-14)
    assert np.allclose(Q.T @ Q, np.diag([8.0, 2.0]), rtol=0, atol=1e-14)
    assert np.allclose(K @ Q.T, W, rtol=0, atol=1e-14)
    assert factor_energy(K, Q) == pytest.approx(10.0, abs=1e-13)


def test_factor_energy_is_half_the_sum_of_both_squared_frobenius_norms():
    K = np.array([[1.0, 2.0], [0.0, 0.0]])
    Q = np.array([[3.0, 0.0], [0.0, 4.0]])
    assert factor_energy(K, Q) == 15.0
    assert factor_energy(Q, np.zeros((2, 2))) == 12.5


# --------------------------------------------------------------------------------------------
# the diagonal model: keys, problem, constraint rows
# --------------------------------------------------------------------------------------------

X_DK = [[[1.0, 2.0], [3.0, 5.0], [0.0, -1.0]], [[4.0, 0.0], [1.0, 1.0], [2.0, 3.0]]]
Z_DK = [[2.0, -1.0], [1.0, 3.0]]


def test_diagonal_keys_are_the_tokens_times_their_query():
    keys = diagonal_keys(np.array(X_DK), np.array(Z_DK))
    assert keys.dtype == DTYPE
    assert torch.equal(keys, _t([[[2, -2], [6, -5], [0, 1]], [[4, 0], [1, 3], [2, 9]]]))


def test_diagonal_keys_name_malformed_tokens_and_queries():
    X, Z = np.array(X_DK), np.array(Z_DK)
    cases = [
        ((X[0], Z), "X: expected 3 dimensions, got shape (3, 2)"),
        ((X, Z[0]), "Z: expected 2 dimensions, got shape (2,)"),
        ((X, np.ones((3, 2))), "Z: expected shape (2, 2), got (3, 2)"),
        ((X, np.ones((2, 3))), "Z: expected shape (2, 2), got (2, 3)"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError) as err:
            diagonal_keys(*args)
        assert str(err.value) == message


def test_diagonal_problem_has_the_diagonal_keys_and_the_problems_scores_and_loss():
    cross = CrossProblem(_t(X_DK), _t(Z_DK), _t([1.0, -1.0]), _t([0.6, 0.8]), "exponential")
    diag = diagonal_problem(cross)
    assert torch.equal(diag.keys, _t([[[2, -2], [6, -5], [0, 1]], [[4, 0], [1, 3], [2, 9]]]))
    # γ_it = y_i vᵀx_it
    assert torch.allclose(diag.scores, _t([[2.2, 5.8, -0.8], [-2.4, -1.4, -3.6]]), atol=1e-15)
    assert diag.loss.name == "exponential"


def test_diag_constraints_are_the_key_differences_in_input_then_token_order():
    """α = (2, 0): rows (x₀₂ − x₀₀)⊙z₀, (x₀₂ − x₀₁)⊙z₀, (x₁₀ − x₁₁)⊙z₁, (x₁₀ − x₁₂)⊙z₁."""
    A = diag_constraints(np.array(X_DK), np.array(Z_DK), np.array([2, 0]))
    assert np.array_equal(A, [[-2.0, 3.0], [-6.0, 6.0], [3.0, -3.0], [2.0, -9.0]])


def test_diag_constraints_name_malformed_arguments():
    X, Z = np.array(X_DK), np.array(Z_DK)
    cases = [
        ((X[0], Z, [0]), "X: expected 3 dimensions, got shape (3, 2)"),
        ((X, Z[0], [0, 0]), "Z: expected 2 dimensions, got shape (2,)"),
        ((X, Z, [0]), "alpha: expected shape (2,), got (1,)"),
        ((X, Z, [0, 3]), "alpha: entries must lie in [0, 3)"),
    ]
    for args, message in cases:
        with pytest.raises(ValueError) as err:
            diag_constraints(*args)
        assert str(err.value) == message


# --------------------------------------------------------------------------------------------
# the duality certificate
# --------------------------------------------------------------------------------------------

A_HAND = np.array([[1.0, 0.0], [0.0, -2.0], [2.0, 1.0]])
W_HAND = np.array([1.0, -0.5])
L1_DUALS = np.array([1.0, 0.5, 0.0])
L2_DUALS = np.array([1.0, 0.25, 0.0]) / (S5 / 2)


def test_certificate_of_the_hand_solved_svms_is_zero():
    res = diag_certificate(A_HAND, W_HAND, L1_DUALS, "l1")
    assert list(res) == ["primal", "dual_sign", "dual_norm", "gap"]
    assert res == {"primal": 0.0, "dual_sign": 0.0, "dual_norm": 0.0, "gap": 0.0}
    res = diag_certificate(A_HAND, W_HAND, L2_DUALS, "l2")
    assert max(res.values()) <= 1e-15


def test_certificate_residuals_are_each_violation_in_its_own_units():
    # w = (½, −½): rows give ½, 1, ½ (primal ½); ‖w‖₁ = 1 so the gap is |1 − 3/2|/max(1, 1).
    assert diag_certificate(A_HAND, np.array([0.5, -0.5]), L1_DUALS, "l1") == {
        "primal": 0.5, "dual_sign": 0.0, "dual_norm": 0.0, "gap": 0.5,
    }  # fmt: skip
    # λ = (1, ½, −¼): Aᵀλ = (½, −5/4), Σλ = 5/4, gap |3/2 − 5/4|/(3/2).
    assert diag_certificate(A_HAND, W_HAND, np.array([1.0, 0.5, -0.25]), "l1") == {
        "primal": 0.0, "dual_sign": 0.25, "dual_norm": 0.25, "gap": 0.25 / 1.5,
    }  # fmt: skip
    # λ = (2, ½, 0): Aᵀλ = (2, −1): ‖·‖∞ − 1 = 1 for ℓ1, ‖·‖₂ − 1 = √5 − 1 for ℓ2.
    lam = np.array([2.0, 0.5, 0.0])
    assert diag_certificate(A_HAND, W_HAND, lam, "l1")["dual_norm"] == 1.0
    res = diag_certificate(A_HAND, W_HAND, lam, "l2")
    assert res["dual_norm"] == pytest.approx(S5 - 1, abs=1e-15)
    assert res["gap"] == pytest.approx((2.5 - S5 / 2) / (S5 / 2), abs=1e-15)  # ‖w‖₂ = √5/2
    # ℓ2 at w = (½, −½): ‖w‖₂ = 1/√2 < 1, so the gap is not divided.
    res = diag_certificate(A_HAND, np.array([0.5, -0.5]), L1_DUALS, "l2")
    assert res["gap"] == pytest.approx(1.5 - 1 / S2, abs=1e-15)
    # a gap at ‖w‖₁ = 3 > 1 is relative: |3 − 3/2|/3
    assert diag_certificate(A_HAND, 2 * W_HAND, L1_DUALS, "l1")["gap"] == 0.5


def test_certificate_of_an_svm_without_constraints_is_zero():
    res = diag_certificate(np.zeros((0, 2)), np.zeros(2), np.zeros(0), "l1")
    assert res == {"primal": 0.0, "dual_sign": 0.0, "dual_norm": 0.0, "gap": 0.0}


# --------------------------------------------------------------------------------------------
# diag_svm
# --------------------------------------------------------------------------------------------

# Three inputs, two tokens; rows (1, 0), (0, −2), (2, 1) (input 1 selects its token 1).
X_SVM = np.array([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [0.0, 0.0]]])
Z_SVM = np.array([[1.0, 1.0], [1.0, -2.0], [2.0, 1.0]])
ALPHA_SVM = np.array([0, 1, 0])


def test_instance_rows_are_the_hand_solved_ones():
    assert np.array_equal(diag_constraints(X_SVM, Z_SVM, ALPHA_SVM), A_HAND)


def test_l1_svm_is_the_hand_solved_lp_with_every_field():
    with failures.watch() as seen:
        sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM)  # "l1" by default
    assert not seen
    assert sol.norm == "l1" and sol.status == "optimal" and sol.ok
    assert np.allclose(sol.w, W_HAND, rtol=0, atol=1e-14)
    assert sol.value == pytest.approx(1.5, abs=1e-14)
    assert np.allclose(sol.duals, L1_DUALS, rtol=0, atol=1e-14)
    assert list(sol.residuals) == ["primal", "dual_sign", "dual_norm", "gap"]
    assert max(sol.residuals.values()) <= 1e-14
    assert sol.reason == "HiGHS LP; certified"


def test_l1_svm_with_an_exact_certificate_passes_at_zero_tolerance():
    """HiGHS solves this LP exactly: every residual is 0.0, and 0 ≤ tol = 0 certifies."""
    sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l1", tol=0.0)
    assert sol.residuals == {"primal": 0.0, "dual_sign": 0.0, "dual_norm": 0.0, "gap": 0.0}
    assert sol.status == "optimal"


def test_l2_svm_is_the_hand_solved_qp_with_every_field():
    with failures.watch() as seen:
        sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l2")
    assert not seen
    assert sol.norm == "l2" and sol.status == "optimal" and sol.ok
    assert np.allclose(sol.w, W_HAND, rtol=0, atol=1e-12)
    assert sol.value == pytest.approx(S5 / 2, abs=1e-12)
    assert np.allclose(sol.duals, L2_DUALS, rtol=0, atol=1e-12)
    assert max(sol.residuals.values()) <= 1e-12
    assert sol.reason.startswith("oracle (") and sol.reason.endswith("); certified")
    with pytest.raises(ValueError, match="tol: must be positive"):  # tol reaches the oracle
        diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l2", tol=0.0)


def test_l2_svm_hands_the_diagonal_keys_alpha_and_tolerance_to_the_oracle(monkeypatch):
    calls = []

    def oracle(keys, alpha, *, tol):
        calls.append((keys, alpha, tol))
        return SimpleNamespace(ok=True, x=W_HAND.copy(), solver="script", status="optimal")

    monkeypatch.setattr(kqpath, "att_svm", oracle)
    sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l2", tol=1e-9)
    ((keys, alpha, tol),) = calls
    assert torch.equal(keys, _t([[[1, 0], [0, 0]], [[0, 0], [0, -2]], [[2, 1], [0, 0]]]))
    assert alpha is ALPHA_SVM and tol == 1e-9
    assert sol.status == "optimal" and sol.reason == "oracle (script); certified"
    assert np.array_equal(sol.w, W_HAND)
    assert np.allclose(sol.duals, L2_DUALS, rtol=0, atol=1e-15)
    assert sol.value == pytest.approx(S5 / 2, abs=1e-15)


@pytest.mark.parametrize(("slack", "active"), [(1.0e-6, True), (1.2e-6, False)])
def test_l2_duals_use_the_rows_within_1e_6_max_1_w_of_tight(monkeypatch, slack, active):
    """A third row parallel to (0, −2) with slack δ: it counts as tight when δ ≤ 1e-6·‖w‖₂
    (= 1.118e-6 here), and then NNLS prefers it (its column has the larger inner product with
    w); otherwise it gets no dual."""
    monkeypatch.setattr(
        kqpath,
        "att_svm",
        lambda keys, alpha, *, tol: SimpleNamespace(ok=True, x=W_HAND.copy(), solver="script"),
    )
    X = X_SVM.copy()
    X[2] = [[0.0, 0.0], [0.0, 1.0 + slack]]
    Z = Z_SVM.copy()
    Z[2] = [1.0, -2.0]
    sol = diag_svm(X, Z, np.array([0, 1, 1]), "l2", tol=1e-5)
    assert sol.status == "optimal"
    if active:
        assert sol.duals[1] == 0.0 and sol.duals[2] > 0.2
    else:
        assert sol.duals[2] == 0.0
        assert np.allclose(sol.duals[:2], L2_DUALS[:2], rtol=0, atol=1e-15)


def test_an_infeasible_instance_has_no_point_under_either_norm():
    X = X_SVM.copy()
    X[0, 1] = X[0, 0]  # a duplicate of the selected token: 0 ≥ 1
    for norm in ("l1", "l2"):
        with failures.watch() as seen:
            sol = diag_svm(X, Z_SVM, ALPHA_SVM, norm)
        assert not seen
        assert sol.norm == norm and sol.status == "infeasible" and not sol.ok
        assert sol.w is None and math.isnan(sol.value) and sol.duals is None
        assert sol.residuals == {}
        if norm == "l1":  # HiGHS' own message
            assert sol.reason.startswith("The problem is infeasible.")
        else:  # the oracle's
            assert sol.reason == att_svm(diagonal_keys(X, Z_SVM), ALPHA_SVM).reason


def test_an_l2_oracle_failure_is_passed_on_with_its_status_point_and_reason(monkeypatch):
    point = np.array([0.9, -0.4])
    answer = SimpleNamespace(ok=False, status="inaccurate", x=point, reason="script: loose")
    monkeypatch.setattr(kqpath, "att_svm", lambda keys, alpha, *, tol: answer)
    sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l2")
    assert sol.norm == "l2" and sol.status == "inaccurate" and sol.reason == "script: loose"
    assert sol.w is point and math.isnan(sol.value)
    assert sol.duals is None and sol.residuals == {}


def _lp_script(monkeypatch, result):
    calls = []

    def linprog(*args, **kwargs):
        calls.append((args, kwargs))
        return result

    monkeypatch.setattr(kqpath, "linprog", linprog)
    return calls


def test_l1_svm_solves_the_split_lp_on_w_plus_and_w_minus(monkeypatch):
    """min 1ᵀ(w⁺ + w⁻) s.t. −[A, −A](w⁺; w⁻) ≤ −1, w± ≥ 0, by HiGHS; w = w⁺ − w⁻ and the duals
    are minus HiGHS' marginals."""
    result = SimpleNamespace(
        status=0,
        x=np.array([1.0, 0.0, 0.0, 0.5]),
        ineqlin=SimpleNamespace(marginals=-L1_DUALS),
        message="script",
    )
    calls = _lp_script(monkeypatch, result)
    sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l1")
    ((args, kwargs),) = calls
    assert len(args) == 1 and np.array_equal(args[0], np.ones(4))
    assert sorted(kwargs) == ["A_ub", "b_ub", "bounds", "method"]
    assert np.array_equal(kwargs["A_ub"], -np.hstack([A_HAND, -A_HAND]))
    assert np.array_equal(kwargs["b_ub"], -np.ones(3))
    assert kwargs["bounds"] == (0, None) and kwargs["method"] == "highs"
    assert sol.status == "optimal" and sol.reason == "HiGHS LP; certified"
    assert np.array_equal(sol.w, W_HAND) and np.array_equal(sol.duals, L1_DUALS)
    assert sol.value == 1.5


@pytest.mark.parametrize(
    ("marginals", "x", "failed"),
    [
        (-np.array([1.0, 0.25, 0.0]), [1.0, 0.0, 0.0, 0.5], "gap=1.7e-01"),
        (-np.array([1.0, 0.5, -0.25]), [1.0, 0.0, 0.0, 0.5], "dual_sign=2.5e-01, "
         "dual_norm=2.5e-01, gap=1.7e-01"),
        (-L1_DUALS, [0.5, 0.0, 0.0, 0.5], "primal=5.0e-01, gap=5.0e-01"),
    ],
)  # fmt: skip
def test_an_uncertified_l1_answer_is_inaccurate_reported_and_names_its_residuals(
    monkeypatch, marginals, x, failed
):
    result = SimpleNamespace(
        status=0, x=np.array(x), ineqlin=SimpleNamespace(marginals=marginals), message="script"
    )
    _lp_script(monkeypatch, result)
    with failures.watch() as seen:
        sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l1")
    reason = f"HiGHS LP; certificate fails: {failed}"
    assert sol.norm == "l1" and sol.status == "inaccurate" and not sol.ok
    assert sol.reason == reason and math.isnan(sol.value)
    assert np.array_equal(sol.w, np.array(x[:2]) - np.array(x[2:]))
    assert np.array_equal(sol.duals, -marginals)
    assert sol.residuals == diag_certificate(A_HAND, sol.w, -marginals, "l1")
    assert [f.key for f in seen.failures] == ["SVM oracle: inaccurate"]
    assert seen.failures[0].detail == f"diagonal l1: {reason}"


def test_an_uncertified_l2_answer_is_inaccurate_and_names_the_oracle(monkeypatch):
    """w = (1, −1) is feasible but not the SVM: rows 1 and 3 are tight, and the best
    nonnegative combination of them towards w is ‖w‖₂⁻¹·(1, 0, 0), whose sum 1/√2 misses
    ‖w‖₂ = √2 by a relative gap of ½."""
    w = np.array([1.0, -1.0])
    monkeypatch.setattr(
        kqpath,
        "att_svm",
        lambda keys, alpha, *, tol: SimpleNamespace(ok=True, x=w.copy(), solver="script"),
    )
    with failures.watch() as seen:
        sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l2")
    reason = "oracle (script); certificate fails: gap=5.0e-01"
    assert sol.norm == "l2" and sol.status == "inaccurate" and sol.reason == reason
    assert np.allclose(sol.duals, [1 / S2, 0.0, 0.0], rtol=0, atol=1e-15)
    assert np.array_equal(sol.w, w) and math.isnan(sol.value)
    assert sol.residuals["gap"] == pytest.approx(0.5, abs=1e-15)
    assert [f.key for f in seen.failures] == ["SVM oracle: inaccurate"]
    assert seen.failures[0].detail == f"diagonal l2: {reason}"


def test_an_l2_answer_with_no_tight_row_is_inaccurate_not_a_crash(monkeypatch):
    """w = 2·(1, −½) leaves every row slack: no dual can be formed, the gap is 1, the answer is
    "inaccurate". nnls is wrapped so that the zero-column call raises here instead of aborting
    the test run (scipy 1.17: scipy.optimize.nnls(np.zeros((2, 0)), b) ends the process)."""
    real_nnls = kqpath.nnls

    def guarded(A, b):
        if A.shape[1] == 0:
            raise RuntimeError("nnls on a matrix with no column aborts the interpreter")
        return real_nnls(A, b)

    monkeypatch.setattr(kqpath, "nnls", guarded)
    answer = SimpleNamespace(ok=True, x=2 * W_HAND, solver="script")
    monkeypatch.setattr(kqpath, "att_svm", lambda keys, alpha, *, tol: answer)
    with failures.watch():
        sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l2")
    assert sol.status == "inaccurate"
    assert sol.reason == "oracle (script); certificate fails: gap=1.0e+00"


@pytest.mark.parametrize("status", [1, 3, 4])
def test_any_other_highs_status_is_a_reported_solver_error(monkeypatch, status):
    _lp_script(monkeypatch, SimpleNamespace(status=status, x=None, message="gave up"))
    with failures.watch() as seen:
        sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l1")
    assert sol == DiagSVM("l1", "solver_error", None, sol.value, None, {}, "gave up")
    assert math.isnan(sol.value)
    assert [str(f) for f in seen.failures] == ["SVM oracle: solver_error (diagonal ℓ1 LP: gave up)"]


def test_highs_status_2_is_an_unreported_infeasible(monkeypatch):
    _lp_script(monkeypatch, SimpleNamespace(status=2, x=None, message="no point"))
    with failures.watch() as seen:
        sol = diag_svm(X_SVM, Z_SVM, ALPHA_SVM, "l1")
    assert sol == DiagSVM("l1", "infeasible", None, sol.value, None, {}, "no point")
    assert math.isnan(sol.value) and not seen


def test_diag_svm_rejects_other_norms_by_name():
    for norm in ("l3", "L1", "fro"):
        with pytest.raises(ValueError) as err:
            diag_svm(X_SVM, Z_SVM, ALPHA_SVM, norm)
        assert str(err.value) == f"norm: expected 'l1' or 'l2', got {norm!r}"


def test_a_diag_svm_outcome_needs_a_known_status_and_a_string_reason():
    with pytest.raises(ValueError, match="status: expected one of"):
        DiagSVM("l1", "fine", None, math.nan, None, {}, "")
    with pytest.raises(ValueError, match="reason: expected a string, got None"):
        DiagSVM("l1", "optimal", None, math.nan, None, {}, None)
    assert DiagSVM("l1", "solver_error", None, math.nan, None, {}, "").ok is False


# --------------------------------------------------------------------------------------------
# per-factor NGD (diag_kq_ngd) on a scripted gradient
# --------------------------------------------------------------------------------------------


class Linear:
    """A problem of dim 2 whose log-space gradient is the constant g (a linear loss), recording
    the w = k ⊙ q it was asked at."""

    dim = 2

    def __init__(self, g=(1.0, 2.0), log_scale=0.0):
        self.g, self.log_scale, self.at = np.array(g), log_scale, []

    def gradient_log_np(self, w):
        self.at.append(w.copy())
        return self.log_scale, self.g.copy()


K0, Q0 = [0.8, 0.3], [3.0, 2.0]


def test_one_ngd_step_moves_each_factor_by_lr_along_its_normalised_gradient():
    """g = (1, 2), k = (0.8, 0.3), q = (3, 2): g ⊙ q = (3, 4) has norm 5 and g ⊙ k = (0.8, 0.6)
    norm 1, so with lr = ½, k moves by −½·(0.6, 0.8) and q by −½·(0.8, 0.6)."""
    problem = Linear()
    run = diag_kq_ngd(problem, K0, Q0, lr=0.5, steps=1)
    assert np.allclose(problem.at[0], [2.4, 0.6], rtol=0, atol=1e-15)  # asked at w = k ⊙ q
    assert np.array_equal(run.steps, [0, 1]) and run.stop == "step budget"
    assert np.allclose(run.ks, [K0, [0.5, -0.1]], rtol=0, atol=1e-15)
    assert np.allclose(run.qs, [Q0, [2.6, 1.7]], rtol=0, atol=1e-15)
    assert np.allclose(run.w, [1.3, -0.17], rtol=0, atol=1e-15)


def test_an_ngd_step_has_length_lr_however_small_the_gradient():
    """k = (0.08, 0.03), q = (0.3, 0.2): g ⊙ q = (0.3, 0.4) has norm ½ and g ⊙ k = (0.08, 0.06)
    norm 1/10, yet each factor still moves by exactly lr along the unit directions."""
    run = diag_kq_ngd(Linear(), [0.08, 0.03], [0.3, 0.2], lr=0.5, steps=1)
    assert np.allclose(run.ks[-1], [0.08 - 0.3, 0.03 - 0.4], rtol=0, atol=1e-15)
    assert np.allclose(run.qs[-1], [0.3 - 0.4, 0.2 - 0.3], rtol=0, atol=1e-15)


def test_ngd_defaults_are_lr_0_1_for_8000_steps_keeping_first_and_last():
    first = diag_kq_ngd(Linear(), K0, Q0, steps=1)
    assert np.allclose(first.ks[-1], [0.74, 0.22], rtol=0, atol=1e-15)
    assert np.allclose(first.qs[-1], [2.92, 1.94], rtol=0, atol=1e-15)
    problem = Linear()
    t0 = time.perf_counter()
    run = diag_kq_ngd(problem, K0, Q0)
    wall = time.perf_counter() - t0
    assert len(problem.at) == 8000
    assert np.array_equal(run.steps, [0, 8000]) and run.ks.shape == run.qs.shape == (2, 2)
    assert run.stop == "step budget" and 0.0 <= run.seconds <= wall


def test_ngd_records_every_record_every_steps_and_the_last():
    run = diag_kq_ngd(Linear(), K0, Q0, steps=5, record_every=2)
    assert np.array_equal(run.steps, [0, 2, 4, 5]) and run.ks.shape == (4, 2)
    run = diag_kq_ngd(Linear(), K0, Q0, steps=4, record_every=2)
    assert np.array_equal(run.steps, [0, 2, 4]) and run.qs.shape == (3, 2)
    every = diag_kq_ngd(Linear(), K0, Q0, steps=4, record_every=1)
    assert np.array_equal(every.steps, [0, 1, 2, 3, 4])
    assert np.array_equal(every.ks[[0, 2, 4]], run.ks)


def test_a_zero_factor_gradient_leaves_that_factor_alone():
    """k = 0: g ⊙ k = 0, so q stays and k moves by lr along g ⊙ q/‖g ⊙ q‖ = (0.6, 0.8); and
    q = 0: k stays and q moves along g ⊙ k/‖g ⊙ k‖ = (0.8, 0.6)."""
    run = diag_kq_ngd(Linear(), [0.0, 0.0], Q0, lr=0.5, steps=1)
    assert np.allclose(run.ks[-1], [-0.3, -0.4], rtol=0, atol=1e-15)
    assert np.array_equal(run.qs[-1], Q0) and run.stop == "step budget"
    run = diag_kq_ngd(Linear(), K0, [0.0, 0.0], lr=0.5, steps=1)
    assert np.array_equal(run.ks[-1], K0)
    assert np.allclose(run.qs[-1], [-0.4, -0.3], rtol=0, atol=1e-15)


STATIONARY = "stationary point (both factor gradients exactly zero)"


def test_ngd_stops_where_both_factor_gradients_vanish():
    for problem, k0, q0 in [
        (Linear(), [0.0, 0.0], [0.0, 0.0]),
        (Linear(g=(0.0, 0.0), log_scale=-math.inf), K0, Q0),
    ]:
        run = diag_kq_ngd(problem, k0, q0, steps=10, record_every=3)
        assert run.stop == STATIONARY and len(problem.at) == 1
        assert np.array_equal(run.steps, [0])
        assert np.array_equal(run.ks, [k0]) and np.array_equal(run.qs, [q0])


def test_ngd_names_malformed_factors():
    cases = [
        (([[0.6, 0.8]], [3.0, 4.0]), "k0: expected 1 dimensions, got shape (1, 2)"),
        (([0.6, 0.8], [[3.0, 4.0]]), "q0: expected 1 dimensions, got shape (1, 2)"),
        (([0.6, 0.8, 1.0], [3.0, 4.0, 1.0]), "k0, q0: expected shape (2,), got (3,), (3,)"),
        (([0.6, 0.8], [3.0, 4.0, 1.0]), "k0, q0: expected shape (2,), got (2,), (3,)"),
        (([0.6], [3.0, 4.0]), "k0, q0: expected shape (2,), got (1,), (2,)"),
    ]
    for (k0, q0), message in cases:
        with pytest.raises(ValueError) as err:
            diag_kq_ngd(Linear(), k0, q0, steps=1)
        assert str(err.value) == message
