"""Dense GEMMs through dgcompat (``fp8_gemm_nt``, ``bf16_gemm_nt``) against the reference."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dgcompat import reference
from dgcompat.errors import BadArgumentError
from dgcompat_conformance.suite import _support as S

pytestmark = pytest.mark.stable

M = st.integers(min_value=1, max_value=256)
N = st.sampled_from([64, 128, 192, 256])
K = st.sampled_from([128, 256, 384, 512])
SEED = st.integers(min_value=0, max_value=2**16)


def _dense_operands(kind: str, m: int, n: int, k: int, g: torch.Generator) -> tuple[Any, Any]:
    """``a`` (m, k) and ``b`` (n, k): FP8 with per-token / per-128x128-block scales, or plain bfloat16."""
    if kind == "fp8":
        return S.fp8_token(m, k, g), S.fp8_block(n, k, g)
    a = torch.randn((m, k), generator=g).to(torch.bfloat16).to(S.device())
    return a, torch.randn((n, k), generator=g).to(torch.bfloat16).to(S.device())


@pytest.mark.parametrize("kind", ["fp8", "bf16"])
@given(m=M, n=N, k=K, seed=SEED, accumulate=st.booleans())
def test_dense_gemm_nt(dg: Any, kind: str, m: int, n: int, k: int, seed: int, accumulate: bool) -> None:
    """``fp8_gemm_nt`` / ``bf16_gemm_nt`` into a bfloat16 ``d``, or accumulating ``c`` into a float32 one."""
    g = S.gen(seed)
    a, b = _dense_operands(kind, m, n, k, g)
    out_dtype = torch.float32 if accumulate else torch.bfloat16
    c = torch.randn((m, n), generator=g).to(S.device()) if accumulate else None
    d = torch.empty((m, n), dtype=out_dtype, device=S.device())
    want = torch.empty_like(d)
    assert getattr(dg, f"{kind}_gemm_nt")(a, b, d, c=c) is None
    getattr(reference, f"{kind}_gemm_nt")(a, b, want, c=c)
    S.close(d, want)


@given(m=M, n=N, k=K, seed=SEED)
def test_fp8_gemm_nt_recipe_and_mn_major_scales(dg: Any, m: int, n: int, k: int, seed: int) -> None:
    g = S.gen(seed)
    (a8, sfa), b = S.fp8_token(m, k, g), S.fp8_block(n, k, g)
    sfa_mn = dg.get_mn_major_tma_aligned_tensor(sfa)
    d = torch.empty((m, n), dtype=torch.bfloat16, device=S.device())
    want = torch.empty_like(d)
    dg.fp8_gemm_nt((a8, sfa_mn), b, d, recipe=(1, 128, 128))
    reference.fp8_gemm_nt((a8, sfa), b, want)
    S.close(d, want)


def _fp8_operands(m: int = 64, n: int = 128, k: int = 256) -> tuple[Any, Any, torch.Tensor]:
    g = S.gen(7)
    return S.fp8_token(m, k, g), S.fp8_block(n, k, g), torch.empty((m, n), dtype=torch.bfloat16, device=S.device())


@pytest.mark.parametrize("case", ["bare_a", "bf16_a", "k_mismatch", "d_shape", "d_fp16", "sfa_rows"])
def test_fp8_gemm_nt_rejects(dg: Any, case: str) -> None:
    a, b, d = _fp8_operands()
    if case == "bare_a":
        a = a[0]  # 0.0.1-0.1.7 would raise the wrappers' own TypeError; dgcompat names the argument
    elif case == "bf16_a":
        a = (a[0].to(torch.bfloat16), a[1])
    elif case == "k_mismatch":
        b = S.fp8_block(128, 384, S.gen(8))
    elif case == "d_shape":
        d = torch.empty((64, 64), dtype=torch.bfloat16, device=S.device())
    elif case == "d_fp16":
        d = torch.empty((64, 128), dtype=torch.float16, device=S.device())
    elif case == "sfa_rows":
        a = (a[0], a[1][:10])
    with pytest.raises(BadArgumentError):
        dg.fp8_gemm_nt(a, b, d)


@pytest.mark.parametrize("case", ["fp32_a", "d_shape"])
def test_bf16_gemm_nt_rejects(dg: Any, case: str) -> None:
    a = torch.randn((32, 128)).to(torch.bfloat16).to(S.device())
    b = torch.randn((64, 128)).to(torch.bfloat16).to(S.device())
    d = torch.empty((32, 64), dtype=torch.bfloat16, device=S.device())
    if case == "fp32_a":
        a = a.float()
    else:
        d = torch.empty((32, 32), dtype=torch.bfloat16, device=S.device())
    with pytest.raises(BadArgumentError):
        dg.bf16_gemm_nt(a, b, d)
