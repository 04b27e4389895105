"""The indexer's per-architecture native contract through dgcompat (run with ``--arch sm90/sm100/sm120``).

On the CPU tier the stand-ins enforce the conditions read from the release's own host asserts
(``harness.indexer_rules``): MX scale factors and bf16 weights on SM100 for sgl-deep-gemm 0.2.5 and
upstream 2.8, the per-arch ``block_kv`` and head lists. dgcompat must keep its contract there
(FP8 q, float32 logits) by adapting, or refuse with a typed error that names what the release
requires; never let the release's assert through, never return a different result silently.
"""

from __future__ import annotations

from typing import Any

import pytest
import torch

import dgcompat
from dgcompat import reference
from dgcompat._tooling import unit_mx_scales
from dgcompat_conformance.suite import _support as S

pytestmark = pytest.mark.stable


def _caps() -> Any:
    return dgcompat.capabilities()


def _ragged(g: torch.Generator, *, nq: int = 6, nk: int = 90, heads: int = 32) -> dict[str, Any]:
    q = torch.randn((nq, heads, 128), generator=g).to(torch.float8_e4m3fn).to(S.device())
    k8, ksf = reference.per_token_cast_to_fp8(torch.randn((nk, 128), generator=g).to(S.device()))
    w = torch.rand((nq, heads), generator=g).to(S.device())
    ks = torch.tensor([0, 5, 10, 30, 44, 60][:nq], dtype=torch.int32).to(S.device())
    ke = torch.tensor([20, 40, 11, 80, 90, 61][:nq], dtype=torch.int32).to(S.device())
    return {"q": q, "kv": (k8, ksf.view(-1).contiguous()), "w": w, "ks": ks, "ke": ke}


def _expected(i: dict[str, Any], weights: torch.Tensor, *, max_seqlen_k: int | None) -> torch.Tensor:
    return reference.fp8_mqa_logits(i["q"], i["kv"], weights, i["ks"], i["ke"], clean_logits=max_seqlen_k is None,
                                    max_seqlen_k=max_seqlen_k)


def _in_range(i: dict[str, Any], cols: int, compressed: bool) -> torch.Tensor:
    c = torch.arange(cols).unsqueeze(0)
    ks, ke = i["ks"].cpu().unsqueeze(1), i["ke"].cpu().unsqueeze(1)
    valid: torch.Tensor = c < (ke - ks) if compressed else (c >= ks) & (c < ke)
    return valid


@pytest.mark.parametrize("max_seqlen_k", [None, 64])
def test_ragged_logits_keep_the_contract(dg: Any, max_seqlen_k: int | None) -> None:
    i = _ragged(S.gen(7))
    caps = _caps()
    clean = max_seqlen_k is None  # clean_logits is refused with the compressed layout
    if max_seqlen_k is not None and caps.mqa_max_seqlen_k == "absent":
        # the release has no compressed layout: a typed refusal naming the argument, on every call
        for _ in range(2):
            with pytest.raises(dg.UnsupportedFeatureError, match="max_seqlen_k"):
                dg.fp8_mqa_logits(i["q"], i["kv"], i["w"], i["ks"], i["ke"], max_seqlen_k=max_seqlen_k)
        return
    if caps.indexer_inputs == "mx-bf16":
        # float32 weights cannot be honoured: a typed refusal naming the requirement, on every call
        for _ in range(2):
            with pytest.raises(dg.UnsupportedFeatureError, match="bfloat16 weights"):
                dg.fp8_mqa_logits(i["q"], i["kv"], i["w"], i["ks"], i["ke"], max_seqlen_k=max_seqlen_k)
        w = i["w"].to(torch.bfloat16)
        out = dg.fp8_mqa_logits(i["q"], i["kv"], w, i["ks"], i["ke"], clean_logits=clean, max_seqlen_k=max_seqlen_k)
        ref = _expected(i, w.float(), max_seqlen_k=max_seqlen_k)
        atol, rtol = 5e-2, 1e-2  # the release returns bf16 logits
    else:
        out = dg.fp8_mqa_logits(i["q"], i["kv"], i["w"], i["ks"], i["ke"], clean_logits=clean,
                                max_seqlen_k=max_seqlen_k)
        ref = _expected(i, i["w"], max_seqlen_k=max_seqlen_k)
        atol, rtol = 1e-3, 1e-3
    assert out.dtype == torch.float32 and tuple(out.shape) == tuple(ref.shape)
    valid = _in_range(i, out.shape[1], max_seqlen_k is not None)
    torch.testing.assert_close(out.cpu()[valid], ref.cpu()[valid], atol=atol, rtol=rtol)
    if clean:
        assert bool(torch.isneginf(out.cpu()[~valid]).all())


def _check_paged(dg: Any, case: S.PagedCase, lens: torch.Tensor, schedule: torch.Tensor) -> None:
    """``fp8_paged_mqa_logits`` of ``case`` with ``lens`` and ``schedule`` equals the reference on valid rows."""
    out = dg.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, case.block_table, schedule,
                                  case.max_context_len)
    ref = reference.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, case.block_table, None,
                                         case.max_context_len)
    S.valid_close(out, ref, case.row_lengths())



def test_paged_logits_refused_or_correct(dg: Any) -> None:
    caps = _caps()
    case = S.paged_case(2, 1, [70, 130], S.gen(8))
    lens = case.context_lens("2d")
    schedule = dg.get_paged_mqa_logits_metadata(lens, 64)
    if caps.indexer_inputs == "mx-bf16":
        # what the release requires there, as its host asserts say, and what the call brings; every call
        for _ in range(2):
            with pytest.raises(dg.UnsupportedFeatureError) as info:
                dg.fp8_paged_mqa_logits(case.q, case.kv_cache, case.weights, lens, case.block_table, schedule,
                                        case.max_context_len)
            text = str(info.value)
            assert "UE8M0" in text and "bfloat16 weights" in text and "this call: " in text, text
            assert f"num_heads in {caps.paged_heads}" in text and f"block_kv in {caps.paged_block_kv}" in text, text
        return
    _check_paged(dg, case, lens, schedule)


def test_block_kv_outside_the_release_contract_is_a_typed_error(dg: Any) -> None:
    allowed = _caps().paged_block_kv
    if not allowed:
        pytest.skip("the table puts no block_kv condition on this release/architecture")
    wrong = next(b for b in (16, 512, 48) if b not in allowed)
    lens = torch.tensor([[10]], dtype=torch.int32).to(S.device())
    for _ in range(2):
        with pytest.raises(dg.BadArgumentError, match="block_kv"):
            dg.get_paged_mqa_logits_metadata(lens, wrong)


def test_every_block_kv_of_the_contract_computes(dg: Any) -> None:
    caps = _caps()
    if caps.indexer_inputs == "mx-bf16":
        pytest.skip("paged logits are refused under the MX contract (test_paged_logits_refused_or_correct)")
    for block_kv in caps.paged_block_kv or (64,):
        case = S.paged_case(2, 1, [40, 300], S.gen(9 + block_kv), block_kv=block_kv)
        lens = case.context_lens("2d")
        schedule = dg.get_paged_mqa_logits_metadata(lens, block_kv)
        _check_paged(dg, case, lens, schedule)


def test_raw_release_enforces_the_mx_contract(raw: Any) -> None:
    """The stand-in (or the real kernel) rejects what dgcompat refuses: the contract is really there."""
    caps = _caps()
    if caps.indexer_inputs != "mx-bf16":
        pytest.skip("no MX contract on this release/architecture")
    name = caps.mqa_logits
    i = _ragged(S.gen(10))
    with pytest.raises(RuntimeError, match=r"is_mx_sf|sf_q|kBFloat16"):
        getattr(raw, name)((i["q"], None), i["kv"], i["w"], i["ks"], i["ke"], 0)


def test_raw_release_enforces_positive_max_seqlen_k(raw: Any) -> None:
    """Where the release has only the compressed layout, its stand-in (or kernel) rejects max_seqlen_k=0,
    while dgcompat's uncompressed call (test_ragged_logits_keep_the_contract) is emulated."""
    caps = _caps()
    if caps.mqa_uncompressed != "emulated":
        pytest.skip("the release has the uncompressed layout")
    i = _ragged(S.gen(11))
    q_sf = None
    w = i["w"]
    kv = i["kv"]
    if caps.indexer_inputs == "mx-bf16":
        q_sf = unit_mx_scales(tuple(i["q"].shape[:2]), i["q"].device)
        kv = (kv[0], unit_mx_scales((int(kv[0].shape[0]),), kv[0].device))
        w = w.to(torch.bfloat16)
    with pytest.raises(RuntimeError, match=r"max_seqlen_k > 0"):
        getattr(raw, caps.mqa_logits)((i["q"], q_sf), kv, w, i["ks"], i["ke"], 0)
