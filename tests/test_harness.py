"""Tests of the conformance harness (the CPU tier): release names, signatures, stand-ins,
certificates, the command, and (marked ``wheels``) runs over real published wheels, including
a deliberately wrong adapter that must fail exactly on the releases where it is wrong.
"""

from __future__ import annotations

import json
import os
import textwrap
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import torch

from dgcompat_conformance import certificate, report
from dgcompat_conformance.certificate import Certificate
from dgcompat_conformance.harness.certificate import build
from dgcompat_conformance.harness.emulation import (
    LAYOUTS,
    NativeState,
    Profile,
    StandInHang,
    StandInNotEmulated,
    emulate,
    layout_for,
)
from dgcompat_conformance.harness.signatures import NO_DEFAULT, OpSig, Param, parse_default, value_matches
from dgcompat_conformance.harness.xfails import load_xfails, match
from dgcompat_conformance.releases import (
    SGL_DEEP_GEMM_RELEASES,
    ReleaseSpec,
    all_releases,
    parse_release,
    spec_from_wheel,
)
from testsupport.wheels import published_wheel

# --------------------------------------------------------------------------- release names


def test_release_names() -> None:
    assert parse_release("0.1.4") == ReleaseSpec("sgl-deep-gemm", "0.1.4")
    assert parse_release("sgl-deep-gemm==0.2.3.post1").id == "0.2.3.post1"
    spec = parse_release("sgl_kernel==0.3.21")
    assert (spec.dist, spec.version, spec.bundled, spec.id) == ("sgl-kernel", "0.3.21", True, "sgl-kernel-0.3.21")
    assert parse_release("sglang-kernel-0.4.1.post1").id == "sglang-kernel-0.4.1.post1"
    for bad in ("torch==2.13", "latest", ""):
        with pytest.raises(ValueError, match="expected a"):
            parse_release(bad)


def test_release_lists() -> None:
    assert len(SGL_DEEP_GEMM_RELEASES) == 21
    assert len(all_releases()) == 21
    assert len(all_releases(bundled=True)) == 25
    assert all(s.bundled for s in all_releases(bundled=True)[21:])


def test_spec_from_wheel(tmp_path: Path) -> None:
    spec = spec_from_wheel(tmp_path / "sgl_deep_gemm-0.1.5.post2-py3-none-manylinux2014_x86_64.whl")
    assert (spec.dist, spec.version) == ("sgl-deep-gemm", "0.1.5.post2")
    assert spec.wheel is not None
    with pytest.raises(ValueError, match="torch"):
        spec_from_wheel(tmp_path / "torch-2.13.0-cp311-cp311-linux_x86_64.whl")
    with pytest.raises(ValueError, match=r"notes\.txt"):
        spec_from_wheel(tmp_path / "notes.txt")


def _fake_wheel(folder: Path, name: str = "sgl_deep_gemm-9.9.9-py3-none-manylinux2014_x86_64.whl") -> Path:
    import zipfile

    path = folder / name
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("deep_gemm/__init__.py", "X = 1\n")
        zf.writestr("deep_gemm/_C.so", b"\x7fELF")
        zf.writestr("deep_gemm/include/deep_gemm/common.cuh", "// header\n")
        zf.writestr("sgl_deep_gemm-9.9.9.dist-info/METADATA", "Name: sgl-deep-gemm\nVersion: 9.9.9\n")
        zf.writestr("sgl_deep_gemm-9.9.9.dist-info/RECORD", "")
        zf.writestr("other_pkg/__init__.py", "")
    return path


def test_wheel_cache_and_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat_conformance import wheels

    monkeypatch.setenv("DGCOMPAT_CACHE", str(tmp_path / "cache"))
    assert wheels.wheel_dir() == tmp_path / "cache" / "wheels"
    wheels.wheel_dir().mkdir(parents=True)
    wheel = _fake_wheel(wheels.wheel_dir())
    spec = parse_release("9.9.9")
    assert wheels.find_cached_wheel(spec) == wheel
    assert wheels.fetch_wheel(spec) == wheel  # cached: no download
    assert wheels.find_cached_wheel(parse_release("9.9")) is None
    work = wheels.prepare_workdir(spec, wheel)
    assert work == tmp_path / "cache" / "work" / "9.9.9"
    assert (work / "deep_gemm" / "__init__.py").is_file() and (work / "deep_gemm" / "_C.so").is_file()
    assert (work / "sgl_deep_gemm-9.9.9.dist-info" / "METADATA").is_file()
    assert not (work / "deep_gemm" / "include").exists()  # the CUDA headers are skipped
    assert not (work / "other_pkg").exists()
    (work / "deep_gemm" / "marker").write_text("kept")
    assert wheels.prepare_workdir(spec, wheel) == work and (work / "deep_gemm" / "marker").exists()  # reused
    local = spec_from_wheel(wheel)
    assert wheels.fetch_wheel(local) == wheel.resolve()


# --------------------------------------------------------------------------- signatures


def test_parse_default() -> None:
    assert parse_default(None) is NO_DEFAULT
    assert parse_default("None") is None
    assert parse_default('"nk"') == "nk"
    assert parse_default("[1, 1, 128]") == [1, 1, 128]
    assert parse_default("False") is False
    assert parse_default("256") == 256
    # typed by the argument (vLLM 0.34.0's `ScalarType logits_dtype=float` is torch.float32, not 'float')
    assert parse_default("float", "ScalarType") is torch.float32
    assert parse_default("bfloat16", "ScalarType?") is torch.bfloat16
    assert parse_default("None", "ScalarType?") is None
    assert parse_default("2", "float") == 2.0 and isinstance(parse_default("2", "float"), float)
    assert parse_default("1", "int[3]") == [1, 1, 1]  # torch broadcasts a scalar default of int[N]
    assert parse_default("[1, 2]", "float[]") == [1.0, 2.0]
    assert parse_default("'deep_gemm'", "str") == "deep_gemm"
    assert parse_default("strided", "Layout?") is torch.strided
    assert parse_default("contiguous_format", "MemoryFormat") is torch.contiguous_format
    assert parse_default('"cpu"', "Device") == torch.device("cpu")
    assert parse_default("no_such_dtype", "ScalarType") == "no_such_dtype"  # left as text, refused by the check


@pytest.mark.parametrize(
    ("type_", "kind", "optional"),
    [("Tensor", "tensor", False), ("Tensor(a!)", "tensor", False), ("Tensor(z!)?", "tensor", True),
     ("int?", "int", True), ("(int, int, int)?", "ints", True), ("int[]", "ints", False), ("str", "str", False),
     ("Any", "any", True), ("ScalarType", "dtype", False), ("float?", "float", True), ("bool", "bool", False)],
)
def test_param_kinds(type_: str, kind: str, optional: bool) -> None:
    p = Param(None, type_)
    assert p.kind == kind
    assert p.optional is optional


def test_value_matches() -> None:
    t = torch.zeros(2)
    assert value_matches(Param(None, "Tensor"), t)
    assert not value_matches(Param(None, "Tensor"), None)
    assert value_matches(Param(None, "Tensor?"), None)
    assert not value_matches(Param(None, "int"), "8")
    assert value_matches(Param(None, "(int, int, int)?"), (1, 128, 128))
    assert not value_matches(Param(None, "(int, int, int)?"), (1, 128))
    assert not value_matches(Param(None, "str"), 3)
    assert value_matches(Param(None, "ScalarType"), torch.float32)


# --------------------------------------------------------------------------- stand-ins


def _profile(flavor: str = "sgl", version: str = "0.1.4", binding: str = "tvm-ffi") -> Profile:
    return Profile(dist="sgl-deep-gemm" if flavor == "sgl" else "sgl-kernel", version=version, flavor=flavor,
                   binding=binding, schedule_balance="tail" if flavor == "sgl" else "head")


def _installed(ops: dict[str, OpSig], profile: Profile | None = None) -> Any:
    from dgcompat_conformance.harness.standins import Installed

    return Installed(profile or _profile(), NativeState(), Path("/nonexistent/_C.so"), ops, Path("/tmp"))


def test_tvm_function_checks_calls_like_tvm_ffi() -> None:
    from dgcompat_conformance.harness.standins import TvmModule

    ops = {
        "get_num_sms": OpSig("get_num_sms", (), "?", "tvm-ffi"),
        "set_num_sms": OpSig("set_num_sms", (Param(None, "int"),), "?", "tvm-ffi"),
    }
    mod = TvmModule(_installed(ops))
    assert mod.get_num_sms() == 132
    mod.set_num_sms(100)
    assert mod.get_num_sms() == 100
    with pytest.raises(TypeError):
        mod.set_num_sms(new_num_sms=8)  # positional arguments only
    with pytest.raises(TypeError):
        mod.set_num_sms()
    with pytest.raises(TypeError):
        mod.set_num_sms("8")
    with pytest.raises(RuntimeError):
        mod.set_num_sms(1000)  # more SMs than the emulated H200 has
    with pytest.raises(AttributeError):
        mod.set_compile_mode  # noqa: B018 - absent functions raise AttributeError, as tvm_ffi.Module does


def test_layouts_are_well_formed() -> None:
    for (flavor, op), table in LAYOUTS.items():
        assert flavor in ("sgl", "bundled")
        for arity, names in table.items():
            assert len(names) == arity, (flavor, op, arity)
            assert len(set(names)) == arity, (flavor, op, arity)
    thirteen = layout_for("sgl", "m_grouped_fp8_fp4_gemm_nt_contiguous", 13)
    assert thirteen is not None and thirteen[-1] == "expected_m_for_psum_layout"
    assert "ensure_zero_padding" in (layout_for("sgl", "m_grouped_fp8_fp4_gemm_nt_contiguous", 14) or ())


def test_unknown_arity_is_not_emulated() -> None:
    with pytest.raises(StandInNotEmulated):
        emulate(_profile(), NativeState(), "fp8_fp4_gemm_nt", (None,) * 5)
    with pytest.raises(StandInNotEmulated):
        emulate(_profile(), NativeState(), "fp8_mega_moe", ())


def _paged_inputs(lens: list[int], next_n: int = 1) -> dict[str, Any]:
    from dgcompat import reference

    b = len(lens)
    q = torch.randn((b, next_n, 32, 128)).to(torch.float8_e4m3fn)
    kv = reference.pack_kv_cache(torch.randn((b * 10, 64, 128)))
    w = torch.rand((b * next_n, 32))
    table = torch.arange(b * 10, dtype=torch.int32).view(b, 10)
    ctx = torch.tensor([[max(v - next_n + j + 1, 1) for j in range(next_n)] for v in lens], dtype=torch.int32)
    return {"q": q, "kv": kv, "w": w, "table": table, "ctx": ctx}


def test_paged_context_lens_rules_by_flavor() -> None:
    x = _paged_inputs([100, 300])
    state = NativeState()
    # sgl-deep-gemm: 2-D only (docs/sources/gpu-observed.md); bundled copies: 1-D only (docs/sources/upstream-history.md §3).
    emulate(_profile("sgl"), state, "get_paged_mqa_logits_metadata", (x["ctx"], 64, 132, None))
    with pytest.raises(RuntimeError, match=r"context_lens.dim\(\) == 2"):
        emulate(_profile("sgl"), state, "get_paged_mqa_logits_metadata", (x["ctx"].view(-1), 64, 132, None))
    bundled = _profile("bundled", "0.3.21", "torch-library")
    emulate(bundled, state, "get_paged_mqa_logits_metadata", (x["ctx"].view(-1), 64, 132))
    with pytest.raises(RuntimeError, match=r"context_lens.dim\(\) == 1"):
        emulate(bundled, state, "get_paged_mqa_logits_metadata", (x["ctx"], 64, 132))


def test_paged_next_n_and_block_table_rules() -> None:
    state = NativeState()
    x = _paged_inputs([100, 300], next_n=3)
    meta = emulate(_profile(), state, "get_paged_mqa_logits_metadata", (x["ctx"], 64, 132, None))
    with pytest.raises(RuntimeError, match="next_n == 1 or next_n == 2"):
        emulate(_profile(), state, "fp8_paged_mqa_logits",
                (x["q"], x["kv"], x["w"], x["ctx"], x["table"], meta, 640, False, None))
    x = _paged_inputs([100, 300])
    meta = emulate(_profile(), state, "get_paged_mqa_logits_metadata", (x["ctx"], 64, 132, None))
    strided = torch.zeros((2, 20), dtype=torch.int32)[:, ::2]
    strided.copy_(x["table"])
    with pytest.raises(RuntimeError, match=r"block_table.stride\(1\) == 1"):
        emulate(_profile(), state, "fp8_paged_mqa_logits",
                (x["q"], x["kv"], x["w"], x["ctx"], strided, meta, 640, False, None))
    out = emulate(_profile(), state, "fp8_paged_mqa_logits",
                  (x["q"], x["kv"], x["w"], x["ctx"], x["table"], meta, 640, False, None))
    assert tuple(out.shape) == (2, 640) and out.stride(0) == 768  # rows padded to a multiple of 256


def test_stale_schedule_is_a_hang() -> None:
    state = NativeState()
    x = _paged_inputs([100, 300])
    longer = torch.tensor([[600], [600]], dtype=torch.int32)
    stale = emulate(_profile(), state, "get_paged_mqa_logits_metadata", (x["ctx"], 64, 132, None))
    with pytest.raises(StandInHang):
        emulate(_profile(), state, "fp8_paged_mqa_logits",
                (x["q"], x["kv"], x["w"], longer, x["table"], stale, 640, False, None))
    assert state.hangs == ["fp8_paged_mqa_logits"]
    # Not an Exception: no `except Exception` in an adapter may turn a hang into an ordinary error.
    assert not issubclass(StandInHang, Exception)


def test_schedule_num_sms_must_match_launch() -> None:
    state = NativeState()
    x = _paged_inputs([100, 300])
    meta = emulate(_profile(), state, "get_paged_mqa_logits_metadata", (x["ctx"], 64, 132, None))
    state.num_sms = 100
    with pytest.raises(RuntimeError, match="num_sms"):
        emulate(_profile(), state, "fp8_paged_mqa_logits",
                (x["q"], x["kv"], x["w"], x["ctx"], x["table"], meta, 640, False, None))


def test_reference_rejections_look_native() -> None:
    from dgcompat import reference
    from dgcompat.errors import DgcompatError

    a = reference.per_token_cast_to_fp8(torch.randn(64, 256))
    b = reference.per_block_cast_to_fp8(torch.randn(128, 384))  # K mismatch
    d = torch.empty(64, 128, dtype=torch.bfloat16)
    args = (a[0], a[1], b[0], b[1], d, None, None, None, None, "", False)
    with pytest.raises(RuntimeError) as info:
        emulate(_profile(), NativeState(), "fp8_fp4_gemm_nt", args)
    assert not isinstance(info.value, DgcompatError)


def test_grouped_contiguous_alignment() -> None:
    from dgcompat import reference

    a = reference.per_token_cast_to_fp8(torch.randn(100, 128))
    b = tuple(t.unsqueeze(0) for t in reference.per_block_cast_to_fp8(torch.randn(128, 128)))
    d = torch.empty(100, 128, dtype=torch.bfloat16)
    idx = torch.zeros(100, dtype=torch.int32)
    args = (a[0], a[1], b[0], b[1], d, idx, None, None, None, "nk", False, False, True, None)
    with pytest.raises(RuntimeError, match="get_mk_alignment_for_contiguous_layout"):
        emulate(_profile(), NativeState(), "m_grouped_fp8_fp4_gemm_nt_contiguous", args)


def test_bundled_masked_returns_pair() -> None:
    from dgcompat import reference

    a = [reference.per_token_cast_to_fp8(torch.randn(16, 128)) for _ in range(2)]
    a_pair = (torch.stack([x[0] for x in a]), torch.stack([x[1] for x in a]))
    b = [reference.per_block_cast_to_fp8(torch.randn(64, 128)) for _ in range(2)]
    b_pair = (torch.stack([x[0] for x in b]), torch.stack([x[1] for x in b]))
    d = torch.zeros(2, 16, 64, dtype=torch.bfloat16)
    masked = torch.tensor([3, 16], dtype=torch.int32)
    bundled = _profile("bundled", "0.3.21", "torch-library")
    out = emulate(bundled, NativeState(), "m_grouped_fp8_gemm_nt_masked",
                  (a_pair, b_pair, d, masked, 8, None, "nk", False, 256, False, None))
    assert out == (None, None)


# --------------------------------------------------------------------------- xfail files and certificates


def test_xfail_files(tmp_path: Path) -> None:
    (tmp_path / "0.1.4.txt").write_text(textwrap.dedent("""\
        # upstream: the wrappers' torch.Tensor(...) bug
        # (docs/sources/wheel-matrix.md §1 item 8)
        dgcompat_conformance/suite/test_x.py::test_a

        dgcompat_conformance/suite/test_x.py::test_b[1]
        # another cause
        dgcompat_conformance/suite/test_y.py::test_c
        """))
    entries = load_xfails("0.1.4", tmp_path)
    assert [e.nodeid for e in entries] == ["dgcompat_conformance/suite/test_x.py::test_a",
                                          "dgcompat_conformance/suite/test_x.py::test_b[1]",
                                          "dgcompat_conformance/suite/test_y.py::test_c"]
    assert entries[0].reason.startswith("upstream: the wrappers'") and entries[1].reason == entries[0].reason
    assert entries[2].reason == "another cause"
    assert match(entries[0], "dgcompat_conformance/suite/test_x.py::test_a[7]")
    assert not match(entries[1], "dgcompat_conformance/suite/test_x.py::test_b[2]")
    assert load_xfails("9.9.9", tmp_path) == []


def _cert(outcomes: list[str], **extra: Any) -> Certificate:
    child = {
        "tier": "cpu-tier",
        "environment": {"torch": "2.13", "python": "3.11", "platform": "linux", "device": "cpu-tier", "arch": "sm90",
                        "dgcompat_version": "0.1.0"},
        "standins": {"binding": "tvm-ffi"},
        "tests": [{"id": f"t{i}", "outcome": o, "duration": 0.1, "message": ""} for i, o in enumerate(outcomes)],
        **extra,
    }
    return build(child, release="0.1.4", distribution="sgl-deep-gemm")


def test_certificate_summary_equals_counts() -> None:
    cert = _cert(["passed", "passed", "failed", "xfailed", "skipped", "error"])
    assert cert.summary == {"passed": 2, "failed": 1, "skipped": 1, "xfailed": 1, "xpassed": 0, "error": 1}
    assert certificate.check(cert) == []
    assert cert.verdict == "FAIL"
    assert cert.device == "cpu-tier" and cert.tier == "cpu-tier" and cert.binding == "tvm-ffi"
    tampered = dict(cert.to_json(), summary=dict(cert.summary, passed=5))
    assert any("does not equal" in p for p in certificate.check(tampered))
    json.dumps(cert.to_json())  # serializable as is


def test_certificate_verdicts_and_table() -> None:
    ok = _cert(["passed", "xfailed", "skipped"])
    assert ok.verdict == "PASS"
    assert _cert([]).verdict == "ERROR"
    assert _cert(["passed"], harness_error="child timed out").verdict == "ERROR"
    assert _cert(["xpassed"]).verdict == "FAIL"
    table = report.conform_table([ok])
    assert "0.1.4" in table and "PASS" in table and "xfailed" in table
    assert "0.1.4" in report.progress_line(1, 21, ok)


def test_cli_usage(monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat_conformance import intake
    from dgcompat_conformance.conform import main

    monkeypatch.setattr(intake, "main_latest", lambda argv: 7)  # --latest is the intake check's job
    assert main(["--latest"]) == 7
    assert main(["--release", "torch==2.13"]) == 2
    assert main(["--list"]) == 0
    assert main(["--no-such-option"]) == 2


# --------------------------------------------------------------------------- real wheels

# The release set of the wheel tests: both binding eras, the 0.1.4 argument insertion, 0.2.0's
# wrapper fix, 0.2.5's removal of fp8_paged_mqa_logits; plus one bundled copy (a ~540 MB wheel, downloaded
# once into the cache).
_WHEEL_SET = ["0.0.1", "0.1.4", "0.2.0", "0.2.3", "0.2.5", "sgl-kernel==0.3.21"]


def _wheel_specs() -> list[ReleaseSpec]:
    for release in _WHEEL_SET:
        published_wheel(release)  # the wheels tier never skips a release for a wheel not yet cached
    return [parse_release(v) for v in _WHEEL_SET]


_WRONG_ADAPTER = '''
"""dgcompat with two deliberate mistakes, for the harness tests."""
import deep_gemm
import dgcompat


def __getattr__(name):
    return getattr(dgcompat, name)


def m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices, *, recipe=None):
    # Mistake 1: the fourth argument by keyword (it is grouped_layout in sgl-deep-gemm).
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices=m_indices)


def _one_d(lens):
    # Mistake 2: context_lens left 1-D (one length per sequence), whatever the release wants.
    return lens if lens.dim() == 1 else lens[:, -1].contiguous()


def get_paged_mqa_logits_metadata(context_lens, block_kv, num_sms=None, *, out=None):
    return deep_gemm.get_paged_mqa_logits_metadata(_one_d(context_lens), block_kv,
                                                   num_sms or deep_gemm.get_num_sms())


def fp8_paged_mqa_logits(q, kv_cache, weights, context_lens, block_table, schedule_meta, max_context_len, *,
                         clean_logits=False):
    lens = _one_d(context_lens)
    fn = getattr(deep_gemm, "fp8_paged_mqa_logits", None)
    if fn is None:
        return deep_gemm.fp8_fp4_paged_mqa_logits((q, None), kv_cache, weights, lens, block_table, schedule_meta,
                                                  max_context_len)
    return fn(q, kv_cache, weights, lens, block_table, schedule_meta, max_context_len, False)
'''

_HANG_PROBE = '''
import pytest
import torch


def test_probe_swallowed_hang():
    """Launches a stale schedule through deep_gemm itself and swallows the stand-in's hang."""
    import deep_gemm
    from dgcompat_conformance.harness.emulation import StandInHang
    from dgcompat_conformance.suite import _support as S

    case = S.paged_case(2, 1, [40, 600], S.gen(0))
    bundled = S.flavor() == "bundled"
    lens = case.context_lens("1d" if bundled else "2d")
    meta = deep_gemm.get_paged_mqa_logits_metadata(lens, 64, deep_gemm.get_num_sms())
    longer = (lens * 0 + 600).contiguous()  # 3 schedule units per sequence instead of 1 and 3
    fn = getattr(deep_gemm, "fp8_paged_mqa_logits", None)
    n = case.max_context_len
    try:
        if fn is None:
            deep_gemm.fp8_fp4_paged_mqa_logits((case.q, None), case.kv_cache, case.weights, longer,
                                               case.block_table, meta, n)
        else:
            fn(case.q, case.kv_cache, case.weights, longer, case.block_table, meta, n, False)
    except StandInHang:
        pass
'''


@pytest.mark.wheels
def test_wrong_adapter_fails_exactly_where_it_is_wrong(tmp_path: Path) -> None:
    """The suite, run against a wrong adapter, fails on exactly the releases where the adapter is wrong."""
    from dgcompat_conformance.harness.child import SUITE_DIR
    from dgcompat_conformance.harness.runner import RunOptions, run_many

    (tmp_path / "wrong_adapter.py").write_text(_WRONG_ADAPTER)
    probe = tmp_path / "probe_hang.py"
    probe.write_text(_HANG_PROBE)
    specs = _wheel_specs()
    opts = RunOptions(
        out_dir=tmp_path / "out",
        tests=[SUITE_DIR / "test_stable_moe.py", SUITE_DIR / "test_stable_indexer.py", probe],
        subject="wrong_adapter",
        keyword="test_m_grouped_fp8_contiguous or test_paged_forms or test_probe_swallowed_hang",
        examples=2,
        no_xfails=True,
        extra_env={"PYTHONPATH": str(tmp_path)},
        timeout=600,
    )
    certs = {c.release: c for c in run_many(specs, opts, jobs=2)}
    assert set(certs) == {s.id for s in specs}

    def failed(cert: Certificate, name: str) -> bool:
        picked = [t for t in cert.tests if f"::{name}" in t["id"]]
        assert picked, f"{name} did not run on {cert.release}: {cert.harness_error}"
        return any(t["outcome"] in ("failed", "error") for t in picked)

    def next_n_one(cert: Certificate) -> list[Mapping[str, Any]]:
        # With next_n = 1 every form reduces to one length per sequence, which the wrong adapter passes 1-D.
        return [t for t in cert.tests if "::test_paged_forms[" in t["id"] and t["id"].endswith("-1]")]

    for rid, cert in certs.items():
        assert certificate.check(json.loads((tmp_path / "out" / f"{rid}.json").read_text())) == []
        assert cert.standins is not None
        assert cert.standins["mapped_native_libraries"] == [], "a native library was loaded"
        assert cert.standins["native_loaded"] is True
        sgl = not rid.startswith(("sgl-kernel", "sglang-kernel"))
        # keyword m_indices: a TypeError on every sgl-deep-gemm release (the argument is grouped_layout),
        # fine on the bundled copies (docs/sources/gpu-observed.md, docs/sources/upstream-history.md §1.2).
        assert failed(cert, "test_m_grouped_fp8_contiguous") is sgl, rid
        # 1-D context_lens: rejected by every sgl-deep-gemm release, what the bundled copies want.
        outcomes = {t["outcome"] for t in next_n_one(cert)}
        assert outcomes == ({"failed"} if sgl else {"passed"}), (rid, outcomes)
        # A hang swallowed by an adapter still fails the test and is counted.
        assert failed(cert, "test_probe_swallowed_hang"), rid
        assert cert.standins["hangs"] == ["fp8_fp4_paged_mqa_logits" if rid == "0.2.5" else "fp8_paged_mqa_logits"]


@pytest.mark.wheels
def test_correct_adapter_passes_the_same_selection(tmp_path: Path) -> None:
    """Control for the test above: dgcompat itself passes the same tests on the same releases."""
    from dgcompat_conformance.harness.child import SUITE_DIR
    from dgcompat_conformance.harness.runner import RunOptions, run_many

    opts = RunOptions(
        out_dir=tmp_path / "out",
        tests=[SUITE_DIR / "test_stable_moe.py", SUITE_DIR / "test_stable_indexer.py"],
        keyword="test_m_grouped_fp8_contiguous or test_paged_forms",
        examples=2,
        no_xfails=True,
        timeout=600,
    )
    for cert in run_many(_wheel_specs(), opts, jobs=2):
        assert cert.verdict == "PASS", (cert.release, cert.harness_error,
                                        [t for t in cert.tests if t["outcome"] != "passed"][:3])
        assert cert.summary["passed"] > 20


_XFAIL_PROBE = """
def test_passes():
    import deep_gemm
    assert deep_gemm.get_num_sms() > 0


def test_fails_as_listed():
    raise AssertionError("an upstream bug")


def test_fails_unlisted():
    raise AssertionError("a real failure")
"""


@pytest.mark.wheels
def test_xfail_files_are_strict_and_stale_entries_reported(tmp_path: Path) -> None:
    from dgcompat_conformance.harness.runner import RunOptions, run_release

    probe = tmp_path / "probe_xfail.py"
    probe.write_text(_XFAIL_PROBE)
    xfails = tmp_path / "xfails"
    xfails.mkdir()
    node = "probe_xfail.py"  # files outside the repository get ids relative to their own folder
    cert_dir = tmp_path / "out"
    spec = parse_release("0.1.4")
    # First learn the node id prefix pytest gives the probe, then list the tests in the xfail file.
    first = run_release(spec, RunOptions(out_dir=cert_dir, tests=[probe], no_xfails=True, timeout=300))
    ids = {t["id"].rsplit("::", 1)[1]: t["id"] for t in first.tests}
    assert set(ids) == {"test_passes", "test_fails_as_listed", "test_fails_unlisted"}, first.harness_error
    assert ids["test_passes"] == node + "::test_passes"
    (xfails / "0.1.4.txt").write_text(
        "# upstream: a documented bug (made up for this test)\n"
        f"{ids['test_fails_as_listed']}\n"
        "# wrongly listed: this test passes\n"
        f"{ids['test_passes']}\n"
        "# a test that no longer exists\n"
        "dgcompat_conformance/suite/test_gone.py::test_gone\n"
    )
    cert = run_release(spec, RunOptions(out_dir=cert_dir, tests=[probe], xfails=xfails, timeout=300))
    outcome = {t["id"].rsplit("::", 1)[1]: t["outcome"] for t in cert.tests}
    assert outcome == {"test_passes": "failed", "test_fails_as_listed": "xfailed", "test_fails_unlisted": "failed"}
    assert [e["nodeid"] for e in cert.stale_xfails or ()] == ["dgcompat_conformance/suite/test_gone.py::test_gone"]
    assert cert.summary["xfailed"] == 1 and cert.verdict == "FAIL"
    assert certificate.check(cert) == []


@pytest.mark.slow  # the README's first command (`dgcompat conform`) runs this suite on the reference backend too
def test_every_suite_file_passes_on_the_reference_backend(tmp_path: Path) -> None:
    """The conformance suite through the harness child on dgcompat's reference backend, one example per generated
    test (with the default examples: `dgcompat conform --reference`, the README's first command; over the published
    wheels: the wheels tier)."""
    from dgcompat_conformance.conform import main
    from dgcompat_conformance.harness.child import SUITE_DIR

    out = tmp_path / "out"
    assert main(["--reference", "--examples", "1", "--out", str(out), "--quiet"]) == 0
    cert = json.loads((out / "reference.json").read_text())
    assert certificate.check(cert) == [] and cert["verdict"] == "PASS", cert["summary"]
    files = {path.name for path in SUITE_DIR.glob("test_*.py")}
    ran: dict[str, list[str]] = {t["id"].split("::")[0].rsplit("/", 1)[-1]: [] for t in cert["tests"]}
    for t in cert["tests"]:
        ran[t["id"].split("::")[0].rsplit("/", 1)[-1]].append(t["outcome"])
    assert set(ran) == files and all(set(outcomes) <= {"passed", "skipped"} for outcomes in ran.values()), ran
    # The raw tests call deep_gemm itself, which the reference backend does not install; every other file computes.
    assert {f for f, outcomes in ran.items() if "passed" in outcomes} == files - {"test_raw_deep_gemm.py"}


# --------------------------------------------------------------------------- untrusted input (file names, cache)


def _real_wheel(version: str) -> Path:
    return published_wheel(version)


@pytest.mark.parametrize("version", ["..", "."])
def test_wheel_file_names_never_leave_the_cache(version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    from dgcompat_conformance import wheels
    from dgcompat_conformance.conform import main

    cache = tmp_path / "cache"
    monkeypatch.setenv("DGCOMPAT_CACHE", str(cache))
    (cache / "work" / "0.1.4").mkdir(parents=True)
    (cache / "work" / "0.1.4" / "kept").write_text("another release's folder")
    (cache / "precious").write_text("the rest of the cache")
    evil = _fake_wheel(tmp_path, f"sgl_deep_gemm-{version}-py3-none-any.whl")
    with pytest.raises(ValueError, match="not a wheel file name"):
        spec_from_wheel(evil)
    assert main(["--wheel", str(evil), "--out", str(tmp_path / "out"), "--quiet"]) == 2
    assert "not a wheel file name" in capsys.readouterr().err
    # A spec built by hand with such a version is refused where the folder is made, before any removal.
    with pytest.raises(wheels.FetchError, match="not a valid cache entry name"):
        wheels.prepare_workdir(ReleaseSpec("sgl-deep-gemm", version), evil)
    assert (cache / "precious").read_text() == "the rest of the cache"
    assert (cache / "work" / "0.1.4" / "kept").is_file()


def test_a_corrupt_cache_entry_is_fetched_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat_conformance import wheelcache

    folder = tmp_path / "wheels"
    folder.mkdir()
    good = _fake_wheel(tmp_path)
    cached = folder / good.name
    cached.write_bytes(good.read_bytes()[:50])  # truncated
    fetched: list[str] = []

    def download(dist: str, version: str, into: Path, timeout: float) -> Path:
        fetched.append(f"{dist}=={version}")
        tmp = into / ".download-x.whl"
        tmp.write_bytes(good.read_bytes())
        os.replace(tmp, into / good.name)
        wheelcache._record(into / good.name, wheelcache.sha256_file(into / good.name))
        return into / good.name

    monkeypatch.setattr(wheelcache, "_download", download)
    assert wheelcache.verify(cached) is not None
    assert wheelcache.fetch("sgl-deep-gemm", "9.9.9", directory=folder) == cached
    assert fetched == ["sgl-deep-gemm==9.9.9"] and cached.read_bytes() == good.read_bytes()
    # Now recorded: a later change of the file is caught by its hash, even when it is still a valid zip.
    assert wheelcache.fetch("sgl-deep-gemm", "9.9.9", directory=folder) == cached and len(fetched) == 1
    (tmp_path / "other").mkdir()
    other = _fake_wheel(tmp_path / "other")
    import zipfile

    with zipfile.ZipFile(other, "a") as zf:
        zf.writestr("deep_gemm/extra.py", "Y = 2\n")
    cached.write_bytes(other.read_bytes())  # a valid zip, but not the file that was recorded
    assert "sha256" in (wheelcache.verify(cached) or "")
    with pytest.raises(wheelcache.CacheError, match="corrupt"):
        wheelcache.fetch("sgl-deep-gemm", "9.9.9", directory=folder, download=False)


_PROBE_OK = """
def test_imports():
    import deep_gemm
    assert deep_gemm.get_num_sms() > 0
"""


@pytest.mark.wheels
def test_a_truncated_wheel_does_not_stop_the_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One truncated wheel: detected, fetched again, and every release of the run gets its certificate."""
    import shutil
    import tempfile

    from dgcompat_conformance import wheelcache
    from dgcompat_conformance.harness.runner import RunOptions, run_many

    sources = {v: _real_wheel(v) for v in ("0.1.3", "0.1.4")}
    cache = tmp_path / "cache"
    (cache / "wheels").mkdir(parents=True)
    monkeypatch.setenv("DGCOMPAT_CACHE", str(cache))
    for wheel in sources.values():
        shutil.copy(wheel, cache / "wheels" / wheel.name)
    truncated = cache / "wheels" / sources["0.1.3"].name
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    fetched: list[str] = []

    def download(dist: str, version: str, into: Path, timeout: float) -> Path:  # the index, offline
        fetched.append(version)
        target = into / sources[version].name
        shutil.copy(sources[version], into / ".incoming")
        os.replace(into / ".incoming", target)
        return target

    monkeypatch.setattr(wheelcache, "_download", download)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    probe = tmp_path / "probe_ok.py"
    probe.write_text(_PROBE_OK)
    opts = RunOptions(out_dir=tmp_path / "out", tests=[probe], no_xfails=True, timeout=300,
                      extra_env={"TMPDIR": str(scratch)})
    certs = run_many([parse_release("0.1.3"), parse_release("0.1.4")], opts, jobs=1)
    assert fetched == ["0.1.3"]
    assert [(c.release, c.verdict) for c in certs] == [("0.1.3", "PASS"), ("0.1.4", "PASS")], \
        [c.harness_error for c in certs]
    assert sorted(p.name for p in (tmp_path / "out").glob("*.json")) == ["0.1.3.json", "0.1.4.json"]
    assert wheelcache.verify(truncated) is None
    # Every CPU-tier child removes its empty CUDA_HOME folder.
    assert list(scratch.rglob("dgcompat-cuda-home-*")) == []


@pytest.mark.wheels
def test_standins_cuda_home_is_removed_at_exit(tmp_path: Path) -> None:
    """The empty CUDA_HOME the stand-ins make is gone once the child process exits."""
    import subprocess
    import sys

    wheel = _real_wheel("0.1.4")
    from dgcompat_conformance.wheels import prepare_workdir

    work = prepare_workdir(ReleaseSpec("sgl-deep-gemm", "0.1.4"), wheel, root=tmp_path / "work")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = ("import sys; from pathlib import Path; from dgcompat_conformance.harness.standins import install; "
            f"i = install(Path({str(work)!r}), dist='sgl-deep-gemm', version='0.1.4'); "
            "print(i.cuda_home); assert i.cuda_home.is_dir()")
    env = dict(os.environ, TMPDIR=str(scratch))
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    made = Path(proc.stdout.strip().splitlines()[-1])
    assert made.parent == scratch and made.name.startswith("dgcompat-cuda-home-")
    assert not made.exists()


@pytest.mark.slow
def test_standins_cuda_home_of_a_killed_process_is_swept(tmp_path: Path) -> None:
    """A process killed before its atexit hooks leaves its CUDA_HOME; the next one removes it, and only litter."""
    import signal
    import subprocess
    import sys
    import time

    from dgcompat_conformance.harness.standins import make_cuda_home, sweep_cuda_homes

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    code = ("import os, signal, sys; from pathlib import Path; "
            "from dgcompat_conformance.harness.standins import make_cuda_home; "
            f"print(make_cuda_home(Path({str(scratch)!r})), flush=True); os.kill(os.getpid(), signal.SIGKILL)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    killed = Path(proc.stdout.strip().splitlines()[-1])
    assert killed.is_dir() and killed.parent == scratch  # atexit did not run
    dead_pid = int(killed.name.split("-")[3])
    busy = scratch / f"dgcompat-cuda-home-{dead_pid}-busy"  # a dead pid's folder that holds something
    busy.mkdir()
    (busy / "keep").write_text("x")
    legacy_old, legacy_new = scratch / "dgcompat-cuda-home-abcd1234", scratch / "dgcompat-cuda-home-efgh5678"
    legacy_old.mkdir()
    legacy_new.mkdir()
    old = time.time() - 7200
    os.utime(legacy_old, (old, old))
    mine = make_cuda_home(scratch)  # sweeps first
    assert not killed.exists() and not legacy_old.exists()
    assert busy.is_dir() and legacy_new.is_dir() and mine.is_dir()  # never removes what may be in use
    assert sweep_cuda_homes(scratch) == []  # this process's own folder stays until it exits


# --------------------------------------------------------------------------- the command's own input


def test_conform_rejects_bad_numbers_and_unwritable_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from dgcompat_conformance.conform import main

    for argv in (["--jobs", "-3"], ["--jobs", "0"], ["--timeout", "0"], ["--timeout", "-1"], ["--timeout", "nan"],
                 ["--examples", "0"]):
        assert main(["--release", "0.1.4", *argv]) == 2, argv
        err = capsys.readouterr().err
        assert "error: argument" in err and "Traceback" not in err, argv
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    assert main(["--release", "0.1.4", "--out", str(blocker / "certs")]) == 2
    err = capsys.readouterr().err
    assert "argument --out: expected a folder to write into" in err and "a-file is a file" in err
    assert "Traceback" not in err and not (blocker / "certs").exists()


def test_latest_is_dispatched_once_with_its_options(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from dgcompat_conformance import cli
    from dgcompat_conformance.intake import newest

    seen: list[dict[str, Any]] = []

    def fake_latest(**kw: Any) -> Any:
        seen.append(kw)
        raise newest.IntakeError("offline")

    monkeypatch.setattr(newest, "latest", fake_latest)
    argv = ["--latest", "--version", "0.2.5", "--no-cpu-tier", "--arch", "sm100", "--out", str(tmp_path),
            "--timeout", "30"]
    assert cli.main(["conform", *argv]) == 2
    assert cli.main(["conform", *argv[1:], "--latest"]) == 2  # wherever --latest stands
    from dgcompat_conformance.conform import main as conform_main

    assert conform_main(argv) == 2  # the same path when called as `dgcompat conform`'s own function
    assert len(seen) == 3
    for kw in seen:
        assert (kw["version"], kw["cpu_tier"], kw["arch"], kw["out_dir"], kw["timeout"]) == \
            ("0.2.5", False, "sm100", tmp_path, 30.0)
    assert cli.main(["conform", "--latest", "--timeout", "0"]) == 2 and len(seen) == 3


# --------------------------------------------------------------------------- one certificate schema


def test_committed_certificates_of_both_tiers_are_sound() -> None:
    from dgcompat_conformance.certificate import COMMITTED, committed

    certs = committed()
    assert len(certs) == len(list(COMMITTED.glob("*.json"))) > 40
    assert {c.tier for c in certs} == {"cpu-tier", "gpu"}
    assert any(c.case_run for c in certs) and any(not c.case_run for c in certs)


def test_gpu_certificates_are_checked_like_cpu_ones(tmp_path: Path) -> None:
    from dgcompat_conformance.certificate import COMMITTED, CertificateError
    from dgcompat_conformance.gpu.certify import write_certificate
    from dgcompat_conformance.report import gpu_certificates

    doc = json.loads((COMMITTED / "gpu-0.1.4.json").read_text())
    assert certificate.check(doc) == []
    assert write_certificate(Certificate.from_json(doc), tmp_path).name == "gpu-0.1.4.json"
    assert [c.release for c in gpu_certificates(tmp_path)] == ["0.1.4"]
    tampered = dict(doc, summary=dict(doc["summary"], passed=99))
    assert any("does not equal" in p for p in certificate.check(tampered))
    with pytest.raises(CertificateError, match="unsound"):
        write_certificate(replace(Certificate.from_json(doc), summary=tampered["summary"]), tmp_path / "other")
    assert not (tmp_path / "other").exists()
    (tmp_path / "gpu-0.1.5.json").write_text(json.dumps(dict(doc, release="0.1.5", tests=doc["tests"][:-1])))
    with pytest.raises(CertificateError, match=r"gpu-0\.1\.5\.json"):
        gpu_certificates(tmp_path)
    bad_outcome = dict(doc, tests=[dict(doc["tests"][0], outcome="maybe"), *doc["tests"][1:]])
    assert any("outcome 'maybe'" in p for p in certificate.check(bad_outcome))
    assert any("contradicts" in p for p in certificate.check(dict(doc, verdict="certified", tests=[],
                                                                      summary=dict.fromkeys(doc["summary"], 0))))


@pytest.mark.wheels
def test_gpu_runner_reads_wheels_through_the_cache_rules() -> None:
    """The GPU runner finds wheels by parsed name and reads the tvm-ffi pin from metadata, as recorded on the H200."""
    from dgcompat_conformance.certificate import committed
    from dgcompat_conformance.gpu.install import find_wheel, tvm_ffi_pin

    checked = 0
    folder = None
    for cert in committed():
        if cert.tier != "gpu" or cert.wheel_file is None or not cert.wheel_file.startswith("sgl_deep_gemm-"):
            continue
        folder = published_wheel(cert.release).parent
        wheel = find_wheel([folder], "SGL_Deep.Gemm", cert.release)
        assert wheel is not None and wheel.name == cert.wheel_file
        assert tvm_ffi_pin(wheel) == (cert.wheel or {}).get("apache_tvm_ffi"), cert.release
        checked += 1
    assert checked > 0 and folder is not None, "no GPU certificate names an sgl-deep-gemm wheel"
    assert find_wheel([folder], "sgl-deep-gemm", "9.9.9") is None
