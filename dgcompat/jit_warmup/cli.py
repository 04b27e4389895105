"""``dgcompat warmup``: compile the kernels a workload needs before serving (see docs/warmup.md)."""

from __future__ import annotations

import argparse
import json
import math
import sys
from typing import Sequence

from ..errors import BadArgumentError, DgcompatError
from .cache import checked_folder, jit_cache_dir
from .entry import warmup
from .presets import DEEPSEEK_V3_SAMPLED_MS, dense_shapes
from .spec import DenseGemm, GroupedGemm, MPolicy, PagedIndexer, Shape, WarmupSpec

__all__ = ["main", "build_spec", "parse_dense", "parse_grouped", "parse_indexer"]


def _ints(text: str, what: str, count: tuple[int, ...]) -> list[str]:
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if len(parts) not in count:
        raise argparse.ArgumentTypeError(f"{what}: expected {' or '.join(map(str, count))} comma-separated fields, "
                                         f"got {text!r}")
    return parts


def _int(text: str, what: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{what}: {text!r} is not an integer") from None


def parse_dense(text: str) -> DenseGemm:
    """``N,K`` or ``N,K,bf16``."""
    p = _ints(text, "--dense", (2, 3))
    dtype = p[2] if len(p) == 3 else "fp8"
    return DenseGemm(_int(p[0], "--dense N"), _int(p[1], "--dense K"), dtype)  # type: ignore[arg-type]


def parse_grouped(text: str) -> GroupedGemm:
    """``E,N,K`` (contiguous FP8), ``E,N,K,contiguous[,bf16]`` or ``E,N,K,masked,MAX_M[,bf16]``."""
    p = _ints(text, "--grouped", (3, 4, 5, 6))
    e, n, k = (_int(v, "--grouped") for v in p[:3])
    layout = p[3] if len(p) > 3 else "contiguous"
    rest = p[4:]
    max_m = None
    if layout == "masked":
        if not rest:
            raise argparse.ArgumentTypeError("--grouped E,N,K,masked,MAX_M: the masked layout needs MAX_M")
        max_m, rest = _int(rest[0], "--grouped MAX_M"), rest[1:]
    dtype = rest[0] if rest else "fp8"
    return GroupedGemm(e, n, k, layout, dtype, max_m)  # type: ignore[arg-type]


def parse_indexer(text: str) -> PagedIndexer:
    """``HEADS[,HEAD_DIM[,BLOCK_KV[,NEXT_N[,CONTEXT_LEN]]]]``."""
    p = _ints(text, "--indexer", (1, 2, 3, 4, 5))
    return PagedIndexer(*(_int(v, "--indexer") for v in p))


def positive_int(text: str) -> int:
    """An argparse type: a positive integer."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value


def device_index(text: str) -> int:
    """An argparse type: a CUDA device index (an integer >= 0)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a CUDA device index >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a CUDA device index >= 0, got {text!r}")
    return value


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive, finite number of seconds, got {text!r}")
    return value


#: The option of each warmup() argument, for usage errors.
OPTIONS = {"cache_dir": "--cache-dir", "timeout_s": "--timeout", "workers": "--workers", "processes": "--processes",
           "device": "--device", "method": "--method", "isolate": "--isolate"}


def build_spec(opts: argparse.Namespace) -> WarmupSpec:
    """The description the parsed options give."""
    shapes: list[Shape] = []
    if opts.preset == "deepseek-v3":
        shapes += dense_shapes()
    shapes += [parse_dense(t) for t in opts.dense]
    shapes += [parse_grouped(t) for t in opts.grouped]
    shapes += [parse_indexer(t) for t in opts.indexer]
    if opts.ms:
        policy = MPolicy.values(_int(v, "--ms") for v in opts.ms.split(",") if v.strip())
    elif opts.max_m:
        policy = MPolicy.every(opts.max_m) if opts.policy == "every" else MPolicy.changes(opts.max_m)
    elif opts.preset == "deepseek-v3":
        policy = MPolicy.values(DEEPSEEK_V3_SAMPLED_MS)
    else:
        raise argparse.ArgumentTypeError("give the M values: --ms 1,2,4,... or --max-m N [--policy every|changes]")
    return WarmupSpec(tuple(dict.fromkeys(shapes)), policy)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="dgcompat warmup", description=__doc__)
    p.add_argument("--dense", action="append", default=[], metavar="N,K[,bf16]", help="a dense GEMM (repeatable)")
    p.add_argument("--grouped", action="append", default=[], metavar="E,N,K[,contiguous|masked,MAX_M][,bf16]",
                   help="a grouped MoE GEMM (repeatable)")
    p.add_argument("--indexer", action="append", default=[], metavar="HEADS[,DIM[,BLOCK_KV[,NEXT_N[,CTX]]]]",
                   help="the paged MQA-logits indexer (repeatable); M is the batch size")
    p.add_argument("--preset", choices=["deepseek-v3"], default=None,
                   help="DeepSeek-V3's six dense FP8 GEMMs (and, without --ms/--max-m, 49 M values up to 4096)")
    p.add_argument("--ms", default="", help="comma-separated M values")
    p.add_argument("--max-m", type=positive_int, default=0, help="warm M up to this bound (see --policy)")
    p.add_argument("--policy", choices=["every", "changes"], default="every",
                   help="with --max-m: every M, or a sampled grid refined where the kernel changes")
    p.add_argument("--workers", type=positive_int, default=None, help="kernels compiled at once (default: cores)")
    p.add_argument("--processes", type=positive_int, default=None,
                   help="worker processes that identify and install (default: a quarter of the cores, more for "
                        "long call lists)")
    p.add_argument("--device", type=device_index, default=0, help="CUDA device index")
    p.add_argument("--cache-dir", default=None,
                   help="the folder kernels go to (default: the one deep_gemm reads, DG_JIT_CACHE_DIR or ~/.deep_gemm)")
    p.add_argument("--isolate", dest="isolate", action="store_true", default=False,
                   help="a folder per release and torch under --cache-dir (serve with DG_JIT_CACHE_DIR set to what "
                        "--print-cache-dir prints)")
    p.add_argument("--no-isolate", dest="isolate", action="store_false", help="the folder itself (the default)")
    p.add_argument("--no-verify", action="store_true", help="skip running the remaining calls against the warm cache")
    p.add_argument("--method", choices=["auto", "stand-in", "calls"], default="auto")
    p.add_argument("--fresh", action="store_true", help="ignore the record of an identical earlier warmup")
    p.add_argument("--timeout", type=seconds, default=None, help="give up after this many seconds")
    p.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--print-cache-dir", action="store_true",
                   help="print the folder kernels go to (for DG_JIT_CACHE_DIR at serve time) and exit")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``dgcompat warmup [options]``: 0 done, 1 the warmup failed, 2 bad usage."""
    parser = _parser()
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))  # a bad option: exit 2, usage
    if opts.cache_dir is not None and not opts.cache_dir.strip():
        parser.error("argument --cache-dir: expected a folder, got ''")
    if opts.print_cache_dir:
        try:
            folder = checked_folder(jit_cache_dir(opts.cache_dir, isolate=opts.isolate), "warmup", "cache_dir")
        except BadArgumentError as exc:
            return _usage(exc)
        print(folder)
        return 0
    try:
        spec = build_spec(opts)
    except (argparse.ArgumentTypeError, DgcompatError) as exc:
        print(f"dgcompat warmup: {exc}", file=sys.stderr)
        return 2
    try:
        report = warmup(spec, workers=opts.workers, device=opts.device, cache_dir=opts.cache_dir,
                        isolate=opts.isolate, verify=not opts.no_verify, progress=opts.progress,
                        timeout_s=opts.timeout, method=opts.method, fresh=opts.fresh, processes=opts.processes)
    except BadArgumentError as exc:
        if exc.function == "warmup" and exc.argument in OPTIONS:
            return _usage(exc)
        print(f"dgcompat warmup: {exc}", file=sys.stderr)
        return 2
    except DgcompatError as exc:
        print(f"dgcompat warmup: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    if opts.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(report.summary())
    return 0


def _usage(exc: BadArgumentError) -> int:
    """A usage error naming the option (exit 2)."""
    print(f"dgcompat warmup: error: argument {OPTIONS.get(exc.argument, exc.argument)}: expected {exc.expected}, "
          f"got {exc.got}", file=sys.stderr)
    return 2
