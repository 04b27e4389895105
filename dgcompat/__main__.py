"""``python -m dgcompat ...``: the ``dgcompat`` command, which lives in the certification wing.

Only this launcher names the tooling; nothing that ``import dgcompat`` loads does.
"""

from __future__ import annotations

import importlib
import sys


def _main() -> int:
    try:
        cli = importlib.import_module("dgcompat_conformance.cli")
    except ImportError as exc:
        print(f"dgcompat: the command-line tools (dgcompat_conformance) are not importable: {exc}", file=sys.stderr)
        return 2
    return int(cli.main())


sys.exit(_main())
