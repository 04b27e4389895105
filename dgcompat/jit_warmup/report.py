"""What a warmup hands back: the report, one entry per kernel, and the error of a warmup that failed."""

from __future__ import annotations

from dataclasses import asdict
from dataclasses import dataclass
from typing import Any
from typing import Literal

from ..errors import DgcompatError

__all__ = ["WarmupError", "WarmupInterrupted", "KernelEntry", "WarmupReport"]


class WarmupError(DgcompatError):
    """A warmup worker failed (a compile error, a crashed worker, no compiler): nothing was left half
    written in the cache (deep_gemm renames finished entries into place), but the warmup is incomplete."""


class WarmupInterrupted(BaseException):
    """``SIGTERM`` or ``SIGHUP`` arrived during a warmup (raised in the main thread, like ``KeyboardInterrupt`` for
    ``SIGINT``, and like it not an ``Exception``): the workers and NVCC runs were stopped and the scratch folder
    removed on the way out; the kernels compiled before are in the cache, and the same warmup run again
    continues from them. ``signum``: the signal."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"warmup interrupted by signal {signum}")


@dataclass(frozen=True)
class KernelEntry:
    """One distinct kernel: its digest, whether this warmup compiled it or found it, and the call that
    stands for it."""

    identity: str
    status: Literal["compiled", "cached"]
    call: str
    seconds: float


@dataclass(frozen=True)
class WarmupReport:
    """What :func:`~dgcompat.jit_warmup.warmup` did.

    ``method``: ``"stand-in"`` (kernels told apart by the stand-in compiler; counts exact),
    ``"calls"`` (real calls, one shape per worker; ``compiled`` counts new cache entries, which can
    include entries other processes wrote meanwhile), ``"record"`` (an identical complete warmup was
    recorded and its entries are all present: nothing ran) or ``"none"`` (the reference backend:
    nothing to compile). ``kernels`` = distinct kernels found; ``compiled + cached == kernels`` for ``stand-in``.
    ``workers``: kernels compiled at once; ``processes``: worker processes (identify and install calls).
    Times in seconds from the start of the call: ``wall_s`` the whole call, ``first_up_s`` / ``start_s``
    until the first / every worker had started (imported torch and deep_gemm), ``identify_s`` until
    every representative call was identified, ``compile_s`` until the last kernel compiled in the calling
    process was installed (the verify pass runs alongside; what is left after that is the verify pass and
    the kernels only it or another process's lock left to the workers).

    ``calls``: the calls the description stands for, each (shape, M, scale form); ``identified``: how many of
    them were identified (one per M class and shape, :mod:`dgcompat.jit_warmup.classes`); ``verified``: how
    many then ran against the warmed folder and found every kernel (all of them, with ``verify``);
    ``verify_kernels``: kernels only the verify pass met (a class coarser than the release's kernel choice;
    compiled all the same). ``policy``: which M values the warmup covered and what it can miss;
    ``forms``: the FP8 activation-scale forms warmed. ``nvcc_s`` / ``nvcc_runs``: the NVCC runs of the calling
    process, their seconds added up (:attr:`floor_s`: the shortest cold warmup they allow);
    ``first_compile_s``: when the first of them started (identification starts with the first worker up).
    """

    release: str
    method: Literal["stand-in", "calls", "record", "none"]
    cache_dir: str
    workers: int
    calls: int
    kernels: int
    compiled: int
    cached: int
    wall_s: float
    identify_s: float
    start_s: float = 0.0
    entries: tuple[KernelEntry, ...] = ()
    notes: tuple[str, ...] = ()
    processes: int = 0
    first_up_s: float = 0.0
    compile_s: float = 0.0
    identified: int = 0
    verified: int = 0
    verify_kernels: int = 0
    policy: str = ""
    forms: tuple[str, ...] = ()
    nvcc_s: float = 0.0
    nvcc_runs: int = 0
    first_compile_s: float = 0.0

    @property
    def floor_s(self) -> float:
        """The shortest cold warmup these compiles allow: ``nvcc_s / workers`` (every compile slot busy) after
        the first worker is up (no kernel is known before). 0 where nothing was compiled here."""
        return self.nvcc_s / self.workers + self.first_up_s if self.nvcc_s and self.workers else 0.0

    @property
    def compiled_ids(self) -> tuple[str, ...]:
        return tuple(e.identity for e in self.entries if e.status == "compiled")

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        head = (f"dgcompat warmup [{self.release}, {self.method}]: {self.calls} calls ({self.identified} identified, "
                f"{self.verified} verified against the folder), {self.kernels} distinct kernels: {self.compiled} "
                f"compiled, {self.cached} found in the cache; {self.wall_s:.1f} s wall ({self.phases()}) with "
                f"{self.workers} compiles at once in {self.processes} worker processes; cache {self.cache_dir}")
        extra = [f"  M values: {self.policy}"] if self.policy else []
        if self.forms:
            extra.append(f"  FP8 scale forms: {', '.join(self.forms)}")
        return "\n".join([head, *extra, *(f"  note: {n}" for n in self.notes)])

    def phases(self) -> str:
        """Where the time went, e.g. ``workers up 1.2-2.0 s, identified 2.4 s, compiled 9.8 s; NVCC 84.0 s in 21
        runs, floor 7.3 s``."""
        text = f"workers up {self.first_up_s:.1f}-{self.start_s:.1f} s, "
        if self.first_compile_s:
            text += f"first compile {self.first_compile_s:.1f} s, "
        text += f"identified {self.identify_s:.1f} s, compiled {self.compile_s:.1f} s"
        if self.nvcc_runs:
            text += (f"; NVCC {self.nvcc_s:.1f} s in {self.nvcc_runs} runs, floor {self.floor_s:.1f} s (NVCC s / "
                     f"{self.workers} at once + first worker up)")
        return text

    def __str__(self) -> str:
        return self.summary()
