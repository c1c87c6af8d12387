"""Unit tests of the helpers that the 2306.13596 claims build on (theorems/maxmargin/):
the term-by-term directional derivative, ``settle``'s persistence check, the independent SVM
and hull oracles, and the instance transformations (``random_init``, ``heterogeneous``)."""

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.flows.dynamics import converge
from models.oracles.selection import local_optimality
from models.oracles.svm import att_constraints, att_svm
from models.problems import heads
from models.problems.attention import PromptProblem
from strategies import equal_nonopt_instances
from strategies.combinators import heterogeneous, random_init
from strategies.maxmargin_dynamics import theorem_g_counterexample
from theorems.maxmargin import claims_regpath
from theorems.maxmargin.claims_svm import in_convex_hull
from theorems.maxmargin.common import directional_derivative, settle
from theorems.maxmargin.common_svm import least_distance_nnls

DTYPE = torch.float64


def random_problem(seed: int, n=2, T=4, dim=3, loss="logistic") -> PromptProblem:
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(n, T, dim, generator=gen, dtype=DTYPE)
    scores = torch.rand(n, T, generator=gen, dtype=DTYPE) * 2 - 1
    return PromptProblem(keys, scores, loss)


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
@pytest.mark.parametrize("seed", range(5))
def test_directional_derivative_matches_plain_gradient(loss, seed):
    """At moderate ‖p‖ the log-space sum equals ∇L(p)·q, for any reference token."""
    problem = random_problem(seed, loss=loss)
    gen = torch.Generator().manual_seed(100 + seed)
    p, q = torch.randn(3, generator=gen, dtype=DTYPE), torch.randn(3, generator=gen, dtype=DTYPE)
    plain = float(problem.gradient(p) @ q)
    for center in (None, np.zeros(2, dtype=int), np.array([3, 1])):
        log_value, sign, log_top = directional_derivative(problem, p.numpy(), q.numpy(), center)
        assert sign * math.exp(log_value) == pytest.approx(plain, rel=1e-9, abs=1e-15)
        assert log_value <= log_top + math.log(problem.n * problem.T) + 1e-12


def test_directional_derivative_keeps_sign_where_the_gradient_underflows():
    """Two tokens: ⟨∇L, q⟩ = ℓ'(m)·s0·s1·(γ0 − γ1)·(k0 − k1)ᵀq exactly; at a logit gap of 5000
    the plain gradient is 0 while the log-space value keeps its sign and size."""
    keys = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]], dtype=DTYPE)
    scores = torch.tensor([[1.0, 0.5]], dtype=DTYPE)
    problem = PromptProblem(keys, scores, "logistic")
    p, q = np.array([5000.0, 3.0]), np.array([1.0, 7.0])
    assert float(problem.gradient(torch.as_tensor(p)) @ torch.as_tensor(q)) == 0.0
    log_value, sign, _ = directional_derivative(problem, p, q)
    # ℓ'(m) = −σ(−m) with m ≈ 1; s0 ≈ 1, s1 ≈ e^{−5000}; (γ0 − γ1)(k0 − k1)·q = 0.5
    expected = math.log(1 / (1 + math.e)) - 5000.0 + math.log(0.5)
    assert sign == -1.0
    assert log_value == pytest.approx(expected, abs=1e-9)


# A single input (T = 6, 2-D keys) on which gradient flow from a cone around p^mm(α = 4)
# (‖p(0)‖ = 50, cos 0.992) passes within 1e-6 of the direction of p^mm(2), a selection that is
# NOT locally optimal (its support token 1 scores higher), at ‖p‖ ≈ 46, and then leaves for the
# locally-optimal α = 1. ``converge`` stops at the pass; ``settle`` must not.
TRANSIENT_KEYS = [
    [-1.6815866004815596, -2.7865089772659193],
    [-1.9313294510712835, -1.8929730136192573],
    [-1.699022943535619, -1.365523343965147],
    [-0.8365098432257144, -2.8053140387293],
    [0.14678040798349792, -1.1246483597298236],
    [-0.234832721501449, -1.9393314724022748],
]
TRANSIENT_SCORES = [
    -0.7055195535255621,
    0.15097596568579175,
    -0.25335410679032955,
    -0.05238356476062456,
    -0.7406242685860331,
    -0.9728434642958246,
]
TRANSIENT_P0 = [15.561811652963698, 47.9241457305973]


def test_settle_discards_a_transient_pass_near_a_non_locally_optimal_direction():
    problem = PromptProblem(
        torch.tensor([TRANSIENT_KEYS], dtype=DTYPE),
        torch.tensor([TRANSIENT_SCORES], dtype=DTYPE),
        "logistic",
    )
    p0 = torch.tensor(TRANSIENT_P0, dtype=DTYPE)
    out, transient = settle(problem, p0)
    assert out.converged
    verdict = local_optimality(problem.keys, problem.scores, out.selected)
    assert verdict.locally_optimal, verdict.reason
    assert out.selected.tolist() == [1]
    first = converge(problem, p0)
    if first.selected.tolist() == [2]:  # the engine stopped at the pass: settle saw it
        assert transient >= 1


def test_theorem_g_counterexample_is_valid_and_converges_elsewhere():
    """The pinned Theorem G counterexample meets every hypothesis and GD settles on a
    locally-optimal α ≠ opt."""
    inst = theorem_g_counterexample()
    scores = inst.scores.numpy()
    assert (scores[:, 0] > scores[:, 1]).all()  # opt = token 0; T = 2: equal non-opt trivially
    assert att_svm(inst.keys, inst.alpha).ok
    out, _ = settle(inst.problem, inst.p0)
    assert out.converged and out.selected.tolist() == [0, 1]
    verdict = local_optimality(inst.keys, scores, out.selected)
    assert verdict.locally_optimal and verdict.vacuous_inputs == (1,)


@pytest.mark.parametrize("seed", range(8))
def test_least_distance_nnls_matches_the_oracle(seed):
    gen = torch.Generator().manual_seed(seed)
    keys = torch.randn(2, 3, 5, generator=gen, dtype=DTYPE)
    alpha = np.array([seed % 3, (seed + 1) % 3])
    A, b, _ = att_constraints(keys, alpha)
    sol = att_svm(keys, alpha)
    assert sol.ok
    assert np.allclose(least_distance_nnls(A, b), sol.x, atol=1e-9)


def test_convex_hull_membership():
    square = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    assert in_convex_hull(np.array([0.5, 0.5]), square)
    assert in_convex_hull(np.array([1.0, 0.5]), square)  # on the boundary: inside
    assert not in_convex_hull(np.array([1.5, 0.5]), square)


@given(inst=equal_nonopt_instances(), seed=st.integers(0, 2**32 - 1))
@settings(max_examples=20, deadline=None)
def test_random_init_uses_key_coordinates_only(inst, seed):
    p0 = random_init(inst, seed, -1.0, 1.0)
    assert float(p0[-1]) == 0.0  # the decoupled score coordinate
    assert 0.1 - 1e-12 <= float(torch.linalg.vector_norm(p0)) <= 10 + 1e-12


@given(inst=heterogeneous(equal_nonopt_instances()))
@settings(max_examples=15, deadline=None)
def test_heterogeneous_keeps_the_hypotheses_of_theorem_g(inst):
    scores = inst.scores.numpy()
    opt = inst.alpha
    for i in range(inst.n):
        others = np.delete(scores[i], opt[i])
        assert (others == others[0]).all() and scores[i, opt[i]] > others[0]
    assert att_svm(inst.keys, opt).ok
    assert inst.p0 is not None and 1e-2 - 1e-12 <= float(inst.p0.norm()) <= 1e2 + 1e-9


def _vertex_condition_holds(problem, gen, draws=400) -> bool:
    """Y_i ψ(X_iᵀs) < Y_i ψ(x_i,opt) for random interior and edge points s of the simplex."""
    best = problem.token_scores().max(-1).values
    for _ in range(draws):
        s = torch.rand(problem.n, problem.T, generator=gen, dtype=DTYPE) ** 3
        if problem.T > 2:  # faces as well as interiors (never a vertex: two entries stay > 0)
            s[:, torch.randint(problem.T, (1,), generator=gen)] = 0.0
        s = s / s.sum(-1, keepdim=True).clamp_min(1e-300)
        u = torch.einsum("it,itd->id", s, problem.X)
        if torch.any(problem.y * problem.psi_of(u) >= best - 1e-12):
            return False
    return True


@pytest.mark.parametrize(
    "strategy,psi",
    [("convex_head_instances", "squared_norm"), ("mixed_label_head_instances", "saddle_square")],
)
@settings(max_examples=30, deadline=None, derandomize=True)
@given(data=st.data())
def test_head_instances_meet_theorem_nl_premise(strategy, psi, data):
    """What the head strategies promise: α is the unique argmax_t Y_i ψ(x_it), Y ψ along each
    simplex peaks only at that vertex, ATT-SVM(α) is feasible, and (for the mixed strategy)
    both labels occur."""
    inst = data.draw(getattr(claims_regpath, strategy)())
    problem = heads.NonlinearHeadProblem(inst.X, inst.y, inst.W, psi=getattr(heads, psi))
    scores = problem.token_scores()
    top2 = scores.topk(2, dim=-1).values
    assert torch.all(top2[:, 0] > top2[:, 1])
    assert np.array_equal(problem.psi_optimal_tokens(), inst.alpha)
    assert _vertex_condition_holds(problem, torch.Generator().manual_seed(inst.seed % 2**31))
    assert att_svm(problem.keys, inst.alpha).status == "optimal"
    if strategy == "mixed_label_head_instances":
        assert set(inst.y.tolist()) == {1.0, -1.0}
