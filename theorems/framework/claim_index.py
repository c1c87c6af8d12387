"""The claim index, theorems/claims.index.json: what the registry says of every claim of the
checkout, so that `python -m theorems list` and `explain` answer without importing the claim
modules (and with them torch, cvxpy and the strategies).

The index holds every field of each claim's `ClaimInfo` (its file relative to the checkout),
in registration order, and the sha256 of each claim source it was built from: every
claims_*.py and test_*.py under theorems/ (the modules `registry.import_claim_modules`
imports), the other Python files of their packages (a package's `PAPER`, the helpers its
claims import) and the papers' claims.toml and findings.md, theorems/framework/ aside. It is
used only while the same sources are on disk with the same hashes; otherwise the CLI imports
the claims as before and says once on stderr how to rebuild the index: `python -m theorems
index` (`lock --update` rebuilds it too). `ATTN_NO_INDEX=1` always imports. `python -m
theorems index --check` (and tests/test_claim_index.py) fails while the committed index
differs from a fresh build.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import os
import sys
from collections.abc import Iterable
from pathlib import Path

from theorems.framework import REPO_ROOT, rows
from theorems.framework.registry import ClaimInfo

#: Where the index lives, relative to the checkout.
INDEX_PATH = Path("theorems") / "claims.index.json"
#: Set (to anything but "" or "0") to ignore the index and import the claim modules.
NO_INDEX_ENV = "ATTN_NO_INDEX"
#: The command that rebuilds the index (every hint names it).
REBUILD = "python -m theorems index"
FORMAT = 1
_CLAIM_MODULES = ("claims_*.py", "test_*.py")  # as registry.import_claim_modules
#: What a claim's registration reads: Python, and its paper's rows and findings
#: (theorems.framework.rows).
_SOURCES = ("*.py", rows.ROWS_FILE, rows.FINDINGS_FILE)

_noted = False  # the stale note is said once per process


def sources(root: Path = REPO_ROOT) -> dict[str, str]:
    """{path relative to `root` (posix): sha256 of its bytes} of every claim source."""
    folder = root / "theorems"
    found = {}
    paths = [p for pattern in _SOURCES for p in folder.rglob(pattern)]
    for path in sorted(paths):
        rel = path.relative_to(folder)
        if "framework" in rel.parts or "__pycache__" in rel.parts:
            continue
        claim_module = any(fnmatch.fnmatch(rel.name, p) for p in _CLAIM_MODULES)
        if len(rel.parts) == 1 and not claim_module:  # theorems/__init__.py, __main__, conftest
            continue
        found[path.relative_to(root).as_posix()] = hashlib.sha256(path.read_bytes()).hexdigest()
    return found


def _entry(info: ClaimInfo, root: Path) -> dict:
    entry = dataclasses.asdict(info)
    entry["file"] = Path(info.file).resolve().relative_to(root.resolve()).as_posix()
    if info.findings:  # "<path>#<anchor>": relative to the checkout, as "file"
        entry["findings"] = rows.relative_anchor(info.findings, root)
    return entry


def _mine(info: ClaimInfo, root: Path) -> bool:
    try:
        Path(info.file).resolve().relative_to((root / "theorems").resolve())
    except (ValueError, OSError):
        return False
    return True


def own(claims: Iterable[ClaimInfo], root: Path = REPO_ROOT) -> list[ClaimInfo]:
    """The claims the index holds: those defined under root/theorems/."""
    return [c for c in claims if _mine(c, root)]


def render(claims: Iterable[ClaimInfo], root: Path = REPO_ROOT) -> str:
    """The index's text for `claims` (those defined under root/theorems/) and the sources
    on disk now."""
    doc = {
        "format": FORMAT,
        "built_by": REBUILD,
        "sources": sources(root),
        "claims": [_entry(c, root) for c in own(claims, root)],
    }
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def collect(root: Path = REPO_ROOT) -> tuple[list[ClaimInfo], list[tuple[str, str]]]:
    """Import every claim module of `root` (as `list` does without an index): the registered
    claims and the modules that failed to import."""
    from theorems.framework import profiles, registry

    if profiles.current_profile() not in profiles.PROFILES:
        profiles.load_profile()
    failed = registry.import_claim_modules(root)
    return list(registry.REGISTRY.values()), failed


def _differences(indexed: dict[str, str], now: dict[str, str]) -> list[str]:
    changed = [p for p in now if p in indexed and indexed[p] != now[p]]
    new = [p for p in now if p not in indexed]
    gone = [p for p in indexed if p not in now]
    return [
        *(f"{p} changed" for p in changed),
        *(f"{p} is new" for p in new),
        *(f"{p} is gone" for p in gone),
    ]


def _summary(differences: list[str]) -> str:
    more = len(differences) - 1
    return differences[0] + (f", and {more} more" if more > 0 else "")


def read(root: Path = REPO_ROOT) -> tuple[dict[str, ClaimInfo] | None, str]:
    """The indexed claims by id, or None with why the index cannot be used."""
    path = root / INDEX_PATH
    shown = INDEX_PATH.as_posix()
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None, f"no claim index at {shown}"
    except (OSError, ValueError) as exc:
        return None, f"the claim index {shown} is unreadable ({exc})"
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        return None, f"the claim index {shown} is of another format"
    differences = _differences(doc.get("sources") or {}, sources(root))
    if differences:
        return None, f"the claim index {shown} is stale ({_summary(differences)})"
    claims = {}
    try:
        for entry in doc["claims"]:
            fields = {k: tuple(v) if isinstance(v, list) else v for k, v in entry.items()}
            fields["file"] = str(root / fields["file"])
            if fields.get("findings"):
                fields["findings"] = str(root / fields["findings"])
            info = ClaimInfo(**fields)
            claims[info.id] = info
    except (KeyError, TypeError) as exc:
        return None, f"the claim index {shown} is malformed ({exc!r})"
    return claims, ""


def fresh(root: Path = REPO_ROOT) -> dict[str, ClaimInfo] | None:
    """The indexed claims when the index matches the claim sources on disk; otherwise None,
    after saying once on stderr why and how to rebuild it (nothing when ATTN_NO_INDEX asks
    for the import)."""
    global _noted
    if os.environ.get(NO_INDEX_ENV, "") not in ("", "0"):
        return None
    claims, why = read(root)
    if claims is None and not _noted:
        _noted = True
        print(
            f"note: {why}; importing the claim modules instead (slower): rebuild it with "
            f"`{REBUILD}`",
            file=sys.stderr,
        )
    return claims


def write(claims: Iterable[ClaimInfo], root: Path = REPO_ROOT) -> bool:
    """Write the index of `claims`; True when its text changed."""
    path = root / INDEX_PATH
    text = render(claims, root)
    try:
        old = path.read_text(encoding="utf-8")
    except OSError:
        old = None
    if old == text:
        return False
    path.write_text(text, encoding="utf-8")
    return True


def check(claims: Iterable[ClaimInfo], root: Path = REPO_ROOT) -> str | None:
    """None when the index on disk is what `render(claims)` gives; else what differs, and the
    command that rebuilds it."""
    shown = INDEX_PATH.as_posix()
    claims = list(claims)
    try:
        old = (root / INDEX_PATH).read_text(encoding="utf-8")
    except OSError:
        return f"no claim index at {shown}: build it with `{REBUILD}` and commit it"
    if old == render(claims, root):
        return None
    try:
        doc = json.loads(old)
        indexed = {e["id"]: e for e in doc["claims"]}
        differences = _differences(doc["sources"], sources(root))
    except (ValueError, KeyError, TypeError):
        differences, indexed = ["it is malformed"], {}
    if not differences:  # same sources, other claims: a helper outside them changed
        now = {c.id: _entry(c, root) for c in own(claims, root)}
        ids = sorted(i for i in now.keys() | indexed.keys() if now.get(i) != indexed.get(i))
        differences = [f"claim {i} differs" for i in ids] or ["its layout differs"]
    return (
        f"{shown} is out of date ({_summary(differences)}): rebuild it with `{REBUILD}` "
        "and commit it"
    )
