"""Property suite over the reference backend and the fake release families.

Opt-in (``pytest -m property``). ``DGCOMPAT_PROPERTY_EXAMPLES`` sets the examples per entry point and
backend (default 200; the release check runs 2,500 x 4 backends = 10,000 calls per entry point). The
same generators run over every published wheel's real Python layer in the conformance CPU tier
(``dgcompat_conformance/suite/test_stable_properties.py``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, settings

import dgcompat
from dgcompat_conformance.suite import _properties as P

pytestmark = pytest.mark.property

EXAMPLES = int(os.environ.get("DGCOMPAT_PROPERTY_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
BACKENDS = ["reference", "sgl-0.1.3", "sgl-0.2.5", "bundled"]
#: From this many examples on, a run must have made both computed and refused calls (at 40 examples every entry
#: point and backend had at least 6 of each; fewer examples check only that every call ended in one of them).
MIXED_FROM = 100


@pytest.fixture
def backend(request: pytest.FixtureRequest, fake_release: Callable[[str], Any],
            monkeypatch: pytest.MonkeyPatch) -> str:
    name: str = request.param
    if name == "reference":
        monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
        monkeypatch.setenv("DGCOMPAT_ARCH", "sm90")
        dgcompat.reset()
    else:
        fake_release(name)
    return name


@pytest.mark.parametrize("entry", sorted(P.ENTRY_POINTS))
@pytest.mark.parametrize("backend", BACKENDS, indirect=True)
def test_generated_calls(backend: str, entry: str) -> None:
    """Each generated call computes the reference result or raises a dgcompat error; every call ends in one of
    those two counted outcomes, and with enough examples both occur (a run whose calls were all refused, or
    all valid, has not tested what it says)."""
    calls, ran = P.run_generated(dgcompat, backend, entry, SETTINGS)
    outcomes = P.outcomes(ran)
    assert calls > 0 and outcomes["ok"] + outcomes["error"] >= calls, (calls, dict(ran))
    if EXAMPLES >= MIXED_FROM:
        assert outcomes["ok"] > 0 and outcomes["error"] > 0, f"{calls} calls, never both outcomes: {dict(ran)}"
