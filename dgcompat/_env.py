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
========================================  =====================================================

Variables of earlier releases that no longer do anything are listed in :data:`RETIRED`, so that
``dgcompat doctor`` can say so instead of calling them misspelt.
"""

from __future__ import annotations

import os
from typing import Literal, NamedTuple

from .errors import ConfigurationError

__all__ = ["ARCHES", "EnvRow", "backend", "arch", "debug", "allow_torch_mismatch",
           "env_report", "VARIABLES", "RETIRED"]

Backend = Literal["auto", "deep_gemm", "reference", "vllm", "tensorrt-llm"]

#: ``smXY`` names dgcompat plans for -> their family (the key of the table's per-architecture values).
ARCHES: dict[str, str] = {"sm90": "sm90", "sm90a": "sm90", "sm100": "sm100", "sm100a": "sm100", "sm103": "sm100",
                          "sm110": "sm100", "sm120": "sm120", "sm121": "sm120"}

# ``vllm`` / ``tensorrt-llm`` select the deep_gemm copy that engine vendors (detection.VENDORED).
_BACKENDS: dict[str, Backend] = {"auto": "auto", "deep_gemm": "deep_gemm", "deep-gemm": "deep_gemm",
                                 "reference": "reference", "vllm": "vllm", "tensorrt-llm": "tensorrt-llm",
                                 "tensorrt_llm": "tensorrt-llm", "trtllm": "tensorrt-llm"}
_SWITCH = {"0": False, "1": True}

#: variable -> the values it accepts (for messages and :func:`env_report`).
VARIABLES: dict[str, tuple[str, ...]] = {
    "DGCOMPAT_BACKEND": ("auto", "deep_gemm", "reference", "vllm", "tensorrt-llm"),
    "DGCOMPAT_ARCH": tuple(ARCHES),
    "DGCOMPAT_DEBUG": ("0", "1"),
    "DGCOMPAT_ALLOW_TORCH_MISMATCH": ("0", "1"),
}

#: variable -> what became of it; set or not, it has no effect.
RETIRED: dict[str, str] = {
    "DGCOMPAT_TRUST_SCHEDULES": "retired, no effect: every paged-MQA schedule is derived or checked by dgcompat",
}


def _raw(name: str) -> str:
    return os.environ.get(name, "").strip()


def backend() -> Backend:
    """``DGCOMPAT_BACKEND``: ``"auto"`` when unset."""
    raw = _raw("DGCOMPAT_BACKEND")
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
    raw = _raw("DGCOMPAT_BACKEND").lower()
    return _BACKENDS.get(raw, raw) if raw else "auto"


def _arch_name(raw: str) -> str | None:
    text = raw.lower()
    if not text.startswith("sm"):
        text = "sm" + text.replace(".", "")
    return text if text in ARCHES else None


def arch() -> str | None:
    """``DGCOMPAT_ARCH`` as ``smXY`` (``"9.0"`` and ``"90"`` mean ``sm90``), or None when unset."""
    raw = _raw("DGCOMPAT_ARCH")
    if not raw:
        return None
    name = _arch_name(raw)
    if name is None:
        raise ConfigurationError("DGCOMPAT_ARCH", raw, VARIABLES["DGCOMPAT_ARCH"])
    return name


def _switch(name: str) -> bool:
    raw = _raw(name)
    if not raw:
        return False
    value = _SWITCH.get(raw)
    if value is None:
        raise ConfigurationError(name, raw, VARIABLES[name])
    return value


def debug() -> bool:
    """``DGCOMPAT_DEBUG=1``. Read when a stable function is bound, so set it before the first call."""
    return _switch("DGCOMPAT_DEBUG")


def allow_torch_mismatch() -> bool:
    """``DGCOMPAT_ALLOW_TORCH_MISMATCH=1``."""
    return _switch("DGCOMPAT_ALLOW_TORCH_MISMATCH")


class EnvRow(NamedTuple):
    """One variable as :func:`env_report` sees it: ``value`` None when unset."""

    name: str
    value: str | None
    ok: bool
    accepted: tuple[str, ...]


def env_report() -> list[EnvRow]:
    """Every ``DGCOMPAT_*`` variable dgcompat reads, its value, and whether it is accepted (never raises)."""
    readers = {"DGCOMPAT_BACKEND": backend, "DGCOMPAT_ARCH": arch, "DGCOMPAT_DEBUG": debug,
               "DGCOMPAT_ALLOW_TORCH_MISMATCH": allow_torch_mismatch}
    rows = []
    for name, accepted in VARIABLES.items():
        value = os.environ.get(name)
        try:
            readers[name]()
            ok = True
        except ConfigurationError:
            ok = False
        rows.append(EnvRow(name, value, ok, accepted))
    return rows
