"""The engine against the official TF-as-SVM recipe, side by side on the same instances and
initialisations, in one process (spec tfsvm §4, §4.1).

Setting: the official ``local_converge`` notebook (umich-sota/TF-as-SVM): n = 6, T = 8, d = 10,
tokens, queries and head on the unit sphere, random labels, built by its data generator (in
float32, then float64, as it does), seeds 0–19; the weights start from torch's default
nn.Linear initialisation U(±1/√d), seeded here.

Official recipe: torch autograd on the model written as the official code writes it (bias-free
linear layers, no vectorisation), SGD lr 0.1 with each gradient divided by (its Frobenius norm
+ machine ε), 2000 iterations, float64; for (K, Q) the two factors are normalised separately
and the penalty λ(‖K‖² + ‖Q‖²) with λ = ε is added to the loss.
Engine, from the same initialisation:
- W: ``models.flows.dynamics.converge`` on ``CrossProblem.prompt`` (the flow that NGD follows,
  traced and certified), the whole decision timed (tracing, every SVM solve, the certificate);
- (K, Q): ``models.problems.cross.kq_ngd`` with the same lr, steps and penalty (log-space
  gradients).

Each run is scored by 1 − corr with its OWN SVM: the Frobenius SVM (W) or the nuclear SVM
((K, Q)) at the tokens that run selects at its end (``models.oracles.normsvm``, certified), as the
official notebook does. Reported per instance, as ratios measured in this same run (the two
methods interleaved: engine, official, engine …), absolute times beside them:

(a) 1 − corr at equal time: the official run's 1 − corr after as many steps as it completes
    in the engine's time (its per-step time is uniform), against the engine's;
(b) time to equal 1 − corr: τ = the larger of the two final 1 − corr (both runs reach it);
    the official's time to stay ≤ τ (steps × its per-step time) against the engine's (W:
    ``converge(target=τ)``, certified; (K, Q): ``kq_ngd`` rerun for the steps its curve
    needs, timed);
(c) the nuclear SVM's solve time per instance.

Asserted (robust on this 2-core shared machine; see ``test_summary``): W (b) median ≥ 10×
and W (a) median ≥ 100×; (K, Q) (b) median ≥ 3×. The (K, Q) engine runs the same recipe, so
its 1 − corr at 2000 steps equals the official's (medians 2.67e-3 and 2.64e-3): its gain is
the cost per step alone. Per-instance versions sit at the noise edge and are non-strict
xfails. Run serially, not part of the ci suite (``testpaths``):

    python -m pytest benchmarks/test_tfsvm_vs_official.py -p no:xdist

The table goes to ``reports/tfsvm_benchmark.json`` and is printed (``-s``).
"""

from __future__ import annotations

import gc
import json
import math
import os
import statistics
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from models.flows.dynamics import converge
from models.oracles.normsvm import norm_svm
from models.problems.cross import MACHINE_EPS, CrossProblem, kq_ngd

N, T, D = 6, 8, 10
SEEDS = range(20)
OFFICIAL_STEPS = 2000
LR = 0.1
EPS = torch.finfo(torch.float64).eps
#: The engine's W target for (a): the prompt benchmark's 1e-9 (issue 11).
ENGINE_TARGET = 1e-9
#: Engine rounds under pytest-benchmark after the official run (one more sample of the cheap
#: side, interleaved: engine, official, engine); one keeps the module near 2 CPU-minutes.
ENGINE_ROUNDS = 1
RESULTS: dict[str, dict] = {}


# ---- the official setting ------------------------------------------------------------------


def official_data(seed: int):
    """``data_generator(seed)`` of local_converge.ipynb: float32 draws, then float64."""
    g = torch.Generator().manual_seed(seed)
    f32 = torch.float32
    v = torch.randn(D, generator=g, dtype=f32)
    v /= torch.norm(v)
    Y = 2 * torch.ones(N, dtype=f32) * (torch.randn(N, generator=g, dtype=f32) > 0) - 1
    X = torch.randn((N, T, D), generator=g, dtype=f32)
    X /= torch.norm(X, dim=-1, keepdim=True)
    Z = torch.randn((N, D), generator=g, dtype=f32)
    Z /= torch.norm(Z, dim=-1, keepdim=True)
    return X.double(), Y.double(), Z.double(), v.double()


def linear_init(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two d×d weights with nn.Linear's default distribution U(±1/√d) (kaiming_uniform with
    a = √5), seeded: the first is W's (or the query's) weight, the second the key's."""
    g = torch.Generator().manual_seed(10_000 + seed)
    bound = 1 / math.sqrt(D)
    return tuple(
        torch.empty(D, D, dtype=torch.float64).uniform_(-bound, bound, generator=g)
        for _ in range(2)
    )


def official_w(X, Y, Z, v, weight0, steps: int = OFFICIAL_STEPS) -> np.ndarray:
    """The official W loop; returns every iterate W = weightᵀ (steps + 1, d, d)."""
    weight = weight0.clone().requires_grad_(True)
    opt = torch.optim.SGD([weight], lr=LR)
    queries = Z.reshape(N, 1, D)
    Ws = np.empty((steps + 1, D, D))
    Ws[0] = weight.detach().T.numpy()
    for it in range(steps):
        opt.zero_grad()
        attention = torch.softmax(queries @ (X @ weight.T).transpose(-2, -1), dim=-1)
        out = (attention @ X @ v).view(-1)
        loss = torch.log(1 + torch.exp(-Y * out)).mean()
        loss.backward()
        weight.grad /= weight.grad.norm() + EPS
        opt.step()
        Ws[it + 1] = weight.detach().T.numpy()
    return Ws


def official_kq(X, Y, Z, v, query0, key0, steps: int = OFFICIAL_STEPS) -> np.ndarray:
    """The official (K, Q) loop with its ε-penalty; returns every W = (W_qᵀW_k)ᵀ = KQᵀ."""
    wq = query0.clone().requires_grad_(True)
    wk = key0.clone().requires_grad_(True)
    opt = torch.optim.SGD([wq, wk], lr=LR)
    queries = Z.reshape(N, 1, D)
    Ws = np.empty((steps + 1, D, D))
    Ws[0] = (wq.T @ wk).T.detach().numpy()
    for it in range(steps):
        opt.zero_grad()
        logits = (queries @ wq.T) @ (X @ wk.T).transpose(-2, -1)
        out = (torch.softmax(logits, dim=-1) @ X @ v).view(-1)
        loss = torch.log(1 + torch.exp(-Y * out)).mean()
        loss = loss + EPS * (wk.norm() ** 2 + wq.norm() ** 2)
        loss.backward()
        wk.grad /= wk.grad.norm() + EPS
        wq.grad /= wq.grad.norm() + EPS
        opt.step()
        Ws[it + 1] = (wq.T.mm(wk)).T.detach().numpy()
    return Ws


# ---- scoring --------------------------------------------------------------------------------


def omc_curve(Ws: np.ndarray, svm_W: np.ndarray) -> np.ndarray:
    """1 − corr(W_k, W^mm) for every recorded iterate."""
    A = Ws.reshape(len(Ws), -1)
    s = svm_W.reshape(-1)
    return 1.0 - (A @ s) / (np.linalg.norm(A, axis=1) * np.linalg.norm(s))


def own_svm(problem: CrossProblem, W: np.ndarray, norm: str):
    """The certified SVM of ``norm`` at the tokens W selects."""
    selected = problem.selected(torch.as_tensor(W))
    sol = norm_svm(problem.X.numpy(), problem.Z.numpy(), selected, norm)
    assert sol.ok, f"{norm} SVM at {selected.tolist()}: {sol.status} ({sol.reason})"
    return selected, sol


def steps_to(curve: np.ndarray, target: float) -> int:
    """The first step from which the curve stays ≤ target to its end."""
    above = np.flatnonzero(curve > target)
    return 0 if above.size == 0 else int(above[-1]) + 1


@pytest.fixture(scope="module", autouse=True)
def _frozen_heap():
    """Move the imported libraries' objects out of the collector's sight (torch, cvxpy and
    numba make a full collection cost ~0.5 s here), so that the collection before each timed
    run is cheap and the module's own time goes to the runs."""
    gc.collect()
    gc.freeze()
    yield
    gc.unfreeze()


def _timed(fn, *args, **kwargs):
    gc.collect()  # a collection inside one run would charge it with everyone's garbage
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def _rounds(benchmark) -> list[float]:
    """The engine rounds pytest-benchmark timed (none under --benchmark-disable)."""
    return list(benchmark.stats.stats.data) if benchmark.stats else []


CASES = [(param, seed) for seed in SEEDS for param in ("W", "KQ")]


@pytest.mark.parametrize("param, seed", CASES, ids=[f"{p}-seed{s:02d}" for p, s in CASES])
def test_engine_and_official(benchmark, param, seed):
    """Both methods from one initialisation on one instance, interleaved (engine, official,
    engine rounds), so that the ratios are not skewed by the load drifting between them."""
    X, Y, Z, v = official_data(seed)
    problem = CrossProblem(X, Z, Y, v)
    first, second = linear_init(seed)
    benchmark.group = f"tfsvm-{param}"
    row = {"param": param, "seed": seed}
    if param == "W":
        W0 = first.T.numpy()
        out, t_engine = _timed(converge, problem.prompt, W0.reshape(-1), target=ENGINE_TARGET)
        Ws, t_official = _timed(official_w, X, Y, Z, v, first)
        out = benchmark.pedantic(
            converge,
            args=(problem.prompt, W0.reshape(-1)),
            kwargs={"target": ENGINE_TARGET},
            rounds=ENGINE_ROUNDS,
            iterations=1,
        )
        assert out.status == "converged", out.reason
        engine_seconds = statistics.median([t_engine, *_rounds(benchmark)])
        W_engine = out.p.numpy().reshape(D, D)
        selected, sol = own_svm(problem, W_engine, "fro")
        engine_final = float(omc_curve(W_engine[None], sol.W)[0])
        official_sel, official_sol = own_svm(problem, Ws[-1], "fro")
        curve = omc_curve(Ws, official_sol.W)
        target = max(float(curve[-1]), engine_final)
        reach, t_reach = _timed(converge, problem.prompt, W0.reshape(-1), target=target)
        assert reach.status == "converged", reach.reason
        engine_to_target = t_reach
        row["engine_evals"] = int(out.trajectory.evals)
    else:
        K0, Q0 = second.T.numpy(), first.T.numpy()  # K = W_kᵀ, Q = W_qᵀ: W = KQᵀ
        kwargs = {"lr": LR, "steps": OFFICIAL_STEPS, "penalty": MACHINE_EPS}
        run, t_engine = _timed(kq_ngd, problem, K0, Q0, **kwargs)
        Ws, t_official = _timed(official_kq, X, Y, Z, v, first, second)
        assert np.allclose(run.Ws[0], Ws[0]), "the two runs do not start from one W"
        run = benchmark.pedantic(
            kq_ngd, args=(problem, K0, Q0), kwargs=kwargs, rounds=ENGINE_ROUNDS, iterations=1
        )
        engine_seconds = statistics.median([t_engine, *_rounds(benchmark)])
        selected, sol = own_svm(problem, run.W, "nuc")
        engine_curve = omc_curve(run.Ws, sol.W)
        engine_final = float(engine_curve[-1])
        official_sel, official_sol = own_svm(problem, Ws[-1], "nuc")
        curve = omc_curve(Ws, official_sol.W)
        target = max(float(curve[-1]), engine_final)
        k = steps_to(engine_curve, target)
        _, engine_to_target = _timed(kq_ngd, problem, K0, Q0, **(kwargs | {"steps": k}))
        row["nuc_seconds"] = official_sol.seconds
        row["engine_steps_to_target"] = k
    per_step = t_official / OFFICIAL_STEPS
    k_equal = min(OFFICIAL_STEPS, int(engine_seconds / per_step))
    row |= {
        "engine_seconds": engine_seconds,
        "official_seconds": t_official,
        "engine_omc": engine_final,
        "official_omc": float(curve[-1]),
        "same_selection": bool(np.array_equal(selected, official_sel)),
        # (a) at the engine's time
        "official_steps_at_engine_time": k_equal,
        "official_omc_at_engine_time": float(curve[k_equal]),
        # (b) to the worse of the two final 1 − corr
        "target_omc": target,
        "engine_seconds_to_target": engine_to_target,
        "official_seconds_to_target": steps_to(curve, target) * per_step,
    }
    row["ratio_omc_at_engine_time"] = row["official_omc_at_engine_time"] / max(engine_final, 1e-16)
    row["ratio_time_to_target"] = row["official_seconds_to_target"] / engine_to_target
    RESULTS[f"{param}-seed{seed:02d}"] = row


def _summary() -> dict:
    rows = [RESULTS[f"{p}-seed{s:02d}"] for p, s in CASES if f"{p}-seed{s:02d}" in RESULTS]
    if len(rows) < len(CASES):
        pytest.skip("run the whole module (benchmarks were deselected or disabled)")
    summary: dict = {"load_average_1min": os.getloadavg()[0], "instances": len(SEEDS)}
    for param in ("W", "KQ"):
        mine = [r for r in rows if r["param"] == param]
        summary[param] = {
            "engine_median_seconds": statistics.median(r["engine_seconds"] for r in mine),
            "official_median_seconds": statistics.median(r["official_seconds"] for r in mine),
            "engine_median_omc": statistics.median(r["engine_omc"] for r in mine),
            "official_median_omc": statistics.median(r["official_omc"] for r in mine),
            "same_selection": sum(r["same_selection"] for r in mine),
            "median_ratio_omc_at_engine_time": statistics.median(
                r["ratio_omc_at_engine_time"] for r in mine
            ),
            "min_ratio_omc_at_engine_time": min(r["ratio_omc_at_engine_time"] for r in mine),
            "median_ratio_time_to_target": statistics.median(
                r["ratio_time_to_target"] for r in mine
            ),
            "min_ratio_time_to_target": min(r["ratio_time_to_target"] for r in mine),
        }
    nuc = [r["nuc_seconds"] for r in rows if r["param"] == "KQ"]
    summary["nuclear_svm_seconds"] = {"median": statistics.median(nuc), "max": max(nuc)}
    summary["rows"] = rows
    out = Path("reports/tfsvm_benchmark.json")
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(summary, indent=2))
    return summary


def test_summary():
    """W: to the official's final 1 − corr ≥ 10× faster, and at the engine's time ≥ 100× closer
    to the SVM (medians); (K, Q): to equal 1 − corr ≥ 3× faster (median)."""
    summary = _summary()
    print(json.dumps({k: v for k, v in summary.items() if k != "rows"}, indent=2))
    header = ("case", "eng s", "off s", "eng 1-c", "off 1-c", "(a) x", "(b) x", "same α")
    print("{:11} {:>7} {:>7} {:>9} {:>9} {:>9} {:>7} {:>6}".format(*header))
    for r in summary["rows"]:
        print(
            f"{r['param'] + '-' + str(r['seed']):11} {r['engine_seconds']:7.3f} "
            f"{r['official_seconds']:7.3f} {r['engine_omc']:9.1e} {r['official_omc']:9.1e} "
            f"{r['ratio_omc_at_engine_time']:9.1e} {r['ratio_time_to_target']:7.1f} "
            f"{str(r['same_selection']):>6}"
        )
    assert summary["W"]["median_ratio_time_to_target"] >= 10
    assert summary["W"]["median_ratio_omc_at_engine_time"] >= 100
    assert summary["KQ"]["median_ratio_time_to_target"] >= 3


@pytest.mark.xfail(
    strict=False,
    reason="at the edge of the machine's noise on 2026-12-01 (load average 2.6-5): of three "
    "runs two met it and one missed (W seed 17 at 9.7x, 20-23x in the others); the minima "
    "were 13.5x / 9.7x / 14.3x (W) and 2.2x / 3.9x / 2.9x ((K, Q): seed 13, where the "
    "engine's final 1 - corr is the larger, so it needs all 2000 steps to reach it).",
)
def test_every_instance():
    """Per instance: W ≥ 10× to the official's final 1 − corr; (K, Q) ≥ 2× to equal 1 − corr."""
    summary = _summary()
    slow = [
        (f"{r['param']}-{r['seed']}", round(r["ratio_time_to_target"], 1))
        for r in summary["rows"]
        if r["ratio_time_to_target"] < (10 if r["param"] == "W" else 2)
    ]
    assert not slow, f"below the target ratio on {slow}"
