"""The capability table: every row is reachable, documented, and answers what it says."""

from __future__ import annotations

from dataclasses import fields

import pytest
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from dgcompat import table
from dgcompat.detection import KNOWN_SGL_DEEP_GEMM, Release
from dgcompat.table import ROWS, Capabilities, compute, lookup

# Versions each distribution is evaluated at: every published release plus a newer unknown one.
PROBE_VERSIONS = {
    table.SGL: [*KNOWN_SGL_DEEP_GEMM, "0.3.0"],
    table.SK: ["0.3.21"],
    table.SGK: ["0.4.0", "0.4.1.post1", "0.4.2"],
    table.REF: [None],
    table.UP: ["2.6.1", "2.8.1", "2.9.0"],
}


def _release(dist: str, version: str | None) -> Release:
    source = {table.SGL: "sgl-deep-gemm", table.REF: "none", table.UP: "upstream"}.get(dist, "bundled")
    v = Version(version) if version else None
    return Release(dist if dist != table.REF else None, v, source, "unknown", None, None, None, None, None, True)


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.capability}:{r.dist}:{r.releases or 'all'}")
def test_row_is_reachable_and_answers(row: table.Row) -> None:
    hits = []
    dists = PROBE_VERSIONS if row.dist == table.ANY else {row.dist: PROBE_VERSIONS[row.dist]}
    for dist, versions in dists.items():
        for v in versions:
            version = Version(v) if v else None
            if lookup(row.capability, dist, version) is row:
                hits.append((dist, v))
    assert hits, f"row {row} is shadowed by earlier rows for every release"
    dist, v = hits[0]
    backend = "reference" if dist == table.REF else "deep_gemm"
    caps = compute(_release(dist, v), backend=backend, arch="sm90")
    value = row.value["sm90"] if isinstance(row.value, dict) else row.value
    assert getattr(caps, row.capability) == value


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.capability}:{r.dist}:{r.releases or 'all'}")
def test_row_is_documented(row: table.Row) -> None:
    assert row.upstream and row.since and row.drop_when
    assert row.kind in ("behaviour", "presence")
    assert (row.kind == "presence") == (row.probe is not None)
    if row.releases:
        SpecifierSet(row.releases)  # parses


def test_every_capability_has_a_catch_all() -> None:
    names = {f.name for f in fields(Capabilities)} - {"release", "backend", "arch", "sources"}
    for name in names:
        assert any(r.capability == name and r.dist == table.ANY and not r.releases for r in ROWS), name


def test_arch_override(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_ARCH", "sm100")
    assert table.current_arch() == "sm100"
    caps = compute(_release(table.SGL, "0.1.4"), backend="deep_gemm", arch=table.current_arch())
    assert caps.paged_native_next_n == (1, 2, 4)
    assert compute(_release(table.SGL, "0.1.4"), backend="deep_gemm", arch=None).paged_native_next_n == (1,)


def test_known_answers() -> None:
    c = compute(_release(table.SGL, "0.2.5"), backend="deep_gemm", arch="sm90")
    assert (c.mqa_logits, c.mqa_clean_logits, c.mqa_max_seqlen_k) == ("fp8_fp4_mqa_logits", "emulated", "required")
    c = compute(_release(table.SGL, "0.1.3"), backend="deep_gemm", arch="sm90")
    assert (c.pdl, c.ensure_zero_padding_position, c.masked_gemm, c.collapsed_strides) == (
        "native", None, "fp8_m_grouped_gemm_nt_masked", True)
    c = compute(_release(table.SGK, "0.4.2"), backend="deep_gemm", arch="sm90")
    assert (c.compile_mode, c.masked_overlap, c.paged_context_lens, c.contiguous_layout_param) == (
        True, True, "1d", "m_indices")
    assert "compile_mode" in str(c)


def test_docs_render_the_table() -> None:
    from pathlib import Path

    from dgcompat_conformance.cli import render_document

    doc = (Path(__file__).parent.parent / "docs" / "capabilities.md").read_text()
    assert doc == render_document(), "docs/capabilities.md is stale: `dgcompat table --markdown > docs/capabilities.md`"


def test_compatibility_doc_is_current() -> None:
    from pathlib import Path

    from dgcompat_conformance.pins import render_compatibility

    doc = (Path(__file__).parent.parent / "docs" / "compatibility.md").read_text()
    assert doc == render_compatibility(), "docs/compatibility.md is stale: `dgcompat pin --docs > docs/compatibility.md`"
