"""The CPU tier over every published sgl-deep-gemm wheel: the real Python layer of each release,
its native library replaced by signature-checked stand-ins computing with the reference backend."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dgcompat.detection import KNOWN_SGL_DEEP_GEMM


@pytest.mark.wheels
def test_every_published_release_is_certified(tmp_path: Path) -> None:
    out = tmp_path / "certs"
    proc = subprocess.run([sys.executable, "-m", "dgcompat", "conform", "--all", "--jobs", "2", "--out", str(out)],
                          capture_output=True, text=True, timeout=3000, check=False)
    print(proc.stdout[-6000:])
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    found = {}
    for path in out.glob("*.json"):
        cert = json.loads(path.read_text())
        found[cert["release"]] = cert
    assert sorted(found) == sorted(KNOWN_SGL_DEEP_GEMM)
    for release, cert in found.items():
        counts = {k: sum(1 for t in cert["tests"] if t["outcome"] == k) for k in cert["summary"]}
        assert counts == cert["summary"], f"{release}: summary does not equal the per-test list"
        assert cert["summary"]["failed"] == 0 and cert["summary"].get("error", 0) == 0, release
        assert cert["summary"]["passed"] >= 100, f"{release}: only {cert['summary']['passed']} tests passed"


@pytest.mark.wheels
def test_vllm_0_34_is_certified_on_the_cpu_tier(tmp_path: Path) -> None:
    """vLLM 0.34.0's vendored 2.8.1 (its schema defaults, its argument names, the SM90 KV-multicast launch).

    The ~240 MB engine wheel is not downloaded by the test: it is looked for where the wheel cache keeps engine
    wheels (``$DGCOMPAT_CACHE/vllm``)."""
    from dgcompat_conformance.releases import parse_release
    from dgcompat_conformance.wheels import find_cached_wheel

    if find_cached_wheel(parse_release("vllm-0.34.0")) is None:
        pytest.skip("the vllm 0.34.0 wheel is not in the wheel cache's engine folder ($DGCOMPAT_CACHE/vllm)")
    out = tmp_path / "certs"
    proc = subprocess.run([sys.executable, "-m", "dgcompat", "conform", "--release", "vllm-0.34.0", "--out", str(out)],
                          capture_output=True, text=True, timeout=1200, check=False)
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    cert = json.loads((out / "vllm-0.34.0.json").read_text())
    assert cert["verdict"] == "PASS" and cert["summary"]["failed"] == 0 and cert["summary"]["passed"] >= 100
    assert cert["standins"]["not_emulated"] == [] and cert["standins"]["hangs"] == []
