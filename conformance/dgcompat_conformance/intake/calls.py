"""The upstream calls dgcompat's adapters make (declared as data, collected by :func:`dgcompat._tooling.all_calls`), held against a surface."""

from __future__ import annotations

from collections.abc import Mapping
from types import SimpleNamespace
from typing import Any

from dgcompat._tooling import UpstreamCall, all_calls

from ..surface import Change, diff, is_engine_symbol
from ._surface import Surface, _param, _params, _record
from .claims import SURFACE_CLAIMS, capabilities_of, catch_all

__all__ = ["UpstreamCall", "STABLE_USES", "check_calls", "intake_symbols", "diff_surfaces"]


STABLE_USES: tuple[UpstreamCall, ...] = all_calls()

_USES: dict[str, list[UpstreamCall]] = {}
for _use in STABLE_USES:
    _USES.setdefault(_use.symbol, []).append(_use)

# Alternatives are called only when the primary name is missing; they count as called symbols.
_ALTERNATIVE_OF: dict[str, UpstreamCall] = {alt: use for use in STABLE_USES for alt in use.alternatives}


def _called_symbols() -> set[str]:
    return set(_USES) | set(_ALTERNATIVE_OF)


def intake_symbols(a: Surface, b: Surface) -> list[str]:
    """The Python names the intake diff compares: engine-relevant ones plus every one dgcompat calls."""
    called = _called_symbols()
    names = set(a.get("python") or {}) | set(b.get("python") or {})
    return sorted(n for n in names if is_engine_symbol(n) or n in called)


def diff_surfaces(a: Surface, b: Surface, *, all_symbols: bool = False) -> list[Change]:
    """:func:`dgcompat_conformance.surface.diff` over :func:`intake_symbols` (or every name with ``all_symbols``)."""
    if all_symbols:
        return diff(a, b, all_symbols=True)
    return diff(a, b, symbols=intake_symbols(a, b))


def _name_ok(entry: str, name: Any) -> bool:
    return entry == "*" or name is None or str(name) in entry.split("|")


def _call_problems(use: UpstreamCall, rec: Mapping[str, Any], caps: Any) -> list[str]:
    params = _params(rec)
    if rec.get("kind") == "native" and rec.get("params") is None:
        return []  # a native op the library scan could not read: nothing to hold the call against
    where = f"{use.symbol} ({use.caller})"
    problems: list[str] = []
    var_pos = any(p.get("kind") == "var_positional" for p in params)
    var_kw = any(p.get("kind") == "var_keyword" for p in params)
    slots = [p for p in params if p.get("kind") in ("positional_only", "positional")]
    expected = use.expected_positional(caps)
    for i, entry in enumerate(expected):
        if i >= len(slots):
            if not var_pos:
                problems.append(f"{where}: passes {entry} at #{i}, but the function takes only {len(slots)} "
                                "positional arguments")
            break
        if not _name_ok(entry, slots[i].get("name")):
            problems.append(f"{where}: passes {entry} at #{i}, but #{i} is {slots[i].get('name')}")
    for j, name in enumerate(use.keywords):
        found = _param(rec, name)
        if found is None:
            if not var_kw:
                problems.append(f"{where}: passes {name}= by keyword, but there is no such parameter")
            continue
        if found[1].get("kind") == "positional_only":
            problems.append(f"{where}: passes {name}= by keyword, but it is positional-only")
        if use.passthrough and found[0] != len(use.positional) + j:
            problems.append(f"{where}: {name} is documented at #{len(use.positional) + j} (dgcompat.resolve hands "
                            f"the function to engines), but sits at #{found[0]}")
    # A forwarded parameter is passed by keyword wherever the function has it (read from its signature at bind time).
    passed = {n for entry in expected for n in entry.split("|")} | set(use.keywords) | set(use.forwarded)
    for i, p in enumerate(params):
        if p.get("kind") in ("var_positional", "var_keyword") or p.get("default") is not None:
            continue
        if i < len(expected) and p.get("kind") in ("positional_only", "positional"):
            continue
        if p.get("name") not in passed:
            problems.append(f"{where}: requires {p.get('name') or f'argument #{i}'}, which dgcompat does not pass")
    return problems


def check_calls(surface: Surface, *, arch: str = "sm90") -> list[str]:
    """Where a call dgcompat makes on this release would not fit the surface's signatures.

    The calls in effect are those the table selects for the release (e.g. the mqa function the
    ``mqa_logits`` row names); a symbol an adapter cannot do without and that is missing (with no
    alternative present) is a problem too.
    """
    caps: Any
    try:
        caps = capabilities_of(surface, arch=arch)
    except ValueError:
        # No release to look the rows up for: the surface's own answers select the calls; what no signature shows
        # takes the table's catch-all answer.
        caps = SimpleNamespace(**{**catch_all(arch), **{name: claim(surface) for name, claim in SURFACE_CLAIMS.items()}})
    problems: list[str] = []
    for use in STABLE_USES:
        if not use.in_effect(caps):
            continue
        rec = _record(surface, use.symbol)
        if rec is None:
            if use.optional or any(_record(surface, alt) is not None for alt in use.alternatives):
                continue
            problems.append(f"{use.symbol} ({use.caller}): missing from the release")
            continue
        problems += _call_problems(use, rec, caps)
    return problems
