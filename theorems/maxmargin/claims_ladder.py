"""Claims of arXiv 2306.13596 at the larger rungs of the size ladder (issue 23).

Every theorem quantifies over all n, T and d, while the claims' own strategies draw n ≤ 4,
T ≤ 6 and, for the global statements, a key dimension dk ≥ n(T − 1) that makes every
selection separable. These claims restate a dynamics or SVM result of the paper on
``strategies.ladder``'s boxes, where n(T − 1) ≫ dk is the common case:

- *medium* (n, T ≤ 32, dk ≤ 127), a slice of it under ci;
- *large* (n ≤ 256, T ≤ 256, dk ≤ 1023, n·T ≤ 16 384), under the nightly profile only
  (``NIGHTLY_ONLY``: elsewhere they are reported as not run).

The statements are the paper's, unchanged; the premise of each (a feasible ATT-SVM of the
top-score tokens, equal non-optimal scores) is drawn by the same strategies as at the small
rung, which reject a draw whose oracle does not certify the premise. Each records its
sizes, so a finding that appears only at scale names where.
"""

from __future__ import annotations

from hypothesis import given

from strategies import equal_nonopt_instances, global_opt_instances
from strategies.combinators import SEEDS, heterogeneous, random_points, seeded, with_init
from strategies.instances import PromptInstance
from strategies.ladder import rung_sizes
from theorems import claim, evidence
from theorems.framework.registry import NIGHTLY_ONLY
from theorems.limits import flow
from theorems.maxmargin.claims_gd import reached_selection
from theorems.maxmargin.claims_svm import margin_readings
from theorems.maxmargin.common import LOSS_GAP_TOL, descent_signs

MEDIUM, LARGE = rung_sizes("medium"), rung_sizes("large")


def record_sizes(inst: PromptInstance) -> None:
    """n, T, the key dimension and whether n(T − 1) > d, as metrics of the example."""
    n, T, d = inst.keys.shape
    evidence.metric("n", n)
    evidence.metric("T", T)
    evidence.metric("key dimension", d)
    evidence.metric("n(T − 1) > d", float(n * (T - 1) > d))


# ---- Theorem L, the authors' protocol ----------------------------------------------------------


@claim("MM-THM-L-RANDOM-MEDIUM")
@given(inst=with_init(global_opt_instances(**MEDIUM)))
def test_theorem_l_random_init_medium(inst):
    """Authors' protocol for Theorem L at the medium rung (n, T ≤ 32, keys in dimension ≤ 128,
    n(T − 1) > d included): with continuous random scores and a random p(0), the selection α̂
    that GD reaches is locally optimal and p(t)/‖p(t)‖ → p^mm(α̂)/‖p^mm(α̂)‖."""
    record_sizes(inst)
    lim = flow(inst.problem, inst.p0)
    assert lim.diverges, lim.describe()
    selected, verdict, gap = reached_selection(inst, lim)
    assert verdict.locally_optimal, f"GD selected {selected.tolist()}: {verdict.reason}"
    assert lim.converged_to(selected), lim.why_not(selected, "its own")
    assert gap is None or gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g} > {LOSS_GAP_TOL:g}"


@claim("MM-THM-L-RANDOM-LARGE", runs_only_with=NIGHTLY_ONLY)
@given(inst=with_init(global_opt_instances(**LARGE)))
def test_theorem_l_random_init_large(inst):
    """Authors' protocol for Theorem L at the large rung (n, T ≤ 256, n·T ≤ 16 384, keys in
    dimension ≤ 1024): with continuous random scores and a random p(0), the selection α̂ that
    GD reaches is locally optimal and p(t)/‖p(t)‖ → p^mm(α̂)/‖p^mm(α̂)‖."""
    record_sizes(inst)
    lim = flow(inst.problem, inst.p0)
    assert lim.diverges, lim.describe()
    selected, verdict, gap = reached_selection(inst, lim)
    assert verdict.locally_optimal, f"GD selected {selected.tolist()}: {verdict.reason}"
    assert lim.converged_to(selected), lim.why_not(selected, "its own")
    assert gap is None or gap <= LOSS_GAP_TOL, f"L(p) − loss floor = {gap:.3g} > {LOSS_GAP_TOL:g}"


# ---- Theorem G ---------------------------------------------------------------------------------


@claim("MM-THM-G-MEDIUM")
@given(inst=heterogeneous(equal_nonopt_instances(**MEDIUM)))
def test_theorem_g_medium(inst):
    """Theorem G at the medium rung: under Assumption A, η ≤ 1/L_p, ATT-SVM(opt) feasible and
    equal non-optimal scores, GD from any p(0) has ‖p(t)‖ → ∞, p(t)/‖p(t)‖ → p^mm(opt)/‖p^mm(opt)‖,
    s_opt → 1 and L(p(t)) → (1/n)Σℓ(γ_i,opt_i)."""
    record_sizes(inst)
    lim = flow(inst.problem, inst.p0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")
    assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL


@claim("MM-THM-G-N1-MEDIUM")
@given(inst=heterogeneous(equal_nonopt_instances(**{**MEDIUM, "n": 1})))
def test_theorem_g_single_input_medium(inst):
    """Theorem G for a single input (n = 1) at the medium rung (T ≤ 32, keys in dimension ≤ 128):
    GD from any p(0) converges in direction to p^mm(opt), with s_opt → 1 and L → ℓ(γ_opt)."""
    record_sizes(inst)
    lim = flow(inst.problem, inst.p0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")
    assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL


@claim("MM-THM-G-N1-LARGE", runs_only_with=NIGHTLY_ONLY)
@given(inst=heterogeneous(equal_nonopt_instances(**{**LARGE, "n": 1})))
def test_theorem_g_single_input_large(inst):
    """Theorem G for a single input (n = 1) at the large rung (T ≤ 256, keys in dimension ≤ 1024):
    GD from any p(0) converges in direction to p^mm(opt), with s_opt → 1 and L → ℓ(γ_opt)."""
    record_sizes(inst)
    lim = flow(inst.problem, inst.p0)
    assert lim.converged_to(inst.alpha), lim.why_not(inst.alpha, "the global")
    assert lim.loss_gap(inst.alpha) <= LOSS_GAP_TOL


# ---- Lemma (descent direction) -----------------------------------------------------------------


@claim("MM-LEMMA-DESCENT-MEDIUM")
@given(inst=equal_nonopt_instances(**MEDIUM), seed=SEEDS)
def test_descent_direction_medium(inst, seed):
    """The descent lemma at the medium rung: under Assumption A, if every input's non-optimal
    tokens share one score and ATT-SVM(opt) is feasible, then ⟨∇L(p), p^mm⟩ < 0 for every
    p ∈ R^d: p^mm is a global descent direction."""
    record_sizes(inst)
    points = random_points(seeded(seed), inst.keys.shape[2], 20, -1.0, 4.0).numpy()
    for sign, _, cos, _ in descent_signs(inst, points, center=inst.alpha):
        evidence.slack("1 + cos(∇L, p^mm)  (< 1 ⇔ descent)", 1 + cos, 1.0)
        assert sign < 0, f"⟨∇L(p), p^mm⟩ ≥ 0 (sign {sign}, cos {cos:.3g})"


# ---- the SVM -----------------------------------------------------------------------------------


@claim("MM-SVM-MARGIN-MEDIUM")
@given(inst=global_opt_instances(**MEDIUM), seed=SEEDS)
def test_svm_margin_medium(inst, seed):
    """At the medium rung, where n(T − 1) constraints outnumber the key dimension: when
    ATT-SVM(α) is feasible, 1/‖p^mm(α)‖ = max over unit u of min over i and t ≠ α_i of
    (k_iα_i − k_it)ᵀu, attained at u = p^mm(α)/‖p^mm(α)‖."""
    record_sizes(inst)
    m = margin_readings(inst.keys, inst.alpha, seed)
    assert m.at_pmm <= m.tol, f"margin at p̂^mm is off 1/‖p^mm‖ by {m.at_pmm:.3g} > {m.tol:.3g}"
    assert m.socp <= m.socp_tol, f"SOCP max-min margin is off 1/‖p^mm‖ by {m.socp:.3g}"
    assert m.best_random <= m.margin * (1 + 1e-12), (
        f"a random unit u has margin {m.best_random:.6g} > {m.margin:.6g}"
    )


@claim("MM-SVM-MARGIN-LARGE", runs_only_with=NIGHTLY_ONLY)
@given(inst=global_opt_instances(**LARGE), seed=SEEDS)
def test_svm_margin_large(inst, seed):
    """At the large rung: when ATT-SVM(α) is feasible, 1/‖p^mm(α)‖ = max over unit u of min over
    i and t ≠ α_i of (k_iα_i − k_it)ᵀu, attained at u = p^mm(α)/‖p^mm(α)‖."""
    record_sizes(inst)
    m = margin_readings(inst.keys, inst.alpha, seed)
    assert m.at_pmm <= m.tol, f"margin at p̂^mm is off 1/‖p^mm‖ by {m.at_pmm:.3g} > {m.tol:.3g}"
    assert m.socp <= m.socp_tol, f"SOCP max-min margin is off 1/‖p^mm‖ by {m.socp:.3g}"
    assert m.best_random <= m.margin * (1 + 1e-12), (
        f"a random unit u has margin {m.best_random:.6g} > {m.margin:.6g}"
    )
