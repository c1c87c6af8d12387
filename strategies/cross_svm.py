"""Strategies and instance builders of the static SVM and (K, Q) claims of *Transformers as SVMs*
(arXiv 2308.16898; theorems/tfsvm claims_svm*, claims_kq*), on top of ``strategies.cross``.

- The SVM claims: ``overparameterized_instances`` (d > n), ``independent_query_instances`` (an
  arbitrary selection α with independent queries), ``infeasible_cross_instances`` (a selected
  token duplicated or inside its input's hull, spec §2.2), and the instance transforms of the
  metamorphic relations (``orthonormal_queries``, ``rotated``, ``self_queries``; spec §2.13).
- The (K, Q) claims: the official notebooks' data rebuilt bit for bit (``planar_data``,
  ``visualization_instance``, ``local_instance``), the official generator at the notebooks'
  dimensions (``local_dims_instances``, ``diagonal_instances``), the planar family of spec
  §3.6 (``planar_instances``) and F8's aligned-query family (``aligned_query_instances``).

The notebooks' data come from a seeded ``torch.Generator`` drawing float32 numbers, then cast to
float64: rebuilt here with the same calls, they are bit-for-bit the notebooks' data (checked
against docs/examples/cross_visualization1.json).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace

import numpy as np
import torch
from hypothesis import assume, event
from hypothesis import strategies as st

from strategies.combinators import SEEDS, seeded
from strategies.cross import official_cross_instances
from strategies.instances import (
    INDEPENDENT_QUERIES,
    OFFICIAL_CROSS,
    PAPER_INSTANCE,
    SVM_INFEASIBLE,
    UNIQUE_OPT,
    CrossInstance,
)

DTYPE = torch.float64
F32 = torch.float32

#: The dimensions (n, T, d) of the official local-convergence experiment (spec §4.1).
LOCAL_DIMS = (6, 8, 10)
#: The diagonal experiment of spec §2.12: (n, T, d) and its loss (2403.08699).
DIAG_DIMS = (4, 3, 8)
DIAG_LOSS = "exponential"


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.norm(x, dim=-1, keepdim=True)


# ---- the static SVM claims (claims_svm, claims_svm_controls) ---------------------------------


@st.composite
def overparameterized_instances(draw, n=st.integers(1, 5), T=st.integers(2, 6), extra=(1, 3)):
    """Official instances with d = n + extra > n: more dimensions than inputs, so that a rank
    bound min(n, d) = n and a row space in span{z_i} are not automatic."""
    n = draw(n) if isinstance(n, st.SearchStrategy) else n
    d = n + draw(st.integers(*extra))
    return draw(official_cross_instances(n=n, T=T, d=d))


@st.composite
def independent_query_instances(
    draw, n=st.integers(1, 5), T=st.integers(2, 8), extra=st.integers(0, 3)
):
    """Official instances with d = max(2, n + extra) ≥ n (distinct unit tokens, generic
    queries) and a selection α drawn uniformly from [T]^n. n, T and extra are ints or
    strategies (the defaults are the small claims' sizes; ``strategies.ladder`` gives a
    rung's)."""
    n = draw(n) if isinstance(n, st.SearchStrategy) else n
    d = max(2, n + (draw(extra) if isinstance(extra, st.SearchStrategy) else extra))
    inst = draw(official_cross_instances(n=n, T=T, d=d))
    alpha = [draw(st.integers(0, inst.T - 1)) for _ in range(n)]
    return CrossInstance(
        X=inst.X,
        Z=inst.Z,
        y=inst.y,
        v=inst.v,
        alpha=alpha,
        assumptions=inst.assumptions,
        seed=inst.seed,
        meta={"opt": inst.alpha.tolist()},
    )


@st.composite
def infeasible_cross_instances(draw, n=st.integers(1, 4), T=st.integers(2, 6), d=st.integers(1, 6)):
    """Official data, then in one input i the selected token α_i is made either a copy of another
    token of that input ("duplicate") or a strictly positive convex combination of all of that
    input's other tokens ("hull"; weights from a Dirichlet(1) draw): by spec §2.2 (necessary
    condition) Att-SVM(α) is then infeasible for every W. α is drawn from [T]^n; queries are
    arbitrary (n > d allowed)."""
    inst = draw(official_cross_instances(n=n, T=T, d=d))
    gen = seeded(draw(SEEDS))
    alpha = np.array([draw(st.integers(0, inst.T - 1)) for _ in range(inst.n)])
    i = draw(st.integers(0, inst.n - 1))
    kind = draw(st.sampled_from(["duplicate", "hull"]))
    X = inst.X.clone()
    others = [t for t in range(inst.T) if t != alpha[i]]
    if kind == "duplicate":
        X[i, alpha[i]] = X[i, draw(st.sampled_from(others))]
    else:
        w = -torch.log(torch.rand(len(others), generator=gen, dtype=DTYPE))
        X[i, alpha[i]] = (w / w.sum()) @ X[i, others]
    return CrossInstance(
        X=X,
        Z=inst.Z,
        y=inst.y,
        v=inst.v,
        alpha=alpha,
        assumptions={SVM_INFEASIBLE},
        seed=inst.seed,
        meta={"input": i, "kind": kind},
    )


def orthonormal_queries(inst: CrossInstance, seed: int) -> CrossInstance:
    """``inst`` (n ≤ d) with its queries replaced by n orthonormal rows (QR of a seeded
    Gaussian), as META-5 of spec §2.13 requires."""
    n, d = inst.n, inst.d
    Q = torch.linalg.qr(torch.randn(d, n, generator=seeded(seed), dtype=DTYPE))[0]
    return CrossInstance(
        X=inst.X,
        Z=Q.T.contiguous(),
        y=inst.y,
        v=inst.v,
        alpha=inst.alpha,
        assumptions={OFFICIAL_CROSS, UNIQUE_OPT, INDEPENDENT_QUERIES},
        seed=inst.seed,
        meta={**inst.meta, "query_seed": seed},
    )


def rotated(inst: CrossInstance, U: np.ndarray, V: np.ndarray) -> CrossInstance:
    """x ↦ Ux, z ↦ Vz, v ↦ Uv (scores unchanged), the same α (spec §2.13.1)."""
    t = functools.partial(torch.as_tensor, dtype=DTYPE)
    return CrossInstance(
        X=inst.X @ t(U).T,
        Z=inst.Z @ t(V).T,
        y=inst.y,
        v=t(U) @ inst.v,
        alpha=inst.alpha,
        seed=inst.seed,
    )


def self_queries(inst: CrossInstance) -> CrossInstance:
    """``inst`` with the queries z_i = x_i1 (each input's first token): the cross-attention model
    then reads the first row of self-attention (spec §2.13.6)."""
    Z = inst.X[:, 0].clone()
    return CrossInstance(X=inst.X, Z=Z, y=inst.y, v=inst.v, alpha=inst.alpha, seed=inst.seed)


# ---- the notebooks' instances (claims_kq, claims_kq_controls) ----------------------------------


def planar_data(seed: int, T: int = 3, noise: float = 0.3) -> CrossInstance:
    """The generator of ``visualization1.ipynb`` with any seed (spec §3.6, §4.4): n = 2, d = 2,
    Y = +1, v and z_i unit Gaussian, tokens noise·N(0, I) shifted by (−1, 0) (input 0) and
    (+1, 0) (input 1); α = opt. Float32 draws cast to float64, as the notebook does."""
    n, d = 2, 2
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(d, generator=gen, dtype=F32)
    v = v / torch.norm(v)
    y = torch.ones(n, dtype=F32)
    X = noise * torch.randn(n, T, d, generator=gen, dtype=F32)
    X[0] += torch.tensor([-1.0, 0.0], dtype=F32)
    X[1] += torch.tensor([1.0, 0.0], dtype=F32)
    Z = _unit(torch.randn(n, d, generator=gen, dtype=F32))
    alpha = ((X @ v) * y[:, None]).argmax(-1).numpy()
    return CrossInstance(
        X=X.double(), Z=Z.double(), y=y.double(), v=v.double(), alpha=alpha, seed=int(seed)
    )


def visualization_instance(k: int) -> CrossInstance:
    """The data of ``visualization{k}.ipynb`` (spec §4.4), bit for bit.

    1: T = 3, seed 1, tokens 0.3·N(0, 1) shifted by (−1, 0) and (+1, 0).
    2: T = 5, seed 3, tokens 0.5·N(0, 1); the first tokens fixed at (1, ±0.5), the others shifted
    by (−1, 0)."""
    if k == 1:
        inst = planar_data(1)
    elif k == 2:
        n, T, d = 2, 5, 2
        gen = torch.Generator().manual_seed(3)
        v = torch.randn(d, generator=gen, dtype=F32)
        v = v / torch.norm(v)
        y = torch.ones(n, dtype=F32)
        X = 0.5 * torch.randn(n, T, d, generator=gen, dtype=F32)
        X[0, 0] = torch.tensor([1.0, 0.5], dtype=F32)
        X[1, 0] = torch.tensor([1.0, -0.5], dtype=F32)
        X[:, 1:] += torch.tensor([-1.0, 0.0], dtype=F32)
        Z = _unit(torch.randn(n, d, generator=gen, dtype=F32))
        alpha = ((X @ v) * y[:, None]).argmax(-1).numpy()
        inst = CrossInstance(
            X=X.double(), Z=Z.double(), y=y.double(), v=v.double(), alpha=alpha, seed=3
        )
    else:
        raise ValueError(f"k: the visualization notebooks are 1 and 2, got {k!r}")
    return replace(
        inst,
        assumptions={PAPER_INSTANCE, UNIQUE_OPT},
        meta={"notebook": f"visualization{k}.ipynb"},
    )


def local_instance(seed: int) -> CrossInstance:
    """``data_generator(seed)`` of ``local_converge.ipynb`` (spec §4.1), bit for bit: n = 6,
    T = 8, d = 10, v unit, Y = ±1 from the sign of a normal, tokens and queries on the unit
    sphere; α = opt."""
    n, T, d = LOCAL_DIMS
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(d, generator=gen, dtype=F32)
    v = v / torch.norm(v)
    y = 2 * torch.ones(n, dtype=F32) * (torch.randn(n, generator=gen, dtype=F32) > 0) - 1
    X = _unit(torch.randn(n, T, d, generator=gen, dtype=F32))
    Z = _unit(torch.randn(n, d, generator=gen, dtype=F32))
    alpha = ((X @ v) * y[:, None]).argmax(-1).numpy()
    return CrossInstance(
        X=X.double(),
        Z=Z.double(),
        y=y.double(),
        v=v.double(),
        alpha=alpha,
        seed=int(seed),
        assumptions={OFFICIAL_CROSS, PAPER_INSTANCE},
        meta={"notebook": "local_converge.ipynb"},
    )


# ---- the (K, Q) strategies -------------------------------------------------------------------


def local_dims_instances():
    """The official generator at the local-convergence dimensions (6, 8, 10) (spec §2.8)."""
    n, T, d = LOCAL_DIMS
    return official_cross_instances(n=n, T=T, d=d)


@st.composite
def planar_instances(draw):
    """Spec §3.6: ``planar_data`` (the visualization-1 generator) at a drawn seed; opt unique by
    1e-3 (a rare rejection otherwise)."""
    inst = planar_data(draw(SEEDS))
    g = np.sort(inst.scores.numpy(), axis=1)
    unique = bool((g[:, -1] - g[:, -2] >= 1e-3).all())
    if not unique:
        event("reject: tied top scores")
    assume(unique)
    return replace(inst, assumptions={UNIQUE_OPT}, meta={"family": "planar (spec §3.6)"})


@st.composite
def aligned_query_instances(draw, n: int = 3):
    """Spec F8's degenerate family: d = n orthonormal queries z_i, T = 2 tokens per input with
    x_i0 − x_i1 = c_i z_i (c_i ∈ [0.5, 1.5]), and Y_i = sign(vᵀz_i) so that token 0 is opt.
    Each input's one constraint reads c_i z_iᵀWz_i ≥ 1: only the diagonal of W in the z basis
    is bounded, and every symmetric PSD matrix with that diagonal (1/c_i) is a nuclear SVM."""
    seed = draw(SEEDS)
    gen = seeded(seed)
    U, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=DTYPE))
    Z = U.T.contiguous()
    v = _unit(torch.randn(n, generator=gen, dtype=DTYPE))
    c = 0.5 + torch.rand(n, generator=gen, dtype=DTYPE)
    base = torch.randn(n, n, generator=gen, dtype=DTYPE)
    y = torch.sign(Z @ v)
    ok = bool((y != 0).all() and ((Z @ v).abs() * c >= 1e-3).all())
    if not ok:
        event("reject: a query orthogonal to v (no score gap)")
    assume(ok)
    X = torch.stack([base + c[:, None] * Z, base], 1)
    return CrossInstance(
        X=X,
        Z=Z,
        y=y,
        v=v,
        alpha=np.zeros(n, dtype=np.int64),
        seed=seed,
        assumptions={UNIQUE_OPT, INDEPENDENT_QUERIES},
        meta={"family": "aligned queries (spec F8)", "c": c},
    )


def diagonal_instances():
    """The official generator at spec §2.12's dimensions (n, T, d) = (4, 3, 8), exponential
    loss (2403.08699)."""
    n, T, d = DIAG_DIMS
    return official_cross_instances(n=n, T=T, d=d, loss=DIAG_LOSS)


# ---- the key identity (claims_svm TF-KEY-IDENTITY) -------------------------------------------


@dataclass(eq=False, frozen=True)
class LowRankMatrix:
    """A d×d matrix W = AB (A: d × k, B: k × d, k = min(r, d), so rank W ≤ k) drawn from a
    seeded Gaussian; ``gen`` is that generator after the draws of W (a claim's further draws,
    e.g. random factorizations of W, continue from it)."""

    W: np.ndarray
    seed: int
    gen: torch.Generator = field(repr=False)

    def to_json(self) -> dict:
        return {"W": self.W.tolist(), "seed": self.seed}


def low_rank_matrix(d: int, r: int, seed: int) -> LowRankMatrix:
    """W = AB with A (d × min(r, d)) and B (min(r, d) × d) standard Gaussian, in that order from
    the generator seeded with ``seed``."""
    gen = seeded(seed)
    A = torch.randn(d, min(r, d), generator=gen, dtype=DTYPE).numpy()
    W = A @ torch.randn(min(r, d), d, generator=gen, dtype=DTYPE).numpy()
    return LowRankMatrix(W=W, seed=seed, gen=gen)


def low_rank_matrices(d=st.integers(1, 8), r=st.integers(1, 8)):
    """``low_rank_matrix`` at drawn d, r and seed (drawn in that order): d×d matrices of rank
    ≤ min(r, d)."""
    return st.builds(low_rank_matrix, d, r, SEEDS)
