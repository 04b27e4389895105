"""The runtime's layers as data: every module of ``dgcompat`` and the layer it belongs to.

:data:`MODULES` is the one map (module, or ``package.*`` for all of a package's modules -> layer, and the job
the README names for it; placed by :mod:`testsupport.layermap`, as the wing's map is). A module may
import modules of its own layer and of the layers below it; an import of a module of a higher layer
is an *upward edge*. The import scanner (:mod:`testsupport.layout`) counts every form: top-level,
inside functions, string imports (``importlib.import_module("dgcompat.x")``) and the computed imports
of the modules that declare the table they import from. ``tests/test_layers.py`` fails on a module
missing from the map, on a map entry that names no module and on any upward edge (with a planted
control), and holds the README's layer table (:func:`render_table`) against the map.

``python -m testsupport.layers`` prints the table; ``--write`` puts it into README.md between the
markers :data:`BEGIN` and :data:`END`. A checkout-only module: nothing installed reads it.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from . import layermap, layout
from .layermap import Layer

__all__ = ["LAYERS", "MODULES", "LAYER_OF", "Upward", "upward_edges", "unmapped", "stale", "render_table",
           "readme_table", "BEGIN", "END", "README"]

#: The layers, lowest first: what each holds, its entries (relative to ``dgcompat``: ``""`` the package itself,
#: ``pkg.*`` every module of a package whose modules are all of that layer, :mod:`testsupport.layermap`) in the
#: README's order, and the jobs the README names (a module without one is told by its package's entry).
LAYERS: tuple[Layer, ...] = (
    Layer("leaves", "import nothing of the runtime but each other",
          ("errors", "_version", "env", "_device", "_math", "_surface", "_pysurface"),
          {"errors": "the typed errors", "env": "the `DGCOMPAT_*` variables, the backend vocabulary",
           "_device": "every CUDA question", "_surface": "the name table",
           "_pysurface": "a build's Python signatures, read from its source"}),
    Layer("what is installed", "detection, the reference backend, and the backend module",
          ("detection.*", "reference.*", "_backend"),
          {"detection.*": "which deep_gemm is installed, read without importing it: the registries, a dist-info/RECORD "
                          "reader, the native-library checks, the decision",
           "reference.*": "the pure-torch oracle, and `reference/backend.py`: deep_gemm's names, nothing else",
           "_backend": "which backend may be imported, importing it once"}),
    Layer("core", "the capability table and what every adapter binds and checks with",
          ("table", "_calls", "_binding", "_params", "_checks"),
          {"table": "the capability table", "_calls": "the upstream calls, declared",
           "_binding": "binding each stable function once", "_checks": "argument checks"}),
    Layer("adapters", "deep_gemm's functions, one stable signature each",
          ("knobs", "gemm", "moe", "scales", "indexer.*"),
          {"indexer.*": "ragged and paged MQA, planning, layout, schedules, cache, capture, one state object"}),
    Layer("facade", "`import dgcompat`, deep_gemm's submodules, and dgcompat installed as deep_gemm",
          ("utils.*", "testing", "_install.*", "", "__main__"),
          {"utils.*": "`deep_gemm.utils`", "testing": "`deep_gemm.testing`",
           "_install.*": "dgcompat installed as deep_gemm: the finder and facade modules, `forward`, `resolve`, "
                         "`launch` (`python -m dgcompat run`), the start-up hook",
           "": "the facade: the name table's names, loaded on first use", "__main__": "`python -m dgcompat`"}),
    Layer("beside the facade", "imported by name, never by the facade: JIT warmup (engines) and the tooling interface",
          ("jit_warmup.*", "_tooling"),
          {"jit_warmup.*": "JIT warmup, its presets and CLI: public runtime names only",
           "_tooling": "the tooling's one interface"}),
)


def _full(entry: str) -> str:
    return f"dgcompat.{entry}" if entry else "dgcompat"


#: Every map entry (full names) -> (its layer, its job as the README names it; "" where its package's entry tells it).
MODULES: dict[str, tuple[str, str]] = {_full(entry): (layer.name, layer.jobs.get(entry, ""))
                                       for layer in LAYERS for entry in layer.modules}
#: Map entry -> the rank of its layer (0: the leaves).
LAYER_OF: dict[str, int] = layermap.entries(LAYERS, _full)

README = layout.ROOT / "README.md"
BEGIN = "<!-- layer table: generated from testsupport/layers.py by `python -m testsupport.layers --write` -->"
END = "<!-- end of the layer table -->"


@dataclass(frozen=True)
class Upward:
    """An import of ``target`` (layer ``target_layer``) by ``module`` (the lower layer ``module_layer``)."""

    module: str
    target: str
    kind: str
    line: int
    module_layer: int
    target_layer: int

    def __str__(self) -> str:
        def name(rank: int) -> str:
            return LAYERS[rank].name if rank < len(LAYERS) else str(rank)

        return (f"{self.module}:{self.line} ({name(self.module_layer)}) imports {self.target} "
                f"({name(self.target_layer)}): a {self.kind} import")


def unmapped(modules: Mapping[str, Path], layer_of: Mapping[str, int] = LAYER_OF) -> list[str]:
    """The modules of ``modules`` the map does not place."""
    return layermap.unplaced(modules, layer_of)


def stale(modules: Mapping[str, Path], layer_of: Mapping[str, int] = LAYER_OF) -> list[str]:
    """The map's entries that stand for no module of ``modules``."""
    return sorted(layermap.stale(modules, layer_of))


def upward_edges(modules: Mapping[str, Path], layer_of: Mapping[str, int] = LAYER_OF,
                 tables: Mapping[str, tuple[str, ...]] | None = None) -> list[Upward]:
    """Every import, in any form (:func:`testsupport.layout.import_edges`), of a module of a higher layer than the
    importing module's. ``tables``: the declared computed-import tables (default: the runtime's)."""
    known = set(modules)
    found = []
    for module, path in sorted(modules.items()):
        here = layermap.place(module, layer_of)
        if here is None:
            continue  # reported by unmapped()
        for edge in layout.import_edges(path, module, known, tables):
            there = layermap.place(edge.target, layer_of)
            if there is not None and there > here:
                found.append(Upward(module, edge.target, edge.kind, edge.line, here, there))
    return found


def _short(module: str) -> str:
    return "__init__" if module == "dgcompat" else module.removeprefix("dgcompat.")


def render_table(modules: Mapping[str, tuple[str, str]] = MODULES) -> str:
    """The README's layer table: one row per layer, highest first, its entries in the map's order; a ``pkg.*`` entry
    is the package's folder (``indexer/``), named with its job."""
    rows = ["| layer | what it holds | modules (one job each) |", "|---|---|---|"]
    for rank in range(len(LAYERS) - 1, -1, -1):
        name, what = LAYERS[rank].name, LAYERS[rank].what
        shown = [(f"`{_short(entry[:-2]).replace('.', '/')}/`" if entry.endswith(".*") else f"`{_short(entry)}`")
                 + (f" ({job})" if job else "") for entry, (layer, job) in modules.items() if layer == name]
        rows.append(f"| {name} | {what} | {', '.join(shown)} |")
    return "\n".join(rows)


def readme_table(readme: Path = README) -> str:
    """The generated part of README.md (between :data:`BEGIN` and :data:`END`), as it is now."""
    text = readme.read_text("utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    return text[start:end].strip("\n")


def _write(readme: Path = README) -> None:
    text = readme.read_text("utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    readme.write_text(text[:start] + "\n" + render_table() + "\n" + text[end:], "utf-8")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        _write()
        print(f"wrote the layer table into {README}")
    elif sys.argv[1:]:
        print("usage: python -m testsupport.layers [--write]", file=sys.stderr)
        raise SystemExit(2)
    else:
        print(render_table())
