"""Scale-out: `pytest theorems/ -n 2` gives the report of a serial run on real claims, each
worker is held to one thread, and ATTN_HYPOTHESIS_DB names the shared example database.

(tests/test_plugin.py checks the same report equality on throwaway probe claims.)
"""

import json

import pytest
import redis_server
import repo_copy
from hypothesis import settings
from hypothesis.database import (
    DirectoryBasedExampleDatabase,
    MultiplexedDatabase,
    ReadOnlyDatabase,
)

from theorems.framework import profiles

THREADS = """
import os

import torch


def test_one_thread_per_worker():
    if os.environ.get("PYTEST_XDIST_WORKER"):
        assert torch.get_num_threads() == 1
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
            assert os.environ[var] == "1", var
    else:
        assert torch.get_num_threads() <= 2
"""


def content(report):
    # The run's time (its seconds, and "run": the report it was judged in) differs, nothing else.
    return [{k: v for k, v in c.items() if k not in ("seconds", "run")} for c in report["claims"]]


def test_xdist_and_serial_runs_give_the_same_report_on_real_claims(tmp_path):
    conjecture = (repo_copy.REPO_ROOT / "docs/examples/claims_example_conjecture.py").read_text()
    root = repo_copy.make(
        tmp_path / "repo",
        {
            "claims_example_conjecture.py": conjecture,
            "claims_gate_probe.py": repo_copy.DESCENT,
            "test_threads.py": THREADS,
        },
    )
    reports = {}
    for name, args in (("serial", ()), ("parallel", ("-n", "2"))):
        done = repo_copy.run(
            root,
            *("-m", "pytest", "theorems/", "-q", "--no-gate", *args),
            ATTN_CLAIMS_REPORT=f"reports/{name}.json",
            ATTN_COUNTEREXAMPLES=f"cx-{name}",  # no replay of the other run's example
        )
        assert done.returncode == 0, done.stdout
        assert "3 passed" in done.stdout
        reports[name] = json.loads((root / "reports" / f"{name}.json").read_text())
    serial, parallel = reports["serial"], reports["parallel"]
    assert [(c["id"], c["verdict"]) for c in serial["claims"]] == [
        ("GATE-DESCENT", "holds"),  # reading order: a lemma before a conjecture
        ("CONJ-ALL-SUPPORT", "refuted"),
    ]
    assert content(parallel) == content(serial)  # ids, verdicts, examples, counterexamples
    assert parallel["summary"] == serial["summary"]
    for name in ("serial", "parallel"):
        saved = json.loads((root / f"cx-{name}" / "CONJ-ALL-SUPPORT.json").read_text())
        assert saved["X"] == serial["claims"][1]["counterexample"]["X"]


# --------------------------------------------------------------------------- the database


def test_no_database_setting_keeps_hypothesis_default(monkeypatch):
    monkeypatch.delenv(profiles.DATABASE_ENV, raising=False)
    assert profiles.database_from_env() is None


def test_a_directory_is_shared_and_ro_entries_are_read_only(tmp_path):
    db = profiles.database_from_env(str(tmp_path / "shared"))
    assert isinstance(db, DirectoryBasedExampleDatabase)
    multi = profiles.database_from_env(f"{tmp_path / 'mine'}, ro:{tmp_path / 'ci-copy'}")
    assert isinstance(multi, MultiplexedDatabase)
    mine, theirs = multi._wrapped
    assert isinstance(mine, DirectoryBasedExampleDatabase) and isinstance(theirs, ReadOnlyDatabase)
    multi.save(b"key", b"value")
    assert list(DirectoryBasedExampleDatabase(str(tmp_path / "mine")).fetch(b"key")) == [b"value"]
    assert not (tmp_path / "ci-copy").exists() or not any((tmp_path / "ci-copy").iterdir())


@pytest.mark.parametrize(
    "value, message",
    [
        ("ftp://host/db", "unknown database URL 'ftp://host/db'"),
        ("ro:", "empty entry"),
    ],
)
def test_bad_database_settings_are_clear_errors(value, message):
    with pytest.raises(ValueError, match=f"ATTN_HYPOTHESIS_DB: .*{message}"):
        profiles.database_from_env(value)


def test_redis_needs_its_client(monkeypatch):
    monkeypatch.setattr(profiles, "_NOTES", [])  # its warning is not the outer run's
    try:
        import redis  # noqa: F401
    except ImportError:
        with pytest.raises(ValueError, match=r'pip install "hypothesis\[redis\]"'):
            profiles.database_from_env("redis://localhost:6379/0")
    else:  # a Redis that does not answer is left out (tests/test_shared_db.py)
        db = profiles.database_from_env(redis_server.closed_port_url())
        assert db is None


def test_the_nightly_and_dev_profiles_use_the_shared_database(tmp_path, monkeypatch):
    before = profiles.current_profile()
    monkeypatch.setenv(profiles.DATABASE_ENV, str(tmp_path / "db"))
    try:
        profiles.register_profiles()
        for name in ("nightly", "dev"):
            db = settings.get_profile(name).database
            assert isinstance(db, DirectoryBasedExampleDatabase), name
            assert str(tmp_path / "db") in str(db.path)
        assert settings.get_profile("ci").database is None  # CI stays derandomized
        monkeypatch.setenv(profiles.DATABASE_ENV, "ftp://nowhere")
        with pytest.raises(ValueError, match="unknown database URL"):
            profiles.load_profile("nightly")
        profiles.load_profile("ci")  # ci has no database: the setting does not matter
    finally:
        monkeypatch.delenv(profiles.DATABASE_ENV)
        profiles.register_profiles()
        settings.load_profile(before)
