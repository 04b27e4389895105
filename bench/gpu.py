"""Wall time of real kernels through dgcompat and through deep_gemm directly (``python -m bench --gpu``).

Needs CUDA and a real deep_gemm (docs/performance.md says how it was run on an H200 with
sgl-deep-gemm 0.1.4). For each decode-sized case (M, or the batch B for the indexer, in
{1, 16, 64, 256}; DeepSeek-V3-like N/K) it measures:

- **eager wall time per call**, the ratio the goal is about: CUDA events around ``inner``
  back-to-back calls on an idle stream, after warm-up (which also JIT-compiles the kernel and, for
  dgcompat, builds the per-batch plan); samples alternate direct / dgcompat, median of each. At
  decode sizes the host cost of the launch path often exceeds the kernel, so this includes both;
- **device time per call** from a CUDA graph of the same ``inner`` calls (no Python at replay),
  for the achieved TFLOP/s and GB/s, next to the ceilings measured on the same device (a large
  device-to-device copy, an 8192^3 bf16 and FP8 matrix product through torch); capturing the
  dgcompat calls also shows they are graph-safe in steady state. For the indexer each graph is one
  decode step: the direct graph also records the engine's per-step work (the metadata call, and for
  the split layout the per-row lengths and block table) and its launches use that schedule, while the
  dgcompat graph records only the ``inner`` calls, in which dgcompat derives its schedule (and split
  layout) on the device, once per capture; ``graph ratio`` compares the two;
- **allocations per call** in steady state, from ``torch.cuda.memory_stats()``;
- that both paths produce the same result.

Operands rotate through copies so that repeated calls do not read one L2-resident weight, and each
layer-like call of the indexer gets a fresh ``q``. The JSON is rewritten after every case so a run
cut short still leaves its numbers.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from testsupport.record import write_json

__all__ = ["main", "run_gpu"]

Call = tuple[Callable[..., Any], tuple[Any, ...]]
Maker = tuple[str, Callable[[], dict[str, Any]]]

#: DeepSeek-V3-like dense projections (N, K): fused q_a/kv_a down-projection, q_b up-projection,
#: attention output projection.
DENSE_NK: tuple[tuple[int, int], ...] = ((2112, 7168), (24576, 1536), (7168, 16384))
#: Masked grouped GEMM: (experts per rank, N, K) of the MoE gate/up projection, 256 experts over 8 ranks.
MASKED_GNK: tuple[int, int, int] = (32, 4096, 7168)
MASKED_M_MAX = 256
#: Indexer (DeepSeek V3.2): heads, head dim, KV block, context.
IDX_H, IDX_D, IDX_BKV, IDX_CTX = 64, 128, 64, 8192
MS: tuple[int, ...] = (1, 16, 64, 256)
L2_BYTES = 60 * 2**20


class _Clock:
    """CUDA events on a GPU; ``perf_counter`` in a dry run on the CPU."""

    def __init__(self, torch: Any, cuda: bool) -> None:
        self.torch, self.cuda = torch, cuda
        if cuda:
            self.start = torch.cuda.Event(enable_timing=True)
            self.end = torch.cuda.Event(enable_timing=True)

    def per_call_us(self, calls: Sequence[Call]) -> float:
        if self.cuda:
            self.start.record()
            for fn, args in calls:
                fn(*args)
            self.end.record()
            self.end.synchronize()
            return float(self.start.elapsed_time(self.end)) * 1e3 / len(calls)
        t0 = time.perf_counter_ns()
        for fn, args in calls:
            fn(*args)
        return (time.perf_counter_ns() - t0) / 1e3 / len(calls)

    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize()


def _median_iqr(values: list[float]) -> tuple[float, float]:
    if len(values) < 4:
        return statistics.median(values), max(values) - min(values)
    q = statistics.quantiles(values, n=4)
    return statistics.median(values), q[2] - q[0]


def time_pair(clock: _Clock, direct: Sequence[Call], stable: Sequence[Call], *, warmup: int,
              samples: int) -> dict[str, Any]:
    """Median eager wall time per call of the two call lists, sampled alternately."""
    for _ in range(warmup):
        clock.per_call_us(direct)
        clock.per_call_us(stable)
    clock.sync()
    got: dict[str, list[float]] = {"direct": [], "dgcompat": []}
    for i in range(samples):
        order = (("direct", direct), ("dgcompat", stable)) if i % 2 == 0 else (("dgcompat", stable),
                                                                                ("direct", direct))
        for key, calls in order:
            got[key].append(clock.per_call_us(calls))
    d, d_iqr = _median_iqr(got["direct"])
    s, s_iqr = _median_iqr(got["dgcompat"])
    return {"direct_us": round(d, 3), "dgcompat_us": round(s, 3), "ratio": round(s / d, 4),
            "direct_iqr_us": round(d_iqr, 3), "dgcompat_iqr_us": round(s_iqr, 3)}


def _capture(torch: Any, calls: Sequence[Call]) -> Any:
    """The calls captured once into a CUDA graph (after a warm-up on a side stream, as capture needs)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for fn, args in calls[:3]:
            fn(*args)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for fn, args in calls:
            fn(*args)
    for _ in range(3):
        graph.replay()
    torch.cuda.synchronize()
    return graph


def graph_pair_us(torch: Any, direct: Sequence[Call], stable: Sequence[Call], *,
                  replays: int = 20, calls: int | None = None) -> tuple[float, float]:
    """Device time per call of both call lists from graph replay, replays alternating between the two
    graphs so that clock and power drift during a heavy case lands on both alike. ``calls``: the kernel
    calls each list stands for (default: its length; a step list may hold per-step work besides)."""
    graphs = (_capture(torch, direct), _capture(torch, stable))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times: tuple[list[float], list[float]] = ([], [])
    for i in range(replays):
        for j in ((0, 1) if i % 2 == 0 else (1, 0)):
            start.record()
            graphs[j].replay()
            end.record()
            end.synchronize()
            times[j].append(float(start.elapsed_time(end)) * 1e3 / (calls or len(direct if j == 0 else stable)))
    return statistics.median(times[0]), statistics.median(times[1])


def dry_graph_pair_us(direct: Sequence[Call], stable: Sequence[Call], *,
                      calls: int | None = None) -> tuple[float, float]:
    """The graph lists run eagerly once each (a dry run has no graphs; this checks their code path)."""
    out = []
    for lst in (direct, stable):
        t0 = time.perf_counter_ns()
        for fn, args in lst:
            fn(*args)
        out.append((time.perf_counter_ns() - t0) / 1e3 / (calls or len(lst)))
    return out[0], out[1]


def allocs_per_call(torch: Any, calls: Sequence[Call], cuda: bool) -> float | None:
    """Caching-allocator allocation requests per call (steady state)."""
    if not cuda:
        return None
    torch.cuda.synchronize()
    before = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    for fn, args in calls:
        fn(*args)
    torch.cuda.synchronize()
    after = torch.cuda.memory_stats().get("allocation.all.allocated", 0)
    grown: float = (after - before) / len(calls)
    return grown


def measure_ceilings(torch: Any) -> dict[str, Any]:
    """Device-to-device copy bandwidth and bf16 / FP8 matrix-product rates on this device."""
    out: dict[str, Any] = {}
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)

    def timed(fn: Callable[[], Any], reps: int = 10) -> float:
        for _ in range(3):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(reps):
            start.record()
            fn()
            end.record()
            end.synchronize()
            ts.append(float(start.elapsed_time(end)) / 1e3)
        return statistics.median(ts)

    def copy_gbps() -> float:
        n = 2**31
        src = torch.randint(0, 255, (n,), dtype=torch.uint8, device="cuda")
        dst = torch.empty_like(src)
        return 2 * n / timed(lambda: dst.copy_(src)) / 1e9

    def mm_tflops(fp8: bool) -> float:
        size = 8192
        a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        if not fp8:
            return 2 * size**3 / timed(lambda: a @ b) / 1e12
        a8, b8, one = a.to(torch.float8_e4m3fn), b.to(torch.float8_e4m3fn).t(), torch.ones((), device="cuda")
        return 2 * size**3 / timed(
            lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)) / 1e12

    out["copy_GBps"] = round(copy_gbps(), 1)
    out["bf16_mm_TFLOPs"] = round(mm_tflops(False), 1)
    try:
        out["fp8_mm_TFLOPs"] = round(mm_tflops(True), 1)
    except Exception as exc:  # noqa: BLE001 - an older torch without _scaled_mm on this device
        out["fp8_mm_TFLOPs"] = None
        out["fp8_mm_error"] = f"{type(exc).__name__}: {exc}"
    torch.cuda.empty_cache()
    return out


def _copies(torch: Any, make: Callable[[], Any], nbytes: int) -> list[Any]:
    """Enough copies of an operand that cycling through them does not hit one L2-resident copy."""
    count = max(1, min(8, math.ceil(2 * L2_BYTES / max(1, nbytes))))
    return [make() for _ in range(count)]


def _fp8_randn(torch: Any, shape: tuple[int, ...], device: str) -> Any:
    return torch.randn(shape, device=device).to(torch.float8_e4m3fn)


def _scale(torch: Any, shape: tuple[int, ...], device: str) -> Any:
    return torch.rand(shape, device=device) * 0.01 + 0.001


def dense_case(torch: Any, dg: Any, up: Any, m: int, n: int, k: int, inner: int, device: str) -> dict[str, Any]:
    """``fp8_gemm_nt`` with per-token activation scales and 128x128 weight scales."""
    a = (_fp8_randn(torch, (m, k), device),
         dg.get_mn_major_tma_aligned_tensor(_scale(torch, (m, k // 128), device)))
    wbytes = n * k
    bs = _copies(torch, lambda: (_fp8_randn(torch, (n, k), device), _scale(torch, (-(-n // 128), k // 128), device)),
                 wbytes)
    d1 = torch.empty((m, n), device=device, dtype=torch.bfloat16)
    d2 = torch.empty_like(d1)
    direct = [(up.fp8_gemm_nt, (a, bs[i % len(bs)], d1)) for i in range(inner)]
    stable = [(dg.fp8_gemm_nt, (a, bs[i % len(bs)], d2)) for i in range(inner)]

    def same() -> bool:
        up.fp8_gemm_nt(a, bs[0], d1)
        dg.fp8_gemm_nt(a, bs[0], d2)
        return bool(torch.equal(d1, d2))

    flops = 2 * m * n * k
    nbytes = m * k + n * k + 2 * m * n + 4 * (m * (k // 128) + -(-n // 128) * (k // 128))
    return {"kernel": "fp8_gemm_nt", "M": m, "shape": f"N={n} K={k}", "direct": direct, "stable": stable,
            "same": same, "flops": flops, "bytes": nbytes, "copies": len(bs)}


def masked_case(torch: Any, dg: Any, up: Any, m: int, inner: int, device: str,
                gnk: tuple[int, int, int] = MASKED_GNK, m_max: int = MASKED_M_MAX) -> dict[str, Any]:
    """Masked grouped FP8 GEMM (the MoE runner's decode path): ``m`` rows in each of G experts."""
    g, n, k = gnk
    a = (_fp8_randn(torch, (g, m_max, k), device),
         dg.get_mn_major_tma_aligned_tensor(_scale(torch, (g, m_max, k // 128), device)))
    bs = _copies(torch, lambda: (_fp8_randn(torch, (g, n, k), device),
                                 _scale(torch, (g, -(-n // 128), k // 128), device)), g * n * k)
    d1 = torch.empty((g, m_max, n), device=device, dtype=torch.bfloat16)
    d2 = torch.empty_like(d1)
    masked_m = torch.full((g,), m, dtype=torch.int32, device=device)
    up_fn = getattr(up, "m_grouped_fp8_gemm_nt_masked", None) or up.fp8_m_grouped_gemm_nt_masked
    direct = [(up_fn, (a, bs[i % len(bs)], d1, masked_m, m)) for i in range(inner)]
    stable = [(dg.m_grouped_fp8_gemm_nt_masked, (a, bs[i % len(bs)], d2, masked_m, m)) for i in range(inner)]

    def same() -> bool:
        up_fn(a, bs[0], d1, masked_m, m)
        dg.m_grouped_fp8_gemm_nt_masked(a, bs[0], d2, masked_m, m)
        return bool(torch.equal(d1[:, :m], d2[:, :m]))

    flops = 2 * g * m * n * k
    nbytes = g * (m * k + n * k + 2 * m * n + 4 * (m * (k // 128) + -(-n // 128) * (k // 128)))
    return {"kernel": "m_grouped_fp8_gemm_nt_masked", "M": m, "shape": f"G={g} N={n} K={k} M_max={m_max}",
            "direct": direct, "stable": stable, "same": same, "flops": flops, "bytes": nbytes, "copies": len(bs)}


def _kv_cache(torch: Any, blocks: int, device: str) -> Any:
    """uint8 (blocks, BKV, 1, D + 4): per block BKV*D FP8 values, then BKV float32 scales."""
    fused = torch.empty((blocks, IDX_BKV * (IDX_D + 4)), dtype=torch.uint8, device=device)
    fused[:, :IDX_BKV * IDX_D] = _fp8_randn(torch, (blocks, IDX_BKV * IDX_D), device).view(torch.uint8)
    fused[:, IDX_BKV * IDX_D:] = (torch.rand((blocks, IDX_BKV), device=device) * 0.01 + 0.001).view(torch.uint8)
    return fused.view(blocks, IDX_BKV, 1, IDX_D + 4)


def paged_case(torch: Any, dg: Any, up: Any, batch: int, next_n: int, inner: int, device: str,
               ctx: int = IDX_CTX) -> dict[str, Any]:
    """Paged MQA logits over a B-sequence batch; next_n 1/2 launch natively on SM90, 4 is split by dgcompat."""
    gen = torch.Generator(device="cpu").manual_seed(batch * 10 + next_n)
    blocks_per_seq = ctx // IDX_BKV
    ctx_lens = torch.randint(ctx // 2, ctx + 1, (batch,), generator=gen, dtype=torch.int32)
    rows = batch * next_n
    row_lens = (ctx_lens.view(-1, 1) - next_n + 1 + torch.arange(next_n, dtype=torch.int32)).clamp_min(1)
    lens = row_lens.to(torch.int32).contiguous().to(device)  # (B, next_n)
    perm = torch.randperm(batch * blocks_per_seq, generator=gen).to(torch.int32)
    bt = perm.view(batch, blocks_per_seq).contiguous().to(device)
    kv_bytes = batch * blocks_per_seq * IDX_BKV * (IDX_D + 4)
    kvs = _copies(torch, lambda: _kv_cache(torch, batch * blocks_per_seq, device), kv_bytes)
    qs = [_fp8_randn(torch, (batch, next_n, IDX_H, IDX_D), device) for _ in range(min(inner, 8))]
    w = torch.rand((rows, IDX_H), device=device)
    num_sms = int(up.get_num_sms())
    up_paged = up.fp8_paged_mqa_logits

    s_dg = dg.get_paged_mqa_logits_metadata(lens, IDX_BKV, num_sms)
    native = next_n in (1, 2)
    if native:
        s_up = up.get_paged_mqa_logits_metadata(lens, IDX_BKV, num_sms)
        direct_fn: Callable[..., Any] = up_paged
        direct_args: Callable[[int], tuple[Any, ...]] = lambda i: (qs[i % len(qs)], kvs[i % len(kvs)], w, lens, bt, s_up, ctx, False)  # noqa: E731
    else:
        # What an engine writes by hand for next_n the kernel cannot take: one query row per token.
        flat_lens = lens.reshape(-1, 1).contiguous()
        flat_bt = bt.repeat_interleave(next_n, dim=0).contiguous()
        s_up = up.get_paged_mqa_logits_metadata(flat_lens, IDX_BKV, num_sms)
        shape = (rows, 1, IDX_H, IDX_D)

        def direct_fn(q: Any, kv: Any, w_: Any, l_: Any, b_: Any, s_: Any, ml: int, clean: bool) -> Any:
            return up_paged(q.view(shape), kv, w_, l_, b_, s_, ml, clean)
        direct_args = lambda i: (qs[i % len(qs)], kvs[i % len(kvs)], w, flat_lens, flat_bt, s_up, ctx, False)  # noqa: E731
    direct = [(direct_fn, direct_args(i)) for i in range(inner)]
    stable = [(dg.fp8_paged_mqa_logits, (qs[i % len(qs)], kvs[i % len(kvs)], w, lens, bt, s_dg, ctx))
              for i in range(inner)]

    def direct_step() -> None:
        # One decode step as an engine captures it by hand: its own per-step work, then the layers' launches
        # with the schedule built in this step (the dgcompat graph derives the same on the device itself).
        if native:
            step_lens, step_bt = lens, bt
        else:
            step_lens = lens.reshape(-1, 1)
            # expand + reshape: one copy kernel and no host synchronization (capturable)
            step_bt = bt.unsqueeze(1).expand(batch, next_n, bt.shape[1]).reshape(rows, bt.shape[1]).contiguous()
        sched = up.get_paged_mqa_logits_metadata(step_lens, IDX_BKV, num_sms)
        for i in range(inner):
            direct_fn(qs[i % len(qs)], kvs[i % len(kvs)], w, step_lens, step_bt, sched, ctx, False)

    def same() -> bool:
        o1 = direct_fn(*direct_args(0))
        if not isinstance(o1, torch.Tensor):  # tvm-ffi releases may hand back their own tensor type
            o1 = torch.from_dlpack(o1)
        o2 = dg.fp8_paged_mqa_logits(qs[0], kvs[0], w, lens, bt, s_dg, ctx)
        valid = torch.arange(ctx, device=device).view(1, -1) < lens.reshape(-1, 1)
        return bool(torch.equal(o1[:rows, :ctx][valid], o2[:rows, :ctx][valid]))

    total = int(row_lens.sum())
    flops = 2 * IDX_H * IDX_D * total
    # Fewest bytes: each sequence's KV read once, q, weights, the visible logits written once.
    nbytes = int(ctx_lens.sum()) * (IDX_D + 4) + rows * IDX_H * (IDX_D + 4) + 4 * total
    layout = "native" if native else "split (dgcompat fallback)"
    return {"kernel": "fp8_paged_mqa_logits", "M": batch, "shape": f"next_n={next_n} H={IDX_H} D={IDX_D} "
            f"ctx<={ctx} {layout}", "direct": direct, "stable": stable, "same": same, "flops": flops,
            "bytes": nbytes, "copies": len(kvs), "graph_direct": [(direct_step, ())], "graph_stable": stable,
            "graph_calls": inner}


def _cases(torch: Any, dg: Any, up: Any, inner: int, device: str) -> list[Maker]:
    # Every kernel at every M first, the further dense shapes last: a run cut short by its time
    # limit still covers each kernel.
    makers: list[Maker] = []

    def dense(m: int, n: int, k: int) -> Maker:
        return f"fp8_gemm_nt M={m} N={n} K={k}", lambda: dense_case(torch, dg, up, m, n, k, inner, device)

    def masked(m: int) -> Maker:
        return f"masked M={m}", lambda: masked_case(torch, dg, up, m, inner, device)

    def paged(b: int, next_n: int) -> Maker:
        return f"paged B={b} next_n={next_n}", lambda: paged_case(torch, dg, up, b, next_n, inner, device)

    for m in MS:
        makers += [dense(m, *DENSE_NK[0]), masked(m), paged(m, 1), paged(m, 2), paged(m, 4)]
    for n, k in DENSE_NK[1:]:
        makers += [dense(m, n, k) for m in MS]
    return makers


def cpu_model() -> str:
    """The host CPU's model name (the launch path's host cost depends on it)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def run_gpu(out_path: Path, command: str, *, dry_run: bool = False, inner: int = 20, samples: int = 60,
            warmup: int = 5, only: Sequence[str] = ()) -> dict[str, Any]:
    """Measure every case and write the JSON to ``out_path`` (rewritten after each case)."""
    import torch

    import dgcompat
    from dgcompat import _tooling

    cuda = torch.cuda.is_available() and not dry_run
    device = "cuda" if cuda else "cpu"
    rel = dgcompat.release()
    up = _tooling.load_backend()
    result: dict[str, Any] = {
        "schema": 1, "command": command, "dry_run": dry_run,
        "machine": {"python": platform.python_version(), "torch": torch.__version__,
                    "cuda": getattr(torch.version, "cuda", None),
                    "device": torch.cuda.get_device_name() if cuda else "cpu (dry run)", "cpu": cpu_model(),
                    "cpus_allowed": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None},
        "deep_gemm": rel.label, "binding": rel.binding, "torch_ok": rel.torch_ok,
        "config": {"inner": inner, "samples": samples, "warmup": warmup, "ms": list(MS), "only": list(only)},
        "goal_ratio": 1.01, "cases": [], "errors": [],
    }

    def save() -> None:
        write_json(out_path, result)

    if cuda:
        print("[gpu] ceilings ...", file=sys.stderr, flush=True)
        result["ceilings"] = measure_ceilings(torch)
        save()
    clock = _Clock(torch, cuda)
    graphs_ok = True
    makers = _cases(torch, dgcompat, up, inner, device) if cuda else _dry_cases(torch, dgcompat, up, inner)
    if only:
        makers = [m for m in makers if any(part in m[0] for part in only)]
    for label, make in makers:
        try:
            case = make()
            t0 = time.perf_counter()
            row: dict[str, Any] = {k: case[k] for k in ("kernel", "M", "shape", "flops", "bytes", "copies")}
            row.update(time_pair(clock, case["direct"], case["stable"], warmup=warmup, samples=samples))
            row["goal_met"] = row["ratio"] <= result["goal_ratio"]
            row["same_result"] = case["same"]()
            row["direct_allocs_per_call"] = allocs_per_call(torch, case["direct"], cuda)
            row["dgcompat_allocs_per_call"] = allocs_per_call(torch, case["stable"], cuda)
            if cuda and graphs_ok:
                graphs_ok = _graph_times(torch, row, case)
            elif not cuda:
                _dry_graph_times(row, case)
            row["seconds"] = round(time.perf_counter() - t0, 2)
            result["cases"].append(row)
            print(f"[gpu] {row['kernel']} M={row['M']} {row['shape']}: direct {row['direct_us']:.2f} us, "
                  f"dgcompat {row['dgcompat_us']:.2f} us, ratio {row['ratio']:.4f}", file=sys.stderr, flush=True)
        except Exception as exc:  # noqa: BLE001 - a failing case is recorded, the others still run
            result["errors"].append({"case": label, "error": f"{type(exc).__name__}: {exc}",
                                     "trace": traceback.format_exc(limit=4)})
            print(f"[gpu] {label} failed: {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        save()

    return result


def _graph_times(torch: Any, row: dict[str, Any], case: dict[str, Any]) -> bool:
    """Device time of both call lists from graph replay, and the achieved rates; False if capture failed
    (later cases then skip graphs rather than risk a broken stream)."""
    try:
        direct_us, stable_us = graph_pair_us(torch, case.get("graph_direct", case["direct"]),
                                             case.get("graph_stable", case["stable"]), calls=case.get("graph_calls"))
    except Exception as exc:  # noqa: BLE001 - no graph numbers for this case, the others still run
        row["graph_direct_us"] = row["graph_dgcompat_us"] = row["graph_ratio"] = None
        row["graph_error"] = f"{type(exc).__name__}: {exc}"
        torch.cuda.synchronize()
        return False
    row["graph_direct_us"], row["graph_dgcompat_us"] = round(direct_us, 3), round(stable_us, 3)
    row["graph_ratio"] = round(stable_us / direct_us, 4)
    row["graph_includes_per_step_work"] = "graph_direct" in case
    row["TFLOPs"] = round(row["flops"] / (direct_us * 1e-6) / 1e12, 2)
    row["GBps"] = round(row["bytes"] / (direct_us * 1e-6) / 1e9, 1)
    return True


def _dry_graph_times(row: dict[str, Any], case: dict[str, Any]) -> None:
    """The graph lists' code path on the CPU (numbers meaningless, recorded as such)."""
    direct_us, stable_us = dry_graph_pair_us(case.get("graph_direct", case["direct"]),
                                             case.get("graph_stable", case["stable"]), calls=case.get("graph_calls"))
    row["graph_direct_us"], row["graph_dgcompat_us"] = round(direct_us, 3), round(stable_us, 3)
    row["graph_ratio"] = round(stable_us / direct_us, 4) if direct_us > 0 else None
    row["graph_includes_per_step_work"] = "graph_direct" in case
    row["graph_dry_run"] = True


def _dry_cases(torch: Any, dg: Any, up: Any, inner: int) -> list[Maker]:
    """Tiny CPU cases that run the same orchestration against a stand-in (no kernels, no results)."""
    if hasattr(up, "_LOGITS"):
        up._LOGITS = torch.empty((64, IDX_CTX), dtype=torch.float32)
        up._SCHEDULE = torch.zeros((133, 2), dtype=torch.int32)

    def dense() -> dict[str, Any]:
        return dense_case(torch, dg, up, 16, 256, 512, inner, "cpu")

    def masked() -> dict[str, Any]:
        return masked_case(torch, dg, up, 16, inner, "cpu", gnk=(2, 256, 512), m_max=128)

    def paged(next_n: int) -> Callable[[], dict[str, Any]]:
        return lambda: paged_case(torch, dg, up, 4, next_n, inner, "cpu", ctx=512)

    return [("dense", dense), ("masked", masked), ("paged next_n=1", paged(1)), ("paged next_n=2", paged(2)),
            ("paged next_n=4", paged(4))]


def render(result: dict[str, Any]) -> str:
    """The printed table of a GPU run."""
    lines = [f"dgcompat vs direct deep_gemm on {result['machine']['device']} -- {result['deep_gemm']} "
             f"({result['binding']}), torch {result['machine']['torch']} -- {result['command']}"]
    ceil = result.get("ceilings")
    if ceil:
        lines.append(f"measured ceilings: copy {ceil['copy_GBps']} GB/s, bf16 mm {ceil['bf16_mm_TFLOPs']} TFLOP/s, "
                     f"fp8 mm {ceil.get('fp8_mm_TFLOPs')} TFLOP/s")
    cfg = result["config"]
    lines.append(f"eager: median of {cfg['samples']} samples x {cfg['inner']} calls (CUDA events, alternating); "
                 f"device: CUDA-graph replay of the same calls (paged MQA logits: one decode step per graph, the "
                 f"direct one with the engine's metadata call and split layout, the dgcompat one with its own "
                 f"on-device derivations)")
    headers = ["kernel", "M/B", "shape", "direct us", "dgcompat us", "ratio", "<=1.01", "device us",
               "device us dg", "graph ratio", "TFLOP/s", "GB/s", "allocs d/dg", "same"]
    rows = []
    for r in result["cases"]:
        allocs = (f"{r['direct_allocs_per_call']:g}/{r['dgcompat_allocs_per_call']:g}"
                  if r.get("direct_allocs_per_call") is not None else "-")
        rows.append([r["kernel"], str(r["M"]), r["shape"], f"{r['direct_us']:.2f}", f"{r['dgcompat_us']:.2f}",
                     f"{r['ratio']:.4f}", "met" if r["goal_met"] else "MISSED",
                     f"{r['graph_direct_us']:.2f}" if r.get("graph_direct_us") else "-",
                     f"{r['graph_dgcompat_us']:.2f}" if r.get("graph_dgcompat_us") else "-",
                     f"{r['graph_ratio']:.4f}" if r.get("graph_ratio") else "-",
                     f"{r['TFLOPs']:.1f}" if r.get("TFLOPs") else "-", f"{r['GBps']:.0f}" if r.get("GBps") else "-",
                     allocs, str(r["same_result"]) if r["same_result"] is not None else "-"])
    widths = [max(len(h), *(len(row[i]) for row in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines.append("  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)))
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    for err in result["errors"]:
        lines.append(f"error: {err['error']}")
    return "\n".join(lines)


def main(out_path: Path, command: str, *, dry_run: bool = False, only: Sequence[str] = ()) -> int:
    """Entry point of ``python -m bench --gpu``; returns the exit status."""
    try:
        import torch
    except ImportError:
        print("bench --gpu needs torch", file=sys.stderr)
        return 2
    if not dry_run and not torch.cuda.is_available():
        print("bench --gpu needs a CUDA device (use `python -m bench` for the CPU benchmarks)", file=sys.stderr)
        return 2
    import dgcompat

    rel = dgcompat.release()
    if not dry_run and rel.source == "none":
        print("bench --gpu needs a real deep_gemm installed (e.g. sgl-deep-gemm); none was found", file=sys.stderr)
        return 2
    result = run_gpu(out_path, command, dry_run=dry_run, only=only)
    print(render(result))
    print(f"\nwrote {out_path}")
    return 0 if not result["errors"] else 1
