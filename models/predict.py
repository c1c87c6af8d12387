"""What the theory predicts for one concrete instance, and what the dynamics do on it.

This is the computation behind ``python -m theorems check INSTANCE.json``: the CLI validates the
file and calls one of these with float64 tensors. Every field is plain JSON (lists, floats,
strings); ``seconds`` times the whole decision (tracing the flow, every SVM solve and the final
certificate), not process start or the predictions computed beside it.
"""

from __future__ import annotations

import math

import torch

from models.attention import PromptProblem, cosine, one_minus_cos
from models.dynamics import converge
from models.selection import global_opt, has_unique_opt, local_optimality, support_sets
from models.svm import SVMSolution, att_svm, cls_svm


def _svm_json(sol: SVMSolution, support=None) -> dict:
    out = {"p": None if sol.x is None else sol.x.tolist(), "status": sol.status}
    if sol.status != "optimal" and sol.reason:
        out["reason"] = sol.reason
    if support is not None:
        out["support"] = [s.tolist() for s in support]
    return out


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def predict_prompt(X, y, v, W=None, loss="logistic", p0=None) -> dict:
    """Global optimum, its ATT-SVM, and where gradient flow from p0 goes (spec maxmargin §2)."""
    problem = PromptProblem.from_data(X, y, v, W, loss)
    scores = problem.scores.numpy()
    opt = global_opt(scores)
    svm_global = att_svm(problem.keys, opt)
    support = support_sets(problem.keys, opt, svm_global) if svm_global.ok else None

    outcome = converge(problem, p0)
    sel = outcome.selected
    local = local_optimality(problem.keys, scores, sel)
    p = outcome.p
    return {
        "model": "prompt",
        "opt": opt.tolist(),
        "opt_unique": bool(has_unique_opt(scores)),
        "svm_global": _svm_json(svm_global, support),
        "selected": sel.tolist(),
        "locally_optimal": bool(local.locally_optimal),
        "locally_optimal_reason": local.reason,
        "svm_selected": _svm_json(outcome.svm),
        "status": outcome.status,
        "reason": outcome.reason,
        "one_minus_cos": _finite(outcome.one_minus_cos),
        "cos_to_global": cosine(p, torch.as_tensor(svm_global.x)) if svm_global.ok else None,
        "p_norm": float(torch.linalg.vector_norm(p)),
        "loss": float(problem.loss_value(p)),
        "loss_floor": problem.loss_floor(sel),
        "seconds": outcome.seconds,
    }


def predict_embedding(sequences, y, E0, v, eta0) -> dict:
    """One gradient step on E from p = 0, then gradient flow on `<cls>` (spec embeddings §3)."""
    from models.embedding import EmbeddingProblem, one_step

    problem = EmbeddingProblem(sequences=sequences, y=y, E=E0, v=v)
    step = one_step(problem, float(eta0))
    frozen = EmbeddingProblem(sequences=problem.sequences, y=problem.y, E=step.E1, v=problem.v)
    flow_problem = frozen.prompt_problem()
    outcome = converge(flow_problem, None)
    positions = torch.as_tensor(outcome.selected)
    selected = problem.sequences[torch.arange(problem.n), positions]
    svm = cls_svm(step.E1, problem.sequences, selected)
    p = outcome.p
    return {
        "model": "embedding",
        "alpha": step.alpha.tolist(),
        "shift": step.shift.tolist(),
        "bound": float(step.paper_bound),
        # The paper-form error |⟨E¹_s, v⟩ − (η0/2)α_s| that `bound` is stated for.
        "max_error": float((step.E1 @ problem.v - float(eta0) / 2 * step.alpha).abs().max()),
        "selected": selected.tolist(),
        "svm": _svm_json(svm),
        "status": outcome.status,
        "reason": outcome.reason,
        "one_minus_cos": one_minus_cos(p, torch.as_tensor(svm.x)) if svm.ok else None,
        "p_norm": float(torch.linalg.vector_norm(p)),
        "seconds": outcome.seconds,
    }
