"""The claim registry: one `ClaimInfo` per executable statement of a paper.

A claim is a pytest test function decorated (outermost) with `@claim(...)`. The decorator
validates and registers the metadata, scales a Hypothesis test's example budget to the active
profile, counts examples through Hypothesis' reassignable `inner_test`, and marks the function
so that `theorems.framework.plugin` turns its outcome into a verdict.

`import_claim_modules` imports every claim module of a checkout (the CLI's `list` and the
plugin's accounting of the claims a partial run did not collect).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import inspect
import os
import re
import sys
import traceback
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import settings

from theorems.framework import REPO_ROOT, evidence, hypothesis_compat, rows, shrink
from theorems.framework import twins as twins_module
from theorems.framework.profiles import run_seed, scaled_examples
from theorems.framework.verdicts import EXPECTED, ID_PATTERN, KINDS, PROVENANCE_TAGS, order_key

_TAG = re.compile(r"\[([^\]]*)\]")

#: ``runs_only_with`` of a claim that runs under the nightly profile only (ClaimInfo).
NIGHTLY_ONLY = "the nightly profile (ATTN_HYPOTHESIS_PROFILE=nightly)"


class ClaimRegistrationError(ValueError):
    """A claim's metadata is invalid, or its id is already taken by another function."""


@dataclass(frozen=True)
class ClaimInfo:
    id: str
    paper: str
    kind: str
    statement: str
    provenance: str
    expected: str
    examples: int
    max_inconclusive: float = 0.2
    # Below this many examples meeting the premise (or the assumptions), the verdict is vacuous.
    min_premise: int = 1
    figures: tuple[str, ...] = ()
    note: str = ""
    # What the claim needs that a run may lack (e.g. data on disk): when set, a run that skips
    # the claim for want of it is reported as not run and leaves its lock line unchecked.
    # NIGHTLY_ONLY: the claim runs under the nightly profile only (the plugin skips it
    # elsewhere before anything is drawn): the large rung's instances take minutes each, so
    # its ``examples`` is its nightly budget, not a ci budget scaled 20-fold (``budget``).
    runs_only_with: str = ""
    # For a reading refuted as read (expected "refuted", not a control): the ids of the
    # narrowest variants of it that hold. The report leads with these pairs.
    variants: tuple[str, ...] = ()
    # The metamorphic twins under which the statement is invariant (theorems.framework.twins):
    # None for every twin of the instance's family.
    twins: tuple[str, ...] | None = None
    # Where the claim is defined; filled by the decorator.
    module: str = ""
    qualname: str = ""
    file: str = ""
    line: int = 0
    # Where the report links the claim's findings (its paper's findings.md#id), if it has any.
    findings: str | None = None
    # What a verdict of the claim is about: "paper" (a statement of the paper, as read) or
    # "calibration" (a number or a reading of our own spec: a threshold, a recorded value).
    tests: str = "paper"

    @property
    def budget(self) -> int:
        """The example budget under the active profile. A nightly-only claim (NIGHTLY_ONLY)
        has no ci budget to scale: its ``examples`` is its nightly budget as it stands."""
        if self.runs_only_with == NIGHTLY_ONLY:
            return self.examples
        return scaled_examples(self.examples)

    @property
    def where(self) -> str:
        return f"{self.module}.{self.qualname} ({self.file}:{self.line})"


REGISTRY: dict[str, ClaimInfo] = {}

#: What a claim tests (its row's ``tests``): the paper's statement, or a number of our spec.
TESTS = ("paper", "calibration")


# --------------------------------------------------------------------------- the decorator

# id -> (file, qualname) of the function that registered it: a second registration from
# the same definition (pytest re-collecting, a module re-imported) replaces the first.
_DEFINED_BY: dict[str, tuple[str, str]] = {}


def _fail(field: str, message: str) -> None:
    raise ClaimRegistrationError(f"claim field {field!r}: {message}")


def _validate_id(id) -> None:
    if not isinstance(id, str) or not ID_PATTERN.match(id):
        _fail(
            "id",
            f"{id!r} must be an upper-case prefix and dash-separated letters/digits, "
            "e.g. 'MM-SVM-MARGIN', 'EMB-THM1' or 'CONJ-MY-GUESS'",
        )


def _validate(
    *,
    id,
    paper,
    kind,
    statement,
    provenance,
    expected,
    examples,
    max_inconclusive,
    min_premise,
    figures,
    note,
    runs_only_with,
    variants,
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    _validate_id(id)
    if paper is not None and (not isinstance(paper, str) or not paper.strip()):
        _fail("paper", f"{id}: must be a non-empty string, got {paper!r}")
    for field, value in (("statement", statement), ("provenance", provenance)):
        if not isinstance(value, str) or not value.strip():
            _fail(field, f"{id}: must be a non-empty string, got {value!r}")
    tags = [t.strip() for group in _TAG.findall(provenance) for t in group.split(",")]
    unknown_tags = [t for t in tags if t not in PROVENANCE_TAGS]
    if not tags or unknown_tags:
        _fail(
            "provenance",
            f"{id}: {provenance!r} must name tags from "
            f"{', '.join(f'[{t}]' for t in sorted(PROVENANCE_TAGS))}"
            + (f" (unknown: {', '.join(unknown_tags)})" if unknown_tags else " (none found)"),
        )
    if kind not in KINDS:
        _fail("kind", f"{id}: {kind!r} is not one of {sorted(KINDS)}")
    if expected not in EXPECTED:
        _fail("expected", f"{id}: {expected!r} is not one of {sorted(EXPECTED)}")
    if isinstance(examples, bool) or not isinstance(examples, int) or examples < 1:
        _fail("examples", f"{id}: must be an integer >= 1, got {examples!r}")
    if (
        isinstance(max_inconclusive, bool)
        or not isinstance(max_inconclusive, (int, float))
        or not 0.0 <= max_inconclusive <= 1.0
    ):
        _fail("max_inconclusive", f"{id}: must be a fraction in [0, 1], got {max_inconclusive!r}")
    if isinstance(min_premise, bool) or not isinstance(min_premise, int) or min_premise < 1:
        _fail("min_premise", f"{id}: must be an integer >= 1, got {min_premise!r}")
    if isinstance(figures, str):
        figures = (figures,)
    figures = tuple(figures)
    if not all(isinstance(f, str) and f for f in figures):
        _fail("figures", f"{id}: must be file names (non-empty strings), got {figures!r}")
    if not isinstance(note, str):
        _fail("note", f"{id}: must be a string, got {note!r}")
    if not isinstance(runs_only_with, str):
        _fail("runs_only_with", f"{id}: must be a string, got {runs_only_with!r}")
    variants = (variants,) if isinstance(variants, str) else tuple(variants)
    if not all(isinstance(v, str) and ID_PATTERN.match(v) and v != id for v in variants):
        _fail("variant", f"{id}: must be the ids of other claims, got {variants!r}")
    if variants and (expected != "refuted" or kind == "control"):
        _fail(
            "variant",
            f"{id}: only a reading refuted as read (expected='refuted', not a control) names "
            "the variants of it that hold",
        )
    return figures, variants


def _definition_site(fn: Callable) -> tuple[str, str, int]:
    """(file, qualname, first line) of the user's function, looking through @given."""
    inner = hypothesis_compat.inner_test(fn) if hypothesis_compat.is_hypothesis_test(fn) else fn
    inner = inspect.unwrap(inner)  # through functools.wraps chains, ours included
    code = getattr(inner, "__code__", None)
    file = os.path.realpath(code.co_filename) if code else "<unknown>"
    line = code.co_firstlineno if code else 0
    # The user's function's qualname: Hypothesis' wrapper may carry its own
    # ("accept.<locals>.test_x").
    qualname = getattr(inner, "__qualname__", None) or getattr(fn, "__qualname__", repr(fn))
    return file, qualname, line


def _register(info: ClaimInfo) -> None:
    site = (info.file, info.qualname)
    previous = _DEFINED_BY.get(info.id)
    if previous is not None and previous != site:
        other = REGISTRY[info.id]
        raise ClaimRegistrationError(
            f"claim id {info.id!r} is registered twice: by {other.where} and by {info.where}"
        )
    _DEFINED_BY[info.id] = site
    REGISTRY[info.id] = info


class ClaimNotJudged(BaseException):
    """pytest ran a claim while the claims plugin was not active: no verdict can be given.

    A BaseException, as pytest's own outcomes are: Hypothesis lets it through at the first
    example instead of shrinking it into a "falsifying example" it is not."""


NOT_JUDGED = (
    "claim {id} ran without the attention-theorems claims plugin, so it has no verdict: a pass "
    "or a failure here would mean nothing, and no report is written. Run it with the plugin: "
    "install the suite with `pip install -e <its checkout>`, whose pytest entry point "
    "`attention_theorems` activates the plugin for files that import attention_theorems, and "
    "run `python -m pytest FILE` (add `-p attention_theorems` where plugin autoloading is off; "
    "drop any `-p no:attention_theorems` or `-p no:theorems.framework.plugin`); in the "
    "checkout, `python -m pytest theorems/ -k {id}`. See docs/conjectures.md."
)


def _require_plugin(claim_id: str, name: str) -> None:
    """Fail the claim `claim_id` (test function `name`) if pytest runs it as a test item
    while the claims plugin is not active (it makes every claim item's call an evidence
    collection). A call from other code, such as a unit test of the framework running a
    claim by hand, is left alone: pytest is then running another test."""
    __tracebackhide__ = True
    if evidence.current() is not None:
        return
    running = os.environ.get("PYTEST_CURRENT_TEST", "").rsplit(" (", 1)[0]
    if running and running.rsplit("::", 1)[-1].split("[", 1)[0] == name:
        raise ClaimNotJudged(NOT_JUDGED.format(id=claim_id))


def _judged_only(fn: Callable, claim_id: str) -> Callable:
    """A claim that is not a Hypothesis test, failing when run without the claims plugin."""

    @functools.wraps(fn)
    def judged(*args, **kwargs):
        __tracebackhide__ = True
        _require_plugin(claim_id, fn.__name__)
        return fn(*args, **kwargs)

    return judged


def _count_examples(
    inner: Callable, given: tuple[str, ...], replayed: dict, claim_id: str
) -> Callable:
    # Hypothesis calls `inner_test` once per example; the context manager classifies each
    # run (passed / rejected / raised / inconclusive) without branching here. The example's
    # @given arguments go along, for the counterexample store; `replayed` holds the saved
    # counterexample's arguments once _add_replay has added them as an explicit example
    # (Hypothesis hands an explicit example's objects to the test as they are).
    @functools.wraps(inner)
    def counted(*args, **kwargs):
        __tracebackhide__ = True  # pytest: show the claim's frames, not this one
        _require_plugin(claim_id, inner.__name__)
        arguments = {name: kwargs[name] for name in given if name in kwargs}
        saved = replayed.get("arguments")
        explicit = bool(saved) and _is_saved(arguments, saved, replayed)
        try:
            with evidence.example(arguments, explicit):
                _check_replay(arguments)
                result = inner(*args, **kwargs)
        except BaseException as exc:
            allowed = REGISTRY[claim_id].twins
            if isinstance(exc, AssertionError) and hypothesis_compat.is_final_example():
                # The counterexample Hypothesis reports, first reduced in its sizes where it
                # can be: a refutation only if it is robust. A reduced one that is fragile
                # gives way to Hypothesis' own.
                reduced = shrink.reduce(inner, args, kwargs, given)
                twins_module.robustness(inner, args, reduced or kwargs, given, allowed)
                record = (evidence.current().robustness or {}) if reduced else {}
                if record.get("holds_on"):
                    shrink.revert()
                    twins_module.robustness(inner, args, kwargs, given, allowed)
            else:
                twins_module.recheck(inner, args, kwargs, given, exc, allowed)
            raise
        twins_module.recheck(inner, args, kwargs, given, None, REGISTRY[claim_id].twins)
        return result

    counted.__attn_counted__ = True
    return counted


def _is_saved(arguments: dict, saved: dict, replayed: dict) -> bool:
    """Whether an example's arguments are the saved counterexample's: the same objects (the
    explicit example as Hypothesis first runs it), or equal in the store's typed encoding
    (Hypothesis runs a failing explicit example again, to report it, on copies)."""
    if all(arguments.get(k) is v for k, v in saved.items()):
        return True
    if set(arguments) != set(saved):
        return False
    from theorems.framework.instances import encode_arguments

    if "encoded" not in replayed:
        replayed["encoded"] = encode_arguments(saved)
    try:
        return encode_arguments(arguments) == replayed["encoded"]
    except Exception:  # noqa: BLE001 - an argument the store cannot encode is not the saved one
        return False


def _check_replay(arguments: dict) -> None:
    """A saved counterexample that could not be rebuilt stands in as BrokenReplay values:
    raise its reason, so the claim errors with it instead of silently skipping the replay."""
    from theorems.framework.replay import BrokenReplay, ReplayError

    broken = [value.reason for value in arguments.values() if isinstance(value, BrokenReplay)]
    for reason in broken[:1]:
        raise ReplayError(f"saved counterexample not replayed: {reason}")


def _given_names(fn: Callable) -> tuple[str, ...]:
    """The @given argument names of a Hypothesis test, in signature order (those it removes
    from the signature pytest sees)."""
    inner = list(inspect.signature(hypothesis_compat.inner_test(fn)).parameters)
    outer = set(inspect.signature(fn).parameters)
    return tuple(name for name in inner if name not in outer)


def _add_replay(fn: Callable, info: ClaimInfo, given: tuple[str, ...], replayed: dict):
    """Replay the claim's saved counterexample first (theorems.framework.replay), as an explicit
    example added outermost (Hypothesis runs the outermost @example first)."""
    from hypothesis import example

    from theorems.framework import replay

    if not given:
        return fn
    arguments = replay.replay_example(info.id, set(given))
    if arguments is None:
        return fn
    fn.__attn_replay__ = replay.path_for(info.id)
    replayed["arguments"] = arguments
    return example(**arguments)(fn)


def claim(
    id: str | None = None,
    *,
    paper: str | None = None,
    kind: str | None = None,
    statement: str | None = None,
    provenance: str | None = None,
    expected: str | None = None,
    examples: int | None = None,
    max_inconclusive: float | None = None,
    min_premise: int | None = None,
    figures: Iterable[str] | None = None,
    note: str | None = None,
    runs_only_with: str | None = None,
    variant: str | Iterable[str] | None = None,
    twins: str | Iterable[str] | None = None,
    tests: str | None = None,
) -> Callable[[Callable], Callable]:
    """Register a pytest test function as a claim. Apply it outermost (above @given).

    ``@claim("MM-THM-G")`` is the paper's form: the statement is the test's docstring (the
    paper's sentence), the rest is the claim's row in its paper's ``claims.toml`` and its
    findings the ``## MM-THM-G`` section of the paper's ``findings.md`` (theorems.framework.rows).
    Any field given here overrides the row; a claim whose kind and provenance are given here
    needs no row (a conjecture, a throwaway test).

    ``runs_only_with``: what the claim needs that a machine may lack (real data on disk, say).
    ``paper``: by default the ``PAPER`` of the module that defines the claim or of a package
    above it (``theorems.maxmargin``, ``theorems.embeddings``); elsewhere, name it here.
    ``note``: by default the claim's findings section, or for a claim without a row the test's
    docstring after its first paragraph.

    Such a claim may ``pytest.skip`` when it is missing: the report lists it as not run, with
    the skip's reason, and the verdict gate leaves its lock line unchecked. Any other claim
    that skips while the lock pins it fails the gate (a claim must not vanish silently).

    ``variant``: on a reading of a paper that the suite refutes as read (``expected="refuted"``,
    not a control), the id (or ids) of the narrowest variant that holds; the report shows the
    two side by side at its top.

    ``tests``: "paper" (the default: a statement of the paper, as read) or "calibration" (a
    number or reading of our own spec); the report keeps refutations of the two apart.

    ``twins``: the metamorphic twins under which the statement is invariant (default: every
    twin of its instance's family; ``strategies.twins.REORDERINGS`` for a body that draws
    further points in the instance's coordinates). See theorems.framework.twins.
    """
    given = {
        "paper": paper,
        "kind": kind,
        "statement": statement,
        "provenance": provenance,
        "expected": expected,
        "examples": examples,
        "max_inconclusive": max_inconclusive,
        "min_premise": min_premise,
        "figures": figures,
        "note": note,
        "runs_only_with": runs_only_with,
        "variant": variant,
        "twins": twins,
        "tests": tests,
    }
    given = {k: v for k, v in given.items() if v is not None}
    _validate_id(id)
    # Every field in the decorator: check it now, where the mistake was made.
    explicit = statement is not None and kind is not None and provenance is not None
    fields = _fields(id, given, None) if explicit else None

    def decorate(fn: Callable) -> Callable:
        # pytest only collects test_* functions: a claim on anything else (e.g. by mistake on a
        # @st.composite strategy) would never run and silently miss the report.
        is_property = callable(fn) and hypothesis_compat.is_hypothesis_test(fn)
        name = (
            (hypothesis_compat.inner_test(fn) if is_property else fn).__name__
            if callable(fn)
            else ""
        )
        if not callable(fn) or not name.startswith("test"):
            raise ClaimRegistrationError(
                f"@claim({id!r}) must decorate a pytest test function (test_*), got {fn!r}"
            )
        file, qualname, line = _definition_site(fn)
        target = hypothesis_compat.inner_test(fn) if is_property else fn
        f = fields if fields is not None else _fields(id, given, (file, target))
        info = ClaimInfo(
            id=id,
            paper=_paper_of(id, f["paper"], target),
            kind=f["kind"],
            statement=" ".join(f["statement"].split()),
            provenance=f["provenance"].strip(),
            expected=f["expected"],
            examples=f["examples"],
            max_inconclusive=float(f["max_inconclusive"]),
            min_premise=f["min_premise"],
            figures=f["figures"],
            note=f["note"] if f["note"] is not None else _note_of(target),
            runs_only_with=f["runs_only_with"].strip(),
            variants=f["variants"],
            twins=f["twins"],
            module=getattr(fn, "__module__", "") or "",
            qualname=qualname,
            file=file,
            line=line,
            findings=f["findings"],
            tests=f["tests"],
        )
        _register(info)
        if is_property:
            try:
                fn = hypothesis_compat.with_budget(fn, info.budget, seed=claim_seed(info.id))
            except hypothesis_compat.SettingsConflict as exc:
                raise ClaimRegistrationError(f"@claim({id!r}): {exc}") from None
            given_names, replayed = _given_names(fn), {}
            if not getattr(hypothesis_compat.inner_test(fn), "__attn_counted__", False):
                inner = hypothesis_compat.inner_test(fn)
                counted = _count_examples(inner, given_names, replayed, info.id)
                hypothesis_compat.set_inner_test(fn, counted)
            fn = _add_replay(fn, info, given_names, replayed)
        else:
            fn = _judged_only(fn, info.id)
        fn.__claim__ = info
        return pytest.mark.claim(id)(fn)

    return decorate


def _fields(claim_id, given: dict, site: tuple[str, Callable] | None) -> dict:
    """A claim's fields, validated: those given in the decorator over its row in the paper's
    claims.toml (``site``: the defining file and test function; None when every required
    field is given), with the statement from the docstring and the note from the findings."""
    fields = dict(given)
    found = None
    if site is not None:
        file, target = site
        if not ("kind" in given and "provenance" in given):
            try:
                fields = {**rows.row(file, claim_id), **given}
            except rows.RowError as exc:
                raise ClaimRegistrationError(f"@claim({claim_id!r}): {exc}") from None
            if "note" not in given:
                fields["note"] = rows.findings(file, claim_id)
                found = rows.findings_anchor(file, claim_id)
        if "statement" not in fields:
            fields["statement"] = rows.statement_of(inspect.getdoc(target))
    for name in ("kind", "provenance"):
        if name not in fields:
            _fail(name, f"{claim_id}: not given in the decorator or the claim's row")
    try:
        twin_names = twins_module.validate(fields.get("twins"))
    except ValueError as exc:
        raise ClaimRegistrationError(f"@claim({claim_id!r}): {exc}") from None
    kind = fields["kind"]
    expected = fields.get("expected")
    if expected is None:  # a conjecture's verdict is what the run finds; the rest must hold
        expected = "unknown" if kind == "conjecture" else "holds"
    out = {
        "paper": fields.get("paper"),
        "kind": kind,
        "statement": fields.get("statement", ""),
        "provenance": fields["provenance"],
        "expected": expected,
        "examples": fields.get("examples", 50),
        "max_inconclusive": fields.get("max_inconclusive", 0.2),
        "min_premise": fields.get("min_premise", 1),
        "note": fields.get("note"),
        "runs_only_with": fields.get("runs_only_with", ""),
        "twins": twin_names,
        "findings": found,
        "tests": fields.get("tests", "paper"),
    }
    if out["tests"] not in TESTS:
        _fail("tests", f"{claim_id}: {out['tests']!r} is not one of {sorted(TESTS)}")
    out["figures"], out["variants"] = _validate(
        id=claim_id,
        paper=out["paper"],
        kind=kind,
        statement=out["statement"],
        provenance=out["provenance"],
        expected=expected,
        examples=out["examples"],
        max_inconclusive=out["max_inconclusive"],
        min_premise=out["min_premise"],
        figures=fields.get("figures", ()),
        note=out["note"] if out["note"] is not None else "",
        runs_only_with=out["runs_only_with"],
        variants=fields.get("variant", ()),
    )
    return out


def claim_seed(claim_id: str) -> int | None:
    """The seed a claim's search starts from: the run's (profiles.run_seed) under a random
    profile; under a derandomized one (ci, numerics, replay, debug) a number made from the
    claim's id alone. Hypothesis' own derandomization seeds from a digest of the test's source,
    so rewording a claim's docstring or tidying its body would move its draws, and with them
    possibly its verdict; with the id's seed a claim draws the same examples until its id or
    its strategies change."""
    seed = run_seed()
    if seed is not None or not settings.default.derandomize:
        return seed
    return int.from_bytes(hashlib.sha256(f"claim:{claim_id}".encode()).digest()[:8], "big")


def conjecture(
    id: str,
    statement: str,
    *,
    paper: str = "conjecture",
    provenance: str = "[U]",
    **options,
) -> Callable[[Callable], Callable]:
    """``@claim`` for a conjecture, in one line: its id and statement, what a question of
    one's own needs. The kind is "conjecture" (expected verdict "unknown": reported, never
    gated), the provenance "[U]" (unverified) and the paper "conjecture" unless named;
    ``options`` are ``claim``'s (``examples=``, ``min_premise=``, ...)."""
    return claim(
        id=id, paper=paper, kind="conjecture", statement=statement, provenance=provenance,
        **options,
    )  # fmt: skip


def _paper_of(claim_id: str, paper: str | None, fn: Callable) -> str:
    """The claim's paper: given, or the ``PAPER`` of its module or of the nearest package
    above it (a per-paper sub-package sets it once in its ``__init__``)."""
    if paper is not None:
        return paper.strip()
    found = getattr(fn, "__globals__", {}).get("PAPER")
    module = getattr(fn, "__module__", "") or ""
    while found is None and "." in module:
        module = module.rsplit(".", 1)[0]
        found = getattr(sys.modules.get(module), "PAPER", None)
    if not isinstance(found, str) or not found.strip():
        _fail("paper", f"{claim_id}: give paper=... or define PAPER in the claim's module")
    return found.strip()


def _note_of(fn: Callable) -> str:
    """A claim's note from its test's docstring: every paragraph after the first."""
    doc = inspect.getdoc(fn) or ""
    paragraphs = [" ".join(p.split()) for p in doc.split("\n\n") if p.strip()]
    return "\n\n".join(paragraphs[1:])


def claim_of(obj) -> ClaimInfo | None:
    """The ClaimInfo attached to a test function (or bound method), if any."""
    info = getattr(obj, "__claim__", None)
    return info if isinstance(info, ClaimInfo) else None


def ordered(claims: Iterable[ClaimInfo]) -> list[ClaimInfo]:
    """Claims in reading order (see order_key)."""
    return sorted(claims, key=lambda c: order_key(c.paper, c.kind, c.module, c.line, c.id))


@contextlib.contextmanager
def isolated() -> Iterator[dict[str, ClaimInfo]]:
    """Snapshot and restore the registry (for tests that register throwaway claims)."""
    saved, saved_sites = dict(REGISTRY), dict(_DEFINED_BY)
    try:
        yield REGISTRY
    finally:
        REGISTRY.clear()
        REGISTRY.update(saved)
        _DEFINED_BY.clear()
        _DEFINED_BY.update(saved_sites)


def as_dict(info: ClaimInfo) -> dict:
    d = dataclasses.asdict(info)
    d["figures"] = list(info.figures)
    return d


def import_claim_modules(root: Path = REPO_ROOT) -> list[tuple[str, str]]:
    """Import every claims_*.py and test_*.py under theorems/ (the per-paper sub-packages and
    any user's module at the top); return the modules that failed to import as (module,
    one-line reason). Registration errors propagate."""
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    failed = []
    folder = root / "theorems"
    paths = sorted(
        path
        for pattern in ("claims_*.py", "test_*.py")
        for path in folder.rglob(pattern)
        if "framework" not in path.relative_to(folder).parts
    )
    for path in paths:
        name = ".".join(("theorems", *path.relative_to(folder).with_suffix("").parts))
        try:
            importlib.import_module(name)
        except ClaimRegistrationError:
            raise
        except Exception as exc:
            reason = "".join(traceback.format_exception_only(type(exc), exc)).strip()
            failed.append((name, reason.splitlines()[-1]))
    return failed
