"""Drop-in for ``deep_gemm.utils.layout`` (engines import the TMA helpers from here at module load)."""

from __future__ import annotations

from ..runtime import get_mk_alignment_for_contiguous_layout
from ..scales import (
    get_mn_major_tma_aligned_packed_ue8m0_tensor,
    get_mn_major_tma_aligned_tensor,
    get_tma_aligned_size,
)

__all__ = [
    "get_mk_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor", "get_tma_aligned_size",
]
