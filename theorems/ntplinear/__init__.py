"""The claims of arXiv 2402.18551, *Implicit Optimization Bias of Next-token Prediction in
Linear Models* (spec ../shared/spec/ntp.md, the LIN-… results, §3 controls C11–C16, §4.3–§4.4)."""

PAPER = "2402.18551"
