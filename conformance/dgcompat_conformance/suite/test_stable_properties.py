"""Generated calls, valid and invalid, at the stable entry points over the deep_gemm under test.

Each call must compute the reference result or raise a dgcompat error; a stand-in hang fails the
test. ``DGCOMPAT_PROPERTY_EXAMPLES`` (default 8 per entry point) scales the run:
``DGCOMPAT_PROPERTY_EXAMPLES=500 dgcompat conform --all`` throws 500 generated calls per entry
point at every published wheel.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import dgcompat
from dgcompat_conformance.suite import _properties as P

pytestmark = pytest.mark.stable

_EXAMPLES = int(os.environ.get("DGCOMPAT_PROPERTY_EXAMPLES", "8"))
_SETTINGS = settings(max_examples=_EXAMPLES, deadline=None, database=None, derandomize=True)


@pytest.mark.parametrize("entry", sorted(P.ENTRY_POINTS))
def test_generated(dg: Any, entry: str) -> None:
    """Each generated call computes the reference result or raises a dgcompat error, and ends in one of those two
    counted outcomes. ``DGCOMPAT_PROPERTY_COUNTS`` (a file name) records the counts: one JSON line per entry point."""
    strategy, check = P.ENTRY_POINTS[entry]
    before = Counter(P.COUNTS)
    calls = 0

    @_SETTINGS
    @given(data=st.data())
    def generated(data: st.DataObject) -> None:
        nonlocal calls
        call = data.draw(strategy(), label="call")
        calls += 1  # a draw hypothesis abandons is no call; each completed one must end in a counted outcome
        check(dg, "under-test", call)

    generated()
    ran = P.COUNTS - before
    outcomes = Counter(key.rsplit(":", 1)[1] for key in ran.elements())
    path = os.environ.get("DGCOMPAT_PROPERTY_COUNTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"release": dgcompat.release().label, "entry": entry, "calls": calls,
                                "counts": dict(ran)}) + "\n")
    assert calls > 0 and outcomes["ok"] + outcomes["error"] >= calls, (calls, dict(ran))
