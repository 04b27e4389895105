"""An extract of the engines' deep_gemm call sites, written as the engines write them.

SGLang: ``deep_gemm_wrapper`` (configurer, entrypoint, compile_utils warm-up), the DSA indexer and
backend (ragged and paged MQA logits, the schedule), ``fp8_utils`` (scale transforms, the UE8M0
sanity check, the TMA-stride repair), the MoE runner (contiguous / masked / single-batch overlap).
vLLM: ``vllm/utils/deep_gemm.py`` (``getattr`` resolution, ``disable_ue8m0_cast`` injection,
``calc_diff``, the v1 ``get_col_major_tma_aligned_tensor``) and its indexer (2-D contiguous
``context_lens``).

This module is engine code: it imports ``deep_gemm`` (at module level, as SGLang's entrypoint does)
and knows nothing of dgcompat. It is run, unchanged, with deep_gemm routed through
``dgcompat.install_as_deep_gemm()`` (``tests/test_engine_calls.py`` runs it through the
conformance harness child with ``--dropin``): on the CPU tier over real wheels, and on the
reference backend. Results are checked against plain-torch arithmetic written here. DeepGEMM's
own test suite (``tests/test_bf16.py``, ``tests/test_fp8_fp4.py``) is an engine too: its call forms
(``use_psum_layout``, ``expected_m_for_psum_layout``, ``recipe_a`` / ``recipe_b``, ``compiled_dims``)
are here as well. A build without a parameter must refuse it with a typed error naming it.

The file name does not start with ``test_`` so that the unit-test run does not collect it
without the install.
"""

from __future__ import annotations

import contextlib
import importlib
from collections.abc import Iterator
from typing import Any, NamedTuple

# SGLang deep_gemm_wrapper/configurer.py + entrypoint.py: imported eagerly at module load.
import deep_gemm
import pytest
import torch
from deep_gemm.utils.layout import get_mn_major_tma_aligned_tensor

import dgcompat.errors as dgcompat_errors

DEVICE = torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")
FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0

# --------------------------------------------------------------------------- engine-side helpers (own code)


def _quant_per_token_group(x: torch.Tensor, group: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 ``(m, k)`` + fp32 ``(m, k/group)`` scales (what sglang_per_token_group_quant_fp8 returns)."""
    m, k = x.shape
    g = x.float().view(m, k // group, group)
    sf = g.abs().amax(-1).clamp(min=1e-4) / FP8_MAX
    return (g / sf.unsqueeze(-1)).to(FP8).view(m, k), sf


def _quant_per_block(w: torch.Tensor, block: int = 128) -> tuple[torch.Tensor, torch.Tensor]:
    """fp8 ``(n, k)`` + fp32 ``(n/block, k/block)`` block scales (a block-FP8 checkpoint's weight_scale_inv)."""
    n, k = w.shape
    g = w.float().view(n // block, block, k // block, block)
    sf = g.abs().amax(dim=(1, 3)).clamp(min=1e-4) / FP8_MAX
    return (g / sf[:, None, :, None]).to(FP8).view(n, k), sf


def _dequant_token(x8: torch.Tensor, sf: torch.Tensor, group: int = 128) -> torch.Tensor:
    return (x8.float().view(*x8.shape[:-1], -1, group) * sf.unsqueeze(-1)).view(x8.shape)


def _dequant_block(w8: torch.Tensor, sf: torch.Tensor, block: int = 128) -> torch.Tensor:
    return w8.float() * sf.repeat_interleave(block, 0)[: w8.shape[0]].repeat_interleave(block, 1)[:, : w8.shape[1]]


def _similar(out: torch.Tensor, ref: torch.Tensor, limit: float = 1e-3) -> None:
    # vLLM / DeepGEMM tests compare with calc_diff from deep_gemm.testing.
    from deep_gemm.testing import calc_diff

    diff = float(calc_diff(out.float().cpu(), ref.float().cpu()))
    assert diff < limit, f"calc_diff {diff} >= {limit}"


def _gen(seed: int) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _randn(*shape: int, g: torch.Generator) -> torch.Tensor:
    return torch.randn(shape, generator=g).to(DEVICE)


# --------------------------------------------------------------------------- SGLang deep_gemm_wrapper


@contextlib.contextmanager
def configure_deep_gemm_num_sms(num_sms: int | None) -> Iterator[None]:
    if num_sms is None:
        yield
        return
    original = deep_gemm.get_num_sms()
    deep_gemm.set_num_sms(num_sms)
    try:
        yield
    finally:
        deep_gemm.set_num_sms(original)


def gemm_nt_f8f8bf16(lhs: tuple[torch.Tensor, torch.Tensor], rhs: tuple[torch.Tensor, torch.Tensor],
                     out: torch.Tensor) -> None:
    deep_gemm.fp8_gemm_nt(lhs, rhs, out)


def gemm_nt_bf16bf16f32(lhs: torch.Tensor, rhs: torch.Tensor, out: torch.Tensor) -> None:
    deep_gemm.bf16_gemm_nt(lhs, rhs, out)


def grouped_gemm_nt_f8f8bf16_contig(lhs: Any, rhs: Any, out: torch.Tensor, m_indices: torch.Tensor) -> None:
    if lhs[0].shape[0] == 0:
        return
    deep_gemm.m_grouped_fp8_gemm_nt_contiguous(lhs, rhs, out, m_indices)


def grouped_gemm_nt_f8f8bf16_masked(lhs: Any, rhs: Any, out: torch.Tensor, masked_m: torch.Tensor, expected_m: int,
                                    overlap_args: Any = None, max_block_n: int = 256) -> Any:
    kwargs: dict[str, Any] = {}
    if overlap_args is not None:
        kwargs.update(enable_overlap=True, max_block_n=max_block_n, signal=overlap_args.signal)
    with configure_deep_gemm_num_sms(overlap_args.num_sms if overlap_args is not None else None):
        return deep_gemm.fp8_m_grouped_gemm_nt_masked(lhs, rhs, out, masked_m, expected_m, **kwargs)


def grouped_gemm_nt_bf16_contig(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, m_indices: torch.Tensor) -> None:
    deep_gemm.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)


def grouped_gemm_nt_bf16_masked(a: torch.Tensor, b: torch.Tensor, d: torch.Tensor, masked_m: torch.Tensor,
                                expected_m: int) -> None:
    deep_gemm.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, expected_m)


def update_deep_gemm_config() -> None:
    if hasattr(deep_gemm, "set_pdl"):
        deep_gemm.set_pdl(True)


def test_entrypoint_module_level_import() -> None:
    import deep_gemm.utils.layout  # function-local form (fp8_utils)

    assert deep_gemm.utils.layout.get_mn_major_tma_aligned_tensor is get_mn_major_tma_aligned_tensor
    assert callable(deep_gemm.fp8_gemm_nt) and callable(deep_gemm.get_num_sms)


def test_configure_num_sms_and_pdl() -> None:
    sms = deep_gemm.get_num_sms()
    assert isinstance(sms, int) and sms > 0
    with configure_deep_gemm_num_sms(sms - 4):
        assert deep_gemm.get_num_sms() == sms - 4
    assert deep_gemm.get_num_sms() == sms
    update_deep_gemm_config()


def test_dense_fp8_linear() -> None:
    # deepgemm_w8a8_block_fp8_linear_with_fallback: N % 64 == 0, K % 128 == 0, bf16 output.
    g = _gen(1)
    m, n, k = 96, 256, 512
    x, w = _randn(m, k, g=g), _randn(n, k, g=g)
    lhs, rhs = _quant_per_token_group(x), _quant_per_block(w)
    out = torch.empty((m, n), dtype=torch.bfloat16, device=DEVICE)
    gemm_nt_f8f8bf16(lhs, rhs, out)
    _similar(out, _dequant_token(*lhs) @ _dequant_block(*rhs).t())


def test_dense_bf16_fp32_out() -> None:
    g = _gen(2)
    a, b = _randn(64, 256, g=g).bfloat16(), _randn(128, 256, g=g).bfloat16()
    out = torch.empty((64, 128), dtype=torch.float32, device=DEVICE)
    gemm_nt_bf16bf16f32(a, b, out)
    _similar(out, a.float() @ b.float().t(), 1e-5)


# --------------------------------------------------------------------------- SGLang compile_utils warm-up


@contextlib.contextmanager
def _deep_gemm_compile_mode() -> Iterator[None]:
    if not (hasattr(deep_gemm, "get_compile_mode") and hasattr(deep_gemm, "set_compile_mode")):
        yield
        return
    old = deep_gemm.get_compile_mode()
    deep_gemm.set_compile_mode(1)
    try:
        yield
    finally:
        deep_gemm.set_compile_mode(old)


def test_warmup_executors() -> None:
    n, k, groups, max_m = 256, 256, 2, 256
    alignment = deep_gemm.get_mk_alignment_for_contiguous_layout()
    assert int(alignment) == 128
    ms = [m for m in range(1, max_m + 1) if m % alignment == 0]  # contiguous kernel types keep aligned M only
    lhs_q = torch.zeros((max_m, k), dtype=FP8, device=DEVICE)
    lhs_s = torch.ones((max_m, k // 128), dtype=torch.float32, device=DEVICE)
    rhs_q = torch.zeros((n, k), dtype=FP8, device=DEVICE)
    rhs_s = torch.ones((n // 128, k // 128), dtype=torch.float32, device=DEVICE)
    out = torch.empty((max_m, n), dtype=torch.bfloat16, device=DEVICE)
    grhs_q = torch.zeros((groups, n, k), dtype=FP8, device=DEVICE)
    grhs_s = torch.ones((groups, n // 128, k // 128), dtype=torch.float32, device=DEVICE)
    m_indices = torch.zeros((max_m,), dtype=torch.int32, device=DEVICE)
    with _deep_gemm_compile_mode():
        for m in (1, 64, 256):
            deep_gemm.fp8_gemm_nt((lhs_q[:m], lhs_s[:m]), (rhs_q, rhs_s), out[:m])
        for m in ms:
            deep_gemm.m_grouped_fp8_gemm_nt_contiguous((lhs_q[:m], lhs_s[:m]), (grhs_q, grhs_s), out[:m],
                                                       m_indices[:m])
        glhs_q = torch.zeros((groups, 128, k), dtype=FP8, device=DEVICE)
        glhs_s = torch.ones((groups, 128, k // 128), dtype=torch.float32, device=DEVICE)
        gout = torch.empty((groups, 128, n), dtype=torch.bfloat16, device=DEVICE)
        masked_m = torch.full((groups,), 64, dtype=torch.int32, device=DEVICE)
        # keyword masked_m / expected_m, as the warm-up writes them
        deep_gemm.fp8_m_grouped_gemm_nt_masked((glhs_q, glhs_s), (grhs_q, grhs_s), gout, masked_m=masked_m,
                                               expected_m=64)
    assert torch.count_nonzero(out.float()) == 0 and torch.count_nonzero(gout[:, :64].float()) == 0
    if hasattr(deep_gemm, "get_best_gemm_config_key"):
        key = deep_gemm.get_best_gemm_config_key("Normal", "fp8", 64, n, k, 1)
        assert hash(tuple(key)) is not None


# --------------------------------------------------------------------------- SGLang MoE runner


def _contiguous_layout(sizes: list[int], align: int) -> torch.Tensor:
    parts = []
    for gi, size in enumerate(sizes):
        part = torch.full((-(-size // align) * align,), -1, dtype=torch.int32)
        part[:size] = gi
        parts.append(part)
    return torch.cat(parts).to(DEVICE)


def test_moe_contiguous_gate_up() -> None:
    g = _gen(3)
    n, k, sizes = 256, 256, [100, 0, 150]
    align = int(deep_gemm.get_mk_alignment_for_contiguous_layout())
    m_indices = _contiguous_layout(sizes, align)
    total = m_indices.numel()
    x = _randn(total, k, g=g)
    lhs = _quant_per_token_group(x)
    ws = [_quant_per_block(_randn(n, k, g=g)) for _ in sizes]
    rhs = (torch.stack([w[0] for w in ws]), torch.stack([w[1] for w in ws]))
    out = torch.empty((total, n), dtype=torch.bfloat16, device=DEVICE)
    grouped_gemm_nt_f8f8bf16_contig(lhs, rhs, out, m_indices)
    a32 = _dequant_token(*lhs)
    for gi in range(len(sizes)):
        rows = (m_indices == gi).nonzero().flatten()
        if rows.numel():
            _similar(out[rows], a32[rows] @ _dequant_block(*ws[gi]).t())
    grouped_gemm_nt_f8f8bf16_contig((lhs[0][:0], lhs[1][:0]), rhs, out[:0], m_indices[:0])  # M == 0: early return


def _masked_operands(g: torch.Generator, groups: int, m_max: int, n: int, k: int) -> dict[str, Any]:
    xs = [_quant_per_token_group(_randn(m_max, k, g=g)) for _ in range(groups)]
    ws = [_quant_per_block(_randn(n, k, g=g)) for _ in range(groups)]
    lhs = (torch.stack([x[0] for x in xs]), torch.stack([x[1] for x in xs]))
    rhs = (torch.stack([w[0] for w in ws]), torch.stack([w[1] for w in ws]))
    masked_m = torch.tensor([m_max // 2, m_max, 1][:groups], dtype=torch.int32, device=DEVICE)
    return {"lhs": lhs, "rhs": rhs, "masked_m": masked_m, "xs": xs, "ws": ws}


def _check_masked(out: torch.Tensor, ops: dict[str, Any]) -> None:
    for gi, (x, w) in enumerate(zip(ops["xs"], ops["ws"], strict=True)):
        rows = int(ops["masked_m"][gi])
        _similar(out[gi, :rows], _dequant_token(*x)[:rows] @ _dequant_block(*w).t())


def test_moe_masked_low_latency() -> None:
    g = _gen(4)
    ops = _masked_operands(g, 3, 128, 256, 256)
    # Hopper: NEED_TMA_ALIGNED_SCALES -> the runner aligns the activation scales first.
    lhs = (ops["lhs"][0], get_mn_major_tma_aligned_tensor(ops["lhs"][1]))
    out = torch.empty((3, 128, 256), dtype=torch.bfloat16, device=DEVICE)
    ret = grouped_gemm_nt_f8f8bf16_masked(lhs, ops["rhs"], out, ops["masked_m"], 64)
    assert ret is None or ret == (None, None)  # no overlap requested
    _check_masked(out, ops)


class DownGemmOverlapArgs(NamedTuple):
    num_sms: int
    signal: torch.Tensor
    start_event: Any = None


def test_moe_masked_single_batch_overlap() -> None:
    g = _gen(5)
    ops = _masked_operands(g, 2, 128, 256, 256)
    out = torch.empty((2, 128, 256), dtype=torch.bfloat16, device=DEVICE)
    signal = torch.zeros((2 * 2,), dtype=torch.int32, device=DEVICE)
    args = DownGemmOverlapArgs(num_sms=deep_gemm.get_num_sms() - 3, signal=signal)
    try:
        ret = grouped_gemm_nt_f8f8bf16_masked(ops["lhs"], ops["rhs"], out, ops["masked_m"], 64, overlap_args=args,
                                              max_block_n=256)
    except NotImplementedError as exc:  # a build without overlap: a typed refusal, never a TypeError
        assert "overlap" in str(exc)
        return
    except dgcompat_errors.KernelError as exc:
        if "does not emulate" in str(exc):  # the CPU tier's stand-ins cannot run the overlapped kernel
            pytest.skip(f"not emulated on the CPU tier: {exc}")
        raise
    block_m, threshold = ret  # written into meta_overlap_args for DeepEP's combine
    assert isinstance(block_m, int) and isinstance(threshold, int)
    _check_masked(out, ops)


def test_moe_bf16_experts() -> None:
    g = _gen(6)
    n, k = 128, 256
    if not hasattr(deep_gemm, "m_grouped_bf16_gemm_nt_contiguous"):
        pytest.skip("this build has no bf16 grouped GEMMs (the engine falls back to Triton)")
    align = int(deep_gemm.get_mk_alignment_for_contiguous_layout())
    m_indices = _contiguous_layout([60, 128], align)
    a = _randn(m_indices.numel(), k, g=g).bfloat16()
    b = _randn(2, n, k, g=g).bfloat16()
    d = torch.empty((m_indices.numel(), n), dtype=torch.bfloat16, device=DEVICE)
    grouped_gemm_nt_bf16_contig(a, b, d, m_indices)
    for gi in range(2):
        rows = (m_indices == gi).nonzero().flatten()
        _similar(d[rows], a[rows].float() @ b[gi].float().t(), 1e-4)
    am = _randn(2, 64, k, g=g).bfloat16()
    dm = torch.empty((2, 64, n), dtype=torch.bfloat16, device=DEVICE)
    masked_m = torch.tensor([10, 64], dtype=torch.int32, device=DEVICE)
    grouped_gemm_nt_bf16_masked(am, b, dm, masked_m, 32)
    for gi in range(2):
        r = int(masked_m[gi])
        _similar(dm[gi, :r], am[gi, :r].float() @ b[gi].float().t(), 1e-4)


# --------------------------------------------------------------------------- SGLang fp8_utils / fp8_kernel


def _ceil_to_ue8m0(x: torch.Tensor) -> torch.Tensor:
    # SGLang copies this from DeepGEMM's tests.
    return torch.pow(2.0, torch.ceil(torch.log2(x.abs())))


def test_fp8_utils_scale_helpers() -> None:
    from deep_gemm.utils import align, get_tma_aligned_size  # function-local, as transform_scale_ue8m0's torch path

    assert align(130, 128) == 256 and get_tma_aligned_size(130, 4) == 132 and get_tma_aligned_size(130, 1) == 144
    sf = torch.tensor([[0.25, 1.0], [4.0, 0.5]], device=DEVICE)
    # _sanity_check_input (SGLANG_DEEPGEMM_SANITY_CHECK): fp32 scales must already be UE8M0-rounded.
    assert torch.equal(deep_gemm.ceil_to_ue8m0(sf), sf) and torch.equal(_ceil_to_ue8m0(sf), sf)
    assert torch.equal(deep_gemm.ceil_to_ue8m0(torch.tensor([0.3, 3.0], device=DEVICE)),
                       torch.tensor([0.5, 4.0], device=DEVICE))


def test_tma_aligned_activation_scales() -> None:
    g = _gen(7)
    m, k = 130, 512
    _, sf = _quant_per_token_group(_randn(m, k, g=g))
    out = get_mn_major_tma_aligned_tensor(sf)
    aligned = deep_gemm.get_tma_aligned_size(m, sf.element_size())
    assert out.shape == sf.shape and out.stride() == (1, aligned) and torch.equal(out, sf)
    grouped = get_mn_major_tma_aligned_tensor(sf.view(2, 65, k // 128))
    assert grouped.stride(-2) == 1 and torch.equal(grouped, sf.view(2, 65, k // 128))


def test_transform_sf_for_triton_fallback() -> None:
    # _per_token_group_quant_8bit_raw / fused silu+mul quant: keyword call, 3-tuple recipe with is_sfa.
    g = _gen(8)
    m, k = 192, 512
    _, x_s = _quant_per_token_group(_randn(m, k, g=g))
    out = deep_gemm.transform_sf_into_required_layout(x_s, num_groups=None, mn=m, k=k, recipe=(1, 128, 128),
                                                      is_sfa=True)
    assert torch.equal(out.float(), x_s) and out.stride(-2) == 1
    xg = torch.stack([x_s, x_s * 2])
    outg = deep_gemm.transform_sf_into_required_layout(xg, num_groups=2, mn=m, k=k, recipe=(1, 128, 128), is_sfa=True)
    assert torch.equal(outg.float(), xg)


def test_dsv3_weight_scales_unchanged_on_hopper() -> None:
    # A (128, 128) weight scale is only layout-checked on SM90 (DEEPGEMM_SCALE_UE8M0 is False there).
    g = _gen(9)
    n, k = 256, 512
    _, w_s = _quant_per_block(_randn(n, k, g=g))
    out = deep_gemm.transform_sf_into_required_layout(w_s, mn=n, k=k, recipe=(1, 128, 128), is_sfa=False)
    assert torch.equal(out.float().reshape(w_s.shape), w_s)


# --------------------------------------------------------------------------- SGLang DSA indexer / backend


def _pack_index_k_cache(k: torch.Tensor) -> torch.Tensor:
    """``(pages, 64, 128)`` float -> uint8 ``(pages, 64, 1, 132)``: 64*128 fp8 bytes, then 64 fp32 scales per page."""
    pages, bkv, dim = k.shape
    sf = k.abs().amax(-1, keepdim=True).clamp(min=1e-4) / FP8_MAX
    fused = torch.empty((pages, bkv * (dim + 4)), dtype=torch.uint8, device=k.device)
    fused[:, : bkv * dim] = (k / sf).to(FP8).reshape(pages, bkv * dim).view(torch.uint8)
    fused[:, bkv * dim:] = sf.reshape(pages, bkv).contiguous().view(torch.uint8)
    return fused.view(pages, bkv, 1, dim + 4)


def _unpack_index_k_cache(cache: torch.Tensor) -> torch.Tensor:
    pages, bkv, _, width = cache.shape
    dim = width - 4
    flat = cache.reshape(pages, bkv * width)
    values = flat[:, : bkv * dim].contiguous().view(FP8).view(pages, bkv, dim).float()
    scales = flat[:, bkv * dim:].contiguous().view(torch.float32).view(pages, bkv, 1)
    return values * scales


def _logits_ref(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # sum_h relu(q_h . k) * w_h
    return (torch.einsum("nhd,td->nht", q.float(), k).relu() * w.unsqueeze(-1)).sum(1)


def test_dsa_ragged_prefill() -> None:
    g = _gen(10)
    nq, nk, heads = 12, 200, 64
    q = _randn(nq, heads, 128, g=g).to(FP8)
    k = _randn(nk, 128, g=g)
    k_fp8, k_scale = _quant_per_token_group(k)
    k_scale = k_scale.view(-1)  # index cache scales: .view(float32).squeeze(-1)
    weights = torch.rand((nq, heads), generator=g).to(DEVICE) * heads ** -0.5
    ks = torch.randint(0, nk // 2, (nq,), generator=g, dtype=torch.int32).to(DEVICE)
    ke = torch.minimum(ks + torch.randint(1, nk, (nq,), generator=g, dtype=torch.int32).to(DEVICE),
                       torch.tensor(nk, dtype=torch.int32, device=DEVICE))
    logits = deep_gemm.fp8_mqa_logits(q, (k_fp8, k_scale), weights, ks, ke, clean_logits=False)
    assert logits.shape == (nq, nk) and logits.dtype == torch.float32
    ref = _logits_ref(q, k_fp8.float() * k_scale.unsqueeze(-1), weights)
    for i in range(nq):  # invalid positions are masked later by topk_transform
        s, e = int(ks[i]), int(ke[i])
        torch.testing.assert_close(logits[i, s:e].cpu(), ref[i, s:e].cpu(), atol=1e-3, rtol=1e-3)


def _to_2d_context_lens(seqlens: torch.Tensor) -> torch.Tensor:
    if seqlens.dim() == 2 and seqlens.shape[1] == 1:
        return seqlens
    return seqlens.contiguous().view(-1, 1)


def test_dsa_paged_decode_and_verify() -> None:
    g = _gen(11)
    heads, page = 64, 64
    lens = [70, 1, 300]
    pages_per_seq = -(-max(lens) // page)
    num_pages = len(lens) * pages_per_seq + 1
    k = _randn(num_pages, page, 128, g=g)
    kv_cache = _pack_index_k_cache(k)
    block_tables = torch.randperm(num_pages, generator=g)[: len(lens) * pages_per_seq].view(len(lens), -1)
    block_tables = block_tables.to(torch.int32).to(DEVICE)
    k_deq = _unpack_index_k_cache(kv_cache)
    sm_count = deep_gemm.get_num_sms()
    for next_n in (1, 2):  # decode; EAGLE target-verify flattened to (N_total, 1) (non-SM100 path)
        seqlens_expanded = torch.tensor([max(n - next_n + j + 1, 1) for n in lens for j in range(next_n)],
                                        dtype=torch.int32, device=DEVICE)
        ctx_2d = _to_2d_context_lens(seqlens_expanded)
        schedule = deep_gemm.get_paged_mqa_logits_metadata(ctx_2d, 64, deep_gemm.get_num_sms())
        assert schedule.shape == (sm_count + 1, 2)
        rows = ctx_2d.shape[0]
        q = _randn(rows, heads, 128, g=g).to(FP8).unsqueeze(1)  # split launch: (N, 1, H, D)
        weights = torch.rand((rows, heads), generator=g).to(DEVICE)
        table = block_tables.repeat_interleave(next_n, dim=0).contiguous()
        max_context_len = table.shape[1] * page
        logits = deep_gemm.fp8_paged_mqa_logits(q, kv_cache, weights, ctx_2d, table, schedule, max_context_len,
                                                clean_logits=False)
        assert logits.shape == (rows, max_context_len)
        for r in range(rows):
            n = int(ctx_2d[r, 0])
            keys = k_deq[table[r].long()].reshape(-1, 128)[:n]
            ref = _logits_ref(q[r, :1], keys, weights[r:r + 1])[0]
            torch.testing.assert_close(logits[r, :n].cpu(), ref.cpu(), atol=1e-3, rtol=1e-3)


# --------------------------------------------------------------------------- vLLM vllm/utils/deep_gemm.py


def _vllm_lazy_init() -> dict[str, Any]:
    dg = importlib.import_module("deep_gemm")
    names = ("fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "fp8_m_grouped_gemm_nt_masked",
             "get_paged_mqa_logits_metadata", "transform_sf_into_required_layout", "get_num_sms", "set_num_sms",
             "get_mk_alignment_for_contiguous_layout", "get_mn_major_tma_aligned_tensor",
             "get_mn_major_tma_aligned_packed_ue8m0_tensor", "fp8_mqa_logits", "fp8_paged_mqa_logits")
    impls = {name: getattr(dg, name, None) for name in names}
    pdl = getattr(dg, "set_pdl", None)
    if pdl is not None:
        pdl(True)
    return impls


def test_vllm_symbol_resolution() -> None:
    impls = _vllm_lazy_init()
    missing = [name for name, fn in impls.items() if fn is None]
    assert not missing, missing
    # v1 name vLLM's wrapper still exports (ep_moe-era engines import it from deep_gemm directly)
    from deep_gemm import get_col_major_tma_aligned_tensor

    sf = torch.rand((8, 4), device=DEVICE)
    assert torch.equal(get_col_major_tma_aligned_tensor(sf), sf)
    alignment = impls["get_mk_alignment_for_contiguous_layout"]()
    assert [alignment, alignment] == [128, 128]


def _e8m0_used() -> bool:
    return False  # Hopper default for a FLOAT32 checkpoint


def test_vllm_fp8_gemm_nt() -> None:
    g = _gen(12)
    lhs, rhs = _quant_per_token_group(_randn(64, 256, g=g)), _quant_per_block(_randn(128, 256, g=g))
    out = torch.empty((64, 128), dtype=torch.bfloat16, device=DEVICE)
    _vllm_lazy_init()["fp8_gemm_nt"](lhs, rhs, out, disable_ue8m0_cast=not _e8m0_used())
    _similar(out, _dequant_token(*lhs) @ _dequant_block(*rhs).t())


def test_vllm_grouped_contiguous() -> None:
    g = _gen(13)
    m_indices = _contiguous_layout([128, 128], 128)
    lhs = _quant_per_token_group(_randn(256, 256, g=g))
    ws = [_quant_per_block(_randn(128, 256, g=g)) for _ in range(2)]
    rhs = (torch.stack([w[0] for w in ws]), torch.stack([w[1] for w in ws]))
    out = torch.empty((256, 128), dtype=torch.bfloat16, device=DEVICE)
    _vllm_lazy_init()["m_grouped_fp8_gemm_nt_contiguous"](lhs, rhs, out, m_indices,
                                                         disable_ue8m0_cast=not _e8m0_used())
    _similar(out[:128], _dequant_token(*lhs)[:128] @ _dequant_block(*ws[0]).t())


def test_vllm_grouped_masked() -> None:
    g = _gen(14)
    ops = _masked_operands(g, 2, 128, 256, 256)
    out = torch.empty((2, 128, 256), dtype=torch.bfloat16, device=DEVICE)
    _vllm_lazy_init()["fp8_m_grouped_gemm_nt_masked"](ops["lhs"], ops["rhs"], out, ops["masked_m"], 64,
                                                     disable_ue8m0_cast=not _e8m0_used())
    _check_masked(out, ops)


def test_vllm_transform_sf() -> None:
    g = _gen(15)
    _, x_s = _quant_per_token_group(_randn(128, 512, g=g))
    out = _vllm_lazy_init()["transform_sf_into_required_layout"](x_s, 128, 512, (1, 128, 128), None, is_sfa=True,
                                                                 disable_ue8m0_cast=not _e8m0_used())
    assert torch.equal(out.float(), x_s)


def test_vllm_indexer_paged_metadata_and_logits() -> None:
    # vLLM normalizes context_lens to a contiguous 2-D int32 tensor; next_n = context_lens.shape[1].
    g = _gen(16)
    impls = _vllm_lazy_init()
    heads, block_size = 64, 64
    lens = torch.tensor([[90], [33]], dtype=torch.int32)
    base = torch.cat([lens, lens], dim=1)
    context_lens = base[:, :1].contiguous().to(DEVICE)  # a strided column made contiguous
    k = _randn(5, block_size, 128, g=g)
    kv_cache = _pack_index_k_cache(k)
    block_tables = torch.tensor([[3, 1], [0, 4]], dtype=torch.int32, device=DEVICE)
    schedule = impls["get_paged_mqa_logits_metadata"](context_lens, block_size, impls["get_num_sms"]())
    q = _randn(2, 1, heads, 128, g=g).to(FP8)
    weights = torch.rand((2, heads), generator=g).to(DEVICE)
    max_model_len = 128
    logits = impls["fp8_paged_mqa_logits"](q, kv_cache, weights, context_lens, block_tables, schedule, max_model_len,
                                           clean_logits=False)
    k_deq = _unpack_index_k_cache(kv_cache)
    for r in range(2):
        n = int(context_lens[r, 0])
        keys = k_deq[block_tables[r].long()].reshape(-1, 128)[:n]
        ref = _logits_ref(q[r], keys, weights[r:r + 1])[0]
        torch.testing.assert_close(logits[r, :n].cpu(), ref.cpu(), atol=1e-3, rtol=1e-3)


def test_vllm_calc_diff() -> None:
    from deep_gemm.testing import calc_diff

    x = torch.randn(32, 32)
    assert float(calc_diff(x, x)) < 1e-12
    assert abs(float(calc_diff(x, torch.zeros_like(x))) - 1.0) < 1e-12


# --------------------------------------------------------------------------- DeepGEMM's own tests (call forms)


def _align_up(x: int, y: int) -> int:
    return -(-x // y) * y


def _ran(parameter: str, fn: Any, *args: Any, **kwargs: Any) -> bool:
    """Call ``fn``; False where the build lacks ``parameter`` and refused it with a typed error naming it
    (never a TypeError), True where the call ran."""
    try:
        fn(*args, **kwargs)
    except NotImplementedError as exc:
        assert isinstance(exc, dgcompat_errors.UnsupportedFeatureError) and parameter in str(exc), exc
        return False
    return True


def test_deepgemm_bf16_contiguous_psum_layout() -> None:
    # tests/test_bf16.py test_m_grouped_gemm_contiguous: grouped_layout is per row, or with
    # use_psum_layout=True one end row per group, each group starting at the aligned end of the last.
    g = _gen(20)
    n, k, actual = 128, 256, [70, 0, 200]
    align = int(deep_gemm.get_mk_alignment_for_contiguous_layout())
    starts, ends, start = [], [], 0
    for m in actual:
        starts.append(start)
        ends.append(start + m)
        start = _align_up(start + m, align)
    total = max(start, align)
    a = _randn(total, k, g=g).bfloat16()
    b = _randn(len(actual), n, k, g=g).bfloat16()
    for use_psum_layout in (False, True):
        if use_psum_layout:
            layout = torch.tensor(ends, dtype=torch.int32, device=DEVICE)
        else:
            layout = torch.full((total,), -1, dtype=torch.int32, device=DEVICE)
            for i, (s0, e0) in enumerate(zip(starts, ends, strict=True)):
                layout[s0:e0] = i
        d = torch.empty((total, n), dtype=torch.bfloat16, device=DEVICE)
        if not _ran("use_psum_layout", deep_gemm.m_grouped_bf16_gemm_nt_contiguous, a, b, d, layout,
                    use_psum_layout=use_psum_layout):
            assert use_psum_layout  # the per-row layout works everywhere
            continue
        for i, (s0, e0) in enumerate(zip(starts, ends, strict=True)):
            if e0 > s0:
                _similar(d[s0:e0], a[s0:e0].float() @ b[i].float().t(), 1e-4)


def test_deepgemm_bf16_masked_as_psum_layout() -> None:
    # tests/test_bf16.py test_m_grouped_gemm_masked: the masked operands re-laid as a psum layout and
    # run through the contiguous GEMM with expected_m_for_psum_layout.
    g = _gen(21)
    groups, max_m, n, k, expected_m = 3, 128, 128, 256, 40
    align = int(deep_gemm.get_mk_alignment_for_contiguous_layout())
    masked = [30, 0, 57]
    a = _randn(groups, max_m, k, g=g).bfloat16()
    b = _randn(groups, n, k, g=g).bfloat16()
    psum, last = [], 0
    a_psum = torch.zeros((groups * max_m, k), dtype=torch.bfloat16, device=DEVICE)
    for i, m in enumerate(masked):
        start = 0 if i == 0 else _align_up(last, align)
        a_psum[start:start + m] = a[i, :m]
        last = start + m
        psum.append(last)
    d_psum = torch.empty((groups * max_m, n), dtype=torch.bfloat16, device=DEVICE)
    psum_m = torch.tensor(psum, dtype=torch.int32, device=DEVICE)
    if not _ran("use_psum_layout", deep_gemm.m_grouped_bf16_gemm_nt_contiguous, a_psum, b, d_psum, psum_m,
                use_psum_layout=True, expected_m_for_psum_layout=expected_m):
        return
    for i, m in enumerate(masked):
        start = 0 if i == 0 else _align_up(psum[i - 1], align)
        if m:
            _similar(d_psum[start:psum[i]], a[i, :m].float() @ b[i].float().t(), 1e-4)


def test_deepgemm_fp8_split_recipes_and_compiled_dims() -> None:
    # tests/test_fp8_fp4.py (FP8 x FP8, non-legacy config): recipe=None with recipe_a=(1, gran_k) per
    # token and recipe_b=(gran_k, gran_k) per block, disable_ue8m0_cast on Hopper; and compiled_dims.
    g = _gen(22)
    lhs, rhs = _quant_per_token_group(_randn(64, 256, g=g)), _quant_per_block(_randn(128, 256, g=g))
    ref = _dequant_token(*lhs) @ _dequant_block(*rhs).t()
    out = torch.empty((64, 128), dtype=torch.bfloat16, device=DEVICE)
    if _ran("recipe_a", deep_gemm.fp8_gemm_nt, lhs, rhs, out, c=None, disable_ue8m0_cast=True, recipe=None,
            recipe_a=(1, 128), recipe_b=(128, 128)):
        _similar(out, ref)
    out.zero_()
    deep_gemm.fp8_gemm_nt(lhs, rhs, out, compiled_dims="nk")
    _similar(out, ref)
