"""Unit tests only: under mutmut every test starts from empty caches (tests/mutmut_aware.py).

mutmut forks each mutant's run from a process that has run the unmutated tests, so a cache
filled there (models.problems.embedding's exact pair tables, the claims' ``shared`` runs) would hand
the mutant the unmutated results: in two seeded samples, 8 mutants of
``models.problems.embedding._pair_tables`` survived tests that compare its derivative with autograd
(6 of them are killed with the caches emptied; the other 2 are equivalent).
"""

import pytest

from tests.mutmut_aware import under_mutmut


@pytest.fixture(autouse=True)
def _empty_caches_under_mutmut():
    if under_mutmut():
        from models.problems import embedding
        from theorems.framework import memo

        embedding._PAIR_TABLES.clear()
        memo.clear_all()
    yield
