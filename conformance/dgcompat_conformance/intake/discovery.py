"""What is new on the package index, for every distribution of the discovery table, and what it means.

For each row of :data:`dgcompat_conformance.dists.DISTRIBUTIONS` the index is asked for the releases
(:class:`~dgcompat_conformance.index.PackageIndex`); a final release newer than the newest the table
records (certified, refused or looked at) is new, and is judged:

* sgl-deep-gemm: :func:`dgcompat_conformance.intake.latest` (whole wheel, a few MB): surface diff against
  the newest certified release mapped onto the table, table and call checks, native contract, CPU tier;
* a kernel or engine wheel: only its deep_gemm folder and dist-info are read (range requests). No deep_gemm:
  as the table records for the release (``no deep_gemm``), or not (``needs review``). Otherwise its fingerprint
  is held against the recorded builds, its surface diffed against the newest certified release of the same
  distribution, the table and calls checked, and the CPU tier run on the kept files;
* a release the index holds only as source archives is not readable here (recorded for tensorrt-llm, whose
  wheels are on NVIDIA's index).

Statuses (:data:`STATUSES`) and the exit status a scheduled job acts on (:func:`exit_status`): 0 nothing to
do, 3 new releases certified on the CPU tier (record them), 1 a new release needs review, 2 the index
could not be asked.
"""

from __future__ import annotations

import json
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.version import Version

from dgcompat.detection import KNOWN_SURFACES

from ..certificate import CertificateError, file_name, load
from ..dists import DISTRIBUTIONS, SGL_DEEP_GEMM, Distribution
from ..index import IndexError as IndexUnavailable
from ..index import IndexFile, PackageIndex, fetch_partial
from ..releases import parse_release, spec_from_wheel
from ..results import results_dir
from ..surface import SurfaceError, extract
from ..surface.fingerprint import compare, part_ids, recorded
from ..wheels import FetchError, fetch_wheel
from . import newest
from .calls import check_calls, diff_surfaces
from .claims import check_table, release_of
from .mapping import _drift, _where, map_changes, render_differences

__all__ = ["STATUSES", "Finding", "DistReport", "discover", "exit_status", "render", "to_json"]

#: What a distribution's (or a new release's) status means, worst last.
STATUSES: Mapping[str, str] = {
    "nothing new": "no final release newer than the newest the discovery table records",
    "no deep_gemm": "new releases that ship no deep_gemm, as the table records for them",
    "not on this index": "the index holds only source archives (recorded: the wheels are published elsewhere)",
    "certified": "new, and certified on the CPU tier; record it in the table (the lines under 'record:')",
    "not readable": "the index or the release could not be read here",
    "needs review": "new, and something needs a person (listed under each release)",
}
_RANK = {s: i for i, s in enumerate(STATUSES)}


@dataclass
class Finding:
    """One new release and what became of it."""

    dist: str
    version: str
    status: str
    lines: list[str] = field(default_factory=list)
    """What was found, in words (printed under the release)."""
    record: list[str] = field(default_factory=list)
    """What to add to the tables once a person agrees."""
    fetched: str = ""
    """What was read from the index (``"11.0 MB of 239.0 MB in 3 range requests"``)."""
    certificate: str | None = None
    fingerprint: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        return {"dist": self.dist, "version": self.version, "status": self.status, "lines": self.lines,
                "record": self.record, "fetched": self.fetched, "certificate": self.certificate,
                "fingerprint": None if self.fingerprint is None else {"id": self.fingerprint.get("id"),
                                                                      **part_ids(self.fingerprint)}}


@dataclass
class DistReport:
    """One distribution: what the index has, what the table records, the new releases."""

    dist: str
    status: str
    newest: str | None
    recorded_through: str | None
    note: str = ""
    findings: list[Finding] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"dist": self.dist, "status": self.status, "newest": self.newest,
                "recorded_through": self.recorded_through, "note": self.note,
                "findings": [f.to_json() for f in self.findings]}


def _mb(n: int | None) -> str:
    return "?" if n is None else f"{n / 1e6:.1f} MB"


def _worst(statuses: Iterable[str], default: str) -> str:
    return max(statuses, key=lambda s: _RANK[s], default=default)


def run_cpu_tier_wheel(wheel: Path, *, out_dir: Path, timeout: float) -> tuple[str, dict[str, int], list[str], str | None]:
    """``dgcompat conform --wheel WHEEL`` in a child: (verdict, summary, failing tests, certificate path)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "dgcompat", "conform", "--wheel", str(wheel), "--out", str(out_dir), "--quiet",
           "--timeout", str(timeout)]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout + 300, check=False)
    except subprocess.TimeoutExpired:
        return f"ERROR: did not finish within {timeout + 300:.0f} s", {}, [], None

    path = out_dir / file_name(spec_from_wheel(wheel).id)
    try:
        cert = load(path)
    except CertificateError as exc:
        tail = " | ".join((proc.stderr or proc.stdout).strip().splitlines()[-3:])
        return f"ERROR: {exc} ({tail})", {}, [], None
    failing = [str(t["id"]) for t in cert.tests if t["outcome"] in ("failed", "error", "xpassed")]
    if cert.harness_error:
        failing.insert(0, f"harness: {cert.harness_error}")
    return cert.verdict, dict(cert.summary), failing, str(path)


@dataclass
class _Context:
    index: PackageIndex
    cpu_tier: bool
    out_dir: Path
    certificates: Path | None
    arch: str
    timeout: float
    say: Callable[[str], None]
    run_wheel: Callable[..., tuple[str, dict[str, int], list[str], str | None]] = run_cpu_tier_wheel


def _release_id(dist: str, version: str) -> str:
    return version if dist == SGL_DEEP_GEMM else f"{dist}-{version}"


def _judge_sgl(ctx: _Context, version: Version) -> Finding:
    try:
        verdict = newest.latest(version=str(version), index_url=ctx.index.url, cpu_tier=ctx.cpu_tier, out_dir=ctx.out_dir,
                         certificates=ctx.certificates, arch=ctx.arch, timeout=ctx.timeout, echo=ctx.say,
                         why="new on the package index")
    except (newest.IntakeError, SurfaceError, OSError, ValueError) as exc:
        return Finding(SGL_DEEP_GEMM, str(version), "not readable", [f"cannot judge it: {exc}"])
    tier = verdict.cpu_tier
    passed = tier is not None and tier.passed
    status = "needs review" if verdict.verdict == "breaking" or not passed else "certified"
    lines = verdict.render().rstrip("\n").splitlines()
    if tier is None:
        lines.append("not certified: the CPU tier was not run (--no-cpu-tier)")
    return Finding(SGL_DEEP_GEMM, str(version), status, lines, list(verdict.rows_needed),
                   certificate=tier.certificate if tier else None)


def _baseline(row: Distribution, version: Version) -> str | None:
    """The newest certified release of ``row`` older than ``version`` (what a new copy is diffed against)."""
    older = [Version(v) for v in row.certified if Version(v) < version]
    return str(max(older)) if older else None


def _fingerprint_lines(fp: Mapping[str, Any], lineage: tuple[str, str], label: str) -> tuple[list[str], list[str], bool]:
    """(lines, record lines, whether a person must look) for a copy's fingerprint against the recorded builds."""
    builds = recorded()
    same = [rid for rid, b in builds.items() if b.get("id") == fp.get("id")]
    if same:
        return [f"fingerprint {fp.get('id')}: the same build as {', '.join(sorted(same))}"], [], False
    pid = part_ids(fp)["python"]
    known = KNOWN_SURFACES.get(lineage) or {}
    lines = [f"fingerprint {fp.get('id')} (" + ", ".join(f"{k} {v or '-'}" for k, v in part_ids(fp).items()) + ")"]
    record = [f"add {label}'s fingerprint to dgcompat_conformance/surface/builds.json "
              f"(python -m dgcompat_conformance.intake.builds --record {label})"]
    review = False
    if known and pid and pid not in known:
        review = True
        lines.append(f"same version, different surface: {lineage[0]} {lineage[1]} with surface {pid}, none of the "
                     f"recorded builds ({', '.join(f'{k}: {v}' for k, v in known.items())})")
        record.append(f"add {pid!r} to dgcompat.detection.KNOWN_SURFACES[{lineage!r}]")
        peers = [b for b in builds.values() if (b.get("dist"), b.get("version")) == lineage]
        for peer in peers[-1:]:
            lines += [f"  vs {peer.get('wheel')}: {line}" for line in render_differences(compare(fp, peer))]
    elif pid and not known:
        record.append(f"add {lineage!r}: {{{pid!r}: ...}} to dgcompat.detection.KNOWN_SURFACES")
    return lines, record, review


def _judge_copy(ctx: _Context, row: Distribution, version: Version, wheel: IndexFile) -> Finding:
    """A kernel or engine wheel: its deep_gemm folder and dist-info only."""

    label = _release_id(row.name, str(version))
    finding = Finding(row.name, str(version), "needs review")
    try:
        partial = fetch_partial(wheel, (row.path,), ctx.index.transport)
    except IndexUnavailable as exc:
        finding.status = "not readable"
        finding.lines.append(f"cannot read {wheel.filename}: {exc}")
        return finding
    src = partial.source
    finding.fetched = (f"{_mb(int(src.get('fetched') or 0))} of {_mb(wheel.size)} in {src.get('requests')} range "
                       f"requests" if partial.fetched else f"kept from an earlier read ({partial.path})")
    has_copy = int(src.get("members") or 0) > 0 and _holds_package(partial.path, row.path)
    if not has_copy:
        if row.ships_none(version):
            finding.status = "no deep_gemm"
            finding.lines.append(f"{wheel.filename} holds no {row.path} (as the table records from {row.without})")
        else:
            finding.lines.append(f"{wheel.filename} holds no {row.path}, unlike the releases the table certifies: an "
                                 f"engine that used the copy now needs a deep_gemm of its own")
            finding.record.append(f"record {row.name} {version} as shipping no deep_gemm (Distribution.without)")
        return finding
    try:
        after = extract(partial.path)
        rel = release_of(after)
    except (SurfaceError, ValueError, OSError) as exc:
        finding.lines.append(f"its deep_gemm cannot be read: {exc}")
        return finding
    fp = after.get("fingerprint") or {}
    finding.fingerprint = fp
    finding.lines.append(f"deep_gemm: {rel.label} ({after.get('binding')})")
    lines, record, review = _fingerprint_lines(fp, (str(rel.dist), str(rel.version)), label)
    finding.lines += lines
    finding.record += record
    where: list[str] = []
    base = _baseline(row, version)
    if base is not None:
        try:
            before = extract(fetch_wheel(parse_release(_release_id(row.name, base)), index=ctx.index))
        except (FetchError, SurfaceError, OSError, ValueError) as exc:
            finding.lines.append(f"compared against: nothing ({row.name} {base} cannot be read: {exc})")
            review = True
        else:
            mapped = map_changes(diff_surfaces(before, after), before=before, after=after, arch=ctx.arch)
            counts: dict[str, int] = {}
            for m in mapped:
                counts[m.status] = counts.get(m.status, 0) + 1
            finding.lines.append(f"compared against {row.name} {base}: "
                                 + (", ".join(f"{n} {s}" for s, n in sorted(counts.items())) or "no changes"))
            finding.lines += [f"  {m.status:<10} {m.change.symbol} {m.change.kind}"
                              f"{' ' + m.change.param if m.change.param else ''}"
                              f"{' [rows: ' + ', '.join(m.rows) + ']' if m.rows else ''}"
                              for m in mapped if m.status in ("drift", "new-row", "handled")]
            where += [_where(m) for m in _drift(mapped)]
            finding.record += [f"{_where(m)}" for m in mapped if m.status == "new-row"]
    where += [f"capability table: {p}" for p in check_table(after, arch=ctx.arch)]
    where += [f"call: {p}" for p in check_calls(after, arch=ctx.arch)]
    passed = False
    if ctx.cpu_tier:
        ctx.say(f"intake: running the CPU tier for {label} ({partial.path.name})")
        verdict, summary, failing, cert = ctx.run_wheel(partial.path, out_dir=ctx.out_dir, timeout=ctx.timeout)
        finding.certificate = cert
        counts_text = (f" ({summary.get('passed', 0)} passed, {summary.get('failed', 0)} failed, "
                       f"{summary.get('error', 0)} errors)") if summary else ""
        finding.lines.append(f"CPU tier: {verdict}{counts_text}" + (f" -> {cert}" if cert else ""))
        passed = verdict == "PASS"
        where += [f"CPU tier: {f}" for f in failing[:20]] or ([] if passed else [f"CPU tier: {verdict}"])
    else:
        finding.lines.append("CPU tier: not run (--no-cpu-tier)")
    finding.lines += [f"breaking: {w}" for w in where]
    if str(version) not in row.certified:
        finding.record.append(f"add '{version}' to the discovery table's certified releases of {row.name} "
                              f"(dgcompat_conformance.dists.DISTRIBUTIONS)"
                              + (" and its facts (releases.VENDORED_FACTS)" if row.holds == "vendored" else ""))
    finding.status = "needs review" if (where or review or not passed) else "certified"
    return finding


def _holds_package(partial: Path, path: str) -> bool:
    with zipfile.ZipFile(partial) as zf:
        return f"{path}__init__.py" in zf.namelist()


def _judge_other(ctx: _Context, row: Distribution, version: Version, files: list[IndexFile]) -> Finding:
    """A release with no wheel this machine installs, or of a distribution whose wheels are small (upstream)."""
    finding = Finding(row.name, str(version), "needs review")
    kinds = sorted({f.kind for f in files})
    if files and kinds == ["sdist"]:
        if row.wheels_elsewhere:
            finding.status = "not on this index"
            finding.lines.append(f"only source archives on {ctx.index.url} ({', '.join(f.filename for f in files)}); "
                                 f"its wheels are published on {row.wheels_elsewhere} (as the table records)")
        else:
            finding.lines.append(f"only a source archive on the index ({', '.join(f.filename for f in files)}, "
                                 f"{_mb(files[0].size)}): what it installs as deep_gemm is decided when it is built; "
                                 f"look at it before anyone installs it")
        return finding
    finding.lines.append(f"no Linux x86_64 wheel among {', '.join(f.filename for f in files) or 'no files'}")
    return finding


def _judge_dist(ctx: _Context, row: Distribution, since: str | None) -> DistReport:
    try:
        files = ctx.index.files(row.name)
    except IndexUnavailable as exc:
        return DistReport(row.name, "not readable", None, row.reviewed_through, f"cannot ask the index: {exc}")
    if files is None:
        return DistReport(row.name, "not readable", None, row.reviewed_through, f"{ctx.index.url} has no {row.name}")
    versions = ctx.index.versions(row.name)
    newest = str(versions[0]) if versions else None
    through = Version(since) if since is not None else row.newest_recorded
    report = DistReport(row.name, "nothing new", newest, str(through) if through else None)
    new = [v for v in versions if through is None or v > through]
    if through is None:
        new = new[:1]  # never looked at: the newest only
    notes = []
    if newest is not None and newest in row.refused:
        notes.append(f"{newest} refused: {row.refused[newest]}")
    if row.without and newest is not None and row.ships_none(newest) and not new:
        notes.append(f"ships no deep_gemm from {row.without.lstrip('>=')} on")
    if row.wheels_elsewhere and not new:
        notes.append(f"wheels on {row.wheels_elsewhere}")
    report.note = "; ".join(notes)
    for version in sorted(new):
        ctx.say(f"intake: {row.name} {version} is new")
        wheel = ctx.index.wheel(row.name, version)
        if row.holds == "package" and wheel is not None:
            finding = _judge_sgl(ctx, version)
        elif row.partial and wheel is not None:
            finding = _judge_copy(ctx, row, version, wheel)
        else:
            finding = _judge_other(ctx, row, version, ctx.index.release_files(row.name, version))
        report.findings.append(finding)
    report.status = _worst((f.status for f in report.findings), "nothing new")
    return report


def discover(index: PackageIndex, *, dists: Iterable[str] | None = None, since: Mapping[str, str] | None = None,
             cpu_tier: bool = True, out_dir: Path | None = None, certificates: Path | None = None, arch: str = "sm90",
             timeout: float = 900.0, echo: Callable[[str], None] | None = None,
             run_wheel: Callable[..., tuple[str, dict[str, int], list[str], str | None]] | None = None) -> list[DistReport]:
    """Ask ``index`` about every distribution of the discovery table (or ``dists``) and judge each new release.

    ``since`` (dist -> version) re-judges the releases after ``version`` as if the table recorded no later one.
    """
    wanted = set(dists) if dists is not None else None
    ctx = _Context(index, cpu_tier, out_dir or results_dir("conform"), certificates, arch, timeout,
                   echo or (lambda _text: None), run_wheel or run_cpu_tier_wheel)
    return [_judge_dist(ctx, row, (since or {}).get(row.name)) for row in DISTRIBUTIONS
            if wanted is None or row.name in wanted]


def exit_status(reports: Iterable[DistReport]) -> int:
    """1 when a new release needs review, else 2 when something could not be read, else 3 when new releases were
    certified (record them), else 0."""
    statuses = {r.status for r in reports}
    if "needs review" in statuses:
        return 1
    if "not readable" in statuses:
        return 2
    return 3 if "certified" in statuses else 0


def render(reports: list[DistReport], index_url: str) -> str:
    width = max((len(r.dist) for r in reports), default=10)
    lines = [f"dgcompat conform --latest: {len(reports)} distributions on {index_url}"]
    for r in reports:
        head = f"{r.dist:<{width}}  {r.status:<17} newest {r.newest or '-'}"
        head += f" (recorded through {r.recorded_through})" if r.recorded_through else " (never looked at)"
        lines.append(head + (f"; {r.note}" if r.note else ""))
        for f in r.findings:
            lines.append(f"  {f.dist} {f.version}: {f.status}" + (f" (read {f.fetched})" if f.fetched else ""))
            lines += [f"    {line}" for line in f.lines]
            if f.record:
                lines.append("    record:")
                lines += [f"      {line}" for line in f.record]
    status = exit_status(reports)
    words = {0: "nothing to do", 1: "a new release needs review", 2: "the index could not be read",
             3: "new releases certified on the CPU tier: record them"}[status]
    lines.append(f"verdict: {words} (exit {status})")
    return "\n".join(lines) + "\n"


def to_json(reports: list[DistReport], index_url: str) -> str:
    return json.dumps({"index": index_url, "exit_status": exit_status(reports),
                       "distributions": [r.to_json() for r in reports]}, indent=2, sort_keys=True) + "\n"
