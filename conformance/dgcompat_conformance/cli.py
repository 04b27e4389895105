"""``dgcompat`` / ``python -m dgcompat``: doctor, conform, surface, pin, table, warmup."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Sequence

__all__ = ["main"]

_USAGE = """\
usage: dgcompat COMMAND [options]

commands:
  doctor     what is installed, whether it can work, and the pin to use   (--json)
  conform    certify the installed deep_gemm, or published wheels on the CPU tier
  surface    extract a release's API surface from its wheel, or diff two releases
  pin        requirement lines for a certified pairing
  table      the capability table, as the code uses it                    (--markdown)
  warmup     compile the kernels a workload needs, once, in parallel      (--preset, --dense, ...)
  run        run a command with dgcompat installed as deep_gemm            (run -- CMD...)
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help", "help"):
        print(_USAGE, end="")
        return 0
    command, rest = args[0], args[1:]
    if command == "--version":
        from dgcompat import __version__

        print(__version__)
        return 0
    if command == "doctor":
        from .doctor import main as doctor_main

        return doctor_main(rest)
    if command == "conform":
        from .conform import main as conform_main

        return conform_main(rest)
    if command == "surface":
        from .surface.cli import main as surface_main

        return surface_main(rest)
    if command == "pin":
        from .pins import main as pin_main

        return pin_main(rest)
    if command == "table":
        return _table(rest)
    if command == "warmup":
        from dgcompat.jit_warmup.cli import main as warmup_main

        return warmup_main(rest)
    if command == "run":
        from dgcompat._tooling import run_command as run_main

        return run_main(rest)
    print(f"dgcompat: unknown command {command!r}\n\n{_USAGE}", end="", file=sys.stderr)
    return 2


def _table(argv: list[str]) -> int:
    from dgcompat.table import ROWS

    from ._args import parse

    parser = argparse.ArgumentParser(prog="dgcompat table")
    parser.add_argument("--markdown", action="store_true", help="render as a Markdown table")
    parser.add_argument("--json", action="store_true")
    opts = parse(parser, argv)
    if isinstance(opts, int):
        return opts
    if opts.json:
        print(json.dumps([_row_dict(r) for r in ROWS], indent=2, default=str))
        return 0
    if opts.markdown:
        print(render_document(), end="")
        return 0
    for row in ROWS:
        rel = row.releases or "all"
        print(f"{row.capability:<30} {row.dist:<14} {rel:<22} {row.value!r}")
    return 0


def _row_dict(row: Any) -> dict[str, Any]:
    from dataclasses import asdict

    return asdict(row)


_DOC_HEADER = """# The capability table

Generated from `dgcompat/table.py` by `dgcompat table --markdown > docs/capabilities.md` (a test checks
that this file is current). The first row of a capability that matches the installed distribution
and release answers it; rows of kind *presence* are re-checked by probing the imported deep_gemm
(the attribute named in the last column). Per-architecture values are keyed by family (`sm90`,
`sm100`, `sm120`, and `other` for any other or a not yet known architecture); `DGCOMPAT_ARCH`
overrides the current device. Rows marked *informative* record a difference no adapter reads (the
intake still checks them against each release's surface). Which stable names hand out the
upstream function itself is `UPSTREAM_IDENTITY` in the same file.

"""


def render_document() -> str:
    """docs/capabilities.md, whole."""
    return _DOC_HEADER + render_markdown() + "\n"


def render_markdown() -> str:
    """The capability table as Markdown (docs/capabilities.md is generated from this)."""
    from dgcompat.table import ROWS

    from ._text import cell

    lines = [
        "| capability | distribution | releases | value | upstream call | caused by | drop when | kind |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in ROWS:
        kind = r.kind + (f" (`{r.probe}`)" if r.probe else "") + (" informative" if r.informative else "")
        dist = "bundled (sgl-kernel, sglang-kernel)" if r.dist == "bundled" else r.dist
        cells = [f"`{r.capability}`", dist, r.releases or "all", f"`{r.value!r}`", r.upstream, r.since,
                 r.drop_when, kind]
        lines.append("| " + " | ".join(cell(c, f"{r.capability} cell") for c in cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
