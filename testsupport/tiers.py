"""The test tiers: the fast one (no marker, what ``python -m pytest`` runs) and ``slow``, ``wheels``, ``property``.

:func:`grid` splits a parameter grid between the fast and the slow tier: the whole grid runs in the two
together, a covering part of it in the fast one.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import pytest
from _pytest.mark.structures import ParameterSet

__all__ = ["TIERS", "grid"]

#: The tiers besides the fast one, as the markers pyproject.toml declares.
TIERS = ("slow", "wheels", "property")


def grid(*axes: Sequence[Any], full: int = 1) -> list[ParameterSet]:
    """The product of ``axes`` as parameter sets, all in the ``slow`` tier but a covering part: each combination
    of the first ``full`` axes once, with the other axes' values rotating through those cases. Every value of
    every axis is in the fast part (a ``ValueError`` says when the first axes have too few combinations), except
    with ``full=0``: one fast case, the first value of each axis (for a grid whose every value the fast tier
    already reaches through other tests)."""
    heads = list(itertools.product(*axes[:full]))
    fast = {head + tuple(axis[k % len(axis)] for axis in axes[full:]) for k, head in enumerate(heads)}
    for i, axis in enumerate(axes if full else ()):
        missing = [v for v in axis if not any(case[i] == v for case in fast)]
        if missing:
            raise ValueError(f"axis {i}: {missing} would be in no fast case; put a longer axis first")
    return [pytest.param(*case, marks=() if case in fast else (pytest.mark.slow,), id="-".join(map(str, case)))
            for case in itertools.product(*axes)]
