"""The tier rules of tests/conftest.py, on a probe suite: a test is in one tier at most, and a test of the wheels
tier that skips fails; the parameter grids keep every value in the fast tier."""

from __future__ import annotations

import pytest

from testsupport.tiers import TIERS, grid

_PROBE = """
import pytest


@pytest.mark.wheels
def test_skips_in_the_wheels_tier():
    pytest.skip("the wheel is not in the wheel cache")


@pytest.mark.wheels
def test_passes_in_the_wheels_tier():
    pass


def test_skips_in_the_fast_tier():
    pytest.skip("a fast-tier skip stays a skip")
"""


@pytest.fixture
def probe(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini("[pytest]\nmarkers =\n" + "".join(f"    {tier}: the {tier} tier\n" for tier in TIERS))
    pytester.makeconftest("from tests.conftest import pytest_collection_modifyitems, pytest_runtest_makereport\n")
    return pytester


def test_a_skip_in_the_wheels_tier_fails(probe: pytest.Pytester) -> None:
    probe.makepyfile(test_probe=_PROBE)
    result = probe.runpytest_inprocess("-p", "no:cacheprovider", "-rfs")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["*a test of the wheels tier may not skip: *not in the wheel cache*"])


def test_a_test_in_two_tiers_is_refused(probe: pytest.Pytester) -> None:
    probe.makepyfile(test_probe="import pytest\n\n\n@pytest.mark.slow\n@pytest.mark.wheels\ndef test_two():\n    pass\n")
    result = probe.runpytest_inprocess("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*a test is in one tier at most*", "*test_two: slow, wheels"])


def test_a_grid_keeps_every_value_fast() -> None:
    cases = grid(["a", "b", "c", "d"], [1, 2, 3], [False, True])
    fast = [case.values for case in cases if not case.marks]
    assert len(cases) == 24 and len(fast) == 4
    assert {v[0] for v in fast} == {"a", "b", "c", "d"} and {v[1] for v in fast} == {1, 2, 3}
    assert {v[2] for v in fast} == {False, True}
    assert all([m.name for m in case.marks] == ["slow"] for case in cases if case.marks)
    with pytest.raises(ValueError, match="axis 1"):
        grid([1, 2], ["x", "y", "z"])  # two fast cases cannot hold three values
    assert len([case for case in grid([1, 2], ["x", "y", "z"], full=0) if not case.marks]) == 1
