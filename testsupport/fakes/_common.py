"""The part every fake release shares: native-ish host checks, then the reference's math.

Not imported as a module: :func:`testsupport.fakes.source` joins it with one release's part into that
release's ``deep_gemm/__init__.py`` (one module, as the real packages are). ``HANG`` marks a launch
that would never finish.
"""

import torch

from dgcompat import reference as _R

# Each release's part sets its own values after this part (the checks below read them at call time).
LENS_DIMS = 2
COLLAPSE = False

class HANG(RuntimeError):
    pass

_state = {"num_sms": 132, "pdl": False, "mode": 0}
LAUNCHES: list[tuple[tuple[int, ...], ...]] = []  # (q, lengths, block table) shapes of each launch

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

METADATA_CALLS: list[tuple[int, ...]] = []  # the lengths shape of each schedule call

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
