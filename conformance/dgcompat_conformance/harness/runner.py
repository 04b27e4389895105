"""The parent side: one child process per release, in parallel, each turned into a certificate.

Releases never share a process (their native layers, real or stand-in, register the same
``deep_gemm`` names). Each child's output goes to ``<out>/logs/<release>.log``; its result is
turned into ``<out>/<release>.json`` by :mod:`.certificate`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from packaging.version import Version

from dgcompat import detection
from dgcompat._tooling import hookless_env

from .._paths import with_import_path
from ..certificate import Certificate, CertificateError, write
from ..releases import ReleaseSpec
from ..surface import SurfaceError, extract
from ..wheels import FetchError, fetch_wheel, prepare_workdir, wheel_record
from . import certificate

__all__ = ["RunOptions", "child_env", "run_release", "run_installed", "run_many"]


@dataclass
class RunOptions:
    """How to run children (shared by every release of one ``dgcompat conform`` call)."""

    out_dir: Path
    timeout: float = 900.0
    arch: str = "sm90"
    tests: list[Path] | None = None
    subject: str | None = None
    keyword: str | None = None
    examples: int | None = None
    xfails: Path | None = None
    no_xfails: bool = False
    ffi_returns: str = "torch"
    write_certificates: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)


def child_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a child: this one, with the package importable and one thread per child.

    Without the install hook (a child that inherited ``python -m dgcompat run``'s variables would bind
    dgcompat before it has put its release on ``sys.path``) and without the runtime's settings, which
    the child makes itself for the subject it certifies.
    """
    env = hookless_env(os.environ)
    for var in ("DGCOMPAT_BACKEND", "DGCOMPAT_ARCH", "DGCOMPAT_DEBUG", "DGCOMPAT_ALLOW_TORCH_MISMATCH"):
        env.pop(var, None)
    extra = dict(extra or {})
    # Extra import paths (e.g. a test's adapter module) come first, then both wings.
    extra_path = extra.pop("PYTHONPATH", "")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (extra_path, with_import_path(env.get("PYTHONPATH", ""))) if p)
    # Children run side by side (--jobs); intra-op threads would only fight over the cores.
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        env.setdefault(var, "1")
    env.setdefault("PYTHONHASHSEED", "0")
    env.update(extra)
    return env


def _child_cmd(opts: RunOptions, out_json: Path, mode: list[str]) -> list[str]:
    cmd = [sys.executable, "-m", "dgcompat_conformance.harness.child", *mode, "--out", str(out_json), "--arch", opts.arch,
           "--ffi-returns", opts.ffi_returns]
    for t in opts.tests or []:
        cmd += ["--tests", str(t)]
    if opts.subject:
        cmd += ["--subject", opts.subject]
    if opts.keyword:
        cmd += ["-k", opts.keyword]
    if opts.examples is not None:
        cmd += ["--examples", str(opts.examples)]
    if opts.xfails is not None:
        cmd += ["--xfails", str(opts.xfails)]
    if opts.no_xfails:
        cmd.append("--no-xfails")
    return cmd


def _run_child(release_id: str, cmd: list[str], opts: RunOptions, out_json: Path) -> tuple[dict[str, Any], str | None]:
    log_dir = opts.out_dir / "logs"
    log_dir.mkdir(parents=True, exist_ok=True)
    log = log_dir / f"{release_id}.log"
    err: str | None = None
    with log.open("w") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        try:
            # The child's working folder is private, so nothing it writes there (hypothesis' storage,
            # stray files of a wheel) lands in the caller's folder.
            proc = subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, env=child_env(opts.extra_env),
                                  timeout=opts.timeout, cwd=str(out_json.parent), check=False)
            if proc.returncode != 0:
                err = f"child exited with status {proc.returncode} (see {log})"
        except subprocess.TimeoutExpired:
            err = f"child timed out after {opts.timeout:.0f} s (a hang?) (see {log})"
    child: dict[str, Any] = {}
    if out_json.is_file():
        try:
            loaded = json.loads(out_json.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            err = err or f"unreadable child result: {exc}"
        else:
            if isinstance(loaded, dict):
                child = loaded
            else:
                err = err or f"the child's result is a JSON {type(loaded).__name__}, not an object"
    elif err is None:
        err = f"child wrote no result (see {log})"
    return child, err


def _fingerprint(source: Path) -> dict[str, Any] | None:
    """The build's fingerprint (:mod:`dgcompat_conformance.surface.fingerprint`) from its wheel or folder, None when
    unreadable (the certificate then records none; the suite's verdict does not depend on it)."""

    try:
        fp = extract(source).get("fingerprint")
    except (SurfaceError, OSError, ValueError):
        return None
    return fp if isinstance(fp, dict) else None


def run_release(spec: ReleaseSpec, opts: RunOptions) -> Certificate:
    """Certify one published release on the CPU tier; returns its certificate (also written to disk)."""
    t0 = time.perf_counter()
    wheel_info: dict[str, Any] | None = None
    fingerprint: dict[str, Any] | None = None
    with tempfile.TemporaryDirectory(prefix=f"dgcompat-{spec.id}-") as tmp:
        out_json = Path(tmp) / "result.json"
        try:
            wheel = fetch_wheel(spec)
            wheel_info = wheel_record(wheel)
            work = prepare_workdir(spec, wheel)
            fingerprint = _fingerprint(wheel)
        except (FetchError, OSError) as exc:
            child: dict[str, Any] = {}
            err: str | None = f"{type(exc).__name__}: {exc}"
        else:
            mode = ["--workdir", str(work), "--dist", spec.dist, "--version", spec.version, "--release-id", spec.id]
            child, err = _run_child(spec.id, _child_cmd(opts, out_json, mode), opts, out_json)
    cert = certificate.build(child, release=spec.id, distribution=spec.dist, wheel=wheel_info, harness_error=err,
                             wall_seconds=round(time.perf_counter() - t0, 2), fingerprint=fingerprint)
    return _write(cert, opts)


def _write(cert: Certificate, opts: RunOptions) -> Certificate:
    """Write ``cert`` (when asked to) and return it; a failure is recorded in what is returned (``harness_error``,
    verdict ``ERROR``), so the other releases still run."""
    if not opts.write_certificates:
        return cert
    try:
        write(cert, opts.out_dir)
    except (OSError, CertificateError) as exc:
        return replace(cert, harness_error=f"certificate not written: {exc}", verdict="ERROR")
    return cert


def installed_release(rel: Any) -> tuple[str | None, str | None]:
    """(distribution, version) a certificate of the installed copy names: the engine for a vendored copy
    (``vllm``, ``0.34.0``: its release id is ``vllm-0.34.0``, as ``conform --release`` names it), else the
    distribution and version detection reads."""
    if rel.source == "vendored" and rel.owner:
        host, _, rest = str(rel.owner).partition(" ")
        version = rest.split(" ", 1)[0]
        try:
            Version(version)
        except ValueError:
            return rel.dist, None if rel.version is None else str(rel.version)
        return host, version
    return rel.dist, None if rel.version is None else str(rel.version)


def run_installed(opts: RunOptions, *, reference: bool = False, force_standins: bool = False) -> Certificate:
    """Certify the deep_gemm installed in this environment (or dgcompat's reference backend)."""
    t0 = time.perf_counter()
    release_id = "reference" if reference else "installed"
    with tempfile.TemporaryDirectory(prefix="dgcompat-installed-") as tmp:
        out_json = Path(tmp) / "result.json"
        mode = ["--reference"] if reference else ["--installed"]
        if force_standins:
            mode.append("--force-standins")
        dist: str | None = "dgcompat-reference"
        fingerprint: dict[str, Any] | None = None
        if not reference:
            detection.reset()
            rel = detection.release()
            dist, version = installed_release(rel)
            if rel.location is not None and rel.installed_as != "zip archive":
                fingerprint = _fingerprint(Path(rel.location))
            mode += ["--dist", dist or "", "--version", version or ""]
            if dist and version:
                release_id = ReleaseSpec(dist, version).id
        mode += ["--release-id", release_id]
        child, err = _run_child(release_id, _child_cmd(opts, out_json, mode), opts, out_json)
    if not reference and dist is None:
        dist = (child.get("dgcompat") or {}).get("distribution")
    cert = certificate.build(child, release=release_id, distribution=dist, harness_error=err,
                             wall_seconds=round(time.perf_counter() - t0, 2), fingerprint=fingerprint,
                             binding="reference" if reference else None)
    return _write(cert, opts)


def run_many(specs: list[ReleaseSpec], opts: RunOptions, *, jobs: int = 2,
             on_done: Callable[[int, int, Certificate], None] | None = None) -> list[Certificate]:
    """Run :func:`run_release` for every spec, ``jobs`` at a time; certificates come back in spec order."""
    results: list[Certificate | None] = [None] * len(specs)
    done = 0
    lock = threading.Lock()

    def one(i: int) -> None:
        nonlocal done
        cert = run_release(specs[i], opts)
        with lock:
            results[i] = cert
            done += 1
            if on_done is not None:
                on_done(done, len(specs), cert)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        for f in [pool.submit(one, i) for i in range(len(specs))]:
            f.result()
    return [r for r in results if r is not None]
