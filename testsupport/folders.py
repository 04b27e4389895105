"""Read-only folders for the warmup tests and benchmarks: a cache folder a deployment mounts read-only."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["readonly", "writable"]


def readonly(folder: Path | str) -> None:
    """Make ``folder`` and everything under it read-only (readable by everyone)."""
    for root, dirs, files in os.walk(folder):
        for name in files:
            os.chmod(os.path.join(root, name), 0o444)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o555)
    os.chmod(folder, 0o555)


def writable(folder: Path | str) -> None:
    """Undo :func:`readonly` on the folders (so that the folder can be removed)."""
    for root, dirs, _files in os.walk(folder):
        os.chmod(root, 0o755)
        for name in dirs:
            os.chmod(os.path.join(root, name), 0o755)
