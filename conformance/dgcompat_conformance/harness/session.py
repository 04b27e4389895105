"""What the harness child tells the suite running in the same process.

The suite's ``conftest.py`` reads :func:`current` to learn whether it runs on the CPU tier (and
against which stand-ins), so that it can report it and check that no stand-in hang was raised.
When the suite is run directly with pytest (on a real GPU install), :func:`current` is None.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .standins import Installed

__all__ = ["Session", "current", "set_current"]


class Session:
    """The tier the suite runs on and, on the CPU tier, the installed stand-ins."""

    def __init__(self, tier: str, release_id: str, installed: Installed | None, info: dict[str, Any]) -> None:
        self.tier = tier  # "cpu-tier", "gpu" or "reference"
        self.release_id = release_id
        self.installed = installed
        self.info = info

    def hang_count(self) -> int:
        """How many stand-in hangs were raised so far in this process."""
        return len(self.installed.state.hangs) if self.installed is not None else 0


_CURRENT: Session | None = None


def current() -> Session | None:
    """The harness session of this process, or None outside the harness."""
    return _CURRENT


def set_current(session: Session | None) -> None:
    """Called by the harness child before it starts pytest."""
    global _CURRENT  # noqa: PLW0603 - the one session of this process
    _CURRENT = session
