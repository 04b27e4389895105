"""The wheel cache and the per-release work folders the CPU tier imports from.

Wheels are fetched once with ``pip download --no-deps`` into ``$DGCOMPAT_CACHE/wheels``
(default ``~/.cache/dgcompat/wheels``) and reused. Each release is unpacked into its own work
folder, ``$DGCOMPAT_CACHE/work/<release id>``: the ``deep_gemm`` package without its ~800 CUDA
headers (only the JIT compiler reads them) plus the ``.dist-info`` folder, so that
``importlib.metadata`` sees the owning distribution and its version exactly as an install would.
Wheel files are never modified.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from .releases import ReleaseSpec

__all__ = ["cache_root", "wheel_dir", "find_cached_wheel", "fetch_wheel", "prepare_workdir", "FetchError"]

# Bump when the layout of a work folder changes, so stale folders are rebuilt.
_LAYOUT_VERSION = "1"


class FetchError(RuntimeError):
    """A wheel could not be found in the cache nor downloaded."""


def cache_root() -> Path:
    """``$DGCOMPAT_CACHE``, else ``~/.cache/dgcompat``."""
    env = os.environ.get("DGCOMPAT_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "dgcompat"


def wheel_dir() -> Path:
    """Where downloaded wheels are kept."""
    return cache_root() / "wheels"


def _wheel_prefix(spec: ReleaseSpec) -> str:
    # Wheel file names use the distribution name with runs of -_. folded to "_".
    return re.sub(r"[-_.]+", "_", spec.dist).lower() + "-" + spec.version + "-"


def find_cached_wheel(spec: ReleaseSpec, directory: Path | None = None) -> Path | None:
    """The cached wheel of ``spec`` (any platform tag), or None."""
    d = directory or wheel_dir()
    if not d.is_dir():
        return None
    prefix = _wheel_prefix(spec)
    hits = sorted(p for p in d.iterdir() if p.name.lower().startswith(prefix) and p.suffix == ".whl")
    return hits[0] if hits else None


def fetch_wheel(spec: ReleaseSpec, *, directory: Path | None = None, timeout: float = 1800.0) -> Path:
    """Return the wheel of ``spec``: the given file, the cached one, or a fresh ``pip download``."""
    if spec.wheel is not None:
        if not spec.wheel.is_file():
            raise FetchError(f"wheel file {spec.wheel} does not exist")
        return spec.wheel
    d = directory or wheel_dir()
    cached = find_cached_wheel(spec, d)
    if cached is not None:
        return cached
    d.mkdir(parents=True, exist_ok=True)
    # Download into a private folder first so a concurrent run never sees a half-written file.
    with tempfile.TemporaryDirectory(dir=d, prefix=".download-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--disable-pip-version-check", "--dest", tmp, spec.requirement]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired as exc:
            raise FetchError(f"pip download {spec.requirement} timed out after {timeout:.0f} s") from exc
        got = [p for p in Path(tmp).iterdir() if p.suffix == ".whl"]
        if proc.returncode != 0 or not got:
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise FetchError(f"pip download {spec.requirement} failed: " + " | ".join(tail))
        target = d / got[0].name
        os.replace(got[0], target)
    return target


def _keep(name: str) -> bool:
    top = name.split("/", 1)[0]
    if top.endswith(".dist-info"):
        return True
    if top != "deep_gemm":
        return False
    # The CUDA headers are only read by the JIT compiler, which never runs on the CPU tier.
    return not name.startswith("deep_gemm/include/")


def _stamp(wheel: Path) -> str:
    st = wheel.stat()
    return f"{_LAYOUT_VERSION} {wheel.name} {st.st_size} {int(st.st_mtime)}"


def wheel_sha256(wheel: Path) -> str:
    """Hex sha256 of a wheel file (recorded in the certificate)."""
    h = hashlib.sha256()
    with wheel.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def prepare_workdir(spec: ReleaseSpec, wheel: Path, *, root: Path | None = None) -> Path:
    """Unpack ``wheel`` into the release's work folder (reused when already current) and return it."""
    base = (root or cache_root() / "work")
    base.mkdir(parents=True, exist_ok=True)
    work = base / spec.id
    stamp = _stamp(wheel)

    def current() -> bool:
        stamp_file = work / ".dgcompat-extracted"
        return (stamp_file.is_file() and stamp_file.read_text() == stamp
                and (work / "deep_gemm" / "__init__.py").is_file())

    if current():
        return work
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{spec.id}-"))
    try:
        with zipfile.ZipFile(wheel) as zf:
            members = [n for n in zf.namelist() if _keep(n) and not n.endswith("/")]
            if not any(n == "deep_gemm/__init__.py" for n in members):
                raise FetchError(f"{wheel.name} holds no deep_gemm package")
            for name in members:
                zf.extract(name, tmp)
        (tmp / ".dgcompat-extracted").write_text(stamp)
        if work.exists() and not current():
            shutil.rmtree(work, ignore_errors=True)
        try:
            os.replace(tmp, work)
        except OSError:
            # Another run unpacked the same wheel meanwhile: keep its folder.
            if not current():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return work
