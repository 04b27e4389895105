"""Certify one GPU-tier subject: install it, check what it is and its ABI, run every case in a child, and
build its certificate.

For one subject, in its own folder ``<work>/<release>/`` (its ``site/`` and its own JIT cache
``jit/``: two deep_gemm builds never share a folder, a cache or a process):

1. install it (:mod:`.install`), then check that detection (:func:`~.install.detect_site`, in a
   child) names the subject: a copy detected as another release is never certified under this
   one's name;
2. run the ABI health check (:mod:`.abi`) in a child: dgcompat must bind the release and two tiny
   calls must see their tensors. A release that fails is certified ``incompatible`` with the torch
   it was built for (from :data:`dgcompat.detection.EXPECTED_TORCH`); where dgcompat refused it for
   that reason, the check is repeated with ``DGCOMPAT_ALLOW_TORCH_MISMATCH=1`` to record what the
   mismatch actually does (load failure or mis-read tensors);
3. run every case (:mod:`.cases`) in its own child process under a watchdog (:func:`run_case_child`):
   a case that prints no result before its deadline is recorded as a ``hang``, its process group is
   killed, and the run goes on with the next case; no case starts with less than
   :data:`~.deadline.MIN_CASE_S` left of the subject's :class:`~.deadline.Deadline`, and one cut short
   by it is listed under ``not_run`` (never as a hang);
4. return the certificate: the same as the CPU tier's (schema, release, distribution, binding,
   dgcompat version, torch, python, platform, device, timestamp, tests, summary), with tier
   ``"gpu"``, the CUDA and driver versions, the ABI result, what detection said and a verdict.

The steps that need pip or a GPU (installing a wheel, the ABI check, a case child) and the least
time a case needs are the fields of :class:`Steps`; :func:`certify` takes them as one argument.
"""

from __future__ import annotations

import datetime as _dt
import json
import subprocess
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from .. import certificate
from .._text import short
from ..certificate import CASE_OUTCOMES, Certificate
from ..dists import SGL_DEEP_GEMM
from ..releases import VENDORED_FACTS
from ..surface import SurfaceError, extract
from ..wheelcache import confined
from . import abi as _abi
from .cases import CASES
from .deadline import MIN_CASE_S, STOP, Deadline
from .install import detect_site, folder_digest, install_folder, install_site, install_wheel, release_env
from .machine import dgcompat_version
from .output import say
from .subject import Subject, bundle_release_id, distribution_of

__all__ = ["TIER", "OUTCOMES", "Steps", "certify", "certify_release", "certify_folder", "run_case_child",
           "summarize", "stable_abi_note", "write_certificate"]

TIER = "gpu"
OUTCOMES = CASE_OUTCOMES


class InstallWheel(Protocol):
    """Put a wheel subject into ``site``, recording the wheel files, their hashes and the tvm-ffi pin into
    ``wheel_record`` before installing them (:func:`~.install.install_wheel`)."""

    def __call__(self, subject: Subject, wheel_record: dict[str, Any], site: Path, wheel_dirs: Sequence[Path],
                 python: str) -> None: ...


class AbiCheck(Protocol):
    """The ABI health check in a child (:func:`~.abi.abi_check`)."""

    def __call__(self, timeout: float = ..., *, env: Mapping[str, str] | None = None,
                 allow_torch_mismatch: bool = False, python: str | None = None) -> dict[str, Any]: ...


class RunCase(Protocol):
    """One case in a child under a watchdog (:func:`run_case_child`)."""

    def __call__(self, case_id: str, env: dict[str, str], timeout: float, cwd: Path, python: str = ..., *,
                 cut_short: bool = False) -> dict[str, Any]: ...


def run_case_child(case_id: str, env: dict[str, str], timeout: float, cwd: Path,
                   python: str = sys.executable, *, cut_short: bool = False) -> dict[str, Any]:
    """Run one case in a child under a watchdog; return its record (``hang`` past the deadline).

    With ``cut_short`` the watchdog is a run deadline shorter than the case's own: expiring it is
    recorded as outcome ``"cut"`` (the case did not finish in the time left), never as a hang; so is a
    child killed because the run was stopped.
    """
    case = CASES[case_id]
    base = {"id": case_id, "summary": case.summary, "metric": case.metric, "tolerance": case.tolerance, "value": None}
    t0 = time.perf_counter()
    proc = subprocess.Popen([python, "-m", "dgcompat_conformance.gpu.cases", case_id], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env, cwd=str(cwd), start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _abi.kill_group(proc)
        wall = round(time.perf_counter() - t0, 3)
        if cut_short or STOP.is_set():
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
        if STOP.is_set():
            return {**base, "outcome": "cut", "duration": wall, "message": "the run was stopped"}
        tail = [ln for ln in (stderr or stdout).strip().splitlines() if ln.strip()][-6:]
        return {**base, "outcome": "error", "duration": wall,
                "message": short(f"the child exited with status {proc.returncode} without a result: "
                                 + " | ".join(tail), 1500)}
    rec["child_duration"] = rec.get("duration")
    rec["duration"] = wall
    return rec


@dataclass(frozen=True)
class Steps:
    """The steps of a certification that need pip or a GPU, and the least time a case is started with.

    The defaults are the real ones; the runner's command line hands in its own (the same functions,
    looked up when it runs), and a host-side test hands in stand-ins.
    """

    install_wheel: InstallWheel = install_wheel
    abi_check: AbiCheck = _abi.abi_check
    run_case: RunCase = run_case_child
    min_case_s: float = MIN_CASE_S


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


def _built_for(release_id: str) -> str | None:
    """The torch a vendored copy was built for, from its engine wheel's METADATA (a folder does not say)."""

    facts = VENDORED_FACTS.get(release_id)
    return None if facts is None else f"{facts.built_for} (the torch the engine wheel pins)"


def stable_abi_note(cert: Certificate, built_for: str | None) -> str | None:
    """What a passing run of a stable-ABI build on another torch proves (None when it does not apply)."""
    abi = cert.abi or {}
    if cert.binding != "stable-abi" or not built_for:
        return None
    ran_on = cert.torch
    s = cert.summary
    passed = cert.verdict == "certified"
    head = (f"ran on torch {ran_on} while built for torch {built_for}. The native library is a stable-ABI build: "
            f"it imports only torch's C shim (aoti_torch_*/torch_* functions) and none of torch's C++ symbols, and "
            f"dgcompat reads its minimum torch from those imports (torch{abi.get('expected_torch') or '>=?'}).")
    if passed:
        return (head + f" It loaded and all {s.get('passed', 0)} cases matched the reference: this proves the "
                "stable ABI held from the build torch down to this one for every function this build imports "
                "(op registration, tensor metadata, streams, the dispatcher). It does not prove torch versions "
                "older than that minimum, nor other builds.")
    return head + f" Verdict {cert.verdict}: the run does not show the stable ABI holding on this torch."


@dataclass
class _Run:
    """What one subject's run found so far; :func:`certify` turns it into its :class:`Certificate`."""

    wheel: dict[str, Any] = field(default_factory=dict)
    site: dict[str, Any] | None = None
    folder: dict[str, Any] | None = None
    detected: dict[str, Any] | None = None
    fingerprint: dict[str, Any] | None = None
    subject: str | None = None
    binding: str | None = None
    abi: dict[str, Any] | None = None
    verdict: str = "failed"
    tests: list[dict[str, Any]] = field(default_factory=list)
    not_run: list[dict[str, Any]] | None = None
    runner_error: str | None = None


def _install_subject(subject: Subject, run: _Run, site: Path, wheel_dirs: Sequence[Path],
                     python: str, steps: Steps) -> None:
    """Put the subject into ``site`` (emptied first) and record what it was in ``run``."""
    assert subject.kind == "wheel" or subject.source is not None
    if subject.kind == "wheel":
        steps.install_wheel(subject, run.wheel, site, wheel_dirs, python)
    elif subject.kind == "folder":
        assert subject.source is not None
        run.folder = folder_digest(subject.source.resolve())
        install_folder(subject.source.resolve(), site)
    elif subject.kind == "site":
        assert subject.source is not None
        run.site = {**folder_digest(subject.source.resolve() / "deep_gemm"),
                    "dist_info": install_site(subject.source.resolve(), site)}
    else:
        raise ValueError(f"unknown subject kind {subject.kind!r}")


def build_fingerprint(package: Path) -> dict[str, Any] | None:
    """The fingerprint of the deep_gemm package folder ``package`` (python, native, asserts, headers:
    :mod:`dgcompat_conformance.surface.fingerprint`), None when it cannot be read."""

    try:
        fp = extract(package, cache=False).get("fingerprint")
    except (SurfaceError, OSError, ValueError):
        return None
    return fp if isinstance(fp, dict) else None


def _check_identity(subject: Subject, run: _Run, site: Path, python: str) -> None:
    """Detection of the installed copy must name the subject, or its certificate would describe another release.
    The certificate records the build's surface as detection reads it and its whole fingerprint."""
    found = detect_site(site, python)
    run.detected = {k: found.get(k) for k in ("label", "dist", "version", "source", "binding", "owner", "known",
                                               "surface", "surface_note")}
    run.fingerprint = build_fingerprint(site / "deep_gemm")
    if subject.kind == "wheel":
        ok = found.get("dist") == SGL_DEEP_GEMM and found.get("version") == subject.release
        run.subject = f"{SGL_DEEP_GEMM} {subject.release}"
    elif subject.kind == "site":
        ok = found.get("source") == "bundled" and bundle_release_id(found) == subject.release
        run.subject = f"{found.get('dist')} {found.get('version')} (bundled deep_gemm)"
    else:
        ok = True  # a folder is named by the id given; detection is recorded
        run.subject = f"deep_gemm folder {subject.release} ({found.get('label')})"
    if not ok:
        raise RuntimeError(f"the installed copy is detected as {found.get('label')!r} "
                           f"(source {found.get('source')!r}), not as {subject.kind} {subject.release}")


def certify(subject: Subject, *, wheel_dirs: Sequence[Path], work: Path, env_info: dict[str, Any],
            case_ids: Sequence[str], timeout_scale: float = 1.0, abi_timeout: float = 240.0,
            deadline: Deadline = Deadline(), python: str = sys.executable, steps: Steps = Steps()) -> Certificate:
    """Install, identify, ABI-check and (unless ``subject.abi_only``) run every case for one subject.

    Cases not started (or cut short) before ``deadline`` are listed under ``not_run`` and the
    verdict is ``incomplete: ...`` unless a case failed; a runner fault is ``runner_error``.
    """
    t_start = time.perf_counter()
    started = _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")
    run = _Run()
    try:
        folder = confined(work, subject.release)  # the installers empty <folder>/site first
        site = folder / "site"
        _install_subject(subject, run, site, wheel_dirs, python, steps)
        _check_identity(subject, run, site, python)
        _check_and_run(run, subject.release, folder, site, env_info=env_info, case_ids=case_ids,
                       abi_only=subject.abi_only, timeout_scale=timeout_scale, abi_timeout=abi_timeout,
                       deadline=deadline, python=python, steps=steps)
    except Exception as exc:  # noqa: BLE001 - the runner's crash goes into the certificate
        run.runner_error = f"{type(exc).__name__}: {exc}"
        # A child killed by a stop (pip, detection) says nothing about the subject.
        run.verdict = "incomplete: the run was stopped" if STOP.is_set() else "failed"
    device = env_info.get("device")
    cert = Certificate(
        tier=TIER, release=subject.release, distribution=distribution_of(subject), binding=run.binding,
        dgcompat_version=dgcompat_version(), torch=env_info.get("torch"), cuda=env_info.get("cuda"),
        driver=env_info.get("driver"), python=env_info.get("python"), platform=env_info.get("platform"),
        device=device, arch=(device or {}).get("sm"), timestamp=started, wheel=run.wheel or None, abi=run.abi,
        verdict=run.verdict, tests=tuple(run.tests), site=run.site, folder=run.folder, detected=run.detected,
        fingerprint=run.fingerprint, subject=run.subject,
        not_run=None if run.not_run is None else tuple(run.not_run), runner_error=run.runner_error,
        summary=summarize(run.tests), seconds=round(time.perf_counter() - t_start, 1))
    if subject.kind == "folder":
        note = stable_abi_note(cert, subject.built_for_torch or _built_for(subject.release))
        if note:
            cert = replace(cert, note=note)
    return cert


def certify_release(version: str, *, wheel_dirs: Sequence[Path], work: Path, env_info: dict[str, Any],
                    case_ids: Sequence[str], abi_only: bool = False, timeout_scale: float = 1.0,
                    abi_timeout: float = 240.0, python: str = sys.executable) -> Certificate:
    """:func:`certify` for one sgl-deep-gemm release from ``wheel_dirs``."""
    return certify(Subject("wheel", version, abi_only=abi_only), wheel_dirs=wheel_dirs, work=work,
                   env_info=env_info, case_ids=case_ids, timeout_scale=timeout_scale, abi_timeout=abi_timeout,
                   python=python)


def certify_folder(source: Path, release_id: str, *, work: Path, env_info: dict[str, Any], case_ids: Sequence[str],
                   abi_only: bool = False, timeout_scale: float = 1.0, abi_timeout: float = 240.0,
                   built_for_torch: str | None = None, python: str = sys.executable) -> Certificate:
    """:func:`certify` for a plain ``deep_gemm`` folder (no wheel, no dist-info)."""
    return certify(Subject("folder", release_id, source, abi_only, built_for_torch), wheel_dirs=(), work=work,
                   env_info=env_info, case_ids=case_ids, timeout_scale=timeout_scale, abi_timeout=abi_timeout,
                   python=python)


def _incomplete(missing: int, total: int) -> str:
    why = "the run was stopped" if STOP.is_set() else "deadline"
    return f"incomplete: {missing} of {total} cases not run ({why})"


def _check_and_run(run: _Run, version: str, folder: Path, site: Path, *, env_info: dict[str, Any],
                   case_ids: Sequence[str], abi_only: bool, timeout_scale: float, abi_timeout: float,
                   deadline: Deadline, python: str, steps: Steps) -> None:
    """ABI check, then every case (in its own child) while the deadline allows, into ``run``."""
    (folder / "jit").mkdir(parents=True, exist_ok=True)
    env = release_env(site, folder / "jit")
    not_run: list[dict[str, Any]] = []

    def too_late(case_ids: Sequence[str], why: str) -> None:
        not_run.extend({"id": c, "reason": why} for c in case_ids)

    if deadline.left() < steps.min_case_s:
        too_late(case_ids, "the deadline came before the ABI check")
        run.not_run = not_run
        run.verdict = _incomplete(len(not_run), len(case_ids))
        return
    abi_limit, abi_cut = deadline.limit(abi_timeout)
    abi = steps.abi_check(abi_limit, env=env, python=python)
    if abi.get("verdict") in ("hang", "crashed") and (abi_cut or STOP.is_set()):
        # Killed by the deadline or a stop, not found hanging: nothing is known about the release.
        too_late(case_ids, f"the ABI check was cut short after {abi.get('seconds', 0):.0f} s")
        run.not_run = not_run
        run.verdict = _incomplete(len(not_run), len(case_ids))
        return
    run.binding = abi.get("binding")
    forced = None
    if not abi.get("ok") and (abi.get("load") or {}).get("refused") and deadline.left() >= steps.min_case_s:
        # dgcompat refused the import from the torch pairing alone; show what the mismatch does.
        forced = steps.abi_check(deadline.limit(abi_timeout)[0], env=env, allow_torch_mismatch=True, python=python)
    run.abi = _abi_summary(abi, forced)
    say(f"[{version}] ABI: {abi.get('verdict')}: {short(abi.get('detail', ''), 300)}"
        + (f" | mismatch allowed: {forced.get('verdict')}: {short(forced.get('detail', ''), 300)}" if forced else ""))
    if not abi.get("ok"):
        run.verdict = _incompatible_verdict(abi, forced, env_info)
        return
    if abi_only:
        run.verdict = "abi ok (cases not run)"
        return
    for i, case_id in enumerate(case_ids):
        if deadline.left() < steps.min_case_s:
            too_late(case_ids[i:], "not started: the deadline was too close")
            break
        limit, cut = deadline.limit(CASES[case_id].timeout * timeout_scale)
        rec = steps.run_case(case_id, env, limit, folder, python, cut_short=cut)
        if rec["outcome"] == "cut":
            too_late([case_id], rec["message"])
            say(f"[{version}] {case_id:<28} cut     {rec['duration']:6.1f}s  {rec['message']}")
            continue
        run.tests.append(_test_entry(rec))
        val = rec.get("value")
        say(f"[{version}] {case_id:<28} {rec['outcome']:<7} {rec['duration']:6.1f}s"
            + (f"  value={val:.3g}" if isinstance(val, float) else "")
            + (f"  {short(rec.get('message', ''), 300)}" if rec.get("message") else ""))
    counts = summarize(run.tests)
    bad = counts["failed"] + counts["error"] + counts["hang"]
    if not_run:
        run.not_run = not_run
    if bad:
        run.verdict = "failed"
    elif not_run:
        run.verdict = _incomplete(len(not_run), len(case_ids))
    else:
        run.verdict = "certified"


def write_certificate(cert: Certificate, out_dir: Path) -> Path:
    """Check ``cert`` against the one certificate schema and write it atomically (:func:`certificate.write`)."""
    return certificate.write(cert, out_dir)
