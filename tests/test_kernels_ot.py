"""The O(T) token terms of the hot path (models/flows/kernels.py, ``token_terms``) against the
O(T²) pairwise form they replaced, and both against 50-digit mpmath.

The quantity: per input i and token t, s_it·(γ_it − m_i) = s_it·Σ_u s_iu (γ_it − γ_iu), kept
as (log|·|, sign) so that it has its relative accuracy at any ‖p‖. The pairwise form sums the
T signed terms of Σ_u as one signed log-sum-exp (O(T²) per input); the O(T) form centres at
the top-logit token r, D = Σ_{u≠r} s_u(γ_u − γ_r) in log space, and subtracts once:
(γ_t − γ_r) − D. With P_t and N_t the positive and negative parts of Σ_u s_u(γ_t − γ_u), the
pairwise form rounds to ε·s_t·(P_t + N_t), the O(T) form to (2T + 3)·ε·s_t·(P_t + N_t) (since
s_r ≥ 1/T; models/flows/kernels.py): the only cancellation in either is the true one. Besides,
both take the softmax in log space, log s_u = (z_u − z_r) − log Σ e^{z − z_r}, whose first
subtraction rounds to ε·|z_u − z_r| absolute: a relative error of s_u that grows with the
logit spread Z_i = max_u |z_iu − z_ir| (1e5·ε at ‖p‖ = 1e5). The bound asserted,
8·(T + Z_i)·ε·s_t·(P_t + N_t), is that order with the factor T of the centring and the
spread as its factors (derived, not fitted; the worst observed ratio is printed by
``test_error_ratio_report``).

The reference is evaluated from the kernel's own float64 logits (recomputed here in the same
summation order), so what is compared is the token-term arithmetic alone; how the logits'
rounding moves the gradient at large ‖p‖ is tested against mpmath from p itself in
tests/test_attention.py.
"""

from __future__ import annotations

import math

import mpmath as mp
import numpy as np
import pytest
import torch

from models.flows import kernels
from models.problems.attention import PromptProblem

EPS = np.finfo(np.float64).eps
#: The error bound's factor: 8·(T + Z_i)·ε·s_t·(P_t + N_t) (module doc).
FACTOR = 8.0


def pairwise_terms(gam, logits):
    """The O(T²) form (the kernel before the O(T) one), in numpy: per input the signed
    log-sum-exp over u of log s_u + log|γ_t − γ_u| with sign(γ_t − γ_u), plus log s_t."""
    n, T = gam.shape
    log_sd, sign_sd = np.empty((n, T)), np.empty((n, T))
    for i in range(n):
        z = logits[i] - logits[i].max()
        log_s = z - math.log(np.exp(z).sum())
        pair = gam[i][:, None] - gam[i][None, :]
        with np.errstate(divide="ignore"):
            log_pair = np.log(np.abs(pair))
        for t in range(T):
            a = log_s + log_pair[t]
            top = a.max()
            top = 0.0 if top == -math.inf else top
            acc = float(np.sum(np.sign(pair[t]) * np.exp(a - top)))
            if acc == 0.0:
                log_sd[i, t], sign_sd[i, t] = -math.inf, 0.0
            else:
                log_sd[i, t] = log_s[t] + math.log(abs(acc)) + top
                sign_sd[i, t] = math.copysign(1.0, acc)
    return log_sd, sign_sd


def kernel_logits(keys, p):
    """The logits exactly as the kernel forms them (sequential sum over k, float64)."""
    n, T, d = keys.shape
    out = np.empty((n, T))
    for i in range(n):
        for t in range(T):
            acc = 0.0
            for k in range(d):
                acc += float(keys[i, t, k]) * float(p[k])
            out[i, t] = acc
    return out


def exact_terms(gam, logits):
    """Per (i, t): (s_t·(γ_t − m), s_t·(P_t + N_t)) in 50 digits from the float64 logits."""
    out = []
    with mp.workdps(50):
        for g_i, z_i in zip(gam.tolist(), logits.tolist(), strict=True):
            z = [mp.mpf(x) for x in z_i]
            top = max(z)
            e = [mp.exp(x - top) for x in z]
            total = mp.fsum(e)
            s = [x / total for x in e]
            g = [mp.mpf(x) for x in g_i]
            row = []
            for t in range(len(g)):
                terms = [s[u] * (g[t] - g[u]) for u in range(len(g))]
                row.append((s[t] * mp.fsum(terms), s[t] * mp.fsum(abs(x) for x in terms)))
            out.append(row)
    return out


def run_kernel(problem: PromptProblem, p):
    keys, gam = problem._np
    n, T = gam.shape
    log_sd, sign_sd = np.empty((n, T)), np.empty((n, T))
    m, r = np.empty(n), np.empty(n, dtype=np.int64)
    kernels.token_terms(keys, gam, np.ascontiguousarray(p), log_sd, sign_sd, m, r)
    return log_sd, sign_sd, m, r


def error_ratios(log_sd, sign_sd, exact, T, logits):
    """|computed − exact| / ((T + Z_i)·ε·s_t(P_t + N_t)) per token (0 where both are 0)."""
    ratios = []
    spread = (logits.max(1) - logits.min(1)).tolist()
    with mp.workdps(50):
        for i, row in enumerate(exact):
            unit = (T + spread[i]) * EPS
            for t, (value, scale) in enumerate(row):
                got = (
                    mp.mpf(0)
                    if sign_sd[i, t] == 0.0
                    else sign_sd[i, t] * mp.exp(mp.mpf(log_sd[i, t]))
                )
                if scale == 0:
                    assert got == 0, (i, t, got)
                    ratios.append(0.0)
                    continue
                ratios.append(float(abs(got - value) / (unit * scale)))
    return ratios


def draw(seed: int, n: int, T: int, d: int, radius: float, ties: bool = False):
    rng = np.random.default_rng(seed)
    keys = rng.standard_normal((n, T, d))
    if ties:
        # scores on a coarse grid: many exact ties, so zero gaps and equal neighbours
        scores = rng.integers(-2, 3, size=(n, T)).astype(float) / 2
    else:
        scores = rng.uniform(-1, 1, size=(n, T))
    p = rng.standard_normal(d)
    p *= radius / np.linalg.norm(p)
    return PromptProblem(keys, scores, "logistic"), p


CASES = [
    (seed, n, T, d, radius, ties)
    for seed, (n, T, d) in enumerate([(2, 5, 3), (3, 8, 4), (1, 33, 6), (2, 64, 8)])
    for radius in (0.0, 1.0, 30.0, 1e3, 1e5)
    for ties in (False, True)
]


@pytest.mark.parametrize("seed,n,T,d,radius,ties", CASES)
def test_ot_terms_within_rounding_of_exact(seed, n, T, d, radius, ties):
    """Every token's s_t(γ_t − m) from the O(T) kernel is within 8·(T + Z)·ε·s_t(P_t + N_t) of
    its 50-digit value, at ‖p‖ from 0 to 1e5 (terms down to e^{−10⁵}), with and without
    ties in the scores; the margin m is Σ_t s_t γ_t and the top-logit token numpy's argmax."""
    problem, p = draw(seed, n, T, d, radius, ties)
    log_sd, sign_sd, m, r = run_kernel(problem, p)
    logits = kernel_logits(problem._np[0], p)
    ratios = error_ratios(log_sd, sign_sd, exact_terms(problem._np[1], logits), T, logits)
    assert max(ratios) <= FACTOR, max(ratios)
    assert r.tolist() == np.argmax(logits, axis=1).tolist()
    s = np.exp(logits - logits.max(1, keepdims=True))
    s /= s.sum(1, keepdims=True)
    np.testing.assert_allclose(m, (s * problem._np[1]).sum(1), rtol=0, atol=4 * T * EPS)


@pytest.mark.parametrize("seed,n,T,d,radius,ties", CASES[::3])
def test_ot_terms_agree_with_pairwise_form(seed, n, T, d, radius, ties):
    """The O(T) and the O(T²) forms: the same signs wherever either is far from its
    cancellation, and values within the sum of their two rounding bounds."""
    problem, p = draw(seed, n, T, d, radius, ties)
    log_sd, sign_sd, _, _ = run_kernel(problem, p)
    logits = kernel_logits(problem._np[0], p)
    ref_log, ref_sign = pairwise_terms(problem._np[1], logits)
    exact = exact_terms(problem._np[1], logits)
    spread = (logits.max(1) - logits.min(1)).tolist()
    for i, row in enumerate(exact):
        unit = (T + spread[i]) * EPS
        for t, (value, scale) in enumerate(row):
            if scale == 0:
                assert sign_sd[i, t] == ref_sign[i, t] == 0.0
                continue
            if abs(value) > 2 * FACTOR * unit * scale:
                assert sign_sd[i, t] == ref_sign[i, t], (i, t)
                # both relative to the same exact value: their logs agree to the bound
                rel = float(2 * FACTOR * unit * scale / abs(value))
                assert abs(log_sd[i, t] - ref_log[i, t]) <= 2 * rel, (i, t)


def test_exact_ties_and_constant_scores():
    """Equal scores give exact zeros (γ_t − m = 0 for every t, whatever p); a token tied
    with all others but one is P − N of one term, exact; T = 1 is a zero term."""
    keys = np.random.default_rng(0).standard_normal((3, 4, 2))
    scores = np.array([[0.5] * 4, [0.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    problem = PromptProblem(keys, scores, "logistic")
    log_sd, sign_sd, _, _ = run_kernel(problem, np.array([3.0, -2.0]))
    assert sign_sd[0].tolist() == [0.0] * 4 and np.all(log_sd[0] == -math.inf)
    assert sign_sd[2].tolist() == [0.0] * 4
    # input 1: γ_t − m = −s_3 for t < 3, and 1 − s_3 for t = 3
    logits = kernel_logits(keys, np.array([3.0, -2.0]))[1]
    s = np.exp(logits - logits.max())
    s /= s.sum()
    np.testing.assert_allclose(sign_sd[1], [-1, -1, -1, 1])
    np.testing.assert_allclose(np.exp(log_sd[1]), s * np.r_[[s[3]] * 3, 1 - s[3]], rtol=1e-14)
    one = PromptProblem(np.ones((2, 1, 3)), np.array([[0.2], [-1.0]]), "logistic")
    log1, sign1, m1, _ = run_kernel(one, np.array([1.0, 2.0, 3.0]))
    assert sign1.tolist() == [[0.0], [0.0]] and m1.tolist() == [0.2, -1.0]


def test_saturated_top_keeps_relative_accuracy():
    """At ‖p‖ where the non-top tokens' softmax mass is e^{−2000}, the top token's term
    −s_r·Σ_{u≠r} s_u(γ_r − γ_u) is ~e^{−2000}·gap and its log still right to a few units in
    its last place (ε·2002 = 4.4e-13; the literal γ_r − m_i is 0 in float64 there)."""
    keys = np.array([[[1.0, 0.0], [0.0, 0.0], [0.0, 1.0]]])
    scores = np.array([[0.3, 1.0, -0.5]])  # the top-logit token is not the top-score token
    problem = PromptProblem(keys, scores, "logistic")
    p = np.array([2000.0, 0.0])
    log_sd, sign_sd, _, r = run_kernel(problem, p)
    assert r.tolist() == [0]
    # s_1 = s_2 = e^{−2000}/(1 + 2e^{−2000}); γ_0 − m = s_1(0.3 − 1.0) + s_2(0.3 + 0.5)
    with mp.workdps(40):
        tail = mp.exp(-2000) / (1 + 2 * mp.exp(-2000))
        value = (1 - 2 * tail) * (tail * (mp.mpf(0.3) - 1) + tail * (mp.mpf(0.3) + mp.mpf(0.5)))
        assert sign_sd[0, 0] == 1.0
        assert abs(mp.mpf(log_sd[0, 0]) - mp.log(value)) <= 4 * EPS * 2002


def test_error_ratio_report(capsys):
    """The worst |error| / ((T + Z)·ε·s_t(P_t + N_t)) over every case, both forms (printed for the
    docs; asserted against the bound like the tests above)."""
    worst = {"O(T)": 0.0, "pairwise": 0.0}
    for seed, n, T, d, radius, ties in CASES[::2]:
        problem, p = draw(seed, n, T, d, radius, ties)
        logits = kernel_logits(problem._np[0], p)
        exact = exact_terms(problem._np[1], logits)
        log_sd, sign_sd, _, _ = run_kernel(problem, p)
        worst["O(T)"] = max(worst["O(T)"], max(error_ratios(log_sd, sign_sd, exact, T, logits)))
        ref = pairwise_terms(problem._np[1], logits)
        worst["pairwise"] = max(worst["pairwise"], max(error_ratios(*ref, exact, T, logits)))
    with capsys.disabled():
        print(f"\nworst error / ((T + Z)·ε·s(P + N)): {worst}")
    assert worst["O(T)"] <= FACTOR and worst["pairwise"] <= FACTOR


def test_tied_runner_up_does_not_hide_the_deviation():
    """The runner-up ties with the top token in score: D = s_2(γ_2 − γ_r) comes from a token
    e^{−3000} below the top and e^{−2000} below the runner-up. Summed relative to the
    runner-up it would underflow to 0 (and with it every term); relative to its own top
    token it is exact."""
    keys = np.array([[[0.0], [-1.0], [-3.0]]])
    scores = np.array([[0.5, 0.5, -0.5]])
    problem = PromptProblem(keys, scores, "logistic")
    log_sd, sign_sd, m, r = run_kernel(problem, np.array([1000.0]))
    assert r.tolist() == [0] and m.tolist() == [0.5]
    with mp.workdps(30):
        total = 1 + mp.exp(-1000) + mp.exp(-3000)
        s = [1 / total, mp.exp(-1000) / total, mp.exp(-3000) / total]
        dev = -s[2]  # D = s_2·(−0.5 − 0.5)
        expected = [s[0] * -dev, s[1] * -dev, s[2] * (-1 - dev)]
        for t in range(3):
            assert sign_sd[0, t] == (1.0 if expected[t] > 0 else -1.0)
            assert abs(mp.mpf(log_sd[0, t]) - mp.log(abs(expected[t]))) <= 8 * EPS * 4000


@pytest.mark.parametrize("p", [-10.0, -372.4, -400.0, -5000.0])
def test_field_ignores_tokens_with_the_top_tokens_key(p):
    """An input whose two tokens share one key (different scores) adds a zero term with an
    O(1) weight; the other input's term is e^{−2|p|}. The field must be that term, not
    zero: rescaled by the zero term's weight it underflowed at |p| ≈ 372 (d = 1), and the
    tracer stopped at a "stationary point" that is not one.

    Input B alone moves p: ∇L = ℓ'(m_B)·s_0·s_1 (k = ∓1, scores 0 and 1), so the flow
    heads to +p (u = +1) with log‖∇L‖ = log σ(−m_B) + log s_0 + log s_1."""
    keys = np.array([[[1.0], [1.0]], [[-1.0], [1.0]]])
    scores = np.array([[0.0, -2.0], [0.0, 1.0]])
    problem = PromptProblem(keys, scores, "logistic")
    u, lgn = problem.flow_field_np(np.array([p]))
    with mp.workdps(40):
        z = [-mp.mpf(p), mp.mpf(p)]
        top = max(z)
        total = mp.fsum(mp.exp(x - top) for x in z)
        s0, s1 = mp.exp(z[0] - top) / total, mp.exp(z[1] - top) / total
        m_b = s1
        expected = mp.log(1 / (1 + mp.exp(m_b))) + mp.log(s0) + mp.log(s1)
    assert u.tolist() == [1.0]
    assert abs(lgn - float(expected)) <= 16 * EPS * max(1.0, abs(float(expected)))


# --------------------------------------------------------------------------------------------
# The linear-space field and the closed-form Jacobian (kernels.field_linear, field_jacobian)
# --------------------------------------------------------------------------------------------

LOSSES = {
    kernels.LOGISTIC: "logistic",
    kernels.EXPONENTIAL: "exponential",
    kernels.CORRELATION: "correlation",
}


def _unweighted(kernel, keys, gam, p, code, param, out):
    """One of the tracer's kernels (field, field_linear, field_jacobian) on an unweighted
    problem: the mean over its inputs, keys also laid out by coordinate."""
    keys_t, log_wt = kernels.keys_by_coordinate(keys), kernels.mean_log_weights(keys)
    return kernel(keys, keys_t, gam, log_wt, p, code, param, out)


def _random_case(rng, radius, ties=False, twins=False):
    n, T, d = int(rng.integers(1, 6)), int(rng.integers(2, 8)), int(rng.integers(1, 5))
    keys = rng.normal(size=(n, T, d))
    gam = rng.uniform(-1, 1, size=(n, T))
    if ties:
        gam = np.round(gam)
    if twins:
        keys[:, 1] = keys[:, 0]
    p = rng.normal(size=d)
    return keys, gam, p * radius / np.linalg.norm(p)


def _condition(keys, gam, p, code):
    """(κ, Z): Σ_it |w_it|·‖k_it − k_ir‖ / ‖Σ_it w_it (k_it − k_ir)‖ from the log-space
    weights, and the largest logit spread Z_i (the log form's rounding grows with it)."""
    n, T, _ = keys.shape
    log_w, sign_w, r = np.empty((n, T)), np.empty((n, T)), np.empty(n, dtype=np.int64)
    kernels.coefficients(keys, gam, kernels.mean_log_weights(keys), p, code, 0.0, log_w, sign_w, r)
    x = keys - keys[np.arange(n), r][:, None, :]
    there = (sign_w != 0) & (np.abs(x).max(axis=-1) > 0)  # terms that are there (combine)
    peak = log_w[there].max(initial=-math.inf)
    w = sign_w * np.exp(np.where(there, log_w - peak, -math.inf))
    total = np.linalg.norm(np.einsum("it,itk->k", w, x))
    mass = float(np.sum(np.abs(w) * np.linalg.norm(x, axis=-1)))
    z = keys @ p
    return (mass / total if total > 0 else math.inf), float((z.max(-1) - z.min(-1)).max())


@pytest.mark.parametrize("seed", range(6))
def test_linear_and_log_fields_agree_to_their_rounding(seed):
    """Where the linear form answers, it and the log form differ by their rounding alone:
    per term a few ε (linear) and ε·(Z + 8) (the log form's e^{log|w| − peak}), so the unit
    directions within 4ε·(Z + 16 + T)·κ and the log norms within that plus ε·|log‖∇L‖|."""
    rng = np.random.default_rng(seed)
    answered = 0
    for k in range(200):
        radius = 10.0 ** rng.uniform(-2, 2.6)
        keys, gam, p = _random_case(rng, radius, ties=k % 3 == 0, twins=k % 4 == 0)
        code = int(rng.integers(0, 3))
        u_lin, u_log = np.empty(p.shape), np.empty(p.shape)
        lin = _unweighted(kernels.field_linear, keys, gam, p, code, 0.0, u_lin)
        log = kernels.field_log(keys, gam, kernels.mean_log_weights(keys), p, code, 0.0, u_log)
        if math.isnan(lin):
            continue
        answered += 1
        kappa, spread = _condition(keys, gam, p, code)
        tol = 4 * EPS * (spread + 16 + keys.shape[1]) * kappa
        assert np.abs(u_lin - u_log).max() <= tol, (k, u_lin, u_log, kappa)
        assert abs(lin - log) <= tol + 4 * EPS * abs(log)
    assert answered >= 150  # the moderate radii are the linear form's to answer


@pytest.mark.parametrize("code", sorted(LOSSES))
def test_linear_field_weighs_each_input_by_its_own_weight(code):
    """ω_i in runs of equal and changing values (the kernel takes e^{log ω_i} again only where
    it changes): the linear form's direction and log‖∇L‖ are those of the weighted closed-form
    gradient in torch, to rounding. Fails if a run's weight is carried into the next one."""
    rng = np.random.default_rng(code)
    runs = ([0.5, 0.5, 2.0, 2.0, 0.5], [3.0, 1.0, 1.0, 1.0, 0.2], [1.0, 2.0, 3.0, 4.0, 5.0])
    for pattern in runs:
        n, T, d = len(pattern), 4, 3
        keys, gam = rng.normal(size=(n, T, d)), rng.uniform(-1, 1, size=(n, T))
        p = rng.normal(size=d)
        weights = np.asarray(pattern)
        problem = PromptProblem(keys, gam, LOSSES[code], weights)
        u = np.empty(d)
        keys_t = kernels.keys_by_coordinate(keys)
        lgn = kernels.field_linear(keys, keys_t, gam, np.log(weights), p, code, 0.0, u)
        grad = problem.gradient(torch.from_numpy(p)).numpy()
        norm = float(np.linalg.norm(grad))
        assert np.abs(u + grad / norm).max() <= 1e-13, (pattern, u, -grad / norm)
        assert abs(lgn - math.log(norm)) <= 1e-13


@pytest.mark.parametrize("radius", [0.3, 30.0, 300.0, 2000.0])
@pytest.mark.parametrize("code", sorted(LOSSES))
def test_dispatched_field_matches_mpmath(radius, code):
    """``field`` (linear where it answers, else log) against 60-digit mpmath from p itself,
    on both sides of the floor; ties and twins included."""
    from tests.test_attention import mp_direction, mp_gradient

    rng = np.random.default_rng([int(radius * 10), code])
    for k in range(4):
        keys, gam, p = _random_case(rng, radius, ties=k == 1, twins=k == 2)
        problem = PromptProblem(keys, gam, LOSSES[code])
        u = np.empty(p.shape)
        lgn = _unweighted(kernels.field, keys, gam, p, code, 0.0, u)
        if lgn == -math.inf:  # a stationary point: the reference must say so too
            assert mp_gradient(problem, torch.from_numpy(p))[1] == 0
            continue
        grad_dir, ref_log = mp_direction(problem, torch.from_numpy(p))
        ref_dir = -grad_dir  # the field is the flow's direction, −∇L/‖∇L‖
        kappa, spread = _condition(keys, gam, p, code)
        tol = 4 * EPS * (spread + 16 + keys.shape[1]) * kappa
        assert np.abs(u - ref_dir).max() <= tol + 1e-15, (k, u, ref_dir)
        assert abs(lgn - float(ref_log)) <= tol + 8 * EPS * abs(float(ref_log))


def test_linear_field_refuses_below_its_floor_and_ignores_twins_for_the_peak():
    """keys 0, −1 in d = 1 (one input): the only term is e^{−p}-small. At p = 500 (7e-218,
    above the floor) the linear form answers; at p = 700 (1e-304) it must refuse and the
    log form answers. A twin of the top token (weight O(1), term exactly 0) must not lift
    the peak above the floor."""
    gam = np.array([[1.0, 0.0]])
    keys = np.array([[[0.0], [-1.0]]])
    u = np.empty(1)
    at_500 = _unweighted(
        kernels.field_linear, keys, gam, np.array([500.0]), kernels.LOGISTIC, 0.0, u
    )
    assert not math.isnan(at_500) and u[0] == 1.0
    far = np.array([700.0])
    assert math.isnan(_unweighted(kernels.field_linear, keys, gam, far, kernels.LOGISTIC, 0.0, u))
    lgn = _unweighted(kernels.field, keys, gam, far, kernels.LOGISTIC, 0.0, u)
    u_log = np.empty(1)
    assert lgn == kernels.field_log(
        keys, gam, kernels.mean_log_weights(keys), far, kernels.LOGISTIC, 0.0, u_log
    )
    assert u[0] == u_log[0] == 1.0 and -720 < lgn < -690
    # beyond LINEAR_MAX_LEAD the linear form hands over before exponentiating, and the
    # answer is the log form's to the last bit
    beyond = np.array([kernels.LINEAR_MAX_LEAD + 1.0])
    assert math.isnan(
        _unweighted(kernels.field_linear, keys, gam, beyond, kernels.LOGISTIC, 0.0, u)
    )
    lgn = _unweighted(kernels.field, keys, gam, beyond, kernels.LOGISTIC, 0.0, u)
    assert lgn == kernels.field_log(
        keys, gam, kernels.mean_log_weights(keys), beyond, kernels.LOGISTIC, 0.0, u_log
    )
    twin_keys = np.array([[[0.0], [0.0], [-1.0]]])
    twin_gam = np.array([[1.0, 0.5, 0.0]])
    assert math.isnan(
        _unweighted(kernels.field_linear, twin_keys, twin_gam, far, kernels.LOGISTIC, 0.0, u)
    )
    assert (
        _unweighted(kernels.field, twin_keys, twin_gam, far, kernels.LOGISTIC, 0.0, u) > -math.inf
    )


def _central_jacobian(keys, gam, p, code, param):
    d = p.shape[0]
    jac = np.empty((d, d))
    up, um = np.empty(d), np.empty(d)
    for j in range(d):
        h = 1e-5 * max(1.0, abs(p[j]))
        q = p.copy()
        q[j] = p[j] + h
        _unweighted(kernels.field, keys, gam, q, code, param, up)
        q[j] = p[j] - h
        _unweighted(kernels.field, keys, gam, q, code, param, um)
        jac[:, j] = (up - um) / (2 * h)
    return jac


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("code", [*sorted(LOSSES), kernels.SQUARE])
def test_closed_form_jacobian_matches_central_differences(seed, code):
    """J = −(I − uuᵀ)∇²L/‖∇L‖ against central differences of the field (error O(h²) ≈ 1e-10
    of the field's curvature), at moderate points and at saturated ones (‖p‖ up to 60,
    logit gaps of hundreds, where the weights live in log space)."""
    rng = np.random.default_rng([seed, code])
    checked = 0
    for k in range(25):
        keys, gam, p = _random_case(rng, 10.0 ** rng.uniform(-1, 1.8), ties=k % 5 == 0)
        jac = np.empty((p.shape[0],) * 2)
        if not _unweighted(kernels.field_jacobian, keys, gam, p, code, 0.3, jac):
            u = np.empty(p.shape)
            assert _unweighted(kernels.field, keys, gam, p, code, 0.3, u) == -math.inf
            continue
        ref = _central_jacobian(keys, gam, p, code, 0.3)
        scale = max(np.abs(ref).max(), np.abs(jac).max())
        assert np.abs(jac - ref).max() <= 1e-5 * scale + 1e-9, (k, jac, ref)
        checked += 1
    assert checked >= 15


def test_closed_form_jacobian_refuses_a_stationary_point():
    """All scores equal: ∇L = 0 everywhere, so there is no unit field to differentiate."""
    keys = np.random.default_rng(0).normal(size=(2, 3, 2))
    jac = np.empty((2, 2))
    assert not _unweighted(kernels.field_jacobian, keys, np.zeros((2, 3)), np.ones(2), 0, 0.0, jac)


def test_closed_form_jacobian_refuses_overflowing_factors_also_without_the_jit():
    """A twin of the top token sets the runner-up gap λ to 0 while the field comes from a token
    e^{-800} below, so ℓ'·e^{λ}/‖∇L‖ overflows. Compiled, math.exp gives inf and the kernel
    refuses (False: the caller differences the field); as plain Python (NUMBA_DISABLE_JIT=1,
    the numerics matrix's environment) math.exp raised OverflowError before ``exp_or_inf``."""
    keys = np.array([[[0.0], [0.0], [-1.0]]])
    gam = np.array([[1.0, 0.5, 0.0]])
    p = np.array([800.0])
    log_wt = kernels.mean_log_weights(keys)
    jac = np.empty((1, 1))
    assert not kernels.field_jacobian(
        keys, kernels.keys_by_coordinate(keys), gam, log_wt, p, kernels.LOGISTIC, 0.0, jac
    )
    assert not kernels.field_jacobian.py_func(
        keys, kernels.keys_by_coordinate(keys), gam, log_wt, p, kernels.LOGISTIC, 0.0, jac
    )
    assert kernels.exp_or_inf(710.0) == math.inf and kernels.exp_or_inf(1.0) == math.e


# --------------------------------------------------------------------------------------------
# The tracer's SIMD primitives (kernels.all_logits, kernels.exp_array)
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(1, 1, 1), (3, 1, 4), (200, 4, 8), (4, 64, 8), (7, 5, 33)])
def test_all_logits_are_input_logits_bit_for_bit(shape):
    """The logits by coordinate (SIMD over tokens) are each summed over k in input_logits'
    order, so they must be its logits to the last bit, signed zeros aside (the tracer's
    twin test and every tie-break compare them exactly)."""
    rng = np.random.default_rng(list(shape))
    keys = rng.normal(size=shape) * rng.choice([1e-3, 1.0, 1e3], size=shape)
    keys[..., 0] = keys[..., -1]  # repeated coordinates: more exact ties between partial sums
    n, T, d = shape
    for p in (rng.normal(size=d), rng.normal(size=d) * 1e6, np.zeros(d)):
        z = np.empty(n * T)
        kernels.all_logits(kernels.keys_by_coordinate(keys), p, z)
        expected, row = np.empty((n, T)), np.empty(T)
        tops = []
        for i in range(n):
            tops.append(kernels.input_logits(keys, i, p, row))
            expected[i] = row
        assert np.array_equal(z.reshape(n, T), expected)
        assert [kernels.top_token(z[i * T : (i + 1) * T]) for i in range(n)] == tops


def _ulps(got: np.ndarray, exact: np.ndarray) -> np.ndarray:
    """|got − exact| in units of the last place of ``exact`` (subnormals: the subnormal
    spacing), with inf = inf and 0 = 0 counted as 0."""
    same = got == exact
    spacing = np.spacing(np.abs(exact))
    with np.errstate(invalid="ignore"):
        return np.where(same, 0.0, np.abs(got - exact) / spacing)


EXP_RANGES = {
    "[-1, 0]": (-1.0, 0.0),
    "[-40, 40]": (-40.0, 40.0),
    "normal floor [-708.4, -690]": (-708.4, -690.0),
    "subnormal results [-745.2, -708.4]": (-745.2, -708.4),
    "overflow edge [690, 709.78]": (690.0, 709.78),
}


@pytest.mark.parametrize("where", list(EXP_RANGES))
def test_exp_array_is_within_one_ulp_of_the_correctly_rounded_exponential(where):
    """Against 40-digit mpmath rounded once to float64 (400 points per range) and against
    libm's math.exp (200 000 points: their difference ≤ 1 ulp each side of the exact value,
    and most of the time none): the polynomial's remainder is 1/25 ulp, the rest is Horner's
    rounding. Subnormal results are compared in the subnormal spacing (rounded once)."""
    lo, hi = EXP_RANGES[where]
    rng = np.random.default_rng(abs(hash(where)) % 2**32)
    x = rng.uniform(lo, hi, size=200_000)
    got = np.empty_like(x)
    kernels.exp_array(x, got)
    libm = np.array([math.exp(v) for v in x])
    assert _ulps(got, libm).max() <= 1.0
    assert np.mean(got != libm) < 0.2  # one in ten rounds the other way from libm (measured)
    with mp.workdps(40):
        exact = np.array([float(mp.exp(mp.mpf(float(v)))) for v in x[:400]])
    assert _ulps(got[:400], exact).max() <= 1.0


def test_exp_array_special_values_and_the_same_bits_without_the_jit():
    """e^0 = 1 exactly, e^{−inf} = 0, e^{+inf} and e^{710} overflow to +inf, below e^{−745.14}
    results round to 0, NaN stays NaN; and the plain-Python run of the same function
    (NUMBA_DISABLE_JIT=1, the numerics matrix's environment) gives the very same bits: only
    IEEE additions and multiplications, no libm, no contraction into FMA."""
    special = np.array([0.0, -0.0, -np.inf, np.inf, np.nan, 710.0, 709.78, -745.2, -746.0, -1e300])
    got = np.empty_like(special)
    kernels.exp_array(special, got)
    assert got[0] == got[1] == 1.0
    assert got[2] == 0.0 and got[3] == got[5] == math.inf and math.isnan(got[4])
    assert got[6] == pytest.approx(math.exp(709.78), rel=2.3e-16)
    assert got[7] == got[8] == got[9] == 0.0
    x = np.random.default_rng(5).uniform(-745.0, 709.0, size=2_000)
    jit, plain = np.empty_like(x), np.empty_like(x)
    kernels.exp_array(x, jit)
    kernels.exp_array.py_func(x, plain)
    assert np.array_equal(jit, plain)


_SAME_BITS_SCRIPT = """
import sys
import numpy as np
from models.flows import kernels

rng = np.random.default_rng(11)
x = rng.uniform(-745.0, 709.0, size=5_000)
e = np.empty_like(x)
kernels.exp_array(x, e)
keys = rng.normal(size=(37, 5, 9))
gam = rng.uniform(-1.0, 1.0, size=(37, 5))
keys_t = kernels.keys_by_coordinate(keys)
log_wt = kernels.mean_log_weights(keys)
rows = [e]
for radius in (0.3, 3.0, 30.0):
    p = rng.normal(size=9) * radius
    z = np.empty(37 * 5)
    kernels.all_logits(keys_t, p, z)
    u = np.empty(9)
    lgn = kernels.field(keys, keys_t, gam, log_wt, p, kernels.LOGISTIC, 0.0, u)
    rows += [z, u, np.array([lgn])]
np.save(sys.argv[1], np.concatenate(rows))
"""


def test_the_tracers_kernels_give_the_same_bits_for_a_generic_cpu(tmp_path):
    """Users' CPUs differ in SIMD width and in whether they have FMA. ``all_logits``,
    ``exp_array`` and the linear-space field are written to round the same way at any width
    (each lane does the scalar loop's operations in its order; numba contracts nothing into
    FMA): compiled here for this machine's CPU and, in a child process, for a generic x86-64
    (NUMBA_CPU_NAME=generic: SSE2, two lanes, no FMA), they must agree to the last bit."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    outputs = {}
    for name, extra in {
        "host": {},
        "generic": {"NUMBA_CPU_NAME": "generic"},
    }.items():
        env = {**os.environ, **extra, "NUMBA_CACHE_DIR": str(tmp_path / f"cache-{name}")}
        env["PYTHONPATH"] = str(repo) + os.pathsep + env.get("PYTHONPATH", "")
        out = tmp_path / f"{name}.npy"
        run = subprocess.run(
            [sys.executable, "-c", _SAME_BITS_SCRIPT, str(out)],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
        assert run.returncode == 0, run.stderr[-2000:]
        outputs[name] = np.load(out)
    assert np.array_equal(outputs["host"], outputs["generic"], equal_nan=True)
