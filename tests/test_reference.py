"""Tests of dgcompat.reference against independent naive computations.

The naive versions below use Python loops, float64 and byte-level decoding (``struct``) so that
they share no code path with the vectorized implementations under test.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dgcompat import _device
from dgcompat import reference as R
from dgcompat.errors import BadArgumentError
from dgcompat.reference import backend as reference_backend

FP8 = torch.float8_e4m3fn
NEG_INF = float("-inf")

SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
FEW = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------------------------
# independent helpers


def gen_for(data: st.DataObject) -> torch.Generator:
    seed = data.draw(st.integers(0, 2**31 - 1), label="seed")
    return torch.Generator().manual_seed(seed)


def randn(gen: torch.Generator, *shape: int, scale: float = 1.0) -> torch.Tensor:
    return torch.randn(*shape, generator=gen) * scale


def rand_fp8(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return (torch.randn(*shape, generator=gen) * 3).to(FP8)


def rand_scale(gen: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=gen) * 2 + 0.05


def ceil_div(x: int, y: int) -> int:
    return -(-x // y)


def ue8m0_byte(v: float) -> int:
    """Biased exponent byte of a float32 value."""
    bits = int.from_bytes(struct.pack("<f", v), "little")
    return (bits >> 23) & 0xFF


def unpack_int_bytes(v: int) -> list[int]:
    return [(v >> (8 * j)) & 0xFF for j in range(4)]


def scale_table(sf: torch.Tensor, nk: int) -> torch.Tensor:
    """float64 scale table (.., rows, nk) from float32 or packed-UE8M0 int32 scales."""
    if sf.dtype == torch.float32:
        return sf.to(torch.float64)
    flat = sf.reshape(-1, sf.shape[-1]).tolist()
    rows = []
    for row in flat:
        exps = [b for v in row for b in unpack_int_bytes(v)][:nk]
        rows.append([2.0 ** (e - 127) for e in exps])
    return torch.tensor(rows, dtype=torch.float64).reshape(*sf.shape[:-1], nk)


def naive_dequant(x: torch.Tensor, sf: torch.Tensor, gran_mn: int, gran_k: int) -> torch.Tensor:
    """float64 dequantization by loops; sf rows == x rows (per row) or ceil(rows/gran_mn)."""
    squeeze = x.dim() == 2
    x3 = x.unsqueeze(0) if squeeze else x
    rows, k = x3.shape[-2], x3.shape[-1]
    nk = ceil_div(k, gran_k)
    table = scale_table(sf.unsqueeze(0) if squeeze else sf, nk)
    per_row = table.shape[-2] == rows
    out = torch.empty(x3.shape, dtype=torch.float64)
    x64 = x3.to(torch.float64)
    for g in range(x3.shape[0]):
        for i in range(rows):
            r = i if per_row else i // gran_mn
            for kb in range(nk):
                sl = slice(kb * gran_k, min(k, (kb + 1) * gran_k))
                out[g, i, sl] = x64[g, i, sl] * table[g, r, kb]
    return out.squeeze(0) if squeeze else out


def fp32_gemm_bound(a64: torch.Tensor, b64: torch.Tensor) -> torch.Tensor:
    """Error bound of a float32-accumulated product against the float64 one."""
    k = a64.shape[-1]
    return (k + 4) * 2.0**-23 * (a64.abs() @ b64.abs().transpose(-1, -2)) + 1e-30


def assert_within(got: torch.Tensor, want: torch.Tensor, bound: torch.Tensor) -> None:
    err = (got.to(torch.float64) - want).abs()
    bad = err > bound
    assert not bool(bad.any()), f"max excess {(err - bound).max().item()} at {bad.nonzero()[:3].tolist()}"


def fp8_byte_values(raw: Sequence[int]) -> torch.Tensor:
    return torch.tensor(list(raw), dtype=torch.uint8).view(FP8).to(torch.float64)


def naive_kv_decode(kv_cache: torch.Tensor) -> tuple[list[list[torch.Tensor]], list[list[float]]]:
    """Per block/token float64 FP8 values and float32 scales, decoded from raw bytes."""
    nb, bkv, _, width = kv_cache.shape
    d = width - 4
    raw = kv_cache.reshape(nb, -1).tolist()
    vals, scales = [], []
    for b in range(nb):
        blk = raw[b]
        vals.append([fp8_byte_values(blk[t * d : (t + 1) * d]) for t in range(bkv)])
        scales.append(
            [struct.unpack("<f", bytes(blk[bkv * d + 4 * t : bkv * d + 4 * t + 4]))[0] for t in range(bkv)]
        )
    return vals, scales


# ---------------------------------------------------------------------------------------------
# scale helpers


@SETTINGS
@given(st.data())
def test_ceil_to_ue8m0_is_next_power_of_two(data: st.DataObject) -> None:
    xs = data.draw(
        st.lists(st.floats(2.0**-100, 2.0**100, allow_nan=False, width=32), min_size=1, max_size=16), label="xs"
    )
    got = R.ceil_to_ue8m0(torch.tensor(xs, dtype=torch.float32)).tolist()
    for x, g in zip(xs, got, strict=True):
        mant, exp = math.frexp(x)  # x = mant * 2**exp, 0.5 <= mant < 1
        want = 2.0 ** (exp - 1) if mant == 0.5 else 2.0**exp
        assert g == want, (x, g, want)


def test_ceil_to_ue8m0_edges() -> None:
    x = torch.tensor([0.0, -3.0, 1.0, 2.0**-130, float("inf")], dtype=torch.float32)
    got = R.ceil_to_ue8m0(x).tolist()
    assert got == [2.0**-126, 4.0, 1.0, 2.0**-126, 2.0**127]
    assert R.ceil_to_ue8m0(torch.tensor([3.0], dtype=torch.bfloat16)).dtype == torch.float32
    with pytest.raises(BadArgumentError):
        R.ceil_to_ue8m0(torch.tensor([1, 2], dtype=torch.int32))


def test_get_tma_aligned_size() -> None:
    assert R.get_tma_aligned_size(100, 4) == 100
    assert R.get_tma_aligned_size(101, 4) == 104
    assert R.get_tma_aligned_size(1, 4) == 4
    assert R.get_tma_aligned_size(0, 4) == 0
    assert R.get_tma_aligned_size(9, 2) == 16
    assert R.get_tma_aligned_size(17, 1) == 32
    assert R.get_tma_aligned_size(3, 16) == 3
    with pytest.raises(BadArgumentError) as info:
        R.get_tma_aligned_size(8, 3)
    assert info.value.argument == "element_size"
    with pytest.raises(BadArgumentError):
        R.get_tma_aligned_size(-1, 4)


@SETTINGS
@given(data=st.data(), groups=st.one_of(st.none(), st.integers(1, 3)), mn=st.integers(1, 21), k=st.integers(1, 6))
def test_mn_major_tma_aligned_tensor(data: st.DataObject, groups: int | None, mn: int, k: int) -> None:
    gen = gen_for(data)
    shape = (mn, k) if groups is None else (groups, mn, k)
    sf = rand_scale(gen, *shape)
    out = R.get_mn_major_tma_aligned_tensor(sf)
    aligned = ceil_div(mn, 4) * 4
    assert out.dtype == torch.float32 and tuple(out.shape) == shape
    assert torch.equal(out, sf)
    want_stride = (1, aligned) if groups is None else (k * aligned, 1, aligned)
    assert out.stride() == want_stride
    # already aligned input comes back as is
    assert R.get_mn_major_tma_aligned_tensor(out) is out
    # a K-major transposed view is re-laid out with the same values
    again = R.get_mn_major_tma_aligned_tensor(sf.transpose(-1, -2).contiguous().transpose(-1, -2))
    assert again.stride() == want_stride and torch.equal(again, sf)


def test_mn_major_tma_aligned_tensor_rejects() -> None:
    with pytest.raises(BadArgumentError):
        R.get_mn_major_tma_aligned_tensor(torch.ones(4, 2, dtype=torch.bfloat16))
    with pytest.raises(BadArgumentError):
        R.get_mn_major_tma_aligned_tensor(torch.ones(4))


@SETTINGS
@given(data=st.data(), groups=st.one_of(st.none(), st.integers(1, 3)), mn=st.integers(1, 13), k=st.integers(1, 10))
def test_packed_ue8m0_layout_and_bytes(data: st.DataObject, groups: int | None, mn: int, k: int) -> None:
    gen = gen_for(data)
    shape = (mn, k) if groups is None else (groups, mn, k)
    exps = torch.randint(-40, 40, shape, generator=gen).to(torch.float32)
    sf = torch.pow(2.0, exps)
    out = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    pk = ceil_div(k, 4)
    aligned = ceil_div(mn, 4) * 4
    assert out.dtype == torch.int32
    lead = () if groups is None else (groups,)
    assert tuple(out.shape) == lead + (mn, pk)
    want_stride = (1, aligned) if groups is None else (pk * aligned, 1, aligned)
    assert out.stride() == want_stride  # includes pk == 1
    flat_sf = sf.reshape(-1, mn, k).tolist()
    flat_out = out.reshape(-1, mn, pk).tolist()
    for g in range(len(flat_sf)):
        for i in range(mn):
            got = [b for v in flat_out[g][i] for b in unpack_int_bytes(v)]
            want = [ue8m0_byte(v) for v in flat_sf[g][i]] + [0] * (pk * 4 - k)
            assert got == want


def test_packed_ue8m0_size_one_trailing_dim_keeps_stride() -> None:
    out = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(100, 4))
    assert tuple(out.shape) == (100, 1) and out.stride() == (1, 100)
    out = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(7, 3))
    assert tuple(out.shape) == (7, 1) and out.stride() == (1, 8)
    out3 = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(2, 5, 2))
    assert tuple(out3.shape) == (2, 5, 1) and out3.stride() == (8, 1, 8)


def test_packed_ue8m0_masks_mantissa() -> None:
    # exponent bytes 127, 127, 128, 126 with every mantissa pattern; mantissa bits must not leak
    bits = torch.tensor([[0x3FC00000, 0x3FFFFFFF, 0x407FFFFF, 0x3F400001, 0x3F800001]], dtype=torch.int32)
    sf = bits.view(torch.float32)
    v = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf).reshape(-1).tolist()
    assert [b for x in v for b in unpack_int_bytes(x)] == [127, 127, 128, 126, 127, 0, 0, 0]


# ---------------------------------------------------------------------------------------------
# transform_sf_into_required_layout / transform_scale_ue8m0


def naive_packed(sf_rows: torch.Tensor) -> list[list[list[int]]]:
    """UE8M0 bytes of ceil_to_ue8m0(sf) per (group, row), padded to 4."""
    sf3 = sf_rows.reshape(-1, sf_rows.shape[-2], sf_rows.shape[-1]).tolist()
    out = []
    for grp in sf3:
        rows = []
        for row in grp:
            bytes_ = []
            for v in row:
                mant, exp = math.frexp(v)
                p2 = 2.0 ** (exp - 1) if mant == 0.5 else 2.0**exp
                bytes_.append(ue8m0_byte(p2))
            rows.append(bytes_ + [0] * (-len(bytes_) % 4))
        out.append(rows)
    return out


def packed_bytes(t: torch.Tensor) -> list[list[list[int]]]:
    t3 = t.reshape(-1, t.shape[-2], t.shape[-1]).tolist()
    return [[[b for v in row for b in unpack_int_bytes(v)] for row in grp] for grp in t3]


@SETTINGS
@given(data=st.data(), groups=st.one_of(st.none(), st.integers(1, 3)), m=st.integers(1, 9), n=st.integers(1, 300),
       k=st.sampled_from([128, 256, 640]))
def test_transform_sf_fp32_paths(data: st.DataObject, groups: int | None, m: int, n: int, k: int) -> None:
    gen = gen_for(data)
    lead = () if groups is None else (groups,)
    sfa = rand_scale(gen, *lead, m, k // 128)
    sfb = rand_scale(gen, *lead, ceil_div(n, 128), k // 128)

    out_a = R.transform_sf_into_required_layout(sfa, m, k, (1, 128, 128), num_groups=groups, is_sfa=True)
    aligned_m = ceil_div(m, 4) * 4
    assert torch.equal(out_a, sfa) and out_a.stride()[-2:] == (1, aligned_m)

    # SM90 SFB stays per 128-block, unchanged
    out_b = R.transform_sf_into_required_layout(sfb, n, k, (1, 128, 128), num_groups=groups, is_sfa=False)
    assert torch.equal(out_b, sfb)

    # UE8M0: broadcast along N, round up, pack
    packed_b = R.transform_sf_into_required_layout(
        sfb, n, k, (1, 128, 128), num_groups=groups, is_sfa=False, use_ue8m0=True
    )
    assert packed_b.dtype == torch.int32
    assert tuple(packed_b.shape) == lead + (n, ceil_div(k // 128, 4))
    assert packed_b.stride()[-2:] == (1, ceil_div(n, 4) * 4)
    broadcast = sfb.repeat_interleave(128, dim=-2)[..., :n, :]
    assert packed_bytes(packed_b) == naive_packed(broadcast)
    assert torch.equal(packed_b, R.transform_scale_ue8m0(sfb, n))

    # 2-element recipe with per-128 scales where granularity 1 is required: broadcast
    out_2 = R.transform_sf_into_required_layout(sfb, n, k, (1, 128), num_groups=groups)
    assert torch.equal(out_2, broadcast)
    assert out_2.stride()[-2:] == (1, ceil_div(n, 4) * 4)


def test_transform_sf_int32_input_is_laid_out() -> None:
    packed = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(torch.ones(6, 8))
    contiguous = packed.contiguous()
    assert contiguous.stride() != packed.stride()
    out = R.transform_sf_into_required_layout(contiguous, 6, 1024, (1, 1, 128), is_sfa=False)
    assert torch.equal(out, packed) and out.stride() == (1, 8)
    assert R.transform_sf_into_required_layout(packed, 6, 1024, (1, 128), use_ue8m0=True) is packed


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        (dict(sf=torch.ones(4, 1), mn=4, k=128, recipe=(1, 128, 128)), "is_sfa"),
        (dict(sf=torch.ones(4, 1), mn=4, k=128, recipe=(1, 128), is_sfa=True), "is_sfa"),
        (dict(sf=torch.ones(5, 1), mn=4, k=128, recipe=(1, 128, 128), is_sfa=True), "sf"),
        (dict(sf=torch.ones(4, 2), mn=4, k=128, recipe=(1, 128, 128), is_sfa=True), "sf"),
        (dict(sf=torch.ones(4, 1), mn=4, k=128, recipe=(1, 128, 128), is_sfa=True, num_groups=2), "sf"),
        (dict(sf=torch.ones(3, 4, 1), mn=4, k=128, recipe=(1, 128, 128), is_sfa=True, num_groups=2), "sf"),
        (dict(sf=torch.ones(4, 1, dtype=torch.float64), mn=4, k=128, recipe=(1, 128), is_sfa=None), "sf"),
        (dict(sf=torch.ones(4, 1), mn=4, k=128, recipe=(1, 2, 3, 4), is_sfa=True), "recipe"),
        (dict(sf=torch.ones(1, 1, dtype=torch.int32), mn=4, k=128, recipe=(128, 128)), "sf"),
    ],
)
def test_transform_sf_rejects(kwargs: dict[str, object], argument: str) -> None:
    with pytest.raises(BadArgumentError) as info:
        R.transform_sf_into_required_layout(**kwargs)  # type: ignore[arg-type]
    assert info.value.argument == argument
    assert info.value.function == "transform_sf_into_required_layout"


def test_transform_scale_ue8m0_rejects_wrong_rows() -> None:
    with pytest.raises(BadArgumentError):
        R.transform_scale_ue8m0(torch.ones(2, 3), 100)


# ---------------------------------------------------------------------------------------------
# casts and dequantization


def fp8_error_bound(x: torch.Tensor, sf: torch.Tensor) -> torch.Tensor:
    # e4m3: 3 mantissa bits (half-ulp 2**-4 relative), subnormal spacing 2**-9 of the scale
    return x.abs() * 2.0**-4 + sf * 2.0**-9 + 1e-12


@SETTINGS
@given(data=st.data(), m=st.integers(1, 6), k=st.sampled_from([128, 256, 200, 64]), use_ue8m0=st.booleans(),
       dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_per_token_cast(data: st.DataObject, m: int, k: int, use_ue8m0: bool, dtype: torch.dtype) -> None:
    gen = gen_for(data)
    mag = data.draw(st.sampled_from([1e-6, 1.0, 300.0]), label="magnitude")
    x = randn(gen, m, k, scale=mag).to(dtype)
    q, sf = R.per_token_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    nk = ceil_div(k, 128)
    assert q.dtype == FP8 and tuple(q.shape) == (m, k)
    assert sf.dtype == torch.float32 and tuple(sf.shape) == (m, nk)
    x64 = x.to(torch.float64)
    for i in range(m):
        for kb in range(nk):
            amax = max(x64[i, kb * 128 : (kb + 1) * 128].abs().max().item(), 1e-4)
            base = torch.tensor(amax, dtype=torch.float32) / 448.0
            s = sf[i, kb].item()
            if use_ue8m0:
                assert math.frexp(s)[0] == 0.5 and base.item() <= s < 2 * base.item()
            else:
                assert s == base.item()
    full_sf = sf.to(torch.float64).repeat_interleave(128, dim=1)[:, :k]
    deq = q.to(torch.float64) * full_sf
    assert bool(((deq - x64).abs() <= fp8_error_bound(x64, full_sf)).all())


@SETTINGS
@given(data=st.data(), n=st.integers(1, 300), k=st.sampled_from([128, 256, 160]), use_ue8m0=st.booleans())
def test_per_block_cast(data: st.DataObject, n: int, k: int, use_ue8m0: bool) -> None:
    gen = gen_for(data)
    x = randn(gen, n, k, scale=5.0)
    q, sf = R.per_block_cast_to_fp8(x, use_ue8m0=use_ue8m0)
    nb, nk = ceil_div(n, 128), ceil_div(k, 128)
    assert tuple(q.shape) == (n, k) and tuple(sf.shape) == (nb, nk)
    for bi in range(nb):
        for kb in range(nk):
            amax = max(x[bi * 128 : (bi + 1) * 128, kb * 128 : (kb + 1) * 128].abs().max().item(), 1e-4)
            base = (torch.tensor(amax, dtype=torch.float32) / 448.0).item()
            s = sf[bi, kb].item()
            assert (base <= s < 2 * base and math.frexp(s)[0] == 0.5) if use_ue8m0 else s == base
    full_sf = sf.to(torch.float64).repeat_interleave(128, 0).repeat_interleave(128, 1)[:n, :k]
    deq = q.to(torch.float64) * full_sf
    assert bool(((deq - x.double()).abs() <= fp8_error_bound(x.double(), full_sf)).all())


@SETTINGS
@given(data=st.data(), groups=st.one_of(st.none(), st.integers(1, 3)), rows=st.integers(1, 7), k=st.integers(1, 13),
       gran_mn=st.integers(1, 3), gran_k=st.sampled_from([1, 2, 4, 128]), per_row=st.booleans(), packed=st.booleans())
def test_dequantize_matches_loops(data: st.DataObject, groups: int | None, rows: int, k: int, gran_mn: int,
                                  gran_k: int, per_row: bool, packed: bool) -> None:
    gen = gen_for(data)
    lead = () if groups is None else (groups,)
    x = rand_fp8(gen, *lead, rows, k)
    sf_rows = rows if per_row else ceil_div(rows, gran_mn)
    nk = ceil_div(k, gran_k)
    if packed:
        pow2 = torch.pow(2.0, torch.randint(-10, 10, (*lead, sf_rows, nk), generator=gen).float())
        sf = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(pow2)
    else:
        sf = rand_scale(gen, *lead, sf_rows, nk)
        if data.draw(st.booleans(), label="mn_major"):
            sf = R.get_mn_major_tma_aligned_tensor(sf)
    got = R.dequantize_fp8(x, sf, gran_mn=gran_mn, gran_k=gran_k)
    want = naive_dequant(x, sf, gran_mn, gran_k)
    assert got.dtype == torch.float32 and got.shape == x.shape
    # x * sf rounds once in float32
    assert bool(((got.double() - want).abs() <= want.abs() * 2.0**-23).all())


def test_dequantize_rejects() -> None:
    x = torch.zeros(4, 256).to(FP8)
    with pytest.raises(BadArgumentError):
        R.dequantize_fp8(x, torch.ones(3, 2), gran_mn=128)
    with pytest.raises(BadArgumentError):
        R.dequantize_fp8(x, torch.ones(4, 3), gran_mn=128)
    with pytest.raises(BadArgumentError):
        R.dequantize_fp8(x, torch.ones(4, 2, dtype=torch.int32), gran_mn=128)
    with pytest.raises(BadArgumentError):
        R.dequantize_fp8(x, torch.ones(4, 2, dtype=torch.float64), gran_mn=128)


# ---------------------------------------------------------------------------------------------
# GEMMs


def sf_variant(sf: torch.Tensor, kind: str) -> torch.Tensor:
    if kind == "mn_major":
        return R.get_mn_major_tma_aligned_tensor(sf)
    if kind == "transposed":
        return sf.transpose(-1, -2).contiguous().transpose(-1, -2)
    return sf


@SETTINGS
@given(data=st.data(), m=st.integers(1, 9), n=st.integers(1, 260), k=st.sampled_from([128, 256, 384, 200]),
       out_dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_fp8_gemm_nt(data: st.DataObject, m: int, n: int, k: int, out_dtype: torch.dtype) -> None:
    gen = gen_for(data)
    use_c = data.draw(st.booleans(), label="use_c") and out_dtype == torch.float32  # D = C + AB is float32
    ue8m0 = data.draw(st.booleans(), label="ue8m0")
    b_per_row = data.draw(st.booleans(), label="b_per_row")
    nk = ceil_div(k, 128)
    a = rand_fp8(gen, m, k)
    b = rand_fp8(gen, n, k)
    b_rows = n if b_per_row else ceil_div(n, 128)
    if ue8m0:
        sfa = torch.pow(2.0, torch.randint(-6, 6, (m, nk), generator=gen).float())
        sfb = torch.pow(2.0, torch.randint(-6, 6, (b_rows, nk), generator=gen).float())
        sfa_in = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(sfa)
        sfb_in = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(sfb)
    else:
        sfa, sfb = rand_scale(gen, m, nk), rand_scale(gen, b_rows, nk)
        sfa_in = sf_variant(sfa, data.draw(st.sampled_from(["k_major", "mn_major"]), label="sfa_layout"))
        sfb_in = sf_variant(sfb, data.draw(st.sampled_from(["k_major", "transposed"]), label="sfb_layout"))
    a64 = naive_dequant(a, sfa, 1, 128)
    b64 = naive_dequant(b, sfb, 128, 128)
    want = a64 @ b64.T
    bound = fp32_gemm_bound(a64, b64)
    c = None
    if use_c:
        c = randn(gen, m, n, scale=10.0)
        want = want + c.double()
        bound = bound + c.double().abs() * 2.0**-23
    if out_dtype == torch.bfloat16:
        bound = bound + want.abs() * 2.0**-8
    d = torch.full((m, n), 7.0, dtype=out_dtype)
    R.fp8_gemm_nt((a, sfa_in), (b, sfb_in), d, c=c)
    assert_within(d, want, bound)
    recipe = (1, 1 if b_per_row else 128, 128)
    d2 = torch.full((m, n), 7.0, dtype=out_dtype)
    R.fp8_gemm_nt((a, sfa_in), (b, sfb_in), d2, c=c, recipe=recipe)
    assert torch.equal(d, d2)


def test_fp8_gemm_nt_rejects() -> None:
    a = torch.zeros(4, 256).to(FP8)
    b = torch.zeros(200, 256).to(FP8)
    sfa, sfb = torch.ones(4, 2), torch.ones(2, 2)
    d = torch.empty(4, 200, dtype=torch.bfloat16)
    R.fp8_gemm_nt((a, sfa), (b, sfb), d)
    cases = [
        (dict(a=(a, sfa), b=(b, sfb), d=torch.empty(4, 201, dtype=torch.bfloat16)), "d"),
        (dict(a=(a, sfa), b=(b, sfb), d=torch.empty(4, 200, dtype=torch.float16)), "d"),
        (dict(a=(a.float(), sfa), b=(b, sfb), d=d), "a[0]"),
        (dict(a=(a, sfa), b=(b[:, :128], sfb[:, :1]), d=d), "b"),
        (dict(a=(a, sfa), b=(b, sfb), d=d, recipe=(1, 1, 128)), "b[1]"),
        (dict(a=(a, sfa), b=(b, sfb), d=d, recipe=(1, 128)), "recipe"),
        (dict(a=(a, sfa[:, :1]), b=(b, sfb), d=d), "a[1]"),
        (dict(a=a, b=(b, sfb), d=d), "a"),
        (dict(a=(a, sfa), b=(b, sfb), d=d, c=torch.ones(4, 3)), "c"),
    ]
    for kwargs, argument in cases:
        with pytest.raises(BadArgumentError) as info:
            R.fp8_gemm_nt(**kwargs)  # type: ignore[arg-type]
        assert info.value.argument == argument, kwargs


@SETTINGS
@given(data=st.data(), m=st.integers(1, 9), n=st.integers(1, 40), k=st.integers(1, 300),
       out_dtype=st.sampled_from([torch.float32, torch.bfloat16]))
def test_bf16_gemm_nt(data: st.DataObject, m: int, n: int, k: int, out_dtype: torch.dtype) -> None:
    gen = gen_for(data)
    a = randn(gen, m, k).to(torch.bfloat16)
    b = randn(gen, n, k).to(torch.bfloat16)
    use_c = data.draw(st.booleans(), label="use_c") and out_dtype == torch.float32  # D = C + AB is float32
    c = randn(gen, m, n) if use_c else None
    d = torch.zeros(m, n, dtype=out_dtype)
    R.bf16_gemm_nt(a, b, d, c=c)
    a64, b64 = a.double(), b.double()
    want = a64 @ b64.T + (0 if c is None else c.double())
    bound = fp32_gemm_bound(a64, b64) + (0 if c is None else c.double().abs() * 2.0**-23)
    if out_dtype == torch.bfloat16:
        bound = bound + want.abs() * 2.0**-8
    assert_within(d, want, bound)
    with pytest.raises(BadArgumentError):
        R.bf16_gemm_nt(a.float(), b, d)


SENTINEL = 1536.0  # exact in bfloat16


@SETTINGS
@given(data=st.data(), g=st.integers(1, 4))
def test_grouped_contiguous(data: st.DataObject, g: int) -> None:
    gen = gen_for(data)
    m = 128 * data.draw(st.integers(0, 2), label="aligned_row_blocks")  # rows padded to the MK alignment
    n = data.draw(st.integers(1, 140), label="n")
    k = data.draw(st.sampled_from([128, 256]), label="k")
    use_fp8 = data.draw(st.booleans(), label="fp8")
    indices = data.draw(st.lists(st.integers(-1, g - 1), min_size=m, max_size=m), label="m_indices")
    m_indices = torch.tensor(indices, dtype=torch.int32)
    d = torch.full((m, n), SENTINEL, dtype=torch.bfloat16)
    if use_fp8:
        a, b = rand_fp8(gen, m, k), rand_fp8(gen, g, n, k)
        sfa, sfb = rand_scale(gen, m, k // 128), rand_scale(gen, g, ceil_div(n, 128), k // 128)
        R.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, m_indices)
        a64, b64 = naive_dequant(a, sfa, 1, 128), naive_dequant(b, sfb, 128, 128)
    else:
        a, b = randn(gen, m, k).to(torch.bfloat16), randn(gen, g, n, k).to(torch.bfloat16)
        R.m_grouped_bf16_gemm_nt_contiguous(a, b, d, m_indices)
        a64, b64 = a.double(), b.double()
    for i, grp in enumerate(indices):
        if grp < 0:
            assert bool((d[i] == SENTINEL).all()), i
        else:
            want = a64[i : i + 1] @ b64[grp].T
            bound = fp32_gemm_bound(a64[i : i + 1], b64[grp]) + want.abs() * 2.0**-8
            assert_within(d[i : i + 1], want, bound)


def test_grouped_contiguous_rejects_bad_indices() -> None:
    a, b = torch.zeros(128, 128).to(FP8), torch.zeros(2, 8, 128).to(FP8)
    sfa, sfb = torch.ones(128, 1), torch.ones(2, 1, 1)
    d = torch.empty(128, 8, dtype=torch.bfloat16)
    for bad in ([0, 2, 1], [0, -2, 1]):
        with pytest.raises(BadArgumentError) as info:
            R.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, torch.tensor(bad * 42 + [0, 0], dtype=torch.int32))
        assert info.value.argument == "m_indices"
    with pytest.raises(BadArgumentError):
        R.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d, torch.tensor([0, 1], dtype=torch.int32))
    with pytest.raises(BadArgumentError) as info:  # rows not padded to the contiguous-layout alignment
        R.m_grouped_fp8_gemm_nt_contiguous((a[:3], sfa[:3]), (b, sfb), d[:3], torch.zeros(3, dtype=torch.int32))
    assert info.value.argument == "a"


@SETTINGS
@given(data=st.data(), g=st.integers(1, 4), m_max=st.integers(1, 10), n=st.integers(1, 140),
       k=st.sampled_from([128, 256]), use_fp8=st.booleans())
def test_grouped_masked(data: st.DataObject, g: int, m_max: int, n: int, k: int, use_fp8: bool) -> None:
    gen = gen_for(data)
    counts = data.draw(st.lists(st.integers(0, m_max), min_size=g, max_size=g), label="masked_m")
    masked_m = torch.tensor(counts, dtype=torch.int32)
    d = torch.full((g, m_max, n), SENTINEL, dtype=torch.bfloat16)  # every release writes grouped d in bf16
    if use_fp8:
        a, b = rand_fp8(gen, g, m_max, k), rand_fp8(gen, g, n, k)
        sfa, sfb = rand_scale(gen, g, m_max, k // 128), rand_scale(gen, g, ceil_div(n, 128), k // 128)
        R.m_grouped_fp8_gemm_nt_masked((a, sfa), (b, sfb), d, masked_m, m_max)
        a64, b64 = naive_dequant(a, sfa, 1, 128), naive_dequant(b, sfb, 128, 128)
    else:
        a, b = randn(gen, g, m_max, k).to(torch.bfloat16), randn(gen, g, n, k).to(torch.bfloat16)
        R.m_grouped_bf16_gemm_nt_masked(a, b, d, masked_m, m_max)
        a64, b64 = a.double(), b.double()
    for grp, count in enumerate(counts):
        assert bool((d[grp, count:] == SENTINEL).all())
        if count:
            want = a64[grp, :count] @ b64[grp].T
            bound = fp32_gemm_bound(a64[grp, :count], b64[grp]) + want.abs() * 2.0**-8
            assert_within(d[grp, :count], want, bound)


def test_grouped_masked_rejects() -> None:
    a, b = torch.zeros(2, 4, 128, dtype=torch.bfloat16), torch.zeros(2, 8, 128, dtype=torch.bfloat16)
    d = torch.empty(2, 4, 8, dtype=torch.bfloat16)
    with pytest.raises(BadArgumentError) as info:
        R.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor([1, 5], dtype=torch.int32), 4)
    assert info.value.argument == "masked_m"
    with pytest.raises(BadArgumentError):
        R.m_grouped_bf16_gemm_nt_masked(a, b, d, torch.tensor([1, 2], dtype=torch.int32), 4.0)  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError):
        R.m_grouped_bf16_gemm_nt_masked(a, b[:1], d, torch.tensor([1, 2], dtype=torch.int32), 4)


# ---------------------------------------------------------------------------------------------
# MQA logits


def naive_logit(q_rows: torch.Tensor, w_row: torch.Tensor, k_row: torch.Tensor, scale: float) -> tuple[float, float]:
    """(value, error bound): sum_h w[h] * relu(q[h] . (k * scale))."""
    q64, k64, w64 = q_rows.to(torch.float64), k_row.to(torch.float64) * scale, w_row.to(torch.float64)
    dots = q64 @ k64
    value = float((w64 * dots.relu()).sum())
    mag = float((w64.abs() * (q64.abs() @ k64.abs())).sum())
    return value, (q_rows.shape[-1] + q_rows.shape[0] + 8) * 2.0**-23 * mag + 1e-30


@SETTINGS
@given(data=st.data(), nq=st.integers(1, 5), nk=st.integers(1, 9), h=st.integers(1, 4), dim=st.sampled_from([8, 32]))
def test_fp8_mqa_logits(data: st.DataObject, nq: int, nk: int, h: int, dim: int) -> None:
    gen = gen_for(data)
    starts = data.draw(st.lists(st.integers(-1, nk), min_size=nq, max_size=nq), label="ks")
    lengths = data.draw(st.lists(st.integers(0, nk + 1), min_size=nq, max_size=nq), label="lengths")
    ends = [s + n for s, n in zip(starts, lengths, strict=True)]
    clean = data.draw(st.booleans(), label="clean_logits")
    q = rand_fp8(gen, nq, h, dim)
    k = rand_fp8(gen, nk, dim)
    scale = rand_scale(gen, nk)
    w = randn(gen, nq, h)
    ks = torch.tensor(starts, dtype=torch.int32)
    ke = torch.tensor(ends, dtype=torch.int32)
    out = R.fp8_mqa_logits(q, (k, scale), w, ks, ke, clean_logits=clean)
    assert out.dtype == torch.float32 and tuple(out.shape) == (nq, nk)
    for i in range(nq):
        for j in range(nk):
            if starts[i] <= j < ends[i]:
                value, bound = naive_logit(q[i], w[i], k[j], scale[j].item())
                assert abs(out[i, j].item() - value) <= bound, (i, j)
            else:
                assert out[i, j].item() == NEG_INF, (i, j)

    max_seqlen_k = data.draw(st.integers(1, nk + 2), label="max_seqlen_k")
    comp = R.fp8_mqa_logits(q, (k, scale), w, ks, ke, max_seqlen_k=max_seqlen_k)
    assert tuple(comp.shape) == (nq, max_seqlen_k)
    assert comp.stride(0) == ceil_div(max_seqlen_k, 256) * 256
    for i in range(nq):
        for j in range(max_seqlen_k):
            key = starts[i] + j
            if j < ends[i] - starts[i] and 0 <= key < nk:
                value, bound = naive_logit(q[i], w[i], k[key], scale[key].item())
                assert abs(comp[i, j].item() - value) <= bound, (i, j)
            else:
                assert comp[i, j].item() == NEG_INF, (i, j)


def test_fp8_mqa_logits_rejects() -> None:
    q = torch.zeros(2, 4, 16).to(FP8)
    k = torch.zeros(3, 16).to(FP8)
    ks = torch.zeros(2, dtype=torch.int32)
    ke = torch.full((2,), 3, dtype=torch.int32)
    w = torch.ones(2, 4)
    with pytest.raises(BadArgumentError) as info:
        R.fp8_mqa_logits(q, (k, torch.ones(3)), w, ks, ke, clean_logits=True, max_seqlen_k=2)
    assert info.value.argument == "clean_logits"
    with pytest.raises(BadArgumentError):
        R.fp8_mqa_logits(q, (k, torch.ones(4)), w, ks, ke)
    with pytest.raises(BadArgumentError):
        R.fp8_mqa_logits(q, (k[:, :8], torch.ones(3)), w, ks, ke)
    with pytest.raises(BadArgumentError):
        R.fp8_mqa_logits(q, (k, torch.ones(3)), w[:, :2], ks, ke)
    with pytest.raises(BadArgumentError):
        R.fp8_mqa_logits(q, (k, torch.ones(3)), w, ks.float(), ke)
    full = R.fp8_mqa_logits(q, (k, torch.ones(3)), w, ks, ke)
    assert full.stride(0) == 3 + 256 + 5  # align(Nk + 256, 8)


# ---------------------------------------------------------------------------------------------
# paged KV cache


@SETTINGS
@given(data=st.data(), nb=st.integers(1, 3), bkv=st.integers(1, 5), dim=st.sampled_from([4, 16, 32]))
def test_pack_kv_cache_layout(data: st.DataObject, nb: int, bkv: int, dim: int) -> None:
    gen = gen_for(data)
    x = randn(gen, nb, bkv, dim, scale=data.draw(st.sampled_from([1e-6, 1.0, 100.0]), label="mag"))
    kv = R.pack_kv_cache(x)
    assert kv.dtype == torch.uint8 and tuple(kv.shape) == (nb, bkv, 1, dim + 4)
    vals, scales = naive_kv_decode(kv)
    for b in range(nb):
        for t in range(bkv):
            amax = max(x[b, t].abs().max().item(), 1e-4)
            assert scales[b][t] == (torch.tensor(amax, dtype=torch.float32) / 448.0).item()
            deq = vals[b][t] * scales[b][t]
            assert bool(((deq - x[b, t].double()).abs() <= fp8_error_bound(x[b, t].double(), torch.tensor(scales[b][t]))).all())
    v, s = R.unpack_kv_cache(kv)
    assert v.dtype == FP8 and tuple(v.shape) == (nb, bkv, dim)
    assert s.dtype == torch.float32 and tuple(s.shape) == (nb, bkv)
    for b in range(nb):
        for t in range(bkv):
            assert torch.equal(v[b, t].double(), vals[b][t]) and s[b, t].item() == scales[b][t]
    assert torch.equal(R.pack_kv_cache(x.unsqueeze(2)), kv)


def test_unpack_kv_cache_from_hand_built_bytes() -> None:
    nb, bkv, dim = 2, 3, 4
    raw: list[int] = []
    expected_vals = []
    expected_scales = []
    for b in range(nb):
        block_vals = [[(b * 37 + t * 11 + j * 3) % 120 for j in range(dim)] for t in range(bkv)]
        scales = [0.5 + b + t / 8 for t in range(bkv)]
        for t in range(bkv):
            raw.extend(block_vals[t])
        for sc in scales:
            raw.extend(struct.pack("<f", sc))
        expected_vals.append(block_vals)
        expected_scales.append(scales)
    # embed in a wider buffer so that stride(0) > block_kv * (dim + 4)
    wide = torch.zeros(nb, bkv * (dim + 4) + 16, dtype=torch.uint8)
    wide[:, : bkv * (dim + 4)] = torch.tensor(raw, dtype=torch.uint8).view(nb, -1)
    kv = wide[:, : bkv * (dim + 4)].view(nb, bkv, 1, dim + 4)
    assert kv.stride(0) == bkv * (dim + 4) + 16
    v, s = R.unpack_kv_cache(kv)
    assert v.view(torch.uint8).tolist() == expected_vals
    assert s.tolist() == expected_scales


def naive_paged(
    q: torch.Tensor,
    kv: torch.Tensor,
    w: torch.Tensor,
    row_lengths: list[int],
    block_rows: list[list[int]],
    max_len: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, bounds) float64 (B*next_n, max_len); NaN marks positions that must be -inf."""
    b, next_n, _h, _dim = q.shape
    bkv = kv.shape[1]
    vals, scales = naive_kv_decode(kv)
    out = torch.full((b * next_n, max_len), float("nan"), dtype=torch.float64)
    bound = torch.zeros_like(out)
    for row in range(b * next_n):
        q_row = q[row // next_n, row % next_n]
        for p in range(row_lengths[row]):
            blk = block_rows[row][p // bkv]
            value, err = naive_logit(q_row, w[row], vals[blk][p % bkv].float(), scales[blk][p % bkv])
            out[row, p], bound[row, p] = value, err
    return out, bound


def check_paged(out: torch.Tensor, want: torch.Tensor, bound: torch.Tensor) -> None:
    must_be_inf = torch.isnan(want)
    assert bool((out[must_be_inf] == NEG_INF).all())
    live = ~must_be_inf
    assert bool(((out[live].double() - want[live]).abs() <= bound[live]).all())


class PagedCase(NamedTuple):
    """A paged MQA-logits input: ``q`` (B, next_n, H, D) FP8, ``kv`` packed (num_blocks, block_kv, 1, D + 4)
    uint8, ``w`` (B * next_n, H) float32, per-sequence context lengths, block table rows, ``max_len``."""

    q: torch.Tensor
    kv: torch.Tensor
    w: torch.Tensor
    ctx: list[int]
    table: list[list[int]]
    max_len: int
    next_n: int


def paged_case(data: st.DataObject) -> PagedCase:
    gen = gen_for(data)
    b = data.draw(st.integers(1, 3), label="batch")
    next_n = data.draw(st.integers(1, 3), label="next_n")
    h = data.draw(st.integers(1, 3), label="heads")
    dim = data.draw(st.sampled_from([8, 16]), label="dim")
    bkv = data.draw(st.sampled_from([2, 4, 8]), label="block_kv")
    ctx = data.draw(st.lists(st.integers(0, 20), min_size=b, max_size=b), label="context_lens")
    max_blocks = max(1, ceil_div(max(ctx), bkv))
    nb = b * max_blocks + 1
    perm = torch.randperm(nb, generator=gen).tolist()
    table = [[perm[i * max_blocks + j] for j in range(max_blocks)] for i in range(b)]
    extra = data.draw(st.integers(0, 5), label="extra_len")
    return PagedCase(
        q=rand_fp8(gen, b, next_n, h, dim),
        kv=R.pack_kv_cache(randn(gen, nb, bkv, dim)),
        w=randn(gen, b * next_n, h),
        ctx=ctx,
        table=table,
        max_len=max(ctx) + extra,
        next_n=next_n,
    )


@SETTINGS
@given(st.data())
def test_paged_logits_context_len_forms(data: st.DataObject) -> None:
    q, kv, w, ctx, table, max_len, next_n = paged_case(data)
    b = q.shape[0]
    rows = b * next_n
    bt = torch.tensor(table, dtype=torch.int32)

    # 1-D: row j of sequence b sees ctx[b] - next_n + j + 1 positions
    lens_1d = [max(0, ctx[r // next_n] - next_n + r % next_n + 1) for r in range(rows)]
    out_1d = R.fp8_paged_mqa_logits(q, kv, w, torch.tensor(ctx, dtype=torch.int32), bt, None, max_len)
    assert tuple(out_1d.shape) == (rows, max_len) and out_1d.dtype == torch.float32
    if max_len:
        assert out_1d.stride(0) == ceil_div(max_len, 256) * 256
    want, bound = naive_paged(q, kv, w, lens_1d, [table[r // next_n] for r in range(rows)], max_len)
    check_paged(out_1d, want, bound)

    # equivalent 2-D (B, next_n) lengths
    ctx_2d = torch.tensor(lens_1d, dtype=torch.int32).view(b, next_n)
    out_2d = R.fp8_paged_mqa_logits(q, kv, w, ctx_2d, bt, None, max_len, clean_logits=True)
    check_paged(out_2d, want, bound)
    assert torch.equal(out_2d.isinf(), out_1d.isinf())

    # flattened (B*next_n, 1) lengths with q viewed per row and a per-row block table
    out_flat = R.fp8_paged_mqa_logits(
        q.view(rows, 1, *q.shape[2:]), kv, w, ctx_2d.view(rows, 1), bt.repeat_interleave(next_n, 0), None, max_len
    )
    check_paged(out_flat, want, bound)
    # per-row block table with the (B, next_n) form
    out_rows = R.fp8_paged_mqa_logits(q, kv, w, ctx_2d, bt.repeat_interleave(next_n, 0), None, max_len)
    check_paged(out_rows, want, bound)


@FEW
@given(st.data())
def test_paged_logits_2d_rows_independent(data: st.DataObject) -> None:
    q, kv, w, ctx, table, max_len, next_n = paged_case(data)
    b = q.shape[0]
    # arbitrary per-row lengths, each at most the sequence's allocated length
    lens = [data.draw(st.integers(0, ctx[r // next_n]), label=f"len{r}") for r in range(b * next_n)]
    out = R.fp8_paged_mqa_logits(
        q, kv, w, torch.tensor(lens, dtype=torch.int32).view(b, next_n), torch.tensor(table, dtype=torch.int32), None, max_len
    )
    want, bound = naive_paged(q, kv, w, lens, [table[r // next_n] for r in range(b * next_n)], max_len)
    check_paged(out, want, bound)


def test_paged_logits_rejects() -> None:
    q = torch.zeros(2, 1, 2, 8).to(FP8)
    kv = R.pack_kv_cache(torch.ones(4, 4, 8))
    w = torch.ones(2, 2)
    bt = torch.tensor([[0, 1], [2, 3]], dtype=torch.int32)
    ctx = torch.tensor([5, 8], dtype=torch.int32)
    R.fp8_paged_mqa_logits(q, kv, w, ctx, bt, None, 8)
    cases: list[tuple[dict[str, object], str]] = [
        (dict(max_context_len=7), "max_context_len"),
        (dict(context_lens=torch.tensor([5, 8, 1], dtype=torch.int32)), "context_lens"),
        (dict(context_lens=torch.tensor([5, 12], dtype=torch.int32), max_context_len=12), "block_table"),
        (dict(block_table=torch.tensor([[0, 1], [2, 4]], dtype=torch.int32)), "block_table"),
        (dict(kv_cache=R.pack_kv_cache(torch.ones(4, 4, 16))), "kv_cache"),
        (dict(weights=torch.ones(2, 3)), "weights"),
        (dict(q=torch.zeros(2, 1, 2, 8)), "q"),
    ]
    base: dict[str, object] = dict(
        q=q, kv_cache=kv, weights=w, context_lens=ctx, block_table=bt, schedule_meta=None, max_context_len=8
    )
    for override, argument in cases:
        with pytest.raises(BadArgumentError) as info:
            R.fp8_paged_mqa_logits(**{**base, **override})  # type: ignore[arg-type]
        assert info.value.argument == argument, override


def test_paged_logits_ignore_garbage_block_ids_past_length() -> None:
    q = torch.ones(2, 1, 1, 8).to(FP8)
    kv = R.pack_kv_cache(torch.full((2, 4, 8), 28.0))  # scale 28 / 448 = 1/16, values 448
    # sequence 0 owns 3 positions (block 1); its other entries are garbage; sequence 1 owns 8
    bt = torch.tensor([[1, 99, -7], [0, 1, 0]], dtype=torch.int32)
    ctx = torch.tensor([3, 8], dtype=torch.int32)
    out = R.fp8_paged_mqa_logits(q, kv, torch.ones(2, 1), ctx, bt, None, 12)
    assert out[0, :3].tolist() == [224.0, 224.0, 224.0]
    assert bool((out[0, 3:] == NEG_INF).all())
    assert out[1, :8].tolist() == [224.0] * 8


# ---------------------------------------------------------------------------------------------
# paged MQA schedule


def naive_schedule(lens: list[int], next_n: int, num_sms: int, balance: str) -> list[list[int]]:
    atoms = ceil_div(next_n, 2 if next_n >= 2 else 1)
    units = []
    for b, length in enumerate(lens):
        for a in range(atoms):
            for split in range(ceil_div(length, 256)):
                units.append([b * atoms + a, split])
    total = len(units)
    q, r = divmod(total, num_sms)
    rows = []
    for s in range(num_sms + 1):
        extra = max(0, s - (num_sms - r)) if balance == "tail" else min(s, r)
        start = s * q + extra
        rows.append(units[start] if start < total else [len(lens) * atoms, 0])
    return rows


def walk(
    schedule: list[list[int]], sm: int, lens: list[int], atoms: int, limit: int
) -> list[tuple[int, int]] | None:
    """Follow the kernel's task walk for one SM; None when it does not reach its end row."""
    q_idx, kv = schedule[sm]
    end = tuple(schedule[sm + 1])
    batch = len(lens)

    def splits(qa: int) -> int:
        return ceil_div(lens[qa // atoms], 256) if qa // atoms < batch else 0

    done: list[tuple[int, int]] = []
    for _ in range(limit):
        if (q_idx, kv) == end:
            return done
        if kv < splits(q_idx):
            done.append((q_idx, kv))
        kv += 1
        if kv >= splits(q_idx):
            q_idx, kv = q_idx + 1, 0
    return None


def schedule_lengths(data: st.DataObject) -> tuple[torch.Tensor, list[int], int]:
    b = data.draw(st.integers(0, 10), label="batch")
    lens = data.draw(st.lists(st.integers(0, 1500), min_size=b, max_size=b), label="lens")
    form = data.draw(st.sampled_from(["1d", "2d"]), label="form")
    if form == "1d":
        return torch.tensor(lens, dtype=torch.int32), lens, 1
    next_n = data.draw(st.integers(1, 4), label="next_n")
    cols = [[max(0, length - next_n + 1 + j) for j in range(next_n)] for length in lens]
    t = torch.tensor(cols, dtype=torch.int32).view(b, next_n)
    return t, lens, next_n


@SETTINGS
@given(st.data())
def test_schedule_matches_enumeration_and_walks(data: st.DataObject) -> None:
    ctx, lens, next_n = schedule_lengths(data)
    num_sms = data.draw(st.integers(1, 12), label="num_sms")
    balance = data.draw(st.sampled_from(["tail", "head"]), label="balance")
    meta = R.get_paged_mqa_logits_metadata(ctx, 64, num_sms, balance=balance)  # type: ignore[arg-type]
    assert meta.dtype == torch.int32 and tuple(meta.shape) == (num_sms + 1, 2)
    rows = meta.tolist()
    assert rows == naive_schedule(lens, next_n, num_sms, balance)
    atoms = ceil_div(next_n, 2) if next_n >= 2 else 1
    assert rows[-1] == [len(lens) * atoms, 0]
    assert all(tuple(x) <= tuple(y) for x, y in itertools.pairwise(rows))  # monotone
    total = sum(ceil_div(n, 256) for n in lens) * atoms
    q, r = divmod(total, num_sms)
    seen: list[tuple[int, int]] = []
    for sm in range(num_sms):
        done = walk(rows, sm, lens, atoms, limit=4 * total + 4 * len(lens) + 8)
        assert done is not None, sm
        extra = (sm >= num_sms - r) if balance == "tail" else (sm < r)
        assert len(done) == q + int(extra)
        seen.extend(done)
    everything = [(b * atoms + a, s) for b, n in enumerate(lens) for a in range(atoms) for s in range(ceil_div(n, 256))]
    assert seen == everything  # every unit exactly once, in order
    assert R.paged_schedule_matches(meta, ctx, 64, num_sms)
    assert R.paged_schedule_matches(meta, ctx, 64, num_sms, balance=balance)  # type: ignore[arg-type]


def test_schedule_hand_examples() -> None:
    ctx = torch.tensor([300, 10, 600], dtype=torch.int32)  # 2, 1, 3 units
    tail = R.get_paged_mqa_logits_metadata(ctx, 64, 4).tolist()
    head = R.get_paged_mqa_logits_metadata(ctx, 64, 4, balance="head").tolist()
    assert tail == [[0, 0], [0, 1], [1, 0], [2, 1], [3, 0]]
    assert head == [[0, 0], [1, 0], [2, 1], [2, 2], [3, 0]]
    # 2-D: only the last column counts; next_n = 4 gives two atoms per sequence
    ctx2 = torch.tensor([[1, 2, 3, 300], [0, 0, 0, 10]], dtype=torch.int32)
    assert R.get_paged_mqa_logits_metadata(ctx2, 64, 3).tolist() == [[0, 0], [1, 0], [2, 0], [4, 0]]
    # fewer units than SMs: idle SMs start at the first unit (tail) or at the end (head)
    one = torch.tensor([[0], [5]], dtype=torch.int32)
    assert R.get_paged_mqa_logits_metadata(one, 64, 3).tolist() == [[1, 0], [1, 0], [1, 0], [2, 0]]
    assert R.get_paged_mqa_logits_metadata(one, 64, 3, balance="head").tolist() == [[1, 0], [2, 0], [2, 0], [2, 0]]
    empty = torch.zeros(0, 1, dtype=torch.int32)
    assert R.get_paged_mqa_logits_metadata(empty, 64, 2).tolist() == [[0, 0]] * 3


def test_schedule_forms_agree() -> None:
    lens = torch.tensor([700, 0, 256, 257], dtype=torch.int32)
    one_d = R.get_paged_mqa_logits_metadata(lens, 64, 5)
    two_d = R.get_paged_mqa_logits_metadata(lens.view(-1, 1), 64, 5)
    assert torch.equal(one_d, two_d)
    # next_n = 2 is one atom: same as next_n = 1 on the last column
    pairs = torch.stack([lens - 1, lens], dim=1).clamp(min=0)
    assert torch.equal(R.get_paged_mqa_logits_metadata(pairs, 64, 5), one_d)


def test_schedule_mismatch_detected_and_would_hang() -> None:
    short = [300, 200, 900]
    long_ = [300, 200, 2000]
    meta_long = R.get_paged_mqa_logits_metadata(torch.tensor(long_, dtype=torch.int32), 64, 4)
    ctx_short = torch.tensor(short, dtype=torch.int32)
    assert not R.paged_schedule_matches(meta_long, ctx_short, 64, 4)
    # the stale schedule sends at least one SM past its end row
    rows = meta_long.tolist()
    assert any(walk(rows, sm, short, 1, limit=200) is None for sm in range(4))
    assert R.paged_schedule_matches(R.get_paged_mqa_logits_metadata(ctx_short, 64, 4), ctx_short, 64, 4)
    assert not R.paged_schedule_matches(meta_long, ctx_short, 64, 5)
    assert not R.paged_schedule_matches(meta_long[:-1], ctx_short, 64, 3)
    head = R.get_paged_mqa_logits_metadata(ctx_short, 64, 4, balance="head")
    tail = R.get_paged_mqa_logits_metadata(ctx_short, 64, 4, balance="tail")
    assert not torch.equal(head, tail)
    assert R.paged_schedule_matches(head, ctx_short, 64, 4)
    assert not R.paged_schedule_matches(head, ctx_short, 64, 4, balance="tail")


def test_schedule_rejects() -> None:
    lens = torch.tensor([3], dtype=torch.int32)
    for kwargs, argument in [
        (dict(context_lens=lens, block_kv=48, num_sms=4), "block_kv"),
        (dict(context_lens=lens, block_kv=64, num_sms=0), "num_sms"),
        (dict(context_lens=torch.tensor([-1], dtype=torch.int32), block_kv=64, num_sms=4), "context_lens"),
        (dict(context_lens=lens.float(), block_kv=64, num_sms=4), "context_lens"),
        (dict(context_lens=lens.view(1, 1, 1), block_kv=64, num_sms=4), "context_lens"),
        (dict(context_lens=lens, block_kv=64, num_sms=4, balance="middle"), "balance"),
    ]:
        with pytest.raises(BadArgumentError) as info:
            R.get_paged_mqa_logits_metadata(**kwargs)  # type: ignore[arg-type]
        assert info.value.argument == argument


def test_public_surface() -> None:
    expected: set[str] = {
        "ceil_to_ue8m0", "get_tma_aligned_size", "get_mn_major_tma_aligned_tensor",
        "get_mn_major_tma_aligned_packed_ue8m0_tensor", "transform_sf_into_required_layout",
        "transform_scale_ue8m0", "per_token_cast_to_fp8", "per_block_cast_to_fp8", "dequantize_fp8",
        "fp8_gemm_nt", "bf16_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
        "m_grouped_bf16_gemm_nt_contiguous", "m_grouped_bf16_gemm_nt_masked", "fp8_mqa_logits",
        "fp8_paged_mqa_logits", "pack_kv_cache", "unpack_kv_cache", "get_paged_mqa_logits_metadata",
        "paged_schedule_matches",
    }
    assert expected <= set(R.__all__)
    assert all(callable(getattr(R, name)) for name in expected)
    import sys

    assert "deep_gemm" not in sys.modules


def test_reference_takes_upstream_positions() -> None:
    # (a, b, d, c, recipe) / (.., m_indices, recipe) / (.., expected_m, recipe) / (sf, mn, k, recipe, num_groups, is_sfa)
    a, b = torch.zeros(128, 128).to(FP8), torch.zeros(2, 128, 128).to(FP8)
    sfa, sfb = torch.ones(128, 1), torch.ones(2, 1, 1)
    d = torch.zeros(128, 128, dtype=torch.float32)
    R.fp8_gemm_nt((a, sfa), (b[0], sfb[0]), d, torch.ones(128, 128), (1, 128, 128))
    assert bool((d == 1).all())
    R.bf16_gemm_nt(a.bfloat16(), b[0].bfloat16(), d, None)
    R.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), d.bfloat16(), torch.zeros(128, dtype=torch.int32),
                                       (1, 128, 128))
    R.m_grouped_fp8_gemm_nt_masked((a.view(1, 128, 128), sfa.view(1, 128, 1)), (b[:1], sfb[:1]),
                                   d.bfloat16().view(1, 128, 128), torch.ones(1, dtype=torch.int32), 1, (1, 128, 128))
    sf = torch.rand(2, 128, 1)
    out = R.transform_sf_into_required_layout(sf, 128, 128, (1, 128, 128), 2, True)
    assert torch.equal(out, sf)


def test_reference_rejects_what_every_release_rejects() -> None:
    a, b = torch.zeros(128, 128).to(FP8), torch.zeros(2, 128, 128).to(FP8)
    sfa, sfb = torch.ones(128, 1), torch.ones(2, 1, 1)
    dense = torch.zeros(128, 128, dtype=torch.bfloat16)
    q = torch.zeros(4, 2, 32).to(FP8)
    kv = (torch.zeros(8, 32).to(FP8), torch.ones(8))
    ks, ke = torch.zeros(4, dtype=torch.int32), torch.full((4,), 8, dtype=torch.int32)
    cases: list[tuple[str, Callable[[], Any]]] = [
        ("d", lambda: R.fp8_gemm_nt((a, sfa), (b[0], sfb[0]), torch.zeros(128, 128, dtype=torch.bfloat16).T)),
        ("c", lambda: R.fp8_gemm_nt((a, sfa), (b[0], sfb[0]), dense.float(), torch.zeros(128, 128).half())),
        ("m_indices", lambda: R.m_grouped_fp8_gemm_nt_contiguous(
            (a, sfa), (b, sfb), dense, torch.zeros(128, 2, dtype=torch.int32)[:, 0])),
        ("masked_m", lambda: R.m_grouped_fp8_gemm_nt_masked(
            (b, torch.ones(2, 128, 1)), (b, sfb), torch.zeros(2, 128, 128, dtype=torch.bfloat16),
            torch.ones(2, 2, dtype=torch.int32)[:, 0], 1)),
        ("d", lambda: R.m_grouped_fp8_gemm_nt_contiguous((a, sfa), (b, sfb), dense.float(),
                                                         torch.zeros(128, dtype=torch.int32))),
        ("is_sfa", lambda: R.transform_sf_into_required_layout(torch.rand(128, 1), 128, 128, (1, 128, 128),
                                                               None, "yes")),  # type: ignore[arg-type]
        ("new_num_sms", lambda: reference_backend.set_num_sms(1000)),
        ("expected_m", lambda: R.m_grouped_fp8_gemm_nt_masked(
            (a.view(1, 128, 128), sfa.view(1, 128, 1)), (b[:1], sfb[:1]), dense.view(1, 128, 128),
            torch.ones(1, dtype=torch.int32), 0)),
        ("weights", lambda: R.fp8_mqa_logits(q, kv, torch.ones(4, 2, dtype=torch.float16), ks, ke)),
    ]
    for i, (argument, call) in enumerate(cases):
        with pytest.raises(BadArgumentError) as info:
            call()
        assert info.value.argument == argument, (i, argument, str(info.value))
    R.fp8_mqa_logits(q, kv, torch.ones(4, 2), ks, ke)  # float32 weights are the contract
    assert reference_backend.get_num_sms() == _device.MODEL_SMS
