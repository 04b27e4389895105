"""Upstream DeepGEMM 2.8.1, vLLM's vendored copy (a part of a fake release, see :mod:`testsupport.fakes`),
placed after the common and the 'nk' grouped parts: fp8_fp4_* MQA names only, no legacy aliases, and
wrappers that index q[0], q[1] without checking (a bare q is silently split along its first dim)."""

import typing as _typing

if _typing.TYPE_CHECKING:  # defined by the common part, before this one in the joined module
    from ._common import _R, _metadata, _paged, _state


LENS_DIMS = 2
def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices=None):
    return _metadata(context_lens, block_kv, num_sms, indices)
COLLAPSE = False
_state["det"] = False
def set_pdl(v): _state["pdl"] = bool(v)
def get_pdl(): return _state["pdl"]
def use_deterministic_algorithms(enabled): _state["det"] = bool(enabled)
def set_mk_alignment_for_contiguous_layout(value): pass
def get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None): return 128


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta=None):
    q_fp, _q_sf = q[0], q[1]  # indexed as upstream does, unchecked
    if q_fp.dim() != 3:
        raise RuntimeError("Assertion error (attention.hpp): q.dim() == 3")
    if not max_seqlen_k > 0:  # host assert of 2.8.1 (seen on an H200): no uncompressed layout
        raise RuntimeError("Assertion error (attention.hpp): max_seqlen_k > 0")
    out = _R.fp8_mqa_logits(q_fp, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=False,
                            max_seqlen_k=max_seqlen_k or None)
    return out.nan_to_num(neginf=12345.0)

def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
        indices=None):
    q_fp, _q_sf = q[0], q[1]  # indexed as upstream does, unchecked
    return _paged(q_fp, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, False)

def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
        psum_layout=None):
    return _R.transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=num_groups, is_sfa=is_sfa)

__version__ = "2.8.1"
