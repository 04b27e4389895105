"""Drop-in for ``deep_gemm.utils.math``: the integer helpers engines import from there.

Names deep_gemm defines here and dgcompat does not (``per_block_cast_to_fp8``, ...) are passed
through to the installed ``deep_gemm.utils.math`` on first use.
"""

from __future__ import annotations

from typing import Any

__all__ = ["align", "ceil_div"]


def ceil_div(x: int, y: int) -> int:
    """``ceil(x / y)`` for non-negative ints (exact; no float rounding)."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """``x`` rounded up to a multiple of ``y`` (``align(130, 128) == 256``)."""
    return ceil_div(x, y) * y


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from .._forward import lookup

    return lookup("deep_gemm.utils.math", name)
