"""Published wheels for the ``wheels`` test tier: taken from the wheel cache, downloaded when missing.

A test of that tier never skips for a wheel that is not cached (a green run must not mean "skipped"): the
wheel is fetched through the one wheel cache (:mod:`dgcompat_conformance.wheelcache`, ``$DGCOMPAT_CACHE``),
and a wheel that cannot be had fails the test that needs it, saying why.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dgcompat_conformance.releases import parse_release
from dgcompat_conformance.wheels import FetchError, fetch_wheel

__all__ = ["published_wheel"]


def published_wheel(release: str) -> Path:
    """The verified wheel of ``release`` (as ``dgcompat conform --release`` takes it: ``"0.2.5"``,
    ``"sgl-kernel==0.3.21"``, ``"vllm-0.33.0"``), downloaded into the cache when missing or corrupt."""
    spec = parse_release(release)
    try:
        return fetch_wheel(spec)
    except FetchError as exc:
        pytest.fail(f"the {spec} wheel is not in the wheel cache and could not be downloaded: {exc}", pytrace=False)
