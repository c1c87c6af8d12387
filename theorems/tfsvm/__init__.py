"""The claims of arXiv 2308.16898, *Transformers as Support Vector Machines* (spec
../shared/spec/tfsvm.md), and of the two follow-ups the spec gives properties for (2402.05738,
adaptive steps; 2403.08699, diagonal (K, Q)): one module per part of the spec."""

PAPER = "2308.16898"
