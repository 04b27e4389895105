"""Shared fixtures: fake distributions laid out on a temporary ``sys.path``."""

from __future__ import annotations

import base64
import hashlib
import sys
import textwrap
from pathlib import Path
from typing import Callable, Iterator

import pytest

import dgcompat


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def write_dist(site: Path, name: str, version: str, files: dict[str, str | bytes], *,
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


@pytest.fixture
def clean_dgcompat(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Reset dgcompat's caches and forget any imported deep_gemm around a test."""
    for var in ("DGCOMPAT_BACKEND", "DGCOMPAT_ARCH", "DGCOMPAT_DEBUG", "DGCOMPAT_TRUST_SCHEDULES",
                "DGCOMPAT_ALLOW_TORCH_MISMATCH"):
        monkeypatch.delenv(var, raising=False)
    saved = {k: v for k, v in sys.modules.items() if k == "deep_gemm" or k.startswith("deep_gemm.")}
    for k in saved:
        del sys.modules[k]
    dgcompat.reset()
    yield
    for k in [k for k in sys.modules if k == "deep_gemm" or k.startswith("deep_gemm.")]:
        del sys.modules[k]
    sys.modules.update(saved)
    dgcompat.reset()
    if "dgcompat.reference.backend" in sys.modules:  # the reference backend's knobs are process state
        sys.modules["dgcompat.reference.backend"]._reset_state()


@pytest.fixture
def fake_site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_dgcompat: None) -> Callable[..., Path]:
    """Return a function that lays out a fake distribution and puts its folder first on sys.path."""
    counter = [0]

    def make(name: str, version: str, init_py: str, *, extra: dict[str, str | bytes] | None = None,
             site: Path | None = None, requires: tuple[str, ...] = (),
             record_overrides: dict[str, str] | None = None) -> Path:
        if site is None:
            counter[0] += 1
            site = tmp_path / f"site{counter[0]}"
        files: dict[str, str | bytes] = {"deep_gemm/__init__.py": textwrap.dedent(init_py)}
        files.update(extra or {})
        write_dist(site, name, version, files, requires=requires, record_overrides=record_overrides)
        monkeypatch.syspath_prepend(str(site))
        dgcompat.reset()
        return site

    return make


@pytest.fixture
def fake_release(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Callable[[str], object]:
    """Install one of ``tests.fakes.FAMILIES`` and return its module once bound (SM90 planning);
    ``"reference"`` selects the embedded reference backend instead."""
    from . import fakes

    def install(family: str, arch: str = "sm90") -> object:
        from dgcompat import _backend

        if family == "reference":
            monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
            import dgcompat

            dgcompat.reset()
            return _backend.load()
        dist, version, body = fakes.FAMILIES[family]
        monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")  # fakes have no native library
        monkeypatch.setenv("DGCOMPAT_ARCH", arch)
        fake_site(dist, version, body)
        return _backend.load()

    return install
