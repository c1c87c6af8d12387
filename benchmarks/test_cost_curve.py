"""Cost curve (issue 11): how the engine's and the oracle's time grow with n, T and d.

Three one-factor sweeps around BASE = (n, T, d) = (4, 4, 8) out to the size ladder's large
rung (strategies/ladder.py): n up to 256, T up to 256, d up to 1024, the other two sizes held at
the base (n = 200 and T = 64 stay among the points: issue 23's speed targets are set there).
Each point is SEEDS instances drawn as in ``test_engine_vs_authors.random_problem``
(Gaussian keys, scores uniform(−1, 1), logistic loss) at fixed sizes, redrawn up to MAX_DRAWS
times until the ATT-SVM of the top-score tokens is feasible. Where n(T − 1) rows outnumber
what d dimensions can separate, no draw is feasible: the last one is used anyway and the point
says so (``top_feasible``), with what converge
returned there. Per instance, all in one process:

- engine: wall time of ``converge(problem, target=1e-9)``, the whole certified decision, with
  its status, reason, field evaluations and integrator steps;
- oracle: ``att_svm(keys, selected)`` on the engine's selection, the certified fast path
  (median of several calls), and ``method="reference"`` (LP + cvxpy pipeline, one call);
- authors: ``authors_protocol``, the full 2000 normalised-SGD steps by torch autograd (one
  run; 0.4–2 s each, the bulk of the module's time, but a 200-step run scaled ×10 sat 0.5–2.6x
  off a full run on this loaded machine, where a 0.1 s window catches too little of the load).

A point's time is the median over its seeds. Per sweep and method, log(time) = a + b·log(size)
is fitted by least squares; b is reported with its standard error and with the slope of the
upper half of the sizes alone, where fixed overheads matter least.

The shared 2-core machines vary 1.5–2x in speed from day to day, so nothing here asserts an
absolute time: the assertions are ratios measured in this same run (at every point the engine
beats the authors' protocol and the fast oracle beats its reference) and that every engine run
ended with a named status. Points below the issue's 50x target, and every run that was not
"converged", are findings: they are listed in the report, not hidden. Run serially:

    nice -n 5 python -m pytest benchmarks/test_cost_curve.py -p no:xdist -q -s

Writes ``reports/cost_curve.json``, ``reports/cost_curve.md`` and
``reports/figures/cost_curve.png``, and prints progress per point.
"""

from __future__ import annotations

import json
import math
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.ticker import NullFormatter

from benchmarks.test_engine_vs_authors import (
    AUTHORS_STEPS,
    ENGINE,
    authors_protocol,
    random_problem,
)
from models.flows.dynamics import converge
from models.numerics import failures
from models.oracles.svm import att_svm
from models.problems.attention import PromptProblem
from theorems.framework import REPO_ROOT, figures

#: The point the three sweeps pass through.
BASE = {"n": 4, "T": 4, "d": 8}
#: The sizes of each one-factor sweep (log-spaced, the base value among them).
SWEEPS = {
    "n": (1, 2, 4, 8, 16, 32, 64, 128, 200, 256),
    "T": (2, 4, 8, 16, 32, 64, 128, 256),
    "d": (2, 4, 8, 16, 32, 64, 128, 256, 512, 1024),
}
#: Instances per point; a point's time is their median.
SEEDS = 5
#: Draws per instance until the top-score tokens' ATT-SVM is feasible (then the last is kept).
MAX_DRAWS = 20
#: The engine is deterministic: runs faster than this are repeated and the fastest kept ...
ENGINE_REPEAT_BELOW_S = 0.1
#: ... this many times in all (a single ms-scale run is mostly scheduler noise here).
ENGINE_REPEATS = 3
#: The fast oracle is called until this much time has passed (at least ORACLE_MIN_ROUNDS) ...
ORACLE_BUDGET_S = 0.02
ORACLE_MIN_ROUNDS = 3
#: Issue 11's per-instance speed-up target over the authors' protocol: reported, not asserted
#: here (benchmarks/test_engine_vs_authors.py asserts it on its own instances).
TARGET_SPEEDUP = 50.0
#: Statuses an engine run may end with (anything else is a bug, not a finding).
STATUSES = ("converged", "inconclusive", "infeasible")
METHODS = ("engine", "oracle", "reference", "authors")
LABELS = {
    "engine": "engine (converge to 1e-9)",
    "oracle": "oracle (att_svm, fast path)",
    "reference": "oracle reference (LP + cvxpy)",
    "authors": f"authors ({AUTHORS_STEPS} steps)",
}
MARKERS = {"engine": "o", "oracle": "s", "reference": "^", "authors": "D"}
COMMAND = "nice -n 5 python -m pytest benchmarks/test_cost_curve.py -p no:xdist -q -s"
OUT_JSON = REPO_ROOT / "reports" / "cost_curve.json"
OUT_MD = REPO_ROOT / "reports" / "cost_curve.md"
FIGURE = "cost_curve.png"


def sized_problem(n: int, T: int, d: int, seed: int) -> tuple[PromptProblem, bool, int]:
    """``random_problem``'s recipe at fixed sizes: (problem, top-score SVM feasible, draws).

    The generator is seeded by (n, T, d, seed), so the base point is the same instance in all
    three sweeps and a point's instances do not depend on which other points were measured.
    """
    rng = np.random.default_rng([n, T, d, seed])
    draws, feasible = 0, False
    while not feasible and draws < MAX_DRAWS:
        keys = rng.normal(size=(n, T, d))
        scores = rng.uniform(-1, 1, size=(n, T))
        feasible = att_svm(keys, scores.argmax(-1)).ok
        draws += 1
    problem = PromptProblem(torch.from_numpy(keys), torch.from_numpy(scores), "logistic")
    return problem, feasible, draws


def _timed(fn, *args, **kwargs):
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0


def run_instance(n: int, T: int, d: int, seed: int) -> dict:
    """Engine, fast oracle, reference oracle and authors' protocol on one instance."""
    problem, feasible, draws = sized_problem(n, T, d, seed)
    keys = problem.keys.numpy()
    with failures.watch() as watched:
        out, engine_s = _timed(converge, problem, **ENGINE)
    # The repeats double as a determinism check: the same instance must trace the same path.
    repeats = []
    if engine_s < ENGINE_REPEAT_BELOW_S:
        for _ in range(ENGINE_REPEATS - 1):
            again, seconds = _timed(converge, problem, **ENGINE)
            engine_s = min(engine_s, seconds)
            repeats.append((again.status, int(again.trajectory.extra["steps"])))
    sel, steps = np.asarray(out.selected), int(out.trajectory.extra["steps"])
    calls, spent = [], 0.0
    while len(calls) < ORACLE_MIN_ROUNDS or spent < ORACLE_BUDGET_S:
        fast, seconds = _timed(att_svm, keys, sel)
        calls.append(seconds)
        spent += seconds
    reference, reference_s = _timed(att_svm, keys, sel, method="reference")
    _, authors_s = _timed(authors_protocol, problem)
    return {
        "seed": seed,
        "draws": draws,
        "top_feasible": bool(feasible),
        "status": out.status,
        "reason": out.reason,
        "one_minus_cos": float(out.one_minus_cos),
        "selects_top_score": bool(np.array_equal(sel, problem.scores.argmax(-1).numpy())),
        "evals": int(out.trajectory.evals),
        "steps": steps,
        "repeats_agree": all(r == (out.status, steps) for r in repeats),
        "repeats": repeats,
        "engine_failures": [str(f) for f in watched.failures],
        "engine_s": engine_s,
        "oracle_s": statistics.median(calls),
        "oracle_status": fast.status,
        "oracle_solver": fast.solver,
        "reference_s": reference_s,
        "reference_status": reference.status,
        "authors_s": authors_s,
    }


def fit(sizes, seconds) -> dict:
    """Least squares log t = a + b log x: b, its standard error, and b over the upper half."""
    x, y = np.log(np.asarray(sizes, float)), np.log(np.asarray(seconds, float))
    A = np.stack([np.ones_like(x), x], axis=1)
    (a, b), *_ = np.linalg.lstsq(A, y, rcond=None)
    resid = y - A @ np.array([a, b])
    dof = len(x) - 2
    se = math.sqrt(resid @ resid / dof / np.sum((x - x.mean()) ** 2)) if dof > 0 else math.nan
    # The upper half (sizes ≥ the median size): the asymptotic growth, fixed overheads aside.
    upper = x >= np.median(x)
    b_upper = float(np.polyfit(x[upper], y[upper], 1)[0]) if upper.sum() >= 2 else math.nan
    return {"a": float(a), "b": float(b), "se": float(se), "b_upper": b_upper}


def _size_of(axis: str, value: int) -> tuple[int, int, int]:
    sizes = dict(BASE) | {axis: value}
    return sizes["n"], sizes["T"], sizes["d"]


def _warm_up() -> None:
    """Load the compiled kernels, cvxpy and torch's autograd before anything is timed (the
    first call of each costs ~0.1–1 s, which would land on the first point)."""
    problem = random_problem(1000)
    out = converge(problem, **ENGINE)
    att_svm(problem.keys.numpy(), out.selected, method="reference")
    authors_protocol(problem, steps=10)


def measure() -> dict:
    t_start = time.perf_counter()
    _warm_up()
    points: dict[tuple[int, int, int], dict] = {}
    todo = list(dict.fromkeys(_size_of(ax, v) for ax, values in SWEEPS.items() for v in values))
    for k, (n, T, d) in enumerate(todo, 1):
        runs = [run_instance(n, T, d, seed) for seed in range(SEEDS)]
        point = {"n": n, "T": T, "d": d, "runs": runs}
        for m in METHODS:
            point[f"{m}_s"] = statistics.median(r[f"{m}_s"] for r in runs)
        point["speedup"] = point["authors_s"] / point["engine_s"]
        point["min_speedup"] = min(r["authors_s"] / r["engine_s"] for r in runs)
        point["statuses"] = {s: sum(r["status"] == s for r in runs) for s in STATUSES}
        point["top_feasible"] = sum(r["top_feasible"] for r in runs)
        points[(n, T, d)] = point
        print(
            f"[{k:2d}/{len(todo)}] n={n:3d} T={T:2d} d={d:3d}  "
            f"engine {1e3 * point['engine_s']:8.1f} ms  oracle {1e3 * point['oracle_s']:6.2f} ms"
            f"  reference {1e3 * point['reference_s']:6.1f} ms  "
            f"authors {point['authors_s']:5.2f} s  x{point['speedup']:6.1f}  "
            f"{_status_text(point)}  ({time.perf_counter() - t_start:.0f} s)",
            flush=True,
        )
    sweeps = {}
    for axis, values in SWEEPS.items():
        rows = [points[_size_of(axis, v)] for v in values]
        sweeps[axis] = {
            "sizes": list(values),
            "fits": {m: fit(values, [r[f"{m}_s"] for r in rows]) for m in METHODS},
        }
    return {
        "command": COMMAND,
        "provenance": _provenance(),
        "base": BASE,
        "seeds": SEEDS,
        "engine": ENGINE,
        "authors_steps": AUTHORS_STEPS,
        "target_speedup": TARGET_SPEEDUP,
        "sweeps": sweeps,
        "points": list(points.values()),
        "findings": _findings(points.values()),
        "total_seconds": time.perf_counter() - t_start,
    }


def _status_text(point: dict) -> str:
    text = ", ".join(f"{c} {s}" for s, c in point["statuses"].items() if c)
    return f"{text}; top-score SVM feasible {point['top_feasible']}/{len(point['runs'])}"


def _findings(points) -> list[dict]:
    """Per run: not converged, slower than the authors' protocol on its own instance, or a
    repeat that traced another path; per point: a median speed-up below the issue's target."""
    found = []
    for p in points:
        where = {"n": p["n"], "T": p["T"], "d": p["d"]}
        for r in p["runs"]:
            kinds = []
            if r["status"] != "converged":
                kinds.append(r["status"])
            if r["engine_s"] >= r["authors_s"]:
                kinds.append("engine slower than the authors' protocol")
            if not r["repeats_agree"]:
                kinds.append(f"repeats differ {r['repeats']}")
            if kinds:
                found.append(
                    where
                    | {
                        "kind": "; ".join(kinds),
                        "seed": r["seed"],
                        "reason": r["reason"],
                        "steps": r["steps"],
                        "engine_s": r["engine_s"],
                        "authors_s": r["authors_s"],
                    }
                )
        if p["speedup"] < TARGET_SPEEDUP:
            found.append(
                where
                | {
                    "kind": f"median speed-up below {TARGET_SPEEDUP:g}x",
                    "speedup": p["speedup"],
                    "engine_s": p["engine_s"],
                    "authors_s": p["authors_s"],
                }
            )
    return found


def _ms(seconds: float) -> str:
    return f"{1e3 * seconds:.3g}" if seconds < 0.1 else f"{1e3 * seconds:.0f}"


def _provenance() -> dict:
    """The commit measured and the engine files changed on top of it (the curve is a property
    of the working tree, which may hold uncommitted engine work)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True)
        return done.stdout.rstrip() if done.returncode == 0 else ""

    changed = git("status", "--porcelain", "--", "models")
    # Porcelain lines are "XY path": keep the path.
    return {
        "commit": git("rev-parse", "HEAD"),
        "models_changed": [ln[3:] for ln in changed.splitlines()],
    }


def markdown(data: dict) -> str:
    lines = [
        "# Cost curve (issue 11)",
        "",
        f"One-factor sweeps around n={BASE['n']}, T={BASE['T']}, d={BASE['d']}; "
        f"{data['seeds']} seeded instances per point (Gaussian keys, scores uniform(−1, 1), "
        "logistic loss), median time per point; fitted log t = a + b·log(size). "
        f"Engine: `converge(problem, target={ENGINE['target']:g})`, the whole certified "
        "decision. Oracle: `att_svm` on the engine's selection (fast path; reference = "
        f"LP + cvxpy). Authors: their protocol, {AUTHORS_STEPS} steps of normalised SGD by "
        "torch autograd, timed in full on every instance. Speed-up = authors / engine, in "
        "the same run (min: the worst single instance). "
        f"Total {data['total_seconds']:.0f} s. Command: `{data['command']}`. "
        f"Commit {data['provenance']['commit'][:10] or '?'}"
        + (
            " with uncommitted changes to " + ", ".join(data["provenance"]["models_changed"])
            if data["provenance"]["models_changed"]
            else ""
        )
        + ".",
        "",
        "## Fitted exponents b (± standard error; upper half of the sizes alone)",
        "",
        "| sweep | range | " + " | ".join(LABELS[m] for m in METHODS) + " |",
        "|---|---|" + "---|" * len(METHODS),
    ]
    for axis, sweep in data["sweeps"].items():
        cells = [
            f"{f['b']:.2f} ± {f['se']:.2f} (upper {f['b_upper']:.2f})"
            for f in (sweep["fits"][m] for m in METHODS)
        ]
        rng = f"{min(sweep['sizes'])}–{max(sweep['sizes'])}"
        lines.append(f"| {axis} | {rng} | " + " | ".join(cells) + " |")
    lines += [
        "",
        "## Points (medians over seeds)",
        "",
        "| n | T | d | engine ms | steps | evals | oracle ms | reference ms | authors ms "
        "| speed-up (min) | engine statuses | top-score SVM feasible |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in data["points"]:
        runs = p["runs"]
        lines.append(
            f"| {p['n']} | {p['T']} | {p['d']} | {_ms(p['engine_s'])} "
            f"| {statistics.median(r['steps'] for r in runs):.0f} "
            f"| {statistics.median(r['evals'] for r in runs):.0f} "
            f"| {_ms(p['oracle_s'])} | {_ms(p['reference_s'])} | {_ms(p['authors_s'])} "
            f"| {p['speedup']:.1f} ({p['min_speedup']:.1f}) "
            f"| {', '.join(f'{c} {s}' for s, c in p['statuses'].items() if c)} "
            f"| {p['top_feasible']}/{len(runs)} |"
        )
    lines += ["", "## Findings", ""]
    if not data["findings"]:
        lines.append("None: every run converged, every point at or above the target.")
    for f in data["findings"]:
        where = f"n={f['n']} T={f['T']} d={f['d']}"
        if "seed" in f:
            lines.append(
                f"- {f['kind']} at {where} seed {f['seed']} ({f['steps']} steps, engine "
                f"{_ms(f['engine_s'])} ms, authors {_ms(f['authors_s'])} ms): {f['reason']}"
            )
        else:
            lines.append(
                f"- {f['kind']} at {where}: ×{f['speedup']:.1f} (engine {_ms(f['engine_s'])} "
                f"ms, authors {_ms(f['authors_s'])} ms)"
            )
    return "\n".join(lines) + "\n"


def draw(data: dict) -> Path:
    """Three log-log panels (n, T, d): a line per method, its fitted slope in the legend;
    points where some engine run did not converge are ringed in red."""
    fig, axes = figures.new(ncols=3, width=5.2, height=4.6)
    by_size = {(p["n"], p["T"], p["d"]): p for p in data["points"]}
    for ax, (axis, sweep) in zip(axes[0], data["sweeps"].items(), strict=True):
        rows = [by_size[_size_of(axis, v)] for v in sweep["sizes"]]
        for m in METHODS:
            b = sweep["fits"][m]["b"]
            ax.loglog(
                sweep["sizes"],
                [r[f"{m}_s"] for r in rows],
                marker=MARKERS[m],
                ls="--" if m == "reference" else "-",
                ms=4,
                label=f"{LABELS[m]}  b={b:.2f}",
            )
        odd = [
            (v, r["engine_s"])
            for v, r in zip(sweep["sizes"], rows, strict=True)
            if r["statuses"]["converged"] < len(r["runs"])
        ]
        if odd:
            ax.scatter(
                *zip(*odd, strict=True),
                s=90,
                facecolors="none",
                edgecolors="tab:red",
                label="some run not converged",
            )
        others = ", ".join(f"{k}={v}" for k, v in BASE.items() if k != axis)
        ax.set_xlabel(f"{axis}  ({others})")
        ax.set_ylabel("seconds (median over seeds)")
        # The swept sizes as plain ticks: a log axis over 1.5 decades labels its minor ticks
        # in 2×10⁰ form, which overprint one another.
        ax.set_xticks(sweep["sizes"], [str(v) for v in sweep["sizes"]], fontsize=7)
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.grid(True, which="major", alpha=0.3)
        # Below the panel: inside, it covered the oracle's line at the small sizes.
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2)
    fig.suptitle("Cost curve: engine, oracle and the authors' protocol (issue 11)")
    return figures.save(fig, FIGURE)


@pytest.fixture(scope="module")
def curve() -> dict:
    """Measure once, write the report before any assertion can fail."""
    data = measure()
    data["figure"] = str(draw(data))
    OUT_JSON.parent.mkdir(exist_ok=True)
    OUT_JSON.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    OUT_MD.write_text(markdown(data))
    print("\n" + markdown(data))
    return data


def test_every_engine_run_named_its_status(curve):
    bad = [
        (p["n"], p["T"], p["d"], r["seed"], r["status"])
        for p in curve["points"]
        for r in p["runs"]
        if r["status"] not in STATUSES or not r["reason"]
    ]
    assert not bad, f"engine runs without a named status: {bad}"


def test_engine_beats_authors_at_every_point(curve):
    slower = [(p["n"], p["T"], p["d"], round(p["speedup"], 2)) for p in curve["points"]]
    slower = [s for s in slower if s[3] <= 1.0]
    assert not slower, f"engine no faster than the authors' protocol at {slower}"


def test_fast_oracle_beats_reference_at_every_point(curve):
    slower = [
        (p["n"], p["T"], p["d"], round(p["reference_s"] / p["oracle_s"], 2))
        for p in curve["points"]
        if p["oracle_s"] >= p["reference_s"]
    ]
    assert not slower, f"fast oracle no faster than its reference at {slower}"


def test_oracle_paths_agree(curve):
    """The fast path and the reference answer the same status on every instance timed."""
    differ = [
        (p["n"], p["T"], p["d"], r["seed"], r["oracle_status"], r["reference_status"])
        for p in curve["points"]
        for r in p["runs"]
        if r["oracle_status"] != r["reference_status"]
    ]
    assert not differ, f"fast and reference oracle disagree: {differ}"
