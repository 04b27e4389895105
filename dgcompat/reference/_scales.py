"""Scale factors: TMA alignment, MN-major layouts, UE8M0 packing, the layout transform, FP8 casts and dequantization."""

from __future__ import annotations

import torch
from torch import Tensor

from .. import _math
from ..errors import BadArgumentError
from ._common import FP8
from ._common import FP8_MAX
from ._common import Recipe
from ._common import align_up
from ._common import ceil_div
from ._common import describe
from ._common import need_device
from ._common import need_dtype
from ._common import need_float
from ._common import need_int
from ._common import need_tensor

__all__ = ["ceil_to_ue8m0", "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor", "transform_sf_into_required_layout", "transform_scale_ue8m0", "cast_groups", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "dequant", "dequantize_fp8"]



def ceil_to_ue8m0(x: Tensor) -> Tensor:
    """Scales rounded up to the powers of two a UE8M0 byte holds (float32, ``x``'s shape): see
    :func:`dgcompat._math.ceil_to_ue8m0`."""
    if not isinstance(x, Tensor) or not x.dtype.is_floating_point:
        raise BadArgumentError("ceil_to_ue8m0", "x", "a floating-point tensor", describe(x))
    return _math.ceil_to_ue8m0(x)


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round ``x`` elements up to a whole number of 16-byte TMA units.

    ``element_size`` is in bytes and must divide 16. Returns ``ceil(x / a) * a`` with
    ``a = 16 // element_size``.
    """
    fn = "get_tma_aligned_size"
    need_int(fn, "x", x)
    need_int(fn, "element_size", element_size, minimum=1)
    if 16 % element_size != 0:
        raise BadArgumentError(fn, "element_size", "a divisor of 16 (1, 2, 4, 8 or 16)", repr(element_size))
    return align_up(x, 16 // element_size)


def _mn_major_empty(
    groups: int | None, mn: int, cols: int, dtype: torch.dtype, device: torch.device
) -> Tensor:
    """Zero-filled padded buffer viewed MN-major with TMA-aligned strides."""
    aligned_mn = get_tma_aligned_size(mn, torch.empty((), dtype=dtype).element_size())
    n_groups = 1 if groups is None else groups
    storage = torch.zeros(n_groups * cols * aligned_mn, dtype=dtype, device=device)
    if groups is None:
        return torch.as_strided(storage, (mn, cols), (1, aligned_mn))
    return torch.as_strided(storage, (groups, mn, cols), (cols * aligned_mn, 1, aligned_mn))


def _has_mn_major_tma_strides(sf: Tensor) -> bool:
    mn, cols = sf.shape[-2], sf.shape[-1]
    aligned_mn = get_tma_aligned_size(mn, sf.element_size())
    if sf.stride(-2) != 1 and mn > 1:
        return False
    if sf.stride(-1) != aligned_mn:
        return False
    return sf.dim() == 2 or sf.stride(0) == aligned_mn * cols


def _check_sf_rank(fn: str, sf: Tensor) -> None:
    if sf.dim() not in (2, 3):
        raise BadArgumentError(fn, "sf", "a 2-D (mn, k) or 3-D (groups, mn, k) tensor", describe(sf))


def get_mn_major_tma_aligned_tensor(sf: Tensor) -> Tensor:
    """Return float32 scales with the same shape and values, MN-major and TMA-aligned.

    ``sf``: float32 ``(mn, k)`` or ``(g, mn, k)``. Result strides are ``(1, aligned_mn)`` or
    ``(k * aligned_mn, 1, aligned_mn)`` with ``aligned_mn = get_tma_aligned_size(mn, 4)``, over a
    zero-padded buffer. An input that already has these strides is returned as is.
    """
    fn = "get_mn_major_tma_aligned_tensor"
    sf = need_tensor(fn, "sf", sf)
    _check_sf_rank(fn, sf)
    need_dtype(fn, "sf", sf, (torch.float32,))
    if _has_mn_major_tma_strides(sf):
        return sf
    groups = None if sf.dim() == 2 else sf.shape[0]
    out = _mn_major_empty(groups, sf.shape[-2], sf.shape[-1], torch.float32, sf.device)
    out.copy_(sf)
    return out


def _pack_ue8m0_bytes(sf: Tensor) -> Tensor:
    """float32 (..., mn, k) -> int32 (..., mn, ceil(k/4)), contiguous, exponent bytes only."""
    k = sf.shape[-1]
    exps = ((sf.contiguous().view(torch.int32) >> 23) & 0xFF).to(torch.uint8)
    pad = align_up(k, 4) - k
    if pad:
        exps = torch.nn.functional.pad(exps, (0, pad))
    # 4 consecutive bytes -> one little-endian int32, k-block 4*i in the low byte
    return exps.contiguous().view(torch.int32)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: Tensor) -> Tensor:
    """Pack float32 scales into UE8M0 bytes, four per int32, MN-major and TMA-aligned.

    ``sf``: float32 ``(mn, k)`` or ``(g, mn, k)`` (normally powers of two; only the exponent byte
    ``(bits >> 23) & 0xff`` of each value is kept, mantissa bits are dropped). Returns int32
    ``(mn, ceil(k/4))`` / ``(g, mn, ceil(k/4))`` with strides ``(1, aligned_mn)`` /
    ``(ceil(k/4) * aligned_mn, 1, aligned_mn)``, ``aligned_mn = get_tma_aligned_size(mn, 4)``,
    also when ``ceil(k/4) == 1``. Byte ``j`` (from the least significant) of element ``i`` holds
    k-index ``4*i + j``; padding bytes are zero.
    """
    fn = "get_mn_major_tma_aligned_packed_ue8m0_tensor"
    sf = need_tensor(fn, "sf", sf)
    _check_sf_rank(fn, sf)
    need_dtype(fn, "sf", sf, (torch.float32,))
    packed = _pack_ue8m0_bytes(sf)
    groups = None if sf.dim() == 2 else sf.shape[0]
    out = _mn_major_empty(groups, sf.shape[-2], packed.shape[-1], torch.int32, sf.device)
    out.copy_(packed)
    return out


def _unpack_ue8m0(sf: Tensor, num_k_blocks: int) -> Tensor:
    """int32 packed UE8M0 (..., ceil(nk/4)) -> float32 (..., nk) powers of two."""
    shifts = torch.tensor([0, 8, 16, 24], dtype=torch.int32, device=sf.device)
    exps = (sf.unsqueeze(-1) >> shifts) & 0xFF
    exps = exps.reshape(*sf.shape[:-1], sf.shape[-1] * 4)[..., :num_k_blocks]
    return (exps.to(torch.int32) << 23).contiguous().view(torch.float32)


def _parse_recipe(fn: str, recipe: object, is_sfa: bool | None) -> tuple[int, int]:
    """Return (gran_mn, gran_k) of a transform recipe."""
    if is_sfa is not None and not isinstance(is_sfa, bool):
        raise BadArgumentError(fn, "is_sfa", "None, True or False", describe(is_sfa))
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise BadArgumentError(fn, "recipe", "a (gran_m, gran_n, gran_k) or (gran_mn, gran_k) tuple", describe(recipe))
    for v in recipe:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise BadArgumentError(fn, "recipe", "positive ints", repr(recipe))
    if len(recipe) == 3:
        if is_sfa is None:
            raise BadArgumentError(fn, "is_sfa", "True or False with a 3-element recipe", "None")
        return (int(recipe[0]) if is_sfa else int(recipe[1])), int(recipe[2])
    if is_sfa is not None:
        raise BadArgumentError(fn, "is_sfa", "None with a 2-element recipe", repr(is_sfa))
    return int(recipe[0]), int(recipe[1])


def _broadcast_rows(sf: Tensor, mn: int, gran_mn: int) -> Tensor:
    """Expand per-``gran_mn``-block scales along MN to one row per MN index."""
    if gran_mn == 1 or sf.shape[-2] == mn:
        return sf
    idx = torch.arange(mn, device=sf.device) // gran_mn
    return sf.index_select(-2, idx)


def transform_sf_into_required_layout(sf: Tensor, mn: int, k: int, recipe: Recipe, num_groups: int | None = None,
                                      is_sfa: bool | None = None, disable_ue8m0_cast: bool = False, *,
                                      use_ue8m0: bool = False) -> Tensor:
    """Bring scale factors into the layout deep_gemm's GEMMs consume.

    ``sf``: float32 ``(ceil(mn/gran_mn), ceil(k/gran_k))`` or int32 packed UE8M0
    ``(mn, ceil(k/(4*gran_k)))``; with ``num_groups`` a leading ``num_groups`` dimension.
    ``recipe``: ``(gran_m, gran_n, gran_k)`` with ``is_sfa`` (MN granularity ``gran_m`` for SFA,
    ``gran_n`` for SFB), or ``(gran_mn, gran_k)`` without ``is_sfa``. A float32 ``sf`` with
    ``ceil(mn/128)`` rows is also accepted where the recipe asks for granularity 1 (it is then
    broadcast along MN).

    ``disable_ue8m0_cast`` is upstream's flag: accepted (a no-op) on the float32 path, refused with
    ``use_ue8m0`` (the UE8M0 path asserts it is False).

    Returns:

    * ``use_ue8m0=False``, float32 at granularity 1: float32 MN-major TMA-aligned
      (:func:`get_mn_major_tma_aligned_tensor`).
    * ``use_ue8m0=False``, float32 at a coarser MN granularity (the SM90 SFB case): the scales
      unchanged (made contiguous unless already K- or MN-contiguous), as deep_gemm does.
    * ``use_ue8m0=True``, float32: broadcast to one row per MN index, rounded with
      :func:`ceil_to_ue8m0`, then packed (:func:`get_mn_major_tma_aligned_packed_ue8m0_tensor`).
    * int32 input (already packed, granularity 1): the same values, MN-major TMA-aligned.
    """
    fn = "transform_sf_into_required_layout"
    sf = need_tensor(fn, "sf", sf)
    if not isinstance(disable_ue8m0_cast, bool):
        raise BadArgumentError(fn, "disable_ue8m0_cast", "a bool", describe(disable_ue8m0_cast))
    if use_ue8m0 and disable_ue8m0_cast:
        # The UE8M0 (SM100) path asserts `not disable_ue8m0_cast`.
        raise BadArgumentError(fn, "disable_ue8m0_cast", "False where scales are packed as UE8M0", "True")
    need_int(fn, "mn", mn)
    need_int(fn, "k", k)
    gran_mn, gran_k = _parse_recipe(fn, recipe, is_sfa)
    if num_groups is not None:
        need_int(fn, "num_groups", num_groups, minimum=1)
    want_dim = 2 if num_groups is None else 3
    if sf.dim() != want_dim:
        raise BadArgumentError(fn, "sf", f"a {want_dim}-D tensor (num_groups={num_groups})", describe(sf))
    if num_groups is not None and sf.shape[0] != num_groups:
        raise BadArgumentError(fn, "sf", f"{num_groups} groups in dim 0", describe(sf))
    need_dtype(fn, "sf", sf, (torch.float32, torch.int32))

    if sf.dtype == torch.int32:
        if gran_mn != 1 or sf.shape[-2] != mn or sf.shape[-1] != ceil_div(k, gran_k * 4):
            lead = () if num_groups is None else (num_groups,)
            raise BadArgumentError(
                fn, "sf", f"packed UE8M0 int32 of shape {lead + (mn, ceil_div(k, gran_k * 4))} at MN granularity 1",
                f"{describe(sf)} with recipe {tuple(recipe)}",
            )
        if _has_mn_major_tma_strides(sf):
            return sf
        out = _mn_major_empty(num_groups, mn, sf.shape[-1], torch.int32, sf.device)
        out.copy_(sf)
        return out

    sf_k = ceil_div(k, gran_k)
    rows = sf.shape[-2]
    if rows == ceil_div(mn, gran_mn):
        eff_gran = gran_mn
    elif gran_mn == 1 and rows == ceil_div(mn, 128):
        eff_gran = 128
    else:
        raise BadArgumentError(
            fn, "sf", f"{ceil_div(mn, gran_mn)} rows (mn={mn}, MN granularity {gran_mn})", describe(sf)
        )
    if sf.shape[-1] != sf_k:
        raise BadArgumentError(fn, "sf", f"{sf_k} columns (k={k}, K granularity {gran_k})", describe(sf))

    if use_ue8m0:
        full = _broadcast_rows(sf, mn, eff_gran)
        return get_mn_major_tma_aligned_packed_ue8m0_tensor(ceil_to_ue8m0(full))
    if gran_mn == 1:
        return get_mn_major_tma_aligned_tensor(_broadcast_rows(sf, mn, eff_gran))
    if sf.is_contiguous() or sf.transpose(-1, -2).is_contiguous():
        return sf
    return sf.contiguous()


def transform_scale_ue8m0(sf: Tensor, mn: int) -> Tensor:
    """Broadcast per-128-block scales along MN, round them to UE8M0 and pack them.

    ``sf``: float32 ``(ceil(mn/128), k)`` or ``(g, ceil(mn/128), k)``. Returns int32
    ``(mn, ceil(k/4))`` / ``(g, mn, ceil(k/4))``, MN-major TMA-aligned, as
    :func:`get_mn_major_tma_aligned_packed_ue8m0_tensor`.
    """
    fn = "transform_scale_ue8m0"
    sf = need_tensor(fn, "sf", sf)
    _check_sf_rank(fn, sf)
    need_dtype(fn, "sf", sf, (torch.float32,))
    need_int(fn, "mn", mn)
    if sf.shape[-2] != ceil_div(mn, 128):
        raise BadArgumentError(fn, "sf", f"{ceil_div(mn, 128)} rows (ceil(mn/128), mn={mn})", describe(sf))
    return get_mn_major_tma_aligned_packed_ue8m0_tensor(ceil_to_ue8m0(_broadcast_rows(sf, mn, 128)))


# ---------------------------------------------------------------------------------------------
# quantization


def cast_groups(x: Tensor, sf: Tensor) -> Tensor:
    return (x.to(torch.float32) * (1.0 / sf)).to(FP8)


def _cast_input(fn: str, x: Tensor, gran_k: int, dims: str) -> Tensor:
    """The checked input of a per-group FP8 cast: ``x`` a 2-D float tensor (``dims`` names its axes in the
    message), ``gran_k`` a positive int."""
    x = need_tensor(fn, "x", x)
    need_float(fn, "x", x)
    need_int(fn, "gran_k", gran_k, minimum=1)
    if x.dim() != 2:
        raise BadArgumentError(fn, "x", f"a 2-D {dims} tensor", describe(x))
    return x


def per_token_cast_to_fp8(x: Tensor, *, use_ue8m0: bool = False, gran_k: int = 128) -> tuple[Tensor, Tensor]:
    """Quantize per 1 x ``gran_k`` group.

    ``x``: ``(m, k)`` bfloat16/float16/float32 (``k`` not a multiple of ``gran_k`` is zero-padded
    internally). Returns ``(x_fp8 (m, k) float8_e4m3fn, sf (m, ceil(k/gran_k)) float32)`` with
    ``sf = amax.clamp(1e-4) / 448`` (rounded up to a power of two when ``use_ue8m0``) and
    ``x ~= x_fp8 * sf`` per group.
    """
    x = _cast_input("per_token_cast_to_fp8", x, gran_k, "(m, k)")
    m, k = x.shape
    padded_k = align_up(k, gran_k)
    xp = torch.nn.functional.pad(x.to(torch.float32), (0, padded_k - k)).view(m, padded_k // gran_k, gran_k)
    sf = xp.abs().amax(dim=2).clamp(min=1e-4) / FP8_MAX
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    q = cast_groups(xp, sf.unsqueeze(2)).view(m, padded_k)[:, :k].contiguous()
    return q, sf


def per_block_cast_to_fp8(x: Tensor, *, use_ue8m0: bool = False, gran_k: int = 128) -> tuple[Tensor, Tensor]:
    """Quantize per 128 x ``gran_k`` block.

    ``x``: ``(n, k)`` float tensor (both dims zero-padded internally). Returns
    ``(x_fp8 (n, k) float8_e4m3fn, sf (ceil(n/128), ceil(k/gran_k)) float32)``,
    ``sf = amax.clamp(1e-4) / 448`` per block (power of two when ``use_ue8m0``).
    """
    x = _cast_input("per_block_cast_to_fp8", x, gran_k, "(n, k)")
    n, k = x.shape
    pn, pk = align_up(n, 128), align_up(k, gran_k)
    xp = torch.nn.functional.pad(x.to(torch.float32), (0, pk - k, 0, pn - n))
    xv = xp.view(pn // 128, 128, pk // gran_k, gran_k)
    sf = xv.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4) / FP8_MAX
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    q = cast_groups(xv, sf).view(pn, pk)[:n, :k].contiguous()
    return q, sf.view(pn // 128, pk // gran_k)


def dequant(fn: str, name: str, x: Tensor, sf: Tensor, *, gran_mn: int | None, gran_k: int,
            strict_gran: bool) -> Tensor:
    """Dequantize FP8 ``x`` (.., rows, k) with float32 or packed-UE8M0 int32 scales.

    Row granularity: ``sf.shape[-2] == rows`` means per row; ``== ceil(rows/gran_mn)`` means
    blocks of ``gran_mn`` (128 when ``gran_mn`` is None). With ``strict_gran`` only
    ``ceil(rows/gran_mn)`` is accepted.
    """
    sf_name = f"{name}[1]" if name else "sf"
    if sf.dim() != x.dim() or sf.shape[:-2] != x.shape[:-2]:
        raise BadArgumentError(fn, sf_name, f"a {x.dim()}-D tensor matching leading dims {tuple(x.shape[:-2])}", describe(sf))
    rows, k = x.shape[-2], x.shape[-1]
    nk = ceil_div(k, gran_k)
    if sf.dtype == torch.float32:
        if sf.shape[-1] != nk:
            raise BadArgumentError(fn, sf_name, f"{nk} float32 columns (ceil(k/{gran_k}), k={k})", describe(sf))
        sf32 = sf
    elif sf.dtype == torch.int32:
        pk = ceil_div(nk, 4)
        if sf.shape[-1] != pk:
            raise BadArgumentError(fn, sf_name, f"{pk} packed UE8M0 int32 columns (ceil(k/{4 * gran_k}), k={k})", describe(sf))
        sf32 = _unpack_ue8m0(sf, nk)
    else:
        raise BadArgumentError(fn, sf_name, "dtype torch.float32 or torch.int32 (packed UE8M0)", describe(sf))

    gran = 128 if gran_mn is None else gran_mn
    sf_rows = sf.shape[-2]
    if strict_gran:
        if sf_rows != ceil_div(rows, gran):
            raise BadArgumentError(fn, sf_name, f"{ceil_div(rows, gran)} rows (MN granularity {gran}, rows={rows})", describe(sf))
    elif sf_rows != rows and sf_rows != ceil_div(rows, gran):
        raise BadArgumentError(
            fn, sf_name, f"{rows} rows (per row) or {ceil_div(rows, gran)} rows (per {gran}-block)", describe(sf)
        )
    if sf_rows != rows:
        sf32 = sf32.index_select(-2, torch.arange(rows, device=sf.device) // gran)
    if gran_k != 1:
        sf32 = sf32.index_select(-1, torch.arange(k, device=sf.device) // gran_k)
    return x.to(torch.float32) * sf32


def dequantize_fp8(x_fp8: Tensor, sf: Tensor, *, gran_mn: int, gran_k: int = 128) -> Tensor:
    """Inverse of the FP8 casts: ``x_fp8 * sf`` with ``sf`` expanded to ``x_fp8``'s shape.

    ``x_fp8``: ``(mn, k)`` or ``(g, mn, k)`` FP8 (any floating dtype is upcast). ``sf``: float32
    ``(.., mn or ceil(mn/gran_mn), ceil(k/gran_k))`` or packed UE8M0 int32
    ``(.., mn or ceil(mn/gran_mn), ceil(k/(4*gran_k)))``, any strides. Returns float32 of
    ``x_fp8``'s shape.
    """
    fn = "dequantize_fp8"
    x_fp8 = need_tensor(fn, "x_fp8", x_fp8)
    sf = need_tensor(fn, "sf", sf)
    need_float(fn, "x_fp8", x_fp8)
    if x_fp8.dim() not in (2, 3):
        raise BadArgumentError(fn, "x_fp8", "a 2-D or 3-D tensor", describe(x_fp8))
    need_int(fn, "gran_mn", gran_mn, minimum=1)
    need_int(fn, "gran_k", gran_k, minimum=1)
    need_device(fn, "sf", sf, x_fp8.device)
    return dequant(fn, "", x_fp8, sf, gran_mn=gran_mn, gran_k=gran_k, strict_gran=False)


