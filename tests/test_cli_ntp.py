"""`python -m theorems check` on the two NTP schemas (docs/instances.md): answers checked
against the spec's closed forms (ntp.md §2.3 I1, §2.4 I2, §3 C12), and bad input answered with
one line naming the field (exit 2)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from strategies.ntp_attention import official_ntp_data
from theorems.framework import cli

I1 = {
    "model": "ntp",
    "embeddings": np.eye(4).tolist(),
    "sequences": [[1, 2, 3, 0], [2, 3, 0], [3, 0]],
    "labels": [1, 2, 3],
}


def _official(seed: int = 0, graphs: str = "cyclic") -> dict:
    """The official generator's draw (spec ntp §4.1: n = 6 sequences of T = 4 distinct tokens
    of K = 6 unit vectors in R^8): one sequence length, so the engine follows its flow."""
    E, sequences, labels, _ = official_ntp_data(seed, graphs=graphs)
    return {"model": "ntp", "embeddings": E.tolist(), "sequences": sequences, "labels": labels}


#: An official cyclic draw (some query graph has a cycle): the engine's limit is "shared".
OFFICIAL_CYCLIC = _official(0, "cyclic")


def _i2() -> dict:
    E = np.random.default_rng(0).standard_normal((5, 6))
    E /= np.linalg.norm(E, axis=1, keepdims=True)
    return {
        "model": "ntp",
        "embeddings": E.tolist(),
        "sequences": [[1, 2, 3, 0]] * 3 + [[3, 4, 0], [3, 1, 4], [1, 2, 4], [2, 3, 4]],
        "labels": [1, 1, 2, 3, 3, 2, 2],
    }


def _check(tmp_path, doc: dict) -> dict:
    path, out = tmp_path / "instance.json", tmp_path / "answer.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert cli.main(["check", str(path), "--out", str(out)]) == 0
    return json.loads(out.read_text(encoding="utf-8"))


def test_the_acyclic_chain_i1_has_the_closed_form_graph_svm(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    answer = _check(tmp_path, I1)
    assert answer["status"] == "ok"
    (query,) = answer["components"]
    assert query["query"] == 0 and not query["cyclic"]
    W = np.array(answer["graph_svm"]["W"])
    expected = np.zeros((4, 4))
    expected[:, 0] = [-1.5, 1.5, 0.5, -0.5]  # u_0 = the min-norm level vector (spec §2.3)
    assert np.abs(W - expected).max() <= 1e-8
    assert max(answer["graph_svm"]["kkt"].values()) <= 1e-8
    assert answer["loss_floor"] == 0.0 and answer["label_shares"] == []
    assert answer["gd"]["one_minus_corr"] <= 1e-3  # acyclic: fast (spec §2.6: 1.5e-5 at 1e5)


def test_i2_has_the_log_odds_finite_part_and_its_floor(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    doc = _i2()
    answer = _check(tmp_path, doc)
    assert answer["status"] == "ok"
    sccs = {c["query"]: c["sccs"] for c in answer["components"]}
    assert [1, 2] in sccs[0] and all(len(c) == 1 for c in sccs[4])
    x = np.array(doc["embeddings"])
    diff = x[1] - x[2]
    expected = math.log(2) * np.outer(diff, x[0]) / (diff @ diff)  # spec §2.4
    assert np.abs(np.array(answer["W_fin"]) - expected).max() <= 1e-12
    assert answer["loss_floor"] == pytest.approx((2 * math.log(1.5) + math.log(3)) / 7, abs=1e-12)
    shares = {tuple(s["tokens"]): s["shares"] for s in answer["label_shares"]}
    assert shares[(1, 2)] == pytest.approx([2 / 3, 1 / 3], abs=1e-12)
    gd = answer["gd"]
    assert gd["one_minus_corr"] <= 1e-1 and gd["fin_error"] <= 3e-2  # spec §6.2 at 1e4


def test_a_separable_but_incompatible_linear_instance_says_so(tmp_path, monkeypatch):
    # spec §3 C12: two contexts share an embedding with different distributions on {0, 1}.
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    doc = {
        "model": "ntp-linear",
        "H": [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
        "P": [[0.5, 0.5, 0.0, 0.0], [0.8, 0.2, 0.0, 0.0], [0.0, 0.0, 0.5, 0.5]],
        "pi": [1 / 3, 1 / 3, 1 / 3],
    }
    answer = _check(tmp_path, doc)
    assert answer["separable"] is True and answer["compatible"] is False
    assert answer["W_star"] is None and answer["compatibility_residual"] > 0.1
    assert max(answer["ntp_svm"]["kkt"].values()) <= 1e-8
    assert answer["gd"]["excess_loss"] > 0.03  # inf CE − H = Σ π KL(p_j ‖ p̄) = 0.0338 (C12)


BAD = [
    ({**I1, "labels": [1, 2, 1]}, "labels", "does not occur in sequences[2]"),
    ({**I1, "labels": [1, 2]}, "labels", "expected 3 token ids"),
    ({**I1, "sequences": [[1, 2, 3, 0], [2, 9, 0], [3, 0]]}, "sequences", "out of range [0, 4)"),
    ({**I1, "sequences": [[1, 2, 3, 0], [], [3, 0]]}, "sequences", "sequences[1] must be a"),
    ({**I1, "sequences": [[1, 2.5, 3, 0], [2, 3, 0], [3, 0]]}, "sequences", "integers"),
    (
        {"model": "ntp-linear", "H": [[1.0, 0.0]], "P": [[0.5, 0.6], [1.0, 0.0]], "pi": [1, 1]},
        "P",
        "row 0 sums to 1.1",
    ),
    (
        {"model": "ntp-linear", "H": [[1.0, 0.0]], "P": [[0.5, 0.5], [1.0, 0.0]], "pi": [1, 0]},
        "pi",
        "must be > 0",
    ),
    (
        {"model": "ntp-linear", "H": [[1.0, 0.0]], "P": [[0.5, 0.5]], "pi": [1]},
        "P",
        "expected 2 rows",
    ),
]


@pytest.mark.parametrize(("doc", "field", "fragment"), BAD)
def test_bad_ntp_input_is_one_line_naming_the_field(tmp_path, capsys, doc, field, fragment):
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    assert cli.main(["check", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and f'field "{field}"' in err and fragment in err, err


@pytest.mark.parametrize(
    ("scale", "fragment"),
    [(1e80, "beyond 1e+150"), (1e300, "overflow float64")],
)
def test_an_ntp_instance_float64_does_not_represent_is_inconclusive(
    tmp_path, monkeypatch, scale, fragment
):
    # Embeddings so large that the graph-SVM's squared rows overflow: no certificate of a
    # different instance, an answer "inconclusive" for precision with every field null.
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    answer = _check(tmp_path, {**I1, "embeddings": (scale * np.eye(4)).tolist()})
    assert answer["status"] == "inconclusive" and answer["reason"].startswith("precision:")
    assert fragment in answer["reason"], answer["reason"]
    assert answer["graph_svm"] is None and answer["W_fin"] is None


def test_two_tokens_float64_cannot_tell_apart_are_inconclusive(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    E = np.eye(4)
    E[2] = E[1] + np.array([0.0, 1e-15, 0.0, 0.0])  # x_2 − x_1 below 1e3·2^-52 of |x|
    answer = _check(tmp_path, {**I1, "embeddings": E.tolist()})
    assert answer["status"] == "inconclusive" and "below float64's resolution" in answer["reason"]


def test_a_linear_context_too_large_is_inconclusive(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    doc = {
        "model": "ntp-linear",
        "H": [[1e200, 0.0], [0.0, 1.0]],
        "P": [[0.5, 0.5, 0.0], [0.0, 0.5, 0.5]],
        "pi": [0.5, 0.5],
    }
    answer = _check(tmp_path, doc)
    assert answer["status"] == "inconclusive" and "context 0 reaches 1.0e+200" in answer["reason"]
    assert answer["ntp_svm"] is None and answer["separable"] is None


def test_an_ntp_instance_whose_graph_svm_has_no_solution_is_infeasible():
    """Tokens 0 and 1 share an embedding, but the label 0 must out-score token 1 for the query
    2: (x_0 − x_1)ᵀW x_2 = 0 ≥ 1 has no solution, a certified fact, not a failure."""
    from models.ntp.predict import predict_ntp

    out = predict_ntp([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [[0, 1, 2]], [0])
    assert out["graph_svm"]["status"] == "infeasible"
    assert out["status"] == "infeasible" and "Farkas" in out["reason"]


def test_a_compatible_separable_linear_instance_measures_gds_direction():
    """Compatible and separable: GD's W − W* is measured against W^mm (1 − corr small after
    10 000 steps), and P_F W against W*."""
    from models.ntp.predict import predict_ntp_linear

    out = predict_ntp_linear(
        [[1.0, 0.0], [0.0, 1.0]], [[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 0.3, 0.7]], [0.5, 0.5]
    )
    assert out["compatible"] and out["separable"] and not out["ntp_svm"]["vacuous"]
    assert out["status"] == "ok" and out["reason"].startswith("compatible and separable")
    assert 0 <= out["gd"]["one_minus_corr"] < 1e-3 and out["gd"]["fin_error"] < 1e-2


def _unit(A) -> np.ndarray:
    A = np.asarray(A, dtype=float)
    return A / np.linalg.norm(A)


def test_the_engine_follows_an_official_cyclic_instance_to_the_graph_svm_and_w_fin(
    tmp_path, monkeypatch
):
    """Cyclic graphs: the flow keeps each label's SCC sharing the mass, W = R·W_dir + W_fin,
    and the engine, reading W_dir and W_fin from the flow alone, gets the graph-SVM's direction
    and the priority graphs' W_fin (spec ntp §1.2)."""
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    answer = _check(tmp_path, OFFICIAL_CYCLIC)
    assert answer["status"] == "ok" and any(c["cyclic"] for c in answer["components"])
    flow = answer["flow"]
    assert flow["kind"] == "shared" and flow["status"] == "shared", flow["reason"]
    assert flow["reason"].startswith("converged to a shared-mass limit")
    W_dir = np.array(flow["W_dir"])
    assert W_dir.shape == (8, 8) and np.linalg.norm(W_dir) == pytest.approx(1.0, abs=1e-12)
    assert np.abs(W_dir - _unit(answer["graph_svm"]["W"])).max() <= 1e-8
    assert flow["one_minus_cos_to_graph_svm"] <= 1e-12
    W_fin = np.array(flow["W_fin"])
    assert np.abs(W_fin - np.array(answer["W_fin"])).max() <= 1e-8
    assert flow["fin_error"] == pytest.approx(np.linalg.norm(W_fin - answer["W_fin"]), abs=1e-15)
    assert flow["fin_error"] <= 1e-8 and flow["seconds"] > 0
    assert answer["gd"] is not None  # the measured run is still there


def test_the_engines_finite_part_is_the_log_odds_closed_form(tmp_path, monkeypatch):
    """I2's log-odds case with one sequence length: query 0's three samples [1, 2, 3, 0]
    labelled 1, 1, 2 make {1, 2} an SCC that keeps the mass 2 : 1, so W_fin =
    log 2·(x_1 − x_2)x_0ᵀ/‖x_1 − x_2‖² (spec §2.4), and the flow's own finite part is it;
    query 4's samples (labels 3, 3) add an acyclic graph."""
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    doc = _i2()
    doc["sequences"] = [[1, 2, 3, 0]] * 3 + [[3, 1, 2, 4], [2, 1, 3, 4]]
    doc["labels"] = [1, 1, 2, 3, 3]
    answer = _check(tmp_path, doc)
    flow = answer["flow"]
    assert flow["kind"] == "shared", flow["reason"]
    x = np.array(doc["embeddings"])
    diff = x[1] - x[2]
    expected = math.log(2) * np.outer(diff, x[0]) / (diff @ diff)
    assert np.abs(np.array(flow["W_fin"]) - expected).max() <= 1e-12
    assert flow["fin_error"] <= 1e-12
    assert np.abs(np.array(flow["W_dir"]) - _unit(answer["graph_svm"]["W"])).max() <= 1e-8


def test_the_engine_follows_an_official_acyclic_instance_to_the_graph_svm(tmp_path, monkeypatch):
    """Acyclic graphs: one token per sample, W_dir the SVM of that selection, which is the
    graph-SVM, and no finite part."""
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    answer = _check(tmp_path, _official(0, "acyclic"))
    assert not any(c["cyclic"] for c in answer["components"])
    flow = answer["flow"]
    assert flow["kind"] == "converged" and flow["status"] == "converged", flow["reason"]
    assert np.abs(np.array(flow["W_dir"]) - _unit(answer["graph_svm"]["W"])).max() <= 1e-8
    assert np.array(flow["W_fin"]).tolist() == np.zeros((8, 8)).tolist()
    assert flow["fin_error"] <= 1e-12 and flow["one_minus_cos_to_graph_svm"] <= 1e-12


def test_sequences_of_several_lengths_have_no_flow_but_say_why(tmp_path, monkeypatch):
    """I1's sequences have lengths 4, 3, 2: the engine's prompt view needs one T, so `flow`
    keeps its keys, null, with status inconclusive and the reason; the rest is computed."""
    monkeypatch.setenv("ATTN_PROGRESS", "0")
    answer = _check(tmp_path, I1)
    flow = answer["flow"]
    assert flow["status"] == "inconclusive"
    assert flow["reason"].startswith("sequences: ") and "lengths [2, 3, 4]" in flow["reason"]
    computed = {"status", "reason", "seconds"}
    assert all(flow[k] is None for k in flow if k not in computed), flow
    assert answer["status"] == "ok" and answer["gd"] is not None


def test_the_flow_is_followed_where_the_graph_svm_has_no_solution():
    """The infeasible instance above: tokens 0 and 1 share an embedding, so no W gives the
    label a margin over token 1, but the flow still converges in direction (the two positions
    are twins and share the mass for ever); flow says so, with nothing to compare it to."""
    from models.ntp.predict import predict_ntp

    out = predict_ntp([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], [[0, 1, 2]], [0])
    assert out["status"] == "infeasible" and out["gd"] is None
    flow = out["flow"]
    assert flow["kind"] == "converged", flow["reason"]
    assert flow["one_minus_cos_to_graph_svm"] is None
    # W_dir raises both twins' logit over token 2's, (x_0 − x_2)ᵀ W x_2 > 0
    x = np.array([[1.0, 0.0], [0.0, 1.0]])
    assert (x[0] - x[1]) @ np.array(flow["W_dir"]) @ x[1] > 0


def test_the_answers_that_compute_nothing_carry_a_null_flow(tmp_path, monkeypatch):
    from models.ntp.predict import NTP_FIELDS, inconclusive_answer

    monkeypatch.setenv("ATTN_PROGRESS", "0")
    answer = _check(tmp_path, {**I1, "embeddings": (1e300 * np.eye(4)).tolist()})
    assert answer["reason"].startswith("precision:") and answer["flow"] is None
    budget = inconclusive_answer("ntp", {}, "budget: test", 0.0)
    assert "flow" in NTP_FIELDS and budget["flow"] is None
