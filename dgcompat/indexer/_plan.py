"""Planning a paged call: the launch tensors, the schedule it may launch, and the repeat call's plan (:func:`lookup_plan`).

**The launch rule.** dgcompat owns the schedule the kernel gets (see :mod:`dgcompat.indexer`): a schedule
you pass is launched as is only when it provably belongs to the launch; otherwise dgcompat builds it
from the launch lengths with the release's own metadata kernel, in stream order (recorded under
capture); a schedule dgcompat built for these lengths that was left untouched while they were written
is refused (:class:`~dgcompat.errors.ScheduleMismatchError`).

A plan is one tuple (read by the hot path with a single unpacking):
``(lens_ref, lens_version, sched_ref, sched_version, bt_ref, bt_version (-1: not read), same_meta (see
:func:`~dgcompat.indexer._guards.same_metadata`), max_len, clean, the capture-status query of q's device,
capture token, (indices_ref, version) (None: no indices), logits_dtype as given, launch, plain)`` (:data:`Plan`).
Exactly one of the last two is
set: ``plain``, for the common launch that passes the launch tensors straight on, is ``(upstream, lens,
block_table, schedule, torch.Tensor, from_dlpack)``, called by ``fp8_paged_mqa_logits`` itself (one Python
frame less per call); ``launch``, for every other plan, is a closure (:func:`make_launcher`: the launch
tensors, the q view, the emulated clean_logits mask and the stride repair that plan needs). The shared
per-batch tensors (lengths, schedule, block table, indices) are matched by identity and version counter
(an in-place ``resize_``, ``set_`` or ``as_strided_`` bumps it); the per-call tensors (q, weights,
kv_cache) by type, dtype, device, sizes and strides, which covers everything the checks read: a call
that matches passes every check of the first call and launches the same layout; any other is checked
in full.
"""

from __future__ import annotations

import weakref
from typing import Any
from typing import Callable

from .. import env
from .._checks import release_label
from ..errors import ScheduleMismatchError
from ..knobs import get_num_sms
from ..table import capabilities
from ._args import check_paged
from ._args import weights_plan
from ._bind import B
from ._bind import native_metadata
from ._cache import cached
from ._capture import capture_state
from ._guards import same_metadata
from ._layout import hint_key
from ._layout import launch_layout
from ._layout import lens_recipe
from ._layout import make_launch_lens
from ._layout import row_lengths
from ._schedules import mem_key
from ._schedules import owns_storage
from ._schedules import root_of
from ._schedules import version_key
from ._state import STATE

__all__ = ["Plan", "make_plan", "make_launcher", "launch_table", "mask_rows", "lookup_plan"]

#: The repeat call's plan: ``(lens_ref, lens_version, sched_ref, sched_version, bt_ref, bt_version, same_meta,
#: max_len, clean, capturing, capture_token, indices_key, logits_dtype, launch, plain)`` (a plain tuple: the hot
#: path unpacks it in one step, several times faster than a named tuple's attributes).
Plan = tuple["weakref.ref[Any]", int, "weakref.ref[Any]", int, "weakref.ref[Any]", int, Callable[..., bool], int, bool,
             Callable[[], bool], Any, "tuple[weakref.ref[Any], int] | None", Any, "Callable[..., Any] | None",
             "tuple[Any, ...] | None"]


def make_plan(q: Any, q_sf: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any,
              max_len: Any, clean: Any, indices: Any, dtype: Any) -> Plan:
    fn = "fp8_paged_mqa_logits" if q_sf is None else "fp8_fp4_paged_mqa_logits"
    b, n, form = check_paged(fn, q, q_sf, kv_cache, weights, lens, block_table, schedule, max_len, clean, indices,
                             dtype)
    caps = capabilities()
    dims = caps.paged_context_lens
    rows = b * n
    per_row = block_table.shape[0] == rows and n > 1
    token = capture_state(q.device)
    auto_indices = None
    if indices is None and caps.paged_varlen_required:
        # The build launches paged logits on this architecture only in the varlen form: flat rows, each its own
        # sequence (indices = 0..rows-1), which is the same computation.
        auto_indices = cached(("arange", rows, str(q.device), token), (), lambda: (row_indices(rows, q.device),))[0]
    launch_indices = indices if auto_indices is None else auto_indices
    varlen = launch_indices is not None
    layout = launch_layout(dims, caps.paged_native_next_n, form, n, per_row, varlen)
    block_kv = kv_cache.shape[1]
    # The kernel asserts a schedule of exactly num_sms + 1 rows for the SMs it launches on (num_sms / 2 + 1 only
    # for a KV-multicast launch, which dgcompat does not make: next_n 4 is split on SM90). An engine's schedule
    # with another slot count (vLLM passes num_sms // 2 for next_n 4) is replaced by one built for the launch.
    num_sms = get_num_sms()
    debug = env.debug()
    if lens.dim() == 1 or lens.shape[1] > 1:
        STATE.hints[hint_key(lens)] = (n, per_row)

    lens_key = (mem_key(lens), lens._version)
    ix_key = version_key(launch_indices)
    recipe = lens_recipe(layout, form, b, n, dims)
    rec = STATE.schedules.get(id(schedule))
    trusted = False
    if rec is not None and rec.version == schedule._version and rec.lens_root() is root_of(lens) \
            and rec.lens_key == lens_key[0]:
        # A schedule dgcompat built for these lengths, untouched since: the lengths must be too.
        if rec.lens_version != lens._version:
            if owns_storage(lens):
                raise ScheduleMismatchError(
                    f"{fn}(): context_lens was modified after schedule_meta was built from it "
                    f"[deep_gemm {release_label()}]; launching the stale schedule could hang the GPU. dgcompat "
                    f"does not rebuild it here: the stale buffer is the one your step holds, and whatever else "
                    f"reads it (a raw deep_gemm call, a graph captured from one) would launch it as is. Refresh it "
                    f"with get_paged_mqa_logits_metadata(context_lens, block_kv, out=schedule_meta)")
            # A view of a larger buffer: torch keeps one version counter per storage, so a write to other rows
            # (another batch size, graph or micro-batch) looks the same as one to these; the schedule is derived
            # from the very lengths the launch reads (always right) instead of trusted.
        else:
            trusted = (not debug and token is None and rec.recipe == recipe and rec.block_kv == block_kv
                       and rec.num_sms == num_sms and schedule.shape[0] == num_sms + 1
                       and rec.indices_key == ix_key)

    if trusted:
        launch_lens, launch_schedule = rec.launch_lens, schedule  # type: ignore[union-attr]
    else:
        roots = (root_of(lens),) if launch_indices is None else (root_of(lens), root_of(launch_indices))
        # The schedule (and its registration) is part of the key: refreshing it invalidates derivations.
        sched_key = (id(schedule), schedule._version)

        def derive() -> tuple[Any, ...]:
            ll = make_launch_lens(lens, recipe)
            return ll, native_metadata(fn, ll, block_kv, num_sms, launch_indices)
        launch_lens, launch_schedule = cached(
            ("lens", lens_key, sched_key, recipe, block_kv, num_sms, ix_key, token), roots, derive)

    launch_bt, bt_read = launch_table(block_table, layout, b, n, token)
    q_shape: tuple[int, ...] | None = None
    h, d = q.shape[-2], q.shape[-1]
    want = (b, n, h, d) if layout == "native" else (rows, 1, h, d)
    if tuple(q.shape) != want:
        q_shape = want
    row_len = None
    if clean and caps.paged_clean_logits == "emulated":
        row_len = cached(("rows", lens_key, form, b, n, token), (root_of(lens),),
                          lambda: (row_lengths(lens, b, n, form).view(-1, 1),))[0]
    if q_sf is None and caps.indexer_inputs.startswith("mx"):
        # FP8 queries without scales where the build requires MX ones: the bound launch refuses, saying what the
        # build requires (dgcompat.indexer._sm100)
        upcast, kernel_dtype = False, None
    else:
        upcast, kernel_dtype = weights_plan(fn, weights, dtype)
    native_dtype = kernel_dtype if caps.paged_logits_dtype is not None else None
    if native_dtype is None and q_sf is None and kernel_dtype is not None and not upcast \
            and str(weights.dtype) == "torch.bfloat16":
        # bf16 weights the build would take, but no function of it reduces them in bf16 for these inputs
        upcast, kernel_dtype = True, _out_dtype(dtype)
    want = _float32() if dtype is None else dtype
    launch, plain = None, None
    if q_sf is None and kernel_dtype is None and not upcast and q_shape is None and row_len is None and rows > 1 \
            and not varlen:
        plain = (B.bound("paged"), launch_lens, launch_bt, launch_schedule, STATE.tensor_type, STATE.from_dlpack)
    else:
        launch = make_launcher(q_shape, launch_lens, launch_bt, launch_schedule, row_len, rows <= 1, varlen,
                               scaled=q_sf is not None or native_dtype is not None, dtype=native_dtype, want=want,
                               upcast=upcast, fixed_indices=auto_indices)
    return (weakref.ref(lens), lens._version, weakref.ref(schedule), schedule._version, weakref.ref(block_table),
            block_table._version if bt_read else -1, same_metadata(q, weights, kv_cache), max_len, clean,
            STATE.probe(q.device), token, None if indices is None else (weakref.ref(indices), indices._version),
            dtype, launch, plain)


def _out_dtype(dtype: Any) -> Any:
    """The logits dtype to ask a kernel for: None for its float32 default."""
    return None if dtype is None or str(dtype) == "torch.float32" else dtype


def row_indices(rows: int, device: Any) -> Any:
    """int32 ``(rows,)`` 0..rows-1 on ``device`` (on the device, in stream order: capturable)."""
    import torch

    return torch.arange(rows, dtype=torch.int32, device=device)


def _float32() -> Any:
    import torch

    return torch.float32


def make_launcher(q_shape: tuple[int, ...] | None, lens: Any, bt: Any, sched: Any, row_len: Any, one_row: bool,
                  varlen: bool, *, scaled: bool = False, dtype: Any = None, want: Any = None,
                  upcast: bool = False, fixed_indices: Any = None) -> Callable[..., Any]:
    """The launch of a plan that is not plain, as ``f(q, q_sf, kv_cache, weights, max_len, indices)``: the bound
    upstream call on the planned launch tensors with the steps this plan needs around it.

    ``scaled``: launch the build's ``fp8_fp4_paged_mqa_logits`` with ``(q, q_sf)`` and ``logits_dtype=dtype``
    (None: not passed); ``want``: the dtype returned (logits of another dtype are converted, on the device);
    ``upcast``: bf16 weights go to the kernel as float32 (exact; the build takes float32 weights only);
    ``fixed_indices``: the varlen indices dgcompat made for a build that launches only the varlen form.
    """
    if scaled:
        paged = B.bound("paged_fp8_fp4")
    else:
        paged = B.bound("paged_varlen" if varlen else "paged")  # binding sets STATE.tensor_type / STATE.from_dlpack
    tensor_type, from_dlpack = STATE.tensor_type, STATE.from_dlpack
    sf_shape = None if q_shape is None else q_shape[:-1]

    def general(q: Any, q_sf: Any, kv: Any, w: Any, max_len: int, indices: Any) -> Any:
        if fixed_indices is not None:
            indices = fixed_indices
        if q_shape is not None:
            q = q.view(q_shape)
            if q_sf is not None:
                q_sf = q_sf.view(sf_shape)
        if upcast:
            w = w.float()
        if scaled:
            out = paged(q, q_sf, kv, w, lens, bt, sched, max_len, dtype, indices)
        elif varlen:
            out = paged(q, kv, w, lens, bt, sched, max_len, indices)
        else:
            out = paged(q, kv, w, lens, bt, sched, max_len)
        if type(out) is not tensor_type:
            out = from_dlpack(out)
        if row_len is not None:
            out = mask_rows(out, row_len)
        if one_row and out.stride(0) % 4:
            # A one-row result that crossed DLPack may come back with row stride 1; consumers (fused top-k)
            # need a 4-aligned row stride. With one row any stride addresses the same elements.
            out = out.as_strided(tuple(out.shape), (-(-out.shape[1] // 4) * 4, 1))
        if want is not None and out.dtype is not want:
            out = out.to(want)
        return out
    return general


def launch_table(bt: Any, layout: str, b: int, n: int, token: Any) -> tuple[Any, bool]:
    """The block table the kernel gets, and whether it is a copy (so writes to ``bt`` must be re-read)."""
    rows = b * n
    if layout == "native" or bt.shape[0] == rows:
        if bt.stride(-1) == 1 and (bt.shape[0] <= 1 or bt.stride(0) == bt.shape[1]):
            return bt, False
        # Dense rows: the kernels assert only stride(1) == 1 (a transposed (B, 1) view passes is_contiguous()
        # but not that), and not every release honours another row stride.
        make = lambda: (bt.clone(memory_format=contiguous_format()),)  # noqa: E731
    else:
        # expand + reshape: one copy kernel, no host synchronization (capturable).
        # (contiguous: for one sequence reshape returns a zero-stride view, and kernels read rows densely)
        make = lambda: (bt.unsqueeze(1).expand(b, n, bt.shape[1]).reshape(rows, bt.shape[1]).contiguous(),)  # noqa: E731
    key = ("table", mem_key(bt), bt._version, layout, n, token)
    return cached(key, (root_of(bt),), make)[0], True


def contiguous_format() -> Any:
    import torch

    return torch.contiguous_format


def mask_rows(out: Any, row_len: Any) -> Any:
    """-inf at and past each row's length (emulated clean_logits; the mask lives for this call only)."""
    import torch

    cols = torch.arange(out.shape[1], device=out.device, dtype=row_len.dtype)
    return out.masked_fill_(cols.unsqueeze(0) >= row_len, float("-inf"))


def lookup_plan(q: Any, q_sf: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any,
                max_len: Any, clean: Any, indices: Any, dtype: Any) -> Plan:
    """A new plan for this call (checked in full), kept as the repeat call's plan unless ``q_sf`` is given (scaled
    queries are planned on every call: the repeat check does not cover the scale tensor)."""
    p = make_plan(q, q_sf, kv_cache, weights, lens, block_table, schedule, max_len, clean, indices, dtype)
    if not env.debug() and q_sf is None:
        STATE.last = p
    return p
