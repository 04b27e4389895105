"""Publishing GPU certificates: docs/compatibility-gpu.md regenerated from a certificate folder, and a run's
certificates copied into the shipped folder.

The page is :func:`dgcompat_conformance.report.gpu_compatibility_page`'s; :func:`write_docs` writes it from a
certificate folder (the shipped one by default) and :func:`publish` copies a run's certificates into the shipped
folder first.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from .. import certificate
from .._paths import wing_root
from ..certificate import Certificate
from ..report import gpu_certificates, gpu_compatibility_page
from .certify import write_certificate
from .output import say

__all__ = ["DEFAULT_DOCS", "publish", "write_docs"]

DEFAULT_DOCS = wing_root().parent / "docs" / "compatibility-gpu.md"  # in a checkout


def publish(certs: Sequence[Certificate], out_dir: Path, docs: Path = DEFAULT_DOCS) -> list[Path]:
    """Copy the certificates of ``certs`` written to ``out_dir`` into the shipped folder, then regenerate ``docs``.

    Prints and returns every file written. A certificate not written (or not passing the schema) is not copied.
    """
    written: list[Path] = []
    for cert in certs:
        source = out_dir / certificate.file_name(cert.release, case_run=cert.case_run)
        if not source.is_file():
            continue
        written.append(write_certificate(certificate.load(source), certificate.COMMITTED))
        say(f"published {written[-1]}")
    written.append(write_docs(certificate.COMMITTED, docs))
    say(f"wrote {written[-1]}")
    return written


def write_docs(out_dir: Path = certificate.COMMITTED, docs: Path = DEFAULT_DOCS) -> Path:
    """Regenerate the compatibility table from the certificates in ``out_dir`` (the shipped ones by default)."""
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(gpu_compatibility_page(gpu_certificates(out_dir)))
    return docs
