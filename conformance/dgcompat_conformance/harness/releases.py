"""The published deep_gemm builds the CPU tier knows, and how a release is named.

A release id is the bare version for ``sgl-deep-gemm`` (``"0.1.4"``) and ``<dist>-<version>`` for
the copies bundled in a kernel wheel (``"sgl-kernel-0.3.21"``) or vendored in an engine wheel
(``"vllm-0.33.0"``: upstream DeepGEMM 2.8.1 at ``vllm/third_party/deep_gemm``). The same id names
the expected-failure file ``conformance/dgcompat_conformance/xfails/<id>.txt`` and the certificate.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from ..dists import BUNDLED_RELEASES, KERNEL_DISTS, SGL_DEEP_GEMM, SGL_DEEP_GEMM_RELEASES, canonical
from ..wheelcache import CacheError, parse_name

__all__ = [
    "ReleaseSpec",
    "SGL_DEEP_GEMM",
    "SGL_DEEP_GEMM_RELEASES",
    "BUNDLED_RELEASES",
    "VENDORED_RELEASES",
    "VENDORED_FACTS",
    "all_releases",
    "parse_release",
    "spec_from_wheel",
]

_norm = canonical

#: Engine wheels that vendor upstream DeepGEMM: (dist, version, folder of the copy in the wheel).
VENDORED_RELEASES: tuple[tuple[str, str], ...] = (("vllm", "0.33.0"),)
VENDORED_PATHS: dict[str, str] = {"vllm": "vllm/third_party/deep_gemm/"}


@dataclass(frozen=True)
class VendoredFacts:
    """What a vendored copy is, read from the engine wheel (its folder alone does not say it all)."""

    deep_gemm: str  # the copy's __version__
    torch_minimum: str  # from its stable-ABI imports (dgcompat._torch_abi)
    built_for: str  # the torch the engine wheel pins (Requires-Dist), i.e. what the copy was built against


#: Release id -> facts (vllm 0.33.0's METADATA: Requires-Dist torch==2.14.0; the copy's
#: _C_extension.abi3.so imports 85 C-shim functions, the newest from torch 2.10).
VENDORED_FACTS: dict[str, VendoredFacts] = {"vllm-0.33.0": VendoredFacts("2.8.1", ">=2.10", "2.14.0")}

_KNOWN_DISTS = (SGL_DEEP_GEMM, *KERNEL_DISTS, *VENDORED_PATHS)


@dataclass(frozen=True)
class ReleaseSpec:
    """One published build of deep_gemm: which distribution, which version, where its wheel is."""

    dist: str
    version: str
    wheel: Path | None = None  # a local wheel file; None = fetch from the index into the cache

    @property
    def bundled(self) -> bool:
        """True for a deep_gemm copy inside sgl-kernel / sglang-kernel."""
        return _norm(self.dist) in KERNEL_DISTS

    @property
    def vendored(self) -> bool:
        """True for an upstream DeepGEMM copy vendored in an engine wheel (vLLM)."""
        return _norm(self.dist) in VENDORED_PATHS

    @property
    def package_path(self) -> str:
        """Where the deep_gemm package sits inside the wheel (``deep_gemm/`` or the vendored folder)."""
        return VENDORED_PATHS.get(_norm(self.dist), "deep_gemm/")

    @property
    def id(self) -> str:
        """``"0.1.4"`` for sgl-deep-gemm, ``"sgl-kernel-0.3.21"`` for a bundled copy."""
        return self.version if _norm(self.dist) == SGL_DEEP_GEMM else f"{_norm(self.dist)}-{self.version}"

    @property
    def requirement(self) -> str:
        """What ``pip download`` is asked for."""
        return f"{_norm(self.dist)}=={self.version}"

    def __str__(self) -> str:
        return f"{_norm(self.dist)} {self.version}" + (" (bundled)" if self.bundled else
                                                       " (vendored deep_gemm)" if self.vendored else "")


def all_releases(*, bundled: bool = False) -> list[ReleaseSpec]:
    """Every sgl-deep-gemm release, then (with ``bundled``) the kernel-wheel copies."""
    out = [ReleaseSpec(SGL_DEEP_GEMM, v) for v in SGL_DEEP_GEMM_RELEASES]
    if bundled:
        out += [ReleaseSpec(d, v) for d, v in BUNDLED_RELEASES]
    return out


def _checked_version(text: str, where: str) -> str:
    try:
        Version(text)
    except InvalidVersion as exc:
        raise ValueError(f"{where}: {text!r} is not a release version") from exc
    return text


def parse_release(text: str) -> ReleaseSpec:
    """Read ``0.1.4``, ``sgl-deep-gemm==0.1.4``, ``sgl-kernel-0.3.21`` or ``sglang-kernel==0.4.2``."""
    text = text.strip()
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9_.-]*?)\s*(?:==|-|\s)\s*(\d[0-9A-Za-z.+!]*)", text)
    if m and not text[0].isdigit():
        dist, version = _norm(m.group(1)), m.group(2)
        if dist not in _KNOWN_DISTS:
            raise ValueError(f"unknown distribution {m.group(1)!r}: expected sgl-deep-gemm, sgl-kernel, sglang-kernel "
                             f"or vllm")
        return ReleaseSpec(dist, _checked_version(version, text))
    if re.fullmatch(r"\d[0-9A-Za-z.+!]*", text):
        return ReleaseSpec(SGL_DEEP_GEMM, _checked_version(text, text))
    raise ValueError(f"cannot read a release from {text!r}: give a version such as 0.1.4 or dist==version")


def spec_from_wheel(path: str | Path) -> ReleaseSpec:
    """The release a wheel file holds, from its file name (:func:`packaging.utils.parse_wheel_filename`)."""
    p = Path(path)
    try:
        dist, version = parse_name(p.name)
    except CacheError as exc:
        raise ValueError(str(exc)) from exc
    if dist not in _KNOWN_DISTS:
        raise ValueError(f"{p.name} is a {dist} wheel: only sgl-deep-gemm, sgl-kernel, sglang-kernel and vllm hold "
                         f"deep_gemm")
    return ReleaseSpec(dist, str(version), p.resolve())
