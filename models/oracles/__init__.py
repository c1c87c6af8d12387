"""The certified oracles: convex solvers whose every answer carries a certificate, and the
combinatorial tests built on them.

``svm`` (the hard-margin SVM QP behind ATT-SVM, the W-, v- and ``<cls>`` SVMs: a KKT point or
a Farkas vector, else a typed failure), ``normsvm`` (the attention SVMs of *Transformers as
SVMs* with Frobenius, nuclear and ℓp objectives) and ``selection`` (support tokens and locally
optimal selections, Def. 2, each verdict resting on a certified SVM answer).

A module belongs here when it decides a static question (a margin problem, a selection's
optimality) exactly or with a certificate, with no training involved. Import modules by full
name; this file imports nothing.
"""
