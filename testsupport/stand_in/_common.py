"""A no-op stand-in for ``deep_gemm``, joined from parts (:mod:`testsupport.stand_in`): this first part
holds what every emulated sgl-deep-gemm release has with the same signature. ``_LOGITS`` /
``_SCHEDULE`` are what the logits and metadata calls hand back; the benchmark sets them before timing
(a real release allocates them on the device, which is upstream's cost in both columns).
"""

import torch

_LOGITS = None
_SCHEDULE = None
_STATE = {"num_sms": 132, "pdl": False, "tc_util": 100}


def get_num_sms():
    return _STATE["num_sms"]


def set_num_sms(new_num_sms):
    _STATE["num_sms"] = new_num_sms


def set_tc_util(new_tc_util):
    _STATE["tc_util"] = new_tc_util


def get_tc_util():
    return _STATE["tc_util"]


def set_pdl(enable):
    _STATE["pdl"] = enable


def get_pdl():
    return _STATE["pdl"]


def get_mk_alignment_for_contiguous_layout():
    return 128


def get_m_alignment_for_contiguous_layout():
    return 128


def get_tma_aligned_size(mn, element_size):
    alignment = 16 // element_size
    return (mn + alignment - 1) // alignment * alignment


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    return _SCHEDULE


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                         clean_logits=False, indices=None):
    return _LOGITS


def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
                             clean_logits=False, logits_dtype=torch.float, indices=None):
    return _LOGITS


def fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=0):
    return _LOGITS


def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
                                         compiled_dims='nk', disable_ue8m0_cast=False, use_psum_layout=False,
                                         ensure_zero_padding=True, expected_m_for_psum_layout=None):
    return None


m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous


def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims='nk', use_psum_layout=False,
                                      ensure_zero_padding=True, expected_m_for_psum_layout=None):
    return None


def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
                                     compiled_dims='nk', disable_ue8m0_cast=False):
    return None


fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked


def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims='nk'):
    return None


bf16_m_grouped_gemm_nt_masked = m_grouped_bf16_gemm_nt_masked
