"""Where the torch work of large sweeps runs: one setting, ``ATTN_DEVICE``, read here only.

    ATTN_DEVICE=cpu        the default; everything the suite needs runs on CPU
    ATTN_DEVICE=cuda       the current GPU (cuda:N for another), if torch sees one
    ATTN_DEVICE=auto       a GPU when one is present, else CPU

A GPU that is asked for but absent falls back to CPU with a warning (a sweep configured for a
GPU machine still runs on a laptop). Results are float64 on either device; nothing requires
a GPU. Callers move their tensors with ``tensor.to(device())``.
"""

from __future__ import annotations

import os
import warnings

import torch

DEVICE_ENV = "ATTN_DEVICE"
CPU = torch.device("cpu")


class DeviceWarning(UserWarning):
    """The device asked for is not available here; the work runs on CPU."""


def _fallback(asked: str, why: str) -> torch.device:
    warnings.warn(f"{DEVICE_ENV}={asked!r}: {why}; running on cpu", DeviceWarning, stacklevel=3)
    return CPU


def device(name: str | None = None) -> torch.device:
    """The torch device named by ``name``, else by $ATTN_DEVICE (default cpu).

    ValueError for a name that is not a device; a CUDA (or MPS) device that torch cannot use
    here falls back to CPU with a DeviceWarning.
    """
    asked = (os.environ.get(DEVICE_ENV, "") if name is None else name).strip().lower()
    if asked in ("", "cpu"):
        return CPU
    if asked == "auto":
        return torch.device("cuda") if torch.cuda.is_available() else CPU
    try:
        dev = torch.device(asked)
    except (RuntimeError, ValueError):
        raise ValueError(
            f"{DEVICE_ENV}={asked!r} is not a torch device; use cpu, cuda, cuda:N or auto"
        ) from None
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            return _fallback(asked, "torch sees no CUDA device")
        if dev.index is not None and dev.index >= torch.cuda.device_count():
            count = torch.cuda.device_count()
            return _fallback(asked, f"only {count} CUDA device(s) here")
        return dev
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            return _fallback(asked, "torch sees no MPS device")
        return dev
    if dev.type != "cpu":
        return _fallback(asked, f"device type {dev.type!r} is not supported by the suite")
    return dev


def describe(dev: torch.device | None = None) -> str:
    """One line naming the device (and the GPU model), for reports and logs."""
    dev = device() if dev is None else dev
    if dev.type == "cuda":
        return f"{dev} ({torch.cuda.get_device_name(dev)})"
    return str(dev)
