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
    """The cached wheel of ``spec`` (any platform tag), or None.

    Engine wheels (vLLM, ~340 MB) are also looked for in ``$DGCOMPAT_CACHE/<dist>``.
    """
    folders = [directory or wheel_dir()]
    if spec.vendored and directory is None:
        folders.append(cache_root() / spec.dist)
    prefix = _wheel_prefix(spec)
    for d in folders:
        if not d.is_dir():
            continue
        hits = sorted(p for p in d.iterdir() if p.name.lower().startswith(prefix) and p.suffix == ".whl")
        if hits:
            return hits[0]
    return None


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


def _keep(name: str, package: str = "deep_gemm/") -> str | None:
    """Where wheel member ``name`` goes in the work folder, or None to leave it out."""
    top = name.split("/", 1)[0]
    if package == "deep_gemm/" and top.endswith(".dist-info"):
        return name
    if not name.startswith(package):
        return None
    rel = "deep_gemm/" + name[len(package):]
    # The CUDA headers are only read by the JIT compiler, which never runs on the CPU tier.
    return None if rel.startswith("deep_gemm/include/") else rel


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
            # A vendored copy (vllm/third_party/deep_gemm/) becomes a plain deep_gemm package, as an
            # engine-independent copy would be installed; it has no dist-info of its own.
            members = {n: dest for n in zf.namelist() if not n.endswith("/")
                       for dest in [_keep(n, spec.package_path)] if dest is not None}
            if "deep_gemm/__init__.py" not in members.values():
                raise FetchError(f"{wheel.name} holds no deep_gemm package at {spec.package_path}")
            for name, dest in members.items():
                target = tmp / dest
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(name) as src, open(target, "wb") as out:
                    shutil.copyfileobj(src, out)
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
