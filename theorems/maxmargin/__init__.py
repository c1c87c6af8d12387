"""The claims of arXiv 2306.13596, *Max-Margin Token Selection in Attention Mechanism*
(spec ../shared/spec/maxmargin.md): one module per part of the spec, the helpers they share
in `common`, the drawing of their figures in `figures`."""

PAPER = "2306.13596"
