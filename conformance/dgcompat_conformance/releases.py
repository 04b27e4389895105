"""The published deep_gemm builds the CPU tier knows, and how a release is named.

A release id is the bare version for ``sgl-deep-gemm`` (``"0.1.4"``) and ``<dist>-<version>`` for
the copies bundled in a kernel wheel (``"sgl-kernel-0.3.21"``) or vendored in an engine wheel
(``"vllm-0.33.0"``: upstream DeepGEMM 2.8.1 at ``vllm/third_party/deep_gemm``). The same id names
the expected-failure file ``conformance/dgcompat_conformance/xfails/<id>.txt`` and the certificate.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from packaging.version import InvalidVersion, Version

from dgcompat._tooling import expected_torch
from dgcompat.detection import UPSTREAM_NAMES

from .dists import BUNDLED_RELEASES, DISTRIBUTIONS, KERNEL_DISTS, SGL_DEEP_GEMM, SGL_DEEP_GEMM_RELEASES, canonical
from .wheelcache import CacheError, parse_name

__all__ = [
    "ReleaseSpec",
    "SGL_DEEP_GEMM",
    "SGL_DEEP_GEMM_RELEASES",
    "BUNDLED_RELEASES",
    "VENDORED_RELEASES",
    "VENDORED_FACTS",
    "all_releases",
    "KNOWN_DISTS",
    "parse_release",
    "release_problem",
    "spec_from_wheel",
]

_norm = canonical

#: Engine wheels that vendor upstream DeepGEMM and whose copy the wing certifies: (dist, version), from the
#: discovery table (:data:`dgcompat_conformance.dists.DISTRIBUTIONS`).
VENDORED_RELEASES: tuple[tuple[str, str], ...] = tuple(
    (d.name, v) for d in DISTRIBUTIONS if d.holds == "vendored" for v in d.certified)
#: Engine -> the folder of its copy in its wheels (the discovery table's).
VENDORED_PATHS: dict[str, str] = {d.name: d.path for d in DISTRIBUTIONS if d.holds == "vendored"}


@dataclass(frozen=True)
class VendoredFacts:
    """What a vendored copy is, read from the engine wheel (its folder alone does not say it all)."""

    deep_gemm: str  # the copy's __version__
    torch_minimum: str  # from its stable-ABI imports (dgcompat.detection._torch_abi)
    built_for: str  # the torch the engine wheel pins (Requires-Dist), i.e. what the copy was built against


#: Release id -> facts (vllm 0.33.0's and 0.34.0's METADATA: Requires-Dist torch==2.14.0; each copy's
#: _C_extension.abi3.so imports 85 C-shim functions, the newest from torch 2.10; both say __version__ = '2.8.1').
VENDORED_FACTS: dict[str, VendoredFacts] = {"vllm-0.33.0": VendoredFacts("2.8.1", ">=2.10", "2.14.0"),
                                            "vllm-0.34.0": VendoredFacts("2.8.1", ">=2.10", "2.14.0")}

#: The distributions whose wheels the CPU tier certifies (``parse_release``'s default).
KNOWN_DISTS: tuple[str, ...] = (SGL_DEEP_GEMM, *KERNEL_DISTS, *VENDORED_PATHS)


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
        raise ValueError(f"{where}: expected a release version such as 0.1.4, got {text!r}") from exc
    return text


def parse_release(text: str, *, dists: Collection[str] = KNOWN_DISTS) -> ReleaseSpec:
    """Read ``0.1.4``, ``sgl-deep-gemm==0.1.4``, ``sgl-kernel-0.3.21`` or ``sglang-kernel==0.4.2``.

    The distribution must be one of ``dists``; a ValueError says what was expected and what came.
    """
    text = text.strip()
    m = re.fullmatch(r"([A-Za-z][A-Za-z0-9_.-]*?)\s*(?:==|-|\s)\s*(\d[0-9A-Za-z.+!]*)", text)
    if m and not text[0].isdigit():
        dist, version = _norm(m.group(1)), m.group(2)
        if dist not in dists:
            raise ValueError(f"expected a distribution among {_one_of(dists)}, got {m.group(1)!r} (unknown)")
        return ReleaseSpec(dist, _checked_version(version, text))
    if re.fullmatch(r"\d[0-9A-Za-z.+!]*", text):
        return ReleaseSpec(SGL_DEEP_GEMM, _checked_version(text, text))
    raise ValueError(f"expected a release such as 0.1.4 or dist==version, got {text!r}")


def _one_of(names: Collection[str]) -> str:
    names = list(names)
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " or " + names[-1]


def release_problem(dist: str, version: str) -> str | None:
    """Why ``dist==version`` is not a release the wing knows (None when it is one).

    sgl-deep-gemm: a published release (:data:`SGL_DEEP_GEMM_RELEASES` lists every one), or one
    newer than all of them (a release dgcompat does not know yet, which ``dgcompat conform
    --latest`` is there to judge); a version between published ones is a typo. Upstream DeepGEMM:
    any version (dgcompat reads the nearest older behaviour for one it has no rows for). A kernel
    wheel: one whose bundled copy dgcompat knows (it has a torch pairing,
    :data:`dgcompat.detection.EXPECTED_TORCH`). An engine wheel: one whose vendored copy is
    described in :data:`VENDORED_FACTS`.
    """
    dist = _norm(dist)
    try:
        v = Version(version)
    except InvalidVersion:
        return f"expected a release version such as 0.1.4, got {version!r} (not a version)"
    if dist in UPSTREAM_NAMES:
        return None
    if dist == SGL_DEEP_GEMM:
        newest = Version(SGL_DEEP_GEMM_RELEASES[-1])
        if v > newest or any(v == Version(k) for k in SGL_DEEP_GEMM_RELEASES):
            return None
        return (f"expected a published {dist} release ({SGL_DEEP_GEMM_RELEASES[0]} ... {newest}, `dgcompat conform "
                f"--list`) or one newer than {newest}, got {version!r} (no such release)")
    if dist in KERNEL_DISTS:
        if expected_torch(dist, v) is not None:
            return None
        bundles = ", ".join(ver for d, ver in BUNDLED_RELEASES if d == dist)
        return f"expected a {dist} release whose bundled deep_gemm dgcompat knows (such as {bundles}), got {version!r}"
    if dist in VENDORED_PATHS:
        if f"{dist}-{v}" in VENDORED_FACTS:
            return None
        known_ids = ", ".join(k.split("-", 1)[1] for k in VENDORED_FACTS if k.startswith(f"{dist}-"))
        return (f"expected a {dist} release whose vendored deep_gemm dgcompat knows ({known_ids or 'none yet'}), got "
                f"{version!r}")
    return f"expected a distribution among {_one_of((*KNOWN_DISTS, *UPSTREAM_NAMES))}, got {dist!r} (unknown)"


def spec_from_wheel(path: str | Path) -> ReleaseSpec:
    """The release a wheel file holds, from its file name (:func:`packaging.utils.parse_wheel_filename`)."""
    p = Path(path)
    try:
        dist, version = parse_name(p.name)
    except CacheError as exc:
        raise ValueError(str(exc)) from exc
    if dist not in KNOWN_DISTS:
        raise ValueError(f"{p.name} is a {dist} wheel: only {_one_of(KNOWN_DISTS)} wheels hold a deep_gemm the CPU "
                         f"tier certifies")
    return ReleaseSpec(dist, str(version), p.resolve())
