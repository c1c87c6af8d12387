"""Strategies of the one-step and gradient-flow claims of 2505.17282 (theorems/embeddings/
claims_onestep.py, claims_flow.py), and a fixed, derandomized draw of a strategy for the
figures those claims list (theorems/embeddings/plots_flow.py).
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from strategies.instances import UNIT_HEAD, EmbeddingInstance

__all__ = ["any_head", "fixed_draws"]


@st.composite
def any_head(draw, base):
    """An instance of ``base`` whose head is rescaled to ‖v‖ ∈ [1/4, 4] half of the time: R1
    and R2 are stated for every v, not only the unit head of Lemma 4.1."""
    inst = draw(base)
    if draw(st.booleans()):
        scale = draw(st.floats(0.25, 4.0))
        inst = EmbeddingInstance(
            sequences=inst.sequences,
            y=inst.y,
            E0=inst.E0,
            v=inst.v * scale,
            eta0=inst.eta0,
            assumptions=inst.assumptions - {UNIT_HEAD},
            seed=inst.seed,
            s_star=inst.s_star,
            relevant=inst.relevant,
            groups=inst.groups,
            meta=inst.meta,
        )
    return inst


def fixed_draws(strategy, count: int) -> list:
    """The first ``count`` values a derandomized Hypothesis run draws from ``strategy`` (the
    same list on every call): instances for a figure, outside any claim's search."""
    drawn: list = []
    quiet = settings(
        max_examples=count,
        derandomize=True,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )

    @quiet
    @given(strategy)
    def collect(value):
        drawn.append(value)

    collect()
    return drawn[:count]
