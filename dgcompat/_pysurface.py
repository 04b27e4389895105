"""The parameters of a deep_gemm build's Python functions, read from its source without importing it.

Two builds can carry one ``__version__`` and different signatures (vLLM 0.33.0's and 0.34.0's vendored
DeepGEMM 2.8.1 both say ``"2.8.1"``; 0.34.0 inserted ``logits_dtype`` into both MQA-logits functions), so
the capability table asks the build itself what a function takes. Before deep_gemm is imported (detection
must not import it: its import initializes native code) the answer comes from the package's source:

- every ``def`` in ``__init__.py`` and ``_C.py`` at any depth (upstream 2.8.1 defines its wrappers inside
  ``_register_deep_gemm_kernels()`` in ``_C.py``), and
- the names ``globals().update(...)`` gives them when the module runs (:func:`registrations`): a dict
  literal (2.8.1 registers ``fp8_gemm_nt`` as its ``fp8_fp4_gemm_nt``), a dict comprehension over
  ``locals()`` filtered by a literal set of names (2.8.1's BF16 GEMMs), and a helper called with op names
  whose comprehension binds ``getattr(<ops>, name)`` (2.8.1's ``_bind_guarded_ops('get_paged_mqa_logits_metadata')``:
  a native op, which has no Python parameters).

After import, :func:`live_parameters` reads the loaded function itself (a Python function's signature or a
torch op's schema). The certification wing's surface extractor follows the same registrations through
:func:`registrations` (one reader of this idiom). A leaf: it imports only the standard library.
"""

from __future__ import annotations

import ast
import hashlib
import inspect
from collections.abc import Iterable
from collections.abc import Iterator
from collections.abc import Mapping
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import NamedTuple

__all__ = ["SOURCES", "Registration", "registrations", "module_registrations", "source_parameters",
           "parameters_from_sources", "live_parameters", "digest", "own_nodes"]

#: The files of a deep_gemm package whose functions are read (relative to the package folder).
SOURCES = ("__init__.py", "_C.py")

#: Bytes read of one source file at most (a deep_gemm ``__init__.py`` is a few tens of kilobytes).
_LIMIT = 1 << 21

#: How deep a chain of helper calls is followed (``_register()`` -> ``_bind_guarded_ops(...)``).
_DEPTH = 4

_Def = ast.FunctionDef | ast.AsyncFunctionDef


class Registration(NamedTuple):
    """One name a ``globals().update(...)`` binds: ``kind`` ``"def"`` (``target`` names a Python function
    defined in the registering function or the module) or ``"op"`` (``target`` names a native op)."""

    name: str
    kind: str
    target: str


def _params(fn: _Def) -> tuple[str, ...]:
    a = fn.args
    names = [p.arg for p in (*a.posonlyargs, *a.args)]
    if a.vararg is not None:
        names.append("*" + a.vararg.arg)
    names += [p.arg for p in a.kwonlyargs]
    if a.kwarg is not None:
        names.append("**" + a.kwarg.arg)
    return tuple(names)


def own_nodes(body: Sequence[ast.stmt]) -> Iterator[ast.AST]:
    """The nodes of ``body``, not descending into nested functions, classes or lambdas."""
    stack: list[ast.AST] = list(reversed(body))
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
            continue
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _is_call_of(node: ast.AST, name: str) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name and not node.args


def _globals_update(node: ast.AST) -> ast.expr | None:
    """The argument of a ``globals().update(X)`` call, else None."""
    if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update"
            and _is_call_of(node.func.value, "globals") and len(node.args) == 1 and not node.keywords):
        return node.args[0]
    return None


def _strings(node: ast.AST) -> list[str] | None:
    """The strings of a literal set, list or tuple of strings, else None."""
    if isinstance(node, (ast.Set, ast.List, ast.Tuple)) and all(
            isinstance(e, ast.Constant) and isinstance(e.value, str) for e in node.elts):
        return [str(e.value) for e in node.elts if isinstance(e, ast.Constant)]
    return None


def _updated(arg: ast.expr, bound: Mapping[str, list[str]]) -> list[Registration]:
    """What one ``globals().update(arg)`` binds; ``bound`` maps the registering function's parameters to the
    constant strings its call passed."""
    out: list[Registration] = []
    if isinstance(arg, ast.Dict):
        for key, value in zip(arg.keys, arg.values, strict=True):
            if isinstance(key, ast.Constant) and isinstance(key.value, str) and isinstance(value, ast.Name):
                out.append(Registration(key.value, "def", value.id))
        return out
    if not (isinstance(arg, ast.DictComp) and len(arg.generators) == 1):
        return out
    gen = arg.generators[0]
    # {name: value for name, value in locals().items() if name in {'a', 'b'}}: the local functions a, b.
    if (isinstance(gen.iter, ast.Call) and isinstance(gen.iter.func, ast.Attribute) and gen.iter.func.attr == "items"
            and _is_call_of(gen.iter.func.value, "locals")):
        for cond in gen.ifs:
            if (isinstance(cond, ast.Compare) and len(cond.ops) == 1 and isinstance(cond.ops[0], ast.In)
                    and (names := _strings(cond.comparators[0])) is not None):
                out += [Registration(n, "def", n) for n in names]
        return out
    # {name: getattr(ops, name) for name in names}: the native ops named by the call's arguments.
    if (isinstance(gen.target, ast.Name) and isinstance(arg.key, ast.Name) and arg.key.id == gen.target.id
            and isinstance(arg.value, ast.Call) and isinstance(arg.value.func, ast.Name)
            and arg.value.func.id == "getattr" and len(arg.value.args) == 2
            and isinstance(arg.value.args[1], ast.Name) and arg.value.args[1].id == gen.target.id):
        names = _strings(gen.iter)
        if names is None and isinstance(gen.iter, ast.Name):
            names = bound.get(gen.iter.id)
        out += [Registration(n, "op", n) for n in names or ()]
    return out


def _bound_strings(fn: _Def, call: ast.Call) -> dict[str, list[str]]:
    """Parameter -> the constant strings ``call`` passes to it (a ``*names`` parameter collects the rest)."""
    bound: dict[str, list[str]] = {}
    positional = [p.arg for p in (*fn.args.posonlyargs, *fn.args.args)]
    consts = [a.value if isinstance(a, ast.Constant) and isinstance(a.value, str) else None for a in call.args]
    for name, value in zip(positional, consts, strict=False):
        if value is not None:
            bound[name] = [value]
    if fn.args.vararg is not None:
        rest = consts[len(positional):]
        if all(v is not None for v in rest):
            bound[fn.args.vararg.arg] = [str(v) for v in rest]
    return bound


def registrations(body: Sequence[ast.stmt], functions: Mapping[str, _Def], bound: Mapping[str, list[str]] | None = None,
                  *, depth: int = 0) -> list[Registration]:
    """What running ``body`` binds through ``globals().update(...)``, in order: its own updates, and those of
    the functions of ``functions`` (the module's, by name) it calls, followed ``_DEPTH`` calls deep.

    ``body`` is a module's statements (then every call counts: a module-level helper call registers) or a
    function's; ``bound`` maps that function's parameters to the constant strings it was called with.
    Nothing is executed.
    """
    out: list[Registration] = []
    for node in own_nodes(body):
        arg = _globals_update(node)
        if arg is not None:
            out += _updated(arg, bound or {})
        elif (depth < _DEPTH and isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
              and node.func.id in functions):
            callee = functions[node.func.id]
            out += registrations(callee.body, functions, _bound_strings(callee, node), depth=depth + 1)
    return out


def module_registrations(tree: ast.Module) -> list[Registration]:
    """:func:`registrations` of a whole module (its module-level functions are the ones calls are followed into)."""
    functions = {n.name: n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return registrations(tree.body, functions)


def _parse(data: bytes | str) -> ast.Module | None:
    if len(data) > _LIMIT:
        return None
    try:
        return ast.parse(data)
    except (SyntaxError, ValueError):
        return None


def _read(path: Path) -> bytes | None:
    try:
        with path.open("rb") as f:
            return f.read(_LIMIT + 1)
    except OSError:
        return None


def parameters_from_sources(sources: Mapping[str, bytes | str | None], names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """:func:`source_parameters` over source texts already read: ``sources`` maps the names of
    :data:`SOURCES` to their text (missing or None: not read)."""
    wanted = set(names)
    found: dict[str, tuple[str, ...]] = {}
    for rel in reversed(SOURCES):  # _C.py first, then __init__.py
        data = sources.get(rel)
        tree = _parse(data) if data is not None else None
        if tree is None:
            continue
        defs: dict[str, tuple[str, ...]] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                defs[node.name] = _params(node)
        for name in wanted & defs.keys():
            found[name] = defs[name]
        for reg in module_registrations(tree):
            if reg.name not in wanted:
                continue
            if reg.kind == "def" and reg.target in defs:
                found[reg.name] = defs[reg.target]
            elif reg.kind == "op":
                found.pop(reg.name, None)  # a native op: its parameters are in the schema, not the source
    return found


def source_parameters(pkg_dir: str | Path, names: Iterable[str]) -> dict[str, tuple[str, ...]]:
    """The parameter names of each of ``names`` the package at ``pkg_dir`` defines in Python source.

    A name the sources do not define (a native op bound directly, or absent) is left out. Where a name is
    defined more than once (a fallback ``def`` under ``try``/``except``) the last definition in file order
    wins, as at import; ``__init__.py`` is read after ``_C.py`` (it imports from it and may redefine).
    Unreadable or unparsable files contribute nothing.
    """
    return parameters_from_sources({rel: _read(Path(pkg_dir) / rel) for rel in SOURCES}, names)


def live_parameters(obj: Any) -> tuple[str, ...] | None:
    """The parameter names of a loaded callable: a Python function's signature, or a torch op's schema
    (``torch.ops`` packets expose ``_schemas``); None when neither can be read."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        sig = None
    if sig is not None:
        kinds = inspect.Parameter
        return tuple(("*" if p.kind is kinds.VAR_POSITIONAL else "**" if p.kind is kinds.VAR_KEYWORD else "") + p.name
                     for p in sig.parameters.values())
    schemas = getattr(obj, "_schemas", None)
    if isinstance(schemas, dict) and len(schemas) == 1:
        schema = next(iter(schemas.values()))
        args = getattr(schema, "arguments", None)
        if args is not None:
            return tuple(str(a.name) for a in args)
    return None


def digest(surface: Iterable[tuple[str, Iterable[str]]]) -> str:
    """A short, stable id of ``(name, parameters)`` pairs (12 hex digits), independent of their order."""
    text = "\n".join(f"{name}({', '.join(params)})" for name, params in sorted((n, tuple(p)) for n, p in surface))
    return hashlib.sha256(text.encode()).hexdigest()[:12]
