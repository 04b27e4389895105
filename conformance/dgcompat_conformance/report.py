"""Every page and table the certification wing generates, rendered in one place.

The pages (:data:`PAGES`; a test checks that each one in the repository is current):

* ``docs/capabilities.md`` (:func:`capabilities_page`, ``dgcompat table --markdown``): the capability table;
* ``docs/compatibility.md`` (:func:`compatibility_page`, ``dgcompat pin --docs``): every release x tier;
* ``docs/compatibility-gpu.md`` (:func:`gpu_compatibility_page`, ``python -m dgcompat_conformance.gpu.runner
  --table``): the GPU tier's releases, cases and findings.

The tables commands print: ``dgcompat conform``'s :func:`progress_line` and :func:`conform_table`, the GPU
runner's :func:`gpu_run_table` and the upstream-tests runner's :func:`upstream_table`.

Every cell and line goes through the one text check of :mod:`dgcompat_conformance._text`: a field that names
something (a release, a device, a verdict) must already be one printable line (:func:`~._text.cell` refuses it
otherwise, with :class:`~._text.UnsafeTextError`), free text (a message, a traceback) is folded onto one line
(:func:`~._text.cell` with ``free``, :func:`~._text.flatten`, :func:`~._text.short`), and a page must split back
into exactly the lines rendered (:func:`~._text.page`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from packaging.version import InvalidVersion, Version

from dgcompat._tooling import expected_torch
from dgcompat.table import ROWS

from ._text import cell, flatten, page, short
from .certificate import COMMITTED, Certificate, load_folder
from .dists import BUNDLED_RELEASES, SGL_DEEP_GEMM, SGL_DEEP_GEMM_RELEASES
from .releases import VENDORED_FACTS, VENDORED_RELEASES

__all__ = ["Page", "PAGES", "capabilities_page", "compatibility_page", "gpu_certificates", "gpu_compatibility_page",
           "progress_line", "conform_table", "gpu_run_table", "UpstreamRow", "upstream_table"]


def _row(cells: Sequence[str]) -> str:
    """A Markdown table row of cells that went through :func:`~._text.cell`."""
    return "| " + " | ".join(cells) + " |"


def _free(text: object) -> str:
    """Free text (a message, a summary, an ABI detail) for a page: one line, ``|`` and ``<!--`` defused."""
    return cell(text, "text", free=True)


def _text_table(head: Sequence[str], rows: Sequence[Sequence[object]], *, right: frozenset[int] = frozenset(),
                rule: bool = False) -> list[str]:
    """A fixed-width text table, one line per row after the head (and a rule of dashes under it with ``rule``):
    every cell folded onto one line by :func:`~._text.flatten`; the columns in ``right`` right-aligned."""
    shown = [[flatten(v) for v in r] for r in rows]
    widths = [max(len(h), *(len(r[i]) for r in shown)) for i, h in enumerate(head)]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(v.rjust(w) if i in right else v.ljust(w) for i, (v, w) in enumerate(zip(cells, widths, strict=False))).rstrip()

    return [line(head), *([line(["-" * w for w in widths])] if rule else []), *(line(r) for r in shown)]


# --- docs/capabilities.md --------------------------------------------------------------------------------------

_CAPABILITIES_HEAD = """# The capability table

Generated from `dgcompat/table.py` by `dgcompat table --markdown > docs/capabilities.md` (a test checks
that this file is current). The first row of a capability that matches the installed distribution
and release answers it; rows of kind *presence* are re-checked by probing the imported deep_gemm
(the attribute named in the last column). Per-architecture values are keyed by family (`sm90`,
`sm100`, `sm120`, and `other` for any other or a not yet known architecture); `DGCOMPAT_ARCH`
overrides the current device. Rows marked *informative* record a difference no adapter reads (the
intake still checks them against each release's surface). Which stable names hand out the
upstream function itself is `UPSTREAM_IDENTITY` in the same file.
"""


def capabilities_page() -> str:
    """docs/capabilities.md: the capability table (:data:`dgcompat.table.ROWS`), one row per table row."""
    lines = [*_CAPABILITIES_HEAD.splitlines(), "",
             "| capability | distribution | releases | value | upstream call | caused by | drop when | kind |",
             "|---|---|---|---|---|---|---|---|"]
    for r in ROWS:
        kind = r.kind + (f" (`{r.probe}`)" if r.probe else "") + (" informative" if r.informative else "")
        dist = "bundled (sgl-kernel, sglang-kernel)" if r.dist == "bundled" else r.dist
        cells = [f"`{r.capability}`", dist, r.releases or "all", f"`{r.value!r}`", r.upstream, r.since,
                 r.drop_when, kind]
        lines.append(_row([cell(c, f"{r.capability} cell") for c in cells]))
    return page(lines, "docs/capabilities.md")


# --- docs/compatibility.md -------------------------------------------------------------------------------------

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


def compatibility_page(folder: Path | None = None) -> str:
    """docs/compatibility.md: every release x tier, from the certificates in ``folder`` (default: the shipped ones).

    Raises :class:`~dgcompat_conformance.certificate.CertificateError` naming an unsound certificate file.
    """
    every = load_folder(folder if folder is not None else COMMITTED)
    by_key: dict[tuple[str, str], Certificate] = {}
    for cert in every:
        by_key.setdefault((cert.release, cert.tier), cert)
    gpu_env = next((c for c in every if c.tier == "gpu" and isinstance(c.device, Mapping)), None)
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
    if gpu_env is not None and isinstance(gpu_env.device, Mapping):
        dev = gpu_env.device
        name, sm, sms = (cell(dev.get(k), f"device.{k}") for k in ("name", "sm", "num_sms"))
        torch_v, cuda, driver = (cell(v, k) for v, k in ((gpu_env.torch, "torch"), (gpu_env.cuda, "cuda"),
                                                         (gpu_env.driver, "driver")))
        lines.append(f"- **GPU tier**: real kernels on {name} ({sm}, {sms} SMs), torch {torch_v}, CUDA {cuda}, "
                     f"driver {driver} (`python -m dgcompat_conformance.gpu.runner`); see "
                     "[compatibility-gpu.md](compatibility-gpu.md).")
    lines += [
        "- **torch**: the torch the release's native library was built for (no wheel declares it).",
        "",
        "| release | torch | CPU tier | GPU tier | pin |",
        "|---|---|---|---|---|",
    ]
    rows: list[tuple[str, str]] = [(SGL_DEEP_GEMM, v) for v in SGL_DEEP_GEMM_RELEASES]
    rows += list(BUNDLED_RELEASES)
    for dist, version in rows:
        release_key = version if dist == SGL_DEEP_GEMM else f"{dist}-{version}"
        torch_spec = expected_torch(dist, Version(version))
        label = version if dist == SGL_DEEP_GEMM else f"{dist} {version} (bundled)"
        pin = f"`{dist}=={version}`" + (f", `torch{torch_spec}`" if torch_spec else "")
        lines.append(_row([cell(label, "release"), cell(torch_spec or "?", "torch"),
                           _tier_cell(by_key.get((release_key, "cpu-tier"))),
                           _tier_cell(by_key.get((release_key, "gpu"))), cell(pin, "pin")]))
    for dist, version in VENDORED_RELEASES:
        vendored_key = f"{dist}-{version}"
        facts = VENDORED_FACTS[vendored_key]
        label = f"{dist} {version} (vendored upstream {facts.deep_gemm}, stable ABI)"
        pin = f"`{dist}=={version}` (deep_gemm needs torch{facts.torch_minimum}; built for {facts.built_for})"
        lines.append(_row([cell(label, "release"), cell(facts.torch_minimum, "torch"),
                           _tier_cell(by_key.get((vendored_key, "cpu-tier"))),
                           _tier_cell(by_key.get((vendored_key, "gpu"))), cell(pin, "pin")]))
    return page(lines, "docs/compatibility.md")


# --- docs/compatibility-gpu.md ---------------------------------------------------------------------------------

def _version_key(release: str) -> tuple[int, Version, str]:
    """Releases that are versions first, in version order; the others (bundle and engine release ids) by name."""
    try:
        return (0, Version(release), "")
    except InvalidVersion:
        return (1, Version("0"), release)


def gpu_certificates(folder: Path = COMMITTED) -> list[Certificate]:
    """Every ``gpu-*.json`` certificate of the GPU tier in ``folder``, checked, oldest release first.

    Raises :class:`~dgcompat_conformance.certificate.CertificateError` naming an unsound file.
    """
    certs = [c for c in load_folder(folder, "gpu-*.json") if c.tier == "gpu"]
    return sorted(certs, key=lambda c: _version_key(c.release))


def _abi_text(abi: Mapping[str, Any]) -> str:
    text = str(abi.get("verdict") or ("ok" if abi.get("ok") else "-"))
    forced = abi.get("with_mismatch_allowed")
    if forced:
        why = ""
        if forced.get("load") and not forced["load"].get("ok"):
            # The innermost error is the dynamic linker's (e.g. an undefined torch symbol).
            why = str(forced["load"].get("error") or "").split(" <- ")[-1]
        elif forced.get("calls"):
            bad = [x for x in forced["calls"] if not x.get("ok")]
            why = f"{bad[0]['name']}: " + str(bad[0]["detail"]).split("rejected the call: ")[-1] if bad else ""
        text += f"; imported anyway: {forced.get('verdict')}" + (f" (`{short(why, 220)}`)" if why else "")
    return text


def gpu_compatibility_page(certs: Sequence[Certificate] | None = None) -> str:
    """docs/compatibility-gpu.md from GPU certificates (default: the shipped ones, :func:`gpu_certificates`): a
    release table, a case matrix, the findings, what each case checks."""
    if certs is None:
        certs = gpu_certificates()
    lines = [
        "# GPU compatibility (real kernels)",
        "",
        "Generated from `conformance/dgcompat_conformance/certificates/gpu-*.json` by `python -m dgcompat_conformance.gpu.runner --table`;",
        "do not edit by hand. Each release was installed into its own folder, checked for ABI health (its native",
        "library must load through dgcompat and a tiny `get_paged_mqa_logits_metadata` + `fp8_gemm_nt` call must",
        "see its tensors), then every case ran in its own process under a watchdog and was compared with",
        "`dgcompat.reference` on the same GPU tensors (`diff = 1 - 2*sum(x*y)/sum(x*x+y*y)` over valid positions).",
        "",
    ]
    envs = sorted({(json.dumps(c.device, sort_keys=True), c.driver, c.cuda, c.torch, c.python) for c in certs})
    for dev, driver, cuda, torch_v, py in envs:
        d = json.loads(dev) or {}
        name, sm, sms = (cell(d.get(k, "?"), f"device.{k}") for k in ("name", "sm", "num_sms"))
        driver, cuda, torch_v, py = (cell(v, k) for v, k in ((driver, "driver"), (cuda, "cuda"), (torch_v, "torch"),
                                                              (py, "python")))
        lines.append(f"Machine: {name} ({sm}, {sms} SMs), driver {driver}, CUDA {cuda}, torch {torch_v}, Python {py}.")
    lines += ["", "## Releases", "",
              "| release | verdict | passed | failed | hang | error | xfail | ABI check | certified on |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in certs:
        s = c.summary
        lines.append(_row([cell(c.release, "release"), cell(c.verdict, "verdict"),
                           *(_free(s[k]) for k in ("passed", "failed", "hang", "error", "xfail")),
                           _free(_abi_text(c.abi or {})), cell(c.timestamp[:10], "timestamp")]))
    ran = [c for c in certs if c.tests]
    if ran:
        lines += _gpu_cases(ran)
    return page(lines, "docs/compatibility-gpu.md")


def _gpu_cases(ran: Sequence[Certificate]) -> list[str]:
    """The case matrix, the findings and what each case checks, over the certificates whose cases ran."""
    ids: list[str] = []
    for c in ran:
        for t in c.tests:
            if t["id"] not in ids:
                ids.append(t["id"])
    first = {cid: next(t for c in ran for t in c.tests if t["id"] == cid) for cid in ids}
    marks = {"passed": "pass", "failed": "**FAIL**", "hang": "**HANG**", "error": "**ERROR**", "xfail": "xfail"}
    lines = ["", "## Cases", "", _row(["case", "metric / tolerance", *(cell(c.release, "release") for c in ran)]),
             "|---|---|" + "---|" * len(ran)]
    for cid in ids:
        tol = first[cid].get("tolerance")
        metric = "exact" if str(first[cid].get("metric", "")).startswith("exact:") else (
            f"diff <= {tol:g}" if isinstance(tol, (int, float)) else "-")
        row = [f"`{cell(cid, 'case id')}`", cell(metric, "metric")]
        for c in ran:
            found = [t for t in c.tests if t["id"] == cid]
            if not found:
                row.append("-")
                continue
            t = found[0]
            v = t.get("value")
            mark = marks.get(t["outcome"], t["outcome"])
            if isinstance(v, float) and t["outcome"] in ("passed", "failed"):
                mark += f" ({v:.1e})"
            row.append(cell(mark, "outcome"))
        lines.append(_row(row))
    # One line per distinct finding: the same message on several releases is listed once.
    grouped: dict[tuple[str, str, str], list[str]] = {}
    for c in ran:
        for t in c.tests:
            if t["outcome"] == "passed":
                continue
            label = re.escape(f"{SGL_DEEP_GEMM} {c.release}") + r"(?![\w./])"
            message = re.sub(label, f"{SGL_DEEP_GEMM} <release>", str(t.get("message") or ""))
            grouped.setdefault((t["id"], t["outcome"], message), []).append(c.release)
    if grouped:
        lines += ["", "## Expected failures and findings", ""]
        for (cid, outcome, message), releases in grouped.items():
            lines.append(f"- `{cell(cid, 'case id')}` ({cell(outcome, 'outcome')}) on "
                         f"{', '.join(cell(r, 'release') for r in releases)}: {_free(short(message, 700))}")
    lines += ["", "## What the cases check", ""]
    for cid in ids:
        lines.append(f"- `{cell(cid, 'case id')}`: {_free(first[cid].get('summary') or '')}; metric: "
                     f"{_free(first[cid].get('metric'))}, tolerance {_free(first[cid].get('tolerance'))}.")
    return lines


# --- the pages, for the commands that write them and the test that keeps them current ---------------------------

@dataclass(frozen=True)
class Page:
    """A generated page: where it lives in a checkout, the command that regenerates it, and its renderer."""

    path: str
    command: str
    render: Callable[[], str]


PAGES: tuple[Page, ...] = (
    Page("docs/capabilities.md", "dgcompat table --markdown > docs/capabilities.md", capabilities_page),
    Page("docs/compatibility.md", "dgcompat pin --docs > docs/compatibility.md", compatibility_page),
    Page("docs/compatibility-gpu.md", "python -m dgcompat_conformance.gpu.runner --table", gpu_compatibility_page),
)


# --- tables the commands print ---------------------------------------------------------------------------------

def progress_line(index: int, total: int, cert: Certificate) -> str:
    """``dgcompat conform``: one line per finished release (its text folded onto one line)."""
    s = cert.summary
    width = len(str(total))
    extra = ""
    if cert.harness_error:
        extra = f"  ({flatten(cert.harness_error)[:100]})"
    elif cert.stale_xfails:
        extra = f"  ({len(cert.stale_xfails)} stale xfail entries)"
    return (f"[{index:>{width}}/{total}] {flatten(cert.release):<28} {flatten(cert.verdict):<5} "
            f"passed {s['passed']:>3}  failed {s['failed']:>3}  xfailed {s['xfailed']:>3}  "
            f"errors {s['error']:>3}  {cert.seconds or 0:6.1f}s{extra}")


def conform_table(certs: Sequence[Certificate]) -> str:
    """``dgcompat conform``'s closing table: release x passed/failed/skipped/xfailed/xpassed/errors/verdict, one line
    per release."""
    head = ("release", "binding", "passed", "failed", "skipped", "xfailed", "xpassed", "errors", "seconds", "verdict")
    rows = [(c.release, c.binding or "-", c.summary["passed"], c.summary["failed"], c.summary["skipped"],
             c.summary["xfailed"], c.summary["xpassed"], c.summary["error"], f"{c.seconds or 0:.1f}", c.verdict)
            for c in certs]
    return "\n".join(_text_table(head, rows, right=frozenset(range(2, 9)), rule=True))


def gpu_run_table(certs: Sequence[Certificate], paths: Mapping[str, str]) -> str:
    """The GPU runner's end-of-run table: one line per subject (``paths``: release -> certificate file written)."""
    head = ("release", "subject", "verdict", "pass", "fail", "hang", "err", "xfail", "not run", "s", "certificate")
    rows = [(c.release, c.subject or "-", short(c.verdict, 60), c.summary["passed"], c.summary["failed"],
             c.summary["hang"], c.summary["error"], c.summary["xfail"], len(c.not_run or ()), f"{c.seconds or 0:.0f}",
             paths.get(c.release, "not written")) for c in certs]
    return "\n".join(_text_table(head, rows))


@dataclass(frozen=True)
class UpstreamRow:
    """One function of DeepGEMM's own tests: its id, the outcome run raw and through dgcompat, and a note."""

    test_id: str
    raw: str
    dgcompat: str
    note: str


def upstream_table(rows: Sequence[UpstreamRow]) -> str:
    """The upstream-tests runner's table (Markdown): one row per test function."""
    lines = ["| test function | raw | dgcompat | note |", "|---|---|---|---|"]
    for r in rows:
        lines.append(_row([f"`{cell(r.test_id, 'test id')}`", cell(r.raw, "raw outcome"),
                           cell(r.dgcompat, "dgcompat outcome"), _free(short(r.note, 240))]))
    return "\n".join(lines)
