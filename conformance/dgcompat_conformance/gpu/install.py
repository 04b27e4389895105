"""Installs of GPU-tier subjects, each into a fresh folder, and what a child of an installed one sees.

A wheel release goes in with ``pip install --no-index --no-deps --target`` together with the
apache-tvm-ffi wheel its metadata pins (:func:`install_wheel`); a plain ``deep_gemm`` folder is
copied (:func:`install_folder`); a bundled site's ``deep_gemm`` is copied with its kernel wheel's
dist-info (:func:`install_site`). :func:`detect_site` asks dgcompat's detection, in a child, what
an installed copy is; :func:`release_env` is the environment of every child of one subject.
"""

from __future__ import annotations

import hashlib
import importlib.metadata as md
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

from packaging.requirements import InvalidRequirement, Requirement
from packaging.version import Version

from dgcompat._tooling import hookless_env

from .._paths import import_path
from .._text import short
from ..dists import SGL_DEEP_GEMM, TVM_FFI, canonical
from ..wheelcache import CacheError, sha256_file, verify, wheels_of
from .subject import Subject

__all__ = ["find_wheel", "tvm_ffi_pin", "install_release", "install_wheel", "install_folder", "install_site",
           "folder_digest", "detect_site", "release_env", "PipInstall"]


class PipInstall(Protocol):
    """How a wheel and its extra wheels get into a target folder (:func:`install_release`)."""

    def __call__(self, wheel: Path, extra: Iterable[Path], target: Path, *, python: str = ...) -> None: ...


def find_wheel(dirs: Sequence[Path], dist: str, version: str) -> Path | None:
    """The wheel of ``dist==version`` in any of ``dirs`` (searched recursively, names read by
    :func:`packaging.utils.parse_wheel_filename`), or None. A damaged one raises :class:`CacheError`."""

    wanted = Version(version)
    for d in dirs:
        if not d.is_dir():
            continue
        hits = wheels_of(dist, wanted, sorted(d.rglob("*.whl")))
        if hits:
            problem = verify(hits[0])
            if problem is not None:
                raise CacheError(f"{hits[0]} is {problem}")
            return hits[0]
    return None


def tvm_ffi_pin(wheel: Path) -> str | None:
    """The ``apache-tvm-ffi`` version a wheel's metadata pins (``Requires-Dist: apache-tvm-ffi==X``, no extra)."""

    with zipfile.ZipFile(wheel) as zf:
        infos = sorted({n.split("/", 1)[0] for n in zf.namelist() if n.split("/", 1)[0].endswith(".dist-info")})
        requires = [r for info in infos for r in md.PathDistribution(zipfile.Path(zf, f"{info}/")).requires or []]
    for text in requires:
        try:
            req = Requirement(text)
        except InvalidRequirement:
            continue
        pins = [s.version for s in req.specifier if s.operator == "=="]
        if canonical(req.name) == TVM_FFI and pins and not (req.marker and "extra" in str(req.marker)):
            return pins[0]
    return None


def install_release(wheel: Path, extra: Iterable[Path], target: Path, *, python: str = sys.executable) -> None:
    """``pip install --no-index --no-deps --target target wheel extra...`` into a fresh folder."""
    if target.exists():
        shutil.rmtree(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    cmd = [python, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
           "--disable-pip-version-check", "--target", str(target), str(wheel), *map(str, extra)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install of {wheel.name} failed: {short(proc.stderr or proc.stdout, 400)}")


def install_folder(source: Path, target: Path) -> None:
    """Copy a plain ``deep_gemm`` package folder to ``target/deep_gemm`` (a fresh folder, no caches)."""
    if not (source / "__init__.py").is_file():
        raise RuntimeError(f"{source} is not a deep_gemm package folder (no __init__.py)")
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(source, target / "deep_gemm", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def install_site(source: Path, target: Path) -> list[str]:
    """Copy a site folder's ``deep_gemm`` package and its ``*.dist-info`` folders to ``target`` (fresh).

    This is how a bundled copy is laid out once its kernel wheel is installed (``deep_gemm/`` next to
    ``sglang_kernel-0.4.2.dist-info/``, whose RECORD lists the ``deep_gemm`` files); the rest of the
    kernel wheel is not needed by deep_gemm. Returns the dist-info folder names copied.
    """
    if not (source / "deep_gemm" / "__init__.py").is_file():
        raise RuntimeError(f"{source} holds no deep_gemm package (no deep_gemm/__init__.py)")
    infos = sorted(p for p in source.iterdir() if p.is_dir() and p.name.endswith(".dist-info"))
    if target.exists():
        shutil.rmtree(target)
    target.mkdir(parents=True)
    shutil.copytree(source / "deep_gemm", target / "deep_gemm", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for info in infos:
        shutil.copytree(info, target / info.name)
    return [p.name for p in infos]


_DETECT_PROBE = r"""
import json
import dgcompat.detection as d
r = d.release()
print(json.dumps({"label": r.label, "dist": r.dist, "version": None if r.version is None else str(r.version),
                  "source": r.source, "binding": r.binding, "owner": r.owner, "known": r.known,
                  "location": r.location, "refusal": r.refusal, "problems": list(r.problems),
                  "surface": r.surface, "surface_note": r.surface_note, "installed_as": r.installed_as}))
"""


def detect_site(site: Path, python: str = sys.executable) -> dict[str, Any]:
    """What :func:`dgcompat.detection.release` says about the deep_gemm in ``site`` (read in a child that
    imports neither torch nor deep_gemm, with ``site`` first on its path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *import_path()]), DGCOMPAT_BACKEND="deep_gemm")
    proc = subprocess.run([python, "-c", _DETECT_PROBE], capture_output=True, text=True, timeout=120, env=env,
                          cwd=str(site), check=False)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        raise RuntimeError(f"detection in {site} gave no answer: {short(proc.stderr, 400)}")
    found: dict[str, Any] = json.loads(line)
    return found


def folder_digest(folder: Path) -> dict[str, Any]:
    """What identifies a folder subject: its path, file count and the sha256 of its Python layer and libraries."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    key = [p for p in files if p.suffix in (".py", ".so") and "include" not in p.relative_to(folder).parts]
    h = hashlib.sha256()
    for p in key:
        h.update(str(p.relative_to(folder)).encode() + b"\0")
        with p.open("rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    return {"folder": str(folder), "files": len(files), "sha256_py_and_so": h.hexdigest()}


def install_wheel(subject: Subject, wheel_record: dict[str, Any], site: Path, wheel_dirs: Sequence[Path],
                  python: str, *, pip_install: PipInstall = install_release) -> None:
    """Install a wheel subject into ``site`` with its pinned apache-tvm-ffi wheel (:func:`install_release` unless
    ``pip_install`` says otherwise); ``wheel_record`` gets the files, their hashes and the pin (the certificate's
    ``wheel``), before pip runs: a failed install still names what it installed."""
    version = subject.release
    wheel = find_wheel(wheel_dirs, SGL_DEEP_GEMM, version)
    if wheel is None:
        raise RuntimeError(f"no {SGL_DEEP_GEMM} {version} wheel in {', '.join(map(str, wheel_dirs))}")
    extra: list[Path] = []
    pin = tvm_ffi_pin(wheel)
    wheel_record.update({"file": wheel.name, "sha256": sha256_file(wheel), "apache_tvm_ffi": pin})
    if pin:
        tvm = find_wheel(wheel_dirs, TVM_FFI, pin)
        if tvm is None:
            raise RuntimeError(f"{wheel.name} needs apache-tvm-ffi=={pin}, and no such wheel is in "
                               f"{', '.join(map(str, wheel_dirs))}")
        wheel_record["apache_tvm_ffi_file"] = tvm.name
        extra.append(tvm)
    pip_install(wheel, extra, site, python=python)


def release_env(site: Path, jit_dir: Path) -> dict[str, str]:
    """The environment of every child of one release: its folder first, then this repository; without the
    install hook (a child binding the hook's dgcompat before its release is on the path certifies nothing)."""
    env = hookless_env(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *import_path()])
    env["DG_JIT_CACHE_DIR"] = str(jit_dir)  # each release compiles into its own cache
    env["DGCOMPAT_BACKEND"] = "deep_gemm"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["DGCOMPAT_CASES_FAST_EXIT"] = "1"  # a case child exits once its result is printed (no teardown)
    for name in ("DGCOMPAT_ALLOW_TORCH_MISMATCH", "DGCOMPAT_TRUST_SCHEDULES", "DGCOMPAT_DEBUG", "DGCOMPAT_ARCH"):
        env.pop(name, None)
    return env
