"""The figure of the general limit (MM-GEN-SHARED): one flow that keeps two tokens sharing the
mass in every input, traced by the engine, against its certified limit.

The instance is tests/test_shared.py's hand instance (three inputs, keys in ℝ³, scores
(3, −3, −4)): along e1 the inputs pull against each other, so tokens 0 and 1 share the mass
for ever and p(t) = R·p_dir + q* with q* = z*·e1. Left: input 0's share on token 0 along the
flow, tending to σ(z*) = 0.6155; right: 1 − cos(p, p_dir). Solid: the flow as traced on the
full problem, until its within-set terms cancel to rounding and the integrator stalls (‖p‖ ≈
31); dashed: the engine's trace past the hand-over, with the D part pinned at q*
(models.flows.shared).
"""

from __future__ import annotations

import numpy as np
import torch

from models.flows.dynamics import converge
from models.flows.limits import follow
from models.numerics import failures
from models.problems.attention import PromptProblem
from theorems.framework import figures
from theorems.framework.figures import draws

KEYS = np.array(
    [
        [[1, 0.3, 1], [0, 0.3, 1], [0, 0.1, 0]],
        [[1, -0.1, 1], [0, -0.1, 1], [0, -0.3, 0]],
        [[0, 0.2, 1], [1, 0.2, 1], [0, -0.4, 0]],
    ],
    dtype=np.float64,
)
SCORES = np.array([[3.0, -3.0, -4.0]] * 3)
START = np.full(3, 0.01)


def _share(points: np.ndarray) -> np.ndarray:
    """Input 0's share of its set's mass on token 0, at each point (rows)."""
    gap = points @ (KEYS[0, 0] - KEYS[0, 1])
    return 1.0 / (1.0 + np.exp(-gap))


def _one_minus_cos(points: np.ndarray, unit: np.ndarray) -> np.ndarray:
    units = points / np.linalg.norm(points, axis=1, keepdims=True)
    return 0.5 * np.sum((units - unit) ** 2, axis=1)


@draws("MM-GEN-SHARED")
def shared_limit_figure() -> None:
    problem = PromptProblem(torch.from_numpy(KEYS), torch.from_numpy(SCORES), "logistic")
    with failures.tolerate(failures.GRADIENT_FLOW):
        full = converge(problem, START).trajectory.ps.numpy()
        lim = follow(problem, START)
    sh = lim.shared
    unit = sh.direction.w / np.linalg.norm(sh.direction.w)
    pinned = sh.path
    fig, axes = figures.new(2, 1, width=4.6, height=3.6)
    left, right = axes[0]
    for points, style, label in ((full, "-", "full flow (stalls)"), (pinned, "--", "pinned at q*")):
        norms = np.linalg.norm(points, axis=1)
        keep = norms > 0.1
        left.plot(norms[keep], _share(points[keep]), style, lw=2, label=label)
        right.plot(norms[keep], _one_minus_cos(points[keep], unit), style, lw=2, label=label)
    target = float(_share(sh.finite.q[None])[0])
    left.axhline(target, color="k", lw=0.8, ls=":", label=f"σ(z*) = {target:.4f}")
    left.set_xscale("log")
    left.set_xlabel("‖p‖")
    left.set_ylabel("input 0: share of token 0 in its set")
    left.legend(fontsize=8)
    right.set_xscale("log")
    right.set_yscale("log")
    right.axhline(1e-6, color="k", lw=0.8, ls=":", label="DIRECTION_TOL")
    right.set_xlabel("‖p‖")
    right.set_ylabel("1 − cos(p, p_dir)")
    right.legend(fontsize=8)
    for ax in (left, right):
        ax.grid(alpha=0.3)
    fig.suptitle("A shared-mass limit: p → R·p_dir + q* (tests/test_shared.py's instance)")
    figures.save(fig, "mm_gen_shared_limit.png")
