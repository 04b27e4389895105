"""Is the newest release on the index safe? The index lookup, the baseline, the CPU tier, the verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from dgcompat.detection import KNOWN_SGL_DEEP_GEMM

from ..certificate import COMMITTED, CertificateError, file_name, load, load_folder
from ..index import DEFAULT_INDEX, PackageIndex, urllib_transport
from ..index import IndexError as IndexUnavailable
from ..results import results_dir
from ..surface import SurfaceError, extract
from . import host_asserts
from ._surface import SGL
from .calls import check_calls, diff_surfaces
from .claims import SURFACE_CLAIMS, check_table, check_torch, release_of
from .mapping import STATUSES, MappedChange, _drift, _where, map_changes, mapped_to_json

__all__ = ["IntakeError", "CpuTier", "Verdict", "VERDICTS", "default_index_url", "index_versions", "newest_on_index",
           "newest_certified", "run_cpu_tier", "latest"]


class IntakeError(SurfaceError):
    """The newest release could not be resolved, fetched or read."""


def _tail(proc: subprocess.CompletedProcess[str]) -> str:
    lines = [ln for ln in (proc.stderr or proc.stdout or "").strip().splitlines() if not ln.startswith("WARNING")]
    return " | ".join(lines[-3:]) or f"exit status {proc.returncode}"


def default_index_url() -> str:
    """``$PIP_INDEX_URL`` where set (a mirror), else PyPI's simple API."""
    return os.environ.get("PIP_INDEX_URL") or DEFAULT_INDEX


def index_versions(dist: str = SGL, *, index_url: str | None = None, timeout: float = 180.0,
                   index: PackageIndex | None = None) -> list[str]:
    """Every version of ``dist`` the package index offers (files not yanked), newest first, pre-releases included.

    Asks the index's JSON API (:class:`~dgcompat_conformance.index.PackageIndex`; ``index`` replaces it).
    Raises :class:`IntakeError` when the index cannot be reached or does not have ``dist``.
    """
    ix = index or PackageIndex(index_url or default_index_url(), urllib_transport(timeout))
    try:
        versions = ix.versions(dist, pre=True)
        files = ix.files(dist)
    except IndexUnavailable as exc:
        raise IntakeError(f"cannot resolve the newest {dist} on the package index ({ix.url}): {exc}. Check network "
                          f"access or PIP_INDEX_URL / --index-url, or name the release with --version V.") from exc
    if files is None or not versions:
        raise IntakeError(f"cannot resolve the newest {dist} on the package index: {ix.url} has "
                          f"{'no such project' if files is None else 'no release of it'}; name the release with "
                          f"--version V.")
    return [str(v) for v in versions]


def newest_on_index(dist: str = SGL, *, index_url: str | None = None, timeout: float = 180.0,
                    index: PackageIndex | None = None) -> str:
    """The newest final release of ``dist`` on the index (a pre-release only when there is nothing else)."""
    versions = [Version(v) for v in index_versions(dist, index_url=index_url, timeout=timeout, index=index)]
    final = [v for v in versions if not v.is_prerelease and not v.is_devrelease]
    return str(max(final or versions))


def newest_certified(certificates: Path | None = None) -> tuple[str, str]:
    """(version, why): the newest known sgl-deep-gemm with a passing certificate, else the newest known.

    Certificates are read with the one certificate reader (:func:`dgcompat_conformance.certificate.load_folder`;
    default: the committed ones, CPU tier ``cpu-<release>.json``, GPU tier ``gpu-<release>.json``); a
    certificate counts when its verdict passed. An unsound certificate raises
    :class:`~dgcompat_conformance.certificate.CertificateError` naming the file.
    """
    folder = certificates if certificates is not None else COMMITTED
    best: Version | None = None
    source = ""
    unsound: list[CertificateError] = []
    for cert in sorted(load_folder(folder, unsound=unsound), key=lambda c: str(c.path)):
        if not cert.passing or cert.release not in KNOWN_SGL_DEEP_GEMM or cert.distribution not in (None, SGL):
            continue
        if best is None or Version(cert.release) > best:
            best, source = Version(cert.release), cert.path.name if cert.path is not None else cert.release
    skipped = f"; {len(unsound)} unsound certificate(s) not counted" if unsound else ""
    if best is not None:
        return str(best), f"newest certified release ({source}{skipped})"
    return KNOWN_SGL_DEEP_GEMM[-1], f"newest known release; no passing certificate in {folder}{skipped}"


@dataclass
class CpuTier:
    """The result of ``dgcompat conform --release V`` (the CPU tier) for one release."""

    ran: bool
    passed: bool
    verdict: str
    """The certificate's verdict (``PASS``/``FAIL``/``ERROR``), or why it did not run."""
    summary: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    certificate: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"ran": self.ran, "passed": self.passed, "verdict": self.verdict, "summary": dict(self.summary),
                "failures": list(self.failures), "certificate": self.certificate}


def run_cpu_tier(version: str, *, out_dir: Path, timeout: float = 900.0) -> CpuTier:
    """Certify sgl-deep-gemm ``version`` on the CPU tier in a child process (``python -m dgcompat conform``)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "dgcompat", "conform", "--release", version, "--out", str(out_dir), "--quiet",
           "--timeout", str(timeout)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 120, check=False)
    except subprocess.TimeoutExpired:
        return CpuTier(False, False, f"ERROR: the CPU tier did not finish within {timeout + 120:.0f} s")
    except OSError as exc:
        return CpuTier(False, False, f"ERROR: the CPU tier could not start: {exc}")
    path = out_dir / file_name(version)
    if not path.is_file():
        return CpuTier(False, False, f"ERROR: no certificate (exit {proc.returncode}): {_tail(proc)}")
    try:
        cert = load(path)
    except CertificateError as exc:
        return CpuTier(False, False, f"ERROR: {exc}")
    failures = [str(t["id"]) for t in cert.tests if t["outcome"] in ("failed", "error", "xpassed")]
    if cert.harness_error:
        failures.insert(0, f"harness: {cert.harness_error}")
    return CpuTier(True, cert.verdict == "PASS" and proc.returncode == 0, cert.verdict, dict(cert.summary),
                   failures, str(path))


VERDICTS = ("safe", "safe with new rows needed", "breaking")


@dataclass
class Verdict:
    """What :func:`latest` found."""

    verdict: str
    """One of :data:`VERDICTS`."""
    newest: str
    newest_why: str
    baseline: str
    baseline_why: str
    mapped: list[MappedChange] = field(default_factory=list)
    table_problems: list[str] = field(default_factory=list)
    call_problems: list[str] = field(default_factory=list)
    torch_problems: list[str] = field(default_factory=list)
    rows_needed: list[str] = field(default_factory=list)
    """Release-level rows the newest release needs (KNOWN_SGL_DEEP_GEMM, EXPECTED_TORCH) and uncovered changes."""
    cpu_tier: CpuTier | None = None
    where: list[str] = field(default_factory=list)
    """Why the verdict is ``breaking``: one line per place."""

    @property
    def exit_status(self) -> int:
        """0 safe, 3 safe with new rows needed, 1 breaking."""
        return {"safe": 0, "safe with new rows needed": 3}.get(self.verdict, 1)

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "newest": self.newest,
            "newest_why": self.newest_why,
            "baseline": self.baseline,
            "baseline_why": self.baseline_why,
            "changes": json.loads(mapped_to_json(self.mapped))["changes"],
            "table_problems": self.table_problems,
            "call_problems": self.call_problems,
            "torch_problems": self.torch_problems,
            "rows_needed": self.rows_needed,
            "cpu_tier": self.cpu_tier.to_json() if self.cpu_tier is not None else None,
            "where": self.where,
        }

    def render(self) -> str:
        counts: dict[str, int] = {}
        for m in self.mapped:
            counts[m.status] = counts.get(m.status, 0) + 1
        summary = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts.get(s)) or "no changes"
        lines = [
            f"release judged:       {SGL} {self.newest} ({self.newest_why})",
            f"compared against:     {SGL} {self.baseline} ({self.baseline_why})",
            f"surface changes:      {summary}",
        ]
        for m in self.mapped:
            if m.status in ("drift", "new-row", "handled"):
                rows = f" [rows: {', '.join(m.rows)}]" if m.rows else ""
                lines.append(f"  {m.status:<10} {m.change.symbol} {m.change.kind}"
                             f"{' ' + m.change.param if m.change.param else ''}{rows}: {m.reason}")
        n_claims = len(SURFACE_CLAIMS)
        lines.append("capability table:     " + (f"{len(self.table_problems)} row(s) disagree with the surface"
                                                 if self.table_problems else
                                                 f"agrees with the {self.newest} surface ({n_claims} claims)"))
        lines += [f"  {p}" for p in self.table_problems]
        lines.append("calls dgcompat makes: " + (f"{len(self.call_problems)} do not fit" if self.call_problems
                                                 else f"all fit the {self.newest} signatures"))
        lines += [f"  {p}" for p in self.call_problems]
        lines += [f"torch pairing:        {p}" for p in self.torch_problems]
        tier = self.cpu_tier
        if tier is None:
            lines.append("CPU tier:             not run")
        else:
            s = tier.summary
            counts_text = (f" ({s.get('passed', 0)} passed, {s.get('failed', 0)} failed, {s.get('error', 0)} errors, "
                           f"{s.get('xfailed', 0)} xfailed)") if s else ""
            lines.append(f"CPU tier:             {tier.verdict}{counts_text}"
                         + (f" -> {tier.certificate}" if tier.certificate else ""))
            lines += [f"  failed: {f}" for f in tier.failures]
        if self.rows_needed:
            lines.append("rows needed:")
            lines += [f"  {r}" for r in self.rows_needed]
        lines.append(f"verdict: {self.verdict}" + (" (CPU tier not run)" if tier is None else ""))
        lines += [f"  breaking: {w}" for w in self.where]
        return "\n".join(lines) + "\n"


def latest(*, version: str | None = None, baseline: str | None = None, index_url: str | None = None,
           cpu_tier: bool = True, out_dir: Path | None = None, certificates: Path | None = None,
           arch: str = "sm90", timeout: float = 900.0, echo: Callable[[str], None] | None = None,
           why: str | None = None, index: PackageIndex | None = None) -> Verdict:
    """Judge the newest sgl-deep-gemm on the index (or ``version``) against the newest certified release.

    Steps: resolve the release (:func:`newest_on_index`), extract both surfaces (downloading the
    wheels into the cache), diff them over everything dgcompat calls (:func:`diff_surfaces`),
    map the changes (:func:`map_changes`), check the table, the call shapes and the torch
    pairing against the new surface, and run the CPU tier (:func:`run_cpu_tier`).

    Verdicts: ``breaking`` for unhandled drift, a table row / call / torch pairing that
    disagrees with the new surface, or a CPU-tier failure (``where`` says which);
    ``safe with new rows needed`` when only uncovered non-breaking changes remain or the release
    is new to ``KNOWN_SGL_DEEP_GEMM`` / ``EXPECTED_TORCH``; ``safe`` otherwise.
    """
    say = echo or (lambda _text: None)
    if version is not None:
        newest, newest_why = version, why or "given with --version"
    else:
        newest, newest_why = newest_on_index(index_url=index_url, index=index), "newest on the package index"
    if baseline is not None:
        base, why = baseline, "given with --baseline"
    else:
        base, why = newest_certified(certificates)
    say(f"intake: {SGL} {newest} against {base}")
    try:
        before = extract(base)
        after = extract(newest)
    except SurfaceError as exc:
        raise IntakeError(f"cannot read the surfaces: {exc}") from exc
    mapped = map_changes(diff_surfaces(before, after), before=before, after=after, arch=arch)
    table_problems = check_table(after, arch=arch)
    call_problems = check_calls(after, arch=arch)
    torch_problems = check_torch(after)
    rows_needed: list[str] = []
    if newest not in KNOWN_SGL_DEEP_GEMM:
        rows_needed.append(f"add {newest!r} to dgcompat.detection.KNOWN_SGL_DEEP_GEMM (the CPU tier's release list too)")
    if release_of(after).expected_torch is None:
        built = after.get("torch_build") or "unknown"
        rows_needed.append(f"add an EXPECTED_TORCH row for {SGL} {newest} (native library built against torch {built})")
    rows_needed += [f"{m.change.symbol} {m.change.kind}{' ' + m.change.param if m.change.param else ''}: {m.reason}"
                    for m in mapped if m.status == "new-row"]
    tier: CpuTier | None = None
    if cpu_tier:
        say(f"intake: running the CPU tier for {newest}")
        tier = run_cpu_tier(newest, out_dir=out_dir or results_dir("conform"), timeout=timeout)
    # The native contract (host asserts of both _C.so): a change nothing covers is never "safe".
    native = host_asserts.latest_findings(base, newest)
    rows_needed += native.notes
    where = [_where(m) for m in _drift(mapped)]
    where += native.breaking
    where += [f"capability table: {p}" for p in table_problems]
    where += [f"call: {p}" for p in call_problems]
    where += [f"torch pairing: {p}" for p in torch_problems]
    if tier is not None and not tier.passed:
        where += [f"CPU tier: {f}" for f in tier.failures] or [f"CPU tier: {tier.verdict}"]
    if where:
        verdict = "breaking"
    elif rows_needed:
        verdict = "safe with new rows needed"
    else:
        verdict = "safe"
    return Verdict(verdict, newest, newest_why, base, why, mapped, table_problems, call_problems, torch_problems, rows_needed,
                   tier, where)
