"""The large-d torch work on a GPU against the CPU, side by side in one process.

What ``ATTN_DEVICE`` moves (``models.numerics.device``, docs/scale-out.md): the one gradient step on
the embeddings of Lemma 4.1 (``models.problems.embedding.one_step``, whose O(n·T·d) part is the
gather of E[X] and the logits) and the full-batch training of the real-data models. Here both run on
the CPU (the baseline) and on ``cuda`` on the same problem, and the ratio of the median times is
recorded in ``reports/benchmark_device.json``; float64 results must agree. Skipped where torch
sees no CUDA device (CI, and this project's 2-core machines). Run serially:

    python -m pytest benchmarks/test_device_speedup.py -p no:cacheprovider --no-gate
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from models.problems.embedding import (
    OneLayerModel,
    one_step,
    train_full_batch,
    uniform_token_problem,
)

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

# A sweep-sized one-step instance: the largest d of EMB-L41-RATE, 5x its n, 4x its T.
ONE_STEP = dict(n=1000, T=32, S=200, d=16384)
# The real-data protocol of EMB-REAL at its stated size (2000 docs, 2000 tokens, T = 64).
TRAIN = dict(n=2000, T=64, S=2000, d=32, epochs=20)
RESULTS: dict[str, dict] = {}


@pytest.fixture(autouse=True, scope="module")
def _every_core():
    """The CPU baseline gets every core (the suite's conftest pins one thread for tiny tensors;
    these are not tiny, and a one-thread baseline would flatter the GPU)."""
    before = torch.get_num_threads()
    torch.set_num_threads(os.cpu_count() or 1)
    yield
    torch.set_num_threads(before)


def _synced(fn):
    def run():
        out = fn()
        torch.cuda.synchronize()
        return out

    return run


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_one_step(benchmark, where):
    problem = uniform_token_problem(0, **ONE_STEP)
    gen = torch.Generator().manual_seed(2)
    p0 = torch.randn(problem.dim, generator=gen, dtype=torch.float64) / 10  # p0 ≠ 0: logits work
    benchmark.group = "one_step"
    step = benchmark.pedantic(
        _synced(lambda: one_step(problem, 10.0, p0=p0, device=where)), rounds=5, warmup_rounds=1
    )
    RESULTS.setdefault("one_step", {})[where] = benchmark.stats.stats.median
    RESULTS["one_step"][f"E1_{where}"] = step.E1


@pytest.mark.parametrize("where", ["cpu", "cuda"])
def test_training(benchmark, where):
    size = {k: TRAIN[k] for k in ("n", "T", "S", "d")}
    problem = uniform_token_problem(1, **size)
    model = OneLayerModel(problem.vocab_size, problem.dim, train_v=True, seed=0).to(where)
    benchmark.group = "train_full_batch"
    curve = benchmark.pedantic(
        _synced(
            lambda: train_full_batch(
                model, problem.sequences, problem.y, TRAIN["epochs"], 1e-2, seed=0
            )
        ),
        rounds=3,
        warmup_rounds=1,
    )
    RESULTS.setdefault("train", {})[where] = benchmark.stats.stats.median
    RESULTS["train"][f"curve_{where}"] = curve


def test_summary():
    """Same numbers on both devices (float64), and the speed-up of each, recorded."""
    if {"cpu", "cuda"} - set(RESULTS.get("one_step", {})) or {"cpu", "cuda"} - set(
        RESULTS.get("train", {})
    ):
        pytest.skip("run the whole module (benchmarks were deselected or disabled)")
    one, train = RESULTS["one_step"], RESULTS["train"]
    torch.testing.assert_close(one["E1_cuda"], one["E1_cpu"], rtol=1e-12, atol=1e-15)
    torch.testing.assert_close(train["curve_cuda"], train["curve_cpu"], rtol=1e-9, atol=1e-12)
    summary = {
        "device": torch.cuda.get_device_name(0),
        "one_step": ONE_STEP,
        "one_step_seconds": {"cpu": one["cpu"], "cuda": one["cuda"]},
        "one_step_speedup": one["cpu"] / one["cuda"],
        "train": TRAIN,
        "train_seconds": {"cpu": train["cpu"], "cuda": train["cuda"]},
        "train_speedup": train["cpu"] / train["cuda"],
        "cpu_threads": torch.get_num_threads(),
    }
    out = Path("reports/benchmark_device.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
