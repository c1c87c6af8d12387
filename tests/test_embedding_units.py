"""models.problems.embedding and models.problems.nonlinear_head function by function, on instances
small enough to be worked by hand: every returned field, every branch, every documented constant and
message.

The references are independent of the code under test: hand-computed values (closed forms of
spec/embeddings.md §1.1–§3.3 on 2–3 tokens), exact rationals (``fractions.Fraction``) for the
exact pair tables and Lemma A.2's q, autograd for derivatives, Adam's first step (lr·sign(g))
for the training loop, and the SVM-eq objects of a two-dimensional case solved on paper.

Nothing here reads a cache another test filled: the exact pair tables are read from a fresh
``_PAIR_TABLES`` (monkeypatched) in every test that reaches them. The broader properties (R1–R3
on random draws, the loaders' layouts, NGD against the notebook) are in tests/test_embedding.py,
tests/test_embedding_models.py and tests/test_nonlinear_head.py."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from models.problems import embedding as emb
from models.problems import nonlinear_head as nh
from models.problems.embedding import (
    PAD_ID,
    UNK_ID,
    EmbeddingProblem,
    ExactDirection,
    OneLayerModel,
    Slope,
    TwoLayerModel,
)
from models.problems.nonlinear_head import NonlinearHeadProblem

F64 = torch.float64


@pytest.fixture(autouse=True)
def _fresh_pair_tables(monkeypatch):
    """Every test starts from an empty table cache of its own (never one another test filled)."""
    monkeypatch.setattr(emb, "_PAIR_TABLES", {})


def _t(rows) -> torch.Tensor:
    return torch.tensor(rows, dtype=F64)


# =============================================================================================
# models.problems.embedding: input checks
# =============================================================================================


@pytest.mark.parametrize(
    "sequences, message",
    [
        ([[0.0, 1.0]], "sequences: expected integer token ids, got dtype torch.float64"),
        (
            torch.tensor([[True, False]]),
            "sequences: expected integer token ids, got dtype torch.bool",
        ),
        (
            torch.tensor([[1 + 0j]], dtype=torch.complex64),
            "sequences: expected integer token ids, got dtype torch.complex64",
        ),
        ([0, 1, 2], r"sequences: expected a non-empty \(n, T\) array, got \(3,\)"),
        (torch.zeros(0, 3, dtype=torch.int64), r"non-empty \(n, T\) array, got \(0, 3\)"),
        (torch.zeros(2, 0, dtype=torch.int64), r"non-empty \(n, T\) array, got \(2, 0\)"),
        ([[0, 4]], r"sequences: token ids must lie in \[0, 4\), got \[0, 4\]"),
        ([[-1, 3]], r"sequences: token ids must lie in \[0, 4\), got \[-1, 3\]"),
    ],
)
def test_check_sequences_refuses_each_bad_input_with_its_own_message(sequences, message):
    with pytest.raises(ValueError, match=message):
        emb.check_sequences(sequences, 4)


def test_check_sequences_accepts_the_whole_id_range_and_returns_int64():
    out = emb.check_sequences(np.array([[0, 3], [3, 0]], dtype=np.int16), 4)
    assert out.dtype == torch.int64 and out.tolist() == [[0, 3], [3, 0]]
    # without a vocabulary size every integer id passes
    assert emb.check_sequences([[-5, 100]]).tolist() == [[-5, 100]]


def test_check_labels_and_check_head_name_the_field_and_the_sizes():
    with pytest.raises(ValueError, match=r"^y: expected 3 labels, got 2$"):
        emb.check_labels([1.0, -1.0], 3)
    with pytest.raises(ValueError, match=r"^y: labels must be ±1$"):
        emb.check_labels([1.0, 0.5], 2)
    with pytest.raises(ValueError, match=r"^y: expected 1 dimensions, got shape \(2, 1\)$"):
        emb.check_labels([[1.0], [-1.0]], 2)
    with pytest.raises(ValueError, match=r"^y: contains NaN or infinity$"):
        emb.check_labels([1.0, math.nan], 2)
    y = emb.check_labels([1, -1], 2)
    assert y.dtype == F64 and y.tolist() == [1.0, -1.0]
    with pytest.raises(ValueError, match=r"^v: expected dimension 3 \(columns of E\), got 2$"):
        emb.check_head(torch.ones(2, 3), [1.0, 0.0])
    E, v = emb.check_head([[1, 2]], [3, 4])
    assert E.dtype == F64 and v.dtype == F64 and v.tolist() == [3.0, 4.0]
    for E, v, message in (
        ([1.0, 2.0], [1.0, 2.0], r"^E: expected 2 dimensions, got shape \(2,\)$"),
        ([[math.nan, 2.0]], [1.0, 2.0], r"^E: contains NaN or infinity$"),
        ([[1.0, 2.0]], [[1.0, 2.0]], r"^v: expected 1 dimensions, got shape \(1, 2\)$"),
        ([[1.0, 2.0]], [1.0, -math.inf], r"^v: contains NaN or infinity$"),
    ):
        with pytest.raises(ValueError, match=message):
            emb.check_head(E, v)


def test_check_selection_checks_the_shape_and_the_id_range_at_both_ends():
    assert emb.check_selection([0, 2], 2, 3).tolist() == [0, 2]
    assert emb.check_selection([7, -1], 2).dtype == torch.int64  # no vocabulary: no range
    assert emb.check_selection([0.0, 2.0], 2, 3).dtype == torch.int64
    with pytest.raises(ValueError, match=r"^s_star: expected shape \(2,\), got \(3,\)$"):
        emb.check_selection([0, 1, 2], 2, 3)
    for bad in ([0, 3], [-1, 0]):
        with pytest.raises(ValueError, match=r"^s_star: token ids must lie in \[0, 3\)$"):
            emb.check_selection(bad, 2, 3)


# =============================================================================================
# counts, centred scores, read-out
# =============================================================================================


def test_token_counts_are_float64_whatever_the_default_dtype():
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        counts = emb.token_counts([[2, 2, 0]], 4)
    finally:
        torch.set_default_dtype(before)
    assert counts.dtype == F64 and counts.tolist() == [[1.0, 0.0, 2.0, 0.0]]
    with pytest.raises(ValueError, match=r"^sequences: token ids must lie in \[0, 4\)"):
        emb.token_counts([[0, 4]], 4)


def test_scatter_to_tokens_sums_per_token_in_the_values_dtype_and_device():
    seq = torch.tensor([[0, 2], [2, 2]])
    values = torch.tensor([[1.0, 2.0], [3.0, 4.0]], dtype=torch.float32)
    out = emb._scatter_to_tokens(seq, values, 4)
    assert out.dtype == torch.float32 and out.tolist() == [1.0, 0.0, 9.0, 0.0]
    # the sums live where the values do (the meta device stands in for an accelerator)
    meta = emb._scatter_to_tokens(seq.to("meta"), values.to("meta"), 4)
    assert meta.device.type == "meta" and meta.shape == (4,)


def test_centred_scores_are_each_score_minus_the_weighted_mean():
    weights = _t([[0.25, 0.25, 0.5], [1.0, 0.0, 0.0]])
    scores = _t([[1.0, 2.0, 4.0], [5.0, 6.0, 7.0]])
    # means 2.75 and 5
    expected = _t([[-1.75, -0.75, 1.25], [0.0, 1.0, 2.0]])
    assert torch.equal(emb.centred_scores(weights, scores), expected)


def test_cls_readout_is_the_attention_weighted_head_score():
    H = _t([[[1.0, 0.0], [0.0, 1.0]]])
    p = _t([math.log(3.0), 0.0])  # weights 3/4, 1/4
    v = _t([2.0, -4.0])  # scores 2, −4
    out = emb.cls_readout(H, p, v)
    assert out.shape == (1,) and float(out) == pytest.approx(0.75 * 2 - 0.25 * 4, abs=1e-15)


# =============================================================================================
# EmbeddingProblem
# =============================================================================================

# Three tokens in d = 2, u = E v = (2, −1, 1); two sequences of length 2 with labels ±1.
HAND_E = [[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]]
HAND_V = [2.0, -1.0]
HAND_SEQ = [[0, 1], [2, 2]]
HAND_Y = [1.0, -1.0]


def _hand_problem() -> EmbeddingProblem:
    return EmbeddingProblem(HAND_SEQ, HAND_Y, HAND_E, HAND_V)


def test_problem_stores_every_field_as_a_checked_tensor():
    problem = EmbeddingProblem(
        np.array(HAND_SEQ, dtype=np.int32), [1, -1], np.array(HAND_E, dtype=np.float32), HAND_V
    )
    assert problem.sequences.dtype == torch.int64
    for name in ("y", "E", "v"):
        assert getattr(problem, name).dtype == F64, name
    assert problem.v.tolist() == HAND_V and problem.y.tolist() == HAND_Y
    assert (problem.n, problem.T, problem.vocab_size, problem.dim) == (2, 2, 3, 2)
    assert problem.device == torch.device("cpu")
    assert problem.to("cpu") is problem


def test_problem_to_a_device_rebuilds_an_equal_problem_from_the_moved_tensors():
    """On "cpu:0" torch's .to copies every tensor: the result is a new, equal problem made of
    the copies (not self)."""
    problem = _hand_problem()
    moved = problem.to("cpu:0")
    assert moved is not problem and isinstance(moved, EmbeddingProblem)
    for name in ("sequences", "y", "E", "v"):
        old, new = getattr(problem, name), getattr(moved, name)
        assert torch.equal(new, old) and new.dtype == old.dtype, name
        assert new.data_ptr() != old.data_ptr(), name


def test_problem_token_scores_prompt_problem_forward_and_loss_by_hand():
    problem = _hand_problem()
    assert problem.token_scores().tolist() == [2.0, -1.0, 1.0]
    assert problem.token_scores(2 * problem.E).tolist() == [4.0, -2.0, 2.0]
    prompt = problem.prompt_problem()
    assert prompt.loss.name == "logistic"
    assert torch.equal(prompt.keys, _t([[[1.0, 0.0], [0.0, 1.0]], [[1.0, 1.0], [1.0, 1.0]]]))
    assert prompt.scores.tolist() == [[2.0, -1.0], [-1.0, -1.0]]  # y_i · u_{x_it}
    # p = (log 2, 0): sequence 0 weights (2/3, 1/3), f = 1; sequence 1 has one token twice, f = 1
    p = _t([math.log(2.0), 0.0])
    torch.testing.assert_close(problem.forward(p), _t([1.0, 1.0]), rtol=0, atol=1e-15)
    # with 3E: u = (6, −3, 3), weights (8/9, 1/9) in sequence 0
    torch.testing.assert_close(
        problem.forward(p, 3 * problem.E), _t([6 * 8 / 9 - 3 / 9, 3.0]), rtol=0, atol=1e-14
    )
    loss = (math.log1p(math.exp(-1.0)) + math.log1p(math.exp(1.0))) / 2
    assert float(problem.loss_value(problem.E, p)) == pytest.approx(loss, rel=1e-15)
    assert float(problem.prompt_problem(problem.E).loss_value(p)) == pytest.approx(loss, rel=1e-15)


def test_with_embeddings_keeps_data_and_head_and_checks_the_new_embeddings():
    problem = _hand_problem()
    other = problem.with_embeddings([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    assert other.E.dtype == F64 and other.E.tolist() == [[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]
    assert other.sequences is problem.sequences and other.v is problem.v
    with pytest.raises(ValueError, match="^sequences:"):
        problem.with_embeddings(torch.ones(2, 2))  # token 2 no longer exists


def test_grad_e_is_the_autograd_gradient_at_a_nonzero_p():
    problem = _hand_problem()
    p = _t([0.3, -0.7])
    E = problem.E.clone().requires_grad_(True)
    (auto,) = torch.autograd.grad(problem.loss_value(E, p), E)
    torch.testing.assert_close(problem.grad_E(p), auto, rtol=1e-13, atol=1e-16)
    torch.testing.assert_close(problem.grad_E([0.3, -0.7]), auto, rtol=1e-13, atol=1e-16)
    with pytest.raises(ValueError, match=r"^p: expected 1 dimensions, got shape \(1, 2\)$"):
        problem.grad_E([[0.3, -0.7]])
    with pytest.raises(ValueError, match=r"^p: contains NaN or infinity$"):
        problem.grad_E([0.3, math.nan])


# =============================================================================================
# the protocol's instances
# =============================================================================================


def test_gaussian_init_draws_e0_then_v_with_variance_one_over_d():
    E0, v = emb.gaussian_init(torch.Generator().manual_seed(0), 2000, 4, unit_head=False)
    assert E0.shape == (2000, 4) and v.shape == (4,) and E0.dtype == F64
    assert float((E0**2).mean()) == pytest.approx(0.25, rel=0.05)  # N(0, I/d), d = 4
    # E0 first, then v, both scaled by 1/√d
    gen = torch.Generator().manual_seed(7)
    first = torch.randn((3, 4), generator=gen, dtype=F64)
    second = torch.randn(4, generator=gen, dtype=F64)
    E0, v = emb.gaussian_init(torch.Generator().manual_seed(7), 3, 4, unit_head=False)
    torch.testing.assert_close(E0 * 2, first, rtol=1e-15, atol=0)
    torch.testing.assert_close(v * 2, second, rtol=1e-15, atol=0)
    E0u, vu = emb.gaussian_init(torch.Generator().manual_seed(7), 3, 4)  # unit head by default
    assert torch.equal(E0u, E0)
    torch.testing.assert_close(vu, second / second.norm(), rtol=1e-15, atol=0)


def test_uniform_token_problem_does_not_depend_on_the_default_dtype():
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        a = emb.uniform_token_problem(3, n=64, T=3, S=5, d=4)
        torch.set_default_dtype(torch.float64)
        b = emb.uniform_token_problem(3, n=64, T=3, S=5, d=4)
    finally:
        torch.set_default_dtype(before)
    for name in ("sequences", "y", "E", "v"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert a.y.dtype == F64 and set(a.y.tolist()) == {-1.0, 1.0}
    assert int(a.sequences.min()) == 0 and int(a.sequences.max()) == 4  # uniform over S = 5


def test_g2_fixed_embeddings_are_the_protocol_draw_and_differ_across_seeds():
    a = emb.g2_fixed(2, 8, S=6, T=3, n=10)
    assert tuple(a.sequences.shape) == (10, 3) and tuple(a.E.shape) == (6, 8)
    assert float(a.v.norm()) == pytest.approx(1.0, abs=1e-15)
    assert not torch.equal(a.E, emb.g2_fixed(3, 8, S=6, T=3, n=10).E)
    # the fixed seeds of the recorded runs: E⁰, v from seed 1 000 003·seed + d
    E0, v = emb.gaussian_init(torch.Generator().manual_seed(1_000_003 * 2 + 8), 6, 8)
    assert torch.equal(a.E, E0) and torch.equal(a.v, v)


def test_g2_fixed_does_not_depend_on_the_default_dtype():
    before = torch.get_default_dtype()
    try:
        torch.set_default_dtype(torch.float32)
        a = emb.g2_fixed(1, 4, S=5, T=3, n=40)
        torch.set_default_dtype(torch.float64)
        b = emb.g2_fixed(1, 4, S=5, T=3, n=40)
    finally:
        torch.set_default_dtype(before)
    for name in ("sequences", "y", "E", "v"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name


def test_g2_fixed_tokens_are_drawn_with_replacement():
    """Tokens of a sequence are i.i.d.: with T = 8 draws over |S| = 30 tokens nearly every other
    sequence repeats one (not a sample without replacement)."""
    seqs = emb.g2_fixed(0, 4).sequences
    repeats = sum(len(set(row.tolist())) < 8 for row in seqs)
    assert repeats > 50


# =============================================================================================
# frequencies, posterior difference, complete tokens (§2)
# =============================================================================================

# n = 3, T = 2; token 0 only in positive sequences, token 3 only in negative ones.
FREQ_SEQ = [[0, 1], [0, 0], [1, 3]]
FREQ_Y = [1.0, 1.0, -1.0]


def test_frequencies_by_hand_with_n_different_from_t():
    alpha = emb.average_signed_frequency(FREQ_SEQ, FREQ_Y, 5)
    # counts: token 0: 3 (pos), token 1: 1 pos + 1 neg, token 3: 1 neg; n·T = 6
    assert alpha.tolist() == pytest.approx([3 / 6, 0.0, 0.0, -1 / 6, 0.0], abs=1e-16)
    alpha_bar = emb.average_frequency(FREQ_SEQ, 5)
    assert alpha_bar.tolist() == pytest.approx([3 / 6, 2 / 6, 0.0, 1 / 6, 0.0], abs=1e-16)
    pos, neg = emb._class_counts(FREQ_SEQ, FREQ_Y, 5)
    assert pos.tolist() == [3.0, 1.0, 0.0, 0.0, 0.0] and neg.tolist() == [0.0, 1.0, 0.0, 1.0, 0.0]


def test_complete_tokens_occur_and_occur_in_one_class_only():
    positive = emb.completely_positive(FREQ_SEQ, FREQ_Y, 5)
    assert positive.tolist() == [True, False, False, False, False]
    assert emb.completely_negative(FREQ_SEQ, FREQ_Y, 5).tolist() == [False] * 3 + [True, False]
    # one occurrence is enough: tokens 2 (positive) and 0 (negative) occur once each
    once_seq, once_y = [[2, 1], [0, 1]], [1.0, -1.0]
    assert emb.completely_positive(once_seq, once_y, 3).tolist() == [False, False, True]
    assert emb.completely_negative(once_seq, once_y, 3).tolist() == [True, False, False]


def test_posterior_difference_masks_rare_tokens_at_exactly_min_count():
    delta, mask = emb.posterior_difference(FREQ_SEQ, FREQ_Y, 5)
    assert mask.tolist() == [True, True, False, True, False]
    assert delta[mask].tolist() == [1.0, 0.0, -1.0]
    assert all(math.isnan(x) for x in delta[~mask].tolist())
    # min_count = 2: token 1 (2 occurrences) stays, token 3 (1) goes
    delta2, mask2 = emb.posterior_difference(FREQ_SEQ, FREQ_Y, 5, min_count=2)
    assert mask2.tolist() == [True, True, False, False, False]
    assert delta2[:2].tolist() == [1.0, 0.0] and math.isnan(float(delta2[3]))
    assert emb.posterior_difference(FREQ_SEQ, FREQ_Y, 5, min_count=1)[1].tolist() == mask.tolist()
    with pytest.raises(ValueError, match=r"^min_count: must be ≥ 1, got 0$"):
        emb.posterior_difference(FREQ_SEQ, FREQ_Y, 5, min_count=0)


# =============================================================================================
# Lemma 4.1: one step (§3.1), worked by hand
# =============================================================================================


def _hand_one_step_expectations(eta0: float):
    """β, α, ᾱ, f⁰ of the hand problem at p = 0: f⁰ = (0.5, 1) (mean token scores),
    h_j = 1/(1 + e^{y_j f⁰_j}), β_s = (1/(nT)) Σ_j h_j y_j n_s(X_j)."""
    h0, h1 = 1 / (1 + math.exp(0.5)), 1 / (1 + math.exp(-1.0))
    beta = [h0 / 4, h0 / 4, -2 * h1 / 4]
    alpha = [1 / 4, 1 / 4, -1 / 2]
    alpha_bar = [1 / 4, 1 / 4, 1 / 2]
    return beta, alpha, alpha_bar, [0.5, 1.0]


def test_one_step_from_p0_zero_returns_every_field_of_r1_to_r3():
    problem = _hand_problem()
    eta0 = 3.0
    step = emb.one_step(problem, eta0)
    beta, alpha, alpha_bar, f0 = _hand_one_step_expectations(eta0)
    v2 = 5.0  # ‖v‖² with v = (2, −1)
    u = [2.0, -1.0, 1.0]
    assert step.eta0 == 3.0 and isinstance(step.eta0, float)
    assert step.E0 is problem.E and step.p0.tolist() == [0.0, 0.0]
    torch.testing.assert_close(step.beta, _t(beta), rtol=1e-15, atol=0)
    torch.testing.assert_close(step.f0, _t(f0), rtol=0, atol=0)
    torch.testing.assert_close(step.alpha, _t(alpha), rtol=0, atol=0)
    torch.testing.assert_close(step.alpha_bar, _t(alpha_bar), rtol=0, atol=0)
    # R1: E¹ = E⁰ + η0 β vᵀ, so ⟨E¹ − E⁰, v⟩ = η0 β ‖v‖²
    E1 = _t(HAND_E) + eta0 * _t(beta)[:, None] * _t(HAND_V)[None, :]
    torch.testing.assert_close(step.E1, E1, rtol=1e-15, atol=1e-15)
    torch.testing.assert_close(step.shift, eta0 * v2 * _t(beta), rtol=1e-14, atol=0)
    assert step.rank_one_residual <= 1e-15
    assert step.m == 2.0
    assert step.paper_bound == pytest.approx(11 * 3.0 * 2**-0.25, rel=1e-15)
    r2_bound = [0.25 * 1.0 * a for a in alpha_bar]  # max|f⁰| = 1
    torch.testing.assert_close(step.r2_bound, _t(r2_bound), rtol=1e-15, atol=0)
    target = [eta0 / 2 * v2 * a for a in alpha]
    torch.testing.assert_close(step.r3_target, _t(target), rtol=1e-15, atol=0)
    error = [abs(u[s] + eta0 * v2 * beta[s] - target[s]) for s in range(3)]
    torch.testing.assert_close(step.r3_error, _t(error), rtol=1e-13, atol=1e-15)
    tol = [2.0 * (1 + eta0 * v2 * ab / 4) for ab in alpha_bar]
    torch.testing.assert_close(step.r3_tolerance, _t(tol), rtol=1e-15, atol=0)
    gap = [abs(b - a / 2) for b, a in zip(beta, alpha, strict=True)]
    torch.testing.assert_close(step.r2_gap, _t(gap), rtol=1e-15, atol=0)
    assert step.paper_error is step.r3_error
    # with 3E⁰: f⁰ = (1.5, 3), so the R2 bound is (3/4)·ᾱ and m = 6
    tripled = emb.one_step(problem.with_embeddings(3 * problem.E), eta0)
    torch.testing.assert_close(tripled.f0, _t([1.5, 3.0]), rtol=0, atol=0)
    torch.testing.assert_close(tripled.r2_bound, 0.75 * _t(alpha_bar), rtol=1e-15, atol=0)
    assert tripled.m == 6.0


def test_one_step_from_a_nonzero_p0_is_the_autograd_step_and_not_rank_one():
    problem = _hand_problem()
    p0 = _t([1.0, -2.0])
    E = problem.E.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(problem.loss_value(E, p0), E)
    step = emb.one_step(problem, 0.5, [1.0, -2.0])
    torch.testing.assert_close(step.E1, problem.E - 0.5 * grad, rtol=1e-14, atol=1e-16)
    assert step.p0.tolist() == [1.0, -2.0]
    torch.testing.assert_close(step.shift, (step.E1 - problem.E) @ problem.v)
    assert step.rank_one_residual == emb.rank_one_residual(step.E1 - step.E0, problem.v) > 1e-3
    beta, *_ = _hand_one_step_expectations(0.5)  # β stays the p⁰ = 0 prediction
    torch.testing.assert_close(step.beta, _t(beta), rtol=1e-15, atol=0)


def test_one_step_refuses_a_non_finite_step_and_a_p0_of_the_wrong_size():
    problem = _hand_problem()
    for eta0 in (math.inf, -math.inf, math.nan):
        with pytest.raises(ValueError, match=rf"^eta0: must be finite, got {eta0}$"):
            emb.one_step(problem, eta0)
    with pytest.raises(ValueError, match=r"^p0: expected dimension 2, got 3$"):
        emb.one_step(problem, 1.0, [0.0, 0.0, 0.0])
    with pytest.raises(ValueError, match=r"^p0: expected 1 dimensions, got shape \(1, 2\)$"):
        emb.one_step(problem, 1.0, [[0.0, 0.0]])
    with pytest.raises(ValueError, match=r"^p0: contains NaN or infinity$"):
        emb.one_step(problem, 1.0, [0.0, math.inf])


def test_one_step_runs_the_gradient_on_the_device_it_is_given(monkeypatch):
    """``device`` is handed to models.numerics.device: a name that is no device is refused, and an
    explicit "cpu" is used whatever $ATTN_DEVICE says."""
    problem = _hand_problem()
    with pytest.raises(ValueError, match=r"^ATTN_DEVICE='nowhere' is not a torch device"):
        emb.one_step(problem, 1.0, device="nowhere")
    monkeypatch.setenv("ATTN_DEVICE", "nowhere")
    step = emb.one_step(problem, 1.0, device="cpu")
    assert step.E1.device.type == "cpu"
    with pytest.raises(ValueError, match=r"^ATTN_DEVICE='nowhere'"):
        emb.one_step(problem, 1.0)  # no device: the setting decides


def test_rank_one_residual_is_the_relative_distance_to_rows_along_v():
    D = _t([[2.0, 1.0], [0.0, 0.0]])
    # along e₁: the projection of row 0 is (2, 0); residual entry 1, scale max|D| = 2
    assert emb.rank_one_residual(D, _t([1.0, 0.0])) == 0.5
    assert emb.rank_one_residual(D, _t([3.0, 0.0])) == 0.5  # v's length does not matter
    assert emb.rank_one_residual(_t([[4.0, -2.0], [-6.0, 3.0]]), _t([2.0, -1.0])) == 0.0
    assert emb.rank_one_residual(torch.zeros(2, 2, dtype=F64), _t([1.0, 0.0])) == 0.0


def test_r1_coefficients_are_beta_and_the_mean_token_scores():
    beta, f0 = emb.r1_coefficients(_hand_problem())
    expected_beta, _, _, expected_f0 = _hand_one_step_expectations(1.0)
    torch.testing.assert_close(beta, _t(expected_beta), rtol=1e-15, atol=0)
    assert f0.tolist() == expected_f0
    # n = 3 sequences of T = 2 (n·T = 6): f⁰ = (0.5, 1, −1)
    three = EmbeddingProblem([[0, 1], [2, 2], [1, 1]], [1.0, -1.0, -1.0], HAND_E, HAND_V)
    beta, f0 = emb.r1_coefficients(three)
    h = [1 / (1 + math.exp(0.5)), 1 / (1 + math.exp(-1.0)), 1 / (1 + math.exp(1.0))]
    expected = [h[0] / 6, (h[0] - 2 * h[2]) / 6, -2 * h[1] / 6]
    torch.testing.assert_close(beta, _t(expected), rtol=1e-14, atol=0)
    assert f0.tolist() == [0.5, 1.0, -1.0]


# =============================================================================================
# selection, floor, feasible point, descent direction (§3.2–§3.3)
# =============================================================================================


def test_selected_tokens_gap_and_the_uniqueness_tolerance():
    E, v = _t([[3.0, 0.0], [1.0, 0.0], [0.5, 0.0]]), _t([1.0, 0.0])
    seq, y = [[0, 1, 2], [2, 1, 1]], [1.0, -1.0]
    sel = emb.selected_tokens(E, seq, y, v)
    assert sel.tokens.tolist() == [0, 2]  # y·u: (3, 1, .5) and (−.5, −1, −1)
    assert sel.gap.tolist() == [2.0, 0.5]
    assert sel.unique.tolist() == [True, True] and sel.all_unique
    at_tol = emb.selected_tokens(E, seq, y, v, tol=0.5)  # unique means gap > tol, strictly
    assert at_tol.unique.tolist() == [True, False] and not at_tol.all_unique
    with pytest.raises(ValueError, match="^y:"):
        emb.selected_tokens(E, seq, [1.0], v)
    with pytest.raises(ValueError, match="^sequences:"):
        emb.selected_tokens(E, [[0, 3]], [1.0], v)


def test_relevant_token_positions_checks_its_selection():
    mask = emb.relevant_token_positions([[0, 1, 0], [2, 2, 1]], [0, 1])
    assert mask.tolist() == [[True, False, True], [False, False, True]]
    with pytest.raises(ValueError, match="^s_star: expected shape"):
        emb.relevant_token_positions([[0, 1]], [0, 1])


def test_cls_loss_floor_is_the_logistic_loss_of_the_selected_scores():
    floor = emb.cls_loss_floor(HAND_E, HAND_SEQ, HAND_Y, HAND_V, [0, 2])
    # y·u_{s*}: +2 for sequence 0 (token 0), −1 for sequence 1 (token 2)
    assert floor == pytest.approx((math.log1p(math.exp(-2.0)) + math.log1p(math.e)) / 2, rel=1e-15)
    with pytest.raises(ValueError, match=r"^s_star: token ids must lie in \[0, 3\)$"):
        emb.cls_loss_floor(HAND_E, HAND_SEQ, HAND_Y, HAND_V, [0, 3])
    with pytest.raises(ValueError, match="^y:"):
        emb.cls_loss_floor(HAND_E, HAND_SEQ, [1.0], HAND_V, [0, 2])
    with pytest.raises(ValueError, match=r"^sequences: token ids must lie in \[0, 3\)"):
        emb.cls_loss_floor(HAND_E, [[0, 3], [1, 1]], HAND_Y, HAND_V, [0, 1])
    # n = 3 sequences of T = 2 tokens (n ≠ T): one selected token per sequence
    floor3 = emb.cls_loss_floor(
        HAND_E, [[0, 1], [2, 2], [1, 0]], [1.0, -1.0, -1.0], HAND_V, [0, 2, 1]
    )
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.e) + math.log1p(math.exp(-1.0))) / 3
    assert floor3 == pytest.approx(expected, rel=1e-15)


def test_max_margin_feasible_point_gives_logit_one_to_relevant_tokens():
    E1 = _t([[2.0, 0.0, 0.0], [0.0, 4.0, 0.0]])
    p = emb.max_margin_feasible_point(E1, [True, False])
    torch.testing.assert_close(p, _t([0.5, 0.0, 0.0]), rtol=0, atol=1e-16)
    with pytest.raises(ValueError, match=r"^relevant_mask: expected shape \(2,\), got \(3,\)$"):
        emb.max_margin_feasible_point(E1, [True, False, True])
    with pytest.raises(ValueError, match=r"^E1: expected 2 dimensions, got shape \(3,\)$"):
        emb.max_margin_feasible_point([1.0, 2.0, 3.0], [True])
    with pytest.raises(ValueError, match=r"^E1: contains NaN or infinity$"):
        emb.max_margin_feasible_point([[math.nan, 0.0]], [True])


DD_E = [[2.0, 0.0, 0.0], [0.0, 4.0, 0.0]]  # |S| = 2 = d − 1; v ∥ e₃: q = e_s / E_ss
DD_V = [0.0, 0.0, 3.0]


def test_descent_direction_solves_e1_q_equals_e_s_orthogonally_to_v():
    for s, q in ((0, [0.5, 0.0, 0.0]), (1, [0.0, 0.25, 0.0])):
        result = emb.descent_direction(DD_E, DD_V, s)
        assert result.ok and result.reason is None and result.residual == 0.0
        assert result.q.tolist() == q
    # the residual is compared to tol with ≤: a residual of exactly tol passes
    assert emb.descent_direction(DD_E, DD_V, 0, tol=0.0).ok


def test_descent_direction_reasons_are_the_documented_ones():
    refused = emb.descent_direction(DD_E, DD_V, 0, tol=-1.0)
    assert not refused.ok and refused.q is None and refused.residual == 0.0
    assert refused.reason == "E U is rank deficient: residual 0"
    E3 = torch.eye(3, dtype=F64)
    too_many = emb.descent_direction(E3, DD_V, 0)
    assert too_many.q is None and math.isnan(too_many.residual)
    assert too_many.reason == "|S| = 3 > d - 1 = 2: E U is not onto"
    for bad in (-1, 2):
        with pytest.raises(ValueError, match=rf"^s_star_token: must lie in \[0, 2\), got {bad}$"):
            emb.descent_direction(DD_E, DD_V, bad)


def test_orthonormal_complement_of_a_general_v():
    v = _t([1.0, 2.0, 2.0])
    U = emb.orthonormal_complement(v)
    assert U.shape == (3, 2)
    torch.testing.assert_close(U.T @ U, torch.eye(2, dtype=F64), rtol=0, atol=1e-15)
    torch.testing.assert_close(U.T @ v, torch.zeros(2, dtype=F64), rtol=0, atol=1e-15)


def test_directional_derivative_is_the_autograd_slope_and_zero_when_flat():
    problem = _hand_problem()
    prompt = problem.prompt_problem()
    p, q = _t([0.4, -0.3]), _t([1.0, 3.0])
    pp = p.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(prompt.loss_value(pp), pp)
    value = float(grad @ q)
    log_abs, sign = emb.directional_derivative(prompt, p, q)
    assert sign == math.copysign(1.0, value) and math.exp(log_abs) == pytest.approx(
        abs(value), rel=1e-13
    )
    assert emb.directional_derivative(prompt, p, -q) == pytest.approx((log_abs, -sign), rel=1e-15)
    assert emb.directional_derivative(prompt, p, _t([0.0, 0.0])) == (-math.inf, 0.0)
    for bad_p, bad_q, message in (
        ([[0.4, -0.3]], q, r"^p: expected 1 dimensions"),
        ([0.4, math.nan], q, r"^p: contains NaN"),
        (p, [[1.0, 3.0]], r"^q: expected 1 dimensions"),
        (p, [1.0, math.inf], r"^q: contains NaN"),
    ):
        with pytest.raises(ValueError, match=message):
            emb.directional_derivative(prompt, bad_p, bad_q)
    # all scores equal: the loss does not depend on p, the gradient is exactly zero
    flat = EmbeddingProblem([[0, 1]], [1.0], [[1.0, 0.0], [0.0, 1.0]], [1.0, 1.0])
    assert emb.directional_derivative(flat.prompt_problem(), p, q) == (-math.inf, 0.0)


def test_descent_slope_is_the_autograd_slope_along_q_and_zero_off_every_position():
    # two inputs over tokens 0 and 1 (E¹ = (e₁, e₂) in d = 3, v = e₃ + e₁/2): q = e₁ moves token 0
    problem = EmbeddingProblem(
        [[0, 1], [1, 0]], [1.0, -1.0], [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]], [0.5, 0.0, 1.0]
    )
    prompt = problem.prompt_problem()
    p = _t([0.2, -0.1, 0.0])
    pp = p.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(prompt.loss_value(pp), pp)
    expected = float(grad[0])  # ⟨∇L, e₀⟩
    log_abs, sign = emb.descent_slope(prompt, p, problem.sequences == 0)
    assert sign == math.copysign(1.0, expected) and sign * math.exp(log_abs) == pytest.approx(
        expected, rel=1e-13
    )
    nowhere = torch.zeros(2, 2, dtype=torch.bool)
    assert emb.descent_slope(prompt, p, nowhere) == (-math.inf, 0.0)
    with pytest.raises(ValueError, match=r"^positions: expected shape \(2, 2\), got \(2, 3\)$"):
        emb.descent_slope(prompt, p, torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"^p: expected 1 dimensions, got shape \(1, 3\)$"):
        emb.descent_slope(prompt, p[None], nowhere)
    with pytest.raises(ValueError, match=r"^p: contains NaN or infinity$"):
        emb.descent_slope(prompt, _t([0.0, math.nan, 0.0]), nowhere)
    square = type(prompt)(keys=prompt.keys, scores=prompt.scores, loss="square")
    with pytest.raises(
        ValueError, match=r"^prompt: descent_slope needs ℓ' < 0, not the square loss$"
    ):
        emb.descent_slope(square, p, nowhere)


# =============================================================================================
# exact rationals: scaled integers, rounding shifts, the exact solve, Lemma A.2's q
# =============================================================================================


def test_as_scaled_ints_writes_floats_over_one_power_of_two():
    ints, K = emb._as_scaled_ints(_t([[0.5, 0.25], [3.0, -0.125]]))
    assert K == 3 and ints.shape == (2, 2)
    assert ints.tolist() == [[4, 2], [24, -1]]
    ints, K = emb._as_scaled_ints(_t([1.0, -7.0]))
    assert K == 0 and ints.tolist() == [1, -7]
    tiny = 2.0**-60 + 2.0**-100
    ints, K = emb._as_scaled_ints(_t([tiny]))
    assert K == 100 and Fraction(int(ints[0]), 2**K) == Fraction(tiny)


@pytest.mark.parametrize(
    "x, k, expected",
    [(5, 2, 20), (5, 0, 5), (5, -1, 3), (4, -1, 2), (7, -2, 2), (5, -2, 1), (-5, -1, -2)],
)
def test_shift_multiplies_by_a_power_of_two_rounding_half_up(x, k, expected):
    assert emb._shift(x, k) == expected


def test_solve_exact_meets_the_requested_bits():
    M = np.array([[3, 1], [1, 2]], dtype=object)  # M y = e₀: y = (2/5, −1/5)
    b = np.array([1, 0], dtype=object)
    bits = 100
    Y, B = emb._solve_exact(M, b, bits)
    assert B == bits + 1  # m = bit_length(3) − 1
    for got, want in zip(Y.tolist(), (Fraction(2, 5), Fraction(-1, 5)), strict=True):
        assert isinstance(got, int)
        assert abs(Fraction(got, 2**B) - want) <= Fraction(1, 2**bits)
    # a dyadic solution is found exactly: 4 y = 1
    Y, B = emb._solve_exact(np.array([[4]], dtype=object), np.array([1], dtype=object), 30)
    assert B == 32 and Y.tolist() == [2**30]


def test_log10_abs_of_a_rational_and_of_zero():
    assert emb._log10_abs(0, 7) == -math.inf
    assert emb._log10_abs(-1000, 10) == pytest.approx(2.0, abs=1e-15)
    assert emb._log10_abs(1, 1000) == pytest.approx(-3.0, abs=1e-15)


def test_exact_descent_direction_on_hand_cases():
    # E¹ = (e₁, e₂), v = e₃: q = e_s exactly, E¹q = e_s with no residual at all
    e3 = _t([0.0, 0.0, 1.0])
    exact = emb.exact_descent_direction(_t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), e3, 1)
    assert exact.token == 1 and exact.q.tolist() == [0.0, 1.0, 0.0]
    assert exact.c_num == (0, exact.den) and exact.den > 0
    assert exact.log10_residual == -math.inf and exact.v_dot_q_num == 0
    # one token, v = (1, 1, 1): q = P e₁ / (e₁ᵀ P e₁) = (1, −1/2, −1/2)
    exact = emb.exact_descent_direction(_t([[1.0, 0.0, 0.0]]), _t([1.0, 1.0, 1.0]), 0)
    assert exact.q.tolist() == [1.0, -0.5, -0.5] and exact.c_num == (exact.den,)
    # E¹ = 3e₁ᵀ: q = e₁/3 is not dyadic, so E¹q = 1 only to the requested digits
    exact = emb.exact_descent_direction(_t([[3.0, 0.0, 0.0]]), e3, 0, digits=20)
    c = Fraction(exact.c_num[0], exact.den)
    assert exact.log10_residual == pytest.approx(math.log10(abs(float(c - 1))), abs=1e-12)
    assert -20 - 30 < exact.log10_residual <= -20
    assert exact.q.tolist() == pytest.approx([1 / 3, 0.0, 0.0], abs=1e-16)
    assert exact.v_dot_q_num == 0
    # entries with a power of two in the denominator (E¹ = 1.5e₁ᵀ, v = e₃/2): q = e₁/1.5
    exact = emb.exact_descent_direction(_t([[1.5, 0.0, 0.0]]), _t([0.0, 0.0, 0.5]), 0)
    assert exact.q.tolist() == pytest.approx([2 / 3, 0.0, 0.0], abs=1e-16)


def test_exact_descent_direction_defaults_to_sixty_digits():
    E1, v = _t([[3.0, 1.0, 0.0], [0.0, 1.0, 1.0]]), _t([1.0, 1.0, 1.0])
    default = emb.exact_descent_direction(E1, v, 1)
    sixty = emb.exact_descent_direction(E1, v, 1, digits=60)
    assert default.c_num == sixty.c_num and default.den == sixty.den
    assert -60 - 30 < default.log10_residual <= -60
    assert emb.exact_descent_direction(E1, v, 1, digits=61).den != default.den


def test_exact_descent_direction_refuses_what_has_no_solution():
    with pytest.raises(ValueError, match=r"^\|S\| = 3 > d − 1 = 2: no q ⟂ v with E¹q = e_s$"):
        emb.exact_descent_direction(torch.eye(3, dtype=F64), DD_V, 0)
    for bad in (-1, 2):
        with pytest.raises(ValueError, match=rf"^token: must lie in \[0, 2\), got {bad}$"):
            emb.exact_descent_direction(DD_E, DD_V, bad)


def test_slope_is_resolved_only_clear_of_both_noise_floors():
    assert not Slope(0.0, 0.0, 0.0, -100.0).resolved  # sign 0
    assert Slope(0.0, -1.0, 10.0, -100.0).resolved
    # the value must exceed 1e-10 of the summed magnitudes ...
    edge = math.log(1e-10)
    assert not Slope(edge, 1.0, 0.0, -100.0).resolved
    assert Slope(edge + 1e-9, 1.0, 0.0, -100.0).resolved
    # ... and 1e3 times the residual bound
    assert not Slope(math.log(1e3), 1.0, 0.0, 0.0).resolved
    assert Slope(math.log(1e3) + 1e-9, 1.0, 0.0, 0.0).resolved


# ---- the pair tables and the derivative along q -------------------------------------------------

# Tokens 0, 1, 2 in d = 4; u = E¹v = (0.75, −0.5, 0.75) has a tie (tokens 0 and 2).
PT_E = [[0.5, 0.25, 0.0, 0.0], [-0.5, 0.0, 0.0, 0.0], [0.25, 0.0, 0.5, 0.0]]
PT_V = [1.0, 1.0, 1.0, 0.0]


def _direction(c_num, den, log10_residual=-math.inf) -> ExactDirection:
    return ExactDirection(0, torch.zeros(4, dtype=F64), tuple(c_num), den, log10_residual, 0)


def test_pair_tables_are_the_exact_pairwise_differences_and_are_cached():
    E1, v = _t(PT_E), _t(PT_V)
    direction = _direction((3, -1, 3), 8)  # c = E¹q = (3/8, −1/8, 3/8)
    tables = emb._pair_tables(E1, v, direction)
    log_dc, sg_dc, log_du, sg_du = tables
    u = [sum(Fraction(e) * Fraction(w) for e, w in zip(row, PT_V, strict=True)) for row in PT_E]
    c = [Fraction(3, 8), Fraction(-1, 8), Fraction(3, 8)]
    for a in range(3):
        for b in range(3):
            for log_t, sg_t, vals in ((log_dc, sg_dc, c), (log_du, sg_du, u)):
                diff = vals[a] - vals[b]
                if diff == 0:
                    assert log_t[a, b] == -math.inf and sg_t[a, b] == 0.0
                else:
                    assert log_t[a, b] == pytest.approx(math.log(abs(diff)), abs=1e-14)
                    assert sg_t[a, b] == (1.0 if diff > 0 else -1.0)
    assert emb._pair_tables(E1, v, direction) is tables  # one computation per (E¹, v, q)
    assert len(emb._PAIR_TABLES) == 1


def test_pair_tables_sign_of_the_smallest_representable_difference():
    """E¹ = (e₁/2, 0), v = e₁/2: u = (1/4, 0), one unit of the exact scale 2^(−2K), K = 1."""
    E1, v = _t([[0.5, 0.0], [0.0, 0.0]]), _t([0.5, 0.0])
    log_dc, sg_dc, log_du, sg_du = emb._pair_tables(E1, v, _direction((1, 0), 4))
    assert sg_du.tolist() == [[0.0, 1.0], [-1.0, 0.0]]
    assert log_du[0, 1] == log_du[1, 0] == pytest.approx(math.log(0.25), abs=1e-15)
    assert sg_dc.tolist() == [[0.0, 1.0], [-1.0, 0.0]]
    assert log_dc[0, 1] == pytest.approx(math.log(0.25), abs=1e-15)  # c = (1/4, 0)


def test_pair_tables_cache_keeps_at_most_sixteen_entries():
    E1, v = _t(PT_E), _t(PT_V)
    for k in range(16):
        emb._pair_tables(E1, v, _direction((k, 0, 1), 2))
    assert len(emb._PAIR_TABLES) == 16
    emb._pair_tables(E1, v, _direction((99, 0, 1), 2))  # the 17th clears the others
    assert len(emb._PAIR_TABLES) == 1


def test_derivative_along_is_the_hand_slope_with_its_total_and_residual_bound():
    """n = 1, T = 2, tokens 0 and 1: E¹ = (e₁, e₂), v = (1/2, −1/4, 1), q = e₁ (c = (1, 0)).
    dL/dε = ℓ'(y f) y σ₀σ₁ (c₀ − c₁)(u₀ − u₁) with ℓ'(z) = −1/(1 + e^z)."""
    E1, v = _t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), _t([0.5, -0.25, 1.0])
    p = _t([0.3, -0.2, 0.0])
    s0 = 1 / (1 + math.exp(-0.5))
    s1 = 1 - s0
    f = s0 * 0.5 - s1 * 0.25
    for y in (1.0, -1.0):
        value = -1 / (1 + math.exp(y * f)) * y * s0 * s1 * 1.0 * 0.75
        slope = emb.derivative_along(E1, [[0, 1]], [y], v, p, _direction((1, 0), 1))
        assert slope.sign == math.copysign(1.0, value)
        assert slope.log_abs == pytest.approx(math.log(abs(value)), abs=1e-13)
        assert slope.log_total == pytest.approx(math.log(abs(value)), abs=1e-13)
        assert slope.log_residual_bound == -math.inf and slope.resolved
        # autograd of L(E¹, p + εq) agrees
        eps = torch.zeros((), dtype=F64, requires_grad=True)
        problem = EmbeddingProblem([[0, 1]], [y], E1, v)
        (auto,) = torch.autograd.grad(problem.loss_value(E1, p + eps * _t([1.0, 0, 0])), eps)
        assert float(auto) == pytest.approx(value, rel=1e-13)
    # with |E¹q − e_s| ≤ 10^r per token the bound is Σ|ℓ'| σσ |Δu| · 2·10^r
    slope = emb.derivative_along(E1, [[0, 1]], [1.0], v, p, _direction((1, 0), 1, -3.0))
    bound = 1 / (1 + math.exp(f)) * s0 * s1 * 0.75 * 2e-3
    assert slope.log_residual_bound == pytest.approx(math.log(bound), abs=1e-13)
    # two inputs: the mean over inputs (the 1/n)
    both = emb.derivative_along(E1, [[0, 1], [0, 1]], [1.0, 1.0], v, p, _direction((1, 0), 1))
    one = emb.derivative_along(E1, [[0, 1]], [1.0], v, p, _direction((1, 0), 1))
    assert both.log_abs == pytest.approx(one.log_abs, abs=1e-14)


def test_derivative_along_matches_autograd_on_inputs_with_different_logit_ranges():
    """Three tokens (E¹ = (e₁, e₂, e₃) in d = 4), two inputs whose logits peak at 0.3 and 2,
    q = e₁ (c = (1, 0, 0)): the slope is d/dε L(E¹, p + εq), by autograd."""
    E1 = torch.eye(4, dtype=F64)[:3]
    v, p, q = _t([0.5, -0.25, 1.0, 0.0]), _t([0.3, -0.2, 2.0, 0.0]), _t([1.0, 0.0, 0.0, 0.0])
    seq, y = [[0, 1], [2, 0]], [1.0, -1.0]
    eps = torch.zeros((), dtype=F64, requires_grad=True)
    problem = EmbeddingProblem(seq, y, E1, v)
    (auto,) = torch.autograd.grad(problem.loss_value(E1, p + eps * q), eps)
    slope = emb.derivative_along(E1, seq, y, v, p, _direction((1, 0, 0), 1))
    assert slope.sign * math.exp(slope.log_abs) == pytest.approx(float(auto), rel=1e-13)
    with pytest.raises(ValueError, match=r"^sequences: token ids must lie in \[0, 3\)"):
        emb.derivative_along(E1, [[0, 3]], [1.0], v, p, _direction((1, 0, 0), 1))
    with pytest.raises(ValueError, match=r"^p: expected 1 dimensions, got shape \(1, 4\)$"):
        emb.derivative_along(E1, seq, y, v, p[None], _direction((1, 0, 0), 1))
    with pytest.raises(ValueError, match=r"^p: contains NaN or infinity$"):
        emb.derivative_along(E1, seq, y, v, p * math.inf, _direction((1, 0, 0), 1))


def test_derivative_along_a_direction_that_moves_no_logit_difference_is_zero():
    E1, v = _t([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), _t([0.5, -0.25, 1.0])
    slope = emb.derivative_along(
        E1, [[0, 1]], [1.0], v, _t([0.3, 0, 0]), _direction((1, 1), 1, -3.0)
    )
    assert (slope.log_abs, slope.sign, slope.log_total) == (-math.inf, 0.0, -math.inf)
    assert math.isfinite(slope.log_residual_bound) and not slope.resolved
    # equal head scores (Δu = 0): neither a value nor a residual bound
    flat = emb.derivative_along(
        E1, [[0, 1]], [1.0], _t([1.0, 1.0, 0.0]), _t([0.3, 0, 0]), _direction((1, 0), 1, -3.0)
    )
    assert (flat.log_abs, flat.sign, flat.log_total) == (-math.inf, 0.0, -math.inf)
    assert flat.log_residual_bound == -math.inf


# =============================================================================================
# the §4.2 models and the training loop
# =============================================================================================


def test_one_layer_model_initialisation_law_and_parameters():
    model = OneLayerModel(3000, 4, seed=5)
    assert model.vocab_size == 3000 and model.dim == 4
    assert torch.all(model.p == 0) and model.p.dtype == F64
    assert float((model.E.detach() ** 2).mean()) == pytest.approx(0.25, rel=0.05)  # N(0, I/d)
    assert isinstance(model.v, torch.nn.Parameter)
    names = {name for name, _ in model.named_parameters()}
    assert names == {"E", "p", "v"}
    frozen = OneLayerModel(3000, 4, train_v=False, seed=5)
    assert {name for name, _ in frozen.named_parameters()} == {"E", "p"}
    assert "v" in dict(frozen.named_buffers())
    # the same draw as the protocol's (E⁰ first, then v, each N(0, I/d))
    E0, v = emb.gaussian_init(torch.Generator().manual_seed(5), 3000, 4, unit_head=False)
    torch.testing.assert_close(model.E.detach(), E0, rtol=1e-15, atol=0)
    torch.testing.assert_close(frozen.v, v, rtol=1e-15, atol=0)


@pytest.mark.parametrize("cls", [OneLayerModel, TwoLayerModel])
def test_models_are_float64_whatever_the_default_dtype(cls):
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        model = cls(5, 4, train_v=False, seed=1)
    finally:
        torch.set_default_dtype(before)
    tensors = dict(model.named_parameters()) | dict(model.named_buffers())
    assert tensors and all(t.dtype == F64 for t in tensors.values()), {
        k: t.dtype for k, t in tensors.items()
    }
    same = dict(cls(5, 4, train_v=False, seed=1).state_dict())
    assert all(torch.equal(t, same[k]) for k, t in model.state_dict().items())  # the same draws
    if cls is TwoLayerModel:
        assert set(model.W.keys()) == {"q", "k", "v"}


def test_one_layer_model_defaults_to_seed_zero_and_a_trained_head():
    model, zero = OneLayerModel(6, 3), OneLayerModel(6, 3, train_v=True, seed=0)
    assert isinstance(model.v, torch.nn.Parameter)
    assert torch.equal(model.E, zero.E) and torch.equal(model.v, zero.v)


def test_one_layer_model_refuses_token_ids_outside_its_vocabulary():
    model = OneLayerModel(4, 3, seed=0)
    for call in (model, model.hidden, lambda s: model.key_scores(s, model.v)):
        with pytest.raises(ValueError, match=r"^sequences: token ids must lie in \[0, 4\)"):
            call(torch.tensor([[0, 4]]))


def test_one_layer_hidden_and_key_scores_by_hand():
    model = OneLayerModel(4, 2, seed=0)
    with torch.no_grad():
        model.E.copy_(_t([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0], [5.0, 5.0]]))
        model.p.copy_(_t([math.log(2.0), 0.0]))
        model.v.copy_(_t([1.0, -1.0]))
    seq = torch.tensor([[0, 1], [2, 2]])
    assert torch.equal(model.hidden(seq), model.E.detach()[seq])
    scores, counts = model.key_scores(seq, model.v)
    assert counts.tolist() == [1.0, 1.0, 2.0, 0.0]
    assert scores[:3].tolist() == [1.0, -2.0, 0.0] and math.isnan(float(scores[3]))
    # sequence 0: logits (log 2, 0) → weights (2/3, 1/3), u = (1, −2): f = 0; sequence 1: f = 0
    torch.testing.assert_close(model(seq), _t([0.0, 0.0]), rtol=0, atol=1e-15)
    with torch.no_grad():
        model.v.copy_(_t([3.0, 0.0]))
    torch.testing.assert_close(model(seq), _t([2.0, 3.0]), rtol=0, atol=1e-15)


def test_two_layer_model_initialisation_and_layernorm_output():
    model = TwoLayerModel(50, 40, seed=2)
    for k in "qkv":
        W = model.W[k].detach()
        assert W.shape == (40, 40) and W.dtype == F64
        assert float((W**2).mean()) == pytest.approx(1 / 40, rel=0.1), k
    assert not torch.equal(model.W["q"], model.W["k"])
    # the block's weights come from a stream of their own (seed + 1), not E's
    E_stream = emb._normal((40, 40), 40**-0.5, torch.Generator().manual_seed(2))
    assert not torch.equal(model.W["q"].detach(), E_stream)
    with torch.no_grad():
        model.norm.weight.fill_(3.0)
        model.norm.bias.fill_(1.0)
    model.reset_parameters(2)
    assert torch.all(model.norm.weight == 1) and torch.all(model.norm.bias == 0)
    H = model.hidden(torch.tensor([[0, 1, 2], [3, 3, 4]])).detach()
    torch.testing.assert_close(H.mean(-1), torch.zeros(2, 3, dtype=F64), rtol=0, atol=1e-14)
    torch.testing.assert_close(
        H.var(-1, unbiased=False), torch.ones(2, 3, dtype=F64), atol=1e-3, rtol=0
    )


def test_two_layer_hidden_and_read_out_by_hand():
    """E = (e₁, e₂) in d = 4, Wq = Wv = I and Wk mapping e₂ to e₂ + 2e₁: queries (e₁, e₂), keys
    (e₁, 2e₁ + e₂), so the logits ⟨q_a, k_b⟩/√d are [[1/2, 1], [0, 1/2]] (not symmetric: each
    row is one query's softmax). With the norm replaced by the identity,
    H1_a = H0_a + Σ_b w_ab H0_b, the skip connection plus the mixture."""
    model = TwoLayerModel(2, 4, seed=0)
    Wk = torch.eye(4, dtype=F64)
    Wk[1, 0] = 2.0
    with torch.no_grad():
        model.E.copy_(_t([[1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, 0.0]]))
        model.W["q"].copy_(torch.eye(4, dtype=F64))
        model.W["k"].copy_(Wk)
        model.W["v"].copy_(torch.eye(4, dtype=F64))
    model.norm = torch.nn.Identity()
    H = model.hidden(torch.tensor([[0, 1]])).detach()[0]
    w0 = math.exp(0.5) / (math.exp(0.5) + math.exp(1.0))  # row 0: logits (1/2, 1)
    w1 = 1 / (1 + math.exp(0.5))  # row 1: logits (0, 1/2)
    expected = _t([[1 + w0, 1 - w0, 0, 0], [w1, 2 - w1, 0, 0]])
    torch.testing.assert_close(H, expected, rtol=1e-15, atol=1e-16)
    # the read-out: f = softmax(H1 p)ᵀ (H1 v); with p = e₁ and v = e₂ − e₁
    with torch.no_grad():
        model.p.copy_(_t([1.0, 0.0, 0.0, 0.0]))
        model.v.copy_(_t([-1.0, 1.0, 0.0, 0.0]))
    h = expected.tolist()
    a = [math.exp(h[0][0]), math.exp(h[1][0])]
    f = (a[0] * (h[0][1] - h[0][0]) + a[1] * (h[1][1] - h[1][0])) / (a[0] + a[1])
    assert float(model(torch.tensor([[0, 1]]))[0].detach()) == pytest.approx(f, rel=1e-14)


def test_train_full_batch_takes_adam_steps_of_size_lr_and_records_the_losses():
    seq = torch.tensor([[0, 1], [1, 2], [2, 0]])
    y = _t([1.0, -1.0, 1.0])
    model = OneLayerModel(3, 2, seed=1)
    start = {k: q.detach().clone() for k, q in model.named_parameters()}
    with torch.no_grad():
        loss0 = float(torch.nn.functional.softplus(-y * model(seq)).mean())
    model.zero_grad()
    torch.nn.functional.softplus(-y * model(seq)).mean().backward()
    grads = {k: q.grad.clone() for k, q in model.named_parameters()}
    model.zero_grad()
    curve = emb.train_full_batch(model, seq, y, epochs=1, lr=0.01)
    assert curve.shape == (2,) and curve.dtype == F64 and curve.device.type == "cpu"
    assert float(curve[0]) == pytest.approx(loss0, rel=1e-15)
    assert float(curve[1]) == pytest.approx(
        float(torch.nn.functional.softplus(-y * model(seq)).mean().detach()), rel=1e-15
    )
    # Adam's first step is lr·g/(|g| + 1e-8): lr·sign(g) wherever |g| ≫ 1e-8
    for k, q in model.named_parameters():
        g = grads[k]
        big = g.abs() > 1e-3
        assert big.any()
        torch.testing.assert_close(
            (start[k] - q.detach())[big], 0.01 * torch.sign(g[big]), rtol=1e-4, atol=0
        )


def test_train_full_batch_reinitialises_only_when_given_a_seed():
    seq, y = torch.tensor([[0, 1], [1, 0]]), _t([1.0, -1.0])
    model = OneLayerModel(2, 3, seed=4)
    with torch.no_grad():
        model.p.fill_(1.0)
    kept = emb.train_full_batch(model, seq, y, epochs=0, lr=0.1)
    assert kept.shape == (1,) and torch.all(model.p == 1.0)
    assert float(kept[0]) == pytest.approx(
        float(torch.nn.functional.softplus(-y * model(seq)).mean().detach()), rel=1e-15
    )
    reset = emb.train_full_batch(model, seq, y, epochs=0, lr=0.1, seed=9)
    fresh = OneLayerModel(2, 3, seed=9)
    assert torch.all(model.p == 0) and torch.equal(model.E, fresh.E)
    assert float(reset[0]) == float(torch.nn.functional.softplus(-y * fresh(seq)).mean().detach())
    with pytest.raises(ValueError, match="^y:"):
        emb.train_full_batch(model, seq, [1.0], epochs=1, lr=0.1)


def test_train_full_batch_leaves_a_frozen_head_alone():
    seq, y = torch.tensor([[0, 1], [1, 0], [1, 1]]), _t([1.0, -1.0, -1.0])
    model = OneLayerModel(2, 3, train_v=False, seed=4)
    v = model.v.clone()
    emb.train_full_batch(model, seq, y, epochs=3, lr=0.1)
    assert torch.equal(model.v, v) and not torch.all(model.p == 0)


# =============================================================================================
# tokenizer, vocabulary, encoding, loaders
# =============================================================================================


def test_tokenize_drops_every_spelling_of_a_line_break():
    assert emb.tokenize("a<br>b<BR/>c<br  />D") == ["a", "b", "c", "d"]
    assert emb.tokenize("  --  ") == []


def test_build_vocab_ranks_by_count_then_spelling_within_max_size():
    docs = ["y x", "w", ["x"]]  # x twice, then w and y once each
    assert emb.build_vocab(docs, max_size=10) == {"<pad>": 0, "<unk>": 1, "x": 2, "w": 3, "y": 4}
    assert emb.build_vocab(docs, max_size=3) == {"<pad>": 0, "<unk>": 1, "x": 2}
    assert emb.build_vocab(docs, max_size=2) == {"<pad>": PAD_ID, "<unk>": UNK_ID}
    assert emb.build_vocab(docs, max_size=10, min_count=2) == {"<pad>": 0, "<unk>": 1, "x": 2}
    with pytest.raises(ValueError, match=r"^max_size: must be ≥ 2 \(the pad and unknown tokens\)"):
        emb.build_vocab(docs, max_size=1)


def test_encode_truncates_pads_and_refuses_empty_input():
    vocab = {"<pad>": 0, "<unk>": 1, "a": 2}
    assert emb.encode(["a z a", ["a"]], vocab, T=2).tolist() == [[2, 1], [2, 0]]
    assert emb.encode(["z"], vocab, T=1).tolist() == [[1]]
    with pytest.raises(ValueError, match=r"^T: must be ≥ 1, got 0$"):
        emb.encode(["a"], vocab, T=0)
    with pytest.raises(ValueError, match=r"^docs: no documents to encode$"):
        emb.encode([], vocab, T=3)


def test_interleave_alternates_then_appends_the_longer_tail():
    assert emb._interleave([1, 2, 3], ["a"]) == [1, "a", 2, 3]
    assert emb._interleave([1], ["a", "b", "c"]) == [1, "a", "b", "c"]
    assert emb._interleave([], []) == []


def _imdb(root, pos, neg):
    for label, texts in (("pos", pos), ("neg", neg)):
        folder = root / "train" / label
        folder.mkdir(parents=True)
        for k, text in enumerate(texts):
            (folder / f"{k}.txt").write_bytes(text if isinstance(text, bytes) else text.encode())


def test_load_imdb_messages_name_what_is_missing_or_unreadable(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"^IMDB root not found: "):
        emb.load_imdb(tmp_path / "none")
    with pytest.raises(FileNotFoundError, match=r"^IMDB split 'train' not found: "):
        emb.load_imdb(tmp_path)
    (tmp_path / "train" / "pos").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"^IMDB folder not found: .*neg$"):
        emb.load_imdb(tmp_path)
    with pytest.raises(ValueError, match=r"^max_docs: must be ≥ 1 or None, got 0$"):
        emb.load_imdb(tmp_path, max_docs=0)
    bad = tmp_path / "bad"
    _imdb(bad, [b"\xff\xfe nope"], [])
    with pytest.raises(ValueError, match=r"0\.txt: not UTF-8 text \(invalid start byte\)$"):
        emb.load_imdb(bad)
    blank = tmp_path / "blank"
    _imdb(blank, ["ok"], [" \n"])
    with pytest.raises(ValueError, match=r"0\.txt: empty review file$"):
        emb.load_imdb(blank)


def test_load_imdb_with_one_class_only_and_a_prefix(tmp_path):
    _imdb(tmp_path / "p", ["x", "y", "z"], [])
    texts, labels = emb.load_imdb(tmp_path / "p", max_docs=2)
    assert texts == ["x", "y"] and labels.tolist() == [1.0, 1.0] and labels.dtype == F64
    texts, labels = emb.load_imdb(tmp_path / "p", max_docs=1)
    assert texts == ["x"]
    _imdb(tmp_path / "n", [], ["u", "w"])
    texts, labels = emb.load_imdb(tmp_path / "n")
    assert texts == ["u", "w"] and labels.tolist() == [-1.0, -1.0]


def test_load_imdb_names_a_missing_positive_folder(tmp_path):
    (tmp_path / "train" / "neg").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match=r"^IMDB folder not found: .*pos$"):
        emb.load_imdb(tmp_path)


def test_load_yelp_polarity_rows_labels_and_the_prefix(tmp_path):
    path = tmp_path / "y.csv"
    path.write_text('" 2 ","a\\nb"\n"1","c"\n"9","never read"\n', encoding="utf-8")
    texts, labels = emb.load_yelp_polarity(path, max_docs=2)
    assert texts == ["a b", "c"] and labels.tolist() == [1.0, -1.0] and labels.dtype == F64
    with pytest.raises(ValueError, match=r"y\.csv: row 3: label must be 1 or 2, got '9'$"):
        emb.load_yelp_polarity(path)
    with pytest.raises(ValueError, match=r"^max_docs: must be ≥ 1 or None, got -1$"):
        emb.load_yelp_polarity(path, max_docs=-1)
    short = tmp_path / "s.csv"
    short.write_text('"1","ok"\n"2"\n', encoding="utf-8")
    with pytest.raises(
        ValueError, match=r"s\.csv: row 2: expected 2 fields \(label, text\), got 1$"
    ):
        emb.load_yelp_polarity(short)
    with pytest.raises(FileNotFoundError, match=r"^Yelp CSV not found: "):
        emb.load_yelp_polarity(tmp_path / "missing.csv")


def test_load_yelp_polarity_keeps_a_quoted_line_break_as_written(tmp_path):
    """The file is opened with newline="" (as the csv module requires): a CR LF inside a quoted
    review reaches the text unchanged."""
    path = tmp_path / "crlf.csv"
    path.write_bytes(b'"2","first\r\nsecond"\r\n"1","x"\r\n')
    texts, labels = emb.load_yelp_polarity(path)
    assert texts == ["first\r\nsecond", "x"] and labels.tolist() == [1.0, -1.0]


# =============================================================================================
# models.problems.nonlinear_head: the problem, its heads and gradients
# =============================================================================================

# n = 1, T = 2, d = 2: x₀ = e₁, x₁ = e₂, z = (1, 2); with W = [[1, 2], [3, 4]] the logits are
# a₀ = (Wz)₁ = 5 and a₁ = (Wz)₂ = 11.
NH_X = [[[1.0, 0.0], [0.0, 1.0]]]
NH_Z = [[1.0, 2.0]]
NH_W = [[1.0, 2.0], [3.0, 4.0]]


def _nh(head="relu", V=None, y=(1.0,), lam=0.0, **kw) -> NonlinearHeadProblem:
    if V is None:
        V = [[1.0, 0.0], [0.0, 1.0]] if head == "relu" else [1.0, -2.0]
    return NonlinearHeadProblem(X=NH_X, Z=NH_Z, y=list(y), V=V, head=head, lam=lam, **kw)


def test_nonlinear_problem_stores_float64_tensors_and_its_sizes():
    p = _nh(seed=3)
    for name in ("X", "Z", "y", "V"):
        value = getattr(p, name)
        assert isinstance(value, torch.Tensor) and value.dtype == F64, name
    assert (p.n, p.T, p.d) == (1, 2, 2) and p.seed == 3 and p.head == "relu" and p.lam == 0.0
    q = NonlinearHeadProblem(
        X=torch.tensor(NH_X, dtype=torch.float32), Z=NH_Z, y=[1], V=np.eye(2, dtype=np.float32)
    )
    assert q.X.dtype == F64 and q.V.dtype == F64 and q.y.dtype == F64


@pytest.mark.parametrize(
    "change, message",
    [
        ({"head": "tanh"}, r"^head: expected one of \('relu', 'lambda'\), got 'tanh'$"),
        ({"X": [[1.0, 0.0]]}, r"^X: expected 3 dimensions, got shape \(1, 2\)$"),
        ({"X": [[[math.nan, 0.0], [0.0, 1.0]]]}, r"^X: contains NaN or infinity$"),
        ({"Z": [[1.0, 2.0, 3.0]]}, r"^Z: expected shape \(1, 2\) \(one per input\), got \(1, 3\)$"),
        ({"Z": [1.0, 2.0]}, r"^Z: expected 2 dimensions, got shape \(2,\)$"),
        ({"y": [1.0, -1.0]}, r"^y: expected 1 labels in ±1, got \[1\.0, -1\.0\]$"),
        ({"y": [0.5]}, r"^y: expected 1 labels in ±1, got \[0\.5\]$"),
        ({"y": [[1.0]]}, r"^y: expected 1 dimensions, got shape \(1, 1\)$"),
        ({"V": [1.0, 2.0]}, r"^V: expected 2 dimensions, got shape \(2,\)$"),
        ({"V": np.eye(3)}, r"^V: expected shape \(2, 2\) for the relu head, got \(3, 3\)$"),
        ({"V": np.eye(2), "head": "lambda"}, r"^V: expected 1 dimensions, got shape \(2, 2\)$"),
        (
            {"V": [1.0, 2.0, 3.0], "head": "lambda"},
            r"^V: expected shape \(2,\) for the lambda head, got \(3,\)$",
        ),
        ({"lam": math.inf}, r"^lam: expected a finite number, got inf$"),
    ],
)
def test_nonlinear_problem_refuses_bad_input_with_the_field_and_the_shapes(change, message):
    args = {"X": NH_X, "Z": NH_Z, "y": [1.0], "V": np.eye(2), "head": "relu", "lam": 0.0}
    args.update(change)
    with pytest.raises(ValueError, match=message):
        NonlinearHeadProblem(**args)


def test_nonlinear_problem_checks_w():
    p = _nh()
    with pytest.raises(ValueError, match=r"^W: expected shape \(2, 2\), got \(3, 3\)$"):
        p.logits(np.eye(3))
    with pytest.raises(ValueError, match=r"^W: expected 2 dimensions, got shape \(4,\)$"):
        p.output(np.zeros(4))
    with pytest.raises(ValueError, match=r"^W: contains NaN or infinity$"):
        p.softmax([[math.inf, 0.0], [0.0, 0.0]])


def test_logits_softmax_keys_and_outputs_by_hand():
    p = _nh()
    assert p.logits(NH_W).tolist() == [[5.0, 11.0]]
    s0, s1 = 1 / (1 + math.exp(6.0)), 1 / (1 + math.exp(-6.0))
    torch.testing.assert_close(p.softmax(NH_W), _t([[s0, s1]]), rtol=1e-15, atol=0)
    assert p.keys.tolist() == [[[1.0, 2.0, 0.0, 0.0], [0.0, 0.0, 1.0, 2.0]]]
    assert nh.cross_keys(NH_X, NH_Z).tolist() == p.keys.tolist()
    # ReLU head with V = I: u = (1 − s₁, s₁) ≥ 0, f = Σ ReLU(u) = 1
    assert float(p.output(NH_W)[0]) == pytest.approx(1.0, abs=1e-15)
    assert float(p.loss_value(NH_W)) == pytest.approx(math.log1p(math.exp(-1.0)), rel=1e-15)
    # V = −I: every coordinate inactive, f = 0
    assert float(_nh(V=-np.eye(2)).output(NH_W)[0]) == 0.0
    # λ head, v = (1, −2), λ = 0.5: f = s₀ − 2s₁ − 0.5(s₀² + s₁²)
    lam = _nh("lambda", lam=0.5, y=(-1.0,))
    f = s0 - 2 * s1 - 0.5 * (s0**2 + s1**2)
    assert float(lam.output(NH_W)[0]) == pytest.approx(f, rel=1e-14)
    assert float(lam.loss_value(NH_W)) == pytest.approx(math.log1p(math.exp(f)), rel=1e-14)


def test_cross_keys_are_row_major_outer_products():
    X = [[[1.0, 2.0], [3.0, -1.0]], [[0.0, 1.0], [2.0, 0.0]]]
    Z = [[1.0, 10.0], [-1.0, 5.0]]
    keys = nh.cross_keys(X, Z)
    assert keys.shape == (2, 2, 4) and keys.dtype == np.float64
    assert keys[0].tolist() == [[1.0, 10.0, 2.0, 20.0], [3.0, 30.0, -1.0, -10.0]]
    assert keys[1].tolist() == [[0.0, 0.0, -1.0, 5.0], [-2.0, 10.0, 0.0, 0.0]]


def test_head_values_and_gradients_by_hand():
    relu_f, relu_g = nh._head(_t([[1.0, -1.0], [0.0, 2.0]]), "relu", torch.eye(2, dtype=F64), 0.0)
    assert relu_f.tolist() == [1.0, 2.0]
    # ReLU'(0) = 0: the coordinate at the kink is inactive
    assert relu_g.tolist() == [[1.0, 0.0], [0.0, 1.0]]
    V = _t([[1.0, 2.0], [3.0, 4.0]])  # pre = uᵀV; gradient Σ_active V[:, j]
    f, g = nh._head(_t([[1.0, 0.0]]), "relu", V, 0.0)
    assert f.tolist() == [3.0] and g.tolist() == [[3.0, 7.0]]
    f, g = nh._head(_t([[1.0, 2.0]]), "lambda", _t([3.0, -1.0]), 0.5)
    assert f.tolist() == [3.0 - 2.0 - 0.5 * 5.0] and g.tolist() == [[2.0, -3.0]]
    with pytest.raises(ValueError, match=r"^head: expected one of \('relu', 'lambda'\), got 'x'$"):
        nh._head(_t([[1.0]]), "x", _t([1.0]), 0.0)


def test_head_outputs_take_leading_batch_dimensions():
    p = _nh()
    W = _t(NH_W)
    out = nh.head_outputs(
        torch.stack([p.X, p.X]),
        torch.stack([p.Z, p.Z]),
        torch.stack([W, -W]),
        "relu",
        torch.stack([p.V, p.V]),
        0.0,
    )
    assert out.shape == (2, 1)
    torch.testing.assert_close(out[0], p.output(W), rtol=0, atol=0)
    torch.testing.assert_close(out[1], p.output(-W), rtol=0, atol=0)
    logits = nh._logits(torch.stack([p.X, p.X]), torch.stack([p.Z, p.Z]), torch.stack([W, -W]))
    assert logits.tolist() == [[[5.0, 11.0]], [[-5.0, -11.0]]]


def test_gradient_is_the_central_difference_of_the_loss():
    p = NonlinearHeadProblem(
        X=[[[1.0, 0.5], [-0.5, 1.0], [0.2, 0.1]], [[0.3, -1.0], [1.0, 1.0], [0.0, 0.4]]],
        Z=[[0.5, -1.0], [1.0, 0.3]],
        y=[1.0, -1.0],
        V=[0.7, -0.4],
        head="lambda",
        lam=0.3,
    )
    W = np.array([[0.2, -0.4], [0.9, 0.1]])
    h = 1e-6
    fd = np.zeros((2, 2))
    for r in range(2):
        for c in range(2):
            E = np.zeros((2, 2))
            E[r, c] = h
            fd[r, c] = (float(p.loss_value(W + E)) - float(p.loss_value(W - E))) / (2 * h)
    grad = p.gradient(W)
    assert isinstance(grad, np.ndarray) and grad.shape == (2, 2)
    np.testing.assert_allclose(grad, fd, rtol=0, atol=1e-9)
    M, G = p.gradient_log(W)
    assert isinstance(M, float) and isinstance(G, np.ndarray)
    np.testing.assert_allclose(math.exp(M) * G, fd, rtol=0, atol=1e-9)


def test_gradient_log_batches_a_zero_gradient_next_to_a_live_one():
    """Run 0 has every head inactive (V = −I on positive tokens): M = −inf, G̃ = 0; run 1 is
    the hand problem, whose e^M·G̃ is its autograd gradient, with max|G̃| of order one."""
    dead = NonlinearHeadProblem(X=[[[1.0, 0.5], [0.5, 1.0]]], Z=NH_Z, y=[1.0], V=-np.eye(2))
    live = _nh(V=[[1.0, -2.0], [0.5, 1.0]], y=(-1.0,))
    W = np.array([[0.1, 0.2], [-0.3, 0.4]])
    stack = [torch.stack([dead.X, live.X]), torch.stack([dead.Z, live.Z])]
    M, G = nh.gradient_log(
        *stack,
        torch.stack([dead.y, live.y]),
        torch.tensor(np.stack([W, W])),
        "relu",
        torch.stack([dead.V, live.V]),
        0.0,
    )
    assert M[0] == -math.inf and not G[0].any()
    assert math.isfinite(float(M[1]))
    np.testing.assert_allclose(math.exp(M[1]) * G[1].numpy(), live.gradient(W), rtol=1e-12)
    assert 0.1 < float(G[1].abs().max()) < 10


# =============================================================================================
# the official data, W(0), NGD
# =============================================================================================


def test_official_relu_problem_fields_and_unit_rows():
    p = nh.official_relu_problem(4, 3, 5, 6)
    assert p.head == "relu" and p.lam == 0.0 and p.seed == 6
    assert (p.n, p.T, p.d) == (4, 3, 5) and p.y.dtype == F64
    assert set(p.y.tolist()) <= {-1.0, 1.0} and bool((p.y == -1).any())
    np.testing.assert_allclose(torch.linalg.vector_norm(p.Z, dim=-1), 1.0, atol=1e-6)


def test_official_init_is_uniform_on_the_nn_linear_interval():
    W = nh.official_init(40, 3)
    bound = 1 / math.sqrt(40)
    assert W.shape == (40, 40) and W.dtype == np.float64
    assert np.abs(W).max() <= bound and np.abs(W).max() > 0.99 * bound
    assert W.min() < -0.99 * bound and W.max() > 0.99 * bound
    assert float((W**2).mean()) == pytest.approx(bound**2 / 3, rel=0.1)  # uniform variance
    assert abs(float(W.mean())) < 0.1 * bound
    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float32)
    try:
        again = nh.official_init(40, 3)
    finally:
        torch.set_default_dtype(before)
    assert again.dtype == np.float64 and np.array_equal(again, W)


def _ngd_problem():
    return _nh(V=[[1.0, -2.0], [0.5, 1.0]], y=(-1.0,))


def test_ngd_step_is_lr_times_the_unit_gradient():
    p = _ngd_problem()
    W0 = np.array([[0.1, 0.2], [-0.3, 0.4]])
    g = p.gradient(W0)
    for exact in (True, False):
        run = nh.ngd_runs([p], W0[None], lr=0.25, steps=1, exact=exact)
        assert set(run.Ws) == {1} and run.Ws[1].shape == (1, 2, 2)
        np.testing.assert_allclose(run.Ws[1][0], W0 - 0.25 * g / np.linalg.norm(g), atol=1e-14)
        assert run.broken.tolist() == [False] and run.why == [""]
        assert 0.0 <= run.seconds < 60.0
    default = nh.ngd_runs([p], W0[None], steps=1)  # lr = 0.1
    assert np.linalg.norm(default.Ws[1][0] - W0) == pytest.approx(0.1, rel=1e-12)


def test_ngd_with_the_lambda_head_and_integer_starts():
    p = NonlinearHeadProblem(
        X=[[[1.0, 0.5], [-0.5, 1.0]]],
        Z=[[0.5, -1.0]],
        y=[1.0],
        V=[0.7, -0.4],
        head="lambda",
        lam=0.3,
    )
    g = p.gradient(np.zeros((2, 2)))
    for exact in (True, False):
        run = nh.ngd_runs([p], [[[0, 0], [0, 0]]], lr=0.5, steps=1, exact=exact)
        np.testing.assert_allclose(run.Ws[1][0], -0.5 * g / np.linalg.norm(g), atol=1e-14)


def test_ngd_takes_the_exact_direction_by_default():
    """At saturation (second probabilities ≤ 1e-16, tests/test_nonlinear_head.py) the exact and
    the autograd directions differ: the default step is the exact one."""
    p = nh.official_relu_problem(3, 4, 3, 18)
    W = np.random.default_rng(3).normal(size=(3, 3))
    W *= 150.0 / np.linalg.norm(W)
    default = nh.ngd_runs([p], W[None], steps=1).Ws[1]
    exact = nh.ngd_runs([p], W[None], steps=1, exact=True).Ws[1]
    naive = nh.ngd_runs([p], W[None], steps=1, exact=False).Ws[1]
    assert np.array_equal(default, exact)
    assert np.abs(naive - exact).max() > 1e-6


def test_ngd_records_the_requested_steps_the_start_and_the_last():
    p = _ngd_problem()
    W0 = np.array([[0.1, 0.2], [-0.3, 0.4]])
    run = nh.ngd_runs([p], W0[None], steps=3, record=(0, 2))
    assert sorted(run.Ws) == [0, 2, 3]
    assert np.array_equal(run.Ws[0][0], W0)
    one = nh.ngd_runs([p], W0[None], steps=2)
    assert sorted(one.Ws) == [2] and np.array_equal(one.Ws[2], run.Ws[2])
    for k in (2, 3):
        assert np.linalg.norm(run.Ws[k][0] - run.Ws[k - 1 if k == 3 else 0][0]) == pytest.approx(
            0.1 * (1 if k == 3 else 2), rel=0.05
        )


def test_ngd_runs_its_documented_default_number_of_steps():
    run = nh.ngd_runs([_ngd_problem()], np.zeros((1, 2, 2)))
    assert sorted(run.Ws) == [2001]


def test_ngd_freezes_a_non_finite_run_and_keeps_its_first_reason():
    p = _ngd_problem()
    W0 = np.stack([np.array([[math.nan, 0.0], [0.0, 0.0]]), np.array([[0.1, 0.2], [-0.3, 0.4]])])
    run = nh.ngd_runs([p, p], W0, steps=3, record=(1,))
    assert run.broken.tolist() == [True, False]
    assert run.why == ["non-finite gradient at step 1", ""]
    assert np.isnan(run.Ws[3][0][0, 0]) and run.Ws[3][0][1, 1] == 0.0  # frozen where it was
    alone = nh.ngd_runs([p], W0[1:], steps=3)
    np.testing.assert_allclose(run.Ws[3][1], alone.Ws[3][0], atol=1e-15)


def test_ngd_refuses_mismatched_problems_and_starts():
    p = _ngd_problem()
    with pytest.raises(ValueError, match=r"^problems: expected at least one problem$"):
        nh.ngd_runs([], np.zeros((0, 2, 2)))
    other = _nh("lambda", lam=0.5)
    with pytest.raises(ValueError, match=r"^problems: every problem must have the same head"):
        nh.ngd_runs([p, other], np.zeros((2, 2, 2)))
    lam2 = _nh("lambda", lam=0.25)
    with pytest.raises(ValueError, match=r"^problems: every problem must have the same head"):
        nh.ngd_runs([other, lam2], np.zeros((2, 2, 2)))
    with pytest.raises(ValueError, match=r"^W0s: expected shape \(1, 2, 2\), got \(2, 2\)$"):
        nh.ngd_runs([p], np.zeros((2, 2)))


def test_inactive_inputs_include_the_boundary_u_v_equal_zero():
    p = _nh(V=np.zeros((2, 2)))  # u V = 0 exactly: f is 0 around W, inactive
    assert nh.inactive_inputs(p, np.zeros((2, 2))).tolist() == [True]
    assert nh.inactive_inputs(_nh(V=-np.eye(2)), NH_W).tolist() == [True]
    mixed = _nh(V=[[-1.0, 0.0], [0.0, 1.0]])  # the second coordinate is active
    assert nh.inactive_inputs(mixed, NH_W).tolist() == [False]
    lam = _nh("lambda")
    out = nh.inactive_inputs(lam, NH_W)
    assert out.dtype == bool and out.tolist() == [False]
    # T = 3 tokens in d = 2, two inputs: u_i is the attention mixture of input i's tokens
    X = [[[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]], [[-1.0, 0.0], [-1.0, 0.0], [-1.0, 0.0]]]
    p3 = NonlinearHeadProblem(X=X, Z=[[1.0, 0.0], [1.0, 0.0]], y=[1.0, -1.0], V=np.eye(2))
    assert nh.inactive_inputs(p3, np.eye(2)).tolist() == [False, True]


# =============================================================================================
# rules, selected sets, W_fin / W_dir systems, SVM-eq
# =============================================================================================


def test_official_rejection_on_its_thresholds():
    assert nh.official_rejection([[1 - 2e-6, 2e-6]]) == nh.AMBIGUOUS
    assert nh.AMBIGUOUS == "ambiguous: a final probability in (1e-6, 1e-3]"
    assert nh.FINITE == "finite solution: no final probability ≤ 1e-6"
    assert nh.official_rejection([[1.0, 0.0]]) is None
    assert nh.official_rejection([[0.999, 0.001 + 1e-12]]) == nh.FINITE


def test_selected_sets_use_the_threshold_inclusively():
    assert nh.selected_sets([[0.5, 0.2, 0.1]], threshold=0.2).tolist() == [[True, True, False]]
    assert nh.selected_sets([[0.999, 1e-3, 9e-4]]).tolist() == [[True, True, False]]


def test_fin_and_dir_systems_row_by_row():
    keys = np.array([[[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]]])
    logits = np.array([[0.5, -1.0, 2.0]])
    sel = np.array([[True, False, True]])
    A, b = nh.fin_system(keys, logits, sel)
    assert A.tolist() == [[2.0, 1.0]] and b.tolist() == [1.5]  # k₂ − k₀, a₂ − a₀
    A, b = nh.dir_system(keys, sel)
    # pairs (0, 1): k₀ − k₁ ≥ 1; (0, 2): ±(k₀ − k₂) ≥ 0; (1, 2): k₂ − k₁ ≥ 1
    assert A.tolist() == [[1.0, -2.0], [-2.0, -1.0], [2.0, 1.0], [3.0, -1.0]]
    assert b.tolist() == [1.0, 0.0, 0.0, 1.0]
    none = np.zeros((1, 3), dtype=bool)
    for A, b in (nh.fin_system(keys, logits, none), nh.dir_system(keys, none)):
        assert A.shape == (0, 2) and b.shape == (0,) and A.dtype == b.dtype == np.float64


def test_least_norm_fin_residual_is_relative_to_the_right_hand_side():
    w, res = nh.least_norm_fin(np.array([[1.0], [1.0]]), np.array([0.0, 2.0]))
    assert w.tolist() == pytest.approx([1.0], abs=1e-15)
    assert res == pytest.approx(1.0 / 3.0, rel=1e-14)  # max|Aw − b| = 1, 1 + max|b| = 3
    w, res = nh.least_norm_fin(np.array([[3.0, 4.0]]), np.array([-5.0]))
    assert w.tolist() == pytest.approx([-0.6, -0.8], abs=1e-15) and res <= 1e-16
    w, res = nh.least_norm_fin(np.zeros((0, 3)), np.zeros(0))
    assert w.tolist() == [0.0, 0.0, 0.0] and res == 0.0


def _svmeq_case():
    """The hand case of tests/test_nonlinear_head.py: z = e₁, x = (1, 1), (1, −1), (−1, 0); only
    W's first column w acts. W = [[20, 0], [−0.35, 0]]: logits 19.65, 20.35, −20."""
    X = [[[1.0, 1.0], [1.0, -1.0], [-1.0, 0.0]]]
    p = NonlinearHeadProblem(X=X, Z=[[1.0, 0.0]], y=[1.0], V=np.eye(2))
    return p, np.array([[20.0, 0.0], [-0.35, 0.0]])


def test_svmeq_optimal_fields():
    p, W = _svmeq_case()
    eq = nh.svmeq(p, W, W)
    assert eq.ok and eq.status == "optimal" and eq.reason == ""
    assert eq.fin_residual == 0.0 and eq.dir_solution.ok
    np.testing.assert_allclose(eq.W_dir, [[0.5, 0.0], [0.0, 0.0]], atol=1e-12)
    np.testing.assert_allclose(eq.W_fin, [[0.0, 0.0], [-0.35, 0.0]], atol=1e-15)
    assert eq.R == pytest.approx(40.0, rel=1e-12)
    np.testing.assert_allclose(eq.W, eq.W_fin + eq.R * eq.W_dir, atol=0)


def test_svmeq_reads_the_selection_at_the_probe_and_fits_r_to_the_iterate():
    """threshold 0.5 keeps token 1 only (s ≈ (0.33, 0.67, 0)): no W_fin equalities, W_dir is the
    single-token SVM (1/4, −1/2), R = ⟨W, W_dir⟩/‖W_dir‖² = 5.175/0.3125 = 16.56."""
    p, W = _svmeq_case()
    eq = nh.svmeq(p, W, W, threshold=0.5)
    assert eq.selected.tolist() == [[False, True, False]]
    np.testing.assert_array_equal(eq.W_fin, np.zeros((2, 2)))
    np.testing.assert_allclose(eq.W_dir, [[0.25, 0.0], [-0.5, 0.0]], atol=1e-12)
    assert eq.R == pytest.approx(16.56, rel=1e-12)
    np.testing.assert_allclose(eq.W, 16.56 * eq.W_dir, rtol=1e-12)
    twice = nh.svmeq(p, W, 2 * W, threshold=0.5)  # R is fitted to the second argument
    assert twice.R == pytest.approx(2 * 16.56, rel=1e-12)
    assert twice.selected.tolist() == eq.selected.tolist()


def test_svmeq_fin_tolerance_is_a_strict_upper_bound(monkeypatch):
    p, W = _svmeq_case()  # its W_fin system is solved with residual exactly 0
    monkeypatch.setattr(nh, "FIN_TOL", 0.0)
    assert nh.svmeq(p, W, W).ok
    monkeypatch.setattr(nh, "FIN_TOL", -1.0)
    eq = nh.svmeq(p, W, W)
    assert eq.status == "infeasible" and not eq.ok
    assert eq.reason == "W_fin: inconsistent equalities"
    assert eq.W_fin is None and eq.W_dir is None and eq.dir_solution is None and eq.W is None
    assert eq.fin_residual == 0.0 and math.isnan(eq.R)
    assert eq.selected.tolist() == [[True, True, False]]


def test_svmeq_reports_the_w_dir_oracle_and_its_reason():
    X = [[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]], [[1.0, 0.0], [0.0, 1.5], [0.0, 0.0]]]
    p = NonlinearHeadProblem(X=X, Z=[[1.0, 0.0], [1.0, 0.0]], y=[1.0, -1.0], V=np.eye(2))
    W = np.array([[18.0, 0.0], [14.0, 0.0]])
    eq = nh.svmeq(p, W, W)
    assert eq.status == "infeasible" and eq.dir_solution.status == "infeasible"
    assert eq.reason == f"W_dir: {eq.dir_solution.reason}" and eq.dir_solution.reason
    assert eq.W_fin is None and eq.W_dir is None and eq.W is None and math.isnan(eq.R)
    assert eq.fin_residual <= 1e-14
    assert eq.selected.tolist() == [[True, True, False], [True, True, False]]


def test_svmeq_with_every_token_selected_has_no_direction():
    """At W = 0 the attention is uniform (1/3 each): every token is selected, W_dir has no
    margin to meet and is 0; W_fin (= 0, the logits being equal) is still given."""
    p, _ = _svmeq_case()
    zero = np.zeros((2, 2))
    eq = nh.svmeq(p, zero, np.ones((2, 2)))
    assert eq.status == "infeasible" and eq.reason == "W_dir = 0" and not eq.ok
    assert eq.selected.tolist() == [[True, True, True]]
    assert np.array_equal(eq.W_fin, zero) and np.array_equal(eq.W_dir, zero)
    assert eq.dir_solution.ok and eq.fin_residual == 0.0
    assert eq.W is None and math.isnan(eq.R)


def test_svmeq_refuses_an_outcome_without_a_string_reason():
    with pytest.raises(ValueError, match="^reason:"):
        nh.SVMEq("infeasible", np.zeros((1, 1)), None, 0.0, None, None, math.nan, None, None)


def test_single_token_svm_is_the_att_svm_on_the_cross_keys():
    p, _ = _svmeq_case()
    sol = nh.single_token_svm(p, [1])
    assert sol.ok
    np.testing.assert_allclose(sol.x.reshape(2, 2), [[0.25, 0.0], [-0.5, 0.0]], atol=1e-12)
