"""Pure-torch reference implementations of deep_gemm's kernels: the oracle API.

This package is the numerical oracle of the conformance suite and the compute engine behind the
CPU stand-ins for deep_gemm's native functions; :mod:`dgcompat.reference.backend` presents it as a
deep_gemm module (exactly deep_gemm's names, with its process state), the embedded backend used when
no deep_gemm is installed (``DGCOMPAT_BACKEND=reference``). Every function works on CPU and CUDA tensors, accumulates in float32 and never imports
deep_gemm.

Conventions
-----------
* FP8 means ``torch.float8_e4m3fn``. Scale factors ("sf") are float32, or int32 holding four
  packed UE8M0 exponent bytes (the k-block ``4*i`` in the lowest byte).
* "MN-major, TMA-aligned" means the MN dimension has stride 1 and the K (scale) dimension has
  stride ``get_tma_aligned_size(mn, element_size)``; a leading group dimension has stride
  ``k * aligned_mn``. A size-1 trailing dimension keeps the stride ``aligned_mn``.
* GEMMs are ``NT``: ``d = a @ b.T (+ c)``, written into ``d`` in place.
* Bad input raises :class:`dgcompat.errors.BadArgumentError`.

Semantics verified in DeepGEMM's sources
----------------------------------------
(deepseek-ai/DeepGEMM at ``v2.1.0`` and ``54e2261``; sgl-project/DeepGEMM ``release/v0.1.0``..
``release/v0.1.2``, ``dev`` and ``main``; and the headers shipped inside the published
sgl-deep-gemm 0.0.1 - 0.2.5 wheels.)

* ``deep_gemm/utils/math.py``: ``ceil_to_ue8m0`` is exponent bit math with the biased exponent
  clamped to ``[1, 254]``; ``per_token_cast_to_fp8`` / ``per_block_cast_to_fp8`` use
  ``amax.clamp(1e-4) / 448`` per 1x128 / 128x128 group (padding with zeros) and quantize
  ``x * (1 / sf)``.
* ``csrc/utils/math.hpp`` ``get_tma_aligned_size``: ``align(x, 16 / element_size)``.
* ``csrc/jit_kernels/impls/smxx_layout.hpp``: ``get_mn_major_tma_aligned_tensor`` returns its
  input unchanged when it already has the target strides, else an ``empty_strided`` copy with
  strides ``(aligned_mn * k, 1, aligned_mn)``; the torch fallback of
  ``get_mn_major_tma_aligned_packed_ue8m0_tensor`` takes ``bits >> 23`` as a byte, zero-pads K to a
  multiple of 4 and views 4 bytes as one int32 (little-endian). The CUDA packer there ORs raw bits
  (mantissa leak for non-power-of-two input); this module masks the exponent byte instead.
* ``csrc/apis/layout.hpp`` ``transform_sf_into_required_layout``: a 3-tuple recipe needs
  ``is_sfa`` (MN granularity ``recipe[0]`` for SFA, ``recipe[1]`` for SFB), a 2-tuple recipe
  forbids it. FP32 with granularity 1 becomes MN-major TMA-aligned; FP32 with granularity 128 is
  returned as is on the FP32 (SM90) path; on the UE8M0 (SM100) path FP32 is broadcast along MN
  (``index_select(arange(mn) // gran_mn)``) and packed. ``csrc/utils/layout.hpp``
  ``check_sf_layout`` gives the accepted shapes.
* ``tests/test_attention.py`` (``ref_fp8_mqa_logits``): ``logits[i, j] = sum_h w[i, h] *
  relu(q[i, h] . k[j])`` with ``k`` dequantized (``k_fp8 * k_scale``), masked to
  ``ks[i] <= j < ke[i]``. The SM90 kernels (``sm90_fp8_mqa_logits.cuh``,
  ``sm90_fp8_paged_mqa_logits.cuh``) compute ``relu`` on the raw FP8 dot product, reduce the
  heads with the weights and multiply by the KV scale last; this module does the same, which
  equals the test formula for positive scales.
* ``max_seqlen_k > 0`` (``csrc/apis/attention.hpp`` + the kernel's ``kIsCompressedLogits`` store):
  the output is ``(Nq, max_seqlen_k)`` and column ``j`` of row ``i`` holds key ``ks[i] + j`` for
  ``j < ke[i] - ks[i]``; ``clean_logits`` is rejected in that mode.
* Paged cache packing (``kv_cache_cast_to_fp8`` in ``tests/test_attention.py``; ``from_blob``
  views in ``attention.hpp``): per block, ``block_kv * D`` FP8 bytes (token ``t`` at
  ``[t*D, (t+1)*D)``), then ``block_kv`` float32 scales; viewed as
  ``(num_blocks, block_kv, 1, D + 4)`` uint8; scale = ``amax.clamp(1e-4) / 448`` per token.
* ``context_lens`` (``ref_paged_mqa_logits`` and the masks in ``test_paged_mqa_logits``): 1-D
  ``(B,)``: row ``j`` sees ``[0, ctx[b] - next_n + j + 1)``; 2-D ``(B, next_n)``: row ``j`` sees
  ``[0, ctx[b, j])``; ``(B*next_n, 1)`` with ``q`` viewed ``(B*next_n, 1, H, D)`` is the same
  per-row form.
* Schedule (``smxx_paged_mqa_logits_metadata`` in ``deep_gemm/include/deep_gemm/scheduler/
  paged_mqa_logits.cuh`` of sgl 0.0.1 - 0.1.3, ``sm90_paged_mqa_logits.cuh`` of sgl 0.1.4 - 0.2.5
  and upstream ``88965b0``+, ``impls/sm90_fp8_paged_mqa_logits.cuh`` of upstream ``v2.1.0``); see
  :func:`get_paged_mqa_logits_metadata` for the algorithm.

* FP4 / MX indexer inputs (``fp8_fp4_mqa_logits``, ``fp8_fp4_paged_mqa_logits`` of upstream 2.8.1 as vendored in
  vLLM 0.34.0): e2m1 values two per byte (value ``2i`` in the low nibble), one UE8M0 exponent per 32
  values packed four per int32 (group ``g`` in bits ``8g .. 8g+7``), the paged FP4 cache ``D/2 + 4`` bytes
  per token split per block like the FP8 one; each detail with its source in :mod:`._mx`.

Outputs of the logits functions hold ``-inf`` wherever the kernel would leave memory unwritten
(or write values that callers must ignore); callers must treat those entries as unspecified unless
``clean_logits=True`` was requested.
"""

from __future__ import annotations

from ._attention import fp8_fp4_mqa_logits
from ._attention import fp8_fp4_paged_mqa_logits
from ._attention import fp8_mqa_logits
from ._attention import fp8_paged_mqa_logits
from ._attention import get_paged_mqa_logits_metadata
from ._attention import pack_kv_cache
from ._attention import paged_schedule_matches
from ._attention import unpack_kv_cache
from ._common import FP8
from ._common import FP8_MAX
from ._common import MK_ALIGNMENT
from ._common import SPLIT_KV
from ._gemm import bf16_gemm_nt
from ._gemm import fp8_gemm_nt
from ._gemm import m_grouped_bf16_gemm_nt_contiguous
from ._gemm import m_grouped_bf16_gemm_nt_masked
from ._gemm import m_grouped_fp8_gemm_nt_contiguous
from ._gemm import m_grouped_fp8_gemm_nt_masked
from ._mx import FP4_E2M1_VALUES
from ._mx import FP4_MAX
from ._mx import MX_GROUP
from ._mx import cast_to_fp4
from ._mx import cast_to_mxfp8
from ._mx import dequantize_mx
from ._mx import pack_fp4_kv_cache
from ._mx import unpack_fp4
from ._mx import unpack_fp4_kv_cache
from ._mx import unpack_ue8m0_scales
from ._scales import ceil_to_ue8m0
from ._scales import dequantize_fp8
from ._scales import get_mn_major_tma_aligned_packed_ue8m0_tensor
from ._scales import get_mn_major_tma_aligned_tensor
from ._scales import get_tma_aligned_size
from ._scales import per_block_cast_to_fp8
from ._scales import per_token_cast_to_fp8
from ._scales import transform_scale_ue8m0
from ._scales import transform_sf_into_required_layout

__all__ = [
    "FP8", "FP8_MAX", "MK_ALIGNMENT", "SPLIT_KV",
    "ceil_to_ue8m0", "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor",
    "get_mn_major_tma_aligned_packed_ue8m0_tensor", "transform_sf_into_required_layout", "transform_scale_ue8m0",
    "per_token_cast_to_fp8", "per_block_cast_to_fp8", "dequantize_fp8",
    "fp8_gemm_nt", "bf16_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
    "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "fp8_mqa_logits", "fp8_paged_mqa_logits", "pack_kv_cache", "unpack_kv_cache", "get_paged_mqa_logits_metadata",
    "paged_schedule_matches", "fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits",
    "FP4_E2M1_VALUES", "FP4_MAX", "MX_GROUP", "cast_to_fp4", "cast_to_mxfp8", "dequantize_mx", "unpack_fp4",
    "unpack_ue8m0_scales", "pack_fp4_kv_cache", "unpack_fp4_kv_cache",
]
