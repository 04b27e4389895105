"""Distributions laid out the way pip installs them: files plus a ``<name>-<version>.dist-info`` whose RECORD
carries real hashes, so that dgcompat's detection (which reads distribution metadata, never the module)
sees the release."""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from pathlib import Path

__all__ = ["write_dist"]


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_dist(site: Path, name: str, version: str, files: Mapping[str, str | bytes], *,
               requires: tuple[str, ...] = (), record_overrides: dict[str, str] | None = None) -> Path:
    """Write ``files`` plus a ``<name>-<version>.dist-info`` (METADATA, RECORD with real hashes) into ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    rows = []
    for rel, content in files.items():
        data = content.encode() if isinstance(content, str) else content
        path = site / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        rows.append(f"{rel},{(record_overrides or {}).get(rel, _digest(data))},{len(data)}")
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(exist_ok=True)
    meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + "".join(
        f"Requires-Dist: {r}\n" for r in requires)
    (info / "METADATA").write_text(meta)
    rows.append(f"{info.name}/METADATA,,")
    rows.append(f"{info.name}/RECORD,,")
    (info / "RECORD").write_text("\n".join(rows) + "\n")
    return info


def torch_metadata(site: Path, version: str) -> Path:
    """Metadata of a torch ``version`` in ``site`` (no module): detection, which reads torch's version from its
    metadata and never imports it, sees ``version`` wherever ``site`` comes first on the path. The tests of a torch
    mismatch (or match) use it so that they hold on any installed torch instead of skipping on one. Returns the
    dist-info folder."""
    return write_dist(site, "torch", version, {})
