"""The indexer through dgcompat: ragged MQA logits, paged MQA logits and their schedule.

Every ``context_lens`` form (``(B,)``, ``(B, next_n)``, ``(B*next_n, 1)``), both block-table forms
(one row per sequence, one per query row) and ``next_n`` 1..4 must give the reference's logits on
every release, whatever the release takes natively; a schedule that does not belong to the
launched lengths must be refused with ScheduleMismatchError before anything is launched (on the
CPU tier the stand-in would otherwise raise StandInHang, which fails the test by itself).
"""

from __future__ import annotations

from typing import Any

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from dgcompat import reference
from dgcompat.errors import BadArgumentError, ScheduleMismatchError, UnsupportedFeatureError
from dgcompat_conformance.harness.session import current
from dgcompat_conformance.suite import _support as S

pytestmark = pytest.mark.stable

FORMS = ("1d", "2d", "flat")
TABLES = ("per_seq", "per_token")
SEED = st.integers(min_value=0, max_value=2**16)


def _no_new_hang(before: int) -> None:
    s = current()
    if s is not None:
        assert s.hang_count() == before, "a stand-in hang was raised (the real kernel would never return)"


def _hangs() -> int:
    s = current()
    return s.hang_count() if s is not None else 0


# --- ragged MQA logits -------------------------------------------------------------------------


def _mqa_inputs(nq: int, nk: int, heads: int, g: torch.Generator) -> dict[str, Any]:
    q = torch.randn((nq, heads, 128), generator=g).to(torch.float8_e4m3fn).to(S.device())
    k8, ksf = reference.per_token_cast_to_fp8(torch.randn((nk, 128), generator=g).to(S.device()))
    w = torch.rand((nq, heads), generator=g).to(S.device())
    ks = torch.randint(0, nk, (nq,), generator=g, dtype=torch.int32)
    span = torch.randint(1, nk + 1, (nq,), generator=g, dtype=torch.int32)
    ke = torch.minimum(ks + span, torch.tensor(nk, dtype=torch.int32))
    return {"q": q, "kv": (k8, ksf.view(-1).contiguous()), "weights": w, "ks": ks.to(S.device()),
            "ke": ke.to(S.device())}


@given(nq=st.integers(1, 16), nk=st.integers(1, 300), heads=st.sampled_from([16, 32, 64]), seed=SEED,
       clean=st.booleans())
def test_fp8_mqa_logits(dg: Any, nq: int, nk: int, heads: int, seed: int, clean: bool) -> None:
    x = _mqa_inputs(nq, nk, heads, S.gen(seed))
    out = dg.fp8_mqa_logits(x["q"], x["kv"], x["weights"], x["ks"], x["ke"], clean_logits=clean)
    want = reference.fp8_mqa_logits(x["q"], x["kv"], x["weights"], x["ks"], x["ke"], clean_logits=True)
    assert isinstance(out, torch.Tensor) and out.dtype == torch.float32 and tuple(out.shape) == (nq, nk)
    cols = torch.arange(nk, device=S.device())
    inside = (cols.unsqueeze(0) >= x["ks"].unsqueeze(1)) & (cols.unsqueeze(0) < x["ke"].unsqueeze(1))
    torch.testing.assert_close(out[inside].cpu(), want[inside].cpu(), atol=1e-3, rtol=1e-3)
    if clean:
        assert bool(torch.isneginf(out[~inside]).all()), "clean_logits=True must put -inf outside [ks, ke)"


@given(nq=st.integers(1, 8), nk=st.integers(8, 200), seed=SEED)
def test_fp8_mqa_logits_compressed(dg: Any, nq: int, nk: int, seed: int) -> None:
    x = _mqa_inputs(nq, nk, 32, S.gen(seed))
    width = int((x["ke"] - x["ks"]).max())
    try:
        out = dg.fp8_mqa_logits(x["q"], x["kv"], x["weights"], x["ks"], x["ke"], max_seqlen_k=width)
    except UnsupportedFeatureError:
        # docs/sources/wheel-matrix.md §1 item 2: the sglang-kernel 0.4.x copies have no max_seqlen_k at all; saying so
        # is the only acceptable failure, and only there.
        if S.release().dist != "sglang-kernel":
            raise
        return
    want = reference.fp8_mqa_logits(x["q"], x["kv"], x["weights"], x["ks"], x["ke"], max_seqlen_k=width)
    assert tuple(out.shape) == (nq, width)
    valid = torch.arange(width, device=S.device()).unsqueeze(0) < (x["ke"] - x["ks"]).unsqueeze(1)
    torch.testing.assert_close(out[valid].cpu(), want[valid].cpu(), atol=1e-3, rtol=1e-3)


def test_fp8_mqa_logits_rejects(dg: Any) -> None:
    x = _mqa_inputs(4, 64, 32, S.gen(1))
    with pytest.raises(BadArgumentError):
        dg.fp8_mqa_logits(x["q"], x["kv"], x["weights"], x["ks"].to(torch.int64), x["ke"])
    with pytest.raises(BadArgumentError):
        dg.fp8_mqa_logits(x["q"], x["kv"], x["weights"][:, :16], x["ks"], x["ke"])
    with pytest.raises(BadArgumentError):
        dg.fp8_mqa_logits(x["q"], x["kv"][0], x["weights"], x["ks"], x["ke"])


# --- paged MQA logits --------------------------------------------------------------------------


def _launch(dg: Any, case: S.PagedCase, form: str, table_form: str, *, clean: bool = False) -> torch.Tensor:
    lens = case.context_lens(form)
    table = case.block_table_for(table_form)
    schedule = dg.get_paged_mqa_logits_metadata(lens, 64)
    out: torch.Tensor = dg.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, table, schedule,
                                                case.max_context_len, clean_logits=clean)
    return out


def _expected(case: S.PagedCase) -> torch.Tensor:
    return reference.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, case.context_lens("2d"),
                                          case.block_table, None, case.max_context_len)


@pytest.mark.parametrize("next_n", [1, 2, 3, 4])
@pytest.mark.parametrize("table_form", TABLES)
@pytest.mark.parametrize("form", FORMS)
def test_paged_forms(dg: Any, form: str, table_form: str, next_n: int) -> None:
    before = _hangs()
    case = S.paged_case(3, next_n, [5, 130, 300], S.gen(100 + next_n))
    out = _launch(dg, case, form, table_form)
    assert out.dtype == torch.float32 and tuple(out.shape) == (3 * next_n, case.max_context_len)
    S.valid_close(out, _expected(case), case.row_lengths())
    _no_new_hang(before)


@given(batch=st.integers(1, 4), next_n=st.integers(1, 4), form=st.sampled_from(FORMS),
       table_form=st.sampled_from(TABLES), lens=st.lists(st.integers(1, 600), min_size=4, max_size=4), seed=SEED)
def test_paged_random(dg: Any, batch: int, next_n: int, form: str, table_form: str, lens: list[int],
                      seed: int) -> None:
    before = _hangs()
    lengths = [max(v, next_n) for v in lens[:batch]]
    case = S.paged_case(batch, next_n, lengths, S.gen(seed))
    out = _launch(dg, case, form, table_form)
    S.valid_close(out, _expected(case), case.row_lengths())
    _no_new_hang(before)


@pytest.mark.parametrize("form", FORMS)
def test_paged_clean_logits(dg: Any, form: str) -> None:
    case = S.paged_case(2, 2, [70, 257], S.gen(40))
    out = _launch(dg, case, form, "per_seq", clean=True)
    S.valid_close(out, _expected(case), case.row_lengths())
    cols = torch.arange(out.shape[1])
    beyond = cols.unsqueeze(0) >= case.row_lengths().cpu().unsqueeze(1)
    assert bool(torch.isneginf(out.cpu()[beyond]).all()), "clean_logits=True must put -inf past each row's length"


def test_paged_one_row_stride(dg: Any) -> None:
    case = S.paged_case(1, 1, [100], S.gen(41))
    out = _launch(dg, case, "2d", "per_seq")
    assert out.stride(0) % 4 == 0  # docs/sources/engine-usage.md §2.3: fused top-k needs a 4-aligned row stride


def test_paged_transposed_block_table(dg: Any) -> None:
    # docs/sources/upstream-history.md §4.1: a (B, 1) block table viewed from its transpose has stride(1) != 1 while
    # is_contiguous() is True; the kernels assert stride(1) == 1.
    case = S.paged_case(4, 1, [10, 20, 30, 40], S.gen(42))
    table = case.block_table.clone().as_strided((4, 1), (1, 4))
    assert table.is_contiguous() and table.stride(1) != 1
    lens = case.context_lens("2d")
    schedule = dg.get_paged_mqa_logits_metadata(lens, 64)
    out = dg.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, table, schedule, case.max_context_len)
    S.valid_close(out, _expected(case), case.row_lengths())


def test_paged_metadata(dg: Any) -> None:
    case = S.paged_case(3, 1, [1, 257, 600], S.gen(43))
    for form in FORMS:
        meta = dg.get_paged_mqa_logits_metadata(case.context_lens(form), 64)
        assert meta.dtype == torch.int32 and tuple(meta.shape) == (dg.get_num_sms() + 1, 2)
        meta8 = dg.get_paged_mqa_logits_metadata(case.context_lens(form), 64, 8)
        assert tuple(meta8.shape) == (9, 2)


def test_paged_metadata_refresh_in_place(dg: Any) -> None:
    before = _hangs()
    case = S.paged_case(2, 1, [100, 200], S.gen(44))
    lens = case.context_lens("2d")
    schedule = dg.get_paged_mqa_logits_metadata(lens, 64)
    address = schedule.data_ptr()
    lens.copy_(torch.tensor([[150], [250]], dtype=torch.int32))
    refreshed = dg.get_paged_mqa_logits_metadata(lens, 64, out=schedule)
    assert refreshed.data_ptr() == address
    case.lens_2d = lens
    out = dg.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, case.block_table, schedule,
                                  case.max_context_len)
    S.valid_close(out, _expected(case), case.row_lengths())
    _no_new_hang(before)


def test_paged_stale_schedule_is_refused(dg: Any) -> None:
    """The lengths a schedule dgcompat built were rewritten and nothing refreshed: refused, nothing launched."""

    before = _hangs()
    case = S.paged_case(2, 1, [40, 90], S.gen(45))
    lens = case.context_lens("2d")
    schedule = dg.get_paged_mqa_logits_metadata(lens, 64)
    # The CUDA-graph bug: new, longer lengths written into the buffer the schedule was built from.
    lens.copy_(torch.tensor([[500], [600]], dtype=torch.int32))
    with pytest.raises(ScheduleMismatchError):
        dg.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, case.block_table, schedule,
                                case.max_context_len)
    _no_new_hang(before)


@pytest.mark.parametrize("how", ["other_lens_tensor", "foreign_schedule", "schedule_rewritten", "sglang_copy",
                                 "vllm_slice_assign"])
def test_paged_schedule_not_belonging_is_replaced(dg: Any, how: str) -> None:
    """A schedule that does not provably belong to the launch lengths never reaches the kernel: dgcompat
    launches the schedule of those lengths (docs/sources/engine-usage.md: SGLang copies a fresh schedule into its
    buffer, vLLM assigns buffer[:] = metadata)."""

    before = _hangs()
    case = S.paged_case(2, 1, [40, 90], S.gen(45))
    lens = case.context_lens("2d")
    schedule = dg.get_paged_mqa_logits_metadata(lens, 64)
    if how == "other_lens_tensor":
        schedule = dg.get_paged_mqa_logits_metadata(torch.tensor([[500], [600]], dtype=torch.int32,
                                                                 device=S.device()), 64)
    elif how == "foreign_schedule":
        schedule = reference.get_paged_mqa_logits_metadata(lens + 300, 64, dg.get_num_sms())
    elif how == "schedule_rewritten":
        schedule.zero_()
    elif how == "sglang_copy":
        fresh = lens.clone()
        buffer = torch.zeros_like(schedule)
        buffer.copy_(dg.get_paged_mqa_logits_metadata(fresh, 64))
        lens.copy_(fresh)
        schedule = buffer
    elif how == "vllm_slice_assign":
        buffer = torch.zeros_like(schedule)
        buffer[:] = dg.get_paged_mqa_logits_metadata(lens, 64)
        schedule = buffer
    out = dg.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, case.block_table, schedule,
                                  case.max_context_len)
    S.valid_close(out, _expected(case), case.row_lengths())
    _no_new_hang(before)


@pytest.mark.parametrize("case_name", ["lens_int64", "lens_not_contiguous", "weights_shape", "bad_heads", "bt_int64"])
def test_paged_rejects(dg: Any, case_name: str) -> None:
    case = S.paged_case(2, 2, [70, 130], S.gen(46))
    lens, table, q, weights = case.context_lens("2d"), case.block_table, case.q, case.weights
    if case_name == "lens_int64":
        with pytest.raises(BadArgumentError):
            dg.get_paged_mqa_logits_metadata(lens.to(torch.int64), 64)
        return
    if case_name == "lens_not_contiguous":
        wide = torch.zeros((2, 4), dtype=torch.int32, device=S.device())
        wide[:, :2] = lens
        with pytest.raises(BadArgumentError):
            dg.get_paged_mqa_logits_metadata(wide[:, :2], 64)
        return
    schedule = dg.get_paged_mqa_logits_metadata(lens, 64)
    if case_name == "weights_shape":
        weights = weights[:, :16]
    elif case_name == "bad_heads":
        heads = dg.capabilities().paged_heads
        if not heads:
            pytest.skip("this release/arch has no head-count limit")
        bad = max(heads) * 2
        q = torch.zeros((2, 2, bad, 128), dtype=torch.float8_e4m3fn, device=S.device())
        weights = torch.zeros((4, bad), device=S.device())
    elif case_name == "bt_int64":
        table = table.to(torch.int64)
    with pytest.raises(BadArgumentError):
        dg.fp8_paged_mqa_logits(q, case.kv_cache, weights, lens, table, schedule, case.max_context_len)
