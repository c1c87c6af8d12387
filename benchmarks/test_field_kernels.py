"""The engine's two kernels against the forms they replaced, in one process (issue 23).

- the field: ``kernels.field`` (linear space where exact, log space below its floor) against
  ``kernels.field_log`` (log space everywhere, the kernel before);
- the unit field's Jacobian: ``kernels.field_jacobian`` (closed form) against
  ``kernels.field_jacobian_differences`` (d + 1 evaluations of the field, as before);

each timed by pytest-benchmark at the cost curve's n = 200, T = 4, d = 8 and n = 4, T = 64,
d = 8 points (``sized_problem``), at a point of the flow's transient (‖p‖ ≈ 10) and at one far
out (every input's top logit 800 above its runner-up: every softmax saturated, and the
linear form must hand over: what that costs is its logits pass, measured here). The
ratio of medians is what is reported (``reports/field_kernels.json``); the only assertions
are that both forms agree where they both answer and that the far point is the log form's,
not a timing: a ratio on a shared 2-core machine is a figure, not a gate. Run serially:

    python -m pytest benchmarks/test_field_kernels.py -p no:xdist -q -s

Observed (2026-12-04, shared 2-core machine, loaded): field 12–14 µs vs 23–24 µs at n = 200
in the transient (1.7–2.0×), 32 vs 28 µs far out (0.88×: the logits pass before the hand-over);
Jacobian 47–50 µs vs 95–113 µs by differences of the new field (2.0–2.2×; 250 µs by
differences of the old one), 59 vs 300 µs far out. 2026-12-06, after the SIMD logits and
``exp_array``: field 11.5–13.5 µs vs 27 µs (2.0×).

Also the field's exponential alone: ``kernels.exp_array`` against a compiled loop of
math.exp (libm, what the field called before) on the n·T = 800 arguments of the n = 200
transient point (``exp_speedup`` in the report).
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from numba import njit

from benchmarks.test_cost_curve import sized_problem
from models.flows import kernels
from theorems.framework import REPO_ROOT

POINTS = {"n200": (200, 4, 8), "T64": (4, 64, 8)}
#: ‖p‖ of the transient point; the far point is scaled until every input's top logit leads
#: its runner-up by FAR_GAP (every term then below e^{−800} of its input's top: log form).
RADII = {"transient": 10.0, "far": None}
FAR_GAP = 800.0
RESULTS: dict[str, dict] = {}
OUT = REPO_ROOT / "reports" / "field_kernels.json"


def _case(name: str, where: str):
    n, T, d = POINTS[name]
    problem = sized_problem(n, T, d, 1)[0]
    keys, gam = problem._np
    rng = np.random.default_rng([n, T, d])
    p = rng.normal(size=d)
    if where == "transient":
        return keys, gam, RADII[where] * p / np.linalg.norm(p)
    logits = np.sort(keys @ p, axis=1)
    return keys, gam, p * FAR_GAP / float((logits[:, -1] - logits[:, -2]).min())


@pytest.mark.parametrize("where", list(RADII))
@pytest.mark.parametrize("name", list(POINTS))
@pytest.mark.parametrize("form", ["field", "field_log", "jacobian", "jacobian_differences"])
def test_kernel_time(benchmark, name, where, form):
    keys, gam, p = _case(name, where)
    d = p.shape[0]
    out = np.empty((d, d)) if form.startswith("jacobian") else np.empty(d)
    fn = {
        "field": kernels.field,
        "field_log": kernels.field_log,
        "jacobian": kernels.field_jacobian,
        "jacobian_differences": kernels.field_jacobian_differences,
    }[form]
    benchmark.group = f"{name} {where}"
    log_wt = kernels.mean_log_weights(keys)
    # the log form reads no logits by coordinate; the tracer's kernels do
    head = (keys, gam) if form == "field_log" else (keys, kernels.keys_by_coordinate(keys), gam)
    benchmark(fn, *head, log_wt, p, kernels.LOGISTIC, 0.0, out)
    RESULTS.setdefault(f"{name} {where}", {})[form] = benchmark.stats.stats.median


@njit(cache=True)
def libm_exp(x, out):
    """e^x elementwise by math.exp, one libm call per element (the field's exponentials
    before ``kernels.exp_array``)."""
    for j in range(x.shape[0]):
        out[j] = math.exp(x[j])


def _exp_arguments() -> np.ndarray:
    """z_t − z_r at the n = 200 transient point: the arguments the field exponentiates."""
    keys, _, p = _case("n200", "transient")
    z = keys @ p
    return np.ascontiguousarray((z - z.max(axis=1, keepdims=True)).ravel())


@pytest.mark.parametrize("form", ["exp_array", "libm"])
def test_exp_time(benchmark, form):
    x = _exp_arguments()
    out = np.empty_like(x)
    fn = kernels.exp_array if form == "exp_array" else libm_exp
    benchmark.group = "exp n200 transient"
    benchmark(fn, x, out)
    RESULTS.setdefault("exp n200 transient", {})[form] = benchmark.stats.stats.median


def test_exp_forms_agree_to_an_ulp():
    x = _exp_arguments()
    ours, libm = np.empty_like(x), np.empty_like(x)
    kernels.exp_array(x, ours)
    libm_exp(x, libm)
    assert np.all(np.abs(ours - libm) <= np.spacing(libm))


def test_both_forms_agree_and_the_far_point_is_the_log_forms():
    for name in POINTS:
        for where in RADII:
            keys, gam, p = _case(name, where)
            u, u_log = np.empty(p.shape), np.empty(p.shape)
            lin = kernels.field_linear(
                keys,
                kernels.keys_by_coordinate(keys),
                gam,
                kernels.mean_log_weights(keys),
                p,
                kernels.LOGISTIC,
                0.0,
                u,
            )
            log = kernels.field_log(
                keys, gam, kernels.mean_log_weights(keys), p, kernels.LOGISTIC, 0.0, u_log
            )
            if where == "far":
                assert math.isnan(lin)  # saturated: below the floor, the log form answers
                continue
            assert not math.isnan(lin)
            assert np.abs(u - u_log).max() < 1e-12 and abs(lin - log) < 1e-12 * abs(log)


def test_write_report():
    if len(RESULTS) < len(POINTS) * len(RADII) + 1:
        pytest.skip("run the whole module (benchmarks were deselected or disabled)")
    exp_times = RESULTS.pop("exp n200 transient")
    rows = {
        "exp n200 transient": {
            "seconds": exp_times,
            "exp_speedup": exp_times["libm"] / exp_times["exp_array"],
        }
    }
    print(
        f"exp n200 transient: exp_array {exp_times['exp_array'] * 1e6:.2f} µs vs libm "
        f"{exp_times['libm'] * 1e6:.2f} µs ({rows['exp n200 transient']['exp_speedup']:.2f}×)"
    )
    for key, times in RESULTS.items():
        rows[key] = {
            "seconds": times,
            "field_speedup": times["field_log"] / times["field"],
            "jacobian_speedup": times["jacobian_differences"] / times["jacobian"],
        }
        print(
            f"{key}: field {times['field'] * 1e6:.1f} µs vs log {times['field_log'] * 1e6:.1f} µs "
            f"({rows[key]['field_speedup']:.2f}×); Jacobian {times['jacobian'] * 1e6:.1f} µs vs "
            f"differences {times['jacobian_differences'] * 1e6:.1f} µs "
            f"({rows[key]['jacobian_speedup']:.2f}×)"
        )
    OUT.write_text(json.dumps(rows, indent=2) + "\n")
