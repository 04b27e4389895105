"""Conformance certificates: the one type, its schema, its check, its writer and its reader (every tier).

A certificate is one :class:`Certificate` per release run, written as one JSON object. The CPU tier and
``dgcompat conform`` on an installed build run the pytest suite (outcomes :data:`SUITE_OUTCOMES`, verdicts
``PASS`` / ``FAIL`` / ``ERROR``); the GPU runner runs the GPU cases (outcomes :data:`CASE_OUTCOMES`, verdicts
``certified`` / ``failed`` / ``incompatible: <why>`` / ``incomplete: <why>`` (a deadline cut the run
short; the cases that ran are kept) / ``abi ok (cases not run)``, plus the CUDA,
driver and ABI fields). Which of the two a certificate holds is read from its ``summary`` keys,
which always equal the counts of its ``tests`` list.

The builders (the CPU tier's :func:`dgcompat_conformance.harness.certificate.build`, the GPU tier's
:func:`dgcompat_conformance.gpu.certify.certify`) return a :class:`Certificate`; :meth:`Certificate.to_json`
is the document written and :meth:`Certificate.from_json` reads one back. Every certificate is checked
(:func:`check`) before it is written (:func:`write`, atomically, with the dgcompat commit that made it) and
when it is read (:func:`load`, :func:`load_folder`): anything read from disk is validated before a field is
used, a field the schema does not name is refused (it would be lost on the way back), and the strings that
end up in requirement files and docs are single printable lines.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import dgcompat
from dgcompat._tooling import env_text

from ._text import line_problem

__all__ = [
    "SCHEMA", "SUITE_OUTCOMES", "CASE_OUTCOMES", "PASSING_VERDICTS", "FIELDS", "CertificateError", "Certificate",
    "summarize", "suite_verdict", "check", "source_commit", "write", "file_name", "load", "load_folder", "committed", "COMMITTED",
]

SCHEMA = "dgcompat-conformance-certificate/1"

#: Outcomes of the pytest suite (CPU tier, ``dgcompat conform`` on an installed build).
SUITE_OUTCOMES = ("passed", "failed", "skipped", "xfailed", "xpassed", "error")
#: Outcomes of the GPU cases (:mod:`dgcompat_conformance.gpu.runner`).
CASE_OUTCOMES = ("passed", "failed", "hang", "error", "xfail")

SUITE_VERDICTS = frozenset({"PASS", "FAIL", "ERROR"})
CASE_VERDICTS = frozenset({"certified", "failed", "abi ok (cases not run)"})
PASSING_VERDICTS = frozenset({"PASS", "certified"})

TIERS = frozenset({"cpu-tier", "gpu", "reference"})

#: The certificates shipped with the package.
COMMITTED = Path(__file__).resolve().parent / "certificates"

# The fields of a suite run and of a GPU-case run, in the order they are written. A field in brackets is written
# only when it has a value; the others always (null included), as the shipped certificates hold them.
_SUITE_ORDER = ("schema", "tier", "release", "distribution", "binding", "dgcompat_version", "torch", "python",
                "platform", "device", "arch", "timestamp", "wheel", "detected", "import", "tests", "summary",
                "stale_xfails", "standins", "native_calls", "seconds", "[fingerprint]", "[harness_error]",
                "[harness_traceback]", "verdict", "[dgcompat_commit]")
_CASE_ORDER = ("schema", "tier", "release", "distribution", "binding", "dgcompat_version", "torch", "cuda", "driver",
               "python", "platform", "device", "arch", "timestamp", "wheel", "abi", "verdict", "tests", "[site]",
               "[folder]", "[detected]", "[fingerprint]", "[subject]", "[not_run]", "[runner_error]", "summary",
               "seconds", "[note]", "[dgcompat_commit]")

#: Every field of the schema and its JSON type: ``str``, ``object``, ``list`` (of objects), ``number`` or, for
#: ``device``, ``str-or-object``; each may be null except ``schema``, ``tier``, ``release``, ``timestamp``,
#: ``tests``, ``summary`` and ``verdict``.
FIELDS: Mapping[str, str] = {
    "schema": "str", "tier": "str", "release": "str", "distribution": "str", "binding": "str",
    "dgcompat_version": "str", "dgcompat_commit": "str", "torch": "str", "cuda": "str", "driver": "str",
    "python": "str", "platform": "str", "device": "str-or-object", "arch": "str", "timestamp": "str",
    "wheel": "object", "site": "object", "folder": "object", "detected": "object", "fingerprint": "object",
    "subject": "str", "import": "object", "abi": "object", "tests": "list", "summary": "object",
    "stale_xfails": "list", "standins": "object", "native_calls": "object", "not_run": "list", "seconds": "number",
    "harness_error": "str", "harness_traceback": "str", "runner_error": "str", "note": "str", "verdict": "str",
}
_NOT_NULL = ("schema", "tier", "release", "timestamp", "tests", "summary", "verdict")
# The attribute of a field whose JSON name is a Python keyword.
_ATTRIBUTE = {"import": "import_check"}

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


def suite_verdict(summary: Mapping[str, int], *, ran: bool, harness_error: str | None = None) -> str:
    """Suite runs: ``PASS`` (all tests passed, skipped or xfailed), ``FAIL`` (a test failed) or ``ERROR`` (no run:
    nothing ``ran``, or the harness failed)."""
    if harness_error or not ran:
        return "ERROR"
    if summary["error"] or summary["failed"] or summary["xpassed"]:
        return "FAIL"
    return "PASS"


def _plain(value: Any) -> Any:
    """``value`` as fresh JSON containers (objects as dicts, arrays as lists), sharing nothing with the original."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


@dataclass(frozen=True)
class Certificate:
    """One release run, as written: the schema's fields, typed (:data:`FIELDS`; ``import`` is :attr:`import_check`).

    JSON objects are mappings and JSON arrays tuples of mappings; ``device`` is the device's name (``"cpu-tier"``)
    or, on the GPU tier, an object (``name``, ``sm``, ``num_sms``, ``memory_gib``). Building one checks nothing:
    :func:`check` does, and :func:`write` and :meth:`from_json` refuse what it finds unsound. ``path`` is where
    it was read from (not a field of the document).
    """

    tier: str
    release: str
    distribution: str | None
    binding: str | None
    dgcompat_version: str | None
    torch: str | None
    python: str | None
    platform: str | None
    device: str | Mapping[str, Any] | None
    arch: str | None
    timestamp: str
    tests: tuple[Mapping[str, Any], ...]
    summary: Mapping[str, int]
    verdict: str
    schema: str = SCHEMA
    # GPU-case runs
    cuda: str | None = None
    driver: str | None = None
    abi: Mapping[str, Any] | None = None
    # what ran
    wheel: Mapping[str, Any] | None = None
    site: Mapping[str, Any] | None = None
    folder: Mapping[str, Any] | None = None
    subject: str | None = None
    detected: Mapping[str, Any] | None = None
    fingerprint: Mapping[str, Any] | None = None
    # suite runs (the CPU tier's child)
    import_check: Mapping[str, Any] | None = None
    stale_xfails: tuple[Mapping[str, Any], ...] | None = None
    standins: Mapping[str, Any] | None = None
    native_calls: Mapping[str, Any] | None = None
    # how the run went
    not_run: tuple[Mapping[str, Any], ...] | None = None
    seconds: float | None = None
    harness_error: str | None = None
    harness_traceback: str | None = None
    runner_error: str | None = None
    note: str | None = None
    dgcompat_commit: str | None = None
    path: Path | None = field(default=None, compare=False)

    @property
    def case_run(self) -> bool:
        """True for the GPU runner's certificates (the GPU cases, with CUDA, driver and ABI fields)."""
        return set(self.summary) == set(CASE_OUTCOMES)

    @property
    def passing(self) -> bool:
        """True when the run certifies the release (``PASS`` or ``certified``)."""
        return self.verdict in PASSING_VERDICTS

    @property
    def device_name(self) -> str | None:
        """The device's name (GPU runs) or ``"cpu-tier"``."""
        return str(self.device.get("name")) if isinstance(self.device, Mapping) else self.device

    @property
    def wheel_file(self) -> str | None:
        """The file name of the wheel that ran, where one did."""
        return None if self.wheel is None else self.wheel.get("file")

    @property
    def wheel_sha256(self) -> str | None:
        """The sha256 of that wheel."""
        return None if self.wheel is None else self.wheel.get("sha256")

    def to_json(self) -> dict[str, Any]:
        """The document :func:`write` writes: every field in the schema's order (fresh JSON containers)."""
        out: dict[str, Any] = {}
        order = _CASE_ORDER if self.case_run else _SUITE_ORDER
        # A field the other kind of run has (a GPU field on a suite run) is written after the kind's own ones.
        rest = tuple(f"[{k}]" for k in FIELDS if f"[{k}]" not in order and k not in order)
        for key in order + rest:
            optional = key.startswith("[")
            key = key.strip("[]")
            value = getattr(self, _ATTRIBUTE.get(key, key))
            if value is not None or not optional:
                out[key] = _plain(value)
        return out

    @classmethod
    def from_json(cls, doc: Any, path: Path | None = None) -> Certificate:
        """Check ``doc`` and read it; :class:`CertificateError` names ``path`` and every problem."""
        where = str(path) if path is not None else "certificate"
        problems = check(doc)
        if problems:
            raise CertificateError(f"{where}: an unsound certificate: " + "; ".join(problems[:6]))
        values = {_ATTRIBUTE.get(k, k): _plain(v) for k, v in doc.items()}
        for key in ("tests", "stale_xfails", "not_run"):
            if values.get(key) is not None:
                values[key] = tuple(values[key])
        return cls(**values, path=path)


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


def _type_problems(cert: Mapping[str, Any]) -> list[str]:
    """Fields the schema does not name, and fields whose JSON type is not the schema's (:data:`FIELDS`)."""
    problems = [f"unknown field {str(key)[:40]!r}" for key in cert if key not in FIELDS]
    for key, kind in FIELDS.items():
        if key not in cert:
            continue
        value = cert[key]
        if value is None:
            if key in _NOT_NULL:
                problems.append(f"{key} is null")
            continue
        fits = {"str": isinstance(value, str), "object": isinstance(value, dict),
                "str-or-object": isinstance(value, (str, dict)),
                "list": isinstance(value, list) and all(isinstance(v, dict) for v in value),
                "number": isinstance(value, (int, float)) and not isinstance(value, bool)}[kind]
        if not fits:
            want = {"str": "a string", "object": "an object", "str-or-object": "a string or an object",
                    "list": "a list of objects", "number": "a number"}[kind]
            problems.append(f"{key} is {type(value).__name__}, expected {want}")
    return problems


def check(cert: Certificate | Any) -> list[str]:
    """Problems with a certificate or a certificate document (empty when it is sound): shape, types,
    vocabulary, consistency."""
    if isinstance(cert, Certificate):
        return check(cert.to_json())
    if not isinstance(cert, dict):
        return [f"the document is a JSON {type(cert).__name__}, expected an object"]
    problems = [f"missing field {key!r}" for key in _COMMON if key not in cert]
    problems += _type_problems(cert)
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
    assert isinstance(summary, dict)  # outcomes were read from it
    counted = summarize(cert["tests"], outcomes)
    if summary != counted:
        problems.append(f"summary {summary} does not equal the counts of the tests list {counted}")
    text = cert.get("verdict")
    if outcomes is SUITE_OUTCOMES:
        if text not in SUITE_VERDICTS:
            problems.append(f"verdict {text!r} is not one of {', '.join(sorted(SUITE_VERDICTS))}")
        elif not problems and text != (given := suite_verdict(summary, ran=bool(cert["tests"]),
                                                                harness_error=cert.get("harness_error"))):
            problems.append(f"verdict {text!r} contradicts the tests (they give {given!r})")
    else:
        if not (text in CASE_VERDICTS or (isinstance(text, str) and text.startswith(("incompatible: ", "incomplete: ")))):
            problems.append(f"verdict {text!r} is not one of {', '.join(sorted(CASE_VERDICTS))}, 'incompatible: ...' "
                            f"or 'incomplete: ...'")
        elif text == "certified" and (not cert["tests"] or counted["failed"] or counted["error"] or counted["hang"]):
            problems.append("verdict 'certified' contradicts the tests")
        problems += [f"missing field {key!r}" for key in _CASE_ONLY if key not in cert]
    return problems


def file_name(release: str, *, case_run: bool = False) -> str:
    """The file a certificate of ``release`` is written to: ``gpu-<release>.json`` for the GPU runner's
    (``case_run``), ``<release>.json`` otherwise."""
    safe = "".join(c if c.isalnum() or c in "._-" else "_" for c in release).lstrip(".") or "_"
    return f"{'gpu-' if case_run else ''}{safe}.json"


def source_commit() -> str:
    """The dgcompat commit the running code is: ``$DGCOMPAT_SOURCE_COMMIT`` if set, else the git commit of the
    checkout the runtime was imported from (``+dirty`` when tracked files differ from it), else ``"unknown"``
    (an installed wheel, a copied tree)."""
    given = env_text("DGCOMPAT_SOURCE_COMMIT")
    if given:
        return given
    root = Path(dgcompat.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return "unknown"
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "diff", "--quiet", "HEAD", "--"], capture_output=True,
                               timeout=10, check=False).returncode != 0
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{head}+dirty" if dirty else head or "unknown"


def write(cert: Certificate, out_dir: Path) -> Path:
    """Check ``cert``, then write it to ``<out_dir>/<file_name>`` atomically; the path.

    A certificate that does not name the dgcompat commit that made it gets this code's
    (:func:`source_commit`), beside ``dgcompat_version``. Raises
    :class:`CertificateError` for an unsound certificate (nothing is written) and :class:`OSError` when
    ``out_dir`` cannot be written.
    """
    if not cert.dgcompat_commit:
        cert = dataclasses.replace(cert, dgcompat_commit=source_commit())
    problems = check(cert)
    if problems:
        raise CertificateError(f"refusing to write an unsound certificate for {cert.release[:60]!r}: "
                               + "; ".join(problems[:5]))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / file_name(cert.release, case_run=cert.case_run)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(cert.to_json(), indent=1, default=str) + "\n", "utf-8")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def load(path: Path) -> Certificate:
    """Read and check one certificate file; :class:`CertificateError` (naming the file) when it is not sound."""
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise CertificateError(f"{path}: unreadable certificate: {exc}") from exc
    return Certificate.from_json(doc, path)


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
