"""The reference's shared constants and argument checks (every check raises :class:`~dgcompat.errors.BadArgumentError`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import Tensor

from ..errors import BadArgumentError

__all__ = ["FP8", "FP8_MAX", "SPLIT_KV", "CHUNK_ELEMENTS", "MK_ALIGNMENT", "Recipe", "Balance", "ceil_div", "align_up", "describe", "need_tensor", "need_dtype", "need_int_tensor", "need_int", "need_shape", "need_device", "need_pair", "need_float"]

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
#: KV positions per schedule work unit of the paged MQA kernels.
SPLIT_KV = 256
# Upper bound on the elements of one intermediate score tensor before the logits functions split
# their work into chunks (keeps the reference usable on long sequences).
CHUNK_ELEMENTS = 1 << 24

#: Row alignment of the contiguous grouped layout (deep_gemm's value on SM90 and SM100).
MK_ALIGNMENT = 128

Recipe = tuple[int, int, int] | tuple[int, int] | Sequence[int]
Balance = Literal["tail", "head"]


# ---------------------------------------------------------------------------------------------
# small helpers


def ceil_div(x: int, y: int) -> int:
    return (x + y - 1) // y


def align_up(x: int, y: int) -> int:
    return ceil_div(x, y) * y


def describe(t: object) -> str:
    if isinstance(t, Tensor):
        return f"Tensor(shape={tuple(t.shape)}, dtype={t.dtype}, device={t.device})"
    return f"{type(t).__name__} {t!r}"


def need_tensor(fn: str, name: str, t: object) -> Tensor:
    if not isinstance(t, Tensor):
        raise BadArgumentError(fn, name, "a torch.Tensor", describe(t))
    return t


def need_dtype(fn: str, name: str, t: Tensor, dtypes: tuple[torch.dtype, ...]) -> None:
    if t.dtype not in dtypes:
        want = " or ".join(str(d) for d in dtypes)
        raise BadArgumentError(fn, name, f"dtype {want}", describe(t))


def need_int_tensor(fn: str, name: str, t: object) -> Tensor:
    # deep_gemm's kernels read these as int32; the reference holds callers to the same contract so
    # that code developed against it runs unchanged on the real kernels.
    t = need_tensor(fn, name, t)
    if t.dtype != torch.int32:
        raise BadArgumentError(fn, name, "an int32 tensor", describe(t))
    return t


def need_int(fn: str, name: str, v: object, *, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise BadArgumentError(fn, name, f"an int >= {minimum}", describe(v))
    if v < minimum:
        raise BadArgumentError(fn, name, f"an int >= {minimum}", repr(v))
    return v


def need_shape(fn: str, name: str, t: Tensor, shape: tuple[int, ...]) -> None:
    if tuple(t.shape) != shape:
        raise BadArgumentError(fn, name, f"shape {shape}", describe(t))


def need_device(fn: str, name: str, t: Tensor, device: torch.device) -> None:
    if t.device != device:
        raise BadArgumentError(fn, name, f"a tensor on {device}", describe(t))


def need_pair(fn: str, name: str, v: object) -> tuple[Tensor, Tensor]:
    if not isinstance(v, (tuple, list)) or len(v) != 2:
        raise BadArgumentError(fn, name, "a (data, scale) pair of tensors", describe(v))
    return need_tensor(fn, f"{name}[0]", v[0]), need_tensor(fn, f"{name}[1]", v[1])


def need_float(fn: str, name: str, t: Tensor) -> None:
    if not t.dtype.is_floating_point:
        raise BadArgumentError(fn, name, "a floating-point tensor", describe(t))


