"""The warmup benchmarks' own code: the GPU script's steps run end to end on the CPU fake JIT (so that they cannot
fail for a silly reason on the GPU machine), its verdicts, and the identification-cost measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import warmup as B
from bench import warmup_gpu as G

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("lineage", ["compiler", "bundled", "deep_jit"])
def test_the_gpu_script_runs_every_step_on_the_fake_jit(tmp_path: Path, lineage: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DG_JIT_CACHE_DIR", "DGCOMPAT_JIT_CACHE_ROOT")}
    env.update(OUT=str(tmp_path / "out"), LIMIT="400", TMPDIR=str(tmp_path),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    out = subprocess.run(["bash", "bench/warmup_gpu.sh", "--fake", "--lineage", lineage], capture_output=True,
                         text=True, cwd=str(REPO), env=env, timeout=500, check=False)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted([G.LOG, G.RESULTS, G.SUMMARY])
    res = json.loads((tmp_path / "out" / G.RESULTS).read_text())
    assert res["ok"] and res["fake"] and res["lineage"] == lineage
    assert [r["step"] for r in res["steps"]] == [s.name for s in G.steps(tmp_path, fake=True, lineage=lineage)]
    serving = [r for r in res["steps"] if r["group"] == "relocate" and r["step"] in (
        "moved-folder", "moved-both", "ranks-readonly")]
    assert len(serving) == 3 and all(r["result"]["compiled"] == 0 and r["result"]["calls"] > 0 for r in serving)
    before = next(r for r in res["steps"] if r["step"] == "moved-both-as-is")["result"]
    # Without dgcompat the moved install misses every kernel of the 0.1.x and bundled JITs, none of DeepJIT's.
    assert (before["compiled"] > 0) == (lineage != "deep_jit")
    imported = next(r for r in res["steps"] if r["step"] == "import")["result"]
    assert imported["import"]["installed"] == imported["import"]["kernels"] > 0 and imported["check"]["compiled"] == 0
    if lineage == "compiler":
        floor = next(r for r in res["steps"] if r["step"] == "nvcc-floor")["result"]
        assert floor["kernels"] > 0 and floor["floor_s"] > floor["first_up_s"] and floor["cold_s"] > 0
    assert "every step passed" in out.stdout and f"| {lineage} | 0 (" in out.stdout
    assert not list(tmp_path.glob("dgcompat-warmup-gpu-*"))  # the stage folder is removed


def test_the_gpu_verdicts() -> None:
    serve = G.Step("s", "serve", [], 1, kind="serve")
    ok, text = G.verdict(serve, 0, 1.0, {"calls": 3, "compiled": 1, "new_files": 2, "calls_s": 0.1,
                                         "misses": ["dense N=1 K=128 M=1: 1 new kernel folders"]})
    assert not ok and "1 kernels compiled at serve time" in text and "dense N=1" in text
    warm = G.Step("w", "warm", [], 1, goal_s=15.0, expect={"method": "record"})
    report = {"method": "stand-in", "calls": 10, "identified": 2, "kernels": 3, "compiled": 3, "wall_s": 16.0}
    ok, text = G.verdict(warm, 0, 16.5, report)
    assert not ok and "goal <= 15 s: MISSED" in text  # a stand-in answer where a record was expected
    ok, text = G.verdict(G.Step("w", "warm", [], 1, goal_s=15.0), 0, 14.0, {**report, "wall_s": 12.0})
    assert ok and "goal <= 15 s: met" in text
    assert G.verdict(serve, None, 99.0, None) == (False, "exit None (time limit)")


@pytest.mark.slow
def test_the_identification_cost_is_measured_and_printed(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.warmup", "--fake", "--identify-cost", "--identify-calls", "16",
                          "--json", str(tmp_path / "bench-warmup.json")], capture_output=True, text=True,
                         cwd=str(REPO), timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "conformance")])}, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "16 calls, each its own M class" in out.stdout and "ms per identified call" in out.stdout
    res = json.loads((tmp_path / "bench-warmup-identify.json").read_text())
    assert res["single"]["identified"] == 16
    assert res["dense"]["calls"] == 6 * 4096 * 2 and res["dense"]["identified"] < res["dense"]["calls"] // 50


def test_the_gpu_script_finds_the_release_wheel_and_its_tvm_ffi_pin(tmp_path: Path) -> None:
    import zipfile

    def wheel(folder: Path, name: str, version: str, requires: str = "") -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{name}-{version}-cp39-abi3-manylinux_2_28_x86_64.whl"
        with zipfile.ZipFile(path, "w") as zf:
            zf.writestr(f"{name}-{version}.dist-info/METADATA",
                        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n{requires}")
        return path

    dg = wheel(tmp_path / "a", "sgl_deep_gemm", "0.1.4",
               "Requires-Dist: torch\nRequires-Dist: apache-tvm-ffi==0.1.9\n"
               'Requires-Dist: apache-tvm-ffi==0.1.12; extra == "test"\n')
    wheel(tmp_path / "a", "sgl_deep_gemm", "0.1.5")
    wheel(tmp_path / "b" / "x", "apache_tvm_ffi", "0.1.12")
    tvm = wheel(tmp_path / "b" / "x", "apache_tvm_ffi", "0.1.9")
    assert G.wheels([tmp_path / "a", tmp_path / "b"], "0.1.4") == [dg, tvm]
    try:
        G.wheels([tmp_path / "b"], "0.1.4")
    except SystemExit as exc:
        assert "no sgl-deep-gemm 0.1.4 wheel" in str(exc)
    else:
        raise AssertionError("a missing wheel must stop the script")


def test_bench_render_and_checks() -> None:
    assert len(B.MS) == 49 and B.MS[0] == 1 and B.MS[-1] == 4096 and 7 in B.MS and 252 in B.MS
    report = {"release": "sgl-deep-gemm 0.1.4", "method": "stand-in", "workers": 16, "wall_s": 11.0,
              "start_s": 3.0, "identify_s": 3.4, "wall_s_with_start": 11.5, "compiled": 37, "cached": 0,
              "notes": [], "processes": 4, "first_up_s": 2.5, "compile_s": 10.6}
    res = {"shapes": [list(s) for s in B.SHAPES], "ms": list(B.MS), "calls": 294,
           "serial": {"calls": 49, "calls_s": 20.0, "wall_s": 22.0, "entries": 7, "extrapolated": True,
                      "estimate_s": 120.0},
           "cold": report, "warm": {**report, "compiled": 0, "cached": 37, "wall_s": 4.0, "method": "record"},
           "warm_checked": {**report, "compiled": 0, "cached": 37, "wall_s": 4.5},
           "serve": {"calls_s": 1.0, "wall_s": 4.0, "new_entries": 0},
           "shared": {"ranks": 8, "rank_workers": 2, "wall_s": 20.0, "compiled_per_rank": [5] * 7 + [2],
                      "rank_phases": ["spawn 1.0-2.0 s (first-last worker up), identify 3.0 s, compile 9.0 s, "
                                      "total 9.5 s"],
                      "compiled_total": 37, "compiled_distinct": 37, "entries": 37},
           "checks": {"warmup_cache_matches_serial": None}}
    text = B.render(res)
    assert "120.0 s (extrapolated from 49 calls in 20.0 s)" in text
    assert "| dgcompat.warmup, warm start (record) | 4.0 s" in text and "37 (37 distinct" in text
    assert "every call checked (fresh=True) | 4.5 s" in text
    assert "cold (16 compiles at once, 4 processes) | 11.0 s" in text
    assert ("cold phases: spawn 2.5-3.0 s (first-last worker up), identify 3.4 s, compile 10.6 s, total 11.0 s"
            in text)
    assert "ranks' phases: spawn 1.0-2.0 s" in text
