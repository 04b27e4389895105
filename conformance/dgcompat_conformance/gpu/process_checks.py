"""The runtime's process contract and argument contract on a real GPU, in one command.

``python -m dgcompat_conformance.gpu.process_checks`` (with the deep_gemm to check installed, or
``DGCOMPAT_BACKEND=reference``) runs each check and prints one JSON object per line, then a
summary line; the exit status is 1 if any check failed.

- ``no-cuda-before-kernel``: ``import dgcompat``, ``release()`` and ``capabilities()`` leave
  ``torch.cuda.is_initialized()`` False (in a fresh interpreter that imported torch first).
- ``fork-after-capabilities``: a process that called ``capabilities()`` forks, and the child runs
  a CUDA kernel.
- ``sms-above-device``: ``set_num_sms`` / ``num_sms`` above the device's SM count raise
  ``BadArgumentError`` naming ``new_num_sms`` (every call), and the count is unchanged.
- ``layout-mistakes``: a transposed ``d``, a float16 ``c``, non-contiguous ``m_indices`` /
  ``masked_m`` and ``expected_m=0`` raise ``BadArgumentError`` naming the argument.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch

import dgcompat
from dgcompat import reference as R

from .._args import parse, returns_status

__all__ = ["CHECKS", "main"]

_FRESH = """
import json, torch
import dgcompat
dgcompat.release()
caps = dgcompat.capabilities()
print(json.dumps({"cuda_initialized": bool(torch.cuda.is_initialized()), "arch": caps.arch}))
"""

_FORK = """
import os, sys, torch
import dgcompat
dgcompat.capabilities()
pid = os.fork()
if pid == 0:
    x = torch.ones(4, device="cuda") * 2
    torch.cuda.synchronize()
    os._exit(0 if float(x.sum()) == 8.0 else 3)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                          env=dict(os.environ), check=False)


def check_no_cuda_before_kernel() -> dict[str, Any]:
    out = _run(_FRESH)
    if out.returncode != 0:
        return {"ok": False, "detail": out.stderr[-2000:]}
    got = json.loads(out.stdout.strip().splitlines()[-1])
    return {"ok": got["cuda_initialized"] is False, "detail": got}


def check_fork_after_capabilities() -> dict[str, Any]:
    out = _run(_FORK)
    return {"ok": out.returncode == 0, "detail": {"exit": out.returncode, "stderr": out.stderr[-2000:]}}


def _expect_bad(argument: str, call: Callable[[], Any]) -> str | None:
    for _ in range(2):  # every call, not only the first
        try:
            call()
        except dgcompat.BadArgumentError as exc:
            if exc.argument != argument:
                return f"named {exc.argument!r} instead of {argument!r}: {exc}"
        except Exception as exc:  # noqa: BLE001 - the point is to report what came instead
            return f"{type(exc).__name__} instead of BadArgumentError({argument!r}): {exc}"
        else:
            return f"accepted (expected BadArgumentError naming {argument!r})"
    return None


def check_sms_above_device() -> dict[str, Any]:
    device_sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
    before = dgcompat.get_num_sms()
    problems = [p for p in (_expect_bad("new_num_sms", lambda: dgcompat.set_num_sms(device_sms + 1)),
                            _expect_bad("new_num_sms", lambda: dgcompat.set_num_sms(1000)),
                            _expect_bad("new_num_sms", lambda: dgcompat.num_sms(1000).__enter__()))
                if p is not None]
    if dgcompat.get_num_sms() != before:
        problems.append(f"the SM count changed from {before} to {dgcompat.get_num_sms()}")
    return {"ok": not problems, "detail": problems or {"device_sms": device_sms}}


def check_layout_mistakes() -> dict[str, Any]:
    dev = "cuda"
    aq = R.per_token_cast_to_fp8(torch.randn(128, 256, device=dev))
    bq = R.per_block_cast_to_fp8(torch.randn(256, 256, device=dev))
    sfa = dgcompat.get_mn_major_tma_aligned_tensor(aq[1])
    a, b = (aq[0], sfa), bq
    d = torch.empty(128, 256, device=dev, dtype=torch.bfloat16)
    d32 = torch.empty(128, 256, device=dev, dtype=torch.float32)
    g = 2
    ga = R.per_token_cast_to_fp8(torch.randn(g * 128, 256, device=dev))
    ga = (ga[0], dgcompat.get_mn_major_tma_aligned_tensor(ga[1]))
    gb = [R.per_block_cast_to_fp8(torch.randn(256, 256, device=dev)) for _ in range(g)]
    gbq = (torch.stack([x[0] for x in gb]), torch.stack([x[1] for x in gb]))
    gd = torch.empty(g * 128, 256, device=dev, dtype=torch.bfloat16)
    m_indices = torch.zeros(g * 128, 2, device=dev, dtype=torch.int32)[:, 0]
    ma = [R.per_token_cast_to_fp8(torch.randn(128, 256, device=dev)) for _ in range(g)]
    maq = (torch.stack([x[0] for x in ma]),
           dgcompat.get_mn_major_tma_aligned_tensor(torch.stack([x[1] for x in ma])))
    md = torch.empty(g, 128, 256, device=dev, dtype=torch.bfloat16)
    masked_m = torch.full((g, 2), 64, device=dev, dtype=torch.int32)[:, 0]
    ok_masked = torch.full((g,), 64, device=dev, dtype=torch.int32)
    cases = {
        "transposed d": ("d", lambda: dgcompat.fp8_gemm_nt(a, b, torch.empty(256, 128, device=dev,
                                                                               dtype=torch.bfloat16).T)),
        "float16 c": ("c", lambda: dgcompat.fp8_gemm_nt(a, b, d32, c=d32.half())),
        "non-contiguous m_indices": ("m_indices", lambda: dgcompat.m_grouped_fp8_gemm_nt_contiguous(
            ga, gbq, gd, m_indices)),
        "non-contiguous masked_m": ("masked_m", lambda: dgcompat.m_grouped_fp8_gemm_nt_masked(
            maq, gbq, md, masked_m, 64)),
        "expected_m=0": ("expected_m", lambda: dgcompat.m_grouped_fp8_gemm_nt_masked(maq, gbq, md, ok_masked, 0)),
        "float32 grouped d": ("d", lambda: dgcompat.m_grouped_fp8_gemm_nt_masked(maq, gbq, md.float(), ok_masked,
                                                                                 64)),
    }
    dgcompat.fp8_gemm_nt(a, b, d)  # the valid call works
    problems = {name: p for name, (arg, call) in cases.items() if (p := _expect_bad(arg, call)) is not None}
    return {"ok": not problems, "detail": problems}


CHECKS: dict[str, Callable[[], dict[str, Any]]] = {
    "no-cuda-before-kernel": check_no_cuda_before_kernel,
    "fork-after-capabilities": check_fork_after_capabilities,
    "sms-above-device": check_sms_above_device,
    "layout-mistakes": check_layout_mistakes,
}


def _parser() -> argparse.ArgumentParser:
    return argparse.ArgumentParser(prog="python -m dgcompat_conformance.gpu.process_checks",
                                   description=__doc__.split("\n\n")[0] if __doc__ else None)


@returns_status
def main(argv: Sequence[str] | None = None) -> int:
    """Run every check (it takes no arguments: anything given is a usage error); 1 if one failed."""
    parse(_parser(), argv)  # it takes no arguments: this answers --help and refuses anything else
    failed = 0
    for name, check in CHECKS.items():
        try:
            result = check()
        except Exception as exc:  # noqa: BLE001 - a crashing check is a failed check, reported
            result = {"ok": False, "detail": f"{type(exc).__name__}: {exc}"}
        failed += not result["ok"]
        print(json.dumps({"check": name, **result}, default=str), flush=True)
    print(json.dumps({"checks": len(CHECKS), "failed": failed}))
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
