"""The JIT cache folders: where kernels go, what a folder holds, and the per-kernel locks that let processes
warming one folder compile each kernel once between them."""

from __future__ import annotations

import fcntl
import importlib.metadata as md
import os
from pathlib import Path

from .. import env
from ..detection import release
from ..errors import BadArgumentError

__all__ = [
    "torch_version", "cache_root", "release_folder_name", "jit_cache_dir", "use_jit_cache_dir", "checked_folder",
    "entries", "count_entries", "NOT_KERNELS", "snapshot",
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


def cache_root(*, isolate: bool = False) -> Path:
    """The folder deep_gemm itself reads: ``DG_JIT_CACHE_DIR``, else its default ``~/.deep_gemm``.

    With ``isolate`` (a folder per release under a root): ``DGCOMPAT_JIT_CACHE_ROOT`` first (the root
    :func:`use_jit_cache_dir` remembers), then ``DG_JIT_CACHE_DIR``, then ``~/.deep_gemm``.
    """
    root = env.folder("DGCOMPAT_JIT_CACHE_ROOT") if isolate else None
    value = os.environ.get("DG_JIT_CACHE_DIR", "").strip()
    return root or (Path(value).expanduser() if value else Path.home() / ".deep_gemm")


def release_folder_name() -> str:
    """``dgcompat-<dist>-<release>-torch<X.Y>``: the folder of the installed release under an isolating root."""
    rel = release()
    dist = (rel.dist or rel.source).replace(" ", "_")
    version = str(rel.version) if rel.version is not None else "unknown"
    return f"dgcompat-{dist}-{version}-torch{torch_version()}"


def jit_cache_dir(root: str | os.PathLike[str] | None = None, *, isolate: bool = False) -> Path:
    """The JIT cache folder warmup fills and a serving process reads, as an absolute path.

    By default the folder deep_gemm itself reads (``root``, else ``DG_JIT_CACHE_DIR``, else
    ``~/.deep_gemm``), so a serving process with the same ``DG_JIT_CACHE_DIR`` (or none) finds the warmed
    kernels with no further step, whether it calls dgcompat, ``import deep_gemm`` under the install or the
    real deep_gemm. Sharing one folder between releases is what deep_gemm's cache key is built for: it
    hashes the kernel source with its ``deep_gemm/`` headers, the NVCC version and the flags (the GPU
    architecture, and in the sgl-deep-gemm 0.1.x / upstream lineage the include path of the installed
    release).

    ``isolate=True`` gives ``<root>/dgcompat-<dist>-<release>-torch<X.Y>`` instead (for those who would
    rather not trust the key with third-party headers a release may update in place); a serving process
    must then be pointed at it (:func:`use_jit_cache_dir`). A root that already is that folder is returned
    as it is, so setting ``DG_JIT_CACHE_DIR`` to what this printed and asking again does not nest a folder.
    Reads distribution metadata only (imports nothing).
    """
    base = (Path(root).expanduser() if root is not None else cache_root(isolate=isolate)).absolute()
    if not isolate:
        return base
    name = release_folder_name()
    return base if base.name == name else base / name


def use_jit_cache_dir(root: str | os.PathLike[str] | None = None, *, isolate: bool = False) -> Path:
    """Point this process's deep_gemm at :func:`jit_cache_dir` (sets ``DG_JIT_CACHE_DIR``; with ``isolate``
    also remembers the root in ``DGCOMPAT_JIT_CACHE_ROOT``, so a second call gives the same folder). Call it
    before the first kernel call, e.g. at engine start-up; returns the folder. Calling it again, or with the
    folder it returned, gives the same folder."""
    folder = jit_cache_dir(root, isolate=isolate)
    if isolate:
        base = folder.parent if folder.name == release_folder_name() else folder
        os.environ["DGCOMPAT_JIT_CACHE_ROOT"] = str(base)
    os.environ["DG_JIT_CACHE_DIR"] = str(folder)
    return folder


def checked_folder(folder: Path, fn: str, argument: str, *, write: bool = True) -> Path:
    """``folder`` if it is a folder this process can write (with ``write=False``: read), or one it can create;
    else a :class:`~dgcompat.errors.BadArgumentError` naming ``argument`` of ``fn`` and what is in the way. A
    read-only folder passes ``write=False``: serving, the check and ``--print-cache-dir`` only read it."""
    problem = env.folder_problem(folder, write=write)
    if problem is not None:
        raise BadArgumentError(fn, argument, f"a folder for the JIT cache this process can {'write' if write else 'read'}"
                               " (created if missing)", f"{folder}: {problem}")
    return folder


def entries(cache: Path) -> list[str]:
    """The kernel folders of a deep_gemm cache, sorted: the folders under ``cache/`` that hold a ``kernel.cubin``
    (``kernel.<name>.<hash>`` in the sgl-deep-gemm 0.1.x and bundled JITs, ``<name>.<hash>`` in DeepJIT's)."""
    try:
        return sorted(p.name for p in (cache / "cache").iterdir() if (p / "kernel.cubin").is_file())
    except OSError:
        return []


#: What dgcompat and deep_gemm keep in a cache folder besides compiled kernels: the builds under way, the
#: per-kernel locks and the records of complete warmups.
NOT_KERNELS = frozenset({"tmp", "dgcompat-locks", "dgcompat-warmup"})


def snapshot(cache: Path) -> frozenset[str]:
    """Every file under ``cache`` (relative paths) except :data:`NOT_KERNELS`: a kernel compiled into the folder
    adds at least one, whatever the release's layout (``cache/kernel.<name>.<hash>/`` in the sgl-deep-gemm
    0.1.x and upstream JITs, the entry's files in the bundled copies, NVCC and NVRTC alike)."""
    found: set[str] = set()
    root = str(cache)
    for folder, dirs, files in os.walk(root):
        if folder == root:
            dirs[:] = [d for d in dirs if d not in NOT_KERNELS]
        rel = os.path.relpath(folder, root)
        found.update(f if rel == "." else os.path.join(rel, f) for f in files)
    return frozenset(found)


def count_entries(cache: Path) -> int:
    """Kernel folders in a deep_gemm cache (:func:`entries`)."""
    return len(entries(cache))


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
    """The sources of the entries already in ``cache`` (``cache/*/kernel.cu``) by size, read once per
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
            if (entry / "kernel.cubin").is_file():
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
