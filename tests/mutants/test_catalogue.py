"""The mutant catalogue stays in step with models/ (cheap: no mutant is run here).

Every mutant's ``old`` snippet occurs exactly once in its file of the current tree, ``new``
differs from it, the mutated source still compiles, ids are unique, every module of models/
carries a mutant, and there are at least 22 of them. ``tests/mutants/run.py`` runs them.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent


def _load():
    # tests/ is not a package: import the catalogue by path, under a name no other module uses.
    spec = importlib.util.spec_from_file_location("attn_mutant_catalogue", HERE / "catalogue.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


CATALOGUE = _load()
MUTANTS = CATALOGUE.MUTANTS
FIELDS = {"id", "file", "old", "new", "category", "fault"}


def test_at_least_22_mutants_with_unique_ids():
    ids = [m["id"] for m in MUTANTS]
    assert len(ids) >= 22
    assert len(set(ids)) == len(ids), sorted(i for i in ids if ids.count(i) > 1)


def test_every_module_of_models_has_a_mutant():
    covered = {Path(m["file"]).relative_to("models").as_posix() for m in MUTANTS}
    missing = [name for name in CATALOGUE.MODULES if name not in covered]
    assert not missing, f"modules without a mutant: {missing}"
    for name in CATALOGUE.MODULES:
        assert (ROOT / "models" / name).exists(), f"models/{name} is gone: update the catalogue"


@pytest.mark.parametrize("mutant", MUTANTS, ids=[m["id"] for m in MUTANTS])
def test_mutant_applies_once_and_compiles(mutant):
    assert set(mutant) == FIELDS, f"fields: {sorted(set(mutant) ^ FIELDS)}"
    assert all(isinstance(mutant[k], str) and mutant[k].strip() for k in FIELDS)
    assert mutant["file"].startswith("models/")
    assert mutant["new"] != mutant["old"]
    source = (ROOT / mutant["file"]).read_text(encoding="utf-8")
    count = source.count(mutant["old"])
    assert count == 1, f"`old` occurs {count} times in {mutant['file']}: update the snippet"
    compile(source.replace(mutant["old"], mutant["new"]), mutant["file"], "exec")
