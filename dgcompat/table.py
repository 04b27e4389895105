"""One declarative table of everything that differs between deep_gemm releases.

Each :class:`Row` is data: the capability it answers, the distribution and releases it applies
to, the answer, what the upstream call looks like there, the upstream change that caused it and
when the row can be deleted. The first row that matches the installed release wins, so rows for a
capability go from the most specific to the catch-all.

Rows of kind ``"presence"`` say what a release is expected to have; once deep_gemm has been
imported, :func:`capabilities` replaces their answer with a probe of the live module (the table is
only a fallback before import and for planning). Rows of kind ``"behaviour"`` are what a probe
cannot see (argument positions, layouts, return values) and are authoritative.

Architecture-dependent answers are keyed by family (``sm90``, ``sm100``, ``sm120``). The current
CUDA device decides, unless ``DGCOMPAT_ARCH`` (``sm90``, ``sm100``, ...) overrides it.
"""

from __future__ import annotations

import functools
import os
import sys
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any, Mapping

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .detection import KNOWN_SGL_DEEP_GEMM, Release, release

__all__ = ["Row", "ROWS", "Capabilities", "capabilities", "current_arch", "arch_family", "rows_for", "reset"]

SGL = "sgl-deep-gemm"
SK = "sgl-kernel"
SGK = "sglang-kernel"
REF = "reference"
ANY = "*"


@dataclass(frozen=True)
class Row:
    """One version-gated behaviour."""

    capability: str
    dist: str  # "sgl-deep-gemm", "sgl-kernel", "sglang-kernel", "reference" or "*"
    releases: str  # PEP 440 specifier over that distribution's version; "" = every release
    value: Any
    upstream: str  # what the upstream call looks like there
    since: str  # the upstream change behind the row
    drop_when: str  # when the row can be deleted
    kind: str = "behaviour"  # "behaviour" (version gate) or "presence" (verified by probe after import)
    probe: str | None = None  # for presence rows: attribute path on deep_gemm, "a|b" = first present

    def matches(self, dist: str, version: Version | None) -> bool:
        if self.dist not in (ANY, dist):
            return False
        if not self.releases:
            return True
        return version is not None and version in SpecifierSet(self.releases, prereleases=True)


_FFI_ERA_END = "0.2.3 (TORCH_LIBRARY binding) became the minimum"

ROWS: tuple[Row, ...] = (
    # --- runtime knobs -------------------------------------------------------------------------
    Row("compile_mode", SK, "", True, "deep_gemm.get/set_compile_mode(int)", "bundled DeepGEMM snapshot exports them",
        "sgl-kernel bundles are unsupported", "presence", "set_compile_mode"),
    Row("compile_mode", SGK, "", True, "deep_gemm.get/set_compile_mode(int)", "bundled DeepGEMM snapshot exports them",
        "sglang-kernel<=0.4.2 bundles are unsupported", "presence", "set_compile_mode"),
    Row("compile_mode", ANY, "", False, "absent", "sgl-deep-gemm: 'not exported on this branch'",
        "sgl-deep-gemm exports compile mode", "presence", "set_compile_mode"),
    Row("pdl", SGL, ">=0.1.4", "top-level", "deep_gemm.set_pdl(bool) / get_pdl()",
        "sgl-deep-gemm 0.1.4 bound _C.set_pdl at top level", "never (this is the stable form)", "presence", "set_pdl"),
    Row("pdl", SGL, ">=0.1.1", "native", "deep_gemm._C.set_pdl(bool) only",
        "sgl-deep-gemm 0.1.1 added the native op without a Python binding", "0.1.4 is the minimum",
        "presence", "_C.set_pdl"),
    Row("pdl", REF, "", "top-level", "dgcompat.reference keeps a flag", "-", "never"),
    Row("pdl", ANY, "", None, "absent", "bundled copies and sgl-deep-gemm<0.1.1 have no PDL switch",
        "bundles and 0.1.0 are unsupported", "presence", "set_pdl|_C.set_pdl"),
    # --- dense + grouped GEMMs -----------------------------------------------------------------
    Row("contiguous_layout_param", SK, "", "m_indices", "m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, ...)",
        "bundled schema keeps the old name", "bundles are unsupported"),
    Row("contiguous_layout_param", SGK, "", "m_indices", "m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, ...)",
        "bundled schema keeps the old name", "bundles are unsupported"),
    Row("contiguous_layout_param", ANY, "", "grouped_layout",
        "m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, ...): keyword m_indices is a TypeError",
        "upstream DeepGEMM 2.3 renamed m_indices to grouped_layout", "never (dgcompat passes it positionally)"),
    Row("ensure_zero_padding_position", SGL, ">=0.1.4", 10,
        "(a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, use_psum_layout, "
        "ensure_zero_padding, expected_m_for_psum_layout)",
        "sgl-deep-gemm 0.1.4 inserted ensure_zero_padding before expected_m_for_psum_layout",
        "never (dgcompat passes neither)"),
    Row("ensure_zero_padding_position", ANY, "", None, "no ensure_zero_padding parameter",
        "before sgl-deep-gemm 0.1.4 / bundles", "0.1.4 is the minimum"),
    Row("bf16_grouped_contiguous", SGL, ">=0.1.1", True, "m_grouped_bf16_gemm_nt_contiguous(a, b, d, grouped_layout)",
        "sgl-deep-gemm 0.1.1 added bf16 grouped GEMMs", "0.1.1 is the minimum", "presence",
        "m_grouped_bf16_gemm_nt_contiguous"),
    Row("bf16_grouped_contiguous", SGL, "", False, "absent", "sgl-deep-gemm 0.0.1/0.1.0 lack it", "0.1.1 is the minimum",
        "presence", "m_grouped_bf16_gemm_nt_contiguous"),
    Row("bf16_grouped_contiguous", ANY, "", True, "m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)", "-", "never",
        "presence", "m_grouped_bf16_gemm_nt_contiguous"),
    Row("bf16_grouped_masked", SGL, ">=0.1.1", True, "m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)",
        "sgl-deep-gemm 0.1.1 added it (0.0.1/0.1.0 bind the alias to None)", "0.1.1 is the minimum", "presence",
        "m_grouped_bf16_gemm_nt_masked"),
    Row("bf16_grouped_masked", SGL, "", False, "absent (bf16_m_grouped_gemm_nt_masked is None)",
        "sgl-deep-gemm 0.0.1/0.1.0", "0.1.1 is the minimum", "presence", "m_grouped_bf16_gemm_nt_masked"),
    Row("bf16_grouped_masked", ANY, "", True, "m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)", "-",
        "never", "presence", "m_grouped_bf16_gemm_nt_masked"),
    Row("masked_gemm", SGL, ">=0.2.0", "m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_gemm_nt_masked(...)",
        "sgl-deep-gemm 0.2.0 added the m_grouped_* name", "0.2.0 is the minimum", "presence",
        "m_grouped_fp8_gemm_nt_masked|fp8_m_grouped_gemm_nt_masked"),
    Row("masked_gemm", SGL, "", "fp8_m_grouped_gemm_nt_masked", "only the fp8_m_grouped_* alias",
        "before sgl-deep-gemm 0.2.0", "0.2.0 is the minimum", "presence",
        "m_grouped_fp8_gemm_nt_masked|fp8_m_grouped_gemm_nt_masked"),
    Row("masked_gemm", ANY, "", "m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_gemm_nt_masked(...)", "-", "never",
        "presence", "m_grouped_fp8_gemm_nt_masked|fp8_m_grouped_gemm_nt_masked"),
    Row("masked_overlap", SK, "", True, "(..., max_block_n=256, enable_overlap=False, signal=None) -> (int?, int?)",
        "sgl-kernel's DeepGEMM fork added the overlapped (signal) masked GEMM", "bundles are unsupported"),
    Row("masked_overlap", SGK, "", True, "(..., max_block_n=256, enable_overlap=False, signal=None) -> (int?, int?)",
        "sgl-kernel's DeepGEMM fork added the overlapped (signal) masked GEMM", "bundles are unsupported"),
    Row("masked_overlap", ANY, "", False, "no enable_overlap/max_block_n/signal parameters",
        "no sgl-deep-gemm release has the overlapped masked GEMM", "a release adds it"),
    Row("masked_returns", SK, "", "tuple", "returns (block_m, threshold) (None, None) without overlap",
        "bundled schema -> (int?, int?)", "bundles are unsupported"),
    Row("masked_returns", SGK, "", "tuple", "returns (block_m, threshold) (None, None) without overlap",
        "bundled schema -> (int?, int?)", "bundles are unsupported"),
    Row("masked_returns", SGL, "<0.2.3", "native-result", "returns whatever the tvm-ffi function returns",
        "tvm-ffi era wrappers return the raw native result", _FFI_ERA_END),
    Row("masked_returns", ANY, "", "none", "returns None", "TORCH_LIBRARY schema -> ()", "never"),
    # --- indexer -------------------------------------------------------------------------------
    Row("mqa_logits", SGL, ">=0.2.5", "fp8_fp4_mqa_logits",
        "fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta=None)",
        "sgl-deep-gemm 0.2.5 removed fp8_mqa_logits", "never (stable since 0.2.5)", "presence",
        "fp8_mqa_logits|fp8_fp4_mqa_logits"),
    Row("mqa_logits", ANY, "", "fp8_mqa_logits", "fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=0)",
        "-", "0.2.5 is the minimum", "presence", "fp8_mqa_logits|fp8_fp4_mqa_logits"),
    Row("mqa_clean_logits", SGL, ">=0.2.5", "emulated", "no clean_logits parameter",
        "sgl-deep-gemm 0.2.5 dropped clean_logits and logits_dtype", "a release restores it"),
    Row("mqa_clean_logits", ANY, "", "native", "clean_logits=bool", "-", "0.2.5 is the minimum"),
    Row("mqa_max_seqlen_k", SGL, ">=0.2.5", "required", "max_seqlen_k is positional and required",
        "sgl-deep-gemm 0.2.5 made max_seqlen_k required", "never"),
    Row("mqa_max_seqlen_k", SGK, "", "absent", "fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=True)",
        "the sglang-kernel 0.4.x bundle is an older DeepGEMM snapshot", "bundles are unsupported"),
    Row("mqa_max_seqlen_k", ANY, "", "optional", "max_seqlen_k=0 (0 = uncompressed)", "-", "0.2.5 is the minimum"),
    Row("paged_mqa_logits", SGL, ">=0.2.5", "fp8_fp4_paged_mqa_logits",
        "fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, indices=None)",
        "sgl-deep-gemm 0.2.5 removed fp8_paged_mqa_logits", "never", "presence",
        "fp8_paged_mqa_logits|fp8_fp4_paged_mqa_logits"),
    Row("paged_mqa_logits", ANY, "", "fp8_paged_mqa_logits",
        "fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits)",
        "-", "0.2.5 is the minimum", "presence", "fp8_paged_mqa_logits|fp8_fp4_paged_mqa_logits"),
    Row("paged_context_lens", SK, "", "1d", "context_lens (B,); next_n from q", "bundled snapshot predates 2-D lengths",
        "bundles are unsupported"),
    Row("paged_context_lens", SGK, "", "1d", "context_lens (B,); next_n from q", "bundled snapshot predates 2-D lengths",
        "bundles are unsupported"),
    Row("paged_context_lens", REF, "", "any", "1-D, (B, next_n) or (B*next_n, 1)", "-", "never"),
    Row("paged_context_lens", ANY, "", "2d", "context_lens (B, next_n) or (B*next_n, 1); 1-D asserts",
        "upstream DeepGEMM 2.4.2 (7f2a703) made 2-D lengths mandatory", "never"),
    Row("paged_indices", SK, "", False, "no indices parameter", "bundled snapshot predates varlen paged MQA",
        "bundles are unsupported"),
    Row("paged_indices", SGK, "", False, "no indices parameter", "bundled snapshot predates varlen paged MQA",
        "bundles are unsupported"),
    Row("paged_indices", ANY, "", True, "get_paged_mqa_logits_metadata(..., indices=None), "
        "fp8_paged_mqa_logits(..., indices=None)", "upstream DeepGEMM 2.5.0 (891d57b) added varlen indices", "never"),
    Row("paged_clean_logits_arg", SK, "", "required", "fp8_paged_mqa_logits(..., max_context_len, bool clean_logits)",
        "bundled schema: clean_logits has no default", "bundles are unsupported"),
    Row("paged_clean_logits_arg", SGK, "", "required", "fp8_paged_mqa_logits(..., max_context_len, bool clean_logits)",
        "bundled schema: clean_logits has no default", "bundles are unsupported"),
    Row("paged_clean_logits_arg", SGL, ">=0.2.5", "absent",
        "fp8_fp4_paged_mqa_logits(..., max_context_len, indices=None)", "sgl-deep-gemm 0.2.5 dropped clean_logits",
        "never"),
    Row("paged_clean_logits_arg", ANY, "", "optional", "clean_logits=False", "-", "0.2.5 is the minimum"),
    # clean_logits is emulated for paged logits everywhere: 2-D lengths forbid it natively, and the
    # bundled 1-D form would mask with a different per-row rule than a 2-D (B, next_n) input means.
    Row("paged_clean_logits", ANY, "", "emulated", "clean_logits=False at the launch; dgcompat masks",
        "2-D context_lens + clean_logits asserts (upstream 7f2a703)", "a release masks 2-D rows itself"),
    Row("paged_native_next_n", REF, "", {"sm90": (1, 2, 3, 4), "sm100": (1, 2, 3, 4), "sm120": (1, 2, 3, 4)},
        "-", "-", "never"),
    Row("paged_native_next_n", ANY, "", {"sm90": (1, 2), "sm100": (1, 2, 4), "sm120": (1,)},
        "SM90 host assert next_n == 1 or next_n == 2 (seen on H200 with 0.1.2/0.1.4); SM100 atoms of 2",
        "SM90 kernel packs next_n*heads into one WGMMA; next_n=3 needs DeepGEMM PR #340",
        "the SM90 kernel accepts next_n 3/4 (then widen the row)"),
    Row("paged_heads", REF, "", {"sm90": (), "sm100": (), "sm120": ()}, "-", "-", "never"),
    Row("paged_heads", ANY, "", {"sm90": (32, 64), "sm100": (8, 16, 32, 64), "sm120": (8, 16, 32, 64)},
        "paged MQA kernels are instantiated for these head counts", "DeepGEMM kernel templates",
        "the kernels take any head count"),
    # --- returned tensors ----------------------------------------------------------------------
    Row("collapsed_strides", SGL, "<0.2.3", True,
        "results cross DLPack (at::toDLPack), which rewrites the stride of size-1 dims on some torch builds",
        "sgl-deep-gemm's tvm-ffi binding", _FFI_ERA_END),
    Row("collapsed_strides", ANY, "", False, "at::Tensor returned directly", "-", "never"),
    Row("raw_ffi_returns", SGL, "<0.2.0", True, "wrappers return the raw tvm-ffi result",
        "0.2.0 added _from_dlpack_if_needed", "0.2.0 is the minimum"),
    Row("raw_ffi_returns", ANY, "", False, "torch.Tensor", "-", "never"),
    Row("bare_tensor_pairs", SGL, "<0.2.0", False,
        "_parse_tensor_or_tuple calls torch.Tensor([1.0], dtype=...) -> TypeError for a bare tensor",
        "fixed in sgl-deep-gemm 0.2.0 (torch.tensor)", "0.2.0 is the minimum"),
    Row("bare_tensor_pairs", ANY, "", True, "a bare tensor gets a unit scale", "-", "never"),
    Row("transform_sf_is_sfa", SK, "", "bool", "schema: bool is_sfa=False (None is rejected)",
        "bundled schema", "bundles are unsupported"),
    Row("transform_sf_is_sfa", SGK, "", "bool", "schema: bool is_sfa=False (None is rejected)",
        "bundled schema", "bundles are unsupported"),
    Row("transform_sf_is_sfa", ANY, "", "optional", "is_sfa=None", "-", "never"),
)

_ARCH_FAMILIES = {"sm90": "sm90", "sm90a": "sm90", "sm100": "sm100", "sm100a": "sm100", "sm103": "sm100",
                  "sm110": "sm100", "sm120": "sm120", "sm121": "sm120"}


def arch_family(arch: str | None) -> str | None:
    """``"sm103"`` -> ``"sm100"``; unknown or None -> None."""
    if arch is None:
        return None
    return _ARCH_FAMILIES.get(arch.lower())


def current_arch() -> str | None:
    """``DGCOMPAT_ARCH`` if set, else the current CUDA device's ``smXY``, else None.

    Only asks CUDA when torch is already imported and a device is present, so planning on a
    CPU-only machine never initializes anything.
    """
    env = os.environ.get("DGCOMPAT_ARCH", "").strip().lower()
    if env:
        return env if env.startswith("sm") else f"sm{env.replace('.', '')}"
    torch = sys.modules.get("torch")
    if torch is None:
        return None
    try:
        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
    except Exception:  # a broken CUDA setup must not break planning
        return None
    return f"sm{major}{minor}"


def _effective(rel: Release, backend: str) -> tuple[str, Version | None]:
    """The (distribution, version) rows are matched against."""
    if backend == "reference":
        return REF, None
    if rel.source == "sgl-deep-gemm" and rel.version is not None:
        return SGL, rel.version
    if rel.source == "bundled" and rel.dist is not None:
        return rel.dist, rel.version
    # Upstream builds and unknown owners: the newest known sgl-deep-gemm behaviour, refined by probes.
    return SGL, Version(KNOWN_SGL_DEEP_GEMM[-1])


def rows_for(capability: str) -> tuple[Row, ...]:
    """All rows of one capability, in table order."""
    return tuple(r for r in ROWS if r.capability == capability)


def lookup(capability: str, dist: str, version: Version | None) -> Row:
    """The first row of ``capability`` that matches ``dist``/``version``."""
    for row in ROWS:
        if row.capability == capability and row.matches(dist, version):
            return row
    raise KeyError(f"no capability row matches {capability!r} for {dist} {version}")


def _probe(module: Any, path: str) -> str | None:
    """First attribute path of ``"a|b"`` present (and not None) on ``module``."""
    for alt in path.split("|"):
        obj = module
        for part in alt.split("."):
            obj = getattr(obj, part, None)
            if obj is None:
                break
        if obj is not None:
            return alt
    return None


@dataclass(frozen=True)
class Capabilities:
    """The installed release's answers. ``sources[name]`` is ``"table"`` or ``"probe"``."""

    release: str
    backend: str
    arch: str | None
    compile_mode: bool
    pdl: str | None
    contiguous_layout_param: str
    ensure_zero_padding_position: int | None
    bf16_grouped_contiguous: bool
    bf16_grouped_masked: bool
    masked_gemm: str | None
    masked_overlap: bool
    masked_returns: str
    mqa_logits: str | None
    mqa_clean_logits: str
    mqa_max_seqlen_k: str
    paged_mqa_logits: str | None
    paged_context_lens: str
    paged_clean_logits: str
    paged_clean_logits_arg: str
    paged_indices: bool
    paged_native_next_n: tuple[int, ...]
    paged_heads: tuple[int, ...]
    collapsed_strides: bool
    raw_ffi_returns: bool
    bare_tensor_pairs: bool
    transform_sf_is_sfa: str
    sources: Mapping[str, str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["sources"] = dict(self.sources)
        return out

    def __str__(self) -> str:
        width = max(len(f.name) for f in fields(self))
        lines = []
        for f in fields(self):
            if f.name == "sources":
                continue
            src = self.sources.get(f.name)
            tag = f"   [{src}]" if src else ""
            lines.append(f"{f.name:<{width}}  {getattr(self, f.name)!r}{tag}")
        return "\n".join(lines)


_PER_ARCH = {"paged_native_next_n", "paged_heads"}
_CONSERVATIVE = {"paged_native_next_n": (1,), "paged_heads": ()}


def compute(rel: Release, *, backend: str, arch: str | None, module: Any = None) -> Capabilities:
    """Evaluate the table for ``rel`` (and probe ``module`` when given)."""
    dist, version = _effective(rel, backend)
    family = arch_family(arch)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for name in (f.name for f in fields(Capabilities)):
        if name in ("release", "backend", "arch", "sources"):
            continue
        row = lookup(name, dist, version)
        value = row.value
        if name in _PER_ARCH:
            value = value.get(family, _CONSERVATIVE[name]) if family else _CONSERVATIVE[name]
        sources[name] = "table"
        if row.kind == "presence" and row.probe and module is not None:
            found = _probe(module, row.probe)
            sources[name] = "probe"
            if isinstance(row.value, bool):
                value = found is not None
            elif name == "pdl":
                value = None if found is None else ("top-level" if found == "set_pdl" else "native")
            else:
                value = found
        values[name] = value
    return Capabilities(release=rel.label if backend != "reference" else "reference", backend=backend, arch=arch,
                        sources=MappingProxyType(sources), **values)


@functools.lru_cache(maxsize=8)
def _cached(rel: Release, backend: str, arch: str | None, module_id: int) -> Capabilities:
    from . import _binding

    module = _binding.loaded_module() if module_id else None
    return compute(rel, backend=backend, arch=arch, module=module)


def capabilities() -> Capabilities:
    """The installed release's capability map (frozen, printable).

    Before deep_gemm is imported the answers come from the table; afterwards presence rows are
    probed on the live module. Never imports deep_gemm itself.
    """
    from . import _binding

    module = _binding.loaded_module()
    return _cached(release(), _binding.backend_name(), current_arch(), id(module) if module is not None else 0)


def reset() -> None:
    """Forget cached answers (tests)."""
    _cached.cache_clear()
