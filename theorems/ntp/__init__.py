"""The claims of arXiv 2403.08081, *Mechanics of Next Token Prediction with Self-Attention*
(spec ../shared/spec/ntp.md, the NTP-… results, §3 controls C1–C10, C17, §4.1–§4.2)."""

PAPER = "2403.08081"
