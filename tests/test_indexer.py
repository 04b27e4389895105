"""Paged / ragged MQA logits through every release family's calling convention."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import pytest
import torch

import dgcompat
from dgcompat import _tooling
from dgcompat import reference as R
from dgcompat.indexer import _args
from testsupport.tiers import grid

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

        def msg(m: str, r: int = r, valid: int = valid) -> str:
            return f"row {r} (first {valid} positions): {m}"

        torch.testing.assert_close(out[r, :valid], ref[r, :valid], rtol=1e-4, atol=1e-3, msg=msg)


def _lens(ctx: torch.Tensor, n: int, form: str) -> torch.Tensor:
    row_len = _row_lens(ctx, n)
    return {"seq": ctx.clone(), "rows": row_len.view(-1, n).contiguous(), "flat": row_len.view(-1, 1).contiguous()}[form]


def _reference(i: dict[str, Any], n: int) -> torch.Tensor:
    bt = i["bt"] if i["bt"].shape[0] == i["q"].shape[0] else i["bt"][::n]
    return R.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], bt, None, i["max_len"], clean_logits=True)


@pytest.mark.parametrize(("n", "form", "family", "per_row_bt"),
                         grid([1, 2, 3, 4], ["seq", "rows", "flat"], FAMILIES, [False, True]))
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
def test_schedule_for_other_lengths_is_replaced(fake_release: Callable[[str], Any], family: str) -> None:
    # A schedule of other lengths, a foreign one and one overwritten by copy_ never reach the kernel:
    # dgcompat launches the schedule of the launch lengths (the fake raises HANG on a mismatch).
    fake_release(family)
    i = _inputs(2, 1, [64, 100])
    ref = _reference(i, 1)
    other = torch.tensor([200, 300], dtype=torch.int32)
    for sched in (dgcompat.get_paged_mqa_logits_metadata(other, BKV, 4),
                  R.get_paged_mqa_logits_metadata(other, BKV, 4),
                  dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4).copy_(
                      R.get_paged_mqa_logits_metadata(other, BKV, 4))):
        out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])
        _assert_close_valid(out, ref, _row_lens(i["ctx"], 1))


@pytest.mark.parametrize(("form", "family"), grid(["flat", "seq", "rows"], FAMILIES, full=0))
def test_one_metadata_call_per_batch(fake_release: Callable[[str], Any], family: str, form: str) -> None:
    # next_n=4 on SM90 is launched flat (per-row lengths, repeated table, a schedule of its own). In
    # steady state an engine's step costs one native metadata call, shared by all layers.
    mod = fake_release(family)
    i = _inputs(2, 4, [128, 100])
    lens = _lens(i["ctx"], 4, form)
    sms = dgcompat.get_num_sms()  # what engines pass (a schedule of another slot count is rebuilt per batch)
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, sms)
    for step in range(3):
        if step:
            i["ctx"].sub_(3)
            lens.copy_(_lens(i["ctx"], 4, form))
            dgcompat.get_paged_mqa_logits_metadata(lens, BKV, sms, out=sched)
        before = len(mod.METADATA_CALLS)
        ref = _reference(i, 4)
        for _layer in range(5):
            q = torch.randn_like(i["q"], dtype=torch.float32).to(torch.float8_e4m3fn)
            i["q"] = q
            out = dgcompat.fp8_paged_mqa_logits(q, i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])
        _assert_close_valid(out, _reference(i, 4), _row_lens(i["ctx"], 4))
        del ref
        calls = len(mod.METADATA_CALLS) - before + (1 if step else 0)
        assert calls <= (2 if step == 0 else 1), f"step {step}: {calls} native metadata calls for one batch"


def test_one_row_result_keeps_aligned_stride(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(1, 1, [37])
    i["max_len"] = 37
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, 37)
    assert out.stride(0) % 4 == 0


@pytest.mark.parametrize(("bad_arg", "value", "match"), [
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


# --- engine patterns, eager and under (simulated) CUDA-graph replay ---------------------------------

PATTERNS = ["sglang", "vllm", "out", "fresh"]


def _batch(b: int, n: int, seed: int, max_ctx: int = 300) -> dict[str, Any]:
    g = torch.Generator().manual_seed(seed)
    ctx = torch.randint(n, max_ctx + 1, (b,), generator=g, dtype=torch.int32)
    return _inputs(b, n, ctx.tolist(), seed=seed) | {"ctx": ctx}


class _Buffers:
    """An engine's persistent buffers for one captured batch size (what a CUDA graph reads)."""

    def __init__(self, first: dict[str, Any], n: int, form: str, per_row_bt: bool, max_blocks: int) -> None:
        b = first["q"].shape[0]
        self.n, self.form, self.per_row = n, form, per_row_bt
        self.q = first["q"].clone()
        self.w = first["w"].clone()
        self.kv = first["kv"]
        self.lens = _lens(first["ctx"], n, form)
        rows = b * n if per_row_bt else b
        self.bt = torch.zeros(rows, max_blocks, dtype=torch.int32)
        self.max_len = max_blocks * BKV
        self.sched = torch.zeros(9, 2, dtype=torch.int32)

    def write(self, batch: dict[str, Any], pattern: str, kv: torch.Tensor) -> None:
        """Write the next batch into the buffers the way ``pattern``'s engine does."""
        self.q.copy_(batch["q"])
        self.w.copy_(batch["w"])
        self.kv = kv
        table = batch["bt"].repeat_interleave(self.n, 0) if self.per_row else batch["bt"]
        self.bt.zero_()
        self.bt[:, :table.shape[1]].copy_(table)
        fresh = _lens(batch["ctx"], self.n, self.form)
        if pattern == "sglang":  # schedule from a fresh tensor, copied in, then the lengths copied in
            self.sched.copy_(dgcompat.get_paged_mqa_logits_metadata(fresh, BKV, 8))
            self.lens.copy_(fresh)
        elif pattern == "vllm":  # lengths written, then buffer[:] = metadata(lengths)
            self.lens.copy_(fresh)
            self.sched[:] = dgcompat.get_paged_mqa_logits_metadata(self.lens, BKV, 8)
        elif pattern == "out":
            self.lens.copy_(fresh)
            dgcompat.get_paged_mqa_logits_metadata(self.lens, BKV, 8, out=self.sched)
        elif pattern == "nothing":  # lengths written, schedule not refreshed
            self.lens.copy_(fresh)
        else:
            raise AssertionError(pattern)

    def launch(self) -> torch.Tensor:
        return dgcompat.fp8_paged_mqa_logits(self.q, self.kv, self.w, self.lens, self.bt, self.sched, self.max_len,
                                             clean_logits=True)


def _expect(batch: dict[str, Any], n: int, max_len: int) -> torch.Tensor:
    return R.fp8_paged_mqa_logits(batch["q"], batch["kv"], batch["w"], batch["ctx"], batch["bt"], None, max_len,
                                  clean_logits=True)


def _shared_kv(batches: list[dict[str, Any]]) -> torch.Tensor:
    kv: torch.Tensor = batches[0]["kv"]
    return kv


def _batches(b: int, n: int, count: int, seed: int) -> list[dict[str, Any]]:
    # One kv cache for all batches (the engine's cache); tables index into it.
    out = [_batch(b, n, seed + k) for k in range(count)]
    kv = max((x["kv"] for x in out), key=lambda t: t.shape[0])
    for x in out:
        x["kv"] = kv
    return out


@pytest.mark.parametrize(("pattern", "family", "n", "form"), grid(PATTERNS, FAMILIES, [1, 2, 4], ["seq", "rows", "flat"]))
def test_engine_patterns_eager(fake_release: Callable[[str], Any], family: str, pattern: str, n: int,
                               form: str) -> None:
    fake_release(family)
    batches = _batches(3, n, 4, seed=10 * n)
    max_blocks = 300 // BKV + 1
    for per_row in (False, True):
        if pattern == "fresh":
            for batch in batches:
                lens = _lens(batch["ctx"], n, form)
                bt = batch["bt"].repeat_interleave(n, 0) if per_row else batch["bt"]
                sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 8)
                out = dgcompat.fp8_paged_mqa_logits(batch["q"], batch["kv"], batch["w"], lens, bt, sched,
                                                    batch["max_len"], clean_logits=True)
                torch.testing.assert_close(out, _expect(batch, n, batch["max_len"]), rtol=1e-4, atol=1e-3)
            continue
        buf = _Buffers(batches[0], n, form, per_row, max_blocks)
        for batch in batches:
            buf.write(batch, pattern, batch["kv"])
            out = buf.launch()
            torch.testing.assert_close(out, _expect(batch, n, buf.max_len), rtol=1e-4, atol=1e-3)


def _replay_each(graphs: list[Any], outs: list[list[Any]], batches: list[dict[str, Any]], buf: Any) -> None:
    """Write each batch into the buffers (no schedule refresh), replay every graph, check every output."""
    for batch in batches:
        buf.write(batch, "nothing", buf.kv)
        for graph, layer_outs in zip(graphs, outs, strict=True):
            graph.replay()
            for out in layer_outs:
                torch.testing.assert_close(out, _expect(batch, 4, buf.max_len), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("pattern", "family", "n", "form", "per_row"),
                         grid(["sglang", "vllm", "out", "nothing"], FAMILIES, [1, 2, 4], ["seq", "rows", "flat"],
                              [False, True]))
def test_engine_patterns_replay(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch, family: str,
                                pattern: str, n: int, form: str, per_row: bool) -> None:
    # Capture once (after an eager warm-up on the same buffers), then write each next batch into the
    # buffers as the engine does and replay: every replay must give that batch's logits. The fake
    # kernel re-checks the schedule against its lengths at replay (HANG on a mismatch), so "nothing"
    # (lengths written, schedule never refreshed) shows that replay cannot hang either.
    from dgcompat_conformance.gpu.graphsim import Graph

    mod = fake_release(family)
    batches = _batches(2 if n == 4 else 3, n, 4, seed=100 + n)
    buf = _Buffers(batches[0], n, form, per_row, 300 // BKV + 1)
    buf.write(batches[0], "out", batches[0]["kv"])
    buf.launch()  # eager warm-up: its derivations must not be frozen into the graph
    graph = Graph()
    with graph.capture(mod):
        out = buf.launch()
    torch.testing.assert_close(out, _expect(batches[0], n, buf.max_len), rtol=1e-4, atol=1e-3)
    for batch in batches[1:]:
        buf.write(batch, pattern, buf.kv)
        graph.replay()
        torch.testing.assert_close(out, _expect(batch, n, buf.max_len), rtol=1e-4, atol=1e-3,
                                   msg=lambda m: f"replay of the next batch ({pattern}): {m}")


def test_layers_of_one_capture_share_one_schedule(fake_release: Callable[[str], Any],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # Within one capture the schedule derived for the first layer is valid for the later ones (its
    # kernel is recorded first); a second capture on the same buffers derives its own.
    from dgcompat_conformance.gpu.graphsim import Graph

    mod = fake_release("sgl-0.1.3")
    batches = _batches(2, 4, 3, seed=7)
    buf = _Buffers(batches[0], 4, "seq", False, 300 // BKV + 1)
    buf.write(batches[0], "out", batches[0]["kv"])
    graphs = [Graph(), Graph()]
    outs = []
    for graph in graphs:
        with graph.capture(mod):
            outs.append([buf.launch() for _layer in range(3)])
        assert graph.natives("get_paged_mqa_logits_metadata") == 1, "one schedule per captured step"
        assert graph.natives("fp8_paged_mqa_logits") == 3
    _replay_each(graphs, outs, batches[1:], buf)


def test_captures_without_driver_ids(fake_release: Callable[[str], Any]) -> None:
    # Without the driver's capture id, captures are told apart by the eager calls between them (an
    # engine's warm-up): each graph still records its own schedule, and both replay correctly.
    from dgcompat_conformance.gpu.graphsim import Graph

    mod = fake_release("sgl-0.1.3")
    batches = _batches(2, 4, 3, seed=8)
    buf = _Buffers(batches[0], 4, "seq", False, 300 // BKV + 1)
    buf.write(batches[0], "out", batches[0]["kv"])
    graphs, outs = [Graph(), Graph()], []
    for graph in graphs:
        buf.launch()  # eager warm-up
        with graph.capture(mod, driver_id=False):
            outs.append([buf.launch() for _layer in range(2)])
        assert graph.natives("get_paged_mqa_logits_metadata") == 1
    _replay_each(graphs, outs, batches[1:], buf)


def test_capture_issues_no_host_sync(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # A host synchronization is illegal on a capturing stream; graphsim raises on one. Every layout
    # (native, flat with derived lengths and a repeated table, emulated clean_logits) records cleanly.
    from dgcompat_conformance.gpu.graphsim import Graph

    mod = fake_release("sgl-0.1.3")
    for n, form in ((2, "seq"), (2, "rows"), (4, "seq"), (4, "flat")):
        batches = _batches(3, n, 2, seed=n)
        buf = _Buffers(batches[0], n, form, False, 300 // BKV + 1)
        buf.write(batches[0], "out", batches[0]["kv"])
        with Graph().capture(mod):
            buf.launch()


# --- every call validates like the first --------------------------------------------------------

def _malformed(i: dict[str, Any], what: str) -> dict[str, Any]:
    j = dict(i)
    if what == "q_dtype":
        j["q"] = i["q"].float()
    elif what == "q_shape":
        j["q"] = i["q"][:, :, :16].contiguous()
    elif what == "kv_dtype":
        j["kv"] = i["kv"].to(torch.int32)
    elif what == "kv_shape":
        j["kv"] = i["kv"][..., :-4].contiguous()
    elif what == "weights_dtype":
        j["w"] = i["w"].half()
    elif what == "weights_shape":
        j["w"] = i["w"][:, :1].contiguous()
    elif what == "weights_device":
        j["w"] = torch.empty(i["w"].shape, device="meta")
    elif what == "q_device":
        j["q"] = torch.empty(i["q"].shape, dtype=i["q"].dtype, device="meta")
    elif what == "kv_device":
        j["kv"] = torch.empty(i["kv"].shape, dtype=i["kv"].dtype, device="meta")
    elif what == "q_none":
        j["q"] = None
    elif what == "kv_list":
        j["kv"] = i["kv"].tolist()
    else:
        raise AssertionError(what)
    return j


@pytest.fixture(params=["torch", "python"])
def metadata_check(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The fast path's per-call metadata check: torch's C++ tensor guard, or the Python comparison."""
    from dgcompat.indexer._guards import tensor_guards
    from dgcompat.indexer._state import STATE

    if request.param == "python":
        monkeypatch.setattr(STATE, "tensor_guards", None)
        monkeypatch.setattr(STATE, "tensor_guards_probed", True)
    elif tensor_guards() is None:
        pytest.skip("torch has no usable TensorGuards here")
    return str(request.param)


@pytest.mark.parametrize(("what", "family"), grid(
    ["q_dtype", "q_shape", "kv_dtype", "kv_shape", "weights_dtype", "weights_shape", "weights_device", "q_device",
     "kv_device", "q_none", "kv_list"], FAMILIES))
def test_repeat_calls_validate_like_the_first(fake_release: Callable[[str], Any], family: str, what: str,
                                              metadata_check: str) -> None:
    mod = fake_release(family)
    i = _inputs(2, 2, [64, 100])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)

    def call(x: dict[str, Any]) -> Any:
        return dgcompat.fp8_paged_mqa_logits(x["q"], x["kv"], x["w"], i["ctx"], i["bt"], sched, i["max_len"])

    bad_i = _malformed(i, what)
    with pytest.raises(dgcompat.BadArgumentError) as first:
        call(bad_i)
    call(i)  # a valid call: the fast path now holds its plan
    launches = len(mod.LAUNCHES)
    with pytest.raises(dgcompat.BadArgumentError) as again:
        call(bad_i)
    assert str(again.value) == str(first.value)
    assert len(mod.LAUNCHES) == launches, "a malformed call reached the kernel"


def _relaid(i: dict[str, Any], what: str) -> dict[str, Any]:
    """The same shapes and dtypes in another memory layout."""
    j = dict(i)
    if what == "q_transposed":
        j["q"] = i["q"].transpose(0, 1).contiguous().transpose(0, 1)
    elif what == "weights_padded":
        j["w"] = torch.empty(i["w"].shape[0], i["w"].shape[1] + 4)[:, :i["w"].shape[1]].copy_(i["w"])
    elif what == "kv_padded":
        kv = i["kv"]
        j["kv"] = torch.zeros(kv.shape[0], kv.shape[1], 1, kv.shape[3] + 4, dtype=kv.dtype)[..., :kv.shape[3]].copy_(kv)
    else:
        raise AssertionError(what)
    return j


def _outcome(call: Callable[[], Any]) -> Any:
    try:
        return ("result", call().clone())
    except Exception as exc:  # noqa: BLE001 - the outcome itself is compared
        return ("raised", type(exc).__name__, str(exc))


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("what", ["q_transposed", "weights_padded", "kv_padded"])
def test_repeat_calls_with_another_layout_behave_like_the_first(fake_release: Callable[[str], Any], family: str,
                                                                what: str, metadata_check: str,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    # Same shapes and dtypes, other strides: after a contiguous call, the fast path must not launch them with the
    # contiguous call's plan; they are checked in full and get exactly what a first call with them gets.
    from dgcompat.indexer import _plan

    checked = []
    check = _args.check_paged  # what _plan calls
    monkeypatch.setattr(_plan, "check_paged", lambda *a: checked.append(1) or check(*a))
    mod = fake_release(family)
    i = _inputs(2, 2, [64, 100])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    j = _relaid(i, what)

    def call(x: dict[str, Any]) -> Callable[[], Any]:
        return lambda: dgcompat.fp8_paged_mqa_logits(x["q"], x["kv"], x["w"], i["ctx"], i["bt"], sched, i["max_len"])

    before = len(mod.LAUNCHES)
    first = _outcome(call(j))
    first_launches = len(mod.LAUNCHES) - before
    call(i)()
    checks = len(checked)
    call(i)()
    assert len(checked) == checks, "a repeat call in the same layout was planned again"
    before, checks = len(mod.LAUNCHES), len(checked)
    again = _outcome(call(j))
    assert len(checked) == checks + 1, "a call in another layout took the fast path"
    assert again[0] == first[0], (first, again)
    assert torch.equal(again[1], first[1]) if first[0] == "result" else again[1:] == first[1:]
    assert len(mod.LAUNCHES) - before == first_launches


def test_logits_dtype(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(2, 2, [64, 100])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    args = (i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])
    want = dgcompat.fp8_paged_mqa_logits(*args).clone()
    for _ in range(2):
        got = dgcompat.fp8_paged_mqa_logits(*args, logits_dtype=torch.float32)
        assert got.dtype == torch.float32 and torch.equal(got, want)
    for _ in range(2):  # converted from float32: this build's paged function takes no logits_dtype
        got = dgcompat.fp8_paged_mqa_logits(*args, logits_dtype=torch.bfloat16)
        assert got.dtype == torch.bfloat16 and torch.equal(got, want.to(torch.bfloat16))
    with pytest.raises(dgcompat.BadArgumentError) as exc:
        dgcompat.fp8_paged_mqa_logits(*args, logits_dtype="float32")  # type: ignore[arg-type]
    assert exc.value.argument == "logits_dtype"


def test_weights_device_is_reported_against_weights(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    i = _inputs(2, 1, [64, 100])
    sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
    with pytest.raises(dgcompat.BadArgumentError, match=r"'weights'|weights"):
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], torch.empty(i["w"].shape, device="meta"), i["ctx"], i["bt"],
                                      sched, i["max_len"])
    try:
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], torch.empty(i["w"].shape, device="meta"), i["ctx"], i["bt"],
                                      sched, i["max_len"])
    except dgcompat.BadArgumentError as exc:
        assert exc.argument == "weights"


# --- silent wrong results the paged path once gave ----------------------------------------------------

@pytest.mark.parametrize("family", FAMILIES)
def test_next_n2_per_row_table(fake_release: Callable[[str], Any], family: str) -> None:
    # 3(a): a per-row (B*next_n, max_blocks) table whose rows differ: every row must read its own pages.
    fake_release(family)
    i = _inputs(3, 2, [70, 130, 100], per_row_bt=True)
    i["bt"][1::2] = i["bt"][1::2].flip(0)  # row 1 of each sequence reads another sequence's pages
    ref = R.fp8_paged_mqa_logits(i["q"].view(6, 1, H, D), i["kv"], i["w"], _row_lens(i["ctx"], 2).view(-1, 1),
                                 i["bt"], None, i["max_len"], True)
    for form in ("seq", "rows", "flat"):
        lens = _lens(i["ctx"], 2, form)
        sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 8)
        out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"],
                                            clean_logits=True)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("rows", [[[26, 26]], [[30, 20]], [[5, 70], [64, 64]]])
def test_two_d_lengths_any_row_values(fake_release: Callable[[str], Any], family: str, rows: list[list[int]]) -> None:
    # 3(b): (B, next_n) lengths that do not follow ctx - next_n + 1 + j (equal rows, decreasing rows):
    # every row sees exactly its own length on every release.
    fake_release(family)
    lens = torch.tensor(rows, dtype=torch.int32)
    b, n = lens.shape
    i = _inputs(b, n, [int(lens.max())] * b)
    ref = R.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], None, i["max_len"], True)
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 8)
    out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"], clean_logits=True)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-3)


def test_mqa_padding_rejects_broadcast_weights(fake_release: Callable[[str], Any]) -> None:
    # 3(c): 16 heads are padded to 32 on SM90; a (Nq, 1) weights tensor must be refused, not broadcast.
    fake_release("sgl-0.1.3")
    q = torch.randn(4, 16, D).to(torch.float8_e4m3fn)
    k = torch.randn(10, D).to(torch.float8_e4m3fn)
    ks_, ke_ = torch.zeros(4, dtype=torch.int32), torch.full((4,), 10, dtype=torch.int32)
    with pytest.raises(dgcompat.BadArgumentError, match="weights"):
        dgcompat.fp8_mqa_logits(q, (k, torch.ones(10)), torch.rand(4, 1), ks_, ke_)


@pytest.mark.parametrize("family", FAMILIES)
def test_padded_strided_block_table(fake_release: Callable[[str], Any], family: str) -> None:
    # A slice of a wider page table (row stride > max_blocks), as engines pass: rows are read right.
    fake_release(family)
    i = _inputs(3, 2, [70, 130, 100])
    wide = torch.full((3, i["bt"].shape[1] + 5), -1, dtype=torch.int32)
    wide[:, : i["bt"].shape[1]] = i["bt"]
    table = wide[:, : i["bt"].shape[1]]
    assert table.stride(0) != table.shape[1]
    for form in ("seq", "rows", "flat"):
        lens = _lens(i["ctx"], 2, form)
        sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 8)
        out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, table, sched, i["max_len"],
                                            clean_logits=True)
        torch.testing.assert_close(out, _reference(i, 2), rtol=1e-4, atol=1e-3)


# --- smaller ones -------------------------------------------------------------------

def test_rebuilt_schedule_error_is_translated(fake_release: Callable[[str], Any],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake_release("sgl-0.1.3")
    i = _inputs(2, 4, [100, 120])
    sched = R.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)  # foreign: dgcompat rebuilds its own

    def broken(*_a: Any, **_k: Any) -> Any:
        raise RuntimeError("Assertion error (attention.hpp): something the metadata kernel refuses")
    monkeypatch.setattr(mod, "get_paged_mqa_logits_metadata", broken)
    _tooling.rebind_indexer()
    with pytest.raises(dgcompat.KernelError, match="metadata kernel refuses"):
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])


def test_out_must_be_contiguous(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    ctx = torch.tensor([64, 100], dtype=torch.int32)
    wide = torch.zeros(5, 4, dtype=torch.int32)
    with pytest.raises(dgcompat.BadArgumentError, match="out"):
        dgcompat.get_paged_mqa_logits_metadata(ctx, BKV, 4, out=wide[:, ::2])


@pytest.mark.slow
def test_cache_holds_no_dead_batch(fake_release: Callable[[str], Any]) -> None:
    import gc

    fake_release("sgl-0.1.3")
    for seed in range(6):
        i = _inputs(4, 4, [300, 200, 100, 50], seed=seed)
        sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"],
                                      clean_logits=True)
        del i, sched
        gc.collect()
        # What was derived for a finished batch goes with its tensors; only the most recent plan (the
        # fast path's) keeps its own launch tensors until the next call.
        held = _tooling.indexer_state()
        assert held["derived"] == 0, f"{held['derived']} derived entries outlive their batch"
        assert held["schedules"] <= 1, "schedule records of finished batches are kept"
    assert _tooling.indexer_state()["derived_bytes"] == 0


@pytest.mark.slow
def test_cache_is_bounded_in_bytes(fake_release: Callable[[str], Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat.indexer import _cache
    from dgcompat.indexer._state import STATE

    fake_release("sgl-0.1.3")
    monkeypatch.setattr(_cache, "CACHE_BYTES", 4096)
    keep = []
    for seed in range(20):
        i = _inputs(8, 4, [300] * 8, seed=seed)
        sched = dgcompat.get_paged_mqa_logits_metadata(i["ctx"], BKV, 4)
        dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], sched, i["max_len"])
        keep.append((i, sched))
        assert STATE.derived_bytes <= 4096 + 8 * 4 * 8 * 4
    assert STATE.derived_bytes == sum(e[2] for e in STATE.derived.values())


@pytest.mark.parametrize("family", FAMILIES)
def test_indices_where_the_release_has_them(fake_release: Callable[[str], Any], family: str,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    mod = fake_release(family)
    i = _inputs(2, 2, [64, 100], per_row_bt=True)
    lens = _row_lens(i["ctx"], 2).view(-1, 1).contiguous()
    q = i["q"].view(4, 1, H, D)
    indices = torch.tensor([0, 0, 1, 1], dtype=torch.int32)
    if family == "bundled":
        with pytest.raises(dgcompat.UnsupportedFeatureError):
            dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 4, indices=indices)
        return
    seen: list[Any] = []
    real = mod.get_paged_mqa_logits_metadata
    monkeypatch.setattr(mod, "get_paged_mqa_logits_metadata",
                        lambda c, b, n, indices=None: seen.append(indices) or real(c, b, n, indices))
    _tooling.rebind_indexer()
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 4, indices=indices)
    assert seen and seen[-1] is indices
    out = dgcompat.fp8_paged_mqa_logits(q, i["kv"], i["w"], lens, i["bt"], sched, i["max_len"], indices=indices,
                                        clean_logits=True)
    ref = R.fp8_paged_mqa_logits(q, i["kv"], i["w"], lens, i["bt"], None, i["max_len"], True)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-3)
    with pytest.raises(dgcompat.BadArgumentError, match="indices"):
        dgcompat.fp8_paged_mqa_logits(q, i["kv"], i["w"], lens, i["bt"], sched, i["max_len"],
                                      indices=indices[:3].contiguous())


@pytest.mark.parametrize("family", FAMILIES)
def test_mqa_clean_with_max_seqlen_k_everywhere(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    g = torch.Generator().manual_seed(3)
    q = torch.randn(3, 32, D, generator=g).to(torch.float8_e4m3fn)
    k = torch.randn(40, D, generator=g).to(torch.float8_e4m3fn)
    sf = torch.rand(40, generator=g) + 0.5
    w = torch.rand(3, 32, generator=g)
    ks_ = torch.tensor([0, 5, 30], dtype=torch.int32)
    ke_ = torch.tensor([10, 25, 40], dtype=torch.int32)
    with pytest.raises(dgcompat.BadArgumentError, match="max_seqlen_k"):
        dgcompat.fp8_mqa_logits(q, (k, sf), w, ks_, ke_, max_seqlen_k=-1)
    if family == "bundled":
        with pytest.raises(dgcompat.UnsupportedFeatureError):
            dgcompat.fp8_mqa_logits(q, (k, sf), w, ks_, ke_, clean_logits=True, max_seqlen_k=20)
        return
    out = dgcompat.fp8_mqa_logits(q, (k, sf), w, ks_, ke_, clean_logits=True, max_seqlen_k=20)
    ref = R.fp8_mqa_logits(q, (k, sf), w, ks_, ke_, False, 20)
    valid = torch.arange(20).view(1, -1) < (ke_ - ks_).view(-1, 1)
    torch.testing.assert_close(out[valid], ref[valid], rtol=1e-4, atol=1e-3)
    assert torch.isneginf(out[~valid]).all()


@pytest.mark.parametrize("family", ["sgl-0.1.3", "bundled"])
def test_repeat_call_on_the_plain_launch_translates_upstream_failures(fake_release: Callable[[str], Any],
                                                                    family: str,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The common native plan is launched by the public function itself on a repeat call; what upstream
    # raises there is still a KernelError, on the first failing call and on the next one.
    mod = fake_release(family)
    name = "fp8_paged_mqa_logits" if hasattr(mod, "fp8_paged_mqa_logits") else "fp8_fp4_paged_mqa_logits"
    real = getattr(mod, name)
    failing = [False]

    def flaky(*args: Any, **kwargs: Any) -> Any:
        if failing[0]:
            raise RuntimeError("Assertion error (paged_mqa_logits.hpp): something the kernel refuses")
        return real(*args, **kwargs)
    monkeypatch.setattr(mod, name, flaky)
    _tooling.rebind_indexer()
    i = _inputs(2, 2, [64, 100])
    lens = _lens(i["ctx"], 2, "seq" if family == "bundled" else "rows")
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 4)
    first = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])
    plan = _tooling.last_paged_plan()
    assert plan is not None and plan[-1] is not None, "expected the plain native plan"
    again = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])
    torch.testing.assert_close(again, first)
    failing[0] = True
    for _ in range(2):
        with pytest.raises(dgcompat.KernelError, match="something the kernel refuses"):
            dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])


# --- lengths that are views of one persistent buffer (one buffer sized for the largest batch) ------------

class _ViewBuffers:
    """An engine's persistent buffers sized for the largest batch; each batch size launches views of them."""

    def __init__(self, max_b: int, n: int, form: str, max_blocks: int) -> None:
        self.n, self.form = n, form
        rows = max_b * n
        lens_shape = {"seq": (max_b,), "rows": (max_b, n), "flat": (rows, 1)}[form]
        self.lens = torch.ones(lens_shape, dtype=torch.int32)
        self.bt = torch.zeros(max_b, max_blocks, dtype=torch.int32)
        self.max_len = max_blocks * BKV

    def lens_view(self, b: int) -> torch.Tensor:
        return self.lens[: b * self.n] if self.form == "flat" else self.lens[:b]

    def write(self, batch: dict[str, Any]) -> None:
        """Write a batch of ``b`` sequences into the first rows of the buffers (the other rows stay as they are)."""
        b = batch["q"].shape[0]
        self.lens_view(b).copy_(_lens(batch["ctx"], self.n, self.form))
        self.bt[:b].zero_()
        self.bt[:b, :batch["bt"].shape[1]].copy_(batch["bt"])

    def launch(self, batch: dict[str, Any], sched: torch.Tensor) -> torch.Tensor:
        b = batch["q"].shape[0]
        return dgcompat.fp8_paged_mqa_logits(batch["q"], batch["kv"], batch["w"], self.lens_view(b), self.bt[:b],
                                             sched, self.max_len, clean_logits=True)


@pytest.mark.parametrize(("family", "n", "form"), grid(FAMILIES, [4, 1, 2], ["flat", "seq", "rows"], full=0))
def test_lengths_views_of_a_persistent_buffer_eager(fake_release: Callable[[str], Any], family: str, n: int,
                                                    form: str) -> None:
    # Schedule built from buf[:B]; the buffer's other rows written for another batch size: the rows this call
    # reads did not change, and the call must launch (correctly), every time, as must a call after its own
    # rows were rewritten without a refresh (dgcompat derives the schedule from the launch lengths).
    mod = fake_release(family)
    batches = _batches(3, n, 3, seed=200 + n)
    other = _batches(5, n, 1, seed=300 + n)[0]
    kv = max((x["kv"] for x in (*batches, other)), key=lambda t: t.shape[0])
    for x in (*batches, other):
        x["kv"] = kv
    buf = _ViewBuffers(8, n, form, 300 // BKV + 1)
    buf.write(batches[0])
    sched = dgcompat.get_paged_mqa_logits_metadata(buf.lens_view(3), BKV, 8)
    out = buf.launch(batches[0], sched)
    torch.testing.assert_close(out, _expect(batches[0], n, buf.max_len), rtol=1e-4, atol=1e-3)
    # Another batch size's rows (3..7 of the same storage) are written: rows 0..2 are unchanged.
    rows = 3 * n if form == "flat" else 3
    buf.lens[rows:].fill_(7)
    buf.bt[3:].fill_(1)
    for _ in range(2):
        launches = len(mod.LAUNCHES)
        out = buf.launch(batches[0], sched)
        assert len(mod.LAUNCHES) == launches + 1
        torch.testing.assert_close(out, _expect(batches[0], n, buf.max_len), rtol=1e-4, atol=1e-3)
    # The call's own rows rewritten, schedule not refreshed: still the new batch's logits (derived schedule).
    buf.write(batches[1])
    torch.testing.assert_close(buf.launch(batches[1], sched), _expect(batches[1], n, buf.max_len),
                               rtol=1e-4, atol=1e-3)
    # A larger batch over the same storage, with its own schedule, then the small one again.
    buf.write(other)
    sched5 = dgcompat.get_paged_mqa_logits_metadata(buf.lens_view(5), BKV, 8)
    torch.testing.assert_close(buf.launch(other, sched5), _expect(other, n, buf.max_len), rtol=1e-4, atol=1e-3)
    buf.write(batches[2])
    torch.testing.assert_close(buf.launch(batches[2], sched), _expect(batches[2], n, buf.max_len),
                               rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize(("family", "n", "form"), grid(FAMILIES, [2, 1, 4], ["rows", "seq", "flat"], full=0))
def test_lengths_views_of_a_persistent_buffer_replay(fake_release: Callable[[str], Any], family: str, n: int,
                                                     form: str) -> None:
    # Graphs for several batch sizes captured over views of one buffer, then replayed with new inputs
    # written into the buffer (each replay writes only its own rows; the other graphs' rows change too).
    from dgcompat_conformance.gpu.graphsim import Graph

    mod = fake_release(family)
    sizes = (1, 3, 6)
    buf = _ViewBuffers(8, n, form, 300 // BKV + 1)
    kv = R.pack_kv_cache(torch.randn(8 * (300 // BKV + 1), BKV, D, generator=torch.Generator().manual_seed(1)))
    state: dict[int, dict[str, Any]] = {}
    for b in sizes:
        first = _batch(b, n, seed=400 + b)
        first["kv"] = kv
        static = {"q": first["q"].clone(), "w": first["w"].clone(), "kv": kv}
        buf.write(first)
        sched = torch.zeros(9, 2, dtype=torch.int32)
        dgcompat.get_paged_mqa_logits_metadata(buf.lens_view(b), BKV, 8, out=sched)
        buf.launch(static | {"bt": first["bt"]}, sched)  # eager warm-up on the same buffers
        graph = Graph()
        with graph.capture(mod):
            out = buf.launch(static | {"bt": first["bt"]}, sched)
        torch.testing.assert_close(out, _expect(first, n, buf.max_len), rtol=1e-4, atol=1e-3)
        state[b] = {"graph": graph, "out": out, "static": static, "sched": sched}
    for step in range(3):
        for b in sizes:
            batch = _batch(b, n, seed=500 + 10 * step + b)
            batch["kv"] = kv
            s = state[b]
            s["static"]["q"].copy_(batch["q"])
            s["static"]["w"].copy_(batch["w"])
            buf.write(batch)  # rows of this batch size only; the schedule buffer is not refreshed
            s["graph"].replay()
            torch.testing.assert_close(s["out"], _expect(batch, n, buf.max_len), rtol=1e-4, atol=1e-3,
                                       msg=lambda m: f"replay of batch size {b}, step {step}: {m}")  # noqa: B023 - checked now


@pytest.mark.parametrize("family", FAMILIES)
def test_a_really_stale_schedule_says_why_it_is_not_rebuilt(fake_release: Callable[[str], Any],
                                                            family: str) -> None:
    fake_release(family)
    i = _inputs(2, 1, [64, 100])
    lens = i["ctx"].view(-1, 1).contiguous()
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV, 4)
    lens.copy_(torch.tensor([[30], [20]], dtype=torch.int32))
    for _ in range(2):
        with pytest.raises(dgcompat.ScheduleMismatchError, match="does not rebuild it here"):
            dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])
