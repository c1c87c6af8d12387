"""What the (K, Q) claims of 2308.16898 share (claims_kq, claims_kq_controls): the official
instances of the visualization and local-convergence notebooks rebuilt exactly, the official
initializations, the strategies these claims add on top of ``strategies.cross`` (the planar
family of spec §3.6, F8's aligned-query family, the diagonal instances of §2.12), and the
recipe of one (K, Q) or W run with the SVMs of the selection it reaches.

The notebooks' data come from a seeded ``torch.Generator`` drawing float32 numbers, then cast to
float64: rebuilt here with the same calls, they are bit-for-bit the notebooks' data (checked
against docs/examples/cross_visualization1.json). Their initializations are not: the notebooks
draw K (``randn_like``) and the default ``nn.Linear`` weights from torch's unseeded global
generator, so no run of them can be replayed. Here K(0) = 0.1·N(0, 1) comes from a generator
seeded with the instance's own data seed, and the default init U(−1/√d, 1/√d) (kaiming_uniform
with a = √5, fan-in d) from one seeded with the run's seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch
from hypothesis import assume, event
from hypothesis import strategies as st

from models.cross import MACHINE_EPS, CrossProblem, correlation, kq_ngd, w_ngd
from models.kqpath import nuclear_face_toward
from models.normsvm import NormSVM, norm_svm
from strategies.combinators import SEEDS, seeded
from strategies.cross import official_cross_data, official_cross_instances
from strategies.instances import (
    INDEPENDENT_QUERIES,
    OFFICIAL_CROSS,
    PAPER_INSTANCE,
    UNIQUE_OPT,
    CrossInstance,
)
from theorems import evidence

DTYPE = torch.float64
F32 = torch.float32

# ---- the official recipe (spec §4 "Common TF-as-SVM recipe", README) ---------------------------
#: SGD learning rate of every official run.
LR = 0.1
#: Iterations of every official run (visualization and local convergence).
STEPS = 2000
#: The (K, Q) penalty λ(‖K‖² + ‖Q‖²) of the official (K, Q) runs: float64 machine epsilon.
PENALTY = MACHINE_EPS
#: K(0) = KQ_INIT_SCALE·N(0, 1) with Q(0) = 0 (visualization notebooks); the same scale for the
#: "small seeded init" of both factors on random instances (spec §2.8).
KQ_INIT_SCALE = 0.1
#: The dimensions of the official local-convergence experiment (spec §4.1).
LOCAL_DIMS = (6, 8, 10)
#: The diagonal experiment of spec §2.12: (n, T, d), exponential loss, per-factor NGD steps.
DIAG_DIMS = (4, 3, 8)
DIAG_STEPS = 8000
DIAG_LOSS = "exponential"


def record(inst: CrossInstance) -> None:
    evidence.instance(inst.to_json())


def _unit(x: torch.Tensor) -> torch.Tensor:
    return x / torch.norm(x, dim=-1, keepdim=True)


# ---- the notebooks' instances ------------------------------------------------------------------


def planar_data(seed: int, T: int = 3, noise: float = 0.3) -> CrossInstance:
    """The generator of ``visualization1.ipynb`` with any seed (spec §3.6, §4.4): n = 2, d = 2,
    Y = +1, v and z_i unit Gaussian, tokens noise·N(0, I) shifted by (−1, 0) (input 0) and
    (+1, 0) (input 1); α = opt. Float32 draws cast to float64, as the notebook does."""
    n, d = 2, 2
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(d, generator=gen, dtype=F32)
    v = v / torch.norm(v)
    y = torch.ones(n, dtype=F32)
    X = noise * torch.randn(n, T, d, generator=gen, dtype=F32)
    X[0] += torch.tensor([-1.0, 0.0], dtype=F32)
    X[1] += torch.tensor([1.0, 0.0], dtype=F32)
    Z = _unit(torch.randn(n, d, generator=gen, dtype=F32))
    alpha = ((X @ v) * y[:, None]).argmax(-1).numpy()
    return CrossInstance(
        X=X.double(), Z=Z.double(), y=y.double(), v=v.double(), alpha=alpha, seed=int(seed)
    )


def visualization_instance(k: int) -> CrossInstance:
    """The data of ``visualization{k}.ipynb`` (spec §4.4), bit for bit.

    1: T = 3, seed 1, tokens 0.3·N(0, 1) shifted by (−1, 0) and (+1, 0).
    2: T = 5, seed 3, tokens 0.5·N(0, 1); the first tokens fixed at (1, ±0.5), the others shifted
    by (−1, 0)."""
    if k == 1:
        inst = planar_data(1)
    elif k == 2:
        n, T, d = 2, 5, 2
        gen = torch.Generator().manual_seed(3)
        v = torch.randn(d, generator=gen, dtype=F32)
        v = v / torch.norm(v)
        y = torch.ones(n, dtype=F32)
        X = 0.5 * torch.randn(n, T, d, generator=gen, dtype=F32)
        X[0, 0] = torch.tensor([1.0, 0.5], dtype=F32)
        X[1, 0] = torch.tensor([1.0, -0.5], dtype=F32)
        X[:, 1:] += torch.tensor([-1.0, 0.0], dtype=F32)
        Z = _unit(torch.randn(n, d, generator=gen, dtype=F32))
        alpha = ((X @ v) * y[:, None]).argmax(-1).numpy()
        inst = CrossInstance(
            X=X.double(), Z=Z.double(), y=y.double(), v=v.double(), alpha=alpha, seed=3
        )
    else:
        raise ValueError(f"k: the visualization notebooks are 1 and 2, got {k!r}")
    return replace(
        inst,
        assumptions={PAPER_INSTANCE, UNIQUE_OPT},
        meta={"notebook": f"visualization{k}.ipynb"},
    )


def visualization_init(inst: CrossInstance) -> tuple[np.ndarray, np.ndarray]:
    """(K0, Q0) of the visualization notebooks: Q = 0, K = 0.1·N(0, 1) (seeded with the data's
    seed: the notebooks' own draw is unseeded)."""
    gen = torch.Generator().manual_seed(inst.seed)
    K0 = KQ_INIT_SCALE * torch.randn(inst.d, inst.d, generator=gen, dtype=DTYPE)
    return K0.numpy(), np.zeros((inst.d, inst.d))


def local_instance(seed: int) -> CrossInstance:
    """``data_generator(seed)`` of ``local_converge.ipynb`` (spec §4.1), bit for bit: n = 6,
    T = 8, d = 10, v unit, Y = ±1 from the sign of a normal, tokens and queries on the unit
    sphere; α = opt."""
    n, T, d = LOCAL_DIMS
    gen = torch.Generator().manual_seed(int(seed))
    v = torch.randn(d, generator=gen, dtype=F32)
    v = v / torch.norm(v)
    y = 2 * torch.ones(n, dtype=F32) * (torch.randn(n, generator=gen, dtype=F32) > 0) - 1
    X = _unit(torch.randn(n, T, d, generator=gen, dtype=F32))
    Z = _unit(torch.randn(n, d, generator=gen, dtype=F32))
    alpha = ((X @ v) * y[:, None]).argmax(-1).numpy()
    return CrossInstance(
        X=X.double(),
        Z=Z.double(),
        y=y.double(),
        v=v.double(),
        alpha=alpha,
        seed=int(seed),
        assumptions={OFFICIAL_CROSS, PAPER_INSTANCE},
        meta={"notebook": "local_converge.ipynb"},
    )


def default_linear_init(d: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(W0, K0, Q0) with entries U(−1/√d, 1/√d): torch's default ``nn.Linear(d, d)`` init, the
    init of the local-convergence notebook (seeded here)."""
    gen = torch.Generator().manual_seed(int(seed))
    bound = 1.0 / math.sqrt(d)
    W0, K0, Q0 = ((2 * torch.rand(3, d, d, generator=gen, dtype=DTYPE) - 1) * bound).numpy()
    return W0, K0, Q0


def small_factors(d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """K0, Q0 with i.i.d. N(0, KQ_INIT_SCALE²) entries (the small seeded init of spec §2.8)."""
    gen = seeded(seed)
    K0 = KQ_INIT_SCALE * torch.randn(d, d, generator=gen, dtype=DTYPE)
    Q0 = KQ_INIT_SCALE * torch.randn(d, d, generator=gen, dtype=DTYPE)
    return K0.numpy(), Q0.numpy()


# ---- strategies ------------------------------------------------------------------------------


def local_dims_instances():
    """The official generator at the local-convergence dimensions (6, 8, 10) (spec §2.8)."""
    n, T, d = LOCAL_DIMS
    return official_cross_instances(n=n, T=T, d=d)


@st.composite
def planar_instances(draw):
    """Spec §3.6: ``planar_data`` (the visualization-1 generator) at a drawn seed; opt unique by
    1e-3 (a rare rejection otherwise)."""
    inst = planar_data(draw(SEEDS))
    g = np.sort(inst.scores.numpy(), axis=1)
    unique = bool((g[:, -1] - g[:, -2] >= 1e-3).all())
    if not unique:
        event("reject: tied top scores")
    assume(unique)
    return replace(inst, assumptions={UNIQUE_OPT}, meta={"family": "planar (spec §3.6)"})


@st.composite
def aligned_query_instances(draw, n: int = 3):
    """Spec F8's degenerate family: d = n orthonormal queries z_i, T = 2 tokens per input with
    x_i0 − x_i1 = c_i z_i (c_i ∈ [0.5, 1.5]), and Y_i = sign(vᵀz_i) so that token 0 is opt.
    Each input's one constraint reads c_i z_iᵀWz_i ≥ 1: only the diagonal of W in the z basis
    is bounded, and every symmetric PSD matrix with that diagonal (1/c_i) is a nuclear SVM."""
    seed = draw(SEEDS)
    gen = seeded(seed)
    U, _ = torch.linalg.qr(torch.randn(n, n, generator=gen, dtype=DTYPE))
    Z = U.T.contiguous()
    v = _unit(torch.randn(n, generator=gen, dtype=DTYPE))
    c = 0.5 + torch.rand(n, generator=gen, dtype=DTYPE)
    base = torch.randn(n, n, generator=gen, dtype=DTYPE)
    y = torch.sign(Z @ v)
    ok = bool((y != 0).all() and ((Z @ v).abs() * c >= 1e-3).all())
    if not ok:
        event("reject: a query orthogonal to v (no score gap)")
    assume(ok)
    X = torch.stack([base + c[:, None] * Z, base], 1)
    return CrossInstance(
        X=X,
        Z=Z,
        y=y,
        v=v,
        alpha=np.zeros(n, dtype=np.int64),
        seed=seed,
        assumptions={UNIQUE_OPT, INDEPENDENT_QUERIES},
        meta={"family": "aligned queries (spec F8)", "c": c},
    )


def diagonal_instances():
    """The official generator at spec §2.12's dimensions (n, T, d) = (4, 3, 8), exponential
    loss (2403.08699)."""
    n, T, d = DIAG_DIMS
    return official_cross_instances(n=n, T=T, d=d, loss=DIAG_LOSS)


def official_instance(n: int, T: int, d: int, seed: int, loss: str = "logistic"):
    """The draws ``strategies.cross.official_cross_instances`` makes for ``seed``
    (``official_cross_data``), outside Hypothesis, for fixed-seed experiments; α = opt (no tie
    rejection: ties have probability 0)."""
    return official_cross_data(n, T, d, seed, loss)


def diagonal_init(d: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Unbalanced small init (spec §2.12): k = 0.1·N(0, I), q = 0 (|k_j| ≠ |q_j|: k_j² − q_j²
    > 0 is conserved by the flow, so q_j may cross 0 and w_j = k_j q_j take either sign)."""
    k0 = KQ_INIT_SCALE * torch.randn(d, generator=seeded(seed), dtype=DTYPE)
    return k0.numpy(), np.zeros(d)


# ---- one run and the SVMs of its selection -----------------------------------------------------


@dataclass
class Reached:
    """A run's final W, the selection α̂ it reached, and the two SVMs at α̂."""

    W: np.ndarray
    alpha: np.ndarray
    fro: NormSVM
    nuc: NormSVM

    @property
    def corr_fro(self) -> float:
        return correlation(self.W, self.fro.W)

    @property
    def corr_nuc(self) -> float:
        return correlation(self.W, self.nuc.W)

    @property
    def svm_cos(self) -> float:
        """cos(W^mm(α̂), W^mm_⋆(α̂)): how far apart the two SVMs are."""
        return correlation(self.fro.W, self.nuc.W)


def svm_pair(inst: CrossInstance, alpha) -> tuple[NormSVM, NormSVM]:
    """The certified Frobenius and nuclear SVMs of selection α (a failed solve makes the example
    inconclusive; an infeasible α rejects it)."""
    fro = evidence.solved(norm_svm(inst.X, inst.Z, alpha, "fro"), "Frobenius SVM")
    nuc = evidence.solved(norm_svm(inst.X, inst.Z, alpha, "nuc"), "nuclear SVM")
    return fro, nuc


def svms_at(inst: CrossInstance, W: np.ndarray) -> Reached:
    """The selection α̂ = argmax_t s_it of W and the two certified SVMs there."""
    evidence.finite("final iterate", W)
    alpha = inst.problem.selected(torch.as_tensor(W))
    return Reached(np.asarray(W), alpha, *svm_pair(inst, alpha))


#: Where the nuclear SVM is not unique (spec F8) a direction is compared with the member of the
#: optimal face nearest to it: the face is {A vec W ≥ 1, ‖W‖_⋆ ≤ (1 + FACE_SLACK)·‖W^mm_⋆‖_⋆}
#: (the certificate's own accuracy is 1e-6, models.normsvm.CONIC_TOL).
FACE_SLACK = 1e-6


def corr_with_nuclear(inst: CrossInstance, reached: Reached, enough: float) -> float:
    """corr(W, W^mm_⋆(α̂)), robust to a non-unique nuclear SVM (spec §2.8, F8): when the solver's
    point is below ``enough``, W is compared with the member of the optimal face that leans most
    toward it (``models.kqpath.nuclear_face_toward``; for a unique SVM, the SVM itself)."""
    c = reached.corr_nuc
    if c >= enough:
        return c
    face = nuclear_face_toward(
        inst.X, inst.Z, reached.alpha, reached.nuc.value, reached.W, slack=FACE_SLACK
    )
    if face.W is None:
        evidence.inconclusive(f"nuclear face probe {face.status}")
    spread = 1 - correlation(face.W, reached.nuc.W)
    evidence.metric("nuclear optimal face: 1 − corr(probe, solver's SVM)", spread)
    return max(c, correlation(reached.W, face.W))


def kq_final(problem: CrossProblem, K0, Q0, *, penalty: float = PENALTY, steps: int = STEPS):
    """The last KQᵀ of (K, Q)-NGD with the official recipe (lr 0.1, separately normalised
    factors, penalty λ)."""
    return kq_ngd(problem, K0, Q0, lr=LR, steps=steps, penalty=penalty, record_every=steps).W


def w_final(problem: CrossProblem, W0=None, *, steps: int = STEPS) -> np.ndarray:
    """The last W of W-NGD (lr 0.1, log-space direction)."""
    return w_ngd(problem, W0, lr=LR, steps=steps, record_every=steps).W
