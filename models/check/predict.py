"""What the theory predicts for one concrete instance, and what the dynamics do on it.

This is the computation behind ``python -m theorems check INSTANCE.json``: the CLI validates the
file and calls one of these with float64 tensors. Every field is plain JSON (lists, floats,
strings); ``seconds`` times the whole decision (tracing the flow, every SVM solve and the final
certificate), not process start or the predictions computed beside it.

An instance that float64 no longer represents (``models.check.precision``: a token difference below
float64's resolution, E⁰ absorbed by the step η0·∇, keys that overflow) gets no certificate:
the answer keeps its fields, with ``status`` "inconclusive", ``reason`` "precision: …", each SVM
``{"p": null, "status": "inconclusive", "reason": …}`` and null for everything computed from
the dynamics.

A flow the engine certifies to the general, shared-mass limit (``models.flows.limits.Limit`` of kind
"shared", ``models.flows.shared``: some inputs keep a set of tokens sharing the mass for ever,
p(t) = R·p_dir + p_fin + o(1)) is answered with ``status`` "shared", the limit's sentence as
``reason`` and the certificate in ``shared`` (null for every other outcome); the fields read
at a point (``one_minus_cos``, ``cos_to_global``, ``p_norm``, ``loss``) are then read where the
engine's run ended, the point of that certificate.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from models.check import precision
from models.flows.limits import Limit, bounded_message, follow, shared_message
from models.oracles.selection import global_opt, has_unique_opt, local_optimality, support_sets
from models.oracles.svm import SVMSolution, att_svm, cls_svm
from models.problems.attention import PromptProblem, cosine, one_minus_cos


def _svm_json(sol: SVMSolution, support=None) -> dict:
    out = {"p": None if sol.x is None else sol.x.tolist(), "status": sol.status}
    if sol.status != "optimal" and sol.reason:
        out["reason"] = sol.reason
    if support is not None:
        out["support"] = [s.tolist() for s in support]
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


#: The fields of each answer, in order (the precision answer has the same ones).
PROMPT_FIELDS = tuple(
    "model opt opt_unique svm_global selected locally_optimal locally_optimal_reason "
    "svm_selected tie_sharing status reason minimiser shared one_minus_cos cos_to_global p_norm "
    "loss loss_floor seconds".split()
)
EMBEDDING_FIELDS = tuple(
    "model alpha shift bound max_error selected svm status reason minimiser shared "
    "one_minus_cos "
    "p_norm seconds".split()
)


def _imprecise(model: str, fields, svms, reason: str, t0: float, **known) -> dict:
    """The answer for an instance float64 does not represent: "inconclusive" for precision,
    each SVM without a point, every other computed field null (``known`` fills data facts)."""
    out = dict.fromkeys(fields) | {"model": model} | known
    for name in svms:
        out[name] = {"p": None, "status": "inconclusive", "reason": reason}
    return out | {"status": "inconclusive", "reason": reason, "seconds": time.perf_counter() - t0}


def inconclusive_answer(model: str, fields: dict, reason: str, seconds: float) -> dict:
    """The answer of a prompt or embedding instance that was not computed (``check
    --timeout`` ran out): every computed field null, each SVM without a point, status
    "inconclusive" with ``reason``."""
    keys, svms = (
        (PROMPT_FIELDS, ("svm_global", "svm_selected"))
        if model == "prompt"
        else (EMBEDDING_FIELDS, ("svm",))
    )
    return _imprecise(model, keys, svms, reason, time.perf_counter() - seconds)


def _quiet(stage: str) -> None:
    """The default ``stage`` callback of the predictors: say nothing."""


def _status(lim: Limit) -> str:
    """ "converged" (certified, confirmed while ‖p‖ grew a hundredfold), "shared" (certified
    convergence to a shared-mass limit, ``_shared_json``), "bounded" (the run ends at a
    certified strict local minimiser or inside a certified trapping interval: ‖p(t)‖ stays
    bounded), else the undecided outcome's own status ("inconclusive", "infeasible")."""
    return lim.kind if lim.kind in ("converged", "shared", "bounded") else lim.outcome.status


def _reason(lim: Limit) -> str:
    """The run's reason: the certificate's sentence for a bounded or shared limit, else the
    outcome's own."""
    if lim.kind == "bounded":
        return bounded_message(lim)
    if lim.kind == "shared":
        return shared_message(lim.shared, lim.symbol)
    return lim.outcome.reason


def _end_point(lim: Limit):
    """Where the engine's run ended: the shared limit's certificate point (past the hand-over
    to the pinned flow) for kind "shared", else the outcome's p."""
    if lim.kind == "shared":
        return torch.as_tensor(lim.shared.p, dtype=lim.outcome.p.dtype)
    return lim.outcome.p


def _shared_json(lim: Limit) -> dict | None:
    """The certified shared-mass limit (``models.flows.shared.SharedLimit``), or None for any other
    kind: each input's set (token positions), the unit direction p_dir (the equality SVM of
    the sets) and its solver status, the finite part p_fin (q*), each set's limiting split,
    the certificate's two angles, the reduced loss at p_fin and its Hessian's extreme
    eigenvalues on D."""
    sh = lim.shared
    if lim.kind != "shared" or sh is None:
        return None
    w = np.asarray(sh.direction.w, dtype=np.float64)
    return {
        "sets": [np.nonzero(row)[0].tolist() for row in sh.sets],
        "p_dir": (w / np.linalg.norm(w)).tolist(),
        "p_dir_status": sh.direction.status,
        "p_fin": np.asarray(sh.finite.q, dtype=np.float64).tolist(),
        "shares": [[[int(t), float(x)] for t, x in row.items()] for row in sh.shares],
        "one_minus_cos": float(sh.one_minus_cos),
        "heading": float(sh.heading),
        "reduced_loss": float(sh.finite.loss),
        "hessian_eigenvalues": [float(sh.finite.min_eig), float(sh.finite.max_eig)],
    }


def _one_minus_cos_at(lim: Limit, p, svm) -> float | None:
    """1 − cos to ``svm`` at the run's end: the engine's own value where it certified (or
    gave up on) one token per input; recomputed at the shared limit's point for "shared"."""
    if lim.kind == "shared":
        return one_minus_cos(p, torch.as_tensor(svm.x)) if svm.ok else None
    return _finite(lim.outcome.one_minus_cos)


def _minimiser_json(lim: Limit) -> dict | None:
    m = lim.minimiser
    if m is None:
        return None
    return {
        "p": m.p.tolist(),
        "distance": m.distance,
        "grad_norm": m.grad_norm,
        "hessian_eigenvalues": [m.min_eig, m.max_eig],
        "loss": m.loss,
    }


def predict_prompt(X, y, v, W=None, loss="logistic", p0=None, *, stage=_quiet) -> dict:
    """Global optimum, its ATT-SVM, and where gradient flow from p0 goes (spec maxmargin §2).
    ``stage(text)`` is called as each long step begins (the CLI's progress lines)."""
    t0 = time.perf_counter()
    reason = precision.prompt(X, v, W, p0)
    if reason:
        return _imprecise("prompt", PROMPT_FIELDS, ("svm_global", "svm_selected"), reason, t0)
    problem = PromptProblem.from_data(X, y, v, W, loss)
    scores = problem.scores.numpy()
    opt = global_opt(scores)
    stage(f"solving ATT-SVM of the global optimum ({problem.n * (problem.T - 1)} constraints)")
    svm_global = att_svm(problem.keys, opt)
    support = support_sets(problem.keys, opt, svm_global) if svm_global.ok else None

    stage("tracing gradient flow on p")
    t_flow = time.perf_counter()
    lim = follow(problem, p0)
    flow_seconds = time.perf_counter() - t_flow
    outcome = lim.outcome
    sel = outcome.selected
    local = local_optimality(problem.keys, scores, sel)
    p = _end_point(lim)
    return {
        "model": "prompt",
        "opt": opt.tolist(),
        "opt_unique": bool(has_unique_opt(scores)),
        "svm_global": _svm_json(svm_global, support),
        "selected": sel.tolist(),
        "locally_optimal": bool(local.locally_optimal),
        "locally_optimal_reason": local.reason,
        "svm_selected": _svm_json(outcome.svm),
        # the selected tokens tie in score with others: svm_selected is then the tie-sharing
        # SVM (no rows for the tied tokens), and this says whether it differs from ATT-SVM(sel)
        "tie_sharing": outcome.tie_sharing,
        "status": _status(lim),
        "reason": _reason(lim),
        "minimiser": _minimiser_json(lim),
        "shared": _shared_json(lim),
        "one_minus_cos": _one_minus_cos_at(lim, p, outcome.svm),
        "cos_to_global": cosine(p, torch.as_tensor(svm_global.x)) if svm_global.ok else None,
        "p_norm": float(torch.linalg.vector_norm(p)),
        "loss": float(problem.loss_value(p)),
        "loss_floor": problem.loss_floor(sel),
        "seconds": flow_seconds,
    }


def predict_embedding(sequences, y, E0, v, eta0, *, stage=_quiet) -> dict:
    """One gradient step on E from p = 0, then gradient flow on `<cls>` (spec embeddings §3).
    ``stage(text)`` is called as each long step begins."""
    from models.problems.embedding import EmbeddingProblem, average_signed_frequency, one_step

    t0 = time.perf_counter()
    problem = EmbeddingProblem(sequences=sequences, y=y, E=E0, v=v)
    reason = precision.embedding_scores(problem.E, problem.v)
    if not reason:
        step = one_step(problem, float(eta0))
        grad = problem.grad_E(torch.zeros(problem.dim, dtype=problem.E.dtype))
        reason = precision.embedding(problem.sequences, problem.E, float(eta0), grad, step.E1)
    if reason:
        alpha = average_signed_frequency(problem.sequences, problem.y, problem.vocab_size)
        known = {"alpha": alpha.tolist(), "bound": 11 * float(eta0) * problem.dim**-0.25}
        return _imprecise("embedding", EMBEDDING_FIELDS, ("svm",), reason, t0, **known)
    frozen = EmbeddingProblem(sequences=problem.sequences, y=problem.y, E=step.E1, v=problem.v)
    flow_problem = frozen.prompt_problem()
    stage("tracing gradient flow on <cls>")
    t_flow = time.perf_counter()
    lim = follow(flow_problem, None)
    flow_seconds = time.perf_counter() - t_flow
    outcome = lim.outcome
    positions = torch.as_tensor(outcome.selected)
    selected = problem.sequences[torch.arange(problem.n), positions]
    stage("solving the <cls> SVM of the selection")
    svm = cls_svm(step.E1, problem.sequences, selected)
    p = _end_point(lim)
    return {
        "model": "embedding",
        "alpha": step.alpha.tolist(),
        "shift": step.shift.tolist(),
        "bound": float(step.paper_bound),
        # Lemma 4.1's error |⟨E¹_s, v⟩ − (η0/2)α_s| that `bound` is stated for (‖v‖ = 1; R3's
        # form, with ‖v‖², for another v).
        "max_error": float(step.paper_error.max()),
        "selected": selected.tolist(),
        "svm": _svm_json(svm),
        "status": _status(lim),
        "reason": _reason(lim),
        "minimiser": _minimiser_json(lim),
        "shared": _shared_json(lim),
        "one_minus_cos": one_minus_cos(p, torch.as_tensor(svm.x)) if svm.ok else None,
        "p_norm": float(torch.linalg.vector_norm(p)),
        "seconds": flow_seconds,
    }
