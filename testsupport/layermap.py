"""Where a module sits in a layer map: the one placement rule of both wings' maps (:mod:`testsupport.layers`, the
runtime's; :mod:`testsupport.wing_layers`, the certification wing's).

A map is entries -> layer rank (0 the lowest). An entry names one module, or ends in ``.*``: every module of that
package, the package included, unless another entry names the module itself. Module names are whatever the map
uses (full for the runtime, relative to the package for the wing); the same spelling on both sides.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

__all__ = ["covers", "place", "unplaced", "stale"]


def covers(entry: str, module: str) -> bool:
    """Whether map entry ``entry`` stands for ``module`` (its own name, or a ``pkg.*`` over it)."""
    if entry.endswith(".*"):
        return module == entry[:-2] or module.startswith(entry[:-1])
    return module == entry


def place(module: str, entries: Mapping[str, int]) -> int | None:
    """The rank of ``module``: its own entry's, else that of the ``pkg.*`` entry over it (the innermost), else None."""
    if module in entries and not module.endswith(".*"):
        return entries[module]
    over = [e for e in entries if e.endswith(".*") and covers(e, module)]
    return entries[max(over, key=len)] if over else None


def unplaced(modules: Iterable[str], entries: Mapping[str, int]) -> list[str]:
    """The modules no entry places, sorted."""
    return sorted(m for m in modules if place(m, entries) is None)


def stale(modules: Iterable[str], entries: Iterable[str]) -> list[str]:
    """The entries (in their order) that stand for no module of ``modules``."""
    found = list(modules)
    return [e for e in entries if not any(covers(e, m) for m in found)]
