"""Drop-in for ``deep_gemm.utils``: ``from dgcompat.utils.layout import get_mn_major_tma_aligned_tensor``.

dgcompat's own names are listed in ``__all__``; every other name ``deep_gemm.utils`` has
(``per_block_cast_to_fp8``, ``init_dist``, ...) is passed through to the installed
``deep_gemm.utils`` on first use (deep_gemm is imported then, not before), and raises
:class:`~dgcompat.errors.UnavailableNameError` (an ``AttributeError``) when there is no usable
deep_gemm.
"""

from __future__ import annotations

from typing import Any

from .._install.forward import lookup
from . import layout
from . import math
from .layout import get_col_major_tma_aligned_tensor
from .layout import get_mk_alignment_for_contiguous_layout
from .layout import get_mn_major_tma_aligned_packed_ue8m0_tensor
from .layout import get_mn_major_tma_aligned_tensor
from .layout import get_tma_aligned_size
from .math import align
from .math import ceil_div

__all__ = [
    "layout", "math", "align", "ceil_div", "get_col_major_tma_aligned_tensor",
    "get_mk_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
    "get_mn_major_tma_aligned_tensor", "get_tma_aligned_size",
]


def __getattr__(name: str) -> Any:
    if name.startswith("_"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return lookup("deep_gemm.utils", name)
