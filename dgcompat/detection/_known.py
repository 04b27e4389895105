"""The registries detection reads: the distributions that ship a deep_gemm, every build dgcompat knows and the
torch each native library was built for. Plain data (and one lookup); the certification wing and the tests hold
its own records against these.
"""

from __future__ import annotations

from packaging.specifiers import SpecifierSet
from packaging.version import Version

__all__ = ["SGL_DEEP_GEMM", "UPSTREAM", "KERNEL_WHEELS", "UPSTREAM_NAMES", "VENDORED", "KNOWN_SGL_DEEP_GEMM",
           "KNOWN_UPSTREAM", "SIGNATURE_NAMES", "KNOWN_SURFACES", "EXPECTED_TORCH", "KERNEL_FLOOR_WITH_SGL_DEEP_GEMM",
           "expected_torch"]

SGL_DEEP_GEMM = "sgl-deep-gemm"
UPSTREAM = "deep-gemm"
KERNEL_WHEELS = ("sglang-kernel", "sgl-kernel")
UPSTREAM_NAMES = ("deep-gemm", "deepgemm")

#: Engines that vendor a deep_gemm copy: (``DGCOMPAT_BACKEND`` value, one of :data:`dgcompat.env.BACKENDS`, owning distribution,
#: top-level package, folder of the copy inside it, import name of the copy).
VENDORED: tuple[tuple[str, str, str, str, str], ...] = (
    ("vllm", "vllm", "vllm", "third_party/deep_gemm", "vllm.third_party.deep_gemm"),
    ("tensorrt-llm", "tensorrt-llm", "tensorrt_llm", "deep_gemm", "tensorrt_llm.deep_gemm"),
)


#: Every published sgl-deep-gemm release; a newer one is "unknown" and handled by probes.
KNOWN_SGL_DEEP_GEMM: tuple[str, ...] = (
    "0.0.1", "0.1.0", "0.1.1", "0.1.2", "0.1.3", "0.1.4", "0.1.4.post1", "0.1.5", "0.1.5.post1",
    "0.1.5.post2", "0.1.5.post3", "0.1.6", "0.1.7", "0.2.0", "0.2.1", "0.2.1.post1", "0.2.2",
    "0.2.3", "0.2.3.post1", "0.2.3.post2", "0.2.5",
)

#: Upstream DeepGEMM releases dgcompat has capability rows for (table.py); others are probed.
KNOWN_UPSTREAM: tuple[str, ...] = ("2.6.1", "2.8.1")

#: The functions whose Python signatures detection reads from a build's source (:mod:`dgcompat._pysurface`):
#: every deep_gemm function dgcompat calls (a test holds this list against the adapters' declared calls), the
#: indexer's first (the capability table's signature rows ask about their parameters). Their digest is the
#: build's surface id (:attr:`Release.surface`), the part of a build's fingerprint detection can read cheaply.
SIGNATURE_NAMES: tuple[str, ...] = (
    "fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "fp8_mqa_logits", "fp8_paged_mqa_logits",
    "get_paged_mqa_logits_metadata",
    "fp8_gemm_nt", "fp8_fp4_gemm_nt", "bf16_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous",
    "m_grouped_fp8_fp4_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked", "m_grouped_fp8_fp4_gemm_nt_masked",
    "fp8_m_grouped_gemm_nt_masked", "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked",
    "bf16_m_grouped_gemm_nt_masked",
    "set_num_sms", "get_num_sms", "set_pdl", "get_pdl", "set_compile_mode", "get_compile_mode",
    "get_m_alignment_for_contiguous_layout", "get_mk_alignment_for_contiguous_layout",
    "get_theoretical_mk_alignment_for_contiguous_layout", "transform_sf_into_required_layout",
    "get_mn_major_tma_aligned_tensor", "get_mn_major_tma_aligned_packed_ue8m0_tensor",
)

#: The surface id (:attr:`Release.surface`) of every build dgcompat knows: ``(distribution, version) ->
#: {surface id: which build}``. A build of a listed version with another id is reported everywhere as "same
#: version, different surface". The certification wing records each build's whole fingerprint (native
#: schemas, host asserts, JIT headers: ``dgcompat_conformance/surface/builds.json``, which a test holds
#: against this table) and computes it for an installed build (``dgcompat doctor``).
KNOWN_SURFACES: dict[tuple[str, str], dict[str, str]] = {
    # vLLM 0.34.0 vendors a DeepGEMM whose __init__.py is byte-identical to 0.33.0's but whose _C.py inserts
    # logits_dtype (before schedule_meta in fp8_fp4_mqa_logits, before indices in fp8_fp4_paged_mqa_logits).
    (UPSTREAM, "2.8.1"): {
        "354b343b74a3": "MQA logits without logits_dtype (the build vLLM 0.33.0 vendors)",
        "fa714562dd0e": "MQA logits with logits_dtype (the build vLLM 0.34.0 vendors)",
    },
    # One build each: the wheel on PyPI. (The bundled copies' functions are all native ops: no Python part.)
    (SGL_DEEP_GEMM, "0.0.1"): {"3b340d0cec42": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.0"): {"3b340d0cec42": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.1"): {"bb78a949f0b0": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.2"): {"bb78a949f0b0": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.3"): {"bb78a949f0b0": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.4"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.4.post1"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.5"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.5.post1"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.5.post2"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.5.post3"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.6"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.1.7"): {"6df5447106b3": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.0"): {"cc9c8f2c7041": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.1"): {"cc9c8f2c7041": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.1.post1"): {"cc9c8f2c7041": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.2"): {"cc9c8f2c7041": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.3"): {"cc9c8f2c7041": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.3.post1"): {"cc9c8f2c7041": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.3.post2"): {"cc9c8f2c7041": "the published wheel"},
    (SGL_DEEP_GEMM, "0.2.5"): {"1108e26fabd6": "the published wheel"},
}

#: (distribution, releases, torch the native library was built against, evidence).
#: Only for libraries that import torch's C++ symbols (they need this exact torch): the binary
#: does not name its minor, so the pairing comes from the torch-header fingerprint of each
#: native library (see docs/compatibility.md) and, for the kernel wheels, their README pins.
#: Stable-ABI libraries need no row: their minimum torch is read from their imports.
EXPECTED_TORCH: tuple[tuple[str, str, str, str], ...] = (
    (SGL_DEEP_GEMM, ">=0.0.1,<0.1.5.post2", "==2.11.*", "header fingerprint of _C.so; runs on torch 2.11 (H200)"),
    (SGL_DEEP_GEMM, ">=0.1.5.post2,<0.2.1.post1", "==2.13.*", "header fingerprint of _C.so; mis-marshals 2-D tensors on torch 2.11"),
    (SGL_DEEP_GEMM, ">=0.2.1.post1,<=0.2.5", "==2.14.*", "header fingerprint of _C.so; undefined torch symbol on torch 2.11"),
    ("sgl-kernel", "<0.4", "==2.9.1", "README pin; deep_gemm_cpp links CUDA 12"),
    ("sglang-kernel", ">=0.4.0,<0.4.2", "==2.9.1", "README pin; deep_gemm_cpp links CUDA 12"),
    ("sglang-kernel", ">=0.4.2,<0.4.2.post1", "==2.11.*", "README pin; deep_gemm_cpp links CUDA 13"),
)

#: sgl-deep-gemm's files must not be overwritten by a kernel wheel that still bundles deep_gemm;
#: sglang-kernel 0.4.2.post1 is the first without the bundle and 0.4.3 the engines' floor.
KERNEL_FLOOR_WITH_SGL_DEEP_GEMM = Version("0.4.3")


def expected_torch(dist: str, version: Version) -> SpecifierSet | None:
    """The torch a release's native library was built for (:data:`EXPECTED_TORCH`), or None where no row says."""
    for name, releases, torch_spec, _why in EXPECTED_TORCH:
        if name == dist and version in SpecifierSet(releases, prereleases=True):
            return SpecifierSet(torch_spec)
    return None
