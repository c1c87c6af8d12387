"""Unit tests of the prompt-attention model (models/problems/attention.py, spec maxmargin §1.8,
§1.9, §2.1).

- Gradients: the closed form and the log-space form against torch autograd of ``loss_value``
  and against central finite differences, at moderate ‖p‖ on Hypothesis-drawn instances.
- Where float64 saturates (‖p‖ = 1e3 … 1e7, the naive gradient is exactly 0), the log-space
  direction and log-norm against a 60-digit mpmath evaluation of ∇L.
- The loss gap in log space against mpmath, the smoothness constant against the Hessian, the
  descent direction p^mm under equal non-optimal scores, construction from the paper's data,
  bad input, and the accuracy of 1 − cos.
"""

import math

import mpmath as mp
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.oracles.svm import att_svm
from models.problems.attention import PromptProblem, cosine, one_minus_cos
from models.problems.losses import get_loss, square

DTYPE = torch.float64
LOSS_NAMES = ["logistic", "exponential", "correlation", "square"]


def make_loss(name: str, target: float = 0.3):
    return square(target) if name == "square" else get_loss(name)


def random_problem(seed, n, T, dim, loss="logistic", scores="uniform", key_scale=1.0):
    """Gaussian keys and bounded scores from a seeded torch.Generator.

    scores: "uniform" (U[−2, 2]), "ties" (values in {0, 0.5, 1}: many exact ties), "equal"
    (token 0 scores 1, every other token 0.5: the hypothesis of spec §2.1), "flat" (all 0.5).
    """
    gen = torch.Generator().manual_seed(int(seed))
    keys = key_scale * torch.randn((n, T, dim), generator=gen, dtype=DTYPE)
    if scores == "uniform":
        gam = 4 * torch.rand((n, T), generator=gen, dtype=DTYPE) - 2
    elif scores == "ties":
        gam = 0.5 * torch.randint(0, 3, (n, T), generator=gen).to(DTYPE)
    elif scores == "equal":
        gam = torch.full((n, T), 0.5, dtype=DTYPE)
        gam[:, 0] = 1.0
    elif scores == "flat":
        gam = torch.full((n, T), 0.5, dtype=DTYPE)
    else:
        raise AssertionError(scores)
    loss = make_loss(loss) if isinstance(loss, str) else loss
    return PromptProblem(keys, gam, loss), gen


@st.composite
def moderate_cases(draw):
    """(problem, p) with n ≤ 4, T ≤ 6, dim ≤ 6, every loss, ‖p‖ ≲ 6."""
    seed = draw(st.integers(0, 2**31 - 1))
    n, T, dim = draw(st.integers(1, 4)), draw(st.integers(2, 6)), draw(st.integers(1, 6))
    loss = draw(st.sampled_from(LOSS_NAMES))
    target = draw(st.floats(-1.0, 2.0, allow_nan=False))
    mode = draw(st.sampled_from(["uniform", "ties", "equal"]))
    radius = draw(st.floats(0.0, 3.0, allow_nan=False))
    problem, gen = random_problem(seed, n, T, dim, make_loss(loss, target), mode)
    p = radius * torch.randn(dim, generator=gen, dtype=DTYPE)
    return problem, p


def term_scale(problem: PromptProblem, p) -> float:
    """The size of the terms a float64 evaluation of ∇L adds up (its rounding is ~1e-16 of
    this): mean |ℓ'(m_i)| · max_t |γ_it| · max_t ‖k_it‖. Not the score range: with all
    scores equal ∇L = 0 exactly, but autograd returns rounding noise of this size."""
    lp = problem.loss.deriv(problem.margins(p)).abs()
    gmax = problem.scores.abs().max(-1).values
    kmax = torch.linalg.vector_norm(problem.keys, dim=-1).max(-1).values
    return float((lp * gmax * kmax).mean()) + 1e-300


def autograd_gradient(problem: PromptProblem, p):
    pr = p.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(problem.loss_value(pr), pr)
    return g


# --------------------------------------------------------------------------------------------
# mpmath reference
# --------------------------------------------------------------------------------------------


def _mp_loss_parts(loss, m):
    """(ℓ(m), ℓ'(m)) in mpmath."""
    if loss.name == "logistic":
        return mp.log1p(mp.exp(-m)), -1 / (1 + mp.exp(m))
    if loss.name == "exponential":
        return mp.exp(-m), -mp.exp(-m)
    if loss.name == "correlation":
        return -m, mp.mpf(-1)
    target = mp.mpf(loss.target)
    return (target - m) ** 2, -2 * (target - m)


def _mp_softmax(keys_i, p):
    z = [mp.fsum(k * q for k, q in zip(row, p, strict=True)) for row in keys_i]
    top = max(z)
    e = [mp.exp(zz - top) for zz in z]
    total = mp.fsum(e)
    return [ee / total for ee in e]


def _mp_inputs(problem: PromptProblem, p):
    keys = [[[mp.mpf(x) for x in row] for row in inp] for inp in problem.keys.tolist()]
    scores = [[mp.mpf(x) for x in row] for row in problem.scores.tolist()]
    return keys, scores, [mp.mpf(x) for x in p.tolist()]


def mp_gradient(problem: PromptProblem, p, dps: int = 60, naive: bool = False):
    """∇L = (1/n) Σ_i ℓ'(m_i) Σ_t s_it (γ_it − m_i) k_it in mpmath; returns (vector, ‖∇L‖).

    Inputs are the exact binary values of the float64 keys, scores and p. mpmath's exponent
    range is unbounded, so e^{−10⁷} is an ordinary number; the one place where the formula
    needs more than ``dps`` digits is γ_it − m_i once s_i saturates (m_i equals γ_ir to
    ~10⁶ digits). By default that difference is evaluated as Σ_u s_iu (γ_it − γ_iu), which is
    the same number (Σ_u s_iu = 1); ``naive=True`` subtracts m_i literally, and then ``dps``
    must exceed the logit spread in decimal digits (used to validate the default).
    """
    with mp.workdps(dps):
        keys, scores, pp = _mp_inputs(problem, p)
        n, d = len(keys), len(pp)
        g = [mp.mpf(0)] * d
        for k_i, g_i in zip(keys, scores, strict=True):
            s = _mp_softmax(k_i, pp)
            m = mp.fsum(a * b for a, b in zip(s, g_i, strict=True))
            lp = _mp_loss_parts(problem.loss, m)[1]
            # Σ_t c_t k_t = Σ_t c_t (k_t − k_r) since Σ_t c_t = 0: centred at the top token r,
            # a token with r's very key adds exactly 0 (uncentred, its c_t and r's cancel only
            # to ~10^−dps, which swamps a gradient of e^{−800})
            z = [mp.fsum(k * q for k, q in zip(row, pp, strict=True)) for row in k_i]
            k_r = k_i[max(range(len(z)), key=lambda u: (z[u], -u))]
            for t, (s_t, gam_t, k_t) in enumerate(zip(s, g_i, k_i, strict=True)):
                if naive:
                    dev = gam_t - m
                else:
                    dev = mp.fsum(s[u] * (gam_t - g_i[u]) for u in range(len(s)) if u != t)
                c = lp * s_t * dev
                for j in range(d):
                    g[j] += c * (k_t[j] - k_r[j])
        g = [x / n for x in g]
        return g, mp.sqrt(mp.fsum(x * x for x in g))


def mp_direction(problem, p, **kw):
    """(unit direction as float64 numpy, log‖∇L‖ as mpf)."""
    g, norm = mp_gradient(problem, p, **kw)
    with mp.workdps(60):
        return np.array([float(x / norm) for x in g]), mp.log(norm)


def logit_spread_digits(problem, p) -> int:
    z = problem.logits(p)
    return int(float((z.max(-1).values - z.min(-1).values).max()) / math.log(10)) + 1


# --------------------------------------------------------------------------------------------
# Gradients at moderate ‖p‖
# --------------------------------------------------------------------------------------------


@settings(max_examples=60, deadline=None)
@given(case=moderate_cases())
def test_gradients_match_autograd(case):
    problem, p = case
    auto = autograd_gradient(problem, p)
    tol = 1e-12 * float(torch.linalg.vector_norm(auto)) + 1e-14 * term_scale(problem, p)
    closed = problem.gradient(p)
    scaled = problem.gradient_scaled(p)
    assert float(torch.linalg.vector_norm(closed - auto)) <= tol
    assert float(torch.linalg.vector_norm(scaled.value() - auto)) <= tol
    assert torch.isfinite(scaled.vec).all()
    if not scaled.is_zero:
        assert float(scaled.vec.abs().max()) == 1.0
        assert scaled.log_norm() == pytest.approx(
            math.log(float(torch.linalg.vector_norm(scaled.value()))), abs=1e-12
        )


@settings(max_examples=30, deadline=None)
@given(case=moderate_cases())
def test_gradients_match_central_differences(case):
    problem, p = case
    h = 1e-5 * (1 + float(torch.linalg.vector_norm(p)))
    eye = torch.eye(problem.dim, dtype=DTYPE)
    fd = torch.stack(
        [(problem.loss_value(p + h * e) - problem.loss_value(p - h * e)) / (2 * h) for e in eye]
    )
    g = problem.gradient_scaled(p).value()
    scale = term_scale(problem, p) + float(problem.loss_value(p).abs())
    err = float(torch.linalg.vector_norm(fd - g))
    assert err <= 1e-6 * float(torch.linalg.vector_norm(g)) + 1e-7 * scale


def test_loss_path_margins_selection_and_floor():
    problem, gen = random_problem(3, 3, 5, 4, "logistic")
    ps = torch.randn((7, 4), generator=gen, dtype=DTYPE)
    path = problem.loss_path(ps)
    for p, v in zip(ps, path, strict=True):
        assert float(v) == pytest.approx(float(problem.loss_value(p)), rel=1e-14)
        s = problem.softmax(p)
        assert torch.allclose(problem.margins(p), (s * problem.scores).sum(-1), rtol=1e-15)
        assert torch.equal(problem.selected(p), torch.argmax(s, dim=-1))
    alpha = torch.argmax(problem.scores, dim=-1)
    floor = problem.loss_floor(alpha)
    best = problem.scores.max(-1).values
    assert floor == pytest.approx(float(problem.loss.value(best).mean()), rel=1e-15)
    assert all(float(v) > floor for v in path)


# --------------------------------------------------------------------------------------------
# Log space where float64 saturates
# --------------------------------------------------------------------------------------------


def _saturation_case(seed: int, loss: str, radius: float):
    """A problem and p with ‖p‖ = radius; for even seeds p = radius·p̂^mm, the direction of
    the global ATT-SVM (the top-score tokens win every softmax), for odd seeds a random one."""
    n, T = 2, 3
    problem, gen = random_problem(seed, n, T, n * (T - 1), loss, "uniform")
    if seed % 2 == 0:
        sol = att_svm(problem.keys, torch.argmax(problem.scores, dim=-1).numpy())
        assert sol.ok
        u = torch.as_tensor(sol.direction)
    else:
        u = torch.randn(problem.dim, generator=gen, dtype=DTYPE)
        u = u / torch.linalg.vector_norm(u)
    return problem, radius * u


def _smallest_logit_gap(problem, p) -> float:
    z = torch.sort(problem.logits(p), dim=-1, descending=True).values
    return float((z[:, 0] - z[:, 1]).min())


SATURATION = [
    (seed, loss, radius)
    for radius in (1e3, 1e5, 1e7)
    for seed, loss in [(0, "logistic"), (1, "logistic"), (2, "exponential"), (3, "correlation")]
    + [(4, "square"), (5, "exponential")]
]


@pytest.mark.parametrize("seed,loss,radius", SATURATION)
def test_log_space_direction_matches_mpmath_where_naive_gradient_vanishes(seed, loss, radius):
    problem, p = _saturation_case(seed, loss, radius)
    naive = problem.gradient(p)
    if _smallest_logit_gap(problem, p) > 750:  # every softmax is one-hot in float64
        assert torch.all(naive == 0)
    ref_dir, ref_log_norm = mp_direction(problem, p)
    scaled = problem.gradient_scaled(p)
    assert not scaled.is_zero
    got = scaled.direction().numpy()
    cos = float(got @ ref_dir)
    assert cos >= 1 - 1e-12
    assert one_minus_cos(got, ref_dir) <= 1e-12
    assert abs(scaled.log_norm() - ref_log_norm) <= 1e-9 * abs(ref_log_norm)
    assert math.isfinite(scaled.log_scale) and torch.isfinite(scaled.vec).all()


def test_naive_gradient_vanishes_at_huge_norm():
    """The premise of log space: at ‖p‖ = 1e5 along p^mm the closed form returns exactly 0."""
    problem, p = _saturation_case(0, "logistic", 1e5)
    assert _smallest_logit_gap(problem, p) > 750
    assert torch.all(problem.gradient(p) == 0)
    assert problem.gradient_scaled(p).log_norm() < -700


@pytest.mark.parametrize("seed,radius", [(0, 30.0), (1, 200.0), (2, 1e3), (5, 1e3)])
def test_mpmath_reference_agrees_with_its_literal_form(seed, radius):
    """The reference's Σ_u s_u(γ_t − γ_u) equals the literal γ_t − m_t when mpmath is given
    enough digits to resolve m_t (the logit spread in decimal digits, plus 60)."""
    loss = "exponential" if seed % 3 == 2 else "logistic"
    problem, p = _saturation_case(seed, loss, radius)
    dps = 60 + logit_spread_digits(problem, p)
    literal, lit_log = mp_direction(problem, p, dps=dps, naive=True)
    default, def_log = mp_direction(problem, p)
    assert one_minus_cos(literal, default) <= 1e-28
    assert abs(lit_log - def_log) <= 1e-40 * abs(def_log) + 1e-40


# --------------------------------------------------------------------------------------------
# Ties, duplicated keys, the zero gradient
# --------------------------------------------------------------------------------------------


def _tied_problem(loss="logistic"):
    """Equal non-optimal scores, a duplicated non-optimal key, and a duplicated top key."""
    gen = torch.Generator().manual_seed(11)
    keys = torch.randn((2, 5, 3), generator=gen, dtype=DTYPE)
    keys[0, 2] = keys[0, 1]  # duplicate non-optimal key
    keys[1, 3] = keys[1, 0]  # a non-optimal token with the optimal token's key
    scores = torch.tensor([[1.0, 0.5, 0.5, 0.5, 0.5], [1.0, 0.2, 0.2, 0.2, -0.3]], dtype=DTYPE)
    return PromptProblem(keys, scores, loss), gen


@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
@pytest.mark.parametrize("radius", [0.0, 1.0, 50.0, 1e3, 1e7])
def test_ties_and_duplicate_keys_are_finite_and_exact(loss, radius):
    problem, gen = _tied_problem(loss)
    for _ in range(4):
        u = torch.randn(problem.dim, generator=gen, dtype=DTYPE)
        p = radius * u / torch.linalg.vector_norm(u)
        scaled = problem.gradient_scaled(p)
        assert not math.isnan(scaled.log_scale)
        assert torch.isfinite(scaled.vec).all()
        assert torch.isfinite(scaled.direction()).all()
        assert torch.isfinite(problem.gradient(p)).all()
        if scaled.is_zero:
            continue
        ref_dir, ref_log = mp_direction(problem, p)
        assert one_minus_cos(scaled.direction(), ref_dir) <= 1e-12
        assert abs(scaled.log_norm() - ref_log) <= 1e-9 * max(1.0, abs(ref_log))
        if radius <= 1.0:
            auto = autograd_gradient(problem, p)
            torch.testing.assert_close(scaled.value(), auto, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("loss", LOSS_NAMES)
@pytest.mark.parametrize("radius", [0.0, 2.0, 1e6])
def test_all_scores_equal_gives_the_exact_zero_gradient(loss, radius):
    problem, gen = random_problem(5, 3, 4, 3, loss, "flat")
    p = radius * torch.randn(3, generator=gen, dtype=DTYPE)
    scaled = problem.gradient_scaled(p)
    assert scaled.is_zero and scaled.log_scale == -math.inf
    assert scaled.log_norm() == -math.inf
    assert torch.equal(scaled.direction(), torch.zeros(3))
    assert torch.equal(scaled.value(), torch.zeros(3))
    # The closed form only gets rounding: Σ_t s_t = 1 holds to an ulp, so m_i ≠ 0.5 exactly.
    assert float(problem.gradient(p).abs().max()) <= 1e-15


# --------------------------------------------------------------------------------------------
# The loss gap in log space
# --------------------------------------------------------------------------------------------


def mp_log_gap(problem: PromptProblem, p, alpha) -> mp.mpf:
    """log(L(p) − (1/n)Σ ℓ(γ_iα_i)) from the literal formula, with enough digits."""
    with mp.workdps(80 + logit_spread_digits(problem, p)):
        keys, scores, pp = _mp_inputs(problem, p)
        total = mp.mpf(0)
        for k_i, g_i, a in zip(keys, scores, alpha, strict=True):
            s = _mp_softmax(k_i, pp)
            m = mp.fsum(x * y for x, y in zip(s, g_i, strict=True))
            total += _mp_loss_parts(problem.loss, m)[0] - _mp_loss_parts(problem.loss, g_i[a])[0]
        return mp.log(total / len(keys))


GAP_CASES = [
    (seed, loss, radius)
    for loss in ("logistic", "exponential", "correlation")
    for seed, radius in [(0, 0.0), (1, 0.5), (2, 2.0), (3, 8.0), (4, 30.0), (6, 200.0), (8, 1e3)]
    # along p^mm with δ_i from 1e-8 down to 1e-36: where a first-order shortcut would be off
    + [(0, 10.0), (2, 20.0), (4, 40.0)]
]


@pytest.mark.parametrize("seed,loss,radius", GAP_CASES)
def test_log_loss_gap_matches_mpmath(seed, loss, radius):
    problem, p = _saturation_case(seed, loss, radius)
    alpha = torch.argmax(problem.scores, dim=-1)
    got = problem.log_loss_gap(p, alpha)
    ref = mp_log_gap(problem, p, alpha.tolist())
    # Full relative accuracy of the gap: a few ulps of its logarithm.
    assert abs(got - ref) <= 1e-13 * max(1.0, abs(ref)), (got, float(ref))
    if radius >= 200 and seed % 2 == 0:
        assert got < -100  # far below anything float64 can hold as L − L*


def test_log_loss_gap_with_tied_top_scores():
    """Two tokens share the top score: either may be α, and the gap is the same."""
    problem = PromptProblem(
        torch.tensor([[[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]]], dtype=DTYPE),
        torch.tensor([[1.0, 1.0, 0.0]], dtype=DTYPE),
        "logistic",
    )
    p = torch.tensor([40.0, 40.0], dtype=DTYPE)
    a = problem.log_loss_gap(p, [0])
    b = problem.log_loss_gap(p, [1])
    assert a == b
    assert abs(a - mp_log_gap(problem, p, [0])) <= 1e-9 * abs(a)


def test_log_loss_gap_rejects_a_non_top_alpha():
    problem, gen = random_problem(1, 2, 4, 3, "logistic", "uniform")
    p = torch.randn(3, generator=gen, dtype=DTYPE)
    alpha = torch.argmin(problem.scores, dim=-1)
    with pytest.raises(ValueError, match="alpha must select a top-score token"):
        problem.log_loss_gap(p, alpha)


# --------------------------------------------------------------------------------------------
# Smoothness constant
# --------------------------------------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    n=st.integers(1, 3),
    T=st.integers(2, 5),
    dim=st.integers(1, 4),
    loss=st.sampled_from(LOSS_NAMES),
    target=st.floats(-1.0, 2.0, allow_nan=False),
    key_scale=st.floats(0.1, 3.0, allow_nan=False),
)
def test_smoothness_bound_dominates_the_hessian(seed, n, T, dim, loss, target, key_scale):
    problem, gen = random_problem(seed, n, T, dim, make_loss(loss, target), key_scale=key_scale)
    bound = problem.smoothness_bound()
    assert math.isfinite(bound) and bound >= 0
    for radius in (0.0, 0.5, 2.0):
        for _ in range(2):
            p = radius * torch.randn(dim, generator=gen, dtype=DTYPE)
            H = torch.autograd.functional.hessian(problem.loss_value, p)
            top = float(torch.linalg.eigvalsh(H).abs().max())
            assert top <= bound * (1 + 1e-12) + 1e-300, (top, bound)


def test_smoothness_bound_pins_the_factor_three_on_a_hand_instance():
    """The bound is ‖K‖₂²(M1·R²/4 + 3·M0·R): the 3 comes from ‖∇²_z m‖ ≤ 3R. The Hessian test
    above cannot see that factor (the true sup of ‖∇²_z m‖ is ≈ 0.19·R, so M0·R still bounds
    it), hence a pinned value. Correlation loss (ℓ' = −1, ℓ'' = 0: M0 = 1, M1 = 0), one input,
    keys (3, 0) and (0, 1) (‖K‖₂ = 3), scores 1 and −1 (R = 2): 9 · 3 · 1 · 2 = 54, where the
    formula without the factor 3 gives 18."""
    keys = torch.tensor([[[3.0, 0.0], [0.0, 1.0]]], dtype=DTYPE)
    scores = torch.tensor([[1.0, -1.0]], dtype=DTYPE)
    assert PromptProblem(keys, scores, "correlation").smoothness_bound() == 54.0


def test_smoothness_bound_matches_an_independent_recomputation():
    """Mean over inputs of ‖K_i‖₂²(M1·R_i²/4 + 3·M0·R_i), recomputed here with numpy's spectral
    norm, for the logistic loss (|ℓ'| = σ(−x) ≤ 1 = M0, |ℓ''| = σ(1 − σ) ≤ 1/4 = M1): pins
    both terms and the per-input average, including the factor 3 of the M0 term."""
    problem, _ = random_problem(5, 3, 4, 2, "logistic")
    keys, scores = problem.keys.numpy(), problem.scores.numpy()
    m0, m1 = 1.0, 0.25
    expected = np.mean(
        [
            np.linalg.norm(k, 2) ** 2
            * (m1 * (g.max() - g.min()) ** 2 / 4 + 3 * m0 * (g.max() - g.min()))
            for k, g in zip(keys, scores, strict=True)
        ]
    )
    assert problem.smoothness_bound() == pytest.approx(expected, rel=1e-13)


# --------------------------------------------------------------------------------------------
# Lemma 2.1: p^mm is a descent direction everywhere under equal non-optimal scores
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("loss", ["logistic", "exponential", "correlation"])
def test_pmm_is_a_descent_direction_under_equal_nonoptimal_scores(seed, loss):
    n, T = 1 + seed % 3, 2 + seed % 3
    problem, gen = random_problem(100 + seed, n, T, n * (T - 1), loss, "equal")
    sol = att_svm(problem.keys, np.zeros(n, dtype=np.int64))
    assert sol.ok
    pmm = sol.x
    for _ in range(40):
        radius = 10 ** float(torch.empty(1).uniform_(-1, 4, generator=gen))
        u = torch.randn(problem.dim, generator=gen, dtype=DTYPE)
        p = radius * u / torch.linalg.vector_norm(u)
        log_scale, vec = problem.gradient_log_np(p.numpy())
        assert math.isfinite(log_scale)  # never exactly zero: no stationary point
        assert float(vec @ pmm) < 0, (radius, p)


# --------------------------------------------------------------------------------------------
# Construction from data, bad input
# --------------------------------------------------------------------------------------------


def test_from_data_keys_and_scores():
    gen = torch.Generator().manual_seed(2)
    X = torch.randn((3, 4, 5), generator=gen, dtype=DTYPE)
    y = torch.tensor([1.0, -1.0, 1.0], dtype=DTYPE)
    v = torch.randn(5, generator=gen, dtype=DTYPE)
    W = torch.randn((5, 2), generator=gen, dtype=DTYPE)
    problem = PromptProblem.from_data(X, y, v, W, loss="exponential")
    assert torch.equal(problem.keys, X @ W)
    assert torch.equal(problem.scores, y[:, None] * (X @ v))
    assert problem.loss.name == "exponential"
    assert (problem.n, problem.T, problem.dim) == (3, 4, 2)
    plain = PromptProblem.from_data(X.tolist(), [1, -1, 1], v.numpy())
    assert torch.equal(plain.keys, X) and plain.keys.dtype == DTYPE
    assert torch.allclose(plain.scores, problem.scores, rtol=0, atol=0)
    assert plain.loss.name == "logistic"


def _data():
    gen = torch.Generator().manual_seed(0)
    X = torch.randn((2, 3, 4), generator=gen, dtype=DTYPE)
    return X, torch.tensor([1.0, -1.0], dtype=DTYPE), torch.ones(4, dtype=DTYPE)


def _nan_at(t, idx):
    t = t.clone()
    t[idx] = math.nan
    return t


BAD_DATA = {
    "X 2-D": (lambda X, y, v: (X[0], y, v, None), "X"),
    "X NaN": (lambda X, y, v: (_nan_at(X, (1, 2, 0)), y, v, None), "X"),
    "X inf": (lambda X, y, v: (X * math.inf, y, v, None), "X"),
    "y label 0": (lambda X, y, v: (X, torch.tensor([1.0, 0.0]), v, None), "y"),
    "y label 2": (lambda X, y, v: (X, torch.tensor([2.0, -1.0]), v, None), "y"),
    "y too short": (lambda X, y, v: (X, y[:1], v, None), "y"),
    "y 2-D": (lambda X, y, v: (X, y[:, None], v, None), "y"),
    "y NaN": (lambda X, y, v: (X, _nan_at(y, 0), v, None), "y"),
    "v wrong dimension": (lambda X, y, v: (X, y, torch.ones(3), None), "v"),
    "v 2-D": (lambda X, y, v: (X, y, v[None], None), "v"),
    "W wrong rows": (lambda X, y, v: (X, y, v, torch.eye(3)), "W"),
    "W 1-D": (lambda X, y, v: (X, y, v, torch.ones(4)), "W"),
    "W NaN": (lambda X, y, v: (X, y, v, _nan_at(torch.eye(4), (0, 0))), "W"),
}


@pytest.mark.parametrize("case", BAD_DATA, ids=list(BAD_DATA))
def test_from_data_bad_input_names_the_field(case):
    build, field = BAD_DATA[case]
    X, y, v, W = build(*_data())
    with pytest.raises(ValueError, match=rf"^{field}: "):
        PromptProblem.from_data(X, y, v, W)


def test_prompt_problem_bad_input_names_the_field():
    keys = torch.zeros((2, 3, 4), dtype=DTYPE)
    scores = torch.zeros((2, 3), dtype=DTYPE)
    with pytest.raises(ValueError, match=r"^keys: expected 3 dimensions"):
        PromptProblem(keys[0], scores, "logistic")
    with pytest.raises(ValueError, match=r"^scores: expected 2 dimensions"):
        PromptProblem(keys, scores[0], "logistic")
    with pytest.raises(ValueError, match=r"^scores: shape \(2, 2\) does not match keys"):
        PromptProblem(keys, scores[:, :2], "logistic")
    with pytest.raises(ValueError, match=r"^scores: contains NaN"):
        PromptProblem(keys, _nan_at(scores, (0, 0)), "logistic")
    with pytest.raises(ValueError, match=r"^keys: contains NaN"):
        PromptProblem(_nan_at(keys, (0, 0, 0)), scores, "logistic")
    with pytest.raises(ValueError, match=r"unknown loss 'hinge'"):
        PromptProblem(keys, scores, "hinge")
    problem = PromptProblem(keys, scores, "logistic")
    with pytest.raises(ValueError, match=r"^p: contains NaN"):
        problem.gradient_scaled(torch.tensor([0.0, math.nan, 0.0, 0.0]))
    with pytest.raises(ValueError, match=r"^p: expected 1 dimensions"):
        problem.gradient_scaled(torch.zeros((1, 4)))


# --------------------------------------------------------------------------------------------
# cosine and 1 − cos
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", [1e-16, 1e-14, 3e-13, 1e-10, 1e-6, 0.5])
@pytest.mark.parametrize("seed", range(3))
def test_one_minus_cos_keeps_its_digits_near_1e_14(target, seed):
    """a, b at angle θ with 1 − cos θ = target, rotated at random, against mpmath."""
    gen = torch.Generator().manual_seed(seed)
    Q, _ = torch.linalg.qr(torch.randn((4, 4), generator=gen, dtype=DTYPE))
    theta = 2 * math.asin(math.sqrt(target / 2))
    a = torch.tensor([1.0, 0.0, 0.0, 0.0], dtype=DTYPE)
    b = torch.tensor([math.cos(theta), math.sin(theta), 0.0, 0.0], dtype=DTYPE) * 3.7
    a, b = Q @ a * 0.2, Q @ b
    with mp.workdps(50):
        va, vb = [mp.mpf(x) for x in a.tolist()], [mp.mpf(x) for x in b.tolist()]
        dot = mp.fsum(x * y for x, y in zip(va, vb, strict=True))
        na = mp.sqrt(mp.fsum(x * x for x in va))
        nb = mp.sqrt(mp.fsum(x * x for x in vb))
        ref = 1 - dot / (na * nb)
    # Relative accuracy ~1e-15·(1 + 1e-16/target): the normalised vectors carry ~1 ulp each.
    assert abs(one_minus_cos(a, b) - ref) <= 1e-9 * ref + 2e-16 * math.sqrt(float(ref))
    assert abs(cosine(a, b) - (1 - ref)) <= 4e-16


def test_cosine_edge_cases():
    a = torch.tensor([1.0, 2.0, -1.0], dtype=DTYPE)
    assert cosine(a, 5 * a) == pytest.approx(1.0, abs=3e-16)
    assert one_minus_cos(a, 5 * a) <= 1e-32
    assert cosine(a, -a) == pytest.approx(-1.0, abs=3e-16)
    assert one_minus_cos(a, -a) == pytest.approx(2.0, abs=1e-15)
    assert cosine(a, torch.zeros(3)) == 0.0
    assert one_minus_cos(torch.zeros(3), a) == 1.0
    assert cosine([3.0, 0.0], [0.0, 1e-300]) == 0.0
    assert one_minus_cos([1e-300, 0.0], [1e300, 1e300]) == pytest.approx(1 - math.sqrt(0.5))
    assert one_minus_cos(np.array([[1.0, 2.0]]), np.array([1.0, 2.0])) <= 1e-32


@pytest.mark.parametrize("scale", [1e-300, 1e-200, 1e-160, 1e160, 1e200, 1e300])
def test_cosine_rescales_before_the_norm(scale):
    """Regression: the norms were taken as sqrt(Σx²), which is 0 for ‖x‖ ≲ 1e-160 (an
    underflowing gradient then looked orthogonal to everything: cos 0, 1 − cos = 1) and inf
    for ‖x‖ ≳ 1e154 (spec §3, "Norm underflow": rescale before taking the norm)."""
    a = torch.tensor([3.0, -1.0, 2.0], dtype=DTYPE)
    b = torch.tensor([2.9, -1.1, 2.05], dtype=DTYPE)
    assert cosine(scale * a, b) == pytest.approx(cosine(a, b), rel=1e-15)
    assert cosine(scale * a, scale * b) == pytest.approx(cosine(a, b), rel=1e-15)
    assert one_minus_cos(scale * a, b) == pytest.approx(one_minus_cos(a, b), rel=1e-12)
    assert one_minus_cos(scale * a, scale * a) <= 1e-32


def test_a_trusted_problem_is_the_checked_one_without_the_checks():
    """PromptProblem.trusted (joint training builds one per step) gives the same model as the
    constructor on valid input, and does not check: a NaN passes through it (the constructor
    raises), which is why only callers that made the tensors themselves may use it."""
    gen = torch.Generator().manual_seed(3)
    keys = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    scores = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    p = torch.randn(5, generator=gen, dtype=torch.float64).numpy()
    checked = PromptProblem(keys, scores, "logistic")
    trusted = PromptProblem.trusted(keys, scores, "logistic")
    assert trusted.gradient_log_np(p)[0] == checked.gradient_log_np(p)[0]
    assert np.array_equal(trusted.gradient_log_np(p)[1], checked.gradient_log_np(p)[1])
    bad = scores.clone()
    bad[0, 0] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        PromptProblem(keys, bad, "logistic")
    assert torch.isnan(PromptProblem.trusted(keys, bad, "logistic").scores).any()


def test_a_loss_the_kernels_do_not_know_takes_the_uncompiled_path_to_the_same_gradient():
    """A user's Loss without a kernel code (kernel_code None) gets ℓ' from its own ``deriv``;
    for a copy of the logistic loss that must give the compiled path's gradient and field."""
    from models.problems.losses import LOGISTIC, _Logistic

    class Plain(_Logistic):
        kernel_code = None

    gen = torch.Generator().manual_seed(5)
    keys = torch.randn(3, 4, 5, generator=gen, dtype=torch.float64)
    scores = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    compiled = PromptProblem(keys, scores, LOGISTIC)
    plain = PromptProblem(keys, scores, Plain("logistic", True))
    for scale in (0.1, 3.0, 300.0):
        p = scale * torch.randn(5, generator=gen, dtype=torch.float64).numpy()
        (ls_c, vec_c), (ls_p, vec_p) = compiled.gradient_log_np(p), plain.gradient_log_np(p)
        assert ls_p == pytest.approx(ls_c, rel=1e-12, abs=1e-12)
        assert np.allclose(vec_p, vec_c, rtol=0, atol=1e-12)
        (u_c, g_c), (u_p, g_p) = compiled.flow_field_np(p), plain.flow_field_np(p)
        assert np.allclose(u_p, u_c, rtol=0, atol=1e-12) and g_p == pytest.approx(g_c, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_selection_kernel_reads_the_top_token_and_its_lead_over_the_runner_up(seed):
    """kernels.selection (the flow tracer's saturation test): per input the top-logit token
    (ties: lowest index) and, over all inputs, min_i (top logit − second-largest logit), read
    against a sort of the logits. Rows are drawn with the top token at every position (in
    particular after the runner-up), plus an exact tie (lead 0), T = 1 (lead +∞) and twins
    (a token with the top token's very key is no runner-up). With a floor, the scan stops at
    the first input whose lead is below it and returns that lead."""
    from models.flows import kernels

    def selection(keys, p, r, floor=-math.inf):
        return kernels.selection(keys, kernels.keys_by_coordinate(keys), p, r, floor)

    rng = np.random.default_rng(seed)
    n, T, d = 6, 5, 3
    keys = rng.normal(size=(n, T, d))
    p = rng.normal(size=d) * 3.0
    r = np.empty(n, dtype=np.int64)
    lead = selection(keys, p, r)
    logits = keys @ p
    np.testing.assert_array_equal(r, logits.argmax(axis=1))
    ordered = np.sort(logits, axis=1)
    leads = ordered[:, -1] - ordered[:, -2]
    assert lead == pytest.approx(float(leads.min()), abs=1e-12)
    # the floor: below it, the first input whose lead is below it answers; at or under the
    # smallest lead, the full scan's answer
    floor = float(np.sort(leads)[-2])  # the second-largest lead: some input is below it
    first = int(np.argmax(leads < floor))
    assert selection(keys, p, r, floor) == pytest.approx(float(leads[first]), abs=1e-12)
    assert selection(keys, p, r, float(leads.min())) == lead
    # a hand case: the runner-up comes first, the top token last
    p2 = np.array([1.0])
    increasing = np.array([[[0.0], [1.0], [2.0]], [[-1.0], [3.0], [3.5]]])
    assert selection(increasing, p2, np.empty(2, dtype=np.int64)) == pytest.approx(0.5)
    assert selection(increasing, p2, np.empty(2, dtype=np.int64), 2.0) == pytest.approx(1.0)
    tie = np.array([[[1.0, 0.0], [2.0, 0.0], [2.0, 1.0]]])  # logits 1, 2, 2; distinct keys
    r1 = np.empty(1, dtype=np.int64)
    assert selection(tie, np.array([1.0, 0.0]), r1) == 0.0 and r1.tolist() == [1]
    assert selection(np.ones((2, 1, 1)), p2, np.empty(2, dtype=np.int64)) == math.inf
    # twins (the very same key) are no runners-up: the lead is over the next distinct key,
    # and an input of twins alone has no runner-up at all
    twins = np.array([[[1.0], [2.0], [2.0]], [[0.5], [0.5], [0.5]]])
    r2 = np.empty(2, dtype=np.int64)
    assert selection(twins[:1], p2, r1) == 1.0 and r1.tolist() == [1]
    assert selection(twins[1:], p2, r1) == math.inf and r1.tolist() == [0]
    assert selection(twins, p2, r2) == 1.0 and r2.tolist() == [1, 0]


def test_the_uncompiled_flow_field_is_the_compiled_one_and_zero_at_a_stationary_point():
    """A loss the kernels do not know (kernel_code None) takes the numpy path of
    flow_field_np: the same unit direction and log-norm as the compiled one, and at a
    stationary point (equal keys: ∇L = 0 exactly) zeros with log‖∇L‖ = −inf, never NaN."""
    import dataclasses

    logistic = get_loss("logistic")

    class Uncompiled(type(logistic)):
        kernel_code = None

        def log_neg_deriv_np(self, x):
            return -np.logaddexp(0.0, x)

    slow = Uncompiled(**{f.name: getattr(logistic, f.name) for f in dataclasses.fields(logistic)})
    keys = torch.tensor([[[1.0, 0.5], [0.0, 1.0], [-1.0, 0.5]]], dtype=torch.float64)
    scores = torch.tensor([[1.0, 0.0, 0.5]], dtype=torch.float64)
    p = np.array([0.3, 0.2])
    u, log_norm = PromptProblem(keys, scores, slow).flow_field_np(p)
    u_c, log_norm_c = PromptProblem(keys, scores, logistic).flow_field_np(p)
    np.testing.assert_allclose(u, u_c, rtol=1e-13, atol=1e-15)
    assert log_norm == pytest.approx(log_norm_c, rel=1e-13)
    flat = PromptProblem(keys[:, [0, 0, 0]], scores, slow)
    u, log_norm = flat.flow_field_np(p)
    assert log_norm == -math.inf and np.array_equal(u, np.zeros(2))


def test_a_traced_problem_pickles_and_its_copy_evaluates_the_same_field():
    """The tracer binds the field's kernel arguments into a function cached on the problem
    (``flow_field_fn``, a closure): pickling and deep copies leave it out and rebuild it from
    the copy's own arrays, so a problem stays picklable after a trace."""
    import copy
    import pickle

    from models.flows.dynamics import converge

    rng = np.random.default_rng(3)
    problem = PromptProblem(rng.normal(size=(5, 4, 3)), rng.uniform(-1, 1, size=(5, 4)), "logistic")
    converge(problem)
    assert "flow_field_fn" in problem.__dict__
    p = rng.normal(size=3)
    for twin in (pickle.loads(pickle.dumps(problem)), copy.deepcopy(problem)):
        assert "flow_field_fn" not in twin.__dict__
        u, lgn = twin.flow_field_np(p)
        expected = problem.flow_field_np(p)
        assert np.array_equal(u, expected[0]) and lgn == expected[1]
