"""A warmed JIT cache serving another install of the same deep_gemm build: its entries re-keyed.

The ``compiler`` and ``bundled`` JIT lineages (:mod:`dgcompat.jit_warmup.keys`) put the include folder of the
installed deep_gemm (``-I<site-packages>/deep_gemm/include``) into every kernel's key, so a folder warmed by one
install is a folder of misses for the same build installed elsewhere (a moved virtualenv, a container, another
machine). What a kernel was built from is otherwise identical there, so dgcompat gives each entry the name the
other install's deep_gemm will look for, once it has verified that nothing but the install path differs:

- every warmup records what its install builds with (:class:`Build`: the JIT lineage, its flag string, the NVCC
  signature and ``--version`` text, a fingerprint of the package's headers and native libraries, the
  ``DG_JIT_*`` settings that change flags, the GPU) in ``<cache>/dgcompat-warmup/origin-<id>.json``;
- :func:`adopt` (``dgcompat warmup --adopt``; every warmup does it first) takes each recorded build of another
  install folder and refuses it, with the reason, unless the installed package has the same fingerprint, the
  NVCC deep_gemm would run prints the same ``--version`` text, the ``DG_JIT_*`` settings are the same and the
  GPU is of the same architecture; then, per entry, it recomputes the entry's own key from the recorded flags
  (an entry whose key does not reproduce was not built by that install and is left alone), checks the header
  stamp of its source against the headers installed here (``compiler``; the ``bundled`` key hashes them
  itself), and writes a copy under the key of the flags with this install's include folder
  (:func:`rekey`), renamed into place in one step as deep_gemm does.

Soundness does not rest on those checks alone: deep_gemm looks an entry up by the hash of *its own* signature,
flags and generated code, so a copy is only ever found by a deep_gemm whose compiler version, flags (but for the
include folder) and source are the recorded ones; anything else misses it and compiles. ``deep_jit`` keys carry
no path: its entries serve a moved install as they are, and nothing is re-keyed.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import uuid
from collections.abc import Mapping
from collections.abc import Sequence
from dataclasses import asdict
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from ..detection import release
from . import host
from .cache import torch_version
from .keys import LINEAGES
from .keys import HeaderHashes
from .keys import KeyError_
from .keys import Lineage
from .keys import entry_key
from .keys import entry_name
from .keys import flags_of
from .keys import lineage_of
from .keys import nvcc_signature
from .keys import parse_entry
from .keys import split_stamp

__all__ = ["Build", "Here", "Adoption", "FLAG_VARIABLES", "package_fingerprint", "nvcc_version", "here",
           "observe", "read_builds", "write_build", "mismatches", "derive", "verify_entry", "rekey", "install_entry",
           "adopt", "entry_files", "ORIGIN_FORMAT"]

ORIGIN_FORMAT = "dgcompat-jit-origin 1"

#: The settings deep_gemm folds into its compiler flags (or that change the compiler): a kernel built with other
#: values is another kernel.
FLAG_VARIABLES = ("DG_JIT_CPP_STANDARD", "DG_JIT_DEBUG", "DG_JIT_PTXAS_VERBOSE", "DG_JIT_PTXAS_CHECK",
                  "DG_JIT_WITH_LINEINFO", "DG_JIT_USE_NVRTC")

#: Flags that write source paths into the cubin: such an entry names a folder that is not there after a move.
_PATHS_IN_OUTPUT = ("-lineinfo", "--generate-line-info", "-G", "--device-debug")


@dataclass(frozen=True)
class Build:
    """What one install of deep_gemm builds kernels with (recorded by a warmup, or derived for another install).

    ``location``: the deep_gemm package folder; ``include``: its include folder as the flags spell it;
    ``fingerprint``: :func:`package_fingerprint`; ``nvcc``: the ``nvcc --version`` text; ``signature``: the key's
    ``NVCC<major>.<minor>``; ``flags``: the JIT's flag string; ``settings``: the ``DG_JIT_*`` values in effect;
    ``gpu``: ``nvidia-smi``'s ``name, compute_cap`` ("" unknown); ``command``: one compiler command with the
    source, output and build folder as ``{source}``, ``{output}``, ``{dir}``; ``derived``: "" when a warmup saw
    it, else the include folder of the build it was derived from."""

    lineage: Lineage
    release: str
    location: str
    include: str
    fingerprint: str
    nvcc: str
    signature: str
    flags: str
    settings: tuple[tuple[str, str], ...]
    torch: str
    gpu: str = ""
    command: tuple[str, ...] = ()
    derived: str = ""

    @property
    def arch(self) -> str:
        """The ``--gpu-architecture`` of the flags (``sm_90a``), or ""."""
        for part in self.flags.split():
            if part.startswith("--gpu-architecture="):
                return part.split("=", 1)[1]
        return ""

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["format"] = ORIGIN_FORMAT
        out["settings"] = dict(self.settings)
        return out

    @staticmethod
    def from_dict(data: Mapping[str, Any]) -> Build:
        """The build a record or manifest describes; ValueError if it is not one."""
        if data.get("format") != ORIGIN_FORMAT or data.get("lineage") not in LINEAGES:
            raise ValueError(f"not a {ORIGIN_FORMAT!r} record")
        settings = data.get("settings") or {}
        if not isinstance(settings, dict):
            raise ValueError("settings: expected an object")  # noqa: TRY004 - ValueError: not a record (the contract)
        try:
            return Build(data["lineage"], str(data["release"]), str(data["location"]), str(data["include"]),
                         str(data["fingerprint"]), str(data["nvcc"]), str(data["signature"]), str(data["flags"]),
                         tuple(sorted((str(k), str(v)) for k, v in settings.items())), str(data["torch"]),
                         str(data.get("gpu", "")), tuple(str(a) for a in data.get("command", ())),
                         str(data.get("derived", "")))
        except (KeyError, TypeError) as exc:
            raise ValueError(f"incomplete record: {exc}") from None


@dataclass(frozen=True)
class Here:
    """The installed build as this process finds it: what a recorded build is compared with."""

    release: str
    location: str
    include: str
    fingerprint: str
    nvcc: str
    settings: tuple[tuple[str, str], ...]
    family: str | None  # the GPU's architecture family (``sm90``), None when unknown here


@dataclass
class Adoption:
    """What :func:`adopt` did: ``adopted`` (old, new) folder names, ``present``: entries whose re-keyed copy was
    already there, ``refused``: one line per recorded build or entry left alone, and why."""

    adopted: list[tuple[str, str]] = field(default_factory=list)
    present: int = 0
    refused: list[str] = field(default_factory=list)
    builds: int = 0

    def summary(self) -> str:
        head = (f"dgcompat warmup --adopt: {len(self.adopted)} kernels re-keyed for this install, {self.present} "
                f"already there, from {self.builds} recorded builds of other install folders")
        return "\n".join([head, *(f"  left alone: {r}" for r in self.refused)])


def package_fingerprint(location: str | os.PathLike[str]) -> str:
    """SHA-256 over every file of the deep_gemm package (relative path and contents; ``__pycache__`` left out):
    its Python layer, native libraries and headers. Two installs of one build have the same."""
    root = Path(location)
    h = hashlib.sha256()
    files: list[tuple[tuple[str, ...], Path]] = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in names:
            if not n.endswith((".pyc", ".pyo")):
                p = Path(folder) / n
                files.append((p.relative_to(root).parts, p))
    for parts, p in sorted(files):
        h.update("/".join(parts).encode() + b"\0")
        try:
            with open(p, "rb") as f:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
        except OSError:
            h.update(b"<unreadable>")
        h.update(b"\0")
    return h.hexdigest()


def nvcc_version(nvcc: str) -> str:
    """``<nvcc> --version``'s output, stripped ("" when it cannot be run): what the JITs key on."""
    try:
        out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return out.stdout.strip() if out.returncode == 0 else ""


def current_settings() -> tuple[tuple[str, str], ...]:
    return tuple((v, os.environ.get(v, "")) for v in FLAG_VARIABLES)


def here(nvcc: str, device: int = 0) -> Here | None:
    """The installed build (None without an installed deep_gemm folder)."""
    rel = release()
    if not rel.location:
        return None
    location = os.path.abspath(rel.location)  # as deep_gemm's __init__ hands it to its JIT (abspath, not realpath)
    return Here(rel.label, location, os.path.join(location, "include"), package_fingerprint(location),
                nvcc_version(nvcc), current_settings(), host.gpu_family(device))


def _include_in(args: Sequence[str], location: str) -> str | None:
    """The include folder of ``location`` as the command spells it (``-I<dir>`` or ``--include-path <dir>``)."""
    want = os.path.realpath(os.path.join(location, "include"))
    for i, a in enumerate(args):
        value = a[2:] if a.startswith("-I") and len(a) > 2 else (
            args[i + 1] if a == "--include-path" and i + 1 < len(args) else None)
        if value and os.path.realpath(value) == want:
            return value
    return None


def _template(args: Sequence[str]) -> tuple[str, ...]:
    """``args`` with the source, the output and the build folder as placeholders."""
    code = next((a for a in args if a.endswith(".cu")), "")
    out = ""
    for i, a in enumerate(args[:-1]):
        if a in ("-o", "--output-file"):
            out = args[i + 1]
    folder = os.path.dirname(code)
    return tuple("{source}" if a == code else "{output}" if a == out else
                 a.replace(folder, "{dir}") if folder and folder in a else a for a in args)


def observe(args: Sequence[str], nvcc: str, device: int = 0) -> Build | None:
    """The installed build, from one compiler command its JIT asked for (a warmup's recipe); None where the
    command is of no known lineage or does not name the installed include folder."""
    rel = release()
    lineage = lineage_of(args)
    if lineage is None or not rel.location:
        return None
    include = _include_in(args, rel.location)
    text = nvcc_version(nvcc)
    signature = nvcc_signature(text)
    if include is None or signature is None:
        return None
    gpu = host.nvidia_smi("name,compute_cap", device) or ""
    return Build(lineage, rel.label, os.path.abspath(rel.location), include,
                 package_fingerprint(rel.location), text, signature, flags_of(args), current_settings(),
                 torch_version(), gpu, _template(args))


def _origin_file(cache: Path, include: str) -> Path:
    return cache / "dgcompat-warmup" / f"origin-{hashlib.sha256(include.encode()).hexdigest()[:16]}.json"


def write_build(cache: Path, build: Build) -> None:
    """Record ``build`` in ``cache`` (one file per include folder; written whole, then renamed into place)."""
    path = _origin_file(cache, build.include)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(build.as_dict(), indent=1) + "\n")
    os.replace(tmp, path)


def read_builds(cache: Path) -> list[Build]:
    """The builds recorded in ``cache`` (unreadable or foreign records are skipped)."""
    out: list[Build] = []
    try:
        files = sorted((cache / "dgcompat-warmup").glob("origin-*.json"))
    except OSError:
        return out
    for f in files:
        try:
            out.append(Build.from_dict(json.loads(f.read_text())))
        except (OSError, ValueError):
            continue
    return out


def _family(arch: str) -> str | None:
    """``sm_90a`` -> ``sm90``, ``sm_100f`` -> ``sm100`` (as :func:`dgcompat.table.arch_family` names them)."""
    digits = "".join(c for c in arch.split("_", 1)[-1] if c.isdigit())
    return f"sm{digits}" if digits else None


def mismatches(build: Build, at: Here) -> list[str]:
    """Why kernels of ``build`` must not serve the install ``at`` (empty: only the install folder differs)."""
    why: list[str] = []
    if build.lineage not in ("compiler", "bundled", "deep_jit"):
        why.append(f"unknown JIT lineage {build.lineage!r}")
    if build.fingerprint != at.fingerprint:
        why.append(f"another build: {build.release} at {build.location} (fingerprint {build.fingerprint[:12]}) vs "
                   f"{at.release} here (fingerprint {at.fingerprint[:12]}): other headers, Python layer or native "
                   "library")
    if build.nvcc != at.nvcc:
        why.append(f"another compiler: built with {_nvcc_line(build.nvcc)}, here "
                   f"{_nvcc_line(at.nvcc) or 'no NVCC found'}")
    theirs, ours = dict(build.settings), dict(at.settings)
    changed = [f"{k}={ours.get(k, '')!r} here, {theirs.get(k, '')!r} there" for k in FLAG_VARIABLES
               if theirs.get(k, "") != ours.get(k, "")]
    if changed:
        why.append("other compiler settings: " + ", ".join(changed))
    family = _family(build.arch)
    if at.family is not None and family is not None and family != at.family:
        why.append(f"another GPU architecture: built for {build.arch}, this GPU is {at.family}")
    if any(flag in build.flags.split() for flag in _PATHS_IN_OUTPUT):
        why.append("built with line info: the kernels name source paths of the other install")
    return why


def _nvcc_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if "release" in ln]
    return lines[-1] if lines else text.strip()[:80]


def derive(build: Build, at: Here) -> Build | None:
    """``build`` as the install ``at`` builds it: the flags with that install's include folder (None where the
    flags do not name the include folder exactly once). ``deep_jit`` keys carry no path: the flags stay."""
    if build.lineage == "deep_jit":
        flags = build.flags
    else:
        old = f"-I{build.include}"
        tokens = build.flags.split(" ")
        if tokens.count(old) != 1:
            return None
        flags = " ".join(f"-I{at.include}" if t == old else t for t in tokens)
    command = tuple(a.replace(build.include, at.include) for a in build.command)
    return Build(build.lineage, at.release, at.location, at.include, at.fingerprint, at.nvcc, build.signature, flags,
                 at.settings, torch_version(), build.gpu, command, derived=build.include)


def entry_files(folder: Path) -> dict[str, bytes]:
    """The files of a cache entry (one level: deep_gemm writes no sub-folders into an entry)."""
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def verify_entry(name: str, files: Mapping[str, bytes], build: Build, hashes: HeaderHashes) -> str | None:
    """None if the entry ``name`` (its ``files``) is one ``build`` compiled and its headers are those of
    ``hashes``, else why not. ``deep_jit`` entries are checked for completeness only (their key is not
    reproduced here; deep_gemm checks it at every lookup)."""
    parsed = parse_entry(name, build.lineage)
    if parsed is None:
        return f"{name}: not a {build.lineage} cache entry"
    kernel, digest = parsed
    if "kernel.cubin" not in files or "kernel.cu" not in files:
        return f"{name}: incomplete (no kernel.cu or kernel.cubin)"
    if build.lineage == "deep_jit":
        return None if ".committed" in files else f"{name}: not committed"
    code = files["kernel.cu"]
    try:
        library = hashes.library_version() if build.lineage == "bundled" else ""
        if entry_key(build.lineage, kernel, build.signature, build.flags, code, library) != digest:
            return (f"{name}: its key does not reproduce from the recorded flags and compiler (built by another "
                    "install, compiler or header set)")
        if build.lineage == "compiler":
            stamped = split_stamp(code)
            if stamped is None:
                return f"{name}: its source has no header stamp"
            if hashes.include_hash(stamped[1]) != stamped[0]:
                return f"{name}: built from other deep_gemm headers than those installed here"
    except KeyError_ as exc:
        return f"{name}: {exc}"
    return None


def rekey(name: str, files: Mapping[str, bytes], target: Build, hashes: HeaderHashes) -> str:
    """The folder name deep_gemm of ``target`` looks the verified entry ``name`` up under."""
    if target.lineage == "deep_jit":
        return name
    parsed = parse_entry(name, target.lineage)
    assert parsed is not None
    library = hashes.library_version() if target.lineage == "bundled" else ""
    digest = entry_key(target.lineage, parsed[0], target.signature, target.flags, files["kernel.cu"], library)
    return entry_name(target.lineage, parsed[0], digest)


def install_entry(cache: Path, name: str, files: Mapping[str, bytes]) -> bool:
    """Put an entry into ``cache/cache/<name>``: written into ``cache/tmp``, then renamed into place in one
    step (as deep_gemm publishes its own), never over an existing entry; whether it was put there."""
    final = cache / "cache" / name
    if final.exists():
        return False
    tmp = cache / "tmp" / f"dgcompat-{uuid.uuid4().hex}"
    tmp.mkdir(parents=True)
    try:
        for fname, data in files.items():
            with open(tmp / fname, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        final.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.rename(tmp, final)
        except OSError:
            if final.exists():  # another process put it there first
                return False
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return True


def adopt(cache: Path, nvcc: str, device: int = 0, *, at: Here | None = None) -> Adoption:
    """Re-key, for the installed build, the entries ``cache`` holds from other install folders of the same build
    (see the module docstring). Writes into ``cache`` only where there is something to adopt."""
    result = Adoption()
    rel = release()
    if not rel.location:
        return result
    include = os.path.realpath(os.path.join(rel.location, "include"))
    builds = read_builds(cache)
    others = [b for b in builds if b.lineage != "deep_jit" and b.release == rel.label
              and os.path.realpath(b.include) != include]
    result.builds = len(others)
    if not others:
        return result  # (without hashing the package: nothing recorded by another install of this release)
    at = at or here(nvcc, device)
    if at is None:
        return result
    hashes = HeaderHashes(Path(at.include))
    folders = _entry_folders(cache)
    derived: Build | None = None
    for build in others:
        why = mismatches(build, at)
        target = derive(build, at) if not why else None
        if target is None:
            result.refused.append(f"the kernels built at {build.location}: "
                                  + ("; ".join(why) or "its flags do not name its include folder once"))
            continue
        for folder in folders:
            try:
                files = entry_files(folder)
            except OSError:
                continue
            if verify_entry(folder.name, files, build, hashes) is not None:
                continue  # not one of this build's (or not verifiable): left as it is
            new = rekey(folder.name, files, target, hashes)
            if install_entry(cache, new, files):
                result.adopted.append((folder.name, new))
            else:
                result.present += 1
        derived = derived or target
    mine = any(os.path.realpath(b.include) == os.path.realpath(at.include) and not b.derived for b in builds)
    if derived is not None and result.adopted and not mine:
        write_build(cache, derived)  # so that this folder can be exported (and adopted onwards) from here
    return result


def _entry_folders(cache: Path) -> list[Path]:
    try:
        return sorted(p for p in (cache / "cache").iterdir() if p.is_dir())
    except OSError:
        return []
