"""Runtime knobs: SM count, PDL, compile mode, alignment."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import dgcompat


@pytest.mark.parametrize(("family", "pdl"), [("sgl-0.1.3", "native"), ("sgl-0.2.5", "top-level"), ("bundled", None)])
def test_set_pdl(fake_release: Callable[[str], Any], family: str, pdl: str | None) -> None:
    mod = fake_release(family)
    assert dgcompat.capabilities().pdl == pdl
    assert dgcompat.set_pdl(True) is (pdl is not None)
    if pdl is not None:
        assert dgcompat.get_pdl() is True and mod._state["pdl"] is True
    else:
        assert dgcompat.get_pdl() is None


def test_num_sms_context_restores(fake_release: Callable[[str], Any]) -> None:
    fake_release("sgl-0.2.5")
    with dgcompat.num_sms(None):
        assert dgcompat.get_num_sms() == 132
    with pytest.raises(RuntimeError), dgcompat.num_sms(66):
        assert dgcompat.get_num_sms() == 66
        raise RuntimeError("boom")
    assert dgcompat.get_num_sms() == 132
    with pytest.raises(dgcompat.BadArgumentError, match="positive int"):
        dgcompat.set_num_sms(0)


@pytest.mark.parametrize(("family", "has"), [("sgl-0.2.5", False), ("bundled", True)])
def test_compile_mode(fake_release: Callable[[str], Any], family: str, has: bool) -> None:
    mod = fake_release(family)
    with dgcompat.compile_mode(1):
        assert mod._state["mode"] == (1 if has else 0)
    assert mod._state["mode"] == 0
    assert dgcompat.capabilities().compile_mode is has


def test_alignment_is_int(fake_release: Callable[[str], Any]) -> None:
    fake_release("bundled")
    value = dgcompat.get_mk_alignment_for_contiguous_layout()
    assert value == 128 and type(value) is int


@pytest.mark.parametrize("family", ["sgl-0.1.3", "sgl-0.2.5", "bundled", "reference"])
def test_more_sms_than_the_device_is_a_bad_argument(fake_release: Callable[[str], Any],
                                                    monkeypatch: pytest.MonkeyPatch, family: str) -> None:
    fake_release(family)
    before = dgcompat.get_num_sms()
    for _ in range(2):  # on every call, not only the first
        with pytest.raises(dgcompat.BadArgumentError, match="at most the device's 132 SMs") as info:
            dgcompat.set_num_sms(1000)
        assert info.value.argument == "new_num_sms"
    with pytest.raises(dgcompat.BadArgumentError, match="new_num_sms"), dgcompat.num_sms(1000):
        pass
    assert dgcompat.get_num_sms() == before
    dgcompat.set_num_sms(132)
    dgcompat.set_num_sms(new_num_sms=before)
