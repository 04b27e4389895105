"""``import dgcompat`` time with torch already imported, and what that import pulls in.

Each sample is a fresh interpreter (an import is timed once per process) that imports torch, then
times ``import dgcompat`` with ``time.perf_counter_ns``, then checks ``sys.modules`` for deep_gemm.
A deep_gemm (the stand-in) is importable in those processes, so "imports no deep_gemm" is tested
where it could happen. For context the same process also times release detection
(``dgcompat.release()``, which reads distribution metadata and must not import deep_gemm either)
and the first bound call (which imports deep_gemm; the stand-in's import is nearly free, a real
wheel's takes 0.3-0.8 s).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["measure_import", "child_env"]

_PROBE = r"""
import json, sys, time
import torch
before = set(sys.modules)
t0 = time.perf_counter_ns()
import dgcompat
t1 = time.perf_counter_ns()
new = sorted(set(sys.modules) - before)
dg_after_import = any(m == "deep_gemm" or m.startswith("deep_gemm.") for m in sys.modules)
t2 = time.perf_counter_ns()
rel = dgcompat.release()
t3 = time.perf_counter_ns()
dg_after_release = any(m == "deep_gemm" or m.startswith("deep_gemm.") for m in sys.modules)
t4 = time.perf_counter_ns()
dgcompat.get_num_sms()
t5 = time.perf_counter_ns()
print(json.dumps({
    "import_ns": t1 - t0, "release_ns": t3 - t2, "first_call_ns": t5 - t4,
    "deep_gemm_after_import": dg_after_import, "deep_gemm_after_release": dg_after_release,
    "release": rel.label, "new_modules": new,
}))
"""


def child_env(site: Path | None, repo: Path) -> dict[str, str]:
    """The environment of a benchmark child: the stand-in first on the path, dgcompat's knobs set."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("DGCOMPAT_")}
    paths = [str(site)] if site is not None else []
    paths.append(str(repo))
    if env.get("PYTHONPATH"):
        paths.append(env["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["DGCOMPAT_ALLOW_TORCH_MISMATCH"] = "1"  # the stand-in "needs" another torch; it has no native library
    env["DGCOMPAT_ARCH"] = "sm90"
    return env


def measure_import(site: Path, repo: Path, *, runs: int) -> dict[str, Any]:
    """Median over ``runs`` fresh processes (after one discarded run that warms the bytecode cache)."""
    samples: list[dict[str, Any]] = []
    for i in range(runs + 1):
        out = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, timeout=300,
                             env=child_env(site, repo), cwd=str(repo), check=False)
        if out.returncode != 0:
            raise RuntimeError(f"import probe failed:\n{out.stderr}")
        if i:
            samples.append(json.loads(out.stdout.strip().splitlines()[-1]))
    imports = [s["import_ns"] / 1e6 for s in samples]
    last = samples[-1]
    return {
        "runs": runs,
        "import_ms_median": round(statistics.median(imports), 3),
        "import_ms_min": round(min(imports), 3),
        "import_ms_max": round(max(imports), 3),
        "release_ms_median": round(statistics.median(s["release_ns"] / 1e6 for s in samples), 3),
        "first_call_ms_median": round(statistics.median(s["first_call_ns"] / 1e6 for s in samples), 3),
        "imports_deep_gemm": any(s["deep_gemm_after_import"] for s in samples),
        "release_imports_deep_gemm": any(s["deep_gemm_after_release"] for s in samples),
        "release": last["release"],
        "modules_added_by_import": last["new_modules"],
    }
