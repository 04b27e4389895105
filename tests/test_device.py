"""A CUDA build of torch on a machine with no usable driver or GPU: no CUDA query may fail the runtime.

Most CI runners are exactly that (pip's default torch is a CUDA build), and so is a GPU host under
``CUDA_VISIBLE_DEVICES=""``. There, nearly every CUDA call raises (``torch.AcceleratorError: CUDA driver
version is insufficient ...``). The emulation below makes every such call raise while CUDA claims to be
compiled in; dgcompat must still serve CPU tensors on the reference backend and the fakes, every call,
and ask CUDA nothing. On a real CUDA build without a device (CI's default-torch run) the same tests run
unpatched as well.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import dgcompat
from dgcompat import _device
from dgcompat import reference as R
from testsupport.tiers import grid

H, D, BKV = 32, 128, 64


class _NoDriver(RuntimeError):
    """What torch raises for a CUDA call without a usable driver (AcceleratorError is a RuntimeError)."""


def _raise(*_args: Any, **_kwargs: Any) -> Any:
    raise _NoDriver("CUDA error: CUDA driver version is insufficient for CUDA runtime version")


@pytest.fixture(params=["emulated", "as installed"])
def no_usable_cuda(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """CUDA compiled in, unusable: every CUDA query raises and is recorded."""
    asked: list[str] = []
    if request.param == "emulated":
        def refuse(name: str) -> Callable[..., Any]:
            def query(*args: Any, **kwargs: Any) -> Any:
                asked.append(name)
                return _raise()
            return query

        monkeypatch.setattr(torch.cuda, "_is_compiled", lambda: True)
        monkeypatch.setattr(torch.cuda, "is_initialized", lambda: False)
        for name in ("is_available", "device_count", "current_device", "get_device_properties",
                     "get_device_capability", "current_stream", "init"):
            monkeypatch.setattr(torch.cuda, name, refuse(name))
        monkeypatch.setattr(torch._C, "_cuda_isCurrentStreamCapturing", refuse("_cuda_isCurrentStreamCapturing"),
                            raising=False)
    _device.reset()
    yield asked
    _device.reset()


def _paged_inputs(b: int, n: int, ctx: list[int]) -> dict[str, Any]:
    g = torch.Generator().manual_seed(0)
    blocks = max(1, math.ceil(max(ctx) / BKV))
    return {"q": torch.randn(b, n, H, D, generator=g).to(torch.float8_e4m3fn),
            "kv": R.pack_kv_cache(torch.randn(b * blocks, BKV, D, generator=g)),
            "w": torch.rand(b * n, H, generator=g),
            "bt": torch.randperm(b * blocks, generator=g).to(torch.int32).view(b, blocks),
            "ctx": torch.tensor(ctx, dtype=torch.int32), "max_len": blocks * BKV}


@pytest.mark.parametrize(("family", "form"), grid(["reference", "sgl-0.1.3", "bundled"], ["seq", "rows"]))
def test_paged_and_ragged_logits_on_cpu_tensors(no_usable_cuda: list[str], fake_release: Callable[[str], Any],
                                                family: str, form: str) -> None:
    fake_release(family)
    n = 2
    i = _paged_inputs(3, n, [70, 130, 66])
    rows = (i["ctx"].view(-1, 1) - n + 1 + torch.arange(n, dtype=torch.int32))
    lens = i["ctx"] if form == "seq" else rows.contiguous()
    ref = R.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], i["ctx"], i["bt"], None, i["max_len"], clean_logits=True)
    for _ in range(3):  # the planning call, then repeat calls on the plan
        sched = dgcompat.get_paged_mqa_logits_metadata(lens, BKV)
        out = dgcompat.fp8_paged_mqa_logits(i["q"], i["kv"], i["w"], lens, i["bt"], sched, i["max_len"],
                                            clean_logits=True)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-3)
    q = torch.randn(5, H, D).to(torch.float8_e4m3fn)
    k = torch.randn(9, D).to(torch.float8_e4m3fn)
    ks = torch.tensor([0, 1, 2, 0, 3], dtype=torch.int32)
    ke = torch.tensor([4, 5, 9, 9, 6], dtype=torch.int32)
    w = torch.rand(5, H)
    kv = (k, torch.rand(9) + 0.5)
    for _ in range(2):
        out = dgcompat.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True)
        torch.testing.assert_close(out, R.fp8_mqa_logits(q, kv, w, ks, ke, clean_logits=True))
    assert no_usable_cuda == [], f"dgcompat asked CUDA: {no_usable_cuda}"


def test_knobs_capabilities_and_errors_ask_cuda_nothing(no_usable_cuda: list[str],
                                                         fake_release: Callable[[str], Any],
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    fake_release("reference")
    monkeypatch.delenv("DGCOMPAT_ARCH", raising=False)
    dgcompat.reset()
    assert dgcompat.capabilities().backend == "reference"
    assert dgcompat.get_num_sms() == _device.MODEL_SMS
    for _ in range(2):
        with pytest.raises(dgcompat.BadArgumentError, match="new_num_sms"):
            dgcompat.set_num_sms(10_000)
        with pytest.raises(dgcompat.BadArgumentError, match="context_lens"):  # a typed error, not a torch one
            dgcompat.fp8_paged_mqa_logits(torch.zeros(1, 1, H, D).to(torch.float8_e4m3fn),
                                          torch.zeros(1, BKV, 1, D + 4, dtype=torch.uint8), torch.zeros(1, H),
                                          torch.ones(1, 1), torch.zeros(1, 1, dtype=torch.int32),
                                          torch.zeros(133, 2, dtype=torch.int32), BKV)
    assert no_usable_cuda == [], f"dgcompat asked CUDA: {no_usable_cuda}"


def test_each_cuda_question_is_safe_when_cuda_is_unusable(monkeypatch: pytest.MonkeyPatch) -> None:
    """The device module's questions answer (never raise) when every CUDA call raises, initialized or not."""
    monkeypatch.setattr(torch.cuda, "is_initialized", _raise)
    _device.reset()
    assert _device.initialized() is False and _device.sm_count() == _device.MODEL_SMS
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", _raise)
    monkeypatch.setattr(torch.cuda, "current_device", _raise)
    monkeypatch.setattr(torch.cuda, "get_device_capability", _raise)
    assert _device.sm_count() == _device.MODEL_SMS
    assert _device.arch() is None
    assert _device.capture_probe(torch.device("cpu"))() is False
    assert _device.capture_probe(torch.device("meta"))() is False
    _device.reset()


def test_import_and_capabilities_create_no_context_on_a_cuda_build() -> None:
    """In a fresh interpreter: import dgcompat, capabilities() and a reference call leave CUDA uninitialized."""
    code = (
        "import os; os.environ['DGCOMPAT_BACKEND'] = 'reference'\n"
        "import torch, dgcompat\n"
        "dgcompat.capabilities(); dgcompat.get_num_sms()\n"
        "lens = torch.tensor([[5]], dtype=torch.int32)\n"
        "dgcompat.get_paged_mqa_logits_metadata(lens, 64)\n"
        "print(torch.cuda.is_initialized())\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env={**_clean_env(), "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.split()[-1] == "False"


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")}
