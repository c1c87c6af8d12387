"""The regularization-path descents' derivatives: closed form against autograd, in one process
(issue 23: the regularization-path claims were a third of the claims suite's time).

``Objective.closed`` (``kernels.log_gap_derivatives``: f, ∇f and ∇²f of the ranked log gap,
compiled) against ``_derivatives`` by autograd of ``log_gap_batch`` (one double backward over
d copies of the rows, the form before), and a line-search trial's values (order 0) against the
torch forward pass, each timed by pytest-benchmark on the batch a 3-D regularization-path
point descends: 64 restarts plus 3 ATT-SVM seeds, an instance of MM-RP-3D-RATE's size (n = 3,
T = 4, keys in R³), at R = 20·‖p‖ ≈ 60. The ratio of medians is what is reported
(``reports/regpath_derivatives.json``); the only assertion is that both forms agree there, not
a timing: a ratio on a shared 2-core machine is a figure, not a gate. Run serially:

    python -m pytest benchmarks/test_regpath_derivatives.py -p no:xdist -q -s

Observed (2026-12-05, shared 2-core machine): see docs/performance.md.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from models.flows.regpath import _derivatives, objective_for
from models.problems.attention import PromptProblem
from theorems.framework import REPO_ROOT

RESULTS: dict[str, float] = {}
OUT = REPO_ROOT / "reports" / "regpath_derivatives.json"


def _case():
    gen = torch.Generator().manual_seed(0)
    keys = torch.randn(3, 4, 3, generator=gen, dtype=torch.float64)
    scores = torch.randn(3, 4, generator=gen, dtype=torch.float64)
    problem = PromptProblem(keys, scores, "logistic")
    P = torch.randn(67, 3, generator=gen, dtype=torch.float64)
    P *= 60.0 / torch.linalg.vector_norm(P, dim=-1, keepdim=True)
    obj = objective_for(problem)
    return obj, dataclasses.replace(obj, closed=None), P


@pytest.mark.parametrize("form", ["closed", "autograd"])
@pytest.mark.parametrize("what", ["derivatives", "values"])
def test_derivative_time(benchmark, what, form):
    obj, autograd, P = _case()
    chosen = obj if form == "closed" else autograd
    torch.set_num_threads(1)  # the descents run under one thread (regpath.one_thread)
    benchmark.group = what
    _derivatives(chosen, P)  # load the compiled kernels first: calibration would time that
    if what == "derivatives":
        benchmark(_derivatives, chosen, P)
    else:
        benchmark(chosen.values, P)
    RESULTS[f"{what} {form}"] = benchmark.stats.stats.median


def test_both_forms_agree():
    obj, autograd, P = _case()
    f, g, H = _derivatives(obj, P)
    f0, g0, H0 = _derivatives(autograd, P)
    torch.testing.assert_close(f, f0, rtol=1e-12, atol=0)
    # autograd loses the leak-sized gradients of rows saturated on a wrong token
    # (tests/test_regpath.py): compare where the gradient is not leak-sized
    big = torch.linalg.vector_norm(g, dim=-1) > 1e-6
    assert int(big.sum()) > 10
    torch.testing.assert_close(g[big], g0[big], rtol=1e-9, atol=0)


def test_write_report():
    if len(RESULTS) < 4:
        pytest.skip("run the whole module (benchmarks were deselected or disabled)")
    rows = {
        what: {
            "closed_s": RESULTS[f"{what} closed"],
            "autograd_s": RESULTS[f"{what} autograd"],
            "speedup": RESULTS[f"{what} autograd"] / RESULTS[f"{what} closed"],
        }
        for what in ("derivatives", "values")
    }
    for what, row in rows.items():
        print(
            f"{what}: closed {row['closed_s'] * 1e3:.3f} ms vs autograd "
            f"{row['autograd_s'] * 1e3:.3f} ms ({row['speedup']:.1f}×)"
        )
    OUT.write_text(json.dumps(rows, indent=2) + "\n")
