"""The shared example database in Redis (docs/scale-out.md): what one machine finds, another
replays without searching; a Redis that is down at start or dies mid-run costs the run its
database, never a verdict. Every Redis here is a throwaway `redis-server` on a loopback port
(tests/redis_server.py), stopped after the test.
"""

from __future__ import annotations

import json
import sys
import warnings

import pytest
import redis_server
import repo_copy
from hypothesis import settings
from hypothesis.database import ExampleDatabase, InMemoryExampleDatabase

from theorems.framework import profiles
from theorems.framework.profiles import SharedDatabase, SharedDatabaseWarning


@pytest.fixture(autouse=True)
def _own_notes(monkeypatch):
    """This module's warnings stay here: the outer run prints the notes it finds at its end."""
    monkeypatch.setattr(profiles, "_NOTES", [])
    monkeypatch.setattr(profiles, "_REDIS_CHECKED", {})
    monkeypatch.setattr(profiles, "_DATABASES", {})


@pytest.fixture
def redis_client():
    """The redis client (the `scale` extra): skipped, saying why, when it is not installed."""
    redis_server.require_client()


@pytest.fixture
def redis(tmp_path, redis_client):
    """A redis-server of this test's own (tests/redis_server.py), killed after it."""
    with redis_server.started(tmp_path / "redis") as server:
        yield server


CONJECTURE = (repo_copy.REPO_ROOT / "docs/examples/claims_example_conjecture.py").read_text()

#: In the second machine's copy: Hypothesis may only replay (explicit examples and the
#: database), never generate or shrink. Loaded before the claim module is imported, so the
#: claim's settings (theorems.framework.hypothesis_compat.with_budget) inherit the phases.
REPLAY_ONLY = """
from hypothesis import Phase, settings

settings.register_profile(
    "replay-only", parent=settings.get_profile("dev"), phases=(Phase.explicit, Phase.reuse)
)
settings.load_profile("replay-only")
"""


def _claims_run(root, report, counterexamples, db):
    done = repo_copy.run(
        root,
        *("-m", "pytest", "theorems/", "-v", "--no-gate", "-p", "no:randomly"),
        ATTN_HYPOTHESIS_PROFILE="dev",
        ATTN_HYPOTHESIS_DB=db,
        ATTN_CLAIMS_REPORT=str(report),
        ATTN_COUNTEREXAMPLES=str(counterexamples),
        timeout=300,
    )
    assert done.returncode == 0, done.stdout
    return done.stdout, {c["id"]: c for c in json.loads(report.read_text())["claims"]}


def _shown(title, output):
    """The lines of a run worth quoting: the claim's verdict and the plugin's summary."""
    keep = ("claim ", "attention-theorems:", "Falsifying example", "inst=")
    print(f"--- {title}")
    for line in output.splitlines():
        if line.lstrip().startswith(keep) or " passed in " in line or " skipped in " in line:
            print(line)


def test_a_counterexample_found_on_one_machine_is_replayed_on_another(tmp_path, redis):
    """Machine A (one copy of the suite, one working directory) refutes the conjecture under
    the dev profile with the shared Redis; machine B (another fresh copy: no .hypothesis, no
    saved counterexample, its own empty counterexample store) runs it with Hypothesis' generate
    and shrink phases turned off and reports the same counterexample: it can only have come
    from the database. The control: the same run of B against an empty database of the same
    server runs no example and refutes nothing."""
    shared, empty = redis.url, redis.url.replace("/0", "/1")
    claim_file = "conjectures/claims_example_conjecture.py"
    a = repo_copy.make(tmp_path / "a", {claim_file: CONJECTURE})
    out_a, claims_a = _claims_run(a, tmp_path / "a.json", tmp_path / "cx-a", shared)
    _shown("machine A, dev profile, shared Redis (searching)", out_a)
    found = claims_a["CONJ-ALL-SUPPORT"]
    assert found["verdict"] == "refuted", out_a

    b = repo_copy.make(
        tmp_path / "b", {claim_file: CONJECTURE, "conjectures/conftest.py": REPLAY_ONLY}
    )
    assert not (b / ".hypothesis").exists()
    assert not (b / "theorems" / "counterexamples").exists()  # repo_copy leaves the store out
    out_b, claims_b = _claims_run(b, tmp_path / "b.json", tmp_path / "cx-b", shared)
    _shown("machine B, replay only (no generate phase), same Redis", out_b)
    replayed = claims_b.get("CONJ-ALL-SUPPORT")
    assert replayed is not None and replayed["verdict"] == "refuted", out_b
    assert replayed["counterexample"] == found["counterexample"]
    assert replayed["falsifying_example"] == found["falsifying_example"]
    # The database was Redis, not Hypothesis' local one (.hypothesis/constants is a cache).
    assert not (b / ".hypothesis" / "examples").exists()

    out_c, claims_c = _claims_run(b, tmp_path / "c.json", tmp_path / "cx-c", empty)
    _shown("control: machine B, replay only, an empty Redis database", out_c)
    # Nothing to replay and no search: Hypothesis runs no example, and the claim is not run.
    assert "CONJ-ALL-SUPPORT" not in claims_c, out_c
    (skipped,) = json.loads((tmp_path / "c.json").read_text())["skipped"]
    assert skipped["id"] == "CONJ-ALL-SUPPORT"
    assert skipped["reason"] == "Hypothesis has been told to run no test cases for this test."


# A claim that kills the Redis under the run at its third example, then a conjecture whose
# failing example Hypothesis saves to (and whose examples it first fetches from) the dead
# database.
KILLER = (
    repo_copy.CLAIM_HELPER
    + """
import os
import signal
import socket
import time

from hypothesis import given, strategies as st

CALLS = []


def _server_gone(port):
    try:
        socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
    except OSError:
        return True
    return False


@C("SHARED-DB-KILLED-MIDRUN")
@given(x=st.integers(0, 100))
def test_redis_dies_under_this_claim(x):
    CALLS.append(x)
    if len(CALLS) == 3:
        os.kill(int(os.environ["TEST_REDIS_PID"]), signal.SIGKILL)
        port = int(os.environ["TEST_REDIS_PORT"])
        deadline = time.monotonic() + 10
        while not _server_gone(port) and time.monotonic() < deadline:
            time.sleep(0.05)
    assert x >= 0


@C("SHARED-DB-AFTER-DEATH", kind="conjecture", expected="unknown")
@given(x=st.integers(0, 100))
def test_refuted_after_redis_died(x):
    assert x < 50
"""
)


def test_a_redis_down_at_start_or_dying_mid_run_costs_no_verdict(tmp_path, redis):
    """ATTN_HYPOTHESIS_DB names two Redis: one on a closed port (left out at start, with a
    one-line warning) and a live one that a claim kills during the run. Both claims still
    get their verdicts, and the run says what happened to each database."""
    closed = redis_server.closed_port_url()
    root = repo_copy.make(tmp_path / "repo", {"claims_shared_db.py": KILLER})
    done = repo_copy.run(
        root,
        *("-m", "pytest", "theorems/", "-q", "--no-gate", "-p", "no:randomly"),
        ATTN_HYPOTHESIS_PROFILE="dev",
        ATTN_HYPOTHESIS_DB=f"{closed},{redis.url}",
        ATTN_CLAIMS_REPORT=str(tmp_path / "claims.json"),
        ATTN_COUNTEREXAMPLES=str(tmp_path / "cx"),
        TEST_REDIS_PID=str(redis.process.pid),
        TEST_REDIS_PORT=str(redis.port),
        timeout=300,
    )
    _shown("closed port + Redis killed mid-run", done.stdout)
    assert done.returncode == 0, done.stdout
    assert redis.process.poll() is not None  # the claim did kill it
    lines = done.stdout.splitlines()
    assert any(
        f"ATTN_HYPOTHESIS_DB entry {closed} is unreachable" in line
        and "the run goes on without that database" in line
        for line in lines
    ), done.stdout
    assert any(f"example database {redis.url} failed during the run" in line for line in lines), (
        done.stdout
    )
    claims = {c["id"]: c for c in json.loads((tmp_path / "claims.json").read_text())["claims"]}
    assert claims["SHARED-DB-KILLED-MIDRUN"]["verdict"] == "holds"
    assert claims["SHARED-DB-AFTER-DEATH"]["verdict"] == "refuted"
    assert "x=50" in claims["SHARED-DB-AFTER-DEATH"]["falsifying_example"]


# --------------------------------------------------------------------------- at start


def test_a_closed_port_is_left_out_with_one_line_on_stderr(capsys, redis_client):
    url = redis_server.closed_port_url()
    assert profiles.database_from_env(url) is None  # Hypothesis' default applies
    assert profiles.database_from_env(url) is None  # checked once per process
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0] in profiles.database_notes()
    assert f"entry {url} is unreachable (ConnectionError: " in err[0]
    assert err[0].endswith("the run goes on without that database")


def test_the_other_entries_stay_when_a_redis_is_down(tmp_path, capsys, redis_client):
    db = profiles.database_from_env(f"{redis_server.closed_port_url()},{tmp_path / 'db'}")
    assert type(db).__name__ == "DirectoryBasedExampleDatabase"
    assert "is unreachable" in capsys.readouterr().err


def test_a_live_redis_is_the_profiles_database(redis, monkeypatch):
    monkeypatch.setenv(profiles.DATABASE_ENV, redis.url)
    try:
        profiles.register_profiles()
        db = settings.get_profile("nightly").database
        assert isinstance(db, SharedDatabase)
        assert type(db.db).__name__ == "RedisExampleDatabase"
        assert settings.get_profile("dev").database is db  # one client, one wrapper
        assert settings.get_profile("ci").database is None
        db.save(b"k", b"v")
        assert list(db.fetch(b"k")) == [b"v"]
    finally:
        monkeypatch.delenv(profiles.DATABASE_ENV)
        profiles.register_profiles()


# --------------------------------------------------------------------------- the wrapper


class Broken(ExampleDatabase):
    """A database whose every call fails as a dead Redis does."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def _fail(self, *args):
        self.calls += 1
        raise ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused.")

    save = delete = move = fetch = _fail

    def _start_listening(self):
        self._fail()


def test_the_wrapper_delegates_every_call():
    inner = InMemoryExampleDatabase()
    db = SharedDatabase(inner, "mem", (ConnectionError,))
    db.save(b"k", b"1")
    db.save(b"k", b"2")
    assert sorted(inner.fetch(b"k")) == [b"1", b"2"]
    db.delete(b"k", b"1")
    db.move(b"k", b"k2", b"2")
    assert list(db.fetch(b"k")) == [] and list(db.fetch(b"k2")) == [b"2"]
    events = []
    db.add_listener(events.append)
    inner.save(b"k3", b"3")  # a change made by another client of the store
    db.remove_listener(events.append)
    inner.save(b"k3", b"4")
    assert events == [("save", (b"k3", b"3"))]
    assert db == SharedDatabase(inner, "other name", (ConnectionError,))
    assert db.failure is None


def test_the_wrapper_warns_once_then_is_empty():
    inner = Broken()
    db = SharedDatabase(inner, "redis://127.0.0.1:1/0", (ConnectionError,))
    with pytest.warns(SharedDatabaseWarning, match=r"redis://127\.0\.0\.1:1/0 failed") as w:
        db.save(b"k", b"v")
    assert len(w) == 1 and "Connection refused" in str(w[0].message)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no second warning
        assert list(db.fetch(b"k")) == []
        db.save(b"k", b"v")
        db.delete(b"k", b"v")
        db.move(b"k", b"j", b"v")
        db.add_listener(print)
    assert inner.calls == 1  # given up on after the first failure
    assert "failed during the run" in profiles.database_notes()[-1]


def test_the_wrapper_lets_other_errors_through():
    db = SharedDatabase(Broken(), "x", (TimeoutError,))
    with pytest.raises(ConnectionError):
        db.save(b"k", b"v")


def test_a_redis_killed_under_the_wrapper(redis):
    db = profiles.database_from_env(redis.url)
    db.save(b"k", b"v")
    assert list(db.fetch(b"k")) == [b"v"]
    redis.kill()
    with pytest.warns(SharedDatabaseWarning, match="failed during the run"):
        assert list(db.fetch(b"k")) == []
    db.save(b"k", b"w")  # silently dropped
    assert db.failure is not None and "Error" in db.failure


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-s", "-v"]))


def test_a_seed_turns_the_shared_database_off_and_the_run_says_so(monkeypatch):
    """Hypothesis neither replays nor saves examples for a seeded search: with
    ATTN_HYPOTHESIS_SEED set, a run with a shared database must say that it is not used."""
    from theorems.framework import profiles

    before = profiles.current_profile()
    monkeypatch.setenv(profiles.DATABASE_ENV, "/tmp/attn-db-never-written")
    monkeypatch.setenv(profiles.SEED_ENV, "7")
    try:
        profiles.load_profile("dev")
        assert any(
            "ATTN_HYPOTHESIS_SEED is set, so the example database" in note
            for note in profiles.database_notes()
        )
    finally:
        monkeypatch.undo()
        profiles.load_profile(before)
