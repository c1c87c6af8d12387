"""The self-attention NTP model of 2403.08081 (spec ntp.md §1.1) in float64 log space.

Sample i has tokens tok_1..tok_T, query z = x_{tok_T} and label y (which must occur). Logits
a_t = x_{tok_t}ᵀ W z, attention s = softmax(a), prediction p̂_y = Σ_{t: tok_t = y} s_t (the
"iden" head), loss L(W) = (1/n) Σ_i −log p̂_{y_i}.

Positions holding the same token always have the same logit, so each sample is stored by its
distinct tokens v with counts c_v: a token's logit is then a_v + log c_v, and
−log p̂_y = LSE_v(a_v + log c_v) − (a_y + log c_y), which is convex in W even when the label
token repeats (its positions share one logit).

Numerics (spec §6.4): the loss is softplus(LSE_off − LSE_label), never a difference of two
large log-sum-exps, so it stays accurate when it is e^{-1e6}; the gradient's coefficient on the
label is −(mass off the label), formed from log-sum-exps and not as s_y − 1. `gradient_log`
returns the gradient as (log scale, matrix with max |entry| = 1), so its direction survives at
‖W‖ ~ 1e6, where every entry of the gradient underflows.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.special import logsumexp

from models.ntp.data import NTPData, ntp_data
from models.numerics.logspace import combine_np
from models.oracles.svm import as_float_array

NEG_INF = -math.inf


@dataclass(frozen=True, eq=False)
class SampleTable:
    """The samples as padded arrays over their distinct tokens (n rows, m = most distinct).

    ``tokens`` (n, m) token ids (padding repeats the query; its ``log_count`` is −inf),
    ``log_count`` (n, m) log multiplicities, ``label_slot`` (n,) the label's column, ``query``
    (n,) the query token ids.
    """

    tokens: np.ndarray
    log_count: np.ndarray
    label_slot: np.ndarray
    query: np.ndarray

    @property
    def n(self) -> int:
        return self.tokens.shape[0]


def sample_table(sequences, labels, queries=None) -> SampleTable:
    """Tabulate realizable samples; ``queries`` overrides the query (reduced samples keep the
    original query even when it is not among the kept tokens)."""
    queries = [seq[-1] for seq in sequences] if queries is None else list(queries)
    rows = []
    for seq, y, k in zip(sequences, labels, queries, strict=True):
        distinct, counts = np.unique(np.asarray(seq, dtype=np.int64), return_counts=True)
        slot = np.flatnonzero(distinct == y)
        if slot.size == 0:
            raise ValueError(f"labels: token {y} does not occur in its sequence {list(seq)}")
        rows.append((distinct, np.log(counts.astype(np.float64)), int(slot[0]), k))
    m = max(len(r[0]) for r in rows)
    n = len(rows)
    tokens = np.empty((n, m), dtype=np.int64)
    log_count = np.full((n, m), NEG_INF)
    for i, (distinct, logc, _, k) in enumerate(rows):
        tokens[i] = k
        tokens[i, : len(distinct)] = distinct
        log_count[i, : len(distinct)] = logc
    label_slot = np.array([r[2] for r in rows], dtype=np.int64)
    query = np.array([r[3] for r in rows], dtype=np.int64)
    return SampleTable(tokens, log_count, label_slot, query)


def softplus(u: np.ndarray) -> np.ndarray:
    """log(1 + e^u) without overflow, and equal to e^u (not 0) for very negative u."""
    u = np.asarray(u, dtype=np.float64)
    return np.where(u > 0, u + np.log1p(np.exp(-np.abs(u))), np.log1p(np.exp(np.minimum(u, 0))))


def log_softplus(u: np.ndarray) -> np.ndarray:
    """log(softplus(u)), finite where softplus(u) underflows: for u < −30,
    log log1p(e^u) = u − e^u/2 + O(e^{2u})."""
    u = np.asarray(u, dtype=np.float64)
    with np.errstate(divide="ignore"):
        return np.where(u < -30, u - np.exp(u) / 2, np.log(softplus(np.maximum(u, -30))))


@dataclass(frozen=True, eq=False)
class LogitParts:
    """Per-sample log-sum-exps: of the label (a_y + log c_y), of the other tokens, of all."""

    scores: np.ndarray  # (n, m): a_v + log c_v, −inf on padding
    label: np.ndarray  # (n,)
    off: np.ndarray  # (n,): −inf when the sequence holds only the label
    total: np.ndarray  # (n,)


@dataclass(frozen=True, eq=False)
class NTPAttention:
    """L(W) of spec §1.1 for the samples of ``table`` under embeddings E (K×d); the loss is
    divided by ``normalizer`` (n, or the full n for the reduced loss of spec §1.2)."""

    embeddings: np.ndarray
    table: SampleTable
    normalizer: float

    @property
    def dim(self) -> int:
        return self.embeddings.shape[1]

    def _check(self, W) -> np.ndarray:
        W = as_float_array(W, "W", 2)
        if W.shape != (self.dim, self.dim):
            raise ValueError(f"W: expected shape {(self.dim, self.dim)}, got {W.shape}")
        return W

    def logits(self, W) -> np.ndarray:
        """a_v = x_vᵀ W x_k per sample and distinct token (n, m); padding included."""
        W = self._check(W)
        E = self.embeddings
        Wz = E[self.table.query] @ W.T  # row i: (W z_i)ᵀ
        return np.einsum("imd,id->im", E[self.table.tokens], Wz)

    def parts(self, W) -> LogitParts:
        t = self.table
        scores = self.logits(W) + t.log_count
        rows = np.arange(t.n)
        label = scores[rows, t.label_slot]
        off_scores = scores.copy()
        off_scores[rows, t.label_slot] = NEG_INF
        off = logsumexp(off_scores, axis=1)
        return LogitParts(scores, label, off, np.logaddexp(label, off))

    def sample_losses(self, W) -> np.ndarray:
        """−log p̂_{y_i} = softplus(LSE_off − LSE_label) per sample."""
        p = self.parts(W)
        return softplus(p.off - p.label)

    def loss(self, W) -> float:
        return float(self.sample_losses(W).sum() / self.normalizer)

    def log_loss(self, W) -> float:
        """log L(W), finite while L(W) itself underflows (‖W‖ ~ 1e6 along a separating
        direction): the NTP-LOSS checks compare excess losses this small."""
        p = self.parts(W)
        return float(logsumexp(log_softplus(p.off - p.label)) - math.log(self.normalizer))

    def attention_mass(self, W) -> np.ndarray:
        """Attention mass per distinct token (n, m): s_v summed over the token's positions."""
        p = self.parts(W)
        return np.exp(p.scores - p.total[:, None])

    def logit_coefficients(self, W) -> tuple[np.ndarray, np.ndarray]:
        """(log|g|, sign g) of ∂loss_i/∂a_v, (n, m): s_v off the label, −(mass off) on it."""
        t = self.table
        p = self.parts(W)
        log_abs = p.scores - p.total[:, None]
        sign = np.where(np.isfinite(log_abs), 1.0, 0.0)
        rows = np.arange(t.n)
        log_abs[rows, t.label_slot] = p.off - p.total  # log(1 − s_y) from log-sum-exps
        sign[rows, t.label_slot] = np.where(np.isfinite(p.off), -1.0, 0.0)
        return log_abs, sign

    def gradient_log(self, W) -> tuple[float, np.ndarray]:
        """∇L(W) = (1/n) Σ_i Σ_v g_iv x_v z_iᵀ as (log_scale, G) with max|G| = 1 (G = 0 and
        log_scale = −inf for a zero gradient)."""
        log_abs, sign = self.logit_coefficients(W)
        E = self.embeddings
        outer = np.einsum("imd,ie->imde", E[self.table.tokens], E[self.table.query])
        d = self.dim
        log_scale, vec = combine_np(
            log_abs.ravel() - math.log(self.normalizer), sign.ravel(), outer.reshape(-1, d * d)
        )
        return log_scale, vec.reshape(d, d)

    def gradient(self, W) -> np.ndarray:
        """∇L(W) in float64 (entries below ~1e-308 underflow; use `gradient_log` there)."""
        log_scale, G = self.gradient_log(W)
        return G * math.exp(log_scale) if log_scale > NEG_INF else G


def ntp_attention(data: NTPData) -> NTPAttention:
    """The model of a validated instance (realizable labels required)."""
    table = sample_table(data.sequences, data.labels)
    return NTPAttention(data.embeddings, table, float(data.n))


def ntp_model(embeddings, sequences, labels) -> NTPAttention:
    """Validate (``models.ntp.data.ntp_data``) and build the model in one call."""
    return ntp_attention(ntp_data(embeddings, sequences, labels))


def smoothness_bound(data: NTPData) -> float:
    """L_bound = (1/n) Σ_i ‖X_i‖₂² ‖z_i‖² / 2 (spec §1.1), X_i the T_i × d position matrix;
    GD with η = 1/L_bound is the spec's step (§2.5)."""
    E = data.embeddings
    total = 0.0
    for seq in data.sequences:
        X = E[list(seq)]
        total += np.linalg.norm(X, 2) ** 2 * float(E[seq[-1]] @ E[seq[-1]]) / 2
    return total / data.n
