"""Unit tests of the graph-SVM, the equality margin QP and the finite component
(models/ntp/svm.py, qp.py, finite.py; spec ntp.md §1.2, §2.2–2.4, controls C3, C6, C7):
closed forms, an independent Clarabel solve, KKT and Farkas certificates, the structure of
§2.3, W_fin on I2 and C6, and the log-odds system."""

import math

import cvxpy as cp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.ntp.data import ntp_data
from models.ntp.finite import finite_component, limiting_shares, log_odds_check, reduced_model
from models.ntp.graph import PriorityGraph
from models.ntp.qp import certify_equality, farkas_residual, project, solve_equality_qp
from models.ntp.svm import cyclic_subspace, graph_svm, graph_svm_rows
from models.oracles.svm import w_svm

I2_SEQUENCES = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
I2_LABELS = [1, 1, 2, 3, 3, 2, 2]


def unit_rows(rng, K, d):
    E = rng.standard_normal((K, d))
    return E / np.linalg.norm(E, axis=1, keepdims=True)


def i2():
    """Instance I2 of spec §2.4."""
    return ntp_data(unit_rows(np.random.default_rng(0), 5, 6), I2_SEQUENCES, I2_LABELS)


@st.composite
def official_style(draw, max_tokens=6, max_dim=8):
    """Spec §4.1's generator, small: unit embeddings, distinct tokens, label uniform in the
    sequence; K ≤ d is drawn as often as K > d."""
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    K = draw(st.integers(3, max_tokens))
    d = draw(st.integers(2, max_dim))
    n, T = draw(st.integers(1, 6)), draw(st.integers(2, min(K, 4)))
    seqs = [rng.choice(K, size=T, replace=False).tolist() for _ in range(n)]
    return ntp_data(unit_rows(rng, K, d), seqs, [int(rng.choice(s)) for s in seqs])


def clarabel_reference(rows):
    """The same QP through cvxpy + Clarabel: an independent solver, for comparison only."""
    w = cp.Variable(rows.A_in.shape[1])
    cons = [rows.A_in @ w >= 1] if len(rows.A_in) else []
    cons += [rows.A_eq @ w == 0] if len(rows.A_eq) else []
    problem = cp.Problem(cp.Minimize(cp.sum_squares(w)), cons)
    problem.solve(solver=cp.CLARABEL)
    return problem.status, w.value


# ------------------------------------------------------------------------------ closed forms


def test_chain_i1_closed_form():
    """I1 (spec §2.3): u_0 = (−1.5, 1.5, 0.5, −0.5), ‖W_svm‖² = 5, W_svm = u_0 e_0ᵀ."""
    data = ntp_data(np.eye(4), [[1, 2, 3, 0], [2, 3, 0], [3, 0]], [1, 2, 3])
    sol = graph_svm(data)
    assert sol.ok and sol.certificate.worst <= 1e-12
    expected = np.zeros((4, 4))
    expected[:, 0] = [-1.5, 1.5, 0.5, -0.5]
    np.testing.assert_allclose(sol.W, expected, rtol=0, atol=1e-12)


def test_cycle_above_a_sink_closed_form():
    """E = I₃, ([1,2,0],1), ([1,2,0],2): u_1 = u_2 = a, u_0 ≤ a − 1; min 2a² + (a − 1)² at
    a = 1/3, so u = (−2/3, 1/3, 1/3)."""
    data = ntp_data(np.eye(3), [[1, 2, 0], [1, 2, 0]], [1, 2])
    sol = graph_svm(data)
    assert sol.ok
    assert sol.rows.equality_triples == ((0, 1, 2), (0, 2, 1))
    np.testing.assert_allclose(sol.W[:, 0], [-2 / 3, 1 / 3, 1 / 3], rtol=0, atol=1e-12)
    assert np.linalg.norm(sol.W) ** 2 == pytest.approx(2 / 3, rel=1e-12)


def test_a_cycle_alone_is_vacuous():
    """([1,0],1), ([1,0],0): one SCC, every row an equality: W_svm = 0, no direction."""
    sol = graph_svm(ntp_data(np.eye(2), [[1, 0], [1, 0]], [1, 0]))
    assert sol.ok and sol.vacuous and not sol.W.any()
    with pytest.raises(ValueError, match="direction is undefined"):
        _ = sol.direction


# ----------------------------------------------------------------- certificates, infeasibility


def test_infeasible_in_one_dimension_has_a_farkas_pair():
    """d = 1, x = (1, 2, 3): ([1,2,0],1) asks (2−3)w ≥ 1 and (2−1)w ≥ 1 (w is a scalar)."""
    data = ntp_data([[1.0], [2.0], [3.0]], [[1, 2, 0]], [1])
    sol = graph_svm(data)
    assert sol.status == "infeasible" and sol.W is None
    value, residual = farkas_residual(
        sol.rows.A_in, sol.rows.A_eq, sol.solution.ineq_duals, sol.solution.eq_duals
    )
    assert value > 0 and residual <= 1e-12 * value


def test_single_token_svm_on_a_cycle_is_infeasible():
    """Control C3: margin ≥ 1 on every edge of I2 (each token its own SCC) is infeasible, and
    the Farkas pair proves it; the graph-SVM itself is feasible."""
    data = i2()
    singletons = {k: PriorityGraph(k, 5, frozenset()) for k in (0, 4)}
    wrong = graph_svm(data, graphs=singletons)
    assert wrong.status == "infeasible"
    y = wrong.solution.ineq_duals
    value, residual = farkas_residual(wrong.rows.A_in, wrong.rows.A_eq, y, wrong.solution.eq_duals)
    assert value > 0 and residual <= 1e-10 * value
    assert graph_svm(data).ok


def test_infeasible_only_through_an_equality():
    """w_0 − w_1 ≥ 1 and w_0 − w_1 = 0: the Farkas pair needs μ (y = 1, μ = −1)."""
    sol = solve_equality_qp([[1.0, -1.0]], [[1.0, -1.0]])
    assert sol.status == "infeasible"
    value, residual = farkas_residual([[1.0, -1.0]], [[1.0, -1.0]], sol.ineq_duals, sol.eq_duals)
    assert value > 0 and residual <= 1e-12 * value


def test_certificate_rejects_a_perturbed_optimum():
    """The KKT certificate is not a formality: 1e-6 off the optimum fails it."""
    sol = graph_svm(i2())
    s = sol.solution
    cert = certify_equality(sol.rows.A_in, sol.rows.A_eq, s.w, s.ineq_duals, s.eq_duals)
    assert cert.ok and cert.worst <= 1e-12
    bumped = s.w + 1e-6 * np.random.default_rng(1).standard_normal(s.w.shape)
    assert not certify_equality(sol.rows.A_in, sol.rows.A_eq, bumped, s.ineq_duals, s.eq_duals).ok


def test_equality_qp_closed_forms():
    """In R³ with w_1 = w_2: (a) w_0 ≥ 1, w_0 − w_1 ≥ 1 gives w = (1, 0, 0); (b) w_0 − w_1 ≥ 1,
    w_1 + w_2 ≥ 1 gives w_1 = w_2 = t ≥ 1/2, w_0 ≥ 1 + t, min (1 + t)² + 2t² at t = 1/2."""
    equal = [[0, 1.0, -1.0]]
    sol = solve_equality_qp([[1.0, 0, 0], [1.0, -1.0, 0]], equal)
    assert sol.ok
    np.testing.assert_allclose(sol.w, [1, 0, 0], atol=1e-14)
    sol = solve_equality_qp([[1.0, -1.0, 0], [0, 1.0, 1.0]], equal)
    assert sol.ok
    np.testing.assert_allclose(sol.w, [1.5, 0.5, 0.5], atol=1e-14)


def test_solver_failure_is_a_reason_never_an_answer(monkeypatch):
    """A failed inner solve passes through as its status with no point; an inner "optimal"
    whose point fails the full KKT certificate becomes "inaccurate" (reported to
    models.numerics.failures), again with no point."""
    from models.ntp import qp
    from models.numerics import failures
    from models.oracles.svm import SVMSolution

    broken = SVMSolution("solver_error", None, None, None, "none", "every solver raised")
    monkeypatch.setattr(qp, "solve_margin_qp", lambda A, b, tol: broken)
    sol = solve_equality_qp([[1.0, 0.0]], [[0.0, 1.0]])
    assert sol.status == "solver_error" and sol.w is None and "every solver raised" in sol.reason
    wrong = SVMSolution("optimal", np.array([0.5, 0.0]), np.array([0.5]), None, "fake", "fake")
    monkeypatch.setattr(qp, "solve_margin_qp", lambda A, b, tol: wrong)
    with failures.watch() as seen:
        sol = solve_equality_qp([[1.0, 0.0]], [[0.0, 1.0]])
    assert sol.status == "inaccurate" and sol.w is None
    assert seen.first is not None and seen.first.source == failures.SVM_ORACLE


# -------------------------------------------------------------------------- random instances


@settings(max_examples=20, deadline=None)
@given(official_style())
def test_matches_an_independent_clarabel_solve(data):
    """Same status; where optimal, the same W to 1e-6 (Clarabel's own accuracy) and a
    certificate ≤ 1e-8 (ours is KKT-exact)."""
    sol = graph_svm(data)
    status, w = clarabel_reference(sol.rows)
    assert sol.status in ("optimal", "infeasible"), sol.reason
    assert (sol.status == "optimal") == (status == "optimal"), (sol.status, status)
    if sol.ok:
        assert sol.certificate.worst <= 1e-8
        np.testing.assert_allclose(sol.W.ravel(), w, rtol=0, atol=1e-6)


@settings(max_examples=20, deadline=None)
@given(official_style())
def test_structure_of_w_svm(data):
    """§2.3: W_svm ⟂ S_cyc; columns in span{x_a − x_b}, rows in span{queries}; unchanged by
    duplicating a sample."""
    sol = graph_svm(data)
    if not sol.ok:
        return
    scale = max(1.0, np.linalg.norm(sol.W))
    assert np.linalg.norm(project(cyclic_subspace(data), sol.W)) <= 1e-8 * scale
    E = data.embeddings
    diffs = np.linalg.qr((E[1:] - E[0]).T)[0]
    queries = np.linalg.qr(E[list(set(data.queries))].T)[0]
    assert np.linalg.norm(sol.W - diffs @ (diffs.T @ sol.W)) <= 1e-9 * scale
    assert np.linalg.norm(sol.W - (sol.W @ queries) @ queries.T) <= 1e-9 * scale
    twice = ntp_data(E, data.sequences + data.sequences[:1], data.labels + data.labels[:1])
    np.testing.assert_allclose(graph_svm(twice).W, sol.W, rtol=0, atol=1e-8 * scale)


@settings(max_examples=20, deadline=None)
@given(official_style(max_tokens=5, max_dim=5))
def test_feasible_when_embeddings_are_independent(data):
    """§2.2 (NTP-FEAS): K ≤ d with independent embeddings ⇒ the graph-SVM is feasible."""
    if data.num_tokens > data.dim:
        E = np.eye(data.num_tokens)  # lift to K = d: orthonormal, so independent
        data = ntp_data(E, data.sequences, data.labels)
    assert graph_svm(data).ok


def test_acyclic_graph_svm_is_tf_as_svm():
    """§2.3 item 5: one query, every graph acyclic ⇒ W_svm = the W-SVM of models.oracles.svm with α
    the label positions (every edge a ≥ 1 row)."""
    rng = np.random.default_rng(3)
    K, d, n, T = 6, 8, 5, 4
    E = unit_rows(rng, K, d)
    rank = rng.permutation(K - 1) + 1  # priority order of tokens 1..K−1; 0 is the query
    seqs, alpha = [], []
    for _ in range(n):
        others = rng.choice(np.arange(1, K), size=T - 1, replace=False)
        seqs.append([*others.tolist(), 0])
        alpha.append(int(np.argmin(rank[others - 1])))  # the label: highest priority
    data = ntp_data(E, seqs, [s[a] for s, a in zip(seqs, alpha, strict=True)])
    sol = graph_svm(data)
    assert sol.ok and not sol.rows.equality_triples
    X = E[np.array(seqs)]
    reference = w_svm(X, E[0], alpha)
    assert reference.ok
    np.testing.assert_allclose(sol.W, reference.x, rtol=0, atol=1e-9)


def test_bad_input():
    with pytest.raises(ValueError, match=r"labels\[0\]: token 2 does not occur"):
        ntp_data(np.eye(3), [[0, 1]], [2])
    data = ntp_data(np.eye(3), [[0, 1]], [2], require_realizable=False)
    with pytest.raises(ValueError, match=r"labels\[0\]: token 2 does not occur in sequence 0"):
        graph_svm(data)
    with pytest.raises(ValueError, match="graphs: no priority graph for query token 1"):
        graph_svm(ntp_data(np.eye(3), [[0, 1]], [0]), graphs={})
    assert graph_svm_rows(ntp_data(np.eye(3), [[0, 1]], [0])).margin_triples == ((1, 0, 1),)


# --------------------------------------------------------------------- the finite component


def test_i2_finite_component():
    """§2.4: W_fin = log 2 · (x_1 − x_2) x_0ᵀ / ‖x_1 − x_2‖², L* = (2 log(3/2) + log 3)/7."""
    data = i2()
    fin = finite_component(data)
    E = data.embeddings
    u = E[1] - E[2]
    expected = math.log(2) * np.outer(u, E[0]) / (u @ u)
    assert fin.converged and fin.gradient_norm <= 1e-12
    np.testing.assert_allclose(fin.W, expected, rtol=0, atol=1e-12)
    assert fin.loss == pytest.approx((2 * math.log(1.5) + math.log(3)) / 7, rel=1e-13)
    assert np.linalg.norm(fin.W) == pytest.approx(0.452, abs=5e-4)  # control C7: W_fin ≠ 0
    check = log_odds_check(data)
    assert check.applies
    np.testing.assert_allclose(check.W, fin.W, rtol=0, atol=1e-12)


def test_c6_soft_composition_is_not_the_label_frequencies():
    """Control C6: a 3-cycle where each sample sees two members; W_fin has u1−u2 = a,
    u2−u3 = u3−u1 = b with a = −2b and 2σ(−a) = σ(a/2); the frequency split (log 2, 0) has a
    higher reduced loss (0.65067 vs 0.64195); the log-odds bridge does not apply."""
    data = ntp_data(np.eye(4), [[1, 2, 0], [1, 2, 0], [2, 3, 0], [3, 1, 0]], [1, 1, 2, 3])
    fin = finite_component(data)
    u = fin.W[:, 0]
    a, b = u[1] - u[2], u[2] - u[3]
    assert b == pytest.approx(-a / 2, abs=1e-12) and u[3] - u[1] == pytest.approx(b, abs=1e-12)
    sigma = lambda t: 1 / (1 + math.exp(-t))  # noqa: E731
    assert 2 * sigma(-a) == pytest.approx(sigma(a / 2), abs=1e-12)
    assert fin.loss == pytest.approx(0.64195, abs=5e-6)
    freq = np.zeros((4, 4))
    freq[1:, 0] = [math.log(2), 0.0, 0.0]
    freq[1:, 0] -= freq[1:, 0].mean()
    assert reduced_model(data).loss(freq) == pytest.approx(0.65067, abs=5e-6)
    assert not log_odds_check(data).applies


@settings(max_examples=20, deadline=None)
@given(official_style())
def test_w_fin_is_the_reduced_minimum_on_s_cyc(data):
    """Newton's answer, checked with the attention model's own gradient (a second
    implementation): in S_cyc, and its S_cyc-gradient of the reduced loss ≤ 1e-10."""
    fin = finite_component(data)
    assert fin.converged, fin.reason
    basis = cyclic_subspace(data)
    assert np.linalg.norm(fin.W - project(basis, fin.W)) <= 1e-12
    grad = reduced_model(data).gradient(fin.W)
    assert np.linalg.norm(project(basis, grad)) <= 1e-10


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(2, 4), st.booleans())
def test_log_odds_bridge_where_it_applies(seed, size, repeat):
    """Every sample is [C…, 0] with C = {1..size} (one token repeated when ``repeat``), labels
    cover C: then (x_a − x_b)ᵀ W_fin x_0 = log(n_a/n_b) − log(c_a/c_b) (§2.4)."""
    rng = np.random.default_rng(seed)
    E = unit_rows(rng, size + 1, size + 2)
    members = list(range(1, size + 1))
    seq = [*members, 1, 0] if repeat else [*members, 0]
    labels = members + rng.choice(members, size=3).tolist()
    data = ntp_data(E, [seq] * len(labels), labels)
    fin = finite_component(data)
    counts = {a: labels.count(a) for a in members}
    mult = {a: seq.count(a) for a in members}
    for a in members[1:]:
        gap = (E[a] - E[1]) @ fin.W @ E[0]
        assert gap == pytest.approx(
            math.log(counts[a] / counts[1]) - math.log(mult[a] / mult[1]), abs=1e-11
        )
    check = log_odds_check(data)
    assert check.applies
    np.testing.assert_allclose(check.W, fin.W, rtol=0, atol=1e-11)


def test_unconverged_newton_is_reported():
    """A gradient tolerance Newton cannot reach is a failure of the machinery, reported."""
    from models.numerics import failures

    with failures.watch() as seen:
        fin = finite_component(i2(), tol=0.0)
    assert not fin.converged and seen.first.source == failures.NUMERICS


def test_limiting_shares_on_i2():
    """NTP-COMP at W_fin on I2: inside {1, 2} under query 0 the shares are 2/3 and 1/3; samples
    whose label's SCC is a singleton put all their mass on it."""
    shares = limiting_shares(i2())
    for sample in shares[:3]:
        assert sample[1] == pytest.approx(2 / 3, abs=1e-12)
        assert sample[2] == pytest.approx(1 / 3, abs=1e-12)
    assert shares[3:] == [{3: 1.0}, {3: 1.0}, {2: 1.0}, {2: 1.0}]


def test_an_unrealizable_label_is_refused_by_its_index_and_reason():
    from models.ntp.data import ntp_data

    with pytest.raises(ValueError) as err:
        ntp_data(np.eye(3), [[0, 1], [1, 2]], [1, 0])
    assert str(err.value) == (
        "labels[1]: token 0 does not occur in sequence 1 [1, 2] "
        "(the attention model needs realizable labels, spec §1.1)"
    )
    assert ntp_data(np.eye(3), [[0, 1], [1, 2]], [1, 0], require_realizable=False).realizable == (
        True,
        False,
    )
