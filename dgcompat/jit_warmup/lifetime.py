"""A warmup that cannot strand anything: its scratch folder, the watcher that cleans up after a calling process that
dies, the signals that stop it, and the death signal of its worker processes.

- :class:`Scratch`: the warmup's private folder under ``TMPDIR``, holding an ``flock`` for as long as its warmup
  runs; a later warmup removes every such folder whose lock is free (its warmup died without cleaning up).
- :class:`Reaper`: a small process (Python, no torch) that waits for the calling process to go away. Ended at
  the end of every warmup; if the calling process dies first (``SIGKILL``, a crash), it kills the worker processes
  and NVCC runs listed in the scratch folder within a quarter second and removes the folder.
- :func:`interruptible`: while a warmup runs in the main thread, ``SIGTERM`` and ``SIGHUP`` raise
  :class:`~dgcompat.jit_warmup.report.WarmupInterrupted` (``SIGINT`` raises ``KeyboardInterrupt`` as always), so
  that the warmup's ``finally`` blocks stop its workers and NVCC runs and remove the scratch folder; the previous
  handlers are restored afterwards.
- :func:`die_with_parent`: a worker (or the check's process) asks the kernel for ``SIGKILL`` when its parent
  goes away (Linux ``PR_SET_PDEATHSIG``; elsewhere the reaper alone), so a worker stuck in a native call cannot
  outlive its warmup either.
- :func:`stop`: how the warmup and its check end a worker process still running: ``SIGTERM``, a grace period,
  then ``SIGKILL``.

The multiprocessing resource tracker the queues start ends by itself once its last user (the calling process and
the workers) has gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

from .report import WarmupInterrupted

__all__ = ["Scratch", "Reaper", "interruptible", "die_with_parent", "register", "unregister", "sweep", "stop"]

PREFIX = "dgcompat-warmup-"
_OWNER = "owner.lock"
_PIDS = "pids"

_REAPER = r"""
import os, shutil, signal, sys, time
parent, scratch = int(sys.argv[1]), sys.argv[2]
signal.signal(signal.SIGINT, signal.SIG_IGN)
while os.getppid() == parent:
    time.sleep(0.25)
try:
    pids = [int(x) for x in open(os.path.join(scratch, "pids")).read().split()]
except (OSError, ValueError):
    pids = []
for pid in pids:
    try:
        if pid < 0:
            os.killpg(-pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
shutil.rmtree(scratch, ignore_errors=True)
"""


def sweep(root: str | None = None) -> int:
    """Remove the scratch folders of warmups that died without removing theirs (their lock is free); how many."""
    base = Path(root or tempfile.gettempdir())
    removed = 0
    try:
        candidates = [p for p in base.iterdir() if p.name.startswith(PREFIX) and p.is_dir()]
    except OSError:
        return 0
    for folder in candidates:
        try:
            fd = os.open(folder / _OWNER, os.O_RDWR)
        except OSError:
            continue  # not one of ours (or not yet locked: leave it)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            continue  # its warmup is running
        try:
            shutil.rmtree(folder, ignore_errors=True)
            removed += 1
        finally:
            os.close(fd)
    return removed


class Scratch:
    """The warmup's private folder (``path``), locked while it exists; removed on :meth:`close`."""

    def __init__(self) -> None:
        sweep()
        self.path = Path(tempfile.mkdtemp(prefix=PREFIX))
        self._fd: int | None = os.open(self.path / _OWNER, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        self._lock = threading.Lock()
        self._pids: set[int] = set()

    def register(self, pid: int, *, group: bool = False) -> None:
        """List a process (or, ``group``, its process group) for the reaper to kill if this process dies."""
        with self._lock:
            self._pids.add(-pid if group else pid)
            self._write()

    def unregister(self, pid: int, *, group: bool = False) -> None:
        """Take a process that ended off the list (its number may be reused)."""
        with self._lock:
            self._pids.discard(-pid if group else pid)
            self._write()

    def _write(self) -> None:
        tmp = self.path / (_PIDS + ".new")
        try:
            tmp.write_text("".join(f"{p}\n" for p in sorted(self._pids)))
            os.replace(tmp, self.path / _PIDS)
        except OSError:
            pass  # a full scratch disk: the warmup reports that itself

    def close(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Scratch:  # noqa: PYI034 - not subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_CURRENT: list[Scratch] = []


def register(pid: int, *, group: bool = False) -> None:
    """:meth:`Scratch.register` on the scratch folder of the warmup running in this process, if any."""
    if _CURRENT:
        _CURRENT[-1].register(pid, group=group)


def unregister(pid: int, *, group: bool = False) -> None:
    if _CURRENT:
        _CURRENT[-1].unregister(pid, group=group)


def stop(proc: Any, grace_s: float) -> None:
    """End the multiprocessing process ``proc`` if it still runs: ``SIGTERM``, up to ``grace_s`` seconds to exit,
    then ``SIGKILL`` and up to 5 seconds more. One that never started or already ended is left as it is."""
    if proc.is_alive():
        proc.terminate()
        proc.join(timeout=grace_s)
    if proc.is_alive():
        proc.kill()
        proc.join(timeout=5)


class Reaper:
    """The process that cleans up after this one if it dies during a warmup (see the module docstring)."""

    def __init__(self, scratch: Scratch) -> None:
        self.scratch = scratch
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        self.proc: subprocess.Popen[bytes] | None = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _REAPER, str(os.getpid()), str(scratch.path)],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
            start_new_session=True)  # a terminal's Ctrl-C does not reach it: the warmup ends it
        _CURRENT.append(scratch)

    def close(self) -> None:
        if _CURRENT and _CURRENT[-1] is self.scratch:
            _CURRENT.pop()
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None

    def __enter__(self) -> Reaper:  # noqa: PYI034 - not subclassed
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@contextlib.contextmanager
def interruptible() -> Iterator[None]:
    """Within: ``SIGTERM`` and ``SIGHUP`` raise :class:`WarmupInterrupted` (main thread only; elsewhere nothing
    changes). The handlers in place before are restored on exit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def stop(signum: int, _frame: FrameType | None) -> None:
        raise WarmupInterrupted(signum)

    saved = {}
    for sig in (signal.SIGTERM, signal.SIGHUP):
        try:
            saved[sig] = signal.signal(sig, stop)
        except (OSError, ValueError):
            continue
    try:
        yield
    finally:
        for sig, old in saved.items():
            signal.signal(sig, old)


def die_with_parent(parent: int) -> None:
    """In a worker: be killed (``SIGKILL``) when the calling process goes away; exit now if it already has.
    ``SIGINT`` is ignored: a terminal's Ctrl-C stops the calling process, which stops its workers."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, int(signal.SIGKILL), 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(1)
