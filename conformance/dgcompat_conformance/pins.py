"""``dgcompat pin``: requirement lines for an engine's requirements file, from the certificates.

A pin is only as good as the run behind it, so every line set says which certificates back it
(GPU tier: real kernels; CPU tier: the wheel's real Python layer over a stand-in native library).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

from packaging.version import Version

from dgcompat.detection import EXPECTED_TORCH, KERNEL_FLOOR_WITH_SGL_DEEP_GEMM, SGL_DEEP_GEMM, Release, _expected_torch

__all__ = ["main", "suggest", "certificates", "render_compatibility"]


def _certificate_dirs() -> list[Path]:
    dirs = [Path(__file__).parent / "certificates"]
    return [d for d in dirs if d.is_dir()]


def certificates(release: str | None = None) -> list[dict[str, Any]]:
    """The committed certificates (optionally only those of ``release``), newest first."""
    found = []
    for d in _certificate_dirs():
        for path in sorted(d.glob("*.json")):
            try:
                data = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if release is None or str(data.get("release")) == release:
                data["_path"] = str(path)
                found.append(data)
    found.sort(key=lambda c: str(c.get("timestamp", "")), reverse=True)
    return found


def _status(release: str) -> str:
    certs = certificates(release)
    if not certs:
        return f"# not certified: run `dgcompat conform --release {release}` (and the GPU tier) first"
    parts = []
    for c in certs:
        tier = c.get("tier", "?")
        verdict = c.get("verdict") or ("passed" if not c.get("summary", {}).get("failed") else "failed")
        device = c.get("device")
        dev = device.get("name") if isinstance(device, dict) else device
        parts.append(f"{tier}: {verdict}" + (f" on {dev}" if dev and tier == "gpu" else ""))
    return "# certificates: " + "; ".join(parts)


def _torch_pin(spec: str) -> str:
    return f"torch{spec}"


def _vendored_pin(dist: str, version: Version) -> list[str] | None:
    """An engine wheel that vendors deep_gemm (vLLM): the engine is what gets pinned."""
    from .harness.releases import VENDORED_FACTS

    facts = VENDORED_FACTS.get(f"{dist}-{version}")
    if facts is None:
        return None
    return [f"{dist}=={version}",
            f"# deep_gemm: vendored upstream DeepGEMM {facts.deep_gemm}, stable ABI: torch{facts.torch_minimum} "
            f"(built for torch {facts.built_for}; {dist} pins its own torch)",
            _status(f"{dist}-{version}")]


def pin_lines(dist: str, version: Version) -> list[str]:
    """Requirement lines for ``dist`` at ``version``."""
    vendored = _vendored_pin(dist, version)
    if vendored is not None:
        return vendored
    expected = _expected_torch(dist, version)
    lines = [f"{dist}=={version}"]
    lines.append(_torch_pin(str(expected)) if expected else "# torch: unknown for this release (no fingerprint)")
    if dist == SGL_DEEP_GEMM:
        lines.append(f"sglang-kernel>={KERNEL_FLOOR_WITH_SGL_DEEP_GEMM}")
    lines.append(_status(str(version)))
    return lines


def suggest(rel: Release) -> list[str]:
    """Pin lines for the installed stack (or a note when there is nothing to pin)."""
    if rel.dist is None or rel.version is None:
        return ["# no deep_gemm distribution installed; see `dgcompat pin --release VERSION`"]
    if rel.source == "vendored" and rel.owner:
        host, _, host_version = rel.owner.partition(" ")
        try:
            return pin_lines(host, Version(host_version.split(" ", 1)[0]))
        except ValueError:
            pass
    return pin_lines(rel.dist, rel.version)


def _tier_cell(cert: dict[str, Any] | None) -> str:
    if cert is None:
        return "not run"
    summary = cert.get("summary", {})
    verdict = str(cert.get("verdict", ""))
    counts = f"{summary.get('passed', 0)} passed"
    for key in ("failed", "hang", "error"):
        if summary.get(key):
            counts += f", {summary[key]} {key}"
    for key in ("xfail", "xfailed"):
        if summary.get(key):
            counts += f", {summary[key]} xfail"
    if verdict.startswith("incompatible"):
        return verdict
    return f"{verdict.lower()} ({counts})"


def render_compatibility() -> str:
    """docs/compatibility.md: every release x tier, from the committed certificates."""
    from dgcompat.detection import KNOWN_SGL_DEEP_GEMM

    by_key: dict[tuple[str, str], dict[str, Any]] = {}
    for cert in certificates():
        key = (str(cert.get("release")), str(cert.get("tier")))
        by_key.setdefault(key, cert)
    gpu_env = next((c for c in certificates() if c.get("tier") == "gpu" and isinstance(c.get("device"), dict)), None)
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
        lines.append(f"- **GPU tier**: real kernels on {dev.get('name')} ({dev.get('sm')}, {dev.get('num_sms')} SMs), "
                     f"torch {gpu_env.get('torch')}, CUDA {gpu_env.get('cuda')}, driver {gpu_env.get('driver')} "
                     "(`python -m dgcompat_conformance.gpu.runner`); see [compatibility-gpu.md](compatibility-gpu.md).")
    lines += [
        "- **torch**: the torch the release's native library was built for (no wheel declares it).",
        "",
        "| release | torch | CPU tier | GPU tier | pin |",
        "|---|---|---|---|---|",
    ]
    rows: list[tuple[str, str]] = [(SGL_DEEP_GEMM, v) for v in KNOWN_SGL_DEEP_GEMM]
    rows += [("sgl-kernel", "0.3.21"), ("sglang-kernel", "0.4.0"), ("sglang-kernel", "0.4.1.post1"),
             ("sglang-kernel", "0.4.2")]
    for dist, version in rows:
        release_key = version if dist == SGL_DEEP_GEMM else f"{dist}-{version}"
        torch_spec = _expected_torch(dist, Version(version))
        cpu = by_key.get((release_key, "cpu-tier"))
        gpu = by_key.get((release_key, "gpu"))
        label = version if dist == SGL_DEEP_GEMM else f"{dist} {version} (bundled)"
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
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dgcompat pin", description=__doc__)
    parser.add_argument("--release", help="an sgl-deep-gemm version instead of the installed stack")
    parser.add_argument("--dist", default=SGL_DEEP_GEMM, help="distribution of --release (default sgl-deep-gemm)")
    parser.add_argument("--list", action="store_true", help="every release with its torch pairing")
    parser.add_argument("--docs", action="store_true", help="print docs/compatibility.md from the certificates")
    opts = parser.parse_args(list(argv) if argv is not None else None)
    if opts.docs:
        print(render_compatibility(), end="")
        return 0
    if opts.list:
        for dist, releases, torch_spec, why in EXPECTED_TORCH:
            print(f"{dist:<14} {releases:<28} torch{torch_spec:<10} # {why}")
        return 0
    if opts.release:
        print("\n".join(pin_lines(opts.dist, Version(opts.release))))
        return 0
    from dgcompat.detection import release

    print("\n".join(suggest(release())))
    return 0
