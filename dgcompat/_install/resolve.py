"""The facade's own functions: :func:`resolve`, :func:`passthrough_names` and :func:`reset`.

Loaded on first use of one of these names (``import dgcompat`` loads only the name table).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

from .. import _backend
from .. import _binding
from .. import _device
from .. import detection
from .. import table
from .._params import parameter_names
from .._surface import DEEP_GEMM_MODULES
from .._surface import NAMES
from .._surface import SUBMODULES

__all__ = ["resolve", "passthrough_names", "reset"]


def passthrough_names() -> list[str]:
    """Public names of the installed deep_gemm that dgcompat forwards unchanged (imports deep_gemm)."""
    module = _backend.load()
    exported = getattr(module, "__all__", None)
    names = exported if exported is not None else dir(module)
    return sorted(n for n in names if not n.startswith("_") and n not in NAMES and n not in SUBMODULES)


def resolve(name: str) -> Callable[..., Any]:
    """The callable behind ``dgcompat.<name>`` on this install, for a deep_gemm function of the stable surface.

    Where the installed function already matches the stable contract (the table's
    :data:`~dgcompat.table.UPSTREAM_IDENTITY`) this is the upstream object itself (call it directly
    to pay nothing; its errors are then deep_gemm's own). Otherwise it is dgcompat's function.
    Binds (imports deep_gemm) if needed.
    """
    module = NAMES.get(name)
    if module is None or module not in DEEP_GEMM_MODULES:
        raise AttributeError(f"{name!r} is not a deep_gemm function of dgcompat's stable surface")
    stable: Callable[..., Any] = getattr(importlib.import_module(f"dgcompat.{module}"), name)
    if not callable(stable) or isinstance(stable, type):
        return stable
    upstream: Callable[..., Any] | None = getattr(_backend.load(), name, None)
    if upstream is None or not table.capabilities().identical_to_upstream(name):
        return stable
    # The same parameters in the same positions (probed: releases insert and append parameters).
    return upstream if parameter_names(upstream) == parameter_names(stable) else stable


def reset() -> None:
    """Forget detection, capabilities, device answers and every binding (for tests; deep_gemm stays imported)."""
    _binding.reset()
    table.reset()
    detection.reset()
    _device.reset()
