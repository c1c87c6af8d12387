"""Instances of the next-token-prediction lineage (spec ntp.md), validated on construction,
with named assumptions, as ``strategies.instances`` does for the other papers.

- ``NTPInstance``: the self-attention NTP data of 2403.08081: K token embeddings (rows of
  ``embeddings``), token sequences whose last token is the query, and one label per sequence.
  ``inst.data`` is the validated ``models.ntp.data.NTPData``, ``inst.model`` its attention
  loss (``models.ntp.attention.NTPAttention``).
- ``LinearNTPInstance``: the linear decoder of 2402.18551: context embeddings H (d×m, one
  column per context), next-token probabilities P (m×V) and context weights pi (m,).
  ``inst.problem`` is ``models.ntp.linear.LinearNTP``.

Both serialize to the `check` schemas ({"model": "ntp", ...} and {"model": "ntp-linear",
...}, docs/instances.md) with ``to_json``/``from_json``; ``to_json(extra=True)`` adds the
assumptions and the seed. Building one tells the claims framework about it, so a claim body
that builds one records it as its example's instance.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from models.ntp.attention import NTPAttention, ntp_attention
from models.ntp.data import NTPData, ntp_data
from models.ntp.linear import LinearNTP, linear_ntp
from strategies.instances import _announce, _assumptions, _check_model, _meta, _require, _seed


def _search_json(inst) -> dict:
    return {"assumptions": sorted(inst.assumptions), "seed": inst.seed}


def _search_fields(d: Mapping) -> dict:
    return {"assumptions": d.get("assumptions", ()), "seed": d.get("seed", 0)}


@dataclass(frozen=True, eq=False, repr=False)
class NTPInstance:
    """One dataset of the self-attention NTP model (2403.08081). ``embeddings`` is K×d
    (float64), ``sequences`` a tuple of token-id tuples (lengths may differ; the query is the
    last token), ``labels`` one token id per sequence. Labels must be realizable (occur in
    their sequence): the model gives any other label probability 0."""

    embeddings: np.ndarray
    sequences: tuple[tuple[int, ...], ...]
    labels: tuple[int, ...]
    assumptions: frozenset[str] = frozenset()
    seed: int = 0
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        data = ntp_data(self.embeddings, self.sequences, self.labels)
        object.__setattr__(self, "embeddings", data.embeddings)
        object.__setattr__(self, "sequences", data.sequences)
        object.__setattr__(self, "labels", data.labels)
        object.__setattr__(self, "data", data)
        object.__setattr__(self, "assumptions", _assumptions(self.assumptions))
        object.__setattr__(self, "seed", _seed(self.seed))
        object.__setattr__(self, "meta", _meta(self.meta))
        _announce(self)

    data: NTPData = field(init=False, repr=False)

    @property
    def num_tokens(self) -> int:
        return self.data.num_tokens

    @property
    def dim(self) -> int:
        return self.data.dim

    @property
    def n(self) -> int:
        return self.data.n

    @cached_property
    def model(self) -> NTPAttention:
        """The attention NTP loss of this data (cached)."""
        return ntp_attention(self.data)

    def __repr__(self) -> str:
        return (
            f"NTPInstance(K={self.num_tokens}, d={self.dim}, n={self.n}, "
            f"sequences={[list(s) for s in self.sequences]}, labels={list(self.labels)}, "
            f"seed={self.seed}, assumptions={sorted(self.assumptions)})"
        )

    def to_json(self, *, extra: bool = False) -> dict[str, Any]:
        """The check schema {"model": "ntp", "embeddings", "sequences", "labels"}."""
        out: dict[str, Any] = {
            "model": "ntp",
            "embeddings": self.embeddings.tolist(),
            "sequences": [list(s) for s in self.sequences],
            "labels": list(self.labels),
        }
        if extra:
            out.update(_search_json(self))
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> NTPInstance:
        """Inverse of ``to_json``; a missing or malformed field raises ValueError naming it."""
        _check_model(d, "ntp")
        return cls(
            embeddings=_require(d, "embeddings"),
            sequences=_require(d, "sequences"),
            labels=_require(d, "labels"),
            **_search_fields(d),
        )


@dataclass(frozen=True, eq=False, repr=False)
class LinearNTPInstance:
    """One dataset of the linear NTP decoder (2402.18551): H (d×m, columns are the distinct
    contexts h̄_j), P (m×V, row j the next-token distribution p̂_j; its exact zeros are the
    complement of the support S_j) and pi (m,) the context weights π̂_j."""

    H: np.ndarray
    P: np.ndarray
    pi: np.ndarray
    assumptions: frozenset[str] = frozenset()
    seed: int = 0
    meta: dict = field(default_factory=dict)

    def __post_init__(self):
        problem = linear_ntp(self.H, self.P, self.pi)
        for name in ("H", "P", "pi"):
            object.__setattr__(self, name, getattr(problem, name))
        object.__setattr__(self, "problem", problem)
        object.__setattr__(self, "assumptions", _assumptions(self.assumptions))
        object.__setattr__(self, "seed", _seed(self.seed))
        object.__setattr__(self, "meta", _meta(self.meta))
        _announce(self)

    problem: LinearNTP = field(init=False, repr=False)

    @property
    def dim(self) -> int:
        return self.problem.dim

    @property
    def m(self) -> int:
        return self.problem.m

    @property
    def vocab(self) -> int:
        return self.problem.vocab

    def __repr__(self) -> str:
        sizes = [int(k) for k in self.problem.support.sum(axis=1)]
        return (
            f"LinearNTPInstance(d={self.dim}, m={self.m}, V={self.vocab}, |S_j|={sizes}, "
            f"seed={self.seed}, assumptions={sorted(self.assumptions)})"
        )

    def to_json(self, *, extra: bool = False) -> dict[str, Any]:
        """The check schema {"model": "ntp-linear", "H", "P", "pi"}."""
        out: dict[str, Any] = {
            "model": "ntp-linear",
            "H": self.H.tolist(),
            "P": self.P.tolist(),
            "pi": self.pi.tolist(),
        }
        if extra:
            out.update(_search_json(self))
        return out

    @classmethod
    def from_json(cls, d: Mapping) -> LinearNTPInstance:
        """Inverse of ``to_json``; a missing or malformed field raises ValueError naming it."""
        _check_model(d, "ntp-linear")
        return cls(
            H=_require(d, "H"), P=_require(d, "P"), pi=_require(d, "pi"), **_search_fields(d)
        )
