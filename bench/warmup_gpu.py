"""``python -m bench.warmup_gpu``: the warmup measurements of ``bench/warmup_gpu.sh``, one step after another, for one
deep_gemm lineage installed in ``--site``.

Each step is a fresh process with a hard time limit (all of them within ``--deadline`` seconds); its output goes
to ``<out>/warmup-log.txt``, its parsed result to ``<out>/warmup-results.json``, and a summary table (also printed)
to ``<out>/warmup-summary.txt``, ending with the rows of the relocation table (``Done when`` of the cache-move
work). The groups of steps:

- ``cold`` (sgl-deep-gemm 0.1.4): ``dgcompat warmup --preset deepseek-v3-dense --max-tokens 4096`` on an empty
  folder (the six dense FP8 GEMMs at every M up to 4096, every scale form: the 15 s goal), then NVCC's own time
  per kernel of that folder and the floor (``python -m bench.nvcc_floor``: sum of NVCC seconds / cores + the first
  worker's start-up, printed beside the cold time);
- ``serve`` (0.1.4): serving processes with ``DG_JIT_CACHE_DIR`` that folder and nothing else: the 55 M values
  with row-major scales (the real deep_gemm), every scale form and the layout helpers (the real deep_gemm, then
  ``import deep_gemm`` under ``python -m dgcompat run``), the same with no ``DG_JIT_CACHE_DIR`` at all (``~/.deep_gemm``
  of a ``HOME`` that points there); the same warmup again (a warm start, 1 s goal) and ``--print-cache-dir``;
- ``relocate`` (every lineage; the other lineages first warm the same description): ``--export`` of the folder;
  the folder moved (serving: 0 compiles); then the install moved too (its folder copied elsewhere, the old one
  renamed away): a check of a copy of the moved folder *before* dgcompat touches it (what deep_gemm alone
  compiles, the issue's "39 of 39"), ``--adopt``, serving (0 compiles), ``--import`` of the export at the new path
  into a new folder with ``--check`` (0 compiles), then that folder made read-only and four ranks serving from it
  at once, ``--check-only`` and ``--print-cache-dir`` on it (0 compiles, nothing written); as root, these readers
  give up ``CAP_DAC_OVERRIDE`` so that the folder really is read-only to them;
- ``scale`` (0.1.4, ``--with-scale``): SGLang's bound (every M up to 16384) and the DeepSeek-V3.2 layer set with
  ``--check``, and their serving processes.

Every serving row must compile nothing. ``--fake`` runs the same steps against the CPU fake JIT of the tests
(``--lineage compiler``, ``bundled`` or ``deep_jit``) with small bounds: it checks the orchestration, it measures
nothing. ``install`` (a sub-command) installs the sgl-deep-gemm wheel and the apache-tvm-ffi wheel its metadata pins
into a folder; ``pack`` writes the ``deep_gemm/`` a vllm wheel vendors into the .tgz ``--lineage vllm-0.34.0`` takes.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testsupport.folders import readonly, writable
from testsupport.record import header, write_json

REPO = Path(__file__).resolve().parent.parent
SUMMARY = "warmup-summary.txt"
RESULTS = "warmup-results.json"
LOG = "warmup-log.txt"

#: The lineages a run measures, by the name the shell script takes: (fake layout, the real install it stands for).
LINEAGES = {"0.1.4": "compiler", "sgk-0.4.2": "bundled", "vllm-0.34.0": "deep_jit",
            "compiler": "compiler", "bundled": "bundled", "deep_jit": "deep_jit"}


@dataclass
class Step:
    """One process of the run (or ``ranks`` of them at once): its command, extra environment, time limit and what
    it must show. ``cmd`` may be a function of the results so far; ``before``: an action on the run's state (moving
    folders) before it starts; ``reader``: run without write access to read-only folders."""

    name: str
    what: str
    cmd: list[str] | Callable[[dict[str, Any]], list[str]]
    limit: float
    env: dict[str, str] = field(default_factory=dict)
    unset: tuple[str, ...] = ()
    kind: str = "warmup"  # warmup | serve | check | text | adopt | import | nvcc
    goal_s: float | None = None
    expect: dict[str, Any] = field(default_factory=dict)
    before: Callable[[dict[str, Any]], None] | None = None
    ranks: int = 1
    reader: bool = False
    group: str = ""


def _dgcompat(*args: str) -> list[str]:
    return [sys.executable, "-m", "dgcompat", "warmup", *args]


def _serve(*args: str, via_run: bool = False) -> list[str]:
    cmd = [sys.executable, "-m", "bench.warmup_serve", *args]
    return [sys.executable, "-m", "dgcompat", "run", "--", *cmd] if via_run else cmd


def _move(src: Path, dst: Path) -> Callable[[dict[str, Any]], None]:
    def act(state: dict[str, Any]) -> None:
        shutil.rmtree(dst, ignore_errors=True)
        src.rename(dst)
    return act


def _move_install(state: dict[str, Any]) -> None:
    """The virtualenv moved: the same files at another path, the old path gone (renamed away, kept for the log)."""
    site, moved = Path(state["site"]), Path(state["site"]).with_name("site-moved")
    shutil.rmtree(moved, ignore_errors=True)
    shutil.copytree(site, moved, symlinks=True)
    site.rename(site.with_name("site-gone"))
    state["site"] = str(moved)


def _in_turn(*actions: Callable[[dict[str, Any]], None]) -> Callable[[dict[str, Any]], None]:
    """One ``before`` action doing ``actions`` one after the other."""
    def act(state: dict[str, Any]) -> None:
        for action in actions:
            action(state)
    return act


def _copy(src: Path, dst: Path) -> Callable[[dict[str, Any]], None]:
    def act(state: dict[str, Any]) -> None:
        shutil.rmtree(dst, ignore_errors=True)
        shutil.copytree(src, dst, symlinks=True)
    return act


def _readonly(folder: Path) -> Callable[[dict[str, Any]], None]:
    def act(state: dict[str, Any]) -> None:
        readonly(folder)
        state.setdefault("readonly", []).append(str(folder))
    return act


def steps(work: Path, *, fake: bool, lineage: str = "0.1.4", scale: bool = False) -> list[Step]:
    """The run's steps for ``lineage`` (small bounds with ``fake``)."""
    layout = LINEAGES[lineage]
    full = layout == "compiler"  # the cold time and the serving rows: sgl-deep-gemm 0.1.4
    dense_m, default_m, layers_m, batch = (256, 512, 256, 64) if fake else (4096, 16384, 8192, 1024)
    c1, home = work / "dense", work / "home"
    moved, as_is, imported, artifact = work / "dense-moved", work / "dense-as-is", work / "imported", work / "dense.dgcache"
    dense55 = ["--set", "dense", "--max-tokens", str(dense_m), "--sample", "55"] if fake else ["--set", "dense55"]
    forms = ["--forms", "row,tma,helpers"]
    quiet = ["--no-progress", "--json"]
    preset = ["--preset", "deepseek-v3-dense", "--max-tokens", str(dense_m)]
    out: list[Step] = []
    if full:
        out += [
            Step("dense-4096", f"warmup: 6 dense FP8 GEMMs, every M <= {dense_m}, cold", _dgcompat(*preset, "--cache-dir",
                 str(c1), *quiet), 150, goal_s=None if fake else 15.0, group="cold"),
            Step("nvcc-floor", "NVCC's own time per kernel of that folder; floor = sum / cores + first worker up",
                 lambda r: [sys.executable, "-m", "bench.nvcc_floor", "--cache-dir", str(c1), "--first-up",
                            str(r["dense-4096"]["first_up_s"]), "--cold", str(r["dense-4096"]["wall_s"])],
                 240, kind="nvcc", group="cold"),
            Step("serve-row", "serve: 55 M values, row-major fp32 scales, real deep_gemm",
                 _serve(*dense55, "--forms", "row"), 120, {"DG_JIT_CACHE_DIR": str(c1)}, kind="serve", group="serve"),
            Step("serve-forms", "serve: 55 M values, row + MN-major TMA + helpers, real deep_gemm",
                 _serve(*dense55, *forms), 120, {"DG_JIT_CACHE_DIR": str(c1)}, kind="serve", group="serve"),
            Step("serve-run", "serve: the same, import deep_gemm under python -m dgcompat run",
                 _serve(*dense55, *forms, via_run=True), 120, {"DG_JIT_CACHE_DIR": str(c1)}, kind="serve",
                 group="serve"),
            Step("serve-home", "serve: the same, no DG_JIT_CACHE_DIR (HOME/.deep_gemm is the warmed folder)",
                 _serve(*dense55, *forms), 120, {"HOME": str(home)}, ("DG_JIT_CACHE_DIR",), kind="serve",
                 group="serve"),
            Step("dense-warm", "warmup: the same again (warm start)", _dgcompat(*preset, "--cache-dir", str(c1), *quiet),
                 60, goal_s=None if fake else 1.0, expect={} if fake else {"method": "record"}, group="serve"),
            Step("print-cache-dir", "--print-cache-dir with DG_JIT_CACHE_DIR set to what it printed",
                 _dgcompat("--print-cache-dir"), 30, {"DG_JIT_CACHE_DIR": str(c1)}, kind="text",
                 expect={"stdout": str(c1)}, group="serve"),
        ]
    else:
        out.append(Step("dense-4096", f"warmup: 6 dense FP8 GEMMs, every M <= {dense_m}, cold",
                        _dgcompat(*preset, "--cache-dir", str(c1), *quiet), 240, group="relocate"))
    serve_run = _serve(*dense55, *forms, via_run=True)
    out += [
        Step("export", "--export: the folder's kernels and manifest into one file (a warm start, then the file)",
             _dgcompat(*preset, "--cache-dir", str(c1), "--export", str(artifact), "--no-progress"), 120,
             kind="text", expect={"contains": "dgcompat warmup --export: "}, group="relocate"),
        Step("moved-folder", "serve: the folder moved, the same install",
             serve_run, 120, {"DG_JIT_CACHE_DIR": str(moved)}, kind="serve", before=_move(c1, moved), group="relocate"),
        Step("moved-both-as-is", "check: folder and install moved, deep_gemm alone (a copy of the folder, before "
             "dgcompat touches it; --check-sample 2)",
             _dgcompat(*preset, "--cache-dir", str(as_is), "--check-only", "--check-sample", "2", "--no-progress"), 300,
             kind="check-count", before=_in_turn(_move_install, _copy(moved, as_is)), group="relocate"),
        Step("adopt", "--adopt: the moved folder's kernels re-keyed for the moved install",
             _dgcompat("--adopt", "--cache-dir", str(moved)), 120, kind="text", expect={"contains": "kernels re-keyed"},
             group="relocate"),
        Step("moved-both", "serve: folder and install moved, after --adopt", serve_run, 120,
             {"DG_JIT_CACHE_DIR": str(moved)}, kind="serve", group="relocate"),
        Step("import", "--import of the export at the moved install into a new folder, then --check",
             _dgcompat("--import", str(artifact), "--cache-dir", str(imported), "--check", "--no-progress", "--json"),
             300, kind="import", group="relocate"),
        Step("ranks-readonly", "serve: 4 ranks at once from the imported folder, read-only", serve_run, 150,
             {"DG_JIT_CACHE_DIR": str(imported)}, kind="serve", before=_readonly(imported), ranks=4, reader=True,
             group="relocate"),
        Step("check-readonly", "--check-only on the read-only folder", _dgcompat(*preset, "--cache-dir", str(imported),
             "--check-only", "--no-progress"), 300, kind="check-count", reader=True, expect={"compiled": 0},
             group="relocate"),
        Step("print-readonly", "--print-cache-dir with DG_JIT_CACHE_DIR the read-only folder",
             _dgcompat("--print-cache-dir"), 30, {"DG_JIT_CACHE_DIR": str(imported)}, kind="text",
             expect={"stdout": str(imported)}, reader=True, group="relocate"),
    ]
    if full and scale:
        c2, c3 = work / "default", work / "layers"
        out += [
            Step("dense-default", f"warmup: 6 dense FP8 GEMMs, every M <= {default_m} (SGLang's bound), cold",
                 _dgcompat("--preset", "deepseek-v3-dense", *(["--max-tokens", str(default_m)] if fake else []),
                           "--cache-dir", str(c2), *quiet), 240, group="scale"),
            Step("serve-default", f"serve: 6 dense GEMMs at 64 M values <= {default_m}, row + TMA + helpers",
                 _serve("--set", "dense", "--max-tokens", str(default_m), "--sample", "64", *forms), 120,
                 {"DG_JIT_CACHE_DIR": str(c2)}, kind="serve", group="scale"),
            Step("layers-8192", f"warmup + --check: DeepSeek-V3.2 layer set, every M <= {layers_m}, cold",
                 _dgcompat("--preset", "deepseek-v3.2", "--max-tokens", str(layers_m), "--max-batch", str(batch),
                           "--cache-dir", str(c3), "--check", *quiet), 300, kind="check",
                 goal_s=None if fake else 60.0, group="scale"),
            Step("serve-layers", f"serve: the layer set (dense, MoE, every paged batch <= {batch}, ragged)",
                 _serve("--set", "layers", "--max-tokens", str(layers_m), "--max-batch", str(batch), "--sample", "24",
                        *forms), 150, {"DG_JIT_CACHE_DIR": str(c3)}, kind="serve", group="scale"),
        ]
    return out


def _parse(kind: str, stdout: str) -> Any:
    if kind == "text":
        return stdout.strip()
    if kind in ("serve", "nvcc"):
        lines = [ln for ln in stdout.splitlines() if ln.startswith("RESULT ")]
        return json.loads(lines[-1][len("RESULT "):]) if lines else None
    if kind == "check-count":
        line = next((ln for ln in stdout.splitlines() if ln.startswith("dgcompat warmup check")), "")
        words = line.split()
        if "compiled" not in words:
            return None
        at = words.index("compiled")
        return {"calls": int(words[at - 3]), "compiled": int(words[at + 1]), "line": line}
    start = stdout.find("{")
    return json.loads(stdout[start:]) if start >= 0 else None


def verdict(step: Step, rc: int | None, wall: float, got: Any) -> tuple[bool, str]:
    """(passed, what it showed) for one step."""
    if rc != 0 and not (step.kind in ("check", "check-count") and rc == 1 and got):
        return False, f"exit {rc}" + (" (time limit)" if rc is None else "")
    if got is None:
        return False, "no result"
    if step.kind == "text":
        if "contains" in step.expect:
            line = next((ln for ln in got.splitlines() if step.expect["contains"] in ln), "")
            return bool(line), line or (got.splitlines()[0] if got else "nothing printed")
        return got == step.expect["stdout"], f"printed {got}"
    if step.kind == "serve":
        ok = got["compiled"] == 0 and got["new_files"] == 0
        return ok, (f"{got['calls']} calls, {got['compiled']} kernels compiled at serve time, {got['new_files']} new "
                    f"files ({got['calls_s']:.1f} s of calls)" + (f"; first: {got['misses'][:3]}" if not ok else ""))
    if step.kind == "check-count":
        ok = all(got.get(k) == v for k, v in step.expect.items())
        return ok, f"{got['calls']} sampled calls compiled {got['compiled']} kernels"
    if step.kind == "nvcc":
        own = list(got["nvcc_own_s"].values())
        ratio = got["cold_over_floor"]
        within = ratio is not None and ratio <= 0.10
        return True, (f"{got['kernels']} kernels: NVCC's own {got['nvcc_own_sum_s']:.1f} s ({min(own):.1f}-"
                      f"{max(own):.1f} s each, {got['jobs']} at a time); floor {got['floor_s']:.1f} s = sum / "
                      f"{got['cores']} cores + first worker up {got['first_up_s']:.1f} s; all cores, longest first: "
                      f"{got['compile_floor_s']:.1f} s; cold {got['cold_s']:.1f} s = "
                      f"{'n/a' if ratio is None else f'{ratio:+.0%}'} of the floor "
                      f"({'within' if within else 'NOT within'} 10%)")
    if step.kind == "import":
        imp, chk = got.get("import", {}), got.get("check", {})
        ok = (not imp.get("refused") and imp.get("installed", 0) + imp.get("present", 0) == imp.get("kernels", -1)
              and chk.get("compiled") == 0 and not chk.get("errors"))
        return ok, (f"{imp.get('kernels')} kernels in the file, {imp.get('installed')} relocated; check: "
                    f"{chk.get('calls')} sampled calls compiled {chk.get('compiled')}"
                    + (f"; refused {imp.get('refused')[:2]}" if imp.get("refused") else ""))
    report = got["warmup"] if step.kind == "check" else got
    text = (f"{report['method']}: {report['calls']} calls, {report.get('identified', 0)} identified, "
            f"{report['kernels']} kernels ({report['compiled']} compiled), {report['wall_s']:.1f} s "
            f"(workers up {report.get('first_up_s', 0):.1f}-{report.get('start_s', 0):.1f} s, identified "
            f"{report.get('identify_s', 0):.1f} s, compiled {report.get('compile_s', 0):.1f} s")
    if report.get("nvcc_runs"):
        text += f"; NVCC {report['nvcc_s']:.1f} s in {report['nvcc_runs']} runs"
    text += ")"
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


def _no_write_override() -> None:
    """(preexec) As root, give up CAP_DAC_OVERRIDE for the command: a read-only folder is then read-only to it."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(24, 1, 0, 0, 0) != 0:  # PR_CAPBSET_DROP CAP_DAC_OVERRIDE
        raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP, CAP_DAC_OVERRIDE)")


def _one(cmd: list[str], env: dict[str, str], limit: float, reader: bool) -> tuple[int | None, str, str]:
    extra: dict[str, Any] = {}
    if reader and hasattr(os, "geteuid") and os.geteuid() == 0:
        extra["preexec_fn"] = _no_write_override
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=str(REPO), timeout=limit, **extra, check=False)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        stdout = exc.stdout.decode(errors="replace") if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return None, stdout, stderr
    except (subprocess.SubprocessError, OSError) as exc:  # e.g. root without CAP_SETPCAP for a reader
        return -1, "", f"could not start the command: {exc}"


def run(out: Path, work: Path, deadline: float, *, fake: bool, env: dict[str, str], site: Path,
        lineage: str = "0.1.4", scale: bool = False) -> dict[str, Any]:
    from dgcompat.jit_warmup.cache import snapshot

    out.mkdir(parents=True, exist_ok=True)
    (work / "home").mkdir(parents=True, exist_ok=True)
    link = work / "home" / ".deep_gemm"
    if not link.exists():
        link.symlink_to(work / "dense", target_is_directory=True)
    t_end = time.monotonic() + deadline
    rows: list[dict[str, Any]] = []
    results: dict[str, Any] = {}
    state: dict[str, Any] = {"site": str(site)}
    with open(out / LOG, "a") as log:
        for step in steps(work, fake=fake, lineage=lineage, scale=scale):
            left = t_end - time.monotonic()
            if left < 10:
                rows.append({"step": step.name, "what": step.what, "ok": False, "text": "not run: out of time"})
                continue
            try:
                if step.before is not None:
                    step.before(state)
                cmd = step.cmd(results) if callable(step.cmd) else step.cmd
            except (OSError, KeyError, TypeError) as exc:  # a step before it failed, or a move did
                rows.append({"step": step.name, "what": step.what, "ok": False, "text": f"not run: {exc!r}"})
                continue
            full = {k: v for k, v in env.items() if k not in step.unset}
            full["PYTHONPATH"] = os.pathsep.join([state["site"], *full["PYTHONPATH"].split(os.pathsep)])
            full.update(step.env)
            limit = min(step.limit, left - 5)
            log.write(f"\n==== {step.name}: {step.what}\n$ {' '.join(cmd)}\n(site {state['site']}, "
                      f"{step.ranks} at once{', without write access' if step.reader else ''})\n")
            log.flush()
            watched = Path(step.env["DG_JIT_CACHE_DIR"]) if step.reader and "DG_JIT_CACHE_DIR" in step.env else None
            before = snapshot(watched) if watched is not None else None
            t0 = time.perf_counter()
            with ThreadPoolExecutor(step.ranks) as pool:
                runs = list(pool.map(lambda _: _one(cmd, full, limit, step.reader), range(step.ranks)))  # noqa: B023 - mapped now
            wall = time.perf_counter() - t0
            oks: list[bool] = []
            texts: list[str] = []
            got: Any = None
            for rc, stdout, stderr in runs:
                log.write(stdout[-20000:] + ("\n---- stderr\n" + stderr[-20000:] if stderr.strip() else "") +
                          f"\n---- exit {rc} after {wall:.1f} s\n")
                try:
                    got = _parse(step.kind, stdout)
                except (ValueError, KeyError):
                    got = None
                try:
                    ok, text = verdict(step, rc, wall, got)
                except (KeyError, TypeError, IndexError) as exc:
                    ok, text = False, f"unexpected result ({type(exc).__name__}: {exc})"
                oks.append(ok)
                texts.append(text)
            log.flush()
            ok, text = all(oks), texts[0] if step.ranks == 1 else f"{step.ranks} ranks: " + "; ".join(
                dict.fromkeys(texts))
            if watched is not None and before is not None:
                unchanged = snapshot(watched) == before
                ok = ok and unchanged
                text += "; the folder unchanged" if unchanged else "; THE FOLDER CHANGED"
            results[step.name] = got
            rows.append({"step": step.name, "what": step.what, "ok": ok, "text": text, "wall_s": round(wall, 2),
                         "exit": [r[0] for r in runs], "result": got, "group": step.group})
            print(f"[warmup-gpu] {step.name}: {'ok' if ok else 'FAILED'}: {text}", flush=True)
    for folder in state.get("readonly", []):  # so that the stage folder can be removed
        writable(folder)
    return {"fake": fake, "lineage": lineage, "steps": rows, "ok": all(r["ok"] for r in rows)}


def _row(res: dict[str, Any], name: str) -> dict[str, Any]:
    return next((r for r in res["steps"] if r["step"] == name), {"ok": False, "text": "not run", "result": None})


def relocation_table(res: dict[str, Any]) -> str:
    """The relocation rows of one lineage: what serving compiled after each move."""
    def compiled(name: str) -> str:
        r = _row(res, name)
        got = r.get("result")
        if not isinstance(got, dict):
            return f"- ({r['text']})"
        if "compiled" in got:
            return f"{got['compiled']} compiled by {got['calls']} sampled calls" if name == "moved-both-as-is" \
                else f"{got['compiled']} ({got['calls']} calls)"
        if "check" in got:
            return f"{got['check']['compiled']} (check: {got['check']['calls']} calls)"
        text: str = r["text"]
        return text
    ranks = _row(res, "ranks-readonly")
    return "\n".join([
        "| lineage | folder moved | folder and install moved: deep_gemm alone | after --adopt | exported, imported at"
        " another path, --check | read-only, 4 ranks |", "|---|---|---|---|---|---|",
        f"| {res['lineage']} | {compiled('moved-folder')} | {compiled('moved-both-as-is')} | {compiled('moved-both')} | "
        f"{compiled('import')} | {'0 compiled, nothing written' if ranks['ok'] else ranks['text']} |"])


def render(res: dict[str, Any]) -> str:
    lines = [f"dgcompat warmup on {'the CPU fake JIT (orchestration only)' if res['fake'] else 'the GPU'}, lineage "
             f"{res['lineage']}: {'every step passed' if res['ok'] else 'SOME STEPS FAILED'}", "",
             "| step | what | verdict | process wall | result |", "|---|---|---|---|---|"]
    for r in res["steps"]:
        lines.append(f"| {r['step']} | {r['what']} | {'ok' if r['ok'] else 'FAILED'} | "
                     f"{r.get('wall_s', 0):.1f} s | {r['text']} |")
    lines += ["", relocation_table(res)]
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


def pack(wheel: Path, out: Path) -> int:
    """Write ``vllm/third_party/deep_gemm/`` of ``wheel`` into ``out`` (a .tgz) as ``deep_gemm/``."""
    import io
    import tarfile

    prefix = "vllm/third_party/deep_gemm/"
    out.parent.mkdir(parents=True, exist_ok=True)
    count = 0
    with zipfile.ZipFile(wheel) as zf, tarfile.open(out, "w:gz") as tar:
        for name in zf.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                data = zf.read(name)
                info = tarfile.TarInfo("deep_gemm/" + name[len(prefix):])
                info.size, info.mode = len(data), 0o755 if name.endswith(".so") else 0o644
                tar.addfile(info, io.BytesIO(data))
                count += 1
    if not count:
        out.unlink()
        raise SystemExit(f"warmup_gpu pack: no {prefix} in {wheel}")
    print(f"wrote {out}: {count} files of {prefix} as deep_gemm/")
    return 0


def _fake_env(work: Path, site: Path, layout: str) -> dict[str, str]:
    """The fake JIT of ``layout`` installed in ``site`` and the fake NVCC (and ``nvidia-smi``) in ``work``."""
    sys.path[:0] = [str(REPO)]
    from testsupport import fake_jit

    fake_jit.write_site(site, layout)
    nvcc = fake_jit.write_nvcc(work / "fake-bin")
    smi = work / "fake-bin" / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA H200, 9.0'\n")
    smi.chmod(0o755)
    return {"DGCOMPAT_ALLOW_TORCH_MISMATCH": "1", "DGCOMPAT_ARCH": "sm90", "DG_JIT_NVCC_COMPILER": str(nvcc),
            "FAKE_NVCC_SECONDS": "0.02", "FAKE_JIT_LAYOUT": layout,
            "PATH": os.pathsep.join([str(work / "fake-bin"), os.environ.get("PATH", "")])}


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
                               str(a.target), *map(str, files)], check=False).returncode
    if argv[:1] == ["pack"]:
        p = argparse.ArgumentParser(prog="python -m bench.warmup_gpu pack",
                                    description="the deep_gemm/ a vllm wheel vendors, as the .tgz --lineage vllm-* takes")
        p.add_argument("--wheel", type=Path, required=True, help="a vllm wheel (e.g. vllm-0.34.0-*.whl)")
        p.add_argument("--out", type=Path, required=True, help="the .tgz to write (e.g. .gpu/v/vllm34-dg.tgz)")
        a = p.parse_args(argv[1:])
        return pack(a.wheel, a.out)
    p = argparse.ArgumentParser(prog="python -m bench.warmup_gpu", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="where the log, results and summary go")
    p.add_argument("--work", type=Path, required=True, help="an empty folder for the runs' cache folders")
    p.add_argument("--site", type=Path, required=True,
                   help="the folder deep_gemm is installed in (moved by the relocation steps); --fake: written there")
    p.add_argument("--lineage", choices=sorted(LINEAGES), default="0.1.4",
                   help="the install in --site: sgl-deep-gemm 0.1.4, the sglang-kernel 0.4.2 bundle or vLLM 0.34.0's "
                        "deep_gemm (--fake: compiler, bundled or deep_jit)")
    p.add_argument("--with-scale", action="store_true", help="also SGLang's bound and the V3.2 layer set (0.1.4)")
    p.add_argument("--deadline", type=float, default=470.0, help="seconds for all steps together")
    p.add_argument("--fake", action="store_true", help="the CPU fake JIT with small bounds (the orchestration only)")
    args = p.parse_args(argv)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(x for x in (str(REPO), str(REPO / "conformance"), env.get("PYTHONPATH", ""))
                                        if x)
    env.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    if args.fake:
        env.update(_fake_env(args.work, args.site, LINEAGES[args.lineage]))
    res = run(args.out, args.work, args.deadline, fake=args.fake, env=env, site=args.site, lineage=args.lineage,
              scale=args.with_scale)
    text = render(res)
    write_json(args.out / RESULTS, res, default=str)
    text = header() + "\n\n" + text
    (args.out / SUMMARY).write_text(text + "\n")
    print(text)
    return 0 if res["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
