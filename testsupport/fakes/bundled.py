"""The deep_gemm copy bundled in sglang-kernel 0.4.1.post1 (a part of a fake release, see
:mod:`testsupport.fakes`): 1-D paged lengths, ``m_indices``, the masked GEMM's overlap signal, the
compile mode, and a bundled schema whose ``is_sfa`` is a plain bool."""

import typing as _typing

if _typing.TYPE_CHECKING:  # defined by the common part, before this one in the joined module
    from ._common import _R, _grouped_contig, _masked, _metadata, _paged, _state


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms):
    return _metadata(context_lens, block_kv, num_sms)
# deep_gemm_cpp: a bundled copy reaches its native ops through torch.ops
LENS_DIMS = 1
COLLAPSE = False
def get_compile_mode(): return _state["mode"]
def set_compile_mode(m): _state["mode"] = int(m)

def m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    _grouped_contig(a, b, d, m_indices)

def m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, compiled_dims="nk",
        disable_ue8m0_cast=False, max_block_n=256, enable_overlap=False, signal=None):
    _masked(a, b, d, masked_m, expected_m)
    if enable_overlap:
        signal.fill_(1)
        return (64, 3)
    return (None, None)
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_gemm_nt_masked

def m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices, compiled_dims="nk"):
    _R.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)

def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims=""):
    _R.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)

def fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=True):
    return _R.fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=clean_logits)

def fp8_paged_mqa_logits(q, fused_kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
        clean_logits):
    return _paged(q, fused_kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits)

def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=False, disable_ue8m0_cast=False):
    assert isinstance(is_sfa, bool), "is_sfa must be a bool"
    # The bundled schema's plain bool is read only with a 3-element recipe (no "must be absent" assertion).
    return _R.transform_sf_into_required_layout(sf, mn, k, tuple(recipe), num_groups=num_groups,
                                                is_sfa=is_sfa if len(recipe) == 3 else None)
