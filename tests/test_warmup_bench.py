"""The warmup benchmarks' own code: the GPU script's steps run end to end on the CPU fake JIT (so that they cannot
fail for a silly reason on the GPU machine), its verdicts, and the identification-cost measurement."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench import warmup_gpu as G

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.slow
@pytest.mark.parametrize("lineage", ["compiler", "bundled", "deep_jit"])
def test_the_gpu_script_runs_every_step_on_the_fake_jit(tmp_path: Path, lineage: str) -> None:
    env = {k: v for k, v in os.environ.items() if k not in ("DG_JIT_CACHE_DIR", "DGCOMPAT_JIT_CACHE_ROOT")}
    env.update(OUT=str(tmp_path / "out"), LIMIT="400", TMPDIR=str(tmp_path),
               PATH=os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")]))
    out = subprocess.run(["bash", "bench/warmup_gpu.sh", "--fake", "--lineage", lineage], capture_output=True,
                         text=True, cwd=str(REPO), env=env, timeout=500)
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


def test_the_identification_cost_is_measured_and_printed(tmp_path: Path) -> None:
    out = subprocess.run([sys.executable, "-m", "bench.warmup", "--fake", "--identify-cost", "--identify-calls", "16",
                          "--json", str(tmp_path / "bench-warmup.json")], capture_output=True, text=True,
                         cwd=str(REPO), timeout=300,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "conformance")])})
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
               "Requires-Dist: apache-tvm-ffi==0.1.12; extra == \"test\"\n")
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
