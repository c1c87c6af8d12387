"""The engine with and without the relaxed offset (``converge(relax=...)``,
``models.flows.offset``), on the cost curve's instances, in one process.

Far out (‖p‖ ≳ 1e6) the tracer cannot resolve the offset of p from the ray of p^mm, so the
heading test at p fails though the flow converges: such runs traced on to 1e7–1e8, stalled, or
ended inconclusive. With ``relax=True`` the heading is also accepted at p with its offset
relaxed to its certified equilibrium. Measured here on ``sized_problem``'s instances (the cost
curve's recipe: keys N(0, I), scores U(−1, 1), the top-score ATT-SVM feasible), seeds 0–4 at
n = 32, 64, 128, 200 (T = 4), T = 32, 64 (n = 4), n = T = 4, 8, 16 (d = 8), 45 instances:
statuses, selections, ‖p‖ at the end, and time, each engine once per instance.

Assertions (no timing assertion: a ratio measured on a shared machine is reported, not
gated): every instance the baseline decides, the relaxed engine decides the same way with the
same selection; no instance decided by the baseline is lost. Run serially:

    python -m pytest benchmarks/test_offset_relaxed.py -p no:xdist -q -s

Writes ``reports/offset_relaxed.json``. Observed (2026-12-03, shared 2-core machine): 45 of 45
converged with the relaxed offset, 32 without (the 13 others inconclusive on the heading alone);
total engine time 16.4 s → 3.3 s, most of it one instance (n = 200, seed 0: 11 s → 0.3 s);
per-instance ratio median 1.04, slowest 0.76× (a few ms: the Newton solves).
"""

from __future__ import annotations

import json
import statistics
import time

import numpy as np
import pytest

from benchmarks.test_cost_curve import sized_problem
from benchmarks.test_engine_vs_authors import ENGINE
from models.flows.dynamics import converge
from models.numerics import failures
from theorems.framework import REPO_ROOT

SIZES = [(32, 4, 8), (64, 4, 8), (128, 4, 8), (200, 4, 8), (4, 32, 8), (4, 64, 8)]
SIZES += [(4, 4, 8), (8, 8, 8), (16, 16, 8)]
SEEDS = range(5)


def _run(problem, relax: bool) -> dict:
    with failures.watch():
        t0 = time.perf_counter()
        out = converge(problem, relax=relax, **ENGINE)
        seconds = time.perf_counter() - t0
    return {
        "status": out.status,
        "reason": out.reason,
        "selected": out.selected.tolist(),
        "p_norm": float(np.linalg.norm(out.p.numpy())),
        "one_minus_cos": float(out.one_minus_cos),
        "relaxed_heading": out.relaxed_heading,
        "seconds": seconds,
    }


@pytest.fixture(scope="module")
def runs() -> list[dict]:
    rows = []
    for n, T, d in SIZES:
        for seed in SEEDS:
            problem, _, _ = sized_problem(n, T, d, seed)
            row = {"n": n, "T": T, "d": d, "seed": seed}
            row["baseline"], row["relaxed"] = _run(problem, False), _run(problem, True)
            rows.append(row)
            b, r = row["baseline"], row["relaxed"]
            print(
                f"n={n} T={T} d={d} seed={seed}: {b['status']} {b['seconds'] * 1e3:.0f} ms "
                f"‖p‖ {b['p_norm']:.2g} → {r['status']} {r['seconds'] * 1e3:.0f} ms "
                f"‖p‖ {r['p_norm']:.2g}",
                flush=True,
            )
    ratios = [row["baseline"]["seconds"] / row["relaxed"]["seconds"] for row in rows]
    summary = {
        "instances": len(rows),
        "converged": {
            side: sum(row[side]["status"] == "converged" for row in rows)
            for side in ("baseline", "relaxed")
        },
        "seconds": {
            side: sum(row[side]["seconds"] for row in rows) for side in ("baseline", "relaxed")
        },
        "ratio_median": statistics.median(ratios),
        "ratio_min": min(ratios),
    }
    print(json.dumps(summary, indent=1))
    out = REPO_ROOT / "reports" / "offset_relaxed.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "runs": rows}, indent=1) + "\n")
    return rows


def test_no_decision_is_lost_or_changed(runs):
    for row in runs:
        b, r = row["baseline"], row["relaxed"]
        if b["status"] == "converged":
            assert r["status"] == "converged", row
            assert r["selected"] == b["selected"], row


def test_every_relaxed_certificate_meets_the_target(runs):
    for row in runs:
        r = row["relaxed"]
        if r["status"] == "converged":
            assert r["one_minus_cos"] <= ENGINE["target"], row
            if r["relaxed_heading"] is not None:
                assert r["relaxed_heading"] <= ENGINE["target"], row
