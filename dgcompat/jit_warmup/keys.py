"""How each deep_gemm JIT lineage names a kernel in its cache folder, reproduced in Python.

Three lineages build kernels with NVCC (what was read for each):

- ``"compiler"``: the ``csrc/jit/compiler.hpp`` JIT of the sgl-deep-gemm wheels 0.0.1-0.1.7 (sgl-project/DeepGEMM
  ``release/v0.1.2``; the wheels' ``_C.so`` carry its format strings ``{}$${}$${}$${}``, ``kernel.{}.{}`` and
  ``Includes' hash value``). A kernel is the folder ``cache/kernel.<name>.<H(name$$signature$$flags$$code)>``
  where ``signature`` is ``NVCC<major>.<minor>``, ``flags`` the one flag string of the compiler (it holds
  ``-I<deep_gemm>/include``: the install path) and ``code`` the generated source, whose first line is
  ``// Includes' hash value: <hash of the deep_gemm/ headers it includes>``. The folder holds ``kernel.cu``
  (that code) and ``kernel.cubin``.
- ``"bundled"``: the older JIT of the copies bundled in sgl-kernel 0.3.21 / sglang-kernel 0.4.0-0.4.2
  (sgl-project/DeepGEMM ``f4adba8a``, the commit sgl-kernel's CMakeLists pins; sglang-kernel 0.4.2's
  ``deep_gemm_cpp.abi3.so`` carries its format strings ``{}$${}$${}$${}$${}`` and the flag string with
  ``-cubin``): ``cache/kernel.<name>.<H(name$$library_version$$signature$$flags$$code)>`` where
  ``library_version`` is ``H`` of every ``*.cuh`` under ``include/deep_gemm`` concatenated in path order, and
  the code has no header stamp.
- ``"deep_jit"``: the DeepJIT library of upstream DeepGEMM 2.8 (vLLM's vendored 2.8.1) and sgl-deep-gemm 0.2.x:
  ``cache/<name>.<digest>/`` (with ``meta.json`` and ``.committed``), the digest covering the full
  ``nvcc --version`` text, the flags without the include folders (``--include-path`` is added to the command
  only) and the source with the *contents* of its includes: no install path, so such a folder serves a moved
  install as it is.

``H`` is deep_gemm's ``get_hex_digest`` (``csrc/utils/hash.hpp``): two FNV-1a 64 passes with different seeds,
each finished by splitmix64, printed as 32 hex digits.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

__all__ = [
    "Lineage", "LINEAGES", "hex_digest", "nvcc_signature", "nvcc_release", "lineage_of", "flags_of", "parse_entry",
    "split_stamp", "HeaderHashes", "entry_key", "entry_name", "KeyError_",
]

Lineage = Literal["compiler", "bundled", "deep_jit"]
LINEAGES: tuple[Lineage, ...] = ("compiler", "bundled", "deep_jit")

_MASK = (1 << 64) - 1
_PRIME = 0x100000001B3
_SEEDS = (0xC6A4A7935BD1E995, 0x9E3779B97F4A7C15)
_STAMP = b"// Includes' hash value: "
_HEX32 = re.compile(r"[0-9a-f]{32}")
_INCLUDE = re.compile(rb'#\s*include\s*[<"][^>"]+[>"]')


class KeyError_(Exception):  # noqa: N801 - the builtin KeyError's name, kept apart
    """A source or header the key needs cannot be hashed the way deep_gemm hashes it."""


def _fnv1a(data: bytes, seed: int) -> int:
    h = seed
    for byte in data:
        h = ((h ^ byte) * _PRIME) & _MASK
    return h


def _split_mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def hex_digest(data: bytes) -> str:
    """deep_gemm's ``get_hex_digest``: 32 hex digits."""
    return "".join(f"{_split_mix(_fnv1a(data, seed)):016x}" for seed in _SEEDS)


def nvcc_release(version_text: str) -> str | None:
    """``"12.9"`` from ``nvcc --version`` output (the JITs' ``release (\\d+\\.\\d+)``), or None."""
    m = re.search(r"release (\d+)\.(\d+)", version_text)
    return f"{int(m.group(1))}.{int(m.group(2))}" if m else None


def nvcc_signature(version_text: str) -> str | None:
    """The compiler signature of the ``compiler`` and ``bundled`` keys: ``NVCC<major>.<minor>``."""
    rel = nvcc_release(version_text)
    return None if rel is None else f"NVCC{rel}"


def _output_index(args: Sequence[str]) -> int | None:
    for i, a in enumerate(args):
        if a in ("-o", "--output-file") and i + 1 < len(args):
            return i
    return None


def lineage_of(args: Sequence[str]) -> Lineage | None:
    """The lineage a compiler command (as the JIT passed it to ``DG_JIT_NVCC_COMPILER``) comes from: the
    ``deep_jit`` command has ``--output-file`` and ``--include-path``; the bundled JIT writes the source into
    the kernel's own folder ``cache/kernel.<name>.<hash>/``, the ``compiler`` JIT into ``tmp/<uuid>/``."""
    code = next((a for a in args if a.endswith(".cu")), "")
    if not code or _output_index(args) is None:
        return None
    if "--output-file" in args and "--include-path" in args:
        return "deep_jit"
    parent = Path(code).parent
    if parent.parent.name == "cache" and parent.name.startswith("kernel.") and _HEX32.fullmatch(
            parent.name.rsplit(".", 1)[-1]):
        return "bundled"
    return "compiler"


def flags_of(args: Sequence[str]) -> str:
    """The JIT's flag string: everything after the output path, joined by single spaces (the JIT formats it
    with single spaces and the shell splits it on them; a key that then does not reproduce says otherwise)."""
    i = _output_index(args)
    return "" if i is None else " ".join(args[i + 2:])


def parse_entry(folder: str, lineage: Lineage) -> tuple[str, str] | None:
    """``(name, digest)`` of a cache entry's folder name, or None if it is not one of ``lineage``'s."""
    if lineage == "deep_jit":
        name, _, digest = folder.rpartition(".")
        ok = bool(name) and re.fullmatch(r"[A-Za-z0-9_]+", name) and re.fullmatch(r"[0-9a-f]+", digest)
        return (name, digest) if ok else None
    if not folder.startswith("kernel."):
        return None
    name, _, digest = folder[len("kernel."):].rpartition(".")
    return (name, digest) if name and _HEX32.fullmatch(digest) else None


def entry_name(lineage: Lineage, name: str, digest: str) -> str:
    return f"{name}.{digest}" if lineage == "deep_jit" else f"kernel.{name}.{digest}"


def split_stamp(code: bytes) -> tuple[str, bytes] | None:
    """``(header hash, generated code)`` of a ``compiler``-lineage ``kernel.cu``, or None without the stamp."""
    if not code.startswith(_STAMP):
        return None
    line, sep, body = code.partition(b"\n")
    stamp = line[len(_STAMP):].decode("ascii", "replace")
    return (stamp, body) if sep and stamp else None


class HeaderHashes:
    """The header hashes of one ``include`` folder (results kept per file): the ``compiler`` lineage's include
    hash of a source and the ``bundled`` lineage's library version."""

    def __init__(self, include: Path) -> None:
        self.include = include
        self._by_path: dict[Path, str | None] = {}
        self._library: str | None = None

    def _includes(self, code: bytes, where: str) -> list[str]:
        found: list[str] = []
        for m in _INCLUDE.finditer(code):
            s = m.group()
            if s.startswith(b"#include <") and s.endswith(b">") and s[10:11] != b" " and s[-2:-1] != b" ":
                name = s[10:-1].decode("utf-8", "replace")
                if name.startswith("deep_gemm"):
                    found.append(name)
            else:  # deep_gemm stops here too ("Non-standard include")
                raise KeyError_(f"non-standard include {s.decode('utf-8', 'replace')!r} in {where}")
        return found

    def _hash(self, code: bytes, where: str, *, exclude_code: bool) -> str:
        parts = [self._by_file(self.include / name) + "$" for name in self._includes(code, where)]
        text = "".join(parts) + ("" if exclude_code else "#" + hex_digest(code))
        return hex_digest(text.encode())

    def _by_file(self, path: Path) -> str:
        if path in self._by_path:
            known = self._by_path[path]
            if known is None:
                raise KeyError_(f"circular include at {path}")
            return known
        try:
            data = path.read_bytes()
        except OSError as exc:
            raise KeyError_(f"cannot read {path}: {exc.strerror or exc}") from None
        self._by_path[path] = None
        value = self._hash(data, str(path), exclude_code=False)
        self._by_path[path] = value
        return value

    def include_hash(self, body: bytes) -> str:
        """The ``compiler`` lineage's stamp for generated ``body`` (``IncludeParser::get_hash_value``)."""
        return self._hash(body, "kernel.cu", exclude_code=True)

    def library_version(self) -> str:
        """The ``bundled`` lineage's ``library_version``: ``H`` of every ``*.cuh`` under ``include/deep_gemm``,
        concatenated in path order (the order is the same wherever the folder sits)."""
        if self._library is None:
            root = self.include / "deep_gemm"
            files = sorted((p for p in root.rglob("*.cuh") if p.is_file()), key=lambda p: p.relative_to(root).parts)
            try:
                data = b"".join(p.read_bytes() for p in files)
            except OSError as exc:
                raise KeyError_(f"cannot read the headers under {root}: {exc.strerror or exc}") from None
            self._library = hex_digest(data)
        return self._library


def entry_key(lineage: Lineage, name: str, signature: str, flags: str, code: bytes, library_version: str = "") -> str:
    """The hash part of the folder name deep_gemm gives a kernel (``compiler`` and ``bundled`` lineages)."""
    if lineage == "compiler":
        head = f"{name}$${signature}$${flags}$$".encode()
    elif lineage == "bundled":
        head = f"{name}$${library_version}$${signature}$${flags}$$".encode()
    else:
        raise ValueError("the deep_jit key has no install path in it: its entries keep their names")
    return hex_digest(head + code)
