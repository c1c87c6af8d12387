"""Unit tests of the experiment models' read-outs (models/problems/embedding.py, §4.2) and of what
the one-step controls rest on (§3.1): the key scores the `<cls>` attention reads, and the named
mistake of control EMB-N3-EXACT."""

from __future__ import annotations

import math

import pytest
import torch

from models.problems.embedding import (
    EmbeddingProblem,
    OneLayerModel,
    TwoLayerModel,
    average_signed_frequency,
    cls_readout,
    one_step,
    uniform_token_problem,
)
from strategies import gaussian_init

F64 = torch.float64


def _sequences(vocab: int = 12, n: int = 9, T: int = 5, seed: int = 0) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    seqs = torch.randint(0, vocab - 2, (n, T), generator=gen)  # the last two tokens never occur
    return seqs


def test_one_layer_key_scores_are_the_embedding_scores():
    """One layer: the keys are E_s, so the mean over occurrences is ⟨E_s, w⟩ exactly."""
    model = OneLayerModel(12, 6, seed=3)
    with torch.no_grad():
        model.p.copy_(torch.randn(6, generator=torch.Generator().manual_seed(1), dtype=F64))
    seqs = _sequences()
    for w in (model.p, model.v):
        scores, counts = model.key_scores(seqs, w)
        occurs = counts > 0
        assert torch.equal(counts, torch.bincount(seqs.reshape(-1), minlength=12).to(F64))
        assert torch.allclose(scores[occurs], (model.E @ w).detach()[occurs], rtol=1e-14)
        assert bool(torch.isnan(scores[~occurs]).all()) and int((~occurs).sum()) == 2


def test_two_layer_key_scores_average_the_layernorm_outputs():
    """Two layers: the score of s is the mean of ⟨H1_ji, w⟩ over the positions holding s, where
    H1 is what forward() feeds the `<cls>` read-out, and it differs from ⟨E_s, w⟩."""
    model = TwoLayerModel(12, 6, seed=4)
    with torch.no_grad():
        model.p.copy_(torch.randn(6, generator=torch.Generator().manual_seed(2), dtype=F64))
    seqs = _sequences(seed=5)
    scores, counts = model.key_scores(seqs, model.p)
    with torch.no_grad():
        H = model.hidden(seqs)
        for s in range(10):
            where = seqs == s
            if bool(where.any()):
                expected = (H[where] @ model.p).mean()
                assert float(scores[s]) == pytest.approx(float(expected), rel=1e-12, abs=1e-14)
                assert int(counts[s]) == int(where.sum())
        # the `<cls>` logits of forward() are these per-position scores
        logits = H @ model.p
        direct = torch.softmax(logits, -1).mul(H @ model.v).sum(-1)
        assert torch.allclose(model(seqs), direct, rtol=1e-12)
    input_scores = (model.E @ model.p).detach()
    assert not torch.allclose(scores[:10], input_scores[:10], rtol=1e-3)


def test_exact_alignment_holds_when_the_named_mistake_is_absent():
    """EMB-N3-EXACT names one mistake, h_j = 1/2 (f⁰ = 0). With v ⊥ every row of E⁰ the
    initial logits vanish and the one-step shift is exactly η0α_s/2: the control's identity
    then holds to rounding, so nothing but f⁰ ≠ 0 can refute it."""
    base = uniform_token_problem(seed=7, n=40, T=6, S=10, d=16)
    E0 = base.E
    # v: a unit vector orthogonal to every row of E⁰ (|S| = 10 < d = 16)
    _, _, Vh = torch.linalg.svd(E0, full_matrices=True)
    v = Vh[-1] / torch.linalg.vector_norm(Vh[-1])
    problem = EmbeddingProblem(sequences=base.sequences, y=base.y, E=E0, v=v)
    eta0 = 10.0
    step = one_step(problem, eta0)
    assert float(step.f0.abs().max()) < 1e-15
    alpha = average_signed_frequency(base.sequences, base.y, 10)
    error = float((step.shift - eta0 / 2 * alpha).abs().max())
    assert error <= 1e-12 * eta0 * float(step.alpha_bar.max())
    # and with the protocol's generic head it fails, by the R2 term (1/4)|f⁰|ᾱ
    generic = one_step(base, eta0)
    gap = (generic.shift - eta0 / 2 * alpha).abs()
    assert float(gap.max()) > 1e-6 * eta0
    assert bool((gap <= eta0 * generic.r2_bound + 1e-12).all())


def test_event_probability_formula():
    """EMB-L41-EVENT's exact yardstick assumes the |S| scores ⟨E⁰_s, v⟩ are N(0, 1/d) for
    ‖v‖ = 1: checked on the score law itself (mean 0, variance 1/d) at d = 64."""
    d, S, draws = 64, 40, 400
    gen = torch.Generator().manual_seed(0)
    scores = torch.stack([E @ v for E, v in (gaussian_init(gen, S, d) for _ in range(draws))])
    var = float(scores.var()) * d
    assert abs(float(scores.mean())) < 4 / math.sqrt(d * S * draws)
    assert var == pytest.approx(1.0, abs=0.05)


@pytest.mark.parametrize("train_v", [True, False])
def test_one_layer_forward_is_the_cls_readout_of_its_embeddings(train_v):
    """OneLayerModel gathers the scalars (E p)_X and (E v)_X instead of the rows E_X: the same
    logits and the same gradients as cls_readout(E_X, p, v), up to the rounding of the dot
    products."""
    model = OneLayerModel(12, 6, train_v=train_v, seed=3)
    with torch.no_grad():
        model.p.copy_(torch.randn(6, generator=torch.Generator().manual_seed(1), dtype=F64))
    seqs = _sequences()
    params = [q for q in model.parameters() if q.requires_grad]
    fast = model(seqs)
    grads_fast = torch.autograd.grad(fast.square().sum(), params)
    direct = cls_readout(model.E[seqs], model.p, model.v)
    grads_direct = torch.autograd.grad(direct.square().sum(), params)
    assert torch.allclose(fast, direct, rtol=1e-13, atol=1e-15)
    assert not torch.allclose(fast, cls_readout(model.E[seqs], -model.p, model.v), rtol=1e-6)
    for g, h in zip(grads_fast, grads_direct, strict=True):
        assert torch.allclose(g, h, rtol=1e-12, atol=1e-15)
