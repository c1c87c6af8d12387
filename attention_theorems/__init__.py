"""attention-theorems, imported from anywhere: the public API of a claim or a conjecture.

    from attention_theorems import claim, equal_nonopt_instances, evidence, given

Every name is `theorems`' own (`claim`, `evidence`, `given`, `example`, `note`, `saved`, and
the strategies, dynamics and SVM oracle of `theorems.PUBLIC_API`; docs/api.md lists each).
The first of them that is asked for makes the suite's checkout importable
(`attention_theorems._suite.locate`: appended to sys.path, so that your own folders come
first) and imports it; a module of yours that would stand in for one of the suite's
(`theorems`, `models`, `strategies`, `reports`) is an ImportError naming both paths.

Importing this package alone imports nothing of the suite: pytest loads its plugin
(`attention_theorems.pytest_plugin`, the `pytest11` entry point) in every run.
"""

from __future__ import annotations

import importlib

#: Names of this package itself, never looked up in the suite.
_OWN = frozenset({"pytest_plugin", "_suite"})


def _theorems():
    from attention_theorems._suite import locate

    locate()
    return importlib.import_module("theorems")


def __getattr__(name: str):
    if name in _OWN or (name.startswith("__") and name != "__all__"):
        raise AttributeError(f"module 'attention_theorems' has no attribute {name!r}")
    theorems = _theorems()
    if name == "__all__":
        value = list(theorems.__all__)
    else:
        try:
            value = getattr(theorems, name)
        except AttributeError:
            raise AttributeError(
                f"module 'attention_theorems' has no attribute {name!r} (docs/api.md lists "
                "the public names)"
            ) from None
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *globals().get("__all__", ())})
