"""Meta-tests: each prompt-attention strategy meets the assumptions it promises.

Also: the paper's figure instances hold the exact data of spec maxmargin §4, instances
round-trip through JSON, invalid construction raises ValueError naming the field, and no
strategy trips a Hypothesis health check at default settings.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.extra.numpy import arrays

from models.oracles.selection import global_opt, has_unique_opt, local_optimality
from models.oracles.svm import att_svm, v_svm
from strategies import (
    ARBITRARY_P0,
    ASSUMPTIONS,
    CONE_INIT,
    DECOUPLED,
    EQUAL_NONOPT_SCORES,
    LOCALLY_OPTIMAL_ALPHA,
    NON_GLOBAL_ALPHA,
    NONTIGHT_V_SVM,
    PAPER_INSTANCE,
    SVM_FEASIBLE,
    SVM_INFEASIBLE,
    TIGHT_V_SVM,
    UNIQUE_OPT,
    PromptInstance,
    cone_inits,
    decoupled_instances,
    equal_nonopt_instances,
    figure1_instance,
    figure2_instance,
    figure3_instance,
    global_opt_instances,
    infeasible_instances,
    local_opt_instances,
    loss_comparison_instance,
)

DTYPE = torch.float64
FAST = settings(max_examples=25, deadline=None)
FEW = settings(max_examples=10, deadline=None)
NO_SHRINK = settings(database=None, phases=[Phase.generate], max_examples=200, deadline=None)


def _first(strategy, condition=lambda _: True):
    """The first generated example meeting ``condition`` (no shrinking: it only shows reach)."""
    return find(strategy, condition, settings=NO_SHRINK)


def _min_gap_to_runner_up(scores: torch.Tensor, alpha: np.ndarray) -> float:
    rows = torch.arange(scores.shape[0])
    top = scores[rows, torch.as_tensor(alpha)]
    others = scores.clone()
    others[rows, torch.as_tensor(alpha)] = -torch.inf
    return float((top - others.max(dim=1).values).min())


def _assert_decoupled(inst: PromptInstance) -> None:
    """keys = [k ; 0] and scores = g, bit for bit."""
    k, g = inst.meta["k"], inst.meta["g"]
    dk = k.shape[-1]
    assert inst.d == dk + 1
    assert torch.equal(inst.scores, g)
    assert torch.equal(inst.keys[..., :dk], k)
    assert torch.equal(inst.keys[..., dk], torch.zeros_like(g))
    assert torch.equal(inst.X[..., dk], inst.y[:, None] * g)


# ---- 1. decoupled ----------------------------------------------------------------------------


@FAST
@given(decoupled_instances())
def test_decoupled_scores_are_exactly_the_designed_g(inst):
    assert inst.assumptions == {DECOUPLED}
    _assert_decoupled(inst)
    assert inst.alpha is None and inst.p0 is None


def _score_matrices(n, T):
    return arrays(np.float64, (n, T), elements=st.floats(-5, 5, allow_subnormal=False))


@FAST
@given(decoupled_instances(n=2, T=st.integers(2, 4), dk=3, scores=_score_matrices, key_scale=2.0))
def test_decoupled_accepts_injected_scores_and_sizes(inst):
    assert (inst.n, inst.d) == (2, 4)
    _assert_decoupled(inst)
    # the keys carry no trace of the scores: their last coordinate is identically 0
    assert not inst.keys[..., -1].any()


def test_decoupled_rejects_bad_arguments():
    with pytest.raises(InvalidArgument, match="scores"):
        _first(decoupled_instances(n=2, T=3, scores=lambda n, T: np.zeros((3, 3))))
    with pytest.raises(InvalidArgument, match="n"):
        _first(decoupled_instances(n=0))


# ---- 2./3. global opt and equal non-optimal scores -------------------------------------------


@FAST
@given(global_opt_instances())
def test_global_opt_is_unique_and_its_svm_is_feasible(inst):
    assert inst.assumptions == {DECOUPLED, UNIQUE_OPT, SVM_FEASIBLE}
    _assert_decoupled(inst)
    assert np.array_equal(global_opt(inst.scores), inst.alpha)
    assert np.array_equal(inst.meta["opt"], inst.alpha)
    assert has_unique_opt(inst.scores)
    assert _min_gap_to_runner_up(inst.scores, inst.alpha) >= inst.meta["min_gap"] - 1e-15
    assert inst.d - 1 >= inst.n * (inst.T - 1)  # the default dimension rule
    assert att_svm(inst.keys, inst.alpha).status == "optimal"


@FEW
@given(global_opt_instances(n=st.integers(1, 3), T=st.integers(2, 4), dk=2, min_gap=0.2))
def test_global_opt_with_small_dk_is_checked_by_the_oracle(inst):
    assert inst.d == 3
    assert _min_gap_to_runner_up(inst.scores, inst.alpha) >= 0.2 - 1e-15
    sol = att_svm(inst.keys, inst.alpha)
    assert sol.status == "optimal"
    if inst.d - 1 < inst.n * (inst.T - 1):  # the oracle was consulted and its answer kept
        assert np.allclose(sol.x, inst.meta["p_mm"].numpy(), atol=1e-8)
    else:
        assert "p_mm" not in inst.meta


def test_global_opt_position_is_not_always_first():
    inst = _first(global_opt_instances(n=1, T=4), lambda x: x.alpha[0] != 0)
    assert inst.alpha[0] != 0 and int(torch.argmax(inst.scores[0])) == inst.alpha[0]


@FAST
@given(equal_nonopt_instances(with_p0=True))
def test_equal_nonopt_scores_are_exactly_equal(inst):
    assert inst.assumptions == {
        DECOUPLED,
        UNIQUE_OPT,
        SVM_FEASIBLE,
        EQUAL_NONOPT_SCORES,
        ARBITRARY_P0,
    }
    _assert_decoupled(inst)
    for i in range(inst.n):
        row = inst.scores[i]
        top = row[inst.alpha[i]]
        rest = torch.cat([row[: inst.alpha[i]], row[inst.alpha[i] + 1 :]])
        assert torch.equal(rest, rest[:1].expand_as(rest))  # one value, exactly
        assert top - rest[0] >= inst.meta["min_gap"] - 1e-15
    assert att_svm(inst.keys, inst.alpha).status == "optimal"
    norm = float(torch.linalg.vector_norm(inst.p0))
    assert 0.0 <= norm <= 10.0 + 1e-12 and inst.p0[-1] == 0


@FEW
@given(equal_nonopt_instances(n=3, T=5, levels=(1.0, 0.5)))
def test_equal_nonopt_fixed_levels(inst):
    rows = torch.arange(3)
    assert torch.all(inst.scores[rows, torch.as_tensor(inst.alpha)] == 1.0)
    assert int((inst.scores == 0.5).sum()) == 3 * 4
    assert inst.p0 is None


# ---- 4. non-global locally-optimal selections ------------------------------------------------


def _assert_local(inst: PromptInstance) -> None:
    assert {LOCALLY_OPTIMAL_ALPHA, NON_GLOBAL_ALPHA, SVM_FEASIBLE, UNIQUE_OPT} <= inst.assumptions
    _assert_decoupled(inst)
    opt = global_opt(inst.scores)
    assert np.array_equal(opt, inst.meta["opt"])
    assert has_unique_opt(inst.scores)
    assert (opt != inst.alpha).any()
    verdict = local_optimality(inst.keys, inst.scores, inst.alpha)
    assert verdict.locally_optimal, verdict.reason
    assert [t.tolist() for t in verdict.support] == [list(s) for s in inst.meta["support"]]
    assert verdict.vacuous_inputs == tuple(inst.meta["vacuous_inputs"])
    assert np.allclose(verdict.svm.x, inst.meta["p_mm"].numpy(), rtol=1e-7, atol=1e-9)
    # strict Def. 2 with room: support tokens are ≥ min_gap below α_i
    for i, tokens in enumerate(verdict.support):
        for t in tokens:
            gap = inst.scores[i, inst.alpha[i]] - inst.scores[i, t]
            assert gap >= inst.meta["min_gap"] - 1e-12


@FAST
@given(local_opt_instances())
def test_local_opt_alpha_is_locally_optimal_and_not_global(inst):
    _assert_local(inst)
    assert inst.meta["vacuous_inputs"] == ()


@FEW
@given(local_opt_instances(n=st.integers(2, 4), allow_vacuous=True, with_p0=True))
def test_local_opt_with_vacuous_inputs(inst):
    _assert_local(inst)
    assert ARBITRARY_P0 in inst.assumptions


@settings(max_examples=4, deadline=None)
@given(local_opt_instances(method="enumerate", n=2, T=3, dk=2))
def test_local_opt_by_enumeration(inst):
    _assert_local(inst)
    assert tuple(inst.alpha) in inst.meta["locally_optimal"]


# ---- 5. cone initializations -----------------------------------------------------------------


@FAST
@given(
    cone_inits(
        st.one_of(local_opt_instances(), global_opt_instances(with_p0=True)),
        R0=st.floats(1.0, 50.0),
        eps=st.floats(1e-4, 0.5),
    )
)
def test_cone_init_lies_in_the_cone(inst):
    cone = inst.meta["cone"]
    assert CONE_INIT in inst.assumptions and ARBITRARY_P0 not in inst.assumptions
    sol = att_svm(inst.keys, inst.alpha)
    p0 = inst.p0
    cos = float(p0 @ torch.as_tensor(sol.x)) / float(
        torch.linalg.vector_norm(p0) * np.linalg.norm(sol.x)
    )
    assert cos >= 1 - cone["eps"]
    assert abs(cos - cone["cos"]) <= 1e-9
    assert float(torch.linalg.vector_norm(p0)) >= cone["R0"] * (1 - 1e-12)
    # the noise stays in the span of the key differences (the last coordinate is W's kernel)
    assert abs(float(p0[-1])) <= 1e-12 * float(torch.linalg.vector_norm(p0))


def test_cone_init_noise_is_not_always_zero():
    inst = _first(cone_inits(local_opt_instances(n=2, dk=4)), lambda x: x.meta["cone"]["sigma"] > 0)
    assert inst.meta["cone"]["cos"] < 1.0


def test_cone_init_needs_alpha():
    with pytest.raises(InvalidArgument, match="alpha"):
        _first(cone_inits(decoupled_instances()))


# ---- 6. infeasible ATT-SVM -------------------------------------------------------------------


@FAST
@given(infeasible_instances(n=st.integers(1, 3), T=st.integers(2, 6)))
def test_infeasible_instances_are_reported_infeasible(inst):
    assert inst.assumptions == {DECOUPLED, UNIQUE_OPT, SVM_INFEASIBLE}
    _assert_decoupled(inst)
    assert np.array_equal(global_opt(inst.scores), inst.alpha)
    assert att_svm(inst.keys, inst.alpha).status == "infeasible"
    # the bad input's k_opt is exactly the weighted mean of its hull tokens
    i, w = inst.meta["bad_input"], torch.tensor(inst.meta["hull_weights"], dtype=DTYPE)
    hull = inst.keys[i, inst.meta["hull_tokens"]]
    assert torch.equal((w[:, None] * hull).sum(0) / w.sum(), inst.keys[i, inst.alpha[i]])


@pytest.mark.parametrize("variant", ["hull", "midpoint", "duplicate"])
def test_each_infeasible_variant_is_reachable(variant):
    inst = _first(infeasible_instances(variant=variant, T=4))
    assert inst.meta["variant"] == variant
    assert att_svm(inst.keys, inst.alpha).status == "infeasible"


# ---- 7. the paper's instances ----------------------------------------------------------------


@pytest.mark.parametrize("panel", ["a", "b"])
def test_figure1_exact_data(panel):
    inst = figure1_instance(panel)
    third = 0.9 if panel == "a" else 0.0
    keys = [[[-0.1, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]]]
    expected_keys = torch.tensor(keys, dtype=DTYPE)
    assert torch.equal(inst.keys, expected_keys)
    assert torch.equal(inst.scores, torch.tensor([[1.0, 0.9, third]], dtype=DTYPE))
    assert torch.equal(inst.W, torch.diag(torch.tensor([1.0, 1.0, 0.0], dtype=DTYPE)))
    assert torch.equal(inst.v, torch.tensor([0.0, 0.0, 1.0], dtype=DTYPE))
    assert inst.meta["inits"] == [[0.0, b, 0.0] for b in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)]
    assert PAPER_INSTANCE in inst.assumptions
    assert (EQUAL_NONOPT_SCORES in inst.assumptions) == (panel == "a")


@pytest.mark.parametrize("panel", ["a", "b"])
@pytest.mark.parametrize("alpha", [0, 1, 2])
def test_figure1_svm_solutions_and_local_optimality(panel, alpha):
    inst = figure1_instance(panel, alpha=alpha)
    verdict = local_optimality(inst.keys, inst.scores, inst.alpha)
    assert verdict.feasible and (SVM_FEASIBLE in inst.assumptions)
    assert np.allclose(verdict.svm.x, inst.meta["p_mm"][alpha], atol=1e-9)
    assert [t.tolist() for t in verdict.support] == inst.meta["support"][alpha]
    assert verdict.locally_optimal == (LOCALLY_OPTIMAL_ALPHA in inst.assumptions)
    assert verdict.locally_optimal == (alpha == 0 or (panel == "b" and alpha == 1))
    printed = inst.meta["notebook_objective"].get(alpha)  # cvxopt's printed ½‖p‖²
    if printed is not None:
        assert abs(0.5 * float(verdict.svm.norm) ** 2 - printed) < 1e-5


def test_figure2_shifts_scores_and_seed():
    inst = figure2_instance()
    assert (inst.n, inst.T, inst.d) == (3, 7, 3)
    assert torch.all(inst.scores[:, 0] == 1.0) and torch.all(inst.scores[:, 1:] == 0.5)
    shifts = torch.tensor(inst.meta["shifts"], dtype=DTYPE)[inst.meta["token_shift"]]
    assert inst.meta["token_shift"] == [0, 1, 1, 1, 2, 2, 2]
    assert torch.allclose(inst.X[..., :2] - shifts[:, :2], inst.meta["noise"][..., :2], atol=1e-6)
    noise = inst.meta["noise"][..., :2]
    assert 0.1 < float(noise.std()) < 0.3 and float(noise.abs().max()) < 1.2
    assert torch.equal(figure2_instance().X, inst.X)  # deterministic in the seed
    assert not torch.equal(figure2_instance(seed=1).X, inst.X)
    assert inst.meta["inits"] == [[a, 0.0, 0.0] for a in (1.0, 0.5, 0.0, -0.5, -1.0, -1.5)]
    assert np.array_equal(global_opt(inst.scores), inst.alpha)
    assert att_svm(inst.keys, inst.alpha).status == "optimal"
    assert {PAPER_INSTANCE, EQUAL_NONOPT_SCORES, SVM_FEASIBLE} <= inst.assumptions


@pytest.mark.parametrize("tight", [True, False])
def test_figure3_inputs(tight):
    inst = figure3_instance(tight)
    last = [0.5, 1.0] if tight else [0.5, 1.5]
    expected = [[[0.0, 0.0], [1.0, 1.0]], [[0.0, 0.0], [1.0, -1.0]], [[0.0, 0.0], last]]
    assert inst.X.tolist() == expected
    assert inst.y.tolist() == [1.0, -1.0, 1.0]
    assert torch.equal(inst.W, torch.eye(2, dtype=DTYPE))
    assert inst.v.tolist() == [-1.0, 0.0] and inst.p0.tolist() == [0.0, -1.0]
    assert inst.alpha.tolist() == [1, 1, 1]
    assert att_svm(inst.keys, inst.alpha).status == "optimal"
    sol = v_svm(inst.X[:, 1], inst.y)
    assert np.allclose(sol.x, inst.meta["v_mm"], atol=1e-9)
    assert np.flatnonzero(sol.active).tolist() == inst.meta["v_svm_support"]
    assert (TIGHT_V_SVM if tight else NONTIGHT_V_SVM) in inst.assumptions


@pytest.mark.parametrize("C", [1, 5, 100])
def test_loss_comparison_instance(C):
    inst = loss_comparison_instance(C)
    assert torch.equal(inst.scores, torch.tensor([[0.0, C], [0.0, 1.0]], dtype=DTYPE))
    assert inst.keys[:, :, :2].tolist() == [[[0, 0], [1, 1]], [[0, 0], [1, -1]]]
    assert inst.alpha.tolist() == [1, 1] and not inst.p0.any()
    assert np.allclose(att_svm(inst.keys, inst.alpha).x, inst.meta["p_mm"], atol=1e-9)
    assert loss_comparison_instance(C, loss="correlation").problem.loss.name == "correlation"
    with pytest.raises(ValueError, match="C"):
        loss_comparison_instance(0)


# ---- serialization and bad input ------------------------------------------------------------

ANY_PROMPT = st.one_of(
    decoupled_instances(),
    global_opt_instances(with_p0=True),
    equal_nonopt_instances(),
    local_opt_instances(),
    infeasible_instances(),
)


@FAST
@given(ANY_PROMPT)
def test_json_round_trip(inst):
    data = json.loads(json.dumps(inst.to_json()))
    assert set(data) == {"model", "X", "y", "v", "W", "loss", "p0"}
    back = PromptInstance.from_json(data)
    for name in ("X", "y", "v", "W"):
        assert torch.equal(getattr(back, name), getattr(inst, name))
    assert back.loss == inst.loss
    assert (back.p0 is None) == (inst.p0 is None)
    if inst.p0 is not None:
        assert torch.equal(back.p0, inst.p0)
    full = PromptInstance.from_json(json.loads(json.dumps(inst.to_json(extra=True))))
    assert np.array_equal(full.alpha, inst.alpha) if inst.alpha is not None else full.alpha is None
    assert full.assumptions == inst.assumptions and full.seed == inst.seed
    assert torch.equal(full.scores, inst.scores)


@FEW
@given(st.one_of(ANY_PROMPT, cone_inits(local_opt_instances())))
def test_json_is_accepted_by_the_check_cli(inst):
    load_instance = getattr(pytest.importorskip("theorems.framework.cli"), "load_instance", None)
    if load_instance is None:
        pytest.skip("theorems.framework.cli has no load_instance")
    model, data = load_instance(json.loads(json.dumps(inst.to_json())))
    assert model == "prompt"
    assert torch.equal(torch.as_tensor(data["X"], dtype=DTYPE), inst.X)


def _valid():
    return {
        "X": torch.zeros(2, 3, 4),
        "y": torch.tensor([1.0, -1.0]),
        "v": torch.zeros(4),
        "W": torch.eye(4),
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("X", torch.zeros(3, 4)),
        ("X", torch.full((2, 3, 4), float("nan"))),
        ("X", [[[1.0, 2.0]], [[1.0]]]),
        ("y", torch.tensor([1.0, 0.0])),
        ("y", torch.tensor([1.0, -1.0, 1.0])),
        ("v", torch.zeros(3)),
        ("W", torch.eye(3)),
        ("loss", "hinge"),
        ("p0", torch.zeros(5)),
        ("alpha", np.array([0, 3])),
        ("alpha", np.array([0])),
        ("assumptions", {"no_such_assumption"}),
        ("seed", 1.5),
        ("meta", [1, 2]),
    ],
)
def test_invalid_prompt_instance_names_the_field(field, value):
    kwargs = _valid() | {field: value}
    with pytest.raises(ValueError, match=f"^{field}"):
        PromptInstance(**kwargs)


def test_from_json_rejects_malformed_files():
    good = PromptInstance(**_valid()).to_json()
    with pytest.raises(ValueError, match="^model"):
        PromptInstance.from_json(good | {"model": "embedding"})
    with pytest.raises(ValueError, match="^W"):
        PromptInstance.from_json({k: v for k, v in good.items() if k != "W"})
    with pytest.raises(ValueError, match="^y"):
        PromptInstance.from_json(good | {"y": [1, 2]})
    with pytest.raises(ValueError, match="^instance"):
        PromptInstance.from_json([1, 2, 3])


def test_assumptions_are_documented():
    assert all(isinstance(k, str) and v for k, v in ASSUMPTIONS.items())
    inst = figure1_instance("b", alpha=1)
    assert inst.assumptions <= set(ASSUMPTIONS)
    assert "PromptInstance(n=1, T=3, d=3" in repr(inst)


# ---- health checks ---------------------------------------------------------------------------

PROMPT_STRATEGIES = {
    "decoupled": lambda: decoupled_instances(),
    "global_opt": lambda: global_opt_instances(with_p0=True),
    "global_opt_small_dk": lambda: global_opt_instances(dk=2),
    "equal_nonopt": lambda: equal_nonopt_instances(with_p0=True),
    "local_opt": lambda: local_opt_instances(),
    "local_opt_vacuous": lambda: local_opt_instances(allow_vacuous=True),
    "cone_init": lambda: cone_inits(local_opt_instances()),
    "infeasible": lambda: infeasible_instances(n=st.integers(1, 3)),
}


@pytest.mark.parametrize("name", sorted(PROMPT_STRATEGIES))
def test_no_health_check_failures(name):
    """Default settings (all health checks on); raises FailedHealthCheck on a problem."""
    seen = []

    @settings(settings.get_profile("default"), max_examples=10, database=None, deadline=None)
    @given(PROMPT_STRATEGIES[name]())
    def run(inst):
        seen.append(inst)

    run()
    assert seen


@settings(settings.get_profile("default"), max_examples=5, database=None, deadline=None)
@given(local_opt_instances(method="enumerate", n=2, T=3, dk=2))
def test_enumeration_passes_health_checks(inst):
    assert inst.alpha is not None
