"""attention-theorems: executable claims of softmax-attention theory.

Write a claim with `@claim(...)` over a pytest (usually Hypothesis) test, and record evidence
from its body with `theorems.evidence`. `pytest theorems/` judges every claim and writes
reports/claims.json; `python -m theorems list|check` lists claims and checks one instance.
"""

from theorems import evidence
from theorems.registry import (
    REGISTRY,
    ClaimInfo,
    ClaimRegistrationError,
    claim,
    current_profile,
)

__all__ = [
    "REGISTRY",
    "ClaimInfo",
    "ClaimRegistrationError",
    "claim",
    "current_profile",
    "evidence",
]
