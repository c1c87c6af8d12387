"""Hypothesis strategies for the linear NTP decoder of 2402.18551 (spec ntp.md §1.3, generator
(d) of §6.3, the Fig.-1/Fig.-2 supports of §4.3).

Generator (d): Gaussian context embeddings H̄ (d×m), random supports of a fixed size, Dirichlet(1)
next-token probabilities on each support, and context weights π̂ from multinomial counts (every
listed context is observed at least once, so π̂_j > 0). All continuous randomness comes from one
drawn seed into numpy's ``default_rng``; the size arguments take an int or a strategy.

Every draw is classified, never failed for what it turned out to be: compatibility by the
log-odds least-squares residual (``LinearNTP.compatibility``, spec §6.2: ≤ 1e-9), separability
by the certified NTP-SVM (optimal ⇒ separable, a Farkas pair ⇒ not), and H̄'s rank. The names
go into ``inst.assumptions`` and a Hypothesis ``event``. Strategies that promise a class screen
for it: they try successive sub-seeds of the drawn seed (a bounded number) and reject the draw
with an event only if none fits.

- ``linear_instances``: generator (d), classified.
- ``overparameterized_instances``: d ≥ m + extra, so H̄ has full column rank (Lemma 1).
- ``fig1_instances``: the Fig.-1/Fig.-2 supports (m = 3, V = 5) in dimension d, classified.
- ``separable_fig1_instances`` / ``nonseparable_fig1_instances``: the same, screened.
- ``one_hot_instances``: every |S_j| = 1 (Remark 1).
- ``twin_token_instances``: two tokens with identical support patterns (Fig. 2's w1 = w5).
- ``incompatible_instances``: control C12's family: a context embedding repeated with another
  distribution on the same support, so the log-odds equations contradict each other.
- ``resampled``: the same instance with new probabilities on the same supports.
- ``pooled_prefix_instance``: App. C's single instance of an autoregressive corpus (every
  prefix a context).
"""

from __future__ import annotations

import numpy as np
from hypothesis import assume, currently_in_test_context, event
from hypothesis import strategies as st

from strategies.instances import (
    FULL_RANK_CONTEXTS,
    NOT_NTP_COMPATIBLE,
    NOT_NTP_SEPARABLE,
    NTP_COMPATIBLE,
    NTP_SEPARABLE,
)
from strategies.ntp_instances import LinearNTPInstance

#: An RNG seed as a test argument (replayable from a saved counterexample).
SEEDS = st.integers(0, 2**32 - 1)

#: The supports of Fig. 1/Fig. 2 (spec §4.3), 0-indexed: {1,2,5}, {1,4,5}, {2,3,4} of V = 5.
#: Tokens 0 and 4 (the paper's words 1 and 5) have identical support patterns.
FIG1_SUPPORTS = ((0, 1, 4), (0, 3, 4), (1, 2, 3))
FIG1_VOCAB = 5
#: Screening: sub-seeds tried before a draw that promises a class is rejected (separable Fig.-1
#: draws in d = 2 are ~1 in 6, spec §2.11 [N]: 0.83^40 < 1e-3).
SCREEN_TRIES = 40
#: Multinomial sample size behind π̂ (per context, on average).
COUNTS_PER_CONTEXT = 50


def _event(what: str) -> None:
    """A Hypothesis event inside a test; nothing outside one (fixed pools built at import)."""
    if currently_in_test_context():
        event(what)


def _size(draw, value) -> int:
    """An int, or a draw from a strategy of ints."""
    return int(draw(value)) if isinstance(value, st.SearchStrategy) else int(value)


def random_supports(rng: np.random.Generator, m: int, V: int, size: int) -> np.ndarray:
    """(m, V) boolean mask: each context's support a uniform random subset of ``size`` tokens."""
    mask = np.zeros((m, V), dtype=bool)
    for j in range(m):
        mask[j, rng.choice(V, size=size, replace=False)] = True
    return mask


def dirichlet_rows(rng: np.random.Generator, mask: np.ndarray) -> np.ndarray:
    """P with row j Dirichlet(1) on the support mask[j] and exact zeros off it."""
    P = np.zeros(mask.shape)
    for j, row in enumerate(mask):
        idx = np.flatnonzero(row)
        P[j, idx] = rng.dirichlet(np.ones(len(idx)))
    return P


def multinomial_weights(rng: np.random.Generator, m: int) -> np.ndarray:
    """π̂ from multinomial counts: each context observed once, plus m·COUNTS_PER_CONTEXT − m
    uniform draws; π̂_j = count_j / total (> 0)."""
    n = m * COUNTS_PER_CONTEXT
    counts = 1 + rng.multinomial(n - m, np.full(m, 1.0 / m))
    return counts / counts.sum()


def classify(H, P, pi, *, promised=(), seed: int = 0, meta=None) -> LinearNTPInstance:
    """An instance with the assumptions it has: compatibility (lstsq residual), separability
    (certified NTP-SVM: optimal or Farkas), full column rank of H̄; each recorded as an event.
    ``promised`` names are checked to hold (a strategy bug otherwise)."""
    raw = LinearNTPInstance(H, P, pi, seed=seed, meta=dict(meta or {}))
    problem = raw.problem
    names = set()
    compatible = problem.compatibility().compatible
    names.add(NTP_COMPATIBLE if compatible else NOT_NTP_COMPATIBLE)
    separable = problem.ntp_svm().separable
    if separable is not None:
        names.add(NTP_SEPARABLE if separable else NOT_NTP_SEPARABLE)
    else:
        _event("NTP-SVM undecided (oracle failure)")
    if np.linalg.matrix_rank(problem.H) == problem.m:
        names.add(FULL_RANK_CONTEXTS)
    _event(
        f"{'compatible' if compatible else 'not compatible'}, "
        f"{ {True: 'separable', False: 'not separable', None: 'undecided'}[separable] }"
    )
    missing = set(promised) - names
    if missing:
        raise AssertionError(f"strategy promised {sorted(missing)}, the draw has {sorted(names)}")
    return LinearNTPInstance(H, P, pi, assumptions=names, seed=seed, meta=raw.meta)


def linear_data(seed: int, m: int, V: int, d: int, size: int | None = None, *, supports=None):
    """Generator (d) from one seed: (H̄, P, π̂). ``supports`` (m×V mask) overrides the random
    supports of ``size`` tokens."""
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((d, m))
    mask = random_supports(rng, m, V, size) if supports is None else np.asarray(supports, bool)
    return H, dirichlet_rows(rng, mask), multinomial_weights(rng, m)


def fig1_mask() -> np.ndarray:
    mask = np.zeros((len(FIG1_SUPPORTS), FIG1_VOCAB), dtype=bool)
    for j, S in enumerate(FIG1_SUPPORTS):
        mask[j, list(S)] = True
    return mask


def fig1_instance(seed: int, d: int = 2) -> LinearNTPInstance:
    """The Fig.-1/Fig.-2 supports in dimension d, from one seed, classified."""
    H, P, pi = linear_data(seed, 3, FIG1_VOCAB, d, supports=fig1_mask())
    return classify(H, P, pi, seed=seed, meta={"family": "fig1", "d": d})


#: App. A.2 of 2402.18551 (spec ntp §4.4): n = 5000 samples over m = 50 contexts in d = 60, V =
#: 10 tokens, supports of 6 tokens, Dirichlet(1) probabilities on them.
A2_SIZES = {"n": 5000, "m": 50, "d": 60, "V": 10, "support": 6}


def a2_instance(seed: int = 0) -> LinearNTPInstance:
    """The App. A.2 setup from one seed: contexts h̄_j ~ N(0, I_d), random supports of 6 of the
    10 tokens, Dirichlet(1) next-token probabilities, π̂ from n = 5000 samples (every context
    seen once, the rest multinomial). With d ≥ m the contexts have full column rank, which by
    Lemma 1 makes the data NTP-compatible and NTP-separable (LIN-COND-LEMMA1 checks the lemma;
    the oracles certify both again wherever a claim uses them), so it is not classified here:
    the two certified solves at this size take seconds."""
    n, m, d, V, size = (A2_SIZES[k] for k in ("n", "m", "d", "V", "support"))
    rng = np.random.default_rng(seed)
    H = rng.standard_normal((d, m))
    P = dirichlet_rows(rng, random_supports(rng, m, V, size))
    counts = 1 + rng.multinomial(n - m, np.full(m, 1.0 / m))
    if np.linalg.matrix_rank(H) != m:
        raise AssertionError(f"App. A.2 contexts of seed {seed} are not of full column rank")
    names = {FULL_RANK_CONTEXTS, NTP_COMPATIBLE, NTP_SEPARABLE}
    return LinearNTPInstance(H, P, counts / n, assumptions=names, seed=seed, meta={"family": "a2"})


def screened(build, seed: int, want: set[str], tries: int = SCREEN_TRIES):
    """The first of build(seed), build(seed + 1), ... whose assumptions include ``want``, or
    None after ``tries`` sub-seeds."""
    for k in range(tries):
        inst = build((seed + k) % 2**32)
        if want <= inst.assumptions:
            return inst
    return None


def _screen_or_reject(build, seed: int, want: set[str]):
    inst = screened(build, seed, want)
    if inst is None:
        _event(f"reject: no draw with {sorted(want)} in {SCREEN_TRIES} sub-seeds")
    assume(inst is not None)
    return inst


@st.composite
def linear_instances(
    draw, m=st.integers(2, 8), V=st.integers(3, 6), d=st.integers(2, 10), size=None
):
    """Generator (d): Gaussian H̄, random supports of ``size`` tokens (default: drawn in
    [1, V − 1]), Dirichlet(1) probabilities, multinomial π̂; classified, never screened."""
    m, V, d = _size(draw, m), _size(draw, V), _size(draw, d)
    s = _size(draw, size) if size is not None else draw(st.integers(1, V - 1))
    seed = draw(SEEDS)
    H, P, pi = linear_data(seed, m, V, d, min(s, V))
    return classify(H, P, pi, seed=seed, meta={"family": "generator-d", "size": s})


@st.composite
def overparameterized_instances(
    draw, m=st.integers(2, 8), V=st.integers(3, 6), extra=st.integers(1, 3), size=None
):
    """Generator (d) with d = m + extra (Lemma 1's d > m when extra ≥ 1; extra = 0 gives the
    refinement d = m): H̄ Gaussian, so of full column rank almost surely (checked)."""
    m, V, extra = _size(draw, m), _size(draw, V), _size(draw, extra)
    s = _size(draw, size) if size is not None else draw(st.integers(1, V - 1))
    seed = draw(SEEDS)
    H, P, pi = linear_data(seed, m, V, m + extra, min(s, V))
    inst = classify(H, P, pi, seed=seed, meta={"family": "overparameterized", "size": s})
    assert FULL_RANK_CONTEXTS in inst.assumptions, "Gaussian H̄ lost column rank"
    return inst


@st.composite
def fig1_instances(draw, d=2):
    """The Fig.-1 supports {1,2,5}, {1,4,5}, {2,3,4} (V = 5, m = 3) in dimension d, classified
    (in d = 2 about 1 draw in 6 is separable, all compatible: spec §2.11 [N])."""
    return fig1_instance(draw(SEEDS), _size(draw, d))


@st.composite
def separable_fig1_instances(draw, d=2):
    """Fig.-1 supports in dimension d, screened to NTP-separable and compatible."""
    d = _size(draw, d)
    want = {NTP_SEPARABLE, NTP_COMPATIBLE}
    return _screen_or_reject(lambda s: fig1_instance(s, d), draw(SEEDS), want)


@st.composite
def nonseparable_fig1_instances(draw, d=2):
    """Fig.-1 supports in dimension d, screened to compatible but NOT separable (control C11)."""
    d = _size(draw, d)
    want = {NOT_NTP_SEPARABLE, NTP_COMPATIBLE}
    return _screen_or_reject(lambda s: fig1_instance(s, d), draw(SEEDS), want)


@st.composite
def one_hot_instances(draw, m=st.integers(2, 8), V=st.integers(2, 6), d=st.integers(2, 10)):
    """Every support a single token (Remark 1: plain multiclass data), classified."""
    return draw(linear_instances(m=m, V=V, d=d, size=1))


@st.composite
def twin_token_instances(draw, m=st.integers(2, 6), V=st.integers(4, 6), d=st.integers(2, 8)):
    """Random supports (each of size in [2, V − 1]) where token b's pattern is set equal to token
    a's (a ≠ b drawn): b ∈ S_j iff a ∈ S_j, for every j (Fig. 2's w1 = w5). Classified; meta
    ``twins`` = (a, b)."""
    m, V, d = _size(draw, m), _size(draw, V), _size(draw, d)
    a, b = draw(st.lists(st.integers(0, V - 1), min_size=2, max_size=2, unique=True))
    seed = draw(SEEDS)
    rng = np.random.default_rng(seed)
    mask = np.zeros((m, V), dtype=bool)
    for j in range(m):
        while True:
            row = np.zeros(V, dtype=bool)
            row[rng.choice(V, size=int(rng.integers(2, V)), replace=False)] = True
            row[b] = row[a]
            if 1 <= row.sum() < V:
                break
        mask[j] = row
    H, P, pi = linear_data(seed, m, V, d, supports=mask)
    return classify(H, P, pi, seed=seed, meta={"family": "twins", "twins": (a, b)})


@st.composite
def incompatible_instances(draw, m=st.integers(2, 6), V=st.integers(3, 6), size=st.integers(2, 3)):
    """Control C12's family: m contexts with linearly independent embeddings (d = m + 1) and
    random supports, plus a repeat of context 0's embedding with a fresh Dirichlet(1)
    distribution on the same support: the repeat's log-odds contradict context 0's, so the
    data are not compatible, and (H̄ of rank m with repeats sharing supports) separable.
    Classified, with both promised."""
    m, V = _size(draw, m), _size(draw, V)
    s = min(_size(draw, size), V - 1)
    seed = draw(SEEDS)
    H, P, pi = linear_data(seed, m, V, m + 1, s)
    rng = np.random.default_rng([seed, 1])
    H = np.hstack([H, H[:, :1]])
    P = np.vstack([P, dirichlet_rows(rng, P[:1] > 0)])
    pi = multinomial_weights(rng, m + 1)
    return classify(
        H,
        P,
        pi,
        promised=(NOT_NTP_COMPATIBLE, NTP_SEPARABLE),
        seed=seed,
        meta={"family": "repeated-context", "repeat": (0, m)},
    )


def resampled(inst: LinearNTPInstance, seed: int) -> LinearNTPInstance:
    """``inst`` with fresh Dirichlet(1) probabilities on the same supports (H̄, π̂ kept),
    classified again."""
    rng = np.random.default_rng([seed, 2])
    P = dirichlet_rows(rng, inst.problem.support)
    return classify(inst.H, P, inst.pi, seed=inst.seed, meta={**inst.meta, "resampled": seed})


def pooled_prefix_instance(sequences, V: int, embed) -> LinearNTPInstance:
    """App. C: every prefix (of every length) of every sequence is a context; π̂ its share of
    all next-token positions, p̂ its next-token frequencies. ``embed`` maps a prefix (a tuple)
    to its context embedding, called once per distinct prefix in sorted order. Promises no
    assumption: every π̂_j > 0 and every row of p̂ sums to 1 by construction, unclassified."""
    counts: dict[tuple, np.ndarray] = {}
    for seq in sequences:
        for t in range(1, len(seq)):
            counts.setdefault(tuple(seq[:t]), np.zeros(V))[seq[t]] += 1
    ctx = sorted(counts)
    n = np.array([counts[c].sum() for c in ctx])
    P = np.array([counts[c] / counts[c].sum() for c in ctx])
    H = np.stack([embed(c) for c in ctx], axis=1)
    return LinearNTPInstance(H, P, n / n.sum(), meta={"family": "autoregressive"})
