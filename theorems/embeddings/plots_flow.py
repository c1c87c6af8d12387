"""The figures of the one-step and gradient-flow claims of 2505.17282 (claims_onestep.py,
claims_flow.py): each drawer computes its evidence on instances of its own (a fixed,
derandomized draw of the claim's data) and calls the plot function of ``plots``."""

from __future__ import annotations

import math

import numpy as np

from models.numerics import failures
from models.problems.attention import one_minus_cos
from models.problems.embedding import one_step
from strategies import general_frequency_instances
from strategies.embedding_flow import fixed_draws
from theorems.embeddings.common import (
    DIRECTION_TARGET,
    EVENT_VOCAB,
    PROP_MIN_SPREAD,
    THEOREM_DATA,
    cls_svm_of,
    event_sweep,
    prepare,
    problem_of,
    run_flow,
)
from theorems.embeddings.plots import direction_figure, event_figure, prop_figure
from theorems.framework.figures import draws

#: EMB-FLOW-DIRECTION's figure: the flows of this many G1 draws (those meeting the §3.3
#: precondition, with a solved `<cls>` SVM).
DIRECTION_DRAWS = 20
#: EMB-L41-PROP's figure: this many G2 draws (those with std(α)·√d ≥ PROP_MIN_SPREAD, the
#: claim's premise).
PROP_DRAWS = 40


@draws("EMB-FLOW-DIRECTION")
def draw_direction_to_svm() -> None:
    """1 − cos(p(t), p̂) against ‖p(t)‖ along each traced flow."""
    curves = []
    for inst in fixed_draws(THEOREM_DATA, DIRECTION_DRAWS):
        prep = prepare(inst)
        svm = cls_svm_of(prep)
        if not (prep.precondition and svm.ok):
            continue
        with failures.tolerate(failures.GRADIENT_FLOW):
            path = run_flow(inst).path
        curves.append((path.norms, np.array([one_minus_cos(p, svm.x) for p in path.ps])))
    direction_figure(curves, DIRECTION_TARGET, "emb_flow_direction_to_svm.png")


@draws("EMB-L41-EVENT")
def draw_event_probability() -> None:
    """P(m > d^(−1/4)) against d: measured, exact and Lemma 4.1's bound."""
    rows = [(row.d, row.measured, row.exact, row.bound) for row in event_sweep()]
    event_figure(rows, EVENT_VOCAB, "emb_onestep_event_probability.png")


@draws("EMB-L41-PROP")
def draw_shift_vs_alpha() -> None:
    """The one-step shift ⟨E¹_s − E⁰_s, v⟩/η0 against α_s, G2 data."""
    points = []
    for inst in fixed_draws(general_frequency_instances(), PROP_DRAWS):
        step = one_step(problem_of(inst), inst.eta0)
        alpha, shift = step.alpha.numpy(), step.shift.numpy()
        if float(np.std(alpha)) * math.sqrt(inst.d) >= PROP_MIN_SPREAD:
            points.append((inst.d, alpha, shift / inst.eta0))
    prop_figure(points, "emb_onestep_shift_vs_alpha.png")
