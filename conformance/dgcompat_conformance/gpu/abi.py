"""The ABI health check: does this release's native library load, and does a tiny call see its tensors?

No sgl-deep-gemm wheel declares the torch it was built against. A wheel built for another torch
either fails to load (undefined torch symbol) or, worse, loads and then mis-reads every tensor it
is given (``dim == 2 or dim == 3`` asserts on plain 2-D tensors). Only a real call shows the
second case, so the check binds deep_gemm through dgcompat and makes two tiny calls whose results
are compared with :mod:`dgcompat.reference`:

1. ``get_paged_mqa_logits_metadata`` on a ``(2, 1)`` lengths tensor (host-side shape asserts fire
   here first, before any kernel is compiled), compared exactly with the reference schedule;
2. ``fp8_gemm_nt`` with ``m, n, k = 64, 128, 256``, compared with the reference GEMM.

Everything runs in a child process (``python -m dgcompat_conformance.gpu.abi --child``) under a deadline, so
a crash or a hang of the native library cannot take the caller down. :func:`abi_check` returns a
plain dict; its ``import``/``call``/``verdict``/``detail`` keys are the ones ``dgcompat doctor``
prints.

Without ``DGCOMPAT_ALLOW_TORCH_MISMATCH=1`` dgcompat refuses to import a release whose native
library needs another torch (it knows the pairing from :data:`dgcompat.detection.EXPECTED_TORCH`);
``allow_torch_mismatch=True`` imports it anyway, to show what the mismatch actually does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import dgcompat
from dgcompat import _tooling
from dgcompat.errors import DeepGemmUnavailableError, IncompatibleBuildError

from .._paths import with_import_path
from .._text import short
from .cases import calc_diff

__all__ = ["abi_check", "kill_group", "MARKER"]

#: Prefix of the one stdout line the child writes (deep_gemm and nvcc may print other lines).
MARKER = "DGCOMPAT-ABI "

_GEMM_SHAPE = (64, 128, 256)
_GEMM_TOLERANCE = 1e-3


def _chain(exc: BaseException | None) -> str:
    """``Type: message`` of an exception and of every exception behind it (loaders wrap the
    dynamic linker's "undefined symbol" message in their own)."""
    parts: list[str] = []
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        text = f"{type(exc).__name__}: {exc}"
        if not any(text in p for p in parts):
            parts.append(text)
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(parts)


# --- the child ---------------------------------------------------------------------------------

def _describe_release() -> dict[str, Any]:
    rel = dgcompat.release()
    return {
        "release": rel.label,
        "distribution": rel.dist,
        "version": str(rel.version) if rel.version is not None else None,
        "binding": rel.binding,
        "torch": str(rel.torch) if rel.torch is not None else None,
        "expected_torch": str(rel.expected_torch) if rel.expected_torch is not None else None,
        "torch_ok": rel.torch_ok,
        "problems": list(rel.problems),
    }


def _call_metadata() -> dict[str, Any]:
    import torch  # noqa: PLC0415 (torch loads only in the check's child)

    from dgcompat import reference  # noqa: PLC0415 (torch loads only in the check's child)

    lens = torch.tensor([[100], [300]], dtype=torch.int32, device="cuda")
    num_sms = dgcompat.get_num_sms()
    sched = dgcompat.get_paged_mqa_logits_metadata(lens, 64, num_sms)
    torch.cuda.synchronize()
    ok = bool(reference.paged_schedule_matches(sched, lens, 64, num_sms))
    detail = f"schedule {tuple(sched.shape)} for lengths [[100], [300]] on {num_sms} SMs"
    if not ok:
        detail += f" differs from the reference schedule: first rows {sched[:3].tolist()}"
    return {"name": "get_paged_mqa_logits_metadata", "ok": ok, "detail": detail}


def _call_gemm() -> dict[str, Any]:
    import torch  # noqa: PLC0415 (torch loads only in the check's child)

    from dgcompat import reference  # noqa: PLC0415 (torch loads only in the check's child)

    m, n, k = _GEMM_SHAPE
    gen = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn((m, k), device="cuda", dtype=torch.bfloat16, generator=gen)
    b = torch.randn((n, k), device="cuda", dtype=torch.bfloat16, generator=gen)
    aq = reference.per_token_cast_to_fp8(a)
    bq = reference.per_block_cast_to_fp8(b)
    d = torch.empty((m, n), device="cuda", dtype=torch.bfloat16)
    dgcompat.fp8_gemm_nt(aq, bq, d)
    ref = torch.empty((m, n), device="cuda", dtype=torch.float32)
    reference.fp8_gemm_nt(aq, bq, ref)
    torch.cuda.synchronize()
    diff = calc_diff(d, ref)
    ok = diff < _GEMM_TOLERANCE
    return {"name": "fp8_gemm_nt", "ok": ok,
            "detail": f"m,n,k={m},{n},{k}: diff={diff:.2e} (tolerance {_GEMM_TOLERANCE:g})", "diff": diff}


def _child() -> dict[str, Any]:
    out: dict[str, Any] = {"allow_torch_mismatch": os.environ.get("DGCOMPAT_ALLOW_TORCH_MISMATCH") == "1"}
    try:
        out.update(_describe_release())
    except Exception as exc:  # noqa: BLE001 - detection itself failing is a finding, not a crash
        out["detect_error"] = short(f"{type(exc).__name__}: {exc}", 600)

    t0 = time.perf_counter()
    load: dict[str, Any] = {"ok": False, "refused": False, "error": None, "seconds": None}
    try:
        _tooling.load_backend()
        load["ok"] = True
    except DeepGemmUnavailableError as exc:
        load["error"] = short(str(exc), 600)
    except IncompatibleBuildError as exc:
        # Refused before importing (torch mismatch known from the table), or the import itself failed.
        load["refused"] = exc.__cause__ is None
        load["error"] = short(_chain(exc.__cause__) if exc.__cause__ is not None else str(exc), 900)
    except Exception as exc:  # noqa: BLE001 - a load failure of any kind is the finding
        load["error"] = short(_chain(exc), 900)
    load["seconds"] = round(time.perf_counter() - t0, 3)
    out["load"] = load
    out["calls"] = []
    out["import"] = load["ok"]
    out["call"] = None
    if not load["ok"]:
        out["ok"] = False
        out["detail"] = ("dgcompat refused to import it: " if load["refused"] else "import failed: ") + str(load["error"])
        out["verdict"] = "refused (built for another torch)" if load["refused"] else "does not load"
        return out

    import torch  # noqa: PLC0415 (torch loads only in the check's child)

    out["cuda_initialized_by_import"] = bool(torch.cuda.is_initialized())
    if not torch.cuda.is_available():
        out["ok"] = None
        out["detail"] = "deep_gemm loads; no CUDA device, so no call was checked"
        out["verdict"] = "loads (kernels not checked)"
        return out
    ok = True
    for fn in (_call_metadata, _call_gemm):
        try:
            rec = fn()
        except Exception as exc:  # noqa: BLE001 - a call failure of any kind is the finding
            name = {"_call_metadata": "get_paged_mqa_logits_metadata", "_call_gemm": "fp8_gemm_nt"}[fn.__name__]
            rec = {"name": name, "ok": False,
                   "detail": short(f"{type(exc).__name__}: {exc}", 600)}
        out["calls"].append(rec)
        ok = ok and bool(rec["ok"])
        if not rec["ok"]:
            break  # a mis-marshalled release fails every call the same way; one is proof enough
    out["call"] = ok
    out["ok"] = ok
    out["detail"] = "; ".join(f"{c['name']}: {'ok' if c['ok'] else 'FAILED'}: {c['detail']}" for c in out["calls"])
    out["verdict"] = "ok" if ok else "loads, but kernels fail"
    return out


# --- the parent --------------------------------------------------------------------------------

def _child_env(env: Mapping[str, str] | None, allow_torch_mismatch: bool) -> dict[str, str]:
    base = dict(os.environ if env is None else env)
    # Both wings after the release's folder, so that its deep_gemm wins.
    base["PYTHONPATH"] = with_import_path(base.get("PYTHONPATH", ""), first=False)
    base["PYTHONUNBUFFERED"] = "1"
    if allow_torch_mismatch:
        base["DGCOMPAT_ALLOW_TORCH_MISMATCH"] = "1"
    else:
        base.pop("DGCOMPAT_ALLOW_TORCH_MISMATCH", None)
    return base


def abi_check(timeout: float = 180.0, *, env: Mapping[str, str] | None = None, allow_torch_mismatch: bool = False,
              python: str | None = None) -> dict[str, Any]:
    """Run the ABI health check in a child process and return what it found.

    - ``timeout``: seconds before the child is killed and the result is ``verdict == "hang"`` (the
      first call JIT-compiles two small kernels, a few seconds each).
    - ``env``: the child's environment (default: this process's); ``PYTHONPATH`` gets this
      repository appended so that ``conformance`` and ``dgcompat`` import.
    - ``allow_torch_mismatch``: import a release dgcompat knows was built for another torch.

    Returns a dict with ``ok`` (True / False / None where no GPU could check calls), ``detail``,
    ``verdict`` (``"ok"``, ``"loads (kernels not checked)"``, ``"refused (built for another torch)"``,
    ``"does not load"``, ``"loads, but kernels fail"``, ``"hang"`` or ``"crashed"``), ``import`` and
    ``call`` (as ``dgcompat doctor`` reads them), ``load`` and ``calls`` (each step), the detected
    release and torch pairing, and ``seconds``.
    """
    cmd = [python or sys.executable, "-m", "dgcompat_conformance.gpu.abi", "--child"]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=_child_env(env, allow_torch_mismatch), start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(proc)
        return {"ok": False, "import": None, "call": None, "verdict": "hang", "load": None, "calls": [],
                "allow_torch_mismatch": allow_torch_mismatch,
                "detail": f"no answer within {timeout:.0f} s: the child was killed", "seconds": round(timeout, 1)}
    seconds = round(time.perf_counter() - t0, 3)
    line = next((ln for ln in reversed(stdout.splitlines()) if ln.startswith(MARKER)), None)
    if line is None:
        tail = [ln for ln in (stderr or stdout).strip().splitlines() if ln.strip()][-4:]
        return {"ok": False, "import": None, "call": None, "verdict": "crashed", "load": None, "calls": [],
                "allow_torch_mismatch": allow_torch_mismatch,
                "detail": short(f"child exited with {proc.returncode}: " + " | ".join(tail), 600), "seconds": seconds}
    result: dict[str, Any] = json.loads(line[len(MARKER):])
    result["seconds"] = seconds
    return result


def kill_group(proc: subprocess.Popen[str]) -> None:
    """Kill the child and everything it started (nvcc, ...), then reap it."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()
    try:
        proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        pass


def main(argv: list[str] | None = None) -> int:
    """``python -m dgcompat_conformance.gpu.abi [--child] [--allow-torch-mismatch] [--timeout S]``."""
    args = list(sys.argv[1:] if argv is None else argv)
    if "--child" in args:
        try:
            result = _child()
        except BaseException as exc:  # report, never die silently: the parent reads one line
            if isinstance(exc, KeyboardInterrupt):
                raise
            result = {"ok": False, "import": None, "call": None, "verdict": "crashed",
                      "detail": short(f"{type(exc).__name__}: {exc}", 600)}
        print(MARKER + json.dumps(result, default=str), flush=True)
        return 0
    timeout = 180.0
    if "--timeout" in args:
        timeout = float(args[args.index("--timeout") + 1])
    result = abi_check(timeout, allow_torch_mismatch="--allow-torch-mismatch" in args)
    print(json.dumps(result, indent=1, default=str))
    return 0 if result.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
