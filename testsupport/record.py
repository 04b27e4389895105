"""What every benchmark result (bench/ and the call-site table of tests/) records about the code that produced it: dgcompat's version and commit.

Every result writer goes through here: JSON results carry ``dgcompat_version`` and ``dgcompat_commit``
as their first keys (:func:`stamped`, :func:`write_json`), text results open with :func:`header`. The commit is
the checkout's (``+dirty`` when tracked files differ) or ``$DGCOMPAT_SOURCE_COMMIT`` where the source has no
git (a tree copied to a GPU machine: the GPU scripts pass it in).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["provenance", "stamped", "header", "write_json"]


def provenance() -> dict[str, str]:
    """``{"dgcompat_version": ..., "dgcompat_commit": ...}`` of the running dgcompat."""
    from dgcompat import __version__
    from dgcompat_conformance.certificate import source_commit

    return {"dgcompat_version": __version__, "dgcompat_commit": source_commit()}


def stamped(result: dict[str, Any]) -> dict[str, Any]:
    """``result`` with :func:`provenance` first (a value the result already has is kept)."""
    return {**provenance(), **result}


def header() -> str:
    """The first line of a text result: ``dgcompat <version>, commit <commit>``."""
    p = provenance()
    return f"dgcompat {p['dgcompat_version']}, commit {p['dgcompat_commit']}"


def write_json(path: Path, result: dict[str, Any], *, default: Any = None) -> Path:
    """Write ``stamped(result)`` to ``path`` (folders made), indented, newline-terminated."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stamped(result), indent=2, default=default) + "\n")
    return path
