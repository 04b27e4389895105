"""The parameters of a deep_gemm build's Python functions, read from its source without importing it.

Two builds can carry one ``__version__`` and different signatures (vLLM 0.33.0's and 0.34.0's vendored
DeepGEMM 2.8.1 both say ``"2.8.1"``; 0.34.0 inserted ``logits_dtype`` into both MQA-logits functions), so
the capability table asks the build itself what a function takes. Before deep_gemm is imported (detection
must not import it: its import initializes native code) the answer comes from the package's source:

- every ``def`` in ``__init__.py`` and ``_C.py`` at any depth (upstream 2.8.1 defines its wrappers inside
  ``_register_deep_gemm_kernels()`` in ``_C.py``), and
- the names a ``globals().update({"name": function, ...})`` dict literal gives them (2.8.1 registers
  ``fp8_gemm_nt`` as its ``fp8_fp4_gemm_nt``).

After import, :func:`live_parameters` reads the loaded function itself (a Python function's signature or a
torch op's schema). A leaf: it imports only the standard library.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from pathlib import Path
from typing import Any, Iterable

__all__ = ["SOURCES", "source_parameters", "live_parameters", "digest"]

#: The files of a deep_gemm package whose functions are read (relative to the package folder).
SOURCES = ("__init__.py", "_C.py")

#: Bytes read of one source file at most (a deep_gemm ``__init__.py`` is a few tens of kilobytes).
_LIMIT = 1 << 21


def _params(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if a.vararg is not None:
        names.append("*" + a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg is not None:
        names.append("**" + a.kwarg.arg)
    return tuple(names)


def _registered(tree: ast.AST) -> dict[str, str]:
    """``{"exported name": "function name"}`` from ``globals().update({...})`` dict literals."""
    out: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
                and isinstance(node.func.value, ast.Call) and isinstance(node.func.value.func, ast.Name)
                and node.func.value.func.id == "globals" and node.args and isinstance(node.args[0], ast.Dict)):
            continue
        for key, value in zip(node.args[0].keys, node.args[0].values):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Name):
                out[key.value] = value.id
    return out


def _read(path: Path) -> ast.AST | None:
    try:
        with path.open("rb") as f:
            data = f.read(_LIMIT + 1)
    except OSError:
        return None
    if len(data) > _LIMIT:
        return None
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def source_parameters(pkg_dir: str | Path, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The parameter names of each of ``names`` the package at ``pkg_dir`` defines in Python source.

    A name the sources do not define (a native op bound directly, or absent) is left out. Where a name is
    defined more than once (a fallback ``def`` under ``try``/``except``) the last definition in file order
    wins, as at import; ``__init__.py`` is read after ``_C.py`` (it imports from it and may redefine).
    Unreadable or unparsable files contribute nothing.
    """
    wanted = set(names)
    found: dict[str, tuple[str, ...]] = {}
    for rel in reversed(SOURCES):  # _C.py first, then __init__.py
        tree = _read(Path(pkg_dir) / rel)
        if tree is None:
            continue
        defs: dict[str, tuple[str, ...]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = _params(node)
        for name in wanted & defs.keys():
            found[name] = defs[name]
        for exported, fn in _registered(tree).items():
            if exported in wanted and fn in defs:
                found[exported] = defs[fn]
    return found


def live_parameters(obj: Any) -> tuple[str, ...] | None:
    """The parameter names of a loaded callable: a Python function's signature, or a torch op's schema
    (``torch.ops`` packets expose ``_schemas``); None when neither can be read."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        kinds = inspect.Parameter
        return tuple(("*" if p.kind is kinds.VAR_POSITIONAL else "**" if p.kind is kinds.VAR_KEYWORD else "") + p.name
                     for p in sig.parameters.values())
    schemas = getattr(obj, "_schemas", None)
    if isinstance(schemas, dict) and len(schemas) == 1:
        schema = next(iter(schemas.values()))
        args = getattr(schema, "arguments", None)
        if args is not None:
            return tuple(str(a.name) for a in args)
    return None


def digest(surface: Iterable[tuple[str, tuple[str, ...]]]) -> str:
    """A short, stable id of ``(name, parameters)`` pairs (12 hex digits), independent of their order."""
    text = "\n".join(f"{name}({', '.join(params)})" for name, params in sorted(surface))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
