"""The GPU-tier runner: certify published deep_gemm releases on this machine's GPU and torch.

A subject is one of:

- an sgl-deep-gemm release (``--releases``): its wheel, plus the apache-tvm-ffi wheel its metadata
  pins (``Requires-Dist: apache-tvm-ffi==X``; the wheel folders are searched in the order given),
  installed with ``pip install --no-index --no-deps --target``;
- a plain ``deep_gemm`` package folder (``--folder PATH --release-id ID``), e.g. the upstream
  DeepGEMM 2.8.1 copy taken out of the vllm 0.33.0 wheel's ``vllm/third_party/deep_gemm``; the
  certificate records the folder's file hashes and, for a stable-ABI build, which torch it was
  built for against the torch it ran on (:func:`stable_abi_note`);
- a bundled copy (``--site DIR``): a site folder holding the ``deep_gemm`` package of a kernel
  wheel next to that wheel's dist-info (``sglang_kernel-0.4.2.dist-info``), as installing the
  wheel lays it out. dgcompat's own detection must call it a bundled copy; the release id is
  ``<dist>-<version>`` (``sglang-kernel-0.4.2``), the table's bundled rows apply, and the
  certificate's ``subject`` reads ``sglang-kernel 0.4.2 (bundled deep_gemm)``.

For each subject, in its own folder ``<work>/<release>/`` (its ``site/`` and its own JIT cache
``jit/``: two deep_gemm builds never share a folder, a cache or a process):

1. install it, then check that detection (:func:`detect_site`, in a child) names the subject:
   a copy detected as another release is never certified under this one's name;
2. run the ABI health check (:mod:`.abi`) in a child: dgcompat must bind the release and two tiny
   calls must see their tensors. A release that fails is certified ``incompatible`` with the torch
   it was built for (from :data:`dgcompat.detection.EXPECTED_TORCH`); where dgcompat refused it for
   that reason, the check is repeated with ``DGCOMPAT_ALLOW_TORCH_MISMATCH=1`` to record what the
   mismatch actually does (load failure or mis-read tensors);
3. run every case (:mod:`.cases`) in its own child process under a watchdog: a case that prints no
   result before its deadline is recorded as a ``hang``, its process group is killed, and the run
   goes on with the next case;
4. write ``<out>/gpu-<release>.json`` as soon as the subject is done: the same certificate as the
   CPU tier (schema, release, distribution, binding, dgcompat version, torch, python, platform,
   device, timestamp, tests, summary), with tier ``"gpu"``, the CUDA and driver versions, the ABI
   result, what detection said and a verdict.

Subjects run side by side (``--jobs N``; each has one case child at a time, so at most N case
children share the GPU). ``--deadline S`` (the whole call) and ``--release-timeout S`` (each
subject) bound the time: no case starts with less than :data:`MIN_CASE_S` left, a case's watchdog
never runs past the deadline, and a case cut short by it is listed under ``not_run`` (never as a
hang); such a certificate's verdict is ``incomplete: ...`` unless a case failed. SIGTERM or
SIGINT stops the run the same way and kills the children (:func:`stop_children`); certificates
already written stay. A summary table ends the output.

Usage (any machine with a CUDA GPU, a CUDA-13 torch and nvcc; docs/gpu-tier.md has the one-call
certification of every release the H200's torch loads)::

    python -m dgcompat_conformance.gpu.runner --wheels ~/.cache/dgcompat/wheels --releases 0.1.4 0.1.5
    python -m dgcompat_conformance.gpu.runner --wheels A --wheels B --releases 0.0.1,0.1.4 --jobs 2 --deadline 500
    python -m dgcompat_conformance.gpu.runner --wheels DIR --abi-only 0.2.2 0.2.5
    python -m dgcompat_conformance.gpu.runner --folder vendor/deep_gemm --release-id vllm-0.33.0
    python -m dgcompat_conformance.gpu.runner --site sgk-site     # deep_gemm/ + sglang_kernel-0.4.2.dist-info/
    python -m dgcompat_conformance.gpu.runner --table        # regenerate docs/compatibility-gpu.md only

Certificates go to ``--out`` (default ``<results>/gpu``, outside any checkout: see
:mod:`dgcompat_conformance.results`). ``--publish`` then copies them into the certificates shipped with
dgcompat_conformance and regenerates the compatibility table, printing every file it writes; nothing
else writes into a checkout.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as _dt
import hashlib
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, Sequence

from .. import certificate
from .._args import positive_int, positive_seconds
from .._paths import import_path, wing_root
from ..certificate import CASE_OUTCOMES, SCHEMA, CertificateError
from ..dists import SGL_DEEP_GEMM, TVM_FFI, canonical
from ..results import results_dir
from ..wheelcache import CacheError, confined, parse_name, sha256_file, verify
from . import abi as _abi
from .cases import CASES

__all__ = [
    "SCHEMA", "OUTCOMES", "Subject", "Deadline", "certify", "certify_release", "certify_folder", "install_site",
    "detect_site", "bundle_release_id", "stop_children", "environment_info", "find_wheel", "install_release",
    "load_certificates", "write_certificate", "render_markdown", "publish", "write_docs", "main",
]

TIER = "gpu"
OUTCOMES = CASE_OUTCOMES
SGL = SGL_DEEP_GEMM

DEFAULT_DOCS = wing_root().parent / "docs" / "compatibility-gpu.md"  # in a checkout

_print_lock = threading.Lock()


def _say(text: str) -> None:
    with _print_lock:
        print(text, flush=True)


def _short(text: str, limit: int = 800) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


# --- wheels and installs -------------------------------------------------------------------------

def find_wheel(dirs: Sequence[Path], dist: str, version: str) -> Path | None:
    """The wheel of ``dist==version`` in any of ``dirs`` (searched recursively, names read by
    :func:`packaging.utils.parse_wheel_filename`), or None. A damaged one raises :class:`CacheError`."""
    from packaging.version import Version

    wanted = Version(version)
    for d in dirs:
        if not d.is_dir():
            continue
        hits = []
        for p in sorted(d.rglob("*.whl")):
            try:
                name, ver = parse_name(p.name)
            except CacheError:
                continue
            if name == canonical(dist) and ver == wanted:
                hits.append(p)
        if hits:
            problem = verify(hits[0])
            if problem is not None:
                raise CacheError(f"{hits[0]} is {problem}")
            return hits[0]
    return None


def tvm_ffi_pin(wheel: Path) -> str | None:
    """The ``apache-tvm-ffi`` version a wheel's metadata pins (``Requires-Dist: apache-tvm-ffi==X``, no extra)."""
    import importlib.metadata as md

    from packaging.requirements import InvalidRequirement, Requirement

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
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"pip install of {wheel.name} failed: {_short(proc.stderr or proc.stdout, 400)}")


def release_env(site: Path, jit_dir: Path) -> dict[str, str]:
    """The environment of every child of one release: its folder first, then this repository."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *import_path()])
    env["DG_JIT_CACHE_DIR"] = str(jit_dir)  # each release compiles into its own cache
    env["DGCOMPAT_BACKEND"] = "deep_gemm"
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["DGCOMPAT_CASES_FAST_EXIT"] = "1"  # a case child exits once its result is printed (no teardown)
    for name in ("DGCOMPAT_ALLOW_TORCH_MISMATCH", "DGCOMPAT_TRUST_SCHEDULES", "DGCOMPAT_DEBUG", "DGCOMPAT_ARCH"):
        env.pop(name, None)
    return env


# --- the machine ---------------------------------------------------------------------------------

_ENV_PROBE = r"""
import json, platform, subprocess
info = {"python": platform.python_version(), "platform": platform.platform()}
try:
    import torch
    info["torch"] = torch.__version__
    info["cuda"] = torch.version.cuda
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(torch.cuda.current_device())
        info["device"] = {"name": p.name, "sm": f"sm{p.major}{p.minor}", "num_sms": p.multi_processor_count,
                          "memory_gib": round(p.total_memory / 2**30, 1)}
except Exception as exc:
    info["torch_error"] = f"{type(exc).__name__}: {exc}"
driver = None
try:
    import pynvml
    pynvml.nvmlInit()
    driver = pynvml.nvmlSystemGetDriverVersion()
    driver = driver.decode() if isinstance(driver, bytes) else driver
except Exception:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        driver = out[0].strip() if out else None
    except Exception:
        driver = None
info["driver"] = driver
print(json.dumps(info))
"""


def environment_info(python: str = sys.executable) -> dict[str, Any]:
    """torch, CUDA, driver, Python, platform and device of this machine (probed in a child)."""
    proc = subprocess.run([python, "-c", _ENV_PROBE], capture_output=True, text=True, timeout=300)
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        return {"python": platform.python_version(), "platform": platform.platform(),
                "probe_error": _short(proc.stderr, 400)}
    info: dict[str, Any] = json.loads(line)
    return info


def _dgcompat_version() -> str | None:
    try:
        from dgcompat import __version__

        return __version__
    except ImportError:
        return None


# --- stopping: deadlines and a terminated run ----------------------------------------------------

#: Set when the runner is told to stop (SIGTERM/SIGINT): no new child starts, and what was cut short
#: is recorded as not run rather than as a hang or an error.
_STOP = threading.Event()

#: A case is not started with less than this many seconds left (a child alone takes ~5 s to start).
MIN_CASE_S = 20.0


@dataclass(frozen=True)
class Deadline:
    """When one subject's run must end: ``time.monotonic()`` seconds, or None for no limit."""

    at: float | None = None

    @staticmethod
    def earliest(*ats: float | None) -> "Deadline":
        known = [a for a in ats if a is not None]
        return Deadline(min(known) if known else None)

    def left(self) -> float:
        """Seconds left (``inf`` without a limit, 0 once stopped)."""
        if _STOP.is_set():
            return 0.0
        return math.inf if self.at is None else max(0.0, self.at - time.monotonic())

    def limit(self, timeout: float) -> tuple[float, bool]:
        """``(seconds a child may run, whether the deadline shortened it below timeout)``."""
        left = self.left()
        return (timeout, False) if left >= timeout else (left, True)


def _own_children() -> list[int]:
    """The pids of this process's direct children (read from /proc; empty where there is none)."""
    me, pids = os.getpid(), []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if len(fields) > 1 and fields[1] == str(me):
            pids.append(int(stat.parent.name))
    return pids


def stop_children(signum: int = signal.SIGTERM, frame: Any = None) -> None:
    """Stop the run: no new case starts, and every child this process started (case and ABI children are
    session leaders: their whole group, nvcc included) is killed. Certificates of what finished are kept."""
    _STOP.set()
    for pid in _own_children():
        try:
            if os.getpgid(pid) == pid:
                os.killpg(pid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            continue


# --- running one release -------------------------------------------------------------------------

def run_case_child(case_id: str, env: dict[str, str], timeout: float, cwd: Path,
                   python: str = sys.executable, *, cut_short: bool = False) -> dict[str, Any]:
    """Run one case in a child under a watchdog; return its record (``hang`` past the deadline).

    With ``cut_short`` the watchdog is a run deadline shorter than the case's own: expiring it is
    recorded as outcome ``"cut"`` (the case did not finish in the time left), never as a hang; so is a
    child killed because the run was stopped.
    """
    case = CASES[case_id]
    base = {"id": case_id, "metric": case.metric, "tolerance": case.tolerance, "value": None}
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-m", "dgcompat_conformance.gpu.cases", case_id], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(cwd), start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _abi.kill_group(proc)
        wall = round(time.perf_counter() - t0, 3)
        if cut_short or _STOP.is_set():
            return {**base, "outcome": "cut", "duration": wall,
                    "message": f"cut short after {wall:.0f} s: the run's deadline came first"}
        return {**base, "outcome": "hang", "duration": wall,
                "message": f"no result within {timeout:.0f} s; the child's process group was killed"}
    wall = round(time.perf_counter() - t0, 3)
    rec = None
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                cand = json.loads(line)
            except ValueError:
                continue
            if isinstance(cand, dict) and cand.get("id") == case_id:
                rec = cand
                break
    if rec is None:
        if _STOP.is_set():
            return {**base, "outcome": "cut", "duration": wall, "message": "the run was stopped"}
        tail = [ln for ln in (stderr or stdout).strip().splitlines() if ln.strip()][-6:]
        return {**base, "outcome": "error", "duration": wall,
                "message": _short(f"the child exited with status {proc.returncode} without a result: "
                                  + " | ".join(tail), 1500)}
    rec["child_duration"] = rec.get("duration")
    rec["duration"] = wall
    return rec


def _test_entry(rec: dict[str, Any]) -> dict[str, Any]:
    out = {"id": rec["id"], "outcome": rec["outcome"], "duration": float(rec.get("duration") or 0.0),
           "metric": rec.get("metric"), "tolerance": rec.get("tolerance"), "value": rec.get("value"),
           "message": str(rec.get("message") or "")}
    for extra in ("summary", "checks", "child_duration", "traceback"):
        if rec.get(extra) is not None:
            out[extra] = rec[extra]
    return out


def summarize(tests: Iterable[dict[str, Any]]) -> dict[str, int]:
    """Counts per GPU-case outcome (:data:`~dgcompat_conformance.certificate.CASE_OUTCOMES`)."""
    return certificate.summarize(tests, CASE_OUTCOMES)


def _abi_summary(abi: dict[str, Any], forced: dict[str, Any] | None) -> dict[str, Any]:
    keep = ("ok", "verdict", "detail", "load", "calls", "expected_torch", "torch", "torch_ok", "release", "binding",
            "cuda_initialized_by_import", "seconds")
    out = {k: abi.get(k) for k in keep if k in abi}
    out["ok"] = bool(abi.get("ok"))
    if forced is not None:
        out["with_mismatch_allowed"] = {k: forced.get(k) for k in keep if k in forced}
    return out


def _incompatible_verdict(abi: dict[str, Any], forced: dict[str, Any] | None, env_info: dict[str, Any]) -> str:
    found = abi.get("torch") or env_info.get("torch")
    expected = abi.get("expected_torch")
    if expected and abi.get("torch_ok") is False:
        return f"incompatible: built for torch{expected}, found {found}"
    detail = forced.get("verdict") if forced else abi.get("verdict")
    return f"incompatible: ABI check failed on torch {found} ({detail})"


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
                  "location": r.location, "refusal": r.refusal, "problems": list(r.problems)}))
"""


def detect_site(site: Path, python: str = sys.executable) -> dict[str, Any]:
    """What :func:`dgcompat.detection.release` says about the deep_gemm in ``site`` (read in a child that
    imports neither torch nor deep_gemm, with ``site`` first on its path)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), *import_path()]), DGCOMPAT_BACKEND="deep_gemm")
    proc = subprocess.run([python, "-c", _DETECT_PROBE], capture_output=True, text=True, timeout=120, env=env,
                          cwd=str(site))
    line = next((ln for ln in reversed(proc.stdout.splitlines()) if ln.startswith("{")), None)
    if line is None:
        raise RuntimeError(f"detection in {site} gave no answer: {_short(proc.stderr, 400)}")
    found: dict[str, Any] = json.loads(line)
    return found


def bundle_release_id(found: dict[str, Any]) -> str:
    """``"sglang-kernel-0.4.2"`` for a bundled copy detection identified; RuntimeError for anything else."""
    if found.get("source") != "bundled" or not found.get("dist") or not found.get("version"):
        raise RuntimeError(f"dgcompat detects {found.get('label')!r} (source {found.get('source')!r}), not a copy "
                           f"bundled in a kernel wheel" + (f": {found['refusal']}" if found.get("refusal") else ""))
    return f"{found['dist']}-{found['version']}"


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


def _built_for(release_id: str) -> str | None:
    """The torch a vendored copy was built for, from its engine wheel's METADATA (a folder does not say)."""
    from ..harness.releases import VENDORED_FACTS

    facts = VENDORED_FACTS.get(release_id)
    return None if facts is None else f"{facts.built_for} (the torch the engine wheel pins)"


def stable_abi_note(cert: dict[str, Any], built_for: str | None) -> str | None:
    """What a passing run of a stable-ABI build on another torch proves (None when it does not apply)."""
    """What a passing run of a stable-ABI build on another torch proves (None when it does not apply)."""
    abi = cert.get("abi") or {}
    if cert.get("binding") != "stable-abi" or not built_for:
        return None
    ran_on = cert.get("torch")
    s = cert.get("summary") or {}
    passed = cert.get("verdict") == "certified"
    head = (f"ran on torch {ran_on} while built for torch {built_for}. The native library is a stable-ABI build: "
            f"it imports only torch's C shim (aoti_torch_*/torch_* functions) and none of torch's C++ symbols, and "
            f"dgcompat reads its minimum torch from those imports (torch{abi.get('expected_torch') or '>=?'}).")
    if passed:
        return (head + f" It loaded and all {s.get('passed', 0)} cases matched the reference: this proves the "
                "stable ABI held from the build torch down to this one for every function this build imports "
                "(op registration, tensor metadata, streams, the dispatcher). It does not prove torch versions "
                "older than that minimum, nor other builds.")
    return head + f" Verdict {cert.get('verdict')}: the run does not show the stable ABI holding on this torch."


@dataclass(frozen=True)
class Subject:
    """One thing to certify, installed into its own folder ``<work>/<release>/site``.

    ``kind`` is ``"wheel"`` (an sgl-deep-gemm release from the wheel folders, ``release`` its
    version), ``"folder"`` (a plain ``deep_gemm`` package folder, ``release`` the id given) or
    ``"site"`` (a site folder holding a bundled ``deep_gemm`` and its kernel wheel's dist-info;
    ``release`` is ``<dist>-<version>`` as detection reads it, e.g. ``sglang-kernel-0.4.2``).
    """

    kind: str
    release: str
    source: Path | None = None
    abi_only: bool = False
    built_for_torch: str | None = None
    detected: dict[str, Any] | None = None  # for a site: what detection said about the source folder


def _distribution(subject: Subject) -> str:
    if subject.kind == "wheel":
        return SGL
    if subject.kind == "site" and subject.detected and subject.detected.get("dist"):
        return str(subject.detected["dist"])
    return "deep-gemm"


def _install_wheel(subject: Subject, cert: dict[str, Any], site: Path, wheel_dirs: Sequence[Path],
                   python: str) -> None:
    version = subject.release
    wheel = find_wheel(wheel_dirs, SGL, version)
    if wheel is None:
        raise RuntimeError(f"no {SGL} {version} wheel in {', '.join(map(str, wheel_dirs))}")
    extra: list[Path] = []
    pin = tvm_ffi_pin(wheel)
    cert["wheel"] = {"file": wheel.name, "sha256": sha256_file(wheel), "apache_tvm_ffi": pin}
    if pin:
        tvm = find_wheel(wheel_dirs, TVM_FFI, pin)
        if tvm is None:
            raise RuntimeError(f"{wheel.name} needs apache-tvm-ffi=={pin}, and no such wheel is in "
                               f"{', '.join(map(str, wheel_dirs))}")
        cert["wheel"]["apache_tvm_ffi_file"] = tvm.name
        extra.append(tvm)
    install_release(wheel, extra, site, python=python)


def _install_subject(subject: Subject, cert: dict[str, Any], site: Path, wheel_dirs: Sequence[Path],
                     python: str) -> None:
    """Put the subject into ``site`` (emptied first) and record what it was in ``cert``."""
    assert subject.kind == "wheel" or subject.source is not None
    if subject.kind == "wheel":
        _install_wheel(subject, cert, site, wheel_dirs, python)
    elif subject.kind == "folder":
        assert subject.source is not None
        cert["folder"] = folder_digest(subject.source.resolve())
        install_folder(subject.source.resolve(), site)
    elif subject.kind == "site":
        assert subject.source is not None
        cert["site"] = {**folder_digest(subject.source.resolve() / "deep_gemm"),
                        "dist_info": install_site(subject.source.resolve(), site)}
    else:
        raise ValueError(f"unknown subject kind {subject.kind!r}")


def _check_identity(subject: Subject, cert: dict[str, Any], site: Path, python: str) -> None:
    """Detection of the installed copy must name the subject, or its certificate would describe another release."""
    found = detect_site(site, python)
    cert["detected"] = {k: found.get(k) for k in ("label", "dist", "version", "source", "binding", "owner", "known")}
    if subject.kind == "wheel":
        ok = found.get("dist") == SGL and found.get("version") == subject.release
        cert["subject"] = f"{SGL} {subject.release}"
    elif subject.kind == "site":
        ok = found.get("source") == "bundled" and bundle_release_id(found) == subject.release
        cert["subject"] = f"{found.get('dist')} {found.get('version')} (bundled deep_gemm)"
    else:
        ok = True  # a folder is named by the id given; detection is recorded
        cert["subject"] = f"deep_gemm folder {subject.release} ({found.get('label')})"
    if not ok:
        raise RuntimeError(f"the installed copy is detected as {found.get('label')!r} "
                           f"(source {found.get('source')!r}), not as {subject.kind} {subject.release}")


def certify(subject: Subject, *, wheel_dirs: Sequence[Path], work: Path, env_info: dict[str, Any],
            case_ids: Sequence[str], timeout_scale: float = 1.0, abi_timeout: float = 240.0,
            deadline: Deadline = Deadline(), python: str = sys.executable) -> dict[str, Any]:
    """Install, identify, ABI-check and (unless ``subject.abi_only``) run every case for one subject.

    Cases not started (or cut short) before ``deadline`` are listed under ``not_run`` and the
    verdict is ``incomplete: ...`` unless a case failed; a runner fault is ``runner_error``.
    """
    t_start = time.perf_counter()
    cert = _new_certificate(subject.release, _distribution(subject), env_info)
    try:
        folder = confined(work, subject.release)  # the installers empty <folder>/site first
        site = folder / "site"
        _install_subject(subject, cert, site, wheel_dirs, python)
        _check_identity(subject, cert, site, python)
        _check_and_run(cert, subject.release, folder, site, env_info=env_info, case_ids=case_ids,
                       abi_only=subject.abi_only, timeout_scale=timeout_scale, abi_timeout=abi_timeout,
                       deadline=deadline, python=python)
    except Exception as exc:
        cert["runner_error"] = f"{type(exc).__name__}: {exc}"
        # A child killed by a stop (pip, detection) says nothing about the subject.
        cert["verdict"] = "incomplete: the run was stopped" if _STOP.is_set() else "failed"
    cert["summary"] = summarize(cert["tests"])
    cert["seconds"] = round(time.perf_counter() - t_start, 1)
    if subject.kind == "folder":
        note = stable_abi_note(cert, subject.built_for_torch or _built_for(subject.release))
        if note:
            cert["note"] = note
    return cert


def certify_release(version: str, *, wheel_dirs: Sequence[Path], work: Path, env_info: dict[str, Any],
                    case_ids: Sequence[str], abi_only: bool = False, timeout_scale: float = 1.0,
                    abi_timeout: float = 240.0, python: str = sys.executable) -> dict[str, Any]:
    """:func:`certify` for one sgl-deep-gemm release from ``wheel_dirs``."""
    return certify(Subject("wheel", version, abi_only=abi_only), wheel_dirs=wheel_dirs, work=work,
                   env_info=env_info, case_ids=case_ids, timeout_scale=timeout_scale, abi_timeout=abi_timeout,
                   python=python)


def certify_folder(source: Path, release_id: str, *, work: Path, env_info: dict[str, Any], case_ids: Sequence[str],
                   abi_only: bool = False, timeout_scale: float = 1.0, abi_timeout: float = 240.0,
                   built_for_torch: str | None = None, python: str = sys.executable) -> dict[str, Any]:
    """:func:`certify` for a plain ``deep_gemm`` folder (no wheel, no dist-info)."""
    return certify(Subject("folder", release_id, source, abi_only, built_for_torch), wheel_dirs=(), work=work,
                   env_info=env_info, case_ids=case_ids, timeout_scale=timeout_scale, abi_timeout=abi_timeout,
                   python=python)


def _new_certificate(release: str, distribution: str, env_info: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema": SCHEMA, "tier": TIER, "release": release, "distribution": distribution, "binding": None,
        "dgcompat_version": _dgcompat_version(), "torch": env_info.get("torch"), "cuda": env_info.get("cuda"),
        "driver": env_info.get("driver"), "python": env_info.get("python"), "platform": env_info.get("platform"),
        "device": env_info.get("device"), "arch": (env_info.get("device") or {}).get("sm"),
        "timestamp": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "wheel": None, "abi": None, "verdict": "failed", "tests": [],
    }


def _incomplete(missing: int, total: int) -> str:
    why = "the run was stopped" if _STOP.is_set() else "deadline"
    return f"incomplete: {missing} of {total} cases not run ({why})"


def _check_and_run(cert: dict[str, Any], version: str, folder: Path, site: Path, *, env_info: dict[str, Any],
                   case_ids: Sequence[str], abi_only: bool, timeout_scale: float, abi_timeout: float,
                   deadline: Deadline, python: str) -> None:
    """ABI check, then every case (in its own child) while the deadline allows, into ``cert``."""
    (folder / "jit").mkdir(parents=True, exist_ok=True)
    env = release_env(site, folder / "jit")
    not_run: list[dict[str, Any]] = []

    def too_late(case_ids: Sequence[str], why: str) -> None:
        not_run.extend({"id": c, "reason": why} for c in case_ids)

    if deadline.left() < MIN_CASE_S:
        too_late(case_ids, "the deadline came before the ABI check")
        cert["not_run"] = not_run
        cert["verdict"] = _incomplete(len(not_run), len(case_ids))
        return
    abi_limit, abi_cut = deadline.limit(abi_timeout)
    abi = _abi.abi_check(abi_limit, env=env, python=python)
    if abi.get("verdict") in ("hang", "crashed") and (abi_cut or _STOP.is_set()):
        # Killed by the deadline or a stop, not found hanging: nothing is known about the release.
        too_late(case_ids, f"the ABI check was cut short after {abi.get('seconds', 0):.0f} s")
        cert["not_run"] = not_run
        cert["verdict"] = _incomplete(len(not_run), len(case_ids))
        return
    cert["binding"] = abi.get("binding")
    forced = None
    if not abi.get("ok") and (abi.get("load") or {}).get("refused") and deadline.left() >= MIN_CASE_S:
        # dgcompat refused the import from the torch pairing alone; show what the mismatch does.
        forced = _abi.abi_check(deadline.limit(abi_timeout)[0], env=env, allow_torch_mismatch=True, python=python)
    cert["abi"] = _abi_summary(abi, forced)
    _say(f"[{version}] ABI: {abi.get('verdict')}: {_short(abi.get('detail', ''), 300)}"
         + (f" | mismatch allowed: {forced.get('verdict')}: {_short(forced.get('detail', ''), 300)}" if forced else ""))
    if not abi.get("ok"):
        cert["verdict"] = _incompatible_verdict(abi, forced, env_info)
        return
    if abi_only:
        cert["verdict"] = "abi ok (cases not run)"
        return
    for i, case_id in enumerate(case_ids):
        if deadline.left() < MIN_CASE_S:
            too_late(case_ids[i:], "not started: the deadline was too close")
            break
        limit, cut = deadline.limit(CASES[case_id].timeout * timeout_scale)
        rec = run_case_child(case_id, env, limit, folder, python, cut_short=cut)
        if rec["outcome"] == "cut":
            too_late([case_id], rec["message"])
            _say(f"[{version}] {case_id:<28} cut     {rec['duration']:6.1f}s  {rec['message']}")
            continue
        cert["tests"].append(_test_entry(rec))
        val = rec.get("value")
        _say(f"[{version}] {case_id:<28} {rec['outcome']:<7} {rec['duration']:6.1f}s"
             + (f"  value={val:.3g}" if isinstance(val, float) else "")
             + (f"  {_short(rec.get('message', ''), 300)}" if rec.get("message") else ""))
    counts = summarize(cert["tests"])
    bad = counts["failed"] + counts["error"] + counts["hang"]
    if not_run:
        cert["not_run"] = not_run
    if bad:
        cert["verdict"] = "failed"
    elif not_run:
        cert["verdict"] = _incomplete(len(not_run), len(case_ids))
    else:
        cert["verdict"] = "certified"


def write_certificate(cert: dict[str, Any], out_dir: Path) -> Path:
    """Check ``cert`` against the one certificate schema and write it atomically (:func:`certificate.write`)."""
    return certificate.write(cert, out_dir)


# --- the compatibility table ---------------------------------------------------------------------

def _version_key(release: str) -> tuple[Any, ...]:
    try:
        from packaging.version import Version

        return (0, Version(release))
    except Exception:
        return (1, release)


def load_certificates(out_dir: Path = certificate.COMMITTED) -> list[dict[str, Any]]:
    """Every ``gpu-*.json`` certificate in ``out_dir``, checked, oldest release first.

    Raises :class:`~dgcompat_conformance.certificate.CertificateError` naming an unsound file.
    """
    certs = [dict(c.data) for c in certificate.load_folder(out_dir, "gpu-*.json") if c.tier == TIER]
    return sorted(certs, key=lambda c: _version_key(str(c.get("release"))))


def _cell(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(certs: Sequence[dict[str, Any]]) -> str:
    """docs/compatibility-gpu.md from the certificates (a release table, a case matrix, the notes)."""
    lines = [
        "# GPU compatibility (real kernels)",
        "",
        "Generated from `conformance/dgcompat_conformance/certificates/gpu-*.json` by `python -m dgcompat_conformance.gpu.runner --table`;",
        "do not edit by hand. Each release was installed into its own folder, checked for ABI health (its native",
        "library must load through dgcompat and a tiny `get_paged_mqa_logits_metadata` + `fp8_gemm_nt` call must",
        "see its tensors), then every case ran in its own process under a watchdog and was compared with",
        "`dgcompat.reference` on the same GPU tensors (`diff = 1 - 2*sum(x*y)/sum(x*x+y*y)` over valid positions).",
        "",
    ]
    envs = sorted({(json.dumps(c.get("device"), sort_keys=True), c.get("driver"), c.get("cuda"), c.get("torch"),
                    c.get("python")) for c in certs})
    for dev, driver, cuda, torch_v, py in envs:
        d = json.loads(dev) or {}
        lines.append(f"Machine: {d.get('name', '?')} ({d.get('sm', '?')}, {d.get('num_sms', '?')} SMs), driver "
                     f"{driver}, CUDA {cuda}, torch {torch_v}, Python {py}.")
    lines += ["", "## Releases", "",
              "| release | verdict | passed | failed | hang | error | xfail | ABI check | certified on |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in certs:
        s = c.get("summary") or summarize(c.get("tests") or [])
        abi = c.get("abi") or {}
        abi_text = abi.get("verdict") or ("ok" if abi.get("ok") else "-")
        forced = abi.get("with_mismatch_allowed")
        if forced:
            why = ""
            if forced.get("load") and not forced["load"].get("ok"):
                # The innermost error is the dynamic linker's (e.g. an undefined torch symbol).
                why = str(forced["load"].get("error") or "").split(" <- ")[-1]
            elif forced.get("calls"):
                bad = [x for x in forced["calls"] if not x.get("ok")]
                why = f"{bad[0]['name']}: " + str(bad[0]["detail"]).split("rejected the call: ")[-1] if bad else ""
            abi_text += f"; imported anyway: {forced.get('verdict')}" + (f" (`{_short(why, 220)}`)" if why else "")
        lines.append("| " + " | ".join(_cell(x) for x in (
            c.get("release"), c.get("verdict"), s["passed"], s["failed"], s["hang"], s["error"], s["xfail"],
            abi_text, (c.get("timestamp") or "")[:10])) + " |")
    ran = [c for c in certs if c.get("tests")]
    if ran:
        ids: list[str] = []
        for c in ran:
            for t in c["tests"]:
                if t["id"] not in ids:
                    ids.append(t["id"])
        marks = {"passed": "pass", "failed": "**FAIL**", "hang": "**HANG**", "error": "**ERROR**", "xfail": "xfail"}
        lines += ["", "## Cases", "", "| case | metric / tolerance | " + " | ".join(c["release"] for c in ran) + " |",
                  "|---|---|" + "---|" * len(ran)]
        for cid in ids:
            first = next(t for c in ran for t in c["tests"] if t["id"] == cid)
            tol = first.get("tolerance")
            metric = "exact" if str(first.get("metric", "")).startswith("exact:") else (
                f"diff <= {tol:g}" if isinstance(tol, (int, float)) else "-")
            row = [f"`{cid}`", metric]
            for c in ran:
                t = next((t for t in c["tests"] if t["id"] == cid), None)
                if t is None:
                    row.append("-")
                    continue
                v = t.get("value")
                cell = marks.get(t["outcome"], t["outcome"])
                if isinstance(v, float) and t["outcome"] in ("passed", "failed"):
                    cell += f" ({v:.1e})"
                row.append(cell)
            lines.append("| " + " | ".join(row) + " |")
        # One line per distinct finding: the same message on several releases is listed once.
        grouped: dict[tuple[str, str, str], list[str]] = {}
        for c in ran:
            for t in c["tests"]:
                if t["outcome"] == "passed":
                    continue
                label = re.escape(f"{SGL} {c['release']}") + r"(?![\w./])"
                message = re.sub(label, f"{SGL} <release>", str(t.get("message") or ""))
                grouped.setdefault((t["id"], t["outcome"], message), []).append(c["release"])
        if grouped:
            lines += ["", "## Expected failures and findings", ""]
            for (cid, outcome, message), releases in grouped.items():
                lines.append(f"- `{cid}` ({outcome}) on {', '.join(releases)}: {_cell(_short(message, 700))}")
        lines += ["", "## What the cases check", ""]
        for cid in ids:
            first = next(t for c in ran for t in c["tests"] if t["id"] == cid)
            summary = first.get("summary") or (CASES[cid].summary if cid in CASES else "")
            lines.append(f"- `{cid}`: {_cell(summary)}; metric: {_cell(first.get('metric'))}, tolerance "
                         f"{first.get('tolerance')}.")
    return "\n".join(lines) + "\n"


def publish(certs: Sequence[dict[str, Any]], out_dir: Path, docs: Path = DEFAULT_DOCS) -> list[Path]:
    """Copy the certificates of ``certs`` written to ``out_dir`` into the shipped folder, then regenerate ``docs``.

    Prints and returns every file written. A certificate not written (or not passing the schema) is not copied.
    """
    written: list[Path] = []
    for cert in certs:
        source = out_dir / certificate.file_name(cert)
        if not source.is_file():
            continue
        written.append(write_certificate(dict(certificate.load(source).data), certificate.COMMITTED))
        _say(f"published {written[-1]}")
    written.append(write_docs(certificate.COMMITTED, docs))
    _say(f"wrote {written[-1]}")
    return written


def write_docs(out_dir: Path = certificate.COMMITTED, docs: Path = DEFAULT_DOCS) -> Path:
    """Regenerate the compatibility table from the certificates in ``out_dir`` (the shipped ones by default)."""
    docs.parent.mkdir(parents=True, exist_ok=True)
    docs.write_text(render_markdown(load_certificates(out_dir)))
    return docs


# --- command line --------------------------------------------------------------------------------

def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dgcompat_conformance.gpu.runner", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--wheels", type=Path, action="append", default=[],
                   help="folder holding sgl-deep-gemm and apache-tvm-ffi wheels (repeatable, searched recursively in "
                        "the order given; default ~/.cache/dgcompat/wheels)")
    p.add_argument("--releases", nargs="*", default=[],
                   help="releases to certify with every case (space- or comma-separated)")
    p.add_argument("--abi-only", nargs="*", default=[], help="releases to give an ABI verdict only")
    p.add_argument("--folder", type=Path, default=None,
                   help="certify a plain deep_gemm package folder (no wheel), e.g. vLLM's vendored copy")
    p.add_argument("--release-id", default=None, help="with --folder: the release id of the certificate (vllm-0.33.0)")
    p.add_argument("--built-for-torch", default=None,
                   help="with --folder: the torch the build was made for (default: known ids, e.g. vllm-0.33.0)")
    p.add_argument("--site", type=Path, action="append", default=[],
                   help="certify the bundled deep_gemm in a site folder (deep_gemm/ next to its kernel wheel's "
                        "dist-info, e.g. sglang_kernel-0.4.2.dist-info); repeatable")
    p.add_argument("--cases", default="", help="comma-separated case ids (default: all)")
    p.add_argument("--jobs", type=positive_int, default=1,
                   help="subjects run at the same time (each its own folder, JIT cache and one case child at a time)")
    p.add_argument("--deadline", type=positive_seconds, default=None,
                   help="seconds the whole run may take: no case starts later, and what did not run is recorded")
    p.add_argument("--release-timeout", type=positive_seconds, default=None,
                   help="seconds one subject may take (same rule as --deadline, per subject)")
    p.add_argument("--timeout-scale", type=positive_seconds, default=1.0, help="multiply every case deadline")
    p.add_argument("--work", type=Path, default=None,
                   help="install and JIT-cache folders, kept (default: a temporary folder removed at the end)")
    p.add_argument("--out", type=Path, default=None,
                   help="certificate folder (default: $DGCOMPAT_RESULTS/gpu, else ~/.cache/dgcompat/results/gpu)")
    p.add_argument("--publish", action="store_true",
                   help="after the run, copy its certificates into the shipped certificate folder and regenerate "
                        "--docs (each file written is printed)")
    p.add_argument("--docs", type=Path, default=DEFAULT_DOCS,
                   help="the generated compatibility table (written by --publish and --table only)")
    p.add_argument("--table", action="store_true",
                   help="only regenerate --docs from the shipped certificates (prints the file written)")
    p.add_argument("--list", action="store_true", help="list the cases")
    return p


def _split(values: Sequence[str]) -> list[str]:
    return [v for item in values for v in item.split(",") if v]


def _subjects(opts: argparse.Namespace) -> list[Subject] | str:
    """The subjects the options name, or why they are not valid (a message)."""
    from packaging.version import InvalidVersion, Version

    subjects = [Subject("wheel", v) for v in _split(opts.releases)]
    subjects += [Subject("wheel", v, abi_only=True) for v in _split(opts.abi_only)]
    for s in subjects:
        try:
            Version(s.release)
        except InvalidVersion:
            return f"{s.release!r} is not a release version (e.g. 0.1.4)"
    if opts.folder is not None:
        if not opts.release_id or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", opts.release_id):
            return "--folder needs --release-id ID (letters, digits, . _ -), e.g. vllm-0.33.0"
        if not (opts.folder / "__init__.py").is_file():
            return f"--folder {opts.folder}: not a deep_gemm package folder (no __init__.py)"
        subjects.append(Subject("folder", opts.release_id, opts.folder, built_for_torch=opts.built_for_torch))
    for site in opts.site:
        if not (site / "deep_gemm" / "__init__.py").is_file():
            return f"--site {site}: no deep_gemm/__init__.py in it"
        try:
            found = detect_site(site.resolve())
            release_id = bundle_release_id(found)
        except RuntimeError as exc:
            return f"--site {site}: {exc}"
        subjects.append(Subject("site", release_id, site, detected=found))
    ids = [s.release for s in subjects]
    dup = sorted({i for i in ids if ids.count(i) > 1})
    if dup:
        return f"subjects named twice: {', '.join(dup)}"
    if not subjects:
        return "nothing to do: give --releases, --abi-only, --folder or --site (or --table)"
    return subjects


def _summary_table(certs: Sequence[dict[str, Any]], paths: dict[str, str]) -> str:
    """The end-of-run table: one line per subject."""
    rows = [("release", "subject", "verdict", "pass", "fail", "hang", "err", "xfail", "not run", "s", "certificate")]
    for c in certs:
        s = c.get("summary") or summarize(c.get("tests") or [])
        rows.append((str(c["release"]), str(c.get("subject") or "-"), _short(str(c["verdict"]), 60), str(s["passed"]),
                     str(s["failed"]), str(s["hang"]), str(s["error"]), str(s["xfail"]), str(len(c.get("not_run") or [])),
                     f"{c.get('seconds', 0):.0f}", paths.get(str(c["release"]), "not written")))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(r, widths)).rstrip() for r in rows)


def main(argv: Sequence[str] | None = None) -> int:
    opts = _parser().parse_args(argv)
    if opts.list:
        for case in CASES.values():
            print(f"{case.id:<28} {case.timeout:5.0f}s  {case.summary}")
        return 0
    if opts.table:
        print(f"wrote {write_docs(certificate.COMMITTED, opts.docs)}")
        return 0
    if opts.out is None:
        opts.out = results_dir("gpu")
    case_ids = [c for c in opts.cases.split(",") if c] or list(CASES)
    unknown = [c for c in case_ids if c not in CASES]
    if unknown:
        print(f"unknown cases: {unknown}", file=sys.stderr)
        return 2
    started = time.monotonic()
    subjects = _subjects(opts)
    if isinstance(subjects, str):
        print(subjects, file=sys.stderr)
        return 2
    wheel_dirs = opts.wheels or [Path.home() / ".cache" / "dgcompat" / "wheels"]
    run_deadline = None if opts.deadline is None else started + opts.deadline
    with contextlib.ExitStack() as stack:
        work = opts.work or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="dgcompat-gpu-")))
        stack.enter_context(_stop_on_signals())
        env_info = environment_info()
        _say(f"machine: {json.dumps(env_info)}")
        paths: dict[str, str] = {}

        def one(subject: Subject) -> dict[str, Any]:
            t0 = time.monotonic()
            deadline = Deadline.earliest(run_deadline, None if opts.release_timeout is None
                                         else t0 + opts.release_timeout)
            cert = certify(subject, wheel_dirs=wheel_dirs, work=work, env_info=env_info, case_ids=case_ids,
                           timeout_scale=opts.timeout_scale, deadline=deadline)
            try:
                path = write_certificate(cert, opts.out)  # as soon as it is done: a cut run keeps it
            except (CertificateError, OSError) as exc:
                _say(f"== {subject.release}: certificate not written: {exc}")
                cert["verdict"] = "failed"
                return cert
            paths[subject.release] = path.name
            s = cert["summary"]
            _say(f"== {subject.release}: {cert['verdict']}  passed {s['passed']} failed {s['failed']} hang {s['hang']} "
                 f"error {s['error']} xfail {s['xfail']}  {cert['seconds']:.0f}s -> {path.name}"
                 + (f"  runner error: {cert['runner_error']}" if cert.get("runner_error") else ""))
            if cert.get("note"):
                _say(f"   note: {cert['note']}")
            return cert

        with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
            certs = list(pool.map(one, subjects))
    _say(f"\nsummary ({time.monotonic() - started:.0f} s, {len(certs)} subjects, --jobs {opts.jobs}):\n"
         + _summary_table(certs, paths))
    _say(f"certificates in {opts.out}/")
    if opts.publish:
        publish(certs, opts.out, opts.docs)
    bad = [c for c in certs if c["verdict"] == "failed" or str(c["verdict"]).startswith("incomplete")]
    return 1 if bad else 0


@contextlib.contextmanager
def _stop_on_signals() -> Iterator[None]:
    """SIGTERM / SIGINT stop the run (:func:`stop_children`) instead of orphaning the children."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.signal(sig, stop_children) for sig in (signal.SIGTERM, signal.SIGINT)}
    _STOP.clear()
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


if __name__ == "__main__":
    sys.exit(main())
