"""Every argument check of the paged path, made in full on every call that is not a repeat of the last plan."""

from __future__ import annotations

from typing import Any

from .._checks import FP8_DTYPE_NAMES
from .._checks import bad
from .._checks import release_label
from .._checks import tensor
from ..errors import UnsupportedFeatureError
from ..table import capabilities
from ._layout import shape_of_rows

__all__ = ["check_lens", "check_indices", "check_paged", "check_logits_dtype", "check_weights", "check_q_scales",
           "weights_plan", "LOGITS_DTYPES"]

#: The logits dtypes the stable surface returns (the builds assert ``kFloat32 or kBFloat16``).
LOGITS_DTYPES = ("float32", "bfloat16")


def check_logits_dtype(fn: str, dtype: Any) -> None:
    """``logits_dtype`` is None, ``torch.float32`` or ``torch.bfloat16``."""
    import torch

    if dtype is not None and (not isinstance(dtype, torch.dtype) or str(dtype).replace("torch.", "") not in LOGITS_DTYPES):
        raise bad(fn, "logits_dtype", "None, torch.float32 or torch.bfloat16", dtype)


def check_weights(fn: str, weights: Any) -> None:
    """float32 or bfloat16 weights (bf16 weights reduce in bf16 where the build takes them, and are upcast to float32,
    exactly, where it takes only float32: capability ``indexer_weights``)."""
    tensor(fn, "weights", weights, dims=(2,), dtypes=LOGITS_DTYPES)


def weights_plan(fn: str, weights: Any, dtype: Any) -> tuple[bool, Any]:
    """``(upcast, kernel_dtype)`` for these weights on the installed build: whether bf16 weights go to the kernel as
    float32 (the build takes only float32 there), and the logits dtype to ask the kernel for (None: its float32
    default; bf16 where bf16 weights go to it as they are, since such weights reduce in bf16). float32 weights where
    the build takes only bf16 ones are refused: rounding them would change every logit."""
    caps = capabilities()
    name = str(weights.dtype).replace("torch.", "")
    upcast = name not in caps.indexer_weights
    if upcast and name != "bfloat16":
        raise UnsupportedFeatureError(
            fn, f"{name} weights on {caps.arch}", release_label(),
            hint=f"the build's indexer kernels take {' or '.join(caps.indexer_weights)} weights there (capability "
                 "indexer_weights); rounding float32 weights would change every logit")
    if name == "bfloat16" and not upcast:
        return False, weights.dtype
    return upcast, None if dtype is None or str(dtype) == "torch.float32" else dtype


def check_q_scales(fn: str, q: Any, q_sf: Any) -> str:
    """The query format of ``(q, q_sf)``: ``"fp8"`` (no scales), ``"mxfp8"`` or ``"fp4"`` (int32 packed UE8M0 scales of
    shape ``q.shape[:-1]``); refused where the build does not compute that format on this architecture."""
    if q_sf is None:
        return "fp8"
    tensor(fn, "q", q, dims=(3, 4), dtypes=FP8_DTYPE_NAMES + ("int8",),
           what="FP8 values, or FP4 values packed two per int8 byte")
    form = "fp4" if str(q.dtype) == "torch.int8" else "mxfp8"
    tensor(fn, "q[1]", q_sf, dtypes=("int32",), what="int32 packed UE8M0 scales (one int32 per 128 values)")
    if tuple(q_sf.shape) != tuple(q.shape[:-1]) or not q_sf.is_contiguous() or q_sf.device != q.device:
        raise bad(fn, "q[1]", f"a contiguous int32 {tuple(q.shape[:-1])} scale tensor on {q.device} (one int32 of four "
                  "UE8M0 exponents per query head)", q_sf)
    caps = capabilities()
    if form not in caps.indexer_q_formats:
        what = "FP4 queries (packed e2m1 with UE8M0 scales)" if form == "fp4" else "MX-scaled FP8 queries"
        raise UnsupportedFeatureError(fn, f"{what} on {caps.arch or 'an unknown architecture'}", release_label(),
                                      hint=f"this build computes {', '.join(caps.indexer_q_formats)} queries there "
                                           "(capability indexer_q_formats)")
    return form


def check_lens(fn: str, lens: Any) -> None:
    tensor(fn, "context_lens", lens, dims=(1, 2), dtypes=("int32",), what="an int32 lengths tensor")
    if not lens.is_contiguous():
        raise bad(fn, "context_lens", "a contiguous tensor (the kernels assert it)", lens,
                  hint="pass context_lens.contiguous() and build the schedule from that same tensor")


def check_indices(fn: str, indices: Any, rows: int, device: Any) -> None:
    if not capabilities().paged_indices:
        raise UnsupportedFeatureError(fn, "indices= (varlen paged MQA)", release_label())
    tensor(fn, "indices", indices, dims=(1,), dtypes=("int32",), what="an int32 (rows,) tensor")
    if indices.shape[0] != rows or not indices.is_contiguous() or indices.device != device:
        raise bad(fn, "indices", f"a contiguous int32 ({rows},) tensor on {device}", indices)


def check_paged(fn: str, q: Any, q_sf: Any, kv_cache: Any, weights: Any, lens: Any, block_table: Any, schedule: Any,
                 max_len: Any, clean: Any, indices: Any, dtype: Any) -> tuple[int, int, str]:
    """Every argument check (the same on every call); returns (B, next_n, form)."""
    caps = capabilities()
    if q_sf is None:
        tensor(fn, "q", q, dims=(3, 4), dtypes=FP8_DTYPE_NAMES, what="an FP8 (B, next_n, H, D) or (N, H, D) tensor")
    else:
        check_q_scales(fn, q, q_sf)
    check_logits_dtype(fn, dtype)
    check_lens(fn, lens)
    tensor(fn, "block_table", block_table, dims=(2,), dtypes=("int32",), what="an int32 (rows, max_blocks) tensor")
    tensor(fn, "schedule_meta", schedule, dims=(2,), dtypes=("int32",), what="the int32 schedule")
    tensor(fn, "kv_cache", kv_cache, dims=(4,), dtypes=("uint8", "int8") + FP8_DTYPE_NAMES,
           what="a uint8 (num_blocks, block_kv, 1, D + 4) cache")
    check_weights(fn, weights)
    if isinstance(max_len, bool) or not isinstance(max_len, int) or max_len <= 0:
        raise bad(fn, "max_context_len", "a positive int", max_len)
    if not isinstance(clean, bool):
        raise bad(fn, "clean_logits", "a bool", clean)
    b, n, form = shape_of_rows(fn, q, lens)
    rows = b * n
    # d: bytes of one query head (D for FP8, D/2 for FP4), as the cache stores each token's values.
    h, d = q.shape[-2], q.shape[-1]
    if kv_cache.shape[2] != 1 or kv_cache.shape[3] != d + 4:
        values = "packed FP4 values (D/2 bytes)" if str(q.dtype) == "torch.int8" else "FP8 values"
        raise bad(fn, "kv_cache", f"(num_blocks, block_kv, 1, {d + 4}): {values} + a 4-byte scale per token", kv_cache)
    # The kernels read q, weights and each cache block densely (host asserts q.is_contiguous(),
    # weights.is_contiguous(), kv_cache.stride(1) == D + 4, stride(3) == 1 and a 4-byte aligned block stride).
    if not q.is_contiguous():
        raise bad(fn, "q", "a contiguous tensor (the kernels assert it)", q, hint="pass q.contiguous()")
    if not weights.is_contiguous():
        raise bad(fn, "weights", "a contiguous tensor (the kernels assert it)", weights,
                  hint="pass weights.contiguous()")
    if kv_cache.stride(3) != 1 or kv_cache.stride(1) != d + 4 or kv_cache.stride(0) % 4:
        raise bad(fn, "kv_cache", f"dense blocks: stride(1) == D + 4 = {d + 4}, stride(3) == 1 and a block stride "
                  f"that is a multiple of 4", kv_cache)
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
    if schedule.shape[1] != 2 or schedule.shape[0] < 2:
        raise bad(fn, "schedule_meta", "an int32 (num_sms + 1, 2) schedule", schedule)
    for name, t in (("kv_cache", kv_cache), ("weights", weights), ("context_lens", lens),
                    ("block_table", block_table), ("schedule_meta", schedule)):
        if t.device != q.device:
            raise bad(fn, name, f"on {q.device} like q", t)
    if indices is not None:
        if n != 1 or form == "rows":
            raise bad(fn, "indices", "varlen indices with one query row per token ((rows, 1, H, D) q, (rows, 1) "
                      "lengths)", indices)
        check_indices(fn, indices, rows, q.device)
    return b, n, form
