"""The backend module: which one this process uses, whether it may be imported, and importing it once.

The backend is chosen by ``DGCOMPAT_BACKEND``: ``auto`` (default: the installed deep_gemm),
``deep_gemm`` / ``vllm`` / ``tensorrt-llm`` (a specific copy) or ``reference`` (dgcompat's
pure-torch backend, :mod:`dgcompat.reference.backend`). :func:`load` imports it the first time a
stable call needs it (under :data:`lock`, from any thread); nothing here runs at ``import dgcompat``.

A failed load is remembered with the environment it was tried under (``DGCOMPAT_BACKEND``,
``DGCOMPAT_ALLOW_TORCH_MISMATCH``) and retried once that environment changes, or after
:func:`reset`; the same rule holds with dgcompat installed as deep_gemm. A successful load is final
(deep_gemm cannot be unloaded).

This module also owns the real deep_gemm modules while dgcompat is installed as deep_gemm
(:data:`REAL`): the install (:mod:`dgcompat._install`) fills the registry, the binding reads it
through :func:`import_real`, so the real package is never confused with its facade.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from types import ModuleType

from . import env
from .detection import backend_name
from .detection import release
from .errors import DeepGemmUnavailableError
from .errors import IncompatibleBuildError
from .errors import UnidentifiedBuildError

__all__ = ["TOP", "REAL", "Registry", "lock", "import_refusal", "import_real", "real_submodule",
           "load", "loaded_module", "reset"]

TOP = "deep_gemm"

#: Serializes loading the backend and binding stable functions to it (re-entrant: a binder may load).
lock = threading.RLock()


@dataclass
class Registry:
    """The real deep_gemm behind the facades while dgcompat is installed as deep_gemm."""

    installed: bool = False
    real: dict[str, ModuleType] = field(default_factory=dict)
    """Real modules behind facade names, by name (``deep_gemm``, ``deep_gemm.utils``, ...)."""
    facades: dict[str, ModuleType] = field(default_factory=dict)
    """The facade modules handed out, by name."""
    failure: BaseException | None = None
    """Why the real top-level package did not load (its import error, or the refusal)."""
    retry: Callable[[], None] | None = None
    """Set by the install once the facade exists: loads the real package now if it is not loaded (a refused
    or failed load is tried again, as a load without the install is)."""

    def clear(self) -> None:
        self.installed = False
        self.real.clear()
        self.facades.clear()
        self.failure = None
        self.retry = None


#: The one registry of the process (written by the install only).
REAL = Registry()


class _State:
    module: ModuleType | None = None
    failure: tuple[tuple[str, str], BaseException] | None = None  # (environment it was tried under, error)


_state = _State()


def loaded_module() -> ModuleType | None:
    """The loaded backend module, or None if nothing has been loaded yet (never imports)."""
    return _state.module


def import_refusal() -> IncompatibleBuildError | None:
    """Why deep_gemm must not be imported in this process, or None (never imports; the install asks too)."""
    planted = sys.modules.get(TOP)
    if planted is not None and planted is sys.modules.get("dgcompat") and not REAL.installed:
        # `sys.modules["deep_gemm"] = dgcompat` by hand: detection and binding would see dgcompat itself.
        return IncompatibleBuildError(
            "sys.modules['deep_gemm'] is dgcompat itself, so the real deep_gemm cannot be imported; call "
            "dgcompat.install_as_deep_gemm() instead of aliasing by hand")
    rel = release()
    if not rel.installed:
        return DeepGemmUnavailableError(
            "deep_gemm is not installed (no sgl-deep-gemm, no kernel wheel bundling it, no upstream build); "
            "install a certified pairing (see `dgcompat pin`) or set DGCOMPAT_BACKEND=reference to run on "
            "dgcompat's pure-torch reference backend"
        )
    if rel.refusal is not None:
        return UnidentifiedBuildError(rel.refusal)
    if rel.torch_ok is False and not env.allow_torch_mismatch():
        return IncompatibleBuildError(
            f"{rel.label} is incompatible with torch {rel.torch} ("
            f"{'its stable-ABI library needs torch' if rel.torch_rule == 'minimum' else 'built for torch'}"
            f"{rel.expected_torch}): its native "
            f"library would fail to load or mis-read every tensor. Install torch{rel.expected_torch}, or a "
            f"deep_gemm built for torch {rel.torch}. (DGCOMPAT_ALLOW_TORCH_MISMATCH=1 imports it anyway.)"
        )
    return None


def import_real() -> ModuleType:
    """The real ``deep_gemm`` package, never the facade.

    Without the install this is ``importlib.import_module("deep_gemm")``. With it, importing
    ``deep_gemm`` (the facade) loads the real package into :data:`REAL`; its failure is re-raised here.
    """
    if not REAL.installed:
        module = importlib.import_module(TOP)
        if module is sys.modules.get("dgcompat"):
            # `sys.modules["deep_gemm"] = dgcompat` by hand: binding to it would recurse forever.
            raise ImportError("sys.modules['deep_gemm'] is dgcompat itself, so the real deep_gemm cannot be "
                              "imported; call dgcompat.install_as_deep_gemm() instead of aliasing by hand")
        return module
    importlib.import_module(TOP)
    real = REAL.real.get(TOP)
    if real is None and REAL.retry is not None:
        # Refused or failed earlier (the facade stays imported): decide again now, as without the install.
        REAL.retry()
        real = REAL.real.get(TOP)
    if real is not None:
        return real
    if REAL.failure is not None:
        raise REAL.failure
    raise ImportError("deep_gemm is installed as dgcompat with the reference backend; no real deep_gemm was loaded")


def real_submodule(name: str) -> ModuleType:
    """The real ``deep_gemm.<sub>`` module ``name`` (imports it on first use; raises ImportError)."""
    if not REAL.installed:
        return importlib.import_module(name)
    real = REAL.real.get(name)
    if real is not None:
        return real
    module = importlib.import_module(name)
    if module is REAL.facades.get(name):
        real = REAL.real.get(name)
        if real is None:
            raise ImportError(f"the installed deep_gemm has no module {name}")
        return real
    return module


def _import_deep_gemm() -> ModuleType:
    refusal = import_refusal()
    if refusal is not None:
        raise refusal
    rel = release()
    try:
        if rel.module == TOP:
            return import_real()
        return importlib.import_module(rel.module)  # a vendored copy's import name (vllm.third_party.deep_gemm)
    except BaseException as exc:  # OSError (undefined symbol), AssertionError (no CUDA toolkit), ...
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise IncompatibleBuildError(
            f"importing deep_gemm ({rel.label}, binding {rel.binding}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def _environment() -> tuple[str, str]:
    return (os.environ.get("DGCOMPAT_BACKEND", ""), os.environ.get("DGCOMPAT_ALLOW_TORCH_MISMATCH", ""))


def load() -> ModuleType:
    """Import and return the backend module (cached; thread-safe).

    A failure is cached until the environment that decides the backend changes (or :func:`reset`).
    """
    module = _state.module
    if module is not None:
        return module
    with lock:
        if _state.module is not None:
            return _state.module
        tried_under = _environment()
        if _state.failure is not None and _state.failure[0] == tried_under:
            raise _state.failure[1]
        _state.failure = None
        try:
            if backend_name() == "reference":
                # The backend itself, imported lazily (it imports torch).
                module = importlib.import_module("dgcompat.reference.backend")
            else:
                module = _import_deep_gemm()
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            _state.failure = (tried_under, exc)
            raise
        _state.module = module
        return module


def reset() -> None:
    """Forget the loaded backend and any remembered failure (deep_gemm stays imported)."""
    with lock:
        _state.module = None
        _state.failure = None
