"""Where run output goes: one results folder outside the source tree, one subfolder per command.

``$DGCOMPAT_RESULTS`` if set, else ``<cache>/results`` (``$DGCOMPAT_CACHE``, default
``~/.cache/dgcompat``): ``conform`` writes certificates to ``<results>/conform``, the GPU runner to
``<results>/gpu``, the benchmarks to ``<results>/bench``. Every command takes ``--out`` (or
``--json``) instead and prints where it wrote. Nothing lands in a checkout unless a command is told
so explicitly (the GPU runner's ``--publish``, which names each file it writes).
"""

from __future__ import annotations

from pathlib import Path

from dgcompat._tooling import env_folder

from .wheelcache import cache_root

__all__ = ["results_root", "results_dir"]


def results_root() -> Path:
    """``$DGCOMPAT_RESULTS``, else ``<cache>/results``."""

    return env_folder("DGCOMPAT_RESULTS") or cache_root() / "results"


def results_dir(command: str) -> Path:
    """The default output folder of ``command`` (``conform``, ``gpu``, ``bench``); not created here."""
    return results_root() / command
