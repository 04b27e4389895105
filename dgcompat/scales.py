"""FP8 scale-factor layouts: TMA alignment, MN-major transposition, UE8M0 packing.

DeepGEMM asserts ``sf.stride(-1) == get_tma_aligned_size(mn, sf.element_size())`` on pre-transformed
scales. Where returned tensors cross DLPack (the tvm-ffi releases, sgl-deep-gemm < 0.2.3), some torch
builds rewrite the stride of a size-1 dimension to 1 on the way (pytorch#83158); a packed UE8M0
scale with K <= 512 has exactly such a trailing dimension, and the next GEMM then asserts. Whether
it happens depends on the torch build as well as the release, so every scale returned here is
checked (a read of its shape, and of its strides when a dimension has size 1) and re-strided to
the TMA-aligned layout where it came back collapsed, on every release. The repair is metadata-only
(the storage was allocated with that layout).
"""

from __future__ import annotations

from collections.abc import Callable
from collections.abc import Sequence
from typing import TYPE_CHECKING
from typing import Any

from . import _binding
from . import _math
from ._calls import UpstreamCall
from ._checks import as_torch
from ._checks import bad
from ._checks import release_label
from ._checks import spelled
from ._checks import tensor
from ._checks import translate
from ._params import Param
from ._params import bind
from .errors import UnsupportedFeatureError
from .table import capabilities

if TYPE_CHECKING:
    import torch

__all__ = [
    "get_tma_aligned_size", "ceil_to_ue8m0", "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor", "transform_sf_into_required_layout", "transform_scale_ue8m0",
    "restore_tma_strides",
]

#: The upstream calls of this module (see :mod:`dgcompat._calls`).
CALLS: tuple[UpstreamCall, ...] = (
    UpstreamCall("deep_gemm.transform_sf_into_required_layout", "dgcompat.transform_sf_into_required_layout",
                 ("sf", "mn", "k", "recipe", "num_groups", "is_sfa", "disable_ue8m0_cast"), uses_result=True,
                 forwarded=("psum_layout",)),
    UpstreamCall("deep_gemm.get_mn_major_tma_aligned_tensor", "dgcompat.get_mn_major_tma_aligned_tensor", ("*",),
                 uses_result=True, passthrough=True,
                 alternatives=("deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor",)),
    UpstreamCall("deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor",
                 "dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor", ("*",), uses_result=True, passthrough=True,
                 alternatives=("deep_gemm.utils.layout.get_mn_major_tma_aligned_packed_ue8m0_tensor",),
                 forwarded=("psum_layout",)),
)
_TRANSFORM, _MN_MAJOR, _MN_MAJOR_PACKED = CALLS


def get_tma_aligned_size(x: int, element_size: int) -> int:
    """``x`` rounded up so that ``x * element_size`` is a multiple of 16 bytes (TMA's alignment)."""
    if isinstance(element_size, bool) or not isinstance(element_size, int) or element_size <= 0 \
            or 16 % element_size:
        raise bad("get_tma_aligned_size", "element_size", "1, 2, 4, 8 or 16", element_size)
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise bad("get_tma_aligned_size", "x", "a non-negative int", x)
    return _math.tma_aligned_size(x, element_size)


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Round scales up to the powers of two a UE8M0 byte holds, as the engines' (and DeepGEMM's) function does.

    ``x``: a floating tensor of any shape; returns float32 of the same shape. Computed on the bits of
    ``|x|`` in float32: the biased exponent goes up by one when any mantissa bit is set and is clamped to
    ``[1, 254]``, so 0 and subnormals give ``2**-126`` and values above ``2**127`` (3e38, inf) give
    ``2**127``. UE8M0 packing keeps only the exponent byte, so a scale must be rounded first (rounding up
    keeps the quantized values in range). The arithmetic is :func:`dgcompat._math.ceil_to_ue8m0`, which
    the reference backend uses too.
    """
    import torch

    if not isinstance(x, torch.Tensor) or not x.dtype.is_floating_point:
        raise bad("ceil_to_ue8m0", "x", "a floating-point tensor", x)
    return _math.ceil_to_ue8m0(x)


def restore_tma_strides(sf: torch.Tensor) -> torch.Tensor:
    """Give an MN-major scale ``(mn, k)`` / ``(g, mn, k)`` the TMA-aligned strides DeepGEMM expects.

    Returns ``sf`` itself when its strides are already right; otherwise a view over the same storage
    with strides ``(1, aligned_mn)`` / ``(aligned_mn * k, 1, aligned_mn)``.
    """
    if sf.dim() not in (2, 3):
        return sf
    mn, k = sf.shape[-2], sf.shape[-1]
    aligned = get_tma_aligned_size(int(mn), sf.element_size())
    want = (1, aligned) if sf.dim() == 2 else (aligned * k, 1, aligned)
    have = tuple(sf.stride())
    if have == want:
        return sf
    # Only a stride of a size-1 dim can have been rewritten; anything else is a real layout.
    for size, h, w in zip(sf.shape, have, want, strict=True):
        if h != w and size != 1:
            return sf
    needed = sf.storage_offset() + 1 + sum((s - 1) * st for s, st in zip(sf.shape, want, strict=True))
    if sf.untyped_storage().nbytes() < needed * sf.element_size():
        return sf
    return sf.as_strided(tuple(sf.shape), want)


def _bind_layout(call: UpstreamCall) -> Callable[..., Any]:
    """The upstream layout function, its result checked for collapsed strides (see the module docstring)."""
    target = _binding.upstream(call)

    def repaired(sf: Any) -> Any:
        return _repair_copy(sf, target(sf))
    return repaired


def _bind_packed() -> Callable[..., Any]:
    """The upstream packing function as ``f(sf, psum_layout)``, its result checked for collapsed strides."""
    call = _bind_forwarding(_MN_MAJOR_PACKED)

    def repaired(sf: Any, psum_layout: Any) -> Any:
        return _repair_copy(sf, call(sf, psum_layout))
    return repaired


def _repair_copy(sf: Any, out: Any) -> Any:
    """Restore TMA strides on a scale deep_gemm allocated, never on the caller's own tensor.

    deep_gemm hands back its input unchanged when no transform is needed (e.g. a 128x128 block
    scale on SM90); that tensor's strides are the caller's and are checked by other rules, so only
    a fresh allocation (which deep_gemm made TMA-aligned) is re-strided.
    """
    out = as_torch(out)
    if 1 not in out.shape or out.data_ptr() == sf.data_ptr():
        return out  # only the stride of a size-1 dimension can have been rewritten
    return restore_tma_strides(out)


def _check_sf(fn: str, sf: Any) -> None:
    tensor(fn, "sf", sf, dims=(2, 3), dtypes=("float32",), what="a float32 scale tensor")


def get_mn_major_tma_aligned_tensor(sf: torch.Tensor | None = None, *, a: torch.Tensor | None = None) -> torch.Tensor:
    """float32 ``(mn, k)`` / ``(g, mn, k)`` scales -> same values, MN-major, strides ``(1, aligned_mn)``.

    ``sf`` is required (``a=``, its name in the bundled schema, is the same parameter).
    """
    if sf is None or a is not None:
        sf = _scale_argument("get_mn_major_tma_aligned_tensor", sf, a)
    try:
        return _B.get_mn_major_tma_aligned_tensor(sf)
    except Exception as exc:
        translate("get_mn_major_tma_aligned_tensor", exc, _check_sf, "get_mn_major_tma_aligned_tensor", sf)


def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf: torch.Tensor | None = None, psum_layout: torch.Tensor | None = None,
                                                 *, a: torch.Tensor | None = None) -> torch.Tensor:
    """float32 ``(mn, k)`` / ``(g, mn, k)`` power-of-two scales -> int32 ``(.., mn, ceil(k/4))``: four UE8M0
    bytes per int32, MN-major, strides ``(1, aligned_mn)`` even when ``ceil(k/4) == 1``.

    ``sf`` is required (``a=``, its name in the bundled schema, is the same parameter). ``psum_layout``: the
    psum-layout group ends of sgl-deep-gemm 0.2.0+ / upstream 2.8, forwarded where the release has the
    parameter; elsewhere only None is accepted (:class:`~dgcompat.errors.UnsupportedFeatureError`).
    """
    if sf is None or a is not None:
        sf = _scale_argument("get_mn_major_tma_aligned_packed_ue8m0_tensor", sf, a)
    try:
        return _B.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf, psum_layout)
    except Exception as exc:
        translate("get_mn_major_tma_aligned_packed_ue8m0_tensor", exc, _check_sf,
                  "get_mn_major_tma_aligned_packed_ue8m0_tensor", sf)


def transform_sf_into_required_layout(sf: torch.Tensor, mn: int, k: int, recipe: Sequence[int],
                                      num_groups: int | None = None, is_sfa: bool | None = None,
                                      disable_ue8m0_cast: bool = False,
                                      psum_layout: torch.Tensor | None = None) -> torch.Tensor:
    """Bring scales into the layout the GEMMs of this release and architecture read.

    ``sf`` float32 ``(mn or ceil(mn/128), ceil(k/128))`` (``(num_groups, ...)`` when grouped); ``recipe``
    ``(gran_m, gran_n, gran_k)`` (then ``is_sfa`` says which operand) or ``(gran_mn, gran_k)``. Returns
    MN-major TMA-aligned float32 per-row scales (SM90), or packed UE8M0 int32 (SM100). A scale that already
    has the required layout (e.g. a 128x128 block scale of ``b`` on SM90) comes back as the same tensor.
    ``disable_ue8m0_cast``: keep float32 where the architecture would pack UE8M0 (every release has it;
    SM100 releases refuse it). ``psum_layout``: as in :func:`get_mn_major_tma_aligned_packed_ue8m0_tensor`.
    The parameters are in upstream's positions.
    """
    fn = "transform_sf_into_required_layout"
    # deep_gemm asserts this pairing in its own host code, except the bundled copies, whose plain-bool
    # is_sfa would silently read None as "b's scales": check it here so every release agrees.
    if isinstance(recipe, (tuple, list)) and ((len(recipe) == 3) == (is_sfa is None)
                                              or not isinstance(is_sfa, (bool, type(None)))):
        raise bad(fn, "is_sfa", "True or False with a 3-element recipe, None with a 2-element one", is_sfa)
    try:
        return _B.transform_sf_into_required_layout(sf, mn, k, tuple(recipe), num_groups, is_sfa, disable_ue8m0_cast,
                                                    psum_layout)
    except Exception as exc:
        translate(fn, exc, _diagnose_transform, sf, recipe, num_groups, is_sfa)


def _diagnose_transform(sf: Any, recipe: Any, num_groups: Any, is_sfa: Any) -> None:
    fn = "transform_sf_into_required_layout"
    tensor(fn, "sf", sf, dims=(2, 3), dtypes=("float32", "int32"))
    if not isinstance(recipe, (tuple, list)) or len(recipe) not in (2, 3):
        raise bad(fn, "recipe", "a tuple of 2 or 3 ints", recipe)
    if len(recipe) == 3 and is_sfa is None:
        raise bad(fn, "is_sfa", "True or False with a 3-element recipe", is_sfa)
    if (sf.dim() == 3) != (num_groups is not None):
        raise bad(fn, "num_groups", "the group count iff sf is 3-D", num_groups)
    caps = capabilities()
    if recipe[-1] not in caps.sf_transform_gran_k:
        raise UnsupportedFeatureError(
            fn, f"recipe {tuple(recipe)} (scale blocks {recipe[-1]} wide along K) on {caps.arch or 'this GPU'}",
            release_label(), hint=f"the build transforms {' or '.join(map(str, caps.sf_transform_gran_k))}-wide K "
                                  "blocks there (capability sf_transform_gran_k)")


#: The parameter only sgl-deep-gemm 0.2.0+ and upstream 2.8 have (see :mod:`dgcompat._params`).
_PSUM_LAYOUT = Param("psum_layout", None, "no psum layout: the per-row layout, the only one a release without it has")


def _bind_transform() -> Callable[..., Any]:
    """``impl(sf, mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast, psum_layout)``: every release has the
    first seven parameters in these positions; the result is checked for collapsed strides."""
    call = _bind_forwarding(_TRANSFORM)
    if capabilities().transform_sf_is_sfa == "bool":
        # The bundled schema takes int[] and a plain bool: None must not reach it.
        def bundled(sf: Any, mn: int, k: int, recipe: tuple[int, ...], num_groups: Any, is_sfa: Any,
                    disable_ue8m0_cast: bool, psum_layout: Any) -> Any:
            return _repair_copy(sf, call(sf, mn, k, list(recipe), num_groups, bool(is_sfa), disable_ue8m0_cast,
                                         psum_layout))
        return bundled

    def repaired(sf: Any, mn: int, k: int, recipe: tuple[int, ...], num_groups: Any, is_sfa: Any,
                 disable_ue8m0_cast: bool, psum_layout: Any) -> Any:
        return _repair_copy(sf, call(sf, mn, k, recipe, num_groups, is_sfa, disable_ue8m0_cast, psum_layout))
    return repaired


def _bind_forwarding(call: UpstreamCall) -> Callable[..., Any]:
    """The upstream function of ``call``, taking ``psum_layout`` after its declared positional arguments."""
    positional = call.positional if call.positional != ("*",) else ("sf",)
    return bind(_binding.upstream(call), call.caller, positional + ("psum_layout",), len(positional), (_PSUM_LAYOUT,),
                {}, release_label())


def _scale_argument(fn: str, sf: Any, a: Any) -> Any:
    """The scale tensor, given as ``sf`` or as ``a`` (the bundled schema's name)."""
    value = spelled(fn, "sf", sf, "a", a)
    if value is None:
        raise bad(fn, "sf", "a float32 (mn, k) or (g, mn, k) scale tensor", "nothing")
    return value


_B = _binding.Slots(
    transform_sf_into_required_layout=_bind_transform,
    get_mn_major_tma_aligned_tensor=lambda: _bind_layout(_MN_MAJOR),
    get_mn_major_tma_aligned_packed_ue8m0_tensor=lambda: _bind_packed(),
)


def transform_scale_ue8m0(sf: torch.Tensor, mn: int) -> torch.Tensor:
    """Per-128-block float32 scales ``(.., ceil(mn/128), k)`` -> per-row packed UE8M0 int32 ``(.., mn, ceil(k/4))``.

    Broadcasts each block scale to its 128 rows, rounds up to powers of two (:func:`ceil_to_ue8m0`;
    packing keeps only exponent bytes) and packs MN-major with TMA-aligned strides.
    """
    import torch

    fn = "transform_scale_ue8m0"
    tensor(fn, "sf", sf, dims=(2, 3), dtypes=("float32",))
    if isinstance(mn, bool) or not isinstance(mn, int) or mn <= 0:
        raise bad(fn, "mn", "a positive int", mn)
    if sf.shape[-2] != -(-mn // 128):
        raise bad(fn, "sf", f"per-128-row block scales: shape[-2] == ceil({mn}/128) = {-(-mn // 128)}", sf)
    rows = torch.arange(mn, device=sf.device) // 128
    expanded = ceil_to_ue8m0(sf.index_select(-2, rows).contiguous())
    return get_mn_major_tma_aligned_packed_ue8m0_tensor(expanded)
