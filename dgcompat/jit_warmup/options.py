"""The checks of the keyword arguments :func:`~dgcompat.jit_warmup.warmup` and
:func:`~dgcompat.jit_warmup.check.check` share: each bad value is a
:class:`~dgcompat.errors.BadArgumentError` naming the argument, what was expected and what came."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

from ..errors import BadArgumentError
from .cache import checked_folder
from .cache import jit_cache_dir
from .spec import positive

__all__ = ["check_options", "cache_folder"]


def check_options(fn: str, *, workers: Any = None, device: Any = 0, method: Any = "auto", processes: Any = None,
                  timeout_s: Any = None) -> None:
    """Raise for a bad ``workers`` / ``processes`` (positive ints or None), ``device`` (an index >= 0),
    ``method`` or ``timeout_s`` (None or a positive, finite number of seconds) of ``fn``."""
    if workers is not None:
        positive(fn, "workers", workers)
    if processes is not None:
        positive(fn, "processes", processes)
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise BadArgumentError(fn, "device", "a CUDA device index >= 0", repr(device))
    if method not in ("auto", "stand-in", "calls"):
        raise BadArgumentError(fn, "method", "'auto', 'stand-in' or 'calls'", repr(method))
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or not math.isfinite(timeout_s) or timeout_s <= 0):
        raise BadArgumentError(fn, "timeout_s", "None or a positive, finite number of seconds", repr(timeout_s))


def cache_folder(fn: str, cache_dir: Any, isolate: Any, *, write: bool = True) -> Path:
    """The absolute folder ``cache_dir`` / ``isolate`` name (:func:`~dgcompat.jit_warmup.cache.jit_cache_dir`),
    checked to be a folder this process can write (``write=False``: read) or create."""
    if cache_dir is not None and (not isinstance(cache_dir, (str, os.PathLike)) or not str(cache_dir).strip()):
        raise BadArgumentError(fn, "cache_dir", "None or a folder path (str or os.PathLike)", repr(cache_dir))
    if not isinstance(isolate, bool):
        raise BadArgumentError(fn, "isolate", "True or False", repr(isolate))
    return checked_folder(jit_cache_dir(cache_dir, isolate=isolate), fn, "cache_dir", write=write)
