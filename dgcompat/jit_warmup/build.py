"""The parent side of a warmup's compiles: NVCC runs on recorded recipes, outside deep_gemm.

A kernel's compile is an NVCC process; what needs a worker (torch, deep_gemm, a CUDA context) is only
the call that generates the source and the call that puts the entry into the cache. So while the
workers identify, the stand-in keeps the first recipe of each digest (the generated source, the
compiler arguments, where the JIT wanted the output), and the parent compiles each new digest at once
on a thread of its own (the thread only waits on the NVCC process), as many at a time as ``workers``.
A worker then makes the kernel's call in ``install:<digest>`` mode: the stand-in copies the built
output to the path deep_gemm asked for and replays NVCC's messages, and deep_gemm finishes the entry
its own way (folder, rename, load). The number of compiles at once no longer depends on the number of
worker processes, and compiling starts with the first digest found instead of after every worker
has started.

Sharing: the thread holds the kernel's lock (:func:`~dgcompat.jit_warmup.cache.lock_kernel`) from before
NVCC until the install is done, and takes it without waiting: a kernel another process holds, or that
a marker says is already present, is left to the ordinary worker path after this process's own
compiles (so a process never waits on a lock while holding one: no deadlock between ranks).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from . import lifetime
from . import storage
from .cache import indexed
from .cache import lock_kernel
from .cache import marked_present

__all__ = ["Recipe", "read_recipe", "rewrite", "Built", "build", "Outcome", "prepare_build", "cancel_all", "reset"]

#: Flags that write the source's path into the output (line info, device debug info): built elsewhere,
#: the kernel would name a folder that is gone, so such recipes are left to deep_gemm's own build.
_PATH_IN_OUTPUT = ("-lineinfo", "--generate-line-info", "-G", "--device-debug")


@dataclass(frozen=True)
class Recipe:
    """What the JIT asked the compiler for: ``args`` (as the stand-in received them), the source path
    ``code`` among them and the output path ``output``; ``source`` is the kept copy of the source."""

    identity: str
    source: Path
    code: str
    output: str
    args: tuple[str, ...]


def read_recipe(folder: Path) -> Recipe | None:
    """The recipe the stand-in kept in ``folder`` (``<recipes>/<digest>``), or None if it is incomplete, an
    argument held a line break or the flags ask for line info (the worker path then compiles it)."""
    try:
        count, code, output = (folder / "where").read_text().splitlines()
        args = (folder / "args").read_text().split("\n")[:-1]
    except (OSError, ValueError):
        return None
    if len(args) != int(count) or code not in args or not (folder / "source").is_file():
        return None
    if any(a in _PATH_IN_OUTPUT for a in args):
        return None
    return Recipe(folder.name, folder / "source", code, output, tuple(args))


def rewrite(recipe: Recipe, build_dir: Path) -> list[str]:
    """The recipe's arguments pointed at ``build_dir``: the source, the output and anything naming the JIT's
    build folder (its temporary folder, or the entry in JITs that build in place)."""
    src = str(build_dir / Path(recipe.code).name)
    out = str(build_dir / Path(recipe.output).name)
    old_dir = os.path.dirname(recipe.code)
    args: list[str] = []
    after_o = False
    for a in recipe.args:
        if after_o:
            args.append(out)
            after_o = False
        elif a in ("-o", "--output-file"):
            args.append(a)
            after_o = True
        elif a.startswith("--output-file="):
            args.append("--output-file=" + out)
        elif a == recipe.code:
            args.append(src)
        elif old_dir and old_dir in a:
            args.append(a.replace(old_dir, str(build_dir)))
        else:
            args.append(a)
    return args


@dataclass(frozen=True)
class Built:
    """How one NVCC run on a recipe went (``returncode`` and ``output`` of a run that failed)."""

    ok: bool
    seconds: float
    why: str = ""
    returncode: int = 0
    output: str = ""


_RUNNING: dict[int, subprocess.Popen[bytes]] = {}
_RUNNING_LOCK = threading.Lock()
_CANCELLED = threading.Event()


def cancel_all() -> None:
    """Kill every NVCC run of this process (each its own process group: cicc and ptxas too), and every one a
    compile thread starts from now until :func:`reset`."""
    _CANCELLED.set()
    with _RUNNING_LOCK:
        running = list(_RUNNING.values())
    for proc in running:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            pass


def reset() -> None:
    _CANCELLED.clear()


def _run(args: list[str], cwd: Path, timeout_s: float | None) -> tuple[int, bytes, bytes]:
    """Run NVCC in a process group of its own, listed for the reaper and for :func:`cancel_all`."""
    if _CANCELLED.is_set():
        raise InterruptedError("the warmup is stopping")
    # restore_signals=False: as under deep_gemm's popen(), a write beyond the file-size limit fails with EFBIG and a
    # message instead of killing NVCC with SIGXFSZ (Python ignores the signal)
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            restore_signals=False)
    with _RUNNING_LOCK:
        _RUNNING[proc.pid] = proc
    lifetime.register(proc.pid, group=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise
    finally:
        with _RUNNING_LOCK:
            _RUNNING.pop(proc.pid, None)
        lifetime.unregister(proc.pid, group=True)
        if proc.returncode is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, err


def build(recipe: Recipe, nvcc: str, dest: Path, *, timeout_s: float | None) -> Built:
    """Run NVCC on ``recipe`` in ``dest/build``; on success leave ``dest/out`` (the output), ``dest/stdout``,
    ``dest/stderr`` (what NVCC printed, replayed at install) and, last, ``dest/ok``. A write that fails for want
    of space raises its ``OSError`` (the warmup reports what ran out)."""
    t0 = time.perf_counter()
    work = dest / "build"
    shutil.rmtree(dest, ignore_errors=True)
    work.mkdir(parents=True)
    shutil.copyfile(recipe.source, work / Path(recipe.code).name)
    try:
        code, stdout, stderr = _run([nvcc, *rewrite(recipe, work)], work, timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Built(False, time.perf_counter() - t0, f"{type(exc).__name__}: {exc}")
    (dest / "stdout").write_bytes(stdout)
    (dest / "stderr").write_bytes(stderr)
    out = work / Path(recipe.output).name
    if code != 0 or not out.is_file():
        text = (stderr or stdout).decode(errors="replace").strip()
        return Built(False, time.perf_counter() - t0, f"NVCC exit code {code}: {text[-300:]}", code, text[-4000:])
    os.replace(out, dest / "out")
    shutil.rmtree(work, ignore_errors=True)
    (dest / "ok").touch()
    return Built(True, time.perf_counter() - t0)


@dataclass(frozen=True)
class Outcome:
    """How one digest's compile went: ``built`` (the lock ``fd`` is held until the install is done),
    ``elsewhere`` (another process holds the lock, or a marker says the entry exists) or ``failed``
    (no usable recipe or NVCC failed: the worker path compiles it through deep_gemm, which reports a
    real compile error in its own words; ``returncode`` and ``output`` of a failed NVCC run)."""

    identity: str
    kind: Literal["built", "elsewhere", "failed"]
    fd: int | None = None
    seconds: float = 0.0
    why: str = ""
    returncode: int = 0
    output: str = ""


def prepare_build(identity: str, recipe_dir: Path, cache: Path, built: Path, nvcc: str,
                  timeout_s: float | None, present: dict[int, list[Path]] | None = None) -> Outcome:
    """Take the kernel's lock without waiting and compile it from its recipe (runs on a parent thread);
    ``present``: :func:`~dgcompat.jit_warmup.cache.source_index` of the cache."""
    with storage.writing(cache, "the JIT cache folder"):
        fd = lock_kernel(cache, identity, blocking=False)
    if fd is None:
        return Outcome(identity, "elsewhere", why="another process holds its lock")
    if marked_present(cache, identity):
        os.close(fd)
        return Outcome(identity, "elsewhere", why="marked present")
    try:
        recipe = read_recipe(recipe_dir)
        if recipe is None:
            os.close(fd)
            return Outcome(identity, "failed", why="no complete recipe")
        if present and indexed(present, recipe.source):
            os.close(fd)
            return Outcome(identity, "elsewhere", why="its source is in the cache")
        with storage.writing(built.parent, "the warmup's scratch folder"):
            result = build(recipe, nvcc, built / identity, timeout_s=timeout_s)
    except BaseException:
        os.close(fd)
        raise
    if not result.ok:
        os.close(fd)
        return Outcome(identity, "failed", seconds=result.seconds, why=result.why, returncode=result.returncode,
                       output=result.output)
    return Outcome(identity, "built", fd, result.seconds)
