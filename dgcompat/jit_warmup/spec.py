"""The description of a workload to warm: its shapes, the M values, and the (shape, M) calls they stand for.

Pure data and arithmetic: nothing here imports torch or deep_gemm or asks anything of the host.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Literal, Sequence, Union

from ..errors import BadArgumentError

__all__ = [
    "DenseGemm", "GroupedGemm", "PagedIndexer", "Shape", "MPolicy", "WarmupSpec", "Call", "CONTIGUOUS_ALIGNMENT",
    "positive", "ms_for", "plan_calls", "weight_key",
]

Shape = Union["DenseGemm", "GroupedGemm", "PagedIndexer"]

#: Rows per expert group of the contiguous layout (deep_gemm's ``get_mk_alignment_for_contiguous_layout()``).
CONTIGUOUS_ALIGNMENT = 128


def positive(fn: str, arg: str, value: Any) -> int:
    """``value`` if it is a positive int, else :class:`~dgcompat.errors.BadArgumentError` naming ``fn`` and ``arg``."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise BadArgumentError(fn, arg, "a positive int", f"{type(value).__name__} {value!r}")
    return value


@dataclass(frozen=True)
class DenseGemm:
    """A dense GEMM ``d (M, N) = a (M, K) @ b (N, K).T``: ``fp8_gemm_nt`` (1x128 activation and 128x128
    weight scales, K a multiple of 128) or ``bf16_gemm_nt``."""

    n: int
    k: int
    dtype: Literal["fp8", "bf16"] = "fp8"

    def __post_init__(self) -> None:
        positive("DenseGemm", "n", self.n)
        positive("DenseGemm", "k", self.k)
        if self.dtype not in ("fp8", "bf16"):
            raise BadArgumentError("DenseGemm", "dtype", "'fp8' or 'bf16'", repr(self.dtype))
        if self.dtype == "fp8" and self.k % 128:
            raise BadArgumentError("DenseGemm", "k", "a multiple of 128 for FP8 (128-wide scale blocks)",
                                   str(self.k))

    @property
    def label(self) -> str:
        return f"{self.dtype} dense N={self.n} K={self.k}"


@dataclass(frozen=True)
class GroupedGemm:
    """A grouped (MoE) GEMM over ``num_groups`` experts of ``(N, K)`` weights.

    ``layout="contiguous"``: M is the total row count, rounded up to the contiguous alignment (128).
    ``layout="masked"``: M is ``expected_m`` and ``max_m`` the rows per group of the buffers.
    """

    num_groups: int
    n: int
    k: int
    layout: Literal["contiguous", "masked"] = "contiguous"
    dtype: Literal["fp8", "bf16"] = "fp8"
    max_m: int | None = None

    def __post_init__(self) -> None:
        for arg in ("num_groups", "n", "k"):
            positive("GroupedGemm", arg, getattr(self, arg))
        if self.layout not in ("contiguous", "masked"):
            raise BadArgumentError("GroupedGemm", "layout", "'contiguous' or 'masked'", repr(self.layout))
        if self.dtype not in ("fp8", "bf16"):
            raise BadArgumentError("GroupedGemm", "dtype", "'fp8' or 'bf16'", repr(self.dtype))
        if self.dtype == "fp8" and self.k % 128:
            raise BadArgumentError("GroupedGemm", "k", "a multiple of 128 for FP8", str(self.k))
        if self.layout == "masked":
            if self.max_m is None:
                raise BadArgumentError("GroupedGemm", "max_m", "the rows per group of the masked buffers",
                                       "None")
            positive("GroupedGemm", "max_m", self.max_m)
        elif self.max_m is not None:
            raise BadArgumentError("GroupedGemm", "max_m", "None for the contiguous layout", str(self.max_m))

    @property
    def label(self) -> str:
        extra = f" max_m={self.max_m}" if self.layout == "masked" else ""
        return f"{self.dtype} grouped {self.layout} E={self.num_groups} N={self.n} K={self.k}{extra}"


@dataclass(frozen=True)
class PagedIndexer:
    """The paged MQA-logits indexer (schedule + logits) for a batch of M sequences of ``next_n`` rows.

    ``num_heads``/``head_dim``: the indexer's query heads and their width (DeepSeek V3.2: 64, 128);
    ``block_kv``: tokens per KV-cache block (64); ``context_len``: the scratch sequences' length.
    """

    num_heads: int
    head_dim: int = 128
    block_kv: int = 64
    next_n: int = 1
    context_len: int = 1024

    def __post_init__(self) -> None:
        for arg in ("num_heads", "head_dim", "block_kv", "next_n", "context_len"):
            positive("PagedIndexer", arg, getattr(self, arg))

    @property
    def label(self) -> str:
        return (f"paged indexer H={self.num_heads} D={self.head_dim} block_kv={self.block_kv} "
                f"next_n={self.next_n}")


@dataclass(frozen=True)
class MPolicy:
    """Which M values to warm (M: rows for GEMMs, expected rows for masked, batch size for the indexer).

    - :meth:`values`: exactly these.
    - :meth:`every`: every M from 1 to ``max_m`` (exact: every kernel any such call needs).
    - :meth:`changes`: a sampled grid up to ``max_m`` (every M to 64, then every 8th to 512, every
      32nd to 4096, every 128th beyond) refined by bisection wherever two neighbouring samples need
      different kernels. Much cheaper for large bounds; it misses a kernel that only M values
      strictly between two samples needing the same kernel would use.
    """

    kind: Literal["values", "every", "changes"]
    ms: tuple[int, ...] = ()
    max_m: int = 0

    @staticmethod
    def values(ms: Iterable[int]) -> MPolicy:
        vals = tuple(ms)
        if not vals:
            raise BadArgumentError("MPolicy.values", "ms", "at least one M", "nothing")
        for m in vals:
            positive("MPolicy.values", "ms", m)
        return MPolicy("values", tuple(sorted(set(vals))))

    @staticmethod
    def every(max_m: int) -> MPolicy:
        return MPolicy("every", (), positive("MPolicy.every", "max_m", max_m))

    @staticmethod
    def changes(max_m: int) -> MPolicy:
        return MPolicy("changes", (), positive("MPolicy.changes", "max_m", max_m))

    def grid(self) -> tuple[int, ...]:
        """The M values identified first (for ``changes``: before bisection)."""
        if self.kind == "values":
            return self.ms
        if self.kind == "every":
            return tuple(range(1, self.max_m + 1))
        grid = {m for m in range(1, min(64, self.max_m) + 1)}
        for step, upto in ((8, 512), (32, 4096), (128, self.max_m)):
            grid.update(range(step, min(upto, self.max_m) + 1, step))
        grid.add(self.max_m)
        return tuple(sorted(grid))


@dataclass(frozen=True)
class WarmupSpec:
    """What the engine will run: the shapes and the M values to warm them for."""

    shapes: tuple[Shape, ...]
    m: MPolicy

    def __post_init__(self) -> None:
        if not isinstance(self.shapes, tuple) or not self.shapes:
            raise BadArgumentError("WarmupSpec", "shapes", "a non-empty tuple of DenseGemm / GroupedGemm / "
                                   "PagedIndexer", repr(self.shapes))
        for s in self.shapes:
            if not isinstance(s, (DenseGemm, GroupedGemm, PagedIndexer)):
                raise BadArgumentError("WarmupSpec", "shapes", "DenseGemm, GroupedGemm or PagedIndexer items",
                                       type(s).__name__)
        if not isinstance(self.m, MPolicy):
            raise BadArgumentError("WarmupSpec", "m", "an MPolicy (MPolicy.values / every / changes)",
                                   type(self.m).__name__)


@dataclass(frozen=True)
class Call:
    """One call the engine will make: ``shape`` at ``m``."""

    shape: Shape
    m: int

    @property
    def label(self) -> str:
        return f"{self.shape.label} M={self.m}"


def ms_for(shape: Shape, ms: Sequence[int]) -> list[int]:
    """The M values ``shape`` is called with for the policy's ``ms``: contiguous totals rounded up to the
    alignment, masked ``expected_m`` up to ``max_m``, otherwise ``ms`` itself."""
    if isinstance(shape, GroupedGemm) and shape.layout == "contiguous":
        a = CONTIGUOUS_ALIGNMENT
        return sorted({-(-m // a) * a for m in ms})
    if isinstance(shape, GroupedGemm) and shape.max_m is not None:
        return [m for m in ms if m <= shape.max_m]
    return list(ms)


def plan_calls(spec: WarmupSpec, ms: Sequence[int] | None = None) -> list[Call]:
    """Every (shape, M) call the description stands for, in a stable order, duplicates removed."""
    if not isinstance(spec, WarmupSpec):
        raise BadArgumentError("warmup", "spec", "a WarmupSpec", type(spec).__name__)
    values = spec.m.grid() if ms is None else tuple(ms)
    calls: list[Call] = []
    seen: set[tuple[Shape, int]] = set()
    for shape in spec.shapes:
        for m in ms_for(shape, values):
            if (shape, m) not in seen:
                seen.add((shape, m))
                calls.append(Call(shape, m))
    return calls


def weight_key(shape: Shape) -> tuple[Any, ...]:
    """What identifies a shape's weights: the contiguous and masked layouts of one MoE GEMM share theirs."""
    if isinstance(shape, GroupedGemm):
        return ("grouped", shape.num_groups, shape.n, shape.k, shape.dtype)
    if isinstance(shape, DenseGemm):
        return ("dense", shape.n, shape.k, shape.dtype)
    return ("indexer", shape.context_len, shape.block_kv, shape.head_dim)
