"""``dgcompat surface``: extract a release's surface as JSON, or diff two releases.

Usage::

    dgcompat surface WHEEL_OR_FOLDER_OR_VERSION [--out FILE] [--no-cache]
    dgcompat surface --diff A B [--json] [--all] [--no-rows] [--no-cache]

``A``/``B`` are wheels, folders, versions of sgl-deep-gemm, release ids of the other distributions
(``vllm-0.34.0``: the deep_gemm folder of its wheel, read from the index), or surface JSON files written by
the first form. The diff lists engine-relevant changes and every change to a symbol dgcompat
calls (``--all``: every public name and op), each mapped onto the capability-table rows that
cover it (:func:`dgcompat_conformance.intake.map_changes`), followed by the unhandled drift, the rows
needed, and how the table and dgcompat's calls fare against ``B``. ``--no-rows`` prints the
plain engine-relevant changes only.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from .. import intake
from .._args import output_file, parse, release_source, returns_status, usage_error
from . import SurfaceError, changes_to_json, diff, extract, render_changes, to_json

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``dgcompat surface``."""
    parser = argparse.ArgumentParser(
        prog="dgcompat surface",
        description="Extract the static API surface of a deep_gemm release, or diff two releases.",
    )
    parser.add_argument("source", nargs="?", type=release_source,
                        help="wheel file, folder with deep_gemm/, sgl-deep-gemm version or release id (vllm-0.34.0)")
    parser.add_argument("--out", metavar="FILE", type=output_file, help="write the JSON to FILE instead of stdout")
    parser.add_argument("--diff", nargs=2, metavar=("A", "B"), type=release_source,
                        help="list the changes from A to B")
    parser.add_argument("--json", action="store_true", help="with --diff: print the changes as JSON")
    parser.add_argument("--all", action="store_true", help="with --diff: compare every name, not only engine-relevant ones")
    parser.add_argument("--no-rows", action="store_true",
                        help="with --diff: plain changes, not mapped onto the capability table")
    parser.add_argument("--no-cache", action="store_true", help="do not read or write cached surfaces")
    return parser


class _BadSource(Exception):
    """A source that names no surface: the argument it came from, and why."""


def _load(source: str, cache: bool, argument: str) -> dict[str, Any]:
    path = Path(source)
    try:
        if path.is_file() and path.suffix == ".json":
            doc = json.loads(path.read_text("utf-8"))
            if not isinstance(doc, dict) or "python" not in doc:
                raise SurfaceError(f"{source}: not a surface JSON file (written by `dgcompat surface SOURCE --out`)")
            return doc
        return extract(source, cache=cache)
    except (SurfaceError, OSError, ValueError) as exc:
        raise _BadSource(f"argument {argument}: {exc}") from exc


def _mapped_diff(a: dict[str, Any], b: dict[str, Any], *, all_symbols: bool, as_json: bool) -> str:
    """The diff from ``a`` to ``b`` with every change mapped onto the capability table."""
    changes = intake.diff_surfaces(a, b, all_symbols=all_symbols)
    mapped = intake.map_changes(changes, before=a, after=b)
    try:
        table: list[str] | None = intake.check_table(b)
    except ValueError:  # B names no release (a bare folder): there is no row to hold it against
        table = None
    calls = intake.check_calls(b)
    if as_json:
        return intake.mapped_to_json(mapped, a, b, table_problems=table, call_problems=calls)
    return intake.render_mapped(mapped, a, b, table_problems=table, call_problems=calls)


@returns_status
def main(argv: list[str]) -> int:
    """Run ``dgcompat surface`` with ``argv`` (the arguments after ``surface``); the exit status."""
    args = list(argv)
    if args[:1] == ["surface"]:
        args = args[1:]
    parser = build_parser()
    ns = parse(parser, args)
    cache = not ns.no_cache
    if ns.diff and ns.source is not None:
        return usage_error(parser, "give either SOURCE or --diff A B, not both")
    if not ns.diff and ns.source is None:
        return usage_error(parser, "SOURCE or --diff A B is required")
    if ns.diff and ns.out:
        return usage_error(parser, "--out FILE is for SOURCE; --diff prints its changes")
    try:
        if ns.diff:
            a, b = (_load(s, cache, name) for s, name in zip(ns.diff, ("--diff A", "--diff B"), strict=True))
            if ns.no_rows:
                changes = diff(a, b, all_symbols=ns.all)
                sys.stdout.write(changes_to_json(changes, a, b) if ns.json else render_changes(changes, a, b))
                return 0
            sys.stdout.write(_mapped_diff(a, b, all_symbols=ns.all, as_json=ns.json))
            return 0
        text = to_json(_load(ns.source, cache, "source"))
    except _BadSource as exc:
        return usage_error(parser, str(exc))
    except (SurfaceError, OSError, ValueError) as exc:
        print(f"dgcompat surface: error: {exc}", file=sys.stderr)
        return 2
    try:
        if ns.out:
            ns.out.write_text(text, "utf-8")
        else:
            sys.stdout.write(text)
    except OSError as exc:
        print(f"dgcompat surface: error: cannot write {ns.out}: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main(sys.argv[1:]))
