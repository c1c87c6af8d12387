"""A seeded uniform sample of mutmut's mutants of models/, and its score.

A full mutmut run over models/ is ~18 500 mutants (~5 h on 2 cores); a sample of 400 gives the
score within about ±4 % (95 %). Run from a mutmut checkout whose mutants are generated
(`mutmut run NO_SUCH_NAME` lists them and exits 1):

    python tests/mutants/mutmut_sample.py names SEED 400 > names.txt
    mutmut run --max-children 2 $(cat names.txt)
    python tests/mutants/mutmut_sample.py score names.txt

A sample that tests were written from is spent: measure on a fresh seed.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys
from collections import Counter

KILLED = ("killed", "timeout", "segfault")


def results() -> dict[str, str]:
    """{mutant name: outcome} as `mutmut results --all true` prints them."""
    out = subprocess.run(
        ["mutmut", "results", "--all", "true"], capture_output=True, text=True, check=False
    ).stdout
    pairs = (line.rsplit(":", 1) for line in out.splitlines() if line.strip().startswith("models."))
    return {name.strip(): outcome.strip() for name, outcome in pairs}


def names(seed: int, k: int) -> list[str]:
    everything = sorted(results())
    random.Random(seed).shuffle(everything)
    return everything[:k]


def score(sample: list[str]) -> str:
    got = results()
    counts = Counter(got.get(name, "missing") for name in sample)
    decided = sum(v for k, v in counts.items() if k not in ("not checked", "missing"))
    killed = sum(counts[k] for k in KILLED)
    p = killed / decided
    half = 1.96 * math.sqrt(p * (1 - p) / decided)
    return f"{dict(counts)}; score {killed}/{decided} = {100 * p:.1f} % ± {100 * half:.1f}"


if __name__ == "__main__":
    if sys.argv[1] == "names":
        print(" ".join(names(int(sys.argv[2]), int(sys.argv[3]))))
    else:
        print(score(open(sys.argv[2]).read().split()))
