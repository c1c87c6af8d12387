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

The linear NTP decoder of 2402.18551 (``models.ntp.linear``) is a prompt problem too, with
input weights: CE(W) = Σ_j π̂_j Σ_{z∈S_j} p̂_jz·(−log softmax(W h̄_j)_z), so input (j, z), one
per in-support pair, has weight ω = π̂_j·p̂_jz, V tokens with keys vec(e_v h̄_jᵀ) (the logit
of v is (W h̄_j)_v) and score 1[v = z] under ℓ = −log (``linear_view``). Its flow keeps each
context's support S_j as a shared set for ever where the data are NTP-separable: the
engine's shared limit is then W(t) = R·W_dir + q* + o(1) with W_dir its equality SVM over the
supports and q* the reduced loss's minimiser on F, which 2402.18551 calls W^mm and W*; the
claims compare the engine's reading of the flow with those oracles (LIN-FLOW-LIMIT).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from models.flows.limits import Limit, follow
from models.ntp.data import NTPData
from models.ntp.linear import LinearNTP
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


def linear_view(problem: LinearNTP) -> PromptProblem:
    """CE of the linear NTP decoder as an input-weighted prompt problem on vec(W) ∈ ℝ^{V·d},
    W row-major (module docstring): inputs (j, z) for z ∈ S_j in that order."""
    V, d = problem.vocab, problem.dim
    contexts, tokens = np.nonzero(problem.support)  # row-major: j, then z
    # keys[i, v] = vec(e_v h̄_jᵀ): row v of a V×d matrix holds h̄_j
    keys = np.zeros((len(contexts), V, V, d))
    keys[:, np.arange(V), np.arange(V), :] = problem.H.T[contexts][:, None, :]
    scores = (np.arange(V)[None, :] == tokens[:, None]).astype(np.float64)
    weights = problem.pi[contexts] * problem.P[contexts, tokens]
    return PromptProblem(
        torch.from_numpy(keys.reshape(len(contexts), V, V * d)),
        torch.from_numpy(scores),
        NEG_LOG,
        torch.from_numpy(weights),
    )


def linear_flow_limit(problem: LinearNTP, W0=None) -> Limit:
    """Where gradient flow on the decoder W from W0 (default 0) goes, certified by the
    engine."""
    view = linear_view(problem)
    p0 = np.zeros(view.dim) if W0 is None else np.asarray(W0, dtype=np.float64).reshape(-1)
    return dataclasses.replace(follow(view, p0), symbol="W^mm")
