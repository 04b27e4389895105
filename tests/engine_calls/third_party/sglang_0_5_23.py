# ruff: noqa: E501
"""SGLang 0.5.23's DeepGEMM indexer and FP4-experts call sequences, copied from its wheel.

Engine code: it imports ``deep_gemm`` (lazily, at call time, as SGLang's indexers do) and knows nothing of
dgcompat. The function bodies, argument orders (the positional ``False`` at index 7 of the V4 paged calls
and at index 5 of the V4.1 ragged call), keyword spellings, buffer patterns and dtype choices are SGLang's,
from ``sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl``:

- ``srt/layers/deep_gemm_wrapper/configurer.py`` / ``entrypoint.py``: ``DEEPGEMM_SCALE_UE8M0``,
  ``DEEPGEMM_NEED_TMA_ALIGNED_SCALES``, ``grouped_gemm_nt_f8f8bf16_contig``
  (``recipe_a`` / ``recipe_b`` forwarded as keywords);
- ``srt/layers/attention/dsa/utils.py``: ``resolve_num_sms``, ``resolve_paged_mqa_logits_metadata_fn``,
  ``resolve_fp8_paged_mqa_logits_fn``, ``resolve_fp8_mqa_logits_fn``;
- ``srt/layers/attention/dsa_backend.py``: ``_to_2d_context_lens``, ``_build_paged_mqa_schedule_2d_ctx_lens``,
  ``_refresh_paged_mqa_schedule_metadata`` (the schedule buffer kept across CUDA-graph replays, refreshed
  with ``copy_``) and the schedule built at metadata time;
- ``kernels/ops/attention/dsa/paged_mqa_logits.py``: ``_restore_row_stride``,
  ``deepgemm_paged_mqa_logits_native``, ``deepgemm_paged_mqa_logits_split``;
- ``srt/layers/attention/dsa/dsa_indexer.py``: ``_pad_heads_for_deep_gemm``, the DeepGEMM part of
  ``_get_topk_paged`` (with ``_chunked_fp8_paged_mqa_logits``: batches larger than the SM count are chunked,
  one schedule per chunk) and of ``_get_topk_ragged`` (the unchunked call, ``clean_logits=False``);
- ``srt/layers/attention/dsv4/metadata.py``: ``iter_row_chunks``, ``NonPagedIndexerPlan``,
  ``PagedIndexerMetadata`` (its schedule, ``copy_`` / ``copy_metadata``);
- ``srt/layers/attention/dsv4/indexer.py``: the DeepGEMM part of ``forward_c4_indexer`` (FP8:
  ``fp8_paged_mqa_logits``; FP4: ``fp8_fp4_paged_mqa_logits((q_fp4, q_sf), kv, w, lens, page_table, meta,
  max_len, False)``), ``_get_nonpaged_indexer_plan`` (its plan) and ``_nonpaged_mqa_logits``;
- ``kernels/ops/attention/dsv4/index_logits.py``: ``index_logits_dtype``, ``index_weights_dtype``,
  ``flat_index_logits_rows_per_tile``, ``flat_index_logits_tiles`` and ``deep_gemm_fp4_paged_mqa_logits``;
- ``srt/layers/attention/dsv4/v41_indexer/scoring.py``: ``DeepGEMMDecodeData.paged_logits_args``;
- ``srt/layers/attention/mqa_logits_utils.py``: ``mqa_logits_row_bytes``, ``mqa_logits_rows_per_chunk``;
- ``srt/layers/moe/moe_runner/deep_gemm.py``: ``DeepGemmMoeQuantInfo.scale_recipes`` and the gate-up GEMM of
  ``_run_contiguous_gemm``; ``srt/layers/quantization/mxfp4.py``: the DeepGEMM weight preparation of
  ``process_weights_after_loading`` (``transform_sf_into_required_layout(..., recipe=(1, 32), ...)``);
  ``kernels/ops/moe/ep_moe_kernels.py``: ``tma_align_input_scale``.

Trimmed, each place marked ``# trimmed:``: ``envs`` (defaults, or the value a test sets), the forward-batch
and memory-pool objects (their tensors become arguments), ROCm / XPU / torch-fallback / TileLang / CuTe DSL /
aiter branches, top-k transforms, hisparse, the memory-budget queries (``None``: no chunking by budget),
``compile_utils`` execution hooks, and two Triton kernels written in torch (``_tma_align_input_scale_kernel``)
or left out (the JIT indexer metadata). The platform probes come from :mod:`engine_platform`.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any, Callable, Iterator, List, Optional, Tuple

import torch
from engine_platform import current_platform


def ceil_div(x: int, y: int) -> int:  # srt/utils/common.py
    return (x + y - 1) // y


def ceil_align(x: int, y: int) -> int:  # srt/utils/common.py
    return ceil_div(x, y) * y


class _Env:
    """trimmed: ``sglang.srt.environ.envs.<NAME>`` (``.get()``), defaults unless a test sets ``value``."""

    def __init__(self, default: Any) -> None:
        self.value = default

    def get(self) -> Any:
        return self.value


class envs:  # noqa: N801 - SGLang's name
    SGLANG_OPT_DSV41_BF16_INDEX_LOGITS = _Env(None)
    SGLANG_FP8_PAGED_MQA_LOGITS_TORCH = _Env(False)
    SGLANG_OPT_USE_TILELANG_INDEXER = _Env(False)
    SGLANG_OPT_USE_AITER_INDEXER = _Env(False)


# --------------------------------------------------------------------------- srt/layers/deep_gemm_wrapper

DEEPGEMM_SCALE_UE8M0 = current_platform.is_sm100
DEEPGEMM_NEED_TMA_ALIGNED_SCALES = not DEEPGEMM_SCALE_UE8M0


def grouped_gemm_nt_f8f8bf16_contig(
    lhs: Tuple[torch.Tensor, torch.Tensor],
    rhs: Tuple[torch.Tensor, torch.Tensor],
    out: torch.Tensor,
    m_indices: torch.Tensor,
    recipe_a: Optional[Tuple[int, int]] = None,
    recipe_b: Optional[Tuple[int, int]] = None,
):
    import deep_gemm  # trimmed: entrypoint.py imports it at module level (under ENABLE_JIT_DEEPGEMM)

    m, k = lhs[0].shape
    num_groups, n, _ = rhs[0].shape

    if m == 0:
        return

    # trimmed: _sanity_check_input (SGLANG_DEEPGEMM_SANITY_CHECK, off by default)

    fp4_kwargs = {}
    if recipe_a is not None:
        fp4_kwargs["recipe_a"] = recipe_a
    if recipe_b is not None:
        fp4_kwargs["recipe_b"] = recipe_b

    # trimmed: compile_utils.deep_gemm_execution_hook(m, n, k, num_groups, kernel_type)
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(
        lhs, rhs, out, m_indices, **fp4_kwargs
    )


# --------------------------------------------------------------------------- kernels/ops/moe/ep_moe_kernels.py


def tma_align_input_scale(input_scale: torch.Tensor):
    assert input_scale.dim() == 2
    m, k_div_block_size = input_scale.shape
    padd_m = ceil_align(m, 16 // input_scale.element_size())  # get_tma_aligned_size
    output = torch.empty(
        (k_div_block_size, padd_m), dtype=input_scale.dtype, device=input_scale.device
    )
    # trimmed: _tma_align_input_scale_kernel (Triton) copying input_scale column-major, in torch
    output[:, :m] = input_scale.t()
    return output.t()[:m]


# --------------------------------------------------------------------------- srt/layers/moe/moe_runner/deep_gemm.py


@dataclass
class DeepGemmMoeQuantInfo:
    """trimmed: the MoeQuantInfo base and the MXFP8 branch of scale_recipes."""

    w13_weight: torch.Tensor
    w2_weight: torch.Tensor
    use_fp8: bool
    w13_scale: Optional[torch.Tensor] = None
    w2_scale: Optional[torch.Tensor] = None
    block_shape: Optional[List[int]] = None
    # DSV4 mxfp4 layout flag; selects recipe_a=(1,128)/recipe_b=(1,32) downstream.
    is_fp4_experts: bool = False
    use_mxfp8: bool = False

    def scale_recipes(
        self,
        *,
        activation_block_size: Optional[int],
        hidden_size: int,
        activation_scale_width: int,
    ) -> tuple[Optional[tuple[int, int]], Optional[tuple[int, int]]]:
        """Return DeepGEMM A/B scale recipes from explicit layout metadata."""
        if self.is_fp4_experts:
            return (1, 128), (1, 32)
        return None, None


def process_mxfp4_weights_for_deep_gemm(w13_weight: torch.Tensor, w13_weight_scale: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """srt/layers/quantization/mxfp4.py ``process_weights_after_loading``, its ``use_deep_gemm`` branch for
    one weight (trimmed: the layer object; w2 is prepared the same way).

    ``w13_weight``: uint8 packed e2m1 ``(E, N, K/2)``; ``w13_weight_scale``: uint8 e8m0 ``(E, N, K/32)``.
    """
    from deep_gemm import transform_sf_into_required_layout

    # Packed fp4 (e2m1 x2 per byte) weights: DeepGEMM expects int8.
    weight = w13_weight.view(torch.int8)
    # Checkpoint scales are uint8 e8m0 (biased exponents). DeepGEMM
    # SM100 needs them in packed-UE8M0 TMA-aligned MN-major layout.
    # Round-trip through fp32 is exact (values are powers of two).
    num_experts, n, _ = w13_weight_scale.shape
    k = weight.shape[2] * 2
    scale_f32 = w13_weight_scale.view(torch.float8_e8m0fnu).to(torch.float32)
    scale = transform_sf_into_required_layout(
        scale_f32,
        mn=n,
        k=k,
        recipe=(1, 32),
        num_groups=num_experts,
        disable_ue8m0_cast=False,
    )
    return weight, scale


def run_contiguous_gemm_gate_up(
    hidden_states: torch.Tensor,
    hidden_states_scale: torch.Tensor,
    m_indices: torch.Tensor,
    quant_info: DeepGemmMoeQuantInfo,
    activation_scale_block_size: Optional[int] = None,
) -> torch.Tensor:
    """``DeepGemmRunnerCore._run_contiguous_gemm`` up to the gate-up GEMM (trimmed: running_state is
    ``hidden_states``' own shape / device; the activation and the down GEMM, which is called the same way)."""
    all_tokens = hidden_states.shape[0]
    hidden_states_device = hidden_states.device
    N = quant_info.w13_weight.size(1)
    K = hidden_states.shape[1]

    recipe_a, recipe_b = quant_info.scale_recipes(
        activation_block_size=activation_scale_block_size,
        hidden_size=K,
        activation_scale_width=hidden_states_scale.shape[-1],
    )

    w13_weight_fp8 = (
        quant_info.w13_weight,
        quant_info.w13_scale,
    )

    gateup_output = torch.empty(
        (all_tokens, N),
        device=hidden_states_device,
        dtype=torch.bfloat16,
    )
    if DEEPGEMM_NEED_TMA_ALIGNED_SCALES:
        hidden_states_scale = tma_align_input_scale(hidden_states_scale)

    grouped_gemm_nt_f8f8bf16_contig(
        (hidden_states, hidden_states_scale),
        w13_weight_fp8,
        gateup_output,
        m_indices,
        recipe_a=recipe_a,
        recipe_b=recipe_b,
    )
    return gateup_output


# --------------------------------------------------------------------------- srt/layers/attention/dsa/utils.py


@lru_cache(maxsize=1)
def resolve_num_sms() -> int:
    """SM count used to size the paged-MQA-logits schedule (trimmed: the torch-fallback branch)."""
    import deep_gemm

    return deep_gemm.get_num_sms()


@lru_cache(maxsize=1)
def resolve_paged_mqa_logits_metadata_fn():
    import deep_gemm

    return deep_gemm.get_paged_mqa_logits_metadata


@lru_cache(maxsize=1)
def resolve_fp8_paged_mqa_logits_fn():
    import deep_gemm

    return deep_gemm.fp8_paged_mqa_logits


@lru_cache(maxsize=1)
def resolve_fp8_mqa_logits_fn():
    import deep_gemm

    return deep_gemm.fp8_mqa_logits


# --------------------------------------------------------------------------- srt/layers/attention/dsa_backend.py


def _to_2d_context_lens(seqlens_32: torch.Tensor, batch_size: int) -> torch.Tensor:
    # Always normalize to (N_total, 1) layout, to avoid deadlock at deep_gemm.fp8_paged_mqa_logits
    if seqlens_32.dim() == 2:
        if seqlens_32.size(1) == 1:
            return seqlens_32
        # Fall through and re-flatten if the caller already gave us a (bs, next_n)
        # view — we want (N_total, 1) regardless.
        seqlens_32 = seqlens_32.reshape(-1)
    return seqlens_32.contiguous().view(-1, 1)


@dataclass
class DSAMetadata:
    """trimmed: the fields of dsa_backend.DSAMetadata the indexer's paged path reads."""

    cache_seqlens_int32: torch.Tensor
    seqlens_expanded: torch.Tensor
    page_table_64: torch.Tensor
    paged_mqa_schedule_metadata: Optional[torch.Tensor] = None
    paged_mqa_ctx_lens_2d: Optional[torch.Tensor] = None


class DSABackendSchedule:
    """The schedule part of DeepseekSparseAttnBackend (trimmed: everything else)."""

    def __init__(self, speculative_num_draft_tokens: Optional[int]) -> None:
        self.speculative_num_draft_tokens = speculative_num_draft_tokens

    def _build_paged_mqa_schedule_2d_ctx_lens(
        self,
        is_target_verify: bool,
        cache_seqlens_int32: torch.Tensor,
        seqlens_expanded: torch.Tensor,
        batch_size: int,
    ) -> torch.Tensor:
        # target_verify with next_n>=2 uses DG-native q=[B,next_n,H,D] which
        # needs a [B, next_n] schedule; everything else stays per-token.
        next_n = self.speculative_num_draft_tokens
        if (
            is_target_verify
            and next_n
            and next_n >= 2
            and current_platform.is_sm100
            and not envs.SGLANG_FP8_PAGED_MQA_LOGITS_TORCH.get()
        ):
            return cache_seqlens_int32.view(-1, 1).expand(-1, next_n).contiguous()
        if is_target_verify:
            return _to_2d_context_lens(seqlens_expanded, batch_size)
        return _to_2d_context_lens(cache_seqlens_int32, batch_size)

    def init_forward_metadata(self, metadata: DSAMetadata, is_target_verify: bool, batch_size: int) -> None:
        """The schedule built once per forward at metadata time (init_forward_metadata)."""
        paged_mqa_ctx_lens_2d = self._build_paged_mqa_schedule_2d_ctx_lens(
            is_target_verify,
            metadata.cache_seqlens_int32,
            metadata.seqlens_expanded,
            batch_size,
        )
        # NOTE: block_kv arg must be 64 here — DG computes SPLIT_KV =
        # block_kv * 4 and both DG's and the indexer's compute kernels
        # require SPLIT_KV = 256; this is independent of the cache page size.
        paged_mqa_schedule_metadata = resolve_paged_mqa_logits_metadata_fn()(
            paged_mqa_ctx_lens_2d, 64, resolve_num_sms()
        )
        metadata.paged_mqa_schedule_metadata = paged_mqa_schedule_metadata
        metadata.paged_mqa_ctx_lens_2d = paged_mqa_ctx_lens_2d

    def _refresh_paged_mqa_schedule_metadata(
        self,
        metadata: DSAMetadata,
        seqlens_32_2d: torch.Tensor,
    ) -> None:
        new_schedule = resolve_paged_mqa_logits_metadata_fn()(
            seqlens_32_2d, 64, resolve_num_sms()
        )
        if metadata.paged_mqa_schedule_metadata is None:
            object.__setattr__(metadata, "paged_mqa_schedule_metadata", new_schedule)
        else:
            metadata.paged_mqa_schedule_metadata.copy_(new_schedule)

    def init_forward_metadata_replay_cuda_graph(self, metadata: DSAMetadata, is_target_verify: bool, bs: int) -> None:
        """The schedule refresh of the replay path, outside the captured graph (trimmed: the other buffers,
        which the caller refreshes in place)."""
        seqlens_32_2d = self._build_paged_mqa_schedule_2d_ctx_lens(
            is_target_verify,
            metadata.cache_seqlens_int32,
            metadata.seqlens_expanded,
            bs,
        )
        self._refresh_paged_mqa_schedule_metadata(metadata, seqlens_32_2d)
        # `copy_` preserves the buffer's data_ptr that the captured graph captured.
        if metadata.paged_mqa_ctx_lens_2d is None:
            object.__setattr__(metadata, "paged_mqa_ctx_lens_2d", seqlens_32_2d)
        else:
            metadata.paged_mqa_ctx_lens_2d.copy_(seqlens_32_2d)


# --------------------------------------------------------------------------- kernels/ops/attention/dsa/paged_mqa_logits.py


def _restore_row_stride(logits: torch.Tensor) -> torch.Tensor:
    """Undo PyTorch's DLPack stride normalization on single-row DeepGEMM logits."""
    if logits.shape[0] <= 1 and logits.stride(0) % 4 != 0:
        width = logits.shape[1]
        logits = logits.as_strided((logits.shape[0], width), ((width + 3) // 4 * 4, 1))
    return logits


def deepgemm_paged_mqa_logits_native(
    fp8_paged_mqa_logits_fn: Callable[..., torch.Tensor],
    q_fp8: torch.Tensor,
    kv_cache_fp8: torch.Tensor,
    weights: torch.Tensor,
    ctx_lens_2d: torch.Tensor,
    block_tables: torch.Tensor,
    schedule_metadata: torch.Tensor,
    max_seq_len: int,
    *,
    q_offset: int,
    B: int,
    next_n: int,
) -> torch.Tensor:
    # block_tables[::next_n] de-expands the caller's repeat_interleave without a
    # copy (DeepGEMM only checks `stride(1) == 1`).
    logits = fp8_paged_mqa_logits_fn(
        q_fp8[:q_offset].view(B, next_n, q_fp8.shape[1], q_fp8.shape[2]),
        kv_cache_fp8,
        weights[:q_offset],
        ctx_lens_2d,
        block_tables[::next_n],
        schedule_metadata,
        max_seq_len,
        clean_logits=False,
    )
    return _restore_row_stride(logits)


def deepgemm_paged_mqa_logits_split(
    fp8_paged_mqa_logits_fn: Callable[..., torch.Tensor],
    q_fp8: torch.Tensor,
    kv_cache_fp8: torch.Tensor,
    weights: torch.Tensor,
    ctx_lens_2d: torch.Tensor,
    block_tables: torch.Tensor,
    schedule_metadata: torch.Tensor,
    max_seq_len: int,
    *,
    q_offset: int,
) -> torch.Tensor:
    q_fp8 = q_fp8.unsqueeze(1)
    logits = fp8_paged_mqa_logits_fn(
        q_fp8[:q_offset],
        kv_cache_fp8,
        weights[:q_offset],
        ctx_lens_2d,
        block_tables,
        schedule_metadata,
        max_seq_len,
        clean_logits=False,
    )
    return _restore_row_stride(logits)


# --------------------------------------------------------------------------- srt/layers/attention/dsa/dsa_indexer.py


class DSAIndexer:
    """The DeepGEMM calls of SGLang's DeepSeek-V3.2 (DSA) indexer (trimmed: the layer's projections, the
    token-to-KV pool, top-k; the tensors they produce are arguments)."""

    def __init__(self, n_heads: int) -> None:
        self.n_heads = n_heads
        self.sm_count = resolve_num_sms()

    @staticmethod
    def _pad_heads_for_deep_gemm(q_fp8, weights):
        """Pad q and weights to 32 heads when num_heads < 32,
        so that block_q = 128/num_heads doesn't exceed seq_len_alignment(4)."""
        num_heads = q_fp8.shape[1]
        if num_heads >= 32:
            return q_fp8, weights, num_heads
        target_heads = 32
        q_fp8 = torch.nn.functional.pad(q_fp8, (0, 0, 0, target_heads - num_heads))
        weights = torch.nn.functional.pad(weights, (0, target_heads - num_heads))
        return q_fp8, weights, num_heads

    def _get_topk_paged_logits(
        self,
        is_target_verify: bool,
        q_fp8: torch.Tensor,
        weights: torch.Tensor,
        metadata: DSAMetadata,
        kv_cache_fp8: torch.Tensor,
        q_offset: int,
        B: int,
    ) -> torch.Tensor:
        """``_get_topk_paged`` up to the logits (trimmed: page-size asserts, HIP / XPU / CuTe DSL / aiter
        branches, ``_mask_init_and_local_tokens`` and the top-k transform).

        ``kv_cache_fp8``: the layer's 2-D index-K buffer ``(pages, 64 * 132)``.
        """
        page_size = 64
        block_tables = metadata.page_table_64
        max_seq_len = block_tables.shape[1] * page_size
        blocksize = page_size
        if is_target_verify:
            seqlens_32 = metadata.seqlens_expanded
        else:
            seqlens_32 = metadata.cache_seqlens_int32
        # Reuse pre-computed schedule metadata if available (from init_forward_metadata),
        # otherwise fall back to computing it here.
        schedule_metadata = getattr(metadata, "paged_mqa_schedule_metadata", None)
        assert len(q_fp8.shape) == 3

        next_n = q_offset // B if B > 0 else 0
        ctx_2d = getattr(metadata, "paged_mqa_ctx_lens_2d", None)
        use_dg_native = (
            is_target_verify
            and next_n >= 2
            and ctx_2d is not None
            and ctx_2d.shape == (B, next_n)
        )

        if use_dg_native:
            seqlens_32_2d = ctx_2d
        elif ctx_2d is not None:
            if ctx_2d.size(1) == 1:
                seqlens_32_2d = ctx_2d
            else:
                seqlens_32_2d = ctx_2d.reshape(-1).contiguous().view(-1, 1)
        elif seqlens_32.dim() == 2:
            if seqlens_32.size(1) == 1:
                seqlens_32_2d = seqlens_32.contiguous()
            else:
                seqlens_32_2d = seqlens_32.reshape(-1).contiguous().view(-1, 1)
        else:
            seqlens_32_2d = seqlens_32.contiguous().view(-1, 1)
        if schedule_metadata is None:
            schedule_metadata = resolve_paged_mqa_logits_metadata_fn()(
                seqlens_32_2d, blocksize, self.sm_count
            )

        assert len(kv_cache_fp8.shape) == 2
        block_kv = page_size
        num_heads_kv = 1
        head_dim_with_sf = 132
        kv_cache_fp8 = kv_cache_fp8.view(
            kv_cache_fp8.shape[0], block_kv, num_heads_kv, head_dim_with_sf
        )
        assert len(weights.shape) == 3
        weights = weights.squeeze(2)

        # SM100 DeepGEMM paged MQA requires batch_size <= num_sms; chunk larger batches.
        def _chunked_fp8_paged_mqa_logits(
            q: torch.Tensor,
            kv_cache: torch.Tensor,
            w: torch.Tensor,
            context_lens: torch.Tensor,
            block_table: torch.Tensor,
            mqa_schedule_metadata: torch.Tensor,
            max_len: int,
            clean_logits: bool = False,
        ) -> torch.Tensor:
            batch_size, chunk_next_n = q.shape[:2]
            if batch_size == 0:
                return torch.empty((0, max_len), dtype=torch.float32, device=q.device)
            if batch_size <= self.sm_count:
                return resolve_fp8_paged_mqa_logits_fn()(
                    q,
                    kv_cache,
                    w,
                    context_lens,
                    block_table,
                    mqa_schedule_metadata,
                    max_len,
                    clean_logits=clean_logits,
                )
            logits_chunks = []
            for start in range(0, batch_size, self.sm_count):
                end = min(start + self.sm_count, batch_size)
                chunk_context_lens = context_lens[start:end]
                chunk_schedule_metadata = resolve_paged_mqa_logits_metadata_fn()(
                    chunk_context_lens, blocksize, self.sm_count
                )
                logits_chunks.append(
                    resolve_fp8_paged_mqa_logits_fn()(
                        q[start:end],
                        kv_cache,
                        w[start * chunk_next_n : end * chunk_next_n],
                        chunk_context_lens,
                        block_table[start:end],
                        chunk_schedule_metadata,
                        max_len,
                        clean_logits=clean_logits,
                    )
                )
            return torch.cat(logits_chunks, dim=0)

        if use_dg_native:
            logits = deepgemm_paged_mqa_logits_native(
                _chunked_fp8_paged_mqa_logits,
                q_fp8,
                kv_cache_fp8,
                weights,
                seqlens_32_2d,
                block_tables,
                schedule_metadata,
                max_seq_len,
                q_offset=q_offset,
                B=B,
                next_n=next_n,
            )
        else:
            logits = deepgemm_paged_mqa_logits_split(
                _chunked_fp8_paged_mqa_logits,
                q_fp8,
                kv_cache_fp8,
                weights,
                seqlens_32_2d,
                block_tables,
                schedule_metadata,
                max_seq_len,
                q_offset=q_offset,
            )
        return logits

    def _get_topk_ragged_logits(
        self,
        q_fp8: torch.Tensor,
        weights: torch.Tensor,
        kv_fp8: Tuple[torch.Tensor, torch.Tensor],
        ks: torch.Tensor,
        ke: torch.Tensor,
    ) -> torch.Tensor:
        """``_get_topk_ragged``'s unchunked CUDA call (trimmed: the K gather, the budget check (these
        matrices are below 8M elements: no chunking), ``_with_real_sm_count`` (no pipeline parallelism),
        HIP / XPU and the top-k)."""
        assert len(weights.shape) == 3
        weights = weights.squeeze(-1)
        q_offset = ks.shape[0]
        assert q_fp8[:q_offset].shape[0] != 0
        q_padded, w_padded, _ = self._pad_heads_for_deep_gemm(
            q_fp8[:q_offset], weights[:q_offset]
        )
        logits = resolve_fp8_mqa_logits_fn()(
            q_padded,
            kv_fp8,
            w_padded,
            ks,
            ke,
            clean_logits=False,
        )
        assert logits.shape[0] == q_offset
        assert logits.shape[1] == kv_fp8[0].shape[0]
        return logits


# --------------------------------------------------------------------------- srt/layers/attention/mqa_logits_utils.py

MQA_LOGITS_BYTES_PER_ELEM = 4
# DeepGEMM pads the logits row stride to 1024 bytes, i.e. 256 fp32 columns.
MQA_LOGITS_ROW_ALIGN_ELEMS = 256


def mqa_logits_row_bytes(num_cols: int) -> int:
    aligned_cols = (
        ceil_div(num_cols, MQA_LOGITS_ROW_ALIGN_ELEMS) * MQA_LOGITS_ROW_ALIGN_ELEMS
    )
    return aligned_cols * MQA_LOGITS_BYTES_PER_ELEM


def mqa_logits_rows_per_chunk(
    *, num_rows: int, row_bytes: int, budget_bytes: int
) -> Optional[int]:
    """Query rows per chunk so one logits chunk fits the budget; None if all rows fit."""
    if num_rows * row_bytes <= budget_bytes:
        return None
    rows = max(budget_bytes // max(row_bytes, 1), 1)
    return int(rows) if rows < num_rows else None


# --------------------------------------------------------------------------- srt/layers/attention/dsv4/metadata.py


def iter_row_chunks(*, num_rows: int, rows_per_chunk: Optional[int]) -> Iterator[slice]:
    if rows_per_chunk is None or rows_per_chunk >= num_rows:
        yield slice(0, num_rows)
        return
    for start in range(0, num_rows, rows_per_chunk):
        yield slice(start, min(start + rows_per_chunk, num_rows))


def copy_metadata(
    *,
    src,
    dst,
    check_eq_fields: List[str],
    copy_fields: List[str],
    assign_fields: Optional[List[str]] = None,
):
    assign_fields = assign_fields or []

    for field_name in check_eq_fields:
        src_val = getattr(src, field_name)
        dst_val = getattr(dst, field_name)
        assert src_val == dst_val, f"{field_name=} {src_val=} {dst_val=}"

    for field_name in copy_fields:
        src_val = getattr(src, field_name)
        dst_val = getattr(dst, field_name)
        if src_val is None and dst_val is None:
            continue
        assert dst_val is not None, f"{field_name=} {src_val=} {dst_val=}"
        if hasattr(dst_val, "copy_"):
            dst_val.copy_(src_val)
        else:
            # trimmed: warnings.warn(...)
            setattr(dst, field_name, src_val)

    for field_name in assign_fields:
        setattr(dst, field_name, getattr(src, field_name))

    provided_fields = check_eq_fields + copy_fields + assign_fields
    provided_fields_unique = set(provided_fields)
    assert len(provided_fields) == len(provided_fields_unique), (
        f"{provided_fields=} has dup"
    )
    all_fields = {f.name for f in fields(src)}
    provided_fields = set(provided_fields)
    assert provided_fields == all_fields, (
        f"{provided_fields - all_fields=}, {all_fields - provided_fields=}"
    )


@dataclass
class NonPagedIndexerPlan:
    page_table: torch.Tensor
    gather_seq_lens: torch.Tensor
    ks: torch.Tensor
    ke: torch.Tensor
    seq_len_sum: int
    max_seq_len: int
    max_seqlen_k: int
    query_rows: int
    # None runs all query rows in one fp8_mqa_logits call.
    rows_per_chunk: Optional[int] = None


@dataclass
class PagedIndexerMetadata:
    page_size: int
    compressed_page_size: int
    page_table: torch.Tensor
    compressed_seq_lens: torch.Tensor
    use_topk_v2: bool
    force_deep_gemm_metadata: bool = False
    use_prefill_cuda_graph: bool = False
    # Indexer source compression ratio: 4 for c4, 1 or 2 for the dsv41 sources.
    compress_ratio: int = 4
    rows_per_request: int = 1
    # A list when the dynamic-budget forward is row-chunked: one schedule per chunk.
    deep_gemm_metadata: Any = field(init=False, repr=False)
    topk_metadata: torch.Tensor = field(init=False, repr=False)
    nonpaged_plan: Optional[NonPagedIndexerPlan] = field(
        init=False, repr=False, default=None
    )
    # Decided once per forward and shared by every layer's indexer call.
    rows_per_chunk: Optional[int] = field(init=False, repr=False, default=None)
    mqa_logits_budget_bytes: Optional[int] = field(init=False, repr=False, default=None)
    topk_metadata_chunks: Optional[List[torch.Tensor]] = field(
        init=False, repr=False, default=None
    )

    def __post_init__(self):
        # trimmed: the HIP / XPU / torch-fallback branch (deep_gemm_metadata = None)
        import deep_gemm

        # trimmed: use_jit_indexer (SGLANG_OPT_USE_JIT_INDEXER_METADATA off; batches below 11673 rows)
        from deep_gemm import get_paged_mqa_logits_metadata

        compressed_seq_lens = self.compressed_seq_lens.to(torch.int32)
        if compressed_seq_lens.dim() == 1:
            compressed_seq_lens = compressed_seq_lens.unsqueeze(-1)
        num_rows = compressed_seq_lens.shape[0]
        group = self.rows_per_request
        if group > 1:
            assert compressed_seq_lens.shape[1] == 1 and num_rows % group == 0, (
                f"{num_rows} query rows do not group by {group}"
            )
        # trimmed: self._mqa_logits_budget / plan_indexer_row_chunks (no budget on these sizes: one call)
        self.mqa_logits_budget_bytes = None
        self.rows_per_chunk = None
        if self.rows_per_chunk is not None:
            # Chunk metadata is shared by all indexer layers in this forward.
            self.deep_gemm_metadata = [
                get_paged_mqa_logits_metadata(
                    compressed_seq_lens[rows].view(-1, group),
                    self.compressed_page_size,
                    deep_gemm.get_num_sms(),
                )
                for rows in iter_row_chunks(
                    num_rows=num_rows, rows_per_chunk=self.rows_per_chunk
                )
            ]
        else:
            self.deep_gemm_metadata = get_paged_mqa_logits_metadata(
                compressed_seq_lens.view(-1, group),
                self.compressed_page_size,
                deep_gemm.get_num_sms(),
            )

        assert isinstance(self.deep_gemm_metadata, (torch.Tensor, list))

        # trimmed: plan_topk_v2 (use_topk_v2 is False here)
        self.topk_metadata = torch.empty((0,))

        assert self.page_size == 256, "the system hardcodes page_size=256"
        assert self.page_size % self.compress_ratio == 0, (
            f"compress_ratio {self.compress_ratio} must divide page_size {self.page_size}"
        )

    @property
    def max_seq_len(self) -> int:
        return self.page_table.shape[1] * self.page_size

    @property
    def max_compressed_seq_len(self) -> int:
        return self.page_table.shape[1] * self.compressed_page_size

    def copy_(self, other: PagedIndexerMetadata):
        # A chunked schedule list has no in-place copy; rebind it instead.
        chunked = isinstance(self.deep_gemm_metadata, list) or isinstance(
            other.deep_gemm_metadata, list
        )
        if chunked:  # trimmed: `is_hip() or`
            copy_fields = ["page_table", "compressed_seq_lens"]
            assign_fields = ["deep_gemm_metadata", "nonpaged_plan"]
        else:
            copy_fields = ["page_table", "compressed_seq_lens", "deep_gemm_metadata"]
            assign_fields = ["nonpaged_plan"]
        copy_fields += ["topk_metadata"]
        assign_fields += [
            "rows_per_chunk",
            "mqa_logits_budget_bytes",
            "topk_metadata_chunks",
        ]
        copy_metadata(
            src=other,
            dst=self,
            check_eq_fields=[
                "page_size",
                "compressed_page_size",
                "compress_ratio",
                "force_deep_gemm_metadata",
                "use_prefill_cuda_graph",
                "use_topk_v2",
                "rows_per_request",
            ],
            copy_fields=copy_fields,
            assign_fields=assign_fields,
        )
        self.nonpaged_plan = None


# --------------------------------------------------------------------------- srt/layers/attention/dsv4/indexer.py

FP8_DTYPE = torch.float8_e4m3fn


def c4_indexer_logits(
    q_indexer,
    weights: torch.Tensor,
    index_k_with_scale_buffer: torch.Tensor,
    indexer_metadata: PagedIndexerMetadata,
    use_fp4_indexer: bool,
) -> List[Tuple[slice, torch.Tensor]]:
    """``forward_c4_indexer``'s paged DeepGEMM path (trimmed: the projections and their multi-stream
    preparation, aiter FP4, the nonpaged plan (:func:`nonpaged_mqa_logits`), the hisparse / capture outputs
    and the top-k transform, which reads each chunk's logits).

    ``q_indexer``: FP8 ``(N, H, 128)`` or FP4 ``(q_fp4 (N, H, 64) int8, q_sf (N, H) int32)``;
    ``weights``: ``(N, H, 1)``; ``index_k_with_scale_buffer``: the layer's 2-D index-K pool
    ``(pages, 64 * 132)`` (FP8) or ``(pages, 64 * 68)`` (FP4). Returns ``(rows, logits)`` per call.
    """
    if use_fp4_indexer:
        q_fp4, q_sf = q_indexer
        assert len(q_fp4.shape) == 3
        assert len(q_sf.shape) == 2
        q = (q_fp4.unsqueeze(1), q_sf.unsqueeze(1))
    else:
        assert len(q_indexer.shape) == 3
        q = q_indexer.unsqueeze(1)

    assert len(weights.shape) == 3
    weights = weights.squeeze(2)
    if use_fp4_indexer:
        weights = weights.float()
        if envs.SGLANG_OPT_USE_TILELANG_INDEXER.get():
            raise RuntimeError("DeepSeek V4 FP4 indexer requires DeepGEMM indexer.")
        from deep_gemm import fp8_fp4_paged_mqa_logits as fn
    else:
        # trimmed: the TileLang / aiter / torch / XPU choices (all off)
        from deep_gemm import fp8_paged_mqa_logits as fn

    query_rows = q_indexer[0].shape[0] if use_fp4_indexer else q_indexer.shape[0]

    def match_num_queries(tensor: torch.Tensor, value: int) -> torch.Tensor:
        if tensor.shape[0] == query_rows:
            return tensor
        if tensor.shape[0] > query_rows:
            return tensor[:query_rows]
        pad = (0, 0) * (tensor.dim() - 1) + (0, query_rows - tensor.shape[0])
        return torch.nn.functional.pad(tensor, pad, value=value)

    c4_seq_lens = match_num_queries(indexer_metadata.compressed_seq_lens, value=1)
    _c4sl = c4_seq_lens
    page_table = match_num_queries(indexer_metadata.page_table, value=0)
    if _c4sl.dim() == 1:
        _c4sl = _c4sl.unsqueeze(-1)

    all_rows = slice(0, _c4sl.shape[0])
    out: List[Tuple[slice, torch.Tensor]] = []

    c4_indexer_kv_cache = index_k_with_scale_buffer
    assert c4_indexer_kv_cache.dim() == 2
    head_dim_with_sf = 68 if use_fp4_indexer else 132
    c4_indexer_kv_cache = c4_indexer_kv_cache.view(
        c4_indexer_kv_cache.shape[0], 64, 1, head_dim_with_sf
    )

    def run_paged_indexer(
        rows: slice,
        metadata: torch.Tensor,
        topk_plan: Optional[torch.Tensor] = None,
    ) -> None:
        row_q = (q[0][rows], q[1][rows]) if isinstance(q, tuple) else q[rows]
        logits = fn(
            row_q,
            c4_indexer_kv_cache,
            weights[rows],
            _c4sl[rows],
            page_table[rows],
            metadata,
            indexer_metadata.max_compressed_seq_len,
            False,
        )
        out.append((rows, logits))  # trimmed: run_topk_transform(rows, logits, topk_plan)

    deep_gemm_metadata = indexer_metadata.deep_gemm_metadata
    if isinstance(deep_gemm_metadata, list):
        num_rows = _c4sl.shape[0]
        for chunk_idx, rows in enumerate(
            iter_row_chunks(
                num_rows=num_rows,
                rows_per_chunk=indexer_metadata.rows_per_chunk,
            )
        ):
            run_paged_indexer(rows, deep_gemm_metadata[chunk_idx])
    else:
        run_paged_indexer(all_rows, deep_gemm_metadata)
    return out


def nonpaged_indexer_plan(
    c4_seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    seq_len_cpu: int,
    query_rows: int,
    compressed_page_size: int,
) -> Optional[NonPagedIndexerPlan]:
    """``_get_nonpaged_indexer_plan`` from ``final_c4_len`` on (trimmed: the eligibility checks on the
    forward batch (one request, extend only) and the sgl-kernel top-k's empty-range rewrite of ``ke``)."""
    final_c4_len = seq_len_cpu // 4
    if final_c4_len <= 0:
        return None

    request_page_table = page_table[:1].contiguous()
    ke = c4_seq_lens[:query_rows].reshape(-1).to(torch.int32).contiguous()
    gather_seq_lens = ke[-1:]
    ks = torch.zeros_like(ke)
    c4_page_size = compressed_page_size
    max_seqlen_k = (final_c4_len + c4_page_size - 1) // c4_page_size * c4_page_size
    rows_per_chunk = None  # trimmed: the logits budget (None: one call)
    return NonPagedIndexerPlan(
        page_table=request_page_table,
        gather_seq_lens=gather_seq_lens,
        ks=ks,
        ke=ke,
        seq_len_sum=final_c4_len,
        max_seq_len=final_c4_len,
        max_seqlen_k=max_seqlen_k,
        query_rows=query_rows,
        rows_per_chunk=rows_per_chunk,
    )


def nonpaged_mqa_logits(
    *,
    q_indexer: torch.Tensor,
    weights: torch.Tensor,
    kv: Tuple[torch.Tensor, torch.Tensor],
    plan: NonPagedIndexerPlan,
    rows: slice,
) -> torch.Tensor:
    """``_nonpaged_mqa_logits`` (``kv``: ``_gather_nonpaged_index_k``'s ``(k fp8 (T, 128), scale fp32 (T,))``;
    ``weights``: ``(N, H)``)."""
    import deep_gemm

    return deep_gemm.fp8_mqa_logits(
        q_indexer[rows],
        kv,
        weights[rows],
        plan.ks[rows],
        plan.ke[rows],
        clean_logits=False,
        max_seqlen_k=plan.max_seqlen_k,
    )


# --------------------------------------------------------------------------- kernels/ops/attention/dsv4/index_logits.py


@functools.cache
def _is_sm100() -> bool:
    # trimmed: torch.cuda.get_device_capability()[0] == 10
    return current_platform.is_sm100


@functools.cache
def index_logits_dtype() -> torch.dtype:
    """bf16 on SM100, where the reference kernels score in bf16; fp32 elsewhere.
    SGLANG_OPT_DSV41_BF16_INDEX_LOGITS, when set, overrides the choice."""
    forced = envs.SGLANG_OPT_DSV41_BF16_INDEX_LOGITS.get()
    bf16 = _is_sm100() if forced is None else forced
    return torch.bfloat16 if bf16 else torch.float32


@functools.cache
def index_weights_dtype() -> torch.dtype:
    """DeepGEMM reduces in the head weights' dtype and takes bf16 weights only on
    SM100 with bf16 logits."""
    if index_logits_dtype() == torch.bfloat16 and _is_sm100():
        return torch.bfloat16
    return torch.float32


# Width alignment of the flat logits: covers block-wise reads of up to 64 columns, and 128 B of bf16, which
# DeepSelect reads past a row's end (DeepGEMM pads the stride but its tensor's storage ends at the last row)
FLAT_LOGITS_WIDTH_ALIGN = 64


def flat_index_logits_rows_per_tile(
    rows: int,
    width: int,
    *,
    heads: int,
    budget_bytes: int,
) -> int:
    """Rows per logits tile within ``budget_bytes``, at the kernel's row alignment."""
    row_alignment = 128 // heads
    rows_per_chunk = mqa_logits_rows_per_chunk(
        num_rows=ceil_align(rows, row_alignment),
        row_bytes=mqa_logits_row_bytes(width),
        budget_bytes=budget_bytes,
    )
    if rows_per_chunk is None:
        return rows
    return max(row_alignment, rows_per_chunk // row_alignment * row_alignment)


def flat_index_logits_tiles(
    *,
    q: tuple[torch.Tensor, torch.Tensor],
    kv: tuple[torch.Tensor, torch.Tensor],
    weights: torch.Tensor,
    starts: torch.Tensor,
    lengths: torch.Tensor,
    context_lengths: list[int],
    budget_bytes: int,
) -> Iterator[tuple[slice, torch.Tensor]]:
    """``(rows, logits)`` per row tile, each tile within ``budget_bytes``:
    ``logits[i, j]`` scores query row ``rows.start + i`` against ``kv[starts + j]``,
    garbage past the row's ``lengths``; the width is ``max(context_lengths)``
    aligned to ``FLAT_LOGITS_WIDTH_ALIGN``."""
    from deep_gemm import fp8_fp4_mqa_logits

    rows = q[0].shape[0]
    width = ceil_align(max(context_lengths, default=0), FLAT_LOGITS_WIDTH_ALIGN)
    if rows == 0 or width == 0:
        return
    rows_per_chunk = flat_index_logits_rows_per_tile(
        rows, width, heads=q[0].shape[1], budget_bytes=budget_bytes
    )
    weights = weights.to(index_weights_dtype())
    logits_dtype = index_logits_dtype()
    for offset in range(0, rows, rows_per_chunk):
        tile = slice(offset, min(offset + rows_per_chunk, rows))
        tile_starts = starts[tile]
        yield (
            tile,
            fp8_fp4_mqa_logits(
                (q[0][tile], q[1][tile]),
                kv,
                weights[tile],
                tile_starts,
                tile_starts + lengths[tile],
                False,
                width,
                logits_dtype=logits_dtype,
            ),
        )


def deep_gemm_fp4_paged_mqa_logits(
    q_fp4: Tuple[torch.Tensor, torch.Tensor],
    k_cache: torch.Tensor,
    weights: torch.Tensor,
    seq_lens: torch.Tensor,
    page_table: torch.Tensor,
    deep_gemm_metadata,
    max_seq_len: int,
) -> torch.Tensor:
    """DeepGEMM paged fp4 logits; no hadamard, the reference does not apply one."""
    from deep_gemm import fp8_fp4_paged_mqa_logits

    sl = seq_lens.to(torch.int32)
    if sl.dim() == 1:
        sl = sl.unsqueeze(-1)
    return fp8_fp4_paged_mqa_logits(
        q_fp4,
        k_cache,
        weights.to(index_weights_dtype()),
        sl,
        page_table,
        deep_gemm_metadata,
        max_seq_len,
        False,
        logits_dtype=index_logits_dtype(),
    )


# --------------------------------------------------------------------------- srt/layers/attention/dsv4/v41_indexer/scoring.py


@dataclass(frozen=True)
class DeepGEMMDecodeData:
    """trimmed: msgspec.Struct (frozen) as a frozen dataclass."""

    q_fp4: torch.Tensor  # [rows, 1, heads, 64] int8, packed fp4
    q_sf: torch.Tensor  # [rows, 1, heads] int32, packed ue8m0
    weights: torch.Tensor  # [rows, heads] bf16/fp32 head weights
    k_cache: torch.Tensor  # [pages, page_size, 1, 68] uint8, the layer's index-K pool

    def paged_logits_args(self, metadata, rows=slice(None)):
        """``(q, lengths, page_table)`` for ``deep_gemm_fp4_paged_mqa_logits`` over
        ``rows``, ``metadata.rows_per_request`` consecutive rows per request."""
        n = metadata.rows_per_request
        q_fp4, q_sf = self.q_fp4[rows], self.q_sf[rows]
        lens = metadata.compressed_seq_lens[rows]
        table = metadata.page_table[rows]
        if n > 1:
            heads = q_fp4.shape[2]
            q_fp4 = q_fp4.view(-1, n, heads, 64)
            q_sf = q_sf.view(-1, n, heads)
            lens = lens.view(-1, n)
            table = table[::n]
        return (q_fp4, q_sf), lens, table


def v41_deep_gemm_decode_logits(data: DeepGEMMDecodeData, metadata: PagedIndexerMetadata) -> torch.Tensor:
    """full_topk.py ``_deep_gemm_decode`` (unchunked; trimmed: the top-k transform)."""
    q, lens, table = data.paged_logits_args(metadata)
    logits = deep_gemm_fp4_paged_mqa_logits(
        q,
        data.k_cache,
        data.weights,
        lens,
        table,
        metadata.deep_gemm_metadata,
        metadata.max_compressed_seq_len,
    )
    return logits
