"""The prompt loss's gradient in high-precision arithmetic: the arbiter where two float64
computations of one identity disagree.

Near saturation the gradient of L is tiny (1e-9 of its inputs) and a float64 computation that
sums terms of order one, such as autograd of the plain loss, loses most of its digits to
cancellation; the engine's log-space gradient does not. When a claim compares the two and they
differ, this decides which one rounding broke: L is evaluated from the instance's float64
numbers (exact inputs) in ``digits`` decimal digits and differentiated numerically there
(mpmath.diff), independently of both float64 formulas.
"""

from __future__ import annotations

import math

import mpmath
import torch

#: ℓ of each margin loss (models.problems.losses), in mpmath.
_LOSSES = {
    "logistic": lambda x: mpmath.log1p(mpmath.exp(-x)),
    "exponential": lambda x: mpmath.exp(-x),
    "correlation": lambda x: -x,
    "neg-log": lambda x: -mpmath.log(x),
}


def _loss(loss):
    if loss.name in _LOSSES:
        return _LOSSES[loss.name]
    target = getattr(loss, "target", None)
    if loss.name == "square" and target is not None:
        return lambda x: (mpmath.mpf(float(target)) - x) ** 2
    raise ValueError(f"no high-precision form of the loss {loss.name!r}")


def _loss_value(problem):
    """q ↦ L(q) in the working precision (call inside ``mpmath.workdps``), from the exact
    binary values of the problem's float64 keys and scores."""
    ell = _loss(problem.loss)
    keys = [[[mpmath.mpf(float(k)) for k in token] for token in x] for x in problem.keys]
    scores = [[mpmath.mpf(float(g)) for g in row] for row in problem.scores]
    # the input weights ω_i (the mean's 1/n exactly, else the float64 weights' binary values)
    given = getattr(problem, "weights", None)
    omega = (
        [mpmath.mpf(1) / len(keys)] * len(keys)
        if given is None
        else [mpmath.mpf(float(w)) for w in given]
    )

    def value(q):
        total = mpmath.mpf(0)
        for key_rows, gammas, w_i in zip(keys, scores, omega, strict=True):
            logits = [mpmath.fsum(k * c for k, c in zip(row, q, strict=True)) for row in key_rows]
            top = max(logits)
            weights = [mpmath.exp(z - top) for z in logits]
            margin = mpmath.fsum(w * g for w, g in zip(weights, gammas, strict=True))
            total += w_i * ell(margin / mpmath.fsum(weights))
        return total

    return value


def loss_gradient(problem, p: torch.Tensor, digits: int = 50) -> torch.Tensor:
    """∇L(p) of a PromptProblem, L(p) = Σ_i ω_i ℓ(Σ_t softmax(K_i p)_t γ_it), computed in
    ``digits`` decimal digits and rounded to float64."""
    with mpmath.workdps(digits):
        value = _loss_value(problem)
        point = [mpmath.mpf(float(c)) for c in p]

        def partial(j):
            return mpmath.diff(lambda t: value([*point[:j], t, *point[j + 1 :]]), point[j])

        grad = [float(partial(j)) for j in range(len(point))]
    return torch.tensor(grad, dtype=torch.float64)


def slope(problem, p, direction, digits: int) -> tuple[int, float]:
    """d/dt L(p + t·direction) at t = 0 in ``digits`` decimal digits, as (sign, log|slope|)
    (log −inf for a zero slope): the slope can lie far below float64's range (e^{−800} far
    out), so it is returned as its sign and logarithm."""
    with mpmath.workdps(digits):
        value = _loss_value(problem)
        point = [mpmath.mpf(float(c)) for c in p]
        step = [mpmath.mpf(float(c)) for c in direction]
        got = mpmath.diff(lambda t: value([a + t * b for a, b in zip(point, step, strict=True)]), 0)
        if got == 0:
            return 0, -math.inf
        return (1 if got > 0 else -1), float(mpmath.log(abs(got)))


def gradient_error(problem, p, engine, autograd, rel_tol: float) -> tuple[float, float]:
    """(‖engine − ∇L(p)‖, ‖∇L(p)‖) of a PromptProblem's gradient ``engine`` at ``p`` (any
    shapes, compared flat), with ∇L(p) from ``autograd`` where the two agree to ``rel_tol``
    (relative) and from `loss_gradient` in 50 digits where they do not: near saturation
    autograd of the plain loss cancels terms of order one into a tiny gradient and loses its
    digits, so a disagreement alone does not say which side is wrong."""
    engine = torch.as_tensor(engine, dtype=torch.float64).reshape(-1)
    reference = torch.as_tensor(autograd, dtype=torch.float64).reshape(-1)
    error = float(torch.linalg.vector_norm(engine - reference))
    scale = float(torch.linalg.vector_norm(reference))
    if error > rel_tol * scale:
        reference = loss_gradient(problem, torch.as_tensor(p, dtype=torch.float64).reshape(-1))
        error = float(torch.linalg.vector_norm(engine - reference))
        scale = float(torch.linalg.vector_norm(reference))
    return error, scale
