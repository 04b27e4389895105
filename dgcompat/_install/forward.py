"""Names outside the stable surface: looked up in the real deep_gemm module of the same name.

``dgcompat.<name>`` forwards to ``deep_gemm``, ``dgcompat.utils.<name>`` to ``deep_gemm.utils``,
``dgcompat.utils.layout.<name>`` to ``deep_gemm.utils.layout`` and so on; under
:func:`dgcompat.install_as_deep_gemm` the ``deep_gemm`` modules themselves forward the same way.
One lookup serves them all. It runs only for names dgcompat does not define, never on a stable
function's call path.

The backend is the one :mod:`dgcompat._backend` loads (the installed deep_gemm, or the reference
backend's module for the top level). When there is none, or it is unusable, the lookup raises
:class:`~dgcompat.errors.UnavailableNameError`, an ``AttributeError``, so ``hasattr`` probes keep
working.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from .. import _backend
from .. import detection
from .._backend import TOP
from ..errors import DgcompatError
from ..errors import UnavailableNameError

__all__ = ["lookup", "real_module"]


def real_module(name: str) -> ModuleType:
    """The backend's module ``name`` (``"deep_gemm"`` or one of its submodules), imported on first use.

    Raises :class:`UnavailableNameError` when deep_gemm is absent or unusable, or when ``name`` is a
    submodule and the backend is dgcompat's reference module (it has no submodules).
    """
    try:
        top = _backend.load()
    except DgcompatError as exc:
        raise UnavailableNameError(f"{name} is not available: {exc}") from exc
    if name == TOP:
        return top
    if top.__name__ != TOP:  # the reference backend (dgcompat.reference) stands in for the top level only
        raise UnavailableNameError(
            f"{name} does not exist on the {detection.backend_name()} backend; only dgcompat's stable names are served")
    try:
        return _backend.real_submodule(name)
    except ImportError as exc:
        raise UnavailableNameError(f"the installed deep_gemm has no module {name} ({exc})") from exc


def lookup(module: str, name: str) -> Any:
    """``getattr(real_module(module), name)``, with an error that names both when it is missing."""
    try:
        real = real_module(module)
    except UnavailableNameError as exc:
        raise UnavailableNameError(
            f"{module}.{name} is not part of dgcompat's stable surface, and there is no deep_gemm to pass it "
            f"through to: {exc}") from (exc.__cause__ or exc)
    try:
        return getattr(real, name)
    except AttributeError:
        raise AttributeError(
            f"{name!r} is neither part of dgcompat's stable surface nor present in {module} "
            f"({detection.backend_name()} backend)") from None
