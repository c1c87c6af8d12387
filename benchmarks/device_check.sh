#!/usr/bin/env bash
# The GPU checks of the suite as one short script, for a session lent a CUDA machine (the
# device tool) or anyone with a GPU: the device tests (tests/test_device.py, which skip
# without CUDA), the GPU-against-CPU benchmark (benchmarks/test_device_speedup.py) and the
# one-step bound swept to d = 1e5 (benchmarks/test_onestep_large_d.py, ~2 min on a GPU).
# Needs torch with CUDA, pytest and pytest-benchmark only (no cvxpy). Logs and
# reports/benchmark_device.json are copied to $OUT when it is set. Not yet run on a GPU (no
# session has been lent one); budget a few minutes, the CPU baseline at d = 16384 included.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${OUT:-reports}"
mkdir -p "$out" reports
export PYTHONUNBUFFERED=1
# The interpreter whose torch is checked: $PYTHON if set (a venv's python), else python3.
py="${PYTHON:-python3}"
"$py" - <<'PY' || exit 1
import torch
assert torch.cuda.is_available(), "torch sees no CUDA device: nothing to check here"
print("torch", torch.__version__, "on", torch.cuda.get_device_name(0))
PY
rc=0
"$py" -m pytest tests/test_device.py -rs -p no:cacheprovider --no-gate 2>&1 \
    | tee "$out/device_tests.log" || rc=1
"$py" -m pytest benchmarks/test_device_speedup.py -s -p no:cacheprovider --no-gate 2>&1 \
    | tee "$out/device_benchmark.log" || rc=1
# Lemma 4.1's one-step bound swept to d = 1e5 (the nightly sweep, here on the GPU).
ATTN_DEVICE=cuda ATTN_NIGHTLY=1 "$py" -m pytest benchmarks/test_onestep_large_d.py -s \
    -p no:cacheprovider --no-gate 2>&1 | tee "$out/onestep_large_d.log" || rc=1
[ "$out" = reports ] || cp reports/onestep_large_d.json reports/figures/onestep_large_d.png \
    "$out/" || rc=1
[ "$out" = reports ] || cp reports/benchmark_device.json "$out/" 2>/dev/null || rc=1
# The large rung's batched transient against the CPU engine one by one (issue 23; the CPU
# baseline is CPU_SAMPLE instances of seconds each: budget ~3 min), then its unit tests on cuda.
# The engine's oracle imports cvxpy, which the lent image lacks: carry its wheels (cvxpy,
# osqp, clarabel, scs, qdldl; the device tool's README says how) or these tests skip/fail.
ATTN_DEVICE=cuda "$py" -m pytest benchmarks/test_batched_speedup.py tests/test_batched.py -s -rs \
    -p no:cacheprovider --no-gate 2>&1 | tee "$out/batched_benchmark.log" || rc=1
[ "$out" = reports ] || cp reports/benchmark_batched.json "$out/" 2>/dev/null || rc=1
exit "$rc"
