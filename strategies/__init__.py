"""Public Hypothesis strategies and problem instances for attention-theorems.

Prompt attention (arXiv 2306.13596): ``decoupled_instances``, ``global_opt_instances``,
``equal_nonopt_instances``, ``local_opt_instances``, ``cone_inits``, ``infeasible_instances`` and
the paper's figure instances. Trained embeddings (arXiv 2505.17282):
``single_relevant_token_instances`` (G1), ``general_frequency_instances`` (G2),
``k_level_instances``, ``two_relevant_instances`` and the pseudo-IMDB ``zipf_corpus`` (G3).
Cross-attention (arXiv 2308.16898, 2410.14581): ``official_cross_instances``,
``prescribed_score_instances``, ``equal_nonopt_cross_instances``, ``nostat_instances``,
``local_opt_cross_instances``, ``with_random_init``, ``cross_cone_inits``.
Every instance names the assumptions it was built to satisfy (``ASSUMPTIONS``).
Metamorphic twins (the same instance restated: permuted, rotated, sign-flipped):
``twins_of``, ``TWINS``, ``Twin`` (strategies.twins).
"""

from strategies.cross import (
    cross_cone_inits,
    equal_nonopt_cross_instances,
    local_opt_cross_instances,
    nostat_instances,
    official_cross_instances,
    prescribed_score_instances,
    with_random_init,
)
from strategies.embedding import (
    gaussian_init,
    general_frequency_instances,
    k_level_instances,
    rung_single_relevant_token_instances,
    single_relevant_token_instances,
    two_relevant_instances,
    zipf_corpus,
    zipf_instance,
)
from strategies.instances import (
    ARBITRARY_P0,
    ASSUMPTIONS,
    CONE_INIT,
    DECOUPLED,
    DIM_EXCEEDS_VOCAB,
    EQUAL_NONOPT_SCORES,
    GAUSSIAN_EMBEDDINGS,
    GENERAL_FREQUENCIES,
    K_LEVEL,
    LOCALLY_OPTIMAL_ALPHA,
    NON_GLOBAL_ALPHA,
    NONTIGHT_V_SVM,
    PAPER_INSTANCE,
    SINGLE_RELEVANT_TOKEN,
    SVM_FEASIBLE,
    SVM_INFEASIBLE,
    TIGHT_V_SVM,
    TWO_RELEVANT_TOKENS,
    UNIQUE_OPT,
    UNIT_HEAD,
    ZIPF_CORPUS,
    CrossInstance,
    EmbeddingInstance,
    PromptInstance,
    assumption_names,
)
from strategies.prompt import (
    INFEASIBLE_VARIANTS,
    cone_inits,
    decoupled_data,
    decoupled_instances,
    equal_nonopt_instances,
    figure1_instance,
    figure2_instance,
    figure3_instance,
    global_opt_instances,
    infeasible_instances,
    local_opt_instances,
    loss_comparison_instance,
)
from strategies.twins import TWINS, Twin, twins_of

__all__ = [
    # instances and assumptions
    "PromptInstance",
    "EmbeddingInstance",
    "CrossInstance",
    "ASSUMPTIONS",
    "assumption_names",
    "ARBITRARY_P0",
    "CONE_INIT",
    "DECOUPLED",
    "DIM_EXCEEDS_VOCAB",
    "EQUAL_NONOPT_SCORES",
    "GAUSSIAN_EMBEDDINGS",
    "GENERAL_FREQUENCIES",
    "K_LEVEL",
    "LOCALLY_OPTIMAL_ALPHA",
    "NON_GLOBAL_ALPHA",
    "NONTIGHT_V_SVM",
    "PAPER_INSTANCE",
    "SINGLE_RELEVANT_TOKEN",
    "SVM_FEASIBLE",
    "SVM_INFEASIBLE",
    "TIGHT_V_SVM",
    "TWO_RELEVANT_TOKENS",
    "UNIQUE_OPT",
    "UNIT_HEAD",
    "ZIPF_CORPUS",
    # prompt attention (2306.13596)
    "decoupled_data",
    "decoupled_instances",
    "global_opt_instances",
    "equal_nonopt_instances",
    "local_opt_instances",
    "cone_inits",
    "infeasible_instances",
    "INFEASIBLE_VARIANTS",
    "figure1_instance",
    "figure2_instance",
    "figure3_instance",
    "loss_comparison_instance",
    # trained embeddings (2505.17282)
    "gaussian_init",
    "single_relevant_token_instances",
    "rung_single_relevant_token_instances",
    "general_frequency_instances",
    "k_level_instances",
    "two_relevant_instances",
    "zipf_corpus",
    "zipf_instance",
    # cross-attention (2308.16898, 2410.14581)
    "official_cross_instances",
    "prescribed_score_instances",
    "equal_nonopt_cross_instances",
    "nostat_instances",
    "local_opt_cross_instances",
    "with_random_init",
    "cross_cone_inits",
    # metamorphic twins (issue 21)
    "Twin",
    "TWINS",
    "twins_of",
]
