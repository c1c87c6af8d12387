"""The arithmetic and machinery under every model: how numbers are kept and how the machinery
says it could not decide.

``logspace`` (signed log-space sums for gradients that underflow float64 before their
direction does), ``highprec`` (the prompt gradient in high precision, the arbiter between two
float64 computations), ``failures`` (machinery failures: "could not decide", never a
counterexample) and ``device`` (where the torch work runs, ``ATTN_DEVICE``).

A module belongs here when it is about the numbers rather than a model: how a quantity is
represented or computed so that it can be trusted (``logspace``, ``highprec``), or how the
machinery reports on itself (``failures``, ``device``). Import modules by full name; this file
imports nothing.
"""
