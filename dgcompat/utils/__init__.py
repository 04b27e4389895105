"""Drop-in for ``deep_gemm.utils``: ``from dgcompat.utils.layout import get_mn_major_tma_aligned_tensor``."""

from __future__ import annotations

from . import layout
from .layout import (
    get_mk_alignment_for_contiguous_layout,
    get_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_tensor,
    get_tma_aligned_size,
)

__all__ = [
    "layout", "get_mk_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor", "get_tma_aligned_size",
]
