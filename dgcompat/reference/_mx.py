"""MX indexer inputs: FP4 (e2m1) values two per byte, UE8M0 exponents four per int32, MX FP8, the paged FP4 cache.

These are the formats DeepGEMM's FP4 / MX indexer kernels read (``fp8_fp4_mqa_logits`` and
``fp8_fp4_paged_mqa_logits`` with a ``q_sf``), and the helpers that produce them for tests and
engines' test code. Where each detail comes from:

* **e2m1 code** (4 bits): bit 3 is the sign, bits 0-2 index the magnitudes :data:`FP4_E2M1_VALUES`
  ``(0, 0.5, 1, 1.5, 2, 3, 4, 6)``; code 8 (-0) reads as 0. DeepGEMM ``deep_gemm/utils/math.py``
  ``_dequantize_from_fp4_e2m1`` (upstream ``54e2261`` and the copy vendored in vLLM 0.34.0).
* **rounding** to e2m1: to nearest, ties to the even code, values beyond 5 saturate at 6.
  ``_quantize_to_fp4_e2m1`` there (thresholds 0.25 down, 0.75 up, 1.25 down, 1.75 up, 2.5 down,
  3.5 up, 5.0 down), which ``_quantize_to_fp4_e2m1_rne`` states is ``cvt.rn.satfinite.e2m1x2.f32``.
  (SGLang 0.5.23's ``quantize_fp4_indexer_tensor`` rounds ties down unless ``rne=True``; the
  format is the same.)
* **nibble order**: value ``2i`` in the low nibble, ``2i + 1`` in the high nibble of byte ``i``.
  ``per_token_cast_to_fp4`` (``codes[..., 0] & 0x0F | (codes[..., 1] & 0x0F) << 4``) and
  ``cast_back_from_fp4`` (``unpacked[:, ::2] = packed & 0x0F``) there; SGLang 0.5.23
  ``quantize_fp4_indexer_row`` (``(code0 & 0x0F) | ((code1 & 0x0F) << 4)``, ``code0`` the even element).
* **scale groups**: one UE8M0 exponent per :data:`MX_GROUP` (32) consecutive values of a row, the
  scale ``2 ** (byte - 127)``. DeepGEMM ``tests/test_attention.py`` quantizes indexer Q and K with
  ``per_token_cast_to_fp4(..., use_ue8m0=True, gran_k=32, use_packed_ue8m0=True)``; vLLM 0.34.0
  ``MXFP4_BLOCK_SIZE = 32``; SGLang 0.5.23 ``GROUP_N=32``. The scale of a group is
  ``ceil_to_ue8m0(amax.clamp_min(1e-4) / 6)`` for FP4 and ``/ 448`` for FP8 (``per_token_cast_to_fp4``,
  ``per_token_cast_to_fp8(use_ue8m0=True)``), the values cast as ``x * (1 / scale)``.
* **int32 packing**: group ``g`` of a row in bits ``8g .. 8g + 7`` of one int32 (byte ``g`` in
  memory, little-endian). ``pack_ue8m0_to_int`` (``(x_int >> 23).to(torch.uint8).view(torch.int)``)
  and ``unpack_ue8m0_from_int`` there; SGLang ``exp0 | exp1 << 8 | exp2 << 16 | exp3 << 24``. One
  int32 per row, so a row has at most 4 groups (``D <= 128``); the bytes of absent groups hold 127
  (scale 1.0), as ``per_token_cast_to_fp4`` pads with ``value=1.0``; they are never read.
* **paged FP4 cache** (68 bytes per token for D = 128): uint8 ``(num_blocks, block_kv, 1, D/2 + 4)``;
  per block, ``block_kv * D/2`` value bytes (token ``t`` at ``[t*D/2, (t+1)*D/2)``), then
  ``block_kv`` int32 scales (token ``t`` at byte ``block_kv*D/2 + 4t``). ``kv_cache_cast_to_fp4`` in
  DeepGEMM's ``tests/test_attention.py``; the ``from_blob`` views of ``csrc/apis/attention.hpp``
  (``fp4_with_sf_bytes == head_dim / 2 + sizeof(int)``); SGLang 0.5.23 ``store_fp4_index_k_cache``
  (payload at ``page*stride + slot*64``, scale bytes at ``page_size*64 + slot*4``). The same
  per-block split as the FP8 cache of :func:`dgcompat.reference.pack_kv_cache`.
* **MX FP8**: FP8 values with the same int32 scales; in the paged cache the 4 scale bytes of a
  token are that int32 (vLLM 0.34.0 ``mqa_logits_use_mx_scales``: on SM100 "FP8 indexer K caches
  then store each token's power-of-two scale as four equal UE8M0 bytes instead of an fp32").

Every function here checks its arguments (:class:`~dgcompat.errors.BadArgumentError`) and works
on any device.
"""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _math
from ..errors import BadArgumentError
from ._common import FP8
from ._common import FP8_MAX
from ._common import describe
from ._common import need_dtype
from ._common import need_float
from ._common import need_tensor

__all__ = ["FP4_E2M1_VALUES", "FP4_MAX", "MX_GROUP", "MX_MAX_DIM", "cast_to_fp4", "cast_to_mxfp8", "unpack_fp4",
           "unpack_ue8m0_scales", "dequantize_mx", "pack_fp4_kv_cache", "unpack_fp4_kv_cache", "mx_dim",
           "mx_pack_scales"]

#: The e2m1 magnitudes, indexed by the low 3 bits of a code (bit 3 is the sign).
FP4_E2M1_VALUES: tuple[float, ...] = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)
FP4_MAX = 6.0
#: Values per UE8M0 scale.
MX_GROUP = 32
#: Values per row one int32 of four UE8M0 exponents can scale.
MX_MAX_DIM = 4 * MX_GROUP
_ONE = 127  # the UE8M0 byte of 1.0


def mx_dim(fn: str, name: str, dim: int) -> None:
    """Check that a row of ``dim`` values fits one int32 of scales (a multiple of 32, at most 128)."""
    if dim <= 0 or dim % MX_GROUP or dim > MX_MAX_DIM:
        raise BadArgumentError(fn, name, "rows of 32, 64, 96 or 128 values (one int32 of UE8M0 scales per row)",
                               f"{dim} values per row")


def _group_scales(fn: str, x: Tensor, fmax: float) -> tuple[Tensor, Tensor]:
    """``(x32 (..., G, 32), scale (..., G) float32 powers of two)`` of rows ``x (..., D)``, a float tensor (checked,
    as the argument ``x`` of ``fn``)."""
    x = need_tensor(fn, "x", x)
    need_float(fn, "x", x)
    if x.dim() < 1:
        raise BadArgumentError(fn, "x", "a tensor of rows (..., D)", describe(x))
    mx_dim(fn, "x", x.shape[-1])
    x32 = x.to(torch.float32).reshape(*x.shape[:-1], x.shape[-1] // MX_GROUP, MX_GROUP)
    amax = x32.abs().amax(dim=-1).clamp_min(1e-4)
    return x32, _math.ceil_to_ue8m0(amax / fmax)


def mx_pack_scales(scale: Tensor) -> Tensor:
    """float32 powers of two ``(..., G)`` (``G <= 4``) -> int32 ``(...)``: group ``g`` in bits ``8g .. 8g+7``,
    absent groups 127 (1.0). Only the exponent byte of each scale is kept."""
    exps = ((scale.to(torch.float32).contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.int32)
    groups = scale.shape[-1]
    if groups < 4:
        exps = torch.nn.functional.pad(exps, (0, 4 - groups), value=_ONE)
    shifts = torch.arange(0, 32, 8, dtype=torch.int32, device=scale.device)
    # the four bytes occupy disjoint bits: their sum is the bitwise or (wrapping into int32's sign bit)
    packed = (exps.to(torch.int64) << shifts.to(torch.int64)).sum(dim=-1)
    return torch.where(packed >= 2**31, packed - 2**32, packed).to(torch.int32)


def unpack_ue8m0_scales(sf: Tensor) -> Tensor:
    """int32 packed UE8M0 ``(...)`` -> float32 ``(..., 4)``: element ``g`` is ``2 ** (byte_g - 127)``, byte ``g`` =
    bits ``8g .. 8g+7`` (byte 0 gives 0, as DeepGEMM's ``unpack_ue8m0_from_int``)."""
    fn = "unpack_ue8m0_scales"
    sf = need_tensor(fn, "sf", sf)
    need_dtype(fn, "sf", sf, (torch.int32,))
    shifts = torch.arange(0, 32, 8, dtype=torch.int32, device=sf.device)
    exps = (sf.unsqueeze(-1) >> shifts) & 0xFF
    return (exps << 23).contiguous().view(torch.float32)


def _encode_e2m1(x: Tensor) -> Tensor:
    """float32 -> uint8 e2m1 codes (round to nearest, ties to even, saturating; -0 encodes as 0)."""
    ax = x.abs()
    code = torch.zeros(x.shape, dtype=torch.uint8, device=x.device)
    # ties at 0.25, 1.25, 2.5 and 5 go down, at 0.75, 1.75 and 3.5 up: always to the even code
    for boundary in (0.25, 1.25, 2.5, 5.0):
        code += (ax > boundary).to(torch.uint8)
    for boundary in (0.75, 1.75, 3.5):
        code += (ax >= boundary).to(torch.uint8)
    sign = (x < 0) & (code != 0)
    return code | (sign.to(torch.uint8) << 3)


def _pack_nibbles(codes: Tensor) -> Tensor:
    """uint8 codes ``(..., D)`` -> int8 ``(..., D/2)``: value ``2i`` in the low nibble of byte ``i``."""
    pairs = codes.reshape(*codes.shape[:-1], codes.shape[-1] // 2, 2)
    return ((pairs[..., 0] & 0x0F) | ((pairs[..., 1] & 0x0F) << 4)).view(torch.int8)


def unpack_fp4(values: Tensor) -> Tensor:
    """Packed e2m1 int8 (or uint8) ``(..., D/2)`` -> float32 ``(..., D)``, unscaled (``FP4_E2M1_VALUES`` with signs)."""
    fn = "unpack_fp4"
    values = need_tensor(fn, "values", values)
    need_dtype(fn, "values", values, (torch.int8, torch.uint8))
    raw = values.contiguous().view(torch.uint8)
    codes = torch.stack([raw & 0x0F, raw >> 4], dim=-1).reshape(*raw.shape[:-1], raw.shape[-1] * 2)
    table = torch.tensor(FP4_E2M1_VALUES, dtype=torch.float32, device=values.device)
    magnitude = table[(codes & 0x07).to(torch.int64)]
    return torch.where((codes & 0x08) != 0, -magnitude, magnitude) + 0.0  # + 0.0: -0 reads as 0


def cast_to_fp4(x: Tensor) -> tuple[Tensor, Tensor]:
    """Quantize rows to FP4 with one UE8M0 scale per 32 values (the indexer's FP4 Q and K).

    ``x``: float ``(..., D)`` with D in 32, 64, 96, 128. Returns ``(values int8 (..., D/2), scales int32 (...))``:
    per group of 32, ``scale = ceil_to_ue8m0(max(amax, 1e-4) / 6)`` and the values ``x * (1 / scale)`` rounded to
    e2m1 (nearest, ties to even, saturating), two per byte (value ``2i`` in the low nibble). ``scales`` holds
    the group exponents (group ``g`` in bits ``8g .. 8g+7``; 127 in the bytes of absent groups).
    ``dequantize_mx(*cast_to_fp4(x))`` is ``x`` rounded to FP4.
    """
    x32, scale = _group_scales("cast_to_fp4", x, FP4_MAX)
    codes = _encode_e2m1(x32 * (1.0 / scale).unsqueeze(-1)).reshape(x.shape)
    return _pack_nibbles(codes).contiguous(), mx_pack_scales(scale)


def cast_to_mxfp8(x: Tensor) -> tuple[Tensor, Tensor]:
    """Quantize rows to MX FP8: float8_e4m3fn values with one UE8M0 scale per 32 values.

    ``x``: float ``(..., D)`` with D in 32, 64, 96, 128. Returns ``(values float8_e4m3fn (..., D),
    scales int32 (...))``, ``scale = ceil_to_ue8m0(max(amax, 1e-4) / 448)`` per group of 32 and the values
    ``x * (1 / scale)``; ``scales`` packed as in :func:`cast_to_fp4`.
    """
    x32, scale = _group_scales("cast_to_mxfp8", x, FP8_MAX)
    values = (x32 * (1.0 / scale).unsqueeze(-1)).to(FP8).reshape(x.shape)
    return values.contiguous(), mx_pack_scales(scale)


def dequantize_mx(values: Tensor, sf: Tensor) -> Tensor:
    """MX values times their group scales: float32 ``(..., D)``.

    ``values``: float8_e4m3fn ``(..., D)`` (MX FP8) or int8 ``(..., D/2)`` (packed FP4); ``sf``: int32 ``(...)``
    (the leading dimensions of ``values``), one UE8M0 exponent per 32 values (D in 32, 64, 96, 128).
    """
    fn = "dequantize_mx"
    values = need_tensor(fn, "values", values)
    sf = need_tensor(fn, "sf", sf)
    need_dtype(fn, "values", values, (FP8, torch.int8))
    need_dtype(fn, "sf", sf, (torch.int32,))
    if values.dim() < 1 or tuple(sf.shape) != tuple(values.shape[:-1]):
        raise BadArgumentError(fn, "sf", f"shape {tuple(values.shape[:-1])} (values' leading dimensions)", describe(sf))
    if sf.device != values.device:
        raise BadArgumentError(fn, "sf", f"a tensor on {values.device}", describe(sf))
    x = unpack_fp4(values) if values.dtype == torch.int8 else values.to(torch.float32)
    dim = x.shape[-1]
    mx_dim(fn, "values", dim)
    groups = dim // MX_GROUP
    scale = unpack_ue8m0_scales(sf)[..., :groups]
    return (x.reshape(*x.shape[:-1], groups, MX_GROUP) * scale.unsqueeze(-1)).reshape(x.shape)


def _cache_input(fn: str, k: object) -> Tensor:
    k = need_tensor(fn, "k", k)
    need_float(fn, "k", k)
    if k.dim() == 4 and k.shape[2] == 1:
        k = k.squeeze(2)
    if k.dim() != 3:
        raise BadArgumentError(fn, "k", "a (num_blocks, block_kv, D) or (num_blocks, block_kv, 1, D) tensor", describe(k))
    return k


def pack_fp4_kv_cache(k: Tensor) -> Tensor:
    """Quantize a paged key cache into the indexer's FP4 layout (68 bytes per token for D = 128).

    ``k``: float ``(num_blocks, block_kv, D)`` or ``(num_blocks, block_kv, 1, D)``, D in 32, 64, 96, 128; each
    token is cast with :func:`cast_to_fp4`. Returns uint8 ``(num_blocks, block_kv, 1, D/2 + 4)``: per block,
    ``block_kv * D/2`` value bytes (token ``t`` at ``[t*D/2, (t+1)*D/2)``), then ``block_kv`` int32 scales.
    """
    fn = "pack_fp4_kv_cache"
    k = _cache_input(fn, k)
    nb, bkv, dim = k.shape
    mx_dim(fn, "k", dim)
    values, sf = cast_to_fp4(k)
    half = dim // 2
    fused = torch.empty((nb, bkv * (half + 4)), dtype=torch.uint8, device=k.device)
    fused[:, : bkv * half] = values.reshape(nb, bkv * half).view(torch.uint8)
    fused[:, bkv * half:] = sf.reshape(nb, bkv).contiguous().view(torch.uint8)
    return fused.view(nb, bkv, 1, half + 4)


def unpack_fp4_kv_cache(kv_cache: Tensor) -> tuple[Tensor, Tensor]:
    """Split an FP4 paged cache into ``(values int8 (num_blocks, block_kv, D/2), scales int32 (num_blocks, block_kv))``.

    ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, D/2 + 4)`` as built by :func:`pack_fp4_kv_cache` (any strides;
    each block is read in its logical byte order).
    """
    fn = "unpack_fp4_kv_cache"
    kv_cache = need_tensor(fn, "kv_cache", kv_cache)
    need_dtype(fn, "kv_cache", kv_cache, (torch.uint8,))
    if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] <= 4:
        raise BadArgumentError(fn, "kv_cache", "a (num_blocks, block_kv, 1, D/2 + 4) tensor with D > 0",
                               describe(kv_cache))
    nb, bkv, _, width = kv_cache.shape
    half = width - 4
    flat = kv_cache.reshape(nb, bkv * width)
    values = flat[:, : bkv * half].contiguous().view(torch.int8).view(nb, bkv, half)
    scales = flat[:, bkv * half:].contiguous().view(torch.int32)
    return values, scales
