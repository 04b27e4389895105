"""The sparse-attention indexer: MQA logits (ragged prefill) and paged MQA logits (decode / verify).

Paged MQA logits is where releases disagree most, and where a mistake hangs the GPU:

- ``context_lens`` is 2-D in every sgl-deep-gemm release (1-D asserts) and 1-D in the bundled copies;
- SM90 launches ``next_n`` 1 or 2 natively; more query rows per sequence must be split into one row
  per token (q viewed ``(B*next_n, 1, H, D)``, block table repeated per row, lengths ``(B*next_n, 1)``);
- the schedule (``get_paged_mqa_logits_metadata``) drives a persistent kernel: launched with lengths
  other than the ones it was built from, the kernel can wait forever.

dgcompat accepts every form, launches the one the release and architecture take natively, builds
the matching schedule itself when the given one was built for another layout (once per batch: the
plan is cached on the identity and version counters of the lengths, schedule and block table, which
all layers of a step share), and refuses to launch a schedule that does not belong to the lengths.

**The schedule rule.** A schedule belongs to the ``context_lens`` tensor it was built from, as that
tensor was at that moment. Writing new lengths into the same buffer (``copy_``, ``fill_``, ...) makes
the schedule stale; refresh it in place with ``get_paged_mqa_logits_metadata(lens, block_kv,
out=schedule)`` (the buffer keeps its address, so CUDA graphs that captured it stay valid). Writes
torch does not see (a raw Triton/CUDA kernel writing into the lengths buffer) do not bump the version
counter: refresh the schedule after them too. With ``DGCOMPAT_DEBUG=1`` dgcompat additionally
rebuilds the schedule from the current lengths and compares (a device synchronization per call).
Inside a CUDA graph replay no Python runs: refresh schedule and lengths before every replay.
"""

from __future__ import annotations

import os
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable

from . import _binding, _sm100
from ._checks import FP8_DTYPE_NAMES, as_torch, bad, release_label, tensor, translate
from .errors import ScheduleMismatchError, UnsupportedFeatureError
from .runtime import get_num_sms
from .table import capabilities

if TYPE_CHECKING:
    import torch

__all__ = ["fp8_mqa_logits", "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits"]

_B = SimpleNamespace()


def _reset() -> None:
    global _LAST
    _B.__dict__.clear()
    _SCHEDULES.clear()
    _PLANS.clear()
    _LAST = None


# --- the non-paged (ragged) MQA logits ----------------------------------------------------------

def _bind_mqa() -> Callable[..., Any]:
    with _binding.lock:
        impl = getattr(_B, "mqa", None)
        if impl is not None:
            return impl
        mod = _binding.load()
        caps = capabilities()
        fn = "fp8_mqa_logits"
        if caps.backend == "reference":
            ref = mod.fp8_mqa_logits

            def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
                return ref(q, kv, w, ks, ke, clean_logits=clean, max_seqlen_k=max_k)
        else:
            name = caps.mqa_logits
            target = getattr(mod, name) if name else None
            if target is None:
                raise UnsupportedFeatureError(fn, "MQA logits", release_label())
            native_clean = caps.mqa_clean_logits == "native"
            seqlen = caps.mqa_max_seqlen_k
            as_tensor = caps.raw_ffi_returns
            heads = caps.paged_heads
            pair = caps.mqa_q_form == "pair"  # 2.8.1 indexes q[0], q[1] unchecked: never pass a bare q
            if caps.indexer_inputs == "mx-bf16":  # SM100 MX/bf16 contract of 0.2.5 / 2.8.x: dgcompat._sm100
                adapted = _sm100.ragged_mqa(fn, target, lambda q, w: _pad_heads(fn, q, w, heads), str(caps.arch))
                _B.mqa = adapted
                return adapted

            def impl(q: Any, kv: Any, w: Any, ks: Any, ke: Any, clean: bool, max_k: int | None) -> Any:
                q, w = _pad_heads(fn, q, w, heads)
                if seqlen == "absent":
                    if max_k:
                        raise UnsupportedFeatureError(fn, "max_seqlen_k", release_label())
                    out = target(q, kv, w, ks, ke, clean)
                elif native_clean:
                    out = target(q, kv, w, ks, ke, clean, max_k or 0)
                else:
                    out = target((q, None) if pair else q, kv, w, ks, ke, max_k or 0)
                    if clean:
                        out = as_torch(out)
                        _mask_ragged(out, ks, ke, compressed=bool(max_k))
                return as_torch(out) if as_tensor else out
        _B.mqa = impl
        return impl


def _pad_heads(fn: str, q: Any, w: Any, heads: tuple[int, ...]) -> tuple[Any, Any]:
    """Zero-pad heads up to a count the kernels are built for (zero q rows and weights add nothing)."""
    if not heads or q.dim() != 3 or q.shape[1] in heads:
        return q, w
    h = q.shape[1]
    bigger = [n for n in heads if n > h]
    if not bigger:
        raise bad(fn, "q", f"a head count in {heads} (or fewer, padded)", q)
    import torch

    target = min(bigger)
    qp = torch.zeros((q.shape[0], target, q.shape[2]), dtype=q.dtype, device=q.device)
    qp[:, :h].copy_(q)
    wp = torch.zeros((w.shape[0], target), dtype=w.dtype, device=w.device)
    wp[:, :h].copy_(w)
    return qp, wp


def _mask_ragged(out: Any, ks: Any, ke: Any, *, compressed: bool) -> None:
    import torch

    cols = torch.arange(out.shape[1], device=out.device)
    if compressed:
        invalid = cols.unsqueeze(0) >= (ke - ks).unsqueeze(1)
    else:
        invalid = (cols.unsqueeze(0) < ks.unsqueeze(1)) | (cols.unsqueeze(0) >= ke.unsqueeze(1))
    out.masked_fill_(invalid, float("-inf"))


def _diagnose_mqa(q: Any, kv: Any, weights: Any, ks: Any, ke: Any, max_seqlen_k: Any) -> None:
    fn = "fp8_mqa_logits"
    tensor(fn, "q", q, dims=(3,), dtypes=FP8_DTYPE_NAMES, what="an FP8 (Nq, H, D) tensor")
    if not isinstance(kv, (tuple, list)) or len(kv) != 2:
        raise bad(fn, "kv", "a (k_fp8 (Nk, D), k_scale float32 (Nk,)) pair", kv)
    k, k_sf = kv
    tensor(fn, "kv[0]", k, dims=(2,), dtypes=FP8_DTYPE_NAMES, what="an FP8 (Nk, D) tensor")
    tensor(fn, "kv[1]", k_sf, dims=(1,), dtypes=("float32",), what="a float32 (Nk,) scale")
    nq, h, d = q.shape
    if k.shape[1] != d:
        raise bad(fn, "kv[0]", f"(Nk, D={d}) like q", k)
    if k_sf.shape[0] != k.shape[0]:
        raise bad(fn, "kv[1]", f"one scale per key: ({k.shape[0]},)", k_sf)
    tensor(fn, "weights", weights, dims=(2,), dtypes=("float32",))
    if tuple(weights.shape) != (nq, h):
        raise bad(fn, "weights", f"shape (Nq, H) = ({nq}, {h})", weights)
    for name, t in (("ks", ks), ("ke", ke)):
        tensor(fn, name, t, dims=(1,), dtypes=("int32",))
        if t.shape[0] != nq:
            raise bad(fn, name, f"one int32 bound per query: shape ({nq},)", t)
    if max_seqlen_k is not None and (isinstance(max_seqlen_k, bool) or not isinstance(max_seqlen_k, int)
                                     or max_seqlen_k < 0):
        raise bad(fn, "max_seqlen_k", "None or a non-negative int", max_seqlen_k)


def fp8_mqa_logits(q: torch.Tensor, kv: tuple[torch.Tensor, torch.Tensor], weights: torch.Tensor,
                   ks: torch.Tensor, ke: torch.Tensor, *, clean_logits: bool = False,
                   max_seqlen_k: int | None = None) -> torch.Tensor:
    """Indexer logits over ragged keys: ``out[i, j] = sum_h weights[i, h] * relu(q[i, h] . k[j] * k_scale[j])``.

    - ``q``: float8_e4m3fn ``(Nq, H, D)``; ``kv``: ``(k float8_e4m3fn (Nk, D), k_scale float32 (Nk,))``;
      ``weights``: float32 ``(Nq, H)``; ``ks``/``ke``: int32 ``(Nq,)``, query ``i`` sees keys ``[ks[i], ke[i])``.
    - Returns float32 ``(Nq, Nk)`` (or ``(Nq, max_seqlen_k)`` compressed, column ``j`` = key ``ks[i] + j``,
      when ``max_seqlen_k`` is given). Entries outside a query's range are ``-inf`` with ``clean_logits=True``
      (emulated where the release dropped the option), unspecified otherwise.
    - Head counts the kernels are not built for are zero-padded internally.
    """
    try:
        impl = _B.mqa
    except AttributeError:
        impl = _bind_mqa()
    try:
        return impl(q, kv, weights, ks, ke, clean_logits, max_seqlen_k)
    except Exception as exc:
        translate("fp8_mqa_logits", exc, _diagnose_mqa, q, kv, weights, ks, ke, max_seqlen_k)


# --- schedules ---------------------------------------------------------------------------------

@dataclass
class _Schedule:
    """What a schedule tensor belongs to."""

    ref: weakref.ref[Any]
    version: int
    lens_key: tuple[int, int, bool]  # (data_ptr, numel, contiguous) of the caller's context_lens
    lens_version: int
    launch_lens: Any  # the tensor actually given to deep_gemm's metadata call
    block_kv: int
    num_sms: int


_SCHEDULES: dict[int, _Schedule] = {}


def _lens_key(t: Any) -> tuple[int, int, bool]:
    return (t.data_ptr(), t.numel(), t.is_contiguous())


def _bind_metadata() -> Callable[..., Any]:
    with _binding.lock:
        impl = getattr(_B, "metadata", None)
        if impl is None:
            mod = _binding.load()
            caps = capabilities()
            target = mod.get_paged_mqa_logits_metadata
            raw = caps.raw_ffi_returns
            _B.metadata_form = caps.paged_context_lens
            _B.debug = _debug()
            allowed_bkv, arch = caps.paged_block_kv, caps.arch  # the release's per-arch host assert

            def impl(lens: Any, block_kv: int, n_sms: int) -> Any:
                if allowed_bkv and block_kv not in allowed_bkv:
                    _sm100.check_block_kv("get_paged_mqa_logits_metadata", block_kv, allowed_bkv, arch)
                out = target(lens, block_kv, n_sms)
                return as_torch(out) if raw else out
            _B.metadata = impl
        return impl


def _metadata_lens(lens: Any, form: str) -> Any:
    """The lengths tensor the release's metadata call takes for the caller's ``lens``."""
    if form == "2d":
        return lens.view(-1, 1) if lens.dim() == 1 else lens
    if form == "1d":
        if lens.dim() == 1:
            return lens
        return lens.view(-1) if lens.shape[1] == 1 else lens.amax(dim=1).to(lens.dtype)
    return lens


def _check_lens(fn: str, lens: Any) -> None:
    tensor(fn, "context_lens", lens, dims=(1, 2), dtypes=("int32",), what="an int32 lengths tensor")
    if not lens.is_contiguous():
        raise bad(fn, "context_lens", "a contiguous tensor (the kernels assert it)", lens,
                  hint="pass context_lens.contiguous() and build the schedule from that same tensor")


def get_paged_mqa_logits_metadata(context_lens: torch.Tensor, block_kv: int, num_sms: int | None = None, *,
                                  out: torch.Tensor | None = None) -> torch.Tensor:
    """Build the paged-MQA schedule: int32 ``(num_sms + 1, 2)``.

    - ``context_lens``: int32, contiguous, ``(B,)``, ``(B, next_n)`` or ``(B*next_n, 1)`` (see
      :func:`fp8_paged_mqa_logits`); pass the very tensor you will launch with.
    - ``block_kv``: KV tokens per cache block (64 for DeepSeek V3.2's index cache).
    - ``num_sms``: defaults to :func:`dgcompat.get_num_sms`.
    - ``out``: an existing schedule buffer to refresh in place (keeps its address for CUDA graphs).
    """
    fn = "get_paged_mqa_logits_metadata"
    _check_lens(fn, context_lens)
    if isinstance(block_kv, bool) or not isinstance(block_kv, int) or block_kv <= 0:
        raise bad(fn, "block_kv", "a positive int", block_kv)
    if num_sms is None:
        num_sms = get_num_sms()
    elif isinstance(num_sms, bool) or not isinstance(num_sms, int) or num_sms <= 0:
        raise bad(fn, "num_sms", "None or a positive int", num_sms)
    try:
        impl = _B.metadata
    except AttributeError:
        impl = _bind_metadata()
    if _B.debug and context_lens.numel():
        low = int(context_lens.min())
        if low < 1:
            raise bad(fn, "context_lens", "lengths >= 1 (the kernels require it)", f"a minimum of {low}")
    launch_lens = _metadata_lens(context_lens, _B.metadata_form)
    try:
        schedule = impl(launch_lens, block_kv, num_sms)
    except Exception as exc:
        translate(fn, exc, _no_diagnosis)
    if out is not None:
        tensor(fn, "out", out, dims=(2,), dtypes=("int32",))
        if tuple(out.shape) != tuple(schedule.shape) or out.device != schedule.device:
            raise bad(fn, "out", f"an int32 buffer of shape {tuple(schedule.shape)} on {schedule.device}", out)
        out.copy_(schedule)
        schedule = out
    _register(schedule, context_lens, launch_lens, block_kv, num_sms)
    return schedule


def _register(schedule: Any, lens: Any, launch_lens: Any, block_kv: int, num_sms: int) -> None:
    key = id(schedule)
    def forget(_ref: Any, k: int = key) -> None:
        _SCHEDULES.pop(k, None)

    _SCHEDULES[key] = _Schedule(weakref.ref(schedule, forget),
                                schedule._version, _lens_key(lens), lens._version, launch_lens, block_kv, num_sms)


# --- paged logits: planning ----------------------------------------------------------------------

@dataclass
class _Plan:
    # What the plan was made for (checked on every call).
    lens: Any
    lens_version: int
    schedule: Any
    schedule_version: int
    block_table: Any
    block_table_version: int
    q_shape: Any
    max_context_len: int
    clean: bool
    # How to launch.
    q_launch_shape: tuple[int, ...] | None
    launch_lens: Any
    launch_schedule: Any
    launch_block_table: Any
    rows: int
    invalid: Any  # bool (rows, max_context_len) mask for emulated clean_logits, or None
    block_table_derived: bool  # the launch uses a copy of block_table, so its writes must be seen


_PLANS: OrderedDict[tuple[Any, ...], _Plan] = OrderedDict()
_LAST: _Plan | None = None
_binding.register_reset(_reset)


def _debug() -> bool:
    return os.environ.get("DGCOMPAT_DEBUG", "") not in ("", "0")


def _trust_foreign() -> bool:
    return os.environ.get("DGCOMPAT_TRUST_SCHEDULES", "") not in ("", "0")


def _shape_of_rows(fn: str, q: Any, lens: Any) -> tuple[int, int, str]:
    """(B, next_n, form) from q and the lengths; form is "seq" (B,), "rows" (B, next_n) or "flat" (B*n, 1)."""
    rows = q.shape[0] * q.shape[1] if q.dim() == 4 else q.shape[0]
    if lens.dim() == 1:
        b = lens.shape[0]
        if q.dim() == 4:
            if q.shape[0] != b:
                raise bad(fn, "context_lens", f"1-D lengths with one entry per sequence: ({q.shape[0]},)", lens)
            return b, q.shape[1], "seq"
        if b == 0 or rows % b:
            raise bad(fn, "context_lens", f"1-D lengths whose count divides the {rows} query rows", lens)
        return b, rows // b, "seq"
    n0, n1 = lens.shape
    if n1 == 1 and n0 == rows:
        b = q.shape[0] if q.dim() == 4 else rows
        return b, rows // b if b else 1, "flat"
    if n0 * n1 != rows or (q.dim() == 4 and (q.shape[0], q.shape[1]) != (n0, n1)):
        want = f"({q.shape[0]}, {q.shape[1]}) or ({rows}, 1)" if q.dim() == 4 else f"(B, next_n) with B*next_n = {rows}"
        raise bad(fn, "context_lens", f"2-D lengths of shape {want} matching q", lens)
    return n0, n1, "rows"


def _row_lens(lens: Any, b: int, n: int, form: str) -> Any:
    """int32 (b*n,) visible length of each query row, in query-row order (may be <= 0)."""
    import torch

    if form == "seq":
        offs = torch.arange(n, device=lens.device, dtype=lens.dtype) - (n - 1)
        return (lens.view(-1, 1) + offs).reshape(-1)
    return lens.reshape(-1)


def _plan(q: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any, max_len: Any,
          clean: bool) -> _Plan:
    import torch

    fn = "fp8_paged_mqa_logits"
    caps = capabilities()
    tensor(fn, "q", q, dims=(3, 4), dtypes=FP8_DTYPE_NAMES, what="an FP8 (B, next_n, H, D) or (N, H, D) tensor")
    _check_lens(fn, lens)
    tensor(fn, "block_table", block_table, dims=(2,), dtypes=("int32",), what="an int32 (rows, max_blocks) tensor")
    tensor(fn, "schedule_meta", schedule, dims=(2,), dtypes=("int32",), what="the int32 schedule")
    tensor(fn, "kv_cache", kv_cache, dims=(4,), what="a (num_blocks, block_kv, 1, D + 4) cache")
    tensor(fn, "weights", weights, dims=(2,), dtypes=("float32",))
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0:
        raise bad(fn, "max_context_len", "a positive int", max_len)
    if not isinstance(clean, bool):
        raise bad(fn, "clean_logits", "a bool", clean)
    b, n, form = _shape_of_rows(fn, q, lens)
    rows = b * n
    h, d = q.shape[-2], q.shape[-1]
    if kv_cache.shape[2] != 1 or kv_cache.shape[3] != d + 4:
        raise bad(fn, "kv_cache", f"(num_blocks, block_kv, 1, D + 4 = {d + 4}) packed FP8 values + float32 scale", kv_cache)
    if tuple(weights.shape) != (rows, h):
        raise bad(fn, "weights", f"shape (B*next_n, H) = ({rows}, {h})", weights)
    if caps.paged_heads and h not in caps.paged_heads:
        raise bad(fn, "q", f"a head count in {caps.paged_heads} on {caps.arch}", q)
    if block_table.shape[0] not in (b, rows):
        raise bad(fn, "block_table", f"one row per sequence ({b}) or per query row ({rows})", block_table)
    block_kv = kv_cache.shape[1]
    if max_len > block_table.shape[1] * block_kv:
        raise bad(fn, "max_context_len", f"<= block_table.shape[1] * block_kv = {block_table.shape[1] * block_kv}",
                  max_len)
    devices = {t.device for t in (q, kv_cache, weights, lens, block_table, schedule)}
    if len(devices) != 1:
        raise bad(fn, "schedule_meta", "on the same device as q, kv_cache, weights, context_lens and block_table",
                  schedule)

    rec = _SCHEDULES.get(id(schedule))
    if rec is None or rec.ref() is not schedule:
        if not _trust_foreign():
            raise ScheduleMismatchError(
                f"{fn}(): schedule_meta was not built by dgcompat.get_paged_mqa_logits_metadata, so dgcompat cannot "
                f"tell which lengths it belongs to (a mismatch can hang the GPU) [deep_gemm {release_label()}]. "
                f"Build it with dgcompat from the same context_lens (DGCOMPAT_TRUST_SCHEDULES=1 launches foreign "
                f"schedules unchecked)")
        num_sms = schedule.shape[0] - 1
        rec = _Schedule(weakref.ref(schedule), schedule._version, _lens_key(lens), lens._version,
                        _metadata_lens(lens, caps.paged_context_lens), block_kv, num_sms)
    if schedule._version != rec.version:
        raise ScheduleMismatchError(
            f"{fn}(): schedule_meta was written after dgcompat built it, so it may belong to other lengths "
            f"[deep_gemm {release_label()}]; refresh it with get_paged_mqa_logits_metadata(context_lens, block_kv, "
            f"out=schedule_meta)")
    if rec.lens_key != _lens_key(lens):
        raise ScheduleMismatchError(
            f"{fn}(): schedule_meta was built for another context_lens tensor than the one given "
            f"[deep_gemm {release_label()}]; launching it could hang the GPU. Build the schedule from this "
            f"context_lens")
    if rec.lens_version != lens._version:
        raise ScheduleMismatchError(
            f"{fn}(): context_lens was modified after schedule_meta was built from it "
            f"[deep_gemm {release_label()}]; launching the stale schedule could hang the GPU. Refresh it with "
            f"get_paged_mqa_logits_metadata(context_lens, block_kv, out=schedule_meta)")
    if _debug():
        fresh = _bind_metadata()(rec.launch_lens, rec.block_kv, rec.num_sms)
        if not torch.equal(fresh.cpu(), schedule.cpu()):
            raise ScheduleMismatchError(f"{fn}(): schedule_meta does not match the current context_lens values "
                                        f"(DGCOMPAT_DEBUG check) [deep_gemm {release_label()}]")

    # Choose the launch layout.
    lens_form = caps.paged_context_lens
    native_n = caps.paged_native_next_n
    if lens_form == "any":
        layout = "as-given"
    elif form == "flat" or n == 1:
        layout = "flat"
    elif n in native_n:
        layout = "native"
    else:
        layout = "flat"

    q_shape: tuple[int, ...] | None = None
    if layout == "as-given":
        launch_lens, launch_bt = lens, block_table
    elif layout == "native":
        q_shape = None if q.dim() == 4 else (b, n, h, d)
        if lens_form == "2d":
            launch_lens = lens if form == "rows" else _clamp1(_row_lens(lens, b, n, form).view(b, n))
        else:
            launch_lens = lens if form == "seq" else lens.amax(dim=1).to(lens.dtype)
        launch_bt = block_table if block_table.shape[0] == b else block_table[::n]
    else:  # flat: one query row per token
        q_shape = None if q.dim() == 4 and n == 1 else (rows, 1, h, d)
        if form == "flat" or n == 1:
            per_row = lens.view(rows, 1)  # already one length per row: no copy, same tensor as the schedule's
        else:
            per_row = _clamp1(_row_lens(lens, b, n, form)).view(rows, 1)
        launch_lens = per_row if lens_form == "2d" else per_row.view(-1)
        if block_table.shape[0] == rows:
            launch_bt = block_table
        else:
            launch_bt = block_table.unsqueeze(1).expand(b, n, block_table.shape[1]).reshape(rows, -1)
    if launch_bt.stride(-1) != 1:
        # The kernels assert stride(1) == 1; a transposed (B, 1) view passes is_contiguous() but not that.
        launch_bt = launch_bt.clone(memory_format=torch.contiguous_format)

    if launch_lens.data_ptr() == rec.launch_lens.data_ptr() and tuple(launch_lens.shape) == tuple(rec.launch_lens.shape):
        launch_lens, launch_schedule = rec.launch_lens, schedule
    else:
        launch_schedule = _bind_metadata()(launch_lens, rec.block_kv, rec.num_sms)

    invalid = None
    if clean and caps.paged_clean_logits == "emulated":
        row_len = _row_lens(lens, b, n, form)
        cols = torch.arange(max_len, device=lens.device)
        invalid = cols.unsqueeze(0) >= row_len.view(-1, 1)
    return _Plan(lens, lens._version, schedule, schedule._version, block_table, block_table._version,
                 q.shape, max_len, clean, q_shape, launch_lens, launch_schedule, launch_bt, rows, invalid,
                 launch_bt.data_ptr() != block_table.data_ptr())


def _clamp1(t: Any) -> Any:
    # The kernels need every row to see at least one position; rows whose window is empty get one
    # (their output is unspecified, and -inf under clean_logits, either way).
    return t.clamp_min(1).to(t.dtype)


def _no_diagnosis(*_args: Any) -> None:
    """Arguments were checked up front; whatever deep_gemm rejects is reported as a KernelError."""


def _bind_paged() -> Callable[..., Any]:
    """The upstream paged-logits call as ``f(q, kv, weights, lens, block_table, schedule, max_len)``.

    Bound to the upstream function itself where it takes exactly that (clean_logits defaults to False,
    and dgcompat emulates clean_logits anyway); a small adapter elsewhere.
    """
    import torch

    with _binding.lock:
        impl = getattr(_B, "paged", None)
        if impl is not None:
            return impl
        mod = _binding.load()
        caps = capabilities()
        tensor_type = torch.Tensor
        from_dlpack = torch.utils.dlpack.from_dlpack
        if caps.backend == "reference":
            impl = mod.fp8_paged_mqa_logits  # its clean_logits is keyword-only and defaults to False
        else:
            name = caps.paged_mqa_logits
            target = getattr(mod, name) if name else None
            if target is None:
                raise UnsupportedFeatureError("fp8_paged_mqa_logits", "paged MQA logits", release_label())
            if caps.indexer_inputs == "mx-bf16":  # SM100 MX/bf16 contract of 0.2.5 / 2.8.x: dgcompat._sm100
                refused = _sm100.paged_refusal("fp8_paged_mqa_logits", str(caps.arch))
                _B.paged = refused
                return refused
            raw = caps.raw_ffi_returns
            if name == "fp8_fp4_paged_mqa_logits":
                # (q, q_sf) pair: a bare q hits the torch.Tensor(...) TypeError in releases before 0.2.0.
                def impl(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int) -> Any:
                    out = target((q, None), kv, w, lens, bt, sched, max_len)
                    return out if type(out) is tensor_type else from_dlpack(out)
            elif caps.paged_clean_logits_arg == "required":
                def impl(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int) -> Any:
                    return target(q, kv, w, lens, bt, sched, max_len, False)
            elif raw:
                def impl(q: Any, kv: Any, w: Any, lens: Any, bt: Any, sched: Any, max_len: int) -> Any:
                    out = target(q, kv, w, lens, bt, sched, max_len)
                    return out if type(out) is tensor_type else from_dlpack(out)
            else:
                impl = target
        _B.paged = impl
        return impl


def fp8_paged_mqa_logits(q: torch.Tensor, kv_cache: torch.Tensor, weights: torch.Tensor,
                         context_lens: torch.Tensor, block_table: torch.Tensor, schedule_meta: torch.Tensor,
                         max_context_len: int, *, clean_logits: bool = False) -> torch.Tensor:
    """Indexer logits over a paged FP8 KV cache, for ``next_n`` query rows per sequence.

    - ``q``: float8_e4m3fn ``(B, next_n, H, D)`` or ``(N, H, D)``.
    - ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, D + 4)``: per block the FP8 values of its tokens,
      then one float32 scale per token.
    - ``weights``: float32 ``(B*next_n, H)``.
    - ``context_lens``: int32, contiguous: ``(B,)`` (row ``j`` sees the sequence's first
      ``ctx - next_n + j + 1`` positions), ``(B, next_n)`` (per-row lengths) or ``(B*next_n, 1)``.
    - ``block_table``: int32 ``(B, max_blocks)`` or ``(B*next_n, max_blocks)``; last stride 1.
    - ``schedule_meta``: from :func:`get_paged_mqa_logits_metadata` on this ``context_lens``.
    - Returns float32 ``(B*next_n, max_context_len)`` in query-row order. Positions at or past a row's
      length are ``-inf`` with ``clean_logits=True``, unspecified otherwise. One-row results keep a
      4-aligned row stride.

    Raises :class:`~dgcompat.errors.ScheduleMismatchError` instead of launching a schedule that does not
    belong to ``context_lens`` (see the module documentation for the rule).
    """
    p = _LAST
    if (p is None or context_lens is not p.lens or schedule_meta is not p.schedule
            or block_table is not p.block_table or q.shape != p.q_shape or max_context_len != p.max_context_len
            or clean_logits is not p.clean or context_lens._version != p.lens_version
            or schedule_meta._version != p.schedule_version
            or (p.block_table_derived and block_table._version != p.block_table_version)):
        p = _lookup_plan(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits)
    try:
        impl = _B.paged
    except AttributeError:
        impl = _bind_paged()
    try:
        out = impl(q if p.q_launch_shape is None else q.view(p.q_launch_shape), kv_cache, weights,
                   p.launch_lens, p.launch_block_table, p.launch_schedule, max_context_len)
    except Exception as exc:
        translate("fp8_paged_mqa_logits", exc, _diagnose_paged, q, kv_cache, weights, context_lens, block_table,
                  schedule_meta, max_context_len)
    if p.invalid is not None:
        out.masked_fill_(p.invalid, float("-inf"))
    if p.rows <= 1 and out.stride(0) % 4:
        # A one-row result that crossed DLPack may come back with row stride 1; consumers (fused top-k)
        # need a 4-aligned row stride. With one row any stride addresses the same elements.
        out = out.as_strided(tuple(out.shape), (-(-out.shape[1] // 4) * 4, 1))
    return out


def _lookup_plan(q: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any, max_len: Any,
                 clean: bool) -> _Plan:
    global _LAST
    key = (id(lens), getattr(lens, "_version", None), id(schedule), getattr(schedule, "_version", None),
           id(block_table), getattr(block_table, "_version", None), tuple(getattr(q, "shape", ())), max_len, clean)
    p = _PLANS.get(key)
    if p is None or p.lens is not lens or p.schedule is not schedule or p.block_table is not block_table:
        p = _plan(q, kv_cache, weights, lens, block_table, schedule, max_len, clean)
        _PLANS[key] = p
        while len(_PLANS) > 4:
            _PLANS.popitem(last=False)
    _LAST = p
    return p


def _diagnose_paged(q: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any,
                    max_len: Any) -> None:
    fn = "fp8_paged_mqa_logits"
    tensor(fn, "kv_cache", kv_cache, dims=(4,), dtypes=("uint8", "int8") + FP8_DTYPE_NAMES)
    h = q.shape[-2]
    rows = weights.shape[0]
    if weights.shape[1] != h:
        raise bad(fn, "weights", f"(B*next_n={rows}, H={h})", weights)


# --- the upstream calls of this module (see dgcompat._calls) -------------------------------------

from ._calls import UpstreamCall  # noqa: E402  (kept with the declarations it builds)

_MQA_ROW_POSITIONAL: tuple[tuple[str, str, tuple[Any, ...]], ...] = (
    # _bind_mqa: (.., clean) without max_seqlen_k, (.., clean, max_k) natively, (.., max_k) emulated.
    ("clean_logits", "mqa_clean_logits", ("native",)),
    ("max_seqlen_k", "mqa_max_seqlen_k", ("required", "optional")),
)
_MQA_POSITIONAL = ("q", "kv", "weights", "ks|cu_seq_len_k_start", "ke|cu_seq_len_k_end")
_PAGED_POSITIONAL = ("q", "kv_cache|fused_kv_cache", "weights", "context_lens", "block_table", "schedule_meta",
                     "max_context_len")

CALLS: tuple[UpstreamCall, ...] = (
    UpstreamCall("deep_gemm.fp8_mqa_logits", "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL,
                 row_positional=_MQA_ROW_POSITIONAL, uses_result=True, selected_by=("mqa_logits", "fp8_mqa_logits")),
    UpstreamCall("deep_gemm.fp8_fp4_mqa_logits", "dgcompat.fp8_mqa_logits", _MQA_POSITIONAL,
                 row_positional=_MQA_ROW_POSITIONAL, uses_result=True,
                 selected_by=("mqa_logits", "fp8_fp4_mqa_logits")),
    # The fp8 name gets clean_logits=False at #7 only where it has no default (dgcompat masks itself);
    # the fp8_fp4 name gets a (q, None) pair.
    UpstreamCall("deep_gemm.fp8_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 row_positional=(("clean_logits", "paged_clean_logits_arg", ("required",)),),
                 uses_result=True, selected_by=("paged_mqa_logits", "fp8_paged_mqa_logits")),
    UpstreamCall("deep_gemm.fp8_fp4_paged_mqa_logits", "dgcompat.fp8_paged_mqa_logits", _PAGED_POSITIONAL,
                 uses_result=True, selected_by=("paged_mqa_logits", "fp8_fp4_paged_mqa_logits")),
    UpstreamCall("deep_gemm.get_paged_mqa_logits_metadata", "dgcompat.get_paged_mqa_logits_metadata",
                 ("context_lens", "block_kv", "num_sms"), uses_result=True),
)
