"""Metamorphic twins (strategies/twins.py, issue 21): every twin is the same instance.

For each twin of instances drawn from the public strategies: (1) its scores, mapped back,
equal the original's, bit for bit where the twin says so and with the same exact-tie pattern
always; (2) its certified ATT-SVM (or `<cls>` SVM), mapped back, is the original's within
SVM_AGREEMENT; (3) on tiny instances, gradient flow on the twin selects the mapped selection
and its direction, mapped back, is the original's. Controls: deliberately wrong twins (α not
moved with its token, v rotated with the tokens, tokens rotated without v, the cross back-map
applied in the wrong direction, token ids relabelled without E0's rows, p not rotated back, p
not negated after a flip) fail these same checks. Also: twins are deterministic, differ from
their original, pass their class's validation, and keep the premises of their original's
assumptions.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from models.flows.dynamics import converge
from models.oracles.svm import att_svm, cls_svm
from models.problems.attention import one_minus_cos
from models.problems.embedding import EmbeddingProblem, one_step
from strategies import (
    DECOUPLED,
    EQUAL_NONOPT_SCORES,
    K_LEVEL,
    SINGLE_RELEVANT_TOKEN,
    SVM_INFEASIBLE,
    UNIQUE_OPT,
    CrossInstance,
    EmbeddingInstance,
    PromptInstance,
    cone_inits,
    equal_nonopt_cross_instances,
    equal_nonopt_instances,
    figure1_instance,
    figure2_instance,
    figure3_instance,
    general_frequency_instances,
    global_opt_instances,
    infeasible_instances,
    k_level_instances,
    local_opt_instances,
    loss_comparison_instance,
    nostat_instances,
    official_cross_instances,
    prescribed_score_instances,
    single_relevant_token_instances,
    two_relevant_instances,
    with_random_init,
    zipf_instance,
)
from strategies.instances import PRESCRIBED_SCORES
from strategies.twins import (
    TWINS,
    Twin,
    flip_labels_and_tokens,
    permute_tokens,
    relabel_tokens,
    rotate_embedding,
    twins_of,
)

SMALL = settings(max_examples=20, deadline=None)
#: Two certified SVM solutions of one problem (the oracle polishes to ~1e-12; issue 21's bound).
SVM_AGREEMENT = 1e-7
#: Scores a twin does not promise bit for bit: a few ulps of a dot product of ≤ 64 terms.
SCORE_ROUNDING = 1e-12
#: Directions of the flow on an instance and on its twin, mapped back (issue 21's bound). Each
#: run stops with p within converge's default target (1e-6) of its SVM's direction, and in
#: practice at ~1e-15: the binding stop test is the flow's heading, not p's direction. A
#: tighter target is not used: at 1e-8 the heading test is decided by rounding at ‖p‖ ≈ 1e8
#: (two_relevant_instances(n_pairs=3, T=3, n_irr=2, d=8, eta0=20) at seed 3: converged on two
#: of its twins, inconclusive on the original and three others).
FLOW_AGREEMENT = 1e-6

# ---- the instances ---------------------------------------------------------------------------

SIZES = {"n": st.integers(1, 3), "T": st.integers(2, 4)}
PROMPTS = st.one_of(
    global_opt_instances(**SIZES, with_p0=True),
    equal_nonopt_instances(**SIZES, with_p0=True),
    local_opt_instances(n=st.integers(1, 3), T=st.integers(3, 4)),
    infeasible_instances(n=st.integers(1, 2), T=st.integers(2, 4)),
    cone_inits(global_opt_instances(**SIZES)),
)
CROSS = st.one_of(
    official_cross_instances(**SIZES, d=st.integers(2, 5)),
    prescribed_score_instances(**SIZES, d=st.integers(3, 5)),
    equal_nonopt_cross_instances(**SIZES, d=st.integers(5, 6)),
    with_random_init(nostat_instances(n=st.integers(1, 3), T=st.integers(2, 3))),
)
EMBEDDINGS = st.one_of(
    single_relevant_token_instances(n_pairs=st.integers(2, 5), T=3, n_irr=st.integers(2, 4), d=8),
    general_frequency_instances(S=st.integers(3, 6), T=3, n=st.integers(4, 10), d=8),
    k_level_instances(K=st.integers(2, 3), group_size=st.integers(1, 2), T=2, d=8),
    two_relevant_instances(n_pairs=st.integers(2, 5), T=3, n_irr=2, d=8),
)
PAPER = [
    figure1_instance("a"),
    figure1_instance("b", 1),
    figure2_instance(),
    figure3_instance(True),
    loss_comparison_instance(5.0),
]

# Tiny instances for the flow: every run well under a second.
TINY_PROMPTS = st.one_of(
    global_opt_instances(n=st.integers(1, 2), T=st.integers(2, 3), with_p0=True),
    equal_nonopt_instances(n=st.integers(1, 2), T=st.integers(2, 3), with_p0=True),
)
TINY_CROSS = with_random_init(
    st.one_of(
        prescribed_score_instances(n=st.integers(1, 2), T=2, d=3),
        official_cross_instances(n=st.integers(1, 2), T=2, d=3),
    )
)
TINY_EMBEDDINGS = st.one_of(
    single_relevant_token_instances(n_pairs=st.integers(2, 3), T=3, n_irr=3, d=8),
    two_relevant_instances(n_pairs=st.integers(2, 3), T=3, n_irr=2, d=8),
)


# ---- what each check compares ----------------------------------------------------------------


def scores(inst) -> torch.Tensor:
    """γ (n, T): y_i vᵀx_it, or y_i⟨E0_s, v⟩ at each position of an embedding instance."""
    if isinstance(inst, EmbeddingInstance):
        return EmbeddingProblem(inst.sequences, inst.y, inst.E0, inst.v).prompt_problem().scores
    return inst.scores


def ties(s: torch.Tensor) -> np.ndarray:
    """Which pairs of tokens of one input have exactly equal scores."""
    a = s.numpy()
    return a[:, :, None] == a[:, None, :]


def svm(inst):
    """The certified SVM of the instance's selection: ATT-SVM(α) on the keys (cross: the
    vectorised keys, so x = vec(W)); the `<cls>` SVM of s* on E0 for an embedding instance."""
    if isinstance(inst, EmbeddingInstance):
        return cls_svm(inst.E0, inst.sequences, inst.s_star)
    keys = inst.keys if isinstance(inst, PromptInstance) else inst.problem.prompt.keys
    return att_svm(keys, inst.alpha)


def has_selection(inst) -> bool:
    return (inst.s_star if isinstance(inst, EmbeddingInstance) else inst.alpha) is not None


def flow(inst):
    """converge from the instance's start: (outcome, selected tokens). Embedding: the `<cls>`
    flow on E¹ after the one step, the selection given as token ids."""
    if isinstance(inst, EmbeddingInstance):
        problem = EmbeddingProblem(inst.sequences, inst.y, inst.E0, inst.v)
        E1 = one_step(problem, inst.eta0).E1
        out = converge(problem.with_embeddings(E1).prompt_problem())
        return out, inst.sequences.numpy()[np.arange(inst.n), out.selected]
    if isinstance(inst, CrossInstance):
        p0 = None if inst.W0 is None else inst.W0.reshape(-1)
        out = converge(inst.problem.prompt, p0)
    else:
        out = converge(inst.problem, inst.p0)
    return out, out.selected


def check_scores(inst, twin: Twin) -> None:
    """(1) The twin's scores mapped back: the same exact ties; bit for bit if promised."""
    orig, back = scores(inst), twin.tokens_back(scores(twin.instance))
    assert np.array_equal(ties(back), ties(orig)), f"{twin.name}: exact ties differ"
    if twin.exact_scores:
        assert torch.equal(back, orig), f"{twin.name}: scores differ bit for bit"
    else:
        err = float((back - orig).abs().max())
        assert err <= SCORE_ROUNDING * max(1.0, float(orig.abs().max())), (twin.name, err)


def check_svm(inst, twin: Twin) -> None:
    """(2) The twin's certified SVM mapped back is the original's."""
    a, b = svm(inst), svm(twin.instance)
    assert b.status == a.status, f"{twin.name}: SVM {b.status}, original {a.status}"
    if a.status == "optimal":
        x = np.asarray(twin.param_back(b.x))
        rel = np.linalg.norm(x - a.x) / np.linalg.norm(a.x)
        assert rel <= SVM_AGREEMENT, f"{twin.name}: SVM solutions {rel:.2e} apart"


def check_flow(inst, twin: Twin, original=None) -> str | None:
    """(3) Gradient flow on the twin: same outcome, the mapped selection, the same direction.

    A run left undecided on one side only is no evidence either way (DESIGN: inconclusive is
    never support): it is returned, not asserted. It happens: single_relevant_token_instances
    (n_pairs=3, T=3, n_pos=2, n_neg=1, n_irr=3, d=8, eta0=100) at seed 2937795 stops with
    "integrator stalled (Unexpected istate in LSODA)" at ‖p‖ ≈ 1.2e5 on the original and four
    twins, and converges on its rotate-embedding twin: the engine's verdict, not the twin.
    """
    a, sel_a = original or flow(inst)
    b, sel_b = flow(twin.instance)
    if a.status != b.status and "inconclusive" in (a.status, b.status):
        return f"{twin.name}: flow {b.status}, original {a.status}"
    assert b.status == a.status, f"{twin.name}: flow {b.status} ({b.reason}), original {a.status}"
    assert np.array_equal(twin.selection_back(sel_b), sel_a), f"{twin.name}: selection differs"
    if a.converged:
        gap = one_minus_cos(twin.param_back(b.p), a.p)
        assert gap <= FLOW_AGREEMENT, f"{twin.name}: directions 1 − cos = {gap:.2e} apart"
    return None


def check_all(inst) -> list[Twin]:
    twins = twins_of(inst)
    for twin in twins:
        check_scores(inst, twin)
        if has_selection(inst):
            check_svm(inst, twin)
    return twins


# ---- (1) and (2) on every family -------------------------------------------------------------


@SMALL
@given(PROMPTS)
def test_prompt_twins_keep_scores_and_svm(inst):
    twins = check_all(inst)
    if inst.v.count_nonzero() == 1:  # every prompt generator: v = e_d, the ties are exact
        assert all(t.exact_scores for t in twins)
    names = [t.name for t in twins]
    if SVM_INFEASIBLE in inst.assumptions:  # exact hulls: only the exact signed permutation
        assert "rotate-embedding" not in names and "signed-permute-embedding" in names


def test_a_dense_head_with_exact_ties_rotates_only_the_key_space():
    X = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [2.0, -1.0]]], dtype=torch.float64)
    v = torch.tensor([0.5, 0.5], dtype=torch.float64)  # scores 0.5, 0.5, 0.5: exact ties
    inst = PromptInstance(X, torch.ones(1), v, torch.eye(2), alpha=[0], seed=7)
    twin = rotate_embedding(inst)
    assert torch.equal(twin.instance.X, X) and twin.exact_scores
    assert "key space" in twin.note and not torch.equal(twin.instance.W, inst.W)
    check_scores(inst, twin)
    check_svm(inst, twin)
    check_flow(inst, twin)


@SMALL
@given(CROSS)
def test_cross_twins_keep_scores_and_svm(inst):
    twins = check_all(inst)
    if PRESCRIBED_SCORES in inst.assumptions:
        assert all(t.exact_scores for t in twins)


@SMALL
@given(EMBEDDINGS)
def test_embedding_twins_keep_scores_and_svm(inst):
    check_all(inst)


@pytest.mark.parametrize("inst", PAPER, ids=lambda i: i.meta["figure"])
def test_paper_instance_twins(inst):
    names = [t.name for t in check_all(inst)]
    assert len(names) >= 3


def test_zipf_twins():
    check_all(zipf_instance(0, d=8, S=12, n=20, T=4))


# ---- (3) the flow on tiny instances ----------------------------------------------------------


def _flows_agree(inst) -> None:
    original = flow(inst)
    event(f"flow {original[0].status}")
    for twin in twins_of(inst):
        undecided = check_flow(inst, twin, original)
        if undecided:
            event(f"undecided on one side only: {undecided}")


@SMALL
@given(TINY_PROMPTS)
def test_prompt_flow_on_a_twin_selects_the_mapped_tokens_in_the_mapped_direction(inst):
    _flows_agree(inst)


@SMALL
@given(TINY_CROSS)
def test_cross_flow_on_a_twin_selects_the_mapped_tokens_in_the_mapped_direction(inst):
    _flows_agree(inst)


@SMALL
@given(TINY_EMBEDDINGS)
def test_embedding_flow_on_a_twin_selects_the_mapped_tokens_in_the_mapped_direction(inst):
    _flows_agree(inst)


# ---- the twins themselves --------------------------------------------------------------------


def _same(a, b) -> bool:
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, np.ndarray):
        return np.array_equal(a, b)
    return a == b


def _tensor_fields(inst) -> dict:
    return {
        f.name: getattr(inst, f.name)
        for f in dataclasses.fields(inst)
        if isinstance(getattr(inst, f.name), torch.Tensor | np.ndarray)
    }


@SMALL
@given(st.one_of(PROMPTS, CROSS, EMBEDDINGS))
def test_twins_are_deterministic_valid_and_not_the_original(inst):
    first, again = twins_of(inst), twins_of(inst)
    assert [t.name for t in first] == [t.name for t in again]
    for a, b in zip(first, again, strict=True):
        fa, fb = _tensor_fields(a.instance), _tensor_fields(b.instance)
        assert all(_same(fa[k], fb[k]) for k in fa), a.name
        twin = a.instance
        assert type(twin) is type(inst)
        assert twin.assumptions == inst.assumptions and twin.seed == inst.seed
        assert twin.meta["twin"] == a.name
        assert set(twin.meta) | set(a.dropped_meta) == set(inst.meta) | {"twin"}
        # the class's own validation: the constructor, and the JSON round trip
        rebuilt = type(inst).from_json(twin.to_json(extra=True))
        assert all(_same(v, _tensor_fields(rebuilt)[k]) for k, v in _tensor_fields(twin).items())
        # the twin is not its original
        orig = _tensor_fields(inst)
        assert not all(_same(orig[k], v) for k, v in _tensor_fields(twin).items()), a.name


def test_twins_of_depends_on_the_seed_and_rejects_unknown_types():
    inst = figure2_instance()
    other = dataclasses.replace(inst, seed=inst.seed + 1)
    a = permute_tokens(inst).instance.X
    assert torch.equal(a, permute_tokens(inst).instance.X)
    assert not torch.equal(a, permute_tokens(other).instance.X)
    assert set(TWINS) == {PromptInstance, CrossInstance, EmbeddingInstance}
    with pytest.raises(TypeError, match="no twins for"):
        twins_of(object())
    with pytest.raises(TypeError, match="expected a PromptInstance or CrossInstance"):
        permute_tokens(zipf_instance(0, d=4, S=5, n=4, T=2))


def test_sizes_that_cannot_differ_make_no_twin():
    one = dataclasses.replace(figure1_instance("a"), X=figure1_instance("a").X[:, :1], alpha=[0])
    names = [t.name for t in twins_of(one)]
    assert "permute-inputs" not in names and "permute-tokens" not in names


# ---- the assumptions' premises hold on the twins ---------------------------------------------


def _assert_premises(inst) -> None:
    if DECOUPLED in inst.assumptions:  # keys [k ; 0] and scores g, bit for bit
        k, g = inst.meta["k"], inst.meta["g"]
        dk = k.shape[-1]
        assert torch.equal(inst.scores, g) and torch.equal(inst.keys[..., :dk], k)
        assert not inst.keys[..., dk:].any()
        assert torch.equal(inst.v, torch.eye(inst.d, dtype=inst.v.dtype)[-1])
    if PRESCRIBED_SCORES in inst.assumptions:
        assert torch.equal(inst.scores, inst.meta["g"]) and inst.v[0] == 1
    if UNIQUE_OPT in inst.assumptions and "opt" in inst.meta:
        assert np.array_equal(inst.scores.argmax(1).numpy(), np.asarray(inst.meta["opt"]))
    if EQUAL_NONOPT_SCORES in inst.assumptions:
        s, opt = inst.scores, torch.as_tensor(inst.scores.argmax(1))
        others = s.clone()
        others[torch.arange(inst.n), opt] = torch.nan
        for row in others:
            assert len(set(row[~row.isnan()].tolist())) <= 1
    if isinstance(inst, EmbeddingInstance):
        c = _signed_counts(inst)
        if K_LEVEL in inst.assumptions:
            levels = [sorted({int(c[s]) for s in g}) for g in inst.groups]
            assert all(len(x) == 1 for x in levels)
            assert [x[0] for x in levels] == sorted({x[0] for x in levels})
        if SINGLE_RELEVANT_TOKEN in inst.assumptions:
            positive = set(inst.meta["positive_tokens"])
            for i, s in enumerate(inst.s_star.tolist()):
                assert (s in positive) == (inst.y[i] == 1)
                assert (c[s] > 0) == (s in positive)
        if "signed_counts" in inst.meta:
            assert all(c[s] == n for s, n in inst.meta["signed_counts"].items())


def _signed_counts(inst: EmbeddingInstance) -> np.ndarray:
    counts = np.zeros(inst.vocab_size, dtype=np.int64)
    for row, y in zip(inst.sequences.numpy(), inst.y.numpy().astype(np.int64), strict=True):
        np.add.at(counts, row, y)
    return counts


@SMALL
@given(st.one_of(PROMPTS, CROSS, EMBEDDINGS))
def test_twins_keep_the_premises_of_their_assumptions(inst):
    _assert_premises(inst)
    for twin in twins_of(inst):
        _assert_premises(twin.instance)


# ---- (4) controls: wrong twins fail the same checks ------------------------------------------


@SMALL
@given(global_opt_instances(n=st.integers(1, 3), T=st.integers(2, 4)))
def test_control_tokens_permuted_without_alpha_fail_the_svm_check(inst):
    twin = permute_tokens(inst)
    assume(not np.array_equal(twin.instance.alpha, inst.alpha))
    check_svm(inst, twin)
    wrong = dataclasses.replace(twin, instance=dataclasses.replace(twin.instance, alpha=inst.alpha))
    with pytest.raises(AssertionError, match="SVM"):
        check_svm(inst, wrong)


def _full_rotation(inst: PromptInstance, seed: int) -> Twin:
    """A rotation of every coordinate, v included (v ↦ Uv, W ↦ UWUᵀ): the same instance in
    exact arithmetic, claimed bit-exact as the rule-abiding twin would be."""
    q, _ = np.linalg.qr(np.random.default_rng(seed).standard_normal((inst.d, inst.d)))
    U = torch.as_tensor(q)
    twin = dataclasses.replace(inst, X=inst.X @ U.T, v=U @ inst.v, W=U @ inst.W @ U.T)
    return dataclasses.replace(rotate_embedding(inst), instance=twin, exact_scores=True)


def test_control_rotating_v_too_breaks_the_exact_ties():
    inst = figure2_instance()  # 6 tokens per input tie exactly at score 0.5
    wrong = _full_rotation(inst, 0)
    with pytest.raises(AssertionError, match="ties differ|bit for bit"):
        check_scores(inst, wrong)
    check_scores(inst, rotate_embedding(inst))


@SMALL
@given(equal_nonopt_instances(n=st.integers(2, 3), T=st.integers(3, 4)))
def test_control_rotating_the_tokens_but_not_v_fails_the_score_check(inst):
    q, _ = np.linalg.qr(np.random.default_rng(inst.seed).standard_normal((inst.d, inst.d)))
    twin = rotate_embedding(inst)
    wrong = dataclasses.replace(
        twin,
        instance=dataclasses.replace(inst, X=inst.X @ torch.as_tensor(q).T),
        exact_scores=False,
    )
    with pytest.raises(AssertionError):
        check_scores(inst, wrong)


@SMALL
@given(official_cross_instances(n=st.integers(1, 3), T=st.integers(2, 3), d=st.integers(2, 4)))
def test_control_cross_back_map_in_the_wrong_direction_fails_the_svm_check(inst):
    twin = rotate_embedding(inst)
    check_svm(inst, twin)
    d = inst.d
    back = np.stack([twin.param_back(e) for e in np.eye(d * d)], axis=1)  # W ↦ UᵀWV, (d², d²)
    forth = np.linalg.inv(back)  # W ↦ UWVᵀ: the map that made the twin, not its inverse
    x = svm(twin.instance).x
    assume(np.linalg.norm(forth @ x - back @ x) > 1e-3 * np.linalg.norm(x))
    wrong = dataclasses.replace(twin, param_back=lambda W: forth @ np.asarray(W).reshape(-1))
    with pytest.raises(AssertionError, match="SVM solutions"):
        check_svm(inst, wrong)


@SMALL
@given(general_frequency_instances(S=st.integers(3, 6), T=3, n=st.integers(4, 10), d=8))
def test_control_relabelling_ids_without_the_rows_of_E0_fails_the_score_check(inst):
    twin = relabel_tokens(inst)
    moved = twin.instance.sequences != inst.sequences
    assume(bool(moved.any()))
    wrong = dataclasses.replace(
        twin, instance=dataclasses.replace(twin.instance, E0=inst.E0), exact_scores=False
    )
    with pytest.raises(AssertionError):
        check_scores(inst, wrong)


def test_control_p_not_rotated_back_fails_the_flow_check():
    inst = dataclasses.replace(loss_comparison_instance(5.0), p0=None)
    twin = rotate_embedding(inst)
    check_flow(inst, twin)
    wrong = dataclasses.replace(twin, param_back=lambda p: p)
    with pytest.raises(AssertionError, match="directions"):
        check_flow(inst, wrong)


def test_control_flip_without_negating_p_fails_the_svm_check():
    inst = figure1_instance("a")
    twin = flip_labels_and_tokens(inst)
    check_svm(inst, twin)
    wrong = dataclasses.replace(twin, param_back=lambda p: p)
    with pytest.raises(AssertionError, match="SVM solutions"):
        check_svm(inst, wrong)
