"""Drop-in for ``deep_gemm.utils.layout`` (engines import the TMA helpers from here at module load).

Names deep_gemm defines here and dgcompat does not are passed through to the installed
``deep_gemm.utils.layout`` on first use.
"""

from __future__ import annotations

from typing import Any

from .._install.forward import lookup
from ..knobs import get_mk_alignment_for_contiguous_layout
from ..scales import get_mn_major_tma_aligned_packed_ue8m0_tensor
from ..scales import get_mn_major_tma_aligned_tensor
from ..scales import get_tma_aligned_size
from .math import align
from .math import ceil_div

#: DeepGEMM v1's name of :func:`get_mn_major_tma_aligned_tensor` (vLLM's wrapper still exports it).
get_col_major_tma_aligned_tensor = get_mn_major_tma_aligned_tensor

__all__ = [
    "align", "ceil_div", "get_col_major_tma_aligned_tensor", "get_mk_alignment_for_contiguous_layout",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor", "get_mn_major_tma_aligned_tensor", "get_tma_aligned_size",
]


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return lookup("deep_gemm.utils.layout", name)
