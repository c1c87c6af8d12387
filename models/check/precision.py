"""Does float64 still represent an instance? The precision guard of ``python -m theorems check``.

Every answer of ``models.check.predict`` and ``models.check.cross_predict`` is computed in float64,
and a certificate computed there (an SVM's KKT point or Farkas vector, a converged flow) speaks for
the exact instance only while float64 resolves what the answer depends on. Each function here
returns None when it does, or a one-line reason starting "precision: " naming the quantity
that float64 no longer represents; the predictors then answer "inconclusive" with that reason
instead of computing anything.

What the answers depend on, per model:

- prompt (keys k = xW, scores γ = y·xᵀv) and cross (keys vec(x zᵀ), scores γ = y·xᵀv): the
  differences of two tokens' keys and scores within one input (the rows of every SVM, the
  logit and score gaps of every flow). A key or score is computed with an error of a few
  units of 2^-52 times the magnitude of its terms (|x|·|W|, |x|·|z|, |x|·|v|); a nonzero
  difference below RESOLUTION such units is not resolved. An exact tie (a zero difference of
  the exact instance, decided in rational arithmetic) is no problem: it is a tie in float64
  too.
- embedding: the rows E¹_s = E⁰_s − η0·∇_s L of the one step and their differences within
  one sequence. E¹_s is computed with an error of a few units of 2^-52 times |E⁰_s| + |η0∇_s|;
  the difference E⁰_s − E⁰_t of two rows is absorbed by the step when it is below RESOLUTION
  such units (η0 = 1e300 on unit embeddings: every E⁰ row is lost, and tokens whose steps
  coincide come out equal in float64 although their exact rows differ), and a difference
  E¹_s − E¹_t is not resolved when it is below them. An exact tie (equal E⁰ rows and equal
  float64 gradients) is no problem.
- every model: keys, scores and E¹ must be finite, and the SVMs and flows square the keys
  and the inverses of their differences: keys beyond LARGEST or a nonzero key difference
  below SMALLEST leave float64's range (measured: keys of size 1e-200 give a Farkas
  certificate with ‖Aᵀy‖ = 0 for a feasible SVM, the squares having underflowed).

The reasons name the first offending quantity found (input or sequence, tokens, sizes).
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np

#: float64 machine epsilon, 2^-52.
EPS = 2.0**-52
#: A difference counts as resolved when it exceeds RESOLUTION·EPS times the magnitude of the
#: terms it is computed from (RESOLUTION covers the d-term sums of a key or a score, and
#: leaves the flows some digits to work with).
RESOLUTION = 1e3
#: The range whose squares (and the squares of whose inverses) float64 holds with room to
#: spare (float64 reaches 1.8e308 and, normalised, 2.2e-308).
LARGEST = 1e150
SMALLEST = 1e-150
#: Entries of one block of pairwise differences (bounds the memory of a large input).
_BLOCK = 1 << 22

_UNIT = f"{RESOLUTION:g}·2^-52"


def _np(x) -> np.ndarray:
    if callable(getattr(x, "detach", None)):
        x = x.detach().cpu().numpy()
    return np.asarray(x, dtype=np.float64)


def _pairs(count: int, width: int):
    """(rows, cols) index blocks of every pair r < c of `count` items, about _BLOCK/width
    entries at a time."""
    rows, cols = np.triu_indices(count, k=1)
    step = max(1, _BLOCK // max(1, width))
    for k in range(0, len(rows), step):
        yield rows[k : k + step], cols[k : k + step]


def _exact_zero(xs: np.ndarray, xt: np.ndarray, M: np.ndarray) -> bool:
    """(x_s − x_t)ᵀM == 0 in exact rational arithmetic on the float64 entries."""
    diff = [Fraction(float(a)) - Fraction(float(b)) for a, b in zip(xs, xt, strict=True)]
    for col in M.T:
        total = sum((dk * Fraction(float(m)) for dk, m in zip(diff, col, strict=True) if m), 0)
        if total != 0:
            return False
    return True


def _linear(X: np.ndarray, M: np.ndarray, what: str, *, squared: bool) -> str | None:
    """The images xᵀM of the tokens of every input (keys: M = W; scores: M = v): finite, their
    nonzero within-input differences resolved and, when the SVMs square them (``squared``),
    inside [SMALLEST, LARGEST]."""
    with np.errstate(over="ignore", invalid="ignore"):
        images = X @ M
        scale = np.abs(X) @ np.abs(M)  # the magnitude of the terms of each image
    for i in range(X.shape[0]):
        if not np.isfinite(images[i]).all() or not np.isfinite(scale[i]).all():
            return f"precision: the {what} of input {i} overflow float64"
        token_scale = scale[i].max(axis=-1)
        for rows, cols in _pairs(X.shape[1], X.shape[2] + M.shape[1]):
            differ = (X[i, rows] != X[i, cols]).any(axis=-1)
            gap = np.abs((X[i, rows] - X[i, cols]) @ M).max(axis=-1)
            resolution = RESOLUTION * EPS * np.maximum(token_scale[rows], token_scale[cols])
            for k in np.flatnonzero(differ & (gap <= resolution)):
                s, t = int(rows[k]), int(cols[k])
                if _exact_zero(X[i, s], X[i, t], M):
                    continue  # an exact tie: a tie in float64 too
                if resolution[k] == 0:  # the products x·M underflowed
                    return (
                        f"precision: the {what} of tokens {s} and {t} of input {i} underflow "
                        "float64 (their exact difference is not 0)"
                    )
                return (
                    f"precision: the {what} of tokens {s} and {t} of input {i} differ by "
                    f"{gap[k]:.1e}, below float64's resolution {resolution[k]:.1e} "
                    f"({_UNIT} of their magnitude {resolution[k] / (RESOLUTION * EPS):.1e})"
                )
            if squared:
                tiny = differ & (gap > resolution) & (gap < SMALLEST)
                for k in np.flatnonzero(tiny)[:1]:
                    return (
                        f"precision: the {what} of tokens {rows[k]} and {cols[k]} of input {i} "
                        f"differ by only {gap[k]:.1e} (< {SMALLEST:.0e}): the squared norm of "
                        "an SVM solution separating them overflows float64"
                    )
        if squared and np.abs(images[i]).max() > LARGEST:
            return (
                f"precision: the {what} of input {i} reach {np.abs(images[i]).max():.1e}, beyond "
                f"{LARGEST:.0e}: the SVMs' squares of them overflow float64"
            )
    return None


def prompt(X, v, W=None, p0=None) -> str | None:
    """None if float64 represents the prompt instance (keys XW, scores Xv, initial logits
    XWp0), else the reason (module docstring)."""
    X, v = _np(X), _np(v)
    W = np.eye(X.shape[-1]) if W is None else _np(W)
    reason = _linear(X, W, "keys x·W", squared=True) or _linear(
        X, v[:, None], "scores x·v", squared=False
    )
    if reason or p0 is None:
        return reason
    p0 = _np(p0)
    if np.abs(p0).max(initial=0.0) > LARGEST:
        return f"precision: p0 reaches {np.abs(p0).max():.1e}, beyond {LARGEST:.0e}"
    with np.errstate(over="ignore", invalid="ignore"):
        logits = (X @ W) @ p0
    if not np.isfinite(logits).all():
        return "precision: the initial logits x·W·p0 overflow float64"
    return None


def cross(X, Z, v) -> str | None:
    """None if float64 represents the cross instance (keys vec(x_it z_iᵀ), scores x·v), else
    the reason. The keys' differences are (x_it − x_it') z_iᵀ: resolved exactly when the
    tokens' own difference is (z_i scales the difference and its magnitude alike)."""
    X, Z, v = _np(X), _np(Z), _np(v)
    for i in range(X.shape[0]):
        reason = _outer_keys(X[i], Z[i], f"input {i}")
        if reason:
            return reason
    return _linear(X, v[:, None], "scores x·v", squared=False)


def _outer_keys(X: np.ndarray, z: np.ndarray, where: str, names=None) -> str | None:
    """The keys vec(x_t zᵀ) of one input's tokens X (T, d) with query z: finite, their
    nonzero differences resolved, and their squares inside float64 (module docstring).
    ``names``: what the reason calls row t (default: t, its position in the input)."""
    T, d = X.shape
    names = list(range(T)) if names is None else list(names)
    top_z = np.abs(z).max()
    if top_z == 0:  # every key of the input is 0: exact ties, nothing to resolve
        return None
    with np.errstate(over="ignore"):
        top = np.abs(X).max() * top_z
    if not np.isfinite(top):
        return f"precision: the keys x·zᵀ of {where} overflow float64"
    if top > LARGEST:
        return (
            f"precision: the keys x·zᵀ of {where} reach {top:.1e}, beyond {LARGEST:.0e}: "
            "the SVMs' squares of them overflow float64"
        )
    token_scale = np.abs(X).max(axis=-1)
    for rows, cols in _pairs(T, d):
        diff = np.abs(X[rows] - X[cols]).max(axis=-1)
        resolution = RESOLUTION * EPS * np.maximum(token_scale[rows], token_scale[cols])
        for k in np.flatnonzero((diff > 0) & (diff <= resolution)):
            return (
                f"precision: the keys x·zᵀ of tokens {names[rows[k]]} and {names[cols[k]]} of "
                f"{where} differ by {diff[k] * top_z:.1e}, below float64's resolution "
                f"{resolution[k] * top_z:.1e} ({_UNIT} of their magnitude "
                f"{resolution[k] * top_z / (RESOLUTION * EPS):.1e})"
            )
        with np.errstate(under="ignore"):
            gap = diff * top_z
        for k in np.flatnonzero((diff > 0) & (gap < SMALLEST))[:1]:
            return (
                f"precision: the keys x·zᵀ of tokens {names[rows[k]]} and {names[cols[k]]} of "
                f"{where} differ by only {gap[k]:.1e} (< {SMALLEST:.0e}): the squared norm of an "
                "SVM solution separating them overflows float64"
            )
    return None


def ntp(embeddings, sequences) -> str | None:
    """None if float64 represents the self-attention NTP instance of 2403.08081: its graph-SVM
    rows are vec((x_y − x_j) x_kᵀ), the cross keys of each sequence's tokens with the query
    x_k, so each sequence is checked as a cross input is (its distinct tokens)."""
    E = _np(embeddings)
    for i, seq in enumerate(sequences):
        tokens = sorted({int(t) for t in seq})
        reason = _outer_keys(E[tokens], E[int(seq[-1])], f"sequence {i}", tokens)
        if reason:
            return reason
    return None


def ntp_linear(H) -> str | None:
    """None if float64 represents the linear NTP instance of 2402.18551: its NTP-SVM rows are
    vec((e_z − e_v) h̄_jᵀ), exact differences of unit vectors times a context, so only the
    contexts' magnitudes matter: finite, and their squares inside float64."""
    H = _np(H)
    if not np.isfinite(H).all():
        return "precision: a context embedding h̄_j is not finite"
    scale = np.abs(H).max(axis=0)
    for j in np.flatnonzero(scale > LARGEST)[:1]:
        return (
            f"precision: context {j} reaches {scale[j]:.1e}, beyond {LARGEST:.0e}: the "
            "SVM's squares of it overflow float64"
        )
    for j in np.flatnonzero((scale > 0) & (scale < SMALLEST))[:1]:
        return (
            f"precision: context {j} is only {scale[j]:.1e} (< {SMALLEST:.0e}): an SVM solution "
            "separating on it has a squared norm beyond float64"
        )
    return None


def embedding_scores(E0, v) -> str | None:
    """None if the scores ⟨E⁰_s, v⟩ that the one step is computed from are finite."""
    E0, v = _np(E0), _np(v)
    with np.errstate(over="ignore", invalid="ignore"):
        scores = E0 @ v
        scale = np.abs(E0) @ np.abs(v)
    bad = np.flatnonzero(~(np.isfinite(scores) & np.isfinite(scale)))
    if bad.size:
        return f"precision: the score ⟨E⁰_s, v⟩ of token {bad[0]} overflows float64"
    return None


def embedding(sequences, E0, eta0: float, grad, E1) -> str | None:
    """None if float64 represents the one step E¹ = E⁰ − η0·∇ (``grad`` = ∇_E L at p = 0,
    ``E1`` the computed step) on every pair of tokens that share a sequence, else the reason
    (module docstring)."""
    seqs = np.asarray(_np(sequences), dtype=np.int64)
    E0, grad, E1 = _np(E0), _np(grad), _np(E1)
    with np.errstate(over="ignore", invalid="ignore"):
        step = float(eta0) * grad
        magnitude = (np.abs(E0) + np.abs(step)).max(axis=-1)  # the terms of each E¹ row
    used = np.unique(seqs)
    bad = [int(s) for s in used if not (np.isfinite(E1[s]).all() and np.isfinite(magnitude[s]))]
    if bad:
        return f"precision: E¹ = E⁰ − η0·∇E overflows float64 (token {bad[0]})"
    for i, seq in enumerate(seqs):
        tokens = np.unique(seq)
        for rows, cols in _pairs(len(tokens), E0.shape[1]):
            s, t = tokens[rows], tokens[cols]
            resolution = RESOLUTION * EPS * np.maximum(magnitude[s], magnitude[t])
            e0_gap = np.abs(E0[s] - E0[t]).max(axis=-1)
            e1_gap = np.abs(E1[s] - E1[t]).max(axis=-1)
            for k in np.flatnonzero((e0_gap > 0) & (e0_gap <= resolution)):
                return (
                    f"precision: the E⁰ rows of tokens {s[k]} and {t[k]} (sequence {i}) differ "
                    f"by {e0_gap[k]:.1e}, below float64's resolution {resolution[k]:.1e} of "
                    f"E¹ = E⁰ − η0·∇E ({_UNIT} of its magnitude "
                    f"{resolution[k] / (RESOLUTION * EPS):.1e}): E¹ loses their difference"
                )
            tie = (e0_gap == 0) & (grad[s] == grad[t]).all(axis=-1)
            for k in np.flatnonzero((e1_gap <= resolution) & ~tie):
                return (
                    f"precision: the E¹ rows of tokens {s[k]} and {t[k]} (sequence {i}) differ "
                    f"by {e1_gap[k]:.1e}, below float64's resolution {resolution[k]:.1e} "
                    f"({_UNIT} of their magnitude {resolution[k] / (RESOLUTION * EPS):.1e})"
                )
            for k in np.flatnonzero((e1_gap > 0) & (e1_gap < SMALLEST))[:1]:
                return (
                    f"precision: the E¹ rows of tokens {s[k]} and {t[k]} (sequence {i}) differ "
                    f"by only {e1_gap[k]:.1e} (< {SMALLEST:.0e}): the squared norm of an SVM "
                    "solution separating them overflows float64"
                )
    top = np.abs(E1[used]).max()
    if top > LARGEST:
        return (
            f"precision: E¹ = E⁰ − η0·∇E reaches {top:.1e}, beyond {LARGEST:.0e}: the SVM's "
            "squares of it overflow float64"
        )
    return None
