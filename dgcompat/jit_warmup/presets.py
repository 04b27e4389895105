"""Workloads warmup knows by name: DeepSeek-V3's dense and MoE layers and DeepSeek-V3.2's indexer, defined once
for the ``dgcompat warmup`` command and the benchmarks."""

from __future__ import annotations

from .spec import DenseGemm, GroupedGemm, MPolicy, PagedIndexer, Shape, WarmupSpec

__all__ = ["DEEPSEEK_V3_DENSE", "DEEPSEEK_V3_MOE", "DEEPSEEK_V3_SAMPLED_MS", "MASKED_MAX_M", "dense_shapes",
           "moe_shapes", "indexer_shapes", "layer_set"]

#: DeepSeek-V3's dense FP8 GEMMs (N, K).
DEEPSEEK_V3_DENSE: tuple[tuple[int, int], ...] = (
    (2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048),
)
#: DeepSeek-V3's MoE GEMMs per rank of an EP-8 deployment (local experts, N, K): 32 of the 256 routed experts,
#: gate-up (2 x 2048, 7168) and down (7168, 2048).
DEEPSEEK_V3_MOE: tuple[tuple[int, int, int], ...] = ((32, 4096, 7168), (32, 7168, 2048))
#: Rows per expert of the masked (low-latency decode) buffers.
MASKED_MAX_M = 256
#: A sampled M set: powers of two up to 4096 and every 7th M up to 256 (49 values).
DEEPSEEK_V3_SAMPLED_MS: tuple[int, ...] = tuple(sorted({2 ** i for i in range(13)} | set(range(7, 257, 7))))


def dense_shapes(count: int | None = None) -> tuple[Shape, ...]:
    """DeepSeek-V3's dense FP8 GEMMs (the first ``count`` of them)."""
    return tuple(DenseGemm(n, k) for n, k in DEEPSEEK_V3_DENSE[:count])


def moe_shapes() -> tuple[Shape, ...]:
    """The MoE GEMMs, contiguous (prefill) and masked (decode, :data:`MASKED_MAX_M` rows per expert)."""
    return (*(GroupedGemm(e, n, k, "contiguous") for e, n, k in DEEPSEEK_V3_MOE),
            *(GroupedGemm(e, n, k, "masked", max_m=MASKED_MAX_M) for e, n, k in DEEPSEEK_V3_MOE))


def indexer_shapes() -> tuple[Shape, ...]:
    """DeepSeek-V3.2's paged indexer: 64 heads of 128, 64-token blocks, next_n 1 and 2."""
    return (PagedIndexer(64, 128, 64, 1), PagedIndexer(64, 128, 64, 2))


def layer_set(policy: MPolicy) -> WarmupSpec:
    """A whole DeepSeek-V3(.2) layer set per EP-8 rank: the dense GEMMs, the MoE GEMMs and the indexer."""
    return WarmupSpec((*dense_shapes(), *moe_shapes(), *indexer_shapes()), policy)
