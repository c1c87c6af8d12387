"""Render reports/claims.json (written by theorems.framework.plugin) as the human report.

Both files lead with the findings (reports/findings.py): the readings the suite refutes, each
with its minimal counterexample and the variant that holds; then what is unexpected or
undecided; then the verdict changes against the lock (and against an earlier claims.json
given with --against); then one table per paper.

`index.html` is self-contained: inline CSS, one inline script (the filter box over the
claims), figures embedded as data URIs, no external URL, so it opens from disk even when
copied alone. Each claim is linkable as index.html#claim-ID, and a filter as
index.html?q=TEXT&paper=P&kind=K&verdict=V. `claims.md` holds the same sections and tables
and links the figures by relative path; `summary.md` is its top alone (for a CI job summary).

    python -m reports.build [claims.json] [--out DIR] [--against OLD.json] [--lock FILE]
"""

from __future__ import annotations

import argparse
import base64
import html
import json
import mimetypes
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from reports import findings as found
from theorems.framework.shrink import reduced_text

# The papers in report order, with their titles; any other paper (a user's conjecture) follows.
PAPERS = {
    "2306.13596": "Max-Margin Token Selection in Attention Mechanism",
    "2505.17282": "Attention with Trained Embeddings Provably Selects Important Tokens",
    "2308.16898": "Transformers as Support Vector Machines",
    "2402.05738": "Implicit Bias and Fast Convergence Rates for Self-attention",
    "2403.08699": "Implicit Regularization of Gradient Flow on One-Layer Softmax Attention",
    "2410.14581": (
        "Optimizing Attention with Mirror Descent: Generalized Max-Margin Token Selection"
    ),
    "2403.08081": "Mechanics of Next Token Prediction with Self-Attention",
    "2402.18551": "Implicit Optimization Bias of Next-token Prediction in Linear Models",
}
FIGURES_ENV = "ATTN_FIGURES_DIR"  # theorems.framework.figures writes there when it is set
DEFAULT_CLAIMS = Path(__file__).resolve().parent / "claims.json"
#: The checkout the report belongs to: findings paths in claims.json are relative to it.
REPO_ROOT = Path(__file__).resolve().parents[1]
# The verdict lock the report compares with when claims.json does not name the one its run
# was judged against: ATTN_VERDICT_LOCK (as the gate), else the checkout's
# theorems/verdicts.lock.
LOCK_ENV = "ATTN_VERDICT_LOCK"
DEFAULT_LOCK = Path(__file__).resolve().parent.parent / "theorems" / "verdicts.lock"
TOP_FIELDS = ("generated", "profile", "versions", "claims")
CLAIM_FIELDS = (
    "id",
    "paper",
    "kind",
    "statement",
    "provenance",
    "expected",
    "verdict",
    "as_expected",
    "examples",
    "rejections",
    "inconclusive",
    "worst_slack",
    "metrics",
    "seconds",
    "counterexample",
    "falsifying_example",
    "error",
    "figures",
    "note",
    "nodeid",
)
COLUMNS = (
    "id",
    "kind",
    "statement",
    "provenance",
    "expected",
    "verdict",
    "examples (premise met)",
    "worst slack",
    "seconds",
    "figures",
)
TAG = re.compile(r"\[[^\]]+\]")
# Badge colour by the tag's first letter: [V]/[V-frag] green, [R+]/[R] blue, [U] orange,
# [D] purple; [R?] is orange like [U]; [N] and anything else grey.
BADGE_BY_LETTER = {"V": "verified", "R": "recalled", "U": "unsure", "D": "derived"}
# An innermost array of numbers as json.dumps(indent=...) lays it out (strings hold no newline).
NUMBER_ROW = re.compile(r"\[(\n[-+\d.eE,\s]+)\]")
MD_SPECIAL = re.compile(r"([\\`*_\[\]<>|&~])")


# --------------------------------------------------------------------------- the data


def load(claims_json: Path) -> dict:
    """The report document; ValueError naming the file (and claim, field) if malformed."""
    try:
        doc = json.loads(claims_json.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise ValueError(f"{claims_json}: not valid JSON: {exc}") from None
    missing = [f for f in TOP_FIELDS if f not in doc]
    if missing:
        raise ValueError(f"{claims_json}: missing top-level field(s): {', '.join(missing)}")
    for i, claim in enumerate(doc["claims"]):
        missing = [f for f in CLAIM_FIELDS if f not in claim]
        if missing:
            name = claim.get("id", f"#{i}")
            raise ValueError(f"{claims_json}: claim {name}: missing field(s): {', '.join(missing)}")
    for claim in doc["claims"]:  # a claim judged by an earlier run than the report's last
        claim["_earlier_run"] = claim.get("run") not in (None, doc["generated"])
    return doc


def summary_line(claims: list[dict]) -> str:
    """'N claims: H held, R refuted as expected, U unexpected, I inconclusive[, V vacuous]
    [, E errors]'."""
    verdicts = Counter(c["verdict"] for c in claims)
    refuted = sum(c["verdict"] == "refuted" and c["as_expected"] for c in claims)
    unexpected = sum(not c["as_expected"] for c in claims)
    line = (
        f"{len(claims)} claims: {verdicts['holds']} held, {refuted} refuted as expected, "
        f"{unexpected} unexpected, {verdicts['inconclusive']} inconclusive"
    )
    if verdicts["vacuous"]:
        line += f", {verdicts['vacuous']} vacuous"
    errors = verdicts["error"]
    return f"{line}, {errors} error{'s' * (errors != 1)}" if errors else line


def paper_line(claims: list[dict]) -> str:
    """A paper's summary line, with its refuted readings split: those of the paper's
    statements and those of our own spec's numbers (tests = "calibration")."""
    line = summary_line(claims)
    paper = len(found.refuted_readings(claims))
    ours = len(found.refuted_readings(claims, tests="calibration"))
    if paper or ours:
        line += f"; refuted as read: {paper} of the paper, {ours} of our spec's numbers"
    return line


# The "Not run" table: its columns, and the field of a skipped claim each one shows.
NOT_RUN_COLUMNS = ("claim", "paper", "kind", "statement", "why not run")
NOT_RUN_FIELDS = ("id", "paper", "kind", "statement", "reason")


def not_run_line(skipped: list[dict]) -> str:
    """'' or 'K claim(s) not run: ID, ID (below)': claims that ran no example, e.g. for want
    of data on disk; they have no verdict and are not among the N claims."""
    if not skipped:
        return ""
    ids = ", ".join(s["id"] for s in skipped)
    return f"{len(skipped)} claim{'s' * (len(skipped) != 1)} not run: {ids} (see the end)"


def by_paper(claims: list[dict]) -> list[tuple[str, list[dict]]]:
    """(paper, its claims in the given order): the known papers first, then the others."""
    groups: dict[str, list[dict]] = {paper: [] for paper in PAPERS}
    for claim in claims:
        groups.setdefault(claim["paper"], []).append(claim)
    return [(paper, group) for paper, group in groups.items() if group]


def paper_title(paper: str) -> str:
    title = PAPERS.get(paper)
    return f"arXiv {paper}: {title}" if title else f"Other claims: {paper}"


def meta_line(doc: dict) -> str:
    versions = ", ".join(f"{k} {v}" for k, v in doc["versions"].items() if v)
    device = f" · torch device {doc['device']}" if doc.get("device") else ""
    runs = doc.get("runs") or {}
    earlier = sorted(stamp for stamp in runs if stamp != doc["generated"])
    added = (
        f" · with {sum(runs[s]['claims'] for s in earlier)} claims of earlier runs "
        f"({', '.join(earlier)}; each claim names its run)"
        if earlier
        else ""
    )
    return f"generated {doc['generated']} · profile {doc['profile']}{device} · {versions}{added}"


def number(x) -> str:
    """3 significant digits; non-finite ratios arrive as the strings 'inf' / 'nan'."""
    return f"{x:.3g}" if isinstance(x, (int, float)) else str(x)


def slack_items(claim: dict) -> list[str]:
    return [f"{name}: {number(e['ratio'])}" for name, e in claim["worst_slack"].items()]


def counts_text(counts: dict[str, int]) -> str:
    return "; ".join(f"{reason} ×{n}" for reason, n in counts.items())


def metric_items(claim: dict) -> list[str]:
    return [
        f"{name} ∈ [{number(m['min'])}, {number(m['max'])}]" for name, m in claim["metrics"].items()
    ]


def counterexample_json(claim: dict) -> str:
    """The counterexample as indented JSON, a row of numbers per line; "" if there is none."""
    found = claim["counterexample"]
    if found is None:
        return ""
    text = json.dumps(found, indent=2, ensure_ascii=False)
    return NUMBER_ROW.sub(lambda row: "[" + " ".join(row[1].split()) + "]", text)


def figures_dir(claims_json: Path) -> Path:
    """Where the run wrote its figures: $ATTN_FIGURES_DIR, else figures/ beside claims.json."""
    return Path(os.environ.get(FIGURES_ENV) or claims_json.parent / "figures")


@dataclass(frozen=True)
class Top:
    """What the report leads with (reports/findings.py): the readings refuted as read, the
    claims that need attention, the verdict diffs (the lock's first), and notes on a baseline
    that could not be compared."""

    readings: list[found.Finding]
    attention: list[dict]
    conjectures: list[dict]
    diffs: list[tuple[str, found.Diff]]  # (what the baseline is, the diff against it)
    notes: list[str]
    # Readings of our own spec's numbers refuted (claims whose row says tests = "calibration")
    numbers: list[found.Finding] = ()


def top_of(doc: dict, lock: Path | None, against: tuple[dict, str] | None) -> Top:
    claims, diffs, notes = doc["claims"], [], []
    if lock is not None:
        try:
            diff = found.diff_lock(claims, lock)
        except ValueError as exc:  # a malformed lock: the gate says so; the report notes it
            diff, why = None, str(exc).splitlines()[0]
            notes.append(f"not compared with the verdict lock: {why}")
        else:
            if diff is None:
                notes.append(f"not compared with the verdict lock: no file {lock}")
        diffs += [("the verdict lock", diff)] if diff else []
    if against is not None:
        diffs.append(("the earlier report", found.diff_report(claims, *against)))
    return Top(
        found.refuted_readings(claims),
        found.needs_attention(claims),
        found.conjectures(claims),
        diffs,
        notes,
        found.refuted_readings(claims, tests="calibration"),
    )


def clip(text: str, limit: int) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def witness_text(claim: dict, limit: int = 360) -> str:
    """The minimal counterexample on one line: the shrunk call Hypothesis printed, without
    its "Falsifying example:" prefix (else the instance as JSON); "" if there is none."""
    text = claim["falsifying_example"] or ""
    text = re.sub(r"^Falsifying (explicit )?example[^:]*:\s*", "", text.strip())
    text = re.sub(r"\(\s+", "(", re.sub(r",?\s*\)$", ")", " ".join(text.split())))
    if not text and claim["counterexample"] is not None:
        text = json.dumps(claim["counterexample"], ensure_ascii=False)
    return clip(text, limit) if text else ""


def robustness_text(claim: dict) -> str:
    """What the counterexample did on its twins (theorems.framework.twins.robustness)."""
    found = claim.get("robustness")
    if not found or not found["twins"]:
        return ""
    outcomes = ", ".join(f"{twin} {got}" for twin, got in found["twins"].items())
    if found["holds_on"]:
        return f"fragile (holds on {', '.join(found['holds_on'])}): {outcomes}"
    return f"robust: {outcomes}"


def run_text(claim: dict) -> str:
    """The earlier run that judged the claim, where the report adds up several runs
    (records.carry_over); "" for a claim of the report's own run."""
    return claim["run"] if claim.get("_earlier_run") else ""


def why_text(claim: dict) -> str:
    """Why a claim needs attention, in one line."""
    if claim["error"]:
        return claim["error"].splitlines()[0]
    if claim["inconclusive"]:
        return "inconclusive: " + counts_text(claim["inconclusive"])
    reason = claim.get("reason") or ""
    if not claim["as_expected"]:
        expected = f"expected {claim['expected']}, the run found {claim['verdict']}"
        return f"{expected}: {reason}" if reason else expected
    return reason


def diff_title(label: str, diff: found.Diff) -> str:
    return f"Against {label} ({diff.source})"


def diff_line(diff: found.Diff) -> str:
    changed, new = len(diff.changed), sum(c.what == "new" for c in diff.changes)
    gone = sum(c.what == "not in this run" for c in diff.changes)
    parts = [
        f"{changed} verdict{'s' * (changed != 1)} changed of {diff.compared} claims compared"
        if changed
        else f"no verdict changed ({diff.compared} claims compared)"
    ]
    if new:
        parts.append(f"{new} new claim{'s' * (new != 1)}")
    if gone:
        parts.append(f"{gone} claim{'s' * (gone != 1)} no longer in the report")
    if diff.missing and not gone:
        parts.append(f"{diff.missing} pinned claim{'s' * (diff.missing != 1)} not in this run")
    return "; ".join(parts)


INTRO_READINGS = (
    "Statements of the papers, as read, that are false: the minimal counterexample the search "
    "found, and the narrowest variant that holds."
)
INTRO_NUMBERS = (
    "Numbers of our own specs that the runs do not reproduce: a threshold we calibrated, a "
    "value a spec recorded, a spec's test heuristic. They say nothing against a paper; each "
    'claim\'s row says so (tests = "calibration").'
)
NO_READINGS = "None in this run."
NO_ATTENTION = (
    "None: every verdict is the expected one, and none is inconclusive, vacuous or an error."
)
NO_VARIANT = "no variant that holds is known yet"


# --------------------------------------------------------------------------- HTML

CSS = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:#1f2328;
  margin:1.5rem auto;max-width:1600px;padding:0 1rem}
h1{font-size:1.45rem;margin:0 0 .5rem}
.summary{font-size:1.1rem;font-weight:600;margin:0;padding:.6rem .9rem;background:#f3f4f6;
  border-left:4px solid #2563eb;border-radius:4px}
.meta{color:#6b7280;font-size:.8rem;margin:.4rem 0 0}
h2{font-size:1.1rem;margin:2rem 0 .2rem}
h2+p{color:#4b5563;margin:0 0 .5rem}
table{border-collapse:collapse;width:100%;table-layout:fixed}
th:nth-child(1){width:130px}th:nth-child(2){width:90px}th:nth-child(4){width:110px}
th:nth-child(5){width:75px}th:nth-child(6){width:110px}th:nth-child(7){width:80px}
th:nth-child(8){width:130px}th:nth-child(9){width:65px}th:nth-child(10){width:176px}
th{background:#f6f8fa;text-align:left;font-weight:600;position:sticky;top:0;z-index:1}
th,td{padding:.35rem .5rem;vertical-align:top}
tbody.claim{border-bottom:1px solid #d0d7de}
tbody.unexpected{background:#fff1f0}
tbody.unexpected td:first-child{box-shadow:inset 4px 0 #dc2626}
td.id{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.85rem;overflow-wrap:anywhere}
td.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.slack{font-size:.85rem}
td.slack div{overflow-wrap:anywhere}
td.details{padding-top:0}
.badge{display:inline-block;padding:0 .45em;margin:0 .15em .15em 0;border-radius:.7em;
  font-size:.8rem;font-weight:600;color:#fff;background:#6b7280;white-space:nowrap}
.badge.verified{background:#15803d}.badge.recalled{background:#1d4ed8}
.badge.unsure{background:#d97706}.badge.derived{background:#7e22ce}
.prov{font-size:.8rem;color:#4b5563}
.verdict{font-weight:700}
.v-holds{color:#15803d}.v-refuted{color:#be123c}.v-inconclusive{color:#b45309}.v-vacuous{color:#6b21a8}
.v-error{color:#fff;background:#1f2328;padding:0 .3em;border-radius:3px}
.ok{color:#6b7280;font-size:.8rem}.bad{color:#dc2626;font-size:.8rem;font-weight:700}
.note{color:#374151;font-style:italic;margin:.15rem 0}
.reasons{margin:.15rem 0;color:#92400e}
details{margin:.15rem 0}
summary{cursor:pointer;color:#374151;font-size:.85rem}
pre{background:#f6f8fa;padding:.5rem;margin:.2rem 0;overflow:auto;max-height:24rem;
  font-size:.8rem;white-space:pre-wrap;word-break:break-word}
ul{margin:.2rem 0;padding-left:1.2rem;font-size:.85rem}
img.fig{display:block;width:160px;margin:0 0 .3rem;border:1px solid #d0d7de;
  border-radius:4px;background:#fff;cursor:zoom-in}
img.fig:focus{position:fixed;inset:0;margin:auto;width:auto;max-width:94vw;max-height:94vh;
  z-index:10;box-shadow:0 0 0 100vmax rgba(0,0,0,.6);outline:none;cursor:zoom-out}
nav.toc{margin:.6rem 0 0;font-size:.9rem}nav.toc a{margin-right:1rem}
.findings{display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:.7rem}
.finding{background:#fef2f2;border-left:5px solid #be123c;border-radius:4px;padding:.5rem .8rem}
.finding h3{font-size:1rem;margin:0 0 .3rem}
.finding h3 a{font-family:ui-monospace,Menlo,Consolas,monospace}
.finding p{margin:.25rem 0}
.finding .where{color:#6b7280;font-weight:400;font-size:.8rem}
.lbl{display:inline-block;min-width:7.5rem;margin-right:.4rem;font-weight:700;color:#7f1d1d}
.holds-instead .lbl{color:#14532d}
.finding code{font-size:.8rem;overflow-wrap:anywhere}
.holds-instead{background:#f0fdf4;padding:.2rem .4rem;border-radius:3px}
.none{color:#4b5563}
.filter{display:flex;flex-wrap:wrap;gap:.5rem;align-items:center;margin:.4rem 0 .6rem;
  padding:.5rem;background:#f6f8fa;border-radius:4px}
.filter input{flex:1 1 18rem;font:inherit;padding:.3rem .5rem}
.filter select{font:inherit;padding:.25rem}
#filter-count{color:#4b5563;font-size:.85rem}
tbody.claim:target,tr.not-run:target{outline:3px solid #2563eb}
.missing{display:inline-block;padding:.3rem .5rem;border:1px dashed #dc2626;color:#b91c1c;
  font-size:.8rem;margin-bottom:.3rem}
"""


def esc(value) -> str:
    return html.escape(str(value))


def link(claim_id: str) -> str:
    """A link to the claim's row (its anchor claim-ID)."""
    return f'<a href="#{esc("claim-" + claim_id)}">{esc(claim_id)}</a>'


def badge_class(tag: str) -> str:
    return "unsure" if tag == "[R?]" else BADGE_BY_LETTER.get(tag[1:2], "other")


def provenance_html(text: str) -> str:
    badges = "".join(
        f'<span class="badge {badge_class(t)}">{esc(t)}</span>' for t in TAG.findall(text)
    )
    rest = TAG.sub("", text).strip()
    return badges + (f' <span class="prov">{esc(rest)}</span>' if rest else "")


def examples_text(claim: dict) -> str:
    """'40 (met 12/100)': examples that completed, and in how many examples the claim's
    premise (or, undeclared, its assumptions) held out of those tried."""
    premise = claim.get("premise")
    if not premise:
        return str(claim["examples"])
    return f"{claim['examples']} (met {premise['met']}/{premise['of']})"


def verdict_html(claim: dict) -> str:
    verdict = esc(claim["verdict"])
    mark = (
        '<span class="ok">as expected</span>'
        if claim["as_expected"]
        else '<span class="bad">UNEXPECTED</span>'
    )
    return f'<span class="verdict v-{verdict}">{verdict}</span><br>{mark}'


def figure_html(folder: Path, name: str) -> str:
    try:
        data = base64.b64encode((folder / name).read_bytes()).decode("ascii")
    except OSError:
        return f'<span class="missing">figure missing: {esc(name)}</span>'
    mime = mimetypes.guess_type(name)[0] or "image/png"
    return (
        f'<img class="fig" tabindex="0" alt="{esc(name)}" title="{esc(name)} (click to enlarge)" '
        f'src="data:{mime};base64,{data}">'
    )


def fold(summary: str, body: str) -> str:
    return f"<details><summary>{esc(summary)}</summary>{body}</details>"


def items_html(items: list[str]) -> str:
    return "<ul>" + "".join(f"<li>{esc(item)}</li>" for item in items) + "</ul>"


def details_html(claim: dict) -> str:
    """What does not fit a table cell: note, reasons, counterexample, error, evidence."""
    parts = []
    if claim["note"]:
        parts.append(f'<p class="note">{esc(claim["note"])}</p>')
    if claim.get("findings_href"):
        parts.append(f'<p class="note"><a href="{esc(claim["findings_href"])}">findings</a></p>')
    if claim["inconclusive"]:
        parts.append(
            f'<p class="reasons">inconclusive: {esc(counts_text(claim["inconclusive"]))}</p>'
        )
    if claim.get("verdict") == "vacuous" and claim.get("reason"):
        parts.append(f'<p class="reasons">vacuous: {esc(claim["reason"])}</p>')
    if run_text(claim):
        parts.append(f'<p class="reasons">judged by an earlier run: {esc(run_text(claim))}</p>')
    if robustness_text(claim):
        parts.append(
            f'<p class="reasons">counterexample on its twins: {esc(robustness_text(claim))}</p>'
        )
    if reduced_text(claim.get("reduced")):
        parts.append(f'<p class="reasons">{esc(reduced_text(claim.get("reduced")))}</p>')
    found = counterexample_json(claim)
    if found:
        parts.append(fold("minimal counterexample", f"<pre>{esc(found)}</pre>"))
    if claim["falsifying_example"]:
        parts.append(fold("falsifying example", f"<pre>{esc(claim['falsifying_example'])}</pre>"))
    if claim["error"]:
        first = claim["error"].splitlines()[0]
        parts.append(fold(f"error: {first}", f"<pre>{esc(claim['error'])}</pre>"))
    if claim["rejections"]:
        total = sum(claim["rejections"].values())
        parts.append(
            fold(
                f"{total} rejected examples",
                items_html([f"{r} ×{n}" for r, n in claim["rejections"].items()]),
            )
        )
    if claim["metrics"]:
        parts.append(fold("metrics", items_html(metric_items(claim))))
    return "".join(parts)


def claim_html(claim: dict, folder: Path) -> str:
    """One <tbody>: the claim's row, and a row of details under it if it has any."""
    details = details_html(claim)
    span = 2 if details else 1
    figures = "".join(figure_html(folder, name) for name in claim["figures"])
    slack = "".join(f"<div>{esc(s)}</div>" for s in slack_items(claim))
    anchor = esc(f"claim-{claim['id']}")
    cells = (
        f'<td class="id" title="{esc(claim["nodeid"])}">{link(claim["id"])}</td>'
        f"<td>{esc(claim['kind'])}</td>"
        f"<td>{esc(claim['statement'])}</td>"
        f"<td>{provenance_html(claim['provenance'])}</td>"
        f"<td>{esc(claim['expected'])}</td>"
        f"<td>{verdict_html(claim)}</td>"
        f'<td class="num">{esc(examples_text(claim))}</td>'
        f'<td class="slack">{slack}</td>'
        f'<td class="num">{claim["seconds"]:.2f}</td>'
        f'<td rowspan="{span}">{figures}</td>'
    )
    below = (
        f'<tr><td class="details" colspan="{len(COLUMNS) - 1}">{details}</td></tr>'
        if details
        else ""
    )
    unexpected = "" if claim["as_expected"] else " unexpected"
    return (
        f'<tbody id="{anchor}" class="claim{unexpected}"{filter_attrs(claim)}>'
        f"<tr>{cells}</tr>{below}</tbody>"
    )


def filter_attrs(claim: dict, verdict: str | None = None) -> str:
    """The data-* attributes the filter box reads (FILTER_SCRIPT)."""
    values = {
        "claim": claim["id"],
        "paper": claim["paper"],
        "kind": claim["kind"],
        "verdict": verdict or claim["verdict"],
        "expected": claim["expected"],
    }
    return "".join(f' data-{k}="{esc(v)}"' for k, v in values.items())


def paper_html(paper: str, claims: list[dict], folder: Path) -> str:
    head = "".join(f"<th>{esc(c)}</th>" for c in COLUMNS)
    rows = "".join(claim_html(c, folder) for c in claims)
    return (
        f'<section class="paper" id="{esc(f"paper-{paper}")}"><h2>{esc(paper_title(paper))}</h2>'
        f"<p>{esc(paper_line(claims))}</p>"
        f"<table><thead><tr>{head}</tr></thead>{rows}</table></section>"
    )


def not_run_html(skipped: list[dict]) -> str:
    if not skipped:
        return ""
    head = "".join(f"<th>{esc(c)}</th>" for c in NOT_RUN_COLUMNS)
    rows = "".join(
        f'<tr id="{esc("claim-" + s["id"])}" class="not-run"{filter_attrs(s, "not run")}>'
        + "".join(f"<td>{esc(s[k])}</td>" for k in NOT_RUN_FIELDS)
        + "</tr>"
        for s in skipped
    )
    return (
        '<section class="paper" id="not-run"><h2>Not run in this run</h2>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>"
    )


def finding_html(finding: found.Finding) -> str:
    claim = finding.claim
    where = f"{claim['paper']} · {claim['kind']}"
    witness = witness_text(claim)
    full = counterexample_json(claim)
    parts = [
        f'<h3>{link(claim["id"])} <span class="where">{esc(where)}</span> '
        f"{provenance_html(claim['provenance'])}</h3>",
        f'<p><span class="lbl">As read</span>{esc(clip(claim["statement"], 360))}</p>',
        f'<p><span class="lbl">Counterexample</span><code>{esc(witness or "(not recorded)")}</code>'
        "</p>",
    ]
    if full:
        parts.append(fold("the counterexample's instance", f"<pre>{esc(full)}</pre>"))
    for variant, record in finding.variants or ((None, None),):
        if variant is None:
            body = f'<span class="none">{esc(NO_VARIANT)}</span>'
        elif record is None:
            body = f"{link(variant)} (not in this run)"
        else:
            verdict = esc(record["verdict"])
            body = (
                f'{link(variant)} <span class="verdict v-{verdict}">{verdict}</span> '
                f"{esc(clip(record['statement'], 300))}"
            )
        parts.append(f'<p class="holds-instead"><span class="lbl">Holds instead</span>{body}</p>')
    anchor = esc(f"finding-{claim['id']}")
    return f'<article class="finding" id="{anchor}">{"".join(parts)}</article>'


def readings_html(top: Top) -> str:
    out = ""
    for anchor, title, intro, found_ in (
        ("findings", "Readings the suite refutes", INTRO_READINGS, top.readings),
        ("numbers", "Numbers of our specs the suite refutes", INTRO_NUMBERS, top.numbers),
    ):
        cards = "".join(finding_html(f) for f in found_)
        none = f'<p class="none">{NO_READINGS}</p>'
        body = f'<div class="findings">{cards}</div>' if cards else none
        out += (
            f'<section id="{anchor}"><h2>{title} ({len(found_)})</h2>'
            f"<p>{esc(intro)}</p>{body}</section>"
        )
    return out


def conjecture_text(claim: dict) -> str:
    """A conjecture's finding in one line: its counterexample and what the assertion said,
    or what it held on."""
    if claim["verdict"] == "refuted":
        said = f" — {claim['assertion']}" if claim.get("assertion") else ""
        return f"counterexample: {witness_text(claim) or '(not recorded)'}{said}"
    return claim.get("reason") or claim["verdict"]


def conjectures_html(top: Top) -> str:
    if not top.conjectures:
        return ""
    rows = "".join(
        f"<tr><td>{link(c['id'])}</td>"
        f'<td class="verdict v-{esc(c["verdict"])}">{esc(c["verdict"])}</td>'
        f"<td>{esc(clip(c['statement'], 300))}</td><td>{esc(clip(conjecture_text(c), 400))}</td>"
        "</tr>"
        for c in top.conjectures
    )
    head = "".join(f"<th>{c}</th>" for c in ("conjecture", "verdict", "statement", "finding"))
    return (
        f'<section id="conjectures"><h2>Conjectures ({len(top.conjectures)})</h2>'
        f"<table><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></section>"
    )


def attention_html(top: Top) -> str:
    if not top.attention:
        body = f'<p class="none">{esc(NO_ATTENTION)}</p>'
    else:
        head = "".join(f"<th>{c}</th>" for c in ("claim", "paper", "expected", "verdict", "why"))
        rows = "".join(
            f"<tr><td>{link(c['id'])}</td><td>{esc(c['paper'])}</td><td>{esc(c['expected'])}"
            f'</td><td class="verdict v-{esc(c["verdict"])}">{esc(c["verdict"])}</td>'
            f"<td>{esc(clip(why_text(c), 300))}</td></tr>"
            for c in top.attention
        )
        body = (
            f'<table class="attention"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>'
        )
    return (
        f'<section id="attention"><h2>Unexpected or undecided ({len(top.attention)})</h2>'
        f"{body}</section>"
    )


def diff_html(label: str, diff: found.Diff) -> str:
    rows = "".join(
        f"<tr><td>{link(c.id)}</td><td>{esc(c.before or '—')}</td><td>{esc(c.after or '—')}</td>"
        f"<td>{esc(c.what)}</td></tr>"
        for c in diff.changes
    )
    table = (
        "<table><thead><tr><th>claim</th><th>before</th><th>now</th><th></th></tr></thead>"
        f"<tbody>{rows}</tbody></table>"
        if rows
        else ""
    )
    return f"<h3>{esc(diff_title(label, diff))}</h3><p>{esc(diff_line(diff))}</p>{table}"


def changes_html(top: Top) -> str:
    parts = [diff_html(label, d) for label, d in top.diffs]
    parts += [f'<p class="none">{esc(note)}</p>' for note in top.notes]
    return f'<section id="changes"><h2>Verdict changes</h2>{"".join(parts)}</section>'


def filter_html(claims: list[dict]) -> str:
    def select(key: str, label: str, values: list[str]) -> str:
        options = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
        return (
            f'<select id="filter-{key}" aria-label="{label}">'
            f'<option value="">{label}</option>{options}</select>'
        )

    papers = [p for p, _ in by_paper(claims)]
    kinds = sorted({c["kind"] for c in claims})
    verdicts = sorted({c["verdict"] for c in claims})
    return (
        '<div class="filter"><input type="search" id="filter-q" '
        'placeholder="filter by id, paper, kind or verdict, e.g. TF- refuted" '
        'aria-label="filter the claims">'
        + select("paper", "every paper", papers)
        + select("kind", "every kind", kinds)
        + select("verdict", "every verdict", verdicts)
        + '<span id="filter-count"></span></div>'
    )


# The filter box: every word of the text must occur in the claim's id, paper, kind, verdict
# or expectation, and each chosen menu value must equal its field. The state is mirrored in
# the page's query string (?q=&paper=&kind=&verdict=), so a filtered view is a link; a link
# to a claim that the filter hides (#claim-ID) clears the filter.
FILTER_SCRIPT = r"""
(function () {
  var box = document.getElementById("filter-q"), keys = ["paper", "kind", "verdict"];
  var menus = {}, rows = Array.prototype.slice.call(document.querySelectorAll("[data-claim]"));
  var count = document.getElementById("filter-count");
  keys.forEach(function (k) { menus[k] = document.getElementById("filter-" + k); });
  function apply() {
    var words = box.value.toLowerCase().split(/\s+/).filter(Boolean), shown = 0;
    rows.forEach(function (row) {
      var d = row.dataset, text = [d.claim, d.paper, d.kind, d.verdict, d.expected]
        .join(" ").toLowerCase();
      var ok = words.every(function (w) { return text.indexOf(w) >= 0; }) &&
        keys.every(function (k) { return !menus[k].value || d[k] === menus[k].value; });
      row.hidden = !ok;
      shown += ok ? 1 : 0;
    });
    document.querySelectorAll("section.paper").forEach(function (s) {
      s.hidden = !s.querySelector("[data-claim]:not([hidden])");
    });
    count.textContent = shown + " of " + rows.length + " claims shown";
    var query = new URLSearchParams();
    if (box.value) { query.set("q", box.value); }
    keys.forEach(function (k) { if (menus[k].value) { query.set(k, menus[k].value); } });
    var search = query.toString() ? "?" + query.toString() : "";
    try { history.replaceState(null, "", location.pathname + search + location.hash); }
    catch (e) { /* some browsers refuse it on file:// pages; the filter still works */ }
  }
  function reveal() {
    var target = location.hash && document.getElementById(location.hash.slice(1));
    if (target && target.closest("[hidden]")) {
      box.value = "";
      keys.forEach(function (k) { menus[k].value = ""; });
      apply();
      target.scrollIntoView();
    }
  }
  var given = new URLSearchParams(location.search);
  box.value = given.get("q") || "";
  keys.forEach(function (k) { menus[k].value = given.get(k) || ""; });
  box.addEventListener("input", apply);
  keys.forEach(function (k) { menus[k].addEventListener("change", apply); });
  window.addEventListener("hashchange", reveal);
  apply();
  reveal();
})();
"""


def render_html(doc: dict, folder: Path, top: Top) -> str:
    claims, skipped = doc["claims"], doc.get("skipped", [])
    sections = "".join(paper_html(p, group, folder) for p, group in by_paper(claims))
    sections += not_run_html(skipped)
    not_run = f'<p class="summary">{esc(not_run_line(skipped))}</p>' if skipped else ""
    conj = '<a href="#conjectures">Conjectures</a>' if top.conjectures else ""
    toc = (
        f'<nav class="toc"><a href="#findings">Readings refuted</a>'
        f'<a href="#numbers">Spec numbers refuted</a>{conj}'
        '<a href="#attention">Unexpected or undecided</a><a href="#changes">Verdict changes</a>'
        '<a href="#claims">All claims</a></nav>'
    )
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>attention-theorems: claims report</title><style>{CSS}</style></head><body>"
        "<h1>attention-theorems: claims report</h1>"
        f'<p class="summary">{esc(summary_line(claims))}</p>{not_run}'
        f'<p class="meta">{esc(meta_line(doc))}</p>{toc}'
        f"{readings_html(top)}{conjectures_html(top)}{attention_html(top)}{changes_html(top)}"
        f'<section id="claims"><h2>All claims</h2>{filter_html(claims)}{sections}</section>'
        f"<script>{FILTER_SCRIPT}</script></body></html>\n"
    )


# --------------------------------------------------------------------------- Markdown


def md(value) -> str:
    """Text for one Markdown table cell or line: specials escaped, on one line."""
    return MD_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def md_link(claim_id: str) -> str:
    """A link to the claim's details section (GitHub's anchor of its '### ID' heading)."""
    return f"[{md(claim_id)}](#{claim_id.lower()})"


def md_block(text: str, lang: str) -> list[str]:
    """A fenced code block whose fence is longer than any backtick run inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return [f"{fence}{lang}", text, fence, ""]


def md_figure(folder: Path, out_dir: Path, name: str) -> str:
    path = folder / name
    if not path.is_file():
        return f"figure missing: {md(name)}"
    link = quote(Path(os.path.relpath(path, out_dir)).as_posix())
    return f"[{md(name)}]({link})"


def md_row(claim: dict, folder: Path, out_dir: Path) -> str:
    mark = "" if claim["as_expected"] else " **UNEXPECTED**"
    cells = (
        md_link(claim["id"]),
        md(claim["kind"]),
        md(claim["statement"]),
        md(claim["provenance"]),
        md(claim["expected"]),
        f"**{md(claim['verdict'])}**{mark}",
        md(examples_text(claim)),
        "<br>".join(md(s) for s in slack_items(claim)),
        f"{claim['seconds']:.2f}",
        "<br>".join(md_figure(folder, out_dir, name) for name in claim["figures"]),
    )
    return "| " + " | ".join(cells) + " |"


def md_details(claim: dict) -> list[str]:
    """A section under the paper's table: test id, note, counts, code blocks."""
    lines = [f"### {claim['id']}", "", f"test: {md(claim['nodeid'])}", ""]
    if claim["note"]:
        lines += [f"*{md(claim['note'])}*", ""]
    if claim.get("findings_href"):
        lines += [f"findings: [{md(claim['findings'])}]({claim['findings_href']})", ""]
    facts = {
        "vacuous": claim.get("reason", "") if claim.get("verdict") == "vacuous" else "",
        "inconclusive": counts_text(claim["inconclusive"]),
        "counterexample on its twins": robustness_text(claim),
        "counterexample reduced": reduced_text(claim.get("reduced")) or "",
        "judged by an earlier run": run_text(claim),
        "rejected": counts_text(claim["rejections"]),
        "metrics": "; ".join(metric_items(claim)),
    }
    bullets = [f"- {label}: {md(text)}" for label, text in facts.items() if text]
    lines += [*bullets, ""] if bullets else []
    blocks = (
        ("Minimal counterexample", counterexample_json(claim), "json"),
        ("Falsifying example", claim["falsifying_example"], "text"),
        ("Error", claim["error"], "text"),
    )
    for title, text, lang in blocks:
        if text:
            lines += [f"{title}:", "", *md_block(text, lang)]
    return lines


def md_findings(title: str, intro: str, findings: list[found.Finding]) -> list[str]:
    lines = [f"## {title} ({len(findings)})", "", intro, ""]
    for finding in findings:
        claim = finding.claim
        lines.append(
            f"- **{md_link(claim['id'])}** ({md(claim['paper'])}, {md(claim['kind'])}; "
            f"{md(claim['provenance'])}): {md(clip(claim['statement'], 420))}"
        )
        lines.append(f"  - counterexample: {md(witness_text(claim) or '(not recorded)')}")
        for variant, record in finding.variants or ((None, None),):
            if variant is None:
                text = NO_VARIANT
            elif record is None:
                text = f"{md_link(variant)} (not in this run)"
            else:
                text = (
                    f"{md_link(variant)} (**{md(record['verdict'])}**): "
                    f"{md(clip(record['statement'], 300))}"
                )
            lines.append(f"  - holds instead: {text}")
    return lines + ([NO_READINGS] if not findings else [])


def md_top(top: Top) -> list[str]:
    lines = md_findings("Readings the suite refutes", INTRO_READINGS, top.readings)
    ours = md_findings("Numbers of our specs the suite refutes", INTRO_NUMBERS, top.numbers)
    lines += ["", *ours]
    if top.conjectures:
        lines += ["", f"## Conjectures ({len(top.conjectures)})", ""]
        lines += ["| conjecture | verdict | statement | finding |", "| --- | --- | --- | --- |"]
        lines += [
            f"| {md_link(c['id'])} | **{md(c['verdict'])}** | {md(clip(c['statement'], 300))} "
            f"| {md(clip(conjecture_text(c), 400))} |"
            for c in top.conjectures
        ]
    lines += ["", f"## Unexpected or undecided ({len(top.attention)})", ""]
    if top.attention:
        lines += ["| claim | paper | expected | verdict | why |", "| --- | --- | --- | --- | --- |"]
        lines += [
            f"| {md_link(c['id'])} | {md(c['paper'])} | {md(c['expected'])} | "
            f"**{md(c['verdict'])}** | {md(clip(why_text(c), 300))} |"
            for c in top.attention
        ]
    else:
        lines.append(NO_ATTENTION)
    lines += ["", "## Verdict changes", ""]
    for label, diff in top.diffs:
        lines += [f"### {md(diff_title(label, diff))}", "", md(diff_line(diff)), ""]
        if diff.changes:
            lines += ["| claim | before | now | |", "| --- | --- | --- | --- |"]
            lines += [
                f"| {md_link(c.id)} | {md(c.before or '—')} | {md(c.after or '—')} | {c.what} |"
                for c in diff.changes
            ]
            lines.append("")
    lines += [*(md(note) for note in top.notes), ""] if top.notes else []
    return lines


def md_head(doc: dict) -> list[str]:
    """The title, summary line, claims not run and the run's facts."""
    claims, skipped = doc["claims"], doc.get("skipped", [])
    lines = ["# attention-theorems: claims report", "", f"**{summary_line(claims)}**", ""]
    lines += [md(not_run_line(skipped)), ""] if skipped else []
    return lines + [md(meta_line(doc)), ""]


def render_summary_md(doc: dict, top: Top) -> str:
    """summary.md: the top of claims.md and one line per paper, no tables. For places with
    a size cap, e.g. a GitHub job summary (1 MiB per step; claims.md of the full suite is
    close to that)."""
    claims = doc["claims"]
    lines = md_head(doc)
    lines += md_top(top)
    lines += ["## Claims by paper", ""]
    lines += [f"- {md(paper_title(p))}: {paper_line(g)}" for p, g in by_paper(claims)]
    lines += [
        "",
        "Every claim, its evidence and figures: claims.md and index.html beside this file.",
    ]
    return "\n".join(lines).rstrip() + "\n"


def render_md(doc: dict, folder: Path, out_dir: Path, top: Top) -> str:
    claims, skipped = doc["claims"], doc.get("skipped", [])
    lines = md_head(doc)
    lines += md_top(top)
    for paper, group in by_paper(claims):
        lines += [f"## {md(paper_title(paper))}", "", paper_line(group), ""]
        lines += ["| " + " | ".join(COLUMNS) + " |", "|" + " --- |" * len(COLUMNS)]
        lines += [md_row(c, folder, out_dir) for c in group]
        lines += [""]
        for claim in group:
            lines += md_details(claim)
    if skipped:
        lines += ["## Not run in this run", ""]
        lines += ["| " + " | ".join(NOT_RUN_COLUMNS) + " |", "|" + " --- |" * len(NOT_RUN_COLUMNS)]
        lines += ["| " + " | ".join(md(s[k]) for k in NOT_RUN_FIELDS) + " |" for s in skipped]
    return "\n".join(lines).rstrip() + "\n"


# --------------------------------------------------------------------------- entry points


def default_lock(doc: dict) -> Path:
    """The lock the run was judged against (recorded by the plugin), else $ATTN_VERDICT_LOCK,
    else the checkout's."""
    return Path(doc.get("lock") or os.environ.get(LOCK_ENV) or DEFAULT_LOCK)


def prepare(
    claims_json: Path, *, lock: Path | None | str = "default", against: Path | None = None
) -> tuple[dict, Top]:
    """The report document and what its top says. `lock`: the verdict lock to diff against
    ("default": the one the run was judged against, as claims.json records it, else
    $ATTN_VERDICT_LOCK, else the checkout's theorems/verdicts.lock; None: no lock diff).
    `against`: an earlier claims.json to diff against too. A malformed claims.json (either)
    raises ValueError naming it."""
    doc = load(Path(claims_json))
    old = (load(Path(against)), str(against)) if against is not None else None
    lock = default_lock(doc) if lock == "default" else lock
    return doc, top_of(doc, Path(lock) if lock is not None else None, old)


def changes_lines(top: Top) -> list[str]:
    """The verdict diffs as plain lines, for a terminal."""
    lines = []
    for label, diff in top.diffs:
        lines.append(f"{diff_title(label, diff)}: {diff_line(diff)}")
        lines += [
            f"  {c.id}: {c.before or '—'} -> {c.after or '—'} ({c.what})" for c in diff.changes
        ]
    return lines + top.notes


def with_findings_links(doc: dict, out_dir: Path) -> dict:
    """``doc`` with each claim's findings (a path in the checkout, with its anchor) also as a
    link relative to ``out_dir`` (``findings_href``), where the report is written."""
    claims = []
    for claim in doc.get("claims", []):
        found = claim.get("findings")
        if found:
            path, _, anchor = found.partition("#")
            target = Path(path) if Path(path).is_absolute() else REPO_ROOT / path
            href = Path(os.path.relpath(target, out_dir.resolve())).as_posix()
            claim = {**claim, "findings_href": f"{href}#{anchor}" if anchor else href}
        claims.append(claim)
    return {**doc, "claims": claims}


def write(doc: dict, top: Top, claims_json: Path, out_dir: Path) -> tuple[Path, Path]:
    """Write out_dir/index.html and out_dir/claims.md (and summary.md, their top); return the
    paths of the first two."""
    folder = figures_dir(Path(claims_json))
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    doc = with_findings_links(doc, out_dir)
    html_path, md_path = out_dir / "index.html", out_dir / "claims.md"
    html_path.write_text(render_html(doc, folder, top), encoding="utf-8")
    md_path.write_text(render_md(doc, folder, out_dir, top), encoding="utf-8")
    (out_dir / "summary.md").write_text(render_summary_md(doc, top), encoding="utf-8")
    return html_path, md_path


def build(
    claims_json: Path,
    out_dir: Path,
    *,
    lock: Path | None | str = "default",
    against: Path | None = None,
) -> tuple[Path, Path]:
    """Write out_dir/index.html and out_dir/claims.md from claims_json (see `prepare`)."""
    doc, top = prepare(claims_json, lock=lock, against=against)
    return write(doc, top, claims_json, out_dir)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m reports.build",
        description="Render claims.json as index.html and claims.md.",
    )
    parser.add_argument(
        "claims", nargs="?", type=Path, default=DEFAULT_CLAIMS, help="default: reports/claims.json"
    )
    parser.add_argument("--out", type=Path, help="output folder (default: that of claims.json)")
    parser.add_argument(
        "--against", type=Path, help="an earlier claims.json: list the verdicts that changed"
    )
    parser.add_argument(
        "--lock", type=Path, help=f"the verdict lock to diff against (default: {DEFAULT_LOCK})"
    )
    args = parser.parse_args(argv)
    try:
        doc, top = prepare(args.claims, lock=args.lock or "default", against=args.against)
        paths = write(doc, top, args.claims, args.out or args.claims.parent)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    print(*paths, *changes_lines(top), sep="\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
