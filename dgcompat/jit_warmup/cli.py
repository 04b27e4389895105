"""``dgcompat warmup``: compile the kernels a workload needs before serving (see docs/warmup.md)."""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import TypeVar

from ..errors import BadArgumentError
from ..errors import DgcompatError
from .artifact import export
from .artifact import import_cache
from .cache import checked_folder
from .cache import jit_cache_dir
from .check import check
from .entry import warmup
from .host import real_nvcc
from .options import cache_folder
from .presets import ENGINE_MAX_TOKENS
from .presets import MAX_BATCH
from .presets import PRESETS
from .presets import preset_shapes
from .relocate import adopt
from .report import WarmupInterrupted
from .spec import SCALE_FORMS
from .spec import DenseGemm
from .spec import GroupedGemm
from .spec import MPolicy
from .spec import PagedIndexer
from .spec import RaggedIndexer
from .spec import ScaleForm
from .spec import Shape
from .spec import WarmupSpec
from .storage import from_error

_T = TypeVar("_T")

__all__ = ["main", "build_spec", "parse_dense", "parse_grouped", "parse_indexer", "parse_ragged", "parse_scales"]


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
    """``HEADS[,HEAD_DIM[,BLOCK_KV[,NEXT_N[,CONTEXT_LEN[,MAX_BATCH]]]]]``."""
    p = _ints(text, "--indexer", (1, 2, 3, 4, 5, 6))
    return PagedIndexer(*(_int(v, "--indexer") for v in p))


def parse_ragged(text: str) -> RaggedIndexer:
    """``HEADS[,HEAD_DIM[,CONTEXT_LEN]]``."""
    p = _ints(text, "--ragged", (1, 2, 3))
    return RaggedIndexer(*(_int(v, "--ragged") for v in p))


def parse_scales(text: str) -> tuple[ScaleForm, ...]:
    """``tma,row,ue8m0`` (any of them)."""
    forms = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    bad = [f for f in forms if f not in SCALE_FORMS]
    if not forms or bad:
        raise argparse.ArgumentTypeError(f"expected some of {','.join(SCALE_FORMS)}, got {text!r}")
    return forms  # type: ignore[return-value]


def _parsed(text: str, convert: Callable[[str], _T], ok: Callable[[_T], bool], expected: str) -> _T:
    """``convert(text)`` where it converts and ``ok`` holds, else the usage error naming what was expected."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not ok(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a positive integer."""
    return _parsed(text, int, lambda v: v >= 1, "a positive integer")


def device_index(text: str) -> int:
    """An argparse type: a CUDA device index (an integer >= 0)."""
    return _parsed(text, int, lambda v: v >= 0, "a CUDA device index >= 0")


def seconds(text: str) -> float:
    """An argparse type: a positive, finite number of seconds."""
    return _parsed(text, float, lambda v: math.isfinite(v) and v > 0, "a positive, finite number of seconds")


#: The option of each warmup() argument, for usage errors.
OPTIONS = {"cache_dir": "--cache-dir", "timeout_s": "--timeout", "workers": "--workers", "processes": "--processes",
           "device": "--device", "method": "--method", "isolate": "--isolate", "sample": "--check-sample",
           "seed": "--check-seed", "import": "--import"}


def build_spec(opts: argparse.Namespace) -> WarmupSpec:
    """The description the parsed options give."""
    shapes: list[Shape] = []
    if opts.preset:
        shapes += preset_shapes(opts.preset, max_batch=opts.max_batch or MAX_BATCH)
    shapes += [parse_dense(t) for t in opts.dense]
    shapes += [parse_grouped(t) for t in opts.grouped]
    shapes += [parse_indexer(t) for t in opts.indexer]
    shapes += [parse_ragged(t) for t in opts.ragged]
    if not shapes:
        raise argparse.ArgumentTypeError("give the shapes: --preset NAME, --dense, --grouped, --indexer or --ragged")
    given = [o for o, v in (("--ms", opts.ms), ("--max-m", opts.max_m), ("--max-tokens", opts.max_tokens)) if v]
    if len(given) > 1:
        raise argparse.ArgumentTypeError(f"{' and '.join(given)} both say which M values: give one of them")
    policy: MPolicy | None = None
    max_tokens = None
    if opts.ms:
        policy = MPolicy.values(_int(v, "--ms") for v in opts.ms.split(",") if v.strip())
    elif opts.max_m:
        policy = MPolicy.every(opts.max_m) if opts.policy == "every" else MPolicy.changes(opts.max_m)
    else:
        max_tokens = opts.max_tokens or ENGINE_MAX_TOKENS[opts.engine]
        if opts.policy == "changes":
            policy, max_tokens = MPolicy.changes(max_tokens), None
    return WarmupSpec(tuple(dict.fromkeys(shapes)), policy, max_tokens, opts.scales)


def _parser() -> argparse.ArgumentParser:
    presets = "; ".join(f"{k}: {v}" for k, v in PRESETS.items())
    p = argparse.ArgumentParser(prog="dgcompat warmup", description=__doc__)
    p.add_argument("--preset", choices=list(PRESETS), default=None, help=f"a named workload ({presets})")
    p.add_argument("--dense", action="append", default=[], metavar="N,K[,bf16]", help="a dense GEMM (repeatable)")
    p.add_argument("--grouped", action="append", default=[], metavar="E,N,K[,contiguous|masked,MAX_M][,bf16]",
                   help="a grouped MoE GEMM (repeatable)")
    p.add_argument("--indexer", action="append", default=[],
                   metavar="HEADS[,DIM[,BLOCK_KV[,NEXT_N[,CTX[,MAX_BATCH]]]]]",
                   help="the paged MQA-logits indexer (repeatable); M is the batch size, up to MAX_BATCH (1024)")
    p.add_argument("--ragged", action="append", default=[], metavar="HEADS[,DIM[,CTX]]",
                   help="the ragged MQA-logits indexer, fp8_mqa_logits (repeatable); M is the query rows")
    p.add_argument("--engine", choices=list(ENGINE_MAX_TOKENS), default="sglang",
                   help="whose default bound of M to warm up to: "
                        + ", ".join(f"{k} {v}" for k, v in ENGINE_MAX_TOKENS.items()) + " (default: sglang)")
    p.add_argument("--max-tokens", type=positive_int, default=0,
                   help="warm every M from 1 to this bound (the engine's max tokens per step); default: --engine's")
    p.add_argument("--ms", default="", help="comma-separated M values (only these)")
    p.add_argument("--max-m", type=positive_int, default=0, help="warm M up to this bound (see --policy)")
    p.add_argument("--policy", choices=["every", "changes"], default="every",
                   help="every M (exact), or a sampled grid refined where the kernel changes (can miss kernels)")
    p.add_argument("--scales", type=parse_scales, default=SCALE_FORMS, metavar="FORMS",
                   help="FP8 activation-scale forms the engine passes: tma (MN-major, TMA-aligned float32), row "
                        "(row-major float32, and the layout helpers), ue8m0 (packed int32, SM100); default: all")
    p.add_argument("--max-batch", type=positive_int, default=0,
                   help=f"the presets' largest indexer decode batch (default {MAX_BATCH})")
    p.add_argument("--workers", type=positive_int, default=None, help="kernels compiled at once (default: cores)")
    p.add_argument("--processes", type=positive_int, default=None,
                   help="worker processes that identify, install and verify (default: a quarter of the cores)")
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
    p.add_argument("--check", action="store_true",
                   help="after warming, run a sample of the calls against the folder, as a serving process would, and "
                        "count the kernels they compile (exit 1 unless none)")
    p.add_argument("--check-only", action="store_true", help="the check alone, on the folder as it is")
    p.add_argument("--check-sample", type=positive_int, default=16, metavar="N",
                   help="calls the check makes per shape and scale form (default 16)")
    p.add_argument("--check-seed", type=int, default=0, metavar="SEED", help="which M values the check draws")
    p.add_argument("--progress", dest="progress", action="store_true", default=None, help="always show progress")
    p.add_argument("--no-progress", dest="progress", action="store_false")
    p.add_argument("--json", action="store_true", help="print the report as JSON")
    p.add_argument("--print-cache-dir", action="store_true",
                   help="print the folder kernels go to (for DG_JIT_CACHE_DIR at serve time) and exit")
    p.add_argument("--export", dest="export_file", default=None, metavar="FILE",
                   help="after warming, write the folder's kernels of this build with a manifest (build fingerprint, "
                        "NVCC, GPU, torch, the description, the kernel list) to FILE, a new file")
    p.add_argument("--import", dest="import_file", default=None, metavar="FILE",
                   help="verify FILE (written by --export) against the installed build and put its kernels into the "
                        "folder under the keys this install looks them up under; --check then checks its description")
    p.add_argument("--adopt", action="store_true",
                   help="re-key the kernels another install of this build (a moved virtualenv, another path) warmed "
                        "into the folder for the install here, after verifying that only the install path differs")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """``dgcompat warmup [options]``: 0 done, 1 the warmup failed (or the check found a compile, or an import
    relocated not every kernel), 2 bad usage, 128 + N stopped by signal N (the kernels compiled so far are kept)."""
    parser = _parser()
    opts = parser.parse_args(list(sys.argv[1:] if argv is None else argv))  # a bad option: exit 2, usage
    if opts.cache_dir is not None and not opts.cache_dir.strip():
        parser.error("argument --cache-dir: expected a folder, got ''")
    if opts.print_cache_dir:  # a read-only (warm) folder is printed too: serving only reads it
        try:
            folder = checked_folder(jit_cache_dir(opts.cache_dir, isolate=opts.isolate), "warmup", "cache_dir",
                                    write=False)
        except BadArgumentError as exc:
            return _usage(exc)
        print(folder)
        return 0
    shapes = bool(opts.preset or opts.dense or opts.grouped or opts.indexer or opts.ragged)
    spec: WarmupSpec | None = None
    try:
        if shapes or not (opts.import_file or opts.adopt):
            spec = build_spec(opts)
        problem = _paths(opts, spec)
    except (argparse.ArgumentTypeError, DgcompatError) as exc:
        print(f"dgcompat warmup: {exc}", file=sys.stderr)
        return 2
    if problem:
        print(f"dgcompat warmup: error: {problem}", file=sys.stderr)
        return 2
    out: dict[str, Any] = {}
    checked = None
    imported = None
    try:
        nvcc = real_nvcc() or ""
        if opts.adopt or opts.import_file:
            folder = cache_folder("warmup", opts.cache_dir, opts.isolate)
            folder.mkdir(parents=True, exist_ok=True)
            if opts.adopt:
                adoption = adopt(folder, nvcc, opts.device)
                out["adopt"] = {"adopted": adoption.adopted, "present": adoption.present, "refused": adoption.refused}
                _say(opts, adoption.summary())
            if opts.import_file:
                imported = import_cache(Path(opts.import_file), folder, nvcc=nvcc, device=opts.device)
                out["import"] = {k: v for k, v in vars(imported).items() if k != "spec"}
                _say(opts, imported.summary())
                spec = spec or imported.spec
        report = None
        if shapes and not opts.check_only:
            assert spec is not None
            report = warmup(spec, workers=opts.workers, device=opts.device, cache_dir=opts.cache_dir,
                            isolate=opts.isolate, verify=not opts.no_verify, progress=opts.progress,
                            timeout_s=opts.timeout, method=opts.method, fresh=opts.fresh, processes=opts.processes)
            out["warmup"] = report.as_dict()
            _say(opts, report.summary())
        if opts.export_file:
            assert spec is not None
            folder = cache_folder("warmup", opts.cache_dir, opts.isolate, write=False)
            exported = export(folder, Path(opts.export_file), spec=spec, nvcc=nvcc, device=opts.device,
                              calls=report.calls if report is not None else 0)
            out["export"] = vars(exported)
            _say(opts, exported.summary())
        if opts.check or opts.check_only:
            if spec is None:
                print("dgcompat warmup: error: argument --check: expected a description to check (--preset, --dense, "
                      "...; or an --import file that names one), got none", file=sys.stderr)
                return 2
            checked = check(spec, cache_dir=opts.cache_dir, isolate=opts.isolate, device=opts.device,
                            sample=opts.check_sample, seed=opts.check_seed, timeout_s=opts.timeout or 600.0)
            out["check"] = checked.as_dict()
            _say(opts, checked.summary())
    except BadArgumentError as exc:
        if exc.function in ("warmup", "check") and exc.argument in OPTIONS:
            return _usage(exc)
        print(f"dgcompat warmup: {exc}", file=sys.stderr)
        return 2
    except DgcompatError as exc:
        print(f"dgcompat warmup: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:  # a write outside the warmup itself (the export file, an import): what ran out where
        place = Path(exc.filename).parent if exc.filename else Path.cwd()
        full = from_error(exc, {"the folder written": place})
        print(f"dgcompat warmup: {full or f'{exc.strerror or exc}: {exc.filename or place}'}", file=sys.stderr)
        return 1
    except (KeyboardInterrupt, WarmupInterrupted) as exc:
        signum = exc.signum if isinstance(exc, WarmupInterrupted) else int(signal.SIGINT)
        where = opts.cache_dir or jit_cache_dir(isolate=opts.isolate)
        print(f"dgcompat warmup: stopped by {signal.Signals(signum).name}: the workers and NVCC runs were stopped and "
              f"the scratch folder removed; the kernels compiled so far are in {where}, and the same command run "
              "again continues from them", file=sys.stderr)
        return 128 + signum
    if opts.json:
        print(json.dumps(out["warmup"] if list(out) == ["warmup"] else out, indent=2, default=str))
    bad_import = imported is not None and not imported.ok
    return 0 if (checked is None or checked.ok) and not bad_import else 1


def _say(opts: argparse.Namespace, text: str) -> None:
    if not opts.json:
        print(text, flush=True)


def _paths(opts: argparse.Namespace, spec: WarmupSpec | None) -> str:
    """The usage problem of ``--export`` / ``--import`` (checked before anything is written), or ""."""
    if opts.export_file:
        target = Path(opts.export_file).absolute()
        if spec is None:
            return "argument --export: expected a description to warm and export (--preset, --dense, ...), got none"
        if target.exists():
            return f"argument --export: expected a file that does not exist yet (never overwritten), got {target}"
        if not target.parent.is_dir() or not os.access(target.parent, os.W_OK | os.X_OK):
            return f"argument --export: expected a file in a folder this process can write, got {target}"
    if opts.import_file:
        source = Path(opts.import_file)
        if not source.is_file() or not os.access(source, os.R_OK):
            return f"argument --import: expected a readable file written by --export, got {source}"
    return ""


def _usage(exc: BadArgumentError) -> int:
    """A usage error naming the option (exit 2)."""
    print(f"dgcompat warmup: error: argument {OPTIONS.get(exc.argument, exc.argument)}: expected {exc.expected}, "
          f"got {exc.got}", file=sys.stderr)
    return 2
