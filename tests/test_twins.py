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

NTP instances (2403.08081) and the linear decoder (2402.18551): the loss, the per-sample losses
and the gradient of every twin at W', and the original's at W = param_back(W'), agree to 1e-12;
the SCC partitions map by the relabelling; the certified graph-SVM, W_fin and L* (the linear
decoder: entropy, compatibility, W*, the NTP-SVM and W^mm, dim F) map back; the meta (chains,
cycles, counts, twin tokens, repeated contexts) still describes the twin; E = I stays I.
Controls: ids relabelled without the embedding rows, a rotation mapped back the wrong way, an
orthonormal vocabulary relabelled without its coordinates, chains left in the old ids, contexts
permuted without their weights, a vocabulary mapped back the wrong way.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from hypothesis import assume, event, given, settings
from hypothesis import strategies as st

from models.flows.dynamics import converge
from models.ntp.attention import ntp_attention
from models.ntp.finite import finite_component
from models.ntp.graph import priority_graphs, scc_partition
from models.ntp.linear import linear_ntp
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
from strategies.instances import ORTHONORMAL_VOCAB, PRESCRIBED_SCORES
from strategies.ntp_attention import (
    c6_instance,
    chain_ntp_instances,
    graph_assumptions,
    i1_instance,
    i2_instance,
    log_odds_instances,
    official_ntp_instances,
    orthonormal_ntp_instances,
    partial_cycle_instances,
)
from strategies.ntp_instances import LinearNTPInstance, NTPInstance
from strategies.ntp_linear import (
    fig1_instance,
    fig1_instances,
    incompatible_instances,
    linear_instances,
    one_hot_instances,
    overparameterized_instances,
    twin_token_instances,
)
from strategies.twins import (
    TWINS,
    Twin,
    flip_labels_and_tokens,
    permute_contexts,
    permute_tokens,
    relabel_tokens,
    relabel_vocabulary,
    rotate_embedding,
    twins_of,
)
from theorems.ntp.common import solve_svm

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
    assert set(TWINS) == {
        PromptInstance,
        CrossInstance,
        EmbeddingInstance,
        NTPInstance,
        LinearNTPInstance,
    }
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


# ---- NTP instances (2403.08081) and the linear decoder (2402.18551) ---------------------------

#: The NTP loss, per-sample losses and gradient at W and the twin's at the mapped W: sums of a
#: few dozen O(‖W‖) terms in another order (the samples, the distinct tokens of a sample, the
#: coordinates): 1e-12 relative to max(1, |value|).
NTP_AGREEMENT = 1e-12
#: W_fin (Newton to gradient ≤ 1e-12 on each side) and W* (a least-squares solve), mapped back.
SOLVE_AGREEMENT = 1e-8

NTP_DRAWS = st.one_of(
    official_ntp_instances(graphs="any"),
    official_ntp_instances(n=st.integers(2, 8), T=st.integers(2, 5), K=6, d=st.integers(1, 6)),
    orthonormal_ntp_instances(n=st.integers(1, 6), T=st.integers(1, 4), K=st.integers(4, 6)),
    chain_ntp_instances(),
    chain_ntp_instances(d=st.integers(2, 8)),
    log_odds_instances(),
    partial_cycle_instances(),
)
NTP_PAPER = [i1_instance(), i2_instance(), c6_instance()]
LINEAR_DRAWS = st.one_of(
    linear_instances(),
    overparameterized_instances(extra=st.integers(0, 2)),
    fig1_instances(),
    one_hot_instances(),
    twin_token_instances(),
    incompatible_instances(),
)


def _ntp_graphs_in_twin_ids(inst, twin: Twin) -> dict:
    """The original's SCC partitions with every token id written as the twin's."""
    new = np.asarray(twin.vocab_back(np.arange(inst.num_tokens)))  # new[s]: s's id in the twin
    return {
        int(new[k]): frozenset(frozenset(int(new[t]) for t in c) for c in part)
        for k, part in scc_partition(inst.sequences, inst.labels, inst.num_tokens).items()
    }


def check_ntp_loss(inst, twin: Twin) -> None:
    """L, the per-sample losses and ∇L of the twin at W' equal the original's at W =
    param_back(W') (the gradient mapped back as W is: every map here is orthogonal)."""
    a, b = ntp_attention(inst.data), ntp_attention(twin.instance.data)
    rng = np.random.default_rng(inst.seed % 2**32)
    for scale in (0.1, 1.0, 10.0):
        W2 = rng.standard_normal((inst.dim, inst.dim))
        W2 *= scale / np.linalg.norm(W2)
        W = twin.param_back(W2)
        la, lb = a.loss(W), b.loss(W2)
        assert abs(la - lb) <= NTP_AGREEMENT * max(1.0, abs(la)), (twin.name, la, lb)
        sa = a.sample_losses(W)
        sb = np.asarray(twin.inputs_back(b.sample_losses(W2)))
        assert np.abs(sa - sb).max() <= NTP_AGREEMENT * max(1.0, np.abs(sa).max()), twin.name
        ga, gb = a.gradient(W), twin.param_back(b.gradient(W2))
        gap = np.linalg.norm(ga - gb)
        assert gap <= NTP_AGREEMENT * max(1.0, np.linalg.norm(ga)), (twin.name, "gradient", gap)


def check_ntp_theory(inst, twin: Twin) -> None:
    """The twin's SCC partitions are the original's relabelled; its certified graph-SVM and
    its W_fin (with the loss floor L*), mapped back, are the original's."""
    t = twin.instance
    ours = scc_partition(t.sequences, t.labels, t.num_tokens)
    assert ours == _ntp_graphs_in_twin_ids(inst, twin), f"{twin.name}: SCC partitions differ"
    a, b = solve_svm(inst.data), solve_svm(t.data)
    assert b.status == a.status, f"{twin.name}: graph-SVM {b.status}, original {a.status}"
    if a.status == "optimal":
        W = np.asarray(twin.param_back(b.W))
        rel = np.linalg.norm(W - a.W) / max(1.0, np.linalg.norm(a.W))
        assert rel <= SVM_AGREEMENT, f"{twin.name}: graph-SVMs {rel:.2e} apart"
    fa, fb = finite_component(inst.data), finite_component(t.data)
    if fa.converged and fb.converged:
        W = np.asarray(twin.param_back(fb.W))
        rel = np.linalg.norm(W - fa.W) / max(1.0, np.linalg.norm(fa.W))
        assert rel <= SOLVE_AGREEMENT, f"{twin.name}: W_fin {rel:.2e} apart"
        assert abs(fa.loss - fb.loss) <= NTP_AGREEMENT, f"{twin.name}: L* differs"


def _assert_ntp_meta(inst) -> None:
    """The meta of the NTP strategies says what the instance is, in its own ids."""
    graphs = priority_graphs(inst.sequences, inst.labels, inst.num_tokens)
    samples = list(zip(inst.sequences, inst.labels, strict=True))
    for k, chain in inst.meta.get("chains", {}).items():
        assert k in graphs, f"chain {chain}: no sample has query {k}"
        g = graphs[k]
        assert chain[-1] == k and all(
            g.has_priority(a, b) for a, b in zip(chain, chain[1:], strict=False)
        ), f"chain {chain} of query {k}"
    for k, cycles in inst.meta.get("cycles", {}).items():
        assert k in graphs, f"cycles {cycles}: no sample has query {k}"
        comps = set(graphs[k].components)
        assert all(frozenset(C) in comps for C in cycles), f"cycles {cycles} of query {k}"
    if "query" in inst.meta:
        k = inst.meta["query"]
        assert all(s[-1] == k for s, _ in samples)
        assert frozenset(inst.meta["cycle"]) in set(graphs[k].components)
    for k, counts in inst.meta.get("counts", {}).items():
        if isinstance(counts, dict):  # log-odds: {query: {label: count}}
            for a, n in counts.items():
                assert sum(s[-1] == k and y == a for s, y in samples) == n
        else:  # partial cycle: {label: count}
            assert sum(y == k for _, y in samples) == counts


def _assert_ntp_premises(inst) -> None:
    if ORTHONORMAL_VOCAB in inst.assumptions:
        assert np.array_equal(inst.embeddings, np.eye(inst.num_tokens)), "E = I lost"
    if inst.meta.get("generator") is not None:  # drawn: classified by graph_assumptions
        names = graph_assumptions(inst.embeddings, inst.sequences, inst.labels)
        assert names <= inst.assumptions, sorted(names - inst.assumptions)


def _ntp_check_all(inst) -> list[Twin]:
    twins = twins_of(inst)
    _assert_ntp_meta(inst)
    for twin in twins:
        check_ntp_loss(inst, twin)
        check_ntp_theory(inst, twin)
        _assert_ntp_meta(twin.instance)
        _assert_ntp_premises(twin.instance)
    return twins


@SMALL
@given(NTP_DRAWS)
def test_ntp_twins_keep_the_loss_graphs_svm_and_finite_part(inst):
    names = [t.name for t in _ntp_check_all(inst)]
    if np.array_equal(inst.embeddings, np.eye(inst.num_tokens)):  # E = I: a literal promise
        assert not {"rotate-embedding", "signed-permute-embedding"} & set(names)


@pytest.mark.parametrize("inst", NTP_PAPER, ids=lambda i: i.meta["id"])
def test_ntp_paper_instance_twins(inst):
    twins = _ntp_check_all(inst)
    assert {t.name for t in twins} >= {"permute-sequences", "relabel-tokens"}
    relabel = next(t for t in twins if t.name == "relabel-tokens")
    assert "id" in relabel.dropped_meta  # I1, I2, C6 are written in their own token ids


def _ntp_fields(inst) -> tuple:
    return inst.embeddings, inst.sequences, inst.labels


def _linear_fields(inst) -> tuple:
    return inst.H, inst.P, inst.pi


def _same_fields(a: tuple, b: tuple) -> bool:
    return all(
        np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y
        for x, y in zip(a, b, strict=True)
    )


@SMALL
@given(st.one_of(NTP_DRAWS, LINEAR_DRAWS))
def test_ntp_twins_are_deterministic_valid_and_not_the_original(inst):
    fields = _ntp_fields if isinstance(inst, NTPInstance) else _linear_fields
    first, again = twins_of(inst), twins_of(inst)
    assert [t.name for t in first] == [t.name for t in again]
    for a, b in zip(first, again, strict=True):
        assert _same_fields(fields(a.instance), fields(b.instance)), a.name
        twin = a.instance
        assert type(twin) is type(inst)
        assert twin.assumptions == inst.assumptions and twin.seed == inst.seed
        assert twin.meta["twin"] == a.name
        assert set(twin.meta) | set(a.dropped_meta) == set(inst.meta) | {"twin"}
        rebuilt = type(inst).from_json(twin.to_json(extra=True))
        assert _same_fields(fields(rebuilt), fields(twin))
        if a.name not in ("permute-sequences", "permute-contexts"):  # equal samples may swap
            assert not _same_fields(fields(twin), fields(inst)), a.name


def check_linear(inst, twin: Twin) -> None:
    """The twin's CE, excess loss and gradient at W' are the original's at param_back(W'), its
    entropy the original's; its compatibility, W*, NTP-SVM and W^mm, mapped back, the
    original's; dim F the same."""
    p, q = linear_ntp(inst.H, inst.P, inst.pi), linear_ntp(*_linear_fields(twin.instance))
    assert abs(p.entropy() - q.entropy()) <= NTP_AGREEMENT, f"{twin.name}: entropy"
    rng = np.random.default_rng(inst.seed % 2**32)
    for scale in (0.1, 1.0, 10.0):
        W2 = rng.standard_normal((inst.vocab, inst.dim))
        W2 *= scale / np.linalg.norm(W2)
        W = twin.param_back(W2)
        for what in ("loss", "excess_loss"):
            a, b = getattr(p, what)(W), getattr(q, what)(W2)
            assert abs(a - b) <= NTP_AGREEMENT * max(1.0, abs(a)), (twin.name, what, a, b)
        ga, gb = p.gradient(W), twin.param_back(q.gradient(W2))
        gap = np.linalg.norm(ga - gb)
        assert gap <= NTP_AGREEMENT * max(1.0, np.linalg.norm(ga)), (twin.name, "gradient", gap)
    assert q.dim_F == p.dim_F, f"{twin.name}: dim F {q.dim_F}, original {p.dim_F}"
    ca, cb = p.compatibility(), q.compatibility()
    assert cb.compatible == ca.compatible, f"{twin.name}: compatibility differs"
    if ca.compatible:
        rel = np.linalg.norm(twin.param_back(cb.W_star) - ca.W_star)
        rel /= max(1.0, np.linalg.norm(ca.W_star))
        assert rel <= SOLVE_AGREEMENT, f"{twin.name}: W* {rel:.2e} apart"
    sa, sb = p.ntp_svm(), q.ntp_svm()
    assert sb.status == sa.status, f"{twin.name}: NTP-SVM {sb.status}, original {sa.status}"
    if sa.ok:
        rel = np.linalg.norm(twin.param_back(sb.W) - sa.W) / max(1.0, np.linalg.norm(sa.W))
        assert rel <= SVM_AGREEMENT, f"{twin.name}: W^mm {rel:.2e} apart"


def _assert_linear_meta(inst) -> None:
    support = inst.problem.support
    if "twins" in inst.meta:  # two tokens with the same support pattern
        a, b = inst.meta["twins"]
        assert np.array_equal(support[:, a], support[:, b]), f"twin tokens {a}, {b}"
    if "repeat" in inst.meta:  # a context repeated, on the same support
        i, j = inst.meta["repeat"]
        assert np.array_equal(inst.H[:, i], inst.H[:, j]), f"repeated contexts {i}, {j}"
        assert np.array_equal(support[i], support[j])


@SMALL
@given(LINEAR_DRAWS)
def test_linear_ntp_twins_keep_the_loss_and_the_oracles(inst):
    _assert_linear_meta(inst)
    names = []
    for twin in twins_of(inst):
        check_linear(inst, twin)
        _assert_linear_meta(twin.instance)
        names.append(twin.name)
    assert {"relabel-vocabulary", "rotate-embedding", "signed-permute-embedding"} <= set(names)


def test_linear_ntp_twins_of_the_fig1_instance():
    inst = fig1_instance(0, d=3)
    assert [t.name for t in twins_of(inst)] == [
        "permute-contexts",
        "relabel-vocabulary",
        "rotate-embedding",
        "signed-permute-embedding",
    ]
    for twin in twins_of(inst):
        check_linear(inst, twin)


# ---- NTP controls: wrong twins fail the same checks -------------------------------------------


def test_control_ntp_ids_relabelled_without_the_embedding_rows_fails_the_loss_check():
    inst = i2_instance()
    twin = relabel_tokens(inst)
    check_ntp_loss(inst, twin)
    wrong = dataclasses.replace(
        twin, instance=dataclasses.replace(twin.instance, embeddings=inst.embeddings)
    )
    with pytest.raises(AssertionError):
        check_ntp_loss(inst, wrong)


def test_control_ntp_rotation_mapped_back_the_wrong_way_fails_the_loss_and_svm_checks():
    inst = i2_instance()
    twin = rotate_embedding(inst)
    check_ntp_theory(inst, twin)
    back = np.stack([np.ravel(twin.param_back(e.reshape(6, 6))) for e in np.eye(36)], axis=1)
    forth = np.linalg.inv(back)  # W ↦ MWMᵀ: the map that made the twin, not its inverse
    wrong = dataclasses.replace(twin, param_back=lambda W: (forth @ np.ravel(W)).reshape(6, 6))
    with pytest.raises(AssertionError):
        check_ntp_loss(inst, wrong)
    with pytest.raises(AssertionError, match="graph-SVMs"):
        check_ntp_theory(inst, wrong)


def test_control_ntp_orthonormal_relabelling_without_the_coordinates_breaks_e_equals_i():
    inst = c6_instance()
    twin = relabel_tokens(inst)
    _assert_ntp_premises(twin.instance)
    E = np.empty_like(inst.embeddings)
    E[np.asarray(twin.vocab_back(np.arange(4)))] = inst.embeddings  # rows moved, axes kept
    wrong = dataclasses.replace(twin.instance, embeddings=E)
    with pytest.raises(AssertionError, match="E = I"):
        _assert_ntp_premises(wrong)


@SMALL
@given(chain_ntp_instances())
def test_control_ntp_chains_not_relabelled_fail_the_meta_check(inst):
    twin = relabel_tokens(inst)
    _assert_ntp_meta(twin.instance)
    stale = dataclasses.replace(twin.instance, meta={**twin.instance.meta, **inst.meta})
    assume(stale.meta["chains"] != twin.instance.meta["chains"])
    with pytest.raises(AssertionError, match="chain"):
        _assert_ntp_meta(stale)


@SMALL
@given(overparameterized_instances(extra=st.integers(0, 2)))
def test_control_linear_contexts_permuted_without_pi_fail_the_loss_check(inst):
    twin = permute_contexts(inst)
    assume(not np.array_equal(twin.instance.pi, inst.pi))
    wrong = dataclasses.replace(twin, instance=dataclasses.replace(twin.instance, pi=inst.pi))
    with pytest.raises(AssertionError):
        check_linear(inst, wrong)


def test_control_linear_vocabulary_mapped_back_the_wrong_way_fails_the_loss_check():
    inst = fig1_instance(3, d=3)
    twin = relabel_vocabulary(inst)
    forth = np.asarray(twin.vocab_back(np.arange(inst.vocab)))  # π: new id of each token
    assert not np.array_equal(forth[forth], np.arange(inst.vocab))  # π is not an involution
    wrong = dataclasses.replace(twin, param_back=lambda W: np.asarray(W)[np.argsort(forth)])
    with pytest.raises(AssertionError):
        check_linear(inst, wrong)
