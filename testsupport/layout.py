"""The import scanner: the two wings at a glance, lines, modules, import floors and the runtime's layer graph
(``python -m testsupport.layout``).

Tests and docs read it (``tests/test_layers.py`` with the layer map of :mod:`testsupport.layers`,
``tests/test_wings.py``); nothing installed does, so it lives in the checkout's test support, not in the wheel.

An import floor is the length of the longest chain of intra-project imports ``a -> b -> c`` a
module's top-level code sets off (counted in modules, the first one included). Modules that import
each other (a cycle) count as one floor and are listed. Everything is read from the source with
:mod:`ast`; of the runtime only its tooling interface is imported (for the name table).

The layers count **every** import form (:func:`import_edges`): top-level, inside functions, string
imports (``importlib.import_module("dgcompat.x")``) and the computed imports of the modules that
declare the table they import from (:func:`runtime_tables`). The runtime's layer graph must have no
cycle, and its depth (the longest chain) is printed.
"""

from __future__ import annotations

import ast
import functools
import sys
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["Wing", "Edge", "wings", "module_imports", "import_edges", "read_wing", "runtime_layers", "runtime_tables",
           "parsed", "NOT_IMPORTED", "LAZY_DEPENDENCIES", "ROOT", "render"]

#: The checkout (this package's parent folder): the runtime is ``ROOT/dgcompat``, the certification wing
#: ``ROOT/conformance/dgcompat_conformance``.
ROOT = Path(__file__).resolve().parent.parent

#: Runtime modules that are executed, never imported: the command launcher (``python -m dgcompat``) and the
#: start-up hook (run by ``site`` as ``sitecustomize``). They are not nodes of the import graph.
NOT_IMPORTED = ("dgcompat.__main__", "dgcompat._install._startup.sitecustomize")


@dataclass
class Wing:
    """One wing: its modules, their top-level imports of project modules, and the numbers."""

    name: str
    root: Path
    modules: dict[str, Path] = field(default_factory=dict)
    imports: dict[str, set[str]] = field(default_factory=dict)
    lines: int = 0

    def floor(self, project: dict[str, set[str]]) -> tuple[int, list[str]]:
        """(floors, the longest chain) over ``project``'s import graph, starting in this wing."""
        comp = _components(project)
        best: dict[int, tuple[int, list[str]]] = {}

        def longest(c: int) -> tuple[int, list[str]]:
            if c in best:
                return best[c]
            best[c] = (1, [])  # guards a re-entry; components form a DAG, so it is never read
            members = sorted(m for m, k in comp.items() if k == c)
            nxt = {comp[t] for m in members for t in project.get(m, ()) if t in comp and comp[t] != c}
            tail = max((longest(n) for n in nxt), key=lambda x: x[0], default=(0, []))
            label = members[0] if len(members) == 1 else "{" + ", ".join(members) + "}"
            best[c] = (tail[0] + 1, [label, *tail[1]])
            return best[c]

        starts = {comp[m] for m in self.modules}
        return max((longest(c) for c in starts), key=lambda x: x[0], default=(0, []))

    def cycles(self) -> list[list[str]]:
        """Groups of this wing's modules that import each other at import time."""
        comp = _components(self.imports)
        groups: dict[int, list[str]] = {}
        for m, c in comp.items():
            if m in self.modules:
                groups.setdefault(c, []).append(m)
        return sorted(sorted(g) for g in groups.values() if len(g) > 1)


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _top_level(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports that run when the module is imported (not inside functions, not under TYPE_CHECKING)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                found.append(node)
            elif isinstance(node, ast.If):
                test = node.test
                if not (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING"):
                    walk(node.body)
                walk(node.orelse)
            elif isinstance(node, (ast.Try, ast.With)):
                walk(node.body)
                for handler in getattr(node, "handlers", []):
                    walk(handler.body)

    walk(tree.body)
    return found


@functools.lru_cache(maxsize=1024)
def _parsed_at(path: Path, mtime_ns: int, size: int) -> ast.Module:
    return ast.parse(path.read_text("utf-8"), str(path))


def parsed(path: Path) -> ast.Module:
    """The syntax tree of ``path``, parsed once per version of the file (the checks walk every module many times)."""
    st = path.stat()
    return _parsed_at(path, st.st_mtime_ns, st.st_size)


def module_imports(path: Path, name: str, known: set[str], *, top_level_only: bool = True) -> set[str]:
    """The project modules (of ``known``) that module ``name`` at ``path`` imports."""
    tree = parsed(path)
    nodes = _top_level(tree) if top_level_only else [n for n in ast.walk(tree)
                                                       if isinstance(n, (ast.Import, ast.ImportFrom))]
    is_pkg = path.name == "__init__.py"
    return {t for node in nodes for t in _targets(node, name, is_pkg, known) if t != name}


@dataclass(frozen=True)
class Edge:
    """One import of a project module: ``target`` at ``line``, of kind ``top``, ``function`` (inside a function),
    ``string`` (``import_module("literal")``) or ``computed`` (a name looked up in a declared table)."""

    target: str
    kind: str
    line: int


#: Optional dependencies a runtime function may import lazily (the runtime imports none of them at import time).
LAZY_DEPENDENCIES = frozenset({"torch", "pynvml", "deep_gemm", "tvm_ffi"})


@functools.lru_cache(maxsize=1)
def runtime_tables() -> dict[str, tuple[str, ...]]:
    """The runtime modules whose ``import_module`` takes a computed name -> the runtime modules it may load
    (read from the runtime's name table, through its tooling interface)."""
    from dgcompat import _tooling as surface

    deep_gemm = tuple(f"dgcompat.{m}" for m in surface.DEEP_GEMM_MODULES)
    return {
        # The facade's lazy attributes: every module of the name table and the public submodules.
        "dgcompat": tuple(dict.fromkeys(f"dgcompat.{m}" for m in (*surface.NAMES.values(), *surface.SUBMODULES,
                                                                  "_install.forward"))),
        "dgcompat._install": (*deep_gemm, "dgcompat.utils"),  # the names it serves as deep_gemm's
        "dgcompat._install.resolve": deep_gemm,  # resolve(): the deep_gemm names only
        "dgcompat._tooling": tuple(f"dgcompat.{m}" for m in surface.ADAPTERS),  # all_calls()
        "dgcompat._backend": (),  # deep_gemm's own modules by name (the real package, a vendored copy), no dgcompat one
    }


def _resolve(name: str, known: AbstractSet[str]) -> str | None:
    while name and name not in known:
        name = name.rpartition(".")[0]
    return name or None


def import_edges(path: Path, name: str, known: set[str],
                 tables: Mapping[str, tuple[str, ...]] | None = None) -> list[Edge]:
    """Every import of a project module (of ``known``) that module ``name`` at ``path`` makes, in any form.

    ``tables``: module -> what its computed imports may load (default: :func:`runtime_tables`); a computed
    import in a module that declares no table is the edge ``<undeclared computed import>``. Found once per
    version of the file and question (the checks ask about every module many times).
    """
    table = (runtime_tables() if tables is None else tables).get(name)
    st = path.stat()
    return list(_edges_at(path, st.st_mtime_ns, st.st_size, name, frozenset(known), table))


@functools.lru_cache(maxsize=4096)
def _edges_at(path: Path, mtime_ns: int, size: int, name: str, known: frozenset[str],
              table: tuple[str, ...] | None) -> tuple[Edge, ...]:
    """:func:`import_edges` of one version of a file; ``table``: what its computed imports may load (None: none
    declared)."""
    tree = parsed(path)
    top = {id(n) for n in _top_level(tree)}
    is_pkg = path.name == "__init__.py"
    edges: list[Edge] = []

    def add(target: str | None, kind: str, line: int) -> None:
        if target and target != name:
            edges.append(Edge(target, kind, line))

    in_function: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            in_function.update(id(n) for n in ast.walk(fn))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if id(node) not in top and id(node) not in in_function:
                continue  # under TYPE_CHECKING
            kind = "top" if id(node) in top else "function"
            for target in _targets(node, name, is_pkg, known):
                add(target, kind, node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name)):
            func = node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id
            if func not in ("import_module", "__import__") or not node.args:
                continue
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                add(_resolve(arg.value, known), "string", node.lineno)
            elif table is not None:
                for target in table:
                    add(_resolve(target, known), "computed", node.lineno)
            elif name.split(".", maxsplit=1)[0] in {k.split(".")[0] for k in known}:
                # A computed name in a module that declares no table: unknown, reported as such.
                edges.append(Edge("<undeclared computed import>", "computed", node.lineno))
    return tuple(edges)


def _targets(node: ast.Import | ast.ImportFrom, name: str, is_pkg: bool, known: AbstractSet[str]) -> list[str]:
    if isinstance(node, ast.Import):
        return [t for t in (_resolve(a.name, known) for a in node.names) if t]
    if node.level:
        base_parts = name.split(".")
        drop = node.level - (1 if is_pkg else 0)
        base_parts = base_parts[: len(base_parts) - drop] if drop else base_parts
        base = ".".join(base_parts + ([node.module] if node.module else []))
    else:
        base = node.module or ""
    out = []
    for a in node.names:
        full = f"{base}.{a.name}"
        target = _resolve(full if full in known else base, known)
        if target:
            out.append(target)
    return out


def runtime_layers(runtime: Wing, tables: Mapping[str, tuple[str, ...]] | None = None,
                   ) -> tuple[dict[str, list[Edge]], list[list[str]], int, list[str]]:
    """The runtime's graph counting every import form: (edges per module, cycles, depth, the longest chain).

    The modules of :data:`NOT_IMPORTED` are not nodes of the graph.
    """
    known = set(runtime.modules)
    graph: dict[str, list[Edge]] = {}
    for module, path in runtime.modules.items():
        if module in NOT_IMPORTED:
            continue
        graph[module] = [e for e in import_edges(path, module, known, tables) if e.target in known]
    simple = {m: {e.target for e in es} for m, es in graph.items()}
    comp = _components(simple)
    groups: dict[int, list[str]] = {}
    for m, c in comp.items():
        groups.setdefault(c, []).append(m)
    cycles = sorted(sorted(g) for g in groups.values() if len(g) > 1)
    sub = Wing("layers", runtime.root, {m: p for m, p in runtime.modules.items() if m in graph}, simple)
    depth, chain = sub.floor(simple)
    return graph, cycles, depth, chain


def read_wing(name: str, root: Path, package: str) -> Wing:
    """Every module of ``package`` (its folder is ``root / package``)."""
    wing = Wing(name, root / package)
    for path in sorted((root / package).rglob("*.py")):
        wing.modules[_module_name(root, path)] = path
        wing.lines += len(path.read_text("utf-8").splitlines())
    return wing


def wings(root: Path = ROOT) -> tuple[Wing, Wing]:
    """(the runtime ``dgcompat``, the certification wing ``dgcompat_conformance``) of the checkout ``root``, their
    imports resolved."""
    runtime = read_wing("runtime", root, "dgcompat")
    tooling = read_wing("certification", root / "conformance", "dgcompat_conformance")
    known = set(runtime.modules) | set(tooling.modules)
    for wing in (runtime, tooling):
        wing.imports = {m: module_imports(p, m, known) for m, p in wing.modules.items()}
    return runtime, tooling


def _components(graph: dict[str, set[str]]) -> dict[str, int]:
    """Strongly connected components (Tarjan), module -> component number."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    comp: dict[str, int] = {}
    counter = [0, 0]
    nodes = set(graph) | {t for ts in graph.values() for t in ts}
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10 * len(nodes) + 100))

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            while True:
                w = stack.pop()
                on.discard(w)
                comp[w] = counter[1]
                if w == v:
                    break
            counter[1] += 1

    for v in sorted(nodes):
        if v not in index:
            visit(v)
    return comp


def render() -> str:
    """The numbers, as text."""
    runtime, tooling = wings()
    project = {**runtime.imports, **tooling.imports}
    lines = []
    for wing in (runtime, tooling):
        floors, chain = wing.floor(project)
        own, own_chain = wing.floor({m: {t for t in ts if t in wing.modules} for m, ts in wing.imports.items()})
        lines.append(f"{wing.name} wing ({wing.root.name}): {len(wing.modules)} modules, {wing.lines} lines")
        lines.append(f"  import floors, within the wing: {own}: {' -> '.join(own_chain)}")
        lines.append(f"  import floors, whole project:   {floors}: {' -> '.join(chain)}")
        cycles = wing.cycles()
        lines.append("  import cycles: " + ("; ".join(" <-> ".join(c) for c in cycles) if cycles else "none"))
    back = sorted({f"{m} -> {t}" for m, ts in runtime.imports.items() for t in ts if t in tooling.modules})
    lines.append("runtime -> certification imports: " + (", ".join(back) if back else "none"))
    _graph, cycles, depth, chain = runtime_layers(runtime)
    lines.append(f"runtime layers, every import form counted: depth {depth}: {' -> '.join(chain)}")
    lines.append("  cycles: " + ("; ".join(" <-> ".join(c) for c in cycles) if cycles else "none"))
    return "\n".join(lines)


if __name__ == "__main__":
    print(render())
