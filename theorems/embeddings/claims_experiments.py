"""The experiments of arXiv 2505.17282 (§4.2): trained E and p on a pseudo-IMDB corpus, one layer
against two, and the real IMDB/Yelp data when it is on disk.

Spec ``spec/embeddings.md`` §4.2. The paper's setup (tokenizer, d, optimizer, epochs, whether v
is trained) is [U]; the spec calibrated a stand-in, the Zipf corpus G3
(``strategies.zipf_corpus``: |S| = 300, z_s ∝ 1/s, label bias b_s ~ N(0, 0.5²) clipped to ±0.98,
the 20 most frequent tokens shrunk ×0.1). Models are ``models.embedding.OneLayerModel`` (the
paper's f = softmax(pᵀE_Xᵀ)E_X v, E⁰ ~ N(0, I/d), p⁰ = 0, v⁰ ~ N(0, I/d)) and ``TwoLayerModel``
(one self-attention block with skip and LayerNorm before the same read-out), trained by
``train_full_batch`` (full-batch Adam on the mean logistic loss).

Scaled down, honestly: the spec's n = 2000, T = 30, 300 epochs costs 14 s per one-layer run and
60 s per two-layer run here (1 thread; 45 and 200 ms per epoch). Most claims below use n = 600,
T = 20, 150 epochs (about 1 s and 5 s per run), three fixed seeds, d = 32, lr = 1e-2, tokens
with ≥ 20 occurrences. The claims that check the numbers the spec records for its own setup
(EMB-G3-SPEC-*) run that setup exactly, one-layer model only (6 runs, about 90 s). The scores
are read where the `<cls>` read-out reads them (OneLayerModel.key_scores): on E for one layer,
on the LayerNorm output H1 for two.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from models.device import device
from models.embedding import (
    PAD_ID,
    OneLayerModel,
    TwoLayerModel,
    build_vocab,
    encode,
    load_imdb,
    load_yelp_polarity,
    posterior_difference,
    tokenize,
    train_full_batch,
)
from strategies import zipf_corpus
from theorems.embeddings import plots
from theorems.embeddings.plots import draw_scores_figure
from theorems.framework import evidence
from theorems.framework.registry import claim

F64 = torch.float64

# ---- the corpus and training protocol (spec §4.2, scaled down; see the module docstring) ------
VOCAB, N_SEQ, SEQ_LEN, DIM = 300, 600, 20, 32
EPOCHS, LR = 150, 1e-2
SEEDS = (0, 1, 2)  # "at most 3 fixed seeds"
MIN_COUNT = 20  # Δ_s only for tokens with ≥ 20 occurrences (spec §4.2)

# ---- the spec's suggested assertions (§4.2), per seed ------------------------------------------
V_MIN_SPEARMAN = 0.7  # (i) Spearman(E_sᵀv, Δ_s) ≥ 0.7
U_MIN_SPEARMAN = 0.5  # (ii) Spearman(E_sᵀp, |Δ_s|) ≥ 0.5
U_OUTER, U_INNER = 0.6, 0.2  # (iii) mean Eᵀp over Δ < −0.6 and over Δ > 0.6 above |Δ| < 0.2
LOSS_RATIO = 100.0  # the two-layer model's training loss at least 100× lower

CORPUS = dict(S=VOCAB, n=N_SEQ, T=SEQ_LEN)
# The spec's own G3 setup (§4.2: n = 2000, T = 30, 300 epochs), for the claim that checks the
# numbers it records (EMB-G3-SPEC); about 14 s per one-layer run on one thread.
SPEC_CORPUS, SPEC_EPOCHS = dict(S=VOCAB, n=2000, T=30), 300

# ---- real data (spec §4.2): only when a path is given, never downloaded ------------------------
IMDB_ENV, YELP_ENV = "ATTN_IMDB_DIR", "ATTN_YELP_CSV"
REAL_DOCS, REAL_VOCAB, REAL_LEN = 2000, 2000, 64


@dataclass(frozen=True)
class Run:
    """One trained model on one corpus and what the figures of §4.2 plot."""

    label: str
    seed: int
    curve: np.ndarray  # training loss per epoch (epochs + 1 values)
    delta: np.ndarray  # Δ_s over the tokens with ≥ MIN_COUNT occurrences
    # The scores the `<cls>` read-out reads, over the same tokens: the mean over the occurrences
    # of s of ⟨h, v⟩ and ⟨h, p⟩, h the keys the `<cls>` attention scores (model.key_scores). For
    # the one-layer model h = E_s, so these are ⟨E_s, v⟩ and ⟨E_s, p⟩; for the two-layer model
    # h is the LayerNorm output H1 (the input embeddings E are never read by `<cls>`).
    ev: np.ndarray
    ep: np.ndarray
    ep_centred: np.ndarray  # the same, ⟨h, p⟩ minus its sequence's mean (the softmax ignores it)
    reads: str = "E_s"  # what the scores are read on, for figure labels

    @property
    def abs_delta(self) -> np.ndarray:
        return np.abs(self.delta)

    @property
    def final_loss(self) -> float:
        return float(self.curve[-1])

    def v_spearman(self) -> float:
        return float(spearmanr(self.ev, self.delta)[0])

    def u_spearman(self) -> float:
        return float(spearmanr(self.ep, np.abs(self.delta))[0])

    def signed_spearman(self) -> float:
        return float(spearmanr(self.ep, self.delta)[0])

    def u_means(self) -> tuple[float, float, float]:
        """Mean ⟨E_s, p⟩ over Δ < −0.6, |Δ| < 0.2 and Δ > 0.6."""
        d = self.delta
        return (
            float(self.ep[d < -U_OUTER].mean()),
            float(self.ep[np.abs(d) < U_INNER].mean()),
            float(self.ep[d > U_OUTER].mean()),
        )

    def u_shaped(self) -> bool:
        low, mid, high = self.u_means()
        return low > mid and high > mid


def _scores(model, seqs, y, vocab: int, skip=()) -> tuple[np.ndarray, ...]:
    delta, mask = posterior_difference(seqs, y, vocab, min_count=MIN_COUNT)
    for s in skip:
        mask[s] = False
    ev, _ = model.key_scores(seqs, model.v)
    ep, counts = model.key_scores(seqs, model.p)
    with torch.no_grad():  # the per-sequence shift removed: Σ over occurrences, then / counts
        h_p = model.hidden(seqs.to(model.E.device)) @ model.p
        centred = (h_p - h_p.mean(-1, keepdim=True)).cpu().reshape(-1)
    total = torch.zeros(vocab, dtype=F64).index_add_(0, seqs.reshape(-1), centred)
    ep_centred = total / counts.cpu().clamp_min(1)
    keep = mask.numpy()
    return tuple(x.cpu().numpy()[keep] for x in (delta, ev, ep, ep_centred))


def _train(label: str, model, seqs, y, vocab: int, seed: int, skip=(), epochs=EPOCHS) -> Run:
    """Train on the ATTN_DEVICE device (models.device; cpu unless set), read out on the host."""
    model = model.to(device())
    curve = train_full_batch(model, seqs, y, epochs=epochs, lr=LR, seed=seed).numpy()
    delta, ev, ep, ep_centred = _scores(model, seqs, y, vocab, skip)
    reads = "H1" if isinstance(model, TwoLayerModel) else "E_s"
    return Run(label, seed, curve, delta, ev, ep, ep_centred, reads)


@cache
def g3_run(kind: str, seed: int, spec_sizes: bool = False) -> Run:
    """Train one model on the G3 corpus of ``seed`` (cached: several claims read each run).

    kind: "one-v-trained", "one-v-fixed" (the theory's model) or "two" (v trained).
    spec_sizes: the spec's own setup (SPEC_CORPUS, SPEC_EPOCHS) instead of the scaled-down one."""
    corpus, epochs = (SPEC_CORPUS, SPEC_EPOCHS) if spec_sizes else (CORPUS, EPOCHS)
    seqs, y = zipf_corpus(seed, **corpus)
    if kind == "two":
        model = TwoLayerModel(VOCAB, DIM, train_v=True, seed=seed)
    else:
        model = OneLayerModel(VOCAB, DIM, train_v=(kind == "one-v-trained"), seed=seed)
    return _train(kind, model, seqs, y, VOCAB, seed, epochs=epochs)


def record_corpus(seed: int, kind: str, spec_sizes: bool = False) -> None:
    """The example of a corpus claim: the corpus and protocol parameters (the G3 corpus is a
    deterministic function of them, strategies.zipf_corpus)."""
    corpus, epochs = (SPEC_CORPUS, SPEC_EPOCHS) if spec_sizes else (CORPUS, EPOCHS)
    evidence.instance(
        {
            "corpus": "G3 zipf_corpus",
            "seed": seed,
            **corpus,
            "d": DIM,
            "epochs": epochs,
            "lr": LR,
            "model": kind,
            "min_count": MIN_COUNT,
        }
    )


def judge(rows: list[tuple[int, str, bool, str]], spec_sizes: bool = False) -> None:
    """Every run is evaluated (and its metrics recorded) before the verdict; the corpus of the
    first failing run becomes the counterexample. rows: (seed, model kind, ok, message)."""
    bad = [row for row in rows if not row[2]]
    seed, kind, _, _ = bad[0] if bad else rows[-1]
    record_corpus(seed, kind, spec_sizes)
    assert not bad, "; ".join(message for *_, message in bad)


# ---- figures -----------------------------------------------------------------------------------

SCORES_FIGURE = "emb_g3_scores_vs_delta.png"
LOSS_FIGURE = "emb_g3_loss_one_vs_two_layers.png"


def draw_loss_figure() -> None:
    kinds = ("one-v-trained", "one-v-fixed", "two")
    curves = {seed: {kind: g3_run(kind, seed).curve for kind in kinds} for seed in SEEDS}
    plots.loss_figure(curves, LOSS_FIGURE)


# ---------------------------------------------------------------------------------------------
# One layer on the pseudo-IMDB corpus: monotone in v, U-shaped in p
# ---------------------------------------------------------------------------------------------

_ONE_LAYER = ("one-v-trained", "one-v-fixed")
_SETUP = (
    f"G3 corpus (|S| = {VOCAB}, n = {N_SEQ}, T = {SEQ_LEN}; scaled down from the spec's n = 2000, "
    f"T = 30), one-layer model with d = {DIM}, E and p trained ({EPOCHS} epochs of full-batch "
    f"Adam, lr {LR}) with v trained and with v fixed, seeds {SEEDS}; Δ_s over tokens with "
    f"≥ {MIN_COUNT} occurrences"
)


@claim("EMB-G3-V")
def test_g3_head_scores_monotone_in_delta():
    """Real-data phenomenology, head side (spec §4.2, companion plot [R]/[U]): on the G3 corpus
    (|S| = 300, n = 600, T = 20; scaled down from the spec's n = 2000, T = 30), one-layer model
    with d = 32, E and p trained (150 epochs of full-batch Adam, lr 0.01) with v trained and
    with v fixed, seeds (0, 1, 2); Δ_s over tokens with ≥ 20 occurrences, ⟨E_s, v⟩ rises with
    the posterior difference Δ_s: Spearman(⟨E_s, v⟩, Δ_s) ≥ 0.7 for every seed and both
    v-protocols (the trained analogue of ⟨E_s, v⟩ ∝ α_s)."""
    runs = [g3_run(kind, seed) for seed in SEEDS for kind in _ONE_LAYER]
    draw_scores_figure(
        [g3_run(kind, SEEDS[0]) for kind in _ONE_LAYER],
        SCORES_FIGURE,
        "G3, one layer: U-shaped ⟨E_s, p⟩ (left), monotone ⟨E_s, v⟩ (right)",
    )
    rows = []
    for run in runs:
        rho = run.v_spearman()
        evidence.metric(f"spearman_v_{run.label}", rho)
        evidence.slack("one_minus_spearman_v", 1 - rho, 1 - V_MIN_SPEARMAN)
        message = f"{run.label}, seed {run.seed}: Spearman(⟨E_s, v⟩, Δ) = {rho:.3f} < 0.7"
        rows.append((run.seed, run.label, rho >= V_MIN_SPEARMAN, message))
    judge(rows)


@claim("EMB-G3-U")
def test_g3_cls_scores_u_shaped():
    """Real-data phenomenology, `<cls>` side (spec §4.2, Figure 1): on the G3 corpus (|S| = 300, n
    = 600, T = 20; scaled down from the spec's n = 2000, T = 30), one-layer model with d = 32, E
    and p trained (150 epochs of full-batch Adam, lr 0.01) with v trained and with v fixed,
    seeds (0, 1, 2); Δ_s over tokens with ≥ 20 occurrences, ⟨E_s, p⟩ is U-shaped in Δ_s:
    Spearman(⟨E_s, p⟩, |Δ_s|) ≥ 0.5, and the mean of ⟨E_s, p⟩ over tokens with Δ < −0.6 and over
    Δ > 0.6 both exceed the mean over |Δ| < 0.2, for every seed and both v-protocols."""
    rows = []
    for seed in SEEDS:
        for kind in _ONE_LAYER:
            run = g3_run(kind, seed)
            rho = run.u_spearman()
            evidence.metric(f"spearman_p_abs_{kind}", rho)
            evidence.slack("one_minus_spearman_p_abs", 1 - rho, 1 - U_MIN_SPEARMAN)
            low, mid, high = run.u_means()
            evidence.metric("u_depth", min(low, high) - mid)
            ok = rho >= U_MIN_SPEARMAN and run.u_shaped()
            message = (
                f"{kind}, seed {seed}: Spearman(⟨E_s, p⟩, |Δ|) = {rho:.3f}, means {run.u_means()}"
            )
            rows.append((seed, kind, ok, message))
    judge(rows)


@claim("EMB-G3-SIGNED")
def test_g3_cls_scores_monotone_in_signed_delta():
    """Monotone `<cls>` scores (wrong; spec §4.2 negative control): on the G3 corpus (|S| = 300, n
    = 600, T = 20; scaled down from the spec's n = 2000, T = 30), one-layer model with d = 32, E
    and p trained (150 epochs of full-batch Adam, lr 0.01) with v trained and with v fixed,
    seeds (0, 1, 2); Δ_s over tokens with ≥ 20 occurrences, ⟨E_s, p⟩ rises with the signed Δ_s:
    Spearman(⟨E_s, p⟩, Δ_s) ≥ 0.5 for every seed and v-protocol."""
    rows = []
    for seed in SEEDS:
        for kind in _ONE_LAYER:
            rho = g3_run(kind, seed).signed_spearman()
            evidence.metric("signed_spearman", rho)
            message = f"{kind}, seed {seed}: Spearman(⟨E_s, p⟩, Δ) = {rho:.3f} < 0.5"
            rows.append((seed, kind, rho >= U_MIN_SPEARMAN, message))
    judge(rows)


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
_SPEC_SETUP = (
    f"the spec's own G3 setup (|S| = {VOCAB}, n = 2000, T = 30, one-layer model with d = {DIM}, "
    f"E and p trained by {SPEC_EPOCHS} epochs of full-batch Adam, lr {LR}, with v trained and "
    f"with v fixed), on seeds {SEEDS}"
)


def _spec_runs() -> list[Run]:
    return [g3_run(kind, seed, spec_sizes=True) for seed in SEEDS for kind in _ONE_LAYER]


def _within_factor(x: float, band: tuple[float, float]) -> bool:
    lo, hi = sorted(band, key=abs)
    return abs(lo) / SPEC_FACTOR <= abs(x) <= abs(hi) * SPEC_FACTOR and x * lo > 0


@claim("EMB-G3-SPEC-RHO")
def test_g3_spec_correlations():
    """The spec's recorded correlations (§4.2: Spearman(E_sᵀv, Δ_s) = 0.87–0.96 and Spearman(E_sᵀp,
    |Δ_s|) = 0.74–0.86 over 3 seeds × two v-protocols) are reproduced on the spec's own G3 setup
    (|S| = 300, n = 2000, T = 30, one-layer model with d = 32, E and p trained by 300 epochs of
    full-batch Adam, lr 0.01, with v trained and with v fixed), on seeds (0, 1, 2): each run's
    two Spearman coefficients lie within ±0.05 of the spec's ranges."""
    rows = []
    for run in _spec_runs():
        rho_v, rho_u = run.v_spearman(), run.u_spearman()
        evidence.metric(f"spearman_v_{run.label}", rho_v)
        evidence.metric(f"spearman_p_abs_{run.label}", rho_u)
        ok_v = SPEC_RHO_V[0] - SPEC_RHO_TOL <= rho_v <= SPEC_RHO_V[1] + SPEC_RHO_TOL
        ok_u = SPEC_RHO_U[0] - SPEC_RHO_TOL <= rho_u <= SPEC_RHO_U[1] + SPEC_RHO_TOL
        message = (
            f"{run.label}, seed {run.seed}: Spearman(Eᵀv, Δ) = {rho_v:.3f} (spec {SPEC_RHO_V}), "
            f"Spearman(Eᵀp, |Δ|) = {rho_u:.3f} (spec {SPEC_RHO_U}), tolerance ±{SPEC_RHO_TOL}"
        )
        rows.append((run.seed, run.label, ok_v and ok_u, message))
    judge(rows, spec_sizes=True)


@claim("EMB-G3-SPEC-MEANS")
def test_g3_spec_group_means():
    """The spec's recorded U-shape (§4.2: the mean of E_sᵀp is +1.3…+3.7 over tokens with Δ < −0.6,
    −3.4…−9.6 over |Δ| < 0.2 and +1.3…+3.4 over Δ > 0.6) is reproduced on the spec's own G3
    setup (|S| = 300, n = 2000, T = 30, one-layer model with d = 32, E and p trained by 300
    epochs of full-batch Adam, lr 0.01, with v trained and with v fixed), on seeds (0, 1, 2):
    each run's three group means lie within a factor 2 of the spec's ranges, with their signs."""
    rows = []
    for run in _spec_runs():
        means = run.u_means()
        for name, value in zip(("low", "mid", "high"), means, strict=True):
            evidence.metric(f"mean_ep_{name}_{run.label}", value)
        ok = all(_within_factor(m, band) for m, band in zip(means, SPEC_MEANS, strict=True))
        message = (
            f"{run.label}, seed {run.seed}: group means {tuple(round(m, 3) for m in means)} "
            f"against the spec's {SPEC_MEANS} (factor {SPEC_FACTOR:g})"
        )
        rows.append((run.seed, run.label, ok, message))
    judge(rows, spec_sizes=True)


def label_signal(seed: int) -> float:
    """mean_i y_i · mean_t Δ_{x_it} on the spec-size G3 corpus of ``seed``: how much label
    evidence a sequence's tokens carry on average (0.129 on seed 1 against 0.099 and 0.094 on
    seeds 0 and 2)."""
    seqs, y = zipf_corpus(seed, **SPEC_CORPUS)
    delta, _ = posterior_difference(seqs, y, VOCAB, min_count=1)
    return float((y * torch.nan_to_num(delta)[seqs].mean(-1)).mean())


@claim("EMB-G3-SPEC-LOSS")
def test_g3_spec_final_losses():
    """The spec's recorded final training losses (§4.2: 0.002–0.012 with v trained, 0.05–0.06 with
    v fixed) are reproduced on the spec's own G3 setup (|S| = 300, n = 2000, T = 30, one-layer
    model with d = 32, E and p trained by 300 epochs of full-batch Adam, lr 0.01, with v trained
    and with v fixed), on seeds (0, 1, 2): each run's final loss lies within a factor 2 of the
    spec's range for its v-protocol."""
    rows = []
    for run in _spec_runs():
        lo, hi = SPEC_LOSS[run.label]
        evidence.metric(f"final_loss_{run.label}", run.final_loss)
        evidence.metric(f"label_signal_seed{run.seed}", label_signal(run.seed))
        ok = lo / SPEC_FACTOR <= run.final_loss <= hi * SPEC_FACTOR
        message = (
            f"{run.label}, seed {run.seed}: final loss {run.final_loss:.4g} outside "
            f"[{lo / SPEC_FACTOR:g}, {hi * SPEC_FACTOR:g}] (spec {lo}–{hi}, factor {SPEC_FACTOR:g})"
        )
        rows.append((run.seed, run.label, ok, message))
    judge(rows, spec_sizes=True)


#: The smallest ratio of the spec's two loss ranges: 0.05 (v fixed) / 0.012 (v trained).
SPEC_LOSS_RATIO = SPEC_LOSS["one-v-fixed"][0] / SPEC_LOSS["one-v-trained"][1]


@claim("EMB-G3-SPEC-LOSS-RATIO")
def test_g3_spec_loss_ratio():
    """What the spec's two loss ranges say together, corpus by corpus: on the spec's own G3 setup
    (|S| = 300, n = 2000, T = 30, one-layer model with d = 32, E and p trained by 300 epochs of
    full-batch Adam, lr 0.01, with v trained and with v fixed), on seeds (0, 1, 2), the final
    loss with v fixed is at least 0.05/0.012 ≈ 4.2× the final loss with v trained, on every
    seed."""
    rows = []
    for seed in SEEDS:
        fixed = g3_run("one-v-fixed", seed, spec_sizes=True).final_loss
        trained = g3_run("one-v-trained", seed, spec_sizes=True).final_loss
        ratio = fixed / trained
        evidence.metric("loss_ratio_fixed_over_trained", ratio)
        evidence.slack("spec_ratio_over_ratio", SPEC_LOSS_RATIO, ratio)
        message = (
            f"seed {seed}: loss(v fixed)/loss(v trained) = {ratio:.3g} < {SPEC_LOSS_RATIO:.3g}"
        )
        rows.append((seed, "one-v-fixed vs one-v-trained", ratio >= SPEC_LOSS_RATIO, message))
    judge(rows, spec_sizes=True)


# ---------------------------------------------------------------------------------------------
# One layer against two layers with skip connections and LayerNorm
# ---------------------------------------------------------------------------------------------

_TWO = (
    f"the same G3 corpora and protocol ({EPOCHS} epochs, seeds {SEEDS}), a two-layer model (one "
    "self-attention block with a skip connection and LayerNorm, then the `<cls>` read-out; v "
    "trained)"
)
#: "Near 1e-1" and "about 1e-5" (spec §4.2 [U]) read as within a factor 10 of the number.
NEAR_FACTOR = 10.0
ONE_LAYER_LEVEL, TWO_LAYER_LEVEL = 1e-1, 1e-5
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


def _loss_row(seed: int, one_kind: str, one_band: tuple[float, float]) -> tuple:
    """The three clauses of a loss reading for one seed: the one-layer model's final loss in
    ``one_band`` and on a plateau, the two-layer model's near 1e-5 and ≥ 100× lower."""
    one, two = g3_run(one_kind, seed), g3_run("two", seed)
    drop, ratio = _plateau_drop(one), one.final_loss / two.final_loss
    evidence.metric(f"final_loss_{one_kind}", one.final_loss)
    evidence.metric(f"plateau_drop_{one_kind}", drop)
    evidence.metric("final_loss_two", two.final_loss)
    evidence.metric(f"loss_ratio_{one_kind}_over_two", ratio)
    failed = []
    if not one_band[0] <= one.final_loss <= one_band[1]:
        failed.append(f"one layer ({one_kind}) ends at {one.final_loss:.3g}, outside {one_band}")
    if drop >= PLATEAU_FACTOR:
        failed.append(f"one layer still falls {drop:.3g}× over the last quarter (no plateau)")
    if not _near(two.final_loss, TWO_LAYER_LEVEL):
        failed.append(f"two layers end at {two.final_loss:.3g}, not within 10× of 1e-5")
    if ratio < LOSS_RATIO:
        failed.append(f"loss ratio one/two = {ratio:.3g} < {LOSS_RATIO:g}")
    return seed, f"two vs {one_kind}", not failed, f"seed {seed}: " + ", ".join(failed)


@claim("EMB-TWOLAYER-LOSS")
def test_two_layers_fit_100x_better_than_one():
    """One layer against two (spec §4.2 [U]: "the one-layer model plateaus at a training loss of
    about 1e-1; a two-layer model with skip connections and layer normalization reaches about
    1e-5"), read with v trained in both models, as in the real-data runs: with the same G3
    corpora and protocol (150 epochs, seeds (0, 1, 2)), a two-layer model (one self-attention
    block with a skip connection and LayerNorm, then the `<cls>` read-out; v trained) and the
    one-layer model trained the same way (E, p and v), for every seed the one-layer model ends
    within a factor 10 of 1e-1 on a plateau (its loss falls by less than 2× over the last
    quarter of training), and the two-layer model ends within a factor 10 of 1e-5, at least 100×
    lower."""
    draw_loss_figure()
    judge([_loss_row(seed, "one-v-trained", (1e-2, 1.0)) for seed in SEEDS])


@claim("EMB-TWOLAYER-LOSS-VFIXED")
def test_two_layers_fit_100x_better_than_fixed_head():
    """One layer against two, against the theory's model: with the same G3 corpora and protocol
    (150 epochs, seeds (0, 1, 2)), a two-layer model (one self-attention block with a skip
    connection and LayerNorm, then the `<cls>` read-out; v trained), the one-layer model of the
    theory (E and p trained, v fixed) plateaus near 1e-2 to 1e-1 (its final loss lies in [1e-2,
    1e-1] and falls by less than 2× over the last quarter of training), while the two-layer
    model ends within a factor 10 of 1e-5, at least 100× lower, for every seed."""
    judge([_loss_row(seed, "one-v-fixed", VFIXED_BAND) for seed in SEEDS])


TWO_SCORES_FIGURE = "emb_g3_two_layer_scores_vs_delta.png"
_KEYS = """the `<cls>` scores of the keys the attention reads (for each token s, the mean over its
    occurrences of ⟨h, p⟩, h the LayerNorm output H1 of the block, which is what the `<cls>`
    attention scores; the input embeddings E are never read by it)"""


@claim("EMB-TWOLAYER-V")
def test_two_layers_keep_head_monotone():
    """The head side persists with two layers (spec §4.2 [U]): with the same G3 corpora and
    protocol (150 epochs, seeds (0, 1, 2)), a two-layer model (one self-attention block with a
    skip connection and LayerNorm, then the `<cls>` read-out; v trained), the head scores the
    read-out averages (for each token s, the mean over its occurrences of ⟨h, v⟩, h the
    LayerNorm output H1) rise with Δ_s: Spearman(score, Δ_s) ≥ 0.7 for every seed."""
    draw_scores_figure(
        [g3_run("two", SEEDS[0])],
        TWO_SCORES_FIGURE,
        "G3, two layers: key scores (mean over the occurrences of ⟨H1, ·⟩)",
    )
    rows = []
    for seed in SEEDS:
        rho = g3_run("two", seed).v_spearman()
        evidence.metric("spearman_v", rho)
        message = f"seed {seed}: Spearman(mean ⟨h, v⟩, Δ) = {rho:.3f} < 0.7"
        rows.append((seed, "two", rho >= V_MIN_SPEARMAN, message))
    judge(rows)


@claim("EMB-TWOLAYER-U")
def test_two_layers_keep_u_shape():
    """The `<cls>` side persists with two layers (spec §4.2 [U]): with the same G3 corpora and
    protocol (150 epochs, seeds (0, 1, 2)), a two-layer model (one self-attention block with a
    skip connection and LayerNorm, then the `<cls>` read-out; v trained), the `<cls>` scores of
    the keys the attention reads (for each token s, the mean over its occurrences of ⟨h, p⟩, h
    the LayerNorm output H1 of the block, which is what the `<cls>` attention scores; the input
    embeddings E are never read by it) are U-shaped in Δ_s: Spearman(score, |Δ_s|) ≥ 0.5 and the
    group means are U-shaped (as in EMB-G3-U), for every seed."""
    rows = []
    for seed in SEEDS:
        run = g3_run("two", seed)
        rho = run.u_spearman()
        evidence.metric("spearman_p_abs", rho)
        evidence.metric("spearman_centred", float(spearmanr(run.ep_centred, run.abs_delta)[0]))
        ok = rho >= U_MIN_SPEARMAN and run.u_shaped()
        message = f"seed {seed}: Spearman(mean ⟨h, p⟩, |Δ|) = {rho:.3f}, means {run.u_means()}"
        rows.append((seed, "two", ok, message))
    judge(rows)


@claim("EMB-TWOLAYER-U-MEANS")
def test_two_layers_keep_u_shaped_means():
    """The U-shape of the group means persists with two layers: with the same G3 corpora and
    protocol (150 epochs, seeds (0, 1, 2)), a two-layer model (one self-attention block with a
    skip connection and LayerNorm, then the `<cls>` read-out; v trained), for the `<cls>` scores
    of the keys the attention reads (for each token s, the mean over its occurrences of ⟨h, p⟩,
    h the LayerNorm output H1 of the block, which is what the `<cls>` attention scores; the
    input embeddings E are never read by it), the mean over tokens with Δ < −0.6 and over Δ >
    0.6 both exceed the mean over |Δ| < 0.2, for every seed."""
    rows = []
    for seed in SEEDS:
        run = g3_run("two", seed)
        low, mid, high = run.u_means()
        evidence.metric("u_depth", min(low, high) - mid)
        rows.append((seed, "two", run.u_shaped(), f"seed {seed}: means {(low, mid, high)}"))
    judge(rows)


# ---------------------------------------------------------------------------------------------
# Real data, only when it is on disk
# ---------------------------------------------------------------------------------------------


def _real_corpora() -> list[tuple[str, list[str], torch.Tensor]]:
    found = []
    imdb, yelp = os.environ.get(IMDB_ENV), os.environ.get(YELP_ENV)
    if imdb:
        texts, labels = load_imdb(imdb, "train", max_docs=REAL_DOCS)
        found.append((f"IMDB ({imdb})", texts, labels))
    if yelp:
        texts, labels = load_yelp_polarity(yelp, max_docs=REAL_DOCS)
        found.append((f"Yelp polarity ({yelp})", texts, labels))
    return found


@claim("EMB-REAL")
def test_real_data_phenomenology():
    """IMDB and Yelp (spec §4.2, Figure 1): on the first 2000 training reviews (balanced), with a
    2000-token vocabulary and sequences cut or padded to 64 tokens, the one-layer model (d = 32,
    E, p, v trained by full-batch Adam, 150 epochs, lr 0.01) has Spearman(⟨E_s, v⟩, Δ_s) ≥ 0.7
    and a U-shaped ⟨E_s, p⟩ (Spearman with |Δ_s| ≥ 0.5, group means as in EMB-G3-U), over tokens
    with ≥ 20 occurrences, the pad token excluded."""
    corpora = _real_corpora()
    if not corpora:
        pytest.skip(
            f"no real data: set {IMDB_ENV} to the aclImdb folder or {YELP_ENV} to the Yelp "
            "polarity CSV (nothing is downloaded)"
        )
    for k, (name, texts, labels) in enumerate(corpora):
        evidence.metric(f"corpus:{name}", len(texts))
        docs = [tokenize(t) for t in texts]
        vocab = build_vocab(docs, REAL_VOCAB)
        seqs = encode(docs, vocab, REAL_LEN)
        evidence.instance({"corpus": name, "docs": len(texts), "vocab": len(vocab), "T": REAL_LEN})
        model = OneLayerModel(len(vocab), DIM, train_v=True, seed=k)
        run = _train(name, model, seqs, labels, len(vocab), seed=k, skip=(PAD_ID,))
        rho_v, rho_u = run.v_spearman(), run.u_spearman()
        evidence.metric("spearman_v", rho_v)
        evidence.metric("spearman_p_abs", rho_u)
        assert rho_v >= V_MIN_SPEARMAN, f"{name}: Spearman(⟨E_s, v⟩, Δ) = {rho_v:.3f}"
        assert rho_u >= U_MIN_SPEARMAN, f"{name}: Spearman(⟨E_s, p⟩, |Δ|) = {rho_u:.3f}"
        assert run.u_shaped(), f"{name}: not U-shaped, means {run.u_means()}"
