"""A warmup that cannot strand anything: SIGINT, SIGTERM, a calling process that dies, a worker that dies. Every
worker, NVCC run and the multiprocessing resource tracker is gone within seconds, the scratch folder is removed, and
the same warmup run again continues. A full disk and a file-size limit are one clear error naming the folder and
what ran out. Subprocesses against the fake JIT of tests/fake_jit.py (Linux: processes are found through /proc)."""

from __future__ import annotations

import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from .warmup_env import REPO, compiles, install, serve

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="processes are found through /proc")

# Six kernels (two dense shapes, block_m 64 / 128 / 256 each) and two transposes; NVCC takes 3 s each, 2 at once.
SPEC = ["--dense", "256,512", "--dense", "384,512", "--ms", "1,100,2000"]
SPEC_CODE = "W.WarmupSpec((W.DenseGemm(256, 512), W.DenseGemm(384, 512)), W.MPolicy.values([1, 100, 2000]))"


def _processes() -> dict[int, tuple[int, str, str]]:
    """pid -> (parent pid, state, command line) of every process."""
    out: dict[int, tuple[int, str, str]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text().rsplit(")", 1)[1].split()
            cmd = Path(f"/proc/{d}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        out[int(d)] = (int(stat[1]), stat[0], cmd)
    return out


def _tree(root: int) -> dict[int, str]:
    """The process ``root`` and all its descendants: pid -> command line."""
    ps = _processes()
    found = {root}
    grew = True
    while grew:
        grew = False
        for pid, (ppid, _state, _cmd) in ps.items():
            if ppid in found and pid not in found:
                found.add(pid)
                grew = True
    return {p: ps[p][2] for p in found if p in ps}


def _alive(pids: dict[int, str]) -> dict[int, str]:
    ps = _processes()
    return {p: cmd for p, cmd in pids.items() if p in ps and ps[p][1] != "Z"}


def _start(env: dict[str, str], cache: Path) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "dgcompat", "warmup", *SPEC, "--cache-dir", str(cache),
                             "--workers", "2", "--no-progress"], env=env, cwd=str(REPO), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _compiling(proc: subprocess.Popen[str], deadline: float = 120.0) -> dict[int, str]:
    """Wait until the warmup runs NVCC (its workers are up and identifying); its process tree then."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < deadline:
        tree = _tree(proc.pid)
        nvcc = [c for c in tree.values() if "/bin/nvcc " in c and "--version" not in c]
        if nvcc and sum("spawn_main" in c for c in tree.values()) >= 1:
            return tree
        if proc.poll() is not None:
            break
        time.sleep(0.1)
    proc.kill()
    raise AssertionError(f"the warmup never compiled: {proc.communicate()[1][-3000:]}")


def _gone_within(pids: dict[int, str], seconds: float) -> float:
    t0 = time.monotonic()
    while _alive(pids) and time.monotonic() - t0 < seconds:
        time.sleep(0.05)
    left = _alive(pids)
    assert not left, f"still running after {seconds} s: {left}"
    return time.monotonic() - t0


@pytest.fixture
def slow_jit(tmp_path: Path) -> dict[str, Any]:
    env = install(tmp_path, "compiler")
    scratch_root = tmp_path / "tmp"
    scratch_root.mkdir()
    env.update(FAKE_NVCC_SECONDS="3", TMPDIR=str(scratch_root))
    return {"env": env, "cache": tmp_path / "cache", "tmp": scratch_root, "log": Path(env["FAKE_NVCC_LOG"])}


def _compiling_warmup(jit: dict[str, Any]) -> tuple[subprocess.Popen[str], dict[int, str]]:
    """A warmup started over ``jit``, once it runs NVCC: the process and its process tree."""
    proc = _start(jit["env"], jit["cache"])
    return proc, _compiling(proc)


def _left_nothing(jit: dict[str, Any], tree: dict[int, str], scratch_seconds: float = 0.0) -> None:
    """Every process of ``tree`` is gone within 5 s, the scratch folder is empty (at once, or within
    ``scratch_seconds``: where no handler of the warmup's own removes it), and the same warmup again continues."""
    _gone_within(tree, 5.0)
    t0 = time.monotonic()
    while list(jit["tmp"].iterdir()) and time.monotonic() - t0 < scratch_seconds:
        time.sleep(0.05)
    assert not list(jit["tmp"].iterdir())
    _continues(jit)


def _continues(jit: dict[str, Any]) -> None:
    """The same warmup again: it finishes, keeps what the first one completed, and serving compiles nothing."""
    env = {**jit["env"], "FAKE_NVCC_SECONDS": "0.05"}
    before = len(list((jit["cache"] / "cache").glob("kernel.*"))) if (jit["cache"] / "cache").exists() else 0
    out = subprocess.run([sys.executable, "-m", "dgcompat", "warmup", *SPEC, "--cache-dir", str(jit["cache"]),
                          "--workers", "2", "--no-progress", "--json"], env=env, cwd=str(REPO), text=True,
                         capture_output=True, timeout=300, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout)
    assert report["cached"] == before and report["compiled"] + report["cached"] == report["kernels"] == 7, report
    assert serve(env, jit["cache"], SPEC_CODE) == 0
    assert not list(jit["tmp"].iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_stops_every_process_and_removes_the_scratch(slow_jit: dict[str, Any], sig: int) -> None:
    proc, tree = _compiling_warmup(slow_jit)
    assert any("resource_tracker" in c for c in tree.values()) and any("spawn_main" in c for c in tree.values())
    assert len(list(slow_jit["tmp"].iterdir())) == 1  # the scratch folder
    os.kill(proc.pid, sig)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == 128 + sig, err[-3000:]
    assert f"stopped by {signal.Signals(sig).name}" in err and "run again continues" in err and "Traceback" not in err
    _left_nothing(slow_jit, tree)


@pytest.mark.slow
def test_a_calling_process_that_dies_leaves_nothing_behind(slow_jit: dict[str, Any]) -> None:
    proc, tree = _compiling_warmup(slow_jit)
    os.kill(proc.pid, signal.SIGKILL)  # no handler, no finally: the reaper and the workers' death signal act
    proc.communicate(timeout=30)
    _left_nothing(slow_jit, tree, scratch_seconds=5.0)


@pytest.mark.slow
def test_a_worker_that_dies_fails_the_warmup_and_leaves_nothing_behind(slow_jit: dict[str, Any]) -> None:
    proc, tree = _compiling_warmup(slow_jit)
    worker = next(p for p, c in tree.items() if "spawn_main" in c)
    os.kill(worker, signal.SIGKILL)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1 and "exit code -9" in err and "Traceback" not in err, err[-3000:]
    _left_nothing(slow_jit, tree)


def test_a_stale_scratch_folder_is_removed_by_the_next_warmup(tmp_path: Path) -> None:
    from dgcompat.jit_warmup import lifetime

    stale = tmp_path / f"{lifetime.PREFIX}dead"  # a folder whose warmup died: its lock file, unlocked
    stale.mkdir()
    (stale / "owner.lock").write_text("")
    (stale / "built").mkdir()
    other = tmp_path / f"{lifetime.PREFIX}foreign"  # no lock file: not ours to remove
    other.mkdir()
    assert lifetime.sweep(str(tmp_path)) == 1
    assert not stale.exists() and other.exists()
    import tempfile

    old = tempfile.tempdir
    tempfile.tempdir = str(tmp_path)
    try:
        with lifetime.Scratch() as running:  # a running warmup's folder is never swept
            assert lifetime.sweep(str(tmp_path)) == 0 and running.path.exists()
        assert not running.path.exists()
    finally:
        tempfile.tempdir = old


# ---- what ran out ----------------------------------------------------------------------------------------------

def _fsize(limit: int) -> Any:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


@pytest.mark.slow
@pytest.mark.parametrize(("limit", "where"), [(2048, "the warmup's scratch folder"), (40_000, "the warmup's scratch folder")])
def test_a_file_size_limit_is_one_clear_error(tmp_path: Path, limit: int, where: str) -> None:
    env = install(tmp_path, "compiler")
    env.update(TMPDIR=str(tmp_path), FAKE_NVCC_PAD="65536")  # outputs of 64 KiB: NVCC's write fails
    out = subprocess.run([sys.executable, "-m", "dgcompat", "warmup", "--dense", "256,512", "--ms", "1",
                          "--cache-dir", str(tmp_path / "cache"), "--no-progress"], env=env, cwd=str(REPO),
                         text=True, capture_output=True, timeout=300, preexec_fn=_fsize(limit), check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    err = out.stderr
    assert "Traceback" not in err and "not supported" not in err, err[-3000:]
    assert "StorageError" in err and "the file-size limit was reached" in err and f"RLIMIT_FSIZE = {limit}" in err
    assert where in err, err[-3000:]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith("dgcompat-warmup-")]


def _tmpfs(folder: Path, size: str) -> list[str] | None:
    """A command prefix that runs its command with a ``size`` tmpfs mounted on ``folder`` (a private mount
    namespace), or None where this host does not allow it."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return None
    probe = subprocess.run([unshare, "--mount", "--map-root-user", "sh", "-c",
                            f"mount -t tmpfs -o size={size} none {folder} && echo ok"], capture_output=True, text=True, check=False)
    if "ok" not in probe.stdout:
        probe = subprocess.run([unshare, "--mount", "sh", "-c", f"mount -t tmpfs -o size={size} none {folder} && echo ok"],
                               capture_output=True, text=True, check=False)
        if "ok" not in probe.stdout:
            return None
        return [unshare, "--mount", "sh", "-c", f'mount -t tmpfs -o size={size} none {folder} && exec "$@"', "sh"]
    return [unshare, "--mount", "--map-root-user", "sh", "-c",
            f'mount -t tmpfs -o size={size} none {folder} && exec "$@"', "sh"]


@pytest.mark.slow
def test_a_full_disk_is_one_clear_error(tmp_path: Path) -> None:
    env = install(tmp_path, "compiler")
    disk = tmp_path / "disk"
    disk.mkdir()
    wrap = _tmpfs(disk, "1m")
    if wrap is None:
        pytest.skip("no private mount namespace here (unshare --mount): a full disk cannot be made")
    env.update(TMPDIR=str(disk / "tmp"), FAKE_NVCC_PAD=str(400_000))  # two kernels fill the 1 MiB disk
    script = (f"mkdir -p {disk}/tmp && exec {sys.executable} -m dgcompat warmup --dense 256,512 --ms 1,100 "
              f"--cache-dir {disk}/cache --no-progress --workers 1")
    out = subprocess.run([*wrap, "sh", "-c", script], env=env, cwd=str(REPO), text=True, capture_output=True,
                         timeout=300, check=False)
    assert out.returncode == 1, out.stdout + out.stderr
    err = out.stderr
    assert "Traceback" not in err and "not supported" not in err, err[-3000:]
    assert "StorageError" in err and "no space left on the device" in err and str(disk) in err, err[-3000:]
    assert len(compiles(Path(env["FAKE_NVCC_LOG"]))) >= 1
