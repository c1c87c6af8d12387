"""A validated NTP instance of 2403.08081 (spec ntp.md §1.1): embeddings, token sequences and
labels. Exact integers for the tokens, float64 for the embeddings; every bad field gets one
ValueError that names it."""

from __future__ import annotations

import operator
from dataclasses import dataclass

import numpy as np

from models.oracles.svm import as_float_array


@dataclass(frozen=True, eq=False)
class NTPData:
    """K token embeddings (rows of ``embeddings``), n sequences of token ids and n labels.

    The query of sequence i is its last token; sequences may have different lengths.
    """

    embeddings: np.ndarray
    sequences: tuple[tuple[int, ...], ...]
    labels: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return self.embeddings.shape[0]

    @property
    def dim(self) -> int:
        return self.embeddings.shape[1]

    @property
    def n(self) -> int:
        return len(self.sequences)

    @property
    def queries(self) -> tuple[int, ...]:
        return tuple(seq[-1] for seq in self.sequences)

    @property
    def realizable(self) -> tuple[bool, ...]:
        """Whether each label occurs in its sequence ("realizable labels", spec §1.1)."""
        return tuple(y in seq for seq, y in zip(self.sequences, self.labels, strict=True))


def token_id(value, name: str, num_tokens: int) -> int:
    """``value`` as a Python int in [0, num_tokens); floats and bools are refused, not rounded."""
    if isinstance(value, bool | np.bool_):
        raise ValueError(f"{name}: expected a token id, got the boolean {value!r}")
    try:
        token = operator.index(value)
    except TypeError:
        raise ValueError(f"{name}: expected an integer token id, got {value!r}") from None
    if not 0 <= token < num_tokens:
        raise ValueError(f"{name}: token id {token} is outside [0, {num_tokens})")
    return token


def token_sequences(
    sequences, labels, num_tokens: int
) -> tuple[tuple[tuple[int, ...], ...], tuple[int, ...]]:
    """Validated (sequences, labels) as tuples of Python ints; no sequence may be empty."""
    if isinstance(sequences, np.ndarray) and sequences.ndim != 2:
        raise ValueError(f"sequences: expected a list of token lists, got shape {sequences.shape}")
    seqs = []
    for i, seq in enumerate(sequences):
        if isinstance(seq, str | bytes) or not hasattr(seq, "__len__"):
            raise ValueError(f"sequences[{i}]: expected a list of token ids, got {seq!r}")
        if len(seq) == 0:
            raise ValueError(f"sequences[{i}]: is empty (the query is the last token)")
        seqs.append(tuple(token_id(t, f"sequences[{i}]", num_tokens) for t in seq))
    labels = list(labels)
    if len(labels) != len(seqs):
        raise ValueError(f"labels: {len(labels)} labels for {len(seqs)} sequences")
    ys = tuple(token_id(y, f"labels[{i}]", num_tokens) for i, y in enumerate(labels))
    return tuple(seqs), ys


def ntp_data(embeddings, sequences, labels, *, require_realizable: bool = True) -> NTPData:
    """Validate and freeze an instance. With ``require_realizable`` a label that does not occur
    in its sequence is an error: the attention model gives it probability 0 (infinite loss)."""
    E = as_float_array(embeddings, "embeddings", 2)
    if E.shape[0] == 0 or E.shape[1] == 0:
        raise ValueError(f"embeddings: expected a non-empty K×d matrix, got shape {E.shape}")
    if len(sequences) == 0:
        raise ValueError("sequences: expected at least one sequence")
    seqs, ys = token_sequences(sequences, labels, E.shape[0])
    data = NTPData(E, seqs, ys)
    if require_realizable:
        missing = [i for i, ok in enumerate(data.realizable) if not ok]
        if missing:
            i = missing[0]
            raise ValueError(
                f"labels[{i}]: token {ys[i]} does not occur in sequence {i} {list(seqs[i])} "
                "(the attention model needs realizable labels, spec §1.1)"
            )
    return data
