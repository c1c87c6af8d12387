"""Meta-tests: each linear-NTP strategy (strategies/ntp_linear.py, spec ntp §6.3 (d), §4.3) meets
the assumptions it promises, each checked here independently of the strategy's and the model's
code: compatibility by a least-squares solve over every support pair, separability by a cvxpy LP
written on W (not the model's anchored rows or its QP), ranks with numpy.
"""

from __future__ import annotations

import cvxpy as cp
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from strategies.instances import (
    FULL_RANK_CONTEXTS,
    NOT_NTP_COMPATIBLE,
    NOT_NTP_SEPARABLE,
    NTP_COMPATIBLE,
    NTP_SEPARABLE,
)
from strategies.ntp_instances import LinearNTPInstance
from strategies.ntp_linear import (
    FIG1_SUPPORTS,
    fig1_instance,
    fig1_instances,
    incompatible_instances,
    linear_instances,
    nonseparable_fig1_instances,
    one_hot_instances,
    overparameterized_instances,
    resampled,
    separable_fig1_instances,
    twin_token_instances,
)

FAST = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _pairs(inst):
    """(rows, targets): (e_z − e_z')ᵀ W h̄_j = log(p̂_jz/p̂_jz') for every pair z < z' of S_j."""
    rows, b = [], []
    for j in range(inst.m):
        S = np.flatnonzero(inst.P[j] > 0)
        for i, z in enumerate(S):
            for zz in S[i + 1 :]:
                M = np.zeros((inst.vocab, inst.dim))
                M[z] += inst.H[:, j]
                M[zz] -= inst.H[:, j]
                rows.append(M.ravel())
                b.append(np.log(inst.P[j, z] / inst.P[j, zz]))
    return np.array(rows).reshape(len(rows), inst.vocab * inst.dim), np.array(b)


def compatible(inst) -> bool:
    A, b = _pairs(inst)
    if len(b) == 0:
        return True
    w = np.linalg.lstsq(A, b, rcond=None)[0]
    return float(np.abs(A @ w - b).max()) <= 1e-9


def separable(inst) -> bool:
    """Def. 2 as an LP on W: max t s.t. in-support logits equal, (e_z − e_v)ᵀ W h̄_j ≥ t,
    t ≤ 1; separable iff t* = 1 (a margin t > 0 scales to 1)."""
    W = cp.Variable((inst.vocab, inst.dim))
    t = cp.Variable()
    cons = [t <= 1]
    for j in range(inst.m):
        logits = W @ inst.H[:, j]
        S = np.flatnonzero(inst.P[j] > 0)
        off = np.flatnonzero(inst.P[j] == 0)
        cons += [logits[z] == logits[S[0]] for z in S[1:]]
        cons += [logits[S[0]] - logits[v] >= t for v in off]
    prob = cp.Problem(cp.Maximize(t), cons)
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == "optimal", prob.status
    return t.value > 0.5


def check_valid(inst: LinearNTPInstance):
    assert np.all(inst.pi > 0) and abs(inst.pi.sum() - 1) < 1e-12
    assert np.all(inst.P >= 0) and np.allclose(inst.P.sum(axis=1), 1, atol=1e-12)
    c, s = compatible(inst), separable(inst)
    assert (NTP_COMPATIBLE in inst.assumptions) == c
    assert (NOT_NTP_COMPATIBLE in inst.assumptions) == (not c)
    assert (NTP_SEPARABLE in inst.assumptions) == s
    assert (NOT_NTP_SEPARABLE in inst.assumptions) == (not s)
    rank_full = np.linalg.matrix_rank(inst.H) == inst.m
    assert (FULL_RANK_CONTEXTS in inst.assumptions) == rank_full
    again = LinearNTPInstance.from_json(inst.to_json(extra=True))
    assert np.array_equal(again.P, inst.P) and again.assumptions == inst.assumptions


@FAST
@given(inst=linear_instances(m=st.integers(2, 6), d=st.integers(2, 8)))
def test_linear_instances_classified(inst):
    check_valid(inst)


@FAST
@given(inst=overparameterized_instances(extra=st.integers(1, 3)))
def test_overparameterized(inst):
    check_valid(inst)
    assert inst.dim > inst.m and FULL_RANK_CONTEXTS in inst.assumptions


@FEW
@given(inst=separable_fig1_instances())
def test_separable_fig1(inst):
    check_valid(inst)
    assert {NTP_SEPARABLE, NTP_COMPATIBLE} <= inst.assumptions
    assert [tuple(np.flatnonzero(r)) for r in inst.P > 0] == list(FIG1_SUPPORTS)


@FEW
@given(inst=nonseparable_fig1_instances())
def test_nonseparable_fig1(inst):
    check_valid(inst)
    assert {NOT_NTP_SEPARABLE, NTP_COMPATIBLE} <= inst.assumptions


@FEW
@given(inst=fig1_instances(d=st.integers(2, 4)))
def test_fig1_classified(inst):
    check_valid(inst)
    assert inst.vocab == 5 and inst.m == 3


@FAST
@given(inst=one_hot_instances())
def test_one_hot(inst):
    check_valid(inst)
    assert np.all((inst.P > 0).sum(axis=1) == 1)


@FAST
@given(inst=twin_token_instances())
def test_twins(inst):
    check_valid(inst)
    a, b = inst.meta["twins"]
    S = inst.P > 0
    assert np.array_equal(S[:, a], S[:, b])
    assert np.all(S.sum(axis=1) < inst.vocab)


@FEW
@given(inst=incompatible_instances())
def test_incompatible(inst):
    check_valid(inst)
    assert NOT_NTP_COMPATIBLE in inst.assumptions and NTP_SEPARABLE in inst.assumptions
    i, k = inst.meta["repeat"]
    assert np.array_equal(inst.H[:, i], inst.H[:, k])
    assert np.array_equal(inst.P[i] > 0, inst.P[k] > 0)


@FEW
@given(inst=overparameterized_instances(), seed=st.integers(0, 2**32 - 1))
def test_resampled_keeps_supports(inst, seed):
    other = resampled(inst, seed)
    assert np.array_equal(other.P > 0, inst.P > 0)
    assert np.array_equal(other.H, inst.H) and np.array_equal(other.pi, inst.pi)
    assert not np.array_equal(other.P, inst.P) or np.all((inst.P > 0).sum(axis=1) == 1)


def test_fig1_separable_fraction():
    """Spec §2.11 [N]: about 10 of 60 Fig.-1 draws in d = 2 are separable, all compatible."""
    insts = [fig1_instance(s) for s in range(60)]
    n_sep = sum(NTP_SEPARABLE in i.assumptions for i in insts)
    assert all(NTP_COMPATIBLE in i.assumptions for i in insts)
    assert 3 <= n_sep <= 20
