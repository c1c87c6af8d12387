"""Strategies for the W-dynamics claims of *Transformers as SVMs* (arXiv 2308.16898, spec tfsvm
§2.3–§2.9, §5): a selection that is feasible but not locally optimal, an instance with a scan
of cone initialisations, and cross-attention data on a coarse lattice (exact score ties).

They build on ``strategies.cross`` (the official generator, cone initialisations) and draw
exactly what the claims of ``theorems.tfsvm.claims_wgd*`` and ``claims_svmeq`` drew when they
were defined there.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import torch
from hypothesis import assume, event
from hypothesis import strategies as st

from models.oracles.selection import local_optimality
from models.problems.nonlinear_head import NonlinearHeadProblem, official_relu_problem
from strategies.combinators import SEEDS, seeded
from strategies.cross import cross_cone_inits, official_cross_instances, svm_keys
from strategies.instances import CrossInstance

#: The entries of the lattice instances' tokens, queries and head. Products and sums of these
#: are exact in float64, so the scores tie exactly whenever they tie mathematically. Ordered
#: so that Hypothesis shrinks toward 0 and ±1.
LATTICE = (0.0, 1.0, -1.0, 0.5, -0.5)

#: A non-locally-optimal α counts only if a support token beats α_i's score by at least this
#: (so that the violation is not a near-tie).
MIN_BEATEN = 0.05


@st.composite
def nonlocal_alpha_instances(draw, n=3, T=4, d=4):
    """An official-generator instance and a selection α whose Att-SVM is feasible but which is
    NOT Frobenius-locally optimal: some support token of some input scores strictly higher
    than α_i (by ≥ 0.05, so that the violation is not a near-tie), found by enumerating
    [T]^n. Draws with no such α are rejected (event)."""
    inst = draw(official_cross_instances(n=n, T=T, d=d))
    keys, g = svm_keys(inst), inst.scores.numpy()
    found = []
    for alpha in itertools.product(range(inst.T), repeat=inst.n):
        verdict = local_optimality(keys, inst.scores, np.array(alpha))
        if verdict.feasible and not verdict.locally_optimal and verdict.violations:
            beaten = max(g[i, t] - g[i, alpha[i]] for i, t, _ in verdict.violations)
            if beaten >= MIN_BEATEN:
                found.append((alpha, beaten))
    if not found:
        event("reject: no feasible non-locally-optimal α")
    assume(found)
    alpha, beaten = found[draw(st.integers(0, len(found) - 1))]
    return CrossInstance(
        X=inst.X,
        Z=inst.Z,
        y=inst.y,
        v=inst.v,
        loss=inst.loss,
        alpha=np.array(alpha),
        assumptions=inst.assumptions,
        seed=inst.seed,
        meta={"opt": inst.alpha, "beaten_by": beaten},
    )


@st.composite
def cone_scan(draw, instances, grid):
    """One instance and one cone initialisation W(0) (``cross_cone_inits``) at every (R0, ε)
    of ``grid`` (cones nested: ε shrinks as R0 grows): (instance, (W(0) per cone))."""
    inst = draw(instances)
    return inst, tuple(draw(cross_cone_inits(inst, R0=R0, eps=eps)).W0 for R0, eps in grid)


def lattice_rows(count: int, d: int):
    """``count`` non-zero vectors of dimension d with entries in LATTICE."""
    row = st.lists(st.sampled_from(LATTICE), min_size=d, max_size=d).filter(any)
    return st.lists(row, min_size=count, max_size=count)


@st.composite
def lattice_cross_instances(
    draw, n=st.integers(1, 3), T=st.integers(2, 5), d=st.integers(2, 4)
) -> CrossInstance:
    """Cross-attention data (linear head v, logistic loss) on a coarse lattice: every token,
    query and the head a non-zero vector with entries in {0, ±1/2, ±1}, labels ±1. The scores
    γ_it = Y_i vᵀx_it are then computed exactly, so they tie exactly when they tie
    mathematically: the degenerate part of the instance space (equal scores, repeated or
    dependent queries, T > d) that a statement about every loss covers, drawn with positive
    probability."""
    n, T, d = draw(n), draw(T), draw(d)
    X = np.array([draw(lattice_rows(T, d)) for _ in range(n)], dtype=np.float64)
    Z = np.array(draw(lattice_rows(n, d)), dtype=np.float64)
    v = np.array(draw(lattice_rows(1, d))[0], dtype=np.float64)
    y = np.array(draw(st.lists(st.sampled_from((1.0, -1.0)), min_size=n, max_size=n)))
    return CrossInstance(X=X, Z=Z, y=y, v=v)


# ---- nonlinear heads (spec §2.9, the official multi_token_converge notebook) ---------------------

#: The notebook's sizes (n = 3, T = 4) and the dimensions its two experiments use and more.
HEAD_N, HEAD_T, HEAD_DIMS = 3, 4, st.integers(2, 6)
#: The official λ head's weights (spec §2.9: f_i = vᵀu_i − λ‖u_i‖²).
HEAD_LAMBDAS = st.sampled_from([0.5, 1.0, 2.0, 4.0])


@st.composite
def head_problems(draw) -> NonlinearHeadProblem:
    """The notebook's data (``official_relu_problem``: unit tokens, queries and ‖V‖_F = 1,
    random labels with one negative) with its ReLU head or, on the same data, the λ head with a
    unit v and λ ∈ {0.5, 1, 2, 4}."""
    seed = draw(SEEDS)
    problem = official_relu_problem(HEAD_N, HEAD_T, draw(HEAD_DIMS), seed)
    assume(problem is not None)  # every label +1: the notebook skips the seed
    if draw(st.sampled_from(["relu", "lambda"])) == "relu":
        return problem
    v = torch.randn(problem.d, generator=seeded(seed), dtype=torch.float64)
    v = v / torch.linalg.vector_norm(v)
    return dataclasses.replace(problem, V=v, head="lambda", lam=draw(HEAD_LAMBDAS))
