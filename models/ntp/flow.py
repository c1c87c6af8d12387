"""Gradient flow of the NTP attention model (2403.08081) followed by the engine every other
model uses (issue 25: "one problem interface, and one tracer that follows any of them").

The NTP loss is a prompt problem: sample i's positions t are its tokens, with key
vec(x_{tok_t} x_qᵀ) (so the logit is x_{tok_t}ᵀ W x_q = ⟨vec W, key⟩, row-major), score
γ_it = 1[tok_t = y_i] and margin loss ℓ(m) = −log m (``models.problems.losses.NEG_LOG``):
m_i = Σ_t s_it γ_it = p̂_{y_i} and ℓ(m_i) = −log p̂_{y_i}. Positions holding one token are
twins (the very same key), which the engine treats exactly. So ``models.flows.limits.follow``
certifies where gradient flow on W goes, and where the labels' SCCs keep several tokens
(cyclic priority graphs), the certified limit is the engine's shared-mass limit
(``models.flows.shared``): W(t) = R·W_dir + W_fin + o(1), found from the flow alone: the sets it
keeps, the equality SVM of those sets and the reduced loss's minimiser. The graph-SVM and
W_fin of ``models.ntp.svm`` / ``models.ntp.finite`` are built from the priority graph
instead; the claims compare the two (NTP-FLOW-LIMIT).

The prompt problem has one T for every input, so the sequences must have one length (the
official generator's data do); a padding position would carry mass.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from models.flows.limits import Limit, follow
from models.ntp.data import NTPData
from models.problems.attention import PromptProblem
from models.problems.losses import NEG_LOG


def prompt_view(data: NTPData) -> PromptProblem:
    """The NTP loss as a prompt problem on vec(W) ∈ ℝ^{d²} (module docstring)."""
    lengths = {len(seq) for seq in data.sequences}
    if len(lengths) != 1:
        raise ValueError(
            f"sequences: the engine follows NTP flows of equal-length sequences (lengths "
            f"{sorted(lengths)})"
        )
    E = data.embeddings
    seqs = np.asarray(data.sequences, dtype=np.int64)  # (n, T)
    queries = seqs[:, -1]
    keys = np.einsum("ita,ib->itab", E[seqs], E[queries]).reshape(len(seqs), seqs.shape[1], -1)
    scores = (seqs == np.asarray(data.labels)[:, None]).astype(np.float64)
    return PromptProblem(torch.from_numpy(keys), torch.from_numpy(scores), NEG_LOG)


def flow_limit(data: NTPData, W0=None) -> Limit:
    """Where gradient flow on W from W0 (default 0) goes, certified by the engine."""
    problem = prompt_view(data)
    d = data.dim
    p0 = np.zeros(d * d) if W0 is None else np.asarray(W0, dtype=np.float64).reshape(-1)
    return dataclasses.replace(follow(problem, p0), symbol="W^mm")
