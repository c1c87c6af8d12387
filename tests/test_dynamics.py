"""Unit tests of the training dynamics (models/flows/dynamics.py, spec maxmargin §2.1, §2.2, §3,
§4).

Gradient flow, small-step GD and normalized GD follow one path: the arc-length tracer is
checked against small-step NGD on the stretch both run, and against NGD with the notebooks'
lr 0.1 for the qualitative end (the selection). Then the monotone quantities (L under GD with
η ≤ 1/L_p and along the flow; ‖p‖ after a burn-in; ⟨p, p^mm⟩ under equal non-optimal scores),
``converge`` on Figure 2, named stops (stationary start, a finite minimiser, an infeasible
selection), flow time, and bad input.
"""

import json
import math

import numpy as np
import pytest
import torch

from models.flows.dynamics import Trajectory, converge, gd, ngd, trace_flow
from models.oracles.svm import att_svm
from models.problems.attention import PromptProblem, one_minus_cos
from models.problems.losses import square
from tests.mutmut_aware import per_mutant_scope

DTYPE = torch.float64
NAMED_STOPS = (
    "reached max_norm",
    "reached max_arc",
    "stationary point",
    "integrator stalled",
    "step budget",
    "direction reached the SVM of the selection",
)


def figure2() -> PromptProblem:
    """Spec §4, Figure 2: n = 3, T = 7, 2-D keys = shift + N(0, 0.2²) noise (torch.Generator,
    seed 0); shifts (1, 0) for token 0, (−1, 1) for tokens 1–3, (−0.5, −0.5) for tokens 4–6;
    scores 1 for token 0 and 0.5 for the rest; logistic loss."""
    gen = torch.Generator().manual_seed(0)
    shifts = torch.tensor([[1.0, 0.0]] + [[-1.0, 1.0]] * 3 + [[-0.5, -0.5]] * 3, dtype=DTYPE)
    keys = shifts + 0.2 * torch.randn((3, 7, 2), generator=gen, dtype=DTYPE)
    scores = torch.full((3, 7), 0.5, dtype=DTYPE)
    scores[:, 0] = 1.0
    return PromptProblem(keys, scores, "logistic")


FIG2_INITS = (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)


def random_problem(seed: int, n: int, T: int, loss="logistic", scores="equal", dim=None):
    """Gaussian keys (dim = n(T−1) by default, so every ATT-SVM is feasible almost surely)
    and scores: "equal" (token 0 scores 1, the rest 0.5) or "uniform" (U[−2, 2])."""
    gen = torch.Generator().manual_seed(seed)
    dim = n * (T - 1) if dim is None else dim
    keys = torch.randn((n, T, dim), generator=gen, dtype=DTYPE)
    if scores == "equal":
        gam = torch.full((n, T), 0.5, dtype=DTYPE)
        gam[:, 0] = 1.0
    else:
        gam = 4 * torch.rand((n, T), generator=gen, dtype=DTYPE) - 2
    p0 = torch.randn(dim, generator=gen, dtype=DTYPE)
    return PromptProblem(keys, gam, loss), p0


def pmm_of(problem: PromptProblem, alpha=None) -> np.ndarray:
    alpha = np.zeros(problem.n, dtype=np.int64) if alpha is None else alpha
    sol = att_svm(problem.keys, alpha)
    assert sol.ok, sol.reason
    return sol.x


def assert_clean(traj: Trajectory):
    """Every run: no NaN anywhere, arc length non-decreasing, a named stop."""
    assert torch.isfinite(traj.ps).all()
    assert np.isfinite(traj.s).all() and (np.diff(traj.s) >= 0).all()
    assert np.isfinite(traj.losses).all()
    assert not np.isnan(traj.log_grad_norms).any()
    assert len(traj.ps) == len(traj.s) == len(traj.losses) == len(traj.log_grad_norms)
    assert traj.stop.startswith(NAMED_STOPS), traj.stop
    assert traj.evals >= 1


def distinct(ps: np.ndarray) -> np.ndarray:
    """Drop consecutive repeats (the final point is recorded twice)."""
    keep = np.concatenate([[True], np.any(np.diff(ps, axis=0) != 0, axis=1)])
    return ps[keep]


# --------------------------------------------------------------------------------------------
# (1) The tracer against normalized GD
# --------------------------------------------------------------------------------------------

NGD_CASES = {
    "figure2": lambda: (figure2(), torch.tensor([-1.5, 0.0], dtype=DTYPE)),
    "n1 T3 logistic": lambda: random_problem(0, 1, 3, "logistic"),
    "n2 T3 exponential": lambda: random_problem(1, 2, 3, "exponential"),
    "n2 T4 uniform scores": lambda: random_problem(3, 2, 4, "logistic", "uniform"),
}


@pytest.mark.parametrize("case", NGD_CASES, ids=list(NGD_CASES))
def test_tracer_follows_small_step_ngd(case):
    """NGD with lr 1e-3 is the tracer's explicit Euler scheme: on s ∈ [0, 5] both give the
    same curve to O(lr). The dense NGD path is interpolated at the tracer's arc lengths."""
    problem, p0 = NGD_CASES[case]()
    lr, arc = 1e-3, 5.0
    flow = trace_flow(problem, p0, max_arc=arc)
    euler = ngd(problem, p0, lr=lr, steps=int(round(arc / lr)))
    assert_clean(flow)
    assert_clean(euler)
    assert flow.stop == "reached max_arc" and flow.s[-1] == pytest.approx(arc, rel=1e-12)
    assert euler.stop == "step budget" and euler.s[-1] == pytest.approx(arc, rel=1e-12)
    assert euler.evals == 5001
    flow_ps, euler_ps = flow.ps.numpy(), euler.ps.numpy()
    scale = 1 + np.linalg.norm(flow_ps, axis=1)
    end_dev = np.linalg.norm(flow_ps[-1] - euler_ps[-1]) / scale[-1]
    assert end_dev <= 1e-3
    at_s = np.stack([np.interp(flow.s, euler.s, euler_ps[:, j]) for j in range(problem.dim)], 1)
    assert (np.linalg.norm(at_s - flow_ps, axis=1) / scale).max() <= 1e-3
    # and the tracer needs far fewer field evaluations than the 5,000 Euler steps
    assert flow.evals < 1000


@pytest.mark.parametrize(
    "case",
    ["figure2", "n2 T4 uniform scores", "n3 T2 uniform scores"],
)
def test_ngd_lr_0p1_reaches_the_tracers_selection(case):
    """The notebooks' protocol (NGD, lr 0.1, 1000 steps = arc length 100) ends where the
    flow does: the same selected tokens and the same direction to ~1e-6."""
    cases = dict(NGD_CASES)
    cases["n3 T2 uniform scores"] = lambda: random_problem(4, 3, 2, "logistic", "uniform")
    problem, p0 = cases[case]()
    flow = trace_flow(problem, p0, max_arc=100.0)
    euler = ngd(problem, p0, lr=0.1, steps=1000)
    assert_clean(flow)
    assert_clean(euler)
    assert torch.equal(problem.selected(flow.final), problem.selected(euler.final))
    assert one_minus_cos(flow.final, euler.final) <= 1e-6


# --------------------------------------------------------------------------------------------
# (2) GD with η = 1/L_p never increases the loss
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
@pytest.mark.parametrize("seed,n,T,scores", [(10, 2, 3, "uniform"), (11, 3, 4, "equal")])
def test_gd_with_eta_one_over_L_never_increases_the_loss(loss, seed, n, T, scores):
    problem, p0 = random_problem(seed, n, T, loss, scores, dim=3)
    eta = 1.0 / problem.smoothness_bound()
    run = gd(problem, p0, eta=eta, steps=2000)
    assert_clean(run)
    assert run.stop == "step budget" and len(run.s) == 2001 and run.evals == 2001
    assert np.diff(run.losses).max() <= 1e-14
    assert run.losses[-1] < run.losses[0]


@pytest.mark.parametrize("loss", ["logistic", "exponential", "square"])
def test_gd_steps_are_those_of_the_log_space_gradient(loss):
    """gd steps along the tracer's field (u, log‖∇L‖): 200 of its steps must be those of the
    loop on the log-space gradient, p ← p − η·e^{log_scale}·vec, to rounding, and so must the
    recorded log‖∇L‖. (The field without a kernel is tested against the compiled one in
    tests/test_attention.py.)"""
    problem, p0 = random_problem(12, 3, 4, loss, "uniform", dim=3)
    eta = 1.0 / problem.smoothness_bound()
    run = gd(problem, p0, eta=eta, steps=200)
    p, lgns = p0.numpy().copy(), []
    for k in range(201):
        log_scale, vec = problem.gradient_log_np(p)
        lgns.append(log_scale + math.log(float(np.linalg.norm(vec))))
        if k < 200:
            p = p - eta * math.exp(log_scale) * vec
    np.testing.assert_allclose(run.ps[-1].numpy(), p, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(run.log_grad_norms, lgns, rtol=1e-12)
    assert float(torch.linalg.vector_norm(run.ps[-1] - run.ps[0])) > 1e-3  # it moved


def test_gd_on_figure2_grows_norm_and_pmm_projection():
    """Spec §2.1 consequences for plain GD with η ≤ 1/L_p: L decreases, ‖p‖ grows after a
    burn-in and ⟨p(t), p^mm⟩ increases at every step."""
    problem = figure2()
    pmm = pmm_of(problem)
    run = gd(problem, None, eta=1.0 / problem.smoothness_bound(), steps=2000)
    assert_clean(run)
    ps = run.ps.numpy()
    assert np.diff(run.losses).max() <= 1e-14
    assert (np.diff(ps @ pmm) > 0).all()
    assert (np.diff(run.norms)[10:] > 0).all()


def test_one_gd_step_is_eta_times_the_autograd_gradient():
    """Plain GD moves by η·∇L(p⁰) itself, not by η·∇L/max|∇L| (the direction the log-space
    gradient returns): the step must shrink with the gradient for the descent lemma's
    η ≤ 1/L_p to apply. On this instance max|∇L(p⁰)| ≈ 0.02, so a normalised step would be
    ~50 times too long; the displacement is compared with −η·∇L from torch autograd of the
    plain loss."""
    problem, p0 = random_problem(11, 3, 4, "exponential", "equal", dim=3)
    p = p0.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(problem.loss_value(p), p)
    assert 1e-3 < float(grad.abs().max()) < 0.1  # far from 1: the two step rules differ
    eta = 1.0 / problem.smoothness_bound()
    run = gd(problem, p0, eta=eta, steps=1)
    step = run.ps[1] - run.ps[0]
    assert torch.equal(run.ps[0], p0)
    assert float(torch.linalg.vector_norm(step + eta * grad)) <= 1e-12 * float(
        torch.linalg.vector_norm(eta * grad)
    )


# --------------------------------------------------------------------------------------------
# (2b) How close to a basin boundary the tracer's tolerance lets a start be
# --------------------------------------------------------------------------------------------
#
# Accuracy along the path is mostly a cost: the end is certified independently (selection
# lead, SVM certificate, alignment persisting). Near a basin boundary it is not: a loose step
# can carry the path across the ridge to the other attractor, and the certificate then
# certifies the wrong basin. On this two-attractor instance (tokens 0 and 1 are both locally
# optimal, their basins split by a ridge that the flow from p0 = (x0, 0) runs along) the
# tracer with relative tolerance rtol ends in the right basin from every start at distance
# δ ≥ rtol/10 from the ridge and can jump below a line that depends on rounding (measured
# with the O(T) kernel of 2026-12-04, δ on a 1–3 grid: rtol 1e-2, 1e-3, 1e-4, 1e-5 resolve δ
# down to 3e-5, 3e-6, 3e-7, 3e-7; the pairwise kernel before it happened to resolve 1e-4,
# 1e-5, 1e-6, 1e-8, and below each line both kernels answer at random). converge's default
# rtol 1e-5 thus resolves starts 1e-6 from a boundary (3e-7 as measured).


def ridge_problem() -> PromptProblem:
    """n = 1, T = 3: keys (2, 1), (−2, 1), (0, 0), scores 1, 0.9, 0; tokens 0 and 1 are
    locally optimal (each one's only support token is token 2, which scores lower)."""
    keys = torch.tensor([[[2.0, 1.0], [-2.0, 1.0], [0.0, 0.0]]], dtype=DTYPE)
    return PromptProblem(keys, torch.tensor([[1.0, 0.9, 0.0]], dtype=DTYPE), "logistic")


def _basin(problem, x0: float, rtol: float) -> int:
    out = converge(problem, torch.tensor([x0, 0.0], dtype=DTYPE), rtol=rtol, atol=1e-12)
    assert out.converged, out.reason
    return int(out.selected[0])


@pytest.fixture(scope=per_mutant_scope)
def ridge():
    """The ridge's x0, by bisection with a tracer 1e4 times tighter than any tested."""
    problem = ridge_problem()
    lo, hi = -1.0, 1.0
    assert (_basin(problem, lo, 1e-9), _basin(problem, hi, 1e-9)) == (1, 0)
    for _ in range(45):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _basin(problem, mid, 1e-9) == 1 else (lo, mid)
    return problem, 0.5 * (lo + hi)


@pytest.mark.parametrize("rtol", [1e-2, 1e-3, 1e-4, 1e-5])
def test_the_tracer_resolves_a_basin_boundary_to_a_tenth_of_rtol(ridge, rtol):
    problem, x_ridge = ridge
    for delta in (1e-1, 10 * rtol, rtol / 10):
        assert _basin(problem, x_ridge + delta, rtol) == 0, f"δ = +{delta:g}"
        assert _basin(problem, x_ridge - delta, rtol) == 1, f"δ = −{delta:g}"


def test_below_that_line_a_loose_tracer_jumps_basins(ridge):
    """The line is real: between 1e-5 and 1e-8 from the ridge, rtol 1e-2 ends in one basin
    from both sides somewhere (which δ does is a matter of rounding: the kernel of
    2026-12-04 jumps at 1e-5, 3e-6, 1e-6 and 1e-8, not at 1e-7)."""
    problem, x_ridge = ridge
    jumped = [
        delta
        for delta in (1e-5, 3e-6, 1e-6, 1e-7, 1e-8)
        if len({_basin(problem, x_ridge + sign * delta, 1e-2) for sign in (1, -1)}) == 1
    ]
    assert jumped


# --------------------------------------------------------------------------------------------
# (3) converge on Figure 2
# --------------------------------------------------------------------------------------------


@pytest.fixture(scope=per_mutant_scope)
def fig2_outcomes():
    problem = figure2()
    return problem, {a: converge(problem, torch.tensor([a, 0.0], dtype=DTYPE)) for a in FIG2_INITS}


@pytest.mark.parametrize("a", FIG2_INITS)
def test_converge_on_figure2(fig2_outcomes, a):
    problem, outcomes = fig2_outcomes
    out = outcomes[a]
    pmm = pmm_of(problem)
    assert out.status == "converged", out.reason
    assert out.converged
    assert out.selected.tolist() == [0, 0, 0]
    assert out.one_minus_cos <= 1e-6
    assert one_minus_cos(out.p, pmm) <= 1e-6
    assert np.allclose(out.svm.x, pmm, rtol=0, atol=1e-9)
    assert out.max_other_prob <= 1e-6
    assert float(problem.softmax(out.p)[:, 0].min()) >= 1 - 1e-6
    assert_clean(out.trajectory)
    norms = out.trajectory.norms
    assert norms[-1] > 100 * max(1.0, abs(a))
    assert out.trajectory.evals < 3000


@pytest.mark.parametrize("case", ["figure2 a=0.0", "n3 T3 correlation"])
def test_converged_means_aligned_while_the_norm_grew_by_persist(case):
    """``converge`` may call a run converged only after p stayed along p^mm(α̂) while ‖p‖ grew
    by the factor ``persist``: a path can touch the ray of a selection that is not locally
    optimal and leave it (an unstable ray), so one aligned point is no evidence. Every step is
    recorded, so the trajectory must show it: the final stretch of points with
    1 − cos(p, p^mm) ≤ target starts at a norm at most ‖p_final‖/persist (a run stopped at
    its first aligned point has ratio 1), and no point beyond ‖p_final‖/persist is off the ray."""
    target, persist = 1e-6, 10.0
    problem, p0 = PATH_CASES[case]()
    out = converge(problem, p0, target=target, persist=persist)
    assert out.status == "converged", out.reason
    assert out.reason.startswith("direction reached the SVM of the selection")
    pmm = torch.as_tensor(out.svm.x)
    ps, norms = out.trajectory.ps, out.trajectory.norms
    off = np.array([one_minus_cos(p, pmm) > target for p in ps])
    assert not off[-1]
    first = int(np.flatnonzero(off)[-1]) + 1 if off.any() else 0
    assert norms[-1] >= persist * norms[first], (norms[first], norms[-1])
    assert not off[norms >= norms[-1] / persist].any()


# --------------------------------------------------------------------------------------------
# (4, 6, 7) Along the traced path: no NaN, ‖p‖ and ⟨p, p^mm⟩ grow, L decreases
# --------------------------------------------------------------------------------------------

PATH_CASES = {
    **{f"figure2 a={a}": (lambda a=a: (figure2(), torch.tensor([a, 0.0]))) for a in FIG2_INITS},
    "n1 T4": lambda: random_problem(20, 1, 4, "logistic"),
    "n2 T3 exponential": lambda: random_problem(21, 2, 3, "exponential"),
    "n3 T3 correlation": lambda: random_problem(22, 3, 3, "correlation"),
}


@pytest.mark.parametrize("case", PATH_CASES, ids=list(PATH_CASES))
def test_monotone_quantities_along_the_traced_path(case):
    problem, p0 = PATH_CASES[case]()
    pmm = pmm_of(problem)
    flow = trace_flow(problem, p0, max_norm=1e4)
    assert_clean(flow)
    assert flow.stop == "reached max_norm"
    ps = distinct(flow.ps.numpy())
    # Lemma 2.1: d⟨p, p^mm⟩/ds = ⟨−∇L, p^mm⟩/‖∇L‖ > 0 everywhere, not only eventually.
    assert (np.diff(ps @ pmm) > 0).all()
    # ‖p‖ may shrink at first (p0 can point away); after it has doubled it only grows.
    norms = np.linalg.norm(ps, axis=1)
    burn = np.argmax(norms >= 2 * (1 + float(torch.linalg.vector_norm(p0))))
    assert burn > 0 and (np.diff(norms[burn:]) > 0).all()
    # gradient flow decreases L; far out L − L* is below an ulp of L, so allow rounding.
    losses = flow.losses
    assert np.diff(losses).max() <= 4e-16 * np.abs(losses).max()
    assert losses[-1] < losses[0]
    assert one_minus_cos(flow.final, pmm) <= 1e-6


def test_tracer_reaches_huge_norm_cheaply_and_exactly():
    """The stiff far field: ‖p‖ = 1e6 on Figure 2 in hundreds of evaluations, with the
    direction of p^mm to 1e-12 (the offset ρ* is ~1/‖p‖ of the direction)."""
    problem = figure2()
    flow = trace_flow(problem, None, max_norm=1e6)
    assert_clean(flow)
    assert flow.stop == "reached max_norm"
    assert float(torch.linalg.vector_norm(flow.final)) >= 1e6
    assert flow.evals <= 3000
    assert one_minus_cos(flow.final, pmm_of(problem)) <= 1e-12
    assert np.isfinite(flow.log_grad_norms).all() and flow.log_grad_norms[-1] < -1e5


# --------------------------------------------------------------------------------------------
# (5) Every stop is named
# --------------------------------------------------------------------------------------------


def _flat_problem():
    problem, p0 = random_problem(30, 2, 3, "logistic", dim=2)
    return PromptProblem(problem.keys, torch.full((2, 3), 0.5, dtype=DTYPE), "logistic"), p0


@pytest.mark.parametrize("runner", ["trace_flow", "ngd", "gd"])
def test_stationary_start_is_a_named_stop(runner):
    problem, p0 = _flat_problem()
    run = {
        "trace_flow": lambda: trace_flow(problem, p0),
        "ngd": lambda: ngd(problem, p0, lr=0.1, steps=1000),
        "gd": lambda: gd(problem, p0, eta=1.0, steps=1000),
    }[runner]()
    assert_clean(run)
    assert run.stop.startswith("stationary point")
    assert np.all(run.ps.numpy() == p0.numpy())
    assert run.log_grad_norms[0] == -math.inf
    assert run.evals <= 2


def test_converge_from_a_stationary_start_is_not_converged():
    problem, p0 = _flat_problem()
    out = converge(problem, p0)
    assert out.status == "inconclusive" and out.reason
    assert out.trajectory.stop.startswith("stationary point")


def test_converge_does_not_call_a_stationary_point_on_the_svm_ray_converged():
    """All scores equal: L is constant and the flow never moves. Starting on the ray of
    p^mm(0) (selection decisive, 1 − cos = 0) is still not directional convergence."""
    problem, _ = random_problem(31, 2, 3, dim=4)
    flat = PromptProblem(problem.keys, torch.full((2, 3), 0.5, dtype=DTYPE), "logistic")
    out = converge(flat, 60 * torch.as_tensor(pmm_of(flat)))
    assert out.trajectory.stop.startswith("stationary point")
    # every token ties, so the engine's target is the tie-sharing SVM (0, no direction); the
    # snapshot alone would pass against p^mm(0) itself
    full = att_svm(flat.keys, out.selected)
    assert one_minus_cos(out.p, torch.as_tensor(full.x)) <= 1e-12
    assert out.status == "inconclusive" and not out.converged
    assert out.reason


def _square_control():
    """Spec F9: square loss with target 0.5 inside the score range [0, 1]: a finite mixture
    attains the target, so L has finite minimisers and ‖p‖ does not diverge."""
    keys = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]], dtype=DTYPE)
    return PromptProblem(keys, torch.tensor([[1.0, 0.0, 0.2]], dtype=DTYPE), square(0.5))


@pytest.mark.parametrize("p0", [None, [3.0, -2.0], [0.5, 0.5], [-4.0, 4.0]])
def test_finite_minimiser_stops_with_a_name_and_bounded_norm(p0):
    problem = _square_control()
    flow = trace_flow(problem, p0, max_steps=300)
    assert_clean(flow)
    assert flow.stop == "step budget" or flow.stop.startswith("integrator stalled")
    assert float(flow.norms.max()) <= 20.0  # it wanders (to ‖p‖ ≈ 11 from (−4, 4)), then stops
    assert flow.losses[-1] <= 1e-12  # it found the minimiser (L = 0)
    # From (−4, 4) the path passes p ≈ (−7.09, −7.10), where token 2 holds all but 6e-10 of
    # the attention and 1 − cos(p, p^mm([2])) = 5.6e-7, while the flow heads away (its
    # direction has negative cosine with p^mm([2])). That transient is not convergence.
    out = converge(problem, p0, max_steps=300)
    assert out.status == "inconclusive" and out.reason
    assert float(torch.linalg.vector_norm(out.p)) <= 20.0


def test_infeasible_selection_is_never_converged():
    """Spec F11: n = 1, the optimal key is the midpoint of the two others; attention can
    never concentrate on it and ATT-SVM(opt) is infeasible."""
    keys = torch.tensor([[[0.0, 0.0], [-1.0, 0.3], [1.0, -0.3]]], dtype=DTYPE)
    problem = PromptProblem(keys, torch.tensor([[1.0, 0.0, 0.0]], dtype=DTYPE), "logistic")
    assert att_svm(problem.keys, [0]).status == "infeasible"
    for p0 in ([2.0, 0.0], [0.0, 3.0], [-4.0, 1.0]):
        out = converge(problem, p0, max_steps=300)
        assert out.status in ("infeasible", "inconclusive"), out.status
        assert not out.converged and out.reason
        assert_clean(out.trajectory)
        assert float(torch.linalg.vector_norm(out.p)) <= 10.0


# --------------------------------------------------------------------------------------------
# (8) Flow time
# --------------------------------------------------------------------------------------------


def test_log_time_is_finite_and_grows_with_max_norm():
    problem = figure2()
    times, norms = [], []
    for max_norm in (3.0, 10.0, 1e2, 1e3, 1e5):
        flow = trace_flow(problem, None, max_norm=max_norm)
        assert_clean(flow)
        assert flow.stop == "reached max_norm"
        log_time = flow.extra["log_time"]
        assert math.isfinite(log_time)
        # t = ∫ ds/‖∇L‖ ≥ s_end / max‖∇L‖ along the path
        assert log_time >= math.log(flow.s[-1]) - float(flow.log_grad_norms.max()) - 1e-6
        times.append(log_time)
        norms.append(float(flow.norms[-1]))
    assert all(b > a for a, b in zip(times, times[1:], strict=False))
    assert all(b > a for a, b in zip(norms, norms[1:], strict=False))
    # far out ‖∇L‖ ~ e^{−‖p‖/‖p^mm‖}: the time to get there is astronomically large
    assert times[-1] > 1e4


# --------------------------------------------------------------------------------------------
# (9) Bad input
# --------------------------------------------------------------------------------------------

BAD_P0 = {
    "wrong dimension": ([0.0, 0.0, 0.0], r"^p0: expected dimension 2, got 3"),
    "2-D": ([[0.0, 0.0]], r"^p0: expected 1 dimensions"),
    "NaN": ([math.nan, 0.0], r"^p0: contains NaN"),
    "inf": ([0.0, math.inf], r"^p0: contains NaN or infinity"),
}
RUNNERS = {
    "gd": lambda problem, p0: gd(problem, p0, eta=0.1, steps=5),
    "ngd": lambda problem, p0: ngd(problem, p0, steps=5),
    "trace_flow": lambda problem, p0: trace_flow(problem, p0),
    "converge": lambda problem, p0: converge(problem, p0),
}


@pytest.mark.parametrize("runner", RUNNERS)
@pytest.mark.parametrize("bad", BAD_P0, ids=list(BAD_P0))
def test_bad_initial_point_is_a_clear_error(runner, bad):
    p0, message = BAD_P0[bad]
    with pytest.raises(ValueError, match=message):
        RUNNERS[runner](figure2(), p0)


@pytest.mark.parametrize(
    "h, a, b", [(1.0, 0.0, 0.0), (1.0, 0.0, -20.0), (2.0, -5.0, 3.0), (0.5, 10.0, -30.0)]
)
def test_step_time_is_the_exact_integral_of_ds_over_grad_norm(h, a, b):
    """Flow time over a step with log‖∇L‖ linear in s: the log-mean rule is exact there."""
    from scipy.integrate import quad

    from models.flows.dynamics import _log_step_time

    exact, _ = quad(lambda s: math.exp(-(a + (b - a) * s / h)), 0, h, epsabs=0, epsrel=1e-13)
    assert _log_step_time(h, a, b) == pytest.approx(math.log(exact), rel=1e-12, abs=1e-12)


# --------------------------------------------------------------------------------------------
# (9) Finite minimisers: deciding a run that stops at a finite point
# --------------------------------------------------------------------------------------------


def _tug_of_war():
    """Two inputs pulling p in opposite directions along the first key axis (logistic loss):
    L(p) = ½[ℓ(σ(p₁)) + ℓ(1 − σ(p₁))] is convex in σ with its minimum at σ = ½, i.e. p₁ = 0:
    a strict minimiser on the key span (the second coordinate is never used)."""
    keys = torch.tensor([[[0.0, 0.0], [1.0, 0.0]], [[0.0, 0.0], [1.0, 0.0]]], dtype=DTYPE)
    return PromptProblem(keys, torch.tensor([[0.0, 1.0], [1.0, 0.0]], dtype=DTYPE), "logistic")


def test_finite_minimiser_certifies_a_strict_local_minimum():
    from models.flows.dynamics import finite_minimiser

    problem = _tug_of_war()
    out = converge(problem, [2.0, 1.0], max_steps=2000)
    assert not out.converged  # the flow stops at a finite point
    found = finite_minimiser(problem, out.p)
    assert found is not None
    assert abs(float(found.p[0])) <= 1e-12 and float(found.p[1]) == float(out.p[1])
    assert found.grad_norm <= 1e-14 and found.min_eig > 0
    # at p₁ = 0 both inputs put attention ½ on each token: L = ℓ(½) = log(1 + e^{-1/2})
    assert found.loss == pytest.approx(math.log1p(math.exp(-0.5)), rel=1e-14)


def test_finite_minimiser_finds_none_where_the_descent_lemma_forbids_one():
    """n = 1 with equal non-optimal scores (spec §2.1): ⟨∇L(p), p^mm⟩ < 0 everywhere, so no
    point, however the run ended there, is certified."""
    from models.flows.dynamics import finite_minimiser

    keys = torch.tensor([[[0.0, 0.0], [1.0, 0.3], [-0.5, 1.0]]], dtype=DTYPE)
    problem = PromptProblem(keys, torch.tensor([[1.0, 0.5, 0.5]], dtype=DTYPE), "logistic")
    for p in ([0.0, 0.0], [1.0, 2.0], [-3.0, 1.0], [20.0, -5.0]):
        assert finite_minimiser(problem, p) is None


def test_finite_minimiser_rejects_a_maximum_a_flat_loss_and_a_far_point():
    """A maximum of L (a negative Hessian on the key span) or a flat L is no minimiser; nor is
    a point past MINIMISER_MAX_NORM, where the softmax saturates and the Hessian underflows."""
    from models.flows.dynamics import MINIMISER_MAX_NORM, finite_minimiser

    # n = 1, keys 0, e₁, −e₁ with scores 0, 1, 1: f(p) is smallest at p₁ = 0 (where the
    # zero-score token has most attention), so L = ℓ(f) has a maximum there on the key axis.
    keys = torch.tensor([[[0.0, 0.0], [1.0, 0.0], [-1.0, 0.0]]], dtype=DTYPE)
    top = PromptProblem(keys, torch.tensor([[0.0, 1.0, 1.0]], dtype=DTYPE), "logistic")
    assert float(torch.linalg.vector_norm(top.gradient(torch.zeros(2, dtype=DTYPE)))) == 0.0
    assert finite_minimiser(top, [0.0, 0.0]) is None
    # the correlation loss of the tug of war is constant: a flat Hessian is no strict minimum
    flat = PromptProblem(_tug_of_war().keys, _tug_of_war().scores, "correlation")
    assert finite_minimiser(flat, [0.3, 0.0]) is None
    problem = _tug_of_war()
    assert finite_minimiser(problem, [2 * MINIMISER_MAX_NORM, 0.0]) is None


def test_a_flow_that_stops_at_a_finite_minimiser_is_decided_not_excused():
    """theorems.maxmargin.common.follow: the engine leaves this run undecided (it reports a
    gradient-flow failure), the claim helper decides it as bounded, and ``conclude`` fails
    the example with the minimiser in its message (a counterexample to ‖p(t)‖ → ∞)."""
    from models.numerics import failures
    from theorems.maxmargin.common import conclude, follow

    problem = _tug_of_war()
    with failures.watch() as seen:
        lim = follow(problem, [2.0, 1.0])
    assert lim.kind == "bounded" and not seen.failures  # tolerated, then decided
    assert [f.key for f in seen.tolerated] == ["gradient flow: undecided"]
    with pytest.raises(AssertionError, match="strict local minimiser"):
        conclude(problem, [2.0, 1.0])


def test_outcome_seconds_time_the_whole_decision(monkeypatch):
    """Outcome.seconds (what `python -m theorems check` prints) covers the SVM solves and the
    final certificate, not only the tracing: a slow oracle shows up in it."""
    import models.oracles.svm as svm_module

    problem = figure2()
    fast = converge(problem)
    right = svm_module.att_svm

    def slow_oracle(*args, **kwargs):
        import time

        time.sleep(0.05)
        return right(*args, **kwargs)

    monkeypatch.setattr(svm_module, "att_svm", slow_oracle)
    slow = converge(problem)
    assert slow.converged and fast.converged
    assert fast.seconds >= fast.trajectory.seconds
    assert slow.seconds >= 0.05  # at least one solve, inside the timed decision


def _pinned_geq():
    """TF-GEQ-GLOBAL's pinned instance: G-EQ with exact ties (v = e_1, scores 1 and 0.5)."""
    from strategies.instances import CrossInstance
    from theorems.framework import REPO_ROOT

    path = REPO_ROOT / "theorems" / "tfsvm" / "pinned" / "TF-GEQ-GLOBAL.json"
    inst = CrossInstance.from_json(json.loads(path.read_text()))
    return inst, inst.W0.reshape(-1)  # row-major vec(W), the prompt engine's p


def test_a_flow_whose_selection_ties_converges_to_the_tie_sharing_svm():
    """Tokens tied exactly in score with the selected one exert no force on it: the flow is
    certified to the SVM without their rows, in which a tied token stays at margin < 1, so
    ATT-SVM(selected), which has those rows, is another direction."""
    inst, W0 = _pinned_geq()
    problem = inst.problem.prompt
    out = converge(problem, W0)
    assert out.converged and out.tied is not None and out.tie_sharing
    i, t = np.nonzero(out.tied)
    margins = (problem.keys.numpy()[i, out.selected[i]] - problem.keys.numpy()[i, t]) @ out.svm.x
    assert margins.min() < 0.9
    np.testing.assert_allclose(out.tied_margins()[2], margins, rtol=1e-12)
    full = att_svm(problem.keys, out.selected)
    assert full.ok and one_minus_cos(out.p, torch.as_tensor(full.x)) > 1e-2


def test_without_a_tie_the_limit_is_att_svm_of_the_selection():
    """The control: the same instance with every tied score moved apart by 1e-3 has no tied
    token, and the engine never reports a tie-sharing limit for it."""
    inst, W0 = _pinned_geq()
    g = inst.problem.prompt.scores.numpy()
    bump = torch.as_tensor(1e-3 * np.arange(g.size).reshape(g.shape) * (g < 1))
    problem = PromptProblem(inst.problem.prompt.keys, inst.problem.prompt.scores + bump, "logistic")
    out = converge(problem, W0)
    assert out.tied is None and not out.tie_sharing


def test_a_twin_group_shares_with_the_tokens_tied_to_its_mean_score():
    """The selected token and its twins (the same key) act as one token of their mean score:
    a token tied with the mean shares their mass (its row is freed), one tied with the
    selected token's own score does not. Means compared in exact rationals."""
    from models.flows.dynamics import sharing_tokens

    keys = np.array([[[1.0], [-1.0], [-1.0], [2.0]]])
    scores = np.array([[-2.0, -2.0, 1.0, -0.5]])  # group {1, 2}: mean −0.5
    assert sharing_tokens(keys, scores, np.array([1])).tolist() == [[False, False, True, True]]
    # Without twins it is the plain score tie of models.oracles.svm.tied_tokens.
    lone = np.array([[[1.0], [-1.0], [3.0], [2.0]]])
    assert sharing_tokens(lone, scores, np.array([1])).tolist() == [[True, False, False, False]]
    # 0.1 and 0.2 have no float mean equal to 0.15 in exact arithmetic: no tie.
    near = np.array([[0.0, 0.1, 0.2, 0.15]])
    assert sharing_tokens(keys, near, np.array([1])).tolist() == [[False, False, True, False]]


def test_a_twin_group_converges_against_a_token_tied_with_its_own_member():
    """Keys 1, −1, −1 (d = 1), scores −2, −2, 1: the twins {1, 2} (mean −0.5) beat token 0
    (−2), so p → −∞; token 1's own score ties token 0's, which the old tie test took for
    sharing, freeing every row (SVM solution 0, undecided). The ladder's small-rung case."""
    problem = PromptProblem(
        torch.tensor([[[1.0], [-1.0], [-1.0]]], dtype=torch.float64),
        torch.tensor([[-2.0, -2.0, 1.0]], dtype=torch.float64),
        "logistic",
    )
    out = converge(problem)
    assert out.converged, out.reason
    assert out.tied.tolist() == [[False, False, True]]
    np.testing.assert_allclose(out.svm.x, [-0.5])
