"""Mapping surface changes onto the capability rows that cover them, and what each means for dgcompat."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from dgcompat.table import ROWS, Capabilities

from ..surface import Change
from ..surface.fingerprint import PARTS, Difference, compare, part_ids
from ._surface import Surface, _dg, _param, _record
from .calls import _ALTERNATIVE_OF, _USES, UpstreamCall
from .claims import _label, _mismatches, capabilities_of, check_torch, release_of

__all__ = ["ROW_TOUCHES", "RELEASE_TOUCHES", "STATUSES", "MappedChange", "map_changes", "render_mapped",
           "mapped_to_json", "fingerprint_lines", "rows_touched", "render_differences"]


def _touches() -> dict[tuple[str, str | None], tuple[str, ...]]:
    t: dict[tuple[str, str | None], tuple[str, ...]] = {}
    for name in ("set_pdl", "get_pdl"):
        t[(_dg(name), None)] = ("pdl",)
        t[(f"_C.{name}", None)] = ("pdl",)
    for name in ("set_compile_mode", "get_compile_mode"):
        t[(_dg(name), None)] = ("compile_mode",)
    for name in ("m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_fp4_gemm_nt_contiguous"):
        t[(_dg(name), "grouped_layout")] = ("contiguous_layout_param",)
        t[(_dg(name), "m_indices")] = ("contiguous_layout_param",)
        # 0.1.4 inserted ensure_zero_padding before expected_m_for_psum_layout: both slots are the row's.
        t[(_dg(name), "ensure_zero_padding")] = ("ensure_zero_padding_position",)
        t[(_dg(name), "expected_m_for_psum_layout")] = ("ensure_zero_padding_position",)
    t[(_dg("m_grouped_bf16_gemm_nt_contiguous"), None)] = ("bf16_grouped_contiguous",)
    t[(_dg("m_grouped_bf16_gemm_nt_contiguous"), "grouped_layout")] = ("contiguous_layout_param",)
    t[(_dg("m_grouped_bf16_gemm_nt_contiguous"), "m_indices")] = ("contiguous_layout_param",)
    for name in ("m_grouped_bf16_gemm_nt_masked", "bf16_m_grouped_gemm_nt_masked"):
        t[(_dg(name), None)] = ("bf16_grouped_masked",)
    for name in ("m_grouped_fp8_gemm_nt_masked", "fp8_m_grouped_gemm_nt_masked"):
        t[(_dg(name), None)] = ("masked_gemm",)
        t[(_dg(name), "return")] = ("masked_returns",)
        for param in ("enable_overlap", "max_block_n", "signal"):
            t[(_dg(name), param)] = ("masked_overlap",)
    for op in ("m_grouped_fp8_fp4_gemm_nt_masked", "m_grouped_fp8_gemm_nt_masked"):
        t[(f"_C.{op}", "return")] = ("masked_returns",)
    for name in ("fp8_mqa_logits", "fp8_fp4_mqa_logits"):
        t[(_dg(name), None)] = ("mqa_logits", "mqa_clean_logits", "mqa_max_seqlen_k")
        t[(_dg(name), "return")] = ("raw_ffi_returns",)
        t[(_dg(name), "clean_logits")] = ("mqa_clean_logits",)
        t[(_dg(name), "max_seqlen_k")] = ("mqa_max_seqlen_k",)
        t[(_dg(name), "logits_dtype")] = ("mqa_logits_dtype", "indexer_weights")
        # schedule_meta's slot follows clean_logits / logits_dtype (0.2.5 removed both before it).
        t[(_dg(name), "schedule_meta")] = ("mqa_clean_logits", "mqa_logits_dtype")
    for name in ("fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits"):
        t[(_dg(name), None)] = ("paged_mqa_logits",)
        t[(_dg(name), "return")] = ("raw_ffi_returns",)
        t[(_dg(name), "clean_logits")] = ("paged_clean_logits", "paged_clean_logits_arg")
        t[(_dg(name), "context_lens")] = ("paged_context_lens",)
        t[(_dg(name), "indices")] = ("paged_indices",)
        t[(_dg(name), "logits_dtype")] = ("paged_logits_dtype", "indexer_weights")
    t[(_dg("get_paged_mqa_logits_metadata"), "return")] = ("raw_ffi_returns",)
    t[(_dg("get_paged_mqa_logits_metadata"), "context_lens")] = ("paged_context_lens",)
    t[(_dg("get_paged_mqa_logits_metadata"), "indices")] = ("paged_indices",)
    t[(_dg("get_theoretical_mk_alignment_for_contiguous_layout"), "num_groups")] = ("mk_alignment_arity",)
    t[(_dg("transform_sf_into_required_layout"), "return")] = ("collapsed_strides",)
    t[(_dg("transform_sf_into_required_layout"), "is_sfa")] = ("transform_sf_is_sfa",)
    for name in ("get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor"):
        t[(_dg(name), "return")] = ("collapsed_strides",)
        t[(_dg(f"utils.layout.{name}"), "return")] = ("collapsed_strides",)
    return t


#: ``(symbol, param)`` -> the capability rows that cover a change there. ``param`` None: the
#: symbol's presence or kind; ``"return"``: what it returns; otherwise a parameter name.
ROW_TOUCHES: Mapping[tuple[str, str | None], tuple[str, ...]] = _touches()

#: Release-wide change kinds (symbol ``deep_gemm``) -> the rows that cover them.
RELEASE_TOUCHES: Mapping[str, tuple[str, ...]] = {
    "binding-changed": ("collapsed_strides", "raw_ffi_returns", "masked_returns"),
}

#: What :attr:`MappedChange.status` means.
STATUSES: Mapping[str, str] = {
    "handled": "a table row covers it (and agrees with the new surface)",
    "drift": "unhandled drift: something dgcompat relies on changed and no row covers it, or the covering row "
             "disagrees with the new surface",
    "new-row": "a change in something dgcompat calls that does not break its calls, but no row records it",
    "compatible": "cannot affect the calls dgcompat makes",
    "irrelevant": "a symbol dgcompat never calls",
}


class MappedChange(NamedTuple):
    """A :class:`~dgcompat_conformance.surface.Change` with the rows that cover it and what it means for dgcompat.

    ``handled`` is true when nothing needs doing (status ``handled``, ``compatible`` or
    ``irrelevant``); ``status`` is one of :data:`STATUSES`; ``reason`` says why, in words.
    """

    change: Change
    rows: list[str]
    handled: bool
    status: str
    reason: str


_SYMBOL_KINDS = frozenset({"added-function", "removed-function", "added-symbol", "removed-symbol", "kind-changed",
                           "target-changed", "added-native", "removed-native"})


def _position(surface: Surface | None, symbol: str, name: str) -> int | None:
    if surface is None:
        return None
    found = _param(_record(surface, symbol), name)
    return None if found is None else found[0]


def _param_default(surface: Surface | None, symbol: str, name: str) -> tuple[bool, Any]:
    """(known, default) of a parameter in ``surface``."""
    if surface is None:
        return False, None
    found = _param(_record(surface, symbol), name)
    return (False, None) if found is None else (True, found[1].get("default"))


def _safe_caps(surface: Surface | None, arch: str) -> Capabilities | None:
    if surface is None:
        return None
    try:
        return capabilities_of(surface, arch=arch)
    except (ValueError, KeyError):
        return None


def _rows_for(change: Change) -> list[str]:
    if change.symbol == "deep_gemm":
        return list(RELEASE_TOUCHES.get(change.kind, ()))
    if change.kind == "return-changed":
        keys: list[tuple[str, str | None]] = [(change.symbol, "return")]
    elif change.kind in _SYMBOL_KINDS or (change.param is None and change.symbol.startswith("_C.")):
        keys = [(change.symbol, None)]
    elif change.param is None:
        # A wrapper's own native call: no row is about how the wrapper reaches the library.
        keys = []
    else:
        keys = [(change.symbol, change.param)]
        if change.kind == "renamed-param" and isinstance(change.before, str):
            keys.append((change.symbol, change.before))
    rows: list[str] = []
    for key in keys:
        for row in ROW_TOUCHES.get(key, ()):
            if row not in rows:
                rows.append(row)
    return rows


def _slot(use: UpstreamCall, index: int) -> str:
    if index < len(use.expected_positional(None)):
        return f"a slot {use.caller} fills by position"
    return f"a slot of the documented signature (dgcompat.resolve hands {use.symbol} to engines)"


def _param_relied(change: Change, use: UpstreamCall, caps_before: Capabilities | None, caps_after: Capabilities | None,
                  before: Surface | None, after: Surface | None) -> tuple[bool | None, str]:
    """(relied, why) for a parameter-level change: True breaks a call, None = a change worth a row, False = not."""
    name = change.param or ""
    old = change.before if change.kind == "renamed-param" and isinstance(change.before, str) else name
    relied = use.relied_names()
    # Only the releases on which this symbol is the one called decide which slots are filled.
    sides = [c for c in (caps_before, caps_after) if use.in_effect(c)] or [None]
    n_pos = max(len(use.expected_positional(c)) for c in sides)
    if use.passthrough:
        n_pos = max(n_pos, len(use.positional) + len(use.keywords))
    passed_positionally = {n for e in use.expected_positional(None) for n in e.split("|")}
    kind = change.kind
    caller = use.caller
    if kind == "removed-param":
        if old in relied:
            return True, f"{caller} passes {old}"
        return False, "removed a parameter dgcompat does not pass"
    if kind == "renamed-param":
        if old in use.keywords:
            return True, f"{caller} passes {old}= by keyword"
        if old in relied and name not in relied:
            return True, f"{caller} passes {old} at this slot; the slot now means {name}"
        return False, "renamed a parameter dgcompat passes by position (or not at all)"
    if kind == "moved-param":
        if old in relied and (old in passed_positionally or use.passthrough):
            return True, f"{caller} relies on {old} at #{change.before}"
        if isinstance(change.after, int) and change.after < n_pos:
            return True, f"{name} moved into #{change.after}, {_slot(use, change.after)}"
        return False, "moved a parameter dgcompat passes by keyword (or not at all)"
    if kind == "added-param":
        at = change.after if isinstance(change.after, int) else None
        if at is not None and at < n_pos:
            return True, f"inserted at #{at}, {_slot(use, at)}: shifts everything after it"
        known, default = _param_default(after, change.symbol, name)
        required = default is None if known else "required" in change.detail
        if required and name not in relied:
            return True, f"a new required parameter {caller} does not pass"
        return False, "an optional parameter after the ones dgcompat passes"
    if kind == "param-kind-changed":
        if old in relied:
            return True, f"{caller} passes {old}; its kind changed ({change.before} -> {change.after})"
        return False, "a parameter dgcompat does not pass"
    if kind == "became-required":
        if name in relied:
            return False, f"{caller} always passes {name}"
        pos = _position(after, change.symbol, name)
        if pos is not None and pos < n_pos:
            return False, f"{caller} fills #{pos} by position"
        return True, f"{name} is now required and {caller} does not pass it"
    if kind == "default-changed":
        if name in relied:
            return False, f"{caller} passes {name} explicitly"
        return None, f"the default of {name} (not passed by dgcompat) changed: behaviour may change silently"
    if kind in ("annotation-changed", "native-type-changed"):
        if name in relied:
            return None, f"the type of {name}, which {caller} passes, changed"
        return False, "the type of a parameter dgcompat does not pass"
    if kind == "native-arity-changed":
        return True, f"{caller} calls the op directly; its arity changed"
    return False, "does not change a parameter dgcompat passes"


def _symbol_relied(change: Change, use: UpstreamCall, after: Surface | None) -> tuple[bool | None, str]:
    kind = change.kind
    if kind in ("removed-function", "removed-symbol", "removed-native") or (kind == "kind-changed" and change.after == "none"):
        if use.optional:
            return False, f"{use.caller} is a no-op without it"
        present = [alt for alt in use.alternatives if after is not None and _record(after, alt) is not None]
        if present:
            return False, f"{use.caller} falls back to {present[0]}"
        return True, f"{use.caller} calls it"
    if kind in ("added-function", "added-symbol", "added-native"):
        return None, f"{use.caller} may start calling it"
    if kind == "return-changed":
        if use.uses_result:
            return True, f"{use.caller} uses what it returns"
        return False, f"{use.caller} ignores what it returns"
    if kind in ("kind-changed", "target-changed"):
        return None, f"what {use.caller} calls is now bound differently"
    if kind == "native-call-changed":
        return False, "the wrapper's own call into the native library changed; its signature is what dgcompat calls"
    return None, "changed"


def _torch_status(after: Surface | None) -> tuple[str, str]:
    try:
        rel = release_of(after) if after is not None else None
    except ValueError:
        rel = None
    if rel is None or rel.expected_torch is None:
        return "new-row", "the native library's torch changed: EXPECTED_TORCH needs a row for this release"
    problems = check_torch(after) if after is not None else []
    if problems:
        return "drift", problems[0]
    return "handled", f"EXPECTED_TORCH pairs {rel.dist} {rel.version} with torch{rel.expected_torch}"


def _classify(change: Change, uses: Sequence[UpstreamCall], rows: list[str], lying: set[str],
              caps_before: Capabilities | None, caps_after: Capabilities | None,
              before: Surface | None, after: Surface | None) -> tuple[str, str]:
    """(status, reason) of one change."""
    if change.symbol == "deep_gemm":
        if rows:
            bad = [r for r in rows if r in lying]
            if bad:
                return "drift", f"row(s) {', '.join(bad)} disagree with the new surface"
            return "handled", "release-wide change the rows cover"
        if change.kind == "torch-changed":
            return _torch_status(after)
        return "compatible", "packaging metadata"
    primary = _ALTERNATIVE_OF.get(change.symbol)
    if not uses and primary is not None:
        # A fallback is called only where the primary name is missing.
        if all(side is not None and _record(side, primary.symbol) is not None for side in (before, after)):
            return "irrelevant", f"dgcompat calls {primary.symbol}, which both releases have"
        uses = [primary]
    if not uses:
        if change.symbol.startswith("_C.") and rows:
            bad = [r for r in rows if r in lying]
            if bad:
                return "drift", f"row(s) {', '.join(bad)} disagree with the new surface"
            return "handled", "the native result a wrapper hands back; the rows cover it"
        if change.symbol.startswith("_C."):
            return "compatible", "a native op behind a Python wrapper; the wrapper's signature is what dgcompat calls"
        return "irrelevant", "dgcompat never calls it"
    active = [u for u in uses if u.in_effect(caps_before) or u.in_effect(caps_after)]
    if not active:
        return "irrelevant", f"dgcompat calls another symbol on these releases ({uses[0].selected_by})"
    verdicts: list[tuple[bool | None, str]] = []
    for use in active:
        if change.kind in _SYMBOL_KINDS or change.kind in ("return-changed", "native-call-changed"):
            verdicts.append(_symbol_relied(change, use, after))
        else:
            verdicts.append(_param_relied(change, use, caps_before, caps_after, before, after))
    relied = next((v for v in verdicts if v[0] is True), None) or next((v for v in verdicts if v[0] is None), None) \
        or verdicts[0]
    if rows:
        bad = [r for r in rows if r in lying]
        if bad:
            return "drift", f"{relied[1]}; row(s) {', '.join(bad)} disagree with the new surface"
        return "handled", relied[1]
    if relied[0] is True:
        return "drift", relied[1]
    if relied[0] is None:
        return "new-row", relied[1]
    return "compatible", relied[1]


def map_changes(changes: Iterable[Change], *, before: Surface | None = None, after: Surface | None = None,
                arch: str = "sm90") -> list[MappedChange]:
    """Map each change onto the capability rows it touches and classify it (see :data:`STATUSES`).

    ``before``/``after`` (the two surfaces) sharpen the answer: the calls in effect on each
    release follow the table (a change to ``fp8_fp4_mqa_logits`` is irrelevant while dgcompat
    calls ``fp8_mqa_logits``), a missing symbol's fallback is looked up, and a covering row
    that disagrees with ``after`` (see :func:`check_table`) makes its changes drift.
    """
    caps_before = _safe_caps(before, arch)
    caps_after = _safe_caps(after, arch)
    lying: set[str] = set()
    if after is not None and caps_after is not None:
        lying = {name for name, _t, _s, _r in _mismatches(after, arch)}
    out: list[MappedChange] = []
    for change in changes:
        uses = list(_USES.get(change.symbol, ()))
        rows = _rows_for(change)
        status, reason = _classify(change, uses, rows, lying, caps_before, caps_after, before, after)
        if change.kind == "torch-changed" and status == "handled":
            rows = ["EXPECTED_TORCH"]  # the torch pairing lives in dgcompat.detection, not in the capability table
        if status == "irrelevant":
            rows = []  # rows cover the calls dgcompat makes; an uncalled symbol is covered by none
        out.append(MappedChange(change, rows, status in ("handled", "compatible", "irrelevant"), status, reason))
    return out


def _drift(mapped: Iterable[MappedChange]) -> list[MappedChange]:
    return [m for m in mapped if m.status == "drift"]


def _where(m: MappedChange) -> str:
    param = f" {m.change.param}" if m.change.param else ""
    return f"{m.change.symbol} {m.change.kind}{param}: {m.change.detail} -- {m.reason}"


def render_mapped(mapped: Sequence[MappedChange], a: Surface | None = None, b: Surface | None = None, *,
                  table_problems: Sequence[str] | None = None, call_problems: Sequence[str] | None = None) -> str:
    """Text: every change with its rows and status, then the unhandled drift and the rows needed."""
    lines: list[str] = []
    if a is not None and b is not None:
        lines.append(f"{_label(a)} -> {_label(b)}")
    current: str | None = None
    for m in mapped:
        c = m.change
        if c.symbol != current:
            current = c.symbol
            lines.append(f"{c.symbol}:")
        lines.append(f"  {c.kind:<20} {c.detail}")
        rows = f" [rows: {', '.join(m.rows)}]" if m.rows else ""
        lines.append(f"  {'':<20} -> {m.status}{rows}: {m.reason}")
    if not mapped:
        lines.append("no changes")
    drift = _drift(mapped)
    lines.append("")
    lines.append(f"unhandled drift ({len(drift)}):" if drift else "unhandled drift: none")
    lines += [f"  {_where(m)}" for m in drift]
    needed = [m for m in mapped if m.status == "new-row"]
    if needed:
        lines.append(f"new rows needed ({len(needed)}):")
        lines += [f"  {_where(m)}" for m in needed]
    if table_problems is not None and b is not None:
        if table_problems:
            lines.append(f"capability table vs {_label(b)} ({len(table_problems)}):")
            lines += [f"  {p}" for p in table_problems]
        else:
            lines.append(f"capability table: agrees with {_label(b)}")
    if call_problems:
        lines.append(f"calls dgcompat makes that no longer fit ({len(call_problems)}):")
        lines += [f"  {p}" for p in call_problems]
    if a is not None and b is not None:
        lines += fingerprint_lines(a, b)
    return "\n".join(lines) + "\n"


def fingerprint_lines(a: Surface, b: Surface) -> list[str]:
    """The two builds' fingerprints, part by part, what differs and the rows it touches (nothing when a surface
    carries no fingerprint)."""
    fa, fb = a.get("fingerprint"), b.get("fingerprint")
    if not isinstance(fa, dict) or not isinstance(fb, dict):
        return []
    ia, ib = part_ids(fa), part_ids(fb)
    parts = ", ".join(f"{p} {ia[p] or 'not read'}" + (f" -> {ib[p] or 'not read'}" if ia[p] != ib[p] else " (same)")
                      for p in PARTS)
    head = f"fingerprint: {fa.get('id')} -> {fb.get('id')}" if fa.get("id") != fb.get("id") else \
        f"fingerprint: {fa.get('id')} (the same build surface)"
    return [head, f"  {parts}"] + [f"  {line}" for line in render_differences(compare(fb, fa))]


def mapped_to_json(mapped: Sequence[MappedChange], a: Surface | None = None, b: Surface | None = None, *,
                   table_problems: Sequence[str] | None = None, call_problems: Sequence[str] | None = None) -> str:
    """The mapped changes as JSON: ``changes`` (each change plus ``rows``/``status``/``reason``), ``unhandled_drift``."""
    items = []
    for m in mapped:
        item: dict[str, Any] = dict(m.change.to_json())
        item.update(rows=list(m.rows), status=m.status, handled=m.handled, reason=m.reason)
        items.append(item)
    doc: dict[str, Any] = {
        "changes": items,
        "unhandled_drift": [i for i in items if i["status"] == "drift"],
        "new_rows_needed": [i for i in items if i["status"] == "new-row"],
    }
    if a is not None and b is not None:
        doc["from"], doc["to"] = a.get("release") or a.get("source"), b.get("release") or b.get("source")
    if table_problems is not None:
        doc["table_problems"] = list(table_problems)
    if call_problems is not None:
        doc["call_problems"] = list(call_problems)
    if a is not None and b is not None and isinstance(a.get("fingerprint"), dict) and isinstance(b.get("fingerprint"), dict):
        diffs = compare(b["fingerprint"], a["fingerprint"])
        probes, rows = rows_touched(diffs)
        doc["fingerprint"] = {"from": a["fingerprint"].get("id"), "to": b["fingerprint"].get("id"),
                              "differences": [{"part": d.part, "names": list(d.names), "detail": d.detail} for d in diffs],
                              "probes": probes, "rows": rows}
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


def rows_touched(differences: Iterable[Difference]) -> tuple[list[str], list[str]]:
    """(capability probes, table rows) a set of differences touches.

    Probes: the capability table's rows of kind ``signature`` / ``presence`` whose probe names a function,
    parameter or op that differs (the runtime answers them from the build itself). Table rows: the
    capabilities the intake maps changes of those names onto (:data:`ROW_TOUCHES`),
    answered by version, which a build of the same version with another surface may contradict.
    """
    names: set[str] = set()
    pairs: set[tuple[str, str | None]] = set()
    for d in differences:
        for n in d.names:
            names.add(n)
            sym = f"_C.{n}" if d.part == "native" else f"deep_gemm.{n}"
            pairs.add((sym, None))
            if d.part == "native":
                pairs.add((f"deep_gemm.{n}", None))
            pairs.update((sym, p) for p in d.params)
    probes: list[str] = []
    for row in ROWS:
        if row.kind not in ("signature", "presence") or not row.probe:
            continue
        fn = row.probe.split(":", 1)[0]
        targets = {t.split(".")[-1] for t in fn.split("|")}
        if targets & names and row.capability not in probes:
            probes.append(row.capability)
    table: list[str] = []
    for key, caps in ROW_TOUCHES.items():
        if key in pairs:
            table += [c for c in caps if c not in table and c not in probes]
    return probes, table


def render_differences(differences: list[Difference]) -> list[str]:
    """One line per difference, then the probes and rows they touch."""
    lines = [f"{d.part}: {d.detail}" for d in differences]
    probes, table = rows_touched(differences)
    if probes:
        lines.append("answered from the build itself (capability probes): " + ", ".join(probes))
    if table:
        lines.append("table rows answered by version that these touch: " + ", ".join(table))
    return lines
