"""Metamorphic twins: each instance restated in a needlessly different way (issue 21).

A twin is the SAME mathematical instance written in other coordinates or another order: a
claim that the theory decides must get the same verdict on it, so a verdict that flips on a
twin hinged on rounding or on an index convention (argmax breaking ties towards the lowest
index, a summation order), not on the mathematics. This is PEPit's "uselessly complexified
examples" (STYLE.md) applied to the instances of this suite.

``twins_of(inst)`` lists the twins of an instance; ``TWINS`` maps each instance class to its
twin functions, each ``twin(inst) -> Twin | None`` (None when the twin does not exist for
that instance, or would be the instance itself). A ``Twin`` holds the transformed
``instance`` (same class, built through its constructor, so it passes the class's own
validation, with ``alpha``, ``p0``/``W0``, ``s_star``, ``relevant``, ``groups`` and the
index- or coordinate-dependent ``meta`` entries mapped) and the maps that bring results of
the twin back to the original: ``selection_back``, ``param_back`` and the rest (see `Twin`).

Twins (original → twin; what maps back):

=====================  ==============================================  ======================
family / twin          transformation                                  back
=====================  ==============================================  ======================
prompt, cross
 permute-inputs        inputs reordered (X, y, Z, α)                   selection, per-input
                                                                       and per-token arrays
 permute-tokens        each input's tokens reordered, its own order    selection (token
                       per input; α_i follows its token                indices), per-token
 flip-labels-and-      y ↦ −y, X ↦ −X (scores unchanged bit for bit,   p ↦ −p, W ↦ −W
 tokens                keys negated); v is kept, so v = e_j premises
                       (DECOUPLED, PRESCRIBED_SCORES) stay literal
 rotate-embedding      x ↦ Ux with Uv = v (rule below); prompt:        prompt p ↦ Rᵀp;
                       W ↦ UWRᵀ, p ↦ Rp, R = U (R a free rotation      cross W ↦ UᵀWV
                       when U = I); cross: z ↦ Vz (V free),
                       W ↦ UWVᵀ
 signed-permute-       as rotate-embedding with signed permutation     as rotate-embedding
 embedding             matrices: exact, so exact relations among keys
                       (SVM_INFEASIBLE's hulls) survive
embedding
 permute-sequences     sequences (and y, s*) reordered                 per-sequence arrays
 permute-positions     each sequence's positions reordered (the        per-position arrays
                       model has no positional information)
 relabel-tokens        token ids permuted: rows of E0, ids in the      token ids, per-token
                       sequences, s*, ``relevant``, ``groups``          (vocabulary) arrays,
                                                                       E (rows)
 flip-labels-and-head  y ↦ −y, v ↦ −v: scores y⟨E_s, v⟩ and the        nothing moves; but
                       one-step E¹ are unchanged bit for bit           α_s, Δ_s change sign
 rotate-embedding      E0 ↦ E0 Uᵀ with Uv = v                          p ↦ Uᵀp, E ↦ EU
 signed-permute-       E0 ↦ E0 Pᵀ, P a signed permutation fixing v     p ↦ Pᵀp, E ↦ EP
 embedding             (only where v has zero coordinates)
NTP (2403.08081)
 permute-sequences     samples (sequences with their labels)           per-sample arrays,
                       reordered                                       selection
 relabel-tokens        token ids permuted: E's rows, sequences,        token ids, vocabulary
                       labels, meta (chains, cycles, counts, cycle,    arrays, E; where E = I
                       query); where E = I also E's coordinates, so    W ↦ ΠᵀWΠ
                       E stays I and W ↦ ΠWΠᵀ
 rotate-embedding      E ↦ EMᵀ (x ↦ Mx, M Haar), W ↦ MWMᵀ; not made    W ↦ MᵀWM, E ↦ EM
                       where E = I exactly
 signed-permute-       as rotate-embedding with M a signed             as rotate-embedding
 embedding             permutation (exact)
linear NTP (2402.18551)
 permute-contexts      H's columns with P's rows and π̂; meta          per-context arrays,
                       "repeat"                                        selection
 relabel-vocabulary    P's columns, W's rows (W'[π(z)] = W[z]), meta   W's rows, token ids,
                       "twins"                                         vocabulary arrays
 rotate-embedding      H ↦ MH (M Haar; equal contexts stay equal),     W ↦ W'M
                       W ↦ WMᵀ
 signed-permute-       as rotate-embedding with M a signed             as rotate-embedding
 embedding             permutation (exact)
=====================  ==============================================  ======================

Exactness rules (the twin must be the same instance, ties included):

- Sign flips are exact: every score of the twin equals the original's bit for bit
  (``Twin.exact_scores``); negation commutes with rounding, fused multiply-adds included.
- Permutations are exact in the mathematics but not always in the engine: the scores come
  from a matrix-vector product (y·(X v), E v) whose rounding depends on a row's POSITION
  (measured with torch's float64 (S, d) @ (d,): 1 to 4 of 6 to 22 permuted rows come out
  one ulp apart; the vectorised kernel treats rows in groups). A permuted row is therefore
  bit-identical only when v has at most one non-zero coordinate (then every product but one
  is an exact zero): true of every generator that promises ties (DECOUPLED: v = e_d;
  PRESCRIBED_SCORES: v = e_1). Otherwise (official, nostat cross data; the Gaussian heads of
  the embedding generators under relabel-tokens) ``exact_scores`` is False and the scores
  agree to rounding. Permuting sequences or positions of an embedding instance moves no row
  of E0 (the scores are gathered from one E0·v), so those stay exact.
- A rotation of the embedding (token) space fixes v. It acts on the coordinates where v is
  exactly zero (a Haar rotation of those coordinates, a reflection if there is one), and
  every other coordinate of every token is copied bit for bit, so the scores y·vᵀx are
  bit-identical and the ties the original has exactly stay exact: this is the case of every
  generator here that promises ties (DECOUPLED: v = e_d; PRESCRIBED_SCORES: v = e_1). Only
  when v has no zero coordinate does the rotation act on v's whole orthogonal complement
  (U = H·diag(1, Q)·H with H the Householder reflection taking v̂ to e_1); the scores then
  agree only to rounding (``exact_scores`` False), and such a token rotation is not made
  when the scores have an exact tie within an input: the prompt twin then rotates only the
  key space (W ↦ WRᵀ) and the cross twin only the queries, which leaves the scores exact.
- A rotation rounds the keys, so exact relations among keys (a key exactly in the hull of
  others: SVM_INFEASIBLE) would become near-relations that rounding can turn feasible: a
  prompt instance with SVM_INFEASIBLE gets no rotate-embedding twin, only the exact
  signed-permute-embedding one. Rows that are equal stay equal under every rotation here
  (each distinct row is rotated once).
- W ↦ UWUᵀ is made exact when it is W mathematically (W's block on the rotated coordinates
  is c·I and it does not couple them to the others: DECOUPLED's W = diag(I, 0)), so
  DECOUPLED keeps W = diag(I, 0) and keys = [k ; 0] bit for bit.

Not made, and why:
- "duplicate-dominated-token": no added token is inert. Any extra token gets softmax mass
  e^{a}/Σ > 0 at every finite p, so L(p), the margins and the path change (a duplicate of
  token t is token t with its logit raised by log 2). Only ATT-SVM and the limit direction
  are unchanged, which is a different, weaker statement than "same instance".
- "rescale": scaling keys by c > 0 rescales p^mm by 1/c and the time of the flow, and
  scaling the scores changes the loss landscape (ℓ is not homogeneous): no statement here is
  scale-free in both, so no rescaled twin is offered.

NTP and linear NTP instances: there is no head v to fix, so the coordinate twins are free
rotations (or signed permutations) of the embedding space, and the logits agree with the
original's to rounding only (``exact_scores`` is False for every NTP twin: the loss sums
samples, distinct tokens and coordinates in another order). The literal promise E = I
(ORTHONORMAL_VOCAB, the chain closed form) admits no change of coordinates; relabel-tokens
then permutes the coordinates with the ids, which keeps E = I bit for bit.

Meta: entries whose meaning is known are mapped (token and input indices, score and key
arrays, vectors in key space, token ids, per-token vocabulary arrays, the signed quantities a
label flip negates); every other entry is dropped, and ``Twin.dropped_meta`` names it. The
twin's ``meta["twin"]`` names the transformation (chained for a twin of a twin). The twin
keeps the original's ``seed`` and ``assumptions`` (each assumption is invariant under its
twins; the instance text of ASSUMPTIONS holds literally, v = e_j included).

Determinism: every random choice comes from ``numpy.random.default_rng`` seeded with the
instance's seed and the twin's name, so a twin replays from the instance alone. A drawn
permutation that is the identity is replaced by a cyclic shift, so every twin differs from
its original when the sizes allow; a twin that cannot differ (n = 1 for permute-inputs,
T = 1 for permute-tokens, ...) is not made.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from strategies.instances import (
    SVM_INFEASIBLE,
    CrossInstance,
    EmbeddingInstance,
    PromptInstance,
)
from strategies.ntp_instances import LinearNTPInstance, NTPInstance

Tensor = torch.Tensor
DTYPE = torch.float64
Instance = PromptInstance | CrossInstance | EmbeddingInstance | NTPInstance | LinearNTPInstance

__all__ = [
    "Twin",
    "TWINS",
    "twins_of",
    "permute_inputs",
    "permute_tokens",
    "flip_labels_and_tokens",
    "rotate_embedding",
    "signed_permute_embedding",
    "permute_sequences",
    "permute_positions",
    "relabel_tokens",
    "flip_labels_and_head",
    "permute_contexts",
    "relabel_vocabulary",
]


def _identity(x):
    return x


@dataclass(frozen=True, eq=False)
class Twin:
    """One metamorphic twin of an instance: the instance and the maps back to the original.

    - ``selection_back(sel)``: a selection of the twin (n,) → the original's. Prompt and
      cross: token indices per input; embedding: token ids per sequence.
    - ``param_back(x)``: a parameter of the twin → the original's: p (d,) for prompt and
      embedding, W (d, d) or vec(W) (d²,) for cross.
    - ``tokens_back(a)``: an array indexed by (input, position) first, (n, T, ...), of the
      twin (scores, logits, attention) → the original's. Key vectors in a trailing axis
      are not rotated back: use ``param_back`` for vectors of the key space.
    - ``inputs_back(a)``: an array indexed by input first (n, ...) → the original's.
    - ``vocab_back(a)``, ``embedding_back(E)`` (embedding and NTP twins; linear NTP twins
      have ``vocab_back`` only; else None): an array indexed by token id first (|S|, ...) →
      the original's; embeddings E (|S|, d) → the original's (rows relabelled and the
      embedding space rotated back).
    - NTP: a selection is one token id per sample, ``inputs_back`` and ``tokens_back`` take
      per-sample arrays or lists (ragged ones too), ``param_back`` W (d, d). Linear NTP: a
      selection is one token id per context, ``inputs_back`` takes per-context arrays,
      ``tokens_back`` (context, token) arrays (m, V, ...), ``param_back`` W (V, d).
    - ``exact_scores``: the twin's scores, mapped back, equal the original's bit for bit.
    - ``dropped_meta``: the meta entries that could not be mapped (not in the twin).
    - ``note``: what was done where a rule forced a choice.
    Each map accepts numpy arrays and torch tensors and returns the same kind.
    """

    name: str
    instance: Instance
    selection_back: Callable[[Any], Any]
    param_back: Callable[[Any], Any]
    tokens_back: Callable[[Any], Any]
    inputs_back: Callable[[Any], Any]
    exact_scores: bool
    dropped_meta: tuple[str, ...] = ()
    note: str = ""
    vocab_back: Callable[[Any], Any] | None = None
    embedding_back: Callable[[Any], Any] | None = None

    def __repr__(self) -> str:
        dropped = f", dropped_meta={list(self.dropped_meta)}" if self.dropped_meta else ""
        return f"Twin({self.name!r}, {self.instance!r}, exact_scores={self.exact_scores}{dropped})"


# ---- randomness ------------------------------------------------------------------------------


def _rng(inst: Instance, name: str) -> np.random.Generator:
    """The twin's generator: seeded by the instance's seed and the twin's name."""
    return np.random.default_rng([int(inst.seed) % 2**63, zlib.crc32(name.encode())])


def _perm(rng: np.random.Generator, m: int) -> np.ndarray:
    """A random permutation of range(m), never the identity when m ≥ 2."""
    p = rng.permutation(m)
    if m >= 2 and np.array_equal(p, np.arange(m)):
        p = np.roll(p, 1)
    return p


def _row_perms(rng: np.random.Generator, n: int, T: int) -> np.ndarray:
    """(n, T): one permutation of range(T) per row, not all the identity when T ≥ 2."""
    tau = np.stack([rng.permutation(T) for _ in range(n)])
    if T >= 2 and np.array_equal(tau, np.broadcast_to(np.arange(T), (n, T))):
        tau[0] = np.roll(tau[0], 1)
    return tau


def _haar(rng: np.random.Generator, m: int) -> np.ndarray:
    """A Haar-random orthogonal m × m matrix (the reflection −1 when m = 1)."""
    if m == 1:
        return -np.ones((1, 1))
    q, r = np.linalg.qr(rng.standard_normal((m, m)))
    return q * np.where(np.diag(r) < 0, -1.0, 1.0)


# ---- array helpers (numpy or torch in, the same kind out) ------------------------------------


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, Tensor) else np.asarray(x)


def _like(out: np.ndarray, ref):
    """``out`` as the kind of ``ref``: a torch tensor (float64 or int64) or a numpy array."""
    if isinstance(ref, Tensor):
        return torch.as_tensor(np.ascontiguousarray(out), dtype=ref.dtype)
    return out


def _rotate_rows(rows: np.ndarray, A: np.ndarray) -> np.ndarray:
    """rows @ Aᵀ over the last axis, each distinct row rotated once (equal rows stay equal,
    whatever blocking the matrix product uses)."""
    shape = rows.shape
    flat = rows.reshape(-1, shape[-1])
    if flat.shape[0] == 0:
        return rows.copy()
    uniq, inverse = np.unique(flat, axis=0, return_inverse=True)
    return (uniq @ A.T)[inverse.reshape(-1)].reshape(shape[:-1] + (A.shape[0],))


@dataclass(frozen=True)
class _Map:
    """An orthogonal map x ↦ Mx of R^d, applied to row vectors on the last axis (x ↦ xMᵀ).

    ``perm``/``signs``: a signed permutation, (Mx)_j = signs_j·x_{perm_j}, applied exactly.
    Otherwise ``Q`` acts on the coordinates ``moved`` and the others are copied bit for bit
    (``moved`` = all coordinates for a dense map).
    """

    d: int
    perm: np.ndarray | None = None
    signs: np.ndarray | None = None
    moved: np.ndarray | None = None
    Q: np.ndarray | None = None

    @property
    def matrix(self) -> np.ndarray:
        return self.forward(np.eye(self.d)).T

    @property
    def trivial(self) -> bool:
        return np.array_equal(self.matrix, np.eye(self.d))

    def forward(self, x):
        a = _np(x).astype(np.float64)
        if self.perm is not None:
            out = a[..., self.perm] * self.signs
        else:
            out = a.copy()
            if self.moved is not None and self.moved.size:
                out[..., self.moved] = _rotate_rows(a[..., self.moved], self.Q)
        return _like(out, x)

    def back(self, x):
        """x ↦ Mᵀx on the last axis."""
        a = _np(x).astype(np.float64)
        if self.perm is not None:
            out = np.empty_like(a)
            out[..., self.perm] = a * self.signs
        else:
            out = a.copy()
            if self.moved is not None and self.moved.size:
                out[..., self.moved] = _rotate_rows(a[..., self.moved], self.Q.T)
        return _like(out, x)


def _identity_map(d: int) -> _Map:
    return _Map(d, moved=np.arange(0), Q=np.zeros((0, 0)))


def _dense_map(d: int, M: np.ndarray) -> _Map:
    return _Map(d, moved=np.arange(d), Q=M)


def _signed_perm(rng: np.random.Generator, d: int, coords: np.ndarray) -> _Map:
    """A signed permutation of the coordinates ``coords`` (the others fixed), not the identity."""
    perm, signs = np.arange(d), np.ones(d)
    inner = coords[_perm(rng, coords.size)]
    flips = np.where(rng.random(coords.size) < 0.5, -1.0, 1.0)
    if np.array_equal(inner, coords) and np.all(flips > 0):
        flips[0] = -1.0
    perm[coords] = inner
    signs[coords] = flips
    return _Map(d, perm=perm, signs=signs)


def _one_axis(v: Tensor) -> bool:
    """v has at most one non-zero coordinate: then every matrix-vector product with v is a
    single exact product per row, whatever the row's position (see the module rules)."""
    return int(torch.count_nonzero(v)) <= 1


def _has_exact_ties(scores: np.ndarray) -> bool:
    """Whether two scores of one input (row) are exactly equal."""
    s = np.sort(scores, axis=-1)
    return bool(np.any(s[..., 1:] == s[..., :-1]))


def _fixing(v: np.ndarray, rng: np.random.Generator, kind: str, scores: np.ndarray) -> _Map | None:
    """An orthogonal map U of the embedding space with Uv = v, or None (see the module rules).

    ``kind`` "rotate": a Haar rotation of the coordinates where v = 0 (exact: the scores do
    not move), else of v's orthogonal complement through a Householder frame (scores to
    rounding; None if ``scores`` have an exact tie within a row). "signed": a signed
    permutation of the coordinates where v = 0, else None.
    """
    d = v.shape[0]
    zeros = np.flatnonzero(v == 0)
    if zeros.size:
        if kind == "signed":
            return _signed_perm(rng, d, zeros)
        return _Map(d, moved=zeros, Q=_haar(rng, zeros.size))
    if kind == "signed" or d < 2 or _has_exact_ties(scores):
        return None
    vh = v / np.linalg.norm(v)
    e1 = np.zeros(d)
    e1[0] = 1.0
    u = vh - e1 if vh[0] <= 0 else vh + e1  # the better-conditioned of the two reflections
    H = np.eye(d) - 2.0 * np.outer(u, u) / float(u @ u)
    D = np.eye(d)
    D[1:, 1:] = _haar(rng, d - 1)
    return _dense_map(d, H @ D @ H)


def _rotation(rng: np.random.Generator, d: int, kind: str) -> _Map:
    """A free orthogonal map of R^d (no vector to fix): Haar, or a signed permutation."""
    if kind == "signed":
        return _signed_perm(rng, d, np.arange(d))
    return _dense_map(d, _haar(rng, d))


def _matrix_map(W, left: _Map, right: _Map):
    """W ↦ L W Rᵀ: the rows of W mapped by R, then its columns by L."""
    out = _np(left.forward(_np(right.forward(_np(W))).T)).T
    return _like(np.ascontiguousarray(out), W)


def _matrix_back(W, left: _Map, right: _Map):
    """W ↦ Lᵀ W R, the inverse of `_matrix_map`."""
    out = _np(left.back(_np(right.back(_np(W))).T)).T
    return _like(np.ascontiguousarray(out), W)


# ---- meta ------------------------------------------------------------------------------------

#: Meta entries that no twin here changes: sizes, tolerances, generator parameters, labels of
#: figures, and quantities invariant under every map (margins, cosines, norms).
_INVARIANT = frozenset(
    (
        "min_gap margin margin_gap method p0_norm variant figure C C_values losses tight "
        "hull_weights local_inits notebook_objective K flagged_pairs weak_boost S n T sigma "
        "beaten_by clip n_stop stop_shrink level_counts levels positive_occurrences "
        "negative_occurrences"
    ).split()
)

_KEEP = object()
_DROP = object()


def _map_meta(meta: dict, name: str, rules: dict) -> tuple[dict, tuple[str, ...]]:
    """Apply ``rules`` (key → function of the value, or _KEEP; a function may return _DROP)
    to ``meta``; entries without a rule are dropped. Returns the new meta and the dropped
    keys, and records the twin's name under "twin"."""
    out, dropped = {}, []
    for key, value in meta.items():
        if key == "twin":
            continue
        rule = rules.get(key, _KEEP if key in _INVARIANT else None)
        try:
            new = value if rule is _KEEP else (rule(value) if rule is not None else _DROP)
        except (TypeError, ValueError, IndexError, KeyError, AttributeError):
            # the key means something else for this instance's strategy (joint instances'
            # "support" is a flag per input, not a token list per input): not mappable
            new = _DROP
        if new is _DROP:
            dropped.append(key)
        else:
            out[key] = new
    out["twin"] = f"{meta['twin']}+{name}" if "twin" in meta else name
    return out, tuple(dropped)


def _relation_k(inst: PromptInstance, twin_keys: Tensor):
    """meta "k" of a prompt twin: the twin's keys [..., :dk] when the original's keys are
    exactly [k ; 0] and the twin's are [· ; 0] too (DECOUPLED), else dropped."""
    k = inst.meta.get("k")
    if not isinstance(k, Tensor) or k.dim() != 3 or k.shape[:2] != inst.keys.shape[:2]:
        return _DROP
    dk = k.shape[-1]
    keys = inst.keys
    if not (torch.equal(keys[..., :dk], k) and bool((keys[..., dk:] == 0).all())):
        return _DROP
    if not bool((twin_keys[..., dk:] == 0).all()):
        return _DROP
    return twin_keys[..., :dk].clone()


# ---- prompt and cross: index twins -----------------------------------------------------------


@dataclass(frozen=True)
class _Index:
    """Twin input j, token t is the original's input src[j], token tau[j, t]."""

    src: np.ndarray  # (n,)
    tau: np.ndarray  # (n, T)

    @property
    def inv_src(self) -> np.ndarray:
        return np.argsort(self.src)

    @property
    def inv_tau(self) -> np.ndarray:
        return np.argsort(self.tau, axis=1)

    # forward (original → twin)
    def tokens(self, a):
        """Per-token array (n, T, ...) → the twin's."""
        arr = _np(a)
        out = arr[self.src[:, None], self.tau]
        return _like(out, a)

    def inputs(self, a):
        return _like(_np(a)[self.src], a)

    def selection(self, sel):
        """Original token indices per input (n,) → the twin's."""
        s = _np(sel).astype(np.int64)
        out = self.inv_tau[np.arange(self.src.size), s[self.src]]
        if isinstance(sel, list | tuple):
            return type(sel)(int(x) for x in out)
        return _like(out, sel)

    def input_id(self, i: int) -> int:
        return int(self.inv_src[int(i)])

    def token_id(self, i: int, t: int) -> int:
        """Token t of original input i → its index in the twin's input."""
        j = self.input_id(i)
        return int(self.inv_tau[j, int(t)])

    # back (twin → original)
    def tokens_back(self, a):
        arr = _np(a)
        out = np.empty_like(arr)
        out[self.src[:, None], self.tau] = arr
        return _like(out, a)

    def inputs_back(self, a):
        arr = _np(a)
        out = np.empty_like(arr)
        out[self.src] = arr
        return _like(out, a)

    def selection_back(self, sel):
        s = _np(sel).astype(np.int64)
        out = np.empty_like(s)
        out[self.src] = self.tau[np.arange(self.src.size), s]
        return _like(out, sel) if isinstance(sel, Tensor) else out


def _index_rules(ix: _Index, tokens_moved: bool) -> dict:
    """Meta rules of an index twin of a prompt or cross instance."""

    def support(value):
        if not isinstance(value, list | tuple):
            return _DROP
        return [sorted(ix.token_id(i, t) for t in value[int(i)]) for i in ix.src]

    def by_token_key(value):
        # dicts keyed by a selection of a one-input figure (figure 1): only if tokens stay
        return value if not tokens_moved else _DROP

    return {
        "g": ix.tokens,
        "k": ix.tokens,
        "noise": ix.tokens,
        "opt": ix.selection,
        "support": lambda v: by_token_key(v) if isinstance(v, dict) else support(v),
        "vacuous_inputs": lambda v: tuple(sorted(ix.input_id(i) for i in v)),
        "locally_optimal": lambda v: [tuple(map(int, ix.selection(np.asarray(a)))) for a in v],
        "bad_input": ix.input_id,
        "v_svm_support": lambda v: sorted(ix.input_id(i) for i in v),
        "p_mm": lambda v: by_token_key(v) if isinstance(v, dict) else v,
        "notebook_objective": by_token_key,
        "cone": _KEEP,
        "inits": _KEEP,
        "shifts": _KEEP,
        "v_mm": _KEEP,
        "token_shift": lambda v: _DROP if tokens_moved else v,
    }


def _index_twin(inst, name: str, ix: _Index, tokens_moved: bool) -> Twin:
    rules = _index_rules(ix, tokens_moved)
    if tokens_moved and "hull_tokens" in inst.meta and "bad_input" in inst.meta:
        bad = int(inst.meta["bad_input"])
        rules["hull_tokens"] = lambda v: [ix.token_id(bad, t) for t in v]
    elif not tokens_moved:
        rules["hull_tokens"] = _KEEP
    meta, dropped = _map_meta(inst.meta, name, rules)
    fields = {
        "X": ix.tokens(inst.X),
        "y": ix.inputs(inst.y),
        "alpha": None if inst.alpha is None else ix.selection(inst.alpha),
        "meta": meta,
    }
    if isinstance(inst, CrossInstance):
        fields["Z"] = ix.inputs(inst.Z)
    return Twin(
        name=name,
        instance=dataclasses.replace(inst, **fields),
        selection_back=ix.selection_back,
        param_back=_identity,
        tokens_back=ix.tokens_back,
        inputs_back=ix.inputs_back,
        exact_scores=_one_axis(inst.v),
        dropped_meta=dropped,
    )


def _require(inst, classes, twin: str) -> None:
    if not isinstance(inst, classes):
        names = " or ".join(c.__name__ for c in classes)
        raise TypeError(f"{twin}: expected a {names}, got {type(inst).__name__}")


def permute_inputs(inst: PromptInstance | CrossInstance) -> Twin | None:
    """The inputs in a random order (X, y, Z and α with them); None when n = 1."""
    _require(inst, (PromptInstance, CrossInstance), "permute_inputs")
    if inst.n < 2:
        return None
    src = _perm(_rng(inst, "permute-inputs"), inst.n)
    ix = _Index(src, np.broadcast_to(np.arange(inst.T), (inst.n, inst.T)).copy())
    return _index_twin(inst, "permute-inputs", ix, tokens_moved=False)


def permute_tokens(inst: PromptInstance | CrossInstance) -> Twin | None:
    """Each input's tokens in its own random order (α_i follows its token); None when T = 1."""
    _require(inst, (PromptInstance, CrossInstance), "permute_tokens")
    if inst.T < 2:
        return None
    tau = _row_perms(_rng(inst, "permute-tokens"), inst.n, inst.T)
    return _index_twin(inst, "permute-tokens", _Index(np.arange(inst.n), tau), tokens_moved=True)


# ---- prompt and cross: sign flip -------------------------------------------------------------


def _negate(value):
    if isinstance(value, Tensor | np.ndarray):
        return -value
    if isinstance(value, list | tuple):
        return type(value)(_negate(x) for x in value)
    return -value


def _param_rules(forward: Callable, token_forward: Callable | None) -> dict:
    """Meta rules of a twin that moves key space by ``forward`` (p_mm, cone, inits) and the
    token space by ``token_forward`` (v_mm; None: v_mm unchanged)."""

    def vec(v):
        if isinstance(v, dict):
            return {key: vec(x) for key, x in v.items()}
        if isinstance(v, list | tuple):
            return _like_list(forward(np.asarray(v, dtype=np.float64)), v)
        return forward(v)

    def cone(c):
        return {**c, "p_mm": vec(c["p_mm"])} if "p_mm" in c else dict(c)

    return {
        "p_mm": vec,
        "cone": cone,
        "inits": lambda v: [vec(x) for x in v],
        "v_mm": _KEEP if token_forward is None else lambda v: _like_list(token_forward(v), v),
        "g": _KEEP,
        "opt": _KEEP,
        "support": _KEEP,
        "vacuous_inputs": _KEEP,
        "locally_optimal": _KEEP,
        "bad_input": _KEEP,
        "hull_tokens": _KEEP,
        "v_svm_support": _KEEP,
        "token_shift": _KEEP,
    }


def _like_list(out, ref):
    if isinstance(ref, list | tuple):
        return type(ref)(float(x) for x in _np(out).ravel())
    return out


def flip_labels_and_tokens(inst: PromptInstance | CrossInstance) -> Twin:
    """y ↦ −y and X ↦ −X: every score Y_i vᵀx_it is unchanged bit for bit (two exact
    negations), the keys are negated, so p ↦ −p (prompt) and W ↦ −W (cross)."""
    _require(inst, (PromptInstance, CrossInstance), "flip_labels_and_tokens")
    name = "flip-labels-and-tokens"
    fields: dict[str, Any] = {"X": -inst.X, "y": -inst.y}
    if isinstance(inst, PromptInstance):
        fields["p0"] = None if inst.p0 is None else -inst.p0
    else:
        fields["W0"] = None if inst.W0 is None else -inst.W0
    meta, dropped = _map_meta(inst.meta, name, _param_rules(_negate, None))
    twin = dataclasses.replace(inst, **fields, meta=meta)
    if isinstance(inst, PromptInstance) and "k" in inst.meta:
        twin, dropped = _with_k(inst, twin, dropped)
    return Twin(
        name=name,
        instance=twin,
        selection_back=_identity,
        param_back=_negate,
        tokens_back=_identity,
        inputs_back=_identity,
        exact_scores=True,
        dropped_meta=dropped,
    )


def _with_k(inst: PromptInstance, twin: PromptInstance, dropped: tuple[str, ...]):
    """The twin with meta "k" set from its own keys (see `_relation_k`), or dropped."""
    k = _relation_k(inst, twin.keys)
    meta = dict(twin.meta)
    if k is _DROP:
        meta.pop("k", None)
        dropped = tuple(sorted({*dropped, "k"}))
    else:
        meta["k"] = k
        dropped = tuple(x for x in dropped if x != "k")
    return dataclasses.replace(twin, meta=meta), dropped


# ---- coordinate twins (rotations and signed permutations) ------------------------------------


def _commutes_exactly(W: Tensor, U: _Map) -> bool:
    """UWUᵀ = W mathematically, for U acting on ``U.moved`` only: W's block there is c·I and
    W couples those coordinates to no other."""
    if U.perm is not None or U.moved is None or U.moved.size == U.d:
        return False
    M = W.numpy()
    m = np.zeros(U.d, dtype=bool)
    m[U.moved] = True
    block = M[np.ix_(m, m)]
    c = block[0, 0] if block.size else 0.0
    return bool(
        np.array_equal(block, c * np.eye(block.shape[0]))
        and not M[np.ix_(m, ~m)].any()
        and not M[np.ix_(~m, m)].any()
    )


def _coordinate_twin(inst, kind: str) -> Twin | None:
    name = "rotate-embedding" if kind == "rotate" else "signed-permute-embedding"
    rng = _rng(inst, name)
    if isinstance(inst, EmbeddingInstance):
        return _embedding_coordinates(inst, name, kind, rng)
    if isinstance(inst, NTPInstance):
        return _ntp_coordinates(inst, name, kind, rng)
    if isinstance(inst, LinearNTPInstance):
        return _linear_coordinates(inst, name, kind, rng)
    _require(inst, (PromptInstance, CrossInstance), name)
    if kind == "rotate" and isinstance(inst, PromptInstance) and SVM_INFEASIBLE in inst.assumptions:
        return None  # exact key relations: only the exact signed permutation keeps them
    scores = inst.scores.numpy()
    U = _fixing(inst.v.numpy(), rng, kind, scores)
    note = ""
    if U is None:
        U = _identity_map(inst.d)
        note = (
            "tokens not moved: v has no zero coordinate"
            + (" and the scores have exact ties" if kind == "rotate" else "")
            + "; only the "
            + ("key space" if isinstance(inst, PromptInstance) else "query space")
            + " is transformed"
        )
    exact = U.perm is not None or U.moved.size < U.d
    X = U.forward(inst.X)
    if isinstance(inst, PromptInstance):
        R = U if not U.trivial else _rotation(rng, inst.d, kind)
        if R.trivial:
            return None
        W = inst.W.clone() if _commutes_exactly(inst.W, U) and R is U else _matrix_map(inst.W, U, R)
        p0 = None if inst.p0 is None else R.forward(inst.p0)
        rules = _param_rules(R.forward, U.forward)
        meta, dropped = _map_meta(inst.meta, name, rules)
        if not exact and "g" in meta:
            meta.pop("g")
            dropped = (*dropped, "g")
        twin = dataclasses.replace(inst, X=X, W=W, p0=p0, meta=meta)
        if "k" in inst.meta:
            twin, dropped = _with_k(inst, twin, dropped)
        param_back = R.back
    else:
        V = _rotation(rng, inst.d, kind)
        if U.trivial and V.trivial:
            return None
        W0 = None if inst.W0 is None else _matrix_map(inst.W0, U, V)
        rules = _param_rules(lambda W: _matrix_map(W, U, V), U.forward)
        meta, dropped = _map_meta(inst.meta, name, rules)
        if not exact and "g" in meta:
            meta.pop("g")
            dropped = (*dropped, "g")
        twin = dataclasses.replace(inst, X=X, Z=V.forward(inst.Z), W0=W0, meta=meta)

        def param_back(W, U=U, V=V, d=inst.d):
            flat = _np(W).ndim == 1
            M = _np(W).reshape(d, d)
            out = _np(_matrix_back(M, U, V))
            return _like(out.reshape(-1) if flat else out, W)

    return Twin(
        name=name,
        instance=twin,
        selection_back=_identity,
        param_back=param_back,
        tokens_back=_identity,
        inputs_back=_identity,
        exact_scores=exact,
        dropped_meta=tuple(dropped),
        note=note,
    )


def rotate_embedding(inst: Instance) -> Twin | None:
    """A rotation of the embedding (token) space that fixes v (module rules). Prompt:
    W ↦ UWUᵀ, p ↦ Up; cross: queries rotated by a free V, W ↦ UWVᵀ; embedding: E0 ↦ E0Uᵀ,
    p ↦ Up; NTP: E ↦ EQ, W ↦ QᵀWQ (Q a free rotation; none where E = I exactly); linear NTP:
    H ↦ QH, W ↦ WQᵀ. None for a prompt instance with SVM_INFEASIBLE (exact key relations)."""
    return _coordinate_twin(inst, "rotate")


def signed_permute_embedding(inst: Instance) -> Twin | None:
    """As `rotate_embedding` with signed permutation matrices (exact): the coordinates where
    v is zero are permuted and sign-flipped; cross queries by a free signed permutation; NTP
    and linear NTP: a free signed permutation of the embedding space."""
    return _coordinate_twin(inst, "signed")


# ---- embedding twins -------------------------------------------------------------------------


#: The embedding strategies' meta entries that are neither sizes nor parameters (those are in
#: _INVARIANT): token ids, token-indexed arrays, per-sequence lists. Kept by a twin that moves
#: none of ids, sequence order and labels; the other twins map them.
_EMBEDDING_KEEP = {
    key: _KEEP
    for key in (
        "positive_tokens",
        "negative_tokens",
        "irrelevant_tokens",
        "strong",
        "weak",
        "signed_counts",
        "b",
        "z",
        "pair",
    )
}


def _embedding_coordinates(inst: EmbeddingInstance, name: str, kind: str, rng) -> Twin | None:
    # ties among the token scores ⟨E0_s, v⟩ (one row: every token of the vocabulary)
    U = _fixing(inst.v.numpy(), rng, kind, (inst.E0 @ inst.v).numpy()[None, :])
    if U is None or U.trivial:
        return None
    meta, dropped = _map_meta(inst.meta, name, _EMBEDDING_KEEP)
    twin = dataclasses.replace(inst, E0=U.forward(inst.E0), meta=meta)
    return Twin(
        name=name,
        instance=twin,
        selection_back=_identity,
        param_back=U.back,
        tokens_back=_identity,
        inputs_back=_identity,
        exact_scores=U.perm is not None or U.moved.size < U.d,
        dropped_meta=dropped,
        vocab_back=_identity,
        embedding_back=U.back,
    )


def _embedding_twin(
    inst: EmbeddingInstance, name: str, fields: dict, rules: dict, exact: bool = True, **maps
) -> Twin:
    return _mapped_twin(
        inst, name, fields, rules, _EMBEDDING_KEEP, exact, **{"embedding_back": _identity, **maps}
    )


def permute_sequences(inst: EmbeddingInstance) -> Twin | None:
    """The sequences in a random order (y, s* and per-sequence meta with them); None at n = 1.
    An NTP instance's samples (sequences with their labels): `_ntp_permute_sequences`."""
    if isinstance(inst, NTPInstance):
        return _ntp_permute_sequences(inst)
    _require(inst, (EmbeddingInstance,), "permute_sequences")
    if inst.n < 2:
        return None
    ix = _Index(_perm(_rng(inst, "permute-sequences"), inst.n), np.zeros((inst.n, 0), np.int64))
    fields = {
        "sequences": ix.inputs(inst.sequences),
        "y": ix.inputs(inst.y),
        "s_star": None if inst.s_star is None else ix.inputs(inst.s_star),
    }
    rules = {"pair": lambda v: [v[int(i)] for i in ix.src]}
    return _embedding_twin(
        inst,
        "permute-sequences",
        fields,
        rules,
        selection_back=ix.inputs_back,
        tokens_back=ix.inputs_back,
        inputs_back=ix.inputs_back,
    )


def permute_positions(inst: EmbeddingInstance) -> Twin | None:
    """Each sequence's positions in its own random order (no positional information in the
    model, so nothing else moves); None when T = 1."""
    _require(inst, (EmbeddingInstance,), "permute_positions")
    if inst.T < 2:
        return None
    ix = _Index(np.arange(inst.n), _row_perms(_rng(inst, "permute-positions"), inst.n, inst.T))
    return _embedding_twin(
        inst,
        "permute-positions",
        {"sequences": ix.tokens(inst.sequences)},
        {},
        tokens_back=ix.tokens_back,
    )


def relabel_tokens(inst: EmbeddingInstance) -> Twin | None:
    """Token ids permuted: token s of the original is token π(s) of the twin, with E0's rows,
    the sequences, s*, ``relevant``, ``groups`` and the token-indexed meta relabelled. None at
    |S| = 1. Meta "n_stop" (the stopwords are ids < n_stop) is dropped: it names ids. An NTP
    instance's vocabulary: `_ntp_relabel_tokens`."""
    if isinstance(inst, NTPInstance):
        return _ntp_relabel_tokens(inst)
    _require(inst, (EmbeddingInstance,), "relabel_tokens")
    S = inst.vocab_size
    if S < 2:
        return None
    pi = _perm(_rng(inst, "relabel-tokens"), S)  # new id of old token s
    pi_t = torch.as_tensor(pi)

    def ids(value):
        return tuple(sorted(int(pi[int(s)]) for s in value))

    def per_token(a):
        arr = _np(a)
        out = np.empty_like(arr)
        out[pi] = arr
        return _like(out, a)

    E0 = torch.empty_like(inst.E0)
    E0[pi_t] = inst.E0
    fields = {
        "sequences": pi_t[inst.sequences],
        "E0": E0,
        "s_star": None if inst.s_star is None else pi_t[inst.s_star],
        "relevant": None if inst.relevant is None else frozenset(ids(inst.relevant)),
        "groups": None if inst.groups is None else tuple(ids(g) for g in inst.groups),
    }
    rules = {
        "positive_tokens": ids,
        "negative_tokens": ids,
        "irrelevant_tokens": ids,
        "strong": lambda v: tuple(int(pi[int(s)]) for s in v),
        "weak": lambda v: tuple(int(pi[int(s)]) for s in v),
        "signed_counts": lambda v: {int(pi[int(s)]): c for s, c in v.items()},
        "b": per_token,
        "z": per_token,
        "n_stop": None,
    }

    def back_ids(sel):
        return _like(np.argsort(pi)[_np(sel).astype(np.int64)], sel)

    def back_rows(a):
        return _like(_np(a)[pi], a)

    return _embedding_twin(
        inst,
        "relabel-tokens",
        fields,
        rules,
        exact=_one_axis(inst.v),  # E0's rows move: see the module rules
        selection_back=back_ids,
        vocab_back=back_rows,
        embedding_back=back_rows,
    )


def flip_labels_and_head(inst: EmbeddingInstance) -> Twin:
    """y ↦ −y, v ↦ −v: the scores y_i⟨E_s, v⟩, the keys, the one-step E¹ and the flow in p are
    unchanged bit for bit. What is defined with y alone changes sign: the signed frequencies
    α_s, Δ_s, completely positive ↔ negative tokens; meta and ``groups`` (in increasing order
    of α) follow."""
    _require(inst, (EmbeddingInstance,), "flip_labels_and_head")

    def rev(v):
        return type(v)(reversed(v)) if isinstance(v, tuple) else list(reversed(v))

    fields = {
        "y": -inst.y,
        "v": -inst.v,
        "groups": None if inst.groups is None else tuple(reversed(inst.groups)),
    }
    meta = inst.meta
    rules = {
        "positive_tokens": lambda v: meta["negative_tokens"],
        "negative_tokens": lambda v: meta["positive_tokens"],
        "strong": rev,
        "weak": rev,
        "signed_counts": lambda v: {s: -c for s, c in v.items()},
        "b": _negate,
        "level_counts": lambda v: rev(_negate(v)),
        "levels": lambda v: rev(_negate(v)),
        "positive_occurrences": lambda v: rev(meta["negative_occurrences"]),
        "negative_occurrences": lambda v: rev(meta["positive_occurrences"]),
    }
    if ("positive_tokens" in meta) != ("negative_tokens" in meta):
        rules["positive_tokens"] = rules["negative_tokens"] = None
    if ("positive_occurrences" in meta) != ("negative_occurrences" in meta):
        rules["positive_occurrences"] = rules["negative_occurrences"] = None
    return _embedding_twin(inst, "flip-labels-and-head", fields, rules)


# ---- NTP twins (2403.08081 self-attention; 2402.18551 linear decoder) ------------------------

#: The NTP strategies' meta entries (strategies.ntp_attention, theorems.ntp.common): generator
#: labels and per-query dicts of token ids, no sample index. Kept by a twin that moves no token
#: id; relabel-tokens maps the ids (and drops "id": it names a fixed instance of the paper,
#: whose closed forms are written in its own ids).
_NTP_KEEP = {
    key: _KEEP
    for key in ("generator", "redraws", "id", "chains", "cycles", "counts", "cycle", "query")
}
#: The linear NTP strategies' meta entries (strategies.ntp_linear): generator labels and sizes,
#: the twin tokens (vocabulary ids) and the repeated contexts (context indices).
_LINEAR_KEEP = {key: _KEEP for key in ("family", "size", "d", "twins", "repeat", "resampled")}


def _reordering(src: np.ndarray) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(forward, back) over the first axis for "item j of the twin is item src[j] of the
    original": arrays, tensors, lists and tuples (ragged ones included)."""
    inv = np.argsort(src)

    def move(a, order):
        if isinstance(a, list | tuple):
            return type(a)(a[int(i)] for i in order)
        return _like(_np(a)[order], a)

    return (lambda a: move(a, src)), (lambda a: move(a, inv))


def _ids_back(pi: np.ndarray) -> Callable[[Any], Any]:
    """Token ids of the twin (any shape; lists, tuples, arrays, tensors) → the original's, for
    the relabelling "token s of the original is token pi[s] of the twin"."""
    inv = np.argsort(pi)

    def back(sel):
        if isinstance(sel, list | tuple):
            return type(sel)(
                back(x) if isinstance(x, list | tuple) else int(inv[int(x)]) for x in sel
            )
        return _like(inv[_np(sel).astype(np.int64)], sel)

    return back


def _rows_back(pi: np.ndarray, axis: int = 0) -> Callable[[Any], Any]:
    """An array indexed by token id on ``axis``, of the twin → the original's (a[pi])."""

    def back(a):
        return _like(np.take(_np(a), pi, axis=axis), a)

    return back


def _is_identity(E: np.ndarray) -> bool:
    """E = I exactly (ORTHONORMAL_VOCAB's literal promise)."""
    return E.shape[0] == E.shape[1] and np.array_equal(E, np.eye(E.shape[0]))


def _mapped_twin(
    inst, name: str, fields: dict, rules: dict, keep: dict, exact: bool = False, **maps
) -> Twin:
    """An embedding, NTP or linear-NTP twin: ``fields`` replaced, the meta mapped by ``keep``
    and ``rules``, every map back the identity unless ``maps`` gives it; ``exact``: whether the
    scores are the same bits (never for the NTP models: their losses sum in another order)."""
    meta, dropped = _map_meta(inst.meta, name, {**keep, **rules})
    twin = dataclasses.replace(inst, **fields, meta=meta)
    base = {
        "selection_back": _identity,
        "param_back": _identity,
        "tokens_back": _identity,
        "inputs_back": _identity,
        "vocab_back": _identity,
    }
    return Twin(
        name=name, instance=twin, exact_scores=exact, dropped_meta=dropped, **{**base, **maps}
    )


def _ntp_twin(inst: NTPInstance, name: str, fields: dict, rules: dict, **maps) -> Twin:
    return _mapped_twin(
        inst, name, fields, rules, _NTP_KEEP, **{"embedding_back": _identity, **maps}
    )


def _ntp_permute_sequences(inst: NTPInstance) -> Twin | None:
    """The samples (sequences with their labels) in a random order; None at n = 1. The loss is
    a mean over samples and the graphs depend on the set of samples: nothing else moves."""
    if inst.n < 2:
        return None
    src = _perm(_rng(inst, "permute-sequences"), inst.n)
    forward, back = _reordering(src)
    fields = {"sequences": forward(inst.sequences), "labels": forward(inst.labels)}
    return _ntp_twin(
        inst,
        "permute-sequences",
        fields,
        {},
        selection_back=back,
        tokens_back=back,
        inputs_back=back,
    )


def _ntp_relabel_tokens(inst: NTPInstance) -> Twin | None:
    """Token ids permuted: token s of the original is token π(s) of the twin (embedding rows,
    sequences, labels and the token ids of meta with it). Where E = I exactly (orthonormal
    vocabulary: the promise is literal), the embedding space's coordinates are permuted by π
    too, so the twin's E is I again and W ↦ ΠWΠᵀ (W'[π(a), π(b)] = W[a, b]). A drawn π that
    fixes every token the samples use is composed with a shift by one. None at K = 1."""
    K = inst.num_tokens
    if K < 2:
        return None
    pi = _perm(_rng(inst, "relabel-tokens"), K)  # new id of old token s
    used = np.unique(np.concatenate([np.asarray(seq) for seq in inst.sequences]))
    if np.array_equal(pi[used], used):  # the samples would not change: shift every id by one
        pi = (pi + 1) % K

    def tok(t) -> int:
        return int(pi[int(t)])

    E = inst.embeddings
    identity = _is_identity(E)
    if identity:
        E2 = np.eye(K)
    else:
        E2 = np.empty_like(E)
        E2[pi] = E
    fields = {
        "embeddings": E2,
        "sequences": tuple(tuple(tok(t) for t in seq) for seq in inst.sequences),
        "labels": tuple(tok(y) for y in inst.labels),
    }
    rules = {
        "chains": lambda v: {tok(k): [tok(t) for t in c] for k, c in v.items()},
        "cycles": lambda v: {tok(k): [[tok(t) for t in C] for C in cs] for k, cs in v.items()},
        "counts": lambda v: {
            tok(k): ({tok(a): n for a, n in c.items()} if isinstance(c, dict) else c)
            for k, c in v.items()
        },
        "cycle": lambda v: type(v)(tok(t) for t in v),
        "query": tok,
        "id": None,
    }
    rows = _rows_back(pi)
    if identity:

        def param_back(W):
            return _like(_np(W)[np.ix_(pi, pi)], W)

        def embedding_back(E):
            return _like(_np(E)[np.ix_(pi, pi)], E)

    else:
        param_back, embedding_back = _identity, rows
    return _ntp_twin(
        inst,
        "relabel-tokens",
        fields,
        rules,
        selection_back=_ids_back(pi),
        param_back=param_back,
        vocab_back=rows,
        embedding_back=embedding_back,
    )


def _ntp_coordinates(inst: NTPInstance, name: str, kind: str, rng) -> Twin | None:
    """E ↦ EMᵀ (each embedding x ↦ Mx, M a Haar rotation or a signed permutation of R^d), so
    the logits x_aᵀWx_q are those of W' = MWMᵀ. None where E = I exactly: E = I is a literal
    promise (ORTHONORMAL_VOCAB) that no change of coordinates keeps."""
    if _is_identity(inst.embeddings):
        return None
    U = _rotation(rng, inst.dim, kind)
    if U.trivial:
        return None

    def param_back(W, U=U):
        return _matrix_back(W, U, U)

    return _ntp_twin(
        inst,
        name,
        {"embeddings": U.forward(inst.embeddings)},
        {},
        param_back=param_back,
        embedding_back=U.back,
    )


def _linear_twin(inst: LinearNTPInstance, name: str, fields: dict, rules: dict, **maps) -> Twin:
    return _mapped_twin(inst, name, fields, rules, _LINEAR_KEEP, **maps)


def permute_contexts(inst: LinearNTPInstance) -> Twin | None:
    """The contexts in a random order: H's columns with P's rows and pi; None at m = 1. The
    decoder W (V×d) does not move."""
    _require(inst, (LinearNTPInstance,), "permute_contexts")
    if inst.m < 2:
        return None
    src = _perm(_rng(inst, "permute-contexts"), inst.m)
    forward, back = _reordering(src)
    inv = np.argsort(src)
    fields = {"H": inst.H[:, src], "P": forward(inst.P), "pi": forward(inst.pi)}
    rules = {"repeat": lambda v: type(v)(int(inv[int(c)]) for c in v)}
    return _linear_twin(
        inst,
        "permute-contexts",
        fields,
        rules,
        selection_back=back,
        tokens_back=back,
        inputs_back=back,
    )


def relabel_vocabulary(inst: LinearNTPInstance) -> Twin | None:
    """Token ids permuted: token z of the original is token π(z) of the twin (P's columns, the
    decoder's rows W'[π(z)] = W[z], meta "twins"); None at V = 1."""
    _require(inst, (LinearNTPInstance,), "relabel_vocabulary")
    V = inst.vocab
    if V < 2:
        return None
    pi = _perm(_rng(inst, "relabel-vocabulary"), V)
    P = np.empty_like(inst.P)
    P[:, pi] = inst.P
    rules = {"twins": lambda v: type(v)(int(pi[int(t)]) for t in v)}
    return _linear_twin(
        inst,
        "relabel-vocabulary",
        {"P": P},
        rules,
        selection_back=_ids_back(pi),
        param_back=_rows_back(pi),
        tokens_back=_rows_back(pi, axis=1),
        vocab_back=_rows_back(pi),
    )


def _linear_coordinates(inst: LinearNTPInstance, name: str, kind: str, rng) -> Twin | None:
    """H ↦ MH (each context h̄_j ↦ Mh̄_j, M a Haar rotation or a signed permutation of R^d),
    so the logits Wh̄_j are those of W' = WMᵀ; equal contexts stay equal."""
    U = _rotation(rng, inst.dim, kind)
    if U.trivial:
        return None
    H = _np(U.forward(inst.H.T)).T.copy()
    return _linear_twin(inst, name, {"H": H}, {}, param_back=U.back)


# ---- registry --------------------------------------------------------------------------------

#: The twin functions of each instance class, in the order ``twins_of`` lists them.
#: Twins that only reorder (inputs, tokens, sequences, positions, contexts, vocabulary ids):
#: valid for a claim whose body draws further points (a random W or p) in the instance's
#: coordinates, as long as those points are not indexed by what the twin reorders (the linear
#: decoder's W, V×d, is indexed by the vocabulary: relabel-vocabulary moves its rows).
REORDERINGS = (
    "permute-inputs",
    "permute-tokens",
    "permute-sequences",
    "permute-positions",
    "relabel-tokens",
    "permute-contexts",
    "relabel-vocabulary",
)
#: Twins that move coordinates by a sign: valid where the geometry is only invariant under
#: signed permutations (ℓp norms, diagonal (K, Q)).
SIGNED = ("flip-labels-and-tokens", "flip-labels-and-head", "signed-permute-embedding")
#: Every twin name.
ALL_TWINS = (*REORDERINGS, *SIGNED, "rotate-embedding")
#: Twins that change the embedding's coordinates only: every index, label and order is kept,
#: so a statement about the instance (not about its coordinate values) cannot tell them apart.
COORDINATE_CHANGES = ("rotate-embedding", "signed-permute-embedding")
#: Where the geometry is invariant under signed permutations only (ℓp norms, diagonal K, Q).
NOT_ROTATED = (*REORDERINGS, *SIGNED)
#: Twins that keep every coordinate axis where it is (a diagonal parametrization, diagonal
#: (K, Q), stays diagonal only under these: a one-sided signed permutation of the queries,
#: which signed-permute-embedding makes when v has no zero coordinate, does not).
SAME_AXES = (*REORDERINGS, "flip-labels-and-tokens", "flip-labels-and-head")

TWINS: dict[type, tuple[Callable[[Any], Twin | None], ...]] = {
    PromptInstance: (
        permute_inputs,
        permute_tokens,
        flip_labels_and_tokens,
        rotate_embedding,
        signed_permute_embedding,
    ),
    CrossInstance: (
        permute_inputs,
        permute_tokens,
        flip_labels_and_tokens,
        rotate_embedding,
        signed_permute_embedding,
    ),
    EmbeddingInstance: (
        permute_sequences,
        permute_positions,
        relabel_tokens,
        flip_labels_and_head,
        rotate_embedding,
        signed_permute_embedding,
    ),
    NTPInstance: (
        permute_sequences,
        relabel_tokens,
        rotate_embedding,
        signed_permute_embedding,
    ),
    LinearNTPInstance: (
        permute_contexts,
        relabel_vocabulary,
        rotate_embedding,
        signed_permute_embedding,
    ),
}


def twins_of(inst: Instance) -> list[Twin]:
    """Every twin of ``inst`` that exists (deterministic: seeded by inst.seed and the name)."""
    for cls in type(inst).__mro__:
        if cls in TWINS:
            return [t for f in TWINS[cls] if (t := f(inst)) is not None]
    known = ", ".join(c.__name__ for c in TWINS)
    raise TypeError(f"twins_of: no twins for {type(inst).__name__} (known: {known})")
