"""The README's two commands are the ones CI runs, verbatim (a newcomer and CI do the same)."""

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Two commands", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, re.S)]


def test_readme_gives_exactly_two_commands():
    commands = readme_commands()
    assert len(commands) == 2, commands
    assert all("\n" not in c for c in commands), "each command is one line"


def test_ci_runs_the_readme_commands_verbatim():
    ci_lines = {line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()}
    for command in readme_commands():
        assert command in ci_lines, f".ci/run does not run the README command: {command}"


def test_the_install_command_installs_the_lock_and_nothing_unpinned():
    install = readme_commands()[0]
    assert "-r requirements.lock" in install and "--no-deps" in install, install
    assert (ROOT / "requirements.lock").is_file()
