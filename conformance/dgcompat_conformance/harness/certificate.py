"""Conformance certificates: one JSON document per release run, and the summary table.

A certificate records what was certified (release, distribution, binding), with what (dgcompat,
torch, python, platform, device or ``"cpu-tier"``, architecture), when, and every test's outcome.
Its ``summary`` counts always equal the counts of the ``tests`` list (:func:`check` verifies it).
"""

from __future__ import annotations

import datetime as _dt
import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable

__all__ = ["SCHEMA", "OUTCOMES", "build", "summarize", "verdict", "check", "write", "render_table", "progress_line"]

SCHEMA = "dgcompat-conformance-certificate/1"
OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")


def summarize(tests: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Counts per outcome (every outcome present, zeros included)."""
    counts = Counter(t["outcome"] for t in tests)
    unknown = set(counts) - set(OUTCOMES)
    if unknown:
        raise ValueError(f"unknown test outcomes {sorted(unknown)}")
    return {k: int(counts.get(k, 0)) for k in OUTCOMES}


def verdict(cert: dict[str, Any]) -> str:
    """``PASS`` (all tests passed, skipped or xfailed), ``FAIL`` (a test failed) or ``ERROR`` (no run)."""
    if cert.get("harness_error") or not cert.get("tests"):
        return "ERROR"
    s = cert["summary"]
    if s["error"] or s["failed"] or s["xpassed"]:
        return "FAIL"
    return "PASS"


def _tests(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"id": t["id"], "outcome": t["outcome"], "duration": float(t.get("duration", 0.0)),
             "message": str(t.get("message") or "")} for t in raw]


def build(child: dict[str, Any], *, release: str, distribution: str | None, wheel: dict[str, Any] | None = None,
          harness_error: str | None = None, wall_seconds: float | None = None) -> dict[str, Any]:
    """Turn a child result (see :mod:`.child`) into a certificate."""
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
    err = harness_error or child.get("harness_error")
    if err:
        cert["harness_error"] = err
        if child.get("harness_traceback"):
            cert["harness_traceback"] = child["harness_traceback"]
    cert["verdict"] = verdict(cert)
    return cert


def check(cert: dict[str, Any]) -> list[str]:
    """Problems with a certificate's consistency (empty when it is sound)."""
    problems = []
    for key in ("schema", "tier", "release", "distribution", "binding", "dgcompat_version", "torch", "python",
                "platform", "device", "arch", "timestamp", "tests", "summary"):
        if key not in cert:
            problems.append(f"missing field {key!r}")
    if cert.get("schema") != SCHEMA:
        problems.append(f"schema is {cert.get('schema')!r}, expected {SCHEMA!r}")
    try:
        counted = summarize(cert.get("tests") or [])
    except (KeyError, ValueError) as exc:
        return problems + [f"bad tests list: {exc}"]
    if cert.get("summary") != counted:
        problems.append(f"summary {cert.get('summary')} does not equal the counts of the tests list {counted}")
    ids = [t["id"] for t in cert.get("tests") or []]
    if len(ids) != len(set(ids)):
        problems.append("duplicate test ids")
    return problems


def write(cert: dict[str, Any], out_dir: Path) -> Path:
    """Write ``<out_dir>/<release>.json`` and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in cert["release"])
    path = out_dir / f"{safe}.json"
    path.write_text(json.dumps(cert, indent=1, sort_keys=False) + "\n")
    return path


def progress_line(index: int, total: int, cert: dict[str, Any]) -> str:
    s = cert["summary"]
    width = len(str(total))
    extra = ""
    if cert.get("harness_error"):
        extra = f"  ({cert['harness_error'][:100]})"
    elif cert.get("stale_xfails"):
        extra = f"  ({len(cert['stale_xfails'])} stale xfail entries)"
    return (f"[{index:>{width}}/{total}] {cert['release']:<28} {cert['verdict']:<5} "
            f"passed {s['passed']:>3}  failed {s['failed']:>3}  xfailed {s['xfailed']:>3}  "
            f"errors {s['error']:>3}  {cert.get('seconds') or 0:6.1f}s{extra}")


def render_table(certs: list[dict[str, Any]]) -> str:
    """A fixed-width table: release x passed/failed/skipped/xfailed/xpassed/errors/verdict."""
    head = ("release", "binding", "passed", "failed", "skipped", "xfailed", "xpassed", "errors", "seconds", "verdict")
    rows = []
    for c in certs:
        s = c["summary"]
        rows.append((c["release"], str(c.get("binding") or "-"), str(s["passed"]), str(s["failed"]), str(s["skipped"]),
                     str(s["xfailed"]), str(s["xpassed"]), str(s["error"]), f"{c.get('seconds') or 0:.1f}",
                     c["verdict"]))
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]

    def fmt(r: tuple[str, ...]) -> str:
        return "  ".join(v.ljust(w) if i < 2 or i == len(r) - 1 else v.rjust(w) for i, (v, w) in enumerate(zip(r, widths)))

    lines = [fmt(head), fmt(tuple("-" * w for w in widths))]
    lines += [fmt(r) for r in rows]
    return "\n".join(lines)
