"""Which deep_gemm is installed, read from distribution metadata without importing it.

``deep_gemm.__version__`` is not a release id (it is missing in some builds, lags ``.postN`` and
the bundled copies carry none), and importing deep_gemm has side effects (a CUDA-toolkit lookup
that asserts, native init, ``atexit`` hooks). So :func:`release` never imports deep_gemm, torch or
anything CUDA: it locates the ``deep_gemm`` package with :func:`importlib.util.find_spec` (which
does not execute it), asks :mod:`importlib.metadata` which distribution's ``RECORD`` lists those
files, and reads the installed files to tell the binding era.

The answer is computed once per process and cached; tests call :func:`reset` (or
``release.cache_clear()``) after changing ``sys.path``.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import importlib.metadata as md
import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version

__all__ = ["Release", "KernelWheel", "release", "reset", "KNOWN_SGL_DEEP_GEMM", "EXPECTED_TORCH"]

# Distributions that can own the importable ``deep_gemm`` package, in the order they are tried.
SGL_DEEP_GEMM = "sgl-deep-gemm"
KERNEL_WHEELS = ("sglang-kernel", "sgl-kernel")
UPSTREAM_NAMES = ("deep-gemm", "deep_gemm", "deepgemm")
_CANDIDATES = (SGL_DEEP_GEMM, *KERNEL_WHEELS, *UPSTREAM_NAMES)

#: Every published sgl-deep-gemm release; a newer one is "unknown" and handled by probes.
KNOWN_SGL_DEEP_GEMM: tuple[str, ...] = (
    "0.0.1", "0.1.0", "0.1.1", "0.1.2", "0.1.3", "0.1.4", "0.1.4.post1", "0.1.5", "0.1.5.post1",
    "0.1.5.post2", "0.1.5.post3", "0.1.6", "0.1.7", "0.2.0", "0.2.1", "0.2.1.post1", "0.2.2",
    "0.2.3", "0.2.3.post1", "0.2.3.post2", "0.2.5",
)

#: (distribution, releases, torch the native library was built against, evidence).
#: No wheel declares its torch; the pairing comes from the torch-header fingerprint of each
#: native library (see docs/compatibility.md) and, for the kernel wheels, their README pins.
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


@dataclass(frozen=True)
class KernelWheel:
    """The sglang/sgl kernel wheel installed next to deep_gemm."""

    name: str
    version: Version
    bundles_deep_gemm: bool
    meets_floor: bool | None  # None when the floor does not apply (deep_gemm not from sgl-deep-gemm)

    def __str__(self) -> str:
        return f"{self.name} {self.version}"


@dataclass(frozen=True)
class Release:
    """What :func:`release` found. Printable; every field is plain data.

    ``source`` is one of ``"sgl-deep-gemm"``, ``"bundled"`` (inside sgl-kernel / sglang-kernel),
    ``"upstream"`` (a deep-gemm source build), ``"unowned"`` (files with no owning metadata) or
    ``"none"``. ``binding`` is ``"tvm-ffi"``, ``"torch-library"``, ``"bundled-torch-ops"``,
    ``"pybind"``, ``"unknown"`` or ``"none"``.
    """

    dist: str | None
    version: Version | None
    source: str
    binding: str
    location: str | None
    expected_torch: SpecifierSet | None
    torch: Version | None
    torch_ok: bool | None
    kernel_wheel: KernelWheel | None
    known: bool
    problems: tuple[str, ...] = field(default=())

    @property
    def label(self) -> str:
        """``"sgl-deep-gemm 0.1.4"``, ``"sglang-kernel 0.4.2 (bundled)"`` or ``"none"``."""
        if self.dist is None:
            return "none" if self.source == "none" else f"deep_gemm ({self.source})"
        suffix = " (bundled)" if self.source == "bundled" else ""
        return f"{self.dist} {self.version}{suffix}"

    @property
    def installed(self) -> bool:
        return self.source != "none"

    def __str__(self) -> str:
        lines = [
            f"deep_gemm:      {self.label}",
            f"  binding:      {self.binding}",
            f"  location:     {self.location or '-'}",
            f"  torch:        {self.torch or 'not installed'}"
            + (f" (native library expects torch{self.expected_torch})" if self.expected_torch else ""),
            f"  kernel wheel: {self.kernel_wheel or '-'}",
        ]
        lines += [f"  problem:      {p}" for p in self.problems]
        return "\n".join(lines)


def _norm(name: str) -> str:
    return name.lower().replace("_", "-")


def _dist(name: str) -> md.Distribution | None:
    try:
        return md.distribution(name)
    except md.PackageNotFoundError:
        return None


def _version(text: str | None) -> Version | None:
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def _record_entries(dist: md.Distribution) -> dict[str, str]:
    """``{relative path: "sha256=..."}`` for the deep_gemm files the distribution's RECORD lists."""
    text = dist.read_text("RECORD") or ""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[0].startswith("deep_gemm/"):
            out[parts[0]] = parts[1]
    return out


def _hash_matches(root: Path, rel: str, recorded: str) -> bool | None:
    if not recorded.startswith("sha256="):
        return None
    try:
        data = (root / rel).read_bytes()
    except OSError:
        return False
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return digest == recorded[len("sha256="):]


# Files whose hash tells who wrote deep_gemm/ last: the Python layer plus the native library.
_FINGERPRINT_FILES = ("deep_gemm/__init__.py", "deep_gemm/_C.so", "deep_gemm/utils/layout.py")


def _owner_score(root: Path, entries: dict[str, str]) -> tuple[int, int]:
    """(files whose recorded hash matches the disk, files compared)."""
    hits = compared = 0
    for rel in _FINGERPRINT_FILES:
        recorded = entries.get(rel)
        if recorded is None:
            continue
        ok = _hash_matches(root, rel, recorded)
        if ok is None:
            continue
        compared += 1
        hits += int(ok)
    return hits, compared


def _binding(pkg_dir: Path) -> str:
    init = pkg_dir / "__init__.py"
    try:
        text = init.read_text(errors="replace")
    except OSError:
        return "unknown"
    # Cheap textual probes of the installed Python layer; the binding decides how native
    # functions are reached and whether returned tensors crossed DLPack.
    if "import tvm_ffi" in text:
        return "tvm-ffi"
    if "deep_gemm_cpp" in text or any(pkg_dir.glob("deep_gemm_cpp*.so")):
        return "bundled-torch-ops"
    if "torch.ops.load_library" in text or "TORCH_LIBRARY" in text:
        return "torch-library"
    if any(pkg_dir.glob("_C*.so")) or any(pkg_dir.parent.glob("deep_gemm_cpp*.so")):
        return "pybind"
    return "unknown"


def _expected_torch(dist: str, version: Version) -> SpecifierSet | None:
    for name, releases, torch_spec, _why in EXPECTED_TORCH:
        if name == dist and version in SpecifierSet(releases, prereleases=True):
            return SpecifierSet(torch_spec)
    return None


def _installed_torch() -> Version | None:
    try:
        return _version(md.version("torch"))
    except md.PackageNotFoundError:
        return None


def _kernel_wheel(source: str) -> KernelWheel | None:
    for name in KERNEL_WHEELS:
        d = _dist(name)
        if d is None:
            continue
        v = _version(d.version)
        if v is None:
            continue
        bundles = bool(_record_entries(d))
        floor = None
        if source == "sgl-deep-gemm":
            floor = name == "sglang-kernel" and v >= KERNEL_FLOOR_WITH_SGL_DEEP_GEMM
        return KernelWheel(name, v, bundles, floor)
    return None


def _detect() -> Release:
    problems: list[str] = []
    try:
        spec = importlib.util.find_spec("deep_gemm")
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None else None
    torch_v = _installed_torch()
    if origin is None or spec is None or not spec.submodule_search_locations:
        kw = _kernel_wheel("none")
        return Release(None, None, "none", "none", None, None, torch_v, None, kw, False, ())

    pkg_dir = Path(origin).resolve().parent
    root = pkg_dir.parent

    # Every candidate distribution whose RECORD lists deep_gemm files in this very folder.
    claims: list[tuple[md.Distribution, dict[str, str]]] = []
    for name in _CANDIDATES:
        d = _dist(name)
        if d is None:
            continue
        entries = _record_entries(d)
        if not entries:
            continue
        try:
            located = Path(str(d.locate_file("deep_gemm/__init__.py"))).resolve()
        except (OSError, TypeError):
            continue
        if located == pkg_dir / "__init__.py":
            if all(_norm(d.metadata["Name"]) != _norm(c.metadata["Name"]) for c, _ in claims):
                claims.append((d, entries))

    owner: md.Distribution | None = None
    if len(claims) == 1:
        owner = claims[0][0]
        hits, compared = _owner_score(root, claims[0][1])
        if compared and hits < compared:
            problems.append(
                f"the deep_gemm files on disk do not match {owner.metadata['Name']} {owner.version}'s "
                f"RECORD ({compared - hits} of {compared} checked files differ): something overwrote them; "
                f"reinstall {owner.metadata['Name']}"
            )
    elif len(claims) > 1:
        scored = sorted(((_owner_score(root, e), d) for d, e in claims), key=lambda t: t[0][0], reverse=True)
        names = ", ".join(f"{d.metadata['Name']} {d.version}" for _, d in scored)
        (best_hits, best_cmp), best = scored[0]
        if best_hits > 0 and best_hits == best_cmp:
            owner = best
            problems.append(
                f"{len(claims)} distributions claim deep_gemm/ ({names}); the files on disk are "
                f"{best.metadata['Name']} {best.version}'s (RECORD hashes match). Installing one over the other "
                f"overwrites files: uninstall the one you do not use"
            )
        else:
            owner = best
            problems.append(
                f"{len(claims)} distributions claim deep_gemm/ ({names}) and the files on disk match none of them "
                f"completely: the install is mixed; uninstall all and reinstall one"
            )

    if owner is None:
        kw = _kernel_wheel("unowned")
        problems.append(f"deep_gemm at {pkg_dir} belongs to no installed distribution (a source tree or copied files)")
        return Release(None, None, "unowned", _binding(pkg_dir), str(pkg_dir), None, torch_v, None, kw, False,
                       tuple(problems))

    dist_name = _norm(owner.metadata["Name"])
    version = _version(owner.version)
    if dist_name == SGL_DEEP_GEMM:
        source = "sgl-deep-gemm"
    elif dist_name in KERNEL_WHEELS:
        source = "bundled"
    else:
        source = "upstream"
        dist_name = "deep-gemm"

    known = False
    expected = None
    if version is not None:
        expected = _expected_torch(dist_name, version)
        if source == "sgl-deep-gemm":
            known = str(version) in KNOWN_SGL_DEEP_GEMM
            if not known:
                newest = Version(KNOWN_SGL_DEEP_GEMM[-1])
                problems.append(
                    f"sgl-deep-gemm {version} is {'newer than' if version > newest else 'not one of'} the releases "
                    f"dgcompat knows (up to {newest}): dgcompat probes the installed functions and uses the newest "
                    f"known behaviour; run `dgcompat conform` before deploying it"
                )
        elif source == "bundled":
            known = expected is not None
            if not known:
                problems.append(f"{dist_name} {version} bundles deep_gemm but is not a bundle dgcompat knows")
        else:
            problems.append(
                f"deep_gemm comes from {owner.metadata['Name']} {version} (an upstream build): dgcompat treats it "
                f"like the newest sgl-deep-gemm and probes what it has"
            )

    torch_ok: bool | None = None
    if expected is not None:
        if torch_v is None:
            problems.append(f"torch is not installed; {dist_name} {version}'s native library needs torch{expected}")
            torch_ok = False
        else:
            torch_ok = Version(torch_v.base_version) in expected
            if not torch_ok:
                problems.append(
                    f"{dist_name} {version}'s native library was built for torch{expected} but torch {torch_v} is "
                    f"installed: it will fail to load or mis-read tensors; install torch{expected} or a "
                    f"{dist_name} built for torch {torch_v.major}.{torch_v.minor}"
                )

    kw = _kernel_wheel(source)
    if kw is not None and kw.meets_floor is False:
        problems.append(
            f"{kw} is installed next to sgl-deep-gemm; engines need sglang-kernel>={KERNEL_FLOOR_WITH_SGL_DEEP_GEMM}"
            + (" (this one bundles its own deep_gemm and overwrites sgl-deep-gemm's files)" if kw.bundles_deep_gemm else "")
        )

    return Release(dist_name, version, source, _binding(pkg_dir), str(pkg_dir), expected, torch_v, torch_ok, kw,
                   known, tuple(problems))


@functools.lru_cache(maxsize=1)
def release() -> Release:
    """Detect the installed deep_gemm (cached for the process; see :func:`reset`).

    Never imports deep_gemm or torch and never touches CUDA, so it is safe before ``fork`` and in
    processes whose torch is absent or broken.
    """
    return _detect()


def reset() -> None:
    """Forget the cached detection (for tests that lay out fake distributions on ``sys.path``)."""
    release.cache_clear()
