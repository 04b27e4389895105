"""The upstream calls dgcompat's adapters make, declared as data.

Each :class:`UpstreamCall` says which deep_gemm callable an adapter calls, which arguments it
passes by position and which by keyword, on which releases (``selected_by`` a capability), and
whether it reads the result. Each adapter module declares its own calls next to the code that
makes them (a module-level ``CALLS`` tuple); :func:`dgcompat._tooling.all_calls` collects them. The certification
wing's intake checks every declaration against a release's extracted surface, so a release that
moves or renames a parameter dgcompat relies on is caught before it is deployed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["UpstreamCall"]


@dataclass(frozen=True)
class UpstreamCall:
    """One upstream callable an adapter in dgcompat calls, and what about it the call relies on.

    Parameter entries are names as the releases spell them; ``"a|b"`` accepts either name and
    ``"*"`` any name (the argument is passed by position, so only the slot matters).
    """

    symbol: str
    """``deep_gemm.<name>`` or ``_C.<op>`` (a native op called directly)."""
    caller: str
    """The dgcompat function whose adapter makes the call."""
    positional: tuple[str, ...] = ()
    """Arguments passed by position, in order."""
    keywords: tuple[str, ...] = ()
    """Arguments passed by keyword."""
    row_positional: tuple[tuple[str, str, tuple[Any, ...]], ...] = ()
    """Further positional arguments whose presence rows decide: ``(param, capability, values where passed)``."""
    uses_result: bool = False
    """The adapter reads what the call returns."""
    passthrough: bool = False
    """:func:`dgcompat.resolve` may hand the upstream object to engines, so the documented positions of the
    keyword arguments (right after the positional ones, in order) are part of the contract too."""
    selected_by: tuple[str, Any] | None = None
    """``(capability, value)``: called only where the release's capability has that value."""
    alternatives: tuple[str, ...] = ()
    """Symbols the adapter falls back to when this one is missing."""
    optional: bool = False
    """The adapter copes with the symbol's absence (``getattr`` with a no-op fallback)."""
    forwarded: tuple[str, ...] = ()
    """Parameters passed by keyword only where the installed function's signature has them (read at bind
    time, see :mod:`dgcompat._params`); elsewhere their value is emulated where exact, or refused."""

    def in_effect(self, caps: Any) -> bool:
        """Whether the adapter calls this symbol on a release with ``caps`` (None: unknown, assume so).

        ``caps`` is a :class:`~dgcompat.table.Capabilities` or any object with the same attributes.
        """
        if caps is None or self.selected_by is None:
            return True
        capability, value = self.selected_by
        return bool(getattr(caps, capability) == value)

    def expected_positional(self, caps: Any) -> tuple[str, ...]:
        """Every argument passed by position on a release with ``caps`` (None: every possible one)."""
        extra = tuple(p for p, cap, values in self.row_positional if caps is None or getattr(caps, cap) in values)
        return self.positional + extra

    def relied_names(self) -> frozenset[str]:
        """Every parameter name this call passes (by position or keyword) on some release."""
        names: set[str] = set()
        for entry in self.positional + self.keywords + tuple(p for p, _c, _v in self.row_positional):
            names.update(n for n in entry.split("|") if n != "*")
        return frozenset(names)
