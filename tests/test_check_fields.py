"""`check` answers with the same fields in every branch, each documented in docs/instances.md.

A user reads an answer by its field names: a computed answer, the answer for an instance
float64 does not represent, and the answer past `--timeout` must name the same fields (the
null ones null), and every field must be the one docs/instances.md describes. The answers are
computed in this process, by the predictors `check` calls (theorems.framework.cli.PREDICTORS),
so that a mutant of the answer builders is seen (mutmut's trampolines do not reach a child
`python -m theorems check`): in a seeded mutmut sample, renamed fields (`W_norm` → `w_norm`,
`corr_v`, `face_nuc`'s `status`, `corr_lp` of the imprecise branch) survived every other test.
"""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

from tests.mutmut_aware import cache_key, cached
from tests.test_check_shared import CROSS_SHARED, PROMPT_SHARED
from tests.test_cli import EMBEDDING, PROMPT
from tests.test_cli_bad_input import CROSS
from tests.test_cli_ntp import I1, OFFICIAL_CYCLIC
from theorems.framework import cli
from theorems.framework.instances import load_instance

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC = (REPO_ROOT / "docs" / "instances.md").read_text(encoding="utf-8")
#: Every field name the page gives: `name`, or "name" inside a `{"a", "b"}` span.
DOCUMENTED = {
    name
    for span in re.findall(r"`([^`]+)`", DOC)  # a span may wrap onto the next line
    for name in re.findall(r'^([A-Za-z_]\w*)$|"([A-Za-z_]\w*)"', span.strip())
    for name in name
    if name
}

JOINT = {
    "model": "cross", "train": "joint", "p": 2,
    "X": [[[-2.7, 1.2], [1.4, 2.1], [1.3, -0.1]], [[0.4, -2.2], [-1.1, -0.4], [0.9, 0.1]]],
    "Z": [[-2.7, 1.2], [0.4, -2.2]], "y": [1, -1],
}  # fmt: skip
LINEAR = {
    "model": "ntp-linear",
    "H": [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    "P": [[0.5, 0.5, 0.0, 0.0], [0.8, 0.2, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]],
    "pi": [1 / 3, 1 / 3, 1 / 3],
}
INSTANCES = {
    "prompt": PROMPT,
    "embedding": EMBEDDING,
    "cross W": CROSS,
    "cross KQ": {**CROSS, "param": "KQ"},
    "cross W, p": {**CROSS, "p": 2},
    "joint": JOINT,
    "ntp": I1,
    "ntp-linear": LINEAR,
    # the engine's general (shared-mass) limit: status "shared" and its block, the cross W
    # training's status, and NTP's `flow` where the sequences have one length (I1's do not)
    "prompt shared": PROMPT_SHARED,
    "cross W shared": CROSS_SHARED,
    "ntp one length": OFFICIAL_CYCLIC,
}
#: Fields whose inner keys are the same in every branch (each SVM's, the face fit's).
NESTED = ("svm", "svm_global", "svm_selected", "svm_fro", "svm_nuc", "svm_lp", "v_svm",
          "face_nuc", "ntp_svm", "graph_svm")  # fmt: skip

_ANSWERS: dict[str, tuple[dict, dict]] = {}


def answers(kind: str, tmp_path: Path) -> tuple[dict, dict]:
    """(the computed answer, the answer past --timeout) for INSTANCES[kind], as check gives
    them, in this process."""

    def compute():
        path = tmp_path / "instance.json"
        path.write_text(json.dumps(INSTANCES[kind]), encoding="utf-8")
        model, fields = load_instance(path)
        module_name, function, names = cli.PREDICTORS[model]
        module = importlib.import_module(module_name)
        computed = getattr(module, function)(**{n: fields[n] for n in names if n in fields})
        timed_out = getattr(module, cli.INCONCLUSIVE_ANSWER)(model, fields, "budget: test", 0.0)
        return computed, timed_out

    return cached(cache_key(kind), compute, _ANSWERS)  # no cache under mutmut (cache_key)


@pytest.mark.parametrize("kind", list(INSTANCES))
def test_an_answer_past_the_budget_names_the_computed_answers_fields(kind, tmp_path):
    computed, timed_out = answers(kind, tmp_path)
    # The same fields in the same order; an answer with no status of its own (cross) gains one
    # ("status", "reason": what stopped it).
    said = ("status", "reason")
    assert [k for k in timed_out if k not in said] == [k for k in computed if k not in said], kind
    for name in NESTED:
        if isinstance(computed.get(name), dict) and isinstance(timed_out.get(name), dict):
            # The same keys, but for the reason a block gives when it has no solution.
            assert set(timed_out[name]) - {"reason"} == set(computed[name]) - {"reason"}, (
                kind,
                name,
            )
    assert timed_out["status"] == "inconclusive" and timed_out["reason"] == "budget: test"


def _keys(value, path: str = ""):
    """(key, where) of every key of an answer, at any depth, lists of blocks included."""
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key, f"{path}.{key}"
            yield from _keys(inner, f"{path}.{key}")
    elif isinstance(value, list):
        for inner in value:
            yield from _keys(inner, f"{path}[]")


@pytest.mark.parametrize("kind", list(INSTANCES))
def test_every_field_of_an_answer_is_documented(kind, tmp_path):
    computed, _ = answers(kind, tmp_path)
    missing = sorted({where for key, where in _keys(computed) if key not in DOCUMENTED})
    assert not missing, f"{kind}: fields not named in docs/instances.md: {missing}"


def _leaves(answer: dict, prefix: str = ""):
    """(dotted name, value) of every leaf of an answer, nested blocks walked."""
    for key, value in answer.items():
        if isinstance(value, dict):
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


@pytest.mark.parametrize("kind", list(INSTANCES))
def test_an_answer_past_the_budget_says_so_in_every_block_and_keeps_the_datas_facts(kind, tmp_path):
    computed, timed_out = answers(kind, tmp_path)
    for fact in ("model", "param", "p", "train"):  # read from the instance, never computed
        if fact in computed:
            assert timed_out.get(fact) == computed[fact], (kind, fact)
    said = dict(_leaves(computed))
    for name, value in _leaves(timed_out):
        last = name.rsplit(".", 1)[-1]
        if last == "status":
            assert value == "inconclusive", (kind, name, value)
        elif last == "reason":
            assert value == "budget: test", (kind, name, value)
        elif last != "seconds" and value is not None:
            # What the answer gives without computing is a fact of the instance (its model,
            # parametrisation, p): the same as in the computed answer.
            assert name in said and said[name] == value, (kind, name, value, said.get(name))


@pytest.mark.parametrize("kind", list(INSTANCES))
def test_every_status_an_answer_gives_is_a_documented_word(kind, tmp_path):
    computed, _ = answers(kind, tmp_path)
    statuses = {v for name, v in _leaves(computed) if name.rsplit(".", 1)[-1] == "status"}
    assert statuses, kind
    undocumented = sorted(str(s) for s in statuses if s not in DOCUMENTED)
    assert not undocumented, f"{kind}: statuses not named in docs/instances.md: {undocumented}"


@pytest.mark.parametrize("kind", ["cross W", "cross KQ", "cross W, p", "joint"])
def test_every_training_method_is_one_the_page_names(kind, tmp_path):
    computed, _ = answers(kind, tmp_path)
    methods = [v for name, v in _leaves(computed) if name.endswith("method")]
    assert methods, kind
    for method in methods:
        named = re.sub(r"ℓ\d+(\.\d+)? ", "ℓp ", method)  # "ℓ2 mirror descent": "ℓp …"
        assert f'`"{named}"`' in DOC, (kind, method)


@pytest.mark.parametrize(
    ("kind", "reached"),
    [
        ("prompt shared", lambda a: a["status"] == "shared" and isinstance(a["shared"], dict)),
        ("cross W shared", lambda a: a["training"]["status"] == "shared"),
        ("ntp one length", lambda a: a["flow"]["kind"] == "shared" and a["flow"]["W_dir"]),
    ],
)
def test_the_shared_limits_fields_are_among_those_checked(kind, reached, tmp_path):
    """The instances added for the general limit reach it, so the tests above meet its status
    word and every key of its blocks (else they would pass without ever seeing them)."""
    computed, _ = answers(kind, tmp_path)
    assert reached(computed), kind
