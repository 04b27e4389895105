"""What a deep_gemm build's native library says: its binding era and the torch it needs, and whether the
installed torch is that one.

The library is read, never loaded: its dynamic symbols come from the ELF reader (:mod:`._elf`), and
the torch symbols it imports are classified by :mod:`._torch_abi` (the torch C++ API: that exact
torch; only the stable C shim: that torch or newer). Where the library cannot be read, textual probes
of the Python layer name the binding era and the pairing table (:data:`._known.EXPECTED_TORCH`)
alone names the torch.
"""

from __future__ import annotations

import importlib.metadata as md
from dataclasses import dataclass
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from . import _elf
from . import _torch_abi
from ._distinfo import version_or_none
from ._known import expected_torch

__all__ = ["Native", "native", "binding_from_text", "TorchNeed", "torch_need", "installed_torch", "torch_check"]


@dataclass(frozen=True)
class Native:
    """The binding era (:attr:`dgcompat.detection.Release.binding`), the torch symbols the library imports (None
    when no library was read), its file name and its ``DT_NEEDED`` entries."""

    binding: str
    imports: _torch_abi.Imports | None
    library: str | None
    needed: tuple[str, ...] = ()


def native(pkg_dir: Path, init_text: str) -> Native:
    """The first readable ``*.so`` of ``pkg_dir`` (``init_text``: its ``__init__.py``), or the textual probes."""
    libs = sorted(pkg_dir.glob("*.so"))
    bundled_lib = any(p.name.startswith("deep_gemm_cpp") for p in libs) or "deep_gemm_cpp" in init_text
    for lib in libs:
        syms = _elf.read_dynamic(lib)
        if syms is None:
            continue
        imports = _torch_abi.classify(syms)
        if any(s.startswith("__tvm_ffi_") for s in syms.defined):
            binding = "tvm-ffi"
        elif bundled_lib:
            binding = "bundled-torch-ops"
        elif imports.rule == "minimum":
            binding = "stable-abi"
        elif any(s.startswith("PyInit_") for s in syms.defined) and "load_library" not in init_text:
            binding = "pybind"
        else:
            binding = "torch-library"
        return Native(binding, imports, lib.name, syms.needed)
    return Native(binding_from_text(pkg_dir, init_text), None, None)


def binding_from_text(pkg_dir: Path, text: str) -> str:
    """Textual probes of the Python layer, for a folder whose native library cannot be read."""
    if not text:
        return "unknown"
    if "import tvm_ffi" in text:
        return "tvm-ffi"
    if "deep_gemm_cpp" in text or any(pkg_dir.glob("deep_gemm_cpp*.so")):
        return "bundled-torch-ops"
    if "STABLE_TORCH_LIBRARY" in text:
        return "stable-abi"
    if "torch.ops.load_library" in text or "TORCH_LIBRARY" in text:
        return "torch-library"
    if any(pkg_dir.glob("_C*.so")) or any(pkg_dir.parent.glob("deep_gemm_cpp*.so")):
        return "pybind"
    return "unknown"


@dataclass(frozen=True)
class TorchNeed:
    """The torch the library needs: ``spec`` (None: unknown), ``rule`` (``"exact"``, ``"minimum"`` or
    ``"unknown"``), the evidence, and what is wrong with it."""

    spec: SpecifierSet | None
    rule: str
    evidence: str
    problems: tuple[str, ...] = ()


def torch_need(dist: str | None, version: Version | None, lib: Native) -> TorchNeed:
    """What release ``dist`` ``version`` needs of torch, from its library's imports and the pairing table."""
    imports = lib.imports
    table = expected_torch(dist, version) if dist and version else None
    if imports is not None and imports.rule == "minimum" and imports.minimum is not None:
        why = (f"{lib.library} imports only torch's stable C shim ({imports.shim_count} aoti_torch_*/torch_* "
               f"functions, no C++ symbols); the newest needs torch {imports.minimum}")
        problems: tuple[str, ...] = ()
        if imports.undated:
            problems = (f"{lib.library} imports stable-ABI functions dgcompat has no date for "
                        f"({', '.join(imports.undated[:4])}): it may need a torch newer than {imports.minimum}",)
        return TorchNeed(SpecifierSet(f">={imports.minimum}"), "minimum", why, problems)
    if imports is not None and imports.rule == "exact":
        why = f"{lib.library} imports {imports.unstable_count} torch C++ symbols: it needs the torch it was built for"
        if table is not None:
            return TorchNeed(table, "exact", why + f" (torch{table}, from the pairing table)")
        return TorchNeed(None, "exact", why, (
            f"{lib.library} was compiled against torch's C++ API, and dgcompat does not know which torch "
            f"{dist or 'this build'} {version or ''} was built for: a different torch fails to load or mis-reads "
            f"tensors",))
    if table is not None:  # no readable library: the table alone
        return TorchNeed(table, "exact", "pairing table (native library not read)")
    return TorchNeed(None, "unknown", "no native library read")


def installed_torch() -> Version | None:
    """The installed torch's version, from its metadata (torch is never imported)."""
    try:
        return version_or_none(md.version("torch"))
    except (md.PackageNotFoundError, OSError, UnicodeDecodeError, ValueError):
        return None


def torch_check(label: str, need: TorchNeed, torch_v: Version | None) -> tuple[bool | None, list[str]]:
    """(whether ``torch_v`` meets ``need``: None when nothing is known, the problems), ``label`` naming the build."""
    if need.spec is None:
        return None, []
    if torch_v is None:
        return False, [f"torch is not installed; {label}'s native library needs torch{need.spec}"]
    if Version(torch_v.base_version) in need.spec:
        return True, []
    if need.rule == "minimum":
        return False, [f"{label}'s native library uses torch's stable ABI from torch {need.spec} on, but torch "
                       f"{torch_v} is installed: it will fail to load; upgrade torch"]
    return False, [f"{label}'s native library was built for torch{need.spec} but torch {torch_v} is installed: it "
                   f"will fail to load or mis-read tensors; install torch{need.spec} or a build for torch "
                   f"{torch_v.major}.{torch_v.minor}"]

