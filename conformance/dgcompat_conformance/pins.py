"""``dgcompat pin``: requirement lines for an engine's requirements file, from the certificates.

A pin is only as good as the run behind it, so every line set says which certificates back it
(GPU tier: real kernels; CPU tier: the wheel's real Python layer over a stand-in native library).

Every set of lines leaves through :func:`dgcompat_conformance._text.requirement_lines`: a line is a
comment or exactly the requirement meant, whatever a certificate, a distribution's metadata or a
device name holds; text that would break that is refused (exit status 2), never printed.
The generated page (``--docs``) puts every field through :func:`dgcompat_conformance._text.cell`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from packaging.version import Version

from dgcompat._tooling import expected_torch
from dgcompat.detection import EXPECTED_TORCH, KERNEL_FLOOR_WITH_SGL_DEEP_GEMM, Release

from ._args import parse, readable_folder, usage_error
from ._text import UnsafeTextError, cell, comment, one_line, requirement_lines
from .certificate import COMMITTED, Certificate, CertificateError, load_folder
from .dists import BUNDLED_RELEASES, DEEP_GEMM_DISTS, SGL_DEEP_GEMM, SGL_DEEP_GEMM_RELEASES, canonical
from .harness.releases import release_problem

__all__ = ["main", "suggest", "certificates", "pin_lines", "render_compatibility"]

SGL = SGL_DEEP_GEMM


def certificates(release: str | None = None, folder: Path | None = None) -> list[Certificate]:
    """The certificates in ``folder`` (default: the committed ones), optionally only ``release``'s, newest first.

    Every file is checked against the one certificate schema; an unsound one raises
    :class:`~dgcompat_conformance.certificate.CertificateError` naming it.
    """
    found = load_folder(folder if folder is not None else COMMITTED)
    return [c for c in found if release is None or c.release == release]


def _status(release: str, folder: Path | None = None) -> str:
    certs = certificates(release, folder)
    if not certs:
        return f"# not certified: run `dgcompat conform --release {release}` (and the GPU tier) first"
    parts = []
    for c in certs:
        parts.append(f"{c.tier}: {c.verdict}" + (f" on {c.device}" if c.device and c.tier == "gpu" else ""))
    files = ", ".join(c.path.name if c.path else "certificate" for c in certs)
    return comment("certificates: " + "; ".join(parts), f"the comment from {files}")


def _torch_pin(spec: str) -> str:
    return f"torch{spec}"


def _vendored_pin(dist: str, version: Version, certificates_dir: Path | None) -> list[str] | None:
    """An engine wheel that vendors deep_gemm (vLLM): the engine is what gets pinned."""
    from .harness.releases import VENDORED_FACTS

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
    """Pin lines for the installed stack (or a note when there is nothing to pin); raises as :func:`pin_lines`."""
    if rel.dist is None or rel.version is None:
        return requirement_lines(["# no deep_gemm distribution installed; see `dgcompat pin --release VERSION`"])
    if rel.source == "vendored" and rel.owner:
        host, _, host_version = rel.owner.partition(" ")
        try:
            return pin_lines(host, Version(host_version.split(" ", 1)[0]), certificates_dir)
        except ValueError:
            pass
    return pin_lines(rel.dist, rel.version, certificates_dir)


def _tier_cell(cert: Certificate | None) -> str:
    if cert is None:
        return "not run"
    summary = cert.summary
    counts = f"{summary.get('passed', 0)} passed"
    for key in ("failed", "hang", "error"):
        if summary.get(key):
            counts += f", {summary[key]} {key}"
    for key in ("xfail", "xfailed"):
        if summary.get(key):
            counts += f", {summary[key]} xfail"
    if cert.verdict.startswith("incompatible"):
        return cell(cert.verdict, f"{cert.release} verdict")
    return cell(f"{cert.verdict.lower()} ({counts})", f"{cert.release} verdict")


def render_compatibility(folder: Path | None = None) -> str:
    """docs/compatibility.md: every release x tier, from the certificates (default: the committed ones)."""
    every = certificates(folder=folder)
    by_key: dict[tuple[str, str], Certificate] = {}
    for cert in every:
        by_key.setdefault((cert.release, cert.tier), cert)
    gpu_env = next((c.data for c in every if c.tier == "gpu" and isinstance(c.data.get("device"), dict)), None)
    lines = [
        "# Compatibility",
        "",
        "Generated from `conformance/dgcompat_conformance/certificates/*.json` by `dgcompat pin --docs > docs/compatibility.md`",
        "(a test checks that this file is current).",
        "",
        "- **CPU tier**: the release's real Python layer, its native library replaced by stand-ins that check",
        "  every call against the signatures read from its binary and compute with `dgcompat.reference`",
        "  (`dgcompat conform --release V`).",
    ]
    if gpu_env is not None:
        dev = gpu_env["device"]
        name, sm, sms = (cell(dev.get(k), f"device.{k}") for k in ("name", "sm", "num_sms"))
        torch_v, cuda, driver = (cell(gpu_env.get(k), k) for k in ("torch", "cuda", "driver"))
        lines.append(f"- **GPU tier**: real kernels on {name} ({sm}, {sms} SMs), torch {torch_v}, CUDA {cuda}, "
                     f"driver {driver} (`python -m dgcompat_conformance.gpu.runner`); see "
                     "[compatibility-gpu.md](compatibility-gpu.md).")
    lines += [
        "- **torch**: the torch the release's native library was built for (no wheel declares it).",
        "",
        "| release | torch | CPU tier | GPU tier | pin |",
        "|---|---|---|---|---|",
    ]
    rows: list[tuple[str, str]] = [(SGL, v) for v in SGL_DEEP_GEMM_RELEASES]
    rows += list(BUNDLED_RELEASES)
    for dist, version in rows:
        release_key = version if dist == SGL else f"{dist}-{version}"
        torch_spec = expected_torch(dist, Version(version))
        cpu = by_key.get((release_key, "cpu-tier"))
        gpu = by_key.get((release_key, "gpu"))
        label = version if dist == SGL else f"{dist} {version} (bundled)"
        pin = f"`{dist}=={version}`" + (f", `torch{torch_spec}`" if torch_spec else "")
        lines.append(f"| {label} | {torch_spec or '?'} | {_tier_cell(cpu)} | {_tier_cell(gpu)} | {pin} |")
    from .harness.releases import VENDORED_FACTS, VENDORED_RELEASES

    for dist, version in VENDORED_RELEASES:
        vendored_key = f"{dist}-{version}"
        facts = VENDORED_FACTS[vendored_key]
        label = f"{dist} {version} (vendored upstream {facts.deep_gemm}, stable ABI)"
        pin = f"`{dist}=={version}` (deep_gemm needs torch{facts.torch_minimum}; built for {facts.built_for})"
        lines.append(f"| {label} | {facts.torch_minimum} | {_tier_cell(by_key.get((vendored_key, 'cpu-tier')))} | "
                     f"{_tier_cell(by_key.get((vendored_key, 'gpu')))} | {pin} |")
    text = "\n".join(lines) + "\n"
    if text.splitlines() != lines:  # every field above went through cell(); this is the page as a whole
        raise UnsafeTextError("docs/compatibility.md would not split back into the lines rendered")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    """``dgcompat pin``; 0 on success, 2 for a usage error or an unsound certificate."""
    parser = argparse.ArgumentParser(prog="dgcompat pin", description=__doc__)
    parser.add_argument("--release", help="an sgl-deep-gemm version instead of the installed stack")
    parser.add_argument("--dist", default=SGL, help="distribution of --release (default sgl-deep-gemm)")
    parser.add_argument("--list", action="store_true", help="every release with its torch pairing")
    parser.add_argument("--docs", action="store_true", help="print docs/compatibility.md from the certificates")
    parser.add_argument("--certificates", type=readable_folder, metavar="DIR",
                        help="certificate folder (default: the certificates shipped with dgcompat_conformance)")
    opts = parse(parser, argv)
    if isinstance(opts, int):
        return opts
    try:
        if opts.docs:
            print(render_compatibility(opts.certificates), end="")
            return 0
        if opts.list:
            for dist, releases, torch_spec, why in EXPECTED_TORCH:
                print(one_line(f"{dist:<14} {releases:<28} torch{torch_spec:<10} # {why}", "pin --list row"))
            return 0
        if opts.release:
            if canonical(opts.dist) not in DEEP_GEMM_DISTS:
                return usage_error(parser, f"argument --dist: expected one of {', '.join(DEEP_GEMM_DISTS)}, got "
                                           f"{opts.dist!r}")
            problem = release_problem(opts.dist, opts.release)
            if problem is not None:
                return usage_error(parser, f"argument --release: {problem}")
            version = Version(opts.release)
            print("\n".join(pin_lines(opts.dist, version, opts.certificates)))
            return 0
        from dgcompat.detection import release

        print("\n".join(suggest(release(), opts.certificates)))
        return 0
    except CertificateError as exc:
        print(f"dgcompat pin: error: {exc}", file=sys.stderr)
        return 2
    except UnsafeTextError as exc:
        print(f"dgcompat pin: error: nothing printed: {exc}", file=sys.stderr)
        return 2
