"""Stand-ins for a deep_gemm release's native library, installed in the child before ``import deep_gemm``.

Nothing in the wheel is edited. The native library is never loaded; instead, depending on the
binding era recovered from the binary:

* **tvm-ffi** (sgl-deep-gemm 0.0.1 - 0.2.2): a ``tvm_ffi`` module is placed in ``sys.modules``;
  its ``load_module(path)`` returns a module object whose attributes are the functions exported by
  that ``_C.so``. Like tvm-ffi's packed functions they take positional arguments only and check
  count and types, raising ``TypeError``.
* **TORCH_LIBRARY** (0.2.3+): ``torch.ops.load_library(path)`` is intercepted for that one path
  and the schemas read from the binary are defined with :mod:`torch.library` instead, so the
  dispatcher parses arguments exactly as it would for the real ops (``RuntimeError`` on a
  mismatch, keywords by schema name); schema defaults are the typed values the dispatcher would
  pass (``ScalarType logits_dtype=float`` is ``torch.float32``), and the arguments are named by the
  schema's names.
* **bundled copies** (``deep_gemm_cpp.abi3.so`` in sgl-kernel / sglang-kernel): the import of
  ``deep_gemm.deep_gemm_cpp`` is served by a stand-in module that defines the schemas the same way.

Import-time native work is neutralized around the wheel: ``CUDA_HOME`` points at an empty folder
(so ``find_cuda_home()`` neither asserts nor runs ``which nvcc``), ``init`` and the 0.2.5
locality-domain hooks only record their arguments, and 0.2.5's ``atexit`` ``shutdown`` hook is
unregistered after import.
"""

from __future__ import annotations

import atexit
import importlib.abc
import importlib.machinery
import os
import shutil
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from packaging.version import InvalidVersion, Version

from ..surface.native import host_assert_texts
from .emulation import NativeState, Profile, StandInHang, StandInNotEmulated, emulate
from .indexer_rules import rules_from_asserts
from .signatures import NO_DEFAULT, OpSig, describe_value, read_ops, value_matches

__all__ = ["StandInHang", "StandInNotEmulated", "Installed", "install", "native_library", "FfiTensor", "make_cuda_home",
           "sweep_cuda_homes"]


@dataclass
class Installed:
    """What :func:`install` put in place, for the child's report and the suite's checks."""

    profile: Profile
    state: NativeState
    library: Path
    ops: dict[str, OpSig]
    cuda_home: Path
    undefined_schemas: list[str] = field(default_factory=list)
    loaded: bool = False  # set when the wheel asked for its native library

    def native_libraries_mapped(self) -> list[str]:
        """Paths of this release's native libraries mapped into the process (must stay empty)."""
        try:
            maps = Path("/proc/self/maps").read_text()
        except OSError:
            return []
        lib = str(self.library.resolve())
        return sorted({ln.split()[-1] for ln in maps.splitlines() if ln.rstrip().endswith(lib)})


def native_library(workdir: Path) -> tuple[Path, str]:
    """``(library path, flavor)`` of the deep_gemm package under ``workdir`` (or a package folder)."""
    pkg = workdir / "deep_gemm" if (workdir / "deep_gemm").is_dir() else workdir
    bundled = sorted(pkg.glob("deep_gemm_cpp*.so"))
    if bundled:
        return bundled[0], "bundled"
    c = pkg / "_C.so"
    if c.is_file():
        return c, "sgl"
    found = sorted(pkg.glob("_C*.so"))
    if found:
        return found[0], "sgl"
    raise FileNotFoundError(f"no deep_gemm native library (_C.so or deep_gemm_cpp*.so) under {pkg}")


# --------------------------------------------------------------------------- argument checking


def _check_call(sig: OpSig, args: tuple[Any, ...], error: type[Exception]) -> None:
    """Raise ``error`` when ``args`` do not fit ``sig`` (arity, then each argument's kind)."""
    if sig.extra.get("unknown_arity"):
        return
    if len(args) != sig.arity:
        raise error(
            f"Mismatched number of arguments when calling `{sig.signature_text()}`: expected {sig.arity}, "
            f"got {len(args)} [cpu-tier stand-in]"
        )
    for i, (param, value) in enumerate(zip(sig.params, args, strict=False)):
        if not value_matches(param, value):
            label = f"#{i}" + (f" '{param.name}'" if param.name else "")
            raise error(
                f"Mismatched type on argument {label} when calling `{sig.signature_text()}`: expected "
                f"`{param.type}` but got `{describe_value(value)}` [cpu-tier stand-in]"
            )


class FfiTensor:
    """A tensor as tvm-ffi hands it back before conversion: it only offers the DLPack protocol."""

    def __init__(self, tensor: Any) -> None:
        self._tensor = tensor
        self.shape = tuple(tensor.shape)
        self.dtype = str(tensor.dtype).replace("torch.", "")

    def __dlpack__(self, *args: Any, **kwargs: Any) -> Any:
        return self._tensor.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self) -> Any:
        return self._tensor.__dlpack_device__()

    def __repr__(self) -> str:
        return f"FfiTensor(shape={self.shape}, dtype={self.dtype})"


class TvmFunction:
    """One exported function of a tvm-ffi ``_C.so``: positional arguments only, checked, then emulated."""

    def __init__(self, sig: OpSig, installed: Installed) -> None:
        self._sig = sig
        self._installed = installed
        self.__name__ = sig.name
        self.__qualname__ = sig.name

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs:
            # tvm-ffi packed functions are called with positional arguments only.
            raise TypeError(f"{self._sig.name}() got an unexpected keyword argument '{next(iter(kwargs))}'")
        _check_call(self._sig, args, TypeError)
        args = tuple(_from_ffi(a) for a in args)
        out = emulate(self._installed.profile, self._installed.state, self._sig.name, args)
        if self._installed.profile.ffi_returns == "dlpack":
            out = _to_ffi(out)
        return out

    def __repr__(self) -> str:
        return f"<tvm_ffi.Function {self._sig.name} (cpu-tier stand-in)>"


def _from_ffi(x: Any) -> Any:
    if isinstance(x, FfiTensor):
        return x._tensor
    if not isinstance(x, torch.Tensor) and hasattr(x, "__dlpack__"):
        return torch.utils.dlpack.from_dlpack(x)
    return x


def _to_ffi(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return FfiTensor(out)
    if isinstance(out, tuple):
        return tuple(_to_ffi(x) for x in out)
    return out


class TvmModule:
    """What ``tvm_ffi.load_module`` returns: attribute lookup of exported functions."""

    def __init__(self, installed: Installed) -> None:
        self._installed = installed
        self._funcs = {name: TvmFunction(sig, installed) for name, sig in installed.ops.items()}

    def __getattr__(self, name: str) -> Any:
        funcs = self.__dict__.get("_funcs", {})
        if name in funcs:
            return funcs[name]
        # tvm_ffi.Module raises AttributeError for a missing function; the wheels rely on it in
        # their `try: ... except AttributeError` probes.
        raise AttributeError(f"Module has no function '{name}'")

    def __dir__(self) -> list[str]:
        return sorted(self._funcs)

    def __repr__(self) -> str:
        return f"<tvm_ffi.Module {self._installed.library.name} (cpu-tier stand-in)>"


def _make_tvm_ffi(installed: Installed) -> types.ModuleType:
    mod = types.ModuleType("tvm_ffi")
    mod.__doc__ = "cpu-tier stand-in for apache-tvm-ffi (serves one release's _C.so)"
    mod.__version__ = "0.0.0+cpu-tier-stand-in"  # type: ignore[attr-defined]
    target = installed.library.resolve()

    def load_module(path: str | os.PathLike[str]) -> TvmModule:
        if Path(path).resolve() != target:
            raise RuntimeError(f"cpu-tier stand-in tvm_ffi only serves {target}, not {path}")
        installed.loaded = True
        return TvmModule(installed)

    module_mod = types.ModuleType("tvm_ffi.module")
    module_mod.Module = TvmModule  # type: ignore[attr-defined]
    cpp = types.ModuleType("tvm_ffi.cpp")

    def build(*_a: Any, **_k: Any) -> str:
        raise RuntimeError("cpu-tier stand-in: building deep_gemm's _C from sources is not possible here")

    cpp.build = build  # type: ignore[attr-defined]
    mod.load_module = load_module  # type: ignore[attr-defined]
    mod.Module = TvmModule  # type: ignore[attr-defined]
    mod.Function = TvmFunction  # type: ignore[attr-defined]
    mod.Tensor = FfiTensor  # type: ignore[attr-defined]
    mod.module = module_mod  # type: ignore[attr-defined]
    mod.cpp = cpp  # type: ignore[attr-defined]
    mod.__path__ = []  # a package, so `import tvm_ffi.cpp` resolves
    sys.modules["tvm_ffi"] = mod
    sys.modules["tvm_ffi.module"] = module_mod
    sys.modules["tvm_ffi.cpp"] = cpp
    return mod


# --------------------------------------------------------------------------- TORCH_LIBRARY


_LIBRARIES: list[Any] = []  # torch.library.Library objects must outlive the process' use of the ops


def _define_torch_ops(installed: Installed) -> None:
    lib = torch.library.Library("deep_gemm", "DEF")
    _LIBRARIES.append(lib)
    for name, sig in installed.ops.items():
        if not sig.schema:
            installed.undefined_schemas.append(name)
            continue
        try:
            lib.define(sig.schema)
        except Exception as exc:  # noqa: BLE001 - a schema torch cannot parse stays undefined, like a missing op
            installed.undefined_schemas.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        lib.impl(name, _torch_impl(sig, installed), "CompositeExplicitAutograd")


def _torch_impl(sig: OpSig, installed: Installed) -> Callable[..., Any]:
    def impl(*args: Any, **kwargs: Any) -> Any:
        # The dispatcher already matched the schema (count, names, types, defaults); it lets None
        # through for a non-optional Tensor, which a C++ kernel would see as an undefined tensor and
        # reject, so the kinds are checked once more.
        full = args + tuple(kwargs.values())
        # The dispatcher drops trailing arguments equal to their default (None for optionals).
        full += tuple(None if p.default is NO_DEFAULT else p.default for p in sig.params[len(full):])
        _check_call(sig, full, RuntimeError)
        return emulate(installed.profile, installed.state, sig.name, full, tuple(p.name for p in sig.params))

    impl.__name__ = f"deep_gemm_{sig.name}_stand_in"
    return impl


def _patch_load_library(installed: Installed) -> None:
    target = installed.library.resolve()
    original: Callable[[str | os.PathLike[str]], None] = torch.ops.load_library

    def load_library(path: str | os.PathLike[str]) -> None:
        if Path(path).resolve() != target:
            original(path)
            return
        if not installed.loaded:
            _define_torch_ops(installed)
            installed.loaded = True
            torch.ops.loaded_libraries.add(str(path))

    torch.ops.load_library = load_library  # type: ignore[method-assign]


class _BundledFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``deep_gemm.deep_gemm_cpp`` (the bundled copies' TORCH_LIBRARY extension) without loading it."""

    def __init__(self, installed: Installed, modname: str) -> None:
        self._installed = installed
        self._modname = modname

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        if fullname != self._modname:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, origin=str(self._installed.library))

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        if not self._installed.loaded:
            _define_torch_ops(self._installed)
            self._installed.loaded = True
        module.__doc__ = "cpu-tier stand-in: registers the deep_gemm torch.ops schemas of this bundle"


# --------------------------------------------------------------------------- entry point


def _schedule_balance(flavor: str, version: str) -> Literal["tail", "head"]:
    # dgcompat.reference.get_paged_mqa_logits_metadata: the remainder goes to the first SMs ("head")
    # in sgl-deep-gemm 0.0.1 - 0.1.3 and the v2.1 base of the bundled copies, to the last SMs
    # ("tail") from sgl-deep-gemm 0.1.4 on.
    if flavor == "bundled":
        return "head"

    try:
        return "head" if Version(version) < Version("0.1.4") else "tail"
    except InvalidVersion:
        return "tail"


CUDA_HOME_PREFIX = "dgcompat-cuda-home-"
#: A folder of the old naming (no pid) is litter once it is this old and empty (it is never read after import).
_LEGACY_AGE_S = 3600.0


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # another user's live process
    return True


def sweep_cuda_homes(scratch: Path | None = None) -> list[Path]:
    """Remove the empty CUDA_HOME folders that processes killed before their ``atexit`` left in ``scratch``.

    A folder is named ``dgcompat-cuda-home-<pid>-<random>``; it is removed when that process is gone.
    Folders of the older ``dgcompat-cuda-home-<random>`` naming are removed once empty and an hour old.
    Only empty folders are removed (``rmdir``), so nothing but litter can go. Returns what was removed.
    """
    base = Path(scratch) if scratch is not None else Path(tempfile.gettempdir())
    removed: list[Path] = []
    try:
        entries = list(base.glob(CUDA_HOME_PREFIX + "*"))
    except OSError:
        return removed
    now = time.time()
    for path in entries:
        tag = path.name[len(CUDA_HOME_PREFIX):].split("-", 1)
        try:
            if len(tag) == 2 and tag[0].isdigit():
                stale = int(tag[0]) != os.getpid() and not _pid_alive(int(tag[0]))
            else:
                stale = now - path.stat().st_mtime > _LEGACY_AGE_S
            if stale and path.is_dir() and not path.is_symlink():
                path.rmdir()  # fails (and is skipped) unless empty
                removed.append(path)
        except (OSError, ValueError):
            continue
    return removed


def make_cuda_home(scratch: Path | None = None) -> Path:
    """A fresh empty folder for ``CUDA_HOME``, removed when this process exits.

    A process killed before its ``atexit`` hooks run (a watchdog's SIGKILL) cannot remove its own
    folder, so the name carries the pid and every call first sweeps the folders of dead processes
    (:func:`sweep_cuda_homes`).
    """
    sweep_cuda_homes(scratch)
    cuda_home = Path(tempfile.mkdtemp(prefix=f"{CUDA_HOME_PREFIX}{os.getpid()}-", dir=scratch))
    atexit.register(shutil.rmtree, cuda_home, ignore_errors=True)
    return cuda_home


def install(workdir: Path, *, dist: str, version: str, arch: str = "sm90", ffi_returns: str = "torch",
            scratch: Path | None = None) -> Installed:
    """Put the stand-ins for the release unpacked in ``workdir`` in place (call before ``import deep_gemm``).

    The empty ``CUDA_HOME`` folder is made in ``scratch`` (default: the temporary folder) and
    removed when the process exits, or by the next call if this process is killed first
    (:func:`make_cuda_home`).
    """
    lib, flavor = native_library(workdir)
    era, ops = read_ops(lib)
    if flavor == "bundled":
        era = "torch-library"
    device_sms = 132 if arch == "sm90" else 148

    rules = rules_from_asserts(host_assert_texts(lib.read_bytes()))  # the binary's own indexer conditions
    profile = Profile(dist=dist, version=version, flavor=flavor, binding=era, arch=arch, device_sms=device_sms,
                      schedule_balance=_schedule_balance(flavor, version), ffi_returns=ffi_returns, rules=rules)
    state = NativeState(num_sms=device_sms)
    cuda_home = make_cuda_home(scratch)
    installed = Installed(profile, state, lib, ops, cuda_home)

    # find_cuda_home() asserts a toolkit exists (docs/sources/wheel-matrix.md §1 item 7); an empty folder
    # satisfies it and is never read, since nothing is compiled.
    os.environ["CUDA_HOME"] = str(cuda_home)
    os.environ.pop("CUDA_PATH", None)
    os.environ.setdefault("DG_JIT_CACHE_DIR", str(cuda_home / "jit-cache"))

    if flavor == "bundled":
        sys.meta_path.insert(0, _BundledFinder(installed, "deep_gemm." + lib.name.split(".", 1)[0]))
    elif era == "tvm-ffi":
        _make_tvm_ffi(installed)
    else:
        _patch_load_library(installed)
    return installed


def after_import(installed: Installed, module: Any) -> None:
    """Undo import-time hooks that would outlive the test run (0.2.5's ``atexit`` shutdown)."""
    shutdown = getattr(module, "shutdown", None)
    if shutdown is not None:
        atexit.unregister(shutdown)
