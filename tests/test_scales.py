"""Scale layouts and the TMA-stride repair."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch

import dgcompat
from dgcompat.scales import restore_tma_strides


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "bundled"])
@pytest.mark.parametrize("k", [128, 512, 1024])
def test_packed_ue8m0_keeps_tma_stride(fake_release: Callable[[str], Any], family: str, k: int) -> None:
    fake_release(family)
    mn = 100
    sf = dgcompat.ceil_to_ue8m0(torch.rand(mn, k // 128) + 0.1)
    out = dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    assert out.dtype == torch.int32 and out.shape == (mn, -(-(k // 128) // 4))
    assert out.stride() == (1, dgcompat.get_tma_aligned_size(mn, 4)), out.stride()


def test_transform_scale_ue8m0(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.1.3")
    sf = torch.rand(2, 4) + 0.1  # (ceil(200/128), k/128) with k = 512
    out = dgcompat.transform_scale_ue8m0(sf, 200)
    assert out.shape == (200, 1) and out.stride() == (1, 200)


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "bundled"])
def test_transform_sf(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    sf = torch.rand(64, 4)
    out = dgcompat.transform_sf_into_required_layout(sf, 64, 512, (1, 128, 128), is_sfa=True)
    torch.testing.assert_close(out, sf)
    assert out.stride() == (1, 64)


def test_restore_tma_strides_only_touches_size_one_dims() -> None:
    base = torch.empty(2 * 104, dtype=torch.int32)
    good = base.as_strided((102, 1), (1, 104))
    collapsed = base.as_strided((102, 1), (1, 1))
    assert restore_tma_strides(good) is good
    assert restore_tma_strides(collapsed).stride() == (1, 104)
    k_major = torch.empty(100, 3, dtype=torch.float32)  # a real (K-major) layout is left alone
    assert restore_tma_strides(k_major) is k_major


def test_tma_aligned_size() -> None:
    assert [dgcompat.get_tma_aligned_size(x, 4) for x in (0, 1, 4, 5)] == [0, 4, 4, 8]
    assert dgcompat.get_tma_aligned_size(3, 2) == 8
    with pytest.raises(dgcompat.BadArgumentError, match="element_size"):
        dgcompat.get_tma_aligned_size(3, 3)


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "bundled"])
def test_unchanged_block_scale_is_not_restrided(fake_release: Callable[[str], Any], family: str) -> None:
    # Seen on H200 (0.0.1-0.1.5.post1): a K=128 block scale of b, (2, 1) with strides (1, 1), comes back
    # as the same tensor; re-striding it to (1, 4) made the next fp8_gemm_nt assert.
    fake_release(family)
    sf = torch.rand(2, 1)
    out = dgcompat.transform_sf_into_required_layout(sf, 256, 128, (1, 128, 128), is_sfa=False)
    assert out.data_ptr() == sf.data_ptr() and out.stride() == sf.stride()


def test_ceil_to_ue8m0_has_the_engines_semantics(monkeypatch: pytest.MonkeyPatch) -> None:
    x = torch.tensor([0.0, 1e-40, -1e-40, 3e38, float("inf"), 1.0, 3.0, -0.3, 2.0**-126], dtype=torch.float32)
    got = dgcompat.ceil_to_ue8m0(x).tolist()
    assert got == [2.0**-126, 2.0**-126, 2.0**-126, 2.0**127, 2.0**127, 1.0, 4.0, 0.5, 2.0**-126]
    assert dgcompat.ceil_to_ue8m0(torch.tensor([3.0], dtype=torch.bfloat16)).dtype == torch.float32
    from dgcompat import _math, reference

    # One implementation in the project: the stable function and the reference both compute with _math's.
    calls: list[int] = []
    real = _math.ceil_to_ue8m0
    monkeypatch.setattr(_math, "ceil_to_ue8m0", lambda t: calls.append(1) or real(t))
    assert dgcompat.ceil_to_ue8m0(x).tolist() == reference.ceil_to_ue8m0(x).tolist() == got
    assert calls == [1, 1]
    with pytest.raises(dgcompat.BadArgumentError, match="floating-point"):
        reference.ceil_to_ue8m0(torch.tensor([1], dtype=torch.int32))
    with pytest.raises(dgcompat.BadArgumentError, match="floating-point"):
        dgcompat.ceil_to_ue8m0(torch.tensor([1], dtype=torch.int32))


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "bundled"])
def test_collapsed_strides_are_repaired_on_every_release(fake_release: Callable[[str], Any], family: str,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    # Whether a DLPack round trip collapses strides depends on the torch build too: a release whose
    # table row says "no collapse" must still be repaired when it happens.
    mod = fake_release(family)
    monkeypatch.setattr(mod, "COLLAPSE", True)
    sf = dgcompat.ceil_to_ue8m0(torch.rand(100, 4) + 0.1)  # K <= 512: one packed int32 column
    out = dgcompat.get_mn_major_tma_aligned_packed_ue8m0_tensor(sf)
    assert out.shape == (100, 1) and out.stride() == (1, dgcompat.get_tma_aligned_size(100, 4))
    t = dgcompat.get_mn_major_tma_aligned_tensor(torch.rand(100, 1))
    assert t.stride() == (1, dgcompat.get_tma_aligned_size(100, 4))


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "bundled"])
def test_transform_takes_upstream_positions(fake_release: Callable[[str], Any], family: str) -> None:
    fake_release(family)
    sf = torch.rand(2, 64, 4)
    out = dgcompat.transform_sf_into_required_layout(sf, 64, 512, (1, 128, 128), 2, True)  # num_groups, is_sfa
    torch.testing.assert_close(out, sf)
    out = dgcompat.transform_sf_into_required_layout(sf, 64, 512, (1, 128, 128), 2, True, False)
    torch.testing.assert_close(out, sf)
    with pytest.raises(dgcompat.BadArgumentError, match="is_sfa"):
        dgcompat.transform_sf_into_required_layout(sf[0], 64, 512, (1, 128, 128), None, "yes")  # type: ignore[arg-type]
