"""The distributions that hold deep_gemm and the releases the certification wing knows: one copy, one table.

The names and the sgl-deep-gemm release list are the runtime's (:mod:`dgcompat.detection`); the
wing adds what the runtime has no use for: :data:`DISTRIBUTIONS`, the discovery table the intake
(``dgcompat conform --latest``) walks. One row per distribution on the package index that ships (or once
shipped, or only pretends to ship) a deep_gemm: where the copy sits in its wheels, whether its wheels are
big enough that only the deep_gemm folder and the dist-info are fetched, which releases the wing
certifies, up to which release the index has been looked at, and which releases are recorded as shipping
no deep_gemm or as refused. Every comparison of distribution names goes through :func:`canonical`
(:func:`packaging.utils.canonicalize_name`, PEP 503).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name
from packaging.version import Version

from dgcompat.detection import KERNEL_WHEELS, KNOWN_SGL_DEEP_GEMM, SGL_DEEP_GEMM, UPSTREAM, VENDORED

__all__ = ["SGL_DEEP_GEMM", "KERNEL_DISTS", "DEEP_GEMM_DISTS", "SGL_DEEP_GEMM_RELEASES", "BUNDLED_RELEASES",
           "TVM_FFI", "HOLDS", "Distribution", "DISTRIBUTIONS", "distribution", "canonical"]

#: The kernel wheels that bundled a deep_gemm copy (sgl-kernel, sglang-kernel).
KERNEL_DISTS: tuple[str, ...] = tuple(sorted(KERNEL_WHEELS))

#: Every distribution whose wheels the wing certifies.
DEEP_GEMM_DISTS: tuple[str, ...] = (SGL_DEEP_GEMM, *KERNEL_DISTS)

#: Every sgl-deep-gemm release on PyPI (the runtime's list; docs/sources/wheel-matrix.md §2.1).
SGL_DEEP_GEMM_RELEASES: tuple[str, ...] = KNOWN_SGL_DEEP_GEMM

#: Kernel wheels that bundle a deep_gemm copy (docs/sources/wheel-matrix.md §2.2); ~500 MB each, so opt-in.
BUNDLED_RELEASES: tuple[tuple[str, str], ...] = (
    ("sgl-kernel", "0.3.21"),
    ("sglang-kernel", "0.4.0"),
    ("sglang-kernel", "0.4.1.post1"),
    ("sglang-kernel", "0.4.2"),
)

#: The tvm-ffi runtime the tvm-ffi era's wheels pin.
TVM_FFI = "apache-tvm-ffi"

#: What a distribution's wheels hold: deep_gemm itself, a copy bundled in a kernel wheel, a copy vendored in
#: an engine wheel, or upstream DeepGEMM under its own name.
HOLDS: Mapping[str, str] = MappingProxyType({
    "package": "the deep_gemm package is the wheel",
    "bundled": "a kernel wheel with a deep_gemm copy at its top level",
    "vendored": "an engine wheel with a deep_gemm copy inside its own package",
    "upstream": "upstream DeepGEMM under its own name",
})


def canonical(name: str) -> str:
    """The PEP 503 form of a distribution name (``SGL_Deep.Gemm`` -> ``sgl-deep-gemm``)."""
    return str(canonicalize_name(name))


@dataclass(frozen=True)
class Distribution:
    """One row of the discovery table."""

    name: str
    holds: str
    """A key of :data:`HOLDS`."""
    path: str
    """Where the deep_gemm package sits in the distribution's wheels (``vllm/third_party/deep_gemm/``)."""
    partial: bool
    """Fetch only the deep_gemm folder and the dist-info (HTTP range requests), never the whole wheel."""
    certified: tuple[str, ...]
    """The releases whose copy the wing certifies (CPU tier, and the GPU tier where it ran)."""
    reviewed_through: str | None
    """The newest release whose wheel has been looked at; a newer final release on the index is new."""
    without: str = ""
    """A specifier of the releases recorded as shipping no deep_gemm (checked again for each new one)."""
    refused: Mapping[str, str] = field(default_factory=dict)
    """Release -> why dgcompat refuses what it installs as deep_gemm (and what to install instead)."""
    wheels_elsewhere: str = ""
    """Where the wheels are published when the index holds only source archives of the distribution."""
    evidence: str = ""

    @property
    def newest_recorded(self) -> Version | None:
        known = [Version(v) for v in (*self.certified, *self.refused, self.reviewed_through)
                 if v is not None]
        return max(known) if known else None

    def ships_none(self, version: Version | str) -> bool:
        """Whether ``version`` is recorded as shipping no deep_gemm."""
        v = version if isinstance(version, Version) else Version(version)
        return bool(self.without) and v in SpecifierSet(self.without, prereleases=True)


def _vendored_path(dist: str) -> str:
    for _value, owner, top, sub, _module in VENDORED:
        if owner == dist:
            return f"{top}/{sub}/"
    raise KeyError(dist)


#: The discovery table. Looked at on 2026-12-03 by reading each wheel's central directory through range
#: requests (``dgcompat conform --latest``): vLLM vendors deep_gemm from 0.20.0 on, sglang-kernel bundles
#: none from 0.4.2.post1 on (through 0.4.10), PyPI holds only sdists of tensorrt-llm (installer shims; its
#: wheels are on NVIDIA's index) and one sdist of deep-gemm (1.0.0, DeepGEMM's v1 API).
DISTRIBUTIONS: tuple[Distribution, ...] = (
    Distribution(SGL_DEEP_GEMM, "package", "deep_gemm/", False, KNOWN_SGL_DEEP_GEMM, KNOWN_SGL_DEEP_GEMM[-1],
                 evidence="every release on PyPI (docs/sources/wheel-matrix.md §2.1)"),
    Distribution("sgl-kernel", "bundled", "deep_gemm/", True, ("0.3.21",), "0.3.21",
                 evidence="0.3.21 is the last sgl-kernel (continued as sglang-kernel)"),
    Distribution("sglang-kernel", "bundled", "deep_gemm/", True, ("0.4.0", "0.4.1.post1", "0.4.2"), "0.4.10",
                 without=">=0.4.2.post1",
                 evidence="0.4.2.post1 .. 0.4.10 hold no deep_gemm/ (central directories read 2026-12-03)"),
    Distribution("vllm", "vendored", _vendored_path("vllm"), True, ("0.33.0", "0.34.0"), "0.34.0", without="<0.20.0",
                 evidence="vllm/third_party/deep_gemm/ from 0.20.0 on (central directories read 2026-12-03)"),
    Distribution("tensorrt-llm", "vendored", _vendored_path("tensorrt-llm"), True, (), None,
                 wheels_elsewhere="https://pypi.nvidia.com",
                 evidence="PyPI holds only sdists of tensorrt-llm (installer shims)"),
    Distribution(UPSTREAM, "upstream", "deep_gemm/", False, (), "1.0.0",
                 refused=MappingProxyType({"1.0.0": "an sdist of DeepGEMM's v1 API (gemm_fp8_fp8_bf16_nt, ...), not "
                                                    "DeepGEMM 2.x; install sgl-deep-gemm (or a DeepGEMM 2.x build) "
                                                    "instead"}),
                 evidence="the only release on PyPI (2025-02-27)"),
)


def distribution(name: str) -> Distribution | None:
    """The discovery-table row of ``name`` (any spelling), or None."""
    key = canonical(name)
    return next((d for d in DISTRIBUTIONS if d.name == key), None)
