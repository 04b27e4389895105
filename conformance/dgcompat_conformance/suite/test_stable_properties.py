"""Generated calls, valid and invalid, at the stable entry points over the deep_gemm under test.

Each call must compute the reference result or raise a dgcompat error; a stand-in hang fails the
test. ``DGCOMPAT_PROPERTY_EXAMPLES`` (default 8 per entry point) scales the run:
``DGCOMPAT_PROPERTY_EXAMPLES=500 dgcompat conform --all`` throws 500 generated calls per entry
point at every published wheel.
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dgcompat_conformance.suite import _properties as P

pytestmark = pytest.mark.stable

_EXAMPLES = int(os.environ.get("DGCOMPAT_PROPERTY_EXAMPLES", "8"))
_SETTINGS = settings(max_examples=_EXAMPLES, deadline=None, database=None, derandomize=True)


@pytest.mark.parametrize("entry", sorted(P.ENTRY_POINTS))
@_SETTINGS
@given(data=st.data())
def test_generated(dg: Any, entry: str, data: st.DataObject) -> None:
    strategy, check = P.ENTRY_POINTS[entry]
    check(dg, "under-test", data.draw(strategy(), label="call"))


def test_generated_counts() -> None:
    """Records how many generated calls ran and how they ended: printed, and appended as one JSON line
    to the file named by ``DGCOMPAT_PROPERTY_COUNTS`` when set."""
    import json

    import dgcompat

    for key in sorted(P.COUNTS):
        print(f"{key}: {P.COUNTS[key]}")
    path = os.environ.get("DGCOMPAT_PROPERTY_COUNTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"release": dgcompat.release().label, "counts": dict(P.COUNTS)}) + "\n")
