"""Negative controls for arXiv 2505.17282: plausible wrong variants, each refuted by a search.

Spec ``spec/embeddings.md`` §5 (N1–N4, N6–N11, N13; N12 is not discriminative and is left out)
and controls that drop one hypothesis of a result. Each test states the WRONG claim as if it
were true (``expected="refuted"``): it passes when Hypothesis finds a counterexample, and the
report keeps the shrunk instance. Instances come from the public strategies; the flows follow
the protocol of ``claims_flow`` (one step from p⁰ = 0, E¹ frozen, gradient flow on p traced
by ``models.flows.dynamics``), through its cached ``run_flow``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from models.problems.attention import cosine, one_minus_cos
from models.problems.embedding import one_step
from strategies import (
    general_frequency_instances,
    single_relevant_token_instances,
    two_relevant_instances,
)
from theorems import evidence
from theorems.embeddings.common import (
    ONE_STEP_DATA,
    PAPER_CONSTANT,
    PRACTICAL_TARGET,
    R_FAR,
    RANK1_TOL,
    REGIME_DIMS,
    REGIME_ETA0,
    THEOREM_DATA,
    cls_svm_of,
    prepare,
    problem_of,
    run_flow,
    theorem_instance,
)
from theorems.framework.registry import claim

F64 = torch.float64

#: N3: exactness at float precision, relative to η0ᾱ_s (the largest shift |η0β_s| can be).
EXACT_TOL = 1e-12
#: N6: "selects all important tokens" read as: every relevant token of X_i keeps at least this
#: softmax mass at ‖p‖ = 10³ (any fixed ε > 0 would do; the observed mass is ~1e-99, spec N6).
ALL_IMPORTANT_MASS = 1e-3
#: N7: "the direction converges to the SVM" read as: converge() reaches 1 − cos ≤ 1e-5 to it.
DIRECTION_TOL = 1e-5
#: N8: the flow's selection is read with converge() at the practical target and this selection
#: tolerance (the protocol of EMB-SUFF-PRACTICAL-FLOW).
SELECT_TOL = 1e-3
#: N10: "the loss tends to 0" read at ‖p‖ = 10³, where L − L* is below 1e-300: L ≤ 1e-6.
LOSS_ZERO = 1e-6
#: N13: "p aligns with v": |cos(p, v)| ≥ 0.9 at ‖p‖ = 10³ (observed ≤ 0.03, spec N13).
ALIGN_COS = 0.9
#: N7: |S| > d. G1 with d ∈ {2, 3, 4} and |S| = n_pos + n_neg + n_irr ≥ 6 (spec N7: d = 2 or 4).
SMALL_DIMS = st.integers(2, 4)
#: N8: the regime where the spec saw the separation fail (d ≤ 128, η0 = 20, T ≥ 7), next to the
#: default G1 ranges.
NOISY_DATA = st.one_of(
    single_relevant_token_instances(),
    single_relevant_token_instances(
        T=st.integers(7, 8), d=st.sampled_from([64, 128]), eta0=st.just(20.0)
    ),
)


# ---------------------------------------------------------------------------------------------
# One-step controls (Lemma 4.1)
# ---------------------------------------------------------------------------------------------


def _worst_over_r3(error: torch.Tensor, step) -> tuple[int, float]:
    ratio = error / step.r3_tolerance
    worst = int(ratio.argmax())
    return worst, float(ratio[worst])


@claim("EMB-N1-RAWFREQ")
@given(inst=single_relevant_token_instances())
def test_n1_shift_follows_raw_frequency(inst):
    """(Wrong, N1) One GD step aligns the embeddings with the raw frequency ᾱ_s: for every token,
    |⟨E¹_s − E⁰_s, v⟩ − (η0/2)ᾱ_s| ≤ m(1 + η0ᾱ_s/4)."""
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.shift - inst.eta0 / 2 * step.alpha_bar)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |shift − η0ᾱ/2| is {ratio:.3g}× the R3 tolerance"


@claim("EMB-N2-SIGN")
@given(inst=single_relevant_token_instances())
def test_n2_wrong_sign(inst):
    """(Wrong sign, N2) With ‖v‖ = 1 and p⁰ = 0, one GD step gives, for every token,
    |⟨E¹_s, v⟩ + (η0/2)α_s| ≤ m(1 + η0ᾱ_s/4)."""
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.E1 @ inst.v + inst.eta0 / 2 * step.alpha)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |⟨E¹_s, v⟩ + η0α/2| is {ratio:.3g}× the R3 tolerance"


@claim("EMB-N2-FACTOR")
@given(inst=single_relevant_token_instances())
def test_n2_missing_half(inst):
    """(Wrong factor, N2) With ‖v‖ = 1 and p⁰ = 0, one GD step gives, for every token,
    |⟨E¹_s, v⟩ − η0α_s| ≤ m(1 + η0ᾱ_s/4)."""
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.E1 @ inst.v - inst.eta0 * step.alpha)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |⟨E¹_s, v⟩ − η0α| is {ratio:.3g}× the R3 tolerance"


REGIME_DATA = st.one_of(
    general_frequency_instances(d=st.sampled_from(REGIME_DIMS), eta0=REGIME_ETA0),
    single_relevant_token_instances(d=st.sampled_from(REGIME_DIMS), eta0=REGIME_ETA0),
)


@claim("EMB-N3-RATE")
@given(inst=REGIME_DATA)
def test_n3_error_rate_one_over_d(inst):
    """(Wrong rate, N3) In the regime of Lemma 4.1 (‖v‖ = 1, d ≥ 1024, η0 ∈ [0.1, 100],
    |S| ≤ 40), |⟨E¹_s, v⟩ − (η0/2)α_s| ≤ 11·η0·d^(−1) for every token."""
    step = one_step(problem_of(inst), inst.eta0)
    error = float(step.paper_error.max())
    bound = PAPER_CONSTANT * inst.eta0 / inst.d
    assert error <= bound, f"error {error:.3e} > 11η0/d = {bound:.3e}"


@claim("EMB-N3-CONST1")
@given(inst=REGIME_DATA)
def test_n3_constant_one(inst):
    """(Wrong) Lemma 4.1 with the constant 1 in place of 11: in its regime (‖v‖ = 1, d ≥ 1024,
    η0 ∈ [0.1, 100], |S| ≤ 40), |⟨E¹_s, v⟩ − (η0/2)α_s| ≤ η0·d^(−1/4) for every token."""
    step = one_step(problem_of(inst), inst.eta0)
    error = float(step.paper_error.max())
    bound = inst.eta0 * inst.d**-0.25
    assert error <= bound, f"error {error:.3e} > η0·d^(-1/4) = {bound:.3e}"


def _exact_alignment_error(step, inst) -> tuple[torch.Tensor, torch.Tensor]:
    """|⟨E¹_s − E⁰_s, v⟩ − η0α_s/2| per token, absolute and relative to η0ᾱ_s (0 for a token that
    never occurs: its shift is 0 = η0α/2 exactly)."""
    error = torch.abs(step.shift - inst.eta0 / 2 * step.alpha)
    scale = inst.eta0 * step.alpha_bar
    occurs = scale > 0
    return error, torch.where(occurs, error / torch.where(occurs, scale, 1.0), 0.0)


@claim("EMB-N3-EXACT")
@given(inst=ONE_STEP_DATA)
def test_n3_exact_alignment(inst):
    """(Wrong, N3) With p⁰ = 0 and ‖v‖ = 1, one GD step moves every embedding along v by exactly
    (η0/2)α_s: ⟨E¹_s − E⁰_s, v⟩ = (η0/2)α_s for every token."""
    step = one_step(problem_of(inst), inst.eta0)
    error, relative = _exact_alignment_error(step, inst)
    worst = int(relative.argmax())
    evidence.metric("max_abs_f0", float(step.f0.abs().max()))
    assert float(relative[worst]) <= EXACT_TOL, (
        f"token {worst}: ⟨E¹_s − E⁰_s, v⟩ − η0α_s/2 = {float(error[worst]):.3e}, "
        f"{float(relative[worst]):.3e} of η0ᾱ_s > {EXACT_TOL:g} (max|f⁰| = "
        f"{float(step.f0.abs().max()):.3e})"
    )


@claim("EMB-N4-P0")
@given(inst=ONE_STEP_DATA, p_seed=st.integers(0, 2**32 - 1))
def test_n4_rank_one_without_zero_init(inst, p_seed):
    """(Wrong, N4) R1 without p⁰ = 0: with p⁰ ~ N(0, I/d), one GD step on E still moves every
    embedding exactly along v (E¹ − E⁰ is rank one, along v)."""
    gen = torch.Generator().manual_seed(p_seed)
    p0 = torch.randn(inst.d, generator=gen, dtype=F64) / math.sqrt(inst.d)
    step = one_step(problem_of(inst), inst.eta0, p0=p0)
    assert step.rank_one_residual <= RANK1_TOL, (
        f"E¹ − E⁰ is not rank one along v: residual {step.rank_one_residual:.3e}"
    )


# ---------------------------------------------------------------------------------------------
# Flow controls (the gradient-flow theorem and §3.4)
# ---------------------------------------------------------------------------------------------


def _smallest_relevant_mass(inst, log_s: torch.Tensor) -> float:
    """The smallest attention any one relevant token (summed over its occurrences) keeps in any
    sequence that holds it; log_s: the log-softmax of the `<cls>` scores per position."""
    smallest = math.inf
    for s in inst.relevant:
        mask = inst.sequences == s
        holds = mask.any(-1)
        if bool(holds.any()):
            mass = torch.logsumexp(torch.where(mask, log_s, -math.inf), dim=-1)[holds].exp()
            smallest = min(smallest, float(mass.min()))
    return smallest


@claim("EMB-N6-ALLIMPORTANT")
@given(inst=two_relevant_instances())
def test_n6_all_important_tokens_selected(inst):
    """(Wrong, N6) Without the single-relevant-token assumption, when every sequence holds a
    strongly predictive token plus weaker relevant ones, gradient flow on p selects them all."""
    prep = prepare(inst)
    p_far = torch.from_numpy(run_flow(inst).path.final)
    smallest = _smallest_relevant_mass(inst, prep.prompt.log_softmax(p_far))
    assert smallest >= ALL_IMPORTANT_MASS, f"a relevant token keeps only {smallest:.3e} attention"


@claim("EMB-N7-DIM")
@given(inst=single_relevant_token_instances(d=SMALL_DIMS))
def test_n7_direction_without_enough_dimension(inst):
    """(Wrong, N7) The gradient-flow theorem without |S| ≤ d − 1: under Assumption 1 and the
    separation precondition, with |S| > d, p(t)/‖p(t)‖ converges to the `<cls>` SVM of s*."""
    prep = prepare(inst)
    if not prep.precondition:
        evidence.reject("precondition (§3.3): s*(i) is not the unique argmax of y⟨E¹_s, v⟩")
    svm = cls_svm_of(prep)
    assert svm.status != "infeasible", (
        f"the `<cls>` SVM is infeasible with |S| = {inst.vocab_size} > d = {inst.d}"
    )
    run = run_flow(inst)
    assert run.outcome.converged, f"converge(): {run.outcome.status} ({run.outcome.reason})"
    assert one_minus_cos(run.outcome.p, svm.x) <= DIRECTION_TOL, "direction differs from the SVM"


@claim("EMB-N8-NOISE")
@given(inst=NOISY_DATA)
def test_n8_flow_selects_alpha_argmax_regardless(inst):
    """(Wrong, N8) Under Assumption 1 and |S| ≤ d − 1 but without the separation precondition,
    gradient flow on p selects the α-important token s*(i) in every sequence, whatever d and η0."""
    prep = prepare(inst)
    if prep.precondition:
        return
    run = run_flow(inst, target=PRACTICAL_TARGET, select_tol=SELECT_TOL)
    if run.outcome.status == "inconclusive":
        evidence.inconclusive(run.outcome.reason)
    chosen = run.selected_tokens()
    wrong = torch.nonzero(chosen != inst.s_star).flatten().tolist()
    assert not wrong, (
        f"the flow selects {chosen[wrong].unique().tolist()} instead of s* in sequences {wrong[:5]}"
    )


@claim("EMB-N9-FINITE")
@given(inst=THEOREM_DATA)
def test_n9_flow_converges_to_finite_point(inst):
    """(Wrong, N9) Under the hypotheses of the gradient-flow theorem (Assumption 1, |S| ≤ d − 1,
    the separation precondition), gradient flow on p converges to a finite minimiser."""
    theorem_instance(inst)
    path = run_flow(inst).path
    stalled = any("stationary" in s or "stalled" in s for s in path.stops)
    assert stalled and path.norms.max() < R_FAR, (
        f"no stationary point: the flow reached ‖p‖ = {path.norms[-1]:.4g} ({path.stops[-1]})"
    )


@claim("EMB-N10-LOSSZERO")
@given(inst=THEOREM_DATA)
def test_n10_loss_goes_to_zero(inst):
    """(Wrong, N10) Under the hypotheses of the gradient-flow theorem, with E and v frozen, the
    loss tends to 0 along gradient flow on p."""
    prep = theorem_instance(inst)
    p_far = torch.from_numpy(run_flow(inst).path.final)
    loss = float(prep.prompt.loss_value(p_far))
    assert loss <= LOSS_ZERO, f"L(p) = {loss:.4g} at ‖p‖ = {float(p_far.norm()):.3g}"


def _inverted_pairs(inst, alpha: torch.Tensor, score: torch.Tensor) -> int:
    """How many pairs of tokens that occur have α_s < α_s' but score_s ≥ score_s'."""
    occurs = torch.zeros(inst.vocab_size, dtype=torch.bool)
    occurs[inst.sequences.unique()] = True
    alpha, score = alpha[occurs], score[occurs]
    below = alpha[:, None] < alpha[None, :]
    return int((below & ~(score[:, None] < score[None, :])).sum())


@claim("EMB-N11-MONOTONE-P")
@given(inst=THEOREM_DATA)
def test_n11_p_scores_monotone_in_alpha(inst):
    """(Wrong, N11) Under the hypotheses of the gradient-flow theorem, the `<cls>` scores increase
    with α: α_s < α_s' implies ⟨E¹_s, p(t)⟩ < ⟨E¹_s', p(t)⟩ for all tokens s, s' that occur."""
    prep = theorem_instance(inst)
    p_far = torch.from_numpy(run_flow(inst).path.final)
    inverted = _inverted_pairs(inst, prep.step.alpha, prep.step.E1 @ p_far)
    assert inverted == 0, f"{inverted} token pairs with α_s < α_s' have ⟨E¹_s, p⟩ ≥ ⟨E¹_s', p⟩"


@claim("EMB-N13-P-ALIGNS-V")
@given(inst=THEOREM_DATA)
def test_n13_p_aligns_with_v(inst):
    """(Wrong, N13) Under the hypotheses of the gradient-flow theorem, p aligns with v:
    cos(p(t), v) → ±1."""
    theorem_instance(inst)
    p_far = run_flow(inst).path.final
    c = abs(cosine(p_far, inst.v))
    evidence.metric("abs_cos_p_v", c)
    assert c >= ALIGN_COS, f"|cos(p, v)| = {c:.3g} at ‖p‖ = {float(np.linalg.norm(p_far)):.3g}"
