"""The numerics matrix: the same claims, the same draws, under numerical environments that a
user's machine may differ in; every verdict must be the same in each (issue 21).

    python .ci/numerics_matrix.py [--out DIR] [--env NAME ...] [-- PYTEST ARGS]

Each environment runs `pytest theorems/` under the `numerics` profile: every claim's saved
counterexample and pinned @examples, then its first generated examples (derandomized: the
same draws in every environment), with a copy of the counterexample store of its own (a run
never writes into the checkout's). `--profile replay` (CI's) runs the saved counterexamples
and pinned @examples of the Hypothesis claims alone. The environments (docs/reliability.md,
"The numerics matrix"):

- default: this machine as it is;
- one-thread-no-jit: one BLAS/OpenMP thread and numba's JIT off (models.flows.kernels then runs
  its pure-Python twins), as on a machine without numba's compiler or with other threads;
- baseline-simd: torch's portable kernels (ATEN_CPU_CAPABILITY=default instead of AVX2 or
  AVX-512), MKL's conditional-reproducibility path (MKL_CBWR=COMPATIBLE), numba compiling
  for a generic CPU, and, on x86-64, numpy without its AVX2/FMA3/AVX-512 loops: the
  instruction sets in which two machines' float64 sums and products differ.

Exit 1, naming each claim, when a verdict differs between environments.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

#: numpy's dispatched x86-64 loops that are not in its baseline (numpy 2.x): disabling them
#: makes numpy take its baseline (SSE) loops, as on an older or another vendor's CPU.
X86_DISPATCH = "AVX512F AVX512CD AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL AVX512_SPR AVX2 FMA3"


def environments(cache: Path) -> dict[str, dict[str, str]]:
    simd = {
        "ATEN_CPU_CAPABILITY": "default",
        "MKL_CBWR": "COMPATIBLE",
        "NUMBA_CPU_NAME": "generic",
        # a generic-CPU compile must not reuse (or overwrite) the host-CPU kernels' cache
        "NUMBA_CACHE_DIR": str(cache / "numba-generic"),
    }
    if platform.machine().lower() in ("x86_64", "amd64"):
        simd["NPY_DISABLE_CPU_FEATURES"] = X86_DISPATCH
    threads = {k: "1" for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    return {
        "default": {},
        "one-thread-no-jit": {"NUMBA_DISABLE_JIT": "1", **threads},
        "baseline-simd": simd,
    }


def probe(env: dict[str, str]) -> str:
    """What the environment really runs: torch's kernel level and numba's JIT (public APIs)."""
    code = (
        "import numba, torch; "
        "print(f'torch {torch.backends.cpu.get_cpu_capability()}, '"
        'f\'numba JIT {"off" if numba.config.DISABLE_JIT else "on"}\')'
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    return (out.stdout or out.stderr).strip().splitlines()[-1] if out.stdout or out.stderr else "?"


def run(
    name: str, extra: dict[str, str], out: Path, profile: str, pytest_args: list[str]
) -> dict[str, str]:
    store = out / f"counterexamples-{name}"
    shutil.copytree(ROOT / "theorems" / "counterexamples", store)
    report = out / f"{name}.json"
    env = {**os.environ, **extra, "ATTN_HYPOTHESIS_PROFILE": profile}
    env.pop("ATTN_HYPOTHESIS_SEED", None)
    cmd = [
        sys.executable, "-m", "pytest", "theorems/", "-q", "-p", "no:randomly", "--no-gate",
        "--claims-report", str(report), "--counterexamples", str(store), *pytest_args,
    ]  # fmt: skip
    settings = " ".join(f"{k}={v}" for k, v in extra.items()) or "(as the machine is)"
    print(f"==== numerics matrix: {name}: {settings}; {probe(env)}", flush=True)
    t0 = time.monotonic()
    done = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    print(
        f"     {name}: pytest exit {done.returncode} in {time.monotonic() - t0:.0f} s", flush=True
    )
    if not report.exists():
        print(done.stdout[-4000:], done.stderr[-4000:], sep="\n")
        raise SystemExit(f"numerics matrix: {name} wrote no report")
    claims = json.loads(report.read_text())["claims"]
    return {c["id"]: f"{c['verdict']} ({c.get('reason', '')})" for c in claims}


def saved_counterexamples() -> set[str]:
    """The claims with a saved counterexample in the checkout's store."""
    return {path.stem for path in (ROOT / "theorems" / "counterexamples").glob("*.json")}


def verdicts_of(report: Path) -> dict[str, str]:
    """A ci report of this machine as it is (README command 1's): the default column of the
    replay matrix."""
    claims = json.loads(report.read_text())["claims"]
    return {c["id"]: f"{c['verdict']} ({report.name})" for c in claims}


def compare(results: dict[str, dict[str, str]], only: set[str] | None = None) -> list[str]:
    """One line per claim whose verdict differs between environments (or is missing in one),
    among `only` where given."""
    ids = sorted(only if only is not None else set().union(*(r.keys() for r in results.values())))
    lines = []
    for cid in ids:
        seen = {name: r.get(cid, "not run (missing)") for name, r in results.items()}
        verdicts = {v.split(" ", 1)[0] for v in seen.values()}
        if len(verdicts) > 1:
            lines.append(f"{cid}:\n" + "\n".join(f"    {n}: {v}" for n, v in seen.items()))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="folder for the reports (default: a temporary one)")
    parser.add_argument("--env", action="append", help="run only these environments")
    parser.add_argument(
        "--profile", choices=("numerics", "replay"), default="numerics",
        help="numerics: explicit and first generated examples; replay: explicit ones alone",
    )  # fmt: skip
    parser.add_argument(
        "--baseline",
        help="with --profile replay: a ci report of this machine as it is (README command 1's "
        "reports/claims.json) stands in for the default environment, on the claims whose saved "
        "counterexample it replayed",
    )
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to pytest")
    args = parser.parse_args(argv)
    out = Path(args.out) if args.out else Path(tempfile.mkdtemp(prefix="attn-numerics-"))
    out.mkdir(parents=True, exist_ok=True)
    envs = environments(out)
    unknown = set(args.env or ()) - set(envs)
    if unknown:
        parser.error(f"unknown environment(s) {sorted(unknown)}; choose from {sorted(envs)}")
    chosen = {k: v for k, v in envs.items() if not args.env or k in args.env}
    only = None
    if args.baseline:
        if args.profile != "replay":
            parser.error("--baseline compares saved counterexamples: use it with --profile replay")
        chosen.pop("default", None)
    results = {
        name: run(name, extra, out, args.profile, args.pytest_args)
        for name, extra in chosen.items()
    }
    if args.baseline:
        # Every saved counterexample that the replay runs decided (the claims that are not
        # Hypothesis tests are skipped there) must give the baseline's verdict.
        only = saved_counterexamples() & set().union(*(r.keys() for r in results.values()))
        results = {"default": verdicts_of(Path(args.baseline)), **results}
        chosen = {"default": {}, **chosen}
    differ = compare(results, only)
    n = len(only) if only is not None else len(set().union(*(r.keys() for r in results.values())))
    if differ:
        print(f"numerics matrix: {len(differ)} of {n} claims differ between environments:")
        print("\n".join(differ))
        return 1
    print(
        f"numerics matrix ({args.profile} profile): {n} claims, the same verdict in all "
        f"{len(chosen)} environments ({', '.join(chosen)}); reports in {out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
