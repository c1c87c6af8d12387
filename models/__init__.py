"""The mathematics the claims check, by role.

- ``models.problems``: what a problem is (its model, loss, gradient and field).
- ``models.oracles``: the certified convex solvers (SVMs) and the combinatorial tests on them.
- ``models.flows``: where training goes: the dynamics, the flow tracer, the engine's certified
  limits and regularization paths.
- ``models.check``: what ``python -m theorems check`` answers for one instance.
- ``models.numerics``: the arithmetic and machinery under all of them (log space, high
  precision, machinery failures, the torch device).
- ``models.ntp``: the next-token-prediction domain (spec ntp.md), a package of its own.

The subpackages' ``__init__`` files import nothing: a module is always imported by its full
name (``from models.flows import limits``), so that importing one never drags in the rest and
the modules' mutual imports cannot become circular through a package.
"""
