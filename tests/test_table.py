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
PROBE_VERSIONS: dict[str, list[str | None]] = {
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
    if row.dist == table.ANY:
        dists = PROBE_VERSIONS
    elif row.dist == table.BUNDLED:  # one family over both bundling distributions
        dists = {d: PROBE_VERSIONS[d] for d in table.BUNDLED_DISTS}
    else:
        dists = {row.dist: PROBE_VERSIONS[row.dist]}
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


def test_bundled_family_matches_both_distributions() -> None:
    for dist, versions in ((table.SK, ["0.3.21"]), (table.SGK, ["0.4.0", "0.4.2"])):
        for v in versions:
            assert lookup("masked_overlap", dist, Version(v)).dist == table.BUNDLED
    assert lookup("masked_overlap", table.SGL, Version("0.2.5")).dist == table.ANY


def test_no_two_rows_repeat_each_other_across_bundling_distributions() -> None:
    def body(r: table.Row) -> tuple[object, ...]:
        return (r.capability, r.releases, repr(r.value), r.upstream, r.kind, r.probe)

    sk = {body(r) for r in ROWS if r.dist == table.SK}
    sgk = {body(r) for r in ROWS if r.dist == table.SGK}
    assert not sk & sgk, "identical sgl-kernel / sglang-kernel rows belong in one 'bundled' row"


def test_probe_values_decide_presence_answers() -> None:
    from types import SimpleNamespace

    top = SimpleNamespace(set_pdl=lambda v: None, _C=SimpleNamespace(set_pdl=lambda v: None))
    native = SimpleNamespace(_C=SimpleNamespace(set_pdl=lambda v: None))
    rel = _release(table.SGL, "0.1.4")
    assert compute(rel, backend="deep_gemm", arch="sm90", module=top).pdl == "top-level"
    assert compute(rel, backend="deep_gemm", arch="sm90", module=native).pdl == "native"
    assert compute(rel, backend="deep_gemm", arch="sm90", module=SimpleNamespace()).pdl is None


def test_unknown_architecture_plans_from_the_other_entry() -> None:
    for row in ROWS:
        if isinstance(row.value, dict):
            assert table.OTHER_ARCH in row.value, row
    caps = compute(_release(table.SGL, "0.2.5"), backend="deep_gemm", arch="sm75")
    assert (caps.paged_native_next_n, caps.paged_heads) == ((1,), ())


def test_informative_rows_are_not_read_by_adapters() -> None:
    import re
    from pathlib import Path

    informative = {r.capability for r in ROWS if r.informative}
    assert {"bare_tensor_pairs", "masked_returns", "ensure_zero_padding_position"} <= informative
    for r in ROWS:  # a capability is informative in all its rows or none
        assert r.informative == (r.capability in informative), r
    runtime = Path(table.__file__).parent
    for path in runtime.glob("*.py"):
        if path.name == "table.py":
            continue
        for name in informative:
            assert not re.search(rf"\b{name}\b", path.read_text()), f"{path.name} reads informative {name}"


def test_upstream_identity_is_table_data() -> None:
    bundled = compute(_release(table.SGK, "0.4.2"), backend="deep_gemm", arch="sm90")
    sgl = compute(_release(table.SGL, "0.1.3"), backend="deep_gemm", arch="sm90")
    ref = compute(_release(table.REF, None), backend="reference", arch="sm90")
    # The stable grouped contiguous GEMMs take the layout as m_indices= and grouped_layout=: no release's does.
    for caps in (bundled, ref, sgl):
        assert not caps.identical_to_upstream("m_grouped_fp8_gemm_nt_contiguous")
    assert bundled.identical_to_upstream("bf16_gemm_nt") and ref.identical_to_upstream("get_num_sms")
    assert not sgl.identical_to_upstream("get_mn_major_tma_aligned_tensor")  # collapsed strides are repaired
    assert sgl.identical_to_upstream("fp8_gemm_nt")
    assert not sgl.identical_to_upstream("fp8_mqa_logits")
    for name in table.UPSTREAM_IDENTITY:
        assert name in __import__("dgcompat").__all__, name


@pytest.mark.parametrize("row", ROWS, ids=lambda r: f"{r.capability}:{r.dist}:{r.releases or 'all'}")
def test_row_is_documented(row: table.Row) -> None:
    assert row.upstream and row.since and row.drop_when
    assert row.kind in ("behaviour", "presence", "signature")
    assert (row.kind in ("presence", "signature")) == (row.probe is not None)
    if row.kind == "signature":  # "function:parameter", answered "present" / "absent"
        assert row.probe is not None and row.probe.count(":") == 1 and row.probe_values is not None
        assert set(row.probe_values) == {"present", "absent"}
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
