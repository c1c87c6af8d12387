"""How the claims read: the measures of issue 22, from the source alone (no import).

A claim is a function decorated with ``@claim`` in a paper's ``theorems/<paper>/claims_*.py``.
Its lines run from its first decorator to its last line. Its metadata are the lines of the
``@claim(...)`` decorator and of its docstring (the statement). The measures:

- ``lines``: the median claim length; ``metadata``: metadata lines over all claim lines;
- ``long_docstrings``: claims whose docstring has more than 6 lines;
- ``recordings``: claim bodies that record their instance by hand (the framework records it);
- ``figure_calls``: claim bodies that draw a figure, directly or through a helper of their
  module (figures belong to the report: theorems.framework.figures.draws);
- ``strategies``: Hypothesis strategies defined in a paper's package (they live in
  ``strategies/``): ``@st.composite`` functions and functions that return a strategy;
- ``no_assert``: claims whose body has no ``assert`` of its own.

``python tests/claim_shape.py`` prints them, with the offenders.
"""

from __future__ import annotations

import ast
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAPERS = ("maxmargin", "embeddings", "tfsvm", "mirror", "ntp", "ntplinear")
MAX_DOCSTRING = 6
_RECORD = {"record", "_record", "record_corpus"}
_STRATEGY_METHODS = {"map", "flatmap", "filter"}


@dataclass
class Claim:
    file: str
    name: str
    lines: int
    metadata: int
    docstring: int
    records: bool
    figures: bool
    asserts: int


@dataclass
class Shape:
    claims: list[Claim] = field(default_factory=list)
    strategies: list[str] = field(default_factory=list)

    @property
    def median_lines(self) -> float:
        return statistics.median(c.lines for c in self.claims)

    @property
    def metadata_share(self) -> float:
        return sum(c.metadata for c in self.claims) / sum(c.lines for c in self.claims)

    def offenders(self, what: str) -> list[str]:
        test = {
            "long_docstrings": lambda c: c.docstring > MAX_DOCSTRING,
            "recordings": lambda c: c.records,
            "figure_calls": lambda c: c.figures,
            "no_assert": lambda c: c.asserts == 0,
        }[what]
        return [f"{c.file}::{c.name}" for c in self.claims if test(c)]


def _is_claim(decorator: ast.expr) -> bool:
    func = decorator.func if isinstance(decorator, ast.Call) else decorator
    return getattr(func, "id", getattr(func, "attr", "")) in ("claim", "conjecture")


def _called(node: ast.AST) -> set[str]:
    out = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call):
            f = sub.func
            out.add(f.id if isinstance(f, ast.Name) else getattr(f, "attr", ""))
    return out


def _names(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _figure_names(tree: ast.Module) -> set[str]:
    """Names in a module that draw: what it imports from figures or plots modules, and (by
    closure) its own functions that use them."""
    drawing = {"figures", "plots", "plt"}
    for node in tree.body:
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and ("plots" in node.module or node.module.endswith("figures"))
        ):
            drawing |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):  # `from theorems.tfsvm import plots_wgd`
            drawing |= {
                a.asname or a.name for a in node.names if "plots" in a.name or a.name == "figures"
            }
        if isinstance(node, ast.Import):
            drawing |= {
                a.asname or a.name for a in node.names if "plots" in a.name or "figures" in a.name
            }
    functions = {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}
    changed = True
    while changed:
        changed = False
        for name, fn in functions.items():
            if name not in drawing and _names(fn) & drawing:
                drawing.add(name)
                changed = True
    return drawing


def _strategy_builders(tree: ast.Module) -> set[str]:
    """The names a module imports from the suite's strategies package."""
    return {
        a.asname or a.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("strategies")
        for a in node.names
    }


def _returns_strategy(fn: ast.FunctionDef, builders: set[str]) -> bool:
    for node in ast.walk(fn):
        if isinstance(node, ast.Return) and node.value is not None:
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Attribute) and (
                    (isinstance(sub.value, ast.Name) and sub.value.id == "st")
                    or sub.attr in _STRATEGY_METHODS
                ):
                    return True
            value = node.value
            if isinstance(value, ast.Call) and getattr(value.func, "id", "") in builders:
                return True
    return False


def _is_composite(fn: ast.FunctionDef) -> bool:
    return any(getattr(d, "attr", getattr(d, "id", "")) == "composite" for d in fn.decorator_list)


def measure(root: Path = ROOT) -> Shape:
    shape = Shape()
    for paper in PAPERS:
        folder = root / "theorems" / paper
        for path in sorted(folder.glob("*.py")):
            source = path.read_text(encoding="utf-8")
            tree = ast.parse(source)
            rel = path.relative_to(root).as_posix()
            builders = _strategy_builders(tree)
            for node in tree.body:
                if isinstance(node, ast.FunctionDef) and not any(
                    _is_claim(d) for d in node.decorator_list
                ):
                    if _is_composite(node) or _returns_strategy(node, builders):
                        shape.strategies.append(f"{rel}::{node.name}")
            if not path.name.startswith("claims_"):
                continue
            drawing = _figure_names(tree)
            for node in ast.walk(tree):
                if not isinstance(node, ast.FunctionDef):
                    continue
                decorators = [d for d in node.decorator_list if _is_claim(d)]
                if not decorators:
                    continue
                start = min(d.lineno for d in node.decorator_list)
                meta = sum(d.end_lineno - d.lineno + 1 for d in decorators)
                doc = 0
                body = node.body
                first = body[0]
                if (
                    isinstance(first, ast.Expr)
                    and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str)
                ):
                    doc = first.end_lineno - first.lineno + 1
                    body = body[1:]
                calls = set().union(*(_called(b) for b in body)) if body else set()
                used = set().union(*(_names(b) for b in body)) if body else set()
                records = bool(calls & _RECORD) or any(
                    isinstance(sub, ast.Call)
                    and isinstance(sub.func, ast.Attribute)
                    and sub.func.attr == "instance"
                    and getattr(sub.func.value, "id", "") == "evidence"
                    for b in body
                    for sub in ast.walk(b)
                )
                shape.claims.append(
                    Claim(
                        file=rel,
                        name=node.name,
                        lines=node.end_lineno - start + 1,
                        metadata=meta + doc,
                        docstring=doc,
                        records=records,
                        figures=bool((calls | used) & drawing),
                        asserts=sum(isinstance(sub, ast.Assert) for sub in ast.walk(node)),
                    )
                )
    return shape


def main() -> int:
    shape = measure()
    print(f"claims: {len(shape.claims)}")
    print(f"median claim lines: {shape.median_lines}")
    print(f"metadata share: {shape.metadata_share:.1%}")
    for what in ("long_docstrings", "recordings", "figure_calls", "no_assert"):
        found = shape.offenders(what)
        print(f"{what}: {len(found)}")
        for line in found[:40]:
            print(f"  {line}")
    print(f"strategies in paper packages: {len(shape.strategies)}")
    for line in shape.strategies:
        print(f"  {line}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
