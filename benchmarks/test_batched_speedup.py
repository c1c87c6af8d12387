"""The batched transient on a GPU against the CPU engine one by one (issue 23), in one process.

A batch of BATCH large-rung-like instances (one key dimension D, n and T log-uniform in
N_RANGE × T_RANGE under the large rung's cap n·T ≤ 16,384, strategies/ladder.py; Gaussian
keys, scores uniform on [−1, 1], logistic loss, as ``test_cost_curve.sized_problem`` draws
them) is decided twice:

- CPU: ``converge(problem, **ENGINE)`` per instance, on the first CPU_SAMPLE instances (the
  one-by-one engine costs seconds each at these sizes; the total for the batch is their mean
  times BATCH, and is recorded as such);
- batched: ``models.flows.batched.transient`` over the whole batch on the device, then
  ``converge(problem, p0=p, **ENGINE)`` per instance on the CPU (the certificate).

Recorded in ``reports/benchmark_batched.json``: the device, the sizes, the transient's rounds,
evaluations and seconds, per instance both verdicts and times, and the ratio of the CPU
total to the batched total. Nothing asserts a speed: the ratio is a measurement of the lent
machine. Asserted: no instance is dropped, each ends with a named status, and the verdicts
agree where both were computed (a disagreement would be a bug of the transient).

Skipped without CUDA, except ``ATTN_BATCHED_SMOKE=1``: a tiny batch on the CPU that only
checks that the benchmark runs. On a GPU (benchmarks/device_check.sh):

    ATTN_DEVICE=cuda python -m pytest benchmarks/test_batched_speedup.py -s -p no:cacheprovider \\
        --no-gate
"""

from __future__ import annotations

import json
import math
import os
import time

import numpy as np
import pytest
import torch

from models.flows.batched import BatchedProblems, transient
from models.flows.dynamics import converge
from models.numerics.device import describe, device
from models.problems.attention import PromptProblem
from strategies.ladder import RUNGS
from theorems.framework import REPO_ROOT

SMOKE = os.environ.get("ATTN_BATCHED_SMOKE") == "1"
pytestmark = pytest.mark.skipif(
    not (torch.cuda.is_available() or SMOKE),
    reason="needs a CUDA device (ATTN_BATCHED_SMOKE=1: a tiny CPU run)",
)

#: Instances per batch, their key dimension, and the ranges of n and T (large-rung-like: the
#: cost curve's issue-23 points n = 200 and T = 64 are inside).
BATCH, D, N_RANGE, T_RANGE = (4, 8, (3, 6), (3, 6)) if SMOKE else (32, 64, (64, 200), (16, 64))
#: Instances the one-by-one CPU engine decides (seconds each on the full sizes).
CPU_SAMPLE = BATCH if SMOKE else 12
#: The engine's settings, the same on both sides.
ENGINE = {"target": 1e-6}
#: ‖p‖ past which a transient whose selection is read is handed to the engine.
HANDOFF_NORM = 10.0
STATUSES = ("converged", "inconclusive", "infeasible")
OUT_JSON = REPO_ROOT / "reports" / "benchmark_batched.json"


def draw_batch(seed: int = 0) -> list[PromptProblem]:
    """BATCH instances, (n, T) log-uniform in the ranges, n·T under the large rung's cap."""
    rng = np.random.default_rng([23, seed])
    cap = RUNGS["large"].nT_max
    problems = []
    while len(problems) < BATCH:
        n = int(math.exp(rng.uniform(*map(math.log, N_RANGE))))
        T = int(math.exp(rng.uniform(*map(math.log, T_RANGE))))
        if n * T > cap:
            continue
        keys = rng.normal(size=(n, T, D))
        scores = rng.uniform(-1, 1, size=(n, T))
        problems.append(PromptProblem(torch.from_numpy(keys), torch.from_numpy(scores), "logistic"))
    return problems


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def _warm_up(dev: torch.device) -> None:
    """Compile numba's kernels and wake the device before anything is timed."""
    problem = draw_batch(seed=1)[0]
    converge(problem, **ENGINE)
    transient(BatchedProblems.of([problem], device=dev), max_steps=3)
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def test_batched_transient_against_the_engine():
    dev = device("cuda") if torch.cuda.is_available() else device("cpu")
    _warm_up(dev)
    problems = draw_batch()
    batch = BatchedProblems.of(problems, device=dev)
    run = transient(batch, handoff_norm=HANDOFF_NORM, progress=True)
    batched = [_timed(converge, pr, p0=run.P[b], **ENGINE) for b, pr in enumerate(problems)]
    alone = [_timed(converge, pr, **ENGINE) for pr in problems[:CPU_SAMPLE]]

    rows = []
    for b, (problem, (outcome, seconds)) in enumerate(zip(problems, batched, strict=True)):
        row = {
            "n": problem.n,
            "T": problem.T,
            "transient": run.reasons[b],
            "accepted": int(run.accepted[b]),
            "rejected": int(run.rejected[b]),
            "handoff_norm": float(run.P[b].norm()),
            "batched_status": outcome.status,
            "handoff_seconds": seconds,
        }
        if b < CPU_SAMPLE:
            ref, cpu_seconds = alone[b]
            row |= {
                "cpu_status": ref.status,
                "cpu_seconds": cpu_seconds,
                "same_verdict": ref.status == outcome.status
                and bool((ref.selected == outcome.selected).all()),
            }
        rows.append(row)

    cpu_total = BATCH * float(np.mean([s for _, s in alone]))
    batched_total = run.seconds + sum(s for _, s in batched)
    report = {
        "device": describe(dev),
        "smoke": SMOKE,
        "batch": BATCH,
        "d": D,
        "n_range": N_RANGE,
        "T_range": T_RANGE,
        "engine": ENGINE,
        "handoff_norm": HANDOFF_NORM,
        "transient_seconds": run.seconds,
        "transient_evaluations": run.evaluations,
        "handoff_seconds": sum(s for _, s in batched),
        "cpu_sample": CPU_SAMPLE,
        "cpu_seconds_sampled": sum(s for _, s in alone),
        "cpu_seconds_for_batch": cpu_total,
        "cpu_seconds_for_batch_is": "measured" if CPU_SAMPLE == BATCH else "sample mean × batch",
        "batched_seconds": batched_total,
        "speedup": cpu_total / batched_total,
        "instances": rows,
    }
    OUT_JSON.parent.mkdir(parents=True, exist_ok=True)
    OUT_JSON.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    how = report["cpu_seconds_for_batch_is"]
    print(
        f"\n{describe(dev)}: {BATCH} instances, CPU {cpu_total:.2f} s ({how}), batched "
        f"{batched_total:.2f} s (transient {run.seconds:.2f} s), ×{report['speedup']:.2f}"
    )

    assert len(batched) == BATCH  # nothing dropped
    assert all(row["batched_status"] in STATUSES for row in rows)
    disagree = [b for b, row in enumerate(rows) if row.get("same_verdict") is False]
    assert not disagree, f"verdicts differ on instances {disagree}: {OUT_JSON}"
