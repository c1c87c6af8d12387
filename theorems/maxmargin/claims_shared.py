"""The general limit of gradient flow on p where tokens share the mass for ever (issue 23; the
generalized SVM equivalence of 2308.16898 §5, spec tfsvm §2.9 SVM-eq, stated there for W and
recalled in spec maxmargin §2.6 for p: "multiple optimal tokens lead to a generalized SVM").

The instances are ``strategies.ladder``'s ``conflict`` family: pairs of tokens that differ
only in a subspace along which the inputs pull in random directions, above the rest. Where
the engine certifies a shared-mass limit (``models.flows.shared``: sets read from the flow, the
equality SVM, the reduced loss's minimiser, the flow traced to 1 − cos ≤ 1e-6 while ‖p‖ grows
a hundredfold), the claim checks the limit with code of its own:

- the direction of the flow's last point against W_dir of the official SVM-eq recipe
  (``models.problems.nonlinear_head.dir_system``: equal logits as two opposite inequality rows,
  solved by ``models.oracles.svm.solve_margin_qp``, not the engine's projected equality QP);
- the finite part by the plain loss alone: at the limit's finite part (with the direction
  scaled to margins of 60, where the other tokens' mass is ≲ e^{-50}) every direction inside
  the sets' span D raises L (central differences of ``PromptProblem.loss_value`` at step h
  give a first derivative ≤ FIRST_ORDER and a second difference > 0), i.e. the limiting
  split minimises the loss on the sets, which is what p_fin is.

The premise is the engine's outcome: a flow that selects one token per input, or stays
bounded, says nothing about shared limits (those examples count as premise not met).
"""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given

from models.flows.limits import DIRECTION_TOL
from models.flows.shared import equality_rows
from models.ntp.qp import orthonormal_rows
from models.oracles.svm import solve_margin_qp
from models.problems.nonlinear_head import dir_system
from strategies.instances import PromptInstance
from strategies.ladder import conflict_instances, medium_conflict_instances
from theorems import claim, evidence
from theorems.limits import flow

#: The official recipe's W_dir and the engine's equality SVM are both KKT-certified (1e-7 and
#: 1e-8 residuals); the flow's last point is within DIRECTION_TOL of the engine's.
DIRECTION_BOUND = evidence.tolerance(
    DIRECTION_TOL + 1e-7,
    "the engine certifies 1 − cos(p, its equality SVM) ≤ DIRECTION_TOL = 1e-6 at the flow's last "
    "point (confirmed over a hundredfold growth of ‖p‖); the recipe's W_dir is the least-norm "
    "point of the same polyhedron written with two opposite rows per equality, certified by "
    "models.oracles.svm (KKT 1e-7): the two unit directions differ by ≲ 1e-7 in 1 − cos",
)
#: The probe point's distance along W_dir (whose margins are ≥ 1): the outside tokens' mass
#: there is ≲ e^{−PROBE_MARGIN + O(‖p_fin‖·‖k‖)}.
PROBE_MARGIN = 60.0
#: Central-difference step inside D, relative to max(1, ‖p_fin‖).
STEP = 1e-5
#: |(L(p + h b) − L(p − h b)) / 2h| at a minimiser of L on the sets: the reduced loss's
#: gradient there (≤ 1e-10, models.flows.shared.GRAD_TOL), the difference's truncation h²·|L‴|/6
#: and the rounding of L.
FIRST_ORDER = evidence.tolerance(
    1e-8,
    "central difference at h = 1e-5 of a loss whose gradient on D is ≤ 1e-10 at the limit: "
    "truncation h²|L‴|/6 ≤ 1e-10 × (keys ≲ 3)³·(scores ≤ 4)/6 ≈ 2e-9, rounding 2ε·L/h ≈ "
    "4e-11·L (L ≲ 5): ≤ 3e-9; 1e-8",
)


def shared_limit_readings(inst: PromptInstance):
    """The engine's limit and the claim's own readings of it: (1 − cos(p(t), W_dir of the
    recipe), largest |∂L| along D, smallest second difference of L along D, the limit in
    words), each recorded; None where the flow keeps no shared set (premise not met)."""
    evidence.instance(inst.to_json())
    problem = inst.problem
    lim = flow(problem, None)
    if not evidence.premise(lim.kind == "shared", "the flow keeps a set of tokens sharing"):
        return None
    sh = lim.shared
    keys = problem._np[0]
    # the direction: the official recipe's W_dir on the sets the flow keeps
    A, b = dir_system(keys, sh.sets)
    recipe = evidence.solved(solve_margin_qp(A, b), "SVM-eq W_dir")
    unit = recipe.x / np.linalg.norm(recipe.x)
    end = sh.p
    gap = 0.5 * float(np.sum((end / np.linalg.norm(end) - unit) ** 2))
    evidence.slack("1 − cos(p(t), W_dir of the SVM-eq recipe)", gap, DIRECTION_BOUND)
    # the finite part: the limiting split minimises L on the sets, read with the plain loss at
    # p_fin + 60·W_dir, where every other token trails its set by a logit gap ≥ ~60 (mass
    # ≲ e^{-50}) and the logits are O(100), so that a step of h inside D is resolved (at the
    # flow's last point, ‖p‖ ≥ 1e4, the logits' rounding alone is ≥ 1e-12·‖p‖)
    tops = np.argmax(keys @ end, axis=1)
    basis = orthonormal_rows(equality_rows(keys, sh.sets, tops)[1])
    p_fin = basis.T @ (basis @ end)
    probe = p_fin + PROBE_MARGIN * recipe.x
    h = STEP * max(1.0, float(np.linalg.norm(p_fin)))
    rng = np.random.default_rng(0)
    extra = rng.standard_normal((3, basis.shape[0])) @ basis if basis.shape[0] > 1 else basis[:0]
    directions = np.vstack([basis, extra / np.linalg.norm(extra, axis=1, keepdims=True)])
    loss = problem.loss_value
    at = float(loss(torch.from_numpy(probe)))
    first, second = 0.0, np.inf
    for b_dir in directions:
        up = float(loss(torch.from_numpy(probe + h * b_dir)))
        down = float(loss(torch.from_numpy(probe - h * b_dir)))
        first = max(first, abs(up - down) / (2 * h))
        second = min(second, (up + down - 2 * at) / h**2)
    evidence.slack("|∂L/∂D| at the limit (central difference)", first, FIRST_ORDER)
    evidence.metric("smallest second difference of L along D", second)
    return gap, first, second, lim.describe()


@claim("MM-GEN-SHARED")
@given(inst=conflict_instances())
def test_shared_limit(inst):
    """Where gradient flow keeps, in some inputs, a set of tokens with different keys sharing
    the softmax mass for ever, p(t) = R(t)·p_dir + p_fin + o(1): p_dir is the max-margin
    direction with equal logits inside each set and margin ≥ 1 against every other token (the
    generalized SVM), and p_fin, which sets the split inside the sets, minimises the loss
    restricted to them."""
    readings = shared_limit_readings(inst)
    if readings is None:
        return
    gap, first, second, limit = readings
    assert gap <= DIRECTION_BOUND, f"1 − cos(p(t), W_dir) = {gap:.2e} ({limit})"
    assert first <= FIRST_ORDER, f"L slopes by {first:.2e} along the sets' span"
    assert second > 0, f"L curves down by {second:.2e} along the sets' span"


@claim("MM-GEN-SHARED-MEDIUM")
@given(inst=medium_conflict_instances())
def test_shared_limit_medium(inst):
    """Where gradient flow keeps, in some inputs, a set of tokens with different keys sharing
    the softmax mass for ever, p(t) = R(t)·p_dir + p_fin + o(1): p_dir is the max-margin
    direction with equal logits inside each set and margin ≥ 1 against every other token (the
    generalized SVM), and p_fin, which sets the split inside the sets, minimises the loss
    restricted to them."""
    readings = shared_limit_readings(inst)
    if readings is None:
        return
    gap, first, second, limit = readings
    assert gap <= DIRECTION_BOUND, f"1 − cos(p(t), W_dir) = {gap:.2e} ({limit})"
    assert first <= FIRST_ORDER, f"L slopes by {first:.2e} along the sets' span"
    assert second > 0, f"L curves down by {second:.2e} along the sets' span"
