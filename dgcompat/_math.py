"""The integer and scale-factor arithmetic every layer shares: ceil_div, align, TMA alignment, UE8M0 rounding.

A leaf: it imports nothing of dgcompat (torch only inside :func:`ceil_to_ue8m0`) and checks nothing;
the stable functions of :mod:`dgcompat.scales` and the reference backend validate their arguments
and call these.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

__all__ = ["ceil_div", "align", "tma_aligned_size", "ceil_to_ue8m0"]


def ceil_div(x: int, y: int) -> int:
    """``ceil(x / y)`` for non-negative ints (exact; no float rounding)."""
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """``x`` rounded up to a multiple of ``y`` (``align(130, 128) == 256``)."""
    return ceil_div(x, y) * y


def tma_aligned_size(x: int, element_size: int) -> int:
    """``x`` elements rounded up to a whole number of 16-byte TMA units (``element_size`` divides 16)."""
    return align(x, 16 // element_size)


def ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    """Round scales up to the powers of two a UE8M0 byte holds; float32 of ``x``'s shape.

    Computed on the bits of ``|x|`` in float32: the biased exponent goes up by one when any mantissa
    bit is set and is clamped to ``[1, 254]``, so 0 and subnormals give ``2**-126`` and values above
    ``2**127`` (3e38, inf) give ``2**127``. ``x`` must be a floating tensor (the callers check).
    """
    import torch

    bits = x.abs().to(torch.float32).contiguous().view(torch.int32)
    exponent = ((bits >> 23) & 0xFF) + ((bits & 0x7FFFFF) != 0).to(torch.int32)
    return (exponent.clamp(1, 254) << 23).view(torch.float32)
