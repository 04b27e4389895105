"""dgcompat.jit_warmup.warmup and ``dgcompat warmup``: bad input is a typed error or a usage error naming the
option, and the folder warmup fills is the one a serving process reads."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from dgcompat import jit_warmup as W
from dgcompat.errors import BadArgumentError
from dgcompat.jit_warmup import host as H

from .warmup_env import (
    compiles,
    jit_env_fixture,  # noqa: F401 - the jit_env fixture
    serve_all,
)

REPO = Path(__file__).resolve().parent.parent
SPEC = W.WarmupSpec((W.DenseGemm(256, 512),), W.MPolicy.values([1, 100]))
SPEC_CODE = "W.WarmupSpec((W.DenseGemm(256, 512),), W.MPolicy.values([1, 100]))"


def _cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("DG_JIT_CACHE_DIR", "DGCOMPAT_JIT_CACHE_ROOT")}
    full.update(env or {})
    full["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "conformance"), os.environ.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "-m", "dgcompat", "warmup", *args], capture_output=True, text=True,
                          env=full, cwd=str(cwd or REPO), timeout=120, check=False)


# ---- usage errors ------------------------------------------------------------------------------------

@pytest.mark.parametrize(("args", "option"), [
    (["--timeout", "-1"], "--timeout"),
    (["--timeout", "nan"], "--timeout"),
    (["--timeout", "inf"], "--timeout"),
    (["--workers", "0"], "--workers"),
    (["--processes", "0"], "--processes"),
    (["--device", "-1"], "--device"),
    (["--max-m", "0"], "--max-m"),
])
def test_bad_numbers_are_usage_errors_naming_the_option(args: list[str], option: str,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from dgcompat_conformance.cli import main

    with pytest.raises(SystemExit) as info:
        main(["warmup", "--dense", "256,512", "--ms", "1", *args])
    err = capsys.readouterr().err
    assert info.value.code == 2
    assert option in err and "expected" in err and args[1] in err, err


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_a_file_as_the_cache_folder_is_a_usage_error(tmp_path: Path) -> None:
    afile = tmp_path / "afile"
    afile.write_text("not a folder")
    env = {"DGCOMPAT_BACKEND": "reference"}
    for where in (afile, afile / "sub"):
        for extra in ([], ["--print-cache-dir"]):
            out = _cli("--dense", "256,512", "--ms", "1", "--cache-dir", str(where), *extra, env=env)
            assert out.returncode == 2, (where, extra, out.stdout, out.stderr)
            assert "--cache-dir" in out.stderr and "is a file, not a folder" in out.stderr, out.stderr
            assert "Traceback" not in out.stderr and "not supported" not in out.stderr


def test_bad_numbers_never_show_a_traceback() -> None:
    out = _cli("--dense", "256,512", "--ms", "1", "--timeout", "nan", env={"DGCOMPAT_BACKEND": "reference"})
    assert out.returncode == 2 and "--timeout" in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_a_relative_cache_folder_is_taken_from_the_current_folder(tmp_path: Path) -> None:
    out = _cli("--print-cache-dir", "--cache-dir", "rel/cache", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == str(tmp_path / "rel" / "cache")


@pytest.mark.parametrize(("kwargs", "argument"), [
    ({"timeout_s": -1}, "timeout_s"),
    ({"timeout_s": float("nan")}, "timeout_s"),
    ({"timeout_s": True}, "timeout_s"),
    ({"workers": 0}, "workers"),
    ({"processes": 0}, "processes"),
    ({"cache_dir": 5}, "cache_dir"),
    ({"cache_dir": ""}, "cache_dir"),
    ({"isolate": "yes"}, "isolate"),
])
def test_bad_arguments_of_the_api_are_typed_errors(kwargs: dict[str, Any], argument: str, clean_dgcompat: None,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    with pytest.raises(BadArgumentError) as info:
        W.warmup(SPEC, **kwargs)
    assert info.value.argument == argument


def test_a_file_as_cache_dir_of_the_api_is_a_typed_error(tmp_path: Path, clean_dgcompat: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    (tmp_path / "f").write_text("")
    with pytest.raises(BadArgumentError) as info:
        W.warmup(SPEC, cache_dir=tmp_path / "f")
    assert info.value.argument == "cache_dir" and "is a file" in str(info.value)


def test_an_unwritable_cache_folder_is_a_typed_error(tmp_path: Path, clean_dgcompat: None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o500)
    if os.access(locked, os.W_OK):  # root writes everywhere: the answer the system gives any other user
        real_access = os.access
        monkeypatch.setattr(os, "access", lambda path, mode, *a, **kw: False if Path(path) == locked
                            else real_access(path, mode, *a, **kw))
    with pytest.raises(BadArgumentError) as info:
        W.warmup(SPEC, cache_dir=locked / "cache")
    assert info.value.argument == "cache_dir" and "not writable" in str(info.value)


# ---- the folder a server uses ----------------------------------------------------------------------

@pytest.mark.slow  # a subprocess per run: the slow tier
def test_print_cache_dir_is_the_folder_deep_gemm_reads_and_is_idempotent(tmp_path: Path) -> None:
    first = _cli("--print-cache-dir", env={"DG_JIT_CACHE_DIR": str(tmp_path / "dg")})
    assert first.returncode == 0 and first.stdout.strip() == str(tmp_path / "dg"), first.stderr
    again = _cli("--print-cache-dir", env={"DG_JIT_CACHE_DIR": first.stdout.strip()})
    assert again.stdout.strip() == first.stdout.strip()
    isolated = _cli("--print-cache-dir", "--isolate", env={"DG_JIT_CACHE_DIR": str(tmp_path / "dg")})
    assert Path(isolated.stdout.strip()).parent == tmp_path / "dg", isolated.stderr
    nested = _cli("--print-cache-dir", "--isolate", env={"DG_JIT_CACHE_DIR": isolated.stdout.strip()})
    assert nested.stdout.strip() == isolated.stdout.strip()  # warming into what it printed does not nest


@pytest.mark.slow
def test_a_server_with_the_same_dg_jit_cache_dir_finds_the_kernels(jit_env: dict[str, Any]) -> None:
    root = jit_env["cache"]
    report = W.warmup(SPEC, cache_dir=root, workers=2, progress=False)
    assert report.compiled == 3 and Path(report.cache_dir) == root  # block_m 64, 128; the row-major scales' transpose
    assert len(list((root / "cache").iterdir())) == 3  # in the folder itself, not one level down
    code = textwrap.dedent(f"""
        import os
        from dgcompat import jit_warmup as W
        from dgcompat.jit_warmup.calls import Runner
        from dgcompat.jit_warmup.spec import plan_calls
        os.environ["DG_JIT_CACHE_DIR"] = {str(root)!r}   # set nothing else
        r = Runner(0)
        for c in plan_calls({SPEC_CODE}, family="sm90"):
            r.run(c.shape, c.m, c.form)
        print("served")
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=jit_env["env"], timeout=300, check=False)
    assert out.returncode == 0 and "served" in out.stdout, out.stderr
    assert len(compiles(jit_env["log"])) == 3  # nothing compiled at serve time


@pytest.mark.slow
def test_a_record_does_not_answer_for_a_moved_install(jit_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(H, "nvidia_smi", lambda query, device: "NVIDIA H200, 9.0")  # the record needs a GPU model
    assert W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False).method == "stand-in"
    assert W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False).method == "record"
    moved = jit_env["site"].parent / "moved-site"
    shutil.copytree(jit_env["site"], moved)
    monkeypatch.syspath_prepend(str(moved))
    dgcompat.reset()
    assert dgcompat.release().location is not None and str(moved) in str(dgcompat.release().location)
    again = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert again.method == "stand-in"  # the record was made for the install at the old path
    assert "served" in serve_all(jit_env, SPEC_CODE)
