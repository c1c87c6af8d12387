"""Meta-tests of strategies.combinators: each combinator delivers what its docstring promises
(and keeps what it must not change)."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from models.oracles.svm import att_svm
from strategies import equal_nonopt_instances
from strategies.combinators import (
    SEEDS,
    generic_instances,
    random_points,
    seeded,
    with_alpha,
    with_init,
)
from strategies.instances import ARBITRARY_P0


@given(inst=with_alpha(equal_nonopt_instances()))
@settings(max_examples=20, deadline=None)
def test_with_alpha_draws_one_token_per_input(inst):
    assert inst.alpha.shape == (inst.n,) and inst.alpha.dtype == np.int64
    assert ((0 <= inst.alpha) & (inst.alpha < inst.T)).all()


@given(data=st.data())
@settings(max_examples=10, deadline=None)
def test_with_alpha_keeps_the_data(data):
    base = data.draw(equal_nonopt_instances())
    inst = data.draw(with_alpha(base))
    assert torch.equal(inst.X, base.X) and torch.equal(inst.y, base.y)


@given(inst=generic_instances())
@settings(max_examples=15, deadline=None)
def test_generic_instances_make_every_att_svm_feasible(inst):
    # dk >= n(T-1): the Gaussian key differences are independent, so ATT-SVM(α) is feasible.
    assert inst.keys.shape[-1] >= inst.n * (inst.T - 1)
    assert att_svm(inst.keys, inst.alpha).status == "optimal"


@given(inst=with_init(equal_nonopt_instances(), lo=-0.5, hi=0.5))
@settings(max_examples=15, deadline=None)
def test_with_init_sets_an_arbitrary_start_in_the_norm_range(inst):
    assert ARBITRARY_P0 in inst.assumptions
    norm = float(torch.linalg.vector_norm(inst.p0))
    assert 10**-0.5 - 1e-12 <= norm <= 10**0.5 + 1e-12


@given(seed=SEEDS)
@settings(max_examples=10, deadline=None)
def test_seeded_generators_repeat_and_random_points_lie_in_their_shell(seed):
    a = random_points(seeded(seed), 3, 50, lo=-1.0, hi=2.0)
    b = random_points(seeded(seed), 3, 50, lo=-1.0, hi=2.0)
    assert torch.equal(a, b)
    norms = torch.linalg.vector_norm(a, dim=1)
    assert (norms >= 0.1 - 1e-12).all() and (norms <= 100 + 1e-9).all()
