"""Fake ``deep_gemm`` modules shaped like each family of releases, computing with the reference.

They reproduce what engines trip over (parameter names and positions, 1-D vs 2-D lengths, the SM90
next_n limit, a schedule that does not match the launch, return values, collapsed strides) so the
adapters can be tested without a GPU. The real wheels are exercised by the conformance CPU tier.
"""

from __future__ import annotations

# Common body: native-ish checks + reference math. ``HANG`` marks a launch that would never finish.
_COMMON = '''
import torch
from dgcompat import reference as _R

class HANG(RuntimeError):
    pass

_state = {"num_sms": 132, "pdl": False, "mode": 0}
LAUNCHES = []

def get_num_sms():
    return _state["num_sms"]

def set_num_sms(n):
    if not 0 <= n <= 132:
        raise RuntimeError("Assertion error (device_runtime.hpp): 0 <= new_num_sms and new_num_sms <= 132")
    _state["num_sms"] = int(n)

def _layout(d, a=None, b=None, index=None):
    # Host asserts of csrc/apis/gemm.hpp and csrc/utils/layout.hpp, as every release has them.
    for t in (a, b):
        if t is not None and t.stride(-1) != 1 and t.shape[-1] != 1:
            raise RuntimeError("Assertion error (layout.hpp): major == K")
    if d.stride(-1) != 1 and d.shape[-1] != 1:
        raise RuntimeError("Assertion error (layout.hpp): d.stride(-1) == 1")
    if index is not None and not index.is_contiguous():
        raise RuntimeError("Assertion error (gemm.hpp): m_indices.is_contiguous()")

def get_mk_alignment_for_contiguous_layout():
    return 128

def get_tma_aligned_size(x, element_size):
    return _R.get_tma_aligned_size(x, element_size)

def _pair(x):
    if type(x) is tuple or type(x) is list:
        return x[0], x[1]
    if isinstance(x, torch.Tensor):
        return x, torch.tensor([1.0])
    raise AssertionError("Expected Tensor or tuple")

def fp8_gemm_nt(a, b, d, c=None, recipe=None, compiled_dims="nk", disable_ue8m0_cast=False):
    a, b = _pair(a), _pair(b)
    if d.dim() != 2:
        raise RuntimeError("Assertion error (gemm.hpp): d.dim() == 2")
    _layout(d, a[0], b[0])
    _R.fp8_gemm_nt(a, b, d, c=c, recipe=recipe)

def bf16_gemm_nt(a, b, d, c=None, compiled_dims=""):
    _layout(d, a, b)
    _R.bf16_gemm_nt(a, b, d, c=c)

def _check_lens_native(lens, q):
    if not lens.is_contiguous():
        raise RuntimeError("Assertion error (attention.hpp): context_lens.is_contiguous()")
    if lens.dtype != torch.int32:
        raise RuntimeError("Assertion error: context_lens.scalar_type() == torch::kInt")
    if LENS_DIMS == 2:
        if lens.dim() != 2:
            raise RuntimeError("Assertion error (attention.hpp): context_lens.dim() == 2")
        if q is not None and (lens.shape[0], lens.shape[1]) != (q.shape[0], q.shape[1]):
            raise RuntimeError("Assertion error: batch_size == context_lens.size(0) and next_n == context_lens.size(1)")
    else:
        if lens.dim() != 1:
            raise RuntimeError("Assertion error (attention.hpp): context_lens.dim() == 1")

METADATA_CALLS = []

def _metadata(context_lens, block_kv, num_sms, indices=None):
    _check_lens_native(context_lens, None)
    METADATA_CALLS.append(tuple(context_lens.shape))
    return _R.get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms, indices)

def _paged(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits,
           indices=None):
    _check_lens_native(context_lens, q)
    if q.shape[1] not in (1, 2):
        raise RuntimeError("Assertion error (attention.hpp): next_n == 1 or next_n == 2")
    if block_table.stride(1) != 1:
        raise RuntimeError("Assertion error: block_table.stride(1) == 1")
    if clean_logits and LENS_DIMS == 2:
        raise RuntimeError("Assertion error: not clean_logits")
    if schedule_meta.shape[0] != _state["num_sms"] + 1:  # the kernel launches on every SM the runtime has
        raise RuntimeError("Assertion error (attention.hpp): schedule_meta.size(0) == num_sms + 1")
    if not _R.paged_schedule_matches(schedule_meta, context_lens, kv_cache.shape[1], schedule_meta.shape[0] - 1):
        raise HANG("the persistent kernel would wait forever")
    LAUNCHES.append((tuple(q.shape), tuple(context_lens.shape), tuple(block_table.shape)))
    # What the kernels do that the reference does not: rows are read at a row stride of max_blocks
    # (only stride(1) is asserted), and a 2-D (B, next_n) launch sizes every row by its last column.
    table = block_table.as_strided(tuple(block_table.shape), (block_table.shape[1], 1))
    lens = context_lens
    if lens.dim() == 2 and lens.shape[1] > 1:
        lens = torch.minimum(lens, lens[:, -1:]).contiguous()
    return _R.fp8_paged_mqa_logits(q, kv_cache, weights, lens, table, schedule_meta,
                                   max_context_len, clean_logits, indices)

def get_mn_major_tma_aligned_tensor(sf):
    out = _R.get_mn_major_tma_aligned_tensor(sf)
    return _collapse(out)

def get_mn_major_tma_aligned_packed_ue8m0_tensor(sf):
    return _collapse(_R.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf))

def _collapse(t):
    # What a DLPack round trip through an older libtorch does to size-1 dims.
    if not COLLAPSE:
        return t
    strides = tuple(1 if s == 1 else st for s, st in zip(t.shape, t.stride()))
    return t.as_strided(t.shape, strides)

def _grouped_contig(a, b, d, layout):
    a, b = _pair(a), _pair(b)
    if layout.dtype != torch.int32:
        raise RuntimeError("Assertion error: grouped_layout.scalar_type() == torch::kInt")
    if a[0].shape[0] % 128:
        raise RuntimeError("Assertion error: m % 128 == 0")
    _layout(d, a[0], b[0], layout)
    _R.m_grouped_fp8_gemm_nt_contiguous(a, b, d, layout)

def _masked(a, b, d, masked_m, expected_m):
    a, b = _pair(a), _pair(b)
    _layout(d, a[0], b[0], masked_m)
    if expected_m < 1:
        raise RuntimeError("Assertion error (gemm.hpp): expected_m > 0")
    _R.m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, expected_m)
'''

SGL_013 = _COMMON + '''
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
'''

# The grouped GEMMs of the 'nk' releases (sgl-deep-gemm 0.2.5, upstream 2.8.1), with their full signatures.
_GROUPED_NK = '''
def m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, recipe=None, recipe_a=None, recipe_b=None,
        compiled_dims="nk", disable_ue8m0_cast=False, use_psum_layout=False, ensure_zero_padding=True,
        expected_m_for_psum_layout=None, epilogue=None):
    _grouped_contig(a, b, d, grouped_layout)
m_grouped_fp8_gemm_nt_contiguous = m_grouped_fp8_fp4_gemm_nt_contiguous

def m_grouped_fp8_fp4_gemm_nt_masked(a, b, d, masked_m, expected_m, recipe=None, recipe_a=None, recipe_b=None,
        compiled_dims="nk", disable_ue8m0_cast=False, epilogue=None):
    _masked(a, b, d, masked_m, expected_m)
m_grouped_fp8_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
'''
_BF16_GROUPED_NK = '''
def m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout, compiled_dims="nk", use_psum_layout=False,
        ensure_zero_padding=True, expected_m_for_psum_layout=None, epilogue=None):
    _R.m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout)

def m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m, compiled_dims="nk", epilogue=None):
    _R.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)
'''

SGL_025 = _COMMON + '''
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

''' + _GROUPED_NK + '''fp8_m_grouped_gemm_nt_masked = m_grouped_fp8_fp4_gemm_nt_masked
''' + _BF16_GROUPED_NK + '''
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
'''

# Upstream DeepGEMM 2.8.1 (vLLM's vendored copy): fp8_fp4_* MQA names only, no legacy aliases, and
# wrappers that index q[0], q[1] without checking (a bare q is silently split along its first dim).
UP_281 = _COMMON + '''
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

''' + _GROUPED_NK + _BF16_GROUPED_NK + '''
def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta=None):
    q_fp, q_sf = q[0], q[1]
    if q_fp.dim() != 3:
        raise RuntimeError("Assertion error (attention.hpp): q.dim() == 3")
    if not max_seqlen_k > 0:  # host assert of 2.8.1 (seen on an H200): no uncompressed layout
        raise RuntimeError("Assertion error (attention.hpp): max_seqlen_k > 0")
    out = _R.fp8_mqa_logits(q_fp, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, clean_logits=False,
                            max_seqlen_k=max_seqlen_k or None)
    return out.nan_to_num(neginf=12345.0)

def fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len,
        indices=None):
    q_fp, q_sf = q[0], q[1]
    return _paged(q_fp, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, False)

def transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=None, is_sfa=None, disable_ue8m0_cast=False,
        psum_layout=None):
    return _R.transform_sf_into_required_layout(sf, mn, k, recipe, num_groups=num_groups, is_sfa=is_sfa)

__version__ = "2.8.1"
'''

BUNDLED = _COMMON + '''
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
'''

# vLLM 0.34.0's DeepGEMM: still __version__ 2.8.1, but logits_dtype inserted before schedule_meta (ragged) and
# before indices (paged), computing bf16 logits (its _C.py wrappers, /vllm/third_party/deep_gemm/_C.py).
_UP_281_MQA = UP_281[UP_281.index("def fp8_fp4_mqa_logits("):UP_281.index("def transform_sf_into_required_layout(")]
UP_281_034 = UP_281.replace(_UP_281_MQA, '''def fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k,
        logits_dtype=torch.float32, schedule_meta=None):
    q_fp, q_sf = q[0], q[1]
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
    q_fp, q_sf = q[0], q[1]
    if logits_dtype not in (torch.float32, torch.bfloat16):
        raise RuntimeError("Assertion error (attention.hpp): logits_dtype == kFloat32 or logits_dtype == kBFloat16")
    out = _paged(q_fp, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, False)
    return out.to(logits_dtype)

''')

FAMILIES = {
    "sgl-0.1.3": ("sgl-deep-gemm", "0.1.3", SGL_013),
    "sgl-0.2.5": ("sgl-deep-gemm", "0.2.5", SGL_025),
    "bundled": ("sglang-kernel", "0.4.1.post1", BUNDLED),
    "up-2.8.1": ("deep_gemm", "2.8.1", UP_281),
    "up-2.8.1-logits-dtype": ("deep_gemm", "2.8.1", UP_281_034),
}
