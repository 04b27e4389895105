"""deep_gemm itself, called the way each release expects.

These tests pin down what a release's own Python layer plus native code do with the calls
engines make (the facts in docs/sources/gpu-observed.md and docs/sources/wheel-matrix.md), independently of dgcompat. On
the CPU tier they check that the wheel's wrappers and the stand-ins together reproduce those
facts, which is what makes the dgcompat tests over the same stand-ins meaningful; on a GPU they
check the real release.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

from dgcompat import reference
from dgcompat_conformance.suite import _support as S

pytestmark = pytest.mark.raw


def _sgl_legacy_wrappers() -> bool:
    # docs/sources/wheel-matrix.md §1 item 8: 0.0.1-0.1.7 build a default scale with the legacy torch.Tensor
    # constructor, which raises TypeError for a bare tensor operand.
    return S.flavor() == "sgl" and not S.version_at_least("0.2.0")


def test_import_and_detection(raw: Any) -> None:
    rel = S.release()
    assert rel.installed
    assert rel.refusal is None
    assert rel.source in ("sgl-deep-gemm", "bundled", "upstream", "vendored", "unowned")
    assert callable(raw.get_num_sms)


def test_num_sms_roundtrip(raw: Any) -> None:
    n = int(raw.get_num_sms())
    assert n > 0
    try:
        raw.set_num_sms(n - 1)
        assert int(raw.get_num_sms()) == n - 1
    finally:
        raw.set_num_sms(n)


def test_mk_alignment_is_128(raw: Any) -> None:
    # docs/sources/gpu-observed.md: get_mk_alignment_for_contiguous_layout() returns 128 (SM90).
    assert int(raw.get_mk_alignment_for_contiguous_layout()) == 128


def test_runtime_knobs_presence(raw: Any, flavor: str) -> None:
    # docs/sources/wheel-matrix.md §3: set_pdl from sgl-deep-gemm 0.1.4, never in the bundled copies;
    # set_compile_mode only in the bundled copies.
    if flavor == "sgl":
        assert hasattr(raw, "set_pdl") == S.version_at_least("0.1.4")
        assert not hasattr(raw, "set_compile_mode")
    elif flavor == "bundled":
        assert not hasattr(raw, "set_pdl")
        assert hasattr(raw, "set_compile_mode")


def test_pdl_roundtrip(raw: Any) -> None:
    if not hasattr(raw, "set_pdl"):
        pytest.skip("no set_pdl in this release")
    before = bool(raw.get_pdl())
    try:
        raw.set_pdl(True)
        assert bool(raw.get_pdl()) is True
    finally:
        raw.set_pdl(before)


def test_fp8_gemm_nt_pairs(raw: Any) -> None:
    g = S.gen(1)
    a, b = S.fp8_token(64, 256, g), S.fp8_block(128, 256, g)
    d = torch.empty((64, 128), dtype=torch.bfloat16, device=S.device())
    want = torch.empty_like(d)
    raw.fp8_gemm_nt(a, b, d)
    reference.fp8_gemm_nt(a, b, want)
    S.close(d, want)


def test_fp8_gemm_nt_bare_tensor(raw: Any) -> None:
    g = S.gen(2)
    a, b = S.fp8_token(64, 256, g), S.fp8_block(128, 256, g)
    d = torch.empty((64, 128), dtype=torch.bfloat16, device=S.device())
    expected: type[Exception] = TypeError if _sgl_legacy_wrappers() else RuntimeError
    with pytest.raises(expected):
        raw.fp8_gemm_nt(a[0], b, d)


def test_grouped_contiguous_positional(raw: Any) -> None:
    g = S.gen(3)
    m_indices = S.contiguous_layout([100, 0, 128])
    m = int(m_indices.numel())
    a, b = S.fp8_token(m, 256, g), S.fp8_block(128, 256, g, groups=3)
    d = torch.zeros((m, 128), dtype=torch.bfloat16, device=S.device())
    want = torch.zeros_like(d)
    raw.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices)
    reference.m_grouped_fp8_gemm_nt_contiguous(a, b, want, m_indices)
    rows = m_indices >= 0
    S.close(d[rows], want[rows])


def test_grouped_contiguous_m_indices_keyword(raw: Any, flavor: str) -> None:
    # docs/sources/gpu-observed.md / docs/sources/upstream-history.md §1.2: sgl-deep-gemm and upstream 2.3+ call the argument
    # grouped_layout, so m_indices= raises TypeError; the bundled schemas still name it m_indices.
    g = S.gen(4)
    m_indices = S.contiguous_layout([128])
    a, b = S.fp8_token(128, 256, g), S.fp8_block(128, 256, g, groups=1)
    d = torch.zeros((128, 128), dtype=torch.bfloat16, device=S.device())
    if flavor in ("sgl", "upstream"):
        with pytest.raises(TypeError):
            raw.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices=m_indices)
    else:
        raw.m_grouped_fp8_gemm_nt_contiguous(a, b, d, m_indices=m_indices)


def test_masked_return_value(raw: Any, flavor: str) -> None:
    g = S.gen(5)
    x = S.masked_inputs(2, 64, 128, 256, g)
    d = torch.zeros((2, 64, 128), dtype=torch.bfloat16, device=S.device())
    want = torch.zeros_like(d)
    # upstream 2.8 removed the fp8_m_grouped_* alias; the m_grouped_* name is the same function
    masked = getattr(raw, "fp8_m_grouped_gemm_nt_masked", None) or raw.m_grouped_fp8_gemm_nt_masked
    got = masked(x["a"], x["b"], d, x["masked_m"], x["expected_m"])
    # docs/sources/gpu-observed.md: None on sgl-deep-gemm; docs/sources/wheel-matrix.md §5: (int?, int?) on the bundled copies.
    assert got == ((None, None) if flavor == "bundled" else None)
    reference.m_grouped_fp8_gemm_nt_masked(x["a"], x["b"], want, x["masked_m"], x["expected_m"])
    for gi, rows in enumerate(x["masked_m"].tolist()):
        S.close(d[gi, :rows], want[gi, :rows])


def test_mqa_logits_presence(raw: Any, flavor: str) -> None:
    # docs/sources/wheel-matrix.md §1 item 1: removed in sgl-deep-gemm 0.2.5 and in upstream DeepGEMM 2.8.
    removed = (flavor == "sgl" and S.version_at_least("0.2.5")) or (flavor == "upstream" and S.version_at_least("2.8"))
    assert hasattr(raw, "fp8_mqa_logits") is not removed
    assert hasattr(raw, "fp8_paged_mqa_logits") is not removed


def test_mqa_logits(raw: Any) -> None:
    if not hasattr(raw, "fp8_mqa_logits"):
        pytest.skip("no fp8_mqa_logits in this release")

    g = S.gen(6)
    nq, nk, h, dim = 8, 96, 32, 128
    q = torch.randn((nq, h, dim), generator=g).to(torch.float8_e4m3fn).to(S.device())
    kv = reference.per_token_cast_to_fp8(torch.randn((nk, dim), generator=g).to(S.device()))
    kv = (kv[0], kv[1].squeeze(-1).contiguous())
    w = torch.rand((nq, h), generator=g).to(S.device())
    ks = torch.zeros(nq, dtype=torch.int32, device=S.device())
    ke = torch.randint(1, nk + 1, (nq,), generator=g, dtype=torch.int32).to(S.device())
    out = raw.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=False)
    want = reference.fp8_mqa_logits(q, kv, w, ks, ke)
    cols = torch.arange(nk, device=S.device())
    mask = (cols.unsqueeze(0) >= ks.unsqueeze(1)) & (cols.unsqueeze(0) < ke.unsqueeze(1))
    torch.testing.assert_close(torch.as_tensor(out)[mask].cpu(), want[mask].cpu(), atol=1e-3, rtol=1e-3)


def _paged_launcher(raw: Any, api: str) -> Any:
    """``launch(q, kv, w, lens, table, meta, max_len)`` through the legacy or the fp8_fp4 entry point."""
    if api == "legacy":
        fn = getattr(raw, "fp8_paged_mqa_logits", None)
        if fn is None:
            pytest.skip("no fp8_paged_mqa_logits in this release (docs/sources/wheel-matrix.md §1 item 1)")
        return lambda q, *rest: fn(q, *rest, False)
    fn = getattr(raw, "fp8_fp4_paged_mqa_logits", None)
    if fn is None:
        pytest.skip("no fp8_fp4_paged_mqa_logits in this release")
    # docs/sources/upstream-history.md §1.5: q must be a (q, q_sf) pair; a bare q hits the 0.0.1-0.1.7 wrapper bug.
    return lambda q, *rest: fn((q, None), *rest)


@pytest.mark.parametrize("api", ["legacy", "fp8_fp4"])
@pytest.mark.parametrize("next_n", [1, 2, 3, 4])
@pytest.mark.parametrize("form", ["1d", "2d", "flat"])
def test_paged_context_lens_forms(raw: Any, flavor: str, form: str, next_n: int, api: str) -> None:
    launcher = _paged_launcher(raw, api)
    case = S.paged_case(2, next_n, [70, 300], S.gen(10 + next_n))
    ctx = case.context_lens(form)
    q, table = case.q, case.block_table_for("per_seq")
    if form == "flat":
        q = q.reshape(case.batch * next_n, 1, *q.shape[2:])
        table = case.block_table_for("per_token")
    # What the release accepts (docs/sources/gpu-observed.md; docs/sources/upstream-history.md §3 S-arch column):
    # sgl-deep-gemm wants 2-D lengths and native next_n in {1, 2} (SM90); the bundled copies 1-D.
    eff_next_n = 1 if form == "flat" else next_n
    # sgl-deep-gemm 0.2.5 and upstream 2.8 assert MX q scales and bf16 weights on SM100 (host asserts
    # is_mx_sf == (arch_major == 10 or ...), weights.scalar_type() == (arch_major == 10 ? kBFloat16 : ...)):
    # this launch (FP8 q without scale, float32 weights) is rejected there.
    mx_sm100 = S.arch() == "sm100" and ((flavor == "sgl" and S.version_at_least("0.2.5"))
                                        or (flavor == "upstream" and S.version_at_least("2.8")))
    if flavor == "sgl":
        # docs/sources/upstream-history.md §2.2: SM100 takes any next_n natively.
        ok = form in ("2d", "flat") and (eff_next_n in (1, 2) or S.arch() not in (None, "sm90")) and not mx_sm100
    elif flavor == "bundled":
        ok = form == "1d" and next_n in (1, 2)
    elif flavor == "upstream":
        # upstream 2.4.2+ (7f2a703): 2-D lengths only; the 2.8.1 build vLLM vendors launches next_n 1, 2
        # and 4 on SM90 (its host assert "next_n == 1 or next_n == 2 or next_n == 4").
        sm90 = (1, 2, 4) if S.version_at_least("2.8") else (1, 2)
        ok = form in ("2d", "flat") and (eff_next_n in sm90 or S.arch() not in (None, "sm90")) and not mx_sm100
    else:
        pytest.skip("no expectation for this distribution")
    num_sms = int(raw.get_num_sms())
    # The 2.8.1 builds vLLM vendors run SM90 next_n 4 as 2-SM KV-multicast clusters, one schedule slot each: host
    # assert `_schedule_meta_size == num_sms / num_kv_multicast + 1` (in both builds' strings; seen on an H200).
    multicast = (flavor == "upstream" and S.version_at_least("2.8") and eff_next_n == 4
                 and S.arch() in (None, "sm90"))
    slots = num_sms // 2 if multicast else num_sms

    def launch(slots: int = slots) -> Any:
        meta = raw.get_paged_mqa_logits_metadata(ctx, 64, slots)
        return launcher(q, case.kv_cache, case.weights, ctx, table, meta, case.max_context_len)

    if not ok:
        with pytest.raises(RuntimeError):
            launch()
        return
    if multicast:
        with pytest.raises(RuntimeError, match="num_kv_multicast"):
            launch(num_sms)  # a schedule of one slot per SM is the wrong size there
    out = torch.as_tensor(launch())
    want = reference.fp8_paged_mqa_logits(q, case.kv_cache, case.weights, ctx, table, None, case.max_context_len)
    S.valid_close(out, want, case.row_lengths())
    # docs/sources/upstream-history.md §1.5: rows padded to align(max_context_len, 256).
    assert out.stride(0) % 256 == 0 or out.shape[0] <= 1


def test_paged_metadata_shape(raw: Any, flavor: str) -> None:
    case = S.paged_case(3, 1, [1, 200, 513], S.gen(20))
    ctx = case.context_lens("1d" if flavor == "bundled" else "2d")
    num_sms = int(raw.get_num_sms())
    meta = torch.as_tensor(raw.get_paged_mqa_logits_metadata(ctx, 64, num_sms))
    assert tuple(meta.shape) == (num_sms + 1, 2)
    assert meta.dtype == torch.int32


def test_transform_sf_is_sfa(raw: Any, flavor: str) -> None:
    if S.arch() not in (None, "sm90"):
        pytest.skip("the FP32 MN-major result is the SM90 behaviour (SM100 packs UE8M0)")
    g = S.gen(30)
    _, sf = S.fp8_token(100, 512, g)
    out = torch.as_tensor(raw.transform_sf_into_required_layout(sf, 100, 512, (1, 128, 128), is_sfa=True))
    # docs/sources/gpu-observed.md: an MN-major fp32 tensor of stride (1, mn) for mn = 100 (TMA-aligned).
    assert out.dtype == torch.float32 and tuple(out.shape) == (100, 4)
    assert out.stride(0) == 1 and out.stride(1) == 100
    torch.testing.assert_close(out.cpu(), sf.cpu())
    # docs/sources/upstream-history.md §1.11: sgl-deep-gemm (7f2a703 base) asserts is_sfa with a 3-tuple recipe;
    # the bundled schema defaults it to False.
    if flavor == "sgl":
        with pytest.raises(RuntimeError):
            raw.transform_sf_into_required_layout(sf, 100, 512, (1, 128, 128))


def test_mn_major_tma_aligned(raw: Any) -> None:
    g = S.gen(31)
    sf = torch.rand((100, 4), generator=g).to(S.device())
    out = torch.as_tensor(raw.get_mn_major_tma_aligned_tensor(sf))
    assert out.stride() == (1, 100)
    torch.testing.assert_close(out.cpu(), sf.cpu())
