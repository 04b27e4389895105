"""Property suite over the reference backend and the fake release families.

Opt-in (``pytest -m property``). ``DGCOMPAT_PROPERTY_EXAMPLES`` sets the examples per entry point and
backend (default 200; the release check runs 2,500 x 4 backends = 10,000 calls per entry point). The
same generators run over every published wheel's real Python layer in the conformance CPU tier
(``dgcompat_conformance/suite/test_stable_properties.py``).
"""

from __future__ import annotations

import os
from typing import Any, Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dgcompat
from dgcompat_conformance.suite import _properties as P

pytestmark = pytest.mark.property

EXAMPLES = int(os.environ.get("DGCOMPAT_PROPERTY_EXAMPLES", "200"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, database=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
BACKENDS = ["reference", "sgl-0.1.3", "sgl-0.2.5", "bundled"]


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
@SETTINGS
@given(data=st.data())
def test_generated_calls(backend: str, entry: str, data: st.DataObject) -> None:
    strategy, check = P.ENTRY_POINTS[entry]
    check(dgcompat, backend, data.draw(strategy(), label="call"))


def test_report_counts() -> None:
    """Prints the per-entry-point counts gathered above (runs last in file order)."""
    for key in sorted(P.COUNTS):
        print(f"{key}: {P.COUNTS[key]}")
