"""Unit tests of models/problems/nonlinear_head.py: the nonlinear-head model against a loop formula
and the official notebook's way of writing it, the exact gradient direction against autograd and
against 100-digit finite differences at saturation, the official data and W(0), the rejection
rules, and W_fin / W_dir / W^SVMeq / the single-token SVM on a case solved by hand."""

from __future__ import annotations

import itertools
import math

import cvxpy as cp
import mpmath as mp
import numpy as np
import pytest
import torch

from models.oracles.svm import solve_margin_qp
from models.problems.cross import CrossProblem, correlation
from models.problems.nonlinear_head import (
    AMBIGUOUS,
    FINITE,
    NonlinearHeadProblem,
    cross_keys,
    dir_system,
    fin_system,
    inactive_inputs,
    least_norm_fin,
    ngd_runs,
    official_init,
    official_rejection,
    official_relu_problem,
    selected_sets,
    single_token_svm,
    svmeq,
)

DTYPE = torch.float64


def _random_problem(seed: int, n=3, T=4, d=4, head="relu", lam=0.3) -> NonlinearHeadProblem:
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, T, d, generator=g, dtype=DTYPE)
    Z = torch.randn(n, d, generator=g, dtype=DTYPE)
    y = torch.where(torch.rand(n, generator=g, dtype=DTYPE) < 0.5, -1.0, 1.0)
    V = (
        torch.randn(d, d, generator=g, dtype=DTYPE)
        if head == "relu"
        else torch.randn(d, generator=g, dtype=DTYPE)
    )
    return NonlinearHeadProblem(X=X, Z=Z, y=y, V=V, head=head, lam=lam)


def _loop_outputs(p: NonlinearHeadProblem, W: np.ndarray) -> np.ndarray:
    """f_i(W) written out with Python loops (the independent reference)."""
    X, Z, V = p.X.numpy(), p.Z.numpy(), p.V.numpy()
    out = []
    for i in range(p.n):
        a = [float(X[i, t] @ W @ Z[i]) for t in range(p.T)]
        top = max(a)
        e = [math.exp(x - top) for x in a]
        s = [x / sum(e) for x in e]
        u = sum(s[t] * X[i, t] for t in range(p.T))
        if p.head == "relu":
            out.append(sum(max(0.0, float(u @ V[:, j])) for j in range(p.d)))
        else:
            out.append(float(u @ V) - p.lam * float(u @ u))
    return np.array(out)


# ---- the model -----------------------------------------------------------------------------------


@pytest.mark.parametrize("head", ["relu", "lambda"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_outputs_and_loss_match_a_loop_formula(head, seed):
    p = _random_problem(seed, head=head)
    W = np.random.default_rng(seed).normal(size=(p.d, p.d))
    f = _loop_outputs(p, W)
    np.testing.assert_allclose(p.output(W).numpy(), f, rtol=1e-12, atol=1e-13)
    loss = np.mean([math.log1p(math.exp(-yi * fi)) for yi, fi in zip(p.y.tolist(), f, strict=True)])
    assert float(p.loss_value(W)) == pytest.approx(loss, rel=1e-12)


@pytest.mark.parametrize("head", ["relu", "lambda"])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_exact_gradient_matches_autograd_away_from_saturation(head, seed):
    p = _random_problem(seed, head=head)
    W = np.random.default_rng(10 + seed).normal(size=(p.d, p.d))
    M, G = p.gradient_log(W)
    np.testing.assert_allclose(math.exp(M) * G, p.gradient(W), rtol=1e-10, atol=1e-14)


def _mp_loss(p: NonlinearHeadProblem, W) -> mp.mpf:
    """L(W) at mpmath precision, the plain formula (softmax, mixture, ReLU head, logistic)."""
    X, Z, V, y = p.X.tolist(), p.Z.tolist(), p.V.tolist(), p.y.tolist()
    n, T, d = p.n, p.T, p.d
    total = mp.mpf(0)
    for i in range(n):
        a = [
            sum(X[i][t][r] * W[r][c] * Z[i][c] for r in range(d) for c in range(d))
            for t in range(T)
        ]
        top = max(a)
        e = [mp.exp(x - top) for x in a]
        s = [x / sum(e) for x in e]
        u = [sum(s[t] * X[i][t][r] for t in range(T)) for r in range(d)]
        f = sum(max(mp.mpf(0), sum(u[r] * V[r][j] for r in range(d))) for j in range(d))
        total += mp.log(1 + mp.exp(-y[i] * f))
    return total / n


def test_exact_direction_at_saturation_matches_100_digit_differences():
    """Every input saturated (second probability ≤ 1e-22): the exact direction agrees with central
    differences of the loss at 100 digits; autograd's (the notebook's) does not."""
    p = official_relu_problem(3, 4, 3, 18)  # every head active at this W (checked)
    W = np.random.default_rng(3).normal(size=(3, 3))
    W *= 150.0 / np.linalg.norm(W)
    assert not inactive_inputs(p, W).any()
    s = p.softmax(W).numpy()
    assert 1e-300 < np.sort(s, axis=1)[:, -2].max() < 1e-16  # saturated, no underflow
    mp.mp.dps = 100
    Wm = [[mp.mpf(float(x)) for x in row] for row in W]
    h = mp.mpf("1e-40")
    ref = np.zeros((3, 3))
    for r, c in itertools.product(range(3), range(3)):
        up = [row[:] for row in Wm]
        dn = [row[:] for row in Wm]
        up[r][c] += h
        dn[r][c] -= h
        ref[r, c] = float((_mp_loss(p, up) - _mp_loss(p, dn)) / (2 * h) * mp.mpf(10) ** 20)
    M, G = p.gradient_log(W)
    assert M < math.log(1e-16)
    assert 1.0 - correlation(G, ref) < 1e-12
    assert 1.0 - correlation(p.gradient(W), ref) > 1e-6


# ---- the official data, W(0) and the official loop -----------------------------------------------


def test_official_problem_does_not_depend_on_the_default_dtype():
    """The notebook draws in float32 (torch's default); the suite runs with float64 default."""
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        a = official_relu_problem(3, 4, 4, 5)
        torch.set_default_dtype(torch.float64)
        b = official_relu_problem(3, 4, 4, 5)
    finally:
        torch.set_default_dtype(before)
    for name in ("X", "Z", "y", "V"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.X.dtype == DTYPE
    np.testing.assert_allclose(torch.linalg.vector_norm(a.X, dim=-1), 1.0, atol=1e-6)
    assert float(torch.linalg.matrix_norm(a.V)) == pytest.approx(1.0, abs=1e-6)


def test_official_problem_skips_seeds_without_a_negative_label():
    found = {s: official_relu_problem(3, 4, 4, s) for s in range(1, 40)}
    skipped = [s for s, p in found.items() if p is None]
    assert skipped, "some seed among 1–39 draws three positive labels (probability 1/8 each)"
    assert all(bool((p.y == -1).any()) for p in found.values() if p is not None)


def test_official_init_has_nn_linear_law_and_is_seeded():
    W = official_init(6, 11)
    assert W.shape == (6, 6) and np.abs(W).max() <= 1 / math.sqrt(6)
    np.testing.assert_array_equal(W, official_init(6, 11))
    assert not np.array_equal(W, official_init(6, 12))


def test_naive_ngd_is_the_notebook_loop():
    """``exact=False`` reproduces the notebook's loop written as it writes it (nn.Linear W with
    weight Wᵀ, value layer with weight Vᵀ, ReLU, head of ones, SGD on grad/‖grad‖)."""
    p = official_relu_problem(3, 4, 4, 6)
    W0 = official_init(4, 99)
    n, d = 3, 4
    lin = torch.nn.Linear(d, d, bias=False).double()
    lin.weight.data = torch.tensor(W0.T.copy())
    val = torch.nn.Linear(d, d, bias=False).double()
    val.weight.data = p.V.T.clone()
    opt = torch.optim.SGD([lin.weight], lr=0.1)
    for _ in range(200):
        opt.zero_grad()
        attn = torch.softmax(p.Z.reshape(n, 1, d) @ lin(p.X).transpose(-2, -1), dim=-1)
        out = torch.relu(attn @ val(p.X)) @ torch.ones(d, dtype=DTYPE)
        torch.log(1 + torch.exp(-p.y * out.view(-1))).mean().backward()
        lin.weight.grad /= lin.weight.grad.norm()
        opt.step()
    run = ngd_runs([p], W0[None], steps=200, exact=False)
    np.testing.assert_allclose(run.Ws[200][0], lin.weight.detach().numpy().T, atol=1e-12)


def test_batched_runs_are_independent_and_exact_equals_naive_early():
    probs = [official_relu_problem(3, 4, 4, s) for s in (2, 4, 5)]
    W0s = np.stack([official_init(4, s) for s in (2, 4, 5)])
    together = ngd_runs(probs, W0s, steps=50, record=(10,))
    for b, p in enumerate(probs):
        alone = ngd_runs([p], W0s[b : b + 1], steps=50, record=(10,))
        np.testing.assert_allclose(together.Ws[50][b], alone.Ws[50][0], rtol=0, atol=1e-13)
    naive = ngd_runs(probs, W0s, steps=10, exact=False)
    np.testing.assert_allclose(naive.Ws[10], together.Ws[10], atol=1e-12)


def test_ngd_flags_a_stationary_run():
    """Every head inactive (positive tokens, V = −I: u_iᵀV < 0): ∇L ≡ 0, no NGD direction."""
    X = torch.rand(2, 3, 3, generator=torch.Generator().manual_seed(0), dtype=DTYPE) + 0.1
    p = NonlinearHeadProblem(X=X, Z=torch.ones(2, 3), y=torch.tensor([1.0, -1.0]), V=-torch.eye(3))
    assert inactive_inputs(p, np.zeros((3, 3))).all()
    M, G = p.gradient_log(np.zeros((3, 3)))
    assert M == -math.inf and not G.any()
    run = ngd_runs([p], np.zeros((1, 3, 3)), steps=5)
    assert run.broken[0] and run.why[0] == "zero gradient at step 1"


def test_bad_input_names_the_field():
    p = _random_problem(0)
    with pytest.raises(ValueError, match="V"):
        NonlinearHeadProblem(X=p.X, Z=p.Z, y=p.y, V=torch.zeros(4))
    with pytest.raises(ValueError, match="y"):
        NonlinearHeadProblem(X=p.X, Z=p.Z, y=torch.zeros(3), V=p.V)
    with pytest.raises(ValueError, match="head"):
        NonlinearHeadProblem(X=p.X, Z=p.Z, y=p.y, V=p.V, head="tanh")
    with pytest.raises(ValueError, match="W"):
        p.output(np.zeros((3, 3)))


# ---- rules, keys, W_fin, W_dir, SVMeq ----------------------------------------------------------


def test_official_rejection_rules():
    assert official_rejection([[0.5, 0.5 - 1e-7, 1e-7]]) is None
    assert official_rejection([[0.5, 0.5 - 5e-4, 5e-4]]) == AMBIGUOUS
    assert (
        official_rejection([[0.5, 0.5 - 1e-3, 1e-3]]) == AMBIGUOUS
    )  # (1e-6, 1e-3] is closed at 1e-3
    assert official_rejection([[0.5, 0.5 - 1e-6, 1e-6]]) is None
    assert official_rejection([[0.3, 0.3, 0.4]]) == FINITE
    np.testing.assert_array_equal(selected_sets([[0.5, 1e-3, 9.9e-4]]), [[True, True, False]])


def test_cross_keys_are_the_cross_models_keys():
    p = _random_problem(4)
    keys = cross_keys(p.X.numpy(), p.Z.numpy())
    ref = CrossProblem(p.X, p.Z, p.y, torch.ones(p.d)).prompt.keys.numpy()
    np.testing.assert_array_equal(keys, ref)
    W = np.random.default_rng(0).normal(size=(p.d, p.d))
    np.testing.assert_allclose(keys @ W.reshape(-1), p.logits(W).numpy(), rtol=1e-12)


def test_w_fin_and_w_dir_meet_their_constraints_and_are_least_norm():
    p = _random_problem(5, n=3, T=4, d=4)
    W = np.random.default_rng(5).normal(size=(4, 4))
    logits = p.logits(W).numpy()
    sel = np.array([[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 0]], dtype=bool)
    keys = p.keys
    A, b = fin_system(keys, logits, sel)
    assert A.shape == (1 + 0 + 3, 16)
    w_fin, res = least_norm_fin(A, b)
    assert res < 1e-12
    np.testing.assert_allclose(A @ w_fin, b, atol=1e-12)
    # least norm: w_fin lies in the row space of A (orthogonal to its null space)
    _, sv, Vt = np.linalg.svd(A)
    null = Vt[int(np.sum(sv > 1e-10)) :]
    assert np.abs(null @ w_fin).max() < 1e-12
    # W itself satisfies the same equalities, so W_fin is W's projection on the row space
    np.testing.assert_allclose(A @ W.reshape(-1), b, atol=1e-12)
    A_dir, b_dir = dir_system(keys, sel)
    sol = solve_margin_qp(A_dir, b_dir)
    assert sol.ok
    w_dir = sol.x
    a_dir = keys @ w_dir
    for i in range(3):
        on, off = a_dir[i][sel[i]], a_dir[i][~sel[i]]
        assert np.ptp(on) < 1e-9
        assert off.size == 0 or on.min() - off.max() >= 1 - 1e-9
    # the same problem in cvxpy with explicit equalities (Clarabel): the same optimum
    w = cp.Variable(16)
    cons = []
    for i in range(3):
        on = np.nonzero(sel[i])[0]
        cons += [(keys[i, on[0]] - keys[i, t]) @ w == 0 for t in on[1:]]
        cons += [(keys[i, t1] - keys[i, t2]) @ w >= 1 for t1 in on for t2 in np.nonzero(~sel[i])[0]]
    cp.Problem(cp.Minimize(cp.sum_squares(w)), cons).solve(solver=cp.CLARABEL)
    np.testing.assert_allclose(w_dir, w.value, atol=1e-6)


def test_w_dir_does_not_depend_on_where_the_selected_tokens_sit():
    """W_dir's polyhedron is a property of the SET 𝒪_i, not of the token order: with a
    non-selected token before a selected one, W_dir still gives the selected tokens equal
    logits that beat every non-selected one by ≥ 1 (its definition), and reversing each
    input's token order (keys and 𝒪 together) leaves the least-norm point unchanged."""
    p = _random_problem(6, n=3, T=4, d=4)
    keys = p.keys
    sel = np.array([[0, 1, 1, 0], [0, 0, 1, 0], [0, 1, 0, 1]], dtype=bool)
    A_dir, b_dir = dir_system(keys, sel)
    sol = solve_margin_qp(A_dir, b_dir)
    assert sol.ok, sol.reason
    a_dir = keys @ sol.x
    for i in range(3):
        on, off = a_dir[i][sel[i]], a_dir[i][~sel[i]]
        assert np.ptp(on) < 1e-9
        assert on.min() - off.max() >= 1 - 1e-9
    A_rev, b_rev = dir_system(keys[:, ::-1], sel[:, ::-1])
    rev = solve_margin_qp(A_rev, b_rev)
    assert rev.ok, rev.reason
    np.testing.assert_allclose(rev.x, sol.x, atol=1e-8)


def _hand_case(R: float, c: float, E: np.ndarray) -> tuple[NonlinearHeadProblem, np.ndarray]:
    """n = 1, T = 3, d = 2, z = e₁, x₀ = (1, 1), x₁ = (1, −1), x₂ = (−1, 0): only W's first
    column w acts (a_t = x_tᵀw). With 𝒪 = {0, 1}: W_dir's w minimises ‖w‖ subject to
    2w₂ = 0, 2w₁ ± w₂ ≥ 1, so W_dir = [[1/2, 0], [0, 0]]; W_fin's w solves −2w₂ = c at least
    norm, W_fin = [[0, 0], [−c/2, 0]]. The single-token SVM at α = 1: −2w₂ ≥ 1, 2w₁ − w₂ ≥ 1,
    both active at w = (1/4, −1/2)."""
    X = torch.tensor([[[1.0, 1.0], [1.0, -1.0], [-1.0, 0.0]]])
    p = NonlinearHeadProblem(
        X=X, Z=torch.tensor([[1.0, 0.0]]), y=torch.tensor([1.0]), V=torch.eye(2)
    )
    W = np.array([[R / 2, 0.0], [-c / 2, 0.0]]) + E
    return p, W


def test_svmeq_recovers_a_hand_solved_case():
    E = np.array([[0.0, 0.3], [0.0, -0.2]])  # the second column: invisible to the logits
    p, W = _hand_case(R=40.0, c=0.7, E=E)
    s = p.softmax(W).numpy()
    assert official_rejection(s) is None
    eq = svmeq(p, W, W)
    assert eq.ok
    np.testing.assert_array_equal(eq.selected, [[True, True, False]])
    np.testing.assert_allclose(eq.W_dir, [[0.5, 0.0], [0.0, 0.0]], atol=1e-9)
    np.testing.assert_allclose(eq.W_fin, [[0.0, 0.0], [-0.35, 0.0]], atol=1e-12)
    assert eq.R == pytest.approx(40.0, rel=1e-9)
    np.testing.assert_allclose(eq.W, W - E, atol=1e-8)
    single = single_token_svm(p, s.argmax(1))
    assert s.argmax(1).tolist() == [1]
    np.testing.assert_allclose(single.x.reshape(2, 2), [[0.25, 0.0], [-0.5, 0.0]], atol=1e-9)
    # without the invisible part W is exactly W^SVMeq; the single-token SVM is far from it
    p, W = _hand_case(R=40.0, c=0.7, E=np.zeros((2, 2)))
    eq = svmeq(p, W, W)
    assert 1.0 - correlation(W, eq.W) < 1e-14
    assert 1.0 - correlation(W, single.x.reshape(2, 2)) > 0.1


def test_svmeq_reports_infeasible_w_dir():
    """z = e₁ for both inputs, so both act through W's first column w. Input 1 selects
    x₀ = (1, 0), x₁ = (0, 1) (equal logits: w₁ = w₂), input 2 selects x₀ = (1, 0),
    x₁ = (0, 3/2) (w₁ = 3w₂/2): only w = 0 is left, and x₂ = 0 needs margin w₁ ≥ 1."""
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 1.5], [0.0, 0.0]]])
    Z = torch.tensor([[1.0, 0.0], [1.0, 0.0]])
    p = NonlinearHeadProblem(X=X, Z=Z, y=torch.tensor([1.0, -1.0]), V=torch.eye(2))
    W = np.array([[18.0, 0.0], [14.0, 0.0]])
    assert official_rejection(p.softmax(W).numpy()) is None
    eq = svmeq(p, W, W)
    np.testing.assert_array_equal(eq.selected, [[True, True, False]] * 2)
    assert eq.status == "infeasible" and eq.W is None and not eq.ok


def test_a_non_finite_lambda_is_refused_by_name():
    p = _random_problem(0, head="lambda")
    for lam in (math.nan, math.inf):
        with pytest.raises(ValueError, match=r"^lam: expected a finite number, got (nan|inf)"):
            NonlinearHeadProblem(X=p.X, Z=p.Z, y=p.y, V=p.V, head="lambda", lam=lam)


def test_svmeq_at_uniform_attention_has_w_fin_but_no_direction():
    """At W = 0 every token holds 1/T of the attention, so every token is selected: W_dir has
    no margin to meet and is 0, which the notebook calls "no feasible svm solutions"; W_fin
    (= 0, the logits being equal) is still given."""
    p = _random_problem(1)
    zero = np.zeros((p.d, p.d))
    eq = svmeq(p, zero, zero)
    assert bool(eq.selected.all())
    assert eq.status == "infeasible" and eq.reason == "W_dir = 0" and not eq.ok
    np.testing.assert_array_equal(eq.W_fin, zero)
    np.testing.assert_array_equal(eq.W_dir, zero)
    assert eq.W is None and math.isnan(eq.R)
