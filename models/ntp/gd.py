"""Gradient descent on an NTP loss (spec ntp.md §2.5, §2.14): W ← W − η ∇L(W), for any
model with ``gradient(W)`` (``models.ntp.attention.NTPAttention``,
``models.ntp.linear.LinearNTP``).

The theory's step is constant (η ≤ 1/L for the attention model, η = 0.5 in the experiments of
2402.18551), so there is no line search and no normalisation: normalised GD cannot settle the
finite part (spec §2.10, control C10). Along the run ‖W‖ grows like log k, so a step is never
close to saturating float64 within the 1e5 steps the spec runs (log off-mass stays above −20,
§6.4); the gradient itself comes from the model's log-space form.

``batched_attention_gd`` runs many attention NTP instances at once (GD, NGD or the official
recipe), in token coordinates, with a compiled step loop; ``batched_linear_gd`` runs many
linear problems at once (the claims of 2402.18551 share one
such run of 1e5 steps: 100 µs a step one problem at a time would cost 10 s per problem).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
from numba import njit

from models.ntp.attention import sample_table, smoothness_bound

#: The official recipe's ε (float64 machine epsilon, inside the log and the normalisation).
EPS = float(np.finfo(np.float64).eps)


@dataclass(frozen=True)
class GDRun:
    """``iterates[k]``: W after k steps, for every k in the run's ``record`` and its last step;
    ``stopped``: why it ended early ("" when it ran every step)."""

    iterates: dict[int, np.ndarray]
    steps: int
    lr: float
    stopped: str
    seconds: float

    @property
    def last(self) -> np.ndarray:
        return self.iterates[self.steps]


def gd(model, W0, *, lr: float, steps: int, record: Iterable[int] = ()) -> GDRun:
    """``steps`` GD steps of size ``lr`` from W0; a non-finite gradient ends the run early
    (recorded in ``stopped``; the iterates kept are the finite ones)."""
    if not (math.isfinite(lr) and lr > 0):
        raise ValueError(f"lr: expected a finite step > 0, got {lr!r}")
    if steps < 0:
        raise ValueError(f"steps: expected ≥ 0, got {steps}")
    t0 = time.perf_counter()
    W = np.array(W0, dtype=np.float64, copy=True)
    want = {int(k) for k in record if 0 <= int(k) <= steps}
    iterates = {0: W.copy()} if 0 in want else {}
    stopped = ""
    k = 0
    for k in range(1, steps + 1):
        G = model.gradient(W)
        if not np.isfinite(G).all():
            stopped, k = f"non-finite gradient at step {k}", k - 1
            break
        W = W - lr * G
        if k in want:
            iterates[k] = W.copy()
    iterates[k] = W.copy()
    return GDRun(iterates, k, float(lr), stopped, time.perf_counter() - t0)


@dataclass(frozen=True)
class BatchRun:
    """``iterates[k][b]``: W of case b after k steps (its own V×d shape)."""

    iterates: dict[int, tuple[np.ndarray, ...]]
    finite: bool


def batched_linear_gd(
    problems, W0s, *, eta: float, steps: int, record, normalized: bool = False
) -> BatchRun:
    """GD with step eta on every linear NTP problem (``models.ntp.linear.LinearNTP``) at once,
    iterates recorded at the steps in ``record``; ``normalized``: NGD, each problem's step
    eta·G/‖G‖_F (no + ε).

    Problems of different sizes are zero-padded to one (B, V, d, m) shape: a padded context
    has π̂ = 0 (no term), a padded embedding coordinate is 0 in every h̄_j (its column of W
    never moves from 0), a padded token has logit −∞ (probability 0, its row of W never
    moves). The gradient is `LinearNTP.gradient`'s log-space form, vectorised:
    Σ_j π̂_j (q_j − p̂_j) h̄_jᵀ with q_z − p̂_z = (q^S_z − p̂_z) − q^S_z ε_j on S_j and q_z off
    it (never 1 − a number near 1); tests/test_ntp_linear.py checks one step of it against
    `LinearNTP.gradient`."""
    B = len(problems)
    V = max(p.vocab for p in problems)
    d = max(p.dim for p in problems)
    m = max(p.m for p in problems)
    H = np.zeros((B, d, m))
    P = np.zeros((B, m, V))
    pi = np.zeros((B, m))
    supp = np.zeros((B, m, V), dtype=bool)
    real = np.zeros((B, m, V), dtype=bool)
    W = np.zeros((B, V, d))
    for b, (p, W0) in enumerate(zip(problems, W0s, strict=True)):
        H[b, : p.dim, : p.m] = p.H
        P[b, : p.m, : p.vocab] = p.P
        pi[b, : p.m] = p.pi
        supp[b, : p.m, : p.vocab] = p.support
        supp[b, p.m :, 0] = True  # padded contexts: weight 0, any valid support
        real[b, :, : p.vocab] = True
        W[b, : p.vocab, : p.dim] = W0
    on_f = supp.astype(float)
    off_f = (real & ~supp).astype(float)
    # the shift of each context's logits: its anchor token (the first of S_j), picked by a
    # one-hot product; in-support logit gaps stay O(1) along GD and off-support ones go to −∞
    # slowly (≥ −20 at 1e5 steps, spec §6.4), so e^{ℓ − ℓ_anchor} neither overflows nor loses
    # the support; the off-support terms are exact however small.
    anchor = np.zeros((B, m, V))
    for b in range(B):
        anchor[b, np.arange(m), supp[b].argmax(axis=1)] = 1.0
    ones = np.ones((V, 1))
    Ht = np.ascontiguousarray(np.swapaxes(H, 1, 2))  # (B, m, d)
    piP = pi[:, :, None]
    Wt = np.ascontiguousarray(np.swapaxes(W, 1, 2))  # (B, d, V): the state
    want = set(record)
    iterates = {}
    finite = True
    for k in range(1, steps + 1):
        logits = Ht @ Wt  # (B, m, V)
        e = np.exp(logits - (logits * anchor) @ ones)
        eon = e * on_f
        eoff = e * off_f
        son = eon @ ones
        soff = eoff @ ones
        total = son + soff
        qS = eon / son
        # on S_j: (q^S − p̂) − q^S·ε with ε = off/total; off S_j: q_v = e_v/total
        coef = (qS - P) - qS * (soff / total) + eoff / total
        G = H @ (coef * piP)
        if normalized:
            G /= np.sqrt((G * G).sum(axis=(1, 2), keepdims=True))
        Wt -= eta * G
        if k in want:
            if not np.isfinite(Wt).all():
                finite = False
                break
            iterates[k] = tuple(Wt[b, : p.dim, : p.vocab].T.copy() for b, p in enumerate(problems))
    return BatchRun(iterates, finite)


# ---- the attention NTP, batched, in token coordinates ------------------------------------------


@dataclass(frozen=True, eq=False)
class Batch:
    """Instances padded to one shape: B draws, up to K tokens, N samples, m slots."""

    datas: tuple
    G: np.ndarray  # (B, K, K) Gram matrices E Eᵀ (zero-padded)
    idx: np.ndarray  # (B, N*m) flat index v*K + k of each slot's logit in M
    logc: np.ndarray  # (B, N, m) log multiplicities, −inf on padding
    lab: np.ndarray  # (B, N, m) the label slot (bool)
    off: np.ndarray  # (B, N, m) valid non-label slots (bool)
    w: np.ndarray  # (B, N) 1/n, 0 on padded samples
    scatter: np.ndarray  # (B, N*m, K*K) one-hot of idx (weighted sums of g into C)
    flat: np.ndarray  # (B, N, m) index of each slot's logit in M.ravel()
    labf: np.ndarray  # lab as float
    offf: np.ndarray  # off as float


def batch(datas) -> Batch:
    datas = tuple(datas)
    tables = [sample_table(d.sequences, d.labels) for d in datas]
    B = len(datas)
    K = max(d.num_tokens for d in datas)
    N = max(t.n for t in tables)
    m = max(t.tokens.shape[1] for t in tables)
    G = np.zeros((B, K, K))
    idx = np.zeros((B, N, m), dtype=np.int64)
    logc = np.full((B, N, m), -np.inf)
    lab = np.zeros((B, N, m), dtype=bool)
    w = np.zeros((B, N))
    for b, (d, t) in enumerate(zip(datas, tables, strict=True)):
        E = d.embeddings
        G[b, : d.num_tokens, : d.num_tokens] = E @ E.T
        n, mm = t.tokens.shape
        idx[b, :n, :mm] = t.tokens * K + t.query[:, None]
        logc[b, :n, :mm] = t.log_count
        lab[b, np.arange(n), t.label_slot] = True
        lab[b, n:, 0] = True  # padded samples: a lone label (g = 0)
        logc[b, n:, 0] = 0.0
        w[b, :n] = 1.0 / n
    off = ~lab & np.isfinite(logc)
    idx = idx.reshape(B, N * m)
    scatter = np.zeros((B, N * m, K * K))
    np.put_along_axis(scatter, idx[:, :, None], 1.0, axis=2)
    scatter *= np.isfinite(logc).reshape(B, N * m, 1)
    flat = (np.arange(B)[:, None] * K * K + idx).reshape(B, N, m)
    return Batch(datas, G, idx, logc, lab, off, w, scatter, flat, lab * 1.0, off * 1.0)


@dataclass(frozen=True, eq=False)
class Run:
    """``W[k]``: list of the B iterates after k steps (k in the run's record); ``losses``:
    (len(loss_steps), B) the loss every ``loss_every`` steps (log space, before the step)."""

    W: dict[int, list[np.ndarray]]
    loss_steps: np.ndarray
    losses: np.ndarray


@njit(cache=True)
def _kernel(M, S, G, idx, logc, lab, off, w, eta, steps, method, lr, rec, out_S, every, out_L):
    """The step loop (numba): method 0 GD (step eta[b]), 1 NGD (lr/‖∇‖), 2 the official
    recipe (autograd arithmetic of −log(s_y + eps), lr/(‖∇‖ + eps)). M, S updated in place;
    S at the steps ``rec`` (ascending) into out_S, the loss every ``every`` steps into out_L."""
    B, K = M.shape[0], M.shape[1]
    N, m = logc.shape[1], logc.shape[2]
    C = np.zeros((K, K))
    T = np.zeros((K, K))
    D = np.zeros((K, K))
    e = np.zeros(m)
    r = 0
    li = 0
    for k in range(steps + 1):
        if r < rec.size and rec[r] == k:
            out_S[r] = S
            r += 1
        if k == steps:
            break
        want = k % every == 0
        for b in range(B):
            C[:] = 0.0
            loss = 0.0
            for i in range(N):
                if w[b, i] == 0.0:
                    continue
                mx = -np.inf
                for j in range(m):
                    if logc[b, i, j] == -np.inf:
                        continue
                    t = idx[b, i, j]
                    e[j] = M[b, t // K, t % K] + logc[b, i, j]
                    mx = max(mx, e[j])
                Z = 0.0
                e_lab = 0.0
                e_off = 0.0
                for j in range(m):
                    if logc[b, i, j] == -np.inf:
                        e[j] = 0.0
                        continue
                    e[j] = np.exp(e[j] - mx)
                    Z += e[j]
                    if lab[b, i, j]:
                        e_lab += e[j]
                    elif off[b, i, j]:
                        e_off += e[j]
                s_y = e_lab / Z
                c = -1.0 / (s_y + EPS)
                for j in range(m):
                    if logc[b, i, j] == -np.inf:
                        continue
                    s = e[j] / Z
                    if method == 2:
                        g = s * ((c if lab[b, i, j] else 0.0) - c * s_y)
                    elif lab[b, i, j]:
                        g = -(e_off / Z)
                    else:
                        g = s
                    t = idx[b, i, j]
                    C[t // K, t % K] += w[b, i] * g
                if want:
                    if method == 2:
                        loss += w[b, i] * -np.log(s_y + EPS)
                    else:
                        loss += w[b, i] * np.log1p(e_off / e_lab)
            for p in range(K):
                for q in range(K):
                    acc = 0.0
                    for u in range(K):
                        acc += G[b, p, u] * C[u, q]
                    T[p, q] = acc
            gsq = 0.0
            for p in range(K):
                for q in range(K):
                    acc = 0.0
                    for u in range(K):
                        acc += T[p, u] * G[b, u, q]
                    D[p, q] = acc
                    gsq += C[p, q] * acc
            if method == 0:
                step = eta[b]
            else:
                gn = np.sqrt(max(gsq, 0.0))
                step = 0.0
                if gn > 0.0:
                    step = lr / (gn + (EPS if method == 2 else 0.0))
            for p in range(K):
                for q in range(K):
                    M[b, p, q] -= step * D[p, q]
                    S[b, p, q] += step * C[p, q]
            if want:
                out_L[li, b] = loss
        if want:
            li += 1


METHODS = {"gd": 0, "ngd": 1, "official": 2}


def batched_attention_gd(
    datas,
    *,
    steps: int,
    record,
    method: str = "gd",
    lr=None,
    W0=None,
    loss_every: int = 100,
) -> Run:
    """GD (η = 1/L_bound per draw unless ``lr``), NGD (``method="ngd"``: W −= lr·∇/‖∇‖, no
    eps) or the official recipe (``"official"``: autograd arithmetic of −log(p̂_y + eps) and
    ∇/(‖∇‖ + eps)) on the attention NTP loss of every ``datas`` (``models.ntp.data.NTPData``)
    at once, from W0 (default 0), iterates at the steps in ``record``.

    Token coordinates: every logit is a_{iv} = x_vᵀ W x_{k_i}, an entry of the K×K matrix
    M = E W Eᵀ, and ∇L = Eᵀ C E with C[v, k] = Σ_{i: query k} g_{iv} (g the logit
    coefficients of spec §1.1). A GD step is M ← M − η G C G (G = E Eᵀ) and W(k) = W(0) −
    Eᵀ (Σ_steps η C) E: K×K work per step for every draw at once, ~30 µs a step for eight
    draws, so 1e5 steps fit the suite's budget (spec §6.4). The label's coefficient is −(mass
    off the label) summed from the off-label terms, never s_y − 1 (except in the official
    recipe, which is reproduced as written). tests/test_ntp_attention.py checks one step of
    each method against `NTPAttention.gradient`."""
    bt = batch(datas)
    B, K = bt.G.shape[:2]
    Es = [d.embeddings for d in bt.datas]
    if W0 is None:
        W0 = [np.zeros((d.dim, d.dim)) for d in bt.datas]
    M = np.zeros((B, K, K))
    for b, (E, W) in enumerate(zip(Es, W0, strict=True)):
        M[b, : E.shape[0], : E.shape[0]] = E @ W @ E.T
    if method == "gd":
        eta = np.array([1.0 / smoothness_bound(d) for d in bt.datas]) if lr is None else lr
        eta = np.ascontiguousarray(np.broadcast_to(np.asarray(eta, dtype=np.float64), (B,)))
        lr = 0.0
    elif lr is None:
        raise ValueError("lr: NGD needs a step")
    else:
        eta = np.zeros(B)
    rec = np.array(sorted({int(k) for k in record if 0 <= int(k) <= steps}), dtype=np.int64)
    out_S = np.zeros((rec.size, B, K, K))
    n_loss = (steps + loss_every - 1) // loss_every
    out_L = np.zeros((n_loss, B))
    S = np.zeros((B, K, K))
    idx = bt.idx.reshape(bt.logc.shape)
    _kernel(
        M,
        S,
        bt.G,
        idx,
        bt.logc,
        bt.lab,
        bt.off,
        bt.w,
        eta,
        int(steps),
        METHODS[method],
        float(lr),
        rec,
        out_S,
        int(loss_every),
        out_L,
    )
    W = {
        int(k): [
            W0[b] - E.T @ out_S[r, b, : E.shape[0], : E.shape[0]] @ E for b, E in enumerate(Es)
        ]
        for r, k in enumerate(rec)
    }
    return Run(W, np.arange(n_loss) * loss_every, out_L)
