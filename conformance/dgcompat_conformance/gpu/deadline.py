"""When a GPU-tier run must end, and how it stops: the stop flag, deadlines, signals and killing the children.

A :class:`Deadline` bounds one subject (the earliest of the run's ``--deadline`` and the subject's
``--release-timeout``); no case starts with less than :data:`MIN_CASE_S` left. SIGTERM or SIGINT
(:func:`stop_on_signals`) sets :data:`STOP` and kills every child this process started, each with
its process group (:func:`stop_children`): what was cut short is recorded as not run, never as a hang.
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["STOP", "MIN_CASE_S", "Deadline", "stop_children", "stop_on_signals"]

#: Set when the runner is told to stop (SIGTERM/SIGINT): no new child starts, and what was cut short
#: is recorded as not run rather than as a hang or an error.
STOP = threading.Event()

#: A case is not started with less than this many seconds left (a child alone takes ~5 s to start).
MIN_CASE_S = 20.0


@dataclass(frozen=True)
class Deadline:
    """When one subject's run must end: ``time.monotonic()`` seconds, or None for no limit."""

    at: float | None = None

    @staticmethod
    def earliest(*ats: float | None) -> Deadline:
        known = [a for a in ats if a is not None]
        return Deadline(min(known) if known else None)

    def left(self) -> float:
        """Seconds left (``inf`` without a limit, 0 once stopped)."""
        if STOP.is_set():
            return 0.0
        return math.inf if self.at is None else max(0.0, self.at - time.monotonic())

    def limit(self, timeout: float) -> tuple[float, bool]:
        """``(seconds a child may run, whether the deadline shortened it below timeout)``."""
        left = self.left()
        return (timeout, False) if left >= timeout else (left, True)


def _own_children() -> list[int]:
    """The pids of this process's direct children (read from /proc; empty where there is none)."""
    me, pids = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(me):
            pids.append(int(stat.parent.name))
    return pids


def stop_children(signum: int = signal.SIGTERM, frame: Any = None) -> None:
    """Stop the run: no new case starts, and every child this process started (case and ABI children are
    session leaders: their whole group, nvcc included) is killed. Certificates of what finished are kept."""
    STOP.set()
    for pid in _own_children():
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM / SIGINT stop the run (:func:`stop_children`) instead of orphaning the children."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, stop_children) for sig in (signal.SIGTERM, signal.SIGINT)}
    STOP.clear()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
