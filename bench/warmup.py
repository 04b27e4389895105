"""``python -m bench.warmup``: cold JIT warmup, serial vs :func:`dgcompat.jit_warmup.warmup`, on a real GPU.

Shape set: DeepSeek-V3's six dense FP8 GEMMs (N, K) x the M values 1, 2, 4, ... 4096 and every 7th M
up to 256 (7, 14, ..., 252): 49 values, 294 calls (the preset's sampled M set). Each measurement runs in fresh processes on its own
empty cache folder:

1. serial: one process makes every call in order (what engines do today); ``--serial-shapes K``
   times only the first K shapes and extrapolates (printed as such);
2. cold: ``dgcompat.jit_warmup.warmup`` on an empty cache; 3. warm: the same again on the now warm cache (it
   finds the record the cold run left), and once more with ``fresh=True`` (every call checked);
4. serve: one process makes every call on the warm cache (must compile nothing);
5. shared: 8 processes warm one empty cache at once (``--ranks``, ``--rank-workers`` compiles at once
   each, ``--rank-processes`` worker processes each);
6. layer set: a cold warmup of a whole DeepSeek-V3(.2) layer set per EP-8 rank (dense, grouped
   contiguous and masked MoE, indexer) on its own cache (``--no-layer-set`` skips it).

The cold run, the layer set and each sharing process also print their phases: when the first and the
last worker process was up (spawn), when every call was identified, when every kernel the calls need
first was compiled and installed, and the total.

Checks printed with the numbers: the warmup's cache holds exactly the kernel folders the serial
run produced (same names: deep_gemm's key does not contain the folder), every kernel was compiled
once, the warm start compiled nothing, serving compiled nothing, and the ranks compiled each kernel
once between them. ``--fake`` runs the same orchestration against the CPU fake JIT of the tests
(checks the code path; measures nothing real).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dgcompat.jit_warmup import warmup
from dgcompat.jit_warmup.cache import entries as _entries
from dgcompat.jit_warmup.calls import Runner
from dgcompat.jit_warmup.presets import DEEPSEEK_V3_DENSE, DEEPSEEK_V3_SAMPLED_MS, dense_shapes, layer_set, preset
from dgcompat.jit_warmup.spec import GroupedGemm, MPolicy, WarmupSpec, plan_calls
from dgcompat_conformance.results import results_dir
from testsupport.record import write_json

REPO = Path(__file__).resolve().parent.parent
SHAPES: tuple[tuple[int, int], ...] = DEEPSEEK_V3_DENSE
MS: tuple[int, ...] = DEEPSEEK_V3_SAMPLED_MS


def _spec(shapes: int) -> WarmupSpec:
    return WarmupSpec(dense_shapes(shapes), MPolicy.values(MS))


def _layer_set() -> WarmupSpec:
    """A whole DeepSeek-V3(.2) layer set per rank of an EP-8 deployment (:func:`dgcompat.jit_warmup.presets.layer_set`)."""
    return layer_set(MPolicy.values(MS))


# ---- children -----------------------------------------------------------------------------------

def _child_calls(shapes: int, cache: str) -> dict[str, Any]:
    """Every call of the spec, serially, in this process (``DG_JIT_CACHE_DIR`` = ``cache``)."""
    t_start = time.perf_counter()
    os.environ["DG_JIT_CACHE_DIR"] = cache  # before deep_gemm reads it (the first call)
    runner = Runner(0)
    calls = plan_calls(_spec(shapes), family=runner.family)
    t0 = time.perf_counter()
    for c in calls:
        runner.run(c.shape, c.m, c.form)
    _sync()
    t1 = time.perf_counter()
    return {"calls": len(calls), "calls_s": t1 - t0, "process_s": t1 - t_start, "entries": len(_entries(Path(cache)))}


def _child_warmup(shapes: int, cache: str, workers: int | None, fresh: bool,
                  processes: int | None = None) -> dict[str, Any]:
    """``shapes`` 0 means the whole layer set."""
    t_start = time.perf_counter()
    spec = _spec(shapes) if shapes else _layer_set()
    report = warmup(spec, cache_dir=cache, isolate=False, workers=workers, progress=False, fresh=fresh,
                             processes=processes)
    out = report.as_dict()
    out["process_s"] = time.perf_counter() - t_start
    return out


def _child_identify(cache: str, count: int) -> dict[str, Any]:
    """What identifying a call costs in one worker process: ``count`` calls that are each their own M class
    (contiguous MoE totals 128, 256, ...), then DeepSeek-V3's dense GEMMs at every M up to 4096 (no verify pass:
    identification only)."""
    single = WarmupSpec((GroupedGemm(8, 256, 512),), MPolicy.values([128 * i for i in range(1, count + 1)]),
                        scales=("tma",))
    one = warmup(single, cache_dir=f"{cache}/single", processes=1, progress=False, verify=False)
    dense = warmup(preset("deepseek-v3-dense", max_tokens=4096), cache_dir=f"{cache}/dense", processes=1,
                            progress=False, verify=False)
    return {"single": {"identified": one.identified, "identify_s": one.identify_s - one.start_s},
            "dense": {"calls": dense.calls, "identified": dense.identified,
                      "identify_s": dense.identify_s - dense.start_s}}


def _sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


def _child_main(argv: list[str]) -> int:
    role, shapes, cache = argv[0], int(argv[1]), argv[2]
    if role == "calls":
        result = _child_calls(shapes, cache)
    elif role == "identify":
        result = _child_identify(cache, shapes)
    else:
        procs = argv[5] if len(argv) > 5 else "auto"
        result = _child_warmup(shapes, cache, None if argv[3] == "auto" else int(argv[3]), argv[4] == "fresh",
                               None if procs == "auto" else int(procs))
    print("RESULT " + json.dumps(result), flush=True)
    return 0


# ---- the parent -----------------------------------------------------------------------------------

def _start(args: list[str], env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "bench.warmup", "--child", *args], cwd=str(REPO), env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(p: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    out, err = p.communicate(timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    if p.returncode != 0 or not lines:
        raise RuntimeError(f"benchmark child failed (exit {p.returncode}):\n{err[-4000:]}")
    result: dict[str, Any] = json.loads(lines[-1][len("RESULT "):])
    return result


def _run(args: list[str], env: dict[str, str], timeout: float) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    result = _finish(_start(args, env), timeout)
    return result, time.perf_counter() - t0


def run(base: Path, env: dict[str, str], *, serial_shapes: int, ranks: int, rank_workers: int,
        workers: int | None, timeout: float, layer_set: bool, processes: int | None = None,
        rank_processes: int | None = None) -> dict[str, Any]:
    n = len(SHAPES)
    log: Callable[[str], None] = lambda msg: print(f"[bench.warmup] {msg}", file=sys.stderr, flush=True)  # noqa: E731
    res: dict[str, Any] = {"shapes": [list(s) for s in SHAPES], "ms": list(MS), "calls": n * len(MS)}

    log(f"serial: {serial_shapes} of {n} shapes, one process ...")
    serial, wall = _run(["calls", str(serial_shapes), str(base / "serial")], env, timeout)
    serial["wall_s"] = wall
    serial["extrapolated"] = serial_shapes < n
    serial["estimate_s"] = serial["calls_s"] * n / serial_shapes
    res["serial"] = serial

    w = "auto" if workers is None else str(workers)
    pr = "auto" if processes is None else str(processes)
    log("cold warmup ...")
    cold, wall = _run(["warmup", str(n), str(base / "shared"), w, "fresh", pr], env, timeout)
    cold["wall_s_with_start"] = wall
    res["cold"] = cold
    log("warm start ...")
    warm, wall = _run(["warmup", str(n), str(base / "shared"), w, "record", pr], env, timeout)
    warm["wall_s_with_start"] = wall
    res["warm"] = warm
    log("warm start, every call checked again ...")
    check, wall = _run(["warmup", str(n), str(base / "shared"), w, "fresh", pr], env, timeout)
    check["wall_s_with_start"] = wall
    res["warm_checked"] = check
    log("serving every call on the warm cache ...")
    before = _entries(base / "shared")
    serve, wall = _run(["calls", str(n), str(base / "shared")], env, timeout)
    serve["wall_s"] = wall
    serve["new_entries"] = len(_entries(base / "shared")) - len(before)
    res["serve"] = serve

    log(f"{ranks} processes x {rank_workers} workers on one empty cache ...")
    t0 = time.perf_counter()
    rp = "auto" if rank_processes is None else str(rank_processes)
    procs = [_start(["warmup", str(n), str(base / "multi"), str(rank_workers), "fresh", rp], env)
             for _ in range(ranks)]
    reports = [_finish(p, timeout) for p in procs]
    multi_wall = time.perf_counter() - t0
    ids = [i for r in reports for e in r["entries"] if e["status"] == "compiled" for i in [e["identity"]]]
    res["shared"] = {"ranks": ranks, "rank_workers": rank_workers, "wall_s": multi_wall,
                     "rank_phases": [_phases(r) for r in reports],
                     "compiled_per_rank": [r["compiled"] for r in reports],
                     "compiled_total": len(ids), "compiled_distinct": len(set(ids)),
                     "entries": len(_entries(base / "multi"))}

    if layer_set:
        log("cold warmup of a whole DeepSeek-V3 layer set ...")
        try:
            layers, wall = _run(["warmup", "0", str(base / "layers"), w, "fresh", pr], env, timeout)
            layers["wall_s_with_start"] = wall
            res["layer_set"] = layers
        except RuntimeError as exc:  # report the main numbers anyway
            res["layer_set"] = {"error": str(exc)[-2000:]}

    serial_entries = _entries(base / "serial")
    shared_entries = _entries(base / "shared")
    res["checks"] = {
        "warmup_cache_matches_serial": None if serial["extrapolated"] else serial_entries == shared_entries,
        "cold_compiled_each_once": cold["compiled"] == cold["kernels"] == len(shared_entries),
        "warm_compiled_nothing": warm["compiled"] == 0 and warm["cached"] == cold["kernels"],
        "warm_checked_compiled_nothing": res["warm_checked"]["compiled"] == 0
        and res["warm_checked"]["cached"] == cold["kernels"],
        "serve_compiled_nothing": serve["new_entries"] == 0,
        "ranks_compiled_each_once": len(ids) == len(set(ids)) == res["shared"]["entries"] == cold["kernels"],
    }
    return res


def _phases(r: dict[str, Any]) -> str:
    """Where a warmup's time went (seconds from the call's start)."""
    return (f"spawn {r.get('first_up_s', 0.0):.1f}-{r['start_s']:.1f} s (first-last worker up), identify "
            f"{r['identify_s']:.1f} s, compile {r.get('compile_s', 0.0):.1f} s, total {r['wall_s']:.1f} s")


def render(res: dict[str, Any]) -> str:
    s, c, w, v, m = res["serial"], res["cold"], res["warm"], res["serve"], res["shared"]
    wc = res["warm_checked"]
    serial_label = (f"{s['estimate_s']:.1f} s (extrapolated from {s['calls']} calls in {s['calls_s']:.1f} s)"
                    if s["extrapolated"] else f"{s['calls_s']:.1f} s ({s['entries']} kernels; process {s['wall_s']:.1f} s)")
    lines = [
        f"dgcompat warmup benchmark: {len(res['shapes'])} dense FP8 shapes x {len(res['ms'])} M values = "
        f"{res['calls']} (shape, M) calls in every scale form the GPU takes ({c.get('calls', res['calls'])} calls), release "
        f"{c['release']}",
        "",
        "| run | wall | kernels compiled | found in cache |",
        "|---|---|---|---|",
        f"| serial, one process | {serial_label} | {s['entries']} | - |",
        f"| dgcompat.warmup, cold ({c['workers']} compiles at once, {c.get('processes', c['workers'])} processes) | "
        f"{c['wall_s']:.1f} s (process {c['wall_s_with_start']:.1f} s) | {c['compiled']} | {c['cached']} |",
        f"| dgcompat.warmup, warm start ({w['method']}) | {w['wall_s']:.1f} s (process {w['wall_s_with_start']:.1f} s)"
        f" | {w['compiled']} | {w['cached']} |",
        f"| dgcompat.warmup, warm start, every call checked (fresh=True) | {wc['wall_s']:.1f} s (process "
        f"{wc['wall_s_with_start']:.1f} s) | {wc['compiled']} | {wc['cached']} |",
        f"| serve every call on the warm cache | {v['calls_s']:.1f} s (process {v['wall_s']:.1f} s) | "
        f"{v['new_entries']} | - |",
        f"| {m['ranks']} processes x {m['rank_workers']} workers, one empty cache | {m['wall_s']:.1f} s | "
        f"{m['compiled_total']} ({m['compiled_distinct']} distinct; per rank {m['compiled_per_rank']}) | - |",
        "",
        f"cold phases: {_phases(c)}",
        f"ranks' phases: {'; '.join(m.get('rank_phases', []))}",
        *_layer_lines(res.get("layer_set")),
        "checks: " + ", ".join(f"{k}={v}" for k, v in res["checks"].items()),
        f"method: {c['method']}; notes: {'; '.join(c['notes'])}",
    ]
    return "\n".join(lines)


def _layer_lines(layers: dict[str, Any] | None) -> list[str]:
    if layers is None:
        return []
    if "error" in layers:
        return ["", f"layer set: FAILED: {layers['error']}"]
    return ["", f"layer set (6 dense, 2 grouped contiguous, 2 masked, 2 indexer shapes x {len(MS)} M): "
                f"{layers['calls']} calls, {layers['kernels']} kernels, {layers['compiled']} compiled, "
                f"{layers['wall_s']:.1f} s cold with {layers['workers']} compiles at once (process "
                f"{layers['wall_s_with_start']:.1f} s; {_phases(layers)})"]


def render_identify(res: dict[str, Any]) -> str:
    one, dense = res["single"], res["dense"]
    per = 1000 * one["identify_s"] / max(1, one["identified"])
    return "\n".join([
        f"identification, one worker process{' (fake JIT, this CPU)' if res.get('fake') else ''}:",
        f"  {one['identified']} calls, each its own M class: {one['identify_s']:.2f} s, {per:.2f} ms per identified call",
        f"  DeepSeek-V3 dense at every M <= 4096: {dense['calls']} calls (shape x M x scale form), "
        f"{dense['identified']} identified (one per M class, shape and scale form) in {dense['identify_s']:.2f} s: "
        f"{1000 * dense['identify_s'] / max(1, dense['calls']):.3f} ms per call of the description",
    ])


def _identify_cost(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="dgcompat-bench-identify-") as tmp:
        env = dict(os.environ)
        if args.fake:
            env.update(_fake_env(Path(tmp)))
        env["PYTHONPATH"] = os.pathsep.join([p for p in (env.get("PYTHONPATH", ""), str(REPO),
                                                         str(REPO / "conformance")) if p])
        res, wall = _run(["identify", str(args.identify_calls), str(Path(tmp) / "cache")], env, args.timeout)
    res["fake"], res["wall_s"] = args.fake, wall
    print(render_identify(res))
    out = args.json.with_name("bench-warmup-identify.json")
    write_json(out, res)
    print(f"wrote {out}")
    return 0


def _cold(args: argparse.Namespace) -> int:
    """Cold ``dgcompat warmup --preset deepseek-v3-dense --max-tokens N`` runs: wall time beside the floor its own NVCC
    runs allow (NVCC seconds / compiles at once + first worker up). With ``--fake``, the fake NVCC keeps a core busy
    for ``--nvcc-seconds`` (times 1-3 by kernel), so the pipeline's packing shows on this CPU."""
    rows = []
    for i in range(args.repeat):
        with tempfile.TemporaryDirectory(prefix="dgcompat-bench-cold-") as tmp:
            env = dict(os.environ)
            if args.fake:
                env.update(_fake_env(Path(tmp)))
                env.update(FAKE_NVCC_SECONDS=str(args.nvcc_seconds), FAKE_NVCC_BURN="1", FAKE_NVCC_VARY="1")
            env["PYTHONPATH"] = os.pathsep.join([p for p in (env.get("PYTHONPATH", ""), str(REPO),
                                                             str(REPO / "conformance")) if p])
            cmd = [sys.executable, "-m", "dgcompat", "warmup", "--preset", "deepseek-v3-dense", "--max-tokens",
                   str(args.max_tokens), "--cache-dir", str(Path(tmp) / "cache"), "--json", "--no-progress"]
            if args.workers:
                cmd += ["--workers", str(args.workers)]
            if args.processes:
                cmd += ["--processes", str(args.processes)]
            t0 = time.perf_counter()
            out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout, cwd=str(REPO), check=False)
            wall = time.perf_counter() - t0
            if out.returncode != 0:
                print(out.stderr[-3000:], file=sys.stderr)
                return 1
            r = json.loads(out.stdout)
            floor = r["nvcc_s"] / r["workers"] + r["first_up_s"]
            rows.append({"wall_s": r["wall_s"], "process_s": wall, "floor_s": floor, "kernels": r["kernels"],
                         "nvcc_s": r["nvcc_s"], "workers": r["workers"], "processes": r["processes"],
                         "first_up_s": r["first_up_s"], "start_s": r["start_s"], "identify_s": r["identify_s"],
                         "compile_s": r["compile_s"]})
            print(f"cold {i + 1}: {r['wall_s']:.1f} s (process {wall:.1f} s), {r['kernels']} kernels, NVCC "
                  f"{r['nvcc_s']:.1f} s with {r['workers']} at once, floor {floor:.1f} s, {r['wall_s'] / floor - 1:+.0%}"
                  f" over it; workers up {r['first_up_s']:.1f}-{r['start_s']:.1f} s, identified {r['identify_s']:.1f}"
                  f" s, compiled {r['compile_s']:.1f} s", flush=True)
    out_file = args.json.with_name("bench-warmup-cold.json")
    write_json(out_file, {"fake": args.fake, "max_tokens": args.max_tokens, "runs": rows})
    print(f"wrote {out_file}")
    return 0


def _schedule(args: argparse.Namespace) -> int:
    """How much the order of the compiles costs, from the kernels of a measured cold warmup (its report's entries: the
    call that first needed each kernel, its seconds): the makespan of ``workers`` compile slots from the first worker
    up, for the orders a warmup could use. A replay of measured seconds, not a measurement."""
    import heapq
    import random
    import re

    res = json.loads(args.schedule.read_text())
    report = next(st["result"] for st in res["steps"] if st["step"] == "dense-4096")
    start, workers = report["first_up_s"], report["workers"]
    kernels = []
    for e in report["entries"]:
        m = re.search(r"M=(\d+)", e["call"])
        light = "scales=row" in e["call"]  # the scale transposes the row-major form adds (light, compiled last)
        kernels.append((e["seconds"], int(m.group(1)) if m else 0, light))

    def makespan(order: list[float]) -> float:
        slots = [start] * workers
        for seconds in order:
            heapq.heappush(slots, heapq.heappop(slots) + seconds)
        end: float = max(slots)
        return end

    rng = random.Random(0)
    randoms = [makespan([k[0] for k in rng.sample(kernels, len(kernels))]) for _ in range(2000)]
    rows = [("measured (the warmup's own order)", report["compile_s"]),
            ("random order (mean of 2000)", sum(randoms) / len(randoms)),
            ("smallest M first, light kernels last", makespan([k[0] for k in sorted(kernels, key=lambda k: (k[2], k[1]))])),
            ("largest M first, light kernels last (this warmup)",
             makespan([k[0] for k in sorted(kernels, key=lambda k: (k[2], -k[1]))])),
            ("longest first (knowing every time)", makespan(sorted((k[0] for k in kernels), reverse=True))),
            ("floor: sum / slots + first worker up", sum(k[0] for k in kernels) / workers + start)]
    print(f"{len(kernels)} kernels of {args.schedule.name}, {workers} compile slots from {start:.1f} s "
          f"(seconds per kernel as measured there, with {workers} at once):")
    for what, seconds in rows:
        print(f"  {what}: {seconds:.1f} s")
    return 0


def _fake_env(base: Path) -> dict[str, str]:
    sys.path[:0] = [str(REPO)]
    from testsupport import fake_jit

    return fake_jit.site_env(base, 0.05)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "--child":
        return _child_main(argv[1:])
    p = argparse.ArgumentParser(prog="python -m bench.warmup", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--serial-shapes", type=int, default=len(SHAPES),
                   help="time the serial baseline on the first K shapes only and extrapolate (labelled)")
    p.add_argument("--ranks", type=int, default=8, help="processes sharing one cache")
    p.add_argument("--rank-workers", type=int, default=2, help="compiles at once of each of those processes")
    p.add_argument("--workers", type=int, default=None,
                   help="compiles at once of the cold/warm runs (default: dgcompat's)")
    p.add_argument("--processes", type=int, default=None,
                   help="worker processes of the cold/warm runs (default: dgcompat's)")
    p.add_argument("--rank-processes", type=int, default=None,
                   help="worker processes of each of the sharing processes (default: dgcompat's)")
    p.add_argument("--base", type=Path, default=None,
                   help="folder for the runs' cache folders (default: DG_JIT_CACHE_DIR, else a temp folder)")
    p.add_argument("--json", type=Path, default=results_dir("bench") / "bench-warmup.json",
                   help="where to write the results (default: bench-warmup.json in $DGCOMPAT_RESULTS/bench)")
    p.add_argument("--timeout", type=float, default=480, help="seconds per child process")
    p.add_argument("--fake", action="store_true", help="run against the CPU fake JIT (checks the code path only)")
    p.add_argument("--no-layer-set", action="store_true", help="skip the cold warmup of a whole layer set")
    p.add_argument("--identify-cost", action="store_true",
                   help="only measure what identifying a call costs in one worker process (and how many calls "
                        "DeepSeek-V3's dense GEMMs at every M <= 4096 identify)")
    p.add_argument("--identify-calls", type=int, default=256, help="calls of the --identify-cost measurement")
    p.add_argument("--cold", action="store_true",
                   help="only time cold warmups of the six dense GEMMs at every M <= --max-tokens beside their floor")
    p.add_argument("--max-tokens", type=int, default=4096, help="the bound of M of --cold")
    p.add_argument("--repeat", type=int, default=1, help="cold runs of --cold")
    p.add_argument("--nvcc-seconds", type=float, default=1.0,
                   help="CPU seconds each fake NVCC run burns (times 1-3 by kernel) with --cold --fake")
    p.add_argument("--schedule", type=Path, default=None, metavar="RESULTS",
                   help="replay the kernels of a warmup_gpu results file in the orders a warmup could compile them")
    args = p.parse_args(argv)
    if args.schedule is not None:
        return _schedule(args)
    if args.identify_cost:
        return _identify_cost(args)
    if args.cold:
        return _cold(args)
    with tempfile.TemporaryDirectory(prefix="dgcompat-bench-warmup-") as tmp:
        # Each run needs its own empty cache: subfolders of --base, else of DG_JIT_CACHE_DIR, else a temp folder.
        given = args.base or (Path(os.environ["DG_JIT_CACHE_DIR"]) if os.environ.get("DG_JIT_CACHE_DIR") else None)
        base = given or Path(tmp)
        used = [p for p in ("serial", "shared", "multi", "layers") if _entries(base / p)]
        if used:
            print(f"bench.warmup: {base} already holds kernels in {used}; give an empty folder", file=sys.stderr)
            return 2
        env = dict(os.environ)
        if args.fake:
            env.update(_fake_env(base))
        env["PYTHONPATH"] = os.pathsep.join([p for p in (env.get("PYTHONPATH", ""), str(REPO),
                                                         str(REPO / "conformance")) if p])
        t0 = time.perf_counter()
        res = run(base, env, serial_shapes=max(1, min(args.serial_shapes, len(SHAPES))), ranks=args.ranks,
                  rank_workers=args.rank_workers, workers=args.workers, timeout=args.timeout,
                  layer_set=not args.no_layer_set, processes=args.processes, rank_processes=args.rank_processes)
        res["total_s"] = time.perf_counter() - t0
        res["fake"] = args.fake
    print(render(res))
    print(f"total {res['total_s']:.0f} s")
    write_json(args.json, res)
    print(f"wrote {args.json}")
    return 0 if all(v in (True, None) for v in res["checks"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
