"""attention-theorems: executable claims of softmax-attention theory.

Write a claim with `@claim(...)` over a pytest (usually Hypothesis) test, and record evidence
from its body with `theorems.framework.evidence`. `pytest theorems/` judges every claim, writes
reports/claims.json, saves refuted claims' counterexamples and checks the verdict lock;
`python -m theorems list|check|lock` lists claims, checks one instance, checks or rewrites
the lock.

A new claim or conjecture needs only this package: besides the framework (`claim`,
`evidence`, and Hypothesis' own `given`, `example` and `note`; `saved` rebuilds a saved
counterexample for `@example(inst=saved("ID"))`), it re-exports the public mathematics a
property needs, imported on first use (docs/api.md lists each with its meaning):

    from theorems import att_svm, claim, equal_nonopt_instances, gd, given, one_minus_cos

See docs/conjectures.md.
"""

import importlib

from hypothesis import example, given, note

from theorems.framework import evidence
from theorems.framework.profiles import current_profile
from theorems.framework.registry import (
    REGISTRY,
    ClaimInfo,
    ClaimRegistrationError,
    claim,
    conjecture,
)
from theorems.framework.replay import saved, saved_arguments

__all__ = [
    "REGISTRY",
    "ClaimInfo",
    "ClaimRegistrationError",
    "claim",
    "conjecture",
    "current_profile",
    "evidence",
    "example",
    "given",
    "note",
    "saved",
    "saved_arguments",
]

#: The public mathematics, by the module that defines it (docs/api.md). Imported lazily, so
#: that `import theorems` (every pytest run loads the plugin) does not pay for cvxpy or torch.
PUBLIC_API = {
    # instance strategies (each instance records the assumptions it was built to satisfy)
    "strategies": (
        "decoupled_instances",
        "global_opt_instances",
        "equal_nonopt_instances",
        "local_opt_instances",
        "infeasible_instances",
        "cone_inits",
        "single_relevant_token_instances",
        "general_frequency_instances",
        "two_relevant_instances",
        "k_level_instances",
        "official_cross_instances",
        "prescribed_score_instances",
        "equal_nonopt_cross_instances",
        "local_opt_cross_instances",
        "with_random_init",
        "cross_cone_inits",
    ),
    # dynamics: gradient descent, normalized GD, the certified gradient-flow tracer
    "models.flows.dynamics": ("gd", "ngd", "trace_flow", "converge"),
    # cross-attention (2308.16898, 2410.14581): the model, its dynamics and metrics
    "models.problems.cross": (
        "CrossProblem",
        "w_ngd",
        "kq_ngd",
        "md",
        "polyak",
        "correlation",
        "bregman_divergence",
    ),
    # the certified SVM oracle
    "models.oracles.svm": ("att_svm", "w_svm", "v_svm", "cls_svm"),
    "models.oracles.normsvm": ("norm_svm",),
    # geometry and selection
    "models.problems.attention": ("cosine", "one_minus_cos"),
    "models.oracles.selection": ("global_opt", "local_optimality", "support_sets"),
}
_LAZY = {name: module for module, names in PUBLIC_API.items() for name in names}
__all__ += sorted(_LAZY)


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'theorems' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
