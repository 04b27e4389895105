"""The stable calls a warmup worker makes for one (shape, M, scale form), on scratch tensors it reuses.

Runs inside warmup workers and in the check process (it imports torch; the stable functions bind
deep_gemm on their first call). The operands have the layouts engines pass at serve time, so a call
needs the kernels serving will need:

- FP8 GEMMs: activation scales in the call's form (:data:`~dgcompat.jit_warmup.spec.ScaleForm`):
  ``"tma"`` float32 MN-major TMA-aligned, ``"row"`` float32 row-major (the call first makes the layout
  helper calls an engine makes on such scales, ``get_mn_major_tma_aligned_tensor`` and
  ``transform_sf_into_required_layout``, plus ``get_mn_major_tma_aligned_packed_ue8m0_tensor`` on SM100,
  then passes the row-major scales to the GEMM, which transposes them itself), ``"ue8m0"`` packed int32
  (SM100). ``get_col_major_tma_aligned_tensor`` is the same function as
  ``get_mn_major_tma_aligned_tensor`` (``dgcompat.utils.layout``). Weight scales are 128x128 float32
  blocks as stored, per-row packed UE8M0 with the ``"ue8m0"`` form.
- Grouped GEMMs: contiguous ``(M, K)`` activations with ``m_indices``; masked ``(E, max_m, K)`` buffers
  with ``masked_m`` filled with M and ``expected_m = M``.
- The paged indexer: the schedule (``get_paged_mqa_logits_metadata``) and the logits for a batch of M
  sequences of ``next_n`` rows, every sequence ``context_len`` long; the ragged indexer:
  ``fp8_mqa_logits`` for M query rows over ``context_len`` keys.

Data operands are left uninitialized (their values never decide which kernel runs, and results are
discarded); scales hold 1.0 (UE8M0 packing asserts powers of two), index tensors are valid, since a
launch reads them. Each kind of operand lives in one buffer per worker, grown to the largest call seen
and viewed per call, so a call allocates nothing but what deep_gemm allocates itself.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import IncompatibleBuildError
from ..errors import UnsupportedFeatureError
from ..gemm import bf16_gemm_nt
from ..gemm import fp8_gemm_nt
from ..indexer import fp8_mqa_logits
from ..indexer import fp8_paged_mqa_logits
from ..indexer import get_paged_mqa_logits_metadata
from ..moe import m_grouped_bf16_gemm_nt_contiguous
from ..moe import m_grouped_bf16_gemm_nt_masked
from ..moe import m_grouped_fp8_gemm_nt_contiguous
from ..moe import m_grouped_fp8_gemm_nt_masked
from ..scales import get_mn_major_tma_aligned_packed_ue8m0_tensor
from ..scales import get_mn_major_tma_aligned_tensor
from ..scales import transform_sf_into_required_layout
from ..table import arch_family
from ..table import current_arch
from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import PagedIndexer
from .spec import RaggedIndexer
from .spec import Shape
from .spec import weight_key

__all__ = ["Runner"]

_UE8M0_ONE = 0x7F7F7F7F  # four packed UE8M0 exponents of 1.0


def _align(x: int, a: int) -> int:
    return -(-x // a) * a


class Runner:
    """Makes the stable dgcompat call for ``(shape, m, form)`` on scratch tensors of CUDA device ``device``
    (the CPU where torch has no usable CUDA: only fakes and the reference backend get there)."""

    def __init__(self, device: int) -> None:
        import torch

        self.torch = torch
        if torch.cuda.is_available():
            torch.cuda.set_device(device)
            self.device = torch.device("cuda", device)
        else:
            self.device = torch.device("cpu")
        self.family = arch_family(current_arch())
        self.ue8m0 = self.family == "sm100"
        self._weights: dict[tuple[Any, ...], Any] = {}
        self._pools: dict[tuple[Any, ...], Any] = {}
        self._masked: dict[tuple[int, int], Any] = {}
        self.missing: set[str] = set()  # layout helpers the release does not have

    # -- buffers ----------------------------------------------------------------------------------
    def _flat(self, key: tuple[Any, ...], numel: int, dtype: Any, fill: Any = None) -> Any:
        """The first ``numel`` elements of buffer ``key`` (grown when too small; ``fill`` fills a new one)."""
        torch = self.torch
        got = self._pools.get(key)
        if got is None or got.numel() < numel:
            size = max(numel, 1)
            if callable(fill):
                got = fill(size)
            elif fill is None:
                got = torch.empty((size,), dtype=dtype, device=self.device)
            else:
                got = torch.full((size,), fill, dtype=dtype, device=self.device)
            self._pools[key] = got
        return got[:numel]

    def _act_scale(self, rows: int, k: int, form: str, groups: int | None = None, *, pool: str = "sfa") -> Any:
        """Activation scales ``([G,] rows, ceil(K/128))`` in ``form``: MN-major TMA-aligned float32 (``tma``),
        row-major float32 (``row``) or MN-major TMA-aligned packed UE8M0 int32 ``([G,] rows, ceil(K/512))``."""
        torch = self.torch
        sf_k = -(-k // 128)
        g = groups or 1
        if form == "row":
            flat = self._flat((pool, "row"), g * rows * sf_k, torch.float32, 1.0)
            return flat.view(rows, sf_k) if groups is None else flat.view(groups, rows, sf_k)
        fill: Any
        if form == "ue8m0":
            cols, dtype, fill = -(-sf_k // 4), torch.int32, _UE8M0_ONE
        else:
            cols, dtype, fill = sf_k, torch.float32, 1.0
        aligned = _align(rows, 4)
        flat = self._flat((pool, form), g * cols * aligned, dtype, fill)
        if groups is None:
            return flat.as_strided((rows, cols), (1, aligned))
        return flat.as_strided((groups, rows, cols), (cols * aligned, 1, aligned))

    def _weight(self, shape: DenseGemm | GroupedGemm, form: str) -> Any:
        """The shape's B operand (kept across calls: the engine's weights do not change either); the
        contiguous and masked layouts of one MoE GEMM share theirs."""
        key = (weight_key(shape), form == "ue8m0")
        got = self._weights.get(key)
        if got is not None:
            return got
        torch = self.torch
        groups = shape.num_groups if isinstance(shape, GroupedGemm) else None
        dims = (shape.n, shape.k) if groups is None else (groups, shape.n, shape.k)
        if shape.dtype != "fp8":
            b: Any = torch.empty(dims, dtype=torch.bfloat16, device=self.device)
        elif form == "ue8m0":  # per-row packed UE8M0, as the engines requantize weights for SM100
            sf = self._act_scale(shape.n, shape.k, "ue8m0", groups, pool=f"sfb-{key}")
            b = (torch.empty(dims, dtype=torch.float8_e4m3fn, device=self.device), sf)
        else:
            blocks = (-(-shape.n // 128), -(-shape.k // 128))
            sf = torch.ones(blocks if groups is None else (groups, *blocks), dtype=torch.float32, device=self.device)
            b = (torch.empty(dims, dtype=torch.float8_e4m3fn, device=self.device), sf)
        self._weights[key] = b
        return b

    # -- calls ----------------------------------------------------------------------------------
    def run(self, shape: Shape, m: int, form: str = "") -> None:
        """One call of ``shape`` at ``m`` with FP8 activation scales in ``form`` through dgcompat's stable
        functions (``form`` is ignored for shapes without FP8 scales; ``""`` means ``"tma"``)."""
        form = form or "tma"
        if isinstance(shape, DenseGemm):
            self._dense(shape, m, form)
        elif isinstance(shape, GroupedGemm):
            self._grouped(shape, m, form)
        elif isinstance(shape, PagedIndexer):
            self._paged(shape, m)
        else:
            self._ragged(shape, m)

    def _helpers(self, sf: Any, mn: int, k: int, groups: int | None) -> None:
        """The layout helper calls an engine makes on row-major float32 scales (those the release has: one it
        lacks, no engine can call, so there is nothing to warm)."""
        helpers: list[tuple[str, Callable[[], Any]]] = [
            ("mn_major", lambda: get_mn_major_tma_aligned_tensor(sf)),
            ("transform", lambda: transform_sf_into_required_layout(sf, mn, k, (1, 128, 128), num_groups=groups,
                                                                    is_sfa=True)),
        ]
        if self.ue8m0:
            helpers.append(("packed", lambda: get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)))
        for name, call in helpers:
            if name in self.missing:
                continue
            try:
                call()
            except (IncompatibleBuildError, UnsupportedFeatureError):
                self.missing.add(name)

    def _fp8_act(self, rows: int, k: int, form: str, groups: int | None = None) -> tuple[Any, Any]:
        torch = self.torch
        g = groups or 1
        a = self._flat(("a", "fp8"), g * rows * k, torch.float8_e4m3fn)
        a = a.view(rows, k) if groups is None else a.view(groups, rows, k)
        sf = self._act_scale(rows, k, form, groups)
        if form == "row":
            self._helpers(sf, rows, k, groups)
        return a, sf

    def _out(self, numel: int, *dims: int) -> Any:
        return self._flat(("d", "bf16"), numel, self.torch.bfloat16).view(*dims)

    def _dense(self, s: DenseGemm, m: int, form: str) -> None:
        torch = self.torch
        d = self._out(m * s.n, m, s.n)
        if s.dtype == "fp8":
            fp8_gemm_nt(self._fp8_act(m, s.k, form), self._weight(s, form), d)
        else:
            a = self._flat(("a", "bf16"), m * s.k, torch.bfloat16).view(m, s.k)
            bf16_gemm_nt(a, self._weight(s, form), d)

    def _grouped(self, s: GroupedGemm, m: int, form: str) -> None:
        torch = self.torch
        b = self._weight(s, form)
        if s.layout == "contiguous":
            d = self._out(m * s.n, m, s.n)
            m_indices = self._flat(("m_indices",), m, torch.int32, 0)
            if s.dtype == "fp8":
                m_grouped_fp8_gemm_nt_contiguous(self._fp8_act(m, s.k, form), b, d, m_indices)
            else:
                a = self._flat(("a", "bf16"), m * s.k, torch.bfloat16).view(m, s.k)
                m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
            return
        g, max_m = s.num_groups, s.max_m or m
        d = self._out(g * max_m * s.n, g, max_m, s.n)
        masked_m = self._masked.get((g, m))
        if masked_m is None:
            masked_m = self._masked[(g, m)] = torch.full((g,), m, dtype=torch.int32, device=self.device)
        if s.dtype == "fp8":
            m_grouped_fp8_gemm_nt_masked(self._fp8_act(max_m, s.k, form, g), b, d, masked_m, m)
        else:
            a = self._flat(("a", "bf16"), g * max_m * s.k, torch.bfloat16).view(g, max_m, s.k)
            m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m)

    def _paged(self, s: PagedIndexer, batch: int) -> None:
        torch = self.torch
        blocks = -(-s.context_len // s.block_kv)
        rows = batch * s.next_n
        kv = self._weights.get(weight_key(s))
        if kv is None:
            kv = self._weights[weight_key(s)] = torch.zeros((blocks, s.block_kv, 1, s.head_dim + 4), dtype=torch.uint8,
                                                            device=self.device)
        q = self._flat(("q", "fp8"), rows * s.num_heads * s.head_dim, torch.float8_e4m3fn)
        q = q.view(batch, s.next_n, s.num_heads, s.head_dim)
        weights = self._flat(("w", "f32"), rows * s.num_heads, torch.float32).view(rows, s.num_heads)
        lens = self._flat(("lens", s.context_len), rows, torch.int32, s.context_len).view(batch, s.next_n)
        # Every sequence reads the same blocks: valid indices, and the cache stays small.
        table = self._flat(("table", blocks), batch * blocks, torch.int32,
                           lambda n: torch.arange(blocks, dtype=torch.int32, device=self.device).repeat(
                               -(-n // blocks))[:n])
        table = table.view(batch, blocks)
        schedule = get_paged_mqa_logits_metadata(lens, s.block_kv)
        fp8_paged_mqa_logits(q, kv, weights, lens, table, schedule, s.context_len)

    def _ragged(self, s: RaggedIndexer, m: int) -> None:
        torch = self.torch
        kv = self._weights.get(weight_key(s))
        if kv is None:
            kv = self._weights[weight_key(s)] = (
                torch.empty((s.context_len, s.head_dim), dtype=torch.float8_e4m3fn, device=self.device),
                torch.ones((s.context_len,), dtype=torch.float32, device=self.device))
        q = self._flat(("q", "fp8"), m * s.num_heads * s.head_dim, torch.float8_e4m3fn)
        q = q.view(m, s.num_heads, s.head_dim)
        weights = self._flat(("w", "f32"), m * s.num_heads, torch.float32).view(m, s.num_heads)
        ks = self._flat(("ks",), m, torch.int32, 0)
        ke = self._flat(("ke", s.context_len), m, torch.int32, s.context_len)
        fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False)
