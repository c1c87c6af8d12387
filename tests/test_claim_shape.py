"""The claims read like the papers (issue 22), measured from the source by tests/claim_shape.py:
short claims, statements without their procedure, conclusions asserted in the bodies, no
recording by hand, no figures in bodies, no strategies in the papers' packages."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from claim_shape import MAX_DOCSTRING, measure

SHAPE = measure()

#: Claims that name by hand the instance their failure is about: experiments over fixed
#: seeds that blame their worst run (the framework cannot know which run a mean is about),
#: and claims whose object has no instance schema. Every other claim leaves recording to
#: the framework.
NAMED_BY_HAND = {
    "theorems/tfsvm/claims_kq.py::test_diagonal_l1_most",  # worst of the diagonal runs
    "theorems/tfsvm/claims_kq.py::test_local_converge_kq",  # worst (K, Q) run
    "theorems/tfsvm/claims_svm.py::test_locally_optimal_count_falls_to_one",  # first bad seed
    "theorems/mirror/claims_controls.py::test_naive_joint_md_converges",  # a joint (W, v) problem
    "theorems/embeddings/claims_onestep.py::test_init_event_probability",  # a sweep's grid
}

#: Words of a procedure, not of a paper's statement: how it was checked, on which seeds and
#: grids, where in the spec (the row's provenance says that). A statement about the spec's own
#: recorded numbers, or a step of the paper's algorithm, is still a statement.
PROCEDURE = re.compile(r"\bChecked\b|\bspec §|\bseeds? \d|\bgrid\b|\bwithin the spec's tol")


def test_the_median_claim_is_short():
    assert SHAPE.median_lines <= 16


def test_metadata_is_at_most_a_quarter_of_claim_lines():
    assert SHAPE.metadata_share <= 0.25, f"{SHAPE.metadata_share:.1%}"


def test_no_statement_is_longer_than_six_lines():
    assert SHAPE.offenders("long_docstrings") == [], f"> {MAX_DOCSTRING} lines"


def test_every_claim_asserts_its_conclusion_in_its_body():
    assert SHAPE.offenders("no_assert") == []


def test_no_claim_draws_a_figure():
    assert SHAPE.offenders("figure_calls") == []


def test_no_strategy_lives_in_a_papers_package():
    assert SHAPE.strategies == []


def test_recording_is_left_to_the_framework():
    assert set(SHAPE.offenders("recordings")) <= NAMED_BY_HAND


def test_no_statement_describes_its_procedure():
    found = []
    for claim in SHAPE.claims:
        tree = ast.parse((Path(__file__).resolve().parents[1] / claim.file).read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == claim.name:
                doc = ast.get_docstring(node) or ""
                if PROCEDURE.search(doc):
                    found.append(f"{claim.file}::{claim.name}: {PROCEDURE.search(doc).group()}")
    assert found == []


def test_the_measure_sees_what_it_counts(tmp_path):
    """The measure itself: a claim module with one offender of each kind is counted so."""
    paper = tmp_path / "theorems" / "maxmargin"
    paper.mkdir(parents=True)
    (paper / "claims_x.py").write_text(
        "from theorems import claim, evidence\n"
        "from theorems.maxmargin import plots_x\n"
        "from hypothesis import strategies as st\n\n\n"
        "def drawn():\n    return st.integers()\n\n\n"
        '@claim("MM-X")\n'
        "def test_x(inst):\n"
        '    """One.\n\n    Two.\n    Three.\n    Four.\n    Five.\n    Six.\n    """\n'
        "    evidence.instance(inst.to_json())\n"
        "    plots_x.figure(inst)\n",
        encoding="utf-8",
    )
    shape = measure(tmp_path)
    assert [c.name for c in shape.claims] == ["test_x"]
    for what in ("long_docstrings", "recordings", "figure_calls", "no_assert"):
        assert shape.offenders(what) == ["theorems/maxmargin/claims_x.py::test_x"], what
    assert shape.strategies == ["theorems/maxmargin/claims_x.py::drawn"]
