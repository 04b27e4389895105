"""``logits_dtype`` on dgcompat.fp8_mqa_logits: forwarded where the release's ``fp8_fp4_mqa_logits`` takes
it, float32 everywhere, a typed refusal naming the parameter and the release otherwise."""

from __future__ import annotations

from typing import Any, Callable

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


@pytest.mark.parametrize("max_seqlen_k", [None, 24])
@pytest.mark.parametrize("clean", [False, True])
def test_forwarded_where_the_release_has_it(fake_release: Callable[..., Any], max_seqlen_k: int | None,
                                            clean: bool) -> None:
    mod = fake_release("sgl-0.1.3")
    assert dgcompat.capabilities().mqa_logits_dtype == "fp8_fp4_mqa_logits"
    seen: list[Any] = []
    original = mod.fp8_fp4_mqa_logits

    def spy(*args: Any) -> Any:
        seen.append(args[7])
        return original(*args)
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


@pytest.mark.parametrize("family, release", [("sgl-0.2.5", "0.2.5"), ("up-2.8.1", "2.8.1"), ("bundled", "0.4.1"),
                                             ("reference", "reference")])
def test_refused_where_float32_is_the_only_dtype(fake_release: Callable[..., Any], monkeypatch: pytest.MonkeyPatch,
                                                 family: str, release: str) -> None:
    fake_release(family)
    assert dgcompat.capabilities().mqa_logits_dtype is None
    q, kv, w, ks, ke = _inputs()
    for _ in range(2):  # every call, not only the first
        with pytest.raises(dgcompat.UnsupportedFeatureError, match=rf"logits_dtype=torch.bfloat16.*{release}"):
            dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, logits_dtype=torch.bfloat16)


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
