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

The package, one job per module: ``spec`` (the description: shapes, M policies, the calls), ``presets``
(named workloads), ``report`` (the report, its entries, the error), ``host`` (cores, GPU facts through
``nvidia-smi``, NVCC, worker counts), ``cache`` (cache folders, entries, locks), ``record`` (the record
of a complete warmup), ``standin`` (the stand-in compiler and its log), ``build`` (NVCC on recorded
recipes, in the calling process), ``calls`` (scratch operands and the stable calls, in workers),
``worker`` (the worker processes), ``pool`` (the calling process's side of a pass), ``entry``
(:func:`warmup`) and ``cli`` (the ``dgcompat warmup`` command).
"""

from __future__ import annotations

from .cache import jit_cache_dir, use_jit_cache_dir
from .entry import warmup
from .report import KernelEntry, WarmupError, WarmupReport
from .spec import DenseGemm, GroupedGemm, MPolicy, PagedIndexer, RaggedIndexer, WarmupSpec

__all__ = [
    "warmup", "WarmupSpec", "WarmupReport", "WarmupError", "DenseGemm", "GroupedGemm", "PagedIndexer", "MPolicy",
    "KernelEntry", "jit_cache_dir", "use_jit_cache_dir", "RaggedIndexer",
]
