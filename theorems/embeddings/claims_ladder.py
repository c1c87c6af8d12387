"""Gradient-flow claims of arXiv 2505.17282 at the medium rung of the size ladder (issue 23).

The theorem's claims (``claims_flow``) draw the spec's G1 sizes: n = 20–120 sequences of
T = 3–8 tokens, |S| ≤ 36 and d ∈ {64, 128, 256}, so d ≥ |S| + 28 always. These claims restate
them on ``strategies.ladder``'s medium box (n, T ≤ 32, d ≤ 128) with the same generator
(``rung_single_relevant_token_instances``: G1's recipe, sizes over the box): sequences up to
T = 32, vocabularies up to 127 tokens and d down to |S| + 1, where the `<cls>` SVM has as many
variables as the one-step embeddings have rows. The statements, tolerances and protocol (one
step from p⁰ = 0, E¹ frozen, gradient flow on p traced to ‖p‖ ≥ R_FAR) are the small claims',
unchanged; the §3.3 precondition (s*(i) the unique maximiser of y_i⟨E¹_s, v⟩) rejects a draw
as it does there. Under ci the flow claims share one seeded stream (``shared_stream``), so
each instance's flow is traced once. Each claim records its sizes.
"""

from __future__ import annotations

import math

import numpy as np
import torch
from hypothesis import example, given

from strategies import EmbeddingInstance, rung_single_relevant_token_instances
from theorems.embeddings.claims_flow import (
    DIRECTION_TOL,
    FLOOR_AGREEMENT,
    GAP_GROWTH_FRACTION,
    GD_RATES,
    LOGT_FROM,
    LOGT_TOL,
    LOSS_FLOOR_ROUNDING,
    LOSS_GAP_TOL,
    MONO_TOL,
    SVM_NORM_SLACK,
    attended_tokens,
    decade_growth,
    direction_error,
    largest_loss_rise,
    least_squares_point,
    loss_gap,
    mass_off_star,
    norms_per_decade,
    record_decade_growth,
    shared_stream,
    star_gap_growth,
    star_positions,
    theorem_flow,
)
from theorems.embeddings.common import (
    R_FAR,
    SELECT_TOL,
    cls_svm_of,
    prepare,
    theorem_instance,
)
from theorems.framework import evidence
from theorems.framework.registry import claim
from theorems.framework.replay import saved

F64 = torch.float64

#: G1 on the medium box: n = 2·n_pairs ≤ 32, T ≤ 32, |S| + 1 ≤ d ≤ 128.
MEDIUM_DATA = rung_single_relevant_token_instances("medium")


def record_sizes(inst: EmbeddingInstance) -> None:
    """n, T, d, |S| and the spare dimension d − |S| as metrics of the example."""
    evidence.metric("n", inst.n)
    evidence.metric("T", inst.sequences.shape[1])
    evidence.metric("d", inst.d)
    evidence.metric("|S|", inst.vocab_size)
    evidence.metric("d − |S|", inst.d - inst.vocab_size)


@claim("EMB-FLOW-DIVERGE-MEDIUM")
@shared_stream
@given(inst=MEDIUM_DATA)
def test_norm_diverges_medium(inst):
    """Gradient-flow theorem (§3.3), part 1, at the medium rung (n, T ≤ 32, d ≤ 128): under
    Assumption 1 with |S| ≤ d − 1, after one GD step of size η0 on E from p⁰ = 0, gradient flow
    on p from p(0) = 0 with E = E¹ frozen has ‖p(t)‖ → ∞."""
    flow = theorem_flow(inst)
    record_sizes(inst)
    assert flow.stall is None, flow.stall
    norms = flow.run.path.norms
    assert norms[-1] >= R_FAR, (
        f"the flow reached only ‖p‖ = {norms[-1]:.4g} ({flow.run.path.stops})"
    )
    at = norms_per_decade(flow.run.path)
    evidence.metric("decades_covered", len(at))
    record_decade_growth(inst, at)
    drops = np.flatnonzero(np.diff(at) <= 0)
    assert not len(drops), f"‖p(t)‖ does not grow from t = 1e{drops[0] + 1} to the next decade"


@claim("EMB-FLOW-SELECT-MEDIUM")
@shared_stream
@given(inst=MEDIUM_DATA)
def test_softmax_selects_relevant_token_medium(inst):
    """Gradient-flow theorem (§3.3), part 2, at the medium rung (n, T ≤ 32, d ≤ 128): under its
    hypotheses, (E_{s*(i)} − E_s)ᵀp(t) → +∞ for every i and s ∈ X_i, s ≠ s*(i): the softmax
    selects the completely positive/negative token of each sequence."""
    flow = theorem_flow(inst)
    record_sizes(inst)
    assert flow.stall is None, flow.stall
    chosen = attended_tokens(flow.prep, flow.p_far)
    wrong = torch.nonzero(chosen != inst.s_star).flatten().tolist()
    assert not wrong, (
        f"at ‖p‖ = {R_FAR:g} the flow attends to {chosen[wrong].tolist()} not s* in {wrong}"
    )
    off = mass_off_star(flow)
    assert off <= SELECT_TOL, f"mass {off:.3e} stays off s* at ‖p‖ = {flow.far_norm:.3g}"
    gap, linear = star_gap_growth(flow)
    assert gap >= GAP_GROWTH_FRACTION * linear, f"min gap {gap:.4g} < ‖p‖/(2‖p̂‖) = {linear / 2:.4g}"


@claim("EMB-FLOW-LOGT-MEDIUM")
@shared_stream
@given(inst=MEDIUM_DATA)
def test_norm_grows_like_log_t_medium(inst):
    """Growth rate of the norm at the medium rung (n, T ≤ 32, d ≤ 128): under the hypotheses of
    the gradient-flow theorem, ‖p(t)‖ = ‖p̂‖·log t + O(1), p̂ the `<cls>` SVM solution."""
    flow = theorem_flow(inst)
    record_sizes(inst)
    assert flow.stall is None, flow.stall
    svm = cls_svm_of(flow.prep)
    if not svm.ok:
        evidence.inconclusive(f"`<cls>` SVM oracle: {svm.status} ({svm.reason})")
    p_hat, growth = float(svm.norm), decade_growth(flow.run.path, float(svm.norm))
    beyond = f"the path covers a decade of t beyond ‖p‖ = {LOGT_FROM}‖p̂‖"
    if not evidence.premise(len(growth.scaled) > 0, beyond):
        return
    k = growth.worst
    evidence.slack("growth_deviation_times_norm", float(growth.scaled[k]), LOGT_TOL)
    evidence.metric("final_offset", growth.final_offset)
    assert growth.scaled[k] <= LOGT_TOL, (
        f"‖p‖ grows by {growth.ratio[k]:.6f}·‖p̂‖ ln 10 over the decade from ‖p‖ = "
        f"{growth.start[k]:.4g} (‖p̂‖ = {p_hat:.4g}): off by {abs(growth.ratio[k] - 1):.2e} > "
        f"{LOGT_TOL}·‖p̂‖/‖p‖"
    )


@claim("EMB-FLOW-LOSS-MEDIUM")
@shared_stream
@example(inst=saved("EMB-FLOW-SELECT-MEDIUM"))  # the flow selects another token there
@given(inst=MEDIUM_DATA)
def test_loss_decreases_to_floor_medium(inst):
    """Gradient-flow theorem (§3.3), part 3, at the medium rung (n, T ≤ 32, d ≤ 128): under its
    hypotheses, L(p(t)) ↓ L* = (1/n) Σ_i log(1 + exp(−y_i⟨E¹_{s*(i)}, v⟩)) > 0, the infimum of
    L over p with E and v frozen."""
    flow = theorem_flow(inst)
    record_sizes(inst)
    assert flow.stall is None, flow.stall
    prompt, floor = flow.prep.prompt, flow.floor
    positions = star_positions(inst).to(torch.int64).argmax(-1)
    assert math.isclose(floor, prompt.loss_floor(positions), rel_tol=FLOOR_AGREEMENT)
    start = float(prompt.loss_value(torch.zeros(inst.d, dtype=F64)))
    p_far = torch.from_numpy(flow.p_far)
    gap = loss_gap(prompt, p_far, positions, floor)
    assert floor > 0, f"L* = {floor} is not positive"
    assert start > floor, f"L(0) = {start} does not exceed L* = {floor}"
    assert float(prompt.loss_value(p_far)) >= floor * (1 - LOSS_FLOOR_ROUNDING), (
        "L(p) fell below L*"
    )
    assert gap <= LOSS_GAP_TOL * floor, f"L − L* = {gap:.3e} > 1e-8·L* at ‖p‖ = {R_FAR:g}"


@claim("EMB-FLOW-DIRECTION-MEDIUM")
@shared_stream
@example(inst=saved("EMB-FLOW-SELECT-MEDIUM"))  # the flow selects another token there
@given(inst=MEDIUM_DATA)
def test_direction_converges_to_cls_svm_medium(inst):
    """Gradient-flow theorem (§3.3), part 4, at the medium rung (n, T ≤ 32, d ≤ 128): under its
    hypotheses, p(t)/‖p(t)‖ → p̂/‖p̂‖, where p̂ = argmin ‖p‖ s.t. (E¹_{s*(i)} − E¹_s)ᵀp ≥ 1 for
    every i and s ∈ X_i, s ≠ s*(i) (the `<cls>` SVM)."""
    flow = theorem_flow(inst)
    record_sizes(inst)
    svm, outcome = cls_svm_of(flow.prep), flow.run.outcome
    if not svm.ok:
        evidence.inconclusive(f"`<cls>` SVM oracle: {svm.status} ({svm.reason})")
    assert flow.stall is None, flow.stall
    if outcome.status == "inconclusive":  # the oracle, or ‖p‖ = 1e8 reached undecided
        evidence.inconclusive(outcome.reason)
    assert outcome.status == "converged", f"converge(): {outcome.status}"
    omc = direction_error(outcome, svm)
    assert omc <= DIRECTION_TOL, f"1 − cos(p, p̂) = {omc:.3e} > {DIRECTION_TOL:g}"


@claim("EMB-FLOW-MONOTONE-CAPPED-MEDIUM")
@shared_stream
@given(inst=MEDIUM_DATA)
def test_gd_loss_monotone_capped_medium(inst):
    """Monotone loss under the descent lemma's step, at the medium rung (n, T ≤ 32, d ≤ 128):
    under the hypotheses of the gradient-flow theorem, GD on p from p_0 = 0 with
    η = min(η_spec, 1/L_p), η_spec ∈ {0.1, 1}, never raises L."""
    prep = theorem_instance(inst)
    record_sizes(inst)
    cap = 1.0 / prep.prompt.smoothness_bound()
    for eta in GD_RATES:
        rise = largest_loss_rise(prep.prompt, min(eta, cap))
        assert rise.value <= MONO_TOL, str(rise)


@claim("EMB-SVM-FEASIBLE-MEDIUM")
@given(inst=MEDIUM_DATA)
def test_cls_svm_feasible_medium(inst):
    """Feasibility of the `<cls>` SVM (§3.3) at the medium rung (n, T ≤ 32, d ≤ 128): under
    Assumption 1 with |S| ≤ d − 1 the `<cls>` SVM of E¹ is feasible, because p_ls = E¹⁺1_rel
    meets every constraint with equality; hence ‖p̂‖ ≤ ‖p_ls‖."""
    prep = prepare(inst)
    record_sizes(inst)
    p_ls, svm = least_squares_point(prep), cls_svm_of(prep)
    assert svm.status != "infeasible", f"the `<cls>` SVM is infeasible: {svm.reason}"
    bound = float(p_ls.norm()) + SVM_NORM_SLACK
    evidence.slack("svm_norm_over_p_ls", float(svm.norm), bound)
    assert float(svm.norm) <= bound, f"‖p̂‖ = {float(svm.norm):.6g} > ‖p_ls‖ = {bound:.6g}"
