"""A claim's draws depend on its own source and the run's seed, not on the literals of the rest
of the suite (issue 21, item 5; docs/reliability.md, "Draws that do not depend on the suite's
literals").

Hypothesis 6.170 offers, at 5 % of the numbers it draws, a literal harvested from the local
modules in sys.modules, so a new module of constants used to move every claim's derandomized
draws. theorems.framework.hypothesis_compat switches the harvest off; this test runs two
probe claims under the ci profile in a copy of the suite, adds a claims module of 100 float
literals (and some ints and strings) within the range the probes draw from, runs them again,
and compares every value the probes were called with (generation and shrinking) and both
verdicts. It fails without the adapter: on commit 2b9531d, 70 of DRAW-PROBE-HOLDS' 100
examples changed (the first at the 9th: y = 0.746281773, one of the new literals, instead of
1.0), and DRAW-PROBE-REFUTED took 149 calls instead of 121 to reach the same shrunk
counterexample; the verdicts stayed, by luck of these two probes.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import repo_copy

PROBE = (
    repo_copy.CLAIM_HELPER
    + """
import os

from hypothesis import strategies as st

from theorems import given


def _log(*values):
    with open(os.environ["ATTN_DRAW_LOG"], "a", encoding="utf-8") as f:
        f.write(repr(values) + "\\n")


@C("DRAW-PROBE-HOLDS", examples=100)
@given(x=st.floats(0, 3), y=st.floats(-1, 1), n=st.integers(2, 500))
def test_probe_holds(x, y, n):
    _log("holds", x, y, n)


@C("DRAW-PROBE-REFUTED", examples=100)
@given(xs=st.lists(st.floats(0, 3), min_size=1, max_size=5), n=st.integers(2, 500))
def test_probe_refuted(xs, n):
    _log("refuted", xs, n)
    assert sum(xs) < 4 or n < 250
"""
)

# Floats in [0, 3] (half of them also in [-1, 1]) that no strategy would draw by itself, ints
# outside -100..100 (Hypothesis keeps only those), strings; written on import to a marker
# file, so that the test knows the module was loaded (collected as a claims module).
LITERALS = "\n".join(
    [
        "import os",
        "open(os.environ['ATTN_LITERALS_SEEN'], 'w').close()",
        *(f"x{i} = {0.0123456789 + i * 0.0271828183:.10f}" for i in range(100)),
        *(f"n{i} = {137 + 7 * i}" for i in range(20)),
        *(f"s{i} = 'attn-literal-{i}'" for i in range(5)),
    ]
)


def _run(root: Path, step: str) -> tuple[list[str], dict[str, str]]:
    """Run the copy's claims under ci; the probes' logged calls and the claims' verdicts."""
    out = root.parent / step
    out.mkdir()
    done = repo_copy.run(
        root,
        "-m",
        "pytest",
        "theorems/",
        "-q",
        "-p",
        "no:randomly",
        ATTN_HYPOTHESIS_PROFILE="ci",
        ATTN_DRAW_LOG=str(out / "draws.log"),
        ATTN_LITERALS_SEEN=str(out / "literals-seen"),
        ATTN_CLAIMS_REPORT=str(out / "claims.json"),
        ATTN_COUNTEREXAMPLES=str(out / "counterexamples"),  # nothing replayed across runs
        ATTN_NO_GATE="1",
    )
    assert done.returncode == 1, done.stdout[-3000:]  # DRAW-PROBE-REFUTED fails
    claims = json.loads((out / "claims.json").read_text(encoding="utf-8"))["claims"]
    verdicts = {c["id"]: c["verdict"] for c in claims}
    return (out / "draws.log").read_text(encoding="utf-8").splitlines(), verdicts


@pytest.mark.slow  # two pytest runs of a copy of the suite: about 30 s on 2 idle cores
def test_a_new_module_of_literals_moves_no_draw(tmp_path):
    root = repo_copy.make(tmp_path / "repo", {"claims_drawprobe.py": PROBE})
    draws, verdicts = _run(root, "before")
    assert verdicts == {"DRAW-PROBE-HOLDS": "holds", "DRAW-PROBE-REFUTED": "refuted"}
    assert not (tmp_path / "before" / "literals-seen").exists()

    (root / "theorems" / "claims_zz_literals.py").write_text(LITERALS + "\n", encoding="utf-8")
    draws_after, verdicts_after = _run(root, "after")
    assert (tmp_path / "after" / "literals-seen").exists(), "the literals were not imported"
    assert verdicts_after == verdicts
    assert len(draws) > 200  # 100 generated examples of each probe, and the shrinking
    moved = [i for i, (a, b) in enumerate(zip(draws, draws_after, strict=False)) if a != b]
    assert draws_after == draws, (
        f"{len(draws)} calls before, {len(draws_after)} after; first differing: "
        + ", ".join(f"#{i}: {draws[i]} -> {draws_after[i]}" for i in moved[:3])
    )
