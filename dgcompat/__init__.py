"""dgcompat: one stable, typed surface over every deep_gemm release.

``import dgcompat as deep_gemm`` serves an engine's indexer (MQA / paged MQA logits and their
schedule), MoE runner (grouped contiguous and masked GEMMs), dense GEMMs, runtime knobs and FP8
scale layouts, whatever sgl-deep-gemm / sgl-kernel / sglang-kernel / upstream build is installed.

Importing dgcompat imports neither deep_gemm nor torch, initializes no CUDA and writes nothing:
submodules load on first attribute access, and deep_gemm is imported (once, thread-safely) on the
first call that needs it. Names outside the stable surface are passed through to the installed
deep_gemm (see :func:`passthrough_names`). :func:`install_as_deep_gemm` makes every ``import
deep_gemm`` in the process (``deep_gemm.utils.layout`` and the other submodules included) resolve
through dgcompat; see docs/migration.md.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING
from typing import Any

from ._surface import MOVED
from ._surface import NAMES
from ._surface import SUBMODULES

# `X as X`: an explicit re-export, for type checkers that do not read a computed __all__ (mypy --strict).
from ._version import __version__ as __version__
from .errors import BadArgumentError as BadArgumentError
from .errors import ConfigurationError as ConfigurationError
from .errors import DeepGemmUnavailableError as DeepGemmUnavailableError
from .errors import DgcompatError as DgcompatError
from .errors import IncompatibleBuildError as IncompatibleBuildError
from .errors import KernelError as KernelError
from .errors import ScheduleMismatchError as ScheduleMismatchError
from .errors import UnavailableNameError as UnavailableNameError
from .errors import UnidentifiedBuildError as UnidentifiedBuildError
from .errors import UnsupportedFeatureError as UnsupportedFeatureError

if TYPE_CHECKING:  # pragma: no cover - for type checkers only; runtime access is lazy
    from . import utils as utils
    from ._install import as_deep_gemm as as_deep_gemm
    from ._install import install_as_deep_gemm as install_as_deep_gemm
    from ._install import installed_as_deep_gemm as installed_as_deep_gemm
    from ._install import uninstall_as_deep_gemm as uninstall_as_deep_gemm
    from ._install.resolve import passthrough_names as passthrough_names
    from ._install.resolve import reset as reset
    from ._install.resolve import resolve as resolve
    from .detection import KernelWheel as KernelWheel
    from .detection import Release as Release
    from .detection import release as release
    from .gemm import bf16_gemm_nt as bf16_gemm_nt
    from .gemm import fp8_gemm_nt as fp8_gemm_nt
    from .indexer import fp8_fp4_mqa_logits as fp8_fp4_mqa_logits
    from .indexer import fp8_fp4_paged_mqa_logits as fp8_fp4_paged_mqa_logits
    from .indexer import fp8_mqa_logits as fp8_mqa_logits
    from .indexer import fp8_paged_mqa_logits as fp8_paged_mqa_logits
    from .indexer import get_paged_mqa_logits_metadata as get_paged_mqa_logits_metadata
    from .knobs import compile_mode as compile_mode
    from .knobs import get_mk_alignment_for_contiguous_layout as get_mk_alignment_for_contiguous_layout
    from .knobs import get_num_sms as get_num_sms
    from .knobs import get_pdl as get_pdl
    from .knobs import (
        get_theoretical_mk_alignment_for_contiguous_layout as get_theoretical_mk_alignment_for_contiguous_layout,
    )
    from .knobs import is_available as is_available
    from .knobs import num_sms as num_sms
    from .knobs import set_num_sms as set_num_sms
    from .knobs import set_pdl as set_pdl
    from .moe import MaskedOverlap as MaskedOverlap
    from .moe import fp8_m_grouped_gemm_nt_masked as fp8_m_grouped_gemm_nt_masked
    from .moe import m_grouped_bf16_gemm_nt_contiguous as m_grouped_bf16_gemm_nt_contiguous
    from .moe import m_grouped_bf16_gemm_nt_masked as m_grouped_bf16_gemm_nt_masked
    from .moe import m_grouped_fp8_gemm_nt_contiguous as m_grouped_fp8_gemm_nt_contiguous
    from .moe import m_grouped_fp8_gemm_nt_masked as m_grouped_fp8_gemm_nt_masked
    from .scales import ceil_to_ue8m0 as ceil_to_ue8m0
    from .scales import get_mn_major_tma_aligned_packed_ue8m0_tensor as get_mn_major_tma_aligned_packed_ue8m0_tensor
    from .scales import get_mn_major_tma_aligned_tensor as get_mn_major_tma_aligned_tensor
    from .scales import get_tma_aligned_size as get_tma_aligned_size
    from .scales import transform_scale_ue8m0 as transform_scale_ue8m0
    from .scales import transform_sf_into_required_layout as transform_sf_into_required_layout
    from .table import Capabilities as Capabilities
    from .table import capabilities as capabilities
    from .testing import calc_diff as calc_diff
    from .utils.layout import get_col_major_tma_aligned_tensor as get_col_major_tma_aligned_tensor
    from .utils.math import align as align
    from .utils.math import ceil_div as ceil_div

__all__ = sorted([  # noqa: PLE0605 - the name table's names are data (_surface.NAMES)
    "__version__", "DgcompatError", "BadArgumentError", "UnsupportedFeatureError", "ScheduleMismatchError",
    "IncompatibleBuildError", "DeepGemmUnavailableError", "UnidentifiedBuildError", "UnavailableNameError",
    "KernelError", "ConfigurationError", *NAMES,
])


def __getattr__(name: str) -> Any:
    module = NAMES.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if name in SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    moved = MOVED.get(name)
    if moved is not None:
        what = f"import dgcompat.{moved}" if name == moved else f"from dgcompat.{moved} import {name}"
        raise AttributeError(f"dgcompat.{name} is not a name of the facade: {moved} is a package beside it ({what})")
    if name.startswith("_"):
        raise AttributeError(f"module 'dgcompat' has no attribute {name!r}")
    return importlib.import_module(f"{__name__}._install.forward").lookup("deep_gemm", name)


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(SUBMODULES))
