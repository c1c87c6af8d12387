"""attention-theorems: executable claims of softmax-attention theory.

Write a claim with `@claim(...)` over a pytest (usually Hypothesis) test, and record evidence
from its body with `theorems.evidence`. `pytest theorems/` judges every claim, writes
reports/claims.json, saves refuted claims' counterexamples and checks the verdict lock;
`python -m theorems list|check|lock` lists claims, checks one instance, checks or rewrites
the lock.

A new claim or conjecture needs only this package and `strategies`:

    from strategies import equal_nonopt_instances
    from theorems import claim, evidence, given

(`given`, `example` and `note` are Hypothesis' own, re-exported; `saved` rebuilds a saved
counterexample for `@example(inst=saved("ID"))`.) See docs/conjectures.md.
"""

from hypothesis import example, given, note

from theorems import evidence
from theorems.registry import (
    REGISTRY,
    ClaimInfo,
    ClaimRegistrationError,
    claim,
    current_profile,
)
from theorems.replay import saved, saved_arguments

__all__ = [
    "REGISTRY",
    "ClaimInfo",
    "ClaimRegistrationError",
    "claim",
    "current_profile",
    "evidence",
    "example",
    "given",
    "note",
    "saved",
    "saved_arguments",
]
