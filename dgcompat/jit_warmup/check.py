"""The check anyone can run after a warmup: a sample of the description's real calls, made the way a serving
process makes them, against the warmed folder, counting the kernels they compile (there must be none).

The calls run in a fresh spawned process whose only setting is ``DG_JIT_CACHE_DIR`` (the warmed folder):
the real deep_gemm with its real compiler, as at serve time. A compile is counted by watching the folder
(:func:`~dgcompat.jit_warmup.cache.snapshot` before and after each call): every release family keeps what it
compiles there, NVCC and NVRTC builds alike, so a new file is a kernel compiled at serve time, whatever the
JIT and however it calls its compiler (a stand-in compiler could not see NVRTC compiles, nor JITs that
ignore ``DG_JIT_NVCC_COMPILER``). Each miss is reported with its shape, M and scale form, and is a real
compile: the folder then holds that kernel.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import time
import traceback
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..detection import backend_name
from ..detection import release
from ..errors import BadArgumentError
from ..errors import DeepGemmUnavailableError
from . import host
from . import lifetime
from . import relocate
from .cache import snapshot
from .calls import Runner
from .options import cache_folder
from .options import check_options
from .report import WarmupError
from .spec import Call
from .spec import Shape
from .spec import WarmupSpec
from .spec import plan_calls
from .spec import positive

__all__ = ["Miss", "CheckReport", "sample_calls", "check"]


@dataclass(frozen=True)
class Miss:
    """A sampled call that compiled a kernel: what it was and the files it added to the folder."""

    call: str
    shape: str
    m: int
    form: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check` found: ``calls`` sampled calls ran against ``cache_dir``; ``compiled`` kernels were
    compiled by them (each in ``misses``); ``errors``: calls that failed (each a line)."""

    release: str
    cache_dir: str
    calls: int
    compiled: int
    misses: tuple[Miss, ...] = ()
    errors: tuple[str, ...] = ()
    seconds: float = 0.0
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        """Nothing compiled and nothing failed."""
        return self.compiled == 0 and not self.errors

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        verdict = "OK" if self.ok else "FAILED"
        lines = [f"dgcompat warmup check [{self.release}]: {verdict}: {self.calls} sampled calls compiled "
                 f"{self.compiled} kernels in {self.seconds:.1f} s (counted as new files in {self.cache_dir})"]
        lines += [f"  miss: {m.call} ({len(m.files)} new files, e.g. {m.files[0]})" for m in self.misses]
        lines += [f"  error: {e}" for e in self.errors]
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()


def sample_calls(calls: Sequence[Call], *, per_shape: int = 16, seed: int = 0) -> list[Call]:
    """Per (shape, scale form): its smallest and largest M and ``per_shape - 2`` others drawn with ``seed``."""
    groups: dict[tuple[Shape, str], list[int]] = {}
    for c in calls:
        groups.setdefault((c.shape, c.form), []).append(c.m)
    rng = random.Random(seed)
    out: list[Call] = []
    for (shape, form), ms in groups.items():
        ms = sorted(set(ms))
        inner = ms[1:-1]
        picked = {ms[0], ms[-1], *rng.sample(inner, min(len(inner), max(0, per_shape - 2)))}
        out.extend(Call(shape, m, form) for m in sorted(picked))
    return out


def check(spec: WarmupSpec, *, cache_dir: str | os.PathLike[str] | None = None, isolate: bool = False,
          device: int = 0, sample: int = 16, seed: int = 0, timeout_s: float | None = 600.0) -> CheckReport:
    """Run ``sample`` calls per (shape, scale form) of ``spec`` (:func:`sample_calls`) in a fresh process against
    the folder :func:`~dgcompat.jit_warmup.warmup` filled (same ``cache_dir`` / ``isolate``), and count the
    kernels they compile. On the reference backend nothing compiles: the report says so (0 calls).

    Raises :class:`~dgcompat.errors.BadArgumentError` for bad arguments,
    :class:`~dgcompat.errors.DeepGemmUnavailableError` without a deep_gemm, and
    :class:`~dgcompat.jit_warmup.report.WarmupError` when the process dies or runs past ``timeout_s``.
    """
    t0 = time.perf_counter()
    if not isinstance(spec, WarmupSpec):
        raise BadArgumentError("check", "spec", "a WarmupSpec", type(spec).__name__)
    check_options("check", device=device, timeout_s=timeout_s)
    positive("check", "sample", sample)
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise BadArgumentError("check", "seed", "an int", repr(seed))
    folder = cache_folder("check", cache_dir, isolate, write=False)  # a read-only folder is checked as it is
    backend = backend_name()
    if backend == "reference":
        return CheckReport("reference", str(folder), 0, 0, seconds=time.perf_counter() - t0,
                           notes=("the reference backend compiles nothing: nothing to check",))
    if backend == "none":
        raise DeepGemmUnavailableError("check(): deep_gemm is not installed; nothing to check")
    calls = sample_calls(plan_calls(spec, family=host.gpu_family(device)), per_shape=sample, seed=seed)
    ctx = mp.get_context("spawn")  # the calls touch CUDA: never fork a process that might have it
    results: Any = ctx.Queue()
    proc = ctx.Process(target=main, args=(str(folder), device, [(c.shape, c.m, c.form) for c in calls], results,
                                          os.getpid()), daemon=True, name="dgcompat-warmup-check")
    with lifetime.interruptible():
        proc.start()
        try:
            got = _wait(proc, results, timeout_s)
        finally:
            lifetime.stop(proc, 30)
            results.close()
            results.cancel_join_thread()
    misses = tuple(Miss(str(m[0]), str(m[1]), int(m[2]), str(m[3]), tuple(m[4])) for m in got["misses"])
    notes = [f"{sample} calls per shape and scale form (seed {seed}), made as a serving process makes them, with "
             "DG_JIT_CACHE_DIR the only setting"]
    if misses:
        notes.extend(_why_missed(folder))
    if got["errors"] and folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):
        notes.append(f"{folder} is read-only here: a kernel it lacks cannot be compiled into it (warm it where it can "
                     "be written, or import an export of a warmup of this description)")
    return CheckReport(release().label, str(folder), got["calls"], len(misses), misses, tuple(got["errors"]),
                       time.perf_counter() - t0, notes=tuple(notes))


def _why_missed(folder: Path) -> list[str]:
    """What the folder says about misses: kernels warmed by another install of this release that were not re-keyed
    for this one."""
    rel = release()
    if not rel.location:
        return []
    include = os.path.realpath(os.path.join(rel.location, "include"))
    builds = [b for b in relocate.read_builds(folder) if b.release == rel.label]
    if not builds or any(os.path.realpath(b.include) == include for b in builds):
        return []
    where = ", ".join(sorted({b.location for b in builds}))
    return [f"this folder was warmed by {rel.label} installed at {where}, and its JIT's cache key contains the install "
            f"folder: `dgcompat warmup --adopt --cache-dir {folder}` re-keys those kernels for the install here"]


def _wait(proc: Any, results: Any, timeout_s: float | None) -> dict[str, Any]:
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        try:
            got: dict[str, Any] = results.get(timeout=0.2)
            return got
        except queue.Empty:
            pass
        if not proc.is_alive():
            raise WarmupError(f"check(): the check process died (exit code {proc.exitcode})")
        if deadline is not None and time.monotonic() > deadline:
            raise WarmupError(f"check(): not finished within {timeout_s} s")


def main(folder: str, device: int, calls: list[tuple[Shape, int, str]], results: Any, parent: int = 0) -> None:
    """The check process (spawned): the sampled calls against ``folder``, one snapshot of it after each."""
    if parent:
        lifetime.die_with_parent(parent)
    os.environ["DG_JIT_CACHE_DIR"] = folder  # before deep_gemm reads it (its first kernel call)
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    misses: list[tuple[str, str, int, str, list[str]]] = []
    errors: list[str] = []
    try:
        runner = Runner(device)
        root = Path(folder)
        before = snapshot(root)
        for shape, m, form in calls:
            try:
                runner.run(shape, m, form)
            except Exception as exc:  # noqa: BLE001 - reported, the other calls still run
                errors.append(f"{Call(shape, m, form).label}: {type(exc).__name__}: {exc}"[:600])
            after = snapshot(root)
            if after != before:
                misses.append((Call(shape, m, form).label, shape.label, m, form, sorted(after - before)))
            before = after
        if runner.device.type == "cuda":
            runner.torch.cuda.synchronize()
    except BaseException as exc:  # noqa: BLE001 - report, then die: the parent says what it means
        errors.append(f"{type(exc).__name__}: {exc}\n{traceback.format_exc()}"[-2000:])
    results.put({"calls": len(calls), "misses": misses, "errors": errors})
    results.close()
    results.join_thread()
    os._exit(0)
