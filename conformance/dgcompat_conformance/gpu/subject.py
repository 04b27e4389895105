"""What a GPU-tier subject is (an sgl-deep-gemm wheel release, a plain folder or a bundled site) and its names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..dists import SGL_DEEP_GEMM

__all__ = ["Subject", "distribution_of", "bundle_release_id"]


@dataclass(frozen=True)
class Subject:
    """One thing to certify, installed into its own folder ``<work>/<release>/site``.

    ``kind`` is ``"wheel"`` (an sgl-deep-gemm release from the wheel folders, ``release`` its
    version), ``"folder"`` (a plain ``deep_gemm`` package folder, ``release`` the id given) or
    ``"site"`` (a site folder holding a bundled ``deep_gemm`` and its kernel wheel's dist-info;
    ``release`` is ``<dist>-<version>`` as detection reads it, e.g. ``sglang-kernel-0.4.2``).
    """

    kind: str
    release: str
    source: Path | None = None
    abi_only: bool = False
    built_for_torch: str | None = None
    detected: dict[str, Any] | None = None  # for a site: what detection said about the source folder


def distribution_of(subject: Subject) -> str:
    """The distribution a subject's certificate names (``sgl-deep-gemm``, the kernel wheel, or ``deep-gemm``)."""
    if subject.kind == "wheel":
        return SGL_DEEP_GEMM
    if subject.kind == "site" and subject.detected and subject.detected.get("dist"):
        return str(subject.detected["dist"])
    return "deep-gemm"


def bundle_release_id(found: dict[str, Any]) -> str:
    """``"sglang-kernel-0.4.2"`` for a bundled copy detection identified; RuntimeError for anything else."""
    if found.get("source") != "bundled" or not found.get("dist") or not found.get("version"):
        raise RuntimeError(f"dgcompat detects {found.get('label')!r} (source {found.get('source')!r}), not a copy "
                           f"bundled in a kernel wheel" + (f": {found['refusal']}" if found.get("refusal") else ""))
    return f"{found['dist']}-{found['version']}"
