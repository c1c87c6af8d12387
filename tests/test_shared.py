"""The general (shared-mass) limit of gradient flow: models.flows.shared and its place in the engine
(models.flows.limits.follow).

The hand instance: three inputs, keys in ℝ³, scores (3, −3, −4). In inputs 0 and 1 tokens 0
and 1 differ by +e1, in input 2 by −e1, and token 2 lies below both along e3. Along e1 the
inputs pull against each other, so no direction selects one token in every input with the
loss at its best: the flow keeps tokens {0, 1} sharing the mass in every input, and
p(t) = R·p_dir + q*, with q* = z·e1 where, by symmetry of the logistic loss,
2ℓ'(6σ(z) − 3) = ℓ'(3 − 6σ(z)) (solved below by bisection, independently of the engine).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.optimize import brentq

from models.flows import shared
from models.flows.dynamics import converge
from models.flows.limits import follow
from models.problems.attention import PromptProblem

KEYS = np.array(
    [
        [[1, 0.3, 1], [0, 0.3, 1], [0, 0.1, 0]],
        [[1, -0.1, 1], [0, -0.1, 1], [0, -0.3, 0]],
        [[0, 0.2, 1], [1, 0.2, 1], [0, -0.4, 0]],
    ]
)
SCORES = np.array([[3.0, -3.0, -4.0]] * 3)
START = np.full(3, 0.01)


def problem(keys=KEYS, scores=SCORES, loss="logistic") -> PromptProblem:
    return PromptProblem(torch.tensor(keys, dtype=torch.float64), torch.tensor(scores), loss)


def sigmoid(z):
    return 1.0 / (1.0 + math.exp(-z))


def closed_form_z() -> float:
    """The finite part's e1 coordinate: 2ℓ'(6σ(z) − 3) = ℓ'(3 − 6σ(z)), ℓ' = −σ(−x)."""

    def balance(z):
        x = 6 * sigmoid(z) - 3
        return 2 * sigmoid(-x) - sigmoid(x)

    return brentq(balance, -5.0, 5.0, xtol=1e-15)


@pytest.fixture(scope="module")
def limit():
    return follow(problem(), START)


def test_single_token_engine_cannot_decide_it():
    out = converge(problem(), START)
    assert out.status == "inconclusive"
    assert "ambiguous selection" in out.reason or "stalled" in out.reason


def test_follow_certifies_the_shared_limit(limit):
    assert limit.kind == "shared" and limit.diverges
    sh = limit.shared
    assert sh.converged
    assert sh.sets.tolist() == [[True, True, False]] * 3
    assert sh.one_minus_cos <= 1e-6 and sh.heading <= 1e-6
    assert sh.max_other_prob <= 1e-6
    assert "shared-mass limit" in limit.describe()
    assert "shared-mass limit" in limit.why_not([0, 0, 0])
    assert not limit.converged_to([0, 0, 0])


def test_finite_part_matches_the_closed_form(limit):
    q = limit.shared.finite.q
    assert q[1:] == pytest.approx([0.0, 0.0], abs=1e-12)
    assert q[0] == pytest.approx(closed_form_z(), abs=1e-10)
    share = sigmoid(closed_form_z())
    for i, row in enumerate(limit.shared.shares):
        want = share if i < 2 else 1 - share
        assert row[0] == pytest.approx(want, abs=1e-10)


def test_direction_matches_the_closed_form(limit):
    """p₁ = 0 (the equalities); the margins 0.2p₂ + p₃ ≥ 1 (inputs 0, 1) and 0.6p₂ + p₃ ≥ 1
    (input 2), of which the first binds: p_dir = (0, 0.2, 1)/1.04."""
    sh = limit.shared
    ref = np.array([0.0, 0.2, 1.0]) / 1.04
    assert sh.direction.w == pytest.approx(ref, abs=1e-9)
    # and the flow's own point lies along it
    unit = ref / np.linalg.norm(ref)
    p = sh.p
    assert 1 - p @ unit / np.linalg.norm(p) <= 1e-6


def test_not_shared_for_twins_only():
    keys = KEYS.copy()
    keys[:, 1] = keys[:, 0]  # token 1 is token 0's twin everywhere
    pr = problem(keys)
    assert shared.shared_limit(pr, np.array([0.0, 0.0, 40.0])) is None


def test_handover_needs_the_flow_at_q_star():
    pr = problem()
    p = np.array([closed_form_z() + 0.5, 7.9, 30.9])  # D part 0.5 away from q*
    out = shared.shared_limit(pr, p)
    assert out.status == "inconclusive" and "not settled" in out.reason
    p[0] = closed_form_z()
    assert shared.shared_limit(pr, p).converged


def test_no_strict_minimiser_no_limit():
    """The correlation loss makes L_S linear in the shares: no finite part to certify."""
    pr = problem(loss="correlation")
    out = shared.shared_limit(pr, np.array([0.0, 7.9, 30.9]))
    assert out is not None and not out.converged
    assert "finite part" in out.reason


def test_infeasible_sets():
    """A token on the segment between two set members has their logit whenever they tie:
    the equality SVM's rows for it cannot reach 1 (certified infeasible, with its Farkas
    pair)."""
    keys = KEYS.copy()
    keys[2, 2] = [0.5, 0.2, 1.0]  # on the segment between input 2's two set tokens
    p = np.array([0.0, 7.9, 30.9])
    sets = shared.read_sets(keys, p, math.log(3 / 1e-6))
    sets[2, 2] = False
    A_in, A_eq = shared.equality_rows(keys, sets, np.zeros(3, dtype=int))
    from models.ntp.qp import solve_equality_qp

    assert solve_equality_qp(A_in, A_eq).status == "infeasible"


def test_symmetric_instance_splits_in_half():
    """Inputs 0 and 2 only (one each way): q* = 0 by symmetry, shares ½."""
    keys, scores = KEYS[[0, 2]], SCORES[[0, 2]]
    lim = follow(problem(keys, scores), START)
    assert lim.kind == "shared"
    assert np.abs(lim.shared.finite.q).max() <= 1e-12
    for row in lim.shared.shares:
        assert row[0] == pytest.approx(0.5, abs=1e-12)


# ---------------------------------------------------------------- appended: the pinned problem


def pinned_setup(pr, keys, sets, tops):
    """(finite part, D⊥ basis, pinned problem) as ``shared_limit`` builds them."""
    A_in, A_eq = shared.equality_rows(keys, sets, tops)
    basis = shared.orthonormal_rows(A_eq)
    fin = shared.finite_part(pr, sets, basis, np.zeros(keys.shape[2]))
    assert fin.ok
    _, _, vt = np.linalg.svd(basis, full_matrices=True)
    perp = vt[basis.shape[0] :].T
    return fin, perp, shared.pinned_problem(pr, sets, tops, fin, perp)


@pytest.mark.parametrize("lam", [0.5, 2.0, 6.0, 12.0])
def test_pinned_field_is_the_flow_outside_D_exactly_at_q_star(lam):
    """With the D part at q*, the pinned problem has the full problem's logits, set masses
    and margins (each set's twins carry its LSE offset and its split-weighted score), so its
    field is the true flow's D⊥ part to rounding, not only to first order in the outside
    mass: along any D⊥ direction, also where an outside token leads (the last direction)."""
    pr = problem()
    sets = np.array([[True, True, False]] * 3)
    fin, perp, pinned = pinned_setup(pr, KEYS, sets, np.zeros(3, dtype=int))
    for direction in ([0, 0.2, 1], [0, 1, 0.3], [0, -1, 0.5], [0, 0.4, -1]):
        p = fin.q + lam * np.array(direction, dtype=float)
        log_scale, vec = pr.gradient_log_np(p)
        g = perp.T @ vec  # the true gradient's D⊥ part, up to e^{log_scale}
        u_pin, lgn_pin = pinned.flow_field_np(np.concatenate([perp.T @ p, [1.0]]))
        assert u_pin[-1] == 0.0  # the offset coordinate never moves
        assert np.abs(u_pin[:-1] + g / np.linalg.norm(g)).max() <= 1e-12, direction
        assert lgn_pin == pytest.approx(log_scale + math.log(np.linalg.norm(g)), abs=1e-12)


def test_pinned_jacobian_matches_central_differences_of_the_pinned_field():
    """The pinned field's closed-form Jacobian (from kernels.field_jacobian) against central
    differences of the pinned field itself, at points along and off the limiting ray."""
    pr = problem()
    sets = np.array([[True, True, False]] * 3)
    tops = np.zeros(3, dtype=int)
    basis = shared.orthonormal_rows(shared.equality_rows(KEYS, sets, tops)[1])
    fin = shared.finite_part(pr, sets, basis, np.zeros(3))
    _, _, vt = np.linalg.svd(basis, full_matrices=True)
    perp = vt[basis.shape[0] :].T
    pinned = shared.pinned_problem(pr, sets, tops, fin, perp)
    for y in ([0.3, 1.2], [2.0, 9.0], [-1.0, 25.0]):
        y = np.array([*y, 1.0])
        jac = pinned.flow_jacobian_np(y)
        h = 1e-6 * max(1.0, float(np.linalg.norm(y)))
        for j in range(len(y) - 1):
            e = np.zeros(len(y))
            e[j] = h
            diff = (pinned.flow_field_np(y + e)[0] - pinned.flow_field_np(y - e)[0]) / (2 * h)
            np.testing.assert_allclose(jac[:, j], diff, atol=1e-6 * max(1.0, np.abs(diff).max()))
        assert not jac[:, -1].any()  # the offset coordinate never moves


def test_relabelled_ntp_twin_reaches_its_certificate():
    """An NTP draw whose relabelled twin (helper's ATTN_TWINS run) ended with the pinned
    flow's heading at 0.29 when the pinned Jacobian was differenced: certified now."""
    from models.ntp.data import ntp_data
    from models.ntp.flow import flow_limit

    pi = np.array((2, 1, 0, 3))
    seqs = [[int(pi[t]) for t in s] for s in ([1, 2], [0, 1], [0, 1], [1, 3])]
    labels = [int(pi[y]) for y in (2, 0, 1, 1)]
    lim = flow_limit(ntp_data(np.eye(4), seqs, labels))
    assert lim.kind == "shared", lim.reason


def test_close_sets_adds_exactly_the_tokens_whose_difference_lies_in_D():
    """D = span(e1) from input 0's set {0, 1}; input 1's token 0 differs from its top (token
    1) by −2·e1 ∈ D and joins; the tokens that also differ along e2 stay out."""
    keys = np.array([[[1.0, 0.0], [0.0, 0.0], [0.0, -5.0]], [[0.0, 0.0], [2.0, 0.0], [0.0, -3.0]]])
    sets = np.array([[True, True, False], [False, True, False]])
    closed = shared.close_sets(keys, sets, np.array([0, 1]))
    assert closed.tolist() == [[True, True, False], [True, True, False]]
    assert sets.tolist() == [[True, True, False], [False, True, False]]  # not modified
    twins_only = np.array([[True, False, False], [False, True, False]])
    assert shared.close_sets(keys, twins_only, np.array([0, 1])).tolist() == twins_only.tolist()


def test_a_member_trailing_far_below_its_set_is_closed_in():
    """The ladder's conflict draw k = 96 (small rung; undecided before the closure): inputs 1
    and 2 share tokens {0, 1} (their keys differ along e1 only), so D = span(e1) and the flow's
    finite part sets p_1; at it, input 0's token 0 trails token 1 by 1.53·p_1 ≈ 31, outside
    the reading's log(T/1e-6), yet its logit gap is finite for ever: it belongs to the set.
    Read without it, the equality SVM asks a margin along D and is infeasible."""
    from models.ntp.qp import solve_equality_qp
    from strategies.ladder import conflict_problem

    pr = conflict_problem(3, 4, 2, 96)
    keys, gam = pr._np
    lim = follow(pr, None)
    assert lim.kind == "shared", lim.describe()
    sets = lim.shared.sets
    assert sets[:, :2].all() and not sets[:, 2:].any()
    p = lim.outcome.p.numpy()
    tops = np.argmax(keys @ p, axis=1)
    raw = shared.read_sets(keys, p, math.log(pr.T / 1e-6))
    assert not raw[0, 0] and raw[0, 1]
    A_in, A_eq = shared.equality_rows(keys, raw, tops)
    assert solve_equality_qp(A_in, A_eq).status == "infeasible"
    # q* by an independent formula: with two live tokens per input, dL/dq = (1/3) Σ_i
    # ℓ'(m_i)(γ_i1 − γ_i0)·s_i0·s_i1·(k_i1 − k_i0), zero at the reduced loss's minimiser
    q = lim.shared.finite.q
    x = keys[:, 1] - keys[:, 0]
    s1 = 1 / (1 + np.exp(-(x @ q)))
    m = (1 - s1) * gam[:, 0] + s1 * gam[:, 1]
    lp = -1 / (1 + np.exp(m))
    grad = ((lp * (gam[:, 1] - gam[:, 0]) * s1 * (1 - s1))[:, None] * x).sum(0) / 3
    assert np.abs(grad).max() <= 1e-12
    share = lim.shared.shares[0][0]
    assert share == pytest.approx(1 - s1[0], rel=1e-9) and 1e-15 < share < 1e-12
