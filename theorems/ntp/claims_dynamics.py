"""Gradient descent on the NTP loss of 2403.08081 (spec ntp.md §2.5 NTP-LOSS, §2.6 NTP-DIR,
§2.7 NTP-RET / NTP-COMP, §4.1 the official global-convergence experiment).

GD from W(0) = 0 (and, for NTP-DIR, also from a seeded N(0, 1/d) start) with η = 1/L_bound
(models.ntp.attention.smoothness_bound) for 1e5 steps on a pool of official-style draws
(generator (a), cyclic) plus I2 and I1, batched in token coordinates (theorems.ntp.common: one
run shared by every claim here and by the controls).
The thresholds are spec §6.2's, set at ≈2× the worst of 12 calibration draws.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st
from scipy.special import logsumexp

from models.ntp.data import ntp_data
from models.ntp.graph import priority_graphs
from strategies.ntp_attention import named_ntp_instance, official_ntp_data
from theorems import claim, evidence
from theorems.ntp.common import (
    INITS,
    POOL,
    batched_attention_gd,
    corr,
    limits,
    one_minus_corr,
    pool_case,
    pool_iterate,
    pool_losses,
    pooled_graphs,
    solve_svm,
)

#: NTP-LOSS: excess L − L* ≤ 1e-2 at 1e4 and ≤ 1e-3 at 1e5 steps (spec §6.2).
EXCESS_1E4, EXCESS_1E5 = 1e-2, 1e-3
#: NTP-LOSS: "non-increasing" allows a rise of 1e-12 relative (spec §2.5).
MONOTONE_TOL = evidence.tolerance(
    1e-12,
    "GD at η = 1/L_bound on an L-smooth loss decreases it at every step (the descent lemma), so "
    "in exact arithmetic no record exceeds the previous one; each recorded L is a float64 "
    "log-sum-exp over ≤ 8 sequences of ≤ 6 logits (≤ ~50 terms of size ≤ max(1, L)): its "
    "relative rounding is ≤ 50·2⁻⁵³ ≈ 6e-15, twice that for a difference of two records: "
    "1e-12 is that with a factor ~100 for summation order across BLAS builds",
)
#: NTP-DIR: 1 − corr(W, W_svm) ≤ 1e-1 at 1e4, ≤ 5e-2 at 1e5 (spec §6.2).
DIR_1E4, DIR_1E5 = 1e-1, 5e-2
#: NTP-DIR increment: 1 − corr(W(1e5) − W(5e4), W_svm) ≤ 5e-3 (spec §6.2).
INC_1E5 = 5e-3
#: NTP-DIR finite part: ‖P_cyc W − W_fin‖ ≤ 3e-2 at 1e4, ≤ 5e-3 at 1e5 (spec §6.2).
FIN_1E4, FIN_1E5 = 3e-2, 5e-3
#: NTP-RET: log(mass outside the label's SCC) ≤ −4 at 1e5 (spec §6.2).
RET_LOG_MASS = -4.0
#: NTP-RET-UNSEEN [D]: at W_svm every token below the top SCC trails it by a logit gap ≥ 1
#: (a path from the top SCC crosses a margin edge), so with W ≈ R·W_svm + O(1) the log off-top
#: mass falls by ≈ ΔR = Δ‖W‖/‖W_svm‖ or more between 1e4 and 1e5; at least half of that is
#: required (the O(1) part still moves). UNSEEN_COUNT sequences per example.
UNSEEN_FRACTION, UNSEEN_COUNT = 0.5, 5
#: NTP-COMP: |share − share(W_fin)| ≤ 1e-3 at 1e5 (spec §6.2).
COMP_TOL = 1e-3
#: Discrimination: corr(W, W_svm) − corr(W, W_wrong) ≥ 0.2 (spec §2.6 item 4, §6.2).
DISCRIM = 0.2
#: A wrong SVM "differs" from W_svm when 1 − cos ≥ this; below, the example cannot tell.
DIFFERS = 1e-3
#: §4.1: the official pass rule (raise if the final corr < 0.9).
OFFICIAL_PASS = 0.9
#: §4.1: 10 runs, seeds of generator (a) (the official run uses torch seed 1; we cannot replay
#: its draws, so the printed numbers are compared as a range).
EXPERIMENT_SEEDS = tuple(range(100, 110))
OFFICIAL_LR, OFFICIAL_STEPS = 0.01, 4000
#: §4.1 printed [V]: final corr 0.9762–0.9928 over 10 runs.
PRINTED_CORR = (0.9762, 0.9928)
#: §4.1: our draws are not the notebook's (torch seed 1), so its printed range is compared with
#: the median of ours within ±0.02 (spec §4.1 [N]: our replica's corr 0.955–0.995, median 0.988).
PRINTED_SLACK = 0.02

PREMISE_DIRECTION = "some edge leaves an SCC (W_svm ≠ 0)"
CASES = st.sampled_from(POOL)


def _case(name):
    """Pool case ``name``: its instance, its limits and W_svm (certified; W_fin converged)."""
    inst, lim = pool_case(name)
    svm = evidence.solved(lim.svm, "graph-SVM")
    if not lim.fin.converged:
        evidence.inconclusive(f"Newton for W_fin: {lim.fin.reason}")
    return inst, lim, svm.W


@claim("NTP-LOSS")
@given(name=CASES)
def test_loss_decreases_to_floor(name):
    """Under GD with η ≤ 1/L_bound the loss decreases to the floor L*, stays above it, and
    ‖W(k)‖ → ∞ whenever some edge leaves an SCC."""
    inst, lim, _ = _case(name)
    model = inst.model
    steps, losses = pool_losses(name)
    rise = float(np.max(np.diff(losses) / np.maximum(losses[1:], 1e-300)))
    evidence.slack("largest relative rise of L between records", max(rise, 0.0), MONOTONE_TOL)
    assert rise <= MONOTONE_TOL, f"L rose by {rise:.2e} (relative) between two records"
    for k, bound in ((10_000, EXCESS_1E4), (100_000, EXCESS_1E5)):
        excess = model.loss(pool_iterate(name, k)) - lim.fin.loss
        evidence.slack(f"L − L* at {k}", excess, bound)
        assert 0 < excess <= bound, f"L − L* = {excess:.3e} at k = {k} (bound {bound:g})"
    norms = [np.linalg.norm(pool_iterate(name, k)) for k in (1_000, 10_000, 100_000)]
    assert norms[0] < norms[1] < norms[2], f"‖W‖ not increasing: {norms}"


@claim("NTP-DIR")
@given(name=CASES)
def test_direction_converges(name):
    """GD from any initialisation converges in direction to the graph-SVM:
    W(k)/‖W(k)‖ → W_svm/‖W_svm‖."""
    _, _, W_svm = _case(name)
    for init in INITS:
        gaps = [
            one_minus_corr(pool_iterate(name, k, init), W_svm) for k in (1_000, 10_000, 100_000)
        ]
        evidence.slack(f"1 − corr at 1e4 (W(0) {init})", gaps[1], DIR_1E4)
        evidence.slack(f"1 − corr at 1e5 (W(0) {init})", gaps[2], DIR_1E5)
        start = f"from W(0) {init}"
        assert gaps[0] > gaps[1] > gaps[2], f"1 − corr not decreasing, {start}: {gaps}"
        assert gaps[1] <= DIR_1E4, (
            f"1 − corr(W, W_svm) = {gaps[1]:.3e} > {DIR_1E4:g} at 1e4, {start}"
        )
        assert gaps[2] <= DIR_1E5, (
            f"1 − corr(W, W_svm) = {gaps[2]:.3e} > {DIR_1E5:g} at 1e5, {start}"
        )


@claim("NTP-DIR-INC")
@given(name=CASES)
def test_increment_direction(name):
    """The GD increments align with the graph-SVM: (W(k) − W(k/2)) has direction W_svm in the
    limit."""
    _, _, W_svm = _case(name)
    inc = pool_iterate(name, 100_000) - pool_iterate(name, 50_000)
    gap = one_minus_corr(inc, W_svm)
    evidence.slack("1 − corr(W(1e5) − W(5e4), W_svm)", gap, INC_1E5)
    assert gap <= INC_1E5, f"increment 1 − corr = {gap:.3e} > {INC_1E5:g}"


@claim("NTP-DIR-FIN")
@given(name=CASES)
def test_cyclic_part_converges(name):
    """The projection of the GD iterate on the cyclic subspace converges to the finite
    component: P_cyc W(k) → W_fin."""
    _, lim, _ = _case(name)
    for k, bound in ((10_000, FIN_1E4), (100_000, FIN_1E5)):
        err = float(np.linalg.norm(lim.p_cyc(pool_iterate(name, k)) - lim.fin.W))
        evidence.slack(f"‖P_cyc W − W_fin‖ at {k}", err, bound)
        assert err <= bound, f"‖P_cyc W − W_fin‖ = {err:.3e} > {bound:g} at k = {k}"


def _scc_logits(inst, W):
    """Per sample: (logits of its distinct tokens, mask of the label's SCC, the tokens)."""
    graphs = priority_graphs(inst.sequences, inst.labels, inst.num_tokens)
    E = inst.embeddings
    out = []
    for seq, y in zip(inst.sequences, inst.labels, strict=True):
        g, toks = graphs[seq[-1]], sorted(set(seq))
        a = E[toks] @ W @ E[seq[-1]]
        same = np.array([g.same_component(t, y) for t in toks])
        out.append((a, same, toks))
    return out


@claim("NTP-RET")
@given(name=CASES)
def test_hard_retrieval(name):
    """On every training sequence the attention mass outside the label's SCC goes to 0."""
    inst = named_ntp_instance(name)
    worst = -np.inf
    for i, (a, same, _) in enumerate(_scc_logits(inst, pool_iterate(name, 100_000))):
        if same.all():
            continue
        log_off = float(logsumexp(a[~same]) - logsumexp(a))
        worst = max(worst, log_off)
        assert log_off <= RET_LOG_MASS, (
            f"sample {i}: log(mass off the label's SCC) = {log_off:.2f} > {RET_LOG_MASS} at 1e5"
        )
    evidence.metric("worst log off-SCC mass at 1e5", worst)


def _unseen(inst, rng, count):
    """Up to ``count`` unseen sequences (2–4 distinct tokens, then a query k of the data)
    whose SCCs in G^(k) have a top one reaching all the others: (tokens, top SCC)."""
    graphs = priority_graphs(inst.sequences, inst.labels, inst.num_tokens)
    seen = {tuple(s) for s in inst.sequences}
    out = []
    for _ in range(20 * count):
        k = int(rng.choice(sorted(graphs)))
        others = [t for t in range(inst.num_tokens) if t != k]
        size = int(rng.integers(2, min(4, len(others)) + 1))
        body = [int(t) for t in rng.choice(others, size=size, replace=False)]
        seq = (*body, k)
        top = graphs[k].top_component(seq)
        if seq in seen or top is None or set(seq) <= top:
            continue
        out.append((seq, top))
        if len(out) == count:
            break
    return out


@claim("NTP-RET-UNSEEN")
@given(name=CASES, seed=st.integers(0, 2**32 - 1))
def test_retrieval_unseen(name, seed):
    """On an unseen sequence whose tokens are totally ordered in G^(k), the attention mass
    goes to the top SCC present."""
    inst, _, W_svm = _case(name)
    cases = _unseen(inst, np.random.default_rng(seed), UNSEEN_COUNT)
    if not evidence.premise(bool(cases), "an unseen totally ordered sequence exists"):
        return
    E = inst.embeddings
    W4, W5 = pool_iterate(name, 10_000), pool_iterate(name, 100_000)
    growth = (np.linalg.norm(W5) - np.linalg.norm(W4)) / np.linalg.norm(W_svm)
    for seq, top in cases:
        logs = []
        for W in (W4, W5):
            a = E[list(seq)] @ W @ E[seq[-1]]
            off = [t for t, tok in enumerate(seq) if tok not in top]
            logs.append(float(logsumexp(a[off]) - logsumexp(a)))
        drop = logs[0] - logs[1]
        evidence.metric("log off-top mass at 1e5", logs[1])
        evidence.metric("drop / ΔR (1e4 → 1e5)", drop / growth)
        assert drop >= UNSEEN_FRACTION * growth, (
            f"unseen {list(seq)}, top SCC {sorted(top)}: log off-top mass {logs[0]:.2f} at 1e4, "
            f"{logs[1]:.2f} at 1e5 (drop {drop:.2f} < {UNSEEN_FRACTION} × {growth:.2f})"
        )


@claim("NTP-COMP")
@given(name=CASES)
def test_soft_composition(name):
    """Within the label's SCC the attention split converges to the split at W_fin."""
    inst, lim, _ = _case(name)
    now = _scc_logits(inst, pool_iterate(name, 100_000))
    fin = _scc_logits(inst, lim.fin.W)
    shared = [i for i, (_, same, _) in enumerate(now) if same.sum() > 1]
    if not evidence.premise(bool(shared), "some sequence holds two tokens of its label's SCC"):
        return
    worst = 0.0
    for i in shared:
        (a, same, _), (b, _, _) = now[i], fin[i]
        share = np.exp(a[same] - logsumexp(a[same]))
        share_fin = np.exp(b[same] - logsumexp(b[same]))
        worst = max(worst, float(np.abs(share - share_fin).max()))
    evidence.slack("max |share − share(W_fin)| at 1e5", worst, COMP_TOL)
    assert worst <= COMP_TOL, f"in-SCC split off its W_fin value by {worst:.2e} at 1e5"


@claim("NTP-DIR-DISCRIM")
@given(name=CASES)
def test_discrimination_pooled(name):
    """GD's direction tells the graph-SVM from the pooled-graph SVM (control C1): their
    correlations with W(1e5) differ by at least 0.2."""
    inst, _, W_svm = _case(name)
    wrong = solve_svm(inst.data, pooled_graphs(inst.data))
    differs = wrong.status == "optimal" and one_minus_corr(wrong.W, W_svm) >= DIFFERS
    if not evidence.premise(differs, "the pooled SVM exists and differs from W_svm"):
        return
    W = pool_iterate(name, 100_000)
    gap = corr(W, W_svm) - corr(W, wrong.W)
    evidence.metric("corr(W, W_svm) − corr(W, W_pooled)", gap)
    assert gap >= DISCRIM, f"corr gap {gap:.3f} < {DISCRIM}"


# ---- §4.1: the official global-convergence experiment ------------------------------------------


def official_experiment():
    """10 runs of the official recipe: generator (a) draws, W(0) ~ U(±1/√d) (nn.Linear's
    default), ε-normalised NGD with lr 0.01 for 4000 steps; (final corr with W_svm per run)."""
    datas, W0s, svms = [], [], []
    for seed in EXPERIMENT_SEEDS:
        E, seqs, labels, _ = official_ntp_data(seed)
        data = ntp_data(E, seqs, labels)
        datas.append(data)
        rng = np.random.default_rng(seed + 10_000)
        W0s.append(rng.uniform(-1, 1, (data.dim, data.dim)) / np.sqrt(data.dim))
        svms.append(limits(data).svm)
    run = batched_attention_gd(
        datas,
        steps=OFFICIAL_STEPS,
        record=(OFFICIAL_STEPS,),
        method="official",
        lr=OFFICIAL_LR,
        W0=W0s,
    )
    return run, svms


@claim("NTP-EXP-GLOBAL")
@given(seeds=st.just(EXPERIMENT_SEEDS))
def test_official_global_experiment(seeds):
    """§4.1 (official notebook, 10 runs, NGD lr 0.01, 4000 steps): the final correlation with
    W_svm is 0.9762–0.9928, and every run passes corr ≥ 0.9."""
    run, svms = official_experiment()
    corrs = []
    for W, svm in zip(run.W[OFFICIAL_STEPS], svms, strict=True):
        corrs.append(corr(W, evidence.solved(svm, "graph-SVM").W))
    corrs = np.array(corrs)
    evidence.metric("final corr (min)", corrs.min())
    evidence.metric("final corr (median)", float(np.median(corrs)))
    evidence.metric("final corr (max)", corrs.max())
    assert corrs.min() >= OFFICIAL_PASS, f"a run ends at corr {corrs.min():.4f} < {OFFICIAL_PASS}"
    lo, hi = PRINTED_CORR
    med = float(np.median(corrs))
    assert lo - PRINTED_SLACK <= med <= hi + PRINTED_SLACK, (
        f"median final corr {med:.4f} outside the printed {lo}–{hi} (±{PRINTED_SLACK}): "
        f"{np.round(corrs, 4)}"
    )
