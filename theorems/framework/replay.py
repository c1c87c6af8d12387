"""The counterexample store: a refuted claim's minimal counterexample, saved and replayed.

When a run refutes a claim, the plugin saves `theorems/counterexamples/<CLAIM-ID>.json`:

    {
      "counterexample": {claim, paper, statement, verdict, expected, profile, saved,
                         falsifying_example, example},        <- header, ignored by `check`
      "model": "prompt", "X": ..., "y": ..., ...              <- the instance (check CLI schema)
      "replay": {"inst": {"instance": "PromptInstance", ...}} <- the test's arguments
    }

so `python -m theorems check theorems/counterexamples/ID.json` reads it as an instance file.
`replay` holds the failing example's @given arguments in a typed JSON encoding (instances,
tensors, arrays, numbers, strings, tuples, lists, dicts of those). On the next run `@claim`
adds them as an explicit `@example`, so Hypothesis tries the saved counterexample first.
The header's `example` is the line to paste into the claim to keep it for good:

    from theorems.framework.replay import saved
    @example(inst=saved("ID"))

Limitation: automatic replay needs every @given argument to be keyword-given and
representable (above); a claim with another kind of argument (a function, a strategy-drawn
object of its own class) is still saved for the report and `check`, but not replayed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from theorems.framework import REPO_ROOT, evidence
from theorems.framework.instances import (
    INSTANCE_FIELDS,
    Undecodable,
    decode,
)

STORE_ENV = "ATTN_COUNTEREXAMPLES"
DEFAULT_STORE = Path("theorems") / "counterexamples"

_store: Path | None = None


class ReplayError(RuntimeError):
    """A saved counterexample could not be read or rebuilt (named with its file)."""


def set_store(path: Path | str | None) -> None:
    """Where counterexamples are saved and looked up (the plugin sets it at configure)."""
    global _store
    _store = None if path is None else Path(path)


def store_dir() -> Path:
    """The configured store, else $ATTN_COUNTEREXAMPLES, else theorems/counterexamples."""
    if _store is not None:
        return _store
    env = os.environ.get(STORE_ENV)
    return Path(env) if env else REPO_ROOT / DEFAULT_STORE


def path_for(claim_id: str, store: Path | None = None) -> Path:
    return (store or store_dir()) / f"{claim_id}.json"


# --------------------------------------------------------------------------- typed encoding


# --------------------------------------------------------------------------- saving


def _literal(doc: Mapping) -> str | None:
    """A Python literal for a plain encoded value (for a self-contained @example line)."""
    if "value" in doc and (doc["value"] is None or isinstance(doc["value"], (bool, int, str))):
        return repr(doc["value"])
    if "float" in doc and isinstance(doc["float"], float):
        return repr(doc["float"])
    return None


def example_line(claim_id: str, args: Mapping[str, Mapping]) -> str:
    """The ready-to-paste @example for saved arguments."""
    literals = {name: _literal(doc) for name, doc in args.items()}
    if literals and all(v is not None for v in literals.values()):
        return "@example(" + ", ".join(f"{k}={v}" for k, v in literals.items()) + ")"
    if len(args) == 1:
        (name,) = args
        return f'@example({name}=saved("{claim_id}"))'
    return f'@example(**saved_arguments("{claim_id}"))'


def _instance_part(recorded: Any) -> tuple[dict, dict]:
    """(top-level instance fields in the check CLI schema, the rest of what was recorded)."""
    if not isinstance(recorded, dict):
        return {}, {} if recorded is None else {"recorded": recorded}
    fields = INSTANCE_FIELDS.get(recorded.get("model"))
    if fields is None:
        return {}, {"recorded": recorded}
    top = {k: recorded[k] for k in fields if k in recorded}
    rest = {k: v for k, v in recorded.items() if k not in fields}
    return top, ({"extra": rest} if rest else {})


_SAME = "$instance"  # an argument's instance fields are the file's top-level instance


def _share_instance(args: Mapping[str, Mapping], top: Mapping) -> dict:
    """Replace an instance argument's fields that repeat the file's instance by a reference
    (a saved file holds its arrays once)."""
    shared = {}
    for name, doc in args.items():
        fields = INSTANCE_FIELDS.get(top.get("model"), ())
        data = doc.get("json") if "instance" in doc else None
        if (
            data
            and fields
            and evidence.to_jsonable({k: data.get(k) for k in fields})
            == {k: top.get(k) for k in fields}
        ):
            rest = {k: v for k, v in data.items() if k not in fields}
            doc = {**doc, "json": {_SAME: True, **rest}}
        shared[name] = doc
    return shared


def _expand(args: Mapping[str, Mapping], doc: Mapping) -> dict:
    """Inverse of `_share_instance`."""
    out = {}
    for name, arg in args.items():
        data = arg.get("json") if isinstance(arg, Mapping) else None
        if isinstance(data, Mapping) and data.get(_SAME):
            fields = INSTANCE_FIELDS.get(doc.get("model"), ())
            rest = {k: v for k, v in data.items() if k != _SAME}
            arg = {**arg, "json": {**{k: doc[k] for k in fields if k in doc}, **rest}}
        out[name] = arg
    return out


def _dump(doc: Mapping) -> str:
    """The header indented, every other top-level field on one line (readable, diffable)."""
    parts = []
    for key, value in doc.items():
        if key == "counterexample":
            text = json.dumps(value, indent=2, ensure_ascii=False, allow_nan=False)
            text = text.replace("\n", "\n  ")
        else:
            text = json.dumps(value, ensure_ascii=False, allow_nan=False)
        parts.append(f"  {json.dumps(key)}: {text}")
    return "{\n" + ",\n".join(parts) + "\n}\n"


def _essence(doc: Mapping) -> Any:
    """What makes two saved files the same counterexample: the instance, the arguments and
    the claim's identity, not the date or how Hypothesis worded the failure."""
    header = {k: v for k, v in doc["counterexample"].items() if k in ("claim", "expected")}
    rest = {k: v for k, v in doc.items() if k != "counterexample"}
    return json.loads(json.dumps({"header": header, **rest}, sort_keys=True))


def save(claim: Mapping, replay: Mapping | None, *, profile: str, store: Path) -> dict | None:
    """Save a refuted claim's counterexample; return {"path", "example", "changed",
    "replayable", "note"}, or None if there is nothing to save. The file is rewritten only
    when its content (not its date) changes."""
    recorded, replay = claim.get("counterexample"), dict(replay or {})
    args = replay.get("args") or {}
    if recorded is None and not args:
        return None
    top, rest = _instance_part(recorded)
    header = {
        "claim": claim["id"],
        "paper": claim.get("paper", ""),
        "statement": claim.get("statement", ""),
        "verdict": claim.get("verdict", "refuted"),
        "expected": claim.get("expected", ""),
        "profile": profile,
        "saved": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "example": example_line(claim["id"], args) if args else None,
        **rest,
        "falsifying_example": (claim.get("falsifying_example") or "").splitlines(),
    }
    if not args:
        header["not_replayed"] = (
            "arguments not saved: "
            + "; ".join(f"{k}: {v}" for k, v in (replay.get("unrepresentable") or {}).items())
            if replay.get("unrepresentable")
            else "no @given arguments were recorded"
        )
    doc = {"counterexample": header, **top}
    if args:
        doc["replay"] = _share_instance(args, evidence.to_jsonable(top))
    doc = evidence.to_jsonable(doc)
    path = path_for(claim["id"], store)
    changed = True
    try:
        changed = _essence(json.loads(path.read_text(encoding="utf-8"))) != _essence(doc)
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        pass  # no file, or one that is not a saved counterexample: written anew
    if changed:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.tmp")
        tmp.write_text(_dump(doc), encoding="utf-8")
        os.replace(tmp, path)
    return {
        "path": path,
        "example": header["example"],
        "changed": changed,
        "replayable": bool(args),
        "note": header.get("not_replayed"),
    }


# --------------------------------------------------------------------------- loading


def load(claim_id: str, store: Path | None = None) -> dict | None:
    """The saved file of a claim as a dict, None if there is none; ReplayError if bad."""
    path = path_for(claim_id, store)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ReplayError(f"{path}: cannot read: {exc}") from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ReplayError(
            f"{path}: invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(doc, dict):
        raise ReplayError(f"{path}: expected a JSON object, got {_json_kind(doc)}")
    if "replay" in doc and not isinstance(doc["replay"], dict):
        raise ReplayError(
            f"{path}: 'replay' must be an object (argument name -> saved value), "
            f"got {_json_kind(doc['replay'])}"
        )
    return doc


def _json_kind(value: Any) -> str:
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean"}
    return "null" if value is None else kinds.get(type(value), f"the number {value!r}")


def saved_arguments(claim_id: str, store: Path | None = None) -> dict[str, Any]:
    """The saved @given arguments of a claim's counterexample, rebuilt.

    Without an explicit `store`: the run's store, else the checkout's own (a counterexample
    pinned with `@example(inst=saved("ID"))` is part of the claim's source, committed under
    theorems/counterexamples/, and must load when a run saves elsewhere, such as an isolated
    store of a test or of the fault-injection run)."""
    doc, path = load(claim_id, store), path_for(claim_id, store)
    pinned = REPO_ROOT / DEFAULT_STORE
    if doc is None and store is None and pinned.resolve() != store_dir().resolve():
        doc, path = load(claim_id, pinned), path_for(claim_id, pinned)
    if doc is None:
        raise ReplayError(f"{path_for(claim_id, store)}: no saved counterexample for {claim_id}")
    args = doc.get("replay")
    if not isinstance(args, dict) or not args:
        raise ReplayError(f"{path}: has no replayable arguments ('replay' is missing)")
    for name, value in args.items():
        if not isinstance(value, dict):
            raise ReplayError(
                f"{path}: replay argument {name!r} must be an encoded value (an object such as "
                f'{{"value": 3}}), got {_json_kind(value)}'
            )
    try:
        return {name: decode(value) for name, value in _expand(args, doc).items()}
    except (ReplayError, Undecodable) as exc:
        raise ReplayError(f"{path}: {exc}") from None
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise ReplayError(f"{path}: cannot rebuild the saved arguments: {exc}") from None


def saved(claim_id: str, name: str | None = None) -> Any:
    """One saved argument of a claim's counterexample (the only one if `name` is None):
    `@example(inst=saved("ID"))`."""
    args = saved_arguments(claim_id)
    if name is None:
        if len(args) != 1:
            raise ReplayError(
                f"{claim_id}: the counterexample has arguments {sorted(args)}; name one, or "
                f'use @example(**saved_arguments("{claim_id}"))'
            )
        (name,) = args
    if name not in args:
        raise ReplayError(f"{claim_id}: no saved argument {name!r} (have {sorted(args)})")
    return args[name]


_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*$")


class BrokenReplay:
    """Stands in for the arguments of a saved counterexample that cannot be rebuilt: the
    registry's example wrapper raises ReplayError with `reason`, so the claim's verdict is
    error with that reason (never a silent pass)."""

    def __init__(self, reason: str):
        self.reason = reason

    def __repr__(self) -> str:
        return "<saved counterexample that cannot be rebuilt>"


def replay_example(claim_id: str, given_names: set[str]) -> dict[str, Any] | None:
    """Keyword arguments of an explicit example replaying the saved counterexample, or None
    (no file, or arguments that do not match this claim's @given)."""
    if not _SAFE_ID.match(claim_id):
        return None
    try:
        doc = load(claim_id)
        if doc is None or not isinstance(doc.get("replay"), dict):
            return None
        if set(doc["replay"]) != set(given_names):
            return None  # the claim's arguments changed since: the file is kept for `check`
        return saved_arguments(claim_id)
    except ReplayError as exc:
        return {name: BrokenReplay(str(exc)) for name in given_names}
