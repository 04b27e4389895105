"""Compile every deep_gemm kernel an engine will need before it serves: once, in parallel.

deep_gemm JIT-compiles a kernel the first time a call needs it (2-4 s each with NVCC), so an
engine that walks every M of every shape serially before serving spends minutes there, and several
ranks doing so at once compile the same kernels several times. :func:`warmup` takes a description
of what the engine will run (:class:`WarmupSpec`), finds out which calls share a kernel without
compiling them, compiles each distinct kernel once in parallel worker processes and reports what
it did (:class:`WarmupReport`).

How calls are told apart (docs/warmup.md has the details per release family): the workers point
``DG_JIT_NVCC_COMPILER`` at a small stand-in program. Asked to identify, it records a digest of the
generated kernel source and the compiler flags (deep_gemm's own cache key is made of the same
parts), keeps the first build recipe of each digest and fails at once, so each call costs
milliseconds. The calling process compiles each new digest from its recipe the moment it is
reported (one NVCC process per kernel, ``workers`` at a time, while the other calls are still being
identified), and a worker's call then installs the result through deep_gemm's own cache code. Where
the stand-in is not honoured (NVRTC, an unknown JIT) the workers fall back to real calls on scratch
tensors, one shape per worker.

Sharing: a worker holds an ``fcntl`` lock on ``<cache>/dgcompat-locks/<digest>.lock`` while it
compiles that kernel, so processes warming one cache never compile a kernel twice; deep_gemm
itself writes each entry into a temporary folder and renames it into place. Kernels live in a
folder per (distribution, release, torch) under the cache root (:func:`jit_cache_dir`); engines
use the same folder at serve time with :func:`use_jit_cache_dir`.

Nothing here runs at import. The calling process never imports torch or deep_gemm and creates no
CUDA context (it only runs NVCC): the workers are started with the ``spawn`` method.
"""

from __future__ import annotations

import importlib.metadata as md
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Sequence, TextIO, Union

from .errors import BadArgumentError, DeepGemmUnavailableError, DgcompatError

__all__ = [
    "DenseGemm", "GroupedGemm", "PagedIndexer", "MPolicy", "WarmupSpec", "KernelEntry", "WarmupReport",
    "WarmupError", "warmup", "jit_cache_dir", "use_jit_cache_dir", "plan_calls", "Call",
]

Shape = Union["DenseGemm", "GroupedGemm", "PagedIndexer"]

#: Bytes a worker needs besides its scratch tensors (CUDA context, allocator slack).
WORKER_OVERHEAD_BYTES = 1 << 30


class WarmupError(DgcompatError):
    """A warmup worker failed (a compile error, a crashed worker, no compiler): nothing was left half
    written in the cache (deep_gemm renames finished entries into place), but the warmup is incomplete."""


def _positive(fn: str, arg: str, value: Any) -> int:
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
        _positive("DenseGemm", "n", self.n)
        _positive("DenseGemm", "k", self.k)
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
            _positive("GroupedGemm", arg, getattr(self, arg))
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
            _positive("GroupedGemm", "max_m", self.max_m)
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
            _positive("PagedIndexer", arg, getattr(self, arg))

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
            _positive("MPolicy.values", "ms", m)
        return MPolicy("values", tuple(sorted(set(vals))))

    @staticmethod
    def every(max_m: int) -> MPolicy:
        return MPolicy("every", (), _positive("MPolicy.every", "max_m", max_m))

    @staticmethod
    def changes(max_m: int) -> MPolicy:
        return MPolicy("changes", (), _positive("MPolicy.changes", "max_m", max_m))

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


CONTIGUOUS_ALIGNMENT = 128


def _ms_for(shape: Shape, ms: Sequence[int]) -> list[int]:
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
        for m in _ms_for(shape, values):
            if (shape, m) not in seen:
                seen.add((shape, m))
                calls.append(Call(shape, m))
    return calls


def weight_bytes(shape: Shape) -> int:
    """Device bytes of the shape's B operand and its scales (a worker keeps one per distinct weight shape)."""
    if isinstance(shape, PagedIndexer):
        blocks = -(-shape.context_len // shape.block_kv)
        return blocks * shape.block_kv * (shape.head_dim + 4)
    el = 1 if shape.dtype == "fp8" else 2
    groups = shape.num_groups if isinstance(shape, GroupedGemm) else 1
    return groups * (el * shape.n * shape.k + 4 * (shape.n // 128 + 1) * (shape.k // 128 + 1))


def scratch_bytes(call: Call) -> int:
    """Device bytes of the per-call scratch tensors of ``call`` (activations, output, indices)."""
    s, m = call.shape, call.m
    if isinstance(s, DenseGemm):
        el = 1 if s.dtype == "fp8" else 2
        return el * m * s.k + 2 * m * s.n + 4 * (m + 4) * (s.k // 128 + 1)
    if isinstance(s, GroupedGemm):
        el = 1 if s.dtype == "fp8" else 2
        rows = m if s.layout == "contiguous" else s.num_groups * (s.max_m or m)
        return el * rows * s.k + 2 * rows * s.n + 4 * (rows + 4) * (s.k // 128 + 1) + 4 * rows
    return m * s.next_n * (s.num_heads * (s.head_dim + 4) + 4 * s.context_len + 8) + 4 * m * s.context_len


def worker_bytes(calls: Sequence[Call]) -> int:
    """What one worker needs at most: its CUDA context, every distinct weight, the largest call's scratch."""
    weights = {weight_key(c.shape): weight_bytes(c.shape) for c in calls}
    return WORKER_OVERHEAD_BYTES + sum(weights.values()) + max((scratch_bytes(c) for c in calls), default=0)


def weight_key(shape: Shape) -> tuple[Any, ...]:
    if isinstance(shape, GroupedGemm):
        return ("grouped", shape.num_groups, shape.n, shape.k, shape.dtype)
    if isinstance(shape, DenseGemm):
        return ("dense", shape.n, shape.k, shape.dtype)
    return ("indexer", shape.context_len, shape.block_kv, shape.head_dim)


# ----------------------------------------------------------------------------------------------
# The cache folder


def _torch_version() -> str:
    try:
        v = md.version("torch")
    except md.PackageNotFoundError:
        return "none"
    parts = v.split("+")[0].split(".")
    return ".".join(parts[:2])


def cache_root() -> Path:
    """``DGCOMPAT_JIT_CACHE_ROOT``, else ``DG_JIT_CACHE_DIR``, else deep_gemm's default ``~/.deep_gemm``."""
    for var in ("DGCOMPAT_JIT_CACHE_ROOT", "DG_JIT_CACHE_DIR"):
        value = os.environ.get(var, "").strip()
        if value:
            return Path(value).expanduser()
    return Path.home() / ".deep_gemm"


def jit_cache_dir(root: str | os.PathLike[str] | None = None, *, isolate: bool = True) -> Path:
    """The JIT cache folder warmup fills and the engine must use: ``<root>/dgcompat-<dist>-<release>-torch<X.Y>``.

    deep_gemm's cache key hashes the kernel source (with its ``deep_gemm/`` headers), the NVCC version
    and the flags (which name the GPU architecture), but not third-party headers (CUTLASS/CuTe) that a
    release may update, and the 0.2 JIT's key is not documented; a folder per release and torch makes
    a swap start from an empty folder instead of trusting that. ``isolate=False`` gives ``root`` itself.
    Reads distribution metadata only (imports nothing).
    """
    base = Path(root).expanduser() if root is not None else cache_root()
    if not isolate:
        return base
    from .detection import release

    rel = release()
    dist = (rel.dist or rel.source).replace(" ", "_")
    version = str(rel.version) if rel.version is not None else "unknown"
    return base / f"dgcompat-{dist}-{version}-torch{_torch_version()}"


def use_jit_cache_dir(root: str | os.PathLike[str] | None = None, *, isolate: bool = True) -> Path:
    """Point this process's deep_gemm at :func:`jit_cache_dir` (sets ``DG_JIT_CACHE_DIR``; remembers the
    root in ``DGCOMPAT_JIT_CACHE_ROOT`` so a second call gives the same folder). Call it before the first
    kernel call, e.g. at engine start-up; returns the folder."""
    base = Path(root).expanduser() if root is not None else cache_root()
    folder = jit_cache_dir(base, isolate=isolate)
    os.environ["DGCOMPAT_JIT_CACHE_ROOT"] = str(base)
    os.environ["DG_JIT_CACHE_DIR"] = str(folder)
    return folder


# ----------------------------------------------------------------------------------------------
# The report


@dataclass(frozen=True)
class KernelEntry:
    """One distinct kernel: its digest, whether this warmup compiled it or found it, and the call that
    stands for it."""

    identity: str
    status: Literal["compiled", "cached"]
    call: str
    seconds: float


@dataclass(frozen=True)
class WarmupReport:
    """What :func:`warmup` did.

    ``method``: ``"stand-in"`` (kernels told apart by the stand-in compiler; counts exact),
    ``"calls"`` (real calls, one shape per worker; ``compiled`` counts new cache entries, which can
    include entries other processes wrote meanwhile), ``"record"`` (an identical complete warmup was
    recorded and its entries are all present: nothing ran) or ``"none"`` (the reference backend:
    nothing to compile). ``kernels`` = distinct kernels found; ``compiled + cached == kernels`` for ``stand-in``.
    ``workers``: kernels compiled at once; ``processes``: worker processes (identify and install calls).
    Times in seconds from the start of the call: ``wall_s`` the whole call, ``first_up_s`` / ``start_s``
    until the first / every worker had started (imported torch and deep_gemm), ``identify_s`` until
    every call was identified, ``compile_s`` until every kernel the calls need first was compiled and
    installed (the rest is the verify pass and the kernels only it finds).
    """

    release: str
    method: Literal["stand-in", "calls", "record", "none"]
    cache_dir: str
    workers: int
    calls: int
    kernels: int
    compiled: int
    cached: int
    wall_s: float
    identify_s: float
    start_s: float = 0.0
    entries: tuple[KernelEntry, ...] = ()
    notes: tuple[str, ...] = ()
    processes: int = 0
    first_up_s: float = 0.0
    compile_s: float = 0.0

    @property
    def compiled_ids(self) -> tuple[str, ...]:
        return tuple(e.identity for e in self.entries if e.status == "compiled")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        head = (f"dgcompat warmup [{self.release}, {self.method}]: {self.calls} calls, {self.kernels} distinct "
                f"kernels: {self.compiled} compiled, {self.cached} found in the cache; {self.wall_s:.1f} s wall "
                f"({self.phases()}) with {self.workers} compiles at once in {self.processes} worker processes; "
                f"cache {self.cache_dir}")
        return "\n".join([head, *(f"  note: {n}" for n in self.notes)])

    def phases(self) -> str:
        """Where the time went, e.g. ``workers up 1.2-2.0 s, identified 2.4 s, compiled 9.8 s``."""
        return (f"workers up {self.first_up_s:.1f}-{self.start_s:.1f} s, identified {self.identify_s:.1f} s, "
                f"compiled {self.compile_s:.1f} s")

    def __str__(self) -> str:
        return self.summary()


# ----------------------------------------------------------------------------------------------
# Sizing and the environment of the workers


def _cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def nvidia_smi(query: str, device: int) -> str | None:
    """``nvidia-smi --query-gpu=<query>`` for ``device`` (mapped through ``CUDA_VISIBLE_DEVICES``), or None.
    The parent asks this instead of CUDA so that it never creates a CUDA context."""
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    ident = str(device)
    if visible:
        items = [v.strip() for v in visible.split(",") if v.strip()]
        if device < len(items):
            ident = items[device]
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", ident],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def free_gpu_bytes(device: int) -> int | None:
    """Free memory of ``device`` in bytes, or None if unknown."""
    text = nvidia_smi("memory.free", device)
    try:
        return int(text) << 20 if text is not None else None
    except ValueError:
        return None


def default_workers(calls: Sequence[Call], device: int) -> tuple[int, str]:
    """(workers, why) for the calls method, where every compile runs inside a worker process: the host's
    cores, bounded by free GPU memory and by the number of calls."""
    n = _cpu_count()
    why = f"{n} cores"
    fit = gpu_fit(calls, device)
    if fit is not None and fit[0] < n:
        n, why = fit
    return max(1, min(n, len(calls))), why


def gpu_fit(calls: Sequence[Call], device: int) -> tuple[int, str] | None:
    """How many worker processes fit in the free GPU memory, and why; None if unknown."""
    free = free_gpu_bytes(device)
    if free is None or not calls:
        return None
    per = worker_bytes(calls)
    return max(1, int(free * 0.8) // per), f"free GPU memory {free >> 20} MiB / {per >> 20} MiB per worker"


#: Calls one stand-in worker process identifies by default (about a second at a few milliseconds each).
CALLS_PER_PROCESS = 128


def default_processes(calls: Sequence[Call], device: int, workers: int) -> tuple[int, str]:
    """(processes, why) for the stand-in method: a quarter of the cores, more for long call lists (one per
    :data:`CALLS_PER_PROCESS` calls, up to the cores), at least 2 and at most ``workers``, bounded by free GPU
    memory and the number of calls. Its workers only identify and install (milliseconds a call); NVCC runs
    from the calling process, so more of them would only add start-up time (each imports torch and
    deep_gemm and creates a CUDA context)."""
    cores = _cpu_count()
    n = max(2, cores // 4)
    why = "a quarter of the cores"
    by_calls = min(cores, -(-len(calls) // CALLS_PER_PROCESS))
    if by_calls > n:
        n, why = by_calls, f"{CALLS_PER_PROCESS} calls each"
    fit = gpu_fit(calls, device)
    if fit is not None and fit[0] < n:
        n, why = fit
    return max(1, min(n, workers, len(calls))), why


def real_nvcc() -> str | None:
    """The NVCC deep_gemm would run: ``DG_JIT_NVCC_COMPILER``, else ``<CUDA home>/bin/nvcc`` found the way
    deep_gemm finds its CUDA home (``CUDA_HOME``, ``CUDA_PATH``, ``nvcc`` on PATH, ``/usr/local/cuda``)."""
    explicit = os.environ.get("DG_JIT_NVCC_COMPILER", "").strip()
    if explicit:
        return explicit
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if not home:
        found = shutil.which("nvcc")
        if found:
            return str(Path(found).resolve())
        home = "/usr/local/cuda"
    nvcc = Path(home) / "bin" / "nvcc"
    return str(nvcc) if nvcc.exists() else None


def _stand_in_unusable() -> str | None:
    """Why the stand-in compiler cannot be used here, or None."""
    if os.environ.get("DG_JIT_USE_NVRTC", "0").strip() not in ("", "0"):
        return "DG_JIT_USE_NVRTC is set: deep_gemm compiles with NVRTC, not through a compiler program"
    if os.name != "posix" or shutil.which("sh") is None or shutil.which("sha256sum") is None:
        return "no POSIX sh / sha256sum for the stand-in compiler"
    return None


# ----------------------------------------------------------------------------------------------
# The entry point


def _release_label() -> str:
    from .detection import release

    return release().label


def warmup(spec: WarmupSpec, *, workers: int | None = None, device: int = 0,
           cache_dir: str | os.PathLike[str] | None = None, isolate: bool = True, verify: bool = True,
           progress: bool | None = None, timeout_s: float | None = None,
           method: Literal["auto", "stand-in", "calls"] = "auto", fresh: bool = False,
           processes: int | None = None) -> WarmupReport:
    """Compile every kernel the calls described by ``spec`` need, each once, in parallel; return a report.

    - ``workers``: kernels compiled at once (default: the host's cores). With the calls method each is a
      worker process, bounded by free GPU memory.
    - ``processes``: worker processes of the stand-in method (default: :func:`default_processes`); they
      identify calls and install the kernels the calling process compiled.
    - ``device``: the CUDA device index the workers use.
    - ``cache_dir``: the cache root (default :func:`cache_root`); kernels go to
      :func:`jit_cache_dir` of it (``isolate=False``: the root itself). Serve with the same folder
      (:func:`use_jit_cache_dir`).
    - ``verify``: after compiling one call per kernel, run every other call once against the warm
      cache and compile whatever it still misses (a call that needs two kernels, e.g. schedule +
      logits). Cheap: these calls hit the cache.
    - ``progress``: a progress line on stderr (default: when stderr is a terminal).
    - ``method``: ``"auto"`` uses the stand-in compiler where it works, else real calls.
    - ``fresh``: ignore the record of an earlier identical warmup (see below) and check every call.

    A complete warmup (stand-in method, ``verify`` on) leaves a record in the cache folder naming the
    cache entries present when it finished, keyed by the description, the release, torch, the NVCC
    binary, the ``DG_JIT_*`` settings and the GPU model. A later identical warmup whose recorded
    entries all still exist returns at once (``method="record"``: every kernel found in the cache).

    On the reference backend nothing is compiled: the report says so (``method="none"``, 0 kernels).
    Raises :class:`~dgcompat.errors.UnsupportedFeatureError` for a shape the release cannot run,
    :class:`WarmupError` when a compile or a worker fails.
    """
    from . import _backend
    from ._warmup import record

    t0 = time.perf_counter()
    calls = plan_calls(spec)
    if not calls:
        raise BadArgumentError("warmup", "spec", "at least one call", "none: every M exceeds its shape's max_m")
    _check_options(workers, device, method)
    if processes is not None:
        _positive("warmup", "processes", processes)
    folder = jit_cache_dir(cache_dir, isolate=isolate)
    backend = _backend.backend_name()
    if backend == "reference":
        return WarmupReport("reference", "none", str(folder), 0, len(calls), 0, 0, 0,
                            time.perf_counter() - t0, 0.0,
                            notes=("the reference backend compiles nothing: warmup is a no-op",))
    if backend == "none":
        raise DeepGemmUnavailableError(
            "warmup(): deep_gemm is not installed; nothing to compile (DGCOMPAT_BACKEND=reference runs the "
            "pure-torch backend, which needs no warmup)")
    nvcc = real_nvcc()
    if nvcc is None:
        raise WarmupError("warmup(): no NVCC found (DG_JIT_NVCC_COMPILER, CUDA_HOME, CUDA_PATH, nvcc on PATH, "
                          "/usr/local/cuda): deep_gemm could not compile either")
    chosen, notes = _choose_method(method)
    key = record.key(spec, nvcc, device) if chosen == "stand-in" and verify else None
    done = None if key is None or fresh else record.read(folder, key)
    if done is not None:
        note = (f"an identical warmup finished at {done.finished}; its {done.entries} cache entries are all "
                "present (fresh=True checks every call again)")
        return WarmupReport(_release_label(), "record", str(folder), 0, done.calls, done.kernels, 0,
                            done.kernels, time.perf_counter() - t0, 0.0, 0.0, (), (note,))
    if chosen == "calls":
        if workers is None:
            workers, why = default_workers(calls, device)
            notes.append(f"{workers} workers ({why})")
        else:
            workers = min(workers, max(1, len(calls)))
        processes = workers
    else:
        workers = _cpu_count() if workers is None else workers
        if processes is None:
            processes, why = default_processes(calls, device, workers)
            notes.append(f"{workers} compiles at once, {processes} worker processes ({why})")
        else:
            processes = min(processes, max(1, len(calls)))
    show = sys.stderr.isatty() if progress is None else bool(progress)
    from ._warmup.pool import Pool

    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="dgcompat-warmup-") as scratch:
        pool = Pool(calls, spec.m, workers=workers, processes=processes, device=device, cache=folder,
                    scratch=Path(scratch), nvcc=nvcc, verify=verify, out=sys.stderr if show else None,
                    timeout_s=timeout_s, t0=t0)
        result = pool.run(chosen)
    notes.extend(result.notes)
    entries = tuple(result.entries)
    exact = result.method == "stand-in"
    compiled = sum(e.status == "compiled" for e in entries) if exact else result.new_entries
    cached = sum(e.status == "cached" for e in entries) if exact else 0
    kernels = len(entries) if exact else result.new_entries
    if key is not None and exact:
        record.write(folder, key, calls=len(result.calls), kernels=kernels)
    return WarmupReport(_release_label(), result.method, str(folder), workers, len(result.calls), kernels,
                        compiled, cached, time.perf_counter() - t0, result.identify_s, result.start_s, entries,
                        tuple(notes), result.processes, result.first_up_s, result.compile_s)


def _check_options(workers: Any, device: Any, method: Any) -> None:
    if workers is not None:
        _positive("warmup", "workers", workers)
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise BadArgumentError("warmup", "device", "a CUDA device index >= 0", repr(device))
    if method not in ("auto", "stand-in", "calls"):
        raise BadArgumentError("warmup", "method", "'auto', 'stand-in' or 'calls'", repr(method))


def _choose_method(method: str) -> tuple[Literal["stand-in", "calls"], list[str]]:
    """The method to start with and why (the stand-in can still hand over to real calls at run time)."""
    unusable = _stand_in_unusable()
    if method == "calls":
        return "calls", []
    if unusable is None:
        return "stand-in", []
    if method == "stand-in":
        raise WarmupError(f"warmup(): the stand-in compiler cannot be used: {unusable}")
    return "calls", [f"real calls instead of the stand-in compiler: {unusable}"]


def write_progress(out: TextIO | None, text: str, *, final: bool = False) -> None:
    """One progress line, rewritten in place (only where a stream was asked for)."""
    if out is None:
        return
    out.write("\r[dgcompat warmup] " + text + ("\n" if final else ""))
    out.flush()


@dataclass
class PoolResult:
    """What the worker pool hands back to :func:`warmup`."""

    method: Literal["stand-in", "calls"]
    calls: list[Call]
    entries: list[KernelEntry] = field(default_factory=list)
    new_entries: int = 0
    identify_s: float = 0.0
    start_s: float = 0.0
    first_up_s: float = 0.0
    compile_s: float = 0.0
    processes: int = 0
    notes: list[str] = field(default_factory=list)
