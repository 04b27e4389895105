"""The indexer: MQA logits, paged MQA logits over the packed KV cache, and the paged schedule.

How :func:`fp8_fp4_mqa_logits` and :func:`fp8_fp4_paged_mqa_logits` reduce: q and k are dequantized to float32
(exact: FP8 or e2m1 values times powers of two), then the dot products, the relu, the weighted sum over heads
(bfloat16 weights widened to float32) and, in the FP8 form, the KV scale are all float32; the result is rounded
once to ``logits_dtype`` (to nearest, ties to even). The SM100 kernels reduce bfloat16 weights in bfloat16 (vLLM
0.34.0 ``mqa_logits_use_mx_scales``), so compare their bfloat16 logits with a bfloat16 tolerance.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

from ..errors import BadArgumentError
from ._common import CHUNK_ELEMENTS
from ._common import FP8
from ._common import FP8_MAX
from ._common import SPLIT_KV
from ._common import Balance
from ._common import align_up
from ._common import ceil_div
from ._common import describe
from ._common import need_device
from ._common import need_dtype
from ._common import need_float
from ._common import need_int
from ._common import need_int_tensor
from ._common import need_pair
from ._common import need_shape
from ._common import need_tensor
from ._mx import cast_to_mxfp8
from ._mx import dequantize_mx
from ._mx import mx_dim
from ._mx import unpack_fp4_kv_cache
from ._scales import cast_groups

__all__ = ["fp8_mqa_logits", "fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "pack_kv_cache", "unpack_kv_cache", "fp8_paged_mqa_logits", "get_paged_mqa_logits_metadata", "paged_schedule_matches"]


# ---------------------------------------------------------------------------------------------
# MQA logits (DeepSeek V3.2 indexer)


def _head_reduce(scores: Tensor, weights: Tensor) -> Tensor:
    """sum_h w[.., h] * relu(scores[.., h, :]) for scores (.., H, P), weights (.., H)."""
    return (scores.relu_() * weights.unsqueeze(-1)).sum(dim=-2)


def fp8_mqa_logits(q: Tensor, kv: tuple[Tensor, Tensor], weights: Tensor, ks: Tensor, ke: Tensor,
                   clean_logits: bool = False, max_seqlen_k: int | None = 0) -> Tensor:
    """Ragged (prefill) indexer logits, called like sgl-deep-gemm's ``fp8_mqa_logits`` (positionally).

    ``q``: ``(Nq, H, D)`` float8_e4m3fn; ``kv = (k (Nk, D) float8_e4m3fn, k_scale (Nk,)
    float32)``; ``weights``: ``(Nq, H)`` float32; ``ks``/``ke``: int32 ``(Nq,)``, query ``i``
    sees keys ``[ks[i], ke[i])``.

    ``logits[i, j] = k_scale[j] * sum_h weights[i, h] * relu(q[i, h] . k[j])`` in float32.

    * ``max_seqlen_k`` None or 0: float32 ``(Nq, Nk)``; entries outside ``[ks[i], ke[i])`` are
      ``-inf`` (with ``clean_logits=False`` the kernel leaves them unspecified).
    * ``max_seqlen_k > 0`` (compressed layout): float32 ``(Nq, max_seqlen_k)`` whose column ``j``
      holds key ``ks[i] + j`` for ``j < ke[i] - ks[i]``; other columns are ``-inf`` here and
      unspecified in the kernel. ``clean_logits=True`` is rejected in this mode, as deep_gemm
      does.

    Row strides mirror the kernel's allocation (``align(Nk + 256, 8)`` for the full layout,
    ``align(max_seqlen_k, 256)`` for the compressed one).
    """
    fn = "fp8_mqa_logits"
    q = need_tensor(fn, "q", q)
    need_dtype(fn, "q", q, (FP8,))
    if q.dim() != 3:
        raise BadArgumentError(fn, "q", "a 3-D (Nq, H, D) tensor", describe(q))
    nq, h, dim = q.shape
    device = q.device
    k, k_scale = need_pair(fn, "kv", kv)
    need_dtype(fn, "kv[0]", k, (FP8,))
    if k.dim() != 2 or k.shape[1] != dim:
        raise BadArgumentError(fn, "kv[0]", f"a 2-D (Nk, {dim}) tensor", describe(k))
    nk = k.shape[0]
    need_dtype(fn, "kv[1]", k_scale, (torch.float32,))
    need_shape(fn, "kv[1]", k_scale, (nk,))
    weights = need_tensor(fn, "weights", weights)
    need_dtype(fn, "weights", weights, (torch.float32,))  # the releases take float32 weights only
    need_shape(fn, "weights", weights, (nq, h))
    ks = need_int_tensor(fn, "ks", ks)
    ke = need_int_tensor(fn, "ke", ke)
    need_shape(fn, "ks", ks, (nq,))
    need_shape(fn, "ke", ke, (nq,))
    for name, t in (("kv[0]", k), ("kv[1]", k_scale), ("weights", weights), ("ks", ks), ("ke", ke)):
        need_device(fn, name, t, device)
    if not isinstance(clean_logits, bool):
        raise BadArgumentError(fn, "clean_logits", "a bool", describe(clean_logits))
    compressed = 0
    if max_seqlen_k is not None:
        compressed = need_int(fn, "max_seqlen_k", max_seqlen_k)
    if compressed and clean_logits:
        raise BadArgumentError(fn, "clean_logits", "False when max_seqlen_k > 0", "True")

    stride = align_up(compressed, 256) if compressed else align_up(nk + 256, 8)
    return _ragged(q.to(torch.float32), k.to(torch.float32), k_scale.to(torch.float32), weights, ks, ke, compressed,
                   stride, torch.float32)


def _ragged(qf: Tensor, kf: Tensor, post_scale: Tensor | None, weights: Tensor, ks: Tensor, ke: Tensor,
            compressed: int, stride: int, out_dtype: torch.dtype) -> Tensor:
    """The ragged logits of checked inputs, in float32, stored as ``out_dtype`` (rounded once, to nearest even).

    ``qf (Nq, H, D)`` and ``kf (Nk, D)`` float32; ``post_scale (Nk,)`` multiplies each key's column after the
    head reduction (the FP8 form: the SM90 kernels apply the KV scale last), or None (keys already scaled).
    """
    nq, h = qf.shape[0], qf.shape[1]
    nk = kf.shape[0]
    device = qf.device
    width = compressed or nk
    out = torch.full((nq, stride), float("-inf"), dtype=out_dtype, device=device)[:, :width]
    if nq == 0 or width == 0 or nk == 0:
        return out

    w32 = weights.to(torch.float32)
    start = ks.to(torch.int64)
    end = ke.to(torch.int64)
    cols = torch.arange(width, device=device)
    chunk = max(1, CHUNK_ELEMENTS // max(1, h * nk))
    for lo in range(0, nq, chunk):
        hi = min(nq, lo + chunk)
        scores = torch.matmul(qf[lo:hi], kf.T)  # (c, H, Nk)
        logits = _head_reduce(scores, w32[lo:hi])  # (c, Nk)
        if post_scale is not None:
            logits = logits * post_scale
        s, e = start[lo:hi, None], end[lo:hi, None]
        if compressed:
            key = s + cols
            valid = (cols < e - s) & (key >= 0) & (key < nk)
            vals = logits.gather(1, key.clamp(0, nk - 1))
        else:
            valid = (cols >= s) & (cols < e)
            vals = logits
        out[lo:hi] = torch.where(valid, vals, float("-inf"))
    return out


def pack_kv_cache(k: Tensor, *, mx: bool = False) -> Tensor:
    """Quantize a paged key cache into deep_gemm's fused FP8 layout.

    ``k``: ``(num_blocks, block_kv, D)`` (or ``(num_blocks, block_kv, 1, D)``) float. Returns uint8
    ``(num_blocks, block_kv, 1, D + 4)``: per block, ``block_kv * D`` FP8 bytes (token ``t`` at
    ``[t*D, (t+1)*D)``) followed by ``block_kv`` 4-byte scales (native byte order):

    * ``mx=False``: one float32 scale per token, ``sf = amax.clamp(1e-4) / 448``;
    * ``mx=True`` (the SM100 MX form, D in 32, 64, 96, 128): one int32 of UE8M0 exponents per token, one per
      32 values (:func:`dgcompat.reference.cast_to_mxfp8`).
    """
    fn = "pack_kv_cache"
    k = need_tensor(fn, "k", k)
    need_float(fn, "k", k)
    if not isinstance(mx, bool):
        raise BadArgumentError(fn, "mx", "a bool", describe(mx))
    if k.dim() == 4 and k.shape[2] == 1:
        k = k.squeeze(2)
    if k.dim() != 3:
        raise BadArgumentError(fn, "k", "a (num_blocks, block_kv, D) tensor", describe(k))
    nb, bkv, dim = k.shape
    k32 = k.to(torch.float32)
    if mx:
        mx_dim(fn, "k", dim)
        values, sf = cast_to_mxfp8(k32)
    else:
        sf = k32.abs().amax(dim=2, keepdim=True).clamp(min=1e-4) / FP8_MAX
        values = cast_groups(k32, sf)
    fused = torch.empty((nb, bkv * (dim + 4)), dtype=torch.uint8, device=k.device)
    fused[:, : bkv * dim] = values.reshape(nb, bkv * dim).view(torch.uint8)
    fused[:, bkv * dim :] = sf.reshape(nb, bkv).contiguous().view(torch.uint8)
    return fused.view(nb, bkv, 1, dim + 4)


def unpack_kv_cache(kv_cache: Tensor, *, mx: bool = False) -> tuple[Tensor, Tensor]:
    """Split a fused paged cache into ``(fp8 (num_blocks, block_kv, D), scales (num_blocks, block_kv))``.

    ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, D + 4)`` as built by :func:`pack_kv_cache`
    (any strides; each block is read in its logical byte order). The scales are float32, or with
    ``mx=True`` int32 packed UE8M0.
    """
    fn = "unpack_kv_cache"
    kv_cache = need_tensor(fn, "kv_cache", kv_cache)
    need_dtype(fn, "kv_cache", kv_cache, (torch.uint8,))
    if not isinstance(mx, bool):
        raise BadArgumentError(fn, "mx", "a bool", describe(mx))
    if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] <= 4:
        raise BadArgumentError(fn, "kv_cache", "a (num_blocks, block_kv, 1, D + 4) tensor with D > 0", describe(kv_cache))
    nb, bkv, _, width = kv_cache.shape
    dim = width - 4
    flat = kv_cache.reshape(nb, bkv * width)
    values = flat[:, : bkv * dim].contiguous().view(FP8).view(nb, bkv, dim)
    scales = flat[:, bkv * dim :].contiguous().view(torch.int32 if mx else torch.float32)
    return values, scales


def _row_lengths(fn: str, context_lens: Tensor, b: int, next_n: int) -> Tensor:
    """Visible KV length of every query row (int64, (B*next_n,), clamped >= 0)."""
    rows = b * next_n
    ctx = context_lens.to(torch.int64)
    if ctx.dim() == 1 and ctx.shape[0] == b:
        j = torch.arange(next_n, device=ctx.device)
        lens = ctx.unsqueeze(1) - next_n + j + 1
    elif (ctx.dim() == 2 and tuple(ctx.shape) == (b, next_n)) or (ctx.dim() == 2 and tuple(ctx.shape) == (rows, 1)):
        lens = ctx
    else:
        raise BadArgumentError(
            fn, "context_lens", f"shape ({b},), ({b}, {next_n}) or ({rows}, 1)", describe(context_lens)
        )
    return lens.reshape(rows).clamp(min=0)


def fp8_paged_mqa_logits(q: Tensor, kv_cache: Tensor, weights: Tensor, context_lens: Tensor, block_table: Tensor,
                         schedule_meta: Tensor | None, max_context_len: int, clean_logits: bool = False,
                         indices: Tensor | None = None) -> Tensor:
    """Paged (decode / verify) indexer logits, called like sgl-deep-gemm's ``fp8_paged_mqa_logits``.

    * ``q``: ``(B, next_n, H, D)`` float8_e4m3fn.
    * ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, D + 4)`` (see :func:`pack_kv_cache`).
    * ``weights``: ``(B*next_n, H)`` float32.
    * ``context_lens``: int32 ``(B,)`` (row ``j`` of sequence ``b`` sees positions
      ``[0, ctx[b] - next_n + j + 1)``), ``(B, next_n)`` (row ``j`` sees ``[0, ctx[b, j])``) or
      ``(B*next_n, 1)`` (one length per query row).
    * ``block_table``: int32 ``(B, max_blocks)`` or ``(B*next_n, max_blocks)``; position ``p``
      of a row lives in block ``block_table[row, p // block_kv]``, slot ``p % block_kv``.
    * ``schedule_meta``: accepted and ignored (may be None).
    * ``indices``: None, or int32 ``(B,)`` with ``next_n == 1`` (the varlen layout: the sequence of
      each query row; it changes the kernels' work split, not the result).

    Returns float32 ``(B*next_n, max_context_len)`` in row order ``b*next_n + j``:
    ``k_scale[p] * sum_h weights[row, h] * relu(q[b, j, h] . k[p])`` for visible positions,
    ``-inf`` elsewhere (unspecified in the kernel unless ``clean_logits=True``). The row stride is
    ``align(max_context_len, 256)`` like the kernel's output.
    """
    fn = "fp8_paged_mqa_logits"
    q = need_tensor(fn, "q", q)
    need_dtype(fn, "q", q, (FP8,))
    if q.dim() != 4:
        raise BadArgumentError(fn, "q", "a 4-D (B, next_n, H, D) tensor", describe(q))
    b, next_n, h, dim = q.shape
    rows = b * next_n
    device = q.device
    kv_cache = need_tensor(fn, "kv_cache", kv_cache)
    need_dtype(fn, "kv_cache", kv_cache, (torch.uint8,))
    if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] != dim + 4:
        raise BadArgumentError(fn, "kv_cache", f"a (num_blocks, block_kv, 1, {dim + 4}) tensor", describe(kv_cache))
    nb, bkv = kv_cache.shape[0], kv_cache.shape[1]
    weights = need_tensor(fn, "weights", weights)
    need_dtype(fn, "weights", weights, (torch.float32,))  # the releases take float32 weights only
    need_shape(fn, "weights", weights, (rows, h))
    context_lens = need_int_tensor(fn, "context_lens", context_lens)
    block_table = need_int_tensor(fn, "block_table", block_table)
    if block_table.dim() != 2 or block_table.shape[0] not in (b, rows):
        raise BadArgumentError(fn, "block_table", f"a ({b}, max_blocks) or ({rows}, max_blocks) tensor", describe(block_table))
    for name, t in (("kv_cache", kv_cache), ("weights", weights), ("context_lens", context_lens), ("block_table", block_table)):
        need_device(fn, name, t, device)
    need_int(fn, "max_context_len", max_context_len)
    if not isinstance(clean_logits, bool):
        raise BadArgumentError(fn, "clean_logits", "a bool", describe(clean_logits))
    if schedule_meta is not None:
        need_tensor(fn, "schedule_meta", schedule_meta)
    if indices is not None:
        _need_varlen(fn, indices, b, next_n, device)

    values, scales = unpack_kv_cache(kv_cache)
    raw = values.view(torch.uint8)

    def gather(blocks: Tensor, slots: Tensor) -> tuple[Tensor, Tensor | None]:
        # gather raw bytes: integer indexing is available for uint8 on every backend
        return raw[blocks, slots].view(FP8).to(torch.float32), scales[blocks, slots]

    return _paged(fn, q.to(torch.float32), gather, weights, context_lens, block_table, nb, bkv, max_context_len,
                  align_up(max_context_len, SPLIT_KV), torch.float32)


Gather = Callable[[Tensor, Tensor], tuple[Tensor, Tensor | None]]


def _paged(fn: str, qf: Tensor, gather: Gather, weights: Tensor, context_lens: Tensor, block_table: Tensor, nb: int,
           bkv: int, max_context_len: int, stride: int, out_dtype: torch.dtype) -> Tensor:
    """The paged logits of checked inputs, in float32, stored as ``out_dtype`` (rounded once, to nearest even).

    ``qf``: float32 ``(B, next_n, H, D)``. ``gather(blocks, slots)`` (int64 ``(c, P)`` each) returns the keys at
    those cache positions as float32 ``(c, P, D)`` and a ``(c, P)`` scale applied after the head reduction (the
    FP8 form) or None (keys already scaled). The lengths and the block table are checked here.
    """
    b, next_n, h, dim = qf.shape
    rows = b * next_n
    device = qf.device
    lens = _row_lengths(fn, context_lens, b, next_n)
    longest = int(lens.max()) if rows else 0
    if longest > max_context_len:
        raise BadArgumentError(fn, "max_context_len", f">= the longest visible length {longest}", repr(max_context_len))
    n_cols = block_table.shape[1]
    if longest > n_cols * bkv:
        raise BadArgumentError(
            fn, "block_table", f">= {ceil_div(longest, bkv)} columns for length {longest} (block_kv={bkv})", describe(block_table)
        )

    out = torch.full((rows, stride), float("-inf"), dtype=out_dtype, device=device)[:, :max_context_len]
    if rows == 0 or longest == 0:
        return out

    bt_rows = block_table.shape[0]
    per_bt = rows // bt_rows  # query rows sharing one block-table row
    pos = torch.arange(longest, device=device)
    row_valid = pos.unsqueeze(0) < lens.unsqueeze(1)  # (rows, P)
    bt_valid = row_valid.view(bt_rows, per_bt, longest).any(dim=1)  # (bt_rows, P)
    blocks = block_table.to(torch.int64)[:, (pos // bkv)]
    blocks = torch.where(bt_valid, blocks, 0)
    if bool(((blocks < 0) | (blocks >= nb)).any()):
        raise BadArgumentError(fn, "block_table", f"block ids in [0, {nb}) for visible positions", "an out-of-range id")
    slots = (pos % bkv).expand(bt_rows, longest)

    qv = qf.view(bt_rows, per_bt, h, dim)
    wv = weights.view(bt_rows, per_bt, h).to(torch.float32)
    chunk = max(1, CHUNK_ELEMENTS // max(1, per_bt * h * longest + longest * dim))
    logits = torch.empty((bt_rows, per_bt, longest), dtype=torch.float32, device=device)
    for lo in range(0, bt_rows, chunk):
        hi = min(bt_rows, lo + chunk)
        kk, post = gather(blocks[lo:hi], slots[lo:hi])  # (c, P, D), (c, P) or None
        scores = torch.matmul(qv[lo:hi], kk.unsqueeze(1).transpose(-1, -2))  # (c, r, H, P)
        reduced = _head_reduce(scores, wv[lo:hi])
        logits[lo:hi] = reduced if post is None else reduced * post.unsqueeze(1)
    out[:, :longest] = torch.where(row_valid, logits.view(rows, longest), float("-inf"))
    return out


# ---------------------------------------------------------------------------------------------
# fp8_fp4 indexer logits: FP8, MX FP8 and FP4 inputs, float32 or bfloat16 logits

_LOGITS_DTYPES = (torch.float32, torch.bfloat16)


def _logits_dtype(fn: str, logits_dtype: object) -> torch.dtype:
    if not isinstance(logits_dtype, torch.dtype) or logits_dtype not in _LOGITS_DTYPES:
        raise BadArgumentError(fn, "logits_dtype", "torch.float32 or torch.bfloat16", describe(logits_dtype))
    return logits_dtype


def _logits_stride(width: int, out_dtype: torch.dtype) -> int:
    # upstream csrc/apis/attention.hpp (54e2261+): "Logits row stride must be 1024-byte aligned"
    return align_up(width, 1024 // torch.empty((), dtype=out_dtype).element_size())


def _indexer_q(fn: str, q: object, rank: int, device: torch.device | None = None) -> tuple[Tensor, Tensor | None, str, int]:
    """``(values, scales or None, format, D)`` of an indexer ``q`` pair; format ``fp8``, ``mxfp8`` or ``fp4``."""
    form = "(Nq, H, D)" if rank == 3 else "(B, next_n, H, D)"
    if not isinstance(q, (tuple, list)) or len(q) != 2:
        raise BadArgumentError(fn, "q", "a (values, scales or None) pair", describe(q))
    values = need_tensor(fn, "q[0]", q[0])
    need_dtype(fn, "q[0]", values, (FP8, torch.int8))
    if values.dim() != rank:
        raise BadArgumentError(fn, "q[0]", f"a {rank}-D {form} tensor (D/2 bytes for packed FP4)", describe(values))
    fp4 = values.dtype == torch.int8
    if q[1] is None:
        if fp4:
            raise BadArgumentError(fn, "q[1]", "int32 UE8M0 scales with packed FP4 values", "None")
        return values, None, "fp8", values.shape[-1]
    sf = need_tensor(fn, "q[1]", q[1])
    need_dtype(fn, "q[1]", sf, (torch.int32,))
    need_shape(fn, "q[1]", sf, tuple(values.shape[:-1]))
    need_device(fn, "q[1]", sf, values.device)
    dim = values.shape[-1] * (2 if fp4 else 1)
    mx_dim(fn, "q[0]", dim)
    return values, sf, "fp4" if fp4 else "mxfp8", dim


def _indexer_weights(fn: str, weights: object, shape: tuple[int, int], out_dtype: torch.dtype, device: torch.device) -> Tensor:
    weights = need_tensor(fn, "weights", weights)
    need_dtype(fn, "weights", weights, (torch.float32, torch.bfloat16))
    if weights.dtype == torch.bfloat16 and out_dtype != torch.bfloat16:
        # upstream host assert: weights.scalar_type() != kBFloat16 or logits_dtype == kBFloat16
        raise BadArgumentError(fn, "weights", "float32 (bfloat16 weights need logits_dtype=torch.bfloat16)",
                               describe(weights))
    need_shape(fn, "weights", weights, shape)
    need_device(fn, "weights", weights, device)
    return weights


def fp8_fp4_mqa_logits(q: tuple[Tensor, Tensor | None], kv: tuple[Tensor, Tensor], weights: Tensor,
                       cu_seq_len_k_start: Tensor, cu_seq_len_k_end: Tensor, max_seqlen_k: int | None,
                       logits_dtype: torch.dtype = torch.float32, schedule_meta: Tensor | None = None) -> Tensor:
    """Ragged (prefill) indexer logits over FP8, MX FP8 or FP4 inputs, called like upstream DeepGEMM 2.8.1's
    ``fp8_fp4_mqa_logits`` (vLLM 0.34.0's vendored copy).

    * ``q = (values, scales)``: FP8 float8_e4m3fn ``(Nq, H, D)`` with ``None``; MX FP8 float8_e4m3fn ``(Nq, H, D)``
      with int32 ``(Nq, H)``; FP4 int8 ``(Nq, H, D/2)`` (two e2m1 values per byte) with int32 ``(Nq, H)``. An
      int32 scale holds one UE8M0 exponent per 32 values (D in 32, 64, 96, 128; :mod:`dgcompat.reference._mx`).
    * ``kv = (k, k_scales)`` in the same format: float8_e4m3fn ``(Nk, D)`` with float32 ``(Nk,)`` (FP8) or int32
      ``(Nk,)`` (MX FP8), int8 ``(Nk, D/2)`` with int32 ``(Nk,)`` (FP4).
    * ``weights``: float32 ``(Nq, H)``, or bfloat16 with ``logits_dtype=torch.bfloat16``.
    * ``cu_seq_len_k_start`` / ``cu_seq_len_k_end``: int32 ``(Nq,)``; query ``i`` sees keys ``[start[i], end[i])``.
    * ``max_seqlen_k``: None or 0 gives ``(Nq, Nk)`` (``-inf`` outside each row's range); ``> 0`` gives the
      compressed ``(Nq, max_seqlen_k)``, column ``j`` of row ``i`` holding key ``start[i] + j`` (``-inf`` past
      ``end[i] - start[i]``).
    * ``logits_dtype``: torch.float32 or torch.bfloat16, the result's dtype.
    * ``schedule_meta``: None or a tensor; accepted and ignored.

    ``logits[i, j] = sum_h weights[i, h] * relu(q[i, h] . k[j])`` with q and k dequantized; in the FP8 form
    ``k_scale[j] * sum_h weights[i, h] * relu(q[i, h] . k_fp8[j])`` (the SM90 kernels apply the KV scale last).
    Row strides are the kernel's: ``align(Nk + 256, 1024 / itemsize)``, compressed
    ``align(align(max_seqlen_k, 256), 1024 / itemsize)``.

    How the reference reduces: in float32 throughout, rounded once to ``logits_dtype`` (the module docstring
    says how, and how to compare with the SM100 kernels).
    """
    fn = "fp8_fp4_mqa_logits"
    out_dtype = _logits_dtype(fn, logits_dtype)
    values, q_sf, fmt, dim = _indexer_q(fn, q, 3)
    nq, h = values.shape[0], values.shape[1]
    device = values.device
    k, k_sf = need_pair(fn, "kv", kv)
    cols = dim // 2 if fmt == "fp4" else dim
    need_dtype(fn, "kv[0]", k, (torch.int8,) if fmt == "fp4" else (FP8,))
    if k.dim() != 2 or k.shape[1] != cols:
        raise BadArgumentError(fn, "kv[0]", f"a 2-D (Nk, {cols}) tensor ({fmt} keys like q)", describe(k))
    nk = k.shape[0]
    need_dtype(fn, "kv[1]", k_sf, (torch.float32,) if fmt == "fp8" else (torch.int32,))
    need_shape(fn, "kv[1]", k_sf, (nk,))
    weights = _indexer_weights(fn, weights, (nq, h), out_dtype, device)
    ks = need_int_tensor(fn, "cu_seq_len_k_start", cu_seq_len_k_start)
    ke = need_int_tensor(fn, "cu_seq_len_k_end", cu_seq_len_k_end)
    need_shape(fn, "cu_seq_len_k_start", ks, (nq,))
    need_shape(fn, "cu_seq_len_k_end", ke, (nq,))
    for name, t in (("kv[0]", k), ("kv[1]", k_sf), ("cu_seq_len_k_start", ks), ("cu_seq_len_k_end", ke)):
        need_device(fn, name, t, device)
    compressed = 0 if max_seqlen_k is None else need_int(fn, "max_seqlen_k", max_seqlen_k)
    if schedule_meta is not None:
        need_tensor(fn, "schedule_meta", schedule_meta)

    stride = _logits_stride(align_up(compressed, SPLIT_KV) if compressed else nk + SPLIT_KV, out_dtype)
    if fmt == "fp8":
        return _ragged(values.to(torch.float32), k.to(torch.float32), k_sf, weights, ks, ke, compressed, stride,
                       out_dtype)
    assert q_sf is not None
    return _ragged(dequantize_mx(values, q_sf), dequantize_mx(k, k_sf), None, weights, ks, ke, compressed, stride,
                   out_dtype)


def fp8_fp4_paged_mqa_logits(q: tuple[Tensor, Tensor | None], kv_cache: Tensor, weights: Tensor, context_lens: Tensor,
                             block_table: Tensor, schedule_meta: Tensor | None, max_context_len: int,
                             logits_dtype: torch.dtype = torch.float32, indices: Tensor | None = None) -> Tensor:
    """Paged (decode / verify) indexer logits over FP8, MX FP8 or FP4 inputs, called like upstream DeepGEMM
    2.8.1's ``fp8_fp4_paged_mqa_logits`` (vLLM 0.34.0's vendored copy).

    * ``q = (values, scales)``: FP8 float8_e4m3fn ``(B, next_n, H, D)`` with ``None``; MX FP8 the same with int32
      ``(B, next_n, H)``; FP4 int8 ``(B, next_n, H, D/2)`` with int32 ``(B, next_n, H)`` (one UE8M0 exponent per
      32 values, D in 32, 64, 96, 128).
    * ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, width)``, per block the tokens' values then one 4-byte
      scale per token: FP8 ``D + 4`` with float32 scales (:func:`pack_kv_cache`), MX FP8 ``D + 4`` with int32
      UE8M0 scales (``pack_kv_cache(k, mx=True)``), FP4 ``D/2 + 4`` (:func:`dgcompat.reference.pack_fp4_kv_cache`,
      68 bytes for D = 128). The format follows ``q``'s.
    * ``weights``: float32 ``(B*next_n, H)``, or bfloat16 with ``logits_dtype=torch.bfloat16``.
    * ``context_lens``, ``block_table``, ``indices``: as :func:`fp8_paged_mqa_logits` (``(B,)``, ``(B, next_n)`` or
      ``(B*next_n, 1)`` lengths; ``indices`` None or int32 ``(B,)`` with next_n 1).
    * ``schedule_meta``: accepted and ignored (may be None).
    * ``logits_dtype``: torch.float32 or torch.bfloat16, the result's dtype.

    Returns ``(B*next_n, max_context_len)`` of ``logits_dtype``: ``sum_h weights[row, h] * relu(q[b, j, h] . k[p])``
    with q and k dequantized (FP8 form: ``k_scale[p] * sum_h weights[row, h] * relu(q . k_fp8[p])``) at visible
    positions, ``-inf`` elsewhere. The row stride is the kernel's ``align(align(max_context_len, 256), 1024 /
    itemsize)``.

    How the reference reduces: in float32 throughout, rounded once to ``logits_dtype`` (the module docstring
    says how, and how to compare with the SM100 kernels).
    """
    fn = "fp8_fp4_paged_mqa_logits"
    out_dtype = _logits_dtype(fn, logits_dtype)
    values, q_sf, fmt, dim = _indexer_q(fn, q, 4)
    b, next_n, h = values.shape[0], values.shape[1], values.shape[2]
    rows = b * next_n
    device = values.device
    kv_cache = need_tensor(fn, "kv_cache", kv_cache)
    need_dtype(fn, "kv_cache", kv_cache, (torch.uint8,))
    width = (dim // 2 if fmt == "fp4" else dim) + 4
    if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] != width:
        raise BadArgumentError(fn, "kv_cache", f"a (num_blocks, block_kv, 1, {width}) tensor ({fmt}, D = {dim})",
                               describe(kv_cache))
    nb, bkv = kv_cache.shape[0], kv_cache.shape[1]
    weights = _indexer_weights(fn, weights, (rows, h), out_dtype, device)
    context_lens = need_int_tensor(fn, "context_lens", context_lens)
    block_table = need_int_tensor(fn, "block_table", block_table)
    if block_table.dim() != 2 or block_table.shape[0] not in (b, rows):
        raise BadArgumentError(fn, "block_table", f"a ({b}, max_blocks) or ({rows}, max_blocks) tensor", describe(block_table))
    for name, t in (("kv_cache", kv_cache), ("context_lens", context_lens), ("block_table", block_table)):
        need_device(fn, name, t, device)
    need_int(fn, "max_context_len", max_context_len)
    if schedule_meta is not None:
        need_tensor(fn, "schedule_meta", schedule_meta)
    if indices is not None:
        _need_varlen(fn, indices, b, next_n, device)

    gather: Gather
    if fmt == "fp8":
        fp8_values, scales = unpack_kv_cache(kv_cache)
        raw = fp8_values.view(torch.uint8)

        def gather(blocks: Tensor, slots: Tensor) -> tuple[Tensor, Tensor | None]:
            return raw[blocks, slots].view(FP8).to(torch.float32), scales[blocks, slots]

        qf = values.to(torch.float32)
    else:
        if fmt == "fp4":
            kv_values, sf = unpack_fp4_kv_cache(kv_cache)
            kv_raw = kv_values
        else:
            mx_values, sf = unpack_kv_cache(kv_cache, mx=True)
            kv_raw = mx_values.view(torch.uint8)
        fp4 = fmt == "fp4"

        def gather(blocks: Tensor, slots: Tensor) -> tuple[Tensor, Tensor | None]:
            picked = kv_raw[blocks, slots]
            return dequantize_mx(picked if fp4 else picked.view(FP8), sf[blocks, slots]), None

        assert q_sf is not None
        qf = dequantize_mx(values, q_sf)
    stride = _logits_stride(align_up(max_context_len, SPLIT_KV), out_dtype)
    return _paged(fn, qf, gather, weights, context_lens, block_table, nb, bkv, max_context_len, stride, out_dtype)


# ---------------------------------------------------------------------------------------------
# paged MQA schedule


def _need_varlen(fn: str, indices: object, rows: int, next_n: int, device: torch.device) -> None:
    ix = need_int_tensor(fn, "indices", indices)
    if next_n != 1 or ix.dim() != 1 or ix.shape[0] != rows:
        raise BadArgumentError(fn, "indices", f"an int32 ({rows},) tensor with next_n == 1", describe(ix))
    need_device(fn, "indices", ix, device)


def _schedule_lengths(fn: str, context_lens: object) -> tuple[Tensor, int]:
    """(per-sequence scheduled length (int64, (B,)), number of next_n atoms per sequence)."""
    ctx = need_int_tensor(fn, "context_lens", context_lens)
    if ctx.dim() == 1:
        lens, next_n = ctx.to(torch.int64), 1
    elif ctx.dim() == 2 and ctx.shape[1] >= 1:
        lens, next_n = ctx[:, -1].to(torch.int64), ctx.shape[1]
    else:
        raise BadArgumentError(fn, "context_lens", "a 1-D (B,) or 2-D (B, n) tensor with n >= 1", describe(ctx))
    if lens.numel() and bool((lens < 0).any()):
        raise BadArgumentError(fn, "context_lens", "non-negative lengths", f"minimum {int(lens.min())}")
    atom = 2 if next_n >= 2 else 1
    return lens, ceil_div(next_n, atom)


def get_paged_mqa_logits_metadata(
    context_lens: Tensor, block_kv: int, num_sms: int, indices: Tensor | None = None, *, balance: Balance = "tail"
) -> Tensor:
    """Per-SM work split of the SM90 paged MQA logits kernel.

    ``context_lens``: int32 ``(B,)`` or ``(B, n)`` (only the last column is read, as in the
    kernel). ``block_kv`` must divide :data:`SPLIT_KV` (256). Returns int32 ``(num_sms + 1, 2)``
    on ``context_lens``' device: row ``s`` is the ``(q_atom_idx, kv_split_idx)`` where SM ``s``
    starts, row ``num_sms`` the end ``(B * num_atoms, 0)``.

    Algorithm (``smxx_paged_mqa_logits_metadata``, sgl-deep-gemm 0.0.1 - 0.1.3
    ``scheduler/paged_mqa_logits.cuh``; ``sm90_paged_mqa_logits_metadata``, sgl-deep-gemm 0.1.4 -
    0.2.5 ``scheduler/sm90_paged_mqa_logits.cuh`` and upstream DeepGEMM ``88965b0``+; upstream
    ``v2.1.0`` ``impls/sm90_fp8_paged_mqa_logits.cuh`` for the 1-D form):

    1. ``len[b]`` = ``ctx[b]`` (1-D) or ``ctx[b, n-1]`` (2-D); ``segs[b] = ceil(len[b] / 256)``.
    2. Next-n atoms: ``atom = 2 if n >= 2 else 1``, ``num_atoms = ceil(n / atom)`` (1 for 1-D);
       every atom of a sequence carries that sequence's ``segs`` units.
    3. ``total = sum(segs) * num_atoms``; ``q, r = divmod(total, num_sms)``.
    4. Start unit of SM ``s``: ``balance="tail"`` (0.1.4+ and upstream ``88965b0``+: the last
       ``r`` SMs take one extra unit) ``s*q + max(0, s - (num_sms - r))``; ``balance="head"``
       (0.0.1 - 0.1.3 and upstream ``v2.1.0`` - ``891d57b``: the first ``r`` SMs take it)
       ``s*q + min(s, r)``.
    5. Units are ordered by sequence, then atom, then split. For start ``w``: ``b`` = first
       sequence with ``prefix_segs[b] * num_atoms > w``; ``off = w - prefix_segs[b-1] * num_atoms``;
       row = ``(b * num_atoms + off // segs[b], off % segs[b])``; ``w == total`` gives the end row.

    Not reproduced: the SM100 schedulers of sgl-deep-gemm 0.1.4+ (per-request, ``BLOCK_Q``-based)
    and the varlen (``indices``) pairing (``indices`` is checked, and the plain split returned).
    """
    fn = "get_paged_mqa_logits_metadata"
    lens, num_atoms = _schedule_lengths(fn, context_lens)
    if indices is not None:
        # The varlen work split (paired rows) is not reproduced; the plain split is a valid schedule.
        _need_varlen(fn, indices, lens.shape[0], num_atoms, lens.device)
    need_int(fn, "block_kv", block_kv, minimum=1)
    if SPLIT_KV % block_kv != 0:
        raise BadArgumentError(fn, "block_kv", f"a divisor of {SPLIT_KV}", repr(block_kv))
    need_int(fn, "num_sms", num_sms, minimum=1)
    if balance not in ("tail", "head"):
        raise BadArgumentError(fn, "balance", "'tail' or 'head'", repr(balance))
    device = lens.device
    batch = lens.shape[0]
    if batch == 0:
        return torch.zeros((num_sms + 1, 2), dtype=torch.int32, device=device)
    segs = (lens + SPLIT_KV - 1) // SPLIT_KV
    prefix = torch.cumsum(segs, 0) * num_atoms  # inclusive, in units
    total = int(prefix[-1])
    q, r = divmod(total, num_sms)
    s = torch.arange(num_sms + 1, dtype=torch.int64, device=device)
    starts = s * q + (s - (num_sms - r)).clamp(min=0) if balance == "tail" else s * q + s.clamp(max=r)
    seq = torch.searchsorted(prefix.contiguous(), starts, right=True)
    inside = seq < batch
    seq_c = seq.clamp(max=batch - 1)
    before = torch.where(seq_c > 0, prefix[(seq_c - 1).clamp(min=0)], 0)
    seg_q = segs[seq_c].clamp(min=1)
    off = starts - before
    q_atom = torch.where(inside, seq_c * num_atoms + off // seg_q, batch * num_atoms)
    kv_split = torch.where(inside, off % seg_q, 0)
    return torch.stack([q_atom, kv_split], dim=1).to(torch.int32)


def paged_schedule_matches(schedule_meta: Tensor, context_lens: Tensor, block_kv: int, num_sms: int, *,
                           balance: Balance | None = None) -> bool:
    """True when ``schedule_meta`` is the schedule of ``context_lens`` for ``num_sms`` SMs.

    Recomputes :func:`get_paged_mqa_logits_metadata` and compares exactly (shape and values). With
    ``balance=None`` either remainder placement is accepted (they differ between releases). A
    mismatch means the launch could read past its work list and never finish.
    """
    fn = "paged_schedule_matches"
    meta = need_tensor(fn, "schedule_meta", schedule_meta)
    if tuple(meta.shape) != (num_sms + 1, 2) or meta.dtype.is_floating_point:
        return False
    got = meta.to(device="cpu", dtype=torch.int64)
    options: tuple[Balance, ...] = ("tail", "head") if balance is None else (balance,)
    for option in options:
        want = get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, balance=option)
        if torch.equal(want.to(device="cpu", dtype=torch.int64), got):
            return True
    return False
