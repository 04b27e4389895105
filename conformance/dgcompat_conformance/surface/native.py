"""Native signatures of a deep_gemm library, read from the bytes of the shared object.

Nothing here loads or runs the library. Two binding eras exist:

``tvm-ffi`` (sgl-deep-gemm 0.0.1-0.2.2)
    Every Python-visible function is an exported ``__tvm_ffi_<name>`` symbol. The exports carry
    no types, but each wraps a C++ function ``dg_<name>(...)`` whose mangled symbol is in the
    symbol table, so the argument types come from demangling it. Argument names and the return
    type are not in the binary: :attr:`NativeParam.name` is ``None`` and
    :attr:`NativeOp.returns` is ``None``.

``torch-library`` (sgl-deep-gemm 0.2.3+, the ``deep_gemm_cpp*.so`` bundled in sgl-kernel)
    Ops are registered with ``TORCH_LIBRARY(deep_gemm, m)``; the schema strings
    (``fp8_gemm_nt(Any a, Any b, Tensor d, Tensor? c=None) -> ()``) sit in the read-only data
    and are parsed directly, names, defaults and returns included.

The ``dg_*`` symbols are demangled by :mod:`.demangle` (its built-in Itanium demangler, then
``c++filt`` if it is on ``PATH``); failing both, the argument list is reported as unknown (a
single parameter of kind ``"..."``).

Parameter kinds (:attr:`NativeParam.type`) use the TORCH_LIBRARY schema vocabulary so that both
eras compare directly; see :data:`TYPE_KINDS`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from dgcompat._tooling import read_dynamic_bytes

from .demangle import CxxType, cxxfilt, demangle

__all__ = [
    "NativeParam",
    "NativeOp",
    "NativeLibrary",
    "TYPE_KINDS",
    "BINDING_TVM_FFI",
    "BINDING_TORCH_LIBRARY",
    "BINDING_UNKNOWN",
    "read_native_ops",
    "binding_era",
    "torch_build_fingerprint",
    "torch_header_lines",
    "scan_native_library",
    "parse_schema",
    "split_top_level",
    "normalize_schema_type",
    "has_python_init",
    "host_assert_texts",
]

BINDING_TVM_FFI = "tvm-ffi"
BINDING_TORCH_LIBRARY = "torch-library"
BINDING_UNKNOWN = "unknown"

#: The vocabulary of :attr:`NativeParam.type`. Composite kinds are built from these:
#: ``X?`` (optional), ``X[]`` (list), ``(X, Y, ...)`` (fixed tuple, tvm-ffi only) and
#: ``Dict(K, V)``; any other TORCH_LIBRARY schema type is kept verbatim (alias annotations such
#: as ``(a!)`` removed, ``int[3]`` written ``int[]``, ``SymInt`` written ``int``).
TYPE_KINDS: Mapping[str, str] = {
    "Tensor": "a tensor (torch Tensor; tvm-ffi TensorView/Tensor)",
    "int": "an integer (int64_t and the other C++ integer types; SymInt)",
    "float": "a floating-point number (double/float; SymFloat)",
    "bool": "a boolean",
    "str": "a string (std::string, tvm::ffi::String)",
    "Any": "anything (TORCH_LIBRARY Any, tvm::ffi::Any/AnyView)",
    "ScalarType": "a torch dtype (tvm-ffi DLDataType)",
    "Device": "a device (tvm-ffi DLDevice)",
    "Callable": "a function object (tvm::ffi::Function)",
    "None": "no value (C++ void)",
    "?": "a type the reader does not know; the raw C++ or schema text is kept in the signature",
    "...": "the argument list could not be recovered at all (arity unknown)",
}


@dataclass(frozen=True)
class NativeParam:
    """One argument of a native op."""

    name: str | None
    """The schema name (TORCH_LIBRARY); ``None`` for tvm-ffi, whose names are not in the binary."""
    type: str
    """Normalized kind, see :data:`TYPE_KINDS`."""
    default: str | None
    """The schema default text (``None``, ``"nk"``, ``[1, 1, 128]``), if any."""


@dataclass(frozen=True)
class NativeOp:
    """One native op (``_C.<name>``) as the binary describes it."""

    name: str
    params: tuple[NativeParam, ...]
    returns: str | None
    """The schema return text (``()``, ``Tensor``, ``(int?, int?)``); ``None`` when unknown (tvm-ffi)."""
    binding: str
    """``"tvm-ffi"`` or ``"torch-library"``."""


@dataclass(frozen=True)
class NativeLibrary:
    """Everything read from one shared object (see :func:`scan_native_library`)."""

    binding: str
    ops: Mapping[str, NativeOp]
    signatures: Mapping[str, str]
    """Per op, the raw text it was read from: the schema, or the demangled C++ prototype."""
    torch_build: str | None
    torch_header_lines: Mapping[str, tuple[int, ...]]
    exports: tuple[str, ...] = field(default=())
    """Defined dynamic symbols (empty when the ELF could not be parsed)."""


# ---------------------------------------------------------------------------------------------
# ELF: the defined dynamic symbols
# ---------------------------------------------------------------------------------------------

def _elf_exports(data: bytes) -> list[str] | None:
    """Names of defined global/weak symbols in ``.dynsym``; ``None`` if ``data`` is no ELF we read."""
    syms = read_dynamic_bytes(data)  # the runtime's reader: one ELF mechanism for both wings
    return None if syms is None else list(syms.defined)


def has_python_init(so_bytes: bytes, module: str) -> bool:
    """Whether the library exports ``PyInit_<module>``, i.e. ``import`` can load it as a module."""
    exports = _elf_exports(so_bytes)
    symbol = "PyInit_" + module
    if exports is not None:
        return symbol in exports
    return re.search(rb"(?<![A-Za-z0-9_])" + symbol.encode() + rb"\x00", so_bytes) is not None


# ---------------------------------------------------------------------------------------------
# tvm-ffi era: exports + demangled dg_<name> prototypes
# ---------------------------------------------------------------------------------------------

_TVM_EXPORT_PREFIX = "__tvm_ffi_"
_TVM_EXPORT_RE = re.compile(rb"(?<=\x00)__tvm_ffi_([A-Za-z][A-Za-z0-9_]*)(?=\x00)")
# A symbol of the wrapped C++ function: _Z<len>dg_<name><params>, possibly with a .cold/.isra suffix.
_DG_SYMBOL_RE = re.compile(rb"(?<=\x00)(_Z[0-9]+dg_[A-Za-z0-9_]+)(?:\.[A-Za-z0-9_.]+)?(?=\x00)")


def _tvm_export_names(so_bytes: bytes) -> list[str]:
    exports = _elf_exports(so_bytes)
    if exports is not None:
        names = {e[len(_TVM_EXPORT_PREFIX) :] for e in exports if e.startswith(_TVM_EXPORT_PREFIX)}
    else:
        names = {m.decode() for m in _TVM_EXPORT_RE.findall(so_bytes)}
    # tvm-ffi's own bookkeeping exports start with an underscore after the prefix.
    return sorted(n for n in names if n and not n.startswith("_"))


# Qualified C++ names the kinds are derived from (without template arguments): each leaf name's kind.
_TENSOR_NAMES = frozenset({"tvm::ffi::TensorView", "tvm::ffi::Tensor", "at::Tensor", "DLTensor"})
_LEAF_KINDS: dict[str, str] = {
    **dict.fromkeys(_TENSOR_NAMES, "Tensor"),
    **dict.fromkeys((
        "std::__cxx11::basic_string", "std::basic_string", "std::string", "tvm::ffi::String",
        "std::basic_string_view", "std::string_view",
    ), "str"),
    "bool": "bool",
    **dict.fromkeys((
        "int", "long", "long long", "short", "signed char", "unsigned char", "unsigned short",
        "unsigned int", "unsigned long", "unsigned long long", "__int128", "unsigned __int128", "char",
    ), "int"),
    **dict.fromkeys(("float", "double", "long double", "half"), "float"),
    "void": "None",
    **dict.fromkeys(("tvm::ffi::Any", "tvm::ffi::AnyView"), "Any"),
    **dict.fromkeys(("DLDataType", "tvm::ffi::DataType", "c10::ScalarType"), "ScalarType"),
    **dict.fromkeys(("DLDevice", "tvm::ffi::Device", "c10::Device"), "Device"),
    **dict.fromkeys(("tvm::ffi::Function", "std::function"), "Callable"),
    "tvm::ffi::Shape": "int[]",
}
_OPTIONAL_NAMES = frozenset({"tvm::ffi::Optional", "std::optional"})
_LIST_NAMES = frozenset({"tvm::ffi::Array", "std::vector", "c10::ArrayRef", "at::IntArrayRef"})
_TUPLE_NAMES = frozenset({"tvm::ffi::Tuple", "std::tuple", "std::pair"})


def _cxx_kind(t: CxxType) -> str:
    """Map a demangled C++ type to the schema-like kind vocabulary."""
    while t.name in ("const", "&", "&&", "volatile"):
        t = t.args[0]
    name = t.name
    if name == "*":
        inner = t.args[0]
        while inner.name in ("const", "volatile"):
            inner = inner.args[0]
        if inner.name == "char":
            return "str"
        return "Tensor" if inner.name in _TENSOR_NAMES else "?"
    if name in _LEAF_KINDS:
        return _LEAF_KINDS[name]
    args = [a for a in t.args if a.name != "void"]  # tvm::ffi containers carry a trailing void
    if args and args[0].name == "..." and name in _TUPLE_NAMES:
        args = list(args[0].args)
    if name in _OPTIONAL_NAMES and len(args) == 1:
        inner_kind = _cxx_kind(args[0])
        return inner_kind if inner_kind.endswith("?") else inner_kind + "?"
    if name in _LIST_NAMES and len(args) == 1:
        return _cxx_kind(args[0]) + "[]"
    if name in _TUPLE_NAMES and args:
        return "(" + ", ".join(_cxx_kind(a) for a in args) + ")"
    if name in ("tvm::ffi::Map", "std::map", "std::unordered_map") and len(args) >= 2:
        return f"Dict({_cxx_kind(args[0])}, {_cxx_kind(args[1])})"
    return "?"


_CXX_TEXT_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"^(tvm::ffi::)?(TensorView|Tensor)\b"), "Tensor"),
    (re.compile(r"^std::(__cxx11::)?(basic_string|string)\b|^tvm::ffi::String\b"), "str"),
    (re.compile(r"^bool$"), "bool"),
    (re.compile(r"^(unsigned )?(long long|long|int|short|char)$"), "int"),
    (re.compile(r"^(long )?(double|float)$"), "float"),
)


def split_top_level(text: str, sep: str = ",") -> list[str]:
    """Split ``text`` on ``sep`` outside (), [], <> and quotes."""
    out: list[str] = []
    depth = 0
    quote: str | None = None
    start = 0
    for i, ch in enumerate(text):
        if quote:
            if ch == quote and text[i - 1] != "\\":
                quote = None
            continue
        if ch in "\"'":
            quote = ch
        elif ch in "([<":
            depth += 1
        elif ch in ")]>":
            depth -= 1
        elif ch == sep and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return [p.strip() for p in out]


def _kind_from_cxx_text(text: str) -> str:
    """Best-effort kind of a C++ type written out by ``c++filt``."""
    t = re.sub(r"\s*(const|&|&&)\s*$", "", text.strip())
    t = re.sub(r"^const\s+", "", t)
    m = re.match(r"^(tvm::ffi::Optional|std::optional)<(.*)>$", t)
    if m:
        inner = split_top_level(m.group(2))[0]
        k = _kind_from_cxx_text(inner)
        return k if k.endswith("?") else k + "?"
    m = re.match(r"^(tvm::ffi::Array|std::vector)<(.*)>$", t)
    if m:
        return _kind_from_cxx_text(split_top_level(m.group(2))[0]) + "[]"
    m = re.match(r"^(tvm::ffi::Tuple|std::tuple)<(.*)>$", t)
    if m:
        return "(" + ", ".join(_kind_from_cxx_text(p) for p in split_top_level(m.group(2))) + ")"
    for pattern, kind in _CXX_TEXT_KINDS:
        if pattern.search(t):
            return kind
    return "?"


def _dg_symbols(so_bytes: bytes) -> dict[str, list[str]]:
    """``dg_<name>`` mangled symbols, keyed by ``<name>`` (several when overloaded)."""
    found: dict[str, set[str]] = {}
    for m in _DG_SYMBOL_RE.finditer(so_bytes):
        sym = m.group(1).decode("ascii")
        digits = re.match(r"_Z([0-9]+)", sym)
        assert digits is not None
        length = int(digits.group(1))
        ident = sym[len(digits.group(0)) : len(digits.group(0)) + length]
        if len(ident) != length or not ident.startswith("dg_"):
            continue
        found.setdefault(ident[3:], set()).add(sym)
    return {k: sorted(v) for k, v in found.items()}


def _read_tvm_ffi(so_bytes: bytes, names: Iterable[str]) -> tuple[dict[str, NativeOp], dict[str, str]]:
    by_name = _dg_symbols(so_bytes)
    ops: dict[str, NativeOp] = {}
    signatures: dict[str, str] = {}
    pending: dict[str, str] = {}
    for name in names:
        candidates = by_name.get(name, [])
        parsed = None
        for sym in candidates:
            parsed = demangle(sym)
            if parsed is not None:
                break
        if parsed is not None:
            _fn, types = parsed
            params = tuple(NativeParam(None, _cxx_kind(t), None) for t in types)
            ops[name] = NativeOp(name, params, None, BINDING_TVM_FFI)
            signatures[name] = f"dg_{name}(" + ", ".join(t.render() for t in types) + ")"
        elif candidates:
            pending[name] = candidates[0]
        else:
            ops[name] = NativeOp(name, (NativeParam(None, "...", None),), None, BINDING_TVM_FFI)
            signatures[name] = f"dg_{name}(...)"
    if pending:
        demangled = cxxfilt(sorted(pending.values()))
        for name, sym in sorted(pending.items()):
            text = demangled.get(sym)
            m = re.match(r"^[^(]*\((.*)\)$", text or "")
            if m is None:
                ops[name] = NativeOp(name, (NativeParam(None, "...", None),), None, BINDING_TVM_FFI)
                signatures[name] = sym
                continue
            inner = m.group(1).strip()
            parts = [] if inner in ("", "void") else split_top_level(inner)
            ops[name] = NativeOp(name, tuple(NativeParam(None, _kind_from_cxx_text(p), None) for p in parts), None, BINDING_TVM_FFI)
            signatures[name] = text or sym
    return ops, signatures


# ---------------------------------------------------------------------------------------------
# TORCH_LIBRARY era: schema strings
# ---------------------------------------------------------------------------------------------

_SCHEMA_CANDIDATE_RE = re.compile(
    rb"(?<=\x00)((?:[A-Za-z_][A-Za-z0-9_]*::)?[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z0-9_]+)?\([^\x00]*\) -> [^\x00]+)(?=\x00)"
)
_SCHEMA_RE = re.compile(r"^(?:(\w+)::)?([A-Za-z_]\w*(?:\.\w+)?)\((.*)\)\s*->\s*(.+)$", re.DOTALL)
_IDENT_RE = re.compile(r"^[A-Za-z_]\w*$")
_TYPE_RE = re.compile(r"^(?:Dict\([^()]+\)|[A-Za-z_][\w.]*)(?:\[\d*\])?\??(?:\[\d*\])?\??$")
_ALIAS_RE = re.compile(r"\([a-z_]+!?(?:\s*->\s*[a-z_*]+!?)?\)")


def normalize_schema_type(text: str) -> str:
    """Schema type text -> kind: drop alias annotations, ``int[3]`` -> ``int[]``, Sym* -> plain."""
    t = _ALIAS_RE.sub("", text.strip())
    t = re.sub(r"\[\d+\]", "[]", t)
    t = re.sub(r"\bSymInt\b", "int", t)
    t = re.sub(r"\bSymFloat\b", "float", t)
    t = re.sub(r"\bSymBool\b", "bool", t)
    return t


def parse_schema(text: str) -> NativeOp | None:
    """Parse one TORCH_LIBRARY schema string; ``None`` if it is not one.

    >>> parse_schema("set_pdl(bool enable) -> ()").params
    (NativeParam(name='enable', type='bool', default=None),)
    """
    m = _SCHEMA_RE.match(text.strip())
    if m is None:
        return None
    name, arg_text, returns = m.group(2), m.group(3).strip(), m.group(4).strip()
    if not returns or not re.match(r"^[\w(\[]", returns):
        return None
    params: list[NativeParam] = []
    if arg_text:
        for part in split_top_level(arg_text):
            if part == "*":  # start of keyword-only arguments; the kinds do not record it
                continue
            pieces = split_top_level(part, "=")
            decl, default = pieces[0], ("=".join(pieces[1:]).strip() if len(pieces) > 1 else None)
            bits = decl.rsplit(None, 1)
            if len(bits) != 2 or not _IDENT_RE.match(bits[1]):
                return None
            type_text = bits[0].strip()
            bare = re.sub(r"\s+", "", _ALIAS_RE.sub("", type_text))
            if not _TYPE_RE.match(bare):
                return None
            params.append(NativeParam(bits[1], normalize_schema_type(type_text), default))
    return NativeOp(name, tuple(params), returns, BINDING_TORCH_LIBRARY)


def _read_torch_library(so_bytes: bytes) -> tuple[dict[str, NativeOp], dict[str, str]]:
    ops: dict[str, NativeOp] = {}
    signatures: dict[str, str] = {}
    for m in _SCHEMA_CANDIDATE_RE.finditer(so_bytes):
        try:
            text = m.group(1).decode("utf-8")
        except UnicodeDecodeError:
            continue
        op = parse_schema(text)
        if op is None or op.name in ops:  # first definition wins (the order in the binary)
            continue
        ops[op.name] = op
        signatures[op.name] = re.sub(r"^\w+::", "", text)
    return ops, signatures


# ---------------------------------------------------------------------------------------------
# torch build fingerprint
# ---------------------------------------------------------------------------------------------

_HEADER_LINE_RE = re.compile(rb"([A-Za-z0-9_/.\-+]+\.h)\":([0-9]+)")

# Line numbers of TORCH_INTERNAL_ASSERT strings in torch headers, per torch minor release, as
# observed in wheels that pin their torch (sgl-kernel 0.3.21 / sglang-kernel 0.4.0 -> 2.9.1,
# 0.4.2/0.4.4/0.4.6 -> 2.11.0, 0.4.7/0.4.8 -> 2.13.0, 0.4.9/0.4.10 -> 2.14.1). Only headers
# whose assertion is instantiated by every reference build are used; 2.12 was never observed,
# so a "2.13" answer does not exclude 2.12.
_TORCH_HEADER_TABLE: Mapping[str, Mapping[int, frozenset[str]]] = {
    "torch/csrc/autograd/variable.h": {
        305: frozenset({"2.9"}),
        341: frozenset({"2.11"}),
        339: frozenset({"2.13"}),
        345: frozenset({"2.14"}),
    },
    "c10/core/TensorImpl.h": {
        1332: frozenset({"2.9"}),
        1765: frozenset({"2.9"}),
        1335: frozenset({"2.11"}),
        1768: frozenset({"2.11"}),
        1338: frozenset({"2.13", "2.14"}),
        1799: frozenset({"2.13", "2.14"}),
    },
}


def torch_header_lines(so_bytes: bytes) -> dict[str, tuple[int, ...]]:
    """Torch header paths (relative to ``include/``) -> line numbers of assertions embedded in the binary."""
    found: dict[str, set[int]] = {}
    for m in _HEADER_LINE_RE.finditer(so_bytes):
        path = m.group(1).decode("ascii", "replace")
        if "/include/" in path:
            path = path.rsplit("/include/", 1)[1]
        if not path.startswith(("c10/", "ATen/", "torch/", "caffe2/")):
            continue
        found.setdefault(path, set()).add(int(m.group(2)))
    return {k: tuple(sorted(v)) for k, v in sorted(found.items())}


def _fingerprint(lines: Mapping[str, tuple[int, ...]]) -> str | None:
    candidates: set[str] | None = None
    for header, table in _TORCH_HEADER_TABLE.items():
        for line in lines.get(header, ()):
            versions = table.get(line)
            if versions is None:
                continue  # a line no reference build showed: no evidence either way
            candidates = set(versions) if candidates is None else candidates & versions
    if not candidates:
        return None
    return "|".join(sorted(candidates, key=lambda v: tuple(int(x) for x in v.split("."))))


def torch_build_fingerprint(so_bytes: bytes) -> str | None:
    """The torch minor release the library was built against, as far as the binary tells.

    Returns ``"2.9"``, ``"2.11"``, ``"2.13"`` or ``"2.14"``; several candidates joined by ``|``
    when the evidence does not separate them (for example ``"2.13|2.14"`` when only
    ``TensorImpl.h`` assertions are present); ``None`` when nothing is known.
    """
    return _fingerprint(torch_header_lines(so_bytes))


# ---------------------------------------------------------------------------------------------
# host asserts: the native contract
# ---------------------------------------------------------------------------------------------

# DG_HOST_ASSERT(cond) keeps ``#cond`` verbatim in the read-only data: a NUL-terminated C++
# condition such as ``num_heads == 16 or num_heads == 32``. These are the conditions a release
# enforces on its inputs, invisible in the Python surface.
_CSTRING_RE = re.compile(rb"(?<=\x00)[\x20-\x7e]{4,600}(?=\x00)")
_CONDITION_RE = re.compile(r"(==|!=|<=|>=| % | < | > |\.is_contiguous\(\)|\.has_value\(\)|\.is_cuda\(\))")
# Boolean flags with a connective: ``not clean_logits``, ``is_varlen and not is_fp4`` (each term an
# identifier with ``_`` or ``.``, so English prose with "not"/"and" does not qualify).
_FLAG_TERM = r"(?:not )?[a-z_][a-z0-9_]*[_.][a-z0-9_.]*(?:\(\))?"
_FLAGS_RE = re.compile(rf"^(?:not {_FLAG_TERM}|{_FLAG_TERM}(?: (?:and|or) {_FLAG_TERM})+)$")
_NOT_A_CONDITION_RE = re.compile(r"(->|[{};\n]|#include|__|INTERNAL ASSERT|please report|%[-0-9.]*[sdluxf]|\bTensor [a-z]|^\s|\s$)")
_CONDITION_START_RE = re.compile(r"^[A-Za-z_(!]")


def host_assert_texts(so_bytes: bytes) -> tuple[str, ...]:
    """The host-assert conditions compiled into a native library, sorted and de-duplicated.

    Heuristic but conservative: a string counts when it reads as a C++ boolean condition
    (comparison, ``and``/``or``/``not``, ``.is_contiguous()``, ``.has_value()``) and is not an op
    schema, a format string, a torch-internal assert or a symbol name.
    """
    found: set[str] = set()
    for m in _CSTRING_RE.finditer(so_bytes):
        text = m.group().decode("ascii")
        if (_CONDITION_START_RE.match(text) and (_CONDITION_RE.search(text) or _FLAGS_RE.match(text))
                and not _NOT_A_CONDITION_RE.search(text)
                and not text.startswith(("_Z", "GLIBC"))):
            found.add(text)
    return tuple(sorted(found))


# ---------------------------------------------------------------------------------------------
# Entry points
# ---------------------------------------------------------------------------------------------


def scan_native_library(so_bytes: bytes) -> NativeLibrary:
    """Read binding era, ops, raw signatures and torch fingerprint in one pass."""
    exports = _elf_exports(so_bytes)
    tvm_names = _tvm_export_names(so_bytes)
    if tvm_names:
        binding = BINDING_TVM_FFI
        ops, signatures = _read_tvm_ffi(so_bytes, tvm_names)
    else:
        ops, signatures = _read_torch_library(so_bytes)
        binding = BINDING_TORCH_LIBRARY if ops else BINDING_UNKNOWN
    lines = torch_header_lines(so_bytes)
    return NativeLibrary(
        binding=binding,
        ops=dict(sorted(ops.items())),
        signatures=dict(sorted(signatures.items())),
        torch_build=_fingerprint(lines),
        torch_header_lines=lines,
        exports=tuple(sorted(exports)) if exports is not None else (),
    )


def read_native_ops(so_bytes: bytes) -> dict[str, NativeOp]:
    """All native ops the library defines, keyed by op name (sorted)."""
    return dict(scan_native_library(so_bytes).ops)


def binding_era(so_bytes: bytes) -> str:
    """``"tvm-ffi"`` (``__tvm_ffi_*`` exports), ``"torch-library"`` (op schemas) or ``"unknown"``."""
    if _tvm_export_names(so_bytes):
        return BINDING_TVM_FFI
    ops, _ = _read_torch_library(so_bytes)
    return BINDING_TORCH_LIBRARY if ops else BINDING_UNKNOWN
