"""vLLM's vendored deep_gemm as a conformance release: id, work folder, GPU-tier folder subject, pin."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

from dgcompat_conformance import certificate, pins
from dgcompat_conformance.gpu import abi as gpu_abi
from dgcompat_conformance.gpu import runner
from dgcompat_conformance.gpu.cases import CASES
from dgcompat_conformance.releases import parse_release, spec_from_wheel
from dgcompat_conformance.wheels import prepare_workdir
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


def test_vllm_0_34_is_a_known_release() -> None:
    from dgcompat_conformance.releases import VENDORED_FACTS, VENDORED_RELEASES, release_problem

    spec = parse_release("vllm==0.34.0")
    assert (spec.id, spec.vendored, spec.package_path) == ("vllm-0.34.0", True, "vllm/third_party/deep_gemm/")
    assert release_problem("vllm", "0.34.0") is None and ("vllm", "0.34.0") in VENDORED_RELEASES
    facts = VENDORED_FACTS["vllm-0.34.0"]
    assert (facts.deep_gemm, facts.torch_minimum, facts.built_for) == ("2.8.1", ">=2.10", "2.14.0")
    assert "0.34.0" in str(release_problem("vllm", "0.35.0"))  # an unknown one names the known ones


def test_gpu_runner_certifies_a_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "vendor" / "deep_gemm"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(INIT)
    (folder / "_C.py").write_text("def fp8_fp4_mqa_logits(q, kv, weights, ks, ke, max_seqlen_k, logits_dtype=None, "
                                  "schedule_meta=None):\n    pass\n")
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

    monkeypatch.setattr(gpu_abi, "abi_check", abi_check)
    monkeypatch.setattr(runner, "run_case_child", case)
    monkeypatch.setattr(runner, "environment_info", lambda: {"torch": "2.11.0+cu130", "cuda": "13.0",
                                                            "driver": "580", "python": "3.12.3", "platform": "x",
                                                            "device": {"name": "H200", "sm": "sm90"}})
    case_id = next(iter(CASES))
    out = tmp_path / "certs"
    assert runner.main(["--folder", str(folder), "--release-id", "vllm-0.33.0", "--out", str(out),
                        "--cases", case_id, "--work", str(tmp_path / "work")]) == 0
    cert = json.loads((out / "gpu-vllm-0.33.0.json").read_text())
    assert cert["verdict"] == "certified" and cert["binding"] == "stable-abi" and certificate.check(cert) == []
    assert cert["folder"]["files"] == 3 and len(cert["folder"]["sha256_py_and_so"]) == 64
    # The certificate records the build's surface (as detection reads it) and its whole fingerprint.
    surface = cert["detected"]["surface"]
    assert len(surface) == 12 and cert["fingerprint"]["python"]["id"] == surface
    assert "same version, different surface" in cert["detected"]["surface_note"]  # not a recorded 2.8.1 build
    assert len(cert["fingerprint"]["id"]) == 12
    assert "ran on torch 2.11.0+cu130 while built for torch 2.14.0" in cert["note"]
    assert "stable ABI held" in cert["note"]
    assert (tmp_path / "work" / "vllm-0.33.0" / "site" / "deep_gemm" / "__init__.py").is_file()
    assert str(tmp_path / "work" / "vllm-0.33.0" / "site") in seen["pythonpath"]
    assert runner.main(["--folder", str(folder), "--release-id", "../x"]) == 2


def test_pin_for_the_vendored_copy() -> None:
    lines = pins.pin_lines("vllm", Version("0.33.0"))
    assert lines[0] == "vllm==0.33.0" and "stable ABI: torch>=2.10" in lines[1]
    assert lines[2].startswith("# certificates:") and "cpu-tier: PASS" in lines[2]


@pytest.mark.wheels
def test_conform_with_vllm_installed_certifies_its_copy(tmp_path: Path) -> None:
    """No top-level deep_gemm, vLLM installed: `dgcompat conform` certifies vllm.third_party.deep_gemm as vllm-0.34.0."""
    import os
    import subprocess
    import sys

    from dgcompat_conformance.wheels import FetchError, fetch_wheel

    try:
        wheel = fetch_wheel(parse_release("vllm-0.34.0"))
    except FetchError as exc:
        pytest.skip(f"vllm 0.34.0 is not cached and could not be fetched: {exc}")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        for name in zf.namelist():
            if (name.startswith("vllm/third_party/deep_gemm/") and "/include/" not in name) or name.endswith(
                    ".dist-info/METADATA"):
                zf.extract(name, site)
    # The engine's own package is not under test: an empty vllm/__init__.py stands for it.
    (site / "vllm" / "__init__.py").write_text("")
    (site / "vllm" / "third_party" / "__init__.py").write_text("")
    root = Path(__file__).resolve().parent.parent
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), str(root), str(root / "conformance")])}
    env.pop("DGCOMPAT_BACKEND", None)
    proc = subprocess.run([sys.executable, "-m", "dgcompat", "conform", "--cpu-tier", "--out", str(tmp_path / "out"),
                           "-k", "test_release_is_detected or test_is_available or test_num_sms_roundtrip"],
                          capture_output=True, text=True, timeout=900, env=env, cwd=str(tmp_path), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    cert = json.loads((tmp_path / "out" / "vllm-0.34.0.json").read_text())
    assert cert["verdict"] == "PASS" and cert["summary"]["passed"] >= 3 and cert["distribution"] == "vllm"
    assert cert["detected"]["module"] == "vllm.third_party.deep_gemm"
    assert cert["detected"]["surface"] == "fa714562dd0e"  # the build vLLM 0.34.0 vendors
    assert cert["fingerprint"]["python"]["id"] == "fa714562dd0e" and cert["fingerprint"]["native"]["id"] == "c306d2f79a7e"


@pytest.mark.wheels
def test_surface_diff_of_the_two_2_8_1_builds(capsys: pytest.CaptureFixture[str]) -> None:
    """`dgcompat surface --diff vllm-0.33.0 vllm-0.34.0` names the logits_dtype insertions (both are "2.8.1")."""
    from dgcompat_conformance.surface import cli as surface_cli

    try:
        status = surface_cli.main(["--diff", "vllm-0.33.0", "vllm-0.34.0"])
    except SystemExit as exc:  # pragma: no cover - a usage error prints and exits through argparse
        status = int(exc.code or 0)
    out = capsys.readouterr().out
    if status == 2 and "cannot" in out + capsys.readouterr().err:
        pytest.skip("the vLLM wheels are not cached and the index could not be read")
    assert status == 0, out
    assert "deep_gemm.fp8_fp4_mqa_logits:\n  added-param          added parameter logits_dtype at #6" in out
    assert "added parameter logits_dtype at #7" in out and "unhandled drift: none" in out
    assert "python: fp8_fp4_paged_mqa_logits: logits_dtype inserted at #7" in out
    assert "Requires-Dist" not in out  # the engine's own requirements are not the copy's
