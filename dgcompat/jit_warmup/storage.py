"""What ran out when a warmup could not write: a full disk, a quota, the file-size limit, a read-only folder.

Such a failure can surface anywhere: as an ``OSError`` of the calling process (the stand-in script, recipes,
records), in a worker (a recipe it kept), in NVCC's or deep_gemm's own message (``No space left on device``,
``File too large``), or as NVCC killed by ``SIGXFSZ``. :func:`from_error` and :func:`from_text` turn each into
one :class:`StorageError` that names the folder and what ran out, instead of a traceback or a message blaming
the release.
"""

from __future__ import annotations

import errno
import os
import resource
import shutil
import signal
from pathlib import Path
from typing import Mapping

from .report import WarmupError

__all__ = ["StorageError", "from_error", "from_text", "from_exit"]

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
    """A warmup could not write: ``what`` ran out (or the folder is read-only) under ``folder``. The kernels
    compiled before it are in the cache folder; the same warmup run again continues from them."""

    def __init__(self, what: str, folder: str, role: str, detail: str) -> None:
        self.what = what
        self.folder = folder
        self.role = role
        msg = f"warmup(): {what} writing under {folder} ({role}{_free(folder)})"
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
    """(folder, its role) of the known folder ``path`` is under, else the first known folder."""
    real = os.path.realpath(path) if path else ""
    for role, folder in folders.items():
        root = os.path.realpath(folder)
        if real and (real == root or real.startswith(root + os.sep)):
            return str(folder), role
    role, folder = next(iter(folders.items()))
    return str(folder), role


def from_error(exc: BaseException, folders: Mapping[str, Path]) -> StorageError | None:
    """The :class:`StorageError` an ``OSError`` of a write stands for (``folders``: role -> folder), else None."""
    if not isinstance(exc, OSError) or exc.errno not in _KINDS:
        return None
    path = str(exc.filename or "")
    folder, role = _where(path, folders)
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
