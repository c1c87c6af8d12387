"""models.ntp.predict, the answers `check` gives for the two NTP schemas, field by field: every
field is the quantity docs/instances.md names, recomputed here from the model's own objects
(the GD run is deterministic, so it is rerun here and compared exactly), the progress stages are
the ones announced, and each status branch has its own reason.

The answers' closed forms (I1, I2, C12) are checked in tests/test_cli_ntp.py; here GD runs
``STEPS`` steps (``GD_STEPS`` is patched) so that every branch costs milliseconds."""

from __future__ import annotations

import math
import time

import numpy as np
import pytest

from models.ntp import predict
from models.ntp.attention import ntp_attention, smoothness_bound
from models.ntp.data import ntp_data
from models.ntp.finite import finite_component
from models.ntp.gd import gd
from models.ntp.linear import NTPSVM, Compatibility, linear_ntp
from models.ntp.qp import project
from models.ntp.svm import cyclic_subspace, graph_svm

STEPS = 40


@pytest.fixture(autouse=True)
def few_steps(monkeypatch):
    monkeypatch.setattr(predict, "GD_STEPS", STEPS)


def _timed(fn, *args):
    stages: list[str] = []
    t0 = time.perf_counter()
    out = fn(*args, stage=stages.append)
    return out, stages, time.perf_counter() - t0


def _assert_null_answer(out, model, fields, wall):
    """The answer that was not computed: exactly ``fields``, status "inconclusive", every
    computed field null, and the time it took."""
    assert tuple(out) == fields
    assert out["model"] == model and out["status"] == "inconclusive"
    assert all(out[k] is None for k in fields if k not in ("model", "status", "reason", "seconds"))
    assert 0.0 <= out["seconds"] <= wall


# ----------------------------------------------------------------------- the linear decoder

COMPATIBLE_SEPARABLE = (
    [[1.0, 0.0], [0.0, 1.0]],
    [[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.3, 0.7]],
    [0.5, 0.5],
)
# spec ntp §3 C12: two contexts share an embedding with different next-token distributions.
INCOMPATIBLE_SEPARABLE = (
    [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    [[0.5, 0.5, 0.0, 0.0], [0.8, 0.2, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]],
    [1 / 3, 1 / 3, 1 / 3],
)
# Two contexts h and −h with disjoint supports {0, 1}, {1, 2}... in one dimension the support
# logits cannot all beat the rest: token 1 is in both supports, token 0 must beat 2 for h and
# lose to it for −h while the equal log-odds pin the in-support differences: compatible, not
# separable (the NTP-SVM has no solution).
COMPATIBLE_NOT_SEPARABLE = (
    [[1.0, -1.0]],
    [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]],
    [0.5, 0.5],
)


def _linear_expected(H, P, pi):
    problem = linear_ntp(H, P, pi)
    compat, svm = problem.compatibility(), problem.ntp_svm()
    run = gd(problem, np.zeros((problem.vocab, problem.dim)), lr=predict.LINEAR_LR, steps=STEPS)
    return problem, compat, svm, run.last


def test_a_compatible_separable_linear_answer_is_every_documented_quantity():
    H, P, pi = COMPATIBLE_SEPARABLE
    out, stages, wall = _timed(predict.predict_ntp_linear, H, P, pi)
    problem, compat, svm, W = _linear_expected(H, P, pi)
    assert tuple(out) == predict.LINEAR_FIELDS
    assert stages == [
        "solving the NTP-SVM",
        "following gradient flow on W (the engine)",
        f"running GD for {STEPS} steps (η = 0.5)",
    ]
    assert out["model"] == "ntp-linear" and out["status"] == "ok"
    assert out["entropy"] == problem.entropy() and out["dim_F"] == problem.dim_F
    assert out["compatible"] is True and out["compatibility_residual"] == compat.residual
    assert out["W_star"] == compat.W_star.tolist()
    assert out["separable"] is True
    assert out["ntp_svm"] == {
        "status": svm.status,
        "reason": svm.solution.reason,
        "W": svm.W.tolist(),
        "kkt": svm.solution.certificate.residuals,
        "vacuous": False,
    }
    assert out["gd"] == {
        "steps": STEPS,
        "lr": 0.5,
        "stopped": None,
        "excess_loss": problem.excess_loss(W),
        "W_norm": float(np.linalg.norm(W)),
        "one_minus_corr": predict._one_minus_corr(W - compat.W_star, svm.W),
        "fin_error": float(np.linalg.norm(problem.project_F(W) - compat.W_star)),
    }
    assert 0.0 < out["gd"]["one_minus_corr"] < 1.0 and out["gd"]["fin_error"] > 0.0
    assert out["reason"] == (
        "compatible and separable: CE → H, P_F W(k) → W*, W(k)/‖W(k)‖ → W^mm/‖W^mm‖"
    )
    # the engine's limit of gradient flow, against the closed forms of this instance (H = I,
    # logit of token z at context j = W[z, j]): W* = log(7/3)/2 · (e_3 − e_2) e_1ᵀ; W^mm has
    # W[0, 0] = W[1, 0] = ½ = −W[2, 0] = −W[3, 0] and the opposite signs in column 1
    flow = out["flow"]
    assert tuple(flow) == predict.LINEAR_FLOW_FIELDS
    assert flow["kind"] == flow["status"] == "shared"
    w_mm = np.array([[1.0, -1.0], [1.0, -1.0], [-1.0, 1.0], [-1.0, 1.0]]) / math.sqrt(8)
    np.testing.assert_allclose(flow["W_dir"], w_mm, atol=2e-6)
    w_star = np.zeros((4, 2))
    w_star[3, 1], w_star[2, 1] = math.log(7 / 3) / 2, -math.log(7 / 3) / 2
    np.testing.assert_allclose(flow["W_fin"], w_star, atol=1e-9)
    assert flow["one_minus_cos_to_ntp_svm"] <= 1e-9 and flow["fin_error"] <= 1e-9
    assert "shared-mass limit" in flow["reason"] and 0 < flow["seconds"] <= out["seconds"]
    assert 0.0 <= out["seconds"] <= wall


@pytest.mark.parametrize(
    ("instance", "missing"),
    [(INCOMPATIBLE_SEPARABLE, "compatible"), (COMPATIBLE_NOT_SEPARABLE, "separable")],
)
def test_a_linear_instance_outside_the_premise_says_which_part_fails(instance, missing):
    out, _, _ = _timed(predict.predict_ntp_linear, *instance)
    problem, compat, svm, W = _linear_expected(*instance)
    assert out["status"] == "ok"
    assert out["reason"] == f"not {missing}: the theorems' premise fails; CE need not reach H"
    assert out["gd"]["one_minus_corr"] is None
    if compat.compatible:
        assert out["separable"] is False and out["W_star"] == compat.W_star.tolist()
        assert out["gd"]["fin_error"] == float(np.linalg.norm(problem.project_F(W) - compat.W_star))
    else:
        assert out["W_star"] is None and out["gd"]["fin_error"] is None
        assert out["separable"] is True


def test_neither_compatible_nor_separable_names_both(monkeypatch):
    class Neither:
        def __init__(self, problem):
            self._p = problem

        def __getattr__(self, name):
            return getattr(self._p, name)

        def compatibility(self):
            return Compatibility(False, None, 1.0)

    H, P, pi = COMPATIBLE_NOT_SEPARABLE
    monkeypatch.setattr(predict, "linear_ntp", lambda *a: Neither(linear_ntp(*a)))
    out = predict.predict_ntp_linear(H, P, pi)
    assert out["reason"] == (
        "not compatible and not separable: the theorems' premise fails; CE need not reach H"
    )


def test_an_undecided_ntp_svm_is_inconclusive_without_gd(monkeypatch):
    H, P, pi = COMPATIBLE_SEPARABLE
    real = linear_ntp(H, P, pi)
    svm = real.ntp_svm()
    undecided = NTPSVM("solver_error", None, svm.solution, False)
    monkeypatch.setattr(type(real), "ntp_svm", lambda self, **kw: undecided)
    out, stages, wall = _timed(predict.predict_ntp_linear, H, P, pi)
    assert out["separable"] is None
    assert out["status"] == "inconclusive" and out["reason"] == svm.solution.reason != ""
    assert out["gd"] is None and stages == [
        "solving the NTP-SVM",
        "following gradient flow on W (the engine)",
    ]
    assert out["flow"]["kind"] == "shared"  # the engine follows the flow without the oracle
    assert 0.0 <= out["seconds"] <= wall


def test_a_linear_instance_float64_does_not_represent_is_answered_null():
    H = [[1e200, 0.0], [0.0, 1.0]]
    P = [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]]
    out, stages, wall = _timed(predict.predict_ntp_linear, H, P, [0.5, 0.5])
    assert stages == []
    _assert_null_answer(out, "ntp-linear", predict.LINEAR_FIELDS, wall)
    assert out["reason"].startswith("precision: context 0 reaches 1.0e+200")


# ------------------------------------------------------------------------ self-attention NTP

I1 = (np.eye(4).tolist(), [[1, 2, 3, 0], [2, 3, 0], [3, 0]], [1, 2, 3])


def _i2():
    E = np.random.default_rng(0).standard_normal((5, 6))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    seqs = [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]]
    return E.tolist(), seqs, [1, 1, 2, 3, 3, 2, 2]


def _attention_expected(E, seqs, labels):
    data = ntp_data(E, seqs, labels)
    svm, fin = graph_svm(data), finite_component(data)
    model = ntp_attention(data)
    lr = 1.0 / smoothness_bound(data)
    W = gd(model, np.zeros((data.dim, data.dim)), lr=lr, steps=STEPS).last
    return data, svm, fin, model, lr, W


@pytest.mark.parametrize("instance", [I1, _i2()], ids=["I1-acyclic", "I2-cyclic"])
def test_an_attention_answer_is_every_documented_quantity(instance):
    out, stages, wall = _timed(predict.predict_ntp, *instance)
    data, svm, fin, model, lr, W = _attention_expected(*instance)
    assert tuple(out) == predict.NTP_FIELDS
    assert stages == [
        "solving the graph-SVM",
        "computing the finite part W_fin (Newton on S_cyc)",
        f"running GD for {STEPS} steps (η = 1/L_bound)",
    ]
    assert out["model"] == "ntp" and out["status"] == "ok"
    assert out["reason"] == "W(k) ≈ R·W_svm + W_fin: see gd for the distances after the run"
    assert out["graph_svm"]["W"] == svm.W.tolist() and out["graph_svm"]["vacuous"] is False
    assert out["graph_svm"]["status"] == svm.status == "optimal"
    assert out["W_fin"] == fin.W.tolist() and out["loss_floor"] == fin.loss
    assert out["finite"] == {
        "converged": True,
        "gradient_norm": fin.gradient_norm,
        "newton_steps": fin.steps,
        "reason": fin.reason,
    }
    basis = cyclic_subspace(data)
    fin_error = float(np.linalg.norm(project(basis, W) - fin.W)) if basis.shape[0] else 0.0
    assert out["gd"] == {
        "steps": STEPS,
        "lr": lr,
        "stopped": None,
        "one_minus_corr": predict._one_minus_corr(W, svm.W),
        "fin_error": fin_error,
        "excess_loss": model.loss(W) - fin.loss,
        "W_norm": float(np.linalg.norm(W)),
    }
    assert out["gd"]["excess_loss"] > 0.0 and out["gd"]["W_norm"] > 0.0
    assert 0.0 <= out["seconds"] <= wall


def test_the_attention_components_are_each_querys_sccs():
    E, seqs, labels = _i2()
    out = predict.predict_ntp(E, seqs, labels)
    # query 0: 1 ⇄ 2 (labels of the same context), both above 3 and 0, and 3 above 4 and 0;
    # query 4: 2 above 1, 3, 4 and 3 above 1, 4, no cycle.
    assert out["components"] == [
        {"query": 0, "sccs": [[1, 2], [3], [0], [4]], "cyclic": True},
        {"query": 4, "sccs": [[0], [2], [3], [1], [4]], "cyclic": False},
    ]


def test_label_shares_are_the_split_inside_each_labels_scc():
    E, seqs, labels = _i2()
    out = predict.predict_ntp(E, seqs, labels)
    shares = out["label_shares"]
    assert {tuple(s["tokens"]) for s in shares} == {(1, 2)}
    assert sorted({s["sample"] for s in shares}) == [0, 1, 2]
    for s in shares:
        assert s["shares"] == pytest.approx([2 / 3, 1 / 3], abs=1e-12)
        assert sum(s["shares"]) == pytest.approx(1.0, abs=1e-15)


def test_a_graph_with_no_edge_leaving_an_scc_is_vacuous_and_reaches_w_fin():
    """The context [1, 0] followed once by 1 and once by 0: tokens 0 and 1 form one SCC that
    holds every token of the sequence, so W_svm = 0 and the loss floor is attained by W_fin."""
    E = np.eye(2).tolist()
    out, stages, _ = _timed(predict.predict_ntp, E, [[1, 0], [1, 0]], [1, 0])
    assert out["graph_svm"]["vacuous"] is True and out["status"] == "ok"
    assert out["reason"] == (
        "no edge leaves an SCC: W_svm = 0 and W(k) → W_fin (the loss floor is attained)"
    )
    assert out["gd"]["one_minus_corr"] is None and len(stages) == 3


def test_an_infeasible_graph_svm_skips_gd_and_says_why():
    out, stages, wall = _timed(
        predict.predict_ntp, [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [[0, 1, 2]], [0]
    )
    assert out["status"] == "infeasible" and out["gd"] is None
    assert out["reason"] == out["graph_svm"]["reason"] and "Farkas" in out["reason"]
    assert len(stages) == 2 and 0.0 <= out["seconds"] <= wall


def test_an_unconverged_finite_part_is_inconclusive(monkeypatch):
    E, seqs, labels = _i2()
    real = finite_component(ntp_data(E, seqs, labels))

    class Stuck:
        def __getattr__(self, name):
            return getattr(real, name)

        converged = False
        reason = "Newton did not converge (scripted)"

    monkeypatch.setattr(predict, "finite_component", lambda data: Stuck())
    out = predict.predict_ntp(E, seqs, labels)
    assert out["status"] == "inconclusive" and out["gd"] is None
    assert out["reason"] == "W_fin: Newton did not converge (scripted)"
    assert out["finite"]["converged"] is False


def test_an_attention_instance_float64_does_not_represent_is_answered_null():
    E = (1e300 * np.eye(4)).tolist()
    out, stages, wall = _timed(predict.predict_ntp, E, I1[1], I1[2])
    assert stages == []
    _assert_null_answer(out, "ntp", predict.NTP_FIELDS, wall)
    assert out["reason"].startswith("precision:")


def test_one_minus_corr_is_undefined_at_zero():
    assert predict._one_minus_corr(np.zeros((2, 2)), np.eye(2)) is None
    assert predict._one_minus_corr(np.eye(2), np.eye(2)) == pytest.approx(0.0, abs=1e-15)
    assert predict._one_minus_corr(np.eye(2), -np.eye(2)) == pytest.approx(2.0, abs=1e-15)
