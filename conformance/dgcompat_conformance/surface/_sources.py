"""Reading a deep_gemm release from a wheel, an unpacked folder, or the wheel cache."""

from __future__ import annotations

import email.parser
import hashlib
import importlib.metadata as md
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from dgcompat.errors import DgcompatError

from .. import wheelcache
from ..dists import DISTRIBUTIONS, SGL_DEEP_GEMM, canonical
from ..wheelcache import cache_root, sha256_file, wheel_dir

__all__ = [
    "SurfaceError",
    "ReleaseFiles",
    "DIST_NAME",
    "PACKAGE",
    "cache_root",
    "wheel_dir",
    "find_cached_wheel",
    "download_wheel",
    "read_wheel",
    "read_folder",
    "sha256_file",
]

DIST_NAME = SGL_DEEP_GEMM
PACKAGE = "deep_gemm"


class SurfaceError(DgcompatError, ValueError):
    """A release could not be found, downloaded or read."""


@dataclass(frozen=True)
class ReleaseFiles:
    """The parts of a release the surface is read from."""

    kind: str
    """``"wheel"`` or ``"folder"``."""
    name: str
    """The wheel file name, or the folder name."""
    sha256: str | None
    python_sources: dict[str, str]
    """``deep_gemm/...py`` -> source text."""
    shared_objects: dict[str, bytes]
    """``deep_gemm/...so`` -> bytes."""
    metadata: str | None
    """The ``METADATA`` text of the owning distribution, if found."""
    notes: list[str] = field(default_factory=list)
    headers: dict[str, str] = field(default_factory=dict)
    """``deep_gemm/include/...`` -> sha256 hex: the sources the JIT compiles (empty when the release holds none)."""
    package_path: str = PACKAGE
    """Where the package sits in the wheel or folder (``vllm/third_party/deep_gemm`` for vLLM's copy); its
    files are named ``deep_gemm/...`` here whatever the path."""


def _parse_version(version: str) -> Version:
    try:
        return Version(version)
    except InvalidVersion as exc:
        raise SurfaceError(f"{version!r} is neither an existing path nor a release version") from exc


def find_cached_wheel(version: str, directory: Path | None = None, dist: str = DIST_NAME) -> Path | None:
    """The cached wheel of ``dist==version`` in ``directory`` (default: :func:`wheel_dir`), or None."""
    return wheelcache.find(dist, _parse_version(version), directory)


def download_wheel(version: str, directory: Path | None = None, dist: str = DIST_NAME, timeout: float = 900.0, *,
                   download: bool = True) -> Path:
    """The verified wheel of ``dist==version`` from the cache, fetched (again, when corrupt) unless not ``download``."""
    _parse_version(version)
    try:
        return wheelcache.fetch(dist, version, directory=directory, download=download, timeout=timeout)
    except wheelcache.CacheError as exc:
        raise SurfaceError(str(exc)) from exc


def _in_package(path: str) -> bool:
    parts = path.split("/")
    # The CUDA headers under deep_gemm/include are not part of the Python surface.
    return len(parts) >= 2 and parts[0] == PACKAGE and parts[1] != "include"


def _is_header(path: str) -> bool:
    parts = path.split("/")
    return len(parts) >= 3 and parts[0] == PACKAGE and parts[1] == "include"


def package_paths() -> tuple[str, ...]:
    """Where a deep_gemm package sits in the wheels of the discovery table's distributions (``deep_gemm`` first)."""

    paths = [PACKAGE] + [d.path.rstrip("/") for d in DISTRIBUTIONS]
    return tuple(dict.fromkeys(paths))


def _owns_package(dist: md.Distribution, package_path: str = PACKAGE) -> bool:
    """True when ``dist``'s RECORD (read by :attr:`importlib.metadata.Distribution.files`) or top_level.txt
    lists the deep_gemm package (at ``package_path``)."""
    try:
        files = dist.files or []
        top_level = (dist.read_text("top_level.txt") or "").split()
    except (OSError, UnicodeDecodeError, ValueError):
        return False  # an unreadable RECORD claims nothing
    parts = (*package_path.split("/"), "__init__.py")
    return package_path.split("/", maxsplit=1)[0] in top_level or any(f.parts == parts for f in files)


def _pick_metadata(candidates: Iterable[md.Distribution], package_path: str = PACKAGE) -> str | None:
    """The METADATA text of the candidate dist-info that owns deep_gemm (the only one, when just one)."""
    items = []
    for dist in candidates:
        try:
            text = dist.read_text("METADATA")
        except (OSError, UnicodeDecodeError):
            text = None
        if text is not None:
            items.append((dist, text))
    for dist, metadata in items:
        if _owns_package(dist, package_path):
            return metadata
    return items[0][1] if len(items) == 1 else None


def read_wheel(path: Path) -> ReleaseFiles:
    """Read the deep_gemm package and the dist-info METADATA from a wheel, without unpacking it."""
    try:
        zf = zipfile.ZipFile(path)
    except (OSError, zipfile.BadZipFile) as exc:
        raise SurfaceError(f"{path}: not a readable wheel: {exc}") from exc
    with zf:
        names = zf.namelist()
        present = set(names)
        where = next((p for p in package_paths() if f"{p}/__init__.py" in present), None)
        if where is None:
            raise SurfaceError(f"{path}: the wheel has no deep_gemm package (looked for "
                               f"{', '.join(p + '/__init__.py' for p in package_paths())})")
        sources: dict[str, str] = {}
        shared: dict[str, bytes] = {}
        headers: dict[str, str] = {}
        for name in names:
            if not name.startswith(where + "/") or name.endswith("/"):
                continue
            rel = PACKAGE + name[len(where):]  # a vendored copy is read as the deep_gemm package it is
            if _is_header(rel):
                headers[rel] = hashlib.sha256(zf.read(name)).hexdigest()
            elif not _in_package(rel):
                continue
            elif name.endswith(".py"):
                sources[rel] = zf.read(name).decode("utf-8", "replace")
            elif name.endswith(".so"):
                shared[rel] = zf.read(name)
        infos = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
        # A dist-info inside the archive, read through importlib.metadata as an installed one would be.
        metadata = _pick_metadata((md.PathDistribution(zipfile.Path(zf, f"{info}/")) for info in infos), where)
    return ReleaseFiles("wheel", path.name, sha256_file(path), sources, shared, metadata, headers=headers,
                        package_path=where)


def read_folder(path: Path) -> ReleaseFiles:
    """Read an installed or unpacked ``deep_gemm/`` (``path`` is its parent, or the package itself)."""
    root = path
    if (path / "__init__.py").is_file() and path.name == PACKAGE:
        root = path.parent
    pkg = root / PACKAGE
    if not (pkg / "__init__.py").is_file():
        raise SurfaceError(f"{path}: no {PACKAGE}/__init__.py in this folder")
    sources: dict[str, str] = {}
    shared: dict[str, bytes] = {}
    headers: dict[str, str] = {}
    for file in sorted(pkg.rglob("*")):
        rel = file.relative_to(root).as_posix()
        if not file.is_file() or "__pycache__" in rel:
            continue
        if _is_header(rel):
            headers[rel] = hashlib.sha256(file.read_bytes()).hexdigest()
        elif not _in_package(rel):
            continue
        elif file.suffix == ".py":
            sources[rel] = file.read_text("utf-8", "replace")
        elif file.suffix == ".so":
            shared[rel] = file.read_bytes()
    metadata = _pick_metadata(md.PathDistribution(info) for info in sorted(root.glob("*.dist-info")))
    # A vendored copy's folder (.../vllm/third_party/deep_gemm) is named by its path: its parent says nothing.
    where = next((p for p in package_paths()[1:] if pkg.resolve().as_posix().endswith("/" + p)), PACKAGE)
    name = pkg.resolve().parent.name if where == PACKAGE else pkg.resolve().as_posix()
    return ReleaseFiles("folder", name, None, sources, shared, metadata, headers=headers, package_path=where)


def parse_metadata(text: str | None) -> tuple[dict[str, str] | None, list[str]]:
    """``({"name", "version"}, Requires-Dist lines)`` from METADATA text."""
    if not text:
        return None, []
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = msg.get("Name"), msg.get("Version")
    release = {"name": canonical(name), "version": str(version)} if name and version else None
    requires = [str(r).strip() for r in msg.get_all("Requires-Dist") or []]
    return release, requires
