"""The description of a workload to warm: its shapes, the M values, the scale forms, and the calls they stand for.

Pure data and arithmetic: nothing here imports torch or deep_gemm or asks anything of the host.
"""

from __future__ import annotations

from collections.abc import Iterable
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import dataclass
from typing import Any
from typing import Literal
from typing import Union

from ..errors import BadArgumentError

__all__ = [
    "DenseGemm", "GroupedGemm", "PagedIndexer", "RaggedIndexer", "Shape", "MPolicy", "WarmupSpec", "Call",
    "ScaleForm", "SCALE_FORMS", "DEFAULT_MAX_TOKENS", "CONTIGUOUS_ALIGNMENT", "positive", "ms_for", "forms_for",
    "plan_calls", "weight_key", "spec_to_json", "spec_from_json",
]

Shape = Union["DenseGemm", "GroupedGemm", "PagedIndexer", "RaggedIndexer"]

#: How an engine hands a FP8 GEMM its activation scales (1x128 blocks, ``ceil(K/128)`` per row):
#:
#: - ``"tma"``: float32, MN-major and TMA-aligned (strides ``(1, align(M, 4))``), what the engines'
#:   quantization kernels emit on SM90; on SM100 the GEMM packs them into UE8M0 first;
#: - ``"row"``: float32, row-major ``(M, ceil(K/128))`` (what a per-token cast gives). The GEMM transposes
#:   them first with a JIT kernel of its own; the engine may also call the layout helpers itself
#:   (``get_mn_major_tma_aligned_tensor``, ``get_col_major_tma_aligned_tensor``,
#:   ``transform_sf_into_required_layout``; on SM100 ``get_mn_major_tma_aligned_packed_ue8m0_tensor``), and
#:   a call of this form makes those calls too;
#: - ``"ue8m0"``: packed UE8M0 int32 ``(M, ceil(K/512))``, MN-major and TMA-aligned, with per-row packed
#:   weight scales (SM100 only; skipped elsewhere).
ScaleForm = Literal["tma", "row", "ue8m0"]
SCALE_FORMS: tuple[ScaleForm, ...] = ("tma", "row", "ue8m0")

#: The default bound of M: SGLang's default warmup bound (every M from 1 to 16384); vLLM's ``full`` warmup
#: goes to ``max_num_batched_tokens``, 8192 by default.
DEFAULT_MAX_TOKENS = 16384

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
    ``block_kv``: tokens per KV-cache block (64); ``context_len``: the scratch sequences' length;
    ``max_batch``: the largest decode batch (M) the engine runs, eagerly or in a CUDA graph (SGLang's
    ``--max-running-requests``, vLLM's ``max_num_seqs``): the schedule kernel is compiled per batch rounded
    up to 32, so every batch up to this bound is warmed, whatever the M policy says beyond it.
    """

    num_heads: int
    head_dim: int = 128
    block_kv: int = 64
    next_n: int = 1
    context_len: int = 1024
    max_batch: int = 1024

    def __post_init__(self) -> None:
        for arg in ("num_heads", "head_dim", "block_kv", "next_n", "context_len", "max_batch"):
            positive("PagedIndexer", arg, getattr(self, arg))

    @property
    def label(self) -> str:
        return (f"paged indexer H={self.num_heads} D={self.head_dim} block_kv={self.block_kv} "
                f"next_n={self.next_n}")


@dataclass(frozen=True)
class RaggedIndexer:
    """The ragged MQA-logits indexer (``fp8_mqa_logits``, prefill) for M query rows.

    ``num_heads``/``head_dim``: the indexer's query heads and their width (DeepSeek V3.2: 64, 128);
    ``context_len``: the keys of the scratch call (their number is a launch argument, not part of a kernel).
    """

    num_heads: int
    head_dim: int = 128
    context_len: int = 256

    def __post_init__(self) -> None:
        for arg in ("num_heads", "head_dim", "context_len"):
            positive("RaggedIndexer", arg, getattr(self, arg))

    @property
    def label(self) -> str:
        return f"ragged indexer H={self.num_heads} D={self.head_dim}"


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

    @property
    def bound(self) -> int:
        """The largest M the policy names."""
        return self.ms[-1] if self.kind == "values" else self.max_m

    def coverage(self) -> str:
        """What the policy covers, and what a serving process could still compile."""
        if self.kind == "every":
            return f"every M from 1 to {self.max_m}: a call with a larger M can still compile at serve time"
        if self.kind == "values":
            return (f"only the {len(self.ms)} given M values (up to {self.ms[-1]}): a call with any other M can "
                    "compile at serve time")
        return (f"a sampled grid up to {self.max_m} refined by bisection: an M strictly between two samples that "
                "share their first kernel, or a call's second kernel at such an M, can compile at serve time "
                "(MPolicy.every covers every M)")

    def grid(self) -> tuple[int, ...]:
        """The M values identified first (for ``changes``: before bisection)."""
        if self.kind == "values":
            return self.ms
        if self.kind == "every":
            return tuple(range(1, self.max_m + 1))
        grid = set(range(1, min(64, self.max_m) + 1))
        for step, upto in ((8, 512), (32, 4096), (128, self.max_m)):
            grid.update(range(step, min(upto, self.max_m) + 1, step))
        grid.add(self.max_m)
        return tuple(sorted(grid))


@dataclass(frozen=True)
class WarmupSpec:
    """What the engine will run: the shapes, the M values to warm them for, and how it passes FP8 scales.

    - ``m``: the M policy. ``None`` (the default): every M from 1 to ``max_tokens``, exact, as SGLang's
      warmup (every M up to 16384 by default) and vLLM's ``full`` warmup (every M up to
      ``max_num_batched_tokens``, 8192 by default) do.
    - ``max_tokens``: the bound of the default policy (default :data:`DEFAULT_MAX_TOKENS`); give either it or
      ``m``.
    - ``scales``: the :data:`ScaleForm` values the engine passes FP8 activation scales in (default: all of
      them; forms the GPU cannot take, e.g. ``"ue8m0"`` on SM90, are skipped).
    """

    shapes: tuple[Shape, ...]
    m: MPolicy | None = None
    max_tokens: int | None = None
    scales: tuple[ScaleForm, ...] = SCALE_FORMS

    def __post_init__(self) -> None:
        if not isinstance(self.shapes, tuple) or not self.shapes:
            raise BadArgumentError("WarmupSpec", "shapes", "a non-empty tuple of DenseGemm / GroupedGemm / "
                                   "PagedIndexer / RaggedIndexer", repr(self.shapes))
        for s in self.shapes:
            if not isinstance(s, (DenseGemm, GroupedGemm, PagedIndexer, RaggedIndexer)):
                raise BadArgumentError("WarmupSpec", "shapes", "DenseGemm, GroupedGemm, PagedIndexer or "
                                       "RaggedIndexer items", type(s).__name__)
        if self.m is not None and not isinstance(self.m, MPolicy):
            raise BadArgumentError("WarmupSpec", "m", "an MPolicy (MPolicy.values / every / changes) or None",
                                   type(self.m).__name__)
        if self.max_tokens is not None:
            positive("WarmupSpec", "max_tokens", self.max_tokens)
            if self.m is not None:
                raise BadArgumentError("WarmupSpec", "max_tokens", "None when m is given (m says which M)",
                                       str(self.max_tokens))
        if (not isinstance(self.scales, tuple) or not self.scales
                or any(f not in SCALE_FORMS for f in self.scales)):
            raise BadArgumentError("WarmupSpec", "scales", f"a non-empty tuple of {', '.join(map(repr, SCALE_FORMS))}",
                                   repr(self.scales))

    @property
    def policy(self) -> MPolicy:
        """The M policy in effect: ``m``, else every M up to ``max_tokens``."""
        return self.m if self.m is not None else MPolicy.every(self.max_tokens or DEFAULT_MAX_TOKENS)


@dataclass(frozen=True, slots=True)
class Call:
    """One call the engine will make: ``shape`` at ``m``, FP8 activation scales in ``form`` (``""`` for
    shapes without FP8 scales)."""

    shape: Shape
    m: int
    form: str = ""

    @property
    def label(self) -> str:
        return f"{self.shape.label} M={self.m}" + (f" scales={self.form}" if self.form else "")


def ms_for(shape: Shape, ms: Sequence[int]) -> list[int]:
    """The M values ``shape`` is called with for the policy's ``ms``: contiguous totals rounded up to the
    alignment, masked ``expected_m`` up to ``max_m``, paged batches up to ``max_batch`` (every batch up to it
    when the policy reaches it), otherwise ``ms`` itself."""
    if isinstance(shape, GroupedGemm) and shape.layout == "contiguous":
        a = CONTIGUOUS_ALIGNMENT
        return sorted({-(-m // a) * a for m in ms})
    if isinstance(shape, GroupedGemm) and shape.max_m is not None:
        return [m for m in ms if m <= shape.max_m]
    if isinstance(shape, PagedIndexer):
        return [m for m in ms if m <= shape.max_batch]
    return list(ms)


def forms_for(shape: Shape, scales: Sequence[str], family: str | None) -> tuple[str, ...]:
    """The scale forms ``shape`` is warmed with on the GPU family ``family`` (``"sm90"``, ``"sm100"``, ... or
    None when unknown), the GEMM's own form first: ``("",)`` for shapes without FP8 activation scales."""
    if not isinstance(shape, (DenseGemm, GroupedGemm)) or shape.dtype != "fp8":
        return ("",)
    order = ("ue8m0", "tma", "row") if family == "sm100" else ("tma", "row")
    return tuple(f for f in order if f in scales) or ("tma",)


def plan_calls(spec: WarmupSpec, ms: Sequence[int] | None = None, *, family: str | None = None) -> list[Call]:
    """Every call the description stands for on the GPU family ``family``, in a stable order (by shape, then
    M, then scale form), duplicates removed."""
    if not isinstance(spec, WarmupSpec):
        raise BadArgumentError("warmup", "spec", "a WarmupSpec", type(spec).__name__)
    values = spec.policy.grid() if ms is None else tuple(ms)
    calls: list[Call] = []
    seen: set[Shape] = set()
    for shape in spec.shapes:
        if shape in seen:
            continue
        seen.add(shape)
        forms = forms_for(shape, spec.scales, family)
        calls.extend(Call(shape, m, f) for m in ms_for(shape, values) for f in forms)
    return calls


def weight_key(shape: Shape) -> tuple[Any, ...]:
    """What identifies a shape's weights: the contiguous and masked layouts of one MoE GEMM share theirs."""
    if isinstance(shape, GroupedGemm):
        return ("grouped", shape.num_groups, shape.n, shape.k, shape.dtype)
    if isinstance(shape, DenseGemm):
        return ("dense", shape.n, shape.k, shape.dtype)
    if isinstance(shape, RaggedIndexer):
        return ("ragged", shape.context_len, shape.head_dim)
    return ("indexer", shape.context_len, shape.block_kv, shape.head_dim)


_SHAPES: dict[str, type] = {"DenseGemm": DenseGemm, "GroupedGemm": GroupedGemm, "PagedIndexer": PagedIndexer,
                            "RaggedIndexer": RaggedIndexer}


def spec_to_json(spec: WarmupSpec) -> dict[str, Any]:
    """``spec`` as plain JSON data (:func:`spec_from_json` reads it back)."""
    m = None if spec.m is None else {"kind": spec.m.kind, "ms": list(spec.m.ms), "max_m": spec.m.max_m}
    return {"shapes": [{"kind": type(s).__name__, **asdict(s)} for s in spec.shapes], "m": m,
            "max_tokens": spec.max_tokens, "scales": list(spec.scales)}


def spec_from_json(data: Any, where: str = "spec") -> WarmupSpec:
    """The description :func:`spec_to_json` wrote; :class:`~dgcompat.errors.BadArgumentError` naming ``where``
    for anything else."""
    try:
        shapes = []
        for item in data["shapes"]:
            fields = dict(item)
            cls = _SHAPES[fields.pop("kind")]
            shapes.append(cls(**fields))
        m = data.get("m")
        policy = None
        if m is not None:
            kind = m["kind"]
            policy = (MPolicy.values(m["ms"]) if kind == "values" else MPolicy.every(m["max_m"]) if kind == "every"
                      else MPolicy.changes(m["max_m"]) if kind == "changes" else None)
            if policy is None:
                raise ValueError(f"unknown M policy {kind!r}")
        return WarmupSpec(tuple(shapes), policy, data.get("max_tokens"), tuple(data["scales"]))
    except BadArgumentError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise BadArgumentError("warmup", where, "a warmup description written by dgcompat",
                               f"{type(exc).__name__}: {exc}") from None
