"""The fake-JIT environment of the warmup tests: a fake sgl-deep-gemm whose JIT runs a fake NVCC
(testsupport/fake_jit), first on the path of the test process and of the workers it spawns."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from testsupport import fake_jit
from testsupport.dists import write_dist

REPO = Path(__file__).resolve().parent.parent

__all__ = ["jit_env_fixture", "compiles", "serve_all"]


@pytest.fixture(name="jit_env")
def jit_env_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_dgcompat: None) -> dict[str, Any]:
    """A fake sgl-deep-gemm 0.1.4 with a JIT, first on the path of this process and of its workers."""
    site = tmp_path / "site"
    write_dist(site, "sgl-deep-gemm", "0.1.4", {"deep_gemm/__init__.py": fake_jit.source("0.1.4")})
    nvcc = fake_jit.write_nvcc(tmp_path / "bin")
    env = {"PYTHONPATH": os.pathsep.join([str(site), str(REPO), str(REPO / "conformance")]),
           "DGCOMPAT_ALLOW_TORCH_MISMATCH": "1", "DGCOMPAT_ARCH": "sm90", "DG_JIT_NVCC_COMPILER": str(nvcc),
           "FAKE_NVCC_LOG": str(tmp_path / "nvcc.log"), "FAKE_NVCC_SECONDS": "0.05"}
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("DG_JIT_USE_NVRTC", raising=False)
    monkeypatch.syspath_prepend(str(site))
    dgcompat.reset()
    return {"env": {**os.environ, **env}, "cache": tmp_path / "cache", "log": tmp_path / "nvcc.log",
            "site": site}


def compiles(log: Path) -> list[str]:
    return log.read_text().splitlines() if log.exists() else []


def serve_all(jit: dict[str, Any], spec_code: str) -> str:
    """Make every call of the spec in a fresh process on the warm cache; return its stdout."""
    code = textwrap.dedent(f"""
        import dgcompat
        from dgcompat import jit_warmup as W
        from dgcompat.jit_warmup.calls import Runner
        from dgcompat.jit_warmup.spec import plan_calls
        from dgcompat.table import arch_family, current_arch
        dgcompat.use_jit_cache_dir({str(jit['cache'])!r})
        spec = {spec_code}
        r = Runner(0)
        for c in plan_calls(spec, family=arch_family(current_arch())):
            r.run(c.shape, c.m, c.form)
        print("served")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=jit["env"], timeout=300)
    assert out.returncode == 0, out.stderr
    return out.stdout


