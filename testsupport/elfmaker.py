"""A minimal ELF64 shared-object writer for tests: just enough for a dynamic symbol table.

The result has an ELF header, ``.dynstr``, ``.dynsym``, ``.dynamic`` (``DT_NEEDED`` entries),
``.rodata`` (arbitrary strings, e.g. host-assert texts) and ``.shstrtab``. It is never loaded;
it exists so detection and the native-contract reader can be tested without a compiler.
"""

from __future__ import annotations

import struct
from typing import Any


def make_so(*, defined: tuple[str, ...] = (), undefined: tuple[str, ...] = (), needed: tuple[str, ...] = (),
            rodata: bytes = b"") -> bytes:
    dynstr = bytearray(b"\x00")

    def add(name: str) -> int:
        off = len(dynstr)
        dynstr.extend(name.encode() + b"\x00")
        return off

    syms = [struct.pack("<IBBHQQ", 0, 0, 0, 0, 0, 0)]
    for name in defined:
        syms.append(struct.pack("<IBBHQQ", add(name), (1 << 4) | 2, 0, 5, 0x1000, 8))  # GLOBAL FUNC in .rodata idx
    for name in undefined:
        syms.append(struct.pack("<IBBHQQ", add(name), (1 << 4) | 2, 0, 0, 0, 0))
    dyn = b"".join(struct.pack("<qQ", 1, add(n)) for n in needed) + struct.pack("<qQ", 0, 0)
    dynsym = b"".join(syms)
    shstr = b"\x00.dynstr\x00.dynsym\x00.dynamic\x00.rodata\x00.shstrtab\x00"
    names = {n: shstr.index(n.encode()) for n in (".dynstr", ".dynsym", ".dynamic", ".rodata", ".shstrtab")}
    body = bytearray(b"\x00" * 64)
    offsets = {}
    for key, blob in ((".dynstr", bytes(dynstr)), (".dynsym", dynsym), (".dynamic", dyn), (".rodata", rodata),
                      (".shstrtab", shstr)):
        while len(body) % 8:
            body.append(0)
        offsets[key] = (len(body), len(blob))
        body.extend(blob)
    while len(body) % 8:
        body.append(0)
    shoff = len(body)

    def sh(name: str, kind: int, link: int, entsize: int) -> bytes:
        off, size = offsets[name]
        return struct.pack("<IIQQQQIIQQ", names[name], kind, 0, 0, off, size, link, 0, 8, entsize)

    sections = [b"\x00" * 64, sh(".dynstr", 3, 0, 0), sh(".dynsym", 11, 1, 24), sh(".dynamic", 6, 1, 16),
                sh(".rodata", 1, 0, 0), sh(".shstrtab", 3, 0, 0)]
    body.extend(b"".join(sections))
    header = b"\x7fELF" + bytes([2, 1, 1, 0]) + b"\x00" * 8
    header += struct.pack("<HHIQQQIHHHHHH", 3, 62, 1, 0, 0, shoff, 0, 64, 56, 0, 64, len(sections), 5)
    body[:64] = header
    return bytes(body)


#: Symbols shaped like each binding era's native library.
STABLE_ABI: dict[str, Any] = dict(undefined=("aoti_torch_get_dim", "aoti_torch_library_init_fragment", "torch_from_blob",
                             "torch_library_impl", "_ZNKSt13runtime_error4whatEv"),
                  defined=("PyInit__C_extension",), needed=("libtorch.so", "libc10.so"))
UNSTABLE: dict[str, Any] = dict(undefined=("_ZN2at4_ops10empty_like4callERKNS_6TensorE", "_ZN3c1019UndefinedTensorImpl10_singletonE"),
                needed=("libtorch.so",))
TVM_FFI: dict[str, Any] = dict(defined=("__tvm_ffi_fp8_gemm_nt",), undefined=("_ZN2at11TensorMaker11make_tensorEv",))
