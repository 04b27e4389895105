"""``logits_dtype`` on dgcompat.fp8_mqa_logits: forwarded where the release's ``fp8_fp4_mqa_logits`` takes
it, float32 everywhere, a typed refusal naming the parameter and the release otherwise."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import dgcompat
from dgcompat import reference as R

D = 128


def _inputs() -> tuple[Any, ...]:
    g = torch.Generator().manual_seed(3)
    nq, nk, h = 5, 48, 32
    q = torch.randn(nq, h, D, generator=g).to(torch.float8_e4m3fn)
    k = torch.randn(nk, D, generator=g).to(torch.float8_e4m3fn)
    sf = torch.rand(nk, generator=g) + 0.5
    w = torch.rand(nq, h, generator=g)
    ks = torch.tensor([0, 4, 10, 10, 30], dtype=torch.int32)
    ke = torch.tensor([6, 20, 10, 40, 48], dtype=torch.int32)
    return q, (k, sf), w, ks, ke


def _valid(ks: Any, ke: Any, cols: int, compressed: bool) -> Any:
    c = torch.arange(cols).view(1, -1)
    return c < (ke - ks).view(-1, 1) if compressed else (c >= ks.view(-1, 1)) & (c < ke.view(-1, 1))


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "up-2.8.1", "bundled", "reference"])
def test_float32_is_the_default_call(fake_release: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                     family: str) -> None:
    fake_release(family)
    q, kv, w, ks, ke = _inputs()
    want = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True)
    got = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True, logits_dtype=torch.float32)
    assert got.dtype == torch.float32 and torch.equal(got, want)


@pytest.mark.parametrize("family", ["sgl-0.1.3", "up-2.8.1-logits-dtype"])
@pytest.mark.parametrize("max_seqlen_k", [None, 24])
@pytest.mark.parametrize("clean", [False, True])
def test_forwarded_where_the_release_has_it(fake_release: Callable[..., Any], family: str, max_seqlen_k: int | None,
                                            clean: bool) -> None:
    mod = fake_release(family)
    assert dgcompat.capabilities().mqa_logits_dtype == "fp8_fp4_mqa_logits"
    seen: list[Any] = []
    original = mod.fp8_fp4_mqa_logits

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("logits_dtype"))
        return original(*args, **kwargs)
    mod.fp8_fp4_mqa_logits = spy
    q, kv, w, ks, ke = _inputs()
    for _ in range(2):
        out = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=clean, max_seqlen_k=max_seqlen_k,
                                      logits_dtype=torch.bfloat16)
        ref = R.fp8_mqa_logits(q, kv, w, ks, ke, max_seqlen_k=max_seqlen_k)
        assert out.dtype == torch.bfloat16 and out.shape == ref.shape
        valid = _valid(ks, ke, out.shape[1], max_seqlen_k is not None)
        torch.testing.assert_close(out[valid].float(), ref[valid], rtol=1e-2, atol=5e-2)
        if clean:
            assert torch.isneginf(out[~valid]).all()
    assert seen == [torch.bfloat16, torch.bfloat16]


# (the bundled copies have no compressed layout: a typed refusal, tested elsewhere)
@pytest.mark.parametrize(("family", "max_seqlen_k"), [("sgl-0.2.5", None), ("sgl-0.2.5", 24), ("up-2.8.1", None),
                                                  ("up-2.8.1", 24), ("bundled", None)])
def test_converted_where_the_build_returns_float32_only(fake_release: Callable[..., Any], family: str,
                                                       max_seqlen_k: int | None) -> None:
    fake_release(family)
    assert dgcompat.capabilities().mqa_logits_dtype is None
    q, kv, w, ks, ke = _inputs()
    want = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True, max_seqlen_k=max_seqlen_k)
    for _ in range(2):  # every call, not only the first
        got = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True, max_seqlen_k=max_seqlen_k,
                                      logits_dtype=torch.bfloat16)
        assert got.dtype == torch.bfloat16 and torch.equal(got, want.to(torch.bfloat16))


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "up-2.8.1", "up-2.8.1-logits-dtype", "bundled",
                                    "reference"])
def test_bf16_weights_reduce_where_taken_and_are_upcast_elsewhere(fake_release: Callable[..., Any],
                                                                   family: str) -> None:
    fake_release(family)
    q, kv, w, ks, ke = _inputs()
    wb = w.to(torch.bfloat16)
    want = R.fp8_mqa_logits(q, kv, wb.float(), ks, ke, clean_logits=True)
    for dtype in (None, torch.float32, torch.bfloat16):
        got = dgcompat.fp8_mqa_logits(q, kv, wb, ks, ke, clean_logits=True, logits_dtype=dtype)
        assert got.dtype == (dtype or torch.float32)
        valid = _valid(ks, ke, got.shape[1], False)
        torch.testing.assert_close(got[valid].float(), want[valid], rtol=1e-2, atol=5e-2)
    with pytest.raises(dgcompat.BadArgumentError, match="logits_dtype"):
        dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, logits_dtype=torch.float16)


def test_two_builds_of_one_version_are_told_apart_by_their_signatures(fake_site: Callable[..., Any],
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from dgcompat import _backend
    from testsupport import fakes

    monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")
    monkeypatch.setenv("DGCOMPAT_ARCH", "sm90")
    labels, caps = [], []
    for family in ("up-2.8.1", "up-2.8.1-logits-dtype"):
        sys.modules.pop("deep_gemm", None)
        fake_site(*fakes.FAMILIES[family])
        before = dgcompat.capabilities()  # from the build's source: deep_gemm is not imported yet
        assert "deep_gemm" not in sys.modules
        _backend.load()
        after = dgcompat.capabilities()  # from the loaded functions
        for c in (before, after):
            assert c.sources["mqa_logits_dtype"] == c.sources["paged_logits_dtype"] == "signature"
            assert (c.mqa_logits_dtype, c.paged_logits_dtype) == (after.mqa_logits_dtype, after.paged_logits_dtype)
        labels.append(dgcompat.release().label)
        caps.append(after)
    assert (caps[0].mqa_logits_dtype, caps[0].paged_logits_dtype) == (None, None)
    assert (caps[1].mqa_logits_dtype, caps[1].paged_logits_dtype) == ("fp8_fp4_mqa_logits", "fp8_fp4_paged_mqa_logits")
    assert caps[0].indexer_weights == caps[1].indexer_weights == ("float32",)  # sm90
    assert labels[0] != labels[1] and all("surface" in label for label in labels)



def test_logits_dtype_must_be_a_dtype(fake_release: Callable[..., Any]) -> None:
    fake_release("sgl-0.1.3")
    q, kv, w, ks, ke = _inputs()
    for bad in ("bfloat16", 1, torch.zeros(1)):
        with pytest.raises(dgcompat.BadArgumentError, match="logits_dtype"):
            dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, logits_dtype=bad)  # type: ignore[arg-type]


def test_bad_input_with_logits_dtype_is_diagnosed(fake_release: Callable[..., Any]) -> None:
    fake_release("sgl-0.1.3")
    q, kv, w, ks, ke = _inputs()
    with pytest.raises(dgcompat.BadArgumentError, match="weights"):
        dgcompat.fp8_mqa_logits(q, kv, w[:, :4], ks, ke, logits_dtype=torch.bfloat16)
