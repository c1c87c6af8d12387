"""Unit tests of models/flows/regpath.py: global and local regularization paths (spec maxmargin
§2.4, §2.5, §2.6; controls F6, F9, F10 of §5; calibration runs of §7)."""

import dataclasses
import math

import mpmath as mp
import numpy as np
import pytest
import torch

from models.flows import kernels
from models.flows.regpath import (
    Objective,
    _selected_scores,
    circle_search,
    local_reg_path_point,
    log_gap_batch,
    objective_for,
    reg_path,
    reg_path_point,
    single_thread,
)
from models.oracles.selection import global_opt
from models.oracles.svm import att_svm
from models.problems.attention import PromptProblem, one_minus_cos
from models.problems.heads import NonlinearHeadProblem, concave_bump, saddle_square, squared_norm
from models.problems.losses import square

LOSSES = ("logistic", "exponential", "correlation")
F64 = torch.float64

# Spec §7 two-input toy, decoupled, keys 2-D: inputs [(0,0; 0), (1,1; 1)] and [(0,0; 0), (1,−1; 1)].
TOY_KEYS = torch.tensor([[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]]], dtype=F64)
TOY_SCORES = torch.tensor([[0.0, 1.0], [0.0, 1.0]], dtype=F64)
TOY_PMM = np.array([1.0, 0.0])  # (1,1)·p ≥ 1 and (1,−1)·p ≥ 1, both tight
# Fig. 1(b): keys (−0.1, 1), (1, 0), (0, 0) with scores 1, 0.9, 0; token 1 is locally optimal.
FIG1_KEYS = torch.tensor([[[-0.1, 1.0], [1.0, 0.0], [0.0, 0.0]]], dtype=F64)
FIG1B_SCORES = torch.tensor([[1.0, 0.9, 0.0]], dtype=F64)
# Nonlinear heads (spec §2.6): all Y = +1, W = I. Convex ψ: the ψ-optimal token is the longest.
HEAD_X = torch.tensor(
    [[[1.0, 0.2], [0.1, 0.5], [-0.4, -0.2]], [[0.3, 1.0], [0.5, -0.3], [-0.2, 0.3]]], dtype=F64
)
# Concave ψ: 0 lies inside each input's triangle, so a mixture beats every vertex.
CONCAVE_X = torch.tensor(
    [[[1.0, 0.0], [-0.6, 0.7], [-0.6, -0.7]], [[0.2, 1.1], [0.7, -0.6], [-0.8, -0.5]]], dtype=F64
)


def toy(loss: str, top_score: float = 1.0) -> PromptProblem:
    scores = TOY_SCORES.clone()
    scores[0, 1] = top_score
    return PromptProblem(TOY_KEYS, scores, loss)


# ------------------------------------------------------------------------------ the objective


@pytest.mark.parametrize("loss", LOSSES)
def test_log_gap_batch_matches_engine(loss):
    """The batched, differentiable log-gap equals PromptProblem.log_loss_gap (the engine) from
    unsaturated points to ‖p‖ = 400, where L − L* ≈ e^{-400}."""
    problem = toy(loss, top_score=2.0)
    gen = torch.Generator().manual_seed(0)
    P = torch.randn(40, 2, generator=gen, dtype=F64)
    P *= torch.logspace(-1, math.log10(400), 40, dtype=F64)[:, None]
    opt = np.array([1, 1])
    log_gap, sign = log_gap_batch(problem, P, opt)
    engine = np.array([problem.log_loss_gap(p, opt) for p in P])
    assert (sign == 1).all()
    # The engine switches to first order at δ < 1e-8, here at ~e^{-600}: 1e-8 relative apart.
    np.testing.assert_allclose(log_gap.numpy(), engine, rtol=0, atol=2e-8)


def _drop_problem(seed: int, n: int, T: int, d: int, ties: bool):
    gen = np.random.default_rng(seed)
    keys = gen.normal(size=(n, T, d))
    scores = gen.integers(-2, 3, size=(n, T)).astype(float) if ties else gen.uniform(-1, 1, (n, T))
    alpha = gen.integers(0, T, size=n)
    diff = scores[np.arange(n), alpha][:, None] - scores
    return keys, scores, alpha, diff


def _margin_drops(keys, diff, P, log_drop, sign_drop):
    """kernels.margin_drop at every point and input: log|δ_ki| and sign δ_ki."""
    z = np.empty(keys.shape[1])
    for k in range(P.shape[0]):
        for i in range(keys.shape[0]):
            log_drop[k, i], sign_drop[k, i] = kernels.margin_drop(keys, diff, i, P[k], z)[:2]


def _reference_drops(keys, diff, P):
    """50-digit δ_ki = Σ_t s_it·diff_it and its parts, from the kernel's float64 logits."""
    mp.mp.dps = 50
    out = []
    for p in P:
        row = []
        for i in range(keys.shape[0]):
            z = [mp.mpf(sum(float(keys[i, t, j]) * float(p[j]) for j in range(keys.shape[2])))
                 for t in range(keys.shape[1])]  # fmt: skip
            top = max(z)
            w = [mp.exp(zt - top) for zt in z]
            s = [wt / mp.fsum(w) for wt in w]
            pos = mp.fsum(st * mp.mpf(float(c)) for st, c in zip(s, diff[i], strict=True) if c > 0)
            neg = -mp.fsum(st * mp.mpf(float(c)) for st, c in zip(s, diff[i], strict=True) if c < 0)
            spread = float(max(abs(zt - top) for zt in z))
            row.append((pos - neg, pos + neg, spread))
        out.append(row)
    return out


@pytest.mark.parametrize("ties", [False, True])
@pytest.mark.parametrize("seed", range(4))
def test_margin_drops_match_50_digits(seed, ties):
    """kernels.margin_drop (the δ of the log gap's compiled form) against 50-digit values
    from ‖p‖ = 0.1 to 3000, where whole parts of δ lie below e^{-745} relative to the top
    token: |δ − δ_ref| ≤ 8·(T + Z)·ε·(P + N), with P, N the positive and negative parts and Z
    the logit spread (the bound of tests/test_kernels_ot.py: log-softmax rounding, then one
    signed difference), and the sign exact wherever |δ_ref| exceeds that bound."""
    n, T, d = 3, 5, 2
    keys, _, _, diff = _drop_problem(seed, n, T, d, ties)
    gen = np.random.default_rng(100 + seed)
    P = gen.normal(size=(12, d)) * np.geomspace(0.1, 3000, 12)[:, None]
    log_drop, sign_drop = np.empty((12, n)), np.empty((12, n))
    _margin_drops(keys, diff, P, log_drop, sign_drop)
    ref = _reference_drops(keys, diff, P)
    eps = np.finfo(np.float64).eps
    for k in range(12):
        for i in range(n):
            true, parts, spread = ref[k][i]
            bound = 8 * (T + spread) * eps * parts
            got = sign_drop[k, i] * mp.exp(mp.mpf(float(log_drop[k, i])))
            assert abs(got - true) <= bound, (k, i, float(got), float(true), float(bound))
            if abs(true) > bound:
                assert sign_drop[k, i] == (1.0 if true > 0 else -1.0)


@pytest.mark.parametrize("loss", LOSSES)
def test_closed_log_gap_values_match_batch(loss):
    """The compiled objective (grids, line searches, descents) and the differentiable one
    agree: the same sign at every point, and log|L − L_α| within 1e-9 where no input's parts
    of δ nearly cancel (there both lose the digits that cancel, each its own way)."""
    keys, scores, alpha, diff = _drop_problem(7, 3, 5, 2, ties=False)
    problem = PromptProblem(torch.as_tensor(keys), torch.as_tensor(scores), loss)
    gen = torch.Generator().manual_seed(1)
    P = torch.randn(4000, 2, generator=gen, dtype=F64)
    P *= torch.logspace(-2, 3, 4000, dtype=F64)[:, None]
    a, sa = log_gap_batch(problem, P, alpha)
    b, sb, _, _ = _closed(problem, alpha, P.numpy(), order=0)
    b, sb = torch.from_numpy(b), torch.from_numpy(sb)
    log_drop, sign_drop = np.empty((4000, 3)), np.empty((4000, 3))
    _margin_drops(keys, diff, P.numpy(), log_drop, sign_drop)
    # Inputs whose δ is a near-cancellation: |δ| < 1e-6·(its positive and negative parts).
    logits = torch.einsum("itd,kd->kit", torch.as_tensor(keys), P)
    s = torch.softmax(logits, -1)
    parts = (s * torch.as_tensor(diff).abs()).sum(-1)
    clear = (torch.exp(torch.as_tensor(log_drop)) > 1e-6 * parts).all(-1) & (parts > 1e-280).all(-1)
    assert int(clear.sum()) > 3000
    assert torch.equal(sa, sb)
    assert torch.equal(torch.isfinite(a), torch.isfinite(b))
    rel = ((a - b).abs() / a.abs().clamp(min=1.0))[clear & torch.isfinite(a)]
    assert float(rel.max()) <= 1e-9


def test_grid_objective_uses_the_compiled_gap():
    """``objective_for``'s grid values are the compiled ones (the descents' own values, bit for
    bit), and the same ranks as ``fn``."""
    problem = toy("logistic", top_score=2.0)
    obj = objective_for(problem)
    P = torch.randn(50, 2, generator=torch.Generator().manual_seed(3), dtype=F64) * 20
    assert obj.fast is not None
    assert torch.equal(obj.grid(P), obj.values(P))
    np.testing.assert_allclose(obj.grid(P).numpy(), obj.fn(P).detach().numpy(), rtol=1e-9)


def test_log_gap_batch_is_signed_for_a_local_alpha():
    """For α = token 1 of Fig. 1(b), attention on the higher-scoring token 0 puts L below the
    floor of α: the gap is negative there and positive near p^mm(α)."""
    problem = PromptProblem(FIG1_KEYS, FIG1B_SCORES, "logistic")
    P = torch.tensor([[0.0, 5.0], [2.0, 0.0]], dtype=F64)
    log_gap, sign = log_gap_batch(problem, P, [1])
    plain = problem.loss_path(P) - problem.loss_floor([1])
    assert sign.tolist() == [-1.0, 1.0]
    np.testing.assert_allclose(sign * torch.exp(log_gap), plain, rtol=1e-12)


def test_objective_kind_follows_the_problem():
    assert objective_for(toy("logistic")).kind == "log_gap"
    assert objective_for(PromptProblem(TOY_KEYS, TOY_SCORES, square(0.5))).kind == "loss"
    assert objective_for(NonlinearHeadProblem(HEAD_X, torch.ones(2))).kind == "log_gap"
    assert objective_for(NonlinearHeadProblem(HEAD_X, torch.ones(2), psi=torch.tanh)).kind == (
        "loss"
    )


def test_plain_loss_is_flat_in_float64_and_comes_back_uncertified():
    """Spec §3: at R = 60, L − L* ≈ e^{-60} is below float64 resolution of L, so a grid on L is
    constant near p^mm; the certificate must say so rather than return a guess."""
    problem = toy("logistic")
    with single_thread():
        plain = circle_search(Objective(problem.loss_path, "loss"), 60.0, grid=2000)
        logged = circle_search(objective_for(problem), 60.0, grid=2000)
    assert not plain.certified
    assert logged.certified and one_minus_cos(logged.p, TOY_PMM) < 1e-12


# --------------------------------------------------------------------- Theorem RP (§2.4, §7)


@pytest.mark.parametrize("loss", LOSSES)
def test_toy_reg_path_converges_to_pmm(loss):
    """Spec §2.4/§7: 1 − cos(p_R, p^mm) ≤ 1e-3 by R = 10 and ≤ 2e-5 by R = 50, ‖p_R‖ = R,
    non-increasing in R. (This toy is symmetric under reflection, which swaps its inputs, so
    p_R lies exactly on p^mm: the bounds hold with room to spare.)"""
    radii = (10.0, 20.0, 50.0, 100.0)
    path = reg_path(toy(loss), radii)
    gaps = [one_minus_cos(pt.p, TOY_PMM) for pt in path]
    assert gaps[0] <= 1e-3 and gaps[2] <= 2e-5
    assert all(b <= a + 1e-15 for a, b in zip(gaps, gaps[1:], strict=False))
    for pt, R in zip(path, radii, strict=True):
        assert pt.norm == pytest.approx(R, rel=1e-12)
        assert pt.on_boundary and pt.certified and pt.objective_kind == "log_gap"


@pytest.mark.parametrize("loss", LOSSES)
def test_asymmetric_toy_reg_path_is_a_ray(loss):
    """With top score 2 in the first input the path is p_R ≈ R·p̂ + ρ*: 1 − cos decreases
    strictly, like |ρ*⊥|²/(2R²), so R²·(1 − cos) stays in a narrow band."""
    radii = np.array([10.0, 20.0, 50.0, 100.0])
    path = reg_path(toy(loss, top_score=2.0), radii)
    gaps = np.array([one_minus_cos(pt.p, TOY_PMM) for pt in path])
    assert (np.diff(gaps) < 0).all() and gaps[0] <= 1e-3
    scaled = radii**2 * gaps
    assert scaled.max() / scaled.min() < 1.5
    assert all(pt.certified for pt in path)


def test_grid_agrees_with_projected_newton_restarts():
    """Dim 2: the 20,000-angle grid and the Riemannian restarts find the same minimiser."""
    problem = toy("logistic", top_score=2.0)
    for R in (10.0, 50.0):
        grid = reg_path_point(problem, R, method="grid")
        runs = reg_path_point(problem, R, method="restarts", restarts=16)
        assert one_minus_cos(grid.p, runs.p) < 1e-12
        assert grid.objective == pytest.approx(runs.objective, rel=1e-10)
        assert runs.certified and runs.details["agreeing"] >= 3


def test_three_dimensional_keys_use_restarts():
    """Dim 3 (restarts from Fibonacci points and SVM directions): p_R → p^mm, certified."""
    extra = torch.tensor([[[0.0], [0.3]], [[0.0], [-0.2]]], dtype=F64)
    problem = PromptProblem(torch.cat([TOY_KEYS, extra], -1), TOY_SCORES, "logistic")
    pmm = att_svm(problem.keys, [1, 1]).x
    path = reg_path(problem, (10.0, 50.0, 200.0), restarts=32)
    gaps = [one_minus_cos(pt.p, pmm) for pt in path]
    assert gaps[0] < 1e-4 and gaps[2] < 1e-7
    assert all(b < a for a, b in zip(gaps, gaps[1:], strict=False))
    assert all(pt.certified and pt.method == "restarts" and pt.n_local_minima == 1 for pt in path)
    # every start is counted: the 32 Fibonacci points and one per feasible selection's SVM
    from models.flows.regpath import svm_directions

    assert all(pt.details["restarts"] == 32 + svm_directions(problem).shape[0] for pt in path)


# ------------------------------------------------------------- Theorem RP-loc (§2.5) and F6


def test_global_path_goes_global_and_local_path_goes_local_fig1b():
    """F6 is false: the global path tends to p^mm(opt), never to the local p^mm(α = token 1);
    the cap-restricted path tends to p^mm(α)."""
    problem = PromptProblem(FIG1_KEYS, FIG1B_SCORES, "logistic")
    p_glob, p_loc = att_svm(FIG1_KEYS, [0]).x, att_svm(FIG1_KEYS, [1]).x
    glob = [reg_path_point(problem, R) for R in (20.0, 50.0, 100.0)]
    assert one_minus_cos(glob[-1].p, p_glob) < 1e-9
    assert all(one_minus_cos(pt.p, p_loc) > 0.9 for pt in glob)
    local = [local_reg_path_point(problem, [1], R, 1e-3) for R in (20.0, 50.0, 100.0)]
    gaps = [one_minus_cos(pt.p, p_loc) for pt in local]
    assert gaps[1] < 1e-6 and gaps[2] < 1e-10
    assert all(b < a for a, b in zip(gaps, gaps[1:], strict=False))
    assert not any(pt.details["on_edge"] for pt in local)


def test_local_path_in_three_dimensions_uses_cap_restarts():
    """Dim 3: projected Newton restarts inside the cap reach p^mm(α) of a 3-D Fig. 1(b)."""
    keys = torch.tensor([[[-0.1, 1.0, 0.2], [1.0, 0.0, -0.1], [0.0, 0.0, 0.0]]], dtype=F64)
    problem = PromptProblem(keys, FIG1B_SCORES, "logistic")
    p_loc = att_svm(keys, [1]).x
    local = [local_reg_path_point(problem, [1], R, 1e-3, restarts=16) for R in (50.0, 100.0)]
    assert [pt.method for pt in local] == ["restarts", "restarts"]
    assert one_minus_cos(local[0].p, p_loc) < 1e-6 and one_minus_cos(local[1].p, p_loc) < 1e-11
    assert all(pt.certified and not pt.details["on_edge"] for pt in local)


def test_wide_cap_minimiser_sits_on_its_edge():
    """A finding about the cone's width (spec §1.6 [R?]): with cos ≥ 0.95 the token of score 1
    outweighs α's support token inside the cap, L drops below α's floor, and the minimiser
    sits on the cap's edge facing the global direction, at every R."""
    problem = PromptProblem(FIG1_KEYS, FIG1B_SCORES, "logistic")
    p_glob = att_svm(FIG1_KEYS, [0]).x
    for R in (20.0, 100.0):
        pt = local_reg_path_point(problem, [1], R, 0.05)
        assert pt.details["on_edge"] and pt.objective < -1e5  # the negative-gap branch
        assert one_minus_cos(pt.p, p_glob) < one_minus_cos(pt.details["center"], p_glob)


# One input, three tokens (the first draw of local_opt_instances(dk=2)): α = token 0 is locally
# optimal, but token 1 scores higher, and at p = 0 the mean score already beats α's floor:
# L(0) = 0.3056 < L_α = ℓ(0.9865) = 0.3163.
APEX_KEYS = torch.tensor(
    [
        [
            [-0.04508150843289924, 0.8796946603132583],
            [-0.6001858393361565, 0.13179118882655083],
            [-0.39384371571951937, 0.42552540844355236],
        ]
    ],
    dtype=F64,
)
APEX_SCORES = torch.tensor(
    [[0.9864946060605657, 1.4385886027364392, 0.6616419404053077]], dtype=F64
)
APEX_EPS = 0.028295912593587325  # safe_cap of the claims for this instance


def _sector_loss_floor(problem, r0, R, center, eps, radii=300, angles=301) -> float:
    """min of the plain L over a grid of the sector {r0 ≤ ‖p‖ ≤ R, cos(p, center) ≥ 1 − eps}:
    an independent reference (no log gap, no ranking)."""
    th, half = math.atan2(float(center[1]), float(center[0])), math.acos(1 - eps)
    rs = np.concatenate([[r0], np.geomspace(max(r0, 1e-6), R, radii)])
    tt = np.linspace(th - half, th + half, angles)
    rr, aa = np.meshgrid(rs, tt, indexing="ij")
    P = torch.as_tensor(np.stack([rr * np.cos(aa), rr * np.sin(aa)], -1).reshape(-1, 2))
    return float(torch.stack([problem.loss_value(p) for p in P]).min())


@pytest.mark.parametrize("r0_over_norm", [0.0, 0.1])
def test_cone_ball_minimiser_sits_at_the_apex_when_the_loss_beats_the_floor_there(r0_over_norm):
    """Thm RP-loc minimises over C_{ε,R0} ∩ ball (spec §2.5). Where L < L_α near the apex, the
    minimiser is at ‖p‖ = r0 for every R, not on the sphere: it is the sector's lowest loss
    (checked against a plain-loss grid, independent of the signed-gap ranking)."""
    problem = PromptProblem(APEX_KEYS, APEX_SCORES, "logistic")
    sol = att_svm(APEX_KEYS, [0])
    R, r0 = 200 * float(sol.norm), r0_over_norm * float(sol.norm)
    sphere = local_reg_path_point(problem, [0], R, APEX_EPS, center=sol.x)
    pt = local_reg_path_point(problem, [0], R, APEX_EPS, center=sol.x, r0=r0)
    assert not pt.on_boundary and pt.certified
    assert pt.norm == pytest.approx(r0, abs=1e-9 * R)
    assert pt.loss < sphere.loss
    assert pt.loss <= _sector_loss_floor(problem, r0, R, sol.x, APEX_EPS) + 1e-12


def test_cone_ball_minimiser_is_on_the_sphere_from_r0_at_the_svm_norm():
    """With R0 = ‖p^mm(α)‖ the apex is cut off: the sector's minimiser is the sphere's."""
    problem = PromptProblem(APEX_KEYS, APEX_SCORES, "logistic")
    sol = att_svm(APEX_KEYS, [0])
    R = 200 * float(sol.norm)
    sphere = local_reg_path_point(problem, [0], R, APEX_EPS, center=sol.x)
    pt = local_reg_path_point(problem, [0], R, APEX_EPS, center=sol.x, r0=float(sol.norm))
    assert pt.on_boundary and torch.allclose(pt.p, sphere.p)
    assert pt.loss <= _sector_loss_floor(problem, float(sol.norm), R, sol.x, APEX_EPS) + 1e-12


# ----------------------------------------------------------------------------- controls


def test_square_loss_control_has_an_interior_minimiser():
    """F9: (0.5 − x)² is attained by a finite mixture; p_R stops growing and is interior."""
    problem = PromptProblem(TOY_KEYS, TOY_SCORES * torch.tensor([2.0, 1.0])[:, None], square(0.5))
    points = [reg_path_point(problem, R) for R in (1.0, 10.0, 100.0)]
    for pt in points:
        assert not pt.on_boundary and pt.loss < 1e-20
        np.testing.assert_allclose(pt.p, points[0].p, atol=1e-8)
    assert points[0].norm < 1.0


def test_concave_head_control_stays_bounded():
    """F10: with ψ = 2 − ‖u‖² a mixture beats every token; ‖p_R‖ ≲ 0.75 for R ≤ 100 (§2.6)."""
    problem = NonlinearHeadProblem(CONCAVE_X, torch.ones(2), psi=concave_bump)
    points = [reg_path_point(problem, R) for R in (1.0, 10.0, 100.0)]
    assert all(not pt.on_boundary and pt.norm <= 0.75 for pt in points)
    np.testing.assert_allclose(points[-1].p, points[0].p, atol=1e-7)


@pytest.mark.parametrize("loss", ("logistic", "exponential"))
def test_convex_head_path_converges_to_psi_optimal_svm(loss):
    """Theorem NL (§2.6): with ψ = ‖u‖², p_R/R → the ATT-SVM of the ψ-optimal tokens.
    Spec [N] on its own instance: cos 0.99827 (R=1), 0.99964 (R=3), 0.99998 (R=10)."""
    problem = NonlinearHeadProblem(HEAD_X, torch.ones(2), psi=squared_norm, loss=loss)
    pmm = att_svm(problem.keys, problem.psi_optimal_tokens()).x
    path = [reg_path_point(problem, R) for R in (3.0, 10.0, 30.0)]
    gaps = [one_minus_cos(pt.p, pmm) for pt in path]
    assert all(b < a for a, b in zip(gaps, gaps[1:], strict=False))
    assert gaps[1] < 1e-3 and gaps[2] < 2e-4
    assert all(pt.on_boundary and pt.objective_kind == "log_gap" for pt in path)


def test_a_general_head_falls_back_to_the_plain_loss():
    """Only the quadratic heads have the log-space gap; any other ψ is searched on L itself."""
    from models.problems.heads import small_mlp

    problem = NonlinearHeadProblem(HEAD_X, torch.ones(2), psi=small_mlp(2, seed=3))
    assert problem.quadratic_form() is None
    assert reg_path_point(problem, 3.0).objective_kind == "loss"


# ---------------------------------------------------------------------------- bad input


def test_bad_arguments_name_the_field():
    problem = toy("logistic")
    with pytest.raises(ValueError, match="R:"):
        reg_path_point(problem, -1.0)
    with pytest.raises(ValueError, match="method:"):
        reg_path_point(problem, 1.0, method="annealing")
    with pytest.raises(ValueError, match="eps:"):
        local_reg_path_point(problem, [1, 1], 1.0, 1.5)
    k3 = PromptProblem(torch.cat([TOY_KEYS, TOY_KEYS[..., :1]], -1), TOY_SCORES, "logistic")
    with pytest.raises(ValueError, match="dim 2"):
        reg_path_point(k3, 1.0, method="grid")
    infeasible = PromptProblem(
        torch.tensor([[[0.0, 0.0], [1.0, 0.0], [2.0, 0.0]]], dtype=F64),
        torch.tensor([[0.0, 1.0, 0.0]], dtype=F64),
        "logistic",
    )
    with pytest.raises(ValueError, match="alpha:.*infeasible"):
        local_reg_path_point(infeasible, [1], 1.0, 0.01)
    with pytest.raises(ValueError, match="r0:"):
        local_reg_path_point(problem, [1, 1], 1.0, 0.01, r0=1.0)
    with pytest.raises(ValueError, match="r0:"):
        local_reg_path_point(k3, [1, 1], 1.0, 0.01, r0=0.1)


# ---------------------------------------------------------------- quadratic heads: the log gap


def _head_gap_mpmath(problem, p, alpha, dps=80) -> float:
    """L(p) − L_α for a nonlinear head in 80-digit arithmetic (mpmath), as a float."""
    import mpmath

    with mpmath.workdps(dps):
        X = [[[mpmath.mpf(float(v)) for v in tok] for tok in inp] for inp in problem.X.tolist()]
        K = [[[mpmath.mpf(float(v)) for v in tok] for tok in inp] for inp in problem.keys.tolist()]
        pm = [mpmath.mpf(float(v)) for v in p]
        loss = {
            "logistic": lambda z: mpmath.log(1 + mpmath.exp(-z)),
            "exponential": lambda z: mpmath.exp(-z),
        }[problem.loss.name]
        psi = {
            squared_norm: lambda u: sum(c * c for c in u),
            concave_bump: lambda u: 2 - sum(c * c for c in u),
            saddle_square: lambda u: u[0] ** 2 - u[1] ** 2,
        }[problem.psi]
        total = mpmath.mpf(0)
        for i, (Xi, Ki, yi) in enumerate(zip(X, K, problem.y.tolist(), strict=True)):
            logits = [sum(a * b for a, b in zip(k, pm, strict=True)) for k in Ki]
            top = max(logits)
            w = [mpmath.exp(z - top) for z in logits]
            s = [wi / sum(w) for wi in w]
            u = [sum(s[t] * Xi[t][j] for t in range(len(Xi))) for j in range(len(Xi[0]))]
            total += loss(yi * psi(u)) - loss(yi * psi(Xi[int(alpha[i])]))
        return float(total / len(X))


@pytest.mark.parametrize("loss", ["logistic", "exponential"])
@pytest.mark.parametrize("psi", ["squared_norm", "saddle_square", "concave_bump"])
@pytest.mark.parametrize("scale", [0.5, 30.0, 400.0])
def test_head_log_gap_matches_80_digit_arithmetic(psi, loss, scale):
    """The cancellation-free head gap equals L − L_α computed in 80 digits, from moderate ‖p‖
    (where the plain loss would do) to ‖p‖ where the leak is e^{-100} and float64's plain loss
    is flat."""
    from models.flows.regpath import head_log_gap_batch
    from models.problems.heads import saddle_square as saddle

    psis = {"squared_norm": squared_norm, "saddle_square": saddle, "concave_bump": concave_bump}
    gen = torch.Generator().manual_seed(7)
    X = torch.randn(3, 4, 2, generator=gen, dtype=F64)
    y = torch.tensor([1.0, -1.0, 1.0], dtype=F64)
    problem = NonlinearHeadProblem(X, y, psi=psis[psi], loss=loss)
    alpha = problem.psi_optimal_tokens()
    P = scale * torch.randn(4, 2, generator=gen, dtype=F64)
    log_abs, sign = head_log_gap_batch(problem, P, alpha)
    fast_abs, fast_sign, _, _ = _head_closed(problem, alpha, P.numpy(), order=0)
    # the compiled form (grids, line searches, descents): the same values to rounding (its δ
    # arithmetic differs in order)
    assert torch.equal(torch.from_numpy(fast_sign), sign)
    np.testing.assert_allclose(fast_abs, log_abs, rtol=1e-9)
    for k in range(P.shape[0]):
        exact = _head_gap_mpmath(problem, P[k].tolist(), alpha)
        if exact == 0.0:
            assert sign[k] == 0
            continue
        got = float(sign[k]) * math.exp(float(log_abs[k]))
        assert got == pytest.approx(exact, rel=1e-9, abs=0.0), (psi, loss, scale, k)


def test_head_log_gap_has_a_finite_gradient_matching_autograd_of_the_plain_loss():
    """d/dp of log|L − L_α| equals ∇L/(L − L_α) where the plain loss is accurate."""
    from models.flows.regpath import head_log_gap_batch

    problem = NonlinearHeadProblem(HEAD_X, torch.ones(2, dtype=F64), psi=squared_norm)
    alpha = problem.psi_optimal_tokens()
    p = torch.tensor([[0.7, -0.4]], dtype=F64, requires_grad=True)
    log_abs, sign = head_log_gap_batch(problem, p, alpha)
    (g,) = torch.autograd.grad(log_abs.sum(), p)
    q = p.detach()[0].clone().requires_grad_(True)
    floor = problem.loss.value(problem.token_scores().max(-1).values).mean()
    gap = problem.loss_value(q) - floor
    (gq,) = torch.autograd.grad(gap, q)
    assert torch.all(torch.isfinite(g))
    assert torch.allclose(g[0], gq / gap.detach(), rtol=1e-8)


@pytest.mark.parametrize("R", [20.0, 100.0, 300.0])
def test_head_log_gap_resolves_the_leak_along_the_svm_direction(R):
    """Along p^mm(ψ-opt) the gap is the leak e^{-R·margin} (1e-9 … 1e-60 here), invisible to the
    float64 plain loss; the log form matches 150-digit arithmetic."""
    from models.flows.regpath import head_log_gap_batch

    problem = NonlinearHeadProblem(HEAD_X, torch.ones(2, dtype=F64), psi=squared_norm)
    alpha = problem.psi_optimal_tokens()
    sol = att_svm(problem.keys, alpha)
    p = R * torch.as_tensor(sol.x / np.linalg.norm(sol.x), dtype=F64)
    log_abs, sign = head_log_gap_batch(problem, p[None], alpha)
    exact = _head_gap_mpmath(problem, p.tolist(), alpha, dps=150)
    assert 0 < exact < 1e-5
    assert float(sign[0]) * math.exp(float(log_abs[0])) == pytest.approx(exact, rel=1e-9, abs=0.0)
    with torch.no_grad():  # the plain loss cannot see it
        floor = problem.loss.value(problem.token_scores().max(-1).values).mean()
        assert R < 100 or float(problem.loss_value(p) - floor) == 0.0


def test_tangent_gradient_is_orthogonal_to_the_point_and_keeps_the_rest():
    """The Riemannian gradient on the sphere: g minus its radial part (a mutmut survivor:
    adding the radial part instead went unnoticed)."""
    from models.flows.regpath import _tangent

    gen = torch.Generator().manual_seed(3)
    g, P = torch.randn(5, 4, generator=gen, dtype=F64), torch.randn(5, 4, generator=gen, dtype=F64)
    t = _tangent(g, P)
    assert torch.allclose((t * P).sum(-1), torch.zeros(5, dtype=F64), atol=1e-12)
    u = P / P.norm(dim=-1, keepdim=True)
    assert torch.allclose(t + (g * u).sum(-1, keepdim=True) * u, g, atol=1e-12)


def test_rank_orders_negative_gaps_below_a_zero_gap_below_positive_ones():
    """_rank is strictly increasing in the signed gap G: G = −e², −e, 0, e^{-5}, 1."""
    from models.flows.regpath import _rank

    log_abs = torch.tensor([2.0, 1.0, -math.inf, -5.0, 0.0], dtype=F64)
    sign = torch.tensor([-1.0, -1.0, 0.0, 1.0, 1.0], dtype=F64)
    ranks = _rank(log_abs, sign)
    assert torch.all(ranks[1:] > ranks[:-1]), ranks


def test_cap_projection_puts_each_row_on_the_sphere_inside_its_cap():
    """Rows inside the cap are only rescaled to ‖p‖ = R; rows outside land on the cap's edge
    (cos = 1 − eps) in the plane of the centre and the row, each by its own norms."""
    from models.flows.regpath import cap_projection

    c, R, eps = torch.tensor([1.0, 0.0, 0.0], dtype=F64), 3.0, 0.02
    P = torch.tensor(
        [[5.0, 0.1, 0.0], [0.0, 1.0, 0.0], [1.0, -4.0, 2.0], [-1.0, 0.0, 1e-3]], dtype=F64
    )
    out = cap_projection(R, c, eps)(P)
    torch.testing.assert_close(torch.linalg.vector_norm(out, dim=-1), torch.full((4,), R))
    cos = out @ c / R
    torch.testing.assert_close(out[0], R * P[0] / torch.linalg.vector_norm(P[0]))
    torch.testing.assert_close(cos[1:], torch.full((3,), 1.0 - eps))
    for k in (1, 2, 3):  # the same direction off the centre as the row had
        off, row_off = out[k, 1:], P[k, 1:]
        torch.testing.assert_close(off / off.norm(), row_off / row_off.norm())


def test_no_feasible_selection_gives_no_restart_direction():
    """Two equal tokens: no ATT-SVM of any selection is feasible, so no direction is seeded."""
    from models.flows.regpath import svm_directions

    keys = torch.tensor([[[1.0, 0.5], [1.0, 0.5]]], dtype=F64)
    problem = PromptProblem(keys, torch.tensor([[1.0, 0.0]], dtype=F64), "logistic")
    dirs = svm_directions(problem)
    assert tuple(dirs.shape) == (0, 2) and dirs.dtype == F64


def test_a_grid_point_counts_the_grid_minima_it_compared():
    pt = reg_path_point(toy("logistic"), 5.0)
    assert pt.method == "grid" and isinstance(pt.n_local_minima, int)
    assert pt.n_local_minima >= 1 and pt.details["rival_minima"] == 0


@pytest.mark.parametrize("d", [2, 3, 5])
def test_fibonacci_directions_are_unit_and_spread_as_documented(d):
    """d = 2: the k angles 2π(i + ½)/k; d = 3: the Fibonacci sphere (heights 1 − 2(i + ½)/k,
    azimuths stepping by the golden angle π(3 − √5)); d ≥ 4: seeded Gaussian directions."""
    from models.flows.regpath import fibonacci_directions

    k = 12
    U = fibonacci_directions(k, d, seed=3)
    assert tuple(U.shape) == (k, d) and U.dtype == F64
    torch.testing.assert_close(torch.linalg.vector_norm(U, dim=-1), torch.ones(k, dtype=F64))
    if d == 2:
        angles = torch.remainder(torch.atan2(U[:, 1], U[:, 0]), 2 * math.pi)
        torch.testing.assert_close(angles, 2 * math.pi * (torch.arange(k, dtype=F64) + 0.5) / k)
    elif d == 3:
        i = torch.arange(k, dtype=F64) + 0.5
        torch.testing.assert_close(U[:, 2], 1 - 2 * i / k)
        step = torch.remainder(torch.diff(torch.atan2(U[:, 1], U[:, 0])), 2 * math.pi)
        golden = math.pi * (3 - math.sqrt(5))
        torch.testing.assert_close(step, torch.full((k - 1,), golden, dtype=F64))
    else:
        torch.testing.assert_close(U, fibonacci_directions(k, d, seed=3))
        assert not torch.equal(U, fibonacci_directions(k, d, seed=4))


def test_the_tangent_hessian_sends_the_radial_direction_to_itself():
    """P_T(∇²f − (∇f·p̂/R) I)P_T + p̂p̂ᵀ: p̂ is an eigenvector of eigenvalue 1, and on tangent
    vectors it acts as the projected Hessian shifted by the radial gradient over R."""
    from models.flows.regpath import _tangent_hessian

    gen = torch.Generator().manual_seed(0)
    P = torch.randn(3, 4, generator=gen, dtype=F64) * 2
    g = torch.randn(3, 4, generator=gen, dtype=F64)
    A = torch.randn(3, 4, 4, generator=gen, dtype=F64)
    H = A + A.transpose(1, 2)
    out = _tangent_hessian(g, H, P)
    u = P / torch.linalg.vector_norm(P, dim=-1, keepdim=True)
    torch.testing.assert_close((out @ u[:, :, None])[..., 0], u)
    t = torch.randn(3, 4, generator=gen, dtype=F64)
    t = t - (t * u).sum(-1, keepdim=True) * u  # tangent
    radial = (g * u).sum(-1) / torch.linalg.vector_norm(P, dim=-1)
    expected = (H @ t[:, :, None])[..., 0] - radial[:, None] * t
    expected = expected - (expected * u).sum(-1, keepdim=True) * u
    torch.testing.assert_close((out @ t[:, :, None])[..., 0], expected)


def _row_by_row(obj, P):
    """f, ∇f and ∇²f of each row evaluated alone (torch.autograd.functional, one row at a time)."""
    fs, gs, hs = [], [], []
    for p in P:
        one = lambda x: obj(x[None])[0]  # noqa: E731
        fs.append(one(p).detach())
        gs.append(torch.autograd.functional.jacobian(one, p))
        hs.append(torch.autograd.functional.hessian(one, p))
    return torch.stack(fs), torch.stack(gs), torch.stack(hs)


@pytest.mark.parametrize("kind", ["log_gap", "head_log_gap", "plain"])
def test_batched_derivatives_are_each_rows_own(kind):
    """``_derivatives`` computes every row's Hessian in one pass over d copies of the batch: each
    row's f, ∇f and ∇²f must be those of the row alone, for each kind of objective."""
    from models.flows.regpath import _derivatives

    gen = torch.Generator().manual_seed(7)
    if kind == "log_gap":
        keys = torch.randn(3, 4, 3, generator=gen, dtype=F64)
        scores = torch.randn(3, 4, generator=gen, dtype=F64)
        problem = PromptProblem(keys, scores, "logistic")
    elif kind == "head_log_gap":
        problem = NonlinearHeadProblem(HEAD_X, torch.ones(2), psi=squared_norm)
    else:
        problem = PromptProblem(TOY_KEYS, TOY_SCORES, "square")
    obj = objective_for(problem)
    assert obj.kind == ("loss" if kind == "plain" else "log_gap")
    # the autograd path (the log gap's closed form has tests of its own below)
    obj = dataclasses.replace(obj, closed=None)
    P = torch.randn(5, problem.dim, generator=gen, dtype=F64) * 3
    f, g, H = _derivatives(obj, P)
    f1, g1, H1 = _row_by_row(obj, P)
    torch.testing.assert_close(f, f1, rtol=1e-13, atol=0)
    torch.testing.assert_close(g, g1, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(H, H1, rtol=1e-11, atol=1e-13)
    assert H.abs().amax() > 0  # the check compared something
    f2, g2, H2 = _derivatives(obj, P, hessian=False)  # one copy: the batch's rounding may differ
    torch.testing.assert_close(f2, f, rtol=1e-13, atol=0)
    torch.testing.assert_close(g2, g, rtol=1e-12, atol=1e-14)
    assert not H2.any()


# ------------------------------------------------- the log gap's derivatives in closed form


def _log_gap_derivatives_mp(keys, scores, loss, alpha, p, digits=40):
    """(log|G|, sign G, ∇log|G|, ∇²log|G|) of G = L(p) − L_α by the plain calculus in mpmath:
    ∇δ = Σ_t s_t diff_t (k_t − k̄), ∇²δ = Σ_t s_t diff_t (k_t − k̄)(k_t − k̄)ᵀ − δ·Cov,
    ∇G = (1/n)Σ_i a_i∇δ_i, ∇²G = (1/n)Σ_i (b_i∇δ_i∇δ_iᵀ + a_i∇²δ_i), then ∇log|G| = ∇G/G and
    ∇²log|G| = ∇²G/G − ∇log|G|∇log|G|ᵀ. None of the kernel's rearrangements: mpmath's exponent
    range is unbounded, and the working precision is raised by the logit spread (in digits), so
    a softmax-weighted sum that cancels down to its smallest weight still keeps ``digits``."""
    n, T, d = keys.shape
    z_all = keys @ p
    spread = float((z_all.max(-1) - z_all.min(-1)).max())
    with mp.workdps(digits + int(spread / math.log(10)) + 10):
        p = [mp.mpf(float(x)) for x in p]
        G, dG, HG = mp.mpf(0), mp.zeros(d, 1), mp.zeros(d, d)
        for i in range(n):
            K = [[mp.mpf(float(keys[i, t, j])) for j in range(d)] for t in range(T)]
            z = [mp.fsum(K[t][j] * p[j] for j in range(d)) for t in range(T)]
            e = [mp.exp(zt - max(z)) for zt in z]
            s = [et / mp.fsum(e) for et in e]
            top = mp.mpf(float(scores[i, alpha[i]]))
            diff = [top - mp.mpf(float(scores[i, t])) for t in range(T)]
            dl = mp.fsum(s[t] * diff[t] for t in range(T))
            kbar = [mp.fsum(s[t] * K[t][j] for t in range(T)) for j in range(d)]
            c = [mp.matrix([K[t][j] - kbar[j] for j in range(d)]) for t in range(T)]
            g = sum((s[t] * diff[t] * c[t] for t in range(T)), mp.zeros(d, 1))
            cov = sum((s[t] * c[t] * c[t].T for t in range(T)), mp.zeros(d, d))
            h = sum((s[t] * diff[t] * c[t] * c[t].T for t in range(T)), mp.zeros(d, d)) - dl * cov
            margin = top - dl
            if loss == "logistic":
                inc = mp.log(1 + mp.exp(-margin)) - mp.log(1 + mp.exp(-top))
                a = 1 / (1 + mp.exp(margin))
                b = a * (1 - a)
            elif loss == "exponential":
                inc, a = mp.exp(-margin) - mp.exp(-top), mp.exp(-margin)
                b = a
            else:
                inc, a, b = dl, mp.mpf(1), mp.mpf(0)
            G += inc
            dG += a * g
            HG += b * g * g.T + a * h
        if G == 0:
            return -math.inf, 0.0, np.zeros(d), np.zeros((d, d))
        grad = dG / G
        hess = HG / G - grad * grad.T
        to_np = lambda m: np.array(m.tolist(), dtype=float)  # noqa: E731
        return float(mp.log(abs(G / n))), float(mp.sign(G)), to_np(grad)[:, 0], to_np(hess)


def _closed(problem, alpha, P, order=2):
    top, diff = _selected_scores(problem, alpha)
    k, d = P.shape
    out = np.empty(k), np.empty(k), np.empty((k, d)), np.empty((k, d, d))
    kernels.log_gap_derivatives(
        problem.keys.numpy(), diff.numpy(), top.numpy(), problem.loss.kernel_code, P, order, *out
    )
    return out


def _random_gap_problem(seed: int, loss: str):
    """Up to 3 inputs of up to 4 tokens in dimension 2–4; every other seed with tokens 0 and 1
    tied in score (and a third token, so that G is not identically 0); α the top-score tokens
    (G ≥ 0) or random ones (G of either sign)."""
    gen = np.random.default_rng(seed)
    n, T, d = int(gen.integers(1, 4)), int(gen.integers(2 + seed % 2, 5)), int(gen.integers(2, 5))
    keys = gen.normal(size=(n, T, d))
    scores = gen.normal(size=(n, T))
    if seed % 2:
        scores[:, 0] = scores[:, 1]  # the top-logit token can tie in score with another
    problem = PromptProblem(torch.as_tensor(keys), torch.as_tensor(scores), loss)
    alpha = global_opt(problem.scores) if seed % 4 < 2 else gen.integers(0, T, size=n)
    return problem, np.asarray(alpha, dtype=np.int64), gen


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("loss", LOSSES)
def test_closed_log_gap_derivatives_match_high_precision(loss, seed):
    """kernels.log_gap_derivatives against the plain calculus in mpmath, from ‖p‖ = 0.3 to 3000:
    where the softmax is saturated on the selected token (G down to e^{-3000}, far below
    float64's range) and where it is saturated on another one (G of order 1, its derivatives
    leak-sized, down to 1e-300). log|G| within 8·(T + Z)·ε·max(1, |log G|) and ∇log|G|
    within 8·(T + Z)·ε of its norm, Z the largest logit spread (the float64 logits' rounding,
    as in test_margin_drops_match_50_digits); ∇²log|G| within that of ‖H‖ + ‖∇log|G|‖², the
    size of the two terms it is the difference of. Autograd of ``log_gap_batch``, the
    descents' derivatives before, misses by factors up to 1e260 in the second regime."""
    problem, alpha, gen = _random_gap_problem(seed, loss)
    keys, scores = problem.keys.numpy(), problem.scores.numpy()
    T, d = keys.shape[1], keys.shape[2]
    eps = np.finfo(np.float64).eps
    P = gen.normal(size=(10, d))
    P *= (np.repeat([0.3, 3.0, 30.0, 300.0, 3000.0], 2) / np.linalg.norm(P, axis=1))[:, None]
    log_gap, sign, grad, hess = _closed(problem, alpha, P)
    for k in range(P.shape[0]):
        ref_log, ref_sign, ref_grad, ref_hess = _log_gap_derivatives_mp(
            keys, scores, loss, alpha, P[k]
        )
        z = keys @ P[k]
        tol = 8 * (T + float((z.max(-1) - z.min(-1)).max())) * eps
        assert sign[k] == ref_sign, (k, sign[k], ref_sign)
        if ref_sign == 0:  # G = 0 exactly: log|G| = −inf, no derivatives
            assert log_gap[k] == -math.inf and not grad[k].any() and not hess[k].any()
            continue
        assert abs(log_gap[k] - ref_log) <= tol * max(1.0, abs(ref_log)), (k, log_gap[k], ref_log)
        g_size = np.linalg.norm(ref_grad)
        assert np.linalg.norm(grad[k] - ref_grad) <= tol * g_size, (k, grad[k], ref_grad)
        h_size = np.linalg.norm(ref_hess) + g_size**2
        assert np.linalg.norm(hess[k] - ref_hess) <= tol * h_size, (k, hess[k], ref_hess)


@pytest.mark.parametrize("seed", range(8))
@pytest.mark.parametrize("loss", LOSSES)
@pytest.mark.parametrize("kind", ["plain", "head"])
def test_closed_log_gap_derivatives_match_autograd(kind, loss, seed):
    """The descents' closed-form f, ∇f and ∇²f (``Objective.closed``, the rank of a signed gap
    included) equal autograd of ``log_gap_batch`` (quadratic heads: ``head_log_gap_batch``)
    where that is accurate (‖p‖ ≤ 3: no leak below float64's resolution; 10× looser for the
    heads, whose two signed sums can cancel), and order 0 and 1, the line searches' trials and
    the grids give the same values as order 2."""
    make = _random_gap_problem if kind == "plain" else _random_head_problem
    loose = 1.0 if kind == "plain" else 10.0
    problem, alpha, gen = make(seed, loss)
    obj = objective_for(problem, alpha)
    assert obj.closed is not None
    P = torch.as_tensor(gen.normal(size=(6, problem.dim)) * np.geomspace(0.1, 3, 6)[:, None])
    f, g, H = obj.closed(P, 2)
    f0, g0, H0 = _row_by_row(dataclasses.replace(obj, closed=None), P)
    torch.testing.assert_close(f, f0, rtol=1e-13 * loose, atol=0)
    torch.testing.assert_close(g, g0, rtol=1e-11 * loose, atol=1e-13 * loose)
    torch.testing.assert_close(H, H0, rtol=1e-10 * loose, atol=1e-12 * loose)
    f1, g1, _ = obj.closed(P, 1)
    assert torch.equal(f1, f) and torch.equal(g1, g)
    assert torch.equal(obj.closed(P, 0)[0], f) and torch.equal(obj.values(P), f)
    assert torch.equal(obj.grid(P), f)


def test_descents_use_the_closed_form_for_the_compiled_losses():
    """Log-gap objectives (plain and quadratic heads) of the losses with a kernel code carry
    the closed form; the plain loss of a non-monotone loss uses autograd."""
    for loss in LOSSES:
        assert objective_for(toy(loss)).closed is not None
    assert objective_for(toy("logistic")).closed is not None
    assert objective_for(PromptProblem(TOY_KEYS, TOY_SCORES, "square")).closed is None
    head = NonlinearHeadProblem(HEAD_X, torch.ones(2), psi=squared_norm)
    assert objective_for(head).closed is not None


def _head_closed(problem, alpha, P, order=2):
    """(log|G|, sign G, ∇log|G|, ∇²log|G|) of a quadratic head by the compiled kernel."""
    from models.flows.regpath import _head_differences

    x_top, diff = _head_differences(problem, alpha)
    q = problem.quadratic_form()
    k, d = P.shape
    out = np.empty(k), np.empty(k), np.zeros((k, d)), np.zeros((k, d, d))
    args = (problem.keys, diff, 2 * q * x_top, q, problem.y, problem.y * problem.psi_of(x_top))
    kernels.head_log_gap_derivatives(
        *(np.ascontiguousarray(a.numpy()) for a in args), problem.loss.kernel_code, P, order, *out
    )
    return out


def _head_log_gap_derivatives_mp(problem, alpha, p, digits=40):
    """(log|G|, sign G, ∇log|G|, ∇²log|G|, κ) of a quadratic head's gap G = L(p) − L_α by the
    plain calculus in mpmath, κ the condition of its two signed sums (Σ_i|inc_i|/|G| times the
    largest Σ_j|terms|/|ψ(u_i) − ψ(x_iα)|: the factor by which they amplify rounding).
    u = Σ_t s_t x_t, ∇u_j = Σ_t s_t x_tj (k_t − k̄), ∇²u_j = Σ_t s_t x_tj (k_t − k̄)(k_t − k̄)ᵀ
    − u_j·Cov, the margin m = y·ψ(u) with ψ's derivatives, then ∇ℓ(m) = ℓ'(m)∇m and
    ∇²ℓ(m) = ℓ''(m)∇m∇mᵀ + ℓ'(m)∇²m. The precision is raised by the logit spread in digits,
    so ℓ(m) − ℓ(m_α), a leak-sized difference, keeps ``digits``."""
    keys, X, y = problem.keys.numpy(), problem.X.numpy(), problem.y.numpy()
    n, T, d = keys.shape
    dx = X.shape[2]
    q = problem.quadratic_form().numpy()
    const = float(problem.psi_of(torch.zeros(1, dx, dtype=F64))[0])  # ψ(0): 2 for the bump
    z_all = keys @ p
    spread = float((z_all.max(-1) - z_all.min(-1)).max())
    with mp.workdps(digits + int(spread / math.log(10)) + 10):
        pm = [mp.mpf(float(v)) for v in p]
        parts = {
            "logistic": (
                lambda m: mp.log(1 + mp.exp(-m)),
                lambda m: -1 / (1 + mp.exp(m)),
                lambda m: 1 / ((1 + mp.exp(m)) * (1 + mp.exp(-m))),
            ),
            "exponential": (lambda m: mp.exp(-m), lambda m: -mp.exp(-m), lambda m: mp.exp(-m)),
            "correlation": (lambda m: -m, lambda m: mp.mpf(-1), lambda m: mp.mpf(0)),
        }[problem.loss.name]
        G, dG, HG = mp.mpf(0), mp.zeros(d, 1), mp.zeros(d, d)
        sizes, kappa_terms = mp.mpf(0), mp.mpf(1)
        for i in range(n):
            K = [[mp.mpf(float(keys[i, t, j])) for j in range(d)] for t in range(T)]
            Xi = [[mp.mpf(float(X[i, t, j])) for j in range(dx)] for t in range(T)]
            z = [mp.fsum(K[t][j] * pm[j] for j in range(d)) for t in range(T)]
            e = [mp.exp(zt - max(z)) for zt in z]
            s = [et / mp.fsum(e) for et in e]
            kbar = [mp.fsum(s[t] * K[t][j] for t in range(T)) for j in range(d)]
            c = [mp.matrix([K[t][j] - kbar[j] for j in range(d)]) for t in range(T)]
            cov = sum((s[t] * c[t] * c[t].T for t in range(T)), mp.zeros(d, d))
            m = m_top = y[i] * mp.mpf(const)
            dm, hm = mp.zeros(d, 1), mp.zeros(d, d)
            terms = mp.mpf(0)  # Σ_j |2q_j x_αj δ_j| + |q_j δ_j²|: the size of ψ(u) − ψ(x_α)'s terms
            for j in range(dx):
                u = mp.fsum(s[t] * Xi[t][j] for t in range(T))
                du = sum((s[t] * Xi[t][j] * c[t] for t in range(T)), mp.zeros(d, 1))
                hu = sum((s[t] * Xi[t][j] * c[t] * c[t].T for t in range(T)), mp.zeros(d, d))
                hu -= u * cov
                qj = mp.mpf(float(q[j]))
                xa = Xi[int(alpha[i])][j]
                terms += abs(2 * qj * xa * (u - xa)) + abs(qj * (u - xa) ** 2)
                m += y[i] * qj * u * u
                m_top += y[i] * qj * Xi[int(alpha[i])][j] ** 2
                dm += y[i] * 2 * qj * u * du
                hm += y[i] * 2 * qj * (du * du.T + u * hu)
            ell, d1, d2 = parts
            inc = ell(m) - ell(m_top)
            sizes += abs(inc)
            if inc != 0:
                kappa_terms = max(kappa_terms, terms / abs(m - m_top))
            G += inc
            dG += d1(m) * dm
            HG += d2(m) * dm * dm.T + d1(m) * hm
        if G == 0:
            return -math.inf, 0.0, np.zeros(d), np.zeros((d, d)), 1.0
        grad = dG / G
        hess = HG / G - grad * grad.T
        to_np = lambda a: np.array(a.tolist(), dtype=float)  # noqa: E731
        kappa = float(sizes / abs(G) * kappa_terms)
        log_g, sign_g = float(mp.log(abs(G / n))), float(mp.sign(G))
        return log_g, sign_g, to_np(grad)[:, 0], to_np(hess), kappa


def _random_head_problem(seed: int, loss: str):
    from models.problems.heads import saddle_square as saddle

    gen = np.random.default_rng(seed)
    n, T = int(gen.integers(1, 4)), int(gen.integers(2, 5))
    X = torch.as_tensor(gen.normal(size=(n, T, 2)))
    y = torch.as_tensor(gen.choice([-1.0, 1.0], size=n))
    psi = (squared_norm, saddle, concave_bump)[seed % 3]
    problem = NonlinearHeadProblem(X, y, psi=psi, loss=loss)
    alpha = problem.psi_optimal_tokens() if seed % 2 else gen.integers(0, T, size=n)
    return problem, np.asarray(alpha, dtype=np.int64), gen


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("loss", LOSSES)
def test_closed_head_log_gap_derivatives_match_high_precision(loss, seed):
    """kernels.head_log_gap_derivatives against the plain calculus in mpmath, from ‖p‖ = 0.3 to
    300, for convex, saddle and concave quadratic heads, mixed labels, the ψ-optimal or random
    selections: log|G| within 8·(T + Z)·ε·κ·max(1, |log G|) and ∇log|G| within 8·(T + Z)·ε·κ of
    its norm (test_closed_log_gap_derivatives_match_high_precision's bound, Z the largest logit
    spread, times the condition κ of the head's two signed sums, over the coordinates and over
    the inputs: with cancelling terms both forms lose what cancels); ∇²log|G| within that of
    ‖H‖ + ‖∇log|G|‖²."""
    problem, alpha, gen = _random_head_problem(seed, loss)
    keys = problem.keys.numpy()
    T, d = keys.shape[1], keys.shape[2]
    eps = np.finfo(np.float64).eps
    P = gen.normal(size=(8, d))
    P *= (np.repeat([0.3, 3.0, 30.0, 300.0], 2) / np.linalg.norm(P, axis=1))[:, None]
    log_gap, sign, grad, hess = _head_closed(problem, alpha, P)
    checked = 0
    for k in range(P.shape[0]):
        ref_log, ref_sign, ref_grad, ref_hess, kappa = _head_log_gap_derivatives_mp(
            problem, alpha, P[k]
        )
        z = keys @ P[k]
        tol = 8 * (T + float((z.max(-1) - z.min(-1)).max())) * eps * kappa
        assert sign[k] == ref_sign, (k, sign[k], ref_sign)
        if ref_sign == 0:
            assert log_gap[k] == -math.inf and not grad[k].any() and not hess[k].any()
            continue
        checked += 1
        assert abs(log_gap[k] - ref_log) <= tol * max(1.0, abs(ref_log)), (k, log_gap[k], ref_log)
        g_size = np.linalg.norm(ref_grad)
        assert np.linalg.norm(grad[k] - ref_grad) <= tol * g_size, (k, grad[k], ref_grad)
        h_size = np.linalg.norm(ref_hess) + g_size**2
        assert np.linalg.norm(hess[k] - ref_hess) <= tol * h_size, (k, hess[k], ref_hess)
    assert checked >= 4
