"""The distributions that hold deep_gemm and the releases the certification wing knows: one copy.

The names and the sgl-deep-gemm release list are the runtime's (:mod:`dgcompat.detection`); the
wing adds only what the runtime has no use for (the kernel wheels whose bundled copies it
certifies). Every comparison of distribution names goes through :func:`canonical`
(:func:`packaging.utils.canonicalize_name`, PEP 503).
"""

from __future__ import annotations

from packaging.utils import canonicalize_name

from dgcompat.detection import KERNEL_WHEELS, KNOWN_SGL_DEEP_GEMM, SGL_DEEP_GEMM

__all__ = ["SGL_DEEP_GEMM", "KERNEL_DISTS", "DEEP_GEMM_DISTS", "SGL_DEEP_GEMM_RELEASES", "BUNDLED_RELEASES",
           "TVM_FFI", "canonical"]

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


def canonical(name: str) -> str:
    """The PEP 503 form of a distribution name (``SGL_Deep.Gemm`` -> ``sgl-deep-gemm``)."""
    return str(canonicalize_name(name))
