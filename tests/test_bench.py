"""Smoke test of the benchmarks: they run end to end in a tiny configuration and write the JSON.

Timings are never asserted (a loaded CI machine makes them noise); only the shape of the results.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.slow


def _run_bench(*args: str, tmp_path: Path) -> dict[str, Any]:
    out = tmp_path / "bench.json"
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")}
    proc = subprocess.run([sys.executable, "-m", "bench", *args, "--json", str(out)], cwd=str(REPO), env=env,
                          capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr + proc.stdout
    result: dict[str, Any] = json.loads(out.read_text())
    return result


def test_cpu_benchmark_writes_the_expected_json(tmp_path: Path) -> None:
    result = _run_bench("--quick", "--import-runs", "1", tmp_path=tmp_path)
    assert {"schema", "command", "machine", "config", "goals", "overhead", "import", "summary"} <= set(result)
    assert set(result["overhead"]) == {"0.1.4", "0.2.3", "sglang-kernel-0.4.2"}  # the wheels and the bundled family
    labels = {"0.1.4": "sgl-deep-gemm 0.1.4", "0.2.3": "sgl-deep-gemm 0.2.3",
              "sglang-kernel-0.4.2": "sglang-kernel 0.4.2 (bundled)"}
    for version, res in result["overhead"].items():
        # the stand-ins' Python layer is not the published one: detection says so after the label
        assert res["release"] == labels[version] or res["release"].startswith(labels[version] + " [same version")
        names = {c["name"] for c in res["cases"]}
        assert {"fp8_gemm_nt", "m_grouped_fp8_gemm_nt_contiguous", "m_grouped_fp8_gemm_nt_masked",
                "get_paged_mqa_logits_metadata", "fp8_paged_mqa_logits [native next_n=2]",
                "fp8_paged_mqa_logits [fallback next_n=4, layers]"} <= names
        for case in res["cases"]:
            assert {"direct_ns", "dgcompat_ns", "resolved_ns", "added_ns", "goal_added_ns", "goal_met",
                    "resolve_is_upstream", "contract_matches"} <= set(case)
        # The native paged rows carry their floor (bench.cases.paged_floor raises if its checks fail).
        floors = {c["name"]: c["floor_added_ns"] for c in res["cases"] if c["floor_added_ns"] is not None}
        assert set(floors) == {"fp8_paged_mqa_logits [native next_n=2]",
                               "fp8_paged_mqa_logits [native next_n=2, layers]",
                               "fp8_fp4_paged_mqa_logits [vLLM 0.34 form, native next_n=2]"}, floors
        for alloc in res["allocations"]:
            assert {"direct", "dgcompat", "goal_met"} <= set(alloc)
            assert {"allocs_per_call", "writes_per_call", "views_per_call"} <= set(alloc["dgcompat"])
    assert {"import_ms_median", "imports_deep_gemm", "release_imports_deep_gemm"} <= set(result["import"])
    # The stand-in deep_gemm is importable in those processes; importing dgcompat must not import it.
    assert result["import"]["imports_deep_gemm"] is False
    assert {g["goal"] for g in result["summary"]} >= {"import dgcompat imports no deep_gemm"}


def test_gpu_benchmark_code_path_runs_on_the_cpu(tmp_path: Path) -> None:
    result = _run_bench("--gpu", "--dry-run", tmp_path=tmp_path)
    assert result["dry_run"] is True
    assert not result["errors"]
    kernels = {c["kernel"] for c in result["cases"]}
    assert kernels == {"fp8_gemm_nt", "m_grouped_fp8_gemm_nt_masked", "fp8_paged_mqa_logits"}
    for case in result["cases"]:
        assert {"direct_us", "dgcompat_us", "ratio", "goal_met", "same_result"} <= set(case)
        assert {"graph_direct_us", "graph_dgcompat_us", "graph_ratio"} <= set(case)
        # The indexer's graphs are decode steps: the direct one records the engine's metadata call too.
        assert case["graph_includes_per_step_work"] is (case["kernel"] == "fp8_paged_mqa_logits")
