"""The engine call-site extract (tests/engine_calls/extract_engine_calls.py) and every import form
(tests/engine_calls/import_forms.py, installed before and after the real import), run unchanged with
deep_gemm routed through ``dgcompat.install_as_deep_gemm()``: on the reference backend, and on the
CPU tier over the real Python layer of published wheels (native library replaced by stand-ins).

Each run is one conformance-harness child (``--dropin``: the install happens before deep_gemm is
imported), so every release gets a fresh interpreter. Every extract test must pass: a call using a
parameter the release lacks passes only where dgcompat refuses it with a typed error naming it.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from dgcompat_conformance.harness.runner import child_env
from testsupport.wheels import published_wheel

EXTRACT = Path(__file__).resolve().parent / "engine_calls" / "extract_engine_calls.py"
IMPORT_FORMS = Path(__file__).resolve().parent / "engine_calls" / "import_forms.py"

def _child(tmp_path: Path, mode: list[str], *, dropin: bool = True, tests: Path = EXTRACT) -> dict[str, Any]:
    out = tmp_path / "result.json"
    cmd = [sys.executable, "-m", "dgcompat_conformance.harness.child", *mode, "--tests", str(tests), "--no-xfails",
           "--out", str(out)]
    if dropin:
        cmd.append("--dropin")
    proc = subprocess.run(cmd, capture_output=True, text=True, env=child_env(), timeout=900, check=False)
    assert proc.returncode == 0 and out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(out.read_text())
    assert "harness_error" not in result, result.get("harness_traceback")
    assert result["import"]["ok"], result["import"]
    return result


def _outcomes(result: dict[str, Any]) -> dict[str, str]:
    return {t["id"].rsplit("::", 1)[-1]: t["outcome"] for t in result["tests"]}


def _check(result: dict[str, Any], *, overlap_not_emulated: bool = False) -> None:
    outcomes = _outcomes(result)
    assert len(outcomes) >= 20, outcomes
    expected = dict.fromkeys(outcomes, "passed")
    if overlap_not_emulated:  # the bundled copies have the overlapped masked GEMM; the stand-ins cannot run it
        expected["test_moe_masked_single_batch_overlap"] = "skipped"
    wrong = {name: (outcomes[name], result["tests"][i]["message"])
             for i, name in enumerate(outcomes) if outcomes[name] != expected[name]}
    assert not wrong, wrong
    standins = result.get("standins")
    if standins is not None:
        not_emulated = [n for n in standins["not_emulated"] if not (overlap_not_emulated and "overlap" in str(n))]
        assert not standins["hangs"] and not not_emulated, standins
        assert standins["mapped_native_libraries"] == []


def _workdir(release: str) -> list[str]:
    from dgcompat_conformance.releases import parse_release
    from dgcompat_conformance.wheels import prepare_workdir

    spec = parse_release(release)
    work = prepare_workdir(spec, published_wheel(release))
    return ["--workdir", str(work), "--dist", spec.dist, "--version", spec.version, "--release-id", spec.id]


@pytest.mark.slow
def test_extract_on_the_reference_backend(tmp_path: Path) -> None:
    result = _child(tmp_path, ["--reference"])
    assert result["tier"] == "reference"
    _check(result)


@pytest.mark.wheels
@pytest.mark.parametrize("release", ["0.1.4", "0.2.5", "sgl-kernel==0.3.21"])
def test_extract_on_the_cpu_tier(tmp_path: Path, release: str) -> None:
    result = _child(tmp_path, _workdir(release))
    assert result["tier"] == "cpu-tier" and result["standins"]["native_loaded"]
    _check(result, overlap_not_emulated=release.startswith("sgl-kernel"))


@pytest.mark.wheels
def test_extract_fails_without_the_install(tmp_path: Path) -> None:
    # The same engine code against the raw 0.2.5 wheel: the names 0.2.5 removed (fp8_mqa_logits,
    # fp8_paged_mqa_logits) and the v1 name are missing, so the extract must notice.
    result = _child(tmp_path, _workdir("0.2.5"), dropin=False)
    outcomes = _outcomes(result)
    assert outcomes["test_dsa_ragged_prefill"] == "failed"
    assert outcomes["test_vllm_symbol_resolution"] == "failed"


# The reference tier imports no deep_gemm before the tests, so its install is always the early one.
IMPORT_CASES = [pytest.param("reference", True, id="reference-installed-first", marks=pytest.mark.slow)] + [
    pytest.param(r, d, id=f"{r}-{'installed-first' if d else 'installed-late'}", marks=pytest.mark.wheels)
    for r in ("0.1.4", "0.2.5", "sgl-kernel==0.3.21") for d in (True, False)]


@pytest.mark.parametrize(("release", "dropin"), IMPORT_CASES)
def test_import_forms(tmp_path: Path, release: str, dropin: bool) -> None:
    mode = ["--reference"] if release == "reference" else _workdir(release)
    result = _child(tmp_path, mode, dropin=dropin, tests=IMPORT_FORMS)
    outcomes = _outcomes(result)
    assert len(outcomes) == 4 and set(outcomes.values()) == {"passed"}, [
        (t["id"], t["outcome"], t["message"]) for t in result["tests"]]
