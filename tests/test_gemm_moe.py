"""Dense and grouped GEMMs through each release family's calling convention."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import dgcompat
from dgcompat import reference as R

FAMILIES = ["sgl-0.1.3", "sgl-0.2.5", "bundled"]


def _rel_err(x: torch.Tensor, y: torch.Tensor) -> float:
    return float((x.float() - y.float()).norm() / y.float().norm().clamp_min(1e-12))


@pytest.mark.parametrize("family", FAMILIES)
def test_fp8_gemm(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    a, b = torch.randn(8, 256), torch.randn(128, 256)
    aq, bq = R.per_token_cast_to_fp8(a), R.per_block_cast_to_fp8(b)
    d = torch.empty(8, 128, dtype=torch.bfloat16)
    dgcompat.fp8_gemm_nt(aq, bq, d)
    ref = torch.empty_like(d)
    R.fp8_gemm_nt(aq, bq, ref)
    assert _rel_err(d, ref) < 1e-2
    with pytest.raises(dgcompat.BadArgumentError, match=r"fp8_gemm_nt\(\): argument 'd'"):
        dgcompat.fp8_gemm_nt(aq, bq, torch.empty(8, 64, dtype=torch.bfloat16))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("by_keyword", [False, True])
def test_grouped_contiguous(fake_release: Callable[[str], Any], family: str, by_keyword: bool) -> None:
    fake_release(family)
    g, n, k = 3, 128, 256
    a = torch.randn(256, k)
    m_indices = torch.tensor([0] * 100 + [-1] * 28 + [2] * 128, dtype=torch.int32)
    b = torch.randn(g, n, k)
    aq = R.per_token_cast_to_fp8(a)
    bq = (torch.stack([R.per_block_cast_to_fp8(b[i])[0] for i in range(g)]),
          torch.stack([R.per_block_cast_to_fp8(b[i])[1] for i in range(g)]))
    d = torch.zeros(256, n, dtype=torch.bfloat16)
    if by_keyword:
        dgcompat.m_grouped_fp8_gemm_nt_contiguous(aq, bq, d, m_indices=m_indices)
    else:
        dgcompat.m_grouped_fp8_gemm_nt_contiguous(aq, bq, d, m_indices)
    ref = torch.zeros_like(d)
    R.m_grouped_fp8_gemm_nt_contiguous(aq, bq, ref, m_indices)
    assert _rel_err(d, ref) < 1e-2
    with pytest.raises(dgcompat.BadArgumentError, match="multiple of the contiguous-layout alignment"):
        dgcompat.m_grouped_fp8_gemm_nt_contiguous((aq[0][:200], aq[1][:200]), bq, d[:200], m_indices[:200])
    # An empty batch is a no-op everywhere.
    dgcompat.m_grouped_fp8_gemm_nt_contiguous((aq[0][:0], aq[1][:0]), bq, d[:0], m_indices[:0])


@pytest.mark.parametrize("family", FAMILIES)
def test_grouped_masked_returns_none(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    g, m, n, k = 2, 64, 128, 128
    a = torch.randn(g, m, k)
    aq = (torch.stack([R.per_token_cast_to_fp8(a[i])[0] for i in range(g)]),
          torch.stack([R.per_token_cast_to_fp8(a[i])[1] for i in range(g)]))
    b = torch.randn(g, n, k)
    bq = (torch.stack([R.per_block_cast_to_fp8(b[i])[0] for i in range(g)]),
          torch.stack([R.per_block_cast_to_fp8(b[i])[1] for i in range(g)]))
    masked_m = torch.tensor([0, 1], dtype=torch.int32)  # groups with 0 and 1 valid rows
    d = torch.zeros(g, m, n, dtype=torch.bfloat16)
    assert dgcompat.m_grouped_fp8_gemm_nt_masked(aq, bq, d, masked_m, 1) is None
    assert dgcompat.fp8_m_grouped_gemm_nt_masked is dgcompat.m_grouped_fp8_gemm_nt_masked
    ref = torch.zeros_like(d)
    R.m_grouped_fp8_gemm_nt_masked(aq, bq, ref, masked_m, 1)
    torch.testing.assert_close(d, ref)
    signal = torch.zeros(4, dtype=torch.int32)
    overlap = dgcompat.MaskedOverlap(signal, num_sms=100)
    if family == "bundled":
        before = dgcompat.get_num_sms()
        assert dgcompat.m_grouped_fp8_gemm_nt_masked(aq, bq, d, masked_m, 1, overlap=overlap) == (64, 3)
        assert dgcompat.get_num_sms() == before and int(signal.sum()) == 4
    else:
        with pytest.raises(dgcompat.UnsupportedFeatureError, match="overlap"):
            dgcompat.m_grouped_fp8_gemm_nt_masked(aq, bq, d, masked_m, 1, overlap=overlap)


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_grouped(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    a = torch.randn(2, 16, 64, dtype=torch.bfloat16)
    b = torch.randn(2, 32, 64, dtype=torch.bfloat16)
    d = torch.zeros(2, 16, 32, dtype=torch.bfloat16)
    masked_m = torch.tensor([3, 16], dtype=torch.int32)
    dgcompat.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, 8)
    ref = torch.zeros_like(d)
    R.m_grouped_bf16_gemm_nt_masked(a, b, ref, masked_m, 8)
    torch.testing.assert_close(d, ref)
    if family == "sgl-0.1.3":  # the fake, like 0.1.x before 0.1.4, lacks the bf16 contiguous GEMM
        with pytest.raises(dgcompat.UnsupportedFeatureError):
            dgcompat.m_grouped_bf16_gemm_nt_contiguous(a[0], b, d[0], torch.zeros(16, dtype=torch.int32))


def test_debug_value_checks(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_DEBUG", "1")
    fake_release("sgl-0.2.5")
    a = torch.randn(1, 16, 64, dtype=torch.bfloat16)
    b = torch.randn(1, 32, 64, dtype=torch.bfloat16)
    d = torch.zeros(1, 16, 32, dtype=torch.bfloat16)
    with pytest.raises(dgcompat.BadArgumentError, match="masked_m"):
        dgcompat.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor([17], dtype=torch.int32), 8)


def _fp8_operands(g: int, m: int, n: int, k: int) -> tuple[Any, Any]:
    a = torch.randn(g, m, k)
    b = torch.randn(g, n, k)
    aq = (torch.stack([R.per_token_cast_to_fp8(a[i])[0] for i in range(g)]),
          torch.stack([R.per_token_cast_to_fp8(a[i])[1] for i in range(g)]))
    bq = (torch.stack([R.per_block_cast_to_fp8(b[i])[0] for i in range(g)]),
          torch.stack([R.per_block_cast_to_fp8(b[i])[1] for i in range(g)]))
    return aq, bq


@pytest.mark.parametrize("family", [*FAMILIES, "reference"])
def test_layout_mistakes_name_the_argument(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch,
                                           family: str) -> None:
    fake_release(family)
    aq, bq = R.per_token_cast_to_fp8(torch.randn(8, 256)), R.per_block_cast_to_fp8(torch.randn(128, 256))
    transposed = torch.empty(128, 8, dtype=torch.bfloat16).T
    c16 = torch.zeros(8, 128, dtype=torch.float16)
    d32 = torch.empty(8, 128, dtype=torch.float32)
    ab, bb = torch.randn(8, 64, dtype=torch.bfloat16), torch.randn(32, 64, dtype=torch.bfloat16)
    dense: list[tuple[Callable[[], Any], str]] = [
        (lambda: dgcompat.fp8_gemm_nt(aq, bq, transposed), "d"),
        (lambda: dgcompat.fp8_gemm_nt(aq, bq, d32, c=c16), "c"),
        (lambda: dgcompat.bf16_gemm_nt(ab, bb, torch.empty(32, 8, dtype=torch.bfloat16).T), "d"),
    ]
    gq, gb = _fp8_operands(2, 128, 128, 128)
    flat = (gq[0].reshape(256, 128), gq[1].reshape(256, 1))
    m_indices = torch.zeros(256, 2, dtype=torch.int32)[:, 0]  # non-contiguous
    masked_m = torch.zeros(2, 2, dtype=torch.int32)[:, 0]
    d_flat = torch.zeros(256, 128, dtype=torch.bfloat16)
    d3 = torch.zeros(2, 128, 128, dtype=torch.bfloat16)
    grouped: list[tuple[Callable[[], Any], str]] = [
        (lambda: dgcompat.m_grouped_fp8_gemm_nt_contiguous(flat, gb, d_flat, m_indices), "m_indices"),
        (lambda: dgcompat.m_grouped_fp8_gemm_nt_contiguous(flat, gb, d_flat.float(),
                                                           torch.zeros(256, dtype=torch.int32)), "d"),
        (lambda: dgcompat.m_grouped_fp8_gemm_nt_masked(gq, gb, d3, masked_m, 1), "masked_m"),
        (lambda: dgcompat.m_grouped_fp8_gemm_nt_masked(gq, gb, d3.transpose(1, 2),
                                                       torch.ones(2, dtype=torch.int32), 1), "d"),
        (lambda: dgcompat.m_grouped_fp8_gemm_nt_masked(gq, gb, d3.float(), torch.ones(2, dtype=torch.int32), 1),
         "d"),
        (lambda: dgcompat.m_grouped_fp8_gemm_nt_masked(gq, gb, d3, torch.ones(2, dtype=torch.int32), 0),
         "expected_m"),
    ]
    for call, argument in dense + grouped:
        for _ in range(2):  # on every call, not only the first
            with pytest.raises(dgcompat.BadArgumentError) as info:
                call()
            assert info.value.argument == argument, (argument, str(info.value))


@pytest.mark.parametrize("family", FAMILIES)
def test_raw_overlap_keywords_take_the_overlap_path(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    aq, bq = _fp8_operands(2, 64, 128, 128)
    d = torch.zeros(2, 64, 128, dtype=torch.bfloat16)
    masked_m = torch.tensor([3, 64], dtype=torch.int32)
    signal = torch.zeros(4, dtype=torch.int32)
    # Without enable_overlap the raw keywords change nothing (as upstream).
    assert dgcompat.m_grouped_fp8_gemm_nt_masked(aq, bq, d, masked_m, 8, max_block_n=128, signal=signal) is None
    assert int(signal.sum()) == 0
    if family == "bundled":
        got = dgcompat.fp8_m_grouped_gemm_nt_masked(aq, bq, d, masked_m, 8, max_block_n=128, enable_overlap=True,
                                                    signal=signal)
        assert got == (64, 3) and int(signal.sum()) == 4
        with pytest.raises(dgcompat.BadArgumentError, match="signal"):
            dgcompat.m_grouped_fp8_gemm_nt_masked(aq, bq, d, masked_m, 8, enable_overlap=True)
    else:
        with pytest.raises(dgcompat.UnsupportedFeatureError, match="overlap"):
            dgcompat.m_grouped_fp8_gemm_nt_masked(aq, bq, d, masked_m, 8, enable_overlap=True, signal=signal)


@pytest.mark.parametrize("family", FAMILIES)
def test_upstream_positions_are_accepted(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    aq, bq = R.per_token_cast_to_fp8(torch.randn(8, 256)), R.per_block_cast_to_fp8(torch.randn(128, 256))
    d, ref = torch.empty(8, 128, dtype=torch.bfloat16), torch.empty(8, 128, dtype=torch.bfloat16)
    dgcompat.fp8_gemm_nt(aq, bq, d, None, (1, 128, 128))  # (a, b, d, c, recipe) as every release
    R.fp8_gemm_nt(aq, bq, ref)
    assert _rel_err(d, ref) < 1e-2
    gq, gb = _fp8_operands(2, 64, 128, 128)
    md = torch.zeros(2, 64, 128, dtype=torch.bfloat16)
    assert dgcompat.m_grouped_fp8_gemm_nt_masked(gq, gb, md, torch.ones(2, dtype=torch.int32), 1,
                                                 (1, 128, 128)) is None


@pytest.mark.parametrize(("family", "arch"), [("bundled", "sm100"), ("bundled", "sm120"), ("sgl-0.1.3", "sm90"),
                                          ("sgl-0.2.5", "sm90")])
def test_overlap_is_refused_before_anything_changes(fake_release: Callable[..., Any],
                                                    monkeypatch: pytest.MonkeyPatch, family: str, arch: str) -> None:
    # Where no overlapped launch signals (no such parameters, or the bundled fork off SM90), the call is a typed
    # refusal made before the SM count is touched or anything is launched, on every call.
    mod = fake_release(family, arch)
    g, m, n, k = 2, 64, 128, 128
    aq = (torch.zeros(g, m, k).to(torch.float8_e4m3fn), torch.ones(g, m, 1))
    bq = (torch.zeros(g, n, k).to(torch.float8_e4m3fn), torch.ones(g, 1, 1))
    d = torch.zeros(g, m, n, dtype=torch.bfloat16)
    signal = torch.zeros(4, dtype=torch.int32)
    counts: list[int] = []
    monkeypatch.setattr(mod, "set_num_sms", lambda n: counts.append(n))  # bound on first use: after this
    for _ in range(2):
        with pytest.raises(dgcompat.UnsupportedFeatureError, match="overlap"):
            dgcompat.m_grouped_fp8_gemm_nt_masked(aq, bq, d, torch.tensor([1, 1], dtype=torch.int32), 1,
                                                  overlap=dgcompat.MaskedOverlap(signal, num_sms=100))
    assert counts == [] and int(signal.sum()) == 0 and int(d.float().abs().sum()) == 0
