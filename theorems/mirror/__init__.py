"""The claims of arXiv 2410.14581, *Optimizing Attention with Mirror Descent: Generalized
Max-Margin Token Selection* (spec ../shared/spec/tfsvm.md §2.10, §4.5, §4.6, §5 F9, F10)."""

PAPER = "2410.14581"
