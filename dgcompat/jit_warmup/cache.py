"""The JIT cache folders: where kernels go, what a folder holds, and the per-kernel locks that let processes
warming one folder compile each kernel once between them."""

from __future__ import annotations

import fcntl
import importlib.metadata as md
import os
from pathlib import Path

from ..detection import release

__all__ = [
    "torch_version", "cache_root", "jit_cache_dir", "use_jit_cache_dir", "entries", "count_entries",
    "lock_kernel", "mark_present", "marked_present", "source_index", "indexed",
]


def torch_version() -> str:
    """The installed torch's ``X.Y`` from its metadata (imports nothing), or ``"none"``."""
    try:
        v = md.version("torch")
    except md.PackageNotFoundError:
        return "none"
    parts = v.split("+")[0].split(".")
    return ".".join(parts[:2])


def cache_root() -> Path:
    """``DGCOMPAT_JIT_CACHE_ROOT``, else ``DG_JIT_CACHE_DIR``, else deep_gemm's default ``~/.deep_gemm``."""
    for var in ("DGCOMPAT_JIT_CACHE_ROOT", "DG_JIT_CACHE_DIR"):
        value = os.environ.get(var, "").strip()
        if value:
            return Path(value).expanduser()
    return Path.home() / ".deep_gemm"


def jit_cache_dir(root: str | os.PathLike[str] | None = None, *, isolate: bool = True) -> Path:
    """The JIT cache folder warmup fills and the engine must use: ``<root>/dgcompat-<dist>-<release>-torch<X.Y>``.

    deep_gemm's cache key hashes the kernel source (with its ``deep_gemm/`` headers), the NVCC version
    and the flags (which name the GPU architecture), but not third-party headers (CUTLASS/CuTe) that a
    release may update, and the 0.2 JIT's key is not documented; a folder per release and torch makes
    a swap start from an empty folder instead of trusting that. ``isolate=False`` gives ``root`` itself.
    Reads distribution metadata only (imports nothing).
    """
    base = Path(root).expanduser() if root is not None else cache_root()
    if not isolate:
        return base
    rel = release()
    dist = (rel.dist or rel.source).replace(" ", "_")
    version = str(rel.version) if rel.version is not None else "unknown"
    return base / f"dgcompat-{dist}-{version}-torch{torch_version()}"


def use_jit_cache_dir(root: str | os.PathLike[str] | None = None, *, isolate: bool = True) -> Path:
    """Point this process's deep_gemm at :func:`jit_cache_dir` (sets ``DG_JIT_CACHE_DIR``; remembers the
    root in ``DGCOMPAT_JIT_CACHE_ROOT`` so a second call gives the same folder). Call it before the first
    kernel call, e.g. at engine start-up; returns the folder."""
    base = Path(root).expanduser() if root is not None else cache_root()
    folder = jit_cache_dir(base, isolate=isolate)
    os.environ["DGCOMPAT_JIT_CACHE_ROOT"] = str(base)
    os.environ["DG_JIT_CACHE_DIR"] = str(folder)
    return folder


def entries(cache: Path) -> list[str]:
    """The kernel folders of a deep_gemm cache (``cache/kernel.*``), sorted."""
    try:
        return sorted(p.name for p in (cache / "cache").iterdir() if p.name.startswith("kernel."))
    except FileNotFoundError:
        return []


def count_entries(cache: Path) -> int:
    """Kernel folders in a deep_gemm cache (``cache/kernel.*``)."""
    try:
        return sum(1 for p in (cache / "cache").iterdir() if p.name.startswith("kernel."))
    except FileNotFoundError:
        return 0


def lock_kernel(cache: Path, identity: str, *, blocking: bool) -> int | None:
    """An exclusive ``flock`` on ``<cache>/dgcompat-locks/<identity>.lock`` (the fd), or None if another
    process holds it and ``blocking`` is False. Closing the fd releases it (also when a process dies)."""
    folder = cache / "dgcompat-locks"
    folder.mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{identity}.lock", os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BlockingIOError:
        os.close(fd)
        return None
    return fd


def _marker(cache: Path, identity: str) -> Path:
    return cache / "dgcompat-locks" / f"{identity}.present"


def mark_present(cache: Path, identity: str) -> None:
    """Note, under the kernel's lock, that its cache entry was built or found: a process that takes the
    lock later skips compiling it outside deep_gemm (a hint only: its call still checks the cache)."""
    _marker(cache, identity).touch()


def marked_present(cache: Path, identity: str) -> bool:
    return _marker(cache, identity).exists()


def source_index(cache: Path) -> dict[int, list[Path]]:
    """The sources of the entries already in ``cache`` (``cache/kernel.*/kernel.cu``) by size, read once per
    pass: a kernel whose source is among them is most likely present (a cache warmed by serving, or before
    the markers existed), so its compile is left to a worker's call, which then finds it."""
    index: dict[int, list[Path]] = {}
    try:
        found = list((cache / "cache").iterdir())
    except OSError:
        return index
    for entry in found:
        src = entry / "kernel.cu"
        try:
            if entry.name.startswith("kernel.") and (entry / "kernel.cubin").is_file():
                index.setdefault(src.stat().st_size, []).append(src)
        except OSError:
            continue
    return index


def indexed(index: dict[int, list[Path]], source: Path) -> bool:
    """Whether ``source``'s bytes are those of one of the entries in ``index`` (:func:`source_index`)."""
    data = source.read_bytes()
    for candidate in index.get(len(data), ()):
        try:
            if candidate.read_bytes() == data:
                return True
        except OSError:
            continue
    return False
