"""Drop-in for ``deep_gemm.utils.math``: the integer helpers engines import from there.

Names deep_gemm defines here and dgcompat does not (``per_block_cast_to_fp8``, ...) are passed
through to the installed ``deep_gemm.utils.math`` on first use.
"""

from __future__ import annotations

from typing import Any

from .._install.forward import lookup
from .._math import align
from .._math import ceil_div

__all__ = ["align", "ceil_div"]


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return lookup("deep_gemm.utils.math", name)
