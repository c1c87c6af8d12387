"""The human report (reports/build.py): HTML and Markdown from a synthetic claims.json, and
the HTML in a real headless browser."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from matplotlib.figure import Figure

from reports import build as report
from theorems.framework.verdicts import as_expected

STATEMENT = "‖p(t)‖ → ∞ and p/‖p‖ → p^mm/‖p^mm‖ when a<b & b>c"
NOTE = "<script>alert('note')</script> α ≤ β"
SUMMARY = "6 claims: 2 held, 1 refuted as expected, 3 unexpected, 1 inconclusive, 1 error"
IN_ORDER = ("MM-HOLDS", "MM-CONTROL", "MM-WRONG", "EMB-UNDECIDED", "EMB-BROKEN", "CONJ-MINE")


def record(id: str, *, verdict: str = "holds", expected: str = "holds", **fields) -> dict:
    """One claim as theorems.framework.plugin writes it."""
    base = {
        "id": id,
        "paper": "2306.13596",
        "kind": "theorem",
        "statement": f"statement of {id}",
        "provenance": "[V]",
        "expected": expected,
        "verdict": verdict,
        "as_expected": as_expected(verdict, expected),
        "examples": 10,
        "budget": 10,
        "rejections": {},
        "inconclusive": {},
        "worst_slack": {},
        "metrics": {},
        "seconds": 0.25,
        "counterexample": None,
        "falsifying_example": None,
        "error": None,
        "figures": [],
        "note": "",
        "nodeid": f"theorems/claims_x.py::test_{id.lower().replace('-', '_')}",
    }
    return base | fields


CLAIMS = [
    # A user's conjecture first in the file: its table still comes after the papers'.
    record(
        "CONJ-MINE",
        paper="conjecture",
        kind="conjecture",
        expected="unknown",
        provenance="[D+N]",
    ),
    record(
        "MM-HOLDS",
        statement=STATEMENT,
        provenance="[R+] spec §3",
        note=NOTE,
        figures=["path.png"],
        worst_slack={"1-cos": {"observed": 2e-6, "bound": 1e-4, "ratio": 0.02}},
        metrics={"norm p": {"min": 1.0, "max": 1e4, "count": 10}},
    ),
    record(
        "MM-CONTROL",
        kind="control",
        verdict="refuted",
        expected="refuted",
        provenance="[D]",
        counterexample={"X": [[1.0, -2.0]], "label": "<b>&"},
        falsifying_example="Falsifying example: test_control(\n    x=10,\n)",
        rejections={"degenerate SVM": 3},
    ),
    record(
        "MM-WRONG",
        verdict="refuted",
        provenance="[R?]",
        counterexample={"X": [[0.5]]},
        falsifying_example="Falsifying example: test_wrong(x=1)",
        figures=["gone.png"],
        worst_slack={"gap": {"observed": "inf", "bound": 1.0, "ratio": "inf"}},
    ),
    record(
        "EMB-UNDECIDED",
        paper="2505.17282",
        verdict="inconclusive",
        inconclusive={"path stalled": 7},
        provenance="[U]",
    ),
    record(
        "EMB-BROKEN",
        paper="2505.17282",
        verdict="error",
        error="ZeroDivisionError: 1 / 0 <in> theorems/x.py\nmore",
        provenance="[V-frag]",
    ),
]


# A claim that ran no example (theorems.framework.records.skipped_claims): no verdict, a reason.
NOT_RUN = {
    "id": "T-DATA",
    "paper": "2505.17282",
    "kind": "experiment",
    "statement": "holds on <real> data",
    "provenance": "[V]",
    "expected": "holds",
    "reason": "no data: set T_DATA",
    "runs_only_with": "data on disk",
    "nodeid": "theorems/claims_x.py::test_data",
}


def write_claims(folder: Path, claims: list[dict] = CLAIMS) -> Path:
    doc = {
        "generated": "2025-01-01T00:00:00+00:00",
        "profile": "ci",
        "versions": {"python": "3.11.7", "torch": "2.13.0", "cvxpy": None},
        "summary": {},  # the builder counts from the claims
        "claims": claims,
        "skipped": [NOT_RUN],
    }
    path = folder / "claims.json"
    path.write_text(json.dumps(doc, ensure_ascii=False), encoding="utf-8")
    return path


def write_png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(2, 1.5))
    fig.add_subplot().plot([0, 1, 2], [0, 1, 4])
    fig.savefig(path, dpi=60)


@pytest.fixture
def claims_json(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv(report.FIGURES_ENV, raising=False)
    write_png(tmp_path / "figures" / "path.png")
    return write_claims(tmp_path)


@pytest.fixture
def built(claims_json) -> tuple[str, str]:
    html_path, md_path = report.build(claims_json, claims_json.parent)
    assert (html_path, md_path) == (
        claims_json.parent / "index.html",
        claims_json.parent / "claims.md",
    )
    return html_path.read_text(encoding="utf-8"), md_path.read_text(encoding="utf-8")


# --------------------------------------------------------------------------- content


def test_summary_line_counts_verdicts_and_expectations():
    assert report.summary_line(CLAIMS) == SUMMARY
    assert report.summary_line(CLAIMS[:2]) == (
        "2 claims: 2 held, 0 refuted as expected, 0 unexpected, 0 inconclusive"
    )
    broken = [record(f"T-{i}", verdict="error") for i in range(2)]
    assert report.summary_line(broken).endswith(", 2 errors")


def test_meta_line_names_the_torch_device_when_the_report_has_one():
    doc = {"generated": "g", "profile": "ci", "versions": {"torch": "2.13.0", "cvxpy": None}}
    assert report.meta_line(doc) == "generated g · profile ci · torch 2.13.0"
    doc["device"] = "cuda:0 (NVIDIA H200)"
    assert report.meta_line(doc) == (
        "generated g · profile ci · torch device cuda:0 (NVIDIA H200) · torch 2.13.0"
    )


def test_html_shows_every_claim_one_table_per_paper_in_order(built):
    page, _ = built
    assert f'<p class="summary">{SUMMARY}</p>' in page
    positions = [page.index(f'id="claim-{cid}"') for cid in IN_ORDER]
    assert positions == sorted(positions)
    sections = [page.index(f'id="paper-{p}"') for p in ("2306.13596", "2505.17282", "conjecture")]
    assert sections == sorted(sections)
    assert page.count("<table>") == 4  # one per paper, and the claims not run
    assert page.index('id="not-run"') > sections[-1]
    assert "Max-Margin Token Selection in Attention Mechanism" in page


def test_claims_that_were_not_run_are_listed_with_why(built):
    page, text = built
    assert '<p class="summary">1 claim not run: T-DATA (see the end)</p>' in page
    section = page[page.index('<section id="not-run">') :]
    assert '<tr id="claim-T-DATA" class="not-run">' in section
    assert "<td>holds on &lt;real&gt; data</td><td>no data: set T_DATA</td>" in section
    assert "1 claim not run: T-DATA (see the end)" in text
    assert text.rstrip().endswith(
        "| T-DATA | 2505.17282 | experiment | holds on \\<real\\> data | no data: set T\\_DATA |"
    )


def test_html_escapes_text_and_keeps_unicode(built):
    page, _ = built
    assert "<script" not in page and html.escape(NOTE) in page
    assert html.escape(STATEMENT) in page and "‖p(t)‖ → ∞" in page
    assert "&quot;label&quot;: &quot;&lt;b&gt;&amp;&quot;" in page  # pretty JSON, escaped
    assert "ZeroDivisionError: 1 / 0 &lt;in&gt;" in page


def test_html_is_self_contained(built):
    page, _ = built
    assert not re.search(r"https?://", page)
    links = re.findall(r'(?:src|href)="([^"]*)"', page)
    assert links and all(link.startswith(("data:", "#")) for link in links)
    assert page.count('src="data:image/png;base64,') == 1


@pytest.mark.parametrize(
    ("tag", "colour"),
    [
        ("[V-frag]", "verified"),
        ("[R+]", "recalled"),
        ("[R?]", "unsure"),
        ("[U]", "unsure"),
        ("[D]", "derived"),
        ("[D+N]", "derived"),
    ],
)
def test_html_provenance_badges(built, tag, colour):
    assert f'<span class="badge {colour}">{tag}</span>' in built[0]


def test_html_evidence_beside_each_claim(built):
    page, _ = built

    def body(cid: str) -> re.Match:
        return re.search(rf'<tbody id="claim-{cid}" class="([^"]*)">(.*?)</tbody>', page, re.S)

    assert body("MM-WRONG")[1] == "claim unexpected"
    assert body("MM-CONTROL")[1] == "claim"
    assert "figure missing: gone.png" in body("MM-WRONG")[2]
    assert "gap: inf" in body("MM-WRONG")[2]
    assert "<img" in body("MM-HOLDS")[2] and "1-cos: 0.02" in body("MM-HOLDS")[2]
    control = body("MM-CONTROL")[2]
    assert "minimal counterexample" in control and "Falsifying example: test_control(" in control
    assert "3 rejected examples" in control and "degenerate SVM ×3" in control
    assert "inconclusive: path stalled ×7" in body("EMB-UNDECIDED")[2]


def test_markdown_has_the_same_tables(built):
    _, text = built
    assert f"**{SUMMARY}**" in text
    for cid in IN_ORDER:
        assert f"| [{cid}](#{cid.lower()}) |" in text and f"### {cid}" in text
    assert text.count("| id | kind | statement |") == 3
    assert "[path.png](figures/path.png)" in text and "figure missing: gone.png" in text
    prose = re.sub(r"```.*?```", "", text, flags=re.S).replace("<br>", "")
    assert not re.search(r"(?<!\\)[<&]", prose) and r"\<script\>" in prose
    assert r"a\<b \& b\>c" in text and "‖p(t)‖ → ∞" in text
    assert '```json\n{\n  "X": [\n    [1.0, -2.0]\n  ],\n  "label": "<b>&"\n}\n```' in text


def test_figures_link_from_another_out_dir_and_from_the_env_folder(
    claims_json, tmp_path, monkeypatch
):
    html_path, md_path = report.build(claims_json, tmp_path / "out")
    assert "[path.png](../figures/path.png)" in md_path.read_text(encoding="utf-8")
    assert "base64," in html_path.read_text(encoding="utf-8")
    elsewhere = tmp_path / "elsewhere"
    write_png(elsewhere / "gone.png")
    monkeypatch.setenv(report.FIGURES_ENV, str(elsewhere))
    page = report.build(claims_json, tmp_path)[0].read_text(encoding="utf-8")
    assert "figure missing: path.png" in page and "figure missing: gone.png" not in page


def test_cli_builds_and_names_a_bad_field(claims_json, tmp_path, capsys):
    assert report.main([str(claims_json), "--out", str(tmp_path / "cli")]) == 0
    assert capsys.readouterr().out.split() == [
        str(tmp_path / "cli" / "index.html"),
        str(tmp_path / "cli" / "claims.md"),
    ]
    broken = dict(CLAIMS[1])
    del broken["verdict"]
    bad = write_claims(tmp_path / "cli", [broken])
    with pytest.raises(SystemExit) as exit_info:
        report.main([str(bad)])
    assert exit_info.value.code == 2
    assert "claim MM-HOLDS: missing field(s): verdict" in capsys.readouterr().err
    bad.write_text("{", encoding="utf-8")
    with pytest.raises(SystemExit):
        report.main([str(bad)])
    assert "not valid JSON" in capsys.readouterr().err


# --------------------------------------------------------------------------- browser

BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--enable-logging=stderr",
    "--v=0",
)
# Chromium logs each console message as `...:INFO:CONSOLE:1] "..."` (older: `CONSOLE(1)`).
CONSOLE = re.compile(r":CONSOLE[:(]|Uncaught")


@pytest.fixture(scope="module")
def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    reason = "no chromium on PATH (Debian: apt-get install -y chromium)"
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"{reason}: CI must install it to check the HTML report", pytrace=False)
    pytest.skip(reason)


def browse(chromium: str, tmp_path: Path, page: Path, *args: str) -> tuple[str, list[str]]:
    """(stdout, console lines) of a headless chromium run on a page from disk."""
    run = subprocess.run(
        [chromium, *BROWSER_FLAGS, f"--user-data-dir={tmp_path / 'profile'}", *args, page.as_uri()],
        capture_output=True,
        text=True,
        errors="replace",
        timeout=60,
        check=True,
    )
    return run.stdout, [line for line in run.stderr.splitlines() if CONSOLE.search(line)]


def test_browser_shows_every_claim_without_console_errors(chromium, claims_json, tmp_path):
    html_path, _ = report.build(claims_json, tmp_path / "out")
    dom, console = browse(chromium, tmp_path, html_path, "--dump-dom")
    assert console == []
    assert SUMMARY in dom
    for cid in [*IN_ORDER, NOT_RUN["id"]]:
        assert f'id="claim-{cid}"' in dom


def test_browser_console_check_sees_a_script_error(chromium, tmp_path):
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><p>x</p><script>notDefined();</script>", encoding="utf-8")
    _, console = browse(chromium, tmp_path, page, "--dump-dom")
    assert any("Uncaught ReferenceError" in line for line in console)


def test_browser_renders_a_screenshot(chromium, claims_json, tmp_path):
    html_path, _ = report.build(claims_json, tmp_path / "out")
    shot = tmp_path / "shot.png"
    browse(chromium, tmp_path, html_path, f"--screenshot={shot}", "--window-size=1400,2000")
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 20_000
