"""Per-release expected failures: ``conformance/dgcompat_conformance/xfails/<release id>.txt``.

One pytest node id per line; a node id without ``[...]`` covers every parametrization. Comment
lines (``# ...``) name the upstream cause and apply to the ids below them until the next comment
block. Entries are applied as strict ``xfail`` marks, so a test that starts passing fails the
run (``XPASS(strict)``), and entries that match no collected test are reported as stale.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

__all__ = ["XfailEntry", "xfail_dir", "xfail_file", "load_xfails", "match"]


@dataclass(frozen=True)
class XfailEntry:
    """One expected failure: the node id (or id prefix) and the cause from its comment block."""

    nodeid: str
    reason: str
    line: int


def xfail_dir() -> Path:
    """The folder of the xfail files shipped with the package."""
    return Path(__file__).resolve().parent.parent / "xfails"


def xfail_file(release_id: str, directory: Path | None = None) -> Path:
    return (directory or xfail_dir()) / f"{release_id}.txt"


def load_xfails(release_id: str, directory: Path | None = None) -> list[XfailEntry]:
    """The entries of a release's xfail file (empty when it has none)."""
    path = xfail_file(release_id, directory)
    if not path.is_file():
        return []
    out: list[XfailEntry] = []
    comment: list[str] = []
    in_comment = False
    for n, raw in enumerate(path.read_text().splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        if line.startswith("#"):
            if not in_comment:
                comment = []
            comment.append(line.lstrip("#").strip())
            in_comment = True
            continue
        in_comment = False
        reason = " ".join(c for c in comment if c) or f"listed in {path.name}"
        out.append(XfailEntry(line, reason, n))
    return out


def match(entry: XfailEntry, nodeid: str) -> bool:
    """Whether ``entry`` covers the collected test ``nodeid``."""
    if nodeid == entry.nodeid:
        return True
    return "[" not in entry.nodeid and nodeid.startswith(entry.nodeid + "[")
