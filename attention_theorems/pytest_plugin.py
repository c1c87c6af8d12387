"""The pytest entry point of attention-theorems (pyproject `[project.entry-points.pytest11]`,
name `attention_theorems`): the claims plugin in a run outside the suite's checkout.

pytest loads this module in every run of an environment where attention-theorems is
installed, so it stays out of a run without claims: it imports nothing of the suite itself.
Once pytest has loaded the run's first conftest files (`pytest_load_initial_conftests`), it
activates the claims plugin when all of these hold:

- the claims plugin (`theorems.framework.plugin`) is not registered yet. A run inside a
  checkout has it already, from the checkout's root conftest (`pytest_plugins`) or from
  `-p theorems.framework.plugin`, both of which pytest handles before this hook; pytest
  refuses to register one plugin twice, and this check keeps it to once in either case;
- it is not disabled (`-p no:theorems.framework.plugin`);
- the run asks for it (`-p attention_theorems`), or a Python file it would collect (or a
  conftest.py among them) imports `attention_theorems` or `theorems`.

Activating locates the suite (`attention_theorems._suite.locate`: its checkout appended to
sys.path; a module of yours in the way of one of the suite's is a usage error naming both
paths) and registers that checkout's root conftest.py, which sets torch and the Hypothesis
profile up as in a run from the checkout, names the claims plugin and renders the HTML report.
A claim that runs while the claims plugin is not active fails, saying how to run it
(`theorems.framework.registry.ClaimNotJudged`).
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import sys
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path

import pytest

from attention_theorems._suite import SuiteShadowedError, locate, shadowed_later

#: The claims plugin, by the name the checkout's root conftest registers it under.
PLUGIN = "theorems.framework.plugin"

#: This entry point's name: `-p attention_theorems` asks for it, `-p no:attention_theorems`
#: turns it off.
ENTRY_POINT = "attention_theorems"

#: A file that imports the suite (at the start of a line).
_IMPORTS_SUITE = re.compile(rb"^[ \t]*(?:from|import)[ \t]+(?:attention_theorems|theorems)\b", re.M)

#: At most this many candidate files are read before giving up the search (the claims then
#: say how to run them).
MAX_FILES = 5000

_ROOT = pytest.StashKey[Path]()


@pytest.hookimpl(wrapper=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser, args):
    result = yield
    _activate(early_config)
    return result


def pytest_collection_finish(session: pytest.Session) -> None:
    """A module of the caller's that pytest put on sys.path only while collecting (after the
    suite's was imported) is shadowed by the suite's: say so rather than run with it."""
    root = session.config.stash.get(_ROOT, None)
    problem = shadowed_later(root) if root is not None else None
    if problem:
        pytest.exit(problem, returncode=pytest.ExitCode.USAGE_ERROR)


def _activate(config: pytest.Config) -> None:
    manager = config.pluginmanager
    if manager.has_plugin(PLUGIN) or manager.is_blocked(PLUGIN):
        return
    if not (_asked(config) or _runs_claims(config)):
        return
    try:
        root = locate()
    except SuiteShadowedError as exc:
        raise pytest.UsageError(str(exc)) from None
    conftest = root / "conftest.py"
    # Under the name pytest gives a conftest, so that pytest reuses it if it meets the file.
    if conftest.is_file() and manager.get_plugin(str(conftest)) is None:
        manager.register(_import_conftest(conftest), name=str(conftest))
    if not manager.has_plugin(PLUGIN):  # the root conftest names it; a copy might not
        manager.import_plugin(PLUGIN)
    config.stash[_ROOT] = root


def _import_conftest(path: Path):
    spec = importlib.util.spec_from_file_location("attention_theorems.checkout_conftest", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        del sys.modules[spec.name]
        raise pytest.UsageError(f"attention-theorems: could not load {path}: {exc!r}") from exc
    return module


def _asked(config: pytest.Config) -> bool:
    names = {ENTRY_POINT, __name__}
    given = getattr(config.known_args_namespace, "plugins", None) or []
    from_env = os.environ.get("PYTEST_PLUGINS", "").split(",")
    return bool(names & {name.strip() for name in (*given, *from_env)})


def _targets(config: pytest.Config) -> list[Path]:
    """The paths the run collects from: its file or folder arguments, else where it runs."""
    here = Path(config.invocation_params.dir)
    given = getattr(config.known_args_namespace, "file_or_dir", None) or []
    paths = [here / arg.split("::", 1)[0] for arg in given]
    return [path for path in paths if path.exists()] if paths else [here]


def _python_files(target: Path, patterns: list[str], skip: list[str]) -> Iterator[Path]:
    if target.is_file():
        if target.suffix == ".py":
            yield target  # named on the command line: collected whatever its name
        return
    for folder, dirs, files in os.walk(target):
        dirs[:] = sorted(
            d
            for d in dirs
            if d != "__pycache__"
            and not any(fnmatch(d, pattern) for pattern in skip)
            and not (Path(folder, d) / "pyvenv.cfg").exists()
        )
        for name in sorted(files):
            if name.endswith(".py") and any(fnmatch(name, pattern) for pattern in patterns):
                yield Path(folder, name)


def _runs_claims(config: pytest.Config) -> bool:
    """Whether a file the run would collect (or a conftest.py beside them) imports the suite."""
    patterns = [*config.getini("python_files"), "conftest.py"]
    skip = list(config.getini("norecursedirs"))
    left = MAX_FILES
    for target in _targets(config):
        for path in _python_files(target, patterns, skip):
            left -= 1
            if left < 0:
                return False
            with contextlib.suppress(OSError):
                if _IMPORTS_SUITE.search(path.read_bytes()):
                    return True
    return False
