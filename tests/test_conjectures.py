"""docs/conjectures.md stays true: its example file is the one in docs/examples/, and its
walkthrough, run in a temporary copy of the repository, prints the output the page shows.

Regenerate the page's outputs after a deliberate change with
    python tests/test_conjectures.py
"""

from __future__ import annotations

import re
import shlex
import sys
import tempfile
from pathlib import Path

import repo_copy

REPO_ROOT = Path(__file__).resolve().parent.parent
DOC = REPO_ROOT / "docs" / "conjectures.md"
FILE_MARK = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.S)
CONSOLE = re.compile(r"```console\n(.*?)```", re.S)

_NORMAL = [
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?"), "<DATE>"),
    (re.compile(r"@reproduce_failure\([^)]*\)"), "@reproduce_failure(<BLOB>)"),
    (re.compile(r"\bin \d+(\.\d+)?s\b"), "in <T>s"),
    (re.compile(r"\b\d+(\.\d+)? s\b"), "<T> s"),  # a claim's seconds (its closing line)
    (re.compile(r"-?\d+\.\d{4,}(e[-+]?\d+)?"), "<F>"),  # long decimals: platform digits
    (re.compile(r"={3,}"), "==="),
    (re.compile(r"\s+"), " "),
]


def normal(line: str) -> str:
    for pattern, replacement in _NORMAL:
        line = pattern.sub(replacement, line)
    return line.strip()


def commands(block: str) -> list[tuple[str, list[str]]]:
    """[(command, expected output lines)] of one console block."""
    steps: list[tuple[str, list[str]]] = []
    for line in block.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        elif steps:
            steps[-1][1].append(line)
    return steps


def with_this_python(command: str) -> str:
    """The command as run here: a leading `python` is the interpreter running the tests, not
    whatever `python` comes first on PATH."""
    return re.sub(r"^python(?= )", shlex.quote(sys.executable), command)


def walkthrough() -> list[tuple[str, list[str]]]:
    return [step for block in CONSOLE.findall(DOC.read_text()) for step in commands(block)]


def missing(expected: list[str], actual: str) -> str | None:
    """The first expected line (in order, `...` skipped) not found in the actual output."""
    lines = [normal(line) for line in actual.splitlines()]
    at = 0
    for want in expected:
        want_n = normal(want)
        if not want_n or want_n == "...":
            continue
        while at < len(lines) and lines[at] != want_n:
            at += 1
        if at == len(lines):
            return want
        at += 1
    return None


def test_the_page_shows_the_example_file_verbatim():
    (path, shown), *_ = FILE_MARK.findall(DOC.read_text())
    source = (REPO_ROOT / path).read_text()
    assert shown == source
    assert len(source.splitlines()) <= 21  # "one new file of about 20 lines"


def test_the_walkthrough_prints_what_the_page_shows(tmp_path):
    root = repo_copy.make(tmp_path / "repo", docs=True)
    steps = walkthrough()
    assert len(steps) >= 5 and steps[0][0].startswith("cp docs/examples/")
    for command, expected in steps:
        done = repo_copy.shell(root, with_this_python(command))
        assert done.returncode == 0, f"$ {command}\n{done.stdout}"
        gap = missing(expected, done.stdout)
        assert gap is None, f"$ {command}\nexpected line not printed: {gap!r}\n\n{done.stdout}"


def _elide(output: str) -> list[str]:
    """The output as the page shows it: pytest's header (versions, paths) becomes `...`."""
    lines, out = output.rstrip("\n").splitlines(), []
    skipping = False
    for line in lines:
        if "test session starts" in line:
            skipping = True
            out.append("...")
            continue
        if skipping and line.startswith("collecting"):
            skipping = False
        if not skipping:
            out.append(line)
    return out


def regenerate() -> None:
    """Run the walkthrough in a temporary copy and write its outputs into the page."""
    text = DOC.read_text()
    with tempfile.TemporaryDirectory() as tmp:
        root = repo_copy.make(Path(tmp) / "repo", docs=True)

        def fill(match: re.Match) -> str:
            body = []
            for command, _ in commands(match.group(1)):
                done = repo_copy.shell(root, with_this_python(command))
                body += [f"$ {command}", *_elide(done.stdout)]
            return "```console\n" + "\n".join(body) + "\n```"

        text = CONSOLE.sub(fill, text)
    DOC.write_text(text)


if __name__ == "__main__":
    sys.exit(regenerate())
