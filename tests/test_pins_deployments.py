"""Pins that install and advice that runs: refused builds get no requirement, engines are pinned from their own
requirements, the installed deployment is pinned as it runs, and every command pin and doctor suggest runs."""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from packaging.version import Version

import dgcompat
from dgcompat.detection import Release
from dgcompat_conformance import cli, conform, doctor, pins
from dgcompat_conformance.dists import DISTRIBUTIONS
from dgcompat_conformance.harness import child, runner
from dgcompat_conformance.harness.certificate import build
from testsupport import fakes
from testsupport.dists import write_dist

# Requires-Dist of SGLang 0.5.23 and vLLM 0.34.0 (their wheels' METADATA, the lines about deep_gemm, torch and
# the kernel wheel, plus a few others and an extra's, which must not count).
SGLANG_0_5_23 = ["aiohttp", "sgl-deep-gemm==0.2.3.post2", "sglang-kernel==0.4.10", "torch==2.14.1",
                 "torchaudio==2.11.0", 'sgl-eval==0.1.3; extra == "test"', 'torch==2.9.0; extra == "old"']
VLLM_0_34_0 = ["torch==2.14.0", "torchaudio==2.11.0", "flashinfer_python[cu13]==0.7.2",
               'deepseek-recipe==0.2.0; sys_platform == "linux"']


def test_a_refused_release_gets_no_requirement(capsys: pytest.CaptureFixture[str]) -> None:
    assert pins.main(["--dist", "deep-gemm", "--release", "1.0.0"]) == 1
    out = capsys.readouterr().out.splitlines()
    assert all(line.startswith("#") for line in out) and out, out
    assert "v1 API" in out[0] and "dgcompat pin --release 0.2.5" in out[1]
    with pytest.raises(pins.PinRefused):
        pins.pin_lines("deep-gemm", Version("1.0.0"))


def test_an_installed_refused_build_is_no_pin(fake_site: Callable[..., Path]) -> None:
    # `pip install deep-gemm` gives this: DeepGEMM's v1 API under the name deep-gemm.
    fake_site("deep-gemm", "1.0.0", "def gemm_fp8_fp8_bf16_nt(lhs, rhs, out):\n    pass\n")
    rel = dgcompat.release()
    assert rel.refusal is not None and rel.source == "unrelated"
    with pytest.raises(pins.PinRefused) as info:
        pins.suggest(rel)
    assert not [line for line in info.value.lines if not line.startswith("#")]
    data = doctor.collect(run_abi=False)
    assert data["pin"][0].startswith("# no pin:") and not data["works"]


def test_pin_dist_vllm() -> None:
    lines = pins.pin_lines("vllm", Version("0.34.0"))
    assert lines[0] == "vllm==0.34.0" and "stable ABI: torch>=2.10" in lines[1]
    assert "cpu-tier: PASS" in lines[2] and "(build: surface fa714562dd0e, fingerprint dbd6e0837a32)" in lines[2]
    assert pins.main(["--dist", "vllm", "--release", "0.34.0"]) == 0
    assert pins.main(["--dist", "vllm", "--release", "0.36.0"]) == 2  # not a release dgcompat knows
    assert pins.main(["--dist", "vlm", "--release", "0.34.0"]) == 2


def test_engine_pins_from_the_engines_own_requirements() -> None:
    lines = pins.engine_pins("sglang", "0.5.23", SGLANG_0_5_23)
    assert lines[:4] == ["sglang==0.5.23", "sgl-deep-gemm==0.2.3.post2", "torch==2.14.1", "sglang-kernel==0.4.10"]
    assert "# sglang-kernel 0.4.10 bundles no deep_gemm" in lines[4]
    assert lines[-1].startswith("# certificates:") and not any(line.startswith("# conflict") for line in lines)
    vllm = pins.engine_pins("vllm", "0.34.0", VLLM_0_34_0)
    assert vllm[0] == "vllm==0.34.0" and "torch==2.14.0" in vllm and vllm[-1].startswith("# certificates:")
    # An engine pinning a torch its deep_gemm was not built for is a conflict, said so.
    bad = pins.engine_pins("sglang", "9.9.9", ["sgl-deep-gemm==0.2.3.post2", "torch==2.13.0"])
    assert "# conflict: sglang 9.9.9 pins torch==2.13.0, but its deep_gemm needs torch==2.14.*" in bad
    old_kernel = pins.engine_pins("sglang", "9.9.9", ["sgl-deep-gemm==0.2.3.post2", "sglang-kernel==0.4.2"])
    assert any(line.startswith("# conflict: sglang-kernel 0.4.2 is below the floor") for line in old_kernel)


def test_the_sglang_deployment_is_pinned_as_it_runs(fake_site: Callable[..., Path], tmp_path: Path) -> None:
    site = fake_site("sgl-deep-gemm", "0.2.3.post2", "__version__ = '0.2.3'\n")  # no Python surface: not compared
    write_dist(site, "torch", "2.14.1", {})
    write_dist(site, "sglang-kernel", "0.4.10", {"sgl_kernel/__init__.py": ""})
    write_dist(site, "sglang", "0.5.23", {"sglang/__init__.py": ""}, requires=tuple(SGLANG_0_5_23))
    dgcompat.reset()
    lines = pins.suggest(dgcompat.release())
    assert lines[:4] == ["sglang==0.5.23", "sgl-deep-gemm==0.2.3.post2", "torch==2.14.1", "sglang-kernel==0.4.10"], lines
    assert lines[4].startswith("# certificates: cpu-tier: PASS")


def test_conform_finds_a_vendored_copy(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
                                       tmp_path: Path) -> None:
    site = tmp_path / "site"
    write_dist(site, "vllm", "0.34.0", {"vllm/__init__.py": "", "vllm/third_party/__init__.py": "",
                                        "vllm/third_party/deep_gemm/__init__.py": fakes.UP_281_LOGITS_DTYPE})
    monkeypatch.syspath_prepend(str(site))
    # child._installed_copy() sets DGCOMPAT_BACKEND for the child it runs in: recorded here so it is undone after.
    monkeypatch.setenv("DGCOMPAT_BACKEND", "")
    monkeypatch.delenv("DGCOMPAT_BACKEND")
    dgcompat.reset()
    rel = dgcompat.release()
    assert rel.module == "vllm.third_party.deep_gemm" and rel.installed_as == "vendored in vllm 0.34.0"
    assert runner.installed_release(rel) == ("vllm", "0.34.0")
    monkeypatch.setenv("DGCOMPAT_CONFORMANCE_MODULE", "x")  # set (and restored) by the test
    module, package = child._installed_copy()
    assert (module, package) == ("vllm.third_party.deep_gemm", site / "vllm" / "third_party" / "deep_gemm")
    import os

    assert os.environ["DGCOMPAT_BACKEND"] == "vllm" and os.environ["DGCOMPAT_CONFORMANCE_MODULE"] == module


# ---------------------------------------------------------------------------------------------
# Every command pin and doctor suggest runs as printed
# ---------------------------------------------------------------------------------------------


def _suggestions(texts: list[str]) -> set[str]:
    return {m.group(1) for text in texts for m in re.finditer(r"`(dgcompat [^`]*)`", text)}


def _stacks(tmp_path: Path) -> list[Release]:
    v = Version
    return [
        Release("deep-gemm", v("2.8.1"), "upstream", "stable-abi", "/src/DeepGEMM/deep_gemm", None, None, None, None,
                True, installed_as="editable (path entry, deep-gemm 2.8.1)"),
        Release("deep-gemm", v("2.8.1"), "vendored", "stable-abi", "/x", None, None, None, None, True,
                owner="vllm 0.34.0"),
        Release("deep-gemm", v("2.8.1"), "vendored", "stable-abi", "/x", None, None, None, None, True, owner="vllm"),
        Release("sgl-deep-gemm", v("0.2.6"), "sgl-deep-gemm", "torch-library", "/x", None, None, None, None, False),
        Release("deep-gemm", v("1.0.0"), "unrelated", "unknown", "/x", None, None, None, None, False,
                refusal="not DeepGEMM 2.x"),
        Release(None, None, "none", "none", None, None, None, None, None, False),
    ]


def test_every_suggested_command_runs_as_printed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    texts: list[str] = []
    empty = tmp_path / "no-certificates"
    empty.mkdir()
    for rel in _stacks(tmp_path):
        for folder in (None, empty):
            try:
                texts += pins.suggest(rel, folder)
            except pins.PinRefused as exc:
                texts += exc.lines
    for d in DISTRIBUTIONS:
        for version in (*d.certified, *d.refused):
            try:
                texts += pins.pin_lines(d.name, Version(version), empty)
            except pins.PinRefused as exc:
                texts += exc.lines
    texts += pins.engine_pins("sglang", "0.5.23", SGLANG_0_5_23, empty)
    texts += pins.engine_pins("sglang", "9.9.9", ["sgl-deep-gemm>=0.2.3,<0.2.5"], empty)
    suggestions = _suggestions(texts)
    assert {"dgcompat conform", "dgcompat conform --release vllm-0.34.0", "dgcompat conform --release 0.2.6",
            "dgcompat pin --release 0.2.5", "dgcompat pin --release 0.2.3.post2"} <= suggestions, suggestions
    # Run each as printed: the real command line parser and selection; only the certifying child is replaced.
    ran: list[Any] = []
    monkeypatch.setattr(conform, "run_many", lambda specs, opts, **kw: ran.append([s.id for s in specs]) or [])
    monkeypatch.setattr(conform, "run_installed", lambda opts, **kw: ran.append("installed") or build(
        {"tests": [{"id": "t", "outcome": "passed"}]}, release="installed", distribution=None))
    monkeypatch.setattr(conform, "_print_summary", lambda *a, **k: None)
    monkeypatch.setattr(conform, "progress_line", lambda *a: "")
    monkeypatch.setenv("DGCOMPAT_RESULTS", str(tmp_path / "results"))
    for command in sorted(suggestions):
        argv = shlex.split(command)[1:]
        status = cli.main(argv)
        err = capsys.readouterr().err
        assert status != 2, f"`{command}` is a usage error: {err}"
    assert ["vllm-0.34.0"] in ran and ["0.2.6"] in ran and "installed" in ran
