"""The GPU compatibility table: docs/compatibility-gpu.md rendered from the GPU certificates, and publishing them.

:func:`render_markdown` turns certificates into the page (a release table, a case matrix, the
findings, what each case checks); :func:`write_docs` regenerates it from a certificate folder (the
shipped one by default) and :func:`publish` copies a run's certificates into the shipped folder first.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Sequence

from .. import certificate
from .._paths import wing_root
from .._text import UnsafeTextError, cell
from ..dists import SGL_DEEP_GEMM
from .cases import CASES
from .certify import TIER, summarize, write_certificate
from .output import say, short

__all__ = ["DEFAULT_DOCS", "load_certificates", "render_markdown", "publish", "write_docs"]

DEFAULT_DOCS = wing_root().parent / "docs" / "compatibility-gpu.md"  # in a checkout


def _version_key(release: str) -> tuple[Any, ...]:
    try:
        from packaging.version import Version

        return (0, Version(release))
    except Exception:
        return (1, release)


def load_certificates(out_dir: Path = certificate.COMMITTED) -> list[dict[str, Any]]:
    """Every ``gpu-*.json`` certificate in ``out_dir``, checked, oldest release first.

    Raises :class:`~dgcompat_conformance.certificate.CertificateError` naming an unsound file.
    """
    certs = [dict(c.data) for c in certificate.load_folder(out_dir, "gpu-*.json") if c.tier == TIER]
    return sorted(certs, key=lambda c: _version_key(str(c.get("release"))))


def _cell(text: Any) -> str:
    """Free text (a message, a summary, an ABI detail) for the page: one line, ``|`` and ``<!--`` defused."""
    return cell(text, "text", free=True)


def render_markdown(certs: Sequence[dict[str, Any]]) -> str:
    """docs/compatibility-gpu.md from the certificates (a release table, a case matrix, the notes)."""
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
    envs = sorted({(json.dumps(c.get("device"), sort_keys=True), c.get("driver"), c.get("cuda"), c.get("torch"),
                    c.get("python")) for c in certs})
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
        s = c.get("summary") or summarize(c.get("tests") or [])
        abi = c.get("abi") or {}
        abi_text = abi.get("verdict") or ("ok" if abi.get("ok") else "-")
        forced = abi.get("with_mismatch_allowed")
        if forced:
            why = ""
            if forced.get("load") and not forced["load"].get("ok"):
                # The innermost error is the dynamic linker's (e.g. an undefined torch symbol).
                why = str(forced["load"].get("error") or "").split(" <- ")[-1]
            elif forced.get("calls"):
                bad = [x for x in forced["calls"] if not x.get("ok")]
                why = f"{bad[0]['name']}: " + str(bad[0]["detail"]).split("rejected the call: ")[-1] if bad else ""
            abi_text += f"; imported anyway: {forced.get('verdict')}" + (f" (`{short(why, 220)}`)" if why else "")
        lines.append("| " + " | ".join([cell(c.get("release"), "release"), cell(c.get("verdict"), "verdict"),
                                        *(_cell(s[k]) for k in ("passed", "failed", "hang", "error", "xfail")),
                                        _cell(abi_text), cell((c.get("timestamp") or "")[:10], "timestamp")]) + " |")
    ran = [c for c in certs if c.get("tests")]
    if ran:
        ids: list[str] = []
        for c in ran:
            for t in c["tests"]:
                if t["id"] not in ids:
                    ids.append(t["id"])
        marks = {"passed": "pass", "failed": "**FAIL**", "hang": "**HANG**", "error": "**ERROR**", "xfail": "xfail"}
        lines += ["", "## Cases", "", "| case | metric / tolerance | " + " | ".join(cell(c["release"], "release") for c in ran) + " |",
                  "|---|---|" + "---|" * len(ran)]
        for cid in ids:
            first = next(t for c in ran for t in c["tests"] if t["id"] == cid)
            tol = first.get("tolerance")
            metric = "exact" if str(first.get("metric", "")).startswith("exact:") else (
                f"diff <= {tol:g}" if isinstance(tol, (int, float)) else "-")
            row = [f"`{cell(cid, 'case id')}`", metric]
            for c in ran:
                t = next((t for t in c["tests"] if t["id"] == cid), None)
                if t is None:
                    row.append("-")
                    continue
                v = t.get("value")
                mark = marks.get(t["outcome"], t["outcome"])
                if isinstance(v, float) and t["outcome"] in ("passed", "failed"):
                    mark += f" ({v:.1e})"
                row.append(mark)
            lines.append("| " + " | ".join(row) + " |")
        # One line per distinct finding: the same message on several releases is listed once.
        grouped: dict[tuple[str, str, str], list[str]] = {}
        for c in ran:
            for t in c["tests"]:
                if t["outcome"] == "passed":
                    continue
                label = re.escape(f"{SGL_DEEP_GEMM} {c['release']}") + r"(?![\w./])"
                message = re.sub(label, f"{SGL_DEEP_GEMM} <release>", str(t.get("message") or ""))
                grouped.setdefault((t["id"], t["outcome"], message), []).append(c["release"])
        if grouped:
            lines += ["", "## Expected failures and findings", ""]
            for (cid, outcome, message), releases in grouped.items():
                lines.append(f"- `{cell(cid, 'case id')}` ({outcome}) on {', '.join(cell(r, 'release') for r in releases)}: "
                             f"{_cell(short(message, 700))}")
        lines += ["", "## What the cases check", ""]
        for cid in ids:
            first = next(t for c in ran for t in c["tests"] if t["id"] == cid)
            summary = first.get("summary") or (CASES[cid].summary if cid in CASES else "")
            lines.append(f"- `{cell(cid, 'case id')}`: {_cell(summary)}; metric: {_cell(first.get('metric'))}, "
                         f"tolerance {_cell(first.get('tolerance'))}.")
    text = "\n".join(lines) + "\n"
    if text.splitlines() != lines:  # every field above went through cell(); this is the page as a whole
        raise UnsafeTextError("docs/compatibility-gpu.md would not split back into the lines rendered")
    return text


def publish(certs: Sequence[dict[str, Any]], out_dir: Path, docs: Path = DEFAULT_DOCS) -> list[Path]:
    """Copy the certificates of ``certs`` written to ``out_dir`` into the shipped folder, then regenerate ``docs``.

    Prints and returns every file written. A certificate not written (or not passing the schema) is not copied.
    """
    written: list[Path] = []
    for cert in certs:
        source = out_dir / certificate.file_name(cert)
        if not source.is_file():
            continue
        written.append(write_certificate(dict(certificate.load(source).data), certificate.COMMITTED))
        say(f"published {written[-1]}")
    written.append(write_docs(certificate.COMMITTED, docs))
    say(f"wrote {written[-1]}")
    return written


def write_docs(out_dir: Path = certificate.COMMITTED, docs: Path = DEFAULT_DOCS) -> Path:
    """Regenerate the compatibility table from the certificates in ``out_dir`` (the shipped ones by default)."""
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(render_markdown(load_certificates(out_dir)))
    return docs
