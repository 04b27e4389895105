"""The dynamic symbol table of an ELF shared object, read without loading it.

Only the ELF header, the section headers, ``.dynsym``, ``.dynamic`` and the string tables they
link to are read (by offset, from a file or from bytes already in memory); nothing is mapped,
loaded or executed. Every read is bounded: a malformed or hostile file gives ``None``, never an
exception, a huge allocation or a hang.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DynamicSymbols", "read_dynamic", "read_dynamic_bytes"]

_SHT_DYNAMIC = 6
_SHT_DYNSYM = 11
_DT_NEEDED = 1
_MAX_SECTIONS = 1 << 16
_MAX_TABLE = 64 << 20  # a .dynsym/.dynstr larger than this is not a deep_gemm library we read


@dataclass(frozen=True)
class DynamicSymbols:
    """What the dynamic linker sees of one library."""

    defined: tuple[str, ...]
    """Global/weak symbols the library defines (its exports), sorted."""
    undefined: tuple[str, ...]
    """Symbols it imports from other libraries (version suffixes not included), sorted."""
    needed: tuple[str, ...]
    """``DT_NEEDED`` entries, in link order."""


_Read = Callable[[int, int], bytes]


def _cstr(table: bytes, offset: int) -> str:
    if offset < 0 or offset >= len(table):
        return ""
    stop = table.find(b"\x00", offset)
    return table[offset : stop if stop >= 0 else len(table)].decode("ascii", "replace")


def _parse(read: _Read, size: int) -> DynamicSymbols | None:
    head = read(0, 64)
    if len(head) < 52 or head[:4] != b"\x7fELF" or head[4] not in (1, 2) or head[5] not in (1, 2):
        return None
    is64 = head[4] == 2
    end = "<" if head[5] == 1 else ">"
    if is64:
        (shoff,) = struct.unpack_from(end + "Q", head, 0x28)
        shentsize, shnum = struct.unpack_from(end + "HH", head, 0x3A)
        sh_fmt, sym_fmt, dyn_fmt = end + "IIQQQQIIQQ", end + "IBBHQQ", end + "qQ"
    else:
        (shoff,) = struct.unpack_from(end + "I", head, 0x20)
        shentsize, shnum = struct.unpack_from(end + "HH", head, 0x2E)
        sh_fmt, sym_fmt, dyn_fmt = end + "IIIIIIIIII", end + "IIIBBH", end + "iI"
    if not 0 < shnum < _MAX_SECTIONS or shentsize < struct.calcsize(sh_fmt) or shoff + shnum * shentsize > size:
        return None
    table = read(shoff, shnum * shentsize)
    sections = [struct.unpack_from(sh_fmt, table, i * shentsize) for i in range(shnum)]

    def body(index: int) -> bytes:
        sec = sections[index]
        offset, length = sec[4], sec[5]
        if length > _MAX_TABLE or offset + length > size:
            raise ValueError("section out of bounds")
        return read(offset, length)

    defined: set[str] = set()
    undefined: set[str] = set()
    needed: list[str] = []
    sym_size = struct.calcsize(sym_fmt)
    dyn_size = struct.calcsize(dyn_fmt)
    for index, sec in enumerate(sections):
        kind, link, entsize = sec[1], sec[6], sec[9]
        if kind not in (_SHT_DYNSYM, _SHT_DYNAMIC) or not 0 <= link < shnum or index == link:
            continue
        data, strings = body(index), body(link)
        if kind == _SHT_DYNSYM:
            step = max(entsize, sym_size)
            for pos in range(step, len(data) - sym_size + 1, step):  # entry 0 is the null symbol
                if is64:
                    st_name, st_info, _other, st_shndx, _value, _size = struct.unpack_from(sym_fmt, data, pos)
                else:
                    st_name, _value, _size, st_info, _other, st_shndx = struct.unpack_from(sym_fmt, data, pos)
                if (st_info >> 4) not in (1, 2):  # local symbols are not linked against
                    continue
                name = _cstr(strings, st_name)
                if name:
                    (undefined if st_shndx == 0 else defined).add(name)
        else:
            step = max(entsize, dyn_size)
            for pos in range(0, len(data) - dyn_size + 1, step):
                tag, value = struct.unpack_from(dyn_fmt, data, pos)
                if tag == 0:
                    break
                if tag == _DT_NEEDED:
                    needed.append(_cstr(strings, value))
    return DynamicSymbols(tuple(sorted(defined)), tuple(sorted(undefined)), tuple(needed))


def read_dynamic_bytes(data: bytes) -> DynamicSymbols | None:
    """:class:`DynamicSymbols` of an ELF image already in memory; ``None`` if it is no ELF we read."""

    def read(offset: int, length: int) -> bytes:
        return data[offset : offset + length]

    try:
        return _parse(read, len(data))
    except (struct.error, IndexError, ValueError):
        return None


def read_dynamic(path: str | Path) -> DynamicSymbols | None:
    """:class:`DynamicSymbols` of the library at ``path``; ``None`` if unreadable or no ELF we read."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)

            def read(offset: int, length: int) -> bytes:
                f.seek(offset)
                return f.read(length)

            return _parse(read, size)
    except (OSError, struct.error, IndexError, ValueError):
        return None
