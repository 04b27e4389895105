"""DeepGEMM's own test files, run function by function, raw and with deep_gemm routed through dgcompat.

Given a folder of DeepGEMM test files (``test_*.py`` plus the helpers they import, e.g.
``generators.py``, as in sgl-project/DeepGEMM's ``sgl_deep_gemm/tests``) and a deep_gemm wheel,
every top-level ``test_*`` function of every file runs twice, each time in its own interpreter
under a watchdog:

* ``raw``: the wheel's folder first on ``PYTHONPATH``; ``import deep_gemm`` is the wheel itself;
* ``dgcompat``: the same, started the way an operator starts an engine, with the environment of
  ``python -m dgcompat run`` (the start-up hook installs dgcompat as deep_gemm in the
  interpreter), so every ``deep_gemm`` import in the test file resolves through dgcompat.

The child seeds ``torch`` and ``random`` as the file's ``__main__`` block does, imports the test
module from the folder (its own imports run there, e.g. ``from deep_gemm.testing import ...``),
calls the function, and reports the outcome, the exception and what ``deep_gemm`` was in that
process (the facade in the ``dgcompat`` run, the wheel's module in the raw run; a run that is not
routed as intended is an ``error``). The per-function table is printed, and written as JSON
with ``--out``.

Usage (a GPU machine; the test files are not part of dgcompat and are passed in)::

    python -m dgcompat_conformance.gpu.upstream_tests --tests DIR --wheels WHEEL_DIR --release 0.1.4
    python -m dgcompat_conformance.gpu.upstream_tests --tests DIR --site SITE_DIR     # already installed
    python -m dgcompat_conformance.gpu.upstream_tests --table-from a.json b.json     # merge per-file runs

Outcomes: ``pass``; ``fail`` (the function raised); ``error`` (the module did not import, the
child crashed or was not routed as intended); ``timeout`` (killed at ``--timeout`` seconds).
Exit status 0 when every function that passes raw also passes through dgcompat.
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dgcompat._tooling import launch_env

from .._args import (
    output_file,
    output_folder,
    parse,
    positive_int,
    positive_seconds,
    readable_file,
    readable_folder,
    release_version,
    returns_status,
    usage_error,
)
from ..report import UpstreamRow, upstream_table
from ..wheelcache import CacheError
from .abi import kill_group
from .install import find_wheel, install_release, release_env, tvm_ffi_pin

__all__ = ["TestFunction", "discover", "run_function", "main", "DEFAULT_FILES", "MODES"]

#: the single-GPU files sgl-project/DeepGEMM's wheel gate (``sgl_deep_gemm/run_tests.sh``) runs.
DEFAULT_FILES = ("test_bf16.py", "test_einsum.py", "test_fp8_fp4.py", "test_hyperconnection.py", "test_layout.py",
                 "test_attention.py")
MODES = ("raw", "dgcompat")
MARKER = "DGCOMPAT-UPSTREAM-RESULT "

# The child: seed as the file's __main__ does, import the module, call one function, report.
_CHILD = r"""
import importlib, json, os, random, sys, time, traceback
folder, module, function, seed, mode = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
sys.path.insert(0, folder)
os.chdir(folder)
rec = {"module": module, "function": function, "mode": mode}
t0 = time.perf_counter()
try:
    import torch
    torch.manual_seed(seed)
    random.seed(seed)
    mod = importlib.import_module(module)
except BaseException as exc:
    rec.update(outcome="error", error=f"import {module}: {type(exc).__name__}: {exc}",
               traceback=traceback.format_exc()[-3000:])
else:
    try:
        getattr(mod, function)()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        rec["outcome"] = "pass"
    except BaseException as exc:
        rec.update(outcome="fail", error=f"{type(exc).__name__}: {exc}", traceback=traceback.format_exc()[-3000:])
dg = sys.modules.get("deep_gemm")
rec["deep_gemm"] = None if dg is None else type(dg).__module__ + "." + type(dg).__qualname__
real = getattr(dg, "__file__", None) if dg is not None else None
rec["deep_gemm_file"] = real
rec["seconds"] = round(time.perf_counter() - t0, 3)
sys.stdout.flush()
print("\n" + __MARKER__ + json.dumps(rec), flush=True)
""".replace("__MARKER__", repr(MARKER))


@dataclass(frozen=True)
class TestFunction:
    """One top-level ``test_*`` function of a test file, and the seed its ``__main__`` block uses."""

    file: str
    function: str
    seed: int

    @property
    def module(self) -> str:
        return Path(self.file).stem

    @property
    def id(self) -> str:
        return f"{self.file}::{self.function}"


def _main_seed(tree: ast.Module) -> int:
    """The ``torch.manual_seed(N)`` argument in ``if __name__ == '__main__':`` (0 if absent)."""
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            for sub in ast.walk(node):
                if (isinstance(sub, ast.Call) and ast.unparse(sub.func).endswith("manual_seed") and sub.args
                        and isinstance(sub.args[0], ast.Constant) and isinstance(sub.args[0].value, int)):
                    return int(sub.args[0].value)
    return 0


def discover(folder: Path, files: Sequence[str]) -> list[TestFunction]:
    """Every top-level ``def test_*`` of ``files`` in ``folder`` (missing files are skipped), in file order."""
    found: list[TestFunction] = []
    for name in files:
        path = folder / name
        if not path.is_file():
            continue
        tree = ast.parse(path.read_text(), filename=str(path))
        seed = _main_seed(tree)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                found.append(TestFunction(name, node.name, seed))
    return found


@dataclass
class Result:
    outcome: str
    seconds: float
    error: str = ""
    deep_gemm: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)


def mode_env(mode: str, site: Path, jit_dir: Path) -> dict[str, str]:
    """The child environment of ``mode``: the wheel's folder first; for ``dgcompat`` the launcher's variables too."""

    env = release_env(site, jit_dir)
    if mode == "dgcompat":
        env = launch_env(env)
    return env


def _routed(mode: str, rec: dict[str, Any], site: Path) -> str | None:
    """Why the child was not routed as ``mode`` intends (None when it was)."""
    kind = rec.get("deep_gemm")
    if kind is None:
        return "deep_gemm was never imported"
    facade = kind == "dgcompat._install._Facade"
    if mode == "dgcompat" and not facade:
        return f"deep_gemm was {kind}, not dgcompat's facade"
    if mode == "raw" and facade:
        return "deep_gemm was dgcompat's facade in the raw run"
    where = rec.get("deep_gemm_file") or ""
    if not str(Path(where).resolve()).startswith(str(site.resolve())):
        return f"deep_gemm came from {where}, not from {site}"
    return None


def run_function(test: TestFunction, folder: Path, mode: str, env: dict[str, str], timeout: float,
                 site: Path) -> Result:
    """Run ``test`` in a fresh interpreter under a watchdog (its process group is killed at ``timeout``)."""

    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-c", _CHILD, str(folder), test.module, test.function, str(test.seed),
                             mode], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            cwd=str(folder), start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return Result("timeout", round(time.perf_counter() - t0, 1), f"killed after {timeout:.0f} s")
    wall = round(time.perf_counter() - t0, 1)
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        tail = " | ".join([ln for ln in (stderr or stdout).strip().splitlines() if ln.strip()][-4:])
        return Result("error", wall, f"exit status {proc.returncode} without a result: {tail}"[:600])
    rec: dict[str, Any] = json.loads(line[len(MARKER):])
    outcome = str(rec["outcome"])
    error = str(rec.get("error", ""))
    why = _routed(mode, rec, site)
    if why is not None:
        outcome, error = "error", f"{why}; {error}".strip("; ")
    if outcome == "pass" and "Traceback (most recent call last)" in stderr:
        outcome, error = "fail", "a child process raised (traceback on stderr)"  # fork-based tests
    rec["stderr_tail"] = stderr[-2000:]
    return Result(outcome, wall, error[:600], rec.get("deep_gemm"), rec)


def install_wheel(release: str, wheel_dirs: Sequence[Path], work: Path) -> Path:
    """Install ``sgl-deep-gemm==release`` (and its pinned apache-tvm-ffi) into ``work/site`` with pip --target."""

    wheel = find_wheel(wheel_dirs, "sgl-deep-gemm", release)
    if wheel is None:
        raise SystemExit(f"no sgl-deep-gemm {release} wheel under {', '.join(map(str, wheel_dirs))}")
    extra = []
    pin = tvm_ffi_pin(wheel)
    if pin is not None:
        tvm = find_wheel(wheel_dirs, "apache-tvm-ffi", pin)
        if tvm is None:
            raise SystemExit(f"{wheel.name} needs apache-tvm-ffi=={pin}; no such wheel under the wheel folders")
        extra.append(tvm)
    site = work / "site"
    install_release(wheel, extra, site)
    return site


def render(rows: list[tuple[TestFunction, dict[str, Result]]]) -> str:
    """The per-function table (Markdown)."""
    table = []
    for test, res in rows:
        raw, dg = res.get("raw"), res.get("dgcompat")
        note = ""
        if dg is not None and dg.outcome != "pass" and dg.error:
            note = dg.error
        elif raw is not None and raw.outcome != "pass" and raw.error:
            note = "raw: " + raw.error
        table.append(UpstreamRow(test.id, raw.outcome if raw else "-", dg.outcome if dg else "-", note))
    return upstream_table(table)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dgcompat_conformance.gpu.upstream_tests", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tests", type=readable_folder, help="folder holding the DeepGEMM test files")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--site", type=readable_folder, help="a folder the wheel is already installed in (pip --target)")
    where.add_argument("--wheels", type=readable_folder, action="append",
                       help="folder(s) holding the wheels (with --release)")
    p.add_argument("--release", default="0.1.4", type=release_version,
                   help="the sgl-deep-gemm release to install from --wheels")
    p.add_argument("--files", nargs="*", default=None,
                   help=f"test files to run (default: {' '.join(DEFAULT_FILES)}, those the folder has)")
    p.add_argument("-k", dest="only", default="", help="run only functions whose id contains this text")
    p.add_argument("--modes", nargs="*", default=list(MODES), choices=MODES)
    p.add_argument("--timeout", type=positive_seconds, default=1200.0, help="seconds per function and mode")
    p.add_argument("--jobs", type=positive_int, default=1, help="test functions run at the same time (one GPU is shared)")
    p.add_argument("--work", type=output_folder, default=None, help="install and JIT-cache folder (default: a temp folder)")
    p.add_argument("--out", type=output_file, default=None, help="write the results as JSON here")
    p.add_argument("--list", action="store_true", help="list the functions and exit")
    p.add_argument("--table-from", type=readable_file, nargs="+", default=None, metavar="JSON",
                   help="print one table from the --out files of earlier (e.g. per-file) runs and exit")
    return p


def _load_rows(paths: Sequence[Path]) -> list[tuple[TestFunction, dict[str, Result]]]:
    """The rows of earlier runs' ``--out`` files; ValueError names a file that is not one."""
    rows = []
    for path in paths:
        try:
            for rec in json.loads(path.read_text())["results"]:
                file, function = rec["id"].split("::", 1)
                res = {m: Result(**rec[m]) for m in MODES if m in rec}
                rows.append((TestFunction(file, function, int(rec.get("seed", 0))), res))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path} is not the --out file of a run ({type(exc).__name__}: {exc})") from None
    return rows


def _summary(rows: list[tuple[TestFunction, dict[str, Result]]], modes: Sequence[str]) -> tuple[list[str], str]:
    regressions = [t.id for t, r in rows
                   if r.get("raw") is not None and r["raw"].outcome == "pass"
                   and r.get("dgcompat") is not None and r["dgcompat"].outcome != "pass"]
    counts = {m: sum(1 for _, r in rows if m in r and r[m].outcome == "pass") for m in modes}
    return regressions, (f"{len(rows)} functions; passed: {counts}; raw passes that fail through dgcompat: "
                         f"{len(regressions)} {regressions}")


@returns_status
def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    opts = parse(parser, argv)
    if opts.table_from:
        try:
            merged = _load_rows(opts.table_from)
        except ValueError as exc:
            return usage_error(parser, f"argument --table-from: {exc}")
        print(render(merged))
        regressions, line = _summary(merged, MODES)
        print("\n" + line)
        return 1 if regressions else 0
    if opts.tests is None or (opts.site is None and not opts.wheels):
        return usage_error(parser, "give --tests DIR and --site DIR or --wheels DIR (or --table-from JSON...)")
    folder = opts.tests.resolve()
    if opts.files is None:
        opts.files = list(DEFAULT_FILES)
    else:
        absent = [f for f in opts.files if not (folder / f).is_file()]
        if absent:
            return usage_error(parser, f"argument --files: expected test files in {folder}, got "
                                       f"{', '.join(map(repr, absent))} (not there)")
    tests = [t for t in discover(folder, opts.files) if opts.only in t.id]
    if opts.list:
        for t in tests:
            print(f"{t.id}  (seed {t.seed})")
        return 0
    if not tests:
        return usage_error(parser, f"argument --tests: no test functions in {folder} ({', '.join(opts.files)})")
    if opts.site is None:
        try:
            wheel = find_wheel(opts.wheels, "sgl-deep-gemm", opts.release)
        except CacheError as exc:
            return usage_error(parser, f"argument --wheels: {exc}")
        if wheel is None:
            return usage_error(parser, f"argument --release: no sgl-deep-gemm {opts.release} wheel under --wheels "
                                       f"{', '.join(map(str, opts.wheels))}")
    work = opts.work or Path(tempfile.mkdtemp(prefix="dgcompat-upstream-"))
    site = opts.site.resolve() if opts.site else install_wheel(opts.release, opts.wheels, work)
    # One JIT cache for both modes: the same build compiles the same kernels, so the second run reuses them.
    envs = {mode: mode_env(mode, site, work / "jit-cache") for mode in opts.modes}

    done: dict[str, dict[str, Result]] = {}
    lock = threading.Lock()

    def write(final: bool) -> None:
        if opts.out is None:
            return
        rows = [(t, done[t.id]) for t in tests if t.id in done]
        regressions, _ = _summary(rows, opts.modes)
        counts = {m: sum(1 for _, r in rows if m in r and r[m].outcome == "pass") for m in opts.modes}
        opts.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = opts.out.with_suffix(".tmp")
        tmp.write_text(json.dumps({
            "tests_folder": str(folder), "site": str(site), "release": None if opts.site else opts.release,
            "complete": final, "functions": len(tests),
            "results": [{"id": t.id, "seed": t.seed, **{m: asdict(r) for m, r in res.items()}} for t, res in rows],
            "passed": counts, "regressions": regressions}, indent=1, default=str))
        os.replace(tmp, opts.out)

    def both(test: TestFunction) -> dict[str, Result]:
        # raw first, then dgcompat: the second run finds the kernels the first compiled.
        res: dict[str, Result] = {}
        for mode in opts.modes:
            r = run_function(test, folder, mode, envs[mode], opts.timeout, site)
            res[mode] = r
            print(f"{test.id:<60} {mode:<9} {r.outcome:<8} {r.seconds:7.1f}s  {r.error[:160]}", flush=True)
        with lock:  # written after every function, so a run cut short still leaves its results
            done[test.id] = res
            write(False)
        return res

    # Functions may run side by side (--jobs): the kernels' JIT compilation is CPU-bound, and
    # deep_gemm's cache publishes each kernel with an atomic rename.
    with ThreadPoolExecutor(max_workers=max(1, opts.jobs)) as pool:
        rows = list(zip(tests, pool.map(both, tests), strict=True))
    write(True)
    print()
    print(render(rows))
    regressions, line = _summary(rows, opts.modes)
    print("\n" + line)
    return 1 if regressions else 0


if __name__ == "__main__":
    sys.exit(main())
