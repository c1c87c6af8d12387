"""What joint (W, v) training does on one cross-attention instance, and the ℓp SVMs it is read
against: the computation behind ``python -m theorems check`` for ``{"model": "cross", "train":
"joint", "p": …}`` (docs/instances.md, "Joint (W, v) training"; spec tfsvm §2.10 MD-JOINT, §4.6).

The run is the official joint recipe from W(0) = 0, v(0) = 0: normalised ℓp mirror descent on
W and on v, each gradient normalised in its own dual norm, lr 0.1, with directions from log space
(``models.flows.mirror_joint.joint_md``). Its selection α̂ (the top-attention token of each input at
the end) is read against the certified ℓp-AttSVM W^mm_α̂(ℓp) and the ℓp v-SVM
v^mm_p = argmin ‖v‖_p s.t. Y_i x_{iα̂_i}ᵀv ≥ 1 (``models.oracles.normsvm``).

A fixed-step run has no certificate of its limit; what "certified" says here is the decided
limit of theorems/mirror MD-JOINT-TIGHT: after N steps (1500 / 2000 / 20000 at p = 1.75 / 2 / 3,
the official budgets; 2000 for other p ≤ 2, 20000 above) and then 2N, 4N until it holds,

- the selection at N/2 is α̂ (settled over the second half),
- both SVMs at α̂ are certified, and every selected token is a support vector of the v-SVM
  (its dual above SUPPORT_REL of the largest). Where one is not, the joint theorem's limit of W
  is a relaxed SVM and the runs measured tend to neither it nor W^mm_α̂(ℓp)
  (theorems/mirror/findings.md, MD-JOINT): the answer is "inconclusive" and says which input;
- each direction error 1 − corr (of W with W^mm_α̂(ℓp), of v with v^mm_p) is at most
  CORR_FLOOR or shrank at least ``rate(p)`` = 2^{1/(p−1)}-fold from N/2 to N: a run converging
  in direction shrinks 2^{2/(p−1)}-fold there (its dual variable grows linearly, so
  W_k = R_k·Ŵ + O(1) with R_k ∝ k^{1/(p−1)}), one tending elsewhere ~1-fold.

Otherwise the answer is "inconclusive" with the reason, or "infeasible" when the selection has
no SVM. Nothing raises for a numerical failure: the SVM blocks carry their status and reason.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from models.check import precision
from models.flows.mirror_joint import JOINT_LR, JOINT_STEPS, CrossJointProblem, joint_md, lp_v_svm
from models.oracles.normsvm import CONIC_TOL, norm_svm
from models.problems.cross import correlation

#: A selected token is a support vector of the v-SVM when its certified dual is above this
#: fraction of the largest (theorems/mirror/common.py SUPPORT_REL: on 90 calibration runs the
#: duals of non-support inputs were ≤ 1.2e-7 of the largest, of support ones ≥ 8e-3).
SUPPORT_REL = 1e-4
#: A direction error 1 − corr at most this is at the certified SVMs' resolution (their
#: certificate tolerance CONIC_TOL), where a shrink rate is noise.
CORR_FLOOR = CONIC_TOL
#: The run is doubled at most this many times after its first budget N (4N steps in all: 80000
#: at p = 3, ~12 s).
MAX_DOUBLINGS = 2


def budget(p: float) -> int:
    """The first step budget at exponent p: the official one (1500 / 2000 / 20000 at p = 1.75 /
    2 / 3), else 2000 for p ≤ 2 and 20000 above (ℓp-MD with p > 2 moves W slowly)."""
    return JOINT_STEPS.get(float(p), 2000 if p <= 2 else 20000)


def rate(p: float) -> float:
    """The least shrink of 1 − corr from half a budget to its end that counts as converging:
    2^{1/(p−1)}, the geometric middle of 1 (another limit) and 2^{2/(p−1)} (this one)."""
    return 2.0 ** min(1.0 / (p - 1.0), 1000.0)  # finite for p near 1 (no run gets there)


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _solve(what: str, solve):
    """The SVM, or a ("solver_error", why) pair when it raises: never an exception."""
    try:
        return solve()
    except Exception as exc:  # an answer with a status, whatever went wrong inside
        return ("solver_error", f"{what}: {type(exc).__name__}: {exc}")


def _status(sol) -> tuple[str, str]:
    return sol if isinstance(sol, tuple) else (sol.status, sol.reason)


def _ok(sol) -> bool:
    return not isinstance(sol, tuple) and sol.ok


def _svm_json(sol, alpha, p: float, point: str, value) -> dict:
    status, reason = _status(sol)
    out = {
        point: None if value is None else np.asarray(value).tolist(),
        "norm": _finite(sol.value) if _ok(sol) else None,
        "status": status,
        "alpha": None if alpha is None else np.asarray(alpha).tolist(),
        "p": p,
    }
    return out if status == "optimal" else out | {"reason": reason}


def _max_other_prob(problem: CrossJointProblem, W) -> float:
    logits = problem.logits(torch.as_tensor(W)).numpy()
    s = np.exp(logits - logits.max(axis=1, keepdims=True))
    s /= s.sum(axis=1, keepdims=True)
    s[np.arange(len(s)), s.argmax(axis=1)] = 0.0
    return float(s.max())


def _null_answer(p, reason: str, t0: float) -> dict:
    none = {"status": "inconclusive", "reason": reason, "alpha": None, "p": p, "norm": None}
    return {
        "model": "cross",
        "train": "joint",
        "p": p,
        "selected": None,
        "training": {"status": "inconclusive", "reason": reason, "W": None, "v": None},
        "svm_lp": {"W": None} | none,
        "v_svm": {"v": None, "support": None} | none,
        "corr_W": None,
        "corr_v": None,
        "shrink_W": None,
        "shrink_v": None,
        "rate": None if p is None else rate(p),
        "status": "inconclusive",
        "reason": reason,
        "seconds": time.perf_counter() - t0,
    }


def inconclusive_answer(model: str, fields: dict, reason: str, seconds: float) -> dict:
    """The answer of a joint instance that was not computed (``check --timeout`` ran out)."""
    return _null_answer(fields.get("p"), reason, time.perf_counter() - seconds)


def _quiet(stage: str) -> None:
    """The default ``stage`` callback: say nothing."""


def _verdict(alpha_half, alpha, W_svm, v_svm, shrink, errors, p) -> tuple[str, str, bool]:
    """(status, reason, whether more steps may change it) at the end of one budget (module
    docstring)."""
    if not np.array_equal(alpha_half, alpha):
        return "inconclusive", "the selection at half the budget is not the final one", True
    for what, sol in (("the ℓp-AttSVM", W_svm), ("the ℓp v-SVM", v_svm)):
        if not _ok(sol):
            status, reason = _status(sol)
            kind = "infeasible" if status == "infeasible" else "inconclusive"
            return kind, f"{what} at the selection: {status}: {reason}", False
    lam = np.asarray(v_svm.duals, dtype=float)
    loose = np.flatnonzero(lam <= SUPPORT_REL * lam.max())
    if loose.size:
        return (
            "inconclusive",
            (
                f"input(s) {loose.tolist()}: the selected token is not a support vector of the ℓp "
                "v-SVM, so the joint theorem's limit of W is a relaxed SVM, not W^mm_α̂(ℓp) "
                "(theorems/mirror/findings.md, MD-JOINT)"
            ),
            False,
        )
    slow = [
        f"1 − corr({name}) shrank {shrink[name]:.2f}-fold < {rate(p):.2f}"
        for name in ("W", "v")
        if errors[name] > CORR_FLOOR and shrink[name] < rate(p)
    ]
    if slow:
        return "inconclusive", "; ".join(slow) + " over the second half of the budget", True
    return (
        "certified",
        (
            f"selection settled over the second half, both SVMs certified and tight, and 1 − corr "
            f"of W and v each ≤ {CORR_FLOOR:.0e} or shrank ≥ {rate(p):.2f}-fold from half the "
            "budget to its end"
        ),
        False,
    )


def predict_joint(X, Z, y, loss: str = "logistic", p: float = 2.0, *, stage=_quiet) -> dict:
    """Joint (W, v) ℓp mirror descent from W = 0, v = 0 on (X, Z, y); its selection α̂, the ℓp
    SVMs of W and v at α̂, the correlations and a status (module docstring)."""
    t0 = time.perf_counter()
    p = float(p)
    reason = precision.cross(X, Z, torch.zeros(X.shape[-1], dtype=torch.float64))
    if reason:  # the keys (no scores: v is learned; a zero head makes them exact ties)
        return _null_answer(p, reason, t0)
    problem = CrossJointProblem(X, Z, y, loss)
    N = budget(p)
    W, v = np.zeros((problem.d, problem.d)), np.zeros(problem.d)
    history: list[dict] = []
    done, chunk = 0, N
    for doubling in range(MAX_DOUBLINGS + 1):
        stage(f"joint ℓ{p:g} mirror descent, steps {done + 1}–{done + chunk}")
        run = joint_md(problem, W, v, p=p, lr=JOINT_LR, steps=chunk, record_every=chunk // 2)
        start = done
        done += int(run.steps[-1])
        half = int(np.flatnonzero(run.steps == run.steps[-1] // 2)[0]) if doubling == 0 else 0
        W_half, v_half = run.Ws[half], run.vs[half]
        W, v = run.W, run.v
        alpha = problem.selected(torch.as_tensor(W))
        alpha_half = problem.selected(torch.as_tensor(W_half))
        stage("solving the ℓp-AttSVM and the ℓp v-SVM at the selection")
        W_svm = _solve("ℓp-AttSVM", lambda a=alpha: norm_svm(problem.X, problem.Z, a, "lp", p=p))
        v_svm = _solve("ℓp v-SVM", lambda a=alpha: lp_v_svm(problem.X, problem.y, a, p).svm)
        ok = _ok(W_svm) and _ok(v_svm)
        v_mm = v_svm.W[:, 0] if ok else None
        corr = {"W": correlation(W_svm.W, W), "v": correlation(v_mm, v)} if ok else {}
        before = {"W": correlation(W_svm.W, W_half), "v": correlation(v_mm, v_half)} if ok else {}
        errors = {k: 1.0 - c for k, c in corr.items()}
        shrink = {k: (1.0 - before[k]) / e if e > 0 else math.inf for k, e in errors.items()}
        history.append(
            {
                "steps": done,
                "half": start + int(run.steps[half]),
                "selected": alpha.tolist(),
                "selected_at_half": alpha_half.tolist(),
                "corr_W": _finite(corr.get("W")),
                "corr_v": _finite(corr.get("v")),
                "shrink_W": _finite(shrink.get("W")),
                "shrink_v": _finite(shrink.get("v")),
                "max_other_prob": _max_other_prob(problem, W),
            }
        )
        status, reason, more = _verdict(alpha_half, alpha, W_svm, v_svm, shrink, errors, p)
        if run.stop != "step budget":
            status, reason = "inconclusive", f"the run stopped after {done} steps: {run.stop}"
            break
        if not more:
            break
        if doubling == MAX_DOUBLINGS:
            reason = f"not certified after {done} steps: {reason}"
            break
        chunk = done  # double the total: the next chunk's start is its "half"
    lam = np.asarray(v_svm.duals, dtype=float) if _ok(v_svm) else None
    v_block = _svm_json(v_svm, alpha, p, "v", v_mm)
    v_block["support"] = None if lam is None else (lam > SUPPORT_REL * lam.max()).tolist()
    margins = problem.joint_margins(torch.as_tensor(W), torch.as_tensor(v)).numpy()
    return {
        "model": "cross",
        "train": "joint",
        "p": p,
        "selected": alpha.tolist(),
        "training": {
            "method": f"joint (W, v) ℓ{p:g} mirror descent",
            "recipe": (
                f"normalised ℓp mirror descent on W and on v, p = {p:g}, lr {JOINT_LR}: each "
                "dual variable sign(P)|P|^(p−1) steps along −∇_P L/‖∇_P L‖_(p*), gradients in "
                "log space (models.flows.mirror_joint.joint_md)"
            ),
            "init": "W = 0, v = 0",
            "steps": done,
            "history": history,
            "W": W.tolist(),
            "v": v.tolist(),
            "W_norm": float(np.linalg.norm(W)),
            "v_norm": float(np.linalg.norm(v)),
            "min_margin": _finite(float(margins.min())),
        },
        "svm_lp": _svm_json(W_svm, alpha, p, "W", W_svm.W if _ok(W_svm) else None),
        "v_svm": v_block,
        "corr_W": _finite(corr.get("W")),
        "corr_v": _finite(corr.get("v")),
        "shrink_W": _finite(shrink.get("W")),
        "shrink_v": _finite(shrink.get("v")),
        "rate": rate(p),
        "status": status,
        "reason": reason,
        "seconds": time.perf_counter() - t0,
    }
