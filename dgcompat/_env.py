"""The ``DGCOMPAT_*`` environment variables: read and validated in one place.

Each variable is read when a call needs it (never at ``import dgcompat``): the backend choice when
the backend is first loaded, the architecture when capabilities are computed, the switches when a
stable function is bound. An unknown value raises :class:`~dgcompat.errors.ConfigurationError`
naming the variable and the values it accepts; an unset or empty variable means the default.

========================================  =====================================================
``DGCOMPAT_BACKEND``                      ``auto`` (default: the installed deep_gemm),
                                          ``deep_gemm`` (also ``deep-gemm``), ``reference``
``DGCOMPAT_ARCH``                         ``sm90``, ``sm100``, ... (see :data:`ARCHES`; also
                                          ``90``, ``9.0``, ...): plan for that architecture
``DGCOMPAT_DEBUG``                        ``0`` / ``1``: value checks that read device memory
                                          (bound into the stable functions at bind time)
``DGCOMPAT_ALLOW_TORCH_MISMATCH``         ``0`` / ``1``: import a deep_gemm built for another torch
``DGCOMPAT_INSTALL``                      ``0`` / ``1``: the start-up hook of ``python -m dgcompat run``
                                          installs dgcompat as deep_gemm
========================================  =====================================================

Switches take ``1``/``true``/``yes``/``on`` and ``0``/``false``/``no``/``off`` (any case, blanks
around ignored); anything else is refused.

Variables of earlier releases that no longer do anything are listed in :data:`RETIRED`, so that
``dgcompat doctor`` can say so instead of calling them misspelt.
"""

from __future__ import annotations

import os
from typing import Callable, Literal, Mapping, NamedTuple

from .errors import ConfigurationError

__all__ = ["ARCHES", "BACKENDS", "BACKEND_ALIASES", "SWITCH_VALUES", "EnvRow", "backend", "backend_or_raw", "arch",
           "debug", "allow_torch_mismatch", "install", "env_report", "VARIABLES", "RETIRED"]

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

#: variable -> the values it accepts (for messages and :func:`env_report`).
VARIABLES: dict[str, tuple[str, ...]] = {
    "DGCOMPAT_BACKEND": BACKENDS,
    "DGCOMPAT_ARCH": tuple(ARCHES),
    "DGCOMPAT_DEBUG": tuple(SWITCH_VALUES),
    "DGCOMPAT_ALLOW_TORCH_MISMATCH": tuple(SWITCH_VALUES),
    "DGCOMPAT_INSTALL": tuple(SWITCH_VALUES),
}

#: variable -> what became of it; set or not, it has no effect.
RETIRED: dict[str, str] = {
    "DGCOMPAT_TRUST_SCHEDULES": "retired, no effect: every paged-MQA schedule is derived or checked by dgcompat",
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
        raise ConfigurationError("DGCOMPAT_BACKEND", raw, VARIABLES["DGCOMPAT_BACKEND"])
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
        raise ConfigurationError("DGCOMPAT_ARCH", raw, VARIABLES["DGCOMPAT_ARCH"])
    return name


def _switch(name: str, environ: Mapping[str, str] | None) -> bool:
    raw = _raw(name, environ)
    if not raw:
        return False
    value = SWITCH_VALUES.get(raw.lower())
    if value is None:
        raise ConfigurationError(name, raw, VARIABLES[name])
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


class EnvRow(NamedTuple):
    """One variable as :func:`env_report` sees it: ``value`` None when unset."""

    name: str
    value: str | None
    ok: bool
    accepted: tuple[str, ...]


def env_report(environ: Mapping[str, str] | None = None) -> list[EnvRow]:
    """Every ``DGCOMPAT_*`` variable dgcompat reads, its value, and whether it is accepted (never raises).

    ``environ``: the environment to judge (default: this process's).
    """
    readers: dict[str, Callable[[Mapping[str, str] | None], object]] = {
        "DGCOMPAT_BACKEND": backend, "DGCOMPAT_ARCH": arch, "DGCOMPAT_DEBUG": debug,
        "DGCOMPAT_ALLOW_TORCH_MISMATCH": allow_torch_mismatch, "DGCOMPAT_INSTALL": install}
    source = os.environ if environ is None else environ
    rows = []
    for name, accepted in VARIABLES.items():
        value = source.get(name)
        try:
            readers[name](environ)
            ok = True
        except ConfigurationError:
            ok = False
        rows.append(EnvRow(name, value, ok, accepted))
    return rows
