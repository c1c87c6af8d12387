"""Gradient flow on the `<cls>` embedding p with frozen trained embeddings (arXiv 2505.17282).

Spec ``spec/embeddings.md`` §3.2 (Lemma A.2), §3.3 (the gradient-flow theorem) and §3.4 (the
sufficient condition for selecting only important tokens). Protocol (§1): one GD step of size η0
on E from p⁰ = 0 gives E¹; E¹ is frozen and p follows gradient flow ṗ = −∇_p L(E¹, p) from
p(0) = 0. With E frozen this is the prompt problem of ``models.attention`` with keys E¹[X_i] and
scores y_i⟨E¹_s, v⟩ (``EmbeddingProblem.prompt_problem``), traced by ``models.dynamics``:
``converge`` follows the gradient-flow path (LSODA in arc length, log-space direction) until its
direction matches the SVM of what it selects to 1 − cos ≤ 1e-6, and the path is then continued
to ‖p‖ = 10³ (``run_flow``). Nothing here is a discrete surrogate of the flow.

One flow per instance serves every claim: ``run_flow`` caches by instance content, and under the
``ci`` profile the theorem's claims share one seeded stream of G1 instances (``shared_stream``),
so each instance's flow is traced once. The helpers are public: the negative controls
(``claims_controls``) run the same protocol.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from hypothesis import example, given, seed
from hypothesis import strategies as st

from models.attention import PromptProblem, cosine, one_minus_cos
from models.embedding import (
    average_signed_frequency,
    cls_loss_floor,
    completely_negative,
    completely_positive,
    descent_direction,
    descent_slope,
    max_margin_feasible_point,
    relevant_token_positions,
    selected_tokens,
)
from strategies import (
    EmbeddingInstance,
    general_frequency_instances,
    single_relevant_token_instances,
    two_relevant_instances,
)
from theorems.embeddings import plots
from theorems.embeddings.common import (
    DIRECTION_TARGET,
    PRACTICAL_TARGET,
    R_FAR,
    SELECT_TOL,
    THEOREM_DATA,
    FlowRun,
    Prepared,
    cls_svm_of,
    prepare,
    run_flow,
    theorem_instance,
)
from theorems.framework import evidence
from theorems.framework.profiles import current_profile
from theorems.framework.registry import claim
from theorems.framework.replay import saved

F64 = torch.float64

# ---- tolerances and protocol constants --------------------------------------------------------

# The `<cls>` SVM is solved independently of the one converge() compares with (which is built on
# token positions); both are certified to 1e-7, so the direction claim allows 10× the target.
DIRECTION_TOL = 1e-5
# (E_{s*} − E_s)ᵀp grows like ‖p‖/‖p̂‖ along the limit direction; at the end of the path it
# must be at least half of that (1 − cos ≤ 1e-6 leaves it within 0.3% of it).
GAP_GROWTH_FRACTION = 0.5
# L(p) − L* at ‖p‖ = 10³ is e^(−‖p‖/‖p̂‖)-small; 1e-8·L* is the spec's 1e-4 (after 500 NGD
# steps, ‖p‖ ≈ 50) tightened for the longer path.
LOSS_GAP_TOL = 1e-8
# Monotone loss along the traced path: L(p_{k+1}) ≤ L(p_k) + 1e-12·max(1, L(p_k)) (spec §3.3
# uses 1e-12 for GD; float64 rounding of L is ~1e-16·L).
MONO_TOL = 1e-12
# Lemma A.2 (spec §3.2): q ⟂ v checked as |cos(q, v)| ≤ 1e-10; random p at these norms.
ORTHO_TOL = 1e-10
A2_NORMS = (0.0, 0.1, 1.0, 10.0, 100.0, 1000.0)
A2_DIRECTIONS = 2  # Gaussian directions per norm
A2_PATH_POINTS = 40  # points of the traced path at which the slope is also checked
# §3.4, practical form: the flow concentrates ≥ 0.99 of the attention (spec P-3.4).
PRACTICAL_MASS = 0.99
# §3.4, paper constant: gap > 4·(11 η0 d^(−1/4))/η0 = 44 d^(−1/4).
PAPER_GAP_CONSTANT = 44.0

# Spec §3.4: general data with one planted strongly predictive token per sequence plus weaker
# relevant ones (two_relevant_instances), and G2.
GENERAL_DATA = st.one_of(two_relevant_instances(), general_frequency_instances())

FLOW_STREAM_SEED = 2505_17282


def shared_stream(test):
    """Under ci, give the flow claims one seeded example stream, so that they draw the same G1
    instances and ``run_flow``'s cache traces each flow once. Other profiles keep their own
    (derandomized or random) streams; the claims do not depend on the sharing."""
    return seed(FLOW_STREAM_SEED)(test) if current_profile() == "ci" else test


# ---------------------------------------------------------------------------------------------
# The protocol: one step, frozen E¹, gradient flow on p
# ---------------------------------------------------------------------------------------------


def star_positions(inst: EmbeddingInstance) -> torch.Tensor:
    """(n, T) mask of the positions holding s*(i)."""
    return relevant_token_positions(inst.sequences, inst.s_star)


def attention_mass(prompt: PromptProblem, p, mask: torch.Tensor) -> torch.Tensor:
    """Softmax mass on the positions in ``mask``, per sequence, in log space (exact near 1)."""
    log_s = prompt.log_softmax(torch.as_tensor(p, dtype=F64))
    return torch.logsumexp(torch.where(mask, log_s, -math.inf), dim=-1).exp()


def other_mass(prompt: PromptProblem, p, mask: torch.Tensor) -> torch.Tensor:
    """Softmax mass off the positions in ``mask``, per sequence (no 1 − x cancellation)."""
    log_s = prompt.log_softmax(torch.as_tensor(p, dtype=F64))
    return torch.logsumexp(torch.where(mask, -math.inf, log_s), dim=-1).exp()


# ---------------------------------------------------------------------------------------------
# Lemma A.2: a direction of strict descent at every finite p
# ---------------------------------------------------------------------------------------------


def _qualifying_tokens(prep: Prepared) -> list[int]:
    """Relevant tokens that are the unique argmax of y⟨E¹_s, v⟩ in every sequence holding them."""
    inst, sel = prep.inst, prep.selection
    found = []
    for s in sorted(inst.relevant or ()):
        holds = (inst.sequences == s).any(-1)
        if bool(holds.any()) and bool(((sel.tokens == s) & sel.unique)[holds].all()):
            found.append(s)
    return found


@claim(
    id="EMB-A2-DESCENT",
    kind="lemma",
    provenance="[V-frag] skeleton, [R] content",
    examples=20,
    statement="""Lemma A.2 (spec §3.2): under Assumption 1 with |S| ≤ d − 1, after one step from
    p⁰ = 0, when Lemma 4.1 has made each relevant token s*(i) the unique maximiser of
    y_i⟨E¹_s, v⟩ over X_i (the §3.3 precondition), for every completely positive or negative
    token s* there is q ⟂ v with E¹q = e_{s*}, and ⟨∇_p L(E¹, p), q⟩ < 0 at every finite p.
    Checked for every relevant s*: q from least squares on
    E¹U (|cos(q, v)| ≤ 1e-10, ‖E¹q − e_{s*}‖_∞ ≤ 1e-9), and the sign of the slope at Gaussian p
    of norms 0, 0.1, 1, 10, 100, 1000 and at 40 points of the gradient-flow path.""",
)
@shared_stream
@given(inst=THEOREM_DATA)
def test_descent_direction_at_every_p(inst):
    """Lemma EMB-A2-DESCENT.

    The slope is models.embedding.descent_slope (exact q, log space, sign-exact at any ‖p‖);
    directional_derivative is not sign-reliable at large ‖p‖. Instances failing the §3.3
    precondition are rejected (counted), as in the theorem's claims, whose flows this claim
    reuses. The proof only needs s* to be the strict maximiser in the sequences that hold
    it; that per-token form is what descent_slope's sign rests on.
    """
    prep = theorem_instance(inst)
    tokens = _qualifying_tokens(prep)
    gen = torch.Generator().manual_seed(inst.seed + 1)
    points = []
    for norm in A2_NORMS:
        for _ in range(A2_DIRECTIONS):
            p = torch.randn(inst.d, generator=gen, dtype=F64)
            points.append(p * (norm / float(p.norm())))
    path = run_flow(inst).path
    picks = np.unique(np.linspace(0, len(path.ps) - 1, A2_PATH_POINTS).round().astype(int))
    points += [torch.from_numpy(path.ps[k]) for k in picks]
    evidence.metric("path_max_norm", float(path.norms.max()))
    E1, v = prep.step.E1, inst.v
    for s in tokens:
        q = descent_direction(E1, v, s)
        assert q.ok, f"no q ⟂ v with E¹q = e_{s} for token {s}: {q.reason}"
        cos_qv = abs(cosine(q.q, v))
        evidence.slack("abs_cos_q_v", cos_qv, ORTHO_TOL)
        assert cos_qv <= ORTHO_TOL, f"q is not orthogonal to v: |cos| = {cos_qv:.2e}"
        positions = inst.sequences == s
        for k, p in enumerate(points):
            _, sign = descent_slope(prep.prompt, p, positions)
            assert sign < 0, (
                f"⟨∇L(p), q⟩ ≥ 0 for token {s} at point {k} (‖p‖ = {float(p.norm()):.3g})"
            )


# ---------------------------------------------------------------------------------------------
# The gradient-flow theorem (§3.3)
# ---------------------------------------------------------------------------------------------

THEOREM_HYPOTHESES = """Assumption 1 (G1: every sequence holds exactly one relevant token s*(i),
completely positive for y = +1 and completely negative for y = −1, all others irrelevant),
|S| ≤ d − 1, ‖v‖ = 1, one GD step of size η0 on E from p⁰ = 0, and the precondition that s*(i) is
the unique maximiser of y_i⟨E¹_s, v⟩ over X_i for every i (instances failing it are rejected and
counted; spec: 2/30). E = E¹ frozen, gradient flow on p from p(0) = 0."""

_FLOW_NOTE = (
    "Flow: models.dynamics.converge on the prompt problem of E¹ (target 1 − cos ≤ 1e-6), then "
    "trace_flow to ‖p‖ = 1e3. Instances failing the §3.3 precondition are rejected: it is one of "
    "the theorem's hypotheses as read (spec §3.3, 'd large enough and η0 such that ...')."
)


@claim(
    id="EMB-FLOW-DIVERGE",
    kind="theorem",
    provenance="[V-frag]",
    examples=20,
    statement=f"""Gradient-flow theorem, part 1 (spec §3.3): under {THEOREM_HYPOTHESES}
    ‖p(t)‖ → ∞. Checked: the flow never stops at a stationary point and reaches ‖p‖ = 10³ in
    finite time, and ‖p(t)‖ is strictly increasing across the decades t = 10, 10², … covered.""",
    note=_FLOW_NOTE + " Metric 'decade_growth_over_svm_norm' is the last decade's growth of ‖p‖ "
    "divided by ‖p̂‖·ln 10 (spec §3.3 observes ≈ 1: ‖p‖ ≈ ‖p̂‖ log t) [R].",
)
@shared_stream
@given(inst=THEOREM_DATA)
def test_norm_diverges(inst):
    theorem_instance(inst)
    path = run_flow(inst).path
    bad_stop = [s for s in path.stops if "stationary" in s or "stalled" in s or "non-finite" in s]
    assert not bad_stop, f"the flow stopped at finite norm: {bad_stop}"
    norms = path.norms
    assert norms[-1] >= R_FAR, f"the flow reached only ‖p‖ = {norms[-1]:.4g} ({path.stops})"
    log_t = path.log_time
    finite = np.isfinite(log_t)
    decades = np.arange(1, int(log_t[-1] / math.log(10)) + 1)
    at = np.interp(decades * math.log(10), log_t[finite], norms[finite])
    evidence.metric("decades_covered", len(decades))
    if len(at) >= 2:
        p_hat = cls_svm_of(run_flow(inst).prep)
        if p_hat.ok:
            growth = (at[-1] - at[-2]) / (float(p_hat.norm) * math.log(10))
            evidence.metric("decade_growth_over_svm_norm", growth)
    drops = np.flatnonzero(np.diff(at) <= 0)
    assert not len(drops), f"‖p(t)‖ does not grow from t = 1e{decades[drops[0]]} to the next decade"


@claim(
    id="EMB-FLOW-SELECT",
    kind="theorem",
    provenance="[V] + [V-frag]",
    examples=20,
    statement=f"""Gradient-flow theorem, part 2 (spec §3.3): under {THEOREM_HYPOTHESES}
    (E_{{s*(i)}} − E_s)ᵀp(t) → +∞ for every i and s ∈ X_i, s ≠ s*(i): the softmax selects the
    completely positive/negative token of each sequence. Checked: the token the flow attends to
    is s*(i) in every sequence; at ‖p‖ = 10³ the mass off s*(i) is ≤ 1e-6; and the smallest
    gap (E_{{s*}} − E_s)ᵀp is ≥ ‖p‖/(2‖p̂‖), i.e. it grows linearly with ‖p‖.""",
    note=_FLOW_NOTE,
)
@shared_stream
@given(inst=THEOREM_DATA)
def test_softmax_selects_relevant_token(inst):
    prep = theorem_instance(inst)
    run = run_flow(inst)
    if run.outcome.status == "inconclusive" and "ambiguous" in run.outcome.reason:
        evidence.inconclusive(run.outcome.reason)
    chosen = run.selected_tokens()
    wrong = torch.nonzero(chosen != inst.s_star).flatten().tolist()
    assert not wrong, f"the flow attends to {chosen[wrong].tolist()} instead of s* in {wrong}"
    mask = star_positions(inst)
    p_far = run.path.final
    off = float(other_mass(prep.prompt, p_far, mask).max())
    evidence.slack("mass_off_s_star", off, SELECT_TOL)
    assert off <= SELECT_TOL, f"mass {off:.3e} stays off s* at ‖p‖ = {np.linalg.norm(p_far):.3g}"
    logits = prep.prompt.keys.numpy() @ p_far
    star = np.where(mask.numpy(), logits, -np.inf).max(-1)
    others = np.where(mask.numpy(), -np.inf, logits)  # s* positions drop out of the min
    gap = float((star[:, None] - others).min())
    svm = cls_svm_of(prep)
    if not svm.ok:
        evidence.inconclusive(f"`<cls>` SVM oracle: {svm.status}")
    linear = float(np.linalg.norm(p_far)) / float(svm.norm)
    evidence.metric("min_gap_over_norm_margin", gap / linear)
    assert gap >= GAP_GROWTH_FRACTION * linear, f"min gap {gap:.4g} < ‖p‖/(2‖p̂‖) = {linear / 2:.4g}"


@claim(
    id="EMB-FLOW-LOSS",
    kind="theorem",
    provenance="[R]",
    examples=20,
    statement=f"""Gradient-flow theorem, part 3 (spec §3.3): under {THEOREM_HYPOTHESES}
    L(p(t)) ↓ L* = (1/n) Σ_i log(1 + exp(−y_i⟨E¹_{{s*(i)}}, v⟩)) > 0, the infimum of L over p with
    E and v frozen (the loss does not go to 0). Checked: L* > 0, L(0) > L*, and at ‖p‖ = 10³
    0 ≤ L(p) − L* ≤ 1e-8·L* (the gap computed in log space).""",
    note=_FLOW_NOTE + " L* from models.embedding.cls_loss_floor; the gap from "
    "PromptProblem.log_loss_gap at the positions of s*.",
)
@shared_stream
@given(inst=THEOREM_DATA)
def test_loss_decreases_to_floor(inst):
    prep = theorem_instance(inst)
    run = run_flow(inst)
    floor = cls_loss_floor(prep.step.E1, inst.sequences, inst.y, inst.v, inst.s_star)
    positions = star_positions(inst).to(torch.int64).argmax(-1)
    assert math.isclose(floor, prep.prompt.loss_floor(positions), rel_tol=1e-12)
    start = float(prep.prompt.loss_value(torch.zeros(inst.d, dtype=F64)))
    p_far = torch.from_numpy(run.path.final)
    log_gap = prep.prompt.log_loss_gap(p_far, positions)
    gap = math.exp(log_gap) if log_gap > -700 else 0.0
    evidence.metric("loss_floor", floor)
    evidence.metric("log10_gap_at_far_point", log_gap / math.log(10))
    evidence.slack("loss_gap_over_floor", gap / floor, LOSS_GAP_TOL)
    assert floor > 0, f"L* = {floor} is not positive"
    assert start > floor, f"L(0) = {start} does not exceed L* = {floor}"
    assert float(prep.prompt.loss_value(p_far)) >= floor * (1 - 1e-15), "L(p) fell below L*"
    assert gap <= LOSS_GAP_TOL * floor, f"L − L* = {gap:.3e} > 1e-8·L* at ‖p‖ = {R_FAR:g}"


_DIR_CURVES: list[tuple[np.ndarray, np.ndarray]] = []
_DIR_FIGURE = "emb_flow_direction_to_svm.png"


def _draw_direction_figure() -> None:
    plots.direction_figure(_DIR_CURVES, DIRECTION_TARGET, _DIR_FIGURE)


@claim(
    id="EMB-FLOW-DIRECTION",
    kind="theorem",
    provenance="[V] (abstract); exact SVM [R]",
    examples=20,
    figures=(_DIR_FIGURE,),
    statement=f"""Gradient-flow theorem, part 4 (spec §3.3): under {THEOREM_HYPOTHESES}
    p(t)/‖p(t)‖ → p̂/‖p̂‖, where p̂ = argmin ‖p‖ s.t. (E¹_{{s*(i)}} − E¹_s)ᵀp ≥ 1 for every i and
    s ∈ X_i, s ≠ s*(i) (the `<cls>` SVM, certified). Checked: converge() reaches 1 − cos ≤ 1e-6 to
    the SVM of the tokens it selects, and 1 − cos(p, p̂) ≤ 1e-5 for the independently solved
    `<cls>` SVM of s*.""",
    note=_FLOW_NOTE,
)
@shared_stream
@given(inst=THEOREM_DATA)
def test_direction_converges_to_cls_svm(inst):
    prep = theorem_instance(inst)
    run = run_flow(inst)
    svm = cls_svm_of(prep)
    if not svm.ok:
        evidence.inconclusive(f"`<cls>` SVM oracle: {svm.status} ({svm.reason})")
    if len(_DIR_CURVES) < 20:
        omc = np.array([one_minus_cos(p, svm.x) for p in run.path.ps])
        _DIR_CURVES.append((run.path.norms, omc))
        if len(_DIR_CURVES) in (1, 20):
            _draw_direction_figure()
    if run.outcome.status == "inconclusive":
        evidence.inconclusive(run.outcome.reason)
    assert run.outcome.status == "converged", f"converge(): {run.outcome.status}"
    omc = one_minus_cos(run.outcome.p, svm.x)
    evidence.slack("one_minus_cos", omc, DIRECTION_TOL)
    evidence.metric("svm_norm", float(svm.norm))
    evidence.metric("norm_at_convergence", float(run.outcome.p.norm()))
    assert omc <= DIRECTION_TOL, f"1 − cos(p, p̂) = {omc:.3e} > {DIRECTION_TOL:g}"


@claim(
    id="EMB-FLOW-MONOTONE",
    kind="theorem",
    provenance="[V-frag]",
    examples=20,
    statement=f"""Monotone loss along the flow (spec §3.3 part 1, dL/dt = −‖∇L‖²): under
    {THEOREM_HYPOTHESES} the loss is non-increasing along the traced gradient-flow path:
    L(p_{{k+1}}) ≤ L(p_k) + 1e-12·max(1, L(p_k)) at consecutive recorded points, up to
    ‖p‖ = 10³.""",
    note=_FLOW_NOTE + " Unlike normalized GD with step 0.1 (which the spec saw increase the loss "
    "by up to 7.5e-3), the traced flow itself must be monotone.",
)
@shared_stream
@given(inst=THEOREM_DATA)
def test_loss_monotone_along_flow(inst):
    theorem_instance(inst)
    losses = run_flow(inst).path.losses
    rise = (losses[1:] - losses[:-1]) / np.maximum(1.0, losses[:-1])
    worst = int(np.argmax(rise))
    evidence.slack("loss_rise", float(rise[worst]), MONO_TOL)
    evidence.metric("recorded_points", len(losses))
    assert rise[worst] <= MONO_TOL, f"the loss rises by {rise[worst]:.3e} at point {worst}"


@claim(
    id="EMB-SVM-FEASIBLE",
    kind="corollary",
    provenance="[R]",
    examples=50,
    statement="""Feasibility of the `<cls>` SVM (spec §3.3): under Assumption 1 with |S| ≤ d − 1
    the `<cls>` SVM of E¹ is feasible, because p_ls = E¹⁺1_rel satisfies every constraint with
    equality 1; hence the certified optimum has ‖p̂‖ ≤ ‖p_ls‖ + 1e-6. No precondition on the
    order of y⟨E¹_s, v⟩ is needed.""",
)
@given(inst=THEOREM_DATA)
def test_cls_svm_feasible(inst):
    evidence.instance(inst.to_json())
    prep = prepare(inst)
    relevant = completely_positive(inst.sequences, inst.y, inst.vocab_size)
    relevant |= completely_negative(inst.sequences, inst.y, inst.vocab_size)
    p_ls = max_margin_feasible_point(prep.step.E1, relevant)
    svm = cls_svm_of(prep)
    assert svm.status != "infeasible", f"the `<cls>` SVM is infeasible: {svm.reason}"
    bound = float(p_ls.norm()) + 1e-6
    evidence.slack("svm_norm_over_p_ls", float(svm.norm), bound)
    assert float(svm.norm) <= bound, f"‖p̂‖ = {float(svm.norm):.6g} > ‖p_ls‖ = {bound:.6g}"


# ---------------------------------------------------------------------------------------------
# §3.4: the sufficient condition for selecting only important tokens
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AlphaLeader:
    """Per sequence: the token maximising y_i α_s over the distinct tokens of X_i, its lead over
    the next distinct token (0 on ties), and the smallest lead over all sequences."""

    tokens: torch.Tensor
    gaps: torch.Tensor

    @property
    def min_gap(self) -> float:
        return float(self.gaps.min())


def alpha_leader(inst: EmbeddingInstance) -> AlphaLeader:
    """argmax_{s ∈ X_i} y_i α_s, via selected_tokens with the α-line playing the role of E¹v."""
    alpha = average_signed_frequency(inst.sequences, inst.y, inst.vocab_size)
    # selected_tokens reads y_i·⟨E_s, v⟩; with E = diag(α)-like rows and v = 1 that is y_i·α_s.
    E = torch.diag(alpha)
    sel = selected_tokens(E, inst.sequences, inst.y, torch.ones(inst.vocab_size, dtype=F64))
    return AlphaLeader(sel.tokens, torch.where(sel.unique, sel.gap, torch.zeros_like(sel.gap)))


@claim(
    id="EMB-SUFF-PAPER",
    kind="corollary",
    provenance="[R]/[U]",
    examples=100,
    statement="""§3.4, paper-constant form (spec §3.4): for general data, with Lemma 4.1's error
    ε = 11 η0 d^(−1/4), if for every i the lead of s*(i) = argmax_{s∈X_i} y_i α_s over every other
    token of X_i exceeds 4ε/η0 = 44 d^(−1/4), then gradient flow selects s*(i) in every
    sequence. Checked on two-relevant-token and G2 data; when the condition holds the flow is
    traced and its selection compared with s*(i).""",
)
@given(inst=GENERAL_DATA)
def test_paper_gap_condition(inst):
    """Corollary EMB-SUFF-PAPER.

    Vacuous at practical d: |α| ≤ 1 caps the lead at 2, so the condition needs d > (44/2)⁴ ≈
    2.3e5, and d > 2e9 for α = 1/(2T), T = 5 (spec §3.4). Metric 'gap_condition_met' /
    'gap_condition_not_met' (their counts: how many examples met it; values: the smallest
    lead) and 'd_needed' (the smallest d at which the example's lead would meet it) report
    this; the claim declares the condition as its premise, so a run where no example meets
    it is reported vacuous, not held.
    """
    leader = alpha_leader(inst)
    needed = PAPER_GAP_CONSTANT * inst.d**-0.25
    met = evidence.premise(leader.min_gap > needed, "gap condition")
    evidence.metric("gap_condition_met" if met else "gap_condition_not_met", leader.min_gap)
    evidence.metric(
        "d_needed", (PAPER_GAP_CONSTANT / leader.min_gap) ** 4 if leader.min_gap > 0 else math.inf
    )
    if met:
        run = run_flow_general(inst)
        chosen = run.selected_tokens()
        assert bool((chosen == leader.tokens).all()), "the flow does not select argmax y α"


def run_flow_general(inst: EmbeddingInstance, target: float = PRACTICAL_TARGET) -> FlowRun:
    """The flow of §3.4 (general data): converge() with a decided selection (mass ≤ 1e-3 off
    it) confirmed by the direction of its own SVM to 1 − cos ≤ 1e-3."""
    return run_flow(inst, target=target, select_tol=1e-3)


@claim(
    id="EMB-SUFF-PRACTICAL",
    kind="corollary",
    provenance="[R]",
    expected="refuted",
    examples=200,
    statement="""§3.4, practical form, identification part (spec P-3.4): on data with one
    strongly predictive token per sequence plus a weaker relevant one, whenever the maximiser of
    y_i⟨E¹_s, v⟩ over X_i is unique for every i (the observed argmax precondition), that token is
    argmax_{s∈X_i} y_i α_s.""",
)
@given(inst=two_relevant_instances())
def test_practical_argmax_is_alpha_argmax(inst):
    """Corollary EMB-SUFF-PRACTICAL.

    Refuted as read: with few pairs the weak token's lead in α, F/(nT), is below the
    one-step noise η0|β_s − α_s/2|, and the weak token wins y⟨E¹_s, v⟩ uniquely. The
    attention part fails too (EMB-SUFF-PRACTICAL-FLOW); a sufficient condition for the
    identification is EMB-SUFF-R3. One step only, so the search is cheap.
    """
    prep = prepare(inst)
    if not prep.selection.all_unique:
        evidence.reject("precondition: argmax y⟨E¹_s, v⟩ is not unique in some sequence")
    leader = alpha_leader(inst)
    wrong = torch.nonzero(prep.selection.tokens != leader.tokens).flatten().tolist()
    assert not wrong, (
        f"argmax y⟨E¹_s, v⟩ = {prep.selection.tokens[wrong].unique().tolist()} but argmax y α = "
        f"{leader.tokens[wrong].unique().tolist()} in sequences {wrong[:5]}"
    )


@claim(
    id="EMB-SUFF-PRACTICAL-FLOW",
    kind="corollary",
    provenance="[R]",
    expected="refuted",
    examples=20,
    statement="""§3.4, practical form, attention part (spec P-3.4): on data with one strongly
    predictive token per sequence plus a weaker relevant one, with |S| ≤ d − 1, whenever the
    maximiser of y_i⟨E¹_s, v⟩ over X_i is unique for every i, gradient flow on p from 0
    concentrates ≥ 0.99 of the attention of X_i on that maximiser (whichever token it is).""",
)
@example(inst=saved("EMB-SUFF-PRACTICAL-FLOW"))
@given(inst=two_relevant_instances())
def test_practical_flow_concentrates_on_argmax(inst):
    """Corollary EMB-SUFF-PRACTICAL-FLOW.

    Refuted as read (found by the ci-random profile, seed 8; the instance is pinned): n = 34,
    T = 8, |S| = 9, d = 64, η0 = 20, the argmax of y⟨E¹_s, v⟩ unique in every sequence, and
    the flow from p = 0 converges (certified: the direction reached the SVM of its selection
    and stayed, ‖p‖ ≈ 835) to a selection that puts mass < 1e-100 on that argmax in all 17
    sequences with y = −1. Normalized GD by torch autograd (step 0.5, an independent float64
    run) picks the same 17 sequences by step 1000 (loss 0.45, far above the floor of the
    argmax selection). The flow follows a locally-optimal selection, not the argmax of
    y⟨E¹_s, v⟩: no variant of the practical form is known to hold yet. Flow: converge() until
    the mass off the selection is ≤ 1e-3 and the direction matches the SVM of the selection
    to 1 − cos ≤ 1e-3.
    """
    prep = prepare(inst)
    if not prep.selection.all_unique:
        evidence.reject("precondition: argmax y⟨E¹_s, v⟩ is not unique in some sequence")
    run = run_flow_general(inst)
    if run.outcome.status == "inconclusive":
        evidence.inconclusive(run.outcome.reason)
    mask = inst.sequences == prep.selection.tokens[:, None]
    mass = float(attention_mass(prep.prompt, run.outcome.p, mask).min())
    evidence.slack("mass_off_argmax", 1 - mass, 1 - PRACTICAL_MASS)
    evidence.metric(
        "argmax_is_alpha_argmax", float(bool((prep.selection.tokens == inst.s_star).all()))
    )
    assert mass >= PRACTICAL_MASS, f"attention on argmax y⟨E¹_s, v⟩ is only {mass:.4f}"


@claim(
    id="EMB-SUFF-R3",
    kind="corollary",
    provenance="[R]",
    examples=100,
    statement="""§3.4 with R3 in place of the paper's constant (spec §3.4): with ‖v‖ = 1 and
    m = max_s |⟨E⁰_s, v⟩|, if for every i the lead of s*(i) = argmax_{s∈X_i} y_i α_s over every
    other token of X_i exceeds 4m(1/η0 + 1/4), then s*(i) is the unique maximiser of
    y_i⟨E¹_s, v⟩ over X_i for every i — the precondition of §3.3 and §3.4, so the flow selects
    the most important token under the hypotheses of §3.3 (EMB-FLOW-SELECT). Deterministic: no
    probability over E⁰.""",
)
@given(
    inst=st.one_of(
        single_relevant_token_instances(),
        single_relevant_token_instances(d=st.sampled_from([1024, 4096])),
        two_relevant_instances(d=st.sampled_from([1024, 4096])),
        general_frequency_instances(),
    )
)
def test_r3_gap_condition_identifies_alpha_argmax(inst):
    """Corollary EMB-SUFF-R3.

    Checked on G1, two-relevant and G2 data, default d and d ∈ {1024, 4096} (where the
    condition is met more often). Metrics 'condition_met' / 'condition_not_met': their
    counts say how often it applied; values are lead/(4m(1/η0 + 1/4)).
    """
    prep = prepare(inst)
    leader = alpha_leader(inst)
    needed = 4 * prep.step.m * (1 / inst.eta0 + 0.25)
    met = leader.min_gap > needed
    evidence.metric("condition_met" if met else "condition_not_met", leader.min_gap / needed)
    if met:
        sel = prep.selection
        assert sel.all_unique, "argmax y⟨E¹_s, v⟩ is not unique although the R3 gap holds"
        assert bool((sel.tokens == leader.tokens).all()), "argmax y⟨E¹_s, v⟩ ≠ argmax y α"
