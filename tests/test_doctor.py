"""`dgcompat doctor` and `dgcompat pin`."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest

from dgcompat_conformance import doctor, pins

from . import fakes


def _install(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, body: str, version: str) -> None:
    site = fake_site("sgl-deep-gemm", version, body)
    # The ABI check runs in a child process: it finds the fake release through PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", str(site) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("DGCOMPAT_ARCH", "sm90")


def test_doctor_on_a_loadable_release(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")
    _install(fake_site, monkeypatch, fakes.SGL_025, "0.2.5")
    data = doctor.collect()
    assert data["release"]["label"] == "sgl-deep-gemm 0.2.5"
    assert data["abi"]["import"] is True and data["abi"]["verdict"] in ("ok", "loads (kernels not checked)")
    assert data["pin"][0] == "sgl-deep-gemm==0.2.5" and data["pin"][1] == "torch==2.14.*"
    assert doctor.main(["--json"]) in (0, 1)
    assert json.loads(capsys.readouterr().out)["capabilities"]["mqa_logits"] == "fp8_fp4_mqa_logits"


def test_doctor_on_a_broken_native_library(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")
    _install(fake_site, monkeypatch, "raise OSError('_C.so: undefined symbol: _ZN3c104cuda')\n", "0.2.3.post2")
    assert doctor.main([]) == 1
    out = capsys.readouterr().out
    assert "does not load" in out and "undefined symbol" in out and "cannot work" in out


def test_pin_lines_name_the_certificates() -> None:
    lines = pins.pin_lines("sgl-deep-gemm", pins.Version("0.1.4"))
    assert lines[:3] == ["sgl-deep-gemm==0.1.4", "torch==2.11.*", "sglang-kernel>=0.4.3"]
    assert lines[3].startswith("# certificates:") and "gpu: certified" in lines[3]
    assert "not certified" in pins.pin_lines("sgl-deep-gemm", pins.Version("9.9.9"))[-1]


def test_doctor_reports_a_torch_mismatch_without_importing(fake_site: Callable[..., Path],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _install(fake_site, monkeypatch, "raise RuntimeError('must not be imported')\n", "0.2.5")
    data = doctor.collect()
    if data["release"]["torch_ok"]:
        pytest.skip("the installed torch happens to match 0.2.5")
    assert data["abi"]["verdict"].startswith("refused") and not data["works"]
    assert any("built for torch==2.14.*" in p for p in data["problems"])


def test_doctor_says_an_unidentified_install_cannot_work(clean_dgcompat: None, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    # an sgl-deep-gemm 0.1.4 Python layer whose dist-info is gone: never planned as 0.2.5
    (tmp_path / "deep_gemm").mkdir()
    (tmp_path / "deep_gemm" / "__init__.py").write_text("raise RuntimeError('must not import')\n__version__ = '0.1.4'\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    from dgcompat import reset

    reset()
    data = doctor.collect()
    assert data["release"]["refusal"] and not data["works"] and data["abi"] is None
    assert doctor.main([]) == 1
    out = capsys.readouterr().out
    assert "refused" in out and "0.1.4" in out and "cannot work" in out
