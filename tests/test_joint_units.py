"""Joint training, function by function: models/flows/joint.py (the (v, p) problem of 2306.13596,
its log-space gradients, joint NGD, the SVMs of Theorem J, the joint regularization path),
models/flows/mirror_joint.py (joint (W, v) ℓp mirror descent of 2410.14581, its naive reference and
the ℓp v-SVM) and models/check/joint_predict.py (what ``check`` answers for a joint instance).

Each value is checked against an independent route on instances small enough to work by hand:
softmax weights 3/4, 1/4 and 1/28, 27/28 with rational margins, the square loss where ℓ' = 0
exactly, the first mirror step from W = v = 0 (whose direction is Σ_i y_i x̄_i), the ℓp v-SVM
whose optimum is (1, 1), objectives whose minimisers are known, autograd and mpmath. The
answers of ``predict_joint`` are rebuilt from a run of ``joint_md`` made here and from the
printed vectors; the module's step budget is patched where the branch does not need the real
one, so that every branch costs milliseconds."""

from __future__ import annotations

import math
import time
import warnings
from types import SimpleNamespace

import mpmath
import numpy as np
import pytest
import torch

from models.check import joint_predict as jp
from models.flows import kernels
from models.flows.joint import (
    JointProblem,
    JointSVMs,
    JointTrajectory,
    _on_circle,
    _radial_descent,
    _unit,
    _zoom_pairs,
    joint_ngd,
    joint_objective,
    joint_reg_path_point,
    relaxed_svm_for,
)
from models.flows.mirror_joint import (
    MOVED_STEPS,
    CrossJointProblem,
    JointMDRun,
    LpVSVM,
    _dual_norm,
    _official_loss,
    joint_md,
    lp_v_svm,
    naive_joint_md,
    official_joint_data,
)
from models.numerics import failures
from models.oracles.normsvm import norm_svm

F64 = torch.float64
LOG3 = math.log(3.0)


def t(x) -> torch.Tensor:
    return torch.tensor(x, dtype=F64)


# ------------------------------------------------------------------ a problem worked by hand

# n = 2, T = 2, d = 2 and a 2×3 W: keys XW are 3-dimensional. At v = (3, −1), p = (log 3, 0, 0)
# the logits are (log 3, 0) and (−log 3, 2 log 3): s_1 = (3/4, 1/4), s_2 = (1/28, 27/28); the
# scores y_i X_i v are (3, −2) and (4, −6), the margins 7/4 and −79/14.
HX = [[[1.0, 0.0], [0.0, 2.0]], [[-1.0, 1.0], [2.0, 0.0]]]
HY = [1.0, -1.0]
HW = [[1.0, 0.0, 1.0], [0.0, 1.0, 0.0]]
HV, HP = [3.0, -1.0], [LOG3, 0.0, 0.0]
S1, S2 = (3 / 4, 1 / 4), (1 / 28, 27 / 28)
M1, M2 = 7 / 4, -79 / 14


def hand(loss="logistic") -> JointProblem:
    return JointProblem(t(HX), t(HY), t(HW), loss)


def sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-x))


def test_the_problem_keeps_the_data_and_its_keys_are_x_times_w():
    problem = hand()
    assert (problem.n, problem.dim_v, problem.dim_p) == (2, 2, 3)
    assert torch.equal(problem.keys, t([[[1, 0, 1], [0, 2, 0]], [[-1, 1, -1], [2, 0, 2]]]))
    assert torch.equal(problem.W, t(HW)) and problem.loss.name == "logistic"
    assert problem.X.dtype == F64 and problem.y.tolist() == HY
    X_np, y_np = problem._np
    assert np.array_equal(X_np, np.array(HX)) and np.array_equal(y_np, np.array(HY))
    default = JointProblem(t(HX), t(HY))  # W = I: the keys are the tokens
    assert torch.equal(default.W, torch.eye(2, dtype=F64)) and default.W.dtype == F64
    assert torch.equal(default.keys, t(HX)) and default.dim_p == 2
    assert JointProblem(t(HX), t(HY), loss="exponential").loss.name == "exponential"


def test_bad_labels_and_a_w_of_the_wrong_height_are_refused_with_the_field_named():
    X = t(HX)
    with pytest.raises(ValueError, match=r"^y: expected 2 labels in \{-1, \+1\}$"):
        JointProblem(X, t([1.0, 0.5]))
    with pytest.raises(ValueError, match=r"^y: expected 2 labels in \{-1, \+1\}$"):
        JointProblem(X, t([1.0, -1.0, 1.0]))
    with pytest.raises(ValueError, match=r"^W: expected 2 rows, got shape \(3, 3\)$"):
        JointProblem(X, t(HY), torch.eye(3, dtype=F64))


def test_scores_margins_and_loss_are_the_hand_computed_ones():
    problem = hand()
    assert torch.equal(problem.scores(HV), t([[3.0, -2.0], [4.0, -6.0]]))
    m = problem.margins(t(HV), t(HP))
    np.testing.assert_allclose(m.numpy(), [M1, M2], rtol=1e-14, atol=0)
    want = (math.log1p(math.exp(-M1)) + math.log1p(math.exp(-M2))) / 2
    assert float(problem.loss_value(t(HV), t(HP))) == pytest.approx(want, rel=1e-14)
    prompt = problem.prompt_problem(HV)
    assert torch.equal(prompt.keys, problem.keys)
    assert torch.equal(prompt.scores, t([[3.0, -2.0], [4.0, -6.0]]))
    assert prompt.loss.name == "logistic"


def test_margins_of_row_pairs_and_of_the_grid_are_the_single_margins():
    problem = hand()
    V = t([HV, [0.5, 2.0], [-1.0, 0.0]])
    P = t([HP, [0.0, 1.0, -2.0]])
    pairs = problem.margins_pairs(V[:2], P)
    assert pairs.shape == (2, 2)
    np.testing.assert_allclose(pairs[0].numpy(), [M1, M2], rtol=1e-14)
    grid = problem.margins_grid(V, P)
    assert grid.shape == (3, 2, 2)
    for a in range(3):
        for b in range(2):
            single = problem.margins(V[a], P[b])
            np.testing.assert_allclose(grid[a, b].numpy(), single.numpy(), rtol=1e-14, atol=1e-15)
            if a < 2 and a == b:
                np.testing.assert_allclose(pairs[a].numpy(), single.numpy(), rtol=1e-14)


def test_the_selected_mass_is_the_mean_softmax_on_the_top_score_or_given_tokens():
    problem = hand()
    # top scores at v: token 0 of both inputs (3 > −2, 4 > −6)
    assert problem.selected_mass(HV, HP) == pytest.approx((S1[0] + S2[0]) / 2, rel=1e-14)
    assert problem.selected_mass(HV, HP, [1, 1]) == pytest.approx((S1[1] + S2[1]) / 2, rel=1e-14)
    assert problem.selected_mass(HV, HP, [0, 1]) == pytest.approx((S1[0] + S2[1]) / 2, rel=1e-14)
    assert isinstance(problem.selected_mass(HV, HP), float)


# -------------------------------------------------------------------------- the gradients


def _hand_gradients(lp1: float, lp2: float):
    """∇_v L = (1/n) Σ ℓ'(m_i) y_i Σ_t s_it x_it and ∇_p L = (1/n) Σ ℓ'(m_i) Σ_t s_it (γ_it − m_i)
    k_it (the softmax Jacobian) at the hand point, from the hand softmax weights."""
    X, keys = np.array(HX), hand().keys.numpy()
    gam = [np.array([3.0, -2.0]), np.array([4.0, -6.0])]
    gv, gp = np.zeros(2), np.zeros(3)
    for i, (s, m, lp) in enumerate(zip((S1, S2), (M1, M2), (lp1, lp2), strict=True)):
        s = np.array(s)
        gv += lp * HY[i] * (s @ X[i]) / 2
        gp += lp * ((s * (gam[i] - m)) @ keys[i]) / 2
    return gv, gp


def test_log_space_gradients_are_the_hand_formulas_with_unit_peak():
    problem = hand()
    want_v, want_p = _hand_gradients(-sigmoid(-M1), -sigmoid(-M2))
    for (scale, vec), want in (
        (problem.gradient_v_log(HV, HP), want_v),
        (problem.gradient_p_log(HV, HP), want_p),
    ):
        assert float(np.abs(vec).max()) == 1.0
        np.testing.assert_allclose(math.exp(scale) * vec, want, rtol=1e-13, atol=1e-16)
    gv, gp = problem.gradients(HV, HP)
    assert gv.dtype == F64 and gp.dtype == F64
    np.testing.assert_allclose(gv.numpy(), want_v, rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(gp.numpy(), want_p, rtol=1e-13, atol=1e-16)


def test_the_exponential_losss_v_gradient_is_the_hand_formula():
    problem = hand("exponential")
    want_v, want_p = _hand_gradients(-math.exp(-M1), -math.exp(-M2))
    gv, gp = problem.gradients(HV, HP)
    np.testing.assert_allclose(gv.numpy(), want_v, rtol=1e-13)
    np.testing.assert_allclose(gp.numpy(), want_p, rtol=1e-13)


def test_the_square_losss_v_gradient_takes_its_sign_from_l_prime_and_drops_zero_terms():
    """Square loss (1 − m)², p = 0 (s = ½, ½). v = (2, 0): margins 1 and −1, ℓ' = 0 and −4, so
    ∇_v = ½·(−4)(−1)·(½, ½) = (1, 1). v = (4, 0): margins 2 and −2, ℓ' = +2 and −6, ∇_v =
    ½[2·(½, 1) + 6·(½, ½)] = (2, 5/2)."""
    problem = JointProblem(t(HX), t(HY), loss="square")
    for v, want in (([2.0, 0.0], [1.0, 1.0]), ([4.0, 0.0], [2.0, 2.5])):
        scale, vec = problem.gradient_v_log(v, [0.0, 0.0])
        np.testing.assert_allclose(math.exp(scale) * vec, want, rtol=1e-15)
        assert float(np.abs(vec).max()) == 1.0
    both_one = JointProblem(t([HX[0], HX[0]]), t([1.0, 1.0]), loss="square")  # m = 1, 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # log 0 is expected, not warned about
        scale, vec = both_one.gradient_v_log([2.0, 0.0], [0.0, 0.0])
    assert scale == -math.inf and np.array_equal(vec, np.zeros(2))
    gv, _ = both_one.gradients([2.0, 0.0], [0.0, 0.0])
    assert torch.equal(gv, torch.zeros(2, dtype=F64))


def test_a_zero_gradient_is_minus_infinity_and_becomes_exact_zeros():
    """All keys equal: the softmax ignores p and ∇_p L = 0 exactly."""
    problem = JointProblem(t([[[1.0, 1.0], [1.0, 1.0]]]), t([1.0]))
    scale, vec = problem.gradient_p_log([1.0, 2.0], [0.3, 0.4])
    assert scale == -math.inf and not vec.any()
    gv, gp = problem.gradients([1.0, 2.0], [0.3, 0.4])
    assert torch.equal(gp, torch.zeros(2, dtype=F64)) and gv.abs().min() > 0


def test_unit_normalises_and_maps_minus_infinity_to_zeros():
    np.testing.assert_array_equal(_unit(0.7, np.array([3.0, -4.0])), [0.6, -0.8])
    zero = _unit(-math.inf, np.array([1.0, 0.0, 0.0]))
    assert zero.shape == (3,) and not zero.any()


# ---------------------------------------------------------------------------- joint NGD


def test_one_ngd_step_moves_each_parameter_lr_along_its_unit_gradient():
    problem = hand()
    v0, p0 = t(HV), t(HP)
    vv, pp = v0.clone().requires_grad_(True), p0.clone().requires_grad_(True)
    gv, gp = torch.autograd.grad(problem.loss_value(vv, pp), (vv, pp))
    run = joint_ngd(problem, v0, p0, lr=0.25, steps=1)
    np.testing.assert_allclose(run.v.numpy(), (v0 - 0.25 * gv / gv.norm()).numpy(), rtol=1e-14)
    np.testing.assert_allclose(run.p.numpy(), (p0 - 0.25 * gp / gp.norm()).numpy(), rtol=1e-14)
    default = joint_ngd(problem, v0, p0, steps=1)  # lr 0.1
    assert float((default.v - v0).norm()) == pytest.approx(0.1, rel=1e-14)
    assert float((default.p - p0).norm()) == pytest.approx(0.1, rel=1e-14)


def test_ngd_records_every_kth_step_and_the_last_and_reports_each_quantity():
    problem = hand()
    t0 = time.perf_counter()
    run = joint_ngd(problem, HV, HP, steps=5, record_every=2, alpha=[1, 0])
    wall = time.perf_counter() - t0
    assert isinstance(run, JointTrajectory)
    assert run.steps.tolist() == [0, 2, 4, 5] and run.stop == "step budget"
    assert run.vs.shape == (4, 2) and run.ps.shape == (4, 3)
    assert torch.equal(run.vs[0], t(HV)) and torch.equal(run.ps[0], t(HP))
    assert torch.equal(run.v, run.vs[-1]) and torch.equal(run.p, run.ps[-1])
    every = joint_ngd(problem, HV, HP, steps=5)
    assert every.steps.tolist() == [0, 1, 2, 3, 4, 5]
    assert torch.equal(every.vs[[0, 2, 4, 5]], run.vs)
    assert joint_ngd(problem, HV, HP, steps=4, record_every=2).steps.tolist() == [0, 2, 4]
    for k in range(4):
        m = problem.margins(run.vs[k], run.ps[k])
        assert run.losses[k] == pytest.approx(float(problem.loss_value(run.vs[k], run.ps[k])))
        assert run.output_prob[k] == pytest.approx(float(torch.sigmoid(m).mean()), rel=1e-14)
        s = torch.softmax(problem.keys @ run.ps[k], dim=-1)
        assert run.attention_mass[k] == pytest.approx(float(s[0, 1] + s[1, 0]) / 2, rel=1e-14)
    assert 0.0 < run.seconds <= wall
    assert joint_ngd(problem, HV, HP, steps=1000, record_every=1000).steps.tolist() == [
        0,
        1000,
    ]
    assert joint_ngd(problem, HV, HP, record_every=500).steps.tolist() == [0, 500, 1000]


def test_ngd_at_a_point_where_both_gradients_vanish_stops_there():
    """All tokens zero: every margin is 0 whatever v and p, both gradients exactly zero."""
    problem = JointProblem(torch.zeros(2, 2, 2, dtype=F64), t(HY))
    run = joint_ngd(problem, [1.0, 0.0], [0.0, 1.0], steps=5)
    assert run.stop == "stationary point (both gradients exactly zero)"
    # the step that found both gradients zero is recorded, unmoved
    assert run.steps.tolist() == [0, 1]
    assert torch.equal(run.vs, t([[1.0, 0.0]] * 2)) and torch.equal(run.ps, t([[0.0, 1.0]] * 2))


def test_ngd_with_no_steps_returns_the_start():
    """(joint_ngd once read its loop variable after a loop that never ran: UnboundLocalError.)"""
    run = joint_ngd(hand(), HV, HP, steps=0)
    assert run.steps.tolist() == [0] and torch.equal(run.v, t(HV))


# ----------------------------------------------------------------------- the SVMs of Theorem J


def test_a_selection_without_a_v_svm_is_refused_by_its_status():
    X = t([[[0, 0], [1, 1]], [[0, 0], [1, -1]], [[0, 0], [0.5, 1.5]]])
    problem = JointProblem(X, t([1.0, -1.0, 1.0]))
    with pytest.raises(
        ValueError, match=r"^alpha: the v-SVM of the selected tokens is infeasible$"
    ):
        relaxed_svm_for(problem, [0, 0, 0])
    svms = relaxed_svm_for(problem, [1.0, 1.0, 1.0])
    assert svms.alpha.dtype == np.int64 and svms.alpha.tolist() == [1, 1, 1]
    assert svms.support.dtype == bool and svms.tight is False


def test_the_relaxed_svm_drops_the_constraints_of_inputs_off_the_v_svms_support():
    """Selected tokens (1, 1), (1, −1), (½, 3/2), labels (+, −, +): v^mm = (0, 1) with the third
    constraint slack (3/2 > 1). p^full meets p₁ + p₂ ≥ 1, p₁ − p₂ ≥ 1, ½p₁ + 3/2 p₂ ≥ 1 at
    (5/4, 1/4); relaxing the third to ≥ 0 leaves (1, 0)."""
    X = t([[[0, 0], [1, 1]], [[0, 0], [1, -1]], [[0, 0], [0.5, 1.5]]])
    svms = relaxed_svm_for(JointProblem(X, t([1.0, -1.0, 1.0])), [1, 1, 1])
    assert svms.support.tolist() == [True, True, False] and svms.tight is False
    np.testing.assert_allclose(svms.v_mm.x, [0.0, 1.0], atol=1e-9)
    np.testing.assert_allclose(svms.p_relax.x, [1.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(svms.p_full.x, [1.25, 0.25], atol=1e-9)
    tight = relaxed_svm_for(JointProblem(X[:2], t([1.0, -1.0])), [1, 1])
    assert tight.tight is True and tight.support.tolist() == [True, True]
    np.testing.assert_allclose(tight.p_relax.x, [1.0, 0.0], atol=1e-9)
    np.testing.assert_allclose(tight.p_full.x, [1.0, 0.0], atol=1e-9)


def test_tight_means_every_selected_token_is_a_support_vector():
    def svms(support):
        return JointSVMs(np.zeros(2, dtype=np.int64), None, np.array(support), None, None)

    assert svms([True, True]).tight is True
    assert svms([True, False]).tight is False
    assert svms([False, False]).tight is False


# ------------------------------------------------------------------- the joint objective


def test_log_loss_terms_are_log_l_exactly_at_every_margin():
    """kernels.log_loss_value, the joint objective's log ℓ(m), against 50 digits."""
    m = [-800.0, -40.0, -5.0, 0.0, 3.0, 29.9, 30.0, 31.0, 45.0, 800.0]
    got = [kernels.log_loss_value(kernels.LOGISTIC, x) for x in m]
    mpmath.mp.dps = 50
    for x, g in zip(m, got, strict=True):
        want = float(mpmath.log(mpmath.log1p(mpmath.exp(-mpmath.mpf(x)))))
        assert g == pytest.approx(want, rel=4e-16, abs=0), x
    assert got[-1] == -800.0
    expo = [kernels.log_loss_value(kernels.EXPONENTIAL, x) for x in (-3.0, 0.5, 1000.0)]
    assert expo == [3.0, -0.5, -1000.0]


def test_the_objective_is_log_l_for_logistic_and_exponential_and_l_otherwise():
    problem = hand()
    V, P = t([HV, [0.5, 2.0]]), t([HP, [0.0, 1.0, -2.0]])
    for loss, kind in (
        ("logistic", "log_loss"),
        ("exponential", "log_loss"),
        ("square", "loss"),
        ("correlation", "loss"),
    ):
        problem = hand(loss)
        obj = joint_objective(problem)
        assert obj.kind == kind and obj.problem is problem
        pairs, grid = obj.pairs(V, P), obj.grid(V, P)
        assert pairs.shape == (2,) and grid.shape == (2, 2)
        for a in range(2):
            for b in range(2):
                L = float(problem.loss_value(V[a], P[b]))
                want = math.log(L) if kind == "log_loss" else L
                assert float(grid[a, b]) == pytest.approx(want, rel=1e-13)
            assert float(pairs[a]) == pytest.approx(float(grid[a, a]), rel=1e-14)


@pytest.mark.parametrize("loss", ["logistic", "exponential"])
@pytest.mark.parametrize("seed", range(4))
def test_the_compiled_log_objective_is_log_l_on_random_problems(loss, seed):
    """The compiled joint objective (``kernels.joint_log_losses`` and ``joint_log_loss_grid``)
    equals log of the tensor-pass ``loss_value`` wherever L is representable (v and p of norm
    0.1 to 30: margins of either sign), to 1e-12; the grid's diagonal equals the pairs."""
    gen = np.random.default_rng(seed)
    n, T = int(gen.integers(1, 5)), int(gen.integers(2, 5))
    X = gen.normal(size=(n, T, 2))
    problem = JointProblem(t(X), t(gen.choice([-1.0, 1.0], size=n)), t(np.eye(2)), loss)
    obj = joint_objective(problem)
    scale = np.geomspace(0.1, 30.0, 6)[:, None]
    V, P = t(gen.normal(size=(6, 2)) * scale), t(gen.normal(size=(6, 2)) * scale[::-1])
    grid, pairs = obj.grid(V, P), obj.pairs(V, P)
    checked = 0
    for a in range(6):
        for b in range(6):
            L = float(problem.loss_value(V[a], P[b]))
            if 1e-300 < L < math.inf:
                checked += 1
                assert float(grid[a, b]) == pytest.approx(math.log(L), rel=1e-12, abs=1e-13)
        assert float(pairs[a]) == float(grid[a, a])
    assert checked >= 30


def test_the_log_objective_stays_exact_where_l_underflows():
    """Margins 900 and 1000: L = (e^{−900} + e^{−1000})/2 underflows; log L does not."""
    problem = JointProblem(t([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 0.0], [0.0, -1.0]]]), t(HY))
    V, P = t([[900.0, 1000.0]]), t([[400.0, -400.0]])  # s → token 0 of input 0, 1 of input 1
    assert float(problem.loss_value(V[0], P[0])) == 0.0
    mpmath.mp.dps = 50
    want = float(mpmath.log((mpmath.exp(-900) + mpmath.exp(-1000)) / 2))
    assert float(joint_objective(problem).pairs(V, P)[0]) == pytest.approx(want, rel=1e-15)


@pytest.mark.parametrize("loss", ["logistic", "square"])
def test_an_objective_that_is_not_a_number_reads_infinity(loss):
    obj = joint_objective(hand(loss))
    nan = t([[math.nan, 0.0, 0.0]])
    assert obj.pairs(t([HV]), nan).tolist() == [math.inf]
    assert obj.grid(t([HV, HV]), nan).tolist() == [[math.inf], [math.inf]]


# ---------------------------------------------------------- the joint regularization path


def test_on_circle_is_radius_times_cos_and_sin():
    got = _on_circle(2.0, np.array([0.0, math.pi / 2, 1.0]))
    assert got.dtype == F64 and got.shape == (3, 2)
    np.testing.assert_allclose(
        got.numpy(),
        [[2.0, 0.0], [0.0, 2.0], [2 * math.cos(1.0), 2 * math.sin(1.0)]],
        rtol=0,
        atol=1e-15,
    )


def _angle_objective(a_star: float, b_star: float):
    """A fake joint objective of the two angles: (a − a*)² + (b − b*)²."""

    def pairs(V, P):
        a = torch.atan2(V[:, 1], V[:, 0])
        b = torch.atan2(P[:, 1], P[:, 0])
        return (a - a_star) ** 2 + (b - b_star) ** 2

    return SimpleNamespace(pairs=pairs)


def test_zoom_pairs_lands_on_the_nearest_grid_point_shrinking_tenfold_per_round():
    """m = 21 points on [−h, h] are 0.1 h apart: a* = a + 0.33 h lands on a + 0.3 h after one
    round and on a + 0.33 h after two; with m = 11 (0.2 h apart) on a + 0.4 h."""
    h, a0, b0 = 0.1, 1.0, 0.5
    obj = _angle_objective(a0 + 0.33 * h, b0 - 0.712 * h)
    a, b, best = _zoom_pairs(obj, 1.0, 3.0, [a0, a0 + 0.05], [b0, b0], h, h, 1)
    np.testing.assert_allclose(a, [a0 + 0.03, a0 + 0.03], atol=1e-13)
    np.testing.assert_allclose(b, [b0 - 0.07, b0 - 0.07], atol=1e-13)
    np.testing.assert_allclose(best, [0.003**2 + 0.0012**2] * 2, rtol=1e-9)
    a, b, best = _zoom_pairs(obj, 1.0, 3.0, [a0], [b0], h, h, 2)
    np.testing.assert_allclose(a, [a0 + 0.033], atol=1e-13)
    np.testing.assert_allclose(b, [b0 - 0.071], atol=1e-13)
    np.testing.assert_allclose(best, [0.0002**2], rtol=1e-6)
    a, b, _ = _zoom_pairs(obj, 1.0, 3.0, [a0], [b0], h, h, 1, m=11)
    np.testing.assert_allclose(a, [a0 + 0.04], atol=1e-13)
    np.testing.assert_allclose(b, [b0 - 0.08], atol=1e-13)


def test_zoom_pairs_with_no_p_step_refines_the_v_angle_only():
    h = 0.1
    a, b, best = _zoom_pairs(_angle_objective(0.033, 2.0), 1.0, 1.0, [0.0], [0.5], h, 0.0, 2)
    assert b.tolist() == [0.5]
    np.testing.assert_allclose(a, [0.033], atol=1e-13)
    np.testing.assert_allclose(best, [1.5**2], rtol=1e-12)


def test_zoom_pairs_on_a_flat_objective_moves_to_the_first_grid_point_each_round():
    """Ties count as improvements (≤): each round goes to the first offset, −h, −h/10, …"""
    flat = SimpleNamespace(pairs=lambda V, P: torch.zeros(V.shape[0], dtype=F64))
    a, b, best = _zoom_pairs(flat, 1.0, 1.0, [1.0], [2.0], 0.1, 0.2, 3)
    np.testing.assert_allclose(a, [1.0 - 0.111], atol=1e-14)
    np.testing.assert_allclose(b, [2.0 - 0.222], atol=1e-14)
    assert best.tolist() == [0.0]


def test_radial_descent_asks_that_growing_both_norms_does_not_raise_the_loss():
    """One input, tokens (1, 0) and (0, 0): L = ℓ(v_0 σ(p_0)). Growing v lowers L iff v_0 > 0,
    growing p iff v_0 p_0 > 0; at v = 0 or p = 0 the radial derivative is exactly 0."""
    problem = JointProblem(t([[[1.0, 0.0], [0.0, 0.0]]]), t([1.0]))
    assert _radial_descent(problem, t([1.0, 0.0]), t([1.0, 0.0])) is True
    assert _radial_descent(problem, t([1.0, 0.0]), t([-1.0, 0.0])) is False
    assert _radial_descent(problem, t([-1.0, 0.0]), t([1.0, 0.0])) is False
    assert _radial_descent(problem, t([1.0, 0.0]), t([0.0, 0.0])) is True
    assert _radial_descent(problem, t([0.0, 1.0]), t([1.0, 0.0])) is True


def test_a_unique_joint_minimiser_is_found_and_certified():
    """L = ℓ(v_0 σ(p_0)) on ‖v‖ = 1, ‖p‖ = 2: the minimiser is v = (1, 0), p = (2, 0), the
    profile g(b) has one minimum, so nothing rivals it and the gap is infinite."""
    problem = JointProblem(t([[[1.0, 0.0], [0.0, 0.0]]]), t([1.0]))
    t0 = time.perf_counter()
    with failures.watch() as watch:
        pt = joint_reg_path_point(problem, 1, 2, grid=72)
    wall = time.perf_counter() - t0
    assert not watch.failures
    np.testing.assert_allclose(pt.v.numpy(), [1.0, 0.0], atol=1e-7)
    np.testing.assert_allclose(pt.p.numpy(), [2.0, 0.0], atol=1e-6)
    assert float(pt.v.norm()) == pytest.approx(1.0, rel=1e-15)
    assert float(pt.p.norm()) == pytest.approx(2.0, rel=1e-15)
    assert type(pt.r) is float and type(pt.R) is float and (pt.r, pt.R) == (1.0, 2.0)
    want = math.log(math.log1p(math.exp(-sigmoid(2.0))))
    assert pt.objective == pytest.approx(want, rel=1e-13)
    assert pt.objective == pytest.approx(math.log(problem.loss_value(pt.v, pt.p)), rel=1e-14)
    assert pt.objective_kind == "log_loss"
    assert pt.n_local_minima == 1 and pt.gap == math.inf
    assert pt.certified is True and pt.radial_descent is True
    assert pt.details == {"grid": 72, "rival_minima": 0}
    assert 0.0 < pt.seconds <= wall
    assert joint_reg_path_point(problem, 1.0, 2.0).details["grid"] == 720


def test_two_equal_joint_minima_are_not_certified_and_the_failure_is_reported():
    """Tokens (1, 0) and (−1, 0): L = ℓ(v_0 tanh(p_0)), minimal at (v, p) = ±((1, 0), (2, 0)):
    two minima of the profile at p-angles 0 and π, of equal value."""
    problem = JointProblem(t([[[1.0, 0.0], [-1.0, 0.0]]]), t([1.0]))
    with failures.watch() as watch:
        pt = joint_reg_path_point(problem, 1.0, 2.0, grid=72)
    assert watch.failures == [
        failures.Failure("regularization path", "joint point not certified", "(r, R)=(1, 2)")
    ]
    assert pt.certified is False and pt.details == {"grid": 72, "rival_minima": 1}
    assert pt.n_local_minima == 2 and 0.0 <= pt.gap <= 1e-12
    assert abs(float(pt.v[0])) == pytest.approx(1.0, abs=1e-12)
    assert float(pt.v[0] * pt.p[0]) > 0  # one of the two, each with v and p along ±e_1
    want = math.log(math.log1p(math.exp(-math.tanh(2.0))))
    assert pt.objective == pytest.approx(want, rel=1e-13)
    one = joint_reg_path_point(problem, 1.0, 2.0, grid=72, refine=1)
    assert one.n_local_minima == 2 and 0.0 <= one.gap <= 1e-9


def test_the_torus_needs_two_dimensional_v_and_p():
    three = JointProblem(torch.zeros(1, 2, 3, dtype=F64), t([1.0]))
    with pytest.raises(
        ValueError, match=r"^joint_reg_path_point: the torus grid needs dim_v = dim_p = 2$"
    ):
        joint_reg_path_point(three, 1.0, 1.0)
    wide = JointProblem(torch.zeros(1, 2, 2, dtype=F64), t([1.0]), torch.zeros(2, 3, dtype=F64))
    with pytest.raises(ValueError, match="dim_v = dim_p = 2"):
        joint_reg_path_point(wide, 1.0, 1.0)


# ------------------------------------------------------------ the cross-attention joint problem


def test_cross_joint_keys_are_row_major_outer_products_of_token_and_query():
    X = t([[[1.0, 2.0], [0.0, -1.0]]])
    Z = t([[3.0, 5.0]])
    problem = CrossJointProblem(X, Z, t([1.0]))
    assert problem.d == 2 and torch.equal(problem.Z, Z)
    assert torch.equal(problem.keys, t([[[3.0, 5.0, 6.0, 10.0], [0.0, 0.0, -3.0, -5.0]]]))
    assert np.array_equal(problem._keys_np, problem.keys.numpy())
    assert problem._keys_np.flags["C_CONTIGUOUS"]
    assert problem.loss.name == "logistic"


def test_cross_joint_refuses_a_bad_query_shape_and_a_loss_that_is_not_decreasing():
    X, y, Z = official_joint_data()
    with pytest.raises(
        ValueError, match=r"^Z: expected shape \(2, 2\) \(one query per input\), got \(1, 2\)$"
    ):
        CrossJointProblem(X, Z[:1], y)
    with pytest.raises(
        ValueError, match=r"^loss: joint MD needs a strictly decreasing loss, got 'square'$"
    ):
        CrossJointProblem(X, Z, y, loss="square")


def test_the_official_instance_is_the_float32_script_data_with_the_first_token_as_query():
    X, y, Z = official_joint_data()
    assert X.dtype == F64 and y.dtype == F64 and X.shape == (2, 3, 2)
    assert float(X[0, 0, 0]) == float(np.float32(-2.7)) != -2.7
    assert float(X[1, 2, 1]) == float(np.float32(0.1))
    assert torch.equal(Z, X[:, 0]) and y.tolist() == [1.0, -1.0]


# logits a_it = x_itᵀ W z_i: with W = [[1, 2], [0, −1]] and z = (1, 1), W z = (3, −1).
CX = [[[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], [[0.0, 2.0], [1.0, 0.0], [0.0, 0.0]]]
CZ = [[1.0, 1.0], [0.0, 1.0]]
CY = [1.0, -1.0]
CW = [[1.0, 2.0], [0.0, -1.0]]


def test_logits_selection_and_margins_are_the_hand_computed_cross_model():
    """Input 0: W z = (3, −1), logits (3, −1, 2). Input 1: W z = (2, −1), logits (−2, 2, 0)."""
    problem = CrossJointProblem(t(CX), t(CZ), t(CY), loss="exponential")
    assert torch.equal(problem.logits(CW), t([[3.0, -1.0, 2.0], [-2.0, 2.0, 0.0]]))
    assert problem.selected(CW).tolist() == [0, 1]
    v = [1.0, -2.0]  # x·v: (1, −2, −1) and (−4, 1, 0)
    e0, e1 = np.exp([3.0, -1.0, 2.0]), np.exp([-2.0, 2.0, 0.0])
    want = [e0 @ [1.0, -2.0, -1.0] / e0.sum(), -(e1 @ [-4.0, 1.0, 0.0]) / e1.sum()]
    np.testing.assert_allclose(problem.joint_margins(CW, v).numpy(), want, rtol=1e-14)
    cross = problem.cross(v)
    assert torch.equal(cross.X, t(CX)) and torch.equal(cross.Z, t(CZ))
    assert torch.equal(cross.y, t(CY)) and torch.equal(cross.v, t(v))
    assert cross.loss.name == "exponential"


def test_the_w_and_v_gradients_are_autograds_and_vanish_exactly_where_they_should():
    problem = CrossJointProblem(t(CX), t(CZ), t(CY))
    W = t(CW).requires_grad_(True)
    v = t([1.0, -2.0]).requires_grad_(True)
    gW, gv = torch.autograd.grad(problem.loss_value(v, W.reshape(-1)), (W, v))
    mW, GW = problem.gradient_W_log(W.detach(), v.detach())
    mv, Gv = problem.gradient_v_log_at(W.detach(), v.detach())
    assert GW.shape == (2, 2) and Gv.shape == (2,)
    np.testing.assert_allclose(math.exp(mW) * GW, gW.numpy(), rtol=1e-13, atol=1e-16)
    np.testing.assert_allclose(math.exp(mv) * Gv, gv.numpy(), rtol=1e-13, atol=1e-16)
    (fW, fGW), (fv, fGv) = problem._gradients_np(np.array(CW).reshape(-1), np.array([1.0, -2.0]))
    np.testing.assert_allclose(math.exp(fW) * fGW.reshape(2, 2), gW.numpy(), rtol=1e-13)
    np.testing.assert_allclose(math.exp(fv) * fGv, gv.numpy(), rtol=1e-13)
    assert float(np.abs(fGv).max()) == 1.0
    # logits 800 and 1 on the two inputs: each input's softmax is shifted by its own maximum
    far = CrossJointProblem(
        t([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]]), t([[1.0, 0.0], [0.0, 1.0]]), t(CY)
    )
    w, v2 = np.array([800.0, 0.0, 0.0, 1.0]), np.array([1.0, 2.0])
    (fW, fGW), (fv, fGv) = far._gradients_np(w, v2)
    rW, rv = far.gradient_p_log(v2, w), far.gradient_v_log(v2, w)
    assert fv == pytest.approx(rv[0], rel=1e-13) and np.allclose(fGv, rv[1], rtol=0, atol=1e-14)
    assert fW == pytest.approx(rW[0], rel=1e-13) and np.allclose(fGW, rW[1], rtol=0, atol=1e-14)
    # ∇_v = ½[ℓ'(1)·(1, 0) − ℓ'(−2σ(1))·σ(1)·(0, 1)] (input 0 attends to its token 0 alone)
    top = sigmoid(2 * sigmoid(1.0)) * sigmoid(1.0)
    np.testing.assert_allclose(fGv, [-sigmoid(-1.0) / top, 1.0], rtol=1e-14)
    assert fv == pytest.approx(math.log(top / 2), rel=1e-14)
    # v = 0: every score is 0, the W-gradient is exactly zero
    assert problem.gradient_W_log(CW, [0.0, 0.0])[0] == -math.inf
    # the same input with opposite labels: the v-gradients cancel exactly at W = 0
    twin = CrossJointProblem(t([CX[0], CX[0]]), t([CZ[0], CZ[0]]), t([1.0, -1.0]))
    (mW, GW), (mv, Gv) = twin._gradients_np(np.zeros(4), np.zeros(2))
    assert mW == -math.inf and not GW.any()
    assert mv == -math.inf and Gv.shape == (2,) and not Gv.any()


def test_the_dual_norm_and_the_official_loss_are_their_formulas():
    assert _dual_norm(np.array([1.0, -1.0]), 2.0) == pytest.approx(math.sqrt(2.0), rel=1e-15)
    assert _dual_norm(np.array([[1.0, -1.0], [0.5, 0.0]]), 3.0) == pytest.approx(
        2.125 ** (1 / 3), rel=1e-15
    )
    assert _official_loss(np.array([0.0, 0.0])) == pytest.approx(math.log(2.0), rel=1e-15)
    assert _official_loss(np.array([0.0, 2.0])) == pytest.approx(
        (math.log(2.0) + math.log1p(math.exp(-2.0))) / 2, rel=1e-15
    )
    assert _official_loss(np.array([40.0, 50.0])) == 0.0  # 1 + e^{−40} == 1 in float64
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # exp(800) overflows quietly
        assert _official_loss(np.array([-800.0, 0.0])) == math.inf


def _cj() -> CrossJointProblem:
    return CrossJointProblem(t(CX), t(CZ), t(CY))


V2, M2D = [1.0, -2.0], [[1.0, 2.0], [0.0, -1.0]]
BAD_SHAPES = [
    (lambda: JointProblem(t(HX)[0], t(HY)), "X", 3, (2, 2)),
    (lambda: JointProblem(t(HX), t([HY])), "y", 1, (1, 2)),
    (lambda: JointProblem(t(HX), t(HY), t([1.0, 0.0])), "W", 2, (2,)),
    (lambda: hand().scores([HV]), "v", 1, (1, 2)),
    (lambda: hand().gradient_p_log([HV], HP), "v", 1, (1, 2)),
    (lambda: hand().gradient_p_log(HV, [HP]), "p", 1, (1, 3)),
    (lambda: hand().gradient_v_log([HV], HP), "v", 1, (1, 2)),
    (lambda: hand().gradient_v_log(HV, [HP]), "p", 1, (1, 3)),
    (lambda: hand().selected_mass(HV, [HP]), "p", 1, (1, 3)),
    (lambda: joint_ngd(hand(), [HV], HP, steps=1), "v0", 1, (1, 2)),
    (lambda: joint_ngd(hand(), HV, [HP], steps=1), "p0", 1, (1, 3)),
    (lambda: CrossJointProblem(t(CX), t(CZ)[0], t(CY)), "Z", 2, (2,)),
    (lambda: _cj().cross([V2]), "v", 1, (1, 2)),
    (lambda: _cj().logits(V2), "W", 2, (2,)),
    (lambda: _cj().joint_margins(V2, V2), "W", 2, (2,)),
    (lambda: _cj().joint_margins(M2D, [V2]), "v", 1, (1, 2)),
    (lambda: _cj().gradient_W_log(M2D, [V2]), "v", 1, (1, 2)),
    (lambda: _cj().gradient_W_log(V2, V2), "W", 2, (2,)),
    (lambda: _cj().gradient_v_log_at(V2, V2), "W", 2, (2,)),
    (lambda: _cj().gradient_v_log_at(M2D, [V2]), "v", 1, (1, 2)),
    (lambda: joint_md(_cj(), V2, p=2.0, steps=1), "W0", 2, (2,)),
    (lambda: joint_md(_cj(), None, [V2], p=2.0, steps=1), "v0", 1, (1, 2)),
    (lambda: lp_v_svm(t(CX)[0], t(CY), [0, 1], 2.0), "X", 3, (3, 2)),
    (lambda: lp_v_svm(t(CX), t([CY]), [0, 1], 2.0), "y", 1, (1, 2)),
]


@pytest.mark.parametrize(("call", "name", "ndim", "shape"), BAD_SHAPES)
def test_every_entry_point_names_the_argument_of_the_wrong_dimension(call, name, ndim, shape):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == f"{name}: expected {ndim} dimensions, got shape {shape}"


NAN = [math.nan, 0.0]
NOT_FINITE = [
    (lambda: _cj().cross(NAN), "v"),
    (lambda: _cj().logits([NAN, V2]), "W"),
    (lambda: hand().scores(NAN), "v"),
    (lambda: JointProblem(t(HX), t(HY), t([NAN, NAN])), "W"),
]


@pytest.mark.parametrize(("call", "name"), NOT_FINITE)
def test_a_non_finite_argument_is_refused_by_name(call, name):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == f"{name}: contains NaN or infinity"


# ------------------------------------------------------------------------------- joint MD


def _first_step(p: float, X, y) -> np.ndarray:
    """v after one normalised ℓp step from W = v = 0: ∇_v L = −Σ_i y_i x̄_i / (2n) (ℓ'(0) = −½,
    uniform attention), θ = −0.1·∇/‖∇‖_q, v = sign(θ)|θ|^{1/(p−1)}."""
    X, y = np.asarray(X), np.asarray(y)
    g = -(y[:, None] * X.mean(axis=1)).sum(axis=0) / (2 * len(y))
    q = p / (p - 1)
    theta = -0.1 * g / (np.abs(g) ** q).sum() ** (1 / q)
    return np.sign(theta) * np.abs(theta) ** (1 / (p - 1))


@pytest.mark.parametrize("p", [2.0, 3.0, 1.5])
def test_the_first_md_step_from_zero_moves_v_alone_by_the_closed_form(p):
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    want = _first_step(p, X, y)
    for run in (joint_md(problem, p=p, steps=1), naive_joint_md(problem, p=p, steps=1)):
        assert isinstance(run, JointMDRun)
        assert run.steps.tolist() == [0, 1] and run.stop == "step budget"
        np.testing.assert_allclose(run.v, want, rtol=1e-13)
        assert not run.W.any() and run.moved == [(False, True)]
        assert run.Ws.shape == (2, 2, 2) and run.vs.shape == (2, 2)
        assert np.array_equal(run.W, run.Ws[-1]) and np.array_equal(run.v, run.vs[-1])
    explicit = joint_md(problem, np.zeros((2, 2)), np.zeros(2), p=p, steps=1, lr=0.1)
    assert np.array_equal(explicit.v, joint_md(problem, p=p, steps=1).v)


def test_an_md_step_from_a_nonzero_start_is_the_mirror_formula_on_both_parameters():
    """p = 3 (q = 3/2): θ = sign(P)|P|² − 0.1·∇_P/‖∇_P‖_{3/2}, P⁺ = sign(θ)|θ|^{1/2}, with the
    gradients from autograd."""
    problem = CrossJointProblem(t(CX), t(CZ), t(CY))
    W0, v0 = t(CW), t([1.0, -2.0])
    Wg, vg = W0.clone().requires_grad_(True), v0.clone().requires_grad_(True)
    gW, gv = torch.autograd.grad(problem.loss_value(vg, Wg.reshape(-1)), (Wg, vg))
    run = joint_md(problem, W0, v0, p=3.0, steps=1)
    for P0, G, got in ((W0.numpy(), gW.numpy(), run.W), (v0.numpy(), gv.numpy(), run.v)):
        theta = np.sign(P0) * P0**2 - 0.1 * G / (np.abs(G) ** 1.5).sum() ** (2 / 3)
        np.testing.assert_allclose(got, np.sign(theta) * np.sqrt(np.abs(theta)), rtol=1e-12)
    assert run.moved == [(True, True)]


def test_md_records_every_kth_step_margins_losses_and_the_first_moves():
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    t0 = time.perf_counter()
    run = joint_md(problem, p=2.0, steps=7, record_every=3)
    wall = time.perf_counter() - t0
    assert run.steps.tolist() == [0, 3, 6, 7]
    every = joint_md(problem, p=2.0, steps=7)
    assert every.steps.tolist() == list(range(8))
    assert np.array_equal(every.Ws[[0, 3, 6, 7]], run.Ws)
    assert np.array_equal(every.vs[[0, 3, 6, 7]], run.vs)
    assert run.moved == [(False, True)] + [(True, True)] * (MOVED_STEPS - 1)
    assert len(every.moved) == MOVED_STEPS == 5
    for k in range(4):
        m = problem.joint_margins(run.Ws[k], run.vs[k]).numpy()
        assert np.array_equal(run.margins[k], m)
        assert run.losses[k] == pytest.approx(np.mean(np.log1p(np.exp(-m))), rel=1e-13)
    assert 0.0 < run.seconds <= wall
    assert joint_md(problem, p=2.0, steps=6, record_every=3).steps.tolist() == [0, 3, 6]
    assert joint_md(problem, p=2.0, record_every=1000).steps.tolist() == [0, 1000, 2000]
    naive = naive_joint_md(problem, p=2.0, steps=5, record_every=2)
    assert naive.steps.tolist() == [0, 2, 4, 5] and naive.stop == "step budget"
    assert naive.moved == [(False, True)] + [(True, True)] * 4
    assert naive_joint_md(problem, p=2.0, steps=4, record_every=2).steps.tolist() == [0, 2, 4]
    assert naive_joint_md(problem, p=2.0, steps=3).steps.tolist() == [0, 1, 2, 3]


@pytest.mark.parametrize("p", [1.75, 3.0])
def test_the_naive_run_is_the_log_space_run_while_nothing_underflows(p):
    """The official arithmetic (autograd, ‖∇‖ + eps) and the log-space run agree step by step
    while the margins are small (eps is 1e-16 of the gradient's norm)."""
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    naive, exact = naive_joint_md(problem, p=p, steps=6), joint_md(problem, p=p, steps=6)
    np.testing.assert_allclose(naive.Ws, exact.Ws, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(naive.vs, exact.vs, rtol=1e-9, atol=1e-13)
    np.testing.assert_allclose(naive.losses, exact.losses, rtol=1e-12)
    assert naive.moved == exact.moved


def test_md_at_a_stationary_start_stops_without_counting_a_step():
    """Two copies of one input with opposite labels: at W = v = 0 both gradients are 0."""
    problem = CrossJointProblem(t([CX[0], CX[0]]), t([CZ[0], CZ[0]]), t([1.0, -1.0]))
    run = joint_md(problem, p=2.0, steps=5)
    assert run.stop == "stationary point (both gradients exactly zero)"
    assert run.steps.tolist() == [0] and run.moved == []
    assert run.Ws.shape == (1, 2, 2) and not run.W.any() and not run.v.any()
    assert run.losses.tolist() == [math.log(2.0)]
    assert joint_md(problem, p=2.0, steps=0).steps.tolist() == [0]


def test_a_parameter_whose_gradient_is_exactly_zero_does_not_move():
    """One input with tokens (1, 0) and (−1, 0), W = 0, v = (1, 0): the attention is uniform, so
    Σ_t s_t x_t = 0 and ∇_v L = 0 exactly, while ∇_W L = ℓ'(0)·x·v·vec(x zᵀ) ≠ 0: W moves alone."""
    problem = CrossJointProblem(t([[[1.0, 0.0], [-1.0, 0.0]]]), t([[1.0, 0.0]]), t([1.0]))
    run = joint_md(problem, None, [1.0, 0.0], p=2.0, steps=1)
    assert run.moved == [(True, False)] and run.stop == "step budget"
    assert run.v.tolist() == [1.0, 0.0]
    np.testing.assert_allclose(run.W, [[0.1, 0.0], [0.0, 0.0]], rtol=1e-15, atol=0)


def test_md_refuses_an_exponent_outside_one_to_infinity_and_wrong_shapes():
    X, y, Z = official_joint_data()
    problem = CrossJointProblem(X, Z, y)
    for p, shown in ((1.0, "1.0"), (math.inf, "inf"), (0.5, "0.5"), ("2", "'2'")):
        with pytest.raises(ValueError, match=rf"^p: mirror descent needs 1 < p < ∞, got {shown}$"):
            joint_md(problem, p=p, steps=1)
    assert np.array_equal(joint_md(problem, p=2, steps=3).v, joint_md(problem, p=2.0, steps=3).v)
    with pytest.raises(
        ValueError,
        match=r"^W0/v0: expected shapes \(2, 2\) and \(2,\), got \(3, 3\), \(2,\)$",
    ):
        joint_md(problem, np.zeros((3, 3)), p=2.0, steps=1)
    with pytest.raises(ValueError, match=r"got \(2, 2\), \(3,\)$"):
        joint_md(problem, None, np.zeros(3), p=2.0, steps=1)


# ---------------------------------------------------------------------------- the ℓp v-SVM

# y_i x_{iα_i} = e_1 and e_2 at α = (0, 1): min ‖v‖_p s.t. v_1 ≥ 1, v_2 ≥ 1 is v = (1, 1).
VX = [[[1.0, 0.0], [3.0, 3.0]], [[2.0, 2.0], [0.0, -1.0]]]
VY = [1.0, -1.0]


@pytest.mark.parametrize("p", [2.0, 3.0, 1.5])
def test_the_lp_v_svm_of_two_orthogonal_tokens_is_the_all_ones_head(p):
    sol = lp_v_svm(t(VX), t(VY), [0, 1], p)
    assert isinstance(sol, LpVSVM) and sol.ok is True and sol.status == "optimal"
    np.testing.assert_allclose(sol.v, [1.0, 1.0], atol=1e-6)
    assert sol.value == pytest.approx(2 ** (1 / p), rel=1e-6)
    assert sol.value == sol.svm.value and sol.reason == sol.svm.reason
    assert sol.svm.W.shape == (2, 2) and np.abs(sol.svm.W[:, 1]).max() <= 1e-8
    assert np.array_equal(sol.v, sol.svm.W[:, 0])
    assert lp_v_svm(t(VX), t(VY), np.array([[0], [1]]), p).ok  # any shape of n indices
    assert np.array_equal(lp_v_svm(VX, VY, [0.0, 1.0], p).v, sol.v)  # indices as floats


def test_an_lp_v_svm_that_is_not_certified_has_no_head():
    """The solver options reach norm_svm: one Clarabel iteration leaves a point that fails the
    certificate ("inaccurate"), and no v is read from it."""
    sol = lp_v_svm(t(VX), t(VY), [0, 1], 2.0, solver_opts={"max_iter": 1})
    assert sol.status == "inaccurate" and sol.ok is False and sol.svm.W is not None
    assert sol.v is None and math.isnan(sol.value)
    assert sol.reason.startswith("CLARABEL status user_limit; certificate fails")


def test_an_lp_v_svm_selection_outside_the_tokens_is_refused():
    for alpha in ([0, 2], [-1, 0], [0], [0, 1, 1]):
        with pytest.raises(ValueError, match=r"^alpha: expected 2 token indices in \[0, 2\)$"):
            lp_v_svm(t(VX), t(VY), alpha, 2.0)


# --------------------------------------------------------------- check's helpers (joint_predict)


def test_the_budget_is_the_official_one_else_2000_up_to_p_2_and_20000_above():
    assert [jp.budget(p) for p in (1.75, 2.0, 3.0, 2, 3)] == [1500, 2000, 20000, 2000, 20000]
    assert [jp.budget(p) for p in (1.5, 1.9, 2.5, 2.9, 4.0)] == [2000, 2000, 20000, 20000, 20000]


def test_the_rate_is_two_to_the_one_over_p_minus_one_capped_near_one():
    assert jp.rate(2.0) == 2.0 and jp.rate(1.5) == 4.0 and jp.rate(3.0) == math.sqrt(2.0)
    assert jp.rate(1.25) == 16.0
    assert jp.rate(1.0 + 1e-6) == 2.0**1000  # not an OverflowError
    assert jp.rate(1.0 + 1e-3) == 2.0**1000
    assert jp.rate(1.002) == pytest.approx(2.0**500, rel=1e-9)


def test_finite_keeps_finite_numbers_as_floats_and_drops_the_rest():
    assert jp._finite(None) is None
    assert jp._finite(math.inf) is None and jp._finite(-math.inf) is None
    assert jp._finite(math.nan) is None
    assert jp._finite(np.float64(1.5)) == 1.5 and type(jp._finite(np.float64(1.5))) is float
    assert type(jp._finite(3)) is float and jp._finite(-0.25) == -0.25


def test_solve_turns_an_exception_into_a_solver_error_pair():
    assert jp._solve("what", lambda: 42) == 42

    def boom():
        raise RuntimeError("no point")

    assert jp._solve("ℓp v-SVM", boom) == ("solver_error", "ℓp v-SVM: RuntimeError: no point")


def test_status_and_ok_read_a_solution_or_a_status_pair():
    good = SimpleNamespace(ok=True, status="optimal", reason="certified")
    bad = SimpleNamespace(ok=False, status="inaccurate", reason="gap")
    assert jp._status(good) == ("optimal", "certified")
    assert jp._status(bad) == ("inaccurate", "gap")
    assert jp._status(("solver_error", "why")) == ("solver_error", "why")
    assert jp._ok(good) is True and jp._ok(bad) is False
    assert jp._ok(("optimal", "a pair is never ok")) is False
    assert jp._quiet("any stage") is None


def test_the_svm_block_carries_point_norm_status_selection_and_a_reason_when_not_optimal():
    good = SimpleNamespace(ok=True, status="optimal", reason="certified", value=np.float64(1.5))
    assert jp._svm_json(good, np.array([1, 0]), 2.0, "v", np.array([0.5, -1.0])) == {
        "v": [0.5, -1.0],
        "norm": 1.5,
        "status": "optimal",
        "alpha": [1, 0],
        "p": 2.0,
    }
    unbounded = SimpleNamespace(ok=True, status="optimal", reason="", value=math.inf)
    assert jp._svm_json(unbounded, None, 3.0, "W", None) == {
        "W": None,
        "norm": None,
        "status": "optimal",
        "alpha": None,
        "p": 3.0,
    }
    bad = SimpleNamespace(ok=False, status="inaccurate", reason="gap 1e-3", value=2.0)
    assert jp._svm_json(bad, [0, 0], 2.0, "W", None) == {
        "W": None,
        "norm": None,
        "status": "inaccurate",
        "alpha": [0, 0],
        "p": 2.0,
        "reason": "gap 1e-3",
    }
    assert jp._svm_json(("solver_error", "raised"), [0], 1.5, "v", None)["reason"] == "raised"


def test_max_other_prob_is_the_largest_attention_off_each_inputs_top_token():
    """Input 0 attends to token 0 with logit 800 (the rest ~e^{−800}); input 1 has logits (1, 0):
    its other token gets σ(−1). Each input is shifted by its own largest logit."""
    X = t([[[1.0, 0.0], [0.0, 0.0]], [[0.0, 1.0], [0.0, 0.0]]])
    problem = CrossJointProblem(X, t([[1.0, 0.0], [0.0, 1.0]]), t([1.0, -1.0]))
    W = np.array([[800.0, 0.0], [0.0, 1.0]])
    assert jp._max_other_prob(problem, W) == pytest.approx(sigmoid(-1.0), rel=1e-15)
    three = CrossJointProblem(t(CX), t(CZ), t(CY))
    e0, e1 = np.exp([3.0, -1.0, 2.0]), np.exp([-2.0, 2.0, 0.0])
    want = max(e0[2] / e0.sum(), e1[2] / e1.sum())
    assert jp._max_other_prob(three, np.array(CW)) == pytest.approx(want, rel=1e-15)


def _null(p, reason):
    none = {"status": "inconclusive", "reason": reason, "alpha": None, "p": p, "norm": None}
    return {
        "model": "cross",
        "train": "joint",
        "p": p,
        "selected": None,
        "training": {"status": "inconclusive", "reason": reason, "W": None, "v": None},
        "svm_lp": {"W": None, **none},
        "v_svm": {"v": None, "support": None, **none},
        "corr_W": None,
        "corr_v": None,
        "shrink_W": None,
        "shrink_v": None,
        "rate": None if p is None else 2 ** (1 / (p - 1)),
        "status": "inconclusive",
        "reason": reason,
    }


def test_an_answer_that_was_not_computed_is_inconclusive_in_every_block():
    out = jp.inconclusive_answer("cross-joint", {"p": 3.0, "X": []}, "timed out", 2.5)
    assert out.pop("seconds") == pytest.approx(2.5, abs=0.5)
    assert out == _null(3.0, "timed out")
    assert list(out) == list(_null(3.0, "timed out"))
    bare = jp.inconclusive_answer("cross-joint", {}, "timed out", 0.0)
    assert bare["p"] is None and bare["rate"] is None and bare.pop("seconds") >= 0.0


def test_the_verdict_names_every_loose_input_and_every_slow_direction():
    good = SimpleNamespace(ok=True, status="optimal", reason="ok", duals=np.array([1.0, 0.5]))
    loose = SimpleNamespace(**{**vars(good), "duals": np.array([0.0, 2.0, 1e-5])})
    alpha = np.array([0, 1])
    fast, small = {"W": 10.0, "v": 10.0}, {"W": 1e-3, "v": 1e-3}
    assert jp._verdict(np.array([1, 1]), alpha, good, good, fast, small, 2.0) == (
        "inconclusive",
        "the selection at half the budget is not the final one",
        True,
    )
    status, reason, more = jp._verdict(alpha, alpha, good, loose, fast, small, 2.0)
    assert (status, more) == ("inconclusive", False) and reason.startswith("input(s) [0, 2]: ")
    status, reason, more = jp._verdict(alpha, alpha, good, good, {"W": 1.0, "v": 1.5}, small, 3.0)
    assert (status, more) == ("inconclusive", True)
    assert reason == "1 − corr(W) shrank 1.00-fold < 1.41 over the second half of the budget"
    status, reason, more = jp._verdict(alpha, alpha, good, good, {"W": 1.0, "v": 1.2}, small, 2.0)
    assert reason == (
        "1 − corr(W) shrank 1.00-fold < 2.00; 1 − corr(v) shrank 1.20-fold < 2.00"
        " over the second half of the budget"
    )
    at = SimpleNamespace(**{**vars(good), "duals": np.array([4.0, 4e-4])})  # λ = 1e-4·max
    assert jp._verdict(alpha, alpha, good, at, fast, small, 2.0)[:2] == (
        "inconclusive",
        "input(s) [1]: the selected token is not a support vector of the ℓp v-SVM, so the joint "
        "theorem's limit of W is a relaxed SVM, not W^mm_α̂(ℓp) (theorems/mirror/findings.md, "
        "MD-JOINT)",
    )
    floor = {"W": jp.CORR_FLOOR, "v": jp.CORR_FLOOR}
    assert jp._verdict(alpha, alpha, good, good, {"W": 1.0, "v": 1.0}, floor, 2.0)[0] == (
        "certified"
    )
    edge = {"W": jp.rate(3.0), "v": jp.rate(3.0)}
    assert jp._verdict(alpha, alpha, good, good, edge, small, 3.0)[0] == "certified"
    assert jp._verdict(alpha, alpha, good, good, fast, small, 3.0) == (
        "certified",
        "selection settled over the second half, both SVMs certified and tight, and 1 − corr of "
        "W and v each ≤ 1e-06 or shrank ≥ 1.41-fold from half the budget to its end",
        False,
    )


# ------------------------------------------------------------------ check's answer (predict_joint)

ANSWER_FIELDS = [
    "model",
    "train",
    "p",
    "selected",
    "training",
    "svm_lp",
    "v_svm",
    "corr_W",
    "corr_v",
    "shrink_W",
    "shrink_v",
    "rate",
    "status",
    "reason",
    "seconds",
]
RECIPE_2 = (
    "normalised ℓp mirror descent on W and on v, p = 2, lr 0.1: each dual variable "
    "sign(P)|P|^(p−1) steps along −∇_P L/‖∇_P L‖_(p*), gradients in log space "
    "(models.flows.mirror_joint.joint_md)"
)
CERTIFIED_2 = (
    "selection settled over the second half, both SVMs certified and tight, and 1 − corr of W "
    "and v each ≤ 1e-06 or shrank ≥ 2.00-fold from half the budget to its end"
)
SOLVING = "solving the ℓp-AttSVM and the ℓp v-SVM at the selection"


def _cos(A, B) -> float:
    a, b = np.ravel(A), np.ravel(B)
    return float(a @ b / math.sqrt((a @ a) * (b @ b)))


def _predict(monkeypatch, steps: int | None, *args, p=2.0, **kwargs):
    """predict_joint with the first budget ``steps`` at this p (the real one when None)."""
    if steps is not None:
        monkeypatch.setattr(jp, "budget", lambda q: {p: steps}[q])
    stages: list[str] = []
    t0 = time.perf_counter()
    out = jp.predict_joint(*args, p=p, stage=stages.append, **kwargs)
    return out, stages, time.perf_counter() - t0


def _softmax_rows(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def test_a_certified_answer_is_every_documented_quantity_of_the_run(monkeypatch):
    X, y, Z = official_joint_data()
    out, stages, wall = _predict(monkeypatch, 10, X, Z, y)
    assert list(out) == ANSWER_FIELDS
    assert stages == ["joint ℓ2 mirror descent, steps 1–10", SOLVING]
    # the run, made here
    run = joint_md(CrossJointProblem(X, Z, y), p=2.0, steps=10)
    W, v, W5 = run.W, run.v, run.Ws[5]
    Xn, Zn, yn = X.numpy(), Z.numpy(), y.numpy()
    logits = np.einsum("itd,de,ie->it", Xn, W, Zn)
    alpha = logits.argmax(axis=1)
    assert out["selected"] == alpha.tolist() == [1, 0]
    s = _softmax_rows(logits)
    margins = yn * np.einsum("it,itd,d->i", s, Xn, v)
    tr = out["training"]
    assert list(tr) == [
        "method",
        "recipe",
        "init",
        "steps",
        "history",
        "W",
        "v",
        "W_norm",
        "v_norm",
        "min_margin",
    ]
    assert tr["method"] == "joint (W, v) ℓ2 mirror descent" and tr["recipe"] == RECIPE_2
    assert tr["init"] == "W = 0, v = 0" and tr["steps"] == 10
    assert tr["W"] == W.tolist() and tr["v"] == v.tolist()
    assert tr["W_norm"] == pytest.approx(math.sqrt((W**2).sum()), rel=1e-14)
    assert tr["v_norm"] == pytest.approx(math.sqrt((v**2).sum()), rel=1e-14)
    assert tr["min_margin"] == pytest.approx(margins.min(), rel=1e-12)
    # the SVMs at the selection
    W_svm = norm_svm(X, Z, alpha, "lp", p=2.0)
    v_svm = lp_v_svm(X, y, alpha, 2.0)
    assert out["svm_lp"] == {
        "W": W_svm.W.tolist(),
        "norm": W_svm.value,
        "status": "optimal",
        "alpha": [1, 0],
        "p": 2.0,
    }
    assert out["v_svm"] == {
        "v": v_svm.v.tolist(),
        "norm": v_svm.value,
        "status": "optimal",
        "alpha": [1, 0],
        "p": 2.0,
        "support": [True, True],
    }
    corr = {"W": _cos(W_svm.W, W), "v": _cos(v_svm.v, v)}
    half = {"W": _cos(W_svm.W, W5), "v": _cos(v_svm.v, run.vs[5])}
    shrink = {k: (1 - half[k]) / (1 - corr[k]) for k in corr}
    for k in ("W", "v"):
        assert out[f"corr_{k}"] == pytest.approx(corr[k], abs=1e-13)
        assert out[f"shrink_{k}"] == pytest.approx(shrink[k], rel=1e-6)
        assert out[f"shrink_{k}"] >= 2.0
    (entry,) = tr["history"]
    assert list(entry) == [
        "steps",
        "half",
        "selected",
        "selected_at_half",
        "corr_W",
        "corr_v",
        "shrink_W",
        "shrink_v",
        "max_other_prob",
    ]
    assert (entry["steps"], entry["half"]) == (10, 5)
    assert entry["selected"] == [1, 0]
    assert entry["selected_at_half"] == np.einsum("itd,de,ie->it", Xn, W5, Zn).argmax(1).tolist()
    assert entry["corr_W"] == out["corr_W"] and entry["corr_v"] == out["corr_v"]
    assert entry["shrink_W"] == out["shrink_W"] and entry["shrink_v"] == out["shrink_v"]
    others = s.copy()
    others[np.arange(2), alpha] = 0.0
    assert entry["max_other_prob"] == pytest.approx(others.max(), rel=1e-12)
    assert out["rate"] == 2.0 and out["p"] == 2.0
    assert (out["model"], out["train"]) == ("cross", "joint")
    assert (out["status"], out["reason"]) == ("certified", CERTIFIED_2)
    assert 0.0 < out["seconds"] <= wall


def test_the_official_budget_at_p_2_is_2000_steps_read_at_1000():
    """The defaults: p = 2, the logistic loss, the official budget."""
    X, y, Z = official_joint_data()
    stages: list[str] = []
    out = jp.predict_joint(X, Z, y, stage=stages.append)
    assert out["p"] == 2.0 and out["rate"] == 2.0
    assert stages == ["joint ℓ2 mirror descent, steps 1–2000", SOLVING]
    assert out["training"]["steps"] == 2000 and out["status"] == "certified"
    (entry,) = out["training"]["history"]
    assert (entry["steps"], entry["half"]) == (2000, 1000)
    assert out["training"]["W"] == joint_md(CrossJointProblem(X, Z, y), p=2.0).W.tolist()


def test_the_loss_reaches_the_run(monkeypatch):
    X, y, Z = official_joint_data()
    out, _, _ = _predict(monkeypatch, 10, X, Z, y, loss="exponential")
    run = joint_md(CrossJointProblem(X, Z, y, "exponential"), p=2.0, steps=10)
    assert out["training"]["W"] == run.W.tolist() and out["training"]["v"] == run.v.tolist()
    logistic = joint_md(CrossJointProblem(X, Z, y), p=2.0, steps=10)
    assert not np.array_equal(run.W, logistic.W)


def test_a_selected_token_off_the_v_svms_support_is_reported_and_not_rerun(monkeypatch):
    """A scripted v-SVM v = (1, 1) whose second dual is 1e-4 of the largest: the token of input
    1 is no support vector (λ ≤ 1e-4·max), the answer says which, with no doubling."""
    scripted = SimpleNamespace(
        ok=True,
        status="optimal",
        reason="scripted",
        value=2.0,
        W=np.array([[1.0, 0.0], [1.0, 0.0]]),
        duals=np.array([4.0, 4e-4]),
    )
    calls = []

    def fake(X, y, alpha, p):
        calls.append((np.asarray(alpha).tolist(), p))
        return SimpleNamespace(svm=scripted)

    monkeypatch.setattr(jp, "lp_v_svm", fake)
    X, y, Z = official_joint_data()
    out, stages, _ = _predict(monkeypatch, 10, X, Z, y)
    assert calls == [([1, 0], 2.0)] and len(stages) == 2
    assert out["v_svm"] == {
        "v": [1.0, 1.0],
        "norm": 2.0,
        "status": "optimal",
        "alpha": [1, 0],
        "p": 2.0,
        "support": [True, False],
    }
    assert out["status"] == "inconclusive" and out["training"]["steps"] == 10
    assert out["reason"] == (
        "input(s) [1]: the selected token is not a support vector of the ℓp v-SVM, so the joint "
        "theorem's limit of W is a relaxed SVM, not W^mm_α̂(ℓp) (theorems/mirror/findings.md, "
        "MD-JOINT)"
    )
    v = np.array(out["training"]["v"])
    assert out["corr_v"] == pytest.approx(_cos([1.0, 1.0], v), abs=1e-13)


def test_a_run_that_does_not_certify_is_doubled_twice_and_says_so(monkeypatch):
    """From 20 steps, 1 − corr(v) shrinks 1.85-fold < 2 over each second half: the run goes on
    to 40 and 80 steps (each chunk's start is its "half") and is not certified."""
    X, y, Z = official_joint_data()
    out, stages, _ = _predict(monkeypatch, 20, X, Z, y)
    assert stages == [
        "joint ℓ2 mirror descent, steps 1–20",
        SOLVING,
        "joint ℓ2 mirror descent, steps 21–40",
        SOLVING,
        "joint ℓ2 mirror descent, steps 41–80",
        SOLVING,
    ]
    history = out["training"]["history"]
    assert [(h["steps"], h["half"]) for h in history] == [(20, 10), (40, 20), (80, 40)]
    run = joint_md(CrossJointProblem(X, Z, y), p=2.0, steps=80)
    np.testing.assert_allclose(out["training"]["W"], run.W, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(out["training"]["v"], run.v, rtol=1e-14, atol=1e-15)
    W_mm, v_mm = np.array(out["svm_lp"]["W"]), np.array(out["v_svm"]["v"])
    for h in history:
        end, mid = h["steps"], h["half"]
        assert h["selected"] == h["selected_at_half"] == [1, 0]
        for name, mm, its in (("W", W_mm, run.Ws), ("v", v_mm, run.vs)):
            err, before = 1 - _cos(mm, its[end]), 1 - _cos(mm, its[mid])
            assert h[f"corr_{name}"] == pytest.approx(1 - err, abs=1e-13)
            assert h[f"shrink_{name}"] == pytest.approx(before / err, rel=1e-6)
    assert out["training"]["steps"] == 80 and out["status"] == "inconclusive"
    slow = history[-1]["shrink_v"]
    assert 1.0 < slow < 2.0 and history[-1]["shrink_W"] >= 2.0
    assert out["reason"] == (
        f"not certified after 80 steps: 1 − corr(v) shrank {slow:.2f}-fold < 2.00 over the "
        "second half of the budget"
    )
    monkeypatch.setattr(jp, "MAX_DOUBLINGS", 0)
    once, stages, _ = _predict(monkeypatch, 20, X, Z, y)
    assert len(stages) == 2 and once["training"]["steps"] == 20
    assert once["reason"].startswith("not certified after 20 steps: 1 − corr(v) shrank ")


def test_a_run_stopped_at_a_stationary_point_is_inconclusive_and_an_svm_may_be_infeasible(
    monkeypatch,
):
    """Two copies of one input with opposite labels: MD stops at once, the ATT-SVM of token 0
    is W = [[½, 0], [−½, 0]] (‖W‖ = 1/√2) and the v-SVM (x·v ≥ 1 and −x·v ≥ 1) is infeasible."""
    X = t([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    Z, y = t([[1.0, 0.0], [1.0, 0.0]]), t([1.0, -1.0])
    out, stages, _ = _predict(monkeypatch, 10, X, Z, y)
    assert stages == ["joint ℓ2 mirror descent, steps 1–10", SOLVING]
    assert out["status"] == "inconclusive"
    assert out["reason"] == (
        "the run stopped after 0 steps: stationary point (both gradients exactly zero)"
    )
    tr = out["training"]
    assert tr["steps"] == 0 and tr["W"] == [[0.0, 0.0], [0.0, 0.0]] and tr["v"] == [0.0, 0.0]
    assert tr["W_norm"] == 0.0 and tr["v_norm"] == 0.0 and tr["min_margin"] == 0.0
    assert tr["history"] == [
        {
            "steps": 0,
            "half": 0,
            "selected": [0, 0],
            "selected_at_half": [0, 0],
            "corr_W": None,
            "corr_v": None,
            "shrink_W": None,
            "shrink_v": None,
            "max_other_prob": 0.5,
        }
    ]
    assert out["selected"] == [0, 0]
    svm = out["svm_lp"]
    np.testing.assert_allclose(svm.pop("W"), [[0.5, 0.0], [-0.5, 0.0]], atol=1e-6)
    assert svm.pop("norm") == pytest.approx(math.sqrt(0.5), rel=1e-6)
    assert svm == {"status": "optimal", "alpha": [0, 0], "p": 2.0}
    vb = out["v_svm"]
    assert vb["reason"].startswith("feasibility LP: ")
    assert {k: vb[k] for k in vb if k != "reason"} == {
        "v": None,
        "norm": None,
        "status": "infeasible",
        "alpha": [0, 0],
        "p": 2.0,
        "support": None,
    }
    assert [out[k] for k in ("corr_W", "corr_v", "shrink_W", "shrink_v")] == [None] * 4


@pytest.mark.parametrize(
    ("target", "block", "what"),
    [("norm_svm", "svm_lp", "ℓp-AttSVM"), ("lp_v_svm", "v_svm", "ℓp v-SVM")],
)
def test_an_svm_solver_that_raises_gives_a_solver_error_block_not_an_exception(
    monkeypatch, target, block, what
):
    def boom(*args, **kwargs):
        raise RuntimeError("no point")

    monkeypatch.setattr(jp, target, boom)
    X, y, Z = official_joint_data()
    out, _, _ = _predict(monkeypatch, 10, X, Z, y)
    why = f"{what}: RuntimeError: no point"
    point = "W" if block == "svm_lp" else "v"
    want = {point: None, "norm": None, "status": "solver_error", "alpha": [1, 0], "p": 2.0}
    want |= {"reason": why} | ({"support": None} if block == "v_svm" else {})
    assert out[block] == want
    article = "the ℓp-AttSVM" if block == "svm_lp" else "the ℓp v-SVM"
    assert out["status"] == "inconclusive"
    assert out["reason"] == f"{article} at the selection: solver_error: {why}"
    assert out["corr_W"] is None and out["shrink_v"] is None
    assert out["training"]["history"][0]["corr_v"] is None
    other = "v_svm" if block == "svm_lp" else "svm_lp"
    assert out[other]["status"] == "optimal"


def test_keys_float64_cannot_resolve_give_the_null_answer_with_the_reason(monkeypatch):
    X = t([[[1.0, 0.0], [1.0 + 2.0**-52, 0.0]]])
    Z, y = t([[1.0, 0.5]]), t([1.0])
    out, stages, wall = _predict(monkeypatch, 10, X, Z, y)
    reason = (
        "precision: the keys x·zᵀ of tokens 0 and 1 of input 0 differ by 2.2e-16, below "
        "float64's resolution 2.2e-13 (1000·2^-52 of their magnitude 1.0e+00)"
    )
    assert stages == []
    assert 0.0 <= out.pop("seconds") <= wall
    assert out == _null(2.0, reason)
