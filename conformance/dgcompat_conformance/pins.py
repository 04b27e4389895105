"""``dgcompat pin``: requirement lines for an engine's requirements file, from the certificates.

A pin is only as good as the run behind it, so every line set says which certificates back it
(GPU tier: real kernels; CPU tier: the wheel's real Python layer over a stand-in native library).

Every set of lines leaves through :func:`dgcompat_conformance._text.requirement_lines`: a line is a
comment or exactly the requirement meant, whatever a certificate, a distribution's metadata or a
device name holds; text that would break that is refused (exit status 2), never printed.
The generated page (``--docs``) is :func:`dgcompat_conformance.report.compatibility_page`.
"""

from __future__ import annotations

import argparse
import email.parser
import importlib.metadata as md
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from packaging.requirements import InvalidRequirement, Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from dgcompat import detection
from dgcompat._tooling import expected_torch
from dgcompat.detection import EXPECTED_TORCH, KERNEL_FLOOR_WITH_SGL_DEEP_GEMM, Release

from ._args import parse, readable_folder, returns_status, usage_error
from ._text import UnsafeTextError, comment, one_line, requirement_lines
from .certificate import COMMITTED, Certificate, CertificateError, load_folder
from .dists import DISTRIBUTIONS, SGL_DEEP_GEMM, SGL_DEEP_GEMM_RELEASES, canonical, distribution
from .index import IndexError as IndexUnavailable
from .index import PackageIndex, fetch_partial
from .releases import KNOWN_DISTS, VENDORED_FACTS, parse_release, release_problem
from .report import compatibility_page
from .surface.fingerprint import recorded

__all__ = ["main", "suggest", "certificates", "pin_lines", "engine_pins", "PinRefused", "advice"]


class PinRefused(Exception):
    """No requirement can be printed for this build; ``lines`` say why and what to install instead (comments)."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__(" ".join(lines))
        self.lines = lines


def advice(release_id: str | None) -> str:
    """A ``dgcompat conform`` command that runs as printed: ``--release <id>`` where the wing can fetch and
    certify that release, else ``dgcompat conform`` (which certifies the build installed where it runs)."""

    if release_id:
        try:
            spec = parse_release(release_id)
        except ValueError:
            spec = None
        if spec is not None and canonical(spec.dist) in KNOWN_DISTS and release_problem(spec.dist, spec.version) is None:
            return f"dgcompat conform --release {release_id}"
    return "dgcompat conform"


def _refused(dist: str, version: Version) -> None:
    row = distribution(dist)
    why = row.refused.get(str(version)) if row is not None else None
    if why is not None:
        newest = SGL_DEEP_GEMM_RELEASES[-1]
        raise PinRefused([f"# no pin: {canonical(dist)} {version} is refused by dgcompat: {why}",
                          f"# install instead: `dgcompat pin --release {newest}` prints a certified sgl-deep-gemm "
                          f"pairing"])

SGL = SGL_DEEP_GEMM


def certificates(release: str | None = None, folder: Path | None = None) -> list[Certificate]:
    """The certificates in ``folder`` (default: the committed ones), optionally only ``release``'s, newest first.

    Every file is checked against the one certificate schema; an unsound one raises
    :class:`~dgcompat_conformance.certificate.CertificateError` naming it.
    """
    found = load_folder(folder if folder is not None else COMMITTED)
    return [c for c in found if release is None or c.release == release]


def _build(release: str) -> str:
    """``" (build: surface ..., fingerprint ...)"``: the recorded fingerprint of the release's build, which its
    certificates certify (``dgcompat doctor`` holds the installed build against it); ``""`` when none is recorded."""

    fp = recorded().get(release)
    if not fp:
        return ""
    return f" (build: surface {(fp.get('python') or {}).get('id') or '-'}, fingerprint {fp.get('id')})"


def _status(release: str, folder: Path | None = None) -> str:
    certs = certificates(release, folder)
    if not certs:
        return f"# not certified: run `{advice(release)}` (and the GPU tier) first"
    parts = []
    for c in certs:
        parts.append(f"{c.tier}: {c.verdict}" + (f" on {c.device_name}" if c.device_name and c.tier == "gpu" else ""))
    files = ", ".join(c.path.name if c.path else "certificate" for c in certs)
    return comment("certificates: " + "; ".join(parts) + _build(release), f"the comment from {files}")


def _torch_pin(spec: str) -> str:
    return f"torch{spec}"


def _vendored_pin(dist: str, version: Version, certificates_dir: Path | None) -> list[str] | None:
    """An engine wheel that vendors deep_gemm (vLLM): the engine is what gets pinned."""

    facts = VENDORED_FACTS.get(f"{dist}-{version}")
    if facts is None:
        return None
    return requirement_lines([f"{dist}=={version}",
            f"# deep_gemm: vendored upstream DeepGEMM {facts.deep_gemm}, stable ABI: torch{facts.torch_minimum} "
            f"(built for torch {facts.built_for}; {dist} pins its own torch)",
            _status(f"{dist}-{version}", certificates_dir)])


def pin_lines(dist: str, version: Version, certificates_dir: Path | None = None) -> list[str]:
    """Requirement lines for ``dist`` at ``version`` (the comment line names the certificates behind them).

    Raises :class:`~dgcompat_conformance._text.UnsafeTextError` when a line would not read back as meant
    (a name, a version or a certificate field holding a line break, a comment or an option), and
    :class:`~dgcompat_conformance.certificate.CertificateError` for an unsound certificate.
    """
    dist = canonical(dist)
    _refused(dist, version)
    vendored = _vendored_pin(dist, version, certificates_dir)
    if vendored is not None:
        return vendored
    expected = expected_torch(dist, version)
    lines = [f"{dist}=={version}"]
    lines.append(_torch_pin(str(expected)) if expected else "# torch: unknown for this release (no fingerprint)")
    if dist == SGL:
        lines.append(f"sglang-kernel>={KERNEL_FLOOR_WITH_SGL_DEEP_GEMM}")
    release_id = str(version) if dist == SGL else f"{dist}-{version}"
    lines.append(_status(release_id, certificates_dir))
    return requirement_lines(lines)


def suggest(rel: Release, certificates_dir: Path | None = None) -> list[str]:
    """Pin lines for the installed stack (or a note when there is nothing to pin).

    A build dgcompat refuses gets no requirement (:class:`PinRefused`); an upstream DeepGEMM build, which no index
    publishes under its name, is pinned by its torch only; a build whose surface is not the one recorded for its
    version is marked as not covered by the certificates of that version. Where the installed torch and kernel
    wheel meet what the release needs, the lines pin exactly those (the deployment as it runs).
    """
    if rel.refusal is not None and rel.source != "none":
        # Checked like every pin (the refusal quotes installed metadata): what cannot be printed safely raises.
        raise PinRefused(requirement_lines([
            f"# no pin: dgcompat refuses the installed deep_gemm: {rel.refusal}",
            f"# install instead: `dgcompat pin --release {SGL_DEEP_GEMM_RELEASES[-1]}` prints a certified "
            f"sgl-deep-gemm pairing"]))
    if rel.dist is None or rel.version is None:
        return requirement_lines([f"# no deep_gemm distribution installed; `dgcompat pin --release "
                                  f"{SGL_DEEP_GEMM_RELEASES[-1]}` prints a certified sgl-deep-gemm pairing"])
    lines: list[str] | None = None
    if rel.source == "vendored" and rel.owner:
        host, _, host_version = rel.owner.partition(" ")
        try:
            lines = pin_lines(host, Version(host_version.split(" ", 1)[0]), certificates_dir)
        except ValueError:
            lines = None
    if lines is None and rel.source in ("upstream", "unowned", "vendored"):
        lines = _upstream_lines(rel)
    if lines is None:
        lines = pin_lines(rel.dist, rel.version, certificates_dir)
        lines = [_exact(line, rel) for line in lines]
    engines = _installed_engines(rel)
    if rel.surface_recorded is False:
        lines = [line for line in lines if not line.startswith("# certificates:")]
        lines.append(f"# not certified: this build's surface {rel.surface} is none of the builds recorded for "
                     f"{rel.dist} {rel.version} (same version, different surface; `dgcompat doctor` names the "
                     f"difference): the certificates of {rel.version} do not cover it; run `dgcompat conform`")
    return requirement_lines(engines + lines)


def _exact(line: str, rel: Release) -> str:
    """The pinned torch / kernel wheel as installed, where it meets the release's own requirement."""
    if line.startswith("torch") and rel.torch is not None and rel.expected_torch is not None \
            and Version(rel.torch.base_version) in rel.expected_torch:
        return f"torch=={rel.torch.base_version}"
    kw = rel.kernel_wheel
    if line.startswith("sglang-kernel>=") and kw is not None and kw.name == "sglang-kernel" and kw.meets_floor:
        return f"sglang-kernel=={kw.version}"
    return line


def _upstream_lines(rel: Release) -> list[str]:
    """Upstream DeepGEMM (a source build, editable or copied): no index publishes it as ``deep-gemm`` (PyPI's
    ``deep-gemm`` is an unrelated 1.0.0), so it is pinned by what it needs, and described."""
    if rel.source == "vendored":  # an engine's copy whose engine release is unknown (no dist-info)
        lines = [f"# deep_gemm: upstream DeepGEMM {rel.version} {rel.installed_as or 'vendored'} ({rel.location}), "
                 f"whose release is unknown (no dist-info): pin the engine release you installed"]
    else:
        lines = [f"# deep_gemm: upstream DeepGEMM {rel.version} ({rel.installed_as or rel.source}, {rel.location}); "
                 f"no package index publishes it (`pip install deep-gemm` installs an unrelated 1.0.0): pin the source "
                 f"you built, e.g. deep_gemm @ git+https://github.com/deepseek-ai/DeepGEMM@<commit>"]
    if rel.expected_torch is not None:
        exact = rel.torch is not None and rel.torch_rule == "exact" and Version(rel.torch.base_version) in rel.expected_torch
        lines.append(f"torch=={rel.torch.base_version}" if exact and rel.torch is not None else f"torch{rel.expected_torch}")
    else:
        lines.append("# torch: unknown for this build")
    lines.append(f"# not certified as a release: run `{advice(None)}` where it is installed")
    return lines


def _installed_engines(rel: Release) -> list[str]:
    """``sglang==0.5.23`` for an installed engine whose requirements name the installed deep_gemm exactly (the
    deployment's engine), checked: an engine that requires another release is a comment saying so."""

    out: list[str] = []
    for engine in ("sglang",):
        try:
            found = md.distribution(engine)
            version, requires = found.metadata["Version"], found.requires or []
        except (md.PackageNotFoundError, OSError, ValueError):
            continue
        for text in requires:
            try:
                req = Requirement(text)
            except InvalidRequirement:
                continue
            if canonical(req.name) != rel.dist or (req.marker is not None and not req.marker.evaluate({"extra": ""})):
                continue
            if rel.version is not None and rel.version in req.specifier:
                out.append(f"{engine}=={version}")
            else:
                out.append(f"# {engine} {version} requires {req} but {rel.dist} {rel.version} is installed")
    return out


def engine_pins(engine: str, version: str, requires: Sequence[str], certificates_dir: Path | None = None) -> list[str]:
    """The pin set of an engine release from its own requirements (``Requires-Dist``): the engine, the deep_gemm
    it requires (or vendors) with the certificates behind it, the torch and kernel wheel it pins, each checked
    against what the deep_gemm release needs; a conflict is a ``# conflict:`` line."""

    name = canonical(engine)
    lines = [f"{name}=={version}"]
    reqs = []
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        if req.marker is None or req.marker.evaluate({"extra": ""}):
            reqs.append(req)
    pinned = {canonical(r.name): r for r in reqs}
    torch_req = pinned.get("torch")
    need: SpecifierSet | None = None
    row = distribution(name)
    body: list[str] = []
    if row is not None and row.holds == "vendored":
        body = pin_lines(name, Version(version), certificates_dir)[1:]

        facts = VENDORED_FACTS.get(f"{name}-{version}")
        need = SpecifierSet(facts.torch_minimum) if facts else None
    else:
        holders = [d.name for d in DISTRIBUTIONS if d.holds == "package" and d.name in pinned]
        if not holders:
            return lines + [f"# {name} {version} requires no deep_gemm distribution dgcompat knows"]
        dg = pinned[holders[0]]
        exact = [s.version for s in dg.specifier if s.operator == "=="]
        if len(exact) != 1:
            allowed = [v for v in SGL_DEEP_GEMM_RELEASES if Version(v) in dg.specifier]
            hint = f": `dgcompat pin --release {allowed[-1]}` pins the newest it allows" if allowed else ""
            return lines + [f"# {name} {version} requires {dg}, not one release{hint}"]
        dg_version = Version(exact[0])
        body = [line for line in pin_lines(holders[0], dg_version, certificates_dir)
                if not line.startswith(("torch", "sglang-kernel"))]
        need = expected_torch(holders[0], dg_version)
    if torch_req is not None:
        exact_torch = [s.version for s in torch_req.specifier if s.operator == "=="]
        lines += body[:1] + [str(torch_req)]
        if need is not None and exact_torch and Version(exact_torch[0]) not in need:
            lines.append(f"# conflict: {name} {version} pins {torch_req}, but its deep_gemm needs torch{need}")
        body = body[1:]
    elif need is not None:
        lines += body[:1] + [f"torch{need}"]
        body = body[1:]
    kernel = pinned.get("sglang-kernel")
    if kernel is not None:
        lines.append(str(kernel))
        row_k = distribution("sglang-kernel")
        exact_k = [s.version for s in kernel.specifier if s.operator == "=="]
        if exact_k and Version(exact_k[0]) < KERNEL_FLOOR_WITH_SGL_DEEP_GEMM:
            lines.append(f"# conflict: sglang-kernel {exact_k[0]} is below the floor {KERNEL_FLOOR_WITH_SGL_DEEP_GEMM}")
        elif exact_k and row_k is not None and row_k.ships_none(exact_k[0]):
            lines.append(f"# sglang-kernel {exact_k[0]} bundles no deep_gemm (it cannot overwrite {SGL}'s files)")
    return lines + body


def _engine_requires(name: str, version: str, index: Any) -> list[str]:
    """The ``Requires-Dist`` lines of an engine release, read from its wheel's METADATA alone (range requests)."""

    ix = index if index is not None else PackageIndex()
    wheel = ix.wheel(name, version)
    if wheel is None:
        raise PinRefused([f"# no pin: {ix.url} has no Linux x86_64 wheel of {name} {version}"])
    kept = fetch_partial(wheel, (), ix.transport)
    with zipfile.ZipFile(kept.path) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        msg = email.parser.Parser().parsestr(zf.read(meta).decode("utf-8", "replace"), headersonly=True)
    return [str(r) for r in msg.get_all("Requires-Dist") or []]


def _engine(text: str) -> tuple[str, str]:
    name, sep, version = text.partition("==")
    try:
        Version(version)
    except ValueError:
        sep = ""
    if not sep or not name.strip():
        raise argparse.ArgumentTypeError(f"expected an engine release NAME==VERSION such as sglang==0.5.23, got {text!r}")
    return canonical(name.strip()), version


@returns_status
def main(argv: Sequence[str] | None = None, *, index: Any = None) -> int:
    """``dgcompat pin``; 0 on success, 1 when no requirement can be printed (a refused build: the lines say what to
    install instead), 2 for a usage error or an unsound certificate. ``index`` replaces the package index."""
    names = [d.name for d in DISTRIBUTIONS]
    parser = argparse.ArgumentParser(prog="dgcompat pin", description=__doc__)
    parser.add_argument("--release", help="a release of --dist instead of the installed stack")
    parser.add_argument("--dist", default=SGL, help=f"distribution of --release: {', '.join(names)} (default {SGL})")
    parser.add_argument("--engine", type=_engine, metavar="NAME==VERSION",
                        help="the pin set of an engine release (sglang==0.5.23, vllm==0.34.0) from its requirements, "
                             "read from the package index")
    parser.add_argument("--list", action="store_true", help="every release with its torch pairing")
    parser.add_argument("--docs", action="store_true", help="print docs/compatibility.md from the certificates")
    parser.add_argument("--certificates", type=readable_folder, metavar="DIR",
                        help="certificate folder (default: the certificates shipped with dgcompat_conformance)")
    opts = parse(parser, argv)
    try:
        if opts.docs:
            print(compatibility_page(opts.certificates), end="")
            return 0
        if opts.list:
            for dist, releases, torch_spec, why in EXPECTED_TORCH:
                print(one_line(f"{dist:<14} {releases:<28} torch{torch_spec:<10} # {why}", "pin --list row"))
            return 0
        if opts.engine:
            name, version = opts.engine
            try:
                requires = _engine_requires(name, version, index)
            except IndexUnavailable as exc:
                print(f"dgcompat pin: error: cannot read {name} {version}'s requirements: {exc}", file=sys.stderr)
                return 2
            print("\n".join(requirement_lines(engine_pins(name, version, requires, opts.certificates))))
            return 0
        if opts.release:
            if canonical(opts.dist) not in names:
                return usage_error(parser, f"argument --dist: expected one of {', '.join(names)}, got {opts.dist!r}")
            problem = release_problem(opts.dist, opts.release)
            if problem is not None:
                return usage_error(parser, f"argument --release: {problem}")
            version = Version(opts.release)
            print("\n".join(pin_lines(opts.dist, version, opts.certificates)))
            return 0
        print("\n".join(suggest(detection.release(), opts.certificates)))
        return 0
    except PinRefused as exc:
        print("\n".join(requirement_lines(exc.lines)))
        return 1
    except CertificateError as exc:
        print(f"dgcompat pin: error: {exc}", file=sys.stderr)
        return 2
    except UnsafeTextError as exc:
        print(f"dgcompat pin: error: nothing printed: {exc}", file=sys.stderr)
        return 2
