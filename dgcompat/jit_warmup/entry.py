"""The warmup entry point: checks the options, picks the method, runs the worker pool, records and reports."""

from __future__ import annotations

import math
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal

from .. import _backend
from ..detection import release
from ..errors import BadArgumentError, DeepGemmUnavailableError
from . import host, record
from .cache import checked_folder, jit_cache_dir
from .pool import Pool
from .report import WarmupError, WarmupReport
from .spec import WarmupSpec, plan_calls, positive

__all__ = ["warmup"]


def warmup(spec: WarmupSpec, *, workers: int | None = None, device: int = 0,
           cache_dir: str | os.PathLike[str] | None = None, isolate: bool = False, verify: bool = True,
           progress: bool | None = None, timeout_s: float | None = None,
           method: Literal["auto", "stand-in", "calls"] = "auto", fresh: bool = False,
           processes: int | None = None) -> WarmupReport:
    """Compile every kernel the calls described by ``spec`` need, each once, in parallel; return a report.

    - ``workers``: kernels compiled at once (default: the host's cores). With the calls method each is a
      worker process, bounded by free GPU memory.
    - ``processes``: worker processes of the stand-in method (default: :func:`~dgcompat.jit_warmup.host.default_processes`); they
      identify calls and install the kernels the calling process compiled.
    - ``device``: the CUDA device index the workers use.
    - ``cache_dir``: the folder kernels go to (a relative path is taken from the current folder), default
      the one deep_gemm reads: ``DG_JIT_CACHE_DIR``, else ``~/.deep_gemm``
      (:func:`~dgcompat.jit_warmup.cache.jit_cache_dir`). A serving process with the same
      ``DG_JIT_CACHE_DIR`` finds the kernels. ``isolate=True``: a folder per release and torch under it
      instead, which serving must be pointed at (:func:`~dgcompat.jit_warmup.cache.use_jit_cache_dir`).
    - ``verify``: after compiling one call per kernel, run every other call once against the warm
      cache and compile whatever it still misses (a call that needs two kernels, e.g. schedule +
      logits). Cheap: these calls hit the cache.
    - ``progress``: a progress line on stderr (default: when stderr is a terminal).
    - ``timeout_s``: give up (:class:`~dgcompat.jit_warmup.report.WarmupError`) after this many seconds.
    - ``method``: ``"auto"`` uses the stand-in compiler where it works, else real calls.
    - ``fresh``: ignore the record of an earlier identical warmup (see below) and check every call.

    A complete warmup (stand-in method, ``verify`` on) leaves a record in the cache folder naming the
    cache entries present when it finished, keyed by the description, the release, torch, the NVCC
    binary, the ``DG_JIT_*`` settings and the GPU model. A later identical warmup whose recorded
    entries all still exist returns at once (``method="record"``: every kernel found in the cache).

    On the reference backend nothing is compiled: the report says so (``method="none"``, 0 kernels).
    Raises :class:`~dgcompat.errors.UnsupportedFeatureError` for a shape the release cannot run,
    :class:`~dgcompat.jit_warmup.report.WarmupError` when a compile or a worker fails.
    """
    t0 = time.perf_counter()
    calls = plan_calls(spec)
    if not calls:
        raise BadArgumentError("warmup", "spec", "at least one call", "none: every M exceeds its shape's max_m")
    _check_options(workers, device, method, processes, timeout_s)
    folder = checked_folder(_folder(cache_dir, isolate), "warmup", "cache_dir")
    backend = _backend.backend_name()
    if backend == "reference":
        return WarmupReport("reference", "none", str(folder), 0, len(calls), 0, 0, 0,
                            time.perf_counter() - t0, 0.0,
                            notes=("the reference backend compiles nothing: warmup is a no-op",))
    if backend == "none":
        raise DeepGemmUnavailableError(
            "warmup(): deep_gemm is not installed; nothing to compile (DGCOMPAT_BACKEND=reference runs the "
            "pure-torch backend, which needs no warmup)")
    nvcc = host.real_nvcc()
    if nvcc is None:
        raise WarmupError("warmup(): no NVCC found (DG_JIT_NVCC_COMPILER, CUDA_HOME, CUDA_PATH, nvcc on PATH, "
                          "/usr/local/cuda): deep_gemm could not compile either")
    chosen, notes = _choose_method(method)
    key = record.key(spec, nvcc, device) if chosen == "stand-in" and verify else None
    done = None if key is None or fresh else record.read(folder, key)
    if done is not None:
        note = (f"an identical warmup finished at {done.finished}; its {done.entries} cache entries are all "
                "present (fresh=True checks every call again)")
        return WarmupReport(release().label, "record", str(folder), 0, done.calls, done.kernels, 0,
                            done.kernels, time.perf_counter() - t0, 0.0, 0.0, (), (note,))
    if chosen == "calls":
        if workers is None:
            workers, why = host.default_workers(calls, device)
            notes.append(f"{workers} workers ({why})")
        else:
            workers = min(workers, max(1, len(calls)))
        processes = workers
    else:
        workers = host.cpu_count() if workers is None else workers
        if processes is None:
            processes, why = host.default_processes(calls, device, workers)
            notes.append(f"{workers} compiles at once, {processes} worker processes ({why})")
        else:
            processes = min(processes, max(1, len(calls)))
    show = sys.stderr.isatty() if progress is None else bool(progress)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadArgumentError("warmup", "cache_dir", "a folder this process can create", f"{folder}: {exc}") from None
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
    return WarmupReport(release().label, result.method, str(folder), workers, len(result.calls), kernels,
                        compiled, cached, time.perf_counter() - t0, result.identify_s, result.start_s, entries,
                        tuple(notes), result.processes, result.first_up_s, result.compile_s)


def _check_options(workers: Any, device: Any, method: Any, processes: Any, timeout_s: Any) -> None:
    if workers is not None:
        positive("warmup", "workers", workers)
    if processes is not None:
        positive("warmup", "processes", processes)
    if isinstance(device, bool) or not isinstance(device, int) or device < 0:
        raise BadArgumentError("warmup", "device", "a CUDA device index >= 0", repr(device))
    if method not in ("auto", "stand-in", "calls"):
        raise BadArgumentError("warmup", "method", "'auto', 'stand-in' or 'calls'", repr(method))
    if timeout_s is not None and (isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float))
                                  or not math.isfinite(timeout_s) or timeout_s <= 0):
        raise BadArgumentError("warmup", "timeout_s", "None or a positive, finite number of seconds", repr(timeout_s))


def _folder(cache_dir: Any, isolate: Any) -> Path:
    if cache_dir is not None and (not isinstance(cache_dir, (str, os.PathLike)) or not str(cache_dir).strip()):
        raise BadArgumentError("warmup", "cache_dir", "None or a folder path (str or os.PathLike)", repr(cache_dir))
    if not isinstance(isolate, bool):
        raise BadArgumentError("warmup", "isolate", "True or False", repr(isolate))
    return jit_cache_dir(cache_dir, isolate=isolate)


def _choose_method(method: str) -> tuple[Literal["stand-in", "calls"], list[str]]:
    """The method to start with and why (the stand-in can still hand over to real calls at run time)."""
    unusable = host.stand_in_unusable()
    if method == "calls":
        return "calls", []
    if unusable is None:
        return "stand-in", []
    if method == "stand-in":
        raise WarmupError(f"warmup(): the stand-in compiler cannot be used: {unusable}")
    return "calls", [f"real calls instead of the stand-in compiler: {unusable}"]
