"""The framework is apart from the claims and has no import cycle; a claim's header can leave
its paper and its note to the module and the docstring."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from theorems.framework import registry

REPO_ROOT = Path(__file__).resolve().parent.parent
FRAMEWORK = REPO_ROOT / "theorems" / "framework"
#: The order of theorems/framework/__init__.py's list: each module imports only those above it.
ORDER = (
    "memo", "instances", "profiles", "hypothesis_compat", "memory", "evidence", "verdicts",
    "replay", "twins",
    "shrink", "rows", "registry", "claim_index",
    "records", "lock", "session", "progress", "plugin", "explain", "tolerances", "cli",
    "figures",
)  # fmt: skip


def _framework_imports(module: str) -> set[str]:
    """The framework modules `module` imports, at its top or inside a function."""
    tree = ast.parse((FRAMEWORK / f"{module}.py").read_text(encoding="utf-8"))
    # Imports for type annotations only (`if TYPE_CHECKING:`) run nowhere: not a dependency.
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == "theorems.framework":  # its modules, or the package's REPO_ROOT
                found |= {alias.name for alias in node.names if not alias.name.isupper()}
            elif node.module.startswith("theorems.framework."):
                found.add(node.module.split(".")[2])
            elif node.module.startswith("theorems"):
                found.add(node.module)  # anything else of theorems: not allowed
        elif isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("theorems")}
    return found


def test_every_framework_module_is_in_the_documented_order():
    modules = {p.stem for p in FRAMEWORK.glob("*.py")} - {"__init__"}
    assert modules == set(ORDER)
    doc = (FRAMEWORK / "__init__.py").read_text(encoding="utf-8")
    listed = [line.split("`")[1] for line in doc.splitlines() if line.startswith("- `")]
    assert tuple(listed) == ORDER


@pytest.mark.parametrize("module", ORDER)
def test_a_framework_module_imports_only_modules_above_it(module):
    above = set(ORDER[: ORDER.index(module)])
    imported = _framework_imports(module)
    assert imported <= above, f"{module} imports {sorted(imported - above)}"


def test_importing_the_framework_imports_no_claims():
    code = textwrap.dedent(
        f"""
        import sys
        for name in {ORDER!r}:
            __import__("theorems.framework." + name)
        claims = sorted(m for m in sys.modules if m.startswith(
            ("theorems.maxmargin", "theorems.embeddings", "theorems.conjectures")))
        print(claims)
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_framework_paths_point_at_the_repository(monkeypatch):
    from theorems.framework import REPO_ROOT as root
    from theorems.framework import figures, replay

    monkeypatch.delenv(figures.FIGURES_ENV, raising=False)
    monkeypatch.delenv(replay.STORE_ENV, raising=False)
    assert root == REPO_ROOT
    assert figures.figures_dir() == REPO_ROOT / "reports" / "figures"
    assert replay.store_dir() == REPO_ROOT / "theorems" / "counterexamples"


def _claim_in(tmp_path, body: str, name: str = "claims_tmp"):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    with registry.isolated() as found:
        namespace = {"__name__": name}
        exec(compile(path.read_text(), str(path), "exec"), namespace)
        return dict(found)


def test_paper_and_note_come_from_the_module_and_the_docstring(tmp_path):
    found = _claim_in(
        tmp_path,
        '''
        from theorems import claim
        PAPER = "1234.56789"

        @claim(id="T-LAYOUT-1", kind="lemma", statement="s", provenance="[D]")
        def test_x():
            """What it checks.

            Why a reader should care:
            two lines of it.

            And a second paragraph."""
        ''',
    )
    info = found["T-LAYOUT-1"]
    assert info.paper == "1234.56789"
    assert info.note == "Why a reader should care: two lines of it.\n\nAnd a second paragraph."


def test_an_explicit_paper_and_note_win(tmp_path):
    found = _claim_in(
        tmp_path,
        '''
        from theorems import claim
        PAPER = "1234.56789"

        @claim(id="T-LAYOUT-2", paper="2306.13596", kind="lemma", statement="s",
               provenance="[D]", note="given")
        def test_x():
            """What it checks.

            Not the note."""
        ''',
    )
    assert (found["T-LAYOUT-2"].paper, found["T-LAYOUT-2"].note) == ("2306.13596", "given")


def test_a_claim_without_a_paper_anywhere_is_refused(tmp_path):
    with pytest.raises(registry.ClaimRegistrationError, match="PAPER"):
        _claim_in(
            tmp_path,
            """
            from theorems import claim

            @claim(id="T-LAYOUT-3", kind="lemma", statement="s", provenance="[D]")
            def test_x():
                pass
            """,
        )


def test_the_per_paper_packages_give_their_claims_their_paper():
    from theorems.framework.cli import import_claim_modules

    assert import_claim_modules(REPO_ROOT) == []
    by_package = {}
    for info in registry.REGISTRY.values():
        package = info.module.rsplit(".", 1)[0]
        by_package.setdefault(package, set()).add(info.paper)
    assert by_package["theorems.maxmargin"] == {"2306.13596"}
    assert by_package["theorems.embeddings"] == {"2505.17282"}
