"""Static surface of a deep_gemm release: what engines can call, read without importing it.

:func:`extract` turns a wheel, an unpacked/installed folder or a release version into a stable,
JSON-able description; :func:`diff` compares two of them. Neither imports ``deep_gemm``,
``torch`` or the native library: Python files are evaluated symbolically
(:mod:`dgcompat_conformance.surface.python`) and the shared object is read as bytes
(:mod:`dgcompat_conformance.surface.native`).

Surface document (keys sorted when serialised)::

    schema             SCHEMA_VERSION
    release            {"name", "version"} from the dist-info METADATA, or None
    source             {"kind": "wheel"|"folder", "name", "sha256"}
    binding            "tvm-ffi" | "torch-library" | "unknown"
    requires_dist      Requires-Dist lines
    torch_build        "2.11", "2.13", ... (header fingerprint) or None
    torch_header_lines {header: [line, ...]} (the fingerprint's evidence)
    native_library     path of the shared object read, or None
    native             op -> {"binding", "params": [{"name", "type", "default"}], "returns", "signature"}
    python             "deep_gemm.<name>" / "deep_gemm.utils.layout.<name>" -> record
    import_errors      simulated import failures ("module: Type: detail")
    package_path       where the package sits ("deep_gemm", "vllm/third_party/deep_gemm")
    deep_gemm_version  the package's literal __version__ ("2.8.1"), or None
    fingerprint        the build's fingerprint (dgcompat_conformance.surface.fingerprint): python, native,
                       asserts and headers ids

A ``python`` record has ``kind`` (see :data:`~dgcompat_conformance.surface.python.SYMBOL_KINDS`); callables
(function, alias, native, class) have ``params`` ``[{"name", "kind", "default", "annotation"}]``.
Function records add ``qualname``, ``returns`` (a summary: ``None``, ``_C.<op>``,
``f(_C.<op>)`` or the expression), ``returns_annotation``, ``native_calls``
(``[{"op", "args"}]`` in source order), ``decorators`` and ``guard`` (the ``try``/``if`` a
definition sits in); native records add ``op``, ``via`` and the op's ``returns``; for them
``params`` come from the native op (``annotation`` = type kind, names ``None`` for tvm-ffi).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..dists import SGL_DEEP_GEMM
from ..releases import parse_release
from ..wheels import FetchError, fetch_wheel
from . import fingerprint as _fingerprint
from ._sources import (
    ReleaseFiles,
    SurfaceError,
    cache_root,
    download_wheel,
    find_cached_wheel,
    parse_metadata,
    read_folder,
    read_wheel,
    sha256_file,
    wheel_dir,
)
from .diff import (
    CHANGE_KINDS,
    ENGINE_PREFIXES,
    ENGINE_SYMBOLS,
    Change,
    changes_to_json,
    diff,
    format_signature,
    is_engine_symbol,
    render_changes,
)
from .native import BINDING_UNKNOWN, NativeLibrary, has_python_init, host_assert_texts, scan_native_library
from .python import read_python_surface

__all__ = [
    "SCHEMA_VERSION",
    "extract",
    "extract_files",
    "resolve_wheel",
    "to_json",
    "diff",
    "Change",
    "CHANGE_KINDS",
    "ENGINE_SYMBOLS",
    "ENGINE_PREFIXES",
    "is_engine_symbol",
    "render_changes",
    "changes_to_json",
    "format_signature",
    "SurfaceError",
    "cache_root",
    "wheel_dir",
    "find_cached_wheel",
]

#: Version of the surface document layout; bump when the extractor's output changes.
SCHEMA_VERSION = 2

_CACHE_SUFFIX = f".surface-v{SCHEMA_VERSION}.json"


def _module_of_so(path: str) -> str:
    """``deep_gemm/_C.so`` -> ``deep_gemm._C``; ``deep_gemm/x.abi3.so`` -> ``deep_gemm.x``."""
    parts = path.split("/")
    return ".".join(parts[:-1] + [parts[-1].split(".", 1)[0]])


def _choose_library(shared: Mapping[str, bytes]) -> tuple[str | None, NativeLibrary | None]:
    """The shared object that holds the deep_gemm ops (``_C*.so`` first, then ``deep_gemm_cpp*``)."""

    def rank(path: str) -> tuple[int, str]:
        base = path.rsplit("/", 1)[-1]
        return (0 if base.startswith("_C") else 1 if base.startswith("deep_gemm_cpp") else 2, path)

    fallback: tuple[str | None, NativeLibrary | None] = (None, None)
    for path in sorted(shared, key=rank):
        lib = scan_native_library(shared[path])
        if lib.binding != BINDING_UNKNOWN:
            return path, lib
        if fallback[0] is None:
            fallback = (path, lib)
    return fallback


def extract_files(files: ReleaseFiles) -> dict[str, Any]:
    """Build the surface document from a :class:`~dgcompat_conformance.surface._sources.ReleaseFiles`."""
    release, requires = parse_metadata(files.metadata)
    lib_path, lib = _choose_library(files.shared_objects)
    extensions = {
        _module_of_so(path): has_python_init(data, _module_of_so(path).rsplit(".", 1)[-1])
        for path, data in files.shared_objects.items()
    }
    surface = read_python_surface(
        files.python_sources,
        native_ops=set(lib.ops) if lib is not None and lib.binding != BINDING_UNKNOWN else None,
        extension_modules=extensions,
    )
    native: dict[str, Any] = {}
    if lib is not None:
        for name, op in lib.ops.items():
            native[name] = {
                "binding": op.binding,
                "params": [{"name": p.name, "type": p.type, "default": p.default} for p in op.params],
                "returns": op.returns,
                "signature": lib.signatures.get(name),
            }
    python: dict[str, Any] = {}
    for name, record in surface.symbols.items():
        record = dict(record)
        if record.get("kind") == "native":
            op_record = native.get(str(record.get("op")))
            positional = "positional_only" if lib is not None and lib.binding == "tvm-ffi" else "positional"
            record["params"] = (
                None
                if op_record is None
                else [
                    {"name": p["name"], "kind": positional, "default": p["default"], "annotation": p["type"]}
                    for p in op_record["params"]
                ]
            )
            record["returns"] = op_record["returns"] if op_record is not None else None
        python[name] = record
    asserts = host_assert_texts(files.shared_objects[lib_path]) if lib_path is not None else None
    doc: dict[str, Any] = {
        "schema": SCHEMA_VERSION,
        "release": release,
        "source": {"kind": files.kind, "name": files.name, "sha256": files.sha256},
        "binding": lib.binding if lib is not None else BINDING_UNKNOWN,
        "requires_dist": requires,
        "torch_build": lib.torch_build if lib is not None else None,
        "torch_header_lines": {k: list(v) for k, v in lib.torch_header_lines.items()} if lib is not None else {},
        "native_library": lib_path,
        "native": native,
        "python": python,
        "import_errors": list(surface.import_errors),
        "package_path": files.package_path,
        "deep_gemm_version": surface.version,
        "fingerprint": _fingerprint.fingerprint(files.python_sources, native, lib.binding if lib is not None else BINDING_UNKNOWN,
                                   asserts, files.headers),
    }
    # A round trip through JSON makes the document canonical (lists, sorted keys, no tuples).
    canonical: dict[str, Any] = json.loads(to_json(doc))
    return canonical


def to_json(surface: Mapping[str, Any], indent: int | None = 2) -> str:
    """Deterministic JSON text of a surface document (sorted keys, trailing newline)."""
    return json.dumps(surface, indent=indent, sort_keys=True, ensure_ascii=False) + "\n"


def resolve_wheel(version: str, *, download: bool = True) -> Path:
    """The verified wheel of ``sgl-deep-gemm==version`` from the cache, downloading it if missing or corrupt."""
    return download_wheel(version, download=download)


def _cache_file(wheel: Path, sha256: str) -> Path:
    return wheel.parent / f"{sha256}{_CACHE_SUFFIX}"


def _load_cached(path: Path, sha256: str) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA_VERSION:
        return None
    if (doc.get("source") or {}).get("sha256") != sha256:
        return None
    return doc


def _store_cached(path: Path, doc: Mapping[str, Any]) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(to_json(doc), "utf-8")
        os.replace(tmp, path)
    except OSError:
        # A read-only wheel folder only costs the cache, never the result.
        try:
            tmp.unlink()
        except OSError:
            pass


def _release_wheel(text: str, download: bool) -> Path:
    """The wheel of a release named by id: an sgl-deep-gemm version, or ``vllm-0.34.0`` / ``sglang-kernel==0.4.2``
    (fetched as the harness fetches it: an engine's or kernel wheel's deep_gemm folder and dist-info only)."""

    try:
        spec = parse_release(text)
    except ValueError:
        return resolve_wheel(text, download=download)
    if spec.dist == SGL_DEEP_GEMM:
        return resolve_wheel(spec.version, download=download)
    if not download:
        raise SurfaceError(f"{text}: not in the cache (downloads are off)")
    try:
        return fetch_wheel(spec)
    except FetchError as exc:
        raise SurfaceError(str(exc)) from exc


def extract(source: str | os.PathLike[str], *, cache: bool = True, download: bool = True) -> dict[str, Any]:
    """The surface document of a release.

    ``source`` is a wheel file, a folder holding ``deep_gemm/`` (plus, optionally, its
    ``.dist-info``), a release id of another distribution (``"vllm-0.34.0"``: its wheel's deep_gemm folder and
    dist-info, :func:`dgcompat_conformance.wheels.fetch_wheel`), or a version such as ``"0.1.4"`` of
    ``sgl-deep-gemm`` (taken from
    ``$DGCOMPAT_CACHE/wheels`` or ``~/.cache/dgcompat/wheels``, and downloaded there with
    ``pip download`` when missing and ``download`` is true). Surfaces of wheels are cached next
    to the wheel as ``<sha256>.surface-v<schema>.json``.
    """
    path = Path(source)
    if not path.exists():
        path = _release_wheel(os.fspath(source), download)
    if path.is_dir():
        return extract_files(read_folder(path))
    if path.suffix != ".whl":
        raise SurfaceError(f"{path}: expected a .whl file or a folder")
    if cache:
        sha = sha256_file(path)
        cached = _load_cached(_cache_file(path, sha), sha)
        if cached is not None:
            return cached
    doc = extract_files(read_wheel(path))
    if cache:
        _store_cached(_cache_file(path, str(doc["source"]["sha256"])), doc)
    return doc
