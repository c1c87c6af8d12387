"""`python -m theorems check` on cross-attention instances (docs/instances.md, "cross").

What the answers are checked against is computed here from the printed matrices, not taken
from the code that printed them: the SVMs' constraints at the printed selection, each SVM
beating the other in its own norm, the correlations recomputed from the printed W's.
"""

import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from models.check import cross_predict
from strategies.instances import CrossInstance
from tests.mutmut_aware import cache_key, cached
from tests.test_cli import changed
from theorems.framework import cli, instances

REPO_ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = REPO_ROOT / "docs" / "examples" / "cross_visualization1.json"
#: Visualization instance 1 of the official code (spec tfsvm §4.4; n = 2, T = 3, d = 2, seed 1),
#: where the Frobenius and nuclear SVMs differ (cos 0.890): the discriminating instance.
VIS1 = json.loads(EXAMPLE.read_text(encoding="utf-8"))
#: Slack of an SVM's constraints (spec tfsvm §7: certified margin ≥ 1 − 1e-6).
MARGIN_TOL = 1e-6


def official_instance(seed: int, n: int = 3, T: int = 4, d: int = 4) -> dict:
    """The official generator (spec tfsvm §3.1): tokens, queries and head on the unit sphere."""
    g = torch.Generator().manual_seed(seed)
    X = torch.randn(n, T, d, generator=g, dtype=torch.float64)
    X /= X.norm(dim=-1, keepdim=True)
    Z = torch.randn(n, d, generator=g, dtype=torch.float64)
    Z /= Z.norm(dim=-1, keepdim=True)
    v = torch.randn(d, generator=g, dtype=torch.float64)
    v /= v.norm()
    y = torch.where(torch.randn(n, generator=g) > 0, 1, -1)
    return {"model": "cross", "X": X.tolist(), "Z": Z.tolist(), "y": y.tolist(), "v": v.tolist()}


OFFICIAL = official_instance(seed=0)


def run_check(tmp_path, capsys, doc) -> tuple[int, dict | None, str]:
    path = tmp_path / "instance.json"
    path.write_text(json.dumps(doc))
    code = cli.main(["check", str(path)])
    captured = capsys.readouterr()
    return code, (json.loads(captured.out) if code == 0 else None), captured.err


_CACHE: dict[str, dict] = {}


@pytest.fixture
def answer(tmp_path, capsys):
    """The CLI's answer for a document (each document is checked once per session and per
    setting of the run's cap and tolerance)."""

    def get(doc):
        settings = (cross_predict.MAX_STEPS, cross_predict.SETTLE_TOL)

        def compute():
            code, out, err = run_check(tmp_path, capsys, doc)
            assert code == 0, err
            return out

        return cached(cache_key(doc, settings), compute, _CACHE)

    return get


def margins(doc, W, alpha) -> np.ndarray:
    """(x_{iα_i} − x_it)ᵀ W z_i for every t ≠ α_i, from the instance file and a printed W."""
    X, Z, W = np.array(doc["X"]), np.array(doc["Z"]), np.array(W)
    logits = np.einsum("ita,ab,ib->it", X, W, Z)
    n, T = logits.shape
    gaps = logits[np.arange(n), alpha][:, None] - logits
    return gaps[np.arange(T)[None, :] != np.asarray(alpha)[:, None]]


def corr(A, B) -> float:
    A, B = np.asarray(A), np.asarray(B)
    return float(np.sum(A * B) / (np.linalg.norm(A) * np.linalg.norm(B)))


def nuclear(W) -> float:
    return float(np.linalg.svd(np.asarray(W), compute_uv=False).sum())


def test_w_on_an_official_instance(answer):
    """The trained W's direction is the Frobenius SVM's; both SVMs are feasible and each is the
    smaller in its own norm; every printed number is consistent with the printed matrices."""
    out = answer(OFFICIAL)
    n, T, d = np.array(OFFICIAL["X"]).shape
    assert out["model"] == "cross" and out["param"] == "W"
    assert out["training"]["status"] == "converged", out["training"]["reason"]
    alpha = out["selected"]
    assert len(alpha) == n and all(0 <= a < T for a in alpha)
    scores = np.array(OFFICIAL["y"])[:, None] * (np.array(OFFICIAL["X"]) @ OFFICIAL["v"])
    assert out["opt"] == scores.argmax(axis=1).tolist()
    fro, nuc = out["svm_fro"], out["svm_nuc"]
    for svm in (fro, nuc):
        assert svm["status"] == "optimal" and svm["alpha"] == alpha
        assert margins(OFFICIAL, svm["W"], alpha).min() >= 1 - MARGIN_TOL
        assert 1 <= svm["rank"] <= min(n, d)
    assert math.isclose(fro["norm"], np.linalg.norm(fro["W"]), rel_tol=1e-9)
    assert math.isclose(nuc["norm"], nuclear(nuc["W"]), rel_tol=1e-9)
    assert fro["norm"] <= np.linalg.norm(nuc["W"]) * (1 + 1e-6)  # min ‖·‖_F over one set
    assert nuc["norm"] <= nuclear(fro["W"]) * (1 + 1e-6)  # min ‖·‖_* over the same set
    assert out["corr_fro"] >= 0.999
    assert math.isclose(out["corr_fro"], corr(out["training"]["W"], fro["W"]), rel_tol=1e-12)
    assert math.isclose(out["corr_nuc"], corr(out["training"]["W"], nuc["W"]), rel_tol=1e-12)
    assert out["seconds"] > 0
    assert "svm_lp" not in out and "corr_lp" not in out


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_each_parametrisation_prefers_its_own_svm(answer, param):
    """Visualization instance 1 (spec §4.4: own ≥ 0.997, other ≤ 0.95): W-training aligns with
    the Frobenius SVM, (K, Q)-training with the nuclear SVM."""
    out = answer(changed(VIS1, param=param))
    own, other = ("corr_fro", "corr_nuc") if param == "W" else ("corr_nuc", "corr_fro")
    assert out[own] > out[other]
    assert out[own] >= 0.997 and out[other] <= 0.95, (out[own], out[other])
    assert out["svm_nuc"]["rank"] == 1 and out["svm_fro"]["rank"] == 2
    assert corr(out["svm_fro"]["W"], out["svm_nuc"]["W"]) <= 0.95  # the instance discriminates


def test_kq_says_which_recipe_and_when_it_settled(answer):
    out = answer(changed(VIS1, param="KQ"))
    training = out["training"]
    assert training["status"] == "settled", training["reason"]
    assert "machine epsilon" in training["recipe"] and "seed" in training["init"]
    steps = [h["steps"] for h in training["history"]]
    assert steps[0] == cross_predict.FIRST_STEPS and steps[-1] == training["steps"]
    assert all(b == 2 * a for a, b in zip(steps, steps[1:], strict=False))
    last, before = training["history"][-1], training["history"][-2]
    assert abs(last["corr"] - before["corr"]) <= cross_predict.SETTLE_TOL
    assert last["corr"] == out["corr_nuc"]
    face = out["face_nuc"]  # the face metrics: corr_nuc reads one point of the face
    assert face["status"] == "optimal", face
    assert face["corr"] == face["corr_lower"] <= face["corr_upper"]
    assert face["corr"] >= out["corr_nuc"] - 1e-12  # the solver's point is a member
    assert face["corr_upper"] - face["corr"] <= 1e-6
    assert math.isclose(face["distance"], math.sqrt(1 - face["corr"] ** 2), abs_tol=1e-9)
    assert 0 < face["margin_ratio"] <= 1 + 1e-9  # ≤ 1: no direction beats the optimum
    # The λ = ε penalty (spec §6): once ‖∇L‖ < 2ε‖K‖ the step shrinks K and Q, so the iterate
    # hovers where the smallest logit gap is about log(1/ε) ≈ 36 (unpenalised: it grows ~1e5).
    gap = margins(VIS1, training["W"], out["selected"]).min()
    assert 30 <= gap <= 40, f"smallest logit gap {gap:.3g}, expected ≈ log(1/ε) = 36"


def test_p_adds_mirror_descent_and_the_lp_svm(answer):
    """With p, ℓp mirror descent from 0 and the ℓp SVM at its selection (spec §2.10)."""
    p = 1.75
    out = answer(changed(VIS1, param="W", p=p))
    lp, fro = out["svm_lp"], out["svm_fro"]
    assert lp["status"] == "optimal" and lp["p"] == p
    assert lp["alpha"] == out["training_lp"]["history"][-1]["selected"]
    assert margins(VIS1, lp["W"], lp["alpha"]).min() >= 1 - MARGIN_TOL

    def lp_norm(W):
        return float(np.sum(np.abs(np.asarray(W)) ** p) ** (1 / p))

    assert math.isclose(lp["norm"], lp_norm(lp["W"]), rel_tol=1e-9)
    if lp["alpha"] == fro["alpha"]:
        assert lp["norm"] <= lp_norm(fro["W"]) * (1 + 1e-6)
    assert out["corr_lp"] >= 0.999
    assert math.isclose(out["corr_lp"], corr(out["training_lp"]["W"], lp["W"]), rel_tol=1e-12)
    assert out["training_lp"]["status"] == "settled"
    assert {"corr_fro", "corr_nuc", "svm_fro", "svm_nuc"} <= set(out)


def test_a_correlation_still_moving_at_the_cap_is_inconclusive(answer, monkeypatch):
    """ℓ1.75 mirror descent moves its correlation by 5.5e-5 from 2000 to 4000 steps, at one
    saturated selection: settled at SETTLE_TOL = 1e-4, inconclusive at 1e-6 (cap 4000)."""
    monkeypatch.setattr(cross_predict, "MAX_STEPS", 4000)
    monkeypatch.setattr(cross_predict, "SETTLE_TOL", 1e-6)
    out = answer(changed(VIS1, param="W", p=1.75))
    training = out["training_lp"]
    before, last = training["history"]
    assert max(before["max_other_prob"], last["max_other_prob"]) <= cross_predict.SELECT_TOL
    assert abs(last["corr"] - before["corr"]) > 1e-6
    assert training["status"] == "inconclusive"
    assert "not settled at the cap of 4000 steps: corr still moved by" in training["reason"]
    assert out["corr_lp"] == last["corr"]


def test_an_unsaturated_selection_is_inconclusive(answer, monkeypatch):
    """ℓ3 mirror descent grows W slowly (spec §4.5: p = 3 needs ~10× more steps): at 4000
    steps other tokens still hold ~0.14 of the attention, so nothing is settled there."""
    monkeypatch.setattr(cross_predict, "MAX_STEPS", 4000)
    out = answer(changed(VIS1, param="W", p=3))
    training = out["training_lp"]
    assert training["history"][-1]["max_other_prob"] > cross_predict.SELECT_TOL
    assert training["status"] == "inconclusive"
    assert "the selection is not saturated" in training["reason"]
    assert out["corr_lp"] == training["history"][-1]["corr"] and out["corr_lp"] < 1


@pytest.mark.parametrize("param", ["W", "KQ"])
def test_an_infeasible_selection_is_reported_not_raised(answer, param):
    """Two identical tokens in input 0: the SVM of any selection that keeps them apart is
    infeasible (a constraint 0 ≥ 1); the answer says so, with no correlation. The W flow
    converges to the sharing limit (the twins keep one logit for ever; their SVM has no row
    between them), and says that it is not W^mm of the selection; (K, Q)-NGD has no such
    limit and reports the infeasible SVM."""
    doc = changed(VIS1, X=[[[1.0, 0.0], [1.0, 0.0]], [[0.0, 1.0], [0.5, 0.5]]], param=param, p=2)
    out = answer(doc)
    for key in ("svm_fro", "svm_nuc", "svm_lp"):
        assert out[key]["status"] == "infeasible" and out[key]["W"] is None, out[key]
        assert out[key]["reason"]
    assert out["corr_fro"] is None and out["corr_nuc"] is None and out["corr_lp"] is None
    if param == "W":
        assert out["training"]["status"] == "converged"
        assert "tie-sharing SVM" in out["training"]["reason"]
        assert "has the selected token's very key" in out["training"]["reason"]
    else:
        assert out["training"]["status"] == "infeasible"
    if param == "KQ":
        face = out["face_nuc"]
        assert face["status"] == "inconclusive" and face["reason"]
        assert face["corr"] is None and face["corr_lower"] is None and face["distance"] is None
    else:
        assert "face_nuc" not in out


BAD = [
    # (instance, field named in the message, a fragment of the message)
    (changed(VIS1, Z=[[1.0, 0.0]]), "Z", "expected shape [2, 2]"),
    (changed(VIS1, Z=[[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]]), "Z", "expected shape [2, 2]"),
    (changed(VIS1, Z=...), "Z", "missing"),
    (changed(VIS1, Z=[[float("nan"), 0.0], [0.0, 1.0]]), "Z", "non-finite value nan at Z[0][0]"),
    (changed(VIS1, X=[[[float("inf"), 0.0]]]), "X", "non-finite"),
    (changed(VIS1, X=...), "X", "missing"),
    (changed(VIS1, param="K"), "param", "unknown parametrisation 'K'; choose W or KQ"),
    (changed(VIS1, param=["W"]), "param", "unknown parametrisation"),
    (changed(VIS1, p=1), "p", "finite number > 1, got 1"),
    (changed(VIS1, p=0.5), "p", "> 1"),
    (changed(VIS1, p=-3), "p", "> 1"),
    (changed(VIS1, p="2"), "p", "must be a number, got a string"),
    (changed(VIS1, p=True), "p", "must be a number, got a boolean"),
    (changed(VIS1, y=[1, 0]), "y", "labels must be ±1, got 0 at index 1"),
    (changed(VIS1, y=[1, -1, 1]), "y", "expected 2 labels"),
    (changed(VIS1, v=[1.0]), "v", "expected shape [2]"),
    (changed(VIS1, loss="hinge"), "loss", "unknown loss 'hinge'"),
    (changed(VIS1, W0=[[0.0, 0.0], [0.0, 0.0]]), "W0", 'unknown field for model "cross"'),
]


@pytest.mark.parametrize("doc, field, fragment", BAD)
def test_each_bad_field_is_one_line_naming_it(tmp_path, capsys, doc, field, fragment):
    code, out, err = run_check(tmp_path, capsys, doc)
    assert code == 2 and out is None
    assert err.count("\n") == 1 and err.startswith(f'error: field "{field}": '), err
    assert fragment in err


def test_an_infinite_p_is_refused(tmp_path, capsys):
    text = json.dumps(VIS1)[:-1] + ', "p": Infinity}'  # what json.dumps writes for inf
    path = tmp_path / "instance.json"
    path.write_text(text)
    assert cli.main(["check", str(path)]) == 2
    assert capsys.readouterr().err == (
        'error: field "p": the ℓp exponent must be a finite number > 1, got inf\n'
    )


def test_load_instance_defaults_and_types():
    model, fields = instances.load_instance(changed(VIS1, param=..., loss=...))
    assert model == "cross" and fields["param"] == "W" and fields["loss"] == "logistic"
    assert fields["p"] is None and fields["Z"].shape == (2, 2)
    assert all(fields[k].dtype == torch.float64 for k in ("X", "Z", "y", "v"))
    _, fields = instances.load_instance(changed(VIS1, p=3))
    assert fields["p"] == 3.0 and isinstance(fields["p"], float)


def test_a_cross_instance_is_an_instance_file_and_a_saved_argument():
    """CrossInstance.to_json() is accepted by `check`; the replay store keeps the instance
    (with its meta) losslessly."""
    doc = changed(VIS1, param=..., loss=...)
    inst = CrossInstance(X=doc["X"], Z=doc["Z"], y=doc["y"], v=doc["v"], seed=3, meta={"k": 1})
    model, _ = instances.load_instance(json.loads(json.dumps(inst.to_json())))
    assert model == "cross"
    encoded = json.loads(json.dumps(instances.encode(inst)))
    back = instances.decode(encoded)
    assert isinstance(back, CrossInstance) and back.seed == 3 and back.meta == {"k": 1}
    assert torch.equal(back.X, inst.X) and torch.equal(back.Z, inst.Z)


def test_the_docs_describe_the_schema_and_its_example():
    """docs/instances.md names every cross field and output, and points at the example file."""
    text = (REPO_ROOT / "docs" / "instances.md").read_text(encoding="utf-8")
    section = text.split("## Cross-attention")[1].split("\n## ")[0]
    for name in instances.INSTANCE_FIELDS["cross"]:
        assert f"`{name}`" in section, name
    for name in ("opt", "selected", "training", "svm_fro", "svm_nuc", "svm_lp", "corr_lp"):
        assert f"`{name}`" in section, name
    assert "docs/examples/cross_visualization1.json" in section
    assert instances.load_instance(EXAMPLE)[0] == "cross"
