"""Unit tests of models/problems/embedding.py (spec/embeddings.md §1.1, §2, §3.1–§3.3, §4.2, §6)."""

from __future__ import annotations

import math

import mpmath
import pytest
import torch

from models.problems.attention import PromptProblem
from models.problems.embedding import (
    PAD_ID,
    UNK_ID,
    EmbeddingProblem,
    OneLayerModel,
    TwoLayerModel,
    average_frequency,
    average_signed_frequency,
    build_vocab,
    cls_loss_floor,
    completely_negative,
    completely_positive,
    descent_direction,
    descent_slope,
    directional_derivative,
    encode,
    load_imdb,
    load_yelp_polarity,
    max_margin_feasible_point,
    one_step,
    posterior_difference,
    relevant_token_positions,
    selected_tokens,
    token_counts,
    tokenize,
    train_full_batch,
    uniform_token_problem,
)

F64 = torch.float64


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """These tensors are tiny: intra-op threads only add overhead (50x on a loaded 2-core box)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


# ---- instance builders (spec §6) -------------------------------------------------------------


def g1(gen, n_pairs=12, T=5, n_pos=2, n_neg=2, n_irr=8):
    """G1 (Assumption 1): paired sequences sharing T−1 irrelevant tokens; α = 0 off the relevant."""
    seqs, ys = [], []
    for _ in range(n_pairs):
        irr = n_pos + n_neg + torch.randint(0, n_irr, (T - 1,), generator=gen)
        pos_tok = torch.randint(0, n_pos, (1,), generator=gen)
        neg_tok = n_pos + torch.randint(0, n_neg, (1,), generator=gen)
        for tok, label in ((pos_tok, 1.0), (neg_tok, -1.0)):
            seqs.append(torch.cat([tok, irr])[torch.randperm(T, generator=gen)])
            ys.append(label)
    return torch.stack(seqs), torch.tensor(ys, dtype=F64), n_pos + n_neg + n_irr


def g2(gen, n=60, T=6, S=12):
    """G2 (general): y uniform ±1, tokens of X_j i.i.d. from softmax(y_j b), b ~ N(0, 1)."""
    y = torch.where(torch.rand(n, generator=gen) < 0.5, -1.0, 1.0).to(F64)
    b = torch.randn(S, generator=gen, dtype=F64)
    probs = torch.softmax(y[:, None] * b[None, :], dim=-1)
    return torch.multinomial(probs, T, replacement=True, generator=gen), y, S


def init(gen, S, d, v_norm=1.0):
    """E⁰ ~ N(0, I/d) and v with ‖v‖ = v_norm (spec §6)."""
    E0 = torch.randn(S, d, generator=gen, dtype=F64) / math.sqrt(d)
    v = torch.randn(d, generator=gen, dtype=F64)
    return E0, v * (v_norm / v.norm())


def random_problem(seed, d=8, v_norm=1.0, **kw):
    gen = torch.Generator().manual_seed(seed)
    seq, y, S = g2(gen, **kw)
    E0, v = init(gen, S, d, v_norm)
    return EmbeddingProblem(seq, y, E0, v), gen


def g1_after_one_step(seed, d=24, eta0=50.0):
    """A G1 instance, its one-step E¹, and the selection; the precondition of §3.3 is asserted."""
    gen = torch.Generator().manual_seed(seed)
    seq, y, S = g1(gen)
    E0, v = init(gen, S, d)
    problem = EmbeddingProblem(seq, y, E0, v)
    E1 = one_step(problem, eta0).E1
    sel = selected_tokens(E1, seq, y, v)
    assert sel.all_unique
    return problem.with_embeddings(E1), sel, gen


def random_direction(gen, d, norm):
    p = torch.randn(d, generator=gen, dtype=F64)
    return p * (norm / p.norm())


def autograd_E_p(problem, p):
    E = problem.E.clone().requires_grad_(True)
    p = p.clone().requires_grad_(True)
    return torch.autograd.grad(problem.loss_value(E, p), (E, p))


def central_differences(fn, x, h=1e-6):
    """∂fn/∂x entrywise by central differences (fn returns a float64 scalar tensor)."""
    grad = torch.zeros_like(x)
    flat, out = x.reshape(-1), grad.reshape(-1)
    for k in range(flat.numel()):
        plus, minus = flat.clone(), flat.clone()
        plus[k] += h
        minus[k] -= h
        out[k] = (fn(plus.reshape(x.shape)) - fn(minus.reshape(x.shape))) / (2 * h)
    return grad


# ---- the problem and its validation ----------------------------------------------------------


def test_problem_sizes_and_token_scores():
    problem, _ = random_problem(0, d=5, n=7, T=4, S=9)
    assert (problem.n, problem.T, problem.vocab_size, problem.dim) == (7, 4, 9, 5)
    torch.testing.assert_close(problem.token_scores(), problem.E @ problem.v)


@pytest.mark.parametrize(
    "change, field",
    [
        ({"sequences": [[0, 1], [2, 9]]}, "sequences"),
        ({"sequences": [[0.0, 1.0], [2.0, 0.0]]}, "sequences"),
        ({"sequences": [0, 1, 2]}, "sequences"),
        ({"y": [1.0, 0.0]}, "y"),
        ({"y": [1.0, -1.0, 1.0]}, "y"),
        ({"E": torch.full((3, 2), math.nan)}, "E"),
        ({"E": torch.ones(3)}, "E"),
        ({"v": torch.ones(3)}, "v"),
        ({"v": [math.inf, 0.0]}, "v"),
    ],
)
def test_problem_rejects_bad_input_naming_the_field(change, field):
    args = {"sequences": [[0, 1], [2, 0]], "y": [1.0, -1.0], "E": torch.ones(3, 2), "v": [1.0, 0]}
    args.update(change)
    with pytest.raises(ValueError, match=f"^{field}:"):
        EmbeddingProblem(**args)


def test_loss_and_forward_match_the_formula_of_section_1():
    """f(X) = Σ_i e^{pᵀE_{x_i}} E_{x_i}ᵀv / Σ_j e^{pᵀE_{x_j}}, L = mean log(1 + e^{−y f})."""
    problem, gen = random_problem(1, d=6, n=9, T=5, S=7)
    p = random_direction(gen, 6, 2.0)
    expected_f = []
    for row in problem.sequences:
        w = torch.tensor([math.exp(float(problem.E[s] @ p)) for s in row], dtype=F64)
        u = torch.tensor([float(problem.E[s] @ problem.v) for s in row], dtype=F64)
        expected_f.append(float((w * u).sum() / w.sum()))
    expected_f = torch.tensor(expected_f, dtype=F64)
    expected_loss = torch.log1p(torch.exp(-problem.y * expected_f)).mean()
    torch.testing.assert_close(problem.forward(p), expected_f, rtol=1e-13, atol=0)
    torch.testing.assert_close(problem.loss_value(problem.E, p), expected_loss, rtol=1e-13, atol=0)
    torch.testing.assert_close(problem.prompt_problem().loss_value(p), expected_loss)


# ---- gradients (spec §1.1) ----------------------------------------------------------------------


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_grad_E_matches_autograd_and_finite_differences(seed):
    problem, gen = random_problem(seed, d=5, n=12, T=4, S=6)
    for p in (torch.zeros(5, dtype=F64), random_direction(gen, 5, 3.0)):
        auto, _ = autograd_E_p(problem, p)
        torch.testing.assert_close(problem.grad_E(p), auto, rtol=1e-12, atol=1e-15)
    fd = central_differences(lambda E: problem.loss_value(E, p), problem.E)
    torch.testing.assert_close(problem.grad_E(p), fd, rtol=0, atol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_p_gradient_of_prompt_problem_matches_autograd_and_finite_differences(seed):
    """The `<cls>` gradient is the prompt problem's (one implementation,
    models/problems/attention.py)."""
    problem, gen = random_problem(seed, d=5, n=12, T=4, S=6)
    p = random_direction(gen, 5, 3.0)
    _, auto = autograd_E_p(problem, p)
    fd = central_differences(lambda q: problem.loss_value(problem.E, q), p)
    prompt = problem.prompt_problem()
    torch.testing.assert_close(prompt.gradient_scaled(p).value(), auto, rtol=1e-11, atol=1e-16)
    torch.testing.assert_close(prompt.gradient(p), auto, rtol=1e-11, atol=1e-16)
    torch.testing.assert_close(auto, fd, rtol=0, atol=1e-9)


def _mp_gradient(keys, scores, p):
    """∇_p L at 50 digits; γ_t − m as Σ_u s_u(γ_t − γ_u), as the naive form cancels at e^{-900}."""
    n, T, d = keys.shape
    P = [mpmath.mpf(float(x)) for x in p]
    total = [mpmath.mpf(0)] * d
    for i in range(n):
        K = [[mpmath.mpf(float(x)) for x in keys[i, t]] for t in range(T)]
        G = [mpmath.mpf(float(x)) for x in scores[i]]
        z = [mpmath.fsum(a * b for a, b in zip(K[t], P, strict=True)) for t in range(T)]
        e = [mpmath.exp(zt - max(z)) for zt in z]
        s = [x / mpmath.fsum(e) for x in e]
        m = mpmath.fsum(a * b for a, b in zip(s, G, strict=True))
        lp = -1 / (1 + mpmath.exp(m))
        for t in range(T):
            c = lp * s[t] * mpmath.fsum(s[u] * (G[t] - G[u]) for u in range(T)) / n
            total = [total[k] + c * K[t][k] for k in range(d)]
    return total


def test_log_space_p_gradient_matches_mpmath_where_float64_underflows():
    """At ‖p‖ = 1e3 the naive gradient is exactly 0; the log-space one keeps the direction."""
    gen = torch.Generator().manual_seed(7)
    seq = torch.tensor([[0, 2, 3], [1, 2, 3], [4, 0, 2], [4, 1, 2], [3, 3, 0], [3, 3, 1]])
    y = torch.tensor([1.0, -1, 1, -1, 1, -1], dtype=F64)
    E = torch.randn(5, 6, generator=gen, dtype=F64)
    v = torch.randn(6, generator=gen, dtype=F64)
    problem = EmbeddingProblem(seq, y, E, v / v.norm())
    p_ls = max_margin_feasible_point(E, torch.tensor([True, True, False, False, False]))
    p = p_ls / p_ls.norm() + 1e-3 * random_direction(gen, 6, 1.0)
    p = 1e3 * p / p.norm()
    prompt = problem.prompt_problem()
    _, auto = autograd_E_p(problem, p)
    assert torch.all(prompt.gradient(p) == 0) and torch.all(auto == 0)

    scaled = prompt.gradient_scaled(p)
    exact = _mp_gradient(prompt.keys, prompt.scores, p)
    norm = mpmath.sqrt(mpmath.fsum(x * x for x in exact))
    assert norm < mpmath.mpf("1e-300")
    got = scaled.direction()
    one_minus = (
        mpmath.fsum((exact[k] / norm - mpmath.mpf(float(got[k]))) ** 2 for k in range(6)) / 2
    )
    assert one_minus <= 1e-12
    assert abs(scaled.log_norm() - float(mpmath.log(norm))) <= 1e-10 * abs(float(mpmath.log(norm)))


# ---- definitions (spec §2) -------------------------------------------------------------------


HAND_SEQ = torch.tensor([[0, 1, 1], [2, 1, 0]])
HAND_Y = torch.tensor([1.0, -1.0], dtype=F64)


def test_average_signed_frequency_on_a_hand_example():
    """α_s = (1/n) Σ y_i n_s(X_i)/T and ᾱ_s = (1/n) Σ n_s(X_i)/T, counted by hand."""
    torch.testing.assert_close(
        token_counts(HAND_SEQ, 4), torch.tensor([[1.0, 2, 0, 0], [1, 1, 1, 0]], dtype=F64)
    )
    alpha = average_signed_frequency(HAND_SEQ, HAND_Y, 4)
    torch.testing.assert_close(alpha, torch.tensor([0.0, 1 / 6, -1 / 6, 0.0], dtype=F64))
    alpha_bar = average_frequency(HAND_SEQ, 4)
    torch.testing.assert_close(alpha_bar, torch.tensor([1 / 3, 1 / 2, 1 / 6, 0.0], dtype=F64))


def test_posterior_difference_and_complete_tokens_on_the_hand_example():
    delta, mask = posterior_difference(HAND_SEQ, HAND_Y, 4)
    assert mask.tolist() == [True, True, True, False]
    torch.testing.assert_close(delta[:3], torch.tensor([0.0, 1 / 3, -1.0], dtype=F64))
    assert math.isnan(delta[3])
    _, mask2 = posterior_difference(HAND_SEQ, HAND_Y, 4, min_count=2)
    assert mask2.tolist() == [True, True, False, False]
    assert completely_positive(HAND_SEQ, HAND_Y, 4).tolist() == [False] * 4
    assert completely_negative(HAND_SEQ, HAND_Y, 4).tolist() == [False, False, True, False]
    with pytest.raises(ValueError, match="min_count"):
        posterior_difference(HAND_SEQ, HAND_Y, 4, min_count=0)


@pytest.mark.parametrize("seed", range(5))
def test_posterior_difference_sign_equals_alpha_sign_for_equal_lengths(seed):
    gen = torch.Generator().manual_seed(seed)
    seq, y, S = g2(gen, n=40, T=7, S=15)
    delta, mask = posterior_difference(seq, y, S)
    alpha = average_signed_frequency(seq, y, S)
    assert torch.equal(torch.sign(delta[mask]), torch.sign(alpha[mask]))
    assert torch.all(alpha[~mask] == 0)


def test_g1_relevant_tokens_are_complete_and_irrelevant_have_zero_alpha():
    gen = torch.Generator().manual_seed(3)
    seq, y, S = g1(gen, n_pos=2, n_neg=2, n_irr=8)
    pos, neg = completely_positive(seq, y, S), completely_negative(seq, y, S)
    alpha = average_signed_frequency(seq, y, S)
    assert torch.all(alpha[pos] > 0) and torch.all(alpha[neg] < 0)
    assert torch.all(alpha[4:] == 0) and not torch.any(pos[4:] | neg[4:])


def test_frequency_functions_reject_bad_input():
    with pytest.raises(ValueError, match="^sequences:"):
        average_signed_frequency(torch.tensor([[0, 5]]), torch.tensor([1.0]), 4)
    with pytest.raises(ValueError, match="^y:"):
        average_signed_frequency(HAND_SEQ, torch.tensor([1.0, 2.0]), 4)


# ---- Lemma 4.1: one step (spec §3.1, R1–R3, N4) -------------------------------------------------


ONE_STEP_CASES = [
    (seed, d, eta0, v_norm)
    for seed, (d, eta0, v_norm) in enumerate(
        [
            (8, 0.1, 1.0),
            (16, 1.0, 1.0),
            (64, 10.0, 1.0),
            (32, 100.0, 1.0),
            (16, 5.0, 2.5),
            (8, 1.0, 0.3),
        ]
    )
]


@pytest.mark.parametrize("seed, d, eta0, v_norm", ONE_STEP_CASES)
def test_r1_update_is_exactly_rank_one_along_v_with_coefficient_beta(seed, d, eta0, v_norm):
    """R1: with p⁰ = 0, E¹ − E⁰ = η0 β vᵀ, β_s = (1/n) Σ_j h_j y_j n_s(X_j)/T."""
    problem, _ = random_problem(seed, d=d, v_norm=v_norm, n=50, T=6, S=14)
    step = one_step(problem, eta0)
    assert step.rank_one_residual <= 1e-10
    h = 1 / (1 + torch.exp(problem.y * problem.token_scores()[problem.sequences].mean(-1)))
    beta = torch.zeros(14, dtype=F64)
    for j, row in enumerate(problem.sequences):
        for s in row:  # each occurrence adds h_j y_j / (nT): Σ over occurrences = n_s(X_j)/T
            beta[s] += h[j] * problem.y[j] / (problem.n * problem.T)
    torch.testing.assert_close(step.beta, beta, rtol=1e-10, atol=1e-16)
    D = step.E1 - step.E0
    coefficient = D @ problem.v / (eta0 * problem.v @ problem.v)
    torch.testing.assert_close(
        coefficient, step.beta, rtol=1e-10, atol=1e-13 * step.beta.abs().max()
    )
    torch.testing.assert_close(step.shift, eta0 * step.beta * (problem.v @ problem.v))
    auto_grad, _ = autograd_E_p(problem, torch.zeros(d, dtype=F64))
    torch.testing.assert_close(D, -eta0 * auto_grad, rtol=1e-11, atol=1e-15)


@pytest.mark.parametrize("seed, d, eta0, v_norm", ONE_STEP_CASES)
def test_r2_and_r3_inequalities_hold_on_every_draw(seed, d, eta0, v_norm):
    """R2: |β − α/2| ≤ max|f⁰| ᾱ/4; R3: |⟨E¹_s, v⟩ − η0‖v‖²α_s/2| ≤ m(1 + η0‖v‖²ᾱ_s/4)."""
    problem, _ = random_problem(seed + 100, d=d, v_norm=v_norm, n=50, T=6, S=14)
    step = one_step(problem, eta0)
    assert torch.all(step.r2_gap <= step.r2_bound + 1e-12)
    assert torch.all(step.r3_error <= step.r3_tolerance + 1e-12)
    assert step.m == pytest.approx(float((problem.E @ problem.v).abs().max()))
    assert step.paper_bound == pytest.approx(11 * eta0 * d**-0.25)
    # The statement's own quantities, from their formulas (‖v‖ ≠ 1 in some cases).
    v2 = float(problem.v @ problem.v)
    alpha_bar = average_frequency(problem.sequences, 14)
    torch.testing.assert_close(step.r3_tolerance, step.m * (1 + eta0 * v2 * alpha_bar / 4))
    target = eta0 / 2 * v2 * step.alpha
    torch.testing.assert_close(step.r3_target, target)
    torch.testing.assert_close(step.r3_error, (step.E1 @ problem.v - target).abs())
    assert step.paper_error is step.r3_error
    torch.testing.assert_close(
        step.alpha, average_signed_frequency(problem.sequences, problem.y, 14)
    )


@pytest.mark.parametrize("seed", range(3))
def test_n4_nonzero_p0_breaks_rank_one(seed):
    """N4: with p⁰ ~ N(0, I/d), E¹ − E⁰ gains a component along p⁰."""
    problem, gen = random_problem(seed, d=32, n=50, T=6, S=14)
    p0 = torch.randn(32, generator=gen, dtype=F64) / math.sqrt(32)
    assert one_step(problem, 10.0, p0).rank_one_residual > 1e-4
    assert one_step(problem, 10.0).rank_one_residual <= 1e-10


def test_one_step_rejects_bad_arguments():
    problem, _ = random_problem(0, d=4, n=5, T=3, S=5)
    with pytest.raises(ValueError, match="^eta0:"):
        one_step(problem, math.nan)
    with pytest.raises(ValueError, match="^p0:"):
        one_step(problem, 1.0, torch.zeros(3))


# ---- selection, descent direction, floor, feasible point (spec §3.2–§3.3) -----------------------


def test_selected_tokens_handles_repeats_and_ties():
    E = torch.tensor([[3.0, 0.0], [1.0, 0.0], [3.0, 0.0], [-2.0, 0.0]], dtype=F64)
    v = torch.tensor([1.0, 0.0], dtype=F64)
    seq = torch.tensor([[0, 0, 1], [0, 2, 1], [3, 1, 1], [3, 3, 3]])
    y = torch.tensor([1.0, 1.0, -1.0, -1.0], dtype=F64)
    sel = selected_tokens(E, seq, y, v)
    assert sel.tokens.tolist() == [0, 0, 3, 3]
    assert sel.unique.tolist() == [True, False, True, True]
    assert sel.gap.tolist() == [2.0, 0.0, 3.0, math.inf]
    assert not sel.all_unique
    mask = relevant_token_positions(seq, sel.tokens)
    assert mask.tolist() == [
        [True, True, False],
        [True, False, False],
        [True, False, False],
        [True] * 3,
    ]


@pytest.mark.parametrize("seed", range(3))
def test_descent_direction_is_orthogonal_to_v_and_hits_one_token(seed):
    """Lemma A.2: q ⟂ v and E¹q = e_{s*} (possible since |S| ≤ d − 1)."""
    problem, _, _ = g1_after_one_step(seed)
    for s_star in range(4):
        result = descent_direction(problem.E, problem.v, s_star)
        assert result.ok and result.reason is None
        q = result.q
        assert abs(float(q @ problem.v)) <= 1e-10 * float(q.norm() * problem.v.norm())
        target = torch.zeros(problem.vocab_size, dtype=F64)
        target[s_star] = 1.0
        torch.testing.assert_close(problem.E @ q, target, rtol=0, atol=1e-10)


@pytest.mark.parametrize("seed", range(3))
def test_descent_slope_is_negative_at_every_p_including_norm_1e3(seed):
    """Lemma A.2: ⟨∇L(p), q⟩ < 0 for every finite p; the sign is exact even at ‖p‖ = 1e3."""
    problem, sel, gen = g1_after_one_step(seed)
    prompt = problem.prompt_problem()
    positions = relevant_token_positions(problem.sequences, sel.tokens)
    for s_star in range(4):
        at_s = positions & (problem.sequences == s_star)
        for norm in (0.0, 0.5, 5.0, 50.0, 1e3, 1e3, 1e3):
            log_abs, sign = descent_slope(prompt, random_direction(gen, problem.dim, norm), at_s)
            assert sign == -1.0 and math.isfinite(log_abs)


@pytest.mark.parametrize("seed", range(2))
def test_directional_derivative_agrees_with_autograd_and_descent_slope_at_moderate_p(seed):
    problem, sel, gen = g1_after_one_step(seed)
    prompt = problem.prompt_problem()
    positions = relevant_token_positions(problem.sequences, sel.tokens)
    for s_star in range(4):
        q = descent_direction(problem.E, problem.v, s_star).q
        at_s = positions & (problem.sequences == s_star)
        for norm in (0.0, 1.0, 5.0):
            p = random_direction(gen, problem.dim, norm)
            _, grad_p = autograd_E_p(problem, p)
            expected = float(grad_p @ q)
            for log_abs, sign in (
                directional_derivative(prompt, p, q),
                descent_slope(prompt, p, at_s),
            ):
                assert sign * math.exp(log_abs) == pytest.approx(expected, rel=1e-9)


def test_descent_slope_rejects_a_non_monotone_loss_and_bad_positions():
    problem, _, _ = g1_after_one_step(0)
    prompt = problem.prompt_problem()
    square = PromptProblem(keys=prompt.keys, scores=prompt.scores, loss="square")
    p = torch.zeros(problem.dim, dtype=F64)
    with pytest.raises(ValueError, match="square"):
        descent_slope(square, p, problem.sequences == 0)
    with pytest.raises(ValueError, match="^positions:"):
        descent_slope(prompt, p, torch.ones(3, 3, dtype=torch.bool))


def test_descent_direction_reports_why_it_is_impossible():
    gen = torch.Generator().manual_seed(0)
    E = torch.randn(6, 5, generator=gen, dtype=F64)
    result = descent_direction(E, torch.ones(5, dtype=F64), 0)
    assert not result.ok and "d - 1" in result.reason
    E_low = torch.cat([E[:2], E[:2]])  # 4 tokens in d = 5, but rank 2
    result = descent_direction(E_low, torch.ones(5, dtype=F64), 0)
    assert not result.ok and "rank deficient" in result.reason
    with pytest.raises(ValueError, match="s_star_token"):
        descent_direction(E, torch.ones(5, dtype=F64), 9)
    with pytest.raises(ValueError, match="^v:"):
        descent_direction(E, torch.ones(4, dtype=F64), 0)
    with pytest.raises(ValueError, match="^s_star:"):
        cls_loss_floor(E, HAND_SEQ, HAND_Y, torch.ones(5, dtype=F64), [0, 9])


def test_loss_floor_is_the_limit_along_the_feasible_point():
    """L* = mean log(1 + e^{−y⟨E¹_{s*}, v⟩}); along p_ls the loss decreases to it, never below."""
    problem, sel, _ = g1_after_one_step(0)
    relevant = completely_positive(problem.sequences, problem.y, problem.vocab_size)
    relevant |= completely_negative(problem.sequences, problem.y, problem.vocab_size)
    p_ls = max_margin_feasible_point(problem.E, relevant)
    torch.testing.assert_close(problem.E @ p_ls, relevant.to(F64), rtol=0, atol=1e-10)
    assert torch.equal(sel.tokens, problem.sequences[relevant[problem.sequences]])
    floor = cls_loss_floor(problem.E, problem.sequences, problem.y, problem.v, sel.tokens)
    positions = relevant_token_positions(problem.sequences, sel.tokens).to(torch.int64).argmax(-1)
    assert floor == pytest.approx(problem.prompt_problem().loss_floor(positions), rel=1e-14)
    scales = (0.0, 10.0, 100.0, 1e3)
    losses = [float(problem.loss_value(problem.E, c * p_ls)) for c in scales]
    log_gaps = [problem.prompt_problem().log_loss_gap(c * p_ls, positions) for c in scales]
    assert losses[0] > losses[1] > floor > 0 and losses[-1] - floor <= 1e-15
    # L − L* ≈ e^{−c}·const along p_ls (every SVM constraint is tight at 1): log-gap slope −1.
    assert all(math.isfinite(g) for g in log_gaps)
    assert log_gaps[3] - log_gaps[2] == pytest.approx(-900.0, rel=1e-3)


# ---- models of §4.2 --------------------------------------------------------------------------


def tiny_corpus(seed=0):
    gen = torch.Generator().manual_seed(seed)
    seq, y, S = g2(gen, n=40, T=6, S=10)
    return seq, y, S


@pytest.mark.parametrize("cls", [OneLayerModel, TwoLayerModel])
def test_models_run_forward_backward_and_training_decreases_the_loss(cls):
    seq, y, S = tiny_corpus()
    model = cls(S, 6, seed=3)
    logits = model(seq)
    assert logits.shape == (40,) and logits.dtype == F64
    logits.sum().backward()
    assert all(torch.isfinite(q.grad).all() for q in model.parameters())
    curve = train_full_batch(model, seq, y, epochs=30, lr=0.05, seed=3)
    assert curve.shape == (31,) and curve[-1] < 0.1 * curve[0]
    again = train_full_batch(cls(S, 6, seed=99), seq, y, epochs=30, lr=0.05, seed=3)
    torch.testing.assert_close(curve, again, rtol=1e-12, atol=0)


def test_one_layer_model_is_the_paper_model_and_v_can_be_frozen():
    seq, y, S = tiny_corpus(1)
    model = OneLayerModel(S, 5, train_v=False, seed=0)
    assert torch.all(model.p == 0) and "v" not in dict(model.named_parameters())
    with torch.no_grad():
        model.p.copy_(torch.linspace(-1, 1, 5, dtype=F64))
        problem = EmbeddingProblem(seq, y, model.E.detach(), model.v)
        torch.testing.assert_close(model(seq), problem.forward(model.p))
    curve = train_full_batch(model, seq, y, epochs=5, lr=0.01)
    assert curve.shape == (6,)


# ---- tokenizer, vocabulary, loaders ------------------------------------------------------------


def test_tokenize_vocab_and_encode():
    assert tokenize("Great movie!<br /><br />LOVED it, 10/10.") == [
        "great",
        "movie",
        "loved",
        "it",
        "10",
        "10",
    ]
    docs = ["a b b c", ["b", "c", "c", "d"], "e"]
    vocab = build_vocab(docs, max_size=5, min_count=1)
    assert vocab == {"<pad>": PAD_ID, "<unk>": UNK_ID, "b": 2, "c": 3, "a": 4}
    assert build_vocab(docs, max_size=10, min_count=2) == {"<pad>": 0, "<unk>": 1, "b": 2, "c": 3}
    ids = encode(docs, vocab, T=3)
    assert ids.dtype == torch.int64
    assert ids.tolist() == [[4, 2, 2], [2, 3, 3], [UNK_ID, PAD_ID, PAD_ID]]
    with pytest.raises(ValueError, match="max_size"):
        build_vocab(docs, max_size=1)


def write_imdb(root, pos, neg, split="train"):
    for label, texts in (("pos", pos), ("neg", neg)):
        folder = root / split / label
        folder.mkdir(parents=True)
        for k, text in enumerate(texts):
            (folder / f"{k}_{7 if label == 'pos' else 2}.txt").write_text(text, encoding="utf-8")


def test_load_imdb_reads_the_archive_layout(tmp_path):
    write_imdb(tmp_path, ["Loved it.<br />Great", "wonderful", "superb film"], ["awful", "bad"])
    texts, labels = load_imdb(tmp_path)
    assert len(texts) == 5 and labels.dtype == F64
    assert labels.tolist() == [1.0, -1.0, 1.0, -1.0, 1.0]
    assert texts[:2] == ["Loved it.<br />Great", "awful"]
    texts, labels = load_imdb(tmp_path, max_docs=4)
    assert labels.tolist() == [1.0, -1.0, 1.0, -1.0]


def test_load_imdb_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere"):
        load_imdb(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="test"):
        write_imdb(tmp_path, ["good"], ["bad"])
        load_imdb(tmp_path, split="test")
    (tmp_path / "train" / "neg" / "9_1.txt").write_text("   ", encoding="utf-8")
    with pytest.raises(ValueError, match="9_1.txt"):
        load_imdb(tmp_path)
    empty = tmp_path / "empty"
    write_imdb(empty, [], [])
    with pytest.raises(ValueError, match="no \\*.txt"):
        load_imdb(empty)
    with pytest.raises(ValueError, match="max_docs"):
        load_imdb(tmp_path, max_docs=0)


def test_load_yelp_polarity_reads_quoted_csv(tmp_path):
    path = tmp_path / "train.csv"
    path.write_text(
        '"2","Great food, ""best"" in town.\\nWill return"\n'
        '"1","Slow, rude,\nand cold"\n'
        '"2","ok"\n',
        encoding="utf-8",
    )
    texts, labels = load_yelp_polarity(path)
    assert labels.tolist() == [1.0, -1.0, 1.0]
    assert texts[0] == 'Great food, "best" in town. Will return'
    assert texts[1] == "Slow, rude,\nand cold"
    assert tokenize(texts[0]) == ["great", "food", "best", "in", "town", "will", "return"]
    assert load_yelp_polarity(path, max_docs=2)[1].tolist() == [1.0, -1.0]


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "no rows"),
        ('"3","text"\n', "label must be 1 or 2"),
        ('"1","a","b"\n', "expected 2 fields"),
        ('"1","fine"\n"2"\n', "row 2"),
    ],
)
def test_load_yelp_polarity_errors(tmp_path, content, message):
    path = tmp_path / "bad.csv"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError, match=message):
        load_yelp_polarity(path)


def test_load_yelp_polarity_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        load_yelp_polarity(tmp_path / "missing.csv")


def test_uniform_token_problem_has_its_sizes_and_the_protocols_init():
    problem = uniform_token_problem(5, n=40, T=6, S=11, d=64)
    assert (problem.n, problem.T, problem.vocab_size, problem.dim) == (40, 6, 11, 64)
    assert set(problem.y.tolist()) == {-1.0, 1.0}
    assert float(torch.linalg.vector_norm(problem.v)) == pytest.approx(1.0, abs=1e-15)
    # E⁰ rows ~ N(0, I/d): squared row norms average 1
    assert float((problem.E**2).sum(1).mean()) == pytest.approx(1.0, rel=0.15)
    again = uniform_token_problem(5, n=40, T=6, S=11, d=64)
    assert torch.equal(again.sequences, problem.sequences) and torch.equal(again.E, problem.E)
    assert not torch.equal(uniform_token_problem(6, n=40, T=6, S=11, d=64).E, problem.E)


# ---- Lemma A.2 in exact arithmetic (exact_descent_direction, derivative_along) ----------------


@pytest.mark.parametrize("seed", range(2))
def test_exact_descent_direction_is_exactly_orthogonal_and_hits_one_token(seed):
    """q = P E¹ᵀx: vᵀq = 0 exactly, E¹q = e_s to 60 digits, and q is the least-squares q."""
    from models.problems.embedding import exact_descent_direction

    problem, _, _ = g1_after_one_step(seed)
    for s in range(4):
        exact = exact_descent_direction(problem.E, problem.v, s, digits=60)
        assert exact.v_dot_q_num == 0
        assert exact.log10_residual <= -55
        ls = descent_direction(problem.E, problem.v, s).q
        torch.testing.assert_close(exact.q, ls, rtol=1e-9, atol=1e-12)
        finer = exact_descent_direction(problem.E, problem.v, s, digits=240)
        assert finer.log10_residual <= -230


@pytest.mark.parametrize("seed", range(2))
def test_derivative_along_q_matches_autograd_and_descent_slope(seed):
    """d/dε L(p + εq) from the model definition: autograd at moderate ‖p‖, the gradient's own
    coefficients (descent_slope) at every ‖p‖ up to 1e3, where autograd underflows."""
    from models.problems.embedding import derivative_along, exact_descent_direction

    problem, sel, gen = g1_after_one_step(seed)
    prompt = problem.prompt_problem()
    positions = relevant_token_positions(problem.sequences, sel.tokens)
    for s in range(4):
        q = exact_descent_direction(problem.E, problem.v, s)
        for norm in (0.0, 1.0, 5.0):
            p = random_direction(gen, problem.dim, norm)
            _, grad_p = autograd_E_p(problem, p)
            slope = derivative_along(problem.E, problem.sequences, problem.y, problem.v, p, q)
            assert slope.resolved
            value = slope.sign * math.exp(slope.log_abs)
            assert value == pytest.approx(float(grad_p @ q.q), rel=1e-9)
        for norm in (50.0, 1e3):
            p = random_direction(gen, problem.dim, norm)
            slope = derivative_along(problem.E, problem.sequences, problem.y, problem.v, p, q)
            if not slope.resolved:
                q240 = exact_descent_direction(problem.E, problem.v, s, digits=960)
                slope = derivative_along(
                    problem.E, problem.sequences, problem.y, problem.v, p, q240
                )
            assert slope.resolved and slope.sign == -1.0
            log_ref, sign_ref = descent_slope(prompt, p, positions & (problem.sequences == s))
            assert sign_ref == -1.0 and slope.log_abs == pytest.approx(log_ref, rel=1e-9, abs=1e-9)


def test_derivative_along_minus_q_is_positive_and_misuse_is_refused():
    """The derivative is not negative by construction: along −q it is positive."""
    from dataclasses import replace as dc_replace

    from models.problems.embedding import derivative_along, exact_descent_direction

    problem, _, gen = g1_after_one_step(0)
    q = exact_descent_direction(problem.E, problem.v, 0)
    minus = dc_replace(q, q=-q.q, c_num=tuple(-c for c in q.c_num))
    for norm in (0.0, 2.0):
        p = random_direction(gen, problem.dim, norm)
        slope = derivative_along(problem.E, problem.sequences, problem.y, problem.v, p, minus)
        assert slope.resolved and slope.sign == 1.0
    E = torch.randn(6, 5, generator=gen, dtype=F64)
    with pytest.raises(ValueError, match="d − 1"):
        exact_descent_direction(E, torch.ones(5, dtype=F64), 0)
    with pytest.raises(ValueError, match="^token:"):
        exact_descent_direction(problem.E, problem.v, problem.vocab_size)


def test_orthonormal_complement_spans_the_orthogonal_complement_of_v():
    """d − 1 orthonormal columns, each orthogonal to v (a mutmut survivor dropped one)."""
    from models.problems.embedding import orthonormal_complement

    v = torch.randn(6, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    U = orthonormal_complement(v)
    assert U.shape == (6, 5)
    assert torch.allclose(U.T @ U, torch.eye(5, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(U.T @ v, torch.zeros(5, dtype=torch.float64), atol=1e-12)


def test_sequences_become_int64_token_ids():
    from models.problems.embedding import check_sequences

    ids = check_sequences(torch.tensor([[0, 3], [2, 1]], dtype=torch.int32), vocab_size=4)
    assert ids.dtype == torch.int64 and ids.tolist() == [[0, 3], [2, 1]]


def test_g2_fixed_data_depend_on_the_seed_and_embeddings_on_d():
    """The G2 recipe with fixed seeds (spec §6): y uniform ±1, tokens of X_j from softmax(y_j b),
    E⁰, v Gaussian; a d-sweep keeps the data and changes only the initialisation."""
    from models.problems.embedding import g2_fixed

    a, b, c = g2_fixed(3, 16), g2_fixed(3, 32), g2_fixed(4, 16)
    assert tuple(a.sequences.shape) == (200, 8) and tuple(a.E.shape) == (30, 16)
    assert int(a.sequences.min()) >= 0 and int(a.sequences.max()) < 30
    assert set(a.y.tolist()) == {-1.0, 1.0} and a.y.dtype == torch.float64
    torch.testing.assert_close(a.sequences, b.sequences)
    torch.testing.assert_close(a.y, b.y)
    assert not torch.equal(a.sequences, c.sequences)
    torch.testing.assert_close(g2_fixed(3, 16).E, a.E)
    # softmax(y b): a token favoured by b is more frequent in positive than negative inputs.
    alpha = average_signed_frequency(a.sequences, a.y, 30)
    pos, neg = a.sequences[a.y > 0], a.sequences[a.y < 0]
    top = int(torch.bincount(pos.reshape(-1), minlength=30).argmax())
    assert float(alpha[top]) > 0
    assert int(torch.bincount(neg.reshape(-1), minlength=30)[top]) < int(
        torch.bincount(pos.reshape(-1), minlength=30)[top]
    )
