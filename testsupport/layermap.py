"""Where a module sits in a layer map: the one placement rule of both wings' maps (:mod:`testsupport.layers`, the
runtime's; :mod:`testsupport.wing_layers`, the certification wing's).

A map is entries -> layer rank (0 the lowest). An entry names one module, or ends in ``.*``: every module of that
package, the package included, unless another entry names the module itself. Module names are whatever the map
uses (full for the runtime, relative to the package for the wing); the same spelling on both sides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Layer", "entries", "covers", "place", "unplaced", "stale"]


@dataclass(frozen=True)
class Layer:
    """One layer: its name, what it is for, its entries (module names, or ``pkg.*``) and the jobs the README names
    for some of them (entry -> job)."""

    name: str
    what: str
    modules: tuple[str, ...]
    jobs: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not set(self.jobs) <= set(self.modules):
            raise ValueError(f"layer {self.name!r}: jobs of entries it does not hold: "
                             f"{sorted(set(self.jobs) - set(self.modules))}")


def entries(layers: Iterable[Layer], full: Callable[[str], str] = str) -> dict[str, int]:
    """Every entry of ``layers`` (spelt by ``full``) -> the index of its layer."""
    return {full(entry): i for i, layer in enumerate(layers) for entry in layer.modules}


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
