"""A release's native signatures, recovered from its binary, and checks of a call against them.

The signatures come from :func:`dgcompat_conformance.surface.native.scan_native_library`, which reads the
``__tvm_ffi_*`` exports and demangled ``dg_*`` symbols of tvm-ffi builds, or the registered
schema strings of TORCH_LIBRARY builds, from the bytes of the shared object (never loading it).

The stand-ins only need, per op: the arity, each argument's kind (tensor, optional tensor, int,
bool, float, str, int tuple/list, dtype, any) and, for TORCH_LIBRARY builds, the exact schema
text to register.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..surface import native

__all__ = ["Param", "OpSig", "NO_DEFAULT", "read_ops", "parse_default", "value_matches", "describe_value"]


class _NoDefault:
    def __repr__(self) -> str:
        return "<required>"


NO_DEFAULT: Any = _NoDefault()


# Schema base types (``(a!)`` annotations and ``?`` stripped) whose kind is the name alone.
_SCALAR_KINDS: dict[str, str] = {
    "Tensor": "tensor", "int": "int", "SymInt": "int", "long": "int", "bool": "bool", "float": "float",
    "double": "float", "Scalar": "float", "str": "str", "string": "str", "ScalarType": "dtype",
}


@dataclass(frozen=True)
class Param:
    """One native argument: its name (None when the binary does not carry one), type and default."""

    name: str | None
    type: str
    default: Any = NO_DEFAULT

    @property
    def optional(self) -> bool:
        """Whether None is an accepted value."""
        return self.type.rstrip().endswith("?") or self.base == "Any"

    @property
    def base(self) -> str:
        """The type without alias annotations and without the trailing ``?``."""
        t = re.sub(r"\([a-z]!?\)", "", self.type).strip()
        return t[:-1].strip() if t.endswith("?") else t

    @property
    def kind(self) -> str:
        """``tensor``, ``int``, ``bool``, ``float``, ``str``, ``ints`` (tuple/list), ``dtype``, ``tensors`` or ``any``."""
        b = self.base
        if b in _SCALAR_KINDS:
            return _SCALAR_KINDS[b]
        if re.fullmatch(r"Tensor\??\[\d*\]", b):
            return "tensors"
        if re.fullmatch(r"(int|SymInt)\[\d*\]", b) or re.fullmatch(r"\(\s*int(\s*,\s*int)*\s*\)", b):
            return "ints"
        return "any"

    @property
    def tuple_len(self) -> int | None:
        """The fixed length of a ``(int, int, int)`` or ``int[3]`` argument, else None."""
        b = self.base
        m = re.fullmatch(r"\(\s*int(\s*,\s*int)*\s*\)", b)
        if m:
            return b.count("int")
        m = re.fullmatch(r"(?:int|SymInt)\[(\d+)\]", b)
        return int(m.group(1)) if m else None


@dataclass(frozen=True)
class OpSig:
    """One native function of a release."""

    name: str
    params: tuple[Param, ...]
    returns: str
    binding: str  # "tvm-ffi" or "torch-library"
    schema: str | None = None  # the registered schema text (TORCH_LIBRARY builds only)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def arity(self) -> int:
        return len(self.params)

    @property
    def required(self) -> int:
        """Number of leading arguments without a default."""
        return sum(1 for p in self.params if p.default is NO_DEFAULT)

    def signature_text(self) -> str:
        """``name(Tensor a, int? b) -> ret`` for messages."""
        args = ", ".join(p.type + (f" {p.name}" if p.name else "") for p in self.params)
        return f"{self.name}({args}) -> {self.returns}"


# --------------------------------------------------------------------------- reading a binary


def parse_default(text: str | None, type_: str | None = None) -> Any:
    """A schema default's text as the Python value the dispatcher would pass for an argument of ``type_``.

    ``None``, ``True``/``False``, numbers, quoted strings and ``[...]`` lists read as themselves; with the
    argument's type: ``ScalarType`` names (``float``, ``bfloat16``, ``long``: torch's attribute names, which
    is how torch's schema parser reads them) become torch dtypes, ``Layout`` / ``MemoryFormat`` names their
    torch objects, ``Device`` text a ``torch.device``, ``float`` defaults floats, and a scalar default of an
    ``int[N]`` is repeated N times (torch broadcasts it). Text that fits none of these stays a string.
    """
    if text is None:
        return NO_DEFAULT
    t = text.strip()
    if t == "None":
        return None
    base = Param(None, type_).base if type_ else ""
    if base in ("ScalarType", "Layout", "MemoryFormat") and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", t):
        want = {"ScalarType": torch.dtype, "Layout": torch.layout, "MemoryFormat": torch.memory_format}[base]
        value = getattr(torch, t, None)
        return value if isinstance(value, want) else t
    if base == "Device":
        try:
            return torch.device(parse_default(t))
        except (RuntimeError, TypeError):
            return t
    if t in ("True", "False"):
        return t == "True"
    if t[:1] in "\"'" and t[-1:] == t[:1] and len(t) >= 2:
        return t[1:-1]
    if t.startswith("[") and t.endswith("]"):
        item = re.sub(r"\[\d*\]$", "", base) if base.endswith("]") else None
        return [parse_default(x, item) for x in native.split_top_level(t[1:-1]) if x]
    for conv in (int, float):
        try:
            value = conv(t)
        except ValueError:
            continue
        if base in ("float", "double"):
            return float(value)
        n = Param(None, base).tuple_len if base.endswith("]") else None
        return [value] * n if n is not None else value
    return t


def read_ops(lib: str | Path) -> tuple[str, dict[str, OpSig]]:
    """``(binding era, {op name: signature})`` of a native library file, read from its bytes."""

    scanned = native.scan_native_library(Path(lib).read_bytes())
    ops: dict[str, OpSig] = {}
    for name, op in scanned.ops.items():
        unknown = any(p.type == "..." for p in op.params)
        params = tuple(Param(p.name, p.type, parse_default(p.default, p.type)) for p in op.params
                       if p.type != "...")
        schema = scanned.signatures.get(name) if op.binding == native.BINDING_TORCH_LIBRARY else None
        ops[name] = OpSig(name, params, op.returns or "?", op.binding, schema,
                          extra={"unknown_arity": True} if unknown else {})
    return scanned.binding, ops


# --------------------------------------------------------------------------- value checks


def describe_value(v: Any) -> str:
    """A short type description for error messages (``Tensor[int32, (4, 2)]``, ``int``, ...)."""
    try:
        if isinstance(v, torch.Tensor):
            return f"Tensor[{str(v.dtype).replace('torch.', '')}, {tuple(v.shape)}]"
    except ImportError:  # pragma: no cover - torch is always there in the child
        pass
    if isinstance(v, (tuple, list)):
        return type(v).__name__ + "(" + ", ".join(describe_value(x) for x in v) + ")"
    return type(v).__name__


def value_matches(param: Param, v: Any) -> bool:
    """Whether the native binding would accept ``v`` for ``param`` (after its own conversions)."""

    if v is None:
        return param.optional
    kind = param.kind
    if kind == "any":
        return True
    if kind == "tensor":
        # tvm-ffi also takes any DLPack producer (its own returned tensors included).
        return isinstance(v, torch.Tensor) or hasattr(v, "__dlpack__")
    if kind == "tensors":
        return isinstance(v, (list, tuple)) and all(x is None or isinstance(x, torch.Tensor) for x in v)
    if kind == "int":
        # Both bindings convert Python bools to integers.
        return isinstance(v, int)
    if kind == "bool":
        return isinstance(v, (bool, int))
    if kind == "float":
        return isinstance(v, (int, float)) and not isinstance(v, bool)
    if kind == "str":
        return isinstance(v, str)
    if kind == "dtype":
        return isinstance(v, torch.dtype)
    if kind == "ints":
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, int) for x in v):
            return False
        n = param.tuple_len
        return n is None or len(v) == n
    return True
