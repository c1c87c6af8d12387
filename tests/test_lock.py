"""requirements.lock, the exact versions the verdicts are pinned with, stays a lock: one exact
pin per package, every dependency of pyproject.toml (the `dev` extra included) pinned inside its
range, torch at the CPU build the README installs, nothing of CUDA's."""

import re
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCK = ROOT / "requirements.lock"
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([^\s;#]+)$")


def lock_lines() -> list[str]:
    return [line for line in LOCK.read_text().splitlines() if line and line[0] not in "# "]


def pins() -> dict[str, str]:
    found: dict[str, str] = {}
    for line in lock_lines():
        match = PIN.match(line)
        assert match, f"requirements.lock: not an exact pin: {line!r}"
        name = canonicalize_name(match[1])
        assert name not in found, f"requirements.lock pins {name} twice"
        found[name] = match[2]
    return found


def test_every_line_is_one_exact_pin():
    assert len(pins()) >= 20
    assert not [line for line in lock_lines() if line.startswith("-")], "no pip options"


def test_every_dependency_of_pyproject_is_pinned_inside_its_range():
    tomllib = pytest.importorskip("tomllib")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    locked = pins()
    for spec in map(Requirement, wanted):
        if spec.marker is not None and not spec.marker.evaluate({"python_version": "3.11"}):
            continue  # the lock is for Python 3.11 (tomli serves 3.10 alone)
        name = canonicalize_name(spec.name)
        assert name in locked, f"{spec} is not in requirements.lock (run bash .ci/relock)"
        assert spec.specifier.contains(locked[name], prereleases=True), (
            f"requirements.lock pins {name}=={locked[name]}, outside pyproject's {spec}"
        )


def test_torch_is_the_cpu_build_without_cuda_packages():
    locked = pins()
    assert locked["torch"] == "2.13.0"  # no local label: the README's pin, the CPU wheel here
    cuda = [name for name in locked if name.startswith("nvidia-") or name == "triton"]
    assert not cuda, f"CUDA packages in requirements.lock: {cuda}"


def test_the_lock_says_how_to_regenerate_it():
    assert "bash .ci/relock" in LOCK.read_text()
    assert (ROOT / ".ci" / "relock").is_file()
