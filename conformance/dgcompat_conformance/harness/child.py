"""The per-release child process: ``python -m dgcompat_conformance.harness.child ...``.

It puts one deep_gemm build on ``sys.path`` (a work folder on the CPU tier, or the installed
one), installs the native stand-ins when there is no GPU, imports deep_gemm once, then runs the
conformance suite in-process with pytest and writes what happened as JSON (``--out``). Two
deep_gemm builds never share a process: the parent starts one child per release.

torch, the runtime and the stand-ins are imported only after the child has set the runtime's environment
(``DGCOMPAT_BACKEND``, ``DGCOMPAT_ARCH``, ``DGCOMPAT_ALLOW_TORCH_MISMATCH``) and put the release on ``sys.path``,
inside the functions that need them (``# noqa: PLC0415 (after the child's settings)``), where a failing import
is recorded in the result.

Exit status: 0 when the JSON was written (whatever the test outcomes), 3 when it could not be.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import pytest

from .._paths import wing_root
from .session import Session, set_current
from .xfails import load_xfails, match

__all__ = ["main", "SUITE_DIR"]

SUITE_DIR = Path(__file__).resolve().parent.parent / "suite"
RESULT_SCHEMA = "dgcompat-conformance-child/1"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m dgcompat_conformance.harness.child", description=__doc__)
    mode = p.add_mutually_exclusive_group(required=True)
    mode.add_argument("--workdir", type=Path, help="CPU tier: a work folder holding one release's deep_gemm")
    mode.add_argument("--installed", action="store_true", help="the deep_gemm installed in this environment")
    mode.add_argument("--reference", action="store_true", help="dgcompat's embedded reference backend")
    p.add_argument("--dist", default="")
    p.add_argument("--version", default="")
    p.add_argument("--release-id", default="")
    p.add_argument("--out", type=Path, required=True, help="where to write the JSON result")
    p.add_argument("--tests", type=Path, action="append", help="test files or folders (default: the suite)")
    p.add_argument("--subject", default=None, help="module the suite tests (default: dgcompat)")
    p.add_argument("--xfails", type=Path, default=None, help="folder of <release id>.txt files")
    p.add_argument("--no-xfails", action="store_true")
    p.add_argument("--arch", default="sm90", help="architecture the stand-ins emulate (sm90 or sm100)")
    p.add_argument("--ffi-returns", choices=("torch", "dlpack"), default="torch",
                   help="what tvm-ffi stand-ins return for tensors")
    p.add_argument("--force-standins", action="store_true", help="with --installed: use stand-ins even with a GPU")
    p.add_argument("--dropin", action="store_true",
                   help="install dgcompat as deep_gemm (dgcompat.install_as_deep_gemm) before deep_gemm is imported")
    p.add_argument("-k", dest="keyword", default=None, help="pytest -k expression")
    p.add_argument("--examples", type=int, default=None, help="hypothesis examples per property test")
    p.add_argument("--pytest-arg", action="append", default=[], help="extra pytest argument (repeatable)")
    return p


def _short(text: str, limit: int = 600) -> str:
    text = text.strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


class _Collector:
    """pytest plugin: applies the xfail file, watches stand-in hangs, records every outcome."""

    def __init__(self, entries: list[Any], session: Any) -> None:
        self.entries = entries
        self.used: set[int] = set()
        self.session = session
        self.order: list[str] = []
        self.tests: dict[str, dict[str, Any]] = {}
        self._hangs_before: dict[str, int] = {}

    # -- collection
    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        for item in items:
            for i, entry in enumerate(self.entries):
                if match(entry, item.nodeid):
                    item.add_marker(pytest.mark.xfail(reason=entry.reason, strict=True))
                    self.used.add(i)
                    break
            self.order.append(item.nodeid)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self._record(report.nodeid or "<collection>", "error", 0.0, _short(str(report.longrepr)))

    # -- hangs
    def pytest_runtest_setup(self, item: Any) -> None:
        self._hangs_before[item.nodeid] = self.session.hang_count() if self.session else 0

    def _hung(self, nodeid: str) -> bool:
        if self.session is None:
            return False
        return bool(self.session.hang_count() > self._hangs_before.get(nodeid, 0))

    # -- outcomes
    def _record(self, nodeid: str, outcome: str, duration: float, message: str) -> None:
        rec = self.tests.setdefault(nodeid, {"id": nodeid, "outcome": None, "duration": 0.0, "message": ""})
        rec["duration"] = round(rec["duration"] + duration, 4)
        if outcome:
            rec["outcome"] = outcome
        if message:
            rec["message"] = message
        if nodeid not in self.order:
            self.order.append(nodeid)

    @staticmethod
    def _message(report: Any) -> str:
        crash = getattr(getattr(report, "longrepr", None), "reprcrash", None)
        if crash is not None:
            return _short(crash.message)
        if isinstance(report.longrepr, tuple) and len(report.longrepr) == 3:
            return _short(str(report.longrepr[2]))
        return _short(str(report.longrepr or ""))

    def pytest_runtest_logreport(self, report: Any) -> None:
        nodeid, when = report.nodeid, report.when
        wasxfail = getattr(report, "wasxfail", None)
        current = self.tests.get(nodeid, {}).get("outcome")
        if when == "setup":
            if report.failed:
                self._record(nodeid, "error", report.duration, self._message(report))
            elif report.skipped:
                self._record(nodeid, "xfailed" if wasxfail is not None else "skipped", report.duration,
                             wasxfail or self._message(report))
            else:
                self._record(nodeid, "", report.duration, "")
        elif when == "call":
            if self._hung(nodeid):
                # A stand-in hang stands for a GPU that never returns: it fails the test even when an
                # adapter caught it or the test was expected to fail.
                self._record(nodeid, "failed", report.duration,
                             "StandInHang: the real kernel would have hung (schedule built for other lengths)")
            elif wasxfail is not None:
                self._record(nodeid, "xfailed" if report.skipped else "xpassed", report.duration, wasxfail)
            elif report.passed:
                self._record(nodeid, "passed", report.duration, "")
            elif report.failed:
                self._record(nodeid, "failed", report.duration, self._message(report))
            else:
                self._record(nodeid, "skipped", report.duration, self._message(report))
        elif report.failed and current in ("passed", "xfailed", "skipped", None):
            self._record(nodeid, "error", report.duration, "teardown: " + self._message(report))
        else:
            self._record(nodeid, "", report.duration, "")

    def results(self) -> list[dict[str, Any]]:
        out = []
        for nodeid in self.order:
            rec = self.tests.get(nodeid)
            if rec is None:
                continue
            if rec["outcome"] is None:
                rec["outcome"] = "error"
                rec["message"] = rec["message"] or "no outcome was reported"
            out.append(rec)
        return out

    def stale(self) -> list[dict[str, Any]]:
        return [{"nodeid": e.nodeid, "reason": e.reason, "line": e.line}
                for i, e in enumerate(self.entries) if i not in self.used]


def _environment(tier: str, arch: str | None) -> dict[str, Any]:
    import torch  # noqa: PLC0415 (after the child's settings)

    if tier == "gpu":
        device = torch.cuda.get_device_name()
    elif tier == "reference":
        device = "cpu (reference backend)"
    else:
        device = "cpu-tier"
    info: dict[str, Any] = {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": device,
        "arch": arch,
    }
    try:
        from dgcompat import __version__ as dg_version  # noqa: PLC0415 (after the child's settings)

        info["dgcompat_version"] = dg_version
    except ImportError:
        info["dgcompat_version"] = None
    return info


def _gpu_arch() -> str | None:
    try:
        from dgcompat.table import current_arch  # noqa: PLC0415 (after the child's settings)

        return current_arch()
    except Exception:  # noqa: BLE001 - no arch known: the child reports without one
        return None


def _installed_copy() -> tuple[str, Path]:
    """(import name, package folder) of the deep_gemm copy dgcompat's detection finds here; a vendored copy also
    selects its backend (``DGCOMPAT_BACKEND=vllm``) and is what the suite's ``raw`` fixture imports."""
    from dgcompat import detection  # noqa: PLC0415 (after the child's settings)

    detection.reset()
    rel = detection.release()
    if not rel.installed or rel.location is None:
        raise RuntimeError("no deep_gemm is installed: no top-level deep_gemm and no copy vendored in "
                           + " or ".join(dist for _v, dist, *_rest in detection.VENDORED))
    if rel.refusal is not None:
        raise RuntimeError(f"dgcompat refuses the installed deep_gemm: {rel.refusal}")
    backend = next((value for value, _dist, _top, _sub, module in detection.VENDORED if module == rel.module), None)
    if backend is not None:
        os.environ["DGCOMPAT_BACKEND"] = backend
    os.environ["DGCOMPAT_CONFORMANCE_MODULE"] = rel.module
    return rel.module, Path(rel.location)


def _dgcompat_view() -> dict[str, Any]:
    """What dgcompat detected (label, binding, capabilities), best effort."""
    view: dict[str, Any] = {}
    try:
        from dgcompat import detection  # noqa: PLC0415 (after the child's settings)

        detection.reset()
        rel = detection.release()
        view["release"] = rel.label
        view["distribution"] = rel.dist
        view["binding"] = rel.binding
        view["module"] = rel.module
        view["surface"] = rel.surface
        view["surface_note"] = rel.surface_note
        view["problems"] = list(rel.problems)
    except Exception as exc:  # noqa: BLE001 - the release failing to load is recorded
        view["release_error"] = f"{type(exc).__name__}: {exc}"
    return view


def _run_pytest(args: argparse.Namespace, collector: _Collector) -> int:
    paths = [Path(t).resolve() for t in (args.tests or [SUITE_DIR])]
    tests = [str(t) for t in paths]
    # Node ids are relative to the rootdir; pytest leaves the path out of the ids of files outside
    # it, so test files from elsewhere (harness development) move the rootdir up to their common folder.
    root = wing_root()
    if not all(p.is_relative_to(root) for p in paths):
        root = Path(os.path.commonpath([str(p if p.is_dir() else p.parent) for p in paths]))
    with tempfile.TemporaryDirectory(prefix="dgcompat-conform-") as tmp:
        ini = Path(tmp) / "pytest.ini"
        # A private configuration, so that the run does not depend on where the package lives.
        ini.write_text(
            "[pytest]\n"
            "xfail_strict = true\n"
            "markers =\n"
            "    property: large hypothesis property suites\n"
            "    wheels: needs the published wheels\n"
            "    slow: slower tests\n"
        )
        argv = [*tests, "-c", str(ini), "--rootdir", str(root), "-p", "no:cacheprovider",
                "--tb=short", "-rfE", "-o", "console_output_style=classic"]
        if args.keyword:
            argv += ["-k", args.keyword]
        argv += args.pytest_arg
        return int(pytest.main(argv, plugins=[collector]))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    t_start = time.perf_counter()
    result: dict[str, Any] = {
        "schema": RESULT_SCHEMA,
        "release_id": args.release_id or (f"{args.dist}-{args.version}" if args.dist else "installed"),
        "dist": args.dist or None,
        "version": args.version or None,
    }
    # Settings that must exist before dgcompat or the suite are imported.
    if args.subject:
        os.environ["DGCOMPAT_CONFORMANCE_SUBJECT"] = args.subject
    if args.examples is not None:
        os.environ["DGCOMPAT_CONFORMANCE_EXAMPLES"] = str(args.examples)

    installed = None
    tier = "cpu-tier"
    module_name = "deep_gemm"
    try:
        import torch  # noqa: PLC0415 (after the child's settings)

        from .standins import after_import, install  # noqa: PLC0415 (after the child's settings)

        if args.reference:
            tier = "reference"
            os.environ["DGCOMPAT_BACKEND"] = "reference"
        else:
            workdir = args.workdir
            on_path = True
            if args.installed:
                # The copy detection finds (a top-level deep_gemm, else an engine's vendored copy), imported under
                # its own name, as dgcompat imports it in an engine (asked before DGCOMPAT_BACKEND is set below).
                module_name, package = _installed_copy()
                if torch.cuda.is_available() and not args.force_standins:
                    tier = "gpu"
                elif module_name == "deep_gemm":
                    workdir = package.parent
                else:
                    workdir, on_path = package, False  # importable as it is; the stand-ins take its folder
            os.environ.setdefault("DGCOMPAT_BACKEND", "deep_gemm")
            if tier == "cpu-tier":
                assert workdir is not None
                workdir = workdir.resolve()
                if on_path:
                    sys.path.insert(0, str(workdir))
                # The stand-ins replace the native library, so the torch it was built for is moot.
                os.environ["DGCOMPAT_ALLOW_TORCH_MISMATCH"] = "1"
                # The parent removes the result's folder even when this process is killed.
                installed = install(workdir, dist=args.dist, version=args.version, arch=args.arch,
                                    ffi_returns=args.ffi_returns, scratch=args.out.resolve().parent)
                result["standins"] = {
                    "library": installed.library.name,
                    "binding": installed.profile.binding,
                    "flavor": installed.profile.flavor,
                    "native_ops": len(installed.ops),
                    "schedule_balance": installed.profile.schedule_balance,
                }
        if tier != "gpu":
            # Without a GPU, dgcompat plans for the architecture the stand-ins emulate.
            os.environ.setdefault("DGCOMPAT_ARCH", args.arch)
        torch.set_num_threads(max(1, int(os.environ.get("DGCOMPAT_CONFORMANCE_THREADS", "1"))))

        if args.dropin:
            import dgcompat  # noqa: PLC0415 (after the child's settings)

            dgcompat.install_as_deep_gemm()
        t_import = time.perf_counter()
        import_error = None
        module: Any = None
        if tier != "reference":
            try:
                module = importlib.import_module(module_name)
            except BaseException as exc:  # the import itself is under test; keep going to report it
                if isinstance(exc, KeyboardInterrupt):
                    raise
                import_error = f"{type(exc).__name__}: {exc}"
                result["import_traceback"] = traceback.format_exc()[-4000:]
        result["import"] = {"ok": import_error is None, "error": import_error,
                            "seconds": round(time.perf_counter() - t_import, 3)}
        if module is not None:
            result["deep_gemm_version_attr"] = str(getattr(module, "__version__", None))
        if installed is not None:
            if module is not None:
                after_import(installed, module)
            result["standins"]["native_loaded"] = installed.loaded
            result["standins"]["mapped_native_libraries"] = installed.native_libraries_mapped()
            result["standins"]["undefined_schemas"] = installed.undefined_schemas
        result["tier"] = tier
        result["environment"] = _environment(tier, args.arch if tier != "gpu" else _gpu_arch())
        result["dgcompat"] = _dgcompat_view()

        session = Session(tier, result["release_id"], installed, result)
        set_current(session)

        entries = [] if args.no_xfails else load_xfails(result["release_id"], args.xfails)
        collector = _Collector(entries, session)
        if import_error is None:
            result["pytest_exit"] = _run_pytest(args, collector)
        else:
            collector._record("<import deep_gemm>", "error", 0.0, import_error)
        result["tests"] = collector.results()
        result["stale_xfails"] = collector.stale() if import_error is None else []
        if installed is not None:
            result["standins"]["calls"] = dict(sorted(installed.state.calls.items()))
            result["standins"]["hangs"] = list(installed.state.hangs)
            result["standins"]["not_emulated"] = sorted(set(installed.state.not_emulated))
            result["standins"]["mapped_native_libraries"] = installed.native_libraries_mapped()
    except BaseException as exc:
        if isinstance(exc, KeyboardInterrupt):
            raise
        result["harness_error"] = f"{type(exc).__name__}: {exc}"
        result["harness_traceback"] = traceback.format_exc()[-4000:]
        result.setdefault("tests", [])
        result.setdefault("tier", tier)
    result["seconds"] = round(time.perf_counter() - t_start, 3)
    try:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        tmp = args.out.with_suffix(".tmp")
        tmp.write_text(json.dumps(result, indent=1, default=str))
        os.replace(tmp, args.out)
    except OSError as exc:
        print(f"cannot write {args.out}: {exc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
