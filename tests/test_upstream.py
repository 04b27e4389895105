"""Upstream DeepGEMM 2.x (vLLM's and TensorRT-LLM's copies): the table's rows and the adapters that honour them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
from packaging.version import Version

import dgcompat
from dgcompat import reference as R
from dgcompat import table
from dgcompat.detection import Release

D = 128


def _upstream(version: str, **kw: Any) -> Release:
    return Release("deep-gemm", Version(version), "vendored", "stable-abi", None, None, None, None, None, True, **kw)


@pytest.mark.parametrize(("version", "mqa", "paged", "clean", "seqlen", "q_form", "det"), [
    ("2.6.1", "fp8_mqa_logits", "fp8_paged_mqa_logits", "native", "optional", "bare", None),
    ("2.8.1", "fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits", "emulated", "positive", "pair", "off"),
])
def test_upstream_rows(version: str, mqa: str, paged: str, clean: str, seqlen: str, q_form: str,
                       det: str | None) -> None:
    caps = table.compute(_upstream(version), backend="deep_gemm", arch="sm90")
    assert (caps.mqa_logits, caps.paged_mqa_logits, caps.mqa_clean_logits) == (mqa, paged, clean)
    assert (caps.mqa_max_seqlen_k, caps.mqa_q_form, caps.deterministic_default) == (seqlen, q_form, det)
    assert caps.mk_alignment_arity == 1 and caps.mk_alignment_setter and caps.compiled_dims_default == "nk"
    assert caps.masked_gemm == "m_grouped_fp8_gemm_nt_masked" and caps.compile_mode is False
    assert caps.release == f"deep-gemm {version} (vendored in None)" or caps.release.startswith("deep-gemm")


def test_sgl_deep_gemm_is_not_planned_as_upstream() -> None:
    rel = Release("sgl-deep-gemm", Version("0.2.5"), "sgl-deep-gemm", "torch-library", None, None, None, None, None,
                  True)
    caps = table.compute(rel, backend="deep_gemm", arch="sm90")
    assert caps.mk_alignment_arity == 2 and caps.compiled_dims_default == "" and caps.mqa_q_form == "bare"


def test_vllm_fork_native_next_n_and_block_kv() -> None:
    # Seen on an H200: 2.8.1's SM90 next_n=4 launch wants a KV-multicast schedule (num_sms / 2 + 1 rows),
    # which dgcompat does not build, so next_n=4 is split there; it stays native on SM100.
    caps = table.compute(_upstream("2.8.1"), backend="deep_gemm", arch="sm90")
    assert caps.paged_native_next_n == (1, 2) and 32 in caps.paged_block_kv
    assert 4 in table.compute(_upstream("2.8.1"), backend="deep_gemm", arch="sm100").paged_native_next_n


@pytest.mark.parametrize(("dist", "version"), [("sglang-kernel", "0.4.2"), ("sgl-kernel", "0.3.21")])
def test_bundled_next_n_row_matches_their_host_assert(dist: str, version: str) -> None:
    rel = Release(dist, Version(version), "bundled", "bundled-torch-ops", None, None, None, None, None, True)
    for arch in ("sm90", "sm100"):
        assert table.compute(rel, backend="deep_gemm", arch=arch).paged_native_next_n == (1, 2)


def test_refused_install_plans_nothing_specific() -> None:
    rel = Release(None, None, "unowned", "tvm-ffi", None, None, None, None, None, False, refusal="no version")
    caps = table.compute(rel, backend="deep_gemm", arch="sm90")
    assert caps.mqa_max_seqlen_k == "optional" and caps.mqa_logits == "fp8_mqa_logits"


def _ragged_inputs(nq: int = 6, nk: int = 40, h: int = 32) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(1)
    q = torch.randn(nq, h, D, generator=g).to(torch.float8_e4m3fn)
    k = torch.randn(nk, D, generator=g).to(torch.float8_e4m3fn)
    # first/last keys, an empty range (ks == ke) and a query seeing every key
    ks_ = torch.tensor([0, 3, 10, 10, 20, 0][:nq], dtype=torch.int32)
    ke_ = torch.tensor([5, 20, 10, 30, nk, nk][:nq], dtype=torch.int32)
    sf = torch.rand(nk, generator=g) + 0.5
    w = torch.rand(nq, h, generator=g)
    return q, (k, sf), w, ks_, ke_


def test_ragged_mqa_logits_never_hands_2_8_1_a_bare_q(fake_release: Callable[..., Any]) -> None:
    mod = fake_release("up-2.8.1")
    caps = dgcompat.capabilities()
    assert caps.mqa_q_form == "pair" and caps.mqa_logits == "fp8_fp4_mqa_logits" and caps.deterministic_default == "off"
    q, kv, w, ks_, ke_ = _ragged_inputs()
    # the stand-in asserts max_seqlen_k > 0 like 2.8.1 (seen on an H200)
    with pytest.raises(RuntimeError, match="max_seqlen_k > 0"):
        mod.fp8_fp4_mqa_logits((q, None), kv, w, ks_, ke_, 0)
    width = int((ke_ - ks_).max())
    for clean in (False, True):
        out = dgcompat.fp8_mqa_logits(q, kv, w, ks_, ke_, clean_logits=clean, max_seqlen_k=width)
        ref = R.fp8_mqa_logits(q, kv, w, ks_, ke_, max_seqlen_k=width)
        valid = torch.arange(width).view(1, -1) < (ke_ - ks_).view(-1, 1)
        torch.testing.assert_close(out[valid], ref[valid], rtol=1e-4, atol=1e-3)
        if clean:
            assert torch.isneginf(out[~valid]).all()


@pytest.mark.parametrize("family", ["up-2.8.1", "sgl-0.2.5"])
@pytest.mark.parametrize("max_seqlen_k", [None, 0])
def test_uncompressed_layout_emulated_where_only_the_compressed_one_exists(
        fake_release: Callable[..., Any], monkeypatch: pytest.MonkeyPatch, family: str,
        max_seqlen_k: int | None) -> None:
    fake_release(family)
    assert dgcompat.capabilities().mqa_uncompressed == "emulated"
    q, kv, w, ks_, ke_ = _ragged_inputs()
    nk = kv[0].shape[0]
    ref = R.fp8_mqa_logits(q, kv, w, ks_, ke_, clean_logits=True)  # -inf outside [ks, ke)
    cols = torch.arange(nk).view(1, -1)
    valid = (cols >= ks_.view(-1, 1)) & (cols < ke_.view(-1, 1))
    from dgcompat.indexer import _ragged

    for chunk in (1 << 24, 7):  # one pass, and rows spread a few at a time
        monkeypatch.setattr(_ragged, "SPREAD_ELEMENTS", chunk)
        for _ in range(2):  # the bound call, twice
            clean = dgcompat.fp8_mqa_logits(q, kv, w, ks_, ke_, clean_logits=True, max_seqlen_k=max_seqlen_k)
            assert clean.dtype == torch.float32 and tuple(clean.shape) == (q.shape[0], nk)
            assert clean.stride(0) % 8 == 0
            torch.testing.assert_close(clean[valid], ref[valid], rtol=1e-4, atol=1e-3)
            assert torch.isneginf(clean[~valid]).all()
            plain = dgcompat.fp8_mqa_logits(q, kv, w, ks_, ke_, max_seqlen_k=max_seqlen_k)
            torch.testing.assert_close(plain[valid], ref[valid], rtol=1e-4, atol=1e-3)


def test_uncompressed_layout_without_keys(fake_release: Callable[..., Any]) -> None:
    fake_release("up-2.8.1")
    q, (k, sf), w, _ks, _ke = _ragged_inputs()
    zero = torch.zeros(q.shape[0], dtype=torch.int32)
    out = dgcompat.fp8_mqa_logits(q, (k[:0], sf[:0]), w, zero, zero)
    assert tuple(out.shape) == (q.shape[0], 0) and out.dtype == torch.float32
    with pytest.raises(dgcompat.BadArgumentError, match="weights"):
        dgcompat.fp8_mqa_logits(q, (k[:0], sf[:0]), w[:, :3], zero, zero)


def test_uncompressed_layout_without_keys_under_the_sm100_contract(fake_release: Callable[..., Any]) -> None:
    fake_release("up-2.8.1", arch="sm100")  # bf16 weights are what the release takes there
    q, (k, sf), w, _ks, _ke = _ragged_inputs()
    zero = torch.zeros(q.shape[0], dtype=torch.int32)
    out = dgcompat.fp8_mqa_logits(q, (k[:0], sf[:0]), w.to(torch.bfloat16), zero, zero)
    assert tuple(out.shape) == (q.shape[0], 0) and out.dtype == torch.float32


def test_uncompressed_layout_rows() -> None:
    for version, value in (("2.6.1", "native"), ("2.8.1", "emulated")):
        assert table.compute(_upstream(version), backend="deep_gemm", arch="sm90").mqa_uncompressed == value
    rel = Release("sgl-deep-gemm", Version("0.2.3.post2"), "sgl-deep-gemm", "torch-library", None, None, None, None,
                  None, True)
    assert table.compute(rel, backend="deep_gemm", arch="sm90").mqa_uncompressed == "native"


def test_masked_gemm_names_on_2_8_1(fake_release: Callable[..., Any]) -> None:
    mod = fake_release("up-2.8.1")
    assert not hasattr(mod, "fp8_m_grouped_gemm_nt_masked")  # removed upstream; dgcompat still offers it
    g = torch.Generator().manual_seed(0)
    e, m, n, k = 2, 8, 128, 128
    a = torch.randn(e, m, k, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(e, n, k, generator=g).to(torch.float8_e4m3fn)
    sfa = torch.ones(e, m, k // 128)
    sfb = torch.ones(e, n // 128, k // 128)
    masked = torch.tensor([8, 3], dtype=torch.int32)
    d = torch.zeros(e, m, n, dtype=torch.bfloat16)
    dgcompat.fp8_m_grouped_gemm_nt_masked((a, sfa), (b, sfb), d, masked, 8)
    ref = torch.zeros_like(d)
    R.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), ref, masked, 8)
    torch.testing.assert_close(d[0], ref[0]) and torch.testing.assert_close(d[1, :3], ref[1, :3])


@pytest.mark.parametrize(("family", "expected"), [("up-2.8.1", 128), ("sgl-0.2.5", 64), ("bundled", 128)])
def test_theoretical_alignment_follows_the_arity(fake_release: Callable[..., Any], family: str, expected: int) -> None:
    fake_release(family)
    # 2.8.1 takes one argument (two would be a TypeError), 0.2.5 two, the bundled copies none (fixed 128)
    assert dgcompat.get_theoretical_mk_alignment_for_contiguous_layout(256, 8) == expected
    assert dgcompat.get_theoretical_mk_alignment_for_contiguous_layout() == 128
    bad: Any
    for bad in (0, -1, 1.5, True):  # wrong values and wrong types
        with pytest.raises(dgcompat.BadArgumentError):
            dgcompat.get_theoretical_mk_alignment_for_contiguous_layout(bad)


def test_upstream_pdl_and_zero_padding_rows() -> None:
    caps = table.compute(_upstream("2.8.1"), backend="deep_gemm", arch="sm90")
    assert caps.pdl == "top-level" and caps.ensure_zero_padding_position == 10


@pytest.mark.parametrize("family", ["sgl-0.2.5", "up-2.8.1"])
@pytest.mark.parametrize("varlen", [False, True])
def test_paged_logits_under_the_sm100_contract_say_what_the_release_requires(
        fake_release: Callable[..., Any], family: str, varlen: bool) -> None:
    fake_release(family, arch="sm100")
    caps = dgcompat.capabilities()
    assert caps.indexer_inputs == "mx-bf16"
    cache = R.pack_kv_cache(torch.randn(4, 64, D))
    bt = torch.arange(4, dtype=torch.int32).view(2, 2)
    lens = torch.tensor([[70], [100]], dtype=torch.int32)
    q = torch.randn(2, 1, 32, D).to(torch.float8_e4m3fn)
    w = torch.rand(2, 32)
    ix = torch.arange(2, dtype=torch.int32) if varlen else None
    schedule = dgcompat.get_paged_mqa_logits_metadata(lens, 64, indices=ix)
    for _ in range(2):  # every call
        with pytest.raises(dgcompat.UnsupportedFeatureError) as info:
            dgcompat.fp8_paged_mqa_logits(q, cache, w, lens, bt, schedule, 128, indices=ix)
        text = str(info.value)
        assert "packed UE8M0" in text and "bfloat16 weights" in text and "on sm100" in text
        assert "num_heads in (16, 32, 64)" in text and "block_kv in (32, 64, 128)" in text
        assert "this call: FP8 q without scale factors, float32 weights, 32 heads, block_kv 64" in text


@pytest.mark.parametrize(("case_id", "family"), [  # each case's child imports torch: the slow tier
    pytest.param("mqa_logits_dtype", "up-2.8.1", id="mqa_logits_dtype-up-2.8.1", marks=pytest.mark.slow),
    *(pytest.param(c, f, id=f"{c}-{f}", marks=pytest.mark.slow)
      for c, f in (("mqa_logits_dtype", "sgl-0.1.3"), ("mqa_logits", "up-2.8.1"), ("mqa_logits", "sgl-0.1.3")))])
def test_gpu_mqa_cases_dry_run_on_the_cpu(fake_release: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                          family: str, case_id: str) -> None:
    # The GPU tier's cases against the stand-ins (2.8.1's asserts max_seqlen_k > 0; 0.1.3's forwards logits_dtype).
    from dgcompat_conformance.gpu import cases

    monkeypatch.setattr(cases, "DEVICE", "cpu")
    fake_release(family)
    rec = cases.run_case(case_id)
    assert rec["outcome"] == "passed", rec
    names = [c["name"] for c in rec["checks"]]
    if case_id == "mqa_logits_dtype":  # computed by 0.1.3's fp8_fp4_mqa_logits, converted on 2.8.1 (vLLM 0.33's)
        how = "computed by the build" if family == "sgl-0.1.3" else "converted from float32"
        assert any(how in n and "bfloat16" in n for n in names), names
