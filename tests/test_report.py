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
SUMMARY = "8 claims: 2 held, 3 refuted as expected, 3 unexpected, 1 inconclusive, 1 error"
IN_ORDER = (
    "MM-HOLDS",
    "MM-CONTROL",
    "MM-READING",
    "MM-WRONG",
    "EMB-UNDECIDED",
    "EMB-READING",
    "EMB-BROKEN",
    "CONJ-MINE",
)
READING = "Theorem G as read: every flow from 0 reaches the global <direction>"


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
    # A reading of the paper refuted as read, with the variant that holds (one in this report,
    # one not), and one with no variant known.
    record(
        "MM-READING",
        verdict="refuted",
        expected="refuted",
        statement=READING,
        provenance="[R+]",
        variants=["MM-HOLDS", "MM-ELSEWHERE"],
        counterexample={"X": [[2.0]]},
        falsifying_example=(
            "Falsifying example: test_mm_reading(\n    inst=Inst(n=2,\n  seed=7),\n)"
        ),
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
        "EMB-READING",
        paper="2505.17282",
        kind="corollary",
        verdict="refuted",
        expected="refuted",
        counterexample={"E": [1.0]},
        falsifying_example=None,
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


# The verdict lock the synthetic report is compared with: MM-WRONG was pinned holds (now
# refuted), MM-GONE is pinned but not in the report, EMB-READING is not pinned (new).
LOCK = """# profile: ci
MM-HOLDS       holds      2306.13596
MM-CONTROL     refuted    2306.13596
MM-READING     refuted    2306.13596
MM-WRONG       holds      2306.13596
MM-GONE        holds      2306.13596
EMB-UNDECIDED  inconclusive  2505.17282
EMB-BROKEN     error      2505.17282
"""


@pytest.fixture
def claims_json(tmp_path, monkeypatch) -> Path:
    monkeypatch.delenv(report.FIGURES_ENV, raising=False)
    (tmp_path / "verdicts.lock").write_text(LOCK, encoding="utf-8")
    monkeypatch.setenv(report.LOCK_ENV, str(tmp_path / "verdicts.lock"))
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
    claims = page[page.index('<section id="claims">') :]
    assert claims.count("<table>") == 4  # one per paper, and the claims not run
    assert page.index('id="not-run"') > sections[-1]
    assert "Max-Margin Token Selection in Attention Mechanism" in page


def test_claims_that_were_not_run_are_listed_with_why(built):
    page, text = built
    assert '<p class="summary">1 claim not run: T-DATA (see the end)</p>' in page
    section = page[page.index('id="not-run"') :]
    assert '<tr id="claim-T-DATA" class="not-run" data-claim="T-DATA"' in section
    assert "<td>holds on &lt;real&gt; data</td><td>no data: set T_DATA</td>" in section
    assert "1 claim not run: T-DATA (see the end)" in text
    assert text.rstrip().endswith(
        "| T-DATA | 2505.17282 | experiment | holds on \\<real\\> data | no data: set T\\_DATA |"
    )


def test_html_escapes_text_and_keeps_unicode(built):
    page, _ = built
    assert page.count("<script") == 1 and html.escape(NOTE) in page  # the filter's only
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
        return re.search(rf'<tbody id="claim-{cid}" class="([^"]*)"[^>]*>(.*?)</tbody>', page, re.S)

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
    assert capsys.readouterr().out.splitlines()[:3] == [
        str(tmp_path / "cli" / "index.html"),
        str(tmp_path / "cli" / "claims.md"),
        f"Against the verdict lock ({tmp_path / 'verdicts.lock'}): 1 verdict changed of 6 "
        "claims compared; 1 new claim; 1 pinned claim not in this run",
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


def browse(
    chromium: str, tmp_path: Path, page: Path, *args: str, tail: str = ""
) -> tuple[str, list[str]]:
    """(stdout, console lines) of a headless chromium run on a page from disk (`tail`: a
    query string and/or fragment added to its URL)."""
    run = subprocess.run(
        [
            chromium,
            *BROWSER_FLAGS,
            f"--user-data-dir={tmp_path / 'profile'}",
            *args,
            page.as_uri() + tail,
        ],
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


# --------------------------------------------------------------------------- the top


def section(page: str, name: str) -> str:
    start = page.index(f'<section id="{name}">')
    return page[start : page.index("</section>", start)]


def test_the_report_leads_with_findings_then_attention_then_changes(built):
    page, text = built
    order = [page.index(f'<section id="{s}">') for s in ("findings", "attention", "changes")]
    assert page.index(SUMMARY) < order[0] and order == sorted(order)
    assert order[-1] < page.index('<section id="claims">') < page.index('id="paper-2306.13596"')
    headings = [
        "## Readings the suite refutes (2)",
        "## Unexpected or undecided (3)",
        "## Verdict changes",
        "## arXiv 2306.13596",
    ]
    assert [text.index(h) for h in headings] == sorted(text.index(h) for h in headings)


def test_a_refuted_reading_shows_counterexample_and_the_variant_that_holds(built):
    page, text = built
    findings = section(page, "findings")
    # Readings only: the control (a deliberately wrong statement) and the claim refuted
    # against its expectation are not findings.
    assert re.findall(r'<article class="finding" id="finding-([^"]+)"', findings) == [
        "MM-READING",
        "EMB-READING",
    ]
    card = findings[findings.index('id="finding-MM-READING"') :]
    card = card[: card.index("</article>")]
    assert html.escape(READING) in card
    assert "<code>test_mm_reading(inst=Inst(n=2, seed=7))</code>" in card
    holds = re.findall(r'<p class="holds-instead">(.*?)</p>', card)
    assert holds[0].endswith(
        '<a href="#claim-MM-HOLDS">MM-HOLDS</a> <span class="verdict v-holds">holds</span> '
        + html.escape(STATEMENT)
    )
    assert holds[1].endswith('<a href="#claim-MM-ELSEWHERE">MM-ELSEWHERE</a> (not in this run)')
    emb = findings[findings.index('id="finding-EMB-READING"') :]
    assert "<code>{&quot;E&quot;: [1.0]}</code>" in emb  # no printed example: the instance
    assert report.NO_VARIANT in emb[: emb.index("</article>")]
    assert "- **[MM-READING](#mm-reading)** (2306.13596, theorem; [R+]): Theorem G" in (
        text.replace("\\[", "[").replace("\\]", "]")
    )
    assert "  - holds instead: [MM-HOLDS](#mm-holds) (**holds**): " in text


def test_summary_md_is_the_top_of_claims_md_without_the_tables(built, claims_json):
    _, text = built
    summary = (claims_json.parent / "summary.md").read_text(encoding="utf-8")
    top = text[: text.index("## arXiv 2306.13596")]
    assert summary.startswith(top)
    assert "| id | kind |" not in summary and "### MM-HOLDS" not in summary
    assert "- arXiv 2306.13596: Max-Margin Token Selection in Attention Mechanism: 4 claims" in (
        summary
    )


def test_unexpected_and_undecided_claims_are_listed_with_why(built):
    page, text = built
    rows = re.findall(r'<tr><td><a href="#claim-([^"]+)">', section(page, "attention"))
    assert rows == ["MM-WRONG", "EMB-UNDECIDED", "EMB-BROKEN"]
    attention = section(page, "attention")
    assert "expected holds, the run found refuted" in attention
    assert "inconclusive: path stalled ×7" in attention and "ZeroDivisionError: 1 / 0" in attention
    assert "| [EMB-UNDECIDED](#emb-undecided) | 2505.17282 | holds | **inconclusive** |" in text


def test_the_lock_the_run_was_judged_against_is_the_one_compared(claims_json, tmp_path):
    """claims.json names the lock its run used (e.g. a user's --verdict-lock): the report
    compares with that one, not with $ATTN_VERDICT_LOCK or the checkout's."""
    own = tmp_path / "users.lock"
    own.write_text("MM-WRONG  refuted  2306.13596\n", encoding="utf-8")
    doc = json.loads(claims_json.read_text(encoding="utf-8"))
    claims_json.write_text(json.dumps(dict(doc, lock=str(own))), encoding="utf-8")
    page = report.build(claims_json, tmp_path / "own")[0].read_text(encoding="utf-8")
    assert (
        f"<h3>Against the verdict lock ({own})</h3><p>no verdict changed (1 claims compared);"
        in (page)
    )


def test_nothing_to_report_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv(report.LOCK_ENV, str(tmp_path / "no.lock"))
    path = write_claims(tmp_path, [CLAIMS[1]])
    page = report.build(path, tmp_path)[0].read_text(encoding="utf-8")
    assert report.NO_READINGS in section(page, "findings")
    assert html.escape(report.NO_ATTENTION) in section(page, "attention")
    assert f"not compared with the verdict lock: no file {tmp_path / 'no.lock'}" in page
    (tmp_path / "bad.lock").write_text("MM-HOLDS maybe 2306.13596\n", encoding="utf-8")
    monkeypatch.setenv(report.LOCK_ENV, str(tmp_path / "bad.lock"))
    page = report.build(path, tmp_path)[0].read_text(encoding="utf-8")
    assert "not compared with the verdict lock: malformed verdict lock" in page


def test_verdict_diff_against_the_lock_and_an_earlier_report(claims_json, tmp_path):
    old = [
        dict(c, verdict="holds", as_expected=True) if c["id"] == "EMB-BROKEN" else c for c in CLAIMS
    ]
    old = [c for c in old if c["id"] != "EMB-READING"]
    old.append(record("MM-RETIRED"))
    (tmp_path / "old").mkdir()
    old_json = write_claims(tmp_path / "old", old)
    page, text = (
        p.read_text(encoding="utf-8")
        for p in report.build(claims_json, tmp_path / "out", against=old_json)
    )
    changes = section(page, "changes")
    lock_part, old_part = changes.split("<h3>")[1:]
    assert "1 verdict changed of 6 claims compared; 1 new claim; 1 pinned claim not in" in lock_part
    rows = re.findall(
        r"<tr><td>.*?>([^<]+)</a></td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)<", changes
    )
    assert rows == [
        ("MM-WRONG", "holds", "refuted", "changed"),
        ("EMB-READING", "—", "refuted", "new"),
        ("EMB-BROKEN", "holds", "error", "changed"),
        ("EMB-READING", "—", "refuted", "new"),
        ("MM-RETIRED", "holds", "—", "not in this run"),
    ]
    assert f"Against the earlier report ({old_json})" in old_part
    assert "| [EMB-BROKEN](#emb-broken) | holds | error | changed |" in text
    same = report.build(claims_json, tmp_path / "same", against=claims_json)[1]
    assert "no verdict changed (8 claims compared)" in same.read_text(encoding="utf-8")


def test_every_claim_row_carries_what_the_filter_reads(built):
    page, _ = built
    rows = re.findall(r'<tbody id="claim-([^"]+)" class="[^"]*"([^>]*)>', page)
    assert [cid for cid, _ in rows] == list(IN_ORDER)
    attrs = dict(rows)["MM-CONTROL"]
    assert attrs == (
        ' data-claim="MM-CONTROL" data-paper="2306.13596" data-kind="control"'
        ' data-verdict="refuted" data-expected="refuted"'
    )
    menus = re.findall(r'<select id="filter-(\w+)"', page)
    assert menus == ["paper", "kind", "verdict"]
    assert '<option value="inconclusive">inconclusive</option>' in page


def shown_and_hidden(dom: str) -> tuple[list[str], list[str]]:
    """(ids of the claim rows shown, ids of those the filter hid) in a dumped DOM."""
    rows = re.findall(r'<(?:tbody|tr) id="claim-([^"]+)"([^>]*)>', dom)
    return [i for i, a in rows if " hidden" not in a], [i for i, a in rows if " hidden" in a]


def test_browser_filter_reads_the_query_string(chromium, claims_json, tmp_path):
    html_path, _ = report.build(claims_json, tmp_path / "out")
    dom, console = browse(chromium, tmp_path, html_path, "--dump-dom", tail="?verdict=refuted&q=mm")
    assert console == []
    shown, hidden = shown_and_hidden(dom)
    assert shown == ["MM-CONTROL", "MM-READING", "MM-WRONG"]
    assert len(hidden) == len(IN_ORDER) + 1 - 3  # the claim not run is a row too
    assert "3 of 9 claims shown" in dom
    assert re.search(r'<section class="paper" id="paper-2505.17282" hidden', dom)
    assert re.search(r'<section class="paper" id="paper-2306.13596">', dom)
    # Words match the id, paper, kind, verdict or expectation, all of them.
    dom, _ = browse(chromium, tmp_path, html_path, "--dump-dom", tail="?q=2505%20INCONCLUSIVE")
    assert shown_and_hidden(dom)[0] == ["EMB-UNDECIDED"]


def test_browser_link_to_a_claim_the_filter_hides_clears_the_filter(
    chromium, claims_json, tmp_path
):
    html_path, _ = report.build(claims_json, tmp_path / "out")
    dom, console = browse(
        chromium, tmp_path, html_path, "--dump-dom", tail="?verdict=holds#claim-MM-WRONG"
    )
    assert console == []
    assert shown_and_hidden(dom) == ([*IN_ORDER, NOT_RUN["id"]], [])
    dom, _ = browse(
        chromium, tmp_path, html_path, "--dump-dom", tail="?verdict=holds#claim-MM-HOLDS"
    )
    assert shown_and_hidden(dom)[0] == ["MM-HOLDS", "CONJ-MINE"]  # a shown target: kept


# The flat colours of a finding card and of its "holds instead" line (CSS in reports/build.py).
FINDING_RGB = (254, 242, 242)
HOLDS_RGB = (240, 253, 244)


def colour_share(png: Path, rgb: tuple[int, int, int]) -> float:
    from matplotlib.image import imread

    pixels = (imread(png)[..., :3] * 255).round()
    return float((abs(pixels - rgb) <= 1).all(axis=-1).mean())


def test_browser_screenshot_of_the_top_shows_the_findings_first(chromium, claims_json, tmp_path):
    """What a reader sees without scrolling (1280×900): the findings' cards, each with its
    green "holds instead" line. A report without refuted readings shows neither colour,
    so the check can fail."""
    flags = ("--window-size=1280,900", "--hide-scrollbars", "--force-device-scale-factor=1")
    flags += ("--force-color-profile=srgb",)
    html_path, _ = report.build(claims_json, tmp_path / "out")
    shot = tmp_path / "top.png"
    browse(chromium, tmp_path, html_path, f"--screenshot={shot}", *flags)
    assert colour_share(shot, FINDING_RGB) > 0.03 and colour_share(shot, HOLDS_RGB) > 0.003
    plain = report.build(write_claims(tmp_path / "out", [CLAIMS[1]]), tmp_path / "plain")[0]
    browse(chromium, tmp_path, plain, f"--screenshot={shot}", *flags)
    assert colour_share(shot, FINDING_RGB) < 1e-4 and colour_share(shot, HOLDS_RGB) < 1e-4


def test_a_report_of_several_runs_says_which_run_judged_a_claim_and_the_twins(tmp_path):
    """A report that adds up runs (records.carry_over) names, in its meta line, the earlier
    runs, and under each claim they judged, that run; a refutation shows its twins."""
    claims = [
        record("MM-HOLDS", run="2024-12-31T00:00:00+00:00"),
        record(
            "MM-WRONG",
            verdict="refuted",
            run="2025-01-01T00:00:00+00:00",
            robustness={
                "twins": {"permute-inputs": "refuted", "rotate": "undecided"},
                "holds_on": [],
            },
        ),  # fmt: skip
    ]
    path = write_claims(tmp_path, claims)
    doc = json.loads(path.read_text(encoding="utf-8"))
    doc["runs"] = {"2024-12-31T00:00:00+00:00": {"profile": "ci", "claims": 1},
                   "2025-01-01T00:00:00+00:00": {"profile": "ci", "claims": 1}}  # fmt: skip
    path.write_text(json.dumps(doc), encoding="utf-8")
    html_path, md_path = report.build(path, tmp_path)
    text = md_path.read_text(encoding="utf-8")
    assert "with 1 claims of earlier runs (2024-12-31T00:00:00+00:00" in text
    holds = text[text.index("### MM-HOLDS") :].split("### ")[1]
    wrong = text[text.index("### MM-WRONG") :].split("### ")[1]
    assert "judged by an earlier run: 2024-12-31T00:00:00+00:00" in holds
    assert "earlier run" not in wrong
    assert "counterexample on its twins: robust: permute-inputs refuted, rotate undecided" in wrong
    assert "judged by an earlier run" in html_path.read_text(encoding="utf-8")


def test_conjectures_get_a_findings_section_with_what_the_assertion_said(tmp_path):
    claims = [
        record("MM-HOLDS"),
        record("CONJ-HOLDS", paper="conjecture", kind="conjecture", expected="unknown"),
        record(
            "CONJ-FALSE",
            paper="conjecture",
            kind="conjecture",
            expected="unknown",
            verdict="refuted",
            counterexample={"T": 3},
            falsifying_example="Falsifying example: test_c(\n    inst=Inst(T=3),\n)",
            assertion="⟨−∇L(0), p^mm⟩ = -0.00437",
        ),
    ]
    html_path, md_path = report.build(write_claims(tmp_path, claims), tmp_path)
    text = md_path.read_text(encoding="utf-8")
    section = text[text.index("## Conjectures (2)") : text.index("## Unexpected")]
    rows = [line for line in section.splitlines() if line.startswith("| [")]
    assert [row.split("|")[1].strip().split("]")[0] for row in rows] == [
        "[CONJ-FALSE",
        "[CONJ-HOLDS",
    ]  # the refuted one first
    assert "⟨−∇L(0), p^mm⟩ = -0.00437" in rows[0] and "Inst(T=3)" in rows[0]
    page = html_path.read_text(encoding="utf-8")
    assert 'id="conjectures"' in page and "-0.00437" in page
    (tmp_path / "plain").mkdir()
    _, md_plain = report.build(write_claims(tmp_path / "plain", [record("MM-HOLDS")]), tmp_path)
    assert "## Conjectures" not in md_plain.read_text(encoding="utf-8")


def test_refuted_numbers_of_our_spec_are_kept_apart_from_readings_of_the_paper(tmp_path):
    """A claim whose row says tests = "calibration" (a threshold we calibrated, a value a spec
    recorded) is refuted under its own heading, and each paper's line counts the two apart."""
    claims = [
        record("MM-PAPER", verdict="refuted", expected="refuted"),
        record("MM-NUMBER", verdict="refuted", expected="refuted", tests="calibration"),
        record("MM-HOLDS"),
    ]
    path = write_claims(tmp_path, claims)
    html_path, md_path = report.build(path, tmp_path, lock=None)
    page, text = html_path.read_text(encoding="utf-8"), md_path.read_text(encoding="utf-8")
    ids = r'<article class="finding" id="finding-([^"]+)"'
    assert re.findall(ids, section(page, "findings")) == ["MM-PAPER"]
    assert re.findall(ids, section(page, "numbers")) == ["MM-NUMBER"]
    assert "## Numbers of our specs the suite refutes (1)" in text
    assert html.escape("refuted as read: 1 of the paper, 1 of our spec's numbers") in page
