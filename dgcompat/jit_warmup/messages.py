"""The messages between a warmup's calling process (:mod:`~dgcompat.jit_warmup.pool`) and its worker processes
(:mod:`~dgcompat.jit_warmup.worker`), one frozen dataclass each; each side dispatches them with ``match``, one
handler per message.

Every call is named by ``shape`` (the index of its shape in the pass's shapes, :attr:`WorkerConfig.shapes`),
``form`` (the scale form, ``""`` for a BF16 shape) and ``m``. A digest names a kernel (the stand-in's hash of
its source and flags). The messages cross a ``multiprocessing`` queue: they hold plain data only.

Tasks, parent to worker:

1. the identify queue (stand-in method), at the worker's link to an empty cache: :class:`Identify` (one call
   per M class), :class:`Bisect` (:meth:`MPolicy.changes`), then one :class:`Turn` per worker, after which it
   points its link at the shared cache;
2. the work queue, against the shared cache: :class:`Install` (a kernel the parent compiled: the call puts it
   in place through deep_gemm), :class:`Probe` (which calls find every kernel they need), :class:`Compile`
   (phase 2: compile through deep_gemm under each kernel's lock), :class:`Plain` (the calls method: real calls,
   compiling as deep_gemm does) and :class:`Stop`.

Answers, worker to parent: :class:`Ready` (up, with its GPU family), :class:`Identified`,
:class:`IdentifiedAll` (after the turn), :class:`Installed`, :class:`Probed`, :class:`Compiled`,
:class:`PlainDone`, and the failures :class:`Unhonored` (the release does not use the stand-in compiler),
:class:`CallError` (a call failed) and :class:`Fatal` (the worker dies).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

__all__ = ["Identify", "Bisect", "Turn", "IdentifyTask", "Install", "Probe", "Compile", "Plain", "Stop", "WorkTask",
           "Ready", "Identified", "IdentifiedAll", "Installed", "Probed", "Compiled", "PlainDone", "Unhonored",
           "CallError", "Fatal", "Answer", "WORK_ANSWERS", "Status"]

#: How a kernel came to be in the cache: compiled (or installed) for this call, or found there.
Status = Literal["compiled", "cached"]


# --- tasks: the identify queue ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class Identify:
    """Identify the first kernel of each call ``(shape, form, m)`` for ``m`` in ``ms`` (one :class:`Identified`
    per call, sent as it is found)."""

    shape: int
    form: str
    ms: tuple[int, ...]


@dataclass(frozen=True)
class Bisect:
    """Identify a grid of ``candidates`` (ascending M) and bisect between neighbours that need different kernels
    (one :class:`Identified` for all of them)."""

    shape: int
    form: str
    candidates: tuple[int, ...]


@dataclass(frozen=True)
class Turn:
    """Identification is over: point the link at the shared cache and answer :class:`IdentifiedAll`."""


IdentifyTask = Identify | Bisect | Turn


# --- tasks: the work queue -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Install:
    """Make the call ``(shape, form, m)`` put the kernel ``digest``, which the parent compiled and holds the lock
    of, into the shared cache."""

    shape: int
    form: str
    m: int
    digest: str


@dataclass(frozen=True)
class Probe:
    """Run the calls ``(shape, form, m)``, ``m`` in ``ms``, against the shared cache, compiling nothing."""

    shape: int
    form: str
    ms: tuple[int, ...]


@dataclass(frozen=True)
class Compile:
    """Phase 2: make the call succeed, compiling each missing kernel through deep_gemm under its lock; ``expect``
    is the call's identified first kernel (None when it was never identified)."""

    shape: int
    form: str
    m: int
    expect: str | None


@dataclass(frozen=True)
class Plain:
    """The calls method: make the calls ``(shape, form, m)``, ``m`` in ``ms``, as deep_gemm would (compiling)."""

    shape: int
    form: str
    ms: tuple[int, ...]


@dataclass(frozen=True)
class Stop:
    """No more work: finish what was deferred and leave."""


WorkTask = Install | Probe | Compile | Plain | Stop


# --- answers ---------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Ready:
    """Worker ``wid`` is up; ``family``: the GPU family it sees (None when unknown)."""

    wid: int
    family: str | None


@dataclass(frozen=True)
class Identified:
    """``found``: ``(m, digest)`` of the calls ``(shape, form, m)``: the first kernel each needs."""

    wid: int
    shape: int
    form: str
    found: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class IdentifiedAll:
    """Worker ``wid`` took its turn: it identifies no more."""

    wid: int


@dataclass(frozen=True)
class Installed:
    """The answer to :class:`Install`: the kernel's ``status``, the seconds the call took and ``next``, the next
    kernel the call misses (None: the call is complete)."""

    wid: int
    shape: int
    form: str
    m: int
    digest: str
    status: Status
    seconds: float
    next: str | None


@dataclass(frozen=True)
class Probed:
    """The answer to :class:`Probe`: the M values whose calls found every kernel (``ok``) and, for each other one,
    ``(m, digest)`` of the first kernel it misses."""

    wid: int
    shape: int
    form: str
    ok: tuple[int, ...]
    missing: tuple[tuple[int, str], ...]


@dataclass(frozen=True)
class Compiled:
    """The answer to :class:`Compile`: ``met`` lists ``(digest, status, seconds)`` of the kernels the call met."""

    wid: int
    shape: int
    form: str
    m: int
    expect: str | None
    met: tuple[tuple[str, Status, float], ...]


@dataclass(frozen=True)
class PlainDone:
    """The answer to :class:`Plain`: every call was made."""

    wid: int
    shape: int
    form: str


@dataclass(frozen=True)
class Unhonored:
    """A call finished in an empty cache without running the stand-in compiler: this release does not build
    kernels through ``DG_JIT_NVCC_COMPILER``."""

    wid: int


@dataclass(frozen=True)
class CallError:
    """A call of ``(shape, form)`` failed, at ``m`` where known; ``why`` is ``"rejected"`` (dgcompat or deep_gemm
    refused its arguments) or the exception's type, ``text`` its message."""

    wid: int
    shape: int
    form: str
    m: int | None
    why: str
    text: str


@dataclass(frozen=True)
class Fatal:
    """Worker ``wid`` fails and exits: ``text`` names the exception, ``traceback`` is its traceback."""

    wid: int
    text: str
    traceback: str


Answer = Ready | Identified | IdentifiedAll | Installed | Probed | Compiled | PlainDone | Unhonored | CallError | Fatal
#: The answers to work-queue tasks (each ends one outstanding task).
WORK_ANSWERS = (Installed, Probed, Compiled, PlainDone)
