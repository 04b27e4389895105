"""The certification wing's layers, as data: each module of ``dgcompat_conformance`` in one layer, each layer
importing only itself and the layers before it.

Every import form counts (:func:`testsupport.layout.import_edges`, the one reader of import edges):
top-level, inside functions, string imports and computed ones; a module whose ``import_module`` takes a computed
name says what it loads in :data:`COMPUTED`. ``tests/test_wing_layers.py`` fails on any edge that points to a
later layer, on a module no layer names and on a layer entry no module matches; README.md's table of the wing's
layers is :func:`markdown`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dgcompat_conformance._text import cell
from testsupport import layermap, layout
from testsupport.layermap import Layer

__all__ = ["WING", "ROOT", "Layer", "LAYERS", "COMPUTED", "Edge", "modules", "layer_of", "edges", "upward",
           "unplaced", "stale", "markdown"]

WING = "dgcompat_conformance"
#: The folder that holds the wing's package in this checkout.
ROOT = Path(__file__).resolve().parent.parent / "conformance"


#: The layers, first to last: a module imports only modules of its own layer and of the layers before it. Entries are
#: relative to the wing (``""`` the package itself; ``"pkg.*"`` a subpackage: :mod:`testsupport.layermap`).
LAYERS: tuple[Layer, ...] = (
    Layer("leaves", "the one text check, where the wings live, the distribution table",
          ("", "_text", "_paths", "dists")),
    Layer("certificates", "the one certificate type: schema, check, writer, reader", ("certificate",)),
    Layer("builds", "published builds: release names, the wheel cache, the package index, a release's wheel and "
                    "work folder, the results folder, the command-line argument types",
          ("wheelcache", "index", "releases", "wheels", "results", "_args")),
    Layer("report", "every generated page and printed table", ("report",)),
    Layer("surface", "a build's surface and fingerprint, read without importing it", ("surface.*",)),
    Layer("harness", "the CPU tier: the stand-ins, the child, the runner, its certificates", ("harness.*",)),
    Layer("suite", "the conformance tests the harness child runs", ("suite.*",)),
    Layer("gpu", "the GPU tier: cases, the ABI check, the runner", ("gpu.*",)),
    Layer("intake", "new releases on the index, their surfaces mapped onto the capability table", ("intake.*",)),
    Layer("commands", "the dgcompat command and its subcommands", ("cli", "conform", "doctor", "pins",
                                                                  "surface.cli")),
)

#: Wing modules whose ``import_module`` takes a computed name -> what it loads (never a module of the wing).
COMPUTED: Mapping[str, str] = {
    "harness.child": "the deep_gemm copy under test, by the name detection gives it",
    "suite._support": "the module the suite certifies ($DGCOMPAT_CONFORMANCE_SUBJECT, default dgcompat)",
    "suite.conftest": "the deep_gemm copy under test ($DGCOMPAT_CONFORMANCE_MODULE)",
    "surface.python": "nothing: the evaluator's own import_module method, not importlib's",
}


@dataclass(frozen=True)
class Edge:
    """One import of a wing module by a wing module (names relative to the wing)."""

    source: str
    target: str
    kind: str
    """``top``, ``function``, ``string`` or ``computed`` (:class:`testsupport.layout.Edge`)."""
    line: int


def _short(module: str) -> str:
    return module[len(WING) + 1:] if module.startswith(WING + ".") else ("" if module == WING else module)


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the wing under ``root`` (relative name -> file)."""
    return {_short(m): p for m, p in layout.read_wing("wing", root, WING).modules.items()}


def layer_of(module: str, layers: tuple[Layer, ...] = LAYERS) -> int | None:
    """The index of ``module``'s layer: the layer that names it, else the one whose ``pkg.*`` covers it
    (:func:`testsupport.layermap.place`)."""
    return layermap.place(module, layermap.entries(layers))


def edges(root: Path = ROOT) -> list[Edge]:
    """Every import edge between wing modules under ``root``, in every form; a computed import a module does not
    declare in :data:`COMPUTED` is an edge to ``"<undeclared computed import>"``."""
    found = modules(root)
    known = {f"{WING}.{m}" if m else WING for m in found}
    out = []
    for module, path in sorted(found.items()):
        full = f"{WING}.{module}" if module else WING
        for e in layout.import_edges(path, full, known):
            if e.kind == "computed" and e.target == "<undeclared computed import>":
                if module not in COMPUTED:
                    out.append(Edge(module, e.target, e.kind, e.line))
            elif e.target in known:
                out.append(Edge(module, _short(e.target), e.kind, e.line))
    return list(dict.fromkeys(out))  # one edge per line and target, however many names it imports


def upward(found: list[Edge], layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    """The edges that point to a later layer (or that no layer can place), as readable lines."""
    out = []
    for e in found:
        src, dst = layer_of(e.source, layers), layer_of(e.target, layers)
        if src is None or dst is None or dst > src:
            where = f"{layers[dst].name}" if dst is not None else "no layer"
            out.append(f"{e.source or WING} ({layers[src].name if src is not None else 'no layer'}) imports "
                       f"{e.target} ({where}) [{e.kind}, line {e.line}]")
    return out


def unplaced(root: Path = ROOT, layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    """Modules of the wing no layer places."""
    return sorted(m or WING for m in layermap.unplaced(modules(root), layermap.entries(layers)))


def stale(root: Path = ROOT, layers: tuple[Layer, ...] = LAYERS) -> list[str]:
    """Layer entries (and :data:`COMPUTED` entries) that match no module of the wing."""
    found = set(modules(root))
    out = [f"{layer.name}: {entry or WING}" for layer in layers for entry in layermap.stale(found, layer.modules)]
    return out + [f"COMPUTED: {m}" for m in COMPUTED if m not in found]


def markdown(layers: tuple[Layer, ...] = LAYERS) -> str:
    """README.md's table of the wing's layers."""
    lines = ["| layer | modules of `dgcompat_conformance` | what |", "|---|---|---|"]
    for layer in layers:
        names = ", ".join(f"`{m[:-2]}/`" if m.endswith(".*") else f"`{m or '__init__'}`" for m in layer.modules)
        lines.append(f"| {cell(layer.name, 'layer')} | {cell(names, 'modules')} | {cell(layer.what, 'what')} |")
    return "\n".join(lines)
