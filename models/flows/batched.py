"""The large rung's batched path (issue 23): many prompt problems' flows stepped together.

The CPU engine (``models.flows.dynamics.converge``) traces one flow at a time with LSODA over the
compiled field of models/flows/kernels.py. A sweep of the large rung decides hundreds of
instances of n·T·d up to 10⁷, and each field evaluation is then a few big reductions: work
a GPU does well, but only in bulk. This module evaluates the field of B instances at once in
float64 torch ops (on whatever device ``models.numerics.device`` names) and steps their transients
together; the certificate stays the CPU engine's.

Why split the flow in two. The arc-length flow dp/ds = −∇L/‖∇L‖ is stiff once the selection
is made: the offset of p from its asymptotic ray relaxes at a rate ~‖k_it − k_iα‖² that does
not fade with ‖p‖, so an explicit Runge–Kutta step is held to ~0.1–0.3 in arc length for
ever (``trace_flow``'s docstring: ‖p‖ = 1e3 took 3,000 explicit steps in 14-D). In the
transient, where the selection is still being made, steps of that length are what accuracy
asks for anyway, so an explicit scheme loses nothing there, and it is the only kind that
batches (no per-instance Newton solves). Once every input's top token leads its runner-up
by log(T/select_tol) and ‖p‖ has passed ``handoff_norm``, the instance is handed to
``converge(problem, p0=p)``: LSODA switches to BDF in the stiff phase, its steps grow with
‖p‖, and every certificate (the SVM, the persistence test, the relaxed offset) is exactly
the CPU engine's. The batch code never gives a verdict: an instance the transient could
not bring to a clear selection (step budget, a stationary point) is handed off as it is.

The field is the kernel's arithmetic (``kernels.token_terms``, ``coefficients``,
``combine``, ``field``) in log space: per token, (log|w|, sign w) with
w_it = ℓ'(m_i)·s_it·(γ_it − m_i), γ_it − m_i formed relative to the top-logit token r_i
(γ_ir − m_i = −D_i, D_i = Σ_{u≠r} s_iu(γ_iu − γ_ir) summed relative to the largest logit
among its own tokens), and ∇L = (1/n) Σ_it w_it (k_it − k_ir) summed after rescaling by each
instance's largest live weight. So saturated softmaxes (logit gaps of 10³–10⁴, weights below
e^{−745}) keep their relative accuracy, as on the CPU.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from models.flows import kernels
from models.numerics.device import device as default_device
from models.problems.attention import PromptProblem

Tensor = torch.Tensor
DTYPE = torch.float64
NEG_INF = -math.inf


@dataclass(frozen=True)
class Tableau:
    """An explicit embedded Runge–Kutta pair with a first-same-as-last stage: stage s is
    U(p + h Σ_j a[s][j] k_j) at node c[s]; p_new = p + h Σ b_s k_s; the error estimate is
    h Σ e_s k_s over the stages and U(p_new); ``order`` is the embedded (lower) order."""

    name: str
    a: tuple[tuple[float, ...], ...]
    b: tuple[float, ...]
    e: tuple[float, ...]
    order: int


#: Bogacki–Shampine 3(2), scipy's RK23: 3 field evaluations per step.
BS32 = Tableau(
    "bs32",
    ((), (1 / 2,), (0.0, 3 / 4)),
    (2 / 9, 1 / 3, 4 / 9),
    (5 / 72, -1 / 12, -1 / 9, 1 / 8),
    2,
)
#: Dormand–Prince 5(4), scipy's RK45: 6 evaluations per step. Measured on four instances of
#: (n, T, d) = (64, 16, 64) at rtol = 1e-5: half the steps of Bogacki–Shampine (1,822 against
#: 3,569 accepted) for about the same evaluations (4,297 against 4,141): the steps are held by
#: stiffness, not accuracy, as the module docstring says. The default for its fewer rounds
#: (each round is a host synchronisation on a GPU).
DP54 = Tableau(
    "dp54",
    (
        (),
        (1 / 5,),
        (3 / 40, 9 / 40),
        (44 / 45, -56 / 15, 32 / 9),
        (19372 / 6561, -25360 / 2187, 64448 / 6561, -212 / 729),
        (9017 / 3168, -355 / 33, 46732 / 5247, 49 / 176, -5103 / 18656),
    ),
    (35 / 384, 0.0, 500 / 1113, 125 / 192, -2187 / 6784, 11 / 84),
    (-71 / 57600, 0.0, 71 / 16695, -71 / 1920, 17253 / 339200, -22 / 525, 1 / 40),
    4,
)
TABLEAUS = {t.name: t for t in (BS32, DP54)}
#: Step-size control as scipy's solve_ivp: a safety factor and the bounds of one change.
SAFETY, MIN_FACTOR, MAX_FACTOR = 0.9, 0.2, 5.0
#: The first trial step in arc length (the transient's own scale: the field is a unit
#: vector, and stiffness holds explicit steps to ~0.1–0.3).
FIRST_STEP = 0.1


# ---- the padded batch ------------------------------------------------------------------------
@dataclass
class BatchedProblems:
    """B prompt problems of one key dimension d and one loss, padded to (B, n_max, T_max, d).

    keys (B, n, T, d) and scores (B, n, T) float64 on ``device``; ``token_mask`` (B, n, T) is
    True on real tokens, ``input_mask`` (B, n) on real inputs; ``sizes`` (B, 2) the real
    (n, T); ``log_n`` (B,) log n_b. A padded token has key 0, score 0 and logit −inf (zero
    softmax mass). A padded input has one live token of key 0 and score 0: its D_i is 0, so
    every weight of it is exactly zero, and its weights are masked besides (it must add
    nothing to ∇L). Use ``BatchedProblems.of(problems)``.
    """

    keys: Tensor
    scores: Tensor
    token_mask: Tensor
    input_mask: Tensor
    sizes: Tensor
    log_n: Tensor
    code: int
    param: float
    problems: tuple[PromptProblem, ...]

    @classmethod
    def of(cls, problems: Sequence[PromptProblem], device=None) -> BatchedProblems:
        """Pad ``problems`` together on ``device`` (default:
        ``models.numerics.device.device()``)."""
        problems = tuple(problems)
        code, param = _common_loss(problems)
        dev = default_device() if device is None else torch.device(device)
        B, d = len(problems), problems[0].dim
        n_max = max(pr.n for pr in problems)
        T_max = max(pr.T for pr in problems)
        keys = torch.zeros((B, n_max, T_max, d), dtype=DTYPE)
        scores = torch.zeros((B, n_max, T_max), dtype=DTYPE)
        token_mask = torch.zeros((B, n_max, T_max), dtype=torch.bool)
        input_mask = torch.zeros((B, n_max), dtype=torch.bool)
        for b, pr in enumerate(problems):
            keys[b, : pr.n, : pr.T] = pr.keys.detach().cpu()
            scores[b, : pr.n, : pr.T] = pr.scores.detach().cpu()
            token_mask[b, : pr.n, : pr.T] = True
            input_mask[b, : pr.n] = True
        token_mask[:, :, 0] = True  # a padded input's one live token (key 0, score 0)
        sizes = torch.tensor([[pr.n, pr.T] for pr in problems], dtype=torch.long)
        log_n = torch.log(sizes[:, 0].to(DTYPE))
        return cls(
            keys.to(dev),
            scores.to(dev),
            token_mask.to(dev),
            input_mask.to(dev),
            sizes.to(dev),
            log_n.to(dev),
            code,
            param,
            problems,
        )

    @property
    def B(self) -> int:
        return self.keys.shape[0]

    @property
    def d(self) -> int:
        return self.keys.shape[3]

    @property
    def device(self) -> torch.device:
        return self.keys.device

    def subset(self, index: Tensor) -> BatchedProblems:
        """The instances at ``index`` (a long tensor), as a batch of their own."""
        rows = index.tolist()
        return BatchedProblems(
            self.keys[index],
            self.scores[index],
            self.token_mask[index],
            self.input_mask[index],
            self.sizes[index],
            self.log_n[index],
            self.code,
            self.param,
            tuple(self.problems[i] for i in rows),
        )


def _common_loss(problems: tuple[PromptProblem, ...]) -> tuple[int, float]:
    """The batch's one (kernel code, parameter), with a clear error when there is none."""
    if not problems:
        raise ValueError("BatchedProblems: no problems to batch")
    for pr in problems:
        if not isinstance(pr, PromptProblem):
            raise ValueError(f"BatchedProblems: expected PromptProblem, got {type(pr).__name__}")
        if pr.weights is not None:  # the batch's field divides by each problem's n (log_n)
            raise ValueError("BatchedProblems: input-weighted problems are not batched")
    dims = sorted({pr.dim for pr in problems})
    if len(dims) > 1:
        raise ValueError(f"BatchedProblems: the problems' key dimensions differ: d in {dims}")
    losses = sorted({(pr.loss.name, pr.loss.kernel_param) for pr in problems})
    if len(losses) > 1:
        raise ValueError(f"BatchedProblems: the problems' losses differ: {losses}")
    loss = problems[0].loss
    if loss.kernel_code is None:
        raise ValueError(
            f"BatchedProblems: loss {loss.name!r} has no kernel code (models/flows/kernels.py); "
            "the batched field supports the compiled losses only"
        )
    return loss.kernel_code, float(loss.kernel_param)


# ---- the field ---------------------------------------------------------------------------------
def _masked_exp(x: Tensor, live: Tensor) -> Tensor:
    """e^x where ``live``, 0 elsewhere, without ever forming −inf − (−inf) = NaN."""
    return torch.where(live, torch.exp(torch.where(live, x, 0.0)), 0.0)


def _signed_log(x: Tensor) -> tuple[Tensor, Tensor]:
    """(log|x|, sign x), with (−inf, 0) at 0 (torch.log(0) = −inf already, but no warnings)."""
    return torch.log(x.abs()), torch.sign(x)


def _token_terms(batch: BatchedProblems, z: Tensor, r: Tensor):
    """(log|γ_it − m_i| + log s_it, its sign, m_i), each (B, n, T) but m (B, n).

    ``kernels.token_terms`` on the batch: centred at the top-logit token r, γ_ir − m_i = −D_i
    and γ_it − m_i = (γ_it − γ_ir) − D_i, with D_i = Σ_{u≠r} s_iu (γ_iu − γ_ir) summed relative
    to the largest logit among its own tokens (γ_u ≠ γ_r): relative to the top logit all its
    terms could underflow together. Tokens tied with r in score get exactly −D_i.
    """
    gam, live = batch.scores, batch.token_mask
    top = z.gather(-1, r[..., None])  # (B, n, 1)
    gam_r = gam.gather(-1, r[..., None])
    is_r = torch.zeros_like(live).scatter_(-1, r[..., None], True)
    same = live & (gam == gam_r)  # r and the tokens tied with it in score
    other = live & ~same
    ref = torch.where(other, z, NEG_INF).amax(-1, keepdim=True)  # −inf: no such token
    has_other = ref > NEG_INF
    tied = _masked_exp(z - top, same & ~is_r).sum(-1, keepdim=True)
    ref_safe = torch.where(has_other, ref, 0.0)
    e = _masked_exp(z - ref_safe, other)
    mass = e.sum(-1, keepdim=True)
    dsum = (e * (gam - gam_r)).sum(-1, keepdim=True)  # D_i·Σ_u e^{z_u − z_r}·e^{z_r − ref}
    lead = torch.where(has_other, ref - top, NEG_INF)  # ≤ 0
    log_total = torch.log1p(tied + torch.exp(lead) * mass)  # log Σ_u e^{z_u − z_r}
    log_abs_dsum, sign_dev = _signed_log(dsum)
    log_dev = torch.where(dsum != 0, lead + log_abs_dsum - log_total, NEG_INF)
    dev = sign_dev * torch.exp(log_dev)  # D_i (may underflow: then it cannot matter)
    log_s = torch.where(live, z - top, NEG_INF) - log_total
    value = (gam - gam_r) - dev  # γ_t − m_i for the tokens not tied with r
    log_value, sign_value = _signed_log(value)
    log_sd = torch.where(same, log_s + log_dev, log_s + log_value)
    sign_sd = torch.where(same, -sign_dev, sign_value)
    sign_sd = torch.where(live, sign_sd, 0.0)
    return log_sd, sign_sd, (gam_r + dev)[..., 0]


def _loss_log_deriv(code: int, param: float, m: Tensor) -> tuple[Tensor, Tensor]:
    """(log|ℓ'(m)|, sign ℓ'(m)) elementwise: ``kernels.loss_log_deriv`` on tensors."""
    if code == kernels.LOGISTIC:  # log σ(−m) = −softplus(m), exact for every m
        return -(m.clamp_min(0.0) + torch.log1p(torch.exp(-m.abs()))), torch.full_like(m, -1.0)
    if code == kernels.EXPONENTIAL:
        return -m, torch.full_like(m, -1.0)
    if code == kernels.CORRELATION:
        return torch.zeros_like(m), torch.full_like(m, -1.0)
    if code == kernels.SQUARE:  # ℓ'(m) = −2(target − m), zero at the target
        return _signed_log(-2.0 * (param - m))
    raise ValueError(f"batched_field: unknown loss code {code}")


def _combine(batch: BatchedProblems, log_w: Tensor, sign_w: Tensor, diff: Tensor):
    """Per instance, (1/n) Σ_it w_it (k_it − k_ir) = e^{scale}·vec with max|vec| = 1:
    (scale (B,), vec (B, d)); scale −inf and vec 0 for the zero vector (``kernels.combine``).

    The weights are rescaled by the instance's largest LIVE weight before any exponential: a
    term with t ≠ r, w ≠ 0 and k_it ≠ k_ir. A twin of r (its very key) has a zero term
    however large its weight, and rescaling by it would flush every genuine term to zero.
    """
    B = log_w.shape[0]
    present = (sign_w != 0) & (diff != 0).any(-1)  # r itself has diff 0: excluded too
    peak = torch.where(present, log_w, NEG_INF).reshape(B, -1).amax(-1)  # (B,)
    alive = peak > NEG_INF
    peak_safe = torch.where(alive, peak, 0.0)[:, None, None]
    # above the peak: a twin's weight (a zero term whose exponential could overflow, ∞·0)
    use = (sign_w != 0) & (log_w <= peak_safe) & alive[:, None, None]
    coef = sign_w * _masked_exp(log_w - peak_safe, use)
    vec = torch.einsum("bnt,bntd->bd", coef, diff)
    top = vec.abs().amax(-1)  # (B,)
    nonzero = alive & (top > 0)
    vec = torch.where(nonzero[:, None], vec / torch.where(nonzero, top, 1.0)[:, None], 0.0)
    scale = torch.where(nonzero, peak_safe[:, 0, 0] + torch.log(top) - batch.log_n, NEG_INF)
    return scale, vec


def _logits(batch: BatchedProblems, P: Tensor) -> Tensor:
    """k_itᵀp_b (B, n, T), −inf on padded tokens (zero softmax mass)."""
    z = torch.einsum("bntd,bd->bnt", batch.keys, P)
    return torch.where(batch.token_mask, z, NEG_INF)


def _check_points(batch: BatchedProblems, P) -> Tensor:
    P = torch.as_tensor(P, dtype=DTYPE, device=batch.device)
    if P.shape != (batch.B, batch.d):
        raise ValueError(f"P: expected shape {(batch.B, batch.d)}, got {tuple(P.shape)}")
    return P


def batched_field(batch: BatchedProblems, P) -> tuple[Tensor, Tensor]:
    """Every instance's unit flow direction −∇L/‖∇L‖ (B, d) at P (B, d) and log‖∇L‖ (B,).

    ``kernels.field`` on the batch (module docstring): coefficients in log space centred at
    each input's top-logit token (ties: the lowest index, as numpy's and torch's argmax), summed
    after rescaling by the instance's largest live weight, then normalised. A stationary point
    (every term zero) gives U = 0 and log‖∇L‖ = −inf, with no NaN.
    """
    P = _check_points(batch, P)
    z = _logits(batch, P)
    r = z.argmax(-1)  # (B, n)
    log_sd, sign_sd, m = _token_terms(batch, z, r)
    log_lp, sign_lp = _loss_log_deriv(batch.code, batch.param, m)
    log_w = log_sd + log_lp[..., None]
    sign_w = torch.where(batch.input_mask[..., None], sign_sd * sign_lp[..., None], 0.0)
    k_r = batch.keys.gather(2, r[..., None, None].expand(-1, -1, 1, batch.d))
    scale, vec = _combine(batch, log_w, sign_w, batch.keys - k_r)
    norm = torch.linalg.vector_norm(vec, dim=-1)  # in [1, √d] where vec ≠ 0: no under/overflow
    live = scale > NEG_INF
    U = torch.where(live[:, None], -vec / torch.where(live, norm, 1.0)[:, None], 0.0)
    log_norm = torch.where(live, scale + torch.log(torch.where(live, norm, 1.0)), NEG_INF)
    return U, log_norm


def selection_leads(batch: BatchedProblems, P) -> Tensor:
    """Per instance, the smallest lead of an input's top logit over its runner-up with a
    different key (+inf when there is none): ``kernels.selection`` on the batch. A twin of the
    top token (its very key) has its logit for every p, so no lead over it ever grows."""
    P = _check_points(batch, P)
    z = _logits(batch, P)
    r = z.argmax(-1)
    top = z.gather(-1, r[..., None])
    k_r = batch.keys.gather(2, r[..., None, None].expand(-1, -1, 1, batch.d))
    differs = (batch.keys != k_r).any(-1) & batch.token_mask
    second = torch.where(differs, z, NEG_INF).amax(-1, keepdim=True)
    lead = torch.where(second > NEG_INF, top - second, math.inf)[..., 0]
    lead = torch.where(batch.input_mask, lead, math.inf)
    return lead.amin(-1)


# ---- the batched transient ---------------------------------------------------------------------
@dataclass
class Transient:
    """Where the batched transient left each instance: P (B, d) on the CPU, ``ready`` (B,)
    whether the selection was read with ‖p‖ ≥ handoff_norm, and per instance why it stopped
    ("selection read", "stationary point", "step budget"), its accepted and rejected steps."""

    P: Tensor
    ready: Tensor
    reasons: list[str]
    accepted: Tensor
    rejected: Tensor
    evaluations: int  # batched field evaluations (each over every still-active instance)
    seconds: float


def _error_norm(err: Tensor, p0: Tensor, p1: Tensor, rtol: float, atol: float) -> Tensor:
    """RMS of err/(atol + rtol·max(|p0|, |p1|)) per instance, as scipy's explicit solvers."""
    scale = atol + rtol * torch.maximum(p0.abs(), p1.abs())
    return torch.sqrt(torch.mean((err / scale) ** 2, dim=-1))


def _rk_step(batch: BatchedProblems, p: Tensor, k1: Tensor, h: Tensor, tab: Tableau):
    """One step of ``tab`` for dp/ds = U(p) from p with k1 = U(p) and steps h (B,):
    (p_new, U(p_new), log‖∇L‖ at p_new, error estimate)."""
    hh = h[:, None]
    ks = [k1]
    for row in tab.a[1:]:
        ks.append(
            batched_field(batch, p + hh * sum(a * k for a, k in zip(row, ks, strict=True)))[0]
        )
    p_new = p + hh * sum(b * k for b, k in zip(tab.b, ks, strict=True))
    k_new, lgn = batched_field(batch, p_new)
    err = hh * sum(e * k for e, k in zip(tab.e, [*ks, k_new], strict=True))
    return p_new, k_new, lgn, err


def transient(
    batch: BatchedProblems,
    P0=None,
    *,
    handoff_norm: float = 10.0,
    select_tol: float = 1e-6,
    rtol: float = 1e-5,
    atol: float = 1e-9,
    max_steps: int = 5_000,
    method: str = "dp54",
    progress: bool | Callable[[int, int], None] = False,
) -> Transient:
    """Step every unfinished instance's arc-length flow together with an explicit embedded
    Runge–Kutta pair (``method``: "dp54", Dormand–Prince 5(4), or "bs32"), a step size per
    instance (error atol + rtol·|p_j| per coordinate, as the CPU engine), until
    its selection is read (every input's top logit leads its runner-up with a different key by
    log(T_b/select_tol): each other token then has softmax mass ≤ select_tol) and ‖p‖ ≥
    handoff_norm, or its field vanishes (a stationary point), or it has taken ``max_steps``
    step attempts. An instance is never dropped: whatever stopped it, P holds where it is.

    Why explicit: the flow is stiff past the transient (module docstring), so explicit steps
    stay at ~0.1–0.3 in arc length; that is what the transient needs anyway, and only an
    explicit scheme steps B instances with no per-instance linear algebra.

    ``progress``: True prints a line per 100 rounds to stderr; a callable gets
    (round, instances still stepping) after every round.
    """
    t0 = time.perf_counter()
    if handoff_norm < 0 or not rtol > 0 or not atol >= 0 or max_steps < 1:
        raise ValueError(
            f"transient: need handoff_norm ≥ 0, rtol > 0, atol ≥ 0, max_steps ≥ 1; got "
            f"{handoff_norm}, {rtol}, {atol}, {max_steps}"
        )
    if method not in TABLEAUS:
        raise ValueError(f"transient: method must be one of {sorted(TABLEAUS)}, got {method!r}")
    tab = TABLEAUS[method]
    if not 0 < select_tol < 1:
        raise ValueError(f"transient: select_tol must lie in (0, 1), got {select_tol}")
    B, dev = batch.B, batch.device
    P = (
        torch.zeros((B, batch.d), dtype=DTYPE, device=dev)
        if P0 is None
        else _check_points(batch, P0)
    )
    P = P.clone()
    need = torch.log(batch.sizes[:, 1].to(DTYPE) / select_tol)  # log(T_b/select_tol)
    reasons = ["step budget"] * B
    accepted = torch.zeros(B, dtype=torch.long)
    rejected = torch.zeros(B, dtype=torch.long)
    ready = torch.zeros(B, dtype=torch.bool)

    idx = torch.arange(B, device=dev)  # the active instances' rows of the full batch
    sub = batch
    p = P.clone()
    k1, lgn = batched_field(sub, p)
    h = torch.full((B,), FIRST_STEP, dtype=DTYPE, device=dev)
    attempts = torch.zeros(B, dtype=torch.long, device=dev)
    evaluations, rounds = 1, 0
    done = _finished(sub, p, lgn, need[idx], handoff_norm)
    while True:
        stop = done | (attempts >= max_steps)
        if bool(stop.any()):
            _record(stop, done, lgn, idx, p, P, reasons, ready)
            keep = ~stop
            if not bool(keep.any()):
                break
            # Drop the stopped instances' copies: a gather costs about one field evaluation
            # and happens at most B times; a dead slot would cost one per stage, every round.
            rows = keep.nonzero()[:, 0]
            sub, idx = sub.subset(rows), idx[rows]
            p, k1, lgn, h, attempts = p[rows], k1[rows], lgn[rows], h[rows], attempts[rows]
        p_new, k_new, lgn_new, err = _rk_step(sub, p, k1, h, tab)
        evaluations += len(tab.b)
        rounds += 1
        attempts += 1
        error = _error_norm(err, p, p_new, rtol, atol)
        ok = error <= 1.0
        factor = SAFETY * torch.where(error > 0, error, 1e-10) ** (-1.0 / (tab.order + 1))
        # a non-finite error estimate (never expected) shrinks the step, never makes it NaN
        factor = torch.nan_to_num(factor, nan=MIN_FACTOR).clamp(MIN_FACTOR, MAX_FACTOR)
        factor = torch.where(ok, factor, factor.clamp_max(1.0))  # a rejected step shrinks
        cpu_idx, cpu_ok = idx.cpu(), ok.cpu()
        accepted[cpu_idx[cpu_ok]] += 1
        rejected[cpu_idx[~cpu_ok]] += 1
        p = torch.where(ok[:, None], p_new, p)
        k1 = torch.where(ok[:, None], k_new, k1)
        lgn = torch.where(ok, lgn_new, lgn)
        h = h * factor
        done = _finished(sub, p, lgn, need[idx], handoff_norm)
        _report(progress, rounds, int(idx.numel()))
    return Transient(
        P.cpu(), ready, reasons, accepted, rejected, evaluations, time.perf_counter() - t0
    )


def _finished(batch: BatchedProblems, p: Tensor, lgn: Tensor, need: Tensor, handoff: float):
    """Instances whose transient is over: selection read and ‖p‖ ≥ handoff, or stationary."""
    read = selection_leads(batch, p) >= need
    far = torch.linalg.vector_norm(p, dim=-1) >= handoff
    return (read & far) | (lgn == NEG_INF)


def _record(stop, done, lgn, idx, p, P, reasons, ready) -> None:
    """Write the stopped instances' p into P and say why each stopped."""
    rows = stop.nonzero()[:, 0]
    P[idx[rows]] = p[rows]
    for row in rows.tolist():
        b = int(idx[row])
        if bool(lgn[row] == NEG_INF):
            reasons[b] = "stationary point"
        elif bool(done[row]):
            reasons[b], ready[b] = "selection read", True


def _report(progress, rounds: int, active: int) -> None:
    if callable(progress):
        progress(rounds, active)
    elif progress and rounds % 100 == 0:
        print(f"batched transient: round {rounds}, {active} instances stepping", file=sys.stderr)


def converge_many(
    problems: Sequence[PromptProblem],
    *,
    device=None,
    handoff_norm: float = 10.0,
    max_transient_steps: int = 5_000,
    method: str = "dp54",
    progress: bool | Callable[[int, int], None] = False,
    **converge_kwargs,
):
    """``converge`` for every problem, the transient batched on ``device``: a list of Outcomes
    in the problems' order.

    Each instance's transient is stepped by ``transient`` (from p = 0, or from the ``p0``
    given in converge_kwargs, one shared start of dimension d); then ``converge(problem,
    p0=p, **converge_kwargs)`` takes it from where it stopped, on the CPU, for the stiff far
    phase and the certificate. The verdicts are the CPU engine's: the batch code only
    chooses where LSODA starts, and an instance it could not bring to a clear selection is
    handed off as it is. ``rtol``, ``atol`` and ``select_tol`` in converge_kwargs also set the
    transient's error control and selection test.
    """
    from models.flows.dynamics import converge  # the engine: the certificates are its own

    batch = BatchedProblems.of(problems, device=device)
    P0 = converge_kwargs.pop("p0", None)
    if P0 is not None:
        p0 = torch.as_tensor(P0, dtype=DTYPE).reshape(1, -1)
        P0 = p0.expand(batch.B, -1).to(batch.device)
    run = transient(
        batch,
        P0,
        handoff_norm=handoff_norm,
        select_tol=converge_kwargs.get("select_tol", 1e-6),
        rtol=converge_kwargs.get("rtol", 1e-5),
        atol=converge_kwargs.get("atol", 1e-9),
        max_steps=max_transient_steps,
        method=method,
        progress=progress,
    )
    return [converge(problem, p0=run.P[b], **converge_kwargs) for b, problem in enumerate(problems)]
