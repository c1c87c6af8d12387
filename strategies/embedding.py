"""Hypothesis strategies for the `<cls>`-attention model with trained embeddings (2505.17282).

Generators of spec embeddings §6 (G1, G2), the K-level stand-in (§2), the two-relevant-token
control (§3.4, N6) and the pseudo-IMDB corpus G3 (§4.2). Sizes accept an int or a strategy;
continuous values come from a drawn seed feeding ``torch.Generator`` (see strategies.prompt).

Shared initialization (spec §6): E0 rows i.i.d. N(0, I/d) (GAUSSIAN_EMBEDDINGS); v ~ N(0, I/d)
normalised to ‖v‖ = 1 (UNIT_HEAD); p0 = 0 is implied (instances carry no p0). By default
d = max(|S| + 1, choice{64, 128, 256}), so |S| ≤ d − 1 (DIM_EXCEEDS_VOCAB); an explicit ``d``
overrides it (to build |S| > d controls), and the assumption is then claimed only if it holds.

Signed frequencies α_s = (1/n) Σ_i y_i n_s(X_i)/T are designed through integer counts, so the
statements "α_s = 0 exactly" and "equal within a group" hold for the integer sums Σ_i y_i n_s(X_i);
evaluate them that way (a float mean may add rounding of order 1e-17).
"""

from __future__ import annotations

import torch
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from models.problems.embedding import gaussian_init
from strategies.instances import (
    DIM_EXCEEDS_VOCAB,
    GAUSSIAN_EMBEDDINGS,
    GENERAL_FREQUENCIES,
    K_LEVEL,
    SINGLE_RELEVANT_TOKEN,
    TWO_RELEVANT_TOKENS,
    UNIT_HEAD,
    ZIPF_CORPUS,
    EmbeddingInstance,
)
from strategies.ladder import RUNGS
from strategies.prompt import _draw, _float_arg, _generator, _int_arg, _labels, _perm

Tensor = torch.Tensor
DTYPE = torch.float64
DEFAULT_DIMS = (64, 128, 256)

__all__ = [
    "single_relevant_token_instances",
    "rung_single_relevant_token_instances",
    "general_frequency_instances",
    "k_level_instances",
    "two_relevant_instances",
    "zipf_corpus",
    "zipf_instance",
    "gaussian_init",
]


def _dim(draw, d, vocab: int) -> tuple[int, set[str]]:
    """The embedding dimension and the assumptions it brings (DIM_EXCEEDS_VOCAB if |S| ≤ d−1)."""
    if d is None:
        d = max(vocab + 1, draw(st.sampled_from(DEFAULT_DIMS)))
    else:
        d = _int_arg(draw, d, "d", 1)
    return d, ({DIM_EXCEEDS_VOCAB} if vocab <= d - 1 else set())


def _eta0(draw, eta0) -> float:
    return _float_arg(draw, eta0, "eta0", 0.0, 1e6, open_lo=True)


def _covering(gen: torch.Generator, count: int, ids: list[int]) -> list[int]:
    """``count`` tokens from ``ids`` in random order, each id at least once if count ≥ len(ids)."""
    first = [ids[j] for j in _perm(gen, len(ids))][:count]
    rest = torch.randint(0, len(ids), (count - len(first),), generator=gen).tolist()
    chosen = first + [ids[j] for j in rest]
    return [chosen[j] for j in _perm(gen, count)]


def _shuffled(gen: torch.Generator, tokens: list[int]) -> list[int]:
    return [tokens[j] for j in _perm(gen, len(tokens))]


def _paired_instance(
    gen: torch.Generator,
    rows,
    labels,
    star,
    vocab: int,
    d: int,
    *,
    per_row=None,
    meta,
    init_shift=None,
    **fields,
) -> EmbeddingInstance:
    """A paired builder's instance (G1, two-relevant): the sequences, labels and s* in one random
    order, then the Gaussian embeddings, both drawn from ``gen`` in that order (the builders'
    draw stream, so a seed keeps its instance). ``per_row``: meta lists with one entry per
    sequence, put in the same order ahead of ``meta``; ``fields`` go to EmbeddingInstance.
    ``init_shift``: {token: c} adds c·v to E⁰_token after the draw (consumes no randomness)."""
    order = _perm(gen, len(rows))
    E0, v = gaussian_init(gen, vocab, d)
    for token, c in (init_shift or {}).items():
        E0[token] += c * v

    def ordered(values):
        return [values[k] for k in order]

    return EmbeddingInstance(
        sequences=torch.tensor(ordered(rows), dtype=torch.int64),
        y=torch.tensor(ordered(labels), dtype=DTYPE),
        E0=E0,
        v=v,
        s_star=torch.tensor(ordered(star), dtype=torch.int64),
        meta={**{key: ordered(values) for key, values in (per_row or {}).items()}, **meta},
        **fields,
    )


def _base_assumptions(dim_assumptions: set[str]) -> set[str]:
    return {GAUSSIAN_EMBEDDINGS, UNIT_HEAD} | dim_assumptions


# ---- G1: Assumption 1 ------------------------------------------------------------------------


@st.composite
def single_relevant_token_instances(
    draw,
    n_pairs=st.integers(10, 60),
    T=st.integers(3, 8),
    n_pos=st.integers(1, 3),
    n_neg=st.integers(1, 3),
    n_irr=st.integers(4, 30),
    d=None,
    eta0=st.sampled_from([20.0, 50.0, 100.0]),
):
    """Generator G1 (spec embeddings §6): Assumption 1 by a paired construction.

    Token ids [0, n_pos) are completely positive, [n_pos, n_pos + n_neg) completely negative,
    the remaining n_irr irrelevant. Each of the n_pairs pairs shares T − 1 irrelevant tokens
    (uniform, with replacement); its positive sequence adds one completely positive token and
    its negative sequence one completely negative token; positions and sequence order are
    shuffled. Guarantees SINGLE_RELEVANT_TOKEN: every sequence holds exactly one relevant token
    ``s_star[i]`` (positive tokens occur only in positive sequences and vice versa), and every
    irrelevant token occurs equally often in the two halves of each pair, so
    Σ_i y_i n_s(X_i) = 0 exactly. Every relevant id occurs when n_pairs ≥ n_pos, n_neg;
    ``relevant`` is the set of relevant ids that occur. Also GAUSSIAN_EMBEDDINGS, UNIT_HEAD and,
    unless ``d`` overrides it below |S| + 1, DIM_EXCEEDS_VOCAB.
    """
    n_pairs = _int_arg(draw, n_pairs, "n_pairs", 1)
    T = _int_arg(draw, T, "T", 2)
    n_pos = _int_arg(draw, n_pos, "n_pos", 1)
    n_neg = _int_arg(draw, n_neg, "n_neg", 1)
    n_irr = _int_arg(draw, n_irr, "n_irr", 1)
    vocab = n_pos + n_neg + n_irr
    d, dim_assumptions = _dim(draw, d, vocab)
    eta = _eta0(draw, eta0)
    seed, gen = _generator(draw)
    pos_ids = list(range(n_pos))
    neg_ids = list(range(n_pos, n_pos + n_neg))
    pos_tok = _covering(gen, n_pairs, pos_ids)
    neg_tok = _covering(gen, n_pairs, neg_ids)
    fill = (n_pos + n_neg + torch.randint(0, n_irr, (n_pairs, T - 1), generator=gen)).tolist()
    rows, labels, star, pair = [], [], [], []
    for j in range(n_pairs):
        for tok, label in ((pos_tok[j], 1.0), (neg_tok[j], -1.0)):
            rows.append(_shuffled(gen, [tok, *fill[j]]))
            labels.append(label)
            star.append(tok)
            pair.append(j)
    return _paired_instance(
        gen,
        rows,
        labels,
        star,
        vocab,
        d,
        eta0=eta,
        assumptions={SINGLE_RELEVANT_TOKEN} | _base_assumptions(dim_assumptions),
        seed=seed,
        relevant=frozenset(pos_tok) | frozenset(neg_tok),
        per_row={"pair": pair},
        meta={
            "positive_tokens": tuple(pos_ids),
            "negative_tokens": tuple(neg_ids),
            "irrelevant_tokens": tuple(range(n_pos + n_neg, vocab)),
        },
    )


#: G1's own counts of relevant token ids, which the rungs keep (the recipe's n_pos, n_neg).
G1_RELEVANT_IDS = (1, 3)


@st.composite
def rung_single_relevant_token_instances(draw, rung: str = "medium"):
    """Generator G1 on a rung of the size ladder (``strategies.ladder.RUNGS``): the same recipe
    as ``single_relevant_token_instances`` (n_pos, n_neg ∈ [1, 3], η0 ∈ {20, 50, 100}, Gaussian
    E⁰, unit head), with its sizes drawn over the rung's box instead of the spec's ranges:
    n = 2·n_pairs ≤ n_max (n_pairs ∈ [1, n_max // 2]), T ∈ [2, min(T_max, nT_max // n)], the
    irrelevant tokens n_irr ∈ [1, d_max − 1 − n_pos − n_neg] and d ∈ [|S| + 1, d_max], so that
    |S| ≤ d − 1 (DIM_EXCEEDS_VOCAB) always holds. At the medium rung (n, T ≤ 32, d ≤ 128) that
    reaches sequences four times longer than the spec's (T ≤ 8), vocabularies of up to 127
    tokens (spec: ≤ 36) and d down to |S| + 1 (spec: d ≥ 64 ≥ |S| + 28); n ≤ 32 and d ≤ 128
    stay below the spec's n ≤ 120 and d ≤ 256."""
    box = RUNGS[rung]
    lo, hi = G1_RELEVANT_IDS
    n_pairs = draw(st.integers(1, box.n_max // 2))
    T = draw(st.integers(2, min(box.T_max, box.nT_max // (2 * n_pairs))))
    n_pos = draw(st.integers(lo, min(hi, box.d_max - 3)))  # room for |S| ≥ n_pos + 2 < d
    n_neg = draw(st.integers(lo, min(hi, box.d_max - 2 - n_pos)))
    n_irr = draw(st.integers(1, box.d_max - 1 - n_pos - n_neg))
    vocab = n_pos + n_neg + n_irr
    return draw(
        single_relevant_token_instances(
            n_pairs=n_pairs,
            T=T,
            n_pos=n_pos,
            n_neg=n_neg,
            n_irr=n_irr,
            d=st.integers(vocab + 1, box.d_max),
        )
    )


# ---- G2: general label-dependent frequencies ---------------------------------------------------


@st.composite
def general_frequency_instances(
    draw,
    S=st.integers(5, 40),
    T=st.integers(2, 10),
    n=st.integers(10, 300),
    d=st.sampled_from([64, 256, 1024, 4096]),
    eta0=st.sampled_from([0.1, 1.0, 10.0, 100.0]),
):
    """Generator G2 (spec embeddings §6): a continuum of signed frequencies.

    Labels uniform in {±1}; b_s ~ N(0, 1); the tokens of X_j are i.i.d. from softmax(y_j b)
    (``meta["b"]``). Guarantees GENERAL_FREQUENCIES, GAUSSIAN_EMBEDDINGS, UNIT_HEAD, labels
    ±1 and token ids < |S|; DIM_EXCEEDS_VOCAB when |S| ≤ d − 1 (always with the default d).
    ``d=None`` uses max(|S| + 1, choice{64, 128, 256}).
    """
    vocab = _int_arg(draw, S, "S", 1)
    T = _int_arg(draw, T, "T", 1)
    n = _int_arg(draw, n, "n", 1)
    d, dim_assumptions = _dim(draw, d, vocab)
    eta = _eta0(draw, eta0)
    seed, gen = _generator(draw)
    y = _labels(gen, n)
    b = torch.randn(vocab, generator=gen, dtype=DTYPE)
    seqs = torch.empty((n, T), dtype=torch.int64)
    for sign in (1.0, -1.0):
        rows = y == sign
        count = int(rows.sum())
        if count:
            probs = torch.softmax(sign * b, dim=0)
            draws = torch.multinomial(probs, count * T, replacement=True, generator=gen)
            seqs[rows] = draws.view(count, T)
    E0, v = gaussian_init(gen, vocab, d)
    return EmbeddingInstance(
        sequences=seqs,
        y=y,
        E0=E0,
        v=v,
        eta0=eta,
        assumptions={GENERAL_FREQUENCIES} | _base_assumptions(dim_assumptions),
        seed=seed,
        meta={"b": b},
    )


# ---- K-level stand-in ------------------------------------------------------------------------


@st.composite
def k_level_instances(
    draw,
    K=st.integers(2, 5),
    group_size=st.integers(1, 5),
    T=st.integers(2, 8),
    d=None,
    eta0=st.sampled_from([0.1, 1.0, 10.0, 100.0]),
    levels=None,
):
    """The K-level stand-in (spec embeddings §2): K groups of tokens with common α levels.

    Group k gets a distinct integer j_k (drawn from [−K−1, K+1] unless ``levels`` gives K
    distinct ints), sorted increasingly. Every token of group k occurs exactly T·a_k⁺ times
    in positive sequences and T·a_k⁻ times in negative ones, with a_k⁺ − a_k⁻ = j_k; the
    occurrences of each class are shuffled and cut into sequences of length T, so there are
    n₊ = Σ_k m_k a_k⁺ positive and n₋ = Σ_k m_k a_k⁻ negative sequences (both ≥ 1). Hence
    Σ_i y_i n_s(X_i) = T j_k and α_s = j_k/n exactly for every s in group k: K_LEVEL with K
    distinct levels, strictly increasing along ``groups`` (token-id tuples; ids are randomly
    permuted across groups). ``meta["levels"]`` = j_k/n, ``meta["level_counts"]`` = j_k.
    Also GAUSSIAN_EMBEDDINGS, UNIT_HEAD, DIM_EXCEEDS_VOCAB (default d).
    """
    K = _int_arg(draw, K, "K", 1)
    T = _int_arg(draw, T, "T", 1)
    if levels is None:
        span = K + 1
        js = draw(st.lists(st.integers(-span, span), min_size=K, max_size=K, unique=True))
    else:
        js = [int(j) for j in _draw(draw, levels)]
        if len(js) != K or len(set(js)) != K:
            raise InvalidArgument(f"levels: expected {K} distinct integers, got {js}")
    js = sorted(js)
    sizes = [_int_arg(draw, group_size, "group_size", 1) for _ in range(K)]
    extra = [draw(st.integers(0, 2)) for _ in range(K)]
    neg_mult = [max(0, -j) + e for j, e in zip(js, extra, strict=True)]
    pos_mult = [a + j for a, j in zip(neg_mult, js, strict=True)]
    n_pos = sum(m * a for m, a in zip(sizes, pos_mult, strict=True))
    n_neg = sum(m * a for m, a in zip(sizes, neg_mult, strict=True))
    if n_pos == 0 or n_neg == 0:  # one more occurrence pair for group 0 keeps every j_k
        pos_mult[0] += 1
        neg_mult[0] += 1
        n_pos, n_neg = n_pos + sizes[0], n_neg + sizes[0]
    vocab = sum(sizes)
    d, dim_assumptions = _dim(draw, d, vocab)
    eta = _eta0(draw, eta0)
    seed, gen = _generator(draw)
    ids = _perm(gen, vocab)
    groups, start = [], 0
    for m in sizes:
        groups.append(tuple(sorted(ids[start : start + m])))
        start += m
    pos_tokens, neg_tokens = [], []
    for group, a_pos, a_neg in zip(groups, pos_mult, neg_mult, strict=True):
        for s in group:
            pos_tokens += [s] * (T * a_pos)
            neg_tokens += [s] * (T * a_neg)
    pos_seqs = torch.tensor(_shuffled(gen, pos_tokens), dtype=torch.int64).view(n_pos, T)
    neg_seqs = torch.tensor(_shuffled(gen, neg_tokens), dtype=torch.int64).view(n_neg, T)
    seqs = torch.cat([pos_seqs, neg_seqs])
    y = torch.cat([torch.ones(n_pos, dtype=DTYPE), -torch.ones(n_neg, dtype=DTYPE)])
    order = torch.as_tensor(_perm(gen, n_pos + n_neg))
    n = n_pos + n_neg
    E0, v = gaussian_init(gen, vocab, d)
    return EmbeddingInstance(
        sequences=seqs[order],
        y=y[order],
        E0=E0,
        v=v,
        eta0=eta,
        assumptions={K_LEVEL} | _base_assumptions(dim_assumptions),
        seed=seed,
        groups=tuple(groups),
        meta={
            "K": K,
            "level_counts": tuple(js),
            "levels": tuple(j / n for j in js),
            "positive_occurrences": tuple(T * a for a in pos_mult),
            "negative_occurrences": tuple(T * a for a in neg_mult),
        },
    )


# ---- two relevant tokens (N6) ----------------------------------------------------------------

STRONG_POS, STRONG_NEG, WEAK_POS, WEAK_NEG = 0, 1, 2, 3


@st.composite
def two_relevant_instances(
    draw,
    n_pairs=st.integers(6, 40),
    T=st.integers(3, 8),
    n_irr=st.integers(4, 20),
    weak_fraction=1 / 3,
    d=None,
    eta0=st.sampled_from([20.0, 50.0, 100.0]),
    weak_boost=0.0,
):
    """Strong and weak relevant tokens in every sequence (spec embeddings §3.4, N6).

    Ids: 0 strong positive, 1 strong negative, 2 weak positive (w+), 3 weak negative (w−),
    then n_irr irrelevant. Pair j shares T − 3 irrelevant fillers; its positive sequence is
    [0, w+, slot, fillers], its negative one [1, w−, slot', fillers]. In F = clip(round(
    weak_fraction·n_pairs), 1, n_pairs − 1) flagged pairs slot = w− and slot' = w+ (the weak
    tokens cross over), otherwise slot = slot' = one shared irrelevant token. So, in units of
    1/(nT): α_0 = n_pairs, α_2 = n_pairs − F > 0 (w+ also occurs in F negative sequences),
    α_3 = −α_2, α_1 = −α_0, and every irrelevant token has Σ_i y_i n_s(X_i) = 0 exactly.
    Guarantees TWO_RELEVANT_TOKENS: ``s_star[i]`` (the strong token of its label) is the
    unique argmax of y_i α_s over the sequence, by a gap F/(nT); Assumption 1 fails (w± are
    relevant but not completely signed). ``relevant`` = {0, 1, 2, 3}.

    ``weak_boost`` = b ≥ 0 (a value or a strategy) plants an initial lead for the weak tokens:
    E⁰_{w±} += ±b·λ·v with λ = η0·F/(4·T·n_pairs), the strong token's expected one-step lead
    (η0/2)·(α_strong − α_weak) over the weak one. Around b = 1 the argmax of y⟨E¹_s, v⟩ is
    the weak token in some draws and the strong one in others; for b > 0, E⁰ is not Gaussian
    (GAUSSIAN_EMBEDDINGS is not claimed) and ``meta["weak_boost"]`` records b. s* stays the
    strong token (the argmax of y α).
    """
    n_pairs = _int_arg(draw, n_pairs, "n_pairs", 2)
    T = _int_arg(draw, T, "T", 3)
    n_irr = _int_arg(draw, n_irr, "n_irr", 1)
    frac = _float_arg(draw, weak_fraction, "weak_fraction", 0.0, 1.0)
    vocab = 4 + n_irr
    d, dim_assumptions = _dim(draw, d, vocab)
    eta = _eta0(draw, eta0)
    boost = _float_arg(draw, weak_boost, "weak_boost", 0.0, 1e3)
    seed, gen = _generator(draw)
    F = min(max(round(frac * n_pairs), 1), n_pairs - 1)
    lead = eta * F / (4 * T * n_pairs)
    base = _base_assumptions(dim_assumptions)
    if boost > 0:
        base.discard(GAUSSIAN_EMBEDDINGS)
    flagged = set(_perm(gen, n_pairs)[:F])
    fill = (4 + torch.randint(0, n_irr, (n_pairs, T - 2), generator=gen)).tolist()
    rows, labels, star = [], [], []
    for j in range(n_pairs):
        slot_pos, slot_neg = (WEAK_NEG, WEAK_POS) if j in flagged else (fill[j][0],) * 2
        rest = fill[j][1:]
        rows.append(_shuffled(gen, [STRONG_POS, WEAK_POS, slot_pos, *rest]))
        rows.append(_shuffled(gen, [STRONG_NEG, WEAK_NEG, slot_neg, *rest]))
        labels += [1.0, -1.0]
        star += [STRONG_POS, STRONG_NEG]
    return _paired_instance(
        gen,
        rows,
        labels,
        star,
        vocab,
        d,
        eta0=eta,
        assumptions={TWO_RELEVANT_TOKENS} | base,
        seed=seed,
        relevant=frozenset({STRONG_POS, STRONG_NEG, WEAK_POS, WEAK_NEG}),
        init_shift={WEAK_POS: boost * lead, WEAK_NEG: -boost * lead} if boost > 0 else None,
        meta={
            **({"weak_boost": boost} if boost > 0 else {}),
            "strong": (STRONG_POS, STRONG_NEG),
            "weak": (WEAK_POS, WEAK_NEG),
            "flagged_pairs": F,
            "signed_counts": {  # Σ_i y_i n_s(X_i) for the relevant tokens
                STRONG_POS: n_pairs,
                STRONG_NEG: -n_pairs,
                WEAK_POS: n_pairs - F,
                WEAK_NEG: -(n_pairs - F),
            },
        },
    )


# ---- G3: pseudo-IMDB corpus --------------------------------------------------------------------


def _zipf(seed, S, n, T, sigma, clip, n_stop, stop_shrink):
    for name, value in (("S", S), ("n", n), ("T", T)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name}: expected a positive int, got {value!r}")
    gen = torch.Generator().manual_seed(int(seed))
    z = 1.0 / torch.arange(1, S + 1, dtype=DTYPE)
    z = z / z.sum()
    b = (sigma * torch.randn(S, generator=gen, dtype=DTYPE)).clamp(-clip, clip)
    b[: min(n_stop, S)] *= stop_shrink
    y = torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    seqs = torch.empty((n, T), dtype=torch.int64)
    for sign in (1.0, -1.0):
        rows = y == sign
        count = int(rows.sum())
        if count:
            probs = z * (1.0 + sign * b)
            draws = torch.multinomial(probs / probs.sum(), count * T, True, generator=gen)
            seqs[rows] = draws.view(count, T)
    return seqs, y, b, z


def zipf_corpus(
    seed: int,
    S: int = 300,
    n: int = 2000,
    T: int = 30,
    *,
    sigma: float = 0.5,
    clip: float = 0.98,
    n_stop: int = 20,
    stop_shrink: float = 0.1,
) -> tuple[Tensor, Tensor]:
    """Generator G3, the pseudo-IMDB corpus (spec embeddings §4.2): (sequences, labels).

    Token s (id s − 1) has Zipf base frequency z_s ∝ 1/s and posterior bias
    b_s ~ N(0, sigma²) clipped to ±clip; the n_stop most frequent tokens ("stopwords") have b
    multiplied by stop_shrink. Labels are uniform ±1, and the tokens of a sequence with label
    y are i.i.d. with P(s | y) ∝ z_s (1 + y b_s). Deterministic in ``seed``.
    """
    seqs, y, _, _ = _zipf(seed, S, n, T, sigma, clip, n_stop, stop_shrink)
    return seqs, y


def zipf_instance(
    seed: int, d: int = 32, eta0: float = 1.0, *, unit_head: bool = False, **corpus
) -> EmbeddingInstance:
    """``zipf_corpus(seed, **corpus)`` with E0 ~ N(0, I/d) and v ~ N(0, I/d) (spec §4.2: d = 32).

    ``meta`` holds the biases ``b`` and base frequencies ``z``. ``eta0`` is nominal: G3 is
    trained by Adam on (E, p) rather than by one step. Guarantees ZIPF_CORPUS and
    GAUSSIAN_EMBEDDINGS (UNIT_HEAD only with ``unit_head=True``); the default |S| = 300 > d.
    """
    keys = ("S", "n", "T", "sigma", "clip", "n_stop", "stop_shrink")
    unknown = set(corpus) - set(keys)
    if unknown:
        raise ValueError(f"corpus: unknown arguments {sorted(unknown)}")
    params = {"S": 300, "n": 2000, "T": 30, "sigma": 0.5, "clip": 0.98}
    params |= {"n_stop": 20, "stop_shrink": 0.1} | corpus
    seqs, y, b, z = _zipf(seed, *(params[k] for k in keys))
    gen = torch.Generator().manual_seed(int(seed) + 1)
    E0, v = gaussian_init(gen, params["S"], d, unit_head=unit_head)
    assumptions = {ZIPF_CORPUS, GAUSSIAN_EMBEDDINGS}
    if unit_head:
        assumptions.add(UNIT_HEAD)
    if params["S"] <= d - 1:
        assumptions.add(DIM_EXCEEDS_VOCAB)
    return EmbeddingInstance(
        sequences=seqs,
        y=y,
        E0=E0,
        v=v,
        eta0=eta0,
        assumptions=assumptions,
        seed=int(seed),
        meta={"b": b, "z": z, **{k: params[k] for k in keys}},
    )
