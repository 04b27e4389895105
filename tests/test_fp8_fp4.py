"""The ``fp8_fp4`` indexer names in every build's argument layout, the slot counts engines pass, bf16 logits and the
refusal of scaled queries where the architecture has no kernel for them (fake builds of each family)."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import dgcompat
from dgcompat import reference as R

H, D, BKV = 32, 128, 64
PAGED_FAMILIES = ["sgl-0.1.3", "sgl-0.2.5", "up-2.8.1", "up-2.8.1-logits-dtype", "bundled", "reference"]


def _paged_inputs(b: int, n: int, ctx: list[int], seed: int = 0) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    blocks = max(1, math.ceil(max(ctx) / BKV))
    kv = R.pack_kv_cache(torch.randn(b * blocks, BKV, D, generator=g))
    bt = torch.randperm(b * blocks, generator=g).to(torch.int32).view(b, blocks)
    q = torch.randn(b, n, H, D, generator=g).to(torch.float8_e4m3fn)
    w = torch.rand(b * n, H, generator=g)
    ctx_t = torch.tensor(ctx, dtype=torch.int32)
    lens = (ctx_t.view(-1, 1) - n + 1 + torch.arange(n, dtype=torch.int32)).contiguous()  # (B, next_n)
    return {"q": q, "kv": kv, "w": w, "lens": lens, "bt": bt, "max_len": blocks * BKV}


def _paged_want(i: dict[str, Any]) -> torch.Tensor:
    return R.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["lens"], i["bt"], None, i["max_len"])


def _check_paged(out: torch.Tensor, want: torch.Tensor, lens: torch.Tensor, dtype: torch.dtype) -> None:
    __tracebackhide__ = True
    assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == want.shape
    rows = lens.reshape(-1)
    for r in range(out.shape[0]):
        n = int(rows[r])
        tol = {"rtol": 1e-2, "atol": 5e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-3}
        torch.testing.assert_close(out[r, :n].float(), want[r, :n], rtol=tol["rtol"], atol=tol["atol"])


@pytest.mark.parametrize("family", PAGED_FAMILIES)
@pytest.mark.parametrize("layout", ["sglang-0.5.23", "vllm-0.34", "sgl-positional", "0.2.5-positional", "keywords"])
def test_paged_call_forms_of_every_build(fake_release: Callable[..., Any], family: str, layout: str) -> None:
    fake_release(family)
    i = _paged_inputs(3, 2, [70, 100, 129])
    want = _paged_want(i)
    sched = dgcompat.get_paged_mqa_logits_metadata(i["lens"], BKV, dgcompat.get_num_sms())
    head = ((i["q"], None), i["kv"], i["w"], i["lens"], i["bt"], sched, i["max_len"])
    calls: dict[str, Callable[[], Any]] = {
        "sglang-0.5.23": lambda: dgcompat.fp8_fp4_paged_mqa_logits(*head, False, logits_dtype=torch.bfloat16),
        "vllm-0.34": lambda: dgcompat.fp8_fp4_paged_mqa_logits(*head, logits_dtype=torch.float32),
        "sgl-positional": lambda: dgcompat.fp8_fp4_paged_mqa_logits(*head, False, torch.bfloat16, None),
        "0.2.5-positional": lambda: dgcompat.fp8_fp4_paged_mqa_logits(*head, None),
        "keywords": lambda: dgcompat.fp8_fp4_paged_mqa_logits(
            q=(i["q"], None), kv_cache=i["kv"], weights=i["w"], context_lens=i["lens"], block_table=i["bt"],
            schedule_meta=sched, max_context_len=i["max_len"], clean_logits=True, logits_dtype=torch.bfloat16),
    }
    dtype = torch.float32 if layout in ("vllm-0.34", "0.2.5-positional") else torch.bfloat16
    for _ in range(2):  # the second call takes the repeat path
        out = calls[layout]()
        _check_paged(out, want, i["lens"], dtype)
    if layout == "keywords":  # clean_logits=True: -inf past each row's length
        cols = torch.arange(out.shape[1]).unsqueeze(0)
        assert torch.isneginf(out.float()[cols >= i["lens"].reshape(-1, 1)]).all()


@pytest.mark.parametrize("family", ["sgl-0.1.3", "up-2.8.1-logits-dtype", "reference"])
def test_paged_vllm_positional_dtype_at_seven(fake_release: Callable[..., Any], family: str) -> None:
    fake_release(family)
    i = _paged_inputs(2, 1, [64, 90])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["lens"], BKV, dgcompat.get_num_sms())
    out = dgcompat.fp8_fp4_paged_mqa_logits((i["q"], None), i["kv"], i["w"], i["lens"], i["bt"], sched, i["max_len"],
                                            torch.bfloat16)
    _check_paged(out, _paged_want(i), i["lens"], torch.bfloat16)


@pytest.mark.parametrize("family", ["sgl-0.1.3", "up-2.8.1-logits-dtype"])
def test_paged_bf16_is_computed_where_the_build_takes_logits_dtype(fake_release: Callable[..., Any],
                                                                  family: str) -> None:
    mod = fake_release(family)
    i = _paged_inputs(2, 2, [70, 100])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["lens"], BKV, dgcompat.get_num_sms())
    native = dgcompat.capabilities().paged_logits_dtype is not None
    seen: list[Any] = []
    if native:
        original = mod.fp8_fp4_paged_mqa_logits

        def spy(*args: Any, **kwargs: Any) -> Any:
            seen.append(kwargs.get("logits_dtype"))
            return original(*args, **kwargs)
        mod.fp8_fp4_paged_mqa_logits = spy
    for _ in range(2):
        out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["lens"], i["bt"], sched, i["max_len"],
                                            logits_dtype=torch.bfloat16)
        _check_paged(out, _paged_want(i), i["lens"], torch.bfloat16)
    assert seen == ([torch.bfloat16, torch.bfloat16] if native else [])


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "up-2.8.1", "up-2.8.1-logits-dtype", "bundled",
                                    "reference"])
@pytest.mark.parametrize("next_n", [1, 2, 4])
def test_vllm_slot_count_for_next_n(fake_release: Callable[..., Any], family: str, next_n: int) -> None:
    # vLLM 0.34 builds the schedule with num_sms // 2 slots for next_n 4 on SM90 (its multicast launch); the
    # fakes assert, like the kernels, a schedule of exactly num_sms + 1 rows for the launch dgcompat makes.
    fake_release(family)
    i = _paged_inputs(3, next_n, [150, 200, 64])
    sms = dgcompat.get_num_sms()
    slots = sms // 2 if next_n == 4 else sms
    sched = dgcompat.get_paged_mqa_logits_metadata(i["lens"], BKV, slots)
    assert tuple(sched.shape) == (slots + 1, 2)  # the engine's buffer shape
    buffer = torch.zeros_like(sched)
    buffer[:] = sched  # vLLM's persistent-buffer refresh
    want = _paged_want(i)
    for s in (sched, buffer):
        for _ in range(2):
            out = dgcompat.fp8_fp4_paged_mqa_logits((i["q"], None), i["kv"], i["w"], i["lens"], i["bt"], s,
                                                    i["max_len"], logits_dtype=torch.float32)
            _check_paged(out, want, i["lens"], torch.float32)


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "up-2.8.1-logits-dtype", "bundled"])
def test_scaled_queries_are_refused_on_sm90_naming_the_architecture(fake_release: Callable[..., Any],
                                                                   family: str) -> None:
    fake_release(family, "sm90")
    i = _paged_inputs(2, 1, [64, 90])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["lens"], BKV, dgcompat.get_num_sms())
    packed = torch.zeros(2, 1, H, D // 2, dtype=torch.int8)
    sf = torch.full((2, 1, H), 0x7F7F7F7F, dtype=torch.int32)
    fp4_cache = torch.zeros(i["kv"].shape[0], BKV, 1, D // 2 + 4, dtype=torch.uint8)
    kv = (torch.zeros(16, D // 2, dtype=torch.int8), torch.full((16,), 0x7F7F7F7F, dtype=torch.int32))
    ks, ke = torch.zeros(2, dtype=torch.int32), torch.full((2,), 16, dtype=torch.int32)
    for _ in range(2):  # every call
        with pytest.raises(dgcompat.UnsupportedFeatureError, match=r"FP4 queries.*sm90"):
            dgcompat.fp8_fp4_paged_mqa_logits((packed, sf), fp4_cache, i["w"], i["lens"], i["bt"], sched,
                                              i["max_len"])
        with pytest.raises(dgcompat.UnsupportedFeatureError, match=r"FP4 queries.*sm90"):
            dgcompat.fp8_fp4_mqa_logits((packed[:, 0], sf[:, 0]), kv, i["w"], ks, ke, 16)
        with pytest.raises(dgcompat.UnsupportedFeatureError, match=r"MX-scaled FP8 queries.*sm90"):
            dgcompat.fp8_fp4_paged_mqa_logits((i["q"], sf), i["kv"], i["w"], i["lens"], i["bt"], sched,
                                              i["max_len"])


@pytest.mark.parametrize(("args", "kwargs", "argument"), [
    ((torch.bfloat16,), {"logits_dtype": torch.float32}, "logits_dtype"),
    ((torch.bfloat16, torch.float32), {}, "logits_dtype"),
    (("yes",), {}, "clean_logits"),
    ((False, "bf16"), {}, "logits_dtype"),
    ((torch.float32, 3), {}, "indices"),
])
def test_paged_layout_conflicts_are_named(fake_release: Callable[..., Any], args: tuple[Any, ...],
                                          kwargs: dict[str, Any], argument: str) -> None:
    fake_release("sgl-0.1.3")
    i = _paged_inputs(2, 1, [64, 90])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["lens"], BKV, dgcompat.get_num_sms())
    for _ in range(2):
        with pytest.raises(dgcompat.BadArgumentError) as exc:
            dgcompat.fp8_fp4_paged_mqa_logits((i["q"], None), i["kv"], i["w"], i["lens"], i["bt"], sched,
                                              i["max_len"], *args, **kwargs)
        assert exc.value.argument == argument


# --- ragged -----------------------------------------------------------------------------------------------------

def _ragged_inputs() -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(5)
    nq, nk = 6, 64
    q = torch.randn(nq, H, D, generator=g).to(torch.float8_e4m3fn)
    k = torch.randn(nk, D, generator=g).to(torch.float8_e4m3fn)
    sf = torch.rand(nk, generator=g) + 0.5
    w = torch.rand(nq, H, generator=g)
    ks = torch.tensor([0, 4, 10, 10, 30, 0], dtype=torch.int32)
    ke = torch.tensor([6, 20, 11, 40, 64, 64], dtype=torch.int32)
    return q, (k, sf), w, ks, ke


RAGGED_FAMILIES = ["sgl-0.1.3", "sgl-0.2.5", "up-2.8.1", "up-2.8.1-logits-dtype", "bundled", "reference"]


_RAGGED_LAYOUTS = ["vllm-0.34", "sglang-0.5.23", "0.2.5-positional", "sgl-positional", "vllm-0.34-positional"]


# The bundled copies have no compressed layout: their compressed calls are test_bundled_refuses_compressed.
@pytest.mark.parametrize(("family", "layout"), [(f, layout) for f in RAGGED_FAMILIES for layout in _RAGGED_LAYOUTS
                                            if f != "bundled" or layout == "sgl-positional"])
def test_ragged_call_forms_of_every_build(fake_release: Callable[..., Any], family: str, layout: str) -> None:
    fake_release(family)
    q, kv, w, ks, ke = _ragged_inputs()
    width = 64
    compressed = layout != "sgl-positional"
    calls: dict[str, Callable[[], Any]] = {
        "vllm-0.34": lambda: dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, width,
                                                         logits_dtype=torch.float32),
        "sglang-0.5.23": lambda: dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, False, width,
                                                             logits_dtype=torch.bfloat16),
        "0.2.5-positional": lambda: dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, width, None),
        "sgl-positional": lambda: dgcompat.fp8_fp4_mqa_logits(q, kv, w, ks, ke, True, 0, torch.bfloat16),
        "vllm-0.34-positional": lambda: dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, width, torch.bfloat16,
                                                                    None),
    }
    dtype = torch.float32 if layout in ("vllm-0.34", "0.2.5-positional") else torch.bfloat16
    want = R.fp8_mqa_logits(q, kv, w, ks, ke, max_seqlen_k=width if compressed else None)
    cols = torch.arange(want.shape[1]).unsqueeze(0)
    valid = cols < (ke - ks).unsqueeze(1) if compressed else (cols >= ks.unsqueeze(1)) & (cols < ke.unsqueeze(1))
    for _ in range(2):
        out = calls[layout]()
        assert isinstance(out, torch.Tensor) and out.dtype == dtype and out.shape == want.shape
        tol = {"rtol": 1e-2, "atol": 5e-2} if dtype == torch.bfloat16 else {"rtol": 1e-4, "atol": 1e-3}
        torch.testing.assert_close(out.float()[valid], want[valid], rtol=tol["rtol"], atol=tol["atol"])
        if layout == "sgl-positional":  # clean_logits=True
            assert torch.isneginf(out.float()[~valid]).all()


def test_bundled_refuses_compressed(fake_release: Callable[..., Any]) -> None:
    fake_release("bundled")
    q, kv, w, ks, ke = _ragged_inputs()
    for _ in range(2):
        with pytest.raises(dgcompat.UnsupportedFeatureError, match="max_seqlen_k"):
            dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, 64, logits_dtype=torch.float32)


@pytest.mark.parametrize(("args", "kwargs", "argument"), [
    ((24, 24), {}, "max_seqlen_k"),
    ((24, torch.bfloat16, torch.float32), {}, "logits_dtype"),
    ((24, torch.bfloat16), {"logits_dtype": torch.float32}, "logits_dtype"),
    ((False, "24"), {}, "max_seqlen_k"),
    ((2.5,), {}, "clean_logits"),
    ((24, torch.zeros(3, 2, dtype=torch.int32)), {"schedule_meta": torch.zeros(3, 2, dtype=torch.int32)},
     "schedule_meta"),
])
def test_ragged_layout_conflicts_are_named(fake_release: Callable[..., Any], args: tuple[Any, ...],
                                           kwargs: dict[str, Any], argument: str) -> None:
    fake_release("sgl-0.1.3")
    q, kv, w, ks, ke = _ragged_inputs()
    for _ in range(2):
        with pytest.raises(dgcompat.BadArgumentError) as exc:
            dgcompat.fp8_fp4_mqa_logits((q, None), kv, w, ks, ke, *args, **kwargs)
        assert exc.value.argument == argument
