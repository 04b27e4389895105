"""dgcompat.jit_warmup.warmup: description, dedupe, locks, cache folders, the stand-in compiler, the CLI, and whole
warmups against a fake deep_gemm whose JIT runs a fake NVCC (testsupport/fake_jit)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import dgcompat
from dgcompat import jit_warmup as W
from dgcompat.errors import BadArgumentError, DeepGemmUnavailableError, UnsupportedFeatureError
from dgcompat.jit_warmup import host as H
from dgcompat.jit_warmup import messages as M
from dgcompat.jit_warmup import spec as S
from dgcompat.jit_warmup.cache import lock_kernel
from dgcompat.jit_warmup.standin import STAND_IN, read_log
from testsupport import fake_jit

from .warmup_env import compiles as _compiles
from .warmup_env import jit_env_fixture  # noqa: F401 - the jit_env fixture
from .warmup_env import serve_all as _serve_all

REPO = Path(__file__).resolve().parent.parent


# ---- the description -----------------------------------------------------------------------------

@pytest.mark.parametrize(("make", "arg"), [
    (lambda: W.DenseGemm(256, 100), "k"),
    (lambda: W.DenseGemm(0, 128), "n"),
    (lambda: W.DenseGemm(256, 128, "fp16"), "dtype"),  # type: ignore[arg-type]
    (lambda: W.GroupedGemm(8, 256, 128, "masked"), "max_m"),
    (lambda: W.GroupedGemm(8, 256, 128, "contiguous", max_m=64), "max_m"),
    (lambda: W.GroupedGemm(8, 256, 128, "ragged"), "layout"),  # type: ignore[arg-type]
    (lambda: W.PagedIndexer(64, next_n=0), "next_n"),
    (lambda: W.MPolicy.values([]), "ms"),
    (lambda: W.MPolicy.every(0), "max_m"),
    (lambda: W.WarmupSpec((), W.MPolicy.values([1])), "shapes"),
    (lambda: W.WarmupSpec((W.DenseGemm(256, 128),), [1, 2]), "m"),  # type: ignore[arg-type]
])
def test_bad_descriptions_are_typed_errors(make: Callable[[], Any], arg: str) -> None:
    with pytest.raises(BadArgumentError) as info:
        make()
    assert info.value.argument == arg


def test_plan_dedupes_and_applies_layout_rules() -> None:
    dense = W.DenseGemm(256, 512)
    contiguous = W.GroupedGemm(4, 256, 512)
    masked = W.GroupedGemm(4, 256, 512, "masked", max_m=64)
    spec = W.WarmupSpec((dense, dense, contiguous, masked), W.MPolicy.values([3, 1, 3, 100, 200]), scales=("tma",))
    calls = S.plan_calls(spec)
    assert [c.m for c in calls if c.shape == dense] == [1, 3, 100, 200]
    assert [c.m for c in calls if c.shape == contiguous] == [128, 256]  # rounded to the alignment, deduped
    assert [c.m for c in calls if c.shape == masked] == [1, 3]  # expected_m <= max_m
    assert len(calls) == len({(c.shape, c.m) for c in calls})


def test_m_policies() -> None:
    assert W.MPolicy.every(5).grid() == (1, 2, 3, 4, 5)
    grid = W.MPolicy.changes(5000).grid()
    assert grid[:64] == tuple(range(1, 65)) and 72 in grid and 71 not in grid
    assert 4096 in grid and 4100 not in grid and 4224 in grid and grid[-1] == 5000
    assert len(grid) == 64 + 56 + 112 + 7 + 1


def test_worker_memory_estimate() -> None:
    small, big = (H.scratch_bytes(S.Call(W.DenseGemm(7168, 16384), m)) for m in (1, 4096))
    assert big > 4096 * 16384 > small
    assert H.weight_bytes(W.DenseGemm(7168, 16384)) > 7168 * 16384
    moe = [S.Call(W.GroupedGemm(32, 4096, 7168), 128), S.Call(W.GroupedGemm(32, 4096, 7168, "masked", max_m=8), 8)]
    # the two layouts share one (32, 4096, 7168) weight in a worker
    assert H.worker_bytes(moe) < H.WORKER_OVERHEAD_BYTES + 2 * 32 * 4096 * 7168


def test_default_processes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(H, "cpu_count", lambda: 16)
    monkeypatch.setattr(H, "free_gpu_bytes", lambda device: None)
    few = [S.Call(W.DenseGemm(256, 512), m) for m in range(1, 295)]
    assert H.default_processes(few, 0, 16)[0] == 4  # a quarter of the cores
    assert H.default_processes(few, 0, 2)[0] == 2  # never more than the compiles at once
    many = [S.Call(W.DenseGemm(256, 512), m) for m in range(1, 6 * 4096 + 1)]
    assert H.default_processes(many, 0, 16)[0] == 16  # long call lists: up to the cores
    assert H.default_processes(few[:1], 0, 16)[0] == 1  # never more than the calls
    monkeypatch.setattr(H, "free_gpu_bytes", lambda device: 3 * H.WORKER_OVERHEAD_BYTES)
    assert H.default_processes(few, 0, 16)[0] == 2  # what fits in the free GPU memory


# ---- the cache folder ----------------------------------------------------------------------------

def test_cache_folder_per_release_and_torch(fake_site: Callable[..., Path], tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.metadata as md

    monkeypatch.delenv("DG_JIT_CACHE_DIR", raising=False)
    monkeypatch.delenv("DGCOMPAT_JIT_CACHE_ROOT", raising=False)
    fake_site("sgl-deep-gemm", "0.1.4", "")
    torch_mm = ".".join(md.version("torch").split("+")[0].split(".")[:2])
    folder = W.jit_cache_dir(tmp_path, isolate=True)
    assert folder == tmp_path / f"dgcompat-sgl-deep-gemm-0.1.4-torch{torch_mm}"
    assert W.jit_cache_dir(tmp_path) == tmp_path  # the default: the folder itself
    assert W.jit_cache_dir(folder, isolate=True) == folder  # asking again with what it gave does not nest
    fake_site("sgl-deep-gemm", "0.1.5", "")
    assert W.jit_cache_dir(tmp_path, isolate=True) != folder  # a wheel swap gets a new folder


def test_use_jit_cache_dir_is_stable(fake_site: Callable[..., Path], tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake_site("sgl-deep-gemm", "0.1.4", "")
    monkeypatch.setenv("DGCOMPAT_JIT_CACHE_ROOT", "")  # restored (removed) after the test: the calls below set it
    monkeypatch.delenv("DGCOMPAT_JIT_CACHE_ROOT")
    monkeypatch.setenv("DG_JIT_CACHE_DIR", str(tmp_path))
    first = W.use_jit_cache_dir(isolate=True)
    assert os.environ["DG_JIT_CACHE_DIR"] == str(first) and first.parent == tmp_path
    assert W.use_jit_cache_dir(isolate=True) == first  # not nested again
    assert W.jit_cache_dir() == first  # what warmup would fill is what the engine reads
    monkeypatch.delenv("DGCOMPAT_JIT_CACHE_ROOT")
    assert W.jit_cache_dir(isolate=True) == first  # DG_JIT_CACHE_DIR set to the folder it printed: not nested


# ---- locks -------------------------------------------------------------------------------------

@pytest.mark.slow  # a subprocess per run: the slow tier
def test_lock_is_exclusive_across_processes(tmp_path: Path) -> None:
    fd = lock_kernel(tmp_path, "abc", blocking=False)
    assert fd is not None
    probe = ("import sys; from pathlib import Path; from dgcompat.jit_warmup.cache import lock_kernel; "
             f"print(lock_kernel(Path({str(tmp_path)!r}), 'abc', blocking=False) is None)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    busy = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert busy.stdout.strip() == "True", busy.stderr
    os.close(fd)
    free = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=False)
    assert free.stdout.strip() == "False", free.stderr


_CLAIMER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from dgcompat.jit_warmup.cache import lock_kernel
    cache = Path(sys.argv[1])
    for ident in sys.argv[2:]:
        fd = lock_kernel(cache, ident, blocking=True)
        try:
            done = cache / (ident + ".done")
            if not done.exists():  # the discipline the workers follow: build only what is missing, under the lock
                with open(cache / "builds.log", "a") as f:
                    f.write(ident + "\\n")
                time.sleep(0.05)
                done.write_text("x")
        finally:
            os.close(fd)
""")


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_several_processes_build_each_kernel_once(tmp_path: Path) -> None:
    ids = [f"k{i}" for i in range(6)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), *sys.path])}
    procs = [subprocess.Popen([sys.executable, "-c", _CLAIMER, str(tmp_path), *(ids[j:] + ids[:j])], env=env)
             for j in range(4)]
    assert all(p.wait(timeout=120) == 0 for p in procs)
    built = (tmp_path / "builds.log").read_text().split()
    assert sorted(built) == ids


# ---- the stand-in compiler ---------------------------------------------------------------------

@pytest.fixture
def stand_in(tmp_path: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    script = tmp_path / "stand-in.sh"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    nvcc = fake_jit.write_nvcc(tmp_path / "bin")
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "kernel.cu").write_text("template<int BLOCK_M> kernel; BLOCK_M=64;")

    def run(mode: str, *args: str, extra: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        env = {**os.environ, "DGCOMPAT_WARMUP_NVCC": str(nvcc), "DGCOMPAT_WARMUP_MODE": mode,
               "DGCOMPAT_WARMUP_LOG": str(tmp_path / "log"), "FAKE_NVCC_LOG": str(tmp_path / "nvcc.log"),
               "FAKE_NVCC_SECONDS": "0", **(extra or {})}
        argv = args or (str(tmp_path / "build" / "kernel.cu"), "-cubin", "-o", str(tmp_path / "build" / "k.cubin"),
                        "-std=c++20", "--gpu-architecture=sm_90a")
        return subprocess.run([str(script), *argv], capture_output=True, text=True, env=env, check=False)

    return run


def test_stand_in_identifies_without_compiling(stand_in: Callable[..., Any], tmp_path: Path) -> None:
    out = stand_in("identify")
    assert out.returncode == 86
    (rec,) = read_log(tmp_path / "log")
    assert rec.action == "identified" and len(rec.identity) == 32
    assert rec.source.endswith("kernel.cu")
    assert not (tmp_path / "nvcc.log").exists()
    assert read_log(tmp_path / "log") == []  # read_log empties the log
    assert stand_in("identify").returncode == 86
    assert read_log(tmp_path / "log")[0].identity == rec.identity  # deterministic


def test_stand_in_digest_covers_source_and_flags(stand_in: Callable[..., Any], tmp_path: Path) -> None:
    stand_in("identify")
    base = read_log(tmp_path / "log")[0].identity
    cu = str(tmp_path / "build" / "kernel.cu")
    stand_in("identify", cu, "-cubin", "-o", str(tmp_path / "build" / "other.cubin"), "-std=c++20",
             "--gpu-architecture=sm_90a")
    assert read_log(tmp_path / "log")[0].identity == base  # the output path is not part of it
    stand_in("identify", cu, "-cubin", "-o", str(tmp_path / "elsewhere" / "uuid.cubin"), "-std=c++20",
             "--gpu-architecture=sm_90a")
    assert read_log(tmp_path / "log")[0].identity == base  # nor where it goes
    stand_in("identify", cu, "-cubin", "-o", "x", "-std=c++20", "--gpu-architecture=sm_100a")
    assert read_log(tmp_path / "log")[0].identity != base
    (tmp_path / "build" / "kernel.cu").write_text("template<int BLOCK_M> kernel; BLOCK_M=128;")
    stand_in("identify")
    assert read_log(tmp_path / "log")[0].identity != base


def test_a_vanished_source_gives_no_digest_unless_the_stand_in_kept_it(stand_in: Callable[..., Any],
                                                                     tmp_path: Path) -> None:
    stand_in("identify")
    base = read_log(tmp_path / "log")[0].identity
    stand_in("identify")
    (tmp_path / "build" / "kernel.cu").rename(tmp_path / "kernel.cu.gone")  # the JIT deleted its build folder
    (lost,) = read_log(tmp_path / "log")
    assert lost.action == "identified" and lost.identity == ""  # never a digest of the flags alone
    (tmp_path / "kernel.cu.gone").rename(tmp_path / "build" / "kernel.cu")
    (tmp_path / "kept").mkdir()
    keep = {"DGCOMPAT_WARMUP_KEEP": str(tmp_path / "kept")}
    assert stand_in("identify", extra=keep).returncode == 86
    assert stand_in("compile:" + "0" * 32, extra=keep).returncode == 86  # refused: kept as well
    (tmp_path / "build" / "kernel.cu").unlink()
    ident, refused = read_log(tmp_path / "log")
    assert (ident.action, refused.action) == ("identified", "refused")
    assert ident.identity == refused.identity == base and ident.kept and Path(ident.kept).is_file()


def test_stand_in_compiles_only_the_named_kernel(stand_in: Callable[..., Any], tmp_path: Path) -> None:
    stand_in("identify")
    ident = read_log(tmp_path / "log")[0].identity
    refused = stand_in("compile:" + "0" * 32)
    assert refused.returncode == 86 and read_log(tmp_path / "log")[0].action == "refused"
    assert not (tmp_path / "nvcc.log").exists()
    done = stand_in("compile:" + ident)
    assert done.returncode == 0, done.stderr
    assert read_log(tmp_path / "log")[0].action == "compiled"
    assert (tmp_path / "build" / "k.cubin").exists()
    assert len((tmp_path / "nvcc.log").read_text().splitlines()) == 1


def test_stand_in_keeps_a_recipe_and_installs_what_the_parent_built(stand_in: Callable[..., Any], tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat.jit_warmup.build import build, read_recipe
    from dgcompat.jit_warmup.standin import keep_recipe

    monkeypatch.setenv("FAKE_NVCC_LOG", str(tmp_path / "nvcc.log"))  # the parent's build runs in this process
    monkeypatch.setenv("FAKE_NVCC_SECONDS", "0")

    recipes, built = tmp_path / "recipes", tmp_path / "built"
    recipes.mkdir()
    env = {"DGCOMPAT_WARMUP_BUILT": str(built)}
    assert stand_in("identify", extra=env).returncode == 86
    (record,) = read_log(tmp_path / "log")
    ident = record.identity
    assert keep_recipe(record, recipes)  # the worker keeps it (the stand-in starts no process to identify)
    recipe = read_recipe(recipes / ident)
    assert recipe is not None and recipe.identity == ident
    assert recipe.output == str(tmp_path / "build" / "k.cubin") and recipe.code in recipe.args
    assert recipe.source.read_text() == (tmp_path / "build" / "kernel.cu").read_text()
    assert not (tmp_path / "nvcc.log").exists()  # identifying compiled nothing

    result = build(recipe, str(tmp_path / "bin" / "nvcc"), built / ident, timeout_s=60)
    assert result.ok, result.why
    assert (built / ident / "out").read_text() == recipe.source.read_text()  # the fake NVCC copies source to output
    assert len((tmp_path / "nvcc.log").read_text().splitlines()) == 1
    (built / ident / "stdout").write_text("ptxas info: 0 bytes spill stores\n")  # replayed at install

    other = stand_in("install:" + "0" * 32, extra=env)
    assert other.returncode == 86 and read_log(tmp_path / "log")[0].action == "refused"
    done = stand_in("install:" + ident, extra=env)
    assert done.returncode == 0, done.stderr
    assert read_log(tmp_path / "log")[0].action == "installed"
    assert "0 bytes spill stores" in done.stdout
    assert (tmp_path / "build" / "k.cubin").read_text() == recipe.source.read_text()
    assert len((tmp_path / "nvcc.log").read_text().splitlines()) == 1  # installing ran no NVCC

    (built / ident / "ok").unlink()  # nothing built: the install compiles with the real NVCC
    assert stand_in("install:" + ident, extra=env).returncode == 0
    assert read_log(tmp_path / "log")[0].action == "compiled"
    assert len((tmp_path / "nvcc.log").read_text().splitlines()) == 2


def test_a_recipe_is_pointed_at_its_own_build_folder(tmp_path: Path) -> None:
    from dgcompat.jit_warmup.build import Recipe, read_recipe, rewrite

    jit = "/cache/tmp/1234"
    recipe = Recipe("x", tmp_path / "source", f"{jit}/kernel.cu", f"{jit}/kernel.cubin",
                    (f"{jit}/kernel.cu", "-cubin", "-o", f"{jit}/kernel.cubin", f"-I{jit}/inc", "-I/dg/include", "-O3"))
    assert rewrite(recipe, tmp_path / "b") == [str(tmp_path / "b" / "kernel.cu"), "-cubin", "-o",
                                               str(tmp_path / "b" / "kernel.cubin"), f"-I{tmp_path / 'b'}/inc",
                                               "-I/dg/include", "-O3"]
    folder = tmp_path / "r" / "abc"
    folder.mkdir(parents=True)
    (folder / "source").write_text("code")
    (folder / "where").write_text(f"3\n{jit}/kernel.cu\n{jit}/kernel.cubin\n")
    (folder / "args").write_text(f"{jit}/kernel.cu\n-o\n{jit}/kernel.cubin\n")
    assert read_recipe(folder) is not None
    (folder / "where").write_text(f"4\n{jit}/kernel.cu\n{jit}/kernel.cubin\n")
    (folder / "args").write_text(f"{jit}/kernel.cu\n-o\n{jit}/kernel.cubin\n-lineinfo\n")  # names the source path
    assert read_recipe(folder) is None
    (folder / "where").write_text(f"3\n{jit}/kernel.cu\n{jit}/kernel.cubin\n")
    (folder / "args").write_text(f"{jit}/kernel.cu\n-o\n{jit}/ker\nnel.cubin\n")  # a line break in an argument
    assert read_recipe(folder) is None
    (folder / "args").unlink()  # the stand-in had not finished
    assert read_recipe(folder) is None


def test_stand_in_passes_version_and_pass_mode(stand_in: Callable[..., Any], tmp_path: Path) -> None:
    assert "release 12.9" in stand_in("identify", "--version").stdout
    assert stand_in("pass").returncode == 0
    assert read_log(tmp_path / "log") == []


# ---- the reference backend, nothing installed, the CLI ----------------------------------------------

# One scale form: these tests count the GEMM kernels (the scale forms have tests of their own).
SPEC = W.WarmupSpec((W.DenseGemm(256, 512), W.DenseGemm(384, 1024)), W.MPolicy.values([1, 2, 64, 65, 300, 2000]),
                    scales=("tma",))


def test_reference_backend_is_a_reported_no_op(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch,
                                               tmp_path: Path) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    report = W.warmup(SPEC, cache_dir=tmp_path)
    assert (report.method, report.kernels, report.compiled, report.cached, report.workers) == ("none", 0, 0, 0, 0)
    assert report.calls == 12 and "no-op" in report.summary()
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_nothing_installed_is_a_typed_error(fake_site: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
                                            tmp_path: Path) -> None:
    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p) / "deep_gemm").exists()])
    dgcompat.reset()
    if dgcompat.release().installed:
        pytest.skip("a deep_gemm is installed on this machine")
    with pytest.raises(DeepGemmUnavailableError):
        W.warmup(SPEC, cache_dir=tmp_path)


def test_warmup_argument_errors(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    with pytest.raises(BadArgumentError):
        W.warmup(SPEC, workers=0)
    with pytest.raises(BadArgumentError):
        W.warmup(SPEC, device=-1)
    with pytest.raises(BadArgumentError):
        W.warmup("dense 256x512")  # type: ignore[arg-type]
    with pytest.raises(BadArgumentError, match="every M exceeds"):
        W.warmup(W.WarmupSpec((W.GroupedGemm(4, 256, 512, "masked", max_m=8),), W.MPolicy.values([16])))


def test_cli_parses_and_reports(clean_dgcompat: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                                capsys: pytest.CaptureFixture[str]) -> None:
    from dgcompat.jit_warmup.cli import _parser, build_spec
    from dgcompat_conformance.cli import main

    spec = build_spec(_parser().parse_args(["--dense", "256,512", "--dense", "256,512,bf16", "--grouped",
                                            "8,256,512,masked,64", "--grouped", "8,256,512", "--indexer",
                                            "64,128,64,2", "--max-m", "300", "--policy", "changes"]))
    assert spec.shapes == (W.DenseGemm(256, 512), W.DenseGemm(256, 512, "bf16"),
                           W.GroupedGemm(8, 256, 512, "masked", "fp8", 64), W.GroupedGemm(8, 256, 512),
                           W.PagedIndexer(64, 128, 64, 2))
    assert spec.m == W.MPolicy.changes(300)
    monkeypatch.setenv("DGCOMPAT_BACKEND", "reference")
    monkeypatch.setenv("DGCOMPAT_ARCH", "sm90")
    assert main(["warmup", "--preset", "deepseek-v3-dense", "--ms", "1,2,4,7", "--json", "--cache-dir",
                 str(tmp_path)]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["method"] == "none" and report["calls"] == 6 * 4 * 2  # two scale forms on SM90
    assert report["forms"] == ["tma", "row"]
    assert main(["warmup", "--dense", "256,100", "--ms", "1"]) == 2
    assert "multiple of 128" in capsys.readouterr().err
    assert main(["warmup", "--dense", "256,512", "--ms", "1", "--max-tokens", "8"]) == 2  # two M policies
    assert "give one of them" in capsys.readouterr().err
    assert main(["warmup", "--json"]) == 2  # no shapes
    assert main(["warmup", "--print-cache-dir", "--cache-dir", str(tmp_path), "--no-isolate"]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path)


# ---- whole warmups against the fake JIT -----------------------------------------------------------

SPEC_CODE = ("W.WarmupSpec((W.DenseGemm(256, 512), W.DenseGemm(384, 1024)), "
             "W.MPolicy.values([1, 2, 64, 65, 300, 2000]), scales=('tma',))")


@pytest.mark.slow
def test_cold_then_warm(jit_env: dict[str, Any]) -> None:
    cold = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    compiles = _compiles(jit_env["log"])
    # The fake picks block_m 64 / 128 / 256 by M and block_n by N: 3 kernels per shape.
    assert (cold.method, cold.calls, cold.kernels, cold.compiled, cold.cached) == ("stand-in", 12, 6, 6, 0)
    assert len(compiles) == 6 and len(set(compiles)) == 6
    assert len(cold.compiled_ids) == 6
    entries = sorted((W.jit_cache_dir(jit_env["cache"]) / "cache").iterdir())
    assert len(entries) == 6 and all((e / "kernel.cubin").exists() for e in entries)
    assert not any((W.jit_cache_dir(jit_env["cache"]) / "tmp").iterdir())  # no leftovers of identification

    warm = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert (warm.kernels, warm.compiled, warm.cached) == (6, 0, 6)
    assert len(_compiles(jit_env["log"])) == 6
    assert "served" in _serve_all(jit_env, SPEC_CODE)
    assert len(_compiles(jit_env["log"])) == 6  # serving needed nothing more


@pytest.mark.slow
def test_two_processes_share_one_cache(jit_env: dict[str, Any]) -> None:
    code = textwrap.dedent(f"""
        import json
        from dgcompat import jit_warmup as W
        if __name__ == "__main__":
            r = W.warmup({SPEC_CODE}, cache_dir={str(jit_env['cache'])!r}, workers=1, progress=False)
            print(json.dumps([r.compiled, r.cached, list(r.compiled_ids)]))
    """)
    script = jit_env["cache"].parent / "rank.py"
    script.write_text(code)
    env = {**jit_env["env"], "FAKE_NVCC_SECONDS": "0.3"}
    procs = [subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert all(p.returncode == 0 for p in procs), [o[1] for o in outs]
    results = [json.loads(o[0].strip().splitlines()[-1]) for o in outs]
    compiled_ids = [i for r in results for i in r[2]]
    assert sum(r[0] for r in results) == 6 and len(set(compiled_ids)) == 6  # each kernel compiled once in all
    assert all(r[0] + r[1] == 6 for r in results)
    compiles = _compiles(jit_env["log"])
    assert len(compiles) == 6 and len(set(compiles)) == 6


@pytest.mark.slow
def test_calls_needing_two_kernels_and_bisection(jit_env: dict[str, Any]) -> None:
    spec = W.WarmupSpec((W.PagedIndexer(64, 128, 64, 1, 256), W.DenseGemm(256, 512)), W.MPolicy.changes(300))
    report = W.warmup(spec, cache_dir=jit_env["cache"], workers=2, progress=False)
    compiles = _compiles(jit_env["log"])
    assert len(compiles) == len(set(compiles)) == report.compiled
    # indexer: one logits kernel + one schedule kernel per align(B, 32) for B <= 300 (10); dense: block_m 64, 128,
    # and the transpose of its row-major scales
    assert report.compiled == 1 + 10 + 2 + 1
    served = _serve_all(jit_env, "W.WarmupSpec((W.PagedIndexer(64, 128, 64, 1, 256), W.DenseGemm(256, 512)), "
                                 "W.MPolicy.every(300))")
    assert "served" in served and len(_compiles(jit_env["log"])) == report.compiled  # every M was covered


@pytest.mark.slow
def test_compiles_run_at_once_outside_the_worker_processes(jit_env: dict[str, Any],
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    # 6 kernels of 1.5 s each: one worker process compiling them in its calls would need 9 s.
    monkeypatch.setenv("FAKE_NVCC_SECONDS", "1.5")
    report = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=6, processes=1, progress=False)
    assert (report.method, report.workers, report.processes, report.compiled, report.kernels) == (
        "stand-in", 6, 1, 6, 6)
    compiles = _compiles(jit_env["log"])
    assert len(compiles) == len(set(compiles)) == 6
    assert 0 < report.first_up_s <= report.start_s <= report.identify_s <= report.compile_s <= report.wall_s
    assert report.compile_s - report.first_up_s < 4.5, report.summary()
    # NVCC's seconds are reported, and the floor they allow: 9 s of NVCC / 6 at once after the first worker is up
    assert report.nvcc_runs == 6 and 6 * 1.5 <= report.nvcc_s < 6 * 3, report.phases()
    assert report.floor_s == pytest.approx(report.nvcc_s / 6 + report.first_up_s)
    assert 0 < report.first_compile_s <= report.compile_s and "floor" in report.phases()
    assert "served" in _serve_all(jit_env, SPEC_CODE) and len(_compiles(jit_env["log"])) == 6


def test_every_message_crosses_the_process_boundary_and_nothing_else_is_handled(tmp_path: Path) -> None:
    """Every task and answer of the pool<->worker protocol survives the pickling a spawn queue does; a message that
    is not one of them (the earlier string-tagged tuples) is refused, never unpacked by position."""
    import pickle
    import queue
    import typing

    from dgcompat.jit_warmup import pool as P
    from dgcompat.jit_warmup.worker import Worker, WorkerConfig

    samples = [M.Identify(0, "tma", (1, 2)), M.Bisect(1, "", (1, 2, 3)), M.Turn(), M.Install(0, "row", 64, "d"),
               M.Probe(0, "row", (1,)), M.Compile(0, "row", 2, None), M.Plain(1, "", (1, 2)), M.Stop(),
               M.Ready(0, None), M.Identified(0, 0, "tma", ((1, "d"),)), M.IdentifiedAll(1),
               M.Installed(0, 0, "tma", 1, "d", "compiled", 0.5, "e"), M.Probed(0, 0, "tma", (1,), ((2, "e"),)),
               M.Compiled(0, 0, "tma", 2, "d", (("d", "cached", 0.0),)), M.PlainDone(0, 1, ""), M.Unhonored(0),
               M.CallError(0, 0, "tma", None, "rejected", "no"), M.Fatal(0, "OSError: x", "Traceback ...")]
    protocol = {*typing.get_args(M.IdentifyTask), *typing.get_args(M.WorkTask), *typing.get_args(M.Answer)}
    assert {type(s) for s in samples} == protocol and len(protocol) == len(samples)
    assert all(pickle.loads(pickle.dumps(s)) == s for s in samples)
    pool = P.Pool(S.plan_calls(SPEC), SPEC.policy, workers=1, processes=1, device=0, cache=tmp_path,
                  scratch=tmp_path, nvcc="nvcc", verify=True, out=None, timeout_s=None)
    st = P._State(pool, "stand-in", 1, queue.Queue(), None)
    with pytest.raises(TypeError, match="not a worker's answer"):
        st.handle(("ready", 0, "sm90"))  # type: ignore[arg-type]
    cfg = WorkerConfig(0, 0, "stand-in", (), str(tmp_path), "", "", str(tmp_path / "log"), "", "nvcc")
    worker = Worker(cfg, lambda answer: None, None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not a work task"):
        worker._do(("probe", 0, "tma", [1], None), blocking=False)  # type: ignore[arg-type]


def test_compiling_starts_before_every_worker_is_up(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No barrier: the first worker up identifies, and each kernel it finds is compiled at once, while the other
    workers are still starting (on the H200 they came up over 1.2-1.6 s)."""
    import queue
    from concurrent.futures import ThreadPoolExecutor

    from dgcompat.jit_warmup import pool as P
    from dgcompat.jit_warmup.build import Outcome
    from dgcompat.jit_warmup.classes import SM90_01

    monkeypatch.setattr(P, "prepare_build", lambda digest, *_a: Outcome(digest, "elsewhere", why="held"))
    pool = P.Pool(S.plan_calls(SPEC), SPEC.policy, workers=4, processes=3, device=0, cache=tmp_path,
                  scratch=tmp_path, nvcc="nvcc", verify=True, out=None, timeout_s=None, rule=SM90_01)
    builder = ThreadPoolExecutor(4)
    st = P._State(pool, "stand-in", 3, queue.Queue(), builder)
    st.recipes = [tmp_path] * 3
    st.handle(M.Ready(0, "sm90"))
    st.handle(M.Identified(0, 0, "tma", ((2000, "a"), (65, "b"))))
    builder.shutdown(wait=True)
    assert st.first_up_s > 0 and st.start_s == 0  # two of the three workers are not up yet
    assert st.first_compile_s >= st.first_up_s and st.building == 2  # both kernels are compiling already
    st.handle(M.Ready(1, "sm90"))
    st.handle(M.Ready(2, "sm90"))
    assert st.start_s >= st.first_compile_s


def test_compiles_start_on_the_first_report_and_phase_two_waits_for_every_lock(tmp_path: Path,
                                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    import queue
    from concurrent.futures import ThreadPoolExecutor

    from dgcompat.jit_warmup import pool as P
    from dgcompat.jit_warmup.build import Outcome
    from dgcompat.jit_warmup.classes import SM90_01

    started: list[str] = []

    def fake_build(digest: str, *_args: Any) -> Outcome:
        started.append(digest)
        if digest == "b":  # built here: the lock stays held until a worker installed it
            return Outcome(digest, "built", os.open(tmp_path / "b.lock", os.O_CREAT | os.O_RDWR), 1.0)
        return Outcome(digest, "elsewhere", why="another process holds its lock")

    monkeypatch.setattr(P, "prepare_build", fake_build)
    (tmp_path / "dgcompat-locks").mkdir()
    pool = P.Pool(S.plan_calls(SPEC), SPEC.policy, workers=3, processes=2, device=0, cache=tmp_path,
                  scratch=tmp_path, nvcc="nvcc", verify=True, out=None, timeout_s=None, rule=SM90_01)
    work: queue.Queue[Any] = queue.Queue()
    builder = ThreadPoolExecutor(3)
    st = P._State(pool, "stand-in", 2, work, builder)
    st.recipes = [tmp_path, tmp_path]
    assert st.plan_classes(0, "tma") == [2, 64, 65, 300, 2000]  # M=1 and 2 share a class: 2 stands for 1
    st.handle(M.Identified(0, 0, "tma", ((2, "a"), (64, "c"), (65, "b"))))
    builder.shutdown(wait=True)
    assert sorted(started) == ["a", "b", "c"] and st.identified_all == 0  # compiling began before identifying ended
    st.drain_builds()
    tasks = sorted(str(work.get_nowait()) for _ in range(work.qsize()))
    # "b" is installed by its first call; the calls waiting for "a" and "c", which another process compiles (or
    # compiled), are probed
    assert tasks == sorted([str(M.Install(0, "tma", 65, "b")), str(M.Probe(0, "tma", (2,))),
                            str(M.Probe(0, "tma", (64,)))])
    st.handle(M.Probed(0, 0, "tma", (2,), ()))  # M=2 found "a" in the cache
    st.handle(M.Probed(0, 0, "tma", (), ((64, "c"),)))  # M=64 did not find "c": left to phase 2
    assert work.get_nowait() == M.Probe(0, "tma", (1,))  # the representative is complete: verify its class
    assert st.parked == [(0, "tma", 64)]
    for wid in (0, 1):
        st.handle(M.IdentifiedAll(wid))
        st.maybe_phase2()
    assert not st.phase2  # every call identified, but the lock of "b" is still held
    st.handle(M.Installed(1, 0, "tma", 65, "b", "compiled", 0.01, None))
    assert not st.held and (tmp_path / "dgcompat-locks" / "b.present").exists()
    assert st.entries["b"].status == "compiled" and st.entries["b"].seconds == pytest.approx(1.01)
    assert st.entries["a"].status == "cached"  # M=2 found it in the cache
    st.maybe_phase2()
    assert not st.phase2  # the verify probe of M=1 is still out
    st.handle(M.Probed(0, 0, "tma", (1,), ()))
    st.maybe_phase2()
    assert st.phase2
    assert [work.get_nowait() for _ in range(work.qsize())] == [M.Compile(0, "tma", 64, "c")]
    assert st.outstanding == 1 and not st.finished()
    st.handle(M.Compiled(0, 0, "tma", 64, "c", (("c", "compiled", 2.0),)))
    assert st.finished() and st.complete == {(0, "tma", m) for m in (1, 2, 64, 65)}


def test_the_longest_compiles_start_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With every compile slot taken, the waiting kernels start largest M first (large tiles take NVCC longest: a
    long compile that starts last ends the warmup alone), layout and schedule kernels last."""
    import queue
    import time
    from concurrent.futures import ThreadPoolExecutor

    from dgcompat.jit_warmup import pool as P
    from dgcompat.jit_warmup.build import Outcome
    from dgcompat.jit_warmup.classes import SM90_01

    started: list[str] = []

    def fake_build(digest: str, *_args: Any) -> Outcome:
        started.append(digest)
        return Outcome(digest, "elsewhere", why="another process holds its lock")

    monkeypatch.setattr(P, "prepare_build", fake_build)
    recipes = tmp_path / "recipes"
    (recipes / "t").mkdir(parents=True)
    (recipes / "t" / "source").write_text("#include <deep_gemm/impls/smxx_layout.cuh>\n")
    pool = P.Pool(S.plan_calls(SPEC), SPEC.policy, workers=1, processes=1, device=0, cache=tmp_path,
                  scratch=tmp_path, nvcc="nvcc", verify=True, out=None, timeout_s=None, rule=SM90_01)
    builder = ThreadPoolExecutor(1)
    st = P._State(pool, "stand-in", 1, queue.Queue(), builder)
    st.recipes = [recipes]
    st.handle(M.Identified(0, 0, "tma", ((2, "small"), (65, "mid"), (2000, "t"), (300, "big"))))
    for _ in range(200):
        time.sleep(0.01)
        st.drain_builds()
        if len(started) == 4:
            break
    builder.shutdown(wait=True)
    assert started == ["small", "big", "mid", "t"]  # "small" found a free slot; then by M, the layout kernel last


def test_identification_order_meets_every_shape_and_m_range_first(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Kernels change with M in steps, and all compiles start from the first reports: the first chunks the
    workers take must cover every shape and each shape's whole M range, and every call exactly once."""
    from dgcompat.jit_warmup import pool as P

    ms = sorted({2 ** i for i in range(13)} | set(range(7, 257, 7)))
    spec = W.WarmupSpec(tuple(W.DenseGemm(n, 512) for n in (256, 512, 768)), W.MPolicy.values(ms))
    calls = S.plan_calls(spec)
    pool = P.Pool(calls, spec.policy, workers=4, processes=4, device=0, cache=tmp_path, scratch=tmp_path,
                  nvcc="nvcc", verify=True, out=None, timeout_s=None)
    monkeypatch.setattr(random, "randrange", lambda n: 0)  # no rotation: the order itself is checked
    st = P._State(pool, "stand-in", 4, None, None)
    found = pool._identify_tasks(4, st)
    tasks = [t for t in found if isinstance(t, M.Identify)]
    assert tasks == found  # MPolicy.values: chunks of representatives, no bisection
    reps = sorted(st.members)
    assert sorted((t.shape, t.form, m) for t in tasks for m in t.ms) == reps  # each one once
    planned = sorted((idx, form, m) for rep, members in st.members.items() for idx, form, m in [rep, *members])
    assert planned == sorted((pool.shapes.index(c.shape), c.form, c.m) for c in calls)  # every call in one class
    assert len(reps) < len(calls) // 2
    first = tasks[:len(pool.shapes) * 2]
    assert sorted((t.shape, t.form) for t in first) == [
        (i, f) for i in range(3) for f in ("row", "tma")]  # the shapes and scale forms take turns
    for t in first:  # a coarse sample of the whole range, from its largest M (large tiles)
        idx, form, chunk = t.shape, t.form, t.ms
        mine = sorted(m for i, f, m in reps if (i, f) == (idx, form))
        assert chunk[0] == mine[-1] and min(chunk) <= mine[len(mine) // 2] and len(chunk) < len(mine)
    assert P._spread([3, 1, 2, 4]) == [4, 2, 3, 1] and P._spread([]) == []


@pytest.mark.slow
def test_without_a_usable_recipe_the_workers_compile(jit_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from dgcompat.jit_warmup import build as _warmup_build

    monkeypatch.setattr(_warmup_build, "read_recipe", lambda folder: None)  # read by this (the calling) process
    report = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert (report.method, report.compiled, report.cached) == ("stand-in", 6, 0)
    assert any("compiled through deep_gemm instead: no complete recipe" in n for n in report.notes)
    compiles = _compiles(jit_env["log"])
    assert len(compiles) == len(set(compiles)) == 6


@pytest.mark.slow
def test_markers_without_entries_are_only_a_hint(jit_env: dict[str, Any]) -> None:
    import shutil

    W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    folder = W.jit_cache_dir(jit_env["cache"])
    assert len(list((folder / "dgcompat-locks").glob("*.present"))) == 6
    shutil.rmtree(folder / "cache")  # the entries are gone, the markers stay
    again = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False, fresh=True)
    assert (again.compiled, again.cached) == (6, 0)
    assert len(list((folder / "cache").iterdir())) == 6
    compiles = _compiles(jit_env["log"])
    assert len(compiles) == 12 and len(set(compiles)) == 6  # each kernel once per cold cache


@pytest.mark.slow
def test_a_warm_cache_without_markers_compiles_nothing(jit_env: dict[str, Any]) -> None:
    W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    folder = W.jit_cache_dir(jit_env["cache"])
    for marker in (folder / "dgcompat-locks").glob("*.present"):
        marker.unlink()  # e.g. a cache that serving filled
    again = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False, fresh=True)
    assert (again.compiled, again.cached) == (0, 6)
    assert len(_compiles(jit_env["log"])) == 6  # no NVCC run for a kernel whose entry was there


@pytest.mark.slow  # a subprocess per run: the slow tier
def test_unsupported_shape_is_a_typed_error(jit_env: dict[str, Any]) -> None:
    spec = W.WarmupSpec((W.DenseGemm(256, 512), W.DenseGemm(200, 512)), W.MPolicy.values([1, 2]))
    with pytest.raises(UnsupportedFeatureError) as info:
        W.warmup(spec, cache_dir=jit_env["cache"], workers=1, progress=False)
    assert "N=200" in str(info.value) and "n % 64" in str(info.value)


@pytest.mark.slow
def test_nvrtc_falls_back_to_real_calls(jit_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DG_JIT_USE_NVRTC", "1")
    report = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert report.method == "calls" and any("NVRTC" in n for n in report.notes)
    assert report.compiled == len(_compiles(jit_env["log"])) == 6  # one shape per worker: no kernel twice here


@pytest.mark.slow
def test_a_jit_ignoring_the_stand_in_falls_back(jit_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FAKE_FIXED_NVCC", jit_env["env"]["DG_JIT_NVCC_COMPILER"])
    report = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=1, progress=False)
    assert report.method == "calls"
    assert any("does not build kernels through DG_JIT_NVCC_COMPILER" in n for n in report.notes)
    assert report.compiled == 6  # counted as new cache entries


@pytest.mark.slow
def test_a_recorded_warmup_returns_at_once(jit_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(H, "nvidia_smi", lambda query, device: "NVIDIA H200, 9.0")  # the record needs a GPU model
    cold = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert cold.method == "stand-in" and cold.compiled == 6
    again = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert (again.method, again.kernels, again.compiled, again.cached, again.workers) == ("record", 6, 0, 6, 0)
    other = W.WarmupSpec(SPEC.shapes, W.MPolicy.values([1, 2, 64, 65, 300]), scales=("tma",))  # another: no record
    assert W.warmup(other, cache_dir=jit_env["cache"], workers=1, progress=False).method == "stand-in"
    folder = W.jit_cache_dir(jit_env["cache"])
    import shutil

    shutil.rmtree(min((folder / "cache").iterdir()))  # an entry vanished: the record no longer holds
    redo = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    assert (redo.method, redo.compiled, redo.cached) == ("stand-in", 1, 5)
    assert W.warmup(SPEC, cache_dir=jit_env["cache"], workers=1, progress=False, fresh=True).method == "stand-in"
    assert len(_compiles(jit_env["log"])) == 7


@pytest.mark.slow
def test_the_calling_process_loads_neither_torch_nor_deep_gemm(jit_env: dict[str, Any]) -> None:
    code = textwrap.dedent(f"""
        import json, sys
        from dgcompat.jit_warmup import DenseGemm, MPolicy, WarmupSpec, warmup
        if __name__ == "__main__":
            spec = WarmupSpec((DenseGemm(256, 512),), MPolicy.values([1, 100]))
            r = warmup(spec, cache_dir={str(jit_env['cache'])!r}, workers=1, progress=False)
            print(json.dumps([r.compiled, "torch" in sys.modules, "deep_gemm" in sys.modules]))
    """)
    script = jit_env["cache"].parent / "parent.py"
    script.write_text(code)
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, env=jit_env["env"],
                         timeout=300, check=False)
    assert out.returncode == 0, out.stderr
    # block_m 64 and 128, and the transpose of the row-major scale form
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [3, False, False]


@pytest.mark.slow
def test_a_jit_that_deletes_its_failed_build_folder(jit_env: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # The newer JIT (upstream 2.8.1 as vLLM vendors it, seen on the H200) deletes the build folder, source
    # included, before the stand-in's refusal reaches the worker: the digests must not depend on reading it then.
    monkeypatch.setenv("FAKE_JIT_LAYOUT", "deep_jit")
    jit_env["env"]["FAKE_JIT_LAYOUT"] = "deep_jit"  # the serving process too
    cold = W.warmup(SPEC, cache_dir=jit_env["cache"], workers=2, progress=False)
    compiles = _compiles(jit_env["log"])
    assert (cold.method, cold.calls, cold.kernels, cold.compiled, cold.cached) == ("stand-in", 12, 6, 6, 0)
    assert len(compiles) == 6 and len(set(compiles)) == 6
    entries = sorted((W.jit_cache_dir(jit_env["cache"]) / "cache").iterdir())
    assert len(entries) == 6 and all((e / ".committed").exists() for e in entries)
    assert "served" in _serve_all(jit_env, SPEC_CODE)
    assert len(_compiles(jit_env["log"])) == 6  # serving needed nothing more
