"""What `python -m theorems check` answers for the two NTP models (docs/instances.md).

- ``predict_ntp``: the self-attention NTP data of 2403.08081: the SCC partition of each
  query's priority graph, the certified graph-SVM W_svm, the finite part W_fin and the
  reduced-loss minimum L*, the limiting label shares inside each label's SCC, and where GD
  goes (spec ntp §1.2, §2.3–§2.7).
- ``predict_ntp_linear``: the linear decoder of 2402.18551: the entropy floor H,
  NTP-compatibility and W*, NTP-separability and the certified NTP-SVM W^mm, dim F, and where
  GD goes (spec ntp §1.3, §2.11–§2.14).

"Where GD goes" is a run of the theory's own recipe, reported as measured: GD from W = 0 with
the spec's step (η = 1/L_bound for attention, η = 0.5 for the linear model) for ``GD_STEPS``
steps, and its distance to the predicted limit. It is evidence about this instance, not a
certificate of the limit: 1 − corr decays like 1/log²k (spec §2.6).

For the attention model ``flow`` is the certificate: gradient flow on W from 0 followed by the
engine every other model uses (``models.ntp.flow.flow_limit``, ``models.flows.limits.follow``), its
limit read from the flow alone and compared with the graph-SVM and W_fin built from the
priority graphs. The engine's prompt view needs sequences of one length; for others ``flow``
keeps its keys, null, with status "inconclusive" and the reason.
"""

from __future__ import annotations

import math
import time

import numpy as np

from models.check import precision
from models.flows.limits import Limit, bounded_message, shared_message
from models.ntp.attention import ntp_attention, smoothness_bound
from models.ntp.data import ntp_data
from models.ntp.finite import finite_component, reduced_model
from models.ntp.flow import flow_limit, linear_flow_limit, prompt_view
from models.ntp.gd import gd
from models.ntp.graph import priority_graphs
from models.ntp.linear import linear_ntp
from models.ntp.qp import project
from models.ntp.svm import cyclic_subspace, graph_svm
from models.problems.cross import correlation

#: GD steps `check` runs (spec §2.6: 1 − corr ≤ 1e-1 and ‖P_cyc W − W_fin‖ ≤ 3e-2 at 1e4 on
#: the official-style draws; about a second at n = 6, T = 4, d = 8).
GD_STEPS = 10_000
#: The step of 2402.18551's experiments (spec §2.14).
LINEAR_LR = 0.5

NTP_FIELDS = tuple(
    "model components graph_svm W_fin finite loss_floor label_shares gd flow status reason "
    "seconds".split()
)
LINEAR_FIELDS = tuple(
    "model entropy compatible compatibility_residual W_star separable ntp_svm dim_F gd flow "
    "status reason seconds".split()
)


def _quiet(stage: str) -> None:
    """The default ``stage`` callback: say nothing."""


def _one_minus_corr(A: np.ndarray, B: np.ndarray) -> float | None:
    """1 − corr(A, B) (``models.problems.cross.correlation``, the official metric); None where
    either is zero and the correlation undefined."""
    corr = correlation(A, B)
    return None if math.isnan(corr) else 1.0 - corr


def _qp_json(status: str, W, solution) -> dict:
    cert = solution.certificate
    return {
        "status": status,
        "reason": solution.reason,
        "W": None if W is None else W.tolist(),
        "kkt": None if cert is None else cert.residuals,
    }


def inconclusive_answer(model: str, fields: dict, reason: str, seconds: float) -> dict:
    """The answer that was not computed (``check --timeout`` ran out, or float64 does not
    represent the instance: ``models.check.precision``): every computed field null, status
    "inconclusive" with ``reason``."""
    keys = NTP_FIELDS if model == "ntp" else LINEAR_FIELDS
    out = dict.fromkeys(keys) | {"model": model}
    return out | {"status": "inconclusive", "reason": reason, "seconds": seconds}


# ------------------------------------------------------------------------ self-attention NTP


def _label_shares(data, W_fin: np.ndarray) -> list[dict]:
    """For each sample whose label's SCC has two or more of its tokens: the attention split
    over those tokens at W_fin (the limit of the split inside the SCC, NTP-COMP)."""
    reduced = reduced_model(data)
    mass = reduced.attention_mass(W_fin)
    table = reduced.table
    out = []
    for i in range(table.n):
        present = np.isfinite(table.log_count[i])
        if present.sum() < 2:
            continue
        tokens = table.tokens[i][present]
        shares = mass[i][present] / mass[i][present].sum()
        out.append({"sample": i, "tokens": [int(t) for t in tokens], "shares": shares.tolist()})
    return out


#: The keys of ``flow`` (the engine's certified limit of gradient flow on W), in order.
FLOW_FIELDS = tuple(
    "kind status W_dir W_fin one_minus_cos_to_graph_svm fin_error reason seconds".split()
)
#: The same for the linear decoder, compared with W^mm and W*.
LINEAR_FLOW_FIELDS = tuple(
    "kind status W_dir W_fin one_minus_cos_to_ntp_svm fin_error reason seconds".split()
)


def _unit_omc(a: np.ndarray, b: np.ndarray) -> float:
    """1 − cos(a, b) as ½‖a/‖a‖ − b/‖b‖‖² (no cancellation near 0); both nonzero."""
    return 0.5 * float(np.sum((a / np.linalg.norm(a) - b / np.linalg.norm(b)) ** 2))


def _flow_limit_parts(lim: Limit, shape) -> tuple[np.ndarray | None, np.ndarray | None, str]:
    """(W_dir, W_fin, reason) of a certified limit: "converged" (one token per sample: the
    unit SVM direction of the selection, no finite part), "shared" (the unit equality SVM of
    the sets, W_fin = q*), "bounded" (no direction; the strict local minimiser, or W(0) where
    L is constant), else neither. ``shape``: W's (d×d attention, V×d decoder)."""
    out = lim.outcome
    if lim.kind == "converged":
        x = np.asarray(out.svm.x, dtype=np.float64)
        return (x / np.linalg.norm(x)).reshape(shape), np.zeros(shape), out.reason
    if lim.kind == "shared":
        sh = lim.shared
        w = np.asarray(sh.direction.w, dtype=np.float64)
        W_dir = (w / np.linalg.norm(w)).reshape(shape)
        return (
            W_dir,
            np.asarray(sh.finite.q, dtype=np.float64).reshape(shape),
            shared_message(sh, lim.symbol),
        )
    if lim.kind == "bounded":
        if lim.minimiser is not None:
            W_fin = np.asarray(lim.minimiser.p, dtype=np.float64).reshape(shape)
        elif lim.at_rest is not None:
            W_fin = out.p.numpy().reshape(shape)  # L is constant: the flow rests at W(0)
        else:
            W_fin = None  # a trapping interval: bounded, with no certified point
        return None, W_fin, bounded_message(lim)
    return None, None, out.reason


def _flow(data, svm, fin) -> dict:
    """``flow``: where gradient flow on W from 0 goes, certified by the engine
    (``models.ntp.flow.flow_limit``), against the graph-SVM and W_fin of the priority graphs:
    ``one_minus_cos_to_graph_svm`` = 1 − cos(W_dir, W_svm) (null where either is missing or
    W_svm is vacuous), ``fin_error`` = ‖W_fin(engine) − W_fin‖_F (null where either is
    missing). Sequences of several lengths: every field null, status "inconclusive"."""
    t0 = time.perf_counter()
    try:
        prompt_view(data)  # the engine's view: one sequence length
    except ValueError as err:
        return dict.fromkeys(FLOW_FIELDS) | {
            "status": "inconclusive",
            "reason": str(err),
            "seconds": time.perf_counter() - t0,
        }
    fin_W = np.asarray(fin.W) if fin.converged else None
    return _flow_block(flow_limit(data), (data.dim, data.dim), svm, fin_W, "graph_svm", t0)


def _flow_block(lim: Limit, shape, svm, fin_W, svm_name: str, t0: float) -> dict:
    """The ``flow`` block of a certified (or undecided) limit against the oracle's SVM
    (``one_minus_cos_to_<svm_name>``; null where either direction is missing or the SVM is
    vacuous) and finite part ``fin_W`` (``fin_error``; null where either is missing)."""
    W_dir, W_fin, reason = _flow_limit_parts(lim, shape)
    svm_W = None if svm.W is None or not svm.ok or svm.vacuous else np.asarray(svm.W)
    certified = ("converged", "shared", "bounded")
    return {
        "kind": lim.kind,
        "status": lim.kind if lim.kind in certified else lim.outcome.status,
        "W_dir": None if W_dir is None else W_dir.tolist(),
        "W_fin": None if W_fin is None else W_fin.tolist(),
        f"one_minus_cos_to_{svm_name}": (
            None if W_dir is None or svm_W is None else _unit_omc(W_dir, svm_W)
        ),
        "fin_error": (
            None if W_fin is None or fin_W is None else float(np.linalg.norm(W_fin - fin_W))
        ),
        "reason": reason,
        "seconds": time.perf_counter() - t0,
    }


def predict_ntp(embeddings, sequences, labels, *, stage=_quiet) -> dict:
    """The answer for one self-attention NTP instance (the query is each sequence's last
    token; labels must occur in their sequences)."""
    t0 = time.perf_counter()
    data = ntp_data(embeddings, sequences, labels)
    reason = precision.ntp(data.embeddings, data.sequences)
    if reason:
        return inconclusive_answer("ntp", {}, reason, time.perf_counter() - t0)
    graphs = priority_graphs(data.sequences, data.labels, data.num_tokens)
    components = [
        {
            "query": int(k),
            "sccs": [sorted(int(t) for t in c) for c in g.components],
            "cyclic": not g.is_acyclic,
        }
        for k, g in sorted(graphs.items())
    ]
    stage("solving the graph-SVM")
    svm = graph_svm(data, graphs=graphs)
    stage("computing the finite part W_fin (Newton on S_cyc)")
    fin = finite_component(data)
    answer = {
        "model": "ntp",
        "components": components,
        "graph_svm": _qp_json(svm.status, svm.W, svm.solution) | {"vacuous": svm.vacuous},
        "W_fin": fin.W.tolist(),
        "finite": {
            "converged": fin.converged,
            "gradient_norm": fin.gradient_norm,
            "newton_steps": fin.steps,
            "reason": fin.reason,
        },
        "loss_floor": fin.loss,
        "label_shares": _label_shares(data, fin.W),
    }
    # no stage line of its own (the stages are pinned by tests/test_ntp_predict.py): a
    # fraction of a second on the official sizes, reported as part of the finite part's stage
    flow = _flow(data, svm, fin)
    if not svm.ok or not fin.converged:
        why = svm.reason if not svm.ok else f"W_fin: {fin.reason}"
        status = "infeasible" if svm.status == "infeasible" else "inconclusive"
        return answer | {"gd": None, "flow": flow, "status": status, "reason": why} | _took(t0)
    stage(f"running GD for {GD_STEPS} steps (η = 1/L_bound)")
    model = ntp_attention(data)
    lr = 1.0 / smoothness_bound(data)
    run = gd(model, np.zeros((data.dim, data.dim)), lr=lr, steps=GD_STEPS)
    W = run.last
    basis = cyclic_subspace(data)
    fin_error = float(np.linalg.norm(project(basis, W) - fin.W)) if basis.shape[0] else 0.0
    answer["gd"] = {
        "steps": run.steps,
        "lr": lr,
        "stopped": run.stopped or None,
        "one_minus_corr": None if svm.vacuous else _one_minus_corr(W, svm.W),
        "fin_error": fin_error,
        "excess_loss": model.loss(W) - fin.loss,
        "W_norm": float(np.linalg.norm(W)),
    }
    answer["flow"] = flow
    status, reason = "ok", "W(k) ≈ R·W_svm + W_fin: see gd for the distances after the run"
    if svm.vacuous:
        reason = "no edge leaves an SCC: W_svm = 0 and W(k) → W_fin (the loss floor is attained)"
    return answer | {"status": status, "reason": reason} | _took(t0)


def _linear_flow(problem, svm, compat) -> dict:
    """``flow`` of the linear decoder: gradient flow on W from 0 followed by the engine
    (``models.ntp.flow.linear_flow_limit``: CE as an input-weighted prompt problem), against
    W^mm and W*: ``one_minus_cos_to_ntp_svm`` = 1 − cos(W_dir, W^mm) (null where either is
    missing or W^mm is vacuous), ``fin_error`` = ‖W_fin(engine) − W*‖_F (null where either is
    missing)."""
    t0 = time.perf_counter()
    lim = linear_flow_limit(problem)
    shape = (problem.vocab, problem.dim)
    return _flow_block(lim, shape, svm, compat.W_star, "ntp_svm", t0)


def _took(t0: float) -> dict:
    return {"seconds": time.perf_counter() - t0}


# ----------------------------------------------------------------------- the linear decoder


def predict_ntp_linear(H, P, pi, *, stage=_quiet) -> dict:
    """The answer for one linear NTP instance (H: d×m contexts as columns, P: m×V, pi: m)."""
    t0 = time.perf_counter()
    problem = linear_ntp(H, P, pi)
    reason = precision.ntp_linear(problem.H)
    if reason:
        return inconclusive_answer("ntp-linear", {}, reason, time.perf_counter() - t0)
    compat = problem.compatibility()
    stage("solving the NTP-SVM")
    svm = problem.ntp_svm()
    answer = {
        "model": "ntp-linear",
        "entropy": problem.entropy(),
        "compatible": compat.compatible,
        "compatibility_residual": compat.residual,
        "W_star": None if compat.W_star is None else compat.W_star.tolist(),
        "separable": svm.separable,
        "ntp_svm": _qp_json(svm.status, svm.W, svm.solution) | {"vacuous": svm.vacuous},
        "dim_F": problem.dim_F,
    }
    stage("following gradient flow on W (the engine)")
    flow = _linear_flow(problem, svm, compat)
    if svm.separable is None:
        return (
            answer
            | {"gd": None, "flow": flow, "status": "inconclusive", "reason": svm.solution.reason}
            | (_took(t0))
        )
    stage(f"running GD for {GD_STEPS} steps (η = {LINEAR_LR})")
    run = gd(problem, np.zeros((problem.vocab, problem.dim)), lr=LINEAR_LR, steps=GD_STEPS)
    W = run.last
    gd_answer = {
        "steps": run.steps,
        "lr": LINEAR_LR,
        "stopped": run.stopped or None,
        "excess_loss": problem.excess_loss(W),
        "W_norm": float(np.linalg.norm(W)),
        "one_minus_corr": None,
        "fin_error": None,
    }
    if compat.compatible:
        gd_answer["fin_error"] = float(np.linalg.norm(problem.project_F(W) - compat.W_star))
        if svm.ok and not svm.vacuous:
            gd_answer["one_minus_corr"] = _one_minus_corr(W - compat.W_star, svm.W)
    answer["gd"] = gd_answer
    answer["flow"] = flow
    if compat.compatible and svm.separable:
        status = "ok"
        reason = "compatible and separable: CE → H, P_F W(k) → W*, W(k)/‖W(k)‖ → W^mm/‖W^mm‖"
    else:
        status = "ok"
        missing = [
            n
            for n, ok in (("compatible", compat.compatible), ("separable", svm.separable))
            if not ok
        ]
        reason = (
            f"not {' and not '.join(missing)}: the theorems' premise fails; CE need not reach H"
        )
    return answer | {"status": status, "reason": reason} | _took(t0)
