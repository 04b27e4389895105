"""What ``deep_gemm.<name>`` is bound to after ``import deep_gemm``, found without importing it.

The package's Python files are parsed with :mod:`ast` and their module-level statements are
evaluated symbolically, in order, with Python's import semantics:

* ``import`` / ``from . import x`` / ``from .x import y`` / ``from .x import *`` (``__all__`` or
  every public name), with a package module executed once, its parent first, and bound as an
  attribute of its parent package once it has run (so ``from .dist import f`` also binds
  ``dist``);
* assignments and aliases (``fp8_gemm_nt = fp8_fp4_gemm_nt``), ``del``, late rebinding (a final
  ``from .utils import *`` replaces earlier bindings), ``for``/``with`` targets;
* ``if`` with a statically known test (``TYPE_CHECKING``, ``__debug__``, constants); otherwise
  both branches are taken and what they bind is marked conditional;
* ``try``/``except``: a simulated exception is raised where the real import would raise --
  reading a ``_C.<op>`` the native library lacks (``AttributeError``), importing a package
  module that does not exist (``ModuleNotFoundError``) or a native library that is not a
  Python extension (``ImportError``) -- and handled by the first matching ``except`` clause.

Third-party modules (``torch``, ``tvm_ffi``, ...) are assumed importable and never looked into.
The native module is recognised as a module-level name ``_C``, ``torch.ops.deep_gemm``, a
function that returns ``_C``, or an op factory (a function that does
``getattr(torch.ops.deep_gemm, <its parameter>)``, called with a constant op name).

Function bodies are not executed; they are only read for their parameters, the ``_C.<op>(...)``
calls they make (with the argument expressions, in order) and what they return.
"""

from __future__ import annotations

import ast
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from dgcompat._tooling import own_nodes, source_registrations

__all__ = [
    "PythonSurface",
    "read_python_surface",
    "SYMBOL_KINDS",
    "PARAM_KINDS",
    "DEFAULT_MODULES",
]

#: Kinds of :func:`read_python_surface` records.
SYMBOL_KINDS: Mapping[str, str] = {
    "function": "a Python function defined under this name",
    "alias": "a Python function defined under another name (``alias_of``)",
    "native": "the native op object itself (``op``), possibly through a wrapper factory (``via``)",
    "class": "a class (``__init__`` parameters and public methods)",
    "module": "a submodule of the package",
    "none": "bound to ``None``",
    "value": "any other value (``value`` holds the source text; ``const`` tells a literal)",
}

#: Kinds of function parameters, as in :class:`inspect.Parameter`.
PARAM_KINDS = ("positional_only", "positional", "var_positional", "keyword_only", "var_keyword")

#: The modules whose public names are reported.
DEFAULT_MODULES = ("deep_gemm", "deep_gemm.utils.layout")

JSON = str | int | float | bool | None | list[Any] | dict[str, Any]


# ---------------------------------------------------------------------------------------------
# Symbolic values
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class _External:
    """An object from outside the package (``torch``, ``typing.Optional``, ...)."""

    path: str


@dataclass(frozen=True, eq=False)
class _ModuleRef:
    name: str


@dataclass(frozen=True, eq=False)
class _Function:
    module: str
    node: ast.FunctionDef | ast.AsyncFunctionDef
    guard: str | None

    @property
    def qualname(self) -> str:
        return f"{self.module}.{self.node.name}"


@dataclass(frozen=True, eq=False)
class _Class:
    module: str
    node: ast.ClassDef
    guard: str | None


@dataclass(frozen=True, eq=False)
class _NativeModule:
    pass


@dataclass(frozen=True, eq=False)
class _Native:
    op: str
    via: str | None = None


@dataclass(frozen=True, eq=False)
class _Const:
    text: str
    value: object = None


@dataclass(frozen=True, eq=False)
class _Expr:
    text: str


_Value = _External | _ModuleRef | _Function | _Class | _NativeModule | _Native | _Const | _Expr


class _SimRaise(Exception):
    """A simulated exception the real import would raise."""

    def __init__(self, exc_type: str, detail: str) -> None:
        super().__init__(f"{exc_type}: {detail}")
        self.exc_type = exc_type
        self.detail = detail


# Which ``except`` clauses catch which simulated exception.
_EXC_MRO: Mapping[str, tuple[str, ...]] = {
    "AttributeError": ("AttributeError", "Exception", "BaseException"),
    "ImportError": ("ImportError", "Exception", "BaseException"),
    "ModuleNotFoundError": ("ModuleNotFoundError", "ImportError", "Exception", "BaseException"),
    "SyntaxError": ("SyntaxError", "Exception", "BaseException"),
    "Exception": ("Exception", "BaseException"),
}


@dataclass
class _Module:
    name: str
    is_package: bool
    ns: dict[str, _Value] = field(default_factory=dict)


@dataclass(frozen=True)
class PythonSurface:
    """Result of :func:`read_python_surface`."""

    symbols: Mapping[str, dict[str, JSON]]
    """Qualified name (``deep_gemm.fp8_gemm_nt``) -> record, sorted by name."""
    import_errors: tuple[str, ...]
    """Simulated exceptions that aborted a module (``"deep_gemm.legacy: ImportError: ..."``)."""
    native_reads: tuple[str, ...]
    """Every ``_C.<op>`` read at import time (module level), sorted."""
    version: str | None = None
    """The package's literal ``__version__`` (upstream DeepGEMM's release, ``"2.8.1"``), None when it has none."""


# ---------------------------------------------------------------------------------------------
# The evaluator
# ---------------------------------------------------------------------------------------------


def _unparse(node: ast.AST) -> str:
    return ast.unparse(node)


def _is_torch_ops_ns(node: ast.AST) -> bool:
    """``torch.ops.deep_gemm``."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "deep_gemm"
        and isinstance(node.value, ast.Attribute)
        and node.value.attr == "ops"
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id == "torch"
    )


def _walk_in_order(node: ast.AST) -> Iterator[ast.AST]:
    """Like :func:`ast.walk`, but depth-first in source order."""
    yield node
    for child in ast.iter_child_nodes(node):
        yield from _walk_in_order(child)


class _Evaluator:
    def __init__(
        self,
        sources: Mapping[str, str],
        native_ops: Collection[str] | None,
        extension_modules: Mapping[str, bool],
        root: str,
    ) -> None:
        self.root = root
        self.files: dict[str, tuple[str, bool]] = {}
        for path, text in sources.items():
            parts = path.replace("\\", "/").split("/")
            if not parts[-1].endswith(".py"):
                continue
            if parts[-1] == "__init__.py":
                self.files[".".join(parts[:-1])] = (text, True)
            else:
                self.files[".".join(parts[:-1] + [parts[-1][:-3]])] = (text, False)
        self.native_ops = set(native_ops) if native_ops else None
        self.extensions = dict(extension_modules)
        self.modules: dict[str, _Module] = {}
        self.import_errors: list[str] = []
        self.native_reads: set[str] = set()
        self.trees: dict[str, ast.Module] = {}
        self.made: set[str] = set()  # modules the package builds with types.ModuleType(...)

    # -- modules ---------------------------------------------------------------------------
    def own(self, name: str) -> bool:
        return name == self.root or name.startswith(self.root + ".")

    def import_module(self, name: str) -> _Module:
        existing = self.modules.get(name)
        if existing is not None:
            return existing  # finished, or still running (a cycle sees the partial namespace)
        if name not in self.files:
            if name in self.extensions:
                if self.extensions[name]:
                    # An importable extension (exports PyInit_<name>): a module we cannot look into.
                    mod = _Module(name, False)
                    self.modules[name] = mod
                    self._bind_in_parent(name)
                    return mod
                raise _SimRaise("ImportError", f"{name} is a native library without PyInit, not a Python module")
            raise _SimRaise("ModuleNotFoundError", f"No module named {name!r}")
        parent = name.rpartition(".")[0]
        if parent:
            self.import_module(parent)
            if name in self.modules:
                return self.modules[name]
        text, is_package = self.files[name]
        mod = _Module(name, is_package)
        self.modules[name] = mod
        try:
            tree = self.trees.get(name)
            if tree is None:
                try:
                    tree = ast.parse(text, filename=name.replace(".", "/") + ".py")
                except SyntaxError as exc:
                    raise _SimRaise("SyntaxError", f"{name}: {exc.msg} (line {exc.lineno})") from None
                self.trees[name] = tree
            self.exec_block(tree.body, mod, None)
        except _SimRaise as exc:
            del self.modules[name]
            self.import_errors.append(f"{name}: {exc.exc_type}: {exc.detail}")
            raise
        self._bind_in_parent(name)
        return mod

    def _bind_in_parent(self, name: str) -> None:
        parent, _, child = name.rpartition(".")
        if parent and parent in self.modules:
            self.modules[parent].ns[child] = _ModuleRef(name)

    def resolve(self, mod: _Module, level: int, module: str | None) -> str:
        if level == 0:
            return module or ""
        pkg = mod.name if mod.is_package else mod.name.rpartition(".")[0]
        for _ in range(level - 1):
            pkg = pkg.rpartition(".")[0]
        return f"{pkg}.{module}" if module else pkg

    # -- statements ------------------------------------------------------------------------
    def exec_block(self, stmts: list[ast.stmt], mod: _Module, guard: str | None) -> None:
        for st in stmts:
            self.exec_stmt(st, mod, guard)

    def exec_stmt(self, st: ast.stmt, mod: _Module, guard: str | None) -> None:
        ns = mod.ns
        if isinstance(st, ast.Import):
            for alias in st.names:
                if self.own(alias.name):
                    self.import_module(alias.name)
                    if alias.asname:
                        ns[alias.asname] = _ModuleRef(alias.name)
                    else:
                        ns[alias.name.split(".")[0]] = _ModuleRef(alias.name.split(".")[0])
                elif alias.asname:
                    ns[alias.asname] = _External(alias.name)
                else:
                    ns[alias.name.split(".")[0]] = _External(alias.name.split(".")[0])
        elif isinstance(st, ast.ImportFrom):
            self.exec_import_from(st, mod)
        elif isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in st.decorator_list:
                self.eval(deco, mod)
            ns[st.name] = _Function(mod.name, st, guard)
        elif isinstance(st, ast.ClassDef):
            ns[st.name] = _Class(mod.name, st, guard)
        elif isinstance(st, ast.Assign):
            value = self.eval(st.value, mod)
            for target in st.targets:
                self.bind(target, value, mod)
        elif isinstance(st, ast.AnnAssign):
            if st.value is not None:
                value = self.eval(st.value, mod)
                self.bind(st.target, value, mod)
        elif isinstance(st, ast.AugAssign):
            self.eval(st.value, mod)
            if isinstance(st.target, ast.Name):
                ns[st.target.id] = _Expr(_unparse(st))
        elif isinstance(st, ast.Delete):
            for target in st.targets:
                for name in self.target_names(target):
                    ns.pop(name, None)
        elif isinstance(st, ast.If):
            truth = self.static_truth(st.test, mod)
            if truth is True:
                self.exec_block(st.body, mod, guard)
            elif truth is False:
                self.exec_block(st.orelse, mod, guard)
            else:
                self.eval(st.test, mod)
                self.exec_branches(st, mod, guard)
        elif isinstance(st, ast.Try) or type(st).__name__ == "TryStar":
            self.exec_try(st, mod, guard)
        elif isinstance(st, (ast.For, ast.AsyncFor)):
            self.eval(st.iter, mod)
            self.bind(st.target, _Expr(_unparse(st.iter)), mod)
            loop_guard = f"for {_unparse(st.target)} in {_unparse(st.iter)}"
            self.exec_block(st.body, mod, guard or loop_guard)
            self.exec_block(st.orelse, mod, guard)
        elif isinstance(st, ast.While):
            self.exec_block(st.body, mod, guard or f"while {_unparse(st.test)}")
            self.exec_block(st.orelse, mod, guard)
        elif isinstance(st, (ast.With, ast.AsyncWith)):
            for item in st.items:
                self.eval(item.context_expr, mod)
                if item.optional_vars is not None:
                    self.bind(item.optional_vars, _Expr(_unparse(item.context_expr)), mod)
            self.exec_block(st.body, mod, guard)
        elif isinstance(st, ast.Expr):
            self.eval(st.value, mod)
            if isinstance(st.value, ast.Call):
                self.exec_registrations(st, mod, guard)
        elif isinstance(st, ast.Raise):
            exc_type = "Exception"
            if st.exc is not None:
                target = st.exc.func if isinstance(st.exc, ast.Call) else st.exc
                if isinstance(target, ast.Name) and target.id in _EXC_MRO:
                    exc_type = target.id
            raise _SimRaise(exc_type, _unparse(st))
        # pass, global, nonlocal, assert, return, match: nothing is bound at import time

    def exec_registrations(self, st: ast.Expr, mod: _Module, guard: str | None) -> None:
        """Bind what a module-level call registers through ``globals().update(...)`` (upstream 2.8.1's ``_C.py``:
        ``_register_deep_gemm_kernels()`` and ``_bind_guarded_ops('op', ...)``), as the import would."""
        functions = {name: v.node for name, v in mod.ns.items() if isinstance(v, _Function) and v.module == mod.name}
        regs = source_registrations([st], functions)
        if not regs:
            return
        tree = self.trees.get(mod.name)
        defs: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        nested: dict[str, ast.FunctionDef | ast.AsyncFunctionDef] = {}
        for top in tree.body if tree is not None else []:
            for node in ast.walk(top):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    (defs if node is top else nested)[node.name] = node
        for reg in regs:
            if reg.kind == "op":
                # Guarded binding (``_bind_guarded_ops``): an op the library lacks is left unbound, not raised.
                if self.native_ops is None or reg.target in self.native_ops:
                    mod.ns[reg.name] = self.read_native(reg.target)
                continue
            fn = nested.get(reg.target) or defs.get(reg.target)
            if fn is not None:
                mod.ns[reg.name] = _Function(mod.name, fn, guard)

    def exec_branches(self, st: ast.If, mod: _Module, guard: str | None) -> None:
        """An ``if`` whose test is unknown: take both branches, mark what they bind conditional."""
        before = dict(mod.ns)
        label = f"if {_unparse(st.test)}"
        results: list[dict[str, _Value]] = []
        for branch, branch_label in ((st.body, label), (st.orelse, f"not ({label})")):
            mod.ns = dict(before)
            try:
                self.exec_block(branch, mod, guard or branch_label)
                results.append(mod.ns)
            except _SimRaise:
                results.append(dict(before))  # a raising branch is treated as not taken
        merged = dict(before)
        for result in reversed(results):  # the ``if`` branch wins where both bind a name
            merged.update({name: value for name, value in result.items() if before.get(name) is not value})
            for name in set(before) - set(result):
                merged.pop(name, None)
        mod.ns = merged

    def exec_try(self, st: ast.stmt, mod: _Module, guard: str | None) -> None:
        assert isinstance(st, ast.Try) or type(st).__name__ == "TryStar"
        node = cast("ast.Try", st)  # a TryStar (3.11+) has the same fields
        body: list[ast.stmt] = node.body
        handlers: list[ast.ExceptHandler] = node.handlers
        orelse: list[ast.stmt] = node.orelse
        finalbody: list[ast.stmt] = node.finalbody
        caught = [self.handler_types(h) for h in handlers]
        label = "try/except " + ", ".join("/".join(c) if c else "*" for c in caught) if handlers else "try/finally"
        try:
            try:
                self.exec_block(body, mod, guard or label)
            except _SimRaise as exc:
                for handler, types in zip(handlers, caught, strict=True):
                    if not types or any(t in _EXC_MRO.get(exc.exc_type, (exc.exc_type,)) for t in types):
                        if handler.name:
                            mod.ns[handler.name] = _Expr(f"<{exc.exc_type}>")
                        self.exec_block(handler.body, mod, guard)
                        if handler.name:
                            mod.ns.pop(handler.name, None)
                        break
                else:
                    raise
            else:
                self.exec_block(orelse, mod, guard)
        finally:
            self.exec_block(finalbody, mod, guard)

    @staticmethod
    def handler_types(handler: ast.ExceptHandler) -> tuple[str, ...]:
        if handler.type is None:
            return ()
        nodes = handler.type.elts if isinstance(handler.type, ast.Tuple) else [handler.type]
        out: list[str] = []
        for node in nodes:
            if isinstance(node, ast.Name):
                out.append(node.id)
            elif isinstance(node, ast.Attribute):
                out.append(node.attr)
        return tuple(out)

    def exec_import_from(self, st: ast.ImportFrom, mod: _Module) -> None:
        ns = mod.ns
        base = self.resolve(mod, st.level, st.module)
        if not self.own(base):
            for alias in st.names:
                if alias.name != "*":
                    ns[alias.asname or alias.name] = _External(f"{base}.{alias.name}")
            return
        source = self.import_module(base)
        for alias in st.names:
            if alias.name == "*":
                for name, value in self.star_names(source):
                    ns[name] = value
                continue
            if alias.name in source.ns:
                value = source.ns[alias.name]
            else:
                sub = f"{base}.{alias.name}"
                try:
                    self.import_module(sub)
                except _SimRaise as exc:
                    if exc.exc_type == "ModuleNotFoundError" and repr(sub) in exc.detail:
                        raise _SimRaise("ImportError", f"cannot import name {alias.name!r} from {base!r}") from None
                    raise
                value = source.ns.get(alias.name, _ModuleRef(sub))
            ns[alias.asname or alias.name] = value

    def star_names(self, source: _Module) -> list[tuple[str, _Value]]:
        names: list[str]
        declared = source.ns.get("__all__")
        if isinstance(declared, _Const) and isinstance(declared.value, (list, tuple)):
            names = [n for n in declared.value if isinstance(n, str)]
        else:
            names = [n for n in source.ns if not n.startswith("_")]
        return [(n, source.ns[n]) for n in names if n in source.ns]

    def target_names(self, target: ast.AST) -> list[str]:
        if isinstance(target, ast.Name):
            return [target.id]
        if isinstance(target, (ast.Tuple, ast.List)):
            return [n for elt in target.elts for n in self.target_names(elt)]
        if isinstance(target, ast.Starred):
            return self.target_names(target.value)
        return []

    def bind(self, target: ast.AST, value: _Value, mod: _Module) -> None:
        if isinstance(target, ast.Name):
            if target.id == "_C" and not isinstance(value, (_Const, _Native)):
                value = _NativeModule()  # the loaded native library, whatever loads it
            mod.ns[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List, ast.Starred)):
            for name in self.target_names(target):
                mod.ns[name] = _Expr(f"<unpacked from {_unparse(target)}>")
        elif isinstance(target, ast.Attribute):
            # ``m.name = value`` on a module the package built itself (``types.ModuleType(...)``).
            base = self.eval(target.value, mod)
            made = self.modules.get(base.name) if isinstance(base, _ModuleRef) else None
            if made is not None and made.name in self.made:
                made.ns[target.attr] = value
        elif (isinstance(target, ast.Subscript) and isinstance(value, _ModuleRef)
              and isinstance(self.eval(target.value, mod), _External)
              and _unparse(target.value) == "sys.modules"):
            # ``sys.modules[f'{__name__}.x'] = m``: later imports of that name get the module built here.
            key = self.module_name(target.slice, mod)
            if key is not None and value.name in self.modules:
                self.modules[key] = self.modules[value.name]
        # other subscript targets bind nothing in the namespace

    def module_name(self, node: ast.expr, mod: _Module) -> str | None:
        """The text of a constant or an f-string over ``__name__`` / ``__package__``, else None."""
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return node.value
        if not isinstance(node, ast.JoinedStr):
            return None
        package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
        out = []
        for part in node.values:
            if isinstance(part, ast.Constant) and isinstance(part.value, str):
                out.append(part.value)
            elif (isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name)
                  and part.value.id in ("__name__", "__package__")):
                out.append(mod.name if part.value.id == "__name__" else package)
            else:
                return None
        return "".join(out)

    def static_truth(self, test: ast.expr, mod: _Module) -> bool | None:
        if isinstance(test, ast.Constant):
            return bool(test.value)
        if isinstance(test, ast.Name):
            if test.id == "__debug__":
                return True
            value = mod.ns.get(test.id)
            if test.id == "TYPE_CHECKING" or (isinstance(value, _External) and value.path.endswith("TYPE_CHECKING")):
                return False
            if isinstance(value, _Const):
                return bool(value.value)
            return None
        if isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING":
            return False
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.static_truth(test.operand, mod)
            return None if inner is None else not inner
        if isinstance(test, ast.BoolOp):
            values = [self.static_truth(v, mod) for v in test.values]
            if isinstance(test.op, ast.And):
                if False in values:
                    return False
                return True if all(v is True for v in values) else None
            if True in values:
                return True
            return False if all(v is False for v in values) else None
        return None

    # -- expressions -----------------------------------------------------------------------
    def read_native(self, op: str) -> _Native:
        self.native_reads.add(op)
        if self.native_ops is not None and op not in self.native_ops:
            raise _SimRaise("AttributeError", f"the native library has no op {op!r}")
        return _Native(op)

    def eval(self, node: ast.expr, mod: _Module) -> _Value:
        if isinstance(node, ast.Constant):
            return _Const(repr(node.value), node.value)
        if isinstance(node, ast.Name):
            if node.id in mod.ns:
                return mod.ns[node.id]
            return _Expr(node.id)
        if _is_torch_ops_ns(node):
            return _NativeModule()
        if isinstance(node, ast.Attribute):
            base = self.eval(node.value, mod)
            if isinstance(base, _NativeModule):
                return self.read_native(node.attr)
            if isinstance(base, _Native) and node.attr == "default":
                return base
            if isinstance(base, _ModuleRef):
                target = self.modules.get(base.name)
                if target is not None and node.attr in target.ns:
                    return target.ns[node.attr]
                return _Expr(_unparse(node))
            if isinstance(base, _External):
                return _External(f"{base.path}.{node.attr}")
            return _Expr(_unparse(node))
        if isinstance(node, ast.Call):
            return self.eval_call(node, mod)
        if isinstance(node, (ast.Tuple, ast.List, ast.Set, ast.Dict, ast.UnaryOp, ast.BinOp)):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.eval(child, mod)
            try:
                literal = ast.literal_eval(node)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return _Expr(_unparse(node))
            return _Const(_unparse(node), literal)
        if isinstance(node, (ast.Lambda, ast.JoinedStr, ast.GeneratorExp, ast.ListComp, ast.SetComp, ast.DictComp)):
            return _Expr(_unparse(node))
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.expr):
                self.eval(child, mod)
        return _Expr(_unparse(node))

    def eval_call(self, node: ast.Call, mod: _Module) -> _Value:
        func = self.eval(node.func, mod)
        args = [self.eval(a.value if isinstance(a, ast.Starred) else a, mod) for a in node.args]
        for kw in node.keywords:
            self.eval(kw.value, mod)
        if isinstance(func, _External) and func.path == "types.ModuleType" and node.args:
            name = self.module_name(node.args[0], mod)
            if name is not None:
                if name not in self.modules:
                    self.modules[name] = _Module(name, False)
                    self.made.add(name)
                return _ModuleRef(name)
        if (isinstance(node.func, ast.Name) and node.func.id == "getattr" and len(args) >= 2
                and isinstance(args[0], _NativeModule) and isinstance(args[1], _Const) and isinstance(args[1].value, str)):
            return self.read_native(args[1].value)
        if isinstance(func, _Function):
            if _returns_native_module(func.node):
                return _NativeModule()
            factory_param = _op_factory_param(func.node)
            if factory_param is not None:
                op = _bound_argument(func.node, node, factory_param)
                if op is not None:
                    native = self.read_native(op)
                    return _Native(native.op, via=func.node.name)
        natives = [a for a in args if isinstance(a, _Native)]
        if len(natives) == 1 and not isinstance(func, _Native):
            # a wrapper around a native op, e.g. ``f = wrap(_C.op)``
            return _Native(natives[0].op, via=_unparse(node.func))
        return _Expr(_unparse(node))


def _returns_native_module(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether ``fn`` returns the native module (``return _C`` / ``return torch.ops.deep_gemm``)."""
    for node in own_nodes(fn.body):
        if isinstance(node, ast.Return) and node.value is not None:
            if isinstance(node.value, ast.Name) and node.value.id == "_C":
                return True
            if _is_torch_ops_ns(node.value):
                return True
    return False


def _op_factory_param(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    """The parameter ``p`` if ``fn`` looks an op up with ``getattr(<native>, p)``."""
    params = {a.arg for a in fn.args.posonlyargs + fn.args.args + fn.args.kwonlyargs}
    for node in own_nodes(fn.body):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "getattr"
            and len(node.args) >= 2
            and (_is_torch_ops_ns(node.args[0]) or (isinstance(node.args[0], ast.Name) and node.args[0].id == "_C"))
            and isinstance(node.args[1], ast.Name)
            and node.args[1].id in params
        ):
            return node.args[1].id
    return None


def _bound_argument(fn: ast.FunctionDef | ast.AsyncFunctionDef, call: ast.Call, param: str) -> str | None:
    """The constant string passed for ``param`` in ``call``, if any."""
    positional = [a.arg for a in fn.args.posonlyargs + fn.args.args]
    for kw in call.keywords:
        if kw.arg == param and isinstance(kw.value, ast.Constant) and isinstance(kw.value.value, str):
            return kw.value.value
    if param in positional:
        idx = positional.index(param)
        if idx < len(call.args):
            arg = call.args[idx]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return arg.value
    return None


# ---------------------------------------------------------------------------------------------
# Records
# ---------------------------------------------------------------------------------------------


def _params(args: ast.arguments, drop_first: bool = False) -> list[dict[str, JSON]]:
    out: list[dict[str, JSON]] = []
    positional = [(a, "positional_only") for a in args.posonlyargs] + [(a, "positional") for a in args.args]
    defaults: list[ast.expr | None] = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    for (arg, kind), default in zip(positional, defaults, strict=True):
        out.append(_param(arg, kind, default))
    if args.vararg is not None:
        out.append(_param(args.vararg, "var_positional", None))
    for arg, kw_default in zip(args.kwonlyargs, args.kw_defaults, strict=True):
        out.append(_param(arg, "keyword_only", kw_default))
    if args.kwarg is not None:
        out.append(_param(args.kwarg, "var_keyword", None))
    return out[1:] if drop_first and out and out[0]["kind"] in ("positional_only", "positional") else out


def _param(arg: ast.arg, kind: str, default: ast.expr | None) -> dict[str, JSON]:
    return {
        "name": arg.arg,
        "kind": kind,
        "default": _unparse(default) if default is not None else None,
        "annotation": _unparse(arg.annotation) if arg.annotation is not None else None,
    }


class _NativeCallFinder:
    """Finds ``_C.<op>(...)`` calls in a function body, whatever names the native module."""

    def __init__(self, evaluator: _Evaluator, module: str) -> None:
        self.ev = evaluator
        self.module = module

    def native_op(self, call: ast.Call, local_native: set[str]) -> str | None:
        func = call.func
        if not isinstance(func, ast.Attribute):
            return None
        base = func.value
        if self.is_native_expr(base, local_native):
            return func.attr
        if func.attr == "default" and isinstance(base, ast.Attribute) and self.is_native_expr(base.value, local_native):
            return base.attr
        return None

    def is_native_expr(self, node: ast.expr, local_native: set[str]) -> bool:
        if _is_torch_ops_ns(node):
            return True
        if isinstance(node, ast.Name):
            if node.id in local_native or node.id == "_C":
                return True
            mod = self.ev.modules.get(self.module)
            return mod is not None and isinstance(mod.ns.get(node.id), _NativeModule)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            mod = self.ev.modules.get(self.module)
            target = mod.ns.get(node.func.id) if mod is not None else None
            return isinstance(target, _Function) and _returns_native_module(target.node)
        return False

    def local_native_names(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
        names: set[str] = set()
        for node in own_nodes(fn.body):
            if isinstance(node, ast.ImportFrom):
                for alias in node.names:
                    if alias.name == "_C":
                        names.add(alias.asname or "_C")
            elif isinstance(node, ast.Assign) and _is_torch_ops_ns(node.value):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        return names

    def calls(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[dict[str, JSON]]:
        local = self.local_native_names(fn)
        out: list[dict[str, JSON]] = []
        for stmt in fn.body:
            for node in _walk_in_order(stmt):
                if isinstance(node, ast.Call):
                    op = self.native_op(node, local)
                    if op is not None:
                        args: list[JSON] = [_unparse(a) for a in node.args]
                        args += [f"{kw.arg}={_unparse(kw.value)}" if kw.arg else f"**{_unparse(kw.value)}" for kw in node.keywords]
                        out.append({"op": op, "args": args})
        return out

    def returns(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str:
        """A summary of what ``fn`` returns: ``None``, ``_C.<op>``, ``f(_C.<op>)`` or the expression."""
        local = self.local_native_names(fn)
        seen: list[str] = []
        for node in own_nodes(fn.body):
            if not isinstance(node, ast.Return) or node.value is None:
                continue
            value = node.value
            summary = _unparse(value)
            if isinstance(value, ast.Constant) and value.value is None:
                summary = "None"
            elif isinstance(value, ast.Call):
                op = self.native_op(value, local)
                if op is not None:
                    summary = f"_C.{op}"
                else:
                    inner = [self.native_op(a, local) for a in value.args if isinstance(a, ast.Call)]
                    ops = [o for o in inner if o is not None]
                    if len(ops) == 1:
                        summary = f"{_unparse(value.func)}(_C.{ops[0]})"
            if summary not in seen:
                seen.append(summary)
        return " | ".join(seen) if seen else "None"


def _function_record(ev: _Evaluator, fn: _Function, bound_as: str) -> dict[str, JSON]:
    finder = _NativeCallFinder(ev, fn.module)
    node = fn.node
    record: dict[str, JSON] = {
        "kind": "function" if node.name == bound_as else "alias",
        "qualname": fn.qualname,
        "params": list(_params(node.args)),
        "returns_annotation": _unparse(node.returns) if node.returns is not None else None,
        "returns": finder.returns(node),
        "native_calls": list(finder.calls(node)),
        "decorators": [_unparse(d) for d in node.decorator_list],
        "guard": fn.guard,
    }
    if record["kind"] == "alias":
        record["alias_of"] = fn.qualname
    return record


def _class_record(cls: _Class) -> dict[str, JSON]:
    init: dict[str, JSON] | None = None
    methods: list[JSON] = []
    for st in cls.node.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef)):
            static = any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in st.decorator_list)
            params = _params(st.args, drop_first=not static)
            if st.name == "__init__":
                init = {"params": list(params)}
            elif not st.name.startswith("_"):
                methods.append({"name": st.name, "params": list(params)})
    return {
        "kind": "class",
        "qualname": f"{cls.module}.{cls.node.name}",
        "bases": [_unparse(b) for b in cls.node.bases],
        "params": init["params"] if init is not None else [],
        "methods": methods,
        "guard": cls.guard,
    }


def _record(ev: _Evaluator, name: str, value: _Value) -> dict[str, JSON] | None:
    if isinstance(value, _External):
        return None  # third-party / stdlib objects are not part of the package's surface
    if isinstance(value, _Function):
        return _function_record(ev, value, name)
    if isinstance(value, _Class):
        return _class_record(value)
    if isinstance(value, _ModuleRef):
        return {"kind": "module", "module": value.name}
    if isinstance(value, _NativeModule):
        return {"kind": "value", "value": "<native module>", "const": False}
    if isinstance(value, _Native):
        return {"kind": "native", "op": value.op, "via": value.via}
    if isinstance(value, _Const):
        if value.value is None:
            return {"kind": "none"}
        return {"kind": "value", "value": value.text, "const": True}
    return {"kind": "value", "value": value.text, "const": False}


def read_python_surface(
    sources: Mapping[str, str],
    *,
    native_ops: Collection[str] | None = None,
    extension_modules: Mapping[str, bool] | None = None,
    root: str = "deep_gemm",
    modules: Collection[str] = DEFAULT_MODULES,
) -> PythonSurface:
    """Evaluate ``import <root>`` symbolically and describe the public names of ``modules``.

    ``sources`` maps package-relative file paths (``deep_gemm/__init__.py``) to their text.
    ``native_ops`` is the set of ops the native library defines; reading any other ``_C.<op>``
    at import time raises a simulated ``AttributeError`` (``None``: every read succeeds).
    ``extension_modules`` maps module names backed by a shared object (``deep_gemm._C``) to
    whether that object can be imported as a Python module (it exports ``PyInit_<name>``).
    """
    ev = _Evaluator(sources, native_ops, extension_modules or {}, root)
    for name in [root] + [m for m in modules if m != root]:
        if name in ev.modules:
            continue
        try:
            ev.import_module(name)
        except _SimRaise:
            pass  # recorded in import_errors
    symbols: dict[str, dict[str, JSON]] = {}
    for module in modules:
        mod = ev.modules.get(module)
        if mod is None:
            continue
        for name, value in mod.ns.items():
            if name.startswith("_"):
                continue
            record = _record(ev, name, value)
            if record is not None:
                symbols[f"{module}.{name}"] = record
    top = ev.modules.get(root)
    version = top.ns.get("__version__") if top is not None else None
    return PythonSurface(
        symbols=dict(sorted(symbols.items())),
        import_errors=tuple(ev.import_errors),
        native_reads=tuple(sorted(ev.native_reads)),
        version=version.value if isinstance(version, _Const) and isinstance(version.value, str) else None,
    )
