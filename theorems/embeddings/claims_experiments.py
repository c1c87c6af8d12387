"""The experiments of arXiv 2505.17282 (§4.2): trained E and p on a pseudo-IMDB corpus, one layer
against two, and the real IMDB/Yelp data when it is on disk.

The protocol (the G3 corpus, the models, the training, the scaled-down sizes and the spec's own)
is in ``theorems.embeddings.common_experiments``; the figures in ``theorems.embeddings.plots``.
Each claim records every run's metrics before its verdict; the run that fails (its corpus and
protocol) is the counterexample.
"""

from __future__ import annotations

import pytest

from theorems.embeddings.common_experiments import (
    NO_REAL_DATA,
    SEEDS,
    Pair,
    Run,
    compared,
    g3_run,
    label_signal,
    one_layer_runs,
    real_corpora,
    real_run,
)
from theorems.framework import evidence
from theorems.framework.registry import claim

# ---- the spec's suggested assertions (§4.2), per seed ------------------------------------------
#: (i) Spearman(E_sᵀv, Δ_s) ≥ 0.7 (spec §4.2, suggested assertion).
V_MIN_SPEARMAN = 0.7
#: (ii) Spearman(E_sᵀp, |Δ_s|) ≥ 0.5 (spec §4.2, suggested assertion); (iii), the U-shape of
#: the group means, is Run.u_shaped.
U_MIN_SPEARMAN = 0.5
#: The two-layer model's training loss at least 100× lower (spec §4.2 [U]: 1e-1 against 1e-5).
LOSS_RATIO = 100.0


# ---------------------------------------------------------------------------------------------
# One layer on the pseudo-IMDB corpus: monotone in v, U-shaped in p
# ---------------------------------------------------------------------------------------------


@claim("EMB-G3-V")
def test_g3_head_scores_monotone_in_delta():
    """Companion plot of Figure 1: the head scores ⟨E_s, v⟩ of the trained one-layer model rise
    with the posterior difference Δ_s of the tokens, mirroring ⟨E_s, v⟩ ∝ α_s."""
    runs = one_layer_runs()
    for run in runs:
        evidence.metric(f"spearman_v_{run.label}", run.v_spearman())
        evidence.slack("one_minus_spearman_v", 1 - run.v_spearman(), 1 - V_MIN_SPEARMAN)
    for run in evidence.each(runs):
        rho = run.v_spearman()
        assert rho >= V_MIN_SPEARMAN, f"{run}: Spearman(⟨E_s, v⟩, Δ) = {rho:.3f} < {V_MIN_SPEARMAN}"


@claim("EMB-G3-U")
def test_g3_cls_scores_u_shaped():
    """Figure 1: the `<cls>` scores ⟨E_s, p⟩ of the trained one-layer model are U-shaped in the
    posterior difference Δ_s: high for a large |Δ_s| whichever its sign, low for Δ_s ≈ 0."""
    runs = one_layer_runs()
    for run in runs:
        rho, (low, mid, high) = run.u_spearman(), run.u_means()
        evidence.metric(f"spearman_p_abs_{run.label}", rho)
        evidence.slack("one_minus_spearman_p_abs", 1 - rho, 1 - U_MIN_SPEARMAN)
        evidence.metric("u_depth", min(low, high) - mid)
    for run in evidence.each(runs):
        rho = run.u_spearman()
        assert rho >= U_MIN_SPEARMAN, (
            f"{run}: Spearman(⟨E_s, p⟩, |Δ|) = {rho:.3f} < {U_MIN_SPEARMAN}"
        )
        assert run.u_shaped(), f"{run}: not U-shaped, group means {run.u_means()}"


@claim("EMB-G3-SIGNED")
def test_g3_cls_scores_monotone_in_signed_delta():
    """(Wrong) The `<cls>` scores ⟨E_s, p⟩ of the trained one-layer model rise monotonically with
    the signed posterior difference Δ_s."""
    runs = one_layer_runs()
    for run in runs:
        evidence.metric("signed_spearman", run.signed_spearman())
    for run in evidence.each(runs):
        rho = run.signed_spearman()
        assert rho >= U_MIN_SPEARMAN, f"{run}: Spearman(⟨E_s, p⟩, Δ) = {rho:.3f} < {U_MIN_SPEARMAN}"


# ---------------------------------------------------------------------------------------------
# The numbers the spec records for its own G3 setup (§4.2: n = 2000, T = 30, 300 epochs)
# ---------------------------------------------------------------------------------------------

# The spec's results "over 3 seeds × {v trained, v fixed}" (§4.2). Its seeds are not ours: it drew
# G3 with numpy, this suite with torch (strategies.zipf_corpus), so the corpora differ in their
# biases b_s, and agreement is asserted within a tolerance, not to the digit.
SPEC_RHO_V, SPEC_RHO_U = (0.87, 0.96), (0.74, 0.86)  # Spearman(Eᵀv, Δ), Spearman(Eᵀp, |Δ|)
#: Mean Eᵀp over Δ < −0.6, |Δ| < 0.2, Δ > 0.6.
SPEC_MEANS = ((1.3, 3.7), (-9.6, -3.4), (1.3, 3.4))
SPEC_LOSS = {"one-v-trained": (0.002, 0.012), "one-v-fixed": (0.05, 0.06)}  # final train loss
#: Spearman: ±0.05 around the spec's range, about half its width (0.09 and 0.12 over 3 seeds).
SPEC_RHO_TOL = 0.05
#: Group means and final losses: a factor 2 either side of the range (the spec's own
#: v-trained loss spans a factor 6 over its 3 seeds).
SPEC_FACTOR = 2.0
#: The smallest ratio of the spec's two loss ranges: 0.05 (v fixed) / 0.012 (v trained).
SPEC_LOSS_RATIO = SPEC_LOSS["one-v-fixed"][0] / SPEC_LOSS["one-v-trained"][1]
#: EMB-G3-SPEC-LOSS-RATIO's reading (the ratio, corpus by corpus, in place of the two absolute
#: ranges) was chosen on EMB-G3-SPEC-LOSS's runs, seeds 0–2 (ratios 5.4, 22.6, 5.1 against
#: 4.17); the threshold itself is the spec's. It is tested on a disjoint corpus, same sizes and
#: protocol: seed 3 under ci (two runs of ~15 s of its own: the parent's runs are not shared).
#: Held-out check of seeds 3–5 (2026-12-03): ratios 5.7–7.7, every one above 4.17.
SPEC_LOSS_RATIO_SEEDS = (3,)


def _within(x: float, band: tuple[float, float]) -> bool:
    """x in the spec's range, widened by ±SPEC_RHO_TOL."""
    return band[0] - SPEC_RHO_TOL <= x <= band[1] + SPEC_RHO_TOL


def _within_factor(x: float, band: tuple[float, float]) -> bool:
    """x within a factor SPEC_FACTOR of the spec's range, with its sign."""
    lo, hi = sorted(band, key=abs)
    return abs(lo) / SPEC_FACTOR <= abs(x) <= abs(hi) * SPEC_FACTOR and x * lo > 0


@claim("EMB-G3-SPEC-RHO")
def test_g3_spec_correlations():
    """The spec's calibration of G3, over 3 seeds × {v trained, v fixed}: Spearman(E_sᵀv, Δ_s) =
    0.87–0.96 and Spearman(E_sᵀp, |Δ_s|) = 0.74–0.86."""
    runs = one_layer_runs(spec_sizes=True)
    for run in runs:
        evidence.metric(f"spearman_v_{run.label}", run.v_spearman())
        evidence.metric(f"spearman_p_abs_{run.label}", run.u_spearman())
    for run in evidence.each(runs):
        rho_v, rho_u = run.v_spearman(), run.u_spearman()
        assert _within(rho_v, SPEC_RHO_V) and _within(rho_u, SPEC_RHO_U), (
            f"{run}: Spearman(Eᵀv, Δ) = {rho_v:.3f} (spec {SPEC_RHO_V}), "
            f"Spearman(Eᵀp, |Δ|) = {rho_u:.3f} (spec {SPEC_RHO_U}), tolerance ±{SPEC_RHO_TOL}"
        )


@claim("EMB-G3-SPEC-MEANS")
def test_g3_spec_group_means():
    """The spec's calibration of G3, over 3 seeds × {v trained, v fixed}: the mean of E_sᵀp is
    +1.3…+3.7 over tokens with Δ < −0.6, −3.4…−9.6 over |Δ| < 0.2 and +1.3…+3.4 over Δ > 0.6."""
    runs = one_layer_runs(spec_sizes=True)
    for run in runs:
        for name, value in zip(("low", "mid", "high"), run.u_means(), strict=True):
            evidence.metric(f"mean_ep_{name}_{run.label}", value)
    for run in evidence.each(runs):
        means = run.u_means()
        assert all(_within_factor(m, band) for m, band in zip(means, SPEC_MEANS, strict=True)), (
            f"{run}: group means {tuple(round(m, 3) for m in means)} "
            f"against the spec's {SPEC_MEANS} (factor {SPEC_FACTOR:g})"
        )


@claim("EMB-G3-SPEC-LOSS")
def test_g3_spec_final_losses():
    """The spec's calibration of G3, over 3 seeds: the final train loss is 0.002–0.012 with v
    trained and 0.05–0.06 with v fixed."""
    runs = one_layer_runs(spec_sizes=True)
    for run in runs:
        evidence.metric(f"final_loss_{run.label}", run.final_loss)
        evidence.metric(f"label_signal_seed{run.seed}", label_signal(run.seed))
    for run in evidence.each(runs):
        lo, hi = SPEC_LOSS[run.label]
        assert lo / SPEC_FACTOR <= run.final_loss <= hi * SPEC_FACTOR, (
            f"{run}: final loss {run.final_loss:.4g} outside [{lo / SPEC_FACTOR:g}, "
            f"{hi * SPEC_FACTOR:g}] (spec {lo}–{hi}, factor {SPEC_FACTOR:g})"
        )


@claim("EMB-G3-SPEC-LOSS-RATIO")
def test_g3_spec_loss_ratio():
    """The spec's two loss ranges together, corpus by corpus: on every G3 corpus the final loss
    with v fixed is at least 0.05/0.012 ≈ 4.2× the final loss with v trained."""
    pairs = compared("one-v-fixed", "one-v-trained", spec_sizes=True, seeds=SPEC_LOSS_RATIO_SEEDS)
    for pair in pairs:
        ratio = pair.first.final_loss / pair.second.final_loss
        evidence.metric("loss_ratio_fixed_over_trained", ratio)
        evidence.slack("spec_ratio_over_ratio", SPEC_LOSS_RATIO, ratio)
    for pair in evidence.each(pairs):
        ratio = pair.first.final_loss / pair.second.final_loss
        assert ratio >= SPEC_LOSS_RATIO, (
            f"seed {pair.seed}: loss(v fixed)/loss(v trained) = {ratio:.3g} < {SPEC_LOSS_RATIO:.3g}"
        )


# ---------------------------------------------------------------------------------------------
# One layer against two layers with skip connections and LayerNorm
# ---------------------------------------------------------------------------------------------

#: "Near 1e-1" and "about 1e-5" (spec §4.2 [U]) read as within a factor 10 of the number.
NEAR_FACTOR = 10.0
ONE_LAYER_LEVEL, TWO_LAYER_LEVEL = 1e-1, 1e-5
#: "About 1e-1" (the v-trained reading): the final loss within NEAR_FACTOR of 1e-1, [1e-2, 1].
ONE_LAYER_BAND = (ONE_LAYER_LEVEL / NEAR_FACTOR, ONE_LAYER_LEVEL * NEAR_FACTOR)
#: "Plateaus": over the last quarter of training the loss falls by less than a factor 2.
PLATEAU_FACTOR = 2.0
#: "Near 1e-2 to 1e-1" (the v-fixed reading) read literally: the final loss in [1e-2, 1e-1].
VFIXED_BAND = (1e-2, 1e-1)


def _near(loss: float, level: float) -> bool:
    return level / NEAR_FACTOR <= loss <= level * NEAR_FACTOR


def _plateau_drop(run: Run) -> float:
    """L(3/4 of training) / L(end): how much the loss still falls over the last quarter."""
    curve = run.curve
    return float(curve[(3 * (len(curve) - 1)) // 4] / curve[-1])


def loss_reading(pair: Pair, one_band: tuple[float, float]) -> list[str]:
    """The clauses of a loss reading that fail on ``pair`` (two layers, one layer; its losses are
    recorded): the one-layer model's final loss in ``one_band`` and on a plateau (PLATEAU_FACTOR),
    the two-layer model's within NEAR_FACTOR of 1e-5 and at least LOSS_RATIO× lower."""
    two, one = pair.first, pair.second
    drop, ratio = _plateau_drop(one), one.final_loss / two.final_loss
    evidence.metric(f"final_loss_{one.label}", one.final_loss)
    evidence.metric(f"plateau_drop_{one.label}", drop)
    evidence.metric("final_loss_two", two.final_loss)
    evidence.metric(f"loss_ratio_{one.label}_over_two", ratio)
    failed = []
    if not one_band[0] <= one.final_loss <= one_band[1]:
        failed.append(f"one layer ({one.label}) ends at {one.final_loss:.3g}, outside {one_band}")
    if drop >= PLATEAU_FACTOR:
        failed.append(f"one layer still falls {drop:.3g}× over the last quarter (no plateau)")
    if not _near(two.final_loss, TWO_LAYER_LEVEL):
        failed.append(f"two layers end at {two.final_loss:.3g}, not within 10× of 1e-5")
    if ratio < LOSS_RATIO:
        failed.append(f"loss ratio one/two = {ratio:.3g} < {LOSS_RATIO:g}")
    return failed


@claim("EMB-TWOLAYER-LOSS")
def test_two_layers_fit_100x_better_than_one():
    """“The one-layer model plateaus at a training loss of about 1e-1; a two-layer model with
    skip connections and layer normalization reaches about 1e-5”, with v trained in both."""
    pairs = compared("two", "one-v-trained")
    failed = [loss_reading(pair, ONE_LAYER_BAND) for pair in pairs]
    for pair, clauses in zip(evidence.each(pairs), failed, strict=True):
        assert not clauses, f"seed {pair.seed}: " + ", ".join(clauses)


@claim("EMB-TWOLAYER-LOSS-VFIXED")
def test_two_layers_fit_100x_better_than_fixed_head():
    """The one-layer model of the theory (v fixed) plateaus at a training loss near 1e-2 to 1e-1,
    while a two-layer model with skip connections and layer normalization reaches about 1e-5."""
    pairs = compared("two", "one-v-fixed")
    failed = [loss_reading(pair, VFIXED_BAND) for pair in pairs]
    for pair, clauses in zip(evidence.each(pairs), failed, strict=True):
        assert not clauses, f"seed {pair.seed}: " + ", ".join(clauses)


@claim("EMB-TWOLAYER-V")
def test_two_layers_keep_head_monotone():
    """With two layers (skip connections and layer normalization) the head side persists: the
    head scores the `<cls>` read-out averages rise with the posterior difference Δ_s."""
    runs = [g3_run("two", seed) for seed in SEEDS]
    for run in runs:
        evidence.metric("spearman_v", run.v_spearman())
    for run in evidence.each(runs):
        rho = run.v_spearman()
        assert rho >= V_MIN_SPEARMAN, (
            f"{run}: Spearman(mean ⟨h, v⟩, Δ) = {rho:.3f} < {V_MIN_SPEARMAN}"
        )


@claim("EMB-TWOLAYER-U")
def test_two_layers_keep_u_shape():
    """With two layers (skip connections and layer normalization) the U-shape persists: the
    `<cls>` scores of the keys the attention reads are U-shaped in the posterior difference Δ_s."""
    runs = [g3_run("two", seed) for seed in SEEDS]
    for run in runs:
        evidence.metric("spearman_p_abs", run.u_spearman())
        evidence.metric("spearman_centred", run.centred_spearman())
    for run in evidence.each(runs):
        rho = run.u_spearman()
        assert rho >= U_MIN_SPEARMAN and run.u_shaped(), (
            f"{run}: Spearman(mean ⟨h, p⟩, |Δ|) = {rho:.3f}, means {run.u_means()}"
        )


@claim("EMB-TWOLAYER-U-MEANS")
def test_two_layers_keep_u_shaped_means():
    """With two layers the U-shape of the group means persists: the mean `<cls>` score of the
    keys over tokens with Δ < −0.6 and over Δ > 0.6 both exceed the mean over |Δ| < 0.2."""
    runs = [g3_run("two", seed) for seed in SEEDS]
    for run in runs:
        low, mid, high = run.u_means()
        evidence.metric("u_depth", min(low, high) - mid)
    for run in evidence.each(runs):
        assert run.u_shaped(), f"{run}: group means {run.u_means()} are not U-shaped"


# ---------------------------------------------------------------------------------------------
# Real data, only when it is on disk
# ---------------------------------------------------------------------------------------------


@claim("EMB-REAL")
def test_real_data_phenomenology():
    """Figure 1 on IMDB and Yelp: for the trained one-layer model, ⟨E_s, v⟩ rises with the
    posterior difference Δ_s of the tokens and ⟨E_s, p⟩ is U-shaped in Δ_s."""
    corpora = real_corpora()
    if not corpora:
        pytest.skip(NO_REAL_DATA)
    runs = [real_run(k, name, texts, labels) for k, (name, texts, labels) in enumerate(corpora)]
    for run in runs:
        evidence.metric("spearman_v", run.v_spearman())
        evidence.metric("spearman_p_abs", run.u_spearman())
    for run in evidence.each(runs):
        rho_v, rho_u = run.v_spearman(), run.u_spearman()
        assert rho_v >= V_MIN_SPEARMAN, f"{run.label}: Spearman(⟨E_s, v⟩, Δ) = {rho_v:.3f}"
        assert rho_u >= U_MIN_SPEARMAN, f"{run.label}: Spearman(⟨E_s, p⟩, |Δ|) = {rho_u:.3f}"
        assert run.u_shaped(), f"{run.label}: not U-shaped, means {run.u_means()}"
