"""Upstream parameters a stable function accepts although not every release has them.

Each stable GEMM takes every parameter some release has, under the upstream name and at the newest
release's position. A :class:`Param` declares one such parameter and the value that means "what
a release without it does"; :func:`parameter_names` reads which parameters the installed function
really has (its signature, a torch op schema or a pybind docstring), and :func:`bind` builds what a
stable function calls:

- the upstream function itself where it has every parameter the call passes (no extra frame);
- otherwise an adapter that forwards the parameters the release has and drops those whose value is
  exactly the release's own behaviour, and raises :class:`~dgcompat.errors.UnsupportedFeatureError`
  naming the parameter and the release for any other value.

Binding time only: nothing here runs on a successful call.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass
from typing import Any, Callable

from .errors import UnsupportedFeatureError

__all__ = ["Param", "RELEASE_DEFAULT", "parameter_names", "bind"]

#: ``absent`` value of a parameter whose stable default (None) means "the release's own default":
#: None is never forwarded, any other value needs the parameter.
RELEASE_DEFAULT = object()


@dataclass(frozen=True)
class Param:
    """One parameter not every release has.

    ``absent``: the value that does exactly what a release without the parameter does (it is then
    not passed there); :data:`RELEASE_DEFAULT`: None means the release's default (never passed).
    ``why``: why that value is exact there (documentation, and the reason in refusals).
    """

    name: str
    absent: Any
    why: str = ""

    def omitted(self, value: Any) -> bool:
        """Whether ``value`` needs nothing from the release (it is not passed)."""
        if self.absent is RELEASE_DEFAULT:
            return value is None
        return bool(value is self.absent or (type(value) is type(self.absent) and value == self.absent))


_DOC_SIGNATURE = re.compile(r"^\s*\w+\((.*)\)")


def parameter_names(fn: Any) -> tuple[str, ...] | None:
    """The parameter names of the installed callable ``fn``, in order, or None where unreadable.

    Reads a Python signature; for a wrapper taking ``(*args, **kwargs)`` around a torch op (the bundled
    copies' lazy-init wrappers) or a torch op itself, the op's schema; for a pybind function, the
    first line of its docstring.
    """
    schema = _schema_names(fn)
    if schema is not None:
        return schema
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return _doc_names(fn)
    kinds = {p.kind for p in sig.parameters.values()}
    if inspect.Parameter.VAR_POSITIONAL in kinds or inspect.Parameter.VAR_KEYWORD in kinds:
        for cell in getattr(fn, "__closure__", None) or ():
            try:
                inner = cell.cell_contents
            except ValueError:
                continue
            found = _schema_names(inner)
            if found is not None:
                return found
        return None
    return tuple(sig.parameters)


def _schema_names(fn: Any) -> tuple[str, ...] | None:
    for holder in (fn, getattr(fn, "default", None)):
        schema = getattr(holder, "_schema", None)
        arguments = getattr(schema, "arguments", None)
        if arguments is not None:
            return tuple(str(a.name) for a in arguments)
    return None


def _doc_names(fn: Any) -> tuple[str, ...] | None:
    doc = getattr(fn, "__doc__", None)
    if not isinstance(doc, str):
        return None
    match = _DOC_SIGNATURE.match(doc.splitlines()[0] if doc else "")
    if match is None:
        return None
    names = []
    depth, current = 0, ""
    for ch in match.group(1) + ",":
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        if ch == "," and depth == 0:
            name = current.split(":")[0].split("=")[0].strip()
            if name and name not in ("*", "/"):
                names.append(name)
            current = ""
        else:
            current += ch
    return tuple(names)


def bind(fn: Callable[..., Any], caller: str, passed: tuple[Param, ...], names: tuple[str, ...] | None,
         release: str) -> Callable[..., Any]:
    """What ``caller`` calls on this release: ``fn`` itself where it has every parameter in ``passed``,
    otherwise an adapter (see the module docstring).

    ``passed``: the parameters the call site passes by keyword after its positional arguments.
    ``names``: :func:`parameter_names` of ``fn`` (None: unknown, only the declared positional
    arguments are assumed).
    """
    have = frozenset(names or ())
    if all(p.name in have for p in passed) and all(p.absent is not RELEASE_DEFAULT for p in passed):
        return fn
    dropped = {p.name: p for p in passed if p.name not in have}
    release_defaults = tuple(p.name for p in passed if p.name in have and p.absent is RELEASE_DEFAULT)
    fn_name = caller.removeprefix("dgcompat.")

    def forward(*positional: Any, **named: Any) -> Any:
        # `named` holds the call site's keywords: the declared ones every release has, and `passed`.
        for name, option in dropped.items():
            value = named.pop(name)
            if not option.omitted(value):
                raise UnsupportedFeatureError(fn_name, f"{name}={value!r}", release,
                                              hint=f"This release has no {name} parameter")
        for name in release_defaults:
            if named[name] is None:
                del named[name]
        return fn(*positional, **named)

    forward.__name__ = f"{fn_name}_forward"
    return forward
