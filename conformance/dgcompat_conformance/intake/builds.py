"""The recorded builds: the fingerprint of every certified build, written into ``surface/builds.json``.

``python -m dgcompat_conformance.intake.builds [--record | --check] [RELEASE ...]`` prints the fingerprints of
the given releases (default: every build the discovery table certifies), writes them into the recorded builds
file with ``--record``, and with ``--check`` compares that file with :data:`dgcompat.detection.KNOWN_SURFACES`
(the runtime's copy of each build's Python id). A build is recorded under detection's lineage (vLLM's copies
as ``deep-gemm 2.8.1``: :func:`~dgcompat_conformance.intake.claims.release_of`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from dgcompat.detection import KNOWN_SURFACES

from .._args import parse, release_spec, returns_status
from ..dists import DISTRIBUTIONS, SGL_DEEP_GEMM
from ..releases import parse_release
from ..surface import extract
from ..surface.fingerprint import BUILDS_FILE, PARTS, known_surfaces_table, recorded, write_recorded
from ..wheels import fetch_wheel
from .claims import release_of

__all__ = ["record", "main"]


def _release_ids() -> list[str]:
    """Every build the discovery table certifies, by release id."""
    return [v if d.name == SGL_DEEP_GEMM else f"{d.name}-{v}" for d in DISTRIBUTIONS for v in d.certified]


def record(ids: Iterable[str], path: Path = BUILDS_FILE, *,
           echo: Callable[[str], Any] = print) -> dict[str, dict[str, Any]]:
    """Compute the fingerprint of each release id from its wheel (whole, or the deep_gemm folder and dist-info read
    with range requests) and write them into ``path``; returns what was written."""
    builds = dict(recorded(path))
    for rid in ids:
        spec = parse_release(rid)
        wheel = fetch_wheel(spec)
        doc = extract(wheel)
        rel = release_of(doc)
        fp = dict(doc["fingerprint"])
        builds[spec.id] = {"dist": rel.dist, "version": str(rel.version), "wheel": wheel.name, **fp}
        echo(f"{spec.id:<28} {rel.dist} {rel.version}: {fp['id']} " + " ".join(f"{p}={fp[p]['id'] or '-'}" for p in PARTS))
    write_recorded(builds, path)
    return builds


@returns_status
def main(argv: list[str] | None = None) -> int:
    """``python -m dgcompat_conformance.intake.builds [--record | --check] [RELEASE ...]``; the exit status."""
    p = argparse.ArgumentParser(prog="python -m dgcompat_conformance.intake.builds", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("releases", nargs="*", type=release_spec,
                   help="release ids (0.1.4, sglang-kernel-0.4.2, vllm-0.34.0; default: every certified build)")
    p.add_argument("--record", action="store_true", help="write them into builds.json")
    p.add_argument("--check", action="store_true", help="compare builds.json with dgcompat.detection.KNOWN_SURFACES")
    ns = parse(p, sys.argv[1:] if argv is None else argv)
    if ns.check:
        want = known_surfaces_table(recorded())
        have = {k: set(v) for k, v in KNOWN_SURFACES.items()}
        bad = {k: v for k, v in want.items() if set(v) != have.get(k)}
        for k, v in bad.items():
            print(f"{k}: builds.json {sorted(v)} vs KNOWN_SURFACES {sorted(have.get(k) or [])}")
        return 1 if bad else 0
    ids = [spec.id for spec in ns.releases] or _release_ids()
    if ns.record:
        builds = record(ids)
        for key, ids_ in known_surfaces_table(builds).items():
            print(f"    {key!r}: {ids_!r},")
        return 0
    for rid in ids:
        fp = extract(fetch_wheel(parse_release(rid)))["fingerprint"]
        print(f"{rid:<28} {fp['id']} " + " ".join(f"{part}={fp[part]['id'] or '-'}" for part in PARTS))
    return 0


if __name__ == "__main__":
    sys.exit(main())
