"""Upstream parameters a stable function accepts although not every release has them.

Each stable GEMM takes every parameter some release has, under the upstream name and at the newest
release's position, and passes them all on by position. A :class:`Param` declares one parameter not
every release has and the value that does exactly what a release without it does;
:func:`parameter_names` / :func:`parameter_default` read the installed function (its signature, a torch
op schema or a pybind docstring), and :func:`bind` builds what a stable function calls:

- the upstream function itself where its parameters sit in the stable positions (no extra frame);
- otherwise an adapter, written for the release when it binds, that passes the parameters the release has
  (by position where they follow in its own order, else by keyword), drops those whose value is exactly
  the release's own behaviour, and raises :class:`~dgcompat.errors.UnsupportedFeatureError` naming the
  parameter and the release for any other value.

``compiled_dims`` differs in its default (``''`` on sgl-deep-gemm's dense GEMMs, ``'nk'`` upstream): its
stable default None means the release's own default, which :func:`parameter_default` reads at bind
time and the stable function substitutes (one ``is None`` test).

Binding time only: nothing here runs on a successful call through the upstream function itself.
"""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING
from typing import Any

from .errors import UnsupportedFeatureError

if TYPE_CHECKING:
    from ._calls import UpstreamCall

__all__ = ["Param", "RELEASE_DEFAULT", "parameter_names", "parameter_default", "release_default", "bind"]

#: ``absent`` of a parameter whose stable default None means "the release's own default".
RELEASE_DEFAULT = object()


@dataclass(frozen=True)
class Param:
    """One parameter not every release has.

    ``absent``: the value that does exactly what a release without the parameter does (it is then not
    passed there; any other value is refused); :data:`RELEASE_DEFAULT`: the release's own default.
    ``why``: why that value is exact (documentation).
    """

    name: str
    absent: Any
    why: str = ""


_DOC_SIGNATURE = re.compile(r"^\s*\w+\((.*)\)")


def _schema_arguments(fn: Any) -> Any:
    for holder in (fn, getattr(fn, "default", None)):
        arguments = getattr(getattr(holder, "_schema", None), "arguments", None)
        if arguments is not None:
            return arguments
    for cell in getattr(fn, "__closure__", None) or ():  # the bundled copies' lazy-init wrappers
        try:
            inner = cell.cell_contents
        except ValueError:
            continue
        if inner is not fn:
            for holder in (inner, getattr(inner, "default", None)):
                arguments = getattr(getattr(holder, "_schema", None), "arguments", None)
                if arguments is not None:
                    return arguments
    return None


def _doc_parameters(fn: Any) -> list[tuple[str, str | None]] | None:
    """``[(name, default source or None)]`` from a pybind docstring's first line."""
    doc = getattr(fn, "__doc__", None)
    match = _DOC_SIGNATURE.match(doc.splitlines()[0]) if isinstance(doc, str) and doc else None
    if match is None:
        return None
    out: list[tuple[str, str | None]] = []
    depth, current = 0, ""
    for ch in match.group(1) + ",":
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        if ch == "," and depth == 0:
            head, _, default = current.partition("=")
            name = head.split(":")[0].strip()
            if name and name not in ("*", "/"):
                out.append((name, default.strip() or None))
            current = ""
        else:
            current += ch
    return out


def _doc_names(fn: Any) -> tuple[str, ...] | None:
    found = _doc_parameters(fn)
    return None if found is None else tuple(name for name, _ in found)


def _python_signature(fn: Any) -> inspect.Signature | None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    kinds = {p.kind for p in sig.parameters.values()}
    if inspect.Parameter.VAR_POSITIONAL in kinds or inspect.Parameter.VAR_KEYWORD in kinds:
        return None
    return sig


def parameter_names(fn: Any) -> tuple[str, ...] | None:
    """The parameter names of the installed callable ``fn``, in order, or None where unreadable.

    Reads a torch op schema (also behind a ``(*args, **kwargs)`` wrapper closing over the op), a Python
    signature, or the first line of a pybind docstring.
    """
    arguments = _schema_arguments(fn)
    if arguments is not None:
        return tuple(str(a.name) for a in arguments)
    sig = _python_signature(fn)
    if sig is not None:
        return tuple(sig.parameters)
    return _doc_names(fn)


def parameter_default(fn: Any, name: str) -> Any:
    """The default of ``fn``'s parameter ``name`` as the installed release declares it; raises LookupError
    where it cannot be read."""
    arguments = _schema_arguments(fn)
    if arguments is not None:
        for arg in arguments:
            if str(arg.name) == name and getattr(arg, "default_value", None) is not None:
                return arg.default_value
        raise LookupError(name)
    sig = _python_signature(fn)
    if sig is not None:
        param = sig.parameters.get(name)
        if param is None or param.default is inspect.Parameter.empty:
            raise LookupError(name)
        return param.default
    for found, default in _doc_parameters(fn) or ():
        if found == name and default is not None:
            return ast.literal_eval(default)
    raise LookupError(name)


def _name_ok(declared: str, found: str) -> bool:
    return declared == "*" or found in declared.split("|")


def bind(fn: Callable[..., Any], caller: str, positional: tuple[str, ...], common: int,
         params: tuple[Param, ...], defaults: dict[str, Any], release: str,
         keywords: tuple[str, ...] = ()) -> Callable[..., Any]:
    """What ``caller`` calls on this release, always by position with the arguments ``positional`` names.

    ``positional[:common]`` are taken in these positions by every release; ``params`` declares the rest
    (in ``positional`` order). ``defaults``: the value the stable function substitutes for each
    :data:`RELEASE_DEFAULT` parameter (read from ``fn``). Returns ``fn`` itself where its parameters sit
    in these positions, else an adapter (see the module docstring); ``keywords``: the keyword arguments
    the call site adds after the positional ones (passed through unchanged).
    """
    names = parameter_names(fn)
    tail = positional[common:]
    if names is not None and len(names) >= len(positional) and all(
            _name_ok(p, n) for p, n in zip(tail, names[common:], strict=False)):
        return fn
    have = frozenset(names or ())
    absent = {p.name: (defaults[p.name] if p.absent is RELEASE_DEFAULT else p.absent) for p in params}
    return _adapter(fn, caller.removeprefix("dgcompat."), positional, common, names or (), have, absent, release,
                    bool(keywords))


def _adapter(fn: Callable[..., Any], fn_name: str, positional: tuple[str, ...], common: int,
             names: tuple[str, ...], have: frozenset[str], absent: dict[str, Any], release: str,
             extra: bool) -> Callable[..., Any]:
    """The adapter of :func:`bind`, written out for this release: one function whose body tests exactly the
    parameters the release lacks (an identity test for None / True / False, else type and value) and calls
    ``fn`` with the ones it has, by position where they follow the common ones in ``fn``'s own order, else
    by keyword. Generated once, when the stable function binds (as :mod:`dataclasses` writes ``__init__``),
    so a call pays one frame and those tests, not a loop over every parameter."""
    tail = positional[common:]
    args = [f"p{i}" for i in range(len(positional))]
    env: dict[str, Any] = {"_fn": fn, "_refuse": _refuser(fn_name, release)}
    body = []
    present = [(i, n) for i, n in zip(range(common, len(positional)), tail, strict=True) if n in have]
    for i, name in zip(range(common, len(positional)), tail, strict=True):
        if name in have:
            continue
        value = absent[name]
        env[f"_a{i}"] = value
        same = f"p{i} is _a{i}" if value is None or value is True or value is False else \
            f"(p{i} is _a{i} or (type(p{i}) is type(_a{i}) and p{i} == _a{i}))"
        body.append(f"    if not ({same}):\n        _refuse({name!r}, p{i})")
    by_position = [n for _, n in present] == list(names[common:common + len(present)])
    passed = args[:common] + [f"p{i}" if by_position else f"{n}=p{i}" for i, n in present]
    rest = ["**extra"] if extra else []  # keyword arguments of the call site, only where it makes some
    body.append(f"    return _fn({', '.join(passed + rest)})")
    source = f"def forward({', '.join(args + rest)}):\n" + "\n".join(body) + "\n"
    exec(compile(source, f"<dgcompat adapter of {fn_name}>", "exec"), env)  # noqa: S102 - generated above
    forward: Callable[..., Any] = env["forward"]
    forward.__name__ = f"{fn_name}_forward"
    return forward


def _refuser(fn_name: str, release: str) -> Callable[[str, Any], None]:
    def refuse(name: str, value: Any) -> None:
        raise UnsupportedFeatureError(fn_name, f"{name}={value!r}", release,
                                      hint=f"This release has no {name} parameter")
    return refuse


def release_default(fn: Any, name: str, fallback: Any) -> Any:
    """:func:`parameter_default`, or ``fallback`` (the table's answer) where the release does not say."""
    try:
        return parameter_default(fn, name)
    except (LookupError, ValueError, SyntaxError):
        return fallback


def bind_call(fn: Callable[..., Any], call: UpstreamCall, params: tuple[Param, ...], store: Any, name: str,
              fallback: Any, release: str) -> Callable[..., Any]:
    """:func:`bind` for one declared upstream call, after storing the release's ``compiled_dims`` default
    (``fallback``: the table's answer) as ``store.<name>``, which the stable function substitutes for None."""
    dims = release_default(fn, "compiled_dims", fallback)
    setattr(store, name, dims)
    return bind(fn, call.caller, call.positional + tuple(p.name for p in params), len(call.positional), params,
                {"compiled_dims": dims}, release, call.keywords)
