"""Conformance certificates: the one schema, its check, its writer and its reader (every tier).

A certificate is one JSON object per release run. The CPU tier and ``dgcompat conform`` on an
installed build run the pytest suite (outcomes :data:`SUITE_OUTCOMES`, verdicts ``PASS`` /
``FAIL`` / ``ERROR``); the GPU runner runs the GPU cases (outcomes :data:`CASE_OUTCOMES`, verdicts
``certified`` / ``failed`` / ``incompatible: <why>`` / ``incomplete: <why>`` (a deadline cut the run
short; the cases that ran are kept) / ``abi ok (cases not run)``, plus the CUDA,
driver and ABI fields). Which of the two a certificate holds is read from its ``summary`` keys,
which always equal the counts of its ``tests`` list.

Every certificate is checked (:func:`check`) before it is written (:func:`write`, atomically) and
when it is read (:func:`load`, :func:`load_folder`): anything read from disk is validated before a
field is used, and the strings that end up in requirement files and docs are single printable lines.
"""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ._paths import source_commit
from ._text import line_problem

__all__ = [
    "SCHEMA", "SUITE_OUTCOMES", "CASE_OUTCOMES", "OUTCOMES", "PASSING_VERDICTS", "CertificateError", "Certificate",
    "summarize", "verdict", "check", "write", "file_name", "load", "load_folder", "committed", "COMMITTED",
]

SCHEMA = "dgcompat-conformance-certificate/1"

#: Outcomes of the pytest suite (CPU tier, ``dgcompat conform`` on an installed build).
SUITE_OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")
#: Outcomes of the GPU cases (:mod:`dgcompat_conformance.gpu.runner`).
CASE_OUTCOMES = ("passed", "failed", "hang", "error", "xfail")
#: Kept for callers of the suite's vocabulary.
OUTCOMES = SUITE_OUTCOMES

SUITE_VERDICTS = frozenset({"PASS", "FAIL", "ERROR"})
CASE_VERDICTS = frozenset({"certified", "failed", "abi ok (cases not run)"})
PASSING_VERDICTS = frozenset({"PASS", "certified"})

TIERS = frozenset({"cpu-tier", "gpu", "reference"})

#: The certificates shipped with the package.
COMMITTED = Path(__file__).resolve().parent / "certificates"

_COMMON = ("schema", "tier", "release", "distribution", "binding", "dgcompat_version", "torch", "python",
           "platform", "device", "arch", "timestamp", "tests", "summary", "verdict")
_CASE_ONLY = ("cuda", "driver", "abi")
# Fields printed into requirement lines, docs and tables: one printable line each (the one check of
# dgcompat_conformance._text, which knows every character a reader takes for a line break).
_LINE_FIELDS = ("tier", "release", "distribution", "binding", "dgcompat_version", "dgcompat_commit", "torch", "python",
                "platform",
                "arch", "timestamp", "verdict", "cuda", "driver")
_LINE_LIMIT = 300
_RELEASE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,99}")
_DIST = re.compile(r"[a-z0-9]+(?:-[a-z0-9]+)*")
_SURFACE_ID = re.compile(r"(?:[0-9a-f]{12})?")
_FINGERPRINT_PARTS = ("python", "native", "asserts", "headers")


class CertificateError(ValueError):
    """A certificate that is not sound: unreadable, of another schema, or inconsistent."""


def summarize(tests: Iterable[Mapping[str, Any]], outcomes: tuple[str, ...] = SUITE_OUTCOMES) -> dict[str, int]:
    """Counts per outcome (every outcome of ``outcomes`` present, zeros included)."""
    counts = Counter(t["outcome"] for t in tests)
    unknown = set(counts) - set(outcomes)
    if unknown:
        raise ValueError(f"unknown test outcomes {sorted(map(str, unknown))}")
    return {k: int(counts.get(k, 0)) for k in outcomes}


def verdict(cert: Mapping[str, Any]) -> str:
    """Suite runs: ``PASS`` (all tests passed, skipped or xfailed), ``FAIL`` (a test failed) or ``ERROR`` (no run)."""
    if cert.get("harness_error") or not cert.get("tests"):
        return "ERROR"
    s = cert["summary"]
    if s["error"] or s["failed"] or s["xpassed"]:
        return "FAIL"
    return "PASS"


def _outcomes_of(summary: Any) -> tuple[str, ...] | None:
    if not isinstance(summary, dict):
        return None
    keys = set(summary)
    for vocabulary in (SUITE_OUTCOMES, CASE_OUTCOMES):
        if keys == set(vocabulary):
            return vocabulary
    return None


def _line_problems(cert: Mapping[str, Any]) -> list[str]:
    problems = []
    for key in _LINE_FIELDS:
        value = cert.get(key)
        if value is None:
            continue
        if not isinstance(value, str):
            problems.append(f"{key} is {type(value).__name__}, expected a string")
        elif (why := line_problem(value, _LINE_LIMIT)) is not None:
            problems.append(f"{key} {value[:60]!r} is not one printable line: it {why}")
    release = cert.get("release")
    if isinstance(release, str) and not _RELEASE.fullmatch(release):
        problems.append(f"release {release[:60]!r} is not a release id")
    dist = cert.get("distribution")
    if isinstance(dist, str) and not _DIST.fullmatch(dist):
        problems.append(f"distribution {dist[:60]!r} is not a normalized distribution name")
    device = cert.get("device")
    if isinstance(device, dict):
        for key, value in device.items():
            if isinstance(value, str) and (why := line_problem(value, _LINE_LIMIT)) is not None:
                problems.append(f"device.{key} {value[:60]!r} is not one printable line: it {why}")
            elif not isinstance(value, (str, int, float)) or isinstance(value, bool):
                problems.append(f"device.{key} is {type(value).__name__}, expected a string or a number")
    elif device is not None and line_problem(device, _LINE_LIMIT) is not None:
        problems.append(f"device {str(device)[:60]!r} is neither one printable line nor an object")
    wheel = cert.get("wheel")
    if wheel is not None:
        if not isinstance(wheel, dict):
            problems.append(f"wheel is {type(wheel).__name__}, expected an object")
        else:
            for key in ("file", "sha256", "apache_tvm_ffi"):
                value = wheel.get(key)
                if value is not None and line_problem(value, _LINE_LIMIT) is not None:
                    problems.append(f"wheel.{key} is not one printable line")
    return problems


def _fingerprint_problems(cert: Mapping[str, Any]) -> list[str]:
    """A recorded fingerprint (:mod:`dgcompat_conformance.surface.fingerprint`) and surface id are short hex ids."""
    problems = []
    fp = cert.get("fingerprint")
    if fp is not None:
        if not isinstance(fp, dict):
            return [f"fingerprint is {type(fp).__name__}, expected an object"]
        ids = {"id": fp.get("id")}
        ids.update({p: (fp.get(p) or {}).get("id") if isinstance(fp.get(p), dict) else fp.get(p)
                    for p in _FINGERPRINT_PARTS})
        problems += [f"fingerprint {k} {str(v)[:20]!r} is not a 12-digit hex id" for k, v in ids.items()
                     if not (isinstance(v, str) and _SURFACE_ID.fullmatch(v))]
    detected = cert.get("detected")
    surface = detected.get("surface") if isinstance(detected, dict) else None
    if surface is not None and not (isinstance(surface, str) and _SURFACE_ID.fullmatch(surface)):
        problems.append(f"detected.surface {str(surface)[:20]!r} is not a 12-digit hex id")
    return problems


def _test_problems(tests: Any, outcomes: tuple[str, ...] | None) -> list[str]:
    if not isinstance(tests, list):
        return [f"tests is {type(tests).__name__}, expected a list"]
    problems = []
    for i, t in enumerate(tests):
        if not isinstance(t, dict):
            problems.append(f"tests[{i}] is {type(t).__name__}, expected an object")
        elif not isinstance(t.get("id"), str):
            problems.append(f"tests[{i}] has no string id")
        elif (why := line_problem(t["id"], 1000)) is not None:
            problems.append(f"tests[{i}] id {t['id'][:60]!r} is not one printable line: it {why}")
        elif outcomes is not None and t.get("outcome") not in outcomes:
            problems.append(f"tests[{i}] ({t['id'][:80]}) has outcome {t.get('outcome')!r}, expected one of "
                            f"{', '.join(outcomes)}")
        elif not isinstance(t.get("duration", 0.0), (int, float)) or isinstance(t.get("duration"), bool):
            problems.append(f"tests[{i}] ({t['id'][:80]}) has a non-numeric duration")
        elif not isinstance(t.get("message", ""), str):
            problems.append(f"tests[{i}] ({t['id'][:80]}) has a non-string message")
    if problems:
        return problems
    ids = [t["id"] for t in tests]
    if len(ids) != len(set(ids)):
        problems.append("duplicate test ids")
    return problems


def check(cert: Any) -> list[str]:
    """Problems with a certificate (empty when it is sound): shape, types, vocabulary, consistency."""
    if not isinstance(cert, dict):
        return [f"the document is a JSON {type(cert).__name__}, expected an object"]
    problems = [f"missing field {key!r}" for key in _COMMON if key not in cert]
    if cert.get("schema") != SCHEMA:
        problems.append(f"schema is {str(cert.get('schema'))[:60]!r}, expected {SCHEMA!r}")
    if "tier" in cert and cert.get("tier") not in TIERS:
        problems.append(f"tier is {str(cert.get('tier'))[:60]!r}, expected one of {', '.join(sorted(TIERS))}")
    problems += _line_problems(cert)
    problems += _fingerprint_problems(cert)
    summary = cert.get("summary")
    outcomes = _outcomes_of(summary)
    if "summary" in cert and outcomes is None:
        problems.append(f"summary is not a count per outcome (keys {', '.join(SUITE_OUTCOMES)} for the suite, "
                        f"{', '.join(CASE_OUTCOMES)} for the GPU cases)")
    elif isinstance(summary, dict):
        bad = [k for k, v in summary.items() if not isinstance(v, int) or isinstance(v, bool) or v < 0]
        if bad:
            problems.append(f"summary counts {bad} are not non-negative integers")
    test_problems = _test_problems(cert.get("tests", []), outcomes)
    problems += test_problems
    if outcomes is None or test_problems or problems:
        return problems
    counted = summarize(cert["tests"], outcomes)
    if summary != counted:
        problems.append(f"summary {summary} does not equal the counts of the tests list {counted}")
    text = cert.get("verdict")
    if outcomes is SUITE_OUTCOMES:
        if text not in SUITE_VERDICTS:
            problems.append(f"verdict {text!r} is not one of {', '.join(sorted(SUITE_VERDICTS))}")
        elif not problems and text != verdict(cert):
            problems.append(f"verdict {text!r} contradicts the tests (they give {verdict(cert)!r})")
    else:
        if not (text in CASE_VERDICTS or (isinstance(text, str) and text.startswith(("incompatible: ", "incomplete: ")))):
            problems.append(f"verdict {text!r} is not one of {', '.join(sorted(CASE_VERDICTS))}, 'incompatible: ...' "
                            f"or 'incomplete: ...'")
        elif text == "certified" and (not cert["tests"] or counted["failed"] or counted["error"] or counted["hang"]):
            problems.append("verdict 'certified' contradicts the tests")
        problems += [f"missing field {key!r}" for key in _CASE_ONLY if key not in cert]
    return problems


def file_name(cert: Mapping[str, Any]) -> str:
    """``gpu-<release>.json`` for the GPU runner's certificates, ``<release>.json`` otherwise."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in str(cert["release"])).lstrip(".") or "_"
    prefix = "gpu-" if _outcomes_of(cert.get("summary")) is CASE_OUTCOMES else ""
    return f"{prefix}{safe}.json"


def write(cert: Mapping[str, Any], out_dir: Path) -> Path:
    """Check ``cert``, then write it to ``<out_dir>/<file_name>`` atomically; the path.

    Raises :class:`CertificateError` for an unsound certificate (nothing is written) and
    :class:`OSError` when ``out_dir`` cannot be written.
    """
    if not cert.get("dgcompat_commit"):  # the code that made it, beside dgcompat_version
        cert = {**cert, "dgcompat_commit": source_commit()}
    problems = check(cert)
    if problems:
        raise CertificateError(f"refusing to write an unsound certificate for {str(cert.get('release'))[:60]!r}: "
                               + "; ".join(problems[:5]))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name(cert)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(cert, indent=1, default=str) + "\n", "utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


@dataclass(frozen=True)
class Certificate:
    """A certificate read from disk and checked: the fields the tools use, typed, and the whole document."""

    path: Path | None
    tier: str
    release: str
    distribution: str | None
    verdict: str
    summary: Mapping[str, int]
    device: str | None
    """The device's name (GPU runs) or ``"cpu-tier"``."""
    timestamp: str
    torch: str | None
    wheel_file: str | None
    wheel_sha256: str | None
    data: Mapping[str, Any]

    @property
    def passing(self) -> bool:
        """True when the run certifies the release (``PASS`` or ``certified``)."""
        return self.verdict in PASSING_VERDICTS

    @property
    def case_run(self) -> bool:
        """True for the GPU runner's certificates (the GPU cases, with CUDA, driver and ABI fields)."""
        return set(self.summary) == set(CASE_OUTCOMES)

    @classmethod
    def from_document(cls, doc: Any, path: Path | None = None) -> Certificate:
        """Check ``doc`` and wrap it; :class:`CertificateError` names ``path`` and every problem."""
        where = str(path) if path is not None else "certificate"
        problems = check(doc)
        if problems:
            raise CertificateError(f"{where}: not a sound certificate: " + "; ".join(problems[:6]))
        device = doc.get("device")
        wheel = doc.get("wheel") or {}
        return cls(path=path, tier=doc["tier"], release=doc["release"], distribution=doc.get("distribution"),
                   verdict=doc["verdict"], summary=dict(doc["summary"]),
                   device=str(device.get("name")) if isinstance(device, dict) else device,
                   timestamp=str(doc["timestamp"]), torch=doc.get("torch"), wheel_file=wheel.get("file"),
                   wheel_sha256=wheel.get("sha256"), data=doc)


def load(path: Path) -> Certificate:
    """Read and check one certificate file; :class:`CertificateError` (naming the file) when it is not sound."""
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CertificateError(f"{path}: unreadable certificate: {exc}") from exc
    return Certificate.from_document(doc, path)


def load_folder(folder: Path, pattern: str = "*.json", *,
                unsound: list[CertificateError] | None = None) -> list[Certificate]:
    """Every certificate in ``folder`` matching ``pattern``, newest first.

    An unsound file raises :class:`CertificateError`, or, where ``unsound`` is given, is left out
    and its error appended there.
    """
    if not folder.is_dir():
        return []
    certs = []
    for path in sorted(folder.glob(pattern)):
        try:
            certs.append(load(path))
        except CertificateError as exc:
            if unsound is None:
                raise
            unsound.append(exc)
    certs.sort(key=lambda c: c.timestamp, reverse=True)
    return certs


def committed() -> list[Certificate]:
    """The certificates shipped with the package (:data:`COMMITTED`), newest first."""
    return load_folder(COMMITTED)
