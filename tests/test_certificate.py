"""The one certificate type: every builder returns it, the shipped files read into it and back byte for byte,
the reader refuses what the type cannot hold, and the writer stamps the dgcompat commit."""

from __future__ import annotations

import json
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import pytest

from dgcompat_conformance import certificate
from dgcompat_conformance.certificate import COMMITTED, FIELDS, Certificate, CertificateError, load, write
from dgcompat_conformance.harness.certificate import build


def _doc(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((COMMITTED / name).read_text("utf-8"))
    return doc


def test_every_shipped_certificate_reads_and_writes_back_byte_for_byte(tmp_path: Path) -> None:
    files = sorted(COMMITTED.glob("*.json"))
    assert len(files) > 40
    kinds = set()
    for path in files:
        cert = load(path)
        assert isinstance(cert, Certificate) and cert.path == path
        kinds.add(cert.case_run)
        assert json.dumps(cert.to_json(), indent=1) + "\n" == path.read_text("utf-8"), path.name
        if cert.dgcompat_commit:  # written again as it is (a certificate that names no commit gets this one's)
            assert write(cert, tmp_path).read_bytes() == path.read_bytes(), path.name
    assert kinds == {True, False}


def test_the_type_holds_exactly_the_schema_fields() -> None:
    names = {f.name for f in fields(Certificate)} - {"path"}
    assert names == {"import_check" if k == "import" else k for k in FIELDS}


def test_the_reader_refuses_what_the_type_cannot_hold() -> None:
    doc = _doc("cpu-0.1.4.json")
    assert certificate.check(doc) == []
    for bad, why in ((dict(doc, extra="x"), "unknown field 'extra'"), (dict(doc, seconds="12"), "seconds is str"),
                     (dict(doc, wheel=["x"]), "wheel is list"), (dict(doc, stale_xfails=["x"]), "stale_xfails is list"),
                     (dict(doc, timestamp=None), "timestamp is null"), (dict(doc, subject=3), "subject is int")):
        with pytest.raises(CertificateError, match=why):
            Certificate.from_json(bad)


def test_the_builder_returns_the_type_and_write_stamps_the_commit(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    child = {"tier": "cpu-tier", "environment": {"torch": "2.13", "python": "3.11", "platform": "linux",
                                                 "dgcompat_version": "0.1.0"},
             "tests": [{"id": "t0", "outcome": "passed", "duration": 0.1, "message": ""}]}
    cert = build(child, release="0.1.4", distribution="sgl-deep-gemm")
    assert isinstance(cert, Certificate) and cert.dgcompat_commit is None and certificate.check(cert) == []
    monkeypatch.setenv("DGCOMPAT_SOURCE_COMMIT", "0123abc")
    written = json.loads(write(cert, tmp_path / "a").read_text())
    assert written["dgcompat_commit"] == "0123abc" and list(written)[-1] == "dgcompat_commit"
    assert Certificate.from_json(written) == replace(cert, dgcompat_commit="0123abc")
    kept = json.loads(write(replace(cert, dgcompat_commit="feed"), tmp_path / "b").read_text())
    assert kept["dgcompat_commit"] == "feed"


def test_write_refuses_an_unsound_certificate_and_writes_nothing(tmp_path: Path) -> None:
    cert = Certificate.from_json(_doc("gpu-0.1.4.json"))
    for bad in (replace(cert, summary=dict(cert.summary, passed=99)), replace(cert, release="0.1.4\nevil"),
                replace(cert, verdict="PASS")):
        with pytest.raises(CertificateError, match="unsound"):
            write(bad, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_to_json_shares_nothing_with_the_certificate() -> None:
    cert = Certificate.from_json(_doc("gpu-0.1.4.json"))
    doc = cert.to_json()
    doc["tests"][0]["outcome"] = "failed"
    doc["device"]["name"] = "other"
    assert cert.tests[0]["outcome"] == "passed" and cert.device_name == "NVIDIA H200"
