"""New-release intake: the capability table against surfaces, changes mapped onto rows, ``--latest``."""

from __future__ import annotations

import copy
import dataclasses
import itertools
import json
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from dgcompat import table
from dgcompat.detection import KNOWN_SGL_DEEP_GEMM
from dgcompat.table import Capabilities
from dgcompat_conformance import intake
from dgcompat_conformance.index import PackageIndex
from dgcompat_conformance.intake import newest as intake_newest  # the index, the CPU tier and the verdict
from dgcompat_conformance.surface import Change, SurfaceError, cli, extract
from testsupport.wheels import published_wheel

# ---------------------------------------------------------------------------------------------
# A synthetic surface shaped like sgl-deep-gemm 0.2.5 (only what the table and the adapters read)
# ---------------------------------------------------------------------------------------------


def _params(*spec: str | tuple[str, str]) -> list[dict[str, Any]]:
    out = []
    for item in spec:
        name, default = (item, None) if isinstance(item, str) else item
        out.append({"name": name, "kind": "positional", "default": default, "annotation": None})
    return out


def _fn(name: str, *params: str | tuple[str, str], returns: str = "None", op: str | None = None) -> dict[str, Any]:
    calls = [{"op": op, "args": []}] if op else []
    return {"kind": "function", "qualname": f"deep_gemm.{name}", "params": _params(*params), "returns": returns,
            "returns_annotation": None, "native_calls": calls, "decorators": [], "guard": None}


def _native(op: str, *params: str, returns: str = "()") -> dict[str, Any]:
    return {"kind": "native", "op": op, "via": None, "returns": returns,
            "params": [{"name": p, "kind": "positional", "default": None, "annotation": "int"} for p in params]}


def synthetic(version: str = "0.2.5") -> dict[str, Any]:
    """A surface document with the engine-facing part of sgl-deep-gemm 0.2.5."""
    masked_params = ("a", "b", "d", "masked_m", "expected_m", ("recipe", "None"), ("compiled_dims", "'nk'"))
    contiguous = ("a", "b", "d", "grouped_layout", ("recipe", "None"), ("recipe_a", "None"), ("recipe_b", "None"),
                  ("compiled_dims", "'nk'"), ("disable_ue8m0_cast", "False"), ("use_psum_layout", "False"),
                  ("ensure_zero_padding", "True"), ("expected_m_for_psum_layout", "None"))
    python = {
        "deep_gemm.fp8_gemm_nt": _fn("fp8_fp4_gemm_nt", "a", "b", "d", ("c", "None"), ("recipe", "None"),
                                     ("recipe_a", "None"), ("recipe_b", "None"), ("compiled_dims", "''"),
                                     ("disable_ue8m0_cast", "False"), op="fp8_fp4_gemm_nt"),
        "deep_gemm.bf16_gemm_nt": _fn("bf16_gemm_nt", "a", "b", "d", ("c", "None"), ("compiled_dims", "''")),
        "deep_gemm.m_grouped_fp8_gemm_nt_contiguous": _fn("m_grouped_fp8_fp4_gemm_nt_contiguous", *contiguous),
        "deep_gemm.m_grouped_fp8_fp4_gemm_nt_contiguous": _fn("m_grouped_fp8_fp4_gemm_nt_contiguous", *contiguous),
        "deep_gemm.m_grouped_bf16_gemm_nt_contiguous": _fn("m_grouped_bf16_gemm_nt_contiguous", "a", "b", "d",
                                                           "grouped_layout", ("compiled_dims", "'nk'")),
        "deep_gemm.m_grouped_fp8_gemm_nt_masked": _fn("m_grouped_fp8_fp4_gemm_nt_masked", *masked_params,
                                                      returns="_C.m_grouped_fp8_fp4_gemm_nt_masked"),
        "deep_gemm.fp8_m_grouped_gemm_nt_masked": _fn("m_grouped_fp8_fp4_gemm_nt_masked", *masked_params,
                                                      returns="_C.m_grouped_fp8_fp4_gemm_nt_masked"),
        "deep_gemm.m_grouped_bf16_gemm_nt_masked": _fn("m_grouped_bf16_gemm_nt_masked", "a", "b", "d", "masked_m",
                                                       "expected_m", ("compiled_dims", "'nk'")),
        "deep_gemm.fp8_fp4_mqa_logits": _fn("fp8_fp4_mqa_logits", "q", "kv", "weights", "cu_seq_len_k_start",
                                            "cu_seq_len_k_end", "max_seqlen_k", ("schedule_meta", "None"),
                                            returns="_C.fp8_fp4_mqa_logits"),
        "deep_gemm.fp8_fp4_paged_mqa_logits": _fn("fp8_fp4_paged_mqa_logits", "q", "kv_cache", "weights",
                                                  "context_lens", "block_table", "schedule_meta", "max_context_len",
                                                  ("indices", "None"), returns="_C.fp8_fp4_paged_mqa_logits"),
        "deep_gemm.get_paged_mqa_logits_metadata": _fn("get_paged_mqa_logits_metadata", "context_lens", "block_kv",
                                                       "num_sms", ("indices", "None"),
                                                       returns="_C.get_paged_mqa_logits_metadata"),
        "deep_gemm.transform_sf_into_required_layout": _fn("transform_sf_into_required_layout", "sf", "mn", "k",
                                                           "recipe", ("num_groups", "None"), ("is_sfa", "None"),
                                                           ("disable_ue8m0_cast", "False"),
                                                           returns="_C.transform_sf_into_required_layout"),
        "deep_gemm.get_mn_major_tma_aligned_tensor": _fn("utils.layout.get_mn_major_tma_aligned_tensor", "sf",
                                                         returns="_C.get_mn_major_tma_aligned_tensor"),
        "deep_gemm.get_mn_major_tma_aligned_packed_ue8m0_tensor": _fn(
            "utils.layout.get_mn_major_tma_aligned_packed_ue8m0_tensor", "sf", ("psum_layout", "None"),
            returns="_C.get_mn_major_tma_aligned_packed_ue8m0_tensor"),
        "deep_gemm.get_mk_alignment_for_contiguous_layout": _fn(
            "utils.layout.get_mk_alignment_for_contiguous_layout",
            returns="int(_C.get_mk_alignment_for_contiguous_layout)"),
        "deep_gemm.get_theoretical_mk_alignment_for_contiguous_layout": _fn(
            "utils.layout.get_theoretical_mk_alignment_for_contiguous_layout", ("expected_m", "None"),
            ("num_groups", "None")),
        "deep_gemm.set_mk_alignment_for_contiguous_layout": _fn(
            "utils.layout.set_mk_alignment_for_contiguous_layout", "new_value"),
        "deep_gemm.get_num_sms": _native("get_num_sms", returns="int"),
        "deep_gemm.set_num_sms": _native("set_num_sms", "new_num_sms"),
        "deep_gemm.set_pdl": _native("set_pdl", "enable"),
        "deep_gemm.get_pdl": _native("get_pdl", returns="bool"),
        "deep_gemm.fp8_einsum": _fn("fp8_einsum", "expr", "a", "b", "d"),
    }
    native = {
        "set_pdl": {"binding": "torch-library", "params": [{"name": "enable", "type": "bool", "default": None}],
                    "returns": "()", "signature": "set_pdl(bool enable) -> ()"},
        "m_grouped_fp8_fp4_gemm_nt_masked": {"binding": "torch-library", "params": [], "returns": "()",
                                             "signature": None},
    }
    return {
        "schema": 1, "release": {"name": "sgl-deep-gemm", "version": version},
        "source": {"kind": "wheel", "name": f"sgl_deep_gemm-{version}-synthetic.whl", "sha256": None},
        "binding": "torch-library", "requires_dist": [], "torch_build": "2.14", "torch_header_lines": {},
        "native_library": "deep_gemm/_C.so", "native": native, "python": python, "import_errors": [],
    }


def _move(surface: dict[str, Any], symbol: str, param: str, to: int) -> dict[str, Any]:
    out = copy.deepcopy(surface)
    params = out["python"][symbol]["params"]
    index = next(i for i, p in enumerate(params) if p["name"] == param)
    params.insert(to, params.pop(index))
    return out


def _statuses(mapped: list[intake.MappedChange]) -> dict[tuple[str, str, str | None], tuple[str, list[str]]]:
    return {(m.change.kind, m.change.symbol, m.change.param): (m.status, m.rows) for m in mapped}


def _mapped(a: dict[str, Any], b: dict[str, Any]) -> list[intake.MappedChange]:
    return intake.map_changes(intake.diff_surfaces(a, b), before=a, after=b)


# ---------------------------------------------------------------------------------------------
# The declarations themselves
# ---------------------------------------------------------------------------------------------

CAPABILITIES = {f.name for f in dataclasses.fields(Capabilities)} - {"release", "backend", "arch", "sources"}


def test_every_capability_is_claimed_or_explained() -> None:
    assert set(intake.SURFACE_CLAIMS) | set(intake.NOT_SURFACE_VISIBLE) == CAPABILITIES
    assert not set(intake.SURFACE_CLAIMS) & set(intake.NOT_SURFACE_VISIBLE)
    assert all(reason for reason in intake.NOT_SURFACE_VISIBLE.values())


def test_row_touches_name_real_rows() -> None:
    rows = {r for rs in intake.ROW_TOUCHES.values() for r in rs} | {r for rs in intake.RELEASE_TOUCHES.values() for r in rs}
    assert rows <= CAPABILITIES
    assert all(table.rows_for(r) for r in rows)


def test_stable_uses_name_stable_functions() -> None:
    for use in intake.STABLE_USES:
        assert use.caller.startswith("dgcompat.")
        assert use.caller.removeprefix("dgcompat.") in dgcompat.__all__, use
        assert use.symbol.startswith(("deep_gemm.", "_C.")), use
        if use.selected_by is not None:
            assert use.selected_by[0] in CAPABILITIES, use


# ---------------------------------------------------------------------------------------------
# check_table / check_calls on a synthetic surface (fast)
# ---------------------------------------------------------------------------------------------


def test_synthetic_surface_agrees_with_the_table() -> None:
    surface = synthetic()
    assert intake.check_table(surface) == []
    assert intake.check_calls(surface) == []
    assert intake.check_torch(surface) == []
    said = {name: claim(surface) for name, claim in intake.SURFACE_CLAIMS.items()}
    assert said["mqa_logits"] == "fp8_fp4_mqa_logits"
    assert said["mqa_clean_logits"] == "emulated"
    assert said["mqa_max_seqlen_k"] == "required"
    assert said["ensure_zero_padding_position"] == 10
    assert said["masked_returns"] == "none"
    assert said["pdl"] == "top-level"


def test_a_lying_row_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    rows = list(table.ROWS)
    i = next(i for i, r in enumerate(rows) if r.capability == "masked_gemm" and r.releases == ">=0.2.0")
    rows[i] = dataclasses.replace(rows[i], value="fp8_m_grouped_gemm_nt_masked")
    monkeypatch.setattr(table, "ROWS", tuple(rows))
    problems = intake.check_table(synthetic())
    assert len(problems) == 1
    assert problems[0].startswith("masked_gemm: Row('masked_gemm', 'sgl-deep-gemm', '>=0.2.0'")
    assert "'fp8_m_grouped_gemm_nt_masked'" in problems[0] and "'m_grouped_fp8_gemm_nt_masked'" in problems[0]


def test_surface_claims_follow_the_surface() -> None:
    s = synthetic()
    del s["python"]["deep_gemm.set_pdl"]
    assert intake.SURFACE_CLAIMS["pdl"](s) == "native"  # only the op is left
    del s["native"]["set_pdl"]
    assert intake.SURFACE_CLAIMS["pdl"](s) is None
    s = synthetic()
    s["python"]["deep_gemm.m_grouped_bf16_gemm_nt_masked"] = {"kind": "none"}
    assert intake.SURFACE_CLAIMS["bf16_grouped_masked"](s) is False
    s["python"]["deep_gemm.transform_sf_into_required_layout"]["params"][5]["default"] = "False"
    assert intake.SURFACE_CLAIMS["transform_sf_is_sfa"](s) == "bool"
    s["binding"] = "tvm-ffi"
    assert intake.SURFACE_CLAIMS["collapsed_strides"](s) is True
    assert intake.SURFACE_CLAIMS["raw_ffi_returns"](s) is True  # the paged wrapper returns _C.<op> as is
    s["python"]["deep_gemm.fp8_fp4_paged_mqa_logits"]["returns"] = "_from_dlpack_if_needed(_C.fp8_fp4_paged_mqa_logits)"
    assert intake.SURFACE_CLAIMS["raw_ffi_returns"](s) is False
    assert intake.SURFACE_CLAIMS["masked_returns"](s) == "none"
    s["native"]["m_grouped_fp8_fp4_gemm_nt_masked"]["returns"] = None  # tvm-ffi: no schema
    assert intake.SURFACE_CLAIMS["masked_returns"](s) == "native-result"


def test_release_of_a_surface_without_metadata() -> None:
    s = synthetic()
    s["release"] = None
    with pytest.raises(ValueError, match="names no release"):
        intake.check_table(s)
    assert intake.check_calls(s) == []  # every call is then held against the surface


# ---------------------------------------------------------------------------------------------
# map_changes
# ---------------------------------------------------------------------------------------------


def test_synthetic_unhandled_drift() -> None:
    before = synthetic()
    after = _move(before, "deep_gemm.fp8_gemm_nt", "c", 5)
    mapped = _mapped(before, after)
    got = _statuses(mapped)
    assert got[("moved-param", "deep_gemm.fp8_gemm_nt", "c")] == ("drift", [])
    assert got[("moved-param", "deep_gemm.fp8_gemm_nt", "recipe")][0] == "drift"
    assert {m.status for m in mapped} == {"drift"}
    assert not any(m.handled for m in mapped)
    calls = intake.check_calls(after)
    # gemm passes c by position (#3): the moved parameter breaks that slot.
    assert any("passes c at #3, but #3 is recipe" in p for p in calls)
    text = intake.render_mapped(mapped, before, after, table_problems=intake.check_table(after), call_problems=calls)
    assert "unhandled drift (3):" in text
    assert "deep_gemm.fp8_gemm_nt moved-param c: c moved from #3 to #5" in text


def test_drift_through_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(synthetic()))
    b.write_text(json.dumps(_move(synthetic(), "deep_gemm.fp8_gemm_nt", "c", 5)))
    assert cli.main(["--diff", str(a), str(b)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("sgl-deep-gemm 0.2.5 -> sgl-deep-gemm 0.2.5\n")
    assert "-> drift: dgcompat.fp8_gemm_nt relies on c at #3" in text
    assert "capability table: agrees with sgl-deep-gemm 0.2.5" in text
    assert cli.main(["--diff", str(a), str(b), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert ("deep_gemm.fp8_gemm_nt", "c") in {(c["symbol"], c["param"]) for c in doc["unhandled_drift"]}
    assert doc["table_problems"] == []
    assert cli.main(["--diff", str(a), str(b), "--no-rows"]) == 0
    plain = capsys.readouterr().out
    assert "drift" not in plain and "moved-param" in plain


def test_inserted_parameter_shifts_positional_calls() -> None:
    before = synthetic()
    after = copy.deepcopy(before)
    after["python"]["deep_gemm.get_paged_mqa_logits_metadata"]["params"].insert(
        1, {"name": "num_heads", "kind": "positional", "default": "None", "annotation": None})
    got = _statuses(_mapped(before, after))
    assert got[("added-param", "deep_gemm.get_paged_mqa_logits_metadata", "num_heads")][0] == "drift"


def test_new_required_parameter_is_drift_and_optional_one_compatible() -> None:
    before = synthetic()
    after = copy.deepcopy(before)
    after["python"]["deep_gemm.bf16_gemm_nt"]["params"].append(
        {"name": "epilogue", "kind": "positional", "default": "None", "annotation": None})
    after["python"]["deep_gemm.m_grouped_bf16_gemm_nt_masked"]["params"].append(
        {"name": "signal", "kind": "positional", "default": None, "annotation": None})
    got = _statuses(_mapped(before, after))
    assert got[("added-param", "deep_gemm.bf16_gemm_nt", "epilogue")][0] == "compatible"
    assert got[("added-param", "deep_gemm.m_grouped_bf16_gemm_nt_masked", "signal")][0] == "drift"


def test_changed_default_of_an_unpassed_parameter_needs_a_row() -> None:
    before = synthetic()
    after = copy.deepcopy(before)
    after["python"]["deep_gemm.m_grouped_fp8_gemm_nt_contiguous"]["params"][7]["default"] = "'mn'"
    got = _statuses(_mapped(before, after))
    assert got[("default-changed", "deep_gemm.m_grouped_fp8_gemm_nt_contiguous", "compiled_dims")] == ("new-row", [])


def test_a_covering_row_that_lies_is_drift() -> None:
    before = synthetic()
    after = copy.deepcopy(before)
    after["python"]["deep_gemm.transform_sf_into_required_layout"]["params"][5]["default"] = "False"
    got = _statuses(_mapped(before, after))
    status, rows = got[("default-changed", "deep_gemm.transform_sf_into_required_layout", "is_sfa")]
    assert (status, rows) == ("drift", ["transform_sf_is_sfa"])


def test_fallbacks_irrelevant_symbols_and_packaging() -> None:
    before = synthetic()
    after = copy.deepcopy(before)
    # moe.py calls m_grouped_fp8_gemm_nt_contiguous and has no fallback: its removal is drift.
    del after["python"]["deep_gemm.m_grouped_fp8_gemm_nt_contiguous"]
    after["python"]["deep_gemm.fp8_einsum"]["params"].pop()
    after["requires_dist"] = ["torch"]
    mapped = intake.map_changes(intake.diff_surfaces(before, after, all_symbols=True), before=before, after=after)
    got = _statuses(mapped)
    assert got[("removed-function", "deep_gemm.m_grouped_fp8_gemm_nt_contiguous", None)][0] == "drift"
    assert got[("removed-param", "deep_gemm.fp8_einsum", "d")] == ("irrelevant", [])
    assert got[("requires-changed", "deep_gemm", None)][0] == "compatible"
    assert [m.change.symbol for m in mapped if not m.handled] == ["deep_gemm.m_grouped_fp8_gemm_nt_contiguous"]


def test_declared_fallbacks_count_as_called() -> None:
    before = synthetic()
    after = copy.deepcopy(before)
    # runtime.py falls back to get_m_alignment_for_contiguous_layout when the mk name is missing.
    del after["python"]["deep_gemm.get_mk_alignment_for_contiguous_layout"]
    after["python"]["deep_gemm.get_m_alignment_for_contiguous_layout"] = copy.deepcopy(
        before["python"]["deep_gemm.get_mk_alignment_for_contiguous_layout"])
    got = _statuses(intake.map_changes(intake.diff_surfaces(before, after, all_symbols=True), before=before,
                                       after=after))
    assert got[("removed-function", "deep_gemm.get_mk_alignment_for_contiguous_layout", None)][0] == "compatible"


def test_map_changes_without_surfaces() -> None:
    removed = Change("removed-function", "deep_gemm.fp8_mqa_logits", "removed")
    moved = Change("moved-param", "deep_gemm.fp8_gemm_nt", "c moved", 3, 5, "c")
    binding = Change("binding-changed", "deep_gemm", "binding", "tvm-ffi", "torch-library")
    (m1, m2, m3) = intake.map_changes([removed, moved, binding])
    assert m1.status == "handled" and "mqa_logits" in m1.rows
    assert m2.status == "drift"
    assert m3.status == "handled" and "collapsed_strides" in m3.rows


# ---------------------------------------------------------------------------------------------
# latest (index lookup and CPU tier replaced)
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> dict[str, Any]:
    """Index, surfaces and CPU tier replaced; ``state`` steers them."""
    state: dict[str, Any] = {"index": ["0.2.6", "0.2.5", "0.2.3.post2"], "surfaces": {}, "tier": True, "tier_calls": []}
    state["surfaces"]["0.2.5"] = synthetic("0.2.5")
    state["surfaces"]["0.2.6"] = synthetic("0.2.6")

    def index_versions(dist: str = "sgl-deep-gemm", *, index_url: str | None = None, timeout: float = 180.0,
                       index: Any = None) -> list[str]:
        if state["index"] is None:
            raise intake.IntakeError("cannot resolve the newest sgl-deep-gemm on the package index: no network")
        return list(state["index"])

    def fake_extract(source: str, **_kw: Any) -> dict[str, Any]:
        if source not in state["surfaces"]:
            raise SurfaceError(f"{source} is not cached")
        return copy.deepcopy(state["surfaces"][source])

    def run_cpu_tier(version: str, *, out_dir: Path, timeout: float = 900.0) -> intake.CpuTier:
        state["tier_calls"].append(version)
        if state["tier"]:
            return intake.CpuTier(True, True, "PASS", {"passed": 106, "failed": 0, "error": 0, "xfailed": 0}, [],
                                  str(out_dir / f"{version}.json"))
        return intake.CpuTier(True, False, "FAIL", {"passed": 105, "failed": 1, "error": 0, "xfailed": 0},
                              ["dgcompat_conformance/suite/test_stable_gemm.py::test_fp8_gemm_nt"], str(out_dir / f"{version}.json"))

    monkeypatch.setattr(intake_newest, "index_versions", index_versions)
    monkeypatch.setattr(intake_newest, "extract", fake_extract)
    monkeypatch.setattr(intake_newest, "run_cpu_tier", run_cpu_tier)
    state["certs"] = tmp_path / "certificates"
    state["certs"].mkdir()
    return state


def test_latest_new_release_needs_rows(offline: dict[str, Any], tmp_path: Path) -> None:
    result = intake.latest(certificates=offline["certs"], out_dir=tmp_path)
    assert (result.newest, result.baseline) == ("0.2.6", KNOWN_SGL_DEEP_GEMM[-1])
    assert result.verdict == "safe with new rows needed" and result.exit_status == 3
    assert any("KNOWN_SGL_DEEP_GEMM" in r for r in result.rows_needed)
    assert any("EXPECTED_TORCH" in r for r in result.rows_needed)
    assert offline["tier_calls"] == ["0.2.6"]
    assert "verdict: safe with new rows needed" in result.render()


def test_latest_safe_when_newest_is_certified(offline: dict[str, Any], tmp_path: Path) -> None:
    offline["index"] = ["0.2.5", "0.2.3.post2"]
    result = intake.latest(certificates=offline["certs"], out_dir=tmp_path)
    assert result.verdict == "safe" and result.exit_status == 0
    assert result.mapped == [] and result.where == []


def test_latest_breaking_on_drift_and_on_cpu_tier(offline: dict[str, Any], tmp_path: Path) -> None:
    offline["surfaces"]["0.2.6"] = _move(synthetic("0.2.6"), "deep_gemm.fp8_gemm_nt", "c", 5)
    result = intake.latest(certificates=offline["certs"], out_dir=tmp_path)
    assert result.verdict == "breaking" and result.exit_status == 1
    assert any(w.startswith("deep_gemm.fp8_gemm_nt moved-param c:") for w in result.where)
    offline["surfaces"]["0.2.6"] = synthetic("0.2.6")
    offline["tier"] = False
    result = intake.latest(certificates=offline["certs"], out_dir=tmp_path)
    assert result.verdict == "breaking"
    assert result.where == ["CPU tier: dgcompat_conformance/suite/test_stable_gemm.py::test_fp8_gemm_nt"]


def _sound(committed: str, **fields: Any) -> str:
    """A committed certificate with ``fields`` replaced: sound for the one certificate schema."""
    from dgcompat_conformance.certificate import COMMITTED

    doc = json.loads((COMMITTED / committed).read_text())
    doc.update(fields)
    return json.dumps(doc)


def test_latest_baseline_is_the_newest_passing_certificate(offline: dict[str, Any], tmp_path: Path) -> None:
    certs: Path = offline["certs"]
    (certs / "0.2.3.post2.json").write_text(_sound("cpu-0.2.3.post2.json"))
    (certs / "gpu-0.2.5.json").write_text(_sound("gpu-0.1.4.json", release="0.2.5", verdict="failed"))
    (certs / "broken.json").write_text("{")
    assert intake.newest_certified(certs)[0] == "0.2.3.post2"
    # Certificates are read with the one certificate reader: a document that is not a sound
    # certificate never counts, whatever verdict it claims.
    (certs / "gpu-0.2.5.json").write_text(json.dumps({"release": "0.2.5", "verdict": "certified"}))
    version, why = intake.newest_certified(certs)
    assert version == "0.2.3.post2" and "2 unsound" in why
    (certs / "gpu-0.2.5.json").write_text(_sound("gpu-0.1.4.json", release="0.2.5", verdict="certified"))
    version, why = intake.newest_certified(certs)
    assert version == "0.2.5" and "gpu-0.2.5.json" in why
    assert intake.newest_certified(tmp_path / "missing")[0] == KNOWN_SGL_DEEP_GEMM[-1]


def _sgl_index(versions: list[str] | None) -> PackageIndex:
    """An index listing sgl-deep-gemm ``versions`` only (None: unreachable)."""
    from dgcompat_conformance import index

    def transport(url: str, headers: Any) -> index.Response:
        if versions is None:
            raise index.IndexError("cannot reach pypi.org: no network")
        if not url.endswith("/sgl-deep-gemm/"):
            return index.Response(404, {}, b"")
        files = [{"filename": f"sgl_deep_gemm-{v}-py3-none-manylinux2014_x86_64.whl", "url": f"https://f/{v}.whl",
                  "size": 10, "hashes": {}, "yanked": v == "0.3.0rc0"} for v in versions]
        return index.Response(200, {}, json.dumps({"meta": {"api-version": "1.1"}, "files": files}).encode())

    return index.PackageIndex("https://pypi.org/simple/", transport)


def test_main_latest(offline: dict[str, Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    common = ["--certificates", str(offline["certs"]), "--out", str(tmp_path)]
    # One release, named.
    assert intake.main_latest(["conform", "--latest", *common, "--version", "0.2.6", "--no-cpu-tier"]) == 3
    out = capsys.readouterr().out
    assert "release judged:       sgl-deep-gemm 0.2.6 (given with --version)" in out
    assert "verdict: safe with new rows needed (CPU tier not run)" in out
    assert offline["tier_calls"] == []
    assert intake.main_latest([*common, "--version", "0.2.5", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["verdict"] == "safe" and doc["cpu_tier"]["verdict"] == "PASS"
    # Discovery: the index lists 0.2.6, new to the table; judged, certified on the CPU tier, rows to record (exit 3).
    ix = _sgl_index(["0.2.6", "0.2.5", "0.2.3.post2"])
    assert intake.main_latest([*common, "--dist", "sgl-deep-gemm"], index=ix) == 3
    out = capsys.readouterr().out
    assert "sgl-deep-gemm 0.2.6: certified" in out and "release judged:       sgl-deep-gemm 0.2.6 (new on the package " \
        "index)" in out
    assert "add '0.2.6' to dgcompat.detection.KNOWN_SGL_DEEP_GEMM" in out
    assert offline["tier_calls"] == ["0.2.5", "0.2.6"]
    assert intake.main_latest([*common, "--dist", "sgl-deep-gemm"], index=_sgl_index(None)) == 2
    assert "no network" in capsys.readouterr().out


def test_index_versions_asks_the_index() -> None:
    ix = _sgl_index(["0.2.5", "0.2.3.post2", "0.3.0rc1", "0.1.4", "0.3.0rc0"])
    assert intake.index_versions(index=ix) == ["0.3.0rc1", "0.2.5", "0.2.3.post2", "0.1.4"]  # yanked 0.3.0rc0 left out
    assert intake.newest_on_index(index=ix) == "0.2.5"  # pre-releases only when nothing else exists
    assert intake.newest_on_index(index=_sgl_index(["0.3.0rc1"])) == "0.3.0rc1"
    with pytest.raises(intake.IntakeError, match=r"cannot resolve the newest sgl-deep-gemm.*no network.*--version V"):
        intake.index_versions(index=_sgl_index(None))
    with pytest.raises(intake.IntakeError, match="no release of it"):
        intake.index_versions(index=_sgl_index([]))


# ---------------------------------------------------------------------------------------------
# The published wheels
# ---------------------------------------------------------------------------------------------


def _surface(version: str) -> dict[str, Any]:
    published_wheel(version)
    return extract(version)


@pytest.mark.wheels
@pytest.mark.parametrize("version", KNOWN_SGL_DEEP_GEMM)
def test_table_agrees_with_every_published_surface(version: str) -> None:
    """A row that lies fails here: the table's answer for each release against its extracted surface."""
    surface = _surface(version)
    assert surface["release"] == {"name": "sgl-deep-gemm", "version": version}
    assert intake.check_table(surface) == []
    assert intake.check_calls(surface) == []
    assert intake.check_torch(surface) == []


@pytest.mark.wheels
def test_a_lying_row_fails_on_a_real_surface(monkeypatch: pytest.MonkeyPatch) -> None:
    surface = _surface("0.1.4")
    rows = list(table.ROWS)
    i = next(i for i, r in enumerate(rows) if r.capability == "ensure_zero_padding_position" and r.releases)
    rows[i] = dataclasses.replace(rows[i], value=11)
    monkeypatch.setattr(table, "ROWS", tuple(rows))
    (problem,) = intake.check_table(surface)
    assert problem.startswith("ensure_zero_padding_position:") and "answers 11" in problem
    assert "the surface says 10" in problem


@pytest.mark.wheels
def test_diff_0_2_3_post2_to_0_2_5_maps_the_mqa_removals(capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _surface("0.2.3.post2"), _surface("0.2.5")
    got = _statuses(_mapped(a, b))
    status, rows = got[("removed-function", "deep_gemm.fp8_mqa_logits", None)]
    assert status == "handled" and {"mqa_logits", "mqa_clean_logits", "mqa_max_seqlen_k"} <= set(rows)
    assert got[("removed-function", "deep_gemm.fp8_paged_mqa_logits", None)] == ("handled", ["paged_mqa_logits"])
    assert got[("removed-param", "deep_gemm.fp8_fp4_mqa_logits", "clean_logits")] == ("handled", ["mqa_clean_logits"])
    assert got[("became-required", "deep_gemm.fp8_fp4_mqa_logits", "max_seqlen_k")] == ("handled", ["mqa_max_seqlen_k"])
    assert not any(s in ("drift", "new-row") for s, _r in got.values())
    assert cli.main(["--diff", "0.2.3.post2", "0.2.5"]) == 0
    text = capsys.readouterr().out
    assert "-> handled [rows: mqa_logits, mqa_clean_logits, mqa_max_seqlen_k]: dgcompat.fp8_mqa_logits calls it" in text
    assert "unhandled drift: none" in text
    assert "capability table: agrees with sgl-deep-gemm 0.2.5" in text


@pytest.mark.wheels
def test_diff_0_1_3_to_0_1_4_maps_ensure_zero_padding() -> None:
    a, b = _surface("0.1.3"), _surface("0.1.4")
    got = _statuses(_mapped(a, b))
    sym = "deep_gemm.m_grouped_fp8_gemm_nt_contiguous"
    assert got[("added-param", sym, "ensure_zero_padding")] == ("handled", ["ensure_zero_padding_position"])
    assert got[("moved-param", sym, "expected_m_for_psum_layout")] == ("handled", ["ensure_zero_padding_position"])
    assert got[("added-function", "deep_gemm.set_pdl", None)] == ("handled", ["pdl"])


@pytest.mark.wheels
def test_no_release_step_drifts() -> None:
    """Every published release step is covered by the table (what --latest would have said each time)."""
    for old, new in itertools.pairwise(KNOWN_SGL_DEEP_GEMM):
        a, b = _surface(old), _surface(new)
        bad = [(m.change.symbol, m.change.kind, m.change.param, m.reason) for m in _mapped(a, b)
               if m.status in ("drift", "new-row")]
        assert bad == [], (old, new)


@pytest.mark.wheels
def test_table_agrees_with_the_sgl_kernel_bundle() -> None:
    surface = extract(published_wheel("sgl-kernel==0.3.21"))  # ~540 MB, downloaded once into the cache
    assert intake.check_table(surface) == []
    assert intake.check_calls(surface) == []
