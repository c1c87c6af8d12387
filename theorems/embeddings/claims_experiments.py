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
60 s per two-layer run here (1 thread; 45 and 200 ms per epoch), far beyond this paper's 4-minute
CI budget. The claims below use n = 600, T = 20, 150 epochs (about 1 s and 5 s per run), three
fixed seeds, d = 32, lr = 1e-2, tokens with ≥ 20 occurrences. The spec's sizes were also run by
hand once (seeds 0, 1): the verdicts were the same (see the notes).
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
    ev: np.ndarray  # ⟨E_s, v⟩ over the same tokens
    ep: np.ndarray  # ⟨E_s, p⟩ over the same tokens

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
    with torch.no_grad():
        ev, ep = (model.E @ model.v).cpu().numpy(), (model.E @ model.p).cpu().numpy()
    keep = mask.numpy()
    return delta.numpy()[keep], ev[keep], ep[keep]


def _train(label: str, model, seqs, y, vocab: int, seed: int, skip=()) -> Run:
    """Train on the ATTN_DEVICE device (models.device; cpu unless set), read out on the host."""
    model = model.to(device())
    curve = train_full_batch(model, seqs, y, epochs=EPOCHS, lr=LR, seed=seed).numpy()
    delta, ev, ep = _scores(model, seqs, y, vocab, skip)
    return Run(label, seed, curve, delta, ev, ep)


@cache
def g3_run(kind: str, seed: int) -> Run:
    """Train one model on the G3 corpus of ``seed`` (cached: several claims read each run).

    kind: "one-v-trained", "one-v-fixed" (the theory's model) or "two" (v trained)."""
    seqs, y = zipf_corpus(seed, **CORPUS)
    if kind == "two":
        model = TwoLayerModel(VOCAB, DIM, train_v=True, seed=seed)
    else:
        model = OneLayerModel(VOCAB, DIM, train_v=(kind == "one-v-trained"), seed=seed)
    return _train(kind, model, seqs, y, VOCAB, seed)


def record_corpus(seed: int, kind: str) -> None:
    """The example of a corpus claim: the corpus and protocol parameters (the G3 corpus is a
    deterministic function of them, strategies.zipf_corpus)."""
    evidence.instance(
        {
            "corpus": "G3 zipf_corpus",
            "seed": seed,
            **CORPUS,
            "d": DIM,
            "epochs": EPOCHS,
            "lr": LR,
            "model": kind,
            "min_count": MIN_COUNT,
        }
    )


def judge(rows: list[tuple[int, str, bool, str]]) -> None:
    """Every run is evaluated (and its metrics recorded) before the verdict; the corpus of the
    first failing run becomes the counterexample. rows: (seed, model kind, ok, message)."""
    bad = [row for row in rows if not row[2]]
    seed, kind, _, _ = bad[0] if bad else rows[-1]
    record_corpus(seed, kind)
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


@claim(
    id="EMB-G3-V",
    kind="experiment",
    provenance="[R]/[U]",
    figures=(SCORES_FIGURE,),
    statement=f"""Real-data phenomenology, head side (spec §4.2, companion plot [R]/[U]): on the
    {_SETUP}, ⟨E_s, v⟩ rises with the posterior difference Δ_s: Spearman(⟨E_s, v⟩, Δ_s) ≥ 0.7 for
    every seed and both v-protocols (the trained analogue of ⟨E_s, v⟩ ∝ α_s).""",
)
def test_g3_head_scores_monotone_in_delta():
    """Experiment EMB-G3-V.

    Deterministic (fixed seeds). Runs shared with EMB-G3-U and EMB-TWOLAYER-*.
    """
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


@claim(
    id="EMB-G3-U",
    kind="experiment",
    provenance="[V] (U-shape, Figure 1 caption); thresholds [R]",
    figures=(SCORES_FIGURE,),
    statement=f"""Real-data phenomenology, `<cls>` side (spec §4.2, Figure 1): on the {_SETUP},
    ⟨E_s, p⟩ is U-shaped in Δ_s: Spearman(⟨E_s, p⟩, |Δ_s|) ≥ 0.5, and the mean of ⟨E_s, p⟩ over
    tokens with Δ < −0.6 and over Δ > 0.6 both exceed the mean over |Δ| < 0.2, for every seed
    and both v-protocols.""",
)
def test_g3_cls_scores_u_shaped():
    """Experiment EMB-G3-U.

    Deterministic (fixed seeds). The signed control is EMB-G3-SIGNED.
    """
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


@claim(
    id="EMB-G3-SIGNED",
    kind="control",
    provenance="[R]",
    expected="refuted",
    statement=f"""Monotone `<cls>` scores (wrong; spec §4.2 negative control): on the {_SETUP},
    ⟨E_s, p⟩ rises with the signed Δ_s: Spearman(⟨E_s, p⟩, Δ_s) ≥ 0.5 for every seed and
    v-protocol.""",
)
def test_g3_cls_scores_monotone_in_signed_delta():
    """Control EMB-G3-SIGNED.

    p is not monotone in Δ (the U-shape): the signed Spearman is near 0. The 'search' runs
    over the fixed seeds and stops at the first that refutes.
    """
    rows = []
    for seed in SEEDS:
        for kind in _ONE_LAYER:
            rho = g3_run(kind, seed).signed_spearman()
            evidence.metric("signed_spearman", rho)
            message = f"{kind}, seed {seed}: Spearman(⟨E_s, p⟩, Δ) = {rho:.3f} < 0.5"
            rows.append((seed, kind, rho >= U_MIN_SPEARMAN, message))
    judge(rows)


# ---------------------------------------------------------------------------------------------
# One layer against two layers with skip connections and LayerNorm
# ---------------------------------------------------------------------------------------------

_TWO = (
    f"the same G3 corpora and protocol ({EPOCHS} epochs, seeds {SEEDS}), a two-layer model (one "
    "self-attention block with a skip connection and LayerNorm, then the `<cls>` read-out; v "
    "trained)"
)


def _loss_ratio(seed: int, against: str) -> float:
    return g3_run(against, seed).final_loss / g3_run("two", seed).final_loss


@claim(
    id="EMB-TWOLAYER-LOSS",
    kind="experiment",
    provenance="[U]",
    expected="refuted",
    figures=(LOSS_FIGURE,),
    statement=f"""One layer against two (spec §4.2 [U]: ≈1e-1 against ≈1e-5): with {_TWO}, the
    two-layer model reaches a training loss at least 100× lower than the one-layer model trained
    the same way (E, p and v trained), for every seed.""",
)
def test_two_layers_fit_100x_better_than_one():
    """Experiment EMB-TWOLAYER-LOSS.

    Refuted as read: the one-layer model with v trained keeps fitting (≈4e-4 to 3e-3 after
    150 epochs), so the ratio is ≈ 23, 9.6 and 136 for seeds 0, 1, 2. At the spec's sizes (n
    = 2000, T = 30, 300 epochs, run by hand) seed 1 also fails (1.1e-3 against 1.6e-5: 68×).
    The narrow variant that holds compares with the theory's one-layer model, v fixed:
    EMB-TWOLAYER-LOSS-VFIXED.
    """
    draw_loss_figure()
    judge([_loss_row(seed, "one-v-trained") for seed in SEEDS])


def _loss_row(seed: int, against: str) -> tuple[int, str, bool, str]:
    ratio = _loss_ratio(seed, against)
    evidence.metric(f"loss_ratio_{against}_over_two", ratio)
    evidence.metric(f"final_loss_{against}", g3_run(against, seed).final_loss)
    evidence.metric("final_loss_two", g3_run("two", seed).final_loss)
    evidence.slack("ratio_needed_over_ratio", LOSS_RATIO, ratio)
    message = f"seed {seed}: loss({against})/loss(two) = {ratio:.3g} < 100"
    return seed, f"two vs {against}", ratio >= LOSS_RATIO, message


@claim(
    id="EMB-TWOLAYER-LOSS-VFIXED",
    kind="experiment",
    provenance="[U]",
    figures=(LOSS_FIGURE,),
    statement=f"""One layer against two, against the theory's model: with {_TWO}, the two-layer
    model reaches a training loss at least 100× lower than the one-layer model of the theory
    (E and p trained, v fixed), which plateaus near 1e-2 to 1e-1, for every seed.""",
)
def test_two_layers_fit_100x_better_than_fixed_head():
    """Experiment EMB-TWOLAYER-LOSS-VFIXED.

    The narrow variant of EMB-TWOLAYER-LOSS that holds.
    """
    judge([_loss_row(seed, "one-v-fixed") for seed in SEEDS])


TWO_SCORES_FIGURE = "emb_g3_two_layer_scores_vs_delta.png"


@claim(
    id="EMB-TWOLAYER-V",
    kind="experiment",
    provenance="[U]",
    figures=(TWO_SCORES_FIGURE,),
    statement=f"""The head side persists with two layers (spec §4.2 [U]): with {_TWO},
    Spearman(⟨E_s, v⟩, Δ_s) ≥ 0.7 for every seed, E the input embeddings.""",
)
def test_two_layers_keep_head_monotone():
    draw_scores_figure(
        [g3_run("two", SEEDS[0])], TWO_SCORES_FIGURE, "G3, two layers: ⟨E_s, p⟩ and ⟨E_s, v⟩"
    )
    rows = []
    for seed in SEEDS:
        rho = g3_run("two", seed).v_spearman()
        evidence.metric("spearman_v", rho)
        message = f"seed {seed}: Spearman(⟨E_s, v⟩, Δ) = {rho:.3f} < 0.7"
        rows.append((seed, "two", rho >= V_MIN_SPEARMAN, message))
    judge(rows)


@claim(
    id="EMB-TWOLAYER-U",
    kind="experiment",
    provenance="[U]",
    expected="refuted",
    figures=(TWO_SCORES_FIGURE,),
    statement=f"""The `<cls>` side persists with two layers (spec §4.2 [U]): with {_TWO},
    Spearman(⟨E_s, p⟩, |Δ_s|) ≥ 0.5 and the group means of ⟨E_s, p⟩ are U-shaped (as in
    EMB-G3-U), for every seed, E the input embeddings.""",
)
def test_two_layers_keep_u_shape():
    """Experiment EMB-TWOLAYER-U.

    Refuted as read: the U persists in the group means but weakly (Spearman 0.29–0.45; also
    0.38–0.40 at the spec's sizes, run by hand), since the `<cls>` query reads LayerNorm
    outputs, not E. Narrow variant that holds: EMB-TWOLAYER-U-MEANS.
    """
    rows = []
    for seed in SEEDS:
        run = g3_run("two", seed)
        rho = run.u_spearman()
        evidence.metric("spearman_p_abs", rho)
        ok = rho >= U_MIN_SPEARMAN and run.u_shaped()
        message = f"seed {seed}: Spearman(⟨E_s, p⟩, |Δ|) = {rho:.3f}, means {run.u_means()}"
        rows.append((seed, "two", ok, message))
    judge(rows)


@claim(
    id="EMB-TWOLAYER-U-MEANS",
    kind="experiment",
    provenance="[U]",
    figures=(TWO_SCORES_FIGURE,),
    statement=f"""The U-shape of the group means persists with two layers: with {_TWO}, the mean
    of ⟨E_s, p⟩ over tokens with Δ < −0.6 and over Δ > 0.6 both exceed the mean over |Δ| < 0.2,
    for every seed, E the input embeddings.""",
)
def test_two_layers_keep_u_shaped_means():
    """Experiment EMB-TWOLAYER-U-MEANS.

    The narrow variant of EMB-TWOLAYER-U that holds.
    """
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


@claim(
    id="EMB-REAL",
    kind="experiment",
    provenance="[V] (IMDB/Yelp, U-shape); protocol [U]",
    statement=f"""IMDB and Yelp (spec §4.2, Figure 1): on the first {REAL_DOCS} training reviews
    (balanced), with a {REAL_VOCAB}-token vocabulary and sequences cut or padded to
    {REAL_LEN} tokens, the one-layer model (d = {DIM}, E, p, v trained by full-batch Adam,
    {EPOCHS} epochs, lr {LR}) has Spearman(⟨E_s, v⟩, Δ_s) ≥ 0.7 and a U-shaped ⟨E_s, p⟩
    (Spearman with |Δ_s| ≥ 0.5, group means as in EMB-G3-U), over tokens with ≥ {MIN_COUNT}
    occurrences, the pad token excluded.""",
    note=f"Runs only when ${IMDB_ENV} (the aclImdb folder) or ${YELP_ENV} (the polarity train "
    "CSV) names data on disk; nothing is downloaded. Otherwise the claim is skipped. The data "
    "used is recorded as metric 'corpus:<name>'.",
    runs_only_with=f"real data on disk: ${IMDB_ENV} or ${YELP_ENV}",
)
def test_real_data_phenomenology():
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
