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

REPO = Path(__file__).resolve().parent.parent

__all__ = ["jit_env_fixture", "compiles", "serve_all", "install", "at_site", "cli", "serve", "as_reader",
           "SMALL", "SMALL_CODE"]


@pytest.fixture(name="jit_env")
def jit_env_fixture(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_dgcompat: None) -> dict[str, Any]:
    """A fake sgl-deep-gemm 0.1.4 with a JIT, first on the path of this process and of its workers."""
    site = tmp_path / "site"
    fake_jit.write_site(site)
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
        from dgcompat import jit_warmup as W
        from dgcompat.jit_warmup.calls import Runner
        from dgcompat.jit_warmup.spec import plan_calls
        from dgcompat.table import arch_family, current_arch
        W.use_jit_cache_dir({str(jit['cache'])!r})
        spec = {spec_code}
        r = Runner(0)
        for c in plan_calls(spec, family=arch_family(current_arch())):
            r.run(c.shape, c.m, c.form)
        print("served")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=jit["env"], timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout




# ---- installs in subprocesses: a moved install, read-only folders ---------------------------------------------

SMALL = "--dense 256,512 --ms 1,100"  # 4 calls, 3 kernels (block_m 64 and 128, the row-major scales' transpose)
SMALL_CODE = "W.WarmupSpec((W.DenseGemm(256, 512),), W.MPolicy.values([1, 100]))"

FAKE_SMI = "#!/bin/sh\necho 'NVIDIA H200, 9.0'\n"  # the warmup record needs a GPU model (nvidia-smi)


def install(base: Path, layout: str = "compiler", *, site: str = "site", revision: str = "") -> dict[str, str]:
    """A fake sgl-deep-gemm of JIT lineage ``layout`` in ``base/<site>`` and the fake NVCC and ``nvidia-smi`` in
    ``base/bin``: the environment of a process using them (``FAKE_NVCC_LOG``: one line per compile)."""
    fake_jit.write_site(base / site, layout, revision=revision)
    nvcc = fake_jit.write_nvcc(base / "bin")
    smi = base / "bin" / "nvidia-smi"
    smi.write_text(FAKE_SMI)
    smi.chmod(0o755)
    keep = {k: v for k, v in os.environ.items() if not k.startswith(("DG_JIT_", "DGCOMPAT_", "FAKE_"))}
    return {**keep, "PYTHONPATH": os.pathsep.join([str(base / site), str(REPO), str(REPO / "conformance")]),
            "PATH": os.pathsep.join([str(base / "bin"), keep.get("PATH", "")]),
            "DGCOMPAT_ALLOW_TORCH_MISMATCH": "1", "DGCOMPAT_ARCH": "sm90", "DG_JIT_NVCC_COMPILER": str(nvcc),
            "FAKE_NVCC_LOG": str(base / "nvcc.log"), "FAKE_NVCC_SECONDS": "0.05", "FAKE_JIT_LAYOUT": layout,
            "TORCH_DEVICE_BACKEND_AUTOLOAD": "0"}


def at_site(env: dict[str, str], site: Path) -> dict[str, str]:
    """``env`` with ``site`` as the installed deep_gemm instead."""
    rest = env["PYTHONPATH"].split(os.pathsep)[1:]
    return {**env, "PYTHONPATH": os.pathsep.join([str(site), *rest])}


def cli(env: dict[str, str], *args: str, timeout: float = 300, **kw: Any) -> subprocess.CompletedProcess[str]:
    """``python -m dgcompat warmup ARGS`` with ``env``."""
    return subprocess.run([sys.executable, "-m", "dgcompat", "warmup", *args], capture_output=True, text=True,
                          env=env, cwd=str(REPO), timeout=timeout, **kw, check=False)


def serve(env: dict[str, str], cache: Path, spec_code: str = SMALL_CODE, **kw: Any) -> int:
    """Make every call of ``spec_code`` in a fresh process whose only setting is ``DG_JIT_CACHE_DIR`` = ``cache``;
    the kernels it compiled (new lines in the fake NVCC's log)."""
    log = Path(env["FAKE_NVCC_LOG"])
    before = len(compiles(log))
    code = textwrap.dedent(f"""
        import os
        from dgcompat import jit_warmup as W
        from dgcompat.jit_warmup.calls import Runner
        from dgcompat.jit_warmup.spec import plan_calls
        os.environ["DG_JIT_CACHE_DIR"] = {str(cache)!r}
        r = Runner(0)
        for c in plan_calls({spec_code}, family="sm90"):
            r.run(c.shape, c.m, c.form)
        print("served")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300, **kw, check=False)
    assert out.returncode == 0 and "served" in out.stdout, out.stderr[-3000:]
    return len(compiles(log)) - before


def _no_dac_override() -> None:
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(24, 1, 0, 0, 0) != 0:  # PR_CAPBSET_DROP CAP_DAC_OVERRIDE: at exec, root loses it too
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP)")


def as_reader() -> dict[str, Any]:
    """``subprocess`` arguments that make the child unable to write a folder made read-only with
    :func:`testsupport.folders.readonly`: as root (whom permission bits do not stop) the child gives up
    ``CAP_DAC_OVERRIDE`` first; skips the test where root cannot (no ``CAP_SETPCAP``)."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0):
        return {}
    try:
        subprocess.run(["true"], preexec_fn=_no_dac_override, capture_output=True, check=True)
    except (subprocess.SubprocessError, OSError):
        pytest.skip("running as root without CAP_SETPCAP: a read-only folder cannot be made read-only for root")
    return {"preexec_fn": _no_dac_override}
