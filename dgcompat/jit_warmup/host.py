"""What the host offers a warmup, asked without a CUDA context: cores, the GPU (through ``nvidia-smi``), free
GPU memory, the NVCC deep_gemm would run, and from those the number of workers.

The calling process never creates a CUDA context (engines fork workers after configuring), so the
GPU is asked through ``nvidia-smi`` only.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from ..table import arch_family
from ..table import current_arch
from .spec import Call
from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import PagedIndexer
from .spec import RaggedIndexer
from .spec import Shape
from .spec import weight_key

__all__ = [
    "cpu_count", "nvidia_smi", "gpu_family", "free_gpu_bytes", "default_workers", "gpu_fit", "CALLS_PER_PROCESS",
    "default_processes", "real_nvcc", "stand_in_unusable", "WORKER_OVERHEAD_BYTES", "weight_bytes",
    "scratch_bytes", "worker_bytes",
]

#: Bytes a worker needs besides its scratch tensors (CUDA context, allocator slack).
WORKER_OVERHEAD_BYTES = 1 << 30

#: Calls one stand-in worker process identifies by default (about a second at a few milliseconds each).
CALLS_PER_PROCESS = 128


def cpu_count() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def nvidia_smi(query: str, device: int) -> str | None:
    """``nvidia-smi --query-gpu=<query>`` for ``device`` (mapped through ``CUDA_VISIBLE_DEVICES``), or None.
    The parent asks this instead of CUDA so that it never creates a CUDA context; an answer is kept for the
    process's lifetime (a warm start asks twice)."""
    return _nvidia_smi(query, device, os.environ.get("CUDA_VISIBLE_DEVICES", "").strip())


@functools.lru_cache(maxsize=16)
def _nvidia_smi(query: str, device: int, visible: str) -> str | None:
    exe = shutil.which("nvidia-smi")
    if exe is None:
        return None
    ident = str(device)
    if visible:
        items = [v.strip() for v in visible.split(",") if v.strip()]
        if device < len(items):
            ident = items[device]
    try:
        out = subprocess.run([exe, f"--query-gpu={query}", "--format=csv,noheader,nounits", "-i", ident],
                             capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = out.stdout.strip().splitlines()
    return lines[0].strip() if out.returncode == 0 and lines else None


def gpu_family(device: int) -> str | None:
    """The architecture family (``"sm90"``, ``"sm100"``, ...) of ``device`` without a CUDA context:
    ``DGCOMPAT_ARCH`` or NVML (:func:`dgcompat.table.current_arch`), else ``nvidia-smi``; None if unknown."""
    family = arch_family(current_arch())
    if family is not None:
        return family
    answer = nvidia_smi("name,compute_cap", device)  # the record's question too: one nvidia-smi run
    cap = answer.rsplit(",", 1)[-1].strip() if answer else None
    if cap is None or "." not in cap:
        return None
    major, _, minor = cap.partition(".")
    return arch_family(f"sm{major.strip()}{minor.strip()}")


def free_gpu_bytes(device: int) -> int | None:
    """Free memory of ``device`` in bytes, or None if unknown."""
    text = nvidia_smi("memory.free", device)
    try:
        return int(text) << 20 if text is not None else None
    except ValueError:
        return None


def weight_bytes(shape: Shape) -> int:
    """Device bytes of the shape's B operand and its scales (a worker keeps one per distinct weight shape)."""
    if isinstance(shape, PagedIndexer):
        blocks = -(-shape.context_len // shape.block_kv)
        return blocks * shape.block_kv * (shape.head_dim + 4)
    if isinstance(shape, RaggedIndexer):
        return shape.context_len * (shape.head_dim + 4)
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
    if isinstance(s, RaggedIndexer):
        return m * (s.num_heads * (s.head_dim + 4) + 4 * s.context_len + 8)
    return m * s.next_n * (s.num_heads * (s.head_dim + 4) + 4 * s.context_len + 8) + 4 * m * s.context_len


def worker_bytes(calls: Sequence[Call]) -> int:
    """What one worker needs at most: its CUDA context, every distinct weight, the largest call's scratch."""
    weights = {weight_key(c.shape): weight_bytes(c.shape) for c in calls}
    return WORKER_OVERHEAD_BYTES + sum(weights.values()) + max((scratch_bytes(c) for c in calls), default=0)


def gpu_fit(calls: Sequence[Call], device: int) -> tuple[int, str] | None:
    """How many worker processes fit in the free GPU memory, and why; None if unknown."""
    free = free_gpu_bytes(device)
    if free is None or not calls:
        return None
    per = worker_bytes(calls)
    return max(1, int(free * 0.8) // per), f"free GPU memory {free >> 20} MiB / {per >> 20} MiB per worker"


def default_workers(calls: Sequence[Call], device: int) -> tuple[int, str]:
    """(workers, why) for the calls method, where every compile runs inside a worker process: the host's
    cores, bounded by free GPU memory and by the number of calls."""
    n = cpu_count()
    why = f"{n} cores"
    fit = gpu_fit(calls, device)
    if fit is not None and fit[0] < n:
        n, why = fit
    return max(1, min(n, len(calls))), why


def default_processes(calls: Sequence[Call], device: int, workers: int) -> tuple[int, str]:
    """(processes, why) for the stand-in method, given the ``calls`` to identify: a quarter of the cores, more
    for long lists (one per :data:`CALLS_PER_PROCESS` calls, up to the cores), at least 2 and at most
    ``workers``, bounded by free GPU memory and the number of calls. Its workers only identify and install (milliseconds a call); NVCC runs
    from the calling process, so more of them would only add start-up time (each imports torch and
    deep_gemm and creates a CUDA context)."""
    cores = cpu_count()
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


def stand_in_unusable() -> str | None:
    """Why the stand-in compiler cannot be used here, or None."""
    if os.environ.get("DG_JIT_USE_NVRTC", "0").strip() not in ("", "0"):
        return "DG_JIT_USE_NVRTC is set: deep_gemm compiles with NVRTC, not through a compiler program"
    if os.name != "posix" or shutil.which("sh") is None or shutil.which("sha256sum") is None:
        return "no POSIX sh / sha256sum for the stand-in compiler"
    return None
