"""``python -m bench.warmup_serve``: a serving process that counts the kernels it compiles.

It imports ``deep_gemm`` and nothing of dgcompat's runtime but the cache-folder listing: the real
deep_gemm when run plainly, dgcompat under ``python -m dgcompat run -- python -m bench.warmup_serve``.
It makes the calls of a DeepSeek-V3(.2) workload the way engines make them, on the GPU (on the CPU where
torch has no CUDA: the fake JIT of the tests), with ``DG_JIT_CACHE_DIR`` whatever the caller set (or
deep_gemm's default ``~/.deep_gemm``):

- ``--set dense55``: the six dense FP8 GEMMs at 55 M values up to 4096 (the 49 of the sampled preset and 6
  others); ``--set dense``: the six at ``--sample`` M values up to ``--max-tokens`` (its largest and
  smallest included); ``--set layers``: the DeepSeek-V3.2 preset's shapes, dense and MoE at ``--sample`` M
  values, the paged indexer eagerly at every batch up to ``--max-batch`` (next_n 1 and 2), the ragged
  indexer at ``--sample`` query counts;
- ``--forms``: ``row`` (row-major float32 activation scales, straight into the GEMM), ``tma`` (MN-major,
  TMA-aligned: made with ``get_mn_major_tma_aligned_tensor``), ``helpers`` (also
  ``transform_sf_into_required_layout``).

Kernels compiled are counted as new entries under ``<DG_JIT_CACHE_DIR>/cache`` after each call (the
0.1.x layout) and as new files anywhere in the folder at the end; it prints one JSON line ``RESULT {...}``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dgcompat.jit_warmup.cache import snapshot
from dgcompat.jit_warmup.presets import (
    DEEPSEEK_V3_DENSE,
    DEEPSEEK_V3_MOE,
    DEEPSEEK_V3_SAMPLED_MS,
    DEEPSEEK_V32_INDEXER_DENSE,
    MASKED_MAX_M,
)

#: The 49 sampled M values and 6 others a serving process meets.
DENSE55: tuple[int, ...] = tuple(sorted(set(DEEPSEEK_V3_SAMPLED_MS) | {3, 100, 333, 1000, 2500, 3333}))


def _ms(bound: int, count: int, rng: random.Random, step: int = 1) -> list[int]:
    values = list(range(step, bound + 1, step))
    inner = values[1:-1]
    return sorted({values[0], values[-1], *rng.sample(inner, min(len(inner), max(0, count - 2)))})


class Serve:
    """The calls, on ``device``, with ``dg`` the imported ``deep_gemm``."""

    def __init__(self, dg: Any, torch: Any, forms: list[str]) -> None:
        self.dg, self.torch, self.forms = dg, torch, forms
        self.device = "cuda" if torch.cuda.is_available() else "cpu"
        layout = getattr(getattr(dg, "utils", None), "layout", None)
        self.mn_major = getattr(layout, "get_mn_major_tma_aligned_tensor", None) or dg.get_mn_major_tma_aligned_tensor
        self._w: dict[Any, Any] = {}

    def _t(self, shape: tuple[int, ...], dtype: Any, fill: float | None = None) -> Any:
        t = self.torch
        if fill is None:
            return t.empty(shape, dtype=dtype, device=self.device)
        return t.full(shape, fill, dtype=dtype, device=self.device)

    def _weights(self, g: int | None, n: int, k: int) -> tuple[Any, Any]:
        key = (g, n, k)
        if key not in self._w:
            lead = () if g is None else (g,)
            self._w[key] = (self._t((*lead, n, k), self.torch.float8_e4m3fn),
                            self._t((*lead, -(-n // 128), k // 128), self.torch.float32, 1.0))
        pair: tuple[Any, Any] = self._w[key]
        return pair

    def _scales(self, sf: Any, mn: int, k: int, groups: int | None) -> list[Any]:
        """The activation scales in each asked-for form (row-major float32 as a per-token cast gives them)."""
        out = []
        if "row" in self.forms:
            out.append(sf)
        if "tma" in self.forms:
            out.append(self.mn_major(sf))
        if "helpers" in self.forms:
            kw = {"num_groups": groups} if groups is not None else {}
            out.append(self.dg.transform_sf_into_required_layout(sf, mn, k, (1, 128, 128), is_sfa=True, **kw))
        return out

    def dense(self, n: int, k: int, m: int) -> None:
        t = self.torch
        a, sf = self._t((m, k), t.float8_e4m3fn), self._t((m, k // 128), t.float32, 1.0)
        d = self._t((m, n), t.bfloat16)
        for s in self._scales(sf, m, k, None):
            self.dg.fp8_gemm_nt((a, s), self._weights(None, n, k), d)

    def contiguous(self, e: int, n: int, k: int, m: int) -> None:
        t = self.torch
        a, sf = self._t((m, k), t.float8_e4m3fn), self._t((m, k // 128), t.float32, 1.0)
        d, ids = self._t((m, n), t.bfloat16), self._t((m,), t.int32, 0)
        for s in self._scales(sf, m, k, None):
            self.dg.m_grouped_fp8_gemm_nt_contiguous((a, s), self._weights(e, n, k), d, ids)

    def masked(self, e: int, n: int, k: int, max_m: int, m: int) -> None:
        t = self.torch
        a, sf = self._t((e, max_m, k), t.float8_e4m3fn), self._t((e, max_m, k // 128), t.float32, 1.0)
        d, mm = self._t((e, max_m, n), t.bfloat16), self._t((e,), t.int32, m)
        for s in self._scales(sf, max_m, k, e):
            self.dg.fp8_m_grouped_gemm_nt_masked((a, s), self._weights(e, n, k), d, mm, m)

    def paged(self, next_n: int, batch: int, ctx: int = 1024, heads: int = 64, dim: int = 128) -> None:
        t = self.torch
        blocks = -(-ctx // 64)
        kv = self._w.get(("kv", ctx))
        if kv is None:
            kv = self._w[("kv", ctx)] = self._t((blocks, 64, 1, dim + 4), t.uint8, 0)
        q = self._t((batch, next_n, heads, dim), t.float8_e4m3fn)
        w = self._t((batch * next_n, heads), t.float32)
        lens = self._t((batch, next_n), t.int32, ctx)
        table = t.arange(blocks, dtype=t.int32, device=self.device).repeat(batch, 1)
        sched = self.dg.get_paged_mqa_logits_metadata(lens, 64, self.dg.get_num_sms())
        self.dg.fp8_paged_mqa_logits(q, kv, w, lens, table, sched, ctx, clean_logits=False)

    def ragged(self, m: int, nk: int = 256, heads: int = 64, dim: int = 128) -> None:
        t = self.torch
        q = self._t((m, heads, dim), t.float8_e4m3fn)
        kv = (self._t((nk, dim), t.float8_e4m3fn), self._t((nk,), t.float32, 1.0))
        ks, ke = self._t((m,), t.int32, 0), self._t((m,), t.int32, nk)
        self.dg.fp8_mqa_logits(q, kv, self._t((m, heads), t.float32), ks, ke, clean_logits=False)


def plan(args: argparse.Namespace, s: Serve) -> list[tuple[str, Callable[[], None]]]:
    rng = random.Random(args.seed)
    calls: list[tuple[str, Callable[[], None]]] = []

    def add(label: str, fn: Callable[..., None], *a: Any) -> None:
        calls.append((label, lambda: fn(*a)))

    dense = list(DEEPSEEK_V3_DENSE) + (list(DEEPSEEK_V32_INDEXER_DENSE) if args.set == "layers" else [])
    for n, k in dense:
        ms = list(DENSE55) if args.set == "dense55" else _ms(args.max_tokens, args.sample, rng)
        for m in ms:
            add(f"dense N={n} K={k} M={m}", s.dense, n, k, m)
    if args.set != "layers":
        return calls
    for e, n, k in DEEPSEEK_V3_MOE:
        for m in _ms(args.max_tokens, args.sample, rng, 128):
            add(f"contiguous E={e} N={n} K={k} M={m}", s.contiguous, e, n, k, m)
        for m in _ms(MASKED_MAX_M, args.sample, rng):
            add(f"masked E={e} N={n} K={k} M={m}", s.masked, e, n, k, MASKED_MAX_M, m)
    for next_n in (1, 2):
        for b in range(1, args.max_batch + 1):
            add(f"paged next_n={next_n} batch={b}", s.paged, next_n, b)
    for m in _ms(args.max_tokens, args.sample, rng):
        add(f"ragged M={m}", s.ragged, m)
    return calls


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.warmup_serve", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--set", choices=["dense55", "dense", "layers"], default="dense55")
    p.add_argument("--forms", default="row", help="comma-separated: row, tma, helpers")
    p.add_argument("--max-tokens", type=int, default=4096)
    p.add_argument("--max-batch", type=int, default=1024)
    p.add_argument("--sample", type=int, default=48, help="M values per shape (dense / layers)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    t_start = time.perf_counter()
    import deep_gemm
    import torch

    root = Path(os.environ.get("DG_JIT_CACHE_DIR") or Path.home() / ".deep_gemm")
    s = Serve(deep_gemm, torch, [f.strip() for f in args.forms.split(",") if f.strip()])
    calls = plan(args, s)
    before_all = snapshot(root)
    entries = root / "cache"

    def count() -> int:
        try:
            return len(os.listdir(entries))
        except FileNotFoundError:
            return 0

    misses: list[str] = []
    seen = count()
    t0 = time.perf_counter()
    for label, fn in calls:
        fn()
        now = count()
        if now != seen:
            misses.append(f"{label}: {now - seen} new kernel folders")
            seen = now
    if s.device == "cuda":
        torch.cuda.synchronize()
    calls_s = time.perf_counter() - t0
    new_files = sorted(snapshot(root) - before_all)
    kernels = sorted({f.split(os.sep)[1] for f in new_files if f.startswith("cache" + os.sep) and f.count(os.sep) >= 2})
    result = {"set": args.set, "forms": s.forms, "calls": len(calls), "cache": str(root),
              "deep_gemm": getattr(deep_gemm, "__file__", "?"), "compiled": len(kernels), "new_files": len(new_files),
              "misses": misses[:50], "calls_s": round(calls_s, 3),
              "process_s": round(time.perf_counter() - t_start, 3)}
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
