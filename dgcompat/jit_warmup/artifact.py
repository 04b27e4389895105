"""One file that carries a warmed JIT cache to other machines: ``dgcompat warmup ... --export FILE`` writes it,
``dgcompat warmup --import FILE`` verifies it and relocates it into a serving folder.

The file is a gzip-compressed tar of ``manifest.json`` and ``kernels/<entry>/<file>``. The manifest
(``"format": "dgcompat-jit-cache 1"``) names the build (:class:`~dgcompat.jit_warmup.relocate.Build`: release,
package fingerprint, JIT lineage, flags, NVCC ``--version`` text, GPU and architecture, torch), the description
warmed (``spec``, which ``--check`` after an import uses) and every kernel with the SHA-256 of each of its files.

Export takes the entries of the folder that the installed build compiled (each entry's key reproduced from the
build's recorded flags; ``deep_jit`` entries whose recorded command names this install). Import refuses the whole
file, saying why, unless the installed build matches the manifest's in everything but its install folder
(:func:`~dgcompat.jit_warmup.relocate.mismatches`); then it checks every file's hash, every entry's key and
headers, gives each entry the name the installed deep_gemm looks it up under and renames it into place, never
over an entry already there. A folder filled that way is only ever read at serve time: it can be read-only
(an image layer, NFS) for every rank.
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import os
import re
import tarfile
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

from .. import __version__
from ..detection import release
from ..errors import BadArgumentError
from ..errors import DeepGemmUnavailableError
from . import record
from .keys import HeaderHashes
from .keys import parse_entry
from .relocate import Build
from .relocate import derive
from .relocate import entry_files
from .relocate import here
from .relocate import install_entry
from .relocate import mismatches
from .relocate import read_builds
from .relocate import rekey
from .relocate import verify_entry
from .relocate import write_build
from .report import WarmupError
from .spec import WarmupSpec
from .spec import spec_from_json
from .spec import spec_to_json

__all__ = ["FORMAT", "ExportReport", "ImportReport", "export", "import_cache", "read_manifest"]

FORMAT = "dgcompat-jit-cache 1"
#: Uncompressed bytes an import reads at most (a cache of a few hundred kernels is tens of MiB).
MAX_BYTES = 16 << 30
_FILE = re.compile(r"[A-Za-z0-9_.-]{1,128}")


@dataclass(frozen=True)
class ExportReport:
    """What :func:`export` wrote: ``kernels`` entries of ``release`` into ``file`` (``bytes`` long)."""

    file: str
    release: str
    kernels: int
    bytes: int
    skipped: int = 0
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        head = (f"dgcompat warmup --export: {self.kernels} kernels of {self.release} written to {self.file} "
                f"({self.bytes / 1e6:.1f} MB)")
        extra = [f"  {self.skipped} entries of the folder left out (built by another install or build)"] \
            if self.skipped else []
        return "\n".join([head, *extra, *(f"  note: {n}" for n in self.notes)])


@dataclass
class ImportReport:
    """What :func:`import_cache` did: of ``kernels`` in ``file``, ``installed`` were put into ``cache`` under the
    installed build's keys, ``present`` were there already; ``refused``: what was left out and why (the whole
    file, when the builds differ); ``spec``: the description the file was warmed for."""

    file: str
    cache: str
    release: str
    kernels: int = 0
    installed: int = 0
    present: int = 0
    refused: list[str] = field(default_factory=list)
    spec: WarmupSpec | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        """Every kernel of the file now serves the installed build from ``cache``."""
        return not self.refused and self.installed + self.present == self.kernels

    def summary(self) -> str:
        verdict = "OK" if self.ok else "INCOMPLETE"
        head = (f"dgcompat warmup --import [{self.release}]: {verdict}: {self.kernels} kernels in {self.file}: "
                f"{self.installed} relocated into {self.cache}, {self.present} already there")
        return "\n".join([head, *(f"  refused: {r}" for r in self.refused), *(f"  note: {n}" for n in self.notes)])


def _this_build(cache: Path, location: str) -> Build | None:
    include = os.path.realpath(os.path.join(location, "include"))
    mine = [b for b in read_builds(cache) if os.path.realpath(b.include) == include]
    mine.sort(key=lambda b: bool(b.derived))  # what a warmup saw first
    return mine[0] if mine else None


def _exported_entries(cache: Path, build: Build, hashes: HeaderHashes) -> tuple[list[tuple[str, dict[str, bytes]]], int]:
    chosen: list[tuple[str, dict[str, bytes]]] = []
    skipped = 0
    try:
        folders = sorted(p for p in (cache / "cache").iterdir() if p.is_dir())
    except OSError:
        folders = []
    for folder in folders:
        try:
            files = entry_files(folder)
        except OSError:
            skipped += 1
            continue
        ok = verify_entry(folder.name, files, build, hashes) is None
        if ok and build.lineage == "deep_jit":  # no key to check: its recorded command names the install
            ok = build.include in files.get("meta.json", b"").decode("utf-8", "replace")
        if ok:
            chosen.append((folder.name, files))
        else:
            skipped += 1
    return chosen, skipped


def export(cache: Path, file: Path, *, spec: WarmupSpec | None, nvcc: str, device: int = 0,
           calls: int = 0) -> ExportReport:
    """Write the kernels the installed build compiled into ``cache`` to ``file`` (never over an existing file).

    Raises :class:`~dgcompat.jit_warmup.report.WarmupError` when the folder has no record of the installed build
    (warm it first: a warmup records it) or the installed package changed since it was recorded."""
    rel = release()
    if not rel.location:
        raise DeepGemmUnavailableError("warmup(): --export needs an installed deep_gemm")
    build = _this_build(cache, rel.location)
    if build is None:
        raise WarmupError(f"warmup(): {cache} holds no record of how the deep_gemm at {rel.location} builds kernels: "
                          "warm the folder with dgcompat warmup (it records that), then export")
    at = here(nvcc, device)
    assert at is not None
    changed = mismatches(build, at)
    if changed:
        raise WarmupError(f"warmup(): the installed deep_gemm is not the build that warmed {cache}: "
                          + "; ".join(changed))
    chosen, skipped = _exported_entries(cache, build, HeaderHashes(Path(at.include)))
    if not chosen:
        raise WarmupError(f"warmup(): {cache} holds no kernel the deep_gemm at {rel.location} compiled: nothing to "
                          "export")
    manifest = {
        "format": FORMAT, "created": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()), "dgcompat": __version__,
        "release": build.release, "fingerprint": build.fingerprint, "lineage": build.lineage, "nvcc": build.nvcc,
        "gpu": build.gpu, "arch": build.arch, "torch": build.torch, "build": build.as_dict(),
        "spec": None if spec is None else spec_to_json(spec), "calls": calls,
        "kernels": [{"name": name, "files": {f: hashlib.sha256(d).hexdigest() for f, d in files.items()}}
                    for name, files in chosen],
    }
    file = file.absolute()
    tmp = file.with_name(f".{file.name}.{os.getpid()}.part")
    try:
        with tarfile.open(tmp, "w:gz") as tar:
            _add(tar, "manifest.json", (json.dumps(manifest, indent=1) + "\n").encode())
            for name, files in chosen:
                for fname, data in files.items():
                    _add(tar, f"kernels/{name}/{fname}", data)
        try:
            os.link(tmp, file)  # fails if the file appeared meanwhile: never overwrite
        except FileExistsError:
            raise
        except OSError:  # a file system without hard links
            if file.exists():
                raise FileExistsError(errno.EEXIST, "exists", str(file)) from None
            os.rename(tmp, file)
    finally:
        tmp.unlink(missing_ok=True)
    return ExportReport(str(file), build.release, len(chosen), file.stat().st_size, skipped)


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mtime = int(time.time())
    info.mode = 0o644
    tar.addfile(info, io.BytesIO(data))


def _bad(file: Path, why: str) -> BadArgumentError:
    return BadArgumentError("warmup", "import", "a file written by dgcompat warmup --export", f"{file}: {why}")


def read_manifest(tar: tarfile.TarFile, file: Path) -> dict[str, Any]:
    """The manifest of an open export file (BadArgumentError naming ``import`` if there is none)."""
    try:
        member = tar.getmember("manifest.json")
        handle = tar.extractfile(member)
        if handle is None or member.size > (64 << 20):
            raise _bad(file, "its manifest.json is not a file of sensible size")
        data = json.loads(handle.read())
    except KeyError:
        raise _bad(file, "no manifest.json in it") from None
    except (ValueError, OSError, tarfile.TarError) as exc:
        raise _bad(file, f"unreadable manifest ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise _bad(file, f"its manifest is not {FORMAT!r}")
    return data


def _members(tar: tarfile.TarFile, file: Path, lineage: Any) -> dict[str, dict[str, bytes]]:
    """Every kernel file of the export, by entry: only plain files named ``kernels/<entry>/<file>``."""
    out: dict[str, dict[str, bytes]] = {}
    total = 0
    for member in tar:
        if member.name == "manifest.json":
            continue
        parts = member.name.split("/")
        if (not member.isfile() or len(parts) != 3 or parts[0] != "kernels" or not _FILE.fullmatch(parts[1])
                or not _FILE.fullmatch(parts[2]) or parse_entry(parts[1], lineage) is None):
            raise _bad(file, f"unexpected member {member.name!r}")
        total += member.size
        if total > MAX_BYTES:
            raise _bad(file, f"more than {MAX_BYTES >> 30} GiB of kernels")
        handle = tar.extractfile(member)
        if handle is None:
            raise _bad(file, f"unreadable member {member.name!r}")
        out.setdefault(parts[1], {})[parts[2]] = handle.read()
    return out


def import_cache(file: Path, cache: Path, *, nvcc: str, device: int = 0) -> ImportReport:
    """Verify the export ``file`` against the installed build and put its kernels into ``cache`` under the keys the
    installed deep_gemm looks them up under (see the module docstring). Nothing is written when the builds
    differ: the report says why. Raises :class:`~dgcompat.errors.BadArgumentError` (argument ``import``) for a
    file that is not an export."""
    at = here(nvcc, device)
    if at is None:
        raise DeepGemmUnavailableError("warmup(): --import needs an installed deep_gemm to relocate the kernels for")
    try:
        tar = tarfile.open(file, "r:*")  # noqa: SIM115 - closed by the `with tar:` below
    except (OSError, tarfile.TarError) as exc:
        raise _bad(file, str(exc)) from None
    with tar:
        manifest = read_manifest(tar, file)
        try:
            build = Build.from_dict(manifest["build"])
            listed = {k["name"]: dict(k["files"]) for k in manifest["kernels"]}
        except (KeyError, TypeError, ValueError) as exc:
            raise _bad(file, f"incomplete manifest ({exc})") from None
        spec = spec_from_json(manifest["spec"], "import") if manifest.get("spec") is not None else None
        report = ImportReport(str(file), str(cache), at.release, len(listed), spec=spec)
        why = mismatches(build, at)
        target = derive(build, at) if not why else None
        if target is None:
            report.refused = why or [f"the flags of {build.release} do not name its include folder once"]
            report.notes.append(f"nothing imported: these kernels were built by {build.release} at {build.location}")
            return report
        try:
            found = _members(tar, file, build.lineage)
        except (OSError, tarfile.TarError) as exc:
            raise _bad(file, str(exc)) from None
    hashes = HeaderHashes(Path(at.include))
    for name, sums in listed.items():
        files = found.get(name)
        if files is None or {f: hashlib.sha256(d).hexdigest() for f, d in files.items()} != sums:
            report.refused.append(f"{name}: its files in the export do not match the manifest")
            continue
        problem = verify_entry(name, files, build, hashes)
        if problem is not None:
            report.refused.append(problem)
            continue
        if install_entry(cache, rekey(name, files, target, hashes), files):
            report.installed += 1
        else:
            report.present += 1
    if report.installed and not any(os.path.realpath(b.include) == os.path.realpath(at.include)
                                    for b in read_builds(cache)):
        write_build(cache, target)
    if spec is not None and report.ok:
        key = record.key(spec, nvcc, device)
        if key is not None:  # an identical warmup here returns at once, also on a read-only copy of the folder
            record.write(cache, key, calls=int(manifest.get("calls", 0)), kernels=report.kernels,
                         notes=[f"imported from {file}"])
    return report
