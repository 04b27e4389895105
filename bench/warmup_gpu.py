"""``python -m bench.warmup_gpu``: the warmup measurements of ``bench/warmup_gpu.sh``, one step after another.

Each step is a fresh process with a hard time limit (all of them within ``--deadline`` seconds); its
output goes to ``<out>/warmup-log.txt``, its parsed result to ``<out>/warmup-results.json``, and a
summary table (also printed) to ``<out>/warmup-summary.txt``. The steps:

1. ``dense-4096``: ``dgcompat warmup --preset deepseek-v3-dense --max-tokens 4096`` on an empty folder (the
   six dense FP8 GEMMs at every M up to 4096, every scale form: the 15 s goal), then serving processes
   with ``DG_JIT_CACHE_DIR`` that folder and nothing else: the 55 M values with row-major scales (the
   real deep_gemm), every scale form and the layout helpers (the real deep_gemm, then ``import deep_gemm``
   under ``python -m dgcompat run``), and the same with no ``DG_JIT_CACHE_DIR`` at all, the folder being
   ``~/.deep_gemm`` of a ``HOME`` that points there; then the same warmup again (a warm start: 1 s goal; the
   record it returns needs ``nvidia-smi``, so on the CPU it checks every call again) and
   ``--print-cache-dir`` with ``DG_JIT_CACHE_DIR`` set to that folder (idempotent);
2. ``dense-default``: ``dgcompat warmup --preset deepseek-v3-dense`` (SGLang's bound, every M up to 16384),
   then serving at sampled M up to 16384;
3. ``layers-8192``: ``dgcompat warmup --preset deepseek-v3.2 --max-tokens 8192 --check`` (the whole layer set:
   the 60 s goal, and the check), then a serving process making the layer set's calls (every paged batch
   up to 1024, both next_n).

Every serving row must compile nothing. ``--fake`` runs the same steps against the CPU fake JIT of the
tests with small bounds (it checks the orchestration; it measures nothing). ``install`` (a sub-command)
installs the sgl-deep-gemm wheel and the apache-tvm-ffi wheel its metadata pins into a folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
SUMMARY = "warmup-summary.txt"
RESULTS = "warmup-results.json"
LOG = "warmup-log.txt"


@dataclass
class Step:
    """One process of the run: its command, extra environment, time limit and what it must show."""

    name: str
    what: str
    cmd: list[str]
    limit: float
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    kind: str = "warmup"  # warmup | serve | check | text
    goal_s: float | None = None
    expect: dict[str, Any] = field(default_factory=dict)


def _dgcompat(*args: str) -> list[str]:
    return [sys.executable, "-m", "dgcompat", "warmup", *args]


def _serve(*args: str, via_run: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "bench.warmup_serve", *args]
    return [sys.executable, "-m", "dgcompat", "run", "--", *cmd] if via_run else cmd


def steps(work: Path, *, fake: bool) -> list[Step]:
    """The run's steps (small bounds with ``fake``)."""
    dense_m, default_m, layers_m, batch = (256, 512, 256, 64) if fake else (4096, 16384, 8192, 1024)
    c1, c2, c3, home = work / "dense", work / "default", work / "layers", work / "home"
    dense55 = ["--set", "dense", "--max-tokens", str(dense_m), "--sample", "55"] if fake else ["--set", "dense55"]
    quiet = ["--no-progress", "--json"]
    return [
        Step("dense-4096", f"warmup: 6 dense FP8 GEMMs, every M <= {dense_m}, cold",
             _dgcompat("--preset", "deepseek-v3-dense", "--max-tokens", str(dense_m), "--cache-dir", str(c1), *quiet),
             150, goal_s=None if fake else 15.0),
        Step("serve-row", "serve: 55 M values, row-major fp32 scales, real deep_gemm",
             _serve(*dense55, "--forms", "row"), 120, {"DG_JIT_CACHE_DIR": str(c1)}, kind="serve"),
        Step("serve-forms", "serve: 55 M values, row + MN-major TMA + helpers, real deep_gemm",
             _serve(*dense55, "--forms", "row,tma,helpers"), 120, {"DG_JIT_CACHE_DIR": str(c1)}, kind="serve"),
        Step("serve-run", "serve: the same, import deep_gemm under python -m dgcompat run",
             _serve(*dense55, "--forms", "row,tma,helpers", via_run=True), 120, {"DG_JIT_CACHE_DIR": str(c1)},
             kind="serve"),
        Step("serve-home", "serve: the same, no DG_JIT_CACHE_DIR (HOME/.deep_gemm is the warmed folder)",
             _serve(*dense55, "--forms", "row,tma,helpers"), 120, {"HOME": str(home)}, ("DG_JIT_CACHE_DIR",),
             kind="serve"),
        Step("dense-warm", "warmup: the same again (warm start)",
             _dgcompat("--preset", "deepseek-v3-dense", "--max-tokens", str(dense_m), "--cache-dir", str(c1), *quiet),
             60, goal_s=None if fake else 1.0, expect={} if fake else {"method": "record"}),
        Step("print-cache-dir", "--print-cache-dir with DG_JIT_CACHE_DIR set to what it printed",
             _dgcompat("--print-cache-dir"), 30, {"DG_JIT_CACHE_DIR": str(c1)}, kind="text",
             expect={"stdout": str(c1)}),
        Step("dense-default", f"warmup: 6 dense FP8 GEMMs, every M <= {default_m} (SGLang's bound), cold",
             _dgcompat("--preset", "deepseek-v3-dense", *(["--max-tokens", str(default_m)] if fake else []),
                       "--cache-dir", str(c2), *quiet), 240),
        Step("serve-default", f"serve: 6 dense GEMMs at 64 M values <= {default_m}, row + TMA + helpers",
             _serve("--set", "dense", "--max-tokens", str(default_m), "--sample", "64", "--forms", "row,tma,helpers"),
             120, {"DG_JIT_CACHE_DIR": str(c2)}, kind="serve"),
        Step("layers-8192", f"warmup + --check: DeepSeek-V3.2 layer set, every M <= {layers_m}, cold",
             _dgcompat("--preset", "deepseek-v3.2", "--max-tokens", str(layers_m), "--max-batch", str(batch),
                       "--cache-dir", str(c3), "--check", *quiet), 300, kind="check", goal_s=None if fake else 60.0),
        Step("serve-layers", f"serve: the layer set (dense, MoE, every paged batch <= {batch}, ragged)",
             _serve("--set", "layers", "--max-tokens", str(layers_m), "--max-batch", str(batch), "--sample", "24",
                    "--forms", "row,tma,helpers"), 150, {"DG_JIT_CACHE_DIR": str(c3)}, kind="serve"),
    ]


def _parse(kind: str, stdout: str) -> Any:
    if kind == "text":
        return stdout.strip()
    if kind == "serve":
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        return json.loads(lines[-1][len("RESULT "):]) if lines else None
    start = stdout.find("{")
    return json.loads(stdout[start:]) if start >= 0 else None


def verdict(step: Step, rc: int | None, wall: float, got: Any) -> tuple[bool, str]:
    """(passed, what it showed) for one step."""
    if rc != 0 and not (step.kind == "check" and rc == 1 and got):
        return False, f"exit {rc}" + (" (time limit)" if rc is None else "")
    if got is None:
        return False, "no result"
    if step.kind == "text":
        return got == step.expect["stdout"], f"printed {got}"
    if step.kind == "serve":
        ok = got["compiled"] == 0 and got["new_files"] == 0
        return ok, (f"{got['calls']} calls, {got['compiled']} kernels compiled at serve time, {got['new_files']} new "
                    f"files ({got['calls_s']:.1f} s of calls)" + (f"; first: {got['misses'][:3]}" if not ok else ""))
    report = got["warmup"] if step.kind == "check" else got
    text = (f"{report['method']}: {report['calls']} calls, {report.get('identified', 0)} identified, "
            f"{report['kernels']} kernels ({report['compiled']} compiled), {report['wall_s']:.1f} s "
            f"(workers up {report.get('first_up_s', 0):.1f}-{report.get('start_s', 0):.1f} s, identified "
            f"{report.get('identify_s', 0):.1f} s, compiled {report.get('compile_s', 0):.1f} s)")
    ok = all(report.get(k) == v for k, v in step.expect.items())
    if step.goal_s is not None:
        met = report["wall_s"] <= step.goal_s
        text += f"; goal <= {step.goal_s:g} s: {'met' if met else 'MISSED'}"
    if step.kind == "check":
        c = got["check"]
        ok = ok and c["compiled"] == 0 and not c["errors"]
        text += f"; check: {c['calls']} sampled calls compiled {c['compiled']}" + (
            f" ({[m['call'] for m in c['misses']][:3]})" if c["compiled"] else "") + (
            f", errors {c['errors'][:2]}" if c["errors"] else "")
    return ok, text


def run(out: Path, work: Path, deadline: float, *, fake: bool, env: dict[str, str]) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    (work / "home").mkdir(parents=True, exist_ok=True)
    link = work / "home" / ".deep_gemm"
    if not link.exists():
        link.symlink_to(work / "dense", target_is_directory=True)
    t_end = time.monotonic() + deadline
    rows: list[dict[str, Any]] = []
    with open(out / LOG, "a") as log:
        for step in steps(work, fake=fake):
            left = t_end - time.monotonic()
            if left < 10:
                rows.append({"step": step.name, "what": step.what, "ok": False, "text": "not run: out of time"})
                continue
            full = {k: v for k, v in env.items() if k not in step.unset}
            full.update(step.env)
            limit = min(step.limit, left - 5)
            log.write(f"\n==== {step.name}: {step.what}\n$ {' '.join(step.cmd)}\n")
            log.flush()
            t0 = time.perf_counter()
            try:
                done = subprocess.run(step.cmd, capture_output=True, text=True, env=full, cwd=str(REPO), timeout=limit)
                rc: int | None = done.returncode
                stdout, stderr = done.stdout, done.stderr
            except subprocess.TimeoutExpired as exc:
                rc = None
                stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
                stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
            wall = time.perf_counter() - t0
            log.write(stdout[-20000:] + ("\n---- stderr\n" + stderr[-20000:] if stderr.strip() else "") +
                      f"\n---- exit {rc} after {wall:.1f} s\n")
            log.flush()
            try:
                got = _parse(step.kind, stdout)
            except (ValueError, KeyError):
                got = None
            try:
                ok, text = verdict(step, rc, wall, got)
            except (KeyError, TypeError) as exc:
                ok, text = False, f"unexpected result ({type(exc).__name__}: {exc})"
            rows.append({"step": step.name, "what": step.what, "ok": ok, "text": text, "wall_s": round(wall, 2),
                         "exit": rc, "result": got})
            print(f"[warmup-gpu] {step.name}: {'ok' if ok else 'FAILED'}: {text}", flush=True)
    return {"fake": fake, "steps": rows, "ok": all(r["ok"] for r in rows)}


def render(res: dict[str, Any]) -> str:
    lines = [f"dgcompat warmup on {'the CPU fake JIT (orchestration only)' if res['fake'] else 'the GPU'}: "
             f"{'every step passed' if res['ok'] else 'SOME STEPS FAILED'}", "",
             "| step | what | verdict | process wall | result |", "|---|---|---|---|---|"]
    for r in res["steps"]:
        lines.append(f"| {r['step']} | {r['what']} | {'ok' if r['ok'] else 'FAILED'} | "
                     f"{r.get('wall_s', 0):.1f} s | {r['text']} |")
    return "\n".join(lines)


def _find(folders: list[Path], dist: str, version: str) -> Path | None:
    """The first wheel of ``dist==version`` in ``folders`` (searched recursively, in order)."""
    from packaging.utils import canonicalize_name, parse_wheel_filename
    from packaging.version import Version

    for folder in folders:
        for wheel in sorted(folder.rglob("*.whl")) if folder.is_dir() else []:
            try:
                name, ver, _build, _tags = parse_wheel_filename(wheel.name)
            except ValueError:
                continue
            if name == canonicalize_name(dist) and ver == Version(version):
                return wheel
    return None


def wheels(folders: list[Path], release: str) -> list[Path]:
    """The sgl-deep-gemm ``release`` wheel in ``folders`` and the apache-tvm-ffi wheel its metadata pins."""
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    wheel = _find(folders, "sgl-deep-gemm", release)
    if wheel is None:
        raise SystemExit(f"warmup_gpu: no sgl-deep-gemm {release} wheel in {', '.join(map(str, folders))}")
    with zipfile.ZipFile(wheel) as zf:
        meta = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))
        text = zf.read(meta).decode()
    pins = []
    for line in text.splitlines():
        if line.startswith("Requires-Dist:"):
            req = Requirement(line.split(":", 1)[1].strip())
            pinned = [spec.version for spec in req.specifier if spec.operator == "=="]
            if canonicalize_name(req.name) == "apache-tvm-ffi" and pinned and not (req.marker and "extra" in str(req.marker)):
                pins.append(pinned[0])
    out = [wheel]
    if pins:
        tvm = _find(folders, "apache-tvm-ffi", pins[0])
        if tvm is None:
            raise SystemExit(f"warmup_gpu: {wheel.name} needs apache-tvm-ffi=={pins[0]}; no such wheel found")
        out.append(tvm)
    return out


def _fake_env(work: Path) -> dict[str, str]:
    sys.path[:0] = [str(REPO)]
    from testsupport import fake_jit

    return fake_jit.site_env(work, 0.02)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["install"]:
        p = argparse.ArgumentParser(prog="python -m bench.warmup_gpu install")
        p.add_argument("--wheels", type=Path, action="append", required=True)
        p.add_argument("--release", default="0.1.4")
        p.add_argument("--target", type=Path, required=True)
        a = p.parse_args(argv[1:])
        files = wheels(a.wheels, a.release)
        print("installing", " ".join(f.name for f in files), flush=True)
        return subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--target",
                               str(a.target), *map(str, files)]).returncode
    p = argparse.ArgumentParser(prog="python -m bench.warmup_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where the log, results and summary go")
    p.add_argument("--work", type=Path, required=True, help="an empty folder for the runs' cache folders")
    p.add_argument("--deadline", type=float, default=470.0, help="seconds for all steps together")
    p.add_argument("--fake", action="store_true", help="the CPU fake JIT with small bounds (the orchestration only)")
    args = p.parse_args(argv)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO), str(REPO / "conformance"), env.get("PYTHONPATH", ""))
                                        if x)
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    if args.fake:
        fake = _fake_env(args.work)
        env.update(fake, PYTHONPATH=os.pathsep.join([fake["PYTHONPATH"], env["PYTHONPATH"]]))
    res = run(args.out, args.work, args.deadline, fake=args.fake, env=env)
    text = render(res)
    (args.out / RESULTS).write_text(json.dumps(res, indent=2, default=str) + "\n")
    (args.out / SUMMARY).write_text(text + "\n")
    print(text)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
