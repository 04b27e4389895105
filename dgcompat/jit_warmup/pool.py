"""The calling process's side of a warmup: starts the workers, hands out work, dedupes kernels, compiles,
verifies every call, collects counts.

The calls of each shape and scale form fall into M classes (:mod:`dgcompat.jit_warmup.classes`); one call
per class (its representative) is identified, the others wait for it.

The protocol (:mod:`dgcompat.jit_warmup.messages`, one dataclass per message, one handler each here and in
:mod:`dgcompat.jit_warmup.worker`):

1. Identification (stand-in method), with the link of each worker at an empty cache: chunks of
   representatives (:class:`~.messages.Identify`, or one :class:`~.messages.Bisect` per (shape, form) for
   :meth:`MPolicy.changes`) on the identify queue, then one :class:`~.messages.Turn` per worker. The first
   call met for a digest (:class:`~.messages.Identified`) starts its compile on a parent thread
   (:mod:`dgcompat.jit_warmup.build`), ``workers`` at a time, heavy kernels first; the parent holds the
   kernel's lock from then until it is installed.
2. After its turn a worker takes work from the work queue, against the shared cache:
   :class:`~.messages.Install` once the parent built a kernel: the call puts it in place through deep_gemm;
   the answer (:class:`~.messages.Installed`) names the next kernel the call misses, if any, which is handled
   like a new digest. :class:`~.messages.Probe`: the calls run against the shared cache; the answer
   (:class:`~.messages.Probed`) lists the calls that found every kernel and the first kernel each other one
   misses. A call waiting for a kernel is probed again once the kernel is installed. When a representative
   is complete (every kernel it needs is in place), the other calls of its class are probed: the verify
   pass, which runs every call of the description against the folder and finds whatever the classes missed.
3. Phase 2, once nothing is being identified, built or installed (the parent holds no lock, so workers
   may wait on other processes' locks without a deadlock): :class:`~.messages.Compile` for each call whose
   kernel another process held, whose recipe could not be built outside deep_gemm, or that missed a kernel
   in phase 2; the worker compiles through deep_gemm under the kernel's lock and answers
   :class:`~.messages.Compiled` with the kernels met. With the calls method, one :class:`~.messages.Plain`
   per (shape, form) (answered by :class:`~.messages.PlainDone`). :class:`~.messages.Stop` stops a worker.
"""

from __future__ import annotations

import functools
import multiprocessing as mp
import os
import queue
import random
import signal
import time
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from queue import Empty
from typing import Any
from typing import Literal
from typing import TextIO

from ..detection import release
from ..errors import UnsupportedFeatureError
from . import lifetime
from . import storage
from .build import Outcome
from .build import cancel_all
from .build import prepare_build
from .build import reset as reset_builds
from .cache import count_entries
from .cache import mark_present
from .cache import source_index
from .classes import GUESS
from .classes import Rule
from .classes import classes
from .messages import WORK_ANSWERS
from .messages import Answer
from .messages import Bisect
from .messages import CallError
from .messages import Compile
from .messages import Compiled
from .messages import Fatal
from .messages import Identified
from .messages import IdentifiedAll
from .messages import Identify
from .messages import Install
from .messages import Installed
from .messages import Plain
from .messages import PlainDone
from .messages import Probe
from .messages import Probed
from .messages import Ready
from .messages import Stop
from .messages import Turn
from .messages import Unhonored
from .messages import WorkTask
from .report import KernelEntry
from .report import WarmupError
from .spec import Call
from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import MPolicy
from .spec import Shape
from .spec import ms_for
from .standin import STAND_IN
from .worker import WorkerConfig
from .worker import main
from .worker import prepare

__all__ = ["Pool", "PoolResult", "write_progress"]

#: Calls per probe task (a few milliseconds of a worker's time).
PROBE_CHUNK = 64
#: Probe tasks in the work queue per worker process at most: the others wait in the parent, so that an install
#: (the kernels the calling process compiled) never queues behind thousands of verify calls.
PROBES_IN_FLIGHT = 2

CallKey = tuple[int, str, int]  # (shape index, scale form, M)


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
    identified: int = 0
    verified: int = 0
    verify_kernels: int = 0
    families: tuple[str, ...] = ()  # the GPU families the worker processes saw
    notes: list[str] = field(default_factory=list)
    command: tuple[str, ...] = ()  # one compiler command the JIT asked for (the arguments of a recipe)
    nvcc_s: float = 0.0  # seconds of NVCC runs of the calling process, added up
    nvcc_runs: int = 0
    first_compile_s: float = 0.0


def write_progress(out: TextIO | None, text: str, *, final: bool = False) -> None:
    """One progress line, rewritten in place (only where a stream was asked for)."""
    if out is None:
        return
    out.write("\r[dgcompat warmup] " + text + ("\n" if final else ""))
    out.flush()


def _a_command(recipes: list[Path]) -> tuple[str, ...]:
    """The compiler arguments of one recipe the workers kept (what the JIT asks NVCC for), or ()."""
    for folder in recipes:
        try:
            for recipe in sorted(folder.iterdir()):
                args = (recipe / "args").read_text().split("\n")[:-1]
                if args:
                    return tuple(args)
        except OSError:
            continue
    return ()


class _Fallback(Exception):
    """Switch to real calls (the stand-in is not honoured by this release)."""


def _spread(ms: list[int]) -> list[int]:
    """``ms`` sorted from the largest, then reordered coarse to fine: the bit-reversed order of their positions
    (first, middle, quarters, eighths, ...), so that any prefix samples the whole range, the largest M first (a
    large M picks large tiles, whose kernels take NVCC longest: they should start first)."""
    ordered = sorted(ms, reverse=True)
    bits = max(1, (len(ordered) - 1).bit_length())
    keys = sorted(range(len(ordered)), key=lambda i: int(format(i, f"0{bits}b")[::-1], 2))
    return [ordered[i] for i in keys]


def _light(source: Path) -> bool:
    """Whether a recipe's kernel is a small one (a layout transform, a schedule, a cleanup): compiled after the
    GEMM and logits kernels, which take longest, so that none of those starts last."""
    try:
        head = source.read_text(errors="replace")[:2000]
    except OSError:
        return False
    return any(word in head for word in ("layout", "scheduler", "clean_logits", "metadata"))


class Pool:
    """One warmup's workers. ``workers``: kernels compiled at once (NVCC processes); ``processes``: worker
    processes of the stand-in method (the calls method compiles inside its workers, so it starts
    ``workers`` of them). ``rule``: the M classes (one call per class is identified). Times are measured
    from ``t0`` (``time.perf_counter()`` at the warmup's start)."""

    def __init__(self, calls: list[Call], policy: MPolicy, *, workers: int, processes: int, device: int,
                 cache: Path, scratch: Path, nvcc: str, verify: bool, out: TextIO | None,
                 timeout_s: float | None, t0: float | None = None, rule: Rule = GUESS) -> None:
        self.calls = calls
        self.policy = policy
        self.rule = rule
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
        index = {s: i for i, s in enumerate(self.shapes)}
        forms: dict[int, list[str]] = {}
        ms: dict[int, list[int]] = {}
        for c in calls:
            i = index[c.shape]
            if c.form not in forms.setdefault(i, []):
                forms[i].append(c.form)
            ms.setdefault(i, [])
            if not ms[i] or ms[i][-1] != c.m:
                ms[i].append(c.m)
        self.forms = {i: tuple(f) for i, f in forms.items()}
        self.ms = {i: sorted(set(v)) for i, v in ms.items()}
        self.ctx = mp.get_context("spawn")  # workers touch CUDA: never fork a process that might have it
        #: The folders a write can fail in, for the message that says what ran out where.
        self.folders = {"the JIT cache folder": cache, "the warmup's scratch folder": scratch}

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
        with storage.writing(self.scratch, "the warmup's scratch folder"):
            return self._write_configs(method, n)

    def _write_configs(self, method: str, n: int) -> list[WorkerConfig]:
        stand_in = self.scratch / "nvcc-stand-in.sh"
        stand_in.write_text(STAND_IN)
        stand_in.chmod(0o755)
        configs = []
        for wid in range(n):
            base = self.scratch / f"{method}-w{wid}"
            base.mkdir(parents=True, exist_ok=True)
            cfg = WorkerConfig(wid=wid, device=self.device, method=method, shapes=self.shapes, parent=os.getpid(),
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
            assert p.pid is not None
            lifetime.register(p.pid)  # killed by the reaper if this process dies
        ok = False
        try:
            if method == "stand-in":
                for task in self._identify_tasks(n, state):
                    identify_q.put(task)
                for _ in procs:
                    identify_q.put(Turn())
            else:
                for idx in range(len(self.shapes)):
                    for form in self.forms[idx]:
                        state.send(Plain(idx, form, tuple(self.ms[idx])))
                state.identified_all = n
                state.phase2 = True
            self._loop(state, procs, result_q)
            state.compile_s = state.compile_s or state.now()  # the calls method compiles until its last task
            for _ in procs:
                work_q.put(Stop())
            for p in procs:
                p.join(timeout=60)
            ok = True
        finally:
            if not ok:  # an error or an interruption: stop the NVCC runs and the workers now
                cancel_all()
                for p in procs:
                    if p.is_alive():
                        p.terminate()
            if builder is not None:  # running compiles write into the scratch folder: let them end first
                builder.shutdown(wait=True, cancel_futures=True)
            reset_builds()
            state.release_all()
            for p in procs:
                lifetime.stop(p, 5)
                if p.pid is not None:
                    lifetime.unregister(p.pid)
            for q in (identify_q, work_q, result_q):
                q.close()
                q.cancel_join_thread()
        write_progress(self.out, state.line(), final=True)
        result = PoolResult(method, state.all_calls(), identify_s=state.identify_s, start_s=state.start_s,
                            first_up_s=state.first_up_s, compile_s=state.compile_s, processes=n,
                            identified=state.identified, verified=len(state.complete),
                            verify_kernels=len(state.verify_found))
        result.entries = sorted(state.entries.values(), key=lambda e: e.identity)
        result.new_entries = count_entries(self.cache) - before
        result.notes.extend(state.notes)
        result.families = tuple(sorted(f or "unknown" for f in state.families))
        result.command = _a_command(state.recipes)
        result.nvcc_s, result.nvcc_runs = round(state.nvcc_s, 3), state.nvcc_runs
        result.first_compile_s = state.first_compile_s
        return result

    def _identify_tasks(self, n: int, st: _State) -> list[Identify | Bisect]:
        tasks: list[Identify | Bisect] = []
        if self.policy.kind == "changes":
            for idx, shape in enumerate(self.shapes):
                for form in self.forms[idx]:
                    tasks.append(Bisect(idx, form, tuple(ms_for(shape, range(1, self.policy.max_m + 1)))))
            return tasks
        # Small chunks: a digest reaches the parent, and its compile starts, soon after it is found. The
        # representatives of each (shape, scale form) go coarse to fine (:func:`_spread`) and the (shape, form)
        # pairs take turns, so the first chunks the workers take already meet most distinct kernels (the kernel
        # choice changes with M in steps): every compile starts early, instead of those of the last shapes after
        # the other shapes' calls.
        reps = {(idx, form): st.plan_classes(idx, form) for idx in range(len(self.shapes)) for form in self.forms[idx]}
        total = sum(len(r) for r in reps.values())
        size = max(2, min(16, total // (n * 4) or 1))
        per_shape: list[list[Identify | Bisect]] = []
        for (idx, form), rep_ms in reps.items():
            ms = _spread(rep_ms)
            per_shape.append([Identify(idx, form, tuple(ms[i:i + size])) for i in range(0, len(ms), size)])
        # Each turn starts at the same random shape: ranks warming one cache together then claim different
        # kernels first, and still every rank's first chunks are the coarse ones.
        k = random.randrange(len(per_shape)) if per_shape else 0
        per_shape = per_shape[k:] + per_shape[:k]
        for turn in range(max((len(t) for t in per_shape), default=0)):
            tasks += [t[turn] for t in per_shape if turn < len(t)]
        return tasks

    def _loop(self, st: _State, procs: list[Any], result_q: Any) -> None:
        last_draw = last_look = 0.0
        while not st.finished():
            if self.deadline is not None and time.monotonic() > self.deadline:
                raise WarmupError(f"warmup(): not finished within the time limit ({st.line()})")
            st.drain_builds()
            now = time.monotonic()
            if now - last_look > 0.1:  # a worker that died may have held a queue's lock: stop at once
                last_look = now
                dead = [p for p in procs if not p.is_alive() and p.exitcode not in (0, None)]
                if dead:
                    self._dead(st, dead)
            try:
                msg = result_q.get(timeout=0.05)
            except Empty:
                st.maybe_phase2()
                continue
            st.handle(msg)
            st.maybe_phase2()
            if now - last_draw > 0.1:
                write_progress(self.out, st.line())
                last_draw = now

    def _dead(self, st: _State, dead: list[Any]) -> None:
        codes = ", ".join(f"worker {p.name} exit code {p.exitcode}" for p in dead)
        stopped = any(p.exitcode in (-signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT) for p in dead)
        if (st.method == "stand-in" and st.identified_all < st.n and not st.answers  # nothing but identification ran
                and not stopped):  # (a worker killed from outside says nothing about the stand-in)
            raise _Fallback(f"a worker died while identifying kernels ({codes})")
        why = " (killed by a signal: the out-of-memory killer, or a user)" if stopped else ""
        raise WarmupError(f"warmup(): {codes}{why}; the kernels compiled so far are in {self.cache}, and the same "
                          "warmup run again continues from them")


class _State:
    """Bookkeeping of one pass (parent thread only; compile threads report through ``events``).

    Every call is keyed ``(shape index, form, m)``. A kernel (digest) is ``queued`` (waiting for a compile
    slot), ``building``, ``installing``, ``present``, ``elsewhere`` (another process holds its lock, or the
    cache seems to have it) or ``failed`` (no usable recipe, or NVCC failed on it: compiled through
    deep_gemm in phase 2); calls that need it wait in ``waiters``.
    """

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
        self.identified = 0
        self.outstanding = 0
        self.answers = 0
        self.building = 0
        self.pending: list[tuple[int, int, int, str]] = []  # (light, -weight, arrival, digest): waiting for a slot
        self.first: dict[str, CallKey] = {}  # digest -> the call that installs it
        self.first_wid: dict[str, int] = {}
        self.kstate: dict[str, str] = {}
        self.waiters: dict[str, list[CallKey]] = {}
        self.waiting_on: dict[CallKey, str] = {}
        self.retried: set[tuple[CallKey, str]] = set()
        self.ids: dict[CallKey, str] = {}
        self.entries: dict[str, KernelEntry] = {}
        self.held: dict[str, int] = {}  # digest -> lock fd, from its compile until its install is done
        self.parked: list[CallKey] = []  # phase-2 calls
        self.complete: set[CallKey] = set()
        self.verify_found: set[str] = set()
        self.phase2 = False
        self.notes: list[str] = []
        self.recipes: list[Path] = []
        self.present: dict[int, list[Path]] = {}  # sources of the entries the cache held at the start
        self.build_s: dict[str, float] = {}  # digest -> seconds its NVCC run took here
        self.first_compile_s = 0.0  # when the first NVCC run started (identification runs from the first worker up)
        self.nvcc_s = 0.0  # every NVCC run here, added up
        self.nvcc_runs = 0
        self._failed_builds = 0
        self._arrivals = 0
        self._flags_checked = False
        self.members: dict[CallKey, list[CallKey]] = {}  # representative -> the other calls of its class
        self.probes: deque[Probe] = deque()  # probe tasks not sent yet
        self.probing = 0  # probe tasks sent and not answered
        self.families: set[str | None] = set()  # the GPU families the workers saw
        self.planned: set[CallKey] = set()

    # -- planning -----------------------------------------------------------------------------------
    def plan_classes(self, idx: int, form: str) -> list[int]:
        """The representatives' M values of shape ``idx`` in scale form ``form``; remembers each class's other
        calls (the same form, the other M values of the class)."""
        pool = self.pool
        reps = []
        for ms in classes(pool.rule, pool.shapes[idx], pool.ms[idx]).values():
            rep: CallKey = (idx, form, ms[-1])
            reps.append(ms[-1])
            self.members[rep] = [(idx, form, m) for m in ms[:-1]]
            self.planned.add(rep)
            self.planned.update(self.members[rep])
        return reps

    # -- bookkeeping --------------------------------------------------------------------------------
    def now(self) -> float:
        return time.perf_counter() - self.t0

    def all_calls(self) -> list[Call]:
        if self.method == "stand-in":
            keys = self.planned if self.pool.policy.kind != "changes" else set(self.ids)
            return [Call(self.pool.shapes[i], m, f) for (i, f, m) in sorted(keys)]
        return list(self.pool.calls)

    def finished(self) -> bool:
        return (self.phase2 and self.outstanding == 0 and not self.parked and not self.building
                and not self.pending and not self.held and not self.probes)

    def line(self) -> str:
        compiled = sum(e.status == "compiled" for e in self.entries.values())
        known = max(len(self.kstate), len(self.entries), 1)
        filled = min(20, 20 * len(self.entries) // known)
        bar = "#" * filled + "." * (20 - filled)
        total = len(self.planned) or len(self.pool.calls)
        return (f"[{bar}] kernels {len(self.entries)}/{len(self.kstate)} ({compiled} compiled, {self.building} "
                f"compiling) | {self.identified} calls identified, {len(self.complete)}/{total} verified | "
                f"{self.outstanding} tasks left | {self.now():.1f} s")

    def send(self, task: WorkTask) -> None:
        self.work_q.put(task)
        self.outstanding += 1

    def probe(self, calls: list[CallKey]) -> None:
        """Probe ``calls`` (grouped per shape and form, in chunks) against the shared cache, a few tasks at a time."""
        groups: dict[tuple[int, str], list[int]] = {}
        for idx, form, m in calls:
            groups.setdefault((idx, form), []).append(m)
        for (idx, form), ms in groups.items():
            for i in range(0, len(ms), PROBE_CHUNK):
                self.probes.append(Probe(idx, form, tuple(ms[i:i + PROBE_CHUNK])))
        self.pump_probes()

    def pump_probes(self) -> None:
        while self.probes and self.probing < PROBES_IN_FLIGHT * self.n:
            self.send(self.probes.popleft())
            self.probing += 1

    # -- kernels ------------------------------------------------------------------------------------
    def need(self, call: CallKey, digest: str, wid: int, *, probed: bool) -> None:
        """``call`` needs ``digest`` next (``probed``: a call against the shared cache missed it)."""
        state = self.kstate.get(digest)
        self.waiting_on[call] = digest
        if state is None:
            if self.phase2:  # no compile outside deep_gemm once the parent holds no locks: a worker compiles it
                self.kstate[digest] = "failed"
                self.park(call)
                return
            self.kstate[digest] = "queued"
            self.first[digest] = call
            self.first_wid[digest] = wid
            self.waiters[digest] = []
            if probed and self._is_member(call):
                self.verify_found.add(digest)  # a call its class's representative stood for met what it did not
            self._arrivals += 1
            source = self.recipes[wid] / digest / "source" if self.recipes else Path("/nonexistent")
            self.pending.append((1 if _light(source) else 0, -self._weight(call), self._arrivals, digest))
            self.pending.sort()
            self.pump()
        elif state in ("queued", "building", "installing"):
            self.waiters[digest].append(call)
        elif state == "present":
            if probed and (call, digest) in self.retried:
                self.park(call)  # present, yet the call still misses it: leave it to deep_gemm's own path
                return
            self.retried.add((call, digest))
            self.probe([call])
        elif state == "elsewhere":
            if probed:
                self.park(call)
            else:
                self.probe([call])
        else:
            self.park(call)

    def _weight(self, call: CallKey) -> int:
        """How long a kernel is expected to take NVCC, as an order only: for a GEMM the M of the first call that
        needs it (a larger M picks larger tiles: measured on the H200, the six dense GEMMs' kernels took 3.3-4.7 s
        at M <= 64 and up to 12.8 s at M 576-1216), the indexer's logits kernels before all (they are large),
        so that the longest compiles start first and none of them ends the warmup alone."""
        shape = self.pool.shapes[call[0]]
        return call[2] if isinstance(shape, (DenseGemm, GroupedGemm)) else 1 << 30

    def _is_member(self, call: CallKey) -> bool:
        return call not in self.members  # representatives are the keys of ``members``

    def park(self, call: CallKey) -> None:
        self.parked.append(call)

    def pump(self) -> None:
        """Start queued compiles while compile slots are free."""
        assert self.builder is not None or not self.pending
        while self.pending and self.building < self.pool.workers:
            _prio, _weight, _n, digest = self.pending.pop(0)
            self.kstate[digest] = "building"
            p = self.pool
            recipe = self.recipes[self.first_wid[digest]] / digest  # the worker that reported it kept its recipe
            assert self.builder is not None
            fut = self.builder.submit(prepare_build, digest, recipe, p.cache, p.scratch / "built", p.nvcc,
                                      p.remaining(), self.present)
            fut.add_done_callback(functools.partial(self._ended, digest))
            self.building += 1
            self.first_compile_s = self.first_compile_s or self.now()

    def _ended(self, digest: str, fut: Future[Outcome]) -> None:
        """A compile thread's callback (runs on that thread): hand the outcome to the parent thread."""
        self.events.put((digest, fut))

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
                if out.seconds:
                    self.nvcc_s += out.seconds
                    self.nvcc_runs += 1
            except Exception as exc:  # an unexpected failure of the thread: the worker path compiles it
                if isinstance(exc, storage.StorageError):
                    raise exc from None
                full = storage.from_error(exc, self.pool.folders)
                if full is not None:  # unless a write ran out of room: that would fail there too
                    raise full from None
                out = Outcome(digest, "failed", why=f"{type(exc).__name__}: {exc}")
            if out.kind == "failed":
                role = "the warmup's scratch folder"  # where NVCC writes (its output, and TMPDIR's files)
                full = (storage.from_exit(out.returncode, self.pool.scratch, role)
                        or storage.from_text(out.output, {role: self.pool.scratch}))
                if full is not None:
                    raise full
            call = self.first[out.identity]
            if out.kind == "built":
                assert out.fd is not None
                self.held[out.identity] = out.fd
                self.build_s[out.identity] = out.seconds
                self.kstate[out.identity] = "installing"
                self._check_flags(out.identity)
                self.send(Install(call[0], call[1], call[2], out.identity))
            elif out.kind == "elsewhere":
                self.kstate[out.identity] = "elsewhere"
                self.probe([call, *self.waiters.pop(out.identity, [])])
            else:
                self._failed_builds += 1
                if self._failed_builds <= 3:
                    self.notes.append(f"kernel {out.identity} was compiled through deep_gemm instead: {out.why}")
                self.kstate[out.identity] = "failed"
                for c in [call, *self.waiters.pop(out.identity, [])]:
                    self.park(c)
        self.pump()

    def _check_flags(self, digest: str) -> None:
        """Note once whether the compiler flags name the release's install folder (then so does deep_gemm's key)."""
        if self._flags_checked:
            return
        self._flags_checked = True
        try:
            args = (self.recipes[self.first_wid[digest]] / digest / "args").read_text().split("\n")
        except OSError:
            return
        location = release().location
        paths = [a[2:] for a in args if a.startswith("-I")]
        if location and any(p.startswith(str(Path(location).parent)) for p in paths):
            self.notes.append(
                f"deep_gemm's cache key contains its install folder (the compiler flag -I{paths[0]}): another install "
                "of this build (a moved virtualenv, a container) finds these kernels once they are re-keyed for it: "
                "dgcompat warmup --adopt on this folder there, or --export here and --import there")

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

    # -- calls ----------------------------------------------------------------------------------------
    def done(self, call: CallKey) -> None:
        """``call`` found every kernel it needs in the shared cache."""
        if call in self.complete:
            return
        self.complete.add(call)
        digest = self.waiting_on.pop(call, None)
        if digest is not None and self.kstate.get(digest) == "elsewhere":
            self.kstate[digest] = "present"  # the cache had it after all
        if digest is not None and digest not in self.entries and self.kstate.get(digest) == "present":
            self.entries[digest] = KernelEntry(digest, "cached", self._label(call), 0.0)
        first = self.ids.get(call)
        if first is not None and first not in self.entries:
            self.entries[first] = KernelEntry(first, "cached", self._label(call), 0.0)
            self.kstate.setdefault(first, "present")
        members = self.members.get(call)
        if members and self.pool.verify:
            if self.phase2:
                for c in members:
                    self.send(Compile(c[0], c[1], c[2], None))
            else:
                self.probe(members)

    def _label(self, call: CallKey) -> str:
        return Call(self.pool.shapes[call[0]], call[2], call[1]).label

    # -- phase 2 --------------------------------------------------------------------------------------
    def maybe_phase2(self) -> None:
        if (self.identified_all < self.n or self.building or self.pending or self.held or self.outstanding
                or self.probes or (self.phase2 and not self.parked)):
            return
        if not self.phase2:
            self.phase2 = True
            self.compile_s = self.compile_s or self.now()
        parked, self.parked = self.parked, []
        for c in dict.fromkeys(parked):
            if c not in self.complete:
                self.send(Compile(c[0], c[1], c[2], self.ids.get(c)))

    # -- worker messages ------------------------------------------------------------------------------
    def handle(self, msg: Answer) -> None:
        """One answer of a worker, to its handler."""
        if isinstance(msg, WORK_ANSWERS):
            self.answers += 1
            self.outstanding -= 1
        match msg:
            case Ready():
                self._on_ready(msg)
            case Identified():
                self._on_identified(msg)
            case IdentifiedAll():
                self._on_identified_all(msg)
            case Installed():
                self._on_installed(msg)
            case Probed():
                self._on_probed(msg)
            case Compiled():
                self._on_compiled(msg)
            case PlainDone():
                pass  # the calls method: the call is made; nothing is tracked per call
            case Unhonored():
                raise _Fallback("a call finished in an empty cache without running the compiler program "
                                "(this release does not build kernels through DG_JIT_NVCC_COMPILER)")
            case CallError():
                self._on_call_error(msg)
            case Fatal():
                self._on_fatal(msg)
            case _:
                raise TypeError(f"not a worker's answer: {msg!r}")

    def _on_ready(self, msg: Ready) -> None:
        self.families.add(msg.family)
        self.ready += 1
        if self.ready == 1:
            self.first_up_s = self.now()
        if self.ready == self.n:
            self.start_s = self.now()

    def _on_identified(self, msg: Identified) -> None:
        for m, digest in msg.found:
            call: CallKey = (msg.shape, msg.form, m)
            self.identified += 1
            self.ids[call] = digest
            if self.pool.policy.kind == "changes":
                self.members.setdefault(call, [])
                self.planned.add(call)
            self.need(call, digest, msg.wid, probed=False)

    def _on_identified_all(self, msg: IdentifiedAll) -> None:
        self.identified_all += 1
        if self.identified_all == self.n:
            self.identify_s = self.now()

    def _on_installed(self, msg: Installed) -> None:
        call = (msg.shape, msg.form, msg.m)
        seconds = msg.seconds + (self.build_s.get(msg.digest, 0.0) if msg.status == "compiled" else 0.0)
        self.entries[msg.digest] = KernelEntry(msg.digest, msg.status, self._label(call), round(seconds, 3))
        self.kstate[msg.digest] = "present"
        self._release(msg.digest, True)
        self.compile_s = max(self.compile_s, self.now())
        waiting = self.waiters.pop(msg.digest, [])
        if waiting:
            self.probe(waiting)
        if msg.next is None:
            self.waiting_on.pop(call, None)
            self.done(call)
        else:
            self.need(call, msg.next, msg.wid, probed=True)

    def _on_probed(self, msg: Probed) -> None:
        self.probing -= 1
        for m in msg.ok:
            self.done((msg.shape, msg.form, m))
        for m, digest in msg.missing:
            self.need((msg.shape, msg.form, m), digest, msg.wid, probed=True)
        self.pump_probes()

    def _on_compiled(self, msg: Compiled) -> None:
        call = (msg.shape, msg.form, msg.m)
        for digest, status, seconds in msg.met:
            old = self.entries.get(digest)
            if old is None or (status == "compiled" and old.status != "compiled"):
                self.entries[digest] = KernelEntry(digest, status, self._label(call), round(seconds, 3))
            self.kstate[digest] = "present"
            if self._is_member(call) and old is None and status == "compiled":
                self.verify_found.add(digest)
        self.waiting_on.pop(call, None)
        self.done(call)

    def _on_call_error(self, msg: CallError) -> None:
        full = storage.from_text(msg.text, self.pool.folders)
        if full is not None:  # deep_gemm or NVCC ran out of room: not the release's fault
            raise full
        shape = self.pool.shapes[msg.shape]
        where = f"{shape.label}" + (f" at M={msg.m}" if msg.m is not None else "") + (
            f" (scales {msg.form})" if msg.form else "")
        if msg.why == "rejected":
            raise UnsupportedFeatureError("warmup", where, release().label, hint=msg.text)
        raise WarmupError(f"warmup(): {where}: {msg.why}: {msg.text}")

    def _on_fatal(self, msg: Fatal) -> None:
        full = storage.from_text(msg.text, self.pool.folders)
        if full is not None:
            raise full
        if self.method == "stand-in" and self.identified_all < self.n and not self.answers:
            raise _Fallback(f"worker {msg.wid} failed while identifying: {msg.text}")
        raise WarmupError(f"warmup(): worker {msg.wid} failed: {msg.text}\n{msg.traceback}")
