"""Binding each stable function to the loaded backend once: :class:`Slots`, :class:`Defaults`, :func:`upstream`.

Nothing here runs at ``import dgcompat``. The first stable call (from any thread) takes the lock,
loads the backend (:func:`dgcompat._backend.load`) and binds; later calls never come here.

Binding is one mechanism, :class:`Slots`: each adapter module declares ``_B = Slots(name=binder,
...)`` and its stable functions call ``_B.name(...)``. The first call runs the binder under the
lock and stores the result as a plain instance attribute, so every later call is an ordinary
attribute hit (no ``try``, no extra call, no lock) followed by the upstream call; :func:`reset`
unbinds every slot. :func:`upstream` resolves a declared :class:`~dgcompat._calls.UpstreamCall`
(or its alternatives) on the loaded module.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from typing import Any

from ._backend import load
from ._backend import lock
from ._backend import reset as _reset_backend
from ._calls import UpstreamCall
from .detection import release
from .errors import IncompatibleBuildError

__all__ = ["Slots", "Defaults", "upstream", "find_upstream", "register_reset", "reset"]

_resets: list[Callable[[], None]] = []


def _attribute(module: Any, symbol: str) -> Any:
    """``deep_gemm.a.b`` / ``_C.op`` on the loaded backend module, or None."""
    path = symbol.removeprefix("deep_gemm.")
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
        found: Callable[..., Any] | None = _attribute(module, symbol)
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
    with lock:
        _reset_backend()
        for slots in _SLOTS:
            slots.clear()
        for defaults in _DEFAULTS:
            defaults.clear()
        for fn in _resets:
            fn()
