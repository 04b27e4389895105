"""The stable surface as data: every public name of ``dgcompat`` and the submodule that defines it.

``import dgcompat`` reads this table (and nothing else) so that each name loads its module on first
access; the install (:mod:`dgcompat._install`) serves the same names as ``deep_gemm``'s. A leaf:
it imports nothing. JIT warmup is not here: it is a package beside the facade
(``from dgcompat.jit_warmup import warmup, WarmupSpec, ...``), which the facade never imports.
"""

from __future__ import annotations

__all__ = ["NAMES", "MOVED", "SUBMODULES", "DEEP_GEMM_MODULES", "NOT_DEEP_GEMM"]

#: stable name -> the submodule of dgcompat that defines it.
NAMES: dict[str, str] = {
    "resolve": "_install.resolve", "reset": "_install.resolve", "passthrough_names": "_install.resolve",
    "release": "detection", "Release": "detection", "KernelWheel": "detection",
    "capabilities": "table", "Capabilities": "table",
    "is_available": "knobs", "get_num_sms": "knobs", "set_num_sms": "knobs", "num_sms": "knobs",
    "set_pdl": "knobs", "get_pdl": "knobs", "compile_mode": "knobs",
    "get_mk_alignment_for_contiguous_layout": "knobs", "get_theoretical_mk_alignment_for_contiguous_layout": "knobs",
    "fp8_gemm_nt": "gemm", "bf16_gemm_nt": "gemm",
    "MaskedOverlap": "moe", "m_grouped_fp8_gemm_nt_contiguous": "moe", "m_grouped_fp8_gemm_nt_masked": "moe",
    "fp8_m_grouped_gemm_nt_masked": "moe", "m_grouped_bf16_gemm_nt_contiguous": "moe",
    "m_grouped_bf16_gemm_nt_masked": "moe",
    "fp8_mqa_logits": "indexer", "get_paged_mqa_logits_metadata": "indexer", "fp8_paged_mqa_logits": "indexer",
    "fp8_fp4_mqa_logits": "indexer", "fp8_fp4_paged_mqa_logits": "indexer",
    "get_tma_aligned_size": "scales", "ceil_to_ue8m0": "scales", "get_mn_major_tma_aligned_tensor": "scales",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor": "scales", "transform_sf_into_required_layout": "scales",
    "transform_scale_ue8m0": "scales",
    "align": "utils.math", "ceil_div": "utils.math", "calc_diff": "testing",
    "get_col_major_tma_aligned_tensor": "utils.layout",
    "install_as_deep_gemm": "_install", "uninstall_as_deep_gemm": "_install", "installed_as_deep_gemm": "_install",
    "as_deep_gemm": "_install",
}

#: Names of earlier releases' facade that live in a package beside it now -> that package: ``dgcompat.<name>``
#: says where to import them from instead of passing the name through to deep_gemm.
MOVED: dict[str, str] = dict.fromkeys(
    ("warmup", "WarmupSpec", "WarmupReport", "WarmupError", "DenseGemm", "GroupedGemm", "PagedIndexer", "MPolicy",
     "KernelEntry", "jit_cache_dir", "use_jit_cache_dir", "RaggedIndexer", "jit_warmup"), "jit_warmup")

#: Public submodules reachable as ``dgcompat.<name>``.
SUBMODULES: tuple[str, ...] = ("utils", "reference", "errors", "env", "detection", "table", "knobs", "gemm", "moe",
                               "indexer", "scales", "testing")

#: The submodules whose names are deep_gemm's own (the adapters and the drop-in helpers): what
#: ``deep_gemm.<name>`` serves under the install and what :func:`dgcompat.resolve` hands out.
DEEP_GEMM_MODULES: tuple[str, ...] = ("knobs", "gemm", "moe", "indexer", "scales", "utils.math", "utils.layout",
                                      "testing")

#: Stable names that are dgcompat's own (detection, the table, the install): never ``deep_gemm.<name>``.
NOT_DEEP_GEMM = frozenset(name for name, module in NAMES.items() if module not in DEEP_GEMM_MODULES)
