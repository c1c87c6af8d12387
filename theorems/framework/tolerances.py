"""Tolerances far above what they observe: the audit of a claims report.

A claim's tolerance is a promise about the numerics: a correct computation stays below it, a
wrong one does not. A bound picked after seeing the data says nothing of the kind, and one far
above everything observed cannot fail for the reason its claim gives. So every slack a claim
records (``evidence.slack``) is read here: one whose worst observation stays below
``LOOSE_RATIO`` of its bound must carry a derivation (``evidence.tolerance(value, why)`` or
``slack(..., derivation=why)``): rounding bounds, a certificate's accuracy, a rate; or, where
no derivation reaches, the record of a calibration on draws apart from the tested ones
(``evidence.calibrated(value, record)``). The audit counts the two apart.

Only claims that hold are read: a refuted claim's slack exceeded its bound somewhere.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

#: A bound more than 100× above the worst observation is "loose" (issue 24's criterion).
LOOSE_RATIO = 1e-2


@dataclass(frozen=True)
class Slack:
    """One recorded slack of one claim, at its worst example."""

    claim: str
    name: str
    observed: float
    bound: float
    ratio: float
    derivation: str | None
    basis: str | None = None  # "derived" or "calibrated" (evidence.BASES), None: neither

    @property
    def loose(self) -> bool:
        return math.isfinite(self.ratio) and abs(self.ratio) < LOOSE_RATIO

    @property
    def headroom(self) -> str:
        """bound/observed, as '×N' ('exact' where nothing was observed)."""
        if self.observed == 0.0:
            return "exact"
        return f"×{abs(self.bound / self.observed):.2g}"


def slacks(report: dict[str, Any]) -> list[Slack]:
    """Every slack of every claim that holds in a claims report (claims.json)."""
    out = []
    for claim in report.get("claims", []):
        if claim.get("verdict") != "holds":
            continue
        for name, entry in sorted((claim.get("worst_slack") or {}).items()):
            out.append(
                Slack(
                    claim=claim["id"],
                    name=name,
                    observed=float(entry["observed"]),
                    bound=float(entry["bound"]),
                    ratio=float(entry["ratio"]),
                    derivation=entry.get("derivation") or None,
                    basis=(entry.get("basis") or "derived") if entry.get("derivation") else None,
                )
            )
    return out


def loose_underived(report: dict[str, Any]) -> list[Slack]:
    """The slacks whose bound is more than 1/LOOSE_RATIO above what they observe and that
    carry no derivation: each is a tolerance to derive (with its argument) or to tighten."""
    return [s for s in slacks(report) if s.loose and s.derivation is None]


def table(rows: list[Slack]) -> list[str]:
    """One line per slack: claim, name, observed, bound, headroom, derived or not."""
    lines = []
    for s in rows:
        how = s.basis if s.derivation else "NOT DERIVED"
        lines.append(
            f"{s.claim}: {s.name}: observed {s.observed:.3g}, bound {s.bound:.3g} "
            f"({s.headroom}), {how}"
        )
    return lines
