"""The audit of loose tolerances (theorems.framework.tolerances, `python -m theorems
tolerances`) and the derivation a tolerance carries into the report (evidence.tolerance)."""

from __future__ import annotations

import json
import pickle

import pytest

from models.flows import limits
from theorems.framework import evidence, tolerances
from theorems.framework.cli import main


def report(*claims) -> dict:
    return {"claims": list(claims)}


def claim(cid: str, verdict: str = "holds", **slacks) -> dict:
    return {"id": cid, "verdict": verdict, "worst_slack": dict(slacks)}


def slack(
    observed: float, bound: float, derivation: str | None = None, basis: str = "derived"
) -> dict:
    return {
        "observed": observed,
        "bound": bound,
        "ratio": observed / bound,
        "derivation": derivation,
        "basis": basis if derivation else None,
    }


def test_a_tolerance_is_a_float_that_carries_its_derivation():
    tol = evidence.tolerance(1e-10, "  rounding of 36 O(1) terms: 36·2⁻⁵³ ≈ 4e-15  ")
    assert tol == 1e-10 and isinstance(tol, float)
    assert tol.derivation == "rounding of 36 O(1) terms: 36·2⁻⁵³ ≈ 4e-15"
    assert not hasattr(2 * tol, "derivation")  # arithmetic gives a plain float
    assert pickle.loads(pickle.dumps(tol)).derivation == tol.derivation
    cal = evidence.calibrated(1e-8, "ci-random seeds 11-16, 300 draws: worst 4.3e-12")
    assert (cal.basis, pickle.loads(pickle.dumps(cal)).basis) == ("calibrated", "calibrated")


@pytest.mark.parametrize(
    ("value", "why"), [(1e-6, ""), (1e-6, "   "), (-1.0, "x"), (float("nan"), "x")]
)
def test_a_tolerance_needs_a_reason_and_a_finite_value(value, why):
    with pytest.raises(ValueError, match="tolerance"):
        evidence.tolerance(value, why)


def test_slack_records_the_derivation_of_its_bound():
    collector = evidence.Collector()
    with evidence.collecting(collector):
        evidence.slack("plain", 1e-16, 1e-10)
        evidence.slack("derived", 1e-16, evidence.tolerance(1e-10, "a rounding bound"))
        evidence.slack("given", 1e-16, 3e-10, derivation="a computed bound")
        evidence.slack("calibrated", 1e-16, evidence.calibrated(1e-8, "seeds 11-16: 4e-12"))
        with pytest.raises(ValueError, match="basis"):
            evidence.slack("bad", 1e-16, 1e-8, derivation="x", basis="guessed")
    worst = collector.worst_slack
    assert (worst["plain"]["derivation"], worst["plain"]["basis"]) == (None, None)
    assert (worst["derived"]["derivation"], worst["derived"]["basis"]) == (
        "a rounding bound",
        "derived",
    )
    assert worst["given"]["derivation"] == "a computed bound"
    assert (worst["calibrated"]["derivation"], worst["calibrated"]["basis"]) == (
        "seeds 11-16: 4e-12",
        "calibrated",
    )


def test_loose_means_more_than_a_hundredfold_headroom_on_a_claim_that_holds():
    doc = report(
        claim("A", tight=slack(0.5, 1.0), loose=slack(1e-15, 1e-10), edge=slack(0.01, 1.0)),
        claim("B", exact=slack(0.0, 1e-8), why=slack(1e-15, 1e-10, "rounding")),
        claim("C", "refuted", loose=slack(1e-15, 1e-10)),  # a refuted claim exceeded a bound
    )
    loose = tolerances.loose_underived(doc)
    assert [(s.claim, s.name) for s in loose] == [("A", "loose"), ("B", "exact")]
    assert [s.headroom for s in loose] == ["×1e+05", "exact"]


def test_the_engines_tolerances_are_derived():
    assert set(limits.DERIVATIONS) == {"DIRECTION_TOL", "SELECT_TOL", "LOSS_GAP_TOL"}
    assert all(len(why) > 80 for why in limits.DERIVATIONS.values())


def test_cli_counts_calibrated_tolerances_apart_and_check_accepts_them(tmp_path, capsys):
    path = tmp_path / "claims.json"
    doc = report(
        claim("A", cal=slack(1e-15, 1e-8, "seeds 11-16", "calibrated")),
        claim("B", der=slack(1e-15, 1e-10, "rounding")),
    )
    path.write_text(json.dumps(doc))
    assert main(["tolerances", "--from", str(path), "--check"]) == 0
    out = capsys.readouterr().out
    assert "A: cal: observed 1e-15, bound 1e-08 (×1e+07), calibrated" in out
    assert (
        "2 with a bound more than 100× above their worst observation: 1 derived, 1 calibrated"
        in out
    )


def test_cli_lists_loose_tolerances_and_check_fails_on_an_underived_one(tmp_path, capsys):
    path = tmp_path / "claims.json"
    path.write_text(json.dumps(report(claim("A", loose=slack(1e-15, 1e-10)))))
    assert main(["tolerances", "--from", str(path)]) == 0
    out = capsys.readouterr().out
    assert "A: loose: observed 1e-15, bound 1e-10 (×1e+05), NOT DERIVED" in out
    assert main(["tolerances", "--from", str(path), "--check"]) == 1
    assert "1 loose tolerances carry no derivation" in capsys.readouterr().err
    path.write_text(json.dumps(report(claim("A", loose=slack(1e-15, 1e-10, "rounding")))))
    assert main(["tolerances", "--from", str(path), "--check"]) == 0


def test_cli_without_a_report_says_how_to_make_one(tmp_path, capsys):
    assert main(["tolerances", "--from", str(tmp_path / "none.json")]) == 2
    assert "run the claims first" in capsys.readouterr().err
