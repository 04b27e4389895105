"""Paged / ragged MQA logits through every release family's calling convention."""

from __future__ import annotations

import math
from typing import Any, Callable

import pytest
import torch

import dgcompat
from dgcompat import reference as R

FAMILIES = ["sgl-0.1.3", "sgl-0.2.5", "bundled"]
H, D, BKV = 32, 128, 64


def _inputs(b: int, n: int, ctx: list[int], *, per_row_bt: bool = False, seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    blocks_per_seq = max(1, math.ceil(max(ctx) / BKV))
    kv = R.pack_kv_cache(torch.randn(b * blocks_per_seq, BKV, D, generator=g))
    bt = torch.randperm(b * blocks_per_seq, generator=g).to(torch.int32).view(b, blocks_per_seq)
    if per_row_bt:
        bt = bt.repeat_interleave(n, dim=0)
    q = torch.randn(b, n, H, D, generator=g).to(torch.float8_e4m3fn)
    w = torch.rand(b * n, H, generator=g)
    return {"q": q, "kv": kv, "w": w, "ctx": torch.tensor(ctx, dtype=torch.int32), "bt": bt,
            "max_len": blocks_per_seq * BKV}


def _row_lens(ctx: torch.Tensor, n: int) -> torch.Tensor:
    return (ctx.view(-1, 1) - n + 1 + torch.arange(n, dtype=torch.int32)).reshape(-1)


def _assert_close_valid(out: torch.Tensor, ref: torch.Tensor, row_len: torch.Tensor) -> None:
    __tracebackhide__ = True
    assert out.shape == ref.shape, f"out.shape={tuple(out.shape)}, but should be {tuple(ref.shape)}"
    for r in range(out.shape[0]):
        valid = int(row_len[r])
        torch.testing.assert_close(out[r, :valid], ref[r, :valid], rtol=1e-4, atol=1e-3,
                                   msg=lambda m, r=r: f"row {r} (first {valid} positions): {m}")


def _reference(i: dict[str, Any], n: int) -> torch.Tensor:
    bt = i["bt"] if i["bt"].shape[0] == i["q"].shape[0] else i["bt"][::n]
    return R.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], bt, None, i["max_len"], clean_logits=True)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("n", [1, 2, 3, 4])
@pytest.mark.parametrize("form", ["seq", "rows", "flat"])
@pytest.mark.parametrize("per_row_bt", [False, True])
def test_every_lens_form(fake_release: Callable[[str], Any], family: str, n: int, form: str,
                         per_row_bt: bool) -> None:
    mod = fake_release(family)
    i = _inputs(3, n, [70, 130, 64 + n], per_row_bt=per_row_bt)
    ref = _reference(i, n)
    row_len = _row_lens(i["ctx"], n)
    lens = {"seq": i["ctx"], "rows": row_len.view(3, n).contiguous(), "flat": row_len.view(-1, 1).contiguous()}[form]
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 8)
    out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])
    _assert_close_valid(out, ref, row_len)
    launched_q, launched_lens, _ = mod.LAUNCHES[-1]
    assert launched_q[1] in (1, 2), f"launched next_n={launched_q[1]} on SM90"
    assert len(launched_lens) == (1 if family == "bundled" else 2)
    clean = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"],
                                          clean_logits=True)
    torch.testing.assert_close(clean, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("family", FAMILIES)
def test_stale_schedule_raises_before_launch(fake_release: Callable[[str], Any], family: str) -> None:
    mod = fake_release(family)
    i = _inputs(2, 1, [64, 100])
    lens = i["ctx"].view(-1, 1).contiguous()
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 4)
    dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])
    launches = len(mod.LAUNCHES)
    lens.copy_(torch.tensor([[30], [20]], dtype=torch.int32))  # shorter: the old schedule is longer -> hang
    with pytest.raises(dgcompat.ScheduleMismatchError, match="modified after schedule_meta was built"):
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])
    assert len(mod.LAUNCHES) == launches, "a mismatched schedule was launched"
    # In-place refresh keeps the buffer and makes it valid again.
    ptr = sched.data_ptr()
    assert dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 4, out=sched) is sched and sched.data_ptr() == ptr
    dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])


@pytest.mark.parametrize("family", FAMILIES)
def test_schedule_for_other_lengths(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    i = _inputs(2, 1, [64, 100])
    other = torch.tensor([200, 300], dtype=torch.int32)
    sched = dgcompat.get_paged_mqa_logits_metadata(other, BKV, 4)
    with pytest.raises(dgcompat.ScheduleMismatchError, match="another context_lens"):
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])
    foreign = R.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    with pytest.raises(dgcompat.ScheduleMismatchError, match="not built by dgcompat"):
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], foreign, i["max_len"])


def test_schedule_overwritten_by_copy_is_refused(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(2, 1, [64, 100])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    sched.copy_(R.get_paged_mqa_logits_metadata(i["ctx"] + 100, BKV, 4))
    with pytest.raises(dgcompat.ScheduleMismatchError, match="written after"):
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])


def test_plan_is_reused_across_layers(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake_release("sgl-0.1.3")
    i = _inputs(2, 4, [128, 100])  # next_n=4 on SM90: split layout with a rebuilt schedule
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    calls: list[Any] = []
    real = mod.get_paged_mqa_logits_metadata
    monkeypatch.setattr(mod, "get_paged_mqa_logits_metadata", lambda *a: calls.append(a) or real(*a))
    from dgcompat import indexer

    indexer._B.__dict__.pop("metadata", None)
    for _layer in range(5):
        q = torch.randn_like(i["q"], dtype=torch.float32).to(torch.float8_e4m3fn)
        dgcompat.fp8_paged_mqa_logits(q, i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])
    assert len(calls) == 1, f"schedule rebuilt {len(calls)} times for one batch"


def test_one_row_result_keeps_aligned_stride(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(1, 1, [37])
    i["max_len"] = 37
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, 37)
    assert out.stride(0) % 4 == 0


@pytest.mark.parametrize("bad_arg, value, match", [
    ("ctx", torch.tensor([64, 100], dtype=torch.int64), "int32"),
    ("ctx", torch.tensor([[64, 1], [100, 1]], dtype=torch.int32)[:, 0], "contiguous"),
    ("q", torch.randn(2, 1, 32, 128), "FP8"),
    ("w", torch.rand(3, 32), "weights"),
    ("max_len", 10_000, "max_context_len"),
])
def test_bad_input_names_the_argument(fake_release: Callable[[str], Any], bad_arg: str, value: Any,
                                      match: str) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(2, 1, [64, 100])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    i[bad_arg] = value
    with pytest.raises(dgcompat.BadArgumentError, match=match):
        if bad_arg == "ctx":
            dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])


def test_head_count_checked_on_sm90(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(2, 1, [64, 100])
    q = torch.randn(2, 1, 24, D).to(torch.float8_e4m3fn)
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    with pytest.raises(dgcompat.BadArgumentError, match="head count"):
        dgcompat.fp8_paged_mqa_logits(q, i["kv"], torch.rand(2, 24), i["ctx"], i["bt"], sched, i["max_len"])


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("clean", [False, True])
def test_ragged_mqa_logits(fake_release: Callable[[str], Any], family: str, clean: bool) -> None:
    fake_release(family)
    g = torch.Generator().manual_seed(1)
    nq, nk, h = 5, 40, 16  # 16 heads: padded to 32 on SM90
    q = torch.randn(nq, h, D, generator=g).to(torch.float8_e4m3fn)
    k = torch.randn(nk, D, generator=g).to(torch.float8_e4m3fn)
    ks_ = torch.tensor([0, 3, 10, 10, 20], dtype=torch.int32)
    ke_ = torch.tensor([5, 20, 11, 30, 40], dtype=torch.int32)
    sf = torch.rand(nk, generator=g) + 0.5
    w = torch.rand(nq, h, generator=g)
    out = dgcompat.fp8_mqa_logits(q, (k, sf), w, ks_, ke_, clean_logits=clean)
    ref = R.fp8_mqa_logits(q, (k, sf), w, ks_, ke_, clean_logits=True)
    valid = (torch.arange(nk).view(1, -1) >= ks_.view(-1, 1)) & (torch.arange(nk).view(1, -1) < ke_.view(-1, 1))
    torch.testing.assert_close(out[valid], ref[valid], rtol=1e-4, atol=1e-3)
    if clean:
        assert torch.isneginf(out[~valid]).all(), "clean_logits=True must leave -inf outside [ks, ke)"


@pytest.mark.parametrize("n", [2, 4])  # native launch (table passed through) and split launch (table copied)
def test_block_table_rewritten_in_place_is_seen(fake_release: Callable[[str], Any], n: int) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(2, n, [100, 120])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])
    i["bt"].copy_(i["bt"].flip(0))  # the engine reassigns pages within the same buffer
    out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])
    _assert_close_valid(out, _reference(i, n), _row_lens(i["ctx"], n))
