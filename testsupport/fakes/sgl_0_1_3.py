"""sgl-deep-gemm 0.1.3 (a part of a fake release, see :mod:`testsupport.fakes`): tvm-ffi returns whose
size-1 strides collapse, 2-D paged lengths, PDL behind ``_C``, the fp8_fp4 grouped names and the old ones."""

import typing as _typing

if _typing.TYPE_CHECKING:  # defined by the common part, before this one in the joined module
    import torch

    from ._common import _R, _collapse, _grouped_contig, _masked, _metadata, _paged, _state


def get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None): return 128
def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    return _metadata(context_lens, block_kv, num_sms, indices)
LENS_DIMS = 2
COLLAPSE = True
class _Native:
    def set_pdl(self, v): _state["pdl"] = bool(v)
    def get_pdl(self): return _state["pdl"]
_C = _Native()

def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
        compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False, expected_m_for_psum_layout=None):
    _grouped_contig(a, b, d, grouped_layout)
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous

def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
        compiled_dims="nk", disable_ue8m0_cast=False):
    _masked(a, b, d, masked_m, expected_m)
fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked

def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims="nk"):
    _R.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)

def fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=0):
    return _R.fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=clean_logits, max_seqlen_k=max_seqlen_k or None)

def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=False, max_seqlen_k=0,
        logits_dtype=torch.float):
    if not (type(q) is tuple or type(q) is list):
        raise TypeError("new(): invalid data type 'str'")  # _parse_tensor_or_tuple's torch.Tensor(...) before 0.2.0
    if logits_dtype not in (torch.float, torch.bfloat16):
        raise RuntimeError("Assertion error (attention.hpp): logits_dtype is float or bfloat16")
    out = _R.fp8_mqa_logits(q[0], kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=clean_logits,
                            max_seqlen_k=max_seqlen_k or None)
    return out.to(logits_dtype)

def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
        clean_logits=False, indices=None):
    return _paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
                  indices)

def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False):
    return _collapse(_R.transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=num_groups, is_sfa=is_sfa))
