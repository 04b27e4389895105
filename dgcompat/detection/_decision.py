"""The decision: which deep_gemm copy is the one, who owns it, which release it is, what it needs; and the
answer, :class:`Release`, computed once per process by :func:`release`.

Finding the copies asks the meta-path finders for top-level names only (nothing of a package runs);
identifying one reads its metadata (:mod:`._distinfo`), its native library (:mod:`._native`) and its
Python source's signatures (:mod:`dgcompat._pysurface`), and weighs them against the registries
(:mod:`._known`). See :mod:`dgcompat.detection` for the rules.
"""

from __future__ import annotations

import functools
import importlib.machinery
import importlib.metadata as md
import re
import sys
import zipimport
from dataclasses import dataclass
from dataclasses import field
from dataclasses import replace
from pathlib import Path

from packaging.specifiers import SpecifierSet
from packaging.version import Version

from .. import _pysurface
from .. import env
from ._distinfo import DistInfo
from ._distinfo import editable_project
from ._distinfo import infos_in
from ._distinfo import read_text
from ._distinfo import version_or_none
from ._known import KERNEL_FLOOR_WITH_SGL_DEEP_GEMM
from ._known import KERNEL_WHEELS
from ._known import KNOWN_SGL_DEEP_GEMM
from ._known import KNOWN_SURFACES
from ._known import KNOWN_UPSTREAM
from ._known import SGL_DEEP_GEMM
from ._known import SIGNATURE_NAMES
from ._known import UPSTREAM
from ._known import UPSTREAM_NAMES
from ._known import VENDORED
from ._known import expected_torch
from ._native import TorchNeed
from ._native import installed_torch
from ._native import native
from ._native import torch_check
from ._native import torch_need

__all__ = ["Release", "KernelWheel", "release", "reset", "backend_choice", "backend_name"]


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
    ``"upstream"`` (an upstream DeepGEMM build), ``"vendored"`` (inside an engine: vLLM,
    TensorRT-LLM), ``"unowned"`` (files with no owning metadata), ``"unrelated"`` (a distribution
    named ``deep-gemm`` that is not DeepGEMM 2.x) or ``"none"``. ``binding`` is ``"tvm-ffi"``,
    ``"torch-library"``, ``"stable-abi"``, ``"bundled-torch-ops"``, ``"pybind"``, ``"unknown"`` or
    ``"none"``. ``dist``/``version`` name the deep_gemm lineage and release the capability table
    is matched against (``"deep-gemm"`` for upstream DeepGEMM wherever it is installed);
    ``owner`` names the distribution whose files they are.
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
    module: str = "deep_gemm"
    """The import name of the copy (``"vllm.third_party.deep_gemm"`` for vLLM's)."""
    owner: str | None = None
    """``"vllm 0.33.0"``, ``"sgl-deep-gemm 0.1.4"``; ``None`` when no distribution owns the files."""
    version_source: str = "none"
    """Where :attr:`version` came from: ``"metadata"``, ``"<path> __version__"`` or ``"none"``."""
    torch_rule: str = "unknown"
    """``"exact"`` (imports torch C++ symbols), ``"minimum"`` (stable ABI) or ``"unknown"``."""
    torch_evidence: str = ""
    refusal: str | None = None
    """Why this install must not be used (unidentified or unrelated); ``None`` when usable."""
    signatures: tuple[tuple[str, tuple[str, ...]], ...] = ()
    """``(name, parameter names)`` of the functions in :data:`SIGNATURE_NAMES` the package defines in Python,
    read from its source (:mod:`dgcompat._pysurface`); the capability table's signature rows read them."""
    installed_as: str = ""
    """How the copy is installed: ``"wheel"`` (files listed in a dist-info RECORD), ``"editable (...)"`` (PEP 660
    finder or ``.pth`` path of a ``pip install -e``), ``"vendored in <engine>"``, ``"folder on sys.path"`` (no
    metadata), ``"zip archive"``; ``""`` when nothing is installed."""

    @property
    def surface(self) -> str:
        """A 12-digit id of :attr:`signatures` (two builds of one version with different ids differ in what
        callers see); ``""`` when no signature was read."""
        return _pysurface.digest(self.signatures) if self.signatures else ""

    @property
    def label(self) -> str:
        """``"sgl-deep-gemm 0.1.4"``, ``"sglang-kernel 0.4.2 (bundled)"``,
        ``"deep-gemm 2.8.1 (vendored in vllm 0.33.0)"`` or ``"none"``."""
        if self.dist is None or self.version is None:
            return "none" if self.source == "none" else f"{self.dist or 'deep_gemm'} ({self.source})"
        suffix = {"bundled": " (bundled)", "unowned": " (unowned)", "unrelated": " (unrelated)",
                  "vendored": f" (vendored in {self.owner})"}.get(self.source, "")
        told = self.surface_note
        return f"{self.dist} {self.version}{suffix}" + (f" [{told}]" if told else "")

    @property
    def surface_recorded(self) -> bool | None:
        """Whether :attr:`surface` is one :data:`KNOWN_SURFACES` records for this version; None where nothing is
        recorded for the version or no signature was read."""
        known = KNOWN_SURFACES.get((self.dist or "", str(self.version)))
        if not known or not self.signatures:
            return None
        return self.surface in known

    @property
    def surface_note(self) -> str:
        """What tells this build apart (:data:`KNOWN_SURFACES`): the recorded description where the version has
        several recorded builds, ``"same version, different surface <id>"`` where its surface is not recorded,
        ``""`` otherwise."""
        known = KNOWN_SURFACES.get((self.dist or "", str(self.version)))
        recorded = self.surface_recorded
        if recorded is None or known is None:
            return ""
        if not recorded:
            return f"same version, different surface {self.surface}"
        return known[self.surface] if len(known) > 1 else ""

    @property
    def installed(self) -> bool:
        return self.source != "none"

    def __str__(self) -> str:
        rule = {"minimum": ": the stable-ABI minimum", "exact": " exactly"}.get(self.torch_rule, "")
        lines = [
            f"deep_gemm:      {self.label}",
            f"  module:       {self.module}",
            f"  owner:        {self.owner or '-'}",
            f"  version from: {self.version_source}",
            f"  installed as: {self.installed_as or '-'}",
            f"  binding:      {self.binding}",
            f"  surface:      {self.surface or '-'}" + (f" ({self.surface_note})" if self.surface_note else ""),
            f"  location:     {self.location or '-'}",
            f"  torch:        {self.torch or 'not installed'}"
            + (f" (native library needs torch{self.expected_torch}{rule})" if self.expected_torch else ""),
            f"  kernel wheel: {self.kernel_wheel or '-'}",
        ]
        if self.refusal:
            lines.append(f"  refused:      {self.refusal}")
        lines += [f"  problem:      {p}" for p in self.problems]
        return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# Finding the copies (never executing a package)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Copy:
    module: str
    pkg_dir: Path
    site: Path
    pkg_rel: str  # the folder relative to site, as RECORD lists it
    host: tuple[str, str] | None  # (BACKEND value, owning distribution) for a vendored copy
    finder: str = "path"  # "path" (sys.path), "zip" (zipimport) or the module of the meta-path finder that found it


def _finder_module(finder: object) -> str:
    """The module that defines a meta-path finder (a finder may be a class, as setuptools' editable finder is)."""
    owner = finder if isinstance(finder, type) else type(finder)
    return str(getattr(owner, "__module__", "") or owner.__name__)


def _own_finder(finder: object) -> bool:
    """dgcompat's own meta-path finders (the install's facade): never what detection describes."""
    module = _finder_module(finder)
    return module == "dgcompat" or module.startswith("dgcompat.")


def _top_level_spec(name: str) -> tuple[importlib.machinery.ModuleSpec, str] | None:
    """The spec ``import name`` would use and which finder gives it, asking the meta-path finders in order as
    the import system does (so a PEP 660 editable finder is found), but never dgcompat's own (the install's
    facade) and never ``sys.modules`` (a hand-planted alias). Finders only map names to files: nothing of the
    package runs."""
    for finder in list(sys.meta_path):
        if _own_finder(finder):
            continue
        find = getattr(finder, "find_spec", None)
        if find is None:
            continue
        try:
            spec = find(name, None)
        except (ImportError, ValueError, AttributeError, TypeError, OSError):
            continue  # a broken third-party finder does not hide the others
        if spec is None or not spec.submodule_search_locations:
            continue
        if isinstance(spec.loader, zipimport.zipimporter):
            return spec, "zip"
        if spec.origin is None:
            continue  # a namespace package: no deep_gemm/__init__.py
        if finder is importlib.machinery.PathFinder:
            return spec, "path"
        return spec, _finder_module(finder)
    return None


def _top_level_dir(name: str) -> tuple[Path, str] | None:
    found = _top_level_spec(name)
    if found is None:
        return None
    spec, finder = found
    assert spec.origin is not None
    if finder == "zip":
        return Path(spec.origin).parent, finder  # inside the archive: not a folder on disk
    return Path(spec.origin).resolve().parent, finder


def _copies(choice: str) -> list[_Copy]:
    out: list[_Copy] = []
    if choice in ("auto", "deep_gemm"):
        found = _top_level_dir("deep_gemm")
        if found is not None:
            pkg, finder = found
            out.append(_Copy("deep_gemm", pkg, pkg.parent, "deep_gemm", None, finder))
    for value, dist, top, sub, module in VENDORED:
        if choice not in ("auto", value):
            continue
        host_found = _top_level_dir(top)
        if host_found is None or host_found[1] == "zip":
            continue
        host = host_found[0]
        if (host / sub / "__init__.py").is_file():
            out.append(_Copy(module, host / sub, host.parent, f"{top}/{sub}", (value, dist), host_found[1]))
    return out


def backend_choice() -> str:
    """``DGCOMPAT_BACKEND`` normalized (``auto`` when unset; unknown values are returned as given)."""
    return env.backend_or_raw()


# ---------------------------------------------------------------------------------------------
# Identifying one copy
# ---------------------------------------------------------------------------------------------


_VERSION_ATTR_RE = re.compile(r"^__version__\s*(?::\s*str\s*)?=\s*(?:version\s*=\s*)?['\"]([^'\"]+)['\"]", re.MULTILINE)


def _version_attribute(path: Path) -> str | None:
    """The literal ``__version__ = '...'`` of a Python file (read as text, never executed)."""
    text = read_text(path)
    m = _VERSION_ATTR_RE.search(text or "")
    return m.group(1) if m else None


def _fingerprint_files(pkg_rel: str, pkg_dir: Path) -> list[str]:
    """The files whose hash tells who wrote the folder last: the Python layer and the native library."""
    names = ["__init__.py", "_C.py", "utils/layout.py"]
    names += sorted(p.name for p in pkg_dir.glob("*.so"))
    return [f"{pkg_rel}/{n}" for n in names if (pkg_dir / n).is_file()]


def _kernel_wheel(source: str) -> KernelWheel | None:
    """The sgl/sglang kernel wheel installed next to deep_gemm (``source``: the copy's), from its metadata."""
    for name in KERNEL_WHEELS:
        try:
            d = md.distribution(name)
            v = version_or_none(d.metadata["Version"])
            files = d.files or []
        except (md.PackageNotFoundError, OSError, UnicodeDecodeError, ValueError):
            continue
        if v is None:
            continue
        bundles = any(str(f).startswith("deep_gemm/") for f in files)
        floor = None
        if source == "sgl-deep-gemm":
            floor = name == "sglang-kernel" and v >= KERNEL_FLOOR_WITH_SGL_DEEP_GEMM
        return KernelWheel(name, v, bundles, floor)
    return None


@dataclass
class _Found:
    """The facts gathered about one copy, turned into a :class:`Release` at the end."""

    copy: _Copy
    init_text: str
    dist: str | None = None
    version: Version | None = None
    source: str = "unowned"
    owner: str | None = None
    version_source: str = "none"
    known: bool = False
    refusal: str | None = None
    problems: list[str] = field(default_factory=list)


def _claims(copy: _Copy) -> tuple[list[DistInfo], list[str]]:
    """The dist-info folders of the copy's site that list its ``__init__.py``, and their problems."""
    claims: list[DistInfo] = []
    problems: list[str] = []
    target = f"{copy.pkg_rel}/__init__.py"
    for info in infos_in(copy.site):
        if info.files is not None and target in info.files:
            claims.append(info)
            problems += info.problems
        elif info.files is None and info.name in (SGL_DEEP_GEMM, *KERNEL_WHEELS, *UPSTREAM_NAMES):
            problems += info.problems
            claims.append(info)  # metadata without RECORD: a claim that cannot be verified
    return claims, problems


def _choose_owner(found: _Found, claims: list[DistInfo]) -> DistInfo | None:
    copy = found.copy
    if not claims:
        return None
    checked = _fingerprint_files(copy.pkg_rel, copy.pkg_dir)
    if len(claims) == 1:
        info = claims[0]
        if info.files is None:
            found.problems.append(f"{info} has no RECORD: the files at {copy.pkg_dir} cannot be verified as its own")
            return info
        hits, compared = info.matching_hashes(copy.site, checked)
        if compared and hits < compared:
            found.problems.append(
                f"the deep_gemm files on disk do not match {info}'s RECORD ({compared - hits} of {compared} checked "
                f"files differ): something overwrote them; reinstall {info.name}")
        return info
    scored = sorted(((i.matching_hashes(copy.site, checked), i) for i in claims), key=lambda t: t[0][0], reverse=True)
    names = ", ".join(str(i) for _, i in scored)
    (best_hits, _best_cmp), best = scored[0]
    complete = [i for (h, c), i in scored if c and h == c]
    same_name = len({i.name for i in claims}) == 1
    what = f"{len(claims)} {'dist-info folders of ' + str(best.name) if same_name else 'distributions'}"
    if len(complete) == 1 and best_hits > 0:
        found.problems.append(
            f"{what} claim {copy.pkg_rel}/ ({names}); the files on disk are {best}'s (RECORD hashes match). "
            f"{'A stale dist-info is left behind' if same_name else 'Installing one over the other overwrites files'}: "
            f"uninstall the one you do not use")
        return best
    found.problems.append(
        f"{what} claim {copy.pkg_rel}/ ({names}) and the files on disk match "
        f"{'several' if complete else 'none'} of them completely: the owner cannot be established; uninstall all "
        f"and reinstall one")
    found.refusal = f"{copy.pkg_dir} is claimed by {names}, and the files do not tell which one they are"
    return None


_V1_API_RE = re.compile(r"\bgemm_fp8_fp8_bf16_nt\b")
_AMD_RE = re.compile(r"\b(rocm|hip|hipify|amdgpu|amd)\b", re.IGNORECASE)


def _lineage_refusal(found: _Found, name: str, needed: tuple[str, ...]) -> str | None:
    """Why a ``deep-gemm``-named distribution is not DeepGEMM 2.x, or None."""
    text = found.init_text
    if any(n.startswith(("libamdhip64", "libhiprtc", "librocm")) for n in needed) or _AMD_RE.search(text):
        return f"{name} {found.version} at {found.copy.pkg_dir} is an AMD (ROCm) package that reuses the deep_gemm name"
    if _V1_API_RE.search(text) and "fp8_gemm_nt" not in text:
        return (f"{name} {found.version} at {found.copy.pkg_dir} has the v1 API (gemm_fp8_fp8_bf16_nt) and is not "
                f"DeepGEMM 2.x")
    if found.version is not None and found.version.major < 2:
        return f"{name} {found.version} at {found.copy.pkg_dir} is not DeepGEMM 2.x (DeepGEMM 2.x versions start at 2)"
    return None


def _from_owner(found: _Found, info: DistInfo, needed: tuple[str, ...]) -> None:
    name = info.name or "?"
    found.owner = str(info)
    found.version = info.version
    found.version_source = "metadata" if found.version is not None else "none"
    if name == SGL_DEEP_GEMM:
        found.dist, found.source = SGL_DEEP_GEMM, "sgl-deep-gemm"
    elif name in KERNEL_WHEELS:
        found.dist, found.source = name, "bundled"
    else:
        found.dist, found.source = UPSTREAM, "upstream"
        found.version = version_or_none(info.version_text.split("+")[0]) if info.version_text else None
        refusal = _lineage_refusal(found, name, needed)
        if refusal is not None:
            found.dist, found.source, found.refusal = name, "unrelated", refusal
            found.problems.append(refusal + ": dgcompat cannot use it; uninstall it and install sgl-deep-gemm or an "
                                            "upstream DeepGEMM build")
            return
    if found.version is None:
        found.refusal = (f"{found.copy.pkg_dir} belongs to {info}, whose version {info.version_text!r} is not a "
                         f"release id: dgcompat cannot tell which release it is")
        found.problems.append(found.refusal)


def _from_version_attribute(found: _Found, needed: tuple[str, ...]) -> None:
    """A vendored copy, or files without metadata: identify upstream DeepGEMM by its ``__version__``."""
    copy = found.copy
    rel_init = f"{copy.pkg_rel}/__init__.py"
    attr = _version_attribute(copy.pkg_dir / "__init__.py")
    version = version_or_none(attr)
    if copy.host is None:
        found.problems.append(f"deep_gemm at {copy.pkg_dir} belongs to no installed distribution (a source tree or "
                              f"copied files)")
    if version is None:
        found.refusal = (f"{copy.pkg_dir} has no distribution metadata and no usable __version__ "
                         f"({attr!r}): dgcompat cannot tell which release it is")
    elif version.major < 2:
        found.refusal = (f"{copy.pkg_dir} has no distribution metadata and says __version__ = {attr!r}; that does not "
                         f"identify an sgl-deep-gemm release (it does not carry .postN): reinstall sgl-deep-gemm")
    else:
        found.dist, found.version = UPSTREAM, version
        found.version_source = f"{rel_init} __version__"
        found.source = "vendored" if copy.host is not None else "unowned"
        refusal = _lineage_refusal(found, UPSTREAM, needed)
        if refusal is not None:
            found.source, found.refusal = "unrelated", refusal
    if found.refusal:
        found.problems.append(found.refusal)


def _host_owner(copy: _Copy) -> str | None:
    """``"vllm 0.33.0"``: the engine distribution the vendored copy came with (metadata, else its version file)."""
    assert copy.host is not None
    _value, dist = copy.host
    for info in infos_in(copy.site):
        if info.name == dist:
            return str(info)
    top = copy.pkg_rel.split("/", 1)[0]
    for candidate in ("_version.py", "version.py"):
        attr = _version_attribute(copy.site / top / candidate)
        if attr:
            return f"{dist} {attr} (from {top}/{candidate})"
    return dist


def _editable_owner(copy: _Copy) -> DistInfo | None:
    """The dist-info on ``sys.path`` that records an editable install (PEP 610 ``direct_url.json`` with
    ``dir_info.editable``) of a project folder holding this copy, or None (``pip install -e`` of a DeepGEMM
    checkout: PEP 660 finder or ``.pth`` path; its RECORD lists the finder, not deep_gemm's files)."""
    seen: set[Path] = set()
    for entry in list(sys.path):
        folder = Path(entry or ".")
        try:
            key = folder.resolve()
            infos = sorted(p for p in folder.iterdir() if p.suffix == ".dist-info") if key not in seen else []
        except OSError:
            continue
        seen.add(key)
        for info in infos:
            project = editable_project(info)
            if project is not None and (copy.pkg_dir == project or project in copy.pkg_dir.parents):
                return DistInfo(info)
    return None


def _hashed_claim(copy: _Copy, claims: list[DistInfo]) -> bool:
    target = f"{copy.pkg_rel}/__init__.py"
    return any((info.files or {}).get(target) for info in claims)


def _in_archive(copy: _Copy, torch_v: Version | None) -> Release:
    why = (f"deep_gemm at {copy.pkg_dir} is inside a zip archive (an .egg or .zip on sys.path): its native library "
           f"cannot be loaded from an archive and its release cannot be read; install its wheel (pip install) instead")
    return Release(None, None, "unowned", "unknown", str(copy.pkg_dir), None, torch_v, None, _kernel_wheel("none"),
                   False, (why,), module=copy.module, refusal=why, installed_as="zip archive")


def _identify(copy: _Copy, torch_v: Version | None) -> Release:
    if copy.finder == "zip":
        return _in_archive(copy, torch_v)
    found = _Found(copy, read_text(copy.pkg_dir / "__init__.py") or "")
    lib = native(copy.pkg_dir, found.init_text)
    claims, claim_problems = _claims(copy)
    editable = _editable_owner(copy) if copy.host is None and not _hashed_claim(copy, claims) else None
    if editable is not None:
        owner: DistInfo | None = editable
        how = ("editable (" + (f"PEP 660 finder {copy.finder}" if copy.finder != "path" else "path entry") +
               f", {editable})")
    else:
        found.problems += claim_problems
        owner = _choose_owner(found, claims) if copy.host is None else None
        how = "wheel" if owner is not None and owner.files is not None else (
            f"installed ({owner} without RECORD)" if owner is not None else "folder on sys.path")
    if owner is not None:
        _from_owner(found, owner, lib.needed)
    elif found.refusal is None:
        _from_version_attribute(found, lib.needed)
        if copy.host is not None:
            found.owner = _host_owner(copy)
    if copy.host is not None:
        how = f"vendored in {found.owner or copy.host[1]}"
    _judge_known(found)
    need = torch_need(found.dist, found.version, lib) if found.refusal is None else TorchNeed(None, "unknown", "")
    torch_ok, torch_problems = torch_check(f"{found.dist} {found.version}", need, torch_v)
    kw = _kernel_wheel(found.source)
    signatures = tuple(sorted(_pysurface.source_parameters(copy.pkg_dir, SIGNATURE_NAMES).items()))
    surfaces = KNOWN_SURFACES.get((found.dist or "", str(found.version)))
    surface = _pysurface.digest(signatures)
    if surfaces and signatures and surface not in surfaces:
        found.problems.append(
            f"{found.dist} {found.version}: same version, different surface ({surface}; recorded for {found.version}: "
            f"{', '.join(f'{k} ({v})' for k, v in surfaces.items())}): the capability table's signature rows read "
            f"this build's own signatures, its version rows assume a recorded build; `dgcompat doctor` names the "
            f"difference; certify it (`dgcompat conform`) before deploying it")
    return Release(
        found.dist, found.version, found.source, lib.binding, str(copy.pkg_dir), need.spec, torch_v, torch_ok,
        kw, found.known, tuple(found.problems + list(need.problems) + torch_problems + _kernel_problems(kw)),
        module=copy.module, owner=found.owner, version_source=found.version_source, torch_rule=need.rule,
        torch_evidence=need.evidence, refusal=found.refusal, signatures=signatures, installed_as=how)


def _judge_known(found: _Found) -> None:
    if found.refusal is not None or found.version is None:
        return
    if found.source == "sgl-deep-gemm":
        found.known = str(found.version) in KNOWN_SGL_DEEP_GEMM
        if not found.known:
            newest = Version(KNOWN_SGL_DEEP_GEMM[-1])
            found.problems.append(
                f"sgl-deep-gemm {found.version} is {'newer than' if found.version > newest else 'not one of'} the "
                f"releases dgcompat knows (up to {newest}): dgcompat probes the installed functions and uses the newest "
                f"known behaviour; run `dgcompat conform` before deploying it")
    elif found.source == "bundled":
        found.known = expected_torch(found.dist or "", found.version) is not None
        if not found.known:
            found.problems.append(f"{found.dist} {found.version} bundles deep_gemm but is not a bundle dgcompat knows")
    else:
        found.known = found.version.base_version in KNOWN_UPSTREAM
        if not found.known:
            found.problems.append(
                f"upstream DeepGEMM {found.version} is not a release dgcompat has rows for ({', '.join(KNOWN_UPSTREAM)}): "
                f"dgcompat uses the nearest older upstream behaviour and probes what it has; run `dgcompat conform`")


def _kernel_problems(kw: KernelWheel | None) -> list[str]:
    if kw is None or kw.meets_floor is not False:
        return []
    return [f"{kw} is installed next to sgl-deep-gemm; engines need sglang-kernel>={KERNEL_FLOOR_WITH_SGL_DEEP_GEMM}"
            + (" (this one bundles its own deep_gemm and overwrites sgl-deep-gemm's files)" if kw.bundles_deep_gemm
               else "")]


def _detect() -> Release:
    torch_v = installed_torch()
    choice = backend_choice()
    # The reference backend still reports what is installed; unknown values are reported elsewhere.
    copies = _copies(choice if choice in env.BACKENDS and choice != "reference" else "auto")
    if not copies:
        return Release(None, None, "none", "none", None, None, torch_v, None, _kernel_wheel("none"), False, ())
    chosen = _identify(copies[0], torch_v)
    others = [f"{c.module} at {c.pkg_dir}" for c in copies[1:]]
    if others and chosen.refusal is None:
        note = f"also installed: {'; '.join(others)} (DGCOMPAT_BACKEND selects one; {copies[0].module} is used)"
        return _with_problems(chosen, note)
    return chosen


def _with_problems(rel: Release, *extra: str) -> Release:
    return replace(rel, problems=rel.problems + extra)


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


def backend_name() -> str:
    """``"deep_gemm"``, ``"reference"`` or ``"none"``: the backend the stable functions use in this process, from
    ``DGCOMPAT_BACKEND`` and what is installed (nothing installed and nothing chosen is ``"none"``).

    A vendored copy (``vllm``, ``tensorrt-llm``) is a deep_gemm backend. Imports nothing (safe before ``fork``).
    Raises :class:`~dgcompat.errors.ConfigurationError` for an unknown ``DGCOMPAT_BACKEND``.
    """
    choice = env.backend()
    if choice == "reference":
        return "reference"
    if choice != "auto":
        return "deep_gemm"
    return "deep_gemm" if release().installed else "none"
