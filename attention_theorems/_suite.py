"""Where the suite's own modules come from, for a run outside its checkout.

The suite keeps generic top-level names (`theorems`, `models`, `strategies`, `reports`: see
`SUITE_MODULES`) and runs from its checkout. Installed with `pip install -e <checkout>`, this
package knows that checkout (the folder above its own), and `locate` makes it importable by
appending it to `sys.path`: a folder of the caller's that is already on the path comes first,
so the caller's own packages win for the caller's imports. The price of the generic names:
a package of the caller's named like one of ours cannot be imported beside it, in either
order. `locate` says so, naming both paths, instead of letting one silently stand in for the
other.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys
from pathlib import Path

#: The checkout this package belongs to (an editable install runs it from there).
CHECKOUT = Path(__file__).resolve().parent.parent

#: The suite's top-level modules, in the order they are checked.
SUITE_MODULES = ("theorems", "models", "strategies", "reports")

#: A folder holding this is a checkout of the suite (or a copy of one).
_MARK = Path("theorems") / "framework" / "plugin.py"

DOC = 'docs/conjectures.md, "Conjectures in your own repository"'


class SuiteShadowedError(ImportError):
    """The suite's modules cannot be imported as they are: one of them would come from
    somewhere else (a package of the caller's with the same name), or the checkout is not
    where this package was installed from."""


def _found(name: str, *, path_only: bool = False) -> tuple[Path | None, str | None]:
    """(the folder above package `name`, where `name` comes from) as `import name` would
    resolve it now (with `path_only`: as a fresh search of sys.path would, ignoring what is
    imported already); (None, where) for a module that is not a regular package, and (None,
    None) when `name` cannot be imported, or only as a namespace package."""
    try:
        if path_only:
            spec = importlib.machinery.PathFinder.find_spec(name)
        else:
            spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):  # ValueError: in sys.modules without a __spec__
        module = sys.modules.get(name)
        where = getattr(module, "__file__", None)
        return None, (where or repr(module)) if module is not None else None
    if spec is None:
        return None, None
    origin = spec.origin if spec.has_location else None
    if origin and Path(origin).name == "__init__.py":
        return Path(origin).parent.parent, origin
    if origin:
        return None, origin
    # A namespace package (a folder without __init__.py, such as the theorems/counterexamples/
    # the plugin writes where it runs) gives way to a regular package anywhere on the path.
    return None, None


def _is_suite(root: Path | None) -> bool:
    return root is not None and (root / _MARK).is_file()


def _same(a: Path | None, b: Path | None) -> bool:
    return a is not None and b is not None and os.path.realpath(a) == os.path.realpath(b)


def _shadowed(name: str, where: str | None, root: Path, *, ours_first: bool = False) -> str:
    expected = root / name
    if ours_first:
        return (
            f"attention-theorems: your module {name!r} ({where}) is shadowed by the suite's "
            f"{name!r} ({expected}), which this run imported first for its claims: an "
            f"`import {name}` of yours gets the suite's. The suite's top-level modules "
            f"({', '.join(SUITE_MODULES)}) keep those generic names, so they cannot share one "
            f"Python path with yours: keep the claims in a folder of their own (say "
            f"conjectures/, run as `pytest conjectures/claims_x.py`), apart from tests that "
            f"import your {name!r}, or rename yours ({DOC})."
        )
    return (
        f"attention-theorems: `import {name}` would load {where}, not the suite's {expected}: "
        f"a module of yours named {name!r} comes first on sys.path (or was imported first). "
        f"The suite's top-level modules ({', '.join(SUITE_MODULES)}) keep those generic "
        f"names, so they cannot share one Python path with yours: keep the conjecture in a "
        f"folder of its own where your {name!r} is not importable (say conjectures/, run as "
        f"`pytest conjectures/claims_x.py`: `python -m pytest` puts the current folder first "
        f"on sys.path), or rename yours ({DOC})."
    )


def _append(folder: Path) -> None:
    if not any(entry and _same(Path(entry), folder) for entry in sys.path):
        sys.path.append(str(folder))
        importlib.invalidate_caches()


def locate() -> Path:
    """The checkout the suite's modules come from, made importable: `theorems` as it
    resolves now when that is a checkout of the suite (the current folder is one, or
    PYTHONPATH names a copy), else this package's checkout, appended to sys.path. Raises
    SuiteShadowedError, naming both paths, when any of SUITE_MODULES would come from
    elsewhere."""
    root, where = _found("theorems")
    if not _is_suite(root):
        if where is not None:  # a `theorems` of the caller's, first on the path
            raise SuiteShadowedError(_shadowed("theorems", where, CHECKOUT))
        if not _is_suite(CHECKOUT):
            raise SuiteShadowedError(
                f"attention-theorems: installed at {CHECKOUT}, which is not a checkout of the "
                "suite (no theorems/framework/ there): the suite runs from its checkout, so "
                "install it with `pip install -e <checkout>`"
            )
        _append(CHECKOUT)
        root, where = _found("theorems")
        if not _same(root, CHECKOUT):
            raise SuiteShadowedError(_shadowed("theorems", where, CHECKOUT))
    for name in SUITE_MODULES[1:]:
        other, where = _found(name)
        if not _same(other, root):
            raise SuiteShadowedError(_shadowed(name, where, root))
    return root


def shadowed_later(root: Path) -> str | None:
    """After the suite's modules were imported from `root`: the message for a module of
    the caller's that a fresh search of sys.path now finds first (a folder inserted later,
    e.g. by pytest for the caller's tests), but that the suite's shadows; None if none."""
    for name in SUITE_MODULES:
        module = sys.modules.get(name)
        if module is None or not _same(
            Path(getattr(module, "__file__", "") or "/").parent, root / name
        ):
            continue  # not imported, or not ours: `locate` speaks for those
        other, where = _found(name, path_only=True)
        if where is not None and not _same(other, root):
            return _shadowed(name, where, root, ours_first=True)
    return None
