"""``python -m bench``: CPU benchmarks (per-call overhead, allocations, import time); ``--gpu``: GPU wall time.

Each emulated release runs in its own fresh interpreter (``python -m bench.overhead``) with the
no-op stand-in first on its path, ``DGCOMPAT_ALLOW_TORCH_MISMATCH=1`` and ``DGCOMPAT_ARCH=sm90``.
The report is printed and the full results are written as JSON (``--json``).
"""

from __future__ import annotations

import argparse
import json
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from dgcompat_conformance.results import results_dir
from testsupport.record import write_json
from testsupport.stand_in import RELEASES, write_site

from . import GOALS
from .importtime import child_env, measure_import
from .report import render, summarize

REPO = Path(__file__).resolve().parent.parent


def _run_release(version: str, site: Path, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "bench.overhead", "--version", version, "--rounds", str(args.rounds),
           "--calls", str(args.calls), "--alloc-calls", str(args.alloc_calls), "--cpu", str(args.cpu),
           "--only", args.only, "--clock", args.clock, "--device", args.device]
    out = subprocess.run(cmd, capture_output=True, text=True, env=child_env(site, REPO), cwd=str(REPO),
                         timeout=args.timeout, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark of the {version} stand-in failed:\n{out.stderr}")
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def run_cpu(args: argparse.Namespace, command: str) -> dict[str, Any]:
    """Run every CPU benchmark and return the JSON-ready result."""
    import torch

    versions = [v.strip() for v in args.releases.split(",") if v.strip()]
    overhead: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="dgcompat-bench-") as tmp:
        sites = {v: write_site(Path(tmp) / v, v) for v in versions}
        for version in versions:
            print(f"[bench] sgl-deep-gemm {version} stand-in ...", file=sys.stderr, flush=True)
            overhead[version] = _run_release(version, sites[version], args)
        print("[bench] import time ...", file=sys.stderr, flush=True)
        imports = measure_import(sites[versions[0]], REPO, runs=args.import_runs)
    result: dict[str, Any] = {
        "schema": 1,
        "command": command,
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "platform": platform.platform(), "processor": platform.processor() or platform.machine()},
        "config": {"rounds": args.rounds, "calls": args.calls, "alloc_calls": args.alloc_calls, "clock": args.clock,
                   "device": args.device,
                   "import_runs": args.import_runs, "releases": versions, "cpu": args.cpu},
        "goals": GOALS,
        "overhead": overhead,
        "import": imports,
    }
    result["summary"] = summarize(overhead, imports)
    return result


def _gpu_dry_run(out: Path, command: str, timeout: int) -> int:
    """The GPU benchmark's code path on the CPU, in a child bound to the 0.1.4 stand-in."""
    code = ("import sys; from pathlib import Path; from bench.gpu import main; "
            f"sys.exit(main(Path({str(out)!r}), {command!r}, dry_run=True))")
    with tempfile.TemporaryDirectory(prefix="dgcompat-bench-") as tmp:
        site = write_site(Path(tmp) / "0.1.4", "0.1.4")
        return subprocess.run([sys.executable, "-c", code], env=child_env(site, REPO), cwd=str(REPO),
                              timeout=timeout, check=False).returncode


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--gpu", action="store_true", help="time real kernels (needs CUDA and a real deep_gemm)")
    parser.add_argument("--json", type=Path, default=None,
                        help="where to write the results (default: bench-cpu.json or bench-gpu.json in $DGCOMPAT_RESULTS/bench, "
                             "else ~/.cache/dgcompat/results/bench)")
    parser.add_argument("--releases", default=",".join(RELEASES), help="stand-in releases to emulate (CPU)")
    parser.add_argument("--rounds", type=int, default=20, help="timing rounds per statement (CPU)")
    parser.add_argument("--calls", type=int, default=20000, help="calls per round (CPU; per-batch rows: a tenth)")
    parser.add_argument("--alloc-calls", type=int, default=100, help="calls counted per statement (CPU)")
    parser.add_argument("--import-runs", type=int, default=15, help="fresh processes timing the import (CPU)")
    parser.add_argument("--cpu", type=int, default=0,
                        help="pin the timing process to this allowed CPU (index); -1 leaves it unpinned")
    parser.add_argument("--timeout", type=int, default=1800, help="seconds per child process")
    parser.add_argument("--quick", action="store_true", help="a tiny configuration (smoke test; numbers are noise)")
    parser.add_argument("--only", default="",
                        help="comma-separated parts of case labels to run, e.g. 'paged B=1 ,masked' (CPU: of the "
                             "per-call rows; the calibration rows always run)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where the CPU benchmark's inputs live (auto: cuda where torch sees a GPU, with a context)")
    parser.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                        help="CPU: time statements by wall clock, or by the timing thread's CPU time (on a loaded "
                             "shared machine, leaves out preemption)")
    parser.add_argument("--dry-run", action="store_true",
                        help="with --gpu: run the GPU orchestration on the CPU against the 0.1.4 stand-in "
                             "(checks the code path; measures nothing)")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.calls, args.alloc_calls, args.import_runs = 3, 300, 5, 2
    command = "python -m bench " + " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    command = command.strip()

    if args.gpu:
        out = args.json or results_dir("bench") / "bench-gpu.json"
        if args.dry_run:
            return _gpu_dry_run(out.resolve(), command, args.timeout)
        from .gpu import main as gpu_main

        return gpu_main(out, command, only=[p for p in args.only.split(",") if p])

    result = run_cpu(args, command)
    out = args.json or results_dir("bench") / "bench-cpu.json"
    write_json(out, result)
    print(render(result))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
