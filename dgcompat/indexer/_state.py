"""Everything the indexer remembers between calls, in one object: :data:`STATE`.

- ``schedules``: what each schedule returned by ``get_paged_mqa_logits_metadata`` belongs to (id of
  the schedule tensor -> :class:`~dgcompat.indexer._schedules.ScheduleRecord`), while it lives;
- ``derived``: per-batch tensors derived from the caller's (launch lengths, schedules, block tables,
  per-row lengths), LRU-ordered and bounded in bytes (``derived_bytes``, see :mod:`._cache`);
- ``hints``: the layout the last launch with lengths of a given signature had (so the schedule builder,
  which sees no q, builds for the layout the next launch takes);
- ``last``: the most recent paged plan (the repeat call's fast path);
- ``probe`` / ``driver_id``: how a call tells whether it is being captured into a CUDA graph (the
  device's capture-status query, the driver's capture id), and ``epoch`` / ``was_capturing``: the
  capture count that names a capture when the driver's id is unavailable;
- the values read once at bind time (``tensor_type``, ``dtype_type``, ``from_dlpack``) and the tensor-guard probe.

:meth:`IndexerState.reset` clears all of it (``dgcompat.reset()`` calls it); :meth:`IndexerState.held`
says what it holds.
"""

from __future__ import annotations

from typing import Any
from typing import Callable

from .. import _device

__all__ = ["IndexerState", "STATE"]


class IndexerState:
    """The indexer's state (one instance per process, :data:`STATE`)."""

    schedules: dict[int, Any]
    derived: dict[tuple[Any, ...], tuple[Any, Any, int]]
    derived_bytes: int
    hints: dict[tuple[int, int], tuple[int, bool]]
    last: tuple[Any, ...] | None
    probe: Callable[[Any], Callable[[], bool]]
    driver_id: Callable[[], int | None]
    epoch: int
    was_capturing: bool
    tensor_type: Any
    dtype_type: Any
    from_dlpack: Any
    tensor_guards: Any
    tensor_guards_probed: bool

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Forget everything (schedules, derived tensors, hints, the last plan, bind-time values, capture hooks)."""
        # what calls left behind
        self.schedules, self.derived, self.derived_bytes, self.hints, self.last = {}, {}, 0, {}, None
        # capture detection
        self.probe, self.driver_id, self.epoch, self.was_capturing = _device.capture_probe, _device.capture_id, 0, False
        # bind-time values, read again at the next bind
        self.tensor_type = self.dtype_type = self.from_dlpack = self.tensor_guards = None
        self.tensor_guards_probed = False

    def held(self) -> dict[str, int]:
        """What is held now: counts of schedules, derived entries, their bytes, hints, and whether a plan is."""
        return {"schedules": len(self.schedules), "derived": len(self.derived), "derived_bytes": self.derived_bytes,
                "hints": len(self.hints), "plans": int(self.last is not None)}


#: The process's indexer state.
STATE = IndexerState()
