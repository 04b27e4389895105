"""``dgcompat doctor``: one screen that says whether this stack can work, and what to pin.

The ABI health check (import deep_gemm, then a tiny call that must see the tensors it was given) is
the GPU tier's own, and runs in a child process, so a crash or a hang of the native library cannot
take doctor down.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

from dgcompat import __version__, _tooling, detection
from dgcompat.errors import DgcompatError
from dgcompat.table import capabilities

from ._args import parse, returns_status
from ._text import UnsafeTextError
from .certificate import CertificateError
from .gpu.abi import abi_check as check
from .intake.mapping import rows_touched
from .pins import PinRefused, suggest
from .surface import SurfaceError, extract
from .surface.fingerprint import compare, part_ids, recorded_for

__all__ = ["main", "collect", "abi_check", "environment_report"]


class EnvVar(NamedTuple):
    """One ``DGCOMPAT_*`` variable as doctor shows it: its value here and whether that value is accepted."""

    name: str
    value: str | None
    """None when unset."""
    valid: bool
    accepted: str
    """The accepted values, in words."""
    meaning: str
    """What the value does (or why it is refused)."""
    read_by: str
    """Who reads it (:attr:`dgcompat.env.Variable.read_by`), ``"-"`` for a retired or unknown one."""
    effect: str
    """What it does (``"-"`` for a retired or unknown one)."""


def environment_report() -> list[EnvVar]:
    """Every variable of the runtime's one list (:data:`dgcompat.env.VARIABLES`, each once, set or not),
    then the retired ones that are set, then any other ``DGCOMPAT_*`` variable set here (misspelt?).

    Variables dgcompat sets for its own children (:data:`dgcompat.env.INTERNAL_PREFIXES`) are left out.
    """

    out = []
    for row in _tooling.env_report():
        accepted = ", ".join(row.accepted) if row.accepted else "a folder this process can write or create"
        out.append(EnvVar(row.name, row.value, row.ok, accepted, row.meaning, row.read_by, row.effect))
    known = {v.name for v in out}
    for name, fate in _tooling.retired_variables.items():
        value = os.environ.get(name)
        if value is not None:
            out.append(EnvVar(name, value, True, "-", fate, "-", "-"))
        known.add(name)
    internal = tuple(_tooling.internal_variable_prefixes)
    for name in sorted(os.environ):
        if name.startswith("DGCOMPAT_") and name not in known and not name.startswith(internal):
            out.append(EnvVar(name, os.environ[name], False, "-", "not a variable dgcompat reads (misspelt?)", "-", "-"))
    return out


def abi_check(timeout: float = 180.0) -> dict[str, Any]:
    """The GPU tier's ABI health check (:func:`dgcompat_conformance.gpu.abi.abi_check`), in a child process.

    Returns at least ``{"import", "call", "verdict", "detail"}``; ``call`` is None where no GPU was
    available to check kernels, and ``verdict`` is ``"hang"`` when the child had to be killed.
    """

    # Honour an explicit override, so doctor checks what the engine's process would do.
    try:
        allow = _tooling.allow_torch_mismatch()
    except DgcompatError:  # reported in the environment section
        allow = False
    result: dict[str, Any] = check(timeout=timeout, allow_torch_mismatch=allow)
    return result


def _torch_info() -> dict[str, Any]:
    info: dict[str, Any] = {"version": None, "cuda": None, "gpu": None, "arch": None}
    try:
        import torch  # noqa: PLC0415 (a torch that fails to import is reported by doctor, not fatal)
    except Exception as exc:  # noqa: BLE001 - a broken torch is itself a finding
        info["error"] = f"{type(exc).__name__}: {exc}"
        return info
    info["version"] = torch.__version__
    info["cuda"] = torch.version.cuda
    try:
        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            info["gpu"] = f"{props.name} ({props.multi_processor_count} SMs)"
            info["arch"] = f"sm{props.major}{props.minor}"
    except Exception as exc:  # noqa: BLE001 - a GPU query failing is itself a finding
        info["gpu_error"] = f"{type(exc).__name__}: {exc}"
    return info


def surface_report(rel: Any) -> dict[str, Any] | None:
    """The installed build's fingerprint (:mod:`dgcompat_conformance.surface.fingerprint`, read from its files here:
    the native library and the JIT headers, which detection leaves alone) held against the builds recorded for its
    version: which one it is, or what differs and which capability rows and probes that touches."""
    if not rel.installed or rel.location is None or rel.version is None or rel.installed_as == "zip archive":
        return None

    out: dict[str, Any] = {"surface": rel.surface, "note": rel.surface_note}
    try:
        fp = extract(rel.location, cache=False).get("fingerprint") or {}
    except (SurfaceError, OSError, ValueError) as exc:
        out["error"] = f"cannot read the build's files: {exc}"
        return out
    out["fingerprint"] = fp.get("id")
    builds = recorded_for(str(rel.dist), str(rel.version))
    out["recorded"] = sorted(builds)
    # The same build: every part read on both sides agrees (a copy without its JIT headers still matches).
    same = [rid for rid, b in builds.items() if not compare(fp, b)]
    out["not_read"] = [p for p, i in part_ids(fp).items() if not i]
    if same or not builds:
        out["build"] = same[0] if same else None
        return out
    # The nearest recorded build: the one whose Python part matches, else any.
    nearest = next((rid for rid, b in builds.items() if (b.get("python") or {}).get("id") == rel.surface), max(builds))
    diffs = compare(fp, builds[nearest])
    probes, rows = rows_touched(diffs)
    out.update(nearest=nearest, differences=[f"{d.part}: {d.detail}" for d in diffs], probes=probes, rows=rows)
    return out


def collect(*, run_abi: bool = True) -> dict[str, Any]:
    """Everything doctor prints, as data."""
    rel = detection.release()
    torch_info = _torch_info()
    try:
        caps_dict: dict[str, Any] = capabilities().as_dict()
    except DgcompatError as exc:  # e.g. an environment variable the runtime refuses
        caps_dict = {}
        problems_early = [f"capabilities: {exc}"]
    else:
        problems_early = []
    abi = abi_check() if (run_abi and rel.installed and rel.refusal is None) else None
    problems = list(rel.problems) + problems_early
    surface = surface_report(rel)
    if surface and surface.get("differences"):
        problems.append(f"same version, different surface: {rel.dist} {rel.version} here is not the build recorded "
                        f"as {surface['nearest']} ({'; '.join(surface['differences'][:4])}); capability probes that "
                        f"read this build itself: {', '.join(surface['probes']) or '-'}; rows answered by version it "
                        f"touches: {', '.join(surface['rows']) or '-'}")
    env = environment_report()
    problems += [f"{v.name}={v.value!r}: {v.meaning} (accepted: {v.accepted})" for v in env if not v.valid]
    if abi is not None and abi["verdict"] not in ("ok", "loads (kernels not checked)"):
        problems.append(f"ABI check: {abi['verdict']}: {abi['detail']}")
    try:
        backend = _tooling.backend_name()
    except DgcompatError as exc:  # an unknown DGCOMPAT_BACKEND: listed under environment
        backend = f"unknown ({exc})"
    try:
        pin = suggest(rel)
    except PinRefused as exc:  # a refused build: no requirement, what to install instead
        pin = exc.lines
    except (UnsafeTextError, CertificateError) as exc:  # never a pin that would not read back as meant
        pin = ["# no pin: see problems"]
        problems.append(f"pin: {exc}")
    if surface and surface.get("differences"):
        pin = [line for line in pin if not line.startswith("# certificates:")]
        pin.append(f"# not certified: this build differs from the recorded {surface['nearest']} (see problems): the "
                   f"certificates of {rel.dist} {rel.version} do not cover it; run `dgcompat conform`")
    # A folder only the tools read (wheel cache, results) is listed as a problem; it does not stop the engine's stack.
    works = (rel.installed and rel.refusal is None and rel.torch_ok is not False
             and all(v.valid for v in env if v.read_by != "tools")
             and (abi is None or abi["verdict"] in ("ok", "loads (kernels not checked)")))
    return {
        "dgcompat": __version__,
        "backend": backend,
        "release": {
            "label": rel.label, "dist": rel.dist, "version": str(rel.version) if rel.version else None,
            "source": rel.source, "binding": rel.binding, "location": rel.location, "known": rel.known,
            "expected_torch": str(rel.expected_torch) if rel.expected_torch else None,
            "torch_ok": rel.torch_ok, "module": rel.module, "owner": rel.owner,
            "version_source": rel.version_source, "torch_rule": rel.torch_rule, "refusal": rel.refusal,
            "installed_as": rel.installed_as,
        },
        "surface": surface,
        "kernel_wheel": str(rel.kernel_wheel) if rel.kernel_wheel else None,
        "torch": torch_info,
        "abi": abi,
        "capabilities": caps_dict,
        "environment": [v._asdict() for v in env],
        "problems": problems,
        "pin": pin,
        "works": works,
    }


def _render(data: dict[str, Any]) -> str:
    r = data["release"]
    t = data["torch"]
    lines = [
        f"dgcompat {data['dgcompat']}  (backend: {data['backend']})",
        "",
        f"deep_gemm      {r['label']}" + ("" if r["known"] or r["source"] == "none" else "  [not a release dgcompat knows]"),
        f"  module       {r['module']}  (owner: {r['owner'] or '-'}; version from {r['version_source']})",
        f"  binding      {r['binding']}",
        f"  installed as {r.get('installed_as') or '-'}",
        *_surface_lines(data.get("surface")),
        f"  files        {r['location'] or '-'}",
        f"kernel wheel   {data['kernel_wheel'] or '-'}",
        f"torch          {t['version'] or 'not importable'}  (CUDA {t['cuda'] or '-'})",
        f"GPU            {t['gpu'] or 'none'}" + (f"  [{t['arch']}]" if t.get("arch") else ""),
        f"native needs   torch{r['expected_torch']} ({r['torch_rule']})" if r["expected_torch"] else "native needs   -",
    ]
    if r["refusal"]:
        lines.append(f"refused        {r['refusal']}")
    abi = data["abi"]
    lines.append(f"ABI check      {abi['verdict']}: {abi['detail']}" if abi else "ABI check      not run")
    lines += ["", "capabilities"]
    caps = data["capabilities"]
    for key, value in caps.items():
        if key in ("sources", "release"):
            continue
        lines.append(f"  {key:<30} {value!r}")
    lines += ["", "environment (read by)"]
    for v in data["environment"]:
        shown = "unset" if v["value"] is None else repr(v["value"])
        lines.append(f"  {v['name']:<30} {shown:<12} {'ok' if v['valid'] else 'INVALID'}: {v['meaning']}  "
                     f"({v['read_by']})")
    lines.append("")
    if data["problems"]:
        lines.append("problems")
        lines += [f"  - {p}" for p in data["problems"]]
        lines.append("")
    lines.append("suggested pin")
    lines += [f"  {p}" for p in data["pin"]]
    lines += ["", "verdict: " + ("this stack can work" if data["works"] else "this stack cannot work as installed")]
    return "\n".join(lines)


def _surface_lines(surface: dict[str, Any] | None) -> list[str]:
    if not surface:
        return []
    head = f"  surface      {surface.get('surface') or '-'}, fingerprint {surface.get('fingerprint') or '-'}"
    if surface.get("error"):
        return [head, f"               {surface['error']}"]
    if surface.get("build"):
        unread = f" ({', '.join(surface['not_read'])} not read here)" if surface.get("not_read") else ""
        return [head + f": the recorded build {surface['build']}{unread}"]
    if not surface.get("recorded"):
        return [head + " (no build of this version recorded)"]
    lines = [head + f": none of the recorded builds ({', '.join(surface['recorded'])}); nearest {surface.get('nearest')}"]
    lines += [f"               {d}" for d in surface.get("differences") or []]
    return lines


@returns_status
def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="dgcompat doctor", description=__doc__)
    parser.add_argument("--json", action="store_true", help="machine-readable output")
    parser.add_argument("--no-abi", action="store_true", help="skip the child-process ABI check")
    opts = parse(parser, argv)
    data = collect(run_abi=not opts.no_abi)
    print(json.dumps(data, indent=2, default=str) if opts.json else _render(data))
    return 0 if data["works"] else 1
