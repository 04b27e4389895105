"""Installed-distribution metadata (``*.dist-info`` / ``*.egg-info`` folders), read without trusting it.

Detection's one reader of what pip left on disk, in the manner of packaging's ``_elffile``: a class
whose constructor reads one folder and whose attributes are plain data. A metadata folder can be
anything (half-written, hand-edited, a stale copy next to a newer one), so nothing here raises on
malformed input: every unreadable or inconsistent part becomes a line of :attr:`DistInfo.problems`,
and the caller decides what it means. Also here: the bounded text read and the RECORD-style
``sha256=`` digest the owner checks compare against.
"""

from __future__ import annotations

import base64
import hashlib
import importlib.metadata as md
import json
import re
import urllib.parse
from pathlib import Path

from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion
from packaging.version import Version

__all__ = ["DistInfo", "infos_in", "editable_project", "read_text", "version_or_none", "sha256"]

#: ``name-version[-pyX.Y].dist-info``: what a folder's name says when its METADATA does not.
_INFO_NAME_RE = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._]*?)-([^-]+?)(?:-py[0-9.]+)?\.(?:dist|egg)-info$")


def version_or_none(text: str | None) -> Version | None:
    """``text`` as a PEP 440 version, or None when it is empty or not one."""
    if not text:
        return None
    try:
        return Version(text)
    except InvalidVersion:
        return None


def read_text(path: Path, limit: int = 1 << 20) -> str | None:
    """The first ``limit`` bytes of ``path`` as text (undecodable bytes replaced), or None when unreadable."""
    try:
        with open(path, "rb") as f:
            return f.read(limit).decode("utf-8", "replace")
    except OSError:
        return None


def sha256(path: Path) -> str | None:
    """``sha256=<urlsafe base64, unpadded>`` of the file, as a RECORD line writes it; None when unreadable."""
    try:
        digest = hashlib.sha256()
        with open(path, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                digest.update(chunk)
    except OSError:
        return None
    return "sha256=" + base64.urlsafe_b64encode(digest.digest()).rstrip(b"=").decode()


class DistInfo:
    """One metadata folder, read once at construction.

    ``name`` is the normalized distribution name (None when neither METADATA nor the folder name gives
    one); ``version_text`` the version as written; ``files`` maps each RECORD path (``/``-separated,
    relative to the site folder) to its ``sha256=...`` hash or None, and is None itself when there is no
    readable RECORD; ``problems`` says what could not be read or does not add up.
    """

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        problems: list[str] = []
        dist = md.PathDistribution(folder)
        name: str | None = None
        version_text: str | None = None
        try:
            meta = dist.metadata
            name, version_text = meta["Name"], meta["Version"]  # None when absent (email.message semantics)
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"{folder} has unreadable METADATA ({type(exc).__name__})")
        if not name or not version_text:
            m = _INFO_NAME_RE.match(folder.name)
            missing = "METADATA without Name/Version" if (name or version_text) else "no METADATA"
            problems.append(f"{folder} has {missing}; its folder name is used"
                            + ("" if m else " but does not name a distribution either"))
            if m:
                name, version_text = name or m.group(1), version_text or m.group(2)
        if version_text and version_or_none(version_text) is None:
            problems.append(f"{folder}: version {version_text!r} is not a PEP 440 version")
        files: dict[str, str | None] | None = None
        try:
            listed = dist.files
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            problems.append(f"{folder} has an unreadable RECORD ({type(exc).__name__}): its files cannot be verified")
            listed = None
        if listed is not None:
            files = {}
            for entry in listed:
                digest = entry.hash
                files[str(entry).replace("\\", "/")] = f"{digest.mode}={digest.value}" if digest is not None else None
        self.name: str | None = str(canonicalize_name(name)) if name else None
        self.version_text: str | None = version_text
        self.files: dict[str, str | None] | None = files
        self.problems: tuple[str, ...] = tuple(problems)

    @property
    def version(self) -> Version | None:
        return version_or_none(self.version_text)

    def __str__(self) -> str:
        return f"{self.name or self.folder.name} {self.version_text or '?'}"

    def matching_hashes(self, site: Path, checked: list[str]) -> tuple[int, int]:
        """(files of ``checked``, paths relative to ``site``, whose recorded sha256 matches the disk; files compared)."""
        hits = compared = 0
        for rel in checked:
            recorded = (self.files or {}).get(rel)
            if recorded is None or not recorded.startswith("sha256="):
                continue
            compared += 1
            hits += int(sha256(site / rel) == recorded)
        return hits, compared


def editable_project(folder: Path) -> Path | None:
    """The project folder the metadata folder ``folder`` records an editable install of (PEP 610
    ``direct_url.json`` with ``dir_info.editable`` and a ``file:`` URL), resolved; None for any other install or
    an unreadable record. Reads that one file only (detection asks it of every metadata folder on ``sys.path``)."""
    text = read_text(folder / "direct_url.json", 1 << 16)
    try:
        doc = json.loads(text) if text else None
    except ValueError:
        return None
    if not (isinstance(doc, dict) and isinstance(doc.get("dir_info"), dict) and doc["dir_info"].get("editable")):
        return None
    url = urllib.parse.urlsplit(str(doc.get("url") or ""))
    if url.scheme != "file":
        return None
    return Path(urllib.parse.unquote(url.path)).resolve()


def infos_in(site: Path) -> list[DistInfo]:
    """Every metadata folder directly in ``site``, sorted by folder name ([] when ``site`` cannot be listed)."""
    try:
        folders = sorted(p for p in site.iterdir() if p.suffix in (".dist-info", ".egg-info") and p.is_dir())
    except OSError:
        return []
    return [DistInfo(p) for p in folders]
