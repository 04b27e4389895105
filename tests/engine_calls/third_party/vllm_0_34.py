# ruff: noqa: E501
"""vLLM 0.34.0's DeepGEMM indexer call sequences, copied from its wheel.

Engine code: it imports ``deep_gemm`` (at call time, as vLLM does) and knows nothing of dgcompat. The
function bodies, argument orders, keyword spellings, buffer patterns and dtype choices are vLLM's, from
``vllm-0.34.0-cp38-abi3-manylinux_2_28_x86_64.whl``:

- ``vllm/utils/deep_gemm.py``: ``_missing``, ``_import_deep_gemm``, ``_apply_pdl``, ``_lazy_init`` (its
  ``getattr`` resolution), ``get_num_sms``, ``mqa_logits_use_mx_scales``, ``mqa_logits_mx_inputs``,
  ``fp8_fp4_mqa_logits``, ``native_next_n_supported``, ``_paged_mqa_logits_schedule_slots``,
  ``get_paged_mqa_logits_metadata``, ``fp8_fp4_paged_mqa_logits``;
- ``vllm/utils/import_utils.py``: ``_has_module``, ``has_deep_gemm``;
- ``vllm/model_executor/layers/sparse_attn_indexer.py``: ``MXFP4_BLOCK_SIZE``, ``as_fp32_logits``,
  ``_gather_workspace_shapes``, ``kv_cache_as_quant_view`` and the DeepGEMM part of ``sparse_attn_indexer``
  (the prefill chunk loop and the decode branch) as :func:`indexer_prefill_logits` and
  :func:`indexer_decode_logits`;
- ``vllm/v1/attention/backends/mla/indexer.py``: ``DeepSeekV32IndexerDecodeMetadata``, ``dsa_indexer_uses_fp4``,
  ``dense_logits_rows``, ``_supports_varlen_paged_mqa_logits``, ``_supports_native_decode``, ``_use_flattening``
  and ``DeepseekV32IndexerMetadataBuilder``'s decode buffers (allocated once, refreshed in place: the
  ``scheduler_metadata_buffer`` of ``num_sms + 1`` rows narrowed to the schedule and written with
  ``schedule_metadata[:] = metadata``), ``_prepare_decode_tensors``, the decode part of ``build()`` and
  ``update_draft_decode_metadata``;
- ``vllm/v1/attention/ops/metadata.py``: ``_indexer_decode_metadata_kernel`` (the SM100 varlen expansion).

Trimmed (it needs other engine machinery), each place marked ``# trimmed:``: logging, ``vllm.envs`` (the
defaults are used), the config objects (their values become constructor arguments), DCP / PCP, the
compressed (DeepSeek-V4) KV path, the scale-format oracle of the GEMM wrappers, XPU / ROCm branches, the
top-k selection that consumes the logits (the functions return the logits instead), and three Triton
kernels, whose bodies are written in torch here (``_upcast_logits_kernel``, ``PrepareUniformDecodeKernel``,
``_indexer_decode_metadata_kernel``), plus the CUDA op ``cp_gather_indexer_k_quant_cache`` (likewise).
``current_platform`` / ``num_compute_units`` come from :mod:`engine_platform`.
"""

import functools
import importlib
import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import torch
from engine_platform import current_platform, num_compute_units


def cdiv(a: int, b: int) -> int:  # vllm/utils/math_utils.py
    return -(a // -b)


# --------------------------------------------------------------------------- vllm/utils/import_utils.py


def _has_module(module_name: str) -> bool:
    try:
        if importlib.util.find_spec(module_name) is None:
            return False
        importlib.import_module(module_name)
    except Exception:
        # trimmed: logger.warning("Module %s was found but failed to import", ...)
        return False
    return True


def has_deep_gemm() -> bool:
    return _has_module("deep_gemm") or _has_module("vllm.third_party.deep_gemm")


# --------------------------------------------------------------------------- vllm/utils/deep_gemm.py


def _missing(*_: Any, **__: Any) -> NoReturn:
    """Placeholder for unavailable DeepGEMM backend."""
    raise RuntimeError(
        "DeepGEMM backend is unavailable in the current vLLM environment, "
        "or the available DeepGEMM package does not provide the required APIs "
        "for these kernels."
    )


_cublaslt_gemm_nt_impl: Callable[..., Any] | None = None
_fp8_gemm_nt_impl: Callable[..., Any] | None = None
_fp8_einsum_impl: Callable[..., Any] | None = None
_grouped_impl: Callable[..., Any] | None = None
_grouped_masked_impl: Callable[..., Any] | None = None
_grouped_fp4_impl: Callable[..., Any] | None = None
_fp8_fp4_mqa_logits_impl: Callable[..., Any] | None = None
_fp8_fp4_paged_mqa_logits_impl: Callable[..., Any] | None = None
_get_paged_mqa_logits_metadata_impl: Callable[..., Any] | None = None
_fp8_fp4_sparse_mqa_logits_impl: Callable[..., Any] | None = None
_fp8_fp4_paged_sparse_mqa_logits_impl: Callable[..., Any] | None = None
_get_sparse_mqa_logits_metadata_impl: Callable[..., Any] | None = None
_get_paged_sparse_mqa_logits_metadata_impl: Callable[..., Any] | None = None
_tf32_hc_prenorm_gemm_impl: Callable[..., Any] | None = None
_mega_mhc_impl: Callable[..., Any] | None = None
_bf16_mega_gate_impl: Callable[..., Any] | None = None
_get_mn_major_tma_aligned_tensor_impl: Callable[..., Any] | None = None
_get_mk_alignment_for_contiguous_layout_impl: Callable[..., Any] | None = None
_get_theoretical_mk_alignment_for_contiguous_layout_impl: Callable[..., Any] | None = (
    None
)
_transform_sf_into_required_layout_impl: Callable[..., Any] | None = None
_pack_ue8m0_to_int_impl: Callable[..., Any] | None = None
_get_mn_major_tma_aligned_packed_ue8m0_tensor_impl: Callable[..., Any] | None = None
_get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor_impl: (
    Callable[..., Any] | None
) = None


@functools.cache
def _import_deep_gemm():
    """Import the deep_gemm module.

    Prefers an externally installed ``deep_gemm`` package (so users can
    pin a specific version), then falls back to the vendored copy bundled
    in the vLLM wheel.

    Returns ``None`` when neither source is usable.
    """
    # 1. Try the external (pip-installed) package first.
    try:
        module = importlib.import_module("deep_gemm")
        return module
    except ImportError:
        pass  # trimmed: logger.info_once(...)

    # 2. Fall back to the vendored copy bundled in the vLLM wheel.
    try:
        module = importlib.import_module("vllm.third_party.deep_gemm")
        return module
    except ImportError:
        pass  # trimmed: logger.info_once("Vendored deep_gemm not found either")
    except Exception:
        pass  # trimmed: logger.warning_once("Failed to import vendored deep_gemm: %s", e)

    return None


def _apply_pdl(mod, enable: bool = True) -> None:
    try:
        set_pdl_fn = getattr(mod, "set_pdl", None)
        if set_pdl_fn is None:
            return
        set_pdl_fn(enable)
    except Exception:  # noqa: BLE001
        pass  # trimmed: logger.warning_once("Failed to set DeepGEMM PDL on %s: %s", mod_name, e)


def _lazy_init() -> None:
    """Import deep_gemm and resolve symbols on first use."""
    global _cublaslt_gemm_nt_impl
    global _fp8_gemm_nt_impl, _fp8_einsum_impl
    global _grouped_impl, _grouped_masked_impl, _grouped_fp4_impl
    global _fp8_fp4_mqa_logits_impl, _fp8_fp4_paged_mqa_logits_impl
    global _get_paged_mqa_logits_metadata_impl
    global _fp8_fp4_sparse_mqa_logits_impl, _fp8_fp4_paged_sparse_mqa_logits_impl
    global _get_sparse_mqa_logits_metadata_impl
    global _get_paged_sparse_mqa_logits_metadata_impl
    global _tf32_hc_prenorm_gemm_impl, _mega_mhc_impl
    global _bf16_mega_gate_impl
    global _get_mn_major_tma_aligned_tensor_impl
    global _get_mk_alignment_for_contiguous_layout_impl
    global _get_theoretical_mk_alignment_for_contiguous_layout_impl
    global _transform_sf_into_required_layout_impl
    global _pack_ue8m0_to_int_impl
    global _get_mn_major_tma_aligned_packed_ue8m0_tensor_impl
    global _get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor_impl
    # fast path
    if (
        _cublaslt_gemm_nt_impl is not None
        or _fp8_gemm_nt_impl is not None
        or _fp8_einsum_impl is not None
        or _grouped_impl is not None
        or _grouped_masked_impl is not None
        or _grouped_fp4_impl is not None
        or _fp8_fp4_mqa_logits_impl is not None
        or _fp8_fp4_paged_mqa_logits_impl is not None
        or _get_paged_mqa_logits_metadata_impl is not None
        or _tf32_hc_prenorm_gemm_impl is not None
        or _mega_mhc_impl is not None
        or _bf16_mega_gate_impl is not None
        or _get_mk_alignment_for_contiguous_layout_impl is not None
        or _transform_sf_into_required_layout_impl is not None
        or _pack_ue8m0_to_int_impl is not None
        or _get_mn_major_tma_aligned_packed_ue8m0_tensor_impl is not None
        or _get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor_impl is not None
    ):
        return

    if not has_deep_gemm():
        return

    # trimmed: DG_JIT_CACHE_DIR defaulted to VLLM_CACHE_ROOT/deep_gemm

    _dg = _import_deep_gemm()
    if _dg is None:
        return

    # Enable PDL for DeepGEMM on architectures that support it (SM90+).
    if current_platform.is_arch_support_pdl():
        _apply_pdl(_dg, True)
    _cublaslt_gemm_nt_impl = getattr(_dg, "cublaslt_gemm_nt", None)
    _fp8_gemm_nt_impl = getattr(_dg, "fp8_gemm_nt", None)
    _fp8_einsum_impl = getattr(_dg, "fp8_einsum", None)
    _grouped_impl = getattr(_dg, "m_grouped_fp8_gemm_nt_contiguous", None)
    # DeepGEMM 2.8.0 dropped the legacy `fp8_*` aliases; keep both spellings so
    # an externally pinned older DeepGEMM still resolves.
    _grouped_masked_impl = getattr(
        _dg, "m_grouped_fp8_gemm_nt_masked", None
    ) or getattr(_dg, "fp8_m_grouped_gemm_nt_masked", None)
    _grouped_fp4_impl = getattr(_dg, "m_grouped_fp8_fp4_gemm_nt_contiguous", None)
    # DeepGEMM exposes fp8_fp4_*_mqa_logits as the canonical symbols that
    # handle both the FP8 and FP4 Q/K paths via a tuple-typed `q`.
    _fp8_fp4_mqa_logits_impl = getattr(_dg, "fp8_fp4_mqa_logits", None)
    _fp8_fp4_paged_mqa_logits_impl = getattr(_dg, "fp8_fp4_paged_mqa_logits", None)
    _get_paged_mqa_logits_metadata_impl = getattr(
        _dg, "get_paged_mqa_logits_metadata", None
    )
    # Sparse-indexer kernels (DeepGEMM >= 2.8, SM100 only).
    _fp8_fp4_sparse_mqa_logits_impl = getattr(_dg, "fp8_fp4_sparse_mqa_logits", None)
    _fp8_fp4_paged_sparse_mqa_logits_impl = getattr(
        _dg, "fp8_fp4_paged_sparse_mqa_logits", None
    )
    _get_sparse_mqa_logits_metadata_impl = getattr(
        _dg, "get_sparse_mqa_logits_metadata", None
    )
    _get_paged_sparse_mqa_logits_metadata_impl = getattr(
        _dg, "get_paged_sparse_mqa_logits_metadata", None
    )
    _tf32_hc_prenorm_gemm_impl = getattr(_dg, "tf32_hc_prenorm_gemm", None)
    _mega_mhc_impl = getattr(_dg, "mega_mhc", None)
    _bf16_mega_gate_impl = getattr(_dg, "bf16_mega_gate", None)
    _get_mn_major_tma_aligned_tensor_impl = getattr(
        _dg, "get_mn_major_tma_aligned_tensor", None
    )
    _get_mk_alignment_for_contiguous_layout_impl = getattr(
        _dg, "get_mk_alignment_for_contiguous_layout", None
    )
    _get_theoretical_mk_alignment_for_contiguous_layout_impl = getattr(
        _dg, "get_theoretical_mk_alignment_for_contiguous_layout", None
    )
    _transform_sf_into_required_layout_impl = getattr(
        _dg, "transform_sf_into_required_layout", None
    )
    _pack_ue8m0_to_int_impl = getattr(_dg, "pack_ue8m0_to_int", None)
    _get_mn_major_tma_aligned_packed_ue8m0_tensor_impl = getattr(
        _dg, "get_mn_major_tma_aligned_packed_ue8m0_tensor", None
    )
    _get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor_impl = getattr(
        _dg, "get_k_grouped_mn_major_tma_aligned_packed_ue8m0_tensor", None
    )
    # trimmed: DeepGemmQuantScaleFMT.init_oracle_cache() (the GEMM wrappers' scale format)


def get_num_sms() -> int:
    _lazy_init()
    dg = _import_deep_gemm()
    if dg is None:
        raise RuntimeError("DeepGEMM is not available")
    return int(dg.get_num_sms())


@functools.cache
def mqa_logits_use_mx_scales() -> bool:
    """Whether the MQA logits kernels take only MX-scaled inputs.

    On SM100 they need MXFP8/MXFP4 Q and K with packed UE8M0 scales, and the
    head weights pick the reduction: FP32 weights reduce in FP32, BF16 weights
    in BF16 and emit BF16 logits. FP8 indexer K caches then store each
    token's power-of-two scale as four equal UE8M0 bytes instead of an fp32.
    """
    return current_platform.is_cuda() and current_platform.is_device_capability_family(
        100
    )


# Four packed UE8M0 bytes encoding 1.0.
_UNIT_UE8M0_X4 = 0x7F7F7F7F
# Grown buffers are kept alive: CUDA graphs captured earlier still read them.
_unit_mx_scales: dict[torch.device, list[torch.Tensor]] = {}


def mqa_logits_mx_inputs(
    q: torch.Tensor,
    q_scale: torch.Tensor | None,
    weights: torch.Tensor,
    logits_dtype: torch.dtype,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """Adapt indexer Q scales and weights to the SM100 MQA logits kernels.

    FP8 Q folds its per-(token, head) power-of-two scale into ``weights``, so
    it is passed with unit MX scales, which is exact since relu commutes with
    a positive scale. ``weights`` are cast to ``logits_dtype``, so BF16 logits
    reduce in BF16 and FP32 logits in FP32. Returns ``(q_scale, weights)``
    unchanged off SM100.
    """
    if not mqa_logits_use_mx_scales():
        return q_scale, weights
    if q_scale is None:
        numel = q.numel() // q.shape[-1]
        bufs = _unit_mx_scales.setdefault(q.device, [])
        if not bufs or bufs[-1].numel() < numel:
            size = max(numel, 2 * bufs[-1].numel() if bufs else 0)
            bufs.append(
                torch.full((size,), _UNIT_UE8M0_X4, dtype=torch.int32, device=q.device)
            )
        q_scale = bufs[-1][:numel].view(q.shape[:-1])
    return q_scale, weights.to(logits_dtype)


def fp8_fp4_mqa_logits(
    q: tuple[torch.Tensor, torch.Tensor | None],
    kv: tuple[torch.Tensor, torch.Tensor],
    weights: torch.Tensor,
    cu_seqlen_ks: torch.Tensor,
    cu_seqlen_ke: torch.Tensor,
    max_seqlen_k: int,
    logits_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Compute MQA logits for a single sequence without KV paging.

    Returns:
        Compressed logits of shape [M, max_seqlen_k]: row ``i`` holds K
        positions ``[cu_seqlen_ks[i], cu_seqlen_ke[i])`` starting at column
        zero, and the tail is not cleaned.
    """
    _lazy_init()
    if _fp8_fp4_mqa_logits_impl is None:
        return _missing()
    return _fp8_fp4_mqa_logits_impl(
        q,
        kv,
        weights,
        cu_seqlen_ks,
        cu_seqlen_ke,
        max_seqlen_k,
        logits_dtype=logits_dtype,
    )


def native_next_n_supported(next_n: int) -> bool:
    """Whether the paged MQA logits kernel takes `next_n` Q rows per request.

    SM90 implements only {1, 2, 4}; SM100 and SM120 schedule any `next_n` via
    multi-atom tiles. Unsupported values must be flattened to one row per query.
    """
    if current_platform.is_device_capability_family(90):
        return next_n in (1, 2, 4)
    return True


def _paged_mqa_logits_schedule_slots(num_sms: int, next_n: int) -> int:
    """Scheduler tasks the paged MQA logits kernel launches.

    SM90 `next_n=4` runs one task per 2-CTA multicast cluster rather than per
    SM, and `fp8_fp4_paged_mqa_logits` asserts its metadata is sized to match.
    """
    num_kv_multicast = (
        2 if next_n == 4 and current_platform.is_device_capability_family(90) else 1
    )
    return num_sms // num_kv_multicast


def get_paged_mqa_logits_metadata(
    context_lens: torch.Tensor,
    block_size: int,
    num_sms: int,
    indices: torch.Tensor | None = None,
) -> torch.Tensor:
    """Build scheduling metadata for paged MQA logits.

    Returns:
        Tensor of shape [slots + 1, 2] consumed by `fp8_fp4_paged_mqa_logits`
        to schedule work across SMs.
    """
    _lazy_init()
    if _get_paged_mqa_logits_metadata_impl is None:
        return _missing()
    next_n = context_lens.shape[1] if context_lens.dim() == 2 else 1
    num_slots = _paged_mqa_logits_schedule_slots(num_sms, next_n)
    kwargs = {} if indices is None else {"indices": indices}
    return _get_paged_mqa_logits_metadata_impl(
        context_lens, block_size, num_slots, **kwargs
    )


def fp8_fp4_paged_mqa_logits(
    q: tuple[torch.Tensor, torch.Tensor | None],
    kv_cache: torch.Tensor,
    weights: torch.Tensor,
    context_lens: torch.Tensor,
    block_tables: torch.Tensor,
    schedule_metadata: torch.Tensor,
    max_model_len: int,
    logits_dtype: torch.dtype = torch.float32,
    indices: torch.Tensor | None = None,
) -> torch.Tensor:
    """Compute MQA logits using a paged KV-cache.

    Returns:
        Logits tensor of shape [B * next_n, max_model_len]; columns past each
        row's context length are not cleaned.
    """
    _lazy_init()
    if _fp8_fp4_paged_mqa_logits_impl is None:
        return _missing()
    # DeepGEMM asserts block_tables.stride(-1)==1. A trailing size-1 dim
    # (e.g. block_table shape [B,1] for short seqs under a large block_size)
    # can be a transposed view where .contiguous() is a no-op (torch treats the
    # size-1 dim's stride as irrelevant) yet stride(-1)!=1, failing the kernel.
    # clone to contiguous format to force stride(-1)==1.
    if block_tables.dim() >= 2 and block_tables.stride(-1) != 1:
        block_tables = block_tables.clone(memory_format=torch.contiguous_format)
    kwargs = {} if indices is None else {"indices": indices}
    return _fp8_fp4_paged_mqa_logits_impl(
        q,
        kv_cache,
        weights,
        context_lens,
        block_tables,
        schedule_metadata,
        max_model_len,
        logits_dtype=logits_dtype,
        **kwargs,
    )


# --------------------------------------------------------------------------- vllm/v1/attention/backends/mla/indexer.py

# trimmed: envs.VLLM_SPARSE_INDEXER_MAX_LOGITS_MB (default)
VLLM_SPARSE_INDEXER_MAX_LOGITS_MB = 512


def dsa_indexer_uses_fp4(kv_dtype: str) -> bool:
    """Whether the DeepSeek sparse indexer should use the MXFP4 K cache.

    trimmed: ``vllm_config.attention_config.resolve_indexer_kv_dtype("fp8")`` is the argument; the ROCm branch.
    """
    DSA_INDEXER_KV_DTYPES = ("fp8", "mxfp4")
    if kv_dtype not in DSA_INDEXER_KV_DTYPES:
        raise ValueError(
            f"indexer_kv_dtype={kv_dtype!r} is not supported by the DeepSeek "
            f"sparse indexer (expected one of {DSA_INDEXER_KV_DTYPES})."
        )
    use_fp4 = kv_dtype == "mxfp4"
    if use_fp4 and not current_platform.is_device_capability_family(100):
        raise ValueError(
            "indexer_kv_dtype='mxfp4' requires Blackwell datacenter GPUs "
            "(sm_10x, e.g. B200/GB200); sm_120 (consumer Blackwell) and "
            "earlier architectures are not supported."
        )
    return use_fp4


@dataclass
class DeepSeekV32IndexerDecodeMetadata:
    block_table: torch.Tensor
    # seq_lens: per-token effective context lengths.
    #   - flatten path / plain decode: 1D (batch_size,)
    #   - native MTP path: 2D (B, next_n) where [b,j] = L_b - next_n + j + 1
    # Both fp8_fp4_paged_mqa_logits and the topk kernels accept both shapes.
    seq_lens: torch.Tensor
    decode_lens: torch.Tensor
    requires_padding: bool
    schedule_metadata: torch.Tensor
    global_seq_lens: torch.Tensor | None = None
    per_req_decode_lens: torch.Tensor | None = None
    decode_is_uniform: bool = True
    write_max_decode_len: int = 0
    indices: torch.Tensor | None = None


def dense_logits_rows(max_seqlen_k: int, max_logits_bytes: int | None = None) -> int:
    """Query rows per dense MQA-logits call whose fp32 [rows, max_seqlen_k]
    logits fit max_logits_bytes (default: VLLM_SPARSE_INDEXER_MAX_LOGITS_MB).
    """
    if max_logits_bytes is None:
        max_logits_bytes = VLLM_SPARSE_INDEXER_MAX_LOGITS_MB * 1024 * 1024
    return max(1, max_logits_bytes // (4 * max(1, max_seqlen_k)))


def _supports_varlen_paged_mqa_logits() -> bool:
    return (
        current_platform.is_cuda()
        and current_platform.is_device_capability_family(100)
        and has_deep_gemm()
    )


def _supports_native_decode(next_n: int) -> bool:
    """Whether decode can pass `next_n` Q rows per request to the kernel
    instead of flattening to one single-token row per query, which re-reads
    the KV tile once per row.
    """
    if not (current_platform.is_cuda() and has_deep_gemm()):
        return next_n in (1, 2)
    if current_platform.is_device_capability_family(100):
        return True
    if current_platform.is_device_capability_family(90):
        return native_next_n_supported(next_n)
    return next_n in (1, 2)


def _use_flattening(num_speculative_tokens: int) -> bool:
    # trimmed: the adaptive-verification clause (speculative_config.enable_adaptive_verification is False)
    next_n = 1 + num_speculative_tokens
    return not _supports_native_decode(next_n)


def _prepare_uniform_decode(
    seq_lens: torch.Tensor,
    decode_seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    expanded_block_table: torch.Tensor,
    decode_lens: torch.Tensor,
    num_decode_tokens: int,
    max_decode_len: int,
) -> None:
    """trimmed: PrepareUniformDecodeKernel (Triton), one program per token, in torch."""
    idx = torch.arange(num_decode_tokens, device=seq_lens.device)
    req_id = idx // max_decode_len
    local_idx = idx % max_decode_len
    per_token_seq_len = torch.clamp(seq_lens[req_id] - max_decode_len + local_idx + 1, min=0)
    decode_seq_lens[:num_decode_tokens] = per_token_seq_len.to(decode_seq_lens.dtype)
    expanded_block_table[:num_decode_tokens, : block_table.shape[1]] = block_table[req_id]
    decode_lens[:num_decode_tokens] = 1


def _indexer_decode_metadata(
    query_start_loc: torch.Tensor,
    seq_lens: torch.Tensor,
    block_table: torch.Tensor,
    output_seq_lens: torch.Tensor,
    output_block_table: torch.Tensor,
    decode_lens: torch.Tensor,
    indices: torch.Tensor,
    per_req_lens: torch.Tensor,
    num_reqs: int,
    num_tokens: int,
    capacity: int,
) -> None:
    """trimmed: vllm/v1/attention/ops/metadata.py _indexer_decode_metadata_kernel (Triton), in torch."""
    token = torch.arange(num_tokens, device=seq_lens.device)
    actual_tokens = int(query_start_loc[num_reqs])
    req = torch.searchsorted(query_start_loc[1 : num_reqs + 1], token, right=True).clamp(max=num_reqs - 1)
    valid = token < actual_tokens
    start = query_start_loc[req]
    end = query_start_loc[req + 1]
    seq = seq_lens[req]
    length = torch.where(valid, seq - (end - start) + token - start + 1, torch.zeros_like(seq))
    output_seq_lens[:num_tokens] = length.to(output_seq_lens.dtype)
    decode_lens[:num_tokens] = 1
    indices[:num_tokens] = torch.where(valid, req, num_reqs + token - actual_tokens).to(indices.dtype)
    cols = block_table.shape[1]
    output_block_table[:num_tokens, :cols] = torch.where(valid.unsqueeze(1), block_table[req],
                                                         torch.zeros_like(block_table[req]))
    output_seq_lens[num_tokens:capacity] = 0
    per_req_lens[:num_reqs] = (query_start_loc[1 : num_reqs + 1] - query_start_loc[:num_reqs]).to(per_req_lens.dtype)


class DeepseekV32IndexerMetadataBuilder:
    """The decode half of vLLM 0.34's DSA indexer metadata builder: buffers allocated once (CUDA-graph
    safe), refreshed in place every step.

    trimmed: ``__init__(self, *args, block_table_width, **kwargs)`` reads the scheduler / speculative configs;
    here their values are arguments. DCP / PCP, ShardQ, KV compression and the prefill chunker are left out.
    """

    def __init__(
        self,
        *,
        max_num_batched_tokens: int,
        max_num_seqs: int,
        num_speculative_tokens: int,
        block_table_width: int,
        block_size: int,
        device: torch.device,
    ) -> None:
        self.device = device
        self.block_size = block_size  # trimmed: self.kv_cache_spec.num_states
        self.num_speculative_tokens = num_speculative_tokens
        self.compress_ratio = 1
        next_n = self.num_speculative_tokens + 1
        self.decode_threshold = next_n
        self.use_flattening = _use_flattening(num_speculative_tokens)
        self.supports_varlen = _supports_varlen_paged_mqa_logits()

        sm_count = num_compute_units(self.device.index)
        self.num_sms = sm_count

        self.offsets_buffer = torch.arange(
            next_n, device=self.device, dtype=torch.int32
        )
        self.decode_lens_buffer = torch.zeros(
            (max_num_batched_tokens,),
            dtype=torch.int32,
            device=self.device,
        )
        self.per_req_decode_lens_buffer = torch.zeros(
            (max_num_batched_tokens,),
            dtype=torch.int32,
            device=self.device,
        )
        # Shared workspace for decode seq_lens. Native MTP views this as
        # (B, max_decode_len) at runtime, keeping context_lens contiguous even
        # when max_decode_len is smaller than next_n.
        self.decode_seq_lens_buffer = torch.zeros(
            (max_num_batched_tokens,),
            dtype=torch.int32,
            device=self.device,
        )
        self.decode_indices_buffer = torch.zeros(
            (max_num_batched_tokens,),
            dtype=torch.int32,
            device=self.device,
        )
        self.arange_buffer = torch.arange(
            max(
                max_num_seqs * next_n,
                max_num_batched_tokens,
            ),
            dtype=torch.int32,
            device=self.device,
        )
        # Only decode tokens are expanded: at most next_n per request. Allocated
        # after the memory profile, so it must not scale with the token budget.
        max_decode_tokens = min(
            max_num_seqs * next_n,
            max_num_batched_tokens,
        )
        self.expanded_block_table_buffer = torch.zeros(
            (max_decode_tokens, block_table_width),
            dtype=torch.int32,
            device=self.device,
        )

        # See: DeepGMM/csrc/apis/attention.hpp. Sized for one slot per SM;
        # build() narrows it to whatever the kernel actually schedules.
        self.scheduler_metadata_buffer = torch.empty(
            (self.num_sms + 1, 2), dtype=torch.int32, device=self.device
        )

    def _prepare_decode_tensors(
        self,
        seq_lens: torch.Tensor,
        block_table: torch.Tensor,
        decode_lens: torch.Tensor,
        decode_lens_cpu: torch.Tensor,
        query_start_loc: torch.Tensor,
        num_decodes: int,
        num_decode_tokens: int,
        use_native: bool,
        next_n: int,
        max_decode_len: int,
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int, bool]:
        """Prepare native or per-token flattened decode tensors."""
        adaptive = False  # trimmed: spec_config.enable_adaptive_verification
        min_decode_len = int(decode_lens_cpu.min().item())
        if not use_native:
            assert self.decode_seq_lens_buffer.dim() == 1
            if (
                not self.supports_varlen
                and (num_decodes == 1 or not adaptive)
                and min_decode_len == max_decode_len
                and num_decodes * max_decode_len == num_decode_tokens
            ):
                # Uniform decode lengths with no cudagraph token padding.
                _prepare_uniform_decode(
                    seq_lens,
                    self.decode_seq_lens_buffer,
                    block_table,
                    self.expanded_block_table_buffer,
                    self.decode_lens_buffer,
                    num_decode_tokens,
                    max_decode_len,
                )
                self.decode_seq_lens_buffer[num_decode_tokens:] = 0
                seq_lens = self.decode_seq_lens_buffer[:num_decode_tokens]
                block_table = self.expanded_block_table_buffer[:num_decode_tokens]
                decode_lens = self.decode_lens_buffer[:num_decode_tokens]
                return seq_lens, block_table, decode_lens, num_decode_tokens, False
            else:
                # Variable decode lengths.
                actual_expanded = int(decode_lens_cpu.sum().item())
                expanded_offsets = torch.repeat_interleave(
                    seq_lens - decode_lens - query_start_loc,
                    decode_lens,
                    output_size=actual_expanded,
                )
                self.decode_seq_lens_buffer[:actual_expanded] = (
                    expanded_offsets + self.arange_buffer[:actual_expanded] + 1
                )
                self.decode_seq_lens_buffer[actual_expanded:] = 0
                seq_lens = self.decode_seq_lens_buffer[:num_decode_tokens]
                self.expanded_block_table_buffer[:actual_expanded] = (
                    torch.repeat_interleave(
                        block_table, decode_lens, dim=0, output_size=actual_expanded
                    )
                )
                if actual_expanded < num_decode_tokens:
                    self.expanded_block_table_buffer[
                        actual_expanded:num_decode_tokens, 0
                    ] = 0
                block_table = self.expanded_block_table_buffer[:num_decode_tokens]
                self.decode_lens_buffer[:num_decode_tokens] = 1
                decode_lens = self.decode_lens_buffer[:num_decode_tokens]
                return seq_lens, block_table, decode_lens, num_decode_tokens, False
        else:
            # Native path: plain decode (next_n==1) or spec decode
            # with 2D per-token context lengths (next_n > 1).
            requires_padding = min_decode_len != max_decode_len
            if use_native and next_n > 1:
                assert self.decode_seq_lens_buffer.dim() == 1
                # (B, max_decode_len): token j attends to
                # L - max_decode_len + j + 1 KV tokens.
                seq_lens_buffer = self.decode_seq_lens_buffer[
                    : num_decodes * max_decode_len
                ].view(num_decodes, max_decode_len)
                # Clamp at 0: padding requests have seq_len == 0, which would
                # otherwise make token 0 negative (next_n=2 gives 0-2+1+0 = -1).
                # Downstream kernels read these as uint32, turning -1 into ~4e9.
                seq_lens_buffer[:] = (
                    seq_lens.unsqueeze(1)
                    - max_decode_len
                    + 1
                    + self.offsets_buffer[:max_decode_len]
                ).clamp_(min=0)
                seq_lens = seq_lens_buffer
            return seq_lens, block_table, decode_lens, num_decodes, requires_padding

    def build_decode(
        self,
        query_start_loc: torch.Tensor,
        query_start_loc_cpu: torch.Tensor,
        seq_lens_all: torch.Tensor,
        block_table_tensor: torch.Tensor,
        num_decodes: int,
        num_decode_tokens: int,
    ) -> DeepSeekV32IndexerDecodeMetadata:
        """The ``if num_decodes > 0:`` part of ``build()`` (trimmed: the arguments are ``common_attn_metadata``'s
        fields; DCP localization and KV compression are left out)."""
        if not self.supports_varlen:
            torch.diff(
                query_start_loc[: num_decodes + 1],
                out=self.decode_lens_buffer[:num_decodes],
            )
            self.per_req_decode_lens_buffer[:num_decodes].copy_(
                self.decode_lens_buffer[:num_decodes]
            )
        decode_lens = self.decode_lens_buffer[:num_decodes]
        decode_lens_cpu = torch.diff(query_start_loc_cpu[: num_decodes + 1])

        global_seq_lens_for_decode: torch.Tensor | None = None
        seq_lens = seq_lens_all[:num_decodes]
        block_table = block_table_tensor[:num_decodes, ...]

        max_decode_len = int(decode_lens_cpu.max().item())
        min_decode_len = int(decode_lens_cpu.min().item())
        write_is_uniform = min_decode_len == max_decode_len
        next_n = 1 + self.num_speculative_tokens
        # The kernel sees max_decode_len Q rows, not the configured next_n,
        # so legality is per-step: on SM90 a uniformly 3-deep batch has no
        # native kernel. max_decode_len <= 1 always has one.
        step_next_n_ok = max_decode_len <= 1 or _supports_native_decode(
            max_decode_len
        )
        use_native = (
            not (self.use_flattening or self.supports_varlen)
            and max_decode_len <= next_n
            and step_next_n_ok
        )

        decode_indices = None
        if self.supports_varlen:
            capacity = self.decode_seq_lens_buffer.numel()
            _indexer_decode_metadata(
                query_start_loc,
                seq_lens,
                block_table,
                self.decode_seq_lens_buffer,
                self.expanded_block_table_buffer,
                self.decode_lens_buffer,
                self.decode_indices_buffer,
                self.per_req_decode_lens_buffer,
                num_decodes,
                num_decode_tokens,
                capacity,
            )
            seq_lens = self.decode_seq_lens_buffer[:num_decode_tokens]
            block_table = self.expanded_block_table_buffer[:num_decode_tokens]
            decode_lens = self.decode_lens_buffer[:num_decode_tokens]
            decode_indices = self.decode_indices_buffer[:num_decode_tokens]
            requires_padding = False
        else:
            seq_lens, block_table, decode_lens, batch_size, requires_padding = (
                self._prepare_decode_tensors(
                    seq_lens=seq_lens,
                    block_table=block_table,
                    decode_lens=decode_lens,
                    decode_lens_cpu=decode_lens_cpu,
                    query_start_loc=query_start_loc[:num_decodes],
                    num_decodes=num_decodes,
                    num_decode_tokens=num_decode_tokens,
                    use_native=use_native,
                    next_n=next_n,
                    max_decode_len=max_decode_len,
                )
            )

        # Non-MTP: deep_gemm paged MQA logits requires 2D context_lens
        # (csrc/apis/attention.hpp). Unsqueeze to (B, 1) so downstream
        # kernels see the same (B, next_n) layout as the MTP path.
        if seq_lens.dim() == 1:
            seq_lens = seq_lens.unsqueeze(-1)

        # DeepGEMM is required for the paged MQA logits on CUDA devices
        schedule_metadata = self.scheduler_metadata_buffer
        if current_platform.is_cuda() and has_deep_gemm():
            metadata = get_paged_mqa_logits_metadata(
                seq_lens,
                self.block_size,
                self.num_sms,
                indices=decode_indices,
            )
            schedule_metadata = self.scheduler_metadata_buffer[: metadata.shape[0]]
            schedule_metadata[:] = metadata

        return DeepSeekV32IndexerDecodeMetadata(
            block_table=block_table,
            seq_lens=seq_lens,
            decode_lens=decode_lens,
            requires_padding=requires_padding,
            schedule_metadata=schedule_metadata,
            indices=decode_indices,
            global_seq_lens=global_seq_lens_for_decode,
            per_req_decode_lens=self.per_req_decode_lens_buffer[:num_decodes],
            decode_is_uniform=write_is_uniform,
            write_max_decode_len=max_decode_len,
        )

    def update_draft_decode_metadata(
        self,
        decode: DeepSeekV32IndexerDecodeMetadata,
        seq_lens: torch.Tensor,
        block_table: torch.Tensor,
        num_decode_tokens: int,
    ) -> None:
        """trimmed: ``metadata`` (DeepseekV32IndexerMetadata) is unpacked into its fields; compress_ratio 1."""
        decode.block_table.copy_(block_table[:num_decode_tokens])
        if decode.indices is not None:
            decode.indices.copy_(self.arange_buffer[:num_decode_tokens])
        if decode.per_req_decode_lens is not None:
            decode.per_req_decode_lens.fill_(1)
        decode.seq_lens.view(-1).copy_(seq_lens)
        decode.decode_lens.fill_(1)

        if current_platform.is_cuda() and has_deep_gemm():
            schedule_metadata = get_paged_mqa_logits_metadata(
                decode.seq_lens,
                self.block_size,
                self.num_sms,
                indices=decode.indices,
            )
            assert schedule_metadata.shape == decode.schedule_metadata.shape
            decode.schedule_metadata.copy_(schedule_metadata)


# --------------------------------------------------------------------------- vllm/model_executor/layers/sparse_attn_indexer.py

# MXFP4 layout: 2 values packed per byte, ue8m0 (1-byte) scale per block of 32.
MXFP4_BLOCK_SIZE = 32


def as_fp32_logits(logits: torch.Tensor, row_ends: torch.Tensor) -> torch.Tensor:
    """Upcast BF16 MQA logits for the FP32 top-k kernels.

    Only columns below ``row_ends`` (int32, one per row) are converted, the
    span the consumers read; DeepGEMM's aligned row stride is kept.
    """
    if logits.dtype == torch.float32:
        return logits
    out = torch.empty_strided(
        logits.shape, logits.stride(), dtype=torch.float32, device=logits.device
    )
    num_rows, width = logits.shape
    if num_rows == 0 or width == 0:
        return out
    assert row_ends.numel() == num_rows and row_ends.dtype == torch.int32
    # trimmed: _upcast_logits_kernel (Triton) launched over (num_rows, splits), in torch
    for row, end in enumerate(row_ends.tolist()):
        end = min(max(int(end), 0), width)
        out[row, :end] = logits[row, :end].to(torch.float32)
    return out


def _gather_workspace_shapes(
    total_seq_lens: int,
    head_dim: int,
    fp8_dtype: torch.dtype,
    use_fp4_cache: bool,
) -> tuple[tuple[tuple[int, int], torch.dtype], tuple[tuple[int, int], torch.dtype]]:
    """Return ((values_shape, values_dtype), (scales_shape, scales_dtype)) for
    the K-gather workspace. FP8 path: (T, head_dim) fp8 + (T, 4) uint8 fp32
    scales. MXFP4 path: (T, head_dim // 2) uint8 packed mxfp4 +
    (T, head_dim // MXFP4_BLOCK_SIZE) uint8 ue8m0 scales."""
    if use_fp4_cache:
        return (
            ((total_seq_lens, head_dim // 2), torch.uint8),
            ((total_seq_lens, head_dim // MXFP4_BLOCK_SIZE), torch.uint8),
        )
    return (
        ((total_seq_lens, head_dim), fp8_dtype),
        ((total_seq_lens, 4), torch.uint8),
    )


def kv_cache_as_quant_view(
    kv_cache: torch.Tensor,
    head_dim: int,
    use_fp4_cache: bool,
) -> torch.Tensor:
    """4D ``[num_blocks, block_size, 1, head_width]`` view expected by
    DeepGEMM, from the 3D indexer kv-cache allocation."""
    if use_fp4_cache:
        assert kv_cache.ndim == 3 and kv_cache.dtype == torch.uint8
        num_blocks, block_size, _ = kv_cache.shape
        page_bytes = int(kv_cache.stride(0))
        fp4_bytes = head_dim // 2 + head_dim // MXFP4_BLOCK_SIZE
        return torch.as_strided(
            kv_cache,
            size=(num_blocks, block_size, 1, fp4_bytes),
            stride=(page_bytes, fp4_bytes, fp4_bytes, 1),
        )
    return kv_cache.unsqueeze(-2)


def cp_gather_indexer_k_quant_cache(
    kv_cache: torch.Tensor,
    dst_k: torch.Tensor,
    dst_scale: torch.Tensor,
    block_table: torch.Tensor,
    cu_seq_lens: torch.Tensor,
) -> None:
    """trimmed: ``ops.cp_gather_indexer_k_quant_cache`` (a CUDA op), in torch.

    Request ``r``'s first ``cu_seq_lens[r+1] - cu_seq_lens[r]`` tokens, read through its block-table row from
    the 3-D cache (per block: the tokens' value bytes, then their 4 scale bytes each), land in rows
    ``[cu_seq_lens[r], cu_seq_lens[r+1])`` of ``dst_k`` (value bytes) and ``dst_scale`` (scale bytes).
    """
    num_blocks, block_size = kv_cache.shape[0], kv_cache.shape[1]
    value_bytes = dst_k.view(torch.uint8).shape[-1]
    scale_bytes = dst_scale.shape[-1]
    page = kv_cache.reshape(num_blocks, -1)
    values = page[:, : block_size * value_bytes].reshape(num_blocks, block_size, value_bytes)
    scales = page[:, block_size * value_bytes : block_size * (value_bytes + scale_bytes)].reshape(
        num_blocks, block_size, scale_bytes)
    cu = cu_seq_lens.tolist()
    for r in range(len(cu) - 1):
        for pos in range(cu[r + 1] - cu[r]):
            blk = int(block_table[r, pos // block_size])
            dst_k.view(torch.uint8)[cu[r] + pos] = values[blk, pos % block_size]
            dst_scale[cu[r] + pos] = scales[blk, pos % block_size]


@dataclass
class DeepseekV32IndexerPrefillChunkMetadata:
    """The fields of vLLM's prefill chunk metadata that the DeepGEMM part of the chunk loop reads.

    trimmed: build_prefill_chunk_metadata's Triton kernel (the test builds the same bounds: token ``t`` of a
    request sees keys ``[cu_seq_lens[r], cu_seq_lens[r] + seq_len - query_len + t + 1)``).
    """

    cu_seqlen_ks: torch.Tensor
    cu_seqlen_ke: torch.Tensor
    cu_seq_lens: torch.Tensor
    total_seq_lens: int
    max_seqlen_k: int
    block_table: torch.Tensor
    token_start: int
    token_end: int
    local_cu_seq_lens: torch.Tensor
    local_total_seq_lens: int
    max_local_total_seq_lens: int
    skip_kv_gather: bool = False


def indexer_prefill_logits(
    q_quant: torch.Tensor,
    q_scale: torch.Tensor | None,
    weights: torch.Tensor,
    kv_cache: torch.Tensor,
    chunks: list[DeepseekV32IndexerPrefillChunkMetadata],
    head_dim: int,
    use_fp4_cache: bool,
    logits_dtype: torch.dtype,
) -> list[tuple[slice, torch.Tensor, torch.Tensor]]:
    """``sparse_attn_indexer``'s ``if has_prefill:`` branch up to the logits (trimmed: the workspace manager
    is plain ``torch.empty``; PCP, ShardQ, fused_mqa_topk, XPU and the top-k / DCP merge are left out).

    Returns ``(token rows, DeepGEMM's logits, the fp32 logits the top-k reads)`` per dense call.
    """
    fp8_dtype = current_platform.fp8_dtype()
    out: list[tuple[slice, torch.Tensor, torch.Tensor]] = []
    values_spec, scales_spec = _gather_workspace_shapes(
        max(c.max_local_total_seq_lens for c in chunks),
        head_dim,
        fp8_dtype,
        use_fp4_cache,
    )
    k_quant_full = torch.empty(values_spec[0], dtype=values_spec[1], device=q_quant.device)
    k_scale_full = torch.empty(scales_spec[0], dtype=scales_spec[1], device=q_quant.device)
    prefill_q, prefill_q_scale, prefill_weights = q_quant, q_scale, weights
    for chunk in chunks:
        cu_seqlen_ks = chunk.cu_seqlen_ks
        cu_seqlen_ke = chunk.cu_seqlen_ke
        assert chunk.local_cu_seq_lens is not None
        k_quant = k_quant_full[: chunk.max_local_total_seq_lens]
        k_scale = k_scale_full[: chunk.max_local_total_seq_lens]
        if not chunk.skip_kv_gather and chunk.local_total_seq_lens > 0:
            cp_gather_indexer_k_quant_cache(
                kv_cache,
                k_quant,
                k_scale,
                chunk.block_table,
                chunk.local_cu_seq_lens,
            )

        row_start, row_end = chunk.token_start, chunk.token_end
        q_slice = prefill_q[row_start:row_end]
        q_scale_slice = (
            prefill_q_scale[row_start:row_end]
            if prefill_q_scale is not None
            else None
        )
        # Rows per dense logits call under the logits budget.
        dense_rows = dense_logits_rows(chunk.max_seqlen_k)
        # DeepGEMM scalar-type tags (zero-copy): MXFP4 values → int8
        # (kPackedFP4), scales → int32 squeezed to 1-D kv_sf / 2-D q_sf.
        if use_fp4_cache:
            q_slice_cast = q_slice.view(torch.int8)
            k_quant_cast = k_quant.view(torch.int8)
            k_scale_cast = k_scale.view(torch.int32).squeeze(-1)
        else:
            q_slice_cast = q_slice
            k_quant_cast = k_quant
            k_scale_cast = k_scale.view(
                torch.int32 if mqa_logits_use_mx_scales() else torch.float32
            ).squeeze(-1)
        for sub in range(0, q_slice.shape[0], dense_rows):
            rows = slice(sub, min(sub + dense_rows, q_slice.shape[0]))
            tokens = slice(row_start + rows.start, row_start + rows.stop)
            q_scale_rows, chunk_weights = mqa_logits_mx_inputs(
                q_slice_cast[rows],
                q_scale_slice[rows] if q_scale_slice is not None else None,
                prefill_weights[tokens],
                logits_dtype,
            )
            row_ends = cu_seqlen_ke[rows] - cu_seqlen_ks[rows]
            logits = fp8_fp4_mqa_logits(
                (q_slice_cast[rows], q_scale_rows),
                (k_quant_cast, k_scale_cast),
                chunk_weights,
                cu_seqlen_ks[rows],
                cu_seqlen_ke[rows],
                chunk.max_seqlen_k,
                logits_dtype=logits_dtype,
            )
            raw = logits  # trimmed: the DeepSelect choice (topk_backend "auto": fp32 logits keep the per-row top-k)
            logits = as_fp32_logits(logits, row_ends)
            out.append((tokens, raw, logits))
    return out


def indexer_decode_logits(
    q_quant: torch.Tensor,
    q_scale: torch.Tensor | None,
    weights: torch.Tensor,
    kv_cache: torch.Tensor,
    decode_metadata: DeepSeekV32IndexerDecodeMetadata,
    num_decode_tokens: int,
    head_dim: int,
    max_model_len: int,
    use_fp4_cache: bool,
    logits_dtype: torch.dtype,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``sparse_attn_indexer``'s ``if has_decode:`` branch up to the logits (trimmed: the padded path's
    ``pack_seq_triton``, decode chunking (these batches fit the 2 GiB budget, so ``_decode_chunk_ranges``
    returns ``[]``), XPU, candidate blocks and the top-k).

    Returns ``(DeepGEMM's logits, the fp32 logits the top-k reads)``.
    """
    kv_cache = kv_cache_as_quant_view(kv_cache, head_dim, use_fp4_cache)
    decode_lens = decode_metadata.decode_lens
    needs_padded_path = decode_metadata.requires_padding or (
        num_decode_tokens % decode_lens.shape[0] != 0
    )
    if needs_padded_path:
        raise NotImplementedError("trimmed: the padded decode path (pack_seq_triton)")
    padded_q_quant_decode_tokens = q_quant[:num_decode_tokens].reshape(
        decode_lens.shape[0], -1, *q_quant.shape[1:]
    )
    if q_scale is not None:
        padded_q_scale = q_scale[:num_decode_tokens].reshape(
            decode_lens.shape[0], -1, *q_scale.shape[1:]
        )
    else:
        padded_q_scale = None
    batch_size = padded_q_quant_decode_tokens.shape[0]
    next_n = padded_q_quant_decode_tokens.shape[1]
    num_padded_tokens = batch_size * next_n
    seq_lens = decode_metadata.seq_lens[:batch_size]
    padded_q_quant_cast = (
        padded_q_quant_decode_tokens.view(torch.int8)
        if use_fp4_cache
        else padded_q_quant_decode_tokens
    )
    padded_q_scale, decode_weights = mqa_logits_mx_inputs(
        padded_q_quant_cast,
        padded_q_scale,
        weights[:num_padded_tokens],
        logits_dtype,
    )
    logits = fp8_fp4_paged_mqa_logits(
        (padded_q_quant_cast, padded_q_scale),
        kv_cache,
        decode_weights,
        seq_lens,
        decode_metadata.block_table,
        decode_metadata.schedule_metadata,
        max_model_len=max_model_len,
        logits_dtype=logits_dtype,
        indices=decode_metadata.indices,
    )
    raw = logits
    # Keeping bf16 halves top-k/candidate reads. SM100 decode is varlen:
    # one context length per row.
    # trimmed: `dcp_world_size != 1 or not get_indexer_topk(topk_backend).takes_bf16_logits(...)` is True
    # for the default top-k backend
    logits = as_fp32_logits(logits, seq_lens.view(-1))
    return raw, logits

