"""A release's wheel (whole or in part) and the per-release work folders the CPU tier imports from, over the
wheel cache (:mod:`.wheelcache`); the surface, the intake and the GPU tier fetch through it too.

Kernel and engine wheels (240-540 MB) are not downloaded whole: where the discovery table marks a
distribution ``partial``, only the deep_gemm folder and the dist-info are read from the index with range
requests (:func:`dgcompat_conformance.index.fetch_partial`) into ``$DGCOMPAT_CACHE/partial``; a whole wheel
already in the cache is used as it is.

Each release is unpacked into its own work folder, ``$DGCOMPAT_CACHE/work/<release id>``: the
``deep_gemm`` package without its ~800 CUDA headers (only the JIT compiler reads them) plus the
``.dist-info`` folder, so that ``importlib.metadata`` sees the owning distribution and its version
exactly as an install would. Wheel files are never modified; a work folder's path is confined to
the work root, whatever the release id.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from . import wheelcache
from .dists import distribution
from .index import IndexError as IndexUnavailable
from .index import PackageIndex, fetch_partial
from .releases import ReleaseSpec
from .wheelcache import CacheError, cache_root, sha256_file, wheel_dir

__all__ = ["cache_root", "wheel_dir", "find_cached_wheel", "fetch_wheel", "prepare_workdir", "wheel_sha256",
           "wheel_record", "FetchError"]

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


def fetch_wheel(spec: ReleaseSpec, *, directory: Path | None = None, timeout: float = 1800.0, index: Any = None) -> Path:
    """The verified wheel of ``spec``: the given file, the cached one, or (missing or corrupt) a fresh download;
    for a distribution the discovery table fetches in part, its deep_gemm folder and dist-info only (from
    ``index``, a :class:`~dgcompat_conformance.index.PackageIndex`, default PyPI)."""
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
    row = distribution(spec.dist)
    if directory is None and row is not None and row.partial:
        whole = wheelcache.find(spec.dist, spec.version)
        if whole is not None and wheelcache.verify(whole) is None:
            return whole
        return _fetch_partial(spec, row.path, index)
    return wheelcache.fetch(spec.dist, spec.version, directory=directory, timeout=timeout)


def _fetch_partial(spec: ReleaseSpec, path: str, index: Any) -> Path:
    ix = index if index is not None else PackageIndex()
    try:
        file = ix.wheel(spec.dist, spec.version)
        if file is None:
            raise FetchError(f"{spec.requirement}: the index ({ix.url}) has no Linux x86_64 wheel of it")
        return fetch_partial(file, (path,), ix.transport).path
    except IndexUnavailable as exc:
        raise FetchError(f"{spec.requirement}: {exc}") from exc


def wheel_record(wheel: Path) -> dict[str, Any]:
    """What a certificate records of the wheel it ran: ``{"file", "sha256"}`` of the whole wheel, plus
    ``"partial"`` where only its deep_gemm folder and dist-info were fetched (then ``sha256`` is the whole
    wheel's, as the index gives it, and the kept files were checked against the wheel's RECORD)."""
    side = wheel.with_name(wheel.name + ".json")
    if side.is_file():
        try:
            source = json.loads(side.read_text("utf-8"))
        except (OSError, ValueError):
            source = None
        if isinstance(source, dict) and isinstance(source.get("sha256"), str):
            return {"file": wheel.name, "sha256": source["sha256"],
                    "partial": f"{source.get('members')} files under {', '.join(source.get('prefixes') or [])} and the "
                               f"dist-info, read with range requests from {source.get('url')}; checked against the "
                               f"wheel's RECORD"}
    return {"file": wheel.name, "sha256": sha256_file(wheel)}


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
