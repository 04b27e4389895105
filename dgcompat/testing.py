"""Drop-in for ``deep_gemm.testing``: :func:`calc_diff`, the similarity measure every GEMM test uses.

Other names of ``deep_gemm.testing`` (``bench_kineto``, ``count_bytes``, ...) are passed through to
the installed ``deep_gemm.testing`` on first use.
"""

from __future__ import annotations

from typing import Any

import torch

from ._install.forward import lookup

__all__ = ["calc_diff"]


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``1 - 2*sum(x*y) / sum(x*x + y*y)``, computed in float64: 0 when ``x == y``, up to 2 when ``x == -y``.

    ``x`` and ``y`` are tensors of one shape, any float dtype and device; returns a 0-d float64
    tensor on that device. Two all-zero inputs give NaN (0/0), as DeepGEMM's own ``calc_diff`` does.
    """
    x, y = x.double(), y.double()
    denominator = (x * x + y * y).sum()
    return 1 - 2 * (x * y).sum() / denominator


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return lookup("deep_gemm.testing", name)
