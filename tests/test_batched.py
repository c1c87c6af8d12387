"""The batched path of the large rung (models/flows/batched.py) against the CPU engine.

``batched_field`` must be ``kernels.field`` (through ``PromptProblem.flow_field_np``) on
every instance of a padded batch: directions to DIRECTION_TOL, log‖∇L‖ to LOG_NORM_RTOL,
also at saturated points (‖p‖ = 1e3, 1e4, and along the ATT-SVM direction, where several
terms below e^{−745} compete), at stationary points and exact ties. Padding must change
nothing, and ``converge_many`` must reach the verdicts of ``converge`` one by one. CPU only,
except the last test, which repeats the comparison on ``ATTN_DEVICE=cuda`` where torch sees a
GPU (benchmarks/device_check.sh runs it there). The tests that need the engine or the SVM
oracle import them (and so cvxpy) in their bodies: a device image without cvxpy still runs
the field's comparisons.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from models.flows.batched import (
    BatchedProblems,
    batched_field,
    converge_many,
    selection_leads,
    transient,
)
from models.numerics import device as device_module
from models.problems.attention import PromptProblem

#: max |U − u| per coordinate: both are float64 sums of the same log-space terms, which
#: differ only in summation order (measured: ≤ 4e-16 on these instances).
DIRECTION_TOL = 1e-12
#: |Δ log‖∇L‖| / max(1, |log‖∇L‖|) (measured: ≤ 4e-16).
LOG_NORM_RTOL = 1e-10
#: Mixed sizes (n, T) padded together in one batch, key dimension D.
SIZES = ((3, 4), (5, 7), (1, 2), (4, 3), (2, 9))
D = 6
#: The engine's target in the agreement test, and its instances' sizes (n, T, d).
TARGET = 1e-6
AGREEMENT_SIZES = ((2, 3, 6), (3, 4, 6), (4, 4, 6), (1, 5, 6), (3, 3, 6), (2, 6, 6))


def random_problem(n: int, T: int, d: int, seed: int, loss="logistic") -> PromptProblem:
    rng = np.random.default_rng([n, T, d, seed])
    keys = rng.normal(size=(n, T, d))
    scores = rng.uniform(-1, 1, size=(n, T))
    return PromptProblem(torch.from_numpy(keys), torch.from_numpy(scores), loss)


def mixed_batch(loss="logistic") -> list[PromptProblem]:
    return [random_problem(n, T, D, seed, loss) for seed, (n, T) in enumerate(SIZES)]


def points(count: int, norm: float | None, seed: int) -> np.ndarray:
    """``count`` Gaussian points, scaled to ‖p‖ = norm when it is given."""
    P = np.random.default_rng(seed).normal(size=(count, D))
    return P if norm is None else P * (norm / np.linalg.norm(P, axis=1, keepdims=True))


def assert_matches_kernel(problems, P) -> None:
    """Every instance's batched (U, log‖∇L‖) is the kernel's."""
    U, log_norm = batched_field(BatchedProblems.of(problems), torch.from_numpy(P))
    assert not torch.isnan(U).any() and not torch.isnan(log_norm).any()
    for b, problem in enumerate(problems):
        u, lgn = problem.flow_field_np(P[b])
        gap = float(np.abs(U[b].numpy() - u).max())
        assert gap <= DIRECTION_TOL, f"instance {b}: max|U − u| = {gap:.2e} > {DIRECTION_TOL}"
        if lgn == -math.inf:
            assert float(log_norm[b]) == -math.inf, f"instance {b}: stationary, got {log_norm[b]}"
            continue
        rel = abs(float(log_norm[b]) - lgn) / max(1.0, abs(lgn))
        assert rel <= LOG_NORM_RTOL, f"instance {b}: log‖∇L‖ off by {rel:.2e} (kernel {lgn})"


@pytest.mark.parametrize("norm", [None, 10.0, 1e3, 1e4])
def test_field_is_the_kernel_on_mixed_sizes(norm):
    assert_matches_kernel(mixed_batch(), points(len(SIZES), norm, seed=int(norm or 0)))


@pytest.mark.parametrize("norm", [1e3, 1e4])
def test_field_is_the_kernel_along_the_svm_direction(norm):
    """At λ·p^mm every support token's weight is e^{−λ·margin/‖p^mm‖}, far below e^{−745}, and
    several compete: the direction is a sum of underflowing terms, kept only in log space."""
    att_svm = engine()[1]
    problems = mixed_batch()
    P = []
    for problem in problems:
        sol = att_svm(problem.keys, problem.scores.argmax(-1))
        x = np.asarray(sol.x) if sol.ok else np.ones(D)
        P.append(norm * x / np.linalg.norm(x) + 0.1)  # a small offset off the ray
    P = np.array(P)
    logs = [problem.flow_field_np(p)[1] for problem, p in zip(problems, P, strict=True)]
    assert min(logs) < -745, f"not saturated: log‖∇L‖ = {logs}"
    assert_matches_kernel(problems, P)


@pytest.mark.parametrize("loss", ["exponential", "correlation", "square"])
def test_field_is_the_kernel_for_every_compiled_loss(loss):
    assert_matches_kernel(mixed_batch(loss), points(len(SIZES), 3.0, seed=7))


def test_stationary_points_and_exact_ties():
    """Scores constant per input: ∇L ≡ 0 (U = 0, log‖∇L‖ = −inf, no NaN). Twin keys, tied
    scores and p = 0 (every logit tied: the top token is the lowest index) as the kernel."""
    rng = np.random.default_rng(3)
    flat = PromptProblem(rng.normal(size=(2, 3, D)), np.ones((2, 3)), "logistic")
    keys = rng.normal(size=(3, 4, D))
    keys[:, 1] = keys[:, 0]  # twins of token 0
    scores = rng.integers(-1, 2, size=(3, 4)).astype(np.float64)  # ties in score
    ties = PromptProblem(keys, scores, "logistic")
    problems = [flat, ties, random_problem(2, 5, D, 0)]
    for P in (np.zeros((3, D)), points(3, 1e3, seed=4)):
        assert_matches_kernel(problems, P)
    U, log_norm = batched_field(BatchedProblems.of(problems), torch.from_numpy(points(3, 1.0, 5)))
    assert float(log_norm[0]) == -math.inf and bool((U[0] == 0).all())


def test_a_token_tied_with_the_top_one_keeps_its_weight_when_saturated():
    """Token 0 ties token 1 (the top logit) in score and trails it by 5e-4 in logit; token 2
    trails by 2000. Token 0's weight is s_0·(−D) with D ≈ −e^{−2000}: it underflows unless D
    is summed relative to token 2's own logit, and it is the same size as token 2's term."""
    keys = np.array([[[1.0, 0.0], [1.0, 0.001], [-1.0, 0.0]]])
    problem = PromptProblem(keys, np.array([[1.0, 1.0, 0.0]]), "logistic")
    P = np.array([[1000.0, 0.5]])
    assert problem.flow_field_np(P[0])[1] < -1000  # saturated: e^{−2000}
    assert_matches_kernel([problem], P)


def test_padding_changes_nothing():
    """A problem alone and padded among bigger ones (more inputs, more tokens): same field."""
    small = random_problem(2, 3, D, 11)
    big = [random_problem(6, 9, D, 12), random_problem(4, 12, D, 13)]
    P = points(3, 1.0, seed=6)  # near 0, where a padded token's logit 0 would take mass
    U1, L1 = batched_field(BatchedProblems.of([small]), torch.from_numpy(P[:1]))
    U3, L3 = batched_field(BatchedProblems.of([small, *big]), torch.from_numpy(P))
    assert float((U1[0] - U3[0]).abs().max()) <= DIRECTION_TOL
    assert abs(float(L1[0] - L3[0])) <= LOG_NORM_RTOL * max(1.0, abs(float(L1[0])))


@pytest.mark.parametrize("norm", [0.0, 30.0])
def test_selection_leads_are_the_kernels(norm):
    """The smallest lead of a top logit over a runner-up with another key, twins (the very
    same key) not counted; at p = 0 every logit ties (lead 0)."""
    from models.flows import kernels

    keys = np.random.default_rng(5).normal(size=(2, 4, D))
    keys[:, 2] = keys[:, 0]  # twins
    problems = [*mixed_batch(), PromptProblem(keys, np.ones((2, 4)), "logistic")]
    P = points(len(problems), 1.0, seed=8) * norm
    leads = selection_leads(BatchedProblems.of(problems), torch.from_numpy(P))
    for b, problem in enumerate(problems):
        r = np.empty(problem.n, dtype=np.int64)
        expected = kernels.selection(
            problem._np[0], kernels.keys_by_coordinate(problem._np[0]), P[b], r, -math.inf
        )
        assert float(leads[b]) == pytest.approx(expected, rel=1e-12, abs=1e-12), f"instance {b}"


@pytest.mark.parametrize(
    "problems, match",
    [
        ([], "no problems"),
        ([random_problem(2, 3, 4, 0), random_problem(2, 3, 5, 0)], "key dimensions differ"),
        ([random_problem(2, 3, 4, 0), random_problem(2, 3, 4, 1, "exponential")], "losses differ"),
        (["not a problem"], "expected PromptProblem"),
    ],
)
def test_batches_that_cannot_be_padded_are_refused(problems, match):
    with pytest.raises(ValueError, match=match):
        BatchedProblems.of(problems)


def test_points_of_the_wrong_shape_are_refused():
    batch = BatchedProblems.of(mixed_batch())
    with pytest.raises(ValueError, match="P: expected shape"):
        batched_field(batch, torch.zeros(len(SIZES), D + 1))
    with pytest.raises(ValueError, match="transient: need"):
        transient(batch, rtol=0.0)


def engine():
    """(converge, att_svm): the CPU engine and its oracle, which import cvxpy."""
    pytest.importorskip("cvxpy")
    from models.flows.dynamics import converge
    from models.oracles.svm import att_svm

    return converge, att_svm


def agreement_problems() -> list[PromptProblem]:
    from benchmarks.test_cost_curve import sized_problem  # the cost curve's draw (uses att_svm)

    return [sized_problem(n, T, d, seed)[0] for seed, (n, T, d) in enumerate(AGREEMENT_SIZES)]


def assert_same_verdicts(batched, alone) -> None:
    for b, (got, ref) in enumerate(zip(batched, alone, strict=True)):
        assert got.status == ref.status, f"instance {b}: {got.status} vs {ref.status}"
        assert (got.selected == ref.selected).all(), f"instance {b}: selections differ"
        if ref.converged:
            assert got.one_minus_cos <= TARGET, f"instance {b}: 1 − cos = {got.one_minus_cos}"


@pytest.mark.parametrize("method", ["dp54", "bs32"])
def test_converge_many_reaches_the_engines_verdicts(method):
    converge = engine()[0]
    problems = agreement_problems()
    alone = [converge(problem, target=TARGET) for problem in problems]
    assert_same_verdicts(converge_many(problems, target=TARGET, method=method), alone)


def test_undecided_transients_are_handed_off_as_they_are():
    """A step budget of 1 leaves every selection unread, and a flat problem is stationary:
    each is still handed to the engine, which alone gives the verdict."""
    converge = engine()[0]
    problems = [
        *agreement_problems()[:2],
        PromptProblem(np.ones((1, 2, 6)), np.ones((1, 2)), "logistic"),
    ]
    run = transient(BatchedProblems.of(problems), max_steps=1)
    assert run.reasons == ["step budget", "step budget", "stationary point"]
    assert not run.ready.any()
    calls = []
    outcomes = converge_many(
        problems, target=TARGET, max_transient_steps=1, progress=lambda *a: calls.append(a)
    )
    assert_same_verdicts(outcomes, [converge(problem, target=TARGET) for problem in problems])
    assert calls, "the progress callback was never called"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_the_same_on_cuda(monkeypatch):
    monkeypatch.setenv(device_module.DEVICE_ENV, "cuda")
    problems = mixed_batch()
    P = torch.from_numpy(points(len(problems), 1e3, seed=9))
    batch = BatchedProblems.of(problems)
    assert batch.device.type == "cuda"
    U, log_norm = batched_field(batch, P)
    U0, L0 = batched_field(BatchedProblems.of(problems, device="cpu"), P)
    assert float((U.cpu() - U0).abs().max()) <= DIRECTION_TOL
    assert float((log_norm.cpu() - L0).abs().max()) <= LOG_NORM_RTOL * float(L0.abs().max())
    converge = engine()[0]
    problems = agreement_problems()
    alone = [converge(problem, target=TARGET) for problem in problems]
    assert_same_verdicts(converge_many(problems, target=TARGET), alone)
