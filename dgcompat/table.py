"""One declarative table of everything that differs between deep_gemm releases.

Each :class:`Row` is data: the capability it answers, the distribution and releases it applies
to, the answer, what the upstream call looks like there, the upstream change that caused it and
when the row can be deleted. The first row that matches the installed release wins, so rows for a
capability go from the most specific to the catch-all.

Rows of kind ``"presence"`` say what a release is expected to have; once deep_gemm has been
imported, :func:`capabilities` replaces their answer with a probe of the live module (the table is
only a fallback before import and for planning). Rows of kind ``"signature"`` ask whether a function
takes a parameter: detection reads the build's Python source before import (:mod:`dgcompat._pysurface`;
two builds can share a version and differ here) and the loaded function answers after. Rows of kind
``"behaviour"`` are what a probe cannot see (layouts, return values, host asserts) and are authoritative.

Architecture-dependent answers are keyed by family (``sm90``, ``sm100``, ``sm120``, and
``other`` for any other or unknown architecture). The current CUDA device decides once CUDA is
initialized (never before: see :func:`current_arch`), unless ``DGCOMPAT_ARCH`` overrides it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from dataclasses import fields
from types import MappingProxyType
from typing import Any
from typing import Literal

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from . import _backend
from . import _device
from . import _pysurface
from . import env
from .detection import KNOWN_SGL_DEEP_GEMM
from .detection import Release
from .detection import backend_name
from .detection import release
from .env import ARCHES

__all__ = ["Row", "ROWS", "Capabilities", "UPSTREAM_IDENTITY", "capabilities", "current_arch", "arch_family",
           "rows_for", "reset"]

SGL = "sgl-deep-gemm"
SK = "sgl-kernel"
SGK = "sglang-kernel"
#: One family for the DeepGEMM copies bundled in sgl-kernel and sglang-kernel<=0.4.2: a row with
#: this dist matches both distributions.
BUNDLED = "bundled"
BUNDLED_DISTS = (SK, SGK)
REF = "reference"
UP = "deep-gemm"  # upstream DeepGEMM 2.x, wherever installed (source build, vLLM's or TensorRT-LLM's copy)
UNIDENTIFIED = "unidentified"  # detection refused the install: only catch-all rows match (nothing is bound)
ANY = "*"
#: Key of a per-architecture value used for any other (or an unknown) architecture.
OTHER_ARCH = "other"


@dataclass(frozen=True)
class Row:
    """One version-gated behaviour."""

    capability: str
    dist: str  # "sgl-deep-gemm", "sgl-kernel", "sglang-kernel", "bundled" (both), "deep-gemm" (upstream), "reference" or "*"
    releases: str  # PEP 440 specifier over that distribution's version; "" = every release
    value: Any
    upstream: str  # what the upstream call looks like there
    since: str  # the upstream change behind the row
    drop_when: str  # when the row can be deleted
    kind: str = "behaviour"  # "behaviour" (version gate), "presence" (probed after import) or "signature"
    probe: str | None = None
    """Presence rows: attribute path on deep_gemm, ``"a|b"`` = first present. Signature rows:
    ``"function:parameter"``, read from the build's source before import and from the function after."""
    probe_values: Mapping[str, Any] | None = None
    """Presence rows whose answer is not the name found: found path -> value (absent -> None). Signature rows:
    ``"present"`` / ``"absent"`` -> value."""
    informative: bool = False
    """No adapter reads the answer: it documents a difference (and the intake checks it against surfaces)."""

    def matches(self, dist: str, version: Version | None) -> bool:
        if self.dist not in (ANY, dist) and not (self.dist == BUNDLED and dist in BUNDLED_DISTS):
            return False
        if not self.releases:
            return True
        return version is not None and version in SpecifierSet(self.releases, prereleases=True)


_FFI_ERA_END = "0.2.3 (TORCH_LIBRARY binding) became the minimum"
# Where the PDL switch lives: a Python function at top level, or only the native op.
_PDL_PROBE: Mapping[str, Any] = MappingProxyType({"set_pdl": "top-level", "_C.set_pdl": "native"})

def _all_arches(value: Any) -> dict[str, Any]:
    """One per-architecture value that is the same on every architecture."""
    return {"sm90": value, "sm100": value, "sm120": value, OTHER_ARCH: value}


# Signature rows: whether the named function has the parameter -> the capability's value.
_MQA_DTYPE: Mapping[str, Any] = MappingProxyType({"present": "fp8_fp4_mqa_logits", "absent": None})
_PAGED_DTYPE: Mapping[str, Any] = MappingProxyType({"present": "fp8_fp4_paged_mqa_logits", "absent": None})
# The builds with logits_dtype take float32 weights on SM100 too; those without (0.2.5, vLLM 0.33.0's 2.8.1)
# take only bf16 weights there (their MX/bf16 contract, dgcompat.indexer._sm100).
_MX_INPUTS: Mapping[str, Any] = MappingProxyType({
    "present": MappingProxyType({"sm90": "fp8-f32", "sm100": "mx", "sm120": "fp8-f32", OTHER_ARCH: "fp8-f32"}),
    "absent": MappingProxyType({"sm90": "fp8-f32", "sm100": "mx-bf16", "sm120": "fp8-f32", OTHER_ARCH: "fp8-f32"}),
})
_WEIGHTS: Mapping[str, Any] = MappingProxyType({
    "present": MappingProxyType({"sm90": ("float32",), "sm100": ("float32", "bfloat16"), "sm120": ("float32",),
                                 OTHER_ARCH: ("float32",)}),
    "absent": MappingProxyType({"sm90": ("float32",), "sm100": ("bfloat16",), "sm120": ("float32",),
                                OTHER_ARCH: ("float32",)}),
})

ROWS: tuple[Row, ...] = (
    # --- runtime knobs -------------------------------------------------------------------------
    Row("compile_mode", BUNDLED, "", True, "deep_gemm.get/set_compile_mode(int)",
        "bundled DeepGEMM snapshot exports them", "bundles are unsupported", "presence", "set_compile_mode"),
    Row("compile_mode", ANY, "", False, "absent", "sgl-deep-gemm: 'not exported on this branch'",
        "sgl-deep-gemm exports compile mode", "presence", "set_compile_mode"),
    Row("pdl", SGL, ">=0.1.4", "top-level", "deep_gemm.set_pdl(bool) / get_pdl()",
        "sgl-deep-gemm 0.1.4 bound _C.set_pdl at top level", "never (this is the stable form)", "presence",
        "set_pdl|_C.set_pdl", _PDL_PROBE),
    Row("pdl", SGL, ">=0.1.1", "native", "deep_gemm._C.set_pdl(bool) only",
        "sgl-deep-gemm 0.1.1 added the native op without a Python binding", "0.1.4 is the minimum",
        "presence", "set_pdl|_C.set_pdl", _PDL_PROBE),
    Row("pdl", UP, ">=2.4.2", "top-level", "deep_gemm.set_pdl(bool) / get_pdl()",
        "upstream DeepGEMM 2.4.2 (7f2a703) added set_pdl/get_pdl", "never (this is the stable form)", "presence",
        "set_pdl|_C.set_pdl", _PDL_PROBE),
    Row("pdl", REF, "", "top-level", "dgcompat.reference keeps a flag", "-", "never"),
    Row("pdl", ANY, "", None, "absent", "bundled copies and sgl-deep-gemm<0.1.1 have no PDL switch",
        "bundles and 0.1.0 are unsupported", "presence", "set_pdl|_C.set_pdl", _PDL_PROBE),
    # --- dense + grouped GEMMs -----------------------------------------------------------------
    # Informative: dgcompat passes the layout tensor by position and takes it under both names.
    Row("contiguous_layout_param", BUNDLED, "", "m_indices",
        "m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, ...)", "bundled schema keeps the old name",
        "bundles are unsupported", informative=True),
    Row("contiguous_layout_param", REF, "", "m_indices", "dgcompat.reference: (a, b, d, m_indices, recipe=None)", "-",
        "never", informative=True),
    Row("contiguous_layout_param", ANY, "", "grouped_layout",
        "m_grouped_fp8_fp4_gemm_nt_contiguous(a, b, d, grouped_layout, ...): keyword m_indices is a TypeError",
        "upstream DeepGEMM 2.3 renamed m_indices to grouped_layout", "never (dgcompat passes it positionally)",
        informative=True),
    Row("ensure_zero_padding_position", SGL, ">=0.1.4", 10,
        "(a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, use_psum_layout, "
        "ensure_zero_padding, expected_m_for_psum_layout)",
        "sgl-deep-gemm 0.1.4 inserted ensure_zero_padding before expected_m_for_psum_layout",
        "never (dgcompat passes neither)", informative=True),
    Row("ensure_zero_padding_position", UP, ">=2.6.1", 10,
        "(a, b, d, grouped_layout, recipe, recipe_a, recipe_b, compiled_dims, disable_ue8m0_cast, use_psum_layout, "
        "ensure_zero_padding, expected_m_for_psum_layout)",
        "upstream DeepGEMM 2.6.1 (54e2261) inserted ensure_zero_padding before expected_m_for_psum_layout",
        "never (dgcompat passes neither)", informative=True),
    Row("ensure_zero_padding_position", ANY, "", None, "no ensure_zero_padding parameter",
        "before sgl-deep-gemm 0.1.4 / bundles", "0.1.4 is the minimum", informative=True),
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
    Row("masked_gemm", UP, ">=2.8", "m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_gemm_nt_masked(...) only",
        "upstream DeepGEMM 2.8 removed the fp8_m_grouped_gemm_nt_masked / bf16_m_grouped_gemm_nt_masked aliases",
        "never (the m_grouped_* name is the stable one)", "presence",
        "m_grouped_fp8_gemm_nt_masked|fp8_m_grouped_gemm_nt_masked"),
    Row("masked_gemm", ANY, "", "m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_gemm_nt_masked(...)", "-", "never",
        "presence", "m_grouped_fp8_gemm_nt_masked|fp8_m_grouped_gemm_nt_masked"),
    # Per architecture: the fork's SM90 kernel (sm90_fp8_gemm_1d2d.cuh) writes the signal; elsewhere the
    # launch ignores enable_overlap and returns (None, None).
    Row("masked_overlap", BUNDLED, "", {"sm90": True, "sm100": False, "sm120": False, OTHER_ARCH: False},
        "(..., max_block_n=256, enable_overlap=False, signal=None) -> (int?, int?)",
        "sgl-kernel's DeepGEMM fork added the overlapped (signal) masked GEMM, signalling on SM90",
        "bundles are unsupported"),
    Row("masked_overlap", ANY, "", False, "no enable_overlap/max_block_n/signal parameters",
        "no sgl-deep-gemm release has the overlapped masked GEMM", "a release adds it"),
    # Informative: the masked GEMM's stable form returns None (or (block_m, threshold) with overlap, whose
    # shape moe checks on the result itself).
    Row("masked_returns", BUNDLED, "", "tuple", "returns (block_m, threshold) (None, None) without overlap",
        "bundled schema -> (int?, int?)", "bundles are unsupported", informative=True),
    Row("masked_returns", SGL, "<0.2.3", "native-result", "returns whatever the tvm-ffi function returns",
        "tvm-ffi era wrappers return the raw native result", _FFI_ERA_END, informative=True),
    Row("masked_returns", ANY, "", "none", "returns None", "TORCH_LIBRARY schema -> ()", "never", informative=True),
    # --- indexer -------------------------------------------------------------------------------
    Row("mqa_logits", SGL, ">=0.2.5", "fp8_fp4_mqa_logits",
        "fp8_fp4_mqa_logits(q, kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta=None)",
        "sgl-deep-gemm 0.2.5 removed fp8_mqa_logits", "never (stable since 0.2.5)", "presence",
        "fp8_mqa_logits|fp8_fp4_mqa_logits"),
    Row("mqa_logits", UP, ">=2.8", "fp8_fp4_mqa_logits",
        "fp8_fp4_mqa_logits((q, q_sf), kv, weights, cu_seq_len_k_start, cu_seq_len_k_end, max_seqlen_k, schedule_meta=None)",
        "upstream DeepGEMM 2.8 removed the legacy fp8_mqa_logits", "never (stable since 2.8)", "presence",
        "fp8_mqa_logits|fp8_fp4_mqa_logits"),
    Row("mqa_logits", ANY, "", "fp8_mqa_logits", "fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=False, max_seqlen_k=0)",
        "-", "0.2.5 is the minimum", "presence", "fp8_mqa_logits|fp8_fp4_mqa_logits"),
    Row("mqa_clean_logits", SGL, ">=0.2.5", "emulated", "no clean_logits parameter",
        "sgl-deep-gemm 0.2.5 dropped clean_logits and logits_dtype", "a release restores it"),
    Row("mqa_clean_logits", UP, ">=2.8", "emulated", "no clean_logits parameter",
        "upstream DeepGEMM 2.8's only MQA entry point has no clean_logits", "a release restores it"),
    Row("mqa_clean_logits", ANY, "", "native", "clean_logits=bool", "-", "0.2.5 is the minimum"),
    # 2.8.1's wrapper reads q[0], q[1] without checking: a bare (S, H, D) q is indexed along S
    # (two query rows taken as values and scales) instead of being rejected. Always pass a pair.
    Row("mqa_q_form", UP, ">=2.8", "pair", "fp8_fp4_mqa_logits((q, q_sf), ...): q_fp, q_sf = q[0], q[1]",
        "upstream DeepGEMM 2.8.1 _C.py facade (no isinstance check)", "never (dgcompat always passes (q, None))"),
    Row("mqa_q_form", ANY, "", "bare", "q: Tensor (0.2.5 also takes a pair)", "-", "never"),
    Row("mqa_max_seqlen_k", SGL, ">=0.2.5", "required", "max_seqlen_k is positional and required",
        "sgl-deep-gemm 0.2.5 made max_seqlen_k required", "never"),
    Row("mqa_max_seqlen_k", SGK, "", "absent", "fp8_mqa_logits(q, kv, weights, ks, ke, clean_logits=True)",
        "the sglang-kernel 0.4.x bundle is an older DeepGEMM snapshot", "bundles are unsupported"),
    Row("mqa_max_seqlen_k", UP, ">=2.8", "positive", "max_seqlen_k is positional, required and > 0 (compressed only)",
        "upstream DeepGEMM 2.8 host assert max_seqlen_k > 0 (csrc/apis/attention.hpp; seen on an H200 with vLLM's "
        "2.8.1): the uncompressed layout is gone", "a release restores max_seqlen_k=0"),
    Row("mqa_max_seqlen_k", ANY, "", "optional", "max_seqlen_k=0 (0 = uncompressed)", "-", "0.2.5 is the minimum"),
    # The uncompressed (Nq, Nk) layout where the release has only the compressed one: launched with
    # max_seqlen_k = Nk (enough for every [ks, ke) within the keys, no host sync) and each row's columns
    # moved to their key positions (dgcompat.indexer._spread_ragged).
    Row("mqa_uncompressed", SGL, ">=0.2.5", "emulated", "compressed launch with max_seqlen_k = Nk, then row i's "
        "column j moved to column ks[i] + j", "host assert max_seqlen_k > 0 in 0.2.5's _C.so (strings)",
        "a release restores max_seqlen_k=0"),
    Row("mqa_uncompressed", UP, ">=2.8", "emulated", "compressed launch with max_seqlen_k = Nk, then row i's column j "
        "moved to column ks[i] + j", "upstream DeepGEMM 2.8 host assert max_seqlen_k > 0 (csrc/apis/attention.hpp; "
        "seen on an H200 with vLLM's 2.8.1)", "a release restores max_seqlen_k=0"),
    Row("mqa_uncompressed", ANY, "", "native", "max_seqlen_k=0 (or no max_seqlen_k) returns (Nq, Nk)", "-", "never"),
    # Which function takes logits_dtype: read from the build's own signature (kind "signature"), since two
    # builds of one version differ (vLLM 0.33.0's and 0.34.0's DeepGEMM 2.8.1). dgcompat passes it by keyword,
    # so its position (7 in sgl-deep-gemm <= 0.2.3.post2, 6 in vLLM 0.34.0's ragged function) does not matter
    # to the call; where no function takes it, float32 logits are converted (capability docs in indexer).
    Row("mqa_logits_dtype", SGL, ">=0.2.5", None, "fp8_fp4_mqa_logits(...) has no logits_dtype (float32 logits)",
        "sgl-deep-gemm 0.2.5 dropped clean_logits and logits_dtype", "a release restores logits_dtype", "signature",
        "fp8_fp4_mqa_logits:logits_dtype", _MQA_DTYPE),
    Row("mqa_logits_dtype", UP, ">=2.8", None,
        "vLLM 0.33.0's 2.8.1: fp8_fp4_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k, schedule_meta=None); vLLM "
        "0.34.0's 2.8.1: fp8_fp4_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k, logits_dtype=torch.float32, "
        "schedule_meta=None)", "vLLM 0.34.0's DeepGEMM (still __version__ 2.8.1) inserted logits_dtype "
        "(schema ScalarType logits_dtype=float)", "never (read from the signature)", "signature",
        "fp8_fp4_mqa_logits:logits_dtype", _MQA_DTYPE),
    Row("mqa_logits_dtype", BUNDLED, "", None, "fp8_mqa_logits(...) only (float32 logits)", "bundled schema",
        "bundles are unsupported", "signature", "fp8_fp4_mqa_logits:logits_dtype", _MQA_DTYPE),
    Row("mqa_logits_dtype", ANY, "", "fp8_fp4_mqa_logits",
        "fp8_fp4_mqa_logits(q, kv, weights, ks, ke, clean_logits, max_seqlen_k, logits_dtype=torch.float)",
        "upstream DeepGEMM 2.4.2 (7f2a703) added fp8_fp4_mqa_logits with logits_dtype", "never (read from the signature)",
        "signature", "fp8_fp4_mqa_logits:logits_dtype", _MQA_DTYPE),
    Row("paged_logits_dtype", SGL, ">=0.2.5", None,
        "fp8_fp4_paged_mqa_logits(..., max_context_len, indices=None): no logits_dtype",
        "sgl-deep-gemm 0.2.5 dropped clean_logits and logits_dtype", "a release restores logits_dtype", "signature",
        "fp8_fp4_paged_mqa_logits:logits_dtype", _PAGED_DTYPE),
    Row("paged_logits_dtype", UP, ">=2.8", None,
        "vLLM 0.33.0's 2.8.1: (..., max_context_len, indices=None); vLLM 0.34.0's 2.8.1: (..., max_context_len, "
        "logits_dtype=torch.float32, indices=None)", "vLLM 0.34.0's DeepGEMM (still __version__ 2.8.1) inserted "
        "logits_dtype before indices", "never (read from the signature)", "signature",
        "fp8_fp4_paged_mqa_logits:logits_dtype", _PAGED_DTYPE),
    Row("paged_logits_dtype", BUNDLED, "", None, "fp8_paged_mqa_logits(...) only (float32 logits)", "bundled schema",
        "bundles are unsupported", "signature", "fp8_fp4_paged_mqa_logits:logits_dtype", _PAGED_DTYPE),
    Row("paged_logits_dtype", ANY, "", "fp8_fp4_paged_mqa_logits",
        "fp8_fp4_paged_mqa_logits(..., max_context_len, clean_logits=False, logits_dtype=torch.float, indices=None)",
        "upstream DeepGEMM 2.4.2 (7f2a703) added fp8_fp4_paged_mqa_logits with logits_dtype",
        "never (read from the signature)", "signature", "fp8_fp4_paged_mqa_logits:logits_dtype", _PAGED_DTYPE),
    Row("paged_mqa_logits", SGL, ">=0.2.5", "fp8_fp4_paged_mqa_logits",
        "fp8_fp4_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, indices=None)",
        "sgl-deep-gemm 0.2.5 removed fp8_paged_mqa_logits", "never", "presence",
        "fp8_paged_mqa_logits|fp8_fp4_paged_mqa_logits"),
    Row("paged_mqa_logits", UP, ">=2.8", "fp8_fp4_paged_mqa_logits",
        "fp8_fp4_paged_mqa_logits((q, q_sf), kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, indices=None)",
        "upstream DeepGEMM 2.8 removed the legacy fp8_paged_mqa_logits", "never", "presence",
        "fp8_paged_mqa_logits|fp8_fp4_paged_mqa_logits"),
    Row("paged_mqa_logits", ANY, "", "fp8_paged_mqa_logits",
        "fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, clean_logits)",
        "-", "0.2.5 is the minimum", "presence", "fp8_paged_mqa_logits|fp8_fp4_paged_mqa_logits"),
    Row("paged_context_lens", BUNDLED, "", "1d", "context_lens (B,); next_n from q",
        "bundled snapshot predates 2-D lengths", "bundles are unsupported"),
    Row("paged_context_lens", REF, "", "any", "1-D, (B, next_n) or (B*next_n, 1)", "-", "never"),
    Row("paged_context_lens", ANY, "", "2d", "context_lens (B, next_n) or (B*next_n, 1); 1-D asserts",
        "upstream DeepGEMM 2.4.2 (7f2a703) made 2-D lengths mandatory", "never"),
    Row("paged_indices", BUNDLED, "", False, "no indices parameter", "bundled snapshot predates varlen paged MQA",
        "bundles are unsupported"),
    Row("paged_indices", ANY, "", True, "get_paged_mqa_logits_metadata(..., indices=None), "
        "fp8_paged_mqa_logits(..., indices=None)", "upstream DeepGEMM 2.5.0 (891d57b) added varlen indices", "never"),
    Row("paged_clean_logits_arg", BUNDLED, "", "required",
        "fp8_paged_mqa_logits(..., max_context_len, bool clean_logits)", "bundled schema: clean_logits has no default",
        "bundles are unsupported"),
    Row("paged_clean_logits_arg", SGL, ">=0.2.5", "absent",
        "fp8_fp4_paged_mqa_logits(..., max_context_len, indices=None)", "sgl-deep-gemm 0.2.5 dropped clean_logits",
        "never"),
    Row("paged_clean_logits_arg", UP, ">=2.8", "absent",
        "fp8_fp4_paged_mqa_logits(..., max_context_len, indices=None)", "upstream DeepGEMM 2.8 schema", "never"),
    Row("paged_clean_logits_arg", ANY, "", "optional", "clean_logits=False", "-", "0.2.5 is the minimum"),
    # clean_logits is emulated for paged logits everywhere: 2-D lengths forbid it natively, and the
    # bundled 1-D form would mask with a different per-row rule than a 2-D (B, next_n) input means.
    Row("paged_clean_logits", ANY, "", "emulated", "clean_logits=False at the launch; dgcompat masks",
        "2-D context_lens + clean_logits asserts (upstream 7f2a703)", "a release masks 2-D rows itself"),
    # Per-architecture values: the OTHER_ARCH entry is the plan for an unknown or other architecture.
    Row("paged_native_next_n", REF, "", {"sm90": (1, 2, 3, 4), "sm100": (1, 2, 3, 4), "sm120": (1, 2, 3, 4),
                                         OTHER_ARCH: (1,)},
        "-", "-", "never"),
    Row("paged_native_next_n", BUNDLED, "", {"sm90": (1, 2), "sm100": (1, 2), "sm120": (1,), OTHER_ARCH: (1,)},
        "host assert next_n == 1 or next_n == 2 (strings of the bundled deep_gemm_cpp, every arch)",
        "the bundled snapshot predates the SM100 next_n=4 atoms", "bundles are unsupported"),
    Row("paged_native_next_n", UP, ">=2.8", {"sm90": (1, 2), "sm100": (1, 2, 4), "sm120": (1,), OTHER_ARCH: (1,)},
        "vLLM's 2.8.1 launches next_n=4 on SM90 with KV multicast, whose schedule has num_sms / 2 + 1 rows (host "
        "assert _schedule_meta_size == num_sms / num_kv_multicast + 1, seen on an H200): dgcompat splits next_n=4",
        "the nv_dev SM90 next_n=4 work in the build vLLM vendors",
        "dgcompat builds multicast schedules (then widen sm90 to 4)"),
    Row("paged_native_next_n", ANY, "", {"sm90": (1, 2), "sm100": (1, 2, 4), "sm120": (1,), OTHER_ARCH: (1,)},
        "SM90 host assert next_n == 1 or next_n == 2 (seen on H200 with 0.1.2/0.1.4); SM100 atoms of 2",
        "SM90 kernel packs next_n*heads into one WGMMA; next_n=3 needs DeepGEMM PR #340",
        "the SM90 kernel accepts next_n 3/4 (then widen the row)"),
    Row("paged_heads", REF, "", {"sm90": (), "sm100": (), "sm120": (), OTHER_ARCH: ()}, "-", "-", "never"),
    # What the indexer kernels take on each architecture. "fp8-f32": FP8 q (no scale), float32
    # per-token KV scales, float32 weights, float32 logits (the stable contract). "mx-bf16": q
    # with packed-UE8M0 int32 MX scales (one int32 per 128 values), MX KV scales, bf16 weights,
    # bf16 logits; "mx": MX scales with float32 or bf16 weights; see dgcompat.indexer._sm100.
    Row("indexer_inputs", REF, "", {"sm90": "fp8-f32", "sm100": "fp8-f32", "sm120": "fp8-f32", OTHER_ARCH: "fp8-f32"}, "-", "-", "never"),
    # "mx": the same MX scales, but float32 weights too (float32 logits) and bf16 weights with logits_dtype=bf16:
    # the builds whose MQA functions take logits_dtype (vLLM 0.34.0's 2.8.1), read from the signature.
    Row("indexer_inputs", SGL, ">=0.2.5", {"sm90": "fp8-f32", "sm100": "mx-bf16", "sm120": "fp8-f32", OTHER_ARCH: "fp8-f32"},
        "SM100: fp8_fp4_*mqa_logits((q, q_sf int32 UE8M0), ...) with bf16 weights -> bf16 logits",
        "host asserts of 0.2.5's _C.so: is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4)); "
        "weights.scalar_type() == (arch_major == 10 ? kBFloat16 : kFloat32)", "a release takes FP32 scales on SM100 again",
        "signature", "fp8_fp4_mqa_logits:logits_dtype", _MX_INPUTS),
    Row("indexer_inputs", UP, ">=2.8", {"sm90": "fp8-f32", "sm100": "mx-bf16", "sm120": "fp8-f32", OTHER_ARCH: "fp8-f32"},
        "SM100: fp8_fp4_*mqa_logits((q, q_sf int32 UE8M0), ...) with bf16 weights -> bf16 logits (vLLM 0.33.0's "
        "2.8.1); float32 weights too and logits_dtype (vLLM 0.34.0's)",
        "host asserts of 2.8.1's _C_extension.abi3.so (the same conditions as sgl-deep-gemm 0.2.5; vLLM 0.34.0's "
        "adds weights.scalar_type() != kBFloat16 or logits_dtype == kBFloat16)",
        "a release takes FP32 scales on SM100 again", "signature", "fp8_fp4_mqa_logits:logits_dtype", _MX_INPUTS),
    # Paged MQA logits on SM100 only in the varlen form (indices=): dgcompat launches flat rows with
    # indices = arange(rows) there (each query row its own sequence, the same logits).
    Row("paged_varlen_required", SGL, ">=0.2.5", {"sm90": False, "sm100": True, "sm120": False, OTHER_ARCH: False},
        "fp8_fp4_paged_mqa_logits(..., indices=...) required on SM100",
        "host assert of 0.2.5's _C.so: arch_major == 12 or is_varlen == (arch_major == 10)", "a release drops it"),
    Row("paged_varlen_required", UP, ">=2.8", {"sm90": False, "sm100": True, "sm120": False, OTHER_ARCH: False},
        "fp8_fp4_paged_mqa_logits(..., indices=...) required on SM100",
        "host assert of 2.8.1's _C_extension.abi3.so: arch_major == 12 or is_varlen == (arch_major == 10)",
        "a release drops it"),
    Row("paged_varlen_required", ANY, "", _all_arches(False), "indices= optional", "-", "never"),
    Row("indexer_inputs", ANY, "", {"sm90": "fp8-f32", "sm100": "fp8-f32", "sm120": "fp8-f32", OTHER_ARCH: "fp8-f32"},
        "FP8 q, float32 KV scales and weights, float32 logits", "-", "never"),
    # Query formats the indexer kernels compute on each architecture: "fp8" (FP8 q, per-token scale folded into
    # the weights), "mxfp8" (FP8 q with int32 packed UE8M0 scales), "fp4" (packed e2m1 q with UE8M0 scales).
    Row("indexer_q_formats", REF, "", _all_arches(("fp8", "mxfp8", "fp4")), "-", "the reference computes every form",
        "never"),
    Row("indexer_q_formats", BUNDLED, "", _all_arches(("fp8",)), "fp8_mqa_logits / fp8_paged_mqa_logits only",
        "bundled snapshot (no fp8_fp4 names)", "bundles are unsupported"),
    Row("indexer_q_formats", SGL, ">=0.2.5", {"sm90": ("fp8",), "sm100": ("fp8", "mxfp8", "fp4"),
                                               "sm120": ("fp8", "fp4"), OTHER_ARCH: ("fp8",)},
        "fp8_fp4_*mqa_logits((q, q_sf), ...): MX scales on SM100, FP4 with MX scales on SM120",
        "host asserts of 0.2.5's _C.so: is_mx_sf == (arch_major == 10 or (arch_major == 12 and is_fp4)); plain FP8 "
        "on SM100 through dgcompat.indexer._sm100 (not run on an SM100 GPU here)", "never"),
    Row("indexer_q_formats", UP, ">=2.8", {"sm90": ("fp8",), "sm100": ("fp8", "mxfp8", "fp4"),
                                           "sm120": ("fp8", "fp4"), OTHER_ARCH: ("fp8",)},
        "fp8_fp4_*mqa_logits((q, q_sf), ...): MX scales on SM100, FP4 with MX scales on SM120",
        "host asserts of 2.8.1's _C_extension.abi3.so (the same conditions as sgl-deep-gemm 0.2.5); not run on an "
        "SM100 GPU here", "never"),
    Row("indexer_q_formats", ANY, "", {"sm90": ("fp8",), "sm100": ("fp8", "fp4"), "sm120": ("fp8",),
                                       OTHER_ARCH: ("fp8",)},
        "fp8_fp4_*mqa_logits((q, q_sf), ...): FP4 q (kPackedFP4) with int32 UE8M0 scales on SM100",
        "host asserts of sgl-deep-gemm 0.1.4's _C.so: q_fp.scalar_type() == kPackedFP4, q_sf int32, kv_sf int32; the "
        "SM90 kernels are FP8 only (not run on an SM100 GPU here)", "never"),
    # GEMM operands as packed FP4 (int8, two e2m1 values per byte, K/2 columns) with 32-wide UE8M0 scale blocks
    # (recipe_a / recipe_b (1, 32)): SGLang's DeepSeek-V4 FP4 experts. dgcompat passes them on unchanged; where the
    # build has no FP4 GEMM on the architecture its native rejection is reported as this capability's refusal.
    Row("gemm_fp4_operands", REF, "", _all_arches(True), "-", "the reference computes FP4 operands everywhere",
        "never"),
    Row("gemm_fp4_operands", BUNDLED, "", _all_arches(False), "FP8 operands only", "bundled snapshot",
        "bundles are unsupported"),
    Row("gemm_fp4_operands", ANY, "", {"sm90": False, "sm100": True, "sm120": False, OTHER_ARCH: False},
        "m_grouped_fp8_fp4_gemm_nt_contiguous / fp8_fp4_gemm_nt with kPackedFP4 (int8) operands on SM100",
        "host assert of sgl-deep-gemm 0.1.4's _C.so: ab.scalar_type() == kPackedFP4 and arch_major == 10 (not run "
        "on an SM100 GPU here)", "never"),
    # K granularities of the scales transform_sf_into_required_layout brings into a GEMM's layout: 128-wide blocks
    # on SM90 (MN-major float32), also 32-wide ones on SM100 (packed UE8M0, MX / FP4 recipes such as (1, 32)).
    Row("sf_transform_gran_k", REF, "", _all_arches((32, 128)), "-", "the reference transforms both", "never"),
    Row("sf_transform_gran_k", ANY, "", {"sm90": (128,), "sm100": (32, 128), "sm120": (128,), OTHER_ARCH: (128,)},
        "transform_sf_into_required_layout(sf, mn, k, (1, 32), ...) on SM90: host assert 'Unknown SF transformation'",
        "seen on an H200 with sgl-deep-gemm 0.1.4 (layout.hpp:60) and vLLM 0.34.0's 2.8.1 (layout.hpp:62) for "
        "SGLang 0.5.23's FP4-expert scales; the SM100 branch packs 32-wide UE8M0 blocks (not run on SM100 here)",
        "never"),
    # Weight dtypes the indexer kernels take on each architecture (bf16 weights reduce in bf16 and need bf16
    # logits). dgcompat upcasts bf16 weights to float32 where only float32 is taken (exact).
    Row("indexer_weights", REF, "", _all_arches(("float32", "bfloat16")), "-", "-", "never"),
    Row("indexer_weights", BUNDLED, "", _all_arches(("float32",)), "weights float32", "bundled snapshot",
        "bundles are unsupported"),
    Row("indexer_weights", ANY, "", {"sm90": ("float32",), "sm100": ("float32", "bfloat16"), "sm120": ("float32",),
                                     OTHER_ARCH: ("float32",)},
        "weights.scalar_type() == kFloat or (arch_major == 10 and weights.scalar_type() == kBFloat16); "
        "weights.scalar_type() != kBFloat16 or logits_dtype == kBFloat16",
        "host asserts of sgl-deep-gemm 0.1.4's and vLLM 0.34.0's native libraries; sgl-deep-gemm 0.2.5 and vLLM "
        "0.33.0's 2.8.1 (no logits_dtype parameter) take only bf16 weights on SM100", "never", "signature",
        "fp8_fp4_mqa_logits:logits_dtype", _WEIGHTS),
    Row("paged_block_kv", REF, "", {"sm90": (), "sm100": (), "sm120": (), OTHER_ARCH: ()}, "-", "-", "never"),
    Row("paged_block_kv", UP, ">=2.8", {"sm90": (32, 64), "sm100": (32, 64, 128), "sm120": (32, 64), OTHER_ARCH: ()},
        "host assert (arch 10: 32/64/128) or (arch 9: 32/64) or (arch 12: 32/64)",
        "vLLM's 2.8.1 build adds 32-token KV blocks on SM90 (strings of _C_extension.abi3.so)", "never"),
    Row("paged_block_kv", SGL, ">=0.2.5", {"sm90": (64,), "sm100": (32, 64, 128), "sm120": (32, 64, 128, 256), OTHER_ARCH: ()},
        "host assert (arch 10: 32/64/128) or (arch 9: 64) or (arch 12: 32/64/128/256)",
        "sgl-deep-gemm 0.2.5 widened SM120 block_kv to 32..256 (strings of _C.so)", "never"),
    Row("paged_block_kv", SGL, ">=0.1.6", {"sm90": (64,), "sm100": (32, 64, 128), "sm120": (64,), OTHER_ARCH: ()},
        "host assert (arch 10: 32/64/128) or (arch 12: 64) or (arch 9: 64)",
        "sgl-deep-gemm 0.1.6 added 128-token blocks on SM100 (strings of _C.so)", "never"),
    Row("paged_block_kv", BUNDLED, "", {"sm90": (64,), "sm100": (64,), "sm120": (64,), OTHER_ARCH: ()},
        "block_kv == 64 (the v2.1 base)", "bundled snapshot", "bundles are unsupported"),
    Row("paged_block_kv", ANY, "", {"sm90": (64,), "sm100": (32, 64), "sm120": (64,), OTHER_ARCH: ()},
        "host assert block_kv == 64 or (arch_major == 10 and block_kv == 32)",
        "strings of sgl-deep-gemm 0.0.1-0.1.5.post3; upstream 2.6.1 attention.hpp", "never"),
    Row("paged_heads", SGL, ">=0.2.5", {"sm90": (32, 64), "sm100": (16, 32, 64), "sm120": (16, 32, 64), OTHER_ARCH: ()},
        "host assert of 0.2.5's _C.so: num_heads == 16 or 32 or 64 (8 dropped)",
        "sgl-deep-gemm 0.2.5 native contract (see the native-contract intake)", "a release accepts 8 heads again"),
    Row("paged_heads", UP, ">=2.8", {"sm90": (32, 64), "sm100": (16, 32, 64), "sm120": (16, 32, 64), OTHER_ARCH: ()},
        "host assert of 2.8.1's _C_extension.abi3.so: num_heads == 16 or 32 or 64",
        "upstream DeepGEMM 2.8 dropped 8 heads", "a release accepts 8 heads again"),
    Row("paged_heads", ANY, "", {"sm90": (32, 64), "sm100": (8, 16, 32, 64), "sm120": (8, 16, 32, 64), OTHER_ARCH: ()},
        "paged MQA kernels are instantiated for these head counts", "DeepGEMM kernel templates",
        "the kernels take any head count"),
    # --- returned tensors ----------------------------------------------------------------------
    # Informative: whether strides collapse depends on the torch build too, so scales.py checks every
    # returned scale instead of trusting this row.
    Row("collapsed_strides", SGL, "<0.2.3", True,
        "results cross DLPack (at::toDLPack), which rewrites the stride of size-1 dims on some torch builds",
        "sgl-deep-gemm's tvm-ffi binding", _FFI_ERA_END, informative=True),
    Row("collapsed_strides", ANY, "", False, "at::Tensor returned directly", "-", "never", informative=True),
    Row("raw_ffi_returns", SGL, "<0.2.0", True, "wrappers return the raw tvm-ffi result",
        "0.2.0 added _from_dlpack_if_needed", "0.2.0 is the minimum"),
    Row("raw_ffi_returns", ANY, "", False, "torch.Tensor", "-", "never"),
    Row("bare_tensor_pairs", SGL, "<0.2.0", False,
        "_parse_tensor_or_tuple calls torch.Tensor([1.0], dtype=...) -> TypeError for a bare tensor",
        "fixed in sgl-deep-gemm 0.2.0 (torch.tensor)", "0.2.0 is the minimum", informative=True),
    Row("bare_tensor_pairs", ANY, "", True, "a bare tensor gets a unit scale", "-", "never", informative=True),
    # The bundled schema also takes the recipe as a list (int[]) and asserts nothing about the pairing.
    Row("transform_sf_is_sfa", BUNDLED, "", "bool", "schema: bool is_sfa=False, int[] recipe (None is rejected)",
        "bundled schema", "bundles are unsupported"),
    Row("transform_sf_is_sfa", ANY, "", "optional", "is_sfa=None", "-", "never"),
    # --- defaults dgcompat does not pass (the release's default is used) ----------------------
    Row("compiled_dims_default", UP, "", "nk", "bf16_gemm_nt(..., compiled_dims='nk')",
        "upstream DeepGEMM bakes N and K into each JIT kernel by default",
        "never (dgcompat passes no compiled_dims: either default compiles a kernel per shape, results agree)"),
    Row("compiled_dims_default", SGL, "", "", "bf16_gemm_nt(..., compiled_dims='')",
        "sgl-deep-gemm compiles shape-generic bf16 kernels by default", "never (not passed)"),
    Row("compiled_dims_default", BUNDLED, "", "", 'bf16_gemm_nt(..., str compiled_dims="")', "bundled schema",
        "bundles are unsupported"),
    Row("compiled_dims_default", ANY, "", "nk", "compiled_dims='nk'", "-", "never (not passed)"),
    Row("mk_alignment_arity", SGL, ">=0.2.0", 2,
        "get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None, num_groups=None)",
        "sgl-deep-gemm 0.2.0 added num_groups", "never"),
    Row("mk_alignment_arity", BUNDLED, "", 0, "absent", "bundled snapshot", "bundles are unsupported"),
    Row("mk_alignment_arity", REF, "", 0, "absent: the fixed get_mk_alignment_for_contiguous_layout", "-", "never"),
    Row("mk_alignment_arity", ANY, "", 1, "get_theoretical_mk_alignment_for_contiguous_layout(expected_m=None)",
        "upstream DeepGEMM 2.4.2 added it with one argument", "never"),
    Row("mk_alignment_setter", BUNDLED, "", False, "absent", "bundled snapshot", "bundles are unsupported",
        "presence", "set_mk_alignment_for_contiguous_layout"),
    Row("mk_alignment_setter", ANY, "", True, "set_mk_alignment_for_contiguous_layout(int)",
        "a workspace aligned differently from the kernel's block M faults under graph replay (vLLM)", "never",
        "presence", "set_mk_alignment_for_contiguous_layout"),
    Row("deterministic_default", UP, ">=2.8", "off", "use_deterministic_algorithms(bool); off unless called",
        "upstream DeepGEMM 2.8: kernels are not batch-invariant unless use_deterministic_algorithms(True)",
        "never (a default, not a defect)"),
    Row("deterministic_default", SGL, ">=0.2.0", "switch", "use_deterministic_algorithms(bool) exists",
        "sgl-deep-gemm 0.2.0 added the switch; its default is not read by dgcompat", "never"),
    Row("deterministic_default", ANY, "", None, "no switch (kernels as built)", "-", "never"),
)

def arch_family(arch: str | None) -> str | None:
    """``"sm103"`` -> ``"sm100"``; unknown or None -> None."""
    if arch is None:
        return None
    return ARCHES.get(arch.lower())


def current_arch() -> str | None:
    """``DGCOMPAT_ARCH`` if set, else the CUDA device's ``smXY`` once CUDA is initialized, else None.

    Never creates a CUDA context (engines fork workers after configuring): before the process has
    initialized CUDA itself (its first kernel call or tensor on the GPU does), the answer is None and
    planning is conservative; the first call after initialization asks the current device. Where
    ``pynvml`` is importable and every GPU has one compute capability, NVML answers without a context
    (:mod:`dgcompat._device`).
    """
    chosen = env.arch()
    return chosen if chosen is not None else _device.arch()


def _effective(rel: Release, backend: str) -> tuple[str, Version | None]:
    """The (distribution, version) rows are matched against."""
    if backend == "reference":
        return REF, None
    if rel.refusal is not None or rel.version is None:
        return UNIDENTIFIED, None  # never planned as another release; binding refuses it
    if rel.source == "sgl-deep-gemm":
        return SGL, rel.version
    if rel.source == "bundled" and rel.dist is not None:
        return rel.dist, rel.version
    if rel.dist == UP:
        return UP, rel.version
    # Any other owner: the newest known sgl-deep-gemm behaviour, refined by probes.
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


Pdl = Literal["top-level", "native"]
LayoutParam = Literal["m_indices", "grouped_layout"]
MaskedName = Literal["m_grouped_fp8_gemm_nt_masked", "fp8_m_grouped_gemm_nt_masked"]
MaskedReturns = Literal["tuple", "native-result", "none"]
MqaName = Literal["fp8_mqa_logits", "fp8_fp4_mqa_logits"]
PagedName = Literal["fp8_paged_mqa_logits", "fp8_fp4_paged_mqa_logits"]
NativeOrEmulated = Literal["native", "emulated"]
SeqlenK = Literal["required", "positive", "optional", "absent"]
ContextLens = Literal["1d", "2d", "any"]
PagedCleanArg = Literal["required", "optional", "absent"]
IsSfa = Literal["bool", "optional"]


@dataclass(frozen=True)
class Capabilities:
    """The installed release's answers. ``sources[name]`` is ``"table"``, ``"probe"`` or ``"signature"``."""

    release: str
    backend: str
    arch: str | None
    compile_mode: bool
    pdl: Pdl | None
    contiguous_layout_param: LayoutParam
    ensure_zero_padding_position: int | None
    bf16_grouped_contiguous: bool
    bf16_grouped_masked: bool
    masked_gemm: MaskedName | None
    masked_overlap: bool
    masked_returns: MaskedReturns
    mqa_logits: MqaName | None
    mqa_clean_logits: NativeOrEmulated
    mqa_max_seqlen_k: SeqlenK
    mqa_uncompressed: NativeOrEmulated
    mqa_logits_dtype: MqaName | None
    paged_logits_dtype: PagedName | None
    paged_mqa_logits: PagedName | None
    paged_context_lens: ContextLens
    paged_clean_logits: Literal["emulated"]
    paged_clean_logits_arg: PagedCleanArg
    paged_indices: bool
    paged_native_next_n: tuple[int, ...]
    paged_heads: tuple[int, ...]
    paged_block_kv: tuple[int, ...]
    indexer_inputs: str
    paged_varlen_required: bool
    indexer_q_formats: tuple[str, ...]
    indexer_weights: tuple[str, ...]
    gemm_fp4_operands: bool
    sf_transform_gran_k: tuple[int, ...]
    mqa_q_form: str
    compiled_dims_default: str
    mk_alignment_arity: int
    mk_alignment_setter: bool
    deterministic_default: str | None
    collapsed_strides: bool
    raw_ffi_returns: bool
    bare_tensor_pairs: bool
    transform_sf_is_sfa: IsSfa
    sources: Mapping[str, str] = field(default_factory=dict)

    def identical_to_upstream(self, name: str) -> bool:
        """Whether the installed ``deep_gemm.<name>`` keeps the stable contract of ``dgcompat.<name>``
        (then :func:`dgcompat.resolve` hands it out itself); see :data:`UPSTREAM_IDENTITY`."""
        if name not in UPSTREAM_IDENTITY:
            return False
        condition = UPSTREAM_IDENTITY[name]
        return condition is None or getattr(self, condition[0]) == condition[1]

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


#: Stable names whose upstream function keeps the stable contract (same parameters in the same
#: positions, same results), so :func:`dgcompat.resolve` may hand out the upstream object: always
#: (None), or where ``(capability, value)`` holds. Names not listed are dgcompat's own functions.
UPSTREAM_IDENTITY: Mapping[str, tuple[str, Any] | None] = MappingProxyType({
    "fp8_gemm_nt": None,
    "bf16_gemm_nt": None,
    "get_num_sms": None,
    "set_num_sms": None,
    "m_grouped_bf16_gemm_nt_masked": None,
    # Not the grouped contiguous GEMMs: the stable functions take the layout tensor under both of its upstream
    # names (m_indices, grouped_layout), which no release's function does.
    # Not the layout functions: dgcompat checks their results for collapsed strides on every release.
})


_UNKNOWN: Any = object()


def _parameters(rel: Release, backend: str, module: Any, fname: str) -> Any:
    """The parameter names of ``fname`` in the build the table is evaluated for: the loaded function's
    (``module``), else the ones detection read from the installed build's source; None where the build has no
    such function; :data:`_UNKNOWN` where neither source exists (the reference backend before it is loaded,
    a build whose source could not be read)."""
    if module is not None:
        fn = getattr(module, fname, None)
        return None if fn is None else _pysurface.live_parameters(fn) or _UNKNOWN
    if backend == "reference" or rel.refusal is not None:
        return _UNKNOWN
    # A name the source does not define may still be a native op bound at import: unknown until then.
    return dict(rel.signatures).get(fname, _UNKNOWN)


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
        sources[name] = "table"
        if row.kind == "signature" and row.probe and row.probe_values is not None:
            fname, param = row.probe.split(":")
            params = _parameters(rel, backend, module, fname)
            if params is not _UNKNOWN:
                sources[name] = "signature"
                value = row.probe_values["present" if params is not None and param in params else "absent"]
        if isinstance(value, Mapping):  # per architecture
            value = value.get(family or OTHER_ARCH, value[OTHER_ARCH])
        if row.kind == "presence" and row.probe and module is not None:
            found = _probe(module, row.probe)
            sources[name] = "probe"
            if isinstance(row.value, bool):
                value = found is not None
            elif row.probe_values is not None:
                value = None if found is None else row.probe_values[found]
            else:
                value = found
        values[name] = value
    return Capabilities(release=rel.label if backend != "reference" else "reference", backend=backend, arch=arch,
                        sources=MappingProxyType(sources), **values)


@functools.lru_cache(maxsize=8)
def _cached(rel: Release, backend: str, arch: str | None, module_id: int) -> Capabilities:
    module = _backend.loaded_module() if module_id else None
    return compute(rel, backend=backend, arch=arch, module=module)


def capabilities() -> Capabilities:
    """The installed release's capability map (frozen, printable).

    Before deep_gemm is imported the answers come from the table; afterwards presence rows are
    probed on the live module. Never imports deep_gemm itself.
    """
    module = _backend.loaded_module()
    return _cached(release(), backend_name(), current_arch(), id(module) if module is not None else 0)


def reset() -> None:
    """Forget cached answers (tests)."""
    _cached.cache_clear()
    _device.reset()
