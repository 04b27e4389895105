"""The DGCOMPAT_* variables, the retry of a failed bind, and capabilities() without a CUDA context."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

import dgcompat
from dgcompat import _backend, env, table


@pytest.mark.parametrize(("variable", "value", "call"), [
    ("DGCOMPAT_BACKEND", "refrence", lambda: dgcompat.get_num_sms()),
    ("DGCOMPAT_ARCH", "sm999", lambda: dgcompat.capabilities()),
    ("DGCOMPAT_DEBUG", "maybe", lambda: env.debug()),
    ("DGCOMPAT_ALLOW_TORCH_MISMATCH", "2", lambda: env.allow_torch_mismatch()),
    ("DGCOMPAT_INSTALL", "ja", lambda: env.install()),
])
def test_unknown_values_are_rejected(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch, variable: str,
                                     value: str, call: Callable[[], Any]) -> None:
    monkeypatch.setenv(variable, value)
    for _ in range(2):  # every call that reads it, not only the first
        with pytest.raises(dgcompat.ConfigurationError) as info:
            call()
        assert info.value.variable == variable and info.value.value == value
        accepted = env.VARIABLES[variable].accepted
        assert variable in str(info.value) and accepted and all(a in str(info.value) for a in accepted)
    report = {row.name: row for row in env.env_report()}
    assert report[variable] == env.EnvRow(variable, value, False, accepted, env.VARIABLES[variable].read_by,
                                           f"{value!r} is not one of {', '.join(accepted)}",
                                           env.VARIABLES[variable].effect)


def test_accepted_values(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    assert env.backend() == "auto" and env.arch() is None and env.debug() is False
    for raw, want in (("Reference", "reference"), ("deep-gemm", "deep_gemm"), (" auto ", "auto")):
        monkeypatch.setenv("DGCOMPAT_BACKEND", raw)
        assert env.backend() == want
    for raw, want in (("sm90", "sm90"), ("9.0", "sm90"), ("100", "sm100"), ("SM103", "sm103")):
        monkeypatch.setenv("DGCOMPAT_ARCH", raw)
        assert env.arch() == want == table.current_arch()
    monkeypatch.setenv("DGCOMPAT_DEBUG", "1")
    assert env.debug() is True
    assert all(row.ok for row in env.env_report())
    assert [row.name for row in env.env_report()] == list(env.VARIABLES)


def test_a_failed_bind_is_retried_once_the_environment_changes(clean_dgcompat: None,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # No deep_gemm anywhere on the path: one lookup fails...
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p) / "deep_gemm").exists()])
    dgcompat.reset()
    assert not dgcompat.release().installed
    assert not hasattr(dgcompat, "some_upstream_name")
    with pytest.raises(dgcompat.DeepGemmUnavailableError, match="DGCOMPAT_BACKEND=reference"):
        dgcompat.get_num_sms()
    # ...and following the message's advice afterwards takes effect without a restart.
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    assert dgcompat.get_num_sms() == 132
    assert _backend.loaded_module() is dgcompat.reference.backend


class _RecordingCuda:
    """A torch.cuda stand-in: a GPU is present, CUDA is not initialized, every query is recorded."""

    def __init__(self, initialized: bool = False) -> None:
        self.calls: list[str] = []
        self.initialized = initialized

    def is_available(self) -> bool:
        return True

    def is_initialized(self) -> bool:
        return self.initialized

    def __getattr__(self, name: str) -> Any:
        def record(*_args: Any, **_kw: Any) -> Any:
            self.calls.append(name)
            if not self.initialized:
                raise AssertionError(f"torch.cuda.{name}() would initialize CUDA")
            return (9, 0) if name == "get_device_capability" else 0
        return record


def test_capabilities_never_initialize_cuda(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    cuda = _RecordingCuda()
    monkeypatch.setattr(torch, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "pynvml", None)  # not importable
    table.reset()
    caps = dgcompat.capabilities()
    assert caps.arch is None and cuda.calls == []  # deferred: planning is conservative until CUDA is up
    assert caps.paged_native_next_n == (1,)
    cuda.initialized = True  # the engine's first kernel call (or CUDA tensor) created the context
    assert dgcompat.capabilities().arch == "sm90"
    assert cuda.calls == ["get_device_capability"]


def test_nvml_answers_without_a_context(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    caps_by_index = [(9, 0), (9, 0)]
    nvml = SimpleNamespace(
        nvmlInit=lambda: None, nvmlShutdown=lambda: None, nvmlDeviceGetCount=lambda: len(caps_by_index),
        nvmlDeviceGetHandleByIndex=lambda i: i, nvmlDeviceGetCudaComputeCapability=lambda h: caps_by_index[h])
    cuda = _RecordingCuda()
    monkeypatch.setattr(torch, "cuda", cuda)
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    table.reset()
    assert dgcompat.capabilities().arch == "sm90" and cuda.calls == []
    caps_by_index[1] = (10, 0)  # mixed GPUs: which one is used is known only after initialization
    table.reset()
    assert dgcompat.capabilities().arch is None and cuda.calls == []


_PROCESS = """
import json, sys
import torch  # already imported by the engine: capabilities() may look at it, but must not initialize CUDA
import dgcompat
dgcompat.release()
dgcompat.capabilities()
print(json.dumps({"cuda_init": bool(torch.cuda.is_initialized())}))
"""


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_process_contract_in_a_subprocess() -> None:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")}
    out = subprocess.run([sys.executable, "-c", _PROCESS], capture_output=True, text=True, env=child_env,
                         timeout=120, check=False)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"cuda_init": False}


@pytest.mark.parametrize(("value", "expected"), [("1", True), ("true", True), ("TRUE", True), ("yes", True), (" 1", True),
                                             ("on", True), ("0", False), ("false", False), ("No", False),
                                             ("off", False), ("", False)])
@pytest.mark.parametrize(("variable", "read"), [("DGCOMPAT_DEBUG", "debug"), ("DGCOMPAT_INSTALL", "install"),
                                            ("DGCOMPAT_ALLOW_TORCH_MISMATCH", "allow_torch_mismatch")])
def test_switches_take_the_usual_spellings(monkeypatch: pytest.MonkeyPatch, variable: str, read: str, value: str,
                                           expected: bool) -> None:
    monkeypatch.setenv(variable, value)
    assert getattr(env, read)() is expected
    row = next(r for r in env.env_report() if r.name == variable)
    assert row.ok
