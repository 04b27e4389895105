"""A no-op stand-in for ``deep_gemm``: the real Python signatures of one release, and nothing else.

The per-call benchmarks time dgcompat's Python layer against calling deep_gemm directly. With the
native layer present, the kernel launch (tens of microseconds of host time on a real wheel, see
docs/performance.md) would drown a sub-microsecond difference, so the native layer is replaced by
functions that take the release's exact parameters and return at once (or return a preallocated
tensor where the release returns one). What remains is the cost of the Python calls themselves.

Each stand-in's ``deep_gemm/__init__.py`` is joined (:mod:`testsupport.parts`) from the parts in this
package. :func:`write_site` lays it out the way pip would (:func:`testsupport.dists.write_dist`).
"""

from __future__ import annotations

from pathlib import Path

from ..dists import write_dist
from ..parts import joined

__all__ = ["RELEASES", "source", "owner", "write_site"]

#: release -> (binding era, the parts of the stand-in's ``deep_gemm/__init__.py``, owning distribution, its
#: version). sgl-deep-gemm 0.1.4: tvm-ffi binding (returned tensors cross DLPack; dgcompat's collapsed-strides
#: and raw-return rows are active), no alpha=, masked GEMM only under the fp8_m_grouped_* alias. 0.2.3:
#: TORCH_LIBRARY binding (genuine torch.Tensor returns), alpha= on the dense GEMMs,
#: m_grouped_fp8_gemm_nt_masked under its own name. sglang-kernel 0.4.2's bundled copy: every function is a
#: lazy-init wrapper ``f(*args, **kwargs)`` around a TORCH_LIBRARY op of the bundled schema (dgcompat reads
#: the parameters from the op's schema, as on the real bundle); the masked GEMM returns (None, None) without
#: overlap.
RELEASES: dict[str, tuple[str, tuple[str, ...], str, str]] = {
    "0.1.4": ("tvm-ffi", ("_common", "sgl_0_1_4"), "sgl-deep-gemm", "0.1.4"),
    "0.2.3": ("torch-library", ("_common", "sgl_0_2_3"), "sgl-deep-gemm", "0.2.3"),
    "sglang-kernel-0.4.2": ("torch-library", ("sglang_kernel_0_4_2",), "sglang-kernel", "0.4.2"),
}


def source(version: str) -> str:
    """The stand-in ``deep_gemm/__init__.py`` for an emulated release (a key of :data:`RELEASES`)."""
    try:
        parts = RELEASES[version][1]
    except KeyError:
        raise ValueError(f"no stand-in for {version}; known: {', '.join(RELEASES)}") from None
    return joined(__name__, *parts)


def owner(version: str) -> tuple[str, str]:
    """(distribution, version) of the emulated release ``version``."""
    return RELEASES[version][2], RELEASES[version][3]


def write_site(root: Path, version: str) -> Path:
    """Write the stand-in for ``version`` and its dist-info into the folder ``root``; return ``root``.

    Put ``root`` first on ``sys.path`` (``PYTHONPATH``) of a fresh interpreter to make it the
    installed deep_gemm.
    """
    dist, dist_version = owner(version)
    write_dist(root, dist, dist_version, {"deep_gemm/__init__.py": source(version)})
    return root
