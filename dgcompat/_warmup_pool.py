"""The parent side of a warmup: starts the workers, hands out work, dedupes kernels, collects counts.

Protocol (queues of plain tuples; see :mod:`dgcompat._warmup_worker` for the worker side):

1. Identification (stand-in method): chunks ``("calls", shape_index, [m, ...])`` (or one
   ``("bisect", shape_index, candidates)`` per shape for :meth:`MPolicy.changes`) on the identify
   queue, then one ``"turn"`` per worker. Workers answer ``("identified", wid, shape_index,
   [(m, digest), ...])``. The first call seen for a digest is sent at once as a compile task.
2. Work: ``("compile", shape_index, m, digest)`` per distinct first kernel; once every call is
   identified and ``verify`` is on, ``("verify", shape_index, m, None)`` for every other call; with
   the calls method, ``("plain", shape_index, [m, ...], None)`` per shape. Answers: ``("done", ...)``
   with the kernels met. ``None`` stops a worker.
"""

from __future__ import annotations

import multiprocessing as mp
import random
import time
from pathlib import Path
from queue import Empty
from typing import Any, Literal, TextIO

from ._warmup_worker import STAND_IN, WorkerConfig, main, prepare
from .errors import UnsupportedFeatureError
from .jit_warmup import Call, KernelEntry, MPolicy, PoolResult, Shape, WarmupError, _ms_for, write_progress

__all__ = ["Pool"]


class _Fallback(Exception):
    """Switch to real calls (the stand-in is not honoured by this release)."""


def count_entries(cache: Path) -> int:
    """Kernel folders in a deep_gemm cache (``cache/kernel.*``)."""
    try:
        return sum(1 for p in (cache / "cache").iterdir() if p.name.startswith("kernel."))
    except FileNotFoundError:
        return 0


class Pool:
    def __init__(self, calls: list[Call], policy: MPolicy, *, workers: int, device: int, cache: Path,
                 scratch: Path, nvcc: str, verify: bool, out: TextIO | None, timeout_s: float | None) -> None:
        self.calls = calls
        self.policy = policy
        self.workers = workers
        self.device = device
        self.cache = cache
        self.scratch = scratch
        self.nvcc = nvcc
        self.verify = verify
        self.out = out
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

    # -- one pass -----------------------------------------------------------------------------------
    def _configs(self, method: str) -> list[WorkerConfig]:
        stand_in = self.scratch / "nvcc-stand-in.sh"
        stand_in.write_text(STAND_IN)
        stand_in.chmod(0o755)
        configs = []
        for wid in range(self.workers):
            base = self.scratch / f"{method}-w{wid}"
            base.mkdir(parents=True, exist_ok=True)
            cfg = WorkerConfig(wid=wid, device=self.device, method=method, shapes=self.shapes,
                               cache=str(self.cache), link=str(base / "cache-link"), empty=str(base / "empty"),
                               log=str(base / "stand-in.log"), stand_in=str(stand_in), nvcc=self.nvcc)
            prepare(cfg)
            configs.append(cfg)
        return configs

    def _run(self, method: Literal["stand-in", "calls"]) -> PoolResult:
        configs = self._configs(method)
        identify_q, work_q, result_q = self.ctx.Queue(), self.ctx.Queue(), self.ctx.Queue()
        before = count_entries(self.cache)
        procs = [self.ctx.Process(target=main, args=(cfg, identify_q, work_q, result_q), daemon=True,
                                  name=f"dgcompat-warmup-{cfg.wid}") for cfg in configs]
        for p in procs:
            p.start()
        state = _State(self, method)
        try:
            if method == "stand-in":
                for task in self._identify_tasks():
                    identify_q.put(task)
                for _ in procs:
                    identify_q.put("turn")
            else:
                for idx, shape in enumerate(self.shapes):
                    ms = [c.m for c in self.calls if c.shape == shape]
                    work_q.put(("plain", idx, ms, None))
                    state.outstanding += 1
                state.identified_all = len(procs)
                state.verify_queued = True
            self._loop(state, procs, work_q, result_q)
            for _ in procs:
                work_q.put(None)
            for p in procs:
                p.join(timeout=60)
        finally:
            for p in procs:
                if p.is_alive():
                    p.terminate()
                    p.join(timeout=10)
            for q in (identify_q, work_q, result_q):
                q.close()
                q.cancel_join_thread()
        write_progress(self.out, state.line(), final=True)
        result = PoolResult(method, state.all_calls(), identify_s=state.identify_s, start_s=state.start_s)
        result.entries = sorted(state.entries.values(), key=lambda e: e.identity)
        result.new_entries = count_entries(self.cache) - before
        return result

    def _identify_tasks(self) -> list[tuple[str, int, list[int]]]:
        tasks: list[tuple[str, int, list[int]]] = []
        if self.policy.kind == "changes":
            for idx, shape in enumerate(self.shapes):
                tasks.append(("bisect", idx, _ms_for(shape, range(1, self.policy.max_m + 1))))
            return tasks
        size = max(4, min(64, len(self.calls) // (self.workers * 4) or 1))
        for idx, shape in enumerate(self.shapes):
            ms = [c.m for c in self.calls if c.shape == shape]
            tasks += [("calls", idx, ms[i:i + size]) for i in range(0, len(ms), size)]
        # Start at a random chunk: ranks warming one cache together then claim different kernels first.
        k = random.randrange(len(tasks)) if tasks else 0
        return tasks[k:] + tasks[:k]

    def _loop(self, st: _State, procs: list[Any], work_q: Any, result_q: Any) -> None:
        last_draw = 0.0
        while not st.finished():
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise WarmupError(f"warmup(): not finished within the time limit ({st.line()})")
            try:
                msg = result_q.get(timeout=0.2)
            except Empty:
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    self._dead(st, dead)
                continue
            st.handle(msg, work_q)
            now = time.monotonic()
            if now - last_draw > 0.1:
                write_progress(self.out, st.line())
                last_draw = now

    def _dead(self, st: _State, dead: list[Any]) -> None:
        codes = ", ".join(f"worker {p.name} exit code {p.exitcode}" for p in dead)
        if st.method == "stand-in" and st.identified_all < self.workers and not st.done_tasks:
            raise _Fallback(f"a worker died while identifying kernels ({codes})")
        raise WarmupError(f"warmup(): {codes}; the kernels compiled so far are in {self.cache}")


class _State:
    """Bookkeeping of one pass."""

    def __init__(self, pool: Pool, method: str) -> None:
        self.pool = pool
        self.method = method
        self.t0 = time.perf_counter()
        self.identify_s = 0.0
        self.start_s = 0.0
        self.ready = 0
        self.identified_all = 0
        self.outstanding = 0
        self.done_tasks = 0
        self.first: dict[str, tuple[int, int]] = {}  # digest -> (shape index, m) compiled for it
        self.ids: dict[tuple[int, int], str] = {}
        self.entries: dict[str, KernelEntry] = {}
        self.verify_queued = False

    def all_calls(self) -> list[Call]:
        if self.method == "stand-in":
            return [Call(self.pool.shapes[i], m) for (i, m) in sorted(self.ids)]
        return list(self.pool.calls)

    def finished(self) -> bool:
        return self.identified_all == self.pool.workers and self.verify_queued and self.outstanding == 0

    def line(self) -> str:
        compiled = sum(e.status == "compiled" for e in self.entries.values())
        known = max(len(self.first), len(self.entries), 1)
        filled = min(20, 20 * len(self.entries) // known)
        bar = "#" * filled + "." * (20 - filled)
        return (f"[{bar}] kernels {len(self.entries)}/{len(self.first)} ({compiled} compiled) | "
                f"{len(self.ids)} calls identified | {self.outstanding} tasks left | "
                f"{time.perf_counter() - self.t0:.1f} s")

    def handle(self, msg: tuple[Any, ...], work_q: Any) -> None:
        kind = msg[0]
        if kind == "ready":
            self.ready += 1
            if self.ready == self.pool.workers:
                self.start_s = time.perf_counter() - self.t0
            return
        if kind == "identified":
            _, _wid, idx, found = msg
            for m, digest in found:
                self.ids[(idx, m)] = digest
                if digest not in self.first:
                    self.first[digest] = (idx, m)
                    work_q.put(("compile", idx, m, digest))
                    self.outstanding += 1
            return
        if kind == "identified-all":
            self.identified_all += 1
            if self.identified_all == self.pool.workers:
                self.identify_s = time.perf_counter() - self.t0
                self._queue_verify(work_q)
            return
        if kind == "done":
            _, _wid, task, idx, m, _expect, met = msg
            self.outstanding -= 1
            self.done_tasks += 1
            label = Call(self.pool.shapes[idx], m).label if task != "plain" else self.pool.shapes[idx].label
            for digest, status, seconds in met:
                old = self.entries.get(digest)
                if old is None or (status == "compiled" and old.status != "compiled"):
                    self.entries[digest] = KernelEntry(digest, status, label, round(seconds, 3))
            return
        if kind == "unhonored":
            raise _Fallback("a call finished in an empty cache without running the compiler program "
                            "(this release does not build kernels through DG_JIT_NVCC_COMPILER)")
        if kind == "call-error":
            _, _wid, idx, m, why, text = msg
            shape = self.pool.shapes[idx]
            where = f"{shape.label}" + (f" at M={m}" if isinstance(m, int) else "")
            from .jit_warmup import _release_label

            if why == "rejected":
                raise UnsupportedFeatureError("warmup", where, _release_label(), hint=text)
            raise WarmupError(f"warmup(): {where}: {why}: {text}")
        if kind == "fatal":
            _, wid, text, tb = msg
            if self.method == "stand-in" and self.identified_all < self.pool.workers and not self.done_tasks:
                raise _Fallback(f"worker {wid} failed while identifying: {text}")
            raise WarmupError(f"warmup(): worker {wid} failed: {text}\n{tb}")

    def _queue_verify(self, work_q: Any) -> None:
        if self.verify_queued:
            return
        self.verify_queued = True
        if self.method != "stand-in" or not self.pool.verify:
            return
        reps = set(self.first.values())
        for (idx, m) in sorted(self.ids):
            if (idx, m) not in reps:
                work_q.put(("verify", idx, m, None))
                self.outstanding += 1
