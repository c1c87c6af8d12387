"""The memory cap (theorems.framework.memory, ATTN_MEMORY_LIMIT): an example that allocates
without bound is inconclusive for memory and the run writes its report, where without the cap
the kernel's OOM killer ended the run with no report (mutant M08: 23 GB)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from models.numerics import failures
from theorems.framework import memory

resource = pytest.importorskip("resource")

pytest_plugins = ["pytester"]


@pytest.mark.parametrize(
    "text, size",
    [("8G", 8 * 2**30), ("512M", 512 * 2**20), ("1.5G", int(1.5 * 2**30)), ("8GiB", 8 * 2**30),
     ("1073741824", 2**30), ("0", None), ("off", None), ("none", None)],
)  # fmt: skip
def test_sizes(text, size):
    assert memory.parse(text) == size


@pytest.mark.parametrize("text", ["lots", "8X", "-1G", ""])
def test_a_bad_size_says_what_it_expected(text):
    with pytest.raises(ValueError, match="ATTN_MEMORY_LIMIT.*8G or 512M"):
        memory.parse(text)


def test_out_of_memory_is_a_failure_of_the_machinery_never_a_claims_own():
    assert failures.from_exception(MemoryError()).key == "memory: out of memory"
    torch_says = RuntimeError(
        "[enforce fail at alloc_cpu.cpp:121] DefaultCPUAllocator: can't allocate memory: "
        "you tried to allocate 80000000000 bytes"
    )
    assert failures.from_exception(torch_says).key == "memory: out of memory"
    assert failures.from_exception(RuntimeError("a bug")) is None
    assert failures.from_exception(AssertionError("out of memory")) is None


CAPPED = """
import numpy as np, resource, torch
from models.numerics import failures
from theorems.framework import memory
print(memory.cap(memory.parse("1G")) == 2**30, resource.getrlimit(resource.RLIMIT_DATA)[0] == 2**30)
memory.cap(memory.parse("4G"))  # never raised
print(resource.getrlimit(resource.RLIMIT_DATA)[0] == 2**30)
for allocate in (lambda: np.ones(2**28), lambda: torch.ones(2**28, dtype=torch.float64)):
    try:
        allocate()  # 2 GiB
        print("allocated")
    except Exception as exc:
        print(failures.from_exception(exc).key)
print(np.ones(2**20).sum() == 2**20)  # small allocations still work
"""


def test_the_cap_refuses_what_numpy_and_torch_allocate_above_it():
    done = subprocess.run([sys.executable, "-c", CAPPED], capture_output=True, text=True,
                          env={**os.environ, "ATTN_MEMORY_LIMIT": "0"}, check=False)  # fmt: skip
    assert done.stdout.split("\n") == [
        "True True",
        "True",
        "memory: out of memory",
        "memory: out of memory",
        "True",
        "",
    ], done.stderr


GREEDY = """
import numpy as np
from hypothesis import given, strategies as st
from theorems import evidence

@C("T-GREEDY", examples=5)
@given(k=st.integers(0, 3))
def test_greedy(k):
    evidence.instance({"k": k})
    grown = np.ones(2**28 + k)  # 2 GiB: above a 1 GiB cap
    assert grown.sum() > 0

@C("T-MODEST", examples=5)
@given(k=st.integers(0, 3))
def test_modest(k):
    assert np.ones(2**16 + k).sum() > 0
"""


def test_a_claim_past_the_cap_is_inconclusive_for_memory_and_the_report_is_written(
    pytester, monkeypatch
):
    import repo_copy

    monkeypatch.setenv("PYTHONPATH", repo_copy.REPO_ROOT.as_posix())
    for var in ("CI", "ATTN_CLAIMS_REPORT", "ATTN_HYPOTHESIS_PROFILE", "PYTEST_XDIST_WORKER"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("ATTN_MEMORY_LIMIT", "1G")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_claims=repo_copy.CLAIM_HELPER + GREEDY)
    result = pytester.runpytest_subprocess(
        "-p", "theorems.framework.plugin", "-p", "no:cacheprovider", "-n", "2",
        "--rootdir", str(pytester.path), "-W", "ignore::DeprecationWarning",
    )  # fmt: skip
    report = json.loads((pytester.path / "reports" / "claims.json").read_text())
    claims = {c["id"]: c for c in report["claims"]}
    assert claims["T-GREEDY"]["verdict"] == "inconclusive", result.stdout.str()
    assert "memory: out of memory" in claims["T-GREEDY"]["inconclusive"]
    assert claims["T-MODEST"]["verdict"] == "holds"


def test_a_bad_cap_is_a_usage_error(pytester, monkeypatch):
    import repo_copy

    monkeypatch.setenv("PYTHONPATH", repo_copy.REPO_ROOT.as_posix())
    monkeypatch.setenv("ATTN_MEMORY_LIMIT", "lots")
    pytester.makeini("[pytest]\n")
    pytester.makepyfile(test_claims=repo_copy.CLAIM_HELPER + GREEDY)
    result = pytester.runpytest_subprocess("-p", "theorems.framework.plugin",
                                           "--rootdir", str(pytester.path))  # fmt: skip
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ATTN_MEMORY_LIMIT='lots': expected a size such as 8G*"])
