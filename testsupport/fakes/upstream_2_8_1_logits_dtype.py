"""vLLM 0.34.0's DeepGEMM (a part of a fake release, see :mod:`testsupport.fakes`), placed after the 2.8.1 part:
still ``__version__`` 2.8.1, but ``logits_dtype`` inserted before ``schedule_meta`` (ragged) and before ``indices``
(paged), computing bf16 logits (its ``_C.py`` wrappers)."""

import typing as _typing

if _typing.TYPE_CHECKING:  # defined by the parts before this one in the joined module
    import torch

    from ._common import _R, _paged


def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k,
        logits_dtype=torch.float32, schedule_meta=None):
    q_fp, _q_sf = q[0], q[1]  # indexed as upstream does, unchecked
    if q_fp.dim() != 3:
        raise RuntimeError("Assertion error (attention.hpp): q.dim() == 3")
    if not max_seqlen_k > 0:
        raise RuntimeError("Assertion error (attention.hpp): max_seqlen_k > 0")
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise RuntimeError("Assertion error (attention.hpp): logits_dtype == kFloat32 or logits_dtype == kBFloat16")
    out = _R.fp8_mqa_logits(q_fp, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=False,
                            max_seqlen_k=max_seqlen_k or None)
    return out.nan_to_num(neginf=12345.0).to(logits_dtype)

def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
        logits_dtype=torch.float32, indices=None):
    q_fp, _q_sf = q[0], q[1]  # indexed as upstream does, unchecked
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise RuntimeError("Assertion error (attention.hpp): logits_dtype == kFloat32 or logits_dtype == kBFloat16")
    out = _paged(q_fp, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, False)
    return out.to(logits_dtype)

