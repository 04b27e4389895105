"""CPU-tier certificates: building one from a child's result.

The type, its schema, its check, the writer and the reader are :mod:`dgcompat_conformance.certificate`'s
(one for every tier).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from ..certificate import Certificate, suite_verdict, summarize

__all__ = ["build"]


def _tests(raw: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    return tuple({"id": t["id"], "outcome": t["outcome"], "duration": float(t.get("duration", 0.0)),
                  "message": str(t.get("message") or "")} for t in raw)


def build(child: dict[str, Any], *, release: str, distribution: str | None, wheel: dict[str, Any] | None = None,
          harness_error: str | None = None, wall_seconds: float | None = None,
          fingerprint: dict[str, Any] | None = None, binding: str | None = None) -> Certificate:
    """Turn a child result (see :mod:`.child`) into a certificate (``fingerprint``: the build's, when read;
    ``binding``: what the run bound, where the caller knows better than the child, e.g. ``"reference"``)."""
    env = child.get("environment") or {}
    tier = child.get("tier") or "cpu-tier"
    tests = _tests(child.get("tests") or [])
    standins = child.get("standins") or {}
    summary = summarize(tests)
    err = harness_error or child.get("harness_error") or None
    return Certificate(
        tier=tier,
        release=release,
        distribution=distribution or (child.get("dgcompat") or {}).get("distribution"),
        binding=binding or standins.get("binding") or (child.get("dgcompat") or {}).get("binding"),
        dgcompat_version=env.get("dgcompat_version"),
        torch=env.get("torch"),
        python=env.get("python"),
        platform=env.get("platform"),
        device=env.get("device") or ("cpu-tier" if tier != "gpu" else None),
        arch=env.get("arch"),
        timestamp=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        wheel=wheel,
        detected=child.get("dgcompat"),
        import_check=child.get("import"),
        tests=tests,
        summary=summary,
        stale_xfails=tuple(child.get("stale_xfails") or ()),
        standins={k: v for k, v in standins.items() if k != "calls"} or None,
        native_calls=standins.get("calls"),
        seconds=wall_seconds if wall_seconds is not None else child.get("seconds"),
        fingerprint=fingerprint,
        harness_error=err,
        harness_traceback=(child.get("harness_traceback") or None) if err else None,
        verdict=suite_verdict(summary, ran=bool(tests), harness_error=err),
    )
