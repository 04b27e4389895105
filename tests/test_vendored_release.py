"""vLLM's vendored deep_gemm as a conformance release: id, work folder, GPU-tier folder subject, pin."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dgcompat_conformance import certificate, pins
from dgcompat_conformance.gpu import runner
from dgcompat_conformance.harness.releases import parse_release, spec_from_wheel
from dgcompat_conformance.harness.wheels import prepare_workdir
from testsupport import elfmaker

INIT = "import torch\nfrom . import _C\n__version__ = '2.8.1'\n"


def _vllm_wheel(tmp_path: Path) -> Path:
    wheel = tmp_path / "vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as zf:
        zf.writestr("vllm/__init__.py", "")
        zf.writestr("vllm/third_party/deep_gemm/__init__.py", INIT)
        zf.writestr("vllm/third_party/deep_gemm/_C.py", "")
        zf.writestr("vllm/third_party/deep_gemm/_C_extension.abi3.so", elfmaker.make_so(**elfmaker.STABLE_ABI))
        zf.writestr("vllm/third_party/deep_gemm/include/deep_gemm/x.cuh", "// header")
        zf.writestr("vllm-0.33.0.dist-info/METADATA", "Name: vllm\nVersion: 0.33.0\n")
    return wheel


def test_release_id_and_work_folder(tmp_path: Path) -> None:
    spec = parse_release("vllm-0.33.0")
    assert (spec.id, spec.vendored, spec.package_path) == ("vllm-0.33.0", True, "vllm/third_party/deep_gemm/")
    assert parse_release("vllm==0.33.0").id == "vllm-0.33.0"
    wheel = _vllm_wheel(tmp_path)
    work = prepare_workdir(spec_from_wheel(wheel), wheel, root=tmp_path / "work")
    names = sorted(p.relative_to(work).as_posix() for p in work.rglob("*") if p.is_file())
    # a plain deep_gemm package, without the CUDA headers and without the engine's dist-info
    assert names == [".dgcompat-extracted", "deep_gemm/_C.py", "deep_gemm/_C_extension.abi3.so",
                     "deep_gemm/__init__.py"]
    with pytest.raises(ValueError, match="vllm"):
        parse_release("vllmx-0.33.0")


def test_gpu_runner_certifies_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "vendor" / "deep_gemm"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(INIT)
    (folder / "_C_extension.abi3.so").write_bytes(elfmaker.make_so(**elfmaker.STABLE_ABI))
    seen: dict[str, Any] = {}

    def abi_check(timeout: float, *, env: dict[str, str], python: str = "", allow_torch_mismatch: bool = False) -> Any:
        seen["pythonpath"] = env["PYTHONPATH"]
        return {"ok": True, "verdict": "ok", "detail": "", "binding": "stable-abi", "expected_torch": ">=2.10",
                "torch": "2.11.0+cu130", "torch_ok": True}

    def case(case_id: str, env: dict[str, str], timeout: float, cwd: Path, python: str = "", *,
             cut_short: bool = False) -> Any:
        return {"id": case_id, "outcome": "passed", "duration": 0.1, "metric": "diff", "tolerance": 1e-4,
                "value": 1e-6}

    monkeypatch.setattr(runner._abi, "abi_check", abi_check)
    monkeypatch.setattr(runner, "run_case_child", case)
    monkeypatch.setattr(runner, "environment_info", lambda: {"torch": "2.11.0+cu130", "cuda": "13.0",
                                                            "driver": "580", "python": "3.12.3", "platform": "x",
                                                            "device": {"name": "H200", "sm": "sm90"}})
    case_id = next(iter(runner.CASES))
    out = tmp_path / "certs"
    assert runner.main(["--folder", str(folder), "--release-id", "vllm-0.33.0", "--out", str(out),
                        "--cases", case_id, "--work", str(tmp_path / "work")]) == 0
    cert = json.loads((out / "gpu-vllm-0.33.0.json").read_text())
    assert cert["verdict"] == "certified" and cert["binding"] == "stable-abi" and certificate.check(cert) == []
    assert cert["folder"]["files"] == 2 and len(cert["folder"]["sha256_py_and_so"]) == 64
    assert "ran on torch 2.11.0+cu130 while built for torch 2.14.0" in cert["note"]
    assert "stable ABI held" in cert["note"]
    assert (tmp_path / "work" / "vllm-0.33.0" / "site" / "deep_gemm" / "__init__.py").is_file()
    assert str(tmp_path / "work" / "vllm-0.33.0" / "site") in seen["pythonpath"]
    assert runner.main(["--folder", str(folder), "--release-id", "../x"]) == 2


def test_pin_for_the_vendored_copy() -> None:
    lines = pins.pin_lines("vllm", pins.Version("0.33.0"))
    assert lines[0] == "vllm==0.33.0" and "stable ABI: torch>=2.10" in lines[1]
    assert lines[2].startswith("# certificates:") and "cpu-tier: PASS" in lines[2]
