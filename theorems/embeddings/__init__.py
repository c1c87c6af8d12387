"""The claims of arXiv 2505.17282, *Attention with Trained Embeddings Provably Selects
Important Tokens* (spec ../shared/spec/embeddings.md): one module per part of the spec, the
helpers they share in `common`, the drawing of their figures in `figures`."""

PAPER = "2505.17282"
