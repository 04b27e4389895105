"""The parent side of a warmup: starts the workers, hands out work, dedupes kernels, compiles, collects counts.

Protocol (queues of plain tuples; see :mod:`dgcompat.jit_warmup.worker` for the worker side):

1. Identification (stand-in method): chunks ``("calls", shape_index, [m, ...])`` (or one
   ``("bisect", shape_index, candidates)`` per shape for :meth:`MPolicy.changes`) on the identify
   queue, then one ``"turn"`` per worker. Workers answer ``("identified", wid, shape_index,
   [(m, digest), ...])``. The first call seen for a digest starts its compile at once on a parent
   thread (:mod:`dgcompat.jit_warmup.build`), from the recipe the stand-in kept in that worker's folder.
2. Install: each kernel built that way goes out as ``("install", shape_index, m, digest)``; the parent
   holds the kernel's lock until the answer. This is phase 1; the parent holds locks only then.
3. Phase 2, once every call is identified and every phase-1 kernel installed (the parent holds no
   lock, so workers may wait on other processes' locks without a deadlock): ``("compile",
   shape_index, m, digest)`` for each kernel another process held or a compile outside deep_gemm
   could not build, and for each installed call that needs further kernels; with ``verify`` on,
   ``("verify", shape_index, m, None)`` for every other call; with the calls method,
   ``("plain", shape_index, [m, ...], None)`` per shape. Answers: ``("done", ..., met, more)`` with the
   kernels met. ``None`` stops a worker.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import random
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from queue import Empty
from typing import Any, Iterator, Literal, TextIO

from ..detection import release
from ..errors import UnsupportedFeatureError
from .build import Outcome, prepare_build
from .cache import count_entries, mark_present, source_index
from .report import KernelEntry, WarmupError
from .spec import Call, MPolicy, Shape, ms_for
from .standin import STAND_IN
from .worker import WorkerConfig, main, prepare

__all__ = ["Pool", "PoolResult", "write_progress"]


@dataclass
class PoolResult:
    """What the worker pool hands back to :func:`~dgcompat.jit_warmup.entry.warmup`."""

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


def write_progress(out: TextIO | None, text: str, *, final: bool = False) -> None:
    """One progress line, rewritten in place (only where a stream was asked for)."""
    if out is None:
        return
    out.write("\r[dgcompat warmup] " + text + ("\n" if final else ""))
    out.flush()


class _Fallback(Exception):
    """Switch to real calls (the stand-in is not honoured by this release)."""


def _spread(ms: list[int]) -> list[int]:
    """``ms`` sorted, then reordered coarse to fine: the bit-reversed order of their positions (first, middle,
    quarters, eighths, ...), so that any prefix samples the whole range."""
    ordered = sorted(ms)
    bits = max(1, (len(ordered) - 1).bit_length())
    keys = sorted(range(len(ordered)), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))
    return [ordered[i] for i in keys]


class Pool:
    """One warmup's workers. ``workers``: kernels compiled at once (NVCC processes); ``processes``: worker
    processes of the stand-in method (the calls method compiles inside its workers, so it starts
    ``workers`` of them). Times are measured from ``t0`` (``time.perf_counter()`` at the warmup's start)."""

    def __init__(self, calls: list[Call], policy: MPolicy, *, workers: int, processes: int, device: int,
                 cache: Path, scratch: Path, nvcc: str, verify: bool, out: TextIO | None,
                 timeout_s: float | None, t0: float | None = None) -> None:
        self.calls = calls
        self.policy = policy
        self.workers = workers
        self.processes = processes
        self.device = device
        self.cache = cache
        self.scratch = scratch
        self.nvcc = nvcc
        self.verify = verify
        self.out = out
        self.t0 = time.perf_counter() if t0 is None else t0
        self.deadline = None if timeout_s is None else time.monotonic() + timeout_s
        self.shapes: tuple[Shape, ...] = tuple(dict.fromkeys(c.shape for c in calls))
        self.ctx = mp.get_context("spawn")  # workers touch CUDA: never fork a process that might have it

    # -- public -------------------------------------------------------------------------------------
    def run(self, method: Literal["stand-in", "calls"]) -> PoolResult:
        if method == "stand-in":
            try:
                return self._run("stand-in")
            except _Fallback as why:
                result = self._calls()
                result.notes.insert(0, f"real calls instead of the stand-in compiler: {why}")
                return result
        return self._calls()

    def _calls(self) -> PoolResult:
        result = self._run("calls")
        if self.policy.kind == "changes":
            result.notes.append("real calls cover the sampled grid of MPolicy.changes only (no bisection)")
        return result

    def remaining(self) -> float | None:
        return None if self.deadline is None else max(1.0, self.deadline - time.monotonic())

    # -- one pass -----------------------------------------------------------------------------------
    def _configs(self, method: str, n: int) -> list[WorkerConfig]:
        stand_in = self.scratch / "nvcc-stand-in.sh"
        stand_in.write_text(STAND_IN)
        stand_in.chmod(0o755)
        configs = []
        for wid in range(n):
            base = self.scratch / f"{method}-w{wid}"
            base.mkdir(parents=True, exist_ok=True)
            cfg = WorkerConfig(wid=wid, device=self.device, method=method, shapes=self.shapes,
                               cache=str(self.cache), link=str(base / "cache-link"), empty=str(base / "empty"),
                               log=str(base / "stand-in.log"), stand_in=str(stand_in), nvcc=self.nvcc,
                               recipes=str(base / "recipes") if method == "stand-in" else "",
                               built=str(self.scratch / "built") if method == "stand-in" else "")
            prepare(cfg)
            configs.append(cfg)
        return configs

    def _run(self, method: Literal["stand-in", "calls"]) -> PoolResult:
        n = self.processes if method == "stand-in" else self.workers
        configs = self._configs(method, n)
        identify_q, work_q, result_q = self.ctx.Queue(), self.ctx.Queue(), self.ctx.Queue()
        before = count_entries(self.cache)
        procs = [self.ctx.Process(target=main, args=(cfg, identify_q, work_q, result_q), daemon=True,
                                  name=f"dgcompat-warmup-{cfg.wid}") for cfg in configs]
        builder = ThreadPoolExecutor(self.workers, thread_name_prefix="dgcompat-nvcc") if method == "stand-in" else None
        state = _State(self, method, n, work_q, builder)
        state.recipes = [Path(c.recipes) for c in configs]
        state.present = source_index(self.cache) if method == "stand-in" else {}
        for p in procs:
            p.start()
        try:
            if method == "stand-in":
                for task in self._identify_tasks(n):
                    identify_q.put(task)
                for _ in procs:
                    identify_q.put("turn")
            else:
                for idx, shape in enumerate(self.shapes):
                    ms = [c.m for c in self.calls if c.shape == shape]
                    work_q.put(("plain", idx, ms, None))
                    state.outstanding += 1
                state.identified_all = n
                state.phase2 = True
            self._loop(state, procs, result_q)
            state.compile_s = state.compile_s or state.now()  # the calls method compiles until its last task
            for _ in procs:
                work_q.put(None)
            for p in procs:
                p.join(timeout=60)
        finally:
            if builder is not None:  # running compiles write into the scratch folder: let them end first
                builder.shutdown(wait=True, cancel_futures=True)
            state.release_all()
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=10)
            for q in (identify_q, work_q, result_q):
                q.close()
                q.cancel_join_thread()
        write_progress(self.out, state.line(), final=True)
        result = PoolResult(method, state.all_calls(), identify_s=state.identify_s, start_s=state.start_s,
                            first_up_s=state.first_up_s, compile_s=state.compile_s, processes=n)
        result.entries = sorted(state.entries.values(), key=lambda e: e.identity)
        result.new_entries = count_entries(self.cache) - before
        result.notes.extend(state.notes)
        return result

    def _identify_tasks(self, n: int) -> list[tuple[str, int, list[int]]]:
        tasks: list[tuple[str, int, list[int]]] = []
        if self.policy.kind == "changes":
            for idx, shape in enumerate(self.shapes):
                tasks.append(("bisect", idx, ms_for(shape, range(1, self.policy.max_m + 1))))
            return tasks
        # Small chunks: a digest reaches the parent, and its compile starts, soon after it is found. Each shape's
        # M values go coarse to fine (:func:`_spread`) and the shapes take turns, so the first chunks the workers
        # take already meet most distinct kernels (the kernel choice changes with M in steps): every compile
        # starts early, instead of those of the last shapes after the other shapes' calls.
        size = max(2, min(16, len(self.calls) // (n * 4) or 1))
        per_shape: list[list[tuple[str, int, list[int]]]] = []
        for idx, shape in enumerate(self.shapes):
            ms = _spread([c.m for c in self.calls if c.shape == shape])
            per_shape.append([("calls", idx, ms[i:i + size]) for i in range(0, len(ms), size)])
        # Each turn starts at the same random shape: ranks warming one cache together then claim different
        # kernels first, and still every rank's first chunks are the coarse ones.
        k = random.randrange(len(per_shape)) if per_shape else 0
        per_shape = per_shape[k:] + per_shape[:k]
        for turn in range(max((len(t) for t in per_shape), default=0)):
            tasks += [t[turn] for t in per_shape if turn < len(t)]
        return tasks

    def _loop(self, st: _State, procs: list[Any], result_q: Any) -> None:
        last_draw = 0.0
        while not st.finished():
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise WarmupError(f"warmup(): not finished within the time limit ({st.line()})")
            st.drain_builds()
            try:
                msg = result_q.get(timeout=0.05)
            except Empty:
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    self._dead(st, dead)
                st.maybe_phase2()
                continue
            st.handle(msg)
            st.maybe_phase2()
            now = time.monotonic()
            if now - last_draw > 0.1:
                write_progress(self.out, st.line())
                last_draw = now

    def _dead(self, st: _State, dead: list[Any]) -> None:
        codes = ", ".join(f"worker {p.name} exit code {p.exitcode}" for p in dead)
        if st.method == "stand-in" and st.identified_all < st.n and not st.done_tasks:
            raise _Fallback(f"a worker died while identifying kernels ({codes})")
        raise WarmupError(f"warmup(): {codes}; the kernels compiled so far are in {self.cache}")


class _State:
    """Bookkeeping of one pass (parent thread only; compile threads report through ``events``)."""

    def __init__(self, pool: Pool, method: str, n: int, work_q: Any, builder: ThreadPoolExecutor | None) -> None:
        self.pool = pool
        self.method = method
        self.n = n
        self.work_q = work_q
        self.builder = builder
        self.events: queue.Queue[tuple[str, Future[Outcome]]] = queue.Queue()
        self.t0 = pool.t0
        self.identify_s = 0.0
        self.start_s = 0.0
        self.first_up_s = 0.0
        self.compile_s = 0.0
        self.ready = 0
        self.identified_all = 0
        self.outstanding = 0
        self.done_tasks = 0
        self.building = 0
        self.first: dict[str, tuple[int, int]] = {}  # digest -> (shape index, m) that stands for it
        self.first_wid: dict[str, int] = {}
        self.ids: dict[tuple[int, int], str] = {}
        self.entries: dict[str, KernelEntry] = {}
        self.held: dict[str, int] = {}  # digest -> lock fd, from its compile until its install is done
        self.later: list[tuple[str, int, int, str | None]] = []  # phase-2 tasks
        self.phase2 = False
        self.notes: list[str] = []
        self.recipes: list[Path] = []
        self.present: dict[int, list[Path]] = {}  # sources of the entries the cache held at the start
        self.build_s: dict[str, float] = {}  # digest -> seconds its NVCC run took here
        self._failed_builds = 0

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def all_calls(self) -> list[Call]:
        if self.method == "stand-in":
            return [Call(self.pool.shapes[i], m) for (i, m) in sorted(self.ids)]
        return list(self.pool.calls)

    def finished(self) -> bool:
        return self.phase2 and self.outstanding == 0

    def line(self) -> str:
        compiled = sum(e.status == "compiled" for e in self.entries.values())
        known = max(len(self.first), len(self.entries), 1)
        filled = min(20, 20 * len(self.entries) // known)
        bar = "#" * filled + "." * (20 - filled)
        return (f"[{bar}] kernels {len(self.entries)}/{len(self.first)} ({compiled} compiled, {self.building} "
                f"compiling) | {len(self.ids)} calls identified | {self.outstanding} tasks left | {self.now():.1f} s")

    # -- phase 1: compiles on parent threads, installs by the workers --------------------------------
    def _submit(self, digest: str, wid: int) -> None:
        assert self.builder is not None
        p = self.pool
        recipe = self.recipes[wid] / digest  # the worker that reported the digest kept its recipe
        fut = self.builder.submit(prepare_build, digest, recipe, p.cache, p.scratch / "built", p.nvcc,
                                  p.remaining(), self.present)
        fut.add_done_callback(lambda f: self.events.put((digest, f)))
        self.building += 1

    def _ended_builds(self) -> Iterator[tuple[str, Future[Outcome]]]:
        """The compiles whose threads ended since the last look (what their callbacks reported), oldest first."""
        while True:
            try:
                yield self.events.get_nowait()
            except Empty:
                return

    def drain_builds(self) -> None:
        for digest, fut in self._ended_builds():
            self.building -= 1
            try:
                out = fut.result()
            except Exception as exc:  # an unexpected failure of the thread: the worker path compiles it
                out = Outcome(digest, "failed", why=f"{type(exc).__name__}: {exc}")
            idx, m = self.first[out.identity]
            if out.kind == "built":
                assert out.fd is not None
                self.held[out.identity] = out.fd
                self.build_s[out.identity] = out.seconds
                self.work_q.put(("install", idx, m, out.identity))
                self.outstanding += 1
                continue
            if out.kind == "failed":
                self._failed_builds += 1
                if self._failed_builds <= 3:
                    self.notes.append(f"kernel {out.identity} was compiled through deep_gemm instead: {out.why}")
            self.later.append(("compile", idx, m, out.identity))

    def _release(self, digest: str, present: bool) -> None:
        fd = self.held.pop(digest, None)
        if fd is None:
            return
        try:
            if present:
                mark_present(self.pool.cache, digest)
        finally:
            os.close(fd)

    def release_all(self) -> None:
        """Close every lock this pass still holds, also those of compiles it never got to hear about."""
        for _digest, fut in self._ended_builds():
            out = None if fut.cancelled() or fut.exception() is not None else fut.result()
            if out is not None and out.fd is not None:
                os.close(out.fd)
        for digest in list(self.held):
            self._release(digest, False)

    # -- phase 2 --------------------------------------------------------------------------------------
    def maybe_phase2(self) -> None:
        if self.phase2 or self.identified_all < self.n or self.building or self.held:
            return
        self.phase2 = True
        self.compile_s = self.now()
        tasks = list(self.later)
        if self.pool.verify:
            reps = set(self.first.values())
            tasks += [("verify", idx, m, None) for (idx, m) in sorted(self.ids) if (idx, m) not in reps]
        for task in tasks:
            self.work_q.put(task)
        self.outstanding += len(tasks)

    # -- worker messages ------------------------------------------------------------------------------
    def handle(self, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "ready":
            self.ready += 1
            if self.ready == 1:
                self.first_up_s = self.now()
            if self.ready == self.n:
                self.start_s = self.now()
            return
        if kind == "identified":
            _, wid, idx, found = msg
            for m, digest in found:
                self.ids[(idx, m)] = digest
                if digest not in self.first:
                    self.first[digest] = (idx, m)
                    self._submit(digest, wid)
            return
        if kind == "identified-all":
            self.identified_all += 1
            if self.identified_all == self.n:
                self.identify_s = self.now()
            return
        if kind == "done":
            _, _wid, task, idx, m, expect, met, more = msg
            self.outstanding -= 1
            self.done_tasks += 1
            label = Call(self.pool.shapes[idx], m).label if task != "plain" else self.pool.shapes[idx].label
            for digest, status, seconds in met:
                if task == "install" and status == "compiled":
                    seconds += self.build_s.get(digest, 0.0)
                old = self.entries.get(digest)
                if old is None or (status == "compiled" and old.status != "compiled"):
                    self.entries[digest] = KernelEntry(digest, status, label, round(seconds, 3))
            if task == "install":
                self._release(expect, any(d == expect for d, _s, _t in met))
                if more:
                    self.later.append(("compile", idx, m, expect))
            return
        if kind == "unhonored":
            raise _Fallback("a call finished in an empty cache without running the compiler program "
                            "(this release does not build kernels through DG_JIT_NVCC_COMPILER)")
        if kind == "call-error":
            _, _wid, idx, m, why, text = msg
            shape = self.pool.shapes[idx]
            where = f"{shape.label}" + (f" at M={m}" if isinstance(m, int) else "")
            if why == "rejected":
                raise UnsupportedFeatureError("warmup", where, release().label, hint=text)
            raise WarmupError(f"warmup(): {where}: {why}: {text}")
        if kind == "fatal":
            _, wid, text, tb = msg
            if self.method == "stand-in" and self.identified_all < self.n and not self.done_tasks:
                raise _Fallback(f"worker {wid} failed while identifying: {text}")
            raise WarmupError(f"warmup(): worker {wid} failed: {text}\n{tb}")
