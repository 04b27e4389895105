"""``python -m bench.nvcc_floor``: NVCC's own time per kernel of a warmed folder, and the floor of a cold warmup.

Every kernel the installed deep_gemm compiled into ``--cache-dir`` (the entries whose key reproduces from the
build its warmup recorded, :mod:`dgcompat.jit_warmup.relocate`) is compiled again from its ``kernel.cu`` with the
recorded command, into a temporary folder, twice:

1. ``--jobs`` at a time (default a quarter of the cores, so that each run has a core and memory bandwidth to
   itself): NVCC's own time per kernel, and their sum;
2. all the cores at once, longest first (the order a scheduler that knew the times would use): the shortest time
   in which these kernels can be compiled on this host at all.

It prints both beside the floor of a cold warmup, ``sum(NVCC s) / cores + first worker up`` (``--first-up``: the
``first_up_s`` of the cold warmup's report), and ``--cold`` (its wall time) as a ratio of it, one ``RESULT {...}``
JSON line last. ``--fake`` runs against the CPU fake JIT of the tests (the code path only).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from dgcompat.detection import release
from dgcompat.jit_warmup.host import cpu_count, real_nvcc
from dgcompat.jit_warmup.keys import HeaderHashes
from dgcompat.jit_warmup.relocate import Build, entry_files, read_builds, verify_entry


def _this_build(cache: Path) -> Build:
    rel = release()
    if not rel.location:
        raise SystemExit("bench.nvcc_floor: no deep_gemm installed")
    include = os.path.realpath(os.path.join(rel.location, "include"))
    mine = [b for b in read_builds(cache) if os.path.realpath(b.include) == include and b.command]
    if not mine:
        raise SystemExit(f"bench.nvcc_floor: {cache} has no record of how {rel.label} at {rel.location} compiles: "
                         "warm it with dgcompat warmup first")
    return min(mine, key=lambda b: bool(b.derived))


def _sources(cache: Path, build: Build) -> list[tuple[str, bytes]]:
    hashes = HeaderHashes(Path(build.include))
    out = []
    for folder in sorted(p for p in (cache / "cache").iterdir() if p.is_dir()):
        files = entry_files(folder)
        if verify_entry(folder.name, files, build, hashes) is None:
            out.append((folder.name, files["kernel.cu"]))
    return out


def _compile(nvcc: str, build: Build, name: str, code: bytes, root: Path) -> float:
    work = root / name
    work.mkdir(parents=True)
    source, output = work / "kernel.cu", work / "kernel.cubin"
    source.write_bytes(code)
    args = [a.replace("{source}", str(source)).replace("{output}", str(output)).replace("{dir}", str(work))
            for a in build.command]
    t0 = time.perf_counter()
    done = subprocess.run([nvcc, *args], cwd=work, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - t0
    if done.returncode != 0 or not output.is_file():
        raise SystemExit(f"bench.nvcc_floor: NVCC failed on {name}: {(done.stderr or done.stdout)[-2000:]}")
    shutil.rmtree(work, ignore_errors=True)
    return seconds


def _run(nvcc: str, build: Build, sources: list[tuple[str, bytes]], jobs: int) -> tuple[dict[str, float], float]:
    with tempfile.TemporaryDirectory(prefix="dgcompat-nvcc-floor-") as tmp, ThreadPoolExecutor(jobs) as pool:
        t0 = time.perf_counter()
        futures = {name: pool.submit(_compile, nvcc, build, name, code, Path(tmp)) for name, code in sources}
        times = {name: f.result() for name, f in futures.items()}
        return times, time.perf_counter() - t0


def measure(cache: Path, *, jobs: int, cores: int, first_up: float, cold: float | None) -> dict[str, Any]:
    build = _this_build(cache)
    nvcc = real_nvcc()
    if nvcc is None:
        raise SystemExit("bench.nvcc_floor: no NVCC found")
    sources = _sources(cache, build)
    if not sources:
        raise SystemExit(f"bench.nvcc_floor: no kernel of this build in {cache}")
    own, own_wall = _run(nvcc, build, sources, jobs)
    longest_first = sorted(sources, key=lambda s: -own[s[0]])
    _loaded, at_cores = _run(nvcc, build, longest_first, cores)
    total = sum(own.values())
    floor = total / cores + first_up
    res = {"release": build.release, "kernels": len(sources), "jobs": jobs, "cores": cores,
           "nvcc_own_s": {k: round(v, 3) for k, v in sorted(own.items(), key=lambda kv: -kv[1])},
           "nvcc_own_sum_s": round(total, 2), "own_wall_s": round(own_wall, 2),
           "at_cores_longest_first_s": round(at_cores, 2), "first_up_s": first_up, "floor_s": round(floor, 2),
           "compile_floor_s": round(at_cores + first_up, 2), "cold_s": cold,
           "cold_over_floor": None if cold is None else round(cold / floor - 1, 3)}
    return res


def render(res: dict[str, Any]) -> str:
    own = list(res["nvcc_own_s"].values())
    lines = [f"NVCC's own time per kernel ({res['kernels']} kernels of {res['release']}, {res['jobs']} at a time): "
             f"{res['nvcc_own_sum_s']:.1f} s in all, {min(own):.1f}-{max(own):.1f} s each "
             f"(mean {res['nvcc_own_sum_s'] / len(own):.1f} s)",
             f"floor = {res['nvcc_own_sum_s']:.1f} s / {res['cores']} cores + first worker up {res['first_up_s']:.1f} s "
             f"= {res['floor_s']:.1f} s; all {res['cores']} cores at once, longest first: "
             f"{res['at_cores_longest_first_s']:.1f} s of compiling (+ first worker up = {res['compile_floor_s']:.1f} s)"]
    if res["cold_s"] is not None:
        lines.append(f"cold warmup {res['cold_s']:.1f} s: {res['cold_over_floor']:+.0%} over the floor")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.nvcc_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cache-dir", type=Path, required=True, help="a folder a cold warmup filled")
    p.add_argument("--jobs", type=int, default=0, help="NVCC runs at once for their own time (default: cores / 4)")
    p.add_argument("--cores", type=int, default=0, help="the cores the warmup compiled on (default: this host's)")
    p.add_argument("--first-up", type=float, default=0.0, help="first_up_s of the cold warmup's report")
    p.add_argument("--cold", type=float, default=None, help="wall_s of the cold warmup's report")
    args = p.parse_args(argv)
    cores = args.cores or cpu_count()
    res = measure(args.cache_dir, jobs=args.jobs or max(1, cores // 4), cores=cores, first_up=args.first_up,
                  cold=args.cold)
    print(render(res))
    print("RESULT " + json.dumps(res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
