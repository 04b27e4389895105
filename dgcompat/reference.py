"""Pure-torch reference implementations of deep_gemm's kernels.

This module is the numerical oracle of the conformance suite, the embedded backend used when no
deep_gemm is installed, and the compute engine behind CPU stand-ins for deep_gemm's native
functions. Every function works on CPU and CUDA tensors, accumulates in float32 and never imports
deep_gemm.

Conventions
-----------
* FP8 means ``torch.float8_e4m3fn``. Scale factors ("sf") are float32, or int32 holding four
  packed UE8M0 exponent bytes (the k-block ``4*i`` in the lowest byte).
* "MN-major, TMA-aligned" means the MN dimension has stride 1 and the K (scale) dimension has
  stride ``get_tma_aligned_size(mn, element_size)``; a leading group dimension has stride
  ``k * aligned_mn``. A size-1 trailing dimension keeps the stride ``aligned_mn``.
* GEMMs are ``NT``: ``d = a @ b.T (+ c)``, written into ``d`` in place.
* Bad input raises :class:`dgcompat.errors.BadArgumentError`.

Semantics verified in DeepGEMM's sources
----------------------------------------
(deepseek-ai/DeepGEMM at ``v2.1.0`` and ``54e2261``; sgl-project/DeepGEMM ``release/v0.1.0``..
``release/v0.1.2``, ``dev`` and ``main``; and the headers shipped inside the published
sgl-deep-gemm 0.0.1 - 0.2.5 wheels.)

* ``deep_gemm/utils/math.py``: ``ceil_to_ue8m0`` is exponent bit math with the biased exponent
  clamped to ``[1, 254]``; ``per_token_cast_to_fp8`` / ``per_block_cast_to_fp8`` use
  ``amax.clamp(1e-4) / 448`` per 1x128 / 128x128 group (padding with zeros) and quantize
  ``x * (1 / sf)``.
* ``csrc/utils/math.hpp`` ``get_tma_aligned_size``: ``align(x, 16 / element_size)``.
* ``csrc/jit_kernels/impls/smxx_layout.hpp``: ``get_mn_major_tma_aligned_tensor`` returns its
  input unchanged when it already has the target strides, else an ``empty_strided`` copy with
  strides ``(aligned_mn * k, 1, aligned_mn)``; the torch fallback of
  ``get_mn_major_tma_aligned_packed_ue8m0_tensor`` takes ``bits >> 23`` as a byte, zero-pads K to a
  multiple of 4 and views 4 bytes as one int32 (little-endian). The CUDA packer there ORs raw bits
  (mantissa leak for non-power-of-two input); this module masks the exponent byte instead.
* ``csrc/apis/layout.hpp`` ``transform_sf_into_required_layout``: a 3-tuple recipe needs
  ``is_sfa`` (MN granularity ``recipe[0]`` for SFA, ``recipe[1]`` for SFB), a 2-tuple recipe
  forbids it. FP32 with granularity 1 becomes MN-major TMA-aligned; FP32 with granularity 128 is
  returned as is on the FP32 (SM90) path; on the UE8M0 (SM100) path FP32 is broadcast along MN
  (``index_select(arange(mn) // gran_mn)``) and packed. ``csrc/utils/layout.hpp``
  ``check_sf_layout`` gives the accepted shapes.
* ``tests/test_attention.py`` (``ref_fp8_mqa_logits``): ``logits[i, j] = sum_h w[i, h] *
  relu(q[i, h] . k[j])`` with ``k`` dequantized (``k_fp8 * k_scale``), masked to
  ``ks[i] <= j < ke[i]``. The SM90 kernels (``sm90_fp8_mqa_logits.cuh``,
  ``sm90_fp8_paged_mqa_logits.cuh``) compute ``relu`` on the raw FP8 dot product, reduce the
  heads with the weights and multiply by the KV scale last; this module does the same, which
  equals the test formula for positive scales.
* ``max_seqlen_k > 0`` (``csrc/apis/attention.hpp`` + the kernel's ``kIsCompressedLogits`` store):
  the output is ``(Nq, max_seqlen_k)`` and column ``j`` of row ``i`` holds key ``ks[i] + j`` for
  ``j < ke[i] - ks[i]``; ``clean_logits`` is rejected in that mode.
* Paged cache packing (``kv_cache_cast_to_fp8`` in ``tests/test_attention.py``; ``from_blob``
  views in ``attention.hpp``): per block, ``block_kv * D`` FP8 bytes (token ``t`` at
  ``[t*D, (t+1)*D)``), then ``block_kv`` float32 scales; viewed as
  ``(num_blocks, block_kv, 1, D + 4)`` uint8; scale = ``amax.clamp(1e-4) / 448`` per token.
* ``context_lens`` (``ref_paged_mqa_logits`` and the masks in ``test_paged_mqa_logits``): 1-D
  ``(B,)``: row ``j`` sees ``[0, ctx[b] - next_n + j + 1)``; 2-D ``(B, next_n)``: row ``j`` sees
  ``[0, ctx[b, j])``; ``(B*next_n, 1)`` with ``q`` viewed ``(B*next_n, 1, H, D)`` is the same
  per-row form.
* Schedule (``smxx_paged_mqa_logits_metadata`` in ``deep_gemm/include/deep_gemm/scheduler/
  paged_mqa_logits.cuh`` of sgl 0.0.1 - 0.1.3, ``sm90_paged_mqa_logits.cuh`` of sgl 0.1.4 - 0.2.5
  and upstream ``88965b0``+, ``impls/sm90_fp8_paged_mqa_logits.cuh`` of upstream ``v2.1.0``); see
  :func:`get_paged_mqa_logits_metadata` for the algorithm.

Outputs of the logits functions hold ``-inf`` wherever the kernel would leave memory unwritten
(or write values that callers must ignore); callers must treat those entries as unspecified unless
``clean_logits=True`` was requested.
"""

from __future__ import annotations

from typing import Literal, Optional, Sequence, Tuple, Union

import torch
from torch import Tensor

from dgcompat import _device
from dgcompat.errors import BadArgumentError
from dgcompat.scales import ceil_to_ue8m0

__all__ = [
    "SPLIT_KV",
    "ceil_to_ue8m0",
    "get_tma_aligned_size",
    "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "transform_sf_into_required_layout",
    "transform_scale_ue8m0",
    "per_token_cast_to_fp8",
    "per_block_cast_to_fp8",
    "dequantize_fp8",
    "fp8_gemm_nt",
    "bf16_gemm_nt",
    "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_gemm_nt_masked",
    "m_grouped_bf16_gemm_nt_contiguous",
    "m_grouped_bf16_gemm_nt_masked",
    "fp8_mqa_logits",
    "fp8_paged_mqa_logits",
    "pack_kv_cache",
    "unpack_kv_cache",
    "get_paged_mqa_logits_metadata",
    "paged_schedule_matches",
]

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
#: KV positions per schedule work unit of the paged MQA kernels.
SPLIT_KV = 256
# Upper bound on the elements of one intermediate score tensor before the logits functions split
# their work into chunks (keeps the reference usable on long sequences).
_CHUNK_ELEMENTS = 1 << 24

Recipe = Union[Tuple[int, int, int], Tuple[int, int], Sequence[int]]
Balance = Literal["tail", "head"]


# ---------------------------------------------------------------------------------------------
# small helpers


def _ceil_div(x: int, y: int) -> int:
    return (x + y - 1) // y


def _align(x: int, y: int) -> int:
    return _ceil_div(x, y) * y


def _desc(t: object) -> str:
    if isinstance(t, Tensor):
        return f"Tensor(shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device})"
    return f"{type(t).__name__} {t!r}"


def _need_tensor(fn: str, name: str, t: object) -> Tensor:
    if not isinstance(t, Tensor):
        raise BadArgumentError(fn, name, "a torch.Tensor", _desc(t))
    return t


def _need_dtype(fn: str, name: str, t: Tensor, dtypes: Tuple[torch.dtype, ...]) -> None:
    if t.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise BadArgumentError(fn, name, f"dtype {want}", _desc(t))


def _need_int_tensor(fn: str, name: str, t: object) -> Tensor:
    # deep_gemm's kernels read these as int32; the reference holds callers to the same contract so
    # that code developed against it runs unchanged on the real kernels.
    t = _need_tensor(fn, name, t)
    if t.dtype != torch.int32:
        raise BadArgumentError(fn, name, "an int32 tensor", _desc(t))
    return t


def _need_int(fn: str, name: str, v: object, *, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadArgumentError(fn, name, f"an int >= {minimum}", _desc(v))
    if v < minimum:
        raise BadArgumentError(fn, name, f"an int >= {minimum}", repr(v))
    return v


def _need_shape(fn: str, name: str, t: Tensor, shape: Tuple[int, ...]) -> None:
    if tuple(t.shape) != shape:
        raise BadArgumentError(fn, name, f"shape {shape}", _desc(t))


def _need_device(fn: str, name: str, t: Tensor, device: torch.device) -> None:
    if t.device != device:
        raise BadArgumentError(fn, name, f"a tensor on {device}", _desc(t))


def _need_pair(fn: str, name: str, v: object) -> Tuple[Tensor, Tensor]:
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise BadArgumentError(fn, name, "a (data, scale) pair of tensors", _desc(v))
    return _need_tensor(fn, f"{name}[0]", v[0]), _need_tensor(fn, f"{name}[1]", v[1])


def _need_float(fn: str, name: str, t: Tensor) -> None:
    if not t.dtype.is_floating_point:
        raise BadArgumentError(fn, name, "a floating-point tensor", _desc(t))


# ---------------------------------------------------------------------------------------------
# scale factors and layouts


# --- runtime knobs (the reference keeps them as process state, like deep_gemm's native library) ---

#: Row alignment of the contiguous grouped layout (deep_gemm's value on SM90 and SM100).
MK_ALIGNMENT = 128
#: The SM count of the device the reference models when CUDA is not initialized (an H200's).
DEVICE_SMS = _device.MODEL_SMS
_RUNTIME: dict[str, Optional[int]] = {"num_sms": None, "pdl": 0}


def device_sms() -> int:
    """The device's SM count: the current CUDA device's once CUDA is initialized, else :data:`DEVICE_SMS`.

    Never initializes CUDA itself.
    """
    return _device.sm_count()


def get_num_sms() -> int:
    """SMs a launch would use: :func:`device_sms` unless :func:`set_num_sms` set fewer."""
    n = _RUNTIME["num_sms"]
    return device_sms() if n is None else n


def set_num_sms(new_num_sms: int) -> None:
    """Limit launches to ``new_num_sms`` SMs: ``1 <= new_num_sms <= device_sms()``, as deep_gemm asserts."""
    n = _need_int("set_num_sms", "new_num_sms", new_num_sms, minimum=1)
    limit = device_sms()
    if n > limit:
        raise BadArgumentError("set_num_sms", "new_num_sms", f"at most the device's {limit} SMs", repr(n))
    _RUNTIME["num_sms"] = n


def reset_runtime() -> None:
    """Forget :func:`set_num_sms` / :func:`set_pdl` (the process state a fresh deep_gemm starts with)."""
    _RUNTIME.update(num_sms=None, pdl=0)


def set_pdl(enable: bool) -> None:
    _RUNTIME["pdl"] = int(bool(enable))


def get_pdl() -> bool:
    return bool(_RUNTIME["pdl"])


def get_mk_alignment_for_contiguous_layout() -> int:
    return MK_ALIGNMENT


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """Round ``x`` elements up to a whole number of 16-byte TMA units.

    ``element_size`` is in bytes and must divide 16. Returns ``ceil(x / a) * a`` with
    ``a = 16 // element_size``.
    """
    fn = "get_tma_aligned_size"
    _need_int(fn, "x", x)
    _need_int(fn, "element_size", element_size, minimum=1)
    if 16 % element_size != 0:
        raise BadArgumentError(fn, "element_size", "a divisor of 16 (1, 2, 4, 8 or 16)", repr(element_size))
    return _align(x, 16 // element_size)


def _mn_major_empty(
    groups: Optional[int], mn: int, cols: int, dtype: torch.dtype, device: torch.device
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
        raise BadArgumentError(fn, "sf", "a 2-D (mn, k) or 3-D (groups, mn, k) tensor", _desc(sf))


def get_mn_major_tma_aligned_tensor(sf: Tensor) -> Tensor:
    """Return float32 scales with the same shape and values, MN-major and TMA-aligned.

    ``sf``: float32 ``(mn, k)`` or ``(g, mn, k)``. Result strides are ``(1, aligned_mn)`` or
    ``(k * aligned_mn, 1, aligned_mn)`` with ``aligned_mn = get_tma_aligned_size(mn, 4)``, over a
    zero-padded buffer. An input that already has these strides is returned as is.
    """
    fn = "get_mn_major_tma_aligned_tensor"
    sf = _need_tensor(fn, "sf", sf)
    _check_sf_rank(fn, sf)
    _need_dtype(fn, "sf", sf, (torch.float32,))
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
    pad = _align(k, 4) - k
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
    sf = _need_tensor(fn, "sf", sf)
    _check_sf_rank(fn, sf)
    _need_dtype(fn, "sf", sf, (torch.float32,))
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


def _parse_recipe(fn: str, recipe: object, is_sfa: Optional[bool]) -> Tuple[int, int]:
    """Return (gran_mn, gran_k) of a transform recipe."""
    if is_sfa is not None and not isinstance(is_sfa, bool):
        raise BadArgumentError(fn, "is_sfa", "None, True or False", _desc(is_sfa))
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise BadArgumentError(fn, "recipe", "a (gran_m, gran_n, gran_k) or (gran_mn, gran_k) tuple", _desc(recipe))
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


def transform_sf_into_required_layout(
    sf: Tensor,
    mn: int,
    k: int,
    recipe: Recipe,
    num_groups: Optional[int] = None,
    is_sfa: Optional[bool] = None,
    disable_ue8m0_cast: bool = False,
    *,
    use_ue8m0: bool = False,
) -> Tensor:
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
    sf = _need_tensor(fn, "sf", sf)
    if not isinstance(disable_ue8m0_cast, bool):
        raise BadArgumentError(fn, "disable_ue8m0_cast", "a bool", _desc(disable_ue8m0_cast))
    if use_ue8m0 and disable_ue8m0_cast:
        # The UE8M0 (SM100) path asserts `not disable_ue8m0_cast`.
        raise BadArgumentError(fn, "disable_ue8m0_cast", "False where scales are packed as UE8M0", "True")
    _need_int(fn, "mn", mn)
    _need_int(fn, "k", k)
    gran_mn, gran_k = _parse_recipe(fn, recipe, is_sfa)
    if num_groups is not None:
        _need_int(fn, "num_groups", num_groups, minimum=1)
    want_dim = 2 if num_groups is None else 3
    if sf.dim() != want_dim:
        raise BadArgumentError(fn, "sf", f"a {want_dim}-D tensor (num_groups={num_groups})", _desc(sf))
    if num_groups is not None and sf.shape[0] != num_groups:
        raise BadArgumentError(fn, "sf", f"{num_groups} groups in dim 0", _desc(sf))
    _need_dtype(fn, "sf", sf, (torch.float32, torch.int32))

    if sf.dtype == torch.int32:
        if gran_mn != 1 or sf.shape[-2] != mn or sf.shape[-1] != _ceil_div(k, gran_k * 4):
            lead = () if num_groups is None else (num_groups,)
            raise BadArgumentError(
                fn, "sf", f"packed UE8M0 int32 of shape {lead + (mn, _ceil_div(k, gran_k * 4))} at MN granularity 1",
                f"{_desc(sf)} with recipe {tuple(recipe)}",
            )
        if _has_mn_major_tma_strides(sf):
            return sf
        out = _mn_major_empty(num_groups, mn, sf.shape[-1], torch.int32, sf.device)
        out.copy_(sf)
        return out

    sf_k = _ceil_div(k, gran_k)
    rows = sf.shape[-2]
    if rows == _ceil_div(mn, gran_mn):
        eff_gran = gran_mn
    elif gran_mn == 1 and rows == _ceil_div(mn, 128):
        eff_gran = 128
    else:
        raise BadArgumentError(
            fn, "sf", f"{_ceil_div(mn, gran_mn)} rows (mn={mn}, MN granularity {gran_mn})", _desc(sf)
        )
    if sf.shape[-1] != sf_k:
        raise BadArgumentError(fn, "sf", f"{sf_k} columns (k={k}, K granularity {gran_k})", _desc(sf))

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
    sf = _need_tensor(fn, "sf", sf)
    _check_sf_rank(fn, sf)
    _need_dtype(fn, "sf", sf, (torch.float32,))
    _need_int(fn, "mn", mn)
    if sf.shape[-2] != _ceil_div(mn, 128):
        raise BadArgumentError(fn, "sf", f"{_ceil_div(mn, 128)} rows (ceil(mn/128), mn={mn})", _desc(sf))
    return get_mn_major_tma_aligned_packed_ue8m0_tensor(ceil_to_ue8m0(_broadcast_rows(sf, mn, 128)))


# ---------------------------------------------------------------------------------------------
# quantization


def _cast_groups(x: Tensor, sf: Tensor) -> Tensor:
    return (x.to(torch.float32) * (1.0 / sf)).to(FP8)


def per_token_cast_to_fp8(x: Tensor, *, use_ue8m0: bool = False, gran_k: int = 128) -> Tuple[Tensor, Tensor]:
    """Quantize per 1 x ``gran_k`` group.

    ``x``: ``(m, k)`` bfloat16/float16/float32 (``k`` not a multiple of ``gran_k`` is zero-padded
    internally). Returns ``(x_fp8 (m, k) float8_e4m3fn, sf (m, ceil(k/gran_k)) float32)`` with
    ``sf = amax.clamp(1e-4) / 448`` (rounded up to a power of two when ``use_ue8m0``) and
    ``x ~= x_fp8 * sf`` per group.
    """
    fn = "per_token_cast_to_fp8"
    x = _need_tensor(fn, "x", x)
    _need_float(fn, "x", x)
    _need_int(fn, "gran_k", gran_k, minimum=1)
    if x.dim() != 2:
        raise BadArgumentError(fn, "x", "a 2-D (m, k) tensor", _desc(x))
    m, k = x.shape
    padded_k = _align(k, gran_k)
    xp = torch.nn.functional.pad(x.to(torch.float32), (0, padded_k - k)).view(m, padded_k // gran_k, gran_k)
    sf = xp.abs().amax(dim=2).clamp(min=1e-4) / FP8_MAX
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    q = _cast_groups(xp, sf.unsqueeze(2)).view(m, padded_k)[:, :k].contiguous()
    return q, sf


def per_block_cast_to_fp8(x: Tensor, *, use_ue8m0: bool = False, gran_k: int = 128) -> Tuple[Tensor, Tensor]:
    """Quantize per 128 x ``gran_k`` block.

    ``x``: ``(n, k)`` float tensor (both dims zero-padded internally). Returns
    ``(x_fp8 (n, k) float8_e4m3fn, sf (ceil(n/128), ceil(k/gran_k)) float32)``,
    ``sf = amax.clamp(1e-4) / 448`` per block (power of two when ``use_ue8m0``).
    """
    fn = "per_block_cast_to_fp8"
    x = _need_tensor(fn, "x", x)
    _need_float(fn, "x", x)
    _need_int(fn, "gran_k", gran_k, minimum=1)
    if x.dim() != 2:
        raise BadArgumentError(fn, "x", "a 2-D (n, k) tensor", _desc(x))
    n, k = x.shape
    pn, pk = _align(n, 128), _align(k, gran_k)
    xp = torch.nn.functional.pad(x.to(torch.float32), (0, pk - k, 0, pn - n))
    xv = xp.view(pn // 128, 128, pk // gran_k, gran_k)
    sf = xv.abs().amax(dim=(1, 3), keepdim=True).clamp(min=1e-4) / FP8_MAX
    if use_ue8m0:
        sf = ceil_to_ue8m0(sf)
    q = _cast_groups(xv, sf).view(pn, pk)[:n, :k].contiguous()
    return q, sf.view(pn // 128, pk // gran_k)


def _dequant(
    fn: str,
    name: str,
    x: Tensor,
    sf: Tensor,
    *,
    gran_mn: Optional[int],
    gran_k: int,
    strict_gran: bool,
) -> Tensor:
    """Dequantize FP8 ``x`` (.., rows, k) with float32 or packed-UE8M0 int32 scales.

    Row granularity: ``sf.shape[-2] == rows`` means per row; ``== ceil(rows/gran_mn)`` means
    blocks of ``gran_mn`` (128 when ``gran_mn`` is None). With ``strict_gran`` only
    ``ceil(rows/gran_mn)`` is accepted.
    """
    sf_name = f"{name}[1]" if name else "sf"
    if sf.dim() != x.dim() or sf.shape[:-2] != x.shape[:-2]:
        raise BadArgumentError(fn, sf_name, f"a {x.dim()}-D tensor matching leading dims {tuple(x.shape[:-2])}", _desc(sf))
    rows, k = x.shape[-2], x.shape[-1]
    nk = _ceil_div(k, gran_k)
    if sf.dtype == torch.float32:
        if sf.shape[-1] != nk:
            raise BadArgumentError(fn, sf_name, f"{nk} float32 columns (ceil(k/{gran_k}), k={k})", _desc(sf))
        sf32 = sf
    elif sf.dtype == torch.int32:
        pk = _ceil_div(nk, 4)
        if sf.shape[-1] != pk:
            raise BadArgumentError(fn, sf_name, f"{pk} packed UE8M0 int32 columns (ceil(k/{4 * gran_k}), k={k})", _desc(sf))
        sf32 = _unpack_ue8m0(sf, nk)
    else:
        raise BadArgumentError(fn, sf_name, "dtype torch.float32 or torch.int32 (packed UE8M0)", _desc(sf))

    gran = 128 if gran_mn is None else gran_mn
    sf_rows = sf.shape[-2]
    if strict_gran:
        if sf_rows != _ceil_div(rows, gran):
            raise BadArgumentError(fn, sf_name, f"{_ceil_div(rows, gran)} rows (MN granularity {gran}, rows={rows})", _desc(sf))
    elif sf_rows != rows and sf_rows != _ceil_div(rows, gran):
        raise BadArgumentError(
            fn, sf_name, f"{rows} rows (per row) or {_ceil_div(rows, gran)} rows (per {gran}-block)", _desc(sf)
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
    x_fp8 = _need_tensor(fn, "x_fp8", x_fp8)
    sf = _need_tensor(fn, "sf", sf)
    _need_float(fn, "x_fp8", x_fp8)
    if x_fp8.dim() not in (2, 3):
        raise BadArgumentError(fn, "x_fp8", "a 2-D or 3-D tensor", _desc(x_fp8))
    _need_int(fn, "gran_mn", gran_mn, minimum=1)
    _need_int(fn, "gran_k", gran_k, minimum=1)
    _need_device(fn, "sf", sf, x_fp8.device)
    return _dequant(fn, "", x_fp8, sf, gran_mn=gran_mn, gran_k=gran_k, strict_gran=False)


# ---------------------------------------------------------------------------------------------
# GEMMs


def _parse_gemm_recipe(fn: str, recipe: object) -> Tuple[Optional[int], Optional[int], int]:
    if recipe is None:
        return None, None, 128
    if not isinstance(recipe, (tuple, list)) or len(recipe) != 3:
        raise BadArgumentError(fn, "recipe", "None or a (gran_m, gran_n, gran_k) tuple", _desc(recipe))
    for v in recipe:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise BadArgumentError(fn, "recipe", "positive ints", repr(recipe))
    return int(recipe[0]), int(recipe[1]), int(recipe[2])


def _parse_split_recipe(
    fn: str, recipe: object, recipe_a: object, recipe_b: object
) -> Tuple[Optional[int], Optional[int], int, int]:
    """``(gran_m, gran_n, gran_k of a, gran_k of b)`` from ``recipe`` or the per-operand pair.

    ``recipe_a = (gran_m, gran_k)`` and ``recipe_b = (gran_n, gran_k)`` (upstream's split recipes) are
    given together and instead of ``recipe``.
    """
    if recipe_a is None and recipe_b is None:
        gm, gn, gk = _parse_gemm_recipe(fn, recipe)
        return gm, gn, gk, gk
    if recipe is not None:
        raise BadArgumentError(fn, "recipe", "None when recipe_a / recipe_b are given", repr(recipe))
    parsed = []
    for name, value in (("recipe_a", recipe_a), ("recipe_b", recipe_b)):
        if (not isinstance(value, (tuple, list)) or len(value) != 2
                or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in value)):
            raise BadArgumentError(fn, name, "a (gran_mn, gran_k) pair of positive ints, with the other one",
                                   _desc(value))
        parsed.append((int(value[0]), int(value[1])))
    (gm, gka), (gn, gkb) = parsed
    return gm, gn, gka, gkb


def _check_compile_options(fn: str, compiled_dims: object, disable_ue8m0_cast: object = False) -> None:
    """``compiled_dims`` picks which sizes a JIT kernel is specialised for (results do not depend on it);
    ``disable_ue8m0_cast`` keeps float32 scales, which is what the reference always computes with."""
    if not isinstance(compiled_dims, str) or not set(compiled_dims) <= set("mnk"):
        raise BadArgumentError(fn, "compiled_dims", "a str of the letters m, n, k (e.g. 'nk' or '')",
                               _desc(compiled_dims))
    if not isinstance(disable_ue8m0_cast, bool):
        raise BadArgumentError(fn, "disable_ue8m0_cast", "a bool", _desc(disable_ue8m0_cast))


def _fp8_operand(
    fn: str, name: str, pair: object, rank: int, gran_mn: Optional[int], gran_k: int
) -> Tensor:
    data, sf = _need_pair(fn, name, pair)
    _need_dtype(fn, f"{name}[0]", data, (FP8,))
    if data.dim() != rank:
        raise BadArgumentError(fn, f"{name}[0]", f"a {rank}-D tensor", _desc(data))
    _need_device(fn, f"{name}[1]", sf, data.device)
    return _dequant(fn, name, data, sf, gran_mn=gran_mn, gran_k=gran_k, strict_gran=gran_mn is not None)


def _check_out(fn: str, d: object, shape: Tuple[int, ...], device: torch.device, *, grouped: bool = False) -> Tensor:
    """``d`` as every release takes it: N-major (``stride(-1) == 1``), bfloat16 (or float32 for the dense GEMMs)."""
    d = _need_tensor(fn, "d", d)
    _need_dtype(fn, "d", d, (torch.bfloat16,) if grouped else (torch.bfloat16, torch.float32))
    _need_shape(fn, "d", d, shape)
    _need_device(fn, "d", d, device)
    if d.stride(-1) != 1 and d.shape[-1] != 1:
        raise BadArgumentError(fn, "d", "N-major (d.stride(-1) == 1)", f"{_desc(d)} with strides {tuple(d.stride())}")
    return d


def _need_contiguous(fn: str, name: str, t: Tensor) -> None:
    if not t.is_contiguous():
        raise BadArgumentError(fn, name, "a contiguous tensor", f"{_desc(t)} with strides {tuple(t.stride())}")


def _gemm_into(fn: str, a32: Tensor, b32: Tensor, d: Tensor, c: Optional[Tensor]) -> None:
    m, n = a32.shape[0], b32.shape[0]
    if a32.shape[1] != b32.shape[1]:
        raise BadArgumentError(fn, "b", f"K = {a32.shape[1]} columns", f"K = {b32.shape[1]}")
    d = _check_out(fn, d, (m, n), a32.device)
    out = a32 @ b32.T
    if c is not None:
        # D = C + A @ B accumulates in float32: both are float32 then.
        c = _need_tensor(fn, "c", c)
        _need_dtype(fn, "c", c, (torch.float32,))
        _need_shape(fn, "c", c, (m, n))
        _need_dtype(fn, "d", d, (torch.float32,))
        _need_device(fn, "c", c, a32.device)
        out = out + c.to(torch.float32)
    d.copy_(out)


def fp8_gemm_nt(
    a: Tuple[Tensor, Tensor],
    b: Tuple[Tensor, Tensor],
    d: Tensor,
    c: Optional[Tensor] = None,
    recipe: Optional[Tuple[int, int, int]] = None,
    recipe_a: Optional[Tuple[int, int]] = None,
    recipe_b: Optional[Tuple[int, int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None:
    """``d = dequant(a) @ dequant(b).T (+ c)``, float32 accumulation, written into ``d``.

    ``a = (a_fp8 (M, K) float8_e4m3fn, sfa)``, ``b = (b_fp8 (N, K) float8_e4m3fn, sfb)``; each
    scale is float32 ``(rows or ceil(rows/128), ceil(K/128))`` or packed UE8M0 int32
    ``(rows or ceil(rows/128), ceil(K/512))`` in any strides (MN- or K-major). Without
    ``recipe`` the MN granularity is inferred from the scale's row count (``rows`` -> per row,
    ``ceil(rows/128)`` -> 128-blocks); a ``recipe = (gran_m, gran_n, gran_k)`` must agree with
    the shapes. ``d``: ``(M, N)`` bfloat16 or float32; ``c``: optional ``(M, N)`` float
    accumulator. ``recipe_a = (gran_m, gran_k)`` / ``recipe_b = (gran_n, gran_k)`` replace ``recipe`` (the
    two operands may then have different ``gran_k``); ``compiled_dims`` and ``disable_ue8m0_cast`` do not
    change the result (the reference always computes with the scales as given).
    """
    fn = "fp8_gemm_nt"
    gm, gn, gka, gkb = _parse_split_recipe(fn, recipe, recipe_a, recipe_b)
    _check_compile_options(fn, compiled_dims, disable_ue8m0_cast)
    a32 = _fp8_operand(fn, "a", a, 2, gm, gka)
    b32 = _fp8_operand(fn, "b", b, 2, gn, gkb)
    _need_device(fn, "b[0]", b32, a32.device)
    _gemm_into(fn, a32, b32, d, c)


def bf16_gemm_nt(a: Tensor, b: Tensor, d: Tensor, c: Optional[Tensor] = None, compiled_dims: str = "nk") -> None:
    """``d = a @ b.T (+ c)`` with float32 accumulation.

    ``a``: ``(M, K)`` bfloat16, ``b``: ``(N, K)`` bfloat16, ``d``: ``(M, N)`` bfloat16 or float32,
    ``c``: optional ``(M, N)`` float accumulator; ``compiled_dims`` does not change the result.
    """
    fn = "bf16_gemm_nt"
    _check_compile_options(fn, compiled_dims)
    a = _need_tensor(fn, "a", a)
    b = _need_tensor(fn, "b", b)
    _need_dtype(fn, "a", a, (torch.bfloat16,))
    _need_dtype(fn, "b", b, (torch.bfloat16,))
    if a.dim() != 2:
        raise BadArgumentError(fn, "a", "a 2-D (M, K) tensor", _desc(a))
    if b.dim() != 2:
        raise BadArgumentError(fn, "b", "a 2-D (N, K) tensor", _desc(b))
    _need_device(fn, "b", b, a.device)
    _gemm_into(fn, a.to(torch.float32), b.to(torch.float32), d, c)


def _check_psum_options(fn: str, use_psum_layout: object, ensure_zero_padding: object, expected_m: object) -> None:
    for name, value in (("use_psum_layout", use_psum_layout), ("ensure_zero_padding", ensure_zero_padding)):
        if not isinstance(value, bool):
            raise BadArgumentError(fn, name, "a bool", _desc(value))
    if expected_m is not None:
        _need_int(fn, "expected_m_for_psum_layout", expected_m, minimum=1)


def _grouped_psum(fn: str, a32: Tensor, b32: Tensor, d: Tensor, ends: object) -> None:
    """The psum layout: ``ends`` int32 ``(G,)``; group ``g`` owns rows ``[align(ends[g-1]), ends[g])``
    (group 0 from row 0; ``align`` to :func:`get_mk_alignment_for_contiguous_layout`).

    Only the groups' rows are written; the alignment gaps between groups are unspecified (kernels may
    write them). ``ensure_zero_padding`` is the caller's promise that ``a``'s gap rows are zero, which
    lets kernels compute whole blocks: it never changes the groups' rows, so it is accepted either way.
    """
    m, g = a32.shape[0], b32.shape[0]
    idx = _need_int_tensor(fn, "m_indices", ends)
    _need_shape(fn, "m_indices", idx, (g,))
    _need_contiguous(fn, "m_indices", idx)
    _need_device(fn, "m_indices", idx, a32.device)
    align = get_mk_alignment_for_contiguous_layout()
    start = 0
    for group, end in enumerate(idx.to(torch.int64).tolist()):
        if end < start or end > m:
            raise BadArgumentError(fn, "m_indices", f"group end rows in [0, {m}], each at or after the aligned "
                                   f"end of the group before (psum layout; group {group} starts at row {start})",
                                   f"{end}")
        if end > start:
            d[start:end] = (a32[start:end] @ b32[group].T).to(d.dtype)
        start = _align(end, align)


def _grouped_contiguous(fn: str, a32: Tensor, b32: Tensor, d: object, m_indices: object,
                        use_psum_layout: bool = False) -> None:
    m, k = a32.shape
    g, n, kb = b32.shape
    if kb != k:
        raise BadArgumentError(fn, "b", f"K = {k} columns", f"K = {kb}")
    d = _check_out(fn, d, (m, n), a32.device, grouped=True)
    if use_psum_layout:
        _grouped_psum(fn, a32, b32, d, m_indices)
        return
    idx = _need_int_tensor(fn, "m_indices", m_indices)
    _need_shape(fn, "m_indices", idx, (m,))
    _need_contiguous(fn, "m_indices", idx)
    _need_device(fn, "m_indices", idx, a32.device)
    if m % MK_ALIGNMENT:
        raise BadArgumentError(fn, "a", f"a row count that is a multiple of {MK_ALIGNMENT} (each expert's rows "
                               "padded to the contiguous-layout alignment)", f"{m} rows")
    if m == 0:
        return
    idx64 = idx.to(torch.int64)
    if bool(((idx64 < -1) | (idx64 >= g)).any()):
        raise BadArgumentError(fn, "m_indices", f"values in [0, {g}) or -1", f"values in [{int(idx64.min())}, {int(idx64.max())}]")
    for group in torch.unique(idx64).tolist():
        if group < 0:
            continue
        rows = torch.nonzero(idx64 == group).squeeze(1)
        d[rows] = (a32.index_select(0, rows) @ b32[group].T).to(d.dtype)


def _grouped_masked(fn: str, a32: Tensor, b32: Tensor, d: object, masked_m: object, expected_m: object) -> None:
    g, m_max, k = a32.shape
    gb, n, kb = b32.shape
    if gb != g:
        raise BadArgumentError(fn, "b", f"{g} groups", f"{gb} groups")
    if kb != k:
        raise BadArgumentError(fn, "b", f"K = {k} columns", f"K = {kb}")
    d = _check_out(fn, d, (g, m_max, n), a32.device, grouped=True)
    mm = _need_int_tensor(fn, "masked_m", masked_m)
    _need_shape(fn, "masked_m", mm, (g,))
    _need_contiguous(fn, "masked_m", mm)
    _need_device(fn, "masked_m", mm, a32.device)
    _need_int(fn, "expected_m", expected_m, minimum=1)
    mm64 = mm.to(torch.int64)
    if g and bool(((mm64 < 0) | (mm64 > m_max)).any()):
        raise BadArgumentError(fn, "masked_m", f"values in [0, {m_max}]", f"values in [{int(mm64.min())}, {int(mm64.max())}]")
    live = torch.arange(m_max, device=a32.device).unsqueeze(0) < mm64.unsqueeze(1)
    if not bool(live.any()):
        return
    out = torch.bmm(a32, b32.transpose(1, 2))
    d[live] = out[live].to(d.dtype)


def m_grouped_fp8_gemm_nt_contiguous(
    a: Tuple[Tensor, Tensor],
    b: Tuple[Tensor, Tensor],
    d: Tensor,
    m_indices: Tensor,
    recipe: Optional[Tuple[int, int, int]] = None,
    recipe_a: Optional[Tuple[int, int]] = None,
    recipe_b: Optional[Tuple[int, int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout: Optional[int] = None,
) -> None:
    """Grouped FP8 GEMM, groups laid out contiguously along M.

    ``a = (fp8 (M_total, K), sfa (M_total, ceil(K/128)))``; ``b = (fp8 (G, N, K), sfb
    (G, ceil(N/128), ceil(K/128)))`` (scales as in :func:`fp8_gemm_nt`); ``d``: ``(M_total, N)``
    bfloat16/float32; ``m_indices``: int32 ``(M_total,)`` in ``[0, G)`` or ``-1``. Row ``i`` gets
    ``a[i] @ b[m_indices[i]].T``; rows with ``-1`` are left untouched (callers must treat them as
    unspecified: kernels may write them). With ``use_psum_layout=True`` ``m_indices`` is int32 ``(G,)``
    instead, each group's end row (see :func:`_grouped_psum`); ``expected_m_for_psum_layout`` is a
    tuning hint. ``recipe_a`` / ``recipe_b`` / ``compiled_dims`` / ``disable_ue8m0_cast`` as in
    :func:`fp8_gemm_nt`.
    """
    fn = "m_grouped_fp8_gemm_nt_contiguous"
    gm, gn, gka, gkb = _parse_split_recipe(fn, recipe, recipe_a, recipe_b)
    _check_compile_options(fn, compiled_dims, disable_ue8m0_cast)
    _check_psum_options(fn, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)
    a32 = _fp8_operand(fn, "a", a, 2, gm, gka)
    b32 = _fp8_operand(fn, "b", b, 3, gn, gkb)
    _grouped_contiguous(fn, a32, b32, d, m_indices, use_psum_layout)


def m_grouped_fp8_gemm_nt_masked(
    a: Tuple[Tensor, Tensor],
    b: Tuple[Tensor, Tensor],
    d: Tensor,
    masked_m: Tensor,
    expected_m: int,
    recipe: Optional[Tuple[int, int, int]] = None,
    recipe_a: Optional[Tuple[int, int]] = None,
    recipe_b: Optional[Tuple[int, int]] = None,
    compiled_dims: str = "nk",
    disable_ue8m0_cast: bool = False,
) -> None:
    """Grouped FP8 GEMM with a per-group row count.

    ``a = (fp8 (G, M_max, K), sfa (G, M_max, ceil(K/128)))``; ``b = (fp8 (G, N, K), sfb
    (G, ceil(N/128), ceil(K/128)))``; ``d``: ``(G, M_max, N)`` bfloat16/float32; ``masked_m``:
    int32 ``(G,)``. Rows ``[0, masked_m[g])`` of group ``g`` get ``a[g] @ b[g].T``; the other
    rows of ``d`` are left untouched. ``expected_m`` is a tuning hint, unused by the math.
    ``recipe_a`` / ``recipe_b`` / ``compiled_dims`` / ``disable_ue8m0_cast`` as in :func:`fp8_gemm_nt`.
    """
    fn = "m_grouped_fp8_gemm_nt_masked"
    gm, gn, gka, gkb = _parse_split_recipe(fn, recipe, recipe_a, recipe_b)
    _check_compile_options(fn, compiled_dims, disable_ue8m0_cast)
    a32 = _fp8_operand(fn, "a", a, 3, gm, gka)
    b32 = _fp8_operand(fn, "b", b, 3, gn, gkb)
    _grouped_masked(fn, a32, b32, d, masked_m, expected_m)


def _bf16_operand(fn: str, name: str, t: object, rank: int) -> Tensor:
    t = _need_tensor(fn, name, t)
    _need_dtype(fn, name, t, (torch.bfloat16,))
    if t.dim() != rank:
        raise BadArgumentError(fn, name, f"a {rank}-D tensor", _desc(t))
    return t.to(torch.float32)


def m_grouped_bf16_gemm_nt_contiguous(
    a: Tensor,
    b: Tensor,
    d: Tensor,
    m_indices: Tensor,
    compiled_dims: str = "nk",
    use_psum_layout: bool = False,
    ensure_zero_padding: bool = True,
    expected_m_for_psum_layout: Optional[int] = None,
) -> None:
    """BF16 version of :func:`m_grouped_fp8_gemm_nt_contiguous`.

    ``a``: ``(M_total, K)`` bfloat16, ``b``: ``(G, N, K)`` bfloat16, ``d``: ``(M_total, N)``,
    ``m_indices``: int32 ``(M_total,)`` (``-1`` rows untouched), or ``(G,)`` group end rows with
    ``use_psum_layout=True``.
    """
    fn = "m_grouped_bf16_gemm_nt_contiguous"
    _check_compile_options(fn, compiled_dims)
    _check_psum_options(fn, use_psum_layout, ensure_zero_padding, expected_m_for_psum_layout)
    a32 = _bf16_operand(fn, "a", a, 2)
    b32 = _bf16_operand(fn, "b", b, 3)
    _need_device(fn, "b", b32, a32.device)
    _grouped_contiguous(fn, a32, b32, d, m_indices, use_psum_layout)


def m_grouped_bf16_gemm_nt_masked(
    a: Tensor, b: Tensor, d: Tensor, masked_m: Tensor, expected_m: int, compiled_dims: str = "nk"
) -> None:
    """BF16 version of :func:`m_grouped_fp8_gemm_nt_masked`.

    ``a``: ``(G, M_max, K)`` bfloat16, ``b``: ``(G, N, K)`` bfloat16, ``d``: ``(G, M_max, N)``,
    ``masked_m``: int32 ``(G,)``; ``compiled_dims`` does not change the result.
    """
    fn = "m_grouped_bf16_gemm_nt_masked"
    _check_compile_options(fn, compiled_dims)
    a32 = _bf16_operand(fn, "a", a, 3)
    b32 = _bf16_operand(fn, "b", b, 3)
    _need_device(fn, "b", b32, a32.device)
    _grouped_masked(fn, a32, b32, d, masked_m, expected_m)


# ---------------------------------------------------------------------------------------------
# MQA logits (DeepSeek V3.2 indexer)


def _head_reduce(scores: Tensor, weights: Tensor) -> Tensor:
    """sum_h w[.., h] * relu(scores[.., h, :]) for scores (.., H, P), weights (.., H)."""
    return (scores.relu_() * weights.unsqueeze(-1)).sum(dim=-2)


def fp8_mqa_logits(
    q: Tensor,
    kv: Tuple[Tensor, Tensor],
    weights: Tensor,
    ks: Tensor,
    ke: Tensor,
    clean_logits: bool = False,
    max_seqlen_k: Optional[int] = 0,
) -> Tensor:
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
    q = _need_tensor(fn, "q", q)
    _need_dtype(fn, "q", q, (FP8,))
    if q.dim() != 3:
        raise BadArgumentError(fn, "q", "a 3-D (Nq, H, D) tensor", _desc(q))
    nq, h, dim = q.shape
    device = q.device
    k, k_scale = _need_pair(fn, "kv", kv)
    _need_dtype(fn, "kv[0]", k, (FP8,))
    if k.dim() != 2 or k.shape[1] != dim:
        raise BadArgumentError(fn, "kv[0]", f"a 2-D (Nk, {dim}) tensor", _desc(k))
    nk = k.shape[0]
    _need_dtype(fn, "kv[1]", k_scale, (torch.float32,))
    _need_shape(fn, "kv[1]", k_scale, (nk,))
    weights = _need_tensor(fn, "weights", weights)
    _need_dtype(fn, "weights", weights, (torch.float32,))  # the releases take float32 weights only
    _need_shape(fn, "weights", weights, (nq, h))
    ks = _need_int_tensor(fn, "ks", ks)
    ke = _need_int_tensor(fn, "ke", ke)
    _need_shape(fn, "ks", ks, (nq,))
    _need_shape(fn, "ke", ke, (nq,))
    for name, t in (("kv[0]", k), ("kv[1]", k_scale), ("weights", weights), ("ks", ks), ("ke", ke)):
        _need_device(fn, name, t, device)
    if not isinstance(clean_logits, bool):
        raise BadArgumentError(fn, "clean_logits", "a bool", _desc(clean_logits))
    compressed = 0
    if max_seqlen_k is not None:
        compressed = _need_int(fn, "max_seqlen_k", max_seqlen_k)
    if compressed and clean_logits:
        raise BadArgumentError(fn, "clean_logits", "False when max_seqlen_k > 0", "True")

    width = compressed if compressed else nk
    stride = _align(compressed, 256) if compressed else _align(nk + 256, 8)
    out = torch.full((nq, stride), float("-inf"), dtype=torch.float32, device=device)[:, :width]
    if nq == 0 or width == 0 or nk == 0:
        return out

    k32 = k.to(torch.float32)
    scale32 = k_scale.to(torch.float32)
    w32 = weights.to(torch.float32)
    start = ks.to(torch.int64)
    end = ke.to(torch.int64)
    cols = torch.arange(width, device=device)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, h * nk))
    for lo in range(0, nq, chunk):
        hi = min(nq, lo + chunk)
        scores = torch.matmul(q[lo:hi].to(torch.float32), k32.T)  # (c, H, Nk)
        logits = _head_reduce(scores, w32[lo:hi]) * scale32  # (c, Nk)
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


def pack_kv_cache(k: Tensor) -> Tensor:
    """Quantize a paged key cache into deep_gemm's fused FP8 layout.

    ``k``: ``(num_blocks, block_kv, D)`` (or ``(num_blocks, block_kv, 1, D)``) float. Each token
    gets ``sf = amax.clamp(1e-4) / 448``. Returns uint8 ``(num_blocks, block_kv, 1, D + 4)``:
    per block, ``block_kv * D`` FP8 bytes (token ``t`` at ``[t*D, (t+1)*D)``) followed by
    ``block_kv`` float32 scales (native byte order).
    """
    fn = "pack_kv_cache"
    k = _need_tensor(fn, "k", k)
    _need_float(fn, "k", k)
    if k.dim() == 4 and k.shape[2] == 1:
        k = k.squeeze(2)
    if k.dim() != 3:
        raise BadArgumentError(fn, "k", "a (num_blocks, block_kv, D) tensor", _desc(k))
    nb, bkv, dim = k.shape
    k32 = k.to(torch.float32)
    sf = k32.abs().amax(dim=2, keepdim=True).clamp(min=1e-4) / FP8_MAX
    values = _cast_groups(k32, sf)
    fused = torch.empty((nb, bkv * (dim + 4)), dtype=torch.uint8, device=k.device)
    fused[:, : bkv * dim] = values.reshape(nb, bkv * dim).view(torch.uint8)
    fused[:, bkv * dim :] = sf.reshape(nb, bkv).contiguous().view(torch.uint8)
    return fused.view(nb, bkv, 1, dim + 4)


def unpack_kv_cache(kv_cache: Tensor) -> Tuple[Tensor, Tensor]:
    """Split a fused paged cache into ``(fp8 (num_blocks, block_kv, D), float32 (num_blocks, block_kv))``.

    ``kv_cache``: uint8 ``(num_blocks, block_kv, 1, D + 4)`` as built by :func:`pack_kv_cache`
    (any strides; each block is read in its logical byte order).
    """
    fn = "unpack_kv_cache"
    kv_cache = _need_tensor(fn, "kv_cache", kv_cache)
    _need_dtype(fn, "kv_cache", kv_cache, (torch.uint8,))
    if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] <= 4:
        raise BadArgumentError(fn, "kv_cache", "a (num_blocks, block_kv, 1, D + 4) tensor with D > 0", _desc(kv_cache))
    nb, bkv, _, width = kv_cache.shape
    dim = width - 4
    flat = kv_cache.reshape(nb, bkv * width)
    values = flat[:, : bkv * dim].contiguous().view(FP8).view(nb, bkv, dim)
    scales = flat[:, bkv * dim :].contiguous().view(torch.float32)
    return values, scales


def _row_lengths(fn: str, context_lens: Tensor, b: int, next_n: int) -> Tensor:
    """Visible KV length of every query row (int64, (B*next_n,), clamped >= 0)."""
    rows = b * next_n
    ctx = context_lens.to(torch.int64)
    if ctx.dim() == 1 and ctx.shape[0] == b:
        j = torch.arange(next_n, device=ctx.device)
        lens = ctx.unsqueeze(1) - next_n + j + 1
    elif ctx.dim() == 2 and tuple(ctx.shape) == (b, next_n):
        lens = ctx
    elif ctx.dim() == 2 and tuple(ctx.shape) == (rows, 1):
        lens = ctx
    else:
        raise BadArgumentError(
            fn, "context_lens", f"shape ({b},), ({b}, {next_n}) or ({rows}, 1)", _desc(context_lens)
        )
    return lens.reshape(rows).clamp(min=0)


def fp8_paged_mqa_logits(
    q: Tensor,
    kv_cache: Tensor,
    weights: Tensor,
    context_lens: Tensor,
    block_table: Tensor,
    schedule_meta: Optional[Tensor],
    max_context_len: int,
    clean_logits: bool = False,
    indices: Optional[Tensor] = None,
) -> Tensor:
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
    q = _need_tensor(fn, "q", q)
    _need_dtype(fn, "q", q, (FP8,))
    if q.dim() != 4:
        raise BadArgumentError(fn, "q", "a 4-D (B, next_n, H, D) tensor", _desc(q))
    b, next_n, h, dim = q.shape
    rows = b * next_n
    device = q.device
    kv_cache = _need_tensor(fn, "kv_cache", kv_cache)
    _need_dtype(fn, "kv_cache", kv_cache, (torch.uint8,))
    if kv_cache.dim() != 4 or kv_cache.shape[2] != 1 or kv_cache.shape[3] != dim + 4:
        raise BadArgumentError(fn, "kv_cache", f"a (num_blocks, block_kv, 1, {dim + 4}) tensor", _desc(kv_cache))
    nb, bkv = kv_cache.shape[0], kv_cache.shape[1]
    weights = _need_tensor(fn, "weights", weights)
    _need_dtype(fn, "weights", weights, (torch.float32,))  # the releases take float32 weights only
    _need_shape(fn, "weights", weights, (rows, h))
    context_lens = _need_int_tensor(fn, "context_lens", context_lens)
    block_table = _need_int_tensor(fn, "block_table", block_table)
    if block_table.dim() != 2 or block_table.shape[0] not in (b, rows):
        raise BadArgumentError(fn, "block_table", f"a ({b}, max_blocks) or ({rows}, max_blocks) tensor", _desc(block_table))
    for name, t in (("kv_cache", kv_cache), ("weights", weights), ("context_lens", context_lens), ("block_table", block_table)):
        _need_device(fn, name, t, device)
    _need_int(fn, "max_context_len", max_context_len)
    if not isinstance(clean_logits, bool):
        raise BadArgumentError(fn, "clean_logits", "a bool", _desc(clean_logits))
    if schedule_meta is not None:
        _need_tensor(fn, "schedule_meta", schedule_meta)
    if indices is not None:
        _need_varlen(fn, indices, b, next_n, device)

    lens = _row_lengths(fn, context_lens, b, next_n)
    longest = int(lens.max()) if rows else 0
    if longest > max_context_len:
        raise BadArgumentError(fn, "max_context_len", f">= the longest visible length {longest}", repr(max_context_len))
    n_cols = block_table.shape[1]
    if longest > n_cols * bkv:
        raise BadArgumentError(
            fn, "block_table", f">= {_ceil_div(longest, bkv)} columns for length {longest} (block_kv={bkv})", _desc(block_table)
        )

    stride = _align(max_context_len, SPLIT_KV)
    out = torch.full((rows, stride), float("-inf"), dtype=torch.float32, device=device)[:, :max_context_len]
    if rows == 0 or longest == 0:
        return out

    values, scales = unpack_kv_cache(kv_cache)
    raw = values.view(torch.uint8)
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

    qv = q.view(bt_rows, per_bt, h, dim)
    wv = weights.view(bt_rows, per_bt, h).to(torch.float32)
    chunk = max(1, _CHUNK_ELEMENTS // max(1, per_bt * h * longest + longest * dim))
    logits = torch.empty((bt_rows, per_bt, longest), dtype=torch.float32, device=device)
    for lo in range(0, bt_rows, chunk):
        hi = min(bt_rows, lo + chunk)
        # gather raw bytes: integer indexing is available for uint8 on every backend
        kk = raw[blocks[lo:hi], slots[lo:hi]].view(FP8).to(torch.float32)  # (c, P, D)
        ss = scales[blocks[lo:hi], slots[lo:hi]]  # (c, P)
        scores = torch.matmul(qv[lo:hi].to(torch.float32), kk.unsqueeze(1).transpose(-1, -2))  # (c, r, H, P)
        logits[lo:hi] = _head_reduce(scores, wv[lo:hi]) * ss.unsqueeze(1)
    out[:, :longest] = torch.where(row_valid, logits.view(rows, longest), float("-inf"))
    return out


# ---------------------------------------------------------------------------------------------
# paged MQA schedule


def _need_varlen(fn: str, indices: object, rows: int, next_n: int, device: torch.device) -> None:
    ix = _need_int_tensor(fn, "indices", indices)
    if next_n != 1 or ix.dim() != 1 or ix.shape[0] != rows:
        raise BadArgumentError(fn, "indices", f"an int32 ({rows},) tensor with next_n == 1", _desc(ix))
    _need_device(fn, "indices", ix, device)


def _schedule_lengths(fn: str, context_lens: object) -> Tuple[Tensor, int]:
    """(per-sequence scheduled length (int64, (B,)), number of next_n atoms per sequence)."""
    ctx = _need_int_tensor(fn, "context_lens", context_lens)
    if ctx.dim() == 1:
        lens, next_n = ctx.to(torch.int64), 1
    elif ctx.dim() == 2 and ctx.shape[1] >= 1:
        lens, next_n = ctx[:, -1].to(torch.int64), ctx.shape[1]
    else:
        raise BadArgumentError(fn, "context_lens", "a 1-D (B,) or 2-D (B, n) tensor with n >= 1", _desc(ctx))
    if lens.numel() and bool((lens < 0).any()):
        raise BadArgumentError(fn, "context_lens", "non-negative lengths", f"minimum {int(lens.min())}")
    atom = 2 if next_n >= 2 else 1
    return lens, _ceil_div(next_n, atom)


def get_paged_mqa_logits_metadata(
    context_lens: Tensor, block_kv: int, num_sms: int, indices: Optional[Tensor] = None, *, balance: Balance = "tail"
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
    _need_int(fn, "block_kv", block_kv, minimum=1)
    if SPLIT_KV % block_kv != 0:
        raise BadArgumentError(fn, "block_kv", f"a divisor of {SPLIT_KV}", repr(block_kv))
    _need_int(fn, "num_sms", num_sms, minimum=1)
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
    if balance == "tail":
        starts = s * q + (s - (num_sms - r)).clamp(min=0)
    else:
        starts = s * q + s.clamp(max=r)
    seq = torch.searchsorted(prefix.contiguous(), starts, right=True)
    inside = seq < batch
    seq_c = seq.clamp(max=batch - 1)
    before = torch.where(seq_c > 0, prefix[(seq_c - 1).clamp(min=0)], 0)
    seg_q = segs[seq_c].clamp(min=1)
    off = starts - before
    q_atom = torch.where(inside, seq_c * num_atoms + off // seg_q, batch * num_atoms)
    kv_split = torch.where(inside, off % seg_q, 0)
    return torch.stack([q_atom, kv_split], dim=1).to(torch.int32)


def paged_schedule_matches(
    schedule_meta: Tensor,
    context_lens: Tensor,
    block_kv: int,
    num_sms: int,
    *,
    balance: Optional[Balance] = None,
) -> bool:
    """True when ``schedule_meta`` is the schedule of ``context_lens`` for ``num_sms`` SMs.

    Recomputes :func:`get_paged_mqa_logits_metadata` and compares exactly (shape and values). With
    ``balance=None`` either remainder placement is accepted (they differ between releases). A
    mismatch means the launch could read past its work list and never finish.
    """
    fn = "paged_schedule_matches"
    meta = _need_tensor(fn, "schedule_meta", schedule_meta)
    if tuple(meta.shape) != (num_sms + 1, 2) or meta.dtype.is_floating_point:
        return False
    got = meta.to(device="cpu", dtype=torch.int64)
    options: Tuple[Balance, ...] = ("tail", "head") if balance is None else (balance,)
    for option in options:
        want = get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, balance=option)
        if torch.equal(want.to(device="cpu", dtype=torch.int64), got):
            return True
    return False
