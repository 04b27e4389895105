"""Generated calls, valid and invalid, for the stable entry points (shared by the conformance suite
and dgcompat's own property tests).

Every call must either compute the reference result or raise a :class:`dgcompat.DgcompatError`:
never another exception type, never a hang. Strategies are bounded (tiny shapes) and label every
draw; ``COUNTS`` tallies outcomes per entry point so a run can report how many calls it made.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import given
from hypothesis import settings as Settings
from hypothesis import strategies as st

from dgcompat import reference as R
from dgcompat.errors import DgcompatError, ScheduleMismatchError

COUNTS: Counter[str] = Counter()


def _outcome(label: str, call: Callable[[], Any], check: Callable[[Any], None]) -> None:
    """Run ``call``; a dgcompat error is an accepted outcome, anything else must pass ``check``."""
    try:
        result = call()
    except DgcompatError:
        COUNTS[f"{label}:error"] += 1
        return
    check(result)
    COUNTS[f"{label}:ok"] += 1


MUTATIONS_GEMM = ["none", "bare_a", "wrong_d_shape", "wrong_d_rank", "k_mismatch", "a_not_fp8", "scale_shape",
                  "none_d"]


@st.composite
def gemm_calls(draw: st.DrawFn) -> dict[str, Any]:
    m = draw(st.integers(1, 8), label="m")
    n = draw(st.sampled_from([128, 256]), label="n")
    k = draw(st.sampled_from([128, 256]), label="k")
    seed = draw(st.integers(0, 2**16), label="seed")
    mutation = draw(st.sampled_from(MUTATIONS_GEMM), label="mutation")
    return {"m": m, "n": n, "k": k, "seed": seed, "mutation": mutation}


def check_fp8_gemm(dg: Any, backend: str, call: dict[str, Any]) -> None:
    """One generated ``fp8_gemm_nt`` call: the reference result or a dgcompat error."""
    g = torch.Generator().manual_seed(call["seed"])
    m, n, k, mut = call["m"], call["n"], call["k"], call["mutation"]
    a, b = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g)
    aq, bq = R.per_token_cast_to_fp8(a), R.per_block_cast_to_fp8(b)
    d: Any = torch.zeros(m, n, dtype=torch.bfloat16)
    args: list[Any] = [aq, bq, d]
    if mut == "bare_a":
        args[0] = aq[0]
    elif mut == "wrong_d_shape":
        args[2] = torch.zeros(m, n + 64, dtype=torch.bfloat16)
    elif mut == "wrong_d_rank":
        args[2] = torch.zeros(1, m, n, dtype=torch.bfloat16)
    elif mut == "k_mismatch":
        args[1] = (bq[0][:, :64].contiguous(), bq[1])
    elif mut == "a_not_fp8":
        args[0] = (a, aq[1])
    elif mut == "scale_shape":
        args[0] = (aq[0], aq[1][:, :1].contiguous())
    elif mut == "none_d":
        args[2] = None

    def check(_res: Any) -> None:
        ref = torch.zeros(m, n, dtype=torch.bfloat16)
        R.fp8_gemm_nt(aq, bq, ref)
        # A mutated call may only succeed if it still computed the reference result.
        torch.testing.assert_close(args[2], ref)

    if mut == "none":
        dg.fp8_gemm_nt(*args)
        check(None)
        COUNTS[f"fp8_gemm_nt[{backend}]:ok"] += 1
        return
    _outcome(f"fp8_gemm_nt[{backend}]", lambda: dg.fp8_gemm_nt(*args), check)


MUTATIONS_PAGED = ["none", "lens_int64", "lens_noncontig", "stale", "foreign", "other_lens", "q_fp32",
                   "weights_rows", "max_len_big", "bt_int64", "clean_not_bool", "kv_last_dim", "weights_fp16",
                   "q_heads"]
#: How the next batch is written into the same buffers before the repeat call.
REFRESHES_PAGED = ["none", "out", "sglang", "vllm", "fresh"]


@st.composite
def paged_calls(draw: st.DrawFn) -> dict[str, Any]:
    b = draw(st.integers(1, 4), label="batch")
    n = draw(st.integers(1, 4), label="next_n")
    ctx = draw(st.lists(st.integers(0, 200), min_size=b, max_size=b), label="context_lens")
    nxt = draw(st.lists(st.integers(0, 200), min_size=b, max_size=b), label="next_context_lens")
    form = draw(st.sampled_from(["seq", "rows", "flat"]), label="lens_form")
    # Row lengths of 2-D forms: causal (ctx - n + 1 + j), all equal to ctx, or arbitrary <= ctx.
    rows_rule = draw(st.sampled_from(["causal", "equal", "any"]), label="row_lengths")
    table = draw(st.sampled_from(["per_seq", "per_row", "per_row_distinct"]), label="block_table")
    pad_blocks = draw(st.integers(0, 2), label="padded_table_columns")
    clean = draw(st.booleans(), label="clean_logits")
    mutation = draw(st.sampled_from(MUTATIONS_PAGED), label="mutation")
    refresh = draw(st.sampled_from(REFRESHES_PAGED), label="next_batch_refresh")
    seed = draw(st.integers(0, 2**16), label="seed")
    return {"b": b, "n": n, "ctx": ctx, "next": nxt, "form": form, "rows_rule": rows_rule, "table": table,
            "pad": pad_blocks, "clean": clean, "mutation": mutation, "refresh": refresh, "seed": seed}


def _paged_batch(call: dict[str, Any], ctx_list: list[int], g: torch.Generator, kv_blocks: int,
                 blocks: int) -> dict[str, Any]:
    """One batch of a generated paged call: the lengths in the call's form and its per-row truth."""
    b, n = call["b"], call["n"]
    h, d = 32, 128
    ctx = torch.tensor(ctx_list, dtype=torch.int32)
    j = torch.arange(n, dtype=torch.int32)
    if call["form"] == "seq" or call["rows_rule"] == "causal":
        rows = ctx.view(-1, 1) - n + 1 + j
    elif call["rows_rule"] == "equal":
        rows = ctx.view(-1, 1).expand(b, n)
    else:
        rows = (torch.rand(b, n, generator=g) * (ctx.view(-1, 1) + 1)).to(torch.int32)
    rows = rows.clamp(min=0).contiguous()
    lens = {"seq": ctx, "rows": rows, "flat": rows.view(-1, 1)}[call["form"]].contiguous()
    seq_table = torch.randperm(kv_blocks, generator=g)[: b * blocks].to(torch.int32).view(b, blocks)
    if call["table"] == "per_seq":
        table = seq_table
    elif call["table"] == "per_row":
        table = seq_table.repeat_interleave(n, 0)
    else:  # every query row its own pages
        table = torch.randperm(kv_blocks, generator=g)[: b * n * blocks].to(torch.int32).view(b * n, blocks) \
            if kv_blocks >= b * n * blocks else seq_table.repeat_interleave(n, 0).roll(1, 0)
    per_row_table = table if table.shape[0] == b * n else table.repeat_interleave(n, 0)
    if call["pad"]:  # columns past what any row needs, holding ids that must never be read
        table = torch.cat([table, torch.full((table.shape[0], call["pad"]), -1, dtype=torch.int32)], 1)
    return {"lens": lens, "rows": rows.reshape(-1), "table": table, "per_row_table": per_row_table,
            "q": torch.randn(b, n, h, d, generator=g).to(torch.float8_e4m3fn), "w": torch.rand(b * n, h, generator=g)}


def _paged_reference(x: dict[str, Any], kv: Any, b: int, n: int, max_len: int) -> Any:
    q = x["q"].view(b * n, 1, x["q"].shape[2], x["q"].shape[3])
    return R.fp8_paged_mqa_logits(q, kv, x["w"], x["rows"].view(-1, 1).contiguous(), x["per_row_table"], None,
                                  max_len, True)


def check_paged(dg: Any, backend: str, call: dict[str, Any]) -> None:
    """One generated paged-MQA call (metadata + logits), then the next batch written into the same
    buffers the way an engine does and the call repeated: the reference result or a dgcompat error;
    a schedule that does not belong to the lengths must never be launched (the stand-ins and fakes
    raise a hang for that, which is not a dgcompat error and fails the run)."""

    g = torch.Generator().manual_seed(call["seed"])
    b, n, mut = call["b"], call["n"], call["mutation"]
    bkv = 64
    blocks = max(1, -(-max(call["ctx"] + call["next"]) // bkv))
    kv_blocks = b * n * blocks + 1
    kv = R.pack_kv_cache(torch.randn(kv_blocks, bkv, 128, generator=g))
    max_len = blocks * bkv
    x = _paged_batch(call, call["ctx"], g, kv_blocks, blocks)
    lens, table = x["lens"], x["table"]
    sched = dg.get_paged_mqa_logits_metadata(lens, bkv)
    kwargs: dict[str, Any] = {"clean_logits": call["clean"]}
    args: list[Any] = [x["q"], kv, x["w"], lens, table, sched, max_len]
    must_compute = mut in ("none", "foreign", "other_lens")
    if mut == "lens_int64":
        args[3] = lens.to(torch.int64)
    elif mut == "lens_noncontig":
        wide = torch.stack([lens.reshape(-1), lens.reshape(-1)], 1)
        args[3] = wide[:, 0].view(lens.shape) if lens.dim() == 1 else wide[:, 0]
    elif mut == "stale":
        lens.add_(0)  # any in-place write makes the schedule dgcompat built stale
    elif mut == "foreign":
        args[5] = R.get_paged_mqa_logits_metadata(lens.clamp(min=0) + 64, bkv, dg.get_num_sms())
    elif mut == "other_lens":
        args[3] = lens.clone()
    elif mut == "q_fp32":
        args[0] = x["q"].float()
    elif mut == "weights_rows":
        args[2] = torch.rand(b * n + 1, x["w"].shape[1])
    elif mut == "max_len_big":
        args[6] = max_len + bkv * (call["pad"] + 1)
    elif mut == "bt_int64":
        args[4] = table.long()
    elif mut == "clean_not_bool":
        kwargs["clean_logits"] = 1
    elif mut == "kv_last_dim":
        args[1] = kv[..., :-1]
    elif mut == "weights_fp16":
        args[2] = x["w"].half()
    elif mut == "q_heads":
        args[0] = x["q"][:, :, :16].contiguous()

    def check(out: Any, batch: dict[str, Any]) -> None:
        assert mut != "stale", "a stale schedule was launched"
        ref = _paged_reference(batch, kv, b, n, max_len)
        assert out.shape == ref.shape, (tuple(out.shape), tuple(ref.shape))
        valid = torch.arange(max_len).view(1, -1) < batch["rows"].view(-1, 1)
        torch.testing.assert_close(out[valid], ref[valid], rtol=1e-4, atol=1e-3)
        if call["clean"]:
            assert torch.isneginf(out[~valid]).all(), "clean_logits=True must leave -inf past each row's length"

    label = f"fp8_paged_mqa_logits[{backend}]"
    if must_compute:
        # A valid call (or one whose schedule dgcompat must replace) computes; an error would hide a bug.
        check(dg.fp8_paged_mqa_logits(*args, **kwargs), x)
        COUNTS[f"{label}:ok"] += 1
    else:
        _outcome(label, lambda: dg.fp8_paged_mqa_logits(*args, **kwargs), lambda out: check(out, x))
        return
    # The repeat call: the next batch written into the very buffers (in place), refreshed as `refresh` says.
    y = _paged_batch(call, call["next"], g, kv_blocks, blocks)
    launch_lens, launch_sched = args[3], args[5]
    refresh = call["refresh"]
    q_buf, w_buf = x["q"], x["w"]
    q_buf.copy_(y["q"])
    w_buf.copy_(y["w"])
    table.copy_(y["table"])
    if refresh == "fresh":
        launch_lens = y["lens"]
        launch_sched = dg.get_paged_mqa_logits_metadata(launch_lens, bkv)
    elif refresh == "sglang":
        launch_sched = launch_sched.clone()
        launch_sched.copy_(dg.get_paged_mqa_logits_metadata(y["lens"].clone(), bkv))
        launch_lens.copy_(y["lens"])
    else:
        launch_lens.copy_(y["lens"])
        if refresh == "out" and launch_sched.shape[0] == dg.get_num_sms() + 1:
            dg.get_paged_mqa_logits_metadata(launch_lens, bkv, out=launch_sched)
        elif refresh == "vllm":
            launch_sched[:] = dg.get_paged_mqa_logits_metadata(launch_lens, bkv)
    repeat = [q_buf, kv, w_buf, launch_lens, table, launch_sched, max_len]
    stale_possible = refresh == "none" and mut == "none"  # dgcompat's own schedule, its lengths rewritten
    try:
        out = dg.fp8_paged_mqa_logits(*repeat, **kwargs)
    except ScheduleMismatchError:
        assert stale_possible, f"refresh {refresh!r} (mutation {mut!r}) was refused"
        COUNTS[f"{label}:repeat-refused"] += 1
        return
    assert not stale_possible, "lengths rewritten under dgcompat's schedule: launched without a refresh"
    check(out, y)
    COUNTS[f"{label}:repeat-ok"] += 1


MUTATIONS_GROUPED = ["none", "keyword", "indices_int64", "unaligned", "d_shape", "masked_int64", "expected_float"]


@st.composite
def grouped_calls(draw: st.DrawFn) -> dict[str, Any]:
    return {"groups": draw(st.integers(1, 3), label="groups"),
            "rows": draw(st.lists(st.integers(0, 2), min_size=3, max_size=3), label="aligned_blocks_per_group"),
            "masked": draw(st.lists(st.integers(0, 16), min_size=3, max_size=3), label="masked_m"),
            "mutation": draw(st.sampled_from(MUTATIONS_GROUPED), label="mutation"),
            "seed": draw(st.integers(0, 2**16), label="seed")}


def check_grouped(dg: Any, backend: str, call: dict[str, Any]) -> None:
    """Generated grouped contiguous and masked calls: the reference result or a dgcompat error."""
    g = torch.Generator().manual_seed(call["seed"])
    groups, mut = call["groups"], call["mutation"]
    n, k = 128, 128
    ids = torch.cat([torch.full((128 * call["rows"][i],), i, dtype=torch.int32) for i in range(groups)])
    m = ids.shape[0]
    aq = R.per_token_cast_to_fp8(torch.randn(m, k, generator=g))
    bs = [R.per_block_cast_to_fp8(torch.randn(n, k, generator=g)) for _ in range(groups)]
    bq = (torch.stack([x[0] for x in bs]), torch.stack([x[1] for x in bs]))
    d = torch.zeros(m, n, dtype=torch.bfloat16)
    args: list[Any] = [aq, bq, d, ids]
    kw: dict[str, Any] = {}
    if mut == "keyword":
        kw["m_indices"] = args.pop()
    elif mut == "indices_int64":
        args[3] = ids.long()
    elif mut == "unaligned" and m:
        args = [(aq[0][:-1], aq[1][:-1]), bq, d[:-1], ids[:-1]]
    elif mut == "d_shape":
        args[2] = torch.zeros(m, n + 1, dtype=torch.bfloat16)

    def check(_res: Any) -> None:
        ref = torch.zeros(m, n, dtype=torch.bfloat16)
        R.m_grouped_fp8_gemm_nt_contiguous(aq, bq, ref, ids)
        out = args[2] if mut != "unaligned" else d
        if mut == "unaligned" and m:
            torch.testing.assert_close(d[:-1], ref[:-1])
        else:
            torch.testing.assert_close(out, ref)

    if mut in ("none", "keyword"):
        dg.m_grouped_fp8_gemm_nt_contiguous(*args, **kw)  # valid: must compute, not raise
        check(None)
        COUNTS[f"m_grouped_fp8_gemm_nt_contiguous[{backend}]:ok"] += 1
    else:
        _outcome(f"m_grouped_fp8_gemm_nt_contiguous[{backend}]",
                 lambda: dg.m_grouped_fp8_gemm_nt_contiguous(*args, **kw), check)

    a3 = torch.randn(groups, 16, k, generator=g)
    aq3 = (torch.stack([R.per_token_cast_to_fp8(a3[i])[0] for i in range(groups)]),
           torch.stack([R.per_token_cast_to_fp8(a3[i])[1] for i in range(groups)]))
    masked = torch.tensor(call["masked"][:groups], dtype=torch.int32)
    d3 = torch.zeros(groups, 16, n, dtype=torch.bfloat16)
    margs: list[Any] = [aq3, bq, d3, masked, 8]
    if mut == "masked_int64":
        margs[3] = masked.long()
    elif mut == "expected_float":
        margs[4] = 8.5

    def mcheck(res: Any) -> None:
        assert res is None
        ref = torch.zeros_like(d3)
        R.m_grouped_fp8_gemm_nt_masked(aq3, bq, ref, masked, 8)
        torch.testing.assert_close(d3, ref)

    if mut not in ("masked_int64", "expected_float"):
        mcheck(dg.m_grouped_fp8_gemm_nt_masked(*margs))  # valid: must compute, not raise
        COUNTS[f"m_grouped_fp8_gemm_nt_masked[{backend}]:ok"] += 1
    else:
        _outcome(f"m_grouped_fp8_gemm_nt_masked[{backend}]", lambda: dg.m_grouped_fp8_gemm_nt_masked(*margs),
                 mcheck)


MUTATIONS_MQA = ["none", "ks_int64", "weights_heads", "kv_bare", "q_fp32", "ke_rows"]


@st.composite
def mqa_calls(draw: st.DrawFn) -> dict[str, Any]:
    nq = draw(st.integers(1, 6), label="queries")
    nk = draw(st.integers(1, 64), label="keys")
    starts = draw(st.lists(st.integers(0, nk - 1), min_size=nq, max_size=nq), label="ks")
    spans = draw(st.lists(st.integers(1, nk), min_size=nq, max_size=nq), label="spans")
    return {"nq": nq, "nk": nk, "ks": starts, "ke": [min(nk, s + w) for s, w in zip(starts, spans, strict=True)],
            "heads": draw(st.sampled_from([16, 32, 64]), label="heads"),
            "clean": draw(st.booleans(), label="clean_logits"),
            "mutation": draw(st.sampled_from(MUTATIONS_MQA), label="mutation"),
            "seed": draw(st.integers(0, 2**16), label="seed")}


def check_mqa(dg: Any, backend: str, call: dict[str, Any]) -> None:
    """One generated ragged ``fp8_mqa_logits`` call: the reference result or a dgcompat error."""
    g = torch.Generator().manual_seed(call["seed"])
    nq, nk, h, mut = call["nq"], call["nk"], call["heads"], call["mutation"]
    q = torch.randn(nq, h, 128, generator=g).to(torch.float8_e4m3fn)
    k = torch.randn(nk, 128, generator=g).to(torch.float8_e4m3fn)
    sf = torch.rand(nk, generator=g) + 0.5
    w = torch.rand(nq, h, generator=g)
    ks = torch.tensor(call["ks"], dtype=torch.int32)
    ke = torch.tensor(call["ke"], dtype=torch.int32)
    args: list[Any] = [q, (k, sf), w, ks, ke]
    if mut == "ks_int64":
        args[3] = ks.long()
    elif mut == "weights_heads":
        args[2] = torch.rand(nq, h + 1, generator=g)
    elif mut == "kv_bare":
        args[1] = k
    elif mut == "q_fp32":
        args[0] = q.float()
    elif mut == "ke_rows":
        args[4] = torch.cat([ke, ke])

    def check(out: Any) -> None:
        ref = R.fp8_mqa_logits(q, (k, sf), w, ks, ke, clean_logits=True)
        cols = torch.arange(nk).view(1, -1)
        valid = (cols >= ks.view(-1, 1)) & (cols < ke.view(-1, 1))
        assert tuple(out.shape) == (nq, nk), f"out.shape={tuple(out.shape)}, expected {(nq, nk)}"
        torch.testing.assert_close(out[valid], ref[valid], rtol=1e-4, atol=1e-3)
        if call["clean"]:
            assert torch.isneginf(out[~valid]).all(), "clean_logits=True must leave -inf outside [ks, ke)"

    label = f"fp8_mqa_logits[{backend}]"
    if mut == "none":
        check(dg.fp8_mqa_logits(*args, clean_logits=call["clean"]))
        COUNTS[f"{label}:ok"] += 1
        return
    _outcome(label, lambda: dg.fp8_mqa_logits(*args, clean_logits=call["clean"]), check)


MUTATIONS_SCALES = ["none", "sf_int32", "sf_rank", "recipe_len", "is_sfa_none"]


@st.composite
def scale_calls(draw: st.DrawFn) -> dict[str, Any]:
    return {"mn": draw(st.integers(1, 300), label="mn"),
            "k_blocks": draw(st.integers(1, 8), label="k_blocks"),
            "mutation": draw(st.sampled_from(MUTATIONS_SCALES), label="mutation"),
            "seed": draw(st.integers(0, 2**16), label="seed")}


def check_scales(dg: Any, backend: str, call: dict[str, Any]) -> None:
    """Generated scale-layout calls: values and TMA-aligned strides of the reference, or a dgcompat error."""
    g = torch.Generator().manual_seed(call["seed"])
    mn, kb, mut = call["mn"], call["k_blocks"], call["mutation"]
    sf = dg.ceil_to_ue8m0(torch.rand(mn, kb, generator=g) + 0.01)
    aligned = dg.get_tma_aligned_size(mn, 4)
    x: Any = sf
    if mut == "sf_int32":
        x = sf.view(torch.int32)
    elif mut == "sf_rank":
        x = sf.reshape(-1)

    def check_packed(out: Any) -> None:
        ref = R.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
        assert torch.equal(out, ref) and out.stride() == (1, aligned), (tuple(out.stride()), aligned)

    label = f"get_mn_major_tma_aligned_packed_ue8m0_tensor[{backend}]"
    if mut in ("sf_int32", "sf_rank"):
        _outcome(label, lambda: dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(x), check_packed)
    else:  # the other mutations concern the transform below; the packing gets a valid scale
        check_packed(dg.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf))
        COUNTS[f"{label}:ok"] += 1

    recipe: Any = (1, 128, 128)
    is_sfa: Any = True
    if mut == "recipe_len":
        recipe = (1, 128, 128, 1)
    elif mut == "is_sfa_none":
        is_sfa = None

    def check_transform(out: Any) -> None:
        ref = R.transform_sf_into_required_layout(sf, mn, kb * 128, (1, 128, 128), is_sfa=True)
        torch.testing.assert_close(out, ref)
        assert out.stride() == (1, aligned), (tuple(out.stride()), aligned)

    label = f"transform_sf_into_required_layout[{backend}]"
    # int32 input is a valid (already packed UE8M0) scale for the transform, so it gets the fp32 one.
    x_t = sf if mut == "sf_int32" else x
    call_t: Callable[[], Any] = lambda: dg.transform_sf_into_required_layout(x_t, mn, kb * 128, recipe, is_sfa=is_sfa)  # noqa: E731
    if mut in ("none", "sf_int32"):
        check_transform(call_t())
        COUNTS[f"{label}:ok"] += 1
    else:
        _outcome(label, call_t, check_transform)


#: entry point -> (strategy of generated calls, checker): what both property suites parametrize over.
ENTRY_POINTS: dict[str, tuple[Callable[[], Any], Callable[[Any, str, dict[str, Any]], None]]] = {
    "fp8_gemm_nt": (gemm_calls, check_fp8_gemm),
    "fp8_paged_mqa_logits": (paged_calls, check_paged),
    "grouped": (grouped_calls, check_grouped),
    "fp8_mqa_logits": (mqa_calls, check_mqa),
    "scales": (scale_calls, check_scales),
}


def run_generated(dg: Any, backend: str, entry: str, settings: Settings) -> tuple[int, Counter[str]]:
    """Throw ``settings.max_examples`` generated calls of ``entry`` at ``dg`` (labelled ``backend``) and check each.

    Returns the calls made and the outcomes they added to :data:`COUNTS` (``"<label>:ok"`` / ``"<label>:error"``):
    the caller asserts that every call ended in one of those two.
    """
    strategy, check = ENTRY_POINTS[entry]
    before = Counter(COUNTS)
    calls = 0

    @settings
    @given(data=st.data())
    def generated(data: st.DataObject) -> None:
        nonlocal calls
        call = data.draw(strategy(), label="call")
        calls += 1  # a draw hypothesis abandons is no call; each completed one must end in a counted outcome
        check(dg, backend, call)

    generated()
    return calls, COUNTS - before


def outcomes(ran: Counter[str]) -> Counter[str]:
    """``ok`` / ``error`` tallies of a :func:`run_generated` result."""
    return Counter(key.rsplit(":", 1)[1] for key in ran.elements())
