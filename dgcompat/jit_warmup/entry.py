"""The warmup entry point: checks the options, picks the method, runs the worker pool, records and reports."""

from __future__ import annotations

import os
import sys
import time
from typing import Literal

from ..detection import backend_name
from ..detection import release
from ..errors import BadArgumentError
from ..errors import DeepGemmUnavailableError
from . import host
from . import lifetime
from . import record
from . import relocate
from . import storage
from .classes import classes
from .classes import rule_for
from .options import cache_folder
from .options import check_options
from .pool import Pool
from .report import WarmupError
from .report import WarmupReport
from .spec import Call
from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import WarmupSpec
from .spec import plan_calls

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
    if not isinstance(spec, WarmupSpec):
        raise BadArgumentError("warmup", "spec", "a WarmupSpec", type(spec).__name__)
    check_options("warmup", workers=workers, device=device, method=method, processes=processes, timeout_s=timeout_s)
    folder = cache_folder("warmup", cache_dir, isolate, write=False)
    family = host.gpu_family(device)
    calls = plan_calls(spec, family=family)
    if not calls:
        raise BadArgumentError("warmup", "spec", "at least one call", "none: every M exceeds its shape's bound")
    policy = spec.policy
    forms = tuple(dict.fromkeys(c.form for c in calls if c.form))
    backend = backend_name()
    if backend == "reference":
        cache_folder("warmup", cache_dir, isolate)
        return WarmupReport("reference", "none", str(folder), 0, len(calls), 0, 0, 0,
                            time.perf_counter() - t0, 0.0,
                            notes=("the reference backend compiles nothing: warmup is a no-op",),
                            policy=policy.coverage(), forms=forms)
    if backend == "none":
        raise DeepGemmUnavailableError(
            "warmup(): deep_gemm is not installed; nothing to compile (DGCOMPAT_BACKEND=reference runs the "
            "pure-torch backend, which needs no warmup)")
    nvcc = host.real_nvcc()
    if nvcc is None:
        raise WarmupError("warmup(): no NVCC found (DG_JIT_NVCC_COMPILER, CUDA_HOME, CUDA_PATH, nvcc on PATH, "
                          "/usr/local/cuda): deep_gemm could not compile either")
    chosen, notes = _choose_method(method)
    notes.extend(_form_notes(spec, family))
    key = record.key(spec, nvcc, device) if chosen == "stand-in" and verify else None
    done = None if key is None or fresh else record.read(folder, key)
    if done is None:  # a read-only folder (an image layer, NFS) is fine where its record answers, else not
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
            raise BadArgumentError("warmup", "cache_dir", "a folder this process can write (a read-only one is "
                                   "answered only by the record of an identical complete warmup or import)",
                                   f"{folder}: read-only, and no such record for this description in it")
        cache_folder("warmup", cache_dir, isolate)
    if done is not None:
        note = (f"an identical warmup finished at {done.finished}; its {done.entries} cache entries are all "
                "present (fresh=True checks every call again)")
        return WarmupReport(release().label, "record", str(folder), 0, done.calls, done.kernels, 0,
                            done.kernels, time.perf_counter() - t0, 0.0, 0.0, (), (note, *done.notes),
                            policy=policy.coverage(), forms=forms)
    rel = release()
    rule = rule_for(rel.dist, rel.version, family)
    reps = [Call(shape, ms[-1]) for shape in dict.fromkeys(c.shape for c in calls)
            for ms in classes(rule, shape, sorted({c.m for c in calls if c.shape == shape})).values()]
    if chosen == "calls":
        if workers is None:
            workers, why = host.default_workers(reps, device)
            notes.append(f"{workers} workers ({why})")
        else:
            workers = min(workers, max(1, len(calls)))
        processes = workers
    else:
        workers = host.cpu_count() if workers is None else workers
        if processes is None:
            processes, why = host.default_processes(reps, device, workers)
            notes.append(f"{workers} compiles at once, {processes} worker processes ({why})")
        else:
            processes = min(processes, max(1, len(calls)))
    show = sys.stderr.isatty() if progress is None else bool(progress)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise BadArgumentError("warmup", "cache_dir", "a folder this process can create", f"{folder}: {exc}") from None
    folders = {"the JIT cache folder": folder}
    try:
        with lifetime.interruptible(), lifetime.Scratch() as scratch, lifetime.Reaper(scratch):
            folders["the warmup's scratch folder"] = scratch.path
            adoption = relocate.adopt(folder, nvcc, device)
            if adoption.adopted:
                notes.append(f"{len(adoption.adopted)} kernels warmed by another install of this build (same package, "
                             "NVCC, settings and GPU architecture) were re-keyed for this one")
            notes.extend(f"kernels of another install not used: {r}" for r in adoption.refused)
            pool = Pool(calls, policy, workers=workers, processes=processes, device=device, cache=folder,
                        scratch=scratch.path, nvcc=nvcc, verify=verify, out=sys.stderr if show else None,
                        timeout_s=timeout_s, t0=t0, rule=rule)
            result = pool.run(chosen)
            observed = relocate.observe(result.command, nvcc, device) if result.command else None
            if observed is not None:  # what this install builds with: --export and --adopt elsewhere need it
                with storage.writing(folder, "the JIT cache folder"):
                    relocate.write_build(folder, observed)
    except OSError as exc:
        full = storage.from_error(exc, folders)
        if full is None:
            raise
        raise full from None
    notes.extend(result.notes)
    if result.families and result.families != ((family or "unknown"),):
        notes.append(f"the calls were planned for the GPU family {family or 'unknown'} (what the calling process can "
                     f"tell without CUDA: DGCOMPAT_ARCH, NVML, nvidia-smi) but the workers saw "
                     f"{', '.join(result.families)}: the scale forms may not be those serving uses")
    if result.method == "stand-in" and policy.kind != "changes":
        source = "from the release's source" if rule.read else "a guess the verify pass checks"
        checked = "every call then verified" if verify else "the other calls not verified (verify=False)"
        notes.append(f"one call per M class identified ({rule.name}, {source}); {checked}")
    if result.verify_kernels:
        notes.append(f"{result.verify_kernels} kernels were met only by the verify pass (this release picks "
                     "kernels by finer M steps than the M classes say): compiled all the same")
    if policy.kind != "every":
        notes.append(f"sampled M values: {policy.coverage()}")
    entries = tuple(result.entries)
    exact = result.method == "stand-in"
    compiled = sum(e.status == "compiled" for e in entries) if exact else result.new_entries
    cached = sum(e.status == "cached" for e in entries) if exact else 0
    kernels = len(entries) if exact else result.new_entries
    if key is not None and exact:
        with storage.writing(folder, "the JIT cache folder"):
            record.write(folder, key, calls=len(result.calls), kernels=kernels,
                         notes=[n for n in result.notes if "install folder" in n])
    return WarmupReport(release().label, result.method, str(folder), workers, len(result.calls), kernels,
                        compiled, cached, time.perf_counter() - t0, result.identify_s, result.start_s, entries,
                        tuple(notes), result.processes, result.first_up_s, result.compile_s,
                        identified=result.identified, verified=result.verified,
                        verify_kernels=result.verify_kernels, policy=policy.coverage(), forms=forms,
                        nvcc_s=result.nvcc_s, nvcc_runs=result.nvcc_runs, first_compile_s=result.first_compile_s)


def _form_notes(spec: WarmupSpec, family: str | None) -> list[str]:
    """What the scale forms asked for that this GPU does not take."""
    fp8 = any(isinstance(s, (DenseGemm, GroupedGemm)) and s.dtype == "fp8" for s in spec.shapes)
    if not fp8 or "ue8m0" not in spec.scales or family == "sm100":
        return []
    why = f"the GPU ({family}) takes float32 scales" if family else "the GPU's architecture is unknown here"
    return [f"packed UE8M0 scales ('ue8m0') not warmed: {why}"]


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
