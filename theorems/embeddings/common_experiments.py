"""What the experiments of arXiv 2505.17282 (§4.2) share: the G3 protocol, the trained runs and
what the figures of §4.2 plot (claims_experiments, plots).

Spec ``spec/embeddings.md`` §4.2. The paper's setup (tokenizer, d, optimizer, epochs, whether v
is trained) is [U]; the spec calibrated a stand-in, the Zipf corpus G3
(``strategies.zipf_corpus``: |S| = 300, z_s ∝ 1/s, label bias b_s ~ N(0, 0.5²) clipped to ±0.98,
the 20 most frequent tokens shrunk ×0.1). Models are ``models.problems.embedding.OneLayerModel``
(the paper's f = softmax(pᵀE_Xᵀ)E_X v, E⁰ ~ N(0, I/d), p⁰ = 0, v⁰ ~ N(0, I/d)) and ``TwoLayerModel``
(one self-attention block with skip and LayerNorm before the same read-out), trained by
``train_full_batch`` (full-batch Adam on the mean logistic loss).

Scaled down, honestly: the spec's n = 2000, T = 30, 300 epochs costs 14 s per one-layer run and
60 s per two-layer run here (1 thread; 45 and 200 ms per epoch). Most claims use n = 600,
T = 20, 150 epochs (about 1 s and 5 s per run), three fixed seeds, d = 32, lr = 1e-2, tokens
with ≥ 20 occurrences. The claims that check the numbers the spec records for its own setup
(EMB-G3-SPEC-*) run that setup exactly, one-layer model only (6 runs, about 90 s). The scores
are read where the `<cls>` read-out reads them (OneLayerModel.key_scores): on E for one layer,
on the LayerNorm output H1 for two.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace

import numpy as np
import torch
from scipy.stats import spearmanr

from models.numerics.device import device
from models.problems.embedding import (
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
from theorems.framework import evidence
from theorems.framework.memo import shared

F64 = torch.float64

# ---- the corpus and training protocol (spec §4.2, scaled down; see the module docstring) ------
VOCAB, N_SEQ, SEQ_LEN, DIM = 300, 600, 20, 32
EPOCHS, LR = 150, 1e-2
SEEDS = (0, 1, 2)  # "at most 3 fixed seeds"
MIN_COUNT = 20  # Δ_s only for tokens with ≥ 20 occurrences (spec §4.2)
#: The spec's U-shape groups (§4.2 (iii)): Δ < −0.6 and Δ > 0.6 against |Δ| < 0.2.
U_OUTER, U_INNER = 0.6, 0.2

CORPUS = dict(S=VOCAB, n=N_SEQ, T=SEQ_LEN)
# The spec's own G3 setup (§4.2: n = 2000, T = 30, 300 epochs), for the claims that check the
# numbers it records (EMB-G3-SPEC-*); about 14 s per one-layer run on one thread.
SPEC_CORPUS, SPEC_EPOCHS = dict(S=VOCAB, n=2000, T=30), 300

#: The one-layer model's two v-protocols: v trained with E and p, and v fixed (the theory's).
ONE_LAYER = ("one-v-trained", "one-v-fixed")

# ---- real data (spec §4.2): only when a path is given, never downloaded ------------------------
IMDB_ENV, YELP_ENV = "ATTN_IMDB_DIR", "ATTN_YELP_CSV"
REAL_DOCS, REAL_VOCAB, REAL_LEN = 2000, 2000, 64
NO_REAL_DATA = (
    f"no real data: set {IMDB_ENV} to the aclImdb folder or {YELP_ENV} to the Yelp "
    "polarity CSV (nothing is downloaded)"
)


def corpus_of(seed: int, model: str, spec_sizes: bool = False) -> dict:
    """The instance of a corpus claim: the corpus and protocol parameters (the G3 corpus is a
    deterministic function of them, strategies.zipf_corpus)."""
    corpus, epochs = (SPEC_CORPUS, SPEC_EPOCHS) if spec_sizes else (CORPUS, EPOCHS)
    return {
        "corpus": "G3 zipf_corpus",
        "seed": seed,
        **corpus,
        "d": DIM,
        "epochs": epochs,
        "lr": LR,
        "model": model,
        "min_count": MIN_COUNT,
    }


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
    spec_sizes: bool = False  # trained on the spec's own G3 setup
    corpus: dict | None = None  # a real corpus's instance (real_run); None on G3

    def __str__(self) -> str:
        return f"{self.label}, seed {self.seed}"

    def to_json(self) -> dict:
        """The instance of a claim on this run: its corpus and protocol (corpus_of for G3)."""
        return self.corpus or corpus_of(self.seed, self.label, self.spec_sizes)

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

    def centred_spearman(self) -> float:
        """Spearman of the within-sequence centred ⟨h, p⟩ with |Δ_s|."""
        return float(spearmanr(self.ep_centred, self.abs_delta)[0])

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


@dataclass(frozen=True)
class Pair:
    """Two runs on the same G3 corpus, compared: the instance of a claim that compares them."""

    first: Run
    second: Run

    @property
    def seed(self) -> int:
        return self.first.seed

    def to_json(self) -> dict:
        model = f"{self.first.label} vs {self.second.label}"
        return corpus_of(self.first.seed, model, self.first.spec_sizes)


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


def _train(
    label: str, model, seqs, y, vocab: int, seed: int, skip=(), epochs=EPOCHS, spec_sizes=False
) -> Run:
    """Train on the ATTN_DEVICE device (models.numerics.device; cpu unless set), read out on the
    host."""
    model = model.to(device())
    curve = train_full_batch(model, seqs, y, epochs=epochs, lr=LR, seed=seed).numpy()
    delta, ev, ep, ep_centred = _scores(model, seqs, y, vocab, skip)
    reads = "H1" if isinstance(model, TwoLayerModel) else "E_s"
    return Run(label, seed, curve, delta, ev, ep, ep_centred, reads, spec_sizes)


@shared
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
    return _train(kind, model, seqs, y, VOCAB, seed, epochs=epochs, spec_sizes=spec_sizes)


def one_layer_runs(spec_sizes: bool = False) -> list[Run]:
    """The one-layer runs, seed by seed, v trained then v fixed."""
    return [g3_run(kind, seed, spec_sizes) for seed in SEEDS for kind in ONE_LAYER]


def compared(first: str, second: str, spec_sizes: bool = False, seeds=SEEDS) -> list[Pair]:
    """Per seed, the runs of kind ``first`` and ``second`` on the same G3 corpus."""
    return [Pair(g3_run(first, s, spec_sizes), g3_run(second, s, spec_sizes)) for s in seeds]


def label_signal(seed: int) -> float:
    """mean_i y_i · mean_t Δ_{x_it} on the spec-size G3 corpus of ``seed``: how much label
    evidence a sequence's tokens carry on average (0.129 on seed 1 against 0.099 and 0.094 on
    seeds 0 and 2)."""
    seqs, y = zipf_corpus(seed, **SPEC_CORPUS)
    delta, _ = posterior_difference(seqs, y, VOCAB, min_count=1)
    return float((y * torch.nan_to_num(delta)[seqs].mean(-1)).mean())


def real_corpora() -> list[tuple[str, list[str], torch.Tensor]]:
    """The real corpora on disk ($ATTN_IMDB_DIR, $ATTN_YELP_CSV): (name, texts, labels)."""
    found = []
    imdb, yelp = os.environ.get(IMDB_ENV), os.environ.get(YELP_ENV)
    if imdb:
        texts, labels = load_imdb(imdb, "train", max_docs=REAL_DOCS)
        found.append((f"IMDB ({imdb})", texts, labels))
    if yelp:
        texts, labels = load_yelp_polarity(yelp, max_docs=REAL_DOCS)
        found.append((f"Yelp polarity ({yelp})", texts, labels))
    return found


def real_run(k: int, name: str, texts: list[str], labels: torch.Tensor) -> Run:
    """The one-layer model (v trained, seed k) trained on a real corpus, cut to REAL_VOCAB tokens
    and REAL_LEN positions, the pad token excluded from the scores (its instance: the corpus)."""
    evidence.metric(f"corpus:{name}", len(texts))
    docs = [tokenize(t) for t in texts]
    vocab = build_vocab(docs, REAL_VOCAB)
    seqs = encode(docs, vocab, REAL_LEN)
    instance = {"corpus": name, "docs": len(texts), "vocab": len(vocab), "T": REAL_LEN}
    model = OneLayerModel(len(vocab), DIM, train_v=True, seed=k)
    run = _train(name, model, seqs, labels, len(vocab), seed=k, skip=(PAD_ID,))
    return replace(run, corpus=instance)
