"""Loading the backend once, and binding each stable function to it once.

Nothing here runs at ``import dgcompat``. The first stable call (from any thread) takes the lock,
imports deep_gemm once and binds; later calls never come here. The backend is chosen by
``DGCOMPAT_BACKEND``: ``auto`` (default: the installed deep_gemm), ``deep_gemm`` or
``reference`` (the pure-torch backend, for machines without deep_gemm or a GPU).

Binding is one mechanism, :class:`Slots`: each adapter module declares ``_B = Slots(name=binder,
...)`` and its stable functions read ``_B.name``. The first read runs the binder under the lock
and stores the result as a plain instance attribute, so every later read is an ordinary attribute
hit (no ``try``, no call, no lock); :func:`reset` empties every slot.
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType
from typing import Any, Callable

from .errors import DeepGemmUnavailableError, IncompatibleBuildError
from .detection import release

__all__ = ["lock", "Slots", "backend_name", "import_refusal", "load", "loaded_module", "reset", "register_reset"]

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


def import_refusal() -> IncompatibleBuildError | None:
    """Why deep_gemm must not be imported in this process, or None (never imports; also used by the install)."""
    rel = release()
    if not rel.installed:
        return DeepGemmUnavailableError(
            "deep_gemm is not installed (no sgl-deep-gemm, no kernel wheel bundling it, no upstream build); "
            "install a certified pairing (see `dgcompat pin`) or set DGCOMPAT_BACKEND=reference to run on "
            "dgcompat's pure-torch reference backend"
        )
    if rel.torch_ok is False and os.environ.get("DGCOMPAT_ALLOW_TORCH_MISMATCH") != "1":
        return IncompatibleBuildError(
            f"{rel.label} is incompatible with torch {rel.torch} (built for torch{rel.expected_torch}): its native "
            f"library would fail to load or mis-read every tensor. Install torch{rel.expected_torch}, or a "
            f"deep_gemm built for torch {rel.torch}. (DGCOMPAT_ALLOW_TORCH_MISMATCH=1 imports it anyway.)"
        )
    return None


def _import_deep_gemm() -> ModuleType:
    refusal = import_refusal()
    if refusal is not None:
        raise refusal
    from ._install import import_real  # the real package even when dgcompat is installed as deep_gemm

    rel = release()
    try:
        return import_real()
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


class Slots:
    """Bound upstream callables of one adapter module, each bound on first read.

    ``Slots(fp8_gemm_nt=_bind_fp8)``: reading ``slots.fp8_gemm_nt`` the first time calls
    ``_bind_fp8()`` under :data:`lock` and caches what it returns in the instance ``__dict__``;
    later reads never reach :meth:`__getattr__`. A binder that raises caches nothing (the next
    call binds again, so a fixed environment is picked up).
    """

    def __init__(self, **binders: Callable[[], Any]) -> None:
        object.__setattr__(self, "_binders", binders)
        _SLOTS.append(self)

    def __getattr__(self, name: str) -> Any:  # only on a miss
        binder = self.__dict__["_binders"].get(name)
        if binder is None:
            raise AttributeError(name)
        with lock:
            if name in self.__dict__:
                return self.__dict__[name]
            value = binder()
            self.__dict__[name] = value
            return value

    def clear(self) -> None:
        """Forget every bound value (the binders stay)."""
        binders = self.__dict__["_binders"]
        self.__dict__.clear()
        self.__dict__["_binders"] = binders


_SLOTS: list[Slots] = []


def register_reset(fn: Callable[[], None]) -> None:
    """Modules that cache bound callables register how to forget them."""
    _resets.append(fn)


def reset() -> None:
    """Forget the backend and every bound callable (tests; does not unload deep_gemm)."""
    global _module, _failure
    with lock:
        _module = None
        _failure = None
        for slots in _SLOTS:
            slots.clear()
        for fn in _resets:
            fn()
