"""The per-batch derived tensors, cached while their sources live and bounded in bytes (:data:`CACHE_BYTES`)."""

from __future__ import annotations

import weakref
from typing import Any
from typing import Callable

from .. import env
from ._state import STATE

__all__ = ["CACHE_BYTES", "nbytes", "cached", "drop"]


#: Upper bound on the bytes of derived tensors kept across calls (lengths, block tables, schedules).
CACHE_BYTES = 64 << 20


def nbytes(*ts: Any) -> int:
    return sum(t.numel() * t.element_size() for t in ts if t is not None)


def cached(key: tuple[Any, ...], roots: tuple[Any, ...], make: Callable[[], tuple[Any, ...]]) -> tuple[Any, ...]:
    """``make()``'s tensors for ``key``, cached while every tensor in ``roots`` is alive."""
    hit = STATE.derived.get(key)
    if hit is not None and all(r() is t for r, t in zip(hit[0], roots)):
        STATE.derived[key] = STATE.derived.pop(key)  # most recently used last
        return tuple(hit[1])
    value = make()
    if env.debug():
        return value
    drop(key)
    size = nbytes(*value)
    # Each source's death drops this entry (a plain dict pop: safe from a garbage-collector callback).
    refs = tuple(weakref.ref(r, dropper(key)) for r in roots)
    STATE.derived[key] = (refs, value, size)
    STATE.derived_bytes += size
    while STATE.derived and (STATE.derived_bytes > CACHE_BYTES or len(STATE.derived) > 256):
        drop(next(iter(STATE.derived)))
    return value


def dropper(key: tuple[Any, ...]) -> Callable[[Any], None]:
    """A weakref callback dropping the entry ``key`` when one of its sources dies."""
    def on_death(_ref: Any) -> None:
        drop(key)
    return on_death


def drop(key: tuple[Any, ...]) -> None:
    entry = STATE.derived.pop(key, None)
    if entry is not None:
        STATE.derived_bytes -= entry[2]
