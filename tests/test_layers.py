"""The runtime in layers: every module has a layer, no import points up a layer, no module imports one that
imports it back; warmup sits beside the facade.

Every import counts: top-level ones, those inside functions, string imports
(``importlib.import_module("dgcompat.x")``) and the computed imports of the few modules that
declare the table they import from (:func:`testsupport.layout.runtime_tables`: the facade's lazy
names, the install, ``resolve``, the tooling interface). The layer of every module is the one map
:data:`testsupport.layers.MODULES`; the README's layer table is generated from it. A function-level
import is allowed only for an optional dependency that must stay lazy (torch, pynvml, deep_gemm,
tvm_ffi); the one lazy import of a project module is the reference backend, loaded by
``dgcompat._backend`` only when chosen.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from testsupport import layermap, layers, layout

#: The only string import of a project module (the backend, loaded when DGCOMPAT_BACKEND=reference).
BACKEND_IMPORT = ("dgcompat._backend", "dgcompat.reference.backend")
WARMUP = "dgcompat.jit_warmup"


@functools.lru_cache(maxsize=1)
def _runtime() -> layout.Wing:
    """The runtime's modules, read once for this module's tests (the files do not change under them)."""
    return layout.read_wing("runtime", layout.ROOT, "dgcompat")


def test_no_import_cycle_counting_every_form(capsys: pytest.CaptureFixture[str]) -> None:
    graph, cycles, depth, chain = layout.runtime_layers(_runtime())
    assert cycles == [], f"import cycles: {cycles}"
    assert len(graph) > 40
    with capsys.disabled():
        print(f"\nruntime layer depth {depth}: {' -> '.join(chain)}")


def test_function_level_imports_are_only_lazy_dependencies() -> None:
    runtime = _runtime()
    offenders = []
    for module, path in runtime.modules.items():
        if module in layout.NOT_IMPORTED:
            continue
        for fn in ast.walk(layout.parsed(path)):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    names = ["." * node.level + (node.module or "")]
                else:
                    continue
                lazy = [n for n in names if n.split(".")[0] in layout.LAZY_DEPENDENCIES]
                if lazy != names:
                    offenders.append(f"{module}:{node.lineno} imports {names} inside {fn.name}()")
    assert offenders == []


def test_string_and_computed_imports_are_declared() -> None:
    runtime = _runtime()
    known = set(runtime.modules)
    offenders = []
    for module, path in runtime.modules.items():
        for edge in layout.import_edges(path, module, known):
            if edge.kind == "string" and (module, edge.target) != BACKEND_IMPORT:
                offenders.append(f"{module}:{edge.line} imports {edge.target} by name")
            if edge.kind == "computed" and edge.target == "<undeclared computed import>":
                offenders.append(f"{module}:{edge.line} imports a computed name without a declared table")
    assert offenders == []


def test_the_checks_see_what_they_look_for(tmp_path: Path) -> None:
    """Control: a planted function-level import closing a cycle and an undeclared computed import are found."""
    pkg = tmp_path / "dgcompat"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from . import b\n")
    (pkg / "b.py").write_text("import importlib\ndef f(n):\n    from . import a\n    importlib.import_module(n)\n"
                              "    importlib.import_module('dgcompat.c')\n")
    (pkg / "c.py").write_text("")
    wing = layout.read_wing("probe", tmp_path, "dgcompat")
    known = set(wing.modules)
    edges = layout.import_edges(pkg / "b.py", "dgcompat.b", known)
    assert {(e.target, e.kind) for e in edges} == {("dgcompat.a", "function"), ("dgcompat.c", "string"),
                                                  ("<undeclared computed import>", "computed")}
    _, cycles, _, _ = layout.runtime_layers(wing)
    assert cycles == [["dgcompat.a", "dgcompat.b"]]


# --- the layers -------------------------------------------------------------------------------------------------


def test_every_runtime_module_has_a_layer() -> None:
    runtime = _runtime()
    assert layers.unmapped(runtime.modules) == [], "add these modules to testsupport/layers.py MODULES"
    assert layers.stale(runtime.modules) == [], "these entries of testsupport/layers.py MODULES name no module"
    assert len(runtime.modules) > 70


def test_no_import_points_up_a_layer() -> None:
    upward = layers.upward_edges(_runtime().modules)
    assert [str(u) for u in upward] == []


def test_the_layer_check_catches_an_upward_edge_of_every_form(tmp_path: Path) -> None:
    """Control: a synthetic tree with one upward import of each form (top-level, inside a function, a string and a
    computed import), a downward and a same-layer import, a type-only import, a module the map misses and an entry
    naming no module; the check the runtime passes finds exactly the planted faults."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    files = {
        "__init__.py": "",
        "base.py": "",
        "high.py": "from . import base\n",                                    # downward: allowed
        "low_top.py": "from . import base, high\n",                           # top-level, upward
        "low_function.py": "def f():\n    from .high import thing\n    return thing\n",  # inside a function
        "low_string.py": "import importlib\n\n\ndef f():\n    return importlib.import_module('pkg.high')\n",
        "low_computed.py": "import importlib\n\n\ndef f(name):\n    return importlib.import_module(f'pkg.{name}')\n",
        "low_clean.py": ("from typing import TYPE_CHECKING\n\nfrom . import base\n\nif TYPE_CHECKING:\n"
                         "    from . import high\n"),                       # same layer; a type-only import
        "unplaced.py": "",
    }
    for name, text in files.items():
        (pkg / name).write_text(text)
    wing = layout.read_wing("probe", tmp_path, "pkg")
    layer_of = {"pkg": 1, "pkg.base": 0, "pkg.high": 1, "pkg.low_top": 0, "pkg.low_function": 0,
                "pkg.low_string": 0, "pkg.low_computed": 0, "pkg.low_clean": 0, "pkg.gone": 0}
    tables = {"pkg.low_computed": ("pkg.high",)}  # what its computed import may load, as the runtime declares its own
    upward = layers.upward_edges(wing.modules, layer_of, tables)
    assert sorted((u.module, u.target, u.kind) for u in upward) == [
        ("pkg.low_computed", "pkg.high", "computed"), ("pkg.low_function", "pkg.high", "function"),
        ("pkg.low_string", "pkg.high", "string"), ("pkg.low_top", "pkg.high", "top")]
    assert all(u.module_layer == 0 and u.target_layer == 1 and u.line > 0 for u in upward)
    assert layers.unmapped(wing.modules, layer_of) == ["pkg.unplaced"]
    assert layers.stale(wing.modules, layer_of) == ["pkg.gone"]


def test_a_package_entry_places_its_modules_unless_one_has_its_own() -> None:
    """The placement both maps use: a module's own entry first, else the innermost ``pkg.*`` over it; a ``pkg.*``
    that covers no module is stale, as is a named module that is gone."""
    entries = {"pkg.*": 1, "pkg.sub.*": 2, "pkg.sub.low": 0, "pkg.gone": 0, "other.*": 3}
    found = ["pkg", "pkg.a", "pkg.sub", "pkg.sub.b", "pkg.sub.low", "pkgx", "lone"]
    assert [layermap.place(m, entries) for m in found] == [1, 1, 2, 2, 0, None, None]
    assert layermap.unplaced(found, entries) == ["lone", "pkgx"]
    assert layermap.stale(found, entries) == ["pkg.gone", "other.*"]


def test_the_readme_layer_table_is_generated_from_the_map() -> None:
    assert layers.readme_table() == layers.render_table(), "run: python -m testsupport.layers --write"
    rows = layers.render_table().splitlines()[2:]
    assert [row.split(" | ")[0].lstrip("| ") for row in rows] == [layer.name for layer in reversed(layers.LAYERS)]


def test_the_table_names_each_package_once_and_every_other_module() -> None:
    """The rendering shows every module: a package all of whose modules share a layer as one entry, the rest one by
    one (so the README cannot leave a module out)."""
    table = layers.render_table()
    for module in layers.MODULES:
        short = "__init__" if module == "dgcompat" else module.removeprefix("dgcompat.")
        package = short.split(".")[0]
        assert f"`{short}`" in table or f"`{package}/`" in table, module


# --- warmup beside the facade ---------------------------------------------------------------------------------


def _private_runtime_names(path: Path, module: str, known: set[str], own: str) -> list[str]:
    """The private runtime names module ``module`` (at ``path``, of the package ``own``) uses outside ``own``: a
    private module (``dgcompat._x``, ``dgcompat.pkg._y``) in any import form, a private name imported from a runtime
    module, or a private attribute of an imported runtime module."""
    def private(dotted: str) -> bool:
        return any(p.startswith("_") and not p.startswith("__") for p in dotted.split(".")[1:])

    found = [f"{module}:{e.line} imports {e.target} ({e.kind})" for e in layout.import_edges(path, module, known)
             if not (e.target == own or e.target.startswith(own + ".")) and private(e.target)]
    tree = ast.parse(path.read_text("utf-8"))
    is_pkg = path.name == "__init__.py"
    bound: dict[str, str] = {}  # local name -> the runtime module it stands for
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            parts = module.split(".")
            drop = node.level - (1 if is_pkg else 0) if node.level else 0
            base = ".".join((parts[:len(parts) - drop] if drop else parts) if node.level else [])
            source = ".".join(p for p in (base, node.module or "") if p) if node.level else (node.module or "")
            if source not in known or source == own or source.startswith(own + "."):
                continue
            for alias in node.names:
                full = f"{source}.{alias.name}"
                if full in known:
                    bound[alias.asname or alias.name] = full
                elif alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{module}:{node.lineno} imports {alias.name} from {source}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in known and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound
                and node.attr.startswith("_") and not node.attr.startswith("__")):
            found.append(f"{module}:{node.lineno} uses {bound[node.value.id]}.{node.attr}")
    return found


def test_warmup_uses_only_public_runtime_names() -> None:
    runtime = _runtime()
    known = set(runtime.modules)
    warmup = {m: p for m, p in runtime.modules.items() if m == WARMUP or m.startswith(WARMUP + ".")}
    assert len(warmup) > 15
    offenders = [line for m, p in sorted(warmup.items()) for line in _private_runtime_names(p, m, known, WARMUP)]
    assert offenders == []


def test_the_public_name_check_sees_private_names(tmp_path: Path) -> None:
    """Control: each way a warmup module could reach a private runtime name is found; public names are not."""
    pkg = tmp_path / "dgcompat"
    (pkg / "jit_warmup").mkdir(parents=True)
    for name in ("__init__.py", "_backend.py", "detection.py", "errors.py", "jit_warmup/__init__.py"):
        (pkg / name).write_text("")
    probe = pkg / "jit_warmup" / "probe.py"
    probe.write_text("import importlib\nfrom .. import _backend\nfrom ..detection import _expected, release\n"
                     "from .. import detection, __version__\nfrom ..errors import BadArgumentError\n"
                     "detection._cache.clear()\ndetection.release()\n"
                     "def f():\n    return importlib.import_module('dgcompat._backend')\n")
    wing = layout.read_wing("probe", tmp_path, "dgcompat")
    found = _private_runtime_names(probe, "dgcompat.jit_warmup.probe", set(wing.modules), WARMUP)
    assert sorted(found) == sorted([
        "dgcompat.jit_warmup.probe:2 imports dgcompat._backend (top)",
        "dgcompat.jit_warmup.probe:9 imports dgcompat._backend (string)",
        "dgcompat.jit_warmup.probe:3 imports _expected from dgcompat.detection",
        "dgcompat.jit_warmup.probe:6 uses dgcompat.detection._cache"])


def test_the_facade_never_imports_warmup() -> None:
    """No runtime module outside the warmup package imports it, in any form (type-only imports included), and the
    facade's name tables hold no warmup name: ``import dgcompat`` never loads warmup, ``dgcompat.<name>`` never
    serves it."""
    from dgcompat import _tooling, jit_warmup

    runtime = _runtime()
    known = set(runtime.modules)
    offenders = []
    for module, path in sorted(runtime.modules.items()):
        if module == WARMUP or module.startswith(WARMUP + "."):
            continue
        targets = {e.target for e in layout.import_edges(path, module, known)}
        targets |= layout.module_imports(path, module, known, top_level_only=False)  # TYPE_CHECKING blocks too
        offenders += [f"{module} imports {t}" for t in sorted(targets) if t == WARMUP or t.startswith(WARMUP + ".")]
    assert offenders == []
    assert set(jit_warmup.__all__).isdisjoint(_tooling.NAMES) and "jit_warmup" not in _tooling.SUBMODULES


def test_the_facade_says_where_warmup_lives() -> None:
    """The names warmup had in the facade are an AttributeError that names their package, never passed through to
    deep_gemm; every one of them is warmup's own."""
    import dgcompat
    from dgcompat import _surface, jit_warmup

    moved = sorted(set(_surface.MOVED) - {"jit_warmup"})
    assert len(moved) == 12 and set(moved) <= set(jit_warmup.__all__)
    for name in moved:
        with pytest.raises(AttributeError, match=f"from dgcompat.jit_warmup import {name}"):
            getattr(dgcompat, name)
        assert not hasattr(dgcompat, name) and name not in dir(dgcompat)
