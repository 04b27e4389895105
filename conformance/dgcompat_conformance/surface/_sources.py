"""Reading a deep_gemm release from a wheel, an unpacked folder, or the wheel cache."""

from __future__ import annotations

import email.parser
import importlib.metadata as md
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from packaging.version import InvalidVersion, Version

from dgcompat.errors import DgcompatError

from .. import wheelcache
from ..dists import SGL_DEEP_GEMM, canonical
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


def _owns_package(dist: md.Distribution) -> bool:
    """True when ``dist``'s RECORD (read by :attr:`importlib.metadata.Distribution.files`) or top_level.txt
    lists the deep_gemm package."""
    try:
        files = dist.files or []
        top_level = (dist.read_text("top_level.txt") or "").split()
    except (OSError, UnicodeDecodeError, ValueError):
        return False  # an unreadable RECORD claims nothing
    return PACKAGE in top_level or any(f.parts == (PACKAGE, "__init__.py") for f in files)


def _pick_metadata(candidates: Iterable[md.Distribution]) -> str | None:
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
        if _owns_package(dist):
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
        sources: dict[str, str] = {}
        shared: dict[str, bytes] = {}
        for name in names:
            if not _in_package(name):
                continue
            if name.endswith(".py"):
                sources[name] = zf.read(name).decode("utf-8", "replace")
            elif name.endswith(".so"):
                shared[name] = zf.read(name)
        infos = sorted({n.split("/", 1)[0] for n in names if n.split("/", 1)[0].endswith(".dist-info")})
        # A dist-info inside the archive, read through importlib.metadata as an installed one would be.
        metadata = _pick_metadata(md.PathDistribution(zipfile.Path(zf, f"{info}/")) for info in infos)
    if f"{PACKAGE}/__init__.py" not in sources:
        raise SurfaceError(f"{path}: the wheel has no {PACKAGE}/__init__.py")
    return ReleaseFiles("wheel", path.name, sha256_file(path), sources, shared, metadata)


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
    for file in sorted(pkg.rglob("*")):
        rel = file.relative_to(root).as_posix()
        if not file.is_file() or not _in_package(rel) or "__pycache__" in rel:
            continue
        if file.suffix == ".py":
            sources[rel] = file.read_text("utf-8", "replace")
        elif file.suffix == ".so":
            shared[rel] = file.read_bytes()
    metadata = _pick_metadata(md.PathDistribution(info) for info in sorted(root.glob("*.dist-info")))
    return ReleaseFiles("folder", pkg.resolve().parent.name, None, sources, shared, metadata)


def parse_metadata(text: str | None) -> tuple[dict[str, str] | None, list[str]]:
    """``({"name", "version"}, Requires-Dist lines)`` from METADATA text."""
    if not text:
        return None, []
    msg = email.parser.Parser().parsestr(text, headersonly=True)
    name, version = msg.get("Name"), msg.get("Version")
    release = {"name": canonical(name), "version": str(version)} if name and version else None
    requires = [str(r).strip() for r in msg.get_all("Requires-Dist") or []]
    return release, requires
