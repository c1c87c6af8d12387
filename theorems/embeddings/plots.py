"""The figures of the 2505.17282 claims (reports/figures/): the drawing functions, and the
drawers the report calls after a run (``@draws``) for the experiments of §4.2, which draw the
runs of the claims (cached, theorems.embeddings.common_experiments.g3_run)."""

from __future__ import annotations

import numpy as np

from theorems.embeddings.common_experiments import ONE_LAYER, SEEDS, g3_run
from theorems.framework import figures
from theorems.framework.figures import draws

SCORES_FIGURE = "emb_g3_scores_vs_delta.png"
LOSS_FIGURE = "emb_g3_loss_one_vs_two_layers.png"
TWO_SCORES_FIGURE = "emb_g3_two_layer_scores_vs_delta.png"


def draw_scores_figure(runs, name: str, title: str) -> None:
    """⟨E_s, p⟩ and ⟨E_s, v⟩ against the posterior difference Δ_s, one row per run."""
    fig, axes = figures.new(ncols=2, nrows=len(runs), width=4.0, height=3.0)
    for row, run in enumerate(runs):
        reads = getattr(run, "reads", "E_s")
        pairs = ((run.ep, f"⟨{reads}, p⟩"), (run.ev, f"⟨{reads}, v⟩"))
        for col, (values, what) in enumerate(pairs):
            ax = axes[row][col]
            ax.scatter(run.delta, values, s=8, alpha=0.7)
            ax.set_xlabel("posterior difference Δ_s")
            ax.set_ylabel(what)
            ax.set_title(f"{run.label}, seed {run.seed}", fontsize=8)
    fig.suptitle(title, fontsize=9)
    figures.save(fig, name)


def loss_figure(curves: dict, name: str) -> None:
    """Training-loss curves, one panel per seed: ``curves[seed][kind]`` is one curve."""
    fig, axes = figures.new(ncols=len(curves), width=3.8, height=3.2)
    for col, (seed, by_kind) in enumerate(curves.items()):
        ax = axes[0][col]
        for kind, curve in by_kind.items():
            ax.semilogy(curve, label=kind)
        ax.set_xlabel("epoch (full-batch Adam)")
        ax.set_ylabel("training loss")
        ax.set_title(f"G3 corpus, seed {seed}", fontsize=8)
        ax.legend(fontsize=7)
    figures.save(fig, name)


def direction_figure(curves, target: float, name: str) -> None:
    """1 − cos(p(t), p̂) against ‖p(t)‖ along each traced flow, the engine's target dashed."""
    fig, axes = figures.new(width=5.2, height=4.0)
    ax = axes[0][0]
    for norms, omc in curves:
        keep = (norms > 0) & (omc > 0)
        ax.loglog(norms[keep], omc[keep], lw=1, alpha=0.7)
    ax.axhline(target, color="k", ls="--", lw=1, label=f"converge() target {target:g}")
    ax.set_xlabel("‖p(t)‖ along the gradient-flow path")
    ax.set_ylabel("1 − cos(p(t), p̂)  (p̂: <cls> SVM of E¹)")
    ax.set_title(f"Direction of p → <cls> SVM ({len(curves)} G1 instances)")
    ax.legend(fontsize=7)
    figures.save(fig, name)


def prop_figure(points, name: str) -> None:
    """The one-step shift against α_s per instance, coloured by d, with slope 1/2 dashed."""
    fig, axes = figures.new(width=5.0, height=4.2)
    ax = axes[0][0]
    dims = sorted({d for d, _, _ in points})
    cmap = {d: f"C{k}" for k, d in enumerate(dims)}
    lo = min(float(a.min()) for _, a, _ in points)
    hi = max(float(a.max()) for _, a, _ in points)
    for d in dims:
        a = np.concatenate([a for dd, a, _ in points if dd == d])
        s = np.concatenate([s for dd, _, s in points if dd == d])
        ax.scatter(a, s, s=6, alpha=0.6, color=cmap[d], label=f"d = {d}")
    ax.plot([lo, hi], [lo / 2, hi / 2], "k--", lw=1.2, label="slope 1/2 (shift = η0 α/2)")
    ax.set_xlabel("average signed frequency α_s")
    ax.set_ylabel("one-step shift ⟨E¹_s − E⁰_s, v⟩ / η0")
    ax.set_title(f"Lemma 4.1 on G2 data ({len(points)} instances)")
    ax.legend(fontsize=7)
    figures.save(fig, name)


def event_figure(rows, vocab: int, name: str) -> None:
    """P(m > d^(−1/4)) against d: measured, exact and the bound 2|S|e^(−√d/2) (EMB-L41-EVENT).

    ``rows``: (d, measured, exact, bound) per d; a measured 0 is drawn at the bottom edge."""
    fig, axes = figures.new(width=5.0, height=4.0)
    ax = axes[0][0]
    dims = np.array([r[0] for r in rows], dtype=float)
    measured, exact, bound = (np.array([r[k] for r in rows], dtype=float) for k in (1, 2, 3))
    floor = 0.3 * min(x for x in np.concatenate([exact, measured]) if x > 0)
    ax.loglog(dims, np.maximum(measured, floor), "o-", label="measured (0 drawn at the floor)")
    ax.loglog(dims, exact, "s--", label="exact 1 − (1 − P(|Z| > d^{1/4}))^{|S|}")
    ax.loglog(dims, bound, "k:", label="bound 2|S|e^{−√d/2} (capped at 1)")
    ax.set_xlabel("d")
    ax.set_ylabel("P(m > d^{−1/4}),  m = max_s |⟨E⁰_s, v⟩|")
    ax.set_title(f"The event of Lemma 4.1, |S| = {vocab}")
    ax.legend(fontsize=7)
    figures.save(fig, name)


# --------------------------------------------------------------------------- drawers (§4.2)


@draws("EMB-G3-V")
@draws("EMB-G3-U")
def draw_g3_scores() -> None:
    """Figure 1 and its companion on G3: ⟨E_s, p⟩ and ⟨E_s, v⟩ against Δ_s, one layer, seed 0."""
    draw_scores_figure(
        [g3_run(kind, SEEDS[0]) for kind in ONE_LAYER],
        SCORES_FIGURE,
        "G3, one layer: U-shaped ⟨E_s, p⟩ (left), monotone ⟨E_s, v⟩ (right)",
    )


@draws("EMB-TWOLAYER-LOSS")
@draws("EMB-TWOLAYER-LOSS-VFIXED")
def draw_g3_losses() -> None:
    """The training losses of one layer (v trained, v fixed) and two layers, per seed."""
    kinds = ("one-v-trained", "one-v-fixed", "two")
    curves = {seed: {kind: g3_run(kind, seed).curve for kind in kinds} for seed in SEEDS}
    loss_figure(curves, LOSS_FIGURE)


@draws("EMB-TWOLAYER-V")
@draws("EMB-TWOLAYER-U")
@draws("EMB-TWOLAYER-U-MEANS")
def draw_g3_two_layer_scores() -> None:
    """The two-layer key scores ⟨H1, p⟩ and ⟨H1, v⟩ against Δ_s, seed 0."""
    draw_scores_figure(
        [g3_run("two", SEEDS[0])],
        TWO_SCORES_FIGURE,
        "G3, two layers: key scores (mean over the occurrences of ⟨H1, ·⟩)",
    )
