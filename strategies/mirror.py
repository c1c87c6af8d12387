"""Strategies and instance builders for ℓp mirror descent on attention (arXiv 2410.14581; the
claims of theorems/mirror).

- ``SMALL``: small official-generator cross instances for the structural and metamorphic
  checks; ``OFFICIAL_MD``: the official local-convergence instances, (n, T, d) = (6, 8, 10),
  with W(0) ~ N(0, 1) entrywise (the official ``--std 1``).
- ``zero_coordinate_queries``: a small official instance whose queries vanish on a drawn set of
  coordinates.
- ``official_md_data``: the official data generator of the synthetic experiments, bit for bit.
- ``joint_official_instance``: the official hand-built joint (W, v) instance as a cross instance;
  ``joint_instances``: small drawn instances of the same recipe (queries = the first tokens).
- ``rotated``: the data rotated, x ↦ Ux, z ↦ Vz, v ↦ Uv (the scores do not change).
"""

from __future__ import annotations

import dataclasses

import torch
from hypothesis import assume, event
from hypothesis import strategies as st

from models.flows.mirror_joint import official_joint_data
from strategies.combinators import SEEDS, seeded
from strategies.cross import official_cross_instances, with_random_init
from strategies.instances import OFFICIAL_CROSS, UNIQUE_OPT, CrossInstance

DTYPE = torch.float64

#: (n, T, d) of the official local-convergence experiment (bash_scripts/run-local-*.sh).
OFFICIAL_SHAPE = (6, 8, 10)

#: Small official instances for the structural and metamorphic checks.
SMALL = official_cross_instances(n=st.integers(1, 4), T=st.integers(2, 6), d=st.integers(2, 6))

#: The official local-convergence instances (spec §4.5): (n, T, d) = (6, 8, 10), unit tokens,
#: queries and head, random labels, W(0) ~ N(0, 1) entrywise (``--std 1``).
OFFICIAL_MD = with_random_init(official_cross_instances(*OFFICIAL_SHAPE), scale=1.0)


@st.composite
def zero_coordinate_queries(draw):
    """A small official instance whose queries all vanish on a drawn nonempty set of coordinates
    (then renormalised): the columns of W outside the joint support of the z_i."""
    inst = draw(
        official_cross_instances(n=st.integers(1, 4), T=st.integers(2, 6), d=st.integers(2, 7))
    )
    d = inst.d
    off = draw(st.lists(st.integers(0, d - 1), min_size=1, max_size=d - 1, unique=True))
    Z = inst.Z.clone()
    Z[:, off] = 0.0
    norms = torch.linalg.vector_norm(Z, dim=1, keepdim=True)
    kept = bool((norms > 1e-3).all())
    if not kept:
        event("reject: a query vanishes on the kept coordinates")
    assume(kept)
    inst = dataclasses.replace(inst, Z=Z / norms, meta={**inst.meta, "zero_coordinates": off})
    return inst, sorted(off)


def official_md_data(seed: int, n: int = 6, T: int = 8, d: int = 10) -> CrossInstance:
    """tools/generate_data.py of the official code, bit for bit: one torch generator seeded with
    ``seed`` draws v (d), the label signs (n), X (n, T, d) and Z (n, d) in float32, in that
    order; v, the tokens and the queries are normalised in float32; the script then casts to
    float64. α is the top-score token of each input."""
    gen = torch.Generator().manual_seed(int(seed))
    f32 = torch.float32
    v = torch.randn(d, generator=gen, dtype=f32)
    y = 2 * torch.ones(n, dtype=f32) * (torch.randn(n, generator=gen, dtype=f32) > 0) - 1
    X = torch.randn((n, T, d), generator=gen, dtype=f32)
    Z = torch.randn((n, d), generator=gen, dtype=f32)
    v /= torch.norm(v)
    X /= torch.norm(X, dim=-1, keepdim=True)
    Z /= torch.norm(Z, dim=-1, keepdim=True)
    X, y, Z, v = X.to(DTYPE), y.to(DTYPE), Z.to(DTYPE), v.to(DTYPE)
    alpha = torch.argmax(y[:, None] * (X @ v), dim=1).numpy()
    return CrossInstance(
        X=X, Z=Z, y=y, v=v, alpha=alpha, assumptions={OFFICIAL_CROSS, UNIQUE_OPT}, seed=seed
    )


def joint_official_instance() -> CrossInstance:
    """The official joint instance (``models.flows.mirror_joint.official_joint_data``: n = 2, T = 3,
    d = 2, z_i = x_i1) as a cross instance; its head v = (1, 1) is a placeholder (joint training
    learns v from v(0) = 0)."""
    X, y, Z = official_joint_data()
    return CrossInstance(X=X, Z=Z, y=y, v=torch.ones(2, dtype=DTYPE), meta={"official": True})


#: The entries of a drawn joint instance's tokens are N(0, JOINT_TOKEN_SCALE²): token norms of
#: about 0.5–4, those of the official hand-built instance (0.9–3.0).
JOINT_TOKEN_SCALE = 1.5


def joint_data(n: int, T: int, d: int, seed: int) -> CrossInstance:
    """A joint (W, v) instance of the official joint recipe's kind, outside Hypothesis: tokens
    with i.i.d. N(0, JOINT_TOKEN_SCALE²) entries, the query of each input its first token,
    random label signs with both signs present (the official labels are (+1, −1): the last
    label is flipped when all agree); drawn in that order from one seeded generator. The head
    v = (1, …, 1) is a placeholder (joint training learns v from v(0) = 0)."""
    gen = seeded(seed)
    X = JOINT_TOKEN_SCALE * torch.randn(n, T, d, generator=gen, dtype=DTYPE)
    y = torch.where(torch.rand(n, generator=gen, dtype=DTYPE) < 0.5, -1.0, 1.0).to(DTYPE)
    if bool((y == y[0]).all()):
        y[-1] = -y[0]
    return CrossInstance(
        X=X, Z=X[:, 0].clone(), y=y, v=torch.ones(d, dtype=DTYPE), seed=seed, meta={"joint": True}
    )


@st.composite
def joint_instances(draw, n=st.integers(2, 3), T=st.integers(2, 4), d=st.integers(2, 3)):
    """Small joint (W, v) instances (``joint_data`` at a drawn seed and shape): n = 2–3 inputs
    of T = 2–4 tokens in d = 2–3 dimensions, queries = the first tokens, labels of both signs."""
    return joint_data(draw(n), draw(T), draw(d), draw(SEEDS))


def rotated(inst: CrossInstance, U, V) -> CrossInstance:
    """x ↦ Ux, z ↦ Vz, v ↦ Uv (the scores do not change), the same α."""
    t = torch.as_tensor
    return CrossInstance(
        X=inst.X @ t(U).T, Z=inst.Z @ t(V).T, y=inst.y, v=t(U) @ inst.v, alpha=inst.alpha
    )
