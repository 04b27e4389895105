"""Schedules you hold: what each schedule ``get_paged_mqa_logits_metadata`` returned belongs to, and tensor identity keys."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any

from ._state import STATE

__all__ = ["ScheduleRecord", "root_of", "mem_key", "owns_storage", "register", "forget", "version_key"]


@dataclass
class ScheduleRecord:
    """What a schedule returned by :func:`get_paged_mqa_logits_metadata` belongs to."""

    version: int
    lens_root: Any  # weakref to the lengths' base tensor (keeps the memory identity honest)
    lens_key: tuple[Any, ...]
    lens_version: int
    recipe: tuple[Any, ...]  # how launch_lens was made from the lengths (see lens_recipe)
    launch_lens: Any
    block_kv: int
    num_sms: int
    indices_key: Any


def root_of(t: Any) -> Any:
    base = t._base
    return t if base is None else base


def mem_key(t: Any) -> tuple[Any, ...]:
    """Identity of a tensor's memory and layout (views of one buffer compare equal)."""
    return (id(root_of(t)), t.data_ptr(), tuple(t.shape), tuple(t.stride()))


def owns_storage(t: Any) -> bool:
    """Whether ``t`` is all of its storage, so that its version counter counts only writes to its own elements
    (a view of a larger buffer shares the counter with the buffer's other elements)."""
    return bool(t.storage_offset() == 0 and t.untyped_storage().nbytes() == t.numel() * t.element_size())


def forget(key: int) -> None:
    STATE.schedules.pop(key, None)


def register(schedule: Any, lens: Any, recipe: tuple[Any, ...], launch_lens: Any, block_kv: int,
              num_sms: int, indices: Any) -> None:
    key = id(schedule)
    if key not in STATE.schedules:
        # The record lives exactly as long as the schedule tensor (one finalizer per tensor, not per refresh).
        weakref.finalize(schedule, forget, key)
    STATE.schedules[key] = ScheduleRecord(schedule._version, weakref.ref(root_of(lens)), mem_key(lens), lens._version,
                                recipe, launch_lens, block_kv, num_sms, version_key(indices))


def version_key(t: Any) -> Any:
    return None if t is None else (mem_key(t), t._version)
