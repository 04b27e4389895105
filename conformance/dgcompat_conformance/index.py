"""The package index: which files a distribution has, and the parts of a wheel without the whole wheel.

Releases are listed with the index's JSON API (PEP 691, with the ``versions`` list of PEP 700:
``GET <index>/<name>/`` with ``Accept: application/vnd.pypi.simple.v1+json``), which PyPI and any
compliant mirror serve. An engine wheel is 240-540 MB, of which deep_gemm is about 11 MB, so
:func:`read_members` reads a wheel the way :mod:`zipfile` does, through HTTP range requests
(``Range: bytes=a-b``, which PyPI's file host honours): the end-of-central-directory record, the
central directory, then only the members wanted. :func:`fetch_partial` keeps those members (the
deep_gemm folder and the dist-info) as a smaller zip with the same member names, checked against the
wheel's own ``RECORD`` hashes, in ``$DGCOMPAT_CACHE/partial``.

All network access goes through one :data:`Transport` (``(url, headers) -> Response``), so tests answer
from recorded index documents and in-memory wheels; :func:`urllib_transport` is the real one.
"""

from __future__ import annotations

import base64
import bisect
import csv
import hashlib
import io
import json
import os
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from packaging.utils import InvalidSdistFilename, InvalidWheelFilename, parse_sdist_filename, parse_wheel_filename
from packaging.version import InvalidVersion, Version

from .dists import canonical
from .wheelcache import cache_root, confined, verify_zip

__all__ = ["DEFAULT_INDEX", "IndexError", "Response", "Transport", "urllib_transport", "IndexFile", "PackageIndex",
           "RangeFile", "read_members", "PartialWheel", "fetch_partial", "partial_dir", "verify_record"]

#: The index asked when none is given (its JSON API; PyPI's simple API).
DEFAULT_INDEX = "https://pypi.org/simple/"
_JSON = "application/vnd.pypi.simple.v1+json"
#: The smallest range asked for at once (a central directory is read in a few such requests).
_MIN_RANGE = 256 << 10
#: Members whose spans lie closer than this are fetched in one request.
_GAP = 1 << 20


class IndexError(RuntimeError):  # noqa: A001 - the index's error, named for what it is
    """The index or its file host could not be asked, or answered something unusable."""


@dataclass(frozen=True)
class Response:
    """One HTTP answer: status, headers (lower-case names) and body."""

    status: int
    headers: Mapping[str, str]
    body: bytes


#: ``(url, request headers) -> Response``; raises :class:`IndexError` when the host cannot be reached.
Transport = Callable[[str, Mapping[str, str]], Response]


def urllib_transport(timeout: float = 60.0) -> Transport:
    """The real transport (:mod:`urllib.request`, following redirects); HTTP error statuses are returned."""

    def get(url: str, headers: Mapping[str, str]) -> Response:
        req = urllib.request.Request(url, headers={"User-Agent": "dgcompat-intake", **headers})  # noqa: S310 - as below
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - http(s) URLs from the index
                return Response(resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read())
        except urllib.error.HTTPError as exc:
            return Response(exc.code, {k.lower(): v for k, v in exc.headers.items()}, exc.read() or b"")
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise IndexError(f"cannot reach {urllib.parse.urlsplit(url).netloc or url}: "
                             f"{getattr(exc, 'reason', None) or exc}") from exc

    return get


@dataclass(frozen=True)
class IndexFile:
    """One file of a release on the index."""

    filename: str
    url: str
    version: Version
    kind: str
    """``"wheel"`` or ``"sdist"``."""
    size: int | None
    sha256: str | None
    yanked: bool
    platforms: tuple[str, ...] = ()
    """The wheel's platform tags (``manylinux_2_28_x86_64``, ``any``); empty for an sdist."""

    @property
    def x86_64(self) -> bool:
        """True for a wheel a Linux x86_64 machine installs (a manylinux x86_64 or pure-Python one)."""
        return self.kind == "wheel" and any(p == "any" or (p.startswith("manylinux") and p.endswith("x86_64"))
                                            for p in self.platforms)


def _parse_file(entry: Mapping[str, Any], base: str) -> IndexFile | None:
    name = str(entry.get("filename") or "")
    url = urllib.parse.urljoin(base, str(entry.get("url") or ""))
    raw = entry.get("hashes")
    hashes: Mapping[str, Any] = raw if isinstance(raw, Mapping) else {}
    size = entry.get("size")
    yanked = bool(entry.get("yanked"))
    try:
        if name.endswith(".whl"):
            _dist, version, _build, tags = parse_wheel_filename(name)
            return IndexFile(name, url, version, "wheel", size if isinstance(size, int) else None,
                             hashes.get("sha256"), yanked, tuple(sorted({t.platform for t in tags})))
        _dist, version = parse_sdist_filename(name)
    except (InvalidWheelFilename, InvalidSdistFilename, InvalidVersion):
        return None
    return IndexFile(name, url, version, "sdist", size if isinstance(size, int) else None, hashes.get("sha256"), yanked)


@dataclass
class PackageIndex:
    """One package index, asked through :data:`Transport` ``transport`` (default: :func:`urllib_transport`)."""

    url: str = DEFAULT_INDEX
    transport: Transport = field(default_factory=urllib_transport)
    _files: dict[str, list[IndexFile] | None] = field(default_factory=dict, repr=False)

    def project_url(self, dist: str) -> str:
        return self.url.rstrip("/") + f"/{canonical(dist)}/"

    def files(self, dist: str) -> list[IndexFile] | None:
        """Every file of ``dist`` on the index (None when the index does not have the project)."""
        key = canonical(dist)
        if key not in self._files:
            url = self.project_url(key)
            resp = self.transport(url, {"Accept": _JSON})
            if resp.status == 404:
                self._files[key] = None
            elif resp.status != 200:
                raise IndexError(f"{url} answered HTTP {resp.status}")
            else:
                try:
                    doc = json.loads(resp.body)
                except ValueError as exc:
                    raise IndexError(f"{url} did not answer JSON (PEP 691): {exc}") from exc
                if not isinstance(doc, dict) or not isinstance(doc.get("files"), list):
                    raise IndexError(f"{url} answered JSON without a files list (PEP 691)")
                parsed = [_parse_file(e, url) for e in doc["files"] if isinstance(e, Mapping)]
                self._files[key] = [f for f in parsed if f is not None]
        found = self._files[key]
        return None if found is None else list(found)

    def versions(self, dist: str, *, pre: bool = False) -> list[Version]:
        """The versions with at least one file that is not yanked, newest first (pre-releases with ``pre``)."""
        files = self.files(dist) or []
        out = {f.version for f in files if not f.yanked and (pre or not (f.version.is_prerelease or f.version.is_devrelease))}
        return sorted(out, reverse=True)

    def release_files(self, dist: str, version: Version | str) -> list[IndexFile]:
        want = version if isinstance(version, Version) else Version(version)
        return [f for f in self.files(dist) or [] if f.version == want and not f.yanked]

    def wheel(self, dist: str, version: Version | str) -> IndexFile | None:
        """The Linux x86_64 wheel of ``dist==version`` (the first by name), None when there is none."""
        wheels = sorted((f for f in self.release_files(dist, version) if f.x86_64), key=lambda f: f.filename)
        return wheels[0] if wheels else None


class RangeFile(io.RawIOBase):
    """A read-only, seekable view of a remote file of known ``size``, read with HTTP range requests.

    What has been read is kept (``fetched`` bytes in all); :meth:`prefetch` asks for several spans at once
    (spans closer than 1 MB become one request). A host that ignores ``Range`` (answers 200) raises
    :class:`IndexError`, so a 500 MB file is never downloaded by accident.
    """

    def __init__(self, url: str, size: int, transport: Transport) -> None:
        super().__init__()
        self.url, self.size, self.transport = url, size, transport
        self.pos = 0
        self.requests = 0
        self.fetched = 0
        self._starts: list[int] = []
        self._chunks: list[bytes] = []

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.pos, 2: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def _have(self, start: int, end: int) -> bool:
        i = bisect.bisect_right(self._starts, start) - 1
        return i >= 0 and self._starts[i] + len(self._chunks[i]) >= end

    def _store(self, start: int, data: bytes) -> None:
        # Merge with every segment it touches, so the segments stay sorted and disjoint.
        end = start + len(data)
        keep_s, keep_c = [], []
        new_start, pieces = start, [(start, data)]
        for s, c in zip(self._starts, self._chunks, strict=True):
            if s + len(c) < start or s > end:
                keep_s.append(s)
                keep_c.append(c)
            else:
                pieces.append((s, c))
                new_start = min(new_start, s)
        new_end = max(s + len(c) for s, c in pieces)
        buf = bytearray(new_end - new_start)
        for s, c in sorted(pieces, key=lambda p: p[0]):
            buf[s - new_start:s - new_start + len(c)] = c
        buf[start - new_start:end - new_start] = data
        i = bisect.bisect_left(keep_s, new_start)
        keep_s.insert(i, new_start)
        keep_c.insert(i, bytes(buf))
        self._starts, self._chunks = keep_s, keep_c

    def _fetch(self, start: int, end: int) -> None:
        """Ask for bytes ``[start, end)`` (one request)."""
        resp = self.transport(self.url, {"Range": f"bytes={start}-{end - 1}"})
        self.requests += 1
        if resp.status == 200:
            raise IndexError(f"{urllib.parse.urlsplit(self.url).netloc} does not honour range requests (HTTP 200 "
                             f"for bytes {start}-{end - 1})")
        if resp.status != 206:
            raise IndexError(f"{self.url} answered HTTP {resp.status} to a range request")
        got = resp.headers.get("content-range", "")
        expected = f"bytes {start}-{end - 1}/{self.size}"
        if got.replace(" ", "") != expected.replace(" ", "") or len(resp.body) != end - start:
            raise IndexError(f"{self.url}: asked for bytes {start}-{end - 1} of {self.size}, got Content-Range "
                             f"{got!r} with {len(resp.body)} bytes (the file changed or the host misread the range)")
        self.fetched += len(resp.body)
        self._store(start, resp.body)

    def prefetch(self, spans: Iterable[tuple[int, int]]) -> None:
        """Fetch the ``[start, end)`` spans not read yet, merging neighbours."""
        wanted = sorted((max(0, s), min(self.size, e)) for s, e in spans if e > s)
        merged: list[list[int]] = []
        for s, e in wanted:
            if merged and s - merged[-1][1] <= _GAP:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        for s, e in merged:
            if not self._have(s, e):
                self._fetch(s, e)

    def readinto(self, buffer: Any) -> int:
        view = memoryview(buffer).cast("B")
        n = min(len(view), self.size - self.pos)
        if n <= 0:
            return 0
        start, end = self.pos, self.pos + n
        if not self._have(start, end):
            lo = start
            i = bisect.bisect_right(self._starts, start) - 1
            if i >= 0 and self._starts[i] + len(self._chunks[i]) > start:
                lo = self._starts[i] + len(self._chunks[i])  # ask only for what is missing
            self._fetch(lo, max(end, min(self.size, lo + _MIN_RANGE)))
        i = bisect.bisect_right(self._starts, start) - 1
        chunk = self._chunks[i]
        off = start - self._starts[i]
        view[:n] = chunk[off:off + n]
        self.pos = end
        return n


def read_members(url: str, size: int, keep: Callable[[str], bool], transport: Transport) -> tuple[dict[str, bytes], RangeFile]:
    """The members of the remote zip at ``url`` for which ``keep(name)`` holds (CRC-checked by :mod:`zipfile`),
    read with range requests; also the :class:`RangeFile`, whose counters say what it cost."""
    remote = RangeFile(url, size, transport)
    # The end record and the central directory: zipfile reads the last 22 bytes (more with a comment), then the
    # directory; one request for the tail covers both in most wheels.
    remote.prefetch([(size - min(size, 2 * _MIN_RANGE), size)])
    try:
        zf = zipfile.ZipFile(remote)
    except (zipfile.BadZipFile, OSError) as exc:
        raise IndexError(f"{url}: not a readable zip archive ({exc})") from exc
    with zf:
        infos = [i for i in zf.infolist() if not i.is_dir() and keep(i.filename)]
        # Local headers carry their own extra field (up to 64 KiB): allow for it when grouping spans.
        remote.prefetch((i.header_offset, i.header_offset + 30 + len(i.orig_filename.encode()) + len(i.extra)
                         + i.compress_size + 1024) for i in infos)
        out: dict[str, bytes] = {}
        for info in infos:
            try:
                out[info.filename] = zf.read(info)
            except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
                raise IndexError(f"{url}: member {info.filename} is unreadable ({exc})") from exc
    return out, remote


def verify_record(members: Mapping[str, bytes]) -> list[str]:
    """Where ``members`` disagree with the ``RECORD`` of the dist-info among them (empty when every kept file
    has the hash the wheel records; a missing RECORD is one problem)."""
    records = [n for n in members if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(records) != 1:
        return [f"expected one dist-info RECORD among the kept files, found {len(records)}"]
    recorded: dict[str, str] = {}
    for row in csv.reader(io.StringIO(members[records[0]].decode("utf-8", "replace"))):
        if row:
            recorded[row[0]] = row[1] if len(row) >= 2 else ""
    problems = []
    for name, data in members.items():
        if name == records[0]:
            continue
        want = recorded.get(name)
        if want is None:
            problems.append(f"{name} is not listed in {records[0]}")
            continue
        algo, _, value = want.partition("=")
        if algo != "sha256":
            continue  # listed without a hash (the dist-info's own files may be)
        got = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        if got != value:
            problems.append(f"{name} does not have the hash {records[0]} records")
    return problems


def partial_dir() -> Path:
    """``$DGCOMPAT_CACHE/partial``: the kept parts of engine and kernel wheels."""

    return cache_root() / "partial"


@dataclass(frozen=True)
class PartialWheel:
    """The kept members of a wheel, as a zip file with the wheel's own file name and member names."""

    path: Path
    source: Mapping[str, Any]
    """``{"url", "size", "sha256"}`` of the whole wheel (from the index), ``"members"`` kept, ``"fetched"``
    bytes and ``"requests"`` it took (0 when it came from the cache)."""

    @property
    def fetched(self) -> int:
        return int(self.source.get("fetched") or 0)


def _sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def fetch_partial(file: IndexFile, prefixes: Iterable[str], transport: Transport, *, directory: Path | None = None
                  ) -> PartialWheel:
    """The members of ``file`` under ``prefixes`` (``"vllm/third_party/deep_gemm/"``) plus its dist-info, kept
    in ``directory`` (default :func:`partial_dir`); from there when already kept and readable, else read with
    range requests and checked against the wheel's RECORD. Raises :class:`IndexError`."""
    if file.kind != "wheel" or file.size is None:
        raise IndexError(f"{file.filename}: a partial read needs a wheel of known size")
    wanted = tuple(prefixes)

    # One folder per set of kept members: the dist-info alone (an engine's requirements) and the deep_gemm folder
    # of the same wheel never replace each other.
    tag = "-".join(p.strip("/").replace("/", ".") for p in wanted) or "dist-info"
    folder = (directory or partial_dir()) / tag
    target = confined(folder, file.filename)
    if target.is_file() and _sidecar(target).is_file() and verify_zip(target) is None:
        try:
            source = json.loads(_sidecar(target).read_text("utf-8"))
        except (OSError, ValueError):
            source = None
        if isinstance(source, dict) and source.get("sha256") == file.sha256 and source.get("prefixes") == list(wanted):
            return PartialWheel(target, {**source, "fetched": 0, "requests": 0})

    def keep(name: str) -> bool:
        top = name.split("/", 1)[0]
        return name.startswith(wanted) or (top.endswith(".dist-info") and name.count("/") == 1)

    members, remote = read_members(file.url, file.size, keep, transport)
    problems = verify_record(members)
    if problems:
        raise IndexError(f"{file.filename}: the kept files disagree with the wheel's RECORD: " + "; ".join(problems[:3]))
    folder.mkdir(parents=True, exist_ok=True)
    target = confined(folder, file.filename)
    source = {"url": file.url, "size": file.size, "sha256": file.sha256, "prefixes": list(wanted),
              "members": len(members), "fetched": remote.fetched, "requests": remote.requests}
    fd, tmp_name = tempfile.mkstemp(dir=folder, prefix=f".{file.filename}.")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        with zipfile.ZipFile(tmp, "w") as out:
            for name in sorted(members):
                info = zipfile.ZipInfo(name, (2020, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                out.writestr(info, members[name])
        tmp.chmod(0o644)
        os.replace(tmp, target)
        _sidecar(target).write_text(json.dumps(source, indent=1, sort_keys=True) + "\n", "utf-8")
    finally:
        tmp.unlink(missing_ok=True)
    return PartialWheel(target, source)
