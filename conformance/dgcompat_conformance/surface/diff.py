"""Compare two extracted surfaces (see :func:`dgcompat_conformance.surface.extract`).

A :class:`Change` names what changed (``kind``, see :data:`CHANGE_KINDS`), where (``symbol``:
``deep_gemm.<name>`` for Python names, ``_C.<op>`` for native ops, ``deep_gemm`` for the
release as a whole) and, for parameter-level changes, which parameter (``param``). The triple
``(symbol, kind, param)`` is stable across runs, so a caller can map changes onto its own table
rows.

By default only engine-relevant symbols are compared (:data:`ENGINE_SYMBOLS` plus every name in
``deep_gemm.utils.layout``) together with the native ops they bind or call.
"""

from __future__ import annotations

import ast
import json
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "Change",
    "CHANGE_KINDS",
    "ENGINE_SYMBOLS",
    "ENGINE_PREFIXES",
    "is_engine_symbol",
    "diff",
    "render_changes",
    "changes_to_json",
    "format_signature",
]

Scalar = str | int | float | bool | None

#: The symbols ``deep_gemm`` engines call (docs/sources/wheel-matrix.md section 3), qualified.
ENGINE_SYMBOLS: tuple[str, ...] = tuple(
    "deep_gemm." + name
    for name in (
        "fp8_gemm_nt",
        "m_grouped_fp8_gemm_nt_contiguous",
        "fp8_m_grouped_gemm_nt_masked",
        "m_grouped_fp8_gemm_nt_masked",
        "fp8_mqa_logits",
        "fp8_paged_mqa_logits",
        "fp8_fp4_mqa_logits",
        "fp8_fp4_paged_mqa_logits",
        "get_paged_mqa_logits_metadata",
        "get_mqa_logits_metadata",
        "transform_sf_into_required_layout",
        "get_mk_alignment_for_contiguous_layout",
        "get_mn_major_tma_aligned_tensor",
        "get_col_major_tma_aligned_tensor",
        "set_num_sms",
        "get_num_sms",
        "set_compile_mode",
        "get_compile_mode",
        "set_pdl",
        "get_pdl",
        "set_tc_util",
        "get_tc_util",
        "bf16_gemm_nt",
        "m_grouped_bf16_gemm_nt_masked",
    )
)

#: Every public name under these prefixes is engine-relevant too.
ENGINE_PREFIXES: tuple[str, ...] = ("deep_gemm.utils.layout.",)

#: What each :attr:`Change.kind` means.
CHANGE_KINDS: Mapping[str, str] = {
    "binding-changed": "the native binding era changed (tvm-ffi <-> torch-library)",
    "torch-changed": "the torch release the native library was built against changed",
    "requires-changed": "a Requires-Dist line was added (after) or removed (before)",
    "added-function": "a callable name (function, alias, native op binding, class) appeared",
    "removed-function": "a callable name disappeared",
    "added-symbol": "a non-callable name (module, value, None) appeared",
    "removed-symbol": "a non-callable name disappeared",
    "kind-changed": "the name is bound to a different kind of object (e.g. native op -> Python def)",
    "target-changed": "an alias now points to another function, or a binding to another op",
    "added-param": "a parameter was added (after = its position)",
    "removed-param": "a parameter was removed (before = its position)",
    "renamed-param": "same position, different name, old name gone (heuristic; before/after = names)",
    "moved-param": "a positional parameter now sits at another position (before/after = positions)",
    "param-kind-changed": "positional <-> keyword-only (or similar) changed",
    "default-changed": "a parameter's default value changed (source text)",
    "became-required": "a parameter lost its default",
    "became-optional": "a parameter gained a default",
    "annotation-changed": "a parameter's annotation (native: its type kind) changed",
    "return-changed": "what the symbol returns changed (Python return summary or schema return)",
    "native-call-changed": "the _C.<op>(...) call(s) a wrapper makes changed (op or argument list)",
    "added-native": "a native op appeared",
    "removed-native": "a native op disappeared",
    "native-arity-changed": "a native op takes a different number of arguments",
    "native-type-changed": "a native op argument's kind changed at the same position (or name)",
}

_CALLABLE_KINDS = frozenset({"function", "alias", "native", "class"})
_POSITIONAL = frozenset({"positional_only", "positional"})


@dataclass(frozen=True)
class Change:
    """One difference between two surfaces."""

    kind: str
    symbol: str
    detail: str
    before: Scalar = None
    after: Scalar = None
    param: str | None = None

    def to_json(self) -> dict[str, Scalar]:
        """A JSON-able dict with every field."""
        return dict(asdict(self))


def is_engine_symbol(name: str) -> bool:
    """Whether ``name`` (qualified) is one of the engine-relevant symbols."""
    return name in ENGINE_SYMBOLS or name.startswith(ENGINE_PREFIXES)


# ---------------------------------------------------------------------------------------------
# Rendering records
# ---------------------------------------------------------------------------------------------


def _format_param(p: Mapping[str, Any]) -> str:
    name = p.get("name")
    annotation = p.get("annotation")
    default = p.get("default")
    kind = p.get("kind")
    if name is None:  # native op without names (tvm-ffi): the type is all there is
        return str(annotation)
    prefix = "*" if kind == "var_positional" else "**" if kind == "var_keyword" else ""
    text = prefix + str(name)
    if annotation is not None:
        text += f": {annotation}"
        if default is not None:
            text += f" = {default}"
    elif default is not None:
        text += f"={default}"
    return text


def _format_params(params: Sequence[Mapping[str, Any]]) -> str:
    parts: list[str] = []
    star_done = False
    pos_only_done = False
    for i, p in enumerate(params):
        kind = p.get("kind")
        if kind == "keyword_only" and not star_done:
            parts.append("*")
            star_done = True
        if kind == "var_positional":
            star_done = True
        parts.append(_format_param(p))
        nxt = params[i + 1].get("kind") if i + 1 < len(params) else None
        if kind == "positional_only" and nxt != "positional_only" and not pos_only_done and p.get("name") is not None:
            parts.append("/")
            pos_only_done = True
    return ", ".join(parts)


def format_signature(record: Mapping[str, Any] | None) -> str:
    """A one-line rendering of a Python surface record (``def f(a, b=1)``, ``native: op(...)``)."""
    if record is None:
        return "-"
    kind = record.get("kind")
    if kind in ("function", "alias"):
        name = str(record.get("qualname", "?")).rpartition(".")[2]
        text = f"def {name}({_format_params(record.get('params') or [])})"
        if record.get("returns_annotation"):
            text += f" -> {record['returns_annotation']}"
        return text
    if kind == "native":
        params = record.get("params")
        inner = "..." if params is None else _format_params(params)
        returns = record.get("returns") or "?"
        via = f" via {record['via']}" if record.get("via") else ""
        return f"native{via}: {record.get('op')}({inner}) -> {returns}"
    if kind == "class":
        name = str(record.get("qualname", "?")).rpartition(".")[2]
        return f"class {name}.__init__({_format_params(record.get('params') or [])})"
    if kind == "module":
        return f"module {record.get('module')}"
    if kind == "none":
        return "None"
    return f"value {record.get('value')}"


def _format_native(op: str, record: Mapping[str, Any] | None) -> str:
    if record is None:
        return "-"
    params = ", ".join(
        p["type"] if p.get("name") is None else f"{p['type']} {p['name']}" + (f"={p['default']}" if p.get("default") is not None else "")
        for p in record.get("params") or []
    )
    return f"{op}({params}) -> {record.get('returns') or '?'}"


def _format_call(call: Mapping[str, Any]) -> str:
    return f"_C.{call.get('op')}({', '.join(str(a) for a in call.get('args') or [])})"


# ---------------------------------------------------------------------------------------------
# Comparing
# ---------------------------------------------------------------------------------------------


def _default_key(text: Any) -> Any:
    """Defaults compare by value where they are literals (schema ``"nk"`` equals Python ``'nk'``)."""
    if not isinstance(text, str):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text
    if isinstance(value, list):
        value = tuple(value)
    return repr(value)


def _compare_params(
    symbol: str,
    before: Sequence[Mapping[str, Any]],
    after: Sequence[Mapping[str, Any]],
    *,
    native: bool = False,
    compare_types: bool = True,
) -> list[Change]:
    """Parameter-level changes, matching parameters by name (by position where names are unknown).

    ``compare_types`` is false when the two sides annotate in different vocabularies (a native
    op's kinds against Python annotations).
    """
    out: list[Change] = []
    type_change = "native-type-changed" if native else "annotation-changed"
    if any(p.get("name") is None for p in before) or any(p.get("name") is None for p in after):
        for i in range(min(len(before), len(after)) if compare_types else 0):
            tb, ta = before[i].get("annotation"), after[i].get("annotation")
            if tb != ta and tb is not None and ta is not None:
                label = after[i].get("name") or before[i].get("name") or f"#{i}"
                out.append(Change(type_change, symbol, f"argument #{i}: {tb} -> {ta}", tb, ta, str(label)))
        return out
    idx_b = {str(p["name"]): i for i, p in enumerate(before)}
    idx_a = {str(p["name"]): i for i, p in enumerate(after)}
    removed = [n for n in idx_b if n not in idx_a]
    added = [n for n in idx_a if n not in idx_b]
    renamed: list[tuple[str, str]] = []
    for old in list(removed):
        for new in added:
            if idx_b[old] == idx_a[new]:
                renamed.append((old, new))
                removed.remove(old)
                added.remove(new)
                break
    for old, new in renamed:
        out.append(Change("renamed-param", symbol, f"parameter #{idx_a[new]} renamed {old} -> {new}", old, new, new))
    for name in removed:
        p = before[idx_b[name]]
        default = p.get("default")
        was = f"default={default}" if default is not None else "required"
        out.append(Change("removed-param", symbol, f"removed parameter {name} (was #{idx_b[name]}, {was})", idx_b[name], None, name))
    for name in added:
        p = after[idx_a[name]]
        default = p.get("default")
        where = "appended" if idx_a[name] >= len(before) else "inserted"
        what = f"default={default}" if default is not None else "required"
        out.append(Change("added-param", symbol, f"added parameter {name} at #{idx_a[name]} ({where}, {what})", None, idx_a[name], name))
    for old_name, new_name in [(n, n) for n in idx_b if n in idx_a] + renamed:
        pb, pa = before[idx_b[old_name]], after[idx_a[new_name]]
        ib, ia = idx_b[old_name], idx_a[new_name]
        kb, ka = pb.get("kind"), pa.get("kind")
        if kb != ka:
            out.append(Change("param-kind-changed", symbol, f"{new_name}: {kb} -> {ka}", kb, ka, new_name))
        if ib != ia and (kb in _POSITIONAL or ka in _POSITIONAL):
            out.append(Change("moved-param", symbol, f"{new_name} moved from #{ib} to #{ia} (breaks positional callers)", ib, ia, new_name))
        db, da = pb.get("default"), pa.get("default")
        if db is not None and da is None:
            out.append(Change("became-required", symbol, f"{new_name} lost its default {db} (now required)", db, None, new_name))
        elif db is None and da is not None:
            out.append(Change("became-optional", symbol, f"{new_name} gained the default {da}", None, da, new_name))
        elif _default_key(db) != _default_key(da):
            out.append(Change("default-changed", symbol, f"default of {new_name}: {db} -> {da}", db, da, new_name))
        ab, aa = pb.get("annotation"), pa.get("annotation")
        if compare_types and ab != aa and (native or (ab is not None and aa is not None)):
            out.append(Change(type_change, symbol, f"type of {new_name}: {ab} -> {aa}", ab, aa, new_name))
    return out


def _native_params(record: Mapping[str, Any]) -> list[dict[str, Any]]:
    return [
        {"name": p.get("name"), "kind": "positional", "default": p.get("default"), "annotation": p.get("type")}
        for p in record.get("params") or []
    ]


def _compare_native(op: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[Change]:
    symbol = f"_C.{op}"
    if before is None and after is None:
        return []
    if before is None:
        assert after is not None
        return [Change("added-native", symbol, f"added {_format_native(op, after)}", None, _format_native(op, after))]
    if after is None:
        return [Change("removed-native", symbol, f"removed (was {_format_native(op, before)})", _format_native(op, before), None)]
    out: list[Change] = []
    pb, pa = before.get("params") or [], after.get("params") or []
    if len(pb) != len(pa):
        out.append(Change("native-arity-changed", symbol, f"arity {len(pb)} -> {len(pa)}", len(pb), len(pa)))
    out += _compare_params(symbol, _native_params(before), _native_params(after), native=True)
    rb, ra = before.get("returns"), after.get("returns")
    if rb is not None and ra is not None and rb != ra:
        out.append(Change("return-changed", symbol, f"returns {rb} -> {ra}", rb, ra))
    return out


def _ops_of(record: Mapping[str, Any] | None) -> set[str]:
    if record is None:
        return set()
    ops = {str(c.get("op")) for c in record.get("native_calls") or []}
    if record.get("kind") == "native":
        ops.add(str(record.get("op")))
    return ops


def _compare_symbol(name: str, before: Mapping[str, Any] | None, after: Mapping[str, Any] | None) -> list[Change]:
    if before is None and after is None:
        return []
    if before is None:
        assert after is not None
        kind = "added-function" if after.get("kind") in _CALLABLE_KINDS else "added-symbol"
        return [Change(kind, name, f"added: {format_signature(after)}", None, format_signature(after))]
    if after is None:
        kind = "removed-function" if before.get("kind") in _CALLABLE_KINDS else "removed-symbol"
        return [Change(kind, name, f"removed (was {format_signature(before)})", format_signature(before), None)]
    out: list[Change] = []
    kb, ka = before.get("kind"), after.get("kind")
    if kb != ka and not ({kb, ka} <= {"function", "alias"}):
        out.append(Change("kind-changed", name, f"{format_signature(before)} -> {format_signature(after)}", kb, ka))
    tb = before.get("alias_of") or before.get("qualname") or before.get("op") or before.get("module")
    ta = after.get("alias_of") or after.get("qualname") or after.get("op") or after.get("module")
    if kb == ka and tb != ta:
        out.append(Change("target-changed", name, f"bound to {tb} -> {ta}", tb, ta))
    if kb in _CALLABLE_KINDS and ka in _CALLABLE_KINDS:
        params_b, params_a = before.get("params"), after.get("params")
        if params_b is not None and params_a is not None:
            same_vocabulary = (kb == "native") == (ka == "native")
            out += _compare_params(name, params_b, params_a, compare_types=same_vocabulary)
        rb, ra = before.get("returns"), after.get("returns")
        if kb == ka and rb is not None and ra is not None and rb != ra:
            out.append(Change("return-changed", name, f"returns {rb} -> {ra}", rb, ra))
        cb = [_format_call(c) for c in before.get("native_calls") or []]
        ca = [_format_call(c) for c in after.get("native_calls") or []]
        if cb != ca and (cb or ca) and {kb, ka} <= {"function", "alias"}:
            out.append(Change("native-call-changed", name, f"{'; '.join(cb) or '-'} -> {'; '.join(ca) or '-'}", "; ".join(cb), "; ".join(ca)))
    elif kb == ka and before.get("value") != after.get("value"):
        out.append(Change("target-changed", name, f"value {before.get('value')} -> {after.get('value')}", before.get("value"), after.get("value")))
    return out


def diff(
    a: Mapping[str, Any],
    b: Mapping[str, Any],
    *,
    symbols: Collection[str] | None = None,
    all_symbols: bool = False,
    native: bool = True,
) -> list[Change]:
    """Changes from surface ``a`` to surface ``b``.

    ``symbols`` restricts the Python names compared (qualified); the default is the
    engine-relevant set (:func:`is_engine_symbol`), ``all_symbols=True`` compares every name.
    With ``native`` the ops bound or called by the compared names are compared as well (every
    op with ``all_symbols``).
    """
    changes: list[Change] = []
    if a.get("binding") != b.get("binding"):
        changes.append(Change("binding-changed", "deep_gemm", f"binding {a.get('binding')} -> {b.get('binding')}", a.get("binding"), b.get("binding")))
    if a.get("torch_build") != b.get("torch_build"):
        changes.append(Change("torch-changed", "deep_gemm", f"built against torch {a.get('torch_build')} -> {b.get('torch_build')}", a.get("torch_build"), b.get("torch_build")))
    req_a, req_b = list(a.get("requires_dist") or []), list(b.get("requires_dist") or [])
    if "deep_gemm" not in (a.get("package_path") or "deep_gemm", b.get("package_path") or "deep_gemm"):
        # A copy inside an engine: the Requires-Dist are the engine's; only its torch pin concerns the copy.
        req_a, req_b = ([r for r in reqs if r.replace(" ", "").lower().startswith("torch") and not r.lower().startswith(
            ("torchaudio", "torchvision", "torchcodec", "torch_", "torch-"))] for reqs in (req_a, req_b))
    for req in req_a:
        if req not in req_b:
            changes.append(Change("requires-changed", "deep_gemm", f"Requires-Dist removed: {req}", req, None))
    for req in req_b:
        if req not in req_a:
            changes.append(Change("requires-changed", "deep_gemm", f"Requires-Dist added: {req}", None, req))

    py_a: Mapping[str, Any] = a.get("python") or {}
    py_b: Mapping[str, Any] = b.get("python") or {}
    names = sorted(set(py_a) | set(py_b))
    if symbols is not None:
        wanted = set(symbols)
        names = [n for n in names if n in wanted]
    elif not all_symbols:
        names = [n for n in names if is_engine_symbol(n)]
    ops: set[str] = set()
    for name in names:
        changes += _compare_symbol(name, py_a.get(name), py_b.get(name))
        ops |= _ops_of(py_a.get(name)) | _ops_of(py_b.get(name))

    if native:
        nat_a: Mapping[str, Any] = a.get("native") or {}
        nat_b: Mapping[str, Any] = b.get("native") or {}
        if all_symbols:
            ops = set(nat_a) | set(nat_b)
        for op in sorted(ops):
            changes += _compare_native(op, nat_a.get(op), nat_b.get(op))
    return changes


def _label(a: Mapping[str, Any]) -> str:
    release = a.get("release") or {}
    if release.get("version"):
        return f"{release.get('name')} {release.get('version')}"
    source = a.get("source") or {}
    return str(source.get("name") or "?")


def render_changes(changes: Iterable[Change], a: Mapping[str, Any] | None = None, b: Mapping[str, Any] | None = None) -> str:
    """Human-readable text, one change per line, grouped by symbol."""
    lines: list[str] = []
    if a is not None and b is not None:
        lines.append(f"{_label(a)} -> {_label(b)}")
    current: str | None = None
    count = 0
    for change in changes:
        count += 1
        if change.symbol != current:
            current = change.symbol
            lines.append(f"{change.symbol}:")
        lines.append(f"  {change.kind:<20} {change.detail}")
    if count == 0:
        lines.append("no changes")
    return "\n".join(lines) + "\n"


def changes_to_json(changes: Iterable[Change], a: Mapping[str, Any] | None = None, b: Mapping[str, Any] | None = None) -> str:
    """The changes as a JSON document (``{"from", "to", "changes": [...]}``), keys sorted."""
    doc: dict[str, Any] = {"changes": [c.to_json() for c in changes]}
    if a is not None and b is not None:
        doc["from"], doc["to"] = a.get("release") or a.get("source"), b.get("release") or b.get("source")
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"
