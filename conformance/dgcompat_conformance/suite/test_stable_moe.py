"""Grouped (MoE) GEMMs through dgcompat: contiguous and masked layouts, FP8 and BF16."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dgcompat import reference
from dgcompat.errors import BadArgumentError, DgcompatError, UnsupportedFeatureError
from dgcompat_conformance.suite import _support as S

pytestmark = pytest.mark.stable

N = st.sampled_from([64, 128, 256])
K = st.sampled_from([128, 256])
SEED = st.integers(min_value=0, max_value=2**16)
SIZES = st.lists(st.integers(min_value=0, max_value=200), min_size=1, max_size=4)


def _bf16(shape: tuple[int, ...], g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g).to(torch.bfloat16).to(S.device())


@given(sizes=SIZES, n=N, k=K, seed=SEED)
def test_m_grouped_fp8_contiguous(dg: Any, sizes: list[int], n: int, k: int, seed: int) -> None:
    g = S.gen(seed)
    m_indices = S.contiguous_layout(sizes, dg.get_mk_alignment_for_contiguous_layout())
    m = int(m_indices.numel())
    a, b = S.fp8_token(m, k, g), S.fp8_block(n, k, g, groups=len(sizes))
    d = torch.zeros((m, n), dtype=torch.bfloat16, device=S.device())
    want = torch.zeros_like(d)
    assert dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices) is None
    reference.m_grouped_fp8_gemm_nt_contiguous(a, b, want, m_indices)
    rows = m_indices >= 0  # padding rows are unspecified
    S.close(d[rows], want[rows])


@given(sizes=SIZES, n=N, k=K, seed=SEED)
def test_m_grouped_bf16_contiguous(dg: Any, sizes: list[int], n: int, k: int, seed: int) -> None:
    g = S.gen(seed)
    m_indices = S.contiguous_layout(sizes, dg.get_mk_alignment_for_contiguous_layout())
    m = int(m_indices.numel())
    a, b = _bf16((m, k), g), _bf16((len(sizes), n, k), g)
    d = torch.zeros((m, n), dtype=torch.bfloat16, device=S.device())
    want = torch.zeros_like(d)
    if S.flavor() == "sgl" and not S.version_at_least("0.1.1"):
        # docs/sources/wheel-matrix.md §3: no BF16 contiguous grouped GEMM before sgl-deep-gemm 0.1.1.

        with pytest.raises(UnsupportedFeatureError):
            dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
        return
    dg.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
    reference.m_grouped_bf16_gemm_nt_contiguous(a, b, want, m_indices)
    rows = m_indices >= 0
    S.close(d[rows], want[rows])


@given(groups=st.integers(1, 4), m_max=st.sampled_from([16, 64, 128]), n=N, k=K, seed=SEED)
def test_m_grouped_fp8_masked(dg: Any, groups: int, m_max: int, n: int, k: int, seed: int) -> None:
    x = S.masked_inputs(groups, m_max, n, k, S.gen(seed))
    d = torch.zeros((groups, m_max, n), dtype=torch.bfloat16, device=S.device())
    want = torch.zeros_like(d)
    assert dg.m_grouped_fp8_gemm_nt_masked(x["a"], x["b"], d, x["masked_m"], x["expected_m"]) is None
    reference.m_grouped_fp8_gemm_nt_masked(x["a"], x["b"], want, x["masked_m"], x["expected_m"])
    for gi, rows in enumerate(x["masked_m"].tolist()):
        S.close(d[gi, :rows], want[gi, :rows])


def test_masked_alias(dg: Any) -> None:
    assert dg.fp8_m_grouped_gemm_nt_masked is dg.m_grouped_fp8_gemm_nt_masked or callable(
        dg.fp8_m_grouped_gemm_nt_masked)

    x = S.masked_inputs(2, 64, 128, 128, S.gen(3))
    d = torch.zeros((2, 64, 128), dtype=torch.bfloat16, device=S.device())
    want = torch.zeros_like(d)
    dg.fp8_m_grouped_gemm_nt_masked(x["a"], x["b"], d, x["masked_m"], x["expected_m"])
    reference.m_grouped_fp8_gemm_nt_masked(x["a"], x["b"], want, x["masked_m"], x["expected_m"])
    for gi, rows in enumerate(x["masked_m"].tolist()):
        S.close(d[gi, :rows], want[gi, :rows])


@given(groups=st.integers(1, 4), m_max=st.sampled_from([16, 64]), n=N, k=K, seed=SEED)
def test_m_grouped_bf16_masked(dg: Any, groups: int, m_max: int, n: int, k: int, seed: int) -> None:
    g = S.gen(seed)
    a, b = _bf16((groups, m_max, k), g), _bf16((groups, n, k), g)
    masked = torch.randint(0, m_max + 1, (groups,), generator=g, dtype=torch.int32).to(S.device())
    d = torch.zeros((groups, m_max, n), dtype=torch.bfloat16, device=S.device())
    want = torch.zeros_like(d)
    if S.flavor() == "sgl" and not S.version_at_least("0.1.1"):
        # docs/sources/wheel-matrix.md §3: no BF16 masked GEMM before sgl-deep-gemm 0.1.1.

        with pytest.raises(UnsupportedFeatureError):
            dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, max(1, m_max // 2))
        return
    dg.m_grouped_bf16_gemm_nt_masked(a, b, d, masked, max(1, m_max // 2))
    reference.m_grouped_bf16_gemm_nt_masked(a, b, want, masked, max(1, m_max // 2))
    for gi, rows in enumerate(masked.tolist()):
        S.close(d[gi, :rows], want[gi, :rows])


@pytest.mark.parametrize("case", ["int64_indices", "short_indices", "unpadded_rows", "bare_a", "b_2d"])
def test_contiguous_rejects(dg: Any, case: str) -> None:
    g = S.gen(11)
    m_indices = S.contiguous_layout([100, 28])
    m = int(m_indices.numel())
    a, b = S.fp8_token(m, 128, g), S.fp8_block(128, 128, g, groups=2)
    d = torch.zeros((m, 128), dtype=torch.bfloat16, device=S.device())
    if case == "int64_indices":
        m_indices = m_indices.to(torch.int64)
    elif case == "short_indices":
        m_indices = m_indices[:-1]
    elif case == "unpadded_rows":
        # 100 rows of one expert, not padded to the 128-row alignment.
        m_indices = torch.zeros(100, dtype=torch.int32, device=S.device())
        a, d = S.fp8_token(100, 128, g), torch.zeros((100, 128), dtype=torch.bfloat16, device=S.device())
    elif case == "bare_a":
        a = a[0]  # type: ignore[assignment]  # a bare tensor where a pair belongs
    elif case == "b_2d":
        b = S.fp8_block(128, 128, g)
    with pytest.raises(BadArgumentError):
        dg.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)


@pytest.mark.parametrize("case", ["masked_m_int64", "masked_m_too_large", "groups_mismatch"])
def test_masked_rejects(dg: Any, case: str) -> None:
    x = S.masked_inputs(2, 64, 128, 128, S.gen(12))
    d = torch.zeros((2, 64, 128), dtype=torch.bfloat16, device=S.device())
    masked = x["masked_m"]
    b = x["b"]
    if case == "masked_m_int64":
        masked = masked.to(torch.int64)
    elif case == "masked_m_too_large":
        masked = torch.tensor([65, 1], dtype=torch.int32, device=S.device())
    elif case == "groups_mismatch":
        b = S.fp8_block(128, 128, S.gen(13), groups=3)
    # A count beyond M_max is only visible in device values: a typed error, not necessarily a BadArgumentError.
    expected = DgcompatError if case == "masked_m_too_large" else BadArgumentError
    with pytest.raises(expected):
        dg.m_grouped_fp8_gemm_nt_masked(x["a"], b, d, masked, x["expected_m"])


def test_masked_overlap(dg: Any) -> None:
    caps = dg.capabilities()
    x = S.masked_inputs(2, 64, 128, 128, S.gen(14))
    d = torch.zeros((2, 64, 128), dtype=torch.bfloat16, device=S.device())
    signal = torch.zeros(64, dtype=torch.int32, device=S.device())
    overlap = dg.MaskedOverlap(signal=signal, max_block_n=256, num_sms=dg.get_num_sms())
    if not caps.masked_overlap:
        with pytest.raises(UnsupportedFeatureError):
            dg.m_grouped_fp8_gemm_nt_masked(x["a"], x["b"], d, x["masked_m"], x["expected_m"], overlap=overlap)
        return
    with S.unless_not_emulated():
        block_m, threshold = dg.m_grouped_fp8_gemm_nt_masked(x["a"], x["b"], d, x["masked_m"], x["expected_m"],
                                                             overlap=overlap)
    assert block_m > 0 and threshold > 0
