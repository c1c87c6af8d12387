"""A pytest plugin that makes every solver fail, for the fault-injection test.

Load it into a claims run with ``-p tests.fault_injection``. From configuration on:

- cvxpy: ``Problem.solve`` raises ``cvxpy.error.SolverError`` (Clarabel, SCS, OSQP alike);
- scipy: ``nnls`` raises ``RuntimeError`` (what scipy raises at its iteration limit);
- scipy: ``linprog`` reports status 4, "numerical difficulties", with no point.

Module-level aliases (``from scipy.optimize import nnls``) are patched too, in every module
of models/, strategies/ and theorems/ once collection has imported them. Each injected fault
is counted against the claim whose test was running; the counts go to the JSON file named by
``ATTN_FAULTS_OUT`` ({claim id: faults}), so the test can tell the claims that touched a
failing solver from those that did not.
"""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

import pytest

FAULTS_ENV = "ATTN_FAULTS_OUT"
_COUNTS: Counter[str] = Counter()
_CURRENT: list[str] = []
_ORIGINAL: dict[str, object] = {}


def _count() -> None:
    _COUNTS[_CURRENT[-1] if _CURRENT else "<outside a claim>"] += 1


def _failing_solve(self, *args, **kwargs):
    import cvxpy

    _count()
    raise cvxpy.error.SolverError("injected fault: the solver failed")


def _failing_nnls(*args, **kwargs):
    _count()
    raise RuntimeError("injected fault: nnls reached its iteration limit")


def _failing_linprog(*args, **kwargs):
    from scipy.optimize import OptimizeResult

    _count()
    return OptimizeResult(
        x=None,
        fun=None,
        status=4,
        success=False,
        message="injected fault: numerical difficulties encountered",
        nit=0,
    )


def _patch_aliases() -> None:
    """Replace `nnls`/`linprog` bound by name in our own modules."""
    replacements = {
        _ORIGINAL["nnls"]: _failing_nnls,
        _ORIGINAL["linprog"]: _failing_linprog,
    }
    for name, module in list(sys.modules.items()):
        if module is None or not name.startswith(("models", "strategies", "theorems", "claims")):
            continue
        for attr in ("nnls", "linprog"):
            value = getattr(module, attr, None)
            if value is not None and value in replacements:
                setattr(module, attr, replacements[value])


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    import cvxpy
    import scipy.optimize

    _ORIGINAL["nnls"] = scipy.optimize.nnls
    _ORIGINAL["linprog"] = scipy.optimize.linprog
    cvxpy.Problem.solve = _failing_solve
    scipy.optimize.nnls = _failing_nnls
    scipy.optimize.linprog = _failing_linprog
    _patch_aliases()


def pytest_collection_finish(session: pytest.Session) -> None:
    _patch_aliases()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item):
    marker = item.get_closest_marker("claim")
    _CURRENT.append(marker.args[0] if marker and marker.args else item.nodeid)
    try:
        return (yield)
    finally:
        _CURRENT.pop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(FAULTS_ENV)
    if not out:
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    path = f"{out}.{worker}" if worker != "main" else out
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(dict(_COUNTS), fh, indent=1, sort_keys=True)
