"""The memory cap: an example that allocates without bound is refused, not OOM-killed.

Without a cap, a claim whose example grows without bound (measured: with the ATT-SVM's
constraint index set off by one, mutant M08, EMB-FLOW-LOGT grew to 23 GB) ends in the
kernel's OOM killer: the process dies, the run leaves no report, and the machine's other
work may die with it. With the cap, the allocation fails inside the example (MemoryError,
or torch's "can't allocate memory"), ``models.numerics.failures.from_exception`` names it, and the
example is inconclusive ("memory: out of memory"), never a counterexample; the run goes on
and writes its report.

    ATTN_MEMORY_LIMIT=8G     the default: 8 GiB of data per process (each xdist worker)
    ATTN_MEMORY_LIMIT=512M   another cap (K, M, G, T suffixes; plain bytes without one)
    ATTN_MEMORY_LIMIT=0      no cap (also "off", "none")

The cap is the soft RLIMIT_DATA of the process (Linux counts the heap and every private
writable mapping: what numpy and torch allocate), set where the claims plugin configures a
process; it only ever lowers the soft limit. A claims worker of this suite peaks near 0.7 GB
(VmData of the embedding flow claims), so 8 GiB is about 10x that: the cap changes no verdict
of a claim that works. Where `resource` does not exist (Windows) nothing is capped.
"""

from __future__ import annotations

import os
import re

MEMORY_ENV = "ATTN_MEMORY_LIMIT"
DEFAULT = "8G"
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def parse(text: str) -> int | None:
    """Bytes for "8G", "512M", "1073741824"; None for "0", "off", "none" (no cap);
    ValueError for anything else."""
    t = text.strip().upper().removesuffix("B").removesuffix("I")  # 8G, 8GB, 8GiB
    if t in ("0", "OFF", "NONE", "NO"):
        return None
    m = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([KMGT]?)", t)
    if m is None:
        raise ValueError(
            f"{MEMORY_ENV}={text!r}: expected a size such as 8G or 512M, or 0 for no cap"
        )
    size = int(float(m[1]) * _UNITS[m[2]])
    if size <= 0:
        return None
    return size


def limit_from_env() -> int | None:
    return parse(os.environ.get(MEMORY_ENV, "").strip() or DEFAULT)


def cap(limit: int | None) -> int | None:
    """Lower this process's soft RLIMIT_DATA to ``limit`` bytes (never raise it); return the
    soft limit in force afterwards (None: unlimited, or no `resource` here)."""
    try:
        import resource
    except ImportError:  # Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if limit is not None:
        new = limit if hard == resource.RLIM_INFINITY else min(limit, hard)
        if soft == resource.RLIM_INFINITY or new < soft:
            resource.setrlimit(resource.RLIMIT_DATA, (new, hard))
            soft = new
    return None if soft == resource.RLIM_INFINITY else soft
