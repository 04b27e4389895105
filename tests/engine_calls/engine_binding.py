"""How the copied engine modules (``third_party/vllm_0_34.py``, ``third_party/sglang_0_5_23.py``) get their
``deep_gemm``.

Two ways an engine reaches dgcompat, and the call-site tests run both:

- ``install``: dgcompat was installed as ``deep_gemm`` (``dgcompat.install_as_deep_gemm()``, what the
  conformance harness child's ``--dropin`` does before anything imports deep_gemm). The engine module is
  imported unchanged: its ``import deep_gemm`` gets dgcompat's facade.
- ``alias``: no install; the engine is edited to ``import dgcompat as deep_gemm``. The module's source is
  not edited here: it is executed with an ``__import__`` (and an ``importlib`` / ``importlib.util``) that
  resolve the name ``deep_gemm`` (and ``deep_gemm.<sub>``) to ``dgcompat`` (``dgcompat.<sub>``), which is
  what that edit does to every way the module names deep_gemm to the import system (``import deep_gemm``,
  ``from deep_gemm import x``, ``importlib.import_module("deep_gemm")``, ``importlib.util.find_spec(...)``).

:func:`binding` says which one this process uses: ``install`` when dgcompat is installed as deep_gemm,
``alias`` otherwise. ``ENGINE_CALLS_BINDING=raw`` makes it ``raw``: the engine modules import deep_gemm
itself, no dgcompat between (for comparison: what the engines get from a build without dgcompat).
"""

from __future__ import annotations

import builtins
import importlib
import importlib.util
import os
import sys
import types
from pathlib import Path
from typing import Any

__all__ = ["binding", "load"]

_HERE = Path(__file__).resolve().parent


def binding() -> str:
    """``"install"``, ``"alias"`` or ``"raw"`` (see the module documentation)."""
    if os.environ.get("ENGINE_CALLS_BINDING") == "raw":
        return "raw"
    import dgcompat

    return "install" if dgcompat.installed_as_deep_gemm() else "alias"


def _alias(name: str) -> str:
    if name == "deep_gemm" or name.startswith("deep_gemm."):
        return "dgcompat" + name[len("deep_gemm"):]
    return name


def _aliasing_import(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:  # noqa: A002 - __import__'s
    if level == 0 and name == "importlib":
        return _IMPORTLIB
    if level == 0 and name == "importlib.util" and not fromlist:
        return _IMPORTLIB
    if level == 0 and name == "importlib.util":
        return _IMPORTLIB_UTIL
    return builtins.__import__(_alias(name) if level == 0 else name, globals, locals, fromlist, level)


def _find_spec(name: str, package: str | None = None) -> Any:
    return importlib.util.find_spec(_alias(name), package)


def _import_module(name: str, package: str | None = None) -> Any:
    return importlib.import_module(_alias(name), package)


class _Proxy(types.ModuleType):
    """A module that forwards every name to ``target`` except the ones set on it."""

    def __init__(self, name: str, target: types.ModuleType) -> None:
        super().__init__(name)
        self._target = target

    def __getattr__(self, attr: str) -> Any:
        return getattr(self._target, attr)


_IMPORTLIB_UTIL = _Proxy("importlib.util", importlib.util)
_IMPORTLIB_UTIL.find_spec = _find_spec  # type: ignore[attr-defined]
_IMPORTLIB = _Proxy("importlib", importlib)
_IMPORTLIB.import_module = _import_module  # type: ignore[attr-defined]
_IMPORTLIB.util = _IMPORTLIB_UTIL  # type: ignore[attr-defined]


def load(name: str) -> types.ModuleType:
    """The engine module ``third_party/<name>.py`` (code copied from an engine's wheel), bound to deep_gemm as
    :func:`binding` says.

    Loaded once per process and binding (``sys.modules["engine_calls.<binding>.<name>"]``).
    """
    mode = binding()
    key = f"engine_calls.{mode}.{name}"
    if key in sys.modules:
        return sys.modules[key]
    path = _HERE / "third_party" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(key, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    if mode == "alias":
        module.__dict__["__builtins__"] = dict(builtins.__dict__, __import__=_aliasing_import)
    sys.modules[key] = module  # dataclasses resolve the module by name while it executes
    try:
        if mode == "alias":
            exec(compile(path.read_text(), str(path), "exec"), module.__dict__)
        else:
            spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[key]
        raise
    return module
