"""The SVM oracle's fast path against its reference pipeline, on the same instances, in one run.

ATT-SVM with its certificate (``models.oracles.svm.att_svm``: building the rows, solving,
certifying) on 20 seeded instances with n·T ≤ 100 and d ≤ 32, the extremes n·T = 100 and d = 32
among them: 16 with α chosen by a random p (feasible) and 4 with a random α (infeasible at their
sizes, answered with a Farkas certificate). Each instance is timed twice, back to back:
``method="auto"`` (the certified Lawson–Hanson fast path) and ``method="reference"`` (LP,
cvxpy, polish, certificate). Target (issue 11, "Oracle"): ≤ 1 ms median per call. The shared
machines vary 1.5–2× in speed from day to day, so the assertions are ratios measured in this
run (median speed-up ≥ MIN_MEDIAN_SPEEDUP, every instance ≥ MIN_SPEEDUP) and the absolute
medians are reported beside them. Run serially:

    python -m pytest benchmarks/test_oracle.py -p no:xdist -q

The table is written to ``reports/oracle_benchmark.json`` and printed.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import numpy as np
import pytest

from models.oracles import svm

#: (n, T, d) of the instances; the first five are the extremes n·T = 100 or d = 32.
SIZES = (
    (10, 10, 32),
    (1, 100, 32),
    (50, 2, 32),
    (4, 25, 32),
    (20, 5, 32),
    (2, 50, 16),
    (5, 20, 8),
    (25, 4, 24),
    (3, 30, 12),
    (8, 12, 20),
    (1, 2, 2),
    (2, 3, 4),
    (3, 8, 6),
    (6, 6, 10),
    (12, 8, 32),
    (7, 14, 28),
    # random α, infeasible at these sizes and seeds (rows far outnumber d): a Farkas vector
    (10, 10, 8),
    (20, 5, 4),
    (4, 25, 4),
    (25, 4, 2),
)
#: The last this many SIZES draw a random α instead of a separable one.
RANDOM_ALPHA = 4
#: Rounds per timing: the fast path is ~100× cheaper, so it gets more rounds for the same time.
FAST_ROUNDS, REFERENCE_ROUNDS = 200, 15
#: Median over instances of (reference median / fast median) must reach this ...
MIN_MEDIAN_SPEEDUP = 10.0
#: ... and every instance this (an instance that fell through would sit near 1).
MIN_SPEEDUP = 3.0
#: Fast and reference optima must agree to this, relative to max(1, ‖x‖).
AGREE_TOL = 1e-8
#: Target of issue 11, reported beside the ratios, not asserted (machine speed varies).
TARGET_MEDIAN_US = 1000.0
METHODS = ("auto", "reference")
RESULTS: dict[str, dict] = {}


def instance(k: int) -> tuple[np.ndarray, np.ndarray]:
    n, T, d = SIZES[k]
    rng = np.random.default_rng(7000 + k)
    keys = rng.normal(size=(n, T, d))
    if k >= len(SIZES) - RANDOM_ALPHA:
        return keys, rng.integers(0, T, size=n)
    return keys, (keys @ rng.normal(size=d)).argmax(-1)


INSTANCES = {f"oracle{k:02d}": instance(k) for k in range(len(SIZES))}


@pytest.mark.parametrize(
    ("name", "method"), [(name, method) for name in INSTANCES for method in METHODS]
)
def test_att_svm(benchmark, name, method):
    """One instance, one method; the two methods of an instance run one after the other."""
    keys, alpha = INSTANCES[name]
    benchmark.group = f"oracle-{method}"
    rounds = FAST_ROUNDS if method == "auto" else REFERENCE_ROUNDS
    sol = benchmark.pedantic(
        svm.att_svm,
        args=(keys, alpha),
        kwargs={"method": method},
        rounds=rounds,
        iterations=1,
        warmup_rounds=2,
    )
    expected = "infeasible" if int(name[-2:]) >= len(SIZES) - RANDOM_ALPHA else "optimal"
    assert sol.status == expected, f"{name}: {sol.status}, expected {expected}: {sol.reason}"
    if benchmark.stats is None:  # --benchmark-disable (or xdist): one call, no timing
        return
    n, T, d = keys.shape
    row = RESULTS.setdefault(name, {"instance": name, "n": n, "T": T, "d": d})
    row[method] = sol
    row[f"{method}_us"] = benchmark.stats.stats.median * 1e6


def test_summary():
    """Ratios and agreement of the numbers recorded above in this same process."""
    rows = [RESULTS[k] for k in INSTANCES if {"auto", "reference"} <= set(RESULTS.get(k, {}))]
    if len(rows) < len(INSTANCES):
        pytest.skip("run the whole module (benchmarks were deselected or disabled)")
    table = []
    for row in rows:
        fast, ref = row["auto"], row["reference"]
        assert fast.status == ref.status, f"{row['instance']}: {fast.status} vs {ref.status}"
        if ref.ok:
            gap = float(np.linalg.norm(fast.x - ref.x))
            bound = AGREE_TOL * max(1.0, float(ref.norm))
            assert gap <= bound, f"{row['instance']}: ‖x_fast − x_ref‖={gap:.2e} > {bound:.1e}"
            assert fast.certificate.ok and ref.certificate.ok, row["instance"]
        table.append(
            {
                "instance": row["instance"],
                "n": row["n"],
                "T": row["T"],
                "d": row["d"],
                "rows": len(fast.rows),
                "status": fast.status,
                "fast_solver": fast.solver,
                "fast_us": round(row["auto_us"], 1),
                "reference_us": round(row["reference_us"], 1),
                "ratio": round(row["reference_us"] / row["auto_us"], 2),
            }
        )
    ratios = [r["ratio"] for r in table]
    summary = {
        "command": "python -m pytest benchmarks/test_oracle.py -p no:xdist -q",
        "fast_median_us": round(statistics.median(r["fast_us"] for r in table), 1),
        "fast_max_us": max(r["fast_us"] for r in table),
        "reference_median_us": round(statistics.median(r["reference_us"] for r in table), 1),
        "median_ratio": round(statistics.median(ratios), 2),
        "min_ratio": min(ratios),
        "fast_path_answered": sum(r["fast_solver"] == svm.FAST_SOLVER for r in table),
        "target_median_us": TARGET_MEDIAN_US,
        "rows": table,
    }
    out = Path("reports/oracle_benchmark.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=2, ensure_ascii=False) + "\n")
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    for r in table:
        print(
            f"{r['instance']}  n={r['n']:3d} T={r['T']:3d} d={r['d']:2d} rows={r['rows']:3d} "
            f"{r['status']:10s} fast {r['fast_us']:8.1f} µs  reference {r['reference_us']:8.1f} µs"
            f"  ×{r['ratio']:.1f}"
        )
    assert summary["fast_path_answered"] == len(table), "an instance fell through"
    assert summary["median_ratio"] >= MIN_MEDIAN_SPEEDUP, (
        f"median speed-up {summary['median_ratio']}× below {MIN_MEDIAN_SPEEDUP}×"
    )
    assert summary["min_ratio"] >= MIN_SPEEDUP, (
        f"minimum speed-up {summary['min_ratio']}× below {MIN_SPEEDUP}×"
    )
