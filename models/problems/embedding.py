"""The model of arXiv 2505.17282, f(X) = softmax(pᵀE_Xᵀ) E_X v, with trained token embeddings.

Spec: ``spec/embeddings.md``. Section numbers below (§1.1, R1, ...) refer to it.

What lives here:
- ``EmbeddingProblem``: data (token ids, labels), embeddings E and the fixed head v; the
  logistic loss L(E, p), and ∇_E L in the closed form of §1.1.
- The `<cls>` flow in p is *not* reimplemented: with E frozen it is exactly the prompt problem
  of ``models.problems.attention`` with keys = E[X] and scores = y·⟨E_s, v⟩ (``prompt_problem``), so
  p-gradients (ordinary and log-space) come from one implementation.
- Definitions of §2 (average signed frequency α, ᾱ, posterior difference Δ, completely
  positive/negative tokens), the one-step quantities of Lemma 4.1 (R1–R3, §3.1), the descent
  direction of Lemma A.2 (§3.2), the loss floor and a feasible SVM point (§3.3).
- The one- and two-layer models of the real-data experiment (§4.2), a full-batch Adam loop, and
  loaders for the IMDB and Yelp-polarity archives already on disk (nothing is downloaded).
"""

from __future__ import annotations

import csv
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from models.numerics.device import device as torch_device
from models.numerics.logspace import NEG_INF, signed_logsumexp_np
from models.problems.attention import DTYPE, PromptProblem, as_float_tensor, softmax_margins
from models.problems.losses import LOGISTIC

Tensor = torch.Tensor

# ---------------------------------------------------------------------------------------------
# Input checks shared by the problem and the free functions
# ---------------------------------------------------------------------------------------------


def check_sequences(sequences, vocab_size: int | None = None) -> Tensor:
    """(n, T) int64 token ids, with ids in [0, vocab_size) when the size is given."""
    t = torch.as_tensor(sequences)
    if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
        raise ValueError(f"sequences: expected integer token ids, got dtype {t.dtype}")
    if t.dim() != 2 or t.shape[0] == 0 or t.shape[1] == 0:
        raise ValueError(f"sequences: expected a non-empty (n, T) array, got {tuple(t.shape)}")
    t = t.to(torch.int64)
    if vocab_size is not None:
        lo, hi = int(t.min()), int(t.max())
        if lo < 0 or hi >= vocab_size:
            raise ValueError(
                f"sequences: token ids must lie in [0, {vocab_size}), got [{lo}, {hi}]"
            )
    return t


def check_labels(y, n: int) -> Tensor:
    """(n,) float64 labels in {−1, +1}."""
    t = as_float_tensor(y, "y", 1)
    if t.shape[0] != n:
        raise ValueError(f"y: expected {n} labels, got {t.shape[0]}")
    if not torch.all((t == 1) | (t == -1)):
        raise ValueError("y: labels must be ±1")
    return t


def check_head(E, v) -> tuple[Tensor, Tensor]:
    """E (|S|, d) and v (d,) as finite float64 tensors of matching dimension."""
    E = as_float_tensor(E, "E", 2)
    v = as_float_tensor(v, "v", 1)
    if v.shape[0] != E.shape[1]:
        raise ValueError(f"v: expected dimension {E.shape[1]} (columns of E), got {v.shape[0]}")
    return E, v


def check_selection(s_star, n: int, vocab_size: int | None = None) -> Tensor:
    """(n,) int64 token ids s*(i), one per sequence."""
    t = torch.as_tensor(s_star, dtype=torch.int64)
    if t.shape != (n,):
        raise ValueError(f"s_star: expected shape ({n},), got {tuple(t.shape)}")
    if vocab_size is not None and not bool(((t >= 0) & (t < vocab_size)).all()):
        raise ValueError(f"s_star: token ids must lie in [0, {vocab_size})")
    return t


def token_counts(sequences, vocab_size: int) -> Tensor:
    """n_s(X_i): the (n, |S|) float64 matrix of occurrence counts (§1, "Counts")."""
    seq = check_sequences(sequences, vocab_size)
    counts = torch.zeros(seq.shape[0], vocab_size, dtype=DTYPE, device=seq.device)
    return counts.scatter_add_(1, seq, torch.ones_like(seq, dtype=DTYPE))


def _scatter_to_tokens(sequences: Tensor, values: Tensor, vocab_size: int) -> Tensor:
    """Σ over all positions (j, i) with x_ji = s of values_ji, for every token s."""
    out = torch.zeros(vocab_size, dtype=values.dtype, device=values.device)
    return out.index_add_(0, sequences.reshape(-1), values.reshape(-1))


def centred_scores(weights: Tensor, scores: Tensor) -> Tensor:
    """u_i − f = Σ_k σ_k (u_i − u_k), per position, without the cancellation of u_i − f (§1.1).

    ``weights`` and ``scores`` have shape (n, T); the sum runs over the last axis.
    """
    return torch.einsum("nk,ntk->nt", weights, scores[:, :, None] - scores[:, None, :])


def cls_readout(H: Tensor, p: Tensor, v: Tensor) -> Tensor:
    """f = softmax(H p)ᵀ (H v) per sequence, H of shape (n, T, d) (§1 "Model").

    This is the prompt problem's margin with scores ⟨h_t, v⟩ (no labels), so the read-out of the
    one-layer model, the two-layer model and ``EmbeddingProblem.forward`` is one computation
    (``softmax_margins``, without PromptProblem's input checks: they cost a third of a
    training epoch).
    """
    return softmax_margins(H, H @ v, p)


# ---------------------------------------------------------------------------------------------
# The problem: data, embeddings, fixed head
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class EmbeddingProblem:
    """Token sequences (n, T), labels y (n,), embeddings E (|S|, d), fixed head v (d,)."""

    sequences: Tensor
    y: Tensor
    E: Tensor
    v: Tensor

    def __post_init__(self):
        E, v = check_head(self.E, self.v)
        seq = check_sequences(self.sequences, E.shape[0])
        y = check_labels(self.y, seq.shape[0])
        for name, value in (("sequences", seq), ("y", y), ("E", E), ("v", v)):
            object.__setattr__(self, name, value)

    # ---- sizes -----------------------------------------------------------------------------
    @property
    def n(self) -> int:
        return self.sequences.shape[0]

    @property
    def T(self) -> int:
        return self.sequences.shape[1]

    @property
    def vocab_size(self) -> int:
        return self.E.shape[0]

    @property
    def dim(self) -> int:
        return self.E.shape[1]

    def with_embeddings(self, E) -> EmbeddingProblem:
        """The same data and head with other embeddings (e.g. the frozen E¹ after one step)."""
        return replace(self, E=E)

    @property
    def device(self) -> torch.device:
        return self.E.device

    def to(self, device) -> EmbeddingProblem:
        """The same problem with every tensor on ``device`` (self if they are all there)."""
        device = torch.device(device)
        tensors = {"sequences": self.sequences, "y": self.y, "E": self.E, "v": self.v}
        moved = {name: t.to(device) for name, t in tensors.items()}
        if all(moved[name] is t for name, t in tensors.items()):
            return self
        return replace(self, **moved)

    # ---- the model -------------------------------------------------------------------------
    def token_scores(self, E: Tensor | None = None) -> Tensor:
        """u_s = ⟨E_s, v⟩ for every token."""
        return (self.E if E is None else E) @ self.v

    def prompt_problem(self, E: Tensor | None = None) -> PromptProblem:
        """The `<cls>` problem in p with E frozen: keys E[X_i], scores y_i·u_{x_it}.

        Differentiable in E when E requires grad, which is how ``loss_value`` is built.
        """
        E = self.E if E is None else E
        u = self.token_scores(E)
        return PromptProblem(
            keys=E[self.sequences], scores=self.y[:, None] * u[self.sequences], loss="logistic"
        )

    def forward(self, p: Tensor, E: Tensor | None = None) -> Tensor:
        """f(X_i) for every sequence; differentiable in p and E."""
        E = self.E if E is None else E
        return cls_readout(E[self.sequences], p, self.v)

    def loss_value(self, E: Tensor, p: Tensor) -> Tensor:
        """L(E, p) = (1/n) Σ ℓ(y_i f(X_i)), ℓ logistic; differentiable in E and p."""
        return self.prompt_problem(E).loss_value(p)

    # ---- the E-gradient (§1.1) -------------------------------------------------------------
    def grad_E(self, p: Tensor) -> Tensor:
        """∇_E L at (self.E, p) by the closed form of §1.1.

        ∇_{E_s}L = −(1/n) Σ_j h_j y_j Σ_{i: x_ji = s} σ_ji [v + (u_s − f_j) p],
        h_j = −ℓ'(y_j f_j), with u_s − f_j taken as Σ_k σ_jk (u_s − u_jk).
        """
        p = as_float_tensor(p, "p", 1).to(self.device)
        prompt = self.prompt_problem()
        sigma = prompt.softmax(p)  # (n, T)
        h = -LOGISTIC.deriv(prompt.margins(p))  # (n,)
        us = self.token_scores()[self.sequences]
        a = (h * self.y)[:, None] * sigma / self.n  # (n, T)
        along_v = _scatter_to_tokens(self.sequences, a, self.vocab_size)
        along_p = _scatter_to_tokens(self.sequences, a * centred_scores(sigma, us), self.vocab_size)
        return -(along_v[:, None] * self.v[None, :] + along_p[:, None] * p[None, :])


def gaussian_init(gen: torch.Generator, vocab: int, d: int, unit_head: bool = True):
    """(E0, v) of the protocol (§1): E0 rows i.i.d. N(0, I/d); v ~ N(0, I/d), normalised to
    ‖v‖ = 1 if unit_head. Drawn from ``gen`` on the CPU, E0 first."""
    E0 = torch.randn((vocab, d), generator=gen, dtype=DTYPE) / math.sqrt(d)
    v = torch.randn(d, generator=gen, dtype=DTYPE) / math.sqrt(d)
    if unit_head:
        v = v / torch.linalg.vector_norm(v)
    return E0, v


def uniform_token_problem(seed: int, n: int, T: int, S: int, d: int) -> EmbeddingProblem:
    """A fixed-seed problem of a given size (device tests, benchmarks): tokens i.i.d. uniform
    over |S|, labels uniform ±1, E⁰ and v from ``gaussian_init``. It promises sizes and the
    protocol's initialisation, none of the papers' assumptions (those come from the
    strategies)."""
    gen = torch.Generator().manual_seed(int(seed))
    seqs = torch.randint(0, S, (n, T), generator=gen)
    y = torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    E0, v = gaussian_init(gen, S, d)
    return EmbeddingProblem(sequences=seqs, y=y, E=E0, v=v)


def g2_fixed(seed: int, d: int, S: int = 30, T: int = 8, n: int = 200) -> EmbeddingProblem:
    """The G2 recipe of spec §6 with fixed seeds, outside Hypothesis (EMB-L41-RATE and its
    large-d sweep, benchmarks/test_onestep_large_d.py): y uniform ±1, b ~ N(0, 1), tokens of
    X_j i.i.d. from softmax(y_j b); E⁰, v from ``gaussian_init``.

    The data depend on ``seed`` only, the embeddings on (seed, d), so a d-sweep changes the
    initialization and nothing else."""
    gen = torch.Generator().manual_seed(seed)
    y = torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    b = torch.randn(S, generator=gen, dtype=DTYPE)
    probs = torch.softmax(y[:, None] * b[None, :], dim=-1)
    seqs = torch.multinomial(probs, T, replacement=True, generator=gen)
    E0, v = gaussian_init(torch.Generator().manual_seed(1_000_003 * seed + d), S, d)
    return EmbeddingProblem(sequences=seqs, y=y, E=E0, v=v)


# ---------------------------------------------------------------------------------------------
# Definitions (§2)
# ---------------------------------------------------------------------------------------------


def average_signed_frequency(sequences, y, vocab_size: int) -> Tensor:
    """α_s = (1/n) Σ_i y_i n_s(X_i)/T (§2): > 0 for tokens that favour the positive class."""
    counts = token_counts(sequences, vocab_size)
    n, T = counts.shape[0], check_sequences(sequences).shape[1]
    return check_labels(y, n) @ counts / (n * T)


def average_frequency(sequences, vocab_size: int) -> Tensor:
    """ᾱ_s = (1/n) Σ_i n_s(X_i)/T ≥ |α_s| (§2); the scale of the R2 and R3 error terms."""
    counts = token_counts(sequences, vocab_size)
    n, T = counts.shape[0], check_sequences(sequences).shape[1]
    return counts.sum(0) / (n * T)


def _class_counts(sequences, y, vocab_size: int) -> tuple[Tensor, Tensor]:
    """(N⁺_s, N⁻_s): occurrences of each token in positive and in negative sequences."""
    counts = token_counts(sequences, vocab_size)
    y = check_labels(y, counts.shape[0])
    return counts[y > 0].sum(0), counts[y < 0].sum(0)


def posterior_difference(sequences, y, vocab_size: int, min_count: int = 1):
    """Δ_s = (N⁺ − N⁻)/(N⁺ + N⁻) from occurrence counts (§2, x-axis of Figure 1).

    Returns (delta, mask): ``mask`` marks tokens with at least ``min_count`` occurrences;
    elsewhere delta is NaN (too rare to estimate a posterior; §4.2 uses min_count = 20).
    """
    if min_count < 1:
        raise ValueError(f"min_count: must be ≥ 1, got {min_count}")
    pos, neg = _class_counts(sequences, y, vocab_size)
    total = pos + neg
    mask = total >= min_count
    delta = torch.where(mask, (pos - neg) / total.clamp_min(1), torch.full_like(total, math.nan))
    return delta, mask


def completely_positive(sequences, y, vocab_size: int) -> Tensor:
    """Tokens that occur, and occur only in positive sequences (§2); then α_s > 0."""
    pos, neg = _class_counts(sequences, y, vocab_size)
    return (pos > 0) & (neg == 0)


def completely_negative(sequences, y, vocab_size: int) -> Tensor:
    """Tokens that occur, and occur only in negative sequences (§2); then α_s < 0."""
    pos, neg = _class_counts(sequences, y, vocab_size)
    return (neg > 0) & (pos == 0)


# ---------------------------------------------------------------------------------------------
# Lemma 4.1: one gradient step on E (§3.1, R1–R3)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class OneStep:
    """E¹ = E⁰ − η0 ∇_E L(E⁰, p⁰) and every quantity R1–R3 and the paper bound speak of.

    Vectors are per token, shape (|S|,). ``shift`` is ⟨E¹_s − E⁰_s, v⟩.
    - R1: with p⁰ = 0, E¹ − E⁰ = η0 β vᵀ exactly, so ``shift`` = η0 β ‖v‖² and
      ``rank_one_residual`` ≈ 1e-16. With p⁰ ≠ 0 neither holds (control N4); ``beta`` is still
      the p⁰ = 0 prediction.
    - R2: |β_s − α_s/2| ≤ ``r2_bound`` = (1/4) max_j |f⁰_j| ᾱ_s (f⁰ at p = 0).
    - R3, stated for any ‖v‖: |⟨E¹_s, v⟩ − ``r3_target``| ≤ ``r3_tolerance`` with
      target (η0/2)‖v‖² α_s and tolerance m (1 + η0 ‖v‖² ᾱ_s/4), m = max_s |⟨E⁰_s, v⟩|
      (from R1 and R2, using max|f⁰| ≤ m). For ‖v‖ = 1 this is the spec's m(1 + η0ᾱ_s/4).
      ``r3_error`` is the left-hand side. Proven only for p⁰ = 0.
    - ``paper_bound`` = 11 η0 d^(−1/4), the [U] constant of Lemma 4.1, meaningful for ‖v‖ = 1.
    """

    E0: Tensor
    E1: Tensor
    eta0: float
    p0: Tensor
    beta: Tensor
    shift: Tensor
    alpha: Tensor
    alpha_bar: Tensor
    f0: Tensor
    m: float
    paper_bound: float
    r2_bound: Tensor
    r3_target: Tensor
    r3_error: Tensor
    r3_tolerance: Tensor
    rank_one_residual: float

    @property
    def r2_gap(self) -> Tensor:
        """|β_s − α_s/2|, the left-hand side of R2."""
        return torch.abs(self.beta - self.alpha / 2)

    @property
    def paper_error(self) -> Tensor:
        """|⟨E¹_s, v⟩ − (η0/2)α_s| per token, the left-hand side of Lemma 4.1 as stated (for
        ‖v‖ = 1), the quantity ``paper_bound`` bounds. For ‖v‖ = 1 it IS R3's left-hand side,
        so it is read there (one implementation); for another ‖v‖ the paper's form does not
        apply and R3's, with its ‖v‖², is the one reported."""
        return self.r3_error


def rank_one_residual(D: Tensor, v: Tensor) -> float:
    """‖D − (Dv/‖v‖²) vᵀ‖_max / ‖D‖_max: 0 iff every row of D is parallel to v (R1)."""
    scale = float(torch.abs(D).max())
    if scale == 0.0:
        return 0.0
    along = D @ v / (v @ v)
    return float(torch.abs(D - along[:, None] * v[None, :]).max()) / scale


def r1_coefficients(problem: EmbeddingProblem) -> tuple[Tensor, Tensor]:
    """(β, f⁰): β_s = (1/n) Σ_j h_j y_j n_s(X_j)/T with h_j = 1/(1 + e^{y_j f⁰_j}), at p = 0.

    At p = 0 the attention is uniform, so f⁰_j is the mean token score of X_j (R1).
    """
    f0 = problem.token_scores()[problem.sequences].mean(-1)
    h0 = -LOGISTIC.deriv(problem.y * f0)
    counts = token_counts(problem.sequences, problem.vocab_size)
    return (h0 * problem.y) @ counts / (problem.n * problem.T), f0


def one_step(
    problem: EmbeddingProblem, eta0: float, p0: Tensor | None = None, device=None
) -> OneStep:
    """One GD step of size η0 on E from (problem.E, p⁰), p⁰ = 0 by default (§1 protocol, §3.1).

    The gradient ∇_E L, the step's only O(n·T·d) work (the gather of E[X] and the logits), runs
    on ``device``: by default the ATTN_DEVICE setting (``models.numerics.device``; cpu unless set),
    so a large-d sweep moves to a GPU without a change to the claims. The rest is O(|S|·d + n·T) and
    runs where the problem lives; every tensor of the result is on the problem's device.
    """
    eta0 = float(eta0)
    if not math.isfinite(eta0):
        raise ValueError(f"eta0: must be finite, got {eta0}")
    if p0 is None:
        p0 = torch.zeros(problem.dim, dtype=DTYPE, device=problem.device)
    p0 = as_float_tensor(p0, "p0", 1).to(problem.device)
    if p0.shape[0] != problem.dim:
        raise ValueError(f"p0: expected dimension {problem.dim}, got {p0.shape[0]}")
    work = torch_device(device)
    E0, v = problem.E, problem.v
    E1 = E0 - eta0 * problem.to(work).grad_E(p0.to(work)).to(problem.device)
    beta, f0 = r1_coefficients(problem)
    alpha = average_signed_frequency(problem.sequences, problem.y, problem.vocab_size)
    alpha_bar = average_frequency(problem.sequences, problem.vocab_size)
    v2 = float(v @ v)
    m = float(torch.abs(E0 @ v).max())
    r3_target = eta0 / 2 * v2 * alpha
    return OneStep(
        E0=E0,
        E1=E1,
        eta0=eta0,
        p0=p0,
        beta=beta,
        shift=(E1 - E0) @ v,
        alpha=alpha,
        alpha_bar=alpha_bar,
        f0=f0,
        m=m,
        paper_bound=11 * eta0 * problem.dim**-0.25,
        r2_bound=0.25 * float(torch.abs(f0).max()) * alpha_bar,
        r3_target=r3_target,
        r3_error=torch.abs(E1 @ v - r3_target),
        r3_tolerance=m * (1 + eta0 * v2 * alpha_bar / 4),
        rank_one_residual=rank_one_residual(E1 - E0, v),
    )


# ---------------------------------------------------------------------------------------------
# Selection, descent direction, loss floor, feasible SVM point (§3.2–§3.4)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Selection:
    """Per sequence: the token s maximising y_i⟨E_s, v⟩ over s ∈ X_i (§3.3 precondition).

    ``gap`` is the lead over the best *other distinct* token (+inf when X_i has one distinct
    token); ``unique`` is gap > tol. Repeated occurrences of the winner are not ties.
    """

    tokens: Tensor
    unique: Tensor
    gap: Tensor

    @property
    def all_unique(self) -> bool:
        return bool(self.unique.all())


def selected_tokens(E1, sequences, y, v, tol: float = 0.0) -> Selection:
    """The token that gradient flow on p selects in each sequence, if unique (§3.3, §3.4)."""
    E1, v = check_head(E1, v)
    seq = check_sequences(sequences, E1.shape[0])
    y = check_labels(y, seq.shape[0])
    scores = y[:, None] * (E1 @ v)[seq]
    best, pos = scores.max(-1)
    tokens = seq.gather(1, pos[:, None]).squeeze(1)
    others = torch.where(seq == tokens[:, None], torch.full_like(scores, NEG_INF), scores)
    gap = best - others.max(-1).values
    return Selection(tokens=tokens, unique=gap > tol, gap=gap)


def relevant_token_positions(sequences, s_star) -> Tensor:
    """(n, T) mask of the positions of X_i that hold its selected token s*(i)."""
    seq = check_sequences(sequences)
    return seq == check_selection(s_star, seq.shape[0])[:, None]


def cls_loss_floor(E1, sequences, y, v, s_star) -> float:
    """L* = (1/n) Σ_i log(1 + exp(−y_i⟨E¹_{s*(i)}, v⟩)): the infimum of L over p (§3.3 item 3).

    With E and v frozen, |f| ≤ max_s |u_s|, so the loss tends to L* > 0, not to 0 (control N10).
    """
    E1, v = check_head(E1, v)
    seq = check_sequences(sequences, E1.shape[0])
    y = check_labels(y, seq.shape[0])
    s_star = check_selection(s_star, seq.shape[0], E1.shape[0])
    return float(LOGISTIC.value(y * (E1 @ v)[s_star]).mean())


def max_margin_feasible_point(E1, relevant_mask) -> Tensor:
    """p_ls = E¹⁺ 1_rel (§3.3 feasibility remark).

    When E¹ has full row rank, E¹ p_ls = 1_rel: every relevant token has logit 1 and every other
    token 0, so under Assumption 1 each SVM constraint holds with equality and ‖p̂‖ ≤ ‖p_ls‖.
    """
    E1 = as_float_tensor(E1, "E1", 2)
    mask = torch.as_tensor(relevant_mask, dtype=torch.bool)
    if mask.shape != (E1.shape[0],):
        raise ValueError(f"relevant_mask: expected shape ({E1.shape[0]},), got {tuple(mask.shape)}")
    return torch.linalg.pinv(E1) @ mask.to(DTYPE)


@dataclass(frozen=True)
class DescentDirection:
    """The direction q of Lemma A.2, or None with the reason it does not exist.

    ``residual`` = ‖E¹q − e_{s*}‖_∞ (NaN when not computed).
    """

    q: Tensor | None
    residual: float
    reason: str | None = None

    @property
    def ok(self) -> bool:
        return self.q is not None


def orthonormal_complement(v: Tensor) -> Tensor:
    """U (d, d−1) with orthonormal columns spanning v⊥ (complete QR of v)."""
    Q, _ = torch.linalg.qr(v[:, None], mode="complete")
    return Q[:, 1:]


def descent_direction(E1, v, s_star_token: int, tol: float = 1e-9) -> DescentDirection:
    """q ⟂ v with E¹q = e_{s*} (Lemma A.2, §3.2), by minimum-norm least squares on E¹U.

    Exists when E¹U has full row rank, which needs |S| ≤ d − 1; otherwise, or when the system
    is numerically rank deficient (residual > tol), q is None and ``reason`` says why.
    """
    E1, v = check_head(E1, v)
    S, d = E1.shape
    if not 0 <= s_star_token < S:
        raise ValueError(f"s_star_token: must lie in [0, {S}), got {s_star_token}")
    if S > d - 1:
        return DescentDirection(None, math.nan, f"|S| = {S} > d - 1 = {d - 1}: E U is not onto")
    U = orthonormal_complement(v)
    target = torch.zeros(S, dtype=DTYPE)
    target[s_star_token] = 1.0
    q = U @ (torch.linalg.pinv(E1 @ U) @ target)
    residual = float(torch.abs(E1 @ q - target).max())
    if not residual <= tol:
        return DescentDirection(None, residual, f"E U is rank deficient: residual {residual:.3g}")
    return DescentDirection(q, residual)


def directional_derivative(prompt: PromptProblem, p: Tensor, q: Tensor) -> tuple[float, float]:
    """⟨∇_p L(p), q⟩ as (log|value|, sign), from the log-space gradient of the prompt problem.

    The magnitude never underflows, but the ScaledVector has one scale for all of its entries:
    the sign is that of ĝ·q with ĝ rescaled to max-entry 1, exact only while |ĝ·q| is well above
    1e-16·‖q‖₁. For Lemma A.2's q at random p that fails from ‖p‖ ≈ 50 on [N]: on G1 (d = 32,
    η0 = 50) the sign came out ≥ 0 in 3/800 draws at ‖p‖ = 50, 49/800 at 100, 263/800 at 1e3,
    because the terms along q are e^{-40} and more below the rest. Use ``descent_slope`` there.
    """
    g = prompt.gradient_scaled(as_float_tensor(p, "p", 1))
    dot = float(g.vec @ as_float_tensor(q, "q", 1))
    if g.is_zero or dot == 0.0:
        return NEG_INF, 0.0
    return g.log_scale + math.log(abs(dot)), math.copysign(1.0, dot)


def descent_slope(prompt: PromptProblem, p: Tensor, positions) -> tuple[float, float]:
    """⟨∇_p L(p), q⟩ for the exact q of Lemma A.2 (keys·q = 1 on ``positions``, else 0).

    ``positions`` is the (n, T) mask of where s* occurs, ``sequences == s*``.

    = Σ_i ω_i ℓ'(m_i) Σ_{t ∈ positions_i} s_it (γ_it − m_i), summed in log space term by term,
    so the sign stays exact at any ‖p‖ even when these terms are e^{-10⁴} below the rest of the
    gradient (which ``directional_derivative`` cannot resolve, and which the O(1e-16) residual
    of a computed q would swamp). Returns (log|value|, sign); (−inf, 0) when the slope is 0.
    """
    if not prompt.loss.strictly_decreasing:
        raise ValueError(f"prompt: descent_slope needs ℓ' < 0, not the {prompt.loss.name} loss")
    p = as_float_tensor(p, "p", 1)
    mask = torch.as_tensor(positions, dtype=torch.bool)
    if mask.shape != prompt.scores.shape:
        raise ValueError(
            f"positions: expected shape {tuple(prompt.scores.shape)}, got {tuple(mask.shape)}"
        )
    # The same per-token coefficients as the gradient itself, restricted to s*'s positions.
    log_w, sign_w, _ = prompt.log_coefficients_np(p.detach().numpy())
    sign = np.where(mask.numpy(), sign_w, 0.0)
    log_terms = np.where(sign != 0, log_w, NEG_INF)
    log_abs, total_sign = signed_logsumexp_np(log_terms.reshape(-1), sign.reshape(-1), axis=0)
    if total_sign == 0:
        return NEG_INF, 0.0
    return float(log_abs), float(total_sign)  # the coefficients carry ω_i = 1/n


# Lemma A.2's q, exactly: rational arithmetic on the float64 entries of E¹ and v -----------------


def _as_scaled_ints(t: Tensor) -> tuple[np.ndarray, int]:
    """(ints, K) with t = ints / 2^K exactly (float64 entries are dyadic rationals)."""
    ratios = [float(x).as_integer_ratio() for x in t.reshape(-1).tolist()]
    K = max(den.bit_length() - 1 for _, den in ratios)
    ints = np.array([num << (K - (den.bit_length() - 1)) for num, den in ratios], dtype=object)
    return ints.reshape(tuple(t.shape)), K


def _shift(x: int, k: int) -> int:
    """x·2^k rounded to an int (k may be negative)."""
    return x << k if k >= 0 else (x + (1 << (-k - 1))) >> -k


def _solve_exact(M: np.ndarray, b: np.ndarray, bits: int) -> tuple[np.ndarray, int]:
    """(Y, B): ints with M·(Y/2^B) = b to about ``bits`` bits: float64 solves refined against
    exact integer residuals (iterative refinement; each round gains ~40 bits)."""
    m = max(int(abs(x)).bit_length() for x in M.reshape(-1)) - 1
    Mf = np.array([[math.ldexp(float(_shift(int(x), 60 - m)), -60) for x in row] for row in M])
    lu = torch.linalg.lu_factor(torch.from_numpy(Mf))
    B = bits + m  # Y ~ 2^(B−m): ``bits`` bits below the solution's scale
    Y = np.zeros(len(b), dtype=object)
    target = np.array([int(x) << B for x in b], dtype=object)
    for _ in range(4 + bits // 30):
        R = target - M.dot(Y)
        top = max(int(abs(x)).bit_length() for x in R)
        if top == 0:
            break
        sh = top - 60
        Rf = torch.tensor([math.ldexp(float(_shift(int(x), -sh)), 0) for x in R], dtype=DTYPE)
        delta = torch.linalg.lu_solve(*lu, Rf[:, None]).squeeze(1).tolist()
        # M·δY = R with M = Mf·2^m: δY = solve(Mf, R/2^sh)·2^(sh − m).
        step = [_shift(int(round(math.ldexp(x, 60))), sh - m - 60) for x in delta]
        Y = Y + np.array(step, dtype=object)  # object: numpy turns big ints into floats
        if top <= m + 4:  # the residual is at the rounding of Y itself
            break
    return Y, B


@dataclass(frozen=True)
class ExactDirection:
    """Lemma A.2's q for one token as an exact rational vector (§3.2).

    q = P E¹ᵀ x with P the projection on v⊥ and (E¹PE¹ᵀ) x = e_s solved to ``bits`` bits:
    ``vᵀq = 0`` holds exactly (not up to rounding), and E¹q = ``c_num``/``den`` exactly, within
    10^``log10_residual`` of e_s. ``q`` is q rounded to float64 (for reports only).
    """

    token: int
    q: Tensor
    c_num: tuple[int, ...]
    den: int
    log10_residual: float
    v_dot_q_num: int  # the exact numerator of vᵀq: 0


def _log10_abs(num: int, den: int) -> float:
    return -math.inf if num == 0 else (math.log10(abs(num)) - math.log10(den))


def exact_descent_direction(E1, v, token: int, digits: int = 60) -> ExactDirection:
    """Lemma A.2's q ⟂ v with E¹q = e_s, exact rationals (residual ≲ 10^(−digits)).

    Needs |S| ≤ d − 1 and E¹P E¹ᵀ invertible (ValueError otherwise). Computed from E¹ and v
    alone (no gradient code), so the derivative along it is an independent check of the lemma.
    """
    E1, v = check_head(E1, v)
    S, d = E1.shape
    if not 0 <= token < S:
        raise ValueError(f"token: must lie in [0, {S}), got {token}")
    if S > d - 1:
        raise ValueError(f"|S| = {S} > d − 1 = {d - 1}: no q ⟂ v with E¹q = e_s")
    both, K = _as_scaled_ints(torch.cat([E1, v[None, :]]))
    E, w = both[:S], both[S]
    vv = int(w.dot(w))
    Ev = E.dot(w)
    M = vv * E.dot(E.T) - np.outer(Ev, Ev)  # = vv·2^(2K)·E¹PE¹ᵀ, exact
    b = np.zeros(S, dtype=object)
    b[token] = 1
    bits = int(digits * 3.33) + 64
    Y, B = _solve_exact(M, b, bits)  # M·Y/2^B ≈ e_s
    X = vv * Y  # x = X/2^(B−2K): (E¹PE¹ᵀ)x = e_s
    g = E.T.dot(X)  # E¹ᵀx = g / 2^(B−K)
    q_num = vv * g - w * int(w.dot(g))  # q = q_num / (vv·2^(B−K))
    c_num = E.dot(q_num)  # E¹q = c_num / (vv·2^B)
    den = vv << B
    resid = [c - (den if s == token else 0) for s, c in enumerate(c_num)]
    log10_res = max(_log10_abs(int(r), den) for r in resid)
    from fractions import Fraction

    q_float = torch.tensor([float(Fraction(int(x), vv << (B - K))) for x in q_num], dtype=DTYPE)
    return ExactDirection(
        token, q_float, tuple(int(c) for c in c_num), den, log10_res, int(w.dot(q_num))
    )


@dataclass(frozen=True)
class Slope:
    """d/dε L(E¹, p + εq) at ε = 0, in log space: value = sign·e^``log_abs``.

    ``log_total`` is log Σ|terms| (the size of what was summed) and ``log_residual_bound``
    bounds the part of the value due to E¹q − e_s ≠ 0; ``resolved`` says the sign is that of
    the derivative along the exact q of the lemma (the value clears both by a wide margin).
    """

    log_abs: float
    sign: float
    log_total: float
    log_residual_bound: float

    @property
    def resolved(self) -> bool:
        if self.sign == 0:
            return False
        return self.log_abs > self.log_total + math.log(1e-10) and (
            self.log_abs > self.log_residual_bound + math.log(1e3)
        )


#: The exact pair tables of the last few (E¹, v, q): a path's slopes all share them.
_PAIR_TABLES: dict[tuple, tuple[np.ndarray, ...]] = {}


def _pair_tables(E1: Tensor, v: Tensor, direction: ExactDirection) -> tuple[np.ndarray, ...]:
    """log|c_a − c_b|, its sign, log|u_a − u_b|, its sign for every token pair (a, b), from the
    exact rationals c = E¹q and u = E¹v. They do not depend on p, and converting E¹ to exact
    integers costs ~10 ms, so they are computed once per (E¹, v, q), not at every point of a
    path (``derivative_along`` is called at each of its hundreds of points)."""
    key = (E1.numpy().tobytes(), tuple(E1.shape), v.numpy().tobytes(), direction.c_num)
    key += (direction.den,)
    tables = _PAIR_TABLES.get(key)
    if tables is not None:
        return tables
    both, K = _as_scaled_ints(torch.cat([E1, v[None, :]]))
    u_num = both[:-1].dot(both[-1])  # u = E¹v = u_num / 2^(2K), exact
    c = direction.c_num
    S = E1.shape[0]
    log_dc = np.full((S, S), NEG_INF)
    sg_dc = np.zeros((S, S))
    log_du = np.full((S, S), NEG_INF)
    sg_du = np.zeros((S, S))
    for a in range(S):
        for b in range(S):
            dc, du = c[a] - c[b], int(u_num[a] - u_num[b])
            if dc:  # big ints: no float conversion (math.log takes them exactly)
                log_dc[a, b], sg_dc[a, b] = math.log(abs(dc)), (1.0 if dc > 0 else -1.0)
            if du:
                log_du[a, b], sg_du[a, b] = math.log(abs(du)), (1.0 if du > 0 else -1.0)
    log_dc -= math.log(direction.den)
    log_du -= 2 * K * math.log(2)
    if len(_PAIR_TABLES) >= 16:
        _PAIR_TABLES.clear()
    _PAIR_TABLES[key] = tables = (log_dc, sg_dc, log_du, sg_du)
    return tables


def derivative_along(E1, sequences, y, v, p, direction: ExactDirection) -> Slope:
    """d/dε L(E¹, p + εq) from the model's definition, by forward-mode differentiation.

    L = (1/n) Σ_i log(1 + e^(−y_i f_i)), f_i = Σ_t σ_it u_it, σ_i = softmax(E¹_{X_i} p),
    u = E¹v. Along q the logits move by c = E¹q, so with ℓ'(z) = −1/(1 + e^z):

        dL/dε = (1/n) Σ_i ℓ'(y_i f_i) y_i Σ_{t<k} σ_it σ_ik (c_it − c_ik)(u_it − u_ik),

    with c_it = c_{x_it}, u_it = u_{x_it}: the pairwise form of δf_i = Σ_t δσ_it u_it (no
    1 − σ cancellation). c and u differences are exact (rationals from ``ExactDirection`` and
    from E¹, v); every term is summed in log space, so the value keeps relative accuracy however
    small it is. Nothing here reads the gradient code of ``models.problems.attention``.
    """
    E1, v = check_head(E1, v)
    seq = check_sequences(sequences, E1.shape[0])
    y = check_labels(y, seq.shape[0]).numpy()
    p = as_float_tensor(p, "p", 1)
    n, T = seq.shape
    log_dc, sg_dc, log_du, sg_du = _pair_tables(E1, v, direction)
    u = (E1 @ v).numpy()
    idx = seq.numpy()
    z = (E1 @ p).numpy()[idx]  # logits (n, T)
    zmax = z.max(1, keepdims=True)
    log_s = z - zmax - np.log(np.exp(z - zmax).sum(1, keepdims=True))
    f = (np.exp(log_s) * u[idx]).sum(1)
    log_h = -np.logaddexp(0.0, y * f)  # log(1/(1 + e^(y f))) = log(−ℓ'(y f))
    ti, ki = np.triu_indices(T, 1)
    a_tok, b_tok = idx[:, ti], idx[:, ki]
    base = (log_h - math.log(n))[:, None] + log_s[:, ti] + log_s[:, ki] + log_du[a_tok, b_tok]
    terms = base + log_dc[a_tok, b_tok]
    signs = -y[:, None] * sg_dc[a_tok, b_tok] * sg_du[a_tok, b_tok]
    log_abs, sign = signed_logsumexp_np(terms.reshape(-1), signs.reshape(-1), axis=0)
    live = signs.reshape(-1) != 0
    log_total = float(np.logaddexp.reduce(terms.reshape(-1)[live])) if live.any() else NEG_INF
    # |E¹q − e_s| ≤ 10^r per token, so |Δ(E¹q − e_s)| ≤ 2·10^r in every pair.
    log_res = direction.log10_residual * math.log(10) + math.log(2)
    bound = base + log_res
    bound = np.where(np.isfinite(log_du[a_tok, b_tok]), bound, NEG_INF)
    log_bound = (
        float(np.logaddexp.reduce(bound.reshape(-1))) if np.isfinite(bound).any() else NEG_INF
    )
    return Slope(float(log_abs), float(sign), log_total, log_bound)


# ---------------------------------------------------------------------------------------------
# Models of the real-data experiment (§4.2)
# ---------------------------------------------------------------------------------------------


def _normal(shape: tuple[int, ...], std: float, gen: torch.Generator) -> Tensor:
    return torch.randn(shape, generator=gen, dtype=DTYPE) * std


_ONE = torch.ones(1, dtype=DTYPE)


class OneLayerModel(nn.Module):
    """f(X) = softmax(pᵀE_Xᵀ) E_X v (§1), with E⁰ ~ N(0, I/d), p⁰ = 0, v⁰ ~ N(0, I/d).

    v is a parameter when ``train_v`` (the real-data runs may train it, §4.2 [U]) and a fixed
    buffer otherwise (the theory). A pad token is an ordinary token here: it gets an embedding
    and attention like any other, as the fixed-T theory has no notion of padding.
    """

    def __init__(self, vocab_size: int, dim: int, train_v: bool = True, seed: int = 0):
        super().__init__()
        self.vocab_size, self.dim = int(vocab_size), int(dim)
        self.E = nn.Parameter(torch.empty(self.vocab_size, self.dim, dtype=DTYPE))
        self.p = nn.Parameter(torch.empty(self.dim, dtype=DTYPE))
        v = torch.empty(self.dim, dtype=DTYPE)
        if train_v:
            self.v = nn.Parameter(v)
        else:
            self.register_buffer("v", v)
        self._add_layers()
        self.reset_parameters(seed)

    def _add_layers(self) -> None:
        """Hook for deeper models: create their modules before initialisation."""

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        """Re-draw every parameter from a torch.Generator seeded with ``seed``."""
        gen = torch.Generator().manual_seed(int(seed))
        std = self.dim**-0.5
        self.E.copy_(_normal(self.E.shape, std, gen))
        self.p.zero_()
        self.v.copy_(_normal(self.v.shape, std, gen))

    def hidden(self, sequences: Tensor) -> Tensor:
        """The token representations read by the `<cls>` attention: here E_X."""
        # F.embedding, not E[X]: the same gather, but its backward (a per-row sum) is ~25 %
        # faster than advanced indexing's deterministic index_put on CPU (measured, G3 sizes).
        return F.embedding(check_sequences(sequences, self.vocab_size), self.E)

    @torch.no_grad()
    def key_scores(self, sequences: Tensor, w: Tensor) -> tuple[Tensor, Tensor]:
        """(scores, counts): per token s, the mean over its occurrences of ⟨h_ji, w⟩, h the
        keys the `<cls>` attention scores (``hidden``), and how many occurrences there are.

        With w = p these are the `<cls>` scores attention reads, with w = v the head scores the
        read-out averages. For the one-layer model h_ji = E_{x_ji}, so the score of a token that
        occurs is ⟨E_s, w⟩; deeper models mix the context in, so a score depends on the
        sequences it is read on. A token that never occurs gets NaN.
        """
        seq = check_sequences(sequences, self.vocab_size).to(self.E.device)
        H = self.hidden(seq)
        ones = torch.ones(seq.shape, dtype=H.dtype, device=H.device)
        counts = _scatter_to_tokens(seq, ones, self.vocab_size)
        total = _scatter_to_tokens(seq, H @ w.to(H), self.vocab_size)
        return torch.where(counts > 0, total / counts.clamp_min(1), math.nan), counts

    def forward(self, sequences: Tensor) -> Tensor:
        """The logit f(X_i) of every sequence, shape (n,): cls_readout(E_X, p, v).

        Here the keys are the embeddings, so E_X p = (E p)_X and E_X v = (E v)_X: the scores
        and values are gathers of two |S|-vectors, not of (n, T, d) rows. The same function
        (equal to cls_readout(E_X, p, v) up to rounding in the dot products, tested), and one
        G3 epoch (n = 2000, T = 30, d = 32) forward and backward costs 4.5 ms instead of 25.
        """
        seq = check_sequences(sequences, self.vocab_size)
        both = F.embedding(seq, self.E @ torch.stack((self.p, self.v), 1))  # (n, T, 2)
        return softmax_margins(both[..., :1], both[..., 1], _ONE.to(both))  # p = 1: exact


class TwoLayerModel(OneLayerModel):
    """One self-attention block with a skip connection and LayerNorm, then the `<cls>` read-out.

    H0 = E_X (no positional encoding), H1 = LN(H0 + softmax(H0 Wq (H0 Wk)ᵀ/√d) H0 Wv),
    f = softmax(pᵀH1ᵀ) H1 v (§4.2, [U] architecture). Wq, Wk, Wv ~ N(0, I/d); LN starts at
    weight 1, bias 0.
    """

    def _add_layers(self) -> None:
        self.W = nn.ParameterDict(
            {k: nn.Parameter(torch.empty(self.dim, self.dim, dtype=DTYPE)) for k in "qkv"}
        )
        self.norm = nn.LayerNorm(self.dim, dtype=DTYPE)

    @torch.no_grad()
    def reset_parameters(self, seed: int) -> None:
        super().reset_parameters(seed)
        gen = torch.Generator().manual_seed(int(seed) + 1)
        for k in "qkv":
            self.W[k].copy_(_normal((self.dim, self.dim), self.dim**-0.5, gen))
        self.norm.reset_parameters()

    def hidden(self, sequences: Tensor) -> Tensor:
        H0 = super().hidden(sequences)
        logits = (H0 @ self.W["q"]) @ (H0 @ self.W["k"]).transpose(-1, -2) / math.sqrt(self.dim)
        return self.norm(H0 + torch.softmax(logits, dim=-1) @ (H0 @ self.W["v"]))

    def forward(self, sequences: Tensor) -> Tensor:
        """The logit f(X_i) of every sequence, shape (n,): cls_readout(H1, p, v)."""
        return cls_readout(self.hidden(sequences), self.p, self.v)


def train_full_batch(
    model: nn.Module, sequences, y, epochs: int, lr: float, seed: int | None = None
) -> Tensor:
    """Full-batch Adam on the mean logistic loss (§4.2 protocol); returns the loss curve.

    The curve has epochs + 1 entries: the loss before each step and after the last; it is a CPU
    tensor. With a seed the model is re-initialised first (it needs ``reset_parameters(seed)``,
    as the models here have, and draws on the CPU whatever the model's device), so a call is
    reproducible. Training runs where the model lives (``model.to(models.numerics.device.device())``
    for a GPU): the data are moved there, and the curve stays there until the end, so an epoch
    never waits on a copy to the host.
    """
    seq = check_sequences(sequences)
    y = check_labels(y, seq.shape[0])
    where = next(model.parameters()).device
    seq, y = seq.to(where), y.to(where)
    if seed is not None:
        model.reset_parameters(seed)
    opt = torch.optim.Adam([q for q in model.parameters() if q.requires_grad], lr=lr)
    curve = []
    for _ in range(int(epochs)):
        opt.zero_grad()
        loss = LOGISTIC.value(y * model(seq)).mean()
        loss.backward()
        opt.step()
        curve.append(loss.detach())
    with torch.no_grad():
        curve.append(LOGISTIC.value(y * model(seq)).mean())
    return torch.stack(curve).cpu()


# ---------------------------------------------------------------------------------------------
# Real data already on disk: IMDB and Yelp polarity (§4.2). Nothing is downloaded.
# ---------------------------------------------------------------------------------------------

PAD, UNK = "<pad>", "<unk>"
PAD_ID, UNK_ID = 0, 1
_BREAK = re.compile(r"<br\s*/?>", re.IGNORECASE)
_NON_ALNUM = re.compile(r"[^a-z0-9]+")


def tokenize(text: str) -> list[str]:
    """Lowercase, drop HTML line breaks (IMDB's ``<br />``), split on non-alphanumerics."""
    return [w for w in _NON_ALNUM.split(_BREAK.sub(" ", text).lower()) if w]


def _require(path: Path, what: str) -> Path:
    if not path.exists():
        raise FileNotFoundError(f"{what} not found: {path}")
    return path


def _read_review(path: Path) -> str:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason})") from None
    if not text.strip():
        raise ValueError(f"{path}: empty review file")
    return text


def _check_max_docs(max_docs: int | None) -> None:
    if max_docs is not None and max_docs < 1:
        raise ValueError(f"max_docs: must be ≥ 1 or None, got {max_docs}")


def _interleave(a: list, b: list) -> list:
    """a0, b0, a1, b1, ..., then the rest of the longer list: every prefix is near balanced."""
    out = [x for pair in zip(a, b, strict=False) for x in pair]
    return out + a[len(b) :] + b[len(a) :]


def load_imdb(root, split: str = "train", max_docs: int | None = None):
    """(texts, labels) from the IMDB archive layout root/<split>/{pos,neg}/*.txt.

    Files are read in name order and interleaved positive/negative, so ``max_docs`` keeps a
    balanced prefix. Labels are float64 ±1 (pos = +1).
    """
    _check_max_docs(max_docs)
    base = _require(_require(Path(root), "IMDB root") / split, f"IMDB split {split!r}")
    folders = {
        +1.0: _require(base / "pos", "IMDB folder"),
        -1.0: _require(base / "neg", "IMDB folder"),
    }
    files = {label: sorted(folder.glob("*.txt")) for label, folder in folders.items()}
    if not files[1.0] and not files[-1.0]:
        raise ValueError(f"{base}: no *.txt reviews under pos/ or neg/")
    pairs = _interleave([(f, 1.0) for f in files[1.0]], [(f, -1.0) for f in files[-1.0]])
    pairs = pairs[:max_docs] if max_docs is not None else pairs
    texts = [_read_review(f) for f, _ in pairs]
    return texts, torch.tensor([label for _, label in pairs], dtype=DTYPE)


def load_yelp_polarity(csv_path, max_docs: int | None = None):
    """(texts, labels) from the Yelp polarity CSV: rows "label","text", 1 = negative, 2 = positive.

    The archive writes line breaks inside reviews as the two characters backslash-n; they are
    turned back into spaces. Labels are float64 ±1.
    """
    _check_max_docs(max_docs)
    path = _require(Path(csv_path), "Yelp CSV")
    texts: list[str] = []
    labels: list[float] = []
    with path.open(newline="", encoding="utf-8") as fh:
        for row in csv.reader(fh):
            if max_docs is not None and len(texts) >= max_docs:
                break
            line = len(texts) + 1
            if len(row) != 2:
                raise ValueError(
                    f"{path}: row {line}: expected 2 fields (label, text), got {len(row)}"
                )
            if row[0].strip() not in ("1", "2"):
                raise ValueError(f"{path}: row {line}: label must be 1 or 2, got {row[0]!r}")
            labels.append(1.0 if row[0].strip() == "2" else -1.0)
            texts.append(row[1].replace("\\n", " "))
    if not texts:
        raise ValueError(f"{path}: no rows")
    return texts, torch.tensor(labels, dtype=DTYPE)


def _tokens(doc: str | Sequence[str]) -> list[str]:
    return tokenize(doc) if isinstance(doc, str) else list(doc)


def build_vocab(docs: Iterable[str | Sequence[str]], max_size: int, min_count: int = 1) -> dict:
    """token → id: PAD_ID = 0, UNK_ID = 1, then the most frequent tokens (ties by spelling).

    At most ``max_size`` ids in all (specials included), each regular token seen ≥ min_count
    times. Docs are raw texts (tokenized here) or token lists.
    """
    if max_size < 2:
        raise ValueError(f"max_size: must be ≥ 2 (the pad and unknown tokens), got {max_size}")
    counts = Counter(w for doc in docs for w in _tokens(doc))
    ranked = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
    vocab = {PAD: PAD_ID, UNK: UNK_ID}
    for w in ranked[: max_size - 2]:
        vocab[w] = len(vocab)
    return vocab


def encode(docs: Iterable[str | Sequence[str]], vocab: dict, T: int) -> Tensor:
    """(n, T) int64 ids: the first T tokens of each doc, unknown words → UNK_ID, pad → PAD_ID.

    The theory has a fixed length T, so short documents are filled with the pad token, which the
    models treat as an ordinary token (it is attended to and has an embedding). Its frequency
    then depends on document length, which can correlate with the label: read α and Δ of the pad
    token with that in mind, or drop it from token-level plots.
    """
    if T < 1:
        raise ValueError(f"T: must be ≥ 1, got {T}")
    rows = []
    for doc in docs:
        ids = [vocab.get(w, UNK_ID) for w in _tokens(doc)[:T]]
        rows.append(ids + [PAD_ID] * (T - len(ids)))
    if not rows:
        raise ValueError("docs: no documents to encode")
    return torch.tensor(rows, dtype=torch.int64)
