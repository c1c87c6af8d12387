"""models/ntp (all but predict.py, which tests/test_ntp_predict.py covers), function by function:
every field each function returns, every branch, every documented constant and every error
message, on instances small enough to solve by hand (spec ntp.md; I1, I2, C6, C12 are there).

The expected values come by another route than the code's: a hand-worked closed form (a two-token
cycle whose loss is a·softplus(−u) + b·softplus(u), the chain I1, a 2×2 embedding with integer
entries), a brute-force enumeration, mpmath, finite differences, or a fake model whose GD iterates
are geometric. The rules with constants (Armijo's 1e-4, the halving line search, the tolerances
LOG_ODDS_TOL and COMPATIBLE_TOL, the rank threshold) are exercised on both sides of the
constant, and a tolerance is patched to the very residual the code computed when only ≤ vs <
tells the two apart. Long loops are cut short by patching MAX_NEWTON_STEPS."""

from __future__ import annotations

import math

import mpmath
import numpy as np
import pytest

from models.ntp import finite, linear, qp
from models.ntp import gd as gd_module
from models.ntp.attention import (
    NTPAttention,
    log_softplus,
    ntp_attention,
    ntp_model,
    sample_table,
    smoothness_bound,
    softplus,
)
from models.ntp.data import NTPData, ntp_data, token_id, token_sequences
from models.ntp.finite import (
    FiniteComponent,
    _backtrack,
    _design,
    _value_grad_hess,
    finite_component,
    limiting_shares,
    log_odds_check,
    log_odds_system,
    reduced_model,
    reduced_samples,
)
from models.ntp.gd import batch, batched_attention_gd, batched_linear_gd, gd
from models.ntp.graph import (
    PriorityGraph,
    priority_graphs,
    priority_triples,
    scc_partition,
    strongly_connected_components,
    topological_order,
)
from models.ntp.linear import linear_ntp
from models.ntp.qp import (
    EqualityQPSolution,
    certify_equality,
    farkas_residual,
    orthonormal_rows,
    project,
    project_out,
    solve_equality_qp,
)
from models.ntp.svm import cyclic_subspace, graph_svm, graph_svm_of, graph_svm_rows
from models.numerics import failures
from models.oracles.svm import SVMSolution

LOG2 = math.log(2.0)
#: Instance I1 of spec §2.3 (E = I₄): the chain 1 ⇒ 2 ⇒ 3 ⇒ 0 under query 0.
I1 = ([[1, 2, 3, 0], [2, 3, 0], [3, 0]], [1, 2, 3])
#: Spec §2.4's I2 (tokens only).
I2_SEQUENCES = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
I2_LABELS = [1, 1, 2, 3, 3, 2, 2]


def i1():
    return ntp_data(np.eye(4), *I1)


def i2():
    E = np.random.default_rng(0).standard_normal((5, 6))
    return ntp_data(E / np.linalg.norm(E, axis=1, keepdims=True), I2_SEQUENCES, I2_LABELS)


def two_token_cycle(a: int = 2, b: int = 1):
    """E = I₂, query 0, ``a`` samples ([1, 0], 1) and ``b`` samples ([1, 0], 0): one SCC {0, 1}.
    With u = a_1 − a_0 the (reduced = full) loss is (a·softplus(−u) + b·softplus(u))/(a + b),
    minimised at u = log(a/b)."""
    return ntp_data(np.eye(2), [[1, 0]] * (a + b), [1] * a + [0] * b)


def sigmoid(t: float) -> float:
    return 1.0 / (1.0 + math.exp(-t))


def sp(t: float) -> float:
    """softplus in plain Python (the test's own, for closed forms)."""
    return max(t, 0.0) + math.log1p(math.exp(-abs(t)))


def message(exc_info) -> str:
    return str(exc_info.value)


# =================================================================================== data.py


def test_token_ids_are_python_ints_inside_the_range_and_refused_outside_it_by_name():
    assert token_id(0, "t", 3) == 0
    two = token_id(np.int64(2), "t", 3)
    assert two == 2 and type(two) is int
    for bad, text in (
        (3, "t: token id 3 is outside [0, 3)"),
        (-1, "t: token id -1 is outside [0, 3)"),
        (True, "t: expected a token id, got the boolean True"),
        (np.bool_(False), f"t: expected a token id, got the boolean {np.bool_(False)!r}"),
        (1.0, "t: expected an integer token id, got 1.0"),
        ("1", "t: expected an integer token id, got '1'"),
    ):
        with pytest.raises(ValueError) as err:
            token_id(bad, "t", 3)
        assert message(err) == text


def test_token_sequences_are_tuples_of_ints_and_each_bad_field_is_named():
    seqs, ys = token_sequences(np.array([[1, 0], [0, 1]]), (np.int64(1), 0), 2)
    assert seqs == ((1, 0), (0, 1)) and ys == (1, 0)
    assert all(type(t) is int for s in seqs for t in s) and all(type(y) is int for y in ys)
    cases = [
        (np.array([1, 0]), [1], "sequences: expected a list of token lists, got shape (2,)"),
        (["ab"], [0], "sequences[0]: expected a list of token ids, got 'ab'"),
        ([[0], b"a"], [0, 0], "sequences[1]: expected a list of token ids, got b'a'"),
        ([[0], 5], [0, 0], "sequences[1]: expected a list of token ids, got 5"),
        ([[0], []], [0, 0], "sequences[1]: is empty (the query is the last token)"),
        ([[0], [0, 2]], [0, 0], "sequences[1]: token id 2 is outside [0, 2)"),
        ([[0], [1]], [0], "labels: 1 labels for 2 sequences"),
        ([[0], [1]], [0, 2], "labels[1]: token id 2 is outside [0, 2)"),
    ]
    for seqs, labels, text in cases:
        with pytest.raises(ValueError) as err:
            token_sequences(seqs, labels, 2)
        assert message(err) == text


def test_ntp_data_fields_and_its_own_errors():
    E = [[1, 2], [3, 4], [5, 6]]
    data = ntp_data(E, [[0, 1], [2, 1, 0]], [1, 2])
    assert isinstance(data, NTPData) and data.embeddings.dtype == np.float64
    assert (data.num_tokens, data.dim, data.n) == (3, 2, 2)
    assert data.queries == (1, 0) and data.realizable == (True, True)
    assert data.sequences == ((0, 1), (2, 1, 0)) and data.labels == (1, 2)
    for shape in ((0, 2), (2, 0)):
        with pytest.raises(ValueError) as err:
            ntp_data(np.zeros(shape), [[0]], [0])
        assert message(err) == f"embeddings: expected a non-empty K×d matrix, got shape {shape}"
    with pytest.raises(ValueError) as err:
        ntp_data(E, [], [])
    assert message(err) == "sequences: expected at least one sequence"
    for bad, text in (
        ([1.0, 2.0], "embeddings: expected 2 dimensions, got shape (2,)"),
        ([[1.0, np.inf]], "embeddings: contains NaN or infinity"),
    ):
        with pytest.raises(ValueError) as err:
            ntp_data(bad, [[0]], [0])
        assert message(err) == text
    with pytest.raises(ValueError) as err:  # the first unrealizable label is the one named
        ntp_data(E, [[0, 1], [1, 2], [2]], [1, 0, 0])
    assert message(err) == (
        "labels[1]: token 0 does not occur in sequence 1 [1, 2] "
        "(the attention model needs realizable labels, spec §1.1)"
    )
    loose = ntp_data(E, [[0, 1], [1, 2], [2]], [1, 0, 0], require_realizable=False)
    assert loose.realizable == (True, False, False)


# ================================================================================== graph.py


def test_tarjan_returns_the_sccs_sorted_in_the_order_it_completes_them():
    # 0 ⇄ 1 → 2, 3 with a self-loop: {2} completes first, then {0, 1}, then {3}.
    assert strongly_connected_components([[1], [0, 2], [], [3]]) == [[2], [0, 1], [3]]
    assert strongly_connected_components([[1], [2], [0], []]) == [[0, 1, 2], [3]]
    # a chain 2 → 1 → 0 seen from 0 first: three singletons in index order
    assert strongly_connected_components([[], [0], [1]]) == [[0], [1], [2]]
    # 0 → 1 → 2 → 1 and 2 → 3 → 0: everything is one component
    assert strongly_connected_components([[1], [2], [1, 3], [0]]) == [[0, 1, 2, 3]]
    # 0 → 1 → 2 → 3 → 1: the low-link of 3 reaches 1 through its DFS parent 2
    assert strongly_connected_components([[1], [2], [3], [1]]) == [[1, 2, 3], [0]]
    # two cycles joined one way: 0 ⇄ 1 → 2 ⇄ 3; the low-link of 3 must not leak into {0, 1}
    assert strongly_connected_components([[1], [0, 2], [3], [2]]) == [[2, 3], [0, 1]]
    assert strongly_connected_components([]) == []


def test_kahns_order_takes_the_ready_node_of_smallest_key():
    assert topological_order([{1}, set(), set()], [5, 0, 3]) == [2, 0, 1]
    assert topological_order([{1}, set(), set()], [0, 5, 3]) == [0, 2, 1]
    # 1 waits for both 0 and 2 (in-degree 2)
    assert topological_order([{1}, set(), {1}], [0, 1, 2]) == [0, 2, 1]
    assert topological_order([set(), {0}, {0}], [0, 2, 1]) == [2, 1, 0]


def test_priority_graph_of_a_two_cycle_above_a_sink_and_an_unused_token():
    """Query 0: ([1,2,0],1), ([2,1,0],2), ([3,0],3): 1 ⇄ 2, both → 0, 3 → 0; 4 unused."""
    graphs = priority_graphs([[1, 2, 0], [2, 1, 0], [3, 0]], [1, 2, 3], 5)
    assert list(graphs) == [0]
    g = graphs[0]
    assert (g.query, g.num_tokens) == (0, 5)
    assert g.edges == {(1, 2), (2, 1), (1, 0), (2, 0), (3, 0)}
    assert g.components == ({1, 2}, {3}, {0}, {4})
    assert g.component_of == (2, 0, 0, 1, 3)
    assert g.cyclic_components == ({1, 2},) and not g.is_acyclic
    assert g.same_component(1, 2) and not g.same_component(1, 3)
    assert g.has_priority(1, 2) and g.has_priority(2, 1) and g.has_priority(3, 0)
    assert not g.has_priority(1, 1) and not g.has_priority(1, 3) and not g.has_priority(0, 1)
    assert not g.has_priority(4, 0) and not g.has_priority(0, 4)
    assert g.top_components([0, 1, 2, 3, 4]) == (0, 1, 3)
    assert g.top_components([0]) == (2,) and g.top_components([2, 0]) == (0,)
    assert g.top_component([1, 0]) == {1, 2} and g.top_component([3, 1]) is None
    assert g.top_component([]) is None


def test_priority_graphs_are_keyed_by_query_in_order_and_scc_partition_forgets_the_order():
    # an unrealizable sample adds nothing, and the samples after it still count
    assert priority_triples([[1, 0], [1, 2, 0]], [2, 1], 3) == {(0, 1, 2), (0, 1, 0)}
    seqs, labels = [[1, 0, 2], [0, 1], [2, 1]], [1, 0, 2]
    assert priority_triples(seqs, labels, 3) == {(2, 1, 0), (2, 1, 2), (1, 0, 1), (1, 2, 1)}
    graphs = priority_graphs(seqs, labels, 3)
    assert list(graphs) == [1, 2]
    assert graphs[2].edges == {(1, 0), (1, 2)} and graphs[1].edges == {(0, 1), (2, 1)}
    singletons = frozenset({frozenset({0}), frozenset({1}), frozenset({2})})
    assert scc_partition(seqs, labels, 3) == {1: singletons, 2: singletons}
    # one more sample closes 0 ⇄ 1 under query 1
    assert scc_partition([*seqs, [0, 1]], [*labels, 1], 3)[1] == {
        frozenset({0, 1}),
        frozenset({2}),
    }
    # a graph built by hand with no edges: K singletons in token order, acyclic
    lone = PriorityGraph(0, 3, frozenset())
    assert lone.components == ({0}, {1}, {2}) and lone.is_acyclic and lone.cyclic_components == ()


# ============================================================================== attention.py


def test_sample_table_stores_distinct_tokens_counts_label_slot_and_query():
    t = sample_table([[2, 1, 2, 0], [1, 0]], [2, 0])
    assert t.n == 2
    np.testing.assert_array_equal(t.tokens, [[0, 1, 2], [0, 1, 0]])  # padding repeats the query
    np.testing.assert_array_equal(t.log_count, [[0.0, 0.0, LOG2], [0.0, 0.0, -np.inf]])
    np.testing.assert_array_equal(t.label_slot, [2, 0])
    np.testing.assert_array_equal(t.query, [0, 0])
    moved = sample_table([[2, 1, 2, 0], [1, 0]], [2, 0], queries=[5, 6])
    np.testing.assert_array_equal(moved.tokens, [[0, 1, 2], [0, 1, 6]])
    np.testing.assert_array_equal(moved.query, [5, 6])
    with pytest.raises(ValueError, match="zip"):  # one query per sequence, strictly
        sample_table([[1, 0], [1, 0]], [1, 0], queries=[0])
    with pytest.raises(ValueError) as err:
        sample_table([[1, 0], [2, 1]], [1, 0])
    assert message(err) == "labels: token 0 does not occur in its sequence [2, 1]"


@pytest.mark.parametrize("u", [-745.5, -700.0, -40.0, -31.0, -30.5, -30.0, -29.5, -1e-3, 0.0, 2.5])
def test_softplus_and_its_log_are_within_one_ulp_on_both_sides_of_their_thresholds(u):
    """Within one ulp of mpmath: the −30 branch's u − e^u/2 is 2–3 ulps off at u = −31 if its
    sign or its 1/2 changes."""
    with mpmath.workdps(60):
        exact = mpmath.log1p(mpmath.exp(u))
        log_exact = float(mpmath.log(exact)) if exact > 0 else None
    assert abs(float(softplus(np.array(u))) - float(exact)) <= math.ulp(float(exact))
    if float(exact) > 0:
        assert abs(float(log_softplus(np.array(u))) - log_exact) <= math.ulp(log_exact)


def test_softplus_of_large_arguments_and_log_softplus_below_underflow():
    np.testing.assert_array_equal(softplus(np.array([40.0, 800.0])), [40.0, 800.0])
    assert softplus(-800.0) == 0.0 and log_softplus(-800.0) == -800.0
    # u − e^u/2 at u = −40: e^u/2 is below half an ulp of 40
    assert log_softplus(np.array([-1000.0, -40.0])).tolist() == [-1000.0, -40.0]


def _three_token_model():
    """E = I₃, query 0: ([2,1,2,0], 2) with the label twice and ([1,0], 0); for E = I the
    logit of token v is W[v, 0]."""
    return ntp_model(np.eye(3), [[2, 1, 2, 0], [1, 0]], [2, 0])


def test_the_attention_model_by_hand_loss_mass_coefficients_and_gradient():
    model = _three_token_model()
    assert model.normalizer == 2.0 and model.dim == 3
    a0, a1, a2 = 0.5, -1.0, 2.0
    W = np.zeros((3, 3))
    W[:, 0] = [a0, a1, a2]
    W[1, 2] = 7.0  # a column no query reads
    np.testing.assert_array_equal(model.logits(W), [[a0, a1, a2], [a0, a1, a0]])
    e0, e1, e2 = math.exp(a0), math.exp(a1), 2 * math.exp(a2)  # token 2 counts twice
    Z1, Z2 = e0 + e1 + e2, e0 + e1
    parts = model.parts(W)
    np.testing.assert_allclose(parts.label, [a2 + LOG2, a0], rtol=1e-15)
    np.testing.assert_allclose(parts.off, [math.log(e0 + e1), a1], rtol=1e-15)
    np.testing.assert_allclose(parts.total, [math.log(Z1), math.log(Z2)], rtol=1e-15)
    losses = [-math.log(e2 / Z1), -math.log(e0 / Z2)]
    np.testing.assert_allclose(model.sample_losses(W), losses, rtol=1e-14)
    assert model.loss(W) == pytest.approx(sum(losses) / 2, rel=1e-14)
    assert model.log_loss(W) == pytest.approx(math.log(sum(losses) / 2), rel=1e-14)
    mass = model.attention_mass(W)
    np.testing.assert_allclose(mass, [[e0 / Z1, e1 / Z1, e2 / Z1], [e0 / Z2, e1 / Z2, 0]], 1e-14)
    log_abs, sign = model.logit_coefficients(W)
    # off the label: +s_v; on it: −(mass off the label); padding: sign 0, log −inf
    np.testing.assert_array_equal(sign, [[1.0, 1.0, -1.0], [-1.0, 1.0, 0.0]])
    g = np.array([[e0 / Z1, e1 / Z1, -(e0 + e1) / Z1], [-e1 / Z2, e1 / Z2, 0.0]])
    np.testing.assert_allclose(np.exp(log_abs) * sign, g, rtol=1e-14, atol=0)
    assert log_abs[1, 2] == -np.inf
    expected = np.zeros((3, 3))
    expected[:, 0] = [(g[0, 0] + g[1, 0]) / 2, (g[0, 1] + g[1, 1]) / 2, g[0, 2] / 2]
    np.testing.assert_allclose(model.gradient(W), expected, rtol=1e-14, atol=1e-17)
    log_scale, G = model.gradient_log(W)
    assert np.abs(G).max() == 1.0
    assert log_scale == pytest.approx(math.log(np.abs(expected).max()), rel=1e-14)
    np.testing.assert_allclose(G * math.exp(log_scale), expected, rtol=1e-14, atol=1e-17)


def test_the_logit_reads_the_token_through_w_and_the_query_through_its_columns():
    """a_v = x_vᵀ W x_k with non-symmetric integer data: E = [[1, 2], [3, 5]], sample ([0, 1], 0),
    W = [[0, 1], [0, 0]]: W x_1 = (5, 0), so a_0 = 5 and a_1 = 15."""
    model = ntp_model([[1.0, 2.0], [3.0, 5.0]], [[0, 1]], [0])
    np.testing.assert_array_equal(model.logits([[0.0, 1.0], [0.0, 0.0]]), [[5.0, 15.0]])
    # ∇ = g_0 x_0 x_1ᵀ + g_1 x_1 x_1ᵀ with g_1 = s_1 = σ(10), g_0 = −σ(10)
    s = sigmoid(10.0)
    expected = s * np.outer(np.array([3.0, 5.0]) - [1.0, 2.0], [3.0, 5.0])
    np.testing.assert_allclose(model.gradient([[0.0, 1.0], [0.0, 0.0]]), expected, rtol=1e-14)


def test_a_label_alone_has_no_coefficient_and_a_zero_gradient_has_scale_minus_infinity():
    model = ntp_model(np.eye(2), [[1, 1]], [1])
    log_abs, sign = model.logit_coefficients(np.ones((2, 2)))
    assert log_abs.tolist() == [[-np.inf]] and sign.tolist() == [[0.0]]
    log_scale, G = model.gradient_log(np.ones((2, 2)))
    assert log_scale == -np.inf and G.shape == (2, 2) and not G.any()
    assert model.gradient(np.ones((2, 2))).tolist() == [[0.0, 0.0], [0.0, 0.0]]
    assert model.loss(np.ones((2, 2))) == 0.0


def test_log_loss_stays_finite_where_the_loss_underflows():
    """Two samples ([1, 0], 1) with a_0 − a_1 = −1000 and −1001: L = (e^−1000 + e^−1001)/2
    underflows, log L = −1000 + log(1 + e^−1) − log 2."""
    model = ntp_model(np.eye(3), [[1, 0], [2, 0]], [1, 2])
    W = np.zeros((3, 3))
    W[:, 0] = [0.0, 1000.0, 1001.0]
    assert model.loss(W) == 0.0
    assert model.log_loss(W) == pytest.approx(-1000 + math.log1p(math.exp(-1)) - LOG2, abs=1e-12)


def test_bad_w_is_refused_by_name():
    model = _three_token_model()
    for W, text in (
        (np.zeros(3), "W: expected 2 dimensions, got shape (3,)"),
        (np.zeros((2, 2)), "W: expected shape (3, 3), got (2, 2)"),
        (np.full((3, 3), np.nan), "W: contains NaN or infinity"),
    ):
        with pytest.raises(ValueError) as err:
            model.loss(W)
        assert message(err) == text


def test_smoothness_bound_is_the_mean_of_spectral_norm_times_query_norm_over_two():
    """E = diag(2, 1, 1): ([1,2,0], ·): XᵀX = diag(4, 1, 1), ‖z‖² = 4 → 8; ([1,1,1,2], ·):
    XᵀX = diag(0, 3, 1), ‖z‖² = 1 → 3/2; the mean is 4.75."""
    data = ntp_data(np.diag([2.0, 1.0, 1.0]), [[1, 2, 0], [1, 1, 1, 2]], [1, 2])
    assert smoothness_bound(data) == pytest.approx(4.75, rel=1e-14)
    model = ntp_attention(data)
    assert model.normalizer == 2.0 and model.embeddings is data.embeddings
    np.testing.assert_array_equal(
        model.table.tokens, sample_table(data.sequences, data.labels).tokens
    )
    twin = ntp_model(np.diag([2.0, 1.0, 1.0]), [[1, 2, 0], [1, 1, 1, 2]], [1, 2])
    assert twin.loss(np.eye(3)) == model.loss(np.eye(3))
    assert isinstance(twin, NTPAttention) and twin.normalizer == 2.0


# ===================================================================================== qp.py


def test_orthonormal_rows_keeps_singular_values_above_the_numpy_rank_threshold():
    """Threshold σ_max · max(shape) · eps: for a 2×3 diag(1, δ) that is 6.7e-16, so δ = 5.5e-16
    is dropped (it would be kept with min(shape) = 2) and δ = 7e-16 kept; a matrix of scale
    1e-3 keeps a relative 1e-14 (an absolute threshold would drop it); a zero matrix has rank 0."""
    assert orthonormal_rows(np.zeros((0, 3))).shape == (0, 3)
    assert orthonormal_rows(np.zeros((2, 3))).shape == (0, 3)
    assert orthonormal_rows(np.array([[1.0, 0, 0], [0, 5.5e-16, 0]])).shape == (1, 3)
    assert orthonormal_rows(np.array([[1.0, 0, 0], [0, 7e-16, 0]])).shape == (2, 3)
    basis = orthonormal_rows(np.array([[1e-3, 0, 0], [0, 1e-17, 0]]))
    np.testing.assert_allclose(np.abs(basis), [[1, 0, 0], [0, 1, 0]], atol=1e-15)
    basis = orthonormal_rows(np.array([[1.0, 1.0, 0], [2.0, 2.0, 0], [0, 0, 3.0]]))
    assert basis.shape == (2, 3)
    np.testing.assert_allclose(basis @ basis.T, np.eye(2), atol=1e-15)
    np.testing.assert_allclose(
        basis.T @ basis, [[0.5, 0.5, 0], [0.5, 0.5, 0], [0, 0, 1]], atol=1e-15
    )


def test_project_and_project_out_are_the_orthogonal_projections():
    basis = np.array([[1.0, 0, 0, 0], [0, 0, 0, 1.0]])  # vec of the 2×2 diagonal
    out = project(basis, [[1, 2], [3, 4]])
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, [[1.0, 0.0], [0.0, 4.0]])
    rows = np.array([[1.0, 1.0, 0.0]])
    np.testing.assert_allclose(
        project_out(rows, np.array([[1.0, 0, 0], [0, 0, 2.0], [1.0, 1.0, 0]])),
        [[0.5, -0.5, 0], [0, 0, 2.0], [0, 0, 0]],
        atol=1e-15,
    )
    A = np.array([[1.0, 2.0]])
    np.testing.assert_array_equal(project_out(np.zeros((0, 2)), A), A)


def test_equality_certificate_residuals_by_hand():
    """min ½‖w‖² s.t. w_0 ≥ 1, w_0 = w_1: w = (1, 1) = 2·(1, 0) − 1·(1, −1), so λ = 2, ν = −1.
    Each residual is checked where one input is off by a known amount."""
    A_in, A_eq = np.array([[1.0, 0.0]]), np.array([[1.0, -1.0]])
    exact = certify_equality(A_in, A_eq, np.array([1.0, 1.0]), np.array([2.0]), np.array([-1.0]))
    assert exact.ok and exact.worst == 0.0 and exact.tol == qp.KKT_TOL == 1e-8
    # ν of the wrong sign: w − (2, 0) − (1, −1) = (−2, 2), over max(1, ‖w‖ = √2)
    wrong_nu = certify_equality(A_in, A_eq, np.array([1.0, 1.0]), np.array([2.0]), np.array([1.0]))
    assert wrong_nu.stationarity == pytest.approx(2.0, rel=1e-15) and not wrong_nu.ok
    # A_eq w = ±1/2 is a primal residual of 1/2 either way
    for w1 in (0.5, 1.5):
        cert = certify_equality(A_in, A_eq, np.array([1.0, w1]), np.array([2.0]), np.array([-1.0]))
        assert cert.primal_residual == 0.5
    # the margin row asks A_in w ≥ 1 (not ≥ 0): w = (1/2, 1/2) misses it by 1/2
    half = certify_equality(A_in, A_eq, np.array([0.5, 0.5]), np.array([1.0]), np.array([-0.5]))
    assert half.primal_residual == 0.5 and half.stationarity == 0.0
    assert half.complementarity == 0.5  # λ·(A_in w − 1) = 1 · (−1/2)
    negative = certify_equality(
        A_in, A_eq, np.array([1.0, 1.0]), np.array([-1.0]), np.array([-1.0])
    )
    assert negative.dual_residual == 1.0
    loose = certify_equality(A_in, A_eq, np.ones(2), np.array([2.0]), np.array([1.0]), tol=2.5)
    assert loose.tol == 2.5 and loose.ok


def test_equality_qp_solution_returns_w_its_multipliers_and_the_reason(monkeypatch):
    sol = solve_equality_qp([[1, 0]], [[1, -1]])  # integers are accepted
    assert sol.ok and sol.status == "optimal"
    np.testing.assert_allclose(sol.w, [1.0, 1.0], atol=1e-14)
    np.testing.assert_allclose(sol.ineq_duals, [2.0], atol=1e-14)
    np.testing.assert_allclose(sol.eq_duals, [-1.0], atol=1e-14)
    assert sol.certificate.ok and sol.certificate.tol == 1e-8
    assert sol.reason.startswith("1 equality rows projected out; ")
    assert solve_equality_qp([[1.0, 0.0]], [[1.0, -1.0]], tol=1e-3).certificate.tol == 1e-3
    free = solve_equality_qp([[2.0, 0.0]], np.zeros((0, 2)))
    np.testing.assert_allclose(free.w, [0.5, 0.0], atol=1e-15)
    assert free.eq_duals.shape == (0,) and free.reason.startswith("0 equality rows projected out; ")
    # what the inner margin QP is asked: the rows with A_eq projected out, b = 1, the same tol
    seen = {}

    def spy(A, b, tol):
        seen.update(A=A, b=b, tol=tol)
        return SVMSolution("solver_error", None, None, None, "spy", "every solver raised")

    monkeypatch.setattr(qp, "solve_margin_qp", spy)
    with failures.watch() as watched:
        sol = solve_equality_qp([[1.0, 0.0], [0.0, 2.0], [3.0, 1.0]], [[1.0, -1.0]], tol=0.125)
    np.testing.assert_allclose(seen["A"], [[0.5, 0.5], [1.0, 1.0], [2.0, 2.0]], atol=1e-15)
    assert seen["b"].tolist() == [1.0, 1.0, 1.0] and seen["tol"] == 0.125
    assert (sol.status, sol.w, sol.ineq_duals, sol.eq_duals) == ("solver_error", None, None, None)
    assert sol.certificate is None and sol.solver == "spy" and not sol.ok
    assert sol.reason == "projected QP (3 rows): every solver raised"
    assert not watched  # models.oracles.svm reports its own failure; this layer does not repeat it


def test_an_inner_optimum_is_mapped_back_with_float_multipliers_and_the_inner_solver(monkeypatch):
    """The inner answer (w = (1, 1), λ = [2] as a list of ints) is certified in the original
    coordinates, ν = −1 recovered from stationarity; an inner "inaccurate" is passed on even
    when it carries a point that would certify."""
    good = SVMSolution("optimal", np.array([1.0, 1.0]), [2], None, "spy", "inner fine")
    monkeypatch.setattr(qp, "solve_margin_qp", lambda A, b, tol: good)
    sol = solve_equality_qp([[1.0, 0.0]], [[1.0, -1.0]])
    assert sol.status == "optimal" and sol.solver == "spy" and sol.certificate.ok
    assert sol.ineq_duals.dtype == np.float64 and sol.ineq_duals.tolist() == [2.0]
    np.testing.assert_allclose(sol.eq_duals, [-1.0], atol=1e-15)
    assert sol.reason == "1 equality rows projected out; inner fine"
    unsure = SVMSolution("inaccurate", np.array([1.0, 1.0]), [2.0], None, "spy", "unsure")
    monkeypatch.setattr(qp, "solve_margin_qp", lambda A, b, tol: unsure)
    sol = solve_equality_qp([[1.0, 0.0]], [[1.0, -1.0]])
    assert (sol.status, sol.w, sol.certificate) == ("inaccurate", None, None)
    assert sol.reason == "projected QP (1 rows): unsure"


def test_an_optimum_the_full_kkt_rejects_is_inaccurate_and_reported(monkeypatch):
    wrong = SVMSolution("optimal", np.array([0.5, 0.0]), np.array([0.5]), None, "fake", "fake")
    monkeypatch.setattr(qp, "solve_margin_qp", lambda A, b, tol: wrong)
    with failures.watch() as watched:
        sol = solve_equality_qp([[1.0, 0.0]], [[0.0, 1.0]])
    assert (sol.status, sol.w, sol.ineq_duals, sol.eq_duals) == ("inaccurate", None, None, None)
    assert sol.certificate is not None and sol.certificate.primal_residual == 0.5
    assert sol.solver == "fake"
    assert sol.reason == f"projected QP certified, the full KKT not: {sol.certificate.summary()}"
    assert [(f.source, f.what, f.detail) for f in watched.failures] == [
        (failures.SVM_ORACLE, "inaccurate", sol.reason)
    ]


def _farkas_run(monkeypatch, A_in, A_eq, y, tol=qp.KKT_TOL):
    inner = SVMSolution("infeasible", None, y, None, "fake", "inner")
    monkeypatch.setattr(qp, "solve_margin_qp", lambda A, b, tol: inner)
    with failures.watch() as watched:
        sol = solve_equality_qp(A_in, A_eq, tol=tol)
    return sol, watched


def test_a_farkas_vector_is_lifted_with_its_mu_and_accepted_only_if_it_proves_infeasibility(
    monkeypatch,
):
    # w ≥ 1 and −w ≥ 1: y = (1, 1), no equality rows; integer y comes back as float64
    sol, watched = _farkas_run(monkeypatch, [[1.0], [-1.0]], np.zeros((0, 1)), [1, 1])
    assert sol.status == "infeasible" and not watched
    assert sol.ineq_duals.dtype == np.float64 and sol.ineq_duals.tolist() == [1.0, 1.0]
    assert sol.eq_duals.shape == (0,) and sol.w is None and sol.certificate is None
    assert sol.solver == "fake"
    assert sol.reason == "inner; Farkas (y ≥ 0, μ): 1ᵀy = 2, ‖A_inᵀy + A_eqᵀμ‖ = 0.00e+00"
    # w_0 − w_1 ≥ 1 with w_0 = w_1: y = 1 needs μ = −1
    sol, _ = _farkas_run(monkeypatch, [[1.0, -1.0]], [[1.0, -1.0]], [1.0])
    assert sol.status == "infeasible"
    np.testing.assert_allclose(sol.eq_duals, [-1.0], atol=1e-15)
    # a zero entry of y is allowed (y ≥ 0)
    sol, _ = _farkas_run(monkeypatch, [[1.0], [0.0]], np.zeros((0, 1)), [0.0, 1.0])
    assert sol.status == "infeasible" and sol.ineq_duals.tolist() == [0.0, 1.0]


def test_a_farkas_pair_that_fails_is_inaccurate_reported_and_says_its_numbers(monkeypatch):
    rows, none = [[1.0], [-1.0]], np.zeros((0, 1))
    for y, value, residual in (
        ([2.0, -0.5], "1.5", "2.50e+00"),  # a negative entry
        ([0.0, 0.0], "0", "0.00e+00"),  # 1ᵀy = 0 proves nothing
        ([1.0, 0.5], "1.5", "5.00e-01"),  # Aᵀy ≠ 0
    ):
        sol, watched = _farkas_run(monkeypatch, rows, none, y)
        why = f"inner; the lifted Farkas pair fails (1ᵀy = {value}, residual {residual})"
        assert (sol.status, sol.w, sol.ineq_duals, sol.eq_duals) == ("inaccurate", None, None, None)
        assert sol.reason == why and sol.solver == "fake" and sol.certificate is None
        assert [(f.source, f.what, f.detail) for f in watched.failures] == [
            (failures.SVM_ORACLE, "inaccurate", why)
        ]
    # the residual test is ‖Aᵀy + A_eqᵀμ‖ ≤ tol·1ᵀy, equality included
    tol = 0.5 / 1.5
    assert tol * 1.5 == 0.5
    sol, _ = _farkas_run(monkeypatch, rows, none, [1.0, 0.5], tol=tol)
    assert sol.status == "infeasible"
    sol, _ = _farkas_run(monkeypatch, rows, none, [1.0, 0.5], tol=np.nextafter(tol, 0))
    assert sol.status == "inaccurate"


def test_farkas_residual_of_a_claimed_certificate():
    assert farkas_residual([[1.0], [-1.0]], np.zeros((0, 1)), [1, 2], []) == (3.0, 1.0)
    assert farkas_residual([[1.0, -1.0]], [[1.0, -1.0]], [2.0], [-2.0]) == (2.0, 0.0)
    assert farkas_residual([[1.0], [-1.0]], np.zeros((0, 1)), [1.0, -1e-300], []) == (
        -np.inf,
        np.inf,
    )
    assert farkas_residual([[1.0], [-1.0]], np.zeros((0, 1)), [0.0, 0.0], []) == (0.0, 0.0)
    # no rows at all: an empty y is not negative (its minimum starts at 0)
    assert farkas_residual(np.zeros((0, 1)), np.zeros((0, 1)), [], []) == (0.0, 0.0)


def test_bad_rows_are_refused_by_name():
    cases = [
        (
            [1.0, 2.0],
            np.zeros((0, 2)),
            "A_in/A_eq: expected 2-D with equal widths, got (2,)/(0, 2)",
        ),
        ([[1.0, 2.0]], [1.0, 2.0], "A_in/A_eq: expected 2-D with equal widths, got (1, 2)/(2,)"),
        ([[1.0, 2.0]], [[1.0]], "A_in/A_eq: expected 2-D with equal widths, got (1, 2)/(1, 1)"),
        (np.zeros((1, 0)), np.zeros((0, 0)), "A_in: needs at least one column (variable)"),
        ([[np.nan, 1.0]], [[1.0, 0.0]], "A_in/A_eq: contain NaN or infinity"),
        ([[1.0, 1.0]], [[np.inf, 0.0]], "A_in/A_eq: contain NaN or infinity"),
        # read as float64: None is NaN (not an object the finiteness test cannot read)
        ([[None, 1.0]], [[1.0, 0.0]], "A_in/A_eq: contain NaN or infinity"),
        ([[1.0, 1.0]], [[None, 0.0]], "A_in/A_eq: contain NaN or infinity"),
    ]
    for A_in, A_eq, text in cases:
        for call in (solve_equality_qp, lambda a, e: farkas_residual(a, e, [1.0], [])):
            with pytest.raises(ValueError) as err:
                call(A_in, A_eq)
            assert message(err) == text


def test_an_outcome_checks_its_status_and_reason():
    ok = EqualityQPSolution("optimal", np.ones(1), np.ones(1), np.zeros(0), None, "s", "r")
    assert ok.ok
    assert not EqualityQPSolution("infeasible", None, None, None, None, "s", "r").ok
    with pytest.raises(ValueError, match="status: expected one of"):
        EqualityQPSolution("maybe", None, None, None, None, "s", "r")
    with pytest.raises(ValueError, match="reason: expected a string"):
        EqualityQPSolution("optimal", None, None, None, None, "s", None)


# ==================================================================================== svm.py

#: Integer embeddings (K = 3, d = 2): every row of the graph-SVM is exact.
E_INT = np.array([[1.0, 2.0], [3.0, 5.0], [7.0, 11.0]])


def test_graph_svm_rows_are_the_sorted_triples_split_by_scc_with_exact_entries():
    """([1,2,0],1), ([2,1,0],2): 1 ⇄ 2 (equalities), both → 0 (margins); the row of (k, y, j)
    is vec((x_y − x_j) x_kᵀ): (x_1 − x_0) x_0ᵀ = [[2, 4], [3, 6]] and so on."""
    data = ntp_data(E_INT, [[1, 2, 0], [2, 1, 0]], [1, 2])
    rows = graph_svm_rows(data)
    assert rows.margin_triples == ((0, 1, 0), (0, 2, 0))
    assert rows.equality_triples == ((0, 1, 2), (0, 2, 1))
    np.testing.assert_array_equal(rows.A_in, [[2, 4, 3, 6], [6, 12, 9, 18]])
    np.testing.assert_array_equal(rows.A_eq, [[-4, -8, -6, -12], [4, 8, 6, 12]])
    one = graph_svm_rows(ntp_data(E_INT, [[0, 1]], [0]))
    assert one.margin_triples == ((1, 0, 1),) and one.equality_triples == ()
    assert one.A_eq.shape == (0, 4)
    np.testing.assert_array_equal(one.A_in, [[-6, -10, -9, -15]])  # (x_0 − x_1) x_1ᵀ
    # a grouping passed in replaces the priority graphs: one SCC makes every row an equality
    merged = {0: PriorityGraph(0, 3, frozenset({(0, 1), (1, 2), (2, 0)}))}
    rows = graph_svm_rows(data, merged)
    assert rows.margin_triples == () and rows.A_in.shape == (0, 4)
    assert rows.equality_triples == ((0, 1, 0), (0, 1, 2), (0, 2, 0), (0, 2, 1))
    with pytest.raises(ValueError) as err:
        graph_svm_rows(ntp_data(E_INT, [[0, 1], [1, 2]], [0, 1]), {1: merged[0]})
    assert message(err) == "graphs: no priority graph for query token 2"


def test_graph_svm_of_the_chain_i1_and_each_property_of_its_outcome():
    sol = graph_svm(i1())
    expected = np.zeros((4, 4))
    expected[:, 0] = [-1.5, 1.5, 0.5, -0.5]
    assert sol.ok and sol.status == "optimal" and not sol.vacuous
    np.testing.assert_allclose(sol.W, expected, atol=1e-12)
    np.testing.assert_allclose(sol.direction, expected / math.sqrt(5), atol=1e-12)
    assert sol.certificate is sol.solution.certificate and sol.certificate.tol == 1e-8
    assert sol.reason == sol.solution.reason and "equality rows projected out" in sol.reason
    assert graph_svm(i1(), tol=1e-3).certificate.tol == 1e-3
    # graphs passed in are the ones used: one SCC {0, 1, 2, 3} makes every row an equality
    merged = {0: PriorityGraph(0, 4, frozenset({(0, 1), (1, 2), (2, 3), (3, 0)}))}
    one = graph_svm(i1(), graphs=merged)
    assert one.ok and one.vacuous and not one.W.any() and one.rows.A_in.shape == (0, 16)
    via = graph_svm_of(np.eye(4), *I1, tol=1e-4)
    np.testing.assert_allclose(via.W, expected, atol=1e-12)
    assert via.certificate.tol == 1e-4 and graph_svm_of(np.eye(4), *I1).certificate.tol == 1e-8
    with pytest.raises(ValueError, match=r"^labels\[0\]: token 2 does not occur in sequence 0"):
        graph_svm_of(np.eye(3), [[0, 1]], [2])


def test_an_infeasible_or_vacuous_graph_svm_has_no_direction():
    bad = graph_svm(ntp_data([[1.0], [2.0], [3.0]], [[1, 2, 0]], [1]))
    assert bad.status == "infeasible" and not bad.ok and bad.W is None
    with pytest.raises(ValueError) as err:
        _ = bad.direction
    assert message(err) == f"no W_svm (status infeasible): {bad.reason}"
    cycle = graph_svm(two_token_cycle(1, 1))
    assert cycle.ok and cycle.vacuous and cycle.W.shape == (2, 2) and not cycle.W.any()
    with pytest.raises(ValueError) as err:
        _ = cycle.direction
    assert message(err) == "W_svm = 0 (no edge leaves an SCC): its direction is undefined"


def test_graph_svm_names_the_first_unrealizable_label():
    data = ntp_data(np.eye(3), [[0, 1], [1, 2], [2]], [1, 0, 0], require_realizable=False)
    with pytest.raises(ValueError) as err:
        graph_svm(data)
    assert message(err) == (
        "labels[1]: token 0 does not occur in sequence 1; the graph-SVM needs realizable labels"
    )


def test_cyclic_subspace_spans_the_differences_inside_each_cyclic_scc_of_each_query():
    assert cyclic_subspace(i1()).shape == (0, 16)
    # C6's 3-cycle {1, 2, 3} under query 0 (E = I₄): vec((e_a − e_b) e_0ᵀ) lives on the
    # entries (1, 0), (2, 0), (3, 0), where the span is the centred vectors
    c6 = ntp_data(np.eye(4), [[1, 2, 0], [1, 2, 0], [2, 3, 0], [3, 1, 0]], [1, 1, 2, 3])
    basis = cyclic_subspace(c6)
    assert basis.shape == (2, 16)
    expected = np.zeros((16, 16))
    idx = np.array([4, 8, 12])
    expected[np.ix_(idx, idx)] = np.eye(3) - 1 / 3
    np.testing.assert_allclose(basis.T @ basis, expected, atol=1e-15)
    # a second cycle {0, 1} under query 2 adds the direction vec((e_1 − e_0) e_2ᵀ)
    both = ntp_data(np.eye(4), [*c6.sequences, [0, 1, 2], [1, 0, 2]], [*c6.labels, 0, 1])
    basis = cyclic_subspace(both)
    assert basis.shape == (3, 16)
    extra = np.zeros((4, 4))
    extra[[0, 1], 2] = [-1 / math.sqrt(2), 1 / math.sqrt(2)]
    np.testing.assert_allclose(project(basis, extra), extra, atol=1e-15)
    np.testing.assert_allclose((basis.T @ basis)[np.ix_(idx, idx)], np.eye(3) - 1 / 3, atol=1e-15)


# ================================================================================= finite.py


def test_reduced_samples_keep_the_labels_scc_and_the_original_query():
    data = ntp_data(np.eye(5), I2_SEQUENCES, I2_LABELS)
    seqs, labels, queries = reduced_samples(data)
    assert seqs == [(1, 2)] * 3 + [(3,), (3,), (2,), (2,)]
    assert labels == I2_LABELS and queries == [0, 0, 0, 0, 4, 4, 4]
    model = reduced_model(data)
    assert model.normalizer == 7.0 and model.embeddings is data.embeddings
    np.testing.assert_array_equal(model.table.query, queries)
    np.testing.assert_array_equal(model.table.tokens[:, 0], [1, 1, 1, 3, 3, 2, 2])
    # the reduced loss at W = 0: log 2 for each of the three samples in {1, 2}, 0 for the rest
    assert model.loss(np.zeros((5, 5))) == pytest.approx(3 * LOG2 / 7, rel=1e-15)
    loose = ntp_data(np.eye(3), [[0, 1], [1, 2]], [1, 0], require_realizable=False)
    with pytest.raises(ValueError) as err:
        reduced_samples(loose)
    assert message(err) == "labels: token 0 not in [1, 2]; W_fin needs realizable labels"


def _theta_to_u(basis) -> float:
    """u = a_1 − a_0 per unit θ on the two-token cycle (E = I₂, query 0): basis = ±vec of
    (e_1 − e_0) e_0ᵀ/√2, so u = ±√2 θ."""
    W = basis[0].reshape(2, 2)
    return W[1, 0] - W[0, 0]


def test_value_gradient_and_hessian_in_theta_are_the_closed_form_of_the_two_token_cycle():
    """f(u) = (2 softplus(−u) + softplus(u))/3, f' = (−2σ(−u) + σ(u))/3, f'' = σ(u)σ(−u)."""
    data = two_token_cycle(2, 1)
    basis = cyclic_subspace(data)
    c = _theta_to_u(basis)
    assert abs(c) == pytest.approx(math.sqrt(2), rel=1e-15)
    model = reduced_model(data)
    D = _design(model, basis)
    assert D.shape == (3, 2, 1)
    np.testing.assert_array_equal(D[:, :, 0], [[basis[0, 0], basis[0, 2]]] * 3)
    theta = 0.3
    u = c * theta
    value, grad, hess = _value_grad_hess(D, model.table, model.normalizer, np.array([theta]))
    assert value == pytest.approx((2 * sp(-u) + sp(u)) / 3, rel=1e-15)
    assert grad.shape == (1,) and hess.shape == (1, 1)
    assert grad[0] == pytest.approx(c * (-2 * sigmoid(-u) + sigmoid(u)) / 3, rel=1e-14)
    assert hess[0, 0] == pytest.approx(c * c * sigmoid(u) * sigmoid(-u), rel=1e-14)


def test_value_gradient_and_hessian_in_theta_match_the_attention_model_on_padded_i2():
    """I2's reduced table is padded (one or two tokens): the value and gradient are the
    attention model's (another implementation) and the Hessian its finite difference."""
    data = i2()
    basis = cyclic_subspace(data)
    model = reduced_model(data)
    D = _design(model, basis)
    theta = np.array([0.7])
    W = (basis.T @ theta).reshape(6, 6)
    np.testing.assert_allclose((D @ theta)[:, :2], model.logits(W)[:, :2], atol=1e-15)
    value, grad, hess = _value_grad_hess(D, model.table, model.normalizer, theta)
    assert value == pytest.approx(model.loss(W), rel=1e-14)
    np.testing.assert_allclose(grad, basis @ model.gradient(W).ravel(), rtol=1e-13)
    h = 1e-5
    up = _value_grad_hess(D, model.table, model.normalizer, theta + h)[1]
    down = _value_grad_hess(D, model.table, model.normalizer, theta - h)[1]
    np.testing.assert_allclose(hess[0], (up - down) / (2 * h), rtol=1e-8)


def test_an_acyclic_instance_has_w_fin_zero_and_says_why():
    fin = finite_component(i1())
    assert isinstance(fin, FiniteComponent)
    assert fin.W.shape == (4, 4) and not fin.W.any() and fin.basis.shape == (0, 16)
    assert (fin.loss, fin.gradient_norm, fin.converged, fin.steps, fin.reason) == (
        0.0,
        0.0,
        True,
        0,
        "S_cyc = {0}",
    )


def test_newton_reaches_the_log_odds_minimum_of_the_two_token_cycle(monkeypatch):
    """2 : 1 labels: u* = log 2, so W_fin = (log 2/2)(e_1 − e_0)e_0ᵀ and
    L* = (2 log(3/2) + log 3)/3; ``steps`` counts the line searches Newton ran."""
    searches = []
    real = finite._backtrack

    def counted(*args):
        searches.append(1)
        return real(*args)

    monkeypatch.setattr(finite, "_backtrack", counted)
    with failures.watch() as watched:
        fin = finite_component(two_token_cycle(2, 1))
    expected = LOG2 / 2 * np.array([[-1.0, 0.0], [1.0, 0.0]])
    np.testing.assert_allclose(fin.W, expected, rtol=0, atol=1e-15)
    assert fin.loss == pytest.approx((2 * math.log(1.5) + math.log(3)) / 3, rel=1e-15)
    assert fin.converged and fin.gradient_norm <= 1e-12 and fin.reason == "gradient norm reached"
    assert fin.steps == len(searches) >= 1 and not watched
    np.testing.assert_array_equal(fin.basis, cyclic_subspace(two_token_cycle(2, 1)))
    # balanced labels: the start W = 0 is the optimum, Newton takes no step
    searches.clear()
    fin = finite_component(two_token_cycle(1, 1))
    assert (fin.steps, fin.converged, fin.gradient_norm, fin.loss) == (0, True, 0.0, LOG2)
    assert fin.reason == "gradient norm reached" and not fin.W.any() and not searches


def test_the_gradient_tolerance_is_inclusive_and_decides_convergence():
    """At W = 0 the θ-gradient of the 2 : 1 cycle is √2·(−2·½ + ½)/3 = −√2/6."""
    data = two_token_cycle(2, 1)
    start = finite_component(data, tol=1.0)
    assert start.steps == 0 and not start.W.any() and start.converged
    assert start.gradient_norm == pytest.approx(math.sqrt(2) / 6, rel=1e-15)
    assert start.loss == pytest.approx(LOG2, rel=1e-15)
    with failures.watch() as watched:
        at = finite_component(data, tol=start.gradient_norm)
    assert at.steps == 0 and at.converged and at.reason == "gradient norm reached"
    assert not watched  # norm = tol is converged, not a failure
    below = finite_component(data, tol=np.nextafter(start.gradient_norm, 0))
    assert below.steps >= 1 and below.W.any() and below.converged
    assert finite.GRADIENT_TOL == 1e-12 and finite.MAX_NEWTON_STEPS == 100


def test_newton_out_of_steps_is_not_converged_and_reported(monkeypatch):
    monkeypatch.setattr(finite, "MAX_NEWTON_STEPS", 2)
    with failures.watch() as watched:
        fin = finite_component(two_token_cycle(2, 1))
    assert fin.steps == 2 and not fin.converged and fin.gradient_norm > 1e-12
    assert fin.reason == "no convergence in 2 Newton steps"
    assert [(f.source, f.what, f.detail) for f in watched.failures] == [
        (failures.NUMERICS, "W_fin Newton not converged", f"{fin.reason}, {fin.gradient_norm:.2e}")
    ]
    # the loss reported is the reduced loss at the W returned
    assert fin.loss == pytest.approx(reduced_model(two_token_cycle(2, 1)).loss(fin.W), rel=1e-15)


def test_no_newton_step_allowed_leaves_w_fin_at_zero(monkeypatch):
    monkeypatch.setattr(finite, "MAX_NEWTON_STEPS", 0)
    fin = finite_component(two_token_cycle(2, 1))
    assert (fin.steps, fin.converged, fin.reason) == (0, False, "no convergence in 0 Newton steps")
    assert not fin.W.any() and fin.gradient_norm == pytest.approx(math.sqrt(2) / 6, rel=1e-15)


def test_a_stalled_line_search_ends_newton_with_its_reason(monkeypatch):
    monkeypatch.setattr(
        finite,
        "_backtrack",
        lambda D, model, theta, value, grad, step: (theta, value, grad, None, False),
    )
    with failures.watch() as watched:
        fin = finite_component(two_token_cycle(2, 1))
    assert fin.steps == 1 and not fin.converged and not fin.W.any()
    assert fin.reason == "line search stalled (rounding floor)"
    assert fin.gradient_norm == pytest.approx(math.sqrt(2) / 6, rel=1e-15)
    assert watched.first.detail == f"line search stalled (rounding floor), {fin.gradient_norm:.2e}"


def _line_search(u0, du, a=2, b=1):
    """_backtrack on the a : b cycle from u = u0 along a step that moves u by du; returns the
    u it lands on (None if it gave up) and its other outputs."""
    data = two_token_cycle(a, b)
    basis = cyclic_subspace(data)
    c = _theta_to_u(basis)
    model = reduced_model(data)
    D = _design(model, basis)
    theta = np.array([u0 / c])
    value, grad, _ = _value_grad_hess(D, model.table, model.normalizer, theta)
    out = _backtrack(D, model, theta, value, grad, np.array([du / c]))
    return (out[0][0] * c if out[4] else None), out, (D, model, theta, value, grad)


def test_backtracking_takes_the_first_halving_that_satisfies_armijo_or_shrinks_the_gradient():
    """f(u) = (2 softplus(−u) + softplus(u))/3 is steep on the left (f' → −2/3) and flat on
    the right (f' → 1/3); u* = log 2.
    - 10 → −1: f drops from 3.33 to 0.98 (Armijo with 1e-4 holds) though |f'| grows: t = 1.
    - −3 → 10: f rises from 6.15 to 10.0, but |f'| drops from 1.86 to 1.0: t = 1.
    - 10 → −30 and 10 → −10 fail both tests, 10 → 0 passes: t = 1/4.
    - a zero step is taken (f does not increase: Armijo's ≤)."""
    u, out, (D, model, *_) = _line_search(10.0, -11.0)
    assert u == pytest.approx(-1.0, abs=1e-13) and out[4]
    value, grad, hess = _value_grad_hess(D, model.table, model.normalizer, out[0])
    assert out[1] == value and np.array_equal(out[2], grad) and np.array_equal(out[3], hess)
    assert _line_search(-3.0, 13.0)[0] == pytest.approx(10.0, abs=1e-13)
    assert _line_search(10.0, -40.0)[0] == pytest.approx(0.0, abs=1e-13)
    u, out, (_, _, theta, value, grad) = _line_search(0.5, 0.0)
    assert u == pytest.approx(0.5, abs=1e-15) and out[1] == value and out[4]


def test_armijo_asks_for_a_decrease_and_the_gradient_test_for_a_strict_one():
    """- From u = 3 to the u₁ < 0 where f(u₁) = f(3): no decrease (Armijo fails) and
      |f'(u₁)| = 0.43 > |f'(3)| = 0.29; t = 1/2 lands at (3 + u₁)/2.
    - The 1 : 1 cycle is symmetric: from u = 1 (or 2) to −1 (−2) f and |f'| are exactly
      equal, so neither test passes; t = 1/2 lands at 0."""
    f = lambda u: (2 * sp(-u) + sp(u)) / 3  # noqa: E731
    lo, hi = -3.0, 0.0  # bisection for f(u₁) = f(3) on the decreasing branch
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if f(mid) > f(3.0) else (lo, mid)
    u1 = (lo + hi) / 2
    assert -1.2 < u1 < -1.1
    assert _line_search(3.0, u1 - 3.0)[0] == pytest.approx((3.0 + u1) / 2, abs=1e-13)
    for u0 in (1.0, 2.0):
        assert _line_search(u0, -2 * u0, a=1, b=1)[0] == pytest.approx(0.0, abs=1e-13)


def test_backtracking_gives_up_after_sixty_halvings_and_returns_its_input():
    """An ascent step of 1e6 in u: at t = 2⁻⁵⁹ the loss still rises by ~3e-13 (far above its
    rounding) and |f'| grows; nothing is accepted."""
    u, out, (_, _, theta, value, grad) = _line_search(0.0, -1e6)
    assert u is None
    assert out[0] is theta and out[1] == value and out[2] is grad and out[3] is None
    assert out[4] is False


def test_limiting_shares_are_the_split_at_w_fin_or_at_the_component_given():
    data = two_token_cycle(2, 1)
    shares = limiting_shares(data)
    assert len(shares) == 3
    for sample in shares:
        assert sorted(sample) == [0, 1]
        assert sample[1] == pytest.approx(2 / 3, rel=1e-14)
        assert sample[0] == pytest.approx(1 / 3, rel=1e-14)
    zero = FiniteComponent(np.zeros((2, 2)), np.zeros((0, 4)), 0.0, 0.0, True, 0, "given")
    assert limiting_shares(data, zero) == [{0: 0.5, 1: 0.5}] * 3
    # the padding of I2's reduced table never appears as a token
    assert limiting_shares(i2())[3:] == [{3: 1.0}, {3: 1.0}, {2: 1.0}, {2: 1.0}]


def test_log_odds_system_rows_and_targets_of_i2():
    """Only query 0's cycle {1, 2} (b = 1, a = 2) gives an equation: n_2/n_1 = 1/2."""
    data = i2()
    A, r = log_odds_system(data)
    E = data.embeddings
    np.testing.assert_array_equal(A, [np.outer(E[2] - E[1], E[0]).ravel()])
    np.testing.assert_array_equal(r, [math.log(0.5)])
    A, r = log_odds_system(i1())
    assert A.shape == (0, 16) and r.shape == (0,)


def test_log_odds_check_on_an_acyclic_instance():
    check = log_odds_check(i1())
    assert check.applies is True and check.W.shape == (4, 4) and not check.W.any()
    assert check.residual == 0.0 and check.reason == "acyclic: no equations, W_fin = 0"
    # singleton SCCs ask nothing, even when the label token's multiplicity varies
    A, r = log_odds_system(ntp_data(np.eye(3), [[1, 0], [1, 1, 0]], [1, 1]))
    assert A.shape == (0, 9) and r.shape == (0,)


def test_log_odds_equations_come_ordered_by_query_then_smallest_member():
    """Query 0 has two cycles, {3, 4} (labels 3, 4, 4) and {1, 2} (labels 1, 2), listed in
    that order; the {1, 2} equation comes first."""
    data = ntp_data(np.eye(5), [[3, 4, 0]] * 3 + [[1, 2, 0]] * 2, [3, 4, 4, 1, 2])
    A, r = log_odds_system(data)
    rows = np.zeros((2, 5, 5))
    rows[0, 2, 0], rows[0, 1, 0] = 1.0, -1.0
    rows[1, 4, 0], rows[1, 3, 0] = 1.0, -1.0
    np.testing.assert_array_equal(A, rows.reshape(2, 25))
    np.testing.assert_allclose(r, [0.0, LOG2], rtol=1e-15, atol=0)


def test_the_log_odds_bridge_with_a_repeated_token_and_its_multiplicity():
    """([1,1,0], 1), ([1,1,0], 0): token 1 counts twice, so log(n_1/n_0) − log(c_1/c_0) =
    −log 2 and W_fin = −(log 2/2)(e_1 − e_0)e_0ᵀ, which Newton finds too."""
    data = ntp_data(np.eye(2), [[1, 1, 0], [1, 1, 0]], [1, 0])
    A, r = log_odds_system(data)
    np.testing.assert_array_equal(A, [[-1.0, 0.0, 1.0, 0.0]])
    np.testing.assert_allclose(r, [-LOG2], rtol=1e-15)
    check = log_odds_check(data)
    expected = -LOG2 / 2 * np.array([[-1.0, 0.0], [1.0, 0.0]])
    assert check.applies and check.residual <= 1e-15
    np.testing.assert_allclose(check.W, expected, atol=1e-15)
    assert check.reason == f"log-odds system solved (residual {check.residual:.2e})"
    np.testing.assert_allclose(finite_component(data).W, expected, atol=1e-15)
    # the smaller token repeated instead: ([0,1,0], ·) gives log(1/1) − log(1/2) = log 2
    data = ntp_data(np.eye(2), [[0, 1, 0], [0, 1, 0]], [1, 0])
    np.testing.assert_allclose(log_odds_system(data)[1], [LOG2], rtol=1e-15)
    np.testing.assert_allclose(log_odds_check(data).W, -expected, atol=1e-15)


def test_the_log_odds_bridge_needs_one_multiset_of_the_scc_per_sample():
    c6 = ntp_data(np.eye(4), [[1, 2, 0], [1, 2, 0], [2, 3, 0], [3, 1, 0]], [1, 1, 2, 3])
    reason = "query 0, SCC [1, 2, 3]: not every sample holds the same tokens of it"
    assert log_odds_system(c6) == reason
    check = log_odds_check(c6)
    assert (check.applies, check.W, check.reason) == (False, None, reason)
    assert check.applies is False
    assert math.isnan(check.residual)
    # the first sample holds all of {0, 1}, the second holds token 1 twice
    counts = ntp_data(np.eye(2), [[1, 0], [1, 1, 0]], [1, 0])
    assert (
        log_odds_system(counts)
        == "query 0, SCC [0, 1]: not every sample holds the same tokens of it"
    )
    # the first sample holds part of the SCC only
    part = ntp_data(np.eye(3), [[1, 0], [2, 1, 0], [2, 1, 0]], [0, 1, 2])
    assert log_odds_system(part) == (
        "query 0, SCC [0, 1, 2]: not every sample holds the same tokens of it"
    )


def _clash():
    """Tokens 0 and 2 share the embedding (1, 0). Query 0: 2 : 1 labels on {0, 1} ask
    (x_1 − x_0)ᵀW x_0 = log 2; query 2: 1 : 1 labels on {1, 2} ask (x_2 − x_1)ᵀW x_2 = 0, the
    same row negated. The least-squares compromise misses both by log 2/2. The query-2 samples
    come first: the equations are ordered by query all the same."""
    E = [[1.0, 0.0], [0.0, 1.0], [1.0, 0.0]]
    return ntp_data(E, [[1, 2], [1, 2], [1, 0], [1, 0], [1, 0]], [1, 2, 1, 1, 0])


def test_an_inconsistent_log_odds_system_says_so_with_its_residual(monkeypatch):
    A, r = log_odds_system(_clash())
    np.testing.assert_array_equal(A, [[-1.0, 0.0, 1.0, 0.0], [1.0, 0.0, -1.0, 0.0]])
    np.testing.assert_allclose(r, [LOG2, 0.0], rtol=1e-15)
    check = log_odds_check(_clash())
    assert check.applies is False and check.W is None
    assert check.residual == pytest.approx(LOG2 / 2, rel=1e-14)
    assert check.reason == f"log-odds system inconsistent on S_cyc (residual {check.residual:.2e})"
    assert check.reason.endswith("(residual 3.47e-01)") and finite.LOG_ODDS_TOL == 1e-9
    # the tolerance is inclusive: at exactly this residual the bridge applies
    monkeypatch.setattr(finite, "LOG_ODDS_TOL", check.residual)
    inclusive = log_odds_check(_clash())
    assert inclusive.applies and inclusive.residual == check.residual
    np.testing.assert_allclose(
        inclusive.W, LOG2 / 4 * np.array([[-1.0, 0.0], [1.0, 0.0]]), atol=1e-15
    )
    monkeypatch.setattr(finite, "LOG_ODDS_TOL", np.nextafter(check.residual, 0))
    assert not log_odds_check(_clash()).applies


# ================================================================================= linear.py


def _l1():
    """d = 1, contexts h = 1 and h = 2 with π = (1/4, 3/4), V = 3: p_0 = (1/2, 1/2, 0) and
    p_1 = (0, 1/5, 4/5)."""
    return linear_ntp([[1.0, 2.0]], [[0.5, 0.5, 0.0], [0.0, 0.2, 0.8]], [0.25, 0.75])


def test_linear_instance_shapes_support_and_entropy():
    model = _l1()
    assert (model.dim, model.m, model.vocab) == (1, 2, 3)
    np.testing.assert_array_equal(model.support, [[True, True, False], [False, True, True]])
    h1 = -(0.2 * math.log(0.2) + 0.8 * math.log(0.8))
    assert model.entropy() == pytest.approx(0.25 * LOG2 + 0.75 * h1, rel=1e-15)
    # an exact zero is off the support, however small the other entries
    tiny = linear_ntp([[1.0]], [[1e-300, 1.0 - 1e-300, 0.0]], [1.0])
    assert tiny.support.tolist() == [[True, True, False]]


def test_linear_loss_excess_and_gradient_by_hand():
    """CE = Σ_j π_j Σ_z p_jz (log Σ_v e^{l_jv} − l_jz), l_j = W h_j; ∇ = Σ_j π_j (q_j − p_j) h_jᵀ
    with q_j the softmax over the whole vocabulary."""
    model = _l1()
    W = np.array([[0.3], [-0.2], [0.5]])
    P, pi, h = model.P, [0.25, 0.75], [1.0, 2.0]
    ce, grad, kl_off = 0.0, np.zeros((3, 1)), 0.0
    for j in range(2):
        logits = [W[v, 0] * h[j] for v in range(3)]
        Z = sum(math.exp(t) for t in logits)
        q = [math.exp(t) / Z for t in logits]
        ce += pi[j] * sum(P[j, z] * (math.log(Z) - logits[z]) for z in range(3) if P[j, z] > 0)
        for v in range(3):
            grad[v, 0] += pi[j] * (q[v] - P[j, v]) * h[j]
        on = sum(q[z] for z in range(3) if P[j, z] > 0)
        kl = sum(P[j, z] * math.log(P[j, z] / (q[z] / on)) for z in range(3) if P[j, z] > 0)
        kl_off += pi[j] * (kl - math.log(on))  # KL to the in-support softmax + softplus(off − on)
    assert model.loss(W) == pytest.approx(ce, rel=1e-15)
    np.testing.assert_allclose(model.gradient(W), grad, rtol=1e-14, atol=1e-16)
    assert model.excess_loss(W) == pytest.approx(kl_off, rel=1e-14)
    assert model.excess_loss(W) == pytest.approx(ce - model.entropy(), rel=1e-13)
    # at W = 0: q = 1/3 everywhere and ∇ = ¼(q − p_0)·1 + ¾(q − p_1)·2; CE = log 3
    expected = 0.25 * (np.array([1, 1, 1]) / 3 - P[0]) + 0.75 * 2 * (np.array([1, 1, 1]) / 3 - P[1])
    np.testing.assert_allclose(model.gradient(np.zeros((3, 1)))[:, 0], expected, atol=1e-16)
    assert model.loss(np.zeros((3, 1))) == pytest.approx(math.log(3), rel=1e-15)


def test_full_support_has_no_off_support_term():
    """S = V: CE = H + KL(p ‖ q), and the off-support log-sum-exp is −∞ (no softplus term)."""
    model = linear_ntp([[1.0]], [[0.25, 0.75]], [1.0])
    W = np.array([[0.0], [math.log(3)]])  # q = p
    assert model.excess_loss(W) == pytest.approx(0.0, abs=1e-15)
    assert model.loss(W) == pytest.approx(model.entropy(), rel=1e-15)
    np.testing.assert_allclose(model.gradient(W), 0.0, atol=1e-15)
    W = np.zeros((2, 1))  # q = (1/2, 1/2): KL(p ‖ q) = ¼ log(¼/½) + ¾ log(¾/½)
    kl = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert model.excess_loss(W) == pytest.approx(kl, rel=1e-14)
    np.testing.assert_allclose(model.gradient(W)[:, 0], [0.25, -0.25], rtol=1e-15)


def test_equality_and_margin_rows_are_anchored_at_the_smallest_support_token():
    model = _l1()
    A, r = model._equalities
    np.testing.assert_array_equal(A, [[-1.0, 1.0, 0.0], [0.0, -2.0, 2.0]])
    np.testing.assert_allclose(r, [0.0, math.log(4)], rtol=1e-15)
    np.testing.assert_array_equal(model._margins, [[1.0, 0.0, -1.0], [-2.0, 2.0, 0.0]])
    # d = 2: the row of (e_a − e_v) h̄ᵀ for h̄ = (1, 2), a = 0, v = 1, row-major
    two = linear_ntp([[1.0], [2.0]], [[1.0, 0.0]], [1.0])
    np.testing.assert_array_equal(two._margins, [[1.0, 2.0, -1.0, -2.0]])
    assert two._equalities[0].shape == (0, 4) and two._equalities[1].shape == (0,)
    np.testing.assert_array_equal(two._row(0, 1, 0), [-1.0, -2.0, 1.0, 2.0])


def test_f_is_the_zero_sum_columns_here_and_w_star_its_min_norm_log_odds_solution():
    """F = span{(−1, 1, 0), (0, −1, 1)} = {w : Σ w = 0}; W* solves w_1 = w_0, w_2 − w_1 = log 2
    with Σ w = 0: (−1, −1, 2)·log 2/3."""
    model = _l1()
    assert model.dim_F == 2 and model.F_basis.shape == (2, 3)
    np.testing.assert_allclose(model.F_basis @ model.F_basis.T, np.eye(2), atol=1e-15)
    np.testing.assert_allclose(model.project_F([[1.0], [2.0], [6.0]]), [[-2.0], [-1.0], [3.0]])
    comp = model.compatibility()
    assert comp.compatible and comp.residual <= 1e-15
    np.testing.assert_allclose(comp.W_star[:, 0], np.array([-1, -1, 2]) * LOG2 / 3, atol=1e-15)
    with pytest.raises(ValueError) as err:
        model.project_F(np.zeros((1, 3)))
    assert message(err) == "W: expected shape (3, 1), got (1, 3)"
    with pytest.raises(ValueError) as err:
        model.loss(np.zeros(3))
    assert message(err) == "W: expected 2 dimensions, got shape (3,)"


def test_one_hot_supports_have_no_equation_and_w_star_zero():
    model = linear_ntp(np.eye(2), [[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], [0.5, 0.5])
    comp = model.compatibility()
    assert (comp.compatible, comp.residual) == (True, 0.0)
    assert comp.W_star.shape == (3, 2) and not comp.W_star.any()
    assert model.dim_F == 0 and model.F_basis.shape == (0, 6)


def test_compatibility_tolerance_is_inclusive(monkeypatch):
    """C12 (spec §3): residual log 2 in max norm."""
    P = [[0.5, 0.5, 0, 0], [0.8, 0.2, 0, 0], [0, 0, 0.5, 0.5]]
    model = linear_ntp([[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]], P, [1 / 3] * 3)
    comp = model.compatibility()
    assert not comp.compatible and comp.W_star is None and linear.COMPATIBLE_TOL == 1e-9
    monkeypatch.setattr(linear, "COMPATIBLE_TOL", comp.residual)
    at = model.compatibility()
    assert at.compatible and at.W_star.shape == (4, 2)
    monkeypatch.setattr(linear, "COMPATIBLE_TOL", np.nextafter(comp.residual, 0))
    assert not model.compatibility().compatible


def test_ntp_svm_outcomes_separable_infeasible_vacuous_and_failed(monkeypatch):
    one = linear_ntp([[1.0], [2.0]], [[1.0, 0.0]], [1.0])
    svm = one.ntp_svm()
    assert svm.ok and svm.separable is True and not svm.vacuous
    np.testing.assert_allclose(svm.W, [[0.1, 0.2], [-0.1, -0.2]], atol=1e-15)
    assert svm.solution.certificate.tol == 1e-8
    assert one.ntp_svm(tol=1e-3).solution.certificate.tol == 1e-3
    bad = _l1().ntp_svm()  # w_0 − w_2 ≥ 1 and 2(w_1 − w_0) ≥ 1 with w_0 = w_1
    assert bad.status == "infeasible" and bad.separable is False and bad.W is None
    assert not bad.ok and not bad.vacuous
    full = linear_ntp([[1.0]], [[0.25, 0.75]], [1.0]).ntp_svm()
    assert full.vacuous and full.ok and full.W.shape == (2, 1)
    failed = EqualityQPSolution("solver_error", None, None, None, None, "none", "raised")
    monkeypatch.setattr(linear, "solve_equality_qp", lambda A_in, A_eq, tol: failed)
    broken = one.ntp_svm()
    assert (broken.status, broken.W, broken.separable, broken.ok) == (
        "solver_error",
        None,
        None,
        False,
    )
    assert broken.solution is failed


def test_floor_bound_uses_the_largest_context_norm():
    """H's columns have norms 5 and 1: M = 5√2; C e^{−R} = V e^{‖W*‖M − R}."""
    model = linear_ntp([[3.0, 1.0], [4.0, 0.0]], [[0.5, 0.5], [0.5, 0.5]], [0.5, 0.5])
    W = np.full((2, 2), 0.1)  # ‖W‖ = 0.2
    assert model.floor_bound(1.5, W) == pytest.approx(2 * math.exp(0.2 * 5 * math.sqrt(2) - 1.5))
    assert model.floor_bound(1.5, W) == pytest.approx(2 * math.exp(math.sqrt(2) - 1.5), rel=1e-14)


def test_linear_ntp_refuses_each_bad_field_by_name():
    ok_P = [[0.5, 0.5], [0.5, 0.5]]
    cases = [
        (
            np.zeros((0, 2)),
            ok_P,
            [0.5, 0.5],
            "H: expected a non-empty d×m matrix, got shape (0, 2)",
        ),
        (
            np.zeros((2, 0)),
            ok_P,
            [0.5, 0.5],
            "H: expected a non-empty d×m matrix, got shape (2, 0)",
        ),
        (
            np.eye(2),
            [[0.5, 0.5]],
            [0.5, 0.5],
            "P: expected 2 rows (one per context, H's columns), got 1",
        ),
        (
            np.eye(2),
            [[1.0], [1.0]],
            [0.5, 0.5],
            "P: expected a vocabulary of at least 2 tokens, got 1",
        ),
        (np.eye(2), [[0.5, 0.5], [-0.5, 1.5]], [0.5, 0.5], "P: probabilities must be ≥ 0"),
        (np.eye(2), [[0.5, 0.5], [0.5, 0.6]], [0.5, 0.5], "P: row 1 sums to 1.1, not 1"),
        (
            np.eye(2),
            [[0.5, 0.5 + 2e-9], [0.5, 0.5]],
            [0.5, 0.5],
            "P: row 0 sums to 1.000000002, not 1",
        ),
        (
            np.eye(2),
            [[0.5, 0.5], [0.5, 0.5 - 2e-9]],
            [0.5, 0.5],
            "P: row 1 sums to 0.999999998, not 1",
        ),
        (np.eye(2), ok_P, [1 / 3] * 3, "pi: expected 2 weights, got shape (3,)"),
        (np.eye(2), ok_P, [1.0, 0.0], "pi: context weights must be > 0"),
        (np.eye(2), ok_P, [[0.5, 0.5]], "pi: expected 1 dimensions, got shape (1, 2)"),
        (np.eye(2), [0.5, 0.5], [0.5, 0.5], "P: expected 2 dimensions, got shape (2,)"),
        ([1.0, 2.0], ok_P, [0.5, 0.5], "H: expected 2 dimensions, got shape (2,)"),
        ([[1.0, np.nan], [0.0, 1.0]], ok_P, [0.5, 0.5], "H: contains NaN or infinity"),
    ]
    for H, P, pi, text in cases:
        with pytest.raises(ValueError) as err:
            linear_ntp(H, P, pi)
        assert message(err) == text
    # within PROBABILITY_TOL = 1e-9 a row is on the simplex
    assert linear.PROBABILITY_TOL == 1e-9
    near = linear_ntp(np.eye(2), [[0.5, 0.5 + 5e-10], [0.5, 0.5 - 5e-10]], [0.5, 0.5])
    assert near.P.dtype == np.float64 and near.H.dtype == np.float64 and near.pi.dtype == np.float64


# ===================================================================================== gd.py


class _Quadratic:
    """∇ = W − T: GD with step η gives W_k = T + (1 − η)^k (W_0 − T); ``bad_at`` makes the
    gradient of that call NaN. Counts its calls."""

    def __init__(self, T, bad_at=None):
        self.T, self.bad_at, self.calls = np.asarray(T, dtype=float), bad_at, 0

    def gradient(self, W):
        self.calls += 1
        if self.calls == self.bad_at:
            return np.full_like(W, np.nan)
        return W - self.T


def test_gd_iterates_are_geometric_and_kept_exactly_where_asked():
    T, W0 = np.array([[1.0, 2.0]]), np.array([[0.0, 4.0]])
    model = _Quadratic(T)
    run = gd(model, W0, lr=0.5, steps=3, record=[-1, 0, 2, 9])
    assert sorted(run.iterates) == [0, 2, 3] and model.calls == 3
    for k, W in run.iterates.items():
        np.testing.assert_array_equal(W, T + 0.5**k * (W0 - T))
    assert run.last is run.iterates[3] and run.steps == 3 and run.stopped == ""
    assert run.lr == 0.5 and 0.0 <= run.seconds < 10.0
    assert W0.tolist() == [[0.0, 4.0]] and run.iterates[0] is not W0
    model = _Quadratic(T)
    unrecorded = gd(model, W0, lr=1, steps=2)
    assert sorted(unrecorded.iterates) == [2] and model.calls == 2
    assert type(unrecorded.lr) is float and unrecorded.lr == 1.0
    np.testing.assert_array_equal(unrecorded.last, T)
    model = _Quadratic(T)
    none = gd(model, [[0, 4]], lr=0.5, steps=0, record=[0, 1])
    assert sorted(none.iterates) == [0] and none.steps == 0 and model.calls == 0
    assert none.last.dtype == np.float64 and none.last.tolist() == [[0.0, 4.0]]


def test_gd_stops_at_a_non_finite_gradient_keeping_the_finite_iterates():
    T, W0 = np.array([[1.0]]), np.array([[0.0]])
    run = gd(_Quadratic(T, bad_at=3), W0, lr=0.5, steps=10, record=[1, 2, 5])
    assert run.stopped == "non-finite gradient at step 3" and run.steps == 2
    assert sorted(run.iterates) == [1, 2] and run.last.tolist() == [[0.75]]
    first = gd(_Quadratic(T, bad_at=1), W0, lr=0.5, steps=10)
    assert first.stopped == "non-finite gradient at step 1" and first.steps == 0
    assert sorted(first.iterates) == [0] and first.last.tolist() == [[0.0]]


def test_gd_refuses_a_bad_step_or_step_count():
    model = _Quadratic([[1.0]])
    for lr, shown in ((0.0, "0.0"), (-1, "-1"), (math.nan, "nan"), (math.inf, "inf")):
        with pytest.raises(ValueError) as err:
            gd(model, [[0.0]], lr=lr, steps=1)
        assert message(err) == f"lr: expected a finite step > 0, got {shown}"
    with pytest.raises(ValueError) as err:
        gd(model, [[0.0]], lr=0.5, steps=-1)
    assert message(err) == "steps: expected ≥ 0, got -1"
    assert model.calls == 0
    assert gd(model, [[0.0]], lr=1e-300, steps=1).steps == 1  # any finite positive step


def test_batched_linear_gd_matches_gd_records_only_what_was_asked_and_flags_overflow():
    problems = [_l1(), linear_ntp([[1.0], [2.0]], [[1.0, 0.0]], [1.0])]
    W0s = [np.zeros((3, 1)), np.array([[0.5, -0.5], [0.0, 1.0]])]
    run = batched_linear_gd(problems, W0s, eta=0.5, steps=3, record=(0, 1, 3, 4, 5))
    assert run.finite is True and sorted(run.iterates) == [1, 3]
    for b, (problem, W0) in enumerate(zip(problems, W0s, strict=True)):
        reference = gd(problem, W0, lr=0.5, steps=3, record=[1])
        for k in (1, 3):
            assert run.iterates[k][b].shape == W0.shape
            np.testing.assert_allclose(run.iterates[k][b], reference.iterates[k], atol=1e-15)
    ngd = batched_linear_gd(problems, W0s, eta=0.25, steps=1, record=(1,), normalized=True)
    for b, W0 in enumerate(W0s):
        assert np.linalg.norm(ngd.iterates[1][b] - W0) == pytest.approx(0.25, rel=1e-14)
        step = ngd.iterates[1][b] - W0
        G = problems[b].gradient(W0)
        np.testing.assert_allclose(step, -0.25 * G / np.linalg.norm(G), atol=1e-15)
    with np.errstate(all="ignore"):
        blown = batched_linear_gd(problems[:1], W0s[:1], eta=1e200, steps=4, record=(1, 2, 3, 4))
    assert blown.finite is False and sorted(blown.iterates) == [1]
    assert np.isfinite(blown.iterates[1][0]).all()
    with pytest.raises(ValueError):  # one W0 per problem, strictly
        batched_linear_gd(problems[:1], W0s, eta=0.5, steps=1, record=(1,))


def test_batched_linear_gd_shifts_each_context_by_its_own_in_support_anchor():
    """Context 0 has every logit at 800, context 1 has token 0 (off its support {1, 2}) at
    −800: shifting each context by the logit of the first token of its own support keeps
    e^{ℓ − ℓ_anchor} in range, so the step is LinearNTP's log-space one."""
    problem = linear_ntp(np.eye(2), [[0.5, 0.5, 0.0], [0.0, 0.25, 0.75]], [0.5, 0.5])
    W0 = np.array([[800.0, -800.0], [800.0, 0.0], [800.0, 0.0]])
    run = batched_linear_gd([problem], [W0], eta=0.5, steps=1, record=(1,))
    assert run.finite is True
    np.testing.assert_allclose(run.iterates[1][0], W0 - 0.5 * problem.gradient(W0), atol=1e-12)


def test_batch_pads_every_field_to_one_shape():
    """K = 3 (the larger draw). Draw 0: E = I₂, query 1: ([0,1],0) and ([0,0,1],1) (token 0
    twice); its logits sit at v·K + 1. Draw 1: E = I₃, ([2,1,0],2) and a padded sample (a lone
    label: logc 0 in slot 0, weight 0)."""
    d1 = ntp_data(np.eye(2), [[0, 1], [0, 0, 1]], [0, 1])
    d2 = ntp_data(np.eye(3), [[2, 1, 0]], [2])
    bt = batch([d1, d2])
    assert bt.datas == (d1, d2)
    np.testing.assert_array_equal(bt.G, [np.diag([1.0, 1.0, 0.0]), np.eye(3)])
    np.testing.assert_array_equal(bt.idx, [[1, 4, 0, 1, 4, 0], [0, 3, 6, 0, 0, 0]])
    inf = -np.inf
    np.testing.assert_array_equal(
        bt.logc, [[[0, 0, inf], [LOG2, 0, inf]], [[0, 0, 0], [0, inf, inf]]]
    )
    lab = [[[1, 0, 0], [0, 1, 0]], [[0, 0, 1], [1, 0, 0]]]
    off = [[[0, 1, 0], [1, 0, 0]], [[1, 1, 0], [0, 0, 0]]]
    np.testing.assert_array_equal(bt.lab, np.array(lab, dtype=bool))
    np.testing.assert_array_equal(bt.off, np.array(off, dtype=bool))
    assert bt.labf.dtype == np.float64 and bt.offf.dtype == np.float64
    np.testing.assert_array_equal(bt.labf, lab)
    np.testing.assert_array_equal(bt.offf, off)
    np.testing.assert_array_equal(bt.w, [[0.5, 0.5], [1.0, 0.0]])
    np.testing.assert_array_equal(bt.flat, [[[1, 4, 0], [1, 4, 0]], [[9, 12, 15], [9, 9, 9]]])
    assert bt.scatter.shape == (2, 6, 9)
    hot = [np.flatnonzero(row).tolist() for row in bt.scatter.reshape(12, 9)]
    assert hot == [[1], [4], [], [1], [4], [], [0], [3], [6], [0], [], []]
    assert set(np.unique(bt.scatter)) == {0.0, 1.0}


def test_batched_attention_gd_is_gd_with_its_default_step_and_logs_the_loss():
    """The 2 : 1 cycle: L(0) = log 2; η = 1/L_bound unless ``lr``; the loss every
    ``loss_every`` steps, before the step, is the model's loss at that iterate."""
    data = two_token_cycle(2, 1)
    model = ntp_attention(data)
    eta = 1 / smoothness_bound(data)
    run = batched_attention_gd([data], steps=5, record=(-1, 0, 2, 5, 7), loss_every=2)
    assert sorted(run.W) == [0, 2, 5] and not run.W[0][0].any()
    reference = gd(model, np.zeros((2, 2)), lr=eta, steps=5, record=range(6))
    for k in (2, 5):
        np.testing.assert_allclose(run.W[k][0], reference.iterates[k], atol=1e-14)
    assert run.loss_steps.tolist() == [0, 2, 4] and run.losses.shape == (3, 1)
    assert run.losses[0, 0] == pytest.approx(LOG2, rel=1e-15)
    for row, k in enumerate((0, 2, 4)):
        assert run.losses[row, 0] == pytest.approx(model.loss(reference.iterates[k]), rel=1e-13)
    default = batched_attention_gd([data], steps=250, record=())
    assert default.W == {} and default.loss_steps.tolist() == [0, 100, 200]
    # K ≠ d both ways, in one padded batch, from a given W0 with a given step
    wide = ntp_data([[1.0, 0.0, 0.0], [0.0, 0.6, 0.8]], data.sequences, data.labels)  # K=2, d=3
    tall = ntp_data([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]], [[2, 1, 0], [1, 2, 0]], [2, 1])
    W0s = [np.arange(9.0).reshape(3, 3) / 10, np.array([[0.5, -1.0], [0.25, 2.0]])]
    fixed = batched_attention_gd([wide, tall], steps=3, record=(0, 3), lr=0.3, W0=W0s)
    for b, (d, W0) in enumerate(zip((wide, tall), W0s, strict=True)):
        np.testing.assert_allclose(fixed.W[0][b], W0, atol=1e-15)
        expected = gd(ntp_attention(d), W0, lr=0.3, steps=3).last
        np.testing.assert_allclose(fixed.W[3][b], expected, atol=1e-14)
    with pytest.raises(ValueError):  # one W0 per draw, strictly
        batched_attention_gd([wide], steps=1, record=(), W0=W0s)


def test_batched_normalised_methods_need_a_step_and_move_by_it():
    data = two_token_cycle(2, 1)
    for method in ("ngd", "official"):
        with pytest.raises(ValueError) as err:
            batched_attention_gd([data], steps=1, record=(1,), method=method)
        assert message(err) == "lr: NGD needs a step"
        run = batched_attention_gd([data], steps=1, record=(1,), method=method, lr=0.125)
        assert np.linalg.norm(run.W[1][0]) == pytest.approx(0.125, rel=1e-12)
        # the official recipe's loss is −log(p̂_y + eps): log 2 at W = 0 up to eps
        assert run.losses[0, 0] == pytest.approx(LOG2, abs=1e-15)
    assert gd_module.METHODS == {"gd": 0, "ngd": 1, "official": 2}
    assert gd_module.EPS == np.finfo(np.float64).eps
