"""A throwaway copy of the suite for tests that run `pytest theorems/` or `python -m theorems`
end to end (the verdict gate, the conjecture walkthrough, xdist on real claims).

The copy holds models/, strategies/, theorems/ without the claim modules (claims_*.py and
test_*.py: their suite is slow, and a test adds the few claims it needs), the report
builder's code, conftest.py and pyproject.toml; never the real verdict lock, claim index,
counterexamples or generated reports.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
_IGNORE = shutil.ignore_patterns(
    "__pycache__",
    "*.pyc",
    "claims_*.py",
    "test_*.py",
    "counterexamples",
    "verdicts.lock",
    "claims.index.json",
)
# Variables of the outer run that must not leak into the copy's runs.
_CLEAR = (
    "CI",
    "PYTEST_XDIST_WORKER",
    "PYTEST_XDIST_WORKER_COUNT",
    "PYTEST_ADDOPTS",
    "ATTN_CLAIMS_REPORT",
    "ATTN_HYPOTHESIS_PROFILE",
    "ATTN_HYPOTHESIS_DB",
    "ATTN_HYPOTHESIS_SEED",
    "ATTN_VERDICT_LOCK",
    "ATTN_NO_GATE",
    "ATTN_COUNTEREXAMPLES",
    "ATTN_FIGURES_DIR",
    "ATTN_DEVICE",
    "ATTN_NO_INDEX",
)


#: The top of every claim module that the framework's own tests write into a pytester session
#: or a repository copy: the module's paper, and C(id, **kw), @claim with test defaults
#: (EXAMPLES may be redefined after it).
CLAIM_HELPER = """
from theorems import claim

PAPER = "2306.13596"
EXAMPLES = 50

def C(id, **kw):
    kw.setdefault("kind", "theorem")
    kw.setdefault("statement", "a statement of " + id)
    kw.setdefault("provenance", "[D]")
    kw.setdefault("examples", EXAMPLES)
    return claim(id=id, **kw)
"""


def make(dest: Path, claims: dict[str, str] | None = None, *, docs: bool = False) -> Path:
    """Copy the suite into `dest` and add `claims` ({file name in theorems/: source})."""
    dest.mkdir(parents=True, exist_ok=True)
    for folder in ("models", "strategies", "theorems"):
        shutil.copytree(REPO_ROOT / folder, dest / folder, ignore=_IGNORE)
    # The root conftest renders the HTML/Markdown report through reports/hook.py: copy the
    # builder's code (never a generated report).
    (dest / "reports").mkdir(exist_ok=True)
    for module in (REPO_ROOT / "reports").glob("*.py"):
        shutil.copy2(module, dest / "reports" / module.name)
    for name in ("conftest.py", "pyproject.toml"):
        shutil.copy2(REPO_ROOT / name, dest / name)
    if docs:
        pycache = shutil.ignore_patterns("__pycache__", "*.pyc")
        shutil.copytree(REPO_ROOT / "docs", dest / "docs", ignore=pycache)
    for name, source in (claims or {}).items():
        (dest / "theorems" / name).write_text(source, encoding="utf-8")
    return dest


def environment(root: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _CLEAR}
    env.update(PYTHONPATH=str(root), COLUMNS="100", PYTHONHASHSEED="0", **extra)
    return env


def run(root: Path, *args: str, timeout: float = 120, **extra: str):
    """`python *args` in the copy; returns the CompletedProcess (stdout and stderr merged)."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=root,
        env=environment(root, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


def shell(root: Path, command: str, timeout: float = 120, **extra: str):
    """A shell command line in the copy (as a reader would type it)."""
    return subprocess.run(
        ["bash", "-c", command],
        cwd=root,
        env=environment(root, **extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )


# A small real claim: the descent lemma (spec maxmargin §2.1) for one input of two tokens,
# where ATT-SVM(opt) has the closed form p^mm = d / ‖d‖², d = k_opt − k_t (no solver: fast).
DESCENT = """
import torch
from hypothesis import strategies as st

from strategies import equal_nonopt_instances
from theorems import claim, evidence, given


@claim(
    id="GATE-DESCENT",
    paper="2306.13596",
    kind="lemma",
    statement="n = 1, T = 2, equal non-optimal scores: <grad L(p), p_mm> < 0 along p_mm.",
    provenance="[D]",
    examples=10,
)
@given(inst=equal_nonopt_instances(n=1, T=2), r=st.floats(0, 3))
def test_descent(inst, r):
    evidence.instance(inst.to_json())
    opt = int(inst.alpha[0])
    d = inst.keys[0, opt] - inst.keys[0, 1 - opt]
    p_mm = d / torch.dot(d, d)
    grad = inst.problem.gradient_scaled(r * p_mm / torch.linalg.vector_norm(p_mm))
    assert float(grad.vec @ p_mm) < 0
"""
