"""Loading the backend once, and binding each stable function to it once.

Nothing here runs at ``import dgcompat``. The first stable call (from any thread) takes the lock,
imports deep_gemm once and binds; later calls never come here. The backend is chosen by
``DGCOMPAT_BACKEND``: ``auto`` (default: the installed deep_gemm), ``deep_gemm`` or
``reference`` (the pure-torch backend, for machines without deep_gemm or a GPU).

A failed load is remembered with the environment it was tried under (``DGCOMPAT_BACKEND``,
``DGCOMPAT_ALLOW_TORCH_MISMATCH``) and retried once that environment changes, so setting
``DGCOMPAT_BACKEND=reference`` after a failed lookup takes effect. A successful load is final
(deep_gemm cannot be unloaded).

Binding is one mechanism, :class:`Slots`: each adapter module declares ``_B = Slots(name=binder,
...)`` and its stable functions call ``_B.name(...)``. The first call runs the binder under the
lock and stores the result as a plain instance attribute, so every later call is an ordinary
attribute hit (no ``try``, no extra call, no lock) followed by the upstream call; :func:`reset`
unbinds every slot. :func:`upstream` resolves a declared :class:`~dgcompat._calls.UpstreamCall`
(or its alternatives) on the loaded module.
"""

from __future__ import annotations

import importlib
import os
import sys
import threading
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable

from . import _env
from .detection import release
from .errors import DeepGemmUnavailableError, IncompatibleBuildError, UnidentifiedBuildError

if TYPE_CHECKING:
    from ._calls import UpstreamCall

__all__ = ["lock", "Slots", "Defaults", "backend_name", "load", "loaded_module", "upstream", "find_upstream", "import_refusal", "reset",
           "register_reset"]

lock = threading.RLock()
_module: ModuleType | None = None
_failure: tuple[tuple[str, str], BaseException] | None = None  # (environment it was tried under, error)
_resets: list[Callable[[], None]] = []


def backend_name() -> str:
    """``"deep_gemm"``, ``"reference"`` or ``"none"`` (nothing installed and nothing chosen).

    A vendored copy (``vllm``, ``tensorrt-llm``) is a deep_gemm backend. Raises
    :class:`~dgcompat.errors.ConfigurationError` for an unknown ``DGCOMPAT_BACKEND``.
    """
    choice = _env.backend()
    if choice == "reference":
        return "reference"
    if choice != "auto":
        return "deep_gemm"
    return "deep_gemm" if release().installed else "none"


def loaded_module() -> ModuleType | None:
    """The bound backend module, or None if nothing has been bound yet (never imports)."""
    return _module


def import_refusal() -> IncompatibleBuildError | None:
    """Why deep_gemm must not be imported in this process, or None (never imports; also used by the install)."""
    planted = sys.modules.get("deep_gemm")
    if planted is not None and planted is sys.modules.get("dgcompat"):
        from ._install import installed_as_deep_gemm

        if not installed_as_deep_gemm():
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
    if rel.torch_ok is False and not _env.allow_torch_mismatch():
        return IncompatibleBuildError(
            f"{rel.label} is incompatible with torch {rel.torch} ("
            f"{'its stable-ABI library needs torch' if rel.torch_rule == 'minimum' else 'built for torch'}"
            f"{rel.expected_torch}): its native "
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
        if rel.module == "deep_gemm":
            return import_real()
        return importlib.import_module(rel.module)  # a vendored copy's import name (vllm.third_party.deep_gemm)
    except BaseException as exc:  # OSError (undefined symbol), AssertionError (no CUDA toolkit), ...
        if isinstance(exc, (KeyboardInterrupt, SystemExit)):
            raise
        raise IncompatibleBuildError(
            f"importing deep_gemm ({rel.label}, binding {rel.binding}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def load() -> ModuleType:
    """Import and return the backend module (cached; thread-safe).

    A failure is cached until the environment that decides the backend changes.
    """
    global _module, _failure
    if _module is not None:
        return _module
    with lock:
        if _module is not None:
            return _module
        tried_under = _environment()
        if _failure is not None and _failure[0] == tried_under:
            raise _failure[1]
        _failure = None
        name = backend_name()
        try:
            if name == "reference":
                module = importlib.import_module("dgcompat.reference")
            else:
                module = _import_deep_gemm()
        except BaseException as exc:
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
            _failure = (tried_under, exc)
            raise
        _module = module
        return module


def _attribute(module: Any, symbol: str) -> Any:
    """``deep_gemm.a.b`` / ``_C.op`` on the loaded backend module, or None."""
    path = symbol[len("deep_gemm."):] if symbol.startswith("deep_gemm.") else symbol
    obj = module
    for part in path.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


def find_upstream(call: UpstreamCall) -> Callable[..., Any] | None:
    """The callable ``call`` declares (or the first of its alternatives present) on the backend, or None.

    Loads the backend (binding time only).
    """
    module = load()
    for symbol in (call.symbol, *call.alternatives):
        found = _attribute(module, symbol)
        if found is not None:
            return found
    return None


def upstream(call: UpstreamCall) -> Callable[..., Any]:
    """Like :func:`find_upstream`, but a missing callable is an :class:`IncompatibleBuildError`."""
    found = find_upstream(call)
    if found is None:
        names = " / ".join((call.symbol, *call.alternatives))
        raise IncompatibleBuildError(f"{call.caller}(): the installed deep_gemm ({release().label}) has no {names}")
    return found


def _environment() -> tuple[str, str]:
    return (os.environ.get("DGCOMPAT_BACKEND", ""), os.environ.get("DGCOMPAT_ALLOW_TORCH_MISMATCH", ""))


class Slots:
    """Bound upstream callables of one adapter module, each bound on first use.

    ``Slots(fp8_gemm_nt=_bind_fp8)``: until it is bound, ``slots.fp8_gemm_nt`` is a stand-in that on
    its first call runs ``_bind_fp8()`` under :data:`lock`, stores the result as the plain instance
    attribute (replacing itself) and forwards that first call; every later ``slots.fp8_gemm_nt(...)``
    is an ordinary attribute hit on an instance without ``__getattr__`` (which the interpreter's
    attribute cache serves), followed by the upstream call itself. Slots whose value is read rather
    than called (it may be None) go through :meth:`bound`. A binder that raises caches nothing (the
    next call binds again, so a fixed environment is picked up).
    """

    def __init__(self, **binders: Callable[[], Any]) -> None:
        # Plain setattr throughout, never ``self.__dict__``: touching the instance dict turns off
        # CPython's inline attribute values and makes every later slot read several times slower.
        self._binders = binders
        self._unbound: dict[str, Callable[..., Any]] = {}
        self.clear()
        _SLOTS.append(self)

    if TYPE_CHECKING:  # the slots are instance attributes set at run time
        def __getattr__(self, name: str) -> Any: ...

    def bound(self, name: str) -> Any:
        """The bound value of slot ``name`` (binds it first if needed)."""
        value = getattr(self, name)
        if value is not self._unbound[name]:
            return value
        with lock:
            value = getattr(self, name)
            if value is self._unbound[name]:
                value = self._binders[name]()
                setattr(self, name, value)
            return value

    def _first_call(self, name: str) -> Callable[..., Any]:
        def first_call(*args: Any, **kwargs: Any) -> Any:
            return self.bound(name)(*args, **kwargs)
        first_call.__name__ = f"unbound_{name}"
        return first_call

    def clear(self) -> None:
        """Forget every bound value (the binders stay)."""
        for name in self._binders:
            self._unbound[name] = self._first_call(name)
            setattr(self, name, self._unbound[name])


_SLOTS: list[Slots] = []


class Defaults:
    """Release defaults that stable functions substitute for a None argument, one per slot.

    Each is None until the slot's binder stores the installed release's default (e.g. the
    ``compiled_dims`` its upstream function declares); a plain instance attribute read afterwards.
    :func:`reset` sets them back to None.
    """

    def __init__(self, *names: str) -> None:
        self._names = names  # plain setattr, as in Slots (inline values keep reads cheap)
        self.clear()
        _DEFAULTS.append(self)

    if TYPE_CHECKING:  # the values are instance attributes set at run time
        def __getattr__(self, name: str) -> Any: ...

    def clear(self) -> None:
        for name in self._names:
            setattr(self, name, None)

    def first(self, slots: Slots, name: str) -> Any:
        """The default for ``name`` on its first call: binds ``slots``' slot of that name, which stores it."""
        slots.bound(name)
        return getattr(self, name)


_DEFAULTS: list[Defaults] = []


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
        for defaults in _DEFAULTS:
            defaults.clear()
        for fn in _resets:
            fn()
