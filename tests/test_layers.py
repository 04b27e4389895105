"""The runtime in layers: counting every import form, no module imports one that imports it back.

Every import counts: top-level ones, those inside functions, string imports
(``importlib.import_module("dgcompat.x")``) and the computed imports of the few modules that
declare the table they import from (``dgcompat_conformance.layout.COMPUTED``: the facade's lazy
names, the install, ``resolve``, the tooling interface). A function-level import is allowed only for
an optional dependency that must stay lazy (torch, pynvml, deep_gemm, tvm_ffi); the one lazy import
of a project module is the reference backend, loaded by ``dgcompat._backend`` only when chosen.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from dgcompat_conformance import layout

ROOT = Path(__file__).resolve().parent.parent
#: The only string import of a project module (the backend, loaded when DGCOMPAT_BACKEND=reference).
BACKEND_IMPORT = ("dgcompat._backend", "dgcompat.reference.backend")


def _runtime() -> layout.Wing:
    runtime, _ = layout.wings()
    return runtime


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
        if module in ("dgcompat.__main__", "dgcompat._install._startup.sitecustomize"):
            continue
        tree = ast.parse(path.read_text("utf-8"))
        for fn in ast.walk(tree):
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
