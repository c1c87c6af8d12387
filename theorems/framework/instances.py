"""The one instance schema of the suite, in its two forms.

- An *instance file* (what `python -m theorems check` reads, what a saved counterexample's
  top level holds, what `PromptInstance.to_json()` / `EmbeddingInstance.to_json()` /
  `CrossInstance.to_json()`, `NTPInstance.to_json()`, `LinearNTPInstance.to_json()` write): a
  JSON object with a "model" ("prompt", "embedding", "cross", "ntp" or "ntp-linear") and the
  fields of INSTANCE_FIELDS.
  `load_instance` validates one and names the offending field.
- A *typed argument* (what the replay store keeps of an example's @given arguments):
  `encode` / `decode`, lossless for instances (with their meta), tensors, arrays, numbers,
  strings and containers of those.

Imports nothing from the rest of the framework.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

LOSSES = ("logistic", "exponential", "correlation")
#: The parametrisations of a cross instance: W trained directly, or W = KQᵀ (spec tfsvm §1.1).
PARAMS = ("W", "KQ")
#: What a cross instance trains: W (or K, Q) with the head v fixed, or W and v jointly by ℓp
#: mirror descent from W = 0, v = 0 (models.check.joint_predict; its check has the model key
#: "cross-joint").
TRAINS = ("fixed-head", "joint")
#: The fields of an instance file, by model; the order is the order a saved file lists them.
INSTANCE_FIELDS = {
    "prompt": ("model", "X", "y", "v", "W", "loss", "p0"),
    "embedding": ("model", "sequences", "y", "E0", "v", "eta0"),
    "cross": ("model", "X", "Z", "y", "v", "param", "loss", "p", "train"),
    "ntp": ("model", "embeddings", "sequences", "labels"),
    "ntp-linear": ("model", "H", "P", "pi"),
}
_MODELS = '"prompt", "embedding", "cross", "ntp" or "ntp-linear"'
#: A row of P sums to 1 within this (models.ntp.linear.PROBABILITY_TOL).
PROBABILITY_TOL = 1e-9

#: Keys of a saved counterexample that are not instance fields (theorems.framework.replay).
HEADER_KEYS = ("counterexample", "replay")


class InstanceError(ValueError):
    """An invalid instance; `field` names the offending field (None for the file itself)."""

    def __init__(self, field: str | None, message: str):
        self.field, self.message = field, message
        super().__init__(f'field "{field}": {message}' if field else message)


class Unrepresentable(TypeError):
    """An argument that the typed JSON encoding cannot hold."""


class Undecodable(ValueError):
    """A typed JSON document that `decode` cannot rebuild."""


def _instance_classes() -> dict[str, type]:
    try:
        from strategies.instances import CrossInstance, EmbeddingInstance, PromptInstance
        from strategies.ntp_instances import LinearNTPInstance, NTPInstance
    except ImportError:  # pragma: no cover - the strategies package is part of the suite
        return {}
    return {
        "PromptInstance": PromptInstance,
        "EmbeddingInstance": EmbeddingInstance,
        "CrossInstance": CrossInstance,
        "NTPInstance": NTPInstance,
        "LinearNTPInstance": LinearNTPInstance,
    }


def encode(value: Any) -> dict:
    """A JSON-able, typed form of one argument; Unrepresentable if there is none."""
    if value is None or isinstance(value, (bool, str, int)):
        return {"value": value}
    if isinstance(value, float):
        return {"float": value if math.isfinite(value) else repr(value)}
    classes = _instance_classes()
    name = type(value).__name__
    if name in classes and isinstance(value, classes[name]):
        return {
            "instance": name,
            "json": value.to_json(extra=True),
            "meta": {str(k): encode(v) for k, v in value.meta.items()},
        }
    if callable(getattr(value, "detach", None)):  # torch tensor
        return {"tensor": value.detach().cpu().tolist(), "dtype": str(value.dtype)}
    if type(value).__module__ == "numpy":
        import numpy as np

        if isinstance(value, np.ndarray):
            return {"ndarray": value.tolist(), "dtype": str(value.dtype)}
        if isinstance(value, np.generic):
            return {"numpy": value.item(), "dtype": str(value.dtype)}
    if isinstance(value, (tuple, list)):
        return {type(value).__name__: [encode(v) for v in value]}
    if isinstance(value, (set, frozenset)):
        items = [encode(v) for v in value]
        items.sort(key=lambda doc: json.dumps(doc, sort_keys=True))
        return {type(value).__name__: items}
    if isinstance(value, dict):
        if all(isinstance(k, str) for k in value):
            return {"dict": {k: encode(v) for k, v in value.items()}}
        return {"items": [[encode(k), encode(v)] for k, v in value.items()]}
    raise Unrepresentable(f"cannot save a value of type {type(value).__name__}")


def decode(doc: Mapping) -> Any:
    """Inverse of `encode`."""
    if "value" in doc:
        return doc["value"]
    if "float" in doc:
        return float(doc["float"])
    if "instance" in doc:
        classes = _instance_classes()
        cls = classes.get(doc["instance"])
        if cls is None:
            raise Undecodable(f"unknown instance class {doc['instance']!r}")
        inst = cls.from_json(doc["json"])
        meta = {k: decode(v) for k, v in doc.get("meta", {}).items()}
        object.__setattr__(inst, "meta", meta)  # frozen dataclass: meta is not in to_json
        return inst
    if "tensor" in doc:
        import torch

        return torch.tensor(doc["tensor"], dtype=getattr(torch, doc["dtype"].split(".")[-1]))
    if "ndarray" in doc or "numpy" in doc:
        import numpy as np

        if "numpy" in doc:
            return np.dtype(doc["dtype"]).type(doc["numpy"])
        return np.asarray(doc["ndarray"], dtype=doc["dtype"])
    if "tuple" in doc:
        return tuple(decode(v) for v in doc["tuple"])
    if "set" in doc:
        return {decode(v) for v in doc["set"]}
    if "frozenset" in doc:
        return frozenset(decode(v) for v in doc["frozenset"])
    if "items" in doc:
        return {decode(k): decode(v) for k, v in doc["items"]}
    if "list" in doc:
        return [decode(v) for v in doc["list"]]
    if "dict" in doc:
        return {k: decode(v) for k, v in doc["dict"].items()}
    raise Undecodable(f"unknown encoded value {sorted(doc)}")


def encode_arguments(arguments: Mapping[str, Any] | None) -> dict:
    """{"args": {name: encoded}} or {"unrepresentable": {name: why}} for the arguments."""
    if not arguments:
        return {}
    encoded, bad = {}, {}
    for name, value in arguments.items():
        try:
            encoded[name] = encode(value)
        except Unrepresentable as exc:
            bad[name] = str(exc)
        except Exception as exc:  # a to_json or tolist that fails: not saved, said why
            bad[name] = f"cannot save it: {exc!r}"
    return {"unrepresentable": bad} if bad else {"args": encoded}


class _TooLarge:
    """A number of an instance file that float64 cannot hold (an integer of hundreds of digits,
    a literal like 1e400): the JSON reader keeps it as this marker, so that the error names
    its field instead of a conversion failing far from it."""

    def __init__(self, text: str):
        self.text = text

    def __repr__(self) -> str:
        digits = sum(c.isdigit() for c in self.text)
        return self.text if len(self.text) <= 24 else f"{self.text[:12]}… ({digits} digits)"


def _parse_int(text: str) -> int | _TooLarge:
    if len(text) < 300:  # surely within float64's range
        return int(text)
    try:  # int() refuses more than sys.get_int_max_str_digits() digits (4300 by default)
        value = int(text)
        float(value)
    except (ValueError, OverflowError):
        return _TooLarge(text)
    return value


def _parse_float(text: str) -> float | _TooLarge:
    value = float(text)
    return _TooLarge(text) if math.isinf(value) else value  # JSON's own infinity is a constant


def _too_large(value: Any) -> bool:
    """A number that float64 cannot hold: a marker of the reader, or a huge Python int."""
    if isinstance(value, _TooLarge):
        return True
    if isinstance(value, int) and not isinstance(value, bool):
        try:
            float(value)
        except OverflowError:
            return True
    return False


def _huge(value: Any) -> str:
    """The message for a number float64 cannot hold."""
    if isinstance(value, _TooLarge):
        shown = repr(value)
    else:  # a Python int; str() refuses those of more than 4300 digits
        shown = f"an integer of about {round(value.bit_length() * math.log10(2))} digits"
    return f"a number too large for float64 ({shown})"


def _kind(value: Any) -> str:
    if isinstance(value, _TooLarge):
        return f"the number {value!r}"
    return {list: "a list", dict: "an object", str: "a string", bool: "a boolean"}.get(
        type(value), "null" if value is None else f"the number {value!r}"
    )


def _array(field: str, value: Any, ndim: int, *, integer: bool = False) -> tuple[int, ...]:
    """Check a rectangular nested list of finite numbers; return its shape."""
    if value is None:
        raise InstanceError(field, "missing")
    shape: list[int] = []
    level: list[tuple[str, Any]] = [(field, value)]
    for _ in range(ndim):
        length, below = None, []
        for path, node in level:
            if not isinstance(node, list):
                raise InstanceError(
                    field, f"expected a {ndim}-dimensional nested list, but {path} is {_kind(node)}"
                )
            if length is None:
                length = len(node)
            elif len(node) != length:
                raise InstanceError(
                    field, f"ragged nested list: {path} has length {len(node)}, expected {length}"
                )
            below.extend((f"{path}[{i}]", x) for i, x in enumerate(node))
        if not length:
            raise InstanceError(field, f"{level[0][0]} is empty")
        shape.append(length)
        level = below
    for path, leaf in level:
        if _too_large(leaf):
            raise InstanceError(field, f"{_huge(leaf)} at {path}")
        # JSON booleans are ints to Python; they are never valid numbers here.
        if isinstance(leaf, bool) or not isinstance(leaf, (int, float)):
            raise InstanceError(field, f"non-numeric value {_kind(leaf)} at {path}")
        if integer and not isinstance(leaf, int):
            raise InstanceError(field, f"token ids must be integers, got {leaf!r} at {path}")
        if not math.isfinite(leaf):
            raise InstanceError(field, f"non-finite value {leaf!r} at {path}")
    return tuple(shape)


def _expect_shape(field: str, shape: tuple[int, ...], expected: tuple[int, ...], why: str):
    if shape != expected:
        raise InstanceError(field, f"expected shape {list(expected)} ({why}), got {list(shape)}")


def _labels(doc: dict, n: int, of: str) -> None:
    (count,) = _array("y", doc.get("y"), 1)
    if count != n:
        raise InstanceError("y", f"expected {n} labels (one per {of}), got {count}")
    for i, label in enumerate(doc["y"]):
        if label not in (1, -1):
            raise InstanceError("y", f"labels must be ±1, got {label!r} at index {i}")


def _validate_prompt(doc: dict) -> None:
    n, T, d = _array("X", doc.get("X"), 3)
    _labels(doc, n, "sequence of X")
    _expect_shape("v", _array("v", doc.get("v"), 1), (d,), "d from X")
    if doc.get("W") is not None:
        _expect_shape("W", _array("W", doc["W"], 2), (d, d), "d×d with d from X")
    if doc.get("p0") is not None:
        _expect_shape("p0", _array("p0", doc["p0"], 1), (d,), "d from X")
    _loss(doc)


def _validate_embedding(doc: dict) -> None:
    n, T = _array("sequences", doc.get("sequences"), 2, integer=True)
    _labels(doc, n, "sequence")
    vocab, d = _array("E0", doc.get("E0"), 2)
    _expect_shape("v", _array("v", doc.get("v"), 1), (d,), "d from E0")
    for i, row in enumerate(doc["sequences"]):
        for t, token in enumerate(row):
            if not 0 <= token < vocab:
                raise InstanceError(
                    "sequences",
                    f"token id {token} at sequences[{i}][{t}] is out of range "
                    f"[0, {vocab}) (E0 has {vocab} rows)",
                )
    eta0 = doc.get("eta0")
    if eta0 is None:
        raise InstanceError("eta0", "missing")
    if _too_large(eta0):
        raise InstanceError("eta0", _huge(eta0))
    if isinstance(eta0, bool) or not isinstance(eta0, (int, float)):
        raise InstanceError("eta0", f"must be a number, got {_kind(eta0)}")
    if not (math.isfinite(eta0) and eta0 > 0):
        raise InstanceError("eta0", f"must be a finite number > 0, got {eta0!r}")


def _loss(doc: dict) -> None:
    loss = doc.get("loss", "logistic")
    if loss not in LOSSES:
        raise InstanceError("loss", f"unknown loss {loss!r}; choose one of {', '.join(LOSSES)}")


def _validate_joint(doc: dict) -> None:
    """The fields that joint (W, v) training reads differently (docs/instances.md)."""
    if "v" in doc:
        raise InstanceError("v", 'joint training learns v from v(0) = 0: omit "v"')
    if doc.get("param", "W") != "W":
        raise InstanceError("param", f'joint training trains W itself ("W"), got {doc["param"]!r}')
    if doc.get("p") is None:
        raise InstanceError("p", "missing: joint training is ℓp mirror descent (e.g. 1.75, 2, 3)")
    if doc.get("loss") == "correlation":
        raise InstanceError(
            "loss",
            "joint training needs a strictly decreasing loss (logistic or "
            "exponential), got 'correlation'",
        )


def _validate_cross(doc: dict) -> None:
    n, T, d = _array("X", doc.get("X"), 3)
    _expect_shape("Z", _array("Z", doc.get("Z"), 2), (n, d), "n×d: one query per input of X")
    _labels(doc, n, "input of X")
    train = doc.get("train", "fixed-head")
    if train not in TRAINS:
        raise InstanceError("train", f"unknown training {train!r}; choose {' or '.join(TRAINS)}")
    if train == "joint":
        _validate_joint(doc)
    else:
        _expect_shape("v", _array("v", doc.get("v"), 1), (d,), "d from X")
    param = doc.get("param", "W")
    if param not in PARAMS:
        raise InstanceError(
            "param", f"unknown parametrisation {param!r}; choose {' or '.join(PARAMS)}"
        )
    _loss(doc)
    p = doc.get("p")
    if p is None:
        return
    if _too_large(p):
        raise InstanceError("p", _huge(p))
    if isinstance(p, bool) or not isinstance(p, (int, float)):
        raise InstanceError("p", f"the ℓp exponent must be a number, got {_kind(p)}")
    if not (math.isfinite(p) and p > 1):
        raise InstanceError("p", f"the ℓp exponent must be a finite number > 1, got {p!r}")


def _token(field: str, value: Any, path: str, vocab: int) -> int:
    if _too_large(value):
        raise InstanceError(field, f"{_huge(value)} at {path}")
    if isinstance(value, bool) or not isinstance(value, int):
        raise InstanceError(field, f"token ids must be integers, got {_kind(value)} at {path}")
    if not 0 <= value < vocab:
        raise InstanceError(
            field,
            f"token id {value} at {path} is out of range [0, {vocab}) "
            f"(embeddings has {vocab} rows)",
        )
    return value


def _validate_ntp(doc: dict) -> None:
    vocab, _ = _array("embeddings", doc.get("embeddings"), 2)
    sequences = doc.get("sequences")
    if sequences is None:
        raise InstanceError("sequences", "missing")
    if not isinstance(sequences, list) or not sequences:
        raise InstanceError(
            "sequences", f"expected a non-empty list of token lists, got {_kind(sequences)}"
        )
    for i, seq in enumerate(sequences):
        if not isinstance(seq, list) or not seq:
            what = "an empty list" if seq == [] else _kind(seq)
            raise InstanceError(
                "sequences", f"sequences[{i}] must be a non-empty list of token ids, got {what}"
            )
        for t, token in enumerate(seq):
            _token("sequences", token, f"sequences[{i}][{t}]", vocab)
    labels = doc.get("labels")
    if labels is None:
        raise InstanceError("labels", "missing")
    if not isinstance(labels, list) or len(labels) != len(sequences):
        count = len(labels) if isinstance(labels, list) else _kind(labels)
        raise InstanceError(
            "labels", f"expected {len(sequences)} token ids (one per sequence), got {count}"
        )
    for i, label in enumerate(labels):
        _token("labels", label, f"labels[{i}]", vocab)
        if label not in sequences[i]:
            raise InstanceError(
                "labels",
                f"labels[{i}] = {label} does not occur in sequences[{i}] (the attention model "
                "gives it probability 0: labels must be realizable)",
            )


def _validate_ntp_linear(doc: dict) -> None:
    d, m = _array("H", doc.get("H"), 2)
    rows, vocab = _array("P", doc.get("P"), 2)
    if rows != m:
        raise InstanceError(
            "P", f"expected {m} rows (one per context, the columns of H), got {rows}"
        )
    if vocab < 2:
        raise InstanceError("P", f"expected a vocabulary of at least 2 tokens, got {vocab}")
    for j, row in enumerate(doc["P"]):
        if any(x < 0 for x in row):
            raise InstanceError("P", f"probabilities must be ≥ 0 (row {j})")
        if abs(math.fsum(row) - 1.0) > PROBABILITY_TOL:
            raise InstanceError("P", f"row {j} sums to {math.fsum(row):.12g}, not 1")
    _expect_shape("pi", _array("pi", doc.get("pi"), 1), (m,), "one weight per context")
    for j, w in enumerate(doc["pi"]):
        if not w > 0:
            raise InstanceError("pi", f"context weights must be > 0, got {w!r} at index {j}")


def _read(path: str | Path) -> Any:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InstanceError(None, f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InstanceError(None, f"{path}: cannot read: {exc}") from None
    try:
        return json.loads(text, parse_int=_parse_int, parse_float=_parse_float)
    except json.JSONDecodeError as exc:
        raise InstanceError(
            None, f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    except RecursionError:
        raise InstanceError(
            None, f"{path}: malformed instance file: arrays or objects nested too deep"
        ) from None


def load_instance(path_or_dict: str | Path | dict) -> tuple[str, dict[str, Any]]:
    """Read and validate an instance; return (model, fields as torch tensors; numpy arrays
    and lists for the NTP models).

    prompt -> X, y, v, W, p0 as float64 tensors and loss as a string; embedding ->
    sequences as an int64 tensor, y, E0, v as float64 tensors and eta0 as a float; cross ->
    X, Z, y, v as float64 tensors, param and loss as strings, p as a float or None; cross with
    "train": "joint" -> the model key "cross-joint" (its own predictor) and X, Z, y, loss, p.
    Raises InstanceError naming the offending field.
    """
    doc = path_or_dict if isinstance(path_or_dict, dict) else _read(path_or_dict)
    if not isinstance(doc, dict):
        raise InstanceError(None, f"an instance must be a JSON object, got {_kind(doc)}")
    if any(key in doc for key in HEADER_KEYS):  # a saved counterexample: drop its header
        doc = {k: v for k, v in doc.items() if k not in HEADER_KEYS}
    model = doc.get("model")
    if model is None:
        raise InstanceError("model", f"missing (expected {_MODELS})")
    if model not in INSTANCE_FIELDS:
        raise InstanceError("model", f"unknown model {model!r} (expected {_MODELS})")
    for key in doc:
        if key not in INSTANCE_FIELDS[model]:
            allowed = ", ".join(sorted(INSTANCE_FIELDS[model]))
            raise InstanceError(key, f'unknown field for model "{model}" (allowed: {allowed})')
    validate = {
        "prompt": _validate_prompt,
        "embedding": _validate_embedding,
        "cross": _validate_cross,
        "ntp": _validate_ntp,
        "ntp-linear": _validate_ntp_linear,
    }
    validate[model](doc)
    if model == "ntp":  # numpy, not torch: the NTP models are numpy
        import numpy as np

        return model, {
            "embeddings": np.array(doc["embeddings"], dtype=np.float64),
            "sequences": [list(s) for s in doc["sequences"]],
            "labels": list(doc["labels"]),
        }
    if model == "ntp-linear":
        import numpy as np

        return model, {k: np.array(doc[k], dtype=np.float64) for k in ("H", "P", "pi")}

    import torch  # only once the instance is known to be valid

    f64 = torch.float64
    if model == "prompt":
        d = len(doc["v"])
        W = doc.get("W")
        p0 = doc.get("p0")
        return model, {
            "X": torch.tensor(doc["X"], dtype=f64),
            "y": torch.tensor(doc["y"], dtype=f64),
            "v": torch.tensor(doc["v"], dtype=f64),
            "W": torch.eye(d, dtype=f64) if W is None else torch.tensor(W, dtype=f64),
            "loss": doc.get("loss", "logistic"),
            "p0": torch.zeros(d, dtype=f64) if p0 is None else torch.tensor(p0, dtype=f64),
        }
    if model == "cross" and doc.get("train") == "joint":
        return "cross-joint", {
            "X": torch.tensor(doc["X"], dtype=f64),
            "Z": torch.tensor(doc["Z"], dtype=f64),
            "y": torch.tensor(doc["y"], dtype=f64),
            "loss": doc.get("loss", "logistic"),
            "p": float(doc["p"]),
        }
    if model == "cross":
        p = doc.get("p")
        return model, {
            "X": torch.tensor(doc["X"], dtype=f64),
            "Z": torch.tensor(doc["Z"], dtype=f64),
            "y": torch.tensor(doc["y"], dtype=f64),
            "v": torch.tensor(doc["v"], dtype=f64),
            "param": doc.get("param", "W"),
            "loss": doc.get("loss", "logistic"),
            "p": None if p is None else float(p),
        }
    return model, {
        "sequences": torch.tensor(doc["sequences"], dtype=torch.int64),
        "y": torch.tensor(doc["y"], dtype=f64),
        "E0": torch.tensor(doc["E0"], dtype=f64),
        "v": torch.tensor(doc["v"], dtype=f64),
        "eta0": float(doc["eta0"]),
    }
