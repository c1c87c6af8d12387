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


@claim(
    id="EMB-N1-RAWFREQ",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N1 (wrong): one GD step aligns embeddings with the raw frequency:
    |⟨E¹_s − E⁰_s, v⟩ − (η0/2)ᾱ_s| ≤ m(1 + η0ᾱ_s/4) for every token (the instance-level R3
    tolerance as yardstick), on G1 data.""",
)
@given(inst=single_relevant_token_instances())
def test_n1_shift_follows_raw_frequency(inst):
    """Control EMB-N1-RAWFREQ.

    An irrelevant token (α = 0, ᾱ > 0) moves by ≈ 0, not η0ᾱ/2, and completely negative
    tokens move the other way (spec N1: passed 0/40). The paper's 11η0d^(-1/4) is too loose
    to expose it, hence the R3 yardstick (EMB-L41-R3 holds under it).
    """
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.shift - inst.eta0 / 2 * step.alpha_bar)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |shift − η0ᾱ/2| is {ratio:.3g}× the R3 tolerance"


@claim(
    id="EMB-N2-SIGN",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N2 (wrong sign): |⟨E¹_s, v⟩ + (η0/2)α_s| ≤ m(1 + η0ᾱ_s/4) for every token, on
    G1 data (‖v‖ = 1, p⁰ = 0).""",
)
@given(inst=single_relevant_token_instances())
def test_n2_wrong_sign(inst):
    """Control EMB-N2-SIGN.

    The error of the variant is η0|α_s| instead of ≤ m(1 + η0ᾱ/4) (spec N2: 0/40).
    """
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.E1 @ inst.v + inst.eta0 / 2 * step.alpha)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |⟨E¹_s, v⟩ + η0α/2| is {ratio:.3g}× the R3 tolerance"


@claim(
    id="EMB-N2-FACTOR",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N2 (missing factor 1/2): |⟨E¹_s, v⟩ − η0α_s| ≤ m(1 + η0ᾱ_s/4) for every token,
    on G1 data (‖v‖ = 1, p⁰ = 0).""",
)
@given(inst=single_relevant_token_instances())
def test_n2_missing_half(inst):
    """Control EMB-N2-FACTOR.

    The error of the variant is η0|α_s|/2 instead of ≤ m(1 + η0ᾱ/4) (spec N2: 0/40).
    """
    step = one_step(problem_of(inst), inst.eta0)
    error = torch.abs(step.E1 @ inst.v - inst.eta0 * step.alpha)
    worst, ratio = _worst_over_r3(error, step)
    assert ratio <= 1, f"token {worst}: |⟨E¹_s, v⟩ − η0α| is {ratio:.3g}× the R3 tolerance"


REGIME_DATA = st.one_of(
    general_frequency_instances(d=st.sampled_from(REGIME_DIMS), eta0=REGIME_ETA0),
    single_relevant_token_instances(d=st.sampled_from(REGIME_DIMS), eta0=REGIME_ETA0),
)


@claim(
    id="EMB-N3-RATE",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N3 (too fast a rate): in the regime of Lemma 4.1 (‖v‖ = 1, d ≥ 1024,
    η0 ∈ [0.1, 100], |S| ≤ 40), |⟨E¹_s, v⟩ − (η0/2)α_s| ≤ 11·η0·d^(−1) for every token.""",
)
@given(inst=REGIME_DATA)
def test_n3_error_rate_one_over_d(inst):
    """Control EMB-N3-RATE.

    The true error is about m(1 + η0/4) with m ~ d^(-1/2) (spec N3: 0.06 against 0.003 at d
    = 4096, η0 = 1).
    """
    step = one_step(problem_of(inst), inst.eta0)
    error = float(paper_error(step, inst.v).max())
    bound = PAPER_CONSTANT * inst.eta0 / inst.d
    assert error <= bound, f"error {error:.3e} > 11η0/d = {bound:.3e}"


@claim(
    id="EMB-N3-CONST1",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""Lemma 4.1 with the constant 1 in place of 11 (wrong): in the regime of Lemma 4.1
    (‖v‖ = 1, d ≥ 1024, η0 ∈ [0.1, 100], |S| ≤ 40),
    |⟨E¹_s, v⟩ − (η0/2)α_s| ≤ 1·η0·d^(−1/4) for every token.""",
)
@given(inst=REGIME_DATA)
def test_n3_constant_one(inst):
    """Control EMB-N3-CONST1.

    Brackets the constant: EMB-L41-BOUND holds with 11 and records the constant each draw
    needs; with 1 the bound fails at small η0, where the init term m does not scale with η0
    (spec §7 table: 6.9 at d = 1024, η0 = 0.1). For η0 ≥ 1 the constant 1 is still true
    (spec N3), so this control lives at the η0 ≈ 0.1 end of the regime.
    """
    step = one_step(problem_of(inst), inst.eta0)
    error = float(paper_error(step, inst.v).max())
    bound = inst.eta0 * inst.d**-0.25
    assert error <= bound, f"error {error:.3e} > η0·d^(-1/4) = {bound:.3e}"


@claim(
    id="EMB-N3-EXACT",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""Exact alignment of the step (wrong; spec N3): with p⁰ = 0 and ‖v‖ = 1, one GD
    step moves every embedding along v by exactly (η0/2)α_s: ⟨E¹_s − E⁰_s, v⟩ = (η0/2)α_s for
    every token, up to float rounding (1e-12 relative to η0ᾱ_s), on G1 and G2 data. The mistake
    it names: the logistic derivative at the random initialisation taken as exactly −1/2
    (h_j = 1/2), i.e. f⁰ = 0.""",
)
@given(inst=ONE_STEP_DATA)
def test_n3_exact_alignment(inst):
    """Control EMB-N3-EXACT.

    By R1 the shift is η0β_s, and β_s − α_s/2 = (1/n) Σ_j (h_j − 1/2) y_j n_s(X_j)/T: it
    vanishes when every f⁰_j = 0 (then h_j = 1/2) and only then, generically; R2 bounds it by
    (1/4) max_j|f⁰_j| ᾱ_s. The spec's literal form, ⟨E¹_s, v⟩ = (η0/2)α_s, was trivially
    false: the init term ⟨E⁰_s, v⟩ ~ N(0, 1/d) alone refutes it with probability 1, whatever
    the step does. Here the init term is subtracted, so only h ≠ 1/2 can refute the variant
    (tests/test_embedding_models.py: with v ⊥ every row of E⁰, so that f⁰ = 0, the identity
    holds to rounding). The metric 'max_abs_f0' records the size of the named mistake.
    """
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


@claim(
    id="EMB-N4-P0",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N4 (R1 without p⁰ = 0, wrong): with p⁰ ~ N(0, I/d) instead of p⁰ = 0, one GD step
    on E still moves every embedding exactly along v: the update E¹ − E⁰ has rank-one residual
    ≤ 1e-10 along v, on G1 and G2 data.""",
)
@given(inst=ONE_STEP_DATA, p_seed=st.integers(0, 2**32 - 1))
def test_n4_rank_one_without_zero_init(inst, p_seed):
    """Control EMB-N4-P0.

    With p⁰ ≠ 0 the gradient gains a component along p⁰ of relative size O(max|u_s − f|) ~
    d^(-1/2) (spec N4: residual 0.054). Controls an assumption of R1.
    """
    gen = torch.Generator().manual_seed(p_seed)
    p0 = torch.randn(inst.d, generator=gen, dtype=F64) / math.sqrt(inst.d)
    step = one_step(problem_of(inst), inst.eta0, p0=p0)
    assert step.rank_one_residual <= RANK1_TOL, (
        f"E¹ − E⁰ is not rank one along v: residual {step.rank_one_residual:.3e}"
    )


# ---------------------------------------------------------------------------------------------
# Flow controls (the gradient-flow theorem and §3.4)
# ---------------------------------------------------------------------------------------------


@claim(
    id="EMB-N6-ALLIMPORTANT",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=20,
    statement="""N6 (selection without the single-relevant-token assumption, wrong): when every
    sequence holds a strongly predictive token plus weaker relevant ones (α ≠ 0, not completely
    signed), the softmax selects all important tokens: along gradient flow on p (E¹ frozen,
    p(0) = 0), every relevant token of X_i keeps attention ≥ 1e-3 at ‖p‖ = 10³.""",
)
@given(inst=two_relevant_instances())
def test_n6_all_important_tokens_selected(inst):
    """Control EMB-N6-ALLIMPORTANT.

    Only the per-sequence argmax of y⟨E¹_s, v⟩ is selected; the weak token's attention goes
    to ~1e-99 (spec N6).
    """
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


@claim(
    id="EMB-N7-DIM",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=20,
    statement="""N7 (the theorem without |S| ≤ d − 1, wrong): under Assumption 1 and the §3.3
    precondition but with |S| > d (d ∈ {2, 3, 4}), the direction of p(t) converges to the
    `<cls>` SVM of s*: that SVM is feasible, and converge() reaches 1 − cos ≤ 1e-5 to it.""",
)
@given(inst=single_relevant_token_instances(d=SMALL_DIMS))
def test_n7_direction_without_enough_dimension(inst):
    """Control EMB-N7-DIM.

    With d = 2–4 and |S| ≥ 6 the SVM is infeasible (certified by a Farkas vector), so no
    max-margin limit exists (spec N7). ‖p‖ may still grow, towards a partial selection;
    boundedness is not asserted. Precondition failures are rejected (counted).
    """
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


@claim(
    id="EMB-N8-NOISE",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N8 (selection of the α-important token whatever the noise, wrong): under
    Assumption 1 and |S| ≤ d − 1 but without the separation precondition of §3.3, gradient flow
    on p (E¹ frozen, p(0) = 0) selects s*(i) in every sequence, for any d and η0.""",
)
@given(inst=NOISY_DATA)
def test_n8_flow_selects_alpha_argmax_regardless(inst):
    """Control EMB-N8-NOISE.

    When an irrelevant token beats s*(i) in y⟨E¹_s, v⟩ (the η0-proportional noise η0(β_s −
    α_s/2) flips the order), the flow selects that token instead (spec N8: 2/30 at d ≤ 128,
    η0 = 20, T ≥ 7). Draws where s*(i) already maximises y⟨E¹_s, v⟩ uniquely are the
    theorem's (EMB-FLOW-SELECT) and pass here without a flow; only a flow-verified
    counterexample refutes.
    """
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


@claim(
    id="EMB-N9-FINITE",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N9 (finite stationary point, wrong): under the hypotheses of the gradient-flow
    theorem (Assumption 1, |S| ≤ d − 1, §3.3 precondition), gradient flow on p converges to a
    finite minimiser: the traced path stops at a stationary point (∇L = 0, or the integrator
    stalls) before ‖p‖ reaches 10³.""",
)
@given(inst=THEOREM_DATA)
def test_n9_flow_converges_to_finite_point(inst):
    """Control EMB-N9-FINITE.

    Lemma A.2 gives a strict descent direction at every finite p, so no stationary point
    exists and ‖p‖ diverges (EMB-A2-DESCENT, EMB-FLOW-DIVERGE). Any finite radius in place
    of 10³ is refuted the same way.
    """
    theorem_instance(inst)
    path = run_flow(inst).path
    stalled = any("stationary" in s or "stalled" in s for s in path.stops)
    assert stalled and path.norms.max() < R_FAR, (
        f"no stationary point: the flow reached ‖p‖ = {path.norms[-1]:.4g} ({path.stops[-1]})"
    )


@claim(
    id="EMB-N10-LOSSZERO",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N10 (loss → 0, wrong): under the hypotheses of the gradient-flow theorem, with E
    and v frozen, the loss tends to 0 along gradient flow on p: L(p) ≤ 1e-6 at ‖p‖ = 10³.""",
)
@given(inst=THEOREM_DATA)
def test_n10_loss_goes_to_zero(inst):
    """Control EMB-N10-LOSSZERO.

    |f| ≤ max_s|u_s| keeps the loss above L* = mean log(1 + e^{−y⟨E¹_{s*}, v⟩}) > 0 (spec
    N10: 0.2414 in one instance; EMB-FLOW-LOSS).
    """
    prep = theorem_instance(inst)
    p_far = torch.from_numpy(run_flow(inst).path.final)
    loss = float(prep.prompt.loss_value(p_far))
    assert loss <= LOSS_ZERO, f"L(p) = {loss:.4g} at ‖p‖ = {float(p_far.norm()):.3g}"


@claim(
    id="EMB-N11-MONOTONE-P",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N11 (monotone p-scores, wrong): under the hypotheses of the gradient-flow
    theorem, the `<cls>` scores ⟨E¹_s, p(t)⟩ increase with α_s (only positive tokens are
    attended): at ‖p‖ = 10³ along the flow, α_s < α_s' implies ⟨E¹_s, p⟩ < ⟨E¹_s', p⟩ for all
    tokens s, s' that occur.""",
)
@given(inst=THEOREM_DATA)
def test_n11_p_scores_monotone_in_alpha(inst):
    """Control EMB-N11-MONOTONE-P.

    The SVM constraints push ⟨E¹_{s*}, p⟩ above the co-occurring irrelevant tokens for
    completely negative s* as well: the scores are U-shaped in α, not monotone (spec N11).
    """
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


@claim(
    id="EMB-N13-P-ALIGNS-V",
    kind="control",
    provenance="[R]",
    expected="refuted",
    examples=100,
    statement="""N13 (p aligns with v, wrong): under the hypotheses of the gradient-flow theorem,
    cos(p(t), v) → ±1: |cos(p, v)| ≥ 0.9 at ‖p‖ = 10³ along the flow.""",
)
@given(inst=THEOREM_DATA)
def test_n13_p_aligns_with_v(inst):
    """Control EMB-N13-P-ALIGNS-V.

    p converges to the `<cls>` SVM direction, nearly orthogonal to v (spec N13: |cos| ≤
    0.03).
    """
    theorem_instance(inst)
    p_far = run_flow(inst).path.final
    c = abs(cosine(p_far, inst.v))
    evidence.metric("abs_cos_p_v", c)
    assert c >= ALIGN_COS, f"|cos(p, v)| = {c:.3g} at ‖p‖ = {float(np.linalg.norm(p_far)):.3g}"
