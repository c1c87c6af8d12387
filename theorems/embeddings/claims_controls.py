"""Negative controls for arXiv 2505.17282: plausible wrong variants, each refuted by a search.

Spec ``spec/embeddings.md`` §5 (N1–N4, N6–N11, N13; N12 is not discriminative and is left out)
and controls that drop one hypothesis of a result. Each test states the WRONG claim as if it
were true (``expected="refuted"``): it passes when Hypothesis finds a counterexample, and the
report keeps the shrunk instance. Instances come from the public strategies; the flows follow
the protocol of ``claims_flow`` (one step from p⁰ = 0, E¹ frozen, gradient flow on p traced
by ``models.dynamics``), through its cached ``run_flow``.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import given
from hypothesis import strategies as st

from models.attention import cosine, one_minus_cos
from models.embedding import one_step
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
    paper_error,
    prepare,
    problem_of,
    run_flow,
    theorem_instance,
)
from theorems.framework.registry import claim

F64 = torch.float64

#: N3: exactness at float precision, relative to η0ᾱ_s (the largest shift |η0β_s| can be).
EXACT_TOL = 1e-12
# N6: "selects all important tokens" read as: every relevant token of X_i keeps at least this
# softmax mass at ‖p‖ = 10³ (any fixed ε > 0 would do; the observed mass is ~1e-99, spec N6).
ALL_IMPORTANT_MASS = 1e-3
# N10: "the loss tends to 0" read at ‖p‖ = 10³, where L − L* is below 1e-300: L ≤ 1e-6.
LOSS_ZERO = 1e-6
# N13: "p aligns with v": |cos(p, v)| ≥ 0.9 at ‖p‖ = 10³ (observed ≤ 0.03, spec N13).
ALIGN_COS = 0.9
# N7: |S| > d. G1 with d ∈ {2, 3, 4} and |S| = n_pos + n_neg + n_irr ≥ 6 (spec N7: d = 2 or 4).
SMALL_DIMS = st.integers(2, 4)
# N8: the regime where the spec saw the separation fail (d ≤ 128, η0 = 20, T ≥ 7), next to the
# default G1 ranges.
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
    """N1 (wrong): one GD step aligns embeddings with the raw frequency: |⟨E¹_s − E⁰_s, v⟩ −
    (η0/2)ᾱ_s| ≤ m(1 + η0ᾱ_s/4) for every token (the instance-level R3 tolerance as yardstick),
    on G1 data."""
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.shift - inst.eta0 / 2 * step.alpha_bar)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |shift − η0ᾱ/2| is {ratio:.3g}× the R3 tolerance"


@claim("EMB-N2-SIGN")
@given(inst=single_relevant_token_instances())
def test_n2_wrong_sign(inst):
    """N2 (wrong sign): |⟨E¹_s, v⟩ + (η0/2)α_s| ≤ m(1 + η0ᾱ_s/4) for every token, on G1 data (‖v‖ =
    1, p⁰ = 0)."""
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.E1 @ inst.v + inst.eta0 / 2 * step.alpha)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |⟨E¹_s, v⟩ + η0α/2| is {ratio:.3g}× the R3 tolerance"


@claim("EMB-N2-FACTOR")
@given(inst=single_relevant_token_instances())
def test_n2_missing_half(inst):
    """N2 (missing factor 1/2): |⟨E¹_s, v⟩ − η0α_s| ≤ m(1 + η0ᾱ_s/4) for every token, on G1 data
    (‖v‖ = 1, p⁰ = 0)."""
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
    """N3 (too fast a rate): in the regime of Lemma 4.1 (‖v‖ = 1, d ≥ 1024, η0 ∈ [0.1, 100], |S| ≤
    40), |⟨E¹_s, v⟩ − (η0/2)α_s| ≤ 11·η0·d^(−1) for every token."""
    step = one_step(problem_of(inst), inst.eta0)
    error = float(paper_error(step, inst.v).max())
    bound = PAPER_CONSTANT * inst.eta0 / inst.d
    assert error <= bound, f"error {error:.3e} > 11η0/d = {bound:.3e}"


@claim("EMB-N3-CONST1")
@given(inst=REGIME_DATA)
def test_n3_constant_one(inst):
    """Lemma 4.1 with the constant 1 in place of 11 (wrong): in the regime of Lemma 4.1 (‖v‖ = 1, d
    ≥ 1024, η0 ∈ [0.1, 100], |S| ≤ 40), |⟨E¹_s, v⟩ − (η0/2)α_s| ≤ 1·η0·d^(−1/4) for every token."""
    step = one_step(problem_of(inst), inst.eta0)
    error = float(paper_error(step, inst.v).max())
    bound = inst.eta0 * inst.d**-0.25
    assert error <= bound, f"error {error:.3e} > η0·d^(-1/4) = {bound:.3e}"


@claim("EMB-N3-EXACT")
@given(inst=ONE_STEP_DATA)
def test_n3_exact_alignment(inst):
    """Exact alignment of the step (wrong; spec N3): with p⁰ = 0 and ‖v‖ = 1, one GD step moves
    every embedding along v by exactly (η0/2)α_s: ⟨E¹_s − E⁰_s, v⟩ = (η0/2)α_s for every token,
    up to float rounding (1e-12 relative to η0ᾱ_s), on G1 and G2 data. The mistake it names: the
    logistic derivative at the random initialisation taken as exactly −1/2 (h_j = 1/2), i.e. f⁰
    = 0."""
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.shift - inst.eta0 / 2 * step.alpha)
    scale = inst.eta0 * step.alpha_bar
    occurs = scale > 0  # a token that never occurs has shift 0 = η0α/2 exactly
    relative = torch.where(occurs, error / torch.where(occurs, scale, 1.0), 0.0)
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
    """N4 (R1 without p⁰ = 0, wrong): with p⁰ ~ N(0, I/d) instead of p⁰ = 0, one GD step on E still
    moves every embedding exactly along v: the update E¹ − E⁰ has rank-one residual ≤ 1e-10
    along v, on G1 and G2 data."""
    gen = torch.Generator().manual_seed(p_seed)
    p0 = torch.randn(inst.d, generator=gen, dtype=F64) / math.sqrt(inst.d)
    step = one_step(problem_of(inst), inst.eta0, p0=p0)
    assert step.rank_one_residual <= RANK1_TOL, (
        f"E¹ − E⁰ is not rank one along v: residual {step.rank_one_residual:.3e}"
    )


# ---------------------------------------------------------------------------------------------
# Flow controls (the gradient-flow theorem and §3.4)
# ---------------------------------------------------------------------------------------------


@claim("EMB-N6-ALLIMPORTANT")
@given(inst=two_relevant_instances())
def test_n6_all_important_tokens_selected(inst):
    """N6 (selection without the single-relevant-token assumption, wrong): when every sequence
    holds a strongly predictive token plus weaker relevant ones (α ≠ 0, not completely signed),
    the softmax selects all important tokens: along gradient flow on p (E¹ frozen, p(0) = 0),
    every relevant token of X_i keeps attention ≥ 1e-3 at ‖p‖ = 10³."""
    prep = prepare(inst)
    p_far = run_flow(inst).path.final
    log_s = prep.prompt.log_softmax(torch.from_numpy(p_far))
    # the smallest mass of any one relevant token (summed over its occurrences) in any sequence
    smallest = math.inf
    for s in inst.relevant:
        mask = inst.sequences == s
        holds = mask.any(-1)
        if bool(holds.any()):
            mass = torch.logsumexp(torch.where(mask, log_s, -math.inf), dim=-1)[holds].exp()
            smallest = min(smallest, float(mass.min()))
    assert smallest >= ALL_IMPORTANT_MASS, f"a relevant token keeps only {smallest:.3e} attention"


@claim("EMB-N7-DIM")
@given(inst=single_relevant_token_instances(d=SMALL_DIMS))
def test_n7_direction_without_enough_dimension(inst):
    """N7 (the theorem without |S| ≤ d − 1, wrong): under Assumption 1 and the §3.3 precondition
    but with |S| > d (d ∈ {2, 3, 4}), the direction of p(t) converges to the `<cls>` SVM of s*:
    that SVM is feasible, and converge() reaches 1 − cos ≤ 1e-5 to it."""
    prep = prepare(inst)
    if not prep.precondition:
        evidence.reject("precondition (§3.3): s*(i) is not the unique argmax of y⟨E¹_s, v⟩")
    svm = cls_svm_of(prep)
    assert svm.status != "infeasible", (
        f"the `<cls>` SVM is infeasible with |S| = {inst.vocab_size} > d = {inst.d}"
    )
    run = run_flow(inst)
    assert run.outcome.converged, f"converge(): {run.outcome.status} ({run.outcome.reason})"
    assert one_minus_cos(run.outcome.p, svm.x) <= 1e-5, "direction differs from the SVM"


@claim("EMB-N8-NOISE")
@given(inst=NOISY_DATA)
def test_n8_flow_selects_alpha_argmax_regardless(inst):
    """N8 (selection of the α-important token whatever the noise, wrong): under Assumption 1 and
    |S| ≤ d − 1 but without the separation precondition of §3.3, gradient flow on p (E¹ frozen,
    p(0) = 0) selects s*(i) in every sequence, for any d and η0."""
    prep = prepare(inst)
    if prep.precondition:
        return
    run = run_flow(inst, target=PRACTICAL_TARGET, select_tol=1e-3)
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
    """N9 (finite stationary point, wrong): under the hypotheses of the gradient-flow theorem
    (Assumption 1, |S| ≤ d − 1, §3.3 precondition), gradient flow on p converges to a finite
    minimiser: the traced path stops at a stationary point (∇L = 0, or the integrator stalls)
    before ‖p‖ reaches 10³."""
    theorem_instance(inst)
    path = run_flow(inst).path
    stalled = any("stationary" in s or "stalled" in s for s in path.stops)
    assert stalled and path.norms.max() < R_FAR, (
        f"no stationary point: the flow reached ‖p‖ = {path.norms[-1]:.4g} ({path.stops[-1]})"
    )


@claim("EMB-N10-LOSSZERO")
@given(inst=THEOREM_DATA)
def test_n10_loss_goes_to_zero(inst):
    """N10 (loss → 0, wrong): under the hypotheses of the gradient-flow theorem, with E and v
    frozen, the loss tends to 0 along gradient flow on p: L(p) ≤ 1e-6 at ‖p‖ = 10³."""
    prep = theorem_instance(inst)
    p_far = torch.from_numpy(run_flow(inst).path.final)
    loss = float(prep.prompt.loss_value(p_far))
    assert loss <= LOSS_ZERO, f"L(p) = {loss:.4g} at ‖p‖ = {float(p_far.norm()):.3g}"


@claim("EMB-N11-MONOTONE-P")
@given(inst=THEOREM_DATA)
def test_n11_p_scores_monotone_in_alpha(inst):
    """N11 (monotone p-scores, wrong): under the hypotheses of the gradient-flow theorem, the
    `<cls>` scores ⟨E¹_s, p(t)⟩ increase with α_s (only positive tokens are attended): at ‖p‖ =
    10³ along the flow, α_s < α_s' implies ⟨E¹_s, p⟩ < ⟨E¹_s', p⟩ for all tokens s, s' that
    occur."""
    prep = theorem_instance(inst)
    p_far = torch.from_numpy(run_flow(inst).path.final)
    occurs = torch.zeros(inst.vocab_size, dtype=torch.bool)
    occurs[inst.sequences.unique()] = True
    alpha = prep.step.alpha[occurs]
    score = (prep.step.E1 @ p_far)[occurs]
    below = alpha[:, None] < alpha[None, :]
    inverted = below & ~(score[:, None] < score[None, :])
    assert not bool(inverted.any()), (
        f"{int(inverted.sum())} token pairs with α_s < α_s' have ⟨E¹_s, p⟩ ≥ ⟨E¹_s', p⟩"
    )


@claim("EMB-N13-P-ALIGNS-V")
@given(inst=THEOREM_DATA)
def test_n13_p_aligns_with_v(inst):
    """N13 (p aligns with v, wrong): under the hypotheses of the gradient-flow theorem, cos(p(t),
    v) → ±1: |cos(p, v)| ≥ 0.9 at ‖p‖ = 10³ along the flow."""
    theorem_instance(inst)
    p_far = run_flow(inst).path.final
    c = abs(cosine(p_far, inst.v))
    evidence.metric("abs_cos_p_v", c)
    assert c >= ALIGN_COS, f"|cos(p, v)| = {c:.3g} at ‖p‖ = {float(np.linalg.norm(p_far)):.3g}"
