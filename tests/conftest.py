"""Shared fixtures (fake distributions laid out on a temporary ``sys.path``) and the test tiers.

Every test is in one tier: the fast tier (no tier marker; what ``python -m pytest`` runs: every module in small,
representative cases), ``slow`` (warmup subprocesses, the rest of each parameter grid such as the engine
patterns and the releases' spellings, the benchmarks' own runs, mypy), ``wheels`` (the published wheels,
downloaded into the cache when missing) or ``property`` (large hypothesis suites); ``-m TIER`` selects one.
A test in the ``wheels`` tier never skips: a green run of it has run every test.
"""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from testsupport.dists import write_dist
from testsupport.tiers import TIERS

# tests/test_tiers.py runs probe suites under these rules.
pytest_plugins = ["pytester"]


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Refuse a test in two tiers (``-m slow`` and ``-m wheels`` would both run it, or neither count it)."""
    doubled = [f"{item.nodeid}: {', '.join(names)}" for item in items
               for names in [sorted({m.name for m in item.iter_markers() if m.name in TIERS})] if len(names) > 1]
    if doubled:
        raise pytest.UsageError("a test is in one tier at most:\n" + "\n".join(doubled))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, Any]:
    """A skip in the ``wheels`` tier is a failure: a missing wheel is downloaded (testsupport.wheels), and a tier
    whose tests skipped has not checked what it says it checked."""
    report = yield
    if report.skipped and not hasattr(report, "wasxfail") and item.get_closest_marker("wheels") is not None:
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        report.outcome = "failed"
        report.longrepr = f"a test of the wheels tier may not skip: {reason}"
    return report


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
def fake_release(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch) -> Callable[..., object]:
    """Install one of ``testsupport.fakes.FAMILIES`` and return its module once bound (SM90 planning);
    ``"reference"`` selects the embedded reference backend instead."""
    from testsupport import fakes

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
