"""The GPU runner's host side, on the CPU: subjects (wheel, folder, bundled site), identity checks, the
tvm-ffi pairing, several subjects per call, deadlines, the watchdog and a stopped run.

The ABI check and the case children need a GPU; here they are replaced by fakes that answer as
the real ones do, so that everything around them (installs, detection, certificates, scheduling)
runs for real.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import stat
import tempfile
import threading
import time
import zipfile
from pathlib import Path
from typing import Any

import pytest

from dgcompat_conformance import certificate
from dgcompat_conformance.gpu import abi as gpu_abi
from dgcompat_conformance.gpu import runner
from dgcompat_conformance.gpu.cases import CASES
from dgcompat_conformance.gpu.deadline import STOP
from testsupport import elfmaker
from testsupport.wheels import published_wheel

BUNDLE_INIT = ("import os\nimport torch\nfrom . import deep_gemm_cpp  # registers torch.ops.deep_gemm\n"
               "fp8_gemm_nt = torch.ops.deep_gemm.fp8_gemm_nt\n")
ENV = {"torch": "2.11.0+cu130", "cuda": "13.0", "driver": "580", "python": "3.12.3", "platform": "x",
       "device": {"name": "H200", "sm": "sm90"}}


def _digest(data: bytes) -> str:
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def _dist_info(site: Path, name: str, version: str, files: dict[str, bytes]) -> None:
    """Write ``files`` under ``site`` and a dist-info owning them (METADATA + RECORD with hashes)."""
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_bytes(data)
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    record = [f"{rel},{_digest(data)},{len(data)}" for rel, data in files.items()]
    (info / "RECORD").write_text("\n".join(record + [f"{info.name}/RECORD,,"]) + "\n")


def _bundle_site(root: Path, version: str = "0.4.2") -> Path:
    site = root / "sgk-site"
    _dist_info(site, "sglang-kernel", version, {
        "deep_gemm/__init__.py": BUNDLE_INIT.encode(),
        "deep_gemm/deep_gemm_cpp.abi3.so": elfmaker.make_so(**elfmaker.UNSTABLE),
        "sgl_kernel/__init__.py": b"",  # listed in RECORD, not copied: deep_gemm does not need it
    })
    return site


def _sgl_site(site: Path, version: str) -> None:
    _dist_info(site, "sgl-deep-gemm", version, {
        "deep_gemm/__init__.py": b"import tvm_ffi\nfrom ._C import *\n__version__ = '2.1.0'\n",
        "deep_gemm/_C.so": elfmaker.make_so(**elfmaker.TVM_FFI),
    })


class Fakes:
    """Stand-ins for the GPU-only children: the ABI check passes, each case passes after ``sleep`` s."""

    def __init__(self, sleep: float = 0.0) -> None:
        self.sleep = sleep
        self.cases: list[tuple[str, str, float, bool]] = []  # (site, case, limit, cut_short)
        self.lock = threading.Lock()

    def abi_check(self, timeout: float, *, env: dict[str, str], python: str = "",
                  allow_torch_mismatch: bool = False) -> Any:
        return {"ok": True, "verdict": "ok", "detail": "", "binding": "tvm-ffi", "torch": ENV["torch"],
                "torch_ok": True, "seconds": 0.1}

    def case(self, case_id: str, env: dict[str, str], timeout: float, cwd: Path, python: str = "", *,
             cut_short: bool = False) -> Any:
        with self.lock:
            self.cases.append((env["PYTHONPATH"].split(os.pathsep)[0], case_id, timeout, cut_short))
        time.sleep(self.sleep)
        return {"id": case_id, "outcome": "passed", "duration": self.sleep, "metric": "diff", "tolerance": 1e-4,
                "value": 1e-6}


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    f = Fakes()
    monkeypatch.setattr(gpu_abi, "abi_check", f.abi_check)
    monkeypatch.setattr(runner, "run_case_child", f.case)
    monkeypatch.setattr(runner, "environment_info", lambda: dict(ENV))
    return f


CASE_IDS = list(CASES)[:3]


def test_bundled_site_is_certified_as_the_bundle(tmp_path: Path, fakes: Fakes) -> None:
    site = _bundle_site(tmp_path)
    out, work = tmp_path / "certs", tmp_path / "work"
    assert runner.main(["--site", str(site), "--out", str(out), "--cases", ",".join(CASE_IDS),
                        "--work", str(work)]) == 0
    cert = json.loads((out / "gpu-sglang-kernel-0.4.2.json").read_text())
    assert certificate.check(cert) == []
    assert cert["release"] == "sglang-kernel-0.4.2" and cert["distribution"] == "sglang-kernel"
    assert cert["subject"] == "sglang-kernel 0.4.2 (bundled deep_gemm)" and cert["verdict"] == "certified"
    assert cert["detected"]["source"] == "bundled" and cert["detected"]["binding"] == "bundled-torch-ops"
    assert cert["detected"]["label"] == "sglang-kernel 0.4.2 (bundled)"
    assert cert["site"]["dist_info"] == ["sglang_kernel-0.4.2.dist-info"] and cert["site"]["files"] == 2
    installed = work / "sglang-kernel-0.4.2" / "site"
    assert sorted(p.name for p in installed.iterdir()) == ["deep_gemm", "sglang_kernel-0.4.2.dist-info"]
    assert {c[0] for c in fakes.cases} == {str(installed)} and [c[1] for c in fakes.cases] == CASE_IDS


def test_a_site_that_is_not_a_bundle_is_refused(tmp_path: Path, fakes: Fakes,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    bare = tmp_path / "bare"
    (bare / "deep_gemm").mkdir(parents=True)
    (bare / "deep_gemm" / "__init__.py").write_text(BUNDLE_INIT)
    sgl = tmp_path / "sgl"
    _sgl_site(sgl, "0.1.4")
    for site in (bare, sgl, tmp_path / "missing"):
        assert runner.main(["--site", str(site), "--out", str(tmp_path / "c")]) == 2
        assert "--site" in capsys.readouterr().err
    assert not (tmp_path / "c").exists() and fakes.cases == []


def test_identity_mismatch_fails_the_subject(tmp_path: Path, fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    """A wheel whose installed copy detects as another release is not certified under the asked id."""
    monkeypatch.setattr(runner, "_install_wheel", lambda subject, cert, site, dirs, python: _sgl_site(site, "0.1.3"))
    out = tmp_path / "certs"
    assert runner.main(["--releases", "0.1.4", "--out", str(out), "--cases", CASE_IDS[0],
                        "--work", str(tmp_path / "w")]) == 1
    cert = json.loads((out / "gpu-0.1.4.json").read_text())
    assert cert["verdict"] == "failed" and "detected as 'sgl-deep-gemm 0.1.3'" in cert["runner_error"]
    assert cert["tests"] == [] and fakes.cases == []


def test_tvm_ffi_wheel_follows_each_release_pin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def wheel(folder: Path, name: str, version: str, requires: str = "") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}-{version}-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as zf:
            meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n" + (
                f"Requires-Dist: {requires}\n" if requires else "")
            zf.writestr(f"{name}-{version}.dist-info/METADATA", meta)
        return path

    a, b = tmp_path / "a", tmp_path / "b"
    wheel(a, "sgl_deep_gemm", "0.1.4", "apache-tvm-ffi==0.1.11")
    wheel(b, "sgl_deep_gemm", "0.1.3", "apache-tvm-ffi==0.1.9")
    wheel(b, "sgl_deep_gemm", "0.0.9")  # no pin: no tvm-ffi wheel
    tvm11, tvm9 = wheel(a, "apache_tvm_ffi", "0.1.11"), wheel(b, "apache_tvm_ffi", "0.1.9")
    wheel(b, "apache_tvm_ffi", "0.1.11")  # a second copy: the first folder given wins
    seen: dict[str, list[str]] = {}
    monkeypatch.setattr(runner, "install_release",
                        lambda w, extra, target, python="": seen.__setitem__(w.name, [p.name for p in extra]))
    for version, want in (("0.1.4", [tvm11.name]), ("0.1.3", [tvm9.name]), ("0.0.9", [])):
        record: dict[str, Any] = {}
        runner._install_wheel(runner.Subject("wheel", version), record, tmp_path / "s", [a, b], "")
        assert seen[f"sgl_deep_gemm-{version}-py3-none-any.whl"] == want
        assert record["apache_tvm_ffi"] == ((want and want[0].split("-")[1]) or None)
    lone = tmp_path / "c"
    wheel(lone, "sgl_deep_gemm", "0.1.3", "apache-tvm-ffi==0.1.9")
    with pytest.raises(RuntimeError, match=r"needs apache-tvm-ffi==0\.1\.9"):
        runner._install_wheel(runner.Subject("wheel", "0.1.3"), {}, tmp_path / "s", [lone, a], "")


@pytest.mark.slow
def test_several_subjects_in_parallel_with_deadlines(tmp_path: Path, fakes: Fakes, monkeypatch: pytest.MonkeyPatch,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """Each subject gets its own folder; a deadline stops starting cases and the certificate says so."""
    monkeypatch.setattr(runner, "_install_wheel", lambda subject, cert, site, dirs, python:
                        _sgl_site(site, subject.release))
    monkeypatch.setattr(runner, "MIN_CASE_S", 0.2)
    per_site: dict[str, int] = {}

    def case(case_id: str, env: dict[str, str], timeout: float, cwd: Path, python: str = "", *,
             cut_short: bool = False) -> Any:
        fakes.case(case_id, env, timeout, cwd, python, cut_short=cut_short)
        site = env["PYTHONPATH"].split(os.pathsep)[0]
        per_site[site] = per_site.get(site, 0) + 1
        if per_site[site] == 2:
            time.sleep(timeout + 0.05)  # the second case ends just as the subject's time is up
        return {"id": case_id, "outcome": "passed", "duration": 0.0, "metric": "diff", "tolerance": 1e-4,
                "value": 1e-6}

    monkeypatch.setattr(runner, "run_case_child", case)
    cases = list(CASES)[:8]
    out, work = tmp_path / "certs", tmp_path / "work"
    t0 = time.monotonic()
    rc = runner.main(["--releases", "0.1.3,0.1.4", "--site", str(_bundle_site(tmp_path)), "--jobs", "3",
                      "--release-timeout", "8", "--out", str(out), "--cases", ",".join(cases),
                      "--work", str(work)])
    took = time.monotonic() - t0
    assert rc == 1  # incomplete is not a pass
    assert took < 20  # side by side (one after another takes 3 x 8 s)
    for name in ("gpu-0.1.3.json", "gpu-0.1.4.json", "gpu-sglang-kernel-0.4.2.json"):
        cert = json.loads((out / name).read_text())
        assert certificate.check(cert) == []
        ran, skipped = [t["id"] for t in cert["tests"]], [n["id"] for n in cert["not_run"]]
        assert ran == cases[:2] and skipped == cases[2:], (ran, skipped)
        assert cert["verdict"] == f"incomplete: {len(skipped)} of {len(cases)} cases not run (deadline)"
    sites = {c[0] for c in fakes.cases}
    assert sites == {str(work / r / "site") for r in ("0.1.3", "0.1.4", "sglang-kernel-0.4.2")}
    assert all(limit <= 8.0 and cut for _, _, limit, cut in fakes.cases)  # the deadline bounds each watchdog
    text = capsys.readouterr().out
    table = text[text.index("summary ("):]
    assert "sglang-kernel-0.4.2" in table and "sglang-kernel 0.4.2 (bundled deep_gemm)" in table
    assert "gpu-0.1.3.json" in table and "incomplete" in table


def test_certificates_are_written_as_subjects_finish(tmp_path: Path, fakes: Fakes,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_install_wheel", lambda subject, cert, site, dirs, python:
                        _sgl_site(site, subject.release))
    out = tmp_path / "certs"
    seen_early: list[bool] = []

    def case(case_id: str, env: dict[str, str], timeout: float, cwd: Path, python: str = "", *,
             cut_short: bool = False) -> Any:
        if "0.1.4" in env["PYTHONPATH"].split(os.pathsep)[0]:  # the slow one looks for the fast one's file
            deadline = time.monotonic() + 20
            while not (out / "gpu-0.1.3.json").exists() and time.monotonic() < deadline:
                time.sleep(0.05)
            seen_early.append((out / "gpu-0.1.3.json").exists() and not (out / "gpu-0.1.4.json").exists())
        return {"id": case_id, "outcome": "passed", "duration": 0.0, "metric": "diff", "tolerance": 1e-4,
                "value": 1e-6}

    monkeypatch.setattr(runner, "run_case_child", case)
    assert runner.main(["--releases", "0.1.4", "0.1.3", "--jobs", "2", "--out", str(out),
                        "--cases", CASE_IDS[0], "--work", str(tmp_path / "w")]) == 0
    assert seen_early == [True]


def _fake_python(tmp_path: Path, body: str) -> str:
    """An executable standing in for the interpreter of a case child."""
    path = tmp_path / "fakepy"
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_watchdog_tells_a_hang_from_a_deadline(tmp_path: Path) -> None:
    slow = _fake_python(tmp_path, "exec sleep 30")
    case_id = next(iter(CASES))
    t0 = time.monotonic()
    hang = runner.run_case_child(case_id, dict(os.environ), 0.5, tmp_path, slow)
    cut = runner.run_case_child(case_id, dict(os.environ), 0.5, tmp_path, slow, cut_short=True)
    assert time.monotonic() - t0 < 20
    assert hang["outcome"] == "hang" and "process group was killed" in hang["message"]
    assert cut["outcome"] == "cut" and "deadline" in cut["message"]


def test_stop_kills_the_children_and_cuts_the_case(tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    slow = _fake_python(tmp_path, f"echo $$ > {marker}; exec sleep 60")
    case_id = next(iter(CASES))
    result: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: result.update(
        runner.run_case_child(case_id, dict(os.environ), 120.0, tmp_path, slow)))
    worker.start()
    try:
        deadline = time.monotonic() + 20
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(marker.read_text())
        runner.stop_children()
        worker.join(30)
        assert not worker.is_alive()
        assert result["outcome"] == "cut"
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        assert runner.Deadline().left() == 0.0  # nothing new starts once stopped
    finally:
        STOP.clear()


def test_default_work_folder_is_removed(tmp_path: Path, fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(runner, "_install_wheel", lambda subject, cert, site, dirs, python:
                        _sgl_site(site, subject.release))
    assert runner.main(["--releases", "0.1.4", "--out", str(tmp_path / "c"), "--cases",
                        CASE_IDS[0]]) == 0
    assert list(tmp_path.glob("dgcompat-gpu-*")) == []


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_a_real_case_child_reports_through_the_watchdog(tmp_path: Path) -> None:
    """The case module's own child (CPU dry run on the reference backend), exiting right after its result."""
    env = runner.release_env(tmp_path / "site", tmp_path / "jit")
    assert env["DGCOMPAT_CASES_FAST_EXIT"] == "1"
    env.update(DGCOMPAT_CASES_DEVICE="cpu", DGCOMPAT_BACKEND="reference")
    rec = runner.run_case_child("runtime_knobs", env, 240.0, tmp_path)
    assert rec["outcome"] == "passed", rec.get("message")
    assert rec["checks"] and rec["child_duration"] <= rec["duration"]


@pytest.mark.wheels
def test_a_real_kernel_wheel_site_detects_as_its_bundle(tmp_path: Path) -> None:
    """deep_gemm/ and the dist-info taken out of a real kernel wheel, as the staged bundle site holds them."""
    wheel = published_wheel("sgl-kernel==0.3.21")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as zf:
        members = [n for n in zf.namelist() if (n.startswith("deep_gemm/") and "/include/" not in n)
                   or n.startswith("sgl_kernel-0.3.21.dist-info/")]
        zf.extractall(site, members)
    found = runner.detect_site(site)
    assert (found["source"], found["dist"], found["version"]) == ("bundled", "sgl-kernel", "0.3.21")
    assert runner.bundle_release_id(found) == "sgl-kernel-0.3.21"
    copied = tmp_path / "copy"
    assert runner.install_site(site, copied) == ["sgl_kernel-0.3.21.dist-info"]
    assert runner.detect_site(copied)["label"] == found["label"] == "sgl-kernel 0.3.21 (bundled)"


def test_an_abi_check_cut_by_the_deadline_is_not_a_verdict(tmp_path: Path, fakes: Fakes,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_install_wheel", lambda subject, cert, site, dirs, python:
                        _sgl_site(site, subject.release))
    monkeypatch.setattr(runner, "MIN_CASE_S", 0.1)
    limits: list[float] = []

    def abi_check(timeout: float, **kw: Any) -> Any:
        limits.append(timeout)
        return {"ok": False, "verdict": "hang", "detail": "no answer", "seconds": timeout, "load": None, "calls": []}

    monkeypatch.setattr(gpu_abi, "abi_check", abi_check)
    out = tmp_path / "c"
    assert runner.main(["--releases", "0.1.4", "--release-timeout", "30", "--out", str(out),
                        "--cases", ",".join(CASE_IDS), "--work", str(tmp_path / "w")]) == 1
    cert = json.loads((out / "gpu-0.1.4.json").read_text())
    assert limits and limits[0] <= 30 and certificate.check(cert) == []
    assert cert["verdict"] == f"incomplete: {len(CASE_IDS)} of {len(CASE_IDS)} cases not run (deadline)"
    assert "ABI check was cut short" in cert["not_run"][0]["reason"] and fakes.cases == []
    # Without a deadline the same answer is a finding about the release.
    assert runner.main(["--releases", "0.1.4", "--out", str(out), "--cases", CASE_IDS[0],
                        "--work", str(tmp_path / "w2")]) == 0
    assert json.loads((out / "gpu-0.1.4.json").read_text())["verdict"].startswith("incompatible: ")


_DRIVER = r"""
import sys
from pathlib import Path
sys.path[:0] = [sys.argv[1]]
from dgcompat_conformance.gpu import runner
from tests.test_gpu_runner import ENV, Fakes, _sgl_site

fakes, real, fakepy = Fakes(), runner.run_case_child, sys.argv[2]
runner._abi.abi_check = fakes.abi_check
runner.environment_info = lambda: dict(ENV)
runner._install_wheel = lambda subject, cert, site, dirs, python: _sgl_site(site, subject.release)
runner.run_case_child = lambda case_id, env, timeout, cwd, python="", *, cut_short=False: real(
    case_id, env, timeout, cwd, fakepy, cut_short=cut_short)
sys.exit(runner.main(sys.argv[3:]))
"""


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_sigterm_keeps_certificates_and_leaves_no_child(tmp_path: Path) -> None:
    """What `timeout` does to the runner at its limit: the children go, every subject still gets its certificate."""
    import signal
    import subprocess
    import sys

    pids = tmp_path / "pids"
    pids.mkdir()
    slow = _fake_python(tmp_path, f"echo $$ > {pids}/$$; exec sleep 120")
    root = Path(__file__).resolve().parent.parent
    out = tmp_path / "c"
    proc = subprocess.Popen([sys.executable, "-c", _DRIVER, str(root), slow, "--releases", "0.1.3,0.1.4", "--jobs",
                             "2", "--out", str(out), "--cases", ",".join(CASE_IDS),
                             "--work", str(tmp_path / "w")], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    try:
        deadline = time.monotonic() + 60
        while len(list(pids.iterdir())) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
        children = [int(p.name) for p in pids.iterdir()]
        assert len(children) == 2, proc.stdout.read() if proc.stdout and proc.poll() is not None else "no case children started"
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, output
    for pid in children:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
    for release in ("0.1.3", "0.1.4"):
        cert = json.loads((out / f"gpu-{release}.json").read_text())
        assert certificate.check(cert) == [] and cert["tests"] == []
        assert [n["id"] for n in cert["not_run"]] == CASE_IDS
        assert cert["verdict"] == f"incomplete: {len(CASE_IDS)} of {len(CASE_IDS)} cases not run (the run was stopped)"
    assert "summary (" in output
