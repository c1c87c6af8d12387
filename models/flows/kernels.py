"""Compiled kernels of the engine's hot path: the attention gradient in log space.

The flow tracer evaluates ∇L hundreds of times per trajectory on arrays of a few hundred
entries. In numpy each evaluation was ~25 library calls and ~70 µs, almost all of it call
overhead; compiled with numba (nopython, float64) the same arithmetic takes a few µs. These
kernels ARE the implementation of ``PromptProblem.log_coefficients_np`` and
``gradient_log_np`` (models/problems/attention.py, where the mathematics is documented): there is no
second copy, and the tests of those methods (autograd, 60-digit mpmath, finite differences)
test these kernels.

Why numba: it compiles this loop code as written (no C toolchain, no build step), its wheels
(numba + llvmlite, ~65 MB) install from PyPI in seconds, and `cache=True` keeps the machine
code in __pycache__ so only the first process of a checkout pays the ~2 s compilation.
Setting NUMBA_DISABLE_JIT=1 runs the same functions as plain Python (slow, for debugging).

Every kernel works on float64 only, loops in a fixed order, and never forms a quantity that
can underflow before its direction is known (see models/numerics/logspace.py): the per-token weights
are kept as (log|w|, sign w) and exponentiated only after subtracting their maximum.

The tracer's field, evaluated ~3 times per integrator step, reads its logits from the keys laid
out by coordinate (``all_logits``: SIMD over tokens, each logit summed in the same order as
``input_logits``) and takes its exponentials from ``exp_array`` (branch-free, within 1 ulp of
the correctly rounded value, the same bits on every machine, libm or not).
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit


def mean_log_weights(keys) -> np.ndarray:
    """The ``log_wt`` argument of an unweighted problem: −log n for each of keys' n inputs
    (L the mean of the input losses, as in the papers)."""
    n = keys.shape[0]
    return np.full(n, -math.log(n))


@njit(cache=True)
def input_logits(keys, i, p, z):
    """Input i's logits k_itᵀp into ``z`` (length T); returns its top-logit token, ties to the
    lowest index (numpy's argmax). The loop every kernel starts from, summed in one order."""
    T, d = keys.shape[1], keys.shape[2]
    best = 0
    for t in range(T):
        acc = 0.0
        for k in range(d):
            acc += keys[i, t, k] * p[k]
        z[t] = acc
        if acc > z[best]:
            best = t
    return best


def keys_by_coordinate(keys) -> np.ndarray:
    """The (n, T, d) keys laid out by coordinate, (d, n·T) contiguous: the ``keys_t``
    argument of the tracer's kernels (``all_logits``), built once per problem."""
    n, T, d = keys.shape
    return np.ascontiguousarray(np.asarray(keys, dtype=np.float64).reshape(n * T, d).T)


@njit(cache=True)
def all_logits(keys_t, p, z):
    """Every token's logit into ``z`` (n·T,), token j = i·T + t, from ``keys_by_coordinate``.

    The loop over tokens is the inner one, so it runs in SIMD lanes (0.9 against 3.8 µs at
    n·T = 800, d = 8), and each logit is still summed over k = 0, …, d − 1 in order from 0.0:
    bit for bit ``input_logits``' sums (IEEE operations, no contraction into FMA: numba
    compiles without fast-math flags; tests/test_kernels_ot.py compares the two)."""
    d, nt = keys_t.shape
    for j in range(nt):
        z[j] = 0.0
    for k in range(d):
        pk = p[k]
        for j in range(nt):
            z[j] += keys_t[k, j] * pk


@njit(cache=True)
def top_token(z):
    """The index of z's largest entry, ties to the lowest (as ``input_logits`` and numpy's
    argmax)."""
    best = 0
    for t in range(1, z.shape[0]):
        if z[t] > z[best]:
            best = t
    return best


#: ``exp_array``'s constants: ln 2 split as fdlibm's (the high part has 32 trailing zero bits,
#: so k·LN2_HI is exact for every |k| < 2³²), 1/ln 2, and 1.5·2⁵² (adding and subtracting it
#: rounds a float of magnitude < 2⁵¹ to the nearest integer).
LN2_HI = 6.93147180369123816490e-01
LN2_LO = 1.90821492927058770002e-10
INV_LN2 = 1.44269504088896338700e00
ROUND_SHIFT = 6755399441055744.0
#: 1/k! for k = 2, …, 13: the Taylor polynomial of e^r on |r| ≤ ln2/2 (its remainder
#: r¹⁴/14! < 4.4e-18 relative, 1/25 of an ulp).
EXP_COEFFS = (
    1.0 / 2,
    1.0 / 6,
    1.0 / 24,
    1.0 / 120,
    1.0 / 720,
    1.0 / 5040,
    1.0 / 40320,
    1.0 / 362880,
    1.0 / 3628800,
    1.0 / 39916800,
    1.0 / 479001600,
    1.0 / 6227020800,
)


@njit(cache=True)
def exp_array(x, out):
    """e^x elementwise into ``out``, within 1 ulp of the correctly rounded value for every
    float64 (subnormal results and overflow to +inf included; NaN stays NaN).

    Why not math.exp: numba calls libm once per element (4.5 ns each); this loop has no call
    and no branch, so it runs in SIMD lanes (1.3 against 3.6 µs for 800 values), and the
    field's exponentials are a quarter of its time. Its result is the same on every machine
    (IEEE additions and multiplications only), which libm's, differing between C libraries,
    is not. e^x = 2^k·e^r with k = round(x/ln 2), r = x − k·ln 2 (|r| ≤ ln2/2, Cody–Waite in
    two parts), e^r by its Taylor polynomial, and 2^k as the product of two powers of two
    built from their bits, so that results down to the smallest subnormal are rounded once.
    tests/test_kernels_ot.py measures it: ≤ 1 ulp from 40-digit mpmath and from libm on five
    ranges (subnormal results and the overflow edge among them)."""
    m = x.shape[0]
    bits = np.empty(2 * m, dtype=np.int64)
    c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13 = EXP_COEFFS
    for j in range(m):
        v = x[j]
        nan = v != v
        # e^−750 and e^710 are 0 and +inf already; clamping keeps k's bits in range
        v = 0.0 if nan else (-750.0 if v < -750.0 else (710.0 if v > 710.0 else v))
        kf = (v * INV_LN2 + ROUND_SHIFT) - ROUND_SHIFT
        r = (v - kf * LN2_HI) - kf * LN2_LO
        q = c13
        q = q * r + c12
        q = q * r + c11
        q = q * r + c10
        q = q * r + c9
        q = q * r + c8
        q = q * r + c7
        q = q * r + c6
        q = q * r + c5
        q = q * r + c4
        q = q * r + c3
        q = q * r + c2
        q = 1.0 + (r + r * r * q)
        k = np.int64(kf)
        half = k >> 1  # 2^k = 2^half·2^(k − half), each a normal number for k ≥ −1082
        bits[2 * j] = (half + 1023) << 52
        bits[2 * j + 1] = (k - half + 1023) << 52
        out[j] = math.nan if nan else q
    scale = bits.view(np.float64)
    for j in range(m):
        out[j] = out[j] * scale[2 * j] * scale[2 * j + 1]


@njit(cache=True)
def token_terms(keys, gam, p, log_sd, sign_sd, m, r):
    """Per input i and token t: log|γ_it − m_i| + log s_it into ``log_sd``, its sign into
    ``sign_sd``, the margin m_i = Σ_t s_it γ_it into ``m`` and the top-logit token into ``r``.

    O(T) per input, centred at the top-logit token r: with D_i = Σ_{u≠r} s_iu (γ_iu − γ_ir),
    m_i = γ_ir + D_i, so γ_ir − m_i = −D_i and γ_it − m_i = (γ_it − γ_ir) − D_i for t ≠ r.
    D_i is summed relative to the top logit among its own terms' tokens (never all
    underflowing) and kept as (log|D_i|, sign): the top token's term keeps its relative
    accuracy however saturated the softmax is (e^{−10⁴}), and a token tied with r in score
    (γ_it = γ_ir) gets exactly −D_i. Elsewhere the one subtraction (γ_it − γ_ir) − D_i rounds
    to ε·(|γ_it − γ_ir| + |D_i|) ≤ (2T + 3)·ε·Σ_u s_iu |γ_it − γ_iu|, the order of the
    O(T²) pairwise signed sum Σ_u s_iu (γ_it − γ_iu) this replaced (its rounding is
    ε·Σ_u s_iu |γ_it − γ_iu|; the two are compared to 50-digit values in
    tests/test_kernels_ot.py). Ties in the top logit go to the lowest index (numpy's argmax).
    """
    n, T, d = keys.shape
    logits = np.empty(T)
    for i in range(n):
        best = input_logits(keys, i, p, logits)
        r[i] = best
        top_logit = logits[best]
        gam_r = gam[i, best]
        # D_i is summed relative to the top logit among the tokens it has terms for
        # (γ_u ≠ γ_r): relative to any higher logit all its terms could underflow together.
        ref = -math.inf
        for t in range(T):
            if gam[i, t] != gam_r and logits[t] > ref:
                ref = logits[t]
        tied = 0.0  # Σ e^{z_u − z_r} over u ≠ r tied with r in score
        mass = 0.0  # Σ e^{z_u − ref} over the others
        dsum = 0.0  # Σ e^{z_u − ref}(γ_u − γ_r): D_i·Σ_u e^{z_u − z_r}·e^{z_r − ref}
        for t in range(T):
            if t == best:
                continue
            if gam[i, t] == gam_r:
                tied += math.exp(logits[t] - top_logit)
            else:
                e = math.exp(logits[t] - ref)
                mass += e
                dsum += e * (gam[i, t] - gam_r)
        lead = ref - top_logit  # ≤ 0; −inf when every token ties with r
        log_total = math.log1p(tied + math.exp(lead) * mass)  # log Σ_u e^{z_u − z_r}
        if dsum == 0.0:
            log_dev, sign_dev = -math.inf, 0.0
        else:
            log_dev = lead + math.log(abs(dsum)) - log_total
            sign_dev = 1.0 if dsum > 0 else -1.0
        dev = sign_dev * math.exp(log_dev)  # D_i (may underflow: then it cannot matter, below)
        m[i] = gam_r + dev
        for t in range(T):
            log_s = logits[t] - top_logit
            log_s -= log_total
            if gam[i, t] == gam_r:  # r itself, or tied with it: γ_t − m_i = −D_i exactly
                log_sd[i, t] = log_s + log_dev
                sign_sd[i, t] = -sign_dev if sign_dev != 0.0 else 0.0
                continue
            # |γ_t − γ_r| is a nonzero float: a D_i that underflowed is below its last bit
            value = (gam[i, t] - gam_r) - dev
            if value == 0.0:
                log_sd[i, t] = -math.inf
                sign_sd[i, t] = 0.0
            else:
                log_sd[i, t] = log_s + math.log(abs(value))
                sign_sd[i, t] = 1.0 if value > 0 else -1.0


@njit(cache=True)
def combine(keys, log_w, sign_w, r, vec):
    """Σ_it w_it (k_it − k_ir) = e^{scale}·vec with max|vec| = 1; returns scale. The input
    weights of L (1/n for the mean) are already in w (``coefficients``).

    The weights are (log|w|, sign w); they are rescaled by their maximum before any
    exponential, so the sum is exact up to rounding however small it is. Centring at the
    top-logit token r is free (Σ_t w_it = 0) and removes the one term whose coefficient
    cancels catastrophically. The zero vector returns −inf (``vec`` zeroed).

    The maximum is taken over the terms that are there: t ≠ r with k_it ≠ k_ir. A token
    with r's very key has a zero term however large its weight (it shares r's logit, so
    its weight is of order one), and rescaling by it would flush every genuine term below
    e^{−745} to zero: the field of a flow at ‖p‖ ≈ 400 in d = 1 read as exactly zero.
    """
    n, T, d = keys.shape
    for k in range(d):
        vec[k] = 0.0
    peak_w = -math.inf
    for i in range(n):
        ri = r[i]
        for t in range(T):
            if t == ri or sign_w[i, t] == 0.0 or log_w[i, t] <= peak_w:
                continue
            for k in range(d):
                if keys[i, t, k] != keys[i, ri, k]:
                    peak_w = log_w[i, t]
                    break
    if not peak_w > -math.inf:
        return -math.inf
    for i in range(n):
        ri = r[i]
        for t in range(T):
            # above the peak: a token with r's key (a zero term; its e^{log w − peak} could
            # overflow, and ∞·0 is NaN)
            if sign_w[i, t] == 0.0 or t == ri or log_w[i, t] > peak_w:
                continue
            c = sign_w[i, t] * math.exp(log_w[i, t] - peak_w)
            for k in range(d):
                vec[k] += c * (keys[i, t, k] - keys[i, ri, k])
    peak = 0.0
    for k in range(d):
        if abs(vec[k]) > peak:
            peak = abs(vec[k])
    if peak == 0.0:
        return -math.inf
    for k in range(d):
        vec[k] /= peak
    return peak_w + math.log(peak)


#: Loss codes of the compiled path (models.problems.losses gives each loss its code). NEG_LOG is
#: ℓ(x) = −log x, the NTP loss of 2403.08081 seen as a prompt problem (x > 0 there: the mass
#: on the label's positions).
LOGISTIC, EXPONENTIAL, CORRELATION, SQUARE, NEG_LOG = 0, 1, 2, 3, 4


@njit(cache=True)
def loss_log_deriv(code, param, x):
    """(log|ℓ'(x)|, sign ℓ'(x)) for the loss with this code (``param``: the square loss's
    target). log σ(−x) = −softplus(x) = −(max(x, 0) + log1p(e^{−|x|})), exact for every x."""
    if code == LOGISTIC:
        return -(max(x, 0.0) + math.log1p(math.exp(-abs(x)))), -1.0
    if code == EXPONENTIAL:
        return -x, -1.0
    if code == CORRELATION:
        return 0.0, -1.0
    if code == NEG_LOG:  # ℓ'(x) = −1/x; +inf where the label's mass underflowed (x = 0)
        return (-math.log(x) if x > 0.0 else math.inf), -1.0
    # square: ℓ'(x) = −2(target − x), zero at the target
    deriv = -2.0 * (param - x)
    if deriv == 0.0:
        return -math.inf, 0.0
    return math.log(abs(deriv)), 1.0 if deriv > 0 else -1.0


@njit(cache=True)
def loss_log_neg_deriv(code, x, out):
    """log(−ℓ'(x)) elementwise into ``out``, for the strictly decreasing losses."""
    for j in range(x.shape[0]):
        out[j] = loss_log_deriv(code, 0.0, x[j])[0]


@njit(cache=True)
def coefficients(keys, gam, log_wt, p, code, param, log_w, sign_w, r):
    """w_it = ω_i·ℓ'(m_i)·s_it·(γ_it − m_i) as (log|w|, sign w) into ``log_w``, ``sign_w``;
    ``log_wt`` (n,) holds log ω_i, input i's weight in L = Σ_i ω_i ℓ(m_i) (−log n each for
    the mean; the linear NTP decoder's π_j·p̂_jz otherwise)."""
    n, T, _ = keys.shape
    m = np.empty(n)
    token_terms(keys, gam, p, log_w, sign_w, m, r)
    for i in range(n):
        log_lp, sign_lp = loss_log_deriv(code, param, m[i])
        log_lp += log_wt[i]
        for t in range(T):
            log_w[i, t] += log_lp
            sign_w[i, t] *= sign_lp


@njit(cache=True)
def field_log(keys, gam, log_wt, p, code, param, u):
    """The unit flow direction −∇L/‖∇L‖ into ``u``, every weight kept in log space; returns
    log‖∇L‖ (−inf and u = 0 at a stationary point). Exact however saturated the softmax is;
    ``field`` calls it where the linear-space form could lose a term to underflow."""
    n, T, _ = keys.shape
    log_w, sign_w = np.empty((n, T)), np.empty((n, T))
    r = np.empty(n, dtype=np.int64)
    coefficients(keys, gam, log_wt, p, code, param, log_w, sign_w, r)
    scale = combine(keys, log_w, sign_w, r, u)
    if scale == -math.inf:
        return -math.inf
    norm = 0.0
    for k in range(u.shape[0]):
        norm += u[k] * u[k]
    norm = math.sqrt(norm)
    for k in range(u.shape[0]):
        u[k] = -u[k] / norm
    return scale + math.log(norm)


#: ``field_linear`` hands over to the log form without exponentiating where every input's top
#: logit leads each of its other tokens by more than this (a pure function of p: which form
#: answers never depends on the path).
LINEAR_MAX_LEAD = 750.0
#: The linear-space field answers only where its largest term is at least this. Every term it
#: can lose to underflow (or hold as a subnormal) is below 1e-305 in absolute value, 1e-55 of
#: that term: far below the ε·Σ|w| rounding both forms share. Below it ``field_log`` answers.
LINEAR_FLOOR = 1e-250


@njit(cache=True)
def loss_deriv(code, param, x):
    """ℓ'(x) in linear space, for the losses with a kernel code (see ``loss_log_deriv``)."""
    if code == LOGISTIC:
        # −σ(−x), without overflow on either side
        if x >= 0.0:
            e = math.exp(-x)
            return -e / (1.0 + e)
        return -1.0 / (1.0 + math.exp(x))
    if code == EXPONENTIAL:
        return -math.exp(-x)
    if code == CORRELATION:
        return -1.0
    if code == NEG_LOG:  # −inf where the label's mass underflowed: the caller sees non-finite
        return -1.0 / x if x > 0.0 else -math.inf
    return -2.0 * (param - x)


@njit(cache=True)
def field_linear(keys, keys_t, gam, log_wt, p, code, param, u):
    """``field_log``'s arithmetic with the weights in linear space: one exponential per token
    instead of three transcendentals, the logits and the exponentials each in one SIMD pass
    over every token (``all_logits``, ``exp_array``: ~10 against 27 µs at n·T = 800, d = 8,
    benchmarks/test_field_kernels.py). ``keys_t``: ``keys_by_coordinate(keys)``. Returns
    log‖∇L‖ and writes
    u, or returns NaN (u undefined) where it must not answer: when every input's top logit
    leads by more than LINEAR_MAX_LEAD (checked first), when its largest term (over t ≠ r
    with k_t ≠ k_r, as in ``combine``) is below LINEAR_FLOOR, when the sum cancels to below
    1e-290 of that term, or when anything is not finite.

    Same centring as ``token_terms``: e_t = e^{z_t − z_r} ≤ 1 relative to the input's top
    logit, D_i = Σ_{t≠r} s_t(γ_t − γ_r), γ_t − m_i = (γ_t − γ_r) − D_i, so the top token's
    term is zero and no difference of near-equal margins is formed. Per term the relative
    error is a few ε (the log form's e^{log|w| − peak} has ε·|log|w| − peak| instead, ~700ε
    for terms near e^{−700}); the two agree to rounding where both answer
    (tests/test_kernels_ot.py).
    """
    n, T, d = keys.shape
    z = np.empty(n * T)
    all_logits(keys_t, p, z)
    tops = np.empty(n, dtype=np.int64)
    # First the logits alone: where every input's top logit leads all its other tokens by
    # LINEAR_MAX_LEAD, every term is below e^{−750} of its input's scale and the log form
    # will answer anyway; saying so now spares the exponentials (far out, each flow step).
    lead = math.inf
    # indices into z rather than a slice per input, selects rather than branches: 2.0 → 1.0 µs
    # at n·T = 800 (benchmarks/test_field_kernels.py). The top is top_token's (ties to the
    # lowest), written out: top_token made indexed and called here measured 10.4 against 9.7 µs
    for i in range(n):
        b = i * T
        best = 0
        top = z[b]
        for t in range(1, T):
            if z[b + t] > top:
                best, top = t, z[b + t]
        tops[i] = best
        for t in range(T):
            c = z[b + t] - top  # z_t − z_r ≤ 0, the exponentials' arguments
            z[b + t] = c
            c = math.inf if t == best else -c
            lead = c if c < lead else lead  # NaN leaves it, as ``-c < lead`` did
    if lead > LINEAR_MAX_LEAD:
        return math.nan
    ex = np.empty(n * T)
    exp_array(z, ex)
    for k in range(d):
        u[k] = 0.0
    peak = 0.0
    # ω_i = e^{log ω_i}, taken again only where it changes: an unweighted problem's are all
    # −log n, and one exponential per input was a tenth of the field at n = 200
    last_log_wt, wt = math.nan, math.nan
    for i in range(n):
        best = tops[i]
        b = i * T  # e_t = ex[b + t] = e^{z_t − z_r}
        gam_r = gam[i, best]
        total = 0.0
        dsum = 0.0
        for t in range(T):
            total += ex[b + t]
            # a tied score adds e_t·0 = +0.0: the sum is the same as without its term
            dsum += ex[b + t] * (gam[i, t] - gam_r)
        dev = dsum / total
        if log_wt[i] != last_log_wt:
            last_log_wt = log_wt[i]
            wt = math.exp(last_log_wt)
        lp = loss_deriv(code, param, gam_r + dev) * wt / total
        for t in range(T):
            if t == best:
                continue
            w = lp * ex[b + t] * ((gam[i, t] - gam_r) - dev)
            if w == 0.0:
                continue
            if abs(w) > peak:  # the peak counts only terms that are there (``combine``)
                for k in range(d):
                    if keys[i, t, k] != keys[i, best, k]:
                        peak = abs(w)
                        break
            for k in range(d):
                u[k] += w * (keys[i, t, k] - keys[i, best, k])
    if not peak >= LINEAR_FLOOR or not peak < math.inf:
        return math.nan
    # relative to the peak before squaring: a sum of 1e-160 squares to a subnormal
    norm = 0.0
    for k in range(d):
        u[k] /= peak
        norm += u[k] * u[k]
    norm = math.sqrt(norm)
    if not (norm >= 1e-290 and norm < math.inf):
        return math.nan
    for k in range(d):
        u[k] = -u[k] / norm
    return math.log(norm) + math.log(peak)


@njit(cache=True)
def field(keys, keys_t, gam, log_wt, p, code, param, u):
    """The unit flow direction −∇L/‖∇L‖ into ``u``; returns log‖∇L‖ (−inf and u = 0 at a
    stationary point). One call for the tracer's every evaluation: the linear-space form
    where it is exact to rounding, the log-space form elsewhere (far out, saturated).
    ``keys_t``: ``keys_by_coordinate(keys)``."""
    lgn = field_linear(keys, keys_t, gam, log_wt, p, code, param, u)
    if lgn == lgn:  # not NaN
        return lgn
    return field_log(keys, gam, log_wt, p, code, param, u)


@njit(cache=True)
def selection(keys, keys_t, p, r, floor):
    """The top-logit token of each input into ``r`` (ties: lowest index); returns the
    smallest lead of a top logit over its input's runner-up (+inf when there is none).
    ``keys_t``: ``keys_by_coordinate(keys)`` (the logits in one SIMD pass).

    Stops at the first input whose lead is below ``floor`` and returns that lead (``r`` then
    holds the inputs up to it): the tracer asks only whether every lead reaches its
    saturation threshold, which most steps answer at the first input (−inf: every input).

    The runner-up is the best token whose key differs from the top token's: a token with
    the very same key (a "twin") has the same logit for every p, so no lead over it ever
    grows, and the flow's limit treats the two as one (``dynamics.converge``)."""
    n, T, d = keys.shape
    z = np.empty(n * T)
    all_logits(keys_t, p, z)
    lead = math.inf
    for i in range(n):
        logits = z[i * T : (i + 1) * T]
        best = top_token(logits)
        top = logits[best]
        second = -math.inf
        for t in range(T):
            if logits[t] > second:
                if logits[t] != top:  # a twin has the top token's logit bit for bit
                    second = logits[t]
                    continue
                for k in range(d):
                    if keys[i, t, k] != keys[i, best, k]:
                        second = logits[t]
                        break
        r[i] = best
        lead = min(lead, top - second)
        if lead < floor:
            break
    return lead


@njit(cache=True)
def field_jacobian_differences(keys, keys_t, gam, log_wt, p, code, param, jac):
    """Forward differences of the unit flow field at p into ``jac`` (d, d): column j is
    (u(p + δ_j e_j) − u(p))/δ_j with δ_j = √ε·max(|p_j|, 1).

    What LSODA would compute itself with d + 1 calls of its right-hand side, here in one
    compiled call: the stiff integrator needs the Jacobian only for its Newton iterations
    (the step's accuracy is controlled separately), so the same difference quotient serves.
    ``field_jacobian`` falls back to it where its closed form cannot be formed.
    """
    d = p.shape[0]
    u0 = np.empty(d)
    u1 = np.empty(d)
    field(keys, keys_t, gam, log_wt, p, code, param, u0)
    q = p.copy()
    root_eps = math.sqrt(2.220446049250313e-16)
    for j in range(d):
        step = root_eps * max(abs(p[j]), 1.0)
        q[j] = p[j] + step
        step = q[j] - p[j]  # the increment actually represented in float64
        field(keys, keys_t, gam, log_wt, q, code, param, u1)
        for k in range(d):
            jac[k, j] = (u1[k] - u0[k]) / step
        q[j] = p[j]


@njit(cache=True)
def loss_log_second_deriv(code, param, x):
    """log ℓ''(x) (−inf where ℓ'' = 0) for the losses with a kernel code; each is convex.
    Logistic: ℓ'' = σ(x)σ(−x), log = −softplus(x) − softplus(−x)."""
    if code == LOGISTIC:
        soft = softplus(x)
        return -(soft + (soft - x))  # softplus(−x) = softplus(x) − x
    if code == EXPONENTIAL:
        return -x
    if code == CORRELATION:
        return -math.inf
    if code == NEG_LOG:  # ℓ''(x) = 1/x²
        return -2.0 * math.log(x) if x > 0.0 else math.inf
    return math.log(2.0)


#: log of the largest float64: e^x overflows above it.
LOG_MAX = 709.782712893384


@njit(cache=True)
def exp_or_inf(x):
    """e^x, or +inf where it overflows: what the compiled kernel's math.exp gives, also where
    the kernels run as plain Python (NUMBA_DISABLE_JIT=1), whose math.exp raises OverflowError
    instead (found by the numerics matrix's JIT-off environment: the Jacobian's factors of a
    saturated flow, which the caller then refuses and differences)."""
    return math.inf if x > LOG_MAX else math.exp(x)


@njit(cache=True)
def softplus(x):
    """log(1 + e^x) = max(x, 0) + log1p(e^{−|x|}), exact for every x (the logistic loss is
    softplus(−m)). ``loss_log_deriv`` spells the same expression out: a catalogued mutant
    (tests/mutants/catalogue.py) is pinned to that line."""
    return max(x, 0.0) + math.log1p(math.exp(-abs(x)))


@njit(cache=True)
def field_jacobian(keys, keys_t, gam, log_wt, p, code, param, jac):
    """The Jacobian (d, d) of the unit flow field u = −∇L/‖∇L‖ at p into ``jac``, in closed
    form: J = −(I − u uᵀ)·∇²L/‖∇L‖, one pass over the tokens (≈ one field evaluation plus
    O(n·T·d²)) instead of the d + 1 evaluations of ``field_jacobian_differences``.

    Per input, centred at its top-logit token r (x_t = k_t − k_r, c_t = γ_t − m):
    ∇m = Σ_t s_t c_t x_t =: a, ∇²m = Σ_t s_t c_t x_t x_tᵀ − a x̄ᵀ − x̄ aᵀ with x̄ = Σ_t s_t x_t,
    and ∇²L = Σ_i ω_i (ℓ''(m_i) a_i a_iᵀ + ℓ'(m_i) ∇²m_i) (ω_i = 1/n for the mean). For t ≠ r,
    s_t = e^{λ}·σ̃_t with λ = (runner-up logit − top logit) ≤ 0 and σ̃_t ≤ 1, so every term
    is e^{λ} or e^{2λ} times an O(1) quantity: those powers, ω_i, ℓ', ℓ'' and 1/‖∇L‖ are
    combined in log space before one exponential per input, as in ``field_log``; nothing
    underflows before it is weighed.
    Returns False (``jac`` undefined) at a stationary point or where a factor is not finite;
    the caller then differences the field. Only the integrator's Newton iterations read it
    (tests/test_kernels_ot.py compares it with differences and autograd).
    """
    n, T, d = keys.shape
    u = np.empty(d)
    lgn = field(keys, keys_t, gam, log_wt, p, code, param, u)
    if not lgn > -math.inf:
        return False
    for j in range(d):
        for k in range(d):
            jac[j, k] = 0.0
    logits = np.empty(n * T)
    all_logits(keys_t, p, logits)
    a = np.empty(d)
    xbar = np.empty(d)
    x = np.empty(d)  # a token's x_t = k_t − k_r
    for i in range(n):
        z = logits[i * T : (i + 1) * T]
        best = top_token(z)
        ref = -math.inf
        for t in range(T):
            if t != best and z[t] > ref:
                ref = z[t]
        if ref == -math.inf:  # T = 1: m_i is constant
            continue
        lead = ref - z[best]
        gam_r = gam[i, best]
        mass = 0.0
        dsum = 0.0
        for t in range(T):
            if t != best:
                z[t] = math.exp(z[t] - ref)  # σ̃_t·total
                mass += z[t]
                dsum += z[t] * (gam[i, t] - gam_r)
        e_lead = math.exp(lead)
        total = 1.0 + e_lead * mass
        dev_tilde = dsum / total  # D = e^{λ}·dev_tilde
        m = gam_r + e_lead * dev_tilde
        log_lp, sign_lp = loss_log_deriv(code, param, m)
        log_lp += log_wt[i]  # ω_i: 1/n for the mean
        f2 = sign_lp * exp_or_inf(log_lp + lead - lgn)  # ω_i·ℓ'·e^{λ}/‖∇L‖
        f3 = sign_lp * exp_or_inf(log_lp + 2.0 * lead - lgn)  # ω_i·ℓ'·e^{2λ}/‖∇L‖
        f1 = exp_or_inf(loss_log_second_deriv(code, param, m) + 2.0 * lead - lgn + log_wt[i])
        if not (abs(f1) < math.inf and abs(f2) < math.inf and abs(f3) < math.inf):
            return False
        for k in range(d):
            a[k] = 0.0
            xbar[k] = 0.0
        for t in range(T):
            if t == best:
                continue
            sig = z[t] / total
            c = (gam[i, t] - gam_r) - e_lead * dev_tilde
            w = f2 * sig * c
            for k in range(d):
                x[k] = keys[i, t, k] - keys[i, best, k]
            for k in range(d):
                xk = x[k]
                a[k] += sig * c * xk
                xbar[k] += sig * xk
                if w != 0.0:
                    wx = w * xk
                    for j in range(d):
                        jac[k, j] += wx * x[j]
        for k in range(d):
            for j in range(d):
                jac[k, j] += f1 * a[k] * a[j] - f3 * (a[k] * xbar[j] + xbar[k] * a[j])
    # jac holds ∇²L/‖∇L‖; J = −(I − u uᵀ)·that = −jac + u (uᵀ jac)
    v = np.zeros(d)
    for k in range(d):
        for j in range(d):
            v[j] += u[k] * jac[k, j]
    for k in range(d):
        for j in range(d):
            jac[k, j] = -jac[k, j] + u[k] * v[j]
            if not abs(jac[k, j]) < math.inf:
                return False
    return True


@njit(cache=True)
def alignment(p, u, unit):
    """(‖p‖, 1 − cos(p, unit), 1 − cos(u, unit)) for unit vectors u and ``unit``, the last two
    as ‖p/‖p‖ − unit‖²/2 and ‖u − unit‖²/2, which keep their digits near 1e-12."""
    norm = 0.0
    for k in range(p.shape[0]):
        norm += p[k] * p[k]
    norm = math.sqrt(norm)
    off_p = 0.0
    off_u = 0.0
    for k in range(p.shape[0]):
        off_p += (p[k] / norm - unit[k]) ** 2
        off_u += (u[k] - unit[k]) ** 2
    return norm, 0.5 * off_p, 0.5 * off_u


@njit(cache=True)
def drop_from_logits(z, r, drow):
    """δ = Σ_t s_t·drow[t], s the softmax of the logits ``z`` (top-logit token r), as
    (log|δ|, sign δ, log Σ_t e^{z_t − z_r}, ref): sign 0 and log −inf for δ = 0 exactly; ref the
    largest logit among the tokens with drow ≠ 0 (what ``drop_derivatives`` scales its weights
    by). s_t = e^{(z_t − z_r) − log Σ}.

    The positive and negative parts of δ are each summed relative to the largest logit among
    their own tokens (so a part whose every softmax weight is below e^{-745} keeps its
    digits), their signed difference is hi + log1p(−e^{lo − hi}), and the softmax normaliser
    is subtracted in log space, all relative to the top logit (logits of size Z would
    otherwise cost ε·Z of relative accuracy in δ: the differences of logits are what the
    softmax sees): the mathematics of ``models.flows.regpath.log_gap_batch`` with two
    exponentials per token instead of a dozen tensor passes.
    """
    T = z.shape[0]
    z_max = z[r]
    pos_max = -math.inf
    neg_max = -math.inf
    for t in range(T):
        if drow[t] > 0.0:
            pos_max = max(pos_max, z[t])
        elif drow[t] < 0.0:
            neg_max = max(neg_max, z[t])
    total = 0.0
    pos = 0.0
    neg = 0.0
    for t in range(T):
        total += math.exp(z[t] - z_max)
        if drow[t] > 0.0:
            pos += math.exp(z[t] - pos_max) * drow[t]
        elif drow[t] < 0.0:
            neg -= math.exp(z[t] - neg_max) * drow[t]
    log_pos = (pos_max - z_max) + math.log(pos) if pos_max > -math.inf else -math.inf
    log_neg = (neg_max - z_max) + math.log(neg) if neg_max > -math.inf else -math.inf
    log_total = math.log(total)
    ref = max(pos_max, neg_max)
    if log_pos == log_neg:  # no token moves δ, or its parts cancel exactly
        return -math.inf, 0.0, log_total, ref
    hi = max(log_pos, log_neg)
    lo = min(log_pos, log_neg)
    sign = 1.0 if log_pos > log_neg else -1.0
    return (hi + math.log1p(-math.exp(lo - hi))) - log_total, sign, log_total, ref


@njit(cache=True)
def margin_drop(keys, diff, i, p, z):
    """Input i's margin drop δ_i = Σ_t s_it(p)·diff[i, t] below its selected token's score
    (diff[i, t] = γ_iα_i − γ_it) as (log|δ_i|, sign δ_i, r, log Σ_t e^{z_t − z_r}, ref), r its
    top-logit token (``drop_from_logits``); the logits go into ``z``."""
    r = input_logits(keys, i, p, z)
    log_delta, sign, log_total, ref = drop_from_logits(z, r, diff[i])
    return log_delta, sign, r, log_total, ref


@njit(cache=True)
def loss_increment(code, slope, delta):
    """ℓ(x − δ) − ℓ(x) without cancellation, from the slope −ℓ'(x) (constant per input in the
    loops that call this, so computed once), for the logistic, exponential and correlation
    losses: log1p(σ(−x)·expm1(δ)) with σ(−x) = −ℓ'(x), e^{−x}·expm1(δ) with e^{−x} = −ℓ'(x),
    and δ (the compiled twins of ``Loss.increment``, models/problems/losses.py). NaN for any
    other code (``models.flows.regpath.CLOSED_FORM_LOSSES`` lists the losses it serves)."""
    if code == LOGISTIC:  # log((1 + e^{δ−x}) / (1 + e^{−x})) = log1p(σ(−x)·expm1(δ))
        return math.log1p(slope * math.expm1(delta))
    if code == EXPONENTIAL:
        return slope * math.expm1(delta)
    if code == CORRELATION:  # ℓ(x) = −x
        return delta
    return math.nan


#: Where a log-gap term switches to its first-order form −ℓ'(γ_iα)·δ_i (models/flows/regpath.py,
#: ``_gap_from_margin_drop``, documents why e^{-600}).
FIRST_ORDER_BELOW = -600.0


@njit(cache=True)
def loss_neg_slopes(code, top):
    """log(−ℓ'(γ_i)) for each input's selected score γ_i = top[i]: constant over a grid."""
    out = np.empty(top.shape[0])
    for i in range(top.shape[0]):
        out[i] = loss_log_deriv(code, 0.0, top[i])[0]
    return out


@njit(cache=True)
def gap_term(code, top, lnd, log_delta, sign, order):
    """One input's term of the loss gap, inc = ℓ(γ − δ) − ℓ(γ) for top = γ = γ_iα (``lnd`` =
    log(−ℓ'(γ)), ``loss_neg_slopes``) and a margin drop δ given as (log|δ|, sign δ ≠ 0):
    (log|inc|, a·|δ|/|inc|, b·δ²/|inc|) with a = −ℓ'(γ − δ), b = ℓ''(γ − δ) (the ratios only
    for ``order`` ≥ 1, else 0). inc has the sign of δ (ℓ decreasing). Where −ℓ'(γ)·|δ| <
    e^{-600} the term is that first-order form (models/flows/regpath.py,
    ``_gap_from_margin_drop``, says why), and a·|δ|/|inc| is 1 exactly and b = 0 there, as
    autograd of that form gives."""
    if lnd + log_delta < FIRST_ORDER_BELOW:
        return lnd + log_delta, 1.0, 0.0
    delta = sign * math.exp(log_delta)
    inc = abs(loss_increment(code, exp_or_inf(lnd), delta))
    if order < 1:
        return math.log(inc), 0.0, 0.0
    margin = top - delta
    ratio_a = exp_or_inf(loss_log_deriv(code, 0.0, margin)[0]) * abs(delta) / inc
    ratio_b = exp_or_inf(loss_log_second_deriv(code, 0.0, margin)) * delta**2 / inc
    return math.log(inc), ratio_a, ratio_b


@njit(cache=True)
def signed_sum(log_abs, sign):
    """Σ_i sign_i·e^{log_abs_i} as (big, pos, neg): the sum is e^{big}·(pos − neg), pos and neg
    its positive and negative parts relative to its largest term (entries of sign 0 left
    out; big = −inf and pos = neg = 0 when none is left)."""
    big = -math.inf
    for i in range(log_abs.shape[0]):
        if sign[i] != 0.0:
            big = max(big, log_abs[i])
    pos = 0.0
    neg = 0.0
    if big > -math.inf:
        for i in range(log_abs.shape[0]):
            if sign[i] > 0.0:
                pos += math.exp(log_abs[i] - big)
            elif sign[i] < 0.0:
                neg += math.exp(log_abs[i] - big)
    return big, pos, neg


@njit(cache=True)
def centre_keys(keys, i, z, r, log_total, centred):
    """k_it − k̄_i into ``centred`` (T, d), k̄_i = Σ_t s_it k_it, as
    (k_t − k_r) − Σ_u s_u (k_u − k_r): the mean's offset from the top-logit token r is O(leak),
    summed without the ε·|k| noise of Σ_u s_u k_u."""
    T, d = keys.shape[1], keys.shape[2]
    for j in range(d):
        acc = 0.0
        for u in range(T):
            acc += math.exp((z[u] - z[r]) - log_total) * (keys[i, u, j] - keys[i, r, j])
        for t in range(T):
            centred[t, j] = (keys[i, t, j] - keys[i, r, j]) - acc


@njit(cache=True)
def drop_derivatives(z, r, log_total, ref, drow, centred, w, order, g, h):
    """∇δ/|δ| into ``g`` (d,) and, for ``order`` 2, ∇²δ/|δ| into ``h`` (d, d), for
    δ = Σ_t s_t·drow[t] (``drop_from_logits`` gave r, log_total and ref; ``centred`` from
    ``centre_keys``; ``w`` scratch of length T).

    Σ_t s_t (k_t − k̄) = 0, so ∇δ = Σ_{t≠r} s_t (drow_t − drow_r)(k_t − k̄): every term
    leak-sized (summing drow_t·s_t over all tokens would cancel down to the leak when the
    top-logit token ties with others), and likewise
    ∇²δ = Σ_{t≠r} s_t (drow_t − drow_r)(k_t − k̄)(k_t − k̄)ᵀ + (drow_r − δ)·Cov. Divided by
    |δ|: w_t = s_t (drow_t − drow_r)/|δ| from exponentials relative to ref, the largest logit
    among the tokens that move δ, over their own linear-space sum |Σ_t drow_t e^{z_t − ref}|,
    and (drow_r − δ)/|δ| = −Σ_{t≠r} w_t.
    """
    T, d = centred.shape
    scale = 0.0
    for t in range(T):
        if drow[t] != 0.0:
            scale += drow[t] * math.exp(z[t] - ref)
    scale = abs(scale)
    w_sum = 0.0
    for t in range(T):
        w[t] = 0.0
        if t != r and drow[t] != drow[r]:
            w[t] = (drow[t] - drow[r]) * exp_or_inf(z[t] - ref) / scale
        w_sum += w[t]
    for j in range(d):
        acc = 0.0
        for t in range(T):
            acc += w[t] * centred[t, j]
        g[j] = acc
    if order < 2:
        return
    for j in range(d):
        for m in range(j + 1):
            acc = 0.0
            cov = 0.0
            for t in range(T):
                outer = centred[t, j] * centred[t, m]
                acc += w[t] * outer
                cov += math.exp((z[t] - z[r]) - log_total) * outer
            h[j, m] = acc - w_sum * cov
            h[m, j] = h[j, m]


@njit(cache=True)
def combine_inputs(log_inc, sign_inc, ratio_a, ratio_b, g_unit, h_unit, order, k, out):
    """The loss gap G = (1/n)Σ_i inc_i at point k from its inputs' terms (``gap_term``) and
    their drops' ∇Δ_i/|Δ_i|, ∇²Δ_i/|Δ_i| (``g_unit``, ``h_unit``): log|G| and sign G into
    out[0][k], out[1][k], ∇log|G| into out[2][k], ∇²log|G| into out[3][k] (``order`` ≥ 1, 2;
    zero below). See ``log_gap_derivatives`` for the mathematics."""
    log_gap, sign_gap, grad, hess = out
    n, d = g_unit.shape
    big, pos, neg = signed_sum(log_inc, sign_inc)
    if order >= 1:
        for j in range(d):
            grad[k, j] = 0.0
            if order >= 2:
                for m in range(d):
                    hess[k, j, m] = 0.0
    if pos == neg:  # G = 0 exactly (or no input moves): −inf, sign 0, no derivatives
        log_gap[k] = -math.inf
        sign_gap[k] = 0.0
        return
    log_gap[k] = big + math.log(abs(pos - neg)) - math.log(n)
    sign_gap[k] = 1.0 if pos > neg else -1.0
    if order < 1:
        return
    for i in range(n):
        if sign_inc[i] == 0.0:
            continue
        # share_i·sign Δ_i, as ∇Δ_i/|Δ_i| carries Δ_i's sign: e^{log|inc_i| − big}/(pos − neg)
        share = math.exp(log_inc[i] - big) / (pos - neg)
        c = share * ratio_a[i]
        e = share * ratio_b[i]
        for j in range(d):
            grad[k, j] += c * g_unit[i, j]
        if order < 2:
            continue
        for j in range(d):
            for m in range(d):
                hess[k, j, m] += c * h_unit[i, j, m] + e * g_unit[i, j] * g_unit[i, m]
    if order < 2:
        return
    for j in range(d):
        for m in range(d):
            hess[k, j, m] -= grad[k, j] * grad[k, m]


@njit(cache=True)
def log_gap_derivatives(keys, diff, top, code, P, order, log_gap, sign_gap, grad, hess):
    """For every point P[k]: log|G| into ``log_gap`` and sign G into ``sign_gap``, where
    G = L(p) − L_α = (1/n)Σ_i [ℓ(γ_iα − δ_i) − ℓ(γ_iα)] is the loss gap to selection α and
    δ_i = Σ_t s_it·diff[i, t] input i's margin drop (diff[i, t] = γ_iα − γ_it, top[i] = γ_iα);
    with ``order`` ≥ 1 also ∇log|G| into ``grad`` (K, d), with ``order`` 2 ∇²log|G| into
    ``hess`` (K, d, d). The closed-form derivatives of ``models.flows.regpath.log_gap_batch``
    for the regularization-path descents, whose tensors are so small that autograd's per-node
    overhead was most of their time. tests/test_regpath.py checks them against the plain
    calculus in mpmath from ‖p‖ = 0.3 to 3000 and against autograd where that is accurate.

    The mathematics, per input (s the softmax of z_t = k_tᵀp, k̄ = Σ_t s_t k_t, r the
    top-logit token, Cov = Σ_t s_t (k_t − k̄)(k_t − k̄)ᵀ):
      ∇δ = Σ_t s_t diff_t (k_t − k̄) = Σ_{t≠r} s_t (diff_t − diff_r)(k_t − k̄),
      ∇²δ = Σ_t s_t diff_t (k_t − k̄)(k_t − k̄)ᵀ − δ·Cov
          = Σ_{t≠r} s_t (diff_t − diff_r)(k_t − k̄)(k_t − k̄)ᵀ + (diff_r − δ)·Cov
    (as Σ_t s_t (k_t − k̄) = 0; the second forms are the ones summed: every term is
    leak-sized, where the first forms cancel down to the leak when the top-logit token ties in
    score with another). With inc_i = ℓ(γ_α − δ_i) − ℓ(γ_α), a = −ℓ'(γ_α − δ) and
    b = ℓ''(γ_α − δ),
      ∇G/G = Σ_i share_i·(a_i δ_i/inc_i)·∇δ_i/δ_i,   share_i = inc_i / Σ_j inc_j,
      ∇²G/G = Σ_i share_i·[(a_i δ_i/inc_i)·∇²δ_i/δ_i + (b_i δ_i²/inc_i)·(∇δ_i/δ_i)(∇δ_i/δ_i)ᵀ],
      ∇log|G| = ∇G/G,   ∇²log|G| = ∇²G/G − ∇log|G| ∇log|G|ᵀ.

    Numerics. Nothing that can underflow is formed (∇δ_i and ∇²δ_i are kept divided by |δ_i|),
    and every factor that is 1 to leading order is a ratio of linear-space numbers, never the
    exponential of a difference of logs: where log G is nearly linear in p (one leaking token)
    its Hessian is the difference of two terms of size ‖∇log G‖², and a log of size 600,
    rounded to ε·600, would leave 1e-13·‖∇log G‖² of noise in it. So the weights
    s_t·(diff_t − diff_r)/|δ| are exponentials over their own linear-space sum, the shares the
    same exponentials as the value's signed sum over theirs, and a_i δ_i/inc_i is 1 exactly in
    the first-order form −ℓ'(γ_α)·δ_i that ``log_gap_batch`` uses where −ℓ'(γ_α)·|δ_i| <
    e^{-600} (b = 0 there, as autograd of that form gives). An input with δ_i = 0 exactly
    contributes nothing (as there); G = 0 gives log|G| = −inf, sign 0 and zero derivatives.
    """
    K = P.shape[0]
    n, T, d = keys.shape
    z = np.empty(T)
    w = np.empty(T)
    centred = np.empty((T, d))
    log_inc = np.empty(n)
    sign_inc = np.empty(n)
    ratio_a = np.empty(n)  # a_i·|δ_i| / |inc_i|
    ratio_b = np.empty(n)  # b_i·δ_i² / |inc_i|
    g_unit = np.zeros((n, d))  # ∇δ_i / |δ_i|
    h_unit = np.zeros((n, d, d))  # ∇²δ_i / |δ_i|
    lnd = loss_neg_slopes(code, top)
    out = (log_gap, sign_gap, grad, hess)
    for k in range(K):
        for i in range(n):
            log_delta, sign, r, log_total, ref = margin_drop(keys, diff, i, P[k], z)
            if sign == 0.0:
                log_inc[i] = -math.inf
                sign_inc[i] = 0.0
                continue
            sign_inc[i] = sign  # ℓ decreasing: ℓ(γ − δ) − ℓ(γ) has the sign of δ
            log_inc[i], ratio_a[i], ratio_b[i] = gap_term(
                code, top[i], lnd[i], log_delta, sign, order
            )
            if order >= 1:
                centre_keys(keys, i, z, r, log_total, centred)
                drop_derivatives(
                    z, r, log_total, ref, diff[i], centred, w, order, g_unit[i], h_unit[i]
                )
        combine_inputs(log_inc, sign_inc, ratio_a, ratio_b, g_unit, h_unit, order, k, out)


@njit(cache=True)
def head_log_gap_derivatives(
    keys, diffs, lin, q, y, top, code, P, order, log_gap, sign_gap, grad, hess
):
    """``log_gap_derivatives`` for a quadratic nonlinear head ψ(u) = Σ_j q_j u_j² + const
    (``models.problems.heads``): G = L(p) − L_α with L_α = (1/n)Σ_i ℓ(y_i ψ(x_iα)),
    top[i] = y_i ψ(x_iα). log|G| and sign G, and for ``order`` ≥ 1, 2 ∇log|G| and ∇²log|G|:
    the compiled form of ``models.flows.regpath.head_log_gap_batch`` and its derivatives
    (tests/test_regpath.py compares them with 80-digit values, the plain calculus in mpmath
    and autograd).

    With δ_ij = Σ_t s_it·diffs[i, j, t] (diffs[i, j, t] = x_itj − x_iαj, each a
    ``drop_from_logits``), C_i = ψ(u_i) − ψ(x_iα) = Σ_j (lin[i, j]·δ_ij + q_j·δ_ij²) with
    lin[i, j] = 2 q_j x_iαj: a signed sum of terms kept as logs, so nothing cancels against
    ψ(x_iα). Input i's margin drops by Δ_i = −y_i C_i, with
      ∇C = Σ_j m_j |C|·∇δ_j/|δ_j|,          m_j = (lin_j + 2q_j δ_j)|δ_j| / |C|,
      ∇²C = Σ_j |C|·(m_j ∇²δ_j/|δ_j| + n_j (∇δ_j/|δ_j|)(∇δ_j/|δ_j|)ᵀ),   n_j = 2q_j δ_j² / |C|,
    each coefficient the exponential of a difference of logs (rounded to ε times the logit
    spread, the accuracy of the logits themselves); ∇δ_j/|δ_j| and ∇²δ_j/|δ_j| are
    ``drop_derivatives``, and the inputs combine as in ``log_gap_derivatives``.
    """
    n, T, dk = keys.shape
    dx = diffs.shape[1]
    z = np.empty(T)
    w = np.empty(T)
    centred = np.empty((T, dk))
    log_terms = np.empty(2 * dx)
    sign_terms = np.empty(2 * dx)
    log_dj = np.empty(dx)
    sign_dj = np.empty(dx)
    g_j = np.zeros((dx, dk))
    h_j = np.zeros((dx, dk, dk))
    log_inc = np.empty(n)
    sign_inc = np.empty(n)
    ratio_a = np.empty(n)
    ratio_b = np.empty(n)
    g_unit = np.zeros((n, dk))  # ∇Δ_i / |Δ_i|
    h_unit = np.zeros((n, dk, dk))  # ∇²Δ_i / |Δ_i|
    lnd = loss_neg_slopes(code, top)
    out = (log_gap, sign_gap, grad, hess)
    for k in range(P.shape[0]):
        for i in range(n):
            r = input_logits(keys, i, P[k], z)
            centred_done = False
            for j in range(dx):
                log_d, sign_d, log_total, ref = drop_from_logits(z, r, diffs[i, j])
                log_dj[j] = log_d
                sign_dj[j] = sign_d
                log_terms[j] = -math.inf
                sign_terms[j] = 0.0
                log_terms[dx + j] = -math.inf
                sign_terms[dx + j] = 0.0
                if sign_d == 0.0:
                    continue
                if lin[i, j] != 0.0:
                    log_terms[j] = log_d + math.log(abs(lin[i, j]))
                    sign_terms[j] = sign_d if lin[i, j] > 0.0 else -sign_d
                if q[j] != 0.0:
                    log_terms[dx + j] = 2.0 * log_d + math.log(abs(q[j]))
                    sign_terms[dx + j] = 1.0 if q[j] > 0.0 else -1.0
                if order >= 1:
                    if not centred_done:
                        centre_keys(keys, i, z, r, log_total, centred)
                        centred_done = True
                    drop_derivatives(
                        z, r, log_total, ref, diffs[i, j], centred, w, order, g_j[j], h_j[j]
                    )
            big, pos, neg = signed_sum(log_terms, sign_terms)
            if pos == neg:  # ψ(u_i) = ψ(x_iα) exactly: no change
                log_inc[i] = -math.inf
                sign_inc[i] = 0.0
                continue
            sign_c = 1.0 if pos > neg else -1.0
            log_c = big + math.log(abs(pos - neg))
            sign_drop = -y[i] * sign_c
            log_inc[i], ratio_a[i], ratio_b[i] = gap_term(
                code, top[i], lnd[i], log_c, sign_drop, order
            )
            sign_inc[i] = sign_drop
            if order < 1:
                continue
            for a in range(dk):
                g_unit[i, a] = 0.0
                for b in range(dk):
                    h_unit[i, a, b] = 0.0
            for j in range(dx):
                if sign_dj[j] == 0.0:
                    continue
                m = 0.0
                if lin[i, j] != 0.0:
                    m += lin[i, j] * exp_or_inf(log_dj[j] - log_c)
                nj = 0.0
                if q[j] != 0.0:
                    nj = 2.0 * q[j] * exp_or_inf(2.0 * log_dj[j] - log_c)
                    m += nj * sign_dj[j]  # 2q_j δ_j |δ_j| / |C|
                # ∇Δ/|Δ| = −y ∇C/|C|, ∇²Δ/|Δ| = −y ∇²C/|C|
                for a in range(dk):
                    g_unit[i, a] -= y[i] * m * g_j[j, a]
                    if order >= 2:
                        for b in range(dk):
                            h_unit[i, a, b] -= y[i] * (
                                m * h_j[j, a, b] + nj * g_j[j, a] * g_j[j, b]
                            )
        combine_inputs(log_inc, sign_inc, ratio_a, ratio_b, g_unit, h_unit, order, k, out)


@njit(cache=True)
def log_loss_value(code, m):
    """log ℓ(m) for the logistic and exponential losses, exact at margins of hundreds (where
    ℓ(m) itself underflows): −m for the exponential; for the logistic log(softplus(−m)), and
    above m = 30, −m − e^{−m}/2 (log log1p(e^{−m}) = −m + log(1 − e^{−m}/2 + …), the rest below
    e^{−60})."""
    if code == EXPONENTIAL:
        return -m
    if m > 30.0:
        return -m - 0.5 * math.exp(-m)
    return math.log(softplus(-m))


@njit(cache=True)
def _joint_log_loss_one(s, xv, y, code, terms):
    """log L = log((1/n)Σ_i ℓ(m_i)), m_i = y_i Σ_t s_it·xv_it (``joint_log_losses``): the sum of
    the (positive) losses in linear space where it is a normal number, else the log-sum-exp of
    ``log_loss_value`` (margins of hundreds, where every ℓ(m_i) underflows)."""
    n, T = s.shape
    total = 0.0
    for i in range(n):
        m = 0.0
        for t in range(T):
            m += s[i, t] * xv[i, t]
        m *= y[i]
        if m != m:  # NaN (a NaN p or v): the caller reads it as +inf, never best
            return math.nan
        terms[i] = m
        if code == EXPONENTIAL:
            total += exp_or_inf(-m)
        else:
            total += softplus(-m)
    if 1e-300 < total < 1e300:
        return math.log(total) - math.log(n)
    big = -math.inf
    for i in range(n):
        terms[i] = log_loss_value(code, terms[i])
        big = max(big, terms[i])
    if big == math.inf or big == -math.inf:
        return big
    acc = 0.0
    for i in range(n):
        acc += math.exp(terms[i] - big)
    return big + math.log(acc) - math.log(n)


@njit(cache=True)
def _softmax_rows(keys, p, z, s):
    """s[i] = softmax(K_i p) for every input i (``z`` scratch of length T)."""
    n, T = keys.shape[0], keys.shape[1]
    for i in range(n):
        r = input_logits(keys, i, p, z)
        total = 0.0
        for t in range(T):
            s[i, t] = math.exp(z[t] - z[r])
            total += s[i, t]
        for t in range(T):
            s[i, t] /= total


@njit(cache=True)
def _head_scores(X, v, xv):
    """xv[i, t] = x_itᵀv."""
    n, T, d = X.shape
    for i in range(n):
        for t in range(T):
            acc = 0.0
            for j in range(d):
                acc += X[i, t, j] * v[j]
            xv[i, t] = acc


@njit(cache=True)
def joint_log_losses(keys, X, y, V, P, code, out):
    """log L(v, p) of joint (v, p) training (``models.flows.joint``), L = (1/n)Σ_i ℓ(y_i·
    Σ_t s_it(p) x_itᵀv), ℓ logistic or exponential (``log_loss_value``), for the pairs
    (V[k], P[k]) into ``out`` (K,). The joint regularization path's torus grids and zooms
    evaluate hundreds of thousands of pairs; in tensor passes the log-loss terms alone took
    most of their time."""
    n, T = keys.shape[0], keys.shape[1]
    z = np.empty(T)
    s = np.empty((n, T))
    xv = np.empty((n, T))
    terms = np.empty(n)
    for k in range(P.shape[0]):
        _softmax_rows(keys, P[k], z, s)
        _head_scores(X, V[k], xv)
        out[k] = _joint_log_loss_one(s, xv, y, code, terms)


@njit(cache=True)
def joint_log_loss_grid(keys, X, y, V, P, code, out):
    """``joint_log_losses`` for every V[a] and P[b], into ``out`` (A, B)."""
    n, T = keys.shape[0], keys.shape[1]
    z = np.empty(T)
    s = np.empty((n, T))
    terms = np.empty(n)
    xv_all = np.empty((V.shape[0], n, T))
    for a in range(V.shape[0]):
        _head_scores(X, V[a], xv_all[a])
    for b in range(P.shape[0]):
        _softmax_rows(keys, P[b], z, s)
        for a in range(V.shape[0]):
            out[a, b] = _joint_log_loss_one(s, xv_all[a], y, code, terms)
