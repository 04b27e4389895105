"""``dgcompat conform``: certify deep_gemm builds against dgcompat's conformance suite.

* no option: the deep_gemm installed here (real kernels on a GPU; the CPU tier's stand-ins over
  the installed files otherwise); with none installed, dgcompat's embedded reference backend;
* ``--release 0.1.4`` / ``--wheel FILE``: a published wheel on the CPU tier (repeatable);
* ``--all``: every published sgl-deep-gemm release; ``--bundled`` adds (or, alone, selects) the
  deep_gemm copies bundled in sgl-kernel / sglang-kernel, ~500 MB downloads each (opt-in).

Each release runs in its own process and yields a JSON certificate in ``--out`` (default
``<results>/conform``, outside any checkout: see :mod:`dgcompat_conformance.results`); a progress
line is printed per release and a table at the end, with the folder the certificates went to. Exit status: 0 when every certificate passes, 1 otherwise, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import sys
import tempfile
import time
from pathlib import Path

from dgcompat import detection

from . import intake
from ._args import (
    output_folder,
    parse,
    positive_int,
    positive_seconds,
    readable_path,
    release_spec,
    returns_status,
    usage_error,
    wheel_spec,
)
from .certificate import Certificate
from .harness.runner import RunOptions, run_installed, run_many
from .releases import BUNDLED_RELEASES, ReleaseSpec, all_releases
from .report import conform_table, progress_line
from .results import results_dir

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="dgcompat conform",
        description="Certify a deep_gemm build against dgcompat's conformance suite.",
        epilog="Wheels are cached in $DGCOMPAT_CACHE/wheels (default ~/.cache/dgcompat/wheels).",
    )
    what = p.add_argument_group("what to certify (default: the installed deep_gemm)")
    what.add_argument("--release", action="append", default=[], metavar="V", type=release_spec,
                      help="a published release on the CPU tier: 0.1.4, sgl-kernel==0.3.21, ... (repeatable)")
    what.add_argument("--wheel", action="append", default=[], type=wheel_spec, metavar="FILE",
                      help="a wheel file on the CPU tier (repeatable)")
    what.add_argument("--all", action="store_true", help="every published sgl-deep-gemm release")
    what.add_argument("--bundled", action="store_true",
                      help="the deep_gemm copies bundled in sgl-kernel / sglang-kernel (~500 MB each; with --all: "
                           "in addition)")
    what.add_argument("--latest", action="store_true",
                      help="judge the newest sgl-deep-gemm on the index (its own options: dgcompat conform --latest -h)")
    what.add_argument("--reference", action="store_true", help="dgcompat's embedded reference backend")
    what.add_argument("--cpu-tier", action="store_true",
                      help="with the installed deep_gemm: use the stand-ins even when a GPU is present")
    what.add_argument("--list", action="store_true", help="list the releases the CPU tier knows and exit")
    run = p.add_argument_group("how")
    run.add_argument("--out", type=output_folder, default=None,
                     help="certificate folder (default: $DGCOMPAT_RESULTS/conform, else ~/.cache/dgcompat/results/conform)")
    run.add_argument("--jobs", "-j", type=positive_int, default=None,
                     help="releases run in parallel (default: CPU count, max 4)")
    run.add_argument("--timeout", type=positive_seconds, default=900.0,
                     help="seconds per release before it counts as hung")
    run.add_argument("--arch", default="sm90", choices=("sm90", "sm100", "sm120"), help="architecture the stand-ins emulate")
    run.add_argument("--examples", type=positive_int, default=None, help="hypothesis examples per property test")
    run.add_argument("-k", dest="keyword", default=None, help="only tests matching this pytest -k expression")
    run.add_argument("--tests", type=readable_path, action="append", default=None,
                     help="run these test files instead of the suite (harness development)")
    run.add_argument("--subject", default=None,
                     help="module the suite certifies instead of dgcompat (harness development)")
    run.add_argument("--no-xfails", action="store_true", help="ignore conformance/dgcompat_conformance/xfails/<release>.txt")
    run.add_argument("--ffi-returns", choices=("torch", "dlpack"), default="torch",
                     help="tvm-ffi stand-ins return torch tensors (default) or bare DLPack producers")
    run.add_argument("--quiet", "-q", action="store_true", help="no progress lines")
    return p


def _selected(args: argparse.Namespace) -> list[ReleaseSpec]:
    specs: list[ReleaseSpec] = []
    if args.all:
        specs += all_releases(bundled=args.bundled)
    elif args.bundled:
        specs += [ReleaseSpec(d, v) for d, v in BUNDLED_RELEASES]
    specs += args.release
    specs += args.wheel
    seen: set[str] = set()
    unique = []
    for s in specs:
        if s.id not in seen:
            seen.add(s.id)
            unique.append(s)
    return unique


def _print_summary(certs: list[Certificate], out: Path, seconds: float) -> None:
    print()
    print(conform_table(certs))
    stale = [(c.release, e["nodeid"]) for c in certs for e in c.stale_xfails or ()]
    for rel, nodeid in stale:
        print(f"stale xfail entry in conformance/dgcompat_conformance/xfails/{rel}.txt: {nodeid}")
    passed = sum(c.verdict == "PASS" for c in certs)
    print(f"\n{passed}/{len(certs)} certified in {seconds:.1f} s; certificates in {out}/")


def _writable(out: Path) -> str | None:
    """Why certificates cannot be written into ``out``, or None."""
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".dgcompat-probe-"):
            pass
    except OSError as exc:
        return f"cannot write certificates into {out}: {exc.strerror or exc}"
    return None


@returns_status
def main(argv: list[str]) -> int:
    """Entry point of ``dgcompat conform``; returns the exit status.

    ``--latest`` hands every other option to :func:`dgcompat_conformance.intake.main_latest`, which
    has its own (``--version``, ``--baseline``, ``--out``, ``--json``, ...).
    """
    if "--latest" in argv:
        return intake.main_latest([a for a in argv if a != "--latest"])
    parser = build_parser()
    args = parse(parser, argv)
    if args.list:
        for s in all_releases(bundled=True):
            print(f"{s.id:<28} {s}")
        return 0
    missing = [m for m in ("pytest", "hypothesis") if importlib.util.find_spec(m) is None]
    if missing:
        print(f"dgcompat conform: the conformance suite runs on {' and '.join(missing)}, which "
              f"{'is' if len(missing) == 1 else 'are'} not installed: pip install 'dgcompat[conform]'",
              file=sys.stderr)
        return 2
    specs = _selected(args)
    if args.out is None:
        args.out = results_dir("conform")
    unwritable = _writable(args.out)
    if unwritable is not None:
        return usage_error(parser, f"argument --out: {unwritable}")
    jobs = args.jobs or max(1, min(4, os.cpu_count() or 1))
    opts = RunOptions(out_dir=args.out, timeout=args.timeout, arch=args.arch, tests=args.tests,
                      subject=args.subject, keyword=args.keyword, examples=args.examples,
                      no_xfails=args.no_xfails, ffi_returns=args.ffi_returns)
    t0 = time.perf_counter()

    def progress(i: int, n: int, cert: Certificate) -> None:
        if not args.quiet:
            print(progress_line(i, n, cert), flush=True)

    if specs:
        if not args.quiet:
            print(f"dgcompat conform: {len(specs)} release(s) on the CPU tier, {jobs} at a time -> {args.out}/",
                  flush=True)
        certs = run_many(specs, opts, jobs=jobs, on_done=progress)
    else:
        reference = args.reference
        if not reference:
            detection.reset()
            if not detection.release().installed:
                print("dgcompat conform: no deep_gemm is installed; certifying dgcompat's reference backend "
                      "(DGCOMPAT_BACKEND=reference)", flush=True)
                reference = True
        cert = run_installed(opts, reference=reference, force_standins=args.cpu_tier)
        progress(1, 1, cert)
        certs = [cert]
    _print_summary(certs, args.out, time.perf_counter() - t0)
    return 0 if all(c.verdict == "PASS" for c in certs) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
