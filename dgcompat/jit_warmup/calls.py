"""Scratch tensors and the stable calls a warmup worker makes for one (shape, M).

Runs only inside warmup workers (it imports torch and binds deep_gemm). The operands have the
layouts engines pass at serve time, so a call needs the kernels serving will need and no others:
activation scales MN-major and TMA-aligned (what the engines' quantization kernels emit; a
K-major scale would first JIT a transpose kernel), 128x128 weight scales as stored, packed UE8M0
int32 scales on SM100. Large data operands are left uninitialized (their values never matter to
which kernel runs and the results are discarded); index tensors (``m_indices``, ``masked_m``,
block tables, lengths) are valid, since a launch reads them.
"""

from __future__ import annotations

from typing import Any

from ..gemm import bf16_gemm_nt, fp8_gemm_nt
from ..indexer import fp8_paged_mqa_logits, get_paged_mqa_logits_metadata
from ..moe import (
    m_grouped_bf16_gemm_nt_contiguous,
    m_grouped_bf16_gemm_nt_masked,
    m_grouped_fp8_gemm_nt_contiguous,
    m_grouped_fp8_gemm_nt_masked,
)
from ..table import arch_family, current_arch
from .spec import DenseGemm, GroupedGemm, PagedIndexer, Shape, weight_key

__all__ = ["Runner"]

_UE8M0_ONE = 0x7F7F7F7F  # four packed UE8M0 exponents of 1.0


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


class Runner:
    """Makes the stable dgcompat call for ``(shape, m)`` on scratch tensors of device ``device``."""

    def __init__(self, device: int) -> None:
        import torch

        self.torch = torch
        if torch.cuda.is_available():
            torch.cuda.set_device(device)
            self.device = torch.device("cuda", device)
        else:  # only fakes and the reference backend get here
            self.device = torch.device("cpu")
        self.ue8m0 = arch_family(current_arch()) == "sm100"
        self._weights: dict[tuple[Any, ...], Any] = {}

    # -- scales ---------------------------------------------------------------------------------
    def _act_scale(self, rows: int, k: int, groups: int | None) -> Any:
        """MN-major, TMA-aligned activation scales ``([G,] rows, ceil(K/128))`` (fp32) or packed UE8M0."""
        torch = self.torch
        sf_k = -(-k // 128)
        if self.ue8m0:
            cols, dtype, fill = -(-sf_k // 4), torch.int32, _UE8M0_ONE
        else:
            cols, dtype, fill = sf_k, torch.float32, 1
        aligned = _align(rows, 4)
        g = groups or 1
        flat = torch.full((g * cols * aligned,), fill, dtype=dtype, device=self.device)
        if groups is None:
            return flat.as_strided((rows, cols), (1, aligned))
        return flat.as_strided((groups, rows, cols), (cols * aligned, 1, aligned))

    def _weight_scale(self, n: int, k: int, groups: int | None) -> Any:
        torch = self.torch
        if self.ue8m0:
            return self._act_scale(n, k, groups)
        shape = (-(-n // 128), -(-k // 128)) if groups is None else (groups, -(-n // 128), -(-k // 128))
        return torch.ones(shape, dtype=torch.float32, device=self.device)

    def _weight(self, shape: Shape) -> Any:
        """The shape's B operand (kept across M values: the engine's weights do not change either)."""
        key = weight_key(shape)  # the contiguous and masked layouts of one MoE GEMM share their weights
        got = self._weights.get(key)
        if got is not None:
            return got
        torch = self.torch
        assert isinstance(shape, (DenseGemm, GroupedGemm))
        groups = shape.num_groups if isinstance(shape, GroupedGemm) else None
        dims = (shape.n, shape.k) if groups is None else (groups, shape.n, shape.k)
        if shape.dtype == "fp8":
            b: Any = (torch.empty(dims, dtype=torch.float8_e4m3fn, device=self.device),
                      self._weight_scale(shape.n, shape.k, groups))
        else:
            b = torch.empty(dims, dtype=torch.bfloat16, device=self.device)
        self._weights[key] = b
        return b

    # -- calls ----------------------------------------------------------------------------------
    def run(self, shape: Shape, m: int) -> None:
        """One call of ``shape`` at ``m`` through dgcompat's stable function."""
        if isinstance(shape, DenseGemm):
            self._dense(shape, m)
        elif isinstance(shape, GroupedGemm):
            self._grouped(shape, m)
        else:
            self._paged(shape, m)

    def _act(self, dtype: str, dims: tuple[int, ...], k: int, groups: int | None) -> Any:
        torch = self.torch
        if dtype == "fp8":
            rows = dims[-2]
            return (torch.empty(dims, dtype=torch.float8_e4m3fn, device=self.device),
                    self._act_scale(rows, k, groups))
        return torch.empty(dims, dtype=torch.bfloat16, device=self.device)

    def _dense(self, s: DenseGemm, m: int) -> None:
        torch = self.torch
        a = self._act(s.dtype, (m, s.k), s.k, None)
        d = torch.empty((m, s.n), dtype=torch.bfloat16, device=self.device)
        if s.dtype == "fp8":
            fp8_gemm_nt(a, self._weight(s), d)
        else:
            bf16_gemm_nt(a, self._weight(s), d)

    def _grouped(self, s: GroupedGemm, m: int) -> None:
        torch = self.torch
        b = self._weight(s)
        if s.layout == "contiguous":
            a = self._act(s.dtype, (m, s.k), s.k, None)
            d = torch.empty((m, s.n), dtype=torch.bfloat16, device=self.device)
            m_indices = torch.zeros((m,), dtype=torch.int32, device=self.device)
            if s.dtype == "fp8":
                m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)
            else:
                m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
            return
        max_m = s.max_m or m
        a = self._act(s.dtype, (s.num_groups, max_m, s.k), s.k, s.num_groups)
        d = torch.empty((s.num_groups, max_m, s.n), dtype=torch.bfloat16, device=self.device)
        masked_m = torch.full((s.num_groups,), m, dtype=torch.int32, device=self.device)
        if s.dtype == "fp8":
            m_grouped_fp8_gemm_nt_masked(a, b, d, masked_m, m)
        else:
            m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m)

    def _paged(self, s: PagedIndexer, batch: int) -> None:
        torch = self.torch
        blocks = -(-s.context_len // s.block_kv)
        q = torch.empty((batch, s.next_n, s.num_heads, s.head_dim), dtype=torch.float8_e4m3fn, device=self.device)
        kv = torch.zeros((blocks, s.block_kv, 1, s.head_dim + 4), dtype=torch.uint8, device=self.device)
        weights = torch.empty((batch * s.next_n, s.num_heads), dtype=torch.float32, device=self.device)
        lens = torch.full((batch, s.next_n), s.context_len, dtype=torch.int32, device=self.device)
        # Every sequence reads the same blocks: valid indices, and the cache stays small.
        table = torch.arange(blocks, dtype=torch.int32, device=self.device).expand(batch, blocks).contiguous()
        schedule = get_paged_mqa_logits_metadata(lens, s.block_kv)
        fp8_paged_mqa_logits(q, kv, weights, lens, table, schedule, s.context_len)
