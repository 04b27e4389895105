"""Loading the backend once: the installed deep_gemm, or the embedded reference.

Nothing here runs at ``import dgcompat``. The first stable call (from any thread) takes the lock,
imports deep_gemm once and binds; later calls never come here. The backend is chosen by
``DGCOMPAT_BACKEND``: ``auto`` (default: the installed deep_gemm), ``deep_gemm`` or
``reference`` (the pure-torch backend, for machines without deep_gemm or a GPU).
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType
from typing import Callable

from .errors import DeepGemmUnavailableError, IncompatibleBuildError
from .detection import release

__all__ = ["lock", "backend_name", "load", "loaded_module", "reset", "register_reset"]

lock = threading.RLock()
_module: ModuleType | None = None
_failure: BaseException | None = None
_resets: list[Callable[[], None]] = []


def backend_name() -> str:
    """``"deep_gemm"``, ``"reference"`` or ``"none"`` (nothing installed and nothing chosen)."""
    choice = os.environ.get("DGCOMPAT_BACKEND", "auto").strip().lower() or "auto"
    if choice == "reference":
        return "reference"
    if choice in ("deep_gemm", "deep-gemm"):
        return "deep_gemm"
    return "deep_gemm" if release().installed else "none"


def loaded_module() -> ModuleType | None:
    """The bound backend module, or None if nothing has been bound yet (never imports)."""
    return _module


def _import_deep_gemm() -> ModuleType:
    rel = release()
    if not rel.installed:
        raise DeepGemmUnavailableError(
            "deep_gemm is not installed (no sgl-deep-gemm, no kernel wheel bundling it, no upstream build); "
            "install a certified pairing (see `dgcompat pin`) or set DGCOMPAT_BACKEND=reference to run on "
            "dgcompat's pure-torch reference backend"
        )
    if rel.torch_ok is False and os.environ.get("DGCOMPAT_ALLOW_TORCH_MISMATCH") != "1":
        raise IncompatibleBuildError(
            f"{rel.label} is incompatible with torch {rel.torch} (built for torch{rel.expected_torch}): its native "
            f"library would fail to load or mis-read every tensor. Install torch{rel.expected_torch}, or a "
            f"deep_gemm built for torch {rel.torch}. (DGCOMPAT_ALLOW_TORCH_MISMATCH=1 imports it anyway.)"
        )
    try:
        return importlib.import_module("deep_gemm")
    except BaseException as exc:  # OSError (undefined symbol), AssertionError (no CUDA toolkit), ...
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise IncompatibleBuildError(
            f"importing deep_gemm ({rel.label}, binding {rel.binding}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def load() -> ModuleType:
    """Import and return the backend module (cached; thread-safe; failures are cached too)."""
    global _module, _failure
    if _module is not None:
        return _module
    with lock:
        if _module is not None:
            return _module
        if _failure is not None:
            raise _failure
        name = backend_name()
        try:
            if name == "reference":
                module = importlib.import_module("dgcompat.reference")
            else:
                module = _import_deep_gemm()
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            _failure = exc
            raise
        _module = module
        return module


def register_reset(fn: Callable[[], None]) -> None:
    """Modules that cache bound callables register how to forget them."""
    _resets.append(fn)


def reset() -> None:
    """Forget the backend and every bound callable (tests; does not unload deep_gemm)."""
    global _module, _failure
    with lock:
        _module = None
        _failure = None
        for fn in _resets:
            fn()
