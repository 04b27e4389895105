"""Workloads warmup knows by name: DeepSeek-V3's dense and MoE layers and DeepSeek-V3.2's indexer, defined once
for the ``dgcompat warmup`` command and the benchmarks.

The MoE and indexer shapes are those of one rank of an EP-8 deployment (32 of the 256 routed experts).
"""

from __future__ import annotations

from collections.abc import Sequence

from .spec import DEFAULT_MAX_TOKENS
from .spec import SCALE_FORMS
from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import MPolicy
from .spec import PagedIndexer
from .spec import RaggedIndexer
from .spec import ScaleForm
from .spec import Shape
from .spec import WarmupSpec

__all__ = ["DEEPSEEK_V3_DENSE", "DEEPSEEK_V32_INDEXER_DENSE", "DEEPSEEK_V3_MOE", "DEEPSEEK_V3_SAMPLED_MS",
           "MASKED_MAX_M", "MAX_BATCH", "ENGINE_MAX_TOKENS", "PRESETS", "dense_shapes", "moe_shapes",
           "indexer_shapes", "preset_shapes", "preset", "layer_set"]

#: DeepSeek-V3's dense FP8 GEMMs (N, K): fused q_a/kv_a, q_b, kv_b, o, the shared expert's gate-up and down.
DEEPSEEK_V3_DENSE: tuple[tuple[int, int], ...] = (
    (2112, 7168), (24576, 1536), (32768, 512), (7168, 16384), (4096, 7168), (7168, 2048),
)
#: DeepSeek-V3.2's indexer projections that are FP8 GEMMs (N, K): wq_b (64 heads x 128 from the q LoRA rank
#: 1536) and wk (128 from the hidden size 7168).
DEEPSEEK_V32_INDEXER_DENSE: tuple[tuple[int, int], ...] = ((8192, 1536), (128, 7168))
#: DeepSeek-V3's MoE GEMMs per rank of an EP-8 deployment (local experts, N, K): 32 of the 256 routed experts,
#: gate-up (2 x 2048, 7168) and down (7168, 2048).
DEEPSEEK_V3_MOE: tuple[tuple[int, int, int], ...] = ((32, 4096, 7168), (32, 7168, 2048))
#: Rows per expert of the masked (low-latency decode) buffers.
MASKED_MAX_M = 256
#: The largest decode batch the indexer presets warm (every batch up to it).
MAX_BATCH = 1024
#: A sampled M set: powers of two up to 4096 and every 7th M up to 256 (49 values).
DEEPSEEK_V3_SAMPLED_MS: tuple[int, ...] = tuple(sorted({2 ** i for i in range(13)} | set(range(7, 257, 7))))
#: The bound of M each engine warms by default: SGLang every M up to 16384 (``compile_utils``' default
#: ``m_max``), vLLM's ``full`` warmup every M up to ``max_num_batched_tokens`` (8192 by default).
ENGINE_MAX_TOKENS: dict[str, int] = {"sglang": DEFAULT_MAX_TOKENS, "vllm": 8192}

#: name -> what it warms.
PRESETS: dict[str, str] = {
    "deepseek-v3-dense": "DeepSeek-V3's six dense FP8 GEMMs",
    "deepseek-v3": "DeepSeek-V3 per EP-8 rank: the six dense FP8 GEMMs and the MoE GEMMs (32 experts, gate-up "
                   "and down, contiguous and masked)",
    "deepseek-v3.2": "DeepSeek-V3.2 per EP-8 rank: DeepSeek-V3's GEMMs, the indexer's FP8 projections and the "
                     "indexer (64 heads of 128: paged, next_n 1 and 2, and ragged)",
}


def dense_shapes(count: int | None = None) -> tuple[Shape, ...]:
    """DeepSeek-V3's dense FP8 GEMMs (the first ``count`` of them)."""
    return tuple(DenseGemm(n, k) for n, k in DEEPSEEK_V3_DENSE[:count])


def moe_shapes(*, experts: int = 32, masked_max_m: int = MASKED_MAX_M) -> tuple[Shape, ...]:
    """The MoE GEMMs with ``experts`` local experts, contiguous (prefill) and masked (decode, ``masked_max_m``
    rows per expert)."""
    moe = [(experts, n, k) for _e, n, k in DEEPSEEK_V3_MOE]
    return (*(GroupedGemm(e, n, k, "contiguous") for e, n, k in moe),
            *(GroupedGemm(e, n, k, "masked", max_m=masked_max_m) for e, n, k in moe))


def indexer_shapes(*, max_batch: int = MAX_BATCH) -> tuple[Shape, ...]:
    """DeepSeek-V3.2's indexer: its FP8 projections, the paged indexer (64 heads of 128, 64-token blocks, next_n
    1 and 2, every batch up to ``max_batch``) and the ragged one."""
    return (*(DenseGemm(n, k) for n, k in DEEPSEEK_V32_INDEXER_DENSE),
            PagedIndexer(64, 128, 64, 1, max_batch=max_batch), PagedIndexer(64, 128, 64, 2, max_batch=max_batch),
            RaggedIndexer(64, 128))


def preset_shapes(name: str, *, max_batch: int = MAX_BATCH, experts: int = 32,
                  masked_max_m: int = MASKED_MAX_M) -> tuple[Shape, ...]:
    """The shapes of preset ``name`` (a key of :data:`PRESETS`)."""
    if name == "deepseek-v3-dense":
        return dense_shapes()
    if name == "deepseek-v3":
        return (*dense_shapes(), *moe_shapes(experts=experts, masked_max_m=masked_max_m))
    if name == "deepseek-v3.2":
        return (*dense_shapes(), *moe_shapes(experts=experts, masked_max_m=masked_max_m),
                *indexer_shapes(max_batch=max_batch))
    raise KeyError(f"no preset {name!r}; known: {', '.join(PRESETS)}")


def preset(name: str, *, max_tokens: int | None = None, m: MPolicy | None = None,
           scales: Sequence[ScaleForm] = SCALE_FORMS, max_batch: int = MAX_BATCH) -> WarmupSpec:
    """Preset ``name`` as a description: every M up to ``max_tokens`` (default SGLang's 16384), or ``m``."""
    return WarmupSpec(preset_shapes(name, max_batch=max_batch), m,
                      None if m is not None else (max_tokens or DEFAULT_MAX_TOKENS), tuple(scales))


def layer_set(policy: MPolicy) -> WarmupSpec:
    """The DeepSeek-V3 layer set the benchmarks warm: the dense GEMMs, the MoE GEMMs and the paged indexer
    (next_n 1 and 2), for ``policy``."""
    shapes = (*dense_shapes(), *moe_shapes(), *indexer_shapes()[2:4])
    return WarmupSpec(shapes, policy)
