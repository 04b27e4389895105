"""The per-release work folders the CPU tier imports from, over the wheel cache (:mod:`..wheelcache`).

Each release is unpacked into its own work folder, ``$DGCOMPAT_CACHE/work/<release id>``: the
``deep_gemm`` package without its ~800 CUDA headers (only the JIT compiler reads them) plus the
``.dist-info`` folder, so that ``importlib.metadata`` sees the owning distribution and its version
exactly as an install would. Wheel files are never modified; a work folder's path is confined to
the work root, whatever the release id.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import zipfile
from pathlib import Path

from .. import wheelcache
from ..wheelcache import CacheError, cache_root, sha256_file, wheel_dir
from .releases import ReleaseSpec

__all__ = ["cache_root", "wheel_dir", "find_cached_wheel", "fetch_wheel", "prepare_workdir", "wheel_sha256",
           "FetchError"]

# Bump when the layout of a work folder changes, so stale folders are rebuilt.
_LAYOUT_VERSION = "1"

#: A wheel could not be found, verified or downloaded (the cache's error).
FetchError = CacheError

wheel_sha256 = sha256_file


def find_cached_wheel(spec: ReleaseSpec, directory: Path | None = None) -> Path | None:
    """The cached wheel of ``spec`` (any platform tag), or None.

    Engine wheels (vLLM, ~340 MB) are also looked for in ``$DGCOMPAT_CACHE/<dist>``.
    """
    found = wheelcache.find(spec.dist, spec.version, directory)
    if found is None and spec.vendored and directory is None:
        found = wheelcache.find(spec.dist, spec.version, cache_root() / spec.dist)
    return found


def fetch_wheel(spec: ReleaseSpec, *, directory: Path | None = None, timeout: float = 1800.0) -> Path:
    """The verified wheel of ``spec``: the given file, the cached one, or (missing or corrupt) a fresh download."""
    if spec.wheel is not None:
        if not spec.wheel.is_file():
            raise FetchError(f"wheel file {spec.wheel} does not exist")
        problem = wheelcache.verify_zip(spec.wheel)
        if problem is not None:
            raise FetchError(f"wheel file {spec.wheel} is {problem}")
        return spec.wheel
    if directory is None and spec.vendored:
        engine = find_cached_wheel(spec)  # an engine wheel kept in $DGCOMPAT_CACHE/<dist>
        if engine is not None and wheelcache.verify_zip(engine) is None:
            return engine
    return wheelcache.fetch(spec.dist, spec.version, directory=directory, timeout=timeout)


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


def prepare_workdir(spec: ReleaseSpec, wheel: Path, *, root: Path | None = None) -> Path:
    """Unpack ``wheel`` into the release's work folder (reused when already current) and return it."""
    base = root or wheelcache.work_root()
    base.mkdir(parents=True, exist_ok=True)
    work = wheelcache.confined(base, spec.id)
    stamp = _stamp(wheel)

    def current() -> bool:
        stamp_file = work / ".dgcompat-extracted"
        return (stamp_file.is_file() and stamp_file.read_text() == stamp
                and (work / "deep_gemm" / "__init__.py").is_file())

    if current():
        return work
    tmp = Path(tempfile.mkdtemp(dir=base, prefix=f".{spec.id}-"))
    try:
        try:
            zf = zipfile.ZipFile(wheel)
        except (OSError, zipfile.BadZipFile) as exc:
            raise FetchError(f"{wheel.name} is not a readable wheel: {exc}") from exc
        with zf:
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
