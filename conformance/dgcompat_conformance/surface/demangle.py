"""Itanium C++ demangling of the ``dg_*`` function symbols a tvm-ffi deep_gemm library carries.

A small built-in demangler covers the constructs these symbols use (nested names,
substitutions, template arguments and packs): :func:`demangle` gives the function name and its
parameter types as :class:`CxxType` trees, :func:`demangle_params` the same written out. For a
symbol it cannot read, :func:`cxxfilt` asks ``c++filt`` where that is on ``PATH``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = ["CxxType", "DemangleError", "demangle", "demangle_params", "cxxfilt"]


@dataclass(frozen=True)
class CxxType:
    """A demangled C++ type: a (qualified) name with template arguments, or a pointer/ref/const/pack."""

    name: str
    args: tuple[CxxType, ...] = ()
    template: bool = False
    """Whether this is a template-id (rendered with ``<...>`` even when ``args`` is empty)."""

    def render(self) -> str:
        if self.name == "*":
            return self.args[0].render() + "*"
        if self.name == "&":
            return self.args[0].render() + "&"
        if self.name == "&&":
            return self.args[0].render() + "&&"
        if self.name == "const":
            return self.args[0].render() + " const"
        if self.name == "volatile":
            return self.args[0].render() + " volatile"
        if self.name == "...":  # a template argument pack, rendered inline
            return ", ".join(a.render() for a in self.args)
        if self.name.startswith("#"):  # a template literal argument
            return self.name[1:]
        if not self.template:
            return self.name
        inner = ", ".join(a.render() for a in self.args)
        return f"{self.name}<{inner}>"


_BUILTINS: Mapping[str, str] = {
    "v": "void", "w": "wchar_t", "b": "bool", "c": "char", "a": "signed char", "h": "unsigned char",
    "s": "short", "t": "unsigned short", "i": "int", "j": "unsigned int", "l": "long",
    "m": "unsigned long", "x": "long long", "y": "unsigned long long", "n": "__int128",
    "o": "unsigned __int128", "f": "float", "d": "double", "e": "long double", "g": "__float128",
    "z": "...",
}
_BUILTINS_D: Mapping[str, str] = {
    "Dn": "decltype(nullptr)", "Di": "char32_t", "Ds": "char16_t", "Du": "char8_t",
    "Dh": "half", "Df": "decimal32", "Dd": "decimal64", "De": "decimal128", "Da": "auto",
}
_STD_ABBREV: Mapping[str, str] = {
    "t": "std",
    "a": "std::allocator",
    "b": "std::basic_string",
    "s": "std::string",
    "i": "std::istream",
    "o": "std::ostream",
    "d": "std::iostream",
}


class DemangleError(ValueError):
    """A symbol uses a construct the demangler does not read."""


class _Demangler:
    """Recursive-descent parser for the parameter types of an Itanium-mangled function symbol."""

    def __init__(self, text: str) -> None:
        self.s = text
        self.i = 0
        self.subs: list[CxxType] = []

    # -- primitives ------------------------------------------------------------------------
    def peek(self, n: int = 1) -> str:
        return self.s[self.i : self.i + n]

    def take(self, n: int = 1) -> str:
        if self.i + n > len(self.s):
            raise DemangleError("unexpected end of symbol")
        out = self.s[self.i : self.i + n]
        self.i += n
        return out

    def expect(self, token: str) -> None:
        if self.take(len(token)) != token:
            raise DemangleError(f"expected {token!r} at {self.i}")

    def number(self) -> int:
        start = self.i
        while self.i < len(self.s) and self.s[self.i].isdigit():
            self.i += 1
        if start == self.i:
            raise DemangleError(f"expected a number at {start}")
        return int(self.s[start : self.i])

    def source_name(self) -> str:
        length = self.number()
        return self.take(length)

    def seq_id(self) -> int:
        # S_ is 0, S<base-36 n>_ is n + 1.
        if self.peek() == "_":
            self.i += 1
            return 0
        start = self.i
        while self.i < len(self.s) and self.s[self.i] != "_":
            self.i += 1
        digits = self.s[start : self.i]
        self.expect("_")
        return int(digits, 36) + 1

    # -- grammar ---------------------------------------------------------------------------
    def function_params(self) -> tuple[str, list[CxxType]]:
        self.expect("_Z")
        name, is_template = self.encoding_name()
        if is_template:  # a function template's encoding starts with its return type
            self.type()
        params: list[CxxType] = []
        while self.i < len(self.s):
            params.append(self.type())
        if len(params) == 1 and params[0].name == "void":
            params = []
        return name, params

    def encoding_name(self) -> tuple[str, bool]:
        """The function's name, and whether it is a template specialisation."""
        if self.peek() == "N":
            node = self.nested_name(register_last=False)
            return node.render(), node.template
        name = self.source_name()
        if self.peek() == "I":
            self.subs.append(CxxType(name))
            args = self.template_args()
            return CxxType(name, args, template=True).render(), True
        return name, False

    def substitution(self) -> CxxType:
        self.expect("S")
        c = self.peek()
        if c in _STD_ABBREV:
            self.i += 1
            return CxxType(_STD_ABBREV[c])
        idx = self.seq_id()
        if idx >= len(self.subs):
            raise DemangleError(f"substitution {idx} out of range")
        return self.subs[idx]

    def template_args(self) -> tuple[CxxType, ...]:
        self.expect("I")
        args: list[CxxType] = []
        while self.peek() != "E":
            args.append(self.template_arg())
        self.expect("E")
        return tuple(args)

    def template_arg(self) -> CxxType:
        c = self.peek()
        if c == "J":  # argument pack
            self.i += 1
            items: list[CxxType] = []
            while self.peek() != "E":
                items.append(self.template_arg())
            self.expect("E")
            return CxxType("...", tuple(items))
        if c == "L":  # literal: L <type> <value> E
            self.i += 1
            if self.peek(2) == "_Z":
                raise DemangleError("external-name literals are not supported")
            literal_type = self.type()
            start = self.i
            while self.peek() not in ("E", ""):
                self.i += 1
            value = self.s[start : self.i]
            if value.startswith("n"):  # negative numbers are written n<digits>
                value = "-" + value[1:]
            self.expect("E")
            return CxxType(f"#({literal_type.render()}){value}")
        if c == "X":
            raise DemangleError("expression template arguments are not supported")
        return self.type()

    def nested_name(self, register_last: bool = True) -> CxxType:
        """``N [K|V|r] <prefix>+ E``; each completed prefix is a substitution candidate."""
        self.expect("N")
        while self.peek() in ("K", "V", "r"):
            self.i += 1
        current: CxxType | None = None
        while self.peek() != "E":
            c = self.peek()
            if c == "S":
                sub = self.substitution()
                # std:: abbreviations other than St name a class themselves (Sa, Ss, ...).
                current = sub if current is None else CxxType(current.name + "::" + sub.name)
                continue
            if c == "I":
                if current is None:
                    raise DemangleError("template arguments without a template")
                args = self.template_args()
                current = CxxType(current.name, args, template=True)
                self.subs.append(current)
                continue
            if c.isdigit():
                part = self.source_name()
            elif c in ("C", "D"):
                raise DemangleError("constructors/destructors are not supported")
            else:
                raise DemangleError(f"unexpected {c!r} in nested name")
            if current is None:
                current = CxxType(part)
            elif current.name == "std":
                current = CxxType("std::" + part)
            else:
                current = CxxType(current.render() + "::" + part)
            self.subs.append(current)
        self.expect("E")
        if current is None:
            raise DemangleError("empty nested name")
        if not register_last and self.subs and self.subs[-1] is current:
            self.subs.pop()  # the function's own name is not a candidate
        return current

    def type(self) -> CxxType:
        c = self.peek()
        if c == "":
            raise DemangleError("unexpected end of symbol")
        if c in _BUILTINS:
            self.i += 1
            return CxxType(_BUILTINS[c])
        if c == "D" and self.peek(2) in _BUILTINS_D:
            self.i += 2
            return CxxType(_BUILTINS_D[self.s[self.i - 2 : self.i]])
        if c in ("P", "R", "O", "K", "V"):
            self.i += 1
            inner = self.type()
            wrap = {"P": "*", "R": "&", "O": "&&", "K": "const", "V": "volatile"}[c]
            out = CxxType(wrap, (inner,))
            self.subs.append(out)
            return out
        if c == "N":
            return self.nested_name()
        if c == "S":
            is_std_prefix = self.peek(2) == "St"
            sub = self.substitution()
            if is_std_prefix:  # St <unqualified-name>: std::<name>, a candidate of its own
                sub = CxxType("std::" + self.source_name())
                self.subs.append(sub)
            return self.instantiated(sub)
        if c.isdigit():
            name = CxxType(self.source_name())
            self.subs.append(name)
            return self.instantiated(name)
        raise DemangleError(f"unsupported type code {c!r} at {self.i}")

    def instantiated(self, template: CxxType) -> CxxType:
        """``template`` with the ``I<args>E`` that follows it (a substitution candidate of its own), else itself."""
        if self.peek() != "I":
            return template
        out = CxxType(template.name, self.template_args(), template=True)
        self.subs.append(out)
        return out


def demangle_params(symbol: str) -> tuple[str, list[str]] | None:
    """Demangle a function symbol into ``(name, [C++ parameter type, ...])``; ``None`` if unparsed.

    >>> demangle_params("_Z10dg_set_pdlb")
    ('dg_set_pdl', ['bool'])
    """
    parsed = demangle(symbol)
    if parsed is None:
        return None
    name, params = parsed
    return name, [p.render() for p in params]


def demangle(symbol: str) -> tuple[str, list[CxxType]] | None:
    """Demangle a function symbol into ``(name, [parameter type, ...])``; ``None`` if the parser cannot read it."""
    try:
        d = _Demangler(symbol)
        return d.function_params()
    except (DemangleError, ValueError, KeyError):
        return None


def cxxfilt(symbols: list[str]) -> dict[str, str]:
    """Demangle with ``c++filt`` if it is installed; an empty dict otherwise."""
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not symbols:
        return {}
    try:
        proc = subprocess.run([cxxfilt], input="\n".join(symbols) + "\n", capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.SubprocessError):
        return {}
    lines = proc.stdout.splitlines()
    if proc.returncode != 0 or len(lines) != len(symbols):
        return {}
    return {s: d for s, d in zip(symbols, lines, strict=False) if d != s}
