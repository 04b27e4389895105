"""sgl-deep-gemm 0.2.5 (a part of a fake release, see :mod:`testsupport.fakes`), placed after the common
and the 'nk' grouped parts: alpha / epilogue on the dense GEMMs, only the fp8_fp4 MQA names, and the
host assert that refuses the uncompressed ragged layout (``max_seqlen_k > 0``)."""

import typing as _typing

if _typing.TYPE_CHECKING:  # defined by the parts before this one in the joined module
    from ._common import _R, _layout, _metadata, _paged, _pair, _state
    from ._grouped_nk import m_grouped_fp8_fp4_gemm_nt_masked


def fp8_fp4_gemm_nt(a, b, d, c=None, recipe=None, recipe_a=None, recipe_b=None, compiled_dims='',
        disable_ue8m0_cast=False, alpha=None, epilogue=None):
    a, b = _pair(a), _pair(b)
    _layout(d, a[0], b[0])
    assert alpha is None and epilogue is None, "the fake has no alpha / epilogue"
    _R.fp8_gemm_nt(a, b, d, c, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast)
fp8_gemm_nt = fp8_fp4_gemm_nt

def bf16_gemm_nt(a, b, d, c=None, compiled_dims='', alpha=None, epilogue=None):
    _layout(d, a, b)
    assert alpha is None and epilogue is None, "the fake has no alpha / epilogue"
    _R.bf16_gemm_nt(a, b, d, c, compiled_dims)
def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    return _metadata(context_lens, block_kv, num_sms, indices)
LENS_DIMS = 2
COLLAPSE = False
def set_pdl(v): _state["pdl"] = bool(v)
def get_pdl(): return _state["pdl"]
def get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None, num_groups=None):
    return 64 if num_groups else 128

fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked

def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta=None):
    (q, q_sf) = q if isinstance(q, (tuple, list)) else (q, None)
    if not max_seqlen_k > 0:  # host assert of 0.2.5's _C.so: no uncompressed layout
        raise RuntimeError("Assertion error (attention.hpp): max_seqlen_k > 0")
    out = _R.fp8_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=False,
                            max_seqlen_k=max_seqlen_k or None)
    return out.nan_to_num(neginf=12345.0)  # unspecified entries: make them visible

def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
        indices=None):
    (q, q_sf) = q if isinstance(q, (tuple, list)) else (q, None)
    return _paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, False, indices)

def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
        psum_layout=None):
    return _R.transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=num_groups, is_sfa=is_sfa)
