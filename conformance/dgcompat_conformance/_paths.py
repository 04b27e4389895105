"""Where the two wings live, for child processes and node ids.

The runtime (``dgcompat``) and this certification wing (``dgcompat_conformance``) may live in one
site-packages folder (an installed wheel) or in two folders of a checkout (``./dgcompat`` and
``./conformance/dgcompat_conformance``). Children need both importable; neither is assumed to be
next to the other.
"""

from __future__ import annotations

import os
from pathlib import Path

import dgcompat

__all__ = ["WING", "wing_root", "import_path", "with_import_path"]

#: This package's folder.
WING = Path(__file__).resolve().parent


def wing_root() -> Path:
    """The folder that holds ``dgcompat_conformance`` (conformance node ids are relative to it)."""
    return WING.parent


def import_path() -> list[str]:
    """Folders to put on ``PYTHONPATH`` so that a child imports both wings from where these are."""
    roots = [str(wing_root()), str(Path(dgcompat.__file__).resolve().parent.parent)]
    return list(dict.fromkeys(roots))


def with_import_path(pythonpath: str, *, first: bool = True) -> str:
    """``pythonpath`` with :func:`import_path` added (before it with ``first``, else after it)."""
    parts = [p for p in pythonpath.split(os.pathsep) if p]
    ours = [p for p in import_path() if p not in parts]
    return os.pathsep.join(ours + parts if first else parts + ours)
