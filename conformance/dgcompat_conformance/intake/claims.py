"""What a surface claims about each capability, and where the capability table disagrees with it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from packaging.version import InvalidVersion, Version

from dgcompat._tooling import effective_release, expected_torch
from dgcompat.detection import KNOWN_SGL_DEEP_GEMM, UPSTREAM, VENDORED, Release
from dgcompat.table import Capabilities, compute, lookup

from ..dists import canonical
from ._surface import _BUNDLING, SGL, Surface, _first_present, _param, _params, _record, _returned_op, _schema_result

__all__ = ["SURFACE_CLAIMS", "NOT_SURFACE_VISIBLE", "release_of", "capabilities_of", "catch_all", "check_table",
           "check_torch"]


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


def _claim_mqa_logits_dtype(s: Surface) -> str | None:
    rec = _record(s, "fp8_fp4_mqa_logits")
    return "fp8_fp4_mqa_logits" if rec is not None and _param(rec, "logits_dtype") is not None else None


def _claim_paged_logits_dtype(s: Surface) -> str | None:
    rec = _record(s, "fp8_fp4_paged_mqa_logits")
    return "fp8_fp4_paged_mqa_logits" if rec is not None and _param(rec, "logits_dtype") is not None else None


def _claim_paged_mqa_logits(s: Surface) -> str | None:
    return _first_present(s, "fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits")


def _claim_paged_indices(s: Surface) -> bool | None:
    name = _claim_paged_mqa_logits(s)
    meta = _record(s, "get_paged_mqa_logits_metadata")
    if name is None or meta is None:
        return None
    return _param(_record(s, name), "indices") is not None and _param(meta, "indices") is not None


def _claim_paged_clean_logits_arg(s: Surface) -> str | None:
    name = _claim_paged_mqa_logits(s)
    found = _param(_record(s, name), "clean_logits") if name else None
    if found is None:
        return "absent"
    return "required" if found[1].get("default") is None else "optional"


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


def _claim_compiled_dims_default(s: Surface) -> str | None:
    found = _param(_record(s, "bf16_gemm_nt"), "compiled_dims")
    return None if found is None else str(found[1].get("default")).strip("'\"")


def _claim_mk_alignment_arity(s: Surface) -> int:
    rec = _record(s, "get_theoretical_mk_alignment_for_contiguous_layout")
    return 0 if rec is None else len(_params(rec))


def _claim_mk_alignment_setter(s: Surface) -> bool:
    return _record(s, "set_mk_alignment_for_contiguous_layout") is not None


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
    "mqa_logits_dtype": _claim_mqa_logits_dtype,
    "paged_logits_dtype": _claim_paged_logits_dtype,
    "paged_mqa_logits": _claim_paged_mqa_logits,
    "paged_clean_logits_arg": _claim_paged_clean_logits_arg,
    "paged_indices": _claim_paged_indices,
    "collapsed_strides": _claim_collapsed_strides,
    "raw_ffi_returns": _claim_raw_ffi_returns,
    "transform_sf_is_sfa": _claim_transform_sf_is_sfa,
    "compiled_dims_default": _claim_compiled_dims_default,
    "mk_alignment_arity": _claim_mk_alignment_arity,
    "mk_alignment_setter": _claim_mk_alignment_setter,
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
    "paged_block_kv": "architecture-dependent host asserts of the native library (the native-contract intake, "
                      "dgcompat_conformance.intake.host_asserts, maps their changes)",
    "indexer_inputs": "architecture-dependent host asserts of the native library (MX scales, bf16 weights on SM100); "
                      "the native-contract intake maps their changes",
    "indexer_q_formats": "architecture-dependent host asserts of the native library (which query formats each "
                         "architecture's kernels take: kPackedFP4, MX scales); the native-contract intake maps their "
                         "changes",
    "indexer_weights": "architecture-dependent host asserts of the native library (weights.scalar_type() per "
                       "architecture and logits dtype); its signature row reads the logits_dtype parameter",
    "paged_varlen_required": "a host assert of the native library (arch_major == 12 or is_varlen == "
                             "(arch_major == 10)); the native-contract intake maps its changes",
    "gemm_fp4_operands": "architecture-dependent host asserts of the native library (kPackedFP4 and arch_major == 10)",
    "sf_transform_gran_k": "which scale transformations the native library has per architecture ('Unknown SF "
                           "transformation' otherwise)",
    "mqa_uncompressed": "a host assert of the native library (max_seqlen_k > 0); the native-contract intake maps "
                        "its changes",
    "mqa_q_form": "decided inside the wrapper body (q[0], q[1] unchecked in 2.8.1); the surface records signatures",
    "deterministic_default": "the default of a native switch is native state, not part of any signature",
    "bare_tensor_pairs": "decided inside the private function _parse_tensor_or_tuple (torch.Tensor(...) vs "
                         "torch.tensor); the surface records public names only, not the bodies of private functions",
}


def _signatures(surface: Surface) -> tuple[tuple[str, tuple[str, ...]], ...]:
    """The build's Python signatures as detection reads them (the fingerprint's python part)."""
    sigs = ((surface.get("fingerprint") or {}).get("python") or {}).get("signatures") or {}
    return tuple(sorted((str(k), tuple(str(p) for p in v)) for k, v in sigs.items()))


def _upstream_version(surface: Surface) -> Version | None:
    text = surface.get("deep_gemm_version")
    try:
        version = Version(str(text)) if text else None
    except InvalidVersion:
        return None
    return version if version is not None and version.major >= 2 else None


def release_of(surface: Surface) -> Release:
    """The :class:`~dgcompat.detection.Release` a surface describes (from its METADATA), as detection would.

    sgl-deep-gemm releases are matched as themselves; sgl-kernel / sglang-kernel as the copy they
    bundle; an engine's vendored copy (vLLM) and a folder without metadata as upstream DeepGEMM of the
    package's ``__version__``. The build's Python signatures come along, so the table's signature rows answer
    for this build. Raises :class:`ValueError` for a surface that names no release either way.
    """
    info = surface.get("release") or {}
    name, text = info.get("name"), info.get("version")
    binding = str(surface.get("binding") or "unknown")
    sigs = _signatures(surface)
    engines = {owner for _value, owner, *_rest in VENDORED}
    upstream = _upstream_version(surface)
    if name and text and canonical(str(name)) not in engines:
        dist = canonical(str(name))
        try:
            version = Version(str(text))
        except InvalidVersion as exc:
            raise ValueError(f"the surface's release version {text!r} is not a version") from exc
        source = "sgl-deep-gemm" if dist == SGL else "bundled" if dist in _BUNDLING else "upstream"
        if source == "upstream":
            dist, version = UPSTREAM, Version(version.base_version)
        return Release(dist=dist, version=version, source=source, binding=binding, location=None,
                       expected_torch=expected_torch(dist, version), torch=None, torch_ok=None, kernel_wheel=None,
                       known=dist != SGL or str(version) in KNOWN_SGL_DEEP_GEMM, signatures=sigs)
    if upstream is None:
        what = f"{name} {text}'s copy has no usable __version__" if name else "no dist-info METADATA, no __version__"
        raise ValueError(f"the surface names no release ({what}): the table cannot be matched")
    owner = f"{canonical(str(name))} {text}" if name and text else None
    return Release(dist=UPSTREAM, version=upstream, source="vendored" if owner else "unowned", binding=binding,
                   location=None, expected_torch=None, torch=None, torch_ok=None, kernel_wheel=None, known=True,
                   owner=owner, signatures=sigs)


def catch_all(arch: str = "sm90") -> dict[str, Any]:
    """The table's catch-all answers (the rows for any release) on ``arch``: what an unidentified surface gets for
    the capabilities no signature shows."""
    unknown = Release(None, None, "unowned", "unknown", None, None, None, None, None, False)
    caps = compute(unknown, backend="deep_gemm", arch=arch).as_dict()
    return {k: v for k, v in caps.items() if k not in ("release", "backend", "arch", "sources")}


def capabilities_of(surface: Surface, *, arch: str = "sm90") -> Capabilities:
    """What the table answers for the release a surface describes (table only, no probes)."""
    return compute(release_of(surface), backend="deep_gemm", arch=arch)


def _label(surface: Surface) -> str:
    info = surface.get("release") or {}
    version = surface.get("deep_gemm_version")
    if info.get("version"):
        own = f"{info.get('name')} {info.get('version')}"
        return own + (f" (deep_gemm {version})" if canonical(str(info.get("name"))) in {o for _v, o, *_r in VENDORED}
                      and version else "")
    name = str((surface.get("source") or {}).get("name") or "?")
    return f"{name} (deep_gemm {version})" if version else name


def _table_row(capability: str, rel: Release) -> str:
    dist, version = effective_release(rel, "deep_gemm")  # the (distribution, version) the table matches
    try:
        row = lookup(capability, dist, version)
    except KeyError:
        return f"{capability} (no row)"
    return f"Row({capability!r}, {row.dist!r}, {row.releases or 'all'!r}, value={row.value!r})"


#: (capability, table answer, what a surface shows) that agree: the table knows more than a signature shows.
_AGREE = frozenset({
    # "positive": required, and a host assert (max_seqlen_k > 0) refuses 0, which no signature shows.
    ("mqa_max_seqlen_k", "positive", "required"),
})


def _mismatches(surface: Surface, arch: str) -> list[tuple[str, Any, Any, str]]:
    rel = release_of(surface)
    caps = compute(rel, backend="deep_gemm", arch=arch)
    out = []
    for name, claim in SURFACE_CLAIMS.items():
        said = claim(surface)
        table = getattr(caps, name)
        if said != table and (name, table, said) not in _AGREE:
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
