"""The Hypothesis profiles of the suite (dev, ci, ci-random, nightly, debug), the active one,
the run's seed and the example database; and how a claim's ci budget scales with the profile.

Imports nothing from the rest of the framework.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Iterable

from hypothesis import HealthCheck, Phase, Verbosity, settings
from hypothesis.database import ExampleDatabase

PROFILE_ENV = "ATTN_HYPOTHESIS_PROFILE"


DEFAULT_PROFILE = "ci"


PROFILES = ("dev", "ci", "ci-random", "nightly", "debug", "numerics", "replay")
#: Generated examples per claim under the numerics profile (besides its explicit ones).
NUMERICS_EXAMPLES = 2


DATABASE_ENV = "ATTN_HYPOTHESIS_DB"


#: The seed of a randomized run (ci-random draws one and prints it; give it back to replay).
SEED_ENV = "ATTN_HYPOTHESIS_SEED"


#: How long the start-up check waits for a Redis of ATTN_HYPOTHESIS_DB to answer PING, and
#: each later Redis command for its reply (seconds): an unreachable host must not hang a run.
REDIS_TIMEOUT = 5.0


class SharedDatabase(ExampleDatabase):
    """An example database whose failures cannot fail a run: save, fetch, delete and move
    (and change listening) go to `db`; the first error of the kinds in `errors` (a Redis
    server that died mid-run, a dropped connection) is reported once, as a warning naming
    `name` and the reason, and from then on the database is empty: fetch yields nothing and
    writes are dropped. Hypothesis saves a failing example to the database before it reports
    it, so without this a dying shared database turned the claim's verdict into an error.
    """

    def __init__(self, db: ExampleDatabase, name: str, errors: tuple[type[BaseException], ...]):
        super().__init__()
        self.db, self.name, self.errors = db, name, errors
        self.failure: str | None = None

    def __repr__(self) -> str:
        return f"SharedDatabase({self.db!r})"

    def __eq__(self, other: object) -> bool:
        # By name too: redis.Redis clients compare by identity, and HypoFuzz fuzzes a test only
        # if its database equals the profile's (two wrappers of one URL are one database).
        return isinstance(other, SharedDatabase) and (
            self.db == other.db or self.name == other.name
        )

    __hash__ = None  # type: ignore[assignment]  # like the databases it wraps

    def _failed(self, exc: BaseException) -> None:
        if self.failure is None:
            self.failure = f"{type(exc).__name__}: {exc}"
            note = (
                f"attention-theorems: warning: example database {self.name} failed during "
                f"the run ({self.failure}); the run goes on without it"
            )
            _note(note)
            warnings.warn(note, SharedDatabaseWarning, stacklevel=3)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        if self.failure is not None:
            return []
        try:
            return list(self.db.fetch(key))  # Redis fetches lazily: fail here, not later
        except self.errors as exc:
            self._failed(exc)
            return []

    def save(self, key: bytes, value: bytes) -> None:
        self._call("save", key, value)

    def delete(self, key: bytes, value: bytes) -> None:
        self._call("delete", key, value)

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._call("move", src, dest, value)

    def _call(self, method: str, *args: bytes) -> None:
        if self.failure is not None:
            return
        try:
            getattr(self.db, method)(*args)
        except self.errors as exc:
            self._failed(exc)

    # Change listening (HypoFuzz's dashboard): pass the wrapped database's events on.
    def _start_listening(self) -> None:
        if self.failure is not None:
            return
        try:
            self.db.add_listener(self._broadcast_change)
        except self.errors as exc:
            self._failed(exc)

    def _stop_listening(self) -> None:
        try:
            self.db.remove_listener(self._broadcast_change)
        except self.errors as exc:
            self._failed(exc)


class SharedDatabaseWarning(UserWarning):
    """A shared example database stopped answering during the run."""


#: The start-up check of each Redis URL, once per process: None (it answered) or the reason.
_REDIS_CHECKED: dict[str, str | None] = {}
_NOTES: list[str] = []


def _note(line: str) -> None:
    if line not in _NOTES:
        _NOTES.append(line)


def database_notes() -> list[str]:
    """The warnings of this process about its example databases (an entry left out at start,
    one that failed during the run), one line each, for the end of a pytest run: a line
    printed while pytest loads the conftest is captured and never shown."""
    return list(_NOTES)


def _redis_database(target: str) -> ExampleDatabase | None:
    """The Redis database at `target`, wrapped in SharedDatabase; None, after a one-line
    message on stderr, if it does not answer PING now."""
    try:
        import redis
        from hypothesis.extra.redis import RedisExampleDatabase
        from redis.backoff import ExponentialBackoff
        from redis.retry import Retry
    except ImportError:
        raise ValueError(
            f'{DATABASE_ENV}: {target!r} needs the redis client: pip install "hypothesis[redis]"'
        ) from None
    # A short retry (about 1 s in all) rides out a blip; a dead server fails fast, and the
    # SharedDatabase wrapper then drops it. Options in the URL's query string win.
    client = redis.Redis.from_url(
        target,
        socket_connect_timeout=REDIS_TIMEOUT,
        socket_timeout=REDIS_TIMEOUT,
        retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 3),
    )
    if target not in _REDIS_CHECKED:
        try:
            client.ping()
            _REDIS_CHECKED[target] = None
        except (redis.RedisError, OSError) as exc:
            reason = _REDIS_CHECKED[target] = f"{type(exc).__name__}: {exc}"
            note = (
                f"attention-theorems: warning: {DATABASE_ENV} entry {target} is unreachable "
                f"({reason}); the run goes on without that database"
            )
            _note(note)
            print(note, file=sys.stderr, flush=True)
    if _REDIS_CHECKED[target] is not None:
        return None
    return SharedDatabase(RedisExampleDatabase(client), target, (redis.RedisError, OSError))


def database_from_env(value: str | None = None):
    """The shared Hypothesis example database named by ATTN_HYPOTHESIS_DB, or None (then
    Hypothesis' default, .hypothesis/examples in the working directory).

    A comma-separated list; each entry is a directory (DirectoryBasedExampleDatabase; on a
    shared filesystem, any number of workers on any number of machines may use it at once),
    `redis://host:port/db` (RedisExampleDatabase, needs `pip install "hypothesis[redis]"`),
    or either prefixed `ro:` (ReadOnlyDatabase: replay its examples, never write, e.g. a copy
    of the nightly database in CI). Several entries form one MultiplexedDatabase that reads
    from all and writes to the writable ones. ValueError names a bad entry.

    A Redis entry is checked once per process (PING): one that does not answer is left out
    with a one-line warning on stderr (the other entries stay; with none left, Hypothesis'
    default applies). One that stops answering later is dropped for the rest of the run with
    a warning (SharedDatabase), never failing a claim.
    """
    value = os.environ.get(DATABASE_ENV, "") if value is None else value
    entries = [e.strip() for e in value.split(",") if e.strip()]
    if not entries:
        return None
    # One database object per setting and process: the profiles are registered more than
    # once (at import, at configure), and a claim keeps the one it was decorated with.
    if value not in _DATABASES:
        _DATABASES[value] = _build_database(value, entries)
    return _DATABASES[value]


_DATABASES: dict[str, object] = {}


def _build_database(value: str, entries: list[str]):
    from hypothesis.database import (
        DirectoryBasedExampleDatabase,
        MultiplexedDatabase,
        ReadOnlyDatabase,
    )

    dbs = []
    for entry in entries:
        readonly = entry.startswith("ro:")
        target = entry[3:] if readonly else entry
        if not target:
            raise ValueError(f"{DATABASE_ENV}: empty entry in {value!r}")
        if target.startswith(("redis://", "rediss://")):
            db = _redis_database(target)
            if db is None:
                continue
        elif "://" in target:
            raise ValueError(f"{DATABASE_ENV}: unknown database URL {target!r}")
        else:
            db = DirectoryBasedExampleDatabase(os.path.expanduser(target))
        dbs.append(ReadOnlyDatabase(db) if readonly else db)
    if not dbs:
        return None
    return dbs[0] if len(dbs) == 1 else MultiplexedDatabase(*dbs)


_DATABASE_ERROR: str | None = None


def register_profiles() -> None:
    """Register the profiles (idempotent: re-registering replaces them).

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
    # Every profile draws on Hypothesis' standard backend, named here so that no profile can
    # drift to another, and draws there without the literals Hypothesis harvests from the
    # suite's own modules (docs/reliability.md, "Draws that do not depend on the suite's
    # literals"): otherwise a literal added anywhere moves every claim's draws, the
    # derandomized ones of ci and debug and the replay of a ci-random, dev or nightly seed
    # alike. The literals are switched off in the provider, not by a setting:
    # theorems.framework.hypothesis_compat does it when imported (the plugin and the registry
    # import it before any test runs; this module may not import it). Not by a backend of
    # our own either: for any backend other than "hypothesis" the engine gives up its
    # tree-guided generation (novel prefixes, mutations, exhaustion) and still shrinks and
    # replays with the standard provider, literals included.
    common = dict(backend="hypothesis", deadline=None, print_blob=True, suppress_health_check=quiet)
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
    # The numerics matrix (.ci/numerics_matrix.py): ci's derandomized draws, cut to each
    # claim's saved counterexample, its pinned examples and its first NUMERICS_EXAMPLES
    # generated ones, unshrunk, so that the same examples are decided in every environment.
    settings.register_profile(
        "numerics",
        parent=settings.get_profile("ci"),
        max_examples=NUMERICS_EXAMPLES,
        phases=(Phase.explicit, Phase.generate),
    )
    # The numerics matrix in CI: the saved counterexamples and pinned @examples alone (the
    # plugin skips the claims that are not Hypothesis tests, which have none).
    settings.register_profile(
        "replay", parent=settings.get_profile("ci"), max_examples=1, phases=(Phase.explicit,)
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
    if name in ("dev", "nightly") and os.environ.get(DATABASE_ENV) and os.environ.get(SEED_ENV):
        # Every claim then runs under Hypothesis' @seed, and Hypothesis neither replays nor
        # saves examples for a seeded test: the shared database would silently do nothing.
        _note(
            f"attention-theorems: warning: {SEED_ENV} is set, so the example database of "
            f"{DATABASE_ENV} is neither read nor written (Hypothesis does not use it for a "
            "seeded search); unset it to share examples"
        )
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
    if profile == "numerics":
        return min(examples, NUMERICS_EXAMPLES)
    if profile == "replay":
        return 1
    return examples  # ci, ci-random, and any profile we do not know
