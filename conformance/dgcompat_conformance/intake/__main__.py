"""``python -m dgcompat_conformance.intake [options]``: the same command as ``dgcompat conform --latest``."""

from __future__ import annotations

import sys

from .cli import main_latest

sys.exit(main_latest(sys.argv[1:]))
