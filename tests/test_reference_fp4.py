"""The reference's FP4 / MX indexer inputs and its ``fp8_fp4`` logits, against hand-computed bytes and naive loops.

The expected bytes are written out by hand (so a swapped nibble or byte order fails), and the naive
oracles decode with Python integers and ``struct`` in float64, sharing no code with the vectorized
implementations under test.
"""

from __future__ import annotations

import inspect
import math
import struct
from collections.abc import Callable
from typing import Any

import pytest
import torch

from dgcompat import reference as R
from dgcompat.errors import BadArgumentError
from dgcompat.reference import backend as reference_backend

FP8 = torch.float8_e4m3fn
E2M1 = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)


# ---------------------------------------------------------------------------------------------
# independent helpers


def naive_decode_fp4(byte_values: list[int]) -> list[float]:
    """Packed bytes -> e2m1 values: low nibble first, bit 3 the sign."""
    out: list[float] = []
    for b in byte_values:
        for code in (b & 0x0F, (b >> 4) & 0x0F):
            mag = E2M1[code & 7]
            out.append(-mag if code & 8 and mag else mag)
    return out


def naive_scales(word: int) -> list[float]:
    """int32 -> the four UE8M0 scales, byte g = bits 8g..8g+7."""
    u = word & 0xFFFFFFFF
    return [2.0 ** (((u >> (8 * g)) & 0xFF) - 127) for g in range(4)]


def naive_dequant_fp4_row(packed: torch.Tensor, sf: int) -> list[float]:
    vals = naive_decode_fp4([int(b) & 0xFF for b in packed.tolist()])
    scales = naive_scales(sf)
    return [v * scales[i // 32] for i, v in enumerate(vals)]


def naive_round_fp4(v: float) -> float:
    """Nearest e2m1 magnitude (ties to the even code), saturating at 6, with v's sign."""
    a = min(abs(v), 6.0)
    best = min(range(8), key=lambda c: (abs(E2M1[c] - a), c % 2))
    return math.copysign(E2M1[best], v) if E2M1[best] else 0.0


def naive_scale(amax: float, fmax: float) -> float:
    """2 ** ceil(log2(max(amax, 1e-4) / fmax)) computed on float32 values."""
    s = struct.unpack("<f", struct.pack("<f", max(struct.unpack("<f", struct.pack("<f", amax))[0], 1e-4)))[0]
    s = struct.unpack("<f", struct.pack("<f", s / fmax))[0]
    return 2.0 ** math.ceil(math.log2(s))


def le_bytes(t: torch.Tensor) -> bytes:
    return bytes(int(b) for b in t.contiguous().reshape(-1).view(torch.uint8).tolist())


# ---------------------------------------------------------------------------------------------
# formats, by hand


def test_nibble_order_sign_and_scale_bytes_by_hand() -> None:
    row = torch.zeros(128)
    # group 0 (amax 6 -> scale 1): 0.5, -1.0, 6.0, -0.0 -> codes 1, 0xA, 7, 0
    row[:4] = torch.tensor([0.5, -1.0, 6.0, -0.0])
    row[32] = 12.0   # group 1: scale 2
    row[64] = -3.0   # group 2: scale 0.5
    row[96] = 0.75   # group 3: 0.75 / 6 = 0.125 -> scale 0.125
    values, sf = R.cast_to_fp4(row)
    assert values.dtype == torch.int8 and tuple(values.shape) == (64,) and sf.dtype == torch.int32
    raw = le_bytes(values)
    assert raw[0] == 0xA1  # value 0 (0.5 -> 1) low nibble, value 1 (-1.0 -> 8|2) high nibble
    assert raw[1] == 0x07  # 6.0 -> 7 low, -0.0 -> 0 (never 8) high
    assert raw[16] == 0x07 and raw[32] == 0x0F and raw[48] == 0x07  # 12/2 = 6, -3/0.5 = -6, 0.75/0.125 = 6
    assert int(sf) & 0xFFFFFFFF == 127 | 128 << 8 | 126 << 16 | 124 << 24
    assert le_bytes(sf) == bytes([127, 128, 126, 124])  # group g in byte g of memory (little-endian)
    back = R.dequantize_mx(values, sf)
    assert back[:4].tolist() == [0.5, -1.0, 6.0, 0.0]
    assert (back[32].item(), back[64].item(), back[96].item()) == (12.0, -3.0, 0.75)


def test_rounding_ties_go_to_the_even_code() -> None:
    row = torch.zeros(32)
    row[:10] = torch.tensor([6.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, -0.2, 5.9])
    values, sf = R.cast_to_fp4(row)
    got = R.dequantize_mx(values, sf)[:10].tolist()
    assert got == [6.0, 0.0, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 0.0, 6.0]
    assert int(sf) == 0x7F7F7F7F  # one group of scale 1, the absent groups 1.0


def test_short_rows_pad_their_scale_bytes_with_one() -> None:
    x = torch.full((2, 64), 3.0)
    _, sf = R.cast_to_fp4(x)
    assert [le_bytes(s) for s in sf] == [bytes([126, 126, 127, 127])] * 2
    _, sf8 = R.cast_to_mxfp8(torch.full((1, 32), 448.0))
    assert le_bytes(sf8) == bytes([127, 127, 127, 127])


@pytest.mark.parametrize("dim", [32, 64, 96, 128])
def test_fp4_cast_matches_the_naive_quantizer(dim: int) -> None:
    gen = torch.Generator().manual_seed(dim)
    x = torch.randn(6, dim, generator=gen) * torch.rand(6, 1, generator=gen) * 20
    x[0, :3] = torch.tensor([1e-7, -1e-7, 0.0])
    values, sf = R.cast_to_fp4(x)
    for r in range(x.shape[0]):
        row = x[r].tolist()
        scales = [naive_scale(max(abs(v) for v in row[g:g + 32]), 6.0) for g in range(0, dim, 32)]
        want = [naive_round_fp4(v / scales[i // 32]) * scales[i // 32] for i, v in enumerate(row)]
        assert naive_dequant_fp4_row(values[r], int(sf[r])) == want
        assert naive_scales(int(sf[r]))[: dim // 32] == scales


def test_mxfp8_cast_matches_the_naive_quantizer() -> None:
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(5, 128, generator=gen) * 100
    values, sf = R.cast_to_mxfp8(x)
    assert values.dtype == FP8 and sf.dtype == torch.int32 and tuple(sf.shape) == (5,)
    for r in range(5):
        row = x[r].tolist()
        scales = [naive_scale(max(abs(v) for v in row[g:g + 32]), 448.0) for g in range(0, 128, 32)]
        assert naive_scales(int(sf[r])) == scales
        want = torch.tensor([v / scales[i // 32] for i, v in enumerate(row)], dtype=torch.float32).to(FP8)
        assert torch.equal(values[r].view(torch.uint8), want.view(torch.uint8))


def test_round_trips() -> None:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 3, 128, generator=gen) * 5
    v, sf = R.cast_to_fp4(x)
    once = R.dequantize_mx(v, sf)
    v2, sf2 = R.cast_to_fp4(once)
    assert torch.equal(R.dequantize_mx(v2, sf2), once)  # FP4 values are fixed points of the cast
    # within half a step: the scale is at most 2 * amax / 6 and the widest e2m1 step (4 -> 6) is 2 scales
    group_amax = x.reshape(4, 3, 4, 32).abs().amax(dim=-1, keepdim=True)
    assert bool(((once - x).reshape(4, 3, 4, 32).abs() <= group_amax / 3).all())
    v8, s8 = R.cast_to_mxfp8(x)
    once8 = R.dequantize_mx(v8, s8)
    assert torch.equal(R.dequantize_mx(*R.cast_to_mxfp8(once8)), once8)
    assert torch.allclose(once8, x, rtol=2 ** -3, atol=1e-3)
    assert torch.equal(R.unpack_fp4(v).reshape(4, 3, 4, 32) * R.unpack_ue8m0_scales(sf).unsqueeze(-1),
                       once.reshape(4, 3, 4, 32))


def test_fp4_cache_layout_by_bytes() -> None:
    gen = torch.Generator().manual_seed(4)
    nb, bkv, dim = 3, 16, 128
    k = torch.randn(nb, bkv, dim, generator=gen)
    cache = R.pack_fp4_kv_cache(k)
    assert cache.dtype == torch.uint8 and tuple(cache.shape) == (nb, bkv, 1, 68)
    values, sf = R.cast_to_fp4(k)
    for blk in range(nb):
        block = le_bytes(cache[blk])
        assert len(block) == bkv * 68
        for t in range(bkv):
            assert block[t * 64:(t + 1) * 64] == le_bytes(values[blk, t])  # all tokens' values first
            word = int.from_bytes(block[bkv * 64 + 4 * t: bkv * 64 + 4 * t + 4], "little")
            assert word == int(sf[blk, t]) & 0xFFFFFFFF  # then one int32 per token
    v, s = R.unpack_fp4_kv_cache(cache)
    assert torch.equal(v, values) and torch.equal(s, sf)
    assert torch.equal(R.pack_fp4_kv_cache(k.unsqueeze(2)), cache)


def test_mx_fp8_cache_holds_int32_scales() -> None:
    k = torch.randn(2, 8, 64)
    cache = R.pack_kv_cache(k, mx=True)
    values, sf = R.cast_to_mxfp8(k)
    v, s = R.unpack_kv_cache(cache, mx=True)
    assert s.dtype == torch.int32 and torch.equal(s, sf) and torch.equal(v.view(torch.uint8), values.view(torch.uint8))
    assert tuple(cache.shape) == (2, 8, 1, 68)


# ---------------------------------------------------------------------------------------------
# logits


def naive_logits(q: list[list[list[float]]], k: list[list[float]], w: list[list[float]],
                 post: list[float] | None = None) -> list[list[float]]:
    """sum_h w[i][h] * relu(q[i][h] . k[j]) (times post[j]) in float64."""
    out = []
    for i, qi in enumerate(q):
        row = []
        for j, kj in enumerate(k):
            total = 0.0
            for h, qh in enumerate(qi):
                total += w[i][h] * max(0.0, sum(a * b for a, b in zip(qh, kj, strict=True)))
            row.append(total * (post[j] if post is not None else 1.0))
        out.append(row)
    return out


def _ragged_inputs(fmt: str, nq: int = 3, h: int = 2, dim: int = 64, nk: int = 5, seed: int = 0) -> tuple[Any, ...]:
    gen = torch.Generator().manual_seed(seed)
    q, k = torch.randn(nq, h, dim, generator=gen), torch.randn(nk, dim, generator=gen)
    w = torch.randn(nq, h, generator=gen)
    if fmt == "fp4":
        qp, kp = R.cast_to_fp4(q), R.cast_to_fp4(k)
        qn = [[naive_dequant_fp4_row(qp[0][i, hh], int(qp[1][i, hh])) for hh in range(h)] for i in range(nq)]
        kn = [naive_dequant_fp4_row(kp[0][j], int(kp[1][j])) for j in range(nk)]
        return (qp[0], qp[1]), kp, w, qn, kn, None
    if fmt == "mxfp8":
        qp, kp = R.cast_to_mxfp8(q), R.cast_to_mxfp8(k)
        qn = R.dequantize_mx(*qp).tolist()
        kn = R.dequantize_mx(*kp).tolist()
        return (qp[0], qp[1]), kp, w, qn, kn, None
    q8 = (q * 4).to(FP8)
    k8, ksf = R.per_token_cast_to_fp8(k)
    return (q8, None), (k8, ksf.view(-1)), w, q8.float().tolist(), k8.float().tolist(), ksf.view(-1).tolist()


@pytest.mark.parametrize("fmt", ["fp4", "mxfp8", "fp8"])
def test_ragged_logits_equal_the_dequantized_oracle(fmt: str) -> None:
    q, kv, w, qn, kn, post = _ragged_inputs(fmt)
    nq, nk = len(qn), len(kn)
    ks = torch.tensor([0, 1, 2], dtype=torch.int32)
    ke = torch.tensor([5, 3, 2], dtype=torch.int32)
    want = naive_logits(qn, kn, w.tolist(), post)
    full = reference_backend.fp8_fp4_mqa_logits(q, kv, w, ks, ke, 0)
    assert full.dtype == torch.float32 and tuple(full.shape) == (nq, nk) and full.stride(0) == 512
    for i in range(nq):
        for j in range(nk):
            if int(ks[i]) <= j < int(ke[i]):
                assert full[i, j].item() == pytest.approx(want[i][j], rel=1e-5, abs=1e-5)
            else:
                assert full[i, j].item() == float("-inf")
    packed = reference_backend.fp8_fp4_mqa_logits(q, kv, w, ks, ke, 4)
    assert tuple(packed.shape) == (nq, 4) and packed.stride(0) == 256
    for i in range(nq):
        for c in range(4):
            j = int(ks[i]) + c
            expected = full[i, j].item() if j < int(ke[i]) else float("-inf")
            assert packed[i, c].item() == expected


def test_bf16_logits_are_the_float32_logits_rounded_once() -> None:
    q, kv, w, *_ = _ragged_inputs("fp4", nq=4, h=4, dim=128, nk=40, seed=5)
    ks = torch.zeros(4, dtype=torch.int32)
    ke = torch.full((4,), 40, dtype=torch.int32)
    f32 = reference_backend.fp8_fp4_mqa_logits(q, kv, w, ks, ke, 0, torch.float32)
    b16 = reference_backend.fp8_fp4_mqa_logits(q, kv, w, ks, ke, 0, logits_dtype=torch.bfloat16)
    assert b16.dtype == torch.bfloat16 and b16.stride(0) == 512
    assert torch.equal(b16, f32.to(torch.bfloat16))
    assert bool(((b16.float() - f32).abs() <= f32.abs() * 2 ** -8).all())  # within bf16 rounding
    b16w = reference_backend.fp8_fp4_mqa_logits(q, kv, w.bfloat16(), ks, ke, 0, torch.bfloat16)
    f32w = reference_backend.fp8_fp4_mqa_logits(q, kv, w.bfloat16().float(), ks, ke, 0, torch.float32)
    assert torch.equal(b16w, f32w.to(torch.bfloat16))  # bf16 weights: widened, reduced in float32, rounded once


def _paged_case(fmt: str, seed: int = 0) -> tuple[Any, ...]:
    """A shuffled block table over a cache of per-sequence keys; returns paged inputs and each sequence's keys."""
    gen = torch.Generator().manual_seed(seed)
    b, next_n, h, dim, bkv = 2, 2, 4, 128, 16
    lens = [37, 20]
    nb = 6
    keys = torch.randn(nb, bkv, dim, generator=gen)
    order = torch.randperm(nb, generator=gen).to(torch.int32)
    table = torch.stack([order[:3], order[3:]])
    q = torch.randn(b, next_n, h, dim, generator=gen)
    w = torch.randn(b * next_n, h, generator=gen)
    qp: tuple[torch.Tensor, torch.Tensor | None]
    if fmt == "fp4":
        cache, qp = R.pack_fp4_kv_cache(keys), R.cast_to_fp4(q)
        kq = R.cast_to_fp4(keys)
    elif fmt == "mxfp8":
        cache, qp = R.pack_kv_cache(keys, mx=True), R.cast_to_mxfp8(q)
        kq = R.cast_to_mxfp8(keys)
    else:
        cache, qp = R.pack_kv_cache(keys), ((q * 4).to(FP8), None)
        kq = R.unpack_kv_cache(cache)
    ctx = torch.tensor([[lens[0] - 1, lens[0]], [lens[1] - 1, lens[1]]], dtype=torch.int32)
    seq_keys = []
    for s in range(b):
        blocks = [int(x) for x in table[s]]
        seq_keys.append(tuple(torch.cat([t[blk] for blk in blocks]) for t in kq))
    return qp, cache, w, ctx, table, seq_keys, lens


@pytest.mark.parametrize("fmt", ["fp4", "mxfp8", "fp8"])
def test_paged_equals_ragged_for_the_same_keys(fmt: str) -> None:
    qp, cache, w, ctx, table, seq_keys, _lens = _paged_case(fmt)
    out = reference_backend.fp8_fp4_paged_mqa_logits(qp, cache, w, ctx, table, None, 64)
    assert out.dtype == torch.float32 and tuple(out.shape) == (4, 64) and out.stride(0) == 256
    for s in range(2):
        kv = (seq_keys[s][0], seq_keys[s][1])
        qs = (qp[0][s], None if qp[1] is None else qp[1][s])
        ks = torch.zeros(2, dtype=torch.int32)
        ke = ctx[s].clone()
        ragged = reference_backend.fp8_fp4_mqa_logits(qs, kv, w[2 * s:2 * s + 2], ks, ke, 0)
        n = ragged.shape[1]
        assert torch.allclose(out[2 * s:2 * s + 2, :n], ragged, rtol=1e-5, atol=1e-5, equal_nan=False), fmt
        assert bool(torch.isinf(out[2 * s:2 * s + 2, n:]).all())
    b16 = reference_backend.fp8_fp4_paged_mqa_logits(qp, cache, w, ctx, table, None, 64, torch.bfloat16)
    assert b16.dtype == torch.bfloat16 and b16.stride(0) == 512 and torch.equal(b16, out.to(torch.bfloat16))


def test_fp8_form_equals_the_legacy_functions() -> None:
    qp, cache, w, ctx, table, *_ = _paged_case("fp8", seed=9)
    new = reference_backend.fp8_fp4_paged_mqa_logits(qp, cache, w, ctx, table, None, 64)
    assert torch.equal(new, R.fp8_paged_mqa_logits(qp[0], cache, w, ctx, table, None, 64))
    q, kv, w2, *_ = _ragged_inputs("fp8", seed=2)
    ks, ke = torch.zeros(3, dtype=torch.int32), torch.full((3,), 5, dtype=torch.int32)
    assert torch.equal(reference_backend.fp8_fp4_mqa_logits(q, kv, w2, ks, ke, 0), R.fp8_mqa_logits(q[0], kv, w2, ks, ke))


def test_backend_has_upstream_signatures() -> None:
    # vLLM 0.34.0's vendored DeepGEMM 2.8.1, vllm/third_party/deep_gemm/_C.py
    ragged = list(inspect.signature(reference_backend.fp8_fp4_mqa_logits).parameters)
    paged = list(inspect.signature(reference_backend.fp8_fp4_paged_mqa_logits).parameters)
    assert ragged == ["q", "kv", "weights", "cu_seq_len_k_start", "cu_seq_len_k_end", "max_seqlen_k", "logits_dtype",
                      "schedule_meta"]
    assert paged == ["q", "kv_cache", "weights", "context_lens", "block_table", "schedule_meta", "max_context_len",
                     "logits_dtype", "indices"]
    assert {"fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits"} <= set(reference_backend.__all__)
    assert "cast_to_fp4" not in reference_backend.__all__ and not hasattr(reference_backend, "cast_to_fp4")


def test_every_argument_is_checked() -> None:
    q, kv, w, *_ = _ragged_inputs("fp4")
    ks, ke = torch.zeros(3, dtype=torch.int32), torch.full((3,), 5, dtype=torch.int32)
    k8 = R.cast_to_mxfp8(torch.randn(5, 64))
    rag: Any = reference_backend.fp8_fp4_mqa_logits
    cases: list[tuple[str, Callable[[], object]]] = [
        ("q", lambda: rag(q[0], kv, w, ks, ke, 0)),
        ("q[1]", lambda: rag((q[0], None), kv, w, ks, ke, 0)),
        ("q[1]", lambda: rag((q[0], q[1].float()), kv, w, ks, ke, 0)),
        ("q[1]", lambda: rag((q[0], q[1][:2]), kv, w, ks, ke, 0)),
        ("q[0]", lambda: rag((q[0].float(), q[1]), kv, w, ks, ke, 0)),
        ("q[0]", lambda: rag((torch.zeros(3, 2, 24, dtype=torch.int8), torch.zeros(3, 2, dtype=torch.int32)), kv, w,
                             ks, ke, 0)),
        ("kv[0]", lambda: rag(q, k8, w, ks, ke, 0)),
        ("kv[1]", lambda: rag(q, (kv[0], kv[1].float()), w, ks, ke, 0)),
        ("weights", lambda: rag(q, kv, w.bfloat16(), ks, ke, 0)),
        ("weights", lambda: rag(q, kv, w.half(), ks, ke, 0, torch.bfloat16)),
        ("logits_dtype", lambda: rag(q, kv, w, ks, ke, 0, torch.float16)),
        ("logits_dtype", lambda: rag(q, kv, w, ks, ke, 0, "bfloat16")),
        ("cu_seq_len_k_start", lambda: rag(q, kv, w, ks.long(), ke, 0)),
        ("cu_seq_len_k_end", lambda: rag(q, kv, w, ks, ke[:2], 0)),
        ("max_seqlen_k", lambda: rag(q, kv, w, ks, ke, -1)),
        ("schedule_meta", lambda: rag(q, kv, w, ks, ke, 0, torch.float32, [1])),
    ]
    qp, cache, wp, ctx, table, *_ = _paged_case("fp4")
    pag: Any = reference_backend.fp8_fp4_paged_mqa_logits
    cases += [
        ("kv_cache", lambda: pag(qp, R.pack_kv_cache(torch.randn(6, 16, 128)), wp, ctx, table, None, 64)),
        ("q[1]", lambda: pag((qp[0], None), cache, wp, ctx, table, None, 64)),
        ("weights", lambda: pag(qp, cache, wp[:2], ctx, table, None, 64)),
        ("context_lens", lambda: pag(qp, cache, wp, ctx.long(), table, None, 64)),
        ("block_table", lambda: pag(qp, cache, wp, ctx, table.view(-1), None, 64)),
        ("max_context_len", lambda: pag(qp, cache, wp, ctx, table, None, 10)),
        ("logits_dtype", lambda: pag(qp, cache, wp, ctx, table, None, 64, None)),
        ("indices", lambda: pag(qp, cache, wp, ctx, table, None, 64, torch.float32, torch.zeros(2, dtype=torch.int32))),
        ("x", lambda: R.cast_to_fp4(torch.randn(2, 48))),
        ("x", lambda: R.cast_to_mxfp8(torch.randn(2, 256))),
        ("sf", lambda: R.dequantize_mx(qp[0], qp[1][:1])),
        ("k", lambda: R.pack_fp4_kv_cache(torch.randn(2, 4, 200))),
        ("mx", lambda: R.pack_kv_cache(torch.randn(2, 4, 64), mx=1)),  # type: ignore[arg-type]
    ]
    for i, (argument, call) in enumerate(cases):
        with pytest.raises(BadArgumentError) as info:
            call()
        assert info.value.argument == argument, (i, argument, str(info.value))
