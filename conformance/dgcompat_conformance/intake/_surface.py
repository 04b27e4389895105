"""Reading an extracted surface (:func:`dgcompat_conformance.surface.extract`): records, parameters, returns."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ..dists import KERNEL_DISTS, SGL_DEEP_GEMM

Surface = Mapping[str, Any]

SGL = SGL_DEEP_GEMM
_BUNDLING = KERNEL_DISTS
_DG = "deep_gemm."


def _dg(name: str) -> str:
    return _DG + name


def _record(surface: Surface, name: str) -> Mapping[str, Any] | None:
    """The Python record of ``deep_gemm.<name>`` (or ``_C.<op>``), None when absent or bound to None."""
    if name.startswith("_C."):
        op = (surface.get("native") or {}).get(name[3:])
        if op is None:
            return None
        # A native op seen directly: the same shape as a ``kind: native`` Python record.
        return {
            "kind": "native",
            "op": name[3:],
            "returns": op.get("returns"),
            "params": [{"name": p.get("name"), "kind": "positional", "default": p.get("default"),
                        "annotation": p.get("type")} for p in op.get("params") or []],
        }
    qualified = name if name.startswith(_DG) else _dg(name)
    rec = (surface.get("python") or {}).get(qualified)
    # deep_gemm binds some names to None where the feature is missing; a probe sees that as absent.
    if rec is None or rec.get("kind") == "none":
        return None
    result: Mapping[str, Any] = rec
    return result


def _params(rec: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((rec or {}).get("params") or [])


def _param(rec: Mapping[str, Any] | None, name: str) -> tuple[int, Mapping[str, Any]] | None:
    for i, p in enumerate(_params(rec)):
        if p.get("name") == name:
            return i, p
    return None


def _first_present(surface: Surface, *names: str) -> str | None:
    for name in names:
        if _record(surface, name) is not None:
            return name
    return None


def _returned_op(rec: Mapping[str, Any]) -> str | None:
    """The op whose result ``rec`` hands back unchanged, or None (returns nothing, or wraps it)."""
    if rec.get("kind") == "native":
        return str(rec.get("op"))
    m = re.fullmatch(r"_C\.(\w+)", str(rec.get("returns") or ""))
    return m.group(1) if m else None


def _schema_result(surface: Surface, op: str, rec: Mapping[str, Any]) -> str:
    """What a native op returns, in the table's vocabulary (``none``, ``tuple``, ``native-result``)."""
    returns = rec.get("returns") if rec.get("kind") == "native" else ((surface.get("native") or {}).get(op) or {}).get("returns")
    if returns is None:  # tvm-ffi ops carry no schema: the caller gets whatever the function returns
        return "native-result"
    text = str(returns).replace(" ", "")
    if text == "()":
        return "none"
    if text.startswith("(") and "," in text:
        return "tuple"
    return "native-result"
