"""Dense GEMMs: ``d = a @ b.T (+ c)`` in FP8 (block-scaled) and BF16.

Every release takes ``(a, b, d, c, recipe)`` in these positions; the parameters after them (recipe_a,
recipe_b, compiled_dims, disable_ue8m0_cast, alpha, epilogue) are passed on by position where the
installed function has them there (it is then called as is), and otherwise by an adapter that emulates
or refuses what the release lacks (:mod:`dgcompat._params`). dgcompat checks nothing up front
here: deep_gemm's host code rejects every malformed call with a Python exception, which is
translated into a :class:`~dgcompat.errors.BadArgumentError` naming the argument.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import Any
from typing import Callable
from typing import Sequence

from . import _binding
from ._calls import UpstreamCall
from ._checks import bad
from ._checks import check_recipe
from ._checks import check_split_recipes
from ._checks import k_major
from ._checks import operand_pair
from ._checks import release_label
from ._checks import same_device
from ._checks import tensor
from ._checks import translate
from ._params import RELEASE_DEFAULT
from ._params import Param
from ._params import bind_call
from .table import capabilities

if TYPE_CHECKING:
    import torch

__all__ = ["fp8_gemm_nt", "bf16_gemm_nt"]

Recipe = Sequence[int]


#: Parameters after the ones every release has in the same positions (see :mod:`dgcompat._params`),
#: in the newest release's order. The fast call passes the first group whenever alpha and epilogue are
#: None; the full call passes all of them.
_FP8_PARAMS = (
    Param("recipe_a", None, "no split recipe: the release infers it from recipe / the scale shapes"),
    Param("recipe_b", None, "no split recipe: the release infers it from recipe / the scale shapes"),
    Param("compiled_dims", RELEASE_DEFAULT, "None: the release's own default ('' on sgl-deep-gemm, 'nk' upstream)"),
    Param("disable_ue8m0_cast", False, "False is every release's behaviour (cast where the arch needs it)"),
)
_TAIL = (Param("alpha", None, "no output scale: d = a @ b.T (+ c), as on releases without alpha"),
         Param("epilogue", None, "no epilogue: the plain store, as on releases without epilogue"))
_BF16_PARAMS = (_FP8_PARAMS[2],)

#: The upstream calls of this module (see :mod:`dgcompat._calls`): every release takes the leading
#: parameters in these positions; the forwarded ones follow by position where the installed function
#: has them there, else by keyword, dropped (their value is the release's behaviour) or refused.
CALLS: tuple[UpstreamCall, ...] = (
    UpstreamCall("deep_gemm.fp8_gemm_nt", "dgcompat.fp8_gemm_nt", ("a", "b", "d", "c", "recipe"), passthrough=True,
                 forwarded=tuple(p.name for p in _FP8_PARAMS + _TAIL)),
    UpstreamCall("deep_gemm.bf16_gemm_nt", "dgcompat.bf16_gemm_nt", ("a", "b", "d", "c"), passthrough=True,
                 forwarded=tuple(p.name for p in _BF16_PARAMS + _TAIL)),
)
_FP8, _BF16 = CALLS

#: The release's compiled_dims default per function, read when its slot binds.
_D = _binding.Defaults("fp8_gemm_nt", "bf16_gemm_nt")


def _bind(call: UpstreamCall, params: tuple[Param, ...]) -> Callable[..., Any]:
    return bind_call(_binding.upstream(call), call, params, _D, call.caller.removeprefix("dgcompat."),
                     capabilities().compiled_dims_default, release_label())


_B = _binding.Slots(fp8_gemm_nt=lambda: _bind(_FP8, _FP8_PARAMS), fp8_gemm_nt_full=lambda: _bind(_FP8, _FP8_PARAMS + _TAIL),
                    bf16_gemm_nt=lambda: _bind(_BF16, _BF16_PARAMS),
                    bf16_gemm_nt_full=lambda: _bind(_BF16, _BF16_PARAMS + _TAIL))


def _diagnose_fp8(a: Any, b: Any, d: Any, c: Any, recipe: Any) -> None:
    fn = "fp8_gemm_nt"
    a_data, a_sf, ka = operand_pair(fn, "a", a)
    b_data, b_sf, kb = operand_pair(fn, "b", b)
    _diagnose_common(fn, a_data, b_data, d, c, ka, kb)
    same_device(fn, "d", d, **{"a[1]": a_sf, "b[1]": b_sf})
    check_recipe(fn, recipe)
    m, k = a_data.shape
    n = b_data.shape[0]
    if a_sf.dim() != 2 or a_sf.shape[0] not in (m, -(-m // 128)):
        raise bad(fn, "a[1]", f"a scale of shape ({m}, ceil(K/128)) (per token) or (ceil(M/128), ...)", a_sf)
    if b_sf.dim() != 2 or b_sf.shape[0] not in (n, -(-n // 128)):
        raise bad(fn, "b[1]", f"a scale of shape (ceil(N/128)={-(-n // 128)}, ceil(K/128)) or ({n}, ...)", b_sf)


def _diagnose_bf16(a: Any, b: Any, d: Any, c: Any) -> None:
    tensor("bf16_gemm_nt", "a", a, dtypes=("bfloat16",))
    tensor("bf16_gemm_nt", "b", b, dtypes=("bfloat16",))
    _diagnose_common("bf16_gemm_nt", a, b, d, c)


def _diagnose_common(fn: str, a: Any, b: Any, d: Any, c: Any, k: int | None = None, kb: int | None = None) -> None:
    """``k`` / ``kb``: the logical inner sizes of a and b (twice the bytes for packed FP4); their last dims else."""
    tensor(fn, "a", a, dims=(2,))
    tensor(fn, "b", b, dims=(2,))
    tensor(fn, "d", d, dims=(2,), dtypes=("bfloat16", "float32"))
    m, n = a.shape[0], b.shape[0]
    k = a.shape[1] if k is None else k
    kb = b.shape[1] if kb is None else kb
    if kb != k:
        raise bad(fn, "b", f"(N, K={k}) like a's K", b)
    if tuple(d.shape) != (m, n):
        raise bad(fn, "d", f"shape (M, N) = ({m}, {n})", d)
    k_major(fn, "a", a)
    k_major(fn, "b", b)
    k_major(fn, "d", d, what="N-major (d.stride(-1) == 1)")
    if c is not None:
        # D = C + A @ B accumulates in float32 on every release.
        tensor(fn, "c", c, dims=(2,), dtypes=("float32",))
        if tuple(c.shape) != (m, n):
            raise bad(fn, "c", f"None or shape ({m}, {n})", c)
        tensor(fn, "d", d, dtypes=("float32",), what="a float32 tensor when c is given")
    same_device(fn, "d", d, a=a, b=b, c=c)


def fp8_gemm_nt(a: tuple[torch.Tensor, torch.Tensor], b: tuple[torch.Tensor, torch.Tensor], d: torch.Tensor,
                c: torch.Tensor | None = None, recipe: Recipe | None = None, recipe_a: Recipe | None = None,
                recipe_b: Recipe | None = None, compiled_dims: str | None = None, disable_ue8m0_cast: bool = False,
                alpha: Any = None, epilogue: Any = None) -> None:
    """``d = a @ b.T (+ c)`` with block-scaled FP8 operands, written into ``d``.

    - ``a``: ``(a_fp8, sfa)``; ``a_fp8`` float8_e4m3fn ``(M, K)`` K-major; ``sfa`` float32 ``(M, ceil(K/128))``
      per-token (1x128) scales, or int32 packed UE8M0 ``(M, ceil(K/512))`` (SM100), MN-major TMA-aligned.
    - ``b``: ``(b_fp8, sfb)``; ``b_fp8`` float8_e4m3fn ``(N, K)``; ``sfb`` float32 ``(ceil(N/128), ceil(K/128))``
      (128x128 blocks) or packed UE8M0.
    - ``d``: ``(M, N)`` bfloat16 (or float32); ``c``: optional ``(M, N)`` float32 accumulator.
    - ``recipe``: ``(gran_m, gran_n, gran_k)``; None lets deep_gemm infer it from the scale shapes.
      ``recipe_a`` / ``recipe_b``: ``(gran_mn, gran_k)`` per operand (FP4 / MX recipes) instead.
    - ``compiled_dims``: which of ``"nk"`` the JIT bakes into the kernel; None: the release's default.
    - ``disable_ue8m0_cast``: keep float32 scales (no UE8M0 cast where the architecture would cast).
    - ``alpha`` / ``epilogue``: the newest releases' output scale and epilogue; None elsewhere.
    Parameters the installed release lacks are refused with UnsupportedFeatureError unless their value
    is the default (see docs/migration.md).
    """
    if recipe_a is not None or recipe_b is not None:
        check_split_recipes("fp8_gemm_nt", recipe_a, recipe_b)
    try:
        if compiled_dims is None and (compiled_dims := _D.fp8_gemm_nt) is None:
            compiled_dims = _D.first(_B, "fp8_gemm_nt")
        if alpha is None and epilogue is None:
            _B.fp8_gemm_nt(a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)
        else:
            _B.fp8_gemm_nt_full(a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, alpha,
                                epilogue)
    except Exception as exc:
        translate("fp8_gemm_nt", exc, _diagnose_fp8, a, b, d, c, recipe)


def bf16_gemm_nt(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, c: torch.Tensor | None = None,
                 compiled_dims: str | None = None, alpha: Any = None, epilogue: Any = None) -> None:
    """``d = a @ b.T (+ c)`` in BF16: ``a`` ``(M, K)``, ``b`` ``(N, K)`` bfloat16 K-major, ``d`` ``(M, N)``
    bfloat16 or float32, ``c`` optional ``(M, N)`` float32. ``compiled_dims`` / ``alpha`` / ``epilogue`` as in
    :func:`fp8_gemm_nt`."""
    try:
        if compiled_dims is None and (compiled_dims := _D.bf16_gemm_nt) is None:
            compiled_dims = _D.first(_B, "bf16_gemm_nt")
        if alpha is None and epilogue is None:
            _B.bf16_gemm_nt(a, b, d, c, compiled_dims)
        else:
            _B.bf16_gemm_nt_full(a, b, d, c, compiled_dims, alpha, epilogue)
    except Exception as exc:
        translate("bf16_gemm_nt", exc, _diagnose_bf16, a, b, d, c)
