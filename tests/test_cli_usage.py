"""Every command of the certification wing answers malformed arguments with a usage error.

Each case runs one command (in-process through its ``main(argv)``; a few through ``python -m`` to
show that no traceback reaches the terminal) with one malformed argument: a misspelt release or
distribution, a negative or non-finite number, a missing or unreadable path, a file where a
folder is expected or a folder where a file is expected. Each must exit with status 2, print one
error line naming the argument and the value that came, print no traceback, and leave every file
and folder it was given as it was (nothing created, changed or removed).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from dgcompat_conformance import cli, conform, doctor, pins
from dgcompat_conformance.gpu import process_checks, runner, upstream_tests
from dgcompat_conformance.intake import builds as intake_builds
from dgcompat_conformance.intake import cli as intake_cli
from dgcompat_conformance.intake import host_asserts as contract
from dgcompat_conformance.releases import release_problem
from dgcompat_conformance.surface import cli as surface_cli
from testsupport import elfmaker

ROOT = Path(__file__).resolve().parent.parent

COMMANDS: dict[str, Callable[[list[str]], int]] = {
    "conform": conform.main,
    "latest": lambda argv: conform.main(["--latest", *argv]),
    "intake": intake_cli.main_latest,
    "builds": intake_builds.main,
    "doctor": doctor.main,
    "pin": pins.main,
    "surface": surface_cli.main,
    "table": lambda argv: cli.main(["table", *argv]),
    "contract": contract.main,
    "gpu": runner.main,
    "upstream": upstream_tests.main,
    "process": process_checks.main,
}

# Placeholders: MISSING (no such path), FILE (a file), DIR (an empty folder), LOCKED / LOCKEDFILE (a folder / file
# that cannot be read), LIB (a deep_gemm folder with a native library), OUT (an output folder that must not be created).
CASES: list[tuple[str, list[str], str, str]] = [
    # (command, argv, the argument the message names, what came, as the message shows it)
    ("conform", ["--release", "sgl-kernal==0.3.21", "--out", "OUT"], "--release", "'sgl-kernal'"),
    ("conform", ["--release", "0.1.44", "--out", "OUT"], "--release", "'0.1.44'"),
    ("conform", ["--release", "==0.1.4", "--out", "OUT"], "--release", "'==0.1.4'"),
    ("conform", ["--release", "0.1.4", "--jobs", "-1", "--out", "OUT"], "--jobs", "'-1'"),
    ("conform", ["--release", "0.1.4", "--timeout", "nan", "--out", "OUT"], "--timeout", "'nan'"),
    ("conform", ["--release", "0.1.4", "--timeout", "inf", "--out", "OUT"], "--timeout", "'inf'"),
    ("conform", ["--release", "0.1.4", "--examples", "-1", "--out", "OUT"], "--examples", "'-1'"),
    ("conform", ["--wheel", "MISSING", "--out", "OUT"], "--wheel", "MISSING"),
    ("conform", ["--wheel", "DIR", "--out", "OUT"], "--wheel", "DIR"),
    ("conform", ["--wheel", "LOCKEDFILE", "--out", "OUT"], "--wheel", "LOCKEDFILE"),
    ("conform", ["--release", "0.1.4", "--tests", "MISSING", "--out", "OUT"], "--tests", "MISSING"),
    ("conform", ["--release", "0.1.4", "--out", "FILE"], "--out", "FILE"),
    ("conform", ["--release", "0.1.4", "--out", "FILE/certs"], "--out", "FILE/certs"),
    ("conform", ["--release", "0.1.4", "--arch", "sm91", "--out", "OUT"], "--arch", "'sm91'"),
    ("latest", ["--version", "0.1.44", "--no-cpu-tier", "--out", "OUT"], "--version", "'0.1.44'"),
    ("latest", ["--version", "banana", "--no-cpu-tier", "--out", "OUT"], "--version", "'banana'"),
    ("latest", ["--version", "0.2.5", "--baseline", "nan", "--out", "OUT"], "--baseline", "'nan'"),
    ("latest", ["--version", "0.2.5", "--certificates", "MISSING", "--out", "OUT"], "--certificates", "MISSING"),
    ("latest", ["--version", "0.2.5", "--certificates", "FILE", "--out", "OUT"], "--certificates", "FILE"),
    ("latest", ["--version", "0.2.5", "--out", "FILE"], "--out", "FILE"),
    ("latest", ["--version", "0.2.5", "--timeout", "-1", "--out", "OUT"], "--timeout", "'-1'"),
    ("intake", ["--version", "0.2.5", "--index-url", "notaurl", "--out", "OUT"], "--index-url", "'notaurl'"),
    ("intake", ["--version", "0.2.5", "--certificates", "LOCKED", "--out", "OUT"], "--certificates", "LOCKED"),
    ("intake", ["--version", "0.2.5", "--timeout", "inf", "--out", "OUT"], "--timeout", "'inf'"),
    ("builds", ["0.1.44"], "releases", "'0.1.44'"),
    ("builds", ["--check", "sgl-kernal==0.3.21"], "releases", "'sgl-kernal'"),
    ("doctor", ["--jsn"], "--jsn", "--jsn"),
    ("doctor", ["extra"], "extra", "extra"),
    ("pin", ["--release", "0.1.44"], "--release", "'0.1.44'"),
    ("pin", ["--release", "nan"], "--release", "'nan'"),
    ("pin", ["--dist", "sgl-kernal", "--release", "0.3.21"], "--dist", "'sgl-kernal'"),
    ("pin", ["--dist", "sglang-kernel", "--release", "0.4.9"], "--release", "'0.4.9'"),
    ("pin", ["--release", "0.1.4", "--certificates", "MISSING"], "--certificates", "MISSING"),
    ("pin", ["--release", "0.1.4", "--certificates", "FILE"], "--certificates", "FILE"),
    ("pin", ["--docs", "--certificates", "LOCKED"], "--certificates", "LOCKED"),
    ("surface", ["0.1.44"], "source", "'0.1.44'"),
    ("surface", ["sgl-kernal==0.3.21"], "source", "'sgl-kernal==0.3.21'"),
    ("surface", ["MISSING"], "source", "MISSING"),
    ("surface", ["DIR"], "source", "DIR"),
    ("surface", ["FILE"], "source", "FILE"),
    ("surface", ["0.1.4", "--out", "DIR"], "--out", "DIR"),
    ("surface", ["0.1.4", "--out", "MISSING/surface.json"], "--out", "MISSING/surface.json"),
    ("surface", ["--diff", "0.1.4", "MISSING"], "--diff", "MISSING"),
    ("surface", ["--diff", "0.1.4", "0.1.44"], "--diff", "'0.1.44'"),
    ("table", ["--markdwn"], "--markdwn", "--markdwn"),
    ("contract", ["LIB", "LIB", "--before-release", "0.2.5", "--after-release", "sglang-kernal==0.4.2"],
     "--after-release", "'sglang-kernal'"),
    ("contract", ["LIB", "LIB", "--before-release", "0.2.5", "--after-release", "==0.4.2"], "--after-release",
     "'==0.4.2'"),
    ("contract", ["LIB", "LIB", "--before-release", "0.2.5", "--after-release", "vllm-banana"], "--after-release",
     "'vllm-banana'"),
    ("contract", ["LIB", "LIB", "--before-release", "0.2.5", "--after-release", "vllm-0.36.0"], "--after-release",
     "'0.36.0'"),
    ("contract", ["0.2.3.post2", "0.2.5", "--after-release", "sglang-kernal==0.4.2"], "--after-release",
     "'sglang-kernal'"),
    ("contract", ["LIB", "LIB", "--before-release", "0.1.44", "--after-release", "0.2.5"], "--before-release",
     "'0.1.44'"),
    ("contract", ["LIB", "LIB", "--after-release", "0.2.5"], "before", "LIB"),
    ("contract", ["0.2.3.post2", "MISSING"], "after", "MISSING"),
    ("contract", ["0.2.3.post2", "0.1.44"], "after", "'0.1.44'"),
    ("contract", ["FILE", "0.2.5"], "before", "FILE"),
    ("contract", ["DIR", "0.2.5"], "before", "DIR"),
    ("gpu", ["--releases", "0.1.44", "--out", "OUT"], "--releases", "'0.1.44'"),
    ("gpu", ["--releases", "banana", "--out", "OUT"], "--releases", "'banana'"),
    ("gpu", ["--abi-only", "0.1.55", "--out", "OUT"], "--abi-only", "'0.1.55'"),
    ("gpu", ["--releases", "0.1.4", "--jobs", "-1", "--out", "OUT"], "--jobs", "'-1'"),
    ("gpu", ["--releases", "0.1.4", "--deadline", "nan", "--out", "OUT"], "--deadline", "'nan'"),
    ("gpu", ["--releases", "0.1.4", "--release-timeout", "inf", "--out", "OUT"], "--release-timeout", "'inf'"),
    ("gpu", ["--releases", "0.1.4", "--timeout-scale", "-1", "--out", "OUT"], "--timeout-scale", "'-1'"),
    ("gpu", ["--releases", "0.1.4", "--wheels", "MISSING", "--out", "OUT"], "--wheels", "MISSING"),
    ("gpu", ["--releases", "0.1.4", "--wheels", "FILE", "--out", "OUT"], "--wheels", "FILE"),
    ("gpu", ["--releases", "0.1.4", "--wheels", "LOCKED", "--out", "OUT"], "--wheels", "LOCKED"),
    ("gpu", ["--releases", "0.1.4", "--cases", "bogus", "--out", "OUT"], "--cases", "'bogus'"),
    ("gpu", ["--releases", "0.1.4", "--out", "FILE"], "--out", "FILE"),
    ("gpu", ["--releases", "0.1.4", "--work", "FILE", "--out", "OUT"], "--work", "FILE"),
    ("gpu", ["--folder", "MISSING", "--release-id", "x", "--out", "OUT"], "--folder", "MISSING"),
    ("gpu", ["--folder", "FILE", "--release-id", "x", "--out", "OUT"], "--folder", "FILE"),
    ("gpu", ["--folder", "DIR", "--release-id", "x", "--out", "OUT"], "--folder", "DIR"),
    ("gpu", ["--folder", "DIR", "--release-id", "x", "--built-for-torch", "2.x", "--out", "OUT"], "--built-for-torch",
     "'2.x'"),
    ("gpu", ["--site", "MISSING", "--out", "OUT"], "--site", "MISSING"),
    ("gpu", ["--site", "FILE", "--out", "OUT"], "--site", "FILE"),
    ("gpu", ["--table", "--docs", "DIR"], "--docs", "DIR"),
    ("gpu", ["--table", "--docs", "MISSING/compatibility-gpu.md"], "--docs", "MISSING/compatibility-gpu.md"),
    ("upstream", ["--table-from", "MISSING"], "--table-from", "MISSING"),
    ("upstream", ["--table-from", "DIR"], "--table-from", "DIR"),
    ("upstream", ["--table-from", "FILE"], "--table-from", "FILE"),
    ("upstream", ["--tests", "MISSING", "--site", "DIR", "--work", "OUT"], "--tests", "MISSING"),
    ("upstream", ["--tests", "FILE", "--site", "DIR", "--work", "OUT"], "--tests", "FILE"),
    ("upstream", ["--tests", "DIR", "--site", "MISSING", "--work", "OUT"], "--site", "MISSING"),
    ("upstream", ["--tests", "DIR", "--wheels", "DIR", "--release", "0.1.44", "--work", "OUT"], "--release",
     "'0.1.44'"),
    ("upstream", ["--tests", "DIR", "--site", "DIR", "--timeout", "nan", "--work", "OUT"], "--timeout", "'nan'"),
    ("upstream", ["--tests", "DIR", "--site", "DIR", "--jobs", "-1", "--work", "OUT"], "--jobs", "'-1'"),
    ("upstream", ["--tests", "DIR", "--site", "DIR", "--out", "DIR", "--work", "OUT"], "--out", "DIR"),
    ("upstream", ["--tests", "DIR", "--site", "DIR", "--work", "FILE"], "--work", "FILE"),
    ("upstream", ["--tests", "DIR", "--site", "DIR", "--files", "test_typo.py", "--work", "OUT"], "--files",
     "'test_typo.py'"),
    ("upstream", ["--tests", "DIR", "--site", "DIR", "--modes", "rawx", "--work", "OUT"], "--modes", "'rawx'"),
    ("process", ["--check", "sms"], "--check", "--check"),
]


@pytest.fixture
def paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """The paths the placeholders stand for; results and caches go to folders that must stay absent."""
    given = tmp_path / "given"
    given.mkdir()
    (given / "a-file").write_text("not what any command wants here\n")
    (given / "a-folder").mkdir()
    (given / "lib").mkdir()
    (given / "lib" / "_C.so").write_bytes(elfmaker.make_so(rodata=b"\x00num_heads == 64\x00"))
    locked, locked_file = given / "locked-folder", given / "locked-file"
    locked.mkdir()
    locked_file.write_text("unreadable\n")
    for p in (locked, locked_file):
        p.chmod(0)
    # Running as root reads anything: the checks ask os.access, which is told the truth for these two.
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **kw: (
        False if Path(path).name.startswith("locked-") else real_access(path, mode, **kw)))
    monkeypatch.setenv("DGCOMPAT_RESULTS", str(tmp_path / "results"))
    monkeypatch.setenv("DGCOMPAT_CACHE", str(tmp_path / "cache"))
    return {"MISSING": given / "missing", "FILE": given / "a-file", "DIR": given / "a-folder", "LOCKED": locked,
            "LOCKEDFILE": locked_file, "LIB": given / "lib", "OUT": tmp_path / "out", "ROOT": tmp_path}


def _fill(argv: Sequence[str], paths: dict[str, Path]) -> list[str]:
    out = []
    for arg in argv:
        head, _, tail = arg.partition("/")
        out.append(str(paths[head] / tail) if head in paths and tail else str(paths[head]) if head in paths else arg)
    return out


def _tree(root: Path) -> dict[str, tuple[bool, int, int, int]]:
    """Every path under ``root`` with what a write or a removal would change."""
    found = {}
    for p in sorted(root.rglob("*")):
        st = p.lstat()
        found[str(p.relative_to(root))] = (p.is_dir(), st.st_size, st.st_mtime_ns, st.st_mode)
    return found


@pytest.mark.parametrize(("command", "argv", "option", "came"), CASES,
                         ids=[f"{c}:{' '.join(a)}" for c, a, _o, _v in CASES])
def test_malformed_argument_is_a_usage_error(command: str, argv: list[str], option: str, came: str,
                                             paths: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    before = _tree(paths["ROOT"])
    status = COMMANDS[command](_fill(argv, paths))
    err = capsys.readouterr().err
    assert status == 2, err
    errors = [line for line in err.splitlines() if "error:" in line]
    assert len(errors) == 1, err  # one message, after argparse's usage line
    message = errors[0]
    assert option in message, message
    assert _fill([came], paths)[0] in message, message
    assert "Traceback" not in err
    assert _tree(paths["ROOT"]) == before  # nothing written, changed or removed
    assert not (paths["ROOT"] / "out").exists() and not (paths["ROOT"] / "results").exists()


@pytest.mark.parametrize("argv", [
    ["-m", "dgcompat_conformance.intake.host_asserts", "LIB", "LIB", "--before-release", "0.2.5", "--after-release",
     "sglang-kernal==0.4.2"],
    ["-m", "dgcompat", "pin", "--release", "0.1.4", "--certificates", "FILE"],
    ["-m", "dgcompat_conformance.gpu.runner", "--table", "--docs", "DIR"],
    ["-m", "dgcompat_conformance.gpu.upstream_tests", "--table-from", "MISSING"],
    ["-m", "dgcompat_conformance.intake", "--version", "0.2.5", "--certificates", "FILE"],
    pytest.param(["-m", "dgcompat_conformance.gpu.process_checks", "--bogus"], marks=pytest.mark.slow),  # imports torch
], ids=lambda argv: " ".join(argv[1:3]))
def test_the_terminal_sees_no_traceback(argv: list[str], paths: dict[str, Path]) -> None:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "conformance")]))
    before = _tree(paths["ROOT"])
    proc = subprocess.run([sys.executable, *_fill(argv, paths)], capture_output=True, text=True, timeout=300, env=env,
                          cwd=str(paths["ROOT"]), check=False)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""
    assert len([ln for ln in proc.stderr.splitlines() if "error:" in ln]) == 1, proc.stderr
    assert _tree(paths["ROOT"]) == before


def test_the_right_names_still_pass(paths: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    """Control: the names the checks refuse differ from accepted ones only by the typo."""
    lib = str(paths["LIB"])
    for release in ("sglang-kernel==0.4.2", "sgl-kernel-0.3.21", "vllm-0.33.0", "deep-gemm==2.7.0", "0.2.6"):
        assert contract.main([lib, lib, "--before-release", "0.2.5", "--after-release", release]) == 0, release
    assert "changes: none" in capsys.readouterr().out
    assert pins.main(["--release", "0.1.4"]) == 0 and pins.main(["--dist", "sglang-kernel", "--release", "0.4.2"]) == 0
    assert "sglang-kernel==0.4.2" in capsys.readouterr().out


def test_which_releases_are_known() -> None:
    """Published sgl-deep-gemm releases and newer ones pass; a version between published ones is a typo."""
    assert release_problem("sgl-deep-gemm", "0.1.4") is None and release_problem("SGL_Deep.Gemm", "0.2.5") is None
    assert release_problem("sgl-deep-gemm", "0.2.6") is None  # newer than dgcompat knows: the intake's subject
    assert "got '0.1.44' (no such release)" in str(release_problem("sgl-deep-gemm", "0.1.44"))
    assert release_problem("sglang-kernel", "0.4.2") is None and release_problem("sglang-kernel", "0.4.9")
    assert release_problem("vllm", "0.34.0") is None and release_problem("vllm", "0.36.0")
    assert release_problem("deep-gemm", "2.7.0") is None
    assert "got 'sglang-kernal' (unknown)" in str(release_problem("sglang-kernal", "0.4.2"))
