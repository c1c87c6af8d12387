"""What the theory predicts for one cross-attention instance, and what the dynamics do on it.

The computation behind ``python -m theorems check`` for ``{"model": "cross"}`` (docs/instances.md;
spec tfsvm §1, §2.8, §4): the CLI validates the file and calls ``predict_cross`` with float64
tensors; every field of the answer is plain JSON.

Training, by parametrisation (spec tfsvm §4: lr 0.1, normalised steps):

- ``W``: normalised GD from W = 0, in its small-step limit: the gradient flow, traced by the
  certified engine ``models.flows.limits.follow`` on the vectorised prompt problem (GD, NGD and
  the flow follow one path), the one the claims use. Its status is the engine's: "converged"
  certifies the direction (1 − cos to the SVM of the selection ≤ the engine's target,
  confirmed while ‖W‖ grows a hundredfold), "shared" certifies the general limit where some
  inputs keep a set of tokens sharing the mass for ever (``models.flows.shared``: W → R·W_dir +
  W_fin; the final W, ``one_minus_cos`` and ``max_other_prob`` are then the shared limit's,
  read where its certificate was), "bounded" that the run ends at a certified strict local
  minimiser, "inconclusive" says why none of these, "infeasible" means the selection has no
  SVM.
- ``KQ``: the official (K, Q) recipe (``models.problems.cross.kq_ngd``): each factor's gradient
  normalised separately, the penalty λ(‖K‖² + ‖Q‖²) with λ = float64 machine epsilon, computed
  in log space, from a small seeded initialisation.
- ``p`` given: normalised ℓp mirror descent (``models.problems.cross.md``) from W = 0.

A fixed-step run has no certificate of its limit. What this module certifies instead, and
calls "settled": after 2000, 4000, 8000, … steps (doubling, up to a cap) the run's own
correlation (with the nuclear SVM for (K, Q), with the ℓp SVM for mirror descent, each at the
run's current selection) changed by at most SETTLE_TOL over the last doubling, the selection is
the same at both ends of that doubling and saturated (every other token's attention ≤
SELECT_TOL). Otherwise the run is "inconclusive", with the correlation history. "Settled" says
the correlation stopped moving at this resolution, not that it reached its limit.

The SVMs (``models.oracles.normsvm.norm_svm``, certified) are solved at the SELECTED tokens of the
training run (``selected``), not at the top-score tokens (``opt``), as the official code does;
each SVM says at which selection it was solved (``alpha``). A solver failure is reported in
the SVM's ``status`` and ``reason``, never raised.

An instance that float64 no longer represents (``models.check.precision``: two tokens of an input
closer than float64 resolves at their magnitude, keys or scores that overflow) is not trained
at all: the answer keeps its fields, with ``training`` (and ``training_lp``) and every SVM
"inconclusive" with the reason "precision: …", null for everything computed, and a top-level
``status`` "inconclusive" and ``reason`` that only this answer has.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from models.check import precision
from models.flows.limits import bounded_message, follow, shared_message, tie_sharing_message
from models.oracles.selection import has_unique_opt
from models.problems.cross import MACHINE_EPS, CrossProblem, correlation, kq_ngd, md, random_factors

#: The official recipe's step size and iteration count (spec tfsvm §4: lr 0.1, 2000 steps).
LR = 0.1
FIRST_STEPS = 2000
#: The cap of a fixed-step run: four doublings after the first 2000 steps (32000 steps cost
#: ~2 s at d ≤ 10 on this project's machines: measured on the visualization instance).
MAX_STEPS = 32000
#: Largest change of the run's own correlation over a doubling of the steps that counts as
#: settled. On visualization instance 1 (spec §4.4): (K, Q) with λ = ε changes by < 1e-15 from
#: 2000 to 4000 steps (the iterate hovers at the ε-regularised point, spec §6); ℓ1.75 mirror
#: descent by 5.5e-5; ℓ3 mirror descent by 3e-2 … 1.3e-3 up to 32000 steps (still moving, hence
#: inconclusive, as spec §4.5's "p = 3 needs ~10× more steps" says). 1e-4 is the resolution
#: of the spec's correlation thresholds (≥ 0.99, ≥ 0.999).
SETTLE_TOL = 1e-4
#: Saturation of a selection: every other token's attention ≤ 1e-6 (spec tfsvm §7 "selection").
SELECT_TOL = 1e-6
#: The (K, Q) initialisation: i.i.d. N(0, 0.01²) entries from this seed (``random_factors``).
KQ_INIT_SCALE = 0.01
KQ_SEED = 0

KQ_RECIPE = (
    f"official (K,Q)-NGD (spec tfsvm §4): lr {LR}, each factor's gradient normalised "
    "separately, penalty λ(‖K‖²_F + ‖Q‖²_F) with λ = float64 machine epsilon, log-space "
    "gradient (models.problems.cross.kq_ngd)"
)
FLOW_RECIPE = (
    "normalised GD from W = 0 in its small-step limit: the gradient flow, traced until its "
    "direction is certified (models.flows.limits.follow on vec(W))"
)


def _finite(x) -> float | None:
    return float(x) if x is not None and math.isfinite(x) else None


def _svm(X, Z, alpha, norm: str, p: float | None = None):
    """norm_svm at alpha, or a ("solver_error", why) pair when it raises: never an exception."""
    from models.oracles.normsvm import norm_svm

    try:
        return norm_svm(X, Z, alpha, norm, p=p)
    except Exception as exc:  # an answer with a status, whatever went wrong inside
        return ("solver_error", f"{type(exc).__name__}: {exc}")


def _svm_json(sol, alpha, *, rank: bool = True, p: float | None = None) -> dict:
    """{"W", "norm", "rank", "status", "alpha"} (+ "p", + "reason" unless optimal); a block with
    no solution (``sol`` a (status, reason) pair) gives the ℓp SVM's exponent ``p``."""
    alpha = np.asarray(alpha).tolist()
    if isinstance(sol, tuple):
        status, reason = sol
        out = {"W": None, "norm": None} | ({"rank": None} if rank else {})
        out |= {"status": status, "alpha": alpha}
        return out | ({"p": float(p)} if p is not None else {}) | {"reason": reason}
    out = {
        "W": None if sol.W is None else sol.W.tolist(),
        "norm": _finite(sol.value) if sol.ok else None,
    }
    if rank:
        out["rank"] = sol.rank() if sol.ok else None
    out |= {"status": sol.status, "alpha": alpha}
    if sol.p is not None:
        out["p"] = sol.p
    if not sol.ok:
        out["reason"] = sol.reason
    return out


def _ok(sol) -> bool:
    return not isinstance(sol, tuple) and sol.ok


def _corr(W, sol) -> float | None:
    return _finite(correlation(W, sol.W)) if _ok(sol) else None


#: The fields of ``face_nuc`` (the KQ answer's reading of the nuclear SVM's optimal face).
FACE_FIELDS = ("corr", "corr_lower", "corr_upper", "distance", "margin_ratio")


def _face(problem: CrossProblem, W, nuc, alpha) -> dict:
    """The face metrics of the trained matrix against the nuclear SVM's optimal face
    (``models.oracles.normsvm.nuclear_face_fit``, warm with the nuclear SVM just solved: its value
    and its point): where the nuclear SVM is not unique (spec F8), ``corr_nuc`` reads one solver
    point of the face, these read the face. Never raises."""
    from models.oracles.normsvm import nuclear_face_fit

    out = dict.fromkeys(FACE_FIELDS)
    if not _ok(nuc):
        return {"status": "inconclusive"} | out | {"reason": "no certified nuclear SVM"}
    try:
        fit = nuclear_face_fit(
            problem.X.numpy(), problem.Z.numpy(), alpha, nuc.value, W, known=nuc.W
        )
    except Exception as exc:  # an answer with a status, whatever went wrong inside
        return {"status": "solver_error"} | out | {"reason": f"{type(exc).__name__}: {exc}"}
    out = {"status": fit.status} | {k: _finite(getattr(fit, k)) for k in FACE_FIELDS}
    return out if fit.ok else out | {"reason": fit.reason}


def _max_other_prob(problem: CrossProblem, W) -> float:
    """The largest attention on a token other than each input's top-logit token."""
    s = problem.softmax(torch.as_tensor(W)).numpy()
    top = s.argmax(axis=1)
    s[np.arange(len(top)), top] = 0.0
    return float(s.max()) if s.size else 0.0


class _SVMs:
    """Each SVM solved once per (norm, selection)."""

    def __init__(self, problem: CrossProblem, p: float | None):
        self.X, self.Z, self.p = problem.X.numpy(), problem.Z.numpy(), p
        self.cache: dict = {}

    def __call__(self, norm: str, alpha) -> object:
        alpha = np.asarray(alpha, dtype=np.int64)
        key = (norm, alpha.tobytes())
        if key not in self.cache:
            p = self.p if norm == "lp" else None
            self.cache[key] = _svm(self.X, self.Z, alpha, norm, p)
        return self.cache[key]


def _settle(problem: CrossProblem, advance, state, own: str, svms: _SVMs) -> tuple:
    """Run a fixed-step method 2000, 4000, … steps (to MAX_STEPS) until its correlation with its
    own SVM (``own``) at its selection is settled. ``advance(state, k)`` runs k more steps and
    returns (state, W, why it stopped early or None). Returns (W, status, reason, steps,
    history)."""
    history: list[dict] = []
    done, chunk, previous = 0, FIRST_STEPS, None
    while True:
        state, W, early = advance(state, chunk)
        done += chunk
        selected = problem.selected(torch.as_tensor(W))
        sol = svms(own, selected)
        now = {
            "steps": done,
            "corr": _corr(W, sol),
            "selected": selected.tolist(),
            "max_other_prob": _max_other_prob(problem, W),
        }
        history.append(now)
        if early:
            return W, "inconclusive", f"the run stopped after {done} steps: {early}", done, history
        if not _ok(sol):
            status = sol[0] if isinstance(sol, tuple) else sol.status
            status = "infeasible" if status == "infeasible" else "inconclusive"
            why = sol[1] if isinstance(sol, tuple) else sol.reason
            return W, status, f"the {own} SVM at the selection: {why}", done, history
        if now["corr"] is None:  # a zero matrix: W, or the SVM of an input without rivals
            return W, "inconclusive", "corr is undefined: W or the SVM is 0", done, history
        if previous is not None and previous["selected"] == now["selected"]:
            change = abs(now["corr"] - previous["corr"])
            saturated = max(previous["max_other_prob"], now["max_other_prob"]) <= SELECT_TOL
            if saturated and change <= SETTLE_TOL:
                reason = (
                    f"corr with the {own} SVM changed by {change:.1e} ≤ {SETTLE_TOL:.0e} from "
                    f"{previous['steps']} to {done} steps, at one saturated selection"
                )
                return W, "settled", reason, done, history
        if done >= MAX_STEPS:
            if previous is None or previous["selected"] != now["selected"]:
                why = "the selection changed over the last doubling"
            elif max(previous["max_other_prob"], now["max_other_prob"]) > SELECT_TOL:
                why = f"the selection is not saturated (attention > {SELECT_TOL:.0e} elsewhere)"
            else:
                why = f"corr still moved by {abs(now['corr'] - previous['corr']):.1e}"
            reason = f"not settled at the cap of {MAX_STEPS} steps: {why}"
            return W, "inconclusive", reason, done, history
        previous, chunk = now, done  # double the total


def _train_w(problem: CrossProblem) -> tuple[np.ndarray, dict]:
    d = problem.d
    lim = follow(problem.prompt, np.zeros(d * d))
    outcome = lim.outcome
    W = outcome.p.numpy().reshape(d, d)
    omc, leak, evals = outcome.one_minus_cos, outcome.max_other_prob, outcome.trajectory.evals
    if lim.kind == "bounded":
        reason = bounded_message(lim)
    elif lim.kind == "shared":  # the general limit: sets of tokens share the mass for ever
        sh = lim.shared
        reason = shared_message(sh, "W^mm")
        W = np.asarray(sh.p, dtype=np.float64).reshape(d, d)
        omc, leak, evals = sh.one_minus_cos, sh.max_other_prob, evals + sh.steps
    elif lim.kind == "converged" and outcome.tie_sharing:  # twins or exact ties share mass
        reason = tie_sharing_message(outcome, f"W^mm({outcome.selected.tolist()})")
    else:
        reason = outcome.reason
    certified = ("converged", "shared", "bounded")
    return W, {
        "method": "W gradient flow",
        "recipe": FLOW_RECIPE,
        "init": "W = 0",
        "status": lim.kind if lim.kind in certified else outcome.status,
        "reason": reason,
        "one_minus_cos": _finite(omc),
        "evaluations": int(evals),
        "W_norm": float(np.linalg.norm(W)),
        "max_other_prob": float(leak),
    }


def _train_kq(problem: CrossProblem, svms: _SVMs) -> tuple[np.ndarray, dict]:
    K0, Q0 = random_factors(problem.d, scale=KQ_INIT_SCALE, seed=KQ_SEED)

    def advance(state, k):
        run = kq_ngd(problem, *state, lr=LR, steps=k, penalty=MACHINE_EPS, record_every=k)
        early = None if run.stop == "step budget" else run.stop
        return (run.K, run.Q), run.W, early

    W, status, reason, steps, history = _settle(problem, advance, (K0, Q0), "nuc", svms)
    return W, {
        "method": "(K,Q)-NGD",
        "recipe": KQ_RECIPE,
        "init": f"K, Q with i.i.d. N(0, {KQ_INIT_SCALE}²) entries, seed {KQ_SEED}",
        "status": status,
        "reason": reason,
        "steps": steps,
        "history": history,
        "W_norm": float(np.linalg.norm(W)),
    }


def _train_md(problem: CrossProblem, p: float, svms: _SVMs) -> tuple[np.ndarray, dict]:
    def advance(W, k):
        run = md(problem, W, p=p, lr=LR, steps=k, record_every=k)
        early = None if run.stop == "step budget" else run.stop
        return run.W, run.W, early

    W0 = np.zeros((problem.d, problem.d))
    W, status, reason, steps, history = _settle(problem, advance, W0, "lp", svms)
    return W, {
        "method": f"ℓ{p:g} mirror descent",
        "recipe": (
            f"normalised ℓp mirror descent, p = {p:g}, lr {LR}: the dual variable "
            "sign(W)|W|^(p−1) steps along −∇L/‖∇L‖_(p*) (models.problems.cross.md)"
        ),
        "init": "W = 0",
        "status": status,
        "reason": reason,
        "steps": steps,
        "history": history,
        "W_norm": float(np.linalg.norm(W)),
    }


def _imprecise(param: str, p, reason: str, t0: float) -> dict:
    """The answer for an instance float64 does not represent: nothing trained or solved, every
    run and SVM "inconclusive" for precision, every computed field null."""
    none = ("inconclusive", reason)
    out = {
        "model": "cross",
        "param": param,
        "opt": None,
        "opt_unique": None,
        "selected": None,
        "selected_is_opt": None,
        "training": {"status": "inconclusive", "reason": reason, "W": None},
        "svms_at": None,
        "svm_fro": _svm_json(none, None),
        "svm_nuc": _svm_json(none, None),
        "corr_fro": None,
        "corr_nuc": None,
    }
    if param == "KQ":
        out["face_nuc"] = {"status": "inconclusive"} | dict.fromkeys(FACE_FIELDS)
        out["face_nuc"]["reason"] = reason
    if p is not None:
        out["training_lp"] = {"status": "inconclusive", "reason": reason, "W": None}
        out["svm_lp"] = _svm_json(none, None, rank=False, p=p)
        out["corr_lp"] = None
    return out | {"status": "inconclusive", "reason": reason, "seconds": time.perf_counter() - t0}


def inconclusive_answer(model: str, fields: dict, reason: str, seconds: float) -> dict:
    """The answer of a cross instance that was not computed (``check --timeout`` ran out):
    the same fields as for an instance float64 does not represent, with ``reason``."""
    return _imprecise(
        fields.get("param") or "W", fields.get("p"), reason, time.perf_counter() - seconds
    )


def _quiet(stage: str) -> None:
    """The default ``stage`` callback: say nothing."""


def predict_cross(
    X, Z, y, v, param: str = "W", loss: str = "logistic", p=None, *, stage=_quiet
) -> dict:
    """The top-score tokens, the trained W (or KQᵀ), the tokens it selects, the Frobenius and
    nuclear attention SVMs at that selection and the correlation of the trained matrix with
    each; with ``p``, also ℓp mirror descent and its ℓp SVM (spec tfsvm §2.8, §2.10, §4).
    ``stage(text)`` is called as each long step begins (the CLI's progress lines)."""
    if param not in ("W", "KQ"):
        raise ValueError(f"param: expected 'W' or 'KQ', got {param!r}")
    t0 = time.perf_counter()
    reason = precision.cross(X, Z, v)
    if reason:
        return _imprecise(param, p, reason, t0)
    problem = CrossProblem(X, Z, y, v, loss)
    svms = _SVMs(problem, None if p is None else float(p))
    scores = problem.scores.numpy()
    opt = problem.opt_tokens()
    stage(f"training {'W' if param == 'W' else '(K, Q)'}")
    if param == "W":
        W, training = _train_w(problem)
    else:
        W, training = _train_kq(problem, svms)
    stage("solving the Frobenius and nuclear attention SVMs")
    selected = problem.selected(torch.as_tensor(W))
    fro, nuc = svms("fro", selected), svms("nuc", selected)
    out = {
        "model": "cross",
        "param": param,
        "opt": opt.tolist(),
        "opt_unique": bool(has_unique_opt(scores)),
        "selected": selected.tolist(),
        "selected_is_opt": bool(np.array_equal(selected, opt)),
        "training": training,
        "svms_at": "selected (the training run's final selection)",
        "svm_fro": _svm_json(fro, selected),
        "svm_nuc": _svm_json(nuc, selected),
        "corr_fro": _corr(W, fro),
        "corr_nuc": _corr(W, nuc),
    }
    if param == "KQ":
        stage("reading the nuclear SVM's optimal face")
        out["face_nuc"] = _face(problem, W, nuc, selected)
    training["W"] = W.tolist()
    if p is not None:
        stage(f"ℓ{float(p):g} mirror descent and its SVM")
        W_md, out["training_lp"] = _train_md(problem, float(p), svms)
        out["training_lp"]["W"] = W_md.tolist()
        selected_md = problem.selected(torch.as_tensor(W_md))
        lp = svms("lp", selected_md)
        out["svm_lp"] = _svm_json(lp, selected_md, rank=False, p=p)
        out["corr_lp"] = _corr(W_md, lp)
    out["seconds"] = time.perf_counter() - t0
    return out
