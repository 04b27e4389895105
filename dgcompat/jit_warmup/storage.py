"""What ran out when a warmup could not write: a full disk, a quota, the file-size limit, a read-only folder.

Such a failure can surface anywhere: as an ``OSError`` of the calling process (the stand-in script, recipes,
records), in a worker (a recipe it kept), in NVCC's or deep_gemm's own message (``No space left on device``,
``File too large``), or as NVCC killed by ``SIGXFSZ``. :func:`from_error` and :func:`from_text` turn each into
one :class:`StorageError` that names the folder and what ran out, instead of a traceback or a message blaming
the release.
"""

from __future__ import annotations

import contextlib
import errno
import os
import resource
import shutil
import signal
from collections.abc import Iterator
from collections.abc import Mapping
from pathlib import Path

from .report import WarmupError

__all__ = ["StorageError", "from_error", "from_text", "from_exit", "writing"]

#: The errors of writes that ran out of something, and the words for it.
_KINDS = {
    errno.ENOSPC: "no space left on the device",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file-size limit was reached",
    errno.EROFS: "the file system is read-only",
}
#: How compilers, shells and deep_gemm print those errors.
_TEXTS = (("No space left on device", errno.ENOSPC), ("Disk quota exceeded", errno.EDQUOT),
          ("File too large", errno.EFBIG), ("File size limit exceeded", errno.EFBIG),
          ("Read-only file system", errno.EROFS))


class StorageError(WarmupError):
    """A warmup could not write: ``what`` ran out (or the folder is read-only) under ``folder`` (its ``role``; where
    the failed write named no file, every folder it may have been in, joined by " or "). The kernels compiled
    before it are in the cache folder; the same warmup run again continues from them."""

    def __init__(self, what: str, folder: str, role: str, detail: str) -> None:
        self.what = what
        self.folder = folder
        self.role = role
        folders, roles = folder.split(" or "), role.split(" or ")
        where = " or ".join(f"{f} ({r}{_free(f)})" for f, r in zip(folders, roles, strict=False))
        msg = f"warmup(): {what} writing under {where}"
        if detail:
            msg += f": {detail}"
        msg += ". Make room there (or point it elsewhere), then run the same warmup again: it keeps what it compiled"
        super().__init__(msg)


def _free(folder: str) -> str:
    try:
        return f"; {shutil.disk_usage(folder).free / 1e6:.1f} MB free"
    except OSError:
        return ""


def _what(code: int) -> str:
    what = _KINDS[code]
    if code == errno.EFBIG:
        soft, _hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        if soft != resource.RLIM_INFINITY:
            what += f" (ulimit -f: RLIMIT_FSIZE = {soft} bytes)"
    return what


def _where(path: str, folders: Mapping[str, Path]) -> tuple[str, str]:
    """(folder, its role) of the known folder ``path`` is under; without a path, all of them (" or ")."""
    real = os.path.realpath(path) if path else ""
    for role, folder in folders.items():
        root = os.path.realpath(folder)
        if real and (real == root or real.startswith(root + os.sep)):
            return str(folder), role
    if real:
        return str(Path(real).parent), "the folder written"
    return " or ".join(str(f) for f in folders.values()), " or ".join(folders)


@contextlib.contextmanager
def writing(folder: Path, role: str) -> Iterator[None]:
    """Within: an ``OSError`` of a write that ran out of something is a :class:`StorageError` naming ``folder``."""
    try:
        yield
    except OSError as exc:
        full = from_error(exc, {role: folder})
        if full is None:
            raise
        raise full from None


def from_error(exc: BaseException, folders: Mapping[str, Path]) -> StorageError | None:
    """The :class:`StorageError` an ``OSError`` of a write stands for (``folders``: role -> folder), else None."""
    if not isinstance(exc, OSError) or exc.errno not in _KINDS:
        return None
    path = str(exc.filename or "")
    folder, role = _where(path, folders) if path else _where("", folders)
    return StorageError(_what(exc.errno), folder, role, f"{exc.strerror}: {path}" if path else str(exc.strerror))


def from_text(text: str, folders: Mapping[str, Path]) -> StorageError | None:
    """The :class:`StorageError` a compiler's or deep_gemm's message stands for, else None."""
    for needle, code in _TEXTS:
        at = text.find(needle)
        if at >= 0:
            path = next((w for w in text.replace("'", " ").replace('"', " ").split() if w.startswith("/")), "")
            folder, role = _where(path, folders)
            line = text[max(0, text.rfind("\n", 0, at) + 1): text.find("\n", at) if "\n" in text[at:] else None]
            return StorageError(_what(code), folder, role, line.strip()[-300:])
    return None


def from_exit(returncode: int, folder: Path, role: str) -> StorageError | None:
    """The :class:`StorageError` of a compiler killed by ``SIGXFSZ`` (a write beyond the file-size limit)."""
    if returncode == -signal.SIGXFSZ or returncode == 128 + signal.SIGXFSZ:
        return StorageError(_what(errno.EFBIG), str(folder), role, "NVCC was killed by SIGXFSZ")
    return None
