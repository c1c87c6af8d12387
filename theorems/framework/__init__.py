"""The verdict machinery of attention-theorems, apart from the claims: it imports nothing
from them.

Modules, each importing only those above it:

- `memo`: `shared`, a run cached once per process, whatever the shape of the call.
- `instances`: the one instance schema (instance files, typed arguments).
- `profiles`: Hypothesis profiles, the run's seed, example budgets.
- `hypothesis_compat`: the one adapter over Hypothesis internals.
- `memory`: the per-process memory cap (ATTN_MEMORY_LIMIT): an allocation refused, not an
  OOM kill.
- `evidence`: what a claim body records; the failure guard around each example.
- `verdicts`: the verdict words and rules (judge one item, merge items, as expected).
- `replay`: the counterexample store.
- `twins`: metamorphic twins, an example decided again on its instance restated.
- `shrink`: a counterexample reduced in its sizes (an input, a token left out) before the
  claim reports it.
- `rows`: a paper's claim rows (claims.toml) and findings (findings.md), what a claim's
  code leaves out.
- `registry`: the `@claim` decorator and the registry of claims.
- `claim_index`: theorems/claims.index.json, the registry's claims with the hashes of their
  sources, read by `list` and `explain` instead of importing the claim modules.
- `records`: per-item records, their merge, the claims.json document.
- `lock`: the verdict lock and the gate.
- `session`: the run's state, the accounting of what did not finish, the gate over the
  merged report, the closing summary.
- `progress`: what a run prints as it goes (the plan, long claims, each claim's evidence).
- `plugin`: the pytest hooks that run all of the above.
- `explain`: one claim on one page (statement, verdict, lock pin, counterexample, replay).
- `tolerances`: the audit of a report's tolerances far above what they observe.
- `cli`: `python -m theorems list | check | lock | explain | report | index | tolerances`.
- `figures`: the report's figures: the drawers papers register, their shared look.
"""

from pathlib import Path

#: The repository this framework belongs to (theorems/framework/ -> the checkout): where the
#: claims, the lock, the counterexample store and reports/ live by default.
REPO_ROOT = Path(__file__).resolve().parents[2]
