"""A build's fingerprint: what callers of one deep_gemm build see, part by part, as short ids.

Two builds can share a version and differ (vLLM 0.33.0's and 0.34.0's DeepGEMM 2.8.1), so a build is
known by its surface, not its version. The fingerprint has four parts, each a 12-digit id
(:func:`dgcompat._tooling.signature_digest`) with what it was computed from:

``python``
    the parameters of the functions of :data:`dgcompat.detection.SIGNATURE_NAMES` the build defines in
    Python, read exactly as detection reads them (:func:`dgcompat._tooling.parameters_from_sources`, which
    follows ``globals().update`` registrations): its id is :attr:`dgcompat.Release.surface`, the part
    ``release()`` checks on every start against :data:`dgcompat.detection.KNOWN_SURFACES`;
``native``
    the native ops: TORCH_LIBRARY schema strings read from the library's bytes, or the demangled
    ``dg_<op>`` prototypes of a tvm-ffi library (one id per op, so a difference names the op);
``asserts``
    the host-assert conditions compiled into the library (what its kernels accept);
``headers``
    the sha256 of every file under ``deep_gemm/include/``, the sources the JIT compiles at run time.

Detection reads only the Python part: the others mean reading a 30-50 MB native library and 800
headers, which the engine's start-up must not pay. The certification wing computes the whole fingerprint
(:func:`dgcompat_conformance.surface.extract`), records it per known build (:data:`RECORDED`,
``builds.json``), puts it into certificates, and ``dgcompat doctor`` computes it for the installed build
and names what differs from the recorded build of the same version (:func:`compare`), mapped onto the
capability table's rows by the intake (:func:`dgcompat_conformance.intake.mapping.rows_touched`). The recorded
builds are written by ``python -m dgcompat_conformance.intake.builds --record``. A part that could not be read (a work folder without
headers) has the id ``""`` and is not compared.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dgcompat._tooling import parameters_from_sources, signature_digest
from dgcompat.detection import KNOWN_SURFACES, SIGNATURE_NAMES

__all__ = ["PARTS", "BUILDS_FILE", "fingerprint", "part_ids", "Difference", "compare", "recorded", "recorded_for",
           "write_recorded", "known_surfaces_table"]

#: The parts of a fingerprint, in the order they are compared and printed.
PARTS = ("python", "native", "asserts", "headers")

#: The recorded fingerprints of the builds dgcompat knows (release id -> fingerprint).
BUILDS_FILE = Path(__file__).resolve().parent / "builds.json"


def _digest(pairs: Iterable[tuple[str, Iterable[str]]]) -> str:
    items = list(pairs)
    return signature_digest(items) if items else ""


def fingerprint(python_sources: Mapping[str, str], native: Mapping[str, Mapping[str, Any]], binding: str,
                asserts: Iterable[str] | None, headers: Mapping[str, str] | None, package: str = "deep_gemm") -> dict[str, Any]:
    """The fingerprint of one build.

    ``python_sources``: ``"deep_gemm/<file>.py"`` -> text; ``native``: the surface's native ops (op ->
    ``{"signature", ...}``); ``asserts``: the host-assert texts (None: the library was not read);
    ``headers``: ``"deep_gemm/include/<path>"`` -> sha256 (None or empty: not read).
    """
    texts = {rel: python_sources.get(f"{package}/{rel}") for rel in ("__init__.py", "_C.py")}
    params = parameters_from_sources(texts, SIGNATURE_NAMES)
    ops = {op: signature_digest([(op, [str(rec.get("signature") or "")])]) for op, rec in sorted(native.items())}
    assert_list = sorted(set(asserts or ()))
    header_map = dict(sorted((headers or {}).items()))
    parts: dict[str, Any] = {
        "python": {"id": _digest(params.items()), "signatures": {k: list(v) for k, v in sorted(params.items())}},
        "native": {"id": _digest((op, [d]) for op, d in ops.items()), "binding": binding, "ops": ops},
        "asserts": {"id": _digest((t, []) for t in assert_list) if asserts is not None else "", "count": len(assert_list)},
        "headers": {"id": _digest((p, [h]) for p, h in header_map.items()), "count": len(header_map)},
    }
    read = [(p, [parts[p]["id"]]) for p in PARTS]
    return {"id": _digest(read) if any(i for _p, (i,) in read) else "", **parts}


def part_ids(fp: Mapping[str, Any]) -> dict[str, str]:
    """``{part: id}`` (``""`` for a part not read)."""
    return {p: str((fp.get(p) or {}).get("id") or "") for p in PARTS}


@dataclass(frozen=True)
class Difference:
    """One way two fingerprints differ: the part, the names it concerns (functions, parameters, ops) and words."""

    part: str
    names: tuple[str, ...]
    detail: str
    params: tuple[str, ...] = ()
    """For a Python function: the parameters inserted or removed."""


def _param_changes(before: list[str], after: list[str]) -> tuple[list[str], list[str]]:
    return [p for p in after if p not in before], [p for p in before if p not in after]


def compare(found: Mapping[str, Any], recorded_fp: Mapping[str, Any]) -> list[Difference]:
    """How ``found`` differs from ``recorded_fp``, part by part (parts either side did not read are skipped)."""
    out: list[Difference] = []
    a, b = part_ids(recorded_fp), part_ids(found)
    if a["python"] and b["python"] and a["python"] != b["python"]:
        sa = (recorded_fp.get("python") or {}).get("signatures") or {}
        sb = (found.get("python") or {}).get("signatures") or {}
        for name in sorted(set(sa) | set(sb)):
            before, after = list(sa.get(name) or []), list(sb.get(name) or [])
            if name not in sb:
                out.append(Difference("python", (name,), f"{name} is no longer a Python function"))
            elif name not in sa:
                out.append(Difference("python", (name,), f"{name}({', '.join(after)}) is new in Python"))
            elif before != after:
                added, removed = _param_changes(before, after)
                words = [f"{p} inserted at #{after.index(p)}" for p in added]
                words += [f"{p} removed (was #{before.index(p)})" for p in removed]
                if not words:
                    words = [f"parameters reordered: ({', '.join(before)}) -> ({', '.join(after)})"]
                out.append(Difference("python", (name,), f"{name}: " + ", ".join(words), tuple(added + removed)))
    if a["native"] and b["native"] and a["native"] != b["native"]:
        oa = (recorded_fp.get("native") or {}).get("ops") or {}
        ob = (found.get("native") or {}).get("ops") or {}
        added = sorted(set(ob) - set(oa))
        removed = sorted(set(oa) - set(ob))
        changed = sorted(op for op in set(oa) & set(ob) if oa[op] != ob[op])
        for what, ops in (("new native ops", added), ("native ops gone", removed), ("native schemas changed", changed)):
            if ops:
                out.append(Difference("native", tuple(ops), f"{what}: {', '.join(ops)}"))
    for part, noun in (("asserts", "host asserts"), ("headers", "JIT headers")):
        if a[part] and b[part] and a[part] != b[part]:
            ca, cb = (recorded_fp.get(part) or {}).get("count"), (found.get(part) or {}).get("count")
            out.append(Difference(part, (), f"{noun} differ ({ca} -> {cb})"))
    return out


@functools.lru_cache(maxsize=1)
def _load(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def recorded(path: Path | None = None) -> dict[str, dict[str, Any]]:
    """Release id -> the recorded fingerprint of that build (:data:`BUILDS_FILE`)."""
    builds = _load(path or BUILDS_FILE).get("builds") or {}
    return {k: v for k, v in builds.items() if isinstance(v, dict)}


def recorded_for(dist: str, version: str, path: Path | None = None) -> dict[str, dict[str, Any]]:
    """The recorded builds of ``dist`` ``version`` (detection's lineage: ``deep-gemm 2.8.1`` for vLLM's copies)."""
    return {rid: fp for rid, fp in recorded(path).items()
            if fp.get("dist") == dist and str(fp.get("version")) == str(version)}


def known_python_ids() -> dict[tuple[str, str], set[str]]:
    """``(dist, version) -> python ids`` of the runtime's :data:`~dgcompat.detection.KNOWN_SURFACES`."""
    return {k: set(v) for k, v in KNOWN_SURFACES.items()}


def write_recorded(builds: Mapping[str, Mapping[str, Any]], path: Path = BUILDS_FILE) -> None:
    """Write ``builds`` (release id -> fingerprint) as the recorded builds file at ``path``; :func:`recorded` reads
    the new file from then on."""
    doc_out = {"about": "Fingerprints of the builds dgcompat knows (python_sources/native/asserts/headers ids); "
                        "written by `python -m dgcompat_conformance.intake.builds --record`.",
               "builds": dict(sorted(builds.items()))}
    path.write_text(json.dumps(doc_out, indent=1, sort_keys=True) + "\n", "utf-8")
    _load.cache_clear()


def known_surfaces_table(builds: Mapping[str, Mapping[str, Any]]) -> dict[tuple[str, str], dict[str, str]]:
    """What :data:`dgcompat.detection.KNOWN_SURFACES` must hold for ``builds``: the python id of each build, by
    (dist, version); a version with several builds names which build each id is."""
    out: dict[tuple[str, str], dict[str, list[str]]] = {}
    for rid, fp in builds.items():
        pid = str((fp.get("python") or {}).get("id") or "")
        if pid:
            out.setdefault((str(fp["dist"]), str(fp["version"])), {}).setdefault(pid, []).append(rid)
    return {k: {pid: ", ".join(sorted(rids)) for pid, rids in v.items()} for k, v in sorted(out.items())}
