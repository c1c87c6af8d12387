"""Where training goes: the dynamics, the flow tracer and the engine's certified limits.

``dynamics`` (GD, normalised GD and the arc-length gradient-flow tracer), ``kernels`` (its
compiled log-space hot path), ``limits`` (``follow``: the certified limit of a flow),
``shared`` (the general limit: tokens that share the mass for ever), ``offset`` (the flow's
offset from its limiting ray), ``batched`` (many flows stepped together on a device),
``regpath`` (regularization paths), ``wtrain`` (training W with p fixed), ``joint`` (joint
head and prompt training), ``mirror_joint`` (joint (W, v) ℓp mirror descent) and ``kqpath``
(the (K, Q) paths and the diagonal model).

A module belongs here when it follows an objective of ``models.problems`` in time or along a
path and says where it ends, read against the oracles of ``models.oracles``. Import modules
by full name; this file imports nothing.
"""
