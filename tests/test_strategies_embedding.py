"""Meta-tests: each embedding strategy (2505.17282) meets the assumptions it promises.

Signed frequencies are checked through the integer sums c_s = Σ_i y_i n_s(X_i) = nT·α_s, so
"α_s = 0 exactly" and "equal within a group" are exact statements, free of float rounding.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from strategies import (
    DIM_EXCEEDS_VOCAB,
    GAUSSIAN_EMBEDDINGS,
    GENERAL_FREQUENCIES,
    K_LEVEL,
    SINGLE_RELEVANT_TOKEN,
    TWO_RELEVANT_TOKENS,
    UNIT_HEAD,
    ZIPF_CORPUS,
    EmbeddingInstance,
    general_frequency_instances,
    k_level_instances,
    rung_single_relevant_token_instances,
    single_relevant_token_instances,
    two_relevant_instances,
    zipf_corpus,
    zipf_instance,
)
from strategies.ladder import RUNGS

DTYPE = torch.float64
FAST = settings(max_examples=25, deadline=None)


def signed_counts(inst: EmbeddingInstance) -> np.ndarray:
    """c_s = Σ_i y_i n_s(X_i) (integers): nT times the average signed frequency α_s."""
    seqs = inst.sequences.numpy()
    counts = np.zeros((inst.n, inst.vocab_size), dtype=np.int64)
    np.add.at(counts, (np.repeat(np.arange(inst.n), inst.T), seqs.ravel()), 1)
    return (inst.y.numpy().astype(np.int64)[:, None] * counts).sum(0)


def _assert_common(inst: EmbeddingInstance) -> None:
    assert inst.sequences.dtype == torch.int64
    assert int(inst.sequences.min()) >= 0 and int(inst.sequences.max()) < inst.vocab_size
    assert set(inst.y.tolist()) <= {-1.0, 1.0}
    assert tuple(inst.E0.shape) == (inst.vocab_size, inst.d) and inst.v.shape == (inst.d,)
    assert (DIM_EXCEEDS_VOCAB in inst.assumptions) == (inst.vocab_size <= inst.d - 1)
    if UNIT_HEAD in inst.assumptions:
        assert abs(float(torch.linalg.vector_norm(inst.v)) - 1.0) < 1e-12
    if GAUSSIAN_EMBEDDINGS in inst.assumptions and inst.E0.numel() >= 2000:
        # entries of variance 1/d: a loose sanity band, far from any sampling fluctuation
        assert 0.5 < float(inst.E0.var()) * inst.d < 1.5


# ---- G1 --------------------------------------------------------------------------------------


@FAST
@given(single_relevant_token_instances())
def test_g1_single_relevant_token(inst):
    _assert_common(inst)
    assert {SINGLE_RELEVANT_TOKEN, DIM_EXCEEDS_VOCAB, UNIT_HEAD} <= inst.assumptions
    assert inst.vocab_size <= inst.d - 1
    relevant = sorted(inst.relevant)
    seqs, y = inst.sequences.numpy(), inst.y.numpy()
    positive = set(inst.meta["positive_tokens"])
    for i in range(inst.n):
        present = np.isin(seqs[i], relevant)
        assert present.sum() == 1  # exactly one relevant token, occurring once
        assert seqs[i][present][0] == int(inst.s_star[i])
        assert (int(inst.s_star[i]) in positive) == (y[i] == 1)
    for s in relevant:  # completely positive / negative: only one label ever contains s
        labels = set(y[(seqs == s).any(axis=1)].tolist())
        assert labels == ({1.0} if s in positive else {-1.0})
    c = signed_counts(inst)
    irrelevant = [s for s in range(inst.vocab_size) if s not in inst.relevant]
    assert np.all(c[irrelevant] == 0)  # α_s = 0 exactly
    assert np.all(np.sign(c[relevant]) == [1 if s in positive else -1 for s in relevant])
    assert inst.n == 2 * (inst.n // 2) and (y == 1).sum() == (y == -1).sum()


@FAST
@given(single_relevant_token_instances(n_pairs=st.integers(3, 8), n_irr=20, d=st.integers(4, 16)))
def test_g1_dimension_override_builds_controls(inst):
    _assert_common(inst)
    assert inst.vocab_size > inst.d - 1
    assert DIM_EXCEEDS_VOCAB not in inst.assumptions
    assert SINGLE_RELEVANT_TOKEN in inst.assumptions


@FAST
@given(rung=st.sampled_from(["small", "medium", "large"]), data=st.data())
def test_g1_on_a_rung_stays_in_its_box_and_keeps_assumption_1(rung, data):
    """The medium-rung claims' data (EMB-FLOW-*-MEDIUM): G1 with sizes in the rung's box and
    |S| ≤ d − 1, so the theorem's hypotheses other than the one-step precondition hold."""
    inst = data.draw(rung_single_relevant_token_instances(rung))
    _assert_common(inst)
    assert RUNGS[rung].contains(inst.n, inst.sequences.shape[1], inst.d)
    assert {SINGLE_RELEVANT_TOKEN, DIM_EXCEEDS_VOCAB, UNIT_HEAD} <= inst.assumptions
    assert inst.vocab_size <= inst.d - 1
    seqs = inst.sequences.numpy()
    for i in range(inst.n):
        assert np.isin(seqs[i], sorted(inst.relevant)).sum() == 1
        assert seqs[i][np.isin(seqs[i], sorted(inst.relevant))][0] == int(inst.s_star[i])


# ---- G2 --------------------------------------------------------------------------------------


@FAST
@given(general_frequency_instances())
def test_g2_labels_and_token_ids(inst):
    _assert_common(inst)
    assert {GENERAL_FREQUENCIES, GAUSSIAN_EMBEDDINGS, UNIT_HEAD} <= inst.assumptions
    assert inst.meta["b"].shape == (inst.vocab_size,)
    assert 5 <= inst.vocab_size <= 40 and 10 <= inst.n <= 300


@FAST
@given(general_frequency_instances(S=st.integers(20, 40), d=None))
def test_g2_default_dimension_exceeds_vocabulary(inst):
    assert inst.d >= inst.vocab_size + 1 and DIM_EXCEEDS_VOCAB in inst.assumptions


# ---- K-level ---------------------------------------------------------------------------------


@FAST
@given(k_level_instances())
def test_k_level_groups_have_k_ordered_levels(inst):
    _assert_common(inst)
    assert K_LEVEL in inst.assumptions
    groups, K = inst.groups, inst.meta["K"]
    assert len(groups) == K
    assert sorted(s for g in groups for s in g) == list(range(inst.vocab_size))  # a partition
    c = signed_counts(inst)
    levels = []
    for group in groups:
        values = set(c[list(group)].tolist())
        assert len(values) == 1  # one exact level per group
        levels.append(values.pop())
    assert all(a < b for a, b in zip(levels, levels[1:], strict=False))  # strictly increasing
    assert levels == [inst.T * j for j in inst.meta["level_counts"]]
    n = inst.n
    assert inst.meta["levels"] == tuple(j / n for j in inst.meta["level_counts"])
    assert (inst.y == 1).any() and (inst.y == -1).any()


@FAST
@given(k_level_instances(K=3, levels=[-2, 0, 5], group_size=2, T=4))
def test_k_level_accepts_designed_levels(inst):
    assert inst.meta["level_counts"] == (-2, 0, 5)
    c = signed_counts(inst)
    assert [int(c[g[0]]) for g in inst.groups] == [-8, 0, 20]


# ---- two relevant tokens (N6) ----------------------------------------------------------------


@FAST
@given(two_relevant_instances())
def test_two_relevant_tokens(inst):
    assert GAUSSIAN_EMBEDDINGS in inst.assumptions and "weak_boost" not in inst.meta
    _check_two_relevant(inst)


@FAST
@given(two_relevant_instances(weak_boost=st.floats(0.5, 2.0)))
def test_two_relevant_tokens_with_a_weak_boost(inst):
    """The boost moves E⁰ only: the data keep every guarantee; E⁰ is no longer Gaussian."""
    assert GAUSSIAN_EMBEDDINGS not in inst.assumptions
    assert 0.5 <= inst.meta["weak_boost"] <= 2.0
    _check_two_relevant(inst)


@settings(max_examples=5, deadline=None)
@given(
    two_relevant_instances(
        n_pairs=12, T=3, weak_fraction=1 / 3, d=4096, eta0=50.0, weak_boost=st.floats(3.0, 4.0)
    )
)
def test_a_large_weak_boost_makes_the_weak_token_the_one_step_argmax(inst):
    """b ≥ 3 leaves the weak token 2λ ≈ 2.8 ahead, far beyond the one-step noise at d = 4096."""
    from models.problems.embedding import EmbeddingProblem, one_step, selected_tokens

    problem = EmbeddingProblem(inst.sequences, inst.y, inst.E0, inst.v)
    E1 = one_step(problem, inst.eta0).E1
    sel = selected_tokens(E1, inst.sequences, inst.y, inst.v)
    weak = torch.where(inst.y > 0, inst.meta["weak"][0], inst.meta["weak"][1])
    assert sel.all_unique and torch.equal(sel.tokens, weak)


def _check_two_relevant(inst):
    _assert_common(inst)
    assert TWO_RELEVANT_TOKENS in inst.assumptions and SINGLE_RELEVANT_TOKEN not in inst.assumptions
    c = signed_counts(inst)
    seqs, y = inst.sequences.numpy(), inst.y.numpy().astype(np.int64)
    assert {s: int(c[s]) for s in inst.meta["signed_counts"]} == inst.meta["signed_counts"]
    assert np.all(c[4:] == 0)  # irrelevant tokens: α_s = 0 exactly
    w_pos, w_neg = inst.meta["weak"]
    assert c[w_pos] > 0 and c[w_neg] < 0
    # the weak tokens also occur in opposite-label sequences (Assumption 1 fails)
    assert (seqs[y == -1] == w_pos).any() and (seqs[y == 1] == w_neg).any()
    for i in range(inst.n):
        star = int(inst.s_star[i])
        others = [s for s in set(seqs[i].tolist()) if s != star]
        assert y[i] * c[star] > max(y[i] * c[s] for s in others)  # unique argmax of y α_s
        assert (seqs[i] == star).sum() == 1


# ---- G3 --------------------------------------------------------------------------------------


def test_zipf_corpus_is_deterministic_and_well_formed():
    seqs, y = zipf_corpus(0)
    assert tuple(seqs.shape) == (2000, 30) and seqs.dtype == torch.int64
    assert int(seqs.min()) >= 0 and int(seqs.max()) < 300
    assert set(y.tolist()) == {-1.0, 1.0}
    again, y2 = zipf_corpus(0)
    assert torch.equal(again, seqs) and torch.equal(y2, y)
    assert not torch.equal(zipf_corpus(1)[0], seqs)
    # Zipf: token 0 is the most frequent, far above the median token
    counts = torch.bincount(seqs.ravel(), minlength=300)
    assert int(counts.argmax()) < 3 and counts[0] > 20 * counts.median()


def test_zipf_instance_biases():
    inst = zipf_instance(3, S=100, n=300, T=10)
    b = inst.meta["b"]
    assert float(b.abs().max()) <= 0.98
    assert float(b[:20].abs().max()) <= 0.098 + 1e-15  # shrunk stopwords
    assert inst.assumptions == {ZIPF_CORPUS, GAUSSIAN_EMBEDDINGS}
    assert (inst.vocab_size, inst.d, inst.n, inst.T) == (100, 32, 300, 10)
    assert torch.equal(inst.sequences, zipf_corpus(3, S=100, n=300, T=10)[0])
    # posterior bias shows in the data: the most positively biased frequent token leans positive
    s = int(torch.argmax(torch.where(torch.arange(100) < 40, b, torch.zeros(100))))
    c = signed_counts(inst)
    assert c[s] > 0
    with pytest.raises(ValueError, match="corpus"):
        zipf_instance(0, vocabulary=3)


# ---- serialization and bad input ------------------------------------------------------------


@FAST
@given(
    st.one_of(
        single_relevant_token_instances(n_pairs=st.integers(1, 5), n_irr=5, d=8),
        general_frequency_instances(S=6, n=st.integers(1, 8), d=8),
        k_level_instances(K=2, group_size=1, T=3, d=8),
        two_relevant_instances(n_pairs=3, n_irr=3, d=8),
    )
)
def test_json_round_trip(inst):
    data = json.loads(json.dumps(inst.to_json()))
    assert set(data) == {"model", "sequences", "y", "E0", "v", "eta0"}
    back = EmbeddingInstance.from_json(data)
    for name in ("sequences", "y", "E0", "v"):
        assert torch.equal(getattr(back, name), getattr(inst, name))
    assert back.eta0 == inst.eta0
    full = EmbeddingInstance.from_json(json.loads(json.dumps(inst.to_json(extra=True))))
    assert full.assumptions == inst.assumptions and full.seed == inst.seed
    assert full.relevant == inst.relevant and full.groups == inst.groups
    if inst.s_star is None:
        assert full.s_star is None
    else:
        assert torch.equal(full.s_star, inst.s_star)


@settings(max_examples=10, deadline=None)
@given(
    st.one_of(
        single_relevant_token_instances(n_pairs=st.integers(1, 5), n_irr=5, d=8),
        general_frequency_instances(S=6, n=st.integers(1, 8), d=8),
    )
)
def test_json_is_accepted_by_the_check_cli(inst):
    load_instance = getattr(pytest.importorskip("theorems.framework.cli"), "load_instance", None)
    if load_instance is None:
        pytest.skip("theorems.framework.cli has no load_instance")
    model, data = load_instance(json.loads(json.dumps(inst.to_json())))
    assert model == "embedding"
    assert torch.equal(torch.as_tensor(data["sequences"]), inst.sequences)


def _valid():
    return {
        "sequences": torch.tensor([[0, 1, 2], [2, 1, 0]]),
        "y": torch.tensor([1.0, -1.0]),
        "E0": torch.zeros(3, 4),
        "v": torch.ones(4) / 2,
        "eta0": 1.0,
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("sequences", torch.tensor([[0, 1, 3], [2, 1, 0]])),
        ("sequences", torch.tensor([0, 1, 2])),
        ("sequences", torch.tensor([[0.5, 1.0, 2.0], [2.0, 1.0, 0.0]])),
        ("y", torch.tensor([1.0, 0.0])),
        ("y", [1.0]),
        ("E0", torch.zeros(3)),
        ("E0", torch.full((3, 4), float("inf"))),
        ("v", torch.zeros(3)),
        ("eta0", float("nan")),
        ("eta0", 0.0),
        ("eta0", "big"),
        ("s_star", [0, 1, 2]),
        ("s_star", [0, 5]),
        ("relevant", {7}),
        ("groups", [[0, 1], [1, 2]]),
        ("assumptions", ["k_level", "nope"]),
    ],
)
def test_invalid_embedding_instance_names_the_field(field, value):
    kwargs = _valid() | {field: value}
    with pytest.raises(ValueError, match=f"^{field}"):
        EmbeddingInstance(**kwargs)


def test_s_star_must_occur_in_its_sequence():
    with pytest.raises(ValueError, match="^s_star"):
        EmbeddingInstance(
            **(_valid() | {"sequences": torch.tensor([[0, 0, 1], [2, 1, 0]])}), s_star=[2, 2]
        )


def test_embedding_from_json_rejects_malformed_files():
    good = EmbeddingInstance(**_valid()).to_json()
    with pytest.raises(ValueError, match="^model"):
        EmbeddingInstance.from_json(good | {"model": "prompt"})
    with pytest.raises(ValueError, match="^eta0"):
        EmbeddingInstance.from_json({k: v for k, v in good.items() if k != "eta0"})
    with pytest.raises(ValueError, match="^y"):
        EmbeddingInstance.from_json(good | {"y": [1, 1, 1]})


# ---- health checks ---------------------------------------------------------------------------

EMBEDDING_STRATEGIES = {
    "g1": lambda: single_relevant_token_instances(),
    "g1_small_d": lambda: single_relevant_token_instances(d=st.integers(2, 8)),
    "g2": lambda: general_frequency_instances(),
    "k_level": lambda: k_level_instances(),
    "two_relevant": lambda: two_relevant_instances(),
}


@pytest.mark.parametrize("name", sorted(EMBEDDING_STRATEGIES))
def test_no_health_check_failures(name):
    """Default settings (all health checks on); raises FailedHealthCheck on a problem."""
    seen = []

    @settings(settings.get_profile("default"), max_examples=10, database=None, deadline=None)
    @given(EMBEDDING_STRATEGIES[name]())
    def run(inst):
        seen.append(inst)

    run()
    assert seen
