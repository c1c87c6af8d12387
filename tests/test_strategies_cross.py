"""Meta-tests: each cross-attention strategy (strategies/cross.py, spec tfsvm §3) meets the
assumptions it promises, each checked here independently of the strategy's own code: norms and
ranks with numpy, the SVMs with a cvxpy problem written on W (not the vectorised keys the
strategies use), local optimality from that SVM's support set and the scores.

Also: instances round-trip through JSON, CrossInstance rejects malformed fields naming them, and
no strategy trips a Hypothesis health check at default settings.
"""

from __future__ import annotations

import json
import math

import cvxpy as cp
import numpy as np
import pytest
import torch
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from models.oracles.svm import att_svm
from strategies import (
    ARBITRARY_P0,
    ASSUMPTIONS,
    CONE_INIT,
    EQUAL_NONOPT_SCORES,
    LOCALLY_OPTIMAL_ALPHA,
    NON_GLOBAL_ALPHA,
    SVM_FEASIBLE,
    UNIQUE_OPT,
    CrossInstance,
    cross_cone_inits,
    equal_nonopt_cross_instances,
    local_opt_cross_instances,
    nostat_instances,
    official_cross_instances,
    prescribed_score_instances,
    with_random_init,
)
from strategies.cross import (
    LOCAL_MARGIN_GAP,
    MIN_OPT_GAP,
    local_gap,
    random_W,
    svm_keys,
)
from strategies.cross_dynamics import head_problems
from strategies.instances import (
    DISTINCT_SCORES,
    INDEPENDENT_QUERIES,
    INDEPENDENT_TOKENS,
    OFFICIAL_CROSS,
    PRESCRIBED_SCORES,
)

DTYPE = torch.float64
FAST = settings(max_examples=25, deadline=None)
FEW = settings(max_examples=10, deadline=None)
NO_SHRINK = settings(database=None, phases=[Phase.generate], max_examples=200, deadline=None)

#: γ_it = Y_i vᵀx_it is a float64 dot product of d ≤ 10 terms of size ≤ 1: it reproduces the
#: designed g to a few ulps, not bit for bit (x = k + Y g v with k ⟂ v only to rounding).
SCORE_ROUNDING = 8 * np.finfo(np.float64).eps
#: Unit norms of normalised float64 vectors.
UNIT_ROUNDING = 1e-14
#: A margin counts as active (support token) within this of 1 (spec §1.5's tolerance).
ACTIVE_TOL = 1e-6
#: Agreement of two certified SVM solutions (Clarabel's accuracy is ~1e-8 relative).
SVM_AGREEMENT = 1e-6
#: Smallest singular value (relative to the largest) that counts as linearly independent.
RANK_TOL = 1e-8


def _first(strategy, condition=lambda _: True):
    """The first generated example meeting ``condition`` (no shrinking: it only shows reach)."""
    return find(strategy, condition, settings=NO_SHRINK)


# ---- independent references ------------------------------------------------------------------


def numpy_scores(inst: CrossInstance) -> np.ndarray:
    return inst.y.numpy()[:, None] * np.einsum("itd,d->it", inst.X.numpy(), inst.v.numpy())


def fro_svm(inst: CrossInstance, alpha) -> np.ndarray:
    """W^mm(α) = argmin ‖W‖_F s.t. (x_iα − x_it)ᵀ W z_i ≥ 1, written on W with cvxpy (Clarabel);
    asserts a feasible optimum with every margin ≥ 1 − ACTIVE_TOL."""
    X, Z = inst.X.numpy(), inst.Z.numpy()
    W = cp.Variable((inst.d, inst.d))
    cons = [
        (X[i, alpha[i]] - X[i, t]) @ W @ Z[i] >= 1
        for i in range(inst.n)
        for t in range(inst.T)
        if t != alpha[i]
    ]
    prob = cp.Problem(cp.Minimize(cp.sum_squares(W)), cons)
    prob.solve(solver=cp.CLARABEL)
    assert prob.status == "optimal", f"Frobenius SVM: {prob.status} ({inst!r})"
    Wv = W.value
    m = margins(inst, alpha, Wv)
    assert np.nanmin(m) >= 1 - ACTIVE_TOL, f"min margin {np.nanmin(m)} < 1 ({inst!r})"
    return Wv


def margins(inst: CrossInstance, alpha, W) -> np.ndarray:
    """(x_iα − x_it)ᵀ W z_i, (n, T), NaN at t = α_i."""
    a = np.einsum("itd,de,ie->it", inst.X.numpy(), np.asarray(W), inst.Z.numpy())
    out = a[np.arange(inst.n), alpha][:, None] - a
    out[np.arange(inst.n), alpha] = np.nan
    return out


def cosine(A, B) -> float:
    A, B = np.asarray(A).ravel(), np.asarray(B).ravel()
    return float(A @ B / (np.linalg.norm(A) * np.linalg.norm(B)))


def rank_ok(M: np.ndarray, r: int) -> bool:
    s = np.linalg.svd(M, compute_uv=False)
    return len(s) >= r and s[r - 1] > RANK_TOL * s[0]


def structure_holds(inst: CrossInstance) -> dict[str, bool]:
    """The structural assumptions, computed here: independent queries, independent tokens in
    every input, at least two distinct scores in every input."""
    X, Z, g = inst.X.numpy(), inst.Z.numpy(), numpy_scores(inst)
    return {
        INDEPENDENT_QUERIES: inst.n <= inst.d and rank_ok(Z, inst.n),
        INDEPENDENT_TOKENS: inst.T <= inst.d and all(rank_ok(X[i], inst.T) for i in range(inst.n)),
        DISTINCT_SCORES: bool(np.all(g.max(1) - g.min(1) > 1e-9)),
    }


def assert_structure_flags(inst: CrossInstance) -> None:
    """A structural flag is present exactly when its condition holds."""
    for name, holds in structure_holds(inst).items():
        assert (name in inst.assumptions) == holds, (name, inst)


def assert_unique_opt(inst: CrossInstance) -> None:
    g = numpy_scores(inst)
    top = np.argmax(g, axis=1)
    srt = np.sort(g, axis=1)
    assert np.all(srt[:, -1] - srt[:, -2] >= MIN_OPT_GAP - 1e-12), inst
    return top


def assert_unit_rows(x: torch.Tensor) -> None:
    norms = torch.linalg.vector_norm(x, dim=-1)
    assert float((norms - 1).abs().max()) <= UNIT_ROUNDING


def assert_valid_labels(inst: CrossInstance) -> None:
    assert bool(((inst.y == 1) | (inst.y == -1)).all())


# ---- official generator ----------------------------------------------------------------------


@FAST
@given(official_cross_instances())
def test_official_cross_instances_are_unit_and_select_the_unique_top_score(inst):
    assert {OFFICIAL_CROSS, UNIQUE_OPT} <= inst.assumptions <= set(ASSUMPTIONS)
    assert_unit_rows(inst.X)
    assert_unit_rows(inst.Z)
    assert_unit_rows(inst.v)
    assert_valid_labels(inst)
    top = assert_unique_opt(inst)
    assert np.array_equal(inst.alpha, top)
    assert_structure_flags(inst)
    assert inst.W0 is None and inst.loss == "logistic"
    assert 1 <= inst.n <= 6 and 2 <= inst.T <= 8 and 2 <= inst.d <= 10


def test_official_labels_take_both_signs():
    inst = _first(official_cross_instances(n=4), lambda x: bool((x.y == -1).any()))
    assert_valid_labels(inst)
    _first(official_cross_instances(n=4), lambda x: bool((x.y == 1).any() and (x.y == -1).any()))


# ---- prescribed and equal non-optimal scores -------------------------------------------------


def assert_prescribed(inst: CrossInstance) -> np.ndarray:
    """x_it = k_it + Y_i g_it v with k_it ⟂ v unit, v unit, z unit: γ = g (to rounding)."""
    assert PRESCRIBED_SCORES in inst.assumptions
    g = inst.meta["g"].numpy()
    gam = numpy_scores(inst)
    err = float(np.abs(gam - g).max())
    assert err <= SCORE_ROUNDING, f"|γ − g| = {err:.2e} > {SCORE_ROUNDING:.1e} ({inst!r})"
    assert float((inst.scores.numpy() - g).__abs__().max()) <= SCORE_ROUNDING
    v = inst.v.numpy()
    k = inst.X.numpy() - (inst.y.numpy()[:, None] * g)[..., None] * v
    assert float(np.abs(k @ v).max()) <= UNIT_ROUNDING
    assert float(np.abs(np.linalg.norm(k, axis=-1) - 1).max()) <= UNIT_ROUNDING
    assert_unit_rows(inst.v)
    assert_unit_rows(inst.Z)
    assert_valid_labels(inst)
    return g


@FAST
@given(prescribed_score_instances())
def test_prescribed_scores_are_the_designed_g(inst):
    g = assert_prescribed(inst)
    assert np.all((g >= 0) & (g <= 1))  # the default U[0, 1]
    assert UNIQUE_OPT in inst.assumptions
    top = assert_unique_opt(inst)
    assert np.array_equal(inst.alpha, top) and np.array_equal(top, np.argmax(g, 1))
    assert_structure_flags(inst)


def _injected(gen, n, T):
    g = torch.linspace(-2.0, 3.0, T, dtype=DTYPE).repeat(n, 1)
    return g.flip(1) if n % 2 else g


@FEW
@given(prescribed_score_instances(n=st.integers(1, 3), T=4, d=5, scores=_injected))
def test_prescribed_scores_accept_injected_scores(inst):
    g = assert_prescribed(inst)
    assert np.array_equal(g, _injected(None, inst.n, 4).numpy())
    assert inst.alpha.tolist() == [0 if inst.n % 2 else 3] * inst.n


@FAST
@given(st.one_of(prescribed_score_instances(), equal_nonopt_cross_instances()))
def test_prescribed_scores_are_exact_in_every_summation_order(inst):
    """The scores y·Xv are g bit for bit, in numpy's and torch's products and in a reversed
    sum: the ties g prescribes (G-EQ) are ties on every machine, not to ±1e-16."""
    g = inst.meta["g"].numpy()
    y, X, v = inst.y.numpy(), inst.X.numpy(), inst.v.numpy()
    for products in (X @ v, (inst.X @ inst.v).numpy(), (X * v)[..., ::-1].sum(-1)):
        assert np.array_equal(y[:, None] * products, g)
    assert np.array_equal(inst.problem.scores.numpy(), g)


@FAST
@given(equal_nonopt_cross_instances())
def test_equal_nonopt_scores_and_a_feasible_certified_svm(inst):
    assert {EQUAL_NONOPT_SCORES, SVM_FEASIBLE, PRESCRIBED_SCORES, UNIQUE_OPT} <= inst.assumptions
    g = assert_prescribed(inst)
    top = assert_unique_opt(inst)
    assert np.array_equal(inst.alpha, top)
    gam = numpy_scores(inst)
    for i in range(inst.n):
        others = np.delete(g[i], top[i])
        assert g[i, top[i]] == 1.0 and np.all(others == 0.5)  # designed exactly
        rest = np.delete(gam[i], top[i])
        assert float(rest.max() - rest.min()) <= SCORE_ROUNDING  # realised to rounding
    # a feasible Att-SVM(opt): solved here on W, and the strategy's certified oracle agrees
    W = fro_svm(inst, inst.alpha)
    sol = att_svm(svm_keys(inst), inst.alpha)
    assert sol.ok and sol.certificate is not None and sol.certificate.ok
    assert 1 - cosine(sol.x, W) <= SVM_AGREEMENT
    assert_structure_flags(inst)


def test_equal_nonopt_puts_the_top_token_anywhere():
    inst = _first(equal_nonopt_cross_instances(n=2), lambda x: bool((x.alpha != 0).any()))
    assert np.array_equal(inst.alpha, np.argmax(inst.meta["g"].numpy(), 1))


# ---- NOSTAT ----------------------------------------------------------------------------------


@FAST
@given(nostat_instances())
def test_nostat_instances_have_independent_queries_and_tokens_and_distinct_scores(inst):
    need = {INDEPENDENT_QUERIES, INDEPENDENT_TOKENS, DISTINCT_SCORES}
    assert need <= inst.assumptions
    holds = structure_holds(inst)
    assert all(holds[name] for name in need), (holds, inst)
    assert max(inst.n, inst.T) <= inst.d <= max(inst.n, inst.T) + 3
    assert_valid_labels(inst)
    assert inst.alpha is None and inst.W0 is None


# ---- non-global locally-optimal α --------------------------------------------------------------


@settings(max_examples=15, deadline=None)
@given(local_opt_cross_instances())
def test_local_opt_alpha_is_non_global_locally_optimal_with_the_margin_gap(inst):
    """Checked from a Frobenius SVM solved here on W: α ≠ opt on some input; every support token
    (margin within ACTIVE_TOL of 1) scores strictly below α_i; every token scoring at least
    γ_iα has margin ≥ 1 + δ, δ = 0.1 (spec §3.5)."""
    need = {LOCALLY_OPTIMAL_ALPHA, NON_GLOBAL_ALPHA, SVM_FEASIBLE, OFFICIAL_CROSS, UNIQUE_OPT}
    assert need <= inst.assumptions
    assert (inst.n, inst.T, inst.d) == (3, 4, 4)
    g = numpy_scores(inst)
    opt = assert_unique_opt(inst)
    assert np.array_equal(inst.meta["opt"], opt)
    alpha = inst.alpha
    assert np.any(alpha != opt), "alpha is the global opt"
    W = fro_svm(inst, alpha)
    m = margins(inst, alpha, W)
    rows = np.arange(inst.n)
    support = [(i, t) for i in range(inst.n) for t in range(inst.T) if m[i, t] <= 1 + ACTIVE_TOL]
    assert support, "an SVM optimum has an active constraint"
    for i, t in support:
        assert g[i, t] < g[i, alpha[i]], f"support token ({i}, {t}) scores ≥ α_i ({inst!r})"
    higher = (g >= g[rows, alpha][:, None]) & ~np.isnan(m)
    gap = float(np.min(m[higher]) - 1) if higher.any() else math.inf
    assert gap >= LOCAL_MARGIN_GAP - SVM_AGREEMENT, f"margin gap {gap:.4g} < 0.1 ({inst!r})"
    assert math.isclose(gap, inst.meta["margin_gap"], rel_tol=1e-5, abs_tol=1e-5)
    assert math.isclose(local_gap(inst, alpha, W), gap, rel_tol=1e-5, abs_tol=1e-5)


# ---- initialisations -------------------------------------------------------------------------


@FAST
@given(with_random_init(official_cross_instances(n=st.integers(1, 3), d=st.integers(2, 5))))
def test_random_init_is_a_finite_d_by_d_matrix(inst):
    assert ARBITRARY_P0 in inst.assumptions and OFFICIAL_CROSS in inst.assumptions
    assert inst.W0.shape == (inst.d, inst.d)
    assert bool(torch.isfinite(inst.W0).all()) and bool(inst.W0.any())


def _init_scale_ratios(scale) -> list[float]:
    """‖W0‖²/(s²d²) over 40 draws of with_random_init(scale=scale)."""
    ratios = []

    @settings(max_examples=40, deadline=None, database=None)
    @given(with_random_init(official_cross_instances(n=2, d=st.integers(2, 6)), scale=scale))
    def collect(inst):
        s = 3.0 / inst.d if scale is None else scale
        ratios.append(float(inst.W0.square().sum()) / (s * s * inst.d**2))

    collect()
    return ratios


def test_random_init_has_the_stated_scale():
    """Entries N(0, s²) with s = 3/d by default (‖W0‖_F ≈ 3) or the given s: the mean of
    ‖W0‖²/(s²d²) over 40 draws is 1 ± 0.35 (its sd is ≤ √(2/4)/√40 ≈ 0.11)."""
    for scale in (None, 0.7):
        ratios = _init_scale_ratios(scale)
        assert len(ratios) >= 20 and abs(np.mean(ratios) - 1) <= 0.35, (scale, np.mean(ratios))
    W = random_W(3, 5, 2.0)
    assert torch.equal(W, random_W(3, 5, 2.0)) and not torch.equal(W, random_W(3, 6, 2.0))


CONE_BASES = st.one_of(
    local_opt_cross_instances(),
    equal_nonopt_cross_instances(n=st.integers(1, 3), T=st.integers(2, 4), d=st.integers(5, 6)),
    with_random_init(official_cross_instances(n=st.integers(1, 3), d=st.integers(3, 5))),
)


@settings(max_examples=20, deadline=None)
@given(cross_cone_inits(CONE_BASES, R0=st.floats(1.0, 200.0), eps=st.floats(1e-4, 0.5)))
def test_cone_init_lies_in_the_cone(inst):
    """‖W0‖_F = R0 and cos(W0, W^mm_α) ≥ 1 − ε, W^mm_α solved here on W (spec §2.6)."""
    cone = inst.meta["cone"]
    assert CONE_INIT in inst.assumptions and ARBITRARY_P0 not in inst.assumptions
    norm = float(torch.linalg.vector_norm(inst.W0))
    assert abs(norm - cone["R0"]) <= 1e-12 * cone["R0"]
    W = fro_svm(inst, inst.alpha)
    cos = cosine(inst.W0.numpy(), W)
    assert cos >= 1 - cone["eps"] - SVM_AGREEMENT, f"cos {cos} < 1 − {cone['eps']} ({inst!r})"
    assert abs(cos - cone["cos"]) <= SVM_AGREEMENT


def test_cone_init_is_not_always_on_the_axis():
    inst = _first(
        cross_cone_inits(local_opt_cross_instances()), lambda x: x.meta["cone"]["cos"] < 1
    )
    W = fro_svm(inst, inst.alpha)
    assert cosine(inst.W0.numpy(), W) < 1 - 1e-9


def test_cone_init_rejects_bad_arguments():
    plain = _first(nostat_instances())
    with pytest.raises(InvalidArgument, match="instance"):
        _first(cross_cone_inits(plain))
    base = _first(official_cross_instances(n=2, d=4))
    with pytest.raises(InvalidArgument, match="R0"):
        _first(cross_cone_inits(base, R0=0.0))
    with pytest.raises(InvalidArgument, match="eps"):
        _first(cross_cone_inits(base, eps=1.0))


# ---- helpers the claims use ------------------------------------------------------------------


@FEW
@given(official_cross_instances(n=st.integers(1, 3), T=st.integers(2, 4), d=st.integers(2, 4)))
def test_svm_keys_are_the_row_major_outer_products(inst):
    keys = svm_keys(inst).numpy()
    for i in range(inst.n):
        for t in range(inst.T):
            outer = np.outer(inst.X[i, t].numpy(), inst.Z[i].numpy())
            assert np.array_equal(keys[i, t].reshape(inst.d, inst.d), outer)


# ---- serialisation and bad input -------------------------------------------------------------

ANY_CROSS = st.one_of(
    official_cross_instances(),
    prescribed_score_instances(),
    equal_nonopt_cross_instances(),
    nostat_instances(),
    with_random_init(official_cross_instances(n=st.integers(1, 3))),
    cross_cone_inits(local_opt_cross_instances()),
)


@FAST
@given(ANY_CROSS)
def test_json_round_trip(inst):
    data = json.loads(json.dumps(inst.to_json()))
    assert set(data) == {"model", "X", "Z", "y", "v", "loss"} and data["model"] == "cross"
    back = CrossInstance.from_json(data)
    for name in ("X", "Z", "y", "v"):
        assert torch.equal(getattr(back, name), getattr(inst, name))
    assert back.loss == inst.loss and back.W0 is None and back.alpha is None
    full = CrossInstance.from_json(json.loads(json.dumps(inst.to_json(extra=True))))
    assert (full.W0 is None) == (inst.W0 is None)
    if inst.W0 is not None:
        assert torch.equal(full.W0, inst.W0)
    if inst.alpha is None:
        assert full.alpha is None
    else:
        assert np.array_equal(full.alpha, inst.alpha)
    assert full.assumptions == inst.assumptions and full.seed == inst.seed
    assert torch.equal(full.scores, inst.scores)


def _valid():
    return {
        "X": torch.zeros(2, 3, 4),
        "Z": torch.ones(2, 4),
        "y": torch.tensor([1.0, -1.0]),
        "v": torch.ones(4),
    }


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("X", torch.zeros(3, 4)),
        ("X", torch.full((2, 3, 4), float("nan"))),
        ("X", [[[1.0, 2.0]], [[1.0]]]),
        ("X", torch.zeros(0, 3, 4)),
        ("Z", torch.ones(2, 3)),
        ("Z", torch.ones(3, 4)),
        ("Z", torch.ones(4)),
        ("Z", torch.full((2, 4), float("inf"))),
        ("y", torch.tensor([1.0, 0.0])),
        ("y", torch.tensor([1.0, -1.0, 1.0])),
        ("v", torch.zeros(3)),
        ("v", "abc"),
        ("loss", "hinge"),
        ("loss", 3),
        ("W0", torch.zeros(4, 5)),
        ("W0", torch.zeros(16)),
        ("alpha", np.array([0, 3])),
        ("alpha", np.array([0])),
        ("alpha", np.array([0, -1])),
        ("assumptions", {"no_such_assumption"}),
        ("seed", 1.5),
        ("meta", [1, 2]),
    ],
)
def test_invalid_cross_instance_names_the_field(field, value):
    with pytest.raises(ValueError, match=f"^{field}"):
        CrossInstance(**(_valid() | {field: value}))


def test_from_json_rejects_malformed_files():
    good = CrossInstance(**_valid()).to_json()
    with pytest.raises(ValueError, match="^model"):
        CrossInstance.from_json(good | {"model": "prompt"})
    with pytest.raises(ValueError, match="^Z"):
        CrossInstance.from_json({k: v for k, v in good.items() if k != "Z"})
    with pytest.raises(ValueError, match="^y"):
        CrossInstance.from_json(good | {"y": [1, 2]})
    with pytest.raises(ValueError, match="^instance"):
        CrossInstance.from_json([1, 2, 3])


def test_repr_and_problem():
    inst = CrossInstance(**_valid(), alpha=[0, 2], assumptions={UNIQUE_OPT}, seed=7)
    assert "CrossInstance(n=2, T=3, d=4" in repr(inst) and "seed=7" in repr(inst)
    assert inst.problem is inst.problem  # cached
    assert torch.equal(inst.scores, torch.zeros(2, 3, dtype=DTYPE))
    assert inst.assumptions <= set(ASSUMPTIONS)


# ---- health checks ---------------------------------------------------------------------------

CROSS_STRATEGIES = {
    "official": lambda: official_cross_instances(),
    "prescribed": lambda: prescribed_score_instances(),
    "equal_nonopt": lambda: equal_nonopt_cross_instances(),
    "nostat": lambda: nostat_instances(),
    "local_opt": lambda: local_opt_cross_instances(),
    "random_init": lambda: with_random_init(official_cross_instances()),
    "cone_init": lambda: cross_cone_inits(equal_nonopt_cross_instances()),
}


@pytest.mark.parametrize("name", sorted(CROSS_STRATEGIES))
def test_no_health_check_failures(name):
    """Default settings (all health checks on); raises FailedHealthCheck on a problem."""
    seen = []

    @settings(settings.get_profile("default"), max_examples=10, database=None, deadline=None)
    @given(CROSS_STRATEGIES[name]())
    def run(inst):
        seen.append(inst)

    run()
    assert seen


@FAST
@given(problem=head_problems())
def test_head_problems_are_the_notebooks_data_with_either_head(problem):
    """TF-DEF-HEAD-GRADIENT's strategy: n = 3, T = 4, d ∈ [2, 6]; unit tokens and queries;
    at least one label −1 (the notebook skips the others); the ReLU head's V of unit Frobenius
    norm, or the λ head with a unit v and λ ∈ {0.5, 1, 2, 4}."""
    n, T, d = problem.X.shape
    assert (n, T) == (3, 4) and 2 <= d <= 6
    np.testing.assert_allclose(torch.linalg.vector_norm(problem.X, dim=-1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(torch.linalg.vector_norm(problem.Z, dim=-1), 1.0, rtol=1e-6)
    assert set(problem.y.tolist()) <= {1.0, -1.0} and -1.0 in problem.y.tolist()
    if problem.head == "relu":
        assert float(torch.linalg.matrix_norm(problem.V)) == pytest.approx(1.0, rel=1e-6)
    else:
        assert problem.head == "lambda" and problem.lam in (0.5, 1.0, 2.0, 4.0)
        assert float(torch.linalg.vector_norm(problem.V)) == pytest.approx(1.0, rel=1e-12)
