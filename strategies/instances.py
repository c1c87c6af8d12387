"""Problem instances that the strategies build, validated on construction, with named assumptions.

Two kinds of instance, one per paper:

- ``PromptInstance``: the prompt-attention data of 2306.13596, X (n, T, d), labels y, head v,
  key-query matrix W, a loss, an optional initial p0, and the selection α the instance was built
  around (the global opt, a locally-optimal α, ...).
- ``EmbeddingInstance``: token sequences with labels, initial embeddings E0, head v and the step
  size η0 of the one-step-then-flow protocol of 2505.17282.

Each instance carries the set of assumption names it was built to satisfy (``ASSUMPTIONS``
lists them with their meaning), the integer seed its random numbers came from, and a free-form
``meta`` dict (designed scores, realized cone cosine, ...). The meta-tests in
``tests/test_strategies_*.py`` check every strategy against the assumptions it promises.

Both serialize to the check-CLI schema (``to_json``/``from_json``); every malformed field raises
ValueError naming it.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np
import torch

from models.problems.attention import PromptProblem, TokenSizes
from models.problems.losses import get_loss

Tensor = torch.Tensor
DTYPE = torch.float64

# ---- assumption names ------------------------------------------------------------------------

DECOUPLED = "decoupled"
UNIQUE_OPT = "unique_opt"
EQUAL_NONOPT_SCORES = "equal_nonopt_scores"
SVM_FEASIBLE = "svm_feasible"
SVM_INFEASIBLE = "svm_infeasible"
LOCALLY_OPTIMAL_ALPHA = "locally_optimal_alpha"
NON_GLOBAL_ALPHA = "non_global_alpha"
CONE_INIT = "cone_init"
ARBITRARY_P0 = "arbitrary_p0"
PAPER_INSTANCE = "paper_instance"
TIGHT_V_SVM = "tight_v_svm"
NONTIGHT_V_SVM = "nontight_v_svm"
SINGLE_RELEVANT_TOKEN = "single_relevant_token"
TWO_RELEVANT_TOKENS = "two_relevant_tokens"
GENERAL_FREQUENCIES = "general_frequencies"
K_LEVEL = "k_level"
DIM_EXCEEDS_VOCAB = "dim_exceeds_vocab"
GAUSSIAN_EMBEDDINGS = "gaussian_embeddings"
UNIT_HEAD = "unit_head"
ZIPF_CORPUS = "zipf_corpus"
OFFICIAL_CROSS = "official_cross"
PRESCRIBED_SCORES = "prescribed_scores"
INDEPENDENT_QUERIES = "independent_queries"
INDEPENDENT_TOKENS = "independent_tokens"
DISTINCT_SCORES = "distinct_scores"
FRO_NUC_APART = "fro_nuc_apart"
LP_APART = "lp_apart"

# next-token prediction (strategies.ntp_instances; spec ntp.md)
REALIZABLE_LABELS = "realizable_labels"
DISTINCT_TOKENS = "distinct_tokens"
OFFICIAL_NTP = "official_ntp"
ORTHONORMAL_VOCAB = "orthonormal_vocab"
ACYCLIC_GRAPHS = "acyclic_graphs"
CYCLIC_GRAPH = "cyclic_graph"
INDEPENDENT_EMBEDDINGS = "independent_embeddings"
GRAPH_SVM_FEASIBLE = "graph_svm_feasible"
LOG_ODDS_CASE = "log_odds_case"
NTP_COMPATIBLE = "ntp_compatible"
NOT_NTP_COMPATIBLE = "not_ntp_compatible"
NTP_SEPARABLE = "ntp_separable"
NOT_NTP_SEPARABLE = "not_ntp_separable"
FULL_RANK_CONTEXTS = "full_rank_contexts"
#: Every assumption name with its one-line meaning. All statements about "alpha" refer to the
#: instance's ``alpha`` field (for prompt instances).
ASSUMPTIONS: dict[str, str] = {
    DECOUPLED: "x_it = [k_it; Y_i g_it], v = e_d, W = diag(I, 0): scores γ_it = g_it exactly and "
    "keys are chosen independently of them (spec maxmargin §3.1)",
    UNIQUE_OPT: "every input has a unique top-score token opt_i, beating its runner-up by a gap "
    "bounded below (min_gap)",
    EQUAL_NONOPT_SCORES: "within each input all non-optimal tokens share one score "
    "γ_i^- < γ_i^+ = γ_{i,opt_i} (spec maxmargin §2.1, §2.2)",
    SVM_FEASIBLE: "ATT-SVM(alpha) is feasible",
    SVM_INFEASIBLE: "ATT-SVM(alpha) is infeasible: some k_{iα_i} lies in the convex hull of its "
    "input's other keys (spec maxmargin §5 F11)",
    LOCALLY_OPTIMAL_ALPHA: "alpha is locally optimal (Def. 2): ATT-SVM(alpha) is feasible and "
    "every support token of α_i scores strictly below α_i",
    NON_GLOBAL_ALPHA: "alpha differs from the global opt in at least one input",
    CONE_INIT: "p0 lies in the cone C_{eps,R0}(p^mm(alpha)): ‖p0‖ ≥ R0 and "
    "cos(p0, p^mm(alpha)) ≥ 1 − eps (spec maxmargin §1.6)",
    ARBITRARY_P0: "p0 is an arbitrary finite point (norm drawn in [0, 10], random direction in "
    "the key space)",
    PAPER_INSTANCE: "the exact data of a figure of the paper (spec maxmargin §4)",
    TIGHT_V_SVM: "every input's selected token is a support vector of the v-SVM, so "
    "p^relax = p^mm (spec maxmargin §2.7)",
    NONTIGHT_V_SVM: "some input's selected token is not a support vector of the v-SVM, so "
    "p^relax differs from p^mm (spec maxmargin §2.7)",
    SINGLE_RELEVANT_TOKEN: "Assumption 1 of 2505.17282: each sequence holds exactly one relevant "
    "token, completely positive/negative per its label; every other token has α_s = 0 exactly",
    TWO_RELEVANT_TOKENS: "each sequence holds a strong completely-signed token of its label and "
    "a weaker same-signed token that also occurs in opposite-label sequences (spec embeddings "
    "§3.4, N6)",
    GENERAL_FREQUENCIES: "generator G2: b_s ~ N(0, 1), tokens of X_j i.i.d. from softmax(y_j b) "
    "(spec embeddings §6)",
    K_LEVEL: "tokens form K groups whose signed frequencies α_s are equal within a group and "
    "strictly increasing from group to group (the K-level stand-in, spec embeddings §2)",
    DIM_EXCEEDS_VOCAB: "|S| ≤ d − 1 (needed for the full-row-rank step of Lemma A.2)",
    GAUSSIAN_EMBEDDINGS: "rows of E0 are i.i.d. N(0, I/d)",
    UNIT_HEAD: "‖v‖ = 1",
    ZIPF_CORPUS: "generator G3 (pseudo-IMDB): Zipf base frequencies, clipped posterior biases, "
    "shrunk stopwords (spec embeddings §4.2)",
    OFFICIAL_CROSS: "the official TF-as-SVM generator: x_it, z_i and v uniform on the unit sphere, "
    "Y_i a random sign (spec tfsvm §3.1)",
    PRESCRIBED_SCORES: "x_it = k_it + Y_i g_it v with k_it ⟂ v and v = e_1: the scores "
    "γ_it = g_it are prescribed, bit for bit in any summation order (spec tfsvm §3.2)",
    INDEPENDENT_QUERIES: "the queries z_1..z_n are linearly independent (so n ≤ d)",
    INDEPENDENT_TOKENS: "for every input the tokens x_i1..x_iT are linearly independent (T ≤ d)",
    DISTINCT_SCORES: "every input has at least two distinct scores",
    FRO_NUC_APART: "cos(W^mm, W^mm_⋆) ≤ 0.95 at alpha: the Frobenius and nuclear SVMs point apart "
    "(spec tfsvm §3.6)",
    LP_APART: "the ℓp-SVMs of alpha for the exponents in meta['ps'] have pairwise cosines ≤ 0.97 "
    "(spec tfsvm §3.7)",
    REALIZABLE_LABELS: "every label occurs in its sequence (2403.08081, spec ntp §1.1)",
    DISTINCT_TOKENS: "the tokens of every sequence are distinct (the loss is then convex, "
    "spec ntp §1.1)",
    OFFICIAL_NTP: "the official NTP generator: unit-sphere vocabulary, T distinct tokens per "
    "sequence, label uniform over them (spec ntp §4.1)",
    ORTHONORMAL_VOCAB: "the embeddings are orthonormal (E = I): the queries decouple and the "
    "graph-SVM has a closed form (spec ntp §2.3)",
    ACYCLIC_GRAPHS: "every query's priority graph is acyclic: every SCC is one token",
    CYCLIC_GRAPH: "some query's priority graph has a cycle: an SCC of two or more tokens",
    INDEPENDENT_EMBEDDINGS: "the K token embeddings are linearly independent (K ≤ d): the "
    "graph-SVM is feasible (spec ntp §2.2)",
    GRAPH_SVM_FEASIBLE: "the graph-SVM's constraints are feasible (certified)",
    LOG_ODDS_CASE: "every sample whose label lies in an SCC C contains all of C (the log-odds "
    "bridge of spec ntp §2.4)",
    NTP_COMPATIBLE: "2402.18551 Def. 1: the log-odds equations have a solution (certified "
    "residual ≤ 1e-9)",
    NOT_NTP_COMPATIBLE: "the log-odds equations of Def. 1 have no solution",
    NTP_SEPARABLE: "2402.18551 Def. 2: the NTP-SVM's constraints are feasible (certified)",
    NOT_NTP_SEPARABLE: "the constraints of Def. 2 are infeasible (Farkas certificate)",
    FULL_RANK_CONTEXTS: "the context embeddings h̄_1..h̄_m are linearly independent (rank m)",
}


# ---- validation helpers ----------------------------------------------------------------------


def _float_tensor(x, name: str, ndim: int) -> Tensor:
    """float64 tensor (a copy, detached) from array-like; ValueError naming ``name``."""
    try:
        if isinstance(x, Tensor):
            t = x.detach().to(DTYPE).clone()
        else:
            t = torch.as_tensor(np.asarray(x, dtype=np.float64), dtype=DTYPE).clone()
    except (TypeError, ValueError, RuntimeError) as exc:
        raise ValueError(f"{name}: cannot be read as a float array ({exc})") from None
    if t.dim() != ndim:
        raise ValueError(f"{name}: expected {ndim} dimensions, got shape {tuple(t.shape)}")
    if not bool(torch.isfinite(t).all()):
        raise ValueError(f"{name}: contains NaN or infinity")
    return t


def _int_array(x, name: str) -> np.ndarray:
    """int64 numpy array from array-like of integers; ValueError naming ``name``."""
    if isinstance(x, Tensor):
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name}: cannot be read as an integer array ({exc})") from None
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)):
            if np.all(arr == np.round(arr)):
                return arr.astype(np.int64)
        raise ValueError(f"{name}: expected integers, got dtype {arr.dtype}")
    return arr.astype(np.int64)


def _labels(y, name: str, n: int) -> Tensor:
    y = _float_tensor(y, name, 1)
    if y.shape[0] != n:
        raise ValueError(f"{name}: expected {n} labels, got {y.shape[0]}")
    if not bool(torch.all((y == 1) | (y == -1))):
        raise ValueError(f"{name}: labels must be ±1, got values {sorted(set(y.tolist()))[:5]}")
    return y


def _assumptions(a) -> frozenset[str]:
    if isinstance(a, str):
        raise ValueError("assumptions: expected a collection of names, got a single string")
    try:
        names = frozenset(a)
    except TypeError:
        raise ValueError(f"assumptions: expected a collection of names, got {a!r}") from None
    unknown = sorted(str(x) for x in names if x not in ASSUMPTIONS)
    if unknown:
        raise ValueError(f"assumptions: unknown names {unknown}; known: {sorted(ASSUMPTIONS)}")
    return names


def _seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"seed: expected an integer, got {seed!r}")
    return int(seed)


def _meta(meta) -> dict:
    if not isinstance(meta, Mapping):
        raise ValueError(f"meta: expected a mapping, got {type(meta).__name__}")
    return dict(meta)


def _tokens(X) -> tuple[Tensor, int, int, int]:
    """X (n, T, d) with every dimension ≥ 1, and its sizes."""
    X = _float_tensor(X, "X", 3)
    n, T, d = X.shape
    if n < 1 or T < 1 or d < 1:
        raise ValueError(f"X: every dimension must be ≥ 1, got shape {tuple(X.shape)}")
    return X, n, T, d


def _head(v, d: int) -> Tensor:
    v = _float_tensor(v, "v", 1)
    if v.shape[0] != d:
        raise ValueError(f"v: expected dimension {d} (the token dimension), got {v.shape[0]}")
    return v


def _loss_name(loss) -> None:
    if not isinstance(loss, str):
        raise ValueError(f"loss: expected a loss name, got {loss!r}")
    try:
        get_loss(loss)
    except ValueError as exc:
        raise ValueError(f"loss: {exc}") from None


def _matrix(M, name: str, d: int) -> Tensor:
    """A (d, d) matrix."""
    M = _float_tensor(M, name, 2)
    if tuple(M.shape) != (d, d):
        raise ValueError(f"{name}: expected shape {(d, d)}, got {tuple(M.shape)}")
    return M


def _selection(alpha, n: int, T: int) -> np.ndarray | None:
    """An optional selection α ∈ [T]^n (None stays None)."""
    if alpha is None:
        return None
    alpha = _int_array(alpha, "alpha")
    if alpha.shape != (n,):
        raise ValueError(f"alpha: expected shape {(n,)}, got {alpha.shape}")
    if alpha.min() < 0 or alpha.max() >= T:
        raise ValueError(f"alpha: entries must lie in [0, {T})")
    return alpha


def _announce(inst) -> None:
    """Tell the claims framework, if it is loaded, that an instance was built: in a claim
    body, the framework records the instance the body built when the example's arguments hold
    none (theorems.framework.evidence.built). Looked up, not imported: strategies do not
    depend on the framework, and where it is not loaded nothing happens."""
    evidence = sys.modules.get("theorems.framework.evidence")
    if evidence is not None:
        evidence.built(inst)


def _require(d: Mapping, key: str):
    if key not in d:
        raise ValueError(f"{key}: missing from the instance file")
    return d[key]


def _check_model(d, model: str) -> None:
    if not isinstance(d, Mapping):
        raise ValueError(f"instance: expected a JSON object, got {type(d).__name__}")
    got = d.get("model")
    if got != model:
        raise ValueError(f"model: expected {model!r}, got {got!r}")


# ---- prompt instances ------------------------------------------------------------------------


def _search_json(inst) -> dict:
    """What the search knew of a prompt or cross instance, for ``to_json(extra=True)``: the
    selection α, the assumptions it was built to meet, and its seed."""
    alpha = None if inst.alpha is None else inst.alpha.tolist()
    return {"alpha": alpha, "assumptions": sorted(inst.assumptions), "seed": inst.seed}


def _search_fields(d: Mapping) -> dict:
    """The inverse of `_search_json`: those fields of a JSON document, with their defaults."""
    return {
        "alpha": d.get("alpha"),
        "assumptions": d.get("assumptions", ()),
        "seed": d.get("seed", 0),
    }


@dataclass(frozen=True, eq=False, repr=False)
class PromptInstance(TokenSizes):
    """One dataset of the prompt-attention model f(X) = ⟨Xv, softmax(XWp)⟩ (2306.13596).

    ``alpha`` is the selection the instance was built around (one token index per input), or
    None. ``assumptions`` are names from ``ASSUMPTIONS``; statements about "alpha" there refer
    to this field. All tensors are float64 copies.
    """

    X: Tensor
    y: Tensor
    v: Tensor
    W: Tensor
    loss: str = "logistic"
    p0: Tensor | None = None
    alpha: np.ndarray | None = None
    assumptions: frozenset[str] = frozenset()
    seed: int = 0
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        X, n, T, d = _tokens(self.X)
        y = _labels(self.y, "y", n)
        v = _head(self.v, d)
        W = _matrix(self.W, "W", d)
        _loss_name(self.loss)
        p0 = None
        if self.p0 is not None:
            p0 = _float_tensor(self.p0, "p0", 1)
            if p0.shape[0] != d:
                raise ValueError(f"p0: expected dimension {d}, got {p0.shape[0]}")
        alpha = _selection(self.alpha, n, T)
        for name, value in (("X", X), ("y", y), ("v", v), ("W", W), ("p0", p0), ("alpha", alpha)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "assumptions", _assumptions(self.assumptions))
        object.__setattr__(self, "seed", _seed(self.seed))
        object.__setattr__(self, "meta", _meta(self.meta))
        _announce(self)

    # ---- derived views -----------------------------------------------------------------------
    @cached_property
    def problem(self) -> PromptProblem:
        """The keys/scores form: ``PromptProblem.from_data(X, y, v, W, loss)`` (cached)."""
        return PromptProblem.from_data(self.X, self.y, self.v, self.W, self.loss)

    @property
    def keys(self) -> Tensor:
        """k_it = Wᵀ x_it, shape (n, T, d)."""
        return self.problem.keys

    @property
    def scores(self) -> Tensor:
        """γ_it = Y_i vᵀ x_it, shape (n, T)."""
        return self.problem.scores

    def __repr__(self) -> str:
        alpha = None if self.alpha is None else self.alpha.tolist()
        p0 = None if self.p0 is None else f"‖p0‖={float(torch.linalg.vector_norm(self.p0)):.4g}"
        return (
            f"PromptInstance(n={self.n}, T={self.T}, d={self.d}, loss={self.loss!r}, "
            f"alpha={alpha}, p0={p0}, seed={self.seed}, "
            f"assumptions={sorted(self.assumptions)})"
        )

    # ---- serialization -----------------------------------------------------------------------
    def to_json(self, *, extra: bool = False) -> dict[str, Any]:
        """The check-CLI schema {"model": "prompt", "X", "y", "v", "W", "loss", "p0"}.

        With ``extra=True`` also "alpha", "assumptions" and "seed" (which ``from_json`` reads);
        the check CLI rejects unknown fields, so files for it use the default.
        """
        out: dict[str, Any] = {
            "model": "prompt",
            "X": self.X.tolist(),
            "y": self.y.tolist(),
            "v": self.v.tolist(),
            "W": self.W.tolist(),
            "loss": self.loss,
            "p0": None if self.p0 is None else self.p0.tolist(),
        }
        if extra:
            out.update(_search_json(self))
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> PromptInstance:
        """Inverse of ``to_json``; a missing or malformed field raises ValueError naming it."""
        _check_model(d, "prompt")
        return cls(
            X=_require(d, "X"),
            y=_require(d, "y"),
            v=_require(d, "v"),
            W=_require(d, "W"),
            loss=d.get("loss", "logistic"),
            p0=d.get("p0"),
            **_search_fields(d),
        )


# ---- embedding instances ---------------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class EmbeddingInstance:
    """Token sequences and initial parameters of the `<cls>`-attention model of 2505.17282.

    ``sequences`` (n, T) int64 token ids in [0, |S|); ``E0`` (|S|, d) initial embeddings;
    ``v`` (d,) fixed head; ``eta0`` the step size of the one embedding step. Optional structure:
    ``s_star`` (n,) the relevant token of each sequence (it occurs in the sequence),
    ``relevant`` the relevant token ids, ``groups`` the K-level groups (token-id tuples, in
    increasing order of their designed signed frequency).
    """

    sequences: Tensor
    y: Tensor
    E0: Tensor
    v: Tensor
    eta0: float
    assumptions: frozenset[str] = frozenset()
    seed: int = 0
    s_star: Tensor | None = None
    relevant: frozenset[int] | None = None
    groups: tuple[tuple[int, ...], ...] | None = None
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        seqs = _int_array(self.sequences, "sequences")
        if seqs.ndim != 2 or seqs.shape[0] < 1 or seqs.shape[1] < 1:
            raise ValueError(f"sequences: expected a non-empty (n, T) array, got {seqs.shape}")
        n = seqs.shape[0]
        E0 = _float_tensor(self.E0, "E0", 2)
        vocab, d = E0.shape
        if vocab < 1 or d < 1:
            raise ValueError(f"E0: expected a non-empty (|S|, d) array, got {tuple(E0.shape)}")
        if seqs.min() < 0 or seqs.max() >= vocab:
            raise ValueError(f"sequences: token ids must lie in [0, {vocab}) (|S| = rows of E0)")
        y = _labels(self.y, "y", n)
        v = _float_tensor(self.v, "v", 1)
        if v.shape[0] != d:
            raise ValueError(f"v: expected dimension {d} (columns of E0), got {v.shape[0]}")
        try:
            eta0 = float(self.eta0)
        except (TypeError, ValueError):
            raise ValueError(f"eta0: expected a number, got {self.eta0!r}") from None
        if not math.isfinite(eta0) or eta0 <= 0:
            raise ValueError(f"eta0: expected a finite number > 0, got {eta0}")
        s_star = None
        if self.s_star is not None:
            s = _int_array(self.s_star, "s_star")
            if s.shape != (n,):
                raise ValueError(f"s_star: expected shape {(n,)}, got {s.shape}")
            missing = [i for i in range(n) if s[i] not in seqs[i]]
            if missing:
                raise ValueError(f"s_star: token not in its sequence for inputs {missing[:5]}")
            s_star = torch.as_tensor(s, dtype=torch.int64)
        relevant = None
        if self.relevant is not None:
            relevant = frozenset(int(s) for s in _int_array(list(self.relevant), "relevant"))
            if any(s < 0 or s >= vocab for s in relevant):
                raise ValueError(f"relevant: token ids must lie in [0, {vocab})")
        groups = None
        if self.groups is not None:
            groups = tuple(
                tuple(int(s) for s in _int_array(list(g), "groups")) for g in self.groups
            )
            flat = [s for g in groups for s in g]
            if any(len(g) == 0 for g in groups):
                raise ValueError("groups: every group must be non-empty")
            if any(s < 0 or s >= vocab for s in flat) or len(set(flat)) != len(flat):
                raise ValueError(f"groups: token ids must be distinct and lie in [0, {vocab})")
        object.__setattr__(self, "sequences", torch.as_tensor(seqs, dtype=torch.int64))
        for name, value in (
            ("y", y),
            ("E0", E0),
            ("v", v),
            ("eta0", eta0),
            ("s_star", s_star),
            ("relevant", relevant),
            ("groups", groups),
        ):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "assumptions", _assumptions(self.assumptions))
        object.__setattr__(self, "seed", _seed(self.seed))
        object.__setattr__(self, "meta", _meta(self.meta))
        _announce(self)

    @property
    def n(self) -> int:
        return self.sequences.shape[0]

    @property
    def T(self) -> int:
        return self.sequences.shape[1]

    @property
    def vocab_size(self) -> int:
        """|S|, the number of rows of E0."""
        return self.E0.shape[0]

    @property
    def d(self) -> int:
        return self.E0.shape[1]

    def __repr__(self) -> str:
        return (
            f"EmbeddingInstance(n={self.n}, T={self.T}, |S|={self.vocab_size}, d={self.d}, "
            f"eta0={self.eta0:g}, seed={self.seed}, assumptions={sorted(self.assumptions)})"
        )

    def to_json(self, *, extra: bool = False) -> dict[str, Any]:
        """The check-CLI schema {"model": "embedding", "sequences", "y", "E0", "v", "eta0"}.

        With ``extra=True`` also "s_star", "relevant", "groups", "assumptions" and "seed"
        (which ``from_json`` reads); the check CLI rejects unknown fields.
        """
        out: dict[str, Any] = {
            "model": "embedding",
            "sequences": self.sequences.tolist(),
            "y": self.y.tolist(),
            "E0": self.E0.tolist(),
            "v": self.v.tolist(),
            "eta0": self.eta0,
        }
        if extra:
            out["s_star"] = None if self.s_star is None else self.s_star.tolist()
            out["relevant"] = None if self.relevant is None else sorted(self.relevant)
            out["groups"] = None if self.groups is None else [list(g) for g in self.groups]
            out["assumptions"] = sorted(self.assumptions)
            out["seed"] = self.seed
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> EmbeddingInstance:
        """Inverse of ``to_json``; a missing or malformed field raises ValueError naming it."""
        _check_model(d, "embedding")
        return cls(
            sequences=_require(d, "sequences"),
            y=_require(d, "y"),
            E0=_require(d, "E0"),
            v=_require(d, "v"),
            eta0=_require(d, "eta0"),
            assumptions=d.get("assumptions", ()),
            seed=d.get("seed", 0),
            s_star=d.get("s_star"),
            relevant=d.get("relevant"),
            groups=d.get("groups"),
        )


# ---- cross-attention instances ---------------------------------------------------------------


@dataclass(frozen=True, eq=False, repr=False)
class CrossInstance(TokenSizes):
    """One dataset of the cross-attention model f_i(W) = vᵀX_iᵀ S(X_i W z_i) of 2308.16898.

    X (n, T, d) tokens, Z (n, d) queries, y (n,) labels, v (d,) fixed head; ``W0`` an optional
    initial W; ``alpha`` the selection the instance was built around, or None.
    """

    X: Tensor
    Z: Tensor
    y: Tensor
    v: Tensor
    loss: str = "logistic"
    W0: Tensor | None = None
    alpha: np.ndarray | None = None
    assumptions: frozenset[str] = frozenset()
    seed: int = 0
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        X, n, T, d = _tokens(self.X)
        Z = _float_tensor(self.Z, "Z", 2)
        if tuple(Z.shape) != (n, d):
            raise ValueError(f"Z: expected shape {(n, d)} (one per input), got {tuple(Z.shape)}")
        y = _labels(self.y, "y", n)
        v = _head(self.v, d)
        _loss_name(self.loss)
        W0 = None if self.W0 is None else _matrix(self.W0, "W0", d)
        alpha = _selection(self.alpha, n, T)
        for name, value in (("X", X), ("Z", Z), ("y", y), ("v", v), ("W0", W0), ("alpha", alpha)):
            object.__setattr__(self, name, value)
        object.__setattr__(self, "assumptions", _assumptions(self.assumptions))
        object.__setattr__(self, "seed", _seed(self.seed))
        object.__setattr__(self, "meta", _meta(self.meta))
        _announce(self)

    @cached_property
    def problem(self):
        """The ``models.problems.cross.CrossProblem`` of this data (cached)."""
        from models.problems.cross import CrossProblem

        return CrossProblem(self.X, self.Z, self.y, self.v, self.loss)

    @property
    def scores(self) -> Tensor:
        """γ_it = Y_i vᵀ x_it, shape (n, T)."""
        return self.problem.scores

    def __repr__(self) -> str:
        alpha = None if self.alpha is None else self.alpha.tolist()
        return (
            f"CrossInstance(n={self.n}, T={self.T}, d={self.d}, loss={self.loss!r}, "
            f"alpha={alpha}, W0={'given' if self.W0 is not None else None}, seed={self.seed}, "
            f"assumptions={sorted(self.assumptions)})"
        )

    def to_json(self, *, extra: bool = False) -> dict[str, Any]:
        """The check-CLI schema {"model": "cross", "X", "Z", "y", "v", "loss"} (docs/instances.md);
        with ``extra=True`` also "W0", "alpha", "assumptions" and "seed"."""
        out: dict[str, Any] = {
            "model": "cross",
            "X": self.X.tolist(),
            "Z": self.Z.tolist(),
            "y": self.y.tolist(),
            "v": self.v.tolist(),
            "loss": self.loss,
        }
        if extra:
            out["W0"] = None if self.W0 is None else self.W0.tolist()
            out.update(_search_json(self))
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> CrossInstance:
        """Inverse of ``to_json``; a missing or malformed field raises ValueError naming it."""
        _check_model(d, "cross")
        return cls(
            X=_require(d, "X"),
            Z=_require(d, "Z"),
            y=_require(d, "y"),
            v=_require(d, "v"),
            loss=d.get("loss", "logistic"),
            W0=d.get("W0"),
            **_search_fields(d),
        )


def assumption_names(names: Iterable[str]) -> frozenset[str]:
    """Validate a collection of assumption names (ValueError on unknown ones)."""
    return _assumptions(names)
