"""The graph-SVM oracle of 2403.08081 against the official recipe, on the same instances, in
one run (issue 25: "beat it on accuracy and speed, and say by how much").

Ours: ``models.ntp.svm.graph_svm`` (priority graphs, one row per distinct (query, label,
token) triple, the certified equality-constrained margin QP, its KKT certificate). Official
(spec ntp §5, ``W_svm_solver_cvxpy`` transcribed): cvxpy, the unsquared Frobenius norm, one
constraint block per query built from every (sample, token) pair, default SCS, no status
check; the SCCs are handed to it (the notebook runs Tarjan before it), so its time is the
constraints and the solve while ours includes building the graphs. Accuracy: the official
answer has no multipliers, so its KKT residuals are measured with multipliers fitted to it
(NNLS on its nearly active rows), as ``models.oracles.svm.certify`` measures ours.

Assertions are ratios measured in this run (median speed-up ≥ MIN_MEDIAN_SPEEDUP), our
certificate (≤ 1e-8, the issue's bar) and agreement of the two answers to the official
solver's accuracy; absolute times are reported beside them. Run serially:

    python -m pytest benchmarks/test_ntp_oracle.py -p no:xdist -q -s

The table is written to ``reports/ntp_oracle_benchmark.json`` and printed.
"""

from __future__ import annotations

import json
import statistics
import warnings
from pathlib import Path

import cvxpy as cp
import numpy as np
import pytest
from scipy.optimize import nnls

from models.ntp.data import ntp_data
from models.ntp.graph import priority_graphs
from models.ntp.qp import KKT_TOL, certify_equality
from models.ntp.svm import graph_svm

#: Median over instances of (official median / ours median) must reach this (issue 25: 10×).
MIN_MEDIAN_SPEEDUP = 10.0
#: The two answers agree to this (max |ΔW|): SCS's default accuracy (measured ≤ 1.4e-5 by the
#: spec's calibration, ≤ 7e-8 with SCS 3.3).
AGREE_TOL = 1e-4
ROUNDS_OURS, ROUNDS_OFFICIAL = 30, 7
RESULTS: dict[str, dict] = {}


def _official_style(seed: int, n: int, T: int, K: int, d: int):
    """Generator (a) of spec §4.1: unit vocabulary, T distinct tokens per sequence, label
    uniform over them; redrawn until some query graph has a cycle."""
    rng = np.random.default_rng(seed)
    while True:
        E = rng.standard_normal((K, d))
        E /= np.linalg.norm(E, axis=1, keepdims=True)
        seqs = [rng.choice(K, size=T, replace=False).tolist() for _ in range(n)]
        labels = [int(rng.choice(s)) for s in seqs]
        if any(not g.is_acyclic for g in priority_graphs(seqs, labels, K).values()):
            return ntp_data(E, seqs, labels)


def _i2():
    E = np.random.default_rng(0).standard_normal((5, 6))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    seqs = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
    return ntp_data(E, seqs, [1, 1, 2, 3, 3, 2, 2])


INSTANCES = {
    "official-6x4-K6-d8": _official_style(1, 6, 4, 6, 8),
    "I2": _i2(),
    "official-12x6-K8-d10": _official_style(2, 12, 6, 8, 10),
    "official-24x6-K10-d12": _official_style(3, 24, 6, 10, 12),
}


def official_solver(data, graphs) -> np.ndarray:
    """The official recipe's solve, transcribed (spec ntp §5)."""
    V = data.embeddings
    W = cp.Variable((data.dim, data.dim))
    zero = [[] for _ in range(data.num_tokens)]
    neg = [[] for _ in range(data.num_tokens)]
    for seq, y in zip(data.sequences, data.labels, strict=True):
        k = seq[-1]
        for j in seq:
            if j == y:
                continue
            if graphs[k].same_component(y, j):
                zero[k].append(V[y] - V[j])
            else:
                neg[k].append(V[j] - V[y])
    cons = []
    for k in range(data.num_tokens):
        if zero[k]:
            cons.append(cp.vstack(zero[k]) @ W @ V[k].reshape(-1, 1) == 0)
        if neg[k]:
            cons.append(cp.vstack(neg[k]) @ W @ V[k].reshape(-1, 1) <= -1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cp.Problem(cp.Minimize(cp.norm(W, "fro")), cons).solve(solver=cp.SCS)
    return np.array(W.value)


def official_kkt(rows, W: np.ndarray) -> float:
    """The worst KKT residual of the official answer, with multipliers fitted to it."""
    w = W.ravel()
    active = rows.A_in @ w - 1 <= 1e-5  # SCS's accuracy: rows it left (nearly) tight
    M = np.vstack([rows.A_in[active], rows.A_eq, -rows.A_eq]).T
    u = nnls(M, w)[0]
    a, e = int(active.sum()), len(rows.A_eq)
    lam = np.zeros(len(rows.A_in))
    lam[active] = u[:a]
    return certify_equality(rows.A_in, rows.A_eq, w, lam, u[a : a + e] - u[a + e :]).worst


@pytest.mark.parametrize(
    ("name", "method"), [(name, m) for name in INSTANCES for m in ("ours", "official")]
)
def test_graph_svm(benchmark, name, method):
    """One instance, one solver; the two solvers of an instance run one after the other."""
    data = INSTANCES[name]
    benchmark.group = f"ntp-oracle-{method}"
    if method == "ours":
        out = benchmark.pedantic(
            graph_svm, args=(data,), rounds=ROUNDS_OURS, iterations=1, warmup_rounds=1
        )
        assert out.ok and out.certificate.worst <= KKT_TOL, f"{name}: {out.reason}"
    else:
        graphs = priority_graphs(data.sequences, data.labels, data.num_tokens)
        out = benchmark.pedantic(
            official_solver, args=(data, graphs), rounds=ROUNDS_OFFICIAL, iterations=1
        )
    if benchmark.stats is None:  # --benchmark-disable (or xdist): one call, no timing
        return
    row = RESULTS.setdefault(name, {"instance": name})
    row[method] = out
    row[f"{method}_ms"] = benchmark.stats.stats.median * 1e3


def test_summary():
    """Ratios and accuracies of the numbers recorded above in this same process."""
    rows = [RESULTS[k] for k in INSTANCES if {"ours", "official"} <= set(RESULTS.get(k, {}))]
    if len(rows) < len(INSTANCES):
        pytest.skip("run the whole module (benchmarks were deselected or disabled)")
    table = []
    for row in rows:
        ours, W_off = row["ours"], row["official"]
        gap = float(np.abs(W_off - ours.W).max())
        assert gap <= AGREE_TOL, f"{row['instance']}: max |ΔW| = {gap:.2e}"
        table.append(
            {
                "instance": row["instance"],
                "rows": len(ours.rows.A_in) + len(ours.rows.A_eq),
                "ours_ms": round(row["ours_ms"], 3),
                "official_ms": round(row["official_ms"], 2),
                "ratio": round(row["official_ms"] / row["ours_ms"], 1),
                "ours_kkt": ours.certificate.worst,
                "official_kkt": official_kkt(ours.rows, W_off),
                "max_abs_dW": gap,
            }
        )
    ratios = [r["ratio"] for r in table]
    summary = {
        "command": "python -m pytest benchmarks/test_ntp_oracle.py -p no:xdist -q -s",
        "median_ratio": statistics.median(ratios),
        "min_ratio": min(ratios),
        "ours_worst_kkt": max(r["ours_kkt"] for r in table),
        "official_worst_kkt": max(r["official_kkt"] for r in table),
        "rows": table,
    }
    out = Path("reports/ntp_oracle_benchmark.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    for r in table:
        print(
            f"{r['instance']:24s} rows={r['rows']:3d} ours {r['ours_ms']:7.3f} ms "
            f"official {r['official_ms']:7.2f} ms ×{r['ratio']:.0f}  KKT ours "
            f"{r['ours_kkt']:.1e} official {r['official_kkt']:.1e}  max|ΔW| {r['max_abs_dW']:.1e}"
        )
    assert summary["median_ratio"] >= MIN_MEDIAN_SPEEDUP, (
        f"median speed-up {summary['median_ratio']}× below {MIN_MEDIAN_SPEEDUP}×"
    )
