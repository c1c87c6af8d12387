"""`python -m theorems explain ID` and `python -m theorems report`: one claim on one page, and
the report rebuilt without a rerun (theorems/framework/explain.py, cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.test_report import record, write_claims
from theorems.framework import cli

#: A real claim (the registry gives its statement) with a saved counterexample in the store.
REFUTED = "MM-THM-G"
FALSIFYING = "Falsifying example: test_theorem_g(\n    inst=PromptInstance(n=2),\n)"


def _report(tmp_path: Path) -> Path:
    entry = record(
        REFUTED,
        verdict="refuted",
        expected="refuted",
        reason="a counterexample was found",
        falsifying_example=FALSIFYING,
        worst_slack={"1 − cos": {"observed": 3.0e-4, "bound": 1.0e-6, "ratio": 300.0}},
        nodeid="theorems/maxmargin/claims_gd.py::test_theorem_g",
    )
    return write_claims(tmp_path, [entry])


def test_explain_prints_statement_verdict_pin_counterexample_and_replay(tmp_path, capsys):
    assert cli.main(["explain", REFUTED, "--from", str(_report(tmp_path))]) == 0
    out = capsys.readouterr().out
    from theorems.framework.explain import _registered

    REGISTRY = _registered()  # the claim index's, or the imported registry's
    info = REGISTRY[REFUTED]
    assert out.startswith(f"{REFUTED}  ({info.paper}, {info.kind}, provenance {info.provenance})")
    assert info.statement in out
    assert "pinned in the lock: refuted" in out  # read from theorems/verdicts.lock
    assert "last run: refuted — a counterexample was found" in out
    assert "1 − cos: 0.0003 against 1e-06 (ratio 300)" in out
    assert "  Falsifying example: test_theorem_g(" in out  # the report's text, line by line
    assert "python -m pytest theorems/maxmargin/claims_gd.py::test_theorem_g -p no:xdist" in out
    saved = f"theorems/counterexamples/{REFUTED}.json"
    assert Path(cli.REPO_ROOT / saved).exists()
    assert f"python -m theorems check {saved}" in out
    assert f'@example(**saved_arguments("{REFUTED}"))' in out
    # A reading refuted as read names the variant that holds.
    assert f"holds instead: MM-THM-G-N1: {REGISTRY['MM-THM-G-N1'].statement}" in out


def test_explain_without_a_verdict_in_the_report_says_so(tmp_path, capsys):
    report = _report(tmp_path)
    assert cli.main(["explain", "MM-LEMMA-DESCENT", "--from", str(report)]) == 0
    out = capsys.readouterr().out
    assert "last run: none (" in out and "has no verdict for it" in out
    assert cli.main(["explain", "MM-LEMMA-DESCENT", "--from", str(tmp_path / "nope.json")]) == 0
    assert "no report at" in capsys.readouterr().out


def test_explain_an_unknown_id_exits_2_with_the_nearest_ids(tmp_path, capsys):
    assert cli.main(["explain", "MM-THM-Q", "--from", str(_report(tmp_path))]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: no claim 'MM-THM-Q' (did you mean ")
    assert "MM-THM-G" in err


def test_report_rebuilds_html_and_markdown_without_a_rerun(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("ATTN_VERDICT_LOCK", raising=False)  # the checkout's lock
    report = _report(tmp_path)
    out_dir = tmp_path / "site"
    assert cli.main(["report", "--from", str(report), "--out", str(out_dir)]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[:2] == [str(out_dir / "index.html"), str(out_dir / "claims.md")]
    # A one-claim report against the full lock: that claim compared, the rest only counted.
    assert printed[2].startswith(
        f"Against the verdict lock ({cli.REPO_ROOT / 'theorems' / 'verdicts.lock'}): "
        "no verdict changed (1 claims compared); "
    )
    assert printed[2].endswith(" pinned claims not in this run") and len(printed) == 3
    assert REFUTED in (out_dir / "index.html").read_text(encoding="utf-8")
    assert REFUTED in (out_dir / "claims.md").read_text(encoding="utf-8")


def test_report_against_an_earlier_report_prints_what_changed(tmp_path, capsys):
    (tmp_path / "before").mkdir()
    before = _report(tmp_path / "before")
    old = json.loads(before.read_text(encoding="utf-8"))
    old["claims"][0]["verdict"] = "holds"
    old["claims"].append(record("MM-RETIRED"))
    before.write_text(json.dumps(old), encoding="utf-8")
    now = _report(tmp_path)
    assert cli.main(["report", "--from", str(now), "--against", str(before)]) == 0
    lines = capsys.readouterr().out.splitlines()
    at = lines.index(
        f"Against the earlier report ({before}): 1 verdict changed of 1 claims "
        "compared; 1 claim no longer in the report"
    )
    assert lines[at + 1 :] == [
        f"  {REFUTED}: holds -> refuted (changed)",
        "  MM-RETIRED: holds -> — (not in this run)",
    ]
    page = (tmp_path / "index.html").read_text(encoding="utf-8")
    assert f"Against the earlier report ({before})" in page
    assert cli.main(["report", "--from", str(now), "--against", str(tmp_path / "no.json")]) == 2
    assert "no.json" in capsys.readouterr().err


def test_report_names_a_malformed_report_and_exits_2(tmp_path, capsys):
    bad = tmp_path / "claims.json"
    bad.write_text("{}", encoding="utf-8")
    assert cli.main(["report", "--from", str(bad)]) == 2
    assert "missing top-level field" in capsys.readouterr().err


def test_report_without_a_report_says_how_to_make_one(tmp_path, capsys):
    missing = tmp_path / "reports" / "claims.json"
    assert cli.main(["report", "--from", str(missing)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    (line,) = captured.err.splitlines()  # one line, no traceback, no raw [Errno 2]
    assert line.startswith(f"error: no report at {missing}: ")
    assert "python -m pytest theorems/" in line and "Errno" not in line
    assert not (tmp_path / "reports").exists()  # nothing written
