"""The ``DGCOMPAT_*`` environment variables: the one list of them, read and validated in one place.

A public leaf: engines and dgcompat's own packages beside the facade (:mod:`dgcompat.jit_warmup`) read
a variable the way the runtime does (:func:`backend`, :func:`folder`, ...), check a folder the way a
folder variable is checked (:func:`folder_problem`), or report them all (:func:`env_report`).

:data:`VARIABLES` lists every ``DGCOMPAT_*`` variable any part of dgcompat reads, each once, with who
reads it (:attr:`Variable.read_by`): the runtime, the start-up hook of ``python -m dgcompat run``,
warmup, or only the tools (the ``dgcompat`` command, the GPU runner, the benchmarks; the certification
wing reads its own through :func:`folder`, this runtime leaf never importing it). ``dgcompat doctor``
renders its table from it; :data:`RETIRED` names variables that no longer do anything and
:data:`INTERNAL_PREFIXES` the ones dgcompat sets for its own children, so that doctor calls
nothing else misspelt.

Each variable is read when a call needs it (never at ``import dgcompat``): the backend choice when
the backend is first loaded, the architecture when capabilities are computed, the switches when a
stable function is bound. An unknown value raises :class:`~dgcompat.errors.ConfigurationError`
naming the variable and the values it accepts; an unset or empty variable means the default.

========================================  =====================================================
``DGCOMPAT_BACKEND``                      ``auto`` (default: the installed deep_gemm),
                                          ``deep_gemm`` (also ``deep-gemm``), ``reference``,
                                          ``vllm``, ``tensorrt-llm``
``DGCOMPAT_ARCH``                         ``sm90``, ``sm100``, ... (see :data:`ARCHES`; also
                                          ``90``, ``9.0``, ...): plan for that architecture
``DGCOMPAT_DEBUG``                        ``0`` / ``1``: value checks that read device memory
                                          (bound into the stable functions at bind time)
``DGCOMPAT_ALLOW_TORCH_MISMATCH``         ``0`` / ``1``: import a deep_gemm built for another torch
``DGCOMPAT_INSTALL``                      ``0`` / ``1``: the start-up hook of ``python -m dgcompat run``
                                          installs dgcompat as deep_gemm
``DGCOMPAT_JIT_CACHE_ROOT``               a folder: root of warmup's per-release JIT caches
``DGCOMPAT_CACHE``                        a folder: the tools' wheel cache (``~/.cache/dgcompat``)
``DGCOMPAT_RESULTS``                      a folder: the tools' run output (``<cache>/results``)
``DGCOMPAT_SOURCE_COMMIT``                the commit results record where the source has no git
========================================  =====================================================

Switches take ``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off`` (any case, blanks
around ignored); anything else is refused. A folder variable must name a folder this process can
write, or one it can create.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from collections.abc import Mapping
from pathlib import Path
from typing import Literal
from typing import NamedTuple

from .errors import ConfigurationError

__all__ = ["ARCHES", "BACKENDS", "BACKEND_ALIASES", "SWITCH_VALUES", "Variable", "EnvRow", "backend", "backend_or_raw",
           "arch", "debug", "allow_torch_mismatch", "install", "folder", "folder_problem", "env_report", "VARIABLES",
           "RETIRED", "INTERNAL_PREFIXES"]

Backend = Literal["auto", "deep_gemm", "reference", "vllm", "tensorrt-llm"]

#: The ``DGCOMPAT_BACKEND`` values (the one definition of the backend vocabulary): ``vllm`` and
#: ``tensorrt-llm`` select the deep_gemm copy that engine vendors (:data:`dgcompat.detection.VENDORED`).
BACKENDS: tuple[Backend, ...] = ("auto", "deep_gemm", "reference", "vllm", "tensorrt-llm")
#: Other spellings of those values.
BACKEND_ALIASES: dict[str, Backend] = {"deep-gemm": "deep_gemm", "tensorrt_llm": "tensorrt-llm",
                                       "trtllm": "tensorrt-llm"}

#: ``smXY`` names dgcompat plans for -> their family (the key of the table's per-architecture values).
ARCHES: dict[str, str] = {"sm90": "sm90", "sm90a": "sm90", "sm100": "sm100", "sm100a": "sm100", "sm103": "sm100",
                          "sm110": "sm100", "sm120": "sm120", "sm121": "sm120"}

_BACKENDS: dict[str, Backend] = {**{b: b for b in BACKENDS}, **BACKEND_ALIASES}
#: The spellings a switch takes (case-insensitive, surrounding blanks ignored).
SWITCH_VALUES: dict[str, bool] = {"1": True, "true": True, "yes": True, "on": True,
                                  "0": False, "false": False, "no": False, "off": False}

Reader = Literal["runtime", "start-up hook", "warmup", "tools"]


class Variable(NamedTuple):
    """One ``DGCOMPAT_*`` variable dgcompat reads."""

    name: str
    read_by: Reader
    """``"runtime"`` (the engine's process, at the first call that needs it), ``"start-up hook"`` (every
    interpreter ``python -m dgcompat run`` starts), ``"warmup"`` (:mod:`dgcompat.jit_warmup`, in the engine's
    process or ``dgcompat warmup``) or ``"tools"`` (the ``dgcompat`` command, the GPU runner, the benchmarks;
    never the engine)."""
    accepted: tuple[str, ...]
    """The values it takes (any case, blanks around ignored); empty for a folder (:func:`folder_problem`)."""
    default: str
    """What unset (or empty) means."""
    effect: str


_SWITCH = tuple(SWITCH_VALUES)

#: Every ``DGCOMPAT_*`` variable dgcompat reads, each once: the one list (doctor's table, the launcher's
#: check, :class:`~dgcompat.errors.ConfigurationError`'s accepted values).
VARIABLES: dict[str, Variable] = {v.name: v for v in (
    Variable("DGCOMPAT_BACKEND", "runtime", BACKENDS, "auto",
             "which deep_gemm the stable functions call (reference: dgcompat's pure-torch backend)"),
    Variable("DGCOMPAT_ARCH", "runtime", tuple(ARCHES), "the current CUDA device", "the architecture planning assumes"),
    Variable("DGCOMPAT_DEBUG", "runtime", _SWITCH, "0", "value checks that read device memory (synchronizes)"),
    Variable("DGCOMPAT_ALLOW_TORCH_MISMATCH", "runtime", _SWITCH, "0",
             "import a deep_gemm whose native library was built for another torch"),
    Variable("DGCOMPAT_INSTALL", "start-up hook", _SWITCH, "0",
             "install dgcompat as deep_gemm at interpreter start-up (set by python -m dgcompat run)"),
    Variable("DGCOMPAT_JIT_CACHE_ROOT", "warmup", (), "DG_JIT_CACHE_DIR, else ~/.deep_gemm",
             "the folder holding warmup's per-release JIT caches (--isolate, jit_cache_dir(isolate=True))"),
    Variable("DGCOMPAT_CACHE", "tools", (), "~/.cache/dgcompat", "the wheel cache and the CPU tier's work folder"),
    Variable("DGCOMPAT_RESULTS", "tools", (), "<cache>/results",
             "where conform, the GPU runner and the benchmarks write their results"),
    Variable("DGCOMPAT_SOURCE_COMMIT", "tools", (), "the checkout's git commit",
             "the dgcompat commit certificates and benchmark results record where the source is a copied tree "
             "without git (e.g. a GPU machine's copy of the checkout)"),
)}

#: variable -> what became of it; set or not, it has no effect.
RETIRED: dict[str, str] = {
    "DGCOMPAT_TRUST_SCHEDULES": "retired, no effect: every paged-MQA schedule is derived or checked by dgcompat",
}

#: prefix -> who sets it: variables dgcompat sets for its own child processes (not for users to set).
INTERNAL_PREFIXES: dict[str, str] = {
    "DGCOMPAT_CONFORMANCE_": "the CPU tier, for its child",
    "DGCOMPAT_WARMUP_": "warmup, for its workers",
    "DGCOMPAT_CASES_": "the GPU runner, for its case children",
    "DGCOMPAT_PROPERTY_": "the property suites (examples per entry point)",
}


def _raw(name: str, environ: Mapping[str, str] | None) -> str:
    return (os.environ if environ is None else environ).get(name, "").strip()


def backend(environ: Mapping[str, str] | None = None) -> Backend:
    """``DGCOMPAT_BACKEND``: ``"auto"`` when unset."""
    raw = _raw("DGCOMPAT_BACKEND", environ)
    if not raw:
        return "auto"
    found = _BACKENDS.get(raw.lower())
    if found is None:
        raise ConfigurationError("DGCOMPAT_BACKEND", raw, VARIABLES["DGCOMPAT_BACKEND"].accepted)
    return found


def backend_or_raw() -> str:
    """``DGCOMPAT_BACKEND`` normalized, never raising: an unknown value comes back as given (lower case).

    For detection, which must describe the install whatever the variable says; binding validates.
    """
    raw = _raw("DGCOMPAT_BACKEND", None).lower()
    return _BACKENDS.get(raw, raw) if raw else "auto"


def _arch_name(raw: str) -> str | None:
    text = raw.lower()
    if not text.startswith("sm"):
        text = "sm" + text.replace(".", "")
    return text if text in ARCHES else None


def arch(environ: Mapping[str, str] | None = None) -> str | None:
    """``DGCOMPAT_ARCH`` as ``smXY`` (``"9.0"`` and ``"90"`` mean ``sm90``), or None when unset."""
    raw = _raw("DGCOMPAT_ARCH", environ)
    if not raw:
        return None
    name = _arch_name(raw)
    if name is None:
        raise ConfigurationError("DGCOMPAT_ARCH", raw, VARIABLES["DGCOMPAT_ARCH"].accepted)
    return name


def _switch(name: str, environ: Mapping[str, str] | None) -> bool:
    raw = _raw(name, environ)
    if not raw:
        return False
    value = SWITCH_VALUES.get(raw.lower())
    if value is None:
        raise ConfigurationError(name, raw, VARIABLES[name].accepted)
    return value


def debug(environ: Mapping[str, str] | None = None) -> bool:
    """``DGCOMPAT_DEBUG=1``. Read when a stable function is bound, so set it before the first call."""
    return _switch("DGCOMPAT_DEBUG", environ)


def allow_torch_mismatch(environ: Mapping[str, str] | None = None) -> bool:
    """``DGCOMPAT_ALLOW_TORCH_MISMATCH=1``."""
    return _switch("DGCOMPAT_ALLOW_TORCH_MISMATCH", environ)


def install(environ: Mapping[str, str] | None = None) -> bool:
    """``DGCOMPAT_INSTALL=1``: the start-up hook of ``python -m dgcompat run`` installs dgcompat as deep_gemm."""
    return _switch("DGCOMPAT_INSTALL", environ)


def folder_problem(path: Path, *, write: bool = True) -> str | None:
    """Why ``path`` is neither a folder this process can write (with ``write=False``: an existing folder it can
    read) nor one it can create (its nearest existing ancestor decides), or None."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if probe.exists() and not probe.is_dir():
        return "it is a file, not a folder" if probe == path else f"its parent {probe} is a file, not a folder"
    if probe == path and not write:
        return None if os.access(path, os.R_OK | os.X_OK) else f"{path} is not readable"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def text(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """A free-text variable of :data:`VARIABLES` (blanks around removed), or None when unset or blank."""
    if VARIABLES[name].accepted:
        raise KeyError(f"{name} takes fixed values")
    return _raw(name, environ) or None


def folder(name: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """A folder variable of :data:`VARIABLES` (``~`` expanded), or None when unset; never checked here (the
    command that writes there names a bad one; doctor reports it)."""
    if VARIABLES[name].accepted:
        raise KeyError(f"{name} is not a folder variable")
    raw = _raw(name, environ)
    return Path(raw).expanduser() if raw else None


class EnvRow(NamedTuple):
    """One variable of :data:`VARIABLES` as :func:`env_report` sees it."""

    name: str
    value: str | None
    """As set (None when unset)."""
    ok: bool
    accepted: tuple[str, ...]
    """The values it takes; empty for a folder."""
    read_by: Reader
    meaning: str
    """``"unset (default: ...)"``, ``"accepted"``, or why the value is refused."""
    effect: str


_READERS: dict[str, Callable[[Mapping[str, str] | None], object]] = {
    "DGCOMPAT_BACKEND": backend, "DGCOMPAT_ARCH": arch, "DGCOMPAT_DEBUG": debug,
    "DGCOMPAT_ALLOW_TORCH_MISMATCH": allow_torch_mismatch, "DGCOMPAT_INSTALL": install}


def _judge(var: Variable, value: str, environ: Mapping[str, str] | None) -> str | None:
    if not var.accepted:
        return folder_problem(Path(value.strip()).expanduser())
    try:
        _READERS[var.name](environ)
    except ConfigurationError:
        return f"{value!r} is not one of {', '.join(var.accepted)}"
    return None


def env_report(environ: Mapping[str, str] | None = None) -> list[EnvRow]:
    """Every variable of :data:`VARIABLES`, in that order: its value and whether it is accepted (never raises).

    ``environ``: the environment to judge (default: this process's).
    """
    source = os.environ if environ is None else environ
    rows = []
    for name, var in VARIABLES.items():
        value = source.get(name)
        if value is None or not value.strip():
            rows.append(EnvRow(name, value, True, var.accepted, var.read_by, f"unset (default: {var.default})",
                               var.effect))
            continue
        problem = _judge(var, value, environ)
        rows.append(EnvRow(name, value, problem is None, var.accepted, var.read_by, problem or "accepted", var.effect))
    return rows
