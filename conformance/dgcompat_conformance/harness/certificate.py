"""CPU-tier certificates: building one from a child's result, the progress line and the summary table.

The schema, its check, the writer and the reader are :mod:`dgcompat_conformance.certificate`'s
(one for every tier); they are re-exported here for the harness.
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from .._text import flatten
from ..certificate import OUTCOMES, SCHEMA, check, summarize, verdict, write

__all__ = ["SCHEMA", "OUTCOMES", "build", "summarize", "verdict", "check", "write", "render_table", "progress_line"]


def _tests(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": t["id"], "outcome": t["outcome"], "duration": float(t.get("duration", 0.0)),
             "message": str(t.get("message") or "")} for t in raw]


def build(child: dict[str, Any], *, release: str, distribution: str | None, wheel: dict[str, Any] | None = None,
          harness_error: str | None = None, wall_seconds: float | None = None,
          fingerprint: dict[str, Any] | None = None) -> dict[str, Any]:
    """Turn a child result (see :mod:`.child`) into a certificate (``fingerprint``: the build's, when read)."""
    env = child.get("environment") or {}
    tier = child.get("tier") or "cpu-tier"
    tests = _tests(child.get("tests") or [])
    standins = child.get("standins") or {}
    binding = standins.get("binding") or (child.get("dgcompat") or {}).get("binding")
    cert: dict[str, Any] = {
        "schema": SCHEMA,
        "tier": tier,
        "release": release,
        "distribution": distribution or (child.get("dgcompat") or {}).get("distribution"),
        "binding": binding,
        "dgcompat_version": env.get("dgcompat_version"),
        "torch": env.get("torch"),
        "python": env.get("python"),
        "platform": env.get("platform"),
        "device": env.get("device") or ("cpu-tier" if tier != "gpu" else None),
        "arch": env.get("arch"),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wheel": wheel,
        "detected": child.get("dgcompat"),
        "import": child.get("import"),
        "tests": tests,
        "summary": summarize(tests),
        "stale_xfails": child.get("stale_xfails") or [],
        "standins": {k: v for k, v in standins.items() if k != "calls"} or None,
        "native_calls": standins.get("calls"),
        "seconds": wall_seconds if wall_seconds is not None else child.get("seconds"),
    }
    if fingerprint is not None:
        cert["fingerprint"] = fingerprint
    err = harness_error or child.get("harness_error")
    if err:
        cert["harness_error"] = err
        if child.get("harness_traceback"):
            cert["harness_traceback"] = child["harness_traceback"]
    cert["verdict"] = verdict(cert)
    return cert


def progress_line(index: int, total: int, cert: dict[str, Any]) -> str:
    """One line per finished release (its text folded onto one line by :func:`~dgcompat_conformance._text.flatten`)."""
    s = cert["summary"]
    width = len(str(total))
    extra = ""
    if cert.get("harness_error"):
        extra = f"  ({flatten(cert['harness_error'])[:100]})"
    elif cert.get("stale_xfails"):
        extra = f"  ({len(cert['stale_xfails'])} stale xfail entries)"
    return (f"[{index:>{width}}/{total}] {flatten(cert['release']):<28} {flatten(cert['verdict']):<5} "
            f"passed {s['passed']:>3}  failed {s['failed']:>3}  xfailed {s['xfailed']:>3}  "
            f"errors {s['error']:>3}  {cert.get('seconds') or 0:6.1f}s{extra}")


def render_table(certs: list[dict[str, Any]]) -> str:
    """A fixed-width table: release x passed/failed/skipped/xfailed/xpassed/errors/verdict (one line per release:
    every cell folded onto one line by :func:`~dgcompat_conformance._text.flatten`)."""
    head = ("release", "binding", "passed", "failed", "skipped", "xfailed", "xpassed", "errors", "seconds", "verdict")
    rows = []
    for c in certs:
        s = c["summary"]
        rows.append(tuple(flatten(v) for v in (
            c["release"], c.get("binding") or "-", s["passed"], s["failed"], s["skipped"], s["xfailed"], s["xpassed"],
            s["error"], f"{c.get('seconds') or 0:.1f}", c["verdict"])))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]

    def fmt(r: tuple[str, ...]) -> str:
        return "  ".join(v.ljust(w) if i < 2 or i == len(r) - 1 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))

    lines = [fmt(head), fmt(tuple("-" * w for w in widths))]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)
