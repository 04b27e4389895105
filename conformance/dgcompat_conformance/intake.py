"""New-release intake: hold the capability table against extracted surfaces, and judge a new release.

Three questions are answered here, all from surfaces (:func:`dgcompat_conformance.surface.extract`), never by
importing deep_gemm:

* **Does the table tell the truth?** :data:`SURFACE_CLAIMS` computes, for every capability whose
  answer a surface shows, what the surface says; :func:`check_table` compares that with what
  :func:`dgcompat.table.compute` answers for the same release. :func:`check_calls` checks that
  every call dgcompat's adapters make (:data:`STABLE_USES`: which parameters they pass by
  position and by keyword) fits the release's signatures.
* **What does a change between two releases touch?** :func:`map_changes` maps each
  :class:`~dgcompat_conformance.surface.Change` onto the table rows that cover it (:data:`ROW_TOUCHES`) and
  sorts it into ``handled``, ``drift`` (unhandled drift: something dgcompat relies on changed and
  no row covers it, or the covering row disagrees with the new surface), ``new-row`` (a change
  in something dgcompat calls that does not break its calls but no row records),
  ``compatible`` (cannot affect dgcompat's calls) or ``irrelevant`` (a symbol dgcompat never
  calls).
* **Is the newest release on the index safe?** :func:`latest` resolves it, diffs it against the
  newest certified release, checks the table and the call shapes, runs the CPU tier and returns
  a :class:`Verdict`: ``safe``, ``safe with new rows needed`` or ``breaking``.
  :func:`main_latest` is the ``dgcompat conform --latest`` command.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, NamedTuple

from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from dgcompat._calls import UpstreamCall, all_calls
from dgcompat.detection import KNOWN_SGL_DEEP_GEMM, Release, _expected_torch
from .surface import Change, SurfaceError, diff, extract, is_engine_symbol
from dgcompat.table import Capabilities, compute, lookup

__all__ = [
    "SURFACE_CLAIMS",
    "NOT_SURFACE_VISIBLE",
    "UpstreamCall",
    "STABLE_USES",
    "ROW_TOUCHES",
    "RELEASE_TOUCHES",
    "STATUSES",
    "MappedChange",
    "IntakeError",
    "CpuTier",
    "Verdict",
    "VERDICTS",
    "release_of",
    "capabilities_of",
    "check_table",
    "check_calls",
    "check_torch",
    "intake_symbols",
    "diff_surfaces",
    "map_changes",
    "render_mapped",
    "mapped_to_json",
    "index_versions",
    "newest_on_index",
    "newest_certified",
    "run_cpu_tier",
    "latest",
    "build_latest_parser",
    "main_latest",
]

Surface = Mapping[str, Any]

SGL = "sgl-deep-gemm"
_BUNDLING = ("sgl-kernel", "sglang-kernel")
_DG = "deep_gemm."


def _dg(name: str) -> str:
    return _DG + name


# ---------------------------------------------------------------------------------------------
# Reading a surface
# ---------------------------------------------------------------------------------------------


def _record(surface: Surface, name: str) -> Mapping[str, Any] | None:
    """The Python record of ``deep_gemm.<name>`` (or ``_C.<op>``), None when absent or bound to None."""
    if name.startswith("_C."):
        op = (surface.get("native") or {}).get(name[3:])
        if op is None:
            return None
        # A native op seen directly: the same shape as a ``kind: native`` Python record.
        return {
            "kind": "native",
            "op": name[3:],
            "returns": op.get("returns"),
            "params": [{"name": p.get("name"), "kind": "positional", "default": p.get("default"),
                        "annotation": p.get("type")} for p in op.get("params") or []],
        }
    qualified = name if name.startswith(_DG) else _dg(name)
    rec = (surface.get("python") or {}).get(qualified)
    # deep_gemm binds some names to None where the feature is missing; a probe sees that as absent.
    if rec is None or rec.get("kind") == "none":
        return None
    result: Mapping[str, Any] = rec
    return result


def _params(rec: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((rec or {}).get("params") or [])


def _param(rec: Mapping[str, Any] | None, name: str) -> tuple[int, Mapping[str, Any]] | None:
    for i, p in enumerate(_params(rec)):
        if p.get("name") == name:
            return i, p
    return None


def _first_present(surface: Surface, *names: str) -> str | None:
    for name in names:
        if _record(surface, name) is not None:
            return name
    return None


def _returned_op(rec: Mapping[str, Any]) -> str | None:
    """The op whose result ``rec`` hands back unchanged, or None (returns nothing, or wraps it)."""
    if rec.get("kind") == "native":
        return str(rec.get("op"))
    m = re.fullmatch(r"_C\.(\w+)", str(rec.get("returns") or ""))
    return m.group(1) if m else None


def _schema_result(surface: Surface, op: str, rec: Mapping[str, Any]) -> str:
    """What a native op returns, in the table's vocabulary (``none``, ``tuple``, ``native-result``)."""
    returns = rec.get("returns") if rec.get("kind") == "native" else ((surface.get("native") or {}).get(op) or {}).get("returns")
    if returns is None:  # tvm-ffi ops carry no schema: the caller gets whatever the function returns
        return "native-result"
    text = str(returns).replace(" ", "")
    if text == "()":
        return "none"
    if text.startswith("(") and "," in text:
        return "tuple"
    return "native-result"


# ---------------------------------------------------------------------------------------------
# What a surface says about each capability
# ---------------------------------------------------------------------------------------------


def _claim_compile_mode(s: Surface) -> bool:
    return _record(s, "set_compile_mode") is not None


def _claim_pdl(s: Surface) -> str | None:
    if _record(s, "set_pdl") is not None:
        return "top-level"
    if "set_pdl" in (s.get("native") or {}):
        return "native"
    return None


def _contiguous(s: Surface) -> Mapping[str, Any] | None:
    # dgcompat falls back to the fp8_fp4 name where the fp8 alias is missing (moe._bind_contiguous).
    return _record(s, "m_grouped_fp8_gemm_nt_contiguous") or _record(s, "m_grouped_fp8_fp4_gemm_nt_contiguous")


def _claim_contiguous_layout_param(s: Surface) -> str | None:
    params = _params(_contiguous(s))
    return str(params[3].get("name")) if len(params) > 3 and params[3].get("name") is not None else None


def _claim_ensure_zero_padding_position(s: Surface) -> int | None:
    found = _param(_contiguous(s), "ensure_zero_padding")
    return None if found is None else found[0]


def _claim_bf16_grouped_contiguous(s: Surface) -> bool:
    return _record(s, "m_grouped_bf16_gemm_nt_contiguous") is not None


def _claim_bf16_grouped_masked(s: Surface) -> bool:
    return _record(s, "m_grouped_bf16_gemm_nt_masked") is not None


def _claim_masked_gemm(s: Surface) -> str | None:
    return _first_present(s, "m_grouped_fp8_gemm_nt_masked", "fp8_m_grouped_gemm_nt_masked")


def _masked(s: Surface) -> Mapping[str, Any] | None:
    name = _claim_masked_gemm(s)
    return None if name is None else _record(s, name)


def _claim_masked_overlap(s: Surface) -> bool:
    return _param(_masked(s), "enable_overlap") is not None


def _claim_masked_returns(s: Surface) -> str | None:
    rec = _masked(s)
    if rec is None:
        return None
    op = _returned_op(rec)
    if op is not None:
        return _schema_result(s, op, rec)
    return "none" if rec.get("returns") == "None" else "native-result"


def _claim_mqa_logits(s: Surface) -> str | None:
    # The probe order of the table: fp8_mqa_logits wins where both exist.
    return _first_present(s, "fp8_mqa_logits", "fp8_fp4_mqa_logits")


def _mqa(s: Surface) -> Mapping[str, Any] | None:
    name = _claim_mqa_logits(s)
    return None if name is None else _record(s, name)


def _claim_mqa_clean_logits(s: Surface) -> str | None:
    rec = _mqa(s)
    if rec is None:
        return None
    return "native" if _param(rec, "clean_logits") is not None else "emulated"


def _claim_mqa_max_seqlen_k(s: Surface) -> str | None:
    rec = _mqa(s)
    if rec is None:
        return None
    found = _param(rec, "max_seqlen_k")
    if found is None:
        return "absent"
    return "required" if found[1].get("default") is None else "optional"


def _claim_paged_mqa_logits(s: Surface) -> str | None:
    return _first_present(s, "fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits")


def _claim_paged_clean_logits_arg(s: Surface) -> str | None:
    name = _claim_paged_mqa_logits(s)
    found = _param(_record(s, name), "clean_logits") if name else None
    if found is None:
        return "absent"
    return "required" if found[1].get("default") is None else "optional"


def _claim_paged_indices(s: Surface) -> bool | None:
    name = _claim_paged_mqa_logits(s)
    meta = _record(s, "get_paged_mqa_logits_metadata")
    if name is None or meta is None:
        return None
    return _param(_record(s, name), "indices") is not None and _param(meta, "indices") is not None


def _claim_collapsed_strides(s: Surface) -> bool:
    return s.get("binding") == "tvm-ffi"


def _claim_raw_ffi_returns(s: Surface) -> bool:
    name = _claim_paged_mqa_logits(s)
    rec = None if name is None else _record(s, name)
    # 0.2.0+ wraps the paged result with _from_dlpack_if_needed; before, the tvm-ffi object came back.
    return s.get("binding") == "tvm-ffi" and rec is not None and _returned_op(rec) is not None


def _claim_transform_sf_is_sfa(s: Surface) -> str | None:
    found = _param(_record(s, "transform_sf_into_required_layout"), "is_sfa")
    if found is None:
        return None
    return "optional" if found[1].get("default") == "None" else "bool"


#: Capability -> what a surface says about it (the same vocabulary as :class:`~dgcompat.table.Capabilities`).
SURFACE_CLAIMS: Mapping[str, Callable[[Surface], Any]] = {
    "compile_mode": _claim_compile_mode,
    "pdl": _claim_pdl,
    "contiguous_layout_param": _claim_contiguous_layout_param,
    "ensure_zero_padding_position": _claim_ensure_zero_padding_position,
    "bf16_grouped_contiguous": _claim_bf16_grouped_contiguous,
    "bf16_grouped_masked": _claim_bf16_grouped_masked,
    "masked_gemm": _claim_masked_gemm,
    "masked_overlap": _claim_masked_overlap,
    "masked_returns": _claim_masked_returns,
    "mqa_logits": _claim_mqa_logits,
    "mqa_clean_logits": _claim_mqa_clean_logits,
    "mqa_max_seqlen_k": _claim_mqa_max_seqlen_k,
    "paged_mqa_logits": _claim_paged_mqa_logits,
    "paged_clean_logits_arg": _claim_paged_clean_logits_arg,
    "paged_indices": _claim_paged_indices,
    "collapsed_strides": _claim_collapsed_strides,
    "raw_ffi_returns": _claim_raw_ffi_returns,
    "transform_sf_is_sfa": _claim_transform_sf_is_sfa,
}

#: Capabilities a surface cannot show, and why (they are certified by the conformance tiers instead).
NOT_SURFACE_VISIBLE: Mapping[str, str] = {
    "paged_context_lens": "the 2-D lengths requirement is a host-side assert inside the native library, not part "
                          "of any signature",
    "paged_clean_logits": "dgcompat's own policy (it always masks paged logits itself); the assert that forbids "
                          "clean_logits with 2-D lengths is inside the native library",
    "paged_native_next_n": "architecture-dependent: which next_n the compiled kernels and their host asserts accept "
                           "(per SM family)",
    "paged_heads": "architecture-dependent: the head counts the kernel templates are instantiated for",
    "bare_tensor_pairs": "decided inside the private function _parse_tensor_or_tuple (torch.Tensor(...) vs "
                         "torch.tensor); the surface records public names only, not the bodies of private functions",
}


# ---------------------------------------------------------------------------------------------
# The table against a surface
# ---------------------------------------------------------------------------------------------


def release_of(surface: Surface) -> Release:
    """The :class:`~dgcompat.detection.Release` a surface describes (from its METADATA).

    sgl-deep-gemm releases are matched as themselves; sgl-kernel / sglang-kernel as the copy
    they bundle. Raises :class:`ValueError` for a surface without a release name and version.
    """
    info = surface.get("release") or {}
    name, text = info.get("name"), info.get("version")
    if not name or not text:
        raise ValueError("the surface names no release (no dist-info METADATA): the table cannot be matched")
    dist = str(canonicalize_name(str(name)))
    try:
        version = Version(str(text))
    except InvalidVersion as exc:
        raise ValueError(f"the surface's release version {text!r} is not a version") from exc
    if dist == SGL:
        source = "sgl-deep-gemm"
    elif dist in _BUNDLING:
        source = "bundled"
    else:
        source = "upstream"
    return Release(dist=dist, version=version, source=source, binding=str(surface.get("binding") or "unknown"),
                   location=None, expected_torch=_expected_torch(dist, version), torch=None, torch_ok=None,
                   kernel_wheel=None, known=dist != SGL or str(version) in KNOWN_SGL_DEEP_GEMM)


def capabilities_of(surface: Surface, *, arch: str = "sm90") -> Capabilities:
    """What the table answers for the release a surface describes (table only, no probes)."""
    return compute(release_of(surface), backend="deep_gemm", arch=arch)


def _label(surface: Surface) -> str:
    info = surface.get("release") or {}
    if info.get("version"):
        return f"{info.get('name')} {info.get('version')}"
    return str((surface.get("source") or {}).get("name") or "?")


def _table_row(capability: str, rel: Release) -> str:
    # The same (distribution, version) the table matches for this release (table._effective).
    dist, version = (rel.dist or SGL, rel.version) if rel.source != "upstream" else (SGL, Version(KNOWN_SGL_DEEP_GEMM[-1]))
    try:
        row = lookup(capability, dist, version)
    except KeyError:
        return f"{capability} (no row)"
    return f"Row({capability!r}, {row.dist!r}, {row.releases or 'all'!r}, value={row.value!r})"


def _mismatches(surface: Surface, arch: str) -> list[tuple[str, Any, Any, str]]:
    rel = release_of(surface)
    caps = compute(rel, backend="deep_gemm", arch=arch)
    out = []
    for name, claim in SURFACE_CLAIMS.items():
        said = claim(surface)
        table = getattr(caps, name)
        if said != table:
            out.append((name, table, said, _table_row(name, rel)))
    return out


def check_table(surface: Surface, *, arch: str = "sm90") -> list[str]:
    """Where the capability table disagrees with ``surface``; empty when every claim agrees.

    For each capability in :data:`SURFACE_CLAIMS`, the answer of
    :func:`dgcompat.table.compute` (release from the surface's METADATA, backend ``deep_gemm``,
    ``arch``, no probes: the table's own answer) is compared with what the surface says.
    """
    label = _label(surface)
    return [f"{name}: {row} answers {table!r} for {label}, but the surface says {said!r}"
            for name, table, said, row in _mismatches(surface, arch)]


def check_torch(surface: Surface) -> list[str]:
    """Where ``EXPECTED_TORCH`` disagrees with the torch the native library was built against."""
    rel = release_of(surface)
    built = surface.get("torch_build")
    if rel.expected_torch is None or not built:
        return []
    try:
        ok = Version(str(built)) in rel.expected_torch
    except InvalidVersion:
        return [f"{_label(surface)}: unreadable torch build {built!r}"]
    if ok:
        return []
    return [f"EXPECTED_TORCH pairs {_label(surface)} with torch{rel.expected_torch}, but its native library was "
            f"built against torch {built}"]


# ---------------------------------------------------------------------------------------------
# What dgcompat calls
# ---------------------------------------------------------------------------------------------


STABLE_USES: tuple[UpstreamCall, ...] = all_calls()

_USES: dict[str, list[UpstreamCall]] = {}
for _use in STABLE_USES:
    _USES.setdefault(_use.symbol, []).append(_use)

# Alternatives are called only when the primary name is missing; they count as called symbols.
_ALTERNATIVE_OF: dict[str, UpstreamCall] = {alt: use for use in STABLE_USES for alt in use.alternatives}


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
    for name in ("fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits"):
        t[(_dg(name), None)] = ("paged_mqa_logits",)
        t[(_dg(name), "return")] = ("raw_ffi_returns",)
        t[(_dg(name), "clean_logits")] = ("paged_clean_logits", "paged_clean_logits_arg")
        t[(_dg(name), "context_lens")] = ("paged_context_lens",)
        t[(_dg(name), "indices")] = ("paged_indices",)
    t[(_dg("get_paged_mqa_logits_metadata"), "return")] = ("raw_ffi_returns",)
    t[(_dg("get_paged_mqa_logits_metadata"), "indices")] = ("paged_indices",)
    t[(_dg("get_paged_mqa_logits_metadata"), "context_lens")] = ("paged_context_lens",)
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


def _called_symbols() -> set[str]:
    return set(_USES) | set(_ALTERNATIVE_OF)


def intake_symbols(a: Surface, b: Surface) -> list[str]:
    """The Python names the intake diff compares: engine-relevant ones plus every one dgcompat calls."""
    called = _called_symbols()
    names = set(a.get("python") or {}) | set(b.get("python") or {})
    return sorted(n for n in names if is_engine_symbol(n) or n in called)


def diff_surfaces(a: Surface, b: Surface, *, all_symbols: bool = False) -> list[Change]:
    """:func:`dgcompat_conformance.surface.diff` over :func:`intake_symbols` (or every name with ``all_symbols``)."""
    if all_symbols:
        return diff(a, b, all_symbols=True)
    return diff(a, b, symbols=intake_symbols(a, b))


# ---------------------------------------------------------------------------------------------
# Calls against a surface
# ---------------------------------------------------------------------------------------------


def _name_ok(entry: str, name: Any) -> bool:
    return entry == "*" or name is None or str(name) in entry.split("|")


def _call_problems(use: UpstreamCall, rec: Mapping[str, Any], caps: Any) -> list[str]:
    params = _params(rec)
    if rec.get("kind") == "native" and rec.get("params") is None:
        return []  # a native op the library scan could not read: nothing to hold the call against
    where = f"{use.symbol} ({use.caller})"
    problems: list[str] = []
    var_pos = any(p.get("kind") == "var_positional" for p in params)
    var_kw = any(p.get("kind") == "var_keyword" for p in params)
    slots = [p for p in params if p.get("kind") in ("positional_only", "positional")]
    expected = use.expected_positional(caps)
    for i, entry in enumerate(expected):
        if i >= len(slots):
            if not var_pos:
                problems.append(f"{where}: passes {entry} at #{i}, but the function takes only {len(slots)} "
                                "positional arguments")
            break
        if not _name_ok(entry, slots[i].get("name")):
            problems.append(f"{where}: passes {entry} at #{i}, but #{i} is {slots[i].get('name')}")
    for j, name in enumerate(use.keywords):
        found = _param(rec, name)
        if found is None:
            if not var_kw:
                problems.append(f"{where}: passes {name}= by keyword, but there is no such parameter")
            continue
        if found[1].get("kind") == "positional_only":
            problems.append(f"{where}: passes {name}= by keyword, but it is positional-only")
        if use.passthrough and found[0] != len(use.positional) + j:
            problems.append(f"{where}: {name} is documented at #{len(use.positional) + j} (dgcompat.resolve hands "
                            f"the function to engines), but sits at #{found[0]}")
    passed = {n for entry in expected for n in entry.split("|")} | set(use.keywords)
    for i, p in enumerate(params):
        if p.get("kind") in ("var_positional", "var_keyword") or p.get("default") is not None:
            continue
        if i < len(expected) and p.get("kind") in ("positional_only", "positional"):
            continue
        if p.get("name") not in passed:
            problems.append(f"{where}: requires {p.get('name') or f'argument #{i}'}, which dgcompat does not pass")
    return problems


def check_calls(surface: Surface, *, arch: str = "sm90") -> list[str]:
    """Where a call dgcompat makes on this release would not fit the surface's signatures.

    The calls in effect are those the table selects for the release (e.g. the mqa function the
    ``mqa_logits`` row names); a symbol an adapter cannot do without and that is missing (with no
    alternative present) is a problem too.
    """
    caps: Any
    try:
        caps = capabilities_of(surface, arch=arch)
    except ValueError:
        # No release to look the rows up for: the surface's own answers select the calls.
        caps = SimpleNamespace(**{name: claim(surface) for name, claim in SURFACE_CLAIMS.items()})
    problems: list[str] = []
    for use in STABLE_USES:
        if not use.in_effect(caps):
            continue
        rec = _record(surface, use.symbol)
        if rec is None:
            if use.optional or any(_record(surface, alt) is not None for alt in use.alternatives):
                continue
            problems.append(f"{use.symbol} ({use.caller}): missing from the release")
            continue
        problems += _call_problems(use, rec, caps)
    return problems


# ---------------------------------------------------------------------------------------------
# Mapping changes onto rows
# ---------------------------------------------------------------------------------------------


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
    return "\n".join(lines) + "\n"


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
    return json.dumps(doc, indent=2, sort_keys=True) + "\n"


# ---------------------------------------------------------------------------------------------
# The newest release on the index
# ---------------------------------------------------------------------------------------------


class IntakeError(SurfaceError):
    """The newest release could not be resolved, fetched or read."""


def _pip(args: Sequence[str], timeout: float) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "pip", *args]
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise IntakeError(f"`pip {' '.join(args)}` timed out after {timeout:.0f} s") from exc
    except OSError as exc:
        raise IntakeError(f"`pip {' '.join(args)}` could not run: {exc}") from exc


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in (proc.stderr or proc.stdout or "").strip().splitlines() if not ln.startswith("WARNING")]
    return " | ".join(lines[-3:]) or f"exit status {proc.returncode}"


_TARGET = ("--only-binary=:all:", "--platform", "manylinux2014_x86_64")


def index_versions(dist: str = SGL, *, index_url: str | None = None, timeout: float = 180.0) -> list[str]:
    """Every version of ``dist`` the package index offers (as manylinux x86_64 wheels), newest first.

    Asks ``pip index versions``; where that is unavailable or fails, ``pip download --no-deps``
    of the newest wheel and its file name. Raises :class:`IntakeError` when neither reaches the
    index (no network, a proxy, a private index without the package).
    """
    extra = ["--index-url", index_url] if index_url else []
    proc = _pip(["index", "versions", dist, "--disable-pip-version-check", *_TARGET, *extra], timeout)
    found: list[Version] = []
    if proc.returncode == 0:
        m = re.search(r"Available versions:\s*(.+)", proc.stdout)
        for text in (m.group(1).split(",") if m else []):
            try:
                found.append(Version(text.strip()))
            except InvalidVersion:
                continue
    if found:
        return [str(v) for v in sorted(found, reverse=True)]
    first = _tail(proc)
    with tempfile.TemporaryDirectory(prefix="dgcompat-latest-") as tmp:
        dl = _pip(["download", "--no-deps", "--disable-pip-version-check", *_TARGET, "-d", tmp, dist, *extra], timeout)
        for path in Path(tmp).glob("*.whl"):
            try:
                _name, version, _build, _tags = parse_wheel_filename(path.name)
            except InvalidWheelFilename:
                continue
            return [str(version)]
    raise IntakeError(
        f"cannot resolve the newest {dist} on the package index: `pip index versions` failed ({first}) and "
        f"`pip download --no-deps` failed ({_tail(dl)}). Check network access or PIP_INDEX_URL / --index-url, "
        f"or name the release with --version V.")


def newest_on_index(dist: str = SGL, *, index_url: str | None = None, timeout: float = 180.0) -> str:
    """The newest final release of ``dist`` on the index (a pre-release only when there is nothing else)."""
    versions = [Version(v) for v in index_versions(dist, index_url=index_url, timeout=timeout)]
    final = [v for v in versions if not v.is_prerelease and not v.is_devrelease]
    return str(max(final or versions))


def _certificate_dir() -> Path | None:
    return Path(__file__).parent / "certificates"


_PASSING = frozenset({"PASS", "certified", "passed"})


def newest_certified(certificates: Path | None = None) -> tuple[str, str]:
    """(version, why): the newest known sgl-deep-gemm with a passing certificate, else the newest known.

    Certificates are ``conformance/dgcompat_conformance/certificates/*.json`` (CPU tier ``<release>.json``, GPU tier
    ``gpu-<release>.json``); a certificate counts when its verdict passed.
    """
    folder = certificates if certificates is not None else _certificate_dir()
    best: Version | None = None
    source = ""
    for path in sorted(folder.glob("*.json")) if folder is not None and folder.is_dir() else []:
        try:
            cert = json.loads(path.read_text("utf-8"))
        except (OSError, ValueError):
            continue
        if not isinstance(cert, dict) or str(cert.get("verdict")) not in _PASSING:
            continue
        release = str(cert.get("release") or "")
        if release not in KNOWN_SGL_DEEP_GEMM or cert.get("distribution") not in (None, SGL):
            continue
        if best is None or Version(release) > best:
            best, source = Version(release), path.name
    if best is not None:
        return str(best), f"newest certified release ({source})"
    where = folder if folder is not None else "conformance/dgcompat_conformance/certificates"
    return KNOWN_SGL_DEEP_GEMM[-1], f"newest known release; no passing certificate in {where}"


@dataclass
class CpuTier:
    """The result of ``dgcompat conform --release V`` (the CPU tier) for one release."""

    ran: bool
    passed: bool
    verdict: str
    """The certificate's verdict (``PASS``/``FAIL``/``ERROR``), or why it did not run."""
    summary: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    certificate: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ran": self.ran, "passed": self.passed, "verdict": self.verdict, "summary": dict(self.summary),
                "failures": list(self.failures), "certificate": self.certificate}


def run_cpu_tier(version: str, *, out_dir: Path, timeout: float = 900.0) -> CpuTier:
    """Certify sgl-deep-gemm ``version`` on the CPU tier in a child process (``python -m dgcompat conform``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "dgcompat", "conform", "--release", version, "--out", str(out_dir), "--quiet",
           "--timeout", str(timeout)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 120)
    except subprocess.TimeoutExpired:
        return CpuTier(False, False, f"ERROR: the CPU tier did not finish within {timeout + 120:.0f} s")
    except OSError as exc:
        return CpuTier(False, False, f"ERROR: the CPU tier could not start: {exc}")
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in version)
    path = out_dir / f"{safe}.json"
    try:
        cert = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return CpuTier(False, False, f"ERROR: no certificate (exit {proc.returncode}): {_tail(proc)}")
    failures = [str(t.get("id")) for t in cert.get("tests") or [] if t.get("outcome") in ("failed", "error", "xpassed")]
    if cert.get("harness_error"):
        failures.insert(0, f"harness: {cert['harness_error']}")
    verdict = str(cert.get("verdict") or "ERROR")
    return CpuTier(True, verdict == "PASS" and proc.returncode == 0, verdict, dict(cert.get("summary") or {}),
                   failures, str(path))


VERDICTS = ("safe", "safe with new rows needed", "breaking")


@dataclass
class Verdict:
    """What :func:`latest` found."""

    verdict: str
    """One of :data:`VERDICTS`."""
    newest: str
    newest_why: str
    baseline: str
    baseline_why: str
    mapped: list[MappedChange] = field(default_factory=list)
    table_problems: list[str] = field(default_factory=list)
    call_problems: list[str] = field(default_factory=list)
    torch_problems: list[str] = field(default_factory=list)
    rows_needed: list[str] = field(default_factory=list)
    """Release-level rows the newest release needs (KNOWN_SGL_DEEP_GEMM, EXPECTED_TORCH) and uncovered changes."""
    cpu_tier: CpuTier | None = None
    where: list[str] = field(default_factory=list)
    """Why the verdict is ``breaking``: one line per place."""

    @property
    def exit_status(self) -> int:
        """0 safe, 3 safe with new rows needed, 1 breaking."""
        return {"safe": 0, "safe with new rows needed": 3}.get(self.verdict, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "newest": self.newest,
            "newest_why": self.newest_why,
            "baseline": self.baseline,
            "baseline_why": self.baseline_why,
            "changes": json.loads(mapped_to_json(self.mapped))["changes"],
            "table_problems": self.table_problems,
            "call_problems": self.call_problems,
            "torch_problems": self.torch_problems,
            "rows_needed": self.rows_needed,
            "cpu_tier": self.cpu_tier.to_json() if self.cpu_tier is not None else None,
            "where": self.where,
        }

    def render(self) -> str:
        counts: dict[str, int] = {}
        for m in self.mapped:
            counts[m.status] = counts.get(m.status, 0) + 1
        summary = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts.get(s)) or "no changes"
        lines = [
            f"release judged:       {SGL} {self.newest} ({self.newest_why})",
            f"compared against:     {SGL} {self.baseline} ({self.baseline_why})",
            f"surface changes:      {summary}",
        ]
        for m in self.mapped:
            if m.status in ("drift", "new-row", "handled"):
                rows = f" [rows: {', '.join(m.rows)}]" if m.rows else ""
                lines.append(f"  {m.status:<10} {m.change.symbol} {m.change.kind}"
                             f"{' ' + m.change.param if m.change.param else ''}{rows}: {m.reason}")
        n_claims = len(SURFACE_CLAIMS)
        lines.append("capability table:     " + (f"{len(self.table_problems)} row(s) disagree with the surface"
                                                 if self.table_problems else
                                                 f"agrees with the {self.newest} surface ({n_claims} claims)"))
        lines += [f"  {p}" for p in self.table_problems]
        lines.append("calls dgcompat makes: " + (f"{len(self.call_problems)} do not fit" if self.call_problems
                                                 else f"all fit the {self.newest} signatures"))
        lines += [f"  {p}" for p in self.call_problems]
        lines += [f"torch pairing:        {p}" for p in self.torch_problems]
        tier = self.cpu_tier
        if tier is None:
            lines.append("CPU tier:             not run")
        else:
            s = tier.summary
            counts_text = (f" ({s.get('passed', 0)} passed, {s.get('failed', 0)} failed, {s.get('error', 0)} errors, "
                           f"{s.get('xfailed', 0)} xfailed)") if s else ""
            lines.append(f"CPU tier:             {tier.verdict}{counts_text}"
                         + (f" -> {tier.certificate}" if tier.certificate else ""))
            lines += [f"  failed: {f}" for f in tier.failures]
        if self.rows_needed:
            lines.append("rows needed:")
            lines += [f"  {r}" for r in self.rows_needed]
        lines.append(f"verdict: {self.verdict}" + (" (CPU tier not run)" if tier is None else ""))
        lines += [f"  breaking: {w}" for w in self.where]
        return "\n".join(lines) + "\n"


def latest(*, version: str | None = None, baseline: str | None = None, index_url: str | None = None,
           cpu_tier: bool = True, out_dir: Path | None = None, certificates: Path | None = None,
           arch: str = "sm90", timeout: float = 900.0, echo: Callable[[str], None] | None = None) -> Verdict:
    """Judge the newest sgl-deep-gemm on the index (or ``version``) against the newest certified release.

    Steps: resolve the release (:func:`newest_on_index`), extract both surfaces (downloading the
    wheels into the cache), diff them over everything dgcompat calls (:func:`diff_surfaces`),
    map the changes (:func:`map_changes`), check the table, the call shapes and the torch
    pairing against the new surface, and run the CPU tier (:func:`run_cpu_tier`).

    Verdicts: ``breaking`` for unhandled drift, a table row / call / torch pairing that
    disagrees with the new surface, or a CPU-tier failure (``where`` says which);
    ``safe with new rows needed`` when only uncovered non-breaking changes remain or the release
    is new to ``KNOWN_SGL_DEEP_GEMM`` / ``EXPECTED_TORCH``; ``safe`` otherwise.
    """
    say = echo or (lambda _text: None)
    if version is not None:
        newest, newest_why = version, "given with --version"
    else:
        newest, newest_why = newest_on_index(index_url=index_url), "newest on the package index"
    if baseline is not None:
        base, why = baseline, "given with --baseline"
    else:
        base, why = newest_certified(certificates)
    say(f"intake: {SGL} {newest} against {base}")
    try:
        before = extract(base)
        after = extract(newest)
    except SurfaceError as exc:
        raise IntakeError(f"cannot read the surfaces: {exc}") from exc
    mapped = map_changes(diff_surfaces(before, after), before=before, after=after, arch=arch)
    table_problems = check_table(after, arch=arch)
    call_problems = check_calls(after, arch=arch)
    torch_problems = check_torch(after)
    rows_needed: list[str] = []
    if newest not in KNOWN_SGL_DEEP_GEMM:
        rows_needed.append(f"add {newest!r} to dgcompat.detection.KNOWN_SGL_DEEP_GEMM (and the CPU tier's release list)")
    if release_of(after).expected_torch is None:
        built = after.get("torch_build") or "unknown"
        rows_needed.append(f"add an EXPECTED_TORCH row for {SGL} {newest} (native library built against torch {built})")
    rows_needed += [f"{m.change.symbol} {m.change.kind}{' ' + m.change.param if m.change.param else ''}: {m.reason}"
                    for m in mapped if m.status == "new-row"]
    tier: CpuTier | None = None
    if cpu_tier:
        say(f"intake: running the CPU tier for {newest}")
        tier = run_cpu_tier(newest, out_dir=out_dir or Path("conformance-results"), timeout=timeout)
    where = [_where(m) for m in _drift(mapped)]
    where += [f"capability table: {p}" for p in table_problems]
    where += [f"call: {p}" for p in call_problems]
    where += [f"torch pairing: {p}" for p in torch_problems]
    if tier is not None and not tier.passed:
        where += [f"CPU tier: {f}" for f in tier.failures] or [f"CPU tier: {tier.verdict}"]
    if where:
        verdict = "breaking"
    elif rows_needed:
        verdict = "safe with new rows needed"
    else:
        verdict = "safe"
    return Verdict(verdict, newest, newest_why, base, why, mapped, table_problems, call_problems, torch_problems, rows_needed,
                   tier, where)


def build_latest_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dgcompat conform --latest``."""
    p = argparse.ArgumentParser(
        prog="dgcompat conform --latest",
        description="Judge the newest sgl-deep-gemm on the package index: surface diff against the newest "
                    "certified release mapped onto the capability table, table and call checks, CPU tier.",
        epilog="Exit status: 0 safe, 3 safe with new rows needed, 1 breaking, 2 could not decide.",
    )
    p.add_argument("--version", metavar="V", help="judge this release instead of asking the index")
    p.add_argument("--baseline", metavar="V", help="compare against this release instead of the newest certified")
    p.add_argument("--index-url", metavar="URL", help="package index to ask (default: pip's configuration)")
    p.add_argument("--certificates", type=Path, metavar="DIR", help="certificate folder (default: conformance/dgcompat_conformance/certificates)")
    p.add_argument("--out", type=Path, default=Path("conformance-results"), help="where the CPU tier writes its certificate")
    p.add_argument("--no-cpu-tier", action="store_true", help="skip the CPU tier (surface checks only)")
    p.add_argument("--arch", default="sm90", choices=("sm90", "sm100", "sm120"), help="architecture the table is read for")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds the CPU tier may take")
    p.add_argument("--json", action="store_true", help="print the verdict as JSON")
    return p


def main_latest(argv: Sequence[str] | None = None) -> int:
    """``dgcompat conform --latest [options]``; the exit status (0 safe, 3 new rows needed, 1 breaking, 2 error).

    ``argv`` may still hold ``conform`` and ``--latest``; they are ignored.
    """
    args = [a for a in (sys.argv[1:] if argv is None else list(argv)) if a != "--latest"]
    if args[:1] == ["conform"]:
        args = args[1:]
    parser = build_latest_parser()
    try:
        ns = parser.parse_args(args)
    except SystemExit as exc:
        return int(exc.code or 0)
    try:
        result = latest(version=ns.version, baseline=ns.baseline, index_url=ns.index_url, cpu_tier=not ns.no_cpu_tier,
                        out_dir=ns.out, certificates=ns.certificates, arch=ns.arch, timeout=ns.timeout,
                        echo=None if ns.json else (lambda text: print(text, flush=True)))
    except (IntakeError, SurfaceError, ValueError, OSError) as exc:
        print(f"dgcompat conform --latest: error: {exc}", file=sys.stderr)
        return 2
    if ns.json:
        sys.stdout.write(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n")
    else:
        sys.stdout.write(result.render())
    return result.exit_status


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main_latest(sys.argv[1:]))
