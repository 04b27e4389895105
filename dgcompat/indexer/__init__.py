"""The sparse-attention indexer: MQA logits (ragged prefill) and paged MQA logits (decode / verify).

Paged MQA logits is where releases disagree most, and where a mistake hangs the GPU:

- ``context_lens`` is 2-D in every sgl-deep-gemm release (1-D asserts) and 1-D in the bundled copies
  (row ``j`` of a sequence then sees ``ctx - next_n + 1 + j`` keys);
- SM90 launches ``next_n`` 1 or 2 natively; more query rows per sequence are launched as one row per
  token ("flat": q viewed ``(B*next_n, 1, H, D)``, one length and one block-table row per query row);
- the schedule (``get_paged_mqa_logits_metadata``) drives a persistent kernel: launched with lengths
  other than the ones it was built from, the kernel can wait forever.

One function (:func:`._layout.launch_layout`) decides how a call is launched (native ``(B, next_n)`` or
flat) and one (:func:`._layout.make_launch_lens`) which lengths tensor the kernel gets; both the schedule
builder and the launch use them, so the schedule is always built from the very tensor the kernel reads.

**The launch rule.** dgcompat owns the schedule the kernel gets:

1. The schedule you pass is launched as is only when it provably belongs to the launch: it was
   returned by :func:`get_paged_mqa_logits_metadata` for this ``context_lens`` (the same memory),
   neither was written since (torch version counters), and the call is not being captured into a
   CUDA graph.
2. Otherwise dgcompat builds the schedule itself, with the release's own metadata kernel, from the
   launch lengths, on the device and in stream order, as part of the call: under CUDA-graph
   capture that kernel is recorded, so every replay recomputes the schedule from whatever lengths
   are in the buffer at that replay. Whatever else dgcompat derives from your tensors (per-row
   lengths, a block table repeated per row) is computed the same way.
3. A schedule dgcompat built for this ``context_lens`` that is still untouched while the lengths
   were written is an engine bug: that call raises :class:`~dgcompat.errors.ScheduleMismatchError`
   and launches nothing (rebuilding it silently would leave the stale buffer to whatever else reads
   it). Lengths that are a view of a larger buffer (``buffer[:B]``, the engines' persistent buffers)
   are the exception: torch keeps one version counter per storage, so a write to the buffer's other
   rows cannot be told apart cheaply from one to the viewed rows, and dgcompat derives the schedule
   from the launch lengths instead (rule 2), which is always right.

Derived tensors are cached per batch (identity and version counter of lengths, schedule and block
table), so all layers of a step share one metadata call. Entries made outside a capture are never
used inside one, and entries made inside a capture only within that same capture (a kernel
recorded earlier in it recomputes them at every replay).

Every call is checked like the first: a repeat call skips the checks and the planning only when
lengths, schedule and block table are the same tensors at the same versions and q, weights and
kv_cache have exactly the planned type, dtype, device, sizes and strides (:func:`_same_metadata`);
any other call is checked in full, so a malformed tensor never reaches the kernel.

The package, one job per module: ``_ragged`` (MQA logits over ragged keys), ``_paged`` (the schedule
builder and paged logits), ``_plan`` (planning a paged call), ``_args`` (its argument checks),
``_layout`` (the launch layout and lengths), ``_bind`` (the bound upstream paged calls), ``_schedules``
(what each schedule you hold belongs to), ``_cache`` (the bounded per-batch derivations), ``_capture``
(the capture token), ``_guards`` (the repeat call's metadata check), ``_sm100`` (the SM100 / SM120
contract) and ``_state`` (everything remembered between calls, in one object that ``dgcompat.reset()``
clears).

What an engine must do before a replay: write the next batch into the captured buffers (q, weights,
lengths, block table). What it need not do: refresh the schedule buffer (dgcompat recomputes the
schedule inside the graph; refreshing it does no harm). In eager mode, writes torch does not see
(a raw kernel writing into the lengths or block-table buffer, ``tensor.data = other``) do not bump
a version counter: refresh the schedule after them
(``get_paged_mqa_logits_metadata(lens, block_kv, out=schedule)``), which invalidates every cached
derivation. ``DGCOMPAT_DEBUG=1`` derives everything afresh on every call (no cache; for hunting such
writes).
"""

from __future__ import annotations

from .. import _binding
from .._calls import UpstreamCall
from . import _paged
from . import _ragged
from ._paged import fp8_fp4_paged_mqa_logits
from ._paged import fp8_paged_mqa_logits
from ._paged import get_paged_mqa_logits_metadata
from ._ragged import fp8_fp4_mqa_logits
from ._ragged import fp8_mqa_logits
from ._state import STATE

__all__ = ["fp8_mqa_logits", "fp8_fp4_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits",
           "fp8_fp4_paged_mqa_logits", "CALLS"]

#: The upstream calls of the indexer (see :mod:`dgcompat._calls`): the ragged path's, then the paged path's.
CALLS: tuple[UpstreamCall, ...] = _ragged.CALLS + _paged.CALLS

_binding.register_reset(STATE.reset)
