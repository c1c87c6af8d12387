"""A paper's claim rows and findings: what a reader of the claim's code never has to look at.

A claim's code is its statement (the test's docstring, the paper's sentence) and its check
(the body's assertion). Everything else the framework needs lives with the paper, in two
files of its package:

- ``claims.toml``: one table per claim id, the claim's data row (kind, provenance, what is
  expected, its variants, its example budget, its twins, its figures), in the spirit of
  PyTorch's OpInfo entries: the suite's bookkeeping, in one place per paper, checked when the
  claim registers. ``@claim("MM-THM-G")`` reads the row of that id.
- ``findings.md``: one ``## ID`` section per claim that has something to report beyond its
  statement (what a refutation looked like, how a threshold was calibrated, where a reading
  came from). The report links the section and ``explain`` prints it.

Both are found next to the claim's module, or in the nearest package above it (up to the
folder of ``theorems``).
"""

from __future__ import annotations

import functools
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROWS_FILE = "claims.toml"
FINDINGS_FILE = "findings.md"

#: The fields a row may set (registry.claim's keyword arguments, statement and note aside: the
#: statement is the test's docstring and the note its findings section).
FIELDS = frozenset(
    {
        "paper",
        "kind",
        "provenance",
        "expected",
        "examples",
        "max_inconclusive",
        "min_premise",
        "figures",
        "runs_only_with",
        "variant",
        "twins",
        "tests",
    }
)

_SECTION = re.compile(r"^## +(\S+)\s*$", re.M)


class RowError(ValueError):
    """A claims.toml or findings.md that cannot be read, or a row that is missing or wrong."""


def _nearest(start: Path, name: str) -> Path | None:
    """``name`` in ``start`` or the nearest folder above it, stopping below the repository
    (a folder without __init__.py ends the walk: the package's top)."""
    folder = start
    while True:
        candidate = folder / name
        if candidate.is_file():
            return candidate
        if not (folder / "__init__.py").is_file() or folder.parent == folder:
            return None
        folder = folder.parent


@functools.cache
def _rows(path: Path) -> dict[str, dict[str, Any]]:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise RowError(f"{path}: {exc}") from None
    for claim_id, row in data.items():
        if not isinstance(row, dict):
            raise RowError(f"{path}: [{claim_id}] must be a table of fields")
        unknown = sorted(set(row) - FIELDS)
        if unknown:
            raise RowError(
                f"{path}: [{claim_id}] has unknown fields {unknown}; a row sets "
                f"{', '.join(sorted(FIELDS))}"
            )
    return data


def rows_file(module_file: str | Path) -> Path | None:
    """The claims.toml that serves a claim module, or None."""
    return _nearest(Path(module_file).resolve().parent, ROWS_FILE)


def row(module_file: str | Path, claim_id: str) -> dict[str, Any]:
    """The data row of ``claim_id`` for a claim defined in ``module_file``."""
    path = rows_file(module_file)
    if path is None:
        raise RowError(
            f"{claim_id}: no {ROWS_FILE} next to {module_file} or in a package above it; give "
            "the claim's fields in the decorator (kind=..., provenance=...) or add a row"
        )
    found = _rows(path).get(claim_id)
    if found is None:
        raise RowError(f"{claim_id}: {path} has no row [{claim_id}]")
    return dict(found)


@functools.cache
def _sections(path: Path) -> dict[str, str]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise RowError(f"{path}: {exc}") from None
    heads = list(_SECTION.finditer(text))
    ends = [after.start() for after in heads[1:]] + [len(text)] * bool(heads)  # none: {}
    return {
        head.group(1): text[head.end() : end].strip() for head, end in zip(heads, ends, strict=True)
    }


def findings_file(module_file: str | Path) -> Path | None:
    """The findings.md that serves a claim module, or None."""
    return _nearest(Path(module_file).resolve().parent, FINDINGS_FILE)


def findings(module_file: str | Path, claim_id: str) -> str:
    """The findings section of ``claim_id`` (its text, paragraphs kept), or ""."""
    path = findings_file(module_file)
    if path is None:
        return ""
    return _sections(path).get(claim_id, "")


def findings_anchor(module_file: str | Path, claim_id: str) -> str | None:
    """Where a report links the findings of ``claim_id``: the file and the section's anchor
    (GitHub's: the heading lower-cased), or None if it has no section."""
    path = findings_file(module_file)
    if path is None or claim_id not in _sections(path):
        return None
    return f"{path}#{claim_id.lower()}"


def relative_anchor(link: str, root: Path) -> str:
    """A findings link "<path>#<anchor>" with its path relative to ``root`` where it lies
    inside it (as the index, claims.json and `explain` show it), else as it is."""
    path, _, anchor = link.partition("#")
    try:
        path = Path(path).resolve().relative_to(Path(root).resolve()).as_posix()
    except ValueError:
        pass
    return f"{path}#{anchor}" if anchor else path


def statement_of(doc: str | None) -> str:
    """A claim's statement from its test's docstring: the whole docstring, on one line."""
    return " ".join((doc or "").split())


def clear_cache() -> None:
    """Forget the files read (a test that rewrites them, an index rebuild)."""
    _rows.cache_clear()
    _sections.cache_clear()
