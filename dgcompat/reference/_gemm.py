"""The GEMMs: dense FP8 / BF16 and the grouped contiguous / masked MoE GEMMs, computed in float32."""

from __future__ import annotations

import torch
from torch import Tensor

from ..errors import BadArgumentError
from ._common import FP8
from ._common import MK_ALIGNMENT
from ._common import align_up
from ._common import describe
from ._common import need_device
from ._common import need_dtype
from ._common import need_int
from ._common import need_int_tensor
from ._common import need_pair
from ._common import need_shape
from ._common import need_tensor
from ._mx import unpack_fp4
from ._scales import dequant

__all__ = ["fp8_gemm_nt", "bf16_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked"]


# ---------------------------------------------------------------------------------------------
# GEMMs


def _parse_gemm_recipe(fn: str, recipe: object) -> tuple[int | None, int | None, int]:
    if recipe is None:
        return None, None, 128
    if not isinstance(recipe, (tuple, list)) or len(recipe) != 3:
        raise BadArgumentError(fn, "recipe", "None or a (gran_m, gran_n, gran_k) tuple", describe(recipe))
    for v in recipe:
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise BadArgumentError(fn, "recipe", "positive ints", repr(recipe))
    return int(recipe[0]), int(recipe[1]), int(recipe[2])


def _parse_split_recipe(
    fn: str, recipe: object, recipe_a: object, recipe_b: object
) -> tuple[int | None, int | None, int, int]:
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
                                   describe(value))
        parsed.append((int(value[0]), int(value[1])))
    (gm, gka), (gn, gkb) = parsed
    return gm, gn, gka, gkb


def _check_compile_options(fn: str, compiled_dims: object, disable_ue8m0_cast: object = False) -> None:
    """``compiled_dims`` picks which sizes a JIT kernel is specialised for (results do not depend on it);
    ``disable_ue8m0_cast`` keeps float32 scales, which is what the reference always computes with."""
    if not isinstance(compiled_dims, str) or not set(compiled_dims) <= set("mnk"):
        raise BadArgumentError(fn, "compiled_dims", "a str of the letters m, n, k (e.g. 'nk' or '')",
                               describe(compiled_dims))
    if not isinstance(disable_ue8m0_cast, bool):
        raise BadArgumentError(fn, "disable_ue8m0_cast", "a bool", describe(disable_ue8m0_cast))


def _fp8_operand(
    fn: str, name: str, pair: object, rank: int, gran_mn: int | None, gran_k: int
) -> Tensor:
    """An FP8 operand, or packed FP4 (int8, two e2m1 values per byte, low nibble first: upstream's kPackedFP4) with a
    32-wide K recipe (``recipe_a`` / ``recipe_b`` ``(gran_mn, 32)``, SGLang's DeepSeek-V4 FP4 experts), dequantized
    to float32 ``(.., K)``."""
    data, sf = need_pair(fn, name, pair)
    need_dtype(fn, f"{name}[0]", data, (FP8, torch.int8))
    if data.dim() != rank:
        raise BadArgumentError(fn, f"{name}[0]", f"a {rank}-D tensor", describe(data))
    need_device(fn, f"{name}[1]", sf, data.device)
    if data.dtype == torch.int8:
        if gran_k != 32:
            raise BadArgumentError(fn, f"recipe_{name}" if name in ("a", "b") else "recipe",
                                   "a 32-wide K block for a packed FP4 operand, e.g. (1, 32)", f"K granularity {gran_k}")
        data = unpack_fp4(data)
    return dequant(fn, name, data, sf, gran_mn=gran_mn, gran_k=gran_k, strict_gran=gran_mn is not None)


def _check_out(fn: str, d: object, shape: tuple[int, ...], device: torch.device, *, grouped: bool = False) -> Tensor:
    """``d`` as every release takes it: N-major (``stride(-1) == 1``), bfloat16 (or float32 for the dense GEMMs)."""
    d = need_tensor(fn, "d", d)
    need_dtype(fn, "d", d, (torch.bfloat16,) if grouped else (torch.bfloat16, torch.float32))
    need_shape(fn, "d", d, shape)
    need_device(fn, "d", d, device)
    if d.stride(-1) != 1 and d.shape[-1] != 1:
        raise BadArgumentError(fn, "d", "N-major (d.stride(-1) == 1)", f"{describe(d)} with strides {tuple(d.stride())}")
    return d


def _need_contiguous(fn: str, name: str, t: Tensor) -> None:
    if not t.is_contiguous():
        raise BadArgumentError(fn, name, "a contiguous tensor", f"{describe(t)} with strides {tuple(t.stride())}")


def _gemm_into(fn: str, a32: Tensor, b32: Tensor, d: Tensor, c: Tensor | None) -> None:
    m, n = a32.shape[0], b32.shape[0]
    if a32.shape[1] != b32.shape[1]:
        raise BadArgumentError(fn, "b", f"K = {a32.shape[1]} columns", f"K = {b32.shape[1]}")
    d = _check_out(fn, d, (m, n), a32.device)
    out = a32 @ b32.T
    if c is not None:
        # D = C + A @ B accumulates in float32: both are float32 then.
        c = need_tensor(fn, "c", c)
        need_dtype(fn, "c", c, (torch.float32,))
        need_shape(fn, "c", c, (m, n))
        need_dtype(fn, "d", d, (torch.float32,))
        need_device(fn, "c", c, a32.device)
        out = out + c.to(torch.float32)
    d.copy_(out)


def fp8_gemm_nt(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], d: Tensor, c: Tensor | None = None,
                recipe: tuple[int, int, int] | None = None, recipe_a: tuple[int, int] | None = None,
                recipe_b: tuple[int, int] | None = None, compiled_dims: str = "nk",
                disable_ue8m0_cast: bool = False) -> None:
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
    need_device(fn, "b[0]", b32, a32.device)
    _gemm_into(fn, a32, b32, d, c)


def bf16_gemm_nt(a: Tensor, b: Tensor, d: Tensor, c: Tensor | None = None, compiled_dims: str = "nk") -> None:
    """``d = a @ b.T (+ c)`` with float32 accumulation.

    ``a``: ``(M, K)`` bfloat16, ``b``: ``(N, K)`` bfloat16, ``d``: ``(M, N)`` bfloat16 or float32,
    ``c``: optional ``(M, N)`` float accumulator; ``compiled_dims`` does not change the result.
    """
    fn = "bf16_gemm_nt"
    _check_compile_options(fn, compiled_dims)
    a = need_tensor(fn, "a", a)
    b = need_tensor(fn, "b", b)
    need_dtype(fn, "a", a, (torch.bfloat16,))
    need_dtype(fn, "b", b, (torch.bfloat16,))
    if a.dim() != 2:
        raise BadArgumentError(fn, "a", "a 2-D (M, K) tensor", describe(a))
    if b.dim() != 2:
        raise BadArgumentError(fn, "b", "a 2-D (N, K) tensor", describe(b))
    need_device(fn, "b", b, a.device)
    _gemm_into(fn, a.to(torch.float32), b.to(torch.float32), d, c)


def _check_psum_options(fn: str, use_psum_layout: object, ensure_zero_padding: object, expected_m: object) -> None:
    for name, value in (("use_psum_layout", use_psum_layout), ("ensure_zero_padding", ensure_zero_padding)):
        if not isinstance(value, bool):
            raise BadArgumentError(fn, name, "a bool", describe(value))
    if expected_m is not None:
        need_int(fn, "expected_m_for_psum_layout", expected_m, minimum=1)


def _grouped_psum(fn: str, a32: Tensor, b32: Tensor, d: Tensor, ends: object) -> None:
    """The psum layout: ``ends`` int32 ``(G,)``; group ``g`` owns rows ``[align(ends[g-1]), ends[g])``
    (group 0 from row 0; ``align`` to :data:`MK_ALIGNMENT`).

    Only the groups' rows are written; the alignment gaps between groups are unspecified (kernels may
    write them). ``ensure_zero_padding`` is the caller's promise that ``a``'s gap rows are zero, which
    lets kernels compute whole blocks: it never changes the groups' rows, so it is accepted either way.
    """
    m, g = a32.shape[0], b32.shape[0]
    idx = need_int_tensor(fn, "m_indices", ends)
    need_shape(fn, "m_indices", idx, (g,))
    _need_contiguous(fn, "m_indices", idx)
    need_device(fn, "m_indices", idx, a32.device)
    align = MK_ALIGNMENT
    start = 0
    for group, end in enumerate(idx.to(torch.int64).tolist()):
        if end < start or end > m:
            raise BadArgumentError(fn, "m_indices", f"group end rows in [0, {m}], each at or after the aligned "
                                   f"end of the group before (psum layout; group {group} starts at row {start})",
                                   f"{end}")
        if end > start:
            d[start:end] = (a32[start:end] @ b32[group].T).to(d.dtype)
        start = align_up(end, align)


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
    idx = need_int_tensor(fn, "m_indices", m_indices)
    need_shape(fn, "m_indices", idx, (m,))
    _need_contiguous(fn, "m_indices", idx)
    need_device(fn, "m_indices", idx, a32.device)
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
    mm = need_int_tensor(fn, "masked_m", masked_m)
    need_shape(fn, "masked_m", mm, (g,))
    _need_contiguous(fn, "masked_m", mm)
    need_device(fn, "masked_m", mm, a32.device)
    need_int(fn, "expected_m", expected_m, minimum=1)
    mm64 = mm.to(torch.int64)
    if g and bool(((mm64 < 0) | (mm64 > m_max)).any()):
        raise BadArgumentError(fn, "masked_m", f"values in [0, {m_max}]", f"values in [{int(mm64.min())}, {int(mm64.max())}]")
    live = torch.arange(m_max, device=a32.device).unsqueeze(0) < mm64.unsqueeze(1)
    if not bool(live.any()):
        return
    out = torch.bmm(a32, b32.transpose(1, 2))
    d[live] = out[live].to(d.dtype)


def m_grouped_fp8_gemm_nt_contiguous(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], d: Tensor, m_indices: Tensor,
                                     recipe: tuple[int, int, int] | None = None,
                                     recipe_a: tuple[int, int] | None = None, recipe_b: tuple[int, int] | None = None,
                                     compiled_dims: str = "nk", disable_ue8m0_cast: bool = False,
                                     use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                     expected_m_for_psum_layout: int | None = None) -> None:
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


def m_grouped_fp8_gemm_nt_masked(a: tuple[Tensor, Tensor], b: tuple[Tensor, Tensor], d: Tensor, masked_m: Tensor,
                                 expected_m: int, recipe: tuple[int, int, int] | None = None,
                                 recipe_a: tuple[int, int] | None = None, recipe_b: tuple[int, int] | None = None,
                                 compiled_dims: str = "nk", disable_ue8m0_cast: bool = False) -> None:
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
    t = need_tensor(fn, name, t)
    need_dtype(fn, name, t, (torch.bfloat16,))
    if t.dim() != rank:
        raise BadArgumentError(fn, name, f"a {rank}-D tensor", describe(t))
    return t.to(torch.float32)


def m_grouped_bf16_gemm_nt_contiguous(a: Tensor, b: Tensor, d: Tensor, m_indices: Tensor, compiled_dims: str = "nk",
                                      use_psum_layout: bool = False, ensure_zero_padding: bool = True,
                                      expected_m_for_psum_layout: int | None = None) -> None:
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
    need_device(fn, "b", b32, a32.device)
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
    need_device(fn, "b", b32, a32.device)
    _grouped_masked(fn, a32, b32, d, masked_m, expected_m)


