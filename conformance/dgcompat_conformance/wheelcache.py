"""The wheel cache: one folder of published wheels, shared by the CPU tier, the surface and the intake.

Wheels live in ``$DGCOMPAT_CACHE/wheels`` (default ``~/.cache/dgcompat/wheels``). File names are
read with :func:`packaging.utils.parse_wheel_filename` and nothing else. Entries are written
atomically (downloaded into a private folder, then renamed into place) with their sha256 beside
them (``<wheel>.sha256``), and verified on every use: against the recorded hash where there is
one (that file, or the hash a committed certificate recorded for the same file name), and as a
readable zip archive always. A corrupt entry is fetched again, never used.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable
from pathlib import Path

from packaging.utils import InvalidWheelFilename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from dgcompat._tooling import env_folder

from .certificate import CertificateError, committed
from .dists import canonical

__all__ = ["CacheError", "cache_root", "wheel_dir", "work_root", "sha256_file", "parse_name", "find", "wheels_of", "verify",
           "fetch", "confined"]

_SIDECAR = ".sha256"

#: The platform tags a download may carry: the deep_gemm wheels are manylinux2014 (pip widens that tag to
#: the older ones), the engine wheels that vendor a copy manylinux_2_28 (vLLM 0.33.0); pip matches a
#: manylinux_2_N tag only exactly.
_PLATFORMS = ("manylinux2014_x86_64", "manylinux_2_28_x86_64")


class CacheError(RuntimeError):
    """A wheel could not be found, verified or downloaded, or a cache path would leave the cache."""


def cache_root() -> Path:
    """``$DGCOMPAT_CACHE``, else ``~/.cache/dgcompat``."""

    return env_folder("DGCOMPAT_CACHE") or Path.home() / ".cache" / "dgcompat"


def wheel_dir() -> Path:
    """Where downloaded wheels are kept (``<cache>/wheels``)."""
    return cache_root() / "wheels"


def work_root() -> Path:
    """Where the CPU tier unpacks releases (``<cache>/work``)."""
    return cache_root() / "work"


def confined(base: Path, name: str) -> Path:
    """``base / name``, refusing any ``name`` that is not one plain folder name inside ``base``.

    ``name`` comes from file names and command lines (a release id): ``..``, ``.``, a separator or
    an absolute path would make a later ``rmtree`` remove something outside the cache.
    """
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name or name.startswith("."):
        raise CacheError(f"{name!r} is not a valid cache entry name")
    path = base / name
    if path.resolve().parent != base.resolve():
        raise CacheError(f"{name!r} would leave the cache folder {base}")
    return path


def sha256_file(path: Path) -> str:
    """Hex sha256 of a file."""
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def parse_name(filename: str) -> tuple[str, Version]:
    """(canonical distribution, version) of a wheel file name; :class:`CacheError` when it is not one."""
    try:
        name, version, _build, _tags = parse_wheel_filename(filename)
    except (InvalidWheelFilename, InvalidVersion) as exc:
        raise CacheError(f"{filename!r} is not a wheel file name (<dist>-<version>-<python>-<abi>-<platform>.whl): "
                         f"{exc}") from exc
    return str(name), version


def find(dist: str, version: str | Version, directory: Path | None = None) -> Path | None:
    """The cached wheel of ``dist==version`` (any platform tag; the first by name), or None. Not verified."""
    wanted = version if isinstance(version, Version) else _version(version)
    folder = directory or wheel_dir()
    if not folder.is_dir():
        return None
    hits = wheels_of(dist, wanted, (p for p in folder.iterdir() if p.suffix == ".whl" and p.is_file()))
    return min(hits) if hits else None


def wheels_of(dist: str, version: Version, paths: Iterable[Path]) -> list[Path]:
    """The ``paths`` (in their order) whose file names are wheels of ``dist==version``; other names are skipped."""
    hits = []
    for path in paths:
        try:
            name, ver = parse_name(path.name)
        except CacheError:
            continue
        if name == canonical(dist) and ver == version:
            hits.append(path)
    return hits


def _version(text: str) -> Version:
    try:
        return Version(text)
    except InvalidVersion as exc:
        raise CacheError(f"{text!r} is not a release version") from exc


@functools.lru_cache(maxsize=1)
def _certified_hashes() -> dict[str, str]:
    """Wheel file name -> sha256, as the committed certificates recorded them."""

    try:
        certs = committed()
    except CertificateError:
        return {}
    out: dict[str, str] = {}
    for cert in certs:
        if cert.wheel_file and cert.wheel_sha256:
            out[cert.wheel_file] = cert.wheel_sha256
    return out


def recorded_sha256(path: Path) -> str | None:
    """The hash recorded for this wheel (its ``.sha256`` file, else a committed certificate's), or None."""
    side = path.with_name(path.name + _SIDECAR)
    try:
        text = side.read_text("ascii").split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        text = ""
    if len(text) == 64 and all(c in "0123456789abcdef" for c in text):
        return text
    return _certified_hashes().get(path.name)


def verify(path: Path) -> str | None:
    """Why the wheel at ``path`` cannot be used (a hash mismatch, a truncated or damaged zip), or None."""
    expected = recorded_sha256(path)
    if expected is not None:
        try:
            actual = sha256_file(path)
        except OSError as exc:
            return f"unreadable ({exc})"
        if actual != expected:
            return f"corrupt (sha256 {actual[:16]}... differs from the recorded {expected[:16]}...)"
    return verify_zip(path)


def _record(path: Path, sha: str) -> None:
    side = path.with_name(path.name + _SIDECAR)
    tmp = side.with_name(f".{side.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(sha + "\n", "ascii")
        os.replace(tmp, side)
    except OSError:
        tmp.unlink(missing_ok=True)  # a read-only cache only loses the record, never the wheel


def _download(dist: str, version: str, folder: Path, timeout: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    requirement = f"{canonical(dist)}=={version}"
    # Download into a private folder, then rename: a concurrent reader never sees a half-written file.
    with tempfile.TemporaryDirectory(dir=folder, prefix=".download-") as tmp:
        platforms = [arg for platform in _PLATFORMS for arg in ("--platform", platform)]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--disable-pip-version-check",
               "--only-binary=:all:", *platforms, "--dest", tmp, requirement]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            raise CacheError(f"pip download {requirement} failed: {exc}") from exc
        got = sorted(p for p in Path(tmp).iterdir() if p.suffix == ".whl")
        if proc.returncode != 0 or not got:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
            raise CacheError(f"pip download {requirement} failed (exit {proc.returncode}): {' | '.join(tail)}")
        fresh = got[0]
        name, ver = parse_name(fresh.name)
        if name != canonical(dist) or ver != _version(version):
            raise CacheError(f"pip download {requirement} returned {fresh.name}")
        problem = verify_zip(fresh)
        if problem is not None:
            raise CacheError(f"pip download {requirement}: {fresh.name} is {problem}")
        target = confined(folder, fresh.name)
        sha = sha256_file(fresh)
        os.replace(fresh, target)
    _record(target, sha)
    return target


def verify_zip(path: Path) -> str | None:
    """Why ``path`` is not a readable zip archive, or None."""
    try:
        with zipfile.ZipFile(path) as zf:
            bad = zf.testzip()
    except (OSError, zipfile.BadZipFile, EOFError, ValueError) as exc:
        return f"not a readable wheel ({type(exc).__name__}: {exc})"
    return None if bad is None else f"damaged (member {bad} fails its CRC check)"


def fetch(dist: str, version: str, *, directory: Path | None = None, download: bool = True,
          timeout: float = 1800.0) -> Path:
    """The verified wheel of ``dist==version``: the cached one, or (missing or corrupt) a fresh download."""
    _version(version)
    folder = directory or wheel_dir()
    cached = find(dist, version, folder)
    why = "not in the cache"
    if cached is not None:
        problem = verify(cached)
        if problem is None:
            return cached
        why = f"the cached {cached.name} is {problem}"
        print(f"dgcompat: {why}; fetching it again", file=sys.stderr)
    if not download:
        raise CacheError(f"{canonical(dist)}=={version}: {why} ({folder})")
    return _download(dist, version, folder, timeout)
