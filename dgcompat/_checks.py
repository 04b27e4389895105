"""Argument checks shared by the stable entry points.

The hot paths do not call these on success: they run up front only where the kernel would
silently misread or hang, and otherwise after deep_gemm's own host code has rejected a call, to
turn its message into one that names the argument (see :func:`translate`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from typing import NoReturn

from .detection import backend_name
from .detection import release
from .errors import BadArgumentError
from .errors import DgcompatError
from .errors import KernelError
from .errors import UnsupportedFeatureError
from .table import capabilities

FP8_DTYPE_NAMES = ("float8_e4m3fn", "float8_e4m3fnuz")


def release_label() -> str:
    """The installed release's label for messages (``"reference"`` on the reference backend)."""
    if backend_name() == "reference":
        return "reference"
    return release().label


def describe(x: Any) -> str:
    """A short description of a value for error messages."""
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is not None and dtype is not None:
        try:
            stride = tuple(x.stride())
        except Exception:  # noqa: BLE001 - describing a value for a message must never raise
            stride = None
        device = getattr(x, "device", None)
        return f"Tensor(shape={tuple(shape)}, stride={stride}, dtype={dtype}, device={device})"
    if isinstance(x, (tuple, list)):
        return f"{type(x).__name__} of {len(x)} [" + ", ".join(describe(e) for e in x) + "]"
    return f"{type(x).__name__} {x!r}" if isinstance(x, (int, float, str, bool, type(None))) else type(x).__name__


def bad(fn: str, arg: str, expected: str, got: Any, *, hint: str | None = None) -> BadArgumentError:
    return BadArgumentError(fn, arg, expected, got if isinstance(got, str) else describe(got),
                            release=release_label(), hint=hint)


def is_tensor(x: Any) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


def tensor(fn: str, arg: str, x: Any, *, dtypes: tuple[str, ...] | None = None, dims: tuple[int, ...] | None = None,
           what: str = "a tensor") -> Any:
    """Check a tensor's type, dtype (by name) and rank; return it."""
    if not is_tensor(x):
        raise bad(fn, arg, what, x)
    if dims is not None and x.dim() not in dims:
        raise bad(fn, arg, f"{what} with {' or '.join(map(str, dims))} dimensions", x)
    if dtypes is not None and str(x.dtype).replace("torch.", "") not in dtypes:
        raise bad(fn, arg, f"{what} of dtype {' or '.join(dtypes)}", x)
    return x


def pair(fn: str, arg: str, x: Any, *, data_dtypes: tuple[str, ...] = FP8_DTYPE_NAMES) -> tuple[Any, Any]:
    """Check an FP8 ``(tensor, scale)`` pair."""
    if not isinstance(x, (tuple, list)) or len(x) != 2:
        raise bad(fn, arg, "a (tensor, scale) pair", x,
                  hint="FP8 operands are passed with their scales, e.g. (x_fp8, x_scale)")
    data, sf = x
    tensor(fn, f"{arg}[0]", data, dtypes=data_dtypes,
           what="an FP8 tensor" if "int8" not in data_dtypes else "an FP8 tensor or FP4 values packed in int8")
    tensor(fn, f"{arg}[1]", sf, dtypes=("float32", "int32"), what="a float32 or packed-UE8M0 int32 scale tensor")
    return data, sf


def operand_pair(fn: str, arg: str, x: Any) -> tuple[Any, Any, int]:
    """An FP8 or packed-FP4 ``(tensor, scale)`` GEMM operand: ``(data, scale, K)`` with ``K`` the logical inner size
    (two e2m1 values per int8 byte for FP4). FP4 operands are refused, naming the architecture, where the build
    computes none there (capability ``gemm_fp4_operands``)."""
    data, sf = pair(fn, arg, x, data_dtypes=FP8_DTYPE_NAMES + ("int8",))
    if str(data.dtype) != "torch.int8":
        return data, sf, int(data.shape[-1]) if data.dim() else 0
    caps = capabilities()
    if not caps.gemm_fp4_operands:
        raise UnsupportedFeatureError(fn, f"packed FP4 operand {arg} (int8 e2m1 values) on {caps.arch or 'this GPU'}",
                                      release_label(), hint="the build's FP4 GEMMs run on SM100 only (capability "
                                      "gemm_fp4_operands); pass FP8 operands here")
    return data, sf, 2 * int(data.shape[-1]) if data.dim() else 0


def k_major(fn: str, arg: str, x: Any, *, what: str = "K-major (stride(-1) == 1)") -> None:
    """Innermost dimension contiguous, as the kernels' TMA descriptors need (a size-1 one has any stride)."""
    if x.dim() and x.stride(-1) != 1 and x.shape[-1] != 1:
        raise bad(fn, arg, what, x, hint="pass a .contiguous() tensor (a transposed view is not accepted)")


def contiguous(fn: str, arg: str, x: Any) -> None:
    if not x.is_contiguous():
        raise bad(fn, arg, "a contiguous tensor", x, hint="pass x.contiguous()")


def same_device(fn: str, ref_name: str, ref: Any, **others: Any) -> None:
    dev = ref.device
    for name, t in others.items():
        if is_tensor(t) and t.device != dev:
            raise bad(fn, name, f"on {dev} like '{ref_name}'", t)


def spelled(fn: str, name: str, value: Any, other: str, other_value: Any) -> Any:
    """The argument of ``name`` given under that name or under ``other``, the name some releases give the same
    parameter (at most one of the two; None when neither). Call it only when ``other_value`` is not None, or
    when ``value`` is None and the parameter is required."""
    if other_value is None:
        return value
    if value is not None:
        raise bad(fn, name, f"given once: as {name} or as {other} (the same parameter), not both",
                  f"{name} and {other}")
    return other_value


def check_recipe(fn: str, recipe: Any, name: str = "recipe", sizes: tuple[int, ...] = (2, 3)) -> None:
    """``recipe`` (or ``recipe_a`` / ``recipe_b``: ``name``, 2-element) is None or a tuple of positive ints."""
    if recipe is not None and (not isinstance(recipe, (tuple, list)) or len(recipe) not in sizes
                               or not all(isinstance(v, int) and v > 0 for v in recipe)):
        example = "(1, 128, 128)" if 3 in sizes else "(1, 128)"
        raise bad(fn, name, f"None or a tuple of {' or '.join(map(str, sizes))} positive ints, e.g. {example}", recipe,
                  hint=None if name == "recipe" else "the bundled copies' positional compiled_dims and "
                  "disable_ue8m0_cast are keywords here: pass compiled_dims=... and disable_ue8m0_cast=...")


def check_split_recipes(fn: str, recipe_a: Any, recipe_b: Any) -> None:
    """``recipe_a`` / ``recipe_b`` are None or ``(gran_mn, gran_k)``; call only when one of them is not None.

    Where an older release has other parameters in these positions (the bundled copies' ``compiled_dims``,
    ``disable_ue8m0_cast``), a call written for it positionally is refused here instead of being misread.
    """
    check_recipe(fn, recipe_a, "recipe_a", (2,))
    check_recipe(fn, recipe_b, "recipe_b", (2,))


def unsupported(fn: str, what: str, *, hint: str | None = None) -> Callable[..., Any]:
    """A stand-in bound where the release lacks ``what``: every call raises UnsupportedFeatureError."""
    def refuse(*_args: Any, **_kw: Any) -> Any:
        raise UnsupportedFeatureError(fn, what, release_label(), hint=hint)
    return refuse


def as_torch(x: Any) -> Any:
    """``x`` as a torch.Tensor (tvm-ffi releases may hand back their own tensor type)."""
    import torch

    return x if isinstance(x, torch.Tensor) else torch.utils.dlpack.from_dlpack(x)


def translate(fn: str, exc: BaseException, diagnose: Callable[..., None], *args: Any) -> NoReturn:
    """Re-raise an upstream failure as a dgcompat error.

    ``diagnose(*args)`` runs the full argument checks (cost paid on the failure path only); if they
    find the culprit their :class:`BadArgumentError` is raised, otherwise a :class:`KernelError`
    carrying the upstream message. ``diagnose`` is a module-level function taking the arguments
    explicitly: a closure over the caller's arguments would turn them into cell variables and cost
    every successful call too.
    """
    if isinstance(exc, DgcompatError):
        raise exc
    try:
        diagnose(*args)
    except DgcompatError as found:
        raise found from exc
    raise KernelError(
        f"{fn}(): deep_gemm {release_label()} rejected the call: {type(exc).__name__}: {exc}".rstrip()
    ) from exc
