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

import os
from dataclasses import dataclass
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Callable, Sequence

from . import _binding
from ._checks import bad, pair, release_label, same_device, tensor, translate, unsupported
from .errors import BadArgumentError, DgcompatError, UnsupportedFeatureError

if TYPE_CHECKING:
    import torch

__all__ = [
    "MaskedOverlap", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
]

_B = SimpleNamespace()
_binding.register_reset(_B.__dict__.clear)

Recipe = Sequence[int]


@dataclass(frozen=True)
class MaskedOverlap:
    """Ask the masked GEMM to signal finished blocks so a combine can start early (bundled copies only).

    ``signal``: int32 (Hopper) / uint32 tensor the kernel writes per finished block; ``num_sms``: SMs the
    GEMM may use (the rest run the combine), None keeps the current count; ``max_block_n``: largest N tile.
    """

    signal: Any
    num_sms: int | None = None
    max_block_n: int = 256


def _debug() -> bool:
    return os.environ.get("DGCOMPAT_DEBUG", "") not in ("", "0")


def _bind_contiguous(kind: str) -> Callable[..., Any]:
    from .table import capabilities

    name = f"m_grouped_{kind}_gemm_nt_contiguous"
    with _binding.lock:
        impl = getattr(_B, name, None)
        if impl is None:
            mod = _binding.load()
            present = kind == "fp8" or capabilities().bf16_grouped_contiguous
            impl = getattr(mod, name) if present else unsupported(name, "the grouped contiguous GEMM")
            if _debug():
                impl = _with_value_checks_contiguous(name, impl)
            setattr(_B, name, impl)
        return impl


def _bind_masked(kind: str) -> Callable[..., Any]:
    from .table import capabilities

    name = f"m_grouped_{kind}_gemm_nt_masked"
    with _binding.lock:
        impl = getattr(_B, name, None)
        if impl is None:
            caps = capabilities()
            # The table's probed answer names the function this release has (or None).
            upstream = caps.masked_gemm if kind == "fp8" else (name if caps.bf16_grouped_masked else None)
            mod = _binding.load()
            impl = getattr(mod, upstream) if upstream else unsupported(name, "the grouped masked GEMM")
            if _debug():
                impl = _with_value_checks_masked(name, impl)
            setattr(_B, name, impl)
        return impl


# --- opt-in value checks (DGCOMPAT_DEBUG=1): they read device values, i.e. synchronize ----------

def _with_value_checks_contiguous(name: str, impl: Callable[..., Any]) -> Callable[..., Any]:
    def checked(a: Any, b: Any, d: Any, m_indices: Any, *rest: Any, **kw: Any) -> Any:
        groups = (b[0] if isinstance(b, (tuple, list)) else b).shape[0]
        if m_indices.numel():
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


# --- diagnosis after an upstream rejection ---------------------------------------------------

def _diagnose_contiguous(fn: str, a: Any, b: Any, d: Any, m_indices: Any, fp8: bool) -> None:
    from .runtime import get_mk_alignment_for_contiguous_layout

    if fp8:
        a_data, a_sf = pair(fn, "a", a)
        b_data, b_sf = pair(fn, "b", b)
    else:
        a_data = tensor(fn, "a", a, dtypes=("bfloat16",))
        b_data = tensor(fn, "b", b, dtypes=("bfloat16",))
    tensor(fn, "a", a_data, dims=(2,))
    tensor(fn, "b", b_data, dims=(3,), what="a (G, N, K) tensor")
    tensor(fn, "d", d, dims=(2,), dtypes=("bfloat16",))
    tensor(fn, "m_indices", m_indices, dims=(1,), dtypes=("int32",))
    m, k = a_data.shape
    g, n, kb = b_data.shape
    if kb != k:
        raise bad(fn, "b", f"(G, N, K={k})", b_data)
    if tuple(d.shape) != (m, n):
        raise bad(fn, "d", f"shape (M_total, N) = ({m}, {n})", d)
    if m_indices.shape[0] != m:
        raise bad(fn, "m_indices", f"one expert id per row of a: shape ({m},)", m_indices)
    same_device(fn, "d", d, a=a_data, b=b_data, m_indices=m_indices)
    try:
        align = get_mk_alignment_for_contiguous_layout()
    except Exception:
        align = 128
    if m % align:
        raise bad(fn, "a", f"a row count that is a multiple of the contiguous-layout alignment ({align})", a_data,
                  hint="pad each expert's rows to get_mk_alignment_for_contiguous_layout() and tag padding rows -1")


def _diagnose_masked(fn: str, a: Any, b: Any, d: Any, masked_m: Any, expected_m: Any, fp8: bool) -> None:
    if fp8:
        a_data, _ = pair(fn, "a", a)
        b_data, _ = pair(fn, "b", b)
    else:
        a_data = tensor(fn, "a", a, dtypes=("bfloat16",))
        b_data = tensor(fn, "b", b, dtypes=("bfloat16",))
    tensor(fn, "a", a_data, dims=(3,), what="a (G, M_max, K) tensor")
    tensor(fn, "b", b_data, dims=(3,), what="a (G, N, K) tensor")
    tensor(fn, "d", d, dims=(3,), dtypes=("bfloat16",))
    tensor(fn, "masked_m", masked_m, dims=(1,), dtypes=("int32",))
    g, m, k = a_data.shape
    if tuple(b_data.shape[::2]) != (g, k):
        raise bad(fn, "b", f"(G={g}, N, K={k})", b_data)
    if tuple(d.shape) != (g, m, b_data.shape[1]):
        raise bad(fn, "d", f"shape (G, M_max, N) = ({g}, {m}, {b_data.shape[1]})", d)
    if masked_m.shape[0] != g:
        raise bad(fn, "masked_m", f"one row count per group: shape ({g},)", masked_m)
    if isinstance(expected_m, bool) or not isinstance(expected_m, int) or expected_m < 0:
        raise bad(fn, "expected_m", "a non-negative int (typical rows per group)", expected_m)
    same_device(fn, "d", d, a=a_data, b=b_data, masked_m=masked_m)


def _contiguous_failed(fn: str, exc: BaseException, a: Any, b: Any, d: Any, m_indices: Any, fp8: bool) -> None:
    if _rows(a) == 0 and not isinstance(exc, DgcompatError):
        # An empty batch is a no-op on every release; a malformed one is still an error.
        _diagnose_contiguous(fn, a, b, d, m_indices, fp8)
        return
    translate(fn, exc, _diagnose_contiguous, fn, a, b, d, m_indices, fp8)


def _rows(a: Any) -> int:
    data = a[0] if isinstance(a, (tuple, list)) else a
    return int(data.shape[0]) if hasattr(data, "shape") and len(data.shape) else -1


# --- the stable functions ---------------------------------------------------------------------

def m_grouped_fp8_gemm_nt_contiguous(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor],
                                     d: torch.Tensor, m_indices: torch.Tensor, *,
                                     recipe: Recipe | None = None) -> None:
    """Grouped FP8 GEMM over rows tagged by expert: ``d[i] = a[i] @ b[m_indices[i]].T``.

    - ``a``: ``(fp8 (M_total, K), sfa float32 (M_total, ceil(K/128)) or packed UE8M0)``; each expert's rows
      contiguous and padded to :func:`get_mk_alignment_for_contiguous_layout` (padding rows tagged -1).
    - ``b``: ``(fp8 (G, N, K), sfb float32 (G, ceil(N/128), ceil(K/128)))``.
    - ``d``: bfloat16 ``(M_total, N)``; ``m_indices``: int32 ``(M_total,)`` expert id per row or -1.
    An empty ``a`` (M_total == 0) is a no-op on every release.
    """
    try:
        impl = _B.m_grouped_fp8_gemm_nt_contiguous
    except AttributeError:
        impl = _bind_contiguous("fp8")
    try:
        impl(a, b, d, m_indices, recipe=recipe)
    except Exception as exc:
        _contiguous_failed("m_grouped_fp8_gemm_nt_contiguous", exc, a, b, d, m_indices, True)


def m_grouped_bf16_gemm_nt_contiguous(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor,
                                      m_indices: torch.Tensor) -> None:
    """BF16 version of :func:`m_grouped_fp8_gemm_nt_contiguous`: ``a`` ``(M_total, K)``, ``b`` ``(G, N, K)``
    bfloat16, ``d`` ``(M_total, N)`` bfloat16, ``m_indices`` int32 ``(M_total,)``."""
    try:
        impl = _B.m_grouped_bf16_gemm_nt_contiguous
    except AttributeError:
        impl = _bind_contiguous("bf16")
    try:
        impl(a, b, d, m_indices)
    except Exception as exc:
        _contiguous_failed("m_grouped_bf16_gemm_nt_contiguous", exc, a, b, d, m_indices, False)


def m_grouped_fp8_gemm_nt_masked(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor],
                                 d: torch.Tensor, masked_m: torch.Tensor, expected_m: int, *,
                                 recipe: Recipe | None = None,
                                 overlap: MaskedOverlap | None = None) -> tuple[int, int] | None:
    """Grouped FP8 GEMM over per-expert slabs: for each group ``g`` only rows ``[0, masked_m[g])``.

    - ``a``: ``(fp8 (G, M_max, K), sfa float32 (G, M_max, ceil(K/128)))``; ``b``: ``(fp8 (G, N, K),
      sfb (G, ceil(N/128), ceil(K/128)))``; ``d``: bfloat16 ``(G, M_max, N)``; ``masked_m``: int32 ``(G,)``;
      ``expected_m``: typical rows per group (a tuning hint).
    - Returns None, or ``(block_m, threshold)`` when ``overlap`` is given (bundled copies only; elsewhere
      :class:`~dgcompat.errors.UnsupportedFeatureError`).
    """
    if overlap is not None:
        return _masked_overlap(a, b, d, masked_m, expected_m, recipe, overlap)
    try:
        impl = _B.m_grouped_fp8_gemm_nt_masked
    except AttributeError:
        impl = _bind_masked("fp8")
    try:
        impl(a, b, d, masked_m, expected_m, recipe=recipe)
    except Exception as exc:
        translate("m_grouped_fp8_gemm_nt_masked", exc, _diagnose_masked, "m_grouped_fp8_gemm_nt_masked", a, b, d,
                  masked_m, expected_m, True)
    return None


fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked


def _masked_overlap(a: Any, b: Any, d: Any, masked_m: Any, expected_m: Any, recipe: Any,
                    overlap: MaskedOverlap) -> tuple[int, int]:
    from .table import capabilities
    from .runtime import num_sms

    fn = "m_grouped_fp8_gemm_nt_masked"
    if not isinstance(overlap, MaskedOverlap):
        raise bad(fn, "overlap", "None or a dgcompat.MaskedOverlap", overlap)
    if not capabilities().masked_overlap:
        raise UnsupportedFeatureError(fn, "overlap (enable_overlap/max_block_n/signal)", release_label(),
                                      hint="only the deep_gemm bundled in sgl-kernel / sglang-kernel<=0.4.2 has it")
    impl = _bind_masked("fp8")
    try:
        with num_sms(overlap.num_sms):
            result = impl(a, b, d, masked_m, expected_m, recipe=recipe, max_block_n=overlap.max_block_n,
                          enable_overlap=True, signal=overlap.signal)
    except Exception as exc:
        translate(fn, exc, _diagnose_masked, fn, a, b, d, masked_m, expected_m, True)
    if not isinstance(result, (tuple, list)) or len(result) != 2 or None in result:
        raise BadArgumentError(fn, "overlap", "a launch that reports (block_m, threshold)", repr(result),
                               release=release_label())
    return int(result[0]), int(result[1])


def m_grouped_bf16_gemm_nt_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                  expected_m: int) -> None:
    """BF16 version of :func:`m_grouped_fp8_gemm_nt_masked` (no overlap): ``a`` ``(G, M_max, K)``, ``b``
    ``(G, N, K)`` bfloat16, ``d`` ``(G, M_max, N)`` bfloat16, ``masked_m`` int32 ``(G,)``."""
    try:
        impl = _B.m_grouped_bf16_gemm_nt_masked
    except AttributeError:
        impl = _bind_masked("bf16")
    try:
        impl(a, b, d, masked_m, expected_m)
    except Exception as exc:
        translate("m_grouped_bf16_gemm_nt_masked", exc, _diagnose_masked, "m_grouped_bf16_gemm_nt_masked", a, b, d,
                  masked_m, expected_m, False)
