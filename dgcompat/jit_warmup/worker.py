"""A warmup worker process: identifies calls' kernels, probes calls against the shared cache, installs what the
calling process compiled, and (last) compiles under per-kernel locks.

Started by :mod:`dgcompat.jit_warmup.pool` with the ``spawn`` method; :func:`main` sets deep_gemm's
environment before anything imports deep_gemm (its compiler reads ``DG_JIT_NVCC_COMPILER`` and
``DG_JIT_CACHE_DIR`` once, when the first kernel is built).

``DG_JIT_CACHE_DIR`` is a symbolic link owned by this worker. While identifying it points at an
empty folder, so every call reaches the compiler and the stand-in (:mod:`dgcompat.jit_warmup.standin`)
records its first kernel; then the worker turns it to the shared cache once (deep_gemm resolves the
path on every lookup). A worker never identifies after that turn: deep_gemm's in-process table of
loaded kernels is keyed by path, and a kernel loaded through the link would otherwise answer an
identification. After the turn a call in ``identify`` mode is a *probe*: it finishes where every kernel
it needs is in the shared cache, and otherwise fails on the first missing one, which the stand-in
records (with its recipe) at the cost of one failed compiler start.

Each identify or probe task carries several calls of one (shape, scale form); the worker makes them
one after the other with the same scratch buffers (:class:`~dgcompat.jit_warmup.calls.Runner`) and
reads the stand-in's log once per call.
"""

from __future__ import annotations

import itertools
import os
import shutil
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from queue import Empty
from typing import Any

from ..errors import BadArgumentError
from ..errors import KernelError
from ..errors import UnsupportedFeatureError
from ..knobs import compile_mode
from . import lifetime
from . import messages
from .cache import lock_kernel
from .cache import mark_present
from .calls import Runner
from .spec import MPolicy
from .spec import Shape
from .standin import Record
from .standin import keep_recipe
from .standin import read_log

__all__ = ["WorkerConfig", "Worker", "main", "prepare"]


@dataclass(frozen=True)
class WorkerConfig:
    """Everything a worker needs (pickled to the spawned process)."""

    wid: int
    device: int
    method: str  # "stand-in" | "calls"
    shapes: tuple[Shape, ...]
    cache: str  # the shared cache folder
    link: str  # this worker's DG_JIT_CACHE_DIR (a link) for the stand-in method
    empty: str  # the empty folder the link points at while identifying
    log: str
    stand_in: str
    nvcc: str
    recipes: str = ""  # this worker's recipe folder (stand-in method)
    built: str = ""  # where the parent puts the kernels it compiled (stand-in method)
    parent: int = 0  # the calling process (the worker dies with it)


class Busy(Exception):
    """Another process holds the kernel's lock (retry later, blocking)."""


class CompileFailed(RuntimeError):
    """NVCC ran for the kernel and the call still failed."""


class NotHonored(Exception):
    """A call finished in an empty cache without asking the stand-in: this release does not use it."""


class Worker:
    """The calls of one worker process, made through ``runner`` (:class:`~dgcompat.jit_warmup.calls.Runner`)."""

    def __init__(self, cfg: WorkerConfig, put: Callable[[messages.Answer], None], runner: Runner) -> None:
        self.cfg = cfg
        self.put = put
        self.log = Path(cfg.log)
        self.cache = Path(cfg.cache)
        self.recipes = Path(cfg.recipes) if cfg.recipes else None
        self.runner = runner
        self._kept: set[str] = set()

    # -- one call ---------------------------------------------------------------------------------
    def _attempt(self, shape: Shape, m: int, form: str, mode: str) -> tuple[BaseException | None, list[Record]]:
        os.environ["DGCOMPAT_WARMUP_MODE"] = mode
        error: BaseException | None = None
        try:
            self.runner.run(shape, m, form)
        except Exception as exc:  # noqa: BLE001 - the stand-in's refusal arrives as deep_gemm's compile error
            error = exc
        records = read_log(self.log)
        lost = [r for r in records if r.action in ("identified", "refused") and not r.identity]
        if lost and not os.environ.get("DGCOMPAT_WARMUP_KEEP"):
            # The JIT deleted its build folder, source included, before the refusal got here (upstream 2.8's
            # JIT does): from now on the stand-in keeps a copy of each source it refuses, and the call is
            # made again (a refused compile changed nothing but the kernels before it, which are in place).
            kept = self.log.parent / "kept"
            kept.mkdir(parents=True, exist_ok=True)
            os.environ["DGCOMPAT_WARMUP_KEEP"] = str(kept)
            return self._attempt(shape, m, form, mode)
        if lost:
            raise RuntimeError(f"the compiler's source {lost[0].source} was gone before dgcompat could read it, "
                               "and no copy was kept")
        for r in records:
            if r.action in ("identified", "refused"):
                self._keep(r)
                self._drop_build_dir(r.source)  # a failed build's temporary folder stays behind
                if r.kept:
                    Path(r.kept).unlink(missing_ok=True)
        return error, records

    def _keep(self, record: Record) -> None:
        if self.recipes is not None and record.identity not in self._kept and keep_recipe(record, self.recipes):
            self._kept.add(record.identity)

    def _drop_build_dir(self, source: str) -> None:
        # Anything under the identification folder is ours; in the shared cache only a temporary build
        # folder is (older JITs write the source into the entry itself, which another process may be filling).
        if not source:
            return
        folder = Path(source).parent
        if _inside(folder, Path(self.cfg.empty)) or _inside(folder, self.cache / "tmp"):
            shutil.rmtree(folder, ignore_errors=True)

    def identify(self, shape: Shape, m: int, form: str) -> str:
        """The digest of the first kernel the call needs (the link points at an empty cache)."""
        error, records = self._attempt(shape, m, form, "identify")
        if records:
            return records[0].identity
        if error is None:
            raise NotHonored
        raise error

    def probe(self, shape: Shape, m: int, form: str) -> str | None:
        """None if the call finds every kernel it needs in the shared cache, else the first one missing."""
        error, records = self._attempt(shape, m, form, "identify")
        if error is None:
            return None
        if records:
            return records[0].identity
        raise error

    def install(self, shape: Shape, m: int, form: str, identity: str) -> tuple[messages.Status, float, str | None]:
        """Make the call put the kernel ``identity``, which the parent compiled and holds the lock for, into
        the shared cache. Returns its status (``compiled``: installed or compiled here, ``cached``: the cache
        had it), the seconds and the next kernel the call misses (None: the call is complete)."""
        t0 = time.perf_counter()
        error, records = self._attempt(shape, m, form, f"install:{identity}")
        mine = [r.action for r in records if r.identity == identity]
        status: messages.Status = "compiled" if "installed" in mine or "compiled" in mine else "cached"
        seconds = time.perf_counter() - t0
        if error is None:
            return status, seconds, None
        refused = [r for r in records if r.action == "refused"]
        if refused:
            return status, seconds, refused[0].identity
        if status == "compiled":
            raise CompileFailed(f"installing kernel {identity} failed: {error}") from error
        raise error

    def warm(self, shape: Shape, m: int, form: str, expect: str | None, *,
             blocking: bool) -> list[tuple[str, messages.Status, float]]:
        """Make the call succeed against the shared cache, compiling each missing kernel under its lock.

        Returns ``(digest, "compiled" | "cached", seconds)`` for the kernels met; ``expect`` (the call's
        identified first kernel) is reported as cached when the cache already had it.
        """
        met: list[tuple[str, messages.Status, float]] = []
        error, records = self._attempt(shape, m, form, "identify")
        if error is None:
            return [(expect, "cached", 0.0)] if expect else []
        if not records:
            raise error
        want = records[0].identity
        if expect and want != expect:
            met.append((expect, "cached", 0.0))
        for _ in range(32):  # a call needs a handful of kernels at most
            fd = lock_kernel(self.cache, want, blocking=blocking)
            if fd is None:
                raise Busy(want)
            t0 = time.perf_counter()
            try:
                error, records = self._attempt(shape, m, form, f"compile:{want}")
            finally:
                os.close(fd)
            compiled = any(r.action == "compiled" and r.identity == want for r in records)
            met.append((want, "compiled" if compiled else "cached", time.perf_counter() - t0))
            refused = [r for r in records if r.action == "refused"]
            if error is None or refused:  # the call got past this kernel: its entry is in place
                mark_present(self.cache, want)
            if error is None:
                return met
            if not refused:
                if compiled:
                    raise CompileFailed(f"compiling kernel {want} failed: {error}") from error
                raise error
            want = refused[0].identity
        raise RuntimeError("the call kept asking for new kernels")

    # -- the two phases ---------------------------------------------------------------------------
    def identify_phase(self, tasks: Any) -> bool:
        """Identify tasks until the turn; False if this worker stopped on an error it reported."""
        while True:
            task: messages.IdentifyTask = tasks.get()
            if isinstance(task, messages.Turn):
                self._on_turn()
                return True
            if not isinstance(task, (messages.Identify, messages.Bisect)):
                raise TypeError(f"not an identify task: {task!r}")
            try:
                match task:
                    case messages.Identify():
                        self._on_identify(task)
                    case messages.Bisect():
                        self._on_bisect(task)
            except NotHonored:
                self.put(messages.Unhonored(self.cfg.wid))
                return False
            except Exception as exc:  # noqa: BLE001 - any call failure goes back to the parent as CallError
                self.put(messages.CallError(self.cfg.wid, task.shape, task.form, _failed_m(exc), _kind(exc), str(exc)))
                return False

    def _on_turn(self) -> None:
        _point(Path(self.cfg.link), Path(self.cfg.cache))
        shutil.rmtree(Path(self.cfg.empty) / "tmp", ignore_errors=True)
        self.put(messages.IdentifiedAll(self.cfg.wid))

    def _on_identify(self, task: messages.Identify) -> None:
        shape = self.cfg.shapes[task.shape]
        for m in task.ms:  # each call is reported as it is identified: a new kernel's compile starts at once
            digest = _at(m, lambda: self.identify(shape, m, task.form))  # noqa: B023 - called by _at, now
            self.put(messages.Identified(self.cfg.wid, task.shape, task.form, ((m, digest),)))

    def _on_bisect(self, task: messages.Bisect) -> None:
        """Identify a grid of the candidates, then bisect between neighbours needing different kernels."""
        shape, candidates = self.cfg.shapes[task.shape], task.candidates
        grid = set(MPolicy.changes(candidates[-1]).grid())
        pos = sorted({i for i, m in enumerate(candidates) if m in grid} | {0, len(candidates) - 1})
        ids: dict[int, str] = {}

        def ident(i: int) -> str:
            if i not in ids:
                ids[i] = _at(candidates[i], lambda: self.identify(shape, candidates[i], task.form))
            return ids[i]

        stack = list(itertools.pairwise(pos))
        for i in pos:
            ident(i)
        while stack:
            a, b = stack.pop()
            if b - a <= 1 or ident(a) == ident(b):
                continue
            mid = (a + b) // 2
            ident(mid)
            stack += [(a, mid), (mid, b)]
        found = tuple((candidates[i], ident(i)) for i in sorted(ids))
        self.put(messages.Identified(self.cfg.wid, task.shape, task.form, found))

    def work_phase(self, tasks: Any) -> None:
        """Work tasks until :class:`Stop`; a compile whose kernel another process holds is deferred, then made
        blocking once the queue is empty."""
        deferred: list[messages.WorkTask] = []
        while True:
            try:
                task: messages.WorkTask = tasks.get(block=not deferred, timeout=None if not deferred else 0.05)
            except Empty:
                self._do(deferred.pop(0), blocking=True)
                continue
            if isinstance(task, messages.Stop):
                for t in deferred:
                    self._do(t, blocking=True)
                return
            if not self._do(task, blocking=False):
                deferred.append(task)

    def _do(self, task: messages.WorkTask, *, blocking: bool) -> bool:
        """Do ``task`` and send its answer (or the call's error); False if its kernel is busy (retry later)."""
        if not isinstance(task, (messages.Probe, messages.Install, messages.Compile, messages.Plain)):
            raise TypeError(f"not a work task: {task!r}")
        try:
            match task:
                case messages.Probe():
                    answer: messages.Answer = self._on_probe(task)
                case messages.Install():
                    answer = self._on_install(task)
                case messages.Compile():
                    answer = self._on_compile(task, blocking=blocking)
                case messages.Plain():
                    answer = self._on_plain(task)
        except Busy:
            return False
        except Exception as exc:  # noqa: BLE001 - any task failure goes back to the parent
            m = task.m if isinstance(task, (messages.Install, messages.Compile)) else None
            self.put(messages.CallError(self.cfg.wid, task.shape, task.form, _failed_m(exc, m), _kind(exc), str(exc)))
            return True
        self.put(answer)
        return True

    def _on_probe(self, task: messages.Probe) -> messages.Probed:
        shape = self.cfg.shapes[task.shape]
        ok: list[int] = []
        missing: list[tuple[int, str]] = []
        for one in task.ms:
            found = _at(one, lambda: self.probe(shape, one, task.form))  # noqa: B023 - called by _at, now
            if found is None:
                ok.append(one)
            else:
                missing.append((one, found))
        return messages.Probed(self.cfg.wid, task.shape, task.form, tuple(ok), tuple(missing))

    def _on_install(self, task: messages.Install) -> messages.Installed:
        status, seconds, nxt = self.install(self.cfg.shapes[task.shape], task.m, task.form, task.digest)
        return messages.Installed(self.cfg.wid, task.shape, task.form, task.m, task.digest, status, seconds, nxt)

    def _on_compile(self, task: messages.Compile, *, blocking: bool) -> messages.Compiled:
        met = self.warm(self.cfg.shapes[task.shape], task.m, task.form, task.expect, blocking=blocking)
        return messages.Compiled(self.cfg.wid, task.shape, task.form, task.m, task.expect, tuple(met))

    def _on_plain(self, task: messages.Plain) -> messages.PlainDone:
        shape = self.cfg.shapes[task.shape]
        for one in task.ms:
            _at(one, lambda: self.runner.run(shape, one, task.form))  # noqa: B023 - called by _at, now
        return messages.PlainDone(self.cfg.wid, task.shape, task.form)


class _AtM(Exception):
    def __init__(self, m: int, exc: BaseException) -> None:
        super().__init__(str(exc))
        self.m = m
        self.inner = exc


def _at(m: int, fn: Callable[[], Any]) -> Any:
    """``fn()``, its failure tagged with the M it was for."""
    try:
        return fn()
    except (NotHonored, Busy):
        raise
    except Exception as exc:
        raise _AtM(m, exc) from exc


def _failed_m(exc: BaseException, default: Any = None) -> Any:
    return exc.m if isinstance(exc, _AtM) else default


def _kind(exc: BaseException) -> str:
    """"rejected" when dgcompat or deep_gemm refused the call's arguments (an unsupported shape),
    else the exception's type."""
    inner = exc.inner if isinstance(exc, _AtM) else exc
    if isinstance(inner, (BadArgumentError, UnsupportedFeatureError, KernelError)):
        return "rejected"
    return type(inner).__name__


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
    except (ValueError, OSError):
        return False
    return path.resolve() != root.resolve()


def _point(link: Path, target: Path) -> None:
    """Atomically make ``link`` a symbolic link to ``target``."""
    tmp = link.with_name(link.name + ".new")
    if tmp.is_symlink() or tmp.exists():
        tmp.unlink()
    tmp.symlink_to(target, target_is_directory=True)
    os.replace(tmp, link)


def prepare(cfg: WorkerConfig) -> None:
    """Lay out the worker's folders and link (in the parent, before the worker starts)."""
    Path(cfg.empty).mkdir(parents=True, exist_ok=True)
    for folder in (cfg.recipes, cfg.built):
        if folder:
            Path(folder).mkdir(parents=True, exist_ok=True)
    Path(cfg.log).write_text("")
    _point(Path(cfg.link), Path(cfg.empty) if cfg.method == "stand-in" else Path(cfg.cache))


def main(cfg: WorkerConfig, identify_q: Any, work_q: Any, result_q: Any) -> None:
    """Worker entry point (spawned)."""
    if cfg.parent:
        lifetime.die_with_parent(cfg.parent)
    # deep_gemm prints every failed compile to stdout, which the stand-in's refusals would flood.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    os.environ["DG_JIT_CACHE_DIR"] = cfg.link
    os.environ["DGCOMPAT_WARMUP_MODE"] = "pass"
    # torch's import scans every installed package for out-of-tree device backends; a worker uses CUDA only
    # (about 0.2 s of its start, which every compile waits for).
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    if cfg.method == "stand-in":
        os.environ["DG_JIT_NVCC_COMPILER"] = cfg.stand_in
        os.environ["DGCOMPAT_WARMUP_NVCC"] = cfg.nvcc
        os.environ["DGCOMPAT_WARMUP_LOG"] = cfg.log
        os.environ["DGCOMPAT_WARMUP_BUILT"] = cfg.built
    try:
        runner = Runner(cfg.device)
        worker = Worker(cfg, result_q.put, runner)
        # Where the release has a compile mode (the bundled copies), calls build kernels without launching them.
        with compile_mode(1):
            result_q.put(messages.Ready(cfg.wid, runner.family))
            if cfg.method == "stand-in" and not worker.identify_phase(identify_q):
                return
            worker.work_phase(work_q)
    except BaseException as exc:  # noqa: BLE001 - report, then die: the parent decides what the failure means
        result_q.put(messages.Fatal(cfg.wid, f"{type(exc).__name__}: {exc}", traceback.format_exc()))
        raise SystemExit(1) from None
    # Every answer is sent and every entry renamed into place: leave without tearing down torch and the
    # CUDA context at interpreter exit (about a second the parent would otherwise wait for).
    result_q.close()
    result_q.join_thread()
    os._exit(0)
