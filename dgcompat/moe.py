"""Grouped GEMMs of a MoE runner: contiguous (rows tagged by expert) and masked (per-expert slabs).

What hides behind one signature here:

- the fourth argument is ``m_indices`` in the bundled copies and ``grouped_layout`` in every
  sgl-deep-gemm release (a keyword call is a TypeError there), so it is always passed by position;
- the masked GEMM is ``m_grouped_fp8_gemm_nt_masked`` from sgl-deep-gemm 0.2.0 and only the
  ``fp8_m_grouped_gemm_nt_masked`` alias before; it returns None, a raw native value or a
  ``(block_m, threshold)`` tuple depending on the release: dgcompat returns None unless an
  overlap was asked for;
- the overlapped (signal) masked GEMM exists only in the bundled copies.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any
from typing import Callable
from typing import Sequence

from . import _binding
from . import env
from ._calls import UpstreamCall
from ._checks import bad
from ._checks import check_split_recipes
from ._checks import contiguous
from ._checks import k_major
from ._checks import operand_pair
from ._checks import release_label
from ._checks import same_device
from ._checks import spelled
from ._checks import tensor
from ._checks import translate
from ._checks import unsupported
from ._params import RELEASE_DEFAULT
from ._params import Param
from ._params import bind_call
from .errors import DgcompatError
from .errors import UnsupportedFeatureError
from .knobs import get_mk_alignment_for_contiguous_layout
from .knobs import num_sms
from .table import capabilities

if TYPE_CHECKING:
    import torch

__all__ = [
    "MaskedOverlap", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
]

Recipe = Sequence[int]

_CONTIGUOUS = ("a", "b", "d", "grouped_layout|m_indices")
_MASKED = ("a", "b", "d", "masked_m", "expected_m")

#: Parameters after the ones every release has in the same positions (see :mod:`dgcompat._params`), in
#: the newest release's order. The fast call passes all but epilogue (None unless given).
_RECIPES = (Param("recipe_a", None, "no split recipe: the release infers it from recipe / the scale shapes"),
            Param("recipe_b", None, "no split recipe: the release infers it from recipe / the scale shapes"))
_DIMS = Param("compiled_dims", RELEASE_DEFAULT, "None: the release's own default")
_DISABLE = Param("disable_ue8m0_cast", False, "False is every release's behaviour (cast where the arch needs it)")
_PSUM = (Param("use_psum_layout", False, "the per-row layout is the only one a release without it has"),
         Param("ensure_zero_padding", True, "0.1.4 / upstream 2.6.1 inserted it defaulting to the earlier behaviour"),
         Param("expected_m_for_psum_layout", None, "a tuning hint of the psum layout only"))
_EPILOGUE = (Param("epilogue", None, "no epilogue: the plain store, as on releases without epilogue"),)
_FP8_CONTIG = _RECIPES + (_DIMS, _DISABLE) + _PSUM
_BF16_CONTIG = (_DIMS,) + _PSUM
_FP8_MASKED = _RECIPES + (_DIMS, _DISABLE)
_BF16_MASKED = (_DIMS,)


def _names(params: tuple[Param, ...]) -> tuple[str, ...]:
    return tuple(p.name for p in params)


#: The upstream calls of this module (see :mod:`dgcompat._calls`). The layout tensor always goes by
#: position (m_indices / grouped_layout, named differently), and so does the recipe.
CALLS: tuple[UpstreamCall, ...] = (
    UpstreamCall("deep_gemm.m_grouped_fp8_gemm_nt_contiguous", "dgcompat.m_grouped_fp8_gemm_nt_contiguous",
                 _CONTIGUOUS + ("recipe",), forwarded=_names(_FP8_CONTIG + _EPILOGUE)),
    UpstreamCall("deep_gemm.m_grouped_bf16_gemm_nt_contiguous", "dgcompat.m_grouped_bf16_gemm_nt_contiguous",
                 _CONTIGUOUS, selected_by=("bf16_grouped_contiguous", True),
                 forwarded=_names(_BF16_CONTIG + _EPILOGUE)),
    UpstreamCall("deep_gemm.m_grouped_fp8_gemm_nt_masked", "dgcompat.m_grouped_fp8_gemm_nt_masked",
                 _MASKED + ("recipe",), selected_by=("masked_gemm", "m_grouped_fp8_gemm_nt_masked"),
                 forwarded=_names(_FP8_MASKED + _EPILOGUE)),
    UpstreamCall("deep_gemm.fp8_m_grouped_gemm_nt_masked", "dgcompat.m_grouped_fp8_gemm_nt_masked",
                 _MASKED + ("recipe",), selected_by=("masked_gemm", "fp8_m_grouped_gemm_nt_masked"),
                 forwarded=_names(_FP8_MASKED + _EPILOGUE)),
    # The overlapped (signal) launch of the bundled copies reads the (block_m, threshold) result.
    UpstreamCall("deep_gemm.m_grouped_fp8_gemm_nt_masked", "dgcompat.m_grouped_fp8_gemm_nt_masked",
                 _MASKED + ("recipe",), ("max_block_n", "enable_overlap", "signal"), uses_result=True,
                 selected_by=("masked_overlap", True), forwarded=_names(_FP8_MASKED + _EPILOGUE)),
    UpstreamCall("deep_gemm.m_grouped_bf16_gemm_nt_masked", "dgcompat.m_grouped_bf16_gemm_nt_masked", _MASKED,
                 passthrough=True, selected_by=("bf16_grouped_masked", True),
                 alternatives=("deep_gemm.bf16_m_grouped_gemm_nt_masked",), forwarded=_names(_BF16_MASKED + _EPILOGUE)),
)
_CONTIG_FP8, _CONTIG_BF16, _MASKED_FP8, _MASKED_FP8_ALIAS, _MASKED_OVERLAP, _MASKED_BF16 = CALLS


@dataclass(frozen=True)
class MaskedOverlap:
    """Ask the masked GEMM to signal finished blocks so a combine can start early (bundled copies only).

    ``signal``: int32 (Hopper) / uint32 tensor the kernel writes per finished block; ``num_sms``: SMs the
    GEMM may use (the rest run the combine), None keeps the current count; ``max_block_n``: largest N tile.
    """

    signal: Any
    num_sms: int | None = None
    max_block_n: int = 256


#: The release's compiled_dims default per stable function, read when its slot binds.
_D = _binding.Defaults("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_contiguous",
                       "m_grouped_fp8_gemm_nt_masked", "m_grouped_bf16_gemm_nt_masked")


def _selected(calls: tuple[UpstreamCall, ...], what: str, name: str, params: tuple[Param, ...],
              hint: str | None = None) -> Callable[..., Any]:
    """The upstream function of the first declaration the table selects for this release, bound for a
    positional call passing ``params`` after the declared positional arguments
    (:func:`dgcompat._params.bind`), else a stand-in raising UnsupportedFeatureError."""
    caps = capabilities()
    for call in calls:
        if call.in_effect(caps):
            return bind_call(_binding.upstream(call), call, params, _D, name, caps.compiled_dims_default,
                             release_label())
    setattr(_D, name, "")  # never passed on: the stand-in refuses every call
    return unsupported(name, what, hint=hint)


def _bind_contiguous(call: UpstreamCall, params: tuple[Param, ...]) -> Callable[..., Any]:
    name = call.caller.removeprefix("dgcompat.")
    impl = _selected((call,), "the grouped contiguous GEMM", name, params)
    if not env.debug():
        return impl
    return _with_value_checks_contiguous(name, impl, len(call.positional) - 4 + _names(params).index("use_psum_layout"))


def _bind_masked(calls: tuple[UpstreamCall, ...], params: tuple[Param, ...]) -> Callable[..., Any]:
    name = calls[0].caller.removeprefix("dgcompat.")
    impl = _selected(calls, "the grouped masked GEMM", name, params)
    return _with_value_checks_masked(name, impl) if env.debug() else impl


_FP8_MASKED_CALLS = (_MASKED_FP8, _MASKED_FP8_ALIAS)
_OVERLAP = "overlap (enable_overlap/max_block_n/signal)"
_OVERLAP_HINT = "only the deep_gemm bundled in sgl-kernel / sglang-kernel<=0.4.2 has it, on SM90"
_B = _binding.Slots(
    m_grouped_fp8_gemm_nt_contiguous=lambda: _bind_contiguous(_CONTIG_FP8, _FP8_CONTIG),
    m_grouped_fp8_gemm_nt_contiguous_full=lambda: _bind_contiguous(_CONTIG_FP8, _FP8_CONTIG + _EPILOGUE),
    m_grouped_bf16_gemm_nt_contiguous=lambda: _bind_contiguous(_CONTIG_BF16, _BF16_CONTIG),
    m_grouped_bf16_gemm_nt_contiguous_full=lambda: _bind_contiguous(_CONTIG_BF16, _BF16_CONTIG + _EPILOGUE),
    m_grouped_fp8_gemm_nt_masked=lambda: _bind_masked(_FP8_MASKED_CALLS, _FP8_MASKED),
    m_grouped_fp8_gemm_nt_masked_full=lambda: _bind_masked(_FP8_MASKED_CALLS, _FP8_MASKED + _EPILOGUE),
    m_grouped_bf16_gemm_nt_masked=lambda: _bind_masked((_MASKED_BF16,), _BF16_MASKED),
    m_grouped_bf16_gemm_nt_masked_full=lambda: _bind_masked((_MASKED_BF16,), _BF16_MASKED + _EPILOGUE),
    overlapped=lambda: _selected((_MASKED_OVERLAP,), _OVERLAP, "m_grouped_fp8_gemm_nt_masked",
                                 _FP8_MASKED + _EPILOGUE, _OVERLAP_HINT),
)


# --- opt-in value checks (DGCOMPAT_DEBUG=1): they read device values, i.e. synchronize ----------

def _with_value_checks_contiguous(name: str, impl: Callable[..., Any], psum_at: int) -> Callable[..., Any]:
    """``psum_at``: where use_psum_layout sits among the arguments after m_indices."""
    def checked(a: Any, b: Any, d: Any, m_indices: Any, *rest: Any, **kw: Any) -> Any:
        groups = (b[0] if isinstance(b, (tuple, list)) else b).shape[0]
        if len(rest) > psum_at and rest[psum_at]:
            rows = (a[0] if isinstance(a, (tuple, list)) else a).shape[0]
            ends = m_indices.to("cpu").tolist() if m_indices.numel() else []
            if any(e < 0 or e > rows for e in ends) or ends != sorted(ends):
                raise bad(name, "m_indices", f"non-decreasing group end rows in [0, {rows}] (psum layout)",
                          f"values {ends[:8]}")
        elif m_indices.numel():
            lo, hi = int(m_indices.min()), int(m_indices.max())
            if lo < -1 or hi >= groups:
                raise bad(name, "m_indices", f"expert ids in [0, {groups}) or -1", f"values in [{lo}, {hi}]")
        return impl(a, b, d, m_indices, *rest, **kw)
    return checked


def _with_value_checks_masked(name: str, impl: Callable[..., Any]) -> Callable[..., Any]:
    def checked(a: Any, b: Any, d: Any, masked_m: Any, expected_m: Any, *rest: Any, **kw: Any) -> Any:
        m_max = (a[0] if isinstance(a, (tuple, list)) else a).shape[1]
        if masked_m.numel():
            lo, hi = int(masked_m.min()), int(masked_m.max())
            if lo < 0 or hi > m_max:
                raise bad(name, "masked_m", f"counts in [0, {m_max}]", f"values in [{lo}, {hi}]")
        return impl(a, b, d, masked_m, expected_m, *rest, **kw)
    return checked


def _layout_argument(fn: str, m_indices: Any, grouped_layout: Any) -> Any:
    """The layout tensor, given as ``m_indices`` (the bundled copies' name) or ``grouped_layout`` (everyone else's)."""
    value = spelled(fn, "m_indices", m_indices, "grouped_layout", grouped_layout)
    if value is None:
        raise bad(fn, "m_indices", "the int32 layout tensor (as m_indices or grouped_layout)", "nothing")
    return value


# --- diagnosis after an upstream rejection ---------------------------------------------------

def _operands(fn: str, a: Any, b: Any, fp8: bool) -> tuple[Any, Any, int, int]:
    """``(a_data, b_data, K of a, K of b)``: FP8 operands are checked ``(data, scales)`` pairs (K from the pair,
    FP4 packing included), BF16 ones bfloat16 tensors (K their last dimension)."""
    if fp8:
        a_data, _, k = operand_pair(fn, "a", a)
        b_data, _, kb = operand_pair(fn, "b", b)
        return a_data, b_data, k, kb
    a_data = tensor(fn, "a", a, dtypes=("bfloat16",))
    b_data = tensor(fn, "b", b, dtypes=("bfloat16",))
    return a_data, b_data, a_data.shape[-1], b_data.shape[-1]


def _diagnose_contiguous(fn: str, a: Any, b: Any, d: Any, m_indices: Any, fp8: bool, psum: bool = False) -> None:
    a_data, b_data, k, kb = _operands(fn, a, b, fp8)
    tensor(fn, "a", a_data, dims=(2,))
    tensor(fn, "b", b_data, dims=(3,), what="a (G, N, K) tensor (K/2 bytes for FP4)")
    tensor(fn, "d", d, dims=(2,), dtypes=("bfloat16",))
    tensor(fn, "m_indices", m_indices, dims=(1,), dtypes=("int32",))
    m = a_data.shape[0]
    g, n = b_data.shape[:2]
    if kb != k:
        raise bad(fn, "b", f"(G, N, K={k})", b_data)
    if tuple(d.shape) != (m, n):
        raise bad(fn, "d", f"shape (M_total, N) = ({m}, {n})", d)
    if psum:
        if m_indices.shape[0] != g:
            raise bad(fn, "m_indices", f"one end row per group (psum layout): shape ({g},)", m_indices)
    elif m_indices.shape[0] != m:
        raise bad(fn, "m_indices", f"one expert id per row of a: shape ({m},)", m_indices)
    _layouts(fn, a_data, b_data, d)
    contiguous(fn, "m_indices", m_indices)
    same_device(fn, "d", d, a=a_data, b=b_data, m_indices=m_indices)
    if psum:
        return
    try:
        align = get_mk_alignment_for_contiguous_layout()
    except Exception:
        align = 128
    if m % align:
        raise bad(fn, "a", f"a row count that is a multiple of the contiguous-layout alignment ({align})", a_data,
                  hint="pad each expert's rows to get_mk_alignment_for_contiguous_layout() and tag padding rows -1")


def _diagnose_masked(fn: str, a: Any, b: Any, d: Any, masked_m: Any, expected_m: Any, fp8: bool) -> None:
    a_data, b_data, k, kb = _operands(fn, a, b, fp8)
    tensor(fn, "a", a_data, dims=(3,), what="a (G, M_max, K) tensor")
    tensor(fn, "b", b_data, dims=(3,), what="a (G, N, K) tensor (K/2 bytes for FP4)")
    tensor(fn, "d", d, dims=(3,), dtypes=("bfloat16",))
    tensor(fn, "masked_m", masked_m, dims=(1,), dtypes=("int32",))
    g, m = a_data.shape[:2]
    if (b_data.shape[0], kb) != (g, k):
        raise bad(fn, "b", f"(G={g}, N, K={k})", b_data)
    if tuple(d.shape) != (g, m, b_data.shape[1]):
        raise bad(fn, "d", f"shape (G, M_max, N) = ({g}, {m}, {b_data.shape[1]})", d)
    if masked_m.shape[0] != g:
        raise bad(fn, "masked_m", f"one row count per group: shape ({g},)", masked_m)
    if isinstance(expected_m, bool) or not isinstance(expected_m, int) or expected_m < 1:
        raise bad(fn, "expected_m", "a positive int (typical rows per group)", expected_m)
    _layouts(fn, a_data, b_data, d)
    contiguous(fn, "masked_m", masked_m)
    same_device(fn, "d", d, a=a_data, b=b_data, masked_m=masked_m)


def _layouts(fn: str, a_data: Any, b_data: Any, d: Any) -> None:
    k_major(fn, "a", a_data)
    k_major(fn, "b", b_data)
    k_major(fn, "d", d, what="N-major (d.stride(-1) == 1)")


def _contiguous_failed(fn: str, exc: BaseException, a: Any, b: Any, d: Any, m_indices: Any, fp8: bool,
                       psum: bool) -> None:
    if _rows(a) == 0 and not isinstance(exc, DgcompatError):
        # An empty batch is a no-op on every release; a malformed one is still an error.
        _diagnose_contiguous(fn, a, b, d, m_indices, fp8, psum)
        return
    translate(fn, exc, _diagnose_contiguous, fn, a, b, d, m_indices, fp8, psum)


def _rows(a: Any) -> int:
    data = a[0] if isinstance(a, (tuple, list)) else a
    return int(data.shape[0]) if hasattr(data, "shape") and len(data.shape) else -1


# --- the stable functions ---------------------------------------------------------------------

def m_grouped_fp8_gemm_nt_contiguous(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor],
                                     d: torch.Tensor, m_indices: torch.Tensor | None = None,
                                     recipe: Recipe | None = None, recipe_a: Recipe | None = None,
                                     recipe_b: Recipe | None = None, compiled_dims: str | None = None,
                                     disable_ue8m0_cast: bool = False, use_psum_layout: bool = False,
                                     ensure_zero_padding: bool = True, expected_m_for_psum_layout: int | None = None,
                                     epilogue: Any = None, *, grouped_layout: torch.Tensor | None = None) -> None:
    """Grouped FP8 GEMM over rows tagged by expert: ``d[i] = a[i] @ b[m_indices[i]].T``.

    - ``a``: ``(fp8 (M_total, K), sfa float32 (M_total, ceil(K/128)) or packed UE8M0)``; each expert's rows
      contiguous and padded to :func:`get_mk_alignment_for_contiguous_layout` (padding rows tagged -1).
    - ``b``: ``(fp8 (G, N, K), sfb float32 (G, ceil(N/128), ceil(K/128)))``.
    - ``d``: bfloat16 ``(M_total, N)``; ``m_indices``: int32 ``(M_total,)`` expert id per row or -1 (required;
      ``grouped_layout=``, its name in sgl-deep-gemm and upstream, is the same parameter).
    - ``use_psum_layout=True``: ``m_indices`` is instead int32 ``(G,)``, the end row of each group; group
      ``g`` owns rows ``[align(m_indices[g-1]), m_indices[g])`` (``align`` to the contiguous-layout
      alignment, group 0 starts at row 0); ``expected_m_for_psum_layout`` is its tuning hint;
      ``ensure_zero_padding=True`` promises that ``a``'s padding rows are zero (their ``d`` rows are then
      computed, i.e. zero). Rows outside every group are unspecified.
    - ``recipe_a`` / ``recipe_b`` / ``compiled_dims`` / ``disable_ue8m0_cast`` / ``epilogue``: as in
      :func:`dgcompat.fp8_gemm_nt`; a parameter the release lacks is refused unless it has its default.
    An empty ``a`` (M_total == 0) is a no-op on every release.
    """
    if grouped_layout is not None or m_indices is None:
        m_indices = _layout_argument("m_grouped_fp8_gemm_nt_contiguous", m_indices, grouped_layout)
    if recipe_a is not None or recipe_b is not None:
        check_split_recipes("m_grouped_fp8_gemm_nt_contiguous", recipe_a, recipe_b)
    try:
        if compiled_dims is None and (compiled_dims := _D.m_grouped_fp8_gemm_nt_contiguous) is None:
            compiled_dims = _D.first(_B, "m_grouped_fp8_gemm_nt_contiguous")
        if epilogue is None:
            _B.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, recipe, recipe_a, recipe_b, compiled_dims,
                                                disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
                                                expected_m_for_psum_layout)
        else:
            _B.m_grouped_fp8_gemm_nt_contiguous_full(a, b, d, m_indices, recipe, recipe_a, recipe_b, compiled_dims,
                                                     disable_ue8m0_cast, use_psum_layout, ensure_zero_padding,
                                                     expected_m_for_psum_layout, epilogue)
    except Exception as exc:
        _contiguous_failed("m_grouped_fp8_gemm_nt_contiguous", exc, a, b, d, m_indices, True, use_psum_layout)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      m_indices: torch.Tensor | None = None, compiled_dims: str | None = None,
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: int | None = None, epilogue: Any = None, *,
                                      grouped_layout: torch.Tensor | None = None) -> None:
    """BF16 version of :func:`m_grouped_fp8_gemm_nt_contiguous`: ``a`` ``(M_total, K)``, ``b`` ``(G, N, K)``
    bfloat16, ``d`` ``(M_total, N)`` bfloat16, ``m_indices`` int32 ``(M_total,)`` (or ``(G,)`` end rows with
    ``use_psum_layout=True``; ``grouped_layout=`` is the same parameter)."""
    if grouped_layout is not None or m_indices is None:
        m_indices = _layout_argument("m_grouped_bf16_gemm_nt_contiguous", m_indices, grouped_layout)
    try:
        if compiled_dims is None and (compiled_dims := _D.m_grouped_bf16_gemm_nt_contiguous) is None:
            compiled_dims = _D.first(_B, "m_grouped_bf16_gemm_nt_contiguous")
        if epilogue is None:
            _B.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, compiled_dims, use_psum_layout,
                                                 ensure_zero_padding, expected_m_for_psum_layout)
        else:
            _B.m_grouped_bf16_gemm_nt_contiguous_full(a, b, d, m_indices, compiled_dims, use_psum_layout,
                                                      ensure_zero_padding, expected_m_for_psum_layout, epilogue)
    except Exception as exc:
        _contiguous_failed("m_grouped_bf16_gemm_nt_contiguous", exc, a, b, d, m_indices, False, use_psum_layout)


def m_grouped_fp8_gemm_nt_masked(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor],
                                 d: torch.Tensor, masked_m: torch.Tensor, expected_m: int,
                                 recipe: Recipe | None = None, recipe_a: Recipe | None = None,
                                 recipe_b: Recipe | None = None, compiled_dims: str | None = None,
                                 disable_ue8m0_cast: bool = False, epilogue: Any = None, *,
                                 overlap: MaskedOverlap | None = None, max_block_n: int = 256,
                                 enable_overlap: bool = False,
                                 signal: torch.Tensor | None = None) -> tuple[int, int] | None:
    """Grouped FP8 GEMM over per-expert slabs: for each group ``g`` only rows ``[0, masked_m[g])``.

    - ``a``: ``(fp8 (G, M_max, K), sfa float32 (G, M_max, ceil(K/128)))``; ``b``: ``(fp8 (G, N, K),
      sfb (G, ceil(N/128), ceil(K/128)))``; ``d``: bfloat16 ``(G, M_max, N)``; ``masked_m``: int32 ``(G,)``;
      ``expected_m``: typical rows per group (a tuning hint).
    - ``recipe_a`` / ``recipe_b`` / ``compiled_dims`` / ``disable_ue8m0_cast`` / ``epilogue``: as in
      :func:`dgcompat.fp8_gemm_nt`.
    - Returns None, or ``(block_m, threshold)`` when ``overlap`` is given (bundled copies only; elsewhere
      :class:`~dgcompat.errors.UnsupportedFeatureError`).
    - ``enable_overlap=True, signal=..., max_block_n=...`` are the bundled copies' own keywords for the same
      launch: they mean ``overlap=MaskedOverlap(signal, max_block_n=max_block_n)``. Without
      ``enable_overlap`` the other two change nothing, as upstream.
    """
    if recipe_a is not None or recipe_b is not None:
        check_split_recipes("m_grouped_fp8_gemm_nt_masked", recipe_a, recipe_b)
    if overlap is not None or enable_overlap:
        return _masked_overlap(a, b, d, masked_m, expected_m, recipe, recipe_a, recipe_b, compiled_dims,
                               disable_ue8m0_cast, epilogue,
                               overlap if overlap is not None else _raw_overlap(signal, max_block_n))
    try:
        if compiled_dims is None and (compiled_dims := _D.m_grouped_fp8_gemm_nt_masked) is None:
            compiled_dims = _D.first(_B, "m_grouped_fp8_gemm_nt_masked")
        if epilogue is None:
            _B.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe, recipe_a, recipe_b, compiled_dims,
                                            disable_ue8m0_cast)
        else:
            _B.m_grouped_fp8_gemm_nt_masked_full(a, b, d, masked_m, expected_m, recipe, recipe_a, recipe_b,
                                                 compiled_dims, disable_ue8m0_cast, epilogue)
    except Exception as exc:
        translate("m_grouped_fp8_gemm_nt_masked", exc, _diagnose_masked, "m_grouped_fp8_gemm_nt_masked", a, b, d,
                  masked_m, expected_m, True)
    return None


fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked


def _raw_overlap(signal: Any, max_block_n: Any) -> MaskedOverlap:
    fn = "m_grouped_fp8_gemm_nt_masked"
    if signal is None:
        raise bad(fn, "signal", "the signal tensor when enable_overlap=True", signal)
    if isinstance(max_block_n, bool) or not isinstance(max_block_n, int) or max_block_n <= 0:
        raise bad(fn, "max_block_n", "a positive int", max_block_n)
    return MaskedOverlap(signal, max_block_n=max_block_n)


def _masked_overlap(a: Any, b: Any, d: Any, masked_m: Any, expected_m: Any, recipe: Any, recipe_a: Any,
                    recipe_b: Any, compiled_dims: Any, disable_ue8m0_cast: Any, epilogue: Any,
                    overlap: MaskedOverlap) -> tuple[int, int]:
    fn = "m_grouped_fp8_gemm_nt_masked"
    if not isinstance(overlap, MaskedOverlap):
        raise bad(fn, "overlap", "None or a dgcompat.MaskedOverlap", overlap)
    if not capabilities().masked_overlap:  # refused before the SM count is touched
        raise UnsupportedFeatureError(fn, _OVERLAP, release_label(), hint=_OVERLAP_HINT)
    try:
        impl = _B.bound("overlapped")
        if compiled_dims is None:
            compiled_dims = _D.m_grouped_fp8_gemm_nt_masked
        with num_sms(overlap.num_sms):
            result = impl(a, b, d, masked_m, expected_m, recipe, recipe_a, recipe_b, compiled_dims,
                          disable_ue8m0_cast, epilogue, max_block_n=overlap.max_block_n, enable_overlap=True,
                          signal=overlap.signal)
    except Exception as exc:
        translate(fn, exc, _diagnose_masked, fn, a, b, d, masked_m, expected_m, True)
    if not isinstance(result, (tuple, list)) or len(result) != 2 or None in result:
        # The launch ran without signalling (the fork signals on SM90 only): what was asked is not available.
        raise UnsupportedFeatureError(fn, _OVERLAP, release_label(),
                                      hint=f"the launch reported {result!r} instead of (block_m, threshold)")
    return int(result[0]), int(result[1])


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int, compiled_dims: str | None = None, epilogue: Any = None) -> None:
    """BF16 version of :func:`m_grouped_fp8_gemm_nt_masked` (no overlap): ``a`` ``(G, M_max, K)``, ``b``
    ``(G, N, K)`` bfloat16, ``d`` ``(G, M_max, N)`` bfloat16, ``masked_m`` int32 ``(G,)``."""
    try:
        if compiled_dims is None and (compiled_dims := _D.m_grouped_bf16_gemm_nt_masked) is None:
            compiled_dims = _D.first(_B, "m_grouped_bf16_gemm_nt_masked")
        if epilogue is None:
            _B.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims)
        else:
            _B.m_grouped_bf16_gemm_nt_masked_full(a, b, d, masked_m, expected_m, compiled_dims, epilogue)
    except Exception as exc:
        translate("m_grouped_bf16_gemm_nt_masked", exc, _diagnose_masked, "m_grouped_bf16_gemm_nt_masked", a, b, d,
                  masked_m, expected_m, False)
