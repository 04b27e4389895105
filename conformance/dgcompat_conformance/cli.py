"""``dgcompat`` / ``python -m dgcompat``: doctor, conform, surface, pin, table, warmup, run.

A command loads only its own modules, inside the branch that runs it (``# noqa: PLC0415 (a command loads only its
own modules)``): ``dgcompat --help`` answers in 0.1 s (loading every command first takes 0.5 s more), and
``python -m dgcompat run -- CMD`` execs the engine without loading the certification wing, the intake or warmup
first.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any

from dgcompat import __version__

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
        print(__version__)
        return 0
    run: Callable[[list[str]], int]
    if command == "doctor":
        from .doctor import main as run  # noqa: PLC0415 (a command loads only its own modules)
    elif command == "conform":
        from .conform import main as run  # noqa: PLC0415 (a command loads only its own modules)
    elif command == "surface":
        from .surface.cli import main as run  # noqa: PLC0415 (a command loads only its own modules)
    elif command == "pin":
        from .pins import main as run  # noqa: PLC0415 (a command loads only its own modules)
    elif command == "table":
        run = _table
    elif command == "warmup":
        from dgcompat.jit_warmup.cli import main as run  # noqa: PLC0415 (a command loads only its own modules)
    elif command == "run":
        from dgcompat._tooling import run_command as run  # noqa: PLC0415 (a command loads only its own modules)
    else:
        print(f"dgcompat: unknown command {command!r}\n\n{_USAGE}", end="", file=sys.stderr)
        return 2
    return run(rest)


def _table(argv: list[str]) -> int:
    from dgcompat.table import ROWS  # noqa: PLC0415 (a command loads only its own modules)

    from ._args import UsageExit, parse  # noqa: PLC0415 (a command loads only its own modules)
    from .report import capabilities_page  # noqa: PLC0415 (a command loads only its own modules)

    parser = argparse.ArgumentParser(prog="dgcompat table")
    parser.add_argument("--markdown", action="store_true", help="render as a Markdown table")
    parser.add_argument("--json", action="store_true")
    try:  # returns_status would need _args loaded with this module: 0.2 s more for every command
        opts = parse(parser, argv)
    except UsageExit as exc:
        return exc.status
    if opts.json:
        print(json.dumps([_row_dict(r) for r in ROWS], indent=2, default=str))
        return 0
    if opts.markdown:
        print(capabilities_page(), end="")
        return 0
    for row in ROWS:
        rel = row.releases or "all"
        print(f"{row.capability:<30} {row.dist:<14} {rel:<22} {row.value!r}")
    return 0


def _row_dict(row: Any) -> dict[str, Any]:
    return asdict(row)


if __name__ == "__main__":
    sys.exit(main())
