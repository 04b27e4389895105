"""Generated calls, valid and invalid, at the stable entry points over the deep_gemm under test.

Each call must compute the reference result or raise a dgcompat error; a stand-in hang fails the
test. ``DGCOMPAT_PROPERTY_EXAMPLES`` (default 8 per entry point) scales the run:
``DGCOMPAT_PROPERTY_EXAMPLES=500 dgcompat conform --all`` throws 500 generated calls per entry
point at every published wheel.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest
from hypothesis import settings

import dgcompat
from dgcompat_conformance.suite import _properties as P

pytestmark = pytest.mark.stable

_EXAMPLES = int(os.environ.get("DGCOMPAT_PROPERTY_EXAMPLES", "8"))
_SETTINGS = settings(max_examples=_EXAMPLES, deadline=None, database=None, derandomize=True)


@pytest.mark.parametrize("entry", sorted(P.ENTRY_POINTS))
def test_generated(dg: Any, entry: str) -> None:
    """Each generated call computes the reference result or raises a dgcompat error, and ends in one of those two
    counted outcomes. ``DGCOMPAT_PROPERTY_COUNTS`` (a file name) records the counts: one JSON line per entry point."""
    calls, ran = P.run_generated(dg, "under-test", entry, _SETTINGS)
    path = os.environ.get("DGCOMPAT_PROPERTY_COUNTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"release": dgcompat.release().label, "entry": entry, "calls": calls,
                                "counts": dict(ran)}) + "\n")
    done = P.outcomes(ran)
    assert calls > 0 and done["ok"] + done["error"] >= calls, (calls, dict(ran))
