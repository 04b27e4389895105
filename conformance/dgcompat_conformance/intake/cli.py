"""``dgcompat conform --latest`` (and ``python -m dgcompat_conformance.intake``): the intake's command.

With ``--version V`` it judges one sgl-deep-gemm release (:func:`dgcompat_conformance.intake.newest.latest`);
otherwise it asks the package index what is new for every distribution of the discovery table
(:func:`dgcompat_conformance.intake.discovery.discover`).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence

from packaging.version import Version

from .._args import (
    index_url,
    output_folder,
    parse,
    positive_seconds,
    readable_folder,
    release_version,
    returns_status,
    usage_error,
)
from ..dists import DISTRIBUTIONS, canonical
from ..index import PackageIndex
from ..surface import SurfaceError
from . import discovery, newest
from ._surface import SGL

__all__ = ["build_latest_parser", "main_latest"]


def _dist_name(text: str) -> str:
    name = canonical(text)
    names = [d.name for d in DISTRIBUTIONS]
    if name not in names:
        raise argparse.ArgumentTypeError(f"expected a distribution of the discovery table ({', '.join(names)}), got "
                                         f"{text!r}")
    return name


def _since(text: str) -> tuple[str, str]:
    dist, sep, version = text.partition("=")
    if not sep:
        raise argparse.ArgumentTypeError(f"expected DIST=VERSION such as vllm=0.33.0, got {text!r}")
    try:
        Version(version)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected DIST=VERSION such as vllm=0.33.0, got {text!r} (not a version)") from None
    return _dist_name(dist), version


def build_latest_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dgcompat conform --latest``."""
    p = argparse.ArgumentParser(
        prog="dgcompat conform --latest",
        description="Ask the package index for the newest releases of every distribution that ships a deep_gemm "
                    "(dgcompat_conformance.dists.DISTRIBUTIONS), fetch only what each needs and judge every new one: "
                    "surface diff against the newest certified release mapped onto the capability table, table and "
                    "call checks, CPU tier. --version V judges one sgl-deep-gemm release instead.",
        epilog="Exit status: 0 nothing to do, 3 new releases certified on the CPU tier (record them), 1 a new release "
               "needs review, 2 the index could not be read. With --version: 0 safe, 3 safe with new rows needed, "
               "1 breaking, 2 could not decide.",
    )
    p.add_argument("--dist", action="append", type=_dist_name, metavar="NAME",
                   help="only this distribution of the discovery table (repeatable; default: all)")
    p.add_argument("--since", action="append", type=_since, default=[], metavar="DIST=V",
                   help="judge the releases of DIST after V as new, whatever the table records (repeatable)")
    p.add_argument("--version", metavar="V", type=release_version,
                   help="judge this sgl-deep-gemm release instead of asking the index")
    p.add_argument("--baseline", metavar="V", type=release_version,
                   help="with --version: compare against this release instead of the newest certified")
    p.add_argument("--index-url", metavar="URL", type=index_url,
                   help="package index to ask (its JSON API; default: $PIP_INDEX_URL, else https://pypi.org/simple/)")
    p.add_argument("--certificates", type=readable_folder, metavar="DIR",
                   help="certificate folder (default: conformance/dgcompat_conformance/certificates)")
    p.add_argument("--out", type=output_folder, default=None,
                   help="where the CPU tier writes its certificates (default: $DGCOMPAT_RESULTS/conform)")
    p.add_argument("--no-cpu-tier", action="store_true", help="skip the CPU tier (surface checks only)")
    p.add_argument("--arch", default="sm90", choices=("sm90", "sm100", "sm120"), help="architecture the table is read for")
    p.add_argument("--timeout", type=positive_seconds, default=900.0, help="seconds the CPU tier may take per release")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p


@returns_status
def main_latest(argv: Sequence[str] | None = None, *, index: PackageIndex | None = None) -> int:
    """``dgcompat conform --latest [options]``; the exit status (see :func:`build_latest_parser`).

    ``argv`` may still hold ``conform`` and ``--latest``; they are ignored. ``index`` replaces the package index
    (tests answer from recorded documents).
    """
    args = [a for a in (sys.argv[1:] if argv is None else list(argv)) if a != "--latest"]
    if args[:1] == ["conform"]:
        args = args[1:]
    parser = build_latest_parser()
    ns = parse(parser, args)
    single = ns.version is not None or ns.baseline is not None
    if single and (ns.since or (ns.dist and ns.dist != [SGL])):
        return usage_error(parser, "argument --version/--baseline: they judge one sgl-deep-gemm release; --dist and "
                                   "--since are for the discovery run, got both")
    url = ns.index_url or newest.default_index_url()
    ix = index or PackageIndex(url)
    say = None if ns.json else (lambda text: print(text, flush=True))
    if single:
        try:
            result = newest.latest(version=ns.version, baseline=ns.baseline, index_url=url, cpu_tier=not ns.no_cpu_tier,
                            out_dir=ns.out, certificates=ns.certificates, arch=ns.arch, timeout=ns.timeout, echo=say,
                            index=ix)
        except (newest.IntakeError, SurfaceError, ValueError, OSError) as exc:
            print(f"dgcompat conform --latest: error: {exc}", file=sys.stderr)
            return 2
        sys.stdout.write(json.dumps(result.to_json(), indent=2, sort_keys=True) + "\n" if ns.json else result.render())
        return result.exit_status
    reports = discovery.discover(ix, dists=ns.dist, since=dict(ns.since), cpu_tier=not ns.no_cpu_tier, out_dir=ns.out,
                                 certificates=ns.certificates, arch=ns.arch, timeout=ns.timeout, echo=say)
    sys.stdout.write(discovery.to_json(reports, ix.url) if ns.json else discovery.render(reports, ix.url))
    return discovery.exit_status(reports)


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main_latest(sys.argv[1:]))
