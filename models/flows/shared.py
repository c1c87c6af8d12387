"""The general limit of gradient flow: tokens that share the softmax mass for ever (issue 23's
"vocabulary of the general limit"; the W = R·W_dir + W_fin of 2403.08081, spec ntp.md §1.2,
and the SVM-eq of 2308.16898, spec tfsvm.md §2.9).

Where n(T − 1) ≫ d the flow often selects, in some input i, a *set* S_i of tokens with
different keys that keep a fixed share of the mass while every other token's mass decays.
Then p(t) = R(t)·p_dir + q* + o(1), with

- **p_dir** the max-margin direction with equalities inside the sets:
  min ‖p‖ s.t. (k_is − k_ir)ᵀp = 0 for s ∈ S_i, (k_ir − k_it)ᵀp ≥ 1 for t ∉ S_i
  (r a member of S_i; ``models.ntp.qp.solve_equality_qp``, KKT-certified);
- **q*** the finite part: in D = span{k_is − k_ir : s ∈ S_i}, a strict local minimiser of
  the reduced loss L_S(q) = (1/n) Σ_i ℓ(Σ_{s∈S_i} softmax_{S_i}(K_i q)_s γ_is), which is what
  L tends to on the sets (each within-set logit difference depends on P_D p only, since
  p_dir ⊥ D), certified by Newton's convergence, its gradient and a positive-definite Hessian
  on D.

Why the engine cannot just trace on (``dynamics.converge``): the within-set terms of ∇L are
Θ(1) and cancel at q*, leaving rounding of ~1e-16, while the outside tokens' terms, which
carry the direction, decay like e^{−margin·‖p‖}: past ‖p‖ ≈ 30 the computed flow direction
is rounding and the integrator stalls (measured on ``tests/test_shared.py``'s instance:
"integrator stalled at ‖p‖ = 31"). So once the sets are read and q* certified, and the flow is
seen to sit at q* (the D part of p within BASIN_TOL of it, the tracer's own accuracy there
being rtol·‖p‖, and the full loss's equilibrium in D at p's D⊥ part, found by Newton from the
flow's point, within HANDOVER_TOL of q*: the flow relaxes in D infinitely faster than it moves
along p_dir, so that equilibrium is where its D part is), the flow is
seen to sit at q* (below), the D part is pinned at q* and the rest of
the flow is traced in D⊥: there each set's tokens have one key (exactly: their projected keys
are snapped to one, their differences being rounding of the projection) and keep their split
as constant logit offsets k_isᵀq*. That flow has no within-set cancellation, and it is traced
until p and its heading both point along p_dir while ‖p‖ grows by ``persist``, as
``dynamics.converge`` does for one selected token. Pinning is the limit's own asymptotics
(the correction to q* is of the order of the outside mass), not an observation of the full
flow past the hand-over: the outcome says so in its reason.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch

from models.ntp.qp import EqualityQPSolution, orthonormal_rows, solve_equality_qp
from models.problems.attention import PromptProblem

#: Newton on the reduced loss stops when its step is below this (relative to max(1, ‖z‖)).
STEP_TOL = 1e-13
#: The finite part is certified when the reduced loss's gradient on D is at most this.
GRAD_TOL = 1e-10
#: ... and its Hessian on D has smallest eigenvalue > EIG_REL × largest (positive definite).
EIG_REL = 1e-9
#: Hand-over: the full loss's equilibrium in D at the flow's D⊥ part must lie within this of q*
#: (relative to max(1, ‖q*‖)): the outside tokens' pull on it is of the order of their mass.
HANDOVER_TOL = 1e-5
#: ... and the flow's own D part within this of that equilibrium (relative to max(1, ‖q*‖)):
#: the tracer controls p to rtol·‖p‖ (1e-5 × ‖p‖ ≈ 30–1000 at the hand-overs seen), so its D
#: part is known to ~1e-3 only; a flow in another basin is O(1) away.
BASIN_TOL = 1e-2
#: Projected keys of one set may differ by rounding only: at most this, relative to the
#: largest key norm, before they are snapped to one.
SNAP_TOL = 1e-10
NEWTON_STEPS = 60


@dataclass(frozen=True, eq=False)
class FinitePart:
    """q*, the finite part, with its certificate: Newton converged, ‖∇L_S‖ on D ≤ GRAD_TOL and
    the Hessian on D positive definite (eigenvalues ``min_eig``, ``max_eig``)."""

    q: np.ndarray
    basis: np.ndarray  # (m, d) orthonormal rows spanning D
    loss: float
    grad_norm: float
    min_eig: float
    max_eig: float
    steps: int
    ok: bool
    reason: str


@dataclass(frozen=True, eq=False)
class SharedLimit:
    """Outcome of ``shared_limit``: status "converged" (certified: see the module docstring),
    "inconclusive" (``reason`` says which test failed), or "infeasible" (the equality SVM has
    no solution: no direction keeps the sets and separates them from the rest)."""

    status: str
    reason: str
    sets: np.ndarray  # (n, T) bool: the tokens of each input that share the mass
    direction: EqualityQPSolution | None = None
    finite: FinitePart | None = None
    p: np.ndarray | None = None  # where the certificate was read (q* + the traced D⊥ part)
    one_minus_cos: float = math.nan  # 1 − cos(p, p_dir)
    heading: float = math.nan  # 1 − cos of the flow's D⊥ part with p_dir
    max_other_prob: float = math.nan  # largest softmax mass outside the sets at p
    handover: float = math.nan  # ‖q_full − q*‖ where the trace was handed over
    handover_norm: float = math.nan  # ‖p‖ there
    #: the full loss's equilibrium in D at the hand-over (Newton from the flow's D part)
    q_full: np.ndarray | None = None
    basin: float = math.nan  # ‖P_D p − q_full‖ at the hand-over
    steps: int = 0
    #: the pinned trace's recorded points in p's coordinates (q* + the traced D⊥ part), (k, d)
    path: np.ndarray | None = None
    #: each input's limiting split of the mass over its set, {token: share} (at q*)
    shares: list = field(default_factory=list)

    @property
    def converged(self) -> bool:
        return self.status == "converged"


def _omc(a: np.ndarray, unit: np.ndarray) -> float:
    """1 − cos(a, unit) as ½‖a/‖a‖ − unit‖² (no cancellation near 0, as the engine's)."""
    norm = float(np.linalg.norm(a))
    return 1.0 if norm == 0.0 else 0.5 * float(np.sum((a / norm - unit) ** 2))


def read_sets(keys: np.ndarray, p: np.ndarray, lead: float) -> np.ndarray:
    """(n, T) mask: the tokens whose logit is within ``lead`` of their input's top logit."""
    logits = np.einsum("itd,d->it", keys, p)
    return logits >= logits.max(axis=1, keepdims=True) - lead


def close_sets(keys: np.ndarray, sets: np.ndarray, tops: np.ndarray) -> np.ndarray:
    """The sets with every token added whose key differs from its input's top token's by a
    vector of D, the span of the sets' own key differences (to SNAP_TOL).

    Why: in p(t) = R·p_dir + q* + o(1) the direction is orthogonal to D, so such a token's logit
    gap to the top stays (k_it − k_ir)ᵀq*, finite, for ever: it shares the mass in the limit,
    however small its share (a gap of 31 at the reading is e^{-31}, outside the reading's
    log(T/1e-6)). Left out, its margin row lies in D and no direction orthogonal to D meets
    it: the equality SVM is infeasible (the ladder's conflict draws k = 96 small and k = 60
    medium were undecided so).

    One pass suffices: a token added has its difference in D already, so D does not grow."""
    basis = orthonormal_rows(equality_rows(keys, sets, tops)[1])
    if basis.shape[0] == 0:
        return sets.copy()
    scale = max(1.0, float(np.abs(keys).max()))
    diffs = keys - keys[np.arange(keys.shape[0]), tops][:, None, :]
    off = diffs - (diffs @ basis.T) @ basis  # the part of each difference outside D
    return sets | (np.linalg.norm(off, axis=-1) <= SNAP_TOL * scale)


def _tops(keys: np.ndarray, p: np.ndarray) -> np.ndarray:
    return np.argmax(np.einsum("itd,d->it", keys, p), axis=1)


def is_shared(keys: np.ndarray, sets: np.ndarray) -> bool:
    """Whether some input's set holds two tokens with different keys (twins, the very same
    key, share for ever anyway and are the single-token engine's business)."""
    for i in np.nonzero(sets.sum(axis=1) > 1)[0]:
        members = keys[i, sets[i]]
        if (members != members[:1]).any():
            return True
    return False


def equality_rows(keys: np.ndarray, sets: np.ndarray, tops: np.ndarray):
    """(A_in, A_eq) of the equality SVM: k_ir − k_it ≥ 1 for t outside S_i, k_is − k_ir = 0
    for s in S_i (r = ``tops[i]``); zero rows (twins) dropped from A_eq."""
    n, _, d = keys.shape
    rows_in, rows_eq = [], []
    for i in range(n):
        r = tops[i]
        for t in np.nonzero(~sets[i])[0]:
            rows_in.append(keys[i, r] - keys[i, t])
        for s in np.nonzero(sets[i])[0]:
            diff = keys[i, s] - keys[i, r]
            if s != r and diff.any():
                rows_eq.append(diff)
    A_in = np.array(rows_in).reshape(-1, d)
    A_eq = np.array(rows_eq).reshape(-1, d)
    return A_in, A_eq


def reduced_loss(problem: PromptProblem, sets: np.ndarray):
    """L_S as a torch function of q ∈ ℝ^d (logits outside the sets at −∞; L's input weights)."""
    keys, scores = problem.keys, problem.scores
    mask = torch.as_tensor(sets)
    neg_inf = torch.tensor(-math.inf, dtype=keys.dtype)

    def value(q: torch.Tensor) -> torch.Tensor:
        logits = torch.where(mask, keys @ q, neg_inf)
        s = torch.softmax(logits, dim=-1)
        return problem.weighted_mean(
            problem.loss.value((s * torch.where(mask, scores, 0.0)).sum(-1))
        )

    return value


def finite_part(problem: PromptProblem, sets: np.ndarray, basis: np.ndarray, q0) -> FinitePart:
    """Newton on L_S over D (orthonormal rows ``basis``) from the flow's P_D p, certified."""
    B = torch.from_numpy(np.ascontiguousarray(basis))
    value = reduced_loss(problem, sets)

    def at(z: torch.Tensor) -> torch.Tensor:
        return value(B.T @ z)

    z = B @ torch.as_tensor(np.asarray(q0, dtype=np.float64))
    steps, converged, why = 0, False, f"Newton did not converge in {NEWTON_STEPS} steps"
    for steps in range(1, NEWTON_STEPS + 1):  # noqa: B007 (the count is reported)
        grad = torch.autograd.functional.jacobian(at, z)
        hess = torch.autograd.functional.hessian(at, z)
        try:
            step = torch.linalg.solve(hess, grad)
        except RuntimeError:
            why = "singular Hessian of the reduced loss"
            break
        if not bool(torch.isfinite(step).all()):
            why = "non-finite Newton step"
            break
        z = z - step
        if float(torch.linalg.vector_norm(step)) <= STEP_TOL * max(1.0, float(z.norm())):
            converged = True
            break
    grad = torch.autograd.functional.jacobian(at, z)
    try:
        eigs = torch.linalg.eigvalsh(torch.autograd.functional.hessian(at, z))
        lo, hi = float(eigs[0]), float(eigs[-1])
    except RuntimeError:  # torch.linalg.LinAlgError (a NaN Hessian): nothing to certify
        lo = hi = math.nan
        converged, why = False, "the reduced loss's Hessian has no eigendecomposition"
    gnorm = float(grad.norm())
    ok = converged and gnorm <= GRAD_TOL and hi > 0 and lo > EIG_REL * hi
    if converged:
        why = (
            f"Newton converged in {steps} steps, ‖∇L_S‖ = {gnorm:.1e}, Hessian eigenvalues on D "
            f"in [{lo:.3g}, {hi:.3g}]"
        )
        if not ok:
            why += " (not a certified strict minimiser)"
    q = (B.T @ z).numpy()
    return FinitePart(q, basis, float(at(z)), gnorm, lo, hi, steps, ok, why)


def full_equilibrium(
    problem: PromptProblem, p: np.ndarray, basis: np.ndarray, q0: np.ndarray, sets: np.ndarray
):
    """(q, why): Newton on the full loss over D at p's D⊥ part, from p's own D part: the
    point the flow's D part relaxes to. The gradient is the engine's log-space one (its
    within-set terms cancel near q to an absolute ~1e-16, far below the Θ(1) curvature), the
    Newton matrix the reduced loss's Hessian at the iterate (what the full one is, up to the
    outside mass). q is None where Newton does not converge to gradient ≤ GRAD_TOL."""
    B = np.ascontiguousarray(basis)
    Bt = torch.from_numpy(B)
    perp_part = p - B.T @ (B @ p)
    z = B @ q0
    # the Newton matrix: the reduced loss's Hessian on the sets at the flow's point
    value = reduced_loss(problem, sets)
    perp_t = torch.from_numpy(perp_part)

    def on_d(y: torch.Tensor) -> torch.Tensor:
        return value(Bt.T @ y + perp_t)

    for step_count in range(1, NEWTON_STEPS + 1):
        point = perp_part + B.T @ z
        log_scale, vec = problem.gradient_log_np(point)
        grad = np.zeros_like(z) if log_scale == -math.inf else math.exp(log_scale) * (B @ vec)
        if not np.isfinite(grad).all():
            return None, "non-finite gradient"
        if float(np.linalg.norm(grad)) <= GRAD_TOL:
            return B.T @ z, f"{step_count - 1} Newton steps"
        hess = torch.autograd.functional.hessian(on_d, torch.from_numpy(z)).numpy()
        try:
            z = z - np.linalg.solve(hess, grad)
        except np.linalg.LinAlgError:
            return None, "singular Newton matrix"
    return None, f"Newton did not reach ‖∇‖ ≤ {GRAD_TOL:g} in {NEWTON_STEPS} steps"


def set_shares(keys: np.ndarray, sets: np.ndarray, q: np.ndarray) -> list[dict[int, float]]:
    """The split of each input's mass over its set at the finite part q."""
    out = []
    for i in range(keys.shape[0]):
        members = np.nonzero(sets[i])[0]
        logits = keys[i, members] @ q
        w = np.exp(logits - logits.max())
        out.append({int(t): float(x) for t, x in zip(members, w / w.sum(), strict=True)})
    return out


class _Pinned(PromptProblem):
    """The flow on D⊥ with the D part pinned at q* (``pinned_problem``): keys K C with a last
    coordinate holding each token's logit offset, which the field never moves (its last
    component, of the size of the others, is dropped before normalising)."""

    @property
    def difference_span(self) -> np.ndarray:
        # every coordinate: the tracer must not rotate this problem into a plain one
        return np.eye(self.keys.shape[2])

    @cached_property
    def flow_field_fn(self):
        plain = self.plain_field_fn

        def pinned_field(p: np.ndarray) -> tuple[np.ndarray, float]:
            u, lgn = plain(p)
            u = u.copy()
            u[-1] = 0.0
            norm = float(np.linalg.norm(u))
            if lgn == -math.inf or norm == 0.0:
                return np.zeros_like(u), -math.inf
            return u / norm, lgn + math.log(norm)

        return pinned_field

    def flow_jacobian_np(self, p: np.ndarray) -> np.ndarray | None:
        """The Jacobian of the pinned field u' = Pu/‖Pu‖ (P drops the last coordinate) from
        the closed-form one of u (``kernels.field_jacobian``): J' = (I − u'u'ᵀ)·P·J/‖Pu‖,
        with a zero last column (that coordinate never moves). A differenced Jacobian here
        left the offset from the ray unresolved far out (heading 0.29 at ‖p‖ = 1e7 on an
        NTP draw's relabelled twin), as it did for the full engine before its closed form."""
        jac = super().flow_jacobian_np(p)
        u, lgn = self.plain_field_fn(np.ascontiguousarray(p, dtype=np.float64))
        if jac is None or lgn == -math.inf:
            return jac
        pu = u.copy()
        pu[-1] = 0.0
        norm = float(np.linalg.norm(pu))
        if norm == 0.0:
            return np.zeros_like(jac)
        unit = pu / norm
        proj = jac.copy()
        proj[-1, :] = 0.0
        out = (proj - np.outer(unit, unit @ proj)) / norm
        out[:, -1] = 0.0
        return out


def pinned_problem(problem: PromptProblem, sets, tops, finite: FinitePart, perp: np.ndarray):
    """The pinned problem (``_Pinned``) in the coordinates y of D⊥ = span(perp's columns), or
    None where a set's projected keys differ by more than rounding.

    With the D part at q*, input i's set is one token of key C ᵀk_ir, of logit offset
    LSE_{s∈S_i}(k_isᵀq*) and of score γ̄_i = Σ_s share_s γ_is (its split at q*): each member
    becomes that token's exact twin (the same key, offset and score; twins split the mass
    equally, so each carries the offset less log|S_i|). The set then adds nothing to the field
    (a twin's terms vanish exactly), and the field is the outside tokens' alone."""
    keys, scores = problem._np
    reduced = keys @ perp  # (n, T, d − m)
    offsets = keys @ finite.q
    new_scores = scores.copy()
    scale = max(1.0, float(np.abs(keys).max()))
    for i in range(keys.shape[0]):
        members = np.nonzero(sets[i])[0]
        spread = np.abs(reduced[i, members] - reduced[i, tops[i]]).max()
        if spread > SNAP_TOL * scale:
            return None
        b = offsets[i, members]
        top = b.max()
        w = np.exp(b - top)
        total = w.sum()
        reduced[i, members] = reduced[i, tops[i]]
        offsets[i, members] = top + math.log(total) - math.log(len(members))
        new_scores[i, members] = float(w @ scores[i, members]) / total
    pinned_keys = np.concatenate([reduced, offsets[..., None]], axis=-1)
    return _Pinned(
        torch.from_numpy(pinned_keys), torch.from_numpy(new_scores), problem.loss, problem.weights
    )


def shared_limit(
    problem: PromptProblem,
    p,
    *,
    target: float = 1e-6,
    select_tol: float = 1e-6,
    persist: float = 10.0,
    max_norm: float = 1e8,
) -> SharedLimit | None:
    """Certify that the flow through p converges to a shared-mass limit (module docstring), or
    None where p shows no shared set (every input's mass on one token or its twins)."""
    from models.flows.dynamics import trace_flow  # the tracer, only needed here

    keys = problem._np[0]
    p = np.asarray(p.detach().numpy() if isinstance(p, torch.Tensor) else p, dtype=np.float64)
    lead = math.log(problem.T / select_tol)
    sets = read_sets(keys, p, lead)
    if not is_shared(keys, sets):
        return None
    tops = _tops(keys, p)
    sets = close_sets(keys, sets, tops)

    def fail(status: str, why: str, **kw) -> SharedLimit:
        return SharedLimit(status, why, sets, **kw)

    A_in, A_eq = equality_rows(keys, sets, tops)
    if len(A_in) == 0:
        return fail("inconclusive", "every token is in its input's set: no direction to certify")
    direction = solve_equality_qp(A_in, A_eq)
    if direction.status == "infeasible":
        return fail(
            "infeasible", f"the equality SVM of the sets: {direction.reason}", direction=direction
        )
    if not direction.ok:
        return fail("inconclusive", f"equality SVM: {direction.status} ({direction.reason})")
    basis = orthonormal_rows(A_eq)
    if basis.shape[0] == 0:  # is_shared saw different keys: their difference is a row
        return fail("inconclusive", "the sets' key differences span nothing: misread sets")
    q0 = basis.T @ (basis @ p)
    finite = finite_part(problem, sets, basis, q0)
    if not finite.ok:
        return fail(
            "inconclusive", f"finite part: {finite.reason}", direction=direction, finite=finite
        )
    norm0 = float(np.linalg.norm(p))
    scale = max(1.0, float(np.linalg.norm(finite.q)))
    q_full, why_full = full_equilibrium(problem, p, basis, q0, sets)
    if q_full is None:
        return fail(
            "inconclusive",
            f"the full loss's equilibrium in D: {why_full}",
            direction=direction,
            finite=finite,
        )
    handover = float(np.linalg.norm(q_full - finite.q))
    basin = float(np.linalg.norm(q0 - q_full))
    kw = dict(
        direction=direction,
        finite=finite,
        handover=handover,
        handover_norm=norm0,
        q_full=q_full,
        basin=basin,
    )
    if basin > BASIN_TOL * scale:
        why = f"the flow's D part is {basin:.2e} from its equilibrium at ‖p‖ = {norm0:.3g}"
        why += ": not settled"
        return fail("inconclusive", why, **kw)
    if handover > HANDOVER_TOL * scale:
        why = (
            f"the full loss's equilibrium in D is {handover:.2e} from q* at ‖p‖ = {norm0:.3g}: "
            "the outside tokens still pull"
        )
        return fail("inconclusive", why, **kw)
    # D⊥: an orthonormal basis of the complement of the equality rows' span
    _, _, vt = np.linalg.svd(basis, full_matrices=True)
    perp = vt[basis.shape[0] :].T  # (d, d − m)
    pinned = pinned_problem(problem, sets, tops, finite, perp)
    if pinned is None:
        return fail("inconclusive", "a set's keys differ outside D: sets misread", **kw)
    unit = direction.w / np.linalg.norm(direction.w)
    state: dict = {"start": None}

    def full_point(y: np.ndarray) -> np.ndarray:
        return finite.q + perp @ y[:-1]

    def tests(y: np.ndarray, u: np.ndarray, lgn: float) -> tuple[float, float, float, bool]:
        q = full_point(y)
        logits = keys @ q
        top = logits.max(axis=1, keepdims=True)
        raw = read_sets(keys, q, lead)  # closed already, unless a member trails far (e^-31)
        same = np.array_equal(raw, sets) or np.array_equal(
            close_sets(keys, raw, _tops(keys, q)), sets
        )
        z = np.exp(logits - top)
        z /= z.sum(axis=1, keepdims=True)
        leak = float(np.where(sets, 0.0, z).max())
        flow = perp @ u[:-1]
        return _omc(q, unit), _omc(flow, unit) if lgn > -math.inf else 1.0, leak, same

    def reached(y, u, lgn):
        omc, heading, leak, same = tests(y, u, lgn)
        norm = float(np.linalg.norm(full_point(y)))
        if not (same and leak <= select_tol and omc <= target and heading <= target):
            state["start"] = None
            return None
        if state["start"] is None:
            state["start"] = norm
        if norm >= persist * state["start"]:
            return "direction reached the equality SVM of the sets and stayed"
        return None

    y0 = np.concatenate([perp.T @ p, [1.0]])
    traj = trace_flow(pinned, y0, max_norm=max_norm, stop_when=reached, rtol=1e-5)
    y_end = traj.final.numpy()
    u_end, lgn_end = pinned.flow_field_np(y_end)
    omc, heading, leak, same = tests(y_end, u_end, lgn_end)
    q_end = full_point(y_end)
    path = finite.q + traj.ps.numpy()[:, :-1] @ perp.T
    kw.update(
        p=q_end,
        one_minus_cos=omc,
        heading=heading,
        max_other_prob=leak,
        steps=traj.evals,
        path=path,
    )
    ok = same and leak <= select_tol and omc <= target and heading <= target
    ended = (
        f"pinned flow {traj.stop} at ‖p‖ = {np.linalg.norm(q_end):.3g}: 1 − cos(p, p_dir) = "
        f"{omc:.1e}, heading {heading:.1e}, mass outside the sets {leak:.1e}"
    )
    if not ok or not traj.stop.startswith("direction reached"):
        return fail("inconclusive", ended + ("" if same else "; the sets changed"), **kw)
    why = (
        f"{ended}; q* certified ({finite.reason}); at ‖p‖ = {norm0:.3g}, where the D part was "
        f"pinned, the full loss's equilibrium in D was {handover:.1e} from q* and the flow "
        f"{basin:.1e} from it"
    )
    shares = set_shares(keys, sets, finite.q)
    return SharedLimit("converged", why, sets, shares=shares, **kw)
