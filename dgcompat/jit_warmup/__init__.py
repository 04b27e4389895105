"""Compile every deep_gemm kernel an engine will need before it serves: once, in parallel, so that serving
compiles nothing.

deep_gemm JIT-compiles a kernel the first time a call needs it (2-4 s each with NVCC), so an
engine that walks every M of every shape serially before serving spends minutes there, several
ranks doing so at once compile the same kernels several times, and whatever the walk missed is
compiled while serving. :func:`warmup` takes a description of what the engine will run
(:class:`WarmupSpec`: the shapes, every M up to a bound by default, the FP8 scale forms), finds out
which calls share a kernel without compiling them, compiles each distinct kernel once and runs every
call against the folder, then reports what it did (:class:`WarmupReport`).
:func:`~dgcompat.jit_warmup.check.check` (``dgcompat warmup --check``) shows on the real release that a
sample of the calls then compiles nothing.

How calls are told apart (docs/warmup.md has the details per release family): the workers point
``DG_JIT_NVCC_COMPILER`` at a small stand-in program. Asked to identify, it logs the compiler arguments
and fails at once; the worker computes a digest of the generated kernel source and the flags
(deep_gemm's own cache key is made of the same parts) and keeps the first build recipe of each digest.
One call per M class (:mod:`~dgcompat.jit_warmup.classes`) and scale form is identified. The calling
process compiles each new digest from its recipe the moment it is reported (one NVCC process per
kernel, ``workers`` at a time), a worker's call installs the result through deep_gemm's own cache code,
and every call then runs against the folder, so that whatever else a call needs is compiled too. Where
the stand-in is not honoured (NVRTC, an unknown JIT) the workers fall back to real calls on scratch
tensors.

Sharing: a kernel is compiled only under an ``fcntl`` lock on ``<cache>/dgcompat-locks/<digest>.lock``,
so processes warming one cache never compile a kernel twice; deep_gemm itself writes each entry into a
temporary folder and renames it into place. Kernels go to the folder deep_gemm reads
(:func:`jit_cache_dir`: ``DG_JIT_CACHE_DIR``, else ``~/.deep_gemm``), so a server with the same setting
finds them.

Nothing here runs at import. The calling process never imports torch or deep_gemm and creates no
CUDA context (it only runs NVCC): the workers are started with the ``spawn`` method.

A package beside the facade: engines import it themselves (``from dgcompat.jit_warmup import warmup,
WarmupSpec, ...``; ``import dgcompat`` never loads it), and it uses the runtime only through public
names, as an engine does (the stable functions, :mod:`dgcompat.detection`, :mod:`dgcompat.table`,
:mod:`dgcompat.env`, :mod:`dgcompat.errors`).

The package, one job per module: ``spec`` (the description: shapes, M policies, scale forms, the calls),
``presets`` (named workloads), ``classes`` (the M classes), ``options`` (argument checks), ``report``
(the report, its entries, the error), ``host`` (cores, GPU facts through ``nvidia-smi``, NVCC, worker
counts), ``cache`` (cache folders, entries, locks), ``record`` (the record of a complete warmup),
``standin`` (the stand-in compiler, its log, digests and recipes), ``build`` (NVCC on recorded recipes, in
the calling process), ``calls`` (scratch operands and the stable calls), ``worker`` (the worker processes),
``pool`` (the calling process's side of a pass), ``entry`` (:func:`warmup`), ``check`` (the check),
``keys`` (how each JIT lineage names a kernel), ``relocate`` (re-keying a folder's kernels for another install
of the same build: ``--adopt``), ``artifact`` (one file carrying them: ``--export`` / ``--import``), ``lifetime``
(scratch, signals, the watcher that cleans up after a calling process that dies), ``storage`` (what ran out when
a write failed) and ``cli`` (the ``dgcompat warmup`` command).

A warmed folder serves another install of the same build (a moved virtualenv, a container, another machine with
the same GPU architecture and NVCC): every warmup records what its install builds with, and
:func:`~dgcompat.jit_warmup.relocate.adopt` gives each kernel the name the other install's deep_gemm looks up,
after verifying that only the install path differs.
"""

from __future__ import annotations

from .cache import jit_cache_dir
from .cache import use_jit_cache_dir
from .entry import warmup
from .report import KernelEntry
from .report import WarmupError
from .report import WarmupInterrupted
from .report import WarmupReport
from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import MPolicy
from .spec import PagedIndexer
from .spec import RaggedIndexer
from .spec import WarmupSpec
from .storage import StorageError

__all__ = [
    "warmup", "WarmupSpec", "WarmupReport", "WarmupError", "DenseGemm", "GroupedGemm", "PagedIndexer", "MPolicy",
    "KernelEntry", "jit_cache_dir", "use_jit_cache_dir", "RaggedIndexer", "StorageError", "WarmupInterrupted",
]
