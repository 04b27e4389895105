"""vLLM 0.34.0's and SGLang 0.5.23's DeepGEMM call sites over the families, and their call-site x family table.

The call sites are ``tests/engine_calls/fp8_fp4_call_sites.py`` (engine code copied from the wheels, values
checked against a plain-torch oracle, an explicit compute / refuse matrix). Each (family, architecture,
binding) runs in its own conformance-harness child: the reference backend, or the CPU tier over a published
wheel's real Python layer with the native library replaced by stand-ins that emulate ``--arch``; the engine
modules reach deep_gemm through the install (``--dropin``) or as ``import dgcompat as deep_gemm``.

``tests/test_engine_call_sites.py`` runs them as tests. As a script it prints the table for a closing note::

    python -m tests.call_sites                       # every family, sm90 and sm100, both bindings
    python -m tests.call_sites --families reference,0.2.5 --archs sm90 --bindings install --jobs 2
    python -m tests.call_sites --from-records h200-*.jsonl   # records of runs made elsewhere (a GPU)

On a GPU the call sites run under plain pytest, the install through the launcher, each writing its records::

    ENGINE_CALLS_RECORD=install.jsonl python -m dgcompat run -- python -m pytest tests/engine_calls/fp8_fp4_call_sites.py
    ENGINE_CALLS_RECORD=alias.jsonl python -m pytest tests/engine_calls/fp8_fp4_call_sites.py

Cells: ``OK`` (computed, values checked), ``refused [n]`` (a typed dgcompat refusal; footnote ``n`` is its
message), ``FAIL <how> [n]`` (an untyped error, a ``kernel error`` (dgcompat's KernelError: the build's host
code rejected what dgcompat let through), a wrong value, a hang, or a refusal / computation the matrix
forbids), ``not emulated [n]`` (the CPU tier's stand-ins cannot run that native path: nothing was checked), ``n/a``
(the engine never takes that path on that architecture), ``not run [n]`` (the family's wheel is not in the
cache, or its child failed). Where the two bindings disagree the cell shows both.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testsupport.record import header

ROOT = Path(__file__).resolve().parent.parent
CALL_SITES = ROOT / "tests" / "engine_calls" / "fp8_fp4_call_sites.py"

#: The families: the reference backend, sgl-deep-gemm 0.1.4 / 0.2.3.post2 (SGLang 0.5.23's pin) / 0.2.5, a
#: bundled copy, and the upstream 2.8.1 copies vendored by vLLM 0.33.0 and 0.34.0.
FAMILIES: tuple[str, ...] = ("reference", "0.1.4", "0.2.3.post2", "0.2.5", "sgl-kernel==0.3.21", "vllm-0.33.0",
                             "vllm-0.34.0")
ARCHS: tuple[str, ...] = ("sm90", "sm100")
BINDINGS: tuple[str, ...] = ("install", "alias")

__all__ = ["FAMILIES", "ARCHS", "BINDINGS", "Run", "prepare", "run", "runs_from_records", "table", "main"]


@dataclass
class Run:
    """One harness child: what it ran on, its JSON result and the call-site records it wrote."""

    family: str
    arch: str
    binding: str
    result: dict[str, Any] | None = None
    records: list[dict[str, Any]] = field(default_factory=list)
    not_run: str | None = None  # why the child did not run (no wheel, harness error)

    @property
    def column(self) -> str:
        return f"{self.family}@{self.arch}"

    def outcomes(self) -> dict[str, tuple[str, str]]:
        """test name -> (pytest outcome, message)."""
        if self.result is None:
            return {}
        return {t["id"].rsplit("::", 1)[-1]: (t["outcome"], t["message"]) for t in self.result.get("tests", [])}


def prepare(family: str) -> list[str] | str:
    """The harness child's mode arguments for ``family``, or why it cannot run here (no cached wheel)."""
    if family == "reference":
        return ["--reference"]
    from dgcompat_conformance.releases import parse_release
    from dgcompat_conformance.wheels import find_cached_wheel, prepare_workdir

    spec = parse_release(family)
    wheel = find_cached_wheel(spec)
    if wheel is None:
        where = "$DGCOMPAT_CACHE/wheels" + (f" or $DGCOMPAT_CACHE/{spec.dist}" if spec.vendored else "")
        return f"the {spec.id} wheel is not in the wheel cache ({where})"
    work = prepare_workdir(spec, wheel)
    return ["--workdir", str(work), "--dist", spec.dist, "--version", spec.version, "--release-id", spec.id]


def run(family: str, arch: str, binding: str, *, timeout: float = 900.0, keyword: str | None = None) -> Run:
    """Run the call sites on one family / architecture / binding in a fresh harness child."""
    from dgcompat_conformance.harness.runner import child_env

    out = Run(family, arch, binding)
    mode = prepare(family)
    if isinstance(mode, str):
        out.not_run = mode
        return out
    with tempfile.TemporaryDirectory(prefix="dgcompat-call-sites-") as tmp:
        result_path, record_path = Path(tmp) / "result.json", Path(tmp) / "records.jsonl"
        cmd = [sys.executable, "-m", "dgcompat_conformance.harness.child", *mode, "--arch", arch, "--tests",
               str(CALL_SITES), "--no-xfails", "--out", str(result_path)]
        if binding == "install":
            cmd.append("--dropin")
        if keyword:
            cmd += ["-k", keyword]
        env = child_env()
        env["ENGINE_CALLS_RECORD"] = str(record_path)
        env.pop("ENGINE_CALLS_BINDING", None)
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout, cwd=ROOT, check=False)
        if proc.returncode != 0 or not result_path.is_file():
            out.not_run = f"harness child exit {proc.returncode}: {(proc.stdout + proc.stderr)[-600:]}"
            return out
        out.result = json.loads(result_path.read_text())
        if "harness_error" in out.result:
            out.not_run = f"harness error: {out.result['harness_error']}"
        if record_path.is_file():
            out.records = [json.loads(line) for line in record_path.read_text().splitlines() if line.strip()]
    return out


def _cell(record: dict[str, Any], note: Any) -> str:
    outcome, verdict = record["outcome"], record["verdict"]
    if outcome == "n/a":
        return "n/a"
    label = {"ok": "OK", "refused": "refused", "not-emulated": "not emulated", "wrong": "wrong value",
             "kernel-error": "kernel error", "error": "error", "hang": "hang"}.get(outcome, outcome)
    if verdict == "fail":
        label = f"FAIL {label}" if outcome != "ok" else "FAIL computed, must be refused"
    return label if not record["message"] else f"{label} [{note(record['message'])}]"


def table(runs: list[Run]) -> str:
    """The call-site x family markdown table, with one footnote per distinct message."""
    notes: dict[str, int] = {}

    def note(message: str) -> int:
        text = " ".join(message.split())
        return notes.setdefault(text, len(notes) + 1)

    columns: list[str] = []
    for r in runs:
        if r.column not in columns:
            columns.append(r.column)
    sites: list[str] = []
    cells: dict[tuple[str, str], dict[str, str]] = {}
    not_run: dict[str, dict[str, str]] = {}
    for r in runs:
        if r.not_run is not None:
            not_run.setdefault(r.column, {})[r.binding] = f"not run [{note(r.not_run)}]"
            continue
        for rec in r.records:
            if rec["site"] not in sites:
                sites.append(rec["site"])
            cells.setdefault((rec["site"], r.column), {})[r.binding] = _cell(rec, note)
    lines = ["| call site | " + " | ".join(columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for site in sites:
        row = []
        for col in columns:
            by_binding = cells.get((site, col)) or not_run.get(col) or {}
            values = set(by_binding.values())
            if not values:
                row.append("-")
            elif len(values) == 1:
                row.append(values.pop())
            else:
                row.append("; ".join(f"{b}: {v}" for b, v in sorted(by_binding.items())))
        lines.append(f"| {site} | " + " | ".join(row) + " |")
    lines.append("")
    for text, n in notes.items():
        lines.append(f"[{n}] {text[:300]}")
    return "\n".join(lines)


def runs_from_records(paths: list[Path]) -> list[Run]:
    """:class:`Run` objects grouping the records of ``ENGINE_CALLS_RECORD`` files by family, arch and binding."""
    runs: dict[tuple[str, str, str], Run] = {}
    for path in paths:
        for line in path.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                key = (rec["family"], rec["arch"], rec["binding"])
                runs.setdefault(key, Run(*key)).records.append(rec)
    return list(runs.values())


def _csv(choices: tuple[str, ...], what: str) -> Any:
    def parse(text: str) -> list[str]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        bad = [t for t in items if t not in choices]
        if not items or bad:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list of {what} among {', '.join(choices)}, "
                                             f"got {text!r}")
        return items
    return parse


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tests.call_sites", description=__doc__.split("\n\n")[0])
    p.add_argument("--families", type=_csv(FAMILIES, "families"), default=list(FAMILIES))
    p.add_argument("--archs", type=_csv(ARCHS, "architectures"), default=list(ARCHS))
    p.add_argument("--bindings", type=_csv(BINDINGS, "bindings"), default=list(BINDINGS))
    p.add_argument("--jobs", type=int, default=2, help="children at a time (default 2)")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression selecting call sites")
    p.add_argument("--json", type=Path, default=None, help="also write every record here (JSON)")
    p.add_argument("--from-records", type=Path, nargs="+", default=None, metavar="JSONL",
                   help="render the table from ENGINE_CALLS_RECORD files instead of running children")
    args = p.parse_args(argv)
    if args.jobs < 1:
        p.error(f"argument --jobs: expected a positive integer, got {args.jobs}")
    if args.from_records is not None:
        missing = [str(f) for f in args.from_records if not f.is_file()]
        if missing:
            p.error(f"argument --from-records: expected existing record files, got {', '.join(missing)} (missing)")
        print(header())
        print(table(runs_from_records(args.from_records)))
        return 0
    combos = [(f, a, b) for f in args.families for a in args.archs for b in args.bindings]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        runs = list(pool.map(lambda c: run(*c, keyword=args.keyword), combos))
    print(header())
    print(table(runs))
    if args.json is not None:
        args.json.write_text(json.dumps([{"family": r.family, "arch": r.arch, "binding": r.binding,
                                          "not_run": r.not_run, "records": r.records} for r in runs], indent=1))
    return 0


if __name__ == "__main__":
    sys.path[:0] = [str(ROOT), str(ROOT / "conformance")]
    sys.exit(main())
