"""Packaging: one version source, a wheel that installs and runs `doctor` in a fresh virtualenv."""

from __future__ import annotations

import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import dgcompat

ROOT = Path(__file__).parent.parent


def test_single_version_source() -> None:
    assert md.version("dgcompat") == dgcompat.__version__


def _clean_source(target: Path) -> Path:
    """The files a wheel is built from, copied to ``target``: never the checkout's own build/ folder, where
    setuptools keeps every module it ever copied (a module since moved or removed would ship in the wheel)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    target.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, target / name)
    shutil.copytree(ROOT / "dgcompat", target / "dgcompat", ignore=ignore)
    shutil.copytree(ROOT / "conformance" / "dgcompat_conformance", target / "conformance" / "dgcompat_conformance",
                    ignore=ignore)
    return target


@pytest.mark.slow
def test_wheel_installs_and_runs_doctor(tmp_path: Path) -> None:
    out = tmp_path / "dist"
    source = _clean_source(tmp_path / "source")
    # cwd outside the project so that a local folder named build/ cannot shadow the build package.
    proc = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "--outdir", str(out),
                           str(source)], cwd=tmp_path, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    wheel = next(out.glob("dgcompat-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "dgcompat/py.typed" in names and "dgcompat_conformance/conform.py" in names
    assert "dgcompat/_install/_startup/sitecustomize.py" in names  # the launcher's start-up hook
    assert "dgcompat_conformance/layout.py" not in names  # the import scanner is test support (testsupport/)
    # Nothing under a generic top-level name: only dgcompat/ and dgcompat_conformance/.
    assert {n.split("/")[0] for n in names if "/" in n and ".dist-info/" not in n} == {"dgcompat", "dgcompat_conformance"}

    env_dir = tmp_path / "venv"
    # The fresh environment sees the machine's torch and packaging (system site-packages) but gets
    # dgcompat only from the wheel.
    venv.EnvBuilder(with_pip=True, system_site_packages=True).create(env_dir)
    py = env_dir / "bin" / "python"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH" and not k.startswith("DGCOMPAT_")}
    proc = subprocess.run([str(py), "-m", "pip", "install", "--no-deps", "--quiet", str(wheel)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    proc = subprocess.run([str(env_dir / "bin" / "dgcompat"), "doctor", "--json", "--no-abi"], capture_output=True,
                          text=True, timeout=300, env=env, cwd=tmp_path, check=False)
    assert proc.returncode in (0, 1), proc.stderr[-2000:]
    data = json.loads(proc.stdout)
    assert data["dgcompat"] == dgcompat.__version__ and "capabilities" in data and "pin" in data
    where = subprocess.run([str(py), "-c", "import dgcompat; print(dgcompat.__file__)"], capture_output=True,
                           text=True, timeout=120, env=env, cwd=tmp_path, check=False).stdout.strip()
    assert where.startswith(str(env_dir)), f"dgcompat was imported from {where}, not from the installed wheel"
    # The certification wing ships whole: the intake package, the one wheel cache and certificate
    # reader, and the committed certificates, which the installed `dgcompat pin` reads and checks.
    for name in ("dgcompat_conformance/intake/newest.py", "dgcompat_conformance/wheelcache.py",
                 "dgcompat_conformance/certificate.py", "dgcompat_conformance/certificates/gpu-0.1.4.json"):
        assert name in names, name
    proc = subprocess.run([str(py), "-m", "dgcompat", "pin", "--release", "0.1.4"], capture_output=True, text=True,
                          timeout=300, env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    status = proc.stdout.splitlines()[-1]
    assert status.startswith("# certificates: ") and "cpu-tier: PASS" in status, status
    assert "gpu: certified on NVIDIA H200" in status, status
    # The launcher from the installed wheel: the command's interpreter has dgcompat installed as deep_gemm.
    proc = subprocess.run([str(env_dir / "bin" / "dgcompat"), "run", "--", str(py), "-c",
                           "import dgcompat; print(dgcompat.installed_as_deep_gemm(), dgcompat.__file__)"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    flag, origin = proc.stdout.split()
    assert flag == "True" and origin.startswith(str(env_dir)), proc.stdout
