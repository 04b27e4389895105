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
from typing import TYPE_CHECKING, Any, Callable

from ._version import __version__
from .errors import (
    BadArgumentError,
    ConfigurationError,
    DeepGemmUnavailableError,
    DgcompatError,
    IncompatibleBuildError,
    KernelError,
    ScheduleMismatchError,
    UnavailableNameError,
    UnidentifiedBuildError,
    UnsupportedFeatureError,
)

if TYPE_CHECKING:  # pragma: no cover - for type checkers only; runtime access is lazy
    from . import utils as utils
    from ._install import as_deep_gemm as as_deep_gemm
    from ._install import install_as_deep_gemm as install_as_deep_gemm
    from ._install import installed_as_deep_gemm as installed_as_deep_gemm
    from ._install import uninstall_as_deep_gemm as uninstall_as_deep_gemm
    from .detection import KernelWheel as KernelWheel
    from .detection import Release as Release
    from .detection import release as release
    from .gemm import bf16_gemm_nt as bf16_gemm_nt
    from .gemm import fp8_gemm_nt as fp8_gemm_nt
    from .indexer import fp8_mqa_logits as fp8_mqa_logits
    from .indexer import fp8_paged_mqa_logits as fp8_paged_mqa_logits
    from .indexer import get_paged_mqa_logits_metadata as get_paged_mqa_logits_metadata
    from .jit_warmup import DenseGemm as DenseGemm
    from .jit_warmup import GroupedGemm as GroupedGemm
    from .jit_warmup import KernelEntry as KernelEntry
    from .jit_warmup import MPolicy as MPolicy
    from .jit_warmup import PagedIndexer as PagedIndexer
    from .jit_warmup import WarmupError as WarmupError
    from .jit_warmup import WarmupReport as WarmupReport
    from .jit_warmup import WarmupSpec as WarmupSpec
    from .jit_warmup import jit_cache_dir as jit_cache_dir
    from .jit_warmup import use_jit_cache_dir as use_jit_cache_dir
    from .jit_warmup import warmup as warmup
    from .moe import MaskedOverlap as MaskedOverlap
    from .moe import fp8_m_grouped_gemm_nt_masked as fp8_m_grouped_gemm_nt_masked
    from .moe import m_grouped_bf16_gemm_nt_contiguous as m_grouped_bf16_gemm_nt_contiguous
    from .moe import m_grouped_bf16_gemm_nt_masked as m_grouped_bf16_gemm_nt_masked
    from .moe import m_grouped_fp8_gemm_nt_contiguous as m_grouped_fp8_gemm_nt_contiguous
    from .moe import m_grouped_fp8_gemm_nt_masked as m_grouped_fp8_gemm_nt_masked
    from .runtime import compile_mode as compile_mode
    from .runtime import get_mk_alignment_for_contiguous_layout as get_mk_alignment_for_contiguous_layout
    from .runtime import get_num_sms as get_num_sms
    from .runtime import get_pdl as get_pdl
    from .runtime import (
        get_theoretical_mk_alignment_for_contiguous_layout as get_theoretical_mk_alignment_for_contiguous_layout,
    )
    from .runtime import is_available as is_available
    from .runtime import num_sms as num_sms
    from .runtime import set_num_sms as set_num_sms
    from .runtime import set_pdl as set_pdl
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

#: stable name -> the submodule that defines it.
_LAZY: dict[str, str] = {
    "release": "detection", "Release": "detection", "KernelWheel": "detection",
    "capabilities": "table", "Capabilities": "table",
    "is_available": "runtime", "get_num_sms": "runtime", "set_num_sms": "runtime", "num_sms": "runtime",
    "set_pdl": "runtime", "get_pdl": "runtime", "compile_mode": "runtime",
    "get_mk_alignment_for_contiguous_layout": "runtime", "get_theoretical_mk_alignment_for_contiguous_layout": "runtime",
    "fp8_gemm_nt": "gemm", "bf16_gemm_nt": "gemm",
    "MaskedOverlap": "moe", "m_grouped_fp8_gemm_nt_contiguous": "moe", "m_grouped_fp8_gemm_nt_masked": "moe",
    "fp8_m_grouped_gemm_nt_masked": "moe", "m_grouped_bf16_gemm_nt_contiguous": "moe",
    "m_grouped_bf16_gemm_nt_masked": "moe",
    "fp8_mqa_logits": "indexer", "get_paged_mqa_logits_metadata": "indexer", "fp8_paged_mqa_logits": "indexer",
    "get_tma_aligned_size": "scales", "ceil_to_ue8m0": "scales", "get_mn_major_tma_aligned_tensor": "scales",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor": "scales", "transform_sf_into_required_layout": "scales",
    "transform_scale_ue8m0": "scales",
    **dict.fromkeys(("warmup", "WarmupSpec", "WarmupReport", "WarmupError", "DenseGemm", "GroupedGemm", "PagedIndexer",
                     "MPolicy", "KernelEntry", "jit_cache_dir", "use_jit_cache_dir"), "jit_warmup"),
    "align": "utils.math", "ceil_div": "utils.math", "calc_diff": "testing",
    "get_col_major_tma_aligned_tensor": "utils.layout",
    "install_as_deep_gemm": "_install", "uninstall_as_deep_gemm": "_install", "installed_as_deep_gemm": "_install",
    "as_deep_gemm": "_install",
}
_SUBMODULES = ("utils", "reference", "errors", "detection", "table", "runtime", "gemm", "moe", "indexer", "scales",
               "testing", "jit_warmup")

__all__ = sorted([
    "__version__", "resolve", "reset", "passthrough_names",
    "DgcompatError", "BadArgumentError", "UnsupportedFeatureError", "ScheduleMismatchError",
    "IncompatibleBuildError", "DeepGemmUnavailableError", "UnidentifiedBuildError", "UnavailableNameError",
    "KernelError", "ConfigurationError",
    *_LAZY,
])


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is not None:
        value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
        globals()[name] = value  # later lookups skip this hook
        return value
    if name in _SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    if name.startswith("_"):
        raise AttributeError(f"module 'dgcompat' has no attribute {name!r}")
    return _passthrough(name)


def __dir__() -> list[str]:
    return sorted(set(__all__) | set(_SUBMODULES))


def _passthrough(name: str) -> Any:
    from ._forward import lookup

    return lookup("deep_gemm", name)


def passthrough_names() -> list[str]:
    """Public names of the installed deep_gemm that dgcompat forwards unchanged (imports deep_gemm)."""
    from . import _binding

    module = _binding.load()
    return sorted(n for n in dir(module) if not n.startswith("_") and n not in _LAZY and n not in _SUBMODULES)


def resolve(name: str) -> Callable[..., Any]:
    """The callable behind ``dgcompat.<name>`` on this install.

    Where the installed function already matches the stable contract (the table's
    :data:`~dgcompat.table.UPSTREAM_IDENTITY`) this is the upstream object itself (call it directly
    to pay nothing; its errors are then deep_gemm's own). Otherwise it is dgcompat's function.
    Binds (imports deep_gemm) if needed.
    """
    from . import _binding
    from .table import capabilities

    if name not in _LAZY:
        raise AttributeError(f"{name!r} is not part of dgcompat's stable surface")
    stable = __getattr__(name)
    if not callable(stable) or isinstance(stable, type):
        return stable
    upstream = getattr(_binding.load(), name, None)
    if upstream is None or not capabilities().identical_to_upstream(name):
        return stable
    # The same parameters in the same positions (probed: releases insert and append parameters).
    from ._params import parameter_names

    return upstream if parameter_names(upstream) == parameter_names(stable) else stable


def reset() -> None:
    """Forget detection, capabilities and every binding (for tests; deep_gemm stays imported)."""
    from . import _binding, detection, table

    _binding.reset()
    table.reset()
    detection.reset()
