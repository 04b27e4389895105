"""Every spelling upstream and engines use: each release's parameter names and positions, forward and back.

The call forms are derived from the releases' own signatures, recorded in ``docs/sources/signatures.json``
(the 21 sgl-deep-gemm wheels, the bundled copies, vLLM's vendored DeepGEMM 2.8.1), not from a list kept
here:

- **names**: every parameter name a release gives a function is accepted by the stable function as a
  keyword, except where a real signature cannot hold it: a required parameter followed by another
  required one cannot also be reached under a second keyword (``fused_kv_cache``, ``get_tma_aligned_size``'s
  ``mn``); those are positional in every release and engine;
- **positions**: where a release's parameter sits at the stable position of the same parameter (or one
  of its other names), a positional call binds it there; where releases disagree (a parameter inserted
  or moved), the stable function follows the newest release, and a call written positionally for the
  other order is refused with a typed error instead of being misread (checked on the calls below).

Then the call forms engines were seen to use are made on every release family of ``testsupport/fakes``.
"""

from __future__ import annotations

import inspect
import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

import dgcompat
from dgcompat import reference as R

ROOT = Path(__file__).resolve().parent.parent
SIGNATURES: dict[str, dict[str, list[list[str | None]]]] = json.loads(
    (ROOT / "docs" / "sources" / "signatures.json").read_text())["releases"]
FAMILIES = ["sgl-0.1.3", "sgl-0.2.5", "bundled", "up-2.8.1"]
FORMS = sorted({(rel, fn) for rel, fns in SIGNATURES.items() for fn in fns})


def _tiered(forms: list[tuple[str, str]]) -> list[Any]:
    """Every (release, function) form as a parameter; the fast tier takes each function once (the releases
    rotating) and each release at least once, the slow tier the rest."""
    by_fn: dict[str, list[str]] = {}
    for rel, fn in forms:
        by_fn.setdefault(fn, []).append(rel)
    fast = {(rels[i % len(rels)], fn) for i, (fn, rels) in enumerate(sorted(by_fn.items()))}
    fast |= {next(form for form in forms if form[0] == rel) for rel in {r for r, _f in forms} - {r for r, _f in fast}}
    return [pytest.param(rel, fn, id=f"{rel}:{fn}", marks=() if (rel, fn) in fast else (pytest.mark.slow,))
            for rel, fn in forms]


TIERED_FORMS = _tiered(FORMS)


def _stable(fn: str) -> inspect.Signature:
    return inspect.signature(getattr(dgcompat, fn))


def _positional(sig: inspect.Signature) -> list[str]:
    return [n for n, p in sig.parameters.items() if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD]


def _unholdable(sig: inspect.Signature, position: int) -> bool:
    """Whether the stable parameter at ``position`` is required with another required parameter after it."""
    params = list(sig.parameters.values())
    if position >= len(params) or params[position].default is not inspect.Parameter.empty:
        return False
    return any(p.default is inspect.Parameter.empty for p in params[position + 1:])


@pytest.mark.parametrize(("release", "fn"), TIERED_FORMS)
def test_every_name_of_the_release_is_a_keyword(release: str, fn: str) -> None:
    sig = _stable(fn)
    missing = []
    for i, (name, _default) in enumerate(SIGNATURES[release][fn]):
        if name is None or name in sig.parameters or _unholdable(sig, i):
            continue
        missing.append(name)
    assert missing == [], f"dgcompat.{fn}{sig} does not take {missing} ({release}'s names)"


def _names_at(fn: str) -> dict[int, set[str]]:
    """Position -> every name a release gives the parameter there."""
    out: dict[int, set[str]] = {}
    for fns in SIGNATURES.values():
        for i, (name, _d) in enumerate(fns.get(fn, ())):
            if name:
                out.setdefault(i, set()).add(name)
    return out


@pytest.mark.parametrize(("release", "fn"), TIERED_FORMS)
def test_positions_bind_as_the_release_binds_them(release: str, fn: str) -> None:
    """A positional call in the release's order binds each argument to that parameter, up to the first
    position where the release differs from the stable (newest) order."""
    sig = _stable(fn)
    order = _positional(sig)
    params = SIGNATURES[release][fn]
    for i, (name, _d) in enumerate(params):
        if name is None or i >= len(order):
            break
        stable_name = order[i]
        if stable_name == name:
            continue
        if name in sig.parameters:
            break  # the parameter moved: the stable order is the newest release's (see the calls below)
        # Another name of the same parameter: the keyword form takes it (checked above); positionally it binds
        # to the stable parameter at that position, which has to be the one the other releases name there.
        assert stable_name in _names_at(fn)[i] or name in sig.parameters, (release, fn, i, name, stable_name)
    sentinels = [object() for _ in params]
    bound = sig.bind_partial(*sentinels[:min(len(params), len(order))])
    assert list(bound.arguments) == order[:len(bound.arguments)]


def test_the_stable_order_is_the_newest_releases() -> None:
    for fn in sorted({f for fns in SIGNATURES.values() for f in fns}):
        newest = [SIGNATURES[r][fn] for r in ("vllm-0.33.0", "0.2.5") if fn in SIGNATURES[r]]
        if not newest:
            continue
        order = _positional(_stable(fn))
        theirs = [n for n, _d in newest[0]]
        alternatives = _names_at(fn)
        for i, name in enumerate(theirs):
            if i < len(order):
                assert order[i] == name or order[i] in alternatives[i], (fn, i, order[i], name)


# --- the call forms, on every release family ------------------------------------------------------

def _fp8(x: torch.Tensor, block: bool) -> tuple[torch.Tensor, torch.Tensor]:
    return R.per_block_cast_to_fp8(x) if block else R.per_token_cast_to_fp8(x)


@pytest.mark.parametrize("family", FAMILIES)
def test_grouped_layout_is_the_layout_parameter(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    g, m, n, k = 2, 128, 128, 128
    a = _fp8(torch.randn(g * m, k), False)
    b = (torch.stack([_fp8(torch.randn(n, k), True)[0] for _ in range(g)]),
         torch.stack([_fp8(torch.randn(n, k), True)[1] for _ in range(g)]))
    layout = torch.arange(g, dtype=torch.int32).repeat_interleave(m)
    by_position, by_keyword = torch.zeros(g * m, n, dtype=torch.bfloat16), torch.zeros(g * m, n, dtype=torch.bfloat16)
    for _ in range(2):
        dgcompat.m_grouped_fp8_gemm_nt_contiguous(a, b, by_position, layout)
        dgcompat.m_grouped_fp8_gemm_nt_contiguous(a, b, by_keyword, grouped_layout=layout)
        torch.testing.assert_close(by_keyword, by_position)
        dgcompat.m_grouped_fp8_gemm_nt_contiguous(a, b, by_keyword, m_indices=layout)
        torch.testing.assert_close(by_keyword, by_position)
        with pytest.raises(dgcompat.BadArgumentError, match="m_indices"):
            dgcompat.m_grouped_fp8_gemm_nt_contiguous(a, b, by_keyword, layout, grouped_layout=layout)
        with pytest.raises(dgcompat.BadArgumentError, match="m_indices"):
            dgcompat.m_grouped_fp8_gemm_nt_contiguous(a, b, by_keyword)
    if dgcompat.capabilities().bf16_grouped_contiguous:
        ab, bb = torch.randn(g * m, k, dtype=torch.bfloat16), torch.randn(g, n, k, dtype=torch.bfloat16)
        first, second = torch.zeros(g * m, n, dtype=torch.bfloat16), torch.zeros(g * m, n, dtype=torch.bfloat16)
        dgcompat.m_grouped_bf16_gemm_nt_contiguous(ab, bb, first, layout)
        dgcompat.m_grouped_bf16_gemm_nt_contiguous(ab, bb, second, grouped_layout=layout)
        torch.testing.assert_close(first, second)


@pytest.mark.parametrize("family", FAMILIES)
def test_a_positional_call_in_the_bundled_order_is_refused_not_misread(fake_release: Callable[[str], Any],
                                                                        family: str) -> None:
    # The bundled copies take (a, b, d, c, recipe, compiled_dims, disable_ue8m0_cast); the stable order is the
    # newest releases' (..., recipe, recipe_a, recipe_b, compiled_dims, ...).
    fake_release(family)
    a, b = _fp8(torch.randn(128, 128), False), _fp8(torch.randn(128, 128), True)
    d = torch.zeros(128, 128, dtype=torch.bfloat16)
    for _ in range(2):
        with pytest.raises(dgcompat.BadArgumentError, match="recipe_a") as info:
            dgcompat.fp8_gemm_nt(a, b, d, None, None, "nk", False)  # type: ignore[arg-type]
        assert "compiled_dims=" in str(info.value)
        with pytest.raises(dgcompat.BadArgumentError, match="recipe_a"):
            dgcompat.m_grouped_fp8_gemm_nt_masked((a[0].view(1, 128, 128), a[1].view(1, 128, 1)),
                                                  (b[0].view(1, 128, 128), b[1].view(1, 1, 1)),
                                                  d.view(1, 128, 128), torch.ones(1, dtype=torch.int32), 1,
                                                  None, "nk", False)  # type: ignore[arg-type]
    dgcompat.fp8_gemm_nt(a, b, d, None, None, compiled_dims="nk" if family != "bundled" else None)


def _ragged(seed: int = 0) -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(5, 32, 128, generator=g).to(torch.float8_e4m3fn)
    kv = (torch.randn(9, 128, generator=g).to(torch.float8_e4m3fn), torch.rand(9, generator=g) + 0.5)
    w = torch.rand(5, 32, generator=g)
    ks = torch.tensor([0, 1, 2, 0, 3], dtype=torch.int32)
    ke = torch.tensor([4, 5, 9, 9, 6], dtype=torch.int32)
    return q, kv, w, ks, ke


@pytest.mark.parametrize("family", FAMILIES)
def test_ragged_mqa_logits_in_every_releases_spelling(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    q, kv, w, ks, ke = _ragged()
    ref = R.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True)
    for _ in range(2):
        forms = [dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, True),  # clean_logits by position (0.x, bundled)
                 dgcompat.fp8_mqa_logits(q, kv, w, cu_seq_len_k_start=ks, cu_seq_len_k_end=ke, clean_logits=True),
                 dgcompat.fp8_mqa_logits(q=q, kv=kv, weights=w, ks=ks, ke=ke, clean_logits=True)]
        for out in forms:
            torch.testing.assert_close(out, ref)
        with pytest.raises(dgcompat.BadArgumentError, match="'ks'"):
            dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, cu_seq_len_k_start=ks)
        with pytest.raises(dgcompat.BadArgumentError, match="'ke'"):
            dgcompat.fp8_mqa_logits(q, kv, w, ks)


def _paged(b: int, n: int, ctx: list[int]) -> dict[str, Any]:
    g = torch.Generator().manual_seed(1)
    blocks = max(1, math.ceil(max(ctx) / 64))
    return {"q": torch.randn(b, n, 32, 128, generator=g).to(torch.float8_e4m3fn),
            "kv": R.pack_kv_cache(torch.randn(b * blocks, 64, 128, generator=g)),
            "w": torch.rand(b * n, 32, generator=g),
            "bt": torch.randperm(b * blocks, generator=g).to(torch.int32).view(b, blocks),
            "ctx": torch.tensor(ctx, dtype=torch.int32), "max_len": blocks * 64}


@pytest.mark.parametrize("family", FAMILIES)
def test_paged_mqa_logits_positional_clean_logits_and_indices(fake_release: Callable[[str], Any],
                                                              family: str) -> None:
    fake_release(family)
    i = _paged(2, 1, [70, 130])
    lens = i["ctx"].view(-1, 1).contiguous() if family != "bundled" else i["ctx"]
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, 64)
    ref = R.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], None, i["max_len"], clean_logits=True)
    for _ in range(2):
        out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"], True)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-3)
        out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"], True, None)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-3)
    if dgcompat.capabilities().paged_indices:
        flat = i["ctx"].view(-1, 1).contiguous()
        indices = torch.tensor([0, 1], dtype=torch.int32)
        positional = dgcompat.get_paged_mqa_logits_metadata(flat, 64, dgcompat.get_num_sms(), indices)
        keyword = dgcompat.get_paged_mqa_logits_metadata(flat, 64, indices=indices)
        torch.testing.assert_close(positional, keyword)


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("what", ["q", "weights", "kv_cache"])
def test_paged_mqa_logits_non_contiguous_inputs_name_the_argument(fake_release: Callable[[str], Any], family: str,
                                                                  what: str) -> None:
    fake_release(family)
    i = _paged(2, 2, [70, 130])
    lens = i["ctx"]
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, 64)
    q, w, kv = i["q"], i["w"], i["kv"]
    if what == "q":
        q = torch.empty(2, 32, 2, 128, dtype=q.dtype).transpose(1, 2)
        q.copy_(i["q"])
    elif what == "weights":
        w = torch.empty(32, 4).t()
        w.copy_(i["w"])
    else:
        kv = torch.empty(kv.shape[0], kv.shape[1], 1, kv.shape[3] + 4, dtype=kv.dtype)[..., :kv.shape[3]]
        kv.copy_(i["kv"])
    dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"])  # a plan first
    for _ in range(2):
        with pytest.raises(dgcompat.BadArgumentError) as info:
            dgcompat.fp8_paged_mqa_logits(q, kv, w, lens, i["bt"], sched, i["max_len"])
        assert info.value.argument == what


@pytest.mark.parametrize("family", FAMILIES)
def test_transform_sf_in_vllms_and_the_newest_spelling(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    sf = torch.rand(2, 256, 1) + 0.5
    # vLLM's call: a 2-element recipe, num_groups by position, no is_sfa.
    for _ in range(2):
        out = dgcompat.transform_sf_into_required_layout(sf, 256, 128, (1, 128), 2)
        ref = R.transform_sf_into_required_layout(sf, 256, 128, (1, 128), 2)
        torch.testing.assert_close(out, ref)
        out = dgcompat.transform_sf_into_required_layout(sf, 256, 128, (1, 128), 2, None, False, None)
        torch.testing.assert_close(out, ref)
    psum = torch.tensor([128, 256], dtype=torch.int32)
    if family in ("sgl-0.2.5", "up-2.8.1"):  # releases with the parameter get it
        dgcompat.transform_sf_into_required_layout(sf, 256, 128, (1, 128), 2, psum_layout=psum)
    else:
        with pytest.raises(dgcompat.UnsupportedFeatureError, match="psum_layout"):
            dgcompat.transform_sf_into_required_layout(sf, 256, 128, (1, 128), 2, psum_layout=psum)


@pytest.mark.parametrize("family", FAMILIES)
def test_layout_helpers_and_knobs_in_every_releases_spelling(fake_release: Callable[[str], Any],
                                                             family: str) -> None:
    fake_release(family)
    sf = torch.rand(100, 3)
    torch.testing.assert_close(dgcompat.get_mn_major_tma_aligned_tensor(a=sf), dgcompat.get_mn_major_tma_aligned_tensor(sf))
    with pytest.raises(dgcompat.BadArgumentError, match="'sf'"):
        dgcompat.get_mn_major_tma_aligned_tensor(sf, a=sf)
    pow2 = torch.full((100, 8), 0.5)
    packed = dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor(pow2)
    torch.testing.assert_close(dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor(a=pow2, psum_layout=None), packed)
    if dgcompat.capabilities().pdl is not None:
        assert dgcompat.set_pdl(enable=True) and dgcompat.get_pdl() is True
        assert dgcompat.set_pdl(new_enable_pdl=False) and dgcompat.get_pdl() is False
    for twice in ({"enabled": True, "new_enable_pdl": True}, {"enable": True, "enabled": False}):
        with pytest.raises(dgcompat.BadArgumentError, match="'enable'"):
            dgcompat.set_pdl(**twice)
