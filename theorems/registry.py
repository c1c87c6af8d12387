"""The claim registry: one `ClaimInfo` per executable statement of a paper.

A claim is a pytest test function decorated (outermost) with `@claim(...)`. The decorator
validates and registers the metadata, scales a Hypothesis test's example budget to the active
profile, counts examples through Hypothesis' reassignable `inner_test`, and marks the function
so that `theorems.plugin` turns its outcome into a verdict.

Profiles live here too (not only in the root conftest), so that the CLI and a pytester run
without the root conftest see the same budgets.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, Phase, Verbosity, settings

from theorems import evidence, hypothesis_compat

KINDS = frozenset(
    {
        "definition",
        "lemma",
        "theorem",
        "corollary",
        "experiment",
        "control",
        "metamorphic",
        "conjecture",
    }
)
EXPECTED = frozenset({"holds", "refuted", "unknown"})
#: The provenance tags of the specs (their tables in ../shared/spec/*.md): [V] verified in
#: text read, [V-frag] read in a fragment, [R+] recalled with confidence, [R] reconstructed,
#: [R?] recalled with low confidence, [D] derived, [N] numerically observed, [U] unverified,
#: [?] unknown. A claim's provenance names at least one; free text may surround them
#: ("[R?] hypotheses, [D] n = 1"), and one bracket may hold several ("[D, N]").
PROVENANCE_TAGS = frozenset({"V", "V-frag", "R+", "R", "R?", "D", "N", "U", "?"})
_TAG = re.compile(r"\[([^\]]*)\]")
#: holds: no counterexample, and the premise was met; refuted: a counterexample; inconclusive:
#: the machinery could not decide; vacuous: the premise or assumptions were met in too few
#: examples for "holds" to mean anything; error: the claim or its strategy is broken.
VERDICTS = ("holds", "refuted", "inconclusive", "vacuous", "error")

# An upper-case prefix (MM, EMB, or a user's own), then dash-separated letters and digits.
ID_PATTERN = re.compile(r"^[A-Z][A-Z0-9]*(?:-[A-Za-z0-9]+)+$")

PROFILE_ENV = "ATTN_HYPOTHESIS_PROFILE"
DEFAULT_PROFILE = "ci"
PROFILES = ("dev", "ci", "ci-random", "nightly", "debug")
DATABASE_ENV = "ATTN_HYPOTHESIS_DB"
#: The seed of a randomized run (ci-random draws one and prints it; give it back to replay).
SEED_ENV = "ATTN_HYPOTHESIS_SEED"


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
    runs_only_with: str = ""
    # Where the claim is defined; filled by the decorator.
    module: str = ""
    qualname: str = ""
    file: str = ""
    line: int = 0

    @property
    def budget(self) -> int:
        """The example budget under the active profile."""
        return scaled_examples(self.examples)

    @property
    def where(self) -> str:
        return f"{self.module}.{self.qualname} ({self.file}:{self.line})"


REGISTRY: dict[str, ClaimInfo] = {}


# --------------------------------------------------------------------------- profiles


def database_from_env(value: str | None = None):
    """The shared Hypothesis example database named by ATTN_HYPOTHESIS_DB, or None (then
    Hypothesis' default, .hypothesis/examples in the working directory).

    A comma-separated list; each entry is a directory (DirectoryBasedExampleDatabase; on a
    shared filesystem, any number of workers on any number of machines may use it at once),
    `redis://host:port/db` (RedisExampleDatabase, needs `pip install "hypothesis[redis]"`),
    or either prefixed `ro:` (ReadOnlyDatabase: replay its examples, never write, e.g. a copy
    of the nightly database in CI). Several entries form one MultiplexedDatabase that reads
    from all and writes to the writable ones. ValueError names a bad entry.
    """
    from hypothesis.database import (
        DirectoryBasedExampleDatabase,
        MultiplexedDatabase,
        ReadOnlyDatabase,
    )

    value = os.environ.get(DATABASE_ENV, "") if value is None else value
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if not entries:
        return None
    dbs = []
    for entry in entries:
        readonly = entry.startswith("ro:")
        target = entry[3:] if readonly else entry
        if not target:
            raise ValueError(f"{DATABASE_ENV}: empty entry in {value!r}")
        if target.startswith(("redis://", "rediss://")):
            try:
                import redis
                from hypothesis.extra.redis import RedisExampleDatabase
            except ImportError:
                raise ValueError(
                    f"{DATABASE_ENV}: {target!r} needs the redis client: "
                    'pip install "hypothesis[redis]"'
                ) from None
            db = RedisExampleDatabase(redis.Redis.from_url(target))
        elif "://" in target:
            raise ValueError(f"{DATABASE_ENV}: unknown database URL {target!r}")
        else:
            db = DirectoryBasedExampleDatabase(os.path.expanduser(target))
        dbs.append(ReadOnlyDatabase(db) if readonly else db)
    return dbs[0] if len(dbs) == 1 else MultiplexedDatabase(*dbs)


_DATABASE_ERROR: str | None = None


def register_profiles() -> None:
    """Register the four profiles (idempotent: re-registering replaces them).

    nightly: 20x the ci budgets, every phase (target() included), not derandomized, and the
    example database of ATTN_HYPOTHESIS_DB (see `database_from_env`). At scale: one shared
    database for every worker of every machine, e.g. 4 machines x `pytest -n 16` = 64
    workers on one directory of a shared filesystem or one Redis, each worker replaying what
    the others found; CI keeps `database=None` (derandomized, reproducible) and may add the
    nightly database read-only through the dev profile. See docs/scale-out.md.
    """
    global _DATABASE_ERROR
    # GD-in-the-loop examples are slow and their timing varies: no deadline, and no
    # timing-based health checks (prior-art C.1).
    quiet = [HealthCheck.too_slow, HealthCheck.data_too_large]
    common = dict(deadline=None, print_blob=True, suppress_health_check=quiet)
    try:
        database, _DATABASE_ERROR = database_from_env(), None
    except ValueError as exc:
        database, _DATABASE_ERROR = None, str(exc)
    shared = {} if database is None else {"database": database}
    # ci skips Hypothesis' explain phase: on a refuted control it re-ran the dynamics for
    # most of a minute to annotate lines, and CI only needs the shrunk counterexample.
    settings.register_profile(
        "ci",
        derandomize=True,
        database=None,
        max_examples=100,
        phases=tuple(p for p in Phase if p is not Phase.explain),
        **common,
    )
    # The ci budgets on fresh random draws: does a verdict survive examples it was not pinned
    # with? The run's seed is printed and accepted back (ATTN_HYPOTHESIS_SEED, run_seed).
    settings.register_profile("ci-random", parent=settings.get_profile("ci"), derandomize=False)
    settings.register_profile("dev", derandomize=False, max_examples=20, **shared, **common)
    settings.register_profile(
        "nightly",
        derandomize=False,
        max_examples=2000,
        phases=tuple(Phase),
        **shared,
        **common,
    )
    settings.register_profile(
        "debug",
        parent=settings.get_profile("ci"),
        max_examples=1,
        verbosity=Verbosity.verbose,
        phases=(Phase.explicit, Phase.reuse, Phase.generate),
    )


def profile_from_env() -> str:
    """The profile named by ATTN_HYPOTHESIS_PROFILE (default ci); ValueError if unknown."""
    name = os.environ.get(PROFILE_ENV, "").strip() or DEFAULT_PROFILE
    if name not in PROFILES:
        raise ValueError(
            f"{PROFILE_ENV}={name!r} is not a profile; choose one of {', '.join(PROFILES)}"
        )
    return name


_LOADED_PROFILE: str | None = None


def load_profile(name: str | None = None) -> str:
    """Register the profiles and load `name` (default: from the environment)."""
    register_profiles()
    name = name or profile_from_env()
    if _DATABASE_ERROR and name in ("dev", "nightly"):
        raise ValueError(_DATABASE_ERROR)
    settings.load_profile(name)
    note_profile(name)
    return name


def note_profile(name: str) -> None:
    """Remember the name of the profile loaded (by us, or by --hypothesis-profile)."""
    global _LOADED_PROFILE
    _LOADED_PROFILE = name


def current_profile() -> str:
    """The name of the loaded Hypothesis profile ("default" if none of ours was loaded).
    Kept here: Hypothesis 6.100 has no public way to ask it."""
    return _LOADED_PROFILE or "default"


def run_seed(profile: str | None = None) -> int | None:
    """The seed every claim's search starts from, or None (derandomized profiles, or a random
    profile without a seed). Under ci-random a seed is always used: ATTN_HYPOTHESIS_SEED, or
    one drawn now and put in the environment, so that xdist workers (started later, with this
    environment) and the report use the same one."""
    profile = profile or current_profile()
    given = os.environ.get(SEED_ENV, "").strip()
    if given:
        try:
            return int(given)
        except ValueError:
            raise ValueError(f"{SEED_ENV}={given!r} is not an integer") from None
    if profile != "ci-random":
        return None
    drawn = int.from_bytes(os.urandom(4), "big")
    os.environ[SEED_ENV] = str(drawn)
    return drawn


def scaled_examples(examples: int, profile: str | None = None) -> int:
    """A claim's ci budget scaled to `profile` (the active one by default)."""
    profile = profile or current_profile()
    if profile == "dev":
        return min(examples, max(5, examples // 5))
    if profile == "nightly":
        return 20 * examples
    if profile == "debug":
        return 1
    return examples  # ci, ci-random, and any profile we do not know


# --------------------------------------------------------------------------- verdicts


def merge_verdicts(verdicts: Iterable[str]) -> str:
    """One verdict for the items of a parametrized claim.

    Any refuted -> refuted (a counterexample is the strongest finding); else any error ->
    error; else any inconclusive -> inconclusive; else any vacuous -> vacuous (a part of the
    claim was never exercised); else holds.
    """
    seen = set(verdicts)
    unknown = seen - set(VERDICTS)
    if unknown:
        raise ValueError(f"unknown verdicts {sorted(unknown)}")
    for verdict in ("refuted", "error", "inconclusive", "vacuous"):
        if verdict in seen:
            return verdict
    if not seen:
        raise ValueError("no verdicts to merge")
    return "holds"


def as_expected(verdict: str, expected: str) -> bool:
    """Whether a verdict meets the expectation; "unknown" accepts anything but error."""
    if expected == "unknown":
        return verdict != "error"
    return verdict == expected


# --------------------------------------------------------------------------- the decorator

# id -> (file, qualname) of the function that registered it: a second registration from
# the same definition (pytest re-collecting, a module re-imported) replaces the first.
_DEFINED_BY: dict[str, tuple[str, str]] = {}


def _fail(field: str, message: str) -> None:
    raise ClaimRegistrationError(f"claim field {field!r}: {message}")


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
) -> tuple[str, ...]:
    if not isinstance(id, str) or not ID_PATTERN.match(id):
        _fail(
            "id",
            f"{id!r} must be an upper-case prefix and dash-separated letters/digits, "
            "e.g. 'MM-SVM-MARGIN', 'EMB-THM1' or 'CONJ-MY-GUESS'",
        )
    for field, value in (("paper", paper), ("statement", statement), ("provenance", provenance)):
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
    return figures


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


def _count_examples(inner: Callable, given: tuple[str, ...], replayed: dict) -> Callable:
    # Hypothesis calls `inner_test` once per example; the context manager classifies each
    # run (passed / rejected / raised / inconclusive) without branching here. The example's
    # @given arguments go along, for the counterexample store; `replayed` holds the saved
    # counterexample's arguments once _add_replay has added them as an explicit example
    # (Hypothesis hands an explicit example's objects to the test as they are).
    @functools.wraps(inner)
    def counted(*args, **kwargs):
        __tracebackhide__ = True  # pytest: show the claim's frames, not this one
        arguments = {name: kwargs[name] for name in given if name in kwargs}
        saved = replayed.get("arguments")
        explicit = bool(saved) and all(arguments.get(k) is v for k, v in saved.items())
        with evidence.example(arguments, explicit):
            _check_replay(arguments)
            return inner(*args, **kwargs)

    counted.__attn_counted__ = True
    return counted


def _check_replay(arguments: dict) -> None:
    """A saved counterexample that could not be rebuilt stands in as BrokenReplay values:
    raise its reason, so the claim errors with it instead of silently skipping the replay."""
    from theorems.replay import BrokenReplay, ReplayError

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
    """Replay the claim's saved counterexample first (theorems.replay), as an explicit
    example added outermost (Hypothesis runs the outermost @example first)."""
    from hypothesis import example

    from theorems import replay

    if not given:
        return fn
    arguments = replay.replay_example(info.id, set(given))
    if arguments is None:
        return fn
    fn.__attn_replay__ = replay.path_for(info.id)
    replayed["arguments"] = arguments
    return example(**arguments)(fn)


def claim(
    *,
    id: str,
    paper: str,
    kind: str,
    statement: str,
    provenance: str,
    expected: str | None = None,
    examples: int = 50,
    max_inconclusive: float = 0.2,
    min_premise: int = 1,
    figures: Iterable[str] = (),
    note: str = "",
    runs_only_with: str = "",
) -> Callable[[Callable], Callable]:
    """Register a pytest test function as a claim. Apply it outermost (above @given).

    ``runs_only_with``: what the claim needs that a machine may lack (real data on disk, say).
    Such a claim may ``pytest.skip`` when it is missing: the report lists it as not run, with
    the skip's reason, and the verdict gate leaves its lock line unchecked. Any other claim
    that skips while the lock pins it fails the gate (a claim must not vanish silently).
    """
    if expected is None:  # a conjecture's verdict is what the run finds; the rest must hold
        expected = "unknown" if kind == "conjecture" else "holds"
    figures = _validate(
        id=id,
        paper=paper,
        kind=kind,
        statement=statement,
        provenance=provenance,
        expected=expected,
        examples=examples,
        max_inconclusive=max_inconclusive,
        min_premise=min_premise,
        figures=figures,
        note=note,
        runs_only_with=runs_only_with,
    )

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
        info = ClaimInfo(
            id=id,
            paper=paper.strip(),
            kind=kind,
            statement=" ".join(statement.split()),
            provenance=provenance.strip(),
            expected=expected,
            examples=examples,
            max_inconclusive=float(max_inconclusive),
            min_premise=min_premise,
            figures=figures,
            note=note,
            runs_only_with=runs_only_with.strip(),
            module=getattr(fn, "__module__", "") or "",
            qualname=qualname,
            file=file,
            line=line,
        )
        _register(info)
        if is_property:
            try:
                fn = hypothesis_compat.with_budget(fn, info.budget, seed=run_seed())
            except hypothesis_compat.SettingsConflict as exc:
                raise ClaimRegistrationError(f"@claim({id!r}): {exc}") from None
            given, replayed = _given_names(fn), {}
            if not getattr(hypothesis_compat.inner_test(fn), "__attn_counted__", False):
                counted = _count_examples(hypothesis_compat.inner_test(fn), given, replayed)
                hypothesis_compat.set_inner_test(fn, counted)
            fn = _add_replay(fn, info, given, replayed)
        fn.__claim__ = info
        return pytest.mark.claim(id)(fn)

    return decorate


def claim_of(obj) -> ClaimInfo | None:
    """The ClaimInfo attached to a test function (or bound method), if any."""
    info = getattr(obj, "__claim__", None)
    return info if isinstance(info, ClaimInfo) else None


# Reading order within a paper: definitions and their consequences first, then the lemmas,
# theorems and corollaries, the experiments, and the negative controls last.
KIND_ORDER = (
    "definition",
    "metamorphic",
    "lemma",
    "theorem",
    "corollary",
    "experiment",
    "control",
    "conjecture",
)


def order_key(paper: str, kind: str, module: str, line: int, claim_id: str) -> tuple:
    """Sort key of a claim in reports and listings: paper, kind (reading order), definition."""
    rank = KIND_ORDER.index(kind) if kind in KIND_ORDER else len(KIND_ORDER)
    return (paper, rank, module, line, claim_id)


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
