"""The record a complete warmup leaves in its cache folder, so that an identical later one can return at once.

``<cache>/dgcompat-warmup/<key>.json`` lists the cache entries (``cache/kernel.*``) present when the
warmup finished. The key covers everything that decides which kernels the calls need and how they
are built: the description, the release, where it is installed, torch, the NVCC binary (path, size, mtime), the
``DG_JIT_*`` settings that change compiler flags, and the GPU model (from ``nvidia-smi``; without it
there is no record). The entries needed are a subset of those listed, so "all listed entries exist"
means the kernels are there; if one is gone, the warmup runs in full.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..detection import release
from . import host
from .cache import entries
from .cache import torch_version
from .relocate import FLAG_VARIABLES

__all__ = ["key", "read", "write", "Done"]



#: Changes whenever what a warmup covers for one description changes (a record of an earlier dgcompat
#: that warmed fewer call forms must not answer for this one).
FORMAT = "dgcompat-warmup-record 2"


@dataclass(frozen=True)
class Done:
    """What the record of a complete warmup says."""

    calls: int
    kernels: int
    entries: int
    finished: str
    notes: tuple[str, ...] = ()


def _folder(cache: Path) -> Path:
    return cache / "dgcompat-warmup"


def key(spec: Any, nvcc: str, device: int) -> str | None:
    """The record's key, or None where the GPU model cannot be read without CUDA."""
    gpu = host.nvidia_smi("name,compute_cap", device)
    if gpu is None:
        return None
    try:
        st = os.stat(nvcc)
        binary = f"{os.path.realpath(nvcc)}:{st.st_size}:{int(st.st_mtime)}"
    except OSError:
        return None
    rel = release()
    # The install location too: the 0.1.x JIT's key contains its include path (an -I flag), so the same
    # release installed elsewhere (a moved virtualenv, a container) needs its kernels compiled again.
    parts = [FORMAT, repr(spec), rel.label, str(rel.location), torch_version(), binary, gpu,
             *(f"{v}={os.environ.get(v, '')}" for v in FLAG_VARIABLES)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:32]


def read(cache: Path, k: str) -> Done | None:
    """The record for ``k`` if every entry it lists still exists, else None."""
    try:
        data = json.loads((_folder(cache) / f"{k}.json").read_text())
        listed = set(data["entries"])
        if not listed or not listed <= set(entries(cache)):
            return None
        return Done(int(data["calls"]), int(data["kernels"]), len(listed), str(data["finished"]),
                    tuple(str(n) for n in data.get("notes", ())))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def write(cache: Path, k: str, *, calls: int, kernels: int, notes: Sequence[str] = ()) -> None:
    """Record a complete warmup (written to a temporary file, then renamed: readers never see half); ``notes``
    are said again by a warmup the record answers."""
    folder = _folder(cache)
    folder.mkdir(parents=True, exist_ok=True)
    data = {"calls": calls, "kernels": kernels, "entries": entries(cache), "notes": list(notes),
            "finished": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime())}
    tmp = folder / f".{k}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(data, indent=1))
    os.replace(tmp, folder / f"{k}.json")
